//! The contract every node feature implements ([`NodeFeature`]), and the list the daemon holds
//! ([`Features`]): start-up stages every feature, the loops sync and repair every feature, the
//! scrape and `sdnctl status` ask every feature, each in registration order.
//!
//! Why one contract: each feature had its own entry points (`sync(prune)`, `sync(stage,
//! prune) -> anyhow::Result`, `stage() -> usize`...), and adding one meant editing the daemon's
//! struct, the node view that mirrors it, start-up, the loops and their eight copies of the
//! same warning. Now a feature is one file in `features/` and one line in
//! [`super::register`]; the daemon and the views only ever see the list. Antrea's agent has
//! the same shape (a feature interface with its tables, initial flows and replay); kube-rs's
//! controllers one `reconcile` with a typed reason.
//!
//! What a feature says about itself: its name (logs, `sdnctl status`), the tables it writes
//! (this module's tests hold each feature to the tables of the rows its builders make), how it
//! stages its rows for the first reconcile, how it follows a new
//! cluster state in two phases around the pods' VNID moves ([`Phase`]), what a repair checks
//! besides ([`NodeFeature::repair`]), the tasks it runs in the background, its gauges at a
//! scrape and its line in `sdnctl status`. Its rows come from a pure planner over a snapshot
//! of the cluster state, named in its file (`remote::RemoteSet::from_state`,
//! `egress_firewall::plan`, `egress_ip::plan`, `network_policy`'s `Inputs`); the flow store
//! keeps them by owner.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;

use flows::Table;

use super::network_policy::PodPolicy;

/// Why the node is being brought in line: the start-up, a new cluster state, or a repair.
/// Shown in logs and as the `reason` label of the reconcile metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The start-up reconcile.
    Start,
    /// The cluster state changed (beyond the pods).
    StateChange,
    /// The periodic safety net (every 30 s).
    Periodic,
    /// Flows changed behind the agent's back (the flow monitor saw it).
    FlowDrift,
    /// The OpenFlow connection was re-opened: ovs-vswitchd restarted, flows possibly lost.
    SwitchRestart,
}

impl Reason {
    /// The reason's name in logs, metrics and `sdnctl status`.
    pub fn label(self) -> &'static str {
        match self {
            Reason::Start => "start",
            Reason::StateChange => "state-change",
            Reason::Periodic => "periodic",
            Reason::FlowDrift => "flow-drift",
            Reason::SwitchRestart => "switch-restart",
        }
    }

    /// Whether this is a repair (not a change of the cluster state).
    pub fn is_repair(self) -> bool {
        matches!(
            self,
            Reason::Periodic | Reason::FlowDrift | Reason::SwitchRestart
        )
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// The two phases of following a new cluster state. A namespace that moves to another VNID
/// must find the new VNID's rows (egress firewall, egress IP, multicast) in place before its
/// pods move, and the old VNID's must stay until they have moved, so its traffic is never
/// unfiltered or sent out with the node's address in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before the pods move: add and change rows, remove nothing a pod may still use.
    Apply,
    /// After the pods' VNID moves: with `moved`, every pod moved and what nothing needs may
    /// go; without, some did not (retried at the next repair) and nothing may go yet.
    After {
        /// Whether every pod moved.
        moved: bool,
    },
}

impl Phase {
    /// Whether rows nothing needs may be removed now.
    pub fn prunes(self) -> bool {
        self == Phase::After { moved: true }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Apply => "applying",
            Phase::After { .. } => "finishing",
        })
    }
}

/// Why a feature's sync failed: its own error, boxed (every feature has a typed one).
pub type FeatureError = Box<dyn std::error::Error + Send + Sync>;

/// A node feature (see the module docs). Methods with a default do nothing.
pub trait NodeFeature: Any + Send + Sync + fmt::Debug {
    /// Its name, in logs and `sdnctl status` (`remote-nodes`, `multicast`...).
    fn name(&self) -> &'static str;

    /// The tables it writes rows into.
    fn tables(&self) -> &'static [Table];

    /// Start-up, before the pod table is rebuilt and anything else on the node changes: what
    /// the feature keeps on the host (the egress IPs' rules and addresses), so a node that
    /// cannot have it is refused before it is touched.
    fn prepare_host(&self) -> BoxFuture<'_, Result<(), FeatureError>> {
        Box::pin(async { Ok(()) })
    }

    /// Start-up, before serving: its rows for the first reconcile, staged in the flow store.
    /// Returns how many objects it staged, for the start-up log.
    fn stage(&self) -> BoxFuture<'_, Result<usize, FeatureError>>;

    /// Start-up, after serving and before the first reconcile: waits for what its rows need
    /// (at most a bounded time) and stages them again.
    fn settle(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// Follows the cluster state for `reason`, in `phase`. Idempotent: called on every change
    /// and every repair, it changes only what differs.
    fn sync(&self, phase: Phase, reason: Reason) -> BoxFuture<'_, Result<(), FeatureError>>;

    /// On every repair, before the sync: what it keeps outside the flows (host addresses,
    /// rules) checked and put back.
    fn repair(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// Tasks that run while the agent does (probes, DNS, a policy rebuild loop), started
    /// once the node serves and stopped with it.
    fn background(self: Arc<Self>) -> Vec<BoxFuture<'static, ()>> {
        Vec::new()
    }

    /// At a scrape: sets its gauges from its state.
    fn observe(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// Its line in `sdnctl status`: what it does now, in words.
    fn status(&self) -> BoxFuture<'_, String>;

    /// The hook the pod logic asks when a pod is wired (network policies).
    fn pod_policy(self: Arc<Self>) -> Option<Arc<dyn PodPolicy>> {
        None
    }

    /// Itself, for [`Features::get`].
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

/// The node's features, in registration order ([`super::register`]).
#[derive(Debug, Clone, Default)]
pub struct Features(Vec<Arc<dyn NodeFeature>>);

impl Features {
    /// Adds a feature (none when the node's mode does not use it).
    pub fn add<F: NodeFeature>(&mut self, feature: Option<Arc<F>>) {
        if let Some(f) = feature {
            self.0.push(f);
        }
    }

    /// Every feature, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn NodeFeature>> {
        self.0.iter()
    }

    /// The feature of type `F`, where a part needs its own answers (the local API's egress IP
    /// and policy views, trace).
    pub fn get<F: NodeFeature>(&self) -> Option<Arc<F>> {
        self.0
            .iter()
            .find_map(|f| f.clone().as_any().downcast::<F>().ok())
    }

    /// Prepares the host for every feature (see [`NodeFeature::prepare_host`]).
    pub async fn prepare_host(&self) -> Result<(), (&'static str, FeatureError)> {
        for f in &self.0 {
            f.prepare_host().await.map_err(|e| (f.name(), e))?;
        }
        Ok(())
    }

    /// Stages every feature; returns each one's count, by name. The first failure stops
    /// start-up (a feature that cannot stage would start the node without its rows).
    pub async fn stage(&self) -> Result<Vec<(&'static str, usize)>, (&'static str, FeatureError)> {
        let mut out = Vec::new();
        for f in &self.0 {
            let n = f.stage().await.map_err(|e| (f.name(), e))?;
            out.push((f.name(), n));
        }
        Ok(out)
    }

    /// Lets every feature settle (see [`NodeFeature::settle`]).
    pub async fn settle(&self) {
        for f in &self.0 {
            f.settle().await;
        }
    }

    /// Syncs every feature in `phase`; a failure is logged, once, with the feature's name, and
    /// retried at the next change or repair (syncs are idempotent). Returns how many failed.
    pub async fn sync(&self, phase: Phase, reason: Reason) -> usize {
        let mut failed = 0;
        for f in &self.0 {
            if let Err(e) = f.sync(phase, reason).await {
                failed += 1;
                tracing::warn!(
                    feature = f.name(), %phase, %reason, error = %chain(e.as_ref()),
                    "{phase} {} changes failed; retrying at the next change or repair", f.name()
                );
            }
        }
        failed
    }

    /// Every feature's repair (see [`NodeFeature::repair`]).
    pub async fn repair(&self) {
        for f in &self.0 {
            f.repair().await;
        }
    }

    /// Starts every feature's background tasks.
    pub fn start_background(&self) -> Vec<tokio::task::JoinHandle<()>> {
        self.0
            .iter()
            .flat_map(|f| f.clone().background())
            .map(tokio::spawn)
            .collect()
    }

    /// Every feature's gauges.
    pub async fn observe(&self) {
        for f in &self.0 {
            f.observe().await;
        }
    }

    /// Every feature's status line, by name.
    pub async fn status(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for f in &self.0 {
            out.push((f.name(), f.status().await));
        }
        out
    }

    /// The pod hooks of the features that have one.
    pub fn pod_policies(&self) -> Vec<Arc<dyn PodPolicy>> {
        self.0
            .iter()
            .filter_map(|f| f.clone().pod_policy())
            .collect()
    }
}

pub use cluster::error_chain as chain;

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::net::Ipv4Addr;

    use flows::{Table, Vnid};

    fn tables(rows: &[ovs::flow::Flow]) -> BTreeSet<u8> {
        rows.iter().map(|f| f.table).collect()
    }

    fn claimed(t: &[Table]) -> BTreeSet<u8> {
        t.iter().map(|t| t.id()).collect()
    }

    /// Each feature's rows land in the tables it says it writes (network policy's rows are
    /// held to the register registry in `flows`, and to traffic in `tests/`).
    #[test]
    fn each_feature_claims_the_tables_its_rows_are_in() {
        let v = Vnid::new(10).unwrap();
        let vtep = Ipv4Addr::new(172, 17, 0, 3);
        let mut remote = flows::remote_node_flows(&flows::RemoteNodeFlows {
            host_ip: vtep.into(),
            subnet: Some("10.128.2.0/23".parse().unwrap()),
            subnet6: Some("fd01:0:0:2::/64".parse().unwrap()),
            cookie: 1,
        });
        remote.push(flows::multicast_remote(&BTreeSet::from([vtep.into()])).0);
        assert_eq!(
            tables(&remote),
            claimed(super::super::remote::REMOTE_TABLES)
        );
        let firewall = flows::egress_firewall_flows(
            v,
            &flows::EgressFirewall::Rules(vec![flows::EgressRule {
                allow: true,
                dns: false,
                to: vec!["192.0.2.0/24".parse().unwrap()],
            }]),
            true,
        );
        assert_eq!(
            tables(&firewall),
            claimed(super::super::egress_firewall::FIREWALL_TABLES)
        );
        let multicast = flows::multicast_tenant_flows(v, &BTreeSet::from([3]));
        assert_eq!(
            tables(&multicast),
            claimed(super::super::multicast::MULTICAST_TABLES)
        );
        let mac = ovs::flow::MacAddr::from_pod_ip(Ipv4Addr::new(10, 128, 0, 1));
        let egress_ip = {
            let r = flows::EgressRoute::Remote(vec![vtep.into()]);
            flows::egress_ip_flows(v, Some(&r), Some(&r), mac).0
        };
        assert_eq!(
            tables(&egress_ip),
            claimed(super::super::egress_ip::EGRESS_IP_TABLES)
        );
    }
}
