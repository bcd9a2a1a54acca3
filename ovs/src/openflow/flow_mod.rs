//! Flow mods, group mods and flow-stats dumps in OpenFlow 1.3 wire form.
//!
//! Complete messages (with the 8-byte `ofp_header`, version 4) are built here so the connection
//! code only assigns an xid and writes bytes. Bodies follow `openflow.h` of OpenFlow 1.3:
//! `ofp_flow_mod` (48 bytes, then the match and instructions), `ofp_group_mod` with
//! `ofp_bucket`s, the `OFPMP_FLOW` multipart request, and the `ofp_flow_stats` entries of its
//! reply, which decode into the same [`Flow`] model that was installed.
//!
//! Flow mods always carry `buffer_id = OFP_NO_BUFFER`, `out_port = OFPP_ANY`,
//! `out_group = OFPG_ANY` and no flags: the agent never filters deletes by output and never asks
//! for flow-removed messages. `Add`/`Modify*` run [`Flow::validate`] first, plus the checks of
//! [`check_consistency`] that Open vSwitch makes against the match (`OFPBAC_MATCH_INCONSISTENT`).
//!
//! Limits: no meters, no write-actions, no `OFPFF_*` flags, no group or port counters (group
//! descriptions only), no bucket watch ports; a flow-stats entry with anything the model lacks
//! is an error naming that entry rather than a partial flow.

use super::actions::{decode_actions, decode_instructions, encode_actions, encode_instructions};
use super::oxm::{decode_match, encode_match};
use super::reader::{len_u16, patch_u16, Reader};
use super::CodecError;
use crate::flow::matches::{ETH_TYPE_IP, ETH_TYPE_IPV6};
use crate::flow::{
    ports, Action, Bucket, Field, Flow, FlowError, Group, GroupType, Match, DEFAULT_PRIORITY,
};

/// OpenFlow 1.3 version byte.
pub const OFP13_VERSION: u8 = 4;
/// `OFPT_FLOW_MOD`.
pub const OFPT_FLOW_MOD: u8 = 14;
/// `OFPT_GROUP_MOD`.
pub const OFPT_GROUP_MOD: u8 = 15;
/// `OFPT_MULTIPART_REQUEST`.
pub const OFPT_MULTIPART_REQUEST: u8 = 18;
/// `OFPT_MULTIPART_REPLY`.
pub const OFPT_MULTIPART_REPLY: u8 = 19;
/// `OFPMP_FLOW`.
pub const OFPMP_FLOW: u16 = 1;
/// `OFPMP_GROUP_DESC`.
pub const OFPMP_GROUP_DESC: u16 = 7;
/// `OFPTT_ALL`: every table (deletes and stats requests).
pub const OFPTT_ALL: u8 = 0xff;
/// `OFP_NO_BUFFER`.
pub const OFP_NO_BUFFER: u32 = 0xffff_ffff;
/// `OFPG_ANY`.
pub const OFPG_ANY: u32 = 0xffff_ffff;
/// `OFPG_ALL`: every group (group deletes).
pub const OFPG_ALL: u32 = 0xffff_fffc;

/// What a flow_mod does.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum FlowModCommand {
    /// `OFPFC_ADD`: add, replacing an identical match+priority.
    Add,
    /// `OFPFC_MODIFY`: change actions of every matching flow.
    Modify,
    /// `OFPFC_MODIFY_STRICT`: change actions of the flow with this exact match and priority.
    ModifyStrict,
    /// `OFPFC_DELETE`: delete every flow the match covers (and cookie/mask selects).
    Delete,
    /// `OFPFC_DELETE_STRICT`: delete the flow with this exact match and priority.
    DeleteStrict,
}

impl FlowModCommand {
    /// The `ofp_flow_mod_command` code.
    pub fn code(self) -> u8 {
        match self {
            FlowModCommand::Add => 0,
            FlowModCommand::Modify => 1,
            FlowModCommand::ModifyStrict => 2,
            FlowModCommand::Delete => 3,
            FlowModCommand::DeleteStrict => 4,
        }
    }

    /// From the wire code.
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            0 => FlowModCommand::Add,
            1 => FlowModCommand::Modify,
            2 => FlowModCommand::ModifyStrict,
            3 => FlowModCommand::Delete,
            4 => FlowModCommand::DeleteStrict,
            _ => return None,
        })
    }

    /// Whether the command deletes (and so carries no instructions).
    pub fn is_delete(self) -> bool {
        matches!(self, FlowModCommand::Delete | FlowModCommand::DeleteStrict)
    }
}

/// One flow_mod: a command, the flow it applies to, and the cookie mask that selects flows for
/// modify/delete. `flow.table == 255` (`OFPTT_ALL`) selects every table for deletes.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct FlowMod {
    /// The command.
    pub command: FlowModCommand,
    /// The flow (for deletes: table, priority (strict), match and cookie select).
    pub flow: Flow,
    /// Which cookie bits must equal `flow.cookie` for modify/delete (0 = any cookie).
    pub cookie_mask: u64,
}

impl FlowMod {
    /// Adds `flow`.
    pub fn add(flow: Flow) -> Self {
        FlowMod {
            command: FlowModCommand::Add,
            flow,
            cookie_mask: 0,
        }
    }

    /// Replaces the actions of the flow with `flow`'s table, priority and exact match (the
    /// cookie of the installed flow is kept, as OpenFlow 1.3 specifies).
    pub fn modify_strict(flow: Flow) -> Self {
        FlowMod {
            command: FlowModCommand::ModifyStrict,
            flow,
            cookie_mask: 0,
        }
    }

    /// Deletes the flow with `flow`'s table, priority and exact match (any cookie).
    pub fn delete_strict(flow: &Flow) -> Self {
        let sel = Flow::new(flow.table, flow.priority).matching(flow.matches.clone());
        FlowMod {
            command: FlowModCommand::DeleteStrict,
            flow: sel,
            cookie_mask: 0,
        }
    }

    /// Deletes every flow of `table` (255 = all tables) that `m` covers, whatever its priority
    /// and cookie.
    pub fn delete(table: u8, m: Match) -> Self {
        let sel = Flow::new(table, DEFAULT_PRIORITY).matching(m);
        FlowMod {
            command: FlowModCommand::Delete,
            flow: sel,
            cookie_mask: 0,
        }
    }

    /// Deletes every flow, in every table, whose cookie equals `cookie` on the bits of `mask`.
    pub fn delete_cookie(cookie: u64, mask: u64) -> Self {
        let sel = Flow::new(OFPTT_ALL, DEFAULT_PRIORITY).cookie(cookie);
        FlowMod {
            command: FlowModCommand::Delete,
            flow: sel,
            cookie_mask: mask,
        }
    }
}

/// What a group_mod does.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum GroupModCommand {
    /// `OFPGC_ADD`.
    Add,
    /// `OFPGC_MODIFY`.
    Modify,
    /// `OFPGC_DELETE`.
    Delete,
}

impl GroupModCommand {
    /// The `ofp_group_mod_command` code.
    pub fn code(self) -> u16 {
        match self {
            GroupModCommand::Add => 0,
            GroupModCommand::Modify => 1,
            GroupModCommand::Delete => 2,
        }
    }

    /// From the wire code.
    pub fn from_code(code: u16) -> Option<Self> {
        Some(match code {
            0 => GroupModCommand::Add,
            1 => GroupModCommand::Modify,
            2 => GroupModCommand::Delete,
            _ => return None,
        })
    }
}

/// A flow as dumped, with its counters.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FlowStats {
    /// The flow.
    pub flow: Flow,
    /// Packets matched.
    pub packets: u64,
    /// Bytes matched.
    pub bytes: u64,
    /// Seconds installed.
    pub duration_sec: u32,
}

/// Starts a message: version, type, length placeholder, xid. Returns its offset.
fn put_header(out: &mut Vec<u8>, msg_type: u8, xid: u32) -> usize {
    let start = out.len();
    out.extend_from_slice(&[OFP13_VERSION, msg_type, 0, 0]);
    out.extend_from_slice(&xid.to_be_bytes());
    start
}

/// Writes the message length into the header begun at `start`.
fn finish_message(out: &mut [u8], start: usize, what: &'static str) -> Result<(), CodecError> {
    let len = len_u16(out, start, what)?;
    patch_u16(out, start + 2, len);
    Ok(())
}

/// Checks what Open vSwitch checks between a flow's actions and its match and that
/// [`Flow::validate`] does not: `ct` needs an `ip` or `ipv6` match (`check_CT`), a `nat` with
/// IPv4 addresses an `ip` match, and writing or reading `ip_src`/`ip_dst` needs `ip`,
/// `ipv6_src`/`ipv6_dst` `ipv6` (set-field and move prerequisites).
pub fn check_consistency(flow: &Flow) -> Result<(), FlowError> {
    let ip = flow.matches.eth_type == Some(ETH_TYPE_IP);
    let ip6 = flow.matches.eth_type == Some(ETH_TYPE_IPV6);
    let family_ok = |f: Field| match f {
        Field::IpSrc | Field::IpDst => ip,
        Field::Ipv6Src | Field::Ipv6Dst => ip6,
        _ => true,
    };
    for a in &flow.actions {
        let (ok, what) = match a {
            Action::Ct(ct) if ct.nat_spec().is_some_and(|n| n.addrs().is_some()) => {
                (ip, "ip (a nat with IPv4 addresses)")
            }
            Action::Ct(_) => (ip || ip6, "ip or ipv6"),
            Action::Load(l) => (family_ok(l.dst().field()), "the field's family"),
            Action::SetField(s) => (family_ok(s.field()), "the field's family"),
            Action::Move(m) => (
                family_ok(m.src().field()) && family_ok(m.dst().field()),
                "the fields' family",
            ),
            _ => (true, ""),
        };
        if !ok {
            return Err(FlowError::Invalid(format!(
                "action {a:?} needs a match on {what} (in flow {flow})"
            )));
        }
    }
    Ok(())
}

/// Encodes a complete `OFPT_FLOW_MOD` message (header included, OpenFlow 1.3).
///
/// `Add` and `Modify*` validate the flow first ([`Flow::validate`], [`check_consistency`]).
/// Deletes carry only table, priority, cookie/mask and match (the match is still checked for
/// prerequisites); `flow.table == 255` deletes from every table.
pub fn encode_flow_mod(fm: &FlowMod, xid: u32) -> Result<Vec<u8>, CodecError> {
    let flow = &fm.flow;
    if !fm.command.is_delete() {
        flow.validate()?;
        check_consistency(flow)?;
    }
    let mut out = Vec::with_capacity(128);
    let start = put_header(&mut out, OFPT_FLOW_MOD, xid);
    out.extend_from_slice(&flow.cookie.to_be_bytes());
    out.extend_from_slice(&fm.cookie_mask.to_be_bytes());
    out.push(flow.table);
    out.push(fm.command.code());
    out.extend_from_slice(&flow.idle_timeout.to_be_bytes());
    out.extend_from_slice(&flow.hard_timeout.to_be_bytes());
    out.extend_from_slice(&flow.priority.to_be_bytes());
    out.extend_from_slice(&OFP_NO_BUFFER.to_be_bytes());
    out.extend_from_slice(&ports::ANY.to_be_bytes());
    out.extend_from_slice(&OFPG_ANY.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]); // flags, pad
    encode_match(&flow.matches, &mut out)?;
    if !fm.command.is_delete() {
        encode_instructions(&flow.actions, flow.goto_table, &mut out)?;
    }
    finish_message(&mut out, start, "OFPT_FLOW_MOD")?;
    Ok(out)
}

/// Checks the `ofp_header` of a whole message and returns (type, xid, body).
fn split_header<'a>(msg: &'a [u8], what: &'static str) -> Result<(u8, u32, &'a [u8]), CodecError> {
    let mut r = Reader::new(msg, what);
    let version = r.u8()?;
    let ty = r.u8()?;
    let len = r.u16()? as usize;
    let xid = r.u32()?;
    if version != OFP13_VERSION {
        return Err(CodecError::Unsupported {
            what,
            detail: format!("OpenFlow version {version} (only 4, OpenFlow 1.3)"),
        });
    }
    if len < 8 {
        return Err(CodecError::Malformed {
            what,
            detail: format!("message length {len}"),
        });
    }
    if msg.len() < len {
        return Err(CodecError::Truncated {
            what,
            need: len,
            have: msg.len(),
        });
    }
    Ok((ty, xid, &msg[8..len]))
}

/// Decodes a complete `OFPT_FLOW_MOD` message into the flow mod and its xid (the inverse of
/// [`encode_flow_mod`], for tests and tools).
pub fn decode_flow_mod(bytes: &[u8]) -> Result<(FlowMod, u32), CodecError> {
    let (ty, xid, body) = split_header(bytes, "OFPT_FLOW_MOD")?;
    if ty != OFPT_FLOW_MOD {
        return Err(CodecError::Malformed {
            what: "OFPT_FLOW_MOD",
            detail: format!("message type {ty}, expected {OFPT_FLOW_MOD}"),
        });
    }
    let mut r = Reader::new(body, "OFPT_FLOW_MOD");
    let cookie = r.u64()?;
    let cookie_mask = r.u64()?;
    let table = r.u8()?;
    let code = r.u8()?;
    let idle_timeout = r.u16()?;
    let hard_timeout = r.u16()?;
    let priority = r.u16()?;
    r.skip(4 + 4 + 4 + 2 + 2)?; // buffer_id, out_port, out_group, flags, pad
    let command = FlowModCommand::from_code(code).ok_or_else(|| CodecError::Unsupported {
        what: "OFPT_FLOW_MOD",
        detail: format!("command {code}"),
    })?;
    let rest = r.rest();
    let (matches, used) = decode_match(rest)?;
    let (actions, goto_table) = decode_instructions(&rest[used..])?;
    let flow = Flow {
        table,
        priority,
        cookie,
        idle_timeout,
        hard_timeout,
        matches,
        actions,
        goto_table,
    };
    Ok((
        FlowMod {
            command,
            flow,
            cookie_mask,
        },
        xid,
    ))
}

fn encode_buckets(buckets: &[Bucket], out: &mut Vec<u8>) -> Result<(), CodecError> {
    for b in buckets {
        let start = out.len();
        out.extend_from_slice(&[0, 0]); // len
        out.extend_from_slice(&b.weight.to_be_bytes());
        out.extend_from_slice(&ports::ANY.to_be_bytes()); // watch_port
        out.extend_from_slice(&OFPG_ANY.to_be_bytes()); // watch_group
        out.extend_from_slice(&[0; 4]);
        encode_actions(&b.actions, out)?;
        let len = len_u16(out, start, "ofp_bucket")?;
        patch_u16(out, start, len);
    }
    Ok(())
}

fn decode_buckets(buf: &[u8]) -> Result<Vec<Bucket>, CodecError> {
    let mut r = Reader::new(buf, "ofp_bucket");
    let mut buckets = Vec::new();
    while r.remaining() > 0 {
        let len = r.u16()? as usize;
        r.check_len(len, 16, || format!("bucket length {len}"))?;
        let weight = r.u16()?;
        let watch_port = r.u32()?;
        let watch_group = r.u32()?;
        r.skip(4)?;
        if watch_port != ports::ANY || watch_group != OFPG_ANY {
            return Err(CodecError::Unsupported {
                what: "ofp_bucket",
                detail: format!("watch_port {watch_port:#x} watch_group {watch_group:#x}"),
            });
        }
        let actions = r.take(len - 16)?;
        buckets.push(Bucket {
            weight,
            actions: decode_actions(actions)?,
        });
    }
    Ok(buckets)
}

/// Encodes a complete `OFPT_GROUP_MOD` message (header included, OpenFlow 1.3).
///
/// Buckets have no watch port or group. A delete carries no buckets; [`OFPG_ALL`] as the id
/// deletes every group.
pub fn encode_group_mod(
    command: GroupModCommand,
    group: &Group,
    xid: u32,
) -> Result<Vec<u8>, CodecError> {
    if command != GroupModCommand::Delete && group.id > 0xffff_ff00 {
        return Err(FlowError::Invalid(format!("group id {:#x} is reserved", group.id)).into());
    }
    let mut out = Vec::with_capacity(64);
    let start = put_header(&mut out, OFPT_GROUP_MOD, xid);
    out.extend_from_slice(&command.code().to_be_bytes());
    out.push(group.kind.code());
    out.push(0);
    out.extend_from_slice(&group.id.to_be_bytes());
    if command != GroupModCommand::Delete {
        for b in &group.buckets {
            for a in &b.actions {
                a.validate()?;
            }
        }
        encode_buckets(&group.buckets, &mut out)?;
    }
    finish_message(&mut out, start, "OFPT_GROUP_MOD")?;
    Ok(out)
}

/// Decodes a complete `OFPT_GROUP_MOD` message into (command, group, xid) (the inverse of
/// [`encode_group_mod`], for tests and tools).
pub fn decode_group_mod(bytes: &[u8]) -> Result<(GroupModCommand, Group, u32), CodecError> {
    let (ty, xid, body) = split_header(bytes, "OFPT_GROUP_MOD")?;
    if ty != OFPT_GROUP_MOD {
        return Err(CodecError::Malformed {
            what: "OFPT_GROUP_MOD",
            detail: format!("message type {ty}, expected {OFPT_GROUP_MOD}"),
        });
    }
    let mut r = Reader::new(body, "OFPT_GROUP_MOD");
    let code = r.u16()?;
    let kind = r.u8()?;
    r.skip(1)?;
    let id = r.u32()?;
    let command = GroupModCommand::from_code(code).ok_or_else(|| CodecError::Unsupported {
        what: "OFPT_GROUP_MOD",
        detail: format!("command {code}"),
    })?;
    let kind = GroupType::from_code(kind).ok_or_else(|| CodecError::Unsupported {
        what: "OFPT_GROUP_MOD",
        detail: format!("group type {kind}"),
    })?;
    let buckets = decode_buckets(r.rest())?;
    Ok((command, Group { id, kind, buckets }, xid))
}

/// Encodes a complete `OFPMP_FLOW` multipart request for `table` (None = all tables) and the
/// flows whose cookie matches `cookie` under `cookie_mask`.
pub fn encode_flow_stats_request(
    table: Option<u8>,
    cookie: u64,
    cookie_mask: u64,
    xid: u32,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(56);
    put_header(&mut out, OFPT_MULTIPART_REQUEST, xid);
    out.extend_from_slice(&OFPMP_FLOW.to_be_bytes());
    out.extend_from_slice(&[0; 6]); // flags, pad
    out.push(table.unwrap_or(OFPTT_ALL));
    out.extend_from_slice(&[0; 3]);
    out.extend_from_slice(&ports::ANY.to_be_bytes());
    out.extend_from_slice(&OFPG_ANY.to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&cookie.to_be_bytes());
    out.extend_from_slice(&cookie_mask.to_be_bytes());
    // The empty match: type OXM, length 4, padded to 8.
    out.extend_from_slice(&[0, 1, 0, 4, 0, 0, 0, 0]);
    let len = out.len() as u16; // always 56
    patch_u16(&mut out, 2, len);
    out
}

/// Decodes the body of one `OFPMP_FLOW` multipart reply (after the 8-byte multipart header:
/// type, flags, pad) into flows.
///
/// An entry the model cannot hold is an error that names the entry's table, priority and cookie.
pub fn decode_flow_stats_body(body: &[u8]) -> Result<Vec<FlowStats>, CodecError> {
    let mut r = Reader::new(body, "ofp_flow_stats");
    let mut stats = Vec::new();
    while r.remaining() > 0 {
        let at = r.pos();
        let len = r.u16()? as usize;
        r.check_len(len, 56, || format!("entry length {len} at offset {at}"))?;
        let entry = r.take(len - 2)?;
        stats.push(decode_flow_stats_entry(entry)?);
    }
    Ok(stats)
}

/// One `ofp_flow_stats` after its length field.
fn decode_flow_stats_entry(entry: &[u8]) -> Result<FlowStats, CodecError> {
    let mut r = Reader::new(entry, "ofp_flow_stats");
    let table = r.u8()?;
    r.skip(1)?;
    let duration_sec = r.u32()?;
    let _duration_nsec = r.u32()?;
    let priority = r.u16()?;
    let idle_timeout = r.u16()?;
    let hard_timeout = r.u16()?;
    let _flags = r.u16()?;
    r.skip(4)?;
    let cookie = r.u64()?;
    let packets = r.u64()?;
    let bytes = r.u64()?;
    let rest = r.rest();
    let in_entry = |e: CodecError| {
        let ctx =
            format!("in flow stats entry table={table},priority={priority},cookie={cookie:#x}");
        match e {
            CodecError::Unsupported { what, detail } => CodecError::Unsupported {
                what,
                detail: format!("{detail} ({ctx})"),
            },
            CodecError::Malformed { what, detail } => CodecError::Malformed {
                what,
                detail: format!("{detail} ({ctx})"),
            },
            other => other,
        }
    };
    let (matches, used) = decode_match(rest).map_err(in_entry)?;
    // Actions this model cannot hold (another agent's) keep the flow, marked, so a reconcile
    // can delete or replace it by its match instead of failing the whole dump.
    let (actions, goto_table) = match decode_instructions(&rest[used..]) {
        Err(CodecError::Unsupported { what, detail }) => {
            (vec![Action::Undecoded(format!("{what}: {detail}"))], None)
        }
        other => other.map_err(in_entry)?,
    };
    Ok(FlowStats {
        flow: Flow {
            table,
            priority,
            cookie,
            idle_timeout,
            hard_timeout,
            matches,
            actions,
            goto_table,
        },
        packets,
        bytes,
        duration_sec,
    })
}

/// Encodes a complete `OFPMP_GROUP_DESC` multipart request (every group).
pub fn encode_group_desc_request(xid: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    put_header(&mut out, OFPT_MULTIPART_REQUEST, xid);
    out.extend_from_slice(&OFPMP_GROUP_DESC.to_be_bytes());
    out.extend_from_slice(&[0; 6]);
    patch_u16(&mut out, 2, 16);
    out
}

/// Decodes the body of one `OFPMP_GROUP_DESC` multipart reply (after the multipart header) into
/// groups.
pub fn decode_group_desc_body(body: &[u8]) -> Result<Vec<Group>, CodecError> {
    let mut r = Reader::new(body, "ofp_group_desc");
    let mut groups = Vec::new();
    while r.remaining() > 0 {
        let at = r.pos();
        let len = r.u16()? as usize;
        r.check_len(len, 8, || format!("entry length {len} at offset {at}"))?;
        let kind = r.u8()?;
        r.skip(1)?;
        let id = r.u32()?;
        let buckets = r.take(len - 8)?;
        let kind = GroupType::from_code(kind).ok_or_else(|| CodecError::Unsupported {
            what: "ofp_group_desc",
            detail: format!("group type {kind} of group {id}"),
        })?;
        groups.push(Group {
            id,
            kind,
            buckets: decode_buckets(buckets)?,
        });
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;
    use crate::flow::{Ct, CtFlag, CtState, MacAddr, Masked, Nat, NatKind, Subfield};

    fn sample_flow() -> Flow {
        Flow::new(20, 100)
            .cookie(0xabcd)
            .matching(
                Match::any()
                    .arp()
                    .in_port(3)
                    .arp_spa(Ipv4Addr::new(10, 128, 0, 2))
                    .arp_sha(MacAddr([0x0a, 0x58, 0x0a, 0x80, 0, 2])),
            )
            .action(Action::load_reg(0, 5))
            .goto(30)
    }

    #[test]
    fn flow_mod_round_trips() {
        let fms = [
            FlowMod::add(sample_flow()),
            FlowMod::add(Flow::new(0, 0)),
            FlowMod::add(sample_flow().timeouts(10, 20)),
            FlowMod::modify_strict(sample_flow()),
            FlowMod::delete_strict(&sample_flow()),
            FlowMod::delete(20, Match::any().in_port(3)),
            FlowMod::delete(OFPTT_ALL, Match::any()),
            FlowMod::delete_cookie(0x1_0000_0000, 0xffff_ffff_0000_0000),
        ];
        for (i, fm) in fms.iter().enumerate() {
            let bytes = encode_flow_mod(fm, i as u32 + 1).unwrap();
            assert_eq!(
                u16::from_be_bytes([bytes[2], bytes[3]]) as usize,
                bytes.len()
            );
            assert_eq!(bytes.len() % 8, 0);
            let (back, xid) = decode_flow_mod(&bytes).unwrap();
            assert_eq!(xid, i as u32 + 1);
            assert_eq!(&back, fm);
        }
    }

    #[test]
    fn flow_mod_header_layout() {
        let bytes = encode_flow_mod(&FlowMod::add(sample_flow()), 0x01020304).unwrap();
        assert_eq!(&bytes[..2], &[4, 14]);
        assert_eq!(&bytes[4..8], &[1, 2, 3, 4]);
        assert_eq!(&bytes[8..16], &0xabcdu64.to_be_bytes());
        assert_eq!(bytes[24], 20); // table
        assert_eq!(bytes[25], 0); // ADD
        assert_eq!(&bytes[30..32], &100u16.to_be_bytes());
        assert_eq!(&bytes[32..44], &[0xff; 12]); // buffer_id, out_port, out_group
        assert_eq!(&bytes[48..50], &[0, 1]); // OXM match
        let del = encode_flow_mod(&FlowMod::delete_cookie(5, 0xff), 9).unwrap();
        assert_eq!(del.len(), 56); // header + body + empty match, no instructions
        assert_eq!(del[24], 255);
        assert_eq!(del[25], 3);
        assert_eq!(&del[16..24], &0xffu64.to_be_bytes());
    }

    #[test]
    fn invalid_flows_are_refused_with_the_field_named() {
        let bad = Flow::new(0, 1).matching(Match::any().tp_dst(80));
        let err = encode_flow_mod(&FlowMod::add(bad), 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("tp_dst"), "{err}");
        let bad = Flow::new(5, 1).goto(3);
        let err = encode_flow_mod(&FlowMod::add(bad), 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("goto_table:3"), "{err}");
        let bad = Flow::new(255, 1);
        assert!(encode_flow_mod(&FlowMod::add(bad), 1).is_err());
        let bad = Flow::new(0, 1)
            .matching(Match::any().arp())
            .action(Action::Ct(Ct::new()));
        let err = encode_flow_mod(&FlowMod::add(bad), 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs a match on ip or ipv6"), "{err}");
        let v6 = || Match::any().ipv6();
        assert!(encode_flow_mod(
            &FlowMod::add(Flow::new(0, 1).matching(v6()).action(Action::Ct(Ct::new()))),
            1
        )
        .is_ok());
        let nat = Nat::new(
            NatKind::Src,
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 1),
        )
        .unwrap();
        let bad = Flow::new(0, 1)
            .matching(v6())
            .action(Action::Ct(Ct::new().commit().nat(nat)));
        let err = encode_flow_mod(&FlowMod::add(bad), 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("nat with IPv4 addresses"), "{err}");
        let write6 = Action::SetField(crate::flow::SetField::new(Field::Ipv6Dst, 1).unwrap());
        let bad = Flow::new(0, 1)
            .matching(Match::any().ip())
            .action(write6.clone());
        let err = encode_flow_mod(&FlowMod::add(bad), 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("the field's family"), "{err}");
        assert!(encode_flow_mod(
            &FlowMod::add(Flow::new(0, 1).matching(v6()).action(write6)),
            1
        )
        .is_ok());
        // Deletes still check match prerequisites.
        let err = encode_flow_mod(
            &FlowMod::delete(0, Match::any().nw_dst(Ipv4Addr::LOCALHOST)),
            1,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("nw_dst needs ip"), "{err}");
    }

    #[test]
    fn truncated_messages_are_errors() {
        let bytes = encode_flow_mod(&FlowMod::add(sample_flow()), 1).unwrap();
        for n in 0..bytes.len() {
            assert!(matches!(
                decode_flow_mod(&bytes[..n]),
                Err(CodecError::Truncated { .. })
            ));
        }
    }

    #[test]
    fn flow_stats_request_layout() {
        let req = encode_flow_stats_request(None, 0x12, 0xff, 7);
        assert_eq!(req.len(), 56);
        assert_eq!(&req[..8], &[4, 18, 0, 56, 0, 0, 0, 7]);
        assert_eq!(&req[8..10], &[0, 1]);
        assert_eq!(req[16], 0xff);
        assert_eq!(&req[20..28], &[0xff; 8]);
        assert_eq!(&req[32..40], &0x12u64.to_be_bytes());
        assert_eq!(&req[40..48], &0xffu64.to_be_bytes());
        assert_eq!(&req[48..], &[0, 1, 0, 4, 0, 0, 0, 0]);
        assert_eq!(encode_flow_stats_request(Some(3), 0, 0, 1)[16], 3);
    }

    /// Builds an `ofp_flow_stats` entry the way the switch does.
    fn stats_entry(f: &Flow, packets: u64, bytes: u64) -> Vec<u8> {
        let mut e = vec![0, 0, f.table, 0];
        e.extend_from_slice(&42u32.to_be_bytes());
        e.extend_from_slice(&7u32.to_be_bytes());
        e.extend_from_slice(&f.priority.to_be_bytes());
        e.extend_from_slice(&f.idle_timeout.to_be_bytes());
        e.extend_from_slice(&f.hard_timeout.to_be_bytes());
        e.extend_from_slice(&[0; 6]);
        e.extend_from_slice(&f.cookie.to_be_bytes());
        e.extend_from_slice(&packets.to_be_bytes());
        e.extend_from_slice(&bytes.to_be_bytes());
        encode_match(&f.matches, &mut e).unwrap();
        encode_instructions(&f.actions, f.goto_table, &mut e).unwrap();
        let len = e.len() as u16;
        patch_u16(&mut e, 0, len);
        e
    }

    #[test]
    fn flow_stats_body_decodes() {
        let a = sample_flow();
        let b = Flow::new(0, 0);
        let mut body = stats_entry(&a, 10, 1000);
        let first = body.len();
        body.extend(stats_entry(&b, 0, 0));
        let got = decode_flow_stats_body(&body).unwrap();
        assert_eq!(
            got,
            vec![
                FlowStats {
                    flow: a,
                    packets: 10,
                    bytes: 1000,
                    duration_sec: 42
                },
                FlowStats {
                    flow: b,
                    packets: 0,
                    bytes: 0,
                    duration_sec: 42
                },
            ]
        );
        assert!(decode_flow_stats_body(&[]).unwrap().is_empty());
        for n in 1..body.len() {
            let got = decode_flow_stats_body(&body[..n]);
            if n == first {
                assert_eq!(got.unwrap().len(), 1);
            } else {
                assert!(
                    matches!(got, Err(CodecError::Truncated { .. })),
                    "prefix {n}: {got:?}"
                );
            }
        }
        // A zero length must not loop forever.
        assert!(decode_flow_stats_body(&[0; 64]).is_err());
        // An action the model cannot hold (another agent's) keeps the entry: its table,
        // priority, cookie and match, with the actions marked undecoded and why, so a
        // reconcile can delete or replace the flow instead of failing the whole dump.
        let mut bad = stats_entry(
            &Flow::new(3, 9).cookie(0x77).action(Action::Output(1)),
            0,
            0,
        );
        let n = bad.len();
        bad[n - 16..n - 14].copy_from_slice(&24u16.to_be_bytes()); // OFPAT_DEC_NW_TTL-ish
        let got = decode_flow_stats_body(&bad).unwrap();
        assert_eq!(got.len(), 1);
        let f = &got[0].flow;
        assert_eq!((f.table, f.priority, f.cookie), (3, 9, 0x77));
        assert!(
            matches!(f.actions.as_slice(), [Action::Undecoded(why)] if !why.is_empty()),
            "{f:?}"
        );
        assert!(
            f.validate().is_err(),
            "an undecoded flow cannot be sent back"
        );
    }

    #[test]
    fn group_mod_round_trips() {
        let g = Group::select(
            5,
            vec![
                vec![
                    Action::set_tun_dst(Ipv4Addr::new(1, 1, 1, 1)),
                    Action::Output(2),
                ],
                vec![Action::Output(3)],
            ],
        );
        for cmd in [GroupModCommand::Add, GroupModCommand::Modify] {
            let bytes = encode_group_mod(cmd, &g, 3).unwrap();
            assert_eq!(&bytes[..2], &[4, 15]);
            assert_eq!(decode_group_mod(&bytes).unwrap(), (cmd, g.clone(), 3));
        }
        let all = Group {
            id: OFPG_ALL,
            kind: GroupType::All,
            buckets: vec![],
        };
        let del = encode_group_mod(GroupModCommand::Delete, &all, 4).unwrap();
        assert_eq!(del.len(), 16);
        assert_eq!(
            decode_group_mod(&del).unwrap(),
            (GroupModCommand::Delete, all, 4)
        );
        assert!(
            encode_group_mod(GroupModCommand::Add, &Group::select(OFPG_ALL, vec![]), 1).is_err()
        );
    }

    /// A tiny deterministic PRNG (xorshift64*), enough to generate varied flows.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn coin(&mut self) -> bool {
            self.next() & 1 == 1
        }
        fn u32(&mut self) -> u32 {
            self.next() as u32
        }
        fn ip(&mut self) -> Masked<Ipv4Addr> {
            let a = Ipv4Addr::from(self.u32());
            Masked::cidr(a, 1 + self.below(32) as u8).unwrap()
        }
        fn ip6(&mut self) -> Masked<Ipv6Addr> {
            let a = Ipv6Addr::from((u128::from(self.next()) << 64) | u128::from(self.next()));
            Masked::cidr6(a, 1 + self.below(128) as u8).unwrap()
        }
        fn mac(&mut self) -> Masked<MacAddr> {
            let b = self.next().to_be_bytes();
            let v = MacAddr([b[0], b[1], b[2], b[3], b[4], b[5]]);
            if self.coin() {
                Masked::exact(v)
            } else {
                Masked::new(v, MacAddr([0xff, 0xff, 0xff, 0, 0, b[7] | 1])).unwrap()
            }
        }
        fn m32(&mut self) -> Masked<u32> {
            let v = self.u32();
            if self.coin() {
                Masked::exact(v)
            } else {
                Masked::new(v, self.u32() | 1).unwrap()
            }
        }
    }

    fn random_flow(rng: &mut Rng) -> Flow {
        let mut m = Match::any();
        match rng.below(7) {
            0 => {}
            5 => {
                m = m.ipv6();
                if rng.coin() {
                    m = m.ipv6_src(rng.ip6());
                }
                if rng.coin() {
                    m = m.ipv6_dst(rng.ip6());
                }
                if rng.coin() {
                    m = m.tcp6().tp_dst(rng.below(65536) as u16);
                }
            }
            6 => {
                m = m.icmp6();
                if rng.coin() {
                    m = m.icmp_type(133 + rng.below(5) as u8);
                } else {
                    m = m.icmp_type(135).nd_target(rng.ip6()).nd_sll(rng.mac());
                }
            }
            1 => {
                m = m.arp();
                if rng.coin() {
                    m = m.arp_op(1 + rng.below(2) as u16);
                }
                if rng.coin() {
                    m = m.arp_spa(rng.ip()).arp_tpa(rng.ip());
                }
                if rng.coin() {
                    m = m.arp_sha(rng.mac()).arp_tha(rng.mac());
                }
            }
            n => {
                m = m.ip();
                if rng.coin() {
                    m = m.nw_src(rng.ip());
                }
                if rng.coin() {
                    m = m.nw_dst(rng.ip());
                }
                m = match n {
                    2 => m.tcp(),
                    3 => m.udp(),
                    _ => m.sctp(),
                };
                if rng.coin() {
                    m = m.tp_dst(rng.below(65536) as u16);
                }
                if rng.coin() {
                    m = m.tp_src(Masked::new(rng.below(65536) as u16, 0xff00).unwrap());
                }
            }
        }
        if rng.coin() {
            m = m.in_port(1 + rng.below(1000) as u32);
        }
        if rng.coin() {
            m = m.dl_src(rng.mac());
        }
        if rng.coin() {
            m = m.dl_dst(rng.mac());
        }
        for r in 0..8 {
            if rng.below(4) == 0 {
                m = m.reg(r, rng.m32());
            }
        }
        if rng.coin() {
            m = m.tun_id(Masked::new(rng.next(), rng.next() | 1).unwrap());
        }
        if rng.coin() {
            m = m.tun_src(rng.ip()).tun_dst(rng.ip());
        } else if rng.coin() {
            m = m.tun_ipv6_src(rng.ip6()).tun_ipv6_dst(rng.ip6());
        }
        if rng.coin() {
            m = m.ct_state(CtState::new().plus(CtFlag::Trk).minus(CtFlag::Inv));
        }
        if rng.coin() {
            m = m
                .ct_zone(rng.below(65536) as u16)
                .ct_mark(rng.m32())
                .pkt_mark(rng.m32());
        }
        let ip = m.eth_type == Some(crate::flow::matches::ETH_TYPE_IP);
        let table = rng.below(200) as u8;
        let mut f = Flow::new(table, rng.below(65536) as u16)
            .cookie(rng.next())
            .matching(m);
        for _ in 0..rng.below(6) {
            let a = match rng.below(9) {
                0 => Action::Output(1 + rng.below(100) as u32),
                1 => Action::load_reg(rng.below(8) as u8, rng.u32()),
                2 => {
                    let s = rng.below(32) as u8;
                    let e = s + rng.below(32 - s as u64) as u8;
                    let sub = Subfield::range(Field::Reg(rng.below(8) as u8), s, e).unwrap();
                    let v = rng.next() & ((1u64 << sub.n_bits()) - 1);
                    Action::load(sub, v).unwrap()
                }
                3 if rng.coin() => Action::set_field(Field::TunId, rng.next()).unwrap(),
                3 => Action::set_tun_ipv6_dst(rng.ip6().value()),
                4 => Action::resubmit(rng.below(255) as u8).unwrap(),
                5 => Action::note(&rng.next().to_be_bytes()[..rng.below(8) as usize]),
                6 => Action::group(rng.below(1000) as u32).unwrap(),
                7 if ip => Action::Ct(
                    Ct::new()
                        .commit()
                        .zone(rng.below(65536) as u16)
                        .nat(
                            Nat::new(
                                NatKind::Src,
                                Ipv4Addr::new(10, 0, 0, 1),
                                Ipv4Addr::from(rng.u32() | 0x0b00_0000),
                            )
                            .unwrap(),
                        )
                        .exec(
                            Action::load(Subfield::whole(Field::CtMark), rng.u32() as u64).unwrap(),
                        )
                        .unwrap(),
                ),
                _ => Action::move_bits(
                    Subfield::whole(Field::Reg(rng.below(8) as u8)),
                    Subfield::range(Field::TunId, 0, 31).unwrap(),
                )
                .unwrap(),
            };
            f = f.action(a);
        }
        if rng.coin() && table < 254 {
            f = f.goto(table + 1 + rng.below(254 - table as u64) as u8);
        }
        f
    }

    #[test]
    fn corrupted_messages_never_panic() {
        // Flip bytes of valid messages and feed every decoder random and corrupted input: each
        // must return (Ok or an error), never panic.
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let mut good = Vec::new();
        for i in 0..50 {
            good.push(encode_flow_mod(&FlowMod::add(random_flow(&mut rng)), i).unwrap());
        }
        for _ in 0..20_000 {
            let base = &good[rng.below(good.len() as u64) as usize];
            let mut msg = base.clone();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(msg.len() as u64) as usize;
                msg[at] = rng.next() as u8;
            }
            if rng.below(4) == 0 {
                msg.truncate(rng.below(msg.len() as u64) as usize);
            }
            let _ = decode_flow_mod(&msg);
            let body = msg.get(8..).unwrap_or(&[]);
            let _ = decode_flow_stats_body(body);
            let _ = decode_group_desc_body(body);
            let _ = decode_group_mod(&msg);
            let _ = decode_match(msg.get(48..).unwrap_or(&[]));
            let _ = decode_instructions(body);
            let _ = decode_actions(body);
        }
    }

    #[test]
    fn generated_flows_round_trip() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for i in 0..2000 {
            let f = random_flow(&mut rng);
            let fm = FlowMod::add(f);
            let bytes = encode_flow_mod(&fm, i).unwrap_or_else(|e| panic!("{e}: {fm:?}"));
            assert_eq!(decode_flow_mod(&bytes).unwrap(), (fm, i));
        }
    }
}
