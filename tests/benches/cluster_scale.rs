//! One real node in a simulated cluster of 100 to 5,000 nodes and 3,000 to 150,000 pods, in
//! both modes: what the node's agent costs as the cluster grows.
//!
//! The cluster: the fake API server (`sdn_tests::fakeapi`) and the real controller on the hub
//! of the multi-node harness, one real node (`node-1`: its own OVS, the real agent in
//! Kubernetes mode). Every other object is created through the API server's REST interface by
//! a kube client, as a cluster's would be: Nodes `node-2`.. (the controller allocates their
//! HostSubnets), Namespaces `ns-<i>` (labelled `team`, `env`; the controller gives each a
//! NetNamespace), and Pods, 30 per namespace, spread over the simulated nodes with addresses of
//! their nodes' subnets (`role`, `app` labels). In networkpolicy mode every namespace also has
//! two NetworkPolicies (deny all ingress; allow from the same namespace), so the cluster holds
//! two per namespace, of which this node applies those of its own pods' namespaces. Mode
//! `networkpolicy-wide` adds the shape cluster-admin policies have: 500 NetworkPolicies in the
//! namespaces of this node's pods, each selecting every pod there and allowing ingress from a
//! `podSelector` peer (`app: app-<k % 10>`) and a `namespaceSelector` peer
//! (`bucket: b<k % 10>`, every namespace carrying `bucket: b<i % 10>`: 10% of the namespaces).
//! Mode `cnp-wide` is the same shape as 500 Admin-tier ClusterNetworkPolicies (priorities 0 to
//! 499), each with those namespaces as its subject and Accept rules from the same two peers.
//!
//! Per size, in each mode (the cluster grows: 100 × 3k, 1,000 × 30k, 2,000 × 150k,
//! 5,000 × 150k), printed as one table at the end:
//! - the agent restarted: until it serves CNI (socket and config) and until br0 is reconciled,
//!   and what that reconcile changed (a restart changes no flow);
//! - its RSS after `SDN_CLUSTER_SETTLE` seconds (default 30; the figure is 120);
//! - 20 local pod ADDs (the real plugin, pods created in the API first): p50 and max;
//! - a node joining (a Node created through the API) until its VXLAN row (table 10) is here,
//!   five times: p50;
//! - networkpolicy mode: a remote pod created in a namespace of this node's pods until its
//!   address is in table 80, five times: p50;
//! - 1,000 label changes of other nodes' pods (merge patches through the API, spread over the
//!   cluster), and 100 in the namespaces of this node's pods: the agent's CPU seconds until it
//!   is idle again;
//! - the fake API server: objects created per second, the requests the agent made to start.
//!
//! Before the sizes: the controller alone against a fresh API server holding 5,000 Nodes,
//! until it has allocated 5,000 HostSubnets.
//!
//! Run: `cargo build --release --workspace --bins && cargo bench -p sdn-tests --bench
//! cluster_scale`. Settings: `SDN_CLUSTER_SIZES` (`100,1000,2000,5000`), `SDN_CLUSTER_MODES`
//! (`multitenant,networkpolicy,networkpolicy-wide`; also `cnp-wide`), `SDN_CLUSTER_SETTLE` (30), `SDN_CLUSTER_FAMILIES` (`ipv4`;
//! `ipv4,dual` runs each mode again dual stack: `fd01::/48` beside the IPv4 network, every
//! HostSubnet with its IPv6 subnet, every pod with an address of each family). Wall clock and CPU on a shared
//! machine: the figures are what this machine did in this run.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use cluster::pods::SlimPod;
use futures::stream::{self, StreamExt};
use ipnet::Ipv4Net;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Config};
use sdn_tests::cluster::{node_name, Cluster, API_SERVER_IP};
use sdn_tests::fakeapi::FakeApi;
use sdn_tests::harness::{
    process_cpu_s as cpu_s, process_rss_mb as rss_mb, spawn_in_netns, unique_name, workspace_bin,
    Netns,
};
use sdn_tests::node::{AgentNode, NodeOptions};
use serde_json::{json, Value};

const PODS_PER_NS: usize = 30;
const LOCAL_PODS: usize = 20;
/// Namespaces holding this node's pods.
const LOCAL_NAMESPACES: usize = 4;
const REPS: usize = 5;
const CLUSTER_NETWORK: &str = "10.0.0.0/8,8";

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

/// Pods in a cluster of `nodes` nodes: 30 per node, and 150,000 from 2,000 nodes on (the
/// sizes of the table: 100 × 3k, 1,000 × 30k, 2,000 × 150k, 5,000 × 150k).
fn pods_for(nodes: usize) -> usize {
    if nodes >= 2000 {
        150_000
    } else {
        nodes * 30
    }
}

/// The underlay address of simulated node `i` (never routed: its VXLAN rows are what count).
fn node_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)) + i as u32)
}

fn ns_name(i: usize) -> String {
    format!("ns-{i}")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn pct(v: &[Duration], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort();
    if v.is_empty() {
        return f64::NAN;
    }
    ms(v[((v.len() as f64 - 1.0) * q).round() as usize])
}

/// Waits until the agent used less than 2% of a core over one second; returns the CPU
/// seconds it used since `from` and when it became idle.
fn until_idle(pid: u32, from: f64, began: Instant) -> (f64, Duration) {
    loop {
        let a = cpu_s(pid);
        std::thread::sleep(Duration::from_secs(1));
        let b = cpu_s(pid);
        if b - a < 0.02 {
            return (
                a - from,
                began.elapsed().saturating_sub(Duration::from_secs(1)),
            );
        }
        assert!(
            began.elapsed() < Duration::from_secs(900),
            "agent still busy after 900 s"
        );
    }
}

/// The REST side: a kube client whose tasks run inside the hub namespace (where the API
/// server listens), on a runtime of its own.
struct Rest {
    rt: tokio::runtime::Runtime,
    client: Client,
}

impl Rest {
    fn new(hub: &str) -> Rest {
        let rt = spawn_in_netns(hub, || {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime")
        })
        .join()
        .expect("runtime thread");
        let url = format!("http://{API_SERVER_IP}:6443");
        let client = rt
            .block_on(rt.spawn(async move {
                Client::try_from(Config::new(url.parse().unwrap())).expect("client")
            }))
            .unwrap();
        Rest { rt, client }
    }

    fn api(&self, group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
    }

    /// Creates `objs` (16 at a time); the time it took. Panics on a failed create.
    fn create(&self, objs: Vec<Value>) -> Duration {
        let client = self.client.clone();
        let began = Instant::now();
        let task = async move {
            let results: Vec<Result<(), String>> = stream::iter(objs)
                .map(|o| {
                    let client = client.clone();
                    async move {
                        let (group, version) =
                            match o["apiVersion"].as_str().unwrap().split_once('/') {
                                Some((g, v)) => (g.to_string(), v.to_string()),
                                None => (String::new(), "v1".to_string()),
                            };
                        let kind = o["kind"].as_str().unwrap().to_string();
                        let plural =
                            format!("{}s", kind.to_lowercase()).replace("policys", "policies");
                        let ar = ApiResource::from_gvk_with_plural(
                            &GroupVersionKind::gvk(&group, &version, &kind),
                            &plural,
                        );
                        let obj: DynamicObject = serde_json::from_value(o).unwrap();
                        let api: Api<DynamicObject> = match obj.metadata.namespace.as_deref() {
                            Some(ns) => Api::namespaced_with(client, ns, &ar),
                            None => Api::all_with(client, &ar),
                        };
                        api.create(&PostParams::default(), &obj)
                            .await
                            .map(|_| ())
                            .map_err(|e| format!("{kind} {:?}: {e}", obj.metadata.name))
                    }
                })
                .buffer_unordered(16)
                .collect()
                .await;
            results.into_iter().collect::<Result<Vec<()>, String>>()
        };
        self.rt
            .block_on(self.rt.spawn(task))
            .unwrap()
            .unwrap_or_else(|e| panic!("create: {e}"));
        began.elapsed()
    }

    /// Merge-patches the labels of pods (namespace, name) (16 at a time).
    fn label_pods(&self, pods: Vec<(String, String)>, value: &str) {
        let client = self.client.clone();
        let ar = self.api("", "v1", "Pod", "pods");
        let value = value.to_string();
        let task = async move {
            stream::iter(pods)
                .map(|(ns, name)| {
                    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
                    let patch = json!({"metadata": {"labels": {"app": value}}});
                    async move {
                        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                            .await
                            .unwrap_or_else(|e| panic!("patch {ns}/{name}: {e}"));
                    }
                })
                .buffer_unordered(16)
                .collect::<Vec<()>>()
                .await
        };
        self.rt.block_on(self.rt.spawn(task)).unwrap();
    }

    /// Lists every pod in pages of 500, decoded as the agent decodes them; the time it took.
    fn list_pods(&self) -> (usize, Duration) {
        let api: Api<SlimPod> = Api::all(self.client.clone());
        let began = Instant::now();
        let n = self
            .rt
            .block_on(self.rt.spawn(async move {
                let mut n = 0;
                let mut lp = ListParams::default().limit(500);
                loop {
                    let page = api.list(&lp).await.expect("list pods");
                    n += page.items.len();
                    match page.metadata.continue_.filter(|c| !c.is_empty()) {
                        Some(c) => lp = lp.continue_token(&c),
                        None => return n,
                    }
                }
            }))
            .unwrap();
        (n, began.elapsed())
    }

    fn delete(&self, group: &str, kind: &str, plural: &str, ns: Option<&str>, name: &str) {
        let ar = self.api(group, "v1", kind, plural);
        let api: Api<DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        };
        let name = name.to_string();
        self.rt
            .block_on(self.rt.spawn(async move {
                let _ = api.delete(&name, &Default::default()).await;
            }))
            .unwrap();
    }
}

fn node_obj(i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name(i)},
           "status": {"addresses": [{"type": "InternalIP", "address": node_ip(i).to_string()}]}})
}

fn namespace_obj(i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns_name(i),
           "labels": {"team": format!("t{}", i % 4), "env": if i.is_multiple_of(2) { "prod" } else { "dev" },
                      "bucket": format!("b{}", i % 10)}}})
}

fn pod_obj(
    ns: &str,
    name: &str,
    j: usize,
    node: usize,
    ips: Option<(Ipv4Addr, Option<std::net::Ipv6Addr>)>,
) -> Value {
    let role = ["web", "db", "cache"][j % 3];
    let mut v = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"role": role, "app": format!("app-{}", j % 10)}},
        "spec": {"nodeName": node_name(node), "containers": [{"name": "c", "image": "app",
            "ports": [{"name": "http", "containerPort": 8080}]}]}});
    if let Some((ip, ip6)) = ips {
        v["status"] = json!({"phase": "Running", "podIP": ip.to_string()});
        if let Some(ip6) = ip6 {
            v["status"]["podIPs"] = json!([{"ip": ip.to_string()}, {"ip": ip6.to_string()}]);
        }
    }
    v
}

/// The policies that select across namespaces: `n` in the namespaces of this node's pods (see
/// the module docs).
fn wide_policies(n: usize) -> Vec<Value> {
    (0..n)
        .map(|k| {
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                   "metadata": {"name": format!("wide-{k}"), "namespace": ns_name(k % LOCAL_NAMESPACES)},
                   "spec": {"podSelector": {}, "ingress": [{"from": [
                       {"podSelector": {"matchLabels": {"app": format!("app-{}", k % 10)}}},
                       {"namespaceSelector": {"matchLabels": {"bucket": format!("b{}", k % 10)}}}]}]}})
        })
        .collect()
}

/// How many [`wide_policies`] mode `networkpolicy-wide` creates (and [`wide_cluster_policies`]
/// mode `cnp-wide`).
const WIDE_POLICIES: usize = 500;

/// The shape of [`wide_policies`] as `n` ClusterNetworkPolicies of the Admin tier.
fn wide_cluster_policies(n: usize) -> Vec<Value> {
    (0..n)
        .map(|k| {
            let ns = ns_name(k % LOCAL_NAMESPACES);
            json!({"apiVersion": "policy.networking.k8s.io/v1alpha2", "kind": "ClusterNetworkPolicy",
                   "metadata": {"name": format!("wide-{k}")},
                   "spec": {"tier": "Admin", "priority": k,
                            "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": ns}}},
                            "ingress": [{"action": "Accept", "from": [
                                {"pods": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                                          "podSelector": {"matchLabels": {"app": format!("app-{}", k % 10)}}}},
                                {"namespaces": {"matchLabels": {"bucket": format!("b{}", k % 10)}}}]}]}})
        })
        .collect()
}

fn policies_obj(ns: &str) -> Vec<Value> {
    let np = |name: &str, spec: Value| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
               "metadata": {"name": name, "namespace": ns}, "spec": spec})
    };
    vec![
        np("deny-ingress", json!({"podSelector": {}})),
        np(
            "same-namespace",
            json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}),
        ),
    ]
}

/// Whether `ovs-ofctl dump-flows br0 <filter>` prints a row; polls until it does.
fn until_row(node: &AgentNode, filter: &str, began: Instant) -> Duration {
    loop {
        let out = node.ovs.ofctl(&["--no-stats", "dump-flows", "br0", filter]);
        if out.lines().any(|l| l.contains("table=")) {
            return began.elapsed();
        }
        assert!(
            began.elapsed() < Duration::from_secs(120),
            "no row {filter} after 120 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The rows of table 10 (one per remote node).
fn remote_rows(node: &AgentNode) -> usize {
    node.ovs
        .ofctl(&["--no-stats", "dump-flows", "br0", "table=10"])
        .lines()
        .filter(|l| l.contains("tun_src="))
        .count()
}

/// One size's figures.
#[derive(Default, Clone)]
struct Row {
    nodes: usize,
    pods: usize,
    created_per_s: f64,
    controller_s: f64,
    serving_s: f64,
    reconciled_s: f64,
    restart_changes: String,
    rss_mb: f64,
    add_p50: f64,
    add_max: f64,
    join_p50: f64,
    peer_p50: Option<f64>,
    labels_cpu: f64,
    labels_local_cpu: f64,
    start_requests: String,
    /// The fake API server alone: every pod listed (pages of 500, decoded as the agent does).
    list_pods_s: f64,
}

/// The simulated cluster of one mode, growing.
struct Sim {
    /// The agent's mode.
    mode: &'static str,
    /// The cluster also holds the [`wide_policies`] (`Some(false)`) or the
    /// [`wide_cluster_policies`] (`Some(true)`).
    wide: Option<bool>,
    cluster: Cluster,
    plane: sdn_tests::cluster::KubeControlPlane,
    rest: Rest,
    nodes: usize,
    namespaces: usize,
    pods: usize,
    /// Each simulated node's subnets and its next host number.
    subnets: NodeSubnets,
    dual: bool,
    /// Remote pods created, (namespace, name), in creation order.
    remote: Vec<(String, String)>,
    next_join: usize,
}

impl Sim {
    fn start(mode: &'static str, wide: Option<bool>, dual: bool) -> Sim {
        let options = NodeOptions {
            mode,
            cluster_network: CLUSTER_NETWORK.into(),
            ..NodeOptions::default()
        };
        let (cluster, plane) =
            Cluster::start_kubernetes(1, &if dual { options.dual_stack() } else { options });
        let rest = Rest::new(cluster.hub_name());
        Sim {
            mode,
            wide,
            cluster,
            plane,
            rest,
            nodes: 1,
            namespaces: 0,
            pods: 0,
            subnets: BTreeMap::new(),
            dual,
            remote: Vec::new(),
            next_join: 100_000,
        }
    }

    fn fake(&self) -> &FakeApi {
        &self.plane.fake
    }

    fn node(&self) -> &AgentNode {
        self.cluster.node(1)
    }

    fn host_subnets(&self) -> usize {
        self.fake().list("hostsubnets").len()
    }

    /// Grows the cluster to `nodes` nodes and their pods; returns (objects/s, controller s).
    fn grow(&mut self, nodes: usize) -> (f64, f64) {
        let mut created = 0usize;
        let mut busy = Duration::ZERO;
        // Nodes: the controller allocates their HostSubnets.
        let objs: Vec<Value> = (self.nodes + 1..=nodes).map(node_obj).collect();
        created += objs.len();
        let began = Instant::now();
        busy += self.rest.create(objs);
        while self.host_subnets() < nodes {
            assert!(
                began.elapsed() < Duration::from_secs(600),
                "{} HostSubnets of {nodes} after 600 s",
                self.host_subnets()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let controller = began.elapsed().as_secs_f64();
        for v in self.fake().list("hostsubnets") {
            let name = v["metadata"]["name"].as_str().unwrap_or_default();
            let Some(i) = name
                .strip_prefix("node-")
                .and_then(|n| n.parse::<usize>().ok())
            else {
                continue;
            };
            let net: Ipv4Net = v["subnet"].as_str().unwrap().parse().unwrap();
            let net6 = v["metadata"]["annotations"]["sdn.dev/ipv6-subnet"]
                .as_str()
                .and_then(|s| s.parse().ok());
            assert!(
                !self.dual || net6.is_some(),
                "HostSubnet {name} has no IPv6 subnet on a dual-stack cluster"
            );
            self.subnets.entry(i).or_insert((net, net6, 2));
        }
        self.nodes = nodes;
        // Namespaces (and their policies), then pods.
        let pods = pods_for(nodes);
        let namespaces = pods.div_ceil(PODS_PER_NS).max(LOCAL_NAMESPACES);
        let objs: Vec<Value> = (self.namespaces..namespaces).map(namespace_obj).collect();
        created += objs.len();
        busy += self.rest.create(objs);
        if self.mode == "networkpolicy" {
            let objs: Vec<Value> = (self.namespaces..namespaces)
                .flat_map(|i| policies_obj(&ns_name(i)))
                .collect();
            created += objs.len();
            busy += self.rest.create(objs);
        }
        if let (Some(cluster), 0) = (self.wide, self.namespaces) {
            let objs = if cluster {
                wide_cluster_policies(WIDE_POLICIES)
            } else {
                wide_policies(WIDE_POLICIES)
            };
            created += objs.len();
            busy += self.rest.create(objs);
        }
        self.namespaces = namespaces;
        let mut objs = Vec::new();
        for i in self.pods..pods {
            let ns = ns_name(i / PODS_PER_NS);
            let name = format!("p{i}");
            // Over the simulated nodes (2..=nodes), never this one.
            let n = 2 + i % (nodes - 1).max(1);
            let ips = next_ips(&mut self.subnets, n);
            objs.push(pod_obj(&ns, &name, i, n, Some(ips)));
            self.remote.push((ns, name));
        }
        created += objs.len();
        busy += self.rest.create(objs);
        self.pods = pods;
        (created as f64 / busy.as_secs_f64(), controller)
    }

    /// Waits until the agent has every remote node's row and is idle.
    fn settle(&self) {
        let began = Instant::now();
        while remote_rows(self.node()) < self.nodes - 1 {
            assert!(
                began.elapsed() < Duration::from_secs(600),
                "{} remote rows of {} after 600 s",
                remote_rows(self.node()),
                self.nodes - 1
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let pid = self.node().agent_pid().expect("agent running");
        until_idle(pid, cpu_s(pid), Instant::now());
    }

    fn measure(&mut self, row: &mut Row) {
        let node = self.cluster.node(1);
        // Restart.
        let reconciles = || {
            node.log()
                .lines()
                .filter(|l| l.contains("br0 reconciled"))
                .count()
        };
        row.list_pods_s = self.rest.list_pods().1.as_secs_f64();
        let before = reconciles();
        node.stop_agent(libc::SIGTERM);
        self.fake().reset_requests();
        let began = Instant::now();
        node.start_agent_serving();
        row.serving_s = began.elapsed().as_secs_f64();
        while reconciles() == before {
            assert!(
                began.elapsed() < Duration::from_secs(300),
                "no reconcile 300 s after the restart"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        row.reconciled_s = began.elapsed().as_secs_f64();
        let line = node.last_reconcile();
        let field = |k: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{k}=")))
                .unwrap_or("?")
                .to_string()
        };
        row.restart_changes = format!(
            "added={} deleted={} refused={}",
            field("added"),
            field("deleted"),
            field("refused")
        );
        let r = self.fake().requests();
        // The agent's own account: how long its first list of the cluster took.
        let listed = node
            .log()
            .lines()
            .rev()
            .find(|l| l.contains("cluster listed"))
            .and_then(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix("ms=").map(String::from))
            })
            .unwrap_or_else(|| "?".into());
        row.start_requests = format!(
            "{} lists, {} watches, listed in {listed} ms",
            r.count("list", "/"),
            r.count("watch", "/")
        );
        self.settle();
        let settle: u64 = env_or("SDN_CLUSTER_SETTLE", "30").parse().unwrap_or(30);
        std::thread::sleep(Duration::from_secs(settle));
        let pid = node.agent_pid().expect("agent running");
        row.rss_mb = rss_mb(pid);

        // Local pod ADDs: the pod in the API first, as the scheduler would; then the runtime.
        let mut adds = Vec::new();
        let mut locals = Vec::new();
        for k in 0..LOCAL_PODS {
            let ns = ns_name(k % LOCAL_NAMESPACES);
            let name = format!("local-{}-{k}", self.nodes);
            self.rest.create(vec![pod_obj(&ns, &name, k, 1, None)]);
            std::thread::sleep(Duration::from_millis(50));
            let netns = Netns::new("sdnpod");
            let id = format!("{}-{name}", netns.name());
            let args = format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={ns};K8S_POD_NAME={name}");
            let t = Instant::now();
            let out = node.add(&id, &netns.path(), &args);
            adds.push(t.elapsed());
            assert_eq!(out.code, 0, "ADD {ns}/{name}: {}", out.stdout);
            let result = serde_json::from_str::<Value>(&out.stdout).unwrap();
            let addr = |k: usize| {
                result["ips"][k]["address"]
                    .as_str()
                    .and_then(|a| a.split('/').next())
                    .map(str::to_string)
            };
            let ip: Ipv4Addr = addr(0).unwrap().parse().unwrap();
            let ip6 = addr(1).and_then(|a| a.parse().ok());
            // The kubelet reports the addresses.
            self.rest.delete("", "Pod", "pods", Some(&ns), &name);
            self.rest
                .create(vec![pod_obj(&ns, &name, k, 1, Some((ip, ip6)))]);
            locals.push((netns, id, ns, name));
        }
        row.add_p50 = pct(&adds, 0.5);
        row.add_max = pct(&adds, 1.0);

        // Nodes joining.
        let mut joins = Vec::new();
        for _ in 0..REPS {
            let i = self.next_join;
            self.next_join += 1;
            let t = Instant::now();
            self.rest.create(vec![node_obj(i)]);
            joins.push(until_row(
                node,
                &format!("table=10,tun_src={}", node_ip(i)),
                t,
            ));
        }
        for i in self.next_join - REPS..self.next_join {
            self.rest.delete("", "Node", "nodes", None, &node_name(i));
        }
        row.join_p50 = pct(&joins, 0.5);

        // Remote peers (networkpolicy mode): a pod of another node in ns-0.
        if self.mode == "networkpolicy" {
            let mut peers = Vec::new();
            for k in 0..REPS {
                let n = 2 + k;
                let ips = next_ips(&mut self.subnets, n);
                let ip = ips.0;
                let name = format!("peer-{}-{k}", self.nodes);
                let t = Instant::now();
                self.rest
                    .create(vec![pod_obj(&ns_name(0), &name, k, n, Some(ips))]);
                peers.push(until_row(node, &format!("table=80,ip,nw_src={ip}"), t));
                self.remote.push((ns_name(0), name));
            }
            row.peer_p50 = Some(pct(&peers, 0.5));
        }

        // Label changes: 1,000 spread over the cluster, then 100 in this node's namespaces.
        until_idle(pid, cpu_s(pid), Instant::now());
        let step = (self.remote.len() / 1000).max(1);
        let spread: Vec<(String, String)> = self
            .remote
            .iter()
            .step_by(step)
            .take(1000)
            .cloned()
            .collect();
        let before = cpu_s(pid);
        let t = Instant::now();
        self.rest
            .label_pods(spread, &format!("relabel-{}", self.nodes));
        row.labels_cpu = until_idle(pid, before, t).0;
        let mine: Vec<(String, String)> = self
            .remote
            .iter()
            .filter(|(ns, _)| (0..LOCAL_NAMESPACES).any(|i| *ns == ns_name(i)))
            .take(100)
            .cloned()
            .collect();
        let before = cpu_s(pid);
        let t = Instant::now();
        self.rest.label_pods(mine, &format!("near-{}", self.nodes));
        row.labels_local_cpu = until_idle(pid, before, t).0;

        // The local pods go.
        for (netns, id, ns, name) in locals {
            let out = node.del(&id, &netns.path());
            assert_eq!(out.code, 0, "DEL {ns}/{name}: {}", out.stdout);
            self.rest.delete("", "Pod", "pods", Some(&ns), &name);
        }
    }
}

/// The controller alone: a fresh API server with `n` Nodes, then `sdn-agent controller`,
/// until `n` HostSubnets exist. Returns (seconds, the controller's RSS in MB at the end).
fn controller_alone(n: usize) -> (f64, f64) {
    let fake = FakeApi::start("127.0.0.1:0");
    for i in 2..=n + 1 {
        fake.put(node_obj(i)).unwrap();
    }
    fake.put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}))
        .unwrap();
    let dir = std::env::temp_dir().join(unique_name("ctl-scale"));
    std::fs::create_dir_all(&dir).unwrap();
    let kc = dir.join("kubeconfig");
    fake.kubeconfig(&kc).unwrap();
    let began = Instant::now();
    let mut child = std::process::Command::new(workspace_bin("sdn-agent"))
        .args(["controller", "--node-name", "ctl", "--kubeconfig"])
        .arg(&kc)
        .args([
            "--mode",
            "multitenant",
            "--cluster-network",
            CLUSTER_NETWORK,
        ])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("controller");
    while fake.list("hostsubnets").len() < n {
        assert!(
            began.elapsed() < Duration::from_secs(300),
            "controller: {} of {n} HostSubnets after 300 s",
            fake.list("hostsubnets").len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = began.elapsed().as_secs_f64();
    let rss = rss_mb(child.id());
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    (took, rss)
}

fn main() {
    let sizes: Vec<usize> = env_or("SDN_CLUSTER_SIZES", "100,1000,2000,5000")
        .split(',')
        .map(|s| s.trim().parse().expect("SDN_CLUSTER_SIZES: numbers"))
        .collect();
    let modes: Vec<(&'static str, &'static str, Option<bool>)> = env_or(
        "SDN_CLUSTER_MODES",
        "multitenant,networkpolicy,networkpolicy-wide",
    )
    .split(',')
    .map(|m| match m.trim() {
        "multitenant" => ("multitenant", "multitenant", None),
        "networkpolicy" => ("networkpolicy", "networkpolicy", None),
        "networkpolicy-wide" => ("networkpolicy-wide", "networkpolicy", Some(false)),
        "cnp-wide" => ("cnp-wide", "networkpolicy", Some(true)),
        other => panic!("SDN_CLUSTER_MODES: unknown mode {other:?}"),
    })
    .collect();
    let biggest = sizes.iter().copied().max().unwrap_or(5000);
    let (ctl_s, ctl_rss) = controller_alone(biggest);
    eprintln!(
        "controller alone: {biggest} HostSubnets allocated in {ctl_s:.2} s (RSS {ctl_rss:.0} MB)"
    );
    let families: Vec<bool> = env_or("SDN_CLUSTER_FAMILIES", "ipv4")
        .split(',')
        .map(|f| match f.trim() {
            "ipv4" => false,
            "dual" => true,
            other => panic!("SDN_CLUSTER_FAMILIES: {other:?} is neither ipv4 nor dual"),
        })
        .collect();
    let mut table: Vec<(String, Row)> = Vec::new();
    for ((mode, agent_mode, wide), dual) in modes
        .iter()
        .flat_map(|m| families.iter().map(move |d| (*m, *d)))
    {
        let label = if dual {
            format!("{mode} dual")
        } else {
            mode.to_string()
        };
        let mut sim = Sim::start(agent_mode, wide, dual);
        for &size in &sizes {
            let t = Instant::now();
            let (rate, controller) = sim.grow(size);
            sim.settle();
            eprintln!(
                "{label}: cluster at {size} nodes, {} pods ({} namespaces) after {:.0} s: {rate:.0} objects/s created, the controller's HostSubnets {controller:.1} s",
                sim.pods,
                sim.namespaces,
                t.elapsed().as_secs_f64()
            );
            let mut row = Row {
                nodes: size,
                pods: sim.pods,
                created_per_s: rate,
                controller_s: controller,
                ..Row::default()
            };
            sim.measure(&mut row);
            eprintln!(
                "{label} {size}: serving {:.2} s, reconciled {:.2} s ({}; the fake API server alone lists every pod in {:.2} s), RSS {:.0} MB, ADD p50 {:.0} / max {:.0} ms, join p50 {:.0} ms, peer p50 {}, 1000 label changes {:.2} CPU-s, 100 near {:.2} CPU-s, start: {}; bench process (fake API server) RSS {:.0} MB",
                row.serving_s,
                row.reconciled_s,
                row.restart_changes,
                row.list_pods_s,
                row.rss_mb,
                row.add_p50,
                row.add_max,
                row.join_p50,
                row.peer_p50.map_or("-".into(), |v| format!("{v:.0} ms")),
                row.labels_cpu,
                row.labels_local_cpu,
                row.start_requests,
                rss_mb(std::process::id()),
            );
            table.push((label.clone(), row));
        }
        drop(sim);
    }
    let fmt = |v: f64| format!("{v:.0}");
    eprintln!();
    eprintln!("| mode | nodes × pods | ready (serving / reconciled) | restart changed | RSS | ADD p50 / max | join rows p50 | peer row p50 | 1000 label changes | 100 near | objects/s | controller |");
    eprintln!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (mode, r) in &table {
        eprintln!(
            "| {mode} | {} × {} | {:.2} / {:.2} s | {} | {} MB | {} / {} ms | {} ms | {} | {:.2} CPU-s | {:.2} CPU-s | {} | {:.1} s |",
            r.nodes,
            r.pods,
            r.serving_s,
            r.reconciled_s,
            r.restart_changes,
            fmt(r.rss_mb),
            fmt(r.add_p50),
            fmt(r.add_max),
            fmt(r.join_p50),
            r.peer_p50.map_or("-".into(), |v| format!("{v:.0} ms")),
            r.labels_cpu,
            r.labels_local_cpu,
            fmt(r.created_per_s),
            r.controller_s
        );
    }
    eprintln!("controller alone: {biggest} HostSubnets in {ctl_s:.2} s, RSS {ctl_rss:.0} MB");
}

/// Simulated node `n`'s subnets (IPv6 on a dual-stack cluster) and next host number.
type NodeSubnets = BTreeMap<usize, (Ipv4Net, Option<ipnet::Ipv6Net>, u32)>;

/// The next pod addresses of simulated node `n`'s subnets.
fn next_ips(subnets: &mut NodeSubnets, n: usize) -> (Ipv4Addr, Option<std::net::Ipv6Addr>) {
    let (net, net6, next) = subnets.get_mut(&n).expect("subnet");
    let ip = Ipv4Addr::from(u32::from(net.network()) + *next);
    let ip6 = net6.map(|n6| std::net::Ipv6Addr::from(u128::from(n6.network()) + u128::from(*next)));
    *next += 1;
    (ip, ip6)
}
