//! The node's wiring (the top floor): the one place that knows every part and puts them
//! together, as one [`Daemon`].
//!
//! - [`start`](Daemon::start): the start-up order, up to serving.
//! - `loops`: what keeps the result true: cluster-state changes, flow and OVSDB drift, OpenFlow
//!   reconnects, the periodic reconcile.
//! - `conflist`: the CNI network config files (the main network; a network per tenant in
//!   standalone mode) and their removal at node teardown.
//! - `cni_handler` and `attach`: CNI requests into pod operations, wired pods into CNI results.
//! - `takeover` and `handback`: a node openshift-sdn ran, taken over with its pods running (at
//!   start, before anything on the node changes), and handed back to openshift-sdn (the
//!   rollback, [`hand_back`]).
//!
//! ### Start-up and the loops
//!
//! Start-up runs in the order the node needs and every step is idempotent, so a second start on
//! a configured node changes nothing and never deletes the bridge: cluster state (this node's
//! HostSubnet), `br0`, `vxlan0` at ofport 1 and `tun0` at ofport 2, tun0's gateway address, MTU
//! and routes, `net.ipv4.ip_forward`, the flow table names; then the pod table is rebuilt from
//! the pod ports' `external_ids`, and the port pool and the leases are taken back; then every
//! node feature ([`Features`]) stages its rows (the egress IPs feature also the host iptables
//! rules with the egress IPs this node holds). Then the node is ready: the CNI server listens and the CNI network config file is
//! written into the CNI conf dir (that file is how runtimes learn that the node is ready). The
//! file stays when the agent stops: during a restart the shim answers "try again later". Right
//! after, the whole desired flow set (base + pods + VNID rows + remote nodes) is diffed against
//! `br0` and only the difference is applied, in one bundle (so rows of HostSubnets that vanished
//! while the agent was down go at start). Serving does not wait for that diff (about 0.7 s with
//! 1000 pods): the bridge kept every running pod's flows, a switch that restarted forwards only
//! after it, and requests that change flows wait for it in the flow store.
//!
//! After start-up a loop keeps the bridge right: when the OpenFlow connection had to be re-opened
//! (ovs-vswitchd restarted, flows possibly lost) or periodically, it reconciles again. It also
//! follows the cluster state: when a NetNamespace's netid changes, the namespace's local pods are
//! re-flowed with the new VNID in one bundle ([`Pods::sync_vnids`]), with every feature synced
//! around it in two phases (`features::Phase`: new rows before the pods move, old ones after);
//! every other node's HostSubnet that was added, moved or deleted gets its rows replaced, node
//! by node, up to 250 nodes to a bundle (the remote nodes feature); in standalone mode every tenant namespace gets its own CNI network
//! (`<network>-<namespace>`), so podman users pick a tenant by picking a network.
//!
//! Every flow goes through one [`FlowStore`]: the base pipeline, the pods and the features
//! hand it their flows, and the full reconcile is the store's one diff against the bridge. The
//! daemon knows the features only as a list: start-up stages and settles them, the loops sync
//! and repair them, the node view asks them for gauges and status lines.
//!
//! What an operator sees is started around this: the metrics and health endpoint
//! (`metricsAddress`, [`crate::operator::observe`]) first of all, so `/livez` and `/readyz` answer while
//! start-up waits; the local API for `sdnctl` ([`crate::operator::api`]) when the node serves; the main
//! loop's heartbeat, each reconcile (reason, time, changes) and each repair go to the health
//! record and the metrics.

mod attach;
mod bridge_setup;
mod cni_handler;
mod conflist;
pub mod error;
mod handback;
mod loops;
mod ovs_wait;
mod start;
mod takeover;

pub use conflist::remove_cni_configs;
pub use handback::hand_back;
pub use start::pool_netns_pin;

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use error::{Result, Step};
use flows::NodeConfig;
use ipnet::Ipv4Net;
use ovs::flow::Flow;
use ovs::ovsdb::{self};

use crate::bridge::flowstore::FlowStore;
use crate::bridge::switch::Switch;
use crate::cni::{self};
use crate::features::Features;
use crate::operator::observe::Observer;
use crate::pod::Pods;

use cluster::config::{ClusterStateSource, Config};
use cluster::{self, ClusterSource, ClusterState};

/// A running node agent.
#[derive(Debug)]
pub struct Daemon {
    /// The configuration it runs with.
    pub config: Config,
    /// Base pipeline inputs, resolved from the cluster state.
    pub node: NodeConfig,
    /// The pods.
    pub pods: Arc<Pods>,
    /// The OpenFlow side of br0.
    pub switch: Arc<Switch>,
    /// Every flow the agent wants on br0.
    pub store: Arc<FlowStore<Switch>>,
    /// The node features (remote nodes, egress firewall, multicast, egress IPs, network
    /// policy), in the order they stage and sync (`features::register`).
    pub features: Features,
    db: ovsdb::Client,
    base: Vec<Flow>,
    server: Option<cni::ServerHandle>,
    conf_file: PathBuf,
    /// Serialises [`Self::sync_tenant_networks`].
    tenant_confs: std::sync::Mutex<()>,
    /// The port pool's background task ([`Pods::maintain_ports`]).
    maintenance: Option<tokio::task::JoinHandle<()>>,
    state: tokio::sync::watch::Receiver<Arc<ClusterState>>,
    cluster: Arc<dyn ClusterSource>,
    /// Health, metrics endpoint and the node view the local API reads.
    observer: Observer,
    /// The metrics endpoint and the local API (stopped with the agent).
    endpoints: Vec<tokio::task::JoinHandle<()>>,
}

/// Resolves the node's NodeConfig from the cluster state.
fn node_config(cfg: &Config, state: &ClusterState) -> Result<NodeConfig> {
    let hs = state.host_subnet_of(&cfg.node_name).with_step(|| {
        format!(
            "no HostSubnet for node {:?} in the cluster state; create one (host: {}, subnet: a \
             free /{} of the cluster network)",
            cfg.node_name,
            cfg.node_name,
            cfg.ipv4_cluster_networks()
                .first()
                .map_or(23, |c| c.node_prefix())
        )
    })?;
    // The IPv4 side, unless the cluster is IPv6-only.
    let ipv4 = if cfg.ipv4_cluster_networks().is_empty() {
        None
    } else {
        let local_subnet: Ipv4Net = state
            .subnet_of(&cfg.node_name)
            .with_step(|| format!("HostSubnet {} subnet {:?}", cfg.node_name, hs.subnet))?;
        Some(flows::NodeIpv4 {
            local_subnet,
            cluster_networks: cfg.cluster_cidrs(),
            service_cidr: cfg.service_network.v4().with_step(|| {
                format!("serviceNetwork {} has no IPv4 network", cfg.service_network)
            })?,
        })
    };
    let node_ip: IpAddr = match cfg.node_ip {
        Some(ip) => ip,
        None => state
            .host_ip_of(&cfg.node_name)
            .with_step(|| format!("HostSubnet {} hostIP {:?}", cfg.node_name, hs.host_ip))?,
    };
    let ipv6 = node_ipv6(cfg, state);
    if ipv4.is_none() && ipv6.is_none() {
        return Err(error::NodeError::Refused(format!(
            "HostSubnet {} has no IPv6 subnet (annotation {}) on an IPv6-only cluster: the \
             controller allocates one (standalone: the agent's seed does)",
            cfg.node_name,
            cluster::types::annotations::IPV6_SUBNET
        )));
    }
    Ok(NodeConfig {
        datapath: cfg.datapath_type,
        mode: cfg.mode,
        node_ip,
        ipv4,
        vxlan_port: cfg.vxlan_port,
        tun0_mac: None,
        ipv6,
    })
}

/// The node's IPv6 side in a dual-stack cluster: the cluster's IPv6 network (the
/// ClusterNetwork's, else the configuration's), this node's IPv6 subnet (its HostSubnet's
/// `sdn.dev/ipv6-subnet`) and the IPv6 service network. `None` on an IPv4 cluster, and on a
/// node whose HostSubnet has no IPv6 subnet yet (said once: its pods get IPv4 only until the
/// agent restarts with one).
fn node_ipv6(cfg: &Config, state: &ClusterState) -> Option<flows::NodeIpv6> {
    let cluster_network = state
        .ipv6_cluster_network()
        .or_else(|| cfg.ipv6_cluster_network())?
        .cidr;
    let Some(local_subnet) = state.ipv6_subnet_of(&cfg.node_name) else {
        tracing::warn!(node = %cfg.node_name, %cluster_network, "the cluster has an IPv6 network but this node's HostSubnet has no IPv6 subnet (annotation sdn.dev/ipv6-subnet) yet: pods get IPv4 only until the agent restarts with one");
        return None;
    };
    let service_cidr = state
        .cluster_network
        .as_ref()
        .and_then(|c| c.ipv6_service_net().ok().flatten())
        .or_else(|| cfg.service_network.v6());
    Some(flows::NodeIpv6 {
        local_subnet,
        cluster_network,
        service_cidr,
    })
}
