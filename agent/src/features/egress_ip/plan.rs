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
    let claims = Claims::of(state);
    let mut out = EgressPlan::default();
    for (v, ips) in &claims.wanted {
        let Some(vnid) = Vnid::new(*v) else { continue };
        let (mut states, mut problem, mut local) = (Vec::new(), None, false);
        let mut remote: Vec<Ipv4Addr> = Vec::new();
        for ip in ips {
            let (st, refused, via) = ip_state(state, &claims, ips, *ip, local_node, offline);
            if let Some(p) = refused {
                problem.get_or_insert(p);
            }
            match via {
                Via::Local => local = true,
                Via::Remote(vtep) => remote.push(vtep),
                Via::Nowhere => {}
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
            problem = Some(none_usable(ips, &states));
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
        record_active(&mut out, state, &states, vnid, local_node);
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

/// Who claims each IP: nodes (HostSubnets) and tenants (VNIDs); and what each tenant wants.
struct Claims<'a> {
    nodes_of: BTreeMap<Ipv4Addr, Vec<&'a str>>,
    vnids_of: BTreeMap<Ipv4Addr, BTreeSet<u32>>,
    wanted: BTreeMap<u32, BTreeSet<Ipv4Addr>>,
}

impl Claims<'_> {
    fn of(state: &ClusterState) -> Claims<'_> {
        let mut c = Claims {
            nodes_of: BTreeMap::new(),
            vnids_of: BTreeMap::new(),
            wanted: BTreeMap::new(),
        };
        for (name, hs) in state.host_subnets.iter() {
            for ip in parse_ips(&hs.egress_ips) {
                c.nodes_of.entry(ip).or_default().push(name);
            }
        }
        for nn in state.net_namespaces.values() {
            for ip in parse_ips(&nn.egress_ips) {
                c.vnids_of.entry(ip).or_default().insert(nn.net_id);
                c.wanted.entry(nn.net_id).or_default().insert(ip);
            }
        }
        c
    }

    /// The one node hosting `ip`, or why there is none.
    fn node_of(&self, ip: &Ipv4Addr) -> Result<&str, String> {
        match self.nodes_of.get(ip).map(Vec::as_slice) {
            None | Some([]) => Err("no node hosts it (no HostSubnet lists it in egressIPs)".into()),
            Some([one]) => Ok(one),
            Some(many) => Err(format!(
                "several nodes claim it ({}); it is used by nobody",
                many.join(", ")
            )),
        }
    }
}

/// Where a tenant's traffic goes through one of its IPs.
enum Via {
    Nowhere,
    Local,
    Remote(Ipv4Addr),
}

/// One requested IP `ip` of a tenant that wants `ips`: its state, the problem that drops the
/// tenant (refused, or claimed by several tenants), and where it leads.
fn ip_state(
    state: &ClusterState,
    claims: &Claims<'_>,
    ips: &BTreeSet<Ipv4Addr>,
    ip: Ipv4Addr,
    local_node: &str,
    offline: &BTreeSet<String>,
) -> (IpState, Option<String>, Via) {
    let mut st = IpState {
        ip,
        node: None,
        active: false,
        in_use: false,
        why_not: None,
    };
    if let Some(why) = reserved(state, ip) {
        st.why_not = Some(format!("refused: {why}"));
        let what = format!("egress IP {ip} is refused: {why}; dropping its external traffic");
        return (st, Some(what), Via::Nowhere);
    }
    let claimants = &claims.vnids_of[&ip];
    if claimants.len() > 1 {
        let what = format!(
            "egress IP {ip} is claimed by several tenants (VNIDs {}); dropping their external traffic",
            claimants.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
        );
        st.why_not = Some(what.clone());
        return (st, Some(what), Via::Nowhere);
    }
    let node = match claims.node_of(&ip) {
        Err(why) => {
            st.why_not = Some(why);
            return (st, None, Via::Nowhere);
        }
        Ok(node) => node,
    };
    st.node = Some(node.to_string());
    // Another IP of this tenant on the same node: openshift-sdn refuses both.
    let twin = ips
        .iter()
        .filter(|o| **o != ip)
        .find(|o| claims.node_of(o).is_ok_and(|n| n == node));
    let via = if let Some(twin) = twin {
        st.why_not = Some(format!(
            "{twin}, another egress IP of this tenant, is on the same node {node}"
        ));
        Via::Nowhere
    } else if node != local_node && offline.contains(node) {
        st.active = true;
        st.why_not = Some(format!("node {node} is offline"));
        Via::Nowhere
    } else if node == local_node {
        st.active = true;
        st.in_use = true;
        Via::Local
    } else if let Some(vtep) = state.host_ip_of(node) {
        st.active = true;
        st.in_use = true;
        Via::Remote(vtep)
    } else {
        st.why_not = Some(format!("node {node} has no valid hostIP"));
        Via::Nowhere
    };
    (st, None, via)
}

/// Why a tenant none of whose IPs is usable is dropped, IP by IP.
fn none_usable(ips: &BTreeSet<Ipv4Addr>, states: &[IpState]) -> String {
    format!(
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
    )
}

/// The active IPs: held here when this node hosts them (other nodes send the tenant's traffic
/// here), else their node watched (offline or not, so it can come back).
fn record_active(
    out: &mut EgressPlan,
    state: &ClusterState,
    states: &[IpState],
    vnid: Vnid,
    local_node: &str,
) {
    for s in states.iter().filter(|s| s.active) {
        let Some(node) = &s.node else { continue };
        if node == local_node {
            out.local.insert(s.ip, vnid);
        } else if let (Some(vtep), Some(subnet)) = (state.host_ip_of(node), state.subnet_of(node)) {
            out.monitor.insert(Monitored {
                node: node.clone(),
                vtep,
                gateway: Ipv4Addr::from(u32::from(subnet.network()) + 1),
            });
        }
    }
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
