//! What callers ask for beyond single messages: dump filters, bundle messages, and the words
//! that describe a flow_mod or group_mod in errors and logs.

use crate::openflow::flow_mod::{
    encode_flow_mod, encode_group_mod, FlowMod, FlowModCommand, GroupModCommand,
};

use crate::flow::{Flow, Group};
use crate::openflow::CodecError;

/// Which flows a dump returns.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct DumpFilter {
    /// One table, or every table.
    pub table: Option<u8>,
    /// Cookie value the flows must have under `cookie_mask`.
    pub cookie: u64,
    /// Cookie bits that must equal `cookie` (0 = any cookie).
    pub cookie_mask: u64,
}

impl DumpFilter {
    /// Every flow of every table.
    pub fn all() -> Self {
        Self::default()
    }

    /// Every flow of `table`.
    pub fn table(table: u8) -> Self {
        DumpFilter {
            table: Some(table),
            ..Self::default()
        }
    }

    /// The flows whose cookie equals `cookie` under `mask`, in every table.
    pub fn cookie(cookie: u64, mask: u64) -> Self {
        DumpFilter {
            table: None,
            cookie,
            cookie_mask: mask,
        }
    }
}

/// One message of a bundle.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum BundleMsg {
    /// A flow_mod.
    Flow(FlowMod),
    /// A group_mod.
    Group(GroupModCommand, Group),
}

impl BundleMsg {
    /// Adds `flow`.
    pub fn add(flow: Flow) -> Self {
        BundleMsg::Flow(FlowMod::add(flow))
    }

    /// Deletes every flow (of every table) whose cookie equals `cookie` under `mask`.
    pub fn delete_by_cookie(cookie: u64, mask: u64) -> Self {
        BundleMsg::Flow(FlowMod::delete_cookie(cookie, mask))
    }

    /// Whether the message can be sent: its encoding, or why it has none (a value the wire
    /// cannot carry, a message longer than OpenFlow's 16-bit length).
    pub fn check(&self) -> Result<(), CodecError> {
        self.encode(0).map(drop)
    }

    pub(crate) fn encode(&self, xid: u32) -> Result<Vec<u8>, CodecError> {
        match self {
            BundleMsg::Flow(fm) => encode_flow_mod(fm, xid),
            BundleMsg::Group(cmd, g) => encode_group_mod(*cmd, g, xid),
        }
    }

    /// The message as text, for errors and logs.
    pub fn describe(&self) -> String {
        match self {
            BundleMsg::Flow(fm) => describe_flow_mod(fm),
            BundleMsg::Group(cmd, g) => describe_group_mod(*cmd, g),
        }
    }
}

impl From<FlowMod> for BundleMsg {
    fn from(fm: FlowMod) -> Self {
        BundleMsg::Flow(fm)
    }
}

/// A flow_mod as text: the command, then the flow in `ovs-ofctl` syntax.
pub fn describe_flow_mod(fm: &FlowMod) -> String {
    let cmd = match fm.command {
        FlowModCommand::Add => "add",
        FlowModCommand::Modify => "modify",
        FlowModCommand::ModifyStrict => "modify_strict",
        FlowModCommand::Delete => "delete",
        FlowModCommand::DeleteStrict => "delete_strict",
    };
    if !fm.command.is_delete() {
        return format!("{cmd} {}", fm.flow);
    }
    // A delete selects by table, cookie/mask, match (and priority when strict).
    let f = &fm.flow;
    let mut out = format!("{cmd} cookie={:#x}/{:#x}", f.cookie, fm.cookie_mask);
    if f.table == 255 {
        out.push_str(" table=all");
    } else {
        out.push_str(&format!(" table={}", f.table));
    }
    if fm.command == FlowModCommand::DeleteStrict {
        out.push_str(&format!(" priority={}", f.priority));
    }
    if !f.matches.is_any() {
        out.push_str(&format!(" {}", f.matches));
    }
    out
}

/// A group_mod as text.
pub fn describe_group_mod(cmd: GroupModCommand, g: &Group) -> String {
    let cmd = match cmd {
        GroupModCommand::Add => "add",
        GroupModCommand::Modify => "modify",
        GroupModCommand::Delete => "delete",
    };
    format!(
        "group {cmd} group_id={},type={},{} buckets",
        g.id,
        g.kind.name(),
        g.buckets.len()
    )
}
