//! The probe library (`sdn_tests::probe`) against real namespaces, no OVS: two network
//! namespaces joined by a veth (`eth0` in each, 10.99.0.1/24 and 10.99.0.2/24). Each probe must
//! say yes when the peer answers and no when it is down or absent; crafted frames must be
//! accepted by the peer's kernel (so their checksums are right) and seen by a capture.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use sdn_tests::harness::{in_netns, require_root_and_ovs, Netns};
use sdn_tests::probe::{
    self, arp_probe, arp_probe_from, icmp_probe, interface_addresses, parallel, send_frame,
    tcp_echo_server, tcp_probe, udp_frame, unique_token, Capture, Endpoint,
};

const A: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
/// In the subnet, assigned to nobody.
const ABSENT: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 3);
const SHORT: Duration = Duration::from_millis(500);
const LONG: Duration = Duration::from_secs(3);

/// Two namespaces joined by a veth; deleted (with the veth) on drop.
struct Pair {
    a: Netns,
    b: Netns,
}

impl Pair {
    fn new() -> Pair {
        require_root_and_ovs();
        let a = Netns::new("prba");
        let b = Netns::new("prbb");
        a.exec(&[
            "ip",
            "link",
            "add",
            "eth0",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            b.name(),
        ])
        .unwrap();
        for (ns, ip) in [(&a, "10.99.0.1/24"), (&b, "10.99.0.2/24")] {
            ns.exec(&["ip", "addr", "add", ip, "dev", "eth0"]).unwrap();
            ns.exec(&["ip", "link", "set", "eth0", "up"]).unwrap();
        }
        Pair { a, b }
    }

    fn mac(ns: &Netns) -> probe::Mac {
        interface_addresses(ns.name(), "eth0").0
    }
}

#[test]
fn icmp_probe_answers_only_when_the_peer_replies() {
    let p = Pair::new();
    assert!(icmp_probe(p.a.name(), B, LONG), "peer up: echo reply");
    assert!(icmp_probe(p.b.name(), A, LONG), "and back");
    let t = Instant::now();
    assert!(!icmp_probe(p.a.name(), ABSENT, SHORT), "absent address");
    assert!(t.elapsed() < SHORT * 3, "bounded by the timeout");
    p.b.exec(&["ip", "link", "set", "eth0", "down"]).unwrap();
    assert!(!icmp_probe(p.a.name(), B, SHORT), "peer down");
    p.b.exec(&["ip", "link", "set", "eth0", "up"]).unwrap();
    assert!(icmp_probe(p.a.name(), B, LONG), "peer up again");
}

#[test]
fn tcp_probe_needs_an_echo_server_and_a_path() {
    let p = Pair::new();
    let server = tcp_echo_server(p.b.name(), 7000);
    assert_eq!(server.port(), 7000);
    let to = SocketAddrV4::new(B, 7000);
    assert!(tcp_probe(p.a.name(), to, LONG), "server up");
    assert!(
        !tcp_probe(p.a.name(), SocketAddrV4::new(B, 7001), SHORT),
        "nothing listens on 7001"
    );
    assert!(
        !tcp_probe(p.a.name(), SocketAddrV4::new(ABSENT, 7000), SHORT),
        "absent host"
    );
    p.b.exec(&["ip", "link", "set", "eth0", "down"]).unwrap();
    assert!(!tcp_probe(p.a.name(), to, SHORT), "peer down");
    p.b.exec(&["ip", "link", "set", "eth0", "up"]).unwrap();
    assert!(tcp_probe(p.a.name(), to, LONG), "peer up again");
    drop(server);
    assert!(!tcp_probe(p.a.name(), to, SHORT), "server stopped on drop");
    // Port 0: any free port.
    let any = tcp_echo_server(p.b.name(), 0);
    assert!(tcp_probe(
        p.a.name(),
        SocketAddrV4::new(B, any.port()),
        LONG
    ));
}

#[test]
fn arp_probe_asks_on_the_wire_not_the_neighbour_table() {
    let p = Pair::new();
    let mac_b = Pair::mac(&p.b);
    // A wrong permanent entry in a's neighbour table must not matter.
    p.a.exec(&[
        "ip",
        "neigh",
        "replace",
        "10.99.0.2",
        "lladdr",
        "02:00:00:00:00:99",
        "dev",
        "eth0",
        "nud",
        "permanent",
    ])
    .unwrap();
    assert_eq!(arp_probe(p.a.name(), "eth0", B, LONG), Some(mac_b));
    assert_eq!(
        arp_probe(p.b.name(), "eth0", A, LONG),
        Some(Pair::mac(&p.a))
    );
    assert_eq!(arp_probe(p.a.name(), "eth0", ABSENT, SHORT), None);
    // Any sender: the reply comes back addressed to the claimed address.
    let liar = Endpoint::new([0x02, 0, 0, 0, 0, 0x42], Ipv4Addr::new(10, 99, 0, 42));
    assert_eq!(
        arp_probe_from(p.a.name(), "eth0", liar, B, LONG),
        Some(mac_b)
    );
    p.b.exec(&["ip", "link", "set", "eth0", "down"]).unwrap();
    assert_eq!(arp_probe(p.a.name(), "eth0", B, SHORT), None, "peer down");
}

#[test]
fn capture_sees_crafted_frames_and_the_kernel_accepts_them() {
    let p = Pair::new();
    let a = Endpoint::new(Pair::mac(&p.a), A);
    let b = Endpoint::new(Pair::mac(&p.b), B);
    let marker = unique_token("capture");
    let socket = in_netns(p.b.name(), || UdpSocket::bind((B, 9999)).unwrap());
    socket
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();

    let cap = Capture::start(p.b.name(), "eth0", marker.as_bytes());
    let frame = udp_frame(a, 5555, b, 9999, marker.as_bytes());
    send_frame(p.a.name(), "eth0", &frame);
    // Not recorded: no marker.
    send_frame(
        p.a.name(),
        "eth0",
        &udp_frame(a, 5555, b, 9998, b"other payload"),
    );
    assert!(cap.wait_for(1, LONG), "capture saw the marked frame");

    // The kernel took the datagram: IPv4 and UDP checksums are right.
    let mut buf = [0u8; 256];
    let (n, from) = socket.recv_from(&mut buf).expect("crafted UDP delivered");
    assert_eq!(&buf[..n], marker.as_bytes());
    assert_eq!(from, "10.99.0.1:5555".parse().unwrap());

    // A crafted echo request is answered by the peer's kernel (ICMP checksum right), and the
    // reply, carrying the marker back, is captured on the sender's side.
    let back = Capture::start(p.a.name(), "eth0", marker.as_bytes());
    send_frame(
        p.a.name(),
        "eth0",
        &probe::icmp_echo_frame(a, b, 0x4242, 1, marker.as_bytes()),
    );
    assert!(back.wait_for(1, LONG), "echo reply to a crafted request");
    let replies = back.stop();
    let (_, _, _, ip) = probe::parse_ethernet(&replies[0]).unwrap();
    assert_eq!(ip[9], probe::PROTO_ICMP);
    assert_eq!(ip[20], 0, "an echo reply");

    // b saw the marked UDP frame, then the echo request (also marked), not the unmarked one.
    let frames = cap.stop();
    assert_eq!(frames.len(), 2, "only the marked frames: {frames:?}");
    assert_eq!(frames[0], frame, "recorded as sent");
    assert_eq!(
        probe::parse_ethernet(&frames[1]).unwrap().3[20],
        8,
        "echo request"
    );

    // A stopped capture sees nothing more; a new one sees a frame sent after its start.
    let late = Capture::start(p.b.name(), "eth0", marker.as_bytes());
    assert_eq!(late.count(), 0);
    send_frame(p.a.name(), "eth0", &frame);
    assert!(late.wait_for(1, LONG));
}

#[test]
fn many_probes_run_in_parallel_within_one_timeout() {
    let p = Pair::new();
    let server = tcp_echo_server(p.b.name(), 7100);
    let a = p.a.name().to_string();
    // 144 probes, a 12x12 matrix worth: half reachable, half not (1 s timeout each).
    let t = Instant::now();
    let results = parallel((0..144).map(|i| {
        let a = a.clone();
        move || -> (bool, bool) {
            let dst = if i % 2 == 0 { B } else { ABSENT };
            let ok = match i % 3 {
                0 => icmp_probe(&a, dst, Duration::from_secs(1)),
                1 => tcp_probe(&a, SocketAddrV4::new(dst, 7100), Duration::from_secs(1)),
                _ => arp_probe(&a, "eth0", dst, Duration::from_secs(1)).is_some(),
            };
            (i % 2 == 0, ok)
        }
    }));
    let elapsed = t.elapsed();
    for (i, (want, got)) in results.iter().enumerate() {
        assert_eq!(want, got, "probe {i} (kind {})", i % 3);
    }
    assert!(
        elapsed < Duration::from_secs(4),
        "144 probes took {elapsed:?}"
    );
    drop(server);
}
