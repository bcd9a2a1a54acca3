//! `sdn-agent controller`: the cluster-wide allocator of Kubernetes mode. It gives every Node a
//! HostSubnet and every Namespace a NetNamespace, applies the change-network annotation, and
//! creates the `default` ClusterNetwork; the decisions are pure ([`plan`]), this module only
//! watches, elects and writes.
//!
//! - **One active controller** (a Deployment may run several): leadership is a
//!   `coordination.k8s.io/v1` Lease (`sdn-controller` in the controller namespace), acquired when
//!   free or expired, renewed every [`RENEW`], and given up (the process exits with an error, the
//!   Deployment restarts it as a follower) when a renewal has not succeeded for
//!   [`LEASE_DURATION`]. Writes happen only while leading.
//! - **Never next to openshift-sdn's controller.** In a cluster moving from openshift-sdn, its
//!   controller elects its leader on the Lease `openshift-sdn/openshift-network-controller`.
//!   Ours leads only while it holds that Lease as well (taken like its own, renewed with it,
//!   released at a clean stop): while openshift-sdn's controller runs, ours waits and says so,
//!   and once ours holds it, openshift-sdn's cannot lead. Allocations are read back from the
//!   objects, never re-made, so the objects openshift-sdn's controller wrote are taken over
//!   unchanged (docs/migrating-from-openshift-sdn.md).
//! - **Watches** Nodes, Namespaces, HostSubnets, NetNamespaces and the ClusterNetwork with
//!   kube-rs watchers (backoff, re-list on a lost watch). After every burst of events (taken
//!   whole until the watches are quiet for [`burst::BURST_QUIET`], at most
//!   [`burst::BURST_MAX`]; the watch's echo of a write already recorded is no event), and
//!   every [`RESYNC`], the leader plans against the whole view and executes the plan; a failed
//!   write is logged and planned again next time.
//! - Writes are create / replace (with the object's resourceVersion, so a concurrent change
//!   makes the write fail and the next plan sees the change) / delete, through `DynamicObject`s.

pub mod burst;
pub mod plan;

use burst::take_burst;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

/// Why the controller stopped, or a write failed.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// No Kubernetes client.
    #[error(transparent)]
    Client(#[from] cluster::kube::KubeError),
    /// A Lease could not be read or written.
    #[error("{what}")]
    Lease {
        /// What was done to which Lease.
        what: String,
        /// The API's answer.
        #[source]
        source: kube::Error,
    },
    /// A write of a network object failed.
    #[error(transparent)]
    Write(#[from] kube::Error),
    /// An object could not be put in the API's form.
    #[error("encoding an object for the API")]
    Encode(#[from] serde_json::Error),
    /// The settings ask for what the controller cannot write.
    #[error(transparent)]
    Settings(#[from] cluster::ClusterError),
    /// Leadership ended, or the watches did: why, and what happens next.
    #[error("{0}")]
    Stopped(String),
}

/// The controller's results.
pub type Result<T, E = ControllerError> = std::result::Result<T, E>;

/// Returns a [`ControllerError::Stopped`] with a formatted message.
macro_rules! bail {
    ($($t:tt)*) => {
        return Err(ControllerError::Stopped(format!($($t)*)))
    };
}
use futures::stream::{self, BoxStream, StreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use serde::de::DeserializeOwned;
use serde::Serialize;

use cluster::config::Config;
use cluster::kube::{api_resource, watch_event, Reflected};
use cluster::{ClusterNetwork, ClusterNetworkSpec};
use plan::{Action, View};

/// How long a Lease stays valid without renewal.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// How often the leader renews (and a follower retries).
pub const RENEW: Duration = Duration::from_secs(3);
/// How often the leader plans even without events.
pub const RESYNC: Duration = Duration::from_secs(30);
/// The Lease's name.
pub const LEASE_NAME: &str = "sdn-controller";
/// The Lease openshift-sdn's controller (`openshift-sdn-controller`) elects its leader on:
/// namespace and name.
pub const OPENSHIFT_SDN_LEASE: (&str, &str) = ("openshift-sdn", "openshift-network-controller");

/// Takes (or renews) openshift-sdn's controller Lease next to ours: whether this controller
/// may allocate. `namespace`: whether the namespace `openshift-sdn` exists, from the watched
/// Namespaces (`None` until they are listed: no, unless `leading` already). No such
/// namespace (openshift-sdn was never installed, or is gone): nothing to fence, yes. While
/// openshift-sdn's controller holds the Lease (renewed within its duration): no, said once
/// per holder. The namespace exists but the Lease cannot be read or taken (this controller
/// lacks the migration Role): no, fail closed, saying what to apply.
async fn fence_openshift_sdn(
    namespace: Option<bool>,
    leading: bool,
    fence: &mut LeaseLock,
    fenced: &mut bool,
) -> Result<bool> {
    let lease = format!("{}/{}", OPENSHIFT_SDN_LEASE.0, OPENSHIFT_SDN_LEASE.1);
    match namespace {
        // Not listed yet: not yet; while leading (a re-list): as it was.
        None => return Ok(leading),
        Some(false) => return Ok(true),
        Some(true) => {}
    }
    match fence.try_acquire_or_renew().await {
        Ok(true) => {
            if !*fenced {
                tracing::info!(%lease, "holding openshift-sdn's controller Lease: its controller cannot lead while this one runs");
            }
            *fenced = true;
            Ok(true)
        }
        Ok(false) => {
            if *fenced || fence.holder != fence.last_reported {
                tracing::warn!(
                    %lease,
                    holder = %fence.holder.clone().unwrap_or_default(),
                    "openshift-sdn's controller is running (it holds its Lease): this controller allocates nothing until it stops; the agents work meanwhile with openshift-sdn's HostSubnets and NetNamespaces"
                );
                fence.last_reported = fence.holder.clone();
            }
            *fenced = false;
            Ok(false)
        }
        Err(e) => {
            let forbidden = matches!(
                &e,
                ControllerError::Lease { source: kube::Error::Api(a), .. } if a.code == 403
            );
            if forbidden {
                tracing::error!(%lease, error = %cluster::error_chain(&e), "namespace openshift-sdn exists, and this controller may not hold openshift-sdn's controller Lease, so it cannot be sure openshift-sdn's controller is stopped: it allocates nothing; apply deploy/migration/rbac-openshift-sdn.yaml");
                *fenced = false;
                return Ok(false);
            }
            Err(e)
        }
    }
}

/// Runs the controller until `shutdown` resolves (or leadership is lost: then an error).
pub async fn run(cfg: Config, shutdown: impl std::future::Future<Output = ()>) -> Result<()> {
    let client = cluster::kube::client(cfg.kubeconfig.as_deref()).await?;
    // Unique per process even when two replicas share a host name and pid (host network,
    // pid 1): the name for people, a random suffix for uniqueness.
    let identity = format!("{}-{}", cfg.node_name, &cluster::standalone::new_uid()[..8]);
    let wanted = ClusterNetworkSpec::from_config(&cfg)?.to_object();
    let mut lease = LeaseLock::new(
        client.clone(),
        &cfg.controller_namespace,
        LEASE_NAME,
        &identity,
    );
    // openshift-sdn's controller elects its leader on this Lease: holding it too means the
    // two never allocate at once, in either order of starting (see the module docs).
    let mut fence = LeaseLock::new(
        client.clone(),
        OPENSHIFT_SDN_LEASE.0,
        OPENSHIFT_SDN_LEASE.1,
        &identity,
    );
    let mut fenced = false;
    let mut events = stream::select_all(watches(&client));
    let mut view = Views::new();
    let mut renew = tokio::time::interval(RENEW);
    let mut resync = tokio::time::interval(RESYNC);
    let mut leading = false;
    let mut last_renewed = tokio::time::Instant::now();
    tokio::pin!(shutdown);
    tracing::info!(%identity, namespace = %cfg.controller_namespace, "controller starting");
    loop {
        let mut dirty = false;
        tokio::select! {
            _ = &mut shutdown => {
                if leading {
                    fence.release().await;
                    lease.release().await;
                }
                return Ok(());
            }
            _ = renew.tick() => {
                let held = match lease.try_acquire_or_renew().await {
                    Ok(true) => match fence_openshift_sdn(
                        view.has_namespace(OPENSHIFT_SDN_LEASE.0),
                        leading,
                        &mut fence,
                        &mut fenced,
                    )
                    .await {
                        Ok(false) if leading => bail!(
                            "openshift-sdn's controller holds its Lease again: exiting, so the two never allocate at once"
                        ),
                        // A failed renewal of the fence while leading: retried next time
                        // (openshift-sdn's controller cannot take it for LEASE_DURATION).
                        Err(e) if leading => {
                            tracing::warn!(error = %cluster::error_chain(&e), "renewing openshift-sdn's controller Lease");
                            Ok(true)
                        }
                        other => other,
                    },
                    other => other,
                };
                match held {
                    Ok(true) => {
                        if !leading {
                            tracing::info!(%identity, "leading");
                            dirty = true;
                        }
                        leading = true;
                        last_renewed = tokio::time::Instant::now();
                    }
                    Ok(false) => {
                        if leading {
                            bail!("lost the controller Lease to {}; exiting so a follower takes over", lease.holder.clone().unwrap_or_default());
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %cluster::error_chain(&e), "renewing the controller Lease");
                        if leading && last_renewed.elapsed() >= LEASE_DURATION {
                            bail!("could not renew the controller Lease for {}s; exiting so a follower takes over", LEASE_DURATION.as_secs());
                        }
                    }
                }
            }
            _ = resync.tick() => dirty = true,
            ev = events.next() => {
                let ended = match ev {
                    Some(ev) => {
                        dirty |= view.apply(ev);
                        take_burst(&mut events, |ev| dirty |= view.apply(ev)).await
                    }
                    None => true,
                };
                if ended {
                    bail!("the watches ended")
                }
            }
        }
        if dirty && leading && view.ready() {
            let p = plan::plan(&view.view(), &wanted, &cfg.global_namespaces);
            write_plan(&client, &mut view, &p).await;
        }
    }
}

/// Writes a plan's actions. The writes of one plan touch distinct objects: they go
/// [`WRITES_IN_FLIGHT`] at a time (5,000 new nodes are not 5,000 round trips in a row), in
/// three phases: the ClusterNetwork, then deletions (a subnet or VNID a deletion frees may be
/// handed out in the same plan), then creations and updates. A failed write is planned again
/// on the next change.
async fn write_plan(client: &Client, view: &mut Views, p: &plan::Plan) {
    for w in &p.warnings {
        tracing::warn!("{w}");
    }
    for phase in phases(&p.actions) {
        let results: Vec<(&plan::Action, Result<Option<DynamicObject>>)> = stream::iter(phase)
            .map(|a| async move { (a, execute(client, a).await) })
            .buffered(WRITES_IN_FLIGHT)
            .collect()
            .await;
        for (a, r) in results {
            match r {
                Ok(stored) => {
                    tracing::info!("{a}");
                    // The watch reports the write later; until then the next plan must already
                    // see it (or it would allocate the same subnet twice).
                    view.record(a, stored.as_ref());
                }
                Err(e) => {
                    tracing::warn!(action = %a, error = %cluster::error_chain(&e), "write failed; planning again on the next change")
                }
            }
        }
    }
}

/// Writes the controller has in flight at once.
const WRITES_IN_FLIGHT: usize = 16;

/// A plan's actions in the order they may run: the ClusterNetwork, deletions, the rest.
fn phases(actions: &[plan::Action]) -> [Vec<&plan::Action>; 3] {
    let mut out: [Vec<&plan::Action>; 3] = Default::default();
    for a in actions {
        let i = match a {
            plan::Action::CreateClusterNetwork(_) | plan::Action::UpdateClusterNetwork(_) => 0,
            plan::Action::DeleteHostSubnet(_) | plan::Action::DeleteNetNamespace(_) => 1,
            _ => 2,
        };
        out[i].push(a);
    }
    out
}

enum Ev {
    Node(watcher::Result<Event<Node>>),
    Namespace(watcher::Result<Event<Namespace>>),
    HostSubnet(watcher::Result<Event<DynamicObject>>),
    NetNamespace(watcher::Result<Event<DynamicObject>>),
    ClusterNetwork(watcher::Result<Event<DynamicObject>>),
}

fn watches(client: &Client) -> Vec<BoxStream<'static, Ev>> {
    let cfg = watcher::Config::default();
    let dynamic = |kind: &str, plural: &str, cfg: watcher::Config| {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource(kind, plural));
        watcher::watcher(api, cfg).default_backoff()
    };
    vec![
        watcher::watcher(Api::<Node>::all(client.clone()), cfg.clone())
            .default_backoff()
            .map(Ev::Node)
            .boxed(),
        watcher::watcher(Api::<Namespace>::all(client.clone()), cfg.clone())
            .default_backoff()
            .map(Ev::Namespace)
            .boxed(),
        dynamic("HostSubnet", "hostsubnets", cfg.clone())
            .map(Ev::HostSubnet)
            .boxed(),
        dynamic("NetNamespace", "netnamespaces", cfg.clone())
            .map(Ev::NetNamespace)
            .boxed(),
        dynamic(
            "ClusterNetwork",
            "clusternetworks",
            cfg.fields("metadata.name=default"),
        )
        .map(Ev::ClusterNetwork)
        .boxed(),
    ]
}

/// The controller's view: one kube-rs reflector store per kind it watches.
struct Views {
    nodes: Reflected<Node>,
    namespaces: Reflected<Namespace>,
    host_subnets: Reflected<DynamicObject>,
    net_namespaces: Reflected<DynamicObject>,
    cluster_network: Reflected<DynamicObject>,
    errors: BTreeMap<&'static str, String>,
}

fn typed<T: DeserializeOwned>(o: &DynamicObject) -> Option<(String, T)> {
    let name = o.metadata.name.clone()?;
    match serde_json::to_value(o).and_then(serde_json::from_value::<T>) {
        Ok(t) => Some((name, t)),
        Err(e) => {
            tracing::warn!(%name, error = %e, "unreadable object ignored");
            None
        }
    }
}

/// The objects of a network kind, typed, by name.
fn typed_by_name<T: DeserializeOwned>(r: &Reflected<DynamicObject>) -> BTreeMap<String, T> {
    r.objects().iter().filter_map(|o| typed(o)).collect()
}

/// Whether a Node's `Ready` condition is `True` (a Node without one counts as ready).
fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_none_or(|c| c.status == "True")
}

/// The Node's InternalIP of the underlay's family: IPv4, or IPv6 on an IPv6-only cluster (a
/// dual-stack Node reports one of each).
fn internal_ip(n: &Node, ipv6_underlay: bool) -> Option<IpAddr> {
    n.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .filter(|a| a.type_ == "InternalIP")
        .filter_map(|a| a.address.parse::<IpAddr>().ok())
        .find(|ip| ip.is_ipv6() == ipv6_underlay)
}

impl Views {
    fn new() -> Views {
        Views {
            nodes: Reflected::new(),
            namespaces: Reflected::new(),
            host_subnets: Reflected::with_type(api_resource("HostSubnet", "hostsubnets")),
            net_namespaces: Reflected::with_type(api_resource("NetNamespace", "netnamespaces")),
            cluster_network: Reflected::with_type(api_resource(
                "ClusterNetwork",
                "clusternetworks",
            )),
            errors: BTreeMap::new(),
        }
    }

    fn apply(&mut self, ev: Ev) -> bool {
        let errors = &mut self.errors;
        match ev {
            Ev::Node(r) => watch_event("Node", r, errors).is_some_and(|e| self.nodes.apply(&e)),
            Ev::Namespace(r) => {
                watch_event("Namespace", r, errors).is_some_and(|e| self.namespaces.apply(&e))
            }
            Ev::HostSubnet(r) => {
                watch_event("HostSubnet", r, errors).is_some_and(|e| self.host_subnets.apply(&e))
            }
            Ev::NetNamespace(r) => watch_event("NetNamespace", r, errors)
                .is_some_and(|e| self.net_namespaces.apply(&e)),
            Ev::ClusterNetwork(r) => watch_event("ClusterNetwork", r, errors)
                .is_some_and(|e| self.cluster_network.apply(&e)),
        }
    }

    /// Records a successful write (`stored`: the object the server returned, with its new
    /// resourceVersion) in the stores before its watch event arrives.
    fn record(&mut self, a: &Action, stored: Option<&DynamicObject>) {
        let gone = |kind: &str, plural: &str, name: &str| {
            Event::Delete(DynamicObject::new(name, &api_resource(kind, plural)))
        };
        match (a, stored) {
            (Action::CreateClusterNetwork(_) | Action::UpdateClusterNetwork(_), Some(o)) => {
                self.cluster_network.apply(&Event::Apply(o.clone()));
            }
            (Action::CreateHostSubnet(_) | Action::UpdateHostSubnet(_), Some(o)) => {
                self.host_subnets.apply(&Event::Apply(o.clone()));
            }
            (Action::CreateNetNamespace(_) | Action::UpdateNetNamespace(_), Some(o)) => {
                self.net_namespaces.apply(&Event::Apply(o.clone()));
            }
            (Action::DeleteHostSubnet(n), _) => {
                self.host_subnets
                    .apply(&gone("HostSubnet", "hostsubnets", n));
            }
            (Action::DeleteNetNamespace(n), _) => {
                self.net_namespaces
                    .apply(&gone("NetNamespace", "netnamespaces", n));
            }
            _ => {}
        }
    }

    /// Whether Namespace `name` exists; `None` until the Namespaces are listed.
    fn has_namespace(&self, name: &str) -> Option<bool> {
        self.namespaces.ready.then(|| {
            self.namespaces
                .objects()
                .iter()
                .any(|n| n.metadata.name.as_deref() == Some(name))
        })
    }

    fn ready(&self) -> bool {
        self.nodes.ready
            && self.namespaces.ready
            && self.host_subnets.ready
            && self.net_namespaces.ready
            && self.cluster_network.ready
    }

    fn view(&self) -> View {
        let cluster_networks: BTreeMap<String, ClusterNetwork> =
            typed_by_name(&self.cluster_network);
        let cluster_network = cluster_networks.get("default").cloned();
        let ipv6_underlay = cluster_network
            .as_ref()
            .is_some_and(ClusterNetwork::is_ipv6_only);
        View {
            cluster_network,
            nodes: self
                .nodes
                .objects()
                .iter()
                .filter_map(|n| Some((n.metadata.name.clone()?, internal_ip(n, ipv6_underlay))))
                .collect(),
            host_subnets: typed_by_name(&self.host_subnets),
            // A terminating namespace is on its way out: its NetNamespace goes with it.
            namespaces: self
                .namespaces
                .objects()
                .iter()
                .filter(|n| {
                    n.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating")
                })
                .filter_map(|n| n.metadata.name.clone())
                .collect(),
            net_namespaces: typed_by_name(&self.net_namespaces),
            not_ready: self
                .nodes
                .objects()
                .iter()
                .filter(|n| !node_ready(n))
                .filter_map(|n| n.metadata.name.clone())
                .collect(),
        }
    }
}

/// The API of a network object's kind.
fn api(client: &Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &api_resource(kind, plural))
}

fn dynamic<T: Serialize>(obj: &T) -> Result<DynamicObject> {
    Ok(serde_json::from_value(serde_json::to_value(obj)?)?)
}

/// Executes one write; returns the object as the server stored it (None for a delete).
async fn execute(client: &Client, a: &Action) -> Result<Option<DynamicObject>> {
    let pp = PostParams::default();
    let (hs, nn, cn) = (
        api(client, "HostSubnet", "hostsubnets"),
        api(client, "NetNamespace", "netnamespaces"),
        api(client, "ClusterNetwork", "clusternetworks"),
    );
    Ok(match a {
        Action::CreateClusterNetwork(c) => Some(cn.create(&pp, &dynamic(c)?).await?),
        Action::UpdateClusterNetwork(c) => Some(cn.replace(c.name(), &pp, &dynamic(c)?).await?),
        Action::CreateHostSubnet(h) => Some(hs.create(&pp, &dynamic(h)?).await?),
        Action::UpdateHostSubnet(h) => Some(hs.replace(h.name(), &pp, &dynamic(h)?).await?),
        Action::DeleteHostSubnet(n) => {
            hs.delete(n, &DeleteParams::default()).await?;
            None
        }
        Action::CreateNetNamespace(n) => Some(nn.create(&pp, &dynamic(n)?).await?),
        Action::UpdateNetNamespace(n) => Some(nn.replace(n.name(), &pp, &dynamic(n)?).await?),
        Action::DeleteNetNamespace(n) => {
            nn.delete(n, &DeleteParams::default()).await?;
            None
        }
    })
}

/// Leader election on a Lease.
struct LeaseLock {
    api: Api<Lease>,
    name: String,
    identity: String,
    /// The holder seen last.
    holder: Option<String>,
    /// The holder last said to be in the way (openshift-sdn's Lease).
    last_reported: Option<String>,
}

impl LeaseLock {
    fn new(client: Client, namespace: &str, name: &str, identity: &str) -> LeaseLock {
        LeaseLock {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            holder: None,
            last_reported: None,
        }
    }

    fn now() -> MicroTime {
        MicroTime(k8s_openapi::jiff::Timestamp::now())
    }

    /// Takes the Lease if it is free, expired or ours, and renews it; whether we hold it now.
    async fn try_acquire_or_renew(&mut self) -> Result<bool> {
        let duration = i32::try_from(LEASE_DURATION.as_secs()).unwrap_or(15);
        let current =
            self.api
                .get_opt(&self.name)
                .await
                .map_err(|source| ControllerError::Lease {
                    what: format!("reading Lease {}", self.name),
                    source,
                })?;
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(duration),
                    acquire_time: Some(Self::now()),
                    renew_time: Some(Self::now()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => {
                    self.holder = Some(self.identity.clone());
                    Ok(true)
                }
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(source) => Err(ControllerError::Lease {
                    what: format!("creating Lease {}", self.name),
                    source,
                }),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        self.holder = spec.holder_identity.clone();
        let ours = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        let expired = match (&spec.renew_time, spec.lease_duration_seconds) {
            (Some(t), Some(d)) => {
                let age = k8s_openapi::jiff::Timestamp::now().duration_since(t.0);
                age.as_secs() >= i64::from(d)
            }
            _ => true,
        };
        if !ours && !expired && spec.holder_identity.is_some() {
            return Ok(false);
        }
        let mut new = spec.clone();
        if !ours {
            new.acquire_time = Some(Self::now());
            new.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            new.holder_identity = Some(self.identity.clone());
        }
        new.renew_time = Some(Self::now());
        new.lease_duration_seconds = Some(duration);
        lease.spec = Some(new);
        // The resourceVersion in `lease` makes this fail if someone else wrote in between.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                self.holder = Some(self.identity.clone());
                Ok(true)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(source) => Err(ControllerError::Lease {
                what: format!("renewing Lease {}", self.name),
                source,
            }),
        }
    }

    /// Gives the Lease up on a clean stop, so a follower takes over at once.
    async fn release(&mut self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await {
            if let Some(spec) = lease.spec.as_mut() {
                if spec.holder_identity.as_deref() == Some(self.identity.as_str()) {
                    spec.holder_identity = None;
                    spec.renew_time = None;
                    let _ = self
                        .api
                        .replace(&self.name, &PostParams::default(), &lease)
                        .await;
                }
            }
        }
    }
}

/// Resolves at the first SIGTERM or SIGINT: how the project's daemons (`sdn-controller`,
/// `sdn-agent`) learn to stop. Without the handlers it never resolves (stop with SIGKILL).
pub async fn until_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install the SIGTERM/SIGINT handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
