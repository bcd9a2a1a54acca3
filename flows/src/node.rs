//! What a node's pipeline is built for: its isolation mode, its datapath, and its addresses
//! (`NodeConfig`: the underlay address, and an IPv4 side and an IPv6 side, either of which may
//! be absent: an IPv4 cluster has no IPv6 side, an IPv6-only cluster no IPv4 side).
//!
//! Kept apart from `base` (the base rows) because every feature's rows read these types, not
//! only the base set's.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::Ipv4Net;
use ovs::flow::MacAddr;

/// How tenants are separated. Spelled `subnet`, `multitenant` or `networkpolicy` in settings.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every pod in VNID 0: no isolation.
    Subnet,
    /// VNID isolation (table 80).
    Multitenant,
    /// Kubernetes NetworkPolicy (tables 27, 30 and 80); namespaces keep their VNIDs.
    NetworkPolicy,
}

impl Mode {
    /// The name used in configuration and in the version marker.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Subnet => "subnet",
            Mode::Multitenant => "multitenant",
            Mode::NetworkPolicy => "networkpolicy",
        }
    }

    /// Parses a mode name.
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "subnet" => Some(Mode::Subnet),
            "multitenant" => Some(Mode::Multitenant),
            "networkpolicy" => Some(Mode::NetworkPolicy),
            _ => None,
        }
    }

    /// Whether namespaces have their own VNIDs (multitenant and networkpolicy; in subnet mode
    /// every pod is in VNID 0), so per-tenant features (egress firewall, egress IPs,
    /// multicast) apply.
    pub fn has_vnids(self) -> bool {
        self != Mode::Subnet
    }
}

/// Which Open vSwitch datapath runs the bridge, as far as the pipeline cares: whether OVS and
/// the node's iptables share one conntrack table (see `pipeline.md`, "Services").
/// Spelled as OVS's `datapath_type`: `system` or `netdev`.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, Debug, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Datapath {
    /// The kernel datapath (Open vSwitch's default: an empty `datapath_type`): OVS's `ct()` and iptables use the kernel's conntrack, so a reply
    /// of a connection kube-proxy DNAT'd is un-DNAT'd inside OVS (`ct(nat)`, table 31).
    #[default]
    System,
    /// The userspace datapath: OVS has its own conntrack, which never saw the kernel's DNAT;
    /// service connections are marked when they come back from tun0 (table 0) and their
    /// replies are sent through tun0 (table 31), so the kernel un-DNATs them.
    Netdev,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        Mode::parse(s).ok_or_else(|| "expected subnet, multitenant or networkpolicy".to_string())
    }
}

impl std::fmt::Display for Datapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.datapath_type())
    }
}

impl std::str::FromStr for Datapath {
    type Err = String;
    fn from_str(s: &str) -> Result<Datapath, String> {
        match s {
            "system" => Ok(Datapath::System),
            "netdev" => Ok(Datapath::Netdev),
            _ => Err("expected system or netdev".to_string()),
        }
    }
}

impl Datapath {
    /// OVS's `datapath_type` of the bridge.
    pub fn datapath_type(self) -> &'static str {
        match self {
            Datapath::System => "system",
            Datapath::Netdev => "netdev",
        }
    }

    /// The datapath of an OVS `datapath_type` (`system`, `netdev`; empty means `system`).
    pub fn of_type(datapath_type: &str) -> Datapath {
        if datapath_type == "netdev" {
            Datapath::Netdev
        } else {
            Datapath::System
        }
    }
}

/// What the base flows depend on.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct NodeConfig {
    /// The datapath (how Service replies are un-DNAT'd).
    pub datapath: Datapath,
    /// Isolation mode.
    pub mode: Mode,
    /// The node's own (underlay) address: DNS to it goes to the host. IPv4 on an IPv4 or a
    /// dual-stack cluster, IPv6 on an IPv6-only one.
    pub node_ip: IpAddr,
    /// The node's IPv4 side (`None`: an IPv6-only cluster).
    pub ipv4: Option<NodeIpv4>,
    /// VXLAN UDP port (4789).
    pub vxlan_port: u16,
    /// tun0's MAC when it is not the derived one: a node taken over from openshift-sdn keeps
    /// the random MAC its tun0 had (the pods' ARP caches hold it). `None`: derived.
    pub tun0_mac: Option<MacAddr>,
    /// The node's IPv6 side in a dual-stack or IPv6-only cluster (`None`: IPv4 only).
    pub ipv6: Option<crate::ipv6::NodeIpv6>,
}

/// What the IPv4 rows of a node depend on (every node but those of an IPv6-only cluster).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct NodeIpv4 {
    /// This node's pod subnet; its first host address is the gateway on tun0.
    pub local_subnet: Ipv4Net,
    /// The cluster networks.
    pub cluster_networks: Vec<Ipv4Net>,
    /// The service network.
    pub service_cidr: Ipv4Net,
}

impl NodeIpv4 {
    /// The gateway: the first host address of the local subnet.
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.local_subnet.network()) + 1)
    }
}

impl NodeConfig {
    /// The IPv4 gateway: the first host address of the local IPv4 subnet (`None` on an
    /// IPv6-only cluster).
    pub fn gateway(&self) -> Option<Ipv4Addr> {
        self.ipv4.as_ref().map(NodeIpv4::gateway)
    }

    /// The IPv6 gateway (`None` on an IPv4-only cluster).
    pub fn gateway6(&self) -> Option<Ipv6Addr> {
        self.ipv6.as_ref().map(crate::ipv6::NodeIpv6::gateway)
    }

    /// tun0's MAC: derived from the gateway address as pod MACs are from theirs (the IPv4
    /// gateway's where there is one, else the IPv6 gateway's), unless the `tun0_mac` field
    /// keeps another, and pinned by the agent (`Interface:mac`), so flows can address the node
    /// and the MAC survives an ovs-vswitchd restart.
    pub fn tun0_mac(&self) -> MacAddr {
        self.tun0_mac
            .unwrap_or_else(|| match (self.gateway(), self.gateway6()) {
                (Some(gw), _) => MacAddr::from_pod_ip(gw),
                (None, Some(gw6)) => MacAddr::from_pod_ip6(gw6),
                (None, None) => MacAddr::from_pod_ip(Ipv4Addr::UNSPECIFIED),
            })
    }
}
