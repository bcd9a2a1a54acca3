//! The headers of a packet the switch sent up, as far as an audit line needs them: the
//! addresses, the protocol, the ports (or ICMP type and code) and the IP length. Pure and
//! total: a packet cut short (the copies are cut to 128 bytes) or of another kind gives what
//! could be read, never a panic.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What an audit line says about a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Headers {
    /// Source address (an ARP packet's sender address).
    pub src: IpAddr,
    /// Destination address (an ARP packet's target address).
    pub dst: IpAddr,
    /// The IP protocol number (0 for ARP).
    pub proto: u8,
    /// Source port (TCP, UDP, SCTP), or the ICMP type.
    pub sport: Option<u16>,
    /// Destination port, or the ICMP code.
    pub dport: Option<u16>,
    /// The IP datagram's length, from its header.
    pub ip_len: u16,
    /// Whether this is ARP.
    pub arp: bool,
}

impl Headers {
    /// The protocol's name in log lines.
    pub(crate) fn protocol(&self) -> String {
        match (self.arp, self.proto) {
            (true, _) => "arp".into(),
            (_, 6) => "tcp".into(),
            (_, 17) => "udp".into(),
            (_, 132) => "sctp".into(),
            (_, 1) => "icmp".into(),
            (_, 58) => "icmpv6".into(),
            (_, n) => format!("ip-proto-{n}"),
        }
    }

    /// Whether the ports are ICMP type and code.
    pub(crate) fn is_icmp(&self) -> bool {
        matches!(self.proto, 1 | 58) && !self.arp
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// The headers of an Ethernet frame (one VLAN tag is skipped); `None` for a frame that holds
/// neither IP nor ARP, or too short to say.
pub(crate) fn parse(frame: &[u8]) -> Option<Headers> {
    let mut ethertype = be16(frame, 12)?;
    let mut at = 14;
    if ethertype == 0x8100 {
        ethertype = be16(frame, 16)?;
        at = 18;
    }
    let l3 = frame.get(at..)?;
    match ethertype {
        0x0800 => ipv4(l3),
        0x86dd => ipv6(l3),
        0x0806 => arp(l3),
        _ => None,
    }
}

fn ports(proto: u8, l4: &[u8]) -> (Option<u16>, Option<u16>) {
    match proto {
        6 | 17 | 132 => (be16(l4, 0), be16(l4, 2)),
        1 | 58 => (
            l4.first().map(|t| u16::from(*t)),
            l4.get(1).map(|c| u16::from(*c)),
        ),
        _ => (None, None),
    }
}

fn ipv4(p: &[u8]) -> Option<Headers> {
    let ihl = usize::from(*p.first()? & 0x0f) * 4;
    let src = Ipv4Addr::new(*p.get(12)?, *p.get(13)?, *p.get(14)?, *p.get(15)?);
    let dst = Ipv4Addr::new(*p.get(16)?, *p.get(17)?, *p.get(18)?, *p.get(19)?);
    let proto = *p.get(9)?;
    // A fragment past the first has no L4 header.
    let frag_offset = be16(p, 6)? & 0x1fff;
    let (sport, dport) = if frag_offset == 0 && ihl >= 20 {
        ports(proto, p.get(ihl..).unwrap_or(&[]))
    } else {
        (None, None)
    };
    Some(Headers {
        src: src.into(),
        dst: dst.into(),
        proto,
        sport,
        dport,
        ip_len: be16(p, 2)?,
        arp: false,
    })
}

fn ipv6(p: &[u8]) -> Option<Headers> {
    let addr = |at: usize| -> Option<Ipv6Addr> {
        let b: [u8; 16] = p.get(at..at + 16)?.try_into().ok()?;
        Some(Ipv6Addr::from(b))
    };
    let src = addr(8)?;
    let dst = addr(24)?;
    let proto = *p.get(6)?;
    let (sport, dport) = ports(proto, p.get(40..).unwrap_or(&[]));
    Some(Headers {
        src: src.into(),
        dst: dst.into(),
        proto,
        sport,
        dport,
        ip_len: be16(p, 4)?.saturating_add(40),
        arp: false,
    })
}

fn arp(p: &[u8]) -> Option<Headers> {
    let v4 = |at: usize| -> Option<Ipv4Addr> {
        Some(Ipv4Addr::new(
            *p.get(at)?,
            *p.get(at + 1)?,
            *p.get(at + 2)?,
            *p.get(at + 3)?,
        ))
    };
    Some(Headers {
        src: v4(14)?.into(),
        dst: v4(24)?.into(),
        proto: 0,
        sport: None,
        dport: None,
        ip_len: 0,
        arp: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eth(ethertype: u16, l3: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(l3);
        f
    }

    #[test]
    fn tcp_udp_icmp_over_both_families_and_arp() {
        let mut ip = vec![
            0x45, 0, 0, 60, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 128, 0, 5, 10, 128, 0, 6,
        ];
        ip.extend_from_slice(&[0xa8, 0xca, 0, 80]);
        let h = parse(&eth(0x0800, &ip)).unwrap();
        assert_eq!(h.src, IpAddr::from([10, 128, 0, 5]));
        assert_eq!(h.dst, IpAddr::from([10, 128, 0, 6]));
        assert_eq!(
            (h.protocol().as_str(), h.sport, h.dport),
            ("tcp", Some(43210), Some(80))
        );
        assert_eq!(h.ip_len, 60);
        // Cut inside the TCP header: the addresses, no ports.
        let h = parse(&eth(0x0800, &ip[..21])).unwrap();
        assert_eq!((h.sport, h.dport), (None, None));
        // A later fragment has no ports.
        let mut frag = ip.clone();
        frag[6] = 0x00;
        frag[7] = 0x10;
        assert_eq!(parse(&eth(0x0800, &frag)).unwrap().dport, None);
        // ICMP: type and code.
        let mut icmp = ip[..20].to_vec();
        icmp[9] = 1;
        icmp.extend_from_slice(&[8, 0]);
        let h = parse(&eth(0x0800, &icmp)).unwrap();
        assert!(h.is_icmp());
        assert_eq!((h.sport, h.dport), (Some(8), Some(0)));

        let mut v6 = vec![0x60, 0, 0, 0, 0, 12, 17, 64];
        v6.extend_from_slice(&"fd01::5".parse::<Ipv6Addr>().unwrap().octets());
        v6.extend_from_slice(&"fd01::6".parse::<Ipv6Addr>().unwrap().octets());
        v6.extend_from_slice(&[0x13, 0x88, 0x00, 0x35]);
        let h = parse(&eth(0x86dd, &v6)).unwrap();
        assert_eq!(h.dst, "fd01::6".parse::<IpAddr>().unwrap());
        assert_eq!(
            (h.protocol().as_str(), h.sport, h.dport),
            ("udp", Some(5000), Some(53))
        );
        assert_eq!(h.ip_len, 52);

        let mut a = vec![0, 1, 8, 0, 6, 4, 0, 1, 1, 2, 3, 4, 5, 6, 10, 128, 0, 9];
        a.extend_from_slice(&[0; 6]);
        a.extend_from_slice(&[10, 128, 0, 1]);
        let h = parse(&eth(0x0806, &a)).unwrap();
        assert!(h.arp);
        assert_eq!(h.src, IpAddr::from([10, 128, 0, 9]));
        assert_eq!(h.protocol(), "arp");

        assert!(parse(&eth(0x88cc, &[0; 40])).is_none());
        assert!(parse(&[0; 10]).is_none());
        assert!(parse(&eth(0x0800, &ip[..10])).is_none());
    }
}
