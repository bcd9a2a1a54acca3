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
//!   bundle. A failed bundle changes neither the bridge nor the store.
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
//!
//! [`diff`] keys flows by what OpenFlow keys them by (table, priority, match): a desired flow
//! missing or different on the bridge is (re-)added, a flow on the bridge that nobody desires is
//! deleted strictly.
//!
//! Concurrency: one async mutex; `apply` and `reconcile` hold it across their switch round trip,
//! so a reconcile never sees half an owner's change. Changes that arrive meanwhile are applied
//! together, in one bundle, by the next holder (group commit, [`FlowStore::apply`]). Callers that keep their own tables (the
//! pods) take their lock first and the store's second, never the other way round.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use flows::{cookie, vnid_cookie, vnid_flow, Vnid};
use ovs::flow::{Flow, Group, GroupType, Match};
use ovs::openflow::flow_mod::FlowMod;
use ovs::openflow::flow_mod::GroupModCommand;
use ovs::openflow::{BundleMsg, DumpFilter, OfError};
use tokio::sync::Mutex;

use crate::bridge::seams::FlowSwitch;

/// Who owns a set of flows.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Owner {
    /// The base pipeline (every table's fixed rows and the version marker).
    Base,
    /// The OVS port of a local pod, or of a warm pool port whose flows are installed before a
    /// pod takes it (see `pod::pool`), by port name: the flows follow the port, so a pod that
    /// takes a warm port keeps the flows (and the cookie) the port already has.
    Port(String),
    /// A remote node's rows (tables 10, 50, 90), by HostSubnet name and cookie.
    RemoteNode {
        /// The HostSubnet's name.
        name: String,
        /// Its cookie (from its uid).
        cookie: u64,
    },
    /// The table-111 row (multicast to every remote VTEP).
    Multicast,
    /// A VNID's table-80 row (maintained by the store from the pods' VNIDs).
    Vnid(Vnid),
    /// A VNID's egress firewall rows (table 100, from its EgressNetworkPolicy).
    EgressFirewall(Vnid),
    /// A multicast-enabled VNID's rows (tables 110 and 120, maintained by the store from the
    /// pods' VNIDs and ports and the enabled set, [`FlowStore::set_multicast`]).
    MulticastTenant(Vnid),
    /// A VNID's egress IP row (table 101) and its group.
    EgressIp(Vnid),
    /// Networkpolicy mode: the policy rows of the pod on this OVS port (its targets and
    /// isolation in tables 27 and 80). They live and die with the port's own flows: removing
    /// [`Owner::Port`] removes them in the same bundle, and they are never set for a port the
    /// store does not hold (a pod deleted meanwhile), so no row outlives its ofport.
    PolicyTarget(String),
    /// Networkpolicy mode: the shared policy rows (peers, ports, `conj_id` rows), changed row
    /// by row ([`Change::diff`]).
    Policy,
}

impl Owner {
    /// The cookie every flow of the owner carries.
    pub fn cookie(&self) -> u64 {
        match self {
            Owner::Base => cookie::BASE,
            Owner::Port(p) => flows::pod::port_cookie(p),
            Owner::RemoteNode { cookie, .. } => *cookie,
            Owner::Multicast => flows::MULTICAST_COOKIE,
            Owner::Vnid(v) => vnid_cookie(*v),
            Owner::EgressFirewall(v) => flows::egress_cookie(*v),
            Owner::MulticastTenant(v) => flows::multicast_cookie(*v),
            Owner::EgressIp(v) => flows::egress_ip_cookie(*v),
            Owner::PolicyTarget(p) => flows::policy_target_cookie(p),
            Owner::Policy => flows::POLICY_COOKIE,
        }
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Base => f.write_str("base pipeline"),
            Owner::Port(p) => write!(f, "pod port {p}"),
            Owner::RemoteNode { name, .. } => write!(f, "remote node {name}"),
            Owner::Multicast => f.write_str("multicast to remote nodes"),
            Owner::Vnid(v) => write!(f, "VNID {v}"),
            Owner::EgressFirewall(v) => write!(f, "egress firewall of VNID {v}"),
            Owner::MulticastTenant(v) => write!(f, "multicast of VNID {v}"),
            Owner::EgressIp(v) => write!(f, "egress IPs of VNID {v}"),
            Owner::PolicyTarget(p) => write!(f, "network policies of pod port {p}"),
            Owner::Policy => f.write_str("network policy peers and ports"),
        }
    }
}

/// One owner's desired flows.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    flows: Vec<Flow>,
    /// The VNID whose table-80 row this owner needs (pods).
    vnid: Option<Vnid>,
    /// The pod's OVS port (from its table-26 row), for its VNID's multicast rows.
    ofport: Option<u32>,
    /// The OpenFlow groups the owner's flows use (egress IPs), by id.
    groups: Vec<Group>,
}

impl Entry {
    fn plain(flows: Vec<Flow>) -> Entry {
        Entry {
            flows,
            vnid: None,
            ofport: None,
            groups: Vec::new(),
        }
    }

    fn pod(flows: Vec<Flow>, vnid: Vnid) -> Entry {
        Entry {
            ofport: flows::ofport_of(&flows),
            flows,
            vnid: Some(vnid),
            groups: Vec::new(),
        }
    }

    /// The multicast membership this entry gives: its VNID and port.
    fn member(&self) -> Option<(Vnid, u32)> {
        self.vnid.zip(self.ofport)
    }
}

/// What a change does to one owner.
#[derive(Clone, Debug)]
enum Op {
    /// Delete the owner's flows by cookie, then add these (none: remove the owner).
    Replace(Option<Entry>),
    /// Add these flows over the owner's (same table, priority and match replace), no delete:
    /// for owners whose rows are keyed by a match that never changes (the table-111 row).
    Put(Entry),
    /// Make the owner's flows these by sending only the difference: strict deletes of rows it
    /// no longer has, adds of new or changed ones (owners with many rows that change a few at
    /// a time: the shared policy rows).
    Diff(Entry),
}

/// A set of owner changes applied as one bundle.
#[derive(Clone, Debug, Default)]
pub struct Change {
    ops: Vec<(Owner, Op)>,
}

impl Change {
    /// An empty change.
    pub fn new() -> Change {
        Change::default()
    }

    /// Sets `owner`'s flows (replacing whatever it had: its cookie's flows are deleted first).
    pub fn set(mut self, owner: Owner, flows: Vec<Flow>) -> Change {
        self.ops
            .push((owner, Op::Replace(Some(Entry::plain(flows)))));
        self
    }

    /// Sets `owner`'s flows and the groups they use: in the bundle its flows are deleted by
    /// cookie, each group it had or gets is deleted by id and the new ones added, then its flows
    /// (a group must exist before a flow that uses it, and deleting a group deletes its flows).
    pub fn set_with_groups(mut self, owner: Owner, flows: Vec<Flow>, groups: Vec<Group>) -> Change {
        let mut e = Entry::plain(flows);
        e.groups = groups;
        self.ops.push((owner, Op::Replace(Some(e))));
        self
    }

    /// Sets `owner`'s flows by adding them over its current ones, without deleting by cookie
    /// first: for an owner whose rows always have the same matches (the table-111 row), so each
    /// add replaces its old row in place.
    pub fn put(mut self, owner: Owner, flows: Vec<Flow>) -> Change {
        self.ops.push((owner, Op::Put(Entry::plain(flows))));
        self
    }

    /// Makes `owner`'s flows `flows`, sending only the rows that differ from what it holds.
    pub fn diff(mut self, owner: Owner, flows: Vec<Flow>) -> Change {
        self.ops.push((owner, Op::Diff(Entry::plain(flows))));
        self
    }

    /// Sets a pod port's flows and the VNID whose table-80 row it needs.
    pub fn set_pod(mut self, port: String, flows: Vec<Flow>, vnid: Vnid) -> Change {
        self.ops.push((
            Owner::Port(port),
            Op::Replace(Some(Entry::pod(flows, vnid))),
        ));
        self
    }

    /// Sets a pod port's flows by adding them over its current ones (no delete by cookie), with
    /// the VNID whose table-80 row it needs: for a VNID change, which changes only the actions
    /// of the pod's table-26 and table-75 rows (no pod flow matches on the VNID). Only the flows
    /// that differ from the ones the store holds for the port are sent, so the bundle carries two
    /// rows per pod (ovs-vswitchd takes 50 messages per main-loop iteration).
    pub fn put_pod(mut self, port: String, flows: Vec<Flow>, vnid: Vnid) -> Change {
        self.ops
            .push((Owner::Port(port), Op::Put(Entry::pod(flows, vnid))));
        self
    }

    /// Removes `owner`'s flows. The bridge's flows with its cookie are deleted even when the
    /// store does not know the owner (a DEL after a restart, a crashed ADD).
    pub fn remove(mut self, owner: Owner) -> Change {
        self.ops.push((owner, Op::Replace(None)));
        self
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The owners' messages in order (without the VNID rows the store derives): per owner a
    /// delete by its cookie and its adds; for [`Change::put`] and [`Change::put_pod`] only the
    /// adds of flows that differ from the owner's flows in `state` (or in an earlier op of this
    /// change): a flow the store holds is on the bridge, or drift repair puts it back.
    fn messages_over(&self, state: &State) -> Vec<BundleMsg> {
        let mut msgs = Vec::new();
        // What each touched owner holds as the change goes on.
        let mut holds: BTreeMap<&Owner, Option<&Entry>> = BTreeMap::new();
        for (owner, op) in &self.ops {
            let held = *holds
                .entry(owner)
                .or_insert_with(|| state.owners.get(owner));
            match op {
                Op::Replace(e) => {
                    msgs.push(BundleMsg::delete_by_cookie(owner.cookie(), u64::MAX));
                    let ids: std::collections::BTreeSet<u32> = held
                        .iter()
                        .flat_map(|h| h.groups.iter())
                        .chain(e.iter().flat_map(|e| e.groups.iter()))
                        .map(|g| g.id)
                        .collect();
                    msgs.extend(ids.into_iter().map(group_delete));
                    if let Some(e) = e {
                        msgs.extend(
                            e.groups
                                .iter()
                                .map(|g| BundleMsg::Group(GroupModCommand::Add, g.clone())),
                        );
                        msgs.extend(e.flows.iter().cloned().map(BundleMsg::add));
                    }
                    holds.insert(owner, e.as_ref());
                }
                Op::Put(e) => {
                    let old = held.map(|h| h.flows.as_slice()).unwrap_or_default();
                    msgs.extend(
                        e.flows
                            .iter()
                            .filter(|f| !old.contains(f))
                            .cloned()
                            .map(BundleMsg::add),
                    );
                    holds.insert(owner, Some(e));
                }
                Op::Diff(e) => {
                    let old = held.map(|h| h.flows.as_slice()).unwrap_or_default();
                    msgs.extend(diff(&e.flows, old));
                    holds.insert(owner, Some(e));
                }
            }
        }
        msgs
    }

    /// This change with the pod ports' policy rows tied to the ports (see
    /// [`Owner::PolicyTarget`]): removing a port's flows removes its policy rows too, and
    /// policy rows for a port that is neither held nor set earlier in the change are dropped.
    fn tie_policy_targets(self, state: &State) -> Change {
        let mut held: BTreeMap<String, bool> = BTreeMap::new();
        let mut ops = Vec::with_capacity(self.ops.len());
        for (owner, op) in self.ops {
            match (&owner, &op) {
                (Owner::Port(p), Op::Replace(None)) => {
                    let target = Owner::PolicyTarget(p.clone());
                    let has_rows =
                        state.owners.contains_key(&target) || ops.iter().any(|(o, _)| *o == target);
                    held.insert(p.clone(), false);
                    ops.push((owner, op));
                    if has_rows {
                        ops.push((target, Op::Replace(None)));
                    }
                }
                (Owner::Port(p), _) => {
                    held.insert(p.clone(), true);
                    ops.push((owner, op));
                }
                (Owner::PolicyTarget(_), Op::Replace(None)) => ops.push((owner, op)),
                (Owner::PolicyTarget(p), _) => {
                    let live = held
                        .get(p)
                        .copied()
                        .unwrap_or_else(|| state.owners.contains_key(&Owner::Port(p.clone())));
                    if live {
                        ops.push((owner, op));
                    } else {
                        tracing::debug!(port = %p, "policy rows of a port without flows dropped");
                    }
                }
                _ => ops.push((owner, op)),
            }
        }
        Change { ops }
    }

    /// The owners' messages in order over an empty store (every add of a put is sent).
    pub fn messages(&self) -> Vec<BundleMsg> {
        self.messages_over(&State::default())
    }

    /// The change after `other`'s.
    pub fn and(mut self, other: Change) -> Change {
        self.ops.extend(other.ops);
        self
    }

    /// The VNID reference counts after this change, for the VNIDs it touches only (cost in
    /// the size of the change, not of the store).
    fn refs_after(&self, state: &State) -> BTreeMap<Vnid, usize> {
        let mut after: BTreeMap<Vnid, usize> = BTreeMap::new();
        // The VNID each touched owner holds as the change goes on (later ops see earlier ones).
        let mut holds: BTreeMap<&Owner, Option<Vnid>> = BTreeMap::new();
        for (owner, op) in &self.ops {
            let old = *holds
                .entry(owner)
                .or_insert_with(|| state.owners.get(owner).and_then(|e| e.vnid));
            let new = match op {
                Op::Replace(Some(e)) | Op::Put(e) | Op::Diff(e) => e.vnid,
                Op::Replace(None) => None,
            };
            for (v, delta) in [(old, -1i64), (new, 1i64)] {
                if let Some(v) = v {
                    let n = after
                        .entry(v)
                        .or_insert_with(|| state.refs.get(&v).copied().unwrap_or(0));
                    *n = n.saturating_add_signed(delta as isize);
                }
            }
            holds.insert(owner, new);
        }
        after
    }

    /// The pod ports of each VNID this change touches, after it (with how many owners hold
    /// each port: a port can pass from one owner to another within a change).
    fn members_after(&self, state: &State) -> BTreeMap<Vnid, BTreeMap<u32, usize>> {
        let mut after: BTreeMap<Vnid, BTreeMap<u32, usize>> = BTreeMap::new();
        let mut holds: BTreeMap<&Owner, Option<(Vnid, u32)>> = BTreeMap::new();
        for (owner, op) in &self.ops {
            let old = *holds
                .entry(owner)
                .or_insert_with(|| state.owners.get(owner).and_then(Entry::member));
            let new = match op {
                Op::Replace(Some(e)) | Op::Put(e) | Op::Diff(e) => e.member(),
                Op::Replace(None) => None,
            };
            for (m, add) in [(old, false), (new, true)] {
                if let Some((v, port)) = m {
                    let ports = after
                        .entry(v)
                        .or_insert_with(|| state.members.get(&v).cloned().unwrap_or_default());
                    count(ports, port, add);
                }
            }
            holds.insert(owner, new);
        }
        after
    }

    fn commit(self, state: &mut State) {
        for (owner, op) in self.ops {
            let entry = match op {
                Op::Replace(Some(e)) | Op::Put(e) | Op::Diff(e) => Some(e),
                Op::Replace(None) => None,
            };
            let new = entry.as_ref().and_then(|e| e.vnid);
            let new_member = entry.as_ref().and_then(Entry::member);
            let old = match entry {
                Some(e) => state.owners.insert(owner, e),
                None => state.owners.remove(&owner),
            };
            for (m, add) in [
                (old.as_ref().and_then(Entry::member), false),
                (new_member, true),
            ] {
                if let Some((v, port)) = m {
                    let ports = state.members.entry(v).or_default();
                    count(ports, port, add);
                    if ports.is_empty() {
                        state.members.remove(&v);
                    }
                }
            }
            let old = old.and_then(|e| e.vnid);
            if let Some(v) = old {
                if let Some(n) = state.refs.get_mut(&v) {
                    *n -= 1;
                    if *n == 0 {
                        state.refs.remove(&v);
                    }
                }
            }
            if let Some(v) = new {
                *state.refs.entry(v).or_default() += 1;
            }
        }
    }
}

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
}

/// The bundle message deleting group `id` (and, as OpenFlow does, every flow that uses it).
fn group_delete(id: u32) -> BundleMsg {
    BundleMsg::Group(
        GroupModCommand::Delete,
        Group {
            id,
            kind: GroupType::Select,
            buckets: Vec::new(),
        },
    )
}

/// Counts one more (`add`) or one fewer holder of `port`; a port without holders is removed.
fn count(ports: &mut BTreeMap<u32, usize>, port: u32, add: bool) {
    if add {
        *ports.entry(port).or_default() += 1;
    } else if let Some(n) = ports.get_mut(&port) {
        *n -= 1;
        if *n == 0 {
            ports.remove(&port);
        }
    }
}

#[derive(Debug, Default)]
struct State {
    owners: BTreeMap<Owner, Entry>,
    /// Owners (pods) per VNID, kept with every commit.
    refs: BTreeMap<Vnid, usize>,
    /// Pod ports per VNID (with their holder counts), kept with every commit.
    members: BTreeMap<Vnid, BTreeMap<u32, usize>>,
    /// The multicast-enabled VNIDs.
    multicast: std::collections::BTreeSet<Vnid>,
}

impl State {
    /// Pods per VNID.
    fn vnid_refs(&self) -> &BTreeMap<Vnid, usize> {
        &self.refs
    }

    /// The multicast rows of VNID `v` with the ports `ports` (none unless it is enabled).
    fn multicast_rows(&self, v: Vnid, ports: Option<&BTreeMap<u32, usize>>) -> Vec<Flow> {
        if !self.multicast.contains(&v) {
            return Vec::new();
        }
        let ports = ports
            .map(|p| p.keys().copied().collect())
            .unwrap_or_default();
        flows::multicast_tenant_flows(v, &ports)
    }

    /// Every multicast row, by VNID.
    fn all_multicast_rows(&self) -> Vec<(Vnid, Flow)> {
        self.multicast
            .iter()
            .flat_map(|v| {
                self.multicast_rows(*v, self.members.get(v))
                    .into_iter()
                    .map(move |f| (*v, f))
            })
            .collect()
    }

    /// The bundle messages that take the multicast rows of the VNIDs in `after` (their ports
    /// after a change) from what they are to what they become.
    fn multicast_row_changes(
        &self,
        after: &BTreeMap<Vnid, BTreeMap<u32, usize>>,
    ) -> Vec<BundleMsg> {
        let mut msgs = Vec::new();
        for (v, ports) in after {
            let (old, new) = (
                self.multicast_rows(*v, self.members.get(v)),
                self.multicast_rows(*v, Some(ports)),
            );
            if old != new {
                msgs.push(BundleMsg::delete_by_cookie(
                    flows::multicast_cookie(*v),
                    u64::MAX,
                ));
                msgs.extend(new.into_iter().map(BundleMsg::add));
            }
        }
        msgs
    }
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
            if self.apply_one(state, joint).await.is_ok() {
                for (_, tx) in batch {
                    let _ = tx.send(Ok(()));
                }
                return;
            }
        }
        for (change, tx) in batch {
            let _ = tx.send(self.apply_one(state, change).await);
        }
    }

    async fn apply_one(&self, state: &mut State, change: Change) -> Result<(), OfError> {
        let change = change.tie_policy_targets(state);
        let mut msgs = change.messages_over(state);
        msgs.extend(self.vnid_row_changes(state.vnid_refs(), &change.refs_after(state)));
        msgs.extend(state.multicast_row_changes(&change.members_after(state)));
        self.switch.bundle(&msgs).await?;
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
        let desired = self.desired_of(&state);
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
        let mut existing = self.switch.dump_flows(&DumpFilter::all()).await?;
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
        existing.retain(|f| {
            !f.actions
                .iter()
                .any(|a| matches!(a, ovs::flow::Action::Group(id) if gone.contains(id)))
        });
        msgs.extend(diff(&desired, &existing));
        let mut stats = ReconcileStats {
            existing: existing.len(),
            desired: desired.len(),
            groups,
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
        state.owners.get(owner).map(|e| e.flows.clone())
    }

    /// Every desired flow with its owner, VNID rows included (what `sdnctl flows` names and
    /// the metrics count).
    pub async fn desired(&self) -> Vec<(Owner, Flow)> {
        let state = self.state.lock().await;
        let mut out: Vec<(Owner, Flow)> = state
            .owners
            .iter()
            .flat_map(|(o, e)| e.flows.iter().map(move |f| (o.clone(), f.clone())))
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

    fn desired_of(&self, state: &State) -> Vec<Flow> {
        let mut out: Vec<Flow> = state
            .owners
            .values()
            .flat_map(|e| e.flows.iter().cloned())
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

type Key = (u8, u16, Match);

fn key(f: &Flow) -> Key {
    (f.table, f.priority, f.matches.clone())
}

/// The bundle messages that turn `existing` into `desired`: strict deletes first, then adds.
/// An empty result means the bridge already has exactly the desired flows.
pub fn diff(desired: &[Flow], existing: &[Flow]) -> Vec<BundleMsg> {
    let want: HashMap<Key, &Flow> = desired.iter().map(|f| (key(f), f)).collect();
    let have: HashMap<Key, &Flow> = existing.iter().map(|f| (key(f), f)).collect();
    let mut msgs = Vec::new();
    for f in existing {
        if !want.contains_key(&key(f)) {
            msgs.push(BundleMsg::Flow(FlowMod::delete_strict(f)));
        }
    }
    for f in desired {
        match have.get(&key(f)) {
            Some(old) if same(old, f) => {}
            _ => msgs.push(BundleMsg::add(f.clone())),
        }
    }
    msgs
}

/// Equal as far as the switch is concerned (a dumped flow against a built one).
fn same(a: &Flow, b: &Flow) -> bool {
    a.cookie == b.cookie
        && a.actions == b.actions
        && a.goto_table == b.goto_table
        && a.idle_timeout == b.idle_timeout
        && a.hard_timeout == b.hard_timeout
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridge::fake::FakeSwitch;
    use ovs::flow::Action;

    fn f(table: u8, prio: u16, port: u32, out: u32) -> Flow {
        Flow::new(table, prio)
            .matching(Match::any().in_port(port))
            .action(Action::Output(out))
    }

    #[test]
    fn diff_touches_only_what_differs() {
        let existing = vec![f(0, 10, 1, 2), f(0, 10, 2, 1), f(0, 5, 3, 3)];
        let desired = vec![f(0, 10, 1, 2), f(0, 10, 2, 4), f(0, 7, 9, 9)];
        let msgs = diff(&desired, &existing);
        let text: Vec<String> = msgs.iter().map(BundleMsg::describe).collect();
        assert_eq!(msgs.len(), 3, "{text:?}");
        assert!(matches!(&msgs[0], BundleMsg::Flow(fm) if fm.command.is_delete()));
        assert!(text[0].contains("in_port=3"), "{text:?}");
        assert!(text[1].contains("in_port=2") && text[1].contains("output:4"));
        assert!(text[2].contains("in_port=9"));
        assert!(diff(&desired, &desired).is_empty());
    }

    #[test]
    fn cookie_change_is_a_difference() {
        let a = f(0, 10, 1, 2);
        let b = a.clone().cookie(7);
        assert_eq!(diff(&[b], &[a]).len(), 1);
    }

    fn pod(n: u32) -> (String, Vec<Flow>) {
        let a = format!("veth{n:08x}");
        let c = flows::pod::port_cookie(&a);
        let flow = Flow::new(70, 100)
            .cookie(c)
            .matching(
                Match::any()
                    .ip()
                    .nw_dst(std::net::Ipv4Addr::new(10, 128, 0, n as u8)),
            )
            .action(Action::Output(n + 2));
        (a, vec![flow])
    }

    fn vnid(v: u32) -> Vnid {
        Vnid::new(v).unwrap()
    }

    #[tokio::test]
    async fn vnid_rows_follow_their_first_and_last_pod_in_the_same_bundle() {
        let sw = Arc::new(FakeSwitch::new());
        let store = FlowStore::new(sw.clone(), true);
        let (a, fa) = pod(2);
        let (b, fb) = pod(3);
        store
            .apply(Change::new().set_pod(a.clone(), fa, vnid(11)))
            .await
            .unwrap();
        assert_eq!(sw.bundles(), 1);
        assert_eq!(sw.flows_with_cookie(vnid_cookie(vnid(11))).len(), 1);
        store
            .apply(Change::new().set_pod(b.clone(), fb, vnid(11)))
            .await
            .unwrap();
        store
            .apply(Change::new().remove(Owner::Port(a)))
            .await
            .unwrap();
        assert_eq!(
            sw.flows_with_cookie(vnid_cookie(vnid(11))).len(),
            1,
            "b still uses VNID 11"
        );
        store
            .apply(Change::new().remove(Owner::Port(b)))
            .await
            .unwrap();
        assert!(sw.flows().is_empty(), "{:?}", sw.flows());
        assert_eq!(sw.bundles(), 4, "one bundle per change");
        // Global and unknown-tenant pods have no row.
        let (c, fc) = pod(4);
        store
            .apply(Change::new().set_pod(c.clone(), fc, Vnid::GLOBAL))
            .await
            .unwrap();
        assert_eq!(sw.flows().len(), 1);
        assert_eq!(store.owners().await, vec![Owner::Port(c)]);
    }

    fn policy_row(port: &str, n: u32) -> Flow {
        Flow::new(80, 100)
            .cookie(flows::policy_target_cookie(port))
            .matching(Match::any().ip().reg(2, n))
    }

    fn shared_row(n: u8) -> Flow {
        Flow::new(80, 150)
            .cookie(flows::POLICY_COOKIE)
            .matching(
                Match::any()
                    .ip()
                    .nw_src(std::net::Ipv4Addr::new(10, 129, 0, n)),
            )
            .action(Action::conjunction(7, 2, 2).unwrap())
    }

    #[tokio::test]
    async fn policy_rows_live_and_die_with_their_port_and_shared_rows_change_row_by_row() {
        let sw = Arc::new(FakeSwitch::new());
        let store = FlowStore::new(sw.clone(), false);
        let (a, fa) = pod(2);
        // A pod and its policy rows in one bundle.
        store
            .apply(
                Change::new()
                    .set_pod(a.clone(), fa, vnid(11))
                    .set(Owner::PolicyTarget(a.clone()), vec![policy_row(&a, 4)]),
            )
            .await
            .unwrap();
        assert_eq!(sw.bundles(), 1);
        assert_eq!(
            sw.flows_with_cookie(flows::policy_target_cookie(&a)).len(),
            1
        );
        // Rows for a port the store does not hold (a pod deleted meanwhile) are dropped.
        let (b, _) = pod(3);
        store
            .apply(Change::new().set(Owner::PolicyTarget(b.clone()), vec![policy_row(&b, 5)]))
            .await
            .unwrap();
        assert!(sw
            .flows_with_cookie(flows::policy_target_cookie(&b))
            .is_empty());
        assert_eq!(store.flows_of(&Owner::PolicyTarget(b)).await, None);
        // Shared rows: only the difference is sent.
        store
            .apply(Change::new().diff(Owner::Policy, vec![shared_row(1), shared_row(2)]))
            .await
            .unwrap();
        assert_eq!(sw.last_bundle_len(), 2);
        store
            .apply(Change::new().diff(Owner::Policy, vec![shared_row(2), shared_row(3)]))
            .await
            .unwrap();
        assert_eq!(sw.last_bundle_len(), 2, "one strict delete, one add");
        let mut on: Vec<String> = sw
            .flows_with_cookie(flows::POLICY_COOKIE)
            .iter()
            .map(|f| f.to_string())
            .collect();
        on.sort();
        assert_eq!(on.len(), 2);
        assert!(
            on[0].contains("10.129.0.2") && on[1].contains("10.129.0.3"),
            "{on:?}"
        );
        // Removing the port removes its policy rows in the same bundle.
        let before = sw.bundles();
        store
            .apply(Change::new().remove(Owner::Port(a.clone())))
            .await
            .unwrap();
        assert_eq!(sw.bundles(), before + 1);
        assert!(sw
            .flows_with_cookie(flows::policy_target_cookie(&a))
            .is_empty());
        assert_eq!(store.flows_of(&Owner::PolicyTarget(a)).await, None);
        assert_eq!(store.owners().await, vec![Owner::Policy]);
    }

    #[tokio::test]
    async fn reference_counts_follow_multi_owner_changes_without_recounting() {
        let sw = Arc::new(FakeSwitch::new());
        let store = FlowStore::new(sw.clone(), true);
        let pods: Vec<_> = (2..8).map(pod).collect();
        // Three pods in 11, three in 12, in one bundle.
        let mut c = Change::new();
        for (i, (a, f)) in pods.iter().enumerate() {
            c = c.set_pod(a.clone(), f.clone(), vnid(11 + (i % 2) as u32));
        }
        store.apply(c).await.unwrap();
        assert_eq!(sw.bundles(), 1);
        // One change moving every pod of 11 to 13, and one of them twice (to 12, then 13).
        let mut c = Change::new().set_pod(pods[0].0.clone(), pods[0].1.clone(), vnid(12));
        for (a, f) in pods.iter().step_by(2) {
            c = c.set_pod(a.clone(), f.clone(), vnid(13));
        }
        store.apply(c).await.unwrap();
        let rows = |v| sw.flows_with_cookie(vnid_cookie(vnid(v))).len();
        assert_eq!((rows(11), rows(12), rows(13)), (0, 1, 1));
        let state = store.state.lock().await;
        let mut recount: BTreeMap<Vnid, usize> = BTreeMap::new();
        for e in state.owners.values() {
            if let Some(v) = e.vnid {
                *recount.entry(v).or_default() += 1;
            }
        }
        assert_eq!(state.refs, recount);
        assert_eq!(recount, BTreeMap::from([(vnid(12), 3), (vnid(13), 3)]));
    }

    #[tokio::test]
    async fn concurrent_changes_share_bundles_and_a_bad_one_fails_alone() {
        let sw = Arc::new(FakeSwitch::new());
        let store = FlowStore::new(sw.clone(), true);
        let pods: Vec<_> = (2..12).map(pod).collect();
        // nw_dst without ip: the switch refuses it.
        let bad = Flow::new(70, 100)
            .cookie(flows::pod::port_cookie("vethbad"))
            .matching(Match::any().nw_dst(std::net::Ipv4Addr::new(10, 128, 0, 99)))
            .action(Action::Output(3));
        let mut changes: Vec<Change> = pods
            .iter()
            .map(|(a, f)| Change::new().set_pod(a.clone(), f.clone(), vnid(11)))
            .collect();
        changes.insert(
            5,
            Change::new().set_pod("vethbad".into(), vec![bad], vnid(12)),
        );
        let results = futures::future::join_all(changes.into_iter().map(|c| store.apply(c))).await;
        let failed: Vec<usize> = (0..results.len())
            .filter(|i| results[*i].is_err())
            .collect();
        assert_eq!(failed, vec![5], "{results:?}");
        for (a, f) in &pods {
            assert_eq!(sw.flows_with_cookie(flows::pod::port_cookie(a)), *f);
            assert_eq!(
                store.flows_of(&Owner::Port(a.clone())).await.as_ref(),
                Some(f)
            );
        }
        assert!(store
            .flows_of(&Owner::Port("vethbad".into()))
            .await
            .is_none());
        assert!(store.flows_of(&Owner::Vnid(vnid(12))).await.is_none());
        assert_eq!(sw.flows_with_cookie(vnid_cookie(vnid(11))).len(), 1);
        // Without a bad change: the first goes alone, the nine that waited for it go together.
        let sw2 = Arc::new(FakeSwitch::new());
        let store2 = FlowStore::new(sw2.clone(), true);
        let results = futures::future::join_all(
            pods.iter()
                .map(|(a, f)| store2.apply(Change::new().set_pod(a.clone(), f.clone(), vnid(11)))),
        )
        .await;
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(
            sw2.bundles(),
            2,
            "one bundle, then one for the nine that waited"
        );
        assert_eq!(sw2.flows().len(), pods.len() + 1);
    }

    #[tokio::test]
    async fn a_refused_bundle_changes_neither_the_bridge_nor_the_store() {
        let sw = Arc::new(FakeSwitch::new());
        let store = FlowStore::new(sw.clone(), true);
        let (a, fa) = pod(2);
        store
            .apply(Change::new().set_pod(a.clone(), fa.clone(), vnid(11)))
            .await
            .unwrap();
        let before = sw.flows();
        // nw_dst without ip: the switch refuses it, the whole bundle goes.
        let bad = Flow::new(70, 100)
            .cookie(flows::pod::port_cookie(&a))
            .matching(Match::any().nw_dst(std::net::Ipv4Addr::new(10, 128, 0, 9)))
            .action(Action::Output(3));
        let e = store
            .apply(Change::new().set_pod(a.clone(), vec![bad], vnid(12)))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("nw_dst"), "{e}");
        assert_eq!(sw.flows(), before);
        assert_eq!(store.flows_of(&Owner::Port(a)).await, Some(fa));
        assert!(store.flows_of(&Owner::Vnid(vnid(12))).await.is_none());
    }

    #[tokio::test]
    async fn reconcile_repairs_drift_in_one_bundle_and_keeps_right_flows() {
        let sw = Arc::new(FakeSwitch::new());
        let store = FlowStore::new(sw.clone(), true);
        let base = vec![f(0, 0, 1, 2).cookie(cookie::BASE)];
        let (a, fa) = pod(2);
        store
            .stage(
                Change::new()
                    .set(Owner::Base, base)
                    .set_pod(a, fa, vnid(11)),
            )
            .await;
        assert!(sw.flows().is_empty(), "stage touches nothing");
        let s = store.reconcile().await.unwrap();
        assert_eq!((s.existing, s.desired, s.added, s.deleted), (0, 3, 3, 0));
        // Drift: a stray flow, a lost one.
        sw.put_flow(f(5, 1, 9, 9));
        sw.remove_flows_with_cookie(vnid_cookie(vnid(11)));
        let bundles = sw.bundles();
        let s = store.reconcile().await.unwrap();
        assert_eq!((s.added, s.deleted), (1, 1));
        assert_eq!(sw.bundles(), bundles + 1);
        let s = store.reconcile().await.unwrap();
        assert_eq!((s.added, s.deleted), (0, 0));
        assert_eq!(sw.bundles(), bundles + 1, "nothing to do, nothing sent");
    }

    /// A real pod's flows (with the table-26 row the store reads the port from).
    fn real_pod(ofport: u32, v: u32) -> (String, Vec<Flow>) {
        let port = format!("vethmc{ofport}");
        let flows = flows::pod_flows(&flows::PodFlows {
            ofport,
            ip: std::net::Ipv4Addr::new(10, 128, 0, ofport as u8),
            vnid: vnid(v),
            cookie: flows::pod::port_cookie(&port),
            egress_meter: None,
        });
        (port, flows)
    }

    fn table_120(sw: &FakeSwitch, v: u32) -> Vec<String> {
        sw.flows_with_cookie(flows::multicast_cookie(vnid(v)))
            .iter()
            .filter(|f| f.table == 120)
            .map(|f| f.actions_text(None))
            .collect()
    }

    #[tokio::test]
    async fn multicast_rows_follow_the_enabled_set_and_the_pods_in_their_bundles() {
        let sw = Arc::new(FakeSwitch::new());
        let store = FlowStore::new(sw.clone(), true);
        let (a, fa) = real_pod(3, 11);
        let (b, fb) = real_pod(4, 11);
        let (c, fc) = real_pod(5, 12);
        store
            .apply(
                Change::new()
                    .set_pod(a.clone(), fa.clone(), vnid(11))
                    .set_pod(c.clone(), fc.clone(), vnid(12)),
            )
            .await
            .unwrap();
        assert!(table_120(&sw, 11).is_empty(), "off by default");
        // Enabling VNID 11: both rows for its one pod, in one bundle; VNID 12 stays off.
        let bundles = sw.bundles();
        store
            .set_multicast(std::collections::BTreeSet::from([vnid(11)]))
            .await
            .unwrap();
        assert_eq!(sw.bundles(), bundles + 1);
        assert_eq!(table_120(&sw, 11), ["output:3"]);
        assert_eq!(
            sw.flows_with_cookie(flows::multicast_cookie(vnid(11)))
                .len(),
            2
        );
        assert!(table_120(&sw, 12).is_empty());
        // A second pod joins the row in the ADD's own bundle.
        let bundles = sw.bundles();
        store
            .apply(Change::new().set_pod(b.clone(), fb, vnid(11)))
            .await
            .unwrap();
        assert_eq!(sw.bundles(), bundles + 1);
        assert_eq!(table_120(&sw, 11), ["output:3,output:4"]);
        // Pod a moves to VNID 12 (not enabled): it leaves 11's row in the move's bundle.
        let moved = real_pod(3, 12).1;
        store
            .apply(Change::new().put_pod(a.clone(), moved, vnid(12)))
            .await
            .unwrap();
        assert_eq!(table_120(&sw, 11), ["output:4"]);
        // The desired set names the rows; a reconcile finds the bridge right.
        let owners = store.owners().await;
        assert!(owners.contains(&Owner::MulticastTenant(vnid(11))));
        assert!(!owners.contains(&Owner::MulticastTenant(vnid(12))));
        let s = store.reconcile().await.unwrap();
        assert_eq!((s.added, s.deleted), (0, 0), "{:?}", s.changes);
        // Lost rows come back with a reconcile.
        sw.remove_flows_with_cookie(flows::multicast_cookie(vnid(11)));
        let s = store.reconcile().await.unwrap();
        assert_eq!(s.added, 2);
        // The last pod of the VNID goes: its rows go with it.
        store
            .apply(Change::new().remove(Owner::Port(b)))
            .await
            .unwrap();
        assert!(sw
            .flows_with_cookie(flows::multicast_cookie(vnid(11)))
            .is_empty());
        // Disabling removes the rows of a VNID with pods.
        store
            .set_multicast(std::collections::BTreeSet::from([vnid(12)]))
            .await
            .unwrap();
        assert_eq!(table_120(&sw, 12), ["output:3,output:5"]);
        store
            .set_multicast(std::collections::BTreeSet::new())
            .await
            .unwrap();
        assert!(sw
            .flows_with_cookie(flows::multicast_cookie(vnid(12)))
            .is_empty());
        let s = store.reconcile().await.unwrap();
        assert_eq!((s.added, s.deleted), (0, 0), "{:?}", s.changes);
    }

    #[tokio::test]
    async fn groups_go_with_their_owner_and_a_reconcile_puts_back_a_lost_one() {
        let sw = Arc::new(FakeSwitch::new());
        let store = FlowStore::new(sw.clone(), true);
        let v = vnid(20);
        let tun = ovs::flow::MacAddr::from_pod_ip(std::net::Ipv4Addr::new(10, 128, 0, 1));
        let remote = flows::EgressRoute::Remote(vec![std::net::Ipv4Addr::new(192, 168, 77, 12)]);
        let (f, g) = flows::egress_ip_flows(v, &remote, tun);
        store
            .apply(Change::new().set_with_groups(Owner::EgressIp(v), f, g.into_iter().collect()))
            .await
            .unwrap();
        assert_eq!(sw.groups().len(), 1);
        assert_eq!(sw.flows_with_cookie(flows::egress_ip_cookie(v)).len(), 1);
        // Replaced: the group is deleted and added again in the same bundle, its flow with it.
        let (f, g) = flows::egress_ip_flows(v, &flows::EgressRoute::Local, tun);
        store
            .apply(Change::new().set_with_groups(Owner::EgressIp(v), f, g.into_iter().collect()))
            .await
            .unwrap();
        assert_eq!(sw.groups()[&20].buckets.len(), 1);
        assert!(sw.flows_with_cookie(flows::egress_ip_cookie(v))[0]
            .to_string()
            .ends_with("actions=group:20"));
        let s = store.reconcile().await.unwrap();
        assert_eq!((s.added, s.deleted, s.groups), (0, 0, 0), "{:?}", s.changes);
        // Someone deletes the group (and with it the flow): the reconcile puts both back.
        sw.remove_group(20);
        assert!(sw.flows_with_cookie(flows::egress_ip_cookie(v)).is_empty());
        let s = store.reconcile().await.unwrap();
        assert_eq!((s.added, s.groups), (1, 1), "{:?}", s.changes);
        assert_eq!(sw.flows_with_cookie(flows::egress_ip_cookie(v)).len(), 1);
        // A stray group is deleted; a dropped tenant has a row and no group.
        let (f, _) = flows::egress_ip_flows(v, &flows::EgressRoute::Dropped, tun);
        store
            .apply(Change::new().set_with_groups(Owner::EgressIp(v), f, Vec::new()))
            .await
            .unwrap();
        assert!(sw.groups().is_empty());
        store
            .apply(Change::new().remove(Owner::EgressIp(v)))
            .await
            .unwrap();
        assert!(sw.flows_with_cookie(flows::egress_ip_cookie(v)).is_empty());
    }
}
