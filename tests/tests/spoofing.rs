//! Spoofing, end to end (issue 4, deliverable 6): a pod that lies about its IP, its MAC or both,
//! or sends ARP claiming someone else's address, gets nothing through to any pod (its own tenant
//! included) nor to the node; a pod cannot inject VXLAN into the overlay.
//!
//! Setup: a real multitenant node (private OVS, the real `sdn-agent`, pods through the real
//! `sdn-cni`) with an attacker pod in `tenant-a` (VNID 11) and victims: a pod of the same
//! tenant, a pod of `tenant-b` (VNID 12), a global pod (`default`, VNID 0), and the node itself
//! (tun0, 10.128.0.1, in the OVS namespace).
//!
//! Method: crafted frames go out of the attacker's `eth0` through an `AF_PACKET` socket, each
//! carrying a marker unique to its case, while a capture on every victim's interface records
//! every frame that contains the marker. Every case has positive controls: the same kind of frame
//! with the attacker's true IP and MAC, sent after the spoofed ones, must arrive at the victims
//! it may legitimately reach (same tenant, global, node), which proves the captures and the path
//! work; only then, after a short grace period, may "nothing spoofed arrived" be believed. The
//! realistic variant changes the address inside the pod (`ip addr`, `ip link set address`) and
//! uses ordinary ICMP and TCP probes, plus captures matching the IPv4 source and destination (a
//! request that gets through but cannot be answered is still caught).
//!
//! With the userspace datapath the node's kernel also sees every frame on a pod's host veth:
//! `the_node_kernel_is_no_way_around_the_pipeline` checks that it neither answers the pod's ARP
//! nor routes or accepts what the pod sends to the veth's MAC (which would enter br0 from tun0
//! and take the VNID of whatever source IP it claims).
//!
//! Not covered here: ARP isolation between tenants for truthful ARP (that is the isolation
//! matrix, `tenants.rs`).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::thread;
use std::time::Duration;

use sdn_tests::harness::wait_until;
use sdn_tests::node::{AgentNode, CniPod, NodeOptions};
use sdn_tests::probe::{
    self, arp_frame, icmp_echo_frame, icmp_probe, interface_addresses, mac_to_string, parallel,
    send_frames, tcp_echo_server, tcp_probe, udp_frame, unique_token, vxlan, Arp, Capture,
    Endpoint, Mac, BROADCAST, VXLAN_PORT,
};

/// The node's gateway (tun0).
const GW: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 1);
/// The node's underlay IP as the harness configures it (`--node-ip`).
const NODE_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 111, 10);
/// In the node's subnet (10.128.0.0/23), never assigned in these tests.
const UNASSIGNED: Ipv4Addr = Ipv4Addr::new(10, 128, 1, 77);
/// In the cluster network, outside the node's subnet (another node's pod).
const REMOTE_POD: Ipv4Addr = Ipv4Addr::new(10, 129, 0, 5);
/// A MAC nobody has.
const ROGUE_MAC: Mac = [0x02, 0xde, 0xad, 0xbe, 0xef, 0x01];
const VNID_A: u32 = 11;
const VNID_B: u32 = 12;
/// How long after the controls arrived a spoofed frame may still be on its way.
const GRACE: Duration = Duration::from_millis(300);
/// Bound for a probe that must fail.
const MUST_FAIL: Duration = Duration::from_millis(500);
/// Bound for a probe that must succeed.
const MUST_WORK: Duration = Duration::from_secs(3);

/// The attacker and the victim pods.
struct Pods<'a> {
    attacker: CniPod<'a>,
    same: CniPod<'a>,
    other: CniPod<'a>,
    global: CniPod<'a>,
}

/// Somewhere a frame may arrive: a pod's eth0, or the node's tun0.
#[derive(Debug, Clone)]
struct Victim {
    name: &'static str,
    netns: String,
    ifname: &'static str,
    at: Endpoint,
    /// Whether the attacker, telling the truth, may reach it (same tenant, global, node).
    reachable: bool,
}

fn ip_of(pod: &CniPod<'_>) -> Ipv4Addr {
    pod.ip.parse().unwrap()
}

/// A multitenant node with `tenant-a` (11) and `tenant-b` (12), and the four pods.
fn start() -> AgentNode {
    let node = AgentNode::start(NodeOptions {
        mode: "multitenant",
        ..Default::default()
    });
    node.set_netnamespace("tenant-a", VNID_A);
    node.set_netnamespace("tenant-b", VNID_B);
    node
}

fn pods(node: &AgentNode) -> Pods<'_> {
    let (attacker, same, other, global) = thread::scope(|s| {
        let a = s.spawn(|| node.pod("tenant-a", "attacker"));
        let b = s.spawn(|| node.pod("tenant-a", "same"));
        let c = s.spawn(|| node.pod("tenant-b", "other"));
        let d = s.spawn(|| node.pod("default", "global"));
        (
            a.join().unwrap(),
            b.join().unwrap(),
            c.join().unwrap(),
            d.join().unwrap(),
        )
    });
    let p = Pods {
        attacker,
        same,
        other,
        global,
    };
    // The pods have the MACs the pipeline's spoof guard expects.
    for pod in [&p.attacker, &p.same, &p.other, &p.global] {
        let (mac, ip) = interface_addresses(pod.ns.name(), "eth0");
        assert_eq!(ip, Some(ip_of(pod)), "{}", pod.ip);
        assert_eq!(mac, probe::pod_mac(ip_of(pod)), "{}", pod.ip);
    }
    p
}

impl Pods<'_> {
    fn me(&self) -> Endpoint {
        Endpoint::pod(ip_of(&self.attacker))
    }

    fn attacker_ns(&self) -> &str {
        self.attacker.ns.name()
    }

    /// The victims: same tenant, other tenant, global pod, node (tun0).
    fn victims(&self, node: &AgentNode) -> Vec<Victim> {
        let pod = |name, p: &CniPod<'_>, reachable| Victim {
            name,
            netns: p.ns.name().to_string(),
            ifname: "eth0",
            at: Endpoint::pod(ip_of(p)),
            reachable,
        };
        vec![
            pod("same-tenant pod", &self.same, true),
            pod("other-tenant pod", &self.other, false),
            pod("global pod", &self.global, true),
            Victim {
                name: "node (tun0)",
                netns: node.ovs.netns().to_string(),
                ifname: "tun0",
                at: Endpoint::new(interface_addresses(node.ovs.netns(), "tun0").0, GW),
                reachable: true,
            },
        ]
    }
}

/// The markers of one case: captures look for `common`; spoofed frames carry `spoof`, the
/// positive controls `ok` (both contain `common`).
struct Markers {
    common: String,
    spoof: String,
    ok: String,
}

impl Markers {
    fn new(case: &str) -> Markers {
        let common = unique_token(&case.replace(' ', "-"));
        Markers {
            spoof: format!("{common}-spoofed"),
            ok: format!("{common}-control"),
            common,
        }
    }
}

/// A short description of a frame, for failure messages.
fn describe(frame: &[u8]) -> String {
    match probe::parse_ethernet(frame) {
        Some((dst, src, et, payload)) => {
            let inner = match et {
                probe::ETHERTYPE_ARP => {
                    Arp::parse(payload).map_or(String::new(), |a| format!(" {a:?}"))
                }
                probe::ETHERTYPE_IPV4 if payload.len() >= 20 => format!(
                    " {} -> {} proto {}",
                    Ipv4Addr::new(payload[12], payload[13], payload[14], payload[15]),
                    Ipv4Addr::new(payload[16], payload[17], payload[18], payload[19]),
                    payload[9]
                ),
                _ => String::new(),
            };
            format!(
                "{} -> {} type {et:#06x}{inner}",
                mac_to_string(&src),
                mac_to_string(&dst)
            )
        }
        None => format!("{} bytes", frame.len()),
    }
}

/// Sends `spoofed` then `controls` (victim index, frame) out of the attacker's eth0 with a
/// capture on every victim; asserts every control arrived and no spoofed frame did.
fn check_case(
    p: &Pods<'_>,
    victims: &[Victim],
    case: &str,
    m: &Markers,
    spoofed: &[Vec<u8>],
    controls: &[(usize, Vec<u8>)],
) {
    assert!(
        !spoofed.is_empty() && !controls.is_empty(),
        "{case}: empty case"
    );
    for f in spoofed {
        assert!(probe::contains(f, m.spoof.as_bytes()), "{case}: unmarked");
    }
    let caps: Vec<Capture> = victims
        .iter()
        .map(|v| Capture::start(&v.netns, v.ifname, m.common.as_bytes()))
        .collect();
    send_frames(p.attacker_ns(), "eth0", spoofed);
    let control_frames: Vec<Vec<u8>> = controls.iter().map(|(_, f)| f.clone()).collect();
    send_frames(p.attacker_ns(), "eth0", &control_frames);
    let want: Vec<usize> = (0..victims.len())
        .map(|i| controls.iter().filter(|(v, _)| *v == i).count())
        .collect();
    let ok_count = |c: &Capture| {
        c.frames()
            .iter()
            .filter(|f| probe::contains(f, m.ok.as_bytes()))
            .count()
    };
    wait_until(MUST_WORK, || {
        caps.iter().zip(&want).all(|(c, w)| ok_count(c) >= *w)
    });
    thread::sleep(GRACE);
    let mut failures = Vec::new();
    for ((v, c), w) in victims.iter().zip(caps).zip(&want) {
        let frames = c.stop();
        let ok = frames
            .iter()
            .filter(|f| probe::contains(f, m.ok.as_bytes()))
            .count();
        if ok < *w {
            failures.push(format!(
                "control: {} received {ok} of {w} truthful frames (capture or path broken)",
                v.name
            ));
        }
        for f in frames
            .iter()
            .filter(|f| probe::contains(f, m.spoof.as_bytes()))
        {
            failures.push(format!("LEAK to {}: {}", v.name, describe(f)));
        }
    }
    assert!(
        failures.is_empty(),
        "case {case:?} ({} spoofed frames, {} controls):\n  {}",
        spoofed.len(),
        controls.len(),
        failures.join("\n  ")
    );
}

/// UDP and ICMP from `from` to every victim, marked with `marker`.
fn ip_frames(from: Endpoint, victims: &[Victim], marker: &str) -> Vec<Vec<u8>> {
    victims
        .iter()
        .flat_map(|v| {
            [
                udp_frame(from, 40000, v.at, 9, marker.as_bytes()),
                icmp_echo_frame(from, v.at, 0x5151, 1, marker.as_bytes()),
            ]
        })
        .collect()
}

/// Truthful UDP from the attacker to every victim it may reach.
fn ip_controls(p: &Pods<'_>, victims: &[Victim], m: &Markers) -> Vec<(usize, Vec<u8>)> {
    victims
        .iter()
        .enumerate()
        .filter(|(_, v)| v.reachable)
        .map(|(i, v)| (i, udp_frame(p.me(), 40000, v.at, 9, m.ok.as_bytes())))
        .collect()
}

#[test]
fn spoofed_source_addresses_reach_no_pod_and_not_the_node() {
    let node = start();
    let p = pods(&node);
    let v = p.victims(&node);
    let me = p.me();
    let (same, other, global) = (v[0].at, v[1].at, v[2].at);
    let cases: Vec<(&str, Vec<Endpoint>)> = vec![
        (
            "source IP of another pod",
            vec![
                Endpoint::new(me.mac, same.ip),
                Endpoint::new(me.mac, other.ip),
                Endpoint::new(me.mac, global.ip),
                Endpoint::new(me.mac, GW),
            ],
        ),
        (
            "source IP assigned to nobody",
            vec![
                Endpoint::new(me.mac, UNASSIGNED),
                Endpoint::new(me.mac, REMOTE_POD),
                Endpoint::new(me.mac, Ipv4Addr::new(8, 8, 8, 8)),
                Endpoint::new(me.mac, Ipv4Addr::UNSPECIFIED),
            ],
        ),
        (
            "own IP, another MAC",
            vec![
                Endpoint::new(same.mac, me.ip),
                Endpoint::new(global.mac, me.ip),
                Endpoint::new(ROGUE_MAC, me.ip),
                Endpoint::new(BROADCAST, me.ip),
            ],
        ),
        (
            "IP and MAC both changed",
            vec![same, other, global, Endpoint::new(ROGUE_MAC, UNASSIGNED)],
        ),
    ];
    for (case, sources) in &cases {
        let m = Markers::new(case);
        let spoofed: Vec<Vec<u8>> = sources
            .iter()
            .flat_map(|s| ip_frames(*s, &v, &m.spoof))
            .collect();
        check_case(&p, &v, case, &m, &spoofed, &ip_controls(&p, &v, &m));
    }
    // sdnctl trace of the same packets names the spoof guard and what is not the pod's.
    let api = node.dir().join("run/api.sock");
    for (case, sources) in &cases {
        for src in sources {
            for dst in [same.ip, other.ip, global.ip, GW] {
                let out = std::process::Command::new(sdn_tests::harness::workspace_bin("sdnctl"))
                    .arg("--api-socket")
                    .arg(&api)
                    .args([
                        "--json",
                        "trace",
                        &me.ip.to_string(),
                        &dst.to_string(),
                        "icmp",
                    ])
                    .args(["--spoof-ip", &src.ip.to_string()])
                    .args(["--spoof-mac", &probe::mac_to_string(&src.mac)])
                    .output()
                    .expect("sdnctl trace");
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let t: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                let verdict = t["verdict"].as_str().unwrap_or("");
                let what = if src.ip != me.ip {
                    format!("{} is not this pod's address", src.ip)
                } else {
                    format!("{} is not this pod's MAC", probe::mac_to_string(&src.mac))
                };
                assert!(
                    t["outcome"] == "dropped"
                        && t["decided_in"] == "pod_egress_spoofguard"
                        && verdict.contains(&what),
                    "{case}: {src:?} -> {dst}: {t:#}"
                );
            }
        }
    }
}

/// `ip -4 neigh show dev <dev>` in `netns` as (IP, MAC) pairs (entries without a MAC are left
/// out).
fn neighbours(netns: &str, dev: &str) -> Vec<(Ipv4Addr, Mac)> {
    let out = sdn_tests::harness::run("ip", &["-n", netns, "-4", "neigh", "show", "dev", dev])
        .unwrap_or_else(|e| panic!("{e}"));
    out.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let ip = w.next()?.parse().ok()?;
            let mac = l.split(" lladdr ").nth(1)?.split_whitespace().next()?;
            Some((ip, probe::parse_mac(mac)?))
        })
        .collect()
}

#[test]
fn spoofed_arp_reaches_no_pod_and_poisons_no_neighbour_table() {
    let node = start();
    let p = pods(&node);
    let v = p.victims(&node);
    let me = p.me();
    let node_ns = node.ovs.netns().to_string();

    // Fill the neighbour tables the attack targets: the node knows every pod; the victims know
    // the gateway and each other (existing entries are what unsolicited ARP may overwrite).
    let mut warm: Vec<(String, Ipv4Addr)> = [&p.same, &p.other, &p.global, &p.attacker]
        .iter()
        .map(|pod| (node_ns.clone(), ip_of(pod)))
        .collect();
    for (a, b) in [(&p.same, &p.global), (&p.global, &p.same)] {
        warm.push((a.ns.name().to_string(), ip_of(b)));
    }
    for pod in [&p.same, &p.other, &p.global] {
        warm.push((pod.ns.name().to_string(), GW));
    }
    let ok = parallel(
        warm.iter()
            .map(|(ns, ip)| move || icmp_probe(ns, *ip, MUST_WORK)),
    );
    assert!(ok.iter().all(|b| *b), "warm-up pings: {warm:?} -> {ok:?}");

    // Claims of every victim's IP (and the gateway's) at the attacker's MAC, in every shape.
    let m = Markers::new("arp claiming another ip");
    let trailer = m.spoof.as_bytes();
    let mut spoofed = Vec::new();
    for claimed in &v {
        let ip = claimed.at.ip;
        spoofed.push(arp_frame(
            BROADCAST,
            me.mac,
            &Arp::gratuitous(me.mac, ip),
            trailer,
        ));
        spoofed.push(arp_frame(
            BROADCAST,
            me.mac,
            &Arp::reply(me.mac, ip, BROADCAST, ip),
            trailer,
        ));
        for target in &v {
            let t = target.at;
            spoofed.push(arp_frame(
                t.mac,
                me.mac,
                &Arp::reply(me.mac, ip, t.mac, t.ip),
                trailer,
            ));
            spoofed.push(arp_frame(
                BROADCAST,
                me.mac,
                &Arp::request(me.mac, ip, t.ip),
                trailer,
            ));
        }
    }
    // Own IP, but another MAC in the ARP sender field, the Ethernet source, or both.
    for target in &v {
        let t = target.at;
        for (eth_src, sha) in [
            (ROGUE_MAC, ROGUE_MAC),
            (me.mac, ROGUE_MAC),
            (ROGUE_MAC, me.mac),
            (v[0].at.mac, v[0].at.mac),
        ] {
            spoofed.push(arp_frame(
                BROADCAST,
                eth_src,
                &Arp::request(sha, me.ip, t.ip),
                trailer,
            ));
            spoofed.push(arp_frame(
                t.mac,
                eth_src,
                &Arp::reply(sha, me.ip, t.mac, t.ip),
                trailer,
            ));
        }
    }
    // Controls: truthful ARP requests for each reachable victim.
    let controls: Vec<(usize, Vec<u8>)> = v
        .iter()
        .enumerate()
        .filter(|(_, x)| x.reachable)
        .map(|(i, x)| {
            let a = Arp::request(me.mac, me.ip, x.at.ip);
            (i, arp_frame(BROADCAST, me.mac, &a, m.ok.as_bytes()))
        })
        .collect();
    check_case(
        &p,
        &v,
        "ARP claiming another IP or MAC",
        &m,
        &spoofed,
        &controls,
    );

    // Nobody learned a lie: every entry for a victim (or the gateway) holds its true MAC, and the
    // attacker's MAC stands for the attacker's IP only. The node's entries that matter are on
    // tun0 (its route to the pods); what its kernel does with frames on the pods' host veths is
    // `the_node_kernel_is_no_way_around_the_pipeline`.
    let mut tables = vec![("node".to_string(), node_ns.clone(), "tun0")];
    for x in &v[..3] {
        tables.push((x.name.to_string(), x.netns.clone(), "eth0"));
    }
    for (who, ns, dev) in &tables {
        let entries = neighbours(ns, dev);
        for (ip, mac) in &entries {
            if let Some(x) = v.iter().find(|x| x.at.ip == *ip) {
                assert_eq!(
                    *mac,
                    x.at.mac,
                    "{who}: {ip} is at {}, not at its true MAC {}",
                    mac_to_string(mac),
                    mac_to_string(&x.at.mac)
                );
            }
            assert!(
                *mac != me.mac || *ip == me.ip,
                "{who}: {ip} poisoned to the attacker's MAC"
            );
        }
        if who == "node" {
            for x in &v[..3] {
                assert!(
                    entries.iter().any(|(ip, _)| *ip == x.at.ip),
                    "node lost its entry for {}: {entries:?}",
                    x.at.ip
                );
            }
        }
    }
    // And traffic between the victims still flows.
    let after = parallel(
        warm.iter()
            .map(|(ns, ip)| move || icmp_probe(ns, *ip, MUST_WORK)),
    );
    assert!(
        after.iter().all(|b| *b),
        "pings after: {warm:?} -> {after:?}"
    );
}

/// Runs `ip <args>` inside the attacker's namespace.
fn in_pod(p: &Pods<'_>, args: &[&str]) {
    let mut cmd = vec!["ip"];
    cmd.extend_from_slice(args);
    p.attacker.ns.exec(&cmd).unwrap_or_else(|e| panic!("{e}"));
}

/// Gives the attacker's eth0 address `ip` (/23) and MAC `mac`, with permanent neighbour entries
/// for every victim (so the kernel sends at once and ARP is not what stops the packets).
fn set_identity(p: &Pods<'_>, v: &[Victim], me: Endpoint) {
    in_pod(p, &["addr", "flush", "dev", "eth0"]);
    in_pod(
        p,
        &["link", "set", "eth0", "address", &mac_to_string(&me.mac)],
    );
    in_pod(p, &["addr", "add", &format!("{}/23", me.ip), "dev", "eth0"]);
    for x in v {
        in_pod(
            p,
            &[
                "neigh",
                "replace",
                &x.at.ip.to_string(),
                "lladdr",
                &mac_to_string(&x.at.mac),
                "dev",
                "eth0",
                "nud",
                "permanent",
            ],
        );
    }
}

/// What the attacker, now at `src`, got through to `targets`: ICMP to each and TCP to the echo
/// servers of the pods among them, all at once (waiting `timeout` for victims a truthful
/// attacker may reach, [`MUST_FAIL`] for the others). Returns the probes that succeeded and the
/// victims at which any IPv4 packet from `src` arrived (a capture on each target matching the
/// header's source and destination), so a request that gets through but whose answer cannot
/// come back is still seen.
fn attempt(
    p: &Pods<'_>,
    v: &[Victim],
    src: Ipv4Addr,
    targets: &[usize],
    timeout: Duration,
) -> (Vec<String>, Vec<String>) {
    let ns = p.attacker_ns();
    let caps: Vec<(&Victim, Capture)> = targets
        .iter()
        .map(|&i| {
            let x = &v[i];
            let header = [src.octets(), x.at.ip.octets()].concat();
            (x, Capture::start(&x.netns, x.ifname, &header))
        })
        .collect();
    let jobs: Vec<Box<dyn FnOnce() -> Option<String> + Send + '_>> = targets
        .iter()
        .flat_map(|&i| {
            let x = &v[i];
            let timeout = if x.reachable { timeout } else { MUST_FAIL };
            let mut jobs: Vec<Box<dyn FnOnce() -> Option<String> + Send + '_>> =
                vec![Box::new(move || {
                    icmp_probe(ns, x.at.ip, timeout).then(|| format!("ICMP {}", x.name))
                })];
            if x.ifname == "eth0" {
                jobs.push(Box::new(move || {
                    tcp_probe(ns, SocketAddrV4::new(x.at.ip, 8080), timeout)
                        .then(|| format!("TCP {}", x.name))
                }));
            }
            jobs
        })
        .collect();
    let mut probes: Vec<String> = parallel(jobs).into_iter().flatten().collect();
    probes.sort();
    let arrived = caps
        .into_iter()
        .filter_map(|(x, c)| (!c.stop().is_empty()).then(|| x.name.to_string()))
        .collect();
    (probes, arrived)
}

#[test]
fn a_pod_that_changes_its_ip_or_mac_inside_gets_nothing_through() {
    let node = start();
    let p = pods(&node);
    let v = p.victims(&node);
    let me = p.me();
    let _servers: Vec<_> = v[..3]
        .iter()
        .map(|x| tcp_echo_server(&x.netns, 8080))
        .collect();
    let all = [0, 1, 2, 3];
    // Truthful, with the same static neighbours: same tenant, global and node answer, and the
    // captures see the attacker's packets there (not at the other tenant).
    let truthful = |when: &str| {
        set_identity(&p, &v, me);
        let (probes, arrived) = attempt(&p, &v, me.ip, &all, MUST_WORK);
        let want = [
            "ICMP global pod",
            "ICMP node (tun0)",
            "ICMP same-tenant pod",
            "TCP global pod",
            "TCP same-tenant pod",
        ];
        assert_eq!(probes, want, "truthful attacker {when}");
        assert_eq!(
            arrived,
            ["same-tenant pod", "global pod", "node (tun0)"],
            "truthful attacker {when}: captures"
        );
    };
    truthful("before");
    let cases: Vec<(&str, Endpoint, Vec<usize>)> = vec![
        (
            "ip addr: an unassigned IP",
            Endpoint::new(me.mac, UNASSIGNED),
            all.to_vec(),
        ),
        // Claiming the global pod's IP: the global pod itself would be "us".
        (
            "ip addr: the global pod's IP",
            Endpoint::new(me.mac, v[2].at.ip),
            vec![0, 1, 3],
        ),
        (
            "ip addr: the same-tenant pod's IP",
            Endpoint::new(me.mac, v[0].at.ip),
            vec![1, 2, 3],
        ),
        (
            "ip link set address: another MAC",
            Endpoint::new(ROGUE_MAC, me.ip),
            all.to_vec(),
        ),
        (
            "ip link set address: the global pod's MAC",
            Endpoint::new(v[2].at.mac, me.ip),
            vec![0, 1, 3],
        ),
        (
            "both: the same-tenant pod's identity",
            v[0].at,
            vec![1, 2, 3],
        ),
        ("both: the global pod's identity", v[2].at, vec![0, 1, 3]),
    ];
    for (case, identity, targets) in cases {
        set_identity(&p, &v, identity);
        let (probes, arrived) = attempt(&p, &v, identity.ip, &targets, MUST_FAIL);
        assert!(
            probes.is_empty() && arrived.is_empty(),
            "{case}: probes that succeeded {probes:?}, packets arrived at {arrived:?}"
        );
    }
    truthful("after restoring its identity");
}

/// `n_packets` of the table-20 priority-300 flow that drops UDP to the VXLAN port from pods.
fn vxlan_drops(node: &AgentNode) -> u64 {
    let text = node.ovs.ofctl(&["dump-flows", "br0", "table=20"]);
    let line = text
        .lines()
        .find(|l| l.contains("priority=300") && l.contains(&format!("tp_dst={VXLAN_PORT}")))
        .unwrap_or_else(|| panic!("no table-20 priority-300 VXLAN drop flow:\n{text}"));
    line.split("n_packets=")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no n_packets in {line}"))
}

#[test]
fn a_pod_cannot_send_vxlan_into_the_overlay() {
    let node = start();
    let p = pods(&node);
    let v = p.victims(&node);
    let me = p.me();
    let gw_mac = v[3].at.mac;
    let m = Markers::new("vxlan from a pod");
    // Inner frames as a remote node would tunnel them: to the other tenant's pod with its VNID,
    // to the global pod with VNID 0, to the same-tenant pod with VNID 11.
    let inner = |marker: &str| -> Vec<(u32, Vec<u8>)> {
        let from = Endpoint::pod(REMOTE_POD);
        [(VNID_B, v[1].at), (0, v[2].at), (VNID_A, v[0].at)]
            .into_iter()
            .map(|(vni, to)| (vni, udp_frame(from, 40000, to, 9, marker.as_bytes())))
            .collect()
    };
    // Outer destinations: the gateway, the node's underlay IP (routed via the gateway), and
    // straight at the pods.
    let outer = [
        Endpoint::new(gw_mac, GW),
        Endpoint::new(gw_mac, NODE_IP),
        v[0].at,
        v[1].at,
        v[2].at,
    ];
    let vxlan_to = |dport: u16, marker: &str| -> Vec<Vec<u8>> {
        outer
            .iter()
            .flat_map(|dst| {
                inner(marker)
                    .into_iter()
                    .map(move |(vni, f)| udp_frame(me, VXLAN_PORT, *dst, dport, &vxlan(vni, &f)))
            })
            .collect()
    };
    let spoofed = vxlan_to(VXLAN_PORT, &m.spoof);
    // Controls: the very same packets to UDP 4790 (not VXLAN) reach the node (gateway and
    // node IP both end on tun0) and the pods the attacker may reach.
    let index_of = |dst: &Endpoint| match dst.ip {
        GW | NODE_IP => Some(3),
        ip => v[..3].iter().position(|x| x.at.ip == ip && x.reachable),
    };
    let controls: Vec<(usize, Vec<u8>)> = outer
        .iter()
        .filter_map(|dst| {
            let i = index_of(dst)?;
            let (vni, f) = inner(&m.ok).swap_remove(0);
            Some((i, udp_frame(me, VXLAN_PORT, *dst, 4790, &vxlan(vni, &f))))
        })
        .collect();
    assert_eq!(controls.len(), 4, "gateway, node IP, same tenant, global");
    let before = vxlan_drops(&node);
    check_case(&p, &v, "VXLAN from a pod", &m, &spoofed, &controls);
    let dropped = vxlan_drops(&node) - before;
    assert!(
        dropped >= spoofed.len() as u64,
        "the VXLAN drop flow counted {dropped} packets, {} were sent",
        spoofed.len()
    );
}

/// With the userspace datapath the host end of a pod's veth is an ordinary interface of the
/// node's kernel, which also sees every frame the pod sends. Unless the agent stops it, that
/// kernel answers the pod's ARP for the gateway with the veth's own MAC, and routes what the pod
/// sends to that MAC out of tun0 into br0, where table 25 gives it the VNID of whatever source
/// IP it claims: a way around the spoof guard and the tenancy check.
#[test]
fn the_node_kernel_is_no_way_around_the_pipeline() {
    let node = start();
    let p = pods(&node);
    let v = p.victims(&node);
    let me = p.me();
    let node_ns = node.ovs.netns().to_string();
    let host_if = p.attacker.result["interfaces"][0]["name"]
        .as_str()
        .unwrap_or_else(|| panic!("no host interface in {}", p.attacker.result))
        .to_string();
    let (veth_mac, _) = interface_addresses(&node_ns, &host_if);
    let tun0_mac = v[3].at.mac;

    // ARP for the gateway: only tun0 answers (through br0), never the node's kernel on the veth.
    let reply_marker = [&GW.octets()[..], &me.mac[..], &me.ip.octets()[..]].concat();
    let cap = Capture::start(p.attacker_ns(), "eth0", &reply_marker);
    let ask = Arp::request(me.mac, me.ip, GW);
    send_frames(
        p.attacker_ns(),
        "eth0",
        &[arp_frame(BROADCAST, me.mac, &ask, &[])],
    );
    assert!(cap.wait_for(1, MUST_WORK), "no ARP reply for the gateway");
    thread::sleep(GRACE);
    let answers: Vec<String> = cap
        .stop()
        .iter()
        .filter_map(|f| Arp::from_frame(f))
        .filter(|a| a.op == probe::ARP_REPLY && a.spa == GW)
        .map(|a| mac_to_string(&a.sha))
        .collect();
    assert_eq!(
        answers,
        vec![mac_to_string(&tun0_mac)],
        "the gateway must be answered by tun0 ({}) alone; {} is the host veth {host_if}",
        mac_to_string(&tun0_mac),
        mac_to_string(&veth_mac)
    );

    // IP sent to the veth's MAC with a claimed source: neither forwarded to any pod nor
    // delivered to the node itself (a UDP socket on port 9 in the node namespace).
    let sink = sdn_tests::harness::in_netns(&node_ns, || {
        let s = std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 9)).expect("bind udp/9");
        s.set_nonblocking(true).expect("nonblocking");
        s
    });
    let m = Markers::new("via the node kernel");
    let claimed = [v[2].at.ip, v[1].at.ip, v[0].at.ip, UNASSIGNED, REMOTE_POD];
    let mut spoofed = Vec::new();
    for src in claimed {
        for dst in v.iter().map(|x| x.at.ip) {
            let from = Endpoint::new(me.mac, src);
            let to = Endpoint::new(veth_mac, dst);
            spoofed.push(udp_frame(from, 40000, to, 9, m.spoof.as_bytes()));
            spoofed.push(icmp_echo_frame(from, to, 0x5252, 1, m.spoof.as_bytes()));
        }
    }
    check_case(
        &p,
        &v,
        "IP to the host veth's MAC",
        &m,
        &spoofed,
        &ip_controls(&p, &v, &m),
    );
    let mut buf = [0u8; 2048];
    let (mut leaked, mut controls) = (Vec::new(), 0);
    while let Ok((n, from)) = sink.recv_from(&mut buf) {
        if probe::contains(&buf[..n], m.spoof.as_bytes()) {
            leaked.push(from);
        } else if probe::contains(&buf[..n], m.ok.as_bytes()) {
            controls += 1;
        }
    }
    assert_eq!(
        controls, 1,
        "the truthful datagram to the gateway reached the node"
    );
    assert!(
        leaked.is_empty(),
        "the node's kernel took datagrams with claimed sources on {host_if}: {leaked:?}"
    );
}
