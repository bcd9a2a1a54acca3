//! The one diff of the full reconcile: desired flows against the switch's, by table, priority
//! and match; only what differs (actions or cookie) is touched.

use ovs::flow::{Flow, Match};
use ovs::openflow::flow_mod::FlowMod;
use ovs::openflow::BundleMsg;
use std::collections::HashMap;

pub(crate) type Key = (u8, u16, Match);

pub(crate) fn key(f: &Flow) -> Key {
    (f.table, f.priority, f.matches.clone())
}

/// The bundle messages that turn `existing` into `desired`: strict deletes first, then adds.
/// An empty result means the bridge already has exactly the desired flows.
pub(crate) fn diff(desired: &[Flow], existing: &[Flow]) -> Vec<BundleMsg> {
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
pub(crate) fn same(a: &Flow, b: &Flow) -> bool {
    a.cookie == b.cookie
        && a.actions == b.actions
        && a.goto_table == b.goto_table
        && a.idle_timeout == b.idle_timeout
        && a.hard_timeout == b.hard_timeout
}
