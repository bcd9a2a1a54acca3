//! The audit log: every isolation decision a namespace asks to have logged (the
//! `k8s.ovn.org/acl-logging` annotation: deny, allow, each at a syslog severity), and every
//! spoofing attempt, as one line per connection in a size-capped, rotated file and optionally
//! a syslog socket.
//!
//! How a decision becomes a line (docs/pipeline.md, "Audit"): the deciding rows of the tenancy
//! (table 80, multitenant mode; this feature's rows, [`flows::audit::tenancy_rows`]), of the
//! NetworkPolicies (tables 27 and 80, the policy feature's rows built with each namespace's
//! setting) and of the egress firewall (table 100, likewise) write what decided into `reg5`
//! and `reg6` and resubmit to table 130, which sends a copy up through a packets/s meter per
//! source-VNID bucket and verdict. This feature creates those meters, keeps the tenancy rows,
//! and runs the reader ([`reader`]): a connection of its own to br0 that asks for packet-ins,
//! resolves each copy against the cluster state and the local pods ([`resolve`]), folds a
//! connection's copies into one line and a count ([`fold`]) and writes ([`sink`]).
//!
//! What it promises: the verdict never depends on the log (the copy is metered, never the
//! packet; the reader drops what it cannot keep up with and counts it); a flood from one
//! namespace fills its own meter, not another's; what the meters and the queue kept from the
//! agent is counted and written as `suppressed` lines; a bad annotation is an ERROR naming it
//! (and a `note` line) and leaves that namespace's logging off, isolation untouched.

mod fold;
mod line;
mod packet;
mod reader;
mod resolve;
mod sink;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::{watch, Mutex};

use cluster::audit::{logged_by_namespace, logged_by_vnid};
use cluster::config::Config;
use cluster::ClusterState;
use flows::audit::{meter_id, meter_ids, tenancy_rows, Logged, BUCKETS};
use flows::{Mode, Table, Vnid};
use ovs::openflow::{Meter, MeterModCommand};

use super::contract::{FeatureError, NodeFeature, Phase, Reason};
use super::network_policy::{LocalPods, NetworkPolicies};
use super::Context;
use crate::bridge::flowstore::{Change, FlowStore, Owner};
use crate::bridge::seams::FlowSwitch;

/// The tables this feature writes (its tenancy rows; table 130 and the spoofing rows are base
/// rows).
pub(crate) const AUDIT_TABLES: &[Table] = &[Table::IngressIsolation];

/// Counters the reader keeps, for `sdnctl status` and the API.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// Lines written.
    pub lines: AtomicU64,
    /// Copies folded into their connection's line.
    pub repeats: AtomicU64,
    /// Copies the meters dropped.
    pub rate_limited: AtomicU64,
    /// Copies the agent's queue dropped.
    pub queue_dropped: AtomicU64,
    /// Whether the reader is connected (1) or not (0).
    pub connected: AtomicU64,
}

/// The audit log (see the module docs).
pub(crate) struct AuditLog<S> {
    store: Arc<FlowStore<S>>,
    state: watch::Receiver<Arc<ClusterState>>,
    mode: Mode,
    ipv4: bool,
    ipv6: bool,
    config: Config,
    local_pods: LocalPods,
    policy: Option<Arc<NetworkPolicies<S>>>,
    gateways: Vec<IpAddr>,
    /// The tenancy rows in effect, by VNID.
    installed: Mutex<BTreeMap<Vnid, Logged>>,
    /// Annotation problems already logged, by namespace.
    problems: std::sync::Mutex<BTreeMap<String, String>>,
    stats: Arc<Stats>,
}

impl<S> std::fmt::Debug for AuditLog<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("file", &self.config.audit_log_file)
            .finish_non_exhaustive()
    }
}

impl<S: FlowSwitch + 'static> AuditLog<S> {
    /// The feature: on every node (spoofing is always logged).
    pub(crate) fn feature(
        ctx: &Context<S>,
        policy: Option<Arc<NetworkPolicies<S>>>,
    ) -> Option<Arc<Self>> {
        let mut gateways: Vec<IpAddr> = Vec::new();
        gateways.extend(ctx.node.gateway().map(IpAddr::from));
        gateways.extend(ctx.node.gateway6().map(IpAddr::from));
        // The node's own address is the node too (a `nodes` peer's lines name it so).
        gateways.push(ctx.node.node_ip);
        Some(Arc::new(AuditLog {
            store: ctx.store.clone(),
            state: ctx.state.clone(),
            mode: ctx.node.mode,
            ipv4: ctx.node.ipv4.is_some(),
            ipv6: ctx.node.ipv6.is_some(),
            config: ctx.config.clone(),
            local_pods: ctx.local_pods.clone(),
            policy,
            gateways,
            installed: Mutex::new(BTreeMap::new()),
            problems: std::sync::Mutex::new(BTreeMap::new()),
            stats: Arc::new(Stats::default()),
        }))
    }

    /// The tenancy rows wanted: multitenant mode only (in networkpolicy mode the policies
    /// decide, and their rows log).
    fn wanted(&self, state: &ClusterState) -> BTreeMap<Vnid, Logged> {
        if self.mode != Mode::Multitenant {
            return BTreeMap::new();
        }
        logged_by_vnid(state)
    }

    fn change(&self, installed: &BTreeMap<Vnid, Logged>, want: &BTreeMap<Vnid, Logged>) -> Change {
        let mut c = Change::new();
        for (v, l) in want {
            if installed.get(v) != Some(l) {
                c = c.set(Owner::Audit(*v), tenancy_rows(*v, *l, self.ipv4, self.ipv6));
            }
        }
        for v in installed.keys().filter(|v| !want.contains_key(v)) {
            c = c.remove(Owner::Audit(*v));
        }
        c
    }

    /// Adds the audit meters the switch lacks and corrects a rate that differs.
    async fn ensure_meters(&self) -> Result<usize, FeatureError> {
        let switch = self.store.switch();
        let have: BTreeMap<u32, Meter> = switch
            .dump_meters()
            .await?
            .into_iter()
            .map(|m| (m.id, m))
            .collect();
        let rate = self.config.audit_rate_limit;
        // A burst of a second's worth (at least 5): a connection's first packets get through
        // a quiet bucket at once.
        let burst = rate.max(5);
        let mut fixed = 0;
        for id in meter_ids() {
            let want = Meter::packets(id, rate, burst)?;
            match have.get(&id) {
                Some(m) if *m == want => {}
                Some(_) => {
                    switch.meter_mod(MeterModCommand::Modify, &want).await?;
                    fixed += 1;
                }
                None => {
                    switch.meter_mod(MeterModCommand::Add, &want).await?;
                    fixed += 1;
                }
            }
        }
        Ok(fixed)
    }

    /// [`Self::ensure_meters`], and when a meter had to be added or changed, the rows that use
    /// it added again: Open vSwitch ties a row's `controller(meter_id=)` to the meter when the
    /// row is added, and a row added while its meter was missing (or whose meter was deleted
    /// and added back) sends its copies unmetered until it is added anew. An add of a row
    /// already there replaces it in place: no packet meets a gap.
    pub(crate) async fn ensure_meters_and_rows(&self) -> Result<usize, FeatureError> {
        let fixed = self.ensure_meters().await?;
        if fixed > 0 {
            tracing::info!(
                meters = fixed,
                "added the audit meters br0 lacked, and their rows again"
            );
            let rows: Vec<ovs::openflow::BundleMsg> = flows::audit::audit_table()
                .into_iter()
                .chain(flows::audit::spoof_rows(self.ipv4, self.ipv6))
                .map(ovs::openflow::BundleMsg::add)
                .collect();
            self.store.switch().bundle(&rows).await?;
        }
        Ok(fixed)
    }

    /// Logs each annotation problem once (and again if it changes).
    fn report_problems(&self, state: &ClusterState) {
        let mut seen = crate::lock(&self.problems);
        let now = annotation_problems(state);
        for (what, p) in &now {
            if seen.get(what) != Some(p) {
                tracing::error!(object = %what, problem = %p, "audit logging annotation of {what} is not usable as written; fix it (isolation is not affected)");
            }
        }
        *seen = now;
    }
}

/// What is wrong with each `k8s.ovn.org/acl-logging` annotation, by what carries it
/// (`namespace NAME`, `ClusterNetworkPolicy NAME`).
fn annotation_problems(state: &ClusterState) -> BTreeMap<String, String> {
    let namespaces = state
        .audit_logging
        .iter()
        .map(|(ns, s)| (format!("namespace {ns}"), s));
    let policies = state
        .cluster_policy_logging
        .iter()
        .map(|(name, s)| (format!("ClusterNetworkPolicy {name}"), s));
    namespaces
        .chain(policies)
        .filter_map(|(what, s)| s.problem.clone().map(|p| (what, p)))
        .collect()
}

impl<S: FlowSwitch + 'static> NodeFeature for AuditLog<S> {
    fn name(&self) -> &'static str {
        "audit-log"
    }

    fn tables(&self) -> &'static [Table] {
        AUDIT_TABLES
    }

    fn stage(&self) -> BoxFuture<'_, Result<usize, FeatureError>> {
        Box::pin(async move {
            // The meters come with every reconcile of br0, before the rows that use them
            // ([`Self::ensure_meters_and_rows`]).
            let state = self.state.borrow().clone();
            self.report_problems(&state);
            let want = self.wanted(&state);
            let mut installed = self.installed.lock().await;
            let n = want.len();
            self.store.stage(self.change(&installed, &want)).await;
            *installed = want;
            Ok(n)
        })
    }

    fn sync(&self, phase: Phase, _: Reason) -> BoxFuture<'_, Result<(), FeatureError>> {
        Box::pin(async move {
            if phase != Phase::Apply {
                return Ok(());
            }
            let state = self.state.borrow().clone();
            self.report_problems(&state);
            let want = self.wanted(&state);
            let mut installed = self.installed.lock().await;
            if *installed == want {
                return Ok(());
            }
            self.store.apply(self.change(&installed, &want)).await?;
            for (v, l) in &want {
                if installed.get(v) != Some(l) {
                    tracing::info!(vnid = v.id(), deny = l.deny, allow = l.allow, namespaces = %state.namespaces_of(v.id()).join(","), "audit logging of the tenant boundary changed");
                }
            }
            *installed = want;
            Ok(())
        })
    }

    fn background(self: Arc<Self>) -> Vec<BoxFuture<'static, ()>> {
        vec![Box::pin(reader::run(reader::Reader {
            node: self.config.node_name.clone(),
            mgmt: self.config.bridge_mgmt.clone(),
            state: self.state.clone(),
            local_pods: self.local_pods.clone(),
            policy: self
                .policy
                .clone()
                .map(|p| Arc::new(move || p.view()) as Arc<dyn Fn() -> _ + Send + Sync>),
            gateways: self.gateways.clone(),
            config: self.config.clone(),
            stats: self.stats.clone(),
        }))]
    }

    fn observe(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let n = logged_by_namespace(&self.state.borrow()).len();
            crate::telemetry::metrics::metrics()
                .audit_namespaces
                .set(n as i64);
        })
    }

    fn status(&self) -> BoxFuture<'_, String> {
        Box::pin(async move {
            let state = self.state.borrow().clone();
            let on = logged_by_namespace(&state);
            let s = &self.stats;
            format!(
                "{} namespace(s) log decisions ({}); {} line(s) written to {}; packets folded into their connection's line {}, kept back by the rate limit ({}/s per bucket) {}, by a full queue {}{}",
                on.len(),
                if on.is_empty() { "spoofing attempts only".to_string() } else { on.keys().cloned().collect::<Vec<_>>().join(", ") },
                s.lines.load(Ordering::Relaxed),
                self.config.audit_log_file.display(),
                s.repeats.load(Ordering::Relaxed),
                s.rate_limited.load(Ordering::Relaxed),
                self.config.audit_rate_limit,
                s.queue_dropped.load(Ordering::Relaxed),
                if s.connected.load(Ordering::Relaxed) == 1 { "" } else { "; not receiving from br0 (reconnecting)" },
            )
        })
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

/// The meter bucket of a VNID (the low bits table 130 matches).
pub(crate) fn bucket_of(vnid: u32) -> u32 {
    vnid % BUCKETS
}

/// The verdict and bucket of an audit meter id (`None` for the spoofing meter and others).
pub(crate) fn meter_bucket(id: u32) -> Option<(bool, u32)> {
    (0..BUCKETS).find_map(|b| {
        if meter_id(false, b) == id {
            Some((false, b))
        } else if meter_id(true, b) == id {
            Some((true, b))
        } else {
            None
        }
    })
}
