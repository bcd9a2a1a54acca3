//! Remote nodes: the rows of pipeline.md "Per remote node" for every other node's HostSubnet,
//! kept in step with the cluster state.
//!
//! The cluster state (standalone directory or Kubernetes, the same [`ClusterState`]) names every
//! node's VTEP (`hostIP`) and pod subnet. [`RemoteSet::from_state`] turns it into the remote
//! nodes this node must reach, leaving out this node's own HostSubnet and any HostSubnet it could
//! not use safely (a bad field, a subnet overlapping this node's, this node's own address, or a
//! hostIP another HostSubnet already has: two rows `tun_src=X` would fight over one flow). Each
//! remote node's rows carry [`flows::node_cookie`] of its HostSubnet's uid.
//!
//! The rows reach `br0` through the flow store ([`crate::bridge::flowstore`]), which owns them by
//! cookie ([`Owner::RemoteNode`], [`Owner::Multicast`]):
//! - **Incrementally** ([`RemoteNodes::sync`], on every cluster-state change): the new set is
//!   compared with what was last handed to the store ([`plan_updates`]); every node that was added,
//!   changed (hostIP, subnet or uid) or removed gets **one step** of its own (delete by its
//!   cookie, then its new rows), so moving one node never touches another node's rows. Steps
//!   go to the switch [`NODES_PER_BUNDLE`] to a bundle (a cluster arriving at once is a few
//!   round trips, not one per node); a refused bundle is retried step by step, so one node
//!   whose rows the switch refuses holds back no other. The
//!   table-111 row (multicast to every remote VTEP) is rewritten, in the last of those steps,
//!   whenever the set of VTEPs changed. Flow adds replace a row with the same match, so even two
//!   nodes swapping addresses in one update end right whatever the bundle order.
//! - **At start-up** ([`RemoteNodes::stage`]): the whole remote set is staged in the store before
//!   its first full reconcile, so rows of HostSubnets that vanished while the agent was down are
//!   deleted at start (nothing owns them), and lost rows come back with every later reconcile.
//!
//! What was installed is remembered only after a bundle succeeded; a failed bundle is retried at
//! the next change and the store's next full reconcile repairs the bridge meanwhile. Host
//! iptables rules need nothing per node: they cover the whole cluster network and the VXLAN port.
//!
//! Limits: IPv4 only; a HostSubnet that is skipped is logged (once per reason) and otherwise
//! ignored, so its pods are unreachable from here until it is fixed.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use flows::{multicast_remote, node_cookie, RemoteNodeFlows};
use ipnet::Ipv4Net;
use ovs::openflow::OfError;
use tokio::sync::{watch, Mutex};

use crate::bridge::flowstore::{Change, FlowStore, Owner};
use crate::bridge::seams::FlowSwitch;
use crate::bridge::switch::Switch;
use cluster::{ClusterState, HostSubnet};

/// This node, as far as remote nodes are concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LocalNode {
    /// Node name (its own HostSubnet's name).
    pub name: String,
    /// Its underlay address (VTEP).
    pub node_ip: IpAddr,
    /// Its pod subnet (none on an IPv6-only cluster).
    pub subnet: Option<Ipv4Net>,
    /// Its IPv6 pod subnet (dual stack, IPv6-only).
    pub subnet6: Option<ipnet::Ipv6Net>,
}

/// One remote node as the pipeline sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemoteNode {
    /// Node name (the HostSubnet's name).
    pub name: String,
    /// The HostSubnet's uid (its name when it has none): what the cookie is derived from.
    pub uid: String,
    /// VTEP (`hostIP`; IPv6 on an IPv6-only cluster).
    pub host_ip: IpAddr,
    /// Pod subnet (none on an IPv6-only cluster).
    pub subnet: Option<Ipv4Net>,
    /// IPv6 pod subnet (dual stack: its HostSubnet's `sdn.dev/ipv6-subnet`).
    pub subnet6: Option<ipnet::Ipv6Net>,
    /// The cookie of its rows.
    pub cookie: u64,
}

/// An optional value for a log line: the value, or `none`.
fn shown<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "none".into(), ToString::to_string)
}

impl RemoteNode {
    /// The node from a HostSubnet whose fields parse.
    fn from_host_subnet(hs: &HostSubnet) -> Result<RemoteNode, String> {
        hs.validate().map_err(|e| e.to_string())?;
        let host_ip = hs.host_ip_addr().map_err(|e| e.to_string())?;
        let subnet = hs.ipv4_subnet().map_err(|e| e.to_string())?;
        let uid = hs
            .metadata
            .uid
            .clone()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| hs.name().to_string());
        Ok(RemoteNode {
            name: hs.name().to_string(),
            cookie: node_cookie(&uid),
            uid,
            host_ip,
            subnet,
            subnet6: hs.ipv6_subnet().map_err(|e| e.to_string())?,
        })
    }

    fn log_staged(&self) {
        tracing::info!(
            node = %self.name, host_ip = %self.host_ip, subnet = %shown(&self.subnet), subnet6 = ?self.subnet6,
            cookie = %format!("{:#x}", self.cookie), "remote node"
        );
    }

    /// The flow store's owner of its rows.
    pub(crate) fn owner(&self) -> Owner {
        Owner::RemoteNode {
            name: self.name.clone(),
            cookie: self.cookie,
        }
    }

    /// What its rows (tables 10, 50, 90, and the IPv6 twins of 50 and 90) are made from.
    pub(crate) fn spec(&self) -> RemoteNodeFlows {
        RemoteNodeFlows {
            host_ip: self.host_ip,
            subnet: self.subnet,
            subnet6: self.subnet6,
            cookie: self.cookie,
        }
    }
}

/// The remote nodes a cluster state gives this node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RemoteSet {
    /// Remote nodes by name.
    pub nodes: BTreeMap<String, RemoteNode>,
    /// HostSubnets left out, by name, with the reason.
    pub skipped: BTreeMap<String, String>,
}

impl RemoteSet {
    /// Every HostSubnet of `state` but `local`'s own, minus those it cannot use (see the module
    /// docs). Of two HostSubnets with one hostIP the one whose name sorts first is kept.
    pub(crate) fn from_state(state: &ClusterState, local: &LocalNode) -> RemoteSet {
        let mut set = RemoteSet::default();
        let mut by_ip: BTreeMap<IpAddr, String> = BTreeMap::new();
        for (name, hs) in state.host_subnets.iter() {
            if *name == local.name {
                continue;
            }
            let node = match RemoteNode::from_host_subnet(hs) {
                Ok(n) => n,
                Err(e) => {
                    set.skipped.insert(name.clone(), e);
                    continue;
                }
            };
            let reason = if node.host_ip == local.node_ip {
                Some(format!(
                    "hostIP {} is this node's own address",
                    node.host_ip
                ))
            } else if node.host_ip.is_ipv4() != local.node_ip.is_ipv4() {
                Some(format!(
                    "hostIP {} is not of the family of this node's underlay address {}: VXLAN \
                     between them cannot work",
                    node.host_ip, local.node_ip
                ))
            } else if let Some((theirs, ours)) = node
                .subnet
                .zip(local.subnet)
                .filter(|(t, o)| overlaps(t, o))
            {
                Some(format!(
                    "subnet {theirs} overlaps this node's subnet {ours}"
                ))
            } else if let Some((theirs, ours)) = node
                .subnet6
                .zip(local.subnet6)
                .filter(|(t, o)| t.contains(&o.network()) || o.contains(&t.network()))
            {
                Some(format!(
                    "IPv6 subnet {theirs} overlaps this node's IPv6 subnet {ours}"
                ))
            } else {
                by_ip.get(&node.host_ip).map(|other| {
                    format!(
                        "hostIP {} is also HostSubnet {other:?}'s (that one is used)",
                        node.host_ip
                    )
                })
            };
            if let Some(r) = reason {
                set.skipped.insert(name.clone(), r);
                continue;
            }
            by_ip.insert(node.host_ip, name.clone());
            set.nodes.insert(name.clone(), node);
        }
        set
    }

    /// The remote VTEPs.
    pub(crate) fn vteps(&self) -> BTreeSet<IpAddr> {
        self.nodes.values().map(|n| n.host_ip).collect()
    }

    /// Every remote-node row: each node's three, then the table-111 row (what
    /// [`RemoteNodes::stage`] and [`RemoteNodes::sync`] install, node by node).
    #[cfg(test)]
    pub(crate) fn flows(&self) -> Vec<ovs::flow::Flow> {
        let mut out: Vec<ovs::flow::Flow> = self
            .nodes
            .values()
            .flat_map(|n| flows::remote_node_flows(&n.spec()))
            .collect();
        out.push(multicast_remote(&self.vteps()).0);
        out
    }

    /// The store's change that writes the table-111 row and the VTEP groups it uses. A row
    /// without groups replacing one without groups is one add (OVS replaces the row in place);
    /// otherwise the row and its groups are set anew (old groups deleted, new ones added, in the
    /// same bundle). `had_groups`: whether the installed row used groups.
    fn multicast_change(&self, had_groups: bool) -> Change {
        let (row, groups) = multicast_remote(&self.vteps());
        if groups.is_empty() && !had_groups {
            Change::new().put(Owner::Multicast, vec![row])
        } else {
            Change::new().set_with_groups(Owner::Multicast, vec![row], groups)
        }
    }
}

fn overlaps(a: &Ipv4Net, b: &Ipv4Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// What is on `br0` as far as this module knows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Installed {
    /// Remote nodes whose rows are installed, by name.
    pub nodes: BTreeMap<String, RemoteNode>,
    /// The VTEPs of the installed table-111 row (`None`: unknown, write it).
    pub vteps: Option<BTreeSet<IpAddr>>,
}

/// How one remote node changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeChange {
    /// A new remote node.
    Added(RemoteNode),
    /// Its hostIP, subnet or uid changed.
    Changed {
        /// As installed.
        from: RemoteNode,
        /// As wanted now.
        to: RemoteNode,
    },
    /// Its HostSubnet is gone (or is now skipped).
    Removed(RemoteNode),
}

impl NodeChange {
    /// The node's name.
    pub(crate) fn name(&self) -> &str {
        match self {
            NodeChange::Added(n) | NodeChange::Removed(n) | NodeChange::Changed { to: n, .. } => {
                &n.name
            }
        }
    }

    /// Its flow-store change: its rows replaced (under the old cookie too when the uid
    /// changed), or removed.
    fn store_change(&self) -> Change {
        match self {
            NodeChange::Added(n) => Change::new().set_remote(n.owner(), n.spec()),
            NodeChange::Changed { from, to } if from.cookie != to.cookie => Change::new()
                .remove(from.owner())
                .set_remote(to.owner(), to.spec()),
            NodeChange::Changed { to, .. } => Change::new().set_remote(to.owner(), to.spec()),
            NodeChange::Removed(n) => Change::new().remove(n.owner()),
        }
    }

    fn log(&self) {
        match self {
            NodeChange::Added(n) => tracing::info!(
                node = %n.name, host_ip = %n.host_ip, subnet = %shown(&n.subnet),
                cookie = %format!("{:#x}", n.cookie), "remote node added"
            ),
            NodeChange::Changed { from, to } => tracing::info!(
                node = %to.name, host_ip = %to.host_ip, subnet = %shown(&to.subnet),
                from_host_ip = %from.host_ip, from_subnet = %shown(&from.subnet),
                cookie = %format!("{:#x}", to.cookie), "remote node changed; its rows were replaced"
            ),
            NodeChange::Removed(n) => tracing::info!(
                node = %n.name, host_ip = %n.host_ip, subnet = %shown(&n.subnet),
                cookie = %format!("{:#x}", n.cookie), "remote node removed"
            ),
        }
    }
}

/// One bundle of an incremental update.
#[derive(Debug)]
pub(crate) struct Step {
    /// The node it changes (`None`: only the table-111 row).
    pub change: Option<NodeChange>,
    /// The VTEPs of the table-111 row it writes, if it writes one.
    pub multicast: Option<BTreeSet<IpAddr>>,
    /// Its flow-store change.
    pub store: Change,
}

#[cfg(test)]
impl Step {
    /// Its messages, in order (what the store sends for it).
    pub(crate) fn msgs(&self) -> Vec<ovs::openflow::BundleMsg> {
        self.store.messages()
    }
}

/// The bundles that take `br0` from `installed` to `desired`: one per changed node (by name),
/// the table-111 row in the last of them when the VTEP set differs from the installed row's (in a
/// bundle of its own when no node changed). Empty when nothing differs.
pub(crate) fn plan_updates(installed: &Installed, desired: &RemoteSet) -> Vec<Step> {
    let mut changes = Vec::new();
    for (name, old) in &installed.nodes {
        match desired.nodes.get(name) {
            None => changes.push(NodeChange::Removed(old.clone())),
            Some(new) if new != old => changes.push(NodeChange::Changed {
                from: old.clone(),
                to: new.clone(),
            }),
            Some(_) => {}
        }
    }
    for (name, new) in &desired.nodes {
        if !installed.nodes.contains_key(name) {
            changes.push(NodeChange::Added(new.clone()));
        }
    }
    let mut steps: Vec<Step> = changes
        .into_iter()
        .map(|c| Step {
            store: c.store_change(),
            change: Some(c),
            multicast: None,
        })
        .collect();
    let vteps = desired.vteps();
    if installed.vteps.as_ref() != Some(&vteps) {
        let had_groups = installed
            .vteps
            .as_ref()
            .is_some_and(|v| v.len() > flows::VTEPS_IN_ROW);
        let row = desired.multicast_change(had_groups);
        match steps.last_mut() {
            Some(last) => {
                last.store = std::mem::take(&mut last.store).and(row);
                last.multicast = Some(vteps);
            }
            None => steps.push(Step {
                change: None,
                multicast: Some(vteps),
                store: row,
            }),
        }
    }
    steps
}

/// Why an incremental update failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NodesError {
    /// A node's bundle was refused or the switch is unreachable.
    #[error("applying the rows of remote node {node:?} on br0: {source}")]
    Node {
        /// The node.
        node: String,
        /// The OpenFlow error.
        #[source]
        source: OfError,
    },
    /// The table-111 row could not be written.
    #[error("rewriting the table-111 row for {vteps} remote VTEP(s) on br0: {source}")]
    Multicast {
        /// How many VTEPs it lists.
        vteps: usize,
        /// The OpenFlow error.
        #[source]
        source: OfError,
    },
}

/// The remote-node rows of `br0`, following the cluster state.
#[derive(Debug)]
pub(crate) struct RemoteNodes<S = Switch> {
    local: LocalNode,
    store: Arc<FlowStore<S>>,
    cluster: watch::Receiver<Arc<ClusterState>>,
    state: Mutex<Tracked>,
}

#[derive(Debug, Default)]
struct Tracked {
    installed: Installed,
    /// Skipped HostSubnets already warned about, with the reason given.
    warned: BTreeMap<String, String>,
}

impl Tracked {
    fn warn_skipped(&mut self, set: &RemoteSet) {
        for (name, reason) in &set.skipped {
            if self.warned.get(name) != Some(reason) {
                tracing::warn!(node = %name, reason = %reason, "HostSubnet ignored: no remote-node rows for it");
            }
        }
        self.warned = set.skipped.clone();
    }
}

impl<S: FlowSwitch> RemoteNodes<S> {
    /// The remote-node rows of `local` in `store`, from `cluster`. Nothing is read or changed
    /// until a method is called.
    pub(crate) fn new(
        local: LocalNode,
        store: Arc<FlowStore<S>>,
        cluster: watch::Receiver<Arc<ClusterState>>,
    ) -> RemoteNodes<S> {
        RemoteNodes {
            local,
            store,
            cluster,
            state: Mutex::new(Tracked::default()),
        }
    }

    /// The remote nodes the current cluster state gives.
    pub(crate) fn desired(&self) -> RemoteSet {
        let state = self.cluster.borrow().clone();
        RemoteSet::from_state(&state, &self.local)
    }

    /// Start-up: stages every remote node's rows and the table-111 row in the store (the
    /// caller's full reconcile installs them) and remembers them as installed.
    pub(crate) async fn stage(&self) -> usize {
        let mut tracked = self.state.lock().await;
        let desired = self.desired();
        tracked.warn_skipped(&desired);
        let mut change = Change::new();
        for n in desired.nodes.values() {
            n.log_staged();
            change = change.set_remote(n.owner(), n.spec());
        }
        change = change.and(desired.multicast_change(false));
        self.store.stage(change).await;
        tracked.installed = Installed {
            nodes: desired.nodes.clone(),
            vteps: Some(desired.vteps()),
        };
        desired.nodes.len()
    }

    /// Brings the remote-node rows in line with the current cluster state, one step per
    /// changed node (see [`plan_updates`]), [`NODES_PER_BUNDLE`] steps to a bundle. Returns the
    /// changes applied; a refused bundle is retried step by step, which stops at the first
    /// step that fails (the steps before it stay applied and remembered).
    pub(crate) async fn sync(&self) -> Result<Vec<NodeChange>, NodesError> {
        let mut tracked = self.state.lock().await;
        let desired = self.desired();
        tracked.warn_skipped(&desired);
        let mut done = Vec::new();
        let mut steps = plan_updates(&tracked.installed, &desired)
            .into_iter()
            .peekable();
        while steps.peek().is_some() {
            let batch: Vec<Step> = steps.by_ref().take(NODES_PER_BUNDLE).collect();
            if batch.len() > 1 {
                let together = batch
                    .iter()
                    .fold(Change::new(), |c, s| c.and(s.store.clone()));
                if self.store.apply(together).await.is_ok() {
                    for step in batch {
                        record(&mut tracked.installed, step, &mut done);
                    }
                    continue;
                }
                tracing::warn!(
                    nodes = batch.len(),
                    "a bundle of remote node rows was refused; applying them node by node"
                );
            }
            // One node at a time: a node whose rows are refused holds back no other.
            for step in batch {
                if let Err(source) = self.store.apply(step.store.clone()).await {
                    return Err(match &step.change {
                        Some(c) => NodesError::Node {
                            node: c.name().to_string(),
                            source,
                        },
                        None => NodesError::Multicast {
                            vteps: step.multicast.map_or(0, |v| v.len()),
                            source,
                        },
                    });
                }
                record(&mut tracked.installed, step, &mut done);
            }
        }
        Ok(done)
    }
}

/// Node changes applied in one bundle: a cluster of 5,000 nodes arriving at once takes 20
/// bundles, not 5,000 round trips to the switch.
pub(crate) const NODES_PER_BUNDLE: usize = 250;

/// Remembers what a step applied (after its bundle succeeded).
fn record(installed: &mut Installed, step: Step, done: &mut Vec<NodeChange>) {
    if let Some(c) = step.change {
        c.log();
        match &c {
            NodeChange::Added(n) | NodeChange::Changed { to: n, .. } => {
                installed.nodes.insert(n.name.clone(), n.clone());
            }
            NodeChange::Removed(n) => {
                installed.nodes.remove(&n.name);
            }
        }
        done.push(c);
    }
    if let Some(v) = step.multicast {
        // The count, not the list: a large cluster's list is a log line of 100 KB.
        let groups = v.len().div_ceil(flows::VTEPS_PER_GROUP);
        tracing::info!(
            vteps = v.len(),
            groups = if v.len() > flows::VTEPS_IN_ROW {
                groups
            } else {
                0
            },
            "table 111 rewritten for the remote VTEPs"
        );
        installed.vteps = Some(v);
    }
}

impl<S: FlowSwitch + 'static> RemoteNodes<S> {
    /// The feature: every node has remote nodes (in every mode).
    pub(crate) fn feature(ctx: &super::Context<S>) -> Option<Arc<Self>> {
        Some(Arc::new(RemoteNodes::new(
            LocalNode {
                name: ctx.config.node_name.clone(),
                node_ip: ctx.node.node_ip,
                subnet: ctx.node.ipv4.as_ref().map(|v4| v4.local_subnet),
                subnet6: ctx.node.ipv6.as_ref().map(|v6| v6.local_subnet),
            },
            ctx.store.clone(),
            ctx.state.clone(),
        )))
    }
}

/// The tables remote nodes write.
pub(crate) const REMOTE_TABLES: &[flows::Table] = &[
    flows::Table::VxlanIngress,
    flows::Table::RemoteArp,
    flows::Table::RemoteIp,
    flows::Table::MulticastRemote,
];

impl<S: FlowSwitch + 'static> super::NodeFeature for RemoteNodes<S> {
    fn name(&self) -> &'static str {
        "remote-nodes"
    }

    fn tables(&self) -> &'static [flows::Table] {
        REMOTE_TABLES
    }

    fn stage(&self) -> futures::future::BoxFuture<'_, Result<usize, super::FeatureError>> {
        Box::pin(async move { Ok(RemoteNodes::stage(self).await) })
    }

    fn sync(
        &self,
        phase: super::Phase,
        _: super::Reason,
    ) -> futures::future::BoxFuture<'_, Result<(), super::FeatureError>> {
        Box::pin(async move {
            if phase == super::Phase::Apply {
                RemoteNodes::sync(self).await?;
            }
            Ok(())
        })
    }

    fn status(&self) -> futures::future::BoxFuture<'_, String> {
        Box::pin(async move {
            let tracked = self.state.lock().await;
            let skipped = tracked.warned.len();
            let mut line = format!(
                "{} remote node(s) over VXLAN",
                tracked.installed.nodes.len()
            );
            if skipped > 0 {
                line.push_str(&format!(", {skipped} HostSubnet(s) ignored (see the log)"));
            }
            line
        })
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cluster::ClusterObject;
    use flows::MULTICAST_COOKIE;
    use ovs::openflow::BundleMsg;
    use std::net::Ipv4Addr;

    fn local() -> LocalNode {
        LocalNode {
            name: "node-1".into(),
            node_ip: Ipv4Addr::new(192, 168, 77, 11).into(),
            subnet: Some("10.128.0.0/23".parse().unwrap()),
            subnet6: None,
        }
    }

    fn hs(name: &str, ip: &str, subnet: &str) -> HostSubnet {
        let mut h = HostSubnet::new(name, ip, subnet);
        h.metadata.uid = Some(format!("uid-{name}"));
        h
    }

    fn state(subnets: &[HostSubnet]) -> ClusterState {
        let mut st = ClusterState::default();
        for h in subnets {
            st.insert(ClusterObject::HostSubnet(h.clone()));
        }
        st
    }

    fn three() -> Vec<HostSubnet> {
        vec![
            hs("node-1", "192.168.77.11", "10.128.0.0/23"),
            hs("node-2", "192.168.77.12", "10.128.2.0/23"),
            hs("node-3", "192.168.77.13", "10.128.4.0/23"),
        ]
    }

    /// The cookies a step's messages delete and the cookies of the rows it adds.
    fn touched(step: &Step) -> (Vec<u64>, Vec<u64>) {
        let mut del = Vec::new();
        let mut add = Vec::new();
        for m in &step.msgs() {
            match m {
                BundleMsg::Flow(fm) if fm.command.is_delete() => {
                    assert_eq!(fm.cookie_mask, u64::MAX, "deletes select one cookie");
                    del.push(fm.flow.cookie);
                }
                BundleMsg::Flow(fm) => add.push(fm.flow.cookie),
                BundleMsg::Group(..) => panic!("no groups"),
            }
        }
        (del, add)
    }

    #[test]
    fn own_node_is_not_remote_and_cookies_come_from_uids() {
        let set = RemoteSet::from_state(&state(&three()), &local());
        assert_eq!(
            set.nodes.keys().collect::<Vec<_>>(),
            ["node-2", "node-3"],
            "{set:?}"
        );
        assert!(set.skipped.is_empty());
        assert_eq!(set.nodes["node-2"].cookie, node_cookie("uid-node-2"));
        let mut no_uid = hs("node-4", "192.168.77.14", "10.128.6.0/23");
        no_uid.metadata.uid = None;
        let set = RemoteSet::from_state(&state(&[no_uid]), &local());
        assert_eq!(set.nodes["node-4"].cookie, node_cookie("node-4"));
        let text: Vec<String> = set.flows().iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 4);
        assert!(text[3].starts_with("cookie=0x2000000000000000, table=111"));
        assert!(text[3].contains("set_field:192.168.77.14->tun_dst,output:1,goto_table:120"));
    }

    #[test]
    fn unusable_host_subnets_are_skipped_with_a_reason() {
        let mut subnets = three();
        subnets.push(hs("zz-dup", "192.168.77.12", "10.128.8.0/23"));
        subnets.push(hs("self-ip", "192.168.77.11", "10.128.10.0/23"));
        subnets.push(hs("overlap", "192.168.77.20", "10.128.0.0/24"));
        subnets.push(hs("bad", "not-an-ip", "10.128.12.0/23"));
        let set = RemoteSet::from_state(&state(&subnets), &local());
        assert_eq!(
            set.nodes.keys().collect::<Vec<_>>(),
            ["node-2", "node-3"],
            "{set:?}"
        );
        // Of two HostSubnets with one hostIP, the name sorting first keeps it.
        let skipped: Vec<&String> = set.skipped.keys().collect();
        assert_eq!(skipped, ["bad", "overlap", "self-ip", "zz-dup"], "{set:?}");
        assert!(set.skipped["zz-dup"].contains("node-2"), "{set:?}");
        assert!(set.skipped["self-ip"].contains("own address"));
        assert!(set.skipped["overlap"].contains("overlaps"));
    }

    #[test]
    fn first_plan_adds_every_node_and_the_multicast_row() {
        let desired = RemoteSet::from_state(&state(&three()), &local());
        let steps = plan_updates(&Installed::default(), &desired);
        assert_eq!(steps.len(), 2);
        let (del, add) = touched(&steps[1]);
        let c3 = node_cookie("uid-node-3");
        assert_eq!(del, [c3]);
        assert_eq!(add, [c3, c3, c3, MULTICAST_COOKIE]);
        assert_eq!(
            steps[1].multicast,
            Some(desired.vteps()),
            "table 111 rides with the last node"
        );
    }

    #[test]
    fn a_moved_host_ip_touches_only_that_node_and_table_111() {
        let before = RemoteSet::from_state(&state(&three()), &local());
        let installed = Installed {
            nodes: before.nodes.clone(),
            vteps: Some(before.vteps()),
        };
        assert!(
            plan_updates(&installed, &before).is_empty(),
            "no change, no bundle"
        );
        let mut moved = three();
        moved[2].host_ip = "192.168.77.23".into();
        let after = RemoteSet::from_state(&state(&moved), &local());
        let steps = plan_updates(&installed, &after);
        assert_eq!(steps.len(), 1, "{steps:?}");
        let c3 = node_cookie("uid-node-3");
        let (del, add) = touched(&steps[0]);
        assert_eq!(del, [c3]);
        assert_eq!(add, [c3, c3, c3, MULTICAST_COOKIE]);
        assert!(
            matches!(&steps[0].change, Some(NodeChange::Changed { from, to })
            if from.host_ip == Ipv4Addr::new(192, 168, 77, 13) && to.host_ip == Ipv4Addr::new(192, 168, 77, 23))
        );
        // A subnet change keeps the VTEP set: no table-111 rewrite.
        let mut resubnetted = three();
        resubnetted[1].subnet = "10.128.20.0/23".into();
        let steps = plan_updates(
            &installed,
            &RemoteSet::from_state(&state(&resubnetted), &local()),
        );
        assert_eq!(steps.len(), 1);
        let c2 = node_cookie("uid-node-2");
        assert_eq!(touched(&steps[0]), (vec![c2], vec![c2, c2, c2]));
    }

    #[test]
    fn removal_and_recreation() {
        let before = RemoteSet::from_state(&state(&three()), &local());
        let installed = Installed {
            nodes: before.nodes.clone(),
            vteps: Some(before.vteps()),
        };
        let after = RemoteSet::from_state(&state(&three()[..2]), &local());
        let steps = plan_updates(&installed, &after);
        assert_eq!(steps.len(), 1);
        let c3 = node_cookie("uid-node-3");
        assert_eq!(touched(&steps[0]), (vec![c3], vec![MULTICAST_COOKIE]));
        assert!(matches!(&steps[0].change, Some(NodeChange::Removed(n)) if n.name == "node-3"));
        // Deleted and created again under the same name: a new uid, both cookies cleared in one
        // bundle.
        let mut again = three();
        again[2].metadata.uid = Some("uid-node-3-new".into());
        let steps = plan_updates(&installed, &RemoteSet::from_state(&state(&again), &local()));
        assert_eq!(steps.len(), 1);
        let c3n = node_cookie("uid-node-3-new");
        assert_eq!(touched(&steps[0]), (vec![c3, c3n], vec![c3n, c3n, c3n]));
    }

    #[test]
    fn unknown_multicast_row_is_written_on_its_own() {
        let set = RemoteSet::from_state(&state(&three()), &local());
        let installed = Installed {
            nodes: set.nodes.clone(),
            vteps: None,
        };
        let steps = plan_updates(&installed, &set);
        assert_eq!(steps.len(), 1);
        assert!(steps[0].change.is_none());
        assert_eq!(touched(&steps[0]), (vec![], vec![MULTICAST_COOKIE]));
    }
}
