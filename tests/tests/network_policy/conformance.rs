//! The upstream ClusterNetworkPolicy conformance suite (network-policy-api's `conformance/`,
//! ported as data in `sdn_tests::cnp_conformance`), replayed on real OVS in networkpolicy mode:
//! two nodes in Kubernetes mode (the fake API server, the real controller and agents), the base
//! fixture's pods (each house's StatefulSet: `-0` on node 1, `-1` on node 2, labelled and with
//! the named container ports of the manifest) serving what their agnhost containers serve; for
//! each test its manifest applied, each sub-test's changes made as upstream makes them, and its
//! probes checked as upstream's `PokeServer` does: retried every 500 ms for up to 10 s until the
//! expectation holds, then confirmed once more. The test's objects are deleted after it.
//!
//! The host-network `centaur` pods (the servers of the `nodes`-peer tests) serve in their
//! node's network namespace on the `HostNetworkPorts`, their Pod objects' address the node's;
//! the Node objects carry the labels the kubelet gives them (`kubernetes.io/os: linux` is what
//! the `nodes` peers select).
//!
//! Beyond upstream's own probes, each step's whole truth table: every ordered pair of the
//! fixture's pod-network pods, and each of them to the host-network servers, on every TCP and
//! UDP port the server serves, against an oracle that reads the live objects (policies,
//! namespace and node labels) with the API's semantics (the `network_policy` oracle, shared
//! with the NetworkPolicy truth tables). Host-network pods are servers only: on their own node
//! the node's traffic always reaches its pods (pipeline.md), and across nodes their
//! connections are not in the table (upstream probes none).
//!
//! Skipped, and counted in the output: SCTP probes. This machine's kernel has no SCTP sockets,
//! so nothing can serve or connect SCTP here (the SCTP rows themselves are checked by the
//! `flows` unit tests). Their tests' TCP and UDP probes run.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};

use sdn_tests::cluster::underlay_ip;
use sdn_tests::cnp_conformance::{self as conf, Change, Port, Proto as CProto};
use sdn_tests::fakeapi::FakeApi;

use super::*;

const GROUP: &str = "policy.networking.k8s.io";
const PLURAL: &str = "clusternetworkpolicies";
/// The suite's `HostNetworkPorts`, below Linux's ephemeral range (32768 and up): upstream's
/// defaults (34345..) lie in it, and a node's own connections (its agent's watches) may hold
/// one of them, so the host-network server cannot listen there. Upstream's suite takes the
/// range as an option.
const HOST_PORTS: [u16; 8] = [30345, 30346, 30347, 30348, 30349, 30350, 30351, 30352];
/// How long a probe is retried until its expectation holds (upstream's 10 s).
const EXPECT_WITHIN: Duration = Duration::from_secs(10);
/// One connection attempt (upstream's agnhost connect times out after 3 s).
const ATTEMPT: Duration = Duration::from_millis(800);

/// A fixture pod: its runtime pod and address.
struct FixturePod<'c> {
    cni: CniPod<'c>,
    ip: Ipv4Addr,
}

/// A fixture pod as the oracle reads it, from the live objects.
struct OraclePod {
    ns: String,
    name: String,
    ns_labels: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
    ip: Ipv4Addr,
    /// Its container ports: name, protocol, number.
    ports: Vec<(String, String, u16)>,
    /// What it serves over TCP and UDP (what its containers' commands start).
    serves: Vec<(Proto, u16)>,
    /// A host-network pod's node labels.
    node_labels: Option<BTreeMap<String, String>>,
}

impl End for OraclePod {
    fn ns(&self) -> &str {
        &self.ns
    }
    fn ns_labels(&self) -> BTreeMap<String, String> {
        self.ns_labels.clone()
    }
    fn labels(&self) -> &BTreeMap<String, String> {
        &self.labels
    }
    fn ip(&self) -> Ipv4Addr {
        self.ip
    }
    fn named_port(&self, name: &str, proto: Proto) -> Option<u16> {
        self.ports
            .iter()
            .find(|(n, p, _)| n == name && p == proto.name())
            .map(|(_, _, port)| *port)
    }
    fn node_labels(&self) -> Option<&BTreeMap<String, String>> {
        self.node_labels.as_ref()
    }
}

/// Labels of a JSON object.
fn labels_of(o: &Value) -> BTreeMap<String, String> {
    o["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect()
}

/// What each namespace's StatefulSet serves over TCP and UDP (its agnhost commands, as the
/// fixture starts its servers; declared container ports are fewer).
type Served = BTreeMap<String, Vec<(Proto, u16)>>;

fn served_by_namespace() -> Served {
    conf::objects_with("manifests.yaml", &HOST_PORTS)
        .iter()
        .filter(|o| o["kind"] == "StatefulSet")
        .map(|sts| {
            let containers = sts["spec"]["template"]["spec"]["containers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let serves = containers
                .iter()
                .flat_map(conf::served_by)
                .filter_map(|(proto, port)| match proto {
                    CProto::Tcp => Some((Proto::Tcp, port)),
                    CProto::Udp => Some((Proto::Udp, port)),
                    CProto::Sctp => None,
                })
                .collect();
            (
                sts["metadata"]["namespace"].as_str().unwrap().to_string(),
                serves,
            )
        })
        .collect()
}

/// Every fixture pod as the oracle reads it now: its Pod object, its namespace's and (for a
/// host-network pod) its node's labels, as the API server has them.
fn oracle_pods(fake: &FakeApi, served: &Served) -> Vec<OraclePod> {
    fake.list("pods")
        .into_iter()
        .filter(|p| {
            p["metadata"]["namespace"]
                .as_str()
                .is_some_and(|n| n.starts_with("network-policy-conformance-"))
        })
        .map(|p| {
            let ns = p["metadata"]["namespace"].as_str().unwrap().to_string();
            let namespace = fake.get("", "namespaces", None, &ns).unwrap();
            let containers = p["spec"]["containers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let ports: Vec<(String, String, u16)> = containers
                .iter()
                .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
                .map(|cp| {
                    (
                        cp["name"].as_str().unwrap_or_default().to_string(),
                        cp["protocol"].as_str().unwrap_or("TCP").to_string(),
                        cp["containerPort"].as_u64().unwrap() as u16,
                    )
                })
                .collect();
            let serves = served.get(&ns).cloned().unwrap_or_default();
            let node_labels = (p["spec"]["hostNetwork"] == true).then(|| {
                let node = p["spec"]["nodeName"].as_str().unwrap();
                labels_of(&fake.get("", "nodes", None, node).unwrap())
            });
            OraclePod {
                name: p["metadata"]["name"].as_str().unwrap().to_string(),
                ns_labels: labels_of(&namespace),
                labels: labels_of(&p),
                ip: p["status"]["podIP"].as_str().unwrap().parse().unwrap(),
                ports,
                serves,
                node_labels,
                ns,
            }
        })
        .collect()
}

/// One row of a whole truth table: client, server, protocol, port.
type Cell = (String, String, Proto, u16);

/// The whole truth table now: what the oracle says of every pod-network client to every
/// server on what it serves, and what real traffic says.
fn whole_table(
    fake: &FakeApi,
    pods: &Pods<'_>,
    served: &Served,
) -> (BTreeMap<Cell, bool>, BTreeMap<Cell, bool>) {
    let mut policies = fake.list("clusternetworkpolicies");
    policies.extend(fake.list("networkpolicies"));
    let all = oracle_pods(fake, served);
    let mut want = BTreeMap::new();
    let mut jobs = Vec::new();
    for c in all.iter().filter(|c| c.node_labels.is_none()) {
        let client = &pods[&(c.ns.clone(), c.name.clone())];
        for s in all.iter().filter(|s| (&s.ns, &s.name) != (&c.ns, &c.name)) {
            for &(proto, port) in &s.serves {
                let cell = (
                    format!("{}/{}", c.ns, c.name),
                    format!("{}/{}", s.ns, s.name),
                    proto,
                    port,
                );
                want.insert(cell.clone(), oracle(&policies, c, s, proto, port));
                let (netns, dst) = (
                    client.cni.ns.name().to_string(),
                    SocketAddrV4::new(s.ip, port),
                );
                jobs.push(move || {
                    let ok = match proto {
                        Proto::Tcp => probe::tcp_probe(&netns, dst, ATTEMPT),
                        Proto::Udp => probe::udp_probe(&netns, dst, ATTEMPT),
                    };
                    (cell, ok)
                });
            }
        }
    }
    (want, probe::parallel(jobs).into_iter().collect())
}

/// Probes the whole truth table until it is the oracle's (at most [`EXPECT_WITHIN`]); the
/// cells that differ, and how many there were.
fn check_whole_table(
    fake: &FakeApi,
    pods: &Pods<'_>,
    served: &Served,
) -> (Vec<String>, usize, usize) {
    let began = Instant::now();
    loop {
        let (want, got) = whole_table(fake, pods, served);
        let wrong: Vec<String> = want
            .iter()
            .filter(|(k, v)| got.get(*k) != Some(v))
            .map(|((c, s, proto, port), v)| {
                format!(
                    "{c} -> {s} {}/{port}: the oracle says {}",
                    proto.name(),
                    if *v { "allowed" } else { "blocked" }
                )
            })
            .collect();
        if wrong.is_empty() || began.elapsed() > EXPECT_WITHIN {
            let blocked = want.values().filter(|v| !**v).count();
            return (wrong, want.len(), blocked);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The fixture's pods by (namespace, name).
type Pods<'c> = BTreeMap<(String, String), FixturePod<'c>>;

/// The fixture's host-network pods' addresses (their nodes'), by (namespace, name).
type HostPods = BTreeMap<(String, String), Ipv4Addr>;

/// Servers of the fixture, kept running.
type Servers = (Vec<probe::EchoServer>, Vec<probe::UdpEchoServer>);

/// A Pod object of the fixture as the scheduler and kubelet write it (a host-network pod's
/// address is its node's).
fn fixture_pod(
    ns: &str,
    name: &str,
    node: usize,
    labels: &Value,
    ports: &[Value],
    ip: Option<Ipv4Addr>,
    host_network: bool,
) -> Value {
    let mut v = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"nodeName": node_name(node), "hostNetwork": host_network,
                 "containers": [{"name": "agnhost", "image": "agnhost", "ports": ports}]}});
    if let Some(ip) = ip {
        v["status"] = json!({"phase": "Running", "podIP": ip.to_string(),
                             "podIPs": [{"ip": ip.to_string()}],
                             "hostIP": underlay_ip(node).to_string()});
    }
    v
}

/// The labels the kubelet gives its Node when it registers it (`initialNode` in
/// kubernetes/kubernetes `pkg/kubelet/kubelet_node_status.go`: `kubernetes.io/hostname`,
/// `kubernetes.io/os` and `kubernetes.io/arch`, the latter two from the Go runtime).
fn label_nodes_as_the_kubelet_does(fake: &FakeApi, n: usize) {
    for i in 1..=n {
        let name = node_name(i);
        let mut node = fake.get("", "nodes", None, &name).expect("the Node object");
        node["metadata"]["labels"] = json!({"kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"});
        fake.put(node).unwrap();
    }
}

/// The base fixture (manifests.yaml): its Namespaces (with the name label the API server
/// adds), and each pod-network StatefulSet's pods with servers for what they serve (TCP and
/// UDP; SCTP cannot be served here).
fn fixture<'c>(c: &'c Cluster, fake: &FakeApi) -> (Pods<'c>, HostPods, Servers) {
    let objects = conf::objects_with("manifests.yaml", &HOST_PORTS);
    for ns in objects.iter().filter(|o| o["kind"] == "Namespace") {
        let mut ns = ns.clone();
        let name = ns["metadata"]["name"].clone();
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"] = name;
        fake.put(ns).unwrap();
    }
    let mut plan = Vec::new();
    let (mut hosts, mut tcp, mut udp) = (BTreeMap::new(), Vec::new(), Vec::new());
    // UDP on `at` where given: a host-network server listens on its node's address
    // (`--udp-listen-addresses $(HOST_IP)`), so its replies leave from it, not from the
    // address of the route back to the pod (tun0's).
    let mut serve = |netns: &str, serves: &[(CProto, u16)], at: Option<Ipv4Addr>| {
        for &(proto, port) in serves {
            match proto {
                CProto::Tcp => tcp.push(probe::tcp_echo_server(netns, port)),
                CProto::Udp => udp.push(probe::udp_echo_server_at(
                    netns,
                    SocketAddrV4::new(at.unwrap_or(Ipv4Addr::UNSPECIFIED), port),
                )),
                CProto::Sctp => {}
            }
        }
    };
    for sts in objects.iter().filter(|o| o["kind"] == "StatefulSet") {
        let template = &sts["spec"]["template"];
        let ns = sts["metadata"]["namespace"].as_str().unwrap().to_string();
        let containers = template["spec"]["containers"].as_array().unwrap();
        let ports: Vec<Value> = containers
            .iter()
            .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
            .collect();
        let serves: Vec<(CProto, u16)> = containers.iter().flat_map(conf::served_by).collect();
        let host_network = template["spec"]["hostNetwork"] == true;
        for i in 0..sts["spec"]["replicas"].as_u64().unwrap() as usize {
            let name = format!("{}-{i}", sts["metadata"]["name"].as_str().unwrap());
            let node = 1 + i % 2;
            let labels = template["metadata"]["labels"].clone();
            if host_network {
                // `centaur`: serves in its node's namespace, at its node's address.
                let ip = underlay_ip(node);
                fake.put(fixture_pod(
                    &ns,
                    &name,
                    node,
                    &labels,
                    &ports,
                    Some(ip),
                    true,
                ))
                .unwrap();
                serve(c.node(node).ovs.netns(), &serves, Some(ip));
                hosts.insert((ns.clone(), name), ip);
                continue;
            }
            fake.put(fixture_pod(&ns, &name, node, &labels, &ports, None, false))
                .unwrap();
            plan.push((
                ns.clone(),
                name,
                node,
                labels,
                ports.clone(),
                serves.clone(),
            ));
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut pods = BTreeMap::new();
    for (ns, name, node, labels, ports, serves) in plan {
        let cni = c.node(node).pod(&ns, &name);
        let ip: Ipv4Addr = cni.ip.parse().unwrap();
        fake.put(fixture_pod(
            &ns,
            &name,
            node,
            &labels,
            &ports,
            Some(ip),
            false,
        ))
        .unwrap();
        serve(cni.ns.name(), &serves, None);
        pods.insert((ns, name), FixturePod { cni, ip });
    }
    (pods, hosts, (tcp, udp))
}

/// Makes one of upstream's mid-test changes on the live objects.
fn apply(fake: &FakeApi, change: &Change, ip_of: &dyn Fn(&str, &str) -> IpAddr) {
    let json = |text: &str| -> Value {
        serde_json::from_str(&conf::substitute(text, ip_of))
            .unwrap_or_else(|e| panic!("{}: {e}", change.source()))
    };
    let policy = |name: &str| {
        fake.get(GROUP, PLURAL, None, name)
            .unwrap_or_else(|| panic!("{}: no ClusterNetworkPolicy {name}", change.source()))
    };
    // A policy's rules in one direction, edited and written back.
    let edit_rules = |name: &str, dir: &str, edit: &dyn Fn(&mut Vec<Value>)| {
        let mut o = policy(name);
        let mut rules = o["spec"][dir].as_array().cloned().unwrap_or_default();
        edit(&mut rules);
        o["spec"][dir] = Value::Array(rules);
        fake.put(o).unwrap();
    };
    match *change {
        Change::Set {
            policy: name,
            pointer,
            value,
            ..
        } => {
            let mut o = policy(name);
            *o.pointer_mut(pointer)
                .unwrap_or_else(|| panic!("{}: no {pointer}", change.source())) = json(value);
            fake.put(o).unwrap();
        }
        Change::Swap {
            policy: name,
            dir,
            a,
            b,
            ..
        } => edit_rules(name, dir, &|r| r.swap(a, b)),
        Change::Insert {
            policy: name,
            dir,
            at,
            rule,
            ..
        } => {
            let rule = json(rule);
            edit_rules(name, dir, &|r| r.insert(at, rule.clone()));
        }
        Change::Remove {
            policy: name,
            dir,
            at,
            ..
        } => edit_rules(name, dir, &|r| {
            r.remove(at);
        }),
        Change::NamespaceLabels {
            namespace, labels, ..
        } => {
            let mut ns = fake.get("", "namespaces", None, namespace).unwrap();
            let mut labels = json(labels);
            labels["kubernetes.io/metadata.name"] = json!(namespace);
            ns["metadata"]["labels"] = labels;
            fake.put(ns).unwrap();
        }
        Change::Delete {
            kind,
            namespace,
            name,
            ..
        } => {
            assert_eq!(kind, "NetworkPolicy", "{}", change.source());
            fake.delete(
                "networking.k8s.io",
                "networkpolicies",
                Some(namespace),
                name,
            );
        }
    }
}

/// Deletes the objects a manifest created.
fn delete_all(fake: &FakeApi, objects: &[Value]) {
    for o in objects {
        let name = o["metadata"]["name"].as_str().unwrap();
        match o["kind"].as_str() {
            Some("ClusterNetworkPolicy") => {
                fake.delete(GROUP, PLURAL, None, name);
            }
            Some("NetworkPolicy") => {
                let ns = o["metadata"]["namespace"].as_str().unwrap();
                fake.delete("networking.k8s.io", "networkpolicies", Some(ns), name);
            }
            other => panic!("a manifest object of kind {other:?}"),
        }
    }
}

/// Upstream's `PokeServer` with its expectation: retried until it holds (at most
/// [`EXPECT_WITHIN`]), then confirmed once more. `None` when it held, else what was seen.
fn poke(
    client: &FixturePod<'_>,
    server: Ipv4Addr,
    proto: CProto,
    port: u16,
    allowed: bool,
) -> Option<String> {
    let dst = SocketAddrV4::new(server, port);
    let attempt = || match proto {
        CProto::Tcp => probe::tcp_probe(client.cni.ns.name(), dst, ATTEMPT),
        CProto::Udp => probe::udp_probe(client.cni.ns.name(), dst, ATTEMPT),
        CProto::Sctp => unreachable!("SCTP probes are skipped"),
    };
    let began = Instant::now();
    loop {
        if attempt() == allowed && attempt() == allowed {
            return None;
        }
        if began.elapsed() > EXPECT_WITHIN {
            return Some(format!(
                "{} after {:?}",
                if allowed { "blocked" } else { "allowed" },
                EXPECT_WITHIN
            ));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The conformance suite for ClusterNetworkPolicy, every test this agent supports, on real
/// traffic (see the module docs for what is skipped and why).
#[test]
fn upstream_conformance_suite_on_two_nodes() {
    let (c, plane) = Cluster::start_kubernetes(
        2,
        &NodeOptions {
            mode: "networkpolicy",
            ..NodeOptions::default()
        },
    );
    let fake = &plane.fake;
    label_nodes_as_the_kubelet_does(fake, 2);
    let (pods, hosts, _servers) = fixture(&c, fake);
    let served = served_by_namespace();
    let ip_of = |ns: &str, pod: &str| -> IpAddr {
        let key = (ns.to_string(), pod.to_string());
        IpAddr::V4(
            pods.get(&key)
                .map(|p| p.ip)
                .or_else(|| hosts.get(&key).copied())
                .unwrap_or_else(|| panic!("no fixture pod {ns}/{pod}")),
        )
    };
    let (mut ran, mut passed, mut sctp_skipped, mut blocked) = (0, 0, 0, 0);
    let mut failures = Vec::new();
    let mut tests_run = 0;
    let (mut table_cells, mut table_blocked) = (0, 0);
    for t in conf::tests() {
        tests_run += 1;
        let objects = conf::objects_with(t.manifest, &HOST_PORTS);
        for o in &objects {
            fake.put(o.clone())
                .unwrap_or_else(|e| panic!("{}: {e}", t.name));
        }
        for step in &t.steps {
            for change in &step.changes {
                apply(fake, change, &ip_of);
            }
            let runnable: Vec<_> = step
                .probes
                .iter()
                .filter(|p| p.proto != CProto::Sctp)
                .collect();
            sctp_skipped += step.probes.len() - runnable.len();
            let jobs: Vec<_> = runnable
                .iter()
                .map(|&&p| {
                    let client = &pods[&(p.client.0.to_string(), p.client.1.to_string())];
                    let IpAddr::V4(server) = ip_of(p.server.0, p.server.1) else {
                        unreachable!("an IPv4 fixture")
                    };
                    let port = match p.port {
                        Port::Number(port) => port,
                        Port::HostNetwork(i) => HOST_PORTS[i],
                    };
                    move || (p, poke(client, server, p.proto, port, p.allowed))
                })
                .collect();
            for (p, wrong) in probe::parallel(jobs) {
                ran += 1;
                blocked += usize::from(!p.allowed);
                match wrong {
                    None => passed += 1,
                    Some(seen) => failures.push(format!(
                        "{} / {:?}: {}/{} -> {}/{} {}/{:?}: expected {}, {seen} ({})",
                        t.name,
                        step.name,
                        p.client.0,
                        p.client.1,
                        p.server.0,
                        p.server.1,
                        p.proto.as_str(),
                        p.port,
                        if p.allowed { "allowed" } else { "blocked" },
                        p.source
                    )),
                }
            }
            // Upstream's probes hold: the step is in effect. Now every pair.
            let (wrong_cells, cells, cells_blocked) = check_whole_table(fake, &pods, &served);
            table_cells += cells;
            table_blocked += cells_blocked;
            for w in wrong_cells {
                failures.push(format!("{} / {:?}: whole table: {w}", t.name, step.name));
            }
        }
        delete_all(fake, &objects);
        eprintln!("{}: done", t.name);
    }
    eprintln!(
        "conformance: {tests_run} tests, {passed} of {ran} probes as upstream expects ({} expected allowed, {blocked} blocked); whole tables: {table_cells} cells against the oracle ({table_blocked} blocked); skipped: {sctp_skipped} SCTP probes (no SCTP sockets on this kernel) and every SCTP cell",
        ran - blocked
    );
    assert!(
        failures.is_empty(),
        "{} probes differ from upstream's expectations or the oracle's:\n{}\n--- node-1 log (tail):\n{}",
        failures.len(),
        failures.join("\n"),
        tail(&c.node(1).log(), 40)
    );
    assert!(ran > 200, "only {ran} probes ran");
}
