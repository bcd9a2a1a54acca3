//! The audit log's costs on one real node (multitenant, netdev, the real agent):
//!
//! 1. Pod ADD with logging on against off: serial ADDs alternating in rounds of 10 between a
//!    namespace that logs deny and allow and one that logs nothing, p50 and p90 of each and the
//!    ratio (target ≤ 1.1x).
//! 2. A denied flood of 10,000 packets/s from one pod for `SDN_BENCH_AUDIT_FLOOD_S` seconds (10)
//!    into a namespace that logs denials: the agent's RSS before, at the end and its peak, its
//!    CPU over the flood, the lines it wrote and what the meter kept back.
//! 3. Lines per second sustained: with `auditRateLimit` raised to 100,000, a burst of distinct
//!    denied connections (each its own line) for a few seconds; lines written per second and the
//!    agent's CPU meanwhile.
//! 4. Allowed traffic with logging on against off: 6,000 new connections at 10,000 a second
//!    into a namespace that logs allowed connections and into one that logs nothing; how many
//!    reach the server of each (every copy of a logged one takes the slow path to its meter).
//!
//! The NetworkPolicy change latency with logging on and off is the `network_policy` bench with
//! `SDN_NP_FAMILIES=ipv4,logged`.
//!
//! Run: `cargo build --release --workspace && cargo bench -p sdn-tests --bench audit`
//! (`SDN_BENCH_AUDIT_PODS`, pods per namespace for the ADD comparison, default 100). Wall clock
//! on a shared 2-core machine: compare within one run.

use std::time::{Duration, Instant};

use sdn_tests::harness::{process_cpu_s as cpu_s, process_rss_mb as rss_mb};
use sdn_tests::node::{AgentNode, CniPod, NodeOptions};
use sdn_tests::probe::{paced, send_frames, udp_frame, Endpoint};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(v: &[Duration], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort();
    v[((v.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1000.0
}

fn ip(p: &CniPod<'_>) -> std::net::Ipv4Addr {
    p.ip.parse().unwrap()
}

fn lines(node: &AgentNode, event: &str) -> u64 {
    node.metrics()
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("sdn_audit_lines_total{{event=\"{event}\"")))
        .map(|(_, v)| *v as u64)
        .sum()
}

fn suppressed(node: &AgentNode, reason: &str) -> u64 {
    node.metrics()
        .get(&format!(
            "sdn_audit_suppressed_packets_total{{reason=\"{reason}\"}}"
        ))
        .copied()
        .unwrap_or(0.0) as u64
}

fn main() {
    let pods = env_usize("SDN_BENCH_AUDIT_PODS", 100);
    let flood_s = env_usize("SDN_BENCH_AUDIT_FLOOD_S", 10);

    // 1. ADD with logging on and off.
    {
        let node = AgentNode::start(NodeOptions {
            mode: "multitenant",
            ..Default::default()
        });
        node.set_audit_logging("logged", 20, r#"{"deny": "alert", "allow": "notice"}"#);
        node.set_netnamespace("plain", 21);
        std::thread::sleep(Duration::from_millis(500));
        let mut on = Vec::new();
        let mut off = Vec::new();
        let mut keep = Vec::new();
        for round in 0..pods.div_ceil(10) {
            for (ns, lat) in [("logged", &mut on), ("plain", &mut off)] {
                for i in 0..10 {
                    let t = Instant::now();
                    let p = node.pod(ns, &format!("p{}", round * 10 + i));
                    lat.push(t.elapsed());
                    keep.push(p);
                }
            }
        }
        eprintln!(
            "pod ADD, {} pods per namespace: logging on p50 {:.1} ms p90 {:.1} ms; off p50 {:.1} ms p90 {:.1} ms; p50 ratio {:.2}x (target <= 1.1x)",
            on.len(),
            pct(&on, 0.5),
            pct(&on, 0.9),
            pct(&off, 0.5),
            pct(&off, 0.9),
            pct(&on, 0.5) / pct(&off, 0.5)
        );
        drop(keep);
    }

    // 2. A denied flood of 10,000 packets/s.
    {
        let node = AgentNode::start(NodeOptions {
            mode: "multitenant",
            ..Default::default()
        });
        node.set_netnamespace("flooder", 11);
        node.set_audit_logging("victim", 12, r#"{"deny": "alert"}"#);
        let a = node.pod("flooder", "a");
        let b = node.pod("victim", "b");
        let pid = node.agent_pid().expect("agent pid");
        std::thread::sleep(Duration::from_secs(2));
        let rss_before = rss_mb(pid);
        let cpu_before = cpu_s(pid);
        let lines_before = lines(&node, "decision") + lines(&node, "repeats");
        // Bursts of 200 every 10 ms: the sender's own overhead keeps it near 10,000/s.
        let burst: Vec<Vec<u8>> = (0..200)
            .map(|_| {
                udp_frame(
                    Endpoint::pod(ip(&a)),
                    41000,
                    Endpoint::pod(ip(&b)),
                    9,
                    b"flood",
                )
            })
            .collect();
        let started = Instant::now();
        let mut peak = rss_before;
        let mut sent = 0u64;
        paced(Duration::from_millis(10), flood_s as u32 * 100, |i| {
            send_frames(a.ns.name(), "eth0", &burst);
            sent += 200;
            if i % 50 == 0 {
                peak = peak.max(rss_mb(pid));
            }
        });
        let took = started.elapsed();
        let cpu = cpu_s(pid) - cpu_before;
        peak = peak.max(rss_mb(pid));
        // Let the fold and the suppressed count (every 10 s) catch up.
        std::thread::sleep(Duration::from_secs(12));
        let rss_after = rss_mb(pid);
        let written = lines(&node, "decision") + lines(&node, "repeats") - lines_before;
        let met = node.logged_ip_packets("table=80");
        eprintln!(
            "denied flood: {sent} packets sent in {:.1} s, {met} reached the logged row ({:.0}/s) from one pod; agent RSS {rss_before:.1} MB before, peak {peak:.1} MB, {rss_after:.1} MB after; agent CPU {cpu:.2} s over the flood ({:.1}% of a core); {written} line(s) written, {} copies folded into them, {} kept back by the meter, {} by the queue",
            took.as_secs_f64(),
            met as f64 / took.as_secs_f64(),
            100.0 * cpu / took.as_secs_f64(),
            suppressed(&node, "repeat"),
            suppressed(&node, "rate-limit"),
            suppressed(&node, "queue"),
        );
    }

    // 3. Lines per second, every copy its own line.
    {
        let node = AgentNode::start(NodeOptions {
            mode: "multitenant",
            extra: vec!["--audit-rate-limit".into(), "100000".into()],
            ..Default::default()
        });
        node.set_netnamespace("sender", 11);
        node.set_audit_logging("receiver", 12, r#"{"deny": "alert"}"#);
        let a = node.pod("sender", "a");
        let b = node.pod("receiver", "b");
        let pid = node.agent_pid().expect("agent pid");
        std::thread::sleep(Duration::from_secs(2));
        let before = lines(&node, "decision");
        let cpu_before = cpu_s(pid);
        let started = Instant::now();
        let mut port = 1024u16;
        let mut sent = 0u64;
        while started.elapsed() < Duration::from_secs(5) {
            let burst: Vec<Vec<u8>> = (0..200)
                .map(|_| {
                    port = if port == u16::MAX { 1024 } else { port + 1 };
                    udp_frame(Endpoint::pod(ip(&a)), port, Endpoint::pod(ip(&b)), 7, b"x")
                })
                .collect();
            send_frames(a.ns.name(), "eth0", &burst);
            sent += 200;
            std::thread::sleep(Duration::from_millis(5));
        }
        let sending = started.elapsed();
        // Until the agent has written what it will.
        let mut last = lines(&node, "decision");
        loop {
            std::thread::sleep(Duration::from_millis(500));
            let now = lines(&node, "decision");
            if now == last {
                break;
            }
            last = now;
        }
        let took = started.elapsed() - Duration::from_millis(500);
        let written = last - before;
        let cpu = cpu_s(pid) - cpu_before;
        eprintln!(
            "distinct denied connections: {sent} sent in {:.1} s; {written} lines written in {:.1} s ({:.0} lines/s), {} kept back by the queue; agent CPU {cpu:.2} s ({:.0} lines per CPU second)",
            sending.as_secs_f64(),
            took.as_secs_f64(),
            written as f64 / took.as_secs_f64(),
            suppressed(&node, "queue"),
            written as f64 / cpu.max(0.001),
        );
    }
    // 4. Allowed traffic at 10,000 new connections a second, logged and not.
    {
        let node = AgentNode::start(NodeOptions {
            mode: "multitenant",
            ..Default::default()
        });
        node.set_audit_logging("logged", 12, r#"{"allow": "info"}"#);
        node.set_netnamespace("plain", 13);
        let l1 = node.pod("logged", "l1");
        let l2 = node.pod("logged", "l2");
        let p1 = node.pod("plain", "p1");
        let p2 = node.pod("plain", "p2");
        std::thread::sleep(Duration::from_secs(1));
        let (mut logged, mut plain) = (0, 0);
        for round in 0..2u16 {
            logged += allowed_at_10k(&l2, &l1, 6000 + round);
            plain += allowed_at_10k(&p2, &p1, 6000 + round);
        }
        eprintln!(
            "allowed new connections at 10,000/s: {logged} of 6,000 received with logging on, {plain} of 6,000 with it off"
        );
    }
}

/// How many of 3,000 new UDP connections, sent at 10,000 a second in bursts of 100, reach
/// `port` of `to`.
fn allowed_at_10k(from: &CniPod<'_>, to: &CniPod<'_>, port: u16) -> u64 {
    sdn_tests::probe::udp_connections_received(
        (from.ns.name(), ip(from)),
        (to.ns.name(), ip(to)),
        port,
        3000,
        100,
    )
}
