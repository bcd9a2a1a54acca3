//! The fake `br0` over OpenFlow (see [`super`]).

use std::collections::BTreeMap;
use std::sync::Mutex;

use ovs::flow::{Action, Flow, Group};
use ovs::openflow::flow_mod::{FlowModCommand, GroupModCommand};
use ovs::openflow::wire::SwitchError;
use ovs::openflow::{
    BundleMsg, BundleStage, CodecError, DumpFilter, Meter, MeterModCommand, OfError,
};

use super::{lock, Faults};
use crate::bridge::seams::FlowSwitch;

#[derive(Debug, Default)]
struct SwitchState {
    flows: Vec<Flow>,
    meters: BTreeMap<u32, Meter>,
    groups: BTreeMap<u32, Group>,
    bundles: usize,
    /// Messages in the last committed bundle.
    last_bundle: usize,
    generation: u64,
}

/// A fake `br0` over OpenFlow (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct FakeSwitch {
    state: Mutex<SwitchState>,
    /// Failure injection.
    pub faults: Faults,
}

fn switch_error(err_type: u16, code: u16) -> SwitchError {
    SwitchError {
        err_type,
        code,
        experimenter: None,
        data: Vec::new(),
    }
}

fn injected(op: &str) -> OfError {
    OfError::Closed {
        peer: "fake switch".into(),
        op: op.into(),
        reason: "injected failure".into(),
    }
}

fn same_key(a: &Flow, b: &Flow) -> bool {
    a.table == b.table && a.priority == b.priority && a.matches == b.matches
}

impl FakeSwitch {
    /// An empty switch.
    pub(crate) fn new() -> FakeSwitch {
        FakeSwitch::default()
    }

    /// Every flow, in table and priority order.
    pub(crate) fn flows(&self) -> Vec<Flow> {
        let mut v = lock(&self.state).flows.clone();
        v.sort_by(|a, b| {
            (a.table, b.priority, a.to_string()).cmp(&(b.table, a.priority, b.to_string()))
        });
        v
    }

    /// The flows with cookie `c`.
    pub(crate) fn flows_with_cookie(&self, c: u64) -> Vec<Flow> {
        self.flows().into_iter().filter(|f| f.cookie == c).collect()
    }

    /// Adds a flow behind the agent's back (drift).
    pub(crate) fn put_flow(&self, f: Flow) {
        let mut s = lock(&self.state);
        s.flows.retain(|o| !same_key(o, &f));
        s.flows.push(f);
    }

    /// Deletes flows behind the agent's back (drift).
    pub(crate) fn remove_flows_with_cookie(&self, c: u64) {
        lock(&self.state).flows.retain(|f| f.cookie != c);
    }

    /// The meters.
    pub(crate) fn meters(&self) -> BTreeMap<u32, Meter> {
        lock(&self.state).meters.clone()
    }

    /// The groups.
    pub(crate) fn groups(&self) -> BTreeMap<u32, Group> {
        lock(&self.state).groups.clone()
    }

    /// Deletes a group behind the agent's back (drift): the flows using it go too.
    pub(crate) fn remove_group(&self, id: u32) {
        let mut s = lock(&self.state);
        s.groups.remove(&id);
        s.flows.retain(|f| !f.actions.contains(&Action::Group(id)));
    }

    /// Bundles committed so far.
    pub(crate) fn bundles(&self) -> usize {
        lock(&self.state).bundles
    }

    /// How many messages the last committed bundle had.
    pub(crate) fn last_bundle_len(&self) -> usize {
        lock(&self.state).last_bundle
    }

    /// ovs-vswitchd restarted: every flow and meter is gone and the connection is new.
    pub(crate) fn restart(&self) {
        let mut s = lock(&self.state);
        s.flows.clear();
        s.meters.clear();
        s.groups.clear();
        s.generation += 1;
    }

    fn apply(s: &mut SwitchState, i: usize, total: usize, m: &BundleMsg) -> Result<(), OfError> {
        let failed = |err_type, code| OfError::BundleFailed {
            peer: "fake switch".into(),
            bundle_id: 0,
            index: i,
            total,
            xid: 0,
            what: m.describe(),
            stage: BundleStage::Commit,
            error: switch_error(err_type, code),
        };
        let fm = match m {
            BundleMsg::Flow(fm) => fm,
            BundleMsg::Group(cmd, g) => {
                match cmd {
                    // OFPGMFC_GROUP_EXISTS
                    GroupModCommand::Add if s.groups.contains_key(&g.id) => {
                        return Err(failed(6, 0))
                    }
                    // OFPGMFC_UNKNOWN_GROUP
                    GroupModCommand::Modify if !s.groups.contains_key(&g.id) => {
                        return Err(failed(6, 8))
                    }
                    GroupModCommand::Add | GroupModCommand::Modify => {
                        s.groups.insert(g.id, g.clone());
                    }
                    GroupModCommand::Delete => {
                        // Deleting a missing group is no error; the flows using it go with it.
                        s.groups.remove(&g.id);
                        s.flows
                            .retain(|f| !f.actions.contains(&Action::Group(g.id)));
                    }
                }
                return Ok(());
            }
        };
        let cookie_ok = |f: &Flow| f.cookie & fm.cookie_mask == fm.flow.cookie & fm.cookie_mask;
        match fm.command {
            FlowModCommand::Add => {
                fm.flow.validate().map_err(|e| OfError::Encode {
                    index: i,
                    what: m.describe(),
                    source: CodecError::Flow(e),
                })?;
                for a in &fm.flow.actions {
                    if let Action::Group(id) = a {
                        if !s.groups.contains_key(id) {
                            return Err(failed(2, 9)); // OFPBAC_BAD_OUT_GROUP
                        }
                    }
                    if let Action::Meter(id) = a {
                        if !s.meters.contains_key(id) {
                            return Err(failed(12, 3)); // OFPMMFC_UNKNOWN_METER
                        }
                    }
                }
                s.flows.retain(|o| !same_key(o, &fm.flow));
                s.flows.push(fm.flow.clone());
            }
            FlowModCommand::Delete if fm.flow.matches == ovs::flow::Match::any() => {
                let table = fm.flow.table;
                s.flows
                    .retain(|f| !((table == 255 || f.table == table) && cookie_ok(f)));
            }
            FlowModCommand::DeleteStrict => {
                s.flows.retain(|f| !(same_key(f, &fm.flow) && cookie_ok(f)));
            }
            _ => {
                return Err(OfError::Encode {
                    index: i,
                    what: m.describe(),
                    source: CodecError::Unsupported {
                        what: "fake switch flow_mod",
                        detail: "only add, delete by cookie and delete_strict are modelled".into(),
                    },
                })
            }
        }
        Ok(())
    }
}

impl FlowSwitch for FakeSwitch {
    async fn bundle(&self, msgs: &[BundleMsg]) -> Result<(), OfError> {
        // The round trip: other tasks run meanwhile, as they do while ovs-vswitchd works.
        tokio::task::yield_now().await;
        if self.faults.hit("bundle") {
            return Err(injected("bundle"));
        }
        let mut s = lock(&self.state);
        let mut next = SwitchState {
            flows: s.flows.clone(),
            meters: s.meters.clone(),
            groups: s.groups.clone(),
            ..SwitchState::default()
        };
        for (i, m) in msgs.iter().enumerate() {
            FakeSwitch::apply(&mut next, i, msgs.len(), m)?;
        }
        s.flows = next.flows;
        s.groups = next.groups;
        s.bundles += 1;
        s.last_bundle = msgs.len();
        Ok(())
    }

    async fn dump_flows(&self, filter: &DumpFilter) -> Result<Vec<Flow>, OfError> {
        if self.faults.hit("dump_flows") {
            return Err(injected("dump_flows"));
        }
        Ok(self
            .flows()
            .into_iter()
            .filter(|f| {
                filter.table.is_none_or(|t| t == f.table)
                    && f.cookie & filter.cookie_mask == filter.cookie & filter.cookie_mask
            })
            .collect())
    }

    async fn dump_groups(&self) -> Result<Vec<Group>, OfError> {
        if self.faults.hit("dump_groups") {
            return Err(injected("dump_groups"));
        }
        Ok(lock(&self.state).groups.values().cloned().collect())
    }

    async fn dump_meters(&self) -> Result<Vec<Meter>, OfError> {
        if self.faults.hit("dump_meters") {
            return Err(injected("dump_meters"));
        }
        Ok(lock(&self.state).meters.values().copied().collect())
    }

    async fn meter_mod(&self, command: MeterModCommand, meter: &Meter) -> Result<(), OfError> {
        if self.faults.hit("meter_mod") {
            return Err(injected("meter_mod"));
        }
        let mut s = lock(&self.state);
        let rejected = |code| OfError::Rejected {
            peer: "fake switch".into(),
            op: format!("meter_mod {command:?} {}", meter.id),
            xid: 0,
            error: switch_error(12, code),
        };
        match command {
            MeterModCommand::Add if s.meters.contains_key(&meter.id) => return Err(rejected(1)),
            MeterModCommand::Modify if !s.meters.contains_key(&meter.id) => {
                return Err(rejected(3))
            }
            MeterModCommand::Add | MeterModCommand::Modify => {
                s.meters.insert(meter.id, *meter);
            }
            MeterModCommand::Delete => {
                s.meters.remove(&meter.id);
                // OVS removes the flows that use a deleted meter.
                s.flows
                    .retain(|f| !f.actions.contains(&Action::Meter(meter.id)));
            }
        }
        Ok(())
    }

    fn generation(&self) -> u64 {
        lock(&self.state).generation
    }
}
