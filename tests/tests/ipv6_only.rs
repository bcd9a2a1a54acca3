//! An IPv6-only cluster on real OVS: three nodes of one standalone cluster whose only networks
//! are `fd01::/48` (a /64 per node) and the service network `fd02::/112`, reaching each other
//! over an IPv6 underlay (`fd00:77::1N/64` on `br-phy`, the nodes' `--node-ip`), with the MTU
//! VXLAN over IPv6 leaves of a 1500-byte underlay (1430).
//!
//! Checked: the seeded objects (a HostSubnet with an empty IPv4 subnet, its IPv6 subnet and an
//! IPv6 hostIP); each pod's CNI result (one address, its gateway, no IPv4); the pod's MAC from
//! its address's last four bytes; no IPv4 or ARP row anywhere on br0 and the remote nodes' rows
//! over `tun_ipv6_src` / `tun_ipv6_dst`; the isolation matrix (ICMPv6 and TCP, every pair across
//! three nodes, the node's own reach); `sdnctl trace` agreeing with every probe (TCP and ND);
//! `CNI_ARGS IP=` asking for an IPv4 address refused with nothing left; DEL releasing the lease.

use std::net::Ipv6Addr;
use std::time::Duration;

use sdn_tests::cluster::{underlay_ip6, Cluster};
use sdn_tests::matrix;
use sdn_tests::node::{AgentNode, CniPod, NodeOptions};
use sdn_tests::probe;

const ECHO6_PORT: u16 = 7608;

/// An IPv6-only cluster's flags: its cluster network, its service network and the MTU.
fn ipv6_only() -> NodeOptions {
    NodeOptions {
        cluster_network: "fd01::/48,64".into(),
        extra: ["--service-cidr", "fd02::/112", "--mtu", "1430"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ..NodeOptions::default()
    }
}

fn ip6_of(p: &CniPod<'_>) -> Ipv6Addr {
    p.ip6
        .as_deref()
        .unwrap_or_else(|| panic!("{} has no IPv6 address: {}", p.id, p.result))
        .parse()
        .unwrap()
}

/// What one probe from a pod to another saw: ICMPv6 echo, TCP, UDP, and whether neighbour
/// discovery resolved the destination (the source's neighbour entry has its MAC).
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
struct Seen {
    icmp: bool,
    tcp: bool,
    udp: bool,
    nd: bool,
}

/// [`reach6`], then UDP through `to`'s echo server and the neighbour entry the pings left.
fn probe_all(from_netns: &str, to: Ipv6Addr, timeout: Duration) -> Seen {
    let (icmp, tcp) = reach6(from_netns, to, timeout);
    let udp = probe::udp_probe_to(
        from_netns,
        std::net::SocketAddr::from((to, ECHO6_PORT)),
        timeout,
    );
    let neigh = sdn_tests::harness::run(
        "ip",
        &[
            "netns",
            "exec",
            from_netns,
            "ip",
            "-6",
            "neigh",
            "show",
            &to.to_string(),
        ],
    )
    .unwrap_or_default();
    Seen {
        icmp,
        tcp,
        udp,
        nd: neigh.contains("lladdr"),
    }
}

fn reach6(from_netns: &str, to: Ipv6Addr, timeout: Duration) -> (bool, bool) {
    probe::reach6(from_netns, to, ECHO6_PORT, timeout)
}

#[test]
fn an_ipv6_only_cluster_isolates_tenants_across_nodes_over_an_ipv6_underlay() {
    let c = Cluster::start_ipv6_underlay(3, &ipv6_only());
    let (n1, n2, n3) = (c.node(1), c.node(2), c.node(3));

    // The objects the nodes seeded: no IPv4 subnet, an IPv6 one, an IPv6 hostIP.
    let state = c.state();
    let cn = state.cluster_network.as_ref().expect("a ClusterNetwork");
    assert!(cn.is_ipv6_only(), "{cn:?}");
    for i in 1..=3 {
        let name = sdn_tests::cluster::node_name(i);
        let hs = c.host_subnet(&name);
        assert_eq!(hs.subnet, "", "{hs:?}");
        assert_eq!(hs.host_ip, underlay_ip6(i).to_string());
        assert!(state.ipv6_subnet_of(&name).is_some(), "{hs:?}");
    }

    n1.set_netnamespace("tenant-a", 11);
    n1.set_netnamespace("tenant-b", 12);
    let pods = vec![
        ("a1@1", "tenant-a", n1.pod("tenant-a", "a1")),
        ("b1@1", "tenant-b", n1.pod("tenant-b", "b1")),
        ("a2@2", "tenant-a", n2.pod("tenant-a", "a2")),
        ("b2@2", "tenant-b", n2.pod("tenant-b", "b2")),
        ("g3@3", "default", n3.pod("default", "g3")),
    ];
    let vnid = |ns: &str| match ns {
        "tenant-a" => 11,
        "tenant-b" => 12,
        _ => 0,
    };

    // One address per pod, IPv6, its node's gateway; the MAC from the address's last 4 bytes;
    // no IPv4 address or route in the pod.
    for (label, _, p) in &pods {
        let ips = p.result["ips"].as_array().expect("ips");
        assert_eq!(ips.len(), 1, "{label}: {}", p.result);
        let ip = ip6_of(p);
        let gw = ips[0]["gateway"].as_str().unwrap_or_default();
        let o = ip.segments();
        assert_eq!(
            gw,
            Ipv6Addr::new(o[0], o[1], o[2], o[3], 0, 0, 0, 1).to_string(),
            "{label}"
        );
        let b = ip.octets();
        let want_mac = format!(
            "0a:58:{:02x}:{:02x}:{:02x}:{:02x}",
            b[12], b[13], b[14], b[15]
        );
        let link = p.ns.exec(&["ip", "link", "show", "eth0"]).unwrap();
        assert!(link.contains(&want_mac), "{label}: {link}");
        let v4 = p.ns.exec(&["ip", "-4", "addr", "show", "eth0"]).unwrap();
        assert!(!v4.contains("inet "), "{label} has IPv4: {v4}");
    }

    // No IPv4 or ARP row on any bridge; remote nodes over the IPv6 underlay.
    for (i, n) in [(1, n1), (2, n2), (3, n3)] {
        let flows = n.flows();
        let v4: Vec<&String> = flows
            .iter()
            .filter(|f| {
                f.contains(" ip,")
                    || f.contains(",ip,")
                    || f.contains("arp")
                    || f.contains("nw_src")
                    || f.contains("nw_dst")
            })
            .collect();
        assert!(v4.is_empty(), "node-{i}: IPv4 rows: {v4:#?}");
        for j in (1..=3).filter(|j| *j != i) {
            let vtep = underlay_ip6(j).to_string();
            assert!(
                flows
                    .iter()
                    .any(|f| f.contains("table=10,") && f.contains(&format!("tun_ipv6_src={vtep}"))),
                "node-{i}: no table-10 row for node-{j}:\n{}",
                flows.join("\n")
            );
            assert!(
                flows
                    .iter()
                    .any(|f| f.contains(&format!("set_field:{vtep}->tun_ipv6_dst"))),
                "node-{i}: no row to node-{j}'s VTEP"
            );
        }
    }

    // The isolation matrix, ICMPv6, TCP, UDP and ND, every pair across the nodes; node-1
    // reaches all.
    let _servers: Vec<_> = pods
        .iter()
        .map(|(_, _, p)| probe::tcp6_echo_server(p.ns.name(), ECHO6_PORT))
        .collect();
    let _udp_servers: Vec<_> = pods
        .iter()
        .map(|(_, _, p)| probe::udp6_echo_server(p.ns.name(), ECHO6_PORT))
        .collect();
    let timeout = Duration::from_secs(2);
    let results: Vec<(String, Seen, bool)> = std::thread::scope(|s| {
        let mut jobs = Vec::new();
        for (fl, fns, from) in &pods {
            for (tl, tns, to) in &pods {
                if fl == tl {
                    continue;
                }
                let (netns, dst) = (from.ns.name().to_string(), ip6_of(to));
                let want = matrix::allowed(vnid(fns), vnid(tns));
                let label = format!("{fl} -> {tl}");
                jobs.push(s.spawn(move || (label, probe_all(&netns, dst, timeout), want)));
            }
            let (netns, dst) = (n1.ovs.netns().to_string(), ip6_of(from));
            let label = format!("node-1 -> {fl}");
            jobs.push(s.spawn(move || {
                let icmp = reach6(&netns, dst, timeout).0;
                let all = Seen {
                    icmp,
                    tcp: true,
                    udp: true,
                    nd: true,
                };
                (label, all, true)
            }));
        }
        jobs.into_iter().map(|j| j.join().unwrap()).collect()
    });
    let wrong: Vec<String> = results
        .iter()
        .filter(|(_, seen, want)| {
            let all = Seen {
                icmp: *want,
                tcp: *want,
                udp: *want,
                nd: *want,
            };
            *seen != all
        })
        .map(|(l, seen, want)| format!("{l}: {seen:?}, expected all {want}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "IPv6-only across nodes:\n{}\nnode-1 flows:\n{}\nnode-1 tunnels:\n{}",
        wrong.join("\n"),
        n1.flows().join("\n"),
        c.tunnel_state(1)
    );

    // `sdnctl trace` agrees with every probe, on the sender's node and on the receiver's.
    let node_of = |label: &str| match label.rsplit('@').next() {
        Some("1") => n1,
        Some("2") => n2,
        _ => n3,
    };
    let members: Vec<matrix::Member6<'_>> =
        pods.iter().map(|(l, ns, p)| (*l, *ns, ip6_of(p))).collect();
    let disagree = matrix::trace_disagreements6(&members, &["tcp/7777", "nd"], vnid, node_of);
    assert!(disagree.is_empty(), "trace disagrees: {disagree:#?}");

    // `sdnctl pods` and `status` show the IPv6 side only.
    let api = |args: &[&str]| {
        let out = n1.sdnctl_api(args);
        assert!(out.status.success(), "sdnctl {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let pods_text = api(&["pods"]);
    assert!(
        pods_text.contains(&ip6_of(&pods[0].2).to_string()),
        "{pods_text}"
    );
    let status = api(&["status"]);
    assert!(
        status.contains("subnet fd01:") && status.contains(&underlay_ip6(1).to_string()),
        "{status}"
    );

    // An IPv4 address asked of an IPv6-only node: refused (code 4), nothing left behind.
    let before = (n1.pod_ports(), leases6(n1));
    let ns = sdn_tests::harness::Netns::new("v4req");
    let out = n1.add(
        "v4req",
        &ns.path(),
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=tenant-a;K8S_POD_NAME=v4req;IP=10.128.0.9",
    );
    assert_eq!(out.error_code(), Some(4), "{}", out.stdout);
    assert!(out.stdout.contains("IPv6-only"), "{}", out.stdout);
    assert_eq!((n1.pod_ports(), leases6(n1)), before);

    // DEL releases the pod's lease and port.
    let gone = ip6_of(&pods[2].2).to_string();
    assert!(leases6(n2).contains(&gone), "{:?}", leases6(n2));
    drop(pods);
    let released =
        sdn_tests::harness::wait_until(Duration::from_secs(5), || !leases6(n2).contains(&gone));
    assert!(released, "lease of {gone} kept: {:?}", leases6(n2));
}

/// The IPv6 addresses leased on `node` (its lease files named by IPv6 addresses).
fn leases6(node: &AgentNode) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(node.lease_dir())
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.parse::<Ipv6Addr>().is_ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// One node of an IPv6-only cluster, its node address `fd00:99::1` on its `lo`.
fn ipv6_only_node() -> AgentNode {
    let node = AgentNode::new(NodeOptions {
        node_ip: NODE6.into(),
        ..ipv6_only()
    });
    node.ovs
        .exec_in_netns(&[
            "ip",
            "-6",
            "addr",
            "add",
            &format!("{NODE6}/128"),
            "dev",
            "lo",
            "nodad",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    node.start_agent();
    node
}

const NODE6: &str = "fd00:99::1";

#[test]
fn an_ipv6_only_node_serves_services_and_host_ports_within_the_tenancy() {
    let node = ipv6_only_node();
    node.set_netnamespace("tenant-a", 11);
    node.set_netnamespace("tenant-b", 12);
    let a1 = node.pod("tenant-a", "a1");
    let b1 = node.pod("tenant-b", "b1");
    // a2 publishes host port 18080 (every address) for its port 8080.
    let mappings = serde_json::json!([{"hostPort": 18080, "containerPort": 8080}]);
    let a2 = node.pod_with(
        "tenant-a",
        "a2",
        Some(serde_json::json!({ "portMappings": mappings })),
    );
    let _web = probe::tcp6_echo_server(a2.ns.name(), 8080);
    let _echo = probe::tcp6_echo_server(a2.ns.name(), ECHO6_PORT);

    // A Service through kube-proxy's ip6tables rules: its tenant reaches it (and the endpoint
    // itself, hairpin); another tenant does not.
    sdn_tests::kubeproxy::assert_ipv6_service_within_tenant(&node, [&a1, &a2, &b1], ECHO6_PORT);

    // The host port on the node's IPv6 address and on [::1] (the agent's relay), from the
    // node; ip6tables holds its rule, iptables none (the pod has no IPv4 address).
    let ovs_ns = node.ovs.netns().to_string();
    let at = |ip: &str| std::net::SocketAddr::new(ip.parse().unwrap(), 18080);
    let reached = sdn_tests::harness::wait_until(Duration::from_secs(10), || {
        probe::tcp_probe_to(&ovs_ns, at(NODE6), Duration::from_secs(2))
    });
    assert!(reached, "node -> [{NODE6}]:18080");
    assert!(
        probe::tcp_probe_to(&ovs_ns, at("::1"), Duration::from_secs(2)),
        "node -> [::1]:18080"
    );
    let nat6 = node
        .ovs
        .exec_in_netns(&["ip6tables-save", "-t", "nat"])
        .unwrap();
    assert!(
        nat6.contains(&format!("--to-destination [{}]:8080", ip6_of(&a2))),
        "{nat6}"
    );
    let nat4 = node
        .ovs
        .exec_in_netns(&["iptables-save", "-t", "nat"])
        .unwrap();
    assert!(!nat4.contains("18080"), "an IPv4 host port rule: {nat4}");
}

#[test]
fn warm_pool_ports_of_an_ipv6_only_node_carry_unique_macs_to_their_pods_and_survive_a_restart() {
    let node = ipv6_only_node();
    node.set_netnamespace("tenant-a", 11);
    node.set_netnamespace("tenant-b", 12);
    let b1 = node.pod("tenant-b", "b1");
    // A burst of ADDs in tenant-a warms pool ports for it: IPv6 leases alone.
    let burst: Vec<CniPod<'_>> = (0..8)
        .map(|i| node.pod("tenant-a", &format!("a{i}")))
        .collect();
    let warmed = sdn_tests::harness::wait_until(Duration::from_secs(30), || {
        node.metrics()
            .get("sdn_port_pool_warm")
            .is_some_and(|n| *n >= 4.0)
    });
    assert!(warmed, "no warm ports for tenant-a: {:?}", node.metrics());
    let dir = node.lease_dir();
    let warm: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let content = std::fs::read_to_string(e.path()).ok()?;
            content
                .starts_with("sdn-warm-")
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect();
    assert!(warm.len() >= 4, "{warm:?}");
    assert!(
        warm.iter().all(|a| a.parse::<Ipv6Addr>().is_ok()),
        "{warm:?}"
    );

    // A restart keeps them warm (once the warm-up is done: a port leased but not yet flowed
    // before the stop is flowed by the restart); the next pods take them and work at once,
    // each with a MAC of its own (the last 32 bits of every address differ).
    let warm_now = || node.metrics().get("sdn_port_pool_warm").copied();
    let mut last = warm_now();
    let settled = sdn_tests::harness::wait_until(Duration::from_secs(30), || {
        std::thread::sleep(Duration::from_secs(2));
        let now = warm_now();
        std::mem::replace(&mut last, now) == now
    });
    assert!(settled, "the warm-up did not settle: {:?}", warm_now());
    node.restart_unchanged();
    let hot: Vec<CniPod<'_>> = (0..3)
        .map(|i| node.pod("tenant-a", &format!("hot{i}")))
        .collect();
    let wired = node.log();
    for p in &hot {
        let line = wired
            .lines()
            .find(|l| l.contains("pod wired") && l.contains(&p.id))
            .unwrap_or_else(|| panic!("no pod wired line for {}", p.id));
        assert!(line.contains("warm_port=true"), "{line}");
        assert!(
            reach6(p.ns.name(), ip6_of(&burst[0]), Duration::from_secs(2)).0,
            "{}",
            p.id
        );
        assert!(
            !reach6(p.ns.name(), ip6_of(&b1), Duration::from_secs(2)).0,
            "{}",
            p.id
        );
    }
    let lows: std::collections::BTreeSet<u32> = burst
        .iter()
        .chain(&hot)
        .chain([&b1])
        .map(|p| u128::from(ip6_of(p)) as u32)
        .collect();
    assert_eq!(
        lows.len(),
        burst.len() + hot.len() + 1,
        "two pods share a MAC"
    );
    node.assert_pool_sane(64);
}
