//! Dual stack on one node, end to end: a private OVS, the real `sdn-agent` with an IPv6 cluster
//! network beside the IPv4 one, pods made through the real `sdn-cni`.
//!
//! - a pod gets one address per family in one CNI result (IPv4 first), its IPv6 address usable
//!   at once, its IPv6 routes, both leases in host-local's format, and its record `ip6`;
//! - the IPv6 isolation matrix (ICMPv6 between every ordered pair of pods of two tenants and a
//!   global namespace, and the node's gateway to every pod) matches the VNID rule, as IPv4's;
//! - CHECK passes on a dual-stack pod and DEL releases both leases and removes both families'
//!   rows;
//! - adding the IPv6 network to a running IPv4 node: its pods keep IPv4 only and work, new
//!   pods get both families; taking it away again is refused, naming the setting, with
//!   nothing changed and the pods' IPv6 working; `CNI_ARGS IP=` asks for one address per
//!   family, and every bad one is refused with what is wrong and nothing left;
//! - three nodes of a dual-stack cluster: ICMPv6 and TCP over IPv6 cross nodes over VXLAN on
//!   the IPv4 underlay within a tenant (and to and from the global namespace) only, and the
//!   node reaches every pod;
//! - NetworkPolicies on two nodes in networkpolicy mode: default deny, pod-selector peers on a
//!   named port, IPv6 `ipBlock`s with an exception, egress to an IPv6 address, each holding in
//!   IPv6 as in IPv4 (TCP over both, every ordered pair);
//! - pod IPv6 leaving the cluster is masqueraded (the outside has no route back), and an
//!   EgressNetworkPolicy filters it with IPv6 rules in order; a policy naming no IPv6
//!   destination closes the tenant's external IPv6; other tenants untouched;
//! - IPv6 multicast (`ff05::1:3`, receivers joined) reaches the sender's tenant only, and
//!   nobody once the tenant's multicast is off;
//! - an IPv6 Service through kube-proxy-shaped `ip6tables` rules: reached within the tenant,
//!   refused across tenants, the endpoint reaching itself (hairpin);
//! - forged neighbour discovery (advertisements of another's address or with another's MAC,
//!   unsolicited ones, solicitations with another's MAC, duplicate address detection, router
//!   advertisements, redirects), spoofed IPv6 sources, and ND and UDP across tenants reach no
//!   pod, while their truthful versions do, and no neighbour table learns a lie;
//! - a pool pod's MLD reports are dropped on the pool peer's egress, before br0.

use std::collections::BTreeMap;
use std::net::Ipv6Addr;
use std::time::Duration;

use sdn_tests::harness::wait_until;
use sdn_tests::matrix;
use sdn_tests::node::{AgentNode, CniPod, NodeOptions, DUAL_STACK_FLAGS};
use sdn_tests::probe::{self, Capture, Mac};
use sdn_tests::probe6;

/// A node of a dual-stack cluster: `10.128.0.0/14` and `fd01::/48` (a /64 per node), services
/// `172.30.0.0/16` and `fd02::/112`.
fn dual_stack_node() -> AgentNode {
    AgentNode::start(NodeOptions::default().dual_stack())
}

/// tenant-a (VNID 11) with pods a1 and a2, tenant-b (VNID 12) with b1.
fn two_tenants(node: &AgentNode) -> [CniPod<'_>; 3] {
    node.set_netnamespace("tenant-a", 11);
    node.set_netnamespace("tenant-b", 12);
    [
        node.pod("tenant-a", "a1"),
        node.pod("tenant-a", "a2"),
        node.pod("tenant-b", "b1"),
    ]
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

    // `sdnctl trace` agrees with every ICMPv6 probe, by address and by pod name, and judges
    // neighbour discovery as the ND guard does: a solicitation reaches a pod of the same
    // tenant (or the global namespace) only. A spoofed IPv6 source is the spoof guard's.
    let mut disagree = Vec::new();
    for (from, vf) in [(&a1, 11u32), (&a2, 11), (&b1, 12), (&g1, 0)] {
        for (to, vt) in [(&a1, 11u32), (&a2, 11), (&b1, 12), (&g1, 0)] {
            if std::ptr::eq(from, to) {
                continue;
            }
            let (src, dst) = (from.ip6.clone().unwrap(), to.ip6.clone().unwrap());
            let pinged = seen[&format!("{} -> {}", from.id, to.id)].0;
            let (said, words) = matrix::traced(&node, &node, &src, &dst, "icmp");
            if said != pinged {
                disagree.push(format!(
                    "{src} -> {dst} icmp: pinged {pinged}, trace: {words}"
                ));
            }
            let (said, words) = matrix::traced(&node, &node, &src, &dst, "nd");
            if said != matrix::allowed(vf, vt) {
                disagree.push(format!("{src} -> {dst} nd: trace: {words}"));
            }
        }
    }
    let by_name = node.trace("tenant-a/a1", "tenant-b/b1", "icmp6", None);
    assert_eq!(by_name["outcome"], "dropped", "{by_name}");
    let words = by_name["verdict"].as_str().unwrap_or_default();
    assert!(
        words.contains("VNID 11") && words.contains("VNID 12"),
        "{words}"
    );
    assert!(
        by_name["packet"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("ipv6_dst={}", b1.ip6.clone().unwrap())),
        "{by_name}"
    );
    let to_pod = node.trace("node", &a1_6, "tcp/80", None);
    assert_eq!(to_pod["outcome"], "delivered", "{to_pod}");
    assert!(disagree.is_empty(), "trace disagrees: {disagree:#?}");
    let out = node.sdnctl_api(&[
        "trace",
        "tenant-a/a1",
        &a2.ip6.clone().unwrap(),
        "--spoof-ip",
        "fd01::99",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("fd01::99 is not this pod's address"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A restart rebuilds the pods from their records, IPv6 included: no flow changes, and
    // IPv6 still flows.
    node.restart_unchanged();
    assert!(
        ping6(&a1, a2.ip6.as_deref().unwrap()),
        "a1 -> a2 after a restart"
    );

    // Metrics count leases per family: at least the four pods' in each.
    let m = node.metrics();
    for family in ["ipv4", "ipv6"] {
        let n = m
            .get(&format!("sdn_pod_ips{{family=\"{family}\"}}"))
            .copied()
            .unwrap_or_default();
        assert!(n >= 4.0, "sdn_pod_ips {family}: {n}");
    }

    // sdnctl shows both addresses.
    let out = node.sdnctl_api(&["pods"]);
    let pods = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(pods.contains(&format!("{},{a1_6}", a1.ip)), "{pods}");

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

    // Handing the node back to openshift-sdn (IPv4 only) is refused while pods hold IPv6
    // addresses, naming them, before anything is changed.
    node.stop_agent(libc::SIGTERM);
    let (status, text) = node.agent_command("hand-back-to-openshift-sdn");
    assert!(!status.success(), "{text}");
    assert!(
        text.contains("hold IPv6 addresses")
            && text.contains(&format!("tenant-b/b1 ({})", b1.ip6.clone().unwrap())),
        "{text}"
    );
    assert!(
        node.conf_file().exists() && dir.exists(),
        "the refused hand-back changed the node"
    );
}

fn mac_of(p: &CniPod<'_>) -> Mac {
    probe::pod_mac(p.ip.parse().unwrap())
}

fn ip6_of(p: &CniPod<'_>) -> Ipv6Addr {
    p.ip6
        .as_deref()
        .unwrap_or_else(|| panic!("{} has no IPv6 address", p.id))
        .parse()
        .unwrap()
}

/// How long a forged frame is given to arrive where it must not.
const GRACE: Duration = Duration::from_millis(700);

#[test]
fn forged_neighbour_discovery_and_ipv6_sources_reach_no_pod() {
    let node = dual_stack_node();
    let [a1, a2, b1] = two_tenants(&node);
    let b2 = node.pod("tenant-b", "b2");
    let token = probe::unique_token("nd6");
    let (bad, good) = (format!("{token}-forged"), format!("{token}-control"));
    let (me, my_mac) = (ip6_of(&a1), mac_of(&a1));
    let all_nodes: Ipv6Addr = "ff02::1".parse().unwrap();
    let forged: Vec<(&str, Vec<u8>)> = vec![
        (
            "an advertisement claiming a2's address",
            probe6::advertisement(
                (my_mac, me),
                (mac_of(&a2), ip6_of(&a2)),
                ip6_of(&a2),
                Some(my_mac),
                bad.as_bytes(),
            ),
        ),
        (
            "an unsolicited advertisement to all nodes",
            probe6::advertisement(
                (my_mac, me),
                (probe6::multicast_mac(all_nodes), all_nodes),
                me,
                Some(my_mac),
                bad.as_bytes(),
            ),
        ),
        (
            "an advertisement of its own address with b1's MAC",
            probe6::advertisement(
                (my_mac, me),
                (mac_of(&a2), ip6_of(&a2)),
                me,
                Some(mac_of(&b1)),
                bad.as_bytes(),
            ),
        ),
        (
            "a solicitation with a2's MAC as source link-layer address",
            probe6::solicitation(my_mac, me, ip6_of(&a2), Some(mac_of(&a2)), bad.as_bytes()),
        ),
        (
            "duplicate address detection for a2's address",
            probe6::solicitation(
                my_mac,
                Ipv6Addr::UNSPECIFIED,
                ip6_of(&a2),
                None,
                bad.as_bytes(),
            ),
        ),
        (
            "a router advertisement",
            probe6::router_advertisement(my_mac, "fe80::1".parse().unwrap(), bad.as_bytes()),
        ),
        (
            "a redirect",
            probe6::redirect(
                (my_mac, me),
                (mac_of(&a2), ip6_of(&a2)),
                me,
                ip6_of(&b1),
                bad.as_bytes(),
            ),
        ),
        (
            "UDP from b1's address",
            probe6::udp6_frame(
                (my_mac, ip6_of(&b1), 40000),
                (mac_of(&a2), ip6_of(&a2), 9),
                bad.as_bytes(),
            ),
        ),
        (
            "a solicitation for another tenant's pod",
            probe6::solicitation(my_mac, me, ip6_of(&b1), Some(my_mac), bad.as_bytes()),
        ),
        (
            "UDP to another tenant's pod",
            probe6::udp6_frame(
                (my_mac, me, 40000),
                (mac_of(&b1), ip6_of(&b1), 9),
                bad.as_bytes(),
            ),
        ),
    ];
    let victims = [&a2, &b1];
    let caps: Vec<Capture> = victims
        .iter()
        .map(|v| Capture::start(v.ns.name(), "eth0", token.as_bytes()))
        .collect();
    for (_, f) in &forged {
        probe::send_frame(a1.ns.name(), "eth0", f);
    }
    // Controls: the truthful versions reach a2 (same tenant) and b1 (from its own tenant).
    let controls_a2 = [
        probe6::solicitation(my_mac, me, ip6_of(&a2), Some(my_mac), good.as_bytes()),
        probe6::udp6_frame(
            (my_mac, me, 40000),
            (mac_of(&a2), ip6_of(&a2), 9),
            good.as_bytes(),
        ),
    ];
    for f in &controls_a2 {
        probe::send_frame(a1.ns.name(), "eth0", f);
    }
    probe::send_frame(
        b2.ns.name(),
        "eth0",
        &probe6::udp6_frame(
            (mac_of(&b2), ip6_of(&b2), 40000),
            (mac_of(&b1), ip6_of(&b1), 9),
            good.as_bytes(),
        ),
    );
    let arrived = |c: &Capture, marker: &str| {
        c.frames()
            .iter()
            .filter(|f| probe::contains(f, marker.as_bytes()))
            .count()
    };
    wait_until(Duration::from_secs(5), || {
        arrived(&caps[0], &good) >= 2 && arrived(&caps[1], &good) >= 1
    });
    std::thread::sleep(GRACE);
    let mut failures = Vec::new();
    for ((v, c), want) in victims.iter().zip(caps).zip([2, 1]) {
        let frames = c.stop();
        let ok = frames
            .iter()
            .filter(|f| probe::contains(f, good.as_bytes()))
            .count();
        if ok < want {
            failures.push(format!(
                "control: {} received {ok} of {want} truthful frames",
                v.id
            ));
        }
        for f in frames.iter().filter(|f| probe::contains(f, bad.as_bytes())) {
            // Frames arrive as sent (padding aside).
            let what = forged
                .iter()
                .find(|(_, sent)| f.starts_with(sent))
                .map_or("a forged frame", |(w, _)| w);
            failures.push(format!("LEAK to {}: {what}", v.id));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // No neighbour entry of a2 maps an address to a MAC that is not its owner's.
    let neigh = a2
        .ns
        .exec(&["ip", "-6", "neigh", "show", "dev", "eth0"])
        .unwrap();
    for line in neigh.lines().filter(|l| l.contains("lladdr")) {
        let (addr, mac) = (
            line.split_whitespace().next().unwrap_or(""),
            line.split("lladdr ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .unwrap_or(""),
        );
        if addr == me.to_string() {
            assert_eq!(mac, probe::mac_to_string(&my_mac), "{neigh}");
        } else {
            panic!("a2 learnt a neighbour it never asked for: {line}");
        }
    }
}

#[test]
fn a_running_ipv4_node_turns_dual_stack_and_keeps_its_pods() {
    let node = AgentNode::start(NodeOptions::default());
    node.set_netnamespace("tenant-a", 11);
    let old = node.pod("tenant-a", "old");
    assert_eq!(old.ip6, None, "an IPv4 node gave IPv6: {}", old.result);
    let hs = std::fs::read_to_string(node.state_dir().join("hostsubnet-node-a.yaml")).unwrap();
    assert!(!hs.contains("ipv6"), "{hs}");

    // The IPv6 network is added to the configuration and the agent restarted.
    node.stop_agent(libc::SIGTERM);
    node.add_agent_args(&DUAL_STACK_FLAGS);
    node.start_agent();
    let hs = std::fs::read_to_string(node.state_dir().join("hostsubnet-node-a.yaml")).unwrap();
    assert!(hs.contains("sdn.dev/ipv6-subnet"), "{hs}");
    // The old pod keeps IPv4 only, and works; a new one gets both.
    let new = node.pod("tenant-a", "new");
    let new6 = new
        .ip6
        .clone()
        .expect("a pod made after the change has IPv6");
    assert!(old.ping(&new.ip, 2) && new.ping(&old.ip, 2));
    let old_v6 = old
        .ns
        .exec(&["ip", "-6", "addr", "show", "dev", "eth0", "scope", "global"])
        .unwrap();
    assert!(!old_v6.contains("inet6"), "{old_v6}");
    assert!(node
        .ovs
        .exec_in_netns(&["ping", "-6", "-c", "1", "-W", "2", &new6])
        .is_ok());
    let check = |p: &CniPod<'_>| {
        let mut c = node.netconf("1.0.0");
        c["prevResult"] = p.result.clone();
        node.cni(
            &[
                ("CNI_COMMAND", "CHECK"),
                ("CNI_CONTAINERID", &p.id),
                ("CNI_NETNS", &p.netns()),
                ("CNI_IFNAME", "eth0"),
                ("CNI_PATH", "/opt/cni/bin"),
            ],
            &c,
        )
    };
    for p in [&old, &new] {
        let out = check(p);
        assert_eq!(out.code, 0, "CHECK {}: {}", p.id, out.stdout);
    }
}

#[test]
fn the_ipv6_network_is_not_taken_from_pods_that_hold_it() {
    // A dual-stack node whose configuration loses its IPv6 network again: the agent refuses
    // to start, naming the setting and both values, and changes nothing; its pods keep both
    // families meanwhile, and with the IPv6 network back it goes on as before.
    let node = AgentNode::new(NodeOptions::default());
    node.add_agent_args(&DUAL_STACK_FLAGS);
    node.start_agent();
    node.set_netnamespace("tenant-a", 11);
    let [a1, a2] = ["a1", "a2"].map(|n| node.pod("tenant-a", n));
    let a2_6 = a2.ip6.clone().expect("a dual-stack pod has IPv6");
    assert!(ping6(&a1, &a2_6), "a1 -> a2 over IPv6 before");
    let flows = node.flows();
    let state = || {
        let mut files: Vec<(String, String)> = std::fs::read_dir(node.state_dir())
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                (e.file_name().to_string_lossy().into_owned(), text)
            })
            .collect();
        files.sort();
        files
    };
    let (state_before, leases_before) = (state(), node.leases());

    node.stop_agent(libc::SIGTERM);
    node.replace_agent_args(&[]);
    let log_from = node.log().len();
    assert!(
        !node.start_agent_may_die(),
        "an agent without the IPv6 network started on a dual-stack cluster"
    );
    let said = node.log()[log_from..].to_string();
    for part in ["the IPv6 cluster network", "fd01::/48,64", "none"] {
        assert!(
            said.contains(part),
            "the refusal does not say {part:?}: {said}"
        );
    }
    assert_eq!(
        state(),
        state_before,
        "the refused agent changed the cluster state"
    );
    assert_eq!(
        node.leases(),
        leases_before,
        "the refused agent changed the leases"
    );
    assert_eq!(node.flows(), flows, "the refused agent changed br0");
    assert!(
        ping6(&a1, &a2_6),
        "a1 -> a2 over IPv6 while the agent is refused"
    );
    assert!(
        a1.ping(&a2.ip, 2),
        "a1 -> a2 over IPv4 while the agent is refused"
    );

    // The IPv6 network back: the pods keep both addresses, a new pod gets both.
    node.replace_agent_args(&DUAL_STACK_FLAGS);
    node.start_agent();
    let a3 = node.pod("tenant-a", "a3");
    let a3_6 = a3.ip6.clone().expect("a new pod has IPv6 again");
    assert!(
        ping6(&a1, &a3_6) && ping6(&a3, &a2_6),
        "IPv6 after the restart"
    );
    let a1_6 = a1
        .ns
        .exec(&["ip", "-6", "addr", "show", "dev", "eth0", "scope", "global"])
        .unwrap();
    assert!(a1_6.contains(a1.ip6.as_deref().unwrap()), "{a1_6}");
}

#[test]
fn cni_args_ip_asks_for_an_address_of_each_family() {
    let node = dual_stack_node();
    node.set_netnamespace("tenant-a", 11);
    let add = |id: &str, ns: &sdn_tests::harness::Netns, ip: &str| {
        node.add(
            id,
            &ns.path(),
            &format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=tenant-a;K8S_POD_NAME={id};IP={ip}"),
        )
    };
    let ns = sdn_tests::harness::Netns::new("ip6req");
    let out = add("req1", &ns, "10.128.0.77,fd01::77/64");
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(out.ip().as_deref(), Some("10.128.0.77"));
    assert_eq!(out.ip6().as_deref(), Some("fd01::77"));
    let leases = node.lease_dir();
    assert!(leases.join("fd01::77").exists());

    // Refused with what is wrong, nothing left: a taken IPv6 address, another subnet's, a
    // wrong prefix, a malformed one.
    let before_ports = node.pod_ports().len();
    for (i, (ip, code, words)) in [
        ("fd01::77", 4, "in use"),
        ("fd01:0:0:9::7", 4, "not in subnet"),
        ("fd01::78/80", 4, "does not match the node subnet"),
        ("fd01::7::8", 4, "is not an IP address"),
        ("fe80::8", 4, "is not a unicast address a pod can use"),
    ]
    .into_iter()
    .enumerate()
    {
        let ns = sdn_tests::harness::Netns::new("ip6bad");
        let id = format!("bad{i}");
        let out = add(&id, &ns, ip);
        assert_eq!(out.error_code(), Some(code), "IP={ip}: {}", out.stdout);
        assert!(out.stdout.contains(words), "IP={ip}: {}", out.stdout);
        let files: Vec<String> = std::fs::read_dir(&leases)
            .unwrap()
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap_or_default())
            .collect();
        assert!(
            !files.iter().any(|f| f.starts_with(&id)),
            "IP={ip} left a lease"
        );
    }
    assert_eq!(
        node.pod_ports().len(),
        before_ports,
        "a refused ADD left a port"
    );
}

#[test]
fn an_ipv6_address_asked_of_an_ipv4_node_is_refused() {
    let node = AgentNode::start(NodeOptions::default());
    node.set_netnamespace("tenant-a", 11);
    let ns = sdn_tests::harness::Netns::new("ip6req");
    let out = node.add(
        "v6on4",
        &ns.path(),
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=tenant-a;K8S_POD_NAME=p;IP=fd01::5",
    );
    assert_eq!(out.error_code(), Some(4), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("asks for IPv6 address fd01::5, but this node has no IPv6 subnet"),
        "{}",
        out.stdout
    );
    node.assert_no_pod_leftovers();
    // An IPv6 trace on this node is refused, not traced in IPv4 under an IPv6 name.
    for args in [["node", "node", "icmp6"], ["node", "fd01::5", "icmp"]] {
        let out = node.sdnctl_api(&[&["trace"][..], &args[..]].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("IPv6 network"),
            "sdnctl trace {args:?}: {err}"
        );
    }
}

fn reach6(from_netns: &str, to: Ipv6Addr, timeout: Duration) -> (bool, bool) {
    probe::reach6(from_netns, to, ECHO6_PORT, timeout)
}

const ECHO6_PORT: u16 = 7607;

#[test]
fn ipv6_crosses_nodes_over_the_ipv4_underlay_within_a_tenant_only() {
    use sdn_tests::cluster::Cluster;
    let c = Cluster::start(3, &NodeOptions::default().dual_stack());
    let (n1, n2, n3) = (c.node(1), c.node(2), c.node(3));
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
    // Each node's IPv6 subnet is its own /64 of fd01::/48.
    let subnets: std::collections::BTreeSet<String> = pods
        .iter()
        .map(|(_, _, p)| {
            let a = ip6_of(p).segments();
            format!("{:x}:{:x}:{:x}:{:x}", a[0], a[1], a[2], a[3])
        })
        .collect();
    assert_eq!(subnets.len(), 3, "{subnets:?}");
    let _servers: Vec<_> = pods
        .iter()
        .map(|(_, _, p)| probe::tcp6_echo_server(p.ns.name(), ECHO6_PORT))
        .collect();
    let timeout = Duration::from_secs(2);
    let results: Vec<(String, (bool, bool), bool)> = std::thread::scope(|s| {
        let mut jobs = Vec::new();
        for (fl, fns, from) in &pods {
            for (tl, tns, to) in &pods {
                if fl == tl {
                    continue;
                }
                let (netns, dst) = (from.ns.name().to_string(), ip6_of(to));
                let want = matrix::allowed(vnid(fns), vnid(tns));
                let label = format!("{fl} -> {tl}");
                jobs.push(s.spawn(move || (label, reach6(&netns, dst, timeout), want)));
            }
            // node-1's tun0 reaches every pod (its traffic is VNID 0).
            let (netns, dst) = (n1.ovs.netns().to_string(), ip6_of(from));
            let label = format!("node-1 -> {fl}");
            jobs.push(s.spawn(move || (label, (reach6(&netns, dst, timeout).0, true), true)));
        }
        jobs.into_iter().map(|j| j.join().unwrap()).collect()
    });
    let wrong: Vec<String> = results
        .iter()
        .filter(|(_, (icmp, tcp), want)| icmp != want || tcp != want)
        .map(|(l, (icmp, tcp), want)| format!("{l}: icmp6 {icmp}, tcp6 {tcp}, expected {want}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "IPv6 across nodes:\n{}\nnode-1 flows:\n{}",
        wrong.join("\n"),
        n1.flows().join("\n")
    );

    // `sdnctl trace` agrees with every probe: on the sender's node, and for a packet that
    // leaves over VXLAN again on the receiver's with the VNI the first trace names (TCP and
    // the solicitation for the destination, which crosses nodes as ARP does).
    let node_of = |label: &str| match label.rsplit('@').next() {
        Some("1") => n1,
        Some("2") => n2,
        _ => n3,
    };
    let members: Vec<matrix::Member6<'_>> =
        pods.iter().map(|(l, ns, p)| (*l, *ns, ip6_of(p))).collect();
    let disagree = matrix::trace_disagreements6(&members, &["tcp/7777", "nd"], vnid, node_of);
    assert!(disagree.is_empty(), "trace disagrees: {disagree:#?}");

    // A HostSubnet whose IPv6 subnet is malformed is refused whole (fail closed: no rows for
    // its IPv4 subnet either), named in the state problems; corrected, it gets both families'
    // rows.
    let mut hs = cluster::HostSubnet::new("node-9", "192.168.111.99", "10.128.40.0/23");
    hs.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("sdn.dev/ipv6-subnet".into(), "fd01:0:0:9::/64".into());
    let scratch = tempfile_dir("hs9");
    let good = cluster::StandaloneSource::write_object(
        &scratch,
        &cluster::ClusterObject::HostSubnet(hs.clone()),
    )
    .unwrap();
    let text = std::fs::read_to_string(&good).unwrap();
    let bad = text.replace("fd01:0:0:9::/64", "fd01:0:0:9zz::/64");
    assert_ne!(bad, text);
    let file = c.state_dir().join(good.file_name().unwrap());
    std::fs::write(&file, &bad).unwrap();
    let rows = |n: &AgentNode| {
        n.flows()
            .into_iter()
            .filter(|f| f.contains("10.128.40.0") || f.contains("fd01:0:0:9::"))
            .count()
    };
    let noticed = wait_until(Duration::from_secs(10), || {
        n1.metrics()
            .get("sdn_cluster_state_problems")
            .is_some_and(|p| *p >= 1.0)
    });
    assert!(noticed, "no state problem for the malformed HostSubnet");
    assert!(
        n1.log().contains("fd01:0:0:9zz::/64"),
        "the log names the bad value:\n{}",
        n1.log()
    );
    assert_eq!(rows(n1), 0, "rows for a refused HostSubnet");
    std::fs::write(&file, &text).unwrap();
    let applied = wait_until(Duration::from_secs(10), || rows(n1) > 0);
    assert!(applied, "no rows for the corrected HostSubnet");
    let flows = n1.flows();
    assert!(
        flows.iter().any(|f| f.contains("fd01:0:0:9::/64"))
            && flows.iter().any(|f| f.contains("10.128.40.0/23")),
        "both families' rows for node-9"
    );
    std::fs::remove_file(&file).unwrap();
    let _ = std::fs::remove_dir_all(&scratch);
}

/// A fresh scratch directory under the system's temporary directory.
fn tempfile_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sdn-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A Pod object as the scheduler writes it and, with `ips`, as the kubelet reports a
/// dual-stack pod's addresses (`podIP` the first, `podIPs` one per family).
fn pod_object(ns: &str, name: &str, node: &str, ips: Option<(&str, &str)>) -> serde_json::Value {
    let mut v = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"pod": name}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "agnhost",
            "ports": [{"name": "echo6", "containerPort": ECHO6_PORT, "protocol": "TCP"}]}]}});
    if let Some((ip, ip6)) = ips {
        v["status"] = serde_json::json!({"phase": "Running", "podIP": ip,
            "podIPs": [{"ip": ip}, {"ip": ip6}]});
    }
    v
}

#[test]
fn network_policies_hold_in_ipv6_as_in_ipv4_across_two_nodes() {
    use sdn_tests::cluster::{node_name, Cluster};
    let (c, plane) = Cluster::start_kubernetes(
        2,
        &NodeOptions {
            mode: "networkpolicy",
            ..NodeOptions::default()
        }
        .dual_stack(),
    );
    let fake = &plane.fake;
    for ns in ["x", "y"] {
        fake.put(serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"ns": ns}}}))
            .unwrap();
    }
    let layout = [("x", "a", 1), ("x", "b", 2), ("y", "c", 1)];
    for (ns, name, node) in layout {
        fake.put(pod_object(ns, name, &node_name(node), None))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    let pods: Vec<(String, CniPod<'_>)> = layout
        .iter()
        .map(|(ns, name, node)| {
            let p = c.node(*node).pod(ns, name);
            let ip6 = p.ip6.clone().expect("a dual-stack pod");
            fake.put(pod_object(ns, name, &node_name(*node), Some((&p.ip, &ip6))))
                .unwrap();
            (format!("{ns}/{name}"), p)
        })
        .collect();
    let _servers: Vec<_> = pods
        .iter()
        // `[::]` serves both families (net.ipv6.bindv6only is 0 in a new namespace).
        .map(|(_, p)| probe::tcp6_echo_server(p.ns.name(), ECHO6_PORT))
        .collect();
    // Every ordered pair, TCP over each family: (from, to) -> (v4, v6).
    let observe = || -> BTreeMap<(String, String), (bool, bool)> {
        std::thread::scope(|s| {
            let mut jobs = Vec::new();
            for (f, from) in &pods {
                for (t, to) in &pods {
                    if f == t {
                        continue;
                    }
                    let netns = from.ns.name().to_string();
                    let (v4, v6): (std::net::IpAddr, std::net::IpAddr) =
                        (to.ip.parse().unwrap(), ip6_of(to).into());
                    let key = (f.clone(), t.clone());
                    jobs.push(s.spawn(move || {
                        let t = Duration::from_millis(1500);
                        let a = probe::tcp_probe_to(&netns, (v4, ECHO6_PORT).into(), t);
                        let b = probe::tcp_probe_to(&netns, (v6, ECHO6_PORT).into(), t);
                        (key, (a, b))
                    }));
                }
            }
            jobs.into_iter().map(|j| j.join().unwrap()).collect()
        })
    };
    let c_ip6 = pods[2].1.ip6.clone().unwrap();
    let x_b6 = pods[1].1.ip6.clone().unwrap();
    let netpol = |ns: &str, name: &str, spec: serde_json::Value| {
        serde_json::json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": ns}, "spec": spec})
    };
    // (case, policies, the ordered pairs denied in IPv6)
    type Case<'a> = (&'a str, Vec<serde_json::Value>, Vec<(&'a str, &'a str)>);
    let cases: Vec<Case<'_>> = vec![
        ("no policy", vec![], vec![]),
        (
            "default deny ingress in x",
            vec![netpol(
                "x",
                "deny",
                serde_json::json!({"podSelector": {}, "policyTypes": ["Ingress"]}),
            )],
            vec![
                ("x/b", "x/a"),
                ("y/c", "x/a"),
                ("x/a", "x/b"),
                ("y/c", "x/b"),
            ],
        ),
        (
            "x/a from x/b by pod selector on the named port",
            vec![netpol(
                "x",
                "a-from-b",
                serde_json::json!({"podSelector": {"matchLabels": {"pod": "a"}},
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}],
                             "ports": [{"port": "echo6"}]}]}),
            )],
            vec![("y/c", "x/a")],
        ),
        (
            "x/a from the cluster's IPv6 network except y/c, and from all of IPv4",
            vec![netpol(
                "x",
                "a-from-block",
                serde_json::json!({"podSelector": {"matchLabels": {"pod": "a"}},
                "ingress": [{"from": [
                    {"ipBlock": {"cidr": "fd01::/48", "except": [format!("{c_ip6}/128")]}},
                    {"ipBlock": {"cidr": "0.0.0.0/0"}}]}]}),
            )],
            vec![("y/c", "x/a")],
        ),
        (
            "egress of x/a only to x/b's IPv6 address and to IPv4",
            vec![netpol(
                "x",
                "a-egress",
                serde_json::json!({"podSelector": {"matchLabels": {"pod": "a"}},
                "policyTypes": ["Egress"],
                "egress": [{"to": [
                    {"ipBlock": {"cidr": format!("{x_b6}/128")}},
                    {"ipBlock": {"cidr": "0.0.0.0/0"}}]}]}),
            )],
            vec![("x/a", "y/c")],
        ),
    ];
    let mut current: Vec<serde_json::Value> = Vec::new();
    let mut failures = Vec::new();
    for (case, policies, ipv6_denied) in cases {
        for p in &current {
            fake.delete(
                "networking.k8s.io",
                "networkpolicies",
                p["metadata"]["namespace"].as_str(),
                p["metadata"]["name"].as_str().unwrap(),
            );
        }
        for p in &policies {
            fake.put(p.clone()).unwrap();
        }
        current = policies;
        // IPv4 answers as in the policies' IPv4 reading: every denied IPv6 pair of the first
        // two cases is denied in IPv4 too; the block cases allow all of IPv4.
        let v4_denied: Vec<(&str, &str)> = if case.contains("IPv4") {
            vec![]
        } else {
            ipv6_denied.clone()
        };
        let want =
            |f: &str, t: &str| (!v4_denied.contains(&(f, t)), !ipv6_denied.contains(&(f, t)));
        let mut got = observe();
        let settled = wait_until(Duration::from_secs(20), || {
            got = observe();
            got.iter().all(|((f, t), r)| *r == want(f, t))
        });
        if !settled {
            for ((f, t), r) in &got {
                if *r != want(f, t) {
                    failures.push(format!(
                        "{case}: {f} -> {t}: (tcp4, tcp6) = {r:?}, expected {:?}",
                        want(f, t)
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{}\nnode-1 policy rows:\n{}",
        failures.join("\n"),
        c.node(1)
            .flows()
            .iter()
            .filter(|f| f.contains("table=27")
                || f.contains("table=80")
                || f.contains("pod_egress_policy")
                || f.contains("ingress_isolation"))
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// An IPv6 "outside" beyond the node: a namespace on a veth to the node's namespace, routed as
/// `2001:db8::/32`, holding `2001:db8:1::10` and `2001:db8:2::20` with an echo server; it has
/// no route to the pods' network, so only masqueraded traffic gets answers.
fn external6(node: &AgentNode) -> (sdn_tests::harness::Netns, probe::EchoServer) {
    let ext = sdn_tests::harness::Netns::new("sdneg6x");
    let run = |cmd: &[&str]| {
        node.ovs
            .exec_in_netns(cmd)
            .unwrap_or_else(|e| panic!("{e}"))
    };
    run(&[
        "ip", "link", "add", "sdneg6x0", "type", "veth", "peer", "name", "sdneg6x1",
    ]);
    run(&["ip", "link", "set", "sdneg6x1", "netns", ext.name()]);
    run(&[
        "ip",
        "-6",
        "addr",
        "add",
        "2001:db8:ff::1/64",
        "dev",
        "sdneg6x0",
        "nodad",
    ]);
    run(&["ip", "link", "set", "sdneg6x0", "up"]);
    run(&[
        "ip",
        "-6",
        "route",
        "add",
        "2001:db8::/32",
        "via",
        "2001:db8:ff::2",
    ]);
    for cmd in [
        vec![
            "ip",
            "-6",
            "addr",
            "add",
            "2001:db8:ff::2/64",
            "dev",
            "sdneg6x1",
            "nodad",
        ],
        vec!["ip", "link", "set", "sdneg6x1", "up"],
        vec!["ip", "-6", "addr", "add", "2001:db8:1::10/128", "dev", "lo"],
        vec!["ip", "-6", "addr", "add", "2001:db8:2::20/128", "dev", "lo"],
    ] {
        ext.exec(&cmd).unwrap_or_else(|e| panic!("{e}"));
    }
    let server = probe::tcp6_echo_server(ext.name(), ECHO6_PORT);
    (ext, server)
}

/// Which of the two external IPv6 addresses `pod` reaches: "YY", "Y.", ...
fn reach_outside6(pod: &CniPod<'_>) -> String {
    ["2001:db8:1::10", "2001:db8:2::20"]
        .iter()
        .map(|ip| {
            let to: Ipv6Addr = ip.parse().unwrap();
            let ok = probe::tcp_probe_to(
                pod.ns.name(),
                (to, ECHO6_PORT).into(),
                Duration::from_millis(1500),
            );
            if ok {
                'Y'
            } else {
                '.'
            }
        })
        .collect()
}

#[test]
fn ipv6_leaves_masqueraded_and_egress_firewalls_filter_it_in_rule_order() {
    use cluster::{
        ClusterObject, EgressNetworkPolicy, EgressNetworkPolicyRule as Rule, EgressRuleType::*,
        StandaloneSource,
    };
    let node = dual_stack_node();
    node.set_netnamespace("tenant-a", 11);
    node.set_netnamespace("tenant-b", 12);
    let a1 = node.pod("tenant-a", "a1");
    let b1 = node.pod("tenant-b", "b1");
    let (_ext, _server) = external6(&node);
    let put = |rules: Vec<Rule>| {
        StandaloneSource::write_object(
            &node.state_dir(),
            &ClusterObject::EgressNetworkPolicy(EgressNetworkPolicy::new(
                "tenant-a", "default", rules,
            )),
        )
        .unwrap_or_else(|e| panic!("writing the policy: {e}"));
    };
    // No policy: both tenants reach the outside over IPv6 (masqueraded: the outside has no
    // route back to fd01::/48).
    assert_eq!(
        (reach_outside6(&a1), reach_outside6(&b1)),
        ("YY".into(), "YY".into())
    );
    // IPv6 rules in order: one /48 allowed, the rest of IPv6 denied; tenant-b untouched.
    put(vec![
        Rule::cidr(Allow, "2001:db8:1::/48"),
        Rule::cidr(Deny, "::/0"),
    ]);
    let ok = wait_until(Duration::from_secs(10), || reach_outside6(&a1) == "Y.");
    assert!(
        ok,
        "tenant-a: {}\n{}",
        reach_outside6(&a1),
        node.flows().join("\n")
    );
    assert_eq!(reach_outside6(&b1), "YY");
    // A policy written for IPv4 only (no IPv6 destination) closes the tenant's IPv6.
    put(vec![Rule::cidr(Allow, "0.0.0.0/0")]);
    let ok = wait_until(Duration::from_secs(10), || reach_outside6(&a1) == "..");
    assert!(ok, "tenant-a: {}", reach_outside6(&a1));
    assert_eq!(reach_outside6(&b1), "YY");
    // Opened again by an IPv6 rule.
    put(vec![
        Rule::cidr(Allow, "0.0.0.0/0"),
        Rule::cidr(Allow, "::/0"),
    ]);
    let ok = wait_until(Duration::from_secs(10), || reach_outside6(&a1) == "YY");
    assert!(ok, "tenant-a: {}", reach_outside6(&a1));
}

/// From `pod`: `count` UDP datagrams to IPv6 group `group` port `port` carrying `payload`,
/// through an ordinary socket (the kernel's route for `ff00::/8` picks eth0).
fn multicast6_send(pod: &CniPod<'_>, group: Ipv6Addr, port: u16, payload: &[u8], count: usize) {
    let payload = payload.to_vec();
    pod.ns.run_inside(move || {
        let s = std::net::UdpSocket::bind("[::]:0").expect("bind [::]:0");
        for _ in 0..count {
            s.send_to(&payload, (group, port))
                .expect("send to the group");
            std::thread::sleep(Duration::from_millis(50));
        }
    });
}

#[test]
fn ipv6_multicast_reaches_the_tenant_only() {
    let node = dual_stack_node();
    let [a1, a2, b1] = two_tenants(&node);
    for ns in ["tenant-a", "tenant-b"] {
        node.sdnctl(&["multicast", ns, "on"]);
    }
    let group: Ipv6Addr = "ff05::1:3".parse().unwrap();
    // The receivers join the group as an application does (the pod interface then takes the
    // group's MAC; its MLD report goes nowhere, table 0 drops it).
    let _joined: Vec<std::net::UdpSocket> = [&a2, &b1]
        .iter()
        .map(|p| {
            p.ns.run_inside(move || {
                let s = std::net::UdpSocket::bind("[::]:6464").expect("bind [::]:6464");
                // SAFETY: a NUL-terminated name; if_nametoindex only reads it.
                let index = unsafe { libc::if_nametoindex(c"eth0".as_ptr()) };
                s.join_multicast_v6(&group, index).expect("join the group");
                s
            })
        })
        .collect();
    let heard = |marker: &str| {
        let caps: Vec<Capture> = [&a2, &b1]
            .iter()
            .map(|p| Capture::start(p.ns.name(), "eth0", marker.as_bytes()))
            .collect();
        multicast6_send(&a1, group, 6464, marker.as_bytes(), 3);
        std::thread::sleep(GRACE);
        caps.into_iter()
            .map(|c| c.stop().len())
            .collect::<Vec<usize>>()
    };
    // Once the VNID's multicast rows are in, a2 (same tenant) hears a1 and b1 does not.
    let mut got = Vec::new();
    let ok = wait_until(Duration::from_secs(10), || {
        got = heard(&probe::unique_token("mc6"));
        got[0] > 0
    });
    assert!(
        ok && got[1] == 0,
        "(a2, b1) heard {got:?}\n{}",
        node.flows().join("\n")
    );
    // Off for tenant-a: nobody hears it.
    node.sdnctl(&["multicast", "tenant-a", "off"]);
    let ok = wait_until(Duration::from_secs(10), || {
        got = heard(&probe::unique_token("mc6off"));
        got == [0, 0]
    });
    assert!(ok, "(a2, b1) heard {got:?} with multicast off");
}

#[test]
fn ipv6_services_through_kube_proxy_rules_within_a_tenant_and_hairpin() {
    let node = dual_stack_node();
    let [a1, a2, b1] = two_tenants(&node);
    let _server = probe::tcp6_echo_server(a2.ns.name(), ECHO6_PORT);
    sdn_tests::kubeproxy::assert_ipv6_service_within_tenant(&node, [&a1, &a2, &b1], ECHO6_PORT);
}

/// The agent's "pod wired" line for sandbox `id`.
fn wired_line(node: &AgentNode, id: &str) -> String {
    node.log()
        .lines()
        .find(|l| l.contains("pod wired") && l.contains(&format!("sandbox={id}")))
        .unwrap_or_else(|| panic!("no 'pod wired' line for {id} in:\n{}", node.log()))
        .to_string()
}

#[test]
fn warm_pool_ports_carry_both_families_to_the_pods_that_take_them() {
    let node = dual_stack_node();
    node.set_netnamespace("tenant-a", 11);
    node.set_netnamespace("tenant-b", 12);
    let b1 = node.pod("tenant-b", "b1");
    // A burst of ADDs in tenant-a warms pool ports for it: each holds one lease per family
    // under its own name, and its dual-stack rows are on br0 before any pod takes it.
    let burst: Vec<CniPod<'_>> = (0..8)
        .map(|i| node.pod("tenant-a", &format!("a{i}")))
        .collect();
    let dir = node.lease_dir();
    let warm_leases = || {
        let mut v4 = 0;
        let mut v6 = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let content = std::fs::read_to_string(e.path()).unwrap_or_default();
            if content.starts_with("sdn-warm-") {
                if e.file_name().to_string_lossy().contains(':') {
                    v6 += 1;
                } else {
                    v4 += 1;
                }
            }
        }
        (v4, v6)
    };
    let warmed = wait_until(Duration::from_secs(30), || {
        node.metrics()
            .get("sdn_port_pool_warm")
            .is_some_and(|n| *n >= 4.0)
    });
    assert!(warmed, "no warm ports for tenant-a: {:?}", node.metrics());
    let (v4, v6) = warm_leases();
    assert!(v4 >= 4 && v4 == v6, "warm leases: {v4} IPv4, {v6} IPv6");

    // The next pods of tenant-a take warm ports: both addresses come with the port, both
    // families work at once, and IPv6 isolation holds for them as for any pod.
    let hot: Vec<CniPod<'_>> = (0..3)
        .map(|i| node.pod("tenant-a", &format!("hot{i}")))
        .collect();
    for p in &hot {
        let line = wired_line(&node, &p.id);
        assert!(line.contains("warm_port=true"), "{line}");
        let ip6 = p.ip6.clone().expect("an IPv6 address from the warm port");
        let lease = std::fs::read_to_string(dir.join(&ip6)).unwrap();
        // Handed over in place, padded with spaces when the pod's id is shorter than the
        // warm port's owner: host-local compares the trimmed content.
        assert_eq!(
            lease.trim_end(),
            format!("{}\r\neth0", p.id),
            "the IPv6 lease is the pod's"
        );
        assert!(ping6(p, burst[0].ip6.as_deref().unwrap()), "{} -> a0", p.id);
        assert!(ping6(&burst[1], &ip6), "a1 -> {}", p.id);
        assert!(!ping6(p, b1.ip6.as_deref().unwrap()), "{} -> b1", p.id);
        assert!(!ping6(&b1, &ip6), "b1 -> {}", p.id);
        assert!(
            p.ns.exec(&["ping", "-c", "1", "-W", "2", &burst[0].ip])
                .is_ok(),
            "{} -> a0 over IPv4",
            p.id
        );
    }

    // DEL releases both of a warm-born pod's leases (after its flows are gone) and the pool
    // stays sane.
    let gone = &hot[0];
    let ip6 = gone.ip6.clone().unwrap();
    let out = node.del(&gone.id, &gone.netns());
    assert_eq!(out.code, 0, "{}", out.stdout);
    let released = wait_until(Duration::from_secs(10), || {
        [&ip6, &gone.ip].iter().all(|ip| {
            std::fs::read_to_string(dir.join(ip)).map_or(true, |c| !c.starts_with(&gone.id))
        })
    });
    assert!(released, "{} or {ip6} still leased to {}", gone.ip, gone.id);
    node.assert_pool_sane(64); // the agent's default pool size
}

/// A link's counter from sysfs (`rx_packets`, `tx_dropped`...), read inside `ns`.
fn link_counter(ns: &sdn_tests::harness::Netns, link: &str, counter: &str) -> u64 {
    let path = format!("/sys/class/net/{link}/statistics/{counter}");
    let text = ns
        .exec(&["cat", &path])
        .unwrap_or_else(|e| panic!("reading {path}: {e}"));
    text.trim().parse().unwrap()
}

#[test]
fn a_pool_pods_mld_reports_are_dropped_before_br0() {
    // A dual-stack pod's kernel sends MLD reports for its address's solicited-node group.
    // On a pool port they are dropped on the pool peer's egress: its host end on br0 receives
    // nothing from a pod that has not sent anything itself, and ND still works.
    let node = dual_stack_node();
    node.set_netnamespace("tenant-a", 11);
    let filled = wait_until(Duration::from_secs(30), || {
        node.metrics()
            .get("sdn_port_pool_free")
            .is_some_and(|n| *n >= 2.0)
    });
    assert!(filled, "the port pool did not fill: {:?}", node.metrics());
    let [a1, a2] = ["a1", "a2"].map(|n| node.pod("tenant-a", n));
    for p in [&a1, &a2] {
        assert!(
            wired_line(&node, &p.id).contains("pooled_port=true"),
            "{} is not on a pool port: {}",
            p.id,
            wired_line(&node, &p.id)
        );
    }
    // The kernel sends its two reports within a second of the address (the unsolicited
    // report interval); the pod's interface counts them as sent and dropped.
    let sent = wait_until(Duration::from_secs(5), || {
        link_counter(&a1.ns, "eth0", "tx_dropped") >= 2
    });
    assert!(
        sent,
        "a1's eth0 dropped {} frames, its host end received {}",
        link_counter(&a1.ns, "eth0", "tx_dropped"),
        link_counter(node.ovs.ns(), &node.port_of(&a1.id), "rx_packets")
    );
    for p in [&a1, &a2] {
        let port = node.port_of(&p.id);
        assert_eq!(
            link_counter(node.ovs.ns(), &port, "rx_packets"),
            0,
            "{port} (of {}) received frames from a pod that sent none itself",
            p.id
        );
    }
    // Neighbour discovery and the pod's own IPv6 still pass.
    assert!(ping6(&a1, a2.ip6.as_deref().unwrap()), "a1 -> a2");
    assert!(link_counter(node.ovs.ns(), &node.port_of(&a1.id), "rx_packets") > 0);
}
