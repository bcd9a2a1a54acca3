//! Unit tests of the egress IP plan: placement, balance and fail-over, refused addresses, conflicts.

use super::plan::reserved;
use super::*;
use cluster::{HostSubnet, NetNamespace};
use std::net::Ipv4Addr;

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
            hs.set_egress_addrs(&ips.iter().map(|s| s.parse().unwrap()).collect::<Vec<_>>());
        }
        s.insert(hs.into());
    }
    for (n, v, ips) in ns_ips {
        let mut nn = NetNamespace::new(n, *v);
        nn.set_egress_addrs(&ips.iter().map(|s| s.parse().unwrap()).collect::<Vec<_>>());
        s.insert(nn.into());
    }
    s
}

/// The cluster network 10.128.0.0/14 with the service network 172.30.0.0/16.
fn cluster_network() -> cluster::ClusterNetwork {
    cluster::ClusterNetwork::new(
        vec![cluster::ClusterNetworkEntry {
            cidr: "10.128.0.0/14".into(),
            host_subnet_length: 9,
        }],
        "172.30.0.0/16",
        None,
        None,
        None,
    )
}

fn vnid(v: u32) -> Vnid {
    Vnid::new(v).unwrap()
}

fn vtep(i: u8) -> std::net::IpAddr {
    Ipv4Addr::new(192, 168, 77, 10 + i).into()
}

#[test]
fn one_ip_on_another_node_routes_there_and_is_watched() {
    let s = state(&[("node-2", &[A])], &[("a", 10, &[A]), ("b", 11, &[])]);
    let p = plan(&s, "node-1", &BTreeSet::new(), false);
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
        [(
            "node-2",
            std::net::IpAddr::from(Ipv4Addr::new(10, 128, 2, 1))
        )]
    );
    // On node-2 it is local: held there, route local.
    let p2 = plan(&s, "node-2", &BTreeSet::new(), false);
    assert_eq!(p2.tenants[&vnid(10)].route, EgressRoute::Local);
    assert_eq!(p2.local, BTreeMap::from([(A.parse().unwrap(), vnid(10))]));
    assert!(p2.monitor.is_empty());
    // node-2 offline: dropped (never the node's own address), still watched.
    let off = BTreeSet::from(["node-2".to_string()]);
    let p = plan(&s, "node-1", &off, false);
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
    let p = plan(&s, "node-1", &BTreeSet::new(), false);
    assert_eq!(
        p.tenants[&vnid(10)].route,
        EgressRoute::Remote(vec![vtep(2), vtep(3)])
    );
    let off = BTreeSet::from(["node-2".to_string()]);
    assert_eq!(
        plan(&s, "node-1", &off, false).tenants[&vnid(10)].route,
        EgressRoute::Remote(vec![vtep(3)])
    );
    let p3 = plan(&s, "node-3", &BTreeSet::new(), false);
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
        s.insert(cluster_network().into());
        for here in ["node-1", "node-3"] {
            let p = plan(&s, here, &BTreeSet::new(), false);
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
    let p = plan(&s, "node-1", &BTreeSet::new(), false);
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
    let p = plan(&s, "node-1", &BTreeSet::new(), false);
    assert_eq!(p.tenants[&vnid(10)].route, EgressRoute::Dropped);
    assert!(p.local.is_empty());
    assert!(p.tenants[&vnid(10)].ips[0]
        .why_not
        .as_ref()
        .unwrap()
        .contains("several nodes claim it"));
    // No node hosts it: dropped.
    let s = state(&[], &[("a", 10, &[A])]);
    let p = plan(&s, "node-1", &BTreeSet::new(), false);
    assert_eq!(p.tenants[&vnid(10)].route, EgressRoute::Dropped);
    // Two IPs of one tenant on one node: neither is used.
    let s = state(&[("node-2", &[A, B])], &[("a", 10, &[A, B])]);
    let p = plan(&s, "node-1", &BTreeSet::new(), false);
    assert_eq!(p.tenants[&vnid(10)].route, EgressRoute::Dropped);
    assert!(p.monitor.is_empty());
    // Joined namespaces (one VNID) asking for the same IP are one tenant.
    let s = state(&[("node-2", &[A])], &[("a", 10, &[A]), ("j", 10, &[A])]);
    let p = plan(&s, "node-1", &BTreeSet::new(), false);
    assert_eq!(
        p.tenants[&vnid(10)].route,
        EgressRoute::Remote(vec![vtep(2)])
    );
    assert_eq!(p.tenants[&vnid(10)].namespaces, ["a", "j"]);
}

const A6: &str = "fd00:77::100";
const B6: &str = "fd00:77::101";

#[test]
fn each_family_leaves_through_its_own_egress_ips() {
    // Tenant a: IPv4 on node-2, IPv6 on node-3. Tenant b: IPv4 and IPv6 both on node-2 (one
    // of each family on a node is no twin). Tenant c: IPv4 only.
    let s = state(
        &[("node-2", &[A, B6]), ("node-3", &[A6])],
        &[
            ("a", 10, &[A, A6]),
            ("b", 11, &[B, B6]),
            ("c", 12, &["192.168.77.102"]),
        ],
    );
    // node-2 does not host B: fix b to hold B on node-2 too.
    let mut s = s;
    let mut hs = s.host_subnet_of("node-2").unwrap().clone();
    hs.set_egress_addrs(&[A.parse().unwrap(), B.parse().unwrap(), B6.parse().unwrap()]);
    s.insert(hs.into());
    let p = plan(&s, "node-1", &BTreeSet::new(), true);
    let a = &p.tenants[&vnid(10)];
    assert_eq!(a.route, EgressRoute::Remote(vec![vtep(2)]));
    assert_eq!(a.ipv6, Some((EgressRoute::Remote(vec![vtep(3)]), None)));
    let b = &p.tenants[&vnid(11)];
    assert_eq!(b.route, EgressRoute::Remote(vec![vtep(2)]));
    assert_eq!(b.ipv6, Some((EgressRoute::Remote(vec![vtep(2)]), None)));
    assert!(b.ips.iter().all(|i| i.in_use), "{:?}", b.ips);
    // c asks for no IPv6 egress IP: its IPv6 is dropped, never sent with the node's address.
    let c = &p.tenants[&vnid(12)];
    let (r6, why) = c.ipv6.clone().unwrap();
    assert_eq!(r6, EgressRoute::Dropped);
    assert!(why
        .unwrap()
        .contains("asks for no egress IP of this family"));
    assert_eq!(
        p.monitor
            .iter()
            .map(|m| m.node.as_str())
            .collect::<Vec<_>>(),
        ["node-2", "node-3"]
    );
    // On node-3 a's IPv6 is local (held there) and its IPv4 goes to node-2.
    let p3 = plan(&s, "node-3", &BTreeSet::new(), true);
    let a = &p3.tenants[&vnid(10)];
    assert_eq!(a.route, EgressRoute::Remote(vec![vtep(2)]));
    assert_eq!(a.ipv6, Some((EgressRoute::Local, None)));
    assert_eq!(p3.local, BTreeMap::from([(A6.parse().unwrap(), vnid(10))]));
    // node-3 offline: a's IPv6 is dropped, its IPv4 still leaves through node-2.
    let off = BTreeSet::from(["node-3".to_string()]);
    let a = plan(&s, "node-1", &off, true).tenants[&vnid(10)].clone();
    assert_eq!(a.route, EgressRoute::Remote(vec![vtep(2)]));
    assert_eq!(a.ipv6.unwrap().0, EgressRoute::Dropped);
    // A node without IPv6 plans IPv4 only and holds no IPv6 address.
    let p3 = plan(&s, "node-3", &BTreeSet::new(), false);
    assert_eq!(p3.tenants[&vnid(10)].ipv6, None);
    assert!(p3.local.is_empty());
    // Two IPv6 IPs of one tenant on one node: neither is used, IPv4 unaffected.
    let s = state(&[("node-2", &[A, A6, B6])], &[("a", 10, &[A, A6, B6])]);
    let a = plan(&s, "node-1", &BTreeSet::new(), true).tenants[&vnid(10)].clone();
    assert_eq!(a.route, EgressRoute::Remote(vec![vtep(2)]));
    assert_eq!(a.ipv6.unwrap().0, EgressRoute::Dropped);
}

#[test]
fn ipv6_addresses_of_the_cluster_are_refused_and_drop_both_families() {
    use cluster::types::annotations;
    let cases = [
        (
            "fd01:0:0:2::1",
            "it is node node-2's IPv6 pod gateway (the first address of its subnet fd01:0:0:2::/64)",
        ),
        ("fd01:0:0:3::9", "it is inside node node-3's IPv6 pod subnet fd01:0:0:3::/64"),
        ("fd01:0:0:99::1", "it is inside the cluster network fd01::/48"),
        ("fd02::10", "it is inside the service network fd02::/112"),
    ];
    for (ip, why) in cases {
        let mut s = state(
            &[("node-2", &[A]), ("node-3", &[ip])],
            &[("a", 10, &[A, ip])],
        );
        let mut cn = cluster_network();
        let a = cn.metadata.annotations.get_or_insert_with(Default::default);
        a.insert(
            annotations::IPV6_CLUSTER_NETWORK.into(),
            "fd01::/48,64".into(),
        );
        a.insert(
            annotations::IPV6_SERVICE_NETWORK.into(),
            "fd02::/112".into(),
        );
        s.insert(cn.into());
        for (i, n) in ["node-1", "node-2", "node-3"].iter().enumerate() {
            let mut hs = s.host_subnet_of(n).unwrap().clone();
            hs.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(
                    annotations::IPV6_SUBNET.into(),
                    format!("fd01:0:0:{}::/64", i + 1),
                );
            s.insert(hs.into());
        }
        assert_eq!(
            reserved(&s, ip.parse().unwrap()).as_deref(),
            Some(why),
            "{ip}"
        );
        let t = plan(&s, "node-1", &BTreeSet::new(), true).tenants[&vnid(10)].clone();
        let want = format!("egress IP {ip} is refused: {why}; dropping its external traffic");
        assert_eq!(t.route, EgressRoute::Dropped, "{ip}: IPv4 dropped too");
        assert_eq!(t.problem.as_deref(), Some(want.as_str()));
        assert_eq!(t.ipv6, Some((EgressRoute::Dropped, Some(want))));
    }
}
