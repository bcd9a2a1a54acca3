//! A change to the desired flows: set, put, diff or remove by owner, the pods' VNIDs and ports
//! with it; turned into one bundle's messages over the store's state, then committed to it.

use flows::Vnid;
use ovs::flow::{Flow, Group, GroupType};
use ovs::openflow::flow_mod::{FlowMod, GroupModCommand};
use ovs::openflow::BundleMsg;
use std::collections::BTreeMap;

use super::*;

/// One owner's desired flows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The flows it holds (none for a remote node: see `remote`).
    pub(crate) flows: Vec<Flow>,
    /// A remote node's rows are computed from its few fields when needed rather than held:
    /// at 5,000 nodes held rows were most of a node agent's flow memory (a `Flow` is over 500
    /// bytes before its actions; a node has three rows, five in dual stack).
    pub(crate) remote: Option<flows::RemoteNodeFlows>,
    /// The VNID whose table-80 row this owner needs (pods).
    pub(crate) vnid: Option<Vnid>,
    /// The pod's OVS port (from its table-26 row), for its VNID's multicast rows.
    pub(crate) ofport: Option<u32>,
    /// The OpenFlow groups the owner's flows use (egress IPs), by id.
    pub(crate) groups: Vec<Group>,
}

impl Entry {
    pub(crate) fn plain(flows: Vec<Flow>) -> Entry {
        Entry {
            flows,
            remote: None,
            vnid: None,
            ofport: None,
            groups: Vec::new(),
        }
    }

    pub(crate) fn pod(flows: Vec<Flow>, vnid: Vnid) -> Entry {
        Entry {
            ofport: flows::ofport_of(&flows),
            flows,
            remote: None,
            vnid: Some(vnid),
            groups: Vec::new(),
        }
    }

    /// A remote node's entry: its rows come from `spec` when asked for.
    pub(crate) fn remote(spec: flows::RemoteNodeFlows) -> Entry {
        Entry {
            remote: Some(spec),
            ..Entry::plain(Vec::new())
        }
    }

    /// Its rows: the held flows, or a remote node's computed ones.
    pub(crate) fn rows(&self) -> std::borrow::Cow<'_, [Flow]> {
        match &self.remote {
            Some(spec) => std::borrow::Cow::Owned(flows::remote_node_flows(spec)),
            None => std::borrow::Cow::Borrowed(&self.flows),
        }
    }

    /// How many rows it has, without building a remote node's.
    pub(crate) fn row_count(&self) -> usize {
        match &self.remote {
            Some(spec) => flows::remote_node_row_count(spec),
            None => self.flows.len(),
        }
    }

    /// The multicast membership this entry gives: its VNID and port.
    pub(crate) fn member(&self) -> Option<(Vnid, u32)> {
        self.vnid.zip(self.ofport)
    }
}

/// What a change does to one owner.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    /// Delete the owner's flows by cookie, then add these (none: remove the owner).
    Replace(Option<Entry>),
    /// Add these flows over the owner's (same table, priority and match replace), no delete:
    /// for owners whose rows are keyed by a match that never changes (the table-111 row).
    Put(Entry),
    /// Make the owner's flows these by sending only the difference: strict deletes of rows it
    /// no longer has, adds of new or changed ones (owners with many rows that change a few at
    /// a time: the shared policy rows).
    Diff(Entry),
    /// Change the owner's flows row by row, as a caller that keeps them by difference says:
    /// strict deletes of `deletes`, adds of `upserts` (each replacing the row of its table,
    /// priority and match). The owner's other rows stay; its VNID and port stay.
    Patch {
        /// Rows added or changed.
        upserts: Vec<Flow>,
        /// Rows removed, as the owner holds them.
        deletes: Vec<Flow>,
    },
}

/// A set of owner changes applied as one bundle.
#[derive(Clone, Debug, Default)]
pub struct Change {
    pub(crate) ops: Vec<(Owner, Op)>,
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

    /// Sets a remote node's rows, computed from `spec` whenever the store needs them (see
    /// [`Entry::remote`]).
    pub fn set_remote(mut self, owner: Owner, spec: flows::RemoteNodeFlows) -> Change {
        self.ops
            .push((owner, Op::Replace(Some(Entry::remote(spec)))));
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

    /// Changes `owner`'s flows row by row (see [`Op::Patch`]): for an owner whose rows a caller
    /// keeps by difference, so that a change of one row costs one message and no comparison of
    /// the rest. At most one patch per owner in a change.
    pub fn patch(mut self, owner: Owner, upserts: Vec<Flow>, deletes: Vec<Flow>) -> Change {
        debug_assert!(
            !self.ops.iter().any(|(o, _)| *o == owner),
            "a patch is the only op of its owner in a change"
        );
        self.ops.push((owner, Op::Patch { upserts, deletes }));
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

    /// Whether it only removes owners.
    pub(crate) fn only_removes(&self) -> bool {
        self.ops
            .iter()
            .all(|(_, op)| matches!(op, Op::Replace(None)))
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The owners' messages in order (without the VNID rows the store derives): per owner a
    /// delete by its cookie and its adds; for [`Change::put`] and [`Change::put_pod`] only the
    /// adds of flows that differ from the owner's flows in `state` (or in an earlier op of this
    /// change): a flow the store holds is on the bridge, or drift repair puts it back.
    pub(crate) fn messages_over(&self, state: &State) -> Vec<BundleMsg> {
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
                        msgs.extend(e.rows().iter().cloned().map(BundleMsg::add));
                    }
                    holds.insert(owner, e.as_ref());
                }
                Op::Put(e) => {
                    let old = held.map(Entry::rows).unwrap_or_default();
                    msgs.extend(
                        e.rows()
                            .iter()
                            .filter(|f| !old.contains(f))
                            .cloned()
                            .map(BundleMsg::add),
                    );
                    holds.insert(owner, Some(e));
                }
                Op::Diff(e) => {
                    let old = held.map(Entry::rows).unwrap_or_default();
                    msgs.extend(diff(e.rows().iter(), &old));
                    holds.insert(owner, Some(e));
                }
                Op::Patch { upserts, deletes } => {
                    msgs.extend(
                        deletes
                            .iter()
                            .map(|f| BundleMsg::Flow(FlowMod::delete_strict(f))),
                    );
                    msgs.extend(upserts.iter().cloned().map(BundleMsg::add));
                }
            }
        }
        msgs
    }

    /// This change with the pod ports' policy rows tied to the ports (see
    /// [`Owner::PolicyTarget`]): removing a port's flows removes its policy rows too, and
    /// policy rows for a port that is neither held nor set earlier in the change are dropped.
    pub(crate) fn tie_policy_targets(self, state: &State) -> Change {
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
    pub(crate) fn refs_after(&self, state: &State) -> BTreeMap<Vnid, usize> {
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
                Op::Patch { .. } => old,
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
    pub(crate) fn members_after(&self, state: &State) -> BTreeMap<Vnid, BTreeMap<u32, usize>> {
        let mut after: BTreeMap<Vnid, BTreeMap<u32, usize>> = BTreeMap::new();
        let mut holds: BTreeMap<&Owner, Option<(Vnid, u32)>> = BTreeMap::new();
        for (owner, op) in &self.ops {
            let old = *holds
                .entry(owner)
                .or_insert_with(|| state.owners.get(owner).and_then(Entry::member));
            let new = match op {
                Op::Replace(Some(e)) | Op::Put(e) | Op::Diff(e) => e.member(),
                Op::Replace(None) => None,
                Op::Patch { .. } => old,
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

    pub(crate) fn commit(self, state: &mut State) {
        for (owner, op) in self.ops {
            let entry = match op {
                Op::Replace(Some(e)) | Op::Put(e) | Op::Diff(e) => Some(e),
                Op::Replace(None) => None,
                Op::Patch { upserts, deletes } => {
                    let e = state
                        .owners
                        .entry(owner)
                        .or_insert_with(|| Entry::plain(Vec::new()));
                    patch_rows(&mut e.flows, upserts, &deletes);
                    continue;
                }
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

/// The bundle message deleting group `id` (and, as OpenFlow does, every flow that uses it).
/// `flows` with the rows of `deletes` gone and `upserts` in (replacing rows of the same table,
/// priority and match): one pass over the rows, hashing only the patch's keys.
fn patch_rows(flows: &mut Vec<Flow>, upserts: Vec<Flow>, deletes: &[Flow]) {
    let keys: std::collections::HashSet<(u8, u16, &ovs::flow::Match)> = upserts
        .iter()
        .chain(deletes)
        .map(|f| (f.table, f.priority, &f.matches))
        .collect();
    flows.retain(|f| !keys.contains(&(f.table, f.priority, &f.matches)));
    drop(keys);
    flows.extend(upserts);
}

pub(crate) fn group_delete(id: u32) -> BundleMsg {
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
pub(crate) fn count(ports: &mut BTreeMap<u32, usize>, port: u32, add: bool) {
    if add {
        *ports.entry(port).or_default() += 1;
    } else if let Some(n) = ports.get_mut(&port) {
        *n -= 1;
        if *n == 0 {
            ports.remove(&port);
        }
    }
}
