//! placeholder: flow_mod / group_mod / flow stats codec (being written)
#![allow(clippy::todo)]
use super::CodecError;
use crate::flow::{Flow, Group};

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

/// Encodes a complete `OFPT_FLOW_MOD` message (header included, OpenFlow 1.3).
pub fn encode_flow_mod(fm: &FlowMod, xid: u32) -> Result<Vec<u8>, CodecError> {
    let _ = (fm, xid);
    todo!()
}

/// Encodes a complete `OFPT_GROUP_MOD` message (header included, OpenFlow 1.3).
pub fn encode_group_mod(
    command: GroupModCommand,
    group: &Group,
    xid: u32,
) -> Result<Vec<u8>, CodecError> {
    let _ = (command, group, xid);
    todo!()
}

/// Encodes a complete `OFPMP_FLOW` multipart request for `table` (None = all tables) and the
/// flows whose cookie matches `cookie` under `cookie_mask`.
pub fn encode_flow_stats_request(
    table: Option<u8>,
    cookie: u64,
    cookie_mask: u64,
    xid: u32,
) -> Vec<u8> {
    let _ = (table, cookie, cookie_mask, xid);
    todo!()
}

/// Decodes the body of one `OFPMP_FLOW` multipart reply (after the 8-byte multipart header:
/// type, flags, pad) into flows.
pub fn decode_flow_stats_body(body: &[u8]) -> Result<Vec<FlowStats>, CodecError> {
    let _ = body;
    todo!()
}
