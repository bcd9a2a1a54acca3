//! NetworkPolicy at scale (issue 15): 1000 pods and 100 policies, the flows they cost and how
//! fast a change takes effect, next to what openshift-sdn's cross product would have needed.
//!
//! The cluster (Kubernetes mode, the fake API server, the real controller, one real agent):
//! - 20 namespaces `ns-00`..`ns-19`, labelled `team=t<i%4>` and `env=prod|dev` (even|odd);
//! - 1000 pods, 50 per namespace, labelled `role=web|db|cache` (by index mod 3) and
//!   `app=app-<index mod 10>`, each declaring container ports `http` 8080 and `metrics` 9090;
//!   100 of them (5 per namespace) are real pods on the measured node (CNI ADD, their own
//!   network namespaces), 900 are API objects on two other nodes with addresses in those nodes'
//!   subnets (peers, as remote pods are);
//! - 100 policies, 5 per namespace:
//!   1. `deny-ingress`: every pod, ingress, no rule;
//!   2. `web`: role=web from every pod of the namespace on TCP 80, 443 and 8080;
//!   3. `db`: role=db from role=web pods of the namespaces of the same team on TCP 5432;
//!   4. `metrics`: every pod from namespace `ns-00` (monitoring) on the named port `metrics`;
//!   5. `cache-egress`: role=cache, egress to 10.0.0.0/8 except the cluster network, and to
//!      `env=prod` namespaces on TCP 6379-6380.
//!
//! Measured (printed on stderr): the rows on br0 (tables 27 and 80, per pod and shared) and openshift-sdn's
//! cross product for the same policies and pods; the time from writing all 100 policies to their
//! rows on br0; then, ten times each, the time from writing one more policy to its row on br0,
//! from a remote pod's label change to its address joining a rule, and from a local pod's label
//! change to its target row; and the agent's own rebuild times (its histogram).
//!
//! Then the same cluster dual stack (`fd01::/48` beside the IPv4 network, every pod with an
//! address of each family in `status.podIPs`): the same measurements, and the rows for the same
//! policies against the IPv4-only run's (the dual-stack issue's target: at most 2x).
//!
//! With `logged` among the families, the IPv4 cluster again with every namespace's audit
//! logging on (`k8s.ovn.org/acl-logging` deny and allow): the same change latencies with the
//! logging rows (each allow rule's twin, each isolation row's log actions).
//!
//! With `cnp` among the families, the IPv4 cluster with 100 ClusterNetworkPolicies instead
//! (`policy.networking.k8s.io/v1alpha2`, the same shapes per namespace: 80 in the Admin tier,
//! each at its own priority, the default deny as 20 Baseline ones), and the same changes made
//! with ClusterNetworkPolicies: the rows (tables 27, 28, 80 and 81) and change latencies beside
//! the NetworkPolicy figures.
//!
//! Run: `cargo build --release --workspace && cargo bench -p sdn-tests --bench network_policy`
//! (`SDN_NP_LOCAL` local pods, default 100; `SDN_NP_FAMILIES`, default `ipv4,dual,cnp`;
//! `ipv4,logged` compares logging off and on). Wall clock on a shared machine: the figures are
//! what this machine did in this run.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use ipnet::Ipv4Net;
use sdn_tests::cluster::{node_name, Cluster};
use sdn_tests::node::{AgentNode, CniPod, NodeOptions};
use serde_json::{json, Value};

const NAMESPACES: usize = 20;
const PODS_PER_NS: usize = 50;
const ROLES: [&str; 3] = ["web", "db", "cache"];
const REPS: usize = 10;

fn ns_name(i: usize) -> String {
    format!("ns-{i:02}")
}

/// A pod's addresses: IPv4, and IPv6 on a dual-stack cluster.
type Ips = (Ipv4Addr, Option<Ipv6Addr>);

fn pod_json(ns: &str, name: &str, j: usize, node: usize, ips: Option<Ips>) -> Value {
    let mut v = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"role": ROLES[j % 3], "app": format!("app-{}", j % 10)}},
        "spec": {"nodeName": node_name(node), "containers": [{"name": "c", "image": "app",
            "ports": [{"name": "http", "containerPort": 8080}, {"name": "metrics", "containerPort": 9090}]}]}});
    if let Some((ip, ip6)) = ips {
        v["status"] = json!({"phase": "Running", "podIP": ip.to_string()});
        if let Some(ip6) = ip6 {
            v["status"]["podIPs"] = json!([{"ip": ip.to_string()}, {"ip": ip6.to_string()}]);
        }
    }
    v
}

fn netpol(ns: &str, name: &str, spec: Value) -> Value {
    let mut v = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": ns}});
    v["spec"] = spec;
    v
}

fn policies_of(i: usize) -> Vec<Value> {
    let ns = ns_name(i);
    let team = format!("t{}", i % 4);
    vec![
        netpol(&ns, "deny-ingress", json!({"podSelector": {}})),
        netpol(
            &ns,
            "web",
            json!({
            "podSelector": {"matchLabels": {"role": "web"}},
            "ingress": [{"from": [{"podSelector": {}}],
                         "ports": [{"port": 80}, {"port": 443}, {"port": 8080}]}]}),
        ),
        netpol(
            &ns,
            "db",
            json!({
            "podSelector": {"matchLabels": {"role": "db"}},
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": team}},
                                   "podSelector": {"matchLabels": {"role": "web"}}}],
                         "ports": [{"port": 5432}]}]}),
        ),
        netpol(
            &ns,
            "metrics",
            json!({
            "podSelector": {},
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ns-00"}}}],
                         "ports": [{"port": "metrics"}]}]}),
        ),
        netpol(
            &ns,
            "cache-egress",
            json!({
            "podSelector": {"matchLabels": {"role": "cache"}}, "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.128.0.0/14"]}},
                               {"namespaceSelector": {"matchLabels": {"env": "prod"}}}],
                        "ports": [{"port": 6379, "endPort": 6380}]}]}),
        ),
    ]
}

fn cnp(name: &str, tier: &str, priority: usize, spec: Value) -> Value {
    let mut v = json!({"apiVersion": "policy.networking.k8s.io/v1alpha2",
        "kind": "ClusterNetworkPolicy", "metadata": {"name": name}});
    v["spec"] = spec;
    v["spec"]["tier"] = json!(tier);
    v["spec"]["priority"] = json!(priority);
    v
}

fn tcp(port: u16) -> Value {
    json!({"tcp": {"destinationPort": {"number": port}}})
}

/// The shapes of [`policies_of`] as ClusterNetworkPolicies whose subjects are in namespace
/// `i`: four Admin-tier Accepts (each at its own priority) and the default deny in the Baseline
/// tier.
fn cluster_policies_of(i: usize) -> Vec<Value> {
    let ns = ns_name(i);
    let team = format!("t{}", i % 4);
    let in_ns = json!({"matchLabels": {"kubernetes.io/metadata.name": ns}});
    let role = |r: &str| json!({"pods": {"namespaceSelector": in_ns, "podSelector": {"matchLabels": {"role": r}}}});
    vec![
        cnp(
            &format!("{ns}-deny-ingress"),
            "Baseline",
            i,
            json!({"subject": {"namespaces": in_ns},
            "ingress": [{"action": "Deny", "from": [{"namespaces": {}}]}]}),
        ),
        cnp(
            &format!("{ns}-web"),
            "Admin",
            i * 4,
            json!({"subject": role("web"),
            "ingress": [{"action": "Accept", "from": [{"namespaces": in_ns}],
                         "protocols": [tcp(80), tcp(443), tcp(8080)]}]}),
        ),
        cnp(
            &format!("{ns}-db"),
            "Admin",
            i * 4 + 1,
            json!({"subject": role("db"),
            "ingress": [{"action": "Accept",
                         "from": [{"pods": {"namespaceSelector": {"matchLabels": {"team": team}},
                                            "podSelector": {"matchLabels": {"role": "web"}}}}],
                         "protocols": [tcp(5432)]}]}),
        ),
        cnp(
            &format!("{ns}-metrics"),
            "Admin",
            i * 4 + 2,
            json!({"subject": {"namespaces": in_ns},
            "ingress": [{"action": "Accept",
                         "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "ns-00"}}}],
                         "protocols": [{"destinationNamedPort": "metrics"}]}]}),
        ),
        cnp(
            &format!("{ns}-cache-egress"),
            "Admin",
            i * 4 + 3,
            json!({"subject": role("cache"),
            "egress": [{"action": "Accept",
                        "to": [{"networks": ["10.0.0.0/8"]},
                               {"namespaces": {"matchLabels": {"env": "prod"}}}],
                        "protocols": [{"tcp": {"destinationPort": {"range": {"start": 6379, "end": 6380}}}}]}]}),
        ),
    ]
}

/// A probe policy of the change measurements: NetworkPolicy `name` in `ns` selecting `subject`
/// pod labels, or the same as an Admin-tier ClusterNetworkPolicy at `priority`.
fn probe_policy(
    cluster: bool,
    ns: &str,
    name: &str,
    priority: usize,
    subject: &Value,
    from_pods: &Value,
    port: u16,
) -> Value {
    if cluster {
        cnp(
            name,
            "Admin",
            priority,
            json!({"subject": {"pods": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                                        "podSelector": subject}},
            "ingress": [{"action": "Accept",
                         "from": [{"pods": {"namespaceSelector": {}, "podSelector": from_pods}}],
                         "protocols": [tcp(port)]}]}),
        )
    } else {
        netpol(
            ns,
            name,
            json!({"podSelector": subject,
            "ingress": [{"from": [{"namespaceSelector": {}, "podSelector": from_pods}],
                         "ports": [{"port": port}]}]}),
        )
    }
}

/// How `sdnctl` names rule 0 of probe policy `name` (see [`probe_policy`]).
fn probe_rule(cluster: bool, ns: &str, name: &str, priority: usize) -> String {
    if cluster {
        format!(
            "ClusterNetworkPolicy {name} (Admin tier, priority {priority}) ingress rule 0 (Accept)"
        )
    } else {
        format!("NetworkPolicy {ns}/{name} ingress rule 0")
    }
}

/// `sdnctl --json network-policies`.
fn view(node: &AgentNode) -> Value {
    let out = node.sdnctl_api(&["--json", "network-policies"]);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// Policy rows on br0 (tables 27, 28, 80 and 81 without the base rows).
fn rows_on_bridge(node: &AgentNode) -> usize {
    node.ovs
        .ofctl(&["--no-stats", "dump-flows", "br0"])
        .lines()
        .filter(|l| {
            ["table=27,", "table=28,", "table=80,", "table=81,"]
                .iter()
                .any(|t| l.contains(t))
                && !l.contains("cookie=0x1,")
        })
        .count()
}

/// Waits until `ovs-ofctl dump-flows br0 <filter>` prints a line containing every needle;
/// the time it took.
fn until_row(node: &AgentNode, filter: &str, needles: &[&str], began: Instant) -> Duration {
    loop {
        let out = node.ovs.ofctl(&["--no-stats", "dump-flows", "br0", filter]);
        if out.lines().any(|l| needles.iter().all(|n| l.contains(n))) {
            return began.elapsed();
        }
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "no row {filter} with {needles:?} after 60 s:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn conj_id_of(node: &AgentNode, rule: &str) -> u32 {
    let began = Instant::now();
    loop {
        let v = view(node);
        if let Some((id, _)) = v["rules"]
            .as_object()
            .into_iter()
            .flatten()
            .find(|(_, r)| r.as_str() == Some(rule))
        {
            return id.parse().unwrap();
        }
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "no rule {rule}: {v:#}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn summary(v: &[Duration]) -> String {
    let mut v: Vec<f64> = v.iter().copied().map(ms).collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let p = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    format!(
        "p50 {:.0} ms, p90 {:.0} ms, max {:.0} ms",
        p(0.5),
        p(0.9),
        p(1.0)
    )
}

fn main() {
    let families = std::env::var("SDN_NP_FAMILIES").unwrap_or_else(|_| "ipv4,dual,cnp".into());
    let mut rows = Vec::new();
    for family in families.split(',') {
        let (dual, logged, cluster) = match family.trim() {
            "ipv4" => (false, false, false),
            "dual" => (true, false, false),
            "logged" => (false, true, false),
            "cnp" => (false, false, true),
            other => panic!("SDN_NP_FAMILIES: {other:?} is not ipv4, dual, logged or cnp"),
        };
        eprintln!(
            "\n=== {} ===",
            match (dual, logged, cluster) {
                (_, _, true) => "IPv4 only, 100 ClusterNetworkPolicies instead of NetworkPolicies",
                (true, _, _) => "dual stack",
                (false, true, _) => "IPv4 only, every namespace logging deny and allow",
                (false, false, _) => "IPv4 only",
            }
        );
        rows.push((family.trim().to_string(), run(dual, logged, cluster)));
    }
    let of = |f: &str| rows.iter().find(|(n, _)| n == f).map(|(_, r)| *r);
    if let (Some(v4), Some(dual)) = (of("ipv4"), of("dual")) {
        eprintln!(
            "\nrows on br0 for the same policies: IPv4 only {v4}, dual stack {dual} ({:.2}x, target <= 2x)",
            dual as f64 / v4 as f64
        );
    }
    if let (Some(v4), Some(cnp)) = (of("ipv4"), of("cnp")) {
        eprintln!(
            "\nrows on br0 for the same shapes: 100 NetworkPolicies {v4}, 100 ClusterNetworkPolicies {cnp} ({:.2}x)",
            cnp as f64 / v4 as f64
        );
    }
    if let (Some(v4), Some(logged)) = (of("ipv4"), of("logged")) {
        eprintln!(
            "\nrows on br0 for the same policies: logging off {v4}, every namespace logging {logged} ({:.2}x)",
            logged as f64 / v4 as f64
        );
    }
}

/// The whole benchmark on one cluster, IPv4 only or dual stack, NetworkPolicies or (`cluster`)
/// ClusterNetworkPolicies; returns the policy rows on br0 (tables 27, 28, 80 and 81) once all
/// 100 policies are in.
fn run(dual: bool, logged: bool, cluster: bool) -> u64 {
    let local_pods: usize = std::env::var("SDN_NP_LOCAL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let per_ns_local = local_pods.div_ceil(NAMESPACES);
    let options = NodeOptions {
        mode: "networkpolicy",
        ..NodeOptions::default()
    };
    let (c, plane) =
        Cluster::start_kubernetes(1, &if dual { options.dual_stack() } else { options });
    let fake = &plane.fake;
    let node = c.node(1);
    // Two more nodes, objects only: the controller gives them subnets for the remote pods.
    for i in 2..=3 {
        fake.put(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name(i)},
            "status": {"addresses": [{"type": "InternalIP", "address": format!("192.168.77.{}", 10 + i)}]}}))
            .unwrap();
    }
    let subnet_of = |i: usize| -> Ipv4Net {
        let began = Instant::now();
        loop {
            if let Some(hs) = fake.get("network.openshift.io", "hostsubnets", None, &node_name(i)) {
                return hs["subnet"].as_str().unwrap().parse().unwrap();
            }
            assert!(
                began.elapsed() < Duration::from_secs(30),
                "no HostSubnet for node-{i}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let remote_subnets = [subnet_of(2), subnet_of(3)];
    // On a dual-stack cluster each HostSubnet also carries its IPv6 subnet (an annotation).
    let subnet6_of = |i: usize| -> Option<ipnet::Ipv6Net> {
        if !dual {
            return None;
        }
        let began = Instant::now();
        loop {
            let hs = fake.get("network.openshift.io", "hostsubnets", None, &node_name(i));
            if let Some(s) = hs
                .as_ref()
                .and_then(|h| h["metadata"]["annotations"]["sdn.dev/ipv6-subnet"].as_str())
            {
                return Some(s.parse().unwrap());
            }
            assert!(
                began.elapsed() < Duration::from_secs(30),
                "no IPv6 subnet on node-{i}'s HostSubnet"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let remote_subnets6 = [subnet6_of(2), subnet6_of(3)];
    for i in 0..NAMESPACES {
        let mut ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns_name(i),
            "labels": {"team": format!("t{}", i % 4), "env": if i % 2 == 0 { "prod" } else { "dev" }}}});
        if logged {
            ns["metadata"]["annotations"] =
                json!({"k8s.ovn.org/acl-logging": r#"{"deny": "alert", "allow": "notice"}"#});
        }
        fake.put(ns).unwrap();
    }
    // Pods: the remote ones with their addresses, the local ones through the runtime.
    let mut next = [2u32, 2u32];
    let mut remote: Vec<(String, String, usize, Ips)> = Vec::new();
    let mut local_plan = Vec::new();
    for i in 0..NAMESPACES {
        let ns = ns_name(i);
        for j in 0..PODS_PER_NS {
            let name = format!("p{j:02}");
            if j < per_ns_local && local_plan.len() < local_pods {
                fake.put(pod_json(&ns, &name, j, 1, None)).unwrap();
                local_plan.push((ns.clone(), name, j));
            } else {
                let k = (i * PODS_PER_NS + j) % 2;
                let ip = Ipv4Addr::from(u32::from(remote_subnets[k].network()) + next[k]);
                let ip6 = remote_subnets6[k]
                    .map(|n| Ipv6Addr::from(u128::from(n.network()) + u128::from(next[k])));
                next[k] += 1;
                fake.put(pod_json(&ns, &name, j, k + 2, Some((ip, ip6))))
                    .unwrap();
                remote.push((ns.clone(), name, j, (ip, ip6)));
            }
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    let locals: Vec<(CniPod<'_>, String, String, usize)> = local_plan
        .iter()
        .map(|(ns, name, j)| {
            let p = node.pod(ns, name);
            fake.put(pod_json(ns, name, *j, 1, Some(ips_of(&p))))
                .unwrap();
            (p, ns.clone(), name.clone(), *j)
        })
        .collect();
    eprintln!(
        "cluster: {} namespaces, {} pods ({} on this node, ADDs took {:.1} s; {} on two other nodes)",
        NAMESPACES,
        locals.len() + remote.len(),
        locals.len(),
        t.elapsed().as_secs_f64(),
        remote.len()
    );

    // All 100 policies at once.
    let began = Instant::now();
    for i in 0..NAMESPACES {
        for p in if cluster {
            cluster_policies_of(i)
        } else {
            policies_of(i)
        } {
            fake.put(p).unwrap();
        }
    }
    let count_key = if cluster {
        "clusterPolicies"
    } else {
        "policies"
    };
    let (rows, settled) = loop {
        let v = view(node);
        let want = v["targetRows"].as_u64().unwrap_or(0) + v["sharedRows"].as_u64().unwrap_or(0);
        if v[count_key] == 100 && want > 0 && rows_on_bridge(node) as u64 == want {
            // Stable: nothing more arrives in the next 300 ms.
            let at = began.elapsed();
            std::thread::sleep(Duration::from_millis(300));
            let again = view(node);
            if again["targetRows"] == v["targetRows"] && again["sharedRows"] == v["sharedRows"] {
                break (v, at);
            }
        }
        assert!(
            began.elapsed() < Duration::from_secs(120),
            "policies not in after 120 s: {v:#}"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let target = rows["targetRows"].as_u64().unwrap();
    let shared = rows["sharedRows"].as_u64().unwrap();
    let cross = rows["crossProductRows"].as_u64().unwrap();
    let cross_local = rows["crossProductLocalRows"].as_u64().unwrap();
    eprintln!(
        "100 policies written at once: all rows on br0 after {:.0} ms ({} active here, {} isolated local pods, {} rules with rows)",
        ms(settled),
        rows["active"].as_array().map_or(0, Vec::len),
        rows["isolated"].as_object().map_or(0, |o| o.len()),
        rows["rules"].as_object().map_or(0, |o| o.len()),
    );
    eprintln!(
        "rows on br0: {} ({} per pod: targets and isolation, {} shared: peers, ports, conjunctions); openshift-sdn's cross product: {} ({:.1}x; {} = {:.1}x had it left other nodes' targets out)",
        target + shared,
        target,
        shared,
        cross,
        cross as f64 / (target + shared) as f64,
        cross_local,
        cross_local as f64 / (target + shared) as f64
    );

    // One more policy, ten times: from the write to its row.
    let mut writes = Vec::new();
    let mut deletes = Vec::new();
    for k in 0..REPS {
        let port = 30000 + k as u16;
        let p = probe_policy(
            cluster,
            "ns-05",
            &format!("probe-{k}"),
            900 + k,
            &json!({"matchLabels": {"role": "web"}}),
            &json!({}),
            port,
        );
        let t = Instant::now();
        fake.put(p).unwrap();
        writes.push(until_row(
            node,
            &format!("table=80,tcp,tp_dst={port}"),
            &["conjunction("],
            t,
        ));
        let t = Instant::now();
        if cluster {
            fake.delete(
                "policy.networking.k8s.io",
                "clusternetworkpolicies",
                None,
                &format!("probe-{k}"),
            );
        } else {
            fake.delete(
                "networking.k8s.io",
                "networkpolicies",
                Some("ns-05"),
                &format!("probe-{k}"),
            );
        }
        loop {
            let out = node.ovs.ofctl(&[
                "--no-stats",
                "dump-flows",
                "br0",
                &format!("table=80,tcp,tp_dst={port}"),
            ]);
            if !out.lines().any(|l| l.contains("conjunction(")) {
                deletes.push(t.elapsed());
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(60));
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    eprintln!("policy write -> its rows on br0: {}", summary(&writes));
    eprintln!("policy delete -> its rows gone: {}", summary(&deletes));

    // A remote pod's label change: it joins the peers of a rule.
    fake.put(probe_policy(
        cluster,
        "ns-05",
        "from-probe",
        950,
        &json!({"matchLabels": {"role": "db"}}),
        &json!({"matchLabels": {"probe": "yes"}}),
        31000,
    ))
    .unwrap();
    // The rule has rows (and an id) once one peer exists: the first label change is not timed.
    let label = |(ns, name, j, ips): &(String, String, usize, Ips)| {
        let mut obj = pod_json(ns, name, *j, 2, Some(*ips));
        obj["metadata"]["labels"]["probe"] = json!("yes");
        obj
    };
    fake.put(label(&remote[1])).unwrap();
    let id = conj_id_of(node, &probe_rule(cluster, "ns-05", "from-probe", 950));
    let mut peer_changes = Vec::new();
    for (ns, name, j, ips) in remote
        .iter()
        .skip(2)
        .step_by(remote.len() / REPS)
        .take(REPS)
    {
        let ip = ips.0;
        let mut obj = pod_json(ns, name, *j, 2, Some(*ips));
        obj["metadata"]["labels"]["probe"] = json!("yes");
        let t = Instant::now();
        fake.put(obj).unwrap();
        peer_changes.push(until_row(
            node,
            &format!("table=80,ip,nw_src={ip}"),
            &[&format!("conjunction({id},2/3)")],
            t,
        ));
    }
    eprintln!(
        "remote pod label change -> its address in the rule's peers: {}",
        summary(&peer_changes)
    );

    // A local pod's label change: it becomes a target. In three namespaces, a policy selecting
    // `probe-target=yes`; the first pod labelled in each gives the rule its rows (not timed).
    let mut target_changes = Vec::new();
    for (n, ns) in ["ns-05", "ns-06", "ns-07"].into_iter().enumerate() {
        // A ClusterNetworkPolicy's name is cluster-wide: one per namespace.
        let policy = if cluster {
            format!("probe-target-{ns}")
        } else {
            "probe-target".to_string()
        };
        let target = json!({"matchLabels": {"probe-target": "yes"}});
        fake.put(if cluster {
            probe_policy(cluster, ns, &policy, 960 + n, &target, &json!({}), 32000)
        } else {
            // The pods of its own namespace.
            netpol(
                ns,
                &policy,
                json!({"podSelector": target,
                "ingress": [{"from": [{"podSelector": {}}], "ports": [{"port": 32000}]}]}),
            )
        })
        .unwrap();
        let mine: Vec<_> = locals.iter().filter(|l| l.1 == ns).collect();
        let mut id = None;
        for (p, ns, name, j) in mine {
            let port = node.port_of(&p.id);
            let ofport: u32 = node
                .ovs
                .vsctl(&["get", "Interface", &port, "ofport"])
                .trim()
                .parse()
                .unwrap();
            let mut obj = pod_json(ns, name, *j, 1, Some(ips_of(p)));
            obj["metadata"]["labels"]["probe-target"] = json!("yes");
            let t = Instant::now();
            fake.put(obj).unwrap();
            match id {
                None => {
                    id = Some(conj_id_of(node, &probe_rule(cluster, ns, &policy, 960 + n)));
                }
                Some(id) => target_changes.push(until_row(
                    node,
                    &format!("table=80,reg2={ofport}"),
                    &[&format!("conjunction({id},1/3)")],
                    t,
                )),
            }
        }
    }
    eprintln!(
        "local pod label change -> its target row: {}",
        summary(&target_changes)
    );

    let m = node.metrics();
    let count = m
        .get("sdn_network_policy_rebuild_seconds_count")
        .copied()
        .unwrap_or(0.0);
    let sum = m
        .get("sdn_network_policy_rebuild_seconds_sum")
        .copied()
        .unwrap_or(0.0);
    let v = view(node);
    eprintln!(
        "agent: {count:.0} rebuilds, {:.1} ms each on average (inputs to bundle accepted), {:.0} datapath purges; rows now {} per pod + {} shared (openshift-sdn: {})",
        if count > 0.0 { sum / count * 1000.0 } else { f64::NAN },
        m.get("sdn_network_policy_datapath_purges_total").copied().unwrap_or(0.0),
        v["targetRows"],
        v["sharedRows"],
        v["crossProductRows"]
    );
    target + shared
}

/// A pod's addresses from its CNI result.
fn ips_of(p: &CniPod<'_>) -> Ips {
    (
        p.ip.parse().unwrap(),
        p.ip6.as_ref().map(|a| a.parse().unwrap()),
    )
}
