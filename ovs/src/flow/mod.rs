//! The `Flow` model: one OpenFlow 1.3 flow entry as the pipeline writes it, independent of the
//! wire (see `crate::openflow`) and of text (see [`display`] and [`parse`]).
//!
//! A flow is a table, a priority, a cookie, a [`Match`], a list of [`Action`]s (the
//! apply-actions instruction) and an optional `goto_table`. That is everything the node agent
//! needs; write-actions, metadata and meters are deliberately absent. A flow with no actions and
//! no `goto_table` drops. The same value comes back out of a flow-stats dump, so
//! `installed == dumped` is a meaningful comparison.

pub mod actions;
pub mod display;
pub mod fields;
pub mod group;
pub mod matches;
pub mod parse;
pub mod types;

pub use actions::{
    ports, Action, Ct, CtZone, Load, Move, Nat, NatKind, Note, SetField, USERDATA_MAX,
};
pub use display::{FlowText, Names};
pub use fields::{Field, Subfield};
pub use group::{Bucket, Group, GroupType};
pub use matches::{CtFlag, CtState, Match};
pub use parse::{parse_actions, parse_flow};
pub use types::{MacAddr, Masked};

/// What can be wrong with a flow, before it ever reaches a switch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlowError {
    /// Text that is not valid flow syntax.
    #[error("cannot parse flow: {0}")]
    Parse(String),
    /// A flow, match or action that the switch would refuse or could not encode.
    #[error("invalid flow: {0}")]
    Invalid(String),
}

/// Priority OpenFlow uses when none is given (not printed by `ovs-ofctl`).
pub const DEFAULT_PRIORITY: u16 = 0x8000;

/// One flow entry.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Flow {
    /// Table number (0..=254).
    pub table: u8,
    /// Priority; higher wins.
    pub priority: u16,
    /// Opaque 64-bit tag naming the flow's owner; deletes select by cookie and mask.
    pub cookie: u64,
    /// Seconds of inactivity before the switch removes the flow (0 = never).
    pub idle_timeout: u16,
    /// Seconds before the switch removes the flow (0 = never).
    pub hard_timeout: u16,
    /// What the flow matches.
    pub matches: Match,
    /// The apply-actions list; empty together with no `goto_table` means drop.
    pub actions: Vec<Action>,
    /// `goto_table:T`, which must be a later table.
    pub goto_table: Option<u8>,
}

impl Flow {
    /// A flow in `table` at `priority` that matches everything and drops.
    pub fn new(table: u8, priority: u16) -> Self {
        Flow {
            table,
            priority,
            cookie: 0,
            idle_timeout: 0,
            hard_timeout: 0,
            matches: Match::any(),
            actions: Vec::new(),
            goto_table: None,
        }
    }

    /// Sets the cookie.
    pub fn cookie(mut self, cookie: u64) -> Self {
        self.cookie = cookie;
        self
    }

    /// Sets the match.
    pub fn matching(mut self, m: Match) -> Self {
        self.matches = m;
        self
    }

    /// Appends an action.
    pub fn action(mut self, action: Action) -> Self {
        self.actions.push(action);
        self
    }

    /// Appends actions.
    pub fn actions(mut self, actions: impl IntoIterator<Item = Action>) -> Self {
        self.actions.extend(actions);
        self
    }

    /// Continues in a later table.
    pub fn goto(mut self, table: u8) -> Self {
        self.goto_table = Some(table);
        self
    }

    /// Sets idle and hard timeouts in seconds.
    pub fn timeouts(mut self, idle: u16, hard: u16) -> Self {
        self.idle_timeout = idle;
        self.hard_timeout = hard;
        self
    }

    /// Whether the flow drops everything it matches.
    pub fn is_drop(&self) -> bool {
        self.actions.is_empty() && self.goto_table.is_none()
    }

    /// Checks everything the switch would check without knowing its state: match
    /// prerequisites, `goto_table` pointing forward, a real table number, valid actions.
    pub fn validate(&self) -> Result<(), FlowError> {
        let ctx = |e: FlowError| match e {
            FlowError::Invalid(m) => FlowError::Invalid(format!("{m} (in flow {self})")),
            other => other,
        };
        if self.table == 255 {
            return Err(ctx(FlowError::Invalid(
                "table 255 is not a flow table".into(),
            )));
        }
        self.matches.validate().map_err(ctx)?;
        if let Some(t) = self.goto_table {
            if t <= self.table || t == 255 {
                return Err(ctx(FlowError::Invalid(format!(
                    "goto_table:{t} from table {} must go to a later table",
                    self.table
                ))));
            }
        }
        for (i, a) in self.actions.iter().enumerate() {
            a.validate().map_err(ctx)?;
            if i > 0 && matches!(a, Action::Meter(_)) {
                return Err(ctx(FlowError::Invalid(format!(
                    "{a:?} must be the first action (it is the OpenFlow meter instruction)"
                ))));
            }
        }
        Ok(())
    }
}
