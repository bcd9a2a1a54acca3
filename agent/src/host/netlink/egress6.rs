//! Neighbour discovery for IPv6 egress IPs, in place of ARP: the address-conflict probe before
//! the node first holds an address, and the unsolicited neighbour advertisement after, both as
//! raw `AF_PACKET` frames on the node IP's interface (as the ARP ones in the parent module).
//!
//! The probe is duplicate address detection (RFC 4862 5.4) done by the agent rather than the
//! kernel, so it runs before the address exists and with the same rounds as the IPv4 probe: a
//! neighbour solicitation from `::` for the address, sent to its solicited-node group. A host
//! that holds the address answers with an advertisement to all nodes; a host probing for it at
//! the same time sends the same solicitation. Either is a conflict, and names that host's MAC.
//! The address is then added without the kernel's DAD (`nodad`), and an unsolicited
//! advertisement (RFC 4861 7.2.6: to all nodes, override flag set, our MAC as target link-layer
//! address) moves the neighbours' caches that already know the address, as a gratuitous ARP
//! does in IPv4.

use std::io;
use std::net::Ipv6Addr;

use super::egress::{EgressLink, RawSocket};

const ETH_P_IPV6: u16 = 0x86dd;
const ICMPV6: u8 = 58;
const NS: u8 = 135;
const NA: u8 = 136;

/// The solicited-node group of `ip` (`ff02::1:ffXX:XXXX`) and its MAC (`33:33:ff:XX:XX:XX`).
fn solicited_node(ip: Ipv6Addr) -> (Ipv6Addr, [u8; 6]) {
    let o = ip.octets();
    let group = Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    );
    (group, [0x33, 0x33, 0xff, o[13], o[14], o[15]])
}

/// The ICMPv6 checksum of `msg` (its checksum field zero) from `src` to `dst`.
fn checksum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut add = |bytes: &[u8]| {
        for c in bytes.chunks(2) {
            sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
    };
    add(&src.octets());
    add(&dst.octets());
    add(&(msg.len() as u32).to_be_bytes());
    add(&[0, 0, 0, ICMPV6]);
    add(msg);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An Ethernet frame carrying the ICMPv6 message `msg` (hop limit 255, as ND requires).
fn frame(
    mac: &[u8; 6],
    dst_mac: [u8; 6],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    mut msg: Vec<u8>,
) -> Vec<u8> {
    let sum = checksum(src, dst, &msg);
    msg[2..4].copy_from_slice(&sum.to_be_bytes());
    let mut f = Vec::with_capacity(54 + msg.len());
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(mac);
    f.extend_from_slice(&ETH_P_IPV6.to_be_bytes());
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    f.extend_from_slice(&[ICMPV6, 255]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(&msg);
    f
}

/// The probe: a solicitation from `::` for `ip` to its solicited-node group, no options.
fn probe_frame(mac: &[u8; 6], ip: Ipv6Addr) -> Vec<u8> {
    let (group, group_mac) = solicited_node(ip);
    let mut msg = vec![NS, 0, 0, 0, 0, 0, 0, 0];
    msg.extend_from_slice(&ip.octets());
    frame(mac, group_mac, Ipv6Addr::UNSPECIFIED, group, msg)
}

/// The unsolicited advertisement of `ip` at `mac`: from `ip` to all nodes, override set.
fn advertisement_frame(mac: &[u8; 6], ip: Ipv6Addr) -> Vec<u8> {
    let mut msg = vec![NA, 0, 0, 0, 0x20, 0, 0, 0];
    msg.extend_from_slice(&ip.octets());
    msg.extend_from_slice(&[2, 1]);
    msg.extend_from_slice(mac);
    let all_nodes = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
    frame(mac, [0x33, 0x33, 0, 0, 0, 1], ip, all_nodes, msg)
}

/// Sends one unsolicited neighbour advertisement for `ip` out of `link`. Best effort: the
/// caller logs a failure.
pub fn unsolicited_na(link: &EgressLink, ip: Ipv6Addr) -> io::Result<()> {
    RawSocket::open(link, ETH_P_IPV6, [0x33, 0x33, 0, 0, 0, 1])?
        .send(&advertisement_frame(&link.mac, ip))
}

/// Probes `ip` on `link` (see the module docs) and returns the MAC of a host that holds it or
/// probes for it too, or `None` when nobody did within the wait. Blocking: call it from a
/// blocking thread.
pub fn nd_probe(link: &EgressLink, ip: Ipv6Addr) -> io::Result<Option<[u8; 6]>> {
    let (_, group_mac) = solicited_node(ip);
    let sock = RawSocket::open(link, ETH_P_IPV6, group_mac)?;
    // A rival's probe goes to the solicited-node group: hear it.
    sock.join(group_mac)?;
    // The IPv4 probe's rounds and wait: shorter than RFC 4862's one second per probe, and
    // still enough to hear any host on the link.
    sock.probe(&probe_frame(&link.mac, ip), |f| {
        nd_conflict(f, &link.mac, ip)
    })
}

/// Whether a frame says another host holds `ip`: an advertisement for it, or another host's
/// probe (a solicitation from `::`) for it. Returns that host's MAC (the advertisement's target
/// link-layer address when it carries one, else the frame's source).
fn nd_conflict(frame: &[u8], own: &[u8; 6], ip: Ipv6Addr) -> Option<[u8; 6]> {
    let src_mac: [u8; 6] = frame.get(6..12)?.try_into().ok()?;
    if frame.get(12..14)? != ETH_P_IPV6.to_be_bytes() || src_mac == *own {
        return None;
    }
    let v6 = frame.get(14..54)?;
    if v6[6] != ICMPV6 {
        return None;
    }
    let src: [u8; 16] = v6[8..24].try_into().ok()?;
    let msg = frame.get(54..)?;
    let target: [u8; 16] = msg.get(8..24)?.try_into().ok()?;
    if Ipv6Addr::from(target) != ip {
        return None;
    }
    match msg[0] {
        NA => {
            let tll = msg.get(24..)?.chunks(8).find_map(|opt| {
                (opt.len() == 8 && opt[0] == 2 && opt[1] == 1)
                    .then(|| <[u8; 6]>::try_from(&opt[2..8]).ok())
                    .flatten()
            });
            Some(tll.unwrap_or(src_mac))
        }
        NS if Ipv6Addr::from(src).is_unspecified() => Some(src_mac),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const OTHER: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn ip() -> Ipv6Addr {
        "fd00:77::100".parse().unwrap()
    }

    #[test]
    fn frames_are_well_formed_nd() {
        let p = probe_frame(&OWN, ip());
        assert_eq!(&p[..6], &[0x33, 0x33, 0xff, 0, 1, 0]);
        assert_eq!(&p[12..14], &[0x86, 0xdd]);
        assert_eq!(p[14 + 7], 255, "hop limit");
        assert_eq!(&p[22..38], &[0; 16], "from ::");
        assert_eq!(
            Ipv6Addr::from(<[u8; 16]>::try_from(&p[38..54]).unwrap()),
            "ff02::1:ff00:100".parse::<Ipv6Addr>().unwrap()
        );
        // The checksum over the pseudo-header verifies (sums to zero).
        let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&p[38..54]).unwrap());
        assert_eq!(checksum(Ipv6Addr::UNSPECIFIED, dst, &p[54..]), 0);
        let a = advertisement_frame(&OWN, ip());
        assert_eq!(&a[..6], &[0x33, 0x33, 0, 0, 0, 1]);
        assert_eq!(a[54], NA);
        assert_eq!(a[58], 0x20, "override, not solicited, not a router");
        assert_eq!(&a[78..80], &[2, 1]);
        assert_eq!(&a[80..86], &OWN);
        let all = "ff02::1".parse().unwrap();
        assert_eq!(checksum(ip(), all, &a[54..]), 0);
    }

    #[test]
    fn an_advertisement_or_a_rival_probe_is_a_conflict_our_own_probe_is_not() {
        // Another host advertises the address (its MAC from the option).
        assert_eq!(
            nd_conflict(&advertisement_frame(&OTHER, ip()), &OWN, ip()),
            Some(OTHER)
        );
        // Another host probes for it at the same time.
        assert_eq!(
            nd_conflict(&probe_frame(&OTHER, ip()), &OWN, ip()),
            Some(OTHER)
        );
        // Our own frames, another address, a short frame.
        assert_eq!(nd_conflict(&probe_frame(&OWN, ip()), &OWN, ip()), None);
        let other_ip = "fd00:77::101".parse().unwrap();
        assert_eq!(
            nd_conflict(&advertisement_frame(&OTHER, other_ip), &OWN, ip()),
            None
        );
        assert_eq!(nd_conflict(&[0u8; 30], &OWN, ip()), None);
        // A solicitation from a real address (address resolution) is no conflict.
        let mut ns = probe_frame(&OTHER, ip());
        ns[22..38].copy_from_slice(&"fd00:77::5".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(nd_conflict(&ns, &OWN, ip()), None);
    }
}
