//! The desired-flow store: every flow the agent wants on `br0`, keyed by the object that owns
//! it, and the only code that changes the bridge's flows.
//!
//! Owners ([`Owner`]) are the base pipeline, each pod port (a pod's or a warm pool port's), each
//! remote node, the table-111 multicast row, each VNID's table-80 row, each tenant's egress
//! firewall (table 100), egress IP row and group (table 101) and multicast rows (tables 110 and
//! 120); a new feature adds an owner kind, not a new way to talk to the switch. Every owner's
//! flows carry its cookie, so an owner is replaced or removed on the bridge by cookie; an owner's
//! OpenFlow groups go with it, by id.
//!
//! - **Changes are "bundle, then record"** ([`FlowStore::apply`]): a [`Change`] sets or removes
//!   any number of owners; the store turns it into one OpenFlow bundle (per owner: delete by
//!   cookie, then add its flows) and records the new state only when the switch accepted the
//!   bundle. A failed bundle changes neither the bridge nor the store, except a change that
//!   only removes owners: it is recorded anyway (what nobody wants any more must not come back
//!   with the reconcile after ovs-vswitchd restarted under a DEL or a failed ADD's undo).
//! - **VNID rows are reference counted**: a pod owner is set with its VNID, and the table-80 row
//!   of a VNID is added in the same bundle as its first pod and removed in the same bundle as
//!   its last (multitenant mode; none for VNID 0 and the unknown-tenant VNID).
//! - **Multicast rows follow the pods too**: the store knows each pod's port (from its table-26
//!   row) and the multicast-enabled VNIDs ([`FlowStore::set_multicast`]), and rewrites a VNID's
//!   table-110/120 rows in the same bundle as the pod change that alters its ports.
//! - **Reconciling is one diff** ([`FlowStore::reconcile`]): under the store's lock, the whole
//!   desired set is compared with a dump of the whole bridge and only the difference is applied,
//!   in one bundle (flows that are right keep their counters; groups are dumped too, and a wrong
//!   or missing one is replaced with the flows that use it). Nobody else holds a lock across
//!   it, so there is no lock hand-off between the parts of the agent.
//! - [`FlowStore::stage`] records without touching the switch: start-up stages everything it
//!   rebuilt (base, pods, remote nodes), then one reconcile applies the difference.
//! - **Some rows are computed, not held**: the VNID and multicast rows above, and each remote
//!   node's rows, built from its four fields ([`Change::set_remote`]) whenever a change, a
//!   reconcile or `sdnctl flows` needs them. Held as flows (over 500 bytes each before their
//!   actions), the 15,000 to 25,000 remote rows of a node in a 5,000-node cluster were a fifth
//!   of its agent's memory; the reconcile borrows the held rows and streams the bridge's dump,
//!   so the computed ones are the only rows it builds.
//!
//! [`diff`] keys flows by what OpenFlow keys them by (table, priority, match): a desired flow
//! missing or different on the bridge is (re-)added, a flow on the bridge that nobody desires is
//! deleted strictly.
//!
//! Concurrency: one async mutex; `apply` and `reconcile` hold it across their switch round trip,
//! so a reconcile never sees half an owner's change. Changes that arrive meanwhile are applied
//! together, in one bundle, by the next holder (group commit, [`FlowStore::apply`]). Callers that keep their own tables (the
//! pods) take their lock first and the store's second, never the other way round.

use std::collections::BTreeMap;
use std::sync::Arc;

use flows::{vnid_cookie, vnid_flow, Vnid};
use ovs::flow::{Flow, Group};
use ovs::openflow::flow_mod::GroupModCommand;
use ovs::openflow::{BundleMsg, DumpFilter, OfError};
use tokio::sync::Mutex;

use crate::bridge::seams::FlowSwitch;

mod owner;
pub(crate) use owner::Owner;
mod change;
pub(crate) use change::Change;
pub(crate) use change::{group_delete, Entry};
mod state;
use state::*;
mod diff;
pub(crate) use diff::diff;
use diff::StreamDiff;

/// What [`FlowStore::reconcile`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileStats {
    /// Flows on the bridge before.
    pub existing: usize,
    /// Flows desired.
    pub desired: usize,
    /// Flows added or replaced.
    pub added: usize,
    /// Flows deleted.
    pub deleted: usize,
    /// Groups added, replaced or deleted.
    pub groups: usize,
    /// The first few changes, as flow text (for the repair log).
    pub changes: Vec<String>,
    /// Messages left out because they cannot be encoded, each with why (the rest is applied).
    pub refused: Vec<String>,
}

/// The desired flows of `br0` (see the module docs).
#[derive(Debug)]
pub struct FlowStore<S> {
    switch: Arc<S>,
    /// Whether VNIDs get table-80 rows (multitenant mode).
    vnid_rows: bool,
    state: Mutex<State>,
    /// Changes waiting for the next bundle (see [`FlowStore::apply`]).
    pending: std::sync::Mutex<Vec<(Change, Pending)>>,
}

/// Where a waiting change's outcome goes.
type Pending = tokio::sync::oneshot::Sender<Result<(), OfError>>;

impl<S: FlowSwitch> FlowStore<S> {
    /// An empty store applying to `switch`; `vnid_rows` in multitenant mode.
    pub fn new(switch: Arc<S>, vnid_rows: bool) -> FlowStore<S> {
        FlowStore {
            switch,
            vnid_rows,
            state: Mutex::new(State::default()),
            pending: std::sync::Mutex::default(),
        }
    }

    /// The switch.
    pub fn switch(&self) -> &Arc<S> {
        &self.switch
    }

    /// Applies `change` in one bundle, then records it (see the module docs).
    ///
    /// Group commit: changes that arrive while a bundle is on its way to the switch wait for it,
    /// and the first of them to get the lock then applies all of them in one bundle (each still
    /// all or nothing: when the joint bundle fails, each change is tried alone, so a bad one
    /// fails only its caller). Under a stream of ADDs and DELs this is one ovs-vswitchd round
    /// trip per batch instead of one per pod.
    pub async fn apply(&self, change: Change) -> Result<(), OfError> {
        if change.is_empty() {
            return Ok(());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        crate::lock(&self.pending).push((change, tx));
        {
            let asked = std::time::Instant::now();
            let mut state = self.state.lock().await;
            let batch = std::mem::take(&mut *crate::lock(&self.pending));
            if !batch.is_empty() {
                let (changes, waited) = (batch.len(), asked.elapsed());
                self.apply_batch(&mut state, batch).await;
                tracing::debug!(
                    changes,
                    lock_wait_ms = waited.as_millis(),
                    ms = asked.elapsed().as_millis(),
                    "applied a flow batch"
                );
            }
        }
        // Ours was in this batch or in one applied before we got the lock.
        rx.await.unwrap_or_else(|_| {
            // The request that carried the batch was cancelled midway: the outcome is unknown
            // until the next reconcile settles the bridge.
            Err(OfError::Closed {
                peer: "br0".into(),
                op: "a batched flow change".into(),
                reason: "the request applying the batch was cancelled".into(),
            })
        })
    }

    async fn apply_batch(&self, state: &mut State, batch: Vec<(Change, Pending)>) {
        if batch.len() > 1 {
            let joint = batch
                .iter()
                .fold(Change::new(), |all, (c, _)| all.and(c.clone()));
            if self.apply_one(state, joint, false).await.is_ok() {
                for (_, tx) in batch {
                    let _ = tx.send(Ok(()));
                }
                return;
            }
        }
        for (change, tx) in batch {
            let _ = tx.send(self.apply_one(state, change, true).await);
        }
    }

    /// One bundle; `last_try`: a failed removal-only change is recorded anyway (not for the
    /// joint bundle of a batch, whose changes are tried again one by one).
    async fn apply_one(
        &self,
        state: &mut State,
        change: Change,
        last_try: bool,
    ) -> Result<(), OfError> {
        let change = change.tie_policy_targets(state);
        let mut msgs = change.messages_over(state);
        msgs.extend(self.vnid_row_changes(state.vnid_refs(), &change.refs_after(state)));
        msgs.extend(state.multicast_row_changes(&change.members_after(state)));
        if let Err(e) = self.switch.bundle(&msgs).await {
            // What nobody wants any more stays unwanted: a removal the switch did not take
            // (ovs-vswitchd restarting under a DEL or a failed ADD's undo) is recorded anyway,
            // so the reconcile after the reconnect deletes those rows instead of putting them
            // back for an owner that is gone.
            if last_try && change.only_removes() {
                change.commit(state);
            }
            return Err(e);
        }
        change.commit(state);
        Ok(())
    }

    /// Sets the multicast-enabled VNIDs: the VNIDs that became enabled get their rows (tables
    /// 110 and 120, for their local pods' ports) and the ones that stopped lose them, in one
    /// bundle. From then on every pod change keeps them in step, in the pod change's bundle.
    pub async fn set_multicast(
        &self,
        enabled: std::collections::BTreeSet<Vnid>,
    ) -> Result<(), OfError> {
        let mut state = self.state.lock().await;
        if state.multicast == enabled {
            return Ok(());
        }
        let mut msgs = Vec::new();
        for v in state.multicast.symmetric_difference(&enabled) {
            if !state.members.contains_key(v) {
                continue;
            }
            if enabled.contains(v) {
                let ports = state.members[v].keys().copied().collect();
                msgs.extend(
                    flows::multicast_tenant_flows(*v, &ports)
                        .into_iter()
                        .map(BundleMsg::add),
                );
            } else {
                msgs.push(BundleMsg::delete_by_cookie(
                    flows::multicast_cookie(*v),
                    u64::MAX,
                ));
            }
        }
        if !msgs.is_empty() {
            self.switch.bundle(&msgs).await?;
        }
        state.multicast = enabled;
        Ok(())
    }

    /// Records the multicast-enabled VNIDs without touching the switch (start-up).
    pub async fn stage_multicast(&self, enabled: std::collections::BTreeSet<Vnid>) {
        self.state.lock().await.multicast = enabled;
    }

    /// The multicast-enabled VNIDs.
    pub async fn multicast(&self) -> std::collections::BTreeSet<Vnid> {
        self.state.lock().await.multicast.clone()
    }

    /// Records `change` without touching the switch (start-up, before the first reconcile).
    pub async fn stage(&self, change: Change) {
        let mut state = self.state.lock().await;
        change.tie_policy_targets(&state).commit(&mut state);
    }

    /// Makes `br0` hold exactly the desired flows, in one bundle of the difference.
    pub async fn reconcile(&self) -> Result<ReconcileStats, OfError> {
        let state = self.state.lock().await;
        // The rows the store holds are diffed where they are; only the rows it computes
        // (remote nodes', VNIDs', multicast) are built here.
        let computed = self.computed_rows(&state);
        let desired = state
            .owners
            .values()
            .flat_map(|e| e.flows.iter())
            .chain(computed.iter());
        let want_groups: BTreeMap<u32, &Group> = state
            .owners
            .values()
            .flat_map(|e| e.groups.iter())
            .map(|g| (g.id, g))
            .collect();
        let have_groups = if want_groups.is_empty() {
            // Only an agent that uses groups reads them (a switch may refuse the dump).
            self.switch.dump_groups().await.unwrap_or_default()
        } else {
            self.switch.dump_groups().await?
        };
        // Groups first (a flow's group must exist when the flow is added): a wrong one is
        // deleted and added again, a stray one deleted. Deleting a group deletes the flows
        // that use it, so those count as missing for the flow diff below.
        let mut msgs = Vec::new();
        let mut gone = std::collections::BTreeSet::new();
        for g in &have_groups {
            if want_groups.get(&g.id).is_none_or(|w| *w != g) {
                msgs.push(group_delete(g.id));
                gone.insert(g.id);
            }
        }
        for (id, g) in &want_groups {
            if gone.contains(id) || !have_groups.iter().any(|h| h.id == *id) {
                msgs.push(BundleMsg::Group(GroupModCommand::Add, (*g).clone()));
            }
        }
        let groups = msgs.len();
        // The switch's flows, streamed against the desired ones (a flow using a group that
        // goes counts as missing).
        let mut stream = StreamDiff::new(desired.clone());
        self.switch
            .for_each_flow(&DumpFilter::all(), |f| {
                let uses_gone = f
                    .actions
                    .iter()
                    .any(|a| matches!(a, ovs::flow::Action::Group(id) if gone.contains(id)));
                if !uses_gone {
                    stream.see(&f);
                }
            })
            .await?;
        let existing = stream.existing();
        let desired_count = desired.clone().count();
        msgs.extend(stream.finish(desired));
        // A message OpenFlow cannot carry (a value out of range, a row longer than 64 KiB) is
        // left out and reported; the rest of the bridge is still brought in line, so one bad
        // row never keeps a node from starting or repairing.
        let mut refused = Vec::new();
        let mut groups = groups;
        let mut kept = Vec::with_capacity(msgs.len());
        for (i, m) in msgs.into_iter().enumerate() {
            match m.check() {
                Ok(()) => kept.push(m),
                Err(e) => {
                    let mut text = m.describe();
                    if text.len() > 300 {
                        let cut = (0..=300)
                            .rev()
                            .find(|i| text.is_char_boundary(*i))
                            .unwrap_or(0);
                        text = format!("{}... ({} characters)", &text[..cut], text.len());
                    }
                    let what = format!("{text}: {e}");
                    tracing::error!(message = %what, "a message for br0 cannot be encoded; left out of the reconcile, the rest is applied");
                    if i < groups {
                        groups -= 1;
                    }
                    refused.push(what);
                }
            }
        }
        let msgs = kept;
        let mut stats = ReconcileStats {
            existing,
            desired: desired_count,
            groups,
            refused,
            ..ReconcileStats::default()
        };
        for m in &msgs[groups..] {
            match m {
                BundleMsg::Flow(fm) if fm.command.is_delete() => stats.deleted += 1,
                _ => stats.added += 1,
            }
        }
        stats.changes = msgs.iter().take(5).map(BundleMsg::describe).collect();
        if !msgs.is_empty() {
            self.switch.bundle(&msgs).await?;
        }
        Ok(stats)
    }

    /// The desired flows of `owner` (`None`: the store does not know it).
    pub async fn flows_of(&self, owner: &Owner) -> Option<Vec<Flow>> {
        let state = self.state.lock().await;
        if let Owner::Vnid(v) = owner {
            return (self.vnid_rows && state.vnid_refs().contains_key(v))
                .then(|| vnid_flow(*v).into_iter().collect());
        }
        if let Owner::MulticastTenant(v) = owner {
            let rows = state.multicast_rows(*v, state.members.get(v));
            return (!rows.is_empty()).then_some(rows);
        }
        state.owners.get(owner).map(|e| e.rows().into_owned())
    }

    /// How many desired rows owners matching `which` hold (without copying them).
    pub async fn rows_owned(&self, which: impl Fn(&Owner) -> bool) -> usize {
        let state = self.state.lock().await;
        state
            .owners
            .iter()
            .filter(|(o, _)| which(o))
            .map(|(_, e)| e.row_count())
            .sum()
    }

    /// Every desired flow with its owner, VNID rows included (what `sdnctl flows` names and
    /// the metrics count).
    pub async fn desired(&self) -> Vec<(Owner, Flow)> {
        let state = self.state.lock().await;
        let mut out: Vec<(Owner, Flow)> = state
            .owners
            .iter()
            .flat_map(|(o, e)| {
                e.rows()
                    .into_owned()
                    .into_iter()
                    .map(move |f| (o.clone(), f))
            })
            .collect();
        if self.vnid_rows {
            out.extend(
                state
                    .vnid_refs()
                    .keys()
                    .filter_map(|v| vnid_flow(*v).map(|f| (Owner::Vnid(*v), f))),
            );
        }
        out.extend(
            state
                .all_multicast_rows()
                .into_iter()
                .map(|(v, f)| (Owner::MulticastTenant(v), f)),
        );
        out
    }

    /// Every owner the store knows, VNID rows included.
    pub async fn owners(&self) -> Vec<Owner> {
        let state = self.state.lock().await;
        let mut out: Vec<Owner> = state.owners.keys().cloned().collect();
        if self.vnid_rows {
            out.extend(
                state
                    .vnid_refs()
                    .keys()
                    .copied()
                    .filter(|v| vnid_flow(*v).is_some())
                    .map(Owner::Vnid),
            );
        }
        let mut mc: Vec<Owner> = state
            .all_multicast_rows()
            .into_iter()
            .map(|(v, _)| Owner::MulticastTenant(v))
            .collect();
        mc.dedup();
        out.extend(mc);
        out
    }

    /// The desired rows the store computes rather than holds: the remote nodes' rows, each
    /// VNID's table-80 row and the multicast rows.
    fn computed_rows(&self, state: &State) -> Vec<Flow> {
        let mut out: Vec<Flow> = state
            .owners
            .values()
            .filter_map(|e| e.remote.as_ref())
            .flat_map(flows::remote_node_flows)
            .collect();
        if self.vnid_rows {
            out.extend(state.vnid_refs().keys().copied().filter_map(vnid_flow));
        }
        out.extend(state.all_multicast_rows().into_iter().map(|(_, f)| f));
        out
    }

    /// The table-80 row changes of the VNIDs in `after` (the counts a change leaves, for the
    /// VNIDs it touches) against `before` (every count now): a row goes with a count that
    /// drops to 0 and comes with one that rises from 0.
    fn vnid_row_changes(
        &self,
        before: &BTreeMap<Vnid, usize>,
        after: &BTreeMap<Vnid, usize>,
    ) -> Vec<BundleMsg> {
        if !self.vnid_rows {
            return Vec::new();
        }
        let was = |v: Vnid| before.get(&v).copied().unwrap_or(0) > 0;
        let mut msgs: Vec<BundleMsg> = after
            .iter()
            .filter(|&(&v, &n)| n == 0 && was(v) && vnid_flow(v).is_some())
            .map(|(&v, _)| BundleMsg::delete_by_cookie(vnid_cookie(v), u64::MAX))
            .collect();
        msgs.extend(
            after
                .iter()
                .filter(|&(&v, &n)| n > 0 && !was(v))
                .filter_map(|(&v, _)| vnid_flow(v))
                .map(BundleMsg::add),
        );
        msgs
    }
}

#[cfg(test)]
mod tests;
