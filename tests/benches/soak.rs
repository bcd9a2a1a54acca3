//! Soak: an operator's worst night on one standalone node, for N minutes, and whether anything
//! drifts, leaks, loses a pod or breaks isolation.
//!
//! Each cycle: 30 pod ADDs over 4 tenants (20 one after another, 10 at once) beside 4 resident
//! pods (one per tenant, alive for the whole run); every new pod probed from its tenant's
//! resident pod (must answer) and from the next tenant's (must not); a join (tenant 1 into
//! tenant 0's VNID: their residents reach each other) and an isolate back (they do not); 30
//! DELs (the first after its netns was deleted, the second repeated). Every 5th cycle the agent
//! is SIGKILLed 30 ms into the burst of 10 and started again as a node would (the runtime
//! retries each cut ADD with DEL + ADD); twice in every 10 cycles ovs-vswitchd is SIGKILLed and
//! started again while pods exist, once alone and once in the cycle whose burst the agent died
//! in (every pod of the cycle must answer its tenant again within 10 s).
//!
//! After every cycle, once deleted pods are retired: the census (exactly the residents' ports,
//! veths, leases and pod flows; every table-20 row on a port that has that number now; the
//! pool's rows exactly the ports the agent holds), and a sample of the agent's RSS, open files
//! and threads, br0's flows (without the warm pool ports'), OVSDB Interface rows, leases,
//! iptables lines, pool rows, and ADD/DEL latency. At the end the drift of each sample is
//! fitted (least squares over the cycles after the first tenth) and the run fails on a finding:
//! a lost pod, an isolation violation, a census mismatch, a count that does not come back to
//! its value, RSS (10% and 2 MB), open files (2) or threads (4) whose median over the last
//! quarter of the cycles exceeds that of the first, or an ADD p50 that doubles.
//!
//! Run: `cargo build --release --workspace && SDN_SOAK_MINUTES=20 cargo bench -p sdn-tests
//! --bench soak` (not part of the test command). Settings: `SDN_SOAK_MINUTES` (20),
//! `SDN_SOAK_PODS` (30 per cycle). Exit status 1 on any finding. Timing is wall clock on a
//! shared machine: latency is compared within one run (first tenth against last tenth).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use sdn_tests::harness::{run, wait_until, Netns};
use sdn_tests::node::{AgentNode, NodeOptions};
use sdn_tests::probe;

const TENANTS: [(&str, u32); 4] = [
    ("soak-a", 21),
    ("soak-b", 22),
    ("soak-c", 23),
    ("soak-d", 24),
];
const POOL: usize = 64;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A pod of the soak.
struct SoakPod {
    ns: Netns,
    id: String,
    tenant: usize,
    ip: Option<Ipv4Addr>,
}

impl SoakPod {
    fn new(serial: &mut u64, tenant: usize) -> SoakPod {
        *serial += 1;
        let ns = Netns::new("sdnsoak");
        SoakPod {
            id: format!("{}-s{serial}", ns.name()),
            ns,
            tenant,
            ip: None,
        }
    }

    /// ADD as a runtime calls it; `Some(latency)` on success.
    /// The ADD's time, or the plugin's answer when it failed.
    fn add(&mut self, node: &AgentNode) -> Result<Duration, String> {
        let args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={}",
            TENANTS[self.tenant].0, self.id
        );
        let began = Instant::now();
        let out = node.add(&self.id, &self.ns.path(), &args);
        let took = began.elapsed();
        if out.code != 0 {
            return Err(format!("code {}: {}", out.code, out.stdout.trim()));
        }
        self.ip = out.ip().and_then(|a| a.parse().ok());
        Ok(took)
    }

    fn del(&self, node: &AgentNode) -> Result<Duration, String> {
        let began = Instant::now();
        let out = node.del(&self.id, &self.ns.path());
        if out.code == 0 {
            Ok(began.elapsed())
        } else {
            Err(out.stdout)
        }
    }
}

/// One cycle's figures.
#[derive(Debug, Clone, Default)]
struct Sample {
    rss_kb: f64,
    fds: f64,
    threads: f64,
    flows: f64,
    interfaces: f64,
    leases: f64,
    iptables: f64,
    pool_rows: f64,
    add_ms: Vec<f64>,
    del_ms: Vec<f64>,
}

/// `/proc/<pid>/status` field `key` (kB for VmRSS).
fn proc_status(pid: u32, key: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

fn sample(node: &AgentNode) -> Sample {
    let pid = node.agent_pid().expect("the agent runs");
    let pool = node.pool_ports();
    let warm: Vec<String> = pool
        .iter()
        .map(|p| format!("cookie={:#x},", flows::port_cookie(p)))
        .collect();
    let flows = node
        .flows()
        .iter()
        .filter(|l| !warm.iter().any(|w| l.starts_with(w.as_str())))
        .count();
    let iptables = node
        .ovs
        .exec_in_netns(&["iptables-save"])
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with(':'))
        .count();
    Sample {
        rss_kb: proc_status(pid, "VmRSS:"),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(f64::NAN, |d| d.count() as f64),
        threads: proc_status(pid, "Threads:"),
        flows: flows as f64,
        interfaces: node.interfaces().len() as f64 - pool.len() as f64,
        leases: node.leases().len() as f64,
        iptables: iptables as f64,
        pool_rows: pool.len() as f64,
        ..Sample::default()
    }
}

fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Least-squares slope of `ys` over their index.
fn slope(ys: &[f64]) -> f64 {
    let n = ys.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mx = (n - 1.0) / 2.0;
    let my = ys.iter().sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for (i, y) in ys.iter().enumerate() {
        num += (i as f64 - mx) * (y - my);
        den += (i as f64 - mx).powi(2);
    }
    num / den
}

/// Probes `(from netns, to)` pairs at once; `true` where an ICMP echo was answered.
fn probe_all(pairs: &[(String, Ipv4Addr)], timeout: Duration) -> Vec<bool> {
    probe::parallel(
        pairs
            .iter()
            .map(|(ns, ip)| move || probe::icmp_probe(ns, *ip, timeout)),
    )
}

fn main() {
    sdn_tests::harness::require_root_and_ovs();
    let minutes = env_u64("SDN_SOAK_MINUTES", 20);
    let per_cycle = env_u64("SDN_SOAK_PODS", 30) as usize;
    let node = AgentNode::start(NodeOptions {
        extra: vec!["--port-pool-size".into(), POOL.to_string()],
        ..NodeOptions::default()
    });
    for (t, vnid) in TENANTS {
        node.set_netnamespace(t, vnid);
    }
    let mut serial = 0;
    let mut residents: Vec<SoakPod> = (0..TENANTS.len())
        .map(|t| {
            let mut p = SoakPod::new(&mut serial, t);
            p.add(&node)
                .unwrap_or_else(|e| panic!("a resident pod: {e}"));
            p
        })
        .collect();
    let resident_ns: Vec<String> = residents.iter().map(|p| p.ns.name().to_string()).collect();
    let mut findings: Vec<String> = Vec::new();
    let mut samples: Vec<Sample> = Vec::new();
    let (mut calls, mut agent_kills, mut switch_kills, mut cut_adds) = (0u64, 0u64, 0u64, 0u64);
    let mut recoveries: Vec<f64> = Vec::new();
    let began = Instant::now();
    let deadline = began + Duration::from_secs(minutes * 60);
    eprintln!(
        "soak: {minutes} min, {per_cycle} pods a cycle over {} tenants, pool {POOL}",
        TENANTS.len()
    );
    eprintln!(
        "| cycle | RSS MB | fds | threads | flows | rows | leases | iptables | pool | ADD p50 ms | DEL p50 ms | event |"
    );
    let mut cycle = 0u64;
    // At least one cycle, however short the run asked for.
    while cycle == 0 || Instant::now() < deadline {
        let kill_agent = cycle % 5 == 4;
        // ovs-vswitchd alone, and in the cycle whose burst the agent dies in too.
        let kill_switch = cycle % 10 == 2 || cycle % 10 == 9;
        let mut s_add = Vec::new();
        let mut s_del = Vec::new();
        let mut pods: Vec<SoakPod> = (0..per_cycle)
            .map(|i| SoakPod::new(&mut serial, i % TENANTS.len()))
            .collect();
        let serial_n = per_cycle * 2 / 3;
        for p in pods.iter_mut().take(serial_n) {
            calls += 1;
            match p.add(&node) {
                Ok(t) => s_add.push(t.as_secs_f64() * 1000.0),
                Err(e) => findings.push(format!(
                    "cycle {cycle}: ADD {} failed outside a kill: {e}",
                    p.id
                )),
            }
        }
        // The burst, at once; the agent killed 30 ms into it on a kill cycle.
        let outcomes: Vec<Result<Duration, String>> = std::thread::scope(|s| {
            let node = &node;
            let handles: Vec<_> = pods[serial_n..]
                .iter_mut()
                .map(|p| s.spawn(move || p.add(node)))
                .collect();
            if kill_agent {
                std::thread::sleep(Duration::from_millis(30));
                node.stop_agent(libc::SIGKILL);
                node.start_agent();
            }
            handles
                .into_iter()
                .map(|h| h.join().expect("an ADD thread"))
                .collect()
        });
        calls += outcomes.len() as u64;
        if kill_agent {
            agent_kills += 1;
        }
        for (p, o) in pods[serial_n..].iter_mut().zip(outcomes) {
            match o {
                Ok(t) if !kill_agent => s_add.push(t.as_secs_f64() * 1000.0),
                Ok(_) => {}
                Err(_) if kill_agent => {
                    cut_adds += 1;
                    calls += 2;
                    if let Err(e) = p.del(&node) {
                        findings.push(format!("cycle {cycle}: DEL of a cut ADD failed: {e}"));
                    }
                    if let Err(e) = p.add(&node) {
                        findings.push(format!(
                            "cycle {cycle}: DEL + ADD of a cut ADD ({}) failed: {e}",
                            p.id
                        ));
                    }
                }
                Err(e) => findings.push(format!(
                    "cycle {cycle}: ADD {} failed outside a kill: {e}",
                    p.id
                )),
            }
        }
        // Reachability and isolation of every new pod, from the residents.
        let live: Vec<&SoakPod> = pods.iter().filter(|p| p.ip.is_some()).collect();
        let mut pairs = Vec::new();
        for p in &live {
            let ip = p.ip.expect("live");
            pairs.push((resident_ns[p.tenant].clone(), ip));
            pairs.push((resident_ns[(p.tenant + 1) % TENANTS.len()].clone(), ip));
        }
        let mut answered = probe_all(&pairs, Duration::from_millis(1000));
        // A same-tenant probe that got no answer is tried again for up to 5 s before it counts.
        for (k, p) in live.iter().enumerate() {
            if !answered[2 * k] {
                let (ns, ip) = pairs[2 * k].clone();
                answered[2 * k] = wait_until(Duration::from_secs(5), || {
                    probe::icmp_probe(&ns, ip, Duration::from_millis(500))
                });
                if !answered[2 * k] {
                    findings.push(format!(
                        "cycle {cycle}: lost pod {} ({}, {}) does not answer its tenant",
                        p.id, ip, TENANTS[p.tenant].0
                    ));
                }
            }
            if answered[2 * k + 1] {
                findings.push(format!(
                    "cycle {cycle}: isolation broken: {} reached {} of another tenant",
                    pairs[2 * k + 1].0,
                    pairs[2 * k + 1].1
                ));
            }
        }
        // A join and an isolate.
        let (a, b) = (&residents[0], &residents[1]);
        let (a_ip, b_ip) = (a.ip.expect("resident"), b.ip.expect("resident"));
        for (vnid, want) in [(TENANTS[0].1, true), (TENANTS[1].1, false)] {
            node.set_netnamespace(TENANTS[1].0, vnid);
            if !wait_until(Duration::from_secs(10), || {
                node.flowed_vnid(&b_ip.to_string()) == Some(vnid)
            }) {
                findings.push(format!(
                    "cycle {cycle}: VNID {vnid} not applied within 10 s"
                ));
            }
            node.datapath_settled();
            let got = if want {
                wait_until(Duration::from_secs(5), || {
                    probe::icmp_probe(a.ns.name(), b_ip, Duration::from_millis(500))
                })
            } else {
                probe::icmp_probe(a.ns.name(), b_ip, Duration::from_millis(1000))
            };
            if got != want {
                findings.push(format!(
                    "cycle {cycle}: after {} {a_ip} -> {b_ip} answered {got}",
                    if want { "the join" } else { "the isolate" }
                ));
            }
        }
        // ovs-vswitchd killed and started again while pods exist.
        let mut event = if kill_agent { "agent -9" } else { "" }.to_string();
        if kill_switch {
            switch_kills += 1;
            node.ovs.kill_vswitchd();
            node.ovs.start_vswitchd();
            let t = Instant::now();
            let back = wait_until(Duration::from_secs(10), || {
                live.iter().all(|p| {
                    probe::icmp_probe(
                        &resident_ns[p.tenant],
                        p.ip.expect("live"),
                        Duration::from_millis(300),
                    )
                })
            });
            recoveries.push(t.elapsed().as_secs_f64());
            if !back {
                findings.push(format!(
                    "cycle {cycle}: pods not all reachable 10 s after ovs-vswitchd restarted"
                ));
            }
            event = format!(
                "{event} vswitchd -9 (back {:.1} s)",
                t.elapsed().as_secs_f64()
            );
        }
        // DELs: the first after its netns went, the second twice.
        for (k, p) in pods.iter().enumerate() {
            if k == 0 {
                let _ = run("ip", &["netns", "delete", p.ns.name()]);
            }
            for _ in 0..if k == 1 { 2 } else { 1 } {
                calls += 1;
                match p.del(&node) {
                    Ok(t) => s_del.push(t.as_secs_f64() * 1000.0),
                    Err(e) => findings.push(format!("cycle {cycle}: DEL {} failed: {e}", p.id)),
                }
            }
        }
        drop(pods);
        // The census once the deleted pods are retired.
        let resident_ports = residents.len();
        if !wait_until(Duration::from_secs(10), || {
            node.pod_ports().len() == resident_ports && node.leases().len() == resident_ports
        }) {
            findings.push(format!(
                "cycle {cycle}: {} pod ports and {} leases for {resident_ports} pods",
                node.pod_ports().len(),
                node.leases().len()
            ));
        }
        let mut off = Vec::new();
        if !wait_until(Duration::from_secs(10), || {
            off = node.rows_off_their_ports();
            off.is_empty()
        }) {
            findings.push(format!("cycle {cycle}: rows off their ports: {off:?}"));
        }
        if !wait_until(Duration::from_secs(10), || {
            node.pool_ports().len() == node.pool_held()
        }) {
            findings.push(format!(
                "cycle {cycle}: {} pool rows, the agent holds {}",
                node.pool_ports().len(),
                node.pool_held()
            ));
        }
        if node.veths().len() != resident_ports {
            findings.push(format!("cycle {cycle}: veths {:?}", node.veths()));
        }
        let mut s = sample(&node);
        s.add_ms = s_add;
        s.del_ms = s_del;
        eprintln!(
            "| {cycle:>5} | {:>6.1} | {:>3} | {:>7} | {:>5} | {:>4} | {:>6} | {:>8} | {:>4} | {:>10.1} | {:>10.1} | {event} |",
            s.rss_kb / 1024.0,
            s.fds,
            s.threads,
            s.flows,
            s.interfaces,
            s.leases,
            s.iptables,
            s.pool_rows,
            pct(&s.add_ms, 0.5),
            pct(&s.del_ms, 0.5),
        );
        samples.push(s);
        cycle += 1;
    }
    // Drift: the cycles after the first tenth.
    let skip = (samples.len() / 10)
        .max(1)
        .min(samples.len().saturating_sub(2));
    let tail = &samples[skip..];
    let series = |f: &dyn Fn(&Sample) -> f64| -> Vec<f64> { tail.iter().map(f).collect() };
    let mut fits = BTreeMap::new();
    for (name, ys) in [
        ("rss_kb", series(&|s| s.rss_kb)),
        ("fds", series(&|s| s.fds)),
        ("threads", series(&|s| s.threads)),
        ("flows", series(&|s| s.flows)),
        ("interfaces", series(&|s| s.interfaces)),
        ("leases", series(&|s| s.leases)),
        ("iptables", series(&|s| s.iptables)),
    ] {
        let first = ys.first().copied().unwrap_or(f64::NAN);
        let last = ys.last().copied().unwrap_or(f64::NAN);
        let k = slope(&ys);
        fits.insert(name, (first, last, k, k * ys.len() as f64));
    }
    // Counts come back exactly; RSS may wander within 10% (agent restarts start it afresh),
    // files and threads within 2.
    for name in ["flows", "interfaces", "leases", "iptables"] {
        let ys = series(&|s| match name {
            "flows" => s.flows,
            "interfaces" => s.interfaces,
            "leases" => s.leases,
            _ => s.iptables,
        });
        let lo = ys.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ys.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if hi != lo {
            findings.push(format!(
                "{name} did not come back to one value: {lo} .. {hi}"
            ));
        }
    }
    // RSS, files and threads: the median of the last quarter of the cycles against that of the
    // first quarter (after the first tenth): agent restarts start them afresh and the runtime's
    // blocking threads come and go, so single samples wander.
    let quarter = (tail.len() / 4).max(1);
    let median = |f: &dyn Fn(&Sample) -> f64, part: &[Sample]| -> f64 {
        pct(&part.iter().map(f).collect::<Vec<_>>(), 0.5)
    };
    let grown = |f: &dyn Fn(&Sample) -> f64| -> (f64, f64) {
        (
            median(f, &tail[..quarter]),
            median(f, &tail[tail.len() - quarter..]),
        )
    };
    let (rss_a, rss_b) = grown(&|s| s.rss_kb);
    if rss_b > rss_a * 1.10 && rss_b - rss_a > 2048.0 {
        findings.push(format!(
            "RSS grows: median {:.1} MB -> {:.1} MB",
            rss_a / 1024.0,
            rss_b / 1024.0
        ));
    }
    let (fds_a, fds_b) = grown(&|s| s.fds);
    if fds_b > fds_a + 2.0 {
        findings.push(format!("open files grow: median {fds_a} -> {fds_b}"));
    }
    let (thr_a, thr_b) = grown(&|s| s.threads);
    if thr_b > thr_a + 4.0 {
        findings.push(format!("threads grow: median {thr_a} -> {thr_b}"));
    }
    eprintln!(
        "medians, first quarter -> last quarter: RSS {:.1} -> {:.1} MB, open files {fds_a} -> {fds_b}, threads {thr_a} -> {thr_b}",
        rss_a / 1024.0,
        rss_b / 1024.0
    );
    let tenth = (samples.len() / 10).max(1);
    let adds = |s: &[Sample]| -> Vec<f64> { s.iter().flat_map(|x| x.add_ms.clone()).collect() };
    let dels = |s: &[Sample]| -> Vec<f64> { s.iter().flat_map(|x| x.del_ms.clone()).collect() };
    let (add_first, add_last) = (
        pct(&adds(&samples[..tenth]), 0.5),
        pct(&adds(&samples[samples.len() - tenth..]), 0.5),
    );
    let (del_first, del_last) = (
        pct(&dels(&samples[..tenth]), 0.5),
        pct(&dels(&samples[samples.len() - tenth..]), 0.5),
    );
    eprintln!(
        "\nsoak: {:.1} min, {cycle} cycles, {calls} CNI calls, {agent_kills} agent kills ({cut_adds} ADDs cut, each DEL + ADD again), {switch_kills} ovs-vswitchd kills (pods back in {:.1}-{:.1} s)",
        began.elapsed().as_secs_f64() / 60.0,
        recoveries.iter().copied().fold(f64::INFINITY, f64::min),
        recoveries.iter().copied().fold(0.0, f64::max),
    );
    eprintln!("| sample | after the first tenth | last | fitted drift over the run |");
    for (name, (first, last, _, growth)) in &fits {
        eprintln!("| {name} | {first:.0} | {last:.0} | {growth:+.1} |");
    }
    eprintln!(
        "ADD p50 {add_first:.1} ms (first tenth) -> {add_last:.1} ms (last tenth), {:.2}x; DEL p50 {del_first:.1} -> {del_last:.1} ms, {:.2}x",
        add_last / add_first,
        del_last / del_first
    );
    if add_last > add_first * 2.0 {
        findings.push(format!(
            "ADD p50 grew {:.2}x from the first tenth to the last",
            add_last / add_first
        ));
    }
    for p in residents.drain(..) {
        let _ = p.del(&node);
    }
    // Stopped here, before the exit status: `exit` runs no destructor, and the node's daemons,
    // namespaces and directory go in the node's.
    drop(node);
    eprintln!("findings: {}", findings.len());
    for f in &findings {
        eprintln!("  {f}");
    }
    if !findings.is_empty() {
        std::process::exit(1);
    }
}
