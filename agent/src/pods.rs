//! Pods: what the CNI server's ADD, DEL, CHECK and GC do on this node.
//!
//! An attachment (container id, interface name) is wired in four steps, each undone in reverse
//! order when a later one fails or the request's deadline passes, so a failed ADD leaves nothing
//! behind: (1) a host-local compatible lease from the node subnet, (2) a veth pair with the pod
//! end configured inside the pod's network namespace, (3) the host end as a port of `br0` with
//! `external_ids` naming the attachment (one OVSDB transaction), (4) the pod's five flows (and
//! its VNID's table-80 row) in one OpenFlow bundle with the pod's cookie, (5) when the runtime
//! asked for host ports, the pod's nat chain ([`crate::hostports`]); the host ports are reserved
//! before step 1 (a taken one fails the ADD with nothing done) and recorded in the port's
//! `external_ids` (`hostports`) for DEL and restarts. A pod with bandwidth limits
//! ([`crate::bandwidth`], validated before anything is reserved) gets them on its port between
//! (3) and (4); its QoS rows carry `sandbox`/`ifname` external ids, so DEL and GC find them
//! without the pod table. On the netdev datapath the egress limit is an OpenFlow meter instead
//! of interface policing (no tc policer there): its id (the attachment's hash into
//! 1..=65536, probed past ids in use) is recorded in the port's `external_ids:meter`; the meter
//! is added before the flow bundle (OVS bundles cannot carry meter mods), the pod's table-20 IP
//! row applies it, DEL deletes it after the flows, and start-up deletes meters no pod records.
//!
//! Everything DEL needs is derived from the attachment itself: the host veth name and the flow
//! cookie are hashes of `(container id, ifname)`, and the lease is found by container id and
//! ifname. DEL therefore works when the agent has no memory of the pod (after a restart), when
//! the netns or the veth is already gone, and when it is called twice.
//!
//! The pod table is rebuilt from OVS after a restart ([`Pods::rebuild_from_ovs`]): the pod ports'
//! `external_ids` carry the sandbox, IP, namespace, pod name, interface and netns. Flow changes
//! of all pods go through the table's lock, so the full reconcile ([`Pods::reconcile`]) never
//! races a pod's own bundle.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use flows::{pod_cookie, pod_flows, vnid_cookie, vnid_flow, Mode, NodeConfig, PodFlows};
use ipnet::Ipv4Net;
use ovs::flow::{Flow, MacAddr};
use ovs::openflow::{BundleMsg, DumpFilter, Meter, MeterModCommand, OfError};
use ovs::ovsdb::{self, PortSpec};
use tokio::sync::{watch, Mutex};
use tokio::time::Instant;

use crate::bandwidth::Bandwidth;
use crate::cluster::ClusterState;
use crate::cni::{codes, AddResult, CniError, Interface, IpConfig, Request, Route};
use crate::hostports::{self, HostPorts};
use crate::ipam;
use crate::netlink::{self, Netlink, PodLinkSpec, RouteSpec};
use crate::switch::{ReconcileStats, Switch};

// The flows crate keeps unknown-tenant pods apart by this VNID; both crates must agree on it.
const _: () = assert!(flows::UNASSIGNED_VNID == multitenant::Vnid::UNASSIGNED);

/// The bridge pods are plugged into.
pub const BRIDGE: &str = "br0";

/// `external_ids` keys of a pod port.
pub mod ids {
    /// Container (sandbox) id.
    pub const SANDBOX: &str = "sandbox";
    /// Pod IPv4 address.
    pub const IP: &str = "ip";
    /// Kubernetes namespace (the tenant).
    pub const NAMESPACE: &str = "namespace";
    /// Pod name.
    pub const POD: &str = "pod";
    /// Interface name inside the pod.
    pub const IFNAME: &str = "ifname";
    /// The pod's network namespace path.
    pub const NETNS: &str = "netns";
    /// The VNID the pod's flows were installed with: after a restart, a pod whose NetNamespace
    /// has vanished keeps its tenant instead of falling back to the global VNID 0.
    pub const VNID: &str = "vnid";
    /// The OpenFlow meter policing the pod's egress (netdev datapath), so DEL and restarts
    /// know it without agent memory.
    pub const METER: &str = "meter";
    /// The meter's rate (kbit/s), for re-creating it after ovs-vswitchd lost it.
    pub const METER_RATE: &str = "meter_rate_kbps";
    /// The meter's burst (kbit).
    pub const METER_BURST: &str = "meter_burst_kbit";
}

/// Meter ids pods use: 1..=MAX_METERS (the netdev datapath of Open vSwitch 3.1 offers far more;
/// a node runs a few hundred pods at most).
const MAX_METERS: u32 = 65_536;

/// One pod moved to another VNID by [`Pods::sync_vnids`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VnidChange {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The VNID its flows had.
    pub from: u32,
    /// The VNID its flows have now.
    pub to: u32,
}

/// One attachment of a pod to the node network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    /// Container (sandbox) id.
    pub container_id: String,
    /// Interface name inside the pod.
    pub ifname: String,
    /// Namespace (tenant).
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Network namespace path ("" if unknown).
    pub netns: String,
    /// Address.
    pub ip: Ipv4Addr,
    /// Host end of the veth (the OVS port name).
    pub host_veth: String,
    /// OpenFlow port.
    pub ofport: u32,
    /// VNID the flows were installed with.
    pub vnid: u32,
    /// OpenFlow meter policing the pod's egress (netdev datapath, egress limit set).
    pub egress_meter: Option<u32>,
}

impl Pod {
    /// The pod's flow cookie.
    pub fn cookie(&self) -> u64 {
        pod_cookie(&self.container_id, &self.ifname)
    }

    fn flows(&self) -> Vec<Flow> {
        pod_flows(&PodFlows {
            ofport: self.ofport,
            ip: self.ip,
            vnid: self.vnid,
            cookie: self.cookie(),
            egress_meter: self.egress_meter,
        })
    }
}

type Key = (String, String);

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
}

impl PodNetwork {
    /// The routes a pod gets: default and service network via the gateway, cluster networks and
    /// multicast on-link.
    pub fn routes(&self) -> Vec<RouteSpec> {
        let gw = Some(self.node.gateway());
        let mut r = vec![
            RouteSpec {
                dst: Ipv4Net::default(),
                via: gw,
            },
            RouteSpec {
                dst: self.node.service_cidr,
                via: gw,
            },
        ];
        for cn in &self.node.cluster_networks {
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

    fn range(&self) -> ipam::Range {
        ipam::Range {
            subnet: self.node.local_subnet,
            gateway: self.node.gateway(),
            start: None,
            end: None,
        }
    }
}

/// The node's pods and the machinery to wire them.
#[derive(Debug)]
pub struct Pods {
    net: PodNetwork,
    db: ovsdb::Client,
    switch: Arc<Switch>,
    netlink: Netlink,
    ipam: Arc<ipam::Store>,
    cluster: watch::Receiver<Arc<ClusterState>>,
    table: Mutex<HashMap<Key, Pod>>,
    /// Attachments whose ADD runs (they hold a lease before they enter `table`); shared with
    /// the IPAM garbage collector, which checks it under the lease lock.
    in_flight: Arc<std::sync::Mutex<BTreeSet<Key>>>,
    /// Host ports of the pods (`runtimeConfig.portMappings`) and their nat rules.
    hostports: HostPorts,
    /// Meter ids reserved by pods (in the table or being added), see [`Pods::reserve_meter`].
    /// With the meter's configuration once known (installed, dumped or recorded on the port),
    /// so a reconcile can re-create a meter the switch lost before re-adding flows using it.
    meters: std::sync::Mutex<BTreeMap<u32, Option<Meter>>>,
}

/// Undo steps of a partly done ADD, run in reverse.
enum Undo {
    Lease,
    Veth(String),
    Port(String),
    /// A reserved meter id (the meter may or may not exist yet).
    Meter(u32),
    Bandwidth,
    Flows,
    HostPorts,
}

impl Pods {
    /// The pod manager. Nothing is read or changed until a method is called.
    pub fn new(
        net: PodNetwork,
        db: ovsdb::Client,
        switch: Arc<Switch>,
        netlink: Netlink,
        ipam: Arc<ipam::Store>,
        cluster: watch::Receiver<Arc<ClusterState>>,
    ) -> Pods {
        Pods {
            db,
            switch,
            netlink,
            ipam,
            cluster,
            table: Mutex::new(HashMap::new()),
            in_flight: Arc::default(),
            meters: std::sync::Mutex::default(),
            hostports: HostPorts::new(
                crate::iptables::Iptables::host(),
                net.node.cluster_networks.clone(),
            ),
            net,
        }
    }

    /// The network facts.
    pub fn network(&self) -> &PodNetwork {
        &self.net
    }

    /// A snapshot of the pod table.
    pub async fn list(&self) -> Vec<Pod> {
        let mut v: Vec<Pod> = self.table.lock().await.values().cloned().collect();
        v.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        v
    }

    /// The VNID of `namespace`: 0 in subnet mode; in multitenant mode its NetNamespace's netid,
    /// waiting up to the configured bound for the NetNamespace to appear.
    pub async fn vnid_of(&self, namespace: &str) -> Result<u32, CniError> {
        if self.net.node.mode == Mode::Subnet {
            return Ok(0);
        }
        let mut rx = self.cluster.clone();
        let wait = self.net.netnamespace_wait;
        let found = tokio::time::timeout(wait, async {
            loop {
                if let Some(v) = rx.borrow_and_update().vnid_of(namespace) {
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
                let details = match &self.cluster.borrow().namespaces {
                    Some(nss) if !nss.contains(namespace) => format!(
                        "waited {}s; the namespace does not exist in the cluster",
                        wait.as_secs()
                    ),
                    Some(_) => format!(
                        "waited {}s; the controller (sdn-agent controller) creates a \
                         NetNamespace for every namespace: is it running?",
                        wait.as_secs()
                    ),
                    None => format!(
                        "waited {}s; create it (sdnctl create {namespace}) or use an existing \
                         namespace, then retry",
                        wait.as_secs()
                    ),
                };
                Err(CniError::new(
                    codes::INTERNAL,
                    format!("namespace {namespace:?} has no NetNamespace (no VNID)"),
                    details,
                ))
            }
        }
    }

    /// CNI ADD.
    pub async fn add(&self, req: &Request) -> Result<AddResult, CniError> {
        let key = (req.container_id.clone(), req.ifname.clone());
        if let Some(p) = self.table.lock().await.get(&key) {
            return Err(CniError::new(
                codes::INTERNAL,
                format!(
                    "container {} already has interface {} (ip {})",
                    p.container_id, p.ifname, p.ip
                ),
                "DEL the attachment before adding it again".to_string(),
            ));
        }
        let netns = req.netns.clone().ok_or_else(|| {
            CniError::new(
                codes::INVALID_ENV,
                "CNI_NETNS is required for ADD",
                String::new(),
            )
        })?;
        let namespace = req
            .args
            .pod_namespace()
            .map(str::to_string)
            .or_else(|| req.config.namespace.clone())
            .unwrap_or_else(|| "default".to_string());
        let name = req
            .args
            .pod_name()
            .map(str::to_string)
            .unwrap_or_else(|| req.container_id.chars().take(12).collect());
        let vnid = self.vnid_of(&namespace).await?;
        let requested = match req.args.ip() {
            None => None,
            Some(r) => {
                let len = self.net.node.local_subnet.prefix_len();
                if r.prefix_len.is_some_and(|l| l != len) {
                    return Err(CniError::new(
                        codes::INVALID_ENV,
                        format!(
                            "CNI_ARGS IP={}/{} does not match the node subnet {}",
                            r.addr,
                            r.prefix_len.unwrap_or(0),
                            self.net.node.local_subnet
                        ),
                        format!(
                            "ask for an address of {} (or leave IP out)",
                            self.net.node.local_subnet
                        ),
                    ));
                }
                Some(r.addr)
            }
        };

        // Bandwidth limits: checked first (pure), so a bad value fails with nothing reserved.
        let bandwidth = self.bandwidth_of(req, &namespace, &name)?;

        // Host ports: reserved before anything else, so a taken one fails the ADD with nothing
        // done.
        self.hostports.reserve(hostports::PodPorts {
            namespace: namespace.clone(),
            pod: name.clone(),
            sandbox: req.container_id.clone(),
            ifname: req.ifname.clone(),
            ip: None,
            mappings: hostports::parse(req.config.runtime_config.as_ref())?,
        })?;

        let mut done = Vec::new();
        self.lock_in_flight().insert(key.clone());
        let result = self
            .add_steps(
                req, &netns, namespace, name, vnid, requested, &bandwidth, &mut done,
            )
            .await;
        self.lock_in_flight().remove(&key);
        match result {
            Ok(r) => Ok(r),
            Err(e) => {
                tracing::warn!(error = %e.msg, details = %e.details, steps = done.len(), "ADD failed; undoing");
                self.undo(&req.container_id, &req.ifname, done).await;
                self.hostports.release(&req.container_id, &req.ifname);
                Err(e)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn add_steps(
        &self,
        req: &Request,
        netns: &std::path::Path,
        namespace: String,
        name: String,
        vnid: u32,
        requested: Option<Ipv4Addr>,
        bandwidth: &Bandwidth,
        done: &mut Vec<Undo>,
    ) -> Result<AddResult, CniError> {
        let (id, ifname) = (req.container_id.as_str(), req.ifname.as_str());
        let deadline = req.deadline;
        let check_deadline = |step: &str| {
            if Instant::now() >= deadline {
                Err(CniError::new(
                    codes::TRY_AGAIN_LATER,
                    format!("deadline passed before {step}"),
                    "the request was undone; retry",
                ))
            } else {
                Ok(())
            }
        };

        // 1. Lease.
        let range = self.net.range();
        let (cid, ifn) = (id.to_string(), ifname.to_string());
        let lease = self
            .ipam(move |store| store.allocate(&range, &cid, &ifn, requested))
            .await?;
        done.push(Undo::Lease);
        let ip = lease.ip;
        check_deadline("creating the veth")?;

        // 2. Veth.
        let host_veth = netlink::host_veth_name(id, ifname);
        let mac = MacAddr::from_pod_ip(ip);
        let spec = PodLinkSpec {
            netns: netns.to_path_buf(),
            ifname: ifname.to_string(),
            host_ifname: host_veth.clone(),
            mac: mac.0,
            address: Ipv4Net::new(ip, self.net.node.local_subnet.prefix_len())
                .expect("prefix of a valid subnet"),
            gateway: self.net.node.gateway(),
            // The default route is always added by create_pod_link.
            routes: self
                .net
                .routes()
                .into_iter()
                .filter(|r| r.dst.prefix_len() > 0)
                .collect(),
            mtu: self.net.mtu,
            tx_checksum_off: self.net.tx_checksum_off,
        };
        done.push(Undo::Veth(host_veth.clone()));
        let link = self
            .netlink
            .create_pod_link(&spec)
            .await
            .map_err(netlink_error)?;
        check_deadline("adding the OVS port")?;

        // 3. OVS port.
        let mut port = PortSpec::new(host_veth.clone(), "");
        port.external_ids = BTreeMap::from([
            (ids::SANDBOX.to_string(), id.to_string()),
            (ids::IP.to_string(), ip.to_string()),
            (ids::NAMESPACE.to_string(), namespace.clone()),
            (ids::POD.to_string(), name.clone()),
            (ids::IFNAME.to_string(), ifname.to_string()),
            (ids::NETNS.to_string(), netns.display().to_string()),
            (ids::VNID.to_string(), vnid.to_string()),
        ]);
        let egress_meter = if self.net.egress_meters && bandwidth.policing().is_some() {
            let m = self.reserve_meter(id, ifname)?;
            done.push(Undo::Meter(m));
            port.external_ids
                .insert(ids::METER.to_string(), m.to_string());
            if let Some(p) = bandwidth.meter() {
                port.external_ids
                    .insert(ids::METER_RATE.to_string(), p.rate_kbps.to_string());
                port.external_ids
                    .insert(ids::METER_BURST.to_string(), p.burst_kb.to_string());
            }
            Some(m)
        } else {
            None
        };
        let mappings = self.hostports.mappings(id, ifname);
        if !mappings.is_empty() {
            port.external_ids.insert(
                hostports::EXTERNAL_ID.to_string(),
                hostports::to_json(&mappings),
            );
        }
        done.push(Undo::Port(host_veth.clone()));
        let ofport = self.db.add_port(BRIDGE, &port).await.map_err(|e| {
            CniError::new(
                codes::INTERNAL,
                format!("adding port {host_veth} to {BRIDGE}"),
                e.to_string(),
            )
        })?;
        check_deadline("applying bandwidth limits")?;

        // 3b. Bandwidth limits.
        if !bandwidth.is_empty() {
            done.push(Undo::Bandwidth);
            self.apply_bandwidth(id, ifname, &host_veth, bandwidth, egress_meter)
                .await?;
        }
        check_deadline("installing the pod's flows")?;

        // 4. Flows, under the table lock so a reconcile never sees half a pod.
        let pod = Pod {
            container_id: id.to_string(),
            ifname: ifname.to_string(),
            namespace,
            name,
            netns: netns.display().to_string(),
            ip,
            host_veth: host_veth.clone(),
            ofport,
            vnid,
            egress_meter,
        };
        let mut pod = pod;
        {
            let mut table = self.table.lock().await;
            // A VNID change may have arrived since the VNID was read: [`Pods::sync_vnids`] only
            // re-flows pods already in the table, so take the newest VNID here, under the lock.
            if let Some(now) = self.current_vnid(&pod.namespace) {
                if now != pod.vnid {
                    tracing::info!(sandbox = %id, namespace = %pod.namespace, from = pod.vnid, to = now, "namespace VNID changed during ADD");
                    pod.vnid = now;
                }
            }
            done.push(Undo::Flows);
            let mut msgs = vec![BundleMsg::delete_by_cookie(pod.cookie(), u64::MAX)];
            msgs.extend(pod.flows().into_iter().map(BundleMsg::add));
            if self.net.node.mode == Mode::Multitenant {
                msgs.extend(vnid_flow(pod.vnid).map(BundleMsg::add));
            }
            self.switch.bundle(&msgs).await.map_err(|e| {
                CniError::new(
                    codes::INTERNAL,
                    format!("installing the flows of {host_veth}"),
                    e.to_string(),
                )
            })?;
            table.insert((pod.container_id.clone(), pod.ifname.clone()), pod.clone());
            if pod.vnid != vnid {
                self.record_vnid(&pod).await;
            }
        }
        // 5. Host ports: the pod's nat chain (one sync of all host port rules).
        if !mappings.is_empty() {
            check_deadline("installing the host port rules")?;
            done.push(Undo::HostPorts);
            self.hostports.set_ip(id, ifname, ip);
            self.hostports.sync().await.map_err(|e| {
                CniError::new(
                    codes::INTERNAL,
                    format!("installing the host port rules of {id}/{ifname}"),
                    e.to_string(),
                )
            })?;
        }
        tracing::info!(
            sandbox = %id, ifname, namespace = %pod.namespace, pod = %pod.name, %ip, ofport,
            vnid = pod.vnid, "pod wired"
        );
        Ok(self.result(req, &pod, &link.host_mac))
    }

    fn result(&self, req: &Request, pod: &Pod, host_mac: &[u8; 6]) -> AddResult {
        let mut r = req.config.prev_result.clone().unwrap_or_default();
        let host_index = r.interfaces.len();
        r.interfaces.push(Interface {
            name: pod.host_veth.clone(),
            mac: Some(MacAddr(*host_mac).to_string()),
            sandbox: None,
            mtu: Some(self.net.mtu),
        });
        r.interfaces.push(Interface {
            name: pod.ifname.clone(),
            mac: Some(MacAddr::from_pod_ip(pod.ip).to_string()),
            sandbox: Some(pod.netns.clone()),
            mtu: Some(self.net.mtu),
        });
        r.ips.push(IpConfig {
            address: Ipv4Net::new(pod.ip, self.net.node.local_subnet.prefix_len())
                .expect("prefix of a valid subnet"),
            gateway: Some(self.net.node.gateway()),
            interface: Some(host_index + 1),
        });
        for route in self.net.routes() {
            r.routes.push(Route {
                dst: route.dst,
                gw: route.via,
            });
        }
        r
    }

    async fn undo(&self, id: &str, ifname: &str, done: Vec<Undo>) {
        for step in done.into_iter().rev() {
            let outcome = match &step {
                Undo::HostPorts => self
                    .hostports
                    .remove(id, ifname, true)
                    .await
                    .map_err(|e| e.to_string()),
                Undo::Flows => self.remove_flows(id, ifname).await.map_err(|e| e.msg),
                Undo::Bandwidth => self.remove_bandwidth(id, ifname).await.map_err(|e| e.msg),
                Undo::Meter(m) => self.delete_meter(*m).await.map_err(|e| e.msg),
                Undo::Port(p) => self
                    .db
                    .delete_port(BRIDGE, p)
                    .await
                    .map_err(|e| e.to_string()),
                Undo::Veth(v) => self
                    .netlink
                    .delete_host_veth(v)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string()),
                Undo::Lease => self
                    .release_lease(id, ifname)
                    .await
                    .map(drop)
                    .map_err(|e| e.msg),
            };
            if let Err(e) = outcome {
                tracing::error!(sandbox = %id, ifname, error = %e, "undo step failed");
            }
        }
    }

    /// Removes the pod's flows (and its VNID's table-80 row if it was the VNID's last local pod)
    /// and forgets the pod.
    async fn remove_flows(&self, id: &str, ifname: &str) -> Result<(), CniError> {
        let mut table = self.table.lock().await;
        let gone = table.remove(&(id.to_string(), ifname.to_string()));
        let mut msgs = vec![BundleMsg::delete_by_cookie(
            pod_cookie(id, ifname),
            u64::MAX,
        )];
        if let Some(p) = &gone {
            if self.net.node.mode == Mode::Multitenant
                && p.vnid != 0
                && !table.values().any(|o| o.vnid == p.vnid)
            {
                msgs.push(BundleMsg::delete_by_cookie(vnid_cookie(p.vnid), u64::MAX));
            }
        }
        if let Err(e) = self.switch.bundle(&msgs).await {
            if let Some(p) = gone {
                table.insert((id.to_string(), ifname.to_string()), p);
            }
            return Err(CniError::new(
                codes::INTERNAL,
                format!("removing the flows of {id}/{ifname}"),
                e.to_string(),
            ));
        }
        Ok(())
    }

    /// Runs `f` on the lease store off the async threads (it does blocking file I/O under a
    /// file lock).
    async fn ipam<T: Send + 'static>(
        &self,
        f: impl FnOnce(&ipam::Store) -> Result<T, ipam::IpamError> + Send + 'static,
    ) -> Result<T, CniError> {
        let store = self.ipam.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| CniError::new(codes::INTERNAL, "IPAM task failed", e.to_string()))?
            .map_err(ipam_error)
    }

    async fn release_lease(&self, id: &str, ifname: &str) -> Result<Vec<Ipv4Addr>, CniError> {
        let (cid, ifn) = (id.to_string(), ifname.to_string());
        self.ipam(move |store| store.release(&cid, &ifn)).await
    }

    fn lock_in_flight(&self) -> std::sync::MutexGuard<'_, BTreeSet<Key>> {
        lock(&self.in_flight)
    }

    /// CNI DEL: idempotent, complete without a netns, a veth or any memory of the pod.
    pub async fn del(&self, id: &str, ifname: &str) -> Result<(), CniError> {
        // Host ports: known to the registry, or recorded on the port (stateless DEL).
        let recorded = self
            .db
            .find_interfaces_by_external_id(ids::SANDBOX, id)
            .iter()
            .any(|i| {
                i.external_ids.get(ids::IFNAME).map(String::as_str) == Some(ifname)
                    && i.external_ids.contains_key(hostports::EXTERNAL_ID)
            });
        self.hostports
            .remove(id, ifname, recorded)
            .await
            .map_err(|e| {
                CniError::new(
                    codes::INTERNAL,
                    format!("removing the host port rules of {id}/{ifname}"),
                    e.to_string(),
                )
            })?;
        self.remove_flows(id, ifname).await?;
        self.remove_bandwidth(id, ifname).await?;
        let veth = netlink::host_veth_name(id, ifname);
        self.db.delete_port(BRIDGE, &veth).await.map_err(|e| {
            CniError::new(
                codes::INTERNAL,
                format!("deleting port {veth} from {BRIDGE}"),
                e.to_string(),
            )
        })?;
        self.netlink
            .delete_host_veth(&veth)
            .await
            .map_err(netlink_error)?;
        let released = self.release_lease(id, ifname).await?;
        tracing::info!(sandbox = %id, ifname, ?released, "pod removed");
        Ok(())
    }

    /// CNI CHECK: the interface, address, routes, OVS port and flows are as ADD left them.
    pub async fn check(&self, req: &Request) -> Result<(), CniError> {
        let (id, ifname) = (req.container_id.as_str(), req.ifname.as_str());
        let pod = self
            .table
            .lock()
            .await
            .get(&(id.to_string(), ifname.to_string()))
            .cloned()
            .ok_or_else(|| {
                CniError::new(
                    3,
                    format!("container {id} has no interface {ifname} on this node"),
                    String::new(),
                )
            })?;
        let drift = |what: String| {
            CniError::new(
                codes::INTERNAL,
                format!("{id}/{ifname}: {what}"),
                String::new(),
            )
        };
        if let Some(prev) = &req.config.prev_result {
            if !prev.ips.iter().any(|c| c.address.addr() == pod.ip) {
                return Err(drift(format!(
                    "prevResult does not hold the pod's address {}",
                    pod.ip
                )));
            }
        }
        let netns = req
            .netns
            .clone()
            .unwrap_or_else(|| PathBuf::from(&pod.netns));
        let state = self
            .netlink
            .inspect_pod_interface(&netns, ifname)
            .await
            .map_err(|e| drift(e.to_string()))?;
        let mac = MacAddr::from_pod_ip(pod.ip);
        if state.mac != mac.0 {
            return Err(drift(format!(
                "MAC is {} instead of {mac}",
                MacAddr(state.mac)
            )));
        }
        let addr = Ipv4Net::new(pod.ip, self.net.node.local_subnet.prefix_len())
            .expect("prefix of a valid subnet");
        if !state.addresses.contains(&addr) {
            return Err(drift(format!(
                "address {addr} missing (has {:?})",
                state.addresses
            )));
        }
        if state.mtu != self.net.mtu {
            return Err(drift(format!(
                "MTU is {} instead of {}",
                state.mtu, self.net.mtu
            )));
        }
        if !state.up {
            return Err(drift(format!("{ifname} is down")));
        }
        for want in self.net.routes() {
            if !state.routes.contains(&want) {
                return Err(drift(format!("route {want} missing")));
            }
        }
        let port = self
            .db
            .find_interfaces_by_external_id(ids::SANDBOX, id)
            .into_iter()
            .find(|i| i.external_ids.get(ids::IFNAME).map(String::as_str) == Some(ifname));
        match port {
            Some(i) if i.ofport == Some(i64::from(pod.ofport)) => {}
            Some(i) => {
                return Err(drift(format!(
                    "OVS port {} has ofport {:?} instead of {}",
                    i.name, i.ofport, pod.ofport
                )))
            }
            None => return Err(drift(format!("no OVS port {} on {BRIDGE}", pod.host_veth))),
        }
        self.hostports.check(id, ifname).await.map_err(drift)?;
        let have = self
            .switch
            .dump(&DumpFilter::cookie(pod.cookie(), u64::MAX))
            .await
            .map_err(|e| drift(format!("dumping flows: {e}")))?;
        let text = |v: &[Flow]| {
            let mut t: Vec<String> = v.iter().map(ToString::to_string).collect();
            t.sort();
            t
        };
        let (have, want) = (text(&have), text(&pod.flows()));
        if have != want {
            let missing: Vec<&String> = want.iter().filter(|w| !have.contains(w)).collect();
            let extra: Vec<&String> = have.iter().filter(|h| !want.contains(h)).collect();
            return Err(drift(format!(
                "flows differ from the pod's: missing {missing:?}, unexpected {extra:?}"
            )));
        }
        Ok(())
    }

    /// CNI GC: removes every attachment not in `valid` (container id, ifname), and leases that
    /// belong to no attachment on this node.
    pub async fn gc(&self, valid: &BTreeSet<Key>) -> Result<usize, CniError> {
        let stale: Vec<Key> = self
            .table
            .lock()
            .await
            .keys()
            .filter(|k| !valid.contains(*k))
            .cloned()
            .collect();
        let mut removed = 0;
        for (id, ifname) in &stale {
            self.del(id, ifname).await?;
            removed += 1;
        }
        removed += self.release_orphan_leases(valid).await?;
        self.remove_orphan_qos(valid).await?;
        Ok(removed)
    }

    /// Releases, in one pass under the lease lock, leases held by no pod of the table, not in
    /// `keep` and not of an ADD in flight. An ADD enters `in_flight` before it takes its lease
    /// and leaves it only after its pod entered the table, which this holds locked meanwhile: a
    /// live attachment's lease is always seen as live.
    pub async fn release_orphan_leases(&self, keep: &BTreeSet<Key>) -> Result<usize, CniError> {
        let table = self.table.lock().await;
        let mut live: BTreeSet<Key> = table.keys().cloned().collect();
        live.extend(keep.iter().cloned());
        let in_flight = self.in_flight.clone();
        let gone = self
            .ipam(move |store| {
                store.retain(|l| {
                    let k = (l.container_id.clone(), l.ifname.clone());
                    live.contains(&k) || lock(&in_flight).contains(&k)
                })
            })
            .await?;
        drop(table);
        for l in &gone {
            tracing::info!(ip = %l.ip, sandbox = %l.container_id, ifname = %l.ifname, "released an orphan lease");
        }
        Ok(gone.len())
    }

    /// Rebuilds the pod table from the pod ports on `br0` (after a restart). Ports whose veth
    /// is gone (the pod's netns was deleted while the agent was down) are removed with their
    /// lease, flows and QoS rows, and so are QoS rows of attachments without a port. Returns (pods kept, pods removed).
    pub async fn rebuild_from_ovs(&self) -> Result<(usize, usize), CniError> {
        let ifaces = self.db.with_cache(|c| {
            c.table("Interface")
                .filter_map(|i| {
                    let ids = i.string_map("external_ids");
                    ids.contains_key(ids::SANDBOX)
                        .then(|| (i.name().to_string(), i.integer("ofport"), ids))
                })
                .collect::<Vec<_>>()
        });
        let (mut kept, mut removed) = (0, 0);
        for (name, ofport, ext) in ifaces {
            let get = |k: &str| ext.get(k).cloned().unwrap_or_default();
            let (id, ifname) = (get(ids::SANDBOX), get(ids::IFNAME));
            let alive = self
                .netlink
                .link_exists(&name)
                .await
                .map_err(netlink_error)?
                .is_some();
            let ip: Option<Ipv4Addr> = get(ids::IP).parse().ok();
            let ofport = ofport
                .and_then(|p| u32::try_from(p).ok())
                .filter(|p| *p >= 3);
            match (alive, ip, ofport) {
                (true, Some(ip), Some(ofport)) => {
                    // Pods wired by an older agent get the host-veth hardening too.
                    if let Err(e) = netlink::isolate_host_veth(&name) {
                        tracing::warn!(port = %name, error = %e, "taking the node kernel out of the pod's path");
                    }
                    let namespace = get(ids::NAMESPACE);
                    let recorded: Option<u32> = ext.get(ids::VNID).and_then(|v| v.parse().ok());
                    let vnid = if self.net.node.mode == Mode::Subnet {
                        0
                    } else {
                        match (self.cluster.borrow().vnid_of(&namespace), recorded) {
                            (Some(v), _) => v,
                            (None, Some(v)) => {
                                tracing::warn!(port = %name, %namespace, vnid = v, "namespace has no NetNamespace; keeping the pod's recorded VNID");
                                v
                            }
                            (None, None) => {
                                tracing::warn!(port = %name, %namespace, "namespace has no NetNamespace and the port records no VNID; isolating the pod (VNID 0xffffff)");
                                multitenant::Vnid::UNASSIGNED
                            }
                        }
                    };
                    let pod = Pod {
                        container_id: id.clone(),
                        ifname: ifname.clone(),
                        namespace,
                        name: get(ids::POD),
                        netns: get(ids::NETNS),
                        ip,
                        host_veth: name.clone(),
                        ofport,
                        vnid,
                        egress_meter: ext
                            .get(ids::METER)
                            .and_then(|m| m.parse().ok())
                            .filter(|_| self.net.egress_meters),
                    };
                    if let Some(m) = pod.egress_meter {
                        let num = |k: &str| ext.get(k).and_then(|v| v.parse::<u32>().ok());
                        let config = num(ids::METER_RATE)
                            .and_then(|r| Meter::new(m, r, num(ids::METER_BURST)?).ok());
                        lock(&self.meters).insert(m, config);
                    }
                    if recorded != Some(vnid) {
                        self.record_vnid(&pod).await;
                    }
                    self.restore_hostports(&pod, ext.get(hostports::EXTERNAL_ID));
                    self.table.lock().await.insert((id, ifname), pod);
                    kept += 1;
                }
                _ => {
                    tracing::info!(port = %name, sandbox = %id, ifname = %ifname, "removing a pod whose veth is gone");
                    self.db.delete_port(BRIDGE, &name).await.map_err(|e| {
                        CniError::new(
                            codes::INTERNAL,
                            format!("deleting stale port {name}"),
                            e.to_string(),
                        )
                    })?;
                    self.netlink
                        .delete_host_veth(&name)
                        .await
                        .map_err(netlink_error)?;
                    self.release_lease(&id, &ifname).await?;
                    self.remove_bandwidth(&id, &ifname).await?;
                    if let Some(m) = ext.get(ids::METER).and_then(|m| m.parse::<u32>().ok()) {
                        self.delete_meter(m).await?;
                    }
                    removed += 1;
                }
            }
        }
        // QoS rows of attachments that are gone (their port too).
        self.remove_orphan_qos(&BTreeSet::new()).await?;
        self.remove_stray_meters().await?;
        self.hostports.sync().await.map_err(|e| {
            CniError::new(
                codes::INTERNAL,
                "re-creating the host port rules of the running pods",
                e.to_string(),
            )
        })?;
        Ok((kept, removed))
    }

    /// Start-up: re-registers the host ports a running pod's port records. A bad record or a
    /// conflict is logged and the pod keeps running without them.
    fn restore_hostports(&self, pod: &Pod, recorded: Option<&String>) {
        let Some(text) = recorded else { return };
        let outcome = hostports::from_json(text).and_then(|mappings| {
            self.hostports.reserve(hostports::PodPorts {
                namespace: pod.namespace.clone(),
                pod: pod.name.clone(),
                sandbox: pod.container_id.clone(),
                ifname: pod.ifname.clone(),
                ip: Some(pod.ip),
                mappings,
            })
        });
        if let Err(e) = outcome {
            tracing::error!(sandbox = %pod.container_id, pod = %pod.name, error = %e.msg, "restoring the pod's host ports");
        }
    }

    /// The VNID the cluster state gives `namespace` now (`None` without a NetNamespace); 0 in
    /// subnet mode.
    fn current_vnid(&self, namespace: &str) -> Option<u32> {
        if self.net.node.mode == Mode::Subnet {
            return Some(0);
        }
        self.cluster.borrow().vnid_of(namespace)
    }

    /// Records the pod's VNID in its port's `external_ids` (what a restart falls back to when
    /// the NetNamespace is gone). A failure is logged: the flows are already right, and the
    /// record is refreshed on the next change.
    async fn record_vnid(&self, pod: &Pod) {
        let ids = BTreeMap::from([(ids::VNID.to_string(), pod.vnid.to_string())]);
        if let Err(e) = self
            .db
            .set_interface_external_ids(&pod.host_veth, &ids)
            .await
        {
            tracing::warn!(port = %pod.host_veth, sandbox = %pod.container_id, vnid = pod.vnid, error = %e, "recording the pod's VNID in OVSDB");
        }
    }

    /// Multitenant mode: applies the cluster state's VNIDs to the local pods. Every pod whose
    /// namespace now has another netid is re-flowed, and the table-80 rows follow (a row for
    /// each VNID now in use, none for a VNID no local pod uses any more), all in **one**
    /// OpenFlow bundle: no packet sees a namespace half-changed, and once the bundle is
    /// committed no packet crosses the old boundary (table 80 decides per packet; the
    /// pipeline lets no conntrack state bypass it). A namespace without a NetNamespace keeps
    /// its VNID. Pods whose ADD is still running pick the new VNID up themselves (under the
    /// same lock). Returns the pods re-flowed.
    pub async fn sync_vnids(&self) -> Result<Vec<VnidChange>, OfError> {
        if self.net.node.mode != Mode::Multitenant {
            return Ok(Vec::new());
        }
        let mut table = self.table.lock().await;
        let state = self.cluster.borrow().clone();
        let mut changes: Vec<(Key, u32)> = table
            .iter()
            .filter_map(|(k, p)| {
                let v = state.vnid_of(&p.namespace)?;
                (v != p.vnid).then(|| (k.clone(), v))
            })
            .collect();
        if changes.is_empty() {
            return Ok(Vec::new());
        }
        changes.sort();
        let before: BTreeSet<u32> = table.values().map(|p| p.vnid).collect();
        let mut updated: Vec<Pod> = Vec::new();
        let mut msgs = Vec::new();
        for (k, v) in &changes {
            let mut p = table[k].clone();
            p.vnid = *v;
            msgs.push(BundleMsg::delete_by_cookie(p.cookie(), u64::MAX));
            msgs.extend(p.flows().into_iter().map(BundleMsg::add));
            updated.push(p);
        }
        let after: BTreeSet<u32> = table
            .iter()
            .map(|(k, p)| {
                changes
                    .iter()
                    .find(|(c, _)| c == k)
                    .map_or(p.vnid, |(_, v)| *v)
            })
            .collect();
        for v in before.difference(&after) {
            if *v != 0 {
                msgs.push(BundleMsg::delete_by_cookie(vnid_cookie(*v), u64::MAX));
            }
        }
        msgs.extend(
            after
                .difference(&before)
                .filter_map(|v| vnid_flow(*v))
                .map(BundleMsg::add),
        );
        self.switch.bundle(&msgs).await?;
        let mut out = Vec::new();
        for p in updated {
            let key = (p.container_id.clone(), p.ifname.clone());
            let from = table.get(&key).map_or(p.vnid, |o| o.vnid);
            tracing::info!(sandbox = %p.container_id, namespace = %p.namespace, pod = %p.name, from, to = p.vnid, "pod re-flowed with its namespace's new VNID");
            out.push(VnidChange {
                namespace: p.namespace.clone(),
                pod: p.name.clone(),
                from,
                to: p.vnid,
            });
            self.record_vnid(&p).await;
            table.insert(key, p);
        }
        Ok(out)
    }

    /// Makes br0 hold exactly `base` plus every pod flow and table-80 row of the table, in one
    /// diff bundle. `base` is every flow the caller owns: the base pipeline and the remote-node
    /// rows (`crate::nodes`), so the one diff also removes the rows of vanished nodes. The table
    /// stays locked until the bundle is applied, so no pod's own bundle lands between the
    /// snapshot and the diff (its flows would otherwise look stray).
    pub async fn reconcile(&self, base: &[Flow]) -> Result<ReconcileStats, OfError> {
        let table = self.table.lock().await;
        self.restore_meters(&table).await?;
        let mut desired = base.to_vec();
        let mut vnids = BTreeSet::new();
        for p in table.values() {
            desired.extend(p.flows());
            vnids.insert(p.vnid);
        }
        if self.net.node.mode == Mode::Multitenant {
            desired.extend(vnids.into_iter().filter_map(vnid_flow));
        }
        self.switch.reconcile(&DumpFilter::all(), &desired).await
    }
}

/// Bandwidth limits (see [`crate::bandwidth`]).
impl Pods {
    /// Re-adds the meters of `table`'s pods that the switch lost (an ovs-vswitchd restart), so
    /// the flows using them can be installed. A meter whose configuration is unknown is logged
    /// and its pod's flows will fail to install until the pod is re-added.
    async fn restore_meters(&self, table: &HashMap<Key, Pod>) -> Result<(), OfError> {
        let wanted: Vec<u32> = table.values().filter_map(|p| p.egress_meter).collect();
        if wanted.is_empty() {
            return Ok(());
        }
        let c = self.switch.client().await?;
        let present: BTreeSet<u32> = c.dump_meters().await?.iter().map(|m| m.id).collect();
        for m in wanted.into_iter().filter(|m| !present.contains(m)) {
            let config = lock(&self.meters).get(&m).copied().flatten();
            match config {
                Some(meter) => {
                    tracing::warn!(meter = m, "re-adding an egress meter the switch lost");
                    c.meter_mod(MeterModCommand::Add, &meter).await?;
                }
                None => tracing::error!(meter = m, "egress meter lost and its rate is unknown"),
            }
        }
        Ok(())
    }

    /// The pod's limits from its annotations (Kubernetes mode: the cluster state's pod) and
    /// `runtimeConfig.bandwidth`; an error names the bad annotation or key.
    fn bandwidth_of(
        &self,
        req: &Request,
        namespace: &str,
        name: &str,
    ) -> Result<Bandwidth, CniError> {
        let annotations = self
            .cluster
            .borrow()
            .pod(namespace, name)
            .map(|p| p.annotations.clone());
        Bandwidth::from_pod(annotations.as_ref(), req.config.runtime_config.as_ref()).map_err(|e| {
            CniError::new(
                codes::INVALID_CONFIG,
                format!("bandwidth of pod {namespace}/{name}: {e}"),
                "rates are Kubernetes quantities in bit/s between 1k and 32G".to_string(),
            )
        })
    }

    /// Pod egress: meter `egress_meter` when set (netdev datapath), else policing on the
    /// port's Interface (kernel datapath). Pod ingress: a `linux-htb` QoS row (pod
    /// ports are veths, Linux netdevs on both datapaths; OVS 3.1's `egress-policer` works only
    /// on DPDK ports) tagged with the attachment.
    async fn apply_bandwidth(
        &self,
        id: &str,
        ifname: &str,
        host_veth: &str,
        bw: &Bandwidth,
        egress_meter: Option<u32>,
    ) -> Result<(), CniError> {
        let fail = |what: &str, e: ovsdb::Error| {
            CniError::new(
                codes::INTERNAL,
                format!("{what} on port {host_veth}"),
                e.to_string(),
            )
        };
        if let (Some(p), Some(m)) = (bw.meter(), egress_meter) {
            self.install_meter(m, p.rate_kbps, p.burst_kb)
                .await
                .map_err(|e| {
                    CniError::new(
                        codes::INTERNAL,
                        format!("installing egress meter {m} of port {host_veth}"),
                        e.to_string(),
                    )
                })?;
        } else if let Some(p) = bw.policing() {
            self.db
                .set_interface_policing(host_veth, p.rate_kbps, p.burst_kb)
                .await
                .map_err(|e| fail("setting egress policing", e))?;
        }
        if let Some(plan) = bw.qos(crate::bandwidth::QosKind::LinuxHtb) {
            let spec = ovsdb::QosSpec {
                qos_type: plan.qos_type.to_string(),
                other_config: plan.other_config,
                queues: plan.queues,
                external_ids: BTreeMap::from([
                    (ids::SANDBOX.to_string(), id.to_string()),
                    (ids::IFNAME.to_string(), ifname.to_string()),
                ]),
            };
            self.db
                .set_port_qos(host_veth, &spec)
                .await
                .map_err(|e| fail("setting ingress QoS", e))?;
        }
        tracing::info!(sandbox = %id, ifname, ingress = ?bw.ingress, egress = ?bw.egress, "bandwidth limits applied");
        Ok(())
    }

    /// A meter id for the attachment: its hash into 1..=MAX_METERS, probing upwards past ids
    /// other pods hold. Reserved until [`Pods::remove_bandwidth`] deletes the meter.
    fn reserve_meter(&self, id: &str, ifname: &str) -> Result<u32, CniError> {
        let mut used = lock(&self.meters);
        let start =
            (flows::pod::fnv1a(format!("{id}/{ifname}").as_bytes()) % u64::from(MAX_METERS)) as u32;
        (0..MAX_METERS)
            .map(|i| (start + i) % MAX_METERS + 1)
            .find(|m| !used.contains_key(m))
            .inspect(|m| {
                used.insert(*m, None);
            })
            .ok_or_else(|| {
                CniError::new(
                    codes::INTERNAL,
                    format!("no free egress meter for {id}/{ifname}"),
                    format!("all {MAX_METERS} meter ids are in use"),
                )
            })
    }

    /// Adds meter `m` (or replaces a stray one with the same id left by a crash).
    async fn install_meter(&self, m: u32, rate_kbps: u64, burst_kb: u64) -> Result<(), OfError> {
        let clamp = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        let meter = Meter::new(m, clamp(rate_kbps).max(1), clamp(burst_kb)).map_err(|e| {
            OfError::Encode {
                index: 0,
                what: format!("meter {m}"),
                source: e.into(),
            }
        })?;
        let c = self.switch.client().await?;
        lock(&self.meters).insert(m, Some(meter));
        match c.meter_mod(MeterModCommand::Add, &meter).await {
            Err(e)
                if e.switch_error().and_then(|s| s.code_name()) == Some("OFPMMFC_METER_EXISTS") =>
            {
                c.meter_mod(MeterModCommand::Modify, &meter).await
            }
            r => r,
        }
    }

    /// Deletes meter `m` (idempotent) and frees its id.
    async fn delete_meter(&self, m: u32) -> Result<(), CniError> {
        let meter = Meter {
            id: m,
            rate_kbps: 0,
            burst_kbits: 0,
        };
        let res = match self.switch.client().await {
            Ok(c) => c.meter_mod(MeterModCommand::Delete, &meter).await,
            Err(e) => Err(e),
        };
        res.map_err(|e| {
            CniError::new(
                codes::INTERNAL,
                format!("deleting egress meter {m}"),
                e.to_string(),
            )
        })?;
        lock(&self.meters).remove(&m);
        Ok(())
    }

    /// Start-up (netdev): deletes meters no pod of the table holds (a crashed ADD, a pod whose
    /// port vanished while the agent was down).
    async fn remove_stray_meters(&self) -> Result<(), CniError> {
        if !self.net.egress_meters {
            return Ok(());
        }
        let fail = |e: OfError| CniError::new(codes::INTERNAL, "dumping meters", e.to_string());
        let c = self.switch.client().await.map_err(fail)?;
        let existing = c.dump_meters().await.map_err(fail)?;
        for m in existing {
            let known = lock(&self.meters)
                .get_mut(&m.id)
                .map(|config| *config = config.or(Some(m)))
                .is_some();
            if !known {
                tracing::info!(meter = m.id, "deleting a stray egress meter");
                self.delete_meter(m.id).await?;
            }
        }
        Ok(())
    }

    /// Deletes the egress meter recorded on the attachment's port, and the QoS rows (and
    /// queues) tagged with the attachment.
    async fn remove_bandwidth(&self, id: &str, ifname: &str) -> Result<(), CniError> {
        let meter = self
            .db
            .find_interfaces_by_external_id(ids::SANDBOX, id)
            .into_iter()
            .filter(|i| i.external_ids.get(ids::IFNAME).map(String::as_str) == Some(ifname))
            .find_map(|i| {
                i.external_ids
                    .get(ids::METER)
                    .and_then(|m| m.parse::<u32>().ok())
            });
        if let Some(m) = meter {
            self.delete_meter(m).await?;
        }
        for q in self.db.find_qos_by_external_id(ids::SANDBOX, id) {
            if q.external_ids.get(ids::IFNAME).map(String::as_str) != Some(ifname) {
                continue;
            }
            self.db.delete_qos(&q.uuid).await.map_err(|e| {
                CniError::new(
                    codes::INTERNAL,
                    format!("deleting QoS {} of {id}/{ifname}", q.uuid),
                    e.to_string(),
                )
            })?;
        }
        Ok(())
    }

    /// GC: deletes QoS rows of attachments that are neither in the table, in `keep`, nor being
    /// added (rows a crashed ADD or an agent restart left behind).
    async fn remove_orphan_qos(&self, keep: &BTreeSet<Key>) -> Result<(), CniError> {
        let table = self.table.lock().await;
        let orphans: Vec<Key> = self
            .db
            .with_cache(|c| {
                c.table("QoS")
                    .map(|q| q.string_map("external_ids"))
                    .filter_map(|ext| {
                        Some((
                            ext.get(ids::SANDBOX)?.clone(),
                            ext.get(ids::IFNAME)?.clone(),
                        ))
                    })
                    .collect::<BTreeSet<Key>>()
            })
            .into_iter()
            .filter(|k| {
                !table.contains_key(k) && !keep.contains(k) && !self.lock_in_flight().contains(k)
            })
            .collect();
        drop(table);
        for (id, ifname) in orphans {
            tracing::info!(sandbox = %id, ifname = %ifname, "removing orphan QoS");
            self.remove_bandwidth(&id, &ifname).await?;
        }
        Ok(())
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

// By value: used as `map_err(ipam_error)`.
#[allow(clippy::needless_pass_by_value)]
fn ipam_error(e: ipam::IpamError) -> CniError {
    let e = &e;
    use ipam::IpamError as E;
    let code = match e {
        // The address came from CNI_ARGS IP=.
        E::NotInSubnet { .. }
        | E::OutsideRange { .. }
        | E::Reserved { .. }
        | E::InUse { .. }
        | E::AlreadyAllocated { .. } => codes::INVALID_ENV,
        E::LockTimeout { .. } => codes::TRY_AGAIN_LATER,
        _ => codes::INTERNAL,
    };
    CniError::new(code, format!("IPAM: {e}"), String::new())
}

// By value: used as `map_err(netlink_error)`.
#[allow(clippy::needless_pass_by_value)]
fn netlink_error(e: netlink::NetlinkError) -> CniError {
    CniError::new(codes::INTERNAL, format!("{e}"), String::new())
}
