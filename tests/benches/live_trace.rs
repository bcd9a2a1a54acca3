//! What `sdnctl trace --live` costs and how long its answer takes, on real OVS (netdev) with the
//! real agent:
//!
//! 1. One node in a cluster of `SDN_BENCH_LT_NODES` (500, at most 511) other nodes (HostSubnets in the
//!    standalone state, so br0 has their VXLAN rows) with `SDN_BENCH_LT_PODS` (100) local pods:
//!    live traces to a pod of the node (delivered), of another tenant (dropped), outside the
//!    cluster, and to a Service address (whose destination the node's NAT may change, so every
//!    row that sends to another node is copied: the largest trace): for each, the wall time of
//!    `sdnctl trace --live` (p50, p90), the rows the trace installed, and its own time from
//!    packet to last report.
//! 2. Two nodes sharing a state directory: a trace to a pod of the other node (that node's
//!    agent asked, armed, reporting).
//!
//! Run: `cargo build --release --workspace && cargo bench -p sdn-tests --bench live_trace`.
//! Wall clock on a shared 2-core machine: the figures are what this machine did in this run.

use std::process::Command;
use std::time::{Duration, Instant};

use cluster::{ClusterObject, HostSubnet, StandaloneSource};
use sdn_tests::cluster::Cluster;
use sdn_tests::harness::workspace_bin;
use sdn_tests::node::{AgentNode, NodeOptions};
use serde_json::Value;

const REPS: usize = 20;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * q).round() as usize]
}

/// One `sdnctl --json trace --live`: the answer and its wall time (ms).
fn live(node: &AgentNode, src: &str, dst: &str, proto: &str) -> (Value, f64) {
    let t = Instant::now();
    let out = Command::new(workspace_bin("sdnctl"))
        .arg("--api-socket")
        .arg(node.api_socket())
        .args(["--json", "trace", "--live", src, dst, proto])
        .env_remove("SDN_CONFIG")
        .env_remove("SDN_API_SOCKET")
        .output()
        .expect("run sdnctl");
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    assert!(
        out.status.success(),
        "sdnctl trace --live {src} {dst}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (serde_json::from_slice(&out.stdout).expect("JSON"), ms)
}

/// `REPS` traces: prints wall p50/p90, rows installed and the trace's own time.
fn measure(what: &str, node: &AgentNode, src: &str, dst: &str, proto: &str, want: &str) {
    let _ = live(node, src, dst, proto);
    let (mut wall, mut own, mut rows) = (Vec::new(), Vec::new(), 0u64);
    for _ in 0..REPS {
        let (t, ms) = live(node, src, dst, proto);
        let l = &t["live"];
        assert_eq!(l["outcome"], want, "{what}: {l:#}");
        wall.push(ms);
        own.push(l["elapsed_ms"].as_f64().unwrap_or(0.0));
        rows = l["rows"].as_u64().unwrap_or(0);
    }
    eprintln!(
        "{what:<44} wall p50 {:>6.1} ms p90 {:>6.1} ms | rows installed {rows:>6} | packet to last report p50 {:>5.1} ms",
        pct(&wall, 0.5),
        pct(&wall, 0.9),
        pct(&own, 0.5)
    );
}

fn main() {
    // The cluster network 10.128.0.0/14 holds 512 subnets /23; this node has the first.
    let nodes = env_usize("SDN_BENCH_LT_NODES", 500).min(511);
    let pods = env_usize("SDN_BENCH_LT_PODS", 100);
    let node = AgentNode::start(NodeOptions::default());
    node.set_netnamespace("tenant-a", 11);
    node.set_netnamespace("tenant-b", 12);
    // Other nodes: the next subnets of the cluster network, with VTEPs 172.18.x.y.
    for i in 0..nodes {
        let net = std::net::Ipv4Addr::from(
            u32::from(std::net::Ipv4Addr::new(10, 128, 0, 0)) + ((i as u32 + 1) << 9),
        );
        let subnet = format!("{net}/23");
        let vtep = format!("172.18.{}.{}", i / 250, 1 + i % 250);
        StandaloneSource::write_object(
            &node.state_dir(),
            &ClusterObject::HostSubnet(HostSubnet::new(&format!("other-{i}"), &vtep, &subnet)),
        )
        .expect("write a HostSubnet");
    }
    let began = Instant::now();
    while node
        .ovs
        .ofctl(&["dump-flows", "br0", "table=90"])
        .lines()
        .count()
        < nodes
    {
        assert!(
            began.elapsed() < Duration::from_secs(120),
            "the other nodes' rows did not arrive"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut made = Vec::new();
    for i in 0..pods {
        let ns = if i % 2 == 0 { "tenant-a" } else { "tenant-b" };
        made.push(node.pod(ns, &format!("p{i}")));
    }
    let flows = node.flows().len();
    eprintln!(
        "one node: {pods} pods, {nodes} other nodes, {flows} rows on br0; {REPS} traces each"
    );
    let a2 = made[2].ip.clone();
    let b1 = made[1].ip.clone();
    measure(
        "to a pod of the tenant (delivered)",
        &node,
        "tenant-a/p0",
        &a2,
        "tcp/8080",
        "delivered",
    );
    measure(
        "to a pod of another tenant (dropped)",
        &node,
        "tenant-a/p0",
        &b1,
        "tcp/8080",
        "dropped",
    );
    measure(
        "outside the cluster (handed to tun0)",
        &node,
        "tenant-a/p0",
        "192.0.2.10",
        "tcp/443",
        "to-host",
    );
    measure(
        "to a Service address (no rules: to tun0)",
        &node,
        "tenant-a/p0",
        "172.30.0.99",
        "udp/53",
        "to-host",
    );
    drop(made);
    drop(node);

    let c = Cluster::start(2, &NodeOptions::default());
    c.set_netnamespace("tenant-a", 11);
    let a1 = c.node(1).pod("tenant-a", "a1");
    let a2 = c.node(2).pod("tenant-a", "a2");
    std::thread::sleep(Duration::from_secs(2));
    eprintln!("two nodes sharing a state directory; {REPS} traces");
    measure(
        "to a pod of the other node (both report)",
        c.node(1),
        "tenant-a/a1",
        &a2.ip,
        "tcp/8080",
        "delivered",
    );
    drop(a1);
}
