//! Pod ADD/DEL benchmark through the real `sdn-cni` against a running `sdn-agent`, side by side in
//! the same run with the reference CNI `bridge` plugin + `host-local` invoked the same way, and
//! with the same per-pod OVS work done the way the reference agent did it (`ovs-vsctl` +
//! `ovs-ofctl` commands, serially). Prints p50/p90/p99 latency, pods/s and the ratios, and the
//! agent's RSS with many pods.
//!
//! Then dual stack against IPv4 only: two nodes, one of each, the same serial ADDs alternating
//! between them in short rounds (on a shared machine the noise comes and goes over seconds, and
//! long rounds let a burst land on one family only), each round after the other node's
//! background work settled (so that neither family pays for the other's), their p50/p99, the
//! ratio, and the flow rows per pod on each.
//!
//! Run: `cargo build --release --workspace && cargo bench -p sdn-tests --bench cni_pods`
//! Settings: `SDN_BENCH_PODS` (default 100), `SDN_BENCH_CONCURRENCY` (10),
//! `SDN_BENCH_RSS_PODS` (500; 0 skips the RSS step), `SDN_BENCH_DUAL` (1; 0 skips the dual-stack
//! comparison), `SDN_BENCH_DUAL_PODS` (the comparison's pod counts, `100,1000`, each on a fresh
//! pair of nodes), `SDN_BENCH_DUAL_FLAGS` (agent flags for both nodes of the comparison, e.g.
//! `--port-pool-size 0`), `SDN_BENCH_DUAL_ROUND` (pods per node before switching, 10).
//!
//! Every plugin is executed as a fresh process with a cleared environment plus the CNI
//! variables and the network config on stdin, as a runtime does. The bridge plugin is executed
//! from a thread inside the node's network namespace (where its bridge and host veths belong),
//! so it pays no extra `ip netns exec`. Timing is wall clock on a shared 2-core VM: compare
//! within one run, not across runs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sdn_tests::harness::{run, Netns};
use sdn_tests::node::{plugin_exec, workspace_bin, AgentNode, NodeOptions};
use serde_json::json;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Stats {
    lat: Vec<Duration>,
    wall: Duration,
}

impl Stats {
    fn pct(&self, p: f64) -> f64 {
        let mut v = self.lat.clone();
        v.sort();
        let i = ((v.len() as f64 - 1.0) * p).round() as usize;
        v[i].as_secs_f64() * 1000.0
    }
    fn rate(&self) -> f64 {
        self.lat.len() as f64 / self.wall.as_secs_f64()
    }
    fn row(&self, what: &str) {
        eprintln!(
            "| {what:<44} | {:>7.1} | {:>7.1} | {:>7.1} | {:>8.1} |",
            self.pct(0.5),
            self.pct(0.9),
            self.pct(0.99),
            self.rate()
        );
    }
}

/// Runs `op(i)` for i in 0..n on `c` threads; each op returns its own latency.
fn drive(n: usize, c: usize, op: &(dyn Fn(usize) -> Duration + Sync)) -> Stats {
    let start = Instant::now();
    let lat = std::thread::scope(|s| {
        let handles: Vec<_> = (0..c)
            .map(|t| s.spawn(move || (t..n).step_by(c).map(op).collect::<Vec<Duration>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("bench thread"))
            .collect()
    });
    Stats {
        lat,
        wall: start.elapsed(),
    }
}

/// One plugin exec for attachment (`cid`, eth0) in `netns`, as a runtime makes it; returns its
/// wall time and panics unless it succeeded.
fn exec_timed(bin: &Path, cmd: &str, cid: &str, netns: &str, conf: &str) -> Duration {
    let args = format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={cid}");
    let env = [
        ("CNI_COMMAND", cmd),
        ("CNI_CONTAINERID", cid),
        ("CNI_NETNS", netns),
        ("CNI_IFNAME", "eth0"),
        ("CNI_ARGS", args.as_str()),
        ("CNI_PATH", "/usr/lib/cni"),
    ];
    let t = Instant::now();
    let out = plugin_exec(bin, &env, conf);
    let d = t.elapsed();
    assert_eq!(
        out.code,
        0,
        "{} {cmd} failed: {}",
        bin.display(),
        out.stdout
    );
    d
}

/// The dual-stack comparison at each of `SDN_BENCH_DUAL_PODS`' pod counts.
fn dual_stack_comparisons(shim: &Path) {
    let counts = std::env::var("SDN_BENCH_DUAL_PODS").unwrap_or_else(|_| "100,1000".into());
    for count in counts.split(',') {
        let count: usize = count.trim().parse().unwrap_or_else(|_| {
            panic!("SDN_BENCH_DUAL_PODS: {count:?} is not a number of pods (e.g. 100,1000)")
        });
        dual_stack_against_ipv4(count, shim);
    }
}

fn main() {
    if env_usize("SDN_BENCH_DUAL_ONLY", 0) > 0 {
        dual_stack_comparisons(&workspace_bin("sdn-cni"));
        return;
    }
    let n = env_usize("SDN_BENCH_PODS", 100);
    let c = env_usize("SDN_BENCH_CONCURRENCY", 10);
    let rss_pods = env_usize("SDN_BENCH_RSS_PODS", 500);
    let bridge = PathBuf::from("/usr/lib/cni/bridge");
    assert!(
        bridge.is_file(),
        "the reference plugins are missing: apt-get install containernetworking-plugins"
    );

    let node = AgentNode::start(NodeOptions {
        // Room for the RSS step: a /20 per node.
        cluster_network: "10.128.0.0/14,12".into(),
        ..NodeOptions::default()
    });
    let pods: Vec<Netns> = (0..n).map(|_| Netns::new("sdnb")).collect();
    let id = |tag: &str, i: usize| format!("bench-{tag}-{i}");
    let shim = workspace_bin("sdn-cni");
    let conf = node.netconf("1.0.0").to_string();
    let paths: Vec<String> = pods.iter().map(Netns::path).collect();
    let ours = |cmd: &'static str, tag: &'static str| {
        let (shim, conf, paths) = (&shim, &conf, &paths);
        move |i: usize| exec_timed(shim, cmd, &id(tag, i), &paths[i], conf)
    };
    let ours_add = |tag| ours("ADD", tag);
    let ours_del = |tag| ours("DEL", tag);

    let data = node.dir().join("bench-host-local");
    let br_conf = json!({
        "cniVersion": "1.0.0", "name": "benchbr", "type": "bridge", "bridge": "cnibench0",
        "isGateway": true, "ipMasq": false, "mtu": 1450,
        "ipam": {"type": "host-local", "dataDir": data, "ranges": [[{"subnet": "10.200.0.0/16"}]]}
    })
    .to_string();
    // From a thread inside the node's namespace, where the bridge and host veths belong.
    let bridge_op = |cmd: &'static str, tag: &'static str| {
        let (bridge, conf, paths, node) = (&bridge, &br_conf, &paths, &node);
        move |i: usize| {
            let (bridge, conf) = (bridge.clone(), conf.clone());
            let (cid, ns) = (id(tag, i), paths[i].clone());
            node.ovs
                .ns()
                .run_inside(move || exec_timed(&bridge, cmd, &cid, &ns, &conf))
        }
    };

    eprintln!("\npods: {n}, concurrency: {c}; every row is one plugin exec per pod");
    eprintln!("| operation (latency ms per pod)                | p50     | p90     | p99     | pods/s   |");
    eprintln!(
        "|----------------------------------------------|---------|---------|---------|----------|"
    );
    // Warm up both (page cache, first-exec costs) with one pod each, not counted.
    drive(1, 1, &ours_add("warm"));
    drive(1, 1, &ours_del("warm"));
    drive(1, 1, &bridge_op("ADD", "warm"));
    drive(1, 1, &bridge_op("DEL", "warm"));

    let ours_serial = drive(n, 1, &ours_add("s"));
    ours_serial.row("sdn-cni + sdn-agent ADD, serial");
    let ours_del_serial = drive(n, 1, &ours_del("s"));
    ours_del_serial.row("sdn-cni + sdn-agent DEL, serial");
    let br_serial = drive(n, 1, &bridge_op("ADD", "s"));
    br_serial.row("bridge + host-local ADD, serial");
    let br_del_serial = drive(n, 1, &bridge_op("DEL", "s"));
    br_del_serial.row("bridge + host-local DEL, serial");
    let ours_par = drive(n, c, &ours_add("c"));
    ours_par.row(&format!("sdn-cni + sdn-agent ADD, concurrency {c}"));
    let ours_del_par = drive(n, c, &ours_del("c"));
    ours_del_par.row(&format!("sdn-cni + sdn-agent DEL, concurrency {c}"));
    let br_par = drive(n, c, &bridge_op("ADD", "c"));
    br_par.row(&format!("bridge + host-local ADD, concurrency {c}"));
    let br_del_par = drive(n, c, &bridge_op("DEL", "c"));
    br_del_par.row(&format!("bridge + host-local DEL, concurrency {c}"));
    let _ = node.ovs.exec_in_netns(&["ip", "link", "del", "cnibench0"]);

    // The reference agent's way: the same per-pod OVS work as ovs-vsctl / ovs-ofctl execs.
    let db = format!("--db=unix:{}", node.ovs.db_sock().display());
    let mgmt = format!("unix:{}", node.ovs.mgmt_sock("br0").display());
    for i in 0..n {
        node.ovs
            .exec_in_netns(&[
                "ip",
                "link",
                "add",
                &format!("vb{i}"),
                "type",
                "veth",
                "peer",
                "name",
                &format!("vb{i}p"),
            ])
            .expect("veth for the ovs-vsctl run");
    }
    let vsctl = |i: usize| -> Duration {
        let t = Instant::now();
        let port = format!("vb{i}");
        let ip = format!("10.128.{}.{}", 8 + i / 250, 1 + i % 250);
        run(
            "ovs-vsctl",
            &[
                &db,
                "--timeout=30",
                "add-port",
                "br0",
                &port,
                "--",
                "set",
                "Interface",
                &port,
                &format!("external_ids:sandbox=vsctl-{i}"),
                &format!("external_ids:ip={ip}"),
                "external_ids:namespace=default",
                &format!("external_ids:pod=p{i}"),
                "external_ids:ifname=eth0",
                &format!("external_ids:netns=/var/run/netns/x{i}"),
            ],
        )
        .expect("ovs-vsctl add-port");
        let ofport = run("ovs-vsctl", &[&db, "get", "Interface", &port, "ofport"]).expect("ofport");
        let ofport: u32 = ofport.trim().parse().expect("ofport number");
        let flows = flows::pod_flows(&flows::PodFlows {
            ofport,
            ip: Some(ip.parse().unwrap()),
            ipv6: None,
            vnid: flows::Vnid::GLOBAL,
            cookie: flows::port_cookie(&format!("vsctl-{i}")),
            egress_meter: None,
        });
        let text: Vec<String> = flows.iter().map(ToString::to_string).collect();
        let file = node.dir().join(format!("vsctl-{i}.flows"));
        std::fs::write(&file, text.join("\n")).unwrap();
        run(
            "ovs-ofctl",
            &[
                "-O",
                "OpenFlow13",
                "--bundle",
                "add-flows",
                &mgmt,
                &file.display().to_string(),
            ],
        )
        .expect("ovs-ofctl add-flows");
        t.elapsed()
    };
    let vs = drive(n, 1, &vsctl);
    vs.row("ovs-vsctl add-port + get ofport + ovs-ofctl, serial");
    for i in 0..n {
        let _ = run("ovs-vsctl", &[&db, "del-port", "br0", &format!("vb{i}")]);
        let _ = node
            .ovs
            .exec_in_netns(&["ip", "link", "del", &format!("vb{i}")]);
        let _ = run(
            "ovs-ofctl",
            &[
                "-O",
                "OpenFlow13",
                "del-flows",
                &mgmt,
                &format!("cookie={:#x}/-1", flows::port_cookie(&format!("vsctl-{i}"))),
            ],
        );
    }

    eprintln!();
    eprintln!(
        "ADD p50 ours/bridge: {:.2}x (target <= 1.5x); p99 ours/bridge: {:.2}x (target <= 3x)",
        ours_serial.pct(0.5) / br_serial.pct(0.5),
        ours_serial.pct(0.99) / br_serial.pct(0.99)
    );
    eprintln!(
        "ADD throughput ours at concurrency {c} / ovs-vsctl+ovs-ofctl serial: {:.1}x (target >= 5x)",
        ours_par.rate() / vs.rate()
    );
    eprintln!(
        "ADD throughput ours at concurrency {c} / ours serial: {:.1}x",
        ours_par.rate() / ours_serial.rate()
    );
    drop(pods);

    if env_usize("SDN_BENCH_DUAL", 1) > 0 {
        dual_stack_comparisons(&shim);
    }

    if rss_pods > 0 {
        let many: Vec<Netns> = (0..rss_pods).map(|_| Netns::new("sdnr")).collect();
        let rss_before = rss_kb(node.agent_pid().expect("agent runs"));
        let many_paths: Vec<String> = many.iter().map(Netns::path).collect();
        let op = |cmd: &'static str| {
            let (shim, conf, many_paths) = (&shim, &conf, &many_paths);
            move |i: usize| exec_timed(shim, cmd, &id("rss", i), &many_paths[i], conf)
        };
        let add = op("ADD");
        let st = drive(rss_pods, c, &add);
        let rss = rss_kb(node.agent_pid().expect("agent runs"));
        eprintln!(
            "agent RSS: {:.1} MB with 0 pods, {:.1} MB with {rss_pods} pods (target < 50 MB); \
             those {rss_pods} ADDs: p50 {:.1} ms, p99 {:.1} ms, {:.1} pods/s",
            rss_before as f64 / 1024.0,
            rss as f64 / 1024.0,
            st.pct(0.5),
            st.pct(0.99),
            st.rate()
        );
        let del = op("DEL");
        drive(rss_pods, c, &del);
        drop(many);
    }
    node.assert_no_pod_leftovers();
}

/// How long a node's background work may take to settle before the other node's round.
const SETTLE: Duration = Duration::from_millis(300);

/// Serial ADDs of `n` pods on an IPv4 node and on a dual-stack node, alternating in rounds of
/// `SDN_BENCH_DUAL_ROUND` pods (10), each after the other node settled;
/// prints both and the ratios the dual-stack issue targets (ADD p50 <= 1.15x, rows per pod
/// <= 2x), then deletes them all.
fn dual_stack_against_ipv4(n: usize, shim: &Path) {
    let base = NodeOptions {
        cluster_network: "10.128.0.0/14,12".into(),
        extra: std::env::var("SDN_BENCH_DUAL_FLAGS")
            .map(|v| v.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default(),
        ..NodeOptions::default()
    };
    let v4 = AgentNode::start(base.clone());
    let dual = AgentNode::start(base.dual_stack());
    let nodes = [&v4, &dual];
    let confs: Vec<String> = nodes
        .iter()
        .map(|n| n.netconf("1.0.0").to_string())
        .collect();
    let nss: Vec<Vec<Netns>> = nodes
        .iter()
        .map(|_| (0..n).map(|_| Netns::new("sdnd")).collect())
        .collect();
    let id = |k: usize, i: usize| format!("fam{k}-{i}");
    for (k, conf) in confs.iter().enumerate() {
        let warm = Netns::new("sdnw");
        exec_timed(shim, "ADD", &format!("warm{k}"), &warm.path(), conf);
        exec_timed(shim, "DEL", &format!("warm{k}"), &warm.path(), conf);
    }
    // CPU time (user + system, ms) of a node's agent and ovs-vswitchd so far.
    let cpu = |node: &AgentNode| {
        let pids = [node.agent_pid().map(|p| p as i32), node.ovs.vswitchd_pid()];
        pids.map(|p| p.map_or(0.0, cpu_ms))
    };
    let cpu_before: Vec<[f64; 2]> = nodes.iter().map(|n| cpu(n)).collect();
    let coverage_before: Vec<Vec<u64>> = nodes.iter().map(|n| coverage(n)).collect();
    let per = env_usize("SDN_BENCH_DUAL_ROUND", 10).max(1);
    let rounds = n.div_ceil(per);
    let mut lat: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    for r in 0..rounds {
        for (k, (nss, conf)) in nss.iter().zip(&confs).enumerate() {
            // The other node's background work (warming ports, repairs) ends before this
            // node's round: each family's ADDs meet only their own.
            std::thread::sleep(SETTLE);
            let round = (r * per)..((r + 1) * per).min(n);
            for (i, ns) in nss.iter().enumerate().take(round.end).skip(round.start) {
                lat[k].push(exec_timed(shim, "ADD", &id(k, i), &ns.path(), conf));
            }
        }
    }
    let cpu_used: Vec<[f64; 2]> = nodes
        .iter()
        .zip(&cpu_before)
        .map(|(node, before)| {
            let now = cpu(node);
            [now[0] - before[0], now[1] - before[1]]
        })
        .collect();
    let coverage_used: Vec<Vec<f64>> = nodes
        .iter()
        .zip(&coverage_before)
        .map(|(node, before)| {
            coverage(node)
                .iter()
                .zip(before)
                .map(|(now, b)| now.saturating_sub(*b) as f64 / n as f64)
                .collect()
        })
        .collect();
    let rows: Vec<f64> = nodes
        .iter()
        .map(|node| node.pod_flows().len() as f64 / n as f64)
        .collect();
    let stats: Vec<Stats> = lat
        .into_iter()
        .map(|lat| Stats {
            wall: lat.iter().sum(),
            lat,
        })
        .collect();
    eprintln!(
        "\ndual stack against IPv4 only, {n} serial ADDs each, alternating every {per} pod(s):"
    );
    stats[0].row("IPv4-only node ADD, serial");
    stats[1].row("dual-stack node ADD, serial");
    eprintln!(
        "ADD p50 dual/IPv4: {:.2}x (target <= 1.15x); p99 dual/IPv4: {:.2}x; flow rows per pod: \
         IPv4 {:.1}, dual {:.1} ({:.2}x, target <= 2x)",
        stats[1].pct(0.5) / stats[0].pct(0.5),
        stats[1].pct(0.99) / stats[0].pct(0.99),
        rows[0],
        rows[1],
        rows[1] / rows[0]
    );
    // Where the time went: the agent's own time per ADD (its "pod wired" line's `ms`), and how
    // many ADDs found a warm port.
    for (k, node) in nodes.iter().enumerate() {
        let log = node.log();
        let wired: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("pod wired") && l.contains(&format!("sandbox=fam{k}-")))
            .collect();
        let mut ms: Vec<f64> = wired
            .iter()
            .filter_map(|l| {
                l.split(" ms=")
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .collect();
        ms.sort_by(f64::total_cmp);
        let warm = wired
            .iter()
            .filter(|l| l.contains("warm_port=true"))
            .count();
        // When each step began (its `ms_before` mark), p50 over the ADDs.
        let mut marks: Vec<(String, Vec<f64>)> = Vec::new();
        for l in &wired {
            let Some(before) = l.split("ms_before=").nth(1) else {
                continue;
            };
            let before = before.split(" ms=").next().unwrap_or_default();
            for mark in before.split(',') {
                let Some((step, at)) = mark.rsplit_once(':') else {
                    continue;
                };
                let Ok(at) = at.parse::<f64>() else { continue };
                match marks.iter_mut().find(|(s, _)| s == step) {
                    Some((_, v)) => v.push(at),
                    None => marks.push((step.to_string(), vec![at])),
                }
            }
        }
        let steps: Vec<String> = marks
            .iter_mut()
            .map(|(step, v)| {
                v.sort_by(f64::total_cmp);
                format!("{step} at {:.1}", v[v.len() / 2])
            })
            .collect();
        eprintln!(
            "  {}: agent time per ADD p50 {:.1} ms, p90 {:.1} ms; {warm} of {} ADDs took a warm port",
            ["IPv4-only", "dual-stack"][k],
            ms.get(ms.len() / 2).copied().unwrap_or_default(),
            ms.get(ms.len() * 9 / 10).copied().unwrap_or_default(),
            wired.len()
        );
        eprintln!("    steps began (p50, ms): {}", steps.join("; "));
        eprintln!(
            "    CPU per ADD (the ADD and the background work it brings): agent {:.2} ms, \
             ovs-vswitchd {:.2} ms",
            cpu_used[k][0] / n as f64,
            cpu_used[k][1] / n as f64
        );
        let counters: Vec<String> = COVERAGE
            .iter()
            .zip(&coverage_used[k])
            .map(|(name, v)| format!("{name} {v:.2}"))
            .collect();
        eprintln!("    ovs-vswitchd events per ADD: {}", counters.join(", "));
    }
    for (k, (nss, conf)) in nss.iter().zip(&confs).enumerate() {
        for (i, ns) in nss.iter().enumerate() {
            exec_timed(shim, "DEL", &id(k, i), &ns.path(), conf);
        }
    }
    for node in nodes {
        node.assert_no_pod_leftovers();
    }
}

/// ovs-vswitchd's coverage counters the dual-stack comparison prints per ADD: packets it
/// received from ports, main-loop wake-ups, bridge reconfigurations, revalidations for flow
/// table changes, upcalls translated, OpenFlow messages received.
const COVERAGE: [&str; 6] = [
    "netdev_received",
    "poll_create_node",
    "bridge_reconfigure",
    "rev_flow_table",
    "xlate_actions",
    "ofproto_recv_openflow",
];

/// [`COVERAGE`]'s totals on `node`'s ovs-vswitchd (`ovs-appctl coverage/read-counter`).
fn coverage(node: &AgentNode) -> Vec<u64> {
    let ctl = node.ovs.vswitchd_ctl().display().to_string();
    COVERAGE
        .iter()
        .map(|name| {
            let out = run("ovs-appctl", &["-t", &ctl, "coverage/read-counter", name])
                .unwrap_or_else(|e| panic!("ovs-appctl coverage/read-counter {name}: {e}"));
            out.trim()
                .parse()
                .unwrap_or_else(|_| panic!("coverage/read-counter {name} said {out:?}"))
        })
        .collect()
}

/// CPU time (user + system) process `pid` has used, in milliseconds (0 when it is gone).
fn cpu_ms(pid: i32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // After the command's closing parenthesis: state is field 3, utime 14 and stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|i| f.get(*i)?.parse::<f64>().ok())
        .sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks * 1000.0 / hz
}

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
