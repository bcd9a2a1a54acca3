//! The controller's decisions, without I/O: from what the API server holds (a [`View`]) to the
//! writes that make it right ([`Action`]s). The I/O loop in [`super`] executes them and plans
//! again on the next change, so a plan only has to be right for the view it was given, and a
//! failed write is simply planned again.
//!
//! - **ClusterNetwork** `default`: created from the controller's settings when missing; an
//!   existing one that differs is reported and never changed (re-addressing a live cluster is not
//!   something a controller should do on its own).
//! - **HostSubnets**: one per Node, a free subnet of the cluster network, `hostIP` the node's
//!   InternalIP (followed when it changes). Stable across restarts because existing HostSubnets
//!   are read back, never re-allocated; removed when the Node goes.
//! - **NetNamespaces**: one per Namespace, VNID 0 for `default` and the configured global
//!   namespaces, otherwise a fresh VNID from the `multitenant` crate (from 10 up, never one in
//!   use); removed when the Namespace goes. The change-network annotation
//!   (`pod.network.openshift.io/multitenant.change-network` on a NetNamespace: `join:<ns>`,
//!   `isolate`, `global`) is applied and cleared in the same write; one that cannot be applied is
//!   cleared and reported.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use multitenant::{Change, Tenancy, CHANGE_NETWORK_ANNOTATION};

use crate::cluster::state::allocate_subnet;
use crate::cluster::{ClusterNetwork, HostSubnet, NetNamespace};
use crate::config::ClusterNetworkSetting as ClusterNetworkEntry;

/// What the controller sees.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// The ClusterNetwork `default`, if it exists.
    pub cluster_network: Option<ClusterNetwork>,
    /// Nodes by name, with their InternalIP when they report one.
    pub nodes: BTreeMap<String, Option<Ipv4Addr>>,
    /// HostSubnets by name.
    pub host_subnets: BTreeMap<String, HostSubnet>,
    /// Namespaces.
    pub namespaces: BTreeSet<String>,
    /// NetNamespaces by name.
    pub net_namespaces: BTreeMap<String, NetNamespace>,
}

/// One write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create the ClusterNetwork.
    CreateClusterNetwork(ClusterNetwork),
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
            Action::CreateHostSubnet(h) => write!(
                f,
                "create HostSubnet {} (hostIP {}, subnet {})",
                h.name(),
                h.host_ip,
                h.subnet
            ),
            Action::UpdateHostSubnet(h) => write!(
                f,
                "update HostSubnet {} (hostIP {}, subnet {})",
                h.name(),
                h.host_ip,
                h.subnet
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
            if cn.cluster_networks != wanted.cluster_networks
                || cn.service_network != wanted.service_network
            {
                p.warnings.push(format!(
                    "ClusterNetwork default differs from the controller's settings (it has {}; \
                     settings say {}); keeping the cluster's",
                    entries_text(cn),
                    entries_text(wanted)
                ));
            }
            cn.clone()
        }
        None => {
            p.actions.push(Action::CreateClusterNetwork(wanted.clone()));
            wanted.clone()
        }
    };

    plan_host_subnets(view, &cn, &mut p);
    plan_net_namespaces(view, globals, &mut p);
    p
}

fn entries_text(cn: &ClusterNetwork) -> String {
    let mut s = cn
        .cluster_networks
        .iter()
        .map(|e| format!("{}/{}", e.cidr, e.host_subnet_length))
        .collect::<Vec<_>>()
        .join(", ");
    s.push_str(&format!(", service network {}", cn.service_network));
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
        match allocate_subnet(&entries, &used) {
            Some(s) => {
                used.push(s);
                p.actions.push(Action::CreateHostSubnet(HostSubnet::new(
                    name,
                    &ip.to_string(),
                    &s.to_string(),
                )));
            }
            None => p.warnings.push(format!(
                "no free node subnet left in the cluster network for Node {name}; widen \
                 clusterNetworks or lower hostSubnetLength"
            )),
        }
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
            vec![crate::cluster::ClusterNetworkEntry {
                cidr: "10.128.0.0/14".into(),
                host_subnet_length: 9,
            }],
            "172.30.0.0/16",
            Some("redhat/openshift-ovs-multitenant"),
            Some(4789),
            Some(1450),
        )
    }

    fn ip(s: &str) -> Option<Ipv4Addr> {
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
                Action::CreateClusterNetwork(c) => v.cluster_network = Some(c.clone()),
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
}
