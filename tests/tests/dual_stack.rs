//! Dual stack on one node, end to end: a private OVS, the real `sdn-agent` with an IPv6 cluster
//! network beside the IPv4 one, pods made through the real `sdn-cni`.
//!
//! - a pod gets one address per family in one CNI result (IPv4 first), its IPv6 address usable
//!   at once, its IPv6 routes, both leases in host-local's format, and its record `ip6`;
//! - the IPv6 isolation matrix (ICMPv6 between every ordered pair of pods of two tenants and a
//!   global namespace, and the node's gateway to every pod) matches the VNID rule, as IPv4's;
//! - CHECK passes on a dual-stack pod and DEL releases both leases and removes both families'
//!   rows.

use std::collections::BTreeMap;

use sdn_tests::matrix;
use sdn_tests::node::{AgentNode, CniPod, NodeOptions};

/// A node of a dual-stack cluster: `10.128.0.0/14` and `fd01::/48` (a /64 per node), services
/// `172.30.0.0/16` and `fd02::/112`.
fn dual_stack_node() -> AgentNode {
    AgentNode::start(NodeOptions {
        extra: [
            "--cluster-network",
            "fd01::/48,64",
            "--service-cidr",
            "172.30.0.0/16,fd02::/112",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        ..NodeOptions::default()
    })
}

fn ping6(from: &CniPod<'_>, to: &str) -> bool {
    from.ns
        .exec(&["ping", "-6", "-c", "1", "-W", "2", to])
        .is_ok()
}

#[test]
fn a_dual_stack_pod_gets_both_families_and_ipv6_isolation_follows_the_vnids() {
    let node = dual_stack_node();
    node.set_netnamespace("tenant-a", 11);
    node.set_netnamespace("tenant-b", 12);
    node.set_netnamespace("shared", 0);
    let a1 = node.pod("tenant-a", "a1");
    let a2 = node.pod("tenant-a", "a2");
    let b1 = node.pod("tenant-b", "b1");
    let g1 = node.pod("shared", "g1");

    // One result, both families, IPv4 first; gateways per family.
    let ips = a1.result["ips"].as_array().unwrap();
    assert_eq!(ips.len(), 2, "{}", a1.result);
    assert!(ips[0]["address"].as_str().unwrap().starts_with("10.128."));
    let a1_6 = a1.ip6.clone().unwrap();
    assert!(a1_6.starts_with("fd01:"), "{a1_6}");
    assert!(ips[1]["address"].as_str().unwrap().ends_with("/64"));
    let gw6 = ips[1]["gateway"].as_str().unwrap().to_string();
    assert!(gw6.ends_with("::1"), "{gw6}");
    let routes: Vec<&str> = a1.result["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["dst"].as_str().unwrap())
        .collect();
    for want in ["0.0.0.0/0", "::/0", "fd01::/48", "fd02::/112"] {
        assert!(routes.contains(&want), "{want} in {routes:?}");
    }
    // The address is usable at once (nodad) and the pod has no link-local address.
    let addr = a1
        .ns
        .exec(&["ip", "-6", "addr", "show", "dev", "eth0"])
        .unwrap();
    assert!(addr.contains(&format!("inet6 {a1_6}/64")), "{addr}");
    assert!(
        !addr.contains("tentative") && !addr.contains("fe80"),
        "{addr}"
    );
    // Leases: one file per family, host-local's range sets 0 and 1; the record has ip6.
    let dir = node.lease_dir();
    let lease = std::fs::read_to_string(dir.join(&a1_6)).unwrap();
    assert_eq!(lease, format!("{}\r\neth0", a1.id));
    assert!(dir.join("last_reserved_ip.1").exists());
    let port = node.port_of(&a1.id);
    let ids = &node.interfaces()[&port].1;
    assert_eq!(ids.get("ip6"), Some(&a1_6), "{ids:?}");

    // ICMPv6 between every ordered pair, and the gateway to every pod.
    let pods = [(&a1, 11u32), (&a2, 11), (&b1, 12), (&g1, 0)];
    let mut seen = BTreeMap::new();
    for (from, vf) in pods {
        for (to, vt) in pods {
            if std::ptr::eq(from, to) {
                continue;
            }
            let ip6 = to.ip6.clone().unwrap();
            let got = ping6(from, &ip6);
            let want = matrix::allowed(vf, vt);
            seen.insert(format!("{} -> {}", from.id, to.id), (got, want));
        }
        let from_pod = ping6(from, &gw6);
        assert!(from_pod, "{} cannot reach the IPv6 gateway {gw6}", from.id);
        let to_pod = node
            .ovs
            .exec_in_netns(&[
                "ping",
                "-6",
                "-c",
                "1",
                "-W",
                "2",
                &from.ip6.clone().unwrap(),
            ])
            .is_ok();
        assert!(to_pod, "the node cannot reach {}", from.id);
    }
    let wrong: Vec<String> = seen
        .iter()
        .filter(|(_, (got, want))| got != want)
        .map(|(k, (got, want))| format!("{k}: answered {got}, expected {want}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "IPv6 isolation differs: {wrong:#?}\nflows:\n{}",
        node.flows().join("\n")
    );

    // CHECK passes; DEL releases both leases and the pod's IPv6 rows.
    let check = node.cni(
        &[
            ("CNI_COMMAND", "CHECK"),
            ("CNI_CONTAINERID", &a1.id),
            ("CNI_NETNS", &a1.netns()),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/opt/cni/bin"),
        ],
        &{
            let mut c = node.netconf("1.0.0");
            c["prevResult"] = a1.result.clone();
            c
        },
    );
    assert_eq!(check.code, 0, "CHECK: {}", check.stdout);
    let id = a1.id.clone();
    a1.delete();
    assert!(!dir.join(&a1_6).exists(), "the IPv6 lease of {id} is left");
    node.leases();
    assert!(
        !node.flows().iter().any(|f| f.contains(&a1_6)),
        "rows of {a1_6} left"
    );
}
