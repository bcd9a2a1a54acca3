//! ClusterNetworkPolicies in multitenant mode, case by case (docs/pipeline.md,
//! "ClusterNetworkPolicy", the table of every combination), on two nodes in Kubernetes mode:
//! tenants `x` and `y`, and `z` made global (VNID 0) with the change-network annotation, three
//! pods each spread over both nodes, so every case is probed on one node and across nodes.
//!
//! For each case the whole truth table (every ordered pair of distinct pods × TCP/UDP × 80/81,
//! 288 probes, real traffic whose replies must come back) matches an oracle written here from
//! the table's words, and `sdnctl trace` agrees with every probe: on the same node the trace of
//! the packet, across nodes the source node's trace (dropped, or sent over VXLAN) and then the
//! destination node's with the source's VNID as VNI.

use sdn_tests::harness::wait_until;

use super::*;

/// The VNID of each namespace, from the NetNamespaces.
fn vnids(plane: &KubeControlPlane) -> BTreeMap<String, u32> {
    NAMESPACES
        .iter()
        .map(|ns| {
            let id = plane
                .fake
                .get("network.openshift.io", "netnamespaces", None, ns)
                .and_then(|n| n["netid"].as_u64())
                .unwrap_or_else(|| panic!("NetNamespace {ns}"));
            (ns.to_string(), id as u32)
        })
        .collect()
}

/// Multitenant mode's verdict: the source node's Admin egress rules (a Deny drops; Accept,
/// Pass or none go on: between pods the Baseline tier is not consulted), then the destination
/// node's Admin ingress rules (Accept allows, Deny drops), then tenancy: the same VNID, or
/// either one global.
fn allows(
    policies: &[Value],
    vnid: &BTreeMap<String, u32>,
    s: &TestPod<'_>,
    d: &TestPod<'_>,
    proto: Proto,
    port: u16,
) -> bool {
    if cnp_tier(policies, "Admin", "Egress", s, d, proto, port).as_deref() == Some("Deny") {
        return false;
    }
    match cnp_tier(policies, "Admin", "Ingress", d, s, proto, port).as_deref() {
        Some("Accept") => true,
        Some("Deny") => false,
        _ => {
            let (a, b) = (vnid[s.ns], vnid[d.ns]);
            a == b || a == 0 || b == 0
        }
    }
}

fn expected_here(
    pods: &[TestPod<'_>],
    policies: &[Value],
    vnid: &BTreeMap<String, u32>,
) -> super::Table {
    probes(pods)
        .map(|(s, d, proto, port)| {
            (
                (s.label(), d.label(), proto, port),
                allows(policies, vnid, s, d, proto, port),
            )
        })
        .collect()
}

/// What `sdnctl trace` says of one probe: delivered or not, and its words.
fn traced(
    c: &Cluster,
    vnid: &BTreeMap<String, u32>,
    s: &TestPod<'_>,
    d: &TestPod<'_>,
    proto: Proto,
    port: u16,
) -> (bool, String) {
    let p = format!("{}/{port}", proto.name().to_lowercase());
    if s.node == d.node {
        let t = c.node(s.node).trace(&s.label(), &d.label(), &p, None);
        return (t["outcome"] == "delivered", t["verdict"].to_string());
    }
    let out = c
        .node(s.node)
        .trace(&s.label(), &d.ip.to_string(), &p, None);
    if out["outcome"] != "to-remote-node" {
        return (false, format!("node-{}: {}", s.node, out["verdict"]));
    }
    let vni = vnid[s.ns];
    let t = c
        .node(d.node)
        .trace(&s.ip.to_string(), &d.label(), &p, Some(vni));
    (
        t["outcome"] == "delivered",
        format!("node-{}: {}", d.node, t["verdict"]),
    )
}

/// `sdnctl trace` agrees with `want` on every probe (16 traces at a time); returns the words of
/// each.
fn traces_agree(
    case: &str,
    c: &Cluster,
    pods: &[TestPod<'_>],
    vnid: &BTreeMap<String, u32>,
    want: &super::Table,
) -> BTreeMap<(String, String, Proto, u16), String> {
    let all: Vec<_> = probes(pods).collect();
    let mut words = BTreeMap::new();
    let mut wrong = Vec::new();
    for chunk in all.chunks(16) {
        let jobs: Vec<_> = chunk
            .iter()
            .map(|&(s, d, proto, port)| {
                move || {
                    let (ok, why) = traced(c, vnid, s, d, proto, port);
                    ((s.label(), d.label(), proto, port), ok, why)
                }
            })
            .collect();
        for (key, ok, why) in probe::parallel(jobs) {
            if want[&key] != ok {
                wrong.push(format!(
                    "{} -> {} {}/{}: the probe says {}, the trace {why}",
                    key.0,
                    key.1,
                    key.2.name(),
                    key.3,
                    if want[&key] { "allowed" } else { "blocked" }
                ));
            }
            words.insert(key, why);
        }
    }
    assert!(
        wrong.is_empty(),
        "case {case:?}: sdnctl trace disagrees with {} of {} probes:\n{}",
        wrong.len(),
        all.len(),
        wrong.join("\n")
    );
    words
}

/// The cases, in the order of pipeline.md's table (x, y tenants, z global).
fn cases() -> Vec<(&'static str, Vec<Value>)> {
    vec![
        ("tenancy alone", vec![]),
        (
            "Admin Accept from y into x on TCP 80 (across tenants, without making y global)",
            vec![cnp(
                "scrape-x",
                "Admin",
                10,
                json!({"subject": {"namespaces": ns_sel("x")},
                "ingress": [{"action": "Accept", "from": [{"namespaces": ns_sel("y")}],
                             "protocols": [{"tcp": {"destinationPort": {"number": 80}}}]}]}),
            )],
        ),
        (
            "Admin Deny into x on port 81 from x itself and from the global z",
            vec![cnp(
                "no-81-into-x",
                "Admin",
                20,
                json!({"subject": {"namespaces": ns_sel("x")},
                "ingress": [{"action": "Deny",
                             "from": [{"namespaces": ns_sel("x")}, {"namespaces": ns_sel("z")}],
                             "protocols": [{"tcp": {"destinationPort": {"number": 81}}},
                                           {"udp": {"destinationPort": {"number": 81}}}]}]}),
            )],
        ),
        (
            "Admin Pass from x and y into x, to tenancy; then Admin Deny for every other source",
            vec![
                cnp(
                    "pass-first",
                    "Admin",
                    5,
                    json!({"subject": {"namespaces": ns_sel("x")},
                    "ingress": [{"action": "Pass",
                                 "from": [{"namespaces": ns_sel("x")},
                                          {"namespaces": ns_sel("y")}]}]}),
                ),
                cnp(
                    "deny-rest",
                    "Admin",
                    50,
                    json!({"subject": {"namespaces": ns_sel("x")},
                    "ingress": [{"action": "Deny", "from": [{"namespaces": {}}]}]}),
                ),
            ],
        ),
        (
            "Admin egress: y may not send UDP to z; y's Accept to x does not lift x's tenancy",
            vec![cnp(
                "y-out",
                "Admin",
                7,
                json!({"subject": {"namespaces": ns_sel("y")},
                "egress": [
                    {"action": "Deny", "to": [{"namespaces": ns_sel("z")}],
                     "protocols": [{"udp": {"destinationPort": {"range": {"start": 1, "end": 65535}}}}]},
                    {"action": "Accept", "to": [{"namespaces": ns_sel("x")}]}]}),
            )],
        ),
        (
            "Baseline Deny between every pod: never decides in multitenant mode",
            vec![cnp(
                "baseline-deny",
                "Baseline",
                0,
                json!({"subject": {"namespaces": {}},
                "ingress": [{"action": "Deny", "from": [{"namespaces": {}}]}],
                "egress": [{"action": "Deny", "to": [{"namespaces": {}}]}]}),
            )],
        ),
    ]
}

/// The external host on the underlay (the hub) that the Baseline egress case reaches.
const EXTERNAL: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 200);
const EXTERNAL_PORT: u16 = 8182;

/// ClusterNetworkPolicies around VNID isolation (multitenant mode), on two nodes: every case of
/// pipeline.md's table, the truth table and `sdnctl trace` agreeing with every probe; then the
/// Baseline tier deciding what leaves the cluster networks (and an Admin Accept over it); then
/// with every policy gone, tenancy alone again.
#[test]
fn cluster_policies_around_tenancy_on_two_nodes() {
    let (c, plane) = Cluster::start_kubernetes(
        2,
        &NodeOptions {
            mode: "multitenant",
            ..NodeOptions::default()
        },
    );
    let pods = real_pods(&c, &plane);
    let _servers = start_servers(&pods);
    // z becomes global, as `oc adm pod-network make-projects-global z` does.
    let mut z = plane
        .fake
        .get("network.openshift.io", "netnamespaces", None, "z")
        .expect("NetNamespace z");
    z["metadata"]["annotations"] =
        json!({"pod.network.openshift.io/multitenant.change-network": "global"});
    plane.fake.put(z).unwrap();
    let z_pods: Vec<&TestPod<'_>> = pods.iter().filter(|p| p.ns == "z").collect();
    assert!(
        wait_until(Duration::from_secs(30), || {
            vnids(&plane)["z"] == 0
                && z_pods
                    .iter()
                    .all(|p| c.node(p.node).flowed_vnid(&p.cni.ip) == Some(0))
        }),
        "z did not become global: {:?}",
        vnids(&plane)
    );
    let vnid = vnids(&plane);
    assert!(
        vnid["x"] != vnid["y"] && vnid["x"] != 0 && vnid["y"] != 0,
        "{vnid:?}"
    );
    let mut current = Vec::new();
    for (case, policies) in cases() {
        set_policies(&plane, &mut current, policies);
        let want = expected_here(&pods, &current, &vnid);
        converge_to(case, &c, &pods, &want);
        let words = traces_agree(case, &c, &pods, &vnid, &want);
        check_words(case, &words);
    }
    check_baseline_egress(&c, &plane, &pods, &mut current);
    set_policies(&plane, &mut current, Vec::new());
    let want = expected_here(&pods, &current, &vnid);
    converge_to("no policies again", &c, &pods, &want);
}

/// The trace names what decided, as the table says, for one probe of each case.
fn check_words(case: &str, words: &BTreeMap<(String, String, Proto, u16), String>) {
    let said = |s: &str, d: &str, proto: Proto, port: u16| -> &str {
        &words[&(s.to_string(), d.to_string(), proto, port)]
    };
    let want: Option<(&str, &str, Proto, u16, &str)> = match case {
        c if c.starts_with("tenancy alone") => {
            Some(("y/a", "x/a", Proto::Tcp, 80, "≠ destination VNID"))
        }
        c if c.starts_with("Admin Accept") => Some((
            "y/a",
            "x/a",
            Proto::Tcp,
            80,
            "allowed by ClusterNetworkPolicy scrape-x (Admin tier, priority 10) ingress rule 0 (Accept)",
        )),
        c if c.starts_with("Admin Deny") => Some((
            "z/a",
            "x/b",
            Proto::Udp,
            81,
            "dropped by ClusterNetworkPolicy no-81-into-x (Admin tier, priority 20) ingress rule 0 (Deny)",
        )),
        c if c.starts_with("Admin Pass") => Some((
            "x/a",
            "x/b",
            Proto::Tcp,
            80,
            "passed on (the rest of the Admin tier skipped) by ClusterNetworkPolicy pass-first",
        )),
        c if c.starts_with("Admin egress") => Some((
            "y/a",
            "z/b",
            Proto::Udp,
            80,
            "dropped by ClusterNetworkPolicy y-out (Admin tier, priority 7) egress rule 0 (Deny)",
        )),
        _ => None,
    };
    if let Some((s, d, proto, port, text)) = want {
        let w = said(s, d, proto, port);
        assert!(w.contains(text), "case {case:?}: {s} -> {d}: {w}");
    }
}

/// The Baseline tier decides what leaves the cluster networks: a Baseline Deny of y's egress to
/// the external host holds (x still reaches it), an Admin Accept over it lets y through, and a
/// Baseline Deny's pods peers never touch traffic between pods (the case above).
fn check_baseline_egress(
    c: &Cluster,
    plane: &KubeControlPlane,
    pods: &[TestPod<'_>],
    current: &mut Vec<Value>,
) {
    c.hub_exec(&[
        "ip",
        "addr",
        "add",
        &format!("{EXTERNAL}/24"),
        "dev",
        "hub0",
    ]);
    let _server = probe::tcp_echo_server(c.hub_netns(), EXTERNAL_PORT);
    let out = SocketAddrV4::new(EXTERNAL, EXTERNAL_PORT);
    let reach = |p: &TestPod<'_>| probe::tcp_probe(p.cni.ns.name(), out, PROBE_TIMEOUT);
    let pod = |l: &str| pods.iter().find(|p| p.label() == l).unwrap();
    let (x_a, y_a, y_b) = (pod("x/a"), pod("y/a"), pod("y/b"));
    assert!(
        reach(x_a) && reach(y_a),
        "pods reach the external host without policies"
    );
    let deny_out = cnp(
        "no-external-for-y",
        "Baseline",
        0,
        json!({"subject": {"namespaces": ns_sel("y")},
        "egress": [{"action": "Deny", "to": [{"networks": [format!("{EXTERNAL}/32")]}]}]}),
    );
    set_policies(plane, current, vec![deny_out.clone()]);
    let settled = |want_y: bool| {
        wait_until(CONVERGE, || {
            reach(x_a) && reach(y_a) == want_y && reach(y_b) == want_y
        })
    };
    assert!(
        settled(false),
        "y reaches the external host past a Baseline Deny"
    );
    let t = c.node(y_a.node).trace(
        &y_a.label(),
        &EXTERNAL.to_string(),
        &format!("tcp/{EXTERNAL_PORT}"),
        None,
    );
    assert_eq!(t["outcome"], "dropped", "{t:#}");
    assert!(
        t.to_string().contains(
            "dropped by ClusterNetworkPolicy no-external-for-y (Baseline tier, priority 0) egress rule 0 (Deny)"
        ),
        "{t:#}"
    );
    // An Admin Accept decides before the Baseline tier.
    let accept = cnp(
        "external-ok",
        "Admin",
        1,
        json!({"subject": {"pods": {"namespaceSelector": ns_sel("y"),
                                    "podSelector": {"matchLabels": {"pod": "a"}}}},
        "egress": [{"action": "Accept", "to": [{"networks": [format!("{EXTERNAL}/32")]}]}]}),
    );
    set_policies(plane, current, vec![deny_out, accept]);
    assert!(
        wait_until(CONVERGE, || reach(y_a) && !reach(y_b)),
        "the Admin Accept does not let y/a out over the Baseline Deny (y/b stays denied)"
    );
    let t = c.node(y_a.node).trace(
        &y_a.label(),
        &EXTERNAL.to_string(),
        &format!("tcp/{EXTERNAL_PORT}"),
        None,
    );
    assert_eq!(t["outcome"], "to-host", "{t:#}");
}
