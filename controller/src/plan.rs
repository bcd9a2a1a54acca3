//! The controller's decisions, without I/O: from what the API server holds (a [`View`]) to the
//! writes that make it right ([`Action`]s). The I/O loop in [`super`] executes them and plans
//! again on the next change, so a plan only has to be right for the view it was given, and a
//! failed write is simply planned again.
//!
//! - **ClusterNetwork** `default`: created from the controller's settings when missing; an
//!   existing one that differs is reported and never changed (re-addressing a live cluster is not
//!   something a controller should do on its own).
//! - **ClusterNetwork** IPv6: a cluster without an IPv6 network whose settings have one gets it
//!   added (annotations, see `cluster::types::annotations`); that is the one change ever made to
//!   an existing ClusterNetwork, so a running IPv4 cluster can turn dual stack.
//! - **HostSubnets**: one per Node, a free subnet of the cluster network, `hostIP` the node's
//!   InternalIP (followed when it changes), and in a dual-stack cluster a free IPv6 subnet
//!   (also given to existing HostSubnets that have none). Stable across restarts because
//!   existing HostSubnets are read back, never re-allocated; removed when the Node goes.
//! - **NetNamespaces**: one per Namespace, VNID 0 for `default` and the configured global
//!   namespaces, otherwise a fresh VNID from the `multitenant` crate (from 10 up, never one in
//!   use); removed when the Namespace goes. The change-network annotation
//!   (`pod.network.openshift.io/multitenant.change-network` on a NetNamespace: `join:<ns>`,
//!   `isolate`, `global`) is applied and cleared in the same write; one that cannot be applied is
//!   cleared and reported.
//! - **Egress IPs** on HostSubnets that have `egressCIDRs` (openshift-sdn's automatic
//!   assignment): every IP exactly one NetNamespace asks for, inside a CIDR of such a node, is
//!   put into that node's `egressIPs`: an assignment is kept while its node is Ready, still has
//!   the CIDR and holds no other IP of the same tenant; a new or orphaned IP goes to the Ready
//!   node with the fewest IPs that may take it (tenants with fewer IPs first). A node that stops
//!   being Ready loses its IPs to the others (the agents stop sending to it within seconds on
//!   their own probes). `egressIPs` of HostSubnets without `egressCIDRs` are the administrator's
//!   and never touched.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use multitenant::{Change, Tenancy, CHANGE_NETWORK_ANNOTATION};

use cluster::config::Ipv4ClusterNetwork as ClusterNetworkEntry;
use cluster::dual_stack::Subnet6Allocator;
use cluster::state::SubnetAllocator;
use cluster::types::annotations;
use cluster::{ClusterNetwork, HostSubnet, NetNamespace};

/// What the controller sees.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// The ClusterNetwork `default`, if it exists.
    pub cluster_network: Option<ClusterNetwork>,
    /// Nodes by name, with their InternalIP when they report one.
    pub nodes: BTreeMap<String, Option<IpAddr>>,
    /// HostSubnets by name.
    pub host_subnets: BTreeMap<String, HostSubnet>,
    /// Namespaces.
    pub namespaces: BTreeSet<String>,
    /// NetNamespaces by name.
    pub net_namespaces: BTreeMap<String, NetNamespace>,
    /// Nodes whose `Ready` condition is not `True` (no condition at all counts as ready).
    pub not_ready: BTreeSet<String>,
}

/// One write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create the ClusterNetwork.
    CreateClusterNetwork(ClusterNetwork),
    /// Replace the ClusterNetwork: only ever to add the IPv6 networks of the settings to a
    /// cluster that has none yet (a running IPv4 cluster turning dual stack).
    UpdateClusterNetwork(ClusterNetwork),
    /// Create a HostSubnet.
    CreateHostSubnet(HostSubnet),
    /// Replace a HostSubnet (its `hostIP` changed).
    UpdateHostSubnet(HostSubnet),
    /// Delete the HostSubnet of a Node that is gone.
    DeleteHostSubnet(String),
    /// Create a NetNamespace.
    CreateNetNamespace(NetNamespace),
    /// Replace a NetNamespace (new netid and/or the change-network annotation cleared).
    UpdateNetNamespace(NetNamespace),
    /// Delete the NetNamespace of a Namespace that is gone.
    DeleteNetNamespace(String),
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::CreateClusterNetwork(c) => write!(
                f,
                "create ClusterNetwork {} ({})",
                c.name(),
                c.cluster_networks
                    .iter()
                    .map(|e| format!("{}/{}", e.cidr, e.host_subnet_length))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Action::UpdateClusterNetwork(c) => write!(
                f,
                "add the IPv6 cluster network to ClusterNetwork {} ({})",
                c.name(),
                c.ipv6_entry()
                    .ok()
                    .flatten()
                    .map_or("none".into(), |e| format!(
                        "{}/{}",
                        e.cidr, e.host_subnet_length
                    ))
            ),
            Action::CreateHostSubnet(h) => write!(
                f,
                "create HostSubnet {} (hostIP {}, subnet {}{})",
                h.name(),
                h.host_ip,
                h.subnet,
                ipv6_text(h)
            ),
            Action::UpdateHostSubnet(h) => write!(
                f,
                "update HostSubnet {} (hostIP {}, subnet {}{}, egressIPs [{}])",
                h.name(),
                h.host_ip,
                h.subnet,
                ipv6_text(h),
                h.egress_addrs()
                    .iter()
                    .map(IpAddr::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Action::DeleteHostSubnet(n) => write!(f, "delete HostSubnet {n} (its Node is gone)"),
            Action::CreateNetNamespace(n) => {
                write!(f, "create NetNamespace {} (netid {})", n.name(), n.net_id)
            }
            Action::UpdateNetNamespace(n) => {
                write!(f, "update NetNamespace {} (netid {})", n.name(), n.net_id)
            }
            Action::DeleteNetNamespace(n) => {
                write!(f, "delete NetNamespace {n} (its Namespace is gone)")
            }
        }
    }
}

/// `, IPv6 subnet S` when the HostSubnet has one.
fn ipv6_text(h: &HostSubnet) -> String {
    h.ipv6_subnet()
        .ok()
        .flatten()
        .map_or(String::new(), |s| format!(", IPv6 subnet {s}"))
}

/// A plan: the writes, and what could not be done (to log; planned again next time).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The writes, in order.
    pub actions: Vec<Action>,
    /// Problems: a node without an address, a full cluster network, a bad annotation, ...
    pub warnings: Vec<String>,
}

/// Plans the writes that make `view` right. `wanted` is the ClusterNetwork the controller's
/// settings describe; `globals` the namespaces with VNID 0 besides `default`.
pub fn plan(view: &View, wanted: &ClusterNetwork, globals: &[String]) -> Plan {
    let mut p = Plan::default();

    // ClusterNetwork.
    let cn = match &view.cluster_network {
        Some(cn) => {
            let ipv6 = |c: &ClusterNetwork| (c.ipv6_entry().ok(), c.ipv6_service_net().ok());
            let add_ipv6 = cn.has_no_ipv6() && !wanted.has_no_ipv6();
            if cn.cluster_networks != wanted.cluster_networks
                || cn.service_network != wanted.service_network
                || (!add_ipv6 && ipv6(cn) != ipv6(wanted))
            {
                p.warnings.push(format!(
                    "ClusterNetwork default differs from the controller's settings (it has {}; \
                     settings say {}); keeping the cluster's",
                    entries_text(cn),
                    entries_text(wanted)
                ));
                cn.clone()
            } else if add_ipv6 {
                // A running IPv4 cluster turning dual stack: IPv6 is added, nothing changed.
                let mut with = cn.clone();
                with.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .extend(wanted.metadata.annotations.clone().unwrap_or_default());
                p.actions.push(Action::UpdateClusterNetwork(with.clone()));
                with
            } else {
                cn.clone()
            }
        }
        None => {
            p.actions.push(Action::CreateClusterNetwork(wanted.clone()));
            wanted.clone()
        }
    };

    plan_host_subnets(view, &cn, &mut p);
    plan_net_namespaces(view, globals, &mut p);
    plan_egress_ips(view, &mut p);
    p
}

/// The automatic egress IP assignment (see the module docs), both families: IPv4 IPs from
/// `egressCIDRs` into `egressIPs`, IPv6 ones from the `sdn.dev/ipv6-egress-cidrs` annotation
/// into `sdn.dev/ipv6-egress-ips` (cluster::egress6). A node takes at most one IP of a tenant
/// per family.
fn plan_egress_ips(view: &View, p: &mut Plan) {
    // IP -> the VNIDs asking for it.
    let mut asked: BTreeMap<IpAddr, BTreeSet<u32>> = BTreeMap::new();
    let mut per_vnid: BTreeMap<u32, usize> = BTreeMap::new();
    for nn in view.net_namespaces.values() {
        for ip in nn.egress_addrs() {
            if asked.entry(ip).or_default().insert(nn.net_id) {
                *per_vnid.entry(nn.net_id).or_default() += 1;
            }
        }
    }
    let vnid_of = |ip: &IpAddr| -> Option<u32> {
        let v = asked.get(ip)?;
        (v.len() == 1).then(|| *v.iter().next().expect("one"))
    };
    // Another IP of the same tenant and family.
    let twin_of = |a: &IpAddr, b: &IpAddr| a.is_ipv6() == b.is_ipv6() && vnid_of(a) == vnid_of(b);
    for (ip, v) in &asked {
        if v.len() > 1 {
            p.warnings.push(format!(
                "egress IP {ip} is asked for by several tenants (VNIDs {:?}); it is assigned to no node",
                v
            ));
        }
    }
    // Nodes with egress ranges are the controller's to fill.
    let auto: BTreeMap<&String, Vec<IpNet>> = view
        .host_subnets
        .iter()
        .map(|(n, hs)| (n, hs.egress_nets()))
        .filter(|(_, nets)| !nets.is_empty())
        .collect();
    if auto.is_empty() {
        return;
    }
    let ready = |n: &str| !view.not_ready.contains(n) && view.nodes.contains_key(n);
    // IPs the administrator placed on other nodes stay there.
    let manual: BTreeSet<IpAddr> = view
        .host_subnets
        .iter()
        .filter(|(n, _)| !auto.contains_key(n))
        .flat_map(|(_, hs)| hs.egress_addrs())
        .collect();
    let mut alloc: BTreeMap<&String, Vec<IpAddr>> = auto.keys().map(|n| (*n, Vec::new())).collect();
    let mut placed: BTreeSet<IpAddr> = BTreeSet::new();
    // Keep what is still right.
    for (node, cidrs) in &auto {
        if !ready(node) {
            continue;
        }
        for ip in view.host_subnets[*node].egress_addrs() {
            if vnid_of(&ip).is_none() {
                continue;
            }
            let fits = cidrs.iter().any(|c| c.contains(&ip));
            let twin = alloc[node].iter().any(|o| twin_of(o, &ip));
            if fits && !twin && !placed.contains(&ip) && !manual.contains(&ip) {
                alloc.get_mut(node).expect("auto node").push(ip);
                placed.insert(ip);
            }
        }
    }
    // Place the rest: tenants with fewer IPs first, then by address.
    let mut pending: Vec<(usize, IpAddr, u32)> = asked
        .keys()
        .filter(|ip| !placed.contains(ip) && !manual.contains(ip))
        .filter_map(|ip| vnid_of(ip).map(|v| (per_vnid[&v], *ip, v)))
        .collect();
    pending.sort();
    for (_, ip, v) in pending {
        let best = auto
            .iter()
            .filter(|(n, cidrs)| {
                ready(n)
                    && cidrs.iter().any(|c| c.contains(&ip))
                    && !alloc[*n].iter().any(|o| twin_of(o, &ip))
            })
            .min_by_key(|(n, _)| alloc[*n].len())
            .map(|(n, _)| *n);
        match best {
            Some(n) => alloc.get_mut(n).expect("auto node").push(ip),
            None => p.warnings.push(format!(
                "egress IP {ip} (VNID {v}) fits no Ready node's egress ranges without a second IP of the same tenant and family there; it is unassigned"
            )),
        }
    }
    for (node, mut ips) in alloc {
        ips.sort();
        let hs = &view.host_subnets[node];
        let mut have = hs.egress_addrs();
        have.sort();
        if have == ips {
            continue;
        }
        update_host_subnet(p, hs, |h| h.set_egress_addrs(&ips));
    }
}

fn entries_text(cn: &ClusterNetwork) -> String {
    let mut s = cn
        .cluster_networks
        .iter()
        .map(|e| format!("{}/{}", e.cidr, e.host_subnet_length))
        .collect::<Vec<_>>()
        .join(", ");
    s.push_str(&format!(", service network {}", cn.service_network));
    match (cn.ipv6_entry(), cn.ipv6_service_net()) {
        (Ok(None), Ok(None)) => {}
        (Ok(e), Ok(svc)) => s.push_str(&format!(
            ", IPv6 {} service network {}",
            e.map_or("none".into(), |e| format!(
                "{}/{}",
                e.cidr, e.host_subnet_length
            )),
            svc.map_or("none".into(), |n| n.to_string())
        )),
        (Err(e), _) | (_, Err(e)) => s.push_str(&format!(", invalid IPv6 ({e})")),
    }
    s
}

fn plan_host_subnets(view: &View, cn: &ClusterNetwork, p: &mut Plan) {
    let entries: Vec<ClusterNetworkEntry> = match cn.entries() {
        Ok(e) => e,
        Err(e) => {
            p.warnings.push(format!(
                "ClusterNetwork default is invalid ({e}); no subnets allocated"
            ));
            Vec::new()
        }
    };
    let mut used: Vec<Ipv4Net> = Vec::new();
    for (name, hs) in &view.host_subnets {
        match view.nodes.get(name) {
            None => p.actions.push(Action::DeleteHostSubnet(name.clone())),
            Some(ip) => {
                if let Ok(s) = hs.subnet_net() {
                    used.push(s);
                }
                if let Some(ip) = ip {
                    if hs.host_ip != ip.to_string() {
                        let mut moved = hs.clone();
                        moved.host_ip = ip.to_string();
                        p.actions.push(Action::UpdateHostSubnet(moved));
                    }
                }
            }
        }
    }
    let mut allocator = SubnetAllocator::new(&entries, &used);
    let mut v6 = cn
        .ipv6_entry()
        .ok()
        .flatten()
        .map(|e| Subnet6Allocator::new(e, &ipv6_used(view)));
    // Existing HostSubnets without an IPv6 subnet get one (the cluster turned dual stack).
    if let Some(alloc) = v6.as_mut() {
        plan_ipv6_subnets(view, alloc, p);
    }
    for (name, ip) in &view.nodes {
        if view.host_subnets.contains_key(name) {
            continue;
        }
        let Some(ip) = ip else {
            p.warnings.push(format!(
                "Node {name} reports no InternalIP yet; its HostSubnet waits for one"
            ));
            continue;
        };
        // An IPv6-only cluster: an empty IPv4 subnet, the IPv6 one or none at all.
        if entries.is_empty() && cn.is_ipv6_only() {
            match v6.as_mut().and_then(Subnet6Allocator::next) {
                Some(s6) => {
                    let mut hs = HostSubnet::new(name, &ip.to_string(), "");
                    set_ipv6_subnet(&mut hs, s6);
                    p.actions.push(Action::CreateHostSubnet(hs));
                }
                None => p.warnings.push(format!(
                    "no free IPv6 node subnet left in the cluster network for Node {name}; \
                     widen the IPv6 cluster network or lower its hostSubnetLength"
                )),
            }
            continue;
        }
        match allocator.next() {
            Some(s) => {
                let mut hs = HostSubnet::new(name, &ip.to_string(), &s.to_string());
                match v6.as_mut().map(Subnet6Allocator::next) {
                    None => {}
                    Some(Some(s6)) => set_ipv6_subnet(&mut hs, s6),
                    Some(None) => p.warnings.push(format!(
                        "no free IPv6 node subnet left for Node {name}; its pods get IPv4 only \
                         until one is free"
                    )),
                }
                p.actions.push(Action::CreateHostSubnet(hs));
            }
            None => p.warnings.push(format!(
                "no free node subnet left in the cluster network for Node {name}; widen \
                 clusterNetworks or lower hostSubnetLength"
            )),
        }
    }
}

/// Changes `hs` with `change`, in the update already planned for it (a hostIP, an IPv6 subnet,
/// egress IPs: one write) or in a new one.
fn update_host_subnet(p: &mut Plan, hs: &HostSubnet, change: impl FnOnce(&mut HostSubnet)) {
    let planned = p.actions.iter_mut().find_map(|a| match a {
        Action::UpdateHostSubnet(h) if h.name() == hs.name() => Some(h),
        _ => None,
    });
    match planned {
        Some(h) => change(h),
        None => {
            let mut h = hs.clone();
            change(&mut h);
            p.actions.push(Action::UpdateHostSubnet(h));
        }
    }
}

/// Every valid IPv6 node subnet in use.
fn ipv6_used(view: &View) -> Vec<Ipv6Net> {
    view.host_subnets
        .values()
        .filter_map(|h| h.ipv6_subnet().ok().flatten())
        .collect()
}

fn set_ipv6_subnet(hs: &mut HostSubnet, subnet: Ipv6Net) {
    hs.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(annotations::IPV6_SUBNET.into(), subnet.to_string());
}

/// An IPv6 subnet for every HostSubnet of a present Node that has none, merged into a hostIP
/// update already planned for it. One with an invalid value is reported, never overwritten
/// (its node's pods may hold addresses of it).
fn plan_ipv6_subnets(view: &View, alloc: &mut Subnet6Allocator, p: &mut Plan) {
    for (name, hs) in &view.host_subnets {
        if !view.nodes.contains_key(name) {
            continue;
        }
        match hs.ipv6_subnet() {
            Ok(Some(_)) => continue,
            Err(e) => {
                p.warnings.push(format!(
                    "HostSubnet {name} has an invalid IPv6 subnet ({e}); left as it is"
                ));
                continue;
            }
            Ok(None) => {}
        }
        let Some(s6) = alloc.next() else {
            p.warnings.push(format!(
                "no free IPv6 node subnet left for Node {name}; its pods get IPv4 only until one \
                 is free"
            ));
            continue;
        };
        update_host_subnet(p, hs, |h| set_ipv6_subnet(h, s6));
    }
}

fn plan_net_namespaces(view: &View, globals: &[String], p: &mut Plan) {
    let mut tenancy = Tenancy::new(globals.iter().cloned());
    if let Err(e) = tenancy.load(
        view.net_namespaces
            .iter()
            .map(|(n, nn)| (n.clone(), nn.net_id)),
    ) {
        p.warnings.push(format!(
            "NetNamespaces are inconsistent ({e:?}); nothing allocated"
        ));
        return;
    }
    // Namespaces that are gone.
    for name in view.net_namespaces.keys() {
        if !view.namespaces.contains(name) {
            tenancy.remove(name);
            p.actions.push(Action::DeleteNetNamespace(name.clone()));
        }
    }
    // Change-network annotations, in name order.
    for (name, nn) in &view.net_namespaces {
        if !view.namespaces.contains(name) {
            continue;
        }
        let Some(text) = nn
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CHANGE_NETWORK_ANNOTATION))
        else {
            continue;
        };
        let mut updated = nn.clone();
        if let Some(a) = updated.metadata.annotations.as_mut() {
            a.remove(CHANGE_NETWORK_ANNOTATION);
        }
        match text.parse::<Change>().and_then(|c| tenancy.apply(name, &c)) {
            Ok(v) => updated.net_id = v.id(),
            Err(e) => p.warnings.push(format!(
                "NetNamespace {name}: cannot apply {CHANGE_NETWORK_ANNOTATION}={text:?} ({e:?}); \
                 annotation cleared"
            )),
        }
        p.actions.push(Action::UpdateNetNamespace(updated));
    }
    // Namespaces without a NetNamespace.
    for name in &view.namespaces {
        if view.net_namespaces.contains_key(name) {
            continue;
        }
        match tenancy.add(name) {
            Ok(v) => p
                .actions
                .push(Action::CreateNetNamespace(NetNamespace::new(name, v.id()))),
            Err(e) => p
                .warnings
                .push(format!("Namespace {name}: no VNID allocated ({e:?})")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cn() -> ClusterNetwork {
        ClusterNetwork::new(
            vec![cluster::ClusterNetworkEntry {
                cidr: "10.128.0.0/14".into(),
                host_subnet_length: 9,
            }],
            "172.30.0.0/16",
            Some("redhat/openshift-ovs-multitenant"),
            Some(4789),
            Some(1450),
        )
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    fn view() -> View {
        View {
            cluster_network: Some(cn()),
            ..View::default()
        }
    }

    fn apply(v: &mut View, actions: &[Action]) {
        for a in actions {
            match a {
                Action::CreateClusterNetwork(c) | Action::UpdateClusterNetwork(c) => {
                    v.cluster_network = Some(c.clone())
                }
                Action::CreateHostSubnet(h) | Action::UpdateHostSubnet(h) => {
                    v.host_subnets.insert(h.name().to_string(), h.clone());
                }
                Action::DeleteHostSubnet(n) => {
                    v.host_subnets.remove(n);
                }
                Action::CreateNetNamespace(n) | Action::UpdateNetNamespace(n) => {
                    v.net_namespaces.insert(n.name().to_string(), n.clone());
                }
                Action::DeleteNetNamespace(n) => {
                    v.net_namespaces.remove(n);
                }
            }
        }
    }

    #[test]
    fn creates_the_cluster_network_once_and_never_changes_it() {
        let mut v = View::default();
        let p = plan(&v, &cn(), &[]);
        assert_eq!(p.actions, vec![Action::CreateClusterNetwork(cn())]);
        apply(&mut v, &p.actions);
        assert_eq!(plan(&v, &cn(), &[]), Plan::default());
        let mut other = cn();
        other.service_network = "172.31.0.0/16".into();
        let p = plan(&v, &other, &[]);
        assert!(p.actions.is_empty());
        assert!(p.warnings[0].contains("keeping the cluster's"), "{p:?}");
    }

    fn dual_stack_cn() -> ClusterNetwork {
        let mut c = cn();
        c.metadata.annotations = Some(
            [
                (
                    annotations::IPV6_CLUSTER_NETWORK.into(),
                    "fd01::/48,64".into(),
                ),
                (
                    annotations::IPV6_SERVICE_NETWORK.into(),
                    "fd02::/112".into(),
                ),
            ]
            .into(),
        );
        c
    }

    #[test]
    fn a_running_ipv4_cluster_turns_dual_stack_without_changing_ipv4() {
        let mut v = view();
        v.nodes.insert("n1".into(), ip("192.168.1.1"));
        v.nodes.insert("n2".into(), ip("192.168.1.2"));
        let p = plan(&v, &cn(), &[]);
        apply(&mut v, &p.actions);
        let before: Vec<String> = v.host_subnets.values().map(|h| h.subnet.clone()).collect();

        // The settings gain IPv6: the ClusterNetwork gets it added, every node an IPv6 subnet.
        let p = plan(&v, &dual_stack_cn(), &[]);
        assert!(p.warnings.is_empty(), "{p:?}");
        assert!(
            matches!(p.actions[0], Action::UpdateClusterNetwork(_)),
            "{p:?}"
        );
        apply(&mut v, &p.actions);
        let after: Vec<String> = v.host_subnets.values().map(|h| h.subnet.clone()).collect();
        assert_eq!(before, after, "IPv4 subnets kept");
        let v6: Vec<String> = v
            .host_subnets
            .values()
            .map(|h| h.ipv6_subnet().unwrap().unwrap().to_string())
            .collect();
        assert_eq!(v6, ["fd01::/64", "fd01:0:0:1::/64"]);
        assert_eq!(plan(&v, &dual_stack_cn(), &[]), Plan::default(), "stable");

        // A new node gets both at once.
        v.nodes.insert("n3".into(), ip("192.168.1.3"));
        let p = plan(&v, &dual_stack_cn(), &[]);
        assert_eq!(p.actions.len(), 1, "{p:?}");
        assert!(p.actions[0]
            .to_string()
            .contains("subnet 10.128.4.0/23, IPv6 subnet fd01:0:0:2::/64"));

        // Changing or removing the IPv6 network afterwards is never done, only reported.
        let mut moved = dual_stack_cn();
        moved.metadata.annotations.as_mut().unwrap().insert(
            annotations::IPV6_CLUSTER_NETWORK.into(),
            "fd09::/48,64".into(),
        );
        let p = plan(&v, &moved, &[]);
        assert!(!p
            .actions
            .iter()
            .any(|a| matches!(a, Action::UpdateClusterNetwork(_))));
        assert!(p.warnings[0].contains("keeping the cluster's"), "{p:?}");
        let p = plan(&v, &cn(), &[]);
        assert!(p.warnings[0].contains("IPv6 fd01::/48/64"), "{p:?}");
    }

    #[test]
    fn a_bad_ipv6_subnet_is_reported_and_kept() {
        let mut v = View {
            cluster_network: Some(dual_stack_cn()),
            ..View::default()
        };
        v.nodes.insert("n1".into(), ip("192.168.1.1"));
        let mut hs = HostSubnet::new("n1", "192.168.1.1", "10.128.0.0/23");
        set_ipv6_subnet(&mut hs, "fd01::/64".parse().unwrap());
        hs.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(annotations::IPV6_SUBNET.into(), "fd01::1/64".into());
        v.host_subnets.insert("n1".into(), hs);
        let p = plan(&v, &dual_stack_cn(), &[]);
        assert!(p.actions.is_empty(), "{p:?}");
        assert!(p.warnings[0].contains("invalid IPv6 subnet"), "{p:?}");
    }

    #[test]
    fn host_subnets_follow_nodes_and_stay_stable() {
        let mut v = view();
        v.nodes.insert("n1".into(), ip("192.168.1.1"));
        v.nodes.insert("n2".into(), ip("192.168.1.2"));
        v.nodes.insert("n3".into(), None);
        let p = plan(&v, &cn(), &[]);
        assert_eq!(p.warnings.len(), 1, "{p:?}");
        assert!(p.warnings[0].contains("n3 reports no InternalIP"));
        apply(&mut v, &p.actions);
        assert_eq!(v.host_subnets["n1"].subnet, "10.128.0.0/23");
        assert_eq!(v.host_subnets["n2"].subnet, "10.128.2.0/23");
        // Nothing more to do; a restart (same view) plans nothing.
        assert!(plan(&v, &cn(), &[]).actions.is_empty());
        // n1 goes: its HostSubnet is deleted and its subnet is free for the next node, n2 keeps
        // its own; n2's address changes: moved, same subnet.
        v.nodes.remove("n1");
        v.nodes.insert("n2".into(), ip("192.168.1.22"));
        v.nodes.insert("n4".into(), ip("192.168.1.4"));
        let p = plan(&v, &cn(), &[]);
        apply(&mut v, &p.actions);
        assert!(!v.host_subnets.contains_key("n1"));
        assert_eq!(v.host_subnets["n2"].subnet, "10.128.2.0/23");
        assert_eq!(v.host_subnets["n2"].host_ip, "192.168.1.22");
        assert_eq!(v.host_subnets["n4"].subnet, "10.128.0.0/23");
    }

    #[test]
    fn an_ipv6_only_cluster_gets_empty_ipv4_subnets_and_ipv6_ones() {
        let mut six = ClusterNetwork::new(
            Vec::new(),
            "",
            Some("redhat/openshift-ovs-multitenant"),
            Some(4789),
            Some(1430),
        );
        six.metadata.annotations = Some(
            [(
                cluster::types::annotations::IPV6_CLUSTER_NETWORK.to_string(),
                "fd01::/48,64".to_string(),
            )]
            .into(),
        );
        six.validate().unwrap();
        let mut v = View {
            cluster_network: Some(six.clone()),
            ..View::default()
        };
        v.nodes.insert("n1".into(), ip("fd00:10::1"));
        v.nodes.insert("n2".into(), ip("fd00:10::2"));
        let p = plan(&v, &six, &[]);
        assert!(p.warnings.is_empty(), "{p:?}");
        apply(&mut v, &p.actions);
        for (n, want) in [("n1", "fd01::/64"), ("n2", "fd01:0:0:1::/64")] {
            let hs = &v.host_subnets[n];
            hs.validate().unwrap();
            assert_eq!(hs.subnet, "");
            assert_eq!(hs.ipv6_subnet().unwrap().unwrap().to_string(), want);
        }
        assert_eq!(v.host_subnets["n2"].host_ip, "fd00:10::2");
        assert!(plan(&v, &six, &[]).actions.is_empty());
    }

    #[test]
    fn a_full_cluster_network_is_reported() {
        let mut v = view();
        let mut small = cn();
        small.cluster_networks[0].cidr = "10.128.0.0/22".into();
        v.cluster_network = Some(small.clone());
        for i in 0..3 {
            v.nodes
                .insert(format!("n{i}"), ip(&format!("192.168.1.{i}")));
        }
        let p = plan(&v, &small, &[]);
        assert_eq!(
            p.actions
                .iter()
                .filter(|a| matches!(a, Action::CreateHostSubnet(_)))
                .count(),
            2
        );
        assert!(p.warnings[0].contains("no free node subnet left"), "{p:?}");
    }

    #[test]
    fn net_namespaces_follow_namespaces_with_fresh_vnids() {
        let mut v = view();
        for ns in ["default", "kube-system", "tenant-a", "tenant-b"] {
            v.namespaces.insert(ns.into());
        }
        let p = plan(&v, &cn(), &["kube-system".to_string()]);
        apply(&mut v, &p.actions);
        let id = |v: &View, n: &str| v.net_namespaces[n].net_id;
        assert_eq!(id(&v, "default"), 0);
        assert_eq!(id(&v, "kube-system"), 0);
        assert_eq!(id(&v, "tenant-a"), 10);
        assert_eq!(id(&v, "tenant-b"), 11);
        // A namespace goes: its NetNamespace goes; a new one never gets a VNID in use.
        v.namespaces.remove("tenant-a");
        v.namespaces.insert("tenant-c".into());
        let p = plan(&v, &cn(), &["kube-system".to_string()]);
        apply(&mut v, &p.actions);
        assert!(!v.net_namespaces.contains_key("tenant-a"));
        assert!(id(&v, "tenant-c") >= 10 && id(&v, "tenant-c") != 11);
        assert!(plan(&v, &cn(), &[]).actions.is_empty());
    }

    #[test]
    fn change_network_annotations_are_applied_and_cleared() {
        let mut v = view();
        for ns in ["default", "a", "b", "c"] {
            v.namespaces.insert(ns.into());
        }
        let p = plan(&v, &cn(), &[]);
        apply(&mut v, &p.actions);
        let annotate = |v: &mut View, ns: &str, text: &str| {
            v.net_namespaces
                .get_mut(ns)
                .unwrap()
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(CHANGE_NETWORK_ANNOTATION.into(), text.into());
        };
        annotate(&mut v, "b", "join:a");
        annotate(&mut v, "c", "global");
        let p = plan(&v, &cn(), &[]);
        assert_eq!(p.actions.len(), 2, "{p:?}");
        apply(&mut v, &p.actions);
        let nn = |v: &View, n: &str| v.net_namespaces[n].clone();
        assert_eq!(nn(&v, "b").net_id, nn(&v, "a").net_id);
        assert_eq!(nn(&v, "c").net_id, 0);
        assert!(nn(&v, "b")
            .metadata
            .annotations
            .unwrap_or_default()
            .is_empty());
        // Isolate b again: a fresh VNID that is nobody's.
        annotate(&mut v, "b", "isolate");
        let p = plan(&v, &cn(), &[]);
        apply(&mut v, &p.actions);
        let b = nn(&v, "b").net_id;
        assert!(b >= 10 && v.net_namespaces.values().filter(|n| n.net_id == b).count() == 1);
        // Refused changes are cleared and reported; the VNID stays.
        annotate(&mut v, "default", "isolate");
        annotate(&mut v, "a", "join:nope");
        annotate(&mut v, "c", "bogus");
        let p = plan(&v, &cn(), &[]);
        assert_eq!(p.warnings.len(), 3, "{p:?}");
        apply(&mut v, &p.actions);
        assert_eq!(nn(&v, "default").net_id, 0);
        assert!(v.net_namespaces.values().all(|n| n
            .metadata
            .annotations
            .as_ref()
            .is_none_or(|a| a.is_empty())));
        assert!(plan(&v, &cn(), &[]).actions.is_empty());
    }

    #[test]
    fn egress_ips_are_assigned_from_egress_cidrs_balanced_and_moved_off_unready_nodes() {
        let mut v = view();
        for (i, n) in ["n1", "n2", "n3"].iter().enumerate() {
            v.nodes
                .insert(n.to_string(), ip(&format!("192.168.77.{}", 11 + i)));
            let mut hs = HostSubnet::new(
                n,
                &format!("192.168.77.{}", 11 + i),
                &format!("10.128.{}.0/23", 2 * i),
            );
            if *n != "n1" {
                hs.egress_cidrs = vec!["192.168.77.96/28".into()];
            }
            v.host_subnets.insert(n.to_string(), hs);
        }
        let mut a = NetNamespace::new("a", 10);
        a.egress_ips = vec!["192.168.77.100".into(), "192.168.77.101".into()];
        let mut b = NetNamespace::new("b", 11);
        b.egress_ips = vec!["192.168.77.102".into()];
        let mut c = NetNamespace::new("c", 12);
        c.egress_ips = vec!["10.0.0.1".into()];
        for nn in [a, b, c] {
            v.net_namespaces.insert(nn.name().to_string(), nn);
        }
        let ips = |v: &View, n: &str| v.host_subnets[n].egress_ips.clone();
        let p = plan_egress_ips_only(&v);
        apply(&mut v, &p.actions);
        // b's one IP first (fewest), then a's two, each on the node with fewer.
        assert_eq!(ips(&v, "n2"), ["192.168.77.101", "192.168.77.102"]);
        assert_eq!(ips(&v, "n3"), ["192.168.77.100"]);
        assert!(ips(&v, "n1").is_empty(), "no egressCIDRs: never touched");
        assert!(
            p.warnings.iter().any(|w| w.contains("10.0.0.1")),
            "{:?}",
            p.warnings
        );
        // Stable: planning again changes nothing.
        assert!(plan_egress_ips_only(&v).actions.is_empty());
        // n2 stops being Ready: its IPs move to n3, except a second IP of tenant a.
        v.not_ready.insert("n2".into());
        let p = plan_egress_ips_only(&v);
        apply(&mut v, &p.actions);
        assert!(ips(&v, "n2").is_empty());
        assert_eq!(ips(&v, "n3"), ["192.168.77.100", "192.168.77.102"]);
        assert!(
            p.warnings.iter().any(|w| w.contains("192.168.77.101")),
            "{:?}",
            p.warnings
        );
        // Back: the unassigned IP goes to it.
        v.not_ready.clear();
        let p = plan_egress_ips_only(&v);
        apply(&mut v, &p.actions);
        assert_eq!(ips(&v, "n2"), ["192.168.77.101"]);
        // Asked for by two tenants: unassigned everywhere.
        v.net_namespaces.get_mut("b").unwrap().egress_ips = vec!["192.168.77.100".into()];
        let p = plan_egress_ips_only(&v);
        apply(&mut v, &p.actions);
        assert!(ips(&v, "n3").is_empty(), "{:?}", ips(&v, "n3"));
        assert_eq!(ips(&v, "n2"), ["192.168.77.101"]);
    }

    #[test]
    fn ipv6_egress_ips_are_placed_from_ipv6_ranges_one_per_tenant_and_family() {
        let mut v = view();
        for (i, n) in ["n1", "n2"].iter().enumerate() {
            v.nodes
                .insert(n.to_string(), ip(&format!("192.168.77.{}", 11 + i)));
            let mut hs = HostSubnet::new(
                n,
                &format!("192.168.77.{}", 11 + i),
                &format!("10.128.{}.0/23", 2 * i),
            );
            let nets: Vec<IpNet> = ["192.168.77.96/28", "fd00:77::/112"]
                .iter()
                .map(|s| s.parse().unwrap())
                .collect();
            hs.set_egress_nets(&nets);
            v.host_subnets.insert(n.to_string(), hs);
        }
        let mut a = NetNamespace::new("a", 10);
        let want: Vec<IpAddr> = ["192.168.77.100", "fd00:77::100", "fd00:77::101"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        a.set_egress_addrs(&want);
        let mut c = NetNamespace::new("c", 12);
        c.set_egress_addrs(&["fd00:99::1".parse().unwrap()]);
        for nn in [a, c] {
            v.net_namespaces.insert(nn.name().to_string(), nn);
        }
        let p = plan_egress_ips_only(&v);
        apply(&mut v, &p.actions);
        let ips = |v: &View, n: &str| v.host_subnets[n].egress_addrs();
        let (n1, n2) = (ips(&v, "n1"), ips(&v, "n2"));
        // a's two IPv6 IPs on different nodes; its IPv4 beside one of them.
        assert_eq!(n1.len() + n2.len(), 3, "{n1:?} {n2:?} {:?}", p.warnings);
        for n in [&n1, &n2] {
            assert_eq!(n.iter().filter(|i| i.is_ipv6()).count(), 1, "{n:?}");
        }
        // IPv6 ones are written to the annotation, never to egressIPs.
        for n in ["n1", "n2"] {
            let hs = &v.host_subnets[n];
            assert!(
                hs.egress_ips.iter().all(|s| !s.contains(':')),
                "{:?}",
                hs.egress_ips
            );
        }
        assert!(
            p.warnings.iter().any(|w| w.contains("fd00:99::1")),
            "outside every range: {:?}",
            p.warnings
        );
        assert!(plan_egress_ips_only(&v).actions.is_empty(), "stable");
    }

    fn plan_egress_ips_only(v: &View) -> Plan {
        let mut p = Plan::default();
        plan_egress_ips(v, &mut p);
        p
    }
}
