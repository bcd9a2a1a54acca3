//! Keeps tables 27, 28, 80 and 81 equal to what the cluster's policies say about this node's
//! pods: in networkpolicy mode its NetworkPolicies and ClusterNetworkPolicies, in multitenant
//! mode its ClusterNetworkPolicies alone, around tenancy (docs/pipeline.md, "NetworkPolicy" and
//! "ClusterNetworkPolicy").
//!
//! The rows are pure (`flows::policy`); this module decides when to rebuild them and how they
//! reach the bridge:
//!
//! - **Event-driven, no rate limit.** A rebuild runs when the cluster state changes or a local
//!   pod comes or goes, and only when what policies read changed: the policies, namespace
//!   labels and VNIDs, and each pod's labels, address and named ports ([`Inputs`] compares
//!   them; a pod's status or annotations changing costs one comparison). Events that arrive
//!   during a rebuild are taken by the next one, so a burst costs two rebuilds, not one per
//!   event (openshift-sdn rate-limited to one per second instead).
//! - **By difference, only where a rule looks.** The rows are kept by
//!   `flows::policy::PolicyEngine`, which takes what changed namespaces gave each rule out and
//!   what they give now in: a pod event where no rule of this node looks costs a selector match
//!   per rule, one where a rule looks costs that namespace's pods, and only the rows whose
//!   clauses changed reach the switch (`Change::patch`). The churn of a 150,000-pod cluster
//!   costs this node little whatever its policies select. The policies' conjunction ids and
//!   the namespace views are kept while the state's maps are the same objects.
//! - **One bundle per change.** Every pod whose target rows changed and the shared rows that
//!   changed go in one [`Change`]: no packet sees half a policy.
//! - **A pod is isolated from its first packet.** An ADD asks [`PodPolicy::rows`] for the new
//!   pod's own rows and installs them in the bundle that installs the pod's flows; a pod a
//!   policy selects never takes a warm port (whose flows are in before the ADD). The pod's
//!   address joins other pods' peer sets at the next rebuild, as a remote pod's does later.
//! - A pod's rows die with its port's flows (the flow store ties them, see
//!   `Owner::PolicyTarget`), so a rebuild racing a DEL never leaves rows on a reused ofport.
//!
//! Local pods' addresses come from the agent's own pod table (the API server learns them later);
//! an API pod claiming an address of this node's subnet that the table does not give it (an old
//! pod whose status is stale) is ignored.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flows::policy::{Isolation, LocalPod, NamespaceView, PodView, PolicyEngine, Snapshot};
use flows::{policy_target_cookie, ConjunctionIds, Datapath, RuleRef};
use futures::future::BoxFuture;
use ipnet::Ipv4Net;
use multitenant::cluster_policy::ClusterPolicy;
use multitenant::policy::{namespace_labels, Policy};
use ovs::flow::Flow;
use ovs::openflow::OfError;
use tokio::sync::{watch, Notify};

use crate::bridge::flowstore::{Change, FlowStore, Owner};
use crate::bridge::seams::FlowSwitch;
use cluster::ClusterState;

/// A local pod, as the pod table knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalPodRef {
    /// Its OVS port's name.
    pub port: String,
    /// Its ofport.
    pub ofport: u32,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its IPv4 address (none on an IPv6-only cluster).
    pub ip: Option<Ipv4Addr>,
    /// Its IPv6 address (dual stack, IPv6-only).
    pub ip6: Option<std::net::Ipv6Addr>,
}

/// What the pod logic asks of the policies.
pub trait PodPolicy: Send + Sync + fmt::Debug {
    /// Whether a policy selects pod `namespace/name` now (such a pod takes no warm port).
    fn selects(&self, namespace: &str, name: &str) -> bool;
    /// The policy rows of a local pod being wired (empty when no policy selects it).
    fn rows(&self, pod: &LocalPodRef) -> Vec<Flow>;
    /// A local pod came or went: rebuild soon.
    fn changed(&self);
}

/// Lists the local pods (the pod table).
pub(crate) type LocalPods = Arc<dyn Fn() -> BoxFuture<'static, Vec<LocalPodRef>> + Send + Sync>;

/// What the rows are built from: the engine's snapshot, and the port name of each local pod
/// (by ofport), which owns its rows in the flow store.
#[derive(Clone, Debug, Default)]
struct Inputs {
    snap: Snapshot,
    ports: BTreeMap<u32, String>,
}

/// What inputs take from the cluster state's policies and namespaces, kept while those maps
/// are the same objects: a cluster of 5,000 namespaces and 10,000 policies is not copied at
/// every pod event or ADD.
struct Derived {
    policies_of: Arc<BTreeMap<String, Policy>>,
    cluster_of: Arc<BTreeMap<String, ClusterPolicy>>,
    labels_of: Arc<BTreeMap<String, multitenant::policy::Labels>>,
    net_namespaces_of: Arc<BTreeMap<String, cluster::NetNamespace>>,
    shared: Shared,
}

/// The parts of [`Inputs`] derived from the state's policies and namespaces.
#[derive(Clone)]
struct Shared {
    policies: Arc<Vec<Policy>>,
    cluster: Arc<Vec<ClusterPolicy>>,
    ids: Arc<ConjunctionIds>,
    namespaces: Arc<BTreeMap<String, NamespaceView>>,
}

/// A namespace as policies see it.
fn namespace_view(state: &ClusterState, name: &str) -> NamespaceView {
    let empty = BTreeMap::new();
    NamespaceView {
        labels: namespace_labels(name, state.namespace_labels.get(name).unwrap_or(&empty)),
        vnid: state.vnid(name),
    }
}

/// What the last rebuild did, for `sdnctl`, the metrics and `sdnctl trace`.
#[derive(Clone, Debug, Default)]
pub(crate) struct PolicyView {
    /// Multitenant mode: only ClusterNetworkPolicies, around tenancy.
    pub multitenant: bool,
    /// Policies in the cluster state.
    pub policies: usize,
    /// Policies that select a pod of this node.
    pub active: BTreeSet<String>,
    /// ClusterNetworkPolicies in the cluster state.
    pub cluster_policies: usize,
    /// Those with rows for a pod of this node, as `name (TIER tier, priority P)`.
    pub cluster_active: BTreeSet<String>,
    /// What each conjunction id stands for.
    pub rules: BTreeMap<u32, RuleRef>,
    /// The single-dimension allow rules per (direction, ofport).
    pub plain: BTreeMap<(multitenant::policy::Direction, u32), Vec<RuleRef>>,
    /// Isolated local pods by ofport.
    pub isolated: BTreeMap<u32, Isolation>,
    /// The pod (`namespace/name`) on each ofport.
    pub pods: BTreeMap<u32, String>,
    /// Rows per local pod (ofport) and shared.
    pub target_rows: usize,
    /// Shared rows.
    pub shared_rows: usize,
    /// The inputs of these rows (for [`PolicyView::cross_product_rows`], computed on demand:
    /// it walks every pod for every rule).
    inputs: Arc<Inputs>,
    /// Rebuilds that changed the bridge, and the last one's duration.
    pub rebuilds: u64,
    /// The last rebuild's time (inputs to bundle accepted).
    pub last_rebuild: Duration,
}

impl PolicyView {
    /// What openshift-sdn's cross product would have installed for the same policies and pods
    /// (`local_targets`: had it counted only this node's pods as targets).
    pub(crate) fn cross_product_rows(&self, local_targets: bool) -> usize {
        flows::policy::cross_product_rows(self.inputs.snap.input(), local_targets)
    }
}

/// The NetworkPolicy rows of this node (see the module docs).
pub(crate) struct NetworkPolicies<S> {
    store: Arc<FlowStore<S>>,
    cluster: watch::Receiver<Arc<ClusterState>>,
    /// This node's pod subnets (IPv4, IPv6).
    local_subnet: (Option<Ipv4Net>, Option<ipnet::Ipv6Net>),
    datapath: Datapath,
    /// Multitenant mode: only ClusterNetworkPolicies apply (around tenancy); NetworkPolicies
    /// are not this mode's (as in openshift-sdn's multitenant mode).
    multitenant: bool,
    local_pods: LocalPods,
    /// The policies and namespaces of the last state seen, as inputs take them.
    derived: std::sync::Mutex<Option<Derived>>,
    /// The rows on the bridge, kept by difference.
    engine: tokio::sync::Mutex<PolicyEngine>,
    view: std::sync::Mutex<Arc<PolicyView>>,
    wake: Notify,
    /// A rebuild changed the bridge: purge the datapath flows a moment later (see
    /// [`NetworkPolicies::run`]).
    settle: Notify,
    /// ovs-vswitchd's run directory (its control socket).
    ovs_rundir: std::path::PathBuf,
}

impl<S> fmt::Debug for NetworkPolicies<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetworkPolicies")
            .field("local_subnet", &self.local_subnet)
            .finish_non_exhaustive()
    }
}

impl<S: FlowSwitch> NetworkPolicies<S> {
    /// The policies of `node` (its pod subnets, datapath and mode), whose pods `local_pods`
    /// lists, on the ovs-vswitchd whose control socket is in `ovs_rundir`.
    pub(crate) fn new(
        store: Arc<FlowStore<S>>,
        cluster: watch::Receiver<Arc<ClusterState>>,
        node: &flows::NodeConfig,
        local_pods: LocalPods,
        ovs_rundir: std::path::PathBuf,
    ) -> NetworkPolicies<S> {
        NetworkPolicies {
            store,
            cluster,
            local_subnet: (
                node.ipv4.as_ref().map(|v4| v4.local_subnet),
                node.ipv6.as_ref().map(|v6| v6.local_subnet),
            ),
            datapath: node.datapath,
            multitenant: node.mode == flows::Mode::Multitenant,
            local_pods,
            engine: tokio::sync::Mutex::new(PolicyEngine::new()),
            derived: std::sync::Mutex::new(None),
            view: std::sync::Mutex::default(),
            wake: Notify::new(),
            settle: Notify::new(),
            ovs_rundir,
        }
    }

    /// What the last rebuild did.
    pub(crate) fn view(&self) -> Arc<PolicyView> {
        crate::lock(&self.view).clone()
    }

    /// The inputs from the cluster state and the local pods.
    fn inputs(&self, state: &ClusterState, local: &[LocalPodRef]) -> Inputs {
        let Shared {
            policies,
            cluster,
            ids,
            mut namespaces,
        } = self.derived(state);
        // A local pod's namespace that the state does not know (no Namespace object).
        if local.iter().any(|l| !namespaces.contains_key(&l.namespace)) {
            let more = Arc::make_mut(&mut namespaces);
            for l in local {
                if !more.contains_key(&l.namespace) {
                    more.insert(l.namespace.clone(), namespace_view(state, &l.namespace));
                }
            }
        }
        let mut local_out = Vec::new();
        let mut ports = BTreeMap::new();
        for l in local {
            let info = state.pod(&l.namespace, &l.name);
            let view = PodView {
                namespace: l.namespace.clone(),
                name: l.name.clone(),
                labels: Arc::new(info.map(|i| i.labels.clone()).unwrap_or_default()),
                ip: l.ip,
                ip6: l.ip6,
                ports: info
                    .map(|i| i.ports.as_slice().into())
                    .unwrap_or_else(|| Arc::from([])),
            };
            local_out.push(LocalPod {
                pod: view,
                ofport: l.ofport,
                cookie: policy_target_cookie(&l.port),
                ip6: l.ip6,
            });
            ports.insert(l.ofport, l.port.clone());
        }
        local_out.sort_by_key(|l| l.ofport);
        Inputs {
            snap: Snapshot {
                policies,
                cluster_policies: cluster,
                ids,
                namespaces,
                pods: state.peer_pods.clone(),
                local_subnet: self.local_subnet.0,
                local_subnet6: self.local_subnet.1,
                ipv6: local_out.iter().any(|l| l.ip6.is_some()),
                ipv4: self.local_subnet.0.is_some(),
                local: Arc::new(local_out),
                datapath: self.datapath,
                multitenant: self.multitenant,
                pods_listed: state.peer_pods_listed,
                nodes: state.nodes_listed.then(|| state.nodes.clone()),
                logged: Arc::new(cluster::audit::logged_by_namespace(state)),
            },
            ports,
        }
    }

    /// The policies and namespace views of `state`, from [`Derived`] while its maps are the
    /// same objects.
    fn derived(&self, state: &ClusterState) -> Shared {
        let mut guard = crate::lock(&self.derived);
        let d = guard.get_or_insert_with(|| Derived {
            policies_of: Arc::default(),
            cluster_of: Arc::default(),
            labels_of: Arc::default(),
            net_namespaces_of: Arc::default(),
            shared: Shared {
                policies: Arc::default(),
                cluster: Arc::default(),
                ids: Arc::default(),
                namespaces: Arc::default(),
            },
        });
        // Each part again only when its own source changed: a namespace event does not hash
        // 10,000 policies' rule keys, a policy event does not rebuild 5,000 namespace views.
        if !Arc::ptr_eq(&d.policies_of, &state.network_policies)
            || !Arc::ptr_eq(&d.cluster_of, &state.cluster_policies)
        {
            let policies: Vec<Policy> = if self.multitenant {
                Vec::new()
            } else {
                state.network_policies.values().cloned().collect()
            };
            let cluster: Vec<ClusterPolicy> = state.cluster_policies.values().cloned().collect();
            d.shared.ids = Arc::new(flows::conjunction_ids(&policies, &cluster));
            d.shared.policies = Arc::new(policies);
            d.shared.cluster = Arc::new(cluster);
            d.policies_of = state.network_policies.clone();
            d.cluster_of = state.cluster_policies.clone();
        }
        if !Arc::ptr_eq(&d.labels_of, &state.namespace_labels)
            || !Arc::ptr_eq(&d.net_namespaces_of, &state.net_namespaces)
        {
            let mut names: BTreeSet<&str> =
                state.namespace_labels.keys().map(String::as_str).collect();
            names.extend(state.net_namespaces.keys().map(String::as_str));
            d.shared.namespaces = Arc::new(
                names
                    .into_iter()
                    .map(|n| (n.to_string(), namespace_view(state, n)))
                    .collect(),
            );
            d.labels_of = state.namespace_labels.clone();
            d.net_namespaces_of = state.net_namespaces.clone();
        }
        d.shared.clone()
    }

    /// Brings the rows to the cluster state and the local pods, and applies what changed in
    /// one bundle. Returns whether the bridge changed.
    pub(crate) async fn sync(&self) -> Result<bool, OfError> {
        let local = (self.local_pods)().await;
        let mut engine = self.engine.lock().await;
        let state = self.cluster.borrow().clone();
        let inputs = self.inputs(&state, &local);
        if engine.snapshot() == Some(&inputs.snap) {
            return Ok(false);
        }
        let began = Instant::now();
        let delta = engine.update(inputs.snap.clone());
        let change = self.change_to(&inputs, &engine, &delta).await;
        let changed = !change.is_empty();
        // The view goes first: the audit log names a new row's policy from it, and the row's
        // first copy may come as soon as the bundle is in.
        let old = self.view();
        self.publish(&inputs, &engine, began.elapsed(), changed);
        if let Err(e) = self.store.apply(change).await {
            *crate::lock(&self.view) = old;
            // The bridge did not take the difference: the next sync starts from nothing.
            engine.reset();
            return Err(e);
        }
        let took = began.elapsed();
        (crate::telemetry::metrics::metrics().policy_rebuild_seconds).observe(took.as_secs_f64());
        if changed {
            self.settle.notify_one();
            let level_info = delta.targets_changed || delta.from_nothing;
            let rows_changed = delta.upserts.len() + delta.deletes.len();
            if level_info {
                tracing::info!(
                    policies = inputs.snap.policies.len(),
                    active = self.view().active.len(),
                    isolated_pods = engine.isolated().len(),
                    rules = engine.rules().len(),
                    target_rows = engine.targets().values().map(Vec::len).sum::<usize>(),
                    shared_rows = engine.shared_len(),
                    shared_rows_changed = rows_changed,
                    ms = took.as_millis(),
                    "network policy rows applied"
                );
            } else {
                tracing::debug!(
                    shared_rows = engine.shared_len(),
                    shared_rows_changed = rows_changed,
                    ms = took.as_millis(),
                    "network policy peer rows applied"
                );
            }
        }
        Ok(changed)
    }

    /// Computes the rows and records them without touching the switch (start-up, before the
    /// first reconcile).
    pub(crate) async fn stage(&self) {
        let local = (self.local_pods)().await;
        let mut engine = self.engine.lock().await;
        let state = self.cluster.borrow().clone();
        let inputs = self.inputs(&state, &local);
        let began = Instant::now();
        let delta = engine.update(inputs.snap.clone());
        let change = self.change_to(&inputs, &engine, &delta).await;
        self.store.stage(change).await;
        self.publish(&inputs, &engine, began.elapsed(), false);
    }

    /// The change that takes the store's policy rows to the engine's, given what its last
    /// update changed.
    async fn change_to(
        &self,
        inputs: &Inputs,
        engine: &PolicyEngine,
        delta: &flows::policy::Delta,
    ) -> Change {
        let mut change = Change::new();
        if delta.targets_changed || delta.from_nothing {
            for (ofport, port) in &inputs.ports {
                let want = engine.targets().get(ofport).cloned().unwrap_or_default();
                let owner = Owner::PolicyTarget(port.clone());
                let have = self.store.flows_of(&owner).await;
                match (have, want.is_empty()) {
                    (None, true) => {}
                    (Some(h), false) if h == want => {}
                    (Some(_), true) => change = change.remove(owner),
                    (_, false) => change = change.set(owner, want),
                }
            }
        }
        if delta.from_nothing {
            // The store may hold rows of before (a restart's, or of a bundle that failed).
            let want = engine.rows().shared;
            let have = self
                .store
                .flows_of(&Owner::Policy)
                .await
                .unwrap_or_default();
            if have != want {
                change = change.diff(Owner::Policy, want);
            }
        } else if !delta.shared_unchanged() {
            change = change.patch(Owner::Policy, delta.upserts.clone(), delta.deletes.clone());
        }
        change
    }

    fn publish(&self, inputs: &Inputs, engine: &PolicyEngine, took: Duration, changed: bool) {
        let old = self.view();
        let view = PolicyView {
            multitenant: self.multitenant,
            policies: inputs.snap.policies.len(),
            active: engine
                .isolated()
                .values()
                .flat_map(|i| i.ingress.iter().chain(&i.egress).cloned())
                .collect(),
            cluster_policies: inputs.snap.cluster_policies.len(),
            cluster_active: engine
                .rules()
                .values()
                .chain(engine.plain().values().flatten())
                .filter_map(|r| {
                    r.cluster
                        .as_ref()
                        .map(|c| format!("{} ({} tier, priority {})", r.policy, c.tier, c.priority))
                })
                .collect(),
            rules: engine.rules().clone(),
            plain: engine.plain().clone(),
            isolated: engine.isolated().clone(),
            pods: inputs
                .snap
                .local
                .iter()
                .map(|l| (l.ofport, format!("{}/{}", l.pod.namespace, l.pod.name)))
                .collect(),
            target_rows: engine.targets().values().map(Vec::len).sum(),
            shared_rows: engine.shared_len(),
            inputs: Arc::new(inputs.clone()),
            rebuilds: old.rebuilds + u64::from(changed),
            last_rebuild: if changed { took } else { old.last_rebuild },
        };
        let m = crate::telemetry::metrics::metrics();
        m.policies.set(view.policies as i64);
        m.policies_active.set(view.active.len() as i64);
        m.cluster_policies.set(view.cluster_policies as i64);
        m.cluster_policies_active
            .set(view.cluster_active.len() as i64);
        for (kind, n) in [("target", view.target_rows), ("shared", view.shared_rows)] {
            m.policy_flows.with_label_values(&[kind]).set(n as i64);
        }
        m.policy_isolated_pods.set(view.isolated.len() as i64);
        *crate::lock(&self.view) = Arc::new(view);
    }

    /// Rebuilds at every cluster state change and every local pod change, until the state
    /// source goes away. A failed rebuild is retried at the next event (or the next repair,
    /// which calls [`Self::sync`] too).
    ///
    /// A rebuild that changed the bridge is followed, 200 ms after the last of a burst, by
    /// `ovs-appctl revalidator/purge`: every datapath flow is dropped and translated again from
    /// the tables as they are. Why: Open vSwitch 3.1 was seen (userspace datapath, under load)
    /// keeping a datapath flow cached before a policy change with its old verdict although
    /// `ofproto/trace` of that very flow gave the new one, and `revalidator/wait` did not
    /// correct it; a connection the policy had just refused kept passing, or an allowed one
    /// stayed dropped, for as long as packets kept the flow alive. The cost is one upcall per
    /// active flow after each policy change, not per packet.
    pub(crate) async fn run(self: Arc<Self>) {
        let settler = self.clone();
        let settle = tokio::spawn(async move {
            loop {
                settler.settle.notified().await;
                tokio::time::sleep(Duration::from_millis(200)).await;
                settler.purge_datapath().await;
            }
        });
        let _stop = AbortOnDrop(settle);
        let mut rx = self.cluster.clone();
        loop {
            tokio::select! {
                r = rx.changed() => if r.is_err() { return },
                () = self.wake.notified() => {}
            }
            if let Err(e) = self.sync().await {
                tracing::warn!(error = %e, "applying network policy rows failed; retrying at the next change or repair");
            }
        }
    }

    /// Drops every datapath flow of ovs-vswitchd (see [`Self::run`]).
    async fn purge_datapath(&self) {
        let ctl = match ovs::unixctl::control_socket(&self.ovs_rundir, "ovs-vswitchd") {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot purge the datapath flows after a network policy change");
                return;
            }
        };
        match ovs::unixctl::call(&ctl, "revalidator/purge", &[], Duration::from_secs(5)).await {
            Ok(_) => {
                crate::telemetry::metrics::metrics()
                    .policy_datapath_purges
                    .inc();
                tracing::debug!("datapath flows purged after a network policy change")
            }
            Err(e) => {
                tracing::warn!(error = %e, "purging the datapath flows after a network policy change failed")
            }
        }
    }

    fn labels_of(
        &self,
        state: &ClusterState,
        namespace: &str,
        name: &str,
    ) -> BTreeMap<String, String> {
        state
            .pod(namespace, name)
            .map(|p| p.labels.clone())
            .unwrap_or_default()
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<S: FlowSwitch> PodPolicy for NetworkPolicies<S> {
    fn selects(&self, namespace: &str, name: &str) -> bool {
        let state = self.cluster.borrow().clone();
        let labels = self.labels_of(&state, namespace, name);
        if !self.multitenant
            && state
                .network_policies
                .values()
                .any(|p| p.selects(namespace, &labels))
        {
            return true;
        }
        let ns_labels = namespace_view(&state, namespace).labels;
        // Multitenant mode: a peer of an Admin-tier Accept has rows too (its ARP across
        // tenants, flows::policy::admitted_client); its address is not known here, so a
        // `networks` peer counts at the next update.
        state
            .cluster_policies
            .values()
            .any(|p| p.selects(&ns_labels, &labels))
            || self.multitenant
                && flows::policy::admitted_client(
                    state.cluster_policies.values(),
                    &ns_labels,
                    &labels,
                    None,
                    None,
                )
    }

    fn rows(&self, pod: &LocalPodRef) -> Vec<Flow> {
        if !self.selects(&pod.namespace, &pod.name) {
            return Vec::new();
        }
        let state = self.cluster.borrow().clone();
        let inputs = self.inputs(&state, std::slice::from_ref(pod));
        let Some(local) = inputs.snap.local.first() else {
            return Vec::new();
        };
        flows::policy::pod_rows(&inputs.snap.input(), &inputs.snap.ids, local).0
    }

    fn changed(&self) {
        self.wake.notify_one();
    }
}

impl<S: FlowSwitch + 'static> NetworkPolicies<S> {
    /// The feature, in networkpolicy and multitenant mode.
    pub(crate) fn feature(ctx: &super::Context<S>) -> Option<Arc<Self>> {
        (ctx.node.mode != flows::Mode::Subnet).then(|| {
            Arc::new(NetworkPolicies::new(
                ctx.store.clone(),
                ctx.state.clone(),
                &ctx.node,
                ctx.local_pods.clone(),
                ctx.ovs_run_dir.clone(),
            ))
        })
    }
}

mod feature;
