//! NetworkPolicy mode end to end (issue 15), in the spirit of the upstream NetworkPolicy e2e
//! suite and cyclonus: three namespaces `x`, `y`, `z` with pods `a`, `b`, `c` each, spread over
//! two nodes (Kubernetes mode: the fake API server, the real controller, the real agents), every
//! pod serving TCP and UDP on ports 80 and 81 with named container ports. For each set of
//! policies the whole truth table (every ordered pair of distinct pods × TCP/UDP × 80/81, 288
//! probes, all real traffic) is probed and compared with what an oracle written here from the
//! Kubernetes semantics says; the oracle reads the policies' JSON directly, so it shares no code
//! with the agent's reader or flow builder.
//!
//! Also checked: a Service whose endpoint an ingress policy refuses leaves nothing the endpoint
//! can answer through in the Service's name (forged TCP SYN-ACK and UDP reply, same node), the
//! node reaches isolated pods (kubelet probes), rows per rule grow with
//! targets + peers + ports, the rows survive an agent restart untouched, and the time from a
//! policy write to the truth table in effect.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use sdn_tests::cluster::{node_name, Cluster, KubeControlPlane};
use sdn_tests::node::{CniPod, NodeOptions};
use sdn_tests::probe;
use serde_json::{json, Value};

mod conformance;
mod tenancy;

const NAMESPACES: [&str; 3] = ["x", "y", "z"];
const PODS: [&str; 3] = ["a", "b", "c"];
const PORTS: [u16; 2] = [80, 81];
const PROBE_TIMEOUT: Duration = Duration::from_millis(1200);
/// How long a policy change may take to show in the truth table.
const CONVERGE: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "TCP",
            Proto::Udp => "UDP",
        }
    }
}

/// A test pod: where it is and what the oracle needs.
struct TestPod<'a> {
    ns: &'static str,
    name: &'static str,
    node: usize,
    labels: BTreeMap<String, String>,
    cni: CniPod<'a>,
    ip: Ipv4Addr,
}

impl TestPod<'_> {
    fn label(&self) -> String {
        format!("{}/{}", self.ns, self.name)
    }
}

fn ns_labels(ns: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("ns".to_string(), ns.to_string()),
        ("kubernetes.io/metadata.name".to_string(), ns.to_string()),
    ])
}

/// The container ports every pod declares (cyclonus' names).
fn port_name(port: u16, proto: Proto) -> String {
    format!("serve-{port}-{}", proto.name().to_lowercase())
}

fn pod_object(ns: &str, name: &str, node: usize, ip: Option<Ipv4Addr>) -> Value {
    let mut ports = Vec::new();
    for port in PORTS {
        for proto in [Proto::Tcp, Proto::Udp] {
            ports.push(json!({"name": port_name(port, proto), "containerPort": port, "protocol": proto.name()}));
        }
    }
    let mut v = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"pod": name}},
        "spec": {"nodeName": node_name(node), "containers": [{"name": "c", "image": "agnhost", "ports": ports}]}});
    if let Some(ip) = ip {
        v["status"] = json!({"phase": "Running", "podIP": ip.to_string(), "podIPs": [{"ip": ip.to_string()}]});
    }
    v
}

// ---------------------------------------------------------------------------------------------
// The oracle: Kubernetes NetworkPolicy semantics, straight from the JSON.

/// One end of a connection as the oracle reads it.
trait End {
    /// Its namespace.
    fn ns(&self) -> &str;
    /// Its namespace's labels.
    fn ns_labels(&self) -> BTreeMap<String, String>;
    /// Its labels.
    fn labels(&self) -> &BTreeMap<String, String>;
    fn ip(&self) -> Ipv4Addr;
    /// The port of its container port `name` of `proto`, if it declares one.
    fn named_port(&self, name: &str, proto: Proto) -> Option<u16>;
    /// A host-network pod: its node's labels (a `nodes` peer selects it; no policy selects
    /// it as a subject).
    fn node_labels(&self) -> Option<&BTreeMap<String, String>> {
        None
    }
}

impl End for TestPod<'_> {
    fn ns(&self) -> &str {
        self.ns
    }
    fn ns_labels(&self) -> BTreeMap<String, String> {
        ns_labels(self.ns)
    }
    fn labels(&self) -> &BTreeMap<String, String> {
        &self.labels
    }
    fn ip(&self) -> Ipv4Addr {
        self.ip
    }
    fn named_port(&self, name: &str, proto: Proto) -> Option<u16> {
        PORTS.into_iter().find(|p| port_name(*p, proto) == name)
    }
}

fn selector_matches(sel: &Value, labels: &BTreeMap<String, String>) -> bool {
    if sel.is_null() {
        return true;
    }
    if let Some(m) = sel["matchLabels"].as_object() {
        for (k, v) in m {
            if labels.get(k).map(String::as_str) != v.as_str() {
                return false;
            }
        }
    }
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap();
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let have = labels.get(key).map(String::as_str);
        let ok = match e["operator"].as_str().unwrap() {
            "In" => have.is_some_and(|h| values.contains(&h)),
            "NotIn" => have.is_none_or(|h| !values.contains(&h)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            other => panic!("oracle: operator {other}"),
        };
        if !ok {
            return false;
        }
    }
    true
}

fn in_cidr(ip: Ipv4Addr, cidr: &str) -> bool {
    let (a, len) = cidr.split_once('/').unwrap();
    // An IPv6 network holds no IPv4 address.
    let Ok(a) = a.parse::<Ipv4Addr>() else {
        return false;
    };
    let len: u32 = len.parse().unwrap();
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    u32::from(ip) & mask == u32::from(a) & mask
}

fn peer_matches(peer: &Value, policy_ns: &str, other: &dyn End) -> bool {
    if let Some(b) = peer.get("ipBlock") {
        return in_cidr(other.ip(), b["cidr"].as_str().unwrap())
            && !b["except"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|e| in_cidr(other.ip(), e.as_str().unwrap()));
    }
    // A host-network pod is never a pod peer (only an ipBlock holds its node's address).
    if other.node_labels().is_some() {
        return false;
    }
    let ns_ok = match peer.get("namespaceSelector") {
        None => other.ns() == policy_ns,
        Some(sel) => selector_matches(sel, &other.ns_labels()),
    };
    let pod_ok = match peer.get("podSelector") {
        None => true,
        Some(sel) => selector_matches(sel, other.labels()),
    };
    ns_ok && pod_ok
}

fn port_matches(ports: &Value, receiver: &dyn End, proto: Proto, port: u16) -> bool {
    let Some(list) = ports.as_array().filter(|l| !l.is_empty()) else {
        return true;
    };
    list.iter().any(|p| {
        let pp = p["protocol"].as_str().unwrap_or("TCP");
        if pp != proto.name() {
            return false;
        }
        match &p["port"] {
            Value::Null => true,
            Value::Number(n) => {
                let first = n.as_u64().unwrap() as u16;
                let last = p["endPort"].as_u64().map_or(first, |e| e as u16);
                (first..=last).contains(&port)
            }
            // Named: resolved on the receiving pod.
            Value::String(name) => receiver.named_port(name, proto) == Some(port),
            other => panic!("oracle: port {other}"),
        }
    })
}

fn types(p: &Value) -> Vec<String> {
    match p["spec"]["policyTypes"].as_array() {
        Some(t) => t.iter().map(|v| v.as_str().unwrap().to_string()).collect(),
        None => {
            let mut t = vec!["Ingress".to_string()];
            if p["spec"].get("egress").is_some() {
                t.push("Egress".into());
            }
            t
        }
    }
}

/// The keys of a direction's rules and of their peers in a policy's JSON.
fn rule_keys(dir: &str) -> (&'static str, &'static str) {
    match dir {
        "Ingress" => ("ingress", "from"),
        _ => ("egress", "to"),
    }
}

/// Whether a NetworkPolicy isolates `pod` in `dir` and, if so, whether some rule allows
/// `other` (`None`: not isolated).
fn np_verdict(
    policies: &[Value],
    dir: &str,
    pod: &dyn End,
    other: &dyn End,
    proto: Proto,
    port: u16,
) -> Option<bool> {
    let (rules_key, peers_key) = rule_keys(dir);
    let selecting: Vec<&Value> = policies
        .iter()
        .filter(|p| p["kind"] == "NetworkPolicy")
        .filter(|p| p["metadata"]["namespace"] == pod.ns())
        .filter(|p| selector_matches(&p["spec"]["podSelector"], pod.labels()))
        .filter(|p| types(p).iter().any(|t| t == dir))
        .collect();
    if selecting.is_empty() {
        return None;
    }
    let receiver = if dir == "Ingress" { pod } else { other };
    Some(selecting.iter().any(|p| {
        p["spec"][rules_key]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| {
                let peers_ok = match r[peers_key].as_array().filter(|l| !l.is_empty()) {
                    None => true,
                    Some(peers) => peers.iter().any(|peer| peer_matches(peer, pod.ns(), other)),
                };
                peers_ok && port_matches(&r["ports"], receiver, proto, port)
            })
    }))
}

/// A ClusterNetworkPolicy's pods (a subject, or a `namespaces`/`pods` peer): whether `pod` is
/// among them.
fn cnp_pods_match(sel: &Value, pod: &dyn End) -> bool {
    if let Some(ns) = sel.get("namespaces") {
        return selector_matches(ns, &pod.ns_labels());
    }
    let p = &sel["pods"];
    selector_matches(&p["namespaceSelector"], &pod.ns_labels())
        && selector_matches(&p["podSelector"], pod.labels())
}

/// Whether a rule's `protocols` match `proto`/`port` on `receiver` (named ports are the
/// receiver's).
fn cnp_ports_match(protocols: &Value, receiver: &dyn End, proto: Proto, port: u16) -> bool {
    let Some(list) = protocols.as_array() else {
        return true;
    };
    list.iter().any(|p| {
        if let Some(name) = p["destinationNamedPort"].as_str() {
            return receiver.named_port(name, proto) == Some(port);
        }
        let key = match proto {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        };
        let Some(dp) = p.get(key).map(|v| &v["destinationPort"]) else {
            return false;
        };
        match (dp["number"].as_u64(), dp.get("range")) {
            (Some(n), _) => u64::from(port) == n,
            (None, Some(r)) => (r["start"].as_u64().unwrap()..=r["end"].as_u64().unwrap())
                .contains(&u64::from(port)),
            _ => panic!("oracle: destinationPort {dp}"),
        }
    })
}

/// What tier `tier`'s ClusterNetworkPolicies do with traffic of `pod` in `dir` with `other`:
/// the action of the first rule that matches (policies by priority, then name; rules in
/// order), `None` when none does.
fn cnp_tier(
    policies: &[Value],
    tier: &str,
    dir: &str,
    pod: &dyn End,
    other: &dyn End,
    proto: Proto,
    port: u16,
) -> Option<String> {
    let (rules_key, peers_key) = rule_keys(dir);
    let mut cnps: Vec<&Value> = policies
        .iter()
        .filter(|p| p["kind"] == "ClusterNetworkPolicy" && p["spec"]["tier"] == tier)
        .filter(|p| cnp_pods_match(&p["spec"]["subject"], pod))
        .collect();
    // Equal priorities: the API leaves their order open, and the agent interleaves them by
    // rule position (`flows::policy::cluster::ranks`); by name here. A case where the two
    // orders decide differently fails the table (never passes it wrongly): the cases avoid it.
    cnps.sort_by_key(|p| {
        (
            p["spec"]["priority"].as_u64().unwrap(),
            p["metadata"]["name"].as_str().unwrap().to_string(),
        )
    });
    let receiver = if dir == "Ingress" { pod } else { other };
    for p in cnps {
        for r in p["spec"][rules_key].as_array().into_iter().flatten() {
            let peer_ok = r[peers_key].as_array().unwrap().iter().any(|peer| {
                if let Some(nets) = peer["networks"].as_array() {
                    nets.iter()
                        .any(|n| in_cidr(other.ip(), n.as_str().unwrap()))
                } else if let Some(sel) = peer.get("nodes") {
                    other
                        .node_labels()
                        .is_some_and(|l| selector_matches(sel, l))
                } else {
                    // A host-network pod is never a pod peer.
                    other.node_labels().is_none() && cnp_pods_match(peer, other)
                }
            });
            if peer_ok && cnp_ports_match(&r["protocols"], receiver, proto, port) {
                return Some(r["action"].as_str().unwrap().to_string());
            }
        }
    }
    None
}

/// The verdict in `dir` at `pod`: the Admin tier, then NetworkPolicies (final for a pod they
/// isolate), then the Baseline tier, then allowed.
fn direction_allows(
    policies: &[Value],
    dir: &str,
    pod: &dyn End,
    other: &dyn End,
    proto: Proto,
    port: u16,
) -> bool {
    match cnp_tier(policies, "Admin", dir, pod, other, proto, port).as_deref() {
        Some("Accept") => return true,
        Some("Deny") => return false,
        _ => {}
    }
    if let Some(v) = np_verdict(policies, dir, pod, other, proto, port) {
        return v;
    }
    cnp_tier(policies, "Baseline", dir, pod, other, proto, port).as_deref() != Some("Deny")
}

fn oracle(policies: &[Value], src: &dyn End, dst: &dyn End, proto: Proto, port: u16) -> bool {
    direction_allows(policies, "Egress", src, dst, proto, port)
        && (dst.node_labels().is_some()
            || direction_allows(policies, "Ingress", dst, src, proto, port))
}

// ---------------------------------------------------------------------------------------------
// Probing.

type Table = BTreeMap<(String, String, Proto, u16), bool>;

/// Every probe of a truth table: each ordered pair of distinct pods × protocol × port.
fn probes<'p, 'a>(
    pods: &'p [TestPod<'a>],
) -> impl Iterator<Item = (&'p TestPod<'a>, &'p TestPod<'a>, Proto, u16)> {
    pods.iter()
        .flat_map(move |s| pods.iter().map(move |d| (s, d)))
        .filter(|(s, d)| s.label() != d.label())
        .flat_map(|(s, d)| {
            [Proto::Tcp, Proto::Udp]
                .into_iter()
                .flat_map(move |proto| PORTS.into_iter().map(move |port| (s, d, proto, port)))
        })
}

fn probe_all(pods: &[TestPod<'_>]) -> Table {
    let jobs: Vec<_> = probes(pods)
        .map(|(s, d, proto, port)| {
            let key = (s.label(), d.label(), proto, port);
            let netns = s.cni.ns.name().to_string();
            let dst = SocketAddrV4::new(d.ip, port);
            move || {
                let ok = match proto {
                    Proto::Tcp => probe::tcp_probe(&netns, dst, PROBE_TIMEOUT),
                    Proto::Udp => probe::udp_probe(&netns, dst, PROBE_TIMEOUT),
                };
                (key, ok)
            }
        })
        .collect();
    probe::parallel(jobs).into_iter().collect()
}

fn expected(pods: &[TestPod<'_>], policies: &[Value]) -> Table {
    probes(pods)
        .map(|(s, d, proto, port)| {
            (
                (s.label(), d.label(), proto, port),
                oracle(policies, s, d, proto, port),
            )
        })
        .collect()
}

fn differences(want: &Table, got: &Table) -> Vec<String> {
    want.iter()
        .filter(|(k, v)| got.get(*k) != Some(v))
        .map(|((s, d, proto, port), v)| {
            format!(
                "{s} -> {d} {}/{port}: expected {}, got {}",
                proto.name(),
                if *v { "allowed" } else { "blocked" },
                if *v { "blocked" } else { "allowed" }
            )
        })
        .collect()
}

/// Probes until the truth table is what the oracle says (or `CONVERGE` passes); returns the
/// time it took.
fn converge(case: &str, c: &Cluster, pods: &[TestPod<'_>], policies: &[Value]) -> Duration {
    converge_to(case, c, pods, &expected(pods, policies))
}

/// Probes until the truth table is `want` (or `CONVERGE` passes); returns the time it took.
fn converge_to(case: &str, c: &Cluster, pods: &[TestPod<'_>], want: &Table) -> Duration {
    let allowed = want.values().filter(|v| **v).count();
    let began = Instant::now();
    let mut last;
    loop {
        let got = probe_all(pods);
        last = differences(want, &got);
        if last.is_empty() {
            break;
        }
        if began.elapsed() > CONVERGE {
            // The destination nodes' conntrack and datapath flows for the first differences.
            let mut detail = Vec::new();
            for ((s, d, _, port), _) in want.iter().filter(|(k, v)| got.get(*k) != Some(v)).take(2)
            {
                let src = pods
                    .iter()
                    .find(|p| &p.label() == s)
                    .unwrap()
                    .ip
                    .to_string();
                let dst = pods.iter().find(|p| &p.label() == d).unwrap();
                let ip = dst.ip.to_string();
                let pick = |text: String| -> String {
                    text.lines()
                        .filter(|l| l.contains(&ip) && l.contains(&src))
                        .filter(|l| {
                            l.contains(&format!("={port}")) || l.contains(&format!("(dst={port}"))
                        })
                        .take(12)
                        .collect::<Vec<_>>()
                        .join("\n")
                };
                // What the switch says of the datapath flow that answered (a stale one?).
                let dp = c.appctl(dst.node, &["dpctl/dump-flows"]);
                if let Some(line) = dp.lines().find(|l| {
                    l.contains(&format!("src={src},dst={ip},proto=6"))
                        && l.contains(&format!("tcp(dst={port})"))
                }) {
                    let key = line.split(", packets:").next().unwrap_or(line);
                    detail.push(format!(
                        "--- datapath flow {key}\n--- its trace:\n{}",
                        tail(&c.appctl(dst.node, &["ofproto/trace", key]), 12)
                    ));
                    c.appctl(dst.node, &["revalidator/wait"]);
                    c.appctl(dst.node, &["revalidator/purge"]);
                    let src_pod = pods.iter().find(|p| &p.label() == s).unwrap();
                    detail.push(format!(
                        "--- after revalidator/purge the probe {}",
                        if probe::tcp_probe(
                            src_pod.cni.ns.name(),
                            SocketAddrV4::new(dst.ip, *port),
                            PROBE_TIMEOUT
                        ) {
                            "still passes"
                        } else {
                            "is blocked"
                        }
                    ));
                    detail.push(format!(
                        "--- after revalidator/wait:\n{}",
                        c.appctl(dst.node, &["dpctl/dump-flows"])
                            .lines()
                            .filter(|l| l.contains(&format!("src={src},dst={ip},proto=6")))
                            .collect::<Vec<_>>()
                            .join("\n")
                    ));
                }
                detail.push(format!(
                    "--- upcall/show:\n{}",
                    c.appctl(dst.node, &["upcall/show"])
                ));
                for node in 1..=2 {
                    detail.push(format!(
                        "--- node-{node} conntrack for {s} -> {d}:{port}:\n{}\n--- datapath flows:\n{}",
                        pick(c.appctl(node, &["dpctl/dump-conntrack"])),
                        pick(c.appctl(node, &["dpctl/dump-flows"])),
                    ));
                }
            }
            let logs: Vec<String> = (1..=2)
                .map(|i| {
                    format!(
                        "--- node-{i} log (tail):\n{}\n--- node-{i} tables 27/80:\n{}",
                        tail(&c.node(i).log(), 30),
                        c.node(i)
                            .flows()
                            .into_iter()
                            .filter(|f| f.contains("table=27") || f.contains("table=80"))
                            .collect::<Vec<_>>()
                            .join("\n")
                    )
                })
                .collect();
            panic!(
                "case {case:?}: {} of {} probes differ from the oracle after {:?}:\n{}\n{}\n{}",
                last.len(),
                want.len(),
                CONVERGE,
                last.join("\n"),
                detail.join("\n"),
                logs.join("\n")
            );
        }
    }
    let took = began.elapsed();
    eprintln!(
        "case {case:?}: truth table matches ({allowed} allowed, {} blocked of {}) after {:.1} s",
        want.len() - allowed,
        want.len(),
        took.as_secs_f64()
    );
    took
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn netpol(ns: &str, name: &str, spec: Value) -> Value {
    let mut v = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
           "metadata": {"name": name, "namespace": ns}});
    v["spec"] = spec;
    v
}

/// Replaces every NetworkPolicy and ClusterNetworkPolicy in the API with `policies`.
fn set_policies(plane: &KubeControlPlane, current: &mut Vec<Value>, policies: Vec<Value>) {
    for p in current.iter() {
        let name = p["metadata"]["name"].as_str().unwrap();
        if policies
            .iter()
            .any(|q| q["metadata"] == p["metadata"] && q["kind"] == p["kind"])
        {
            continue;
        }
        if p["kind"] == "ClusterNetworkPolicy" {
            plane.fake.delete(
                "policy.networking.k8s.io",
                "clusternetworkpolicies",
                None,
                name,
            );
        } else {
            let ns = p["metadata"]["namespace"].as_str().unwrap();
            plane
                .fake
                .delete("networking.k8s.io", "networkpolicies", Some(ns), name);
        }
    }
    for p in &policies {
        plane.fake.put(p.clone()).expect("policy");
    }
    *current = policies;
}

/// `sdnctl trace` and `sdnctl network-policies` name the policy that allowed or dropped a
/// packet (case "x/a from x/b on TCP 80 only": x/a and x/c are on node 1, x/b on node 2).
fn check_trace_names_policies(c: &Cluster, pods: &[TestPod<'_>], vni: u32) {
    let n1 = c.node(1);
    let pod = |l: &str| pods.iter().find(|p| p.label() == l).unwrap();
    assert_eq!(
        (pod("x/a").node, pod("x/c").node, pod("x/b").node),
        (1, 1, 2)
    );
    // x/c -> x/a: x/a is isolated and no rule allows x/c.
    let t = n1.trace("x/c", "x/a", "tcp/80", None);
    assert_eq!(t["outcome"], "dropped", "{t:#}");
    let verdict = t["verdict"].as_str().unwrap();
    assert!(
        verdict.contains("isolated by NetworkPolicy x/a-from-b") && verdict.contains("x/a"),
        "{verdict}"
    );
    // x/b (node 2) -> x/a, as node 1 sees it arrive over VXLAN: allowed by the rule.
    let t = n1.trace(&pod("x/b").ip.to_string(), "x/a", "tcp/80", Some(vni));
    assert_eq!(t["outcome"], "delivered", "{t:#}");
    let said: Vec<String> = t["policy"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert!(
        said.iter()
            .any(|l| l.contains("allowed by NetworkPolicy x/a-from-b ingress rule 0")),
        "{said:?}\n{t:#}"
    );
    // On port 81 the same source is dropped.
    let t = n1.trace(&pod("x/b").ip.to_string(), "x/a", "tcp/81", Some(vni));
    assert_eq!(t["outcome"], "dropped", "{t:#}");
    // x/c is not isolated for egress, and the sdnctl view lists what is applied.
    let out = n1.sdnctl_api(&["network-policies"]);
    assert!(out.status.success(), "{out:?}");
    let out = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.contains("1 NetworkPolicies in the cluster, 1 select pods of this node"),
        "{out}"
    );
    assert!(out.contains("x/a-from-b ingress rule 0"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("x/a ") && l.contains("x/a-from-b")),
        "{out}"
    );
    let m = n1.metrics();
    assert_eq!(m.get("sdn_network_policies"), Some(&1.0), "{m:?}");
    assert_eq!(m.get("sdn_network_policies_active"), Some(&1.0));
    assert_eq!(m.get("sdn_network_policy_isolated_pods"), Some(&1.0));
    // One rule with x/a as target, x/b as peer, one port: 1 + 1 + 1 + 1 conjunction rows and
    // the isolation row.
    assert_eq!(
        m.get("sdn_network_policy_flows{kind=\"target\"}"),
        Some(&2.0),
        "{m:?}"
    );
    assert_eq!(
        m.get("sdn_network_policy_flows{kind=\"shared\"}"),
        Some(&3.0),
        "{m:?}"
    );
}

fn start_servers(pods: &[TestPod<'_>]) -> (Vec<probe::EchoServer>, Vec<probe::UdpEchoServer>) {
    let mut tcp = Vec::new();
    let mut udp = Vec::new();
    for p in pods {
        for port in PORTS {
            tcp.push(probe::tcp_echo_server(p.cni.ns.name(), port));
            udp.push(probe::udp_echo_server(p.cni.ns.name(), port));
        }
    }
    (tcp, udp)
}

/// A Service whose endpoint x/a is refused by x's ingress policy (same node as the client y/b):
/// the refused connection leaves nothing x/a can answer through in the Service's name (table 80
/// commits only what it allows), for TCP (the SYN-ACK) and UDP.
fn check_forged_service_replies(c: &Cluster, pods: &[TestPod<'_>]) {
    use sdn_tests::kubeproxy::{self, Proto as KProto, Service};
    let pod = |label: &str| pods.iter().find(|p| p.label() == label).unwrap();
    let (client, endpoint) = (pod("y/b"), pod("x/a"));
    assert_eq!(
        client.node, endpoint.node,
        "the layout puts y/b and x/a on one node"
    );
    let node = c.node(client.node);
    let (svc_t, svc_u) = (Ipv4Addr::new(172, 30, 2, 10), Ipv4Addr::new(172, 30, 2, 11));
    // Ports nothing listens on in x/a, so the forger can bind them.
    kubeproxy::install(
        node.ovs.ns(),
        &[
            Service {
                name: "np-t".into(),
                cluster_ip: svc_t,
                port: 80,
                proto: KProto::Tcp,
                endpoints: vec![(endpoint.ip, 9090)],
                node_port: None,
                external_local: false,
            },
            Service {
                name: "np-u".into(),
                cluster_ip: svc_u,
                port: 53,
                proto: KProto::Udp,
                endpoints: vec![(endpoint.ip, 5353)],
                node_port: None,
                external_local: false,
            },
        ],
        "10.128.0.0/14",
    );
    for (svc, port, proto, endpoint_port) in [
        (svc_t, 80, KProto::Tcp, 9090),
        (svc_u, 53, KProto::Udp, 5353),
    ] {
        assert!(
            !probe::forged_service_reply(
                client.cni.ns.name(),
                SocketAddrV4::new(svc, port),
                endpoint.cni.ns.name(),
                SocketAddrV4::new(endpoint.ip, endpoint_port),
                proto,
                PROBE_TIMEOUT,
            ),
            "x/a, refused by x's ingress policy, answered y/b in the name of {svc}:{port} \
             ({proto:?}); flows:\n{}",
            node.ovs.ofctl(&["dump-flows", "br0"])
        );
    }
}

/// The real pods: namespaces `x`, `y`, `z` with pods `a`, `b`, `c` each, spread over nodes 1
/// and 2; the Pod objects first (the scheduler's), then the runtime's ADDs, then the status the
/// kubelet reports.
fn real_pods<'c>(c: &'c Cluster, plane: &KubeControlPlane) -> Vec<TestPod<'c>> {
    let fake = &plane.fake;
    for ns in NAMESPACES {
        fake.put(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"ns": ns}}}))
            .unwrap();
    }
    // The pods: objects first (the scheduler's), then the runtime's ADDs, then the status the
    // kubelet reports.
    let mut layout = Vec::new();
    for (i, ns) in NAMESPACES.iter().enumerate() {
        for (j, name) in PODS.iter().enumerate() {
            layout.push((*ns, *name, 1 + (i + j) % 2));
        }
    }
    for (ns, name, node) in &layout {
        fake.put(pod_object(ns, name, *node, None)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    let pods: Vec<TestPod<'c>> = layout
        .iter()
        .map(|(ns, name, node)| {
            let cni = c.node(*node).pod(ns, name);
            let ip: Ipv4Addr = cni.ip.parse().unwrap();
            fake.put(pod_object(ns, name, *node, Some(ip))).unwrap();
            TestPod {
                ns,
                name,
                node: *node,
                labels: BTreeMap::from([("pod".to_string(), name.to_string())]),
                cni,
                ip,
            }
        })
        .collect();
    eprintln!(
        "pods: {}",
        pods.iter()
            .map(|p| format!("{}@node-{} {}", p.label(), p.node, p.ip))
            .collect::<Vec<_>>()
            .join(", ")
    );
    pods
}

/// The policy cases of the truth tables, in order; `y_b` is pod y/b's address (an ipBlock
/// except names it).
fn policy_cases(y_b: Ipv4Addr) -> Vec<(&'static str, Vec<Value>)> {
    vec![
        (
            "default deny ingress in x",
            vec![netpol("x", "deny", json!({"podSelector": {}}))],
        ),
        (
            "x/a from x/b on TCP 80 only",
            vec![netpol(
                "x",
                "a-from-b",
                json!({
                "podSelector": {"matchLabels": {"pod": "a"}},
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}],
                             "ports": [{"port": 80, "protocol": "TCP"}]}]}),
            )],
        ),
        (
            "x from namespace y on port 81 (TCP and UDP)",
            vec![netpol(
                "x",
                "from-y",
                json!({
                "podSelector": {},
                "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}],
                             "ports": [{"port": 81, "protocol": "TCP"}, {"port": 81, "protocol": "UDP"}]}]}),
            )],
        ),
        (
            "egress of y: default deny, then UDP to z",
            vec![
                netpol(
                    "y",
                    "deny-egress",
                    json!({"podSelector": {}, "policyTypes": ["Egress"]}),
                ),
                netpol(
                    "y",
                    "udp-to-z",
                    json!({
                    "podSelector": {}, "policyTypes": ["Egress"],
                    "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"ns": "z"}}}],
                                "ports": [{"protocol": "UDP"}]}]}),
                ),
            ],
        ),
        (
            "z from pods c of namespaces y and z (namespace and pod selector together)",
            vec![netpol(
                "z",
                "from-c",
                json!({
                "podSelector": {"matchExpressions": [{"key": "pod", "operator": "NotIn", "values": ["a"]}]},
                "ingress": [{"from": [{
                    "namespaceSelector": {"matchExpressions": [{"key": "ns", "operator": "In", "values": ["y", "z"]}]},
                    "podSelector": {"matchLabels": {"pod": "c"}}}]}]}),
            )],
        ),
        (
            "y from the cluster network except y/b (ipBlock with except)",
            vec![netpol(
                "y",
                "ipblock",
                json!({
                "podSelector": {},
                "ingress": [{"from": [{"ipBlock": {"cidr": "10.128.0.0/14", "except": [format!("{y_b}/32")]}}]}]}),
            )],
        ),
        (
            "named ports: x on serve-81-udp and serve-80-tcp",
            vec![netpol(
                "x",
                "named",
                json!({
                "podSelector": {},
                "ingress": [{"ports": [{"port": "serve-81-udp", "protocol": "UDP"}, {"port": "serve-80-tcp"}]}]}),
            )],
        ),
        (
            "named ports on egress: z to serve-81-tcp only",
            vec![netpol(
                "z",
                "named-egress",
                json!({
                "podSelector": {}, "policyTypes": ["Egress"],
                "egress": [{"ports": [{"port": "serve-81-tcp"}]}]}),
            )],
        ),
        (
            "port range: y from z on TCP 80-81",
            vec![netpol(
                "y",
                "range",
                json!({
                "podSelector": {},
                "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "z"}}}],
                             "ports": [{"port": 80, "endPort": 81, "protocol": "TCP"}]}]}),
            )],
        ),
        (
            "several policies on one pod (union) and both directions",
            vec![
                netpol(
                    "x",
                    "a-in-80",
                    json!({
                    "podSelector": {"matchLabels": {"pod": "a"}},
                    "ingress": [{"ports": [{"port": 80}]}]}),
                ),
                netpol(
                    "x",
                    "a-in-from-z",
                    json!({
                    "podSelector": {"matchLabels": {"pod": "a"}},
                    "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "z"}}}]}]}),
                ),
                netpol(
                    "x",
                    "all-egress-to-y",
                    json!({
                    "podSelector": {}, "policyTypes": ["Egress"],
                    "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}]}),
                ),
            ],
        ),
        (
            "deny everything in every namespace",
            NAMESPACES
                .iter()
                .map(|ns| {
                    netpol(
                        ns,
                        "deny-all",
                        json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
                    )
                })
                .collect(),
        ),
        (
            "allow everything (empty rules) over a deny",
            vec![
                netpol("x", "deny", json!({"podSelector": {}})),
                netpol(
                    "x",
                    "allow-all",
                    json!({"podSelector": {}, "ingress": [{}]}),
                ),
            ],
        ),
    ]
}

#[test]
fn truth_tables_on_two_nodes() {
    let (c, plane) = Cluster::start_kubernetes(
        2,
        &NodeOptions {
            mode: "networkpolicy",
            ..NodeOptions::default()
        },
    );
    let fake = &plane.fake;
    let pods = real_pods(&c, &plane);
    let _servers = start_servers(&pods);
    let ip_of = |label: &str| pods.iter().find(|p| p.label() == label).unwrap().ip;

    let mut current = Vec::new();
    converge("no policies", &c, &pods, &current);

    let cases = policy_cases(ip_of("y/b"));
    let mut timings = Vec::new();
    // NP_ONLY=a,b runs only the cases whose names contain one of those words (debugging).
    let only: Vec<String> = std::env::var("NP_ONLY")
        .map(|v| v.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    for (case, policies) in &cases {
        if !only.is_empty() && !only.iter().any(|w| case.contains(w.as_str())) {
            continue;
        }
        set_policies(&plane, &mut current, policies.clone());
        let took = converge(case, &c, &pods, &current);
        timings.push((case.to_string(), took));
        if *case == "default deny ingress in x" {
            check_forged_service_replies(&c, &pods);
        }
        if case.starts_with("x/a from x/b") {
            let vni = fake
                .get("network.openshift.io", "netnamespaces", None, "x")
                .and_then(|n| n["netid"].as_u64())
                .expect("NetNamespace x") as u32;
            check_trace_names_policies(&c, &pods, vni);
        }
    }

    // The node reaches isolated pods (kubelet's probes) under deny-all.
    set_policies(&plane, &mut current, cases[10].1.clone());
    converge("deny everything again", &c, &pods, &current);
    for p in &pods {
        let ns = c.node(p.node).ovs.netns().to_string();
        let dst = SocketAddrV4::new(p.ip, 80);
        assert!(
            probe::tcp_probe(&ns, dst, PROBE_TIMEOUT),
            "node-{} cannot reach its isolated pod {} on TCP 80",
            p.node,
            p.label()
        );
    }

    // A restart keeps every row in place: nothing added or deleted, and the table holds.
    for i in 1..=2 {
        c.node(i).restart_unchanged();
    }
    converge("deny everything after restarts", &c, &pods, &current);

    // A restart while the list of every pod of the cluster is slow (a large cluster): the
    // agent serves at once (this node's own pods come from their own small list), an ADD
    // works, the start-up reconcile waits for the peers, and meanwhile the rows on the bridge
    // keep the truth table (peers from y allowed).
    set_policies(&plane, &mut current, cases[2].1.clone());
    converge(
        "x from namespace y before a slow restart",
        &c,
        &pods,
        &current,
    );
    let node = c.node(1);
    let reconciles = || node.log().matches("br0 reconciled").count();
    let before = reconciles();
    node.stop_agent(libc::SIGTERM);
    fake.hold_lists("pods");
    node.start_agent_serving();
    fake.put(pod_object("x", "late", 1, None)).unwrap();
    let extra = node.pod("x", "late");
    assert!(
        extra.ip.parse::<Ipv4Addr>().is_ok(),
        "an ADD while the peers are listed"
    );
    extra.delete();
    fake.delete("", "pods", Some("x"), "late");
    converge(
        "x from namespace y while the peers are listed",
        &c,
        &pods,
        &current,
    );
    assert_eq!(
        reconciles(),
        before,
        "the start-up reconcile ran before the peers were listed:\n{}",
        tail(&node.log(), 30)
    );
    fake.release_lists("pods");
    assert!(
        sdn_tests::harness::wait_until(Duration::from_secs(30), || reconciles() > before),
        "no reconcile after the peers were listed:\n{}",
        tail(&node.log(), 30)
    );
    let line = node.last_reconcile();
    assert!(
        line.contains("added=0") && line.contains("deleted=0"),
        "the slow restart changed flows: {line}"
    );
    converge(
        "x from namespace y after the slow restart",
        &c,
        &pods,
        &current,
    );

    // Back to no policy: everything open again.
    set_policies(&plane, &mut current, vec![]);
    converge("policies removed", &c, &pods, &current);

    // A policy with a value the agent cannot apply (the fake API server does not validate) is
    // refused whole, said so, and fails closed: its unreadable selector selects every pod of
    // its namespace, isolated for ingress (the direction it names by default), nothing allowed.
    plane
        .fake
        .put(netpol(
            "x",
            "bad",
            json!({"podSelector": {"matchExpressions": [
            {"key": "pod", "operator": "Near", "values": ["a"]}]}}),
        ))
        .unwrap();
    let said = sdn_tests::harness::wait_until(Duration::from_secs(10), || {
        let out = c.node(1).sdnctl_api(&["network-policies"]);
        String::from_utf8_lossy(&out.stdout).contains("NOT APPLIED x/bad")
    });
    let out = c.node(1).sdnctl_api(&["network-policies"]);
    let out = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(said, "{out}");
    assert!(
        out.contains("spec.podSelector.matchExpressions[0].operator") && out.contains("\"Near\""),
        "{out}"
    );
    assert!(out.contains("fails closed"), "{out}");
    converge(
        "a policy that cannot be applied",
        &c,
        &pods,
        &[netpol("x", "bad", json!({"podSelector": {}}))],
    );
    for (case, took) in timings {
        eprintln!("{:>5.1} s  {case}", took.as_secs_f64());
    }
}

/// Rows of table 80 on `node` that name `ip` as a source (a peer's address in a policy's
/// address set).
fn peer_rows(c: &Cluster, node: usize, ip: Ipv4Addr) -> usize {
    c.node(node)
        .ovs
        .ofctl(&[
            "--no-stats",
            "dump-flows",
            "br0",
            &format!("table=80,ip,nw_src={ip}"),
        ])
        .lines()
        .filter(|l| l.contains("table=80"))
        .count()
}

/// Correct at scale, not only fast: the same real pods and truth tables, while the cluster
/// around the two real nodes has 5,000 more nodes, 5,000 namespaces, 150,000 pods and 10,000
/// NetworkPolicies (`sdn_tests::simulated`). Each agent holds every remote node's rows and
/// every pod as a peer; the truth tables of the real pods match the oracle, a policy that
/// names a simulated namespace puts exactly that namespace's 30 addresses in the rows, and a
/// restart changes no flow.
#[test]
fn truth_tables_in_a_cluster_of_5000_nodes() {
    let _large = sdn_tests::harness::one_large_cluster_at_a_time();
    use sdn_tests::simulated::{self, Size};
    let size = Size {
        nodes: 5000,
        namespaces: 5000,
        pods_per_namespace: 30,
        policies: true,
    };
    // The agents start in the large cluster (the benchmark grows one around a running agent).
    let mut sim = None;
    let (c, plane) = Cluster::start_kubernetes_with(
        2,
        &NodeOptions {
            mode: "networkpolicy",
            // Room for 5,002 node subnets.
            cluster_network: "10.0.0.0/8,8".into(),
            ..NodeOptions::default()
        },
        |plane| {
            sim = Some(simulated::simulate(
                &plane.fake,
                size,
                Duration::from_secs(300),
            ))
        },
    );
    let sim = sim.expect("simulated");
    let began = Instant::now();
    simulated::assert_every_remote_row(&c, size, Duration::from_secs(600));
    eprintln!(
        "both agents hold the rows of {} remote nodes {:.1} s after the cluster was built",
        size.nodes + 1,
        began.elapsed().as_secs_f64()
    );
    let pods = real_pods(&c, &plane);
    let _servers = start_servers(&pods);
    let mut current = Vec::new();
    converge("no policies, 5,000 nodes", &c, &pods, &current);
    // Default deny, namespace peers on ports, egress: the cases of the two-node test.
    let y_b = pods.iter().find(|p| p.label() == "y/b").unwrap().ip;
    for (case, policies) in policy_cases(y_b).into_iter().take(4) {
        set_policies(&plane, &mut current, policies);
        converge(&format!("{case}, 5,000 nodes"), &c, &pods, &current);
    }

    // A policy of x that names the `role: web` pods of one simulated namespace: their addresses
    // (on simulated nodes) are peers in x's rows on both real nodes, no other simulated pod is,
    // and the real pods are refused (none is in that namespace). (A namespace selector alone
    // would match the namespace's VNID in one row, pipeline.md.)
    let named = simulated::namespace(7);
    set_policies(
        &plane,
        &mut current,
        vec![netpol(
            "x",
            "from-simulated",
            json!({"podSelector": {},
                   "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {
                       "kubernetes.io/metadata.name": named}},
                       "podSelector": {"matchLabels": {"role": "web"}}}]}]}),
        )],
    );
    converge(
        "x from one simulated namespace, 5,000 nodes",
        &c,
        &pods,
        &current,
    );
    // The simulated pods' roles go web, db, cache by index.
    let web = (0..size.pods_per_namespace).step_by(3);
    let peers_in = sdn_tests::harness::wait_until(Duration::from_secs(30), || {
        (1..=2).all(|n| web.clone().all(|j| peer_rows(&c, n, sim.address(7, j)) > 0))
    });
    assert!(
        peers_in,
        "the simulated namespace's web pods are not peers in x's rows:\n{}",
        c.node(1)
            .ovs
            .ofctl(&["--no-stats", "dump-flows", "br0", "table=80"])
    );
    for n in 1..=2 {
        for other in [
            sim.address(7, 1),
            sim.address(6, 0),
            sim.address(8, 0),
            sim.address(4999, 27),
        ] {
            assert_eq!(
                peer_rows(&c, n, other),
                0,
                "node-{n} has a peer row for {other}, which no policy of its pods names"
            );
        }
    }

    // A restart in a cluster of 5,000 nodes and 150,000 pods changes no flow.
    for i in 1..=2 {
        let node = c.node(i);
        node.stop_agent(libc::SIGTERM);
        let t = Instant::now();
        node.start_agent();
        let line = node.last_reconcile();
        eprintln!(
            "node-{i} restarted and reconciled in {:.1} s: {line}",
            t.elapsed().as_secs_f64()
        );
        assert!(
            line.contains("added=0") && line.contains("deleted=0"),
            "node-{i} restart changed flows: {line}"
        );
    }
    converge("after restarts, 5,000 nodes", &c, &pods, &current);
}

fn cnp(name: &str, tier: &str, priority: u32, spec: Value) -> Value {
    let mut v = json!({"apiVersion": "policy.networking.k8s.io/v1alpha2",
        "kind": "ClusterNetworkPolicy", "metadata": {"name": name}});
    v["spec"] = spec;
    v["spec"]["tier"] = json!(tier);
    v["spec"]["priority"] = json!(priority);
    v
}

fn ns_sel(ns: &str) -> Value {
    json!({"matchLabels": {"kubernetes.io/metadata.name": ns}})
}

/// The cases of the cluster policies' truth tables: each tier around NetworkPolicies, on both
/// nodes (`x_a`: pod x/a's address, for a `networks` peer).
fn cluster_policy_cases(x_a: Ipv4Addr) -> Vec<(&'static str, Vec<Value>)> {
    let allow_all_into_x = netpol("x", "all-in", json!({"podSelector": {}, "ingress": [{}]}));
    let deny_all_into_x = netpol("x", "deny-in", json!({"podSelector": {}}));
    vec![
        (
            "Admin Deny from y on TCP 80 over a NetworkPolicy that allows everything into x",
            vec![
                allow_all_into_x.clone(),
                cnp(
                    "no-y-web",
                    "Admin",
                    10,
                    json!({"subject": {"namespaces": ns_sel("x")},
                    "ingress": [{"action": "Deny", "from": [{"namespaces": ns_sel("y")}],
                                 "protocols": [{"tcp": {"destinationPort": {"number": 80}}}]}]}),
                ),
            ],
        ),
        (
            "Admin Accept from z into x, where a NetworkPolicy denies everything",
            vec![
                deny_all_into_x.clone(),
                cnp(
                    "z-in",
                    "Admin",
                    10,
                    json!({"subject": {"namespaces": ns_sel("x")},
                    "ingress": [{"action": "Accept", "from": [{"namespaces": ns_sel("z")}]}]}),
                ),
            ],
        ),
        (
            "Admin Pass from z to the NetworkPolicy tier, then Admin Deny for everyone else",
            vec![
                deny_all_into_x.clone(),
                cnp(
                    "pass-z",
                    "Admin",
                    5,
                    json!({"subject": {"namespaces": ns_sel("x")},
                    "ingress": [{"action": "Pass", "from": [{"namespaces": ns_sel("z")}]}]}),
                ),
                cnp(
                    "deny-rest",
                    "Admin",
                    10,
                    json!({"subject": {"namespaces": ns_sel("x")},
                    "ingress": [{"action": "Deny", "from": [{"namespaces": {}}]}]}),
                ),
                netpol(
                    "x",
                    "from-z-81",
                    json!({"podSelector": {},
                    "ingress": [{"from": [{"namespaceSelector": ns_sel("z")}],
                                 "ports": [{"port": 81, "protocol": "TCP"}]}]}),
                ),
            ],
        ),
        (
            "Baseline Deny from y, overridden in z by a NetworkPolicy that allows everything",
            vec![
                netpol("z", "all-in", json!({"podSelector": {}, "ingress": [{}]})),
                cnp(
                    "default",
                    "Baseline",
                    0,
                    json!({"subject": {"namespaces": {}},
                    "ingress": [{"action": "Deny", "from": [{"namespaces": ns_sel("y")}]}]}),
                ),
            ],
        ),
        (
            "Admin egress Deny from y to x/a's address (a networks peer), rules in order",
            vec![cnp(
                "no-x-a",
                "Admin",
                3,
                json!({"subject": {"namespaces": ns_sel("y")},
                "egress": [
                    {"action": "Accept", "to": [{"networks": [format!("{x_a}/32")]}],
                     "protocols": [{"udp": {"destinationPort": {"number": 81}}}]},
                    {"action": "Deny", "to": [{"networks": [format!("{x_a}/32")]}]}]}),
            )],
        ),
        (
            "Admin Accept of a named port from y, every other port denied",
            vec![cnp(
                "dns-only",
                "Admin",
                1,
                json!({
                "subject": {"pods": {"namespaceSelector": ns_sel("x"),
                                     "podSelector": {"matchLabels": {"pod": "b"}}}},
                "ingress": [
                    {"name": "named", "action": "Accept", "from": [{"namespaces": ns_sel("y")}],
                     "protocols": [{"destinationNamedPort": port_name(81, Proto::Udp)}]},
                    {"name": "rest", "action": "Deny", "from": [{"namespaces": ns_sel("y")}]}]}),
            )],
        ),
    ]
}

/// ClusterNetworkPolicies (`policy.networking.k8s.io/v1alpha2`) in networkpolicy mode, on two
/// nodes: for each case the whole truth table (288 probes) matches the oracle, which reads the
/// tiers' semantics from the API's words (Admin, then NetworkPolicies, then Baseline).
#[test]
fn cluster_policies_truth_tables_on_two_nodes() {
    let (c, plane) = Cluster::start_kubernetes(
        2,
        &NodeOptions {
            mode: "networkpolicy",
            ..NodeOptions::default()
        },
    );
    let pods = real_pods(&c, &plane);
    let _servers = start_servers(&pods);
    let ip_of = |label: &str| pods.iter().find(|p| p.label() == label).unwrap().ip;
    let mut current = Vec::new();
    converge("no policies", &c, &pods, &current);
    for (case, policies) in cluster_policy_cases(ip_of("x/a")) {
        set_policies(&plane, &mut current, policies);
        converge(case, &c, &pods, &current);
        if case.starts_with("Admin Deny from y") {
            check_trace_names_cluster_policy(&c, &plane, &pods);
        }
    }
    // Every policy gone: everything allowed again.
    set_policies(&plane, &mut current, Vec::new());
    converge("no policies again", &c, &pods, &current);
}

/// `sdnctl trace` names the ClusterNetworkPolicy, its tier and the rule that dropped a packet
/// (case "Admin Deny from y on TCP 80 ..."), and the NetworkPolicy that allows what it passes.
fn check_trace_names_cluster_policy(c: &Cluster, plane: &KubeControlPlane, pods: &[TestPod<'_>]) {
    let dst = pods
        .iter()
        .find(|p| p.ns == "x" && p.node == 1)
        .expect("a pod of x on node 1");
    let src = pods.iter().find(|p| p.ns == "y").unwrap();
    let vni = plane
        .fake
        .get("network.openshift.io", "netnamespaces", None, "y")
        .and_then(|n| n["netid"].as_u64())
        .expect("NetNamespace y") as u32;
    let (from, vni) = if src.node == 1 {
        (src.label(), None)
    } else {
        (src.ip.to_string(), Some(vni))
    };
    let t = c.node(1).trace(&from, &dst.label(), "tcp/80", vni);
    assert_eq!(t["outcome"], "dropped", "{t:#}");
    let said = t.to_string();
    assert!(
        said.contains("dropped by ClusterNetworkPolicy no-y-web (Admin tier, priority 10) ingress rule 0 (Deny)"),
        "{t:#}"
    );
    // Port 81 passes the Admin tier and the NetworkPolicy allows it.
    let t = c.node(1).trace(&from, &dst.label(), "tcp/81", vni);
    assert_eq!(t["outcome"], "delivered", "{t:#}");
    assert!(t.to_string().contains("NetworkPolicy x/all-in"), "{t:#}");
    // sdnctl lists it, the metrics count it.
    let out = c.node(1).sdnctl_api(&["network-policies"]);
    assert!(out.status.success(), "{out:?}");
    let out = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.contains("1 ClusterNetworkPolicies in the cluster, 1 with rows for pods of this node")
            && out.contains("  no-y-web (Admin tier, priority 10)"),
        "{out}"
    );
    let m = c.node(1).metrics();
    assert_eq!(m.get("sdn_cluster_network_policies"), Some(&1.0), "{m:?}");
    assert_eq!(m.get("sdn_cluster_network_policies_active"), Some(&1.0));
}
