//! The Kubernetes cluster state source: kube-rs watchers on the API server, one per kind, folded
//! into the same [`ClusterState`] the standalone directory produces.
//!
//! Watched: the `default` ClusterNetwork (field selector `metadata.name=default`), every
//! HostSubnet (its own for the node's subnet, the others drive the remote-node flows), every
//! NetNamespace, every EgressNetworkPolicy (all namespaces), every Namespace (with its labels),
//! and this node's Pods (field selector `spec.nodeName=<node>`). In networkpolicy mode also
//! every NetworkPolicy and, in a second watch, every Pod of the cluster (policies select peers
//! on any node; each pod's labels, address and named ports are what they need, and the address
//! is in the pod's status, so a metadata-only watch cannot give it). Every Node (labels and
//! addresses, [`crate::nodes`]) once a ClusterNetworkPolicy has a `nodes` peer.
//! This node's pods live in the state as a cache ([`ClusterState::pods`]), so a CNI ADD never
//! asks the API server anything on its hot path; the other pods are kept only as what policies
//! read ([`ClusterState::peer_pods`], see [`crate::pods::PodCache`]).
//!
//! What a node's cost follows: a pod event costs O(log n) to apply and re-assembles only the
//! pods (one namespace's map is copied); a HostSubnet, NetNamespace, Namespace or
//! NetworkPolicy event reads that one object, and overlaps are checked through an interval
//! index ([`SubnetIndex`]); nothing is re-read for kinds that did not change.
//!
//! Why this shape:
//! - One task consumes all the watch streams (merged). Each object is read (parsed,
//!   validated, reduced) once, when its event arrives, and only what was read is kept, by key
//!   ([`crate::kept::Kept`]; the pods in [`crate::pods::PodCache`]): no reflector store of the objects'
//!   JSON or typed form (managed fields and all) outlives the events. Measured at 5,000 nodes ×
//!   150,000 pods (`cargo run --release -p sdn-tests --example source_memory`), this took the
//!   source's heap from 144 MB to 78 MB in networkpolicy mode and from 44 MB to 19 MB in
//!   multitenant mode. The singleton ClusterNetwork and the few EgressNetworkPolicies keep a
//!   reflector store ([`Reflected`]). All apply the watcher's `Init`/`InitApply`/`InitDone`
//!   cycle, so a re-list (after a lost watch, a `410 Gone`, a restart of the stream) builds a
//!   fresh map and swaps it in whole at `InitDone`, and objects deleted while the watch was
//!   down disappear. After each burst of events the parts of the state whose kinds changed
//!   are assembled again (sharing the kept maps where nothing is left out) and the state is
//!   published only if it changed; consumers diff states, never replay events.
//! - Errors back off (`default_backoff`: exponential with jitter) and the watcher resumes or
//!   re-lists by itself; each error is logged with its kind.
//! - The network objects are read as `DynamicObject`s and converted through JSON into the same
//!   serde types as the standalone files, then validated like them: an object that fails is
//!   logged and left out, the others stay in effect.
//! - Nothing is published before every kind has completed its first list: a half-listed
//!   cluster would look like deleted nodes and tenants. The one exception is the watch of
//!   every pod (networkpolicy mode), the cluster's largest list (150,000 pods take seconds to
//!   serve and decode): [`KubeSource::start`] returns without it, the state says so
//!   ([`ClusterState::peer_pods_listed`]) and holds no peers until the list is complete, so
//!   the node serves CNI within a second and policy rows built meanwhile allow less, never
//!   more. This node's own pods come from their own small field-selected watch, listed first.
//!
//! Limits: objects with top-level fields our types do not know (CRDs of a newer OpenShift
//! without structural pruning) fail to parse and are left out with a warning.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher::{self, Event};
use kube::Client;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::kept::Kept;
use super::nodes::SlimNode;
use super::pods::{PodCache, SlimPod};
pub use super::reflected::{watch_event, Reflected};
use super::state::SubnetIndex;
use super::types::{ClusterNetwork, ClusterObject, EgressNetworkPolicy, HostSubnet, NetNamespace};
use super::{ClusterSource, ClusterState};
use multitenant::cluster_policy::{ClusterPolicy, NodeView};

mod policies;
mod watches;

use multitenant::policy::Labels;
use policies::{not_served, policy_key, read_cluster_policy, read_policy, PolicyRead};
use watches::watches;

/// The API group of the network objects.
pub const GROUP: &str = "network.openshift.io";
/// Their version.
pub const VERSION: &str = "v1";

/// The `ApiResource` of a cluster-scoped `network.openshift.io/v1` kind.
pub fn api_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural)
}

/// A kube client from a kubeconfig file, or (`None`) the usual inference: `$KUBECONFIG`,
/// `~/.kube/config`, then the in-cluster service account.
pub async fn client(kubeconfig: Option<&Path>) -> Result<Client, KubeError> {
    let step = |what: String| {
        move |e: kube::config::KubeconfigError| KubeError::Config {
            what,
            source: e.into(),
        }
    };
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(step(format!("reading kubeconfig {}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(step(format!("kubeconfig {}", path.display())))?
        }
        None => kube::Config::infer().await.map_err(|e| KubeError::Config {
            what: "no Kubernetes configuration: pass --kubeconfig, set KUBECONFIG, or run in \
                       a pod with a service account"
                .into(),
            source: e.into(),
        })?,
    };
    Client::try_from(config).map_err(|e| KubeError::Config {
        what: "building the Kubernetes client".into(),
        source: e.into(),
    })
}

/// Why the Kubernetes source cannot start.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// No usable client configuration.
    #[error("{what}")]
    Config {
        /// What was tried, and what to do.
        what: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The API did not answer as the agent needs it, and what to check.
    #[error("{0}")]
    Unavailable(String),
}

/// The Kubernetes source; its watchers stop when it is dropped.
#[derive(Debug)]
pub struct KubeSource {
    rx: watch::Receiver<Arc<ClusterState>>,
    task: tokio::task::JoinHandle<()>,
    /// The failing watches, by kind: the error of each one's last attempt.
    failing: Arc<std::sync::Mutex<BTreeMap<&'static str, String>>>,
}

impl Drop for KubeSource {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ClusterSource for KubeSource {
    fn subscribe(&self) -> watch::Receiver<Arc<ClusterState>> {
        self.rx.clone()
    }

    fn problems(&self) -> Vec<String> {
        crate::lock(&self.failing)
            .iter()
            .map(|(kind, e)| format!("the {kind} watch fails: {e}"))
            .collect()
    }
}

/// One watch event of any kind.
enum Ev {
    ClusterNetwork(watcher::Result<Event<DynamicObject>>),
    HostSubnet(watcher::Result<Event<DynamicObject>>),
    NetNamespace(watcher::Result<Event<DynamicObject>>),
    EgressNetworkPolicy(watcher::Result<Event<DynamicObject>>),
    Namespace(watcher::Result<Event<Namespace>>),
    /// This node's pods.
    Pod(watcher::Result<Event<SlimPod>>),
    /// Every pod (networkpolicy mode).
    PeerPod(watcher::Result<Event<SlimPod>>),
    NetworkPolicy(watcher::Result<Event<NetworkPolicy>>),
    ClusterNetworkPolicy(watcher::Result<Event<DynamicObject>>),
    /// Every node (while a ClusterNetworkPolicy has a `nodes` peer).
    Node(watcher::Result<Event<SlimNode>>),
}

/// Everything the source knows, and the state last assembled from it.
struct Caches {
    cluster_network: Reflected<DynamicObject>,
    /// HostSubnets that parse and validate alone, by name (cross-object checks are made when
    /// the state is assembled).
    host_subnets: Kept<HostSubnet>,
    net_namespaces: Kept<NetNamespace>,
    egress_policies: Reflected<DynamicObject>,
    /// Namespaces' labels, by name.
    namespaces: Kept<Labels>,
    /// Namespaces' `k8s.ovn.org/acl-logging` annotations, by name (only those that have one).
    acl_logging: Kept<String>,
    pods: PodCache,
    /// Networkpolicy mode only: NetworkPolicies as read, by `namespace/name`.
    network_policies: Option<Kept<PolicyRead<multitenant::policy::Policy>>>,
    /// The NetworkPolicies refused at the last rebuild, with why: each is logged once per
    /// reason, not at every rebuild.
    refused: std::sync::Mutex<BTreeMap<String, String>>,
    /// ClusterNetworkPolicies as read, by name (both modes).
    cluster_policies: Kept<PolicyRead<ClusterPolicy>>,
    /// Their `k8s.ovn.org/acl-logging` annotations, by name (only those that have one).
    cluster_policy_logging: Kept<String>,
    /// The API server does not serve ClusterNetworkPolicies (their CRD is not installed):
    /// none apply, and the watch keeps trying, so one installed later is seen.
    cluster_policies_absent: bool,
    /// The ClusterNetworkPolicies refused at the last rebuild, with why (logged once each).
    refused_cluster: std::sync::Mutex<BTreeMap<String, String>>,
    /// The nodes as `nodes` peers see them, by name (watched once a policy has such a peer).
    nodes: Kept<NodeView>,
    /// The parts of the state whose kinds changed since it was last assembled.
    dirty: Dirty,
    /// The state last assembled: a pod event re-assembles only the pods.
    current: ClusterState,
}

/// Which parts of the state to assemble again.
#[derive(Clone, Copy, Debug)]
struct Dirty {
    network: bool,
    egress: bool,
    namespaces: bool,
    policies: bool,
    cluster_policies: bool,
    nodes: bool,
}

impl Dirty {
    const ALL: Dirty = Dirty {
        network: true,
        egress: true,
        namespaces: true,
        policies: true,
        cluster_policies: true,
        nodes: true,
    };
    const NONE: Dirty = Dirty {
        network: false,
        egress: false,
        namespaces: false,
        policies: false,
        cluster_policies: false,
        nodes: false,
    };
}

/// A network object's name, and the object parsed and validated (logged and `None` when it
/// cannot be used). Its managed fields are dropped first: nothing reads them.
fn read_dynamic<T: DeserializeOwned + Into<ClusterObject> + Clone>(o: &DynamicObject) -> Option<T> {
    let mut v = serde_json::to_value(o).ok()?;
    if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        m.remove("managedFields");
    }
    parse::<T>(&v)
}

/// A HostSubnet as the cache keeps it: read as any object, then compacted (one per node: its
/// IPv6 subnet annotation as a map would be most of a dual-stack node's cost per remote node).
fn read_host_subnet(o: &DynamicObject) -> Option<HostSubnet> {
    read_dynamic::<HostSubnet>(o).map(HostSubnet::compact)
}

fn name_of<K: kube::Resource>(o: &K) -> Option<String> {
    o.meta().name.clone()
}

impl Caches {
    fn new(node: &str, policies: bool) -> Caches {
        Caches {
            network_policies: policies.then(Kept::new),
            refused: std::sync::Mutex::default(),
            cluster_policies: Kept::new(),
            cluster_policy_logging: Kept::new(),
            cluster_policies_absent: false,
            refused_cluster: std::sync::Mutex::default(),
            nodes: Kept::new(),
            cluster_network: Reflected::with_type(api_resource(
                "ClusterNetwork",
                "clusternetworks",
            )),
            host_subnets: Kept::new(),
            net_namespaces: Kept::new(),
            egress_policies: Reflected::with_type(api_resource(
                "EgressNetworkPolicy",
                "egressnetworkpolicies",
            )),
            namespaces: Kept::new(),
            acl_logging: Kept::new(),
            pods: PodCache::new(node),
            dirty: Dirty::ALL,
            current: ClusterState::default(),
        }
    }

    fn ready(&self) -> bool {
        self.cluster_network.ready
            && self.host_subnets.ready
            && self.net_namespaces.ready
            && self.egress_policies.ready
            && self.namespaces.ready
            && self.pods.local.ready
            && self.network_policies.as_ref().is_none_or(|r| r.ready)
            && (self.cluster_policies.ready || self.cluster_policies_absent)
    }

    /// The state: every network object that parses and validates, the namespaces, the pods.
    /// Only the parts whose kinds changed since the last call are assembled again.
    fn state(&mut self) -> ClusterState {
        let dirty = std::mem::replace(&mut self.dirty, Dirty::NONE);
        let st = &mut self.current;
        if dirty.network {
            st.cluster_network = None;
            for v in by_name(&self.cluster_network).values() {
                if let Some(cn) = parse::<ClusterNetwork>(v) {
                    st.insert(cn.into());
                }
            }
            st.net_namespaces = self.net_namespaces.map.clone();
            // Cross-object checks as in standalone mode: a HostSubnet outside the
            // ClusterNetwork or overlapping one seen before it (by name) is left out. When
            // none is, the state shares the map.
            let mut index = SubnetIndex::default();
            let mut left_out = Vec::new();
            for (name, hs) in self.host_subnets.map.iter() {
                match st.check_host_subnet_in(hs, &index) {
                    Ok(()) => {
                        index.insert_host_subnet(name, hs);
                    }
                    Err(e) => {
                        tracing::warn!(host_subnet = %hs.name(), error = %e, "HostSubnet left out");
                        left_out.push(name.clone());
                    }
                }
            }
            st.host_subnets = self.host_subnets.map.clone();
            if !left_out.is_empty() {
                let kept = Arc::make_mut(&mut st.host_subnets);
                for name in left_out {
                    kept.remove(&name);
                }
            }
        }
        if dirty.egress {
            // Namespaced: by `namespace/name`.
            // One that cannot be read fails closed: its namespace's external traffic is dropped.
            st.egress_policies = Arc::default();
            st.refused_egress_policies.clear();
            for o in self.egress_policies.objects() {
                if let Ok(v) = serde_json::to_value(&*o) {
                    match parse_or_why::<EgressNetworkPolicy>(&v) {
                        Ok(p) => {
                            st.insert(p.into());
                        }
                        Err(why) => {
                            let ns = v["metadata"]["namespace"].as_str().unwrap_or("?");
                            let name = v["metadata"]["name"].as_str().unwrap_or("?");
                            st.refused_egress_policies
                                .insert(format!("{ns}/{name}"), why);
                        }
                    }
                }
            }
        }
        if dirty.namespaces {
            st.namespaces = Some(Arc::new(self.namespaces.map.keys().cloned().collect()));
            st.namespace_labels = self.namespaces.map.clone();
            crate::audit::read_into(&mut st.audit_logging, &self.acl_logging.map);
        }
        st.pods.clone_from(&self.pods.local.map);
        st.peer_pods.clone_from(&self.pods.peer_pods);
        st.peer_pods_listed = self.pods.peers_ready;
        if let (true, Some(r)) = (dirty.policies, &self.network_policies) {
            let (policies, refused) =
                policies::assemble(&r.map, &self.refused, policies::Kind::Network);
            st.network_policies = Arc::new(policies);
            st.refused_policies = refused;
        }
        if dirty.cluster_policies {
            let (policies, refused) = policies::assemble(
                &self.cluster_policies.map,
                &self.refused_cluster,
                policies::Kind::Cluster,
            );
            st.cluster_policies = Arc::new(policies);
            st.refused_cluster_policies = refused;
            let logging = &self.cluster_policy_logging.map;
            crate::audit::read_into(&mut st.cluster_policy_logging, logging);
        }
        if dirty.nodes {
            st.nodes = self.nodes.map.clone();
            st.nodes_listed = self.nodes.ready;
        }
        st.clone()
    }
}

/// Network objects as JSON values by name (sorted: cross-object checks go by name).
fn by_name(r: &Reflected<DynamicObject>) -> BTreeMap<String, serde_json::Value> {
    r.objects().iter().filter_map(|o| dynamic_key(o)).collect()
}

/// Parses and validates one network object; logs and skips what fails.
fn parse<T: DeserializeOwned + Into<ClusterObject> + Clone>(v: &serde_json::Value) -> Option<T> {
    let name = v["metadata"]["name"].as_str().unwrap_or("?").to_string();
    let kind = v["kind"].as_str().unwrap_or("?").to_string();
    match parse_or_why::<T>(v) {
        Ok(t) => Some(t),
        Err(why) => {
            tracing::warn!(%kind, %name, error = %why, "object left out");
            None
        }
    }
}

/// Parses and validates one network object, or says why it cannot be used.
fn parse_or_why<T: DeserializeOwned + Into<ClusterObject> + Clone>(
    v: &serde_json::Value,
) -> Result<T, String> {
    let t = serde_json::from_value::<T>(v.clone()).map_err(|e| format!("unreadable: {e}"))?;
    Into::<ClusterObject>::into(t.clone())
        .validate()
        .map_err(|e| format!("invalid: {e}"))?;
    Ok(t)
}

fn dynamic_key(o: &DynamicObject) -> Option<(String, serde_json::Value)> {
    let name = o.metadata.name.clone()?;
    let v = serde_json::to_value(o).ok()?;
    Some((name, v))
}

/// Why the first list did not complete: the kinds still not listed, each with its last error.
fn not_listed(
    caches: &Caches,
    last_error: &BTreeMap<&'static str, String>,
    list_timeout: Duration,
) -> KubeError {
    let pending: Vec<String> = [
        ("ClusterNetwork", caches.cluster_network.ready),
        ("HostSubnet", caches.host_subnets.ready),
        ("NetNamespace", caches.net_namespaces.ready),
        ("Namespace", caches.namespaces.ready),
        ("Pod", caches.pods.local.ready),
        (
            "NetworkPolicy",
            caches.network_policies.as_ref().is_none_or(|r| r.ready),
        ),
        (
            "ClusterNetworkPolicy",
            caches.cluster_policies.ready || caches.cluster_policies_absent,
        ),
    ]
    .iter()
    .filter(|(_, r)| !r)
    .map(|(k, _)| match last_error.get(k) {
        Some(e) => format!("{k} ({e})"),
        None => (*k).to_string(),
    })
    .collect();
    KubeError::Unavailable(format!(
        "could not list {} from the Kubernetes API within {}s; check the API server address, \
         that the network.openshift.io CRDs are installed (deploy/crds.yaml) and the agent's \
         RBAC",
        pending.join(", "),
        list_timeout.as_secs()
    ))
}

impl KubeSource {
    /// Starts the watchers for node `node` and returns once every kind has been listed, or
    /// fails after `list_timeout` naming what could not be listed (API server unreachable, a
    /// CRD missing, RBAC). `policies`: networkpolicy mode (NetworkPolicies and every Pod).
    pub async fn start(
        client: Client,
        node: &str,
        policies: bool,
        list_timeout: Duration,
    ) -> Result<KubeSource, KubeError> {
        let streams = watches(&client, node, policies);
        let mut events = stream::select_all(streams);
        let mut caches = Caches::new(node, policies);
        let mut last_error: BTreeMap<&'static str, String> = BTreeMap::new();

        // The first list of every kind, bounded.
        let began = std::time::Instant::now();
        let listed = tokio::time::timeout(list_timeout, async {
            while !caches.ready() {
                match events.next().await {
                    Some(ev) => {
                        handle(&mut caches, ev, &mut last_error);
                    }
                    None => return false,
                }
            }
            true
        })
        .await;
        if !matches!(listed, Ok(true)) {
            return Err(not_listed(&caches, &last_error, list_timeout));
        }
        // Every pod: the cluster's largest list, started once the rest is listed (so it does
        // not slow the lists the node serves with) and not waited for (see the module docs).
        // In multitenant mode only once a ClusterNetworkPolicy exists (its peers are pods).
        let mut peers_started = policies || !caches.cluster_policies.map.is_empty();
        if peers_started {
            events.push(watches::every::<SlimPod>(&client, Ev::PeerPod));
        }
        let mut nodes_started = watches::node_peers(&caches.cluster_policies.map);
        if nodes_started {
            events.push(watches::every::<SlimNode>(&client, Ev::Node));
        }
        let first = caches.state();
        for (kind, name, e) in first.problems() {
            tracing::warn!(kind = kind.as_str(), %name, error = %e, "cluster object has a problem");
        }
        tracing::info!(
            host_subnets = first.host_subnets.len(),
            net_namespaces = first.net_namespaces.len(),
            namespaces = first.namespace_labels.len(),
            pods_here = first.pods.len(),
            peer_pods = first.peer_pods.pod_count(),
            network_policies = first.network_policies.len(),
            cluster_network_policies = first.cluster_policies.len(),
            ms = began.elapsed().as_millis() as u64,
            "cluster listed"
        );
        let (tx, rx) = watch::channel(Arc::new(first));
        let failing = Arc::new(std::sync::Mutex::new(last_error.clone()));
        let shown = failing.clone();
        let mut peers_pending = peers_started && !caches.pods.peers_ready;
        let task = tokio::spawn(async move {
            while let Some(ev) = events.next().await {
                let mut changed = handle(&mut caches, ev, &mut last_error);
                // Drain the burst before rebuilding.
                while let Some(Some(ev)) = futures::FutureExt::now_or_never(events.next()) {
                    changed |= handle(&mut caches, ev, &mut last_error);
                }
                crate::lock(&shown).clone_from(&last_error);
                if !peers_started && !caches.cluster_policies.map.is_empty() {
                    tracing::info!("a ClusterNetworkPolicy exists: listing the pods of the cluster (its peers)");
                    events.push(watches::every::<SlimPod>(&client, Ev::PeerPod));
                    peers_started = true;
                    peers_pending = true;
                }
                if !nodes_started && watches::node_peers(&caches.cluster_policies.map) {
                    tracing::info!("a ClusterNetworkPolicy has a nodes peer: watching the nodes");
                    events.push(watches::every::<SlimNode>(&client, Ev::Node));
                    nodes_started = true;
                }
                if peers_pending && caches.pods.peers_ready {
                    peers_pending = false;
                    tracing::info!(
                        peer_pods = caches.pods.peer_pods.pod_count(),
                        ms = began.elapsed().as_millis() as u64,
                        "cluster pods listed (policy peers)"
                    );
                }
                if changed {
                    let st = caches.state();
                    tx.send_if_modified(|cur| {
                        if **cur == st {
                            false
                        } else {
                            *cur = Arc::new(st);
                            true
                        }
                    });
                }
            }
        });
        Ok(KubeSource { rx, task, failing })
    }

    /// Waits (bounded) until the state has a HostSubnet for `node`.
    pub async fn wait_for_host_subnet(&self, node: &str, wait: Duration) -> Result<(), KubeError> {
        let mut rx = self.rx.clone();
        let found = tokio::time::timeout(wait, async {
            let mut logged = false;
            loop {
                if rx.borrow_and_update().host_subnet_of(node).is_some() {
                    return true;
                }
                if !logged {
                    tracing::info!(
                        node,
                        "waiting for this node's HostSubnet (the controller creates it)"
                    );
                    logged = true;
                }
                if rx.changed().await.is_err() {
                    return false;
                }
            }
        })
        .await;
        match found {
            Ok(true) => Ok(()),
            _ => Err(KubeError::Unavailable(format!(
                "no HostSubnet for node {node:?} after {}s; the controller (sdn-agent controller) \
                 creates one per Node: is it running, and does a Node named {node:?} exist?",
                wait.as_secs()
            ))),
        }
    }
}

/// Applies one event; returns whether the state may have changed, and marks the part of the
/// state its kind feeds for assembly (pods are assembled every time).
fn handle(c: &mut Caches, ev: Ev, errors: &mut BTreeMap<&'static str, String>) -> bool {
    let d = &mut c.dirty;
    let mark = |changed: bool, part: &mut bool| {
        *part |= changed;
        changed
    };
    match ev {
        Ev::ClusterNetwork(r) => mark(
            watch_event("ClusterNetwork", r, errors).is_some_and(|e| c.cluster_network.apply(&e)),
            &mut d.network,
        ),
        Ev::HostSubnet(r) => mark(
            watch_event("HostSubnet", r, errors)
                .is_some_and(|e| c.host_subnets.apply(&e, name_of, read_host_subnet)),
            &mut d.network,
        ),
        Ev::NetNamespace(r) => mark(
            watch_event("NetNamespace", r, errors)
                .is_some_and(|e| c.net_namespaces.apply(&e, name_of, read_dynamic)),
            &mut d.network,
        ),
        Ev::EgressNetworkPolicy(r) => mark(
            watch_event("EgressNetworkPolicy", r, errors)
                .is_some_and(|e| c.egress_policies.apply(&e)),
            &mut d.egress,
        ),
        Ev::Namespace(r) => mark(
            watch_event("Namespace", r, errors).is_some_and(|e| {
                let labels = c.namespaces.apply(&e, name_of, |n: &Namespace| {
                    Some(n.metadata.labels.clone().unwrap_or_default())
                });
                let logging = c.acl_logging.apply(&e, name_of, |n: &Namespace| {
                    crate::audit::annotation(&n.metadata)
                });
                labels | logging
            }),
            &mut d.namespaces,
        ),
        Ev::Pod(r) => watch_event("Pod", r, errors).is_some_and(|e| c.pods.apply_local(&e)),
        Ev::PeerPod(r) => {
            watch_event("Pod (all nodes)", r, errors).is_some_and(|e| c.pods.apply_peers(&e))
        }
        Ev::NetworkPolicy(r) => mark(
            watch_event("NetworkPolicy", r, errors).is_some_and(|e| {
                c.network_policies
                    .as_mut()
                    .is_some_and(|n| n.apply(&e, policy_key, |np| Some(read_policy(np))))
            }),
            &mut d.policies,
        ),
        Ev::ClusterNetworkPolicy(Err(e)) if not_served(&e) => {
            // No CRD: none apply. Said once; the watch keeps trying (backing off).
            if !c.cluster_policies_absent {
                tracing::info!("the API server serves no ClusterNetworkPolicies (policy.networking.k8s.io/v1alpha2; install deploy/crd-clusternetworkpolicies.yaml to use them): none apply");
            }
            c.cluster_policies_absent = true;
            errors.remove("ClusterNetworkPolicy");
            false
        }
        Ev::ClusterNetworkPolicy(r) => mark(
            watch_event("ClusterNetworkPolicy", r, errors).is_some_and(|e| {
                c.cluster_policies_absent = false;
                let logging = c
                    .cluster_policy_logging
                    .apply(&e, name_of, |o| crate::audit::annotation(&o.metadata));
                c.cluster_policies
                    .apply(&e, name_of, |o| Some(read_cluster_policy(o)))
                    | logging
            }),
            &mut d.cluster_policies,
        ),
        Ev::Node(r) => mark(
            watch_event("Node", r, errors)
                .is_some_and(|e| c.nodes.apply(&e, name_of, |n: &SlimNode| Some(n.view()))),
            &mut d.nodes,
        ),
    }
}
