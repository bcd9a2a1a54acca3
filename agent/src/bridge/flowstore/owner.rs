//! Who owns a flow: the base pipeline, a pod's port, a remote node, a VNID row, multicast, a
//! tenant's egress firewall or egress IP, a policy; each owner's cookie and its name in words.

use flows::{cookie, vnid_cookie, Vnid};
use std::fmt;

/// Who owns a set of flows.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Owner {
    /// The base pipeline (every table's fixed rows and the version marker).
    Base,
    /// The OVS port of a local pod, or of a warm pool port whose flows are installed before a
    /// pod takes it (see `pod::pool`), by port name: the flows follow the port, so a pod that
    /// takes a warm port keeps the flows (and the cookie) the port already has.
    Port(String),
    /// A remote node's rows (tables 10, 50, 90), by HostSubnet name and cookie.
    RemoteNode {
        /// The HostSubnet's name.
        name: String,
        /// Its cookie (from its uid).
        cookie: u64,
    },
    /// The table-111 row (multicast to every remote VTEP).
    Multicast,
    /// A VNID's table-80 row (maintained by the store from the pods' VNIDs).
    Vnid(Vnid),
    /// A VNID's egress firewall rows (table 100, from its EgressNetworkPolicy).
    EgressFirewall(Vnid),
    /// A multicast-enabled VNID's rows (tables 110 and 120, maintained by the store from the
    /// pods' VNIDs and ports and the enabled set, [`FlowStore::set_multicast`]).
    MulticastTenant(Vnid),
    /// A VNID's egress IP row (table 101) and its group.
    EgressIp(Vnid),
    /// Networkpolicy mode: the policy rows of the pod on this OVS port (its targets and
    /// isolation in tables 27 and 80). They live and die with the port's own flows: removing
    /// [`Owner::Port`] removes them in the same bundle, and they are never set for a port the
    /// store does not hold (a pod deleted meanwhile), so no row outlives its ofport.
    PolicyTarget(String),
    /// Networkpolicy mode: the shared policy rows (peers, ports, `conj_id` rows), changed row
    /// by row ([`Change::diff`]).
    Policy,
    /// Multitenant mode: a VNID's audit rows in table 80 (its namespaces log their tenant
    /// boundary's decisions, [`flows::audit::tenancy_rows`]).
    Audit(Vnid),
}

impl Owner {
    /// The cookie every flow of the owner carries.
    pub fn cookie(&self) -> u64 {
        match self {
            Owner::Base => cookie::BASE,
            Owner::Port(p) => flows::pod::port_cookie(p),
            Owner::RemoteNode { cookie, .. } => *cookie,
            Owner::Multicast => flows::MULTICAST_COOKIE,
            Owner::Vnid(v) => vnid_cookie(*v),
            Owner::EgressFirewall(v) => flows::egress_cookie(*v),
            Owner::MulticastTenant(v) => flows::multicast_cookie(*v),
            Owner::EgressIp(v) => flows::egress_ip_cookie(*v),
            Owner::PolicyTarget(p) => flows::policy_target_cookie(p),
            Owner::Policy => flows::POLICY_COOKIE,
            Owner::Audit(v) => flows::audit::tenancy_cookie(*v),
        }
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Base => f.write_str("base pipeline"),
            Owner::Port(p) => write!(f, "pod port {p}"),
            Owner::RemoteNode { name, .. } => write!(f, "remote node {name}"),
            Owner::Multicast => f.write_str("multicast to remote nodes"),
            Owner::Vnid(v) => write!(f, "VNID {v}"),
            Owner::EgressFirewall(v) => write!(f, "egress firewall of VNID {v}"),
            Owner::MulticastTenant(v) => write!(f, "multicast of VNID {v}"),
            Owner::EgressIp(v) => write!(f, "egress IPs of VNID {v}"),
            Owner::PolicyTarget(p) => write!(f, "network policies of pod port {p}"),
            Owner::Policy => f.write_str("network policy peers and ports"),
            Owner::Audit(v) => write!(f, "audit logging of VNID {v}"),
        }
    }
}
