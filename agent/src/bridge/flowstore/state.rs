//! What the store holds: the entries by owner, each VNID's pod count (its table-80 row lives
//! while it has pods) and the multicast membership (each enabled VNID's ports) with the rows it
//! makes.

use flows::Vnid;
use ovs::flow::Flow;
use ovs::openflow::BundleMsg;
use std::collections::BTreeMap;

use super::*;

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) owners: BTreeMap<Owner, Entry>,
    /// Owners (pods) per VNID, kept with every commit.
    pub(crate) refs: BTreeMap<Vnid, usize>,
    /// Pod ports per VNID (with their holder counts), kept with every commit.
    pub(crate) members: BTreeMap<Vnid, BTreeMap<u32, usize>>,
    /// The multicast-enabled VNIDs.
    pub(crate) multicast: std::collections::BTreeSet<Vnid>,
}

impl State {
    /// Pods per VNID.
    pub(crate) fn vnid_refs(&self) -> &BTreeMap<Vnid, usize> {
        &self.refs
    }

    /// The multicast rows of VNID `v` with the ports `ports` (none unless it is enabled).
    pub(crate) fn multicast_rows(
        &self,
        v: Vnid,
        ports: Option<&BTreeMap<u32, usize>>,
    ) -> Vec<Flow> {
        if !self.multicast.contains(&v) {
            return Vec::new();
        }
        let ports = ports
            .map(|p| p.keys().copied().collect())
            .unwrap_or_default();
        flows::multicast_tenant_flows(v, &ports)
    }

    /// Every multicast row, by VNID.
    pub(crate) fn all_multicast_rows(&self) -> Vec<(Vnid, Flow)> {
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
    pub(crate) fn multicast_row_changes(
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
