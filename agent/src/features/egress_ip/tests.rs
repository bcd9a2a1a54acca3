//! Unit tests of the egress IP plan: placement, balance and fail-over, refused addresses, conflicts.

use super::plan::reserved;
use super::*;
use cluster::{HostSubnet, NetNamespace};

const A: &str = "192.168.77.100";
const B: &str = "192.168.77.101";

/// Three nodes (node-1 is "here"), tenants a (VNID 10) and b (11) and c (12).
fn state(node_ips: &[(&str, &[&str])], ns_ips: &[(&str, u32, &[&str])]) -> ClusterState {
    let mut s = ClusterState::default();
    for (i, n) in ["node-1", "node-2", "node-3"].iter().enumerate() {
        let mut hs = HostSubnet::new(
            n,
            &format!("192.168.77.{}", 11 + i),
            &format!("10.128.{}.0/23", 2 * i),
        );
        if let Some((_, ips)) = node_ips.iter().find(|(x, _)| x == n) {
            hs.egress_ips = ips.iter().map(|s| s.to_string()).collect();
        }
        s.insert(hs.into());
    }
    for (n, v, ips) in ns_ips {
        let mut nn = NetNamespace::new(n, *v);
        nn.egress_ips = ips.iter().map(|s| s.to_string()).collect();
        s.insert(nn.into());
    }
    s
}

fn vnid(v: u32) -> Vnid {
    Vnid::new(v).unwrap()
}

fn vtep(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(192, 168, 77, 10 + i)
}

#[test]
fn one_ip_on_another_node_routes_there_and_is_watched() {
    let s = state(&[("node-2", &[A])], &[("a", 10, &[A]), ("b", 11, &[])]);
    let p = plan(&s, "node-1", &BTreeSet::new());
    assert_eq!(p.tenants.len(), 1, "b has no egress IPs");
    assert_eq!(
        p.tenants[&vnid(10)].route,
        EgressRoute::Remote(vec![vtep(2)])
    );
    assert!(p.local.is_empty());
    assert_eq!(
        p.monitor
            .iter()
            .map(|m| (m.node.as_str(), m.gateway))
            .collect::<Vec<_>>(),
        [("node-2", Ipv4Addr::new(10, 128, 2, 1))]
    );
    // On node-2 it is local: held there, route local.
    let p2 = plan(&s, "node-2", &BTreeSet::new());
    assert_eq!(p2.tenants[&vnid(10)].route, EgressRoute::Local);
    assert_eq!(p2.local, BTreeMap::from([(A.parse().unwrap(), vnid(10))]));
    assert!(p2.monitor.is_empty());
    // node-2 offline: dropped (never the node's own address), still watched.
    let off = BTreeSet::from(["node-2".to_string()]);
    let p = plan(&s, "node-1", &off);
    assert_eq!(p.tenants[&vnid(10)].route, EgressRoute::Dropped);
    assert!(p.tenants[&vnid(10)]
        .problem
        .as_ref()
        .unwrap()
        .contains("node node-2 is offline"));
    assert_eq!(p.monitor.len(), 1);
}

#[test]
fn two_ips_balance_fail_over_and_prefer_a_local_one() {
    let s = state(&[("node-2", &[A]), ("node-3", &[B])], &[("a", 10, &[A, B])]);
    let p = plan(&s, "node-1", &BTreeSet::new());
    assert_eq!(
        p.tenants[&vnid(10)].route,
        EgressRoute::Remote(vec![vtep(2), vtep(3)])
    );
    let off = BTreeSet::from(["node-2".to_string()]);
    assert_eq!(
        plan(&s, "node-1", &off).tenants[&vnid(10)].route,
        EgressRoute::Remote(vec![vtep(3)])
    );
    let p3 = plan(&s, "node-3", &BTreeSet::new());
    assert_eq!(p3.tenants[&vnid(10)].route, EgressRoute::Local);
    assert_eq!(p3.local.len(), 1);
    assert_eq!(
        p3.monitor.len(),
        1,
        "node-2 still watched: node-1's pods may use it"
    );
}

#[test]
fn addresses_of_the_cluster_and_its_nodes_are_refused_and_their_tenant_dropped() {
    use cluster::{ClusterNetwork, ClusterNetworkEntry};
    let cases = [
        (
            "192.168.77.11",
            "it is node node-1's address (HostSubnet node-1 hostIP)",
        ),
        (
            "10.128.2.1",
            "it is node node-2's pod gateway (the first address of its subnet 10.128.2.0/23)",
        ),
        (
            "10.128.4.9",
            "it is inside node node-3's pod subnet 10.128.4.0/23",
        ),
        (
            "10.130.0.5",
            "it is inside the cluster network 10.128.0.0/14",
        ),
        (
            "172.30.0.10",
            "it is inside the service network 172.30.0.0/16",
        ),
    ];
    for (ip, why) in cases {
        // node-3 claims it for tenant a; every node (node-3 too) refuses it.
        let mut s = state(&[("node-3", &[ip])], &[("a", 10, &[ip])]);
        s.insert(
            ClusterNetwork::new(
                vec![ClusterNetworkEntry {
                    cidr: "10.128.0.0/14".into(),
                    host_subnet_length: 9,
                }],
                "172.30.0.0/16",
                None,
                None,
                None,
            )
            .into(),
        );
        for here in ["node-1", "node-3"] {
            let p = plan(&s, here, &BTreeSet::new());
            let t = &p.tenants[&vnid(10)];
            assert_eq!(t.route, EgressRoute::Dropped, "{ip} on {here}");
            assert_eq!(
                t.problem.as_deref(),
                Some(
                    format!("egress IP {ip} is refused: {why}; dropping its external traffic")
                        .as_str()
                ),
                "{ip} on {here}"
            );
            assert!(p.local.is_empty(), "{ip}: nobody holds it");
            assert!(p.monitor.is_empty());
        }
    }
    // An address of the node network that no node has is fine.
    let s = state(&[("node-3", &[A])], &[("a", 10, &[A])]);
    assert_eq!(reserved(&s, A.parse().unwrap()), None);
}

#[test]
fn conflicts_drop_or_disable_as_openshift_sdn_did() {
    // Two tenants claim A: both dropped; nobody holds A.
    let s = state(&[("node-1", &[A])], &[("a", 10, &[A]), ("b", 11, &[A])]);
    let p = plan(&s, "node-1", &BTreeSet::new());
    for v in [10, 11] {
        assert_eq!(p.tenants[&vnid(v)].route, EgressRoute::Dropped);
        assert!(p.tenants[&vnid(v)]
            .problem
            .as_ref()
            .unwrap()
            .contains("claimed by several tenants"));
    }
    assert!(p.local.is_empty());
    // Two nodes claim A: unused, tenant dropped.
    let s = state(&[("node-1", &[A]), ("node-2", &[A])], &[("a", 10, &[A])]);
    let p = plan(&s, "node-1", &BTreeSet::new());
    assert_eq!(p.tenants[&vnid(10)].route, EgressRoute::Dropped);
    assert!(p.local.is_empty());
    assert!(p.tenants[&vnid(10)].ips[0]
        .why_not
        .as_ref()
        .unwrap()
        .contains("several nodes claim it"));
    // No node hosts it: dropped.
    let s = state(&[], &[("a", 10, &[A])]);
    let p = plan(&s, "node-1", &BTreeSet::new());
    assert_eq!(p.tenants[&vnid(10)].route, EgressRoute::Dropped);
    // Two IPs of one tenant on one node: neither is used.
    let s = state(&[("node-2", &[A, B])], &[("a", 10, &[A, B])]);
    let p = plan(&s, "node-1", &BTreeSet::new());
    assert_eq!(p.tenants[&vnid(10)].route, EgressRoute::Dropped);
    assert!(p.monitor.is_empty());
    // Joined namespaces (one VNID) asking for the same IP are one tenant.
    let s = state(&[("node-2", &[A])], &[("a", 10, &[A]), ("j", 10, &[A])]);
    let p = plan(&s, "node-1", &BTreeSet::new());
    assert_eq!(
        p.tenants[&vnid(10)].route,
        EgressRoute::Remote(vec![vtep(2)])
    );
    assert_eq!(p.tenants[&vnid(10)].namespaces, ["a", "j"]);
}
