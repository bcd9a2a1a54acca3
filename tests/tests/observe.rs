//! What an operator sees of a running node, against a real node (private OVS, the real agent,
//! pods through the real shim): the metrics endpoint scraped with curl after known actions
//! (pods added, an ADD refused for a missing NetNamespace, a VNID change, flows and a port
//! deleted behind the agent's back), every table's flow gauge against `ovs-ofctl`'s dump,
//! `/livez` and `/readyz` (and CNI STATUS saying the same) with the switch up and stopped,
//! `sdnctl status|pods|flows|log-level|log` over the local API, JSON logs, and the Kubernetes
//! mode hints of the tenant commands.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use sdn_tests::harness::{wait_until, workspace_bin};
use sdn_tests::node::{AgentNode, NodeOptions};
use serde_json::Value;

/// `curl` of `path` on the agent's metrics address, inside the node's namespace: (status, body).
fn http(node: &AgentNode, path: &str) -> (u16, String) {
    let url = format!("http://127.0.0.1:9101{path}");
    let out = node
        .ovs
        .exec_in_netns(&["curl", "-sS", "-m", "10", "-w", "\n%{http_code}", &url])
        .unwrap_or_else(|e| panic!("curl {url}: {e}"));
    let (body, code) = out.trim_end().rsplit_once('\n').unwrap_or(("", out.trim()));
    (code.parse().unwrap_or(0), body.to_string())
}

/// Every sample of a scrape: `name{labels}` → value.
fn scrape(node: &AgentNode) -> BTreeMap<String, f64> {
    node.metrics()
}

fn get(m: &BTreeMap<String, f64>, key: &str) -> f64 {
    m.get(key).copied().unwrap_or(0.0)
}

/// sdnctl against the node's local API.
fn sdnctl(node: &AgentNode, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(workspace_bin("sdnctl"))
        .arg("--api-socket")
        .arg(node.dir().join("run/api.sock"))
        .args(args)
        .env_remove("SDN_CONFIG")
        .env_remove("SDN_API_SOCKET")
        .output()
        .expect("run sdnctl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn sdnctl_json(node: &AgentNode, args: &[&str]) -> Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    let (code, stdout, stderr) = sdnctl(node, &a);
    assert_eq!(code, 0, "sdnctl {args:?}: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// Flows per table number as `ovs-ofctl dump-flows` shows them.
fn dumped_per_table(node: &AgentNode) -> BTreeMap<u8, usize> {
    let mut out = BTreeMap::new();
    for f in node.flows() {
        let t = f
            .split("table=")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .and_then(|t| t.trim().parse::<u8>().ok())
            .unwrap_or(0);
        *out.entry(t).or_default() += 1;
    }
    out
}

#[test]
fn metrics_count_known_actions_and_health_matches_cni_status() {
    let node = AgentNode::start(NodeOptions {
        extra: vec!["--netnamespace-wait".into(), "1".into()],
        ..NodeOptions::default()
    });
    node.set_netnamespace("tenant-a", 10);
    let before = scrape(&node);
    for (k, want) in [
        ("sdn_ready", 1.0),
        ("sdn_pods", 0.0),
        ("openshift_sdn_vnid_not_found_errors", 0.0),
    ] {
        assert_eq!(get(&before, k), want, "{k}");
    }
    assert!(get(&before, "sdn_ready_seconds") > 0.0);
    // Counters an alert reads are there at 0 before their first event.
    for series in [
        "openshift_sdn_pod_operations_errors{operation_type=\"setup\"}",
        "openshift_sdn_pod_operations_errors{operation_type=\"teardown\"}",
        "sdn_drift_repairs_total{kind=\"flows\"}",
        "sdn_drift_repairs_total{kind=\"port\"}",
        "sdn_ovs_reconnects_total{connection=\"ovsdb\"}",
        "sdn_ovs_reconnects_total{connection=\"openflow\"}",
    ] {
        assert_eq!(before.get(series), Some(&0.0), "{series}: {before:#?}");
    }
    assert!(
        before
            .iter()
            .any(|(k, v)| k.starts_with("sdn_cni_request_errors_total{")
                && k.contains("command=\"ADD\"")
                && *v == 0.0),
        "{before:#?}"
    );
    assert!(
        get(
            &before,
            "sdn_reconcile_duration_seconds_count{reason=\"start\"}"
        ) == 1.0,
        "{before:?}"
    );

    // Three pods, and one ADD refused: its namespace has no NetNamespace.
    let a = node.pod("default", "a");
    let _b = node.pod("default", "b");
    let c = node.pod("tenant-a", "c");
    // Log fields are plain values: the CNI lines of pod c say k8s_pod="c", never Some("c").
    let log = node.log();
    assert!(
        log.lines()
            .any(|l| l.contains("k8s_pod=\"c\"") && l.contains("k8s_namespace=\"tenant-a\"")),
        "{log}"
    );
    assert!(
        !log.contains("Some("),
        "Rust formatting in a log field:\n{log}"
    );
    // Each of the CNI span's fields once per line, also those recorded after the span began
    // (netns, k8s_namespace, k8s_pod), in the text log and in the lines sdnctl log keeps.
    let (_, kept, _) = sdnctl(&node, &["log"]);
    for (source, text) in [("stderr", &log), ("sdnctl log", &kept)] {
        let cni: Vec<&str> = text.lines().filter(|l| l.contains("k8s_pod=")).collect();
        assert!(!cni.is_empty(), "{source}: no CNI line:\n{text}");
        for l in cni {
            for field in ["netns=", "k8s_namespace=", "k8s_pod=", "container_id="] {
                assert_eq!(l.matches(field).count(), 1, "{source}: {field} in {l}");
            }
        }
    }
    let refused = node.add(
        "refused-1",
        &a.netns(),
        "K8S_POD_NAMESPACE=nope;K8S_POD_NAME=x",
    );
    assert!(refused.code != 0, "{}", refused.stdout);
    let m = scrape(&node);
    let delta = |k: &str| get(&m, k) - get(&before, k);
    assert_eq!(
        delta("openshift_sdn_pod_operations_latency_count{operation_type=\"setup\"}"),
        4.0
    );
    assert_eq!(
        delta("openshift_sdn_pod_operations_latency_count{operation_type=\"e2esetup\"}"),
        4.0
    );
    assert_eq!(
        delta("openshift_sdn_pod_operations_errors{operation_type=\"setup\"}"),
        1.0
    );
    assert_eq!(delta("openshift_sdn_vnid_not_found_errors"), 1.0);
    assert_eq!(
        delta("sdn_cni_request_duration_seconds_count{command=\"ADD\",result=\"success\"}"),
        3.0
    );
    assert_eq!(
        delta("sdn_cni_request_duration_seconds_count{command=\"ADD\",result=\"error\"}"),
        1.0
    );
    let code = refused.error_code().unwrap();
    assert_eq!(
        delta(&format!(
            "sdn_cni_request_errors_total{{code=\"{code}\",command=\"ADD\"}}"
        )),
        1.0,
        "{:?}",
        m.keys()
            .filter(|k| k.contains("errors_total"))
            .collect::<Vec<_>>()
    );
    assert!(delta("openshift_sdn_ovs_operations{result_type=\"success\"}") > 0.0);
    assert_eq!(get(&m, "sdn_pods"), 3.0);
    assert!(get(&m, "openshift_sdn_pod_ips") >= 3.0, "{m:?}");
    // gc_thresh3 minus ARP entries, where the namespace shows gc_thresh3 (only the host's
    // does: the agent of this test runs in the node's own namespace, where it stays 0).
    let thresh = node
        .ovs
        .exec_in_netns(&["cat", "/proc/sys/net/ipv4/neigh/default/gc_thresh3"])
        .ok()
        .and_then(|t| t.trim().parse::<f64>().ok());
    let arp = get(&m, "openshift_sdn_arp_cache_entries");
    match thresh {
        Some(t) => assert!(arp > 0.0 && arp <= t, "{arp} of {t}"),
        None => assert_eq!(arp, 0.0),
    }
    assert_eq!(get(&m, "sdn_ready"), 1.0);

    // A bandwidth below kubelet's bound and a host port another pod holds: both refused, and
    // counted by kind.
    let before_errors = scrape(&node);
    let spare = sdn_tests::harness::Netns::new("sdnhp");
    let spare_path = spare.path();
    let add_with = |id: &str, rc: Value| {
        let mut conf = node.netconf("1.0.0");
        conf["runtimeConfig"] = rc;
        node.cni(
            &[
                ("CNI_COMMAND", "ADD"),
                ("CNI_CONTAINERID", id),
                ("CNI_NETNS", &spare_path),
                ("CNI_IFNAME", "eth0"),
                ("CNI_ARGS", "K8S_POD_NAMESPACE=default;K8S_POD_NAME=x"),
                ("CNI_PATH", "/opt/cni/bin"),
            ],
            &conf,
        )
    };
    let slow = add_with("bw-1", serde_json::json!({"bandwidth": {"ingressRate": 1}}));
    assert_ne!(slow.code, 0, "{}", slow.stdout);
    let hp = serde_json::json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]});
    let first = add_with("hp-1", hp.clone());
    assert_eq!(first.code, 0, "{}", first.stdout);
    let taken = add_with("hp-2", hp);
    assert_ne!(taken.code, 0, "{}", taken.stdout);
    let m = scrape(&node);
    assert_eq!(
        get(&m, "sdn_bandwidth_errors_total") - get(&before_errors, "sdn_bandwidth_errors_total"),
        1.0
    );
    assert_eq!(
        get(&m, "sdn_hostport_errors_total") - get(&before_errors, "sdn_hostport_errors_total"),
        1.0
    );
    let del = node.cni(
        &[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "hp-1"),
            ("CNI_NETNS", &spare_path),
            ("CNI_IFNAME", "eth0"),
        ],
        &node.netconf("1.0.0"),
    );
    assert_eq!(del.code, 0, "{}", del.stdout);

    // Every table's gauge is what the switch holds.
    node.datapath_settled();
    let settled = wait_until(Duration::from_secs(10), || {
        let m = scrape(&node);
        let dumped = dumped_per_table(&node);
        let total: usize = dumped.values().sum();
        flows::Table::ALL.iter().all(|t| {
            get(&m, &format!("sdn_flows{{table=\"{}\"}}", t.name()))
                == *dumped.get(&t.id()).unwrap_or(&0) as f64
        }) && get(&m, "openshift_sdn_ovs_flows") == total as f64
    });
    assert!(
        settled,
        "flow gauges differ from the dump: {:?} vs {:?}",
        scrape(&node)
            .into_iter()
            .filter(|(k, _)| k.starts_with("sdn_flows"))
            .collect::<Vec<_>>(),
        dumped_per_table(&node)
    );

    // A VNID change.
    let before = scrape(&node);
    node.set_netnamespace("tenant-a", 11);
    assert!(wait_until(Duration::from_secs(10), || node
        .flowed_vnid(&c.ip)
        == Some(11)));
    let m = scrape(&node);
    let delta = |k: &str| get(&m, k) - get(&before, k);
    assert_eq!(delta("sdn_vnid_changes_total"), 1.0);
    assert_eq!(delta("sdn_vnid_change_duration_seconds_count"), 1.0);
    assert_eq!(
        delta("openshift_sdn_pod_operations_latency_count{operation_type=\"update\"}"),
        1.0
    );

    // Flows and a port removed behind the agent's back: repaired, and counted by kind.
    let before = scrape(&node);
    node.ovs.ofctl(&["del-flows", "br0", "table=70"]);
    assert!(wait_until(Duration::from_secs(5), || {
        get(&scrape(&node), "sdn_drift_repairs_total{kind=\"flows\"}")
            > get(&before, "sdn_drift_repairs_total{kind=\"flows\"}")
    }));
    let port = node.port_of(&a.id);
    node.ovs.vsctl(&["del-port", "br0", &port]);
    assert!(wait_until(Duration::from_secs(5), || {
        get(&scrape(&node), "sdn_drift_repairs_total{kind=\"port\"}")
            > get(&before, "sdn_drift_repairs_total{kind=\"port\"}")
    }));
    let m = scrape(&node);
    assert!(
        get(
            &m,
            "sdn_reconcile_duration_seconds_count{reason=\"flow-drift\"}"
        ) >= 1.0,
        "{m:?}"
    );

    // Health: both pass, and verbose lists every check.
    let (code, body) = http(&node, "/livez");
    assert_eq!((code, body.as_str()), (200, "livez check passed\n"));
    let (code, body) = http(&node, "/readyz?verbose");
    assert_eq!(code, 200, "{body}");
    for check in [
        "[+]ovsdb ok",
        "[+]openflow ok",
        "[+]cluster-state ok",
        "[+]cni-server ok",
        "readyz check passed",
    ] {
        assert!(body.contains(check), "{check} missing in {body}");
    }
    let status = node.cni(&[("CNI_COMMAND", "STATUS")], &node.netconf("1.1.0"));
    assert_eq!(status.code, 0, "{}", status.stdout);

    // ovs-vswitchd stopped: /readyz and CNI STATUS fail on the same check; /livez stays.
    struct Resume(i32);
    impl Drop for Resume {
        fn drop(&mut self) {
            // SAFETY: kill on the pid of the ovs-vswitchd this test's harness started.
            unsafe { libc::kill(self.0, libc::SIGCONT) };
        }
    }
    let pid = node.ovs.vswitchd_pid().expect("ovs-vswitchd runs");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let resume = Resume(pid);
    let (code, body) = http(&node, "/readyz");
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("[-]openflow failed: br0 is unreachable over OpenFlow"),
        "{body}"
    );
    assert!(body.contains("[+]ovsdb ok"), "{body}");
    let status = node.cni(&[("CNI_COMMAND", "STATUS")], &node.netconf("1.1.0"));
    assert_eq!(status.error_code(), Some(50), "{}", status.stdout);
    assert!(
        status
            .stdout
            .contains("not ready: openflow: br0 is unreachable over OpenFlow"),
        "{}",
        status.stdout
    );
    // /metrics never waits for OVS (health is computed in the background) and says not ready;
    // ADD, CHECK and DEL answer "try again later" (11) at once instead of waiting for br0.
    let began = std::time::Instant::now();
    let (code, body) = http(&node, "/metrics");
    let took = began.elapsed();
    eprintln!(
        "a scrape with ovs-vswitchd stopped: {:.3} s",
        took.as_secs_f64()
    );
    assert_eq!(code, 200, "{body}");
    assert!(body.lines().any(|l| l == "sdn_ready 0"), "{body}");
    assert!(
        took < Duration::from_secs(3),
        "a scrape took {took:?} with ovs-vswitchd stopped: it waited for OVS"
    );
    let outage_ns = sdn_tests::harness::Netns::new("sdnoutage");
    let began = std::time::Instant::now();
    let add = node.add("outage-pod", &outage_ns.path(), "");
    let took = began.elapsed();
    eprintln!(
        "an ADD with ovs-vswitchd stopped: {:.3} s",
        took.as_secs_f64()
    );
    assert_eq!(add.error_code(), Some(11), "{}", add.stdout);
    assert!(
        add.stdout.contains("Open vSwitch is down, try again later")
            && add.stdout.contains("br0 is unreachable over OpenFlow"),
        "{}",
        add.stdout
    );
    assert!(
        took < Duration::from_secs(5),
        "an ADD took {took:?} with ovs-vswitchd stopped: it waited for OVS"
    );
    let del = node.del("outage-pod", &outage_ns.path());
    assert_eq!(del.error_code(), Some(11), "{}", del.stdout);
    assert_eq!(http(&node, "/livez").0, 200);
    drop(resume);
    assert!(wait_until(Duration::from_secs(10), || http(
        &node, "/readyz"
    )
    .0 == 200));
    // Back: the same ADD goes through, and leaves nothing after its DEL.
    let add = node.add("outage-pod", &outage_ns.path(), "");
    assert_eq!(add.code, 0, "{}", add.stdout);
    let del = node.del("outage-pod", &outage_ns.path());
    assert_eq!(del.code, 0, "{}", del.stdout);
    let (code, body) = http(&node, "/nowhere");
    assert_eq!(code, 404);
    assert!(
        body.contains("serves /metrics, /livez and /readyz"),
        "{body}"
    );
}

#[test]
fn sdnctl_asks_the_agent_for_pods_flows_status_and_log_level() {
    let node = AgentNode::start(NodeOptions {
        extra: vec!["--log-format".into(), "json".into()],
        ..NodeOptions::default()
    });
    node.set_netnamespace("tenant-a", 10);
    let a = node.pod("default", "a");
    let c = node.pod("tenant-a", "c");

    // Pods: what OVS and the ADD result say.
    let pods = sdnctl_json(&node, &["pods"]);
    let pods = pods.as_array().expect("a list");
    assert_eq!(pods.len(), 2, "{pods:?}");
    for (pod, ns, name) in [(&a, "default", "a"), (&c, "tenant-a", "c")] {
        let p = pods
            .iter()
            .find(|p| p["pod"] == name)
            .unwrap_or_else(|| panic!("{name} missing: {pods:?}"));
        assert_eq!(p["namespace"], ns);
        assert_eq!(p["ip"], pod.ip.as_str());
        assert_eq!(p["sandbox"], pod.id.as_str());
        let port = node.port_of(&pod.id);
        assert_eq!(p["port"], port.as_str());
        let ofport = node.ovs.vsctl(&["get", "Interface", &port, "ofport"]);
        assert_eq!(p["ofport"].to_string(), ofport.trim());
        let eth0 = pod.result["interfaces"]
            .as_array()
            .and_then(|i| i.iter().find(|i| i["sandbox"].is_string()))
            .unwrap_or_else(|| panic!("no pod interface in {}", pod.result));
        assert_eq!(p["mac"], eth0["mac"]);
        assert_eq!(p["vnid"], if ns == "default" { 0 } else { 10 });
    }
    let only = sdnctl_json(&node, &["pods", "-n", "tenant-a"]);
    assert_eq!(only.as_array().unwrap().len(), 1, "{only}");
    let (code, text, _) = sdnctl(&node, &["pods"]);
    assert_eq!(code, 0);
    assert!(text.starts_with("NAMESPACE"), "{text}");
    assert!(text.contains(&c.ip), "{text}");

    // Flows of a pod: every row is the pod's or its VNID's, and says so.
    let flows = sdnctl_json(&node, &["flows", "tenant-a/c"]);
    let flows = flows.as_array().unwrap();
    assert_eq!(flows.len(), flows::POD_FLOWS + 1, "{flows:#?}");
    for f in flows {
        let owner = f["owner"].as_str().unwrap();
        assert!(
            owner.starts_with("pod tenant-a/c (port ") || owner == "VNID 10 (tenant-a)",
            "{f}"
        );
        assert!(f["flow"].as_str().unwrap().contains("table="), "{f}");
    }
    let isolation = sdnctl_json(&node, &["flows", "--table", "ingress_isolation"]);
    assert!(isolation
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["table"] == 80 && f["table_name"] == "ingress_isolation"));
    assert!(isolation
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["owner"] == "base pipeline"));
    let tenant = sdnctl_json(&node, &["flows", "--tenant", "tenant-a"]);
    assert_eq!(tenant.as_array().unwrap().len(), flows.len());
    let (code, text, _) = sdnctl(&node, &["flows", "--table", "local_ip"]);
    assert_eq!(code, 0);
    assert!(text.starts_with("table 70 local_ip:"), "{text}");
    for (args, want) in [
        (
            vec!["flows", "--table", "nope"],
            "no table \"nope\"; the tables are classifier",
        ),
        (
            vec!["flows", "default/ghost"],
            "no pod default/ghost on this node",
        ),
        (vec!["flows", "ghost"], "expected NAMESPACE/NAME"),
        (
            vec!["flows", "--tenant", "ghost"],
            "no NetNamespace \"ghost\"",
        ),
    ] {
        let (code, _, err) = sdnctl(&node, &args);
        assert_eq!(code, 1, "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
    }

    // Status.
    let st = sdnctl_json(&node, &["status"]);
    assert_eq!(st["ready"], true, "{st:#}");
    assert_eq!(st["node"], "node-a");
    assert_eq!(st["counts"]["pods"], 2);
    assert!(
        st["pipeline_version"]
            .as_str()
            .unwrap()
            .starts_with("multitenant."),
        "{st}"
    );
    assert_eq!(st["last_reconcile"]["reason"], "start");
    let (code, text, _) = sdnctl(&node, &["status"]);
    assert_eq!(code, 0);
    assert!(text.contains("READY"), "{text}");
    assert!(
        text.contains("[ok] openflow: br0 holds pipeline multitenant."),
        "{text}"
    );

    // Log level at run time, and JSON log lines.
    let lvl = sdnctl_json(&node, &["log-level"]);
    assert_eq!(lvl["level"], "info");
    let (code, text, _) = sdnctl(&node, &["log-level", "debug"]);
    assert_eq!(code, 0);
    assert_eq!(text, "log level debug (was info)\n");
    let _d = node.pod("default", "d");
    let debug_lines = node
        .log()
        .lines()
        .filter(|l| l.contains("\"level\":\"DEBUG\""))
        .count();
    assert!(debug_lines > 0, "no DEBUG line after log-level debug");
    let (code, _, err) = sdnctl(&node, &["log-level", "loud"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("names no level; use error, warn, info, debug, trace"),
        "{err}"
    );
    assert_eq!(sdnctl_json(&node, &["log-level"])["level"], "debug");
    sdnctl(&node, &["log-level", "info"]);
    for line in node.log().lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("log line is not JSON ({e}): {line}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{line}");
        // Values are plain: no string carries Rust's Debug quotes ("\"/run/sdn/cni.sock\"").
        fn quoted(v: &Value) -> Option<String> {
            match v {
                Value::String(s) if s.starts_with('"') => Some(s.clone()),
                Value::Array(a) => a.iter().find_map(quoted),
                Value::Object(o) => o.values().find_map(quoted),
                _ => None,
            }
        }
        assert_eq!(quoted(&v), None, "a Debug-quoted value in {line}");
    }
    let (code, text, _) = sdnctl(&node, &["log"]);
    assert_eq!(code, 0);
    assert!(text.contains("CNI request succeeded"), "{text}");
    // --json is JSON here too: the kept lines as the JSON log format's objects.
    let lines = sdnctl_json(&node, &["log"]);
    let lines = lines.as_array().expect("sdnctl --json log is a JSON array");
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["message"] == "CNI request succeeded" && l["level"] == "INFO"),
        "{lines:#?}"
    );

    // The bundle: every part, named flows, the pod's port in OVSDB, our chains; 0600.
    let out = std::env::temp_dir().join(sdn_tests::harness::unique_name("bundle-"));
    std::fs::create_dir_all(&out).unwrap();
    let file = out.join("b.tar.gz");
    let (code, text, err) = sdnctl(&node, &["bundle", "-o", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.starts_with(&format!("wrote {}", file.display())),
        "{text}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let untar = Command::new("tar")
        .args(["xzf", file.to_str().unwrap(), "-C", out.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(untar.success());
    let dir = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .find(|e| e.path().is_dir())
        .expect("the bundle's directory")
        .path();
    assert!(dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("sdn-bundle-node-a-"));
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{f} in the bundle: {e}"))
    };
    for f in [
        "README.txt",
        "status.json",
        "status.txt",
        "config.json",
        "agent.log",
        "pods.json",
        "namespaces.json",
        "flows.txt",
        "flows.json",
        "ovsdb.json",
        "iptables.txt",
        "cluster-state.json",
        "metrics.txt",
    ] {
        assert!(!read(f).is_empty(), "{f} is empty");
    }
    assert!(read("flows.txt").contains("owner: pod tenant-a/c (port "));
    assert!(read("ovsdb.json").contains(&node.port_of(&c.id)));
    assert!(
        read("iptables.txt").contains("SDN-"),
        "{}",
        read("iptables.txt")
    );
    assert!(read("cluster-state.json").contains("tenant-a"));
    assert!(read("status.txt").contains("READY"));
    assert!(read("config.json").contains("\"nodeName\": \"node-a\""));
    assert!(read("metrics.txt").contains("openshift_sdn_pod_ips"));
    std::fs::remove_dir_all(&out).unwrap();

    // Not root: refused, and sdnctl says so (the socket's directory is 0700). The binary is
    // copied where nobody may run it (the workspace need not be readable by others).
    let nobody_dir = std::env::temp_dir().join(sdn_tests::harness::unique_name("nobody-"));
    std::fs::create_dir_all(&nobody_dir).unwrap();
    let bin = nobody_dir.join("sdnctl");
    std::fs::copy(workspace_bin("sdnctl"), &bin).unwrap();
    std::fs::set_permissions(&nobody_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A test forking meanwhile may hold the copy's write descriptor until it execs (ETXTBSY).
    let out = (0..50)
        .map(|_| {
            Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&bin)
                .arg("--api-socket")
                .arg(node.dir().join("run/api.sock"))
                .arg("status")
                .env_remove("SDN_CONFIG")
                .output()
                .expect("setpriv sdnctl")
        })
        .find(|o| {
            let busy = String::from_utf8_lossy(&o.stderr).contains("Text file busy");
            if busy {
                std::thread::sleep(Duration::from_millis(20));
            }
            !busy
        })
        .expect("sdnctl ran within 50 tries");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("root only; run sdnctl as root"), "{err}");
    std::fs::remove_dir_all(&nobody_dir).unwrap();

    // The agent gone: sdnctl says what to check.
    node.stop_agent(libc::SIGTERM);
    let (code, _, err) = sdnctl(&node, &["status"]);
    assert_eq!(code, 1);
    assert!(err.contains("is sdn-agent running on this node"), "{err}");
}

#[test]
fn tenant_commands_in_kubernetes_mode_say_how_to_do_it_there() {
    let dir = std::env::temp_dir().join(sdn_tests::harness::unique_name("sdnctl-kube-"));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("agent.yaml");
    std::fs::write(&cfg, "nodeName: n\nclusterState: kubernetes\n").unwrap();
    for (args, want) in [
        (vec!["join", "a", "b"], "kubectl annotate netnamespace a pod.network.openshift.io/multitenant.change-network=join:b"),
        (vec!["isolate", "a"], "change-network=isolate"),
        (vec!["make-global", "a"], "change-network=global"),
    ] {
        let out = Command::new(workspace_bin("sdnctl"))
            .arg("--config")
            .arg(&cfg)
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("clusterState is kubernetes"), "{err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
