//! The egress IP plan (pure): from the cluster state, this node and the nodes seen offline, where
//! each tenant's traffic leaves (here, over VXLAN to the node holding its IP, or dropped and why),
//! which IPs this node holds and which nodes it watches. Addresses that belong to the cluster or
//! its nodes are refused, and their tenant dropped.

use cluster::ClusterState;
use flows::{EgressRoute, Vnid};
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

/// How a tenant's egress IPs stand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TenantEgress {
    /// The namespaces of the VNID (by name).
    pub namespaces: Vec<String>,
    /// The IPs they ask for, each with where it is and whether it is used.
    pub ips: Vec<IpState>,
    /// Where its external traffic goes.
    pub route: EgressRoute,
    /// Why it is dropped, when it is.
    pub problem: Option<String>,
}

/// One requested egress IP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IpState {
    /// The address.
    pub ip: Ipv4Addr,
    /// The node hosting it, when exactly one does.
    pub node: Option<String>,
    /// Whether it is active: one node, one tenant, no other IP of the tenant on that node (its
    /// node holds it, whether or not traffic uses it).
    pub active: bool,
    /// Whether traffic uses it now.
    pub in_use: bool,
    /// Why not, when not.
    pub why_not: Option<String>,
}

/// A remote node hosting egress IPs that this node's tenants use.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Monitored {
    /// Its HostSubnet's name.
    pub node: String,
    /// Its VTEP (`hostIP`).
    pub vtep: Ipv4Addr,
    /// Its gateway address (first address of its subnet), the probe's target.
    pub gateway: Ipv4Addr,
}

/// What the cluster state asks of this node (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct EgressPlan {
    /// Per VNID with egress IPs.
    pub tenants: BTreeMap<Vnid, TenantEgress>,
    /// The egress IPs this node must hold, with the VNID each is for.
    pub local: BTreeMap<Ipv4Addr, Vnid>,
    /// The remote nodes to watch.
    pub monitor: BTreeSet<Monitored>,
}

/// Why `ip` can never be an egress IP, naming what owns it: a node's address (its HostSubnet's
/// `hostIP`), a pod gateway or any address of a node's pod subnet, the cluster networks, the
/// service network. Holding such an address would take it from its owner (a node's underlay
/// address: the node drops off the network) or shadow cluster traffic.
pub(crate) fn reserved(state: &ClusterState, ip: Ipv4Addr) -> Option<String> {
    for (name, hs) in state.host_subnets.iter() {
        if hs.host_ip_addr().ok() == Some(ip) {
            return Some(format!(
                "it is node {name}'s address (HostSubnet {name} hostIP)"
            ));
        }
        if let Ok(subnet) = hs.subnet_net() {
            if Ipv4Addr::from(u32::from(subnet.network()) + 1) == ip {
                return Some(format!(
                    "it is node {name}'s pod gateway (the first address of its subnet {subnet})"
                ));
            }
            if subnet.contains(&ip) {
                return Some(format!("it is inside node {name}'s pod subnet {subnet}"));
            }
        }
    }
    if let Some(cn) = &state.cluster_network {
        let nets = cn
            .cluster_networks
            .iter()
            .map(|e| e.cidr.as_str())
            .chain(cn.network.as_deref());
        for cidr in nets {
            if cidr
                .parse::<ipnet::Ipv4Net>()
                .is_ok_and(|n| n.contains(&ip))
            {
                return Some(format!("it is inside the cluster network {cidr}"));
            }
        }
        if cn
            .service_network
            .parse::<ipnet::Ipv4Net>()
            .is_ok_and(|n| n.contains(&ip))
        {
            return Some(format!(
                "it is inside the service network {}",
                cn.service_network
            ));
        }
    }
    None
}

pub(crate) fn parse_ips(ips: &[String]) -> Vec<Ipv4Addr> {
    // Validated objects hold IPv4 addresses only; anything else was refused with the object.
    ips.iter().filter_map(|s| s.parse().ok()).collect()
}

/// Decides every tenant's egress (pure). `local_node` is this node's HostSubnet name,
/// `offline` the nodes found offline.
pub(crate) fn plan(
    state: &ClusterState,
    local_node: &str,
    offline: &BTreeSet<String>,
) -> EgressPlan {
    // Who claims each IP: nodes (HostSubnets) and tenants (VNIDs).
    let mut nodes_of: BTreeMap<Ipv4Addr, Vec<&str>> = BTreeMap::new();
    for (name, hs) in state.host_subnets.iter() {
        for ip in parse_ips(&hs.egress_ips) {
            nodes_of.entry(ip).or_default().push(name);
        }
    }
    let mut vnids_of: BTreeMap<Ipv4Addr, BTreeSet<u32>> = BTreeMap::new();
    let mut wanted: BTreeMap<u32, BTreeSet<Ipv4Addr>> = BTreeMap::new();
    for nn in state.net_namespaces.values() {
        for ip in parse_ips(&nn.egress_ips) {
            vnids_of.entry(ip).or_default().insert(nn.net_id);
            wanted.entry(nn.net_id).or_default().insert(ip);
        }
    }
    let node_of = |ip: &Ipv4Addr| -> Result<&str, String> {
        match nodes_of.get(ip).map(Vec::as_slice) {
            None | Some([]) => Err("no node hosts it (no HostSubnet lists it in egressIPs)".into()),
            Some([one]) => Ok(one),
            Some(many) => Err(format!(
                "several nodes claim it ({}); it is used by nobody",
                many.join(", ")
            )),
        }
    };
    let mut out = EgressPlan::default();
    for (v, ips) in &wanted {
        let Some(vnid) = Vnid::new(*v) else { continue };
        let mut states = Vec::new();
        let mut problem = None;
        let mut local = false;
        let mut remote: Vec<Ipv4Addr> = Vec::new();
        for ip in ips {
            let mut st = IpState {
                ip: *ip,
                node: None,
                active: false,
                in_use: false,
                why_not: None,
            };
            if let Some(why) = reserved(state, *ip) {
                let what =
                    format!("egress IP {ip} is refused: {why}; dropping its external traffic");
                st.why_not = Some(format!("refused: {why}"));
                problem.get_or_insert(what);
                states.push(st);
                continue;
            }
            let claimants = &vnids_of[ip];
            if claimants.len() > 1 {
                let what = format!(
                    "egress IP {ip} is claimed by several tenants (VNIDs {}); dropping their external traffic",
                    claimants.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
                );
                st.why_not = Some(what.clone());
                problem.get_or_insert(what);
                states.push(st);
                continue;
            }
            match node_of(ip) {
                Err(why) => st.why_not = Some(why),
                Ok(node) => {
                    st.node = Some(node.to_string());
                    // Another IP of this tenant on the same node: openshift-sdn refuses both.
                    let twin = ips
                        .iter()
                        .filter(|o| *o != ip)
                        .find(|o| node_of(o).is_ok_and(|n| n == node));
                    if let Some(twin) = twin {
                        st.why_not = Some(format!(
                            "{twin}, another egress IP of this tenant, is on the same node {node}"
                        ));
                    } else if node != local_node && offline.contains(node) {
                        st.active = true;
                        st.why_not = Some(format!("node {node} is offline"));
                    } else if node == local_node {
                        st.active = true;
                        st.in_use = true;
                        local = true;
                    } else if let Some(vtep) = state.host_ip_of(node) {
                        st.active = true;
                        st.in_use = true;
                        remote.push(vtep);
                    } else {
                        st.why_not = Some(format!("node {node} has no valid hostIP"));
                    }
                }
            }
            states.push(st);
        }
        let route = if problem.is_some() {
            EgressRoute::Dropped
        } else if local {
            EgressRoute::Local
        } else if !remote.is_empty() {
            EgressRoute::Remote(remote)
        } else {
            problem = Some(format!(
                "none of its egress IPs ({}) is usable: {}; dropping its external traffic",
                ips.iter()
                    .map(Ipv4Addr::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                states
                    .iter()
                    .filter_map(|s| s.why_not.as_ref().map(|w| format!("{}: {w}", s.ip)))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
            EgressRoute::Dropped
        };
        // With a local IP only that one carries traffic (the others stay assigned).
        if route == EgressRoute::Local {
            for s in &mut states {
                if s.in_use && s.node.as_deref() != Some(local_node) {
                    s.in_use = false;
                    s.why_not = Some(
                        "an egress IP of this tenant is on this node; that one is used here".into(),
                    );
                }
            }
        }
        for s in states.iter().filter(|s| s.active) {
            let Some(node) = &s.node else { continue };
            if node == local_node {
                // Held here whenever it is active: other nodes send the tenant's traffic here.
                out.local.insert(s.ip, vnid);
            } else if let (Some(vtep), Some(subnet)) =
                (state.host_ip_of(node), state.subnet_of(node))
            {
                // Watched while active, offline or not, so it can come back.
                out.monitor.insert(Monitored {
                    node: node.clone(),
                    vtep,
                    gateway: Ipv4Addr::from(u32::from(subnet.network()) + 1),
                });
            }
        }
        out.tenants.insert(
            vnid,
            TenantEgress {
                namespaces: state
                    .namespaces_of(*v)
                    .into_iter()
                    .map(String::from)
                    .collect(),
                ips: states,
                route,
                problem,
            },
        );
    }
    out
}

/// A route in words: `local`, `remote node-2 (192.168.77.12), ...`, `dropped`.
pub(crate) fn route_text(r: &EgressRoute, state: &ClusterState) -> String {
    match r {
        EgressRoute::Dropped => "dropped".into(),
        EgressRoute::Local => "local (this node's kernel SNATs it)".into(),
        EgressRoute::Remote(vteps) => format!(
            "over VXLAN to {}",
            vteps
                .iter()
                .map(|v| {
                    let name = state
                        .host_subnets
                        .values()
                        .find(|h| h.host_ip_addr().ok() == Some(*v))
                        .map_or(String::new(), |h| format!("{} ", h.host));
                    format!("{name}({v})")
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
