//! Pods: what the CNI server's ADD, DEL, CHECK and GC do on this node.
//!
//! The CNI layer turns a request into an [`Attachment`] (the attachment id, netns, namespace,
//! pod, requested address, runtime config, deadline) and renders what [`Pods::add`] returns
//! ([`Wired`]) as the CNI result; this module never sees CNI versions or bodies, and its errors
//! ([`PodError`]) carry their CNI code.
//!
//! An attachment is wired in steps ([`add`]), each undone in reverse order when a later one
//! fails or the request's deadline passes, so a failed ADD leaves nothing behind: (1) a
//! host-local compatible lease from the node subnet, (2) a veth pair with the pod end configured
//! inside the pod's network namespace, (3) the host end as a port of `br0` with its record
//! ([`record::PortRecord`]) in `external_ids` (one OVSDB transaction), (3b) bandwidth limits,
//! (4) the pod's seven flows (and its VNID's table-80 row) through the flow store, in one bundle
//! with the pod's cookie, (5) when the runtime asked for host ports, the pod's nat chain
//! ([`crate::features::hostports`]). The host ports are reserved and the bandwidth limits validated before
//! step 1, so a taken port or a bad value fails the ADD with nothing done. Bandwidth I/O (meters
//! on the netdev datapath, policing and QoS rows) is in [`limits`].
//!
//! Everything DEL needs is derived from the attachment itself: the port is found by its record
//! (else it is the veth named after the attachment's hash), the flow cookie is the port's, and
//! the lease is found by container id and ifname. DEL therefore works
//! when the agent has no memory of the pod (after a restart), when the netns or the veth is
//! already gone, and when it is called twice ([`ops`]).
//!
//! The pod table is rebuilt from OVS after a restart ([`restore`]): the pod ports' records carry
//! the sandbox, IP, namespace, pod name, interface, netns and VNID. VNID changes re-flow the
//! namespace's pods in one bundle ([`Pods::sync_vnids`]). Ports, records and QoS rows removed
//! or changed behind the agent's back are put back from the table ([`repair`]). ADD takes a
//! ready port from a pool (under a burst of ADDs, a warm one whose address and flows are in
//! already) and DEL leaves the port's flows, address and row to a batch, so neither waits for
//! ovs-vswitchd ([`pool`]).
//!
//! Every I/O goes through the seams of [`crate::bridge::seams`], so the whole module runs on the fakes
//! of `crate::bridge::fake` in its component tests (`tests.rs`), without root.
//!
//! Locking: the pod table's async mutex, then the flow store's. A pod enters the table only after
//! its flows are in, under the table lock, so a VNID re-flow sees every pod whose flows exist.

mod add;
pub mod error;
pub mod limits;
mod ops;
pub mod pool;
pub mod record;
mod repair;
mod restore;
#[cfg(test)]
mod tests;

use crate::lock;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use flows::{pod_flows, AttachmentId, Mode, NodeConfig, PodFlows, Vnid};
use ipnet::Ipv4Net;
use ovs::flow::Flow;
use ovs::openflow::Meter;
use serde_json::Value;
use tokio::sync::{watch, Mutex};
use tokio::time::Instant;

use crate::bridge::flowstore::FlowStore;
use crate::bridge::seams::{HostIo, NodeIo};
use crate::cni::AddResult;
use crate::features::bandwidth::Bandwidth;
use crate::features::hostports::HostPorts;
use crate::features::network_policy::PodPolicy;
use crate::host::ipam;
use crate::host::netlink::RouteSpec;
use cluster::ClusterState;

pub use error::PodError;
pub use record::{keys, PortRecord};

/// The bridge pods are plugged into.
pub const BRIDGE: &str = "br0";

/// One pod moved to another VNID by [`Pods::sync_vnids`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VnidChange {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The VNID its flows had.
    pub from: Vnid,
    /// The VNID its flows have now.
    pub to: Vnid,
}

/// What a CNI request asks of the pod logic (built by the CNI layer from a request).
#[derive(Debug, Clone)]
pub struct Attachment {
    /// Container id and interface name.
    pub id: AttachmentId,
    /// The pod's network namespace (required for ADD).
    pub netns: Option<PathBuf>,
    /// The pod's namespace (tenant).
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// `CNI_ARGS IP=`: an address, and a prefix length if one was given.
    pub requested_ip: Option<(Ipv4Addr, Option<u8>)>,
    /// `CNI_ARGS IP=`'s IPv6 address (dual stack), and its prefix length if given.
    pub requested_ip6: Option<(Ipv6Addr, Option<u8>)>,
    /// `runtimeConfig` of the network config.
    pub runtime_config: Option<Value>,
    /// The previous plugin's result (chained plugins), for CHECK.
    pub prev_result: Option<AddResult>,
    /// When the server stops waiting: steps not started by then are not started.
    pub deadline: Instant,
    /// Why the pod must get a plain veth, not a pool port (`cni::chain`): a plugin chained
    /// after this one needs a veth, or the network's chain is not known.
    pub plain_veth_for: Option<crate::cni::chain::PlainVeth>,
}

/// What ADD wired, for the CNI result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wired {
    /// The pod as it is now in the table.
    pub pod: Pod,
    /// The host end's MAC.
    pub host_mac: [u8; 6],
}

/// One attachment of a pod to the node network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    /// Container id and interface name.
    pub attachment: AttachmentId,
    /// Namespace (tenant).
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Network namespace path ("" if unknown).
    pub netns: String,
    /// IPv4 address (`None` on an IPv6-only cluster).
    pub ip: Option<Ipv4Addr>,
    /// IPv6 address (dual stack: pods created before the cluster had IPv6 keep IPv4 only;
    /// IPv6-only clusters).
    pub ip6: Option<Ipv6Addr>,
    /// Host end of the veth (the OVS port name).
    pub host_veth: String,
    /// OpenFlow port.
    pub ofport: u32,
    /// VNID the flows were installed with.
    pub vnid: Vnid,
    /// OpenFlow meter policing the pod's egress (netdev datapath, egress limit set).
    pub egress_meter: Option<u32>,
    /// The pod's host port mappings as recorded (JSON).
    pub hostports: Option<String>,
    /// The pod's bandwidth limits (from its port record after a restart).
    pub limits: Bandwidth,
    /// Its host veth's hardening (its record's).
    pub hardened: record::Hardening,
}

impl Pod {
    /// The pod's flow cookie (its port's).
    pub fn cookie(&self) -> u64 {
        flows::pod::port_cookie(&self.host_veth)
    }

    /// The pod's flows: seven per address family.
    pub fn flows(&self) -> Vec<Flow> {
        pod_flows(&PodFlows {
            ofport: self.ofport,
            ip: self.ip,
            ipv6: self.ip6,
            vnid: self.vnid,
            cookie: self.cookie(),
            egress_meter: self.egress_meter,
        })
    }
}

/// A pod's addresses for messages: `10.128.0.5`, `10.128.0.5,fd01:0:0:5::5` or
/// `fd01:0:0:5::5`.
pub fn shown_addrs(ip: Option<Ipv4Addr>, ip6: Option<Ipv6Addr>) -> String {
    let v: Vec<String> = ip
        .map(|a| a.to_string())
        .into_iter()
        .chain(ip6.map(|a| a.to_string()))
        .collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(",")
    }
}

/// Static facts every pod operation needs.
#[derive(Debug, Clone)]
pub struct PodNetwork {
    /// Base pipeline inputs (mode, subnet, cluster networks, service network).
    pub node: NodeConfig,
    /// Overlay MTU.
    pub mtu: u32,
    /// Turn tx checksum offload off in pods.
    pub tx_checksum_off: bool,
    /// How long an ADD waits for its namespace's NetNamespace.
    pub netnamespace_wait: Duration,
    /// Police pod egress with an OpenFlow meter instead of the Interface's
    /// `ingress_policing_rate` (the netdev datapath: its ports have no tc policer, and the
    /// userspace datapath implements meters itself).
    pub egress_meters: bool,
    /// Ports kept ready for ADDs ([`pool`]); 0: every ADD adds its own port.
    pub port_pool_size: usize,
}

impl PodNetwork {
    /// The routes a pod gets: default and service network via the gateway, cluster networks and
    /// multicast on-link (none on an IPv6-only cluster).
    pub fn routes(&self) -> Vec<RouteSpec> {
        let Some(v4) = &self.node.ipv4 else {
            return Vec::new();
        };
        let gw = Some(v4.gateway());
        let mut r = vec![
            RouteSpec {
                dst: Ipv4Net::default(),
                via: gw,
            },
            RouteSpec {
                dst: v4.service_cidr,
                via: gw,
            },
        ];
        for cn in &v4.cluster_networks {
            r.push(RouteSpec {
                dst: *cn,
                via: None,
            });
        }
        r.push(RouteSpec {
            dst: Ipv4Net::new(Ipv4Addr::new(224, 0, 0, 0), 4).expect("constant"),
            via: None,
        });
        r
    }

    /// A dual-stack pod's IPv6 routes besides the default one: the IPv6 service network via
    /// the IPv6 gateway, the cluster's IPv6 network on-link (as [`Self::routes`] for IPv4;
    /// the kernel's own `ff00::/8` route carries multicast).
    pub fn routes6(&self) -> Vec<crate::host::netlink::Route6Spec> {
        use crate::host::netlink::Route6Spec;
        let Some(v6) = &self.node.ipv6 else {
            return Vec::new();
        };
        let mut r = Vec::new();
        if let Some(svc) = v6.service_cidr {
            r.push(Route6Spec {
                dst: svc,
                via: Some(v6.gateway()),
            });
        }
        r.push(Route6Spec {
            dst: v6.cluster_network,
            via: None,
        });
        r
    }

    /// A dual-stack pod's IPv6 interface settings for address `ip6`.
    pub fn ipv6_spec(&self, ip6: Ipv6Addr) -> Option<crate::host::netlink::PodIpv6Spec> {
        let v6 = self.node.ipv6.as_ref()?;
        Some(crate::host::netlink::PodIpv6Spec {
            address: ipnet::Ipv6Net::new(ip6, v6.local_subnet.prefix_len())
                .expect("prefix of a valid subnet"),
            gateway: v6.gateway(),
            routes: self.routes6(),
        })
    }

    fn range6(&self) -> Option<ipam::Range<Ipv6Addr>> {
        let v6 = self.node.ipv6.as_ref()?;
        Some(ipam::Range::new(v6.local_subnet, v6.gateway()))
    }

    /// `CNI_ARGS IP=`'s addresses, checked against the node's subnets: a prefix length must be
    /// the subnet's, and an IPv6 address needs a node with an IPv6 subnet.
    fn requested(&self, at: &Attachment) -> Result<(Option<Ipv4Addr>, Option<Ipv6Addr>), PodError> {
        let prefix = |addr: IpAddr, len: Option<u8>, subnet: ipnet::IpNet| match len {
            Some(l) if l != subnet.prefix_len() => Err(PodError::RequestedPrefix {
                addr,
                prefix_len: l,
                subnet,
            }),
            _ => Ok(()),
        };
        let v4 = match at.requested_ip {
            None => None,
            Some((addr, len)) => {
                let v4 = self.node.ipv4.as_ref().ok_or(PodError::NoIpv4 { addr })?;
                prefix(addr.into(), len, v4.local_subnet.into())?;
                Some(addr)
            }
        };
        let v6 = match at.requested_ip6 {
            None => None,
            Some((addr, len)) => {
                let v6 = self.node.ipv6.as_ref().ok_or(PodError::NoIpv6 { addr })?;
                prefix(addr.into(), len, v6.local_subnet.into())?;
                Some(addr)
            }
        };
        Ok((v4, v6))
    }

    /// A pod's IPv4 interface settings for address `ip` (`None` on an IPv6-only cluster).
    pub fn ipv4_spec(&self, ip: Ipv4Addr) -> Option<crate::host::netlink::PodIpv4Spec> {
        let v4 = self.node.ipv4.as_ref()?;
        Some(crate::host::netlink::PodIpv4Spec {
            address: Ipv4Net::new(ip, v4.local_subnet.prefix_len())
                .expect("prefix of a valid subnet"),
            gateway: v4.gateway(),
            routes: self
                .routes()
                .into_iter()
                .filter(|r| r.dst.prefix_len() > 0)
                .collect(),
        })
    }

    fn range(&self) -> Option<ipam::Range> {
        let v4 = self.node.ipv4.as_ref()?;
        Some(ipam::Range {
            subnet: v4.local_subnet,
            gateway: v4.gateway(),
            start: None,
            end: None,
        })
    }
}

/// The I/O handles the pods use (one implementation of each seam).
#[derive(Debug)]
pub struct PodIo<Io: NodeIo> {
    /// OVSDB.
    pub db: Io::Db,
    /// The flow store of br0 (and through it the switch, for meters).
    pub store: Arc<FlowStore<Io::Switch>>,
    /// Netlink.
    pub links: Io::Links,
    /// iptables (host ports).
    pub nat: Io::Nat,
}

/// The node's pods and the machinery to wire them.
#[derive(Debug)]
pub struct Pods<Io: NodeIo = HostIo> {
    net: PodNetwork,
    db: Io::Db,
    store: Arc<FlowStore<Io::Switch>>,
    links: Io::Links,
    ipam: Arc<ipam::Store>,
    cluster: watch::Receiver<Arc<ClusterState>>,
    table: Mutex<HashMap<AttachmentId, Pod>>,
    /// Attachments whose ADD runs (they hold a lease before they enter `table`); shared with
    /// the IPAM garbage collector, which checks it under the lease lock.
    in_flight: Arc<std::sync::Mutex<BTreeSet<AttachmentId>>>,
    /// Host ports of the pods (`runtimeConfig.portMappings`) and their nat rules.
    hostports: HostPorts<Io::Nat>,
    /// Meter ids reserved by pods (in the table or being added), see [`limits`]. With the
    /// meter's configuration once known (installed, dumped or recorded on the port), so a
    /// reconcile can re-create a meter the switch lost before re-adding flows using it.
    meters: std::sync::Mutex<BTreeMap<u32, Option<Meter>>>,
    /// Ready ports and ports of deleted pods waiting for deletion ([`pool`]).
    pool: pool::PortPool,
    /// Networkpolicy mode: the policies (a new pod's own rows go in with its flows).
    policy: std::sync::OnceLock<Arc<dyn PodPolicy>>,
}

impl<Io: NodeIo> Pods<Io> {
    /// The pod manager. Nothing is read or changed until a method is called.
    pub fn new(
        net: PodNetwork,
        io: PodIo<Io>,
        ipam: Arc<ipam::Store>,
        cluster: watch::Receiver<Arc<ClusterState>>,
    ) -> Pods<Io> {
        Pods {
            db: io.db,
            store: io.store,
            links: io.links,
            ipam,
            cluster,
            table: Mutex::new(HashMap::new()),
            in_flight: Arc::default(),
            meters: std::sync::Mutex::default(),
            pool: pool::PortPool::default(),
            hostports: HostPorts::new(
                io.nat,
                net.node
                    .ipv4
                    .as_ref()
                    .map_or(&[][..], |v4| &v4.cluster_networks),
                net.node
                    .ipv6
                    .as_ref()
                    .map(|v6| v6.cluster_network)
                    .as_slice(),
            ),
            policy: std::sync::OnceLock::new(),
            net,
        }
    }

    /// Networkpolicy mode: the policies every ADD asks for the new pod's rows and every pod
    /// change wakes. Set once, before the node serves.
    pub fn set_policy(&self, policy: Arc<dyn PodPolicy>) {
        let _ = self.policy.set(policy);
    }

    /// Tells the policies that the local pods changed.
    fn policy_changed(&self) {
        if let Some(p) = self.policy.get() {
            p.changed();
        }
    }

    /// The network facts.
    pub fn network(&self) -> &PodNetwork {
        &self.net
    }

    /// Deletes the lease directory's temporary files of writes a kill cut off (off the async
    /// threads: a directory listing).
    pub async fn remove_stale_temps(&self) {
        let store = self.ipam.clone();
        let _ = tokio::task::spawn_blocking(move || store.remove_stale_temps()).await;
    }

    /// IPv4 addresses leased in the lease store (pods, warm ports), 0 when it cannot be read.
    pub fn lease_count(&self) -> usize {
        self.lease_counts().0
    }

    /// Addresses leased in the lease store, (IPv4, IPv6); (0, 0) when it cannot be read.
    pub fn lease_counts(&self) -> (usize, usize) {
        self.ipam.count_by_family().unwrap_or_default()
    }

    /// A snapshot of the pod table.
    pub async fn list(&self) -> Vec<Pod> {
        let mut v: Vec<Pod> = self.table.lock().await.values().cloned().collect();
        v.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        v
    }

    /// The VNID of `namespace`: 0 in subnet mode; in multitenant mode its NetNamespace's netid,
    /// waiting up to the configured bound for the NetNamespace to appear.
    pub async fn vnid_of(&self, namespace: &str) -> Result<Vnid, PodError> {
        if self.net.node.mode == Mode::Subnet {
            return Ok(Vnid::GLOBAL);
        }
        let mut rx = self.cluster.clone();
        let wait = self.net.netnamespace_wait;
        let found = tokio::time::timeout(wait, async {
            loop {
                if let Some(v) = rx.borrow_and_update().vnid(namespace) {
                    return Some(v);
                }
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        })
        .await;
        match found {
            Ok(Some(v)) => Ok(v),
            _ => {
                // Kubernetes mode knows the namespaces; standalone mode does not.
                let broken = self
                    .cluster
                    .borrow()
                    .broken_namespaces
                    .get(namespace)
                    .cloned();
                use error::NoVnid;
                let why = match (broken, &self.cluster.borrow().namespaces) {
                    (Some(problem), _) => NoVnid::UnusableFile { problem },
                    (None, Some(nss)) if !nss.contains(namespace) => {
                        NoVnid::NoSuchNamespace { waited: wait }
                    }
                    (None, Some(_)) => NoVnid::NotCreatedByController { waited: wait },
                    (None, None) => NoVnid::NotCreated { waited: wait },
                };
                crate::telemetry::metrics::metrics()
                    .vnid_not_found_errors
                    .inc();
                Err(PodError::NoNetNamespace {
                    namespace: namespace.to_string(),
                    why,
                })
            }
        }
    }

    /// The VNID the cluster state gives `namespace` now (`None` without a NetNamespace); 0 in
    /// subnet mode.
    fn current_vnid(&self, namespace: &str) -> Option<Vnid> {
        if self.net.node.mode == Mode::Subnet {
            return Some(Vnid::GLOBAL);
        }
        self.cluster.borrow().vnid(namespace)
    }

    /// Runs `f` on the lease store off the async threads (it does blocking file I/O under a
    /// file lock).
    async fn ipam<T: Send + 'static>(
        &self,
        f: impl FnOnce(&ipam::Store) -> Result<T, ipam::IpamError> + Send + 'static,
    ) -> Result<T, PodError> {
        let store = self.ipam.clone();
        Ok(tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| PodError::IpamTask(e.to_string()))??)
    }

    async fn release_lease(&self, a: &AttachmentId) -> Result<Vec<IpAddr>, PodError> {
        let (cid, ifn) = (a.container_id.clone(), a.ifname.clone());
        self.ipam(move |store| store.release(&cid, &ifn)).await
    }

    fn lock_in_flight(&self) -> std::sync::MutexGuard<'_, BTreeSet<AttachmentId>> {
        lock(&self.in_flight)
    }
}
