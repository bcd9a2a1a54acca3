//! Pod ADD/DEL benchmark through the real `sdn-cni` against a running `sdn-agent`, side by side in
//! the same run with the reference CNI `bridge` plugin + `host-local` invoked the same way, and
//! with the same per-pod OVS work done the way the reference agent did it (`ovs-vsctl` +
//! `ovs-ofctl` commands, serially). Prints p50/p90/p99 latency, pods/s and the ratios, and the
//! agent's RSS with many pods.
//!
//! Run: `cargo build --release --workspace && cargo bench -p sdn-tests --bench cni_pods`
//! Settings: `SDN_BENCH_PODS` (default 100), `SDN_BENCH_CONCURRENCY` (10),
//! `SDN_BENCH_RSS_PODS` (500; 0 skips the RSS step).
//!
//! Every plugin is executed as a fresh process with a cleared environment plus the CNI
//! variables and the network config on stdin, as a runtime does. The bridge plugin is executed
//! from a thread inside the node's network namespace (where its bridge and host veths belong),
//! so it pays no extra `ip netns exec`. Timing is wall clock on a shared 2-core VM: compare
//! within one run, not across runs.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sdn_tests::harness::{run, Netns};
use sdn_tests::node::{cni_exec, AgentNode, CniOutcome, NodeOptions};
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

fn timed(f: impl FnOnce() -> CniOutcome, what: &str) -> Duration {
    let t = Instant::now();
    let out = f();
    let d = t.elapsed();
    assert_eq!(out.code, 0, "{what} failed: {}", out.stdout);
    d
}

fn setns_thread<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    use std::os::fd::AsRawFd;
    let path = format!("/var/run/netns/{ns}");
    std::thread::scope(|s| {
        s.spawn(move || {
            let file = std::fs::File::open(&path).expect("netns");
            // SAFETY: setns affects only this thread.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}");
            f()
        })
        .join()
        .expect("netns thread")
    })
}

fn main() {
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
    let netns = |i: usize| format!("/var/run/netns/{}", pods[i].name());
    let id = |tag: &str, i: usize| format!("bench-{tag}-{i}");
    let conf = node.netconf("1.0.0").to_string();
    let ours_add = |tag: &'static str| {
        let conf = conf.clone();
        move |i: usize| {
            let (cid, ns) = (id(tag, i), netns(i));
            let args = format!("K8S_POD_NAMESPACE=default;K8S_POD_NAME=p{i}");
            timed(
                || {
                    cni_exec(
                        &[
                            ("CNI_COMMAND", "ADD"),
                            ("CNI_CONTAINERID", &cid),
                            ("CNI_NETNS", &ns),
                            ("CNI_IFNAME", "eth0"),
                            ("CNI_ARGS", &args),
                            ("CNI_PATH", "/opt/cni/bin"),
                        ],
                        &conf,
                    )
                },
                "sdn-cni ADD",
            )
        }
    };
    let ours_del = |tag: &'static str| {
        let conf = conf.clone();
        move |i: usize| {
            let (cid, ns) = (id(tag, i), netns(i));
            timed(
                || {
                    cni_exec(
                        &[
                            ("CNI_COMMAND", "DEL"),
                            ("CNI_CONTAINERID", &cid),
                            ("CNI_NETNS", &ns),
                            ("CNI_IFNAME", "eth0"),
                        ],
                        &conf,
                    )
                },
                "sdn-cni DEL",
            )
        }
    };

    let data = node.dir().join("bench-host-local");
    let br_conf = json!({
        "cniVersion": "1.0.0", "name": "benchbr", "type": "bridge", "bridge": "cnibench0",
        "isGateway": true, "ipMasq": false, "mtu": 1450,
        "ipam": {"type": "host-local", "dataDir": data, "ranges": [[{"subnet": "10.200.0.0/16"}]]}
    })
    .to_string();
    let node_ns = node.ovs.netns().to_string();
    let bridge_op = |cmd: &'static str, tag: &'static str| {
        let (conf, node_ns) = (br_conf.clone(), node_ns.clone());
        move |i: usize| {
            let (cid, ns) = (id(tag, i), netns(i));
            setns_thread(&node_ns, || {
                timed(
                    || {
                        cni_exec_bin(
                            "/usr/lib/cni/bridge",
                            &[
                                ("CNI_COMMAND", cmd),
                                ("CNI_CONTAINERID", &cid),
                                ("CNI_NETNS", &ns),
                                ("CNI_IFNAME", "eth0"),
                                ("CNI_PATH", "/usr/lib/cni"),
                            ],
                            &conf,
                        )
                    },
                    cmd,
                )
            })
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
            ip: ip.parse().unwrap(),
            vnid: 0,
            cookie: flows::pod_cookie(&format!("vsctl-{i}"), "eth0"),
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
                &format!(
                    "cookie={:#x}/-1",
                    flows::pod_cookie(&format!("vsctl-{i}"), "eth0")
                ),
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

    if rss_pods > 0 {
        let many: Vec<Netns> = (0..rss_pods).map(|_| Netns::new("sdnr")).collect();
        let rss_before = rss_kb(node.agent_pid().expect("agent runs"));
        let many_netns = |i: usize| format!("/var/run/netns/{}", many[i].name());
        let add = |i: usize| {
            let (cid, ns) = (id("rss", i), many_netns(i));
            timed(
                || {
                    cni_exec(
                        &[
                            ("CNI_COMMAND", "ADD"),
                            ("CNI_CONTAINERID", &cid),
                            ("CNI_NETNS", &ns),
                            ("CNI_IFNAME", "eth0"),
                        ],
                        &conf,
                    )
                },
                "ADD",
            )
        };
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
        let del = |i: usize| {
            let (cid, ns) = (id("rss", i), many_netns(i));
            timed(
                || {
                    cni_exec(
                        &[
                            ("CNI_COMMAND", "DEL"),
                            ("CNI_CONTAINERID", &cid),
                            ("CNI_NETNS", &ns),
                            ("CNI_IFNAME", "eth0"),
                        ],
                        &conf,
                    )
                },
                "DEL",
            )
        };
        drive(rss_pods, c, &del);
        drop(many);
    }
    node.assert_no_pod_leftovers();
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

/// Like `cni_exec`, for another plugin binary.
fn cni_exec_bin(bin: &str, env: &[(&str, &str)], stdin: &str) -> CniOutcome {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(bin)
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn plugin");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("stdin");
    let out = child.wait_with_output().expect("plugin output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    CniOutcome {
        code: out.status.code().unwrap_or(-1),
        json: serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null),
        stdout,
    }
}
