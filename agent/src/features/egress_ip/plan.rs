//! The egress IP plan (pure): from the cluster state, this node and the nodes seen offline, where
//! each tenant's traffic leaves (here, over VXLAN to the node holding its IP, or dropped and why),
//! which IPs this node holds and which nodes it watches. Addresses that belong to the cluster or
//! its nodes are refused, and their tenant dropped.
//!
//! Each family is planned on its own: a tenant's IPv4 traffic leaves through its IPv4 egress IPs
//! and its IPv6 traffic (on a dual-stack node) through its IPv6 ones, with openshift-sdn's rules
//! applied within the family (one IP of the family per node). A family the tenant asks no egress
//! IP of is dropped: its traffic never leaves with the node's address instead. A refused or
//! contested IP of either family drops the whole tenant, as it does in IPv4.

use cluster::ClusterState;
use flows::{EgressRoute, Vnid};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// How a tenant's egress IPs stand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TenantEgress {
    /// The namespaces of the VNID (by name).
    pub namespaces: Vec<String>,
    /// The IPs they ask for (both families), each with where it is and whether it is used.
    pub ips: Vec<IpState>,
    /// Where its external IPv4 traffic goes.
    pub route: EgressRoute,
    /// Why its IPv4 traffic is dropped, when it is.
    pub problem: Option<String>,
    /// On a dual-stack node: where its external IPv6 traffic goes, and why it is dropped.
    pub ipv6: Option<(EgressRoute, Option<String>)>,
}

impl TenantEgress {
    /// The route of the family of `ipv6`, with its problem.
    pub(crate) fn family(&self, ipv6: bool) -> Option<(&EgressRoute, Option<&String>)> {
        if ipv6 {
            self.ipv6.as_ref().map(|(r, p)| (r, p.as_ref()))
        } else {
            Some((&self.route, self.problem.as_ref()))
        }
    }
}

/// One requested egress IP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IpState {
    /// The address.
    pub ip: IpAddr,
    /// The node hosting it, when exactly one does.
    pub node: Option<String>,
    /// Whether it is active: one node, one tenant, no other IP of the tenant and family on that
    /// node (its node holds it, whether or not traffic uses it).
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
    pub vtep: IpAddr,
    /// Its gateway address (first address of its subnet, of its IPv6 subnet on an IPv6-only
    /// cluster), the probe's target.
    pub gateway: IpAddr,
}

/// What the cluster state asks of this node (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct EgressPlan {
    /// Per VNID with egress IPs.
    pub tenants: BTreeMap<Vnid, TenantEgress>,
    /// The egress IPs this node must hold, with the VNID each is for.
    pub local: BTreeMap<IpAddr, Vnid>,
    /// The remote nodes to watch.
    pub monitor: BTreeSet<Monitored>,
}

/// Why `ip` can never be an egress IP, naming what owns it: a node's address (its HostSubnet's
/// `hostIP`), a pod gateway or any address of a node's pod subnet, the cluster networks, the
/// service network (in either family). Holding such an address would take it from its owner (a
/// node's underlay address: the node drops off the network) or shadow cluster traffic.
pub(crate) fn reserved(state: &ClusterState, ip: IpAddr) -> Option<String> {
    match ip {
        IpAddr::V4(ip) => reserved4(state, ip),
        IpAddr::V6(ip) => reserved6(state, ip),
    }
}

fn reserved4(state: &ClusterState, ip: Ipv4Addr) -> Option<String> {
    for (name, hs) in state.host_subnets.iter() {
        if hs.host_ip_addr().ok() == Some(IpAddr::V4(ip)) {
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

fn reserved6(state: &ClusterState, ip: Ipv6Addr) -> Option<String> {
    for (name, hs) in state.host_subnets.iter() {
        if hs.host_ip_addr().ok() == Some(IpAddr::V6(ip)) {
            return Some(format!(
                "it is node {name}'s address (HostSubnet {name} hostIP)"
            ));
        }
        if let Ok(Some(subnet)) = hs.ipv6_subnet() {
            if Ipv6Addr::from(u128::from(subnet.network()) + 1) == ip {
                return Some(format!(
                    "it is node {name}'s IPv6 pod gateway (the first address of its subnet {subnet})"
                ));
            }
            if subnet.contains(&ip) {
                return Some(format!(
                    "it is inside node {name}'s IPv6 pod subnet {subnet}"
                ));
            }
        }
    }
    if let Some(cn) = &state.cluster_network {
        if let Ok(Some(e)) = cn.ipv6_entry() {
            if e.cidr.contains(&ip) {
                return Some(format!("it is inside the cluster network {}", e.cidr));
            }
        }
        if let Ok(Some(svc)) = cn.ipv6_service_net() {
            if svc.contains(&ip) {
                return Some(format!("it is inside the service network {svc}"));
            }
        }
    }
    None
}

/// Decides every tenant's egress (pure). `local_node` is this node's HostSubnet name,
/// `offline` the nodes found offline, `dual_stack` whether this node has an IPv6 network
/// (only then is an IPv6 route planned).
pub(crate) fn plan(
    state: &ClusterState,
    local_node: &str,
    offline: &BTreeSet<String>,
    dual_stack: bool,
) -> EgressPlan {
    let claims = Claims::of(state);
    let mut out = EgressPlan::default();
    for (v, ips) in &claims.wanted {
        let Some(vnid) = Vnid::new(*v) else { continue };
        let mut states = Vec::new();
        let mut blocked = None;
        let mut families = Vec::new();
        for six in [false, true] {
            let of_family: BTreeSet<IpAddr> = ips
                .iter()
                .filter(|ip| ip.is_ipv6() == six)
                .copied()
                .collect();
            let fam = plan_family(state, &claims, &of_family, local_node, offline);
            if let Some(p) = &fam.blocked {
                blocked.get_or_insert(p.clone());
            }
            states.extend(fam.states.iter().cloned());
            families.push(fam);
        }
        let mut routes = families.into_iter().map(|f| {
            if let Some(p) = &blocked {
                return (EgressRoute::Dropped, Some(p.clone()));
            }
            (f.route, f.problem)
        });
        let (route, problem) = routes.next().expect("IPv4");
        let (route6, problem6) = routes.next().expect("IPv6");
        // With a local IP of a family only that one carries the family's traffic.
        for s in &mut states {
            let local = if s.ip.is_ipv6() { &route6 } else { &route };
            if *local == EgressRoute::Local && s.in_use && s.node.as_deref() != Some(local_node) {
                s.in_use = false;
                s.why_not = Some(
                    "an egress IP of this tenant is on this node; that one is used here".into(),
                );
            }
        }
        // An IPv6 IP on a node without IPv6 carries nothing here.
        if !dual_stack {
            for s in states.iter_mut().filter(|s| s.ip.is_ipv6() && s.in_use) {
                s.in_use = false;
                s.why_not = Some("this node has no IPv6 network".into());
            }
        }
        record_active(&mut out, state, &states, vnid, local_node, dual_stack);
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
                ipv6: dual_stack.then_some((route6, problem6)),
            },
        );
    }
    out
}

/// One family of one tenant, planned.
struct FamilyPlan {
    states: Vec<IpState>,
    route: EgressRoute,
    problem: Option<String>,
    /// A refused or contested IP: the whole tenant is dropped.
    blocked: Option<String>,
}

/// The IPs `ips` (one family) of a tenant: their states and where the family's traffic goes.
fn plan_family(
    state: &ClusterState,
    claims: &Claims<'_>,
    ips: &BTreeSet<IpAddr>,
    local_node: &str,
    offline: &BTreeSet<String>,
) -> FamilyPlan {
    let (mut states, mut blocked, mut local) = (Vec::new(), None, false);
    let mut remote: Vec<IpAddr> = Vec::new();
    for ip in ips {
        let (st, refused, via) = ip_state(state, claims, ips, *ip, local_node, offline);
        if let Some(p) = refused {
            blocked.get_or_insert(p);
        }
        match via {
            Via::Local => local = true,
            Via::Remote(vtep) => remote.push(vtep),
            Via::Nowhere => {}
        }
        states.push(st);
    }
    let (route, problem) = if local {
        (EgressRoute::Local, None)
    } else if !remote.is_empty() {
        (EgressRoute::Remote(remote), None)
    } else {
        (EgressRoute::Dropped, Some(none_usable(ips, &states)))
    };
    FamilyPlan {
        states,
        route,
        problem,
        blocked,
    }
}

/// Who claims each IP: nodes (HostSubnets) and tenants (VNIDs); and what each tenant wants.
struct Claims<'a> {
    nodes_of: BTreeMap<IpAddr, Vec<&'a str>>,
    vnids_of: BTreeMap<IpAddr, BTreeSet<u32>>,
    wanted: BTreeMap<u32, BTreeSet<IpAddr>>,
}

impl Claims<'_> {
    fn of(state: &ClusterState) -> Claims<'_> {
        let mut c = Claims {
            nodes_of: BTreeMap::new(),
            vnids_of: BTreeMap::new(),
            wanted: BTreeMap::new(),
        };
        for (name, hs) in state.host_subnets.iter() {
            for ip in hs.egress_addrs() {
                c.nodes_of.entry(ip).or_default().push(name);
            }
        }
        for nn in state.net_namespaces.values() {
            for ip in nn.egress_addrs() {
                c.vnids_of.entry(ip).or_default().insert(nn.net_id);
                c.wanted.entry(nn.net_id).or_default().insert(ip);
            }
        }
        c
    }

    /// The one node hosting `ip`, or why there is none.
    fn node_of(&self, ip: &IpAddr) -> Result<&str, String> {
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
    Remote(IpAddr),
}

/// One requested IP `ip` of a tenant that wants `ips`: its state, the problem that drops the
/// tenant (refused, or claimed by several tenants), and where it leads.
fn ip_state(
    state: &ClusterState,
    claims: &Claims<'_>,
    ips: &BTreeSet<IpAddr>,
    ip: IpAddr,
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
    // Another IP of this tenant (and family: `ips` holds one) on the same node: openshift-sdn
    // refuses both.
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
fn none_usable(ips: &BTreeSet<IpAddr>, states: &[IpState]) -> String {
    if ips.is_empty() {
        return "it asks for no egress IP of this family; dropping its external traffic of the \
                family rather than sending it with the node's address"
            .into();
    }
    format!(
        "none of its egress IPs ({}) is usable: {}; dropping its external traffic",
        ips.iter()
            .map(IpAddr::to_string)
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
    dual_stack: bool,
) {
    for s in states
        .iter()
        .filter(|s| s.active && (dual_stack || s.ip.is_ipv4()))
    {
        let Some(node) = &s.node else { continue };
        if node == local_node {
            out.local.insert(s.ip, vnid);
        } else if let Some(vtep) = state.host_ip_of(node) {
            let gateway = match state.subnet_of(node) {
                Some(subnet) => Some(IpAddr::from(Ipv4Addr::from(
                    u32::from(subnet.network()) + 1,
                ))),
                None => state
                    .ipv6_subnet_of(node)
                    .map(|s| IpAddr::from(Ipv6Addr::from(u128::from(s.network()) + 1))),
            };
            if let Some(gateway) = gateway {
                out.monitor.insert(Monitored {
                    node: node.clone(),
                    vtep,
                    gateway,
                });
            }
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
