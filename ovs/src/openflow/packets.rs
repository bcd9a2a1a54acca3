//! Packets between the agent and the switch: `NXT_PACKET_IN2` (Open vSwitch's packet-in with
//! properties), the two messages that ask for it on a connection (`OFPT_SET_CONFIG` with a
//! non-zero `miss_send_len`, `NXT_SET_PACKET_IN_FORMAT` format 2), and `OFPT_PACKET_OUT`, which
//! injects a packet as if it had entered by a port.
//!
//! Why packet-in2 and not OpenFlow 1.3's `OFPT_PACKET_IN`: only packet-in2 carries the
//! `userdata` of a `controller(userdata=...)` action, and its metadata property holds every
//! register the pipeline had loaded when the packet was sent up (the verdict's tables write the
//! deciding rule into a register), with the conntrack state and the tunnel key.
//!
//! Why both messages: Open vSwitch sends no asynchronous message at all on a service connection
//! (the bridge's `br0.mgmt` socket, where every client of ours connects) unless it has set a
//! non-zero `miss_send_len` (ofproto/connmgr.c, `ofconn_receives_async_msg`), and sends
//! OpenFlow 1.3 packet-ins unless asked for the other format.
//!
//! The metadata decoder is lenient where the match decoder is strict: it keeps the fields a
//! reader of packet-ins needs and skips the rest (a newer switch may add fields), but refuses
//! a property or field that runs past its message.

use super::actions::encode_actions;
use super::reader::{be_uint, Reader};
use super::wire::{msg_type, NX_EXPERIMENTER, OFP13_VERSION};
use super::CodecError;
use crate::flow::fields::{nxm_nx, nxm_of, oxm_of, NXM_NX_CLASS, NXM_OF_CLASS, OXM_OF_CLASS};

/// `OFPT_SET_CONFIG`.
pub const OFPT_SET_CONFIG: u8 = 9;
/// `OFPCML_NO_BUFFER`: send whole packets (as far as each action's `max_len` allows), never
/// a buffer id.
pub const OFPCML_NO_BUFFER: u16 = 0xffff;
/// `NXT_SET_PACKET_IN_FORMAT` subtype.
pub const NXT_SET_PACKET_IN_FORMAT: u32 = 16;
/// `NXT_PACKET_IN2` subtype.
pub const NXT_PACKET_IN2: u32 = 30;
/// `NXPIF_NXT_PACKET_IN2`, the packet-in format asked for.
pub const NXPIF_NXT_PACKET_IN2: u32 = 2;

const NXPINT_PACKET: u16 = 0;
const NXPINT_FULL_LEN: u16 = 1;
const NXPINT_BUFFER_ID: u16 = 2;
const NXPINT_TABLE_ID: u16 = 3;
const NXPINT_COOKIE: u16 = 4;
const NXPINT_REASON: u16 = 5;
const NXPINT_METADATA: u16 = 6;
const NXPINT_USERDATA: u16 = 7;

/// `OFPR_*`: why the switch sent a packet up.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PacketInReason {
    /// `OFPR_NO_MATCH` (a table miss sent to the controller).
    NoMatch,
    /// `OFPR_ACTION` (a `controller` action), the reason every row of ours gives.
    Action,
    /// `OFPR_INVALID_TTL`.
    InvalidTtl,
    /// Another reason number.
    Other(u8),
}

impl PacketInReason {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => PacketInReason::NoMatch,
            1 => PacketInReason::Action,
            2 => PacketInReason::InvalidTtl,
            n => PacketInReason::Other(n),
        }
    }
}

/// The pipeline fields a packet had when it was sent up (the packet-in's metadata property),
/// as far as a reader of ours needs them. Fields the switch left out are `None`/0: Open
/// vSwitch writes a register only when it is not zero.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub struct PacketMetadata {
    /// The port the packet entered the bridge by.
    pub in_port: Option<u32>,
    /// `reg0`..`reg15`; a register the switch left out is 0.
    pub regs: [u32; 16],
    /// `tun_id` (the VXLAN VNI of a packet that came in over the overlay).
    pub tun_id: Option<u64>,
    /// `tun_src` (the sending node's VTEP).
    pub tun_src: Option<std::net::Ipv4Addr>,
    /// `tun_dst` (where a packet leaving over the overlay goes, once a row has set it).
    pub tun_dst: Option<std::net::Ipv4Addr>,
    /// `ct_state` bits (`+trk` 0x20, `+new` 0x01, `+est` 0x02, `+rel` 0x04, `+rpl` 0x08,
    /// `+inv` 0x10).
    pub ct_state: Option<u32>,
    /// `ct_zone`.
    pub ct_zone: Option<u16>,
    /// `ct_mark`.
    pub ct_mark: Option<u32>,
    /// `pkt_mark`.
    pub pkt_mark: Option<u32>,
}

impl PacketMetadata {
    /// Register `n` (0 when the switch left it out or `n` is past 15).
    pub fn reg(&self, n: usize) -> u32 {
        self.regs.get(n).copied().unwrap_or(0)
    }
}

/// One `NXT_PACKET_IN2`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PacketIn {
    /// The table of the row whose action sent it.
    pub table_id: u8,
    /// That row's cookie (None when the switch did not say: `OVS_BE64_MAX`).
    pub cookie: Option<u64>,
    /// Why it was sent.
    pub reason: PacketInReason,
    /// The packet's bytes, from the Ethernet header on (cut to the action's `max_len`).
    pub packet: Vec<u8>,
    /// The packet's full length when `packet` was cut.
    pub full_len: Option<u32>,
    /// The buffer id when the switch buffered it (never with [`OFPCML_NO_BUFFER`]).
    pub buffer_id: Option<u32>,
    /// The pipeline fields.
    pub metadata: PacketMetadata,
    /// The `userdata` of the `controller` action (empty when it had none).
    pub userdata: Vec<u8>,
}

fn header(out: &mut Vec<u8>, ty: u8, xid: u32) {
    out.extend_from_slice(&[OFP13_VERSION, ty, 0, 0]);
    out.extend_from_slice(&xid.to_be_bytes());
}

fn finish(mut out: Vec<u8>) -> Vec<u8> {
    let len = out.len() as u16;
    out[2..4].copy_from_slice(&len.to_be_bytes());
    out
}

/// `OFPT_GET_CONFIG_REQUEST`.
pub const OFPT_GET_CONFIG_REQUEST: u8 = 7;
/// `OFPT_GET_CONFIG_REPLY`.
pub const OFPT_GET_CONFIG_REPLY: u8 = 8;

/// `OFPT_GET_CONFIG_REQUEST` (the reply carries the bridge's fragment handling flags).
pub fn encode_get_config_request(xid: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(8);
    header(&mut out, OFPT_GET_CONFIG_REQUEST, xid);
    finish(out)
}

/// The `flags` of an `OFPT_GET_CONFIG_REPLY` body (after the header).
pub fn decode_get_config_flags(body: &[u8]) -> Result<u16, CodecError> {
    let mut r = Reader::new(body, "ofp_switch_config");
    r.u16()
}

/// `OFPT_SET_CONFIG` with fragment handling `flags` and `miss_send_len` (the switch sends no
/// reply; follow it with a barrier to learn that it was taken). Open vSwitch applies the flags
/// to the whole bridge: pass the ones `OFPT_GET_CONFIG_REPLY` gave, so asking for packet-ins
/// changes nothing else (a bridge may match fragments as `nx-match`).
pub fn encode_set_config(xid: u32, flags: u16, miss_send_len: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    header(&mut out, OFPT_SET_CONFIG, xid);
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&miss_send_len.to_be_bytes());
    finish(out)
}

/// `NXT_SET_PACKET_IN_FORMAT` asking for `NXT_PACKET_IN2`.
pub fn encode_set_packet_in_format(xid: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(20);
    header(&mut out, msg_type::EXPERIMENTER, xid);
    out.extend_from_slice(&NX_EXPERIMENTER.to_be_bytes());
    out.extend_from_slice(&NXT_SET_PACKET_IN_FORMAT.to_be_bytes());
    out.extend_from_slice(&NXPIF_NXT_PACKET_IN2.to_be_bytes());
    finish(out)
}

/// `NXT_SET_CONTROLLER_ID`.
const NXT_SET_CONTROLLER_ID: u32 = 20;

/// `NXT_SET_CONTROLLER_ID`: this connection is controller `id`, so it gets the packet-ins of
/// `controller(id=ID,...)` actions (and no longer those aimed at id 0).
pub fn encode_set_controller_id(xid: u32, id: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    header(&mut out, msg_type::EXPERIMENTER, xid);
    out.extend_from_slice(&NX_EXPERIMENTER.to_be_bytes());
    out.extend_from_slice(&NXT_SET_CONTROLLER_ID.to_be_bytes());
    out.extend_from_slice(&[0; 6]);
    out.extend_from_slice(&id.to_be_bytes());
    finish(out)
}

/// `OFPT_PACKET_OUT`.
pub const OFPT_PACKET_OUT: u8 = 13;
/// `OFPP_CONTROLLER`, the in_port of a packet that enters from nowhere.
pub const OFPP_CONTROLLER: u32 = 0xffff_fffd;

/// `OFPT_PACKET_OUT` of an unbuffered `packet` that entered by `in_port` and meets `actions`
/// (`output:OFPP_TABLE` sends it through the tables from table 0, as if it had arrived).
pub fn encode_packet_out(
    xid: u32,
    in_port: u32,
    actions: &[crate::flow::Action],
    packet: &[u8],
) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(32 + packet.len());
    header(&mut out, OFPT_PACKET_OUT, xid);
    out.extend_from_slice(&u32::MAX.to_be_bytes()); // OFP_NO_BUFFER
    out.extend_from_slice(&in_port.to_be_bytes());
    let mut acts = Vec::new();
    encode_actions(actions, &mut acts)?;
    let alen = u16::try_from(acts.len()).map_err(|_| CodecError::Malformed {
        what: "OFPT_PACKET_OUT",
        detail: format!("{} bytes of actions", acts.len()),
    })?;
    out.extend_from_slice(&alen.to_be_bytes());
    out.extend_from_slice(&[0; 6]);
    out.extend_from_slice(&acts);
    out.extend_from_slice(packet);
    if out.len() > usize::from(u16::MAX) {
        return Err(CodecError::Malformed {
            what: "OFPT_PACKET_OUT",
            detail: format!("{} bytes is more than one message holds", out.len()),
        });
    }
    Ok(finish(out))
}

/// Whether an `OFPT_EXPERIMENTER` body (after the 8-byte header) is an `NXT_PACKET_IN2`.
pub fn is_packet_in2(body: &[u8]) -> bool {
    body.len() >= 8
        && u32::from_be_bytes([body[0], body[1], body[2], body[3]]) == NX_EXPERIMENTER
        && u32::from_be_bytes([body[4], body[5], body[6], body[7]]) == NXT_PACKET_IN2
}

/// Decodes an `NXT_PACKET_IN2` from the body of its `OFPT_EXPERIMENTER` message (after the
/// 8-byte header, experimenter id and subtype included). Properties this decoder does not
/// know (the continuation, for one) are skipped.
pub fn decode_packet_in2(body: &[u8]) -> Result<PacketIn, CodecError> {
    if !is_packet_in2(body) {
        return Err(CodecError::Malformed {
            what: "NXT_PACKET_IN2",
            detail: "not a Nicira packet-in2 message".into(),
        });
    }
    let mut r = Reader::new(&body[8..], "NXT_PACKET_IN2 property");
    let mut pin = PacketIn {
        table_id: 0,
        cookie: None,
        reason: PacketInReason::NoMatch,
        packet: Vec::new(),
        full_len: None,
        buffer_id: None,
        metadata: PacketMetadata::default(),
        userdata: Vec::new(),
    };
    let mut seen_packet = false;
    while r.remaining() > 0 {
        let ty = r.u16()?;
        let len = r.u16()? as usize;
        if len < 4 {
            return Err(CodecError::Malformed {
                what: "NXT_PACKET_IN2 property",
                detail: format!("property {ty:#06x} of length {len}"),
            });
        }
        let value = r.take(len - 4)?;
        // Properties are padded to 8 bytes; the last one's padding may be missing.
        let pad = len.next_multiple_of(8) - len;
        r.skip(pad.min(r.remaining()))?;
        let need = |n: usize| -> Result<(), CodecError> {
            if value.len() < n {
                return Err(CodecError::Malformed {
                    what: "NXT_PACKET_IN2 property",
                    detail: format!("property {ty} has {} bytes, needs {n}", value.len()),
                });
            }
            Ok(())
        };
        match ty {
            NXPINT_PACKET => {
                pin.packet = value.to_vec();
                seen_packet = true;
            }
            NXPINT_FULL_LEN => {
                need(4)?;
                pin.full_len = Some(be_uint(&value[..4]) as u32);
            }
            NXPINT_BUFFER_ID => {
                need(4)?;
                pin.buffer_id = Some(be_uint(&value[..4]) as u32);
            }
            NXPINT_TABLE_ID => {
                need(1)?;
                pin.table_id = value[0];
            }
            NXPINT_COOKIE => {
                // An 8-byte value after 4 bytes of padding (ofpprop_put_be64).
                need(12)?;
                let c = be_uint(&value[4..12]);
                pin.cookie = (c != u64::MAX).then_some(c);
            }
            NXPINT_REASON => {
                need(1)?;
                pin.reason = PacketInReason::from_u8(value[0]);
            }
            NXPINT_METADATA => pin.metadata = decode_metadata(value)?,
            NXPINT_USERDATA => pin.userdata = value.to_vec(),
            _ => {}
        }
    }
    if !seen_packet {
        return Err(CodecError::Malformed {
            what: "NXT_PACKET_IN2",
            detail: "no packet property".into(),
        });
    }
    Ok(pin)
}

/// The metadata property: raw OXM/NXM fields (no `ofp_match` header), unknown ones skipped.
pub fn decode_metadata(buf: &[u8]) -> Result<PacketMetadata, CodecError> {
    let mut r = Reader::new(buf, "packet-in metadata field");
    let mut md = PacketMetadata::default();
    while r.remaining() > 0 {
        let hdr = r.u32()?;
        let class = (hdr >> 16) as u16;
        let field = ((hdr >> 9) & 0x7f) as u8;
        let hasmask = hdr & 0x100 != 0;
        let plen = (hdr & 0xff) as usize;
        let payload = r.take(plen)?;
        // Experimenter classes carry their 4-byte experimenter id first.
        let payload = if class == 0xffff {
            payload.get(4..).unwrap_or(&[])
        } else {
            payload
        };
        let value = if hasmask {
            &payload[..payload.len() / 2]
        } else {
            payload
        };
        if value.is_empty() || value.len() > 8 {
            continue;
        }
        let v = be_uint(value);
        match (class, field) {
            (OXM_OF_CLASS, oxm_of::IN_PORT) => md.in_port = Some(v as u32),
            (NXM_OF_CLASS, nxm_of::IN_PORT) => md.in_port = Some(widen_port16(v as u16)),
            (OXM_OF_CLASS, oxm_of::TUNNEL_ID) | (NXM_NX_CLASS, nxm_nx::TUN_ID) => {
                md.tun_id = Some(v)
            }
            (NXM_NX_CLASS, f) if (nxm_nx::REG0..nxm_nx::REG0 + 16).contains(&f) => {
                md.regs[usize::from(f - nxm_nx::REG0)] = v as u32
            }
            (NXM_NX_CLASS, nxm_nx::TUN_IPV4_SRC) => {
                md.tun_src = Some(std::net::Ipv4Addr::from(v as u32))
            }
            (NXM_NX_CLASS, nxm_nx::TUN_IPV4_DST) => {
                md.tun_dst = Some(std::net::Ipv4Addr::from(v as u32))
            }
            (NXM_NX_CLASS, nxm_nx::CT_STATE) => md.ct_state = Some(v as u32),
            (NXM_NX_CLASS, nxm_nx::CT_ZONE) => md.ct_zone = Some(v as u16),
            (NXM_NX_CLASS, nxm_nx::CT_MARK) => md.ct_mark = Some(v as u32),
            (NXM_NX_CLASS, nxm_nx::PKT_MARK) => md.pkt_mark = Some(v as u32),
            _ => {}
        }
    }
    Ok(md)
}

/// A 16-bit OpenFlow 1.0 port number in the 32-bit space (reserved ports move up).
fn widen_port16(p: u16) -> u32 {
    if p >= 0xff00 {
        u32::from(p) + 0xffff_0000
    } else {
        u32::from(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prop(out: &mut Vec<u8>, ty: u16, value: &[u8]) {
        let start = out.len();
        out.extend_from_slice(&ty.to_be_bytes());
        out.extend_from_slice(&((4 + value.len()) as u16).to_be_bytes());
        out.extend_from_slice(value);
        while !(out.len() - start).is_multiple_of(8) {
            out.push(0);
        }
    }

    fn field(out: &mut Vec<u8>, class: u16, field: u8, value: &[u8]) {
        let hdr = (u32::from(class) << 16) | (u32::from(field) << 9) | value.len() as u32;
        out.extend_from_slice(&hdr.to_be_bytes());
        out.extend_from_slice(value);
    }

    #[test]
    fn set_messages_are_laid_out_as_open_vswitch_reads_them() {
        assert_eq!(
            encode_set_config(7, 3, OFPCML_NO_BUFFER),
            [4, 9, 0, 12, 0, 0, 0, 7, 0, 3, 0xff, 0xff]
        );
        assert_eq!(encode_get_config_request(5), [4, 7, 0, 8, 0, 0, 0, 5]);
        assert_eq!(decode_get_config_flags(&[0, 3, 0xff, 0xff]).unwrap(), 3);
        assert_eq!(
            encode_set_packet_in_format(8),
            [4, 4, 0, 20, 0, 0, 0, 8, 0, 0, 0x23, 0x20, 0, 0, 0, 16, 0, 0, 0, 2]
        );
    }

    #[test]
    fn a_packet_in2_gives_packet_table_cookie_registers_and_userdata() {
        let mut body = Vec::new();
        body.extend_from_slice(&NX_EXPERIMENTER.to_be_bytes());
        body.extend_from_slice(&NXT_PACKET_IN2.to_be_bytes());
        prop(&mut body, NXPINT_PACKET, &[1, 2, 3, 4, 5]);
        prop(&mut body, NXPINT_FULL_LEN, &60u32.to_be_bytes());
        prop(&mut body, NXPINT_TABLE_ID, &[80]);
        let mut cookie = vec![0; 4];
        cookie.extend_from_slice(&0x8000_0000_0000_0001u64.to_be_bytes());
        prop(&mut body, NXPINT_COOKIE, &cookie);
        prop(&mut body, NXPINT_REASON, &[1]);
        let mut md = Vec::new();
        field(&mut md, OXM_OF_CLASS, oxm_of::IN_PORT, &5u32.to_be_bytes());
        field(&mut md, NXM_NX_CLASS, nxm_nx::REG0, &10u32.to_be_bytes());
        field(
            &mut md,
            NXM_NX_CLASS,
            nxm_nx::REG0 + 5,
            &0xabcdu32.to_be_bytes(),
        );
        field(
            &mut md,
            NXM_NX_CLASS,
            nxm_nx::CT_STATE,
            &0x21u32.to_be_bytes(),
        );
        field(&mut md, NXM_NX_CLASS, 99, &[9; 6]); // unknown: skipped
        field(
            &mut md,
            OXM_OF_CLASS,
            oxm_of::TUNNEL_ID,
            &42u64.to_be_bytes(),
        );
        prop(&mut body, NXPINT_METADATA, &md);
        prop(&mut body, NXPINT_USERDATA, b"audit");
        prop(&mut body, 0x8000, &[0; 12]); // continuation-like: skipped
        let pin = decode_packet_in2(&body).unwrap();
        assert_eq!(pin.packet, [1, 2, 3, 4, 5]);
        assert_eq!(pin.full_len, Some(60));
        assert_eq!(pin.table_id, 80);
        assert_eq!(pin.cookie, Some(0x8000_0000_0000_0001));
        assert_eq!(pin.reason, PacketInReason::Action);
        assert_eq!(pin.metadata.in_port, Some(5));
        assert_eq!(pin.metadata.reg(0), 10);
        assert_eq!(pin.metadata.reg(5), 0xabcd);
        assert_eq!(pin.metadata.reg(1), 0);
        assert_eq!(pin.metadata.ct_state, Some(0x21));
        assert_eq!(pin.metadata.tun_id, Some(42));
        assert_eq!(pin.userdata, b"audit");

        // A property that runs past the message is an error, not a panic.
        let mut cut = body.clone();
        cut.truncate(14);
        assert!(decode_packet_in2(&cut).is_err());
        // So is a message without the packet.
        let mut none = body[..8].to_vec();
        prop(&mut none, NXPINT_TABLE_ID, &[80]);
        assert!(decode_packet_in2(&none).is_err());
        assert!(!is_packet_in2(&[0, 0, 0x23, 0x20, 0, 0, 0, 16]));
    }
}
