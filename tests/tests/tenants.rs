//! Multitenant isolation on one node, end to end: a private OVS, the real `sdn-agent` in
//! multitenant mode and pods made through the real `sdn-cni`; tenants are NetNamespaces in the
//! agent's standalone state directory (what `sdnctl` edits).
//!
//! - the flows of a node with two tenants and a global namespace, as `ovs-ofctl --names
//!   dump-flows br0` prints them, against pipeline.md;
//! - a VNID change re-flows the namespace's pods and table 80 (join, isolate, make global) and
//!   records the VNID on the port;
//! - ADDs that are in flight while a namespace's VNID keeps changing all end with the final VNID;
//! - one CNI network per tenant namespace in standalone mode (the podman variant uses them);
//! - the isolation matrix (ICMP, TCP and ARP between every ordered pair of pods; the node reaches
//!   every pod) before and after join / isolate / make-global, printed as observed;
//! - isolation across an agent restart, with a cross-tenant probe running through it.

use std::collections::BTreeMap;
use std::time::Duration;

use sdn_tests::harness::wait_until;
use sdn_tests::matrix::{self, Member, NodeSide};
use sdn_tests::node::{AgentNode, CniPod, NodeOptions};
use sdn_tests::podman::Podman;
use sdn_tests::probe;

/// `ovs-ofctl --names --no-stats dump-flows br0 table=<table>`, one trimmed line per flow,
/// sorted.
fn table(node: &AgentNode, table: &str) -> Vec<String> {
    let text = node.ovs.ofctl(&[
        "--names",
        "--no-stats",
        "dump-flows",
        "br0",
        &format!("table={table}"),
    ]);
    let mut v: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.contains("OFPST_FLOW"))
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// A flow line without its `cookie=...,` prefix.
fn strip_cookie(line: &str) -> String {
    match line.strip_prefix("cookie=") {
        Some(rest) => rest
            .split_once(", ")
            .map_or(line.to_string(), |(_, r)| r.to_string()),
        None => line.to_string(),
    }
}

/// The pod's cookie as ovs-ofctl prints it, read from its table-70 flow.
fn cookie_of(node: &AgentNode, pod: &CniPod<'_>) -> String {
    table(node, "local_ip")
        .into_iter()
        .find(|l| l.contains(&format!("nw_dst={} ", pod.ip)))
        .and_then(|l| l.split(',').next().map(str::to_string))
        .unwrap_or_else(|| panic!("no table-70 flow for {}", pod.ip))
}

/// The VNIDs with a `reg0=V,reg1=V` row in table 80.
/// The VNIDs with a table-80 row, once deleted pods are retired (a deleted pod's flows, and its
/// VNID's row if it was the last, go in the agent's next batch; `leases` waits for it).
fn vnid_rows(node: &AgentNode) -> Vec<u32> {
    node.leases();
    let mut v: Vec<u32> = table(node, "ingress_isolation")
        .iter()
        .filter_map(|l| {
            let m = l.split(",reg0=0x").nth(1)?;
            u32::from_str_radix(m.split(',').next()?, 16).ok()
        })
        .collect();
    v.sort();
    v
}

/// The `external_ids:vnid` of a pod's port.
fn recorded_vnid(node: &AgentNode, pod: &CniPod<'_>) -> String {
    let ports = node.ovs.vsctl(&[
        "--format=csv",
        "--no-headings",
        "--columns=external_ids",
        "find",
        "Interface",
        &format!("external_ids:sandbox=\"{}\"", pod.id),
    ]);
    ports
        .split("vnid=")
        .nth(1)
        .map(|r| {
            r.trim_matches(|c: char| c == '"' || c == '}' || c.is_whitespace())
                .split([',', '}', '"'])
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default()
}

#[test]
fn flows_of_two_tenants_and_a_global_namespace_match_pipeline_md() {
    let node = AgentNode::start(NodeOptions::default());
    node.set_netnamespace("tenant-a", 11);
    node.set_netnamespace("tenant-b", 12);
    node.set_netnamespace("shared", 0);
    let a1 = node.pod("tenant-a", "a1");
    let a2 = node.pod("tenant-a", "a2");
    let b1 = node.pod("tenant-b", "b1");
    let g1 = node.pod("shared", "g1");
    let d1 = node.pod("default", "d1");

    // Table 80 (pipeline.md "Tenancy", multitenant): the node's gateway reaches every pod (IP,
    // committed, and ARP), replies meet tenancy past the Admin tier, VNID 0 on
    // either side passes, one row per VNID in use, drop; what tenancy allowed goes to table 81,
    // which commits it and delivers it.
    let mut t80: Vec<String> = table(&node, "ingress_isolation")
        .iter()
        .map(|l| strip_cookie(l))
        .collect();
    t80.sort();
    let out = "actions=output:NXM_NX_REG2[]";
    let on = "actions=goto_table:\"ingress_baseline\"";
    let mut want = vec![
        "table=\"ingress_isolation\", priority=5500,ip,nw_src=10.128.0.1 actions=ct(commit),output:NXM_NX_REG2[]".to_string(),
        format!("table=\"ingress_isolation\", priority=5500,arp,arp_spa=10.128.0.1 {out}"),
        "table=\"ingress_isolation\", priority=5400,ct_state=+rpl+trk,ip,reg4=0/0x4 actions=load:0x1->NXM_NX_REG4[2],resubmit(,\"ingress_isolation\")".to_string(),
        format!("table=\"ingress_isolation\", priority=200,reg0=0 {on}"),
        format!("table=\"ingress_isolation\", priority=200,reg1=0 {on}"),
        format!("table=\"ingress_isolation\", priority=100,reg0=0xb,reg1=0xb {on}"),
        format!("table=\"ingress_isolation\", priority=100,reg0=0xc,reg1=0xc {on}"),
        "table=\"ingress_isolation\", priority=0 actions=drop".to_string(),
    ];
    want.sort();
    assert_eq!(t80, want, "table 80");
    let mut t81: Vec<String> = table(&node, "ingress_baseline")
        .iter()
        .map(|l| strip_cookie(l))
        .collect();
    t81.sort();
    assert_eq!(
        t81,
        [
            format!("table=\"ingress_baseline\", priority=0 {out}"),
            "table=\"ingress_baseline\", priority=1,ip actions=ct(commit),output:NXM_NX_REG2[]"
                .to_string(),
        ],
        "table 81"
    );

    // Per pod (pipeline.md "Per-pod flows"): its port found in tables 20, 25, 40 and 70, its
    // VNID loaded by port in tables 26 and 75.
    for (pod, vnid) in [(&a1, 11u32), (&a2, 11), (&b1, 12), (&g1, 0), (&d1, 0)] {
        let cookie = cookie_of(&node, pod);
        let mine: Vec<String> = node
            .ovs
            .ofctl(&["--names", "--no-stats", "dump-flows", "br0"])
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with(&format!("{cookie},")))
            .map(strip_cookie)
            .collect();
        let port = node
            .ovs
            .vsctl(&[
                "--format=csv",
                "--no-headings",
                "--columns=name,ofport",
                "find",
                "Interface",
                &format!("external_ids:sandbox=\"{}\"", pod.id),
            ])
            .trim()
            .to_string();
        let (name, ofport) = port.split_once(',').expect("name,ofport");
        let ofport: u32 = ofport.parse().expect("ofport");
        let ip = &pod.ip;
        let o: Vec<u8> = ip.split('.').map(|x| x.parse().unwrap()).collect();
        let mac = format!("0a:58:{:02x}:{:02x}:{:02x}:{:02x}", o[0], o[1], o[2], o[3]);
        // ovs-ofctl prints a loaded 0 as `0`, anything else in hex.
        let v = if vnid == 0 {
            "0".to_string()
        } else {
            format!("{vnid:#x}")
        };
        let p = format!("{ofport:#x}");
        let mut expect = vec![
            format!("table=\"pod_egress_spoofguard\", priority=100,arp,in_port={name},dl_src={mac},arp_spa={ip},arp_sha={mac} actions=load:{p}->NXM_NX_REG3[],goto_table:\"source_vnid\""),
            format!("table=\"pod_egress_spoofguard\", priority=100,ip,in_port={name},dl_src={mac},nw_src={ip} actions=load:{p}->NXM_NX_REG3[],goto_table:\"source_vnid\""),
            format!("table=\"service_return\", priority=100,ip,nw_src={ip} actions=load:{p}->NXM_NX_REG3[],goto_table:\"source_vnid\""),
            format!("table=\"source_vnid\", priority=100,reg3={p} actions=load:{v}->NXM_NX_REG0[],goto_table:\"pod_egress_policy\""),
            format!("table=\"local_arp\", priority=100,arp,arp_tpa={ip} actions=load:{p}->NXM_NX_REG2[],goto_table:\"destination_vnid\""),
            format!("table=\"local_ip\", priority=100,ip,nw_dst={ip} actions=load:{p}->NXM_NX_REG2[],goto_table:\"destination_vnid\""),
            format!("table=\"destination_vnid\", priority=100,reg2={p} actions=load:{v}->NXM_NX_REG1[],goto_table:\"ingress_isolation\""),
        ];
        expect.sort();
        let mut mine = mine;
        mine.sort();
        assert_eq!(mine, expect, "flows of {}", pod.id);
        assert_eq!(recorded_vnid(&node, pod), vnid.to_string(), "port record");
    }

    // The last local pod of a VNID takes its table-80 row with it; VNID 0 never has one.
    b1.delete();
    g1.delete();
    assert_eq!(vnid_rows(&node), vec![11]);
    a1.delete();
    assert_eq!(vnid_rows(&node), vec![11], "a2 still uses VNID 11");
    a2.delete();
    assert_eq!(vnid_rows(&node), Vec::<u32>::new());
    d1.delete();
    node.assert_no_pod_leftovers();
}

#[test]
fn a_vnid_change_reflows_the_namespace_and_table_80() {
    let node = AgentNode::start(NodeOptions::default());
    node.set_netnamespace("tenant-a", 11);
    node.set_netnamespace("tenant-b", 12);
    let a1 = node.pod("tenant-a", "a1");
    let b1 = node.pod("tenant-b", "b1");
    let b2 = node.pod("tenant-b", "b2");
    assert_eq!(vnid_rows(&node), vec![11, 12]);

    let settle = |what: &str, want: &[(&CniPod<'_>, u32)], rows: &[u32]| {
        let ok = wait_until(Duration::from_secs(5), || {
            want.iter()
                .all(|(p, v)| node.flowed_vnid(&p.ip) == Some(*v))
                && vnid_rows(&node) == rows
        });
        let seen: Vec<_> = want
            .iter()
            .map(|(p, _)| (p.id.clone(), node.flowed_vnid(&p.ip)))
            .collect();
        assert!(
            ok,
            "{what}: pods {seen:?}, table-80 rows {:?}",
            vnid_rows(&node)
        );
        for (p, v) in want {
            assert!(
                wait_until(Duration::from_secs(2), || recorded_vnid(&node, p)
                    == v.to_string()),
                "{what}: port of {} records vnid {}",
                p.id,
                recorded_vnid(&node, p)
            );
        }
    };

    // Join: tenant-b takes tenant-a's VNID; VNID 12's row goes with its last pod.
    node.set_netnamespace("tenant-b", 11);
    settle("join", &[(&a1, 11), (&b1, 11), (&b2, 11)], &[11]);
    // Isolate: a fresh VNID of its own.
    node.set_netnamespace("tenant-b", 13);
    settle("isolate", &[(&a1, 11), (&b1, 13), (&b2, 13)], &[11, 13]);
    // Make global: VNID 0 needs no row.
    node.set_netnamespace("tenant-b", 0);
    settle("global", &[(&a1, 11), (&b1, 0), (&b2, 0)], &[11]);
    // A NetNamespace that vanishes leaves its pods where they are (never global by accident).
    node.set_netnamespace("tenant-a", 14);
    settle("a to 14", &[(&a1, 14)], &[14]);
    // Standalone mode: each tenant namespace has its own CNI network while it exists.
    let conf = |t: &str| {
        node.conf_file()
            .parent()
            .unwrap()
            .join(format!("20-sdn-{t}.conflist"))
    };
    assert!(conf("tenant-a").exists() && conf("tenant-b").exists());
    let text = std::fs::read_to_string(conf("tenant-a")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["name"], "sdn-tenant-a", "{text}");
    assert_eq!(json["plugins"][0]["namespace"], "tenant-a", "{text}");
    node.delete_netnamespace("tenant-a");
    assert!(
        wait_until(Duration::from_secs(3), || !conf("tenant-a").exists()),
        "the network of a deleted namespace stays"
    );
    assert_eq!(node.flowed_vnid(&a1.ip), Some(14));
    assert!(node.log().contains("re-flowed"), "{}", node.log());
    // A stopped agent keeps its networks (runtimes see no gap during a restart); a namespace
    // deleted while it was down loses its network when the agent is back.
    node.stop_agent(libc::SIGTERM);
    assert!(conf("tenant-b").exists() && node.conf_file().exists());
    node.delete_netnamespace("tenant-b");
    node.start_agent();
    assert!(
        wait_until(Duration::from_secs(3), || !conf("tenant-b").exists()),
        "the network of a namespace deleted while the agent was down stays"
    );
}

#[test]
fn adds_in_flight_during_vnid_changes_end_with_the_final_vnid() {
    let node = AgentNode::start(NodeOptions::default());
    node.set_netnamespace("churn", 20);
    let flipper = {
        let dir = node.state_dir();
        std::thread::spawn(move || {
            use cluster::{ClusterObject, NetNamespace, StandaloneSource};
            // 21, 22, ... every 150 ms (the agent polls every 500 ms), ending on 29.
            for v in 21..=29 {
                std::thread::sleep(Duration::from_millis(150));
                StandaloneSource::write_object(
                    &dir,
                    &ClusterObject::NetNamespace(NetNamespace::new("churn", v)),
                )
                .unwrap();
            }
        })
    };
    let pods: Vec<CniPod<'_>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..12)
            .map(|i| {
                let node = &node;
                s.spawn(move || {
                    std::thread::sleep(Duration::from_millis(110 * i));
                    node.pod("churn", &format!("p{i}"))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    flipper.join().unwrap();
    let ok = wait_until(Duration::from_secs(5), || {
        pods.iter().all(|p| node.flowed_vnid(&p.ip) == Some(29)) && vnid_rows(&node) == vec![29]
    });
    let seen: BTreeMap<String, Option<u32>> = pods
        .iter()
        .map(|p| (p.id.clone(), node.flowed_vnid(&p.ip)))
        .collect();
    assert!(ok, "pods {seen:?}, table-80 rows {:?}", vnid_rows(&node));
    for p in &pods {
        assert_eq!(recorded_vnid(&node, p), "29", "port record of {}", p.id);
    }
    let log = node.log();
    eprintln!(
        "racing ADDs: {} took a newer VNID under the lock, {} pod re-flows",
        log.matches("namespace VNID changed during ADD").count(),
        log.matches("pod re-flowed").count()
    );
}

/// A deterministic race: the ADD has read its namespace's VNID and is held at its lease (the
/// test holds the lease directory's lock, as another host-local user would) when the VNID
/// changes. The agent's VNID sync finds no such pod in its table; the ADD must take the new
/// VNID when it installs the flows. Without the port pool, so that the ADD adds its own port
/// (as it does when a burst has emptied the pool). (Held at the OVS port step by pausing
/// ovs-vswitchd, the ADD now answers "try again later" within a second instead:
/// `faults.rs`, `an_add_while_ovs_vswitchd_hangs_is_try_again_later_at_once`.)
#[test]
fn an_add_in_flight_when_its_namespace_changes_vnid_takes_the_new_one() {
    let node = AgentNode::start(NodeOptions {
        extra: vec!["--port-pool-size".into(), "0".into()],
        ..NodeOptions::default()
    });
    node.set_netnamespace("moving", 40);
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(node.lease_dir().join("lock"))
        .expect("the lease directory's lock file");
    let pod = std::thread::scope(|s| {
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor this test owns; released by the unlock below or when
        // the file is dropped (also on a failed assertion).
        assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
        let add = s.spawn(|| node.pod("moving", "m1"));
        std::thread::sleep(Duration::from_millis(700));
        node.set_netnamespace("moving", 41);
        // Two agent polls: the change is seen while the ADD still waits for its lease.
        std::thread::sleep(Duration::from_millis(1500));
        let still_waiting = !add.is_finished();
        // SAFETY: as above.
        unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_UN) };
        assert!(
            still_waiting,
            "the ADD finished while the lease directory was locked"
        );
        add.join().unwrap()
    });
    assert_eq!(node.flowed_vnid(&pod.ip), Some(41), "{}", node.log());
    assert_eq!(vnid_rows(&node), vec![41]);
    assert_eq!(recorded_vnid(&node, &pod), "41");
    assert!(
        node.log().contains("namespace VNID changed during ADD"),
        "{}",
        node.log()
    );
}

/// The matrix members for `pods` (label, pod, namespace), with VNIDs from `vnids`.
fn members<K: std::borrow::Borrow<str> + Ord>(
    pods: &[(&str, &CniPod<'_>, &str)],
    vnids: &BTreeMap<K, u32>,
) -> Vec<Member> {
    pods.iter()
        .map(|(label, pod, ns)| Member {
            label: label.to_string(),
            netns: pod.ns.name().to_string(),
            ifname: "eth0".into(),
            ip: pod.ip.parse().unwrap(),
            namespace: ns.to_string(),
            vnid: vnids[*ns],
        })
        .collect()
}

const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);

#[test]
fn isolation_matrix_through_join_isolate_and_make_global() {
    let node = AgentNode::start(NodeOptions::default());
    let vnids = create_tenants(&node, "shared");
    let names = [
        ("a1", "tenant-a"),
        ("a2", "tenant-a"),
        ("a3", "tenant-a"),
        ("b1", "tenant-b"),
        ("b2", "tenant-b"),
        ("b3", "tenant-b"),
        ("c1", "tenant-c"),
        ("c2", "tenant-c"),
        ("c3", "tenant-c"),
        ("g1", "shared"),
        ("g2", "shared"),
        ("g3", "shared"),
    ];
    let made: Vec<CniPod<'_>> = names.iter().map(|(l, ns)| node.pod(ns, l)).collect();
    let pods: Vec<(&str, &CniPod<'_>, &str)> = names
        .iter()
        .zip(&made)
        .map(|((l, ns), p)| (*l, p, *ns))
        .collect();
    join_isolate_make_global(&node, &members(&pods, &vnids));
}

/// Creates tenants `tenant-a`, `tenant-b`, `tenant-c` and the global namespace `global_ns` with
/// the real `sdnctl` (`create`, `create --global`); returns the VNIDs it allocated.
fn create_tenants(node: &AgentNode, global_ns: &str) -> BTreeMap<String, u32> {
    for t in ["tenant-a", "tenant-b", "tenant-c"] {
        node.sdnctl(&["create", t]);
    }
    if global_ns != "default" {
        node.sdnctl(&["create", global_ns, "--global"]);
    }
    let v = node.vnids();
    let tenants = [v["tenant-a"], v["tenant-b"], v["tenant-c"]];
    assert!(
        tenants.iter().all(|t| *t >= 10)
            && tenants[0] != tenants[1]
            && tenants[1] != tenants[2]
            && tenants[0] != tenants[2],
        "sdnctl create gave {v:?}"
    );
    assert_eq!(v[global_ns], 0, "{v:?}");
    v
}

/// The matrix for three tenants and a global namespace, then after each change an operator
/// makes with `sdnctl`: tenant-b joins tenant-a, tenant-a is isolated, tenant-c is made global.
/// After each change the test waits until the flows carry the new VNIDs, checks the VNIDs
/// relate as the change says, and takes the whole matrix again.
fn join_isolate_make_global(node: &AgentNode, pods: &[Member]) {
    let node_side = NodeSide {
        netns: node.ovs.netns().to_string(),
        ifname: "tun0".into(),
    };
    let members = |vnids: &BTreeMap<String, u32>| -> Vec<Member> {
        pods.iter()
            .map(|m| Member {
                vnid: vnids[&m.namespace],
                ..m.clone()
            })
            .collect()
    };
    let v = node.vnids();
    let _servers = matrix::serve(&members(&v));
    let m = matrix::assert_isolation(
        &format!("three tenants and a global namespace {v:?}"),
        &members(&v),
        &node_side,
        PROBE_TIMEOUT,
    );
    // sdnctl trace predicts every observed probe, and names the isolation where it blocks.
    let on_node = vec![0; pods.len()];
    matrix::assert_traces_agree(&m, &[node], &on_node, 0);
    type Check = fn(&BTreeMap<String, u32>) -> bool;
    let steps: [(&[&str], &str, Check); 3] = [
        (
            &["join", "tenant-b", "tenant-a"],
            "tenant-b joined tenant-a",
            |v| v["tenant-b"] == v["tenant-a"],
        ),
        (&["isolate", "tenant-a"], "tenant-a isolated", |v| {
            v["tenant-a"] >= 10
                && v.iter()
                    .all(|(n, x)| n == "tenant-a" || *x != v["tenant-a"])
        }),
        (&["make-global", "tenant-c"], "tenant-c made global", |v| {
            v["tenant-c"] == 0
        }),
    ];
    for (args, title, check) in steps {
        eprintln!("$ sdnctl {}\n{}", args.join(" "), node.sdnctl(args));
        let v = node.vnids();
        assert!(check(&v), "{title}: sdnctl left {v:?}");
        let want = members(&v);
        let ok = wait_until(Duration::from_secs(5), || {
            want.iter()
                .all(|m| node.flowed_vnid(&m.ip.to_string()) == Some(m.vnid))
        });
        assert!(ok, "the agent did not apply {v:?}:\n{}", node.log());
        node.datapath_settled();
        let m =
            matrix::assert_isolation(&format!("{title} {v:?}"), &want, &node_side, PROBE_TIMEOUT);
        matrix::assert_traces_agree(&m, &[node], &on_node, 0);
    }
    eprintln!("{}", node.sdnctl(&["namespaces"]));
}

/// `ping -i 0.02 -c <count> -p <pattern>` from `netns` to `ip` on a thread; the summary line's
/// (transmitted, received).
fn ping_stream(
    netns: String,
    ip: String,
    count: u32,
    pattern: &'static str,
) -> std::thread::JoinHandle<(u32, u32)> {
    std::thread::spawn(move || {
        let out = std::process::Command::new("ip")
            .args([
                "netns", "exec", &netns, "ping", "-n", "-i", "0.02", "-W", "1",
            ])
            .args(["-c", &count.to_string(), "-p", pattern, &ip])
            .output()
            .expect("ping runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = text
            .lines()
            .find(|l| l.contains("packets transmitted"))
            .unwrap_or_else(|| panic!("no ping summary: {text}"));
        let num = |label: &str| -> u32 {
            line.split(", ")
                .find(|p| p.contains(label))
                .and_then(|p| p.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no {label} in {line:?}"))
        };
        (num("transmitted"), num("received"))
    })
}

/// Isolation holds through an agent SIGKILL and restart: the matrix before and after, and during
/// the restart a cross-tenant ICMP stream (its ARP pre-resolved with static neighbour entries, so
/// every packet really goes onto br0 toward the other tenant) never delivers a single packet,
/// while a same-tenant stream keeps flowing.
#[test]
fn isolation_holds_across_an_agent_restart() {
    let node = AgentNode::start(NodeOptions::default());
    let vnids: BTreeMap<&str, u32> =
        BTreeMap::from([("tenant-a", 11), ("tenant-b", 12), ("shared", 0)]);
    for (ns, v) in &vnids {
        node.set_netnamespace(ns, *v);
    }
    let names = [
        ("a1", "tenant-a"),
        ("a2", "tenant-a"),
        ("b1", "tenant-b"),
        ("b2", "tenant-b"),
        ("g1", "shared"),
    ];
    let made: Vec<CniPod<'_>> = names.iter().map(|(l, ns)| node.pod(ns, l)).collect();
    let pods: Vec<(&str, &CniPod<'_>, &str)> = names
        .iter()
        .zip(&made)
        .map(|((l, ns), p)| (*l, p, *ns))
        .collect();
    let node_side = NodeSide {
        netns: node.ovs.netns().to_string(),
        ifname: "tun0".into(),
    };
    let _servers = matrix::serve(&members(&pods, &vnids));
    matrix::assert_isolation(
        "before the restart",
        &members(&pods, &vnids),
        &node_side,
        PROBE_TIMEOUT,
    );

    let (a1, a2, b1) = (&made[0], &made[1], &made[2]);
    // Static neighbour entries both ways: the cross-tenant stream is decided by the IP path.
    for (from, to) in [(a1, b1), (b1, a1)] {
        let o: Vec<u8> = to.ip.split('.').map(|x| x.parse().unwrap()).collect();
        let mac = format!("0a:58:{:02x}:{:02x}:{:02x}:{:02x}", o[0], o[1], o[2], o[3]);
        from.ns
            .exec(&[
                "ip",
                "neigh",
                "replace",
                &to.ip,
                "lladdr",
                &mac,
                "dev",
                "eth0",
                "nud",
                "permanent",
            ])
            .unwrap();
    }
    let marker = [0x5eu8, 0xc7, 0x7e, 0x4a, 0x17, 0x5e, 0xc7, 0x7e];
    let capture = probe::Capture::start(b1.ns.name(), "eth0", &marker);
    // The control: the same capture at a2 sees the same-tenant stream.
    let control = probe::Capture::start(
        a2.ns.name(),
        "eth0",
        &[0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77],
    );
    let cross = ping_stream(a1.ns.name().into(), b1.ip.clone(), 250, "5ec77e4a175ec77e");
    let same = ping_stream(a1.ns.name().into(), a2.ip.clone(), 250, "0011223344556677");
    std::thread::sleep(Duration::from_millis(500));
    node.stop_agent(libc::SIGKILL);
    std::thread::sleep(Duration::from_millis(500));
    node.start_agent();
    let (cross_tx, cross_rx) = cross.join().unwrap();
    let (same_tx, same_rx) = same.join().unwrap();
    let crossed = capture.stop();
    let delivered = control.stop();
    eprintln!(
        "through the restart: cross-tenant a1->b1 {cross_rx}/{cross_tx} answered, {} delivered \
         to b1; same-tenant a1->a2 {same_rx}/{same_tx} answered, {} delivered to a2",
        crossed.len(),
        delivered.len()
    );
    assert!(
        cross_tx >= 200,
        "the cross-tenant stream ran ({cross_tx} sent)"
    );
    assert_eq!(
        cross_rx, 0,
        "a cross-tenant echo was answered during the restart"
    );
    assert!(
        crossed.is_empty(),
        "{} cross-tenant packets reached b1",
        crossed.len()
    );
    assert!(
        delivered.len() >= 200,
        "the capture saw only {} same-tenant packets at a2",
        delivered.len()
    );
    assert!(
        same_rx * 100 >= same_tx * 98,
        "same-tenant traffic dropped during the restart: {same_rx}/{same_tx}"
    );

    matrix::assert_isolation(
        "after the restart",
        &members(&pods, &vnids),
        &node_side,
        PROBE_TIMEOUT,
    );
}

/// The podman variant: one CNI network per tenant (the agent writes `sdn-<namespace>` for every
/// NetNamespace but `default`, whose pods use the main network `sdn`), three containers in each
/// of three tenants and in `default` (global), then the same matrix and changes.
#[test]
fn podman_isolation_matrix_with_one_network_per_tenant() {
    let node = AgentNode::start(NodeOptions::default());
    let vnids = create_tenants(&node, "default");
    let confs = node.conf_file().parent().unwrap().to_path_buf();
    let ok = wait_until(Duration::from_secs(5), || {
        ["tenant-a", "tenant-b", "tenant-c"]
            .iter()
            .all(|t| confs.join(format!("20-sdn-{t}.conflist")).exists())
    });
    assert!(
        ok,
        "tenant networks in {}: {:?}",
        confs.display(),
        std::fs::read_dir(&confs).map(|d| d
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .collect::<Vec<_>>())
    );
    let mut podman = Podman::new(&node);
    let mut pods = Vec::new();
    for (ns, network, prefix) in [
        ("tenant-a", "sdn-tenant-a", "a"),
        ("tenant-b", "sdn-tenant-b", "b"),
        ("tenant-c", "sdn-tenant-c", "c"),
        ("default", "sdn", "g"),
    ] {
        for i in 1..=3 {
            let name = format!("{prefix}{i}");
            podman.start_on(&name, network, &["sleep", "600"]);
            pods.push(Member {
                ip: podman.ip_on(&name, network).parse().unwrap(),
                netns: podman.netns_of(&name),
                label: name,
                ifname: "eth0".into(),
                namespace: ns.to_string(),
                vnid: vnids[ns],
            });
        }
    }
    // The agent put each container into its network's tenant.
    let ports = node.ovs.vsctl(&[
        "--format=csv",
        "--no-headings",
        "--columns=external_ids",
        "find",
        "Interface",
        "external_ids:sandbox!=\"\"",
    ]);
    for ns in ["tenant-a", "tenant-b", "tenant-c", "default"] {
        assert_eq!(
            ports.matches(&format!("namespace={ns}")).count(),
            3,
            "ports of {ns}: {ports}"
        );
    }
    join_isolate_make_global(&node, &pods);

    for name in [
        "a1", "a2", "a3", "b1", "b2", "b3", "c1", "c2", "c3", "g1", "g2", "g3",
    ] {
        podman.rm(name);
    }
    node.assert_no_pod_leftovers();
}
