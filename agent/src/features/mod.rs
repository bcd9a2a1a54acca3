//! The node features (floor 3): each turns a part of the cluster state into br0 rows (through
//! the flow store) and, where it needs them, host rules and addresses. Every one implements
//! one contract ([`contract::NodeFeature`]) and is registered in one line of [`register`]; the
//! daemon holds the list ([`Features`]) and start-up, the loops and the views go through it
//! (docs/architecture.md, "Adding a feature").
//!
//! - [`remote`]: other nodes' HostSubnets into VXLAN rows (tables 10, 50, 90, 111).
//! - [`egress_firewall`]: EgressNetworkPolicy into table-100 rows per VNID, `dnsName` rules
//!   followed at their TTL.
//! - [`multicast`]: the multicast-enabled tenants (tables 110 and 120, kept by the flow store).
//! - [`egress_ip`]: NetNamespace and HostSubnet egress IPs into table-101 rows and groups, the
//!   held addresses and their mark/SNAT rules, the probes of the hosting nodes.
//! - [`network_policy`]: networkpolicy mode: NetworkPolicies into tables 27 and 80, rebuilt
//!   when what they read changes.
//! - [`audit`]: the audit log: the meters and tenancy rows of logged decisions, and the reader
//!   that turns their copies into lines.
//!
//! Per pod, not per node, and so not on the list: [`hostports`] (a pod's `portMappings` into
//! DNAT rules to the pod through tun0) and [`bandwidth`] (a pod's annotations or
//! `runtimeConfig.bandwidth` into OVS values, pure); the pod logic calls them at ADD and DEL.
//!
//! Tenancy itself (each VNID's table-80 row, counted by its pods) is rows the flow store keeps
//! as pods come and go (`crate::bridge::flowstore`). Every feature fails closed: what it
//! cannot apply (a refused policy, an unusable egress IP) becomes a drop, with the reason
//! logged and shown by sdnctl.

pub(crate) mod audit;
pub mod bandwidth;
pub mod contract;
pub(crate) mod egress_firewall;
pub(crate) mod egress_ip;
pub mod hostports;
pub(crate) mod multicast;
pub(crate) mod network_policy;
pub(crate) mod remote;

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

use cluster::config::Config;
use cluster::ClusterState;
use flows::NodeConfig;

pub use contract::{FeatureError, Features, NodeFeature, Phase, Reason};

use crate::bridge::flowstore::FlowStore;
use crate::host::netlink::Netlink;

/// What a feature may use to build itself.
#[derive(Clone)]
pub struct Context<S> {
    /// Every flow goes through it.
    pub store: Arc<FlowStore<S>>,
    /// The cluster state, as it changes.
    pub state: watch::Receiver<Arc<ClusterState>>,
    /// This node's pipeline inputs.
    pub node: NodeConfig,
    /// The agent's settings.
    pub config: Config,
    /// Host links and addresses.
    pub netlink: Netlink,
    /// The local pods (the pod table), for features that build rows per pod.
    pub local_pods: network_policy::LocalPods,
    /// Where br0's management socket lives (the policy task's flow dumps run beside it).
    pub ovs_run_dir: PathBuf,
}

impl<S> std::fmt::Debug for Context<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// kube-proxy's masquerade mark bit (`--iptables-masquerade-bit`, 14 by default): egress IP
/// marks avoid it.
pub const KUBE_PROXY_MASQUERADE_BIT: u8 = 14;

/// The node's features, in the order they stage and sync: remote nodes first (every other
/// node's rows), tenants' rows before the pods move to new VNIDs (see [`Phase`]). A feature
/// is one line here; it decides itself whether the node's mode uses it.
pub fn register(ctx: &Context<crate::bridge::switch::Switch>) -> Features {
    let mut all = Features::default();
    all.add(remote::RemoteNodes::feature(ctx));
    all.add(egress_firewall::EgressFirewalls::feature(ctx));
    all.add(multicast::Multicast::feature(ctx));
    all.add(egress_ip::EgressIps::feature(ctx));
    let policies = network_policy::NetworkPolicies::feature(ctx);
    all.add(policies.clone());
    all.add(audit::AuditLog::feature(ctx, policies));
    all
}
