//! A large cluster around a few real nodes, simulated in the fake API server's store: Nodes
//! (the real controller gives each a HostSubnet, and every real agent installs its rows),
//! Namespaces (the controller gives each a NetNamespace), pods with addresses of their nodes'
//! subnets and, for networkpolicy mode, two NetworkPolicies per namespace (deny all ingress;
//! allow from the same namespace), as `cluster_scale` builds it. The objects go straight into
//! the store (no REST), so 5,000 nodes and 150,000 pods take seconds; the controller's own
//! writes go through its REST client as always.
//!
//! The simulated pods are addresses only (nothing answers there): tests probe the real pods
//! and check the rows that name simulated ones.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cluster::Cluster;
use crate::fakeapi::FakeApi;
use crate::node::AgentNode;

/// What a simulated cluster holds.
#[derive(Debug, Clone, Copy)]
pub struct Size {
    /// Simulated nodes.
    pub nodes: usize,
    /// Simulated namespaces.
    pub namespaces: usize,
    /// Pods per simulated namespace, spread over the simulated nodes.
    pub pods_per_namespace: usize,
    /// Two NetworkPolicies per simulated namespace.
    pub policies: bool,
}

/// Simulated node `i`'s name.
pub fn node(i: usize) -> String {
    format!("sim-{i:05}")
}

/// Simulated namespace `i`'s name.
pub fn namespace(i: usize) -> String {
    format!("sim-ns-{i:05}")
}

/// Simulated pod `j` of namespace `i`'s name.
pub fn pod(i: usize, j: usize) -> String {
    format!("sim-pod-{i:05}-{j:02}")
}

/// A simulated cluster in the store (see the module docs).
#[derive(Debug)]
pub struct Simulated {
    /// Its size.
    pub size: Size,
    /// Each simulated pod's address, by (namespace index, pod index).
    addresses: Vec<Vec<Ipv4Addr>>,
}

impl Simulated {
    /// The address of pod `j` of simulated namespace `i`.
    pub fn address(&self, i: usize, j: usize) -> Ipv4Addr {
        self.addresses[i][j]
    }
}

/// Polls `cond` every 200 ms for at most `wait`; panics with `what` if it never holds.
fn until(wait: Duration, what: &str, cond: impl FnMut() -> bool) {
    assert!(
        crate::harness::wait_until(wait, cond),
        "{what} after {wait:?}"
    );
}

/// Builds the simulated cluster of `size` next to the real nodes already in `fake`, waiting
/// (at most `wait` per step) for the controller's HostSubnets and NetNamespaces.
pub fn simulate(fake: &FakeApi, size: Size, wait: Duration) -> Simulated {
    let began = Instant::now();
    let subnets_before = fake.list("hostsubnets").len();
    for i in 0..size.nodes {
        let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 1)) + i as u32);
        fake.put(
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node(i)},
            "status": {"addresses": [{"type": "InternalIP", "address": ip.to_string()}]}}),
        )
        .expect("a simulated Node");
    }
    let netns_before = fake.list("netnamespaces").len();
    for i in 0..size.namespaces {
        fake.put(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace(i),
            "labels": {"team": format!("t{}", i % 4)}}}),
        )
        .expect("a simulated Namespace");
    }
    until(
        wait,
        "the controller's HostSubnets for the simulated nodes",
        || fake.list("hostsubnets").len() >= subnets_before + size.nodes,
    );
    until(
        wait,
        "the controller's NetNamespaces for the simulated namespaces",
        || fake.list("netnamespaces").len() >= netns_before + size.namespaces,
    );
    let mut subnet_of: Vec<Option<(u32, u32)>> = vec![None; size.nodes];
    for hs in fake.list("hostsubnets") {
        let Some(i) = hs["host"]
            .as_str()
            .and_then(|h| h.strip_prefix("sim-"))
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        let net: ipnet::Ipv4Net = hs["subnet"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("a HostSubnet's subnet");
        if i < size.nodes {
            subnet_of[i] = Some((u32::from(net.network()), net.hosts().count() as u32));
        }
    }
    let mut used = vec![0u32; size.nodes];
    let mut addresses = Vec::with_capacity(size.namespaces);
    for i in 0..size.namespaces {
        let ns = namespace(i);
        let mut mine = Vec::with_capacity(size.pods_per_namespace);
        for j in 0..size.pods_per_namespace {
            let n = (i * size.pods_per_namespace + j) % size.nodes.max(1);
            let (base, hosts) = subnet_of[n].expect("every simulated node has a HostSubnet");
            used[n] += 1;
            assert!(used[n] < hosts, "simulated node {n} is full");
            // .1 is the node's gateway.
            let ip = Ipv4Addr::from(base + 1 + used[n]);
            fake.put(pod_object(&ns, &pod(i, j), j, &node(n), ip))
                .expect("a simulated Pod");
            mine.push(ip);
        }
        addresses.push(mine);
        if size.policies {
            for p in policy_objects(&ns) {
                fake.put(p).expect("a simulated NetworkPolicy");
            }
        }
    }
    eprintln!(
        "simulated cluster: {} nodes, {} namespaces, {} pods, {} policies in {:.1} s",
        size.nodes,
        size.namespaces,
        size.namespaces * size.pods_per_namespace,
        if size.policies {
            2 * size.namespaces
        } else {
            0
        },
        began.elapsed().as_secs_f64()
    );
    Simulated { size, addresses }
}

/// Remote-node rows of table 10 on `node` (one per remote node).
pub fn remote_rows(node: &AgentNode) -> usize {
    node.ovs
        .ofctl(&["--no-stats", "dump-flows", "br0", "table=10"])
        .lines()
        .filter(|l| l.contains("tun_src="))
        .count()
}

/// Waits (at most `wait`) until every node of `c` holds the rows of every other node, real
/// and simulated; panics with the first node's log if they do not.
pub fn assert_every_remote_row(c: &Cluster, size: Size, wait: Duration) {
    let others = size.nodes + c.nodes.len() - 1;
    let all = crate::harness::wait_until(wait, || c.nodes.iter().all(|n| remote_rows(n) == others));
    let log = c.nodes.first().map(AgentNode::log).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(30).collect();
    assert!(
        all,
        "not every node holds the rows of {others} remote nodes:\n{}",
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    );
}

/// Simulated pod `j` of namespace `ns` on node `node` with address `ip`: labelled `role`
/// (web, db, cache by `j`) and `app` (`app-<j mod 10>`), a named port `http` (8080).
pub fn pod_object(ns: &str, name: &str, j: usize, node: &str, ip: Ipv4Addr) -> Value {
    let role = ["web", "db", "cache"][j % 3];
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"role": role, "app": format!("app-{}", j % 10)}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "app",
            "ports": [{"name": "http", "containerPort": 8080}]}]},
        "status": {"phase": "Running", "podIP": ip.to_string()}})
}

/// The two NetworkPolicies of a simulated namespace: deny all ingress, allow from the same
/// namespace.
pub fn policy_objects(ns: &str) -> Vec<Value> {
    [
        ("deny-ingress", json!({"podSelector": {}})),
        (
            "same-namespace",
            json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}),
        ),
    ]
    .into_iter()
    .map(|(name, spec)| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
               "metadata": {"name": name, "namespace": ns}, "spec": spec})
    })
    .collect()
}
