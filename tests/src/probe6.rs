//! IPv6 frames for the dual-stack tests: IPv6 headers, ICMPv6 with its checksum over the IPv6
//! pseudo-header, UDP over IPv6, and the neighbour-discovery messages a pod could forge
//! (solicitations, advertisements, router advertisements, redirects), each as a whole Ethernet
//! frame ready for [`crate::probe::send_frame`].
//!
//! Why apart from [`crate::probe`]: that module is the IPv4 toolkit every isolation test uses;
//! these builders serve the IPv6 guard tests alone, and every byte they write is the test's
//! (no options but those asked for, hop limit given), so a test can forge exactly the packet a
//! hostile pod would. A marker travels as an Ethernet trailer beyond the IPv6 payload length:
//! receivers' kernels ignore it, captures see it.

use std::net::Ipv6Addr;

use crate::probe::{ethernet, internet_checksum, Mac};

/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// IPv6 next header: ICMPv6.
pub const PROTO_ICMPV6: u8 = 58;
/// IPv6 next header: UDP.
pub const PROTO_UDP: u8 = 17;

/// ICMPv6 types of neighbour discovery (RFC 4861) and echo.
pub mod icmp6 {
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Router advertisement.
    pub const ROUTER_ADVERT: u8 = 134;
    /// Neighbour solicitation.
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    /// Neighbour advertisement.
    pub const NEIGHBOR_ADVERT: u8 = 136;
    /// Redirect.
    pub const REDIRECT: u8 = 137;
}

/// An IPv6 packet: the 40-byte header (no extension headers) and `payload`.
pub fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, next: u8, hop_limit: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(40 + payload.len());
    p.extend_from_slice(&[0x60, 0, 0, 0]);
    p.extend_from_slice(
        &u16::try_from(payload.len())
            .unwrap_or(u16::MAX)
            .to_be_bytes(),
    );
    p.push(next);
    p.push(hop_limit);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(payload);
    p
}

/// The checksum of an upper-layer message over the IPv6 pseudo-header (RFC 8200 8.1).
fn checksum6(src: Ipv6Addr, dst: Ipv6Addr, next: u8, msg: &[u8]) -> u16 {
    let mut pseudo = Vec::with_capacity(40 + msg.len());
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&u32::try_from(msg.len()).unwrap_or(u32::MAX).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, next]);
    pseudo.extend_from_slice(msg);
    internet_checksum(&pseudo)
}

/// An ICMPv6 message of `kind`/`code` with `body` (what follows the checksum), checksummed for
/// `src` -> `dst`.
pub fn icmp6(src: Ipv6Addr, dst: Ipv6Addr, kind: u8, code: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind, code, 0, 0];
    m.extend_from_slice(body);
    let sum = checksum6(src, dst, PROTO_ICMPV6, &m);
    m[2..4].copy_from_slice(&sum.to_be_bytes());
    m
}

/// A UDP datagram over IPv6 with its (mandatory) checksum.
pub fn udp6(src: (Ipv6Addr, u16), dst: (Ipv6Addr, u16), payload: &[u8]) -> Vec<u8> {
    let len = u16::try_from(8 + payload.len()).unwrap_or(u16::MAX);
    let mut u = Vec::with_capacity(8 + payload.len());
    u.extend_from_slice(&src.1.to_be_bytes());
    u.extend_from_slice(&dst.1.to_be_bytes());
    u.extend_from_slice(&len.to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    let sum = match checksum6(src.0, dst.0, PROTO_UDP, &u) {
        0 => 0xffff,
        s => s,
    };
    u[6..8].copy_from_slice(&sum.to_be_bytes());
    u
}

/// The solicited-node multicast group of `target` (`ff02::1:ffXX:XXXX`).
pub fn solicited_node(target: Ipv6Addr) -> Ipv6Addr {
    let t = target.octets();
    Ipv6Addr::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, t[13], t[14], t[15],
    ])
}

/// The Ethernet address of IPv6 multicast group `group` (`33:33:` and its last 32 bits).
pub fn multicast_mac(group: Ipv6Addr) -> Mac {
    let g = group.octets();
    [0x33, 0x33, g[12], g[13], g[14], g[15]]
}

/// A link-layer address option (type 1 source, 2 target).
fn lla_option(kind: u8, mac: Mac) -> Vec<u8> {
    let mut o = vec![kind, 1];
    o.extend_from_slice(&mac);
    o
}

/// A whole frame: Ethernet `eth_src` -> `eth_dst`, IPv6 `src` -> `dst` with hop limit 255 (as
/// neighbour discovery requires), the ICMPv6 message, then `trailer` beyond the payload.
pub fn nd_frame(
    eth: (Mac, Mac),
    ip: (Ipv6Addr, Ipv6Addr),
    kind: u8,
    body: &[u8],
    trailer: &[u8],
) -> Vec<u8> {
    let (eth_src, eth_dst) = eth;
    let (src, dst) = ip;
    let msg = icmp6(src, dst, kind, 0, body);
    let mut packet = ipv6(src, dst, PROTO_ICMPV6, 255, &msg);
    packet.extend_from_slice(trailer);
    ethernet(eth_dst, eth_src, ETHERTYPE_IPV6, &packet)
}

/// A neighbour solicitation for `target` from `src` (MAC `mac`) to its solicited-node group,
/// with source link-layer address `sll` (none when `None`).
pub fn solicitation(
    mac: Mac,
    src: Ipv6Addr,
    target: Ipv6Addr,
    sll: Option<Mac>,
    trailer: &[u8],
) -> Vec<u8> {
    let group = solicited_node(target);
    let mut body = vec![0, 0, 0, 0];
    body.extend_from_slice(&target.octets());
    if let Some(sll) = sll {
        body.extend(lla_option(1, sll));
    }
    nd_frame(
        (mac, multicast_mac(group)),
        (src, group),
        icmp6::NEIGHBOR_SOLICIT,
        &body,
        trailer,
    )
}

/// A neighbour advertisement (solicited, override) claiming `target` with target link-layer
/// address `tll`, from `src` (MAC `mac`) to `dst` at `eth_dst`.
pub fn advertisement(
    (mac, src): (Mac, Ipv6Addr),
    (eth_dst, dst): (Mac, Ipv6Addr),
    target: Ipv6Addr,
    tll: Option<Mac>,
    trailer: &[u8],
) -> Vec<u8> {
    let mut body = vec![0x60, 0, 0, 0];
    body.extend_from_slice(&target.octets());
    if let Some(tll) = tll {
        body.extend(lla_option(2, tll));
    }
    nd_frame(
        (mac, eth_dst),
        (src, dst),
        icmp6::NEIGHBOR_ADVERT,
        &body,
        trailer,
    )
}

/// A router advertisement from `src` (MAC `mac`) to all nodes (`ff02::1`), router lifetime 1800
/// s, announcing prefix `2001:db8::/64` for autoconfiguration.
pub fn router_advertisement(mac: Mac, src: Ipv6Addr, trailer: &[u8]) -> Vec<u8> {
    let all = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
    let mut body = vec![64, 0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0];
    body.extend(lla_option(1, mac));
    // Prefix information: type 3, length 4, /64, on-link + autonomous, lifetimes, prefix.
    body.extend_from_slice(&[3, 4, 64, 0xc0]);
    body.extend_from_slice(&[0, 0, 0x0e, 0x10, 0, 0, 0x07, 0x08, 0, 0, 0, 0]);
    body.extend_from_slice(&Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0).octets());
    nd_frame(
        (mac, multicast_mac(all)),
        (src, all),
        icmp6::ROUTER_ADVERT,
        &body,
        trailer,
    )
}

/// A redirect from `src` (MAC `mac`) telling `dst` (at `eth_dst`) to reach `destination`
/// through `target`.
pub fn redirect(
    (mac, src): (Mac, Ipv6Addr),
    (eth_dst, dst): (Mac, Ipv6Addr),
    target: Ipv6Addr,
    destination: Ipv6Addr,
    trailer: &[u8],
) -> Vec<u8> {
    let mut body = vec![0, 0, 0, 0];
    body.extend_from_slice(&target.octets());
    body.extend_from_slice(&destination.octets());
    nd_frame((mac, eth_dst), (src, dst), icmp6::REDIRECT, &body, trailer)
}

/// A whole Ethernet/IPv6/UDP frame; `trailer` goes beyond the IPv6 payload.
pub fn udp6_frame(
    (mac, src, sport): (Mac, Ipv6Addr, u16),
    (eth_dst, dst, dport): (Mac, Ipv6Addr, u16),
    payload: &[u8],
) -> Vec<u8> {
    let seg = udp6((src, sport), (dst, dport), payload);
    ethernet(
        eth_dst,
        mac,
        ETHERTYPE_IPV6,
        &ipv6(src, dst, PROTO_UDP, 64, &seg),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solicited_node_groups_and_their_macs() {
        let t: Ipv6Addr = "fd01::1:2:3:4".parse().unwrap();
        assert_eq!(solicited_node(t).to_string(), "ff02::1:ff03:4");
        assert_eq!(
            multicast_mac(solicited_node(t)),
            [0x33, 0x33, 0xff, 0x03, 0, 0x04]
        );
    }

    #[test]
    fn an_icmp6_checksum_verifies_to_zero() {
        let (s, d): (Ipv6Addr, Ipv6Addr) = ("fd01::2".parse().unwrap(), "fd01::3".parse().unwrap());
        let m = icmp6(s, d, icmp6::ECHO_REQUEST, 0, &[0, 1, 0, 1, 0xab]);
        assert_eq!(checksum6(s, d, PROTO_ICMPV6, &m), 0);
    }
}
