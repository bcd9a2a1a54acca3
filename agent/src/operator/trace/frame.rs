//! The live trace's packet as bytes: Ethernet, IPv4 or IPv6 with the trace's DSCP, and an
//! echo request, a TCP SYN or a UDP datagram, with every checksum right (the userspace
//! datapath's conntrack checks them, and a packet it calls invalid would not be the packet a
//! pod sends). The payload says what the packet is, for anyone who captures it.

use std::net::IpAddr;

use flows::live_trace::Transport;

/// What the payload of the traced packet says.
pub(crate) const PAYLOAD: &[u8] = b"sdn live trace";

/// One traced packet's headers.
pub(crate) struct Frame {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src: IpAddr,
    pub dst: IpAddr,
    pub dscp: u8,
    pub transport: Transport,
    /// The destination port (TCP, UDP).
    pub dst_port: u16,
    /// The ICMP echo identifier, TCP sequence number and IPv4 id come from it.
    pub nonce: u32,
}

fn sum16(data: &[u8], mut acc: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

impl Frame {
    /// The IP protocol number.
    fn proto(&self) -> u8 {
        match (self.transport, self.src.is_ipv6()) {
            (Transport::Icmp, false) => 1,
            (Transport::Icmp, true) => 58,
            (Transport::Tcp(_), _) => 6,
            (Transport::Udp(_), _) => 17,
        }
    }

    /// The transport header and payload, checksum 0 (filled in by [`Frame::bytes`]) and the
    /// checksum's offset.
    fn l4(&self) -> (Vec<u8>, usize) {
        let mut l4 = Vec::with_capacity(40);
        match self.transport {
            Transport::Icmp => {
                let echo = if self.src.is_ipv6() { 128 } else { 8 };
                l4.extend_from_slice(&[echo, 0, 0, 0]);
                l4.extend_from_slice(&(self.nonce as u16).to_be_bytes());
                l4.extend_from_slice(&1u16.to_be_bytes());
                l4.extend_from_slice(PAYLOAD);
                (l4, 2)
            }
            Transport::Tcp(sport) => {
                l4.extend_from_slice(&sport.to_be_bytes());
                l4.extend_from_slice(&self.dst_port.to_be_bytes());
                l4.extend_from_slice(&self.nonce.to_be_bytes());
                l4.extend_from_slice(&0u32.to_be_bytes());
                // Data offset 5 words, SYN; window; checksum; urgent pointer.
                l4.extend_from_slice(&[0x50, 0x02, 0xfa, 0xf0, 0, 0, 0, 0]);
                (l4, 16)
            }
            Transport::Udp(sport) => {
                l4.extend_from_slice(&sport.to_be_bytes());
                l4.extend_from_slice(&self.dst_port.to_be_bytes());
                l4.extend_from_slice(&((8 + PAYLOAD.len()) as u16).to_be_bytes());
                l4.extend_from_slice(&[0, 0]);
                l4.extend_from_slice(PAYLOAD);
                (l4, 6)
            }
        }
    }

    /// The whole frame.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let (mut l4, at) = self.l4();
        let proto = self.proto();
        let mut out = Vec::with_capacity(14 + 40 + l4.len());
        out.extend_from_slice(&self.dst_mac);
        out.extend_from_slice(&self.src_mac);
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                out.extend_from_slice(&0x0800u16.to_be_bytes());
                let mut ip = Vec::with_capacity(20);
                ip.extend_from_slice(&[0x45, self.dscp << 2]);
                ip.extend_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
                ip.extend_from_slice(&((self.nonce >> 16) as u16).to_be_bytes());
                ip.extend_from_slice(&[0x40, 0, 64, proto, 0, 0]);
                ip.extend_from_slice(&s.octets());
                ip.extend_from_slice(&d.octets());
                let c = fold(sum16(&ip, 0));
                ip[10..12].copy_from_slice(&c.to_be_bytes());
                // ICMPv4's checksum covers the message alone; TCP's and UDP's a pseudo-header.
                let acc = if proto == 1 {
                    0
                } else {
                    let mut pseudo = Vec::with_capacity(12);
                    pseudo.extend_from_slice(&s.octets());
                    pseudo.extend_from_slice(&d.octets());
                    pseudo.extend_from_slice(&[0, proto]);
                    pseudo.extend_from_slice(&(l4.len() as u16).to_be_bytes());
                    sum16(&pseudo, 0)
                };
                let c = fold(sum16(&l4, acc));
                l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
                out.extend_from_slice(&ip);
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                out.extend_from_slice(&0x86ddu16.to_be_bytes());
                let first = (6u32 << 28) | (u32::from(self.dscp << 2) << 20);
                out.extend_from_slice(&first.to_be_bytes());
                out.extend_from_slice(&(l4.len() as u16).to_be_bytes());
                out.extend_from_slice(&[proto, 64]);
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
                let mut pseudo = Vec::with_capacity(40);
                pseudo.extend_from_slice(&s.octets());
                pseudo.extend_from_slice(&d.octets());
                pseudo.extend_from_slice(&(l4.len() as u32).to_be_bytes());
                pseudo.extend_from_slice(&[0, 0, 0, proto]);
                let c = fold(sum16(&l4, sum16(&pseudo, 0)));
                l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
            }
            _ => unreachable!("both ends of a trace are of one family"),
        }
        out.extend_from_slice(&l4);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checksum over data that holds its own checksum folds to 0.
    fn verifies(data: &[u8], acc: u32) -> bool {
        fold(sum16(data, acc)) == 0
    }

    #[test]
    fn ipv4_frames_have_the_mark_and_right_checksums() {
        for transport in [
            Transport::Icmp,
            Transport::Tcp(41_000),
            Transport::Udp(41_000),
        ] {
            let f = Frame {
                src_mac: [0x0a, 0x58, 10, 128, 0, 2],
                dst_mac: [0x0a, 0x58, 10, 128, 0, 3],
                src: "10.128.0.2".parse().unwrap(),
                dst: "10.128.0.3".parse().unwrap(),
                dscp: 11,
                transport,
                dst_port: 8080,
                nonce: 0x1234_5678,
            };
            let b = f.bytes();
            assert_eq!(&b[12..14], &[0x08, 0x00]);
            let ip = &b[14..34];
            assert_eq!(ip[1] >> 2, 11, "DSCP");
            assert!(verifies(ip, 0), "IPv4 header checksum");
            let l4 = &b[34..];
            assert_eq!(
                usize::from(u16::from_be_bytes([ip[2], ip[3]])),
                20 + l4.len()
            );
            let acc = if ip[9] == 1 {
                0
            } else {
                let mut pseudo = ip[12..20].to_vec();
                pseudo.extend_from_slice(&[0, ip[9]]);
                pseudo.extend_from_slice(&(l4.len() as u16).to_be_bytes());
                sum16(&pseudo, 0)
            };
            assert!(verifies(l4, acc), "{transport:?} checksum");
            assert!(b.ends_with(PAYLOAD) || matches!(transport, Transport::Tcp(_)));
        }
    }

    #[test]
    fn ipv6_frames_carry_the_mark_in_the_traffic_class() {
        let f = Frame {
            src_mac: [0x0a, 0x58, 10, 128, 0, 2],
            dst_mac: [0x0a, 0x58, 10, 128, 0, 3],
            src: "fd01::2".parse().unwrap(),
            dst: "fd01::3".parse().unwrap(),
            dscp: 63,
            transport: Transport::Udp(41_000),
            dst_port: 53,
            nonce: 1,
        };
        let b = f.bytes();
        assert_eq!(&b[12..14], &[0x86, 0xdd]);
        let first = u32::from_be_bytes([b[14], b[15], b[16], b[17]]);
        assert_eq!((first >> 20) & 0xff, 63 << 2);
        let l4 = &b[54..];
        let mut pseudo = b[22..54].to_vec();
        pseudo.extend_from_slice(&(l4.len() as u32).to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, 17]);
        assert!(verifies(l4, sum16(&pseudo, 0)));
    }
}
