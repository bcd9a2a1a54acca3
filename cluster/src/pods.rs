//! The Pod as a node agent reads it, and the pods the Kubernetes source keeps.
//!
//! [`SlimPod`] is what is decoded of each Pod the watch delivers: name, namespace, uid,
//! resourceVersion, labels, annotations, `spec.nodeName`, `spec.hostNetwork`, the containers'
//! named ports, `status.phase` and `status.podIP`. Everything else (the rest of the spec, the
//! status conditions, managed fields, owner references) is skipped while parsing: a cluster's
//! first list of 150,000 pods is decoded without building 150,000 full `Pod` values.
//!
//! [`PodCache`] keeps this node's pods whole and, in networkpolicy mode, every other pod reduced
//! to what policies read (see its docs).

use std::collections::{BTreeMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use flows::policy::{PodView, PodsByNamespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::Event;
use multitenant::policy::{ContainerPort, Labels, Protocol};
use serde::Deserialize;

use crate::kept::Kept;
use crate::state::PodInfo;

/// A Pod, as much of it as the agent reads (see the module docs).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SlimPod {
    /// Name, namespace, uid, resourceVersion, labels and annotations only.
    #[serde(default, deserialize_with = "crate::slim::slim_meta")]
    pub metadata: ObjectMeta,
    /// Its spec, as far as read.
    #[serde(default)]
    pub spec: Option<SlimPodSpec>,
    /// Its status, as far as read.
    #[serde(default)]
    pub status: Option<SlimPodStatus>,
}

/// The part of a Pod's spec the agent reads.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimPodSpec {
    /// The node it is scheduled on.
    #[serde(default)]
    pub node_name: Option<String>,
    /// Whether it uses the node's network (then it has no address of the pod network).
    #[serde(default)]
    pub host_network: Option<bool>,
    /// Its containers' ports.
    #[serde(default)]
    pub containers: Vec<SlimContainer>,
    /// Its init containers' ports.
    #[serde(default)]
    pub init_containers: Option<Vec<SlimContainer>>,
}

/// A container, as far as its ports.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SlimContainer {
    /// Its declared ports.
    #[serde(default)]
    pub ports: Option<Vec<SlimPort>>,
}

/// A declared container port.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimPort {
    /// Its name (named ports of policies refer to it).
    #[serde(default)]
    pub name: Option<String>,
    /// TCP, UDP or SCTP (TCP when absent).
    #[serde(default)]
    pub protocol: Option<String>,
    /// The port number.
    pub container_port: i32,
}

/// The part of a Pod's status the agent reads.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimPodStatus {
    /// Pending, Running, Succeeded, Failed.
    #[serde(default)]
    pub phase: Option<String>,
    /// Its address.
    #[serde(rename = "podIP", default)]
    pub pod_ip: Option<String>,
    /// Its addresses, one per family (a dual-stack pod's; `podIP` is the first).
    #[serde(rename = "podIPs", default)]
    pub pod_ips: Option<Vec<SlimPodIp>>,
}

/// One entry of `status.podIPs`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SlimPodIp {
    /// The address.
    #[serde(default)]
    pub ip: String,
}

crate::slim::slim_resource!(SlimPod, "Pod", "pods", k8s_openapi::NamespaceResourceScope);

impl SlimPod {
    /// The addresses of its status (`podIP`, then `podIPs`), unless it is a host-network pod
    /// or one that finished.
    fn addresses(&self) -> impl Iterator<Item = &str> {
        let spec = self.spec.as_ref();
        let status = self.status.as_ref().filter(|s| {
            spec.is_some_and(|spec| spec.host_network != Some(true))
                && !matches!(s.phase.as_deref(), Some("Succeeded" | "Failed"))
        });
        status.into_iter().flat_map(|s| {
            s.pod_ip
                .as_deref()
                .into_iter()
                .chain(s.pod_ips.iter().flatten().map(|p| p.ip.as_str()))
        })
    }

    /// Its IPv4 address: none while it has none, for host-network pods and for pods that
    /// finished (and for a pod of an IPv6-only cluster).
    pub fn address(&self) -> Option<Ipv4Addr> {
        self.addresses().find_map(|a| a.parse().ok())
    }

    /// Its IPv6 address (a dual-stack or IPv6-only pod's, from `status.podIP` or
    /// `status.podIPs`), under the same conditions as [`Self::address`].
    pub fn address6(&self) -> Option<std::net::Ipv6Addr> {
        self.addresses().find_map(|a| a.parse().ok())
    }

    /// Its named container ports (init containers' too).
    pub fn named_ports(&self) -> Vec<ContainerPort> {
        let Some(spec) = &self.spec else {
            return Vec::new();
        };
        spec.containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .flat_map(|c| c.ports.iter().flatten())
            .filter_map(|cp| {
                let name = cp.name.clone()?;
                let protocol = Protocol::parse(cp.protocol.as_deref().unwrap_or("TCP"))?;
                let port = u16::try_from(cp.container_port).ok()?;
                Some(ContainerPort {
                    name,
                    protocol,
                    port,
                })
            })
            .collect()
    }

    /// Its labels.
    pub fn labels(&self) -> Labels {
        self.metadata.labels.clone().unwrap_or_default()
    }
}

/// What node `node` keeps of a pod, when it is that node's (a pod of another node is nothing,
/// so an event that moved it off the node removes it).
fn read_local(node: &str, p: &SlimPod) -> Option<PodInfo> {
    let on = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
    (on == Some(node)).then(|| PodInfo {
        uid: p.metadata.uid.clone().unwrap_or_default(),
        annotations: p.metadata.annotations.clone().unwrap_or_default(),
        labels: p.labels(),
        node: node.to_string(),
        ip: p.address(),
        ports: p.named_ports(),
    })
}

/// A pod's `namespace/name`.
fn pod_key(p: &SlimPod) -> Option<String> {
    Some(format!(
        "{}/{}",
        p.metadata.namespace.as_deref()?,
        p.metadata.name.as_deref()?
    ))
}

/// One shared copy of each distinct value (a label set, a list of ports): the pods of a
/// workload carry the same ones. Values no pod uses any more are dropped when the set has
/// doubled since the last prune.
struct Interner<T: ?Sized> {
    set: HashSet<Arc<T>>,
    pruned_at: usize,
}

impl<T: ?Sized> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            set: HashSet::new(),
            pruned_at: 0,
        }
    }
}

impl<T: ?Sized + Eq + std::hash::Hash> Interner<T> {
    /// The one copy of `value`.
    fn intern<V: Into<Arc<T>> + std::borrow::Borrow<T>>(&mut self, value: V) -> Arc<T> {
        if let Some(a) = self.set.get(value.borrow()) {
            return a.clone();
        }
        if self.set.len() > 2 * self.pruned_at + 1024 {
            self.set.retain(|a| Arc::strong_count(a) > 1);
            self.pruned_at = self.set.len();
        }
        let a: Arc<T> = value.into();
        self.set.insert(a.clone());
        a
    }
}

/// The pods the source keeps, from two watches: this node's pods (field selector
/// `spec.nodeName`), whole as [`PodInfo`], and in networkpolicy mode every pod of the cluster
/// that has an address, reduced to what policies read ([`PodView`]: namespace, name, labels,
/// address, named ports), by namespace. The first is small and listed before the node serves;
/// the second is the cluster's largest list and completes in the background
/// ([`PodCache::peers_ready`]). A namespace's map of views is shared with the published states
/// and copied only when one of its pods changes; each distinct label set is kept once (the pods
/// of a workload share theirs). Nothing else of a Pod (spec, status, managed fields) outlives
/// its watch event.
pub(crate) struct PodCache {
    node: String,
    /// This node's pods by `namespace/name` (their own list's `ready` says whether they are
    /// listed).
    pub(crate) local: Kept<PodInfo>,
    pub(crate) peer_pods: PodsByNamespace,
    /// A re-list of every pod in progress: the map being filled until `InitDone` swaps it in.
    peer_relist: Option<BTreeMap<String, BTreeMap<String, PodView>>>,
    labels: Interner<Labels>,
    ports: Interner<[ContainerPort]>,
    /// Whether every pod of the cluster is listed (networkpolicy mode).
    pub(crate) peers_ready: bool,
}

impl PodCache {
    pub(crate) fn new(node: &str) -> PodCache {
        PodCache {
            node: node.to_string(),
            local: Kept::new(),
            peer_pods: PodsByNamespace::default(),
            peer_relist: None,
            labels: Interner::default(),
            ports: Interner::default(),
            peers_ready: false,
        }
    }

    /// The pod's namespace, name and view for policies (when it has an address).
    fn read_peer(&mut self, p: &SlimPod) -> Option<(String, String, Option<PodView>)> {
        let ns = p.metadata.namespace.clone()?;
        let name = p.metadata.name.clone()?;
        let (ip, ip6) = (p.address(), p.address6());
        let view = (ip.is_some() || ip6.is_some()).then(|| PodView {
            namespace: ns.clone(),
            name: name.clone(),
            labels: self.labels.intern(p.labels()),
            ip,
            ip6,
            ports: self.ports.intern(p.named_ports()),
        });
        Some((ns, name, view))
    }

    /// Applies one event of the watch of this node's pods; returns whether they changed.
    pub(crate) fn apply_local(&mut self, ev: &Event<SlimPod>) -> bool {
        let node = self.node.as_str();
        self.local.apply(ev, pod_key, |p| read_local(node, p))
    }

    /// Applies one event of the watch of every pod (networkpolicy mode); returns whether the
    /// views changed.
    pub(crate) fn apply_peers(&mut self, ev: &Event<SlimPod>) -> bool {
        match ev {
            Event::Init => {
                self.peer_relist = Some(BTreeMap::new());
                false
            }
            Event::InitApply(p) => {
                if let Some((ns, name, Some(view))) = self.read_peer(p) {
                    self.peer_relist
                        .get_or_insert_with(BTreeMap::new)
                        .entry(ns)
                        .or_default()
                        .insert(name, view);
                }
                false
            }
            Event::InitDone => {
                let views = self.peer_relist.take().unwrap_or_default();
                // A namespace whose pods are unchanged keeps its shared map.
                self.peer_pods = PodsByNamespace::from_maps(views, &self.peer_pods);
                self.peers_ready = true;
                true
            }
            Event::Apply(p) => self
                .read_peer(p)
                .is_some_and(|(ns, name, view)| self.peer_pods.set(&ns, &name, view)),
            Event::Delete(p) => {
                let (Some(ns), Some(name)) = (&p.metadata.namespace, &p.metadata.name) else {
                    return false;
                };
                self.peer_pods.set(ns, name, None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_gives_address_labels_and_named_ports_and_nothing_else_is_kept() {
        let p: SlimPod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "namespace": "n", "uid": "u1", "labels": {"app": "web"},
                         "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}],
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": "rs", "uid": "u2"}]},
            "spec": {"nodeName": "node-1", "volumes": [{"name": "v", "emptyDir": {}}],
                     "containers": [{"name": "c", "image": "i", "ports": [
                {"name": "http", "containerPort": 8080},
                {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                {"containerPort": 9000}]}]},
            "status": {"podIP": "10.128.0.7", "phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True"}]}}))
        .unwrap();
        assert_eq!(p.address(), Some(Ipv4Addr::new(10, 128, 0, 7)));
        assert_eq!(p.labels()["app"], "web");
        assert_eq!(p.metadata.uid.as_deref(), Some("u1"));
        assert!(p.metadata.managed_fields.is_none() && p.metadata.owner_references.is_none());
        assert_eq!(
            p.named_ports(),
            vec![
                ContainerPort {
                    name: "http".into(),
                    protocol: Protocol::Tcp,
                    port: 8080
                },
                ContainerPort {
                    name: "dns".into(),
                    protocol: Protocol::Udp,
                    port: 53
                },
            ]
        );
        let mut done = p.clone();
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert_eq!(done.address(), None);
        let mut host = p;
        host.spec.as_mut().unwrap().host_network = Some(true);
        assert_eq!(host.address(), None);
    }

    #[test]
    fn addresses_of_either_family_come_from_pod_ip_or_pod_ips() {
        let pod = |status: serde_json::Value| -> SlimPod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "a", "namespace": "n"},
                "spec": {"nodeName": "node-1"}, "status": status}))
            .unwrap()
        };
        let dual = pod(serde_json::json!({"podIP": "10.128.0.7",
            "podIPs": [{"ip": "10.128.0.7"}, {"ip": "fd01::7"}], "phase": "Running"}));
        assert_eq!(dual.address(), Some(Ipv4Addr::new(10, 128, 0, 7)));
        assert_eq!(dual.address6(), Some("fd01::7".parse().unwrap()));
        let only6 = pod(serde_json::json!({"podIP": "fd01::8", "podIPs": [{"ip": "fd01::8"}]}));
        assert_eq!(only6.address(), None);
        assert_eq!(only6.address6(), Some("fd01::8".parse().unwrap()));
        let mut done = only6;
        done.status.as_mut().unwrap().phase = Some("Failed".into());
        assert_eq!(done.address6(), None);
        let mut cache = PodCache::new("node-2");
        let (_, _, view) = cache
            .read_peer(&pod(serde_json::json!({"podIP": "fd01::9"})))
            .unwrap();
        let view = view.expect("an IPv6-only pod is a peer");
        assert_eq!(
            (view.ip, view.ip6),
            (None, Some("fd01::9".parse().unwrap()))
        );
    }
}
