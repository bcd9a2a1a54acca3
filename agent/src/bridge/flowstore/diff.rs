//! The one diff of the full reconcile: desired flows against the switch's, by table, priority
//! and match; only what differs (actions or cookie) is touched.
//!
//! It works on references: at 5,000 nodes a dual-stack node holds some 25,000 rows, and a key
//! map of cloned matches (hundreds of bytes each) for both sides was most of the reconcile's
//! transient memory, which the allocator then kept as the agent's resident size.

use ovs::flow::{Flow, Match};
use ovs::openflow::flow_mod::FlowMod;
use ovs::openflow::BundleMsg;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;

pub(crate) type Key<'a> = (u8, u16, &'a Match);

pub(crate) fn key(f: &Flow) -> Key<'_> {
    (f.table, f.priority, &f.matches)
}

/// The bundle messages that turn `existing` into `desired`: strict deletes first, then adds.
/// An empty result means the bridge already has exactly the desired flows.
pub(crate) fn diff<'a, D>(desired: D, existing: &'a [Flow]) -> Vec<BundleMsg>
where
    D: IntoIterator<Item = &'a Flow>,
    D::IntoIter: Clone,
{
    let desired = desired.into_iter();
    let want: HashMap<Key<'a>, &Flow> = desired.clone().map(|f| (key(f), f)).collect();
    let have: HashMap<Key<'a>, &Flow> = existing.iter().map(|f| (key(f), f)).collect();
    let mut msgs = Vec::new();
    for f in existing {
        if !want.contains_key(&key(f)) && !flows::live_trace::is_trace_cookie(f.cookie) {
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

/// [`diff`] for the full reconcile, fed the switch's flows one at a time as its dump arrives
/// ([`StreamDiff::see`]), so the bridge's flows are never all held at once: only the keys of the
/// desired rows that are already right, and the messages.
pub(crate) struct StreamDiff<'a> {
    /// The desired rows by the hash of their key (a switch's flow is looked up by a key that
    /// borrows it only for the lookup).
    want: HashMap<u64, Vec<&'a Flow>>,
    hasher: std::collections::hash_map::RandomState,
    /// The desired rows already right on the switch, by address (compared, never followed).
    right: HashSet<usize>,
    deletes: Vec<BundleMsg>,
    existing: usize,
}

impl<'a> StreamDiff<'a> {
    pub(crate) fn new(desired: impl IntoIterator<Item = &'a Flow>) -> Self {
        let hasher = std::collections::hash_map::RandomState::new();
        let mut want: HashMap<u64, Vec<&'a Flow>> = HashMap::new();
        for f in desired {
            want.entry(hasher.hash_one(key(f))).or_default().push(f);
        }
        StreamDiff {
            want,
            hasher,
            right: HashSet::new(),
            deletes: Vec::new(),
            existing: 0,
        }
    }

    /// One flow of the switch.
    pub(crate) fn see(&mut self, f: &Flow) {
        self.existing += 1;
        // A live trace's temporary rows: nobody desires them, and they go by themselves.
        if flows::live_trace::is_trace_cookie(f.cookie) {
            return;
        }
        let k = key(f);
        let found = self
            .want
            .get(&self.hasher.hash_one(k))
            .and_then(|ws| ws.iter().find(|w| key(w) == k));
        match found {
            Some(w) => {
                if same(w, f) {
                    self.right.insert(addr(w));
                }
            }
            None => self
                .deletes
                .push(BundleMsg::Flow(FlowMod::delete_strict(f))),
        }
    }

    /// How many flows of the switch were seen.
    pub(crate) fn existing(&self) -> usize {
        self.existing
    }

    /// The messages, in [`diff`]'s order: strict deletes in the switch's order, then the
    /// desired rows (in `desired`'s order) that are missing or differ.
    pub(crate) fn finish(self, desired: impl IntoIterator<Item = &'a Flow>) -> Vec<BundleMsg> {
        let mut msgs = self.deletes;
        msgs.extend(
            desired
                .into_iter()
                .filter(|f| !self.right.contains(&addr(f)))
                .map(|f| BundleMsg::add(f.clone())),
        );
        msgs
    }
}

/// A desired row's identity while it is borrowed.
fn addr(f: &Flow) -> usize {
    std::ptr::from_ref(f) as usize
}

/// Equal as far as the switch is concerned (a dumped flow against a built one).
pub(crate) fn same(a: &Flow, b: &Flow) -> bool {
    a.cookie == b.cookie
        && a.actions == b.actions
        && a.goto_table == b.goto_table
        && a.idle_timeout == b.idle_timeout
        && a.hard_timeout == b.hard_timeout
}
