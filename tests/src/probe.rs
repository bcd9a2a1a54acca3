//! Reachability probes and crafted packets for end-to-end tests, run inside network namespaces
//! by name: TCP echo servers and TCP/ICMP/ARP probes, Ethernet/ARP/IPv4/UDP/ICMP/VXLAN frame
//! builders, raw frame injection and capture on an interface, and a helper that runs many probes
//! at once.
//!
//! Why this shape:
//! - Every socket is opened on a fresh thread that has `setns()`-ed into
//!   `/var/run/netns/<name>` ([`harness::in_netns`](crate::harness::in_netns)), so probes need no
//!   child processes and hundreds can run in parallel ([`parallel`]); a 12x12 matrix costs about
//!   one timeout, not 144.
//! - ICMP uses a raw `IPPROTO_ICMP` socket and matches the reply by identifier, source and a
//!   unique payload token; ARP uses an `AF_PACKET` socket, sends the request itself and waits
//!   for the matching reply on the wire, so the kernel neighbour table (which may hold a stale or
//!   static entry) never decides the outcome.
//! - A probe answers `false`/`None` only for a network outcome (refused, unreachable, no reply in
//!   time). Anything that means the test itself is broken (namespace or interface missing, socket
//!   cannot be opened) panics with the reason: an isolation test must never pass because its
//!   probe could not run.
//! - [`Capture`] binds its `AF_PACKET` socket before [`Capture::start`] returns, so a frame sent
//!   afterwards is never missed; it keeps only incoming frames that contain a marker, which lets
//!   a test tag its crafted frames with a unique payload and ignore all other traffic.
//!
//! Limits: IPv4 only; no IP options or fragments; every wait is bounded by the timeout given (or
//! by a few seconds for setup); frames are sent as given (no minimum-size padding, no checksum
//! offload), so a test controls every byte.

use std::ffi::CString;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::harness::{in_netns, spawn_in_netns};

/// An Ethernet MAC address.
pub type Mac = [u8; 6];

/// The Ethernet broadcast address.
pub const BROADCAST: Mac = [0xff; 6];
/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// IP protocol number of ICMP.
pub const PROTO_ICMP: u8 = 1;
/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
/// The IANA VXLAN UDP port.
pub const VXLAN_PORT: u16 = 4789;
/// ARP operation: request.
pub const ARP_REQUEST: u16 = 1;
/// ARP operation: reply.
pub const ARP_REPLY: u16 = 2;

const ETH_P_ALL: u16 = 0x0003;
/// How long setup steps (entering a namespace, binding a capture) may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a capture or an accept loop looks at its stop flag.
const POLL_SLICE: Duration = Duration::from_millis(20);

static NEXT: AtomicU64 = AtomicU64::new(1);

/// A token unique in this test run (process id, a counter and the clock), for payloads and
/// capture markers.
pub fn unique_token(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{}-{nanos:08x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

// ---------------------------------------------------------------------------------------------
// Addresses

/// `aa:bb:cc:dd:ee:ff`.
pub fn mac_to_string(mac: &Mac) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Parses `aa:bb:cc:dd:ee:ff` (case-insensitive).
pub fn parse_mac(s: &str) -> Option<Mac> {
    let mut mac = [0u8; 6];
    let mut parts = s.trim().split(':');
    for b in &mut mac {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// The MAC the SDN gives a pod with address `ip`: `0a:58:` and the four address bytes.
pub fn pod_mac(ip: Ipv4Addr) -> Mac {
    let o = ip.octets();
    [0x0a, 0x58, o[0], o[1], o[2], o[3]]
}

/// One end of a crafted packet: the Ethernet and the IPv4 address it claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// Ethernet address.
    pub mac: Mac,
    /// IPv4 address.
    pub ip: Ipv4Addr,
}

impl Endpoint {
    /// An endpoint from its two addresses.
    pub fn new(mac: Mac, ip: Ipv4Addr) -> Endpoint {
        Endpoint { mac, ip }
    }

    /// A pod of the SDN: `ip` with the MAC derived from it ([`pod_mac`]).
    pub fn pod(ip: Ipv4Addr) -> Endpoint {
        Endpoint {
            mac: pod_mac(ip),
            ip,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Packet builders

/// The Internet checksum (RFC 1071) of `data`: one's complement of the one's complement sum of
/// its big-endian 16-bit words (an odd last byte is padded with zero).
pub fn internet_checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(u16::from_be_bytes([*last, 0]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An Ethernet II frame: `dst`, `src`, `ethertype`, then `payload` (no padding, no FCS).
pub fn ethernet(dst: Mac, src: Mac, ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The parts of an Ethernet II frame: (dst, src, ethertype, payload); `None` if too short.
pub fn parse_ethernet(frame: &[u8]) -> Option<(Mac, Mac, u16, &[u8])> {
    if frame.len() < 14 {
        return None;
    }
    let mut dst = [0u8; 6];
    let mut src = [0u8; 6];
    dst.copy_from_slice(&frame[0..6]);
    src.copy_from_slice(&frame[6..12]);
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    Some((dst, src, ethertype, &frame[14..]))
}

/// An ARP packet for IPv4 over Ethernet (any sender/target, so it can also lie).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arp {
    /// [`ARP_REQUEST`] or [`ARP_REPLY`].
    pub op: u16,
    /// Sender hardware address.
    pub sha: Mac,
    /// Sender protocol address.
    pub spa: Ipv4Addr,
    /// Target hardware address.
    pub tha: Mac,
    /// Target protocol address.
    pub tpa: Ipv4Addr,
}

impl Arp {
    /// "Who has `tpa`? Tell `spa` at `sha`" (target MAC zero).
    pub fn request(sha: Mac, spa: Ipv4Addr, tpa: Ipv4Addr) -> Arp {
        Arp {
            op: ARP_REQUEST,
            sha,
            spa,
            tha: [0; 6],
            tpa,
        }
    }

    /// "`spa` is at `sha`", addressed to `tha`/`tpa`.
    pub fn reply(sha: Mac, spa: Ipv4Addr, tha: Mac, tpa: Ipv4Addr) -> Arp {
        Arp {
            op: ARP_REPLY,
            sha,
            spa,
            tha,
            tpa,
        }
    }

    /// A gratuitous ARP announcing `ip` at `mac`: a request with sender and target address
    /// both `ip` (send it to [`BROADCAST`]).
    pub fn gratuitous(mac: Mac, ip: Ipv4Addr) -> Arp {
        Arp::request(mac, ip, ip)
    }

    /// The 28 bytes on the wire.
    pub fn encode(&self) -> [u8; 28] {
        let mut b = [0u8; 28];
        b[0..2].copy_from_slice(&1u16.to_be_bytes()); // Ethernet
        b[2..4].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        b[4] = 6;
        b[5] = 4;
        b[6..8].copy_from_slice(&self.op.to_be_bytes());
        b[8..14].copy_from_slice(&self.sha);
        b[14..18].copy_from_slice(&self.spa.octets());
        b[18..24].copy_from_slice(&self.tha);
        b[24..28].copy_from_slice(&self.tpa.octets());
        b
    }

    /// Parses an ARP payload (after the Ethernet header); `None` unless IPv4 over Ethernet.
    pub fn parse(payload: &[u8]) -> Option<Arp> {
        if payload.len() < 28 || payload[0..6] != [0, 1, 8, 0, 6, 4] {
            return None;
        }
        let mac = |o: usize| -> Mac {
            let mut m = [0u8; 6];
            m.copy_from_slice(&payload[o..o + 6]);
            m
        };
        let ip =
            |o: usize| Ipv4Addr::new(payload[o], payload[o + 1], payload[o + 2], payload[o + 3]);
        Some(Arp {
            op: u16::from_be_bytes([payload[6], payload[7]]),
            sha: mac(8),
            spa: ip(14),
            tha: mac(18),
            tpa: ip(24),
        })
    }

    /// The ARP packet in a whole frame, if `frame` is an Ethernet ARP frame.
    pub fn from_frame(frame: &[u8]) -> Option<Arp> {
        match parse_ethernet(frame)? {
            (_, _, ETHERTYPE_ARP, payload) => Arp::parse(payload),
            _ => None,
        }
    }
}

/// An Ethernet frame carrying `arp`, followed by `trailer` (as Ethernet padding: a place for a
/// capture marker, ignored by ARP receivers).
pub fn arp_frame(eth_dst: Mac, eth_src: Mac, arp: &Arp, trailer: &[u8]) -> Vec<u8> {
    let mut payload = arp.encode().to_vec();
    payload.extend_from_slice(trailer);
    ethernet(eth_dst, eth_src, ETHERTYPE_ARP, &payload)
}

/// An IPv4 packet (20-byte header: TTL 64, DF, identification 0, header checksum filled in).
pub fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, payload: &[u8]) -> Vec<u8> {
    let total = 20 + payload.len();
    let mut p = Vec::with_capacity(total);
    p.push(0x45);
    p.push(0);
    // Longer than 65535 cannot be an IPv4 packet; the length field saturates (the packet would
    // be dropped as malformed, which a test may even want).
    p.extend_from_slice(&u16::try_from(total).unwrap_or(u16::MAX).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0x40, 0, 64, protocol, 0, 0]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    let sum = internet_checksum(&p[..20]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// A UDP datagram from `src` to `dst` with its checksum (over the IPv4 pseudo-header) filled in.
pub fn udp(src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8]) -> Vec<u8> {
    let len = u16::try_from(8 + payload.len()).unwrap_or(u16::MAX);
    let mut u = Vec::with_capacity(8 + payload.len());
    u.extend_from_slice(&src.port().to_be_bytes());
    u.extend_from_slice(&dst.port().to_be_bytes());
    u.extend_from_slice(&len.to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    let mut pseudo = Vec::with_capacity(12 + u.len());
    pseudo.extend_from_slice(&src.ip().octets());
    pseudo.extend_from_slice(&dst.ip().octets());
    pseudo.extend_from_slice(&[0, PROTO_UDP]);
    pseudo.extend_from_slice(&len.to_be_bytes());
    pseudo.extend_from_slice(&u);
    let sum = match internet_checksum(&pseudo) {
        0 => 0xffff, // 0 means "no checksum" in UDP
        s => s,
    };
    u[6..8].copy_from_slice(&sum.to_be_bytes());
    u
}

/// A TCP segment from `src` to `dst` (20-byte header, no options, window 65535) with `flags`
/// (`0x02` SYN, `0x10` ACK, ...) and its checksum over the IPv4 pseudo-header filled in.
pub fn tcp(src: SocketAddrV4, dst: SocketAddrV4, seq: u32, ack: u32, flags: u8) -> Vec<u8> {
    let mut t = Vec::with_capacity(20);
    t.extend_from_slice(&src.port().to_be_bytes());
    t.extend_from_slice(&dst.port().to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&ack.to_be_bytes());
    t.extend_from_slice(&[5 << 4, flags, 0xff, 0xff, 0, 0, 0, 0]);
    let mut pseudo = Vec::with_capacity(32);
    pseudo.extend_from_slice(&src.ip().octets());
    pseudo.extend_from_slice(&dst.ip().octets());
    pseudo.extend_from_slice(&[0, PROTO_TCP, 0, 20]);
    pseudo.extend_from_slice(&t);
    let sum = internet_checksum(&pseudo);
    t[16..18].copy_from_slice(&sum.to_be_bytes());
    t
}

/// An ICMP echo request (`reply == false`) or echo reply with its checksum filled in.
pub fn icmp_echo(reply: bool, id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(8 + payload.len());
    m.push(if reply { 0 } else { 8 });
    m.push(0);
    m.extend_from_slice(&[0, 0]);
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&seq.to_be_bytes());
    m.extend_from_slice(payload);
    let sum = internet_checksum(&m);
    m[2..4].copy_from_slice(&sum.to_be_bytes());
    m
}

/// A VXLAN packet (the UDP payload): the 8-byte header (flags `I`, 24-bit `vni`) then the
/// inner Ethernet frame.
pub fn vxlan(vni: u32, inner_frame: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + inner_frame.len());
    v.extend_from_slice(&[0x08, 0, 0, 0]);
    let vni = (vni & 0x00ff_ffff).to_be_bytes();
    v.extend_from_slice(&[vni[1], vni[2], vni[3], 0]);
    v.extend_from_slice(inner_frame);
    v
}

/// A whole Ethernet/IPv4/UDP frame from `from` to `to`.
pub fn udp_frame(from: Endpoint, sport: u16, to: Endpoint, dport: u16, payload: &[u8]) -> Vec<u8> {
    let seg = udp(
        SocketAddrV4::new(from.ip, sport),
        SocketAddrV4::new(to.ip, dport),
        payload,
    );
    ethernet(
        to.mac,
        from.mac,
        ETHERTYPE_IPV4,
        &ipv4(from.ip, to.ip, PROTO_UDP, &seg),
    )
}

/// A whole Ethernet/IPv4/ICMP echo request frame from `from` to `to`.
pub fn icmp_echo_frame(from: Endpoint, to: Endpoint, id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let msg = icmp_echo(false, id, seq, payload);
    ethernet(
        to.mac,
        from.mac,
        ETHERTYPE_IPV4,
        &ipv4(from.ip, to.ip, PROTO_ICMP, &msg),
    )
}

/// A whole VXLAN frame: Ethernet/IPv4/UDP from `from` (source port 4789 too) to `to`'s port
/// [`VXLAN_PORT`], carrying `inner_frame` with VNI `vni`.
pub fn vxlan_frame(from: Endpoint, to: Endpoint, vni: u32, inner_frame: &[u8]) -> Vec<u8> {
    udp_frame(from, VXLAN_PORT, to, VXLAN_PORT, &vxlan(vni, inner_frame))
}

/// Whether `haystack` contains `needle` (an empty needle is contained everywhere).
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

// ---------------------------------------------------------------------------------------------
// Raw sockets

/// An `AF_PACKET` socket bound to one interface of the current thread's namespace.
struct PacketSocket {
    fd: OwnedFd,
    ifindex: i32,
}

fn last_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl PacketSocket {
    /// Opens and binds to `ifname`; `protocol` is the EtherType received (0: receive nothing).
    fn open(ifname: &str, protocol: u16) -> io::Result<PacketSocket> {
        let ifindex = ifindex(ifname)?;
        // SAFETY: plain socket(2) call; the fd is owned below.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                i32::from(protocol.to_be()),
            )
        };
        if raw < 0 {
            return Err(last_err("socket(AF_PACKET)"));
        }
        // SAFETY: `raw` is a fresh, valid descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = protocol.to_be();
        sll.sll_ifindex = ifindex;
        // SAFETY: binds a valid fd to a properly sized sockaddr_ll.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(last_err(&format!("bind AF_PACKET to {ifname}")));
        }
        Ok(PacketSocket { fd, ifindex })
    }

    fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: sends `frame.len()` bytes from a live slice on a bound packet socket.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if n < 0 {
            return Err(last_err("send on AF_PACKET"));
        }
        Ok(())
    }

    /// Waits up to `wait` for one frame; returns its length and whether it was outgoing, or
    /// `None` when nothing came (frames of other interfaces are skipped as nothing).
    fn recv(&self, buf: &mut [u8], wait: Duration) -> io::Result<Option<(usize, bool)>> {
        if !poll_readable(&self.fd, wait)? {
            return Ok(None);
        }
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: buf and sll are valid for writes of the sizes given.
        let n = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
                (&mut sll as *mut libc::sockaddr_ll).cast(),
                &mut len,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted {
                return Ok(None);
            }
            return Err(last_err("recvfrom on AF_PACKET"));
        }
        if sll.sll_ifindex != self.ifindex {
            return Ok(None);
        }
        Ok(Some((n as usize, sll.sll_pkttype == libc::PACKET_OUTGOING)))
    }
}

/// Waits up to `wait` for `fd` to be readable.
fn poll_readable(fd: &OwnedFd, wait: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: one valid pollfd.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(last_err("poll"));
    }
    Ok(rc > 0)
}

fn ifindex(ifname: &str) -> io::Result<i32> {
    let c = CString::new(ifname)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name has a NUL"))?;
    // SAFETY: valid C string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(last_err(&format!("no interface {ifname}")));
    }
    i32::try_from(idx).map_err(|_| io::Error::other(format!("ifindex of {ifname} too large")))
}

/// The MAC and first IPv4 address of `ifname` in the current thread's namespace.
fn if_addresses(ifname: &str) -> io::Result<(Mac, Option<Ipv4Addr>)> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } < 0 {
        return Err(last_err("getifaddrs"));
    }
    let mut mac = None;
    let mut ip = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        // SAFETY: ifa_name is a valid C string.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
        if name.to_bytes() != ifname.as_bytes() || ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points to a sockaddr of the family it names.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        if family == libc::AF_PACKET && mac.is_none() {
            // SAFETY: an AF_PACKET address is a sockaddr_ll.
            let ll = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_ll) };
            let mut m = [0u8; 6];
            m.copy_from_slice(&ll.sll_addr[..6]);
            mac = Some(m);
        } else if family == libc::AF_INET && ip.is_none() {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            ip = Some(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
        }
    }
    // SAFETY: frees the list getifaddrs allocated, once.
    unsafe { libc::freeifaddrs(head) };
    let mac = mac.ok_or_else(|| io::Error::other(format!("no interface {ifname}")))?;
    Ok((mac, ip))
}

/// The MAC and first IPv4 address of `ifname` in namespace `netns`; panics if the interface
/// does not exist.
pub fn interface_addresses(netns: &str, ifname: &str) -> (Mac, Option<Ipv4Addr>) {
    let (ns, ifn) = (netns.to_string(), ifname.to_string());
    in_netns(netns, move || {
        if_addresses(&ifn).unwrap_or_else(|e| panic!("netns {ns}: {e}"))
    })
}

/// Sends `frame` as is out of `ifname` in namespace `netns` (an `AF_PACKET` socket: no
/// routing, no neighbour lookup, no checks). Panics if that is impossible.
pub fn send_frame(netns: &str, ifname: &str, frame: &[u8]) {
    send_frames(netns, ifname, &[frame.to_vec()]);
}

/// Runs `round(i)` for i in 0..`rounds`, round i starting `i × every` after the first (a
/// steady rate, whatever each round costs, as long as it costs less than `every`).
pub fn paced(every: Duration, rounds: u32, mut round: impl FnMut(u32)) {
    let started = Instant::now();
    for i in 0..rounds {
        round(i);
        thread::sleep((every * (i + 1)).saturating_sub(started.elapsed()));
    }
}

/// How many of `count` new UDP connections (one frame each, from source ports 10000 on) reach
/// a socket on `port` of `to` in namespace `to_netns`, sent out of `eth0` of `from_netns` as
/// `from` in bursts of `burst` every 10 ms; the socket counts until 500 ms pass quietly.
pub fn udp_connections_received(
    (from_netns, from): (&str, Ipv4Addr),
    (to_netns, to): (&str, Ipv4Addr),
    port: u16,
    count: u16,
    burst: usize,
) -> u64 {
    let sock = in_netns(to_netns, move || {
        let s = UdpSocket::bind(("0.0.0.0", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        s
    });
    let counter = thread::spawn(move || {
        let mut n = 0u64;
        let mut buf = [0u8; 64];
        while sock.recv(&mut buf).is_ok() {
            n += 1;
        }
        n
    });
    let frames: Vec<Vec<u8>> = (0..count)
        .map(|i| {
            udp_frame(
                Endpoint::pod(from),
                10000 + i,
                Endpoint::pod(to),
                port,
                b"x",
            )
        })
        .collect();
    let chunks: Vec<&[Vec<u8>]> = frames.chunks(burst).collect();
    paced(Duration::from_millis(10), chunks.len() as u32, |i| {
        send_frames(from_netns, "eth0", chunks[i as usize]);
    });
    counter.join().unwrap()
}

/// Sends each of `frames` out of `ifname` in namespace `netns`, in order (see [`send_frame`]).
pub fn send_frames(netns: &str, ifname: &str, frames: &[Vec<u8>]) {
    let (ns, ifn, frames) = (netns.to_string(), ifname.to_string(), frames.to_vec());
    in_netns(netns, move || {
        let s = PacketSocket::open(&ifn, 0)
            .unwrap_or_else(|e| panic!("netns {ns}, interface {ifn}: {e}"));
        for f in &frames {
            s.send(f)
                .unwrap_or_else(|e| panic!("netns {ns}, interface {ifn}: {e}"));
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Capture

/// Records every incoming frame on one interface that contains a marker, from
/// [`Capture::start`] until [`Capture::stop`] (or drop).
#[derive(Debug)]
pub struct Capture {
    frames: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), String>>>,
}

impl Capture {
    /// Starts capturing on `ifname` in namespace `netns`; when it returns the socket is bound,
    /// so every later frame is seen. Panics if the namespace or interface does not exist.
    pub fn start(netns: &str, ifname: &str, marker: &[u8]) -> Capture {
        Capture::start_with(netns, ifname, marker, false)
    }

    /// As [`Capture::start`], but records the frames the namespace *sends* on `ifname`.
    pub fn start_outgoing(netns: &str, ifname: &str, marker: &[u8]) -> Capture {
        Capture::start_with(netns, ifname, marker, true)
    }

    fn start_with(netns: &str, ifname: &str, marker: &[u8], sent: bool) -> Capture {
        let what = format!("capture on {netns}/{ifname}");
        let frames = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
        let (f, st, m, ifn, w) = (
            frames.clone(),
            stop.clone(),
            marker.to_vec(),
            ifname.to_string(),
            what.clone(),
        );
        let thread = spawn_in_netns(netns, move || -> Result<(), String> {
            let sock = match PacketSocket::open(&ifn, ETH_P_ALL) {
                Ok(s) => s,
                Err(e) => {
                    let msg = format!("{w}: {e}");
                    let _ = ready_tx.send(Err(msg.clone()));
                    return Err(msg);
                }
            };
            let _ = ready_tx.send(Ok(()));
            let mut buf = vec![0u8; 65536];
            let record = |buf: &[u8], n: usize, outgoing: bool| {
                if outgoing == sent && contains(&buf[..n], &m) {
                    f.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(buf[..n].to_vec());
                }
            };
            while !st.load(Ordering::Relaxed) {
                if let Some((n, out)) = sock
                    .recv(&mut buf, POLL_SLICE)
                    .map_err(|e| format!("{w}: {e}"))?
                {
                    record(&buf, n, out);
                }
            }
            // Drain what is already queued.
            while let Some((n, out)) = sock
                .recv(&mut buf, Duration::ZERO)
                .map_err(|e| format!("{w}: {e}"))?
            {
                record(&buf, n, out);
            }
            Ok(())
        });
        match ready_rx.recv_timeout(SETUP_TIMEOUT) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("{e}"),
            Err(_) => {
                // The thread ended without a word (a panic entering the namespace) or hangs.
                stop.store(true, Ordering::Relaxed);
                match thread.join() {
                    Err(p) => std::panic::resume_unwind(p),
                    Ok(r) => panic!("{what}: did not start ({r:?})"),
                }
            }
        }
        Capture {
            frames,
            stop,
            thread: Some(thread),
        }
    }

    /// The frames recorded so far.
    pub fn frames(&self) -> Vec<Vec<u8>> {
        self.frames
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How many frames were recorded so far.
    pub fn count(&self) -> usize {
        self.frames.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Waits up to `timeout` until at least `n` frames were recorded; whether they were.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> bool {
        crate::harness::wait_until(timeout, || self.count() >= n)
    }

    /// Stops capturing (within a poll slice) and returns every frame recorded. Panics if the
    /// capture failed while running (a socket error).
    pub fn stop(mut self) -> Vec<Vec<u8>> {
        self.finish();
        std::mem::take(&mut *self.frames.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn finish(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) if !thread::panicking() => panic!("{e}"),
                Err(p) if !thread::panicking() => std::panic::resume_unwind(p),
                _ => {}
            }
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.finish();
    }
}

// ---------------------------------------------------------------------------------------------
// TCP

/// A TCP echo server on `0.0.0.0:<port>` in a namespace; stops and joins its threads on drop.
#[derive(Debug)]
pub struct EchoServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EchoServer {
    /// The bound address (port 0 asked for is resolved here).
    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

/// Starts an echo server listening on `0.0.0.0:port` in namespace `netns` (port 0: any free
/// port, see [`EchoServer::port`]). Each connection gets a thread that echoes until EOF or 5 s of
/// silence. Panics if it cannot listen.
pub fn tcp_echo_server(netns: &str, port: u16) -> EchoServer {
    tcp_server(netns, IpAddr::V4(Ipv4Addr::UNSPECIFIED), port, echo)
}

/// An echo server on `[::]:port` in namespace `netns`, for the dual-stack tests: IPv6, and IPv4
/// too as long as `net.ipv6.bindv6only` is 0 (a new namespace's default).
pub fn tcp6_echo_server(netns: &str, port: u16) -> EchoServer {
    tcp_server(
        netns,
        IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        port,
        echo,
    )
}

/// A "who am I" server on `0.0.0.0:port` in namespace `netns`: each connection is answered with
/// the source address the server sees (as text) and closed. With [`tcp_whoami`] it shows which
/// address a client's traffic leaves the cluster with (egress IPs, masquerade).
pub fn tcp_whoami_server(netns: &str, port: u16) -> EchoServer {
    tcp_server(netns, IpAddr::V4(Ipv4Addr::UNSPECIFIED), port, |mut s| {
        if let Ok(peer) = s.peer_addr() {
            let _ = s.set_nonblocking(false);
            let _ = s.write_all(format!("{}\n", peer.ip()).as_bytes());
        }
    })
}

/// [`tcp_whoami_server`] listening on `ip` only (e.g. an IPv6 address, where peers are seen as
/// IPv6 addresses, never IPv4-mapped ones).
pub fn tcp_whoami_server_on(netns: &str, ip: IpAddr, port: u16) -> EchoServer {
    tcp_server(netns, ip, port, |mut s| {
        if let Ok(peer) = s.peer_addr() {
            let _ = s.set_nonblocking(false);
            let _ = s.write_all(format!("{}\n", peer.ip()).as_bytes());
        }
    })
}

/// [`tcp_whoami`] for any family: the source address the server at `dst` saw, or `None`.
pub fn tcp_whoami_at(netns: &str, dst: SocketAddr, timeout: Duration) -> Option<IpAddr> {
    in_netns(netns, move || {
        let mut s = TcpStream::connect_timeout(&dst, timeout).ok()?;
        s.set_read_timeout(Some(timeout)).ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        text.trim().parse().ok()
    })
}

/// From namespace `netns`: the source address a [`tcp_whoami_server`] at `dst` saw for this
/// connection, or `None` when no answer came within `timeout`.
pub fn tcp_whoami(netns: &str, dst: SocketAddrV4, timeout: Duration) -> Option<Ipv4Addr> {
    in_netns(netns, move || {
        let mut s = TcpStream::connect_timeout(&SocketAddr::V4(dst), timeout).ok()?;
        s.set_read_timeout(Some(timeout)).ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        text.trim().parse().ok()
    })
}

fn tcp_server(netns: &str, ip: IpAddr, port: u16, handle: fn(TcpStream)) -> EchoServer {
    let ns = netns.to_string();
    let listener = in_netns(netns, move || {
        TcpListener::bind((ip, port))
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .unwrap_or_else(|e| panic!("netns {ns}: listen on {ip} port {port}: {e}"))
    });
    let addr = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("netns {netns}: echo server address: {e}"));
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let thread = thread::spawn(move || {
        let mut conns: Vec<JoinHandle<()>> = Vec::new();
        while !st.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((s, _)) => conns.push(thread::spawn(move || handle(s))),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(POLL_SLICE),
                Err(_) => thread::sleep(POLL_SLICE),
            }
            conns.retain(|c| !c.is_finished());
        }
        for c in conns {
            let _ = c.join();
        }
    });
    EchoServer {
        addr,
        stop,
        thread: Some(thread),
    }
}

fn echo(mut s: TcpStream) {
    if s.set_nonblocking(false).is_err()
        || s.set_read_timeout(Some(Duration::from_secs(5))).is_err()
    {
        return;
    }
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// From namespace `netns`: connects to `dst`, sends a unique token and reads it back, all within
/// `timeout`. True iff the token came back whole (an echo server such as [`tcp_echo_server`]
/// listens there and the path works both ways).
pub fn tcp_probe(netns: &str, dst: SocketAddrV4, timeout: Duration) -> bool {
    tcp_probe_to(netns, SocketAddr::V4(dst), timeout)
}

/// [`tcp_probe`] to an address of either family.
pub fn tcp_probe_to(netns: &str, dst: SocketAddr, timeout: Duration) -> bool {
    in_netns(netns, move || {
        let deadline = Instant::now() + timeout;
        let token = unique_token("tcp-probe");
        let Ok(mut s) = TcpStream::connect_timeout(&dst, timeout) else {
            return false;
        };
        if s.write_all(token.as_bytes()).is_err() {
            return false;
        }
        let mut got = Vec::new();
        let mut buf = [0u8; 256];
        while got.len() < token.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || s.set_read_timeout(Some(left)).is_err() {
                return false;
            }
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return false,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        got == token.as_bytes()
    })
}

// ---------------------------------------------------------------------------------------------
// UDP

/// A UDP echo server on `0.0.0.0:<port>` in a namespace (each datagram is sent back to its
/// sender); stops and joins its thread on drop.
#[derive(Debug)]
pub struct UdpEchoServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Starts a UDP echo server on `0.0.0.0:port` in namespace `netns`. Panics if it cannot bind.
pub fn udp_echo_server(netns: &str, port: u16) -> UdpEchoServer {
    udp_echo_server_at(netns, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))
}

/// A UDP echo server bound to `addr` in namespace `netns`: bound to one address, its replies
/// leave from that address whatever the route back prefers (as a real server behind a Service
/// answers from the endpoint address, so the node's conntrack un-DNATs them).
pub fn udp_echo_server_at(netns: &str, addr: SocketAddrV4) -> UdpEchoServer {
    udp_echo_server_on(netns, SocketAddr::V4(addr))
}

/// A UDP echo server on every IPv6 address of namespace `netns`, port `port`.
pub fn udp6_echo_server(netns: &str, port: u16) -> UdpEchoServer {
    udp_echo_server_on(
        netns,
        SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)),
    )
}

/// [`udp_echo_server_at`] on an address of either family.
pub fn udp_echo_server_on(netns: &str, addr: SocketAddr) -> UdpEchoServer {
    let ns = netns.to_string();
    let socket = in_netns(netns, move || {
        UdpSocket::bind(addr)
            .and_then(|s| s.set_read_timeout(Some(POLL_SLICE)).map(|()| s))
            .unwrap_or_else(|e| panic!("netns {ns}: bind udp {addr}: {e}"))
    });
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let thread = thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while !st.load(Ordering::Relaxed) {
            if let Ok((n, from)) = socket.recv_from(&mut buf) {
                let _ = socket.send_to(&buf[..n], from);
            }
        }
    });
    UdpEchoServer {
        stop,
        thread: Some(thread),
    }
}

impl Drop for UdpEchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// From namespace `netns`: a *connected* UDP socket sends a unique token to `dst` (again every
/// 200 ms) and waits up to `timeout` for it to come back. A connected socket only takes replies
/// whose source is `dst`, so behind a DNAT this also proves the reply was un-DNAT'd.
pub fn udp_probe(netns: &str, dst: SocketAddrV4, timeout: Duration) -> bool {
    udp_probe_to(netns, SocketAddr::V4(dst), timeout)
}

/// [`udp_probe`] to an address of either family.
pub fn udp_probe_to(netns: &str, dst: SocketAddr, timeout: Duration) -> bool {
    in_netns(netns, move || {
        let deadline = Instant::now() + timeout;
        let token = unique_token("udp-probe");
        let any: SocketAddr = match dst {
            SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let Ok(s) = UdpSocket::bind(any) else {
            return false;
        };
        if s.connect(dst).is_err()
            || s.set_read_timeout(Some(Duration::from_millis(200)))
                .is_err()
        {
            return false;
        }
        let mut buf = [0u8; 256];
        while Instant::now() < deadline {
            if s.send(token.as_bytes()).is_err() {
                thread::sleep(Duration::from_millis(200));
                continue;
            }
            if let Ok(n) = s.recv(&mut buf) {
                if &buf[..n] == token.as_bytes() {
                    return true;
                }
            }
        }
        false
    })
}

/// A stream of UDP probes running in the background from namespace `netns` to `dst`: `count`
/// datagrams `interval` apart from one *connected* socket (so only replies from `dst` count:
/// behind a DNAT, un-DNAT'd ones), each carrying its sequence number. [`UdpStream::finish`]
/// waits for the last replies (up to 1 s) and says how many were sent and how many distinct
/// ones came back.
#[derive(Debug)]
pub struct UdpStream {
    thread: JoinHandle<(u64, u64)>,
}

/// Starts a [`UdpStream`].
pub fn udp_stream(netns: &str, dst: SocketAddrV4, count: u64, interval: Duration) -> UdpStream {
    let thread = spawn_in_netns(netns, move || {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).expect("bind a UDP probe socket");
        s.connect(dst).expect("connect the UDP probe socket");
        s.set_read_timeout(Some(Duration::from_millis(5)))
            .expect("read timeout");
        let tag = unique_token("udp-stream");
        let mut got = std::collections::BTreeSet::new();
        let mut buf = [0u8; 256];
        let mut drain = |until: Instant, got: &mut std::collections::BTreeSet<u64>| {
            while Instant::now() < until {
                if let Ok(n) = s.recv(&mut buf) {
                    let text = String::from_utf8_lossy(&buf[..n]);
                    if let Some(seq) = text.strip_prefix(&format!("{tag}:")) {
                        if let Ok(seq) = seq.parse() {
                            got.insert(seq);
                        }
                    }
                }
            }
        };
        let start = Instant::now();
        for seq in 0..count {
            // A send that fails (no route for a moment) is a lost probe, as a lost packet is.
            let _ = s.send(format!("{tag}:{seq}").as_bytes());
            let next = start + interval * u32::try_from(seq + 1).unwrap_or(u32::MAX);
            drain(next, &mut got);
        }
        drain(Instant::now() + Duration::from_secs(1), &mut got);
        (count, got.len() as u64)
    });
    UdpStream { thread }
}

impl UdpStream {
    /// (sent, answered).
    pub fn finish(self) -> (u64, u64) {
        self.thread
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
    }
}

// ---------------------------------------------------------------------------------------------
// Forged replies

/// Whether a pod can answer in a Service's name a request it was never allowed to receive.
///
/// From namespace `client_ns` a socket sends to the Service address `svc` (UDP: three
/// datagrams; TCP: a non-blocking connect, whose SYN is retransmitted) and gets no answer,
/// because the endpoint behind `svc` is out of the client's reach. Then the pod in `forger_ns`
/// answers from `forged_src` (the endpoint's address and port, which nothing else may use
/// there) to the client's address and port: UDP, a datagram every 100 ms from a socket bound
/// there; TCP, the SYN-ACK the endpoint would have sent, acknowledging the client's SYN (the
/// attacker is granted its sequence number, read from the client's SYN: the network, not the
/// guess, is under test), as raw frames. The forger puts the client's MAC in its neighbour
/// table by hand (`0a:58:<ip>`; ARP across tenants is refused). True iff a frame with `svc` as
/// its source reached the client's `eth0` within `wait`: the forged reply was un-DNAT'd by the
/// node and delivered as if the Service had answered.
pub fn forged_service_reply(
    client_ns: &str,
    svc: SocketAddrV4,
    forger_ns: &str,
    forged_src: SocketAddrV4,
    proto: crate::kubeproxy::Proto,
    wait: Duration,
) -> bool {
    use crate::kubeproxy::Proto;
    use socket2::{Domain, Protocol, SockAddr, Socket, Type};
    let (_, client_ip) = interface_addresses(client_ns, "eth0");
    let client_ip = client_ip.unwrap_or_else(|| panic!("netns {client_ns}: eth0 has no IPv4"));
    let (forger_mac, _) = interface_addresses(forger_ns, "eth0");
    let capture = Capture::start(client_ns, "eth0", &svc.ip().octets());
    let sent = Capture::start_outgoing(client_ns, "eth0", &svc.ip().octets());
    let (ty, pr) = match proto {
        Proto::Tcp => (Type::STREAM, Protocol::TCP),
        Proto::Udp => (Type::DGRAM, Protocol::UDP),
    };
    let open = move |bind: SocketAddrV4| -> io::Result<Socket> {
        let s = Socket::new(Domain::IPV4, ty, Some(pr))?;
        s.set_reuse_address(true)?;
        s.bind(&SockAddr::from(bind))?;
        s.set_nonblocking(true)?;
        Ok(s)
    };
    let ns = client_ns.to_string();
    let client = in_netns(client_ns, move || {
        let s = open(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))
            .unwrap_or_else(|e| panic!("netns {ns}: client socket: {e}"));
        match proto {
            Proto::Tcp => {
                // EINPROGRESS: the SYN is on its way.
                let _ = s.connect(&SockAddr::from(svc));
            }
            Proto::Udp => {
                for _ in 0..3 {
                    let _ = s.send_to(b"request", &SockAddr::from(svc));
                    thread::sleep(Duration::from_millis(100));
                }
            }
        }
        s
    });
    let client_port = client
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket_ipv4())
        .map(|a| a.port())
        .unwrap_or_else(|| panic!("netns {client_ns}: the client socket has no port"));
    assert!(
        sent.wait_for(1, SETUP_TIMEOUT),
        "netns {client_ns}: the request to {svc} never left eth0"
    );
    let request = sent.stop().remove(0);
    thread::sleep(Duration::from_millis(300));
    let to = SocketAddrV4::new(client_ip, client_port);
    let status = std::process::Command::new("ip")
        .args(["netns", "exec", forger_ns, "ip", "neigh", "replace"])
        .arg(client_ip.to_string())
        .args(["lladdr", &mac_to_string(&pod_mac(client_ip)), "dev", "eth0"])
        .status()
        .unwrap_or_else(|e| panic!("netns {forger_ns}: ip neigh: {e}"));
    assert!(
        status.success(),
        "netns {forger_ns}: ip neigh replace {client_ip}: {status}"
    );
    let forged: Box<dyn Fn() + Send> = match proto {
        Proto::Udp => {
            let ns = forger_ns.to_string();
            let sock = in_netns(forger_ns, move || {
                open(forged_src).unwrap_or_else(|e| panic!("netns {ns}: bind {forged_src}: {e}"))
            });
            Box::new(move || {
                let _ = sock.send_to(b"forged reply", &SockAddr::from(to));
            })
        }
        Proto::Tcp => {
            // The client's SYN: Ethernet, IPv4 (its header length), then TCP (seq at 4..8).
            let ip_start = 14;
            let ihl = usize::from(request.get(ip_start).copied().unwrap_or(0x45) & 0x0f) * 4;
            let tcp_start = ip_start + ihl;
            let isn = request
                .get(tcp_start + 4..tcp_start + 8)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                .unwrap_or_else(|| panic!("netns {client_ns}: a short SYN: {request:02x?}"));
            let syn_ack = tcp(forged_src, to, 0x5eed_0000, isn.wrapping_add(1), 0x12);
            let frame = ethernet(
                pod_mac(client_ip),
                forger_mac,
                ETHERTYPE_IPV4,
                &ipv4(*forged_src.ip(), client_ip, PROTO_TCP, &syn_ack),
            );
            let ns = forger_ns.to_string();
            Box::new(move || send_frame(&ns, "eth0", &frame))
        }
    };
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline && capture.count() == 0 {
        forged();
        thread::sleep(Duration::from_millis(100));
    }
    drop(client);
    !capture.stop().is_empty()
}

// ---------------------------------------------------------------------------------------------
// UDP multicast

/// A UDP socket in a namespace bound to `0.0.0.0:<port>` that joined a multicast group (the
/// kernel sends the IGMP report); every datagram it receives is kept. Stops on drop.
#[derive(Debug)]
pub struct MulticastReceiver {
    got: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Joins `group` on `port` in namespace `netns` (through the interface of the namespace's route
/// to the group: a pod's eth0). Panics if it cannot bind or join.
pub fn multicast_receiver(netns: &str, group: Ipv4Addr, port: u16) -> MulticastReceiver {
    let ns = netns.to_string();
    let socket = in_netns(netns, move || {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, port))
            .unwrap_or_else(|e| panic!("netns {ns}: bind udp 0.0.0.0:{port}: {e}"));
        s.join_multicast_v4(&group, &Ipv4Addr::UNSPECIFIED)
            .unwrap_or_else(|e| panic!("netns {ns}: join {group}: {e}"));
        s.set_read_timeout(Some(POLL_SLICE)).expect("read timeout");
        s
    });
    let got = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let (g, st) = (got.clone(), stop.clone());
    let thread = thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while !st.load(Ordering::Relaxed) {
            if let Ok(n) = socket.recv(&mut buf) {
                g.lock().expect("receiver lock").push(buf[..n].to_vec());
            }
        }
    });
    MulticastReceiver {
        got,
        stop,
        thread: Some(thread),
    }
}

impl MulticastReceiver {
    /// Whether a datagram holding `token` arrived.
    pub fn has(&self, token: &str) -> bool {
        self.got
            .lock()
            .expect("receiver lock")
            .iter()
            .any(|d| contains(d, token.as_bytes()))
    }

    /// Waits up to `timeout` for a datagram holding `token`.
    pub fn wait_for(&self, token: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.has(token) {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        self.has(token)
    }
}

impl Drop for MulticastReceiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// From namespace `netns`: sends `payload` to `group:port` `count` times, 50 ms apart, with TTL
/// 1 and without local loopback (what an application's multicast sender does).
pub fn multicast_send(netns: &str, group: Ipv4Addr, port: u16, payload: &[u8], count: usize) {
    let ns = netns.to_string();
    let payload = payload.to_vec();
    in_netns(netns, move || {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))
            .unwrap_or_else(|e| panic!("netns {ns}: bind udp: {e}"));
        s.set_multicast_ttl_v4(1).expect("ttl");
        s.set_multicast_loop_v4(false).expect("loop");
        for i in 0..count {
            if i > 0 {
                thread::sleep(Duration::from_millis(50));
            }
            s.send_to(&payload, SocketAddrV4::new(group, port))
                .unwrap_or_else(|e| panic!("netns {ns}: send to {group}:{port}: {e}"));
        }
    })
}

// ---------------------------------------------------------------------------------------------
// ICMP

/// From namespace `netns`: sends ICMP echo requests to `dst` (one at once, then every 250 ms)
/// and waits up to `timeout` for a matching echo reply (same identifier and unique payload, from
/// `dst`). Uses a raw socket: no `ping` process. Panics if the socket cannot be opened.
pub fn icmp_probe(netns: &str, dst: Ipv4Addr, timeout: Duration) -> bool {
    let ns = netns.to_string();
    in_netns(netns, move || {
        // SAFETY: plain socket(2) call; the fd is owned below.
        let raw = unsafe {
            libc::socket(
                libc::AF_INET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::IPPROTO_ICMP,
            )
        };
        if raw < 0 {
            panic!(
                "netns {ns}: {}",
                last_err("socket(AF_INET, SOCK_RAW, ICMP)")
            );
        }
        // SAFETY: `raw` is a fresh, valid descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let id = (n as u16) ^ (std::process::id() as u16);
        let token = unique_token("icmp-probe");
        // SAFETY: sockaddr_in is plain old data; all-zero is a valid value.
        let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        sin.sin_family = libc::AF_INET as u16;
        sin.sin_addr.s_addr = u32::from(dst).to_be();
        let deadline = Instant::now() + timeout;
        let mut next_send = Instant::now();
        let mut seq: u16 = 0;
        let mut buf = [0u8; 2048];
        loop {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            if now >= next_send {
                seq = seq.wrapping_add(1);
                let msg = icmp_echo(false, id, seq, token.as_bytes());
                // SAFETY: sends a live buffer to a properly sized sockaddr_in. A send error
                // (unreachable, no neighbour) is a network outcome: try again until the deadline.
                unsafe {
                    libc::sendto(
                        fd.as_raw_fd(),
                        msg.as_ptr().cast(),
                        msg.len(),
                        0,
                        (&sin as *const libc::sockaddr_in).cast(),
                        std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                    )
                };
                next_send = now + Duration::from_millis(250);
            }
            let wait = deadline
                .min(next_send)
                .saturating_duration_since(Instant::now());
            match poll_readable(&fd, wait) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => panic!("netns {ns}: {e}"),
            }
            // SAFETY: buf is valid for writes of its length.
            let got = unsafe {
                libc::recv(
                    fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if got <= 0 {
                continue;
            }
            if is_echo_reply(&buf[..got as usize], dst, id, token.as_bytes()) {
                return true;
            }
        }
    })
}

/// Whether `packet` (IPv4 header included, as a raw socket delivers it) is an echo reply from
/// `src` with identifier `id` and `payload`.
fn is_echo_reply(packet: &[u8], src: Ipv4Addr, id: u16, payload: &[u8]) -> bool {
    let Some(&vihl) = packet.first() else {
        return false;
    };
    let ihl = usize::from(vihl & 0x0f) * 4;
    if packet.len() < ihl + 8 || ihl < 20 || packet[9] != PROTO_ICMP {
        return false;
    }
    let from = Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]);
    let icmp = &packet[ihl..];
    from == src
        && icmp[0] == 0
        && u16::from_be_bytes([icmp[4], icmp[5]]) == id
        && &icmp[8..] == payload
}

// ---------------------------------------------------------------------------------------------
// ARP

/// From namespace `netns`: sends an ARP request for `dst` out of `ifname` with the interface's
/// own MAC and first IPv4 address as sender (resent every 250 ms), and waits up to `timeout`
/// for the matching reply on the wire. Returns the MAC `dst` answered with. Panics if the
/// interface does not exist or has no IPv4 address.
pub fn arp_probe(netns: &str, ifname: &str, dst: Ipv4Addr, timeout: Duration) -> Option<Mac> {
    let (mac, ip) = interface_addresses(netns, ifname);
    let ip = ip.unwrap_or_else(|| panic!("netns {netns}: {ifname} has no IPv4 address"));
    arp_probe_from(netns, ifname, Endpoint::new(mac, ip), dst, timeout)
}

/// Like [`arp_probe`] with any sender (which may lie): the request carries `sender` as
/// sha/spa and the Ethernet source, and the reply must be addressed to `sender.ip`.
pub fn arp_probe_from(
    netns: &str,
    ifname: &str,
    sender: Endpoint,
    dst: Ipv4Addr,
    timeout: Duration,
) -> Option<Mac> {
    let (ns, ifn) = (netns.to_string(), ifname.to_string());
    in_netns(netns, move || {
        let sock =
            PacketSocket::open(&ifn, ETHERTYPE_ARP).unwrap_or_else(|e| panic!("netns {ns}: {e}"));
        let request = arp_frame(
            BROADCAST,
            sender.mac,
            &Arp::request(sender.mac, sender.ip, dst),
            &[],
        );
        let deadline = Instant::now() + timeout;
        let mut next_send = Instant::now();
        let mut buf = vec![0u8; 65536];
        loop {
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            if now >= next_send {
                // A send error (interface down) is a network outcome: no answer.
                let _ = sock.send(&request);
                next_send = now + Duration::from_millis(250);
            }
            let wait = deadline
                .min(next_send)
                .saturating_duration_since(Instant::now());
            let got = sock
                .recv(&mut buf, wait)
                .unwrap_or_else(|e| panic!("netns {ns}: {e}"));
            let Some((n, false)) = got else { continue };
            if let Some(a) = Arp::from_frame(&buf[..n]) {
                if a.op == ARP_REPLY && a.spa == dst && a.tpa == sender.ip {
                    return Some(a.sha);
                }
            }
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Parallel

/// Runs every job on its own (scoped) thread at once and returns their results in order: a
/// matrix of probes costs about its slowest probe. A panic in a job is re-raised here.
pub fn parallel<T: Send, F: FnOnce() -> T + Send>(jobs: impl IntoIterator<Item = F>) -> Vec<T> {
    thread::scope(|s| {
        let handles: Vec<_> = jobs.into_iter().map(|f| s.spawn(f)).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// Whether `from_netns` reaches `to` over IPv6: ICMPv6 echo (two, either answered: the first may
/// wait for neighbour discovery across nodes on a loaded machine; a denied pair answers
/// neither) and a TCP echo through `to`'s server on `port`.
pub fn reach6(
    from_netns: &str,
    to: std::net::Ipv6Addr,
    port: u16,
    timeout: Duration,
) -> (bool, bool) {
    let wait = timeout.as_secs().max(1).to_string();
    let target = to.to_string();
    let icmp = crate::harness::run(
        "ip",
        &[
            "netns", "exec", from_netns, "ping", "-6", "-c", "2", "-i", "0.5", "-W", &wait, &target,
        ],
    )
    .is_ok();
    let tcp = tcp_probe_to(from_netns, SocketAddr::from((to, port)), timeout);
    (icmp, tcp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_checksum_example() {
        // RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum to ddf2.
        assert_eq!(
            internet_checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            !0xddf2
        );
        // Odd length: the last byte is padded with zero.
        assert_eq!(internet_checksum(&[0x01]), !0x0100);
        assert_eq!(internet_checksum(&[]), 0xffff);
    }

    #[test]
    fn ipv4_header_matches_a_known_packet() {
        // The classic example header: 4500 0073 0000 4000 4011 b861 c0a8 0001 c0a8 00c7.
        let p = ipv4(
            Ipv4Addr::new(192, 168, 0, 1),
            Ipv4Addr::new(192, 168, 0, 199),
            PROTO_UDP,
            &[0u8; 0x73 - 20],
        );
        assert_eq!(
            p[..20],
            [
                0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
                0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7
            ]
        );
        assert_eq!(
            internet_checksum(&p[..20]),
            0,
            "a valid header sums to zero"
        );
        assert_eq!(p.len(), 0x73);
    }

    #[test]
    fn udp_checksum_covers_the_pseudo_header() {
        let u = udp(
            "10.0.0.1:1234".parse().unwrap(),
            "10.0.0.2:5678".parse().unwrap(),
            b"hello",
        );
        // Computed independently (Python, RFC 768 pseudo-header).
        assert_eq!(
            u,
            [0x04, 0xd2, 0x16, 0x2e, 0x00, 0x0d, 0x8c, 0xff, b'h', b'e', b'l', b'l', b'o']
        );
    }

    #[test]
    fn icmp_echo_checksum() {
        let m = icmp_echo(false, 0x1234, 1, b"abcdefgh");
        assert_eq!(m[..8], [8, 0, 0x54, 0x35, 0x12, 0x34, 0x00, 0x01]);
        assert_eq!(&m[8..], b"abcdefgh");
        assert_eq!(internet_checksum(&m), 0);
        let r = icmp_echo(true, 0x1234, 1, b"abcdefgh");
        assert_eq!(r[0], 0);
        assert_eq!(internet_checksum(&r), 0);
    }

    #[test]
    fn arp_round_trips_and_has_the_wire_layout() {
        let sha = [0x0a, 0x58, 10, 128, 0, 2];
        let a = Arp::reply(
            sha,
            Ipv4Addr::new(10, 128, 0, 2),
            [1, 2, 3, 4, 5, 6],
            Ipv4Addr::new(10, 128, 0, 3),
        );
        let b = a.encode();
        assert_eq!(b[..8], [0, 1, 8, 0, 6, 4, 0, 2]);
        assert_eq!(b[8..14], sha);
        assert_eq!(b[14..18], [10, 128, 0, 2]);
        assert_eq!(Arp::parse(&b), Some(a));
        let f = arp_frame(BROADCAST, sha, &a, b"MARK");
        assert_eq!(f.len(), 14 + 28 + 4);
        assert_eq!(f[12..14], [0x08, 0x06]);
        assert_eq!(Arp::from_frame(&f), Some(a));
        assert!(contains(&f, b"MARK"));
        let g = Arp::gratuitous(sha, Ipv4Addr::new(10, 128, 0, 9));
        assert_eq!((g.op, g.spa, g.tpa), (ARP_REQUEST, g.tpa, g.spa));
        assert_eq!(Arp::parse(&b[..27]), None);
    }

    #[test]
    fn vxlan_header_carries_the_vni() {
        let inner = ethernet([1; 6], [2; 6], ETHERTYPE_IPV4, b"x");
        let v = vxlan(0x00ab_cdef, &inner);
        assert_eq!(v[..8], [0x08, 0, 0, 0, 0xab, 0xcd, 0xef, 0]);
        assert_eq!(&v[8..], &inner[..]);
        let from = Endpoint::pod(Ipv4Addr::new(10, 128, 0, 2));
        let to = Endpoint::new([3; 6], Ipv4Addr::new(10, 128, 0, 1));
        let f = vxlan_frame(from, to, 12, &inner);
        let (dst, src, et, ip) = parse_ethernet(&f).unwrap();
        assert_eq!((dst, src, et), (to.mac, from.mac, ETHERTYPE_IPV4));
        assert_eq!(ip[9], PROTO_UDP);
        assert_eq!(internet_checksum(&ip[..20]), 0);
        assert_eq!(ip[22..24], VXLAN_PORT.to_be_bytes());
        assert_eq!(ip[28..36], [0x08, 0, 0, 0, 0, 0, 12, 0]);
        // UDP checksum verifies over pseudo-header + segment.
        let mut pseudo = ip[12..20].to_vec();
        pseudo.extend_from_slice(&[0, PROTO_UDP]);
        pseudo.extend_from_slice(&ip[24..26]);
        pseudo.extend_from_slice(&ip[20..]);
        assert_eq!(internet_checksum(&pseudo), 0);
    }

    #[test]
    fn macs_parse_and_print() {
        let m = pod_mac(Ipv4Addr::new(10, 128, 0, 2));
        assert_eq!(mac_to_string(&m), "0a:58:0a:80:00:02");
        assert_eq!(parse_mac("0A:58:0a:80:00:02"), Some(m));
        assert_eq!(parse_mac("0a:58:0a:80:00"), None);
        assert_eq!(parse_mac("0a:58:0a:80:00:02:03"), None);
        assert_eq!(parse_mac("zz:58:0a:80:00:02"), None);
    }

    #[test]
    fn echo_reply_matching() {
        let token = b"tok";
        let reply = ipv4(
            Ipv4Addr::new(10, 0, 0, 2),
            Ipv4Addr::new(10, 0, 0, 1),
            PROTO_ICMP,
            &icmp_echo(true, 7, 1, token),
        );
        assert!(is_echo_reply(&reply, Ipv4Addr::new(10, 0, 0, 2), 7, token));
        assert!(!is_echo_reply(&reply, Ipv4Addr::new(10, 0, 0, 3), 7, token));
        assert!(!is_echo_reply(&reply, Ipv4Addr::new(10, 0, 0, 2), 8, token));
        assert!(!is_echo_reply(
            &reply,
            Ipv4Addr::new(10, 0, 0, 2),
            7,
            b"other"
        ));
        assert!(!is_echo_reply(
            &reply[..25],
            Ipv4Addr::new(10, 0, 0, 2),
            7,
            token
        ));
    }

    #[test]
    fn parallel_keeps_order() {
        let v = parallel((0..50).map(|i| move || i * 2));
        assert_eq!(v, (0..50).map(|i| i * 2).collect::<Vec<_>>());
    }
}
