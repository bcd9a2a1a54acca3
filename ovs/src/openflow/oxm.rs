//! `Match` <-> OpenFlow 1.3 `ofp_match` (type `OFPMT_OXM`): a list of OXM TLVs.
//!
//! Each TLV is a 32-bit header (`class << 16 | field << 9 | hasmask << 8 | length`) followed by
//! the value and, when the has-mask bit is set, a mask of the same width. The `ofp_match` length
//! counts its 4-byte header and the TLVs but not the padding to a multiple of 8.
//!
//! Encoding emits fields in prerequisite order (`eth_type` before `ip_proto` before L3/L4
//! fields), because Open vSwitch checks prerequisites while it parses. It uses the OXM_OF header
//! where OpenFlow 1.3 defines one and the Nicira (NXM1, class `0x0001`) header otherwise, which is
//! also what Open vSwitch sends back in flow-stats replies.
//!
//! Decoding accepts both spellings of a field (for example `NXM_NX_TUN_ID` and
//! `OXM_OF_TUNNEL_ID`), in any order, treats an all-ones mask as exact and builds canonical
//! [`Masked`] values, so that `decode(encode(m)) == m`. The L4 port headers (TCP/UDP/SCTP) are
//! checked against `ip_proto` because the model keeps one `tp_src`/`tp_dst` pair.
//!
//! The ICMP type and code headers are per family (`OXM_OF_ICMPV4_TYPE`, `OXM_OF_ICMPV6_TYPE`)
//! while the model keeps one `icmp_type`/`icmp_code` pair, so the encoder picks the header from
//! `eth_type` and the decoder checks the header's family against it.
//!
//! Limits: only the fields the `Match` model has; anything else (VLANs, the IPv6 flow label,
//! metadata, experimenter OXMs...) is refused with [`CodecError::Unsupported`] naming class
//! and field.
//!
//! Reads go through the codec's bounds-checked [`Reader`] (`super::reader`), so a short buffer
//! is a [`CodecError::Truncated`], never a panic.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::reader::{be_u128, be_uint, len_u16, pad_to_8, patch_u16, Reader};
use super::CodecError;
use crate::flow::fields::{header, NXM_NX_CLASS, NXM_OF_CLASS, OXM_OF_CLASS};
use crate::flow::matches::{ETH_TYPE_IP, ETH_TYPE_IPV6, IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP};
use crate::flow::{CtState, FlowError, MacAddr, Masked, Match};

/// `ofp_match.type` of an OXM match.
pub const OFPMT_OXM: u16 = 1;

/// The field numbers, defined once in the model next to `Field`, re-exported for the codec.
pub use crate::flow::fields::{nxm_nx, nxm_of, oxm_of};

/// Appends one OXM TLV.
fn put_tlv(out: &mut Vec<u8>, class: u16, field: u8, value: &[u8], mask: Option<&[u8]>) {
    // Field widths here are at most 16 bytes, so the payload length always fits a u8.
    let len = (value.len() + mask.map_or(0, <[u8]>::len)) as u8;
    out.extend_from_slice(&header(class, field, mask.is_some(), len).to_be_bytes());
    out.extend_from_slice(value);
    if let Some(m) = mask {
        out.extend_from_slice(m);
    }
}

/// Values with a fixed big-endian wire form.
trait Wire: Copy {
    fn put(self, out: &mut Vec<u8>);
}

macro_rules! wire_be {
    ($($t:ty),*) => {$(
        impl Wire for $t {
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_be_bytes());
            }
        }
    )*};
}
wire_be!(u16, u32, u64);
impl Wire for Ipv4Addr {
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.octets());
    }
}
impl Wire for Ipv6Addr {
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.octets());
    }
}
impl Wire for MacAddr {
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0);
    }
}

fn put_exact<T: Wire>(out: &mut Vec<u8>, class: u16, field: u8, v: T) {
    let mut value = Vec::with_capacity(8);
    v.put(&mut value);
    put_tlv(out, class, field, &value, None);
}

fn put_masked<T: Wire + crate::flow::types::Maskable>(
    out: &mut Vec<u8>,
    class: u16,
    field: u8,
    m: Masked<T>,
) {
    let mut value = Vec::with_capacity(16);
    m.value().put(&mut value);
    match m.mask() {
        None => put_tlv(out, class, field, &value, None),
        Some(mask) => {
            let mut mb = Vec::with_capacity(16);
            mask.put(&mut mb);
            put_tlv(out, class, field, &value, Some(&mb));
        }
    }
}

/// Appends an OF1.3 `ofp_match` (type OFPMT_OXM) for `m` to `out`, padded to a multiple of 8.
///
/// Checks the match's prerequisites first ([`Match::validate`]); an empty `ct_state` (no flag
/// constrained) is refused because it would encode to nothing and not read back.
pub fn encode_match(m: &Match, out: &mut Vec<u8>) -> Result<(), CodecError> {
    m.validate()?;
    let start = out.len();
    out.extend_from_slice(&OFPMT_OXM.to_be_bytes());
    out.extend_from_slice(&[0, 0]); // length, patched below
    let of = OXM_OF_CLASS;
    let nx = NXM_NX_CLASS;

    if let Some(p) = m.in_port {
        put_exact(out, of, oxm_of::IN_PORT, p);
    }
    if let Some(v) = m.eth_dst {
        put_masked(out, of, oxm_of::ETH_DST, v);
    }
    if let Some(v) = m.eth_src {
        put_masked(out, of, oxm_of::ETH_SRC, v);
    }
    if let Some(t) = m.eth_type {
        put_exact(out, of, oxm_of::ETH_TYPE, t);
    }
    if let Some(d) = m.ip_dscp {
        put_tlv(out, of, oxm_of::IP_DSCP, &[d], None);
    }
    if let Some(p) = m.ip_proto {
        put_tlv(out, of, oxm_of::IP_PROTO, &[p], None);
    }
    if let Some(v) = m.ipv4_src {
        put_masked(out, of, oxm_of::IPV4_SRC, v);
    }
    if let Some(v) = m.ipv4_dst {
        put_masked(out, of, oxm_of::IPV4_DST, v);
    }
    if let Some(v) = m.ipv6_src {
        put_masked(out, of, oxm_of::IPV6_SRC, v);
    }
    if let Some(v) = m.ipv6_dst {
        put_masked(out, of, oxm_of::IPV6_DST, v);
    }
    let (icmp_type, icmp_code) = if m.eth_type == Some(ETH_TYPE_IPV6) {
        (oxm_of::ICMPV6_TYPE, oxm_of::ICMPV6_CODE)
    } else {
        (oxm_of::ICMPV4_TYPE, oxm_of::ICMPV4_CODE)
    };
    if let Some(t) = m.icmp_type {
        put_tlv(out, of, icmp_type, &[t], None);
    }
    if let Some(c) = m.icmp_code {
        put_tlv(out, of, icmp_code, &[c], None);
    }
    if let Some(v) = m.nd_target {
        put_masked(out, of, oxm_of::IPV6_ND_TARGET, v);
    }
    if let Some(v) = m.nd_sll {
        put_masked(out, of, oxm_of::IPV6_ND_SLL, v);
    }
    if let Some(v) = m.nd_tll {
        put_masked(out, of, oxm_of::IPV6_ND_TLL, v);
    }
    if m.tp_src.is_some() || m.tp_dst.is_some() {
        let (src, dst) = match m.ip_proto {
            Some(IPPROTO_TCP) => (oxm_of::TCP_SRC, oxm_of::TCP_DST),
            Some(IPPROTO_UDP) => (oxm_of::UDP_SRC, oxm_of::UDP_DST),
            Some(IPPROTO_SCTP) => (oxm_of::SCTP_SRC, oxm_of::SCTP_DST),
            other => {
                return Err(FlowError::Invalid(format!(
                    "match on tp_src/tp_dst needs tcp, udp or sctp, not nw_proto {other:?}"
                ))
                .into())
            }
        };
        if let Some(v) = m.tp_src {
            put_masked(out, of, src, v);
        }
        if let Some(v) = m.tp_dst {
            put_masked(out, of, dst, v);
        }
    }
    if let Some(op) = m.arp_op {
        put_exact(out, of, oxm_of::ARP_OP, op);
    }
    if let Some(v) = m.arp_spa {
        put_masked(out, of, oxm_of::ARP_SPA, v);
    }
    if let Some(v) = m.arp_tpa {
        put_masked(out, of, oxm_of::ARP_TPA, v);
    }
    if let Some(v) = m.arp_sha {
        put_masked(out, of, oxm_of::ARP_SHA, v);
    }
    if let Some(v) = m.arp_tha {
        put_masked(out, of, oxm_of::ARP_THA, v);
    }
    if let Some(v) = m.tun_id {
        put_masked(out, of, oxm_of::TUNNEL_ID, v);
    }
    for (n, r) in m.regs.iter().enumerate() {
        if let Some(v) = r {
            put_masked(out, nx, nxm_nx::REG0 + n as u8, *v);
        }
    }
    if let Some(v) = m.tun_src {
        put_masked(out, nx, nxm_nx::TUN_IPV4_SRC, v);
    }
    if let Some(v) = m.tun_dst {
        put_masked(out, nx, nxm_nx::TUN_IPV4_DST, v);
    }
    if let Some(v) = m.tun_ipv6_src {
        put_masked(out, nx, nxm_nx::TUN_IPV6_SRC, v);
    }
    if let Some(v) = m.tun_ipv6_dst {
        put_masked(out, nx, nxm_nx::TUN_IPV6_DST, v);
    }
    if let Some(s) = m.ct_state {
        let (value, mask) = s.value_mask();
        if mask == 0 {
            return Err(FlowError::Invalid(
                "ct_state constrains no flag: leave the field out instead".into(),
            )
            .into());
        }
        if mask == u32::MAX {
            put_exact(out, nx, nxm_nx::CT_STATE, value);
        } else {
            put_tlv(
                out,
                nx,
                nxm_nx::CT_STATE,
                &value.to_be_bytes(),
                Some(&mask.to_be_bytes()),
            );
        }
    }
    if let Some(z) = m.ct_zone {
        put_exact(out, nx, nxm_nx::CT_ZONE, z);
    }
    if let Some(v) = m.ct_mark {
        put_masked(out, nx, nxm_nx::CT_MARK, v);
    }
    if let Some(v) = m.pkt_mark {
        put_masked(out, nx, nxm_nx::PKT_MARK, v);
    }
    if let Some(v) = m.conj_id {
        put_exact(out, nx, nxm_nx::CONJ_ID, v);
    }

    let len = len_u16(out, start, "ofp_match")?;
    patch_u16(out, start + 2, len);
    pad_to_8(out, start);
    Ok(())
}

/// The fields the decoder knows, whatever header spelled them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Id {
    InPort,
    InPort16,
    EthDst,
    EthSrc,
    EthType,
    IpProto,
    /// The DSCP as OXM gives it (six bits).
    IpDscp,
    /// The DSCP as NXM gives it (the TOS byte's top six bits).
    IpTos,
    Ipv4Src,
    Ipv4Dst,
    Ipv6Src,
    Ipv6Dst,
    /// ICMP type; the EtherType of the family the header named.
    IcmpType(u16),
    /// ICMP code; the EtherType of the family the header named.
    IcmpCode(u16),
    NdTarget,
    NdSll,
    NdTll,
    TunIpv6Src,
    TunIpv6Dst,
    /// L4 source port; the protocol the header named.
    TpSrc(u8),
    /// L4 destination port; the protocol the header named.
    TpDst(u8),
    ArpOp,
    ArpSpa,
    ArpTpa,
    ArpSha,
    ArpTha,
    TunKey,
    Reg(u8),
    TunSrc,
    TunDst,
    CtState,
    CtZone,
    CtMark,
    PktMark,
    Conjunction,
}

impl Id {
    fn lookup(class: u16, field: u8) -> Option<Id> {
        Some(match (class, field) {
            (OXM_OF_CLASS, oxm_of::IN_PORT) => Id::InPort,
            (OXM_OF_CLASS, oxm_of::ETH_DST) | (NXM_OF_CLASS, nxm_of::ETH_DST) => Id::EthDst,
            (OXM_OF_CLASS, oxm_of::ETH_SRC) | (NXM_OF_CLASS, nxm_of::ETH_SRC) => Id::EthSrc,
            (OXM_OF_CLASS, oxm_of::ETH_TYPE) | (NXM_OF_CLASS, nxm_of::ETH_TYPE) => Id::EthType,
            (OXM_OF_CLASS, oxm_of::IP_PROTO) | (NXM_OF_CLASS, nxm_of::IP_PROTO) => Id::IpProto,
            (OXM_OF_CLASS, oxm_of::IP_DSCP) => Id::IpDscp,
            (NXM_OF_CLASS, nxm_of::IP_TOS) => Id::IpTos,
            (OXM_OF_CLASS, oxm_of::IPV4_SRC) | (NXM_OF_CLASS, nxm_of::IP_SRC) => Id::Ipv4Src,
            (OXM_OF_CLASS, oxm_of::IPV4_DST) | (NXM_OF_CLASS, nxm_of::IP_DST) => Id::Ipv4Dst,
            (OXM_OF_CLASS, oxm_of::TCP_SRC) | (NXM_OF_CLASS, nxm_of::TCP_SRC) => {
                Id::TpSrc(IPPROTO_TCP)
            }
            (OXM_OF_CLASS, oxm_of::TCP_DST) | (NXM_OF_CLASS, nxm_of::TCP_DST) => {
                Id::TpDst(IPPROTO_TCP)
            }
            (OXM_OF_CLASS, oxm_of::UDP_SRC) | (NXM_OF_CLASS, nxm_of::UDP_SRC) => {
                Id::TpSrc(IPPROTO_UDP)
            }
            (OXM_OF_CLASS, oxm_of::UDP_DST) | (NXM_OF_CLASS, nxm_of::UDP_DST) => {
                Id::TpDst(IPPROTO_UDP)
            }
            (OXM_OF_CLASS, oxm_of::IPV6_SRC) | (NXM_NX_CLASS, nxm_nx::IPV6_SRC) => Id::Ipv6Src,
            (OXM_OF_CLASS, oxm_of::IPV6_DST) | (NXM_NX_CLASS, nxm_nx::IPV6_DST) => Id::Ipv6Dst,
            (OXM_OF_CLASS, oxm_of::ICMPV4_TYPE) | (NXM_OF_CLASS, nxm_of::ICMP_TYPE) => {
                Id::IcmpType(ETH_TYPE_IP)
            }
            (OXM_OF_CLASS, oxm_of::ICMPV4_CODE) | (NXM_OF_CLASS, nxm_of::ICMP_CODE) => {
                Id::IcmpCode(ETH_TYPE_IP)
            }
            (OXM_OF_CLASS, oxm_of::ICMPV6_TYPE) | (NXM_NX_CLASS, nxm_nx::ICMPV6_TYPE) => {
                Id::IcmpType(ETH_TYPE_IPV6)
            }
            (OXM_OF_CLASS, oxm_of::ICMPV6_CODE) | (NXM_NX_CLASS, nxm_nx::ICMPV6_CODE) => {
                Id::IcmpCode(ETH_TYPE_IPV6)
            }
            (OXM_OF_CLASS, oxm_of::IPV6_ND_TARGET) | (NXM_NX_CLASS, nxm_nx::ND_TARGET) => {
                Id::NdTarget
            }
            (OXM_OF_CLASS, oxm_of::IPV6_ND_SLL) | (NXM_NX_CLASS, nxm_nx::ND_SLL) => Id::NdSll,
            (OXM_OF_CLASS, oxm_of::IPV6_ND_TLL) | (NXM_NX_CLASS, nxm_nx::ND_TLL) => Id::NdTll,
            (NXM_NX_CLASS, nxm_nx::TUN_IPV6_SRC) => Id::TunIpv6Src,
            (NXM_NX_CLASS, nxm_nx::TUN_IPV6_DST) => Id::TunIpv6Dst,
            (OXM_OF_CLASS, oxm_of::SCTP_SRC) => Id::TpSrc(IPPROTO_SCTP),
            (OXM_OF_CLASS, oxm_of::SCTP_DST) => Id::TpDst(IPPROTO_SCTP),
            (OXM_OF_CLASS, oxm_of::ARP_OP) | (NXM_OF_CLASS, nxm_of::ARP_OP) => Id::ArpOp,
            (OXM_OF_CLASS, oxm_of::ARP_SPA) | (NXM_OF_CLASS, nxm_of::ARP_SPA) => Id::ArpSpa,
            (OXM_OF_CLASS, oxm_of::ARP_TPA) | (NXM_OF_CLASS, nxm_of::ARP_TPA) => Id::ArpTpa,
            (OXM_OF_CLASS, oxm_of::ARP_SHA) | (NXM_NX_CLASS, nxm_nx::ARP_SHA) => Id::ArpSha,
            (OXM_OF_CLASS, oxm_of::ARP_THA) | (NXM_NX_CLASS, nxm_nx::ARP_THA) => Id::ArpTha,
            (OXM_OF_CLASS, oxm_of::TUNNEL_ID) | (NXM_NX_CLASS, nxm_nx::TUN_ID) => Id::TunKey,
            (NXM_OF_CLASS, nxm_of::IN_PORT) => Id::InPort16,
            (NXM_NX_CLASS, f @ 0..=7) => Id::Reg(f),
            (NXM_NX_CLASS, nxm_nx::TUN_IPV4_SRC) => Id::TunSrc,
            (NXM_NX_CLASS, nxm_nx::TUN_IPV4_DST) => Id::TunDst,
            (NXM_NX_CLASS, nxm_nx::CT_STATE) => Id::CtState,
            (NXM_NX_CLASS, nxm_nx::CT_ZONE) => Id::CtZone,
            (NXM_NX_CLASS, nxm_nx::CT_MARK) => Id::CtMark,
            (NXM_NX_CLASS, nxm_nx::PKT_MARK) => Id::PktMark,
            (NXM_NX_CLASS, nxm_nx::CONJ_ID) => Id::Conjunction,
            _ => return None,
        })
    }

    /// Width of the value in bytes.
    fn width(self) -> usize {
        match self {
            Id::IpProto | Id::IpDscp | Id::IpTos | Id::IcmpType(_) | Id::IcmpCode(_) => 1,
            Id::Ipv6Src | Id::Ipv6Dst | Id::NdTarget | Id::TunIpv6Src | Id::TunIpv6Dst => 16,
            Id::InPort16 | Id::EthType | Id::TpSrc(_) | Id::TpDst(_) | Id::ArpOp | Id::CtZone => 2,
            Id::InPort | Id::Ipv4Src | Id::Ipv4Dst | Id::ArpSpa | Id::ArpTpa => 4,
            Id::Reg(_)
            | Id::TunSrc
            | Id::TunDst
            | Id::CtState
            | Id::CtMark
            | Id::PktMark
            | Id::Conjunction => 4,
            Id::EthDst | Id::EthSrc | Id::ArpSha | Id::ArpTha | Id::NdSll | Id::NdTll => 6,
            Id::TunKey => 8,
        }
    }
}

fn mac(b: &[u8]) -> MacAddr {
    let mut a = [0u8; 6];
    a.copy_from_slice(b);
    MacAddr(a)
}

fn ipv4(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::from(be_uint(b) as u32)
}

fn ipv6(b: &[u8]) -> Ipv6Addr {
    Ipv6Addr::from(be_u128(b))
}

/// Builds a canonical `Masked` from wire value and optional mask.
fn masked<T: crate::flow::types::Maskable>(
    value: T,
    mask: Option<T>,
    name: &str,
) -> Result<Masked<T>, CodecError> {
    match mask {
        None => Ok(Masked::exact(value)),
        Some(m) => Masked::new(value, m).map_err(|e| CodecError::Malformed {
            what: "ofp_match",
            detail: format!("{name}: {e}"),
        }),
    }
}

/// Converts a 16-bit OpenFlow 1.0 port number to the 32-bit OpenFlow 1.1+ space.
fn port16_to_32(p: u16) -> u32 {
    if p >= 0xff00 {
        u32::from(p) + 0xffff_0000
    } else {
        u32::from(p)
    }
}

/// Decodes an `ofp_match` at the start of `buf`; returns the match and the bytes consumed
/// (including padding).
pub fn decode_match(buf: &[u8]) -> Result<(Match, usize), CodecError> {
    let (len, padded) = match_header(buf)?;
    let mut fields = Reader::new(&buf[4..len], "OXM field");
    let mut m = Match::any();
    let mut seen: Vec<Id> = Vec::new();
    // The L4 protocol named by the tp_src/tp_dst headers, checked against ip_proto at the end;
    // likewise the family the ICMP headers named, against eth_type.
    let mut l4_proto: Option<u8> = None;
    let mut icmp_family: Option<u16> = None;
    while fields.remaining() > 0 {
        let (id, value, mask) = next_field(&mut fields, &mut seen)?;
        if let Id::IcmpType(f) | Id::IcmpCode(f) = id {
            if icmp_family.is_some_and(|g| g != f) {
                return Err(CodecError::Malformed {
                    what: "ofp_match",
                    detail: "ICMPv4 and ICMPv6 fields in one match".into(),
                });
            }
            icmp_family = Some(f);
        }
        set_field(&mut m, id, value, mask, &mut l4_proto)?;
    }
    if let Some(f) = icmp_family {
        if m.eth_type != Some(f) {
            return Err(CodecError::Malformed {
                what: "ofp_match",
                detail: format!(
                    "ICMP fields of EtherType {f:#06x} with eth_type {:?}",
                    m.eth_type
                ),
            });
        }
    }
    if let Some(p) = l4_proto {
        if m.ip_proto != Some(p) {
            return Err(CodecError::Malformed {
                what: "ofp_match",
                detail: format!(
                    "L4 port fields of protocol {p} with nw_proto {:?}",
                    m.ip_proto
                ),
            });
        }
    }
    Ok((m, padded))
}

/// The `ofp_match` header: its length and its length padded to 8 bytes, checked against `buf`.
fn match_header(buf: &[u8]) -> Result<(usize, usize), CodecError> {
    let mut r = Reader::new(buf, "ofp_match");
    let ty = r.u16()?;
    let len = r.u16()? as usize;
    if ty != OFPMT_OXM {
        return Err(CodecError::Unsupported {
            what: "ofp_match",
            detail: format!("match type {ty} (only OXM, type 1)"),
        });
    }
    if len < 4 {
        return Err(CodecError::Malformed {
            what: "ofp_match",
            detail: format!("length {len} is shorter than its 4-byte header"),
        });
    }
    let padded = len.div_ceil(8) * 8;
    if buf.len() < padded {
        return Err(CodecError::Truncated {
            what: "ofp_match",
            need: padded,
            have: buf.len(),
        });
    }
    Ok((len, padded))
}

/// An OXM field: its id, value and mask.
type Field<'a> = (Id, &'a [u8], Option<&'a [u8]>);

/// The next OXM field: its id, value and mask. Refuses a field the model does not know, a
/// payload of the wrong length, and a field `seen` already (the switch refuses duplicates,
/// OFPBMC_DUP_FIELD; tp_src of any protocol is the same model field).
fn next_field<'a>(fields: &mut Reader<'a>, seen: &mut Vec<Id>) -> Result<Field<'a>, CodecError> {
    let hdr = fields.u32()?;
    let class = (hdr >> 16) as u16;
    let field = ((hdr >> 9) & 0x7f) as u8;
    let hasmask = hdr & 0x100 != 0;
    let plen = (hdr & 0xff) as usize;
    let id = Id::lookup(class, field).ok_or_else(|| CodecError::Unsupported {
        what: "OXM field",
        detail: format!("class {class:#06x} field {field} (header {hdr:#010x})"),
    })?;
    let w = id.width();
    let want = if hasmask { 2 * w } else { w };
    if plen != want {
        return Err(CodecError::Malformed {
            what: "OXM field",
            detail: format!(
                "class {class:#06x} field {field}: payload length {plen}, expected {want}"
            ),
        });
    }
    let payload = fields.take(plen)?;
    let (value, mask) = payload.split_at(w);
    let mask = if hasmask { Some(mask) } else { None };
    let key = match id {
        Id::TpSrc(_) => Id::TpSrc(0),
        Id::TpDst(_) => Id::TpDst(0),
        Id::InPort16 => Id::InPort,
        other => other,
    };
    if seen.contains(&key) {
        return Err(CodecError::Malformed {
            what: "ofp_match",
            detail: format!("class {class:#06x} field {field} appears twice"),
        });
    }
    seen.push(key);
    Ok((id, value, mask))
}

/// Sets field `id` of `m` from its value and mask; `l4_proto` is the L4 protocol the port
/// fields named so far.
fn set_field(
    m: &mut Match,
    id: Id,
    value: &[u8],
    mask: Option<&[u8]>,
    l4_proto: &mut Option<u8>,
) -> Result<(), CodecError> {
    // Fields the model holds without a mask accept only an all-ones mask.
    let exact_only = |name: &str| -> Result<(), CodecError> {
        match mask {
            Some(mb) if mb.iter().any(|b| *b != 0xff) => Err(CodecError::Unsupported {
                what: "OXM field",
                detail: format!("masked {name} (mask {mb:02x?})"),
            }),
            _ => Ok(()),
        }
    };
    match id {
        Id::InPort => {
            exact_only("in_port")?;
            m.in_port = Some(be_uint(value) as u32);
        }
        Id::InPort16 => {
            exact_only("in_port")?;
            m.in_port = Some(port16_to_32(be_uint(value) as u16));
        }
        Id::EthDst => m.eth_dst = Some(masked(mac(value), mask.map(mac), "eth_dst")?),
        Id::EthSrc => m.eth_src = Some(masked(mac(value), mask.map(mac), "eth_src")?),
        Id::EthType => {
            exact_only("eth_type")?;
            m.eth_type = Some(be_uint(value) as u16);
        }
        Id::IpProto => {
            exact_only("ip_proto")?;
            m.ip_proto = Some(value[0]);
        }
        Id::IpDscp => {
            exact_only("ip_dscp")?;
            m.ip_dscp = Some(value[0] & 0x3f);
        }
        Id::IpTos => {
            exact_only("nw_tos")?;
            m.ip_dscp = Some(value[0] >> 2);
        }
        Id::Ipv4Src => m.ipv4_src = Some(masked(ipv4(value), mask.map(ipv4), "nw_src")?),
        Id::Ipv4Dst => m.ipv4_dst = Some(masked(ipv4(value), mask.map(ipv4), "nw_dst")?),
        Id::Ipv6Src => m.ipv6_src = Some(masked(ipv6(value), mask.map(ipv6), "ipv6_src")?),
        Id::Ipv6Dst => m.ipv6_dst = Some(masked(ipv6(value), mask.map(ipv6), "ipv6_dst")?),
        Id::IcmpType(_) => {
            exact_only("icmp_type")?;
            m.icmp_type = Some(value[0]);
        }
        Id::IcmpCode(_) => {
            exact_only("icmp_code")?;
            m.icmp_code = Some(value[0]);
        }
        Id::NdTarget => {
            m.nd_target = Some(masked(ipv6(value), mask.map(ipv6), "nd_target")?);
        }
        Id::NdSll => m.nd_sll = Some(masked(mac(value), mask.map(mac), "nd_sll")?),
        Id::NdTll => m.nd_tll = Some(masked(mac(value), mask.map(mac), "nd_tll")?),
        Id::TunIpv6Src => {
            m.tun_ipv6_src = Some(masked(ipv6(value), mask.map(ipv6), "tun_ipv6_src")?);
        }
        Id::TunIpv6Dst => {
            m.tun_ipv6_dst = Some(masked(ipv6(value), mask.map(ipv6), "tun_ipv6_dst")?);
        }
        Id::TpSrc(p) | Id::TpDst(p) => {
            if l4_proto.is_some_and(|q| q != p) {
                return Err(CodecError::Malformed {
                    what: "ofp_match",
                    detail: "L4 port fields of different protocols".into(),
                });
            }
            *l4_proto = Some(p);
            let v = masked(be_uint(value) as u16, mask.map(|b| be_uint(b) as u16), "tp")?;
            if matches!(id, Id::TpSrc(_)) {
                m.tp_src = Some(v);
            } else {
                m.tp_dst = Some(v);
            }
        }
        Id::ArpOp => {
            exact_only("arp_op")?;
            m.arp_op = Some(be_uint(value) as u16);
        }
        Id::ArpSpa => m.arp_spa = Some(masked(ipv4(value), mask.map(ipv4), "arp_spa")?),
        Id::ArpTpa => m.arp_tpa = Some(masked(ipv4(value), mask.map(ipv4), "arp_tpa")?),
        Id::ArpSha => m.arp_sha = Some(masked(mac(value), mask.map(mac), "arp_sha")?),
        Id::ArpTha => m.arp_tha = Some(masked(mac(value), mask.map(mac), "arp_tha")?),
        Id::TunKey => m.tun_id = Some(masked(be_uint(value), mask.map(be_uint), "tun_id")?),
        Id::Reg(n) => {
            let v = masked(
                be_uint(value) as u32,
                mask.map(|b| be_uint(b) as u32),
                "reg",
            )?;
            m.regs[n as usize] = Some(v);
        }
        Id::TunSrc => m.tun_src = Some(masked(ipv4(value), mask.map(ipv4), "tun_src")?),
        Id::TunDst => m.tun_dst = Some(masked(ipv4(value), mask.map(ipv4), "tun_dst")?),
        Id::CtState => {
            let v = be_uint(value) as u32;
            let mk = mask.map_or(u32::MAX, |b| be_uint(b) as u32);
            m.ct_state = Some(CtState::from_value_mask(v, mk));
        }
        Id::CtZone => {
            exact_only("ct_zone")?;
            m.ct_zone = Some(be_uint(value) as u16);
        }
        Id::Conjunction => {
            exact_only("conj_id")?;
            m.conj_id = Some(be_uint(value) as u32);
        }
        Id::CtMark => {
            let v = masked(
                be_uint(value) as u32,
                mask.map(|b| be_uint(b) as u32),
                "ct_mark",
            )?;
            m.ct_mark = Some(v);
        }
        Id::PktMark => {
            let v = masked(
                be_uint(value) as u32,
                mask.map(|b| be_uint(b) as u32),
                "pkt_mark",
            )?;
            m.pkt_mark = Some(v);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::CtFlag;

    fn round_trip(m: &Match) -> Vec<u8> {
        let mut out = Vec::new();
        encode_match(m, &mut out).unwrap();
        assert_eq!(out.len() % 8, 0);
        let (back, used) = decode_match(&out).unwrap();
        assert_eq!(used, out.len());
        assert_eq!(&back, m);
        out
    }

    fn mac(s: &str) -> MacAddr {
        s.parse().unwrap()
    }

    #[test]
    fn empty_match_is_eight_bytes() {
        let out = round_trip(&Match::any());
        assert_eq!(out, [0, 1, 0, 4, 0, 0, 0, 0]);
    }

    #[test]
    fn every_field_round_trips() {
        let ip = |s: &str| s.parse::<Masked<Ipv4Addr>>().unwrap();
        let ip6 = |s: &str| s.parse::<Masked<Ipv6Addr>>().unwrap();
        let cases = vec![
            Match::any().in_port(3),
            Match::any().in_port(0xffff_fffe),
            Match::any().dl_dst(mac("0a:58:0a:80:00:02")),
            Match::any()
                .dl_dst(Masked::new(mac("01:00:00:00:00:00"), mac("01:00:00:00:00:00")).unwrap()),
            Match::any().dl_src(mac("0a:58:0a:80:00:03")),
            Match::any().ip(),
            Match::any().arp(),
            Match::any().ip().nw_proto(1),
            Match::any()
                .ip()
                .nw_src(ip("10.128.0.0/14"))
                .nw_dst(ip("10.129.0.5")),
            Match::any()
                .tcp()
                .tp_src(80)
                .tp_dst(Masked::new(0x1000u16, 0xf000).unwrap()),
            Match::any().udp().tp_dst(53),
            Match::any().sctp().tp_src(9).tp_dst(10),
            Match::any()
                .arp()
                .arp_op(1)
                .arp_spa(ip("10.128.0.2"))
                .arp_tpa(ip("10.128.0.0/23")),
            Match::any()
                .arp()
                .arp_sha(mac("0a:58:0a:80:00:02"))
                .arp_tha(Masked::new(mac("0a:58:00:00:00:00"), mac("ff:ff:00:00:00:00")).unwrap()),
            Match::any().tun_id(0x1234),
            Match::any().tun_id(Masked::new(0x1234u64, 0xffff_ffff).unwrap()),
            Match::any()
                .reg(0, 5)
                .reg(7, Masked::new(0x10u32, 0xf0).unwrap()),
            Match::any()
                .tun_src(ip("192.168.1.1"))
                .tun_dst(ip("192.168.0.0/16")),
            Match::any().ct_state(CtState::new().plus(CtFlag::Trk).minus(CtFlag::New)),
            Match::any()
                .ct_zone(7)
                .ct_mark(Masked::new(1u32, 1).unwrap()),
            Match::any().ct_mark(0xdead_beef),
            Match::any().pkt_mark(Masked::new(0x100u32, 0x100).unwrap()),
            Match::any().ipv6(),
            Match::any()
                .ipv6()
                .ipv6_src(ip6("fd01::/48"))
                .ipv6_dst(ip6("fd01:0:0:5::7")),
            Match::any().tcp6().ipv6_dst(ip6("fd01::1")).tp_dst(443),
            Match::any().udp6().tp_src(53),
            Match::any().icmp().icmp_type(8).icmp_code(0),
            Match::any().icmp6().icmp_type(134),
            Match::any()
                .icmp6()
                .icmp_type(135)
                .icmp_code(0)
                .nd_target(ip6("fd01::5"))
                .nd_sll(mac("0a:58:0a:80:00:05")),
            Match::any()
                .icmp6()
                .icmp_type(136)
                .nd_target(ip6("fe80::/64"))
                .nd_tll(Masked::new(mac("0a:58:00:00:00:00"), mac("ff:ff:00:00:00:00")).unwrap()),
            Match::any()
                .tun_ipv6_src(ip6("fd00::1"))
                .tun_ipv6_dst(ip6("fd00::/64")),
        ];
        for m in &cases {
            round_trip(m);
        }
    }

    #[test]
    fn known_wire_bytes() {
        // in_port=3, ip, nw_dst=10.0.0.0/8
        let m = Match::any()
            .in_port(3)
            .ip()
            .nw_dst("10.0.0.0/8".parse::<Masked<Ipv4Addr>>().unwrap());
        let out = round_trip(&m);
        let expected: &[u8] = &[
            0, 1, 0, 30, // type, length 4 + 8 + 6 + 12
            0x80, 0, 0, 4, 0, 0, 0, 3, // OXM_OF_IN_PORT
            0x80, 0, 0x0a, 2, 0x08, 0, // OXM_OF_ETH_TYPE
            0x80, 0, 0x19, 8, 10, 0, 0, 0, 255, 0, 0, 0, // OXM_OF_IPV4_DST_W
            0, 0, // pad
        ];
        assert_eq!(out, expected);
    }

    #[test]
    fn eth_type_precedes_l3_and_l4() {
        let m = Match::any()
            .tcp()
            .nw_src(Ipv4Addr::new(1, 2, 3, 4))
            .tp_dst(80);
        let mut out = Vec::new();
        encode_match(&m, &mut out).unwrap();
        let hdrs: Vec<u32> = {
            let mut r = Reader::new(&out[4..], "t");
            let mut v = Vec::new();
            while r.remaining() >= 4 {
                let h = r.u32().unwrap();
                if h == 0 {
                    break;
                }
                v.push((h >> 9) & 0x7f);
                r.skip((h & 0xff) as usize).unwrap();
            }
            v
        };
        assert_eq!(hdrs, vec![5, 10, 11, 14]);
    }

    #[test]
    fn nxm_headers_and_all_ones_masks_decode() {
        let mut out = vec![0, 1, 0, 0];
        put_tlv(
            &mut out,
            NXM_OF_CLASS,
            nxm_of::IN_PORT,
            &0xfffeu16.to_be_bytes(),
            None,
        );
        put_tlv(
            &mut out,
            NXM_OF_CLASS,
            nxm_of::ETH_TYPE,
            &0x0800u16.to_be_bytes(),
            None,
        );
        put_tlv(
            &mut out,
            NXM_OF_CLASS,
            nxm_of::IP_DST,
            &[10, 0, 0, 1],
            Some(&[255; 4]),
        );
        put_tlv(
            &mut out,
            NXM_NX_CLASS,
            nxm_nx::TUN_ID,
            &5u64.to_be_bytes(),
            None,
        );
        put_tlv(
            &mut out,
            NXM_OF_CLASS,
            nxm_of::ETH_DST,
            &[1, 2, 3, 4, 5, 6],
            Some(&[0xff; 6]),
        );
        put_tlv(
            &mut out,
            NXM_NX_CLASS,
            2,
            &[0, 0, 0, 0x37],
            Some(&[0, 0, 0, 0x0f]),
        );
        let len = out.len() as u16;
        patch_u16(&mut out, 2, len);
        pad_to_8(&mut out, 0);
        let (m, used) = decode_match(&out).unwrap();
        assert_eq!(used, out.len());
        let want = Match::any()
            .in_port(crate::flow::ports::LOCAL)
            .ip()
            .nw_dst(Ipv4Addr::new(10, 0, 0, 1))
            .tun_id(5)
            .dl_dst(MacAddr([1, 2, 3, 4, 5, 6]))
            .reg(2, Masked::new(7u32, 0xf).unwrap());
        assert_eq!(m, want);
        assert_eq!(m.ipv4_dst.unwrap().mask(), None);
    }

    #[test]
    fn refusals() {
        // Prerequisite missing.
        let err = encode_match(
            &Match::any().nw_src(Ipv4Addr::new(1, 1, 1, 1)),
            &mut Vec::new(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("nw_src needs ip"), "{err}");
        // Empty ct_state.
        let err =
            encode_match(&Match::any().ct_state(CtState::new()), &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("ct_state"), "{err}");
        // Unknown field: OXM_OF_VLAN_VID (6).
        let mut out = vec![0, 1, 0, 10];
        put_tlv(&mut out, OXM_OF_CLASS, 6, &[0, 1], None);
        pad_to_8(&mut out, 0);
        let err = decode_match(&out).unwrap_err();
        assert!(matches!(err, CodecError::Unsupported { .. }), "{err}");
        assert!(err.to_string().contains("class 0x8000 field 6"), "{err}");
        // Duplicate field.
        let mut out = vec![0, 1, 0, 0];
        put_tlv(&mut out, OXM_OF_CLASS, oxm_of::IN_PORT, &[0, 0, 0, 1], None);
        put_tlv(&mut out, NXM_OF_CLASS, nxm_of::IN_PORT, &[0, 1], None);
        let len = out.len() as u16;
        patch_u16(&mut out, 2, len);
        pad_to_8(&mut out, 0);
        assert!(matches!(
            decode_match(&out),
            Err(CodecError::Malformed { .. })
        ));
        // An ICMPv4 type under ipv6 (the family the header names must be eth_type's).
        let mut out = vec![0, 1, 0, 0];
        put_tlv(
            &mut out,
            OXM_OF_CLASS,
            oxm_of::ETH_TYPE,
            &[0x86, 0xdd],
            None,
        );
        put_tlv(&mut out, OXM_OF_CLASS, oxm_of::IP_PROTO, &[58], None);
        put_tlv(&mut out, OXM_OF_CLASS, oxm_of::ICMPV4_TYPE, &[135], None);
        let len = out.len() as u16;
        patch_u16(&mut out, 2, len);
        pad_to_8(&mut out, 0);
        let err = decode_match(&out).unwrap_err();
        assert!(
            err.to_string().contains("ICMP fields of EtherType 0x0800"),
            "{err}"
        );
        // An IPv6 address of the wrong length.
        let mut out = vec![0, 1, 0, 0];
        put_tlv(&mut out, OXM_OF_CLASS, oxm_of::IPV6_SRC, &[0xfd; 4], None);
        let len = out.len() as u16;
        patch_u16(&mut out, 2, len);
        pad_to_8(&mut out, 0);
        assert!(matches!(
            decode_match(&out),
            Err(CodecError::Malformed { .. })
        ));
        // Port header of the wrong protocol.
        let mut out = vec![0, 1, 0, 0];
        put_tlv(&mut out, OXM_OF_CLASS, oxm_of::ETH_TYPE, &[8, 0], None);
        put_tlv(&mut out, OXM_OF_CLASS, oxm_of::IP_PROTO, &[17], None);
        put_tlv(&mut out, OXM_OF_CLASS, oxm_of::TCP_DST, &[0, 80], None);
        let len = out.len() as u16;
        patch_u16(&mut out, 2, len);
        pad_to_8(&mut out, 0);
        assert!(matches!(
            decode_match(&out),
            Err(CodecError::Malformed { .. })
        ));
        // Zero mask.
        let mut out = vec![0, 1, 0, 0];
        put_tlv(&mut out, NXM_NX_CLASS, 0, &[0; 4], Some(&[0; 4]));
        let len = out.len() as u16;
        patch_u16(&mut out, 2, len);
        pad_to_8(&mut out, 0);
        assert!(matches!(
            decode_match(&out),
            Err(CodecError::Malformed { .. })
        ));
        // Wrong payload length.
        let mut out = vec![0, 1, 0, 10];
        put_tlv(&mut out, OXM_OF_CLASS, oxm_of::ETH_TYPE, &[8], None);
        out.push(0);
        pad_to_8(&mut out, 0);
        assert!(matches!(
            decode_match(&out),
            Err(CodecError::Malformed { .. })
        ));
    }

    #[test]
    fn truncation_never_panics() {
        let m = Match::any()
            .tcp()
            .in_port(1)
            .nw_src(Ipv4Addr::new(10, 0, 0, 1))
            .tp_dst(80)
            .tun_id(9)
            .reg(3, 4)
            .ct_state(CtState::new().plus(CtFlag::Est));
        let mut out = Vec::new();
        encode_match(&m, &mut out).unwrap();
        for n in 0..out.len() {
            match decode_match(&out[..n]) {
                Err(CodecError::Truncated { .. }) => {}
                other => panic!("prefix of {n} bytes: {other:?}"),
            }
        }
        // A length field that lies about the TLVs inside.
        let mut bad = out.clone();
        patch_u16(&mut bad, 2, 9);
        assert!(decode_match(&bad).is_err());
    }
}
