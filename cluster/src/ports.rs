//! What a node's OVSDB records about its pods, as far as programs other than the agent read it:
//! the keys of a pod port's `external_ids`, and the tenancy part of the record (sandbox,
//! namespace, VNID), which `sdnctl` counts to know which namespaces have local pods and which
//! VNIDs are still in use.
//!
//! The agent's full codec (`agent::pod::PortRecord`: address, host ports, meter, bandwidth...)
//! reads the same three fields through [`PodTenancy`], so every key is written in one place and
//! read in one place.

use std::collections::BTreeMap;

use multitenant::Vnid;

/// `external_ids` keys of a pod port.
pub mod keys {
    /// Container (sandbox) id.
    pub const SANDBOX: &str = "sandbox";
    /// Pod IPv4 address.
    pub const IP: &str = "ip";
    /// Pod IPv6 address (dual stack; absent on a pod with IPv4 only).
    pub const IP6: &str = "ip6";
    /// Kubernetes namespace (the tenant).
    pub const NAMESPACE: &str = "namespace";
    /// Pod name.
    pub const POD: &str = "pod";
    /// Interface name inside the pod.
    pub const IFNAME: &str = "ifname";
    /// The pod's network namespace path.
    pub const NETNS: &str = "netns";
    /// The VNID the pod's flows were installed with.
    pub const VNID: &str = "vnid";
    /// The pod's host port mappings (JSON), see `crate::hostports`.
    pub const HOSTPORTS: &str = "hostports";
    /// The OpenFlow meter policing the pod's egress (netdev datapath).
    pub const METER: &str = "meter";
    /// The meter's rate (kbit/s).
    pub const METER_RATE: &str = "meter_rate_kbps";
    /// The meter's burst (kbit).
    pub const METER_BURST: &str = "meter_burst_kbit";
    /// The pod's ingress limit (bit/s).
    pub const INGRESS_RATE: &str = "ingress_rate_bps";
    /// The pod's ingress burst (bits).
    pub const INGRESS_BURST: &str = "ingress_burst_bits";
    /// The pod's egress limit (bit/s).
    pub const EGRESS_RATE: &str = "egress_rate_bps";
    /// The pod's egress burst (bits).
    pub const EGRESS_BURST: &str = "egress_burst_bits";
    /// `1` when the host veth got the node-kernel hardening (its sysctls) at ADD, so a restart
    /// need not write them again; `ipv4` for a pod adopted from openshift-sdn, whose veth got
    /// the IPv4 settings but keeps IPv6 as openshift-sdn left it (disabling it deletes its
    /// link-local routes, and every route change makes a userspace datapath drop tunnelled
    /// packets in flight).
    pub const HARDENED: &str = "hardened";
}

/// The tenancy part of a pod port's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodTenancy {
    /// The sandbox (container id); never empty.
    pub sandbox: String,
    /// The Kubernetes namespace ("" when not recorded).
    pub namespace: String,
    /// The VNID the pod's flows were installed with, when recorded and valid.
    pub vnid: Option<Vnid>,
}

impl PodTenancy {
    /// Reads an Interface row's `external_ids`; `None` when the row names no sandbox (not a pod).
    pub fn from_external_ids(ids: &BTreeMap<String, String>) -> Option<PodTenancy> {
        let sandbox = ids.get(keys::SANDBOX).filter(|s| !s.is_empty())?.clone();
        Some(PodTenancy {
            sandbox,
            namespace: ids.get(keys::NAMESPACE).cloned().unwrap_or_default(),
            vnid: ids
                .get(keys::VNID)
                .and_then(|v| v.parse::<u32>().ok())
                .and_then(Vnid::new),
        })
    }
}
