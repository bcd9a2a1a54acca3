//! The packet fields that actions read and write (`load`, `set_field`, `move`, `output:reg`,
//! `ct(zone=...)`), with their wire headers and the names `ovs-ofctl` prints.
//!
//! Each field has two spellings, exactly as Open vSwitch has them: the NXM name used inside
//! subfield syntax (`NXM_NX_REG0[0..15]`) and the short name used by `set_field` (`reg0`). It also
//! has two headers: the NXM header that `NXAST_REG_LOAD`/`NXAST_REG_MOVE` carry, and the header
//! OpenFlow 1.3 prefers in `OFPAT_SET_FIELD` (an OXM_OF header where one exists).

use std::fmt;
use std::str::FromStr;

use super::FlowError;

/// A field that actions can read or write.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum Field {
    /// `reg0`..`reg7` (32 bits each).
    Reg(u8),
    /// `tun_id`, the tunnel key: the VXLAN VNI (64 bits).
    TunId,
    /// `tun_src`, outer IPv4 source of a tunnel.
    TunSrc,
    /// `tun_dst`, outer IPv4 destination of a tunnel.
    TunDst,
    /// `eth_src`.
    EthSrc,
    /// `eth_dst`.
    EthDst,
    /// `ip_src`.
    IpSrc,
    /// `ip_dst`.
    IpDst,
    /// `ipv6_src` (128 bits).
    Ipv6Src,
    /// `ipv6_dst` (128 bits).
    Ipv6Dst,
    /// `tun_ipv6_src`, outer IPv6 source of a tunnel (128 bits).
    TunIpv6Src,
    /// `tun_ipv6_dst`, outer IPv6 destination of a tunnel (128 bits).
    TunIpv6Dst,
    /// `pkt_mark` (32 bits, shared with the kernel skb mark).
    PktMark,
    /// `ct_mark` (32 bits), writable only inside `ct(commit, exec(...))`.
    CtMark,
}

/// NXM/OXM class of the Nicira extension fields (NXM1).
pub const NXM_NX_CLASS: u16 = 0x0001;
/// NXM/OXM class of the original OpenFlow 1.0 fields (NXM0).
pub const NXM_OF_CLASS: u16 = 0x0000;
/// OXM class of the OpenFlow basic fields.
pub const OXM_OF_CLASS: u16 = 0x8000;

/// OXM_OF field numbers (class `0x8000`) this codec knows.
pub mod oxm_of {
    /// `OXM_OF_IN_PORT` (32 bits).
    pub const IN_PORT: u8 = 0;
    /// `OXM_OF_ETH_DST`.
    pub const ETH_DST: u8 = 3;
    /// `OXM_OF_ETH_SRC`.
    pub const ETH_SRC: u8 = 4;
    /// `OXM_OF_ETH_TYPE`.
    pub const ETH_TYPE: u8 = 5;
    /// `OXM_OF_IP_DSCP` (the DSCP, six bits, not shifted).
    pub const IP_DSCP: u8 = 8;
    /// `OXM_OF_IP_PROTO`.
    pub const IP_PROTO: u8 = 10;
    /// `OXM_OF_IPV4_SRC`.
    pub const IPV4_SRC: u8 = 11;
    /// `OXM_OF_IPV4_DST`.
    pub const IPV4_DST: u8 = 12;
    /// `OXM_OF_TCP_SRC`.
    pub const TCP_SRC: u8 = 13;
    /// `OXM_OF_TCP_DST`.
    pub const TCP_DST: u8 = 14;
    /// `OXM_OF_UDP_SRC`.
    pub const UDP_SRC: u8 = 15;
    /// `OXM_OF_UDP_DST`.
    pub const UDP_DST: u8 = 16;
    /// `OXM_OF_SCTP_SRC`.
    pub const SCTP_SRC: u8 = 17;
    /// `OXM_OF_SCTP_DST`.
    pub const SCTP_DST: u8 = 18;
    /// `OXM_OF_ARP_OP` (16 bits on the wire).
    pub const ARP_OP: u8 = 21;
    /// `OXM_OF_ARP_SPA`.
    pub const ARP_SPA: u8 = 22;
    /// `OXM_OF_ARP_TPA`.
    pub const ARP_TPA: u8 = 23;
    /// `OXM_OF_ARP_SHA`.
    pub const ARP_SHA: u8 = 24;
    /// `OXM_OF_ARP_THA`.
    pub const ARP_THA: u8 = 25;
    /// `OXM_OF_ICMPV4_TYPE`.
    pub const ICMPV4_TYPE: u8 = 19;
    /// `OXM_OF_ICMPV4_CODE`.
    pub const ICMPV4_CODE: u8 = 20;
    /// `OXM_OF_IPV6_SRC` (128 bits).
    pub const IPV6_SRC: u8 = 26;
    /// `OXM_OF_IPV6_DST` (128 bits).
    pub const IPV6_DST: u8 = 27;
    /// `OXM_OF_ICMPV6_TYPE`.
    pub const ICMPV6_TYPE: u8 = 29;
    /// `OXM_OF_ICMPV6_CODE`.
    pub const ICMPV6_CODE: u8 = 30;
    /// `OXM_OF_IPV6_ND_TARGET` (128 bits).
    pub const IPV6_ND_TARGET: u8 = 31;
    /// `OXM_OF_IPV6_ND_SLL`.
    pub const IPV6_ND_SLL: u8 = 32;
    /// `OXM_OF_IPV6_ND_TLL`.
    pub const IPV6_ND_TLL: u8 = 33;
    /// `OXM_OF_TUNNEL_ID` (64 bits).
    pub const TUNNEL_ID: u8 = 38;
}

/// Nicira NXM1 field numbers (class `0x0001`) this codec knows.
pub mod nxm_nx {
    /// `NXM_NX_REG0`; `REG0 + n` is `regN`.
    pub const REG0: u8 = 0;
    /// `NXM_NX_TUN_ID`.
    pub const TUN_ID: u8 = 16;
    /// `NXM_NX_ARP_SHA`.
    pub const ARP_SHA: u8 = 17;
    /// `NXM_NX_ARP_THA`.
    pub const ARP_THA: u8 = 18;
    /// `NXM_NX_IPV6_SRC`.
    pub const IPV6_SRC: u8 = 19;
    /// `NXM_NX_IPV6_DST`.
    pub const IPV6_DST: u8 = 20;
    /// `NXM_NX_ICMPV6_TYPE`.
    pub const ICMPV6_TYPE: u8 = 21;
    /// `NXM_NX_ICMPV6_CODE`.
    pub const ICMPV6_CODE: u8 = 22;
    /// `NXM_NX_ND_TARGET`.
    pub const ND_TARGET: u8 = 23;
    /// `NXM_NX_ND_SLL`.
    pub const ND_SLL: u8 = 24;
    /// `NXM_NX_ND_TLL`.
    pub const ND_TLL: u8 = 25;
    /// `NXM_NX_TUN_IPV4_SRC`.
    pub const TUN_IPV4_SRC: u8 = 31;
    /// `NXM_NX_TUN_IPV4_DST`.
    pub const TUN_IPV4_DST: u8 = 32;
    /// `NXM_NX_PKT_MARK`.
    pub const PKT_MARK: u8 = 33;
    /// `NXM_NX_CT_STATE` (32 bits, always masked in practice).
    pub const CT_STATE: u8 = 105;
    /// `NXM_NX_CT_ZONE` (16 bits).
    pub const CT_ZONE: u8 = 106;
    /// `NXM_NX_CT_MARK`.
    pub const CT_MARK: u8 = 107;
    /// `NXM_NX_CONJ_ID` (32 bits, exact; match only).
    pub const CONJ_ID: u8 = 37;
    /// `NXM_NX_TUN_IPV6_SRC` (128 bits).
    pub const TUN_IPV6_SRC: u8 = 109;
    /// `NXM_NX_TUN_IPV6_DST` (128 bits).
    pub const TUN_IPV6_DST: u8 = 110;
}

/// Nicira NXM0 field numbers (class `0x0000`, the OpenFlow 1.0 fields) accepted when decoding.
pub mod nxm_of {
    /// `NXM_OF_IN_PORT` (16 bits).
    pub const IN_PORT: u8 = 0;
    /// `NXM_OF_ETH_DST`.
    pub const ETH_DST: u8 = 1;
    /// `NXM_OF_ETH_SRC`.
    pub const ETH_SRC: u8 = 2;
    /// `NXM_OF_ETH_TYPE`.
    pub const ETH_TYPE: u8 = 3;
    /// `NXM_OF_IP_TOS` (the DSCP in the top six bits of the TOS byte).
    pub const IP_TOS: u8 = 5;
    /// `NXM_OF_IP_PROTO`.
    pub const IP_PROTO: u8 = 6;
    /// `NXM_OF_IP_SRC`.
    pub const IP_SRC: u8 = 7;
    /// `NXM_OF_IP_DST`.
    pub const IP_DST: u8 = 8;
    /// `NXM_OF_TCP_SRC`.
    pub const TCP_SRC: u8 = 9;
    /// `NXM_OF_TCP_DST`.
    pub const TCP_DST: u8 = 10;
    /// `NXM_OF_UDP_SRC`.
    pub const UDP_SRC: u8 = 11;
    /// `NXM_OF_UDP_DST`.
    pub const UDP_DST: u8 = 12;
    /// `NXM_OF_ICMP_TYPE`.
    pub const ICMP_TYPE: u8 = 13;
    /// `NXM_OF_ICMP_CODE`.
    pub const ICMP_CODE: u8 = 14;
    /// `NXM_OF_ARP_OP`.
    pub const ARP_OP: u8 = 15;
    /// `NXM_OF_ARP_SPA`.
    pub const ARP_SPA: u8 = 16;
    /// `NXM_OF_ARP_TPA`.
    pub const ARP_TPA: u8 = 17;
}

/// Builds a 32-bit NXM/OXM header: class, field, has-mask bit, payload length in bytes.
pub const fn header(class: u16, field: u8, hasmask: bool, len: u8) -> u32 {
    ((class as u32) << 16) | ((field as u32) << 9) | ((hasmask as u32) << 8) | len as u32
}

impl Field {
    /// Every field, for tables and tests.
    pub const ALL: [Field; 21] = [
        Field::Reg(0),
        Field::Reg(1),
        Field::Reg(2),
        Field::Reg(3),
        Field::Reg(4),
        Field::Reg(5),
        Field::Reg(6),
        Field::Reg(7),
        Field::TunId,
        Field::TunSrc,
        Field::TunDst,
        Field::EthSrc,
        Field::EthDst,
        Field::IpSrc,
        Field::IpDst,
        Field::Ipv6Src,
        Field::Ipv6Dst,
        Field::TunIpv6Src,
        Field::TunIpv6Dst,
        Field::PktMark,
        Field::CtMark,
    ];

    /// Width of the field in bits.
    pub fn bits(self) -> u8 {
        match self {
            Field::Reg(_) | Field::TunSrc | Field::TunDst | Field::IpSrc | Field::IpDst => 32,
            Field::PktMark | Field::CtMark => 32,
            Field::TunId => 64,
            Field::EthSrc | Field::EthDst => 48,
            Field::Ipv6Src | Field::Ipv6Dst | Field::TunIpv6Src | Field::TunIpv6Dst => 128,
        }
    }

    /// Width of the field in bytes.
    pub fn bytes(self) -> u8 {
        self.bits() / 8
    }

    /// The name inside subfield syntax, e.g. `NXM_NX_REG0`.
    pub fn nxm_name(self) -> &'static str {
        match self {
            Field::Reg(n) => [
                "NXM_NX_REG0",
                "NXM_NX_REG1",
                "NXM_NX_REG2",
                "NXM_NX_REG3",
                "NXM_NX_REG4",
                "NXM_NX_REG5",
                "NXM_NX_REG6",
                "NXM_NX_REG7",
            ][n as usize & 7],
            Field::TunId => "NXM_NX_TUN_ID",
            Field::TunSrc => "NXM_NX_TUN_IPV4_SRC",
            Field::TunDst => "NXM_NX_TUN_IPV4_DST",
            Field::EthSrc => "NXM_OF_ETH_SRC",
            Field::EthDst => "NXM_OF_ETH_DST",
            Field::IpSrc => "NXM_OF_IP_SRC",
            Field::IpDst => "NXM_OF_IP_DST",
            Field::Ipv6Src => "NXM_NX_IPV6_SRC",
            Field::Ipv6Dst => "NXM_NX_IPV6_DST",
            Field::TunIpv6Src => "NXM_NX_TUN_IPV6_SRC",
            Field::TunIpv6Dst => "NXM_NX_TUN_IPV6_DST",
            Field::PktMark => "NXM_NX_PKT_MARK",
            Field::CtMark => "NXM_NX_CT_MARK",
        }
    }

    /// The short name `set_field` prints, e.g. `reg0`, `tun_dst`.
    pub fn name(self) -> &'static str {
        match self {
            Field::Reg(n) => [
                "reg0", "reg1", "reg2", "reg3", "reg4", "reg5", "reg6", "reg7",
            ][n as usize & 7],
            Field::TunId => "tun_id",
            Field::TunSrc => "tun_src",
            Field::TunDst => "tun_dst",
            Field::EthSrc => "eth_src",
            Field::EthDst => "eth_dst",
            Field::IpSrc => "ip_src",
            Field::IpDst => "ip_dst",
            Field::Ipv6Src => "ipv6_src",
            Field::Ipv6Dst => "ipv6_dst",
            Field::TunIpv6Src => "tun_ipv6_src",
            Field::TunIpv6Dst => "tun_ipv6_dst",
            Field::PktMark => "pkt_mark",
            Field::CtMark => "ct_mark",
        }
    }

    /// (class, field) of the NXM header, used by `NXAST_REG_LOAD`, `NXAST_REG_MOVE`,
    /// `NXAST_OUTPUT_REG` and `NXAST_CT` zone.
    pub fn nxm(self) -> (u16, u8) {
        match self {
            Field::Reg(n) => (NXM_NX_CLASS, nxm_nx::REG0 + n),
            Field::TunId => (NXM_NX_CLASS, nxm_nx::TUN_ID),
            Field::TunSrc => (NXM_NX_CLASS, nxm_nx::TUN_IPV4_SRC),
            Field::TunDst => (NXM_NX_CLASS, nxm_nx::TUN_IPV4_DST),
            Field::EthDst => (NXM_OF_CLASS, nxm_of::ETH_DST),
            Field::EthSrc => (NXM_OF_CLASS, nxm_of::ETH_SRC),
            Field::IpSrc => (NXM_OF_CLASS, nxm_of::IP_SRC),
            Field::IpDst => (NXM_OF_CLASS, nxm_of::IP_DST),
            Field::Ipv6Src => (NXM_NX_CLASS, nxm_nx::IPV6_SRC),
            Field::Ipv6Dst => (NXM_NX_CLASS, nxm_nx::IPV6_DST),
            Field::TunIpv6Src => (NXM_NX_CLASS, nxm_nx::TUN_IPV6_SRC),
            Field::TunIpv6Dst => (NXM_NX_CLASS, nxm_nx::TUN_IPV6_DST),
            Field::PktMark => (NXM_NX_CLASS, nxm_nx::PKT_MARK),
            Field::CtMark => (NXM_NX_CLASS, nxm_nx::CT_MARK),
        }
    }

    /// (class, field) OpenFlow 1.3 uses in `OFPAT_SET_FIELD` (OXM_OF where the field has one).
    pub fn oxm(self) -> (u16, u8) {
        match self {
            Field::TunId => (OXM_OF_CLASS, oxm_of::TUNNEL_ID),
            Field::EthDst => (OXM_OF_CLASS, oxm_of::ETH_DST),
            Field::EthSrc => (OXM_OF_CLASS, oxm_of::ETH_SRC),
            Field::IpSrc => (OXM_OF_CLASS, oxm_of::IPV4_SRC),
            Field::IpDst => (OXM_OF_CLASS, oxm_of::IPV4_DST),
            Field::Ipv6Src => (OXM_OF_CLASS, oxm_of::IPV6_SRC),
            Field::Ipv6Dst => (OXM_OF_CLASS, oxm_of::IPV6_DST),
            other => other.nxm(),
        }
    }

    /// The NXM header without mask, as carried by NXAST actions.
    pub fn nxm_header(self) -> u32 {
        let (class, field) = self.nxm();
        header(class, field, false, self.bytes())
    }

    /// The OXM header without mask, as carried by `OFPAT_SET_FIELD`.
    pub fn oxm_header(self) -> u32 {
        let (class, field) = self.oxm();
        header(class, field, false, self.bytes())
    }

    /// The field whose NXM or OXM header (mask bit ignored) is `hdr`.
    pub fn from_header(hdr: u32) -> Option<Field> {
        let class = (hdr >> 16) as u16;
        let field = ((hdr >> 9) & 0x7f) as u8;
        Field::ALL
            .into_iter()
            .find(|f| f.nxm() == (class, field) || f.oxm() == (class, field))
    }

    /// The field with NXM name `name` (`NXM_NX_REG0`), or short name (`reg0`).
    pub fn from_name(name: &str) -> Option<Field> {
        Field::ALL
            .into_iter()
            .find(|f| f.nxm_name() == name || f.name() == name)
    }
}

/// A bit range of a field: `NXM_NX_REG0[]`, `NXM_NX_TUN_ID[0..31]`, `NXM_NX_REG3[5]`.
///
/// Construction checks the range fits the field, so a subfield can always be encoded.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Subfield {
    field: Field,
    ofs: u8,
    n_bits: u8,
}

impl Subfield {
    /// The whole field.
    pub fn whole(field: Field) -> Self {
        Subfield {
            field,
            ofs: 0,
            n_bits: field.bits(),
        }
    }

    /// Bits `start..=end` of `field` (inclusive, as in `[0..31]`).
    pub fn range(field: Field, start: u8, end: u8) -> Result<Self, FlowError> {
        if start > end || end >= field.bits() {
            return Err(FlowError::Invalid(format!(
                "bit range [{start}..{end}] does not fit {} ({} bits)",
                field.nxm_name(),
                field.bits()
            )));
        }
        Ok(Subfield {
            field,
            ofs: start,
            n_bits: end - start + 1,
        })
    }

    /// The field.
    pub fn field(&self) -> Field {
        self.field
    }

    /// First bit.
    pub fn ofs(&self) -> u8 {
        self.ofs
    }

    /// Number of bits (at least 1).
    pub fn n_bits(&self) -> u8 {
        self.n_bits
    }

    /// Whether the subfield covers the whole field.
    pub fn is_whole(&self) -> bool {
        self.ofs == 0 && self.n_bits == self.field.bits()
    }

    /// The `ofs_nbits` encoding of NXAST actions: `ofs << 6 | (n_bits - 1)`.
    pub fn ofs_nbits(&self) -> u16 {
        ((self.ofs as u16) << 6) | (self.n_bits as u16 - 1)
    }

    /// Decodes `ofs_nbits` for `field`.
    pub fn from_ofs_nbits(field: Field, ofs_nbits: u16) -> Result<Self, FlowError> {
        let ofs = (ofs_nbits >> 6) as u32;
        let end = ofs + (ofs_nbits & 0x3f) as u32;
        if end >= field.bits() as u32 {
            return Err(FlowError::Invalid(format!(
                "bit range [{ofs}..{end}] does not fit {}",
                field.nxm_name()
            )));
        }
        Subfield::range(field, ofs as u8, end as u8)
    }
}

impl fmt::Display for Subfield {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.field.nxm_name();
        if self.is_whole() {
            write!(f, "{name}[]")
        } else if self.n_bits == 1 {
            write!(f, "{name}[{}]", self.ofs)
        } else {
            write!(f, "{name}[{}..{}]", self.ofs, self.ofs + self.n_bits - 1)
        }
    }
}

impl FromStr for Subfield {
    type Err = FlowError;

    /// `NXM_NX_REG0[]`, `NXM_NX_REG0[3]`, `NXM_NX_TUN_ID[0..31]`, or a bare name for the whole
    /// field (`reg0`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || FlowError::Parse(format!("invalid subfield {s:?}"));
        let (name, range) = match s.split_once('[') {
            Some((n, r)) => (n, Some(r.strip_suffix(']').ok_or_else(bad)?)),
            None => (s, None),
        };
        let field = Field::from_name(name)
            .ok_or_else(|| FlowError::Parse(format!("unknown field {name:?} in {s:?}")))?;
        match range {
            None | Some("") => Ok(Subfield::whole(field)),
            Some(r) => match r.split_once("..") {
                Some((a, b)) => Subfield::range(
                    field,
                    a.parse().map_err(|_| bad())?,
                    b.parse().map_err(|_| bad())?,
                ),
                None => {
                    let bit = r.parse().map_err(|_| bad())?;
                    Subfield::range(field, bit, bit)
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subfield_text() {
        for s in [
            "NXM_NX_REG0[]",
            "NXM_NX_TUN_ID[0..31]",
            "NXM_NX_REG3[5]",
            "NXM_OF_ETH_DST[]",
        ] {
            assert_eq!(s.parse::<Subfield>().unwrap().to_string(), s);
        }
        assert_eq!(
            "reg2".parse::<Subfield>().unwrap().to_string(),
            "NXM_NX_REG2[]"
        );
        assert!("NXM_NX_REG0[0..32]".parse::<Subfield>().is_err());
        assert!("NXM_NX_REG9[]".parse::<Subfield>().is_err());
    }

    #[test]
    fn headers_round_trip() {
        for f in Field::ALL {
            assert_eq!(Field::from_header(f.nxm_header()), Some(f));
            assert_eq!(Field::from_header(f.oxm_header()), Some(f));
        }
        assert_eq!(Field::Reg(0).nxm_header(), 0x0001_0004);
        assert_eq!(Field::TunId.oxm_header(), 0x8000_4c08);
    }

    #[test]
    fn ofs_nbits_round_trip() {
        let s = Subfield::range(Field::TunId, 0, 31).unwrap();
        assert_eq!(
            Subfield::from_ofs_nbits(Field::TunId, s.ofs_nbits()).unwrap(),
            s
        );
    }
}
