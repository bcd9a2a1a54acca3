//! End to end on one node: a private OVS, the real `sdn-agent` (inside the OVS network
//! namespace, as on a node) and pods made as network namespaces through the real `sdn-cni`,
//! exactly as a container runtime calls it. Checks traffic (ICMP and TCP through br0), the
//! flows and ports the agent leaves, the CNI result, DEL/CHECK/GC/STATUS, bad requests, an
//! exhausted subnet, parallel ADDs, and that every failure leaves nothing behind.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use sdn_tests::harness::{wait_until, Netns};
use sdn_tests::node::{AgentNode, CniPod, NodeOptions};
use serde_json::json;

/// TCP from pod `from` to pod `to` on `port`: a listener in `to` echoes what `from` sends.
fn tcp_works(from: &CniPod<'_>, to: &CniPod<'_>, port: u16) -> Result<(), String> {
    let addr: SocketAddr = format!("{}:{port}", to.ip).parse().unwrap();
    let listener = to
        .ns
        .run_inside(move || TcpListener::bind(addr).map_err(|e| e.to_string()))?;
    let server = std::thread::spawn(move || -> Result<(), String> {
        listener.set_nonblocking(false).map_err(|e| e.to_string())?;
        let (mut s, _) = listener.accept().map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        s.write_all(&buf[..n]).map_err(|e| e.to_string())
    });
    let reply = from.ns.run_inside(move || -> Result<String, String> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .map_err(|e| format!("connect {addr}: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        s.write_all(b"hello through br0")
            .map_err(|e| e.to_string())?;
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).map_err(|e| format!("read: {e}"))?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    })?;
    server
        .join()
        .map_err(|_| "server thread panicked".to_string())??;
    if reply == "hello through br0" {
        Ok(())
    } else {
        Err(format!("echo was {reply:?}"))
    }
}

#[test]
fn pods_get_addresses_and_reach_each_other_through_br0() {
    let node = AgentNode::start(NodeOptions::default());
    let a = node.pod("default", "a");
    let b = node.pod("default", "b");
    let c = node.pod("default", "c");
    let pods = [&a, &b, &c];

    // Result: host veth and pod interface, the address with the gateway, routes.
    let r = &a.result;
    assert_eq!(r["cniVersion"], "1.0.0", "{r}");
    assert_eq!(r["interfaces"][1]["name"], "eth0", "{r}");
    assert_eq!(r["interfaces"][1]["sandbox"], a.netns(), "{r}");
    let ip: std::net::Ipv4Addr = a.ip.parse().unwrap();
    let o = ip.octets();
    assert_eq!(
        r["interfaces"][1]["mac"],
        format!("0a:58:{:02x}:{:02x}:{:02x}:{:02x}", o[0], o[1], o[2], o[3]),
        "{r}"
    );
    // The host end: a pool port (sdnp...) or, with the pool empty, the attachment's own veth.
    let host = r["interfaces"][0]["name"].as_str().unwrap();
    assert!(host.starts_with("sdnp") || host.starts_with("veth"), "{r}");
    assert_eq!(
        host,
        node.port_of(&a.id),
        "the result names the pod's OVS port"
    );
    assert_eq!(r["ips"][0]["gateway"], "10.128.0.1", "{r}");
    assert_eq!(r["ips"][0]["interface"], 1, "{r}");
    assert!(
        r["ips"][0]["address"].as_str().unwrap().ends_with("/23"),
        "{r}"
    );
    assert!(
        r["ips"][0].get("version").is_none(),
        "1.0.0 has no ips[].version: {r}"
    );
    let routes: Vec<String> = r["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            format!(
                "{} {}",
                x["dst"].as_str().unwrap(),
                x["gw"].as_str().unwrap_or("-")
            )
        })
        .collect();
    for want in [
        "0.0.0.0/0 10.128.0.1",
        "172.30.0.0/16 10.128.0.1",
        "10.128.0.0/14 -",
        "224.0.0.0/4 -",
    ] {
        assert!(
            routes.contains(&want.to_string()),
            "route {want} missing: {routes:?}"
        );
    }

    // Traffic: every ordered pair by ICMP, the gateway, and TCP.
    for from in pods {
        assert!(
            from.ping("10.128.0.1", 3),
            "{} cannot ping the gateway",
            from.ip
        );
        for to in pods {
            if from.ip != to.ip {
                assert!(from.ping(&to.ip, 3), "{} cannot ping {}", from.ip, to.ip);
            }
        }
    }
    tcp_works(&a, &b, 8080).expect("TCP a -> b");
    tcp_works(&c, &a, 9090).expect("TCP c -> a");

    // OVS: ports with the external ids, the seven flows per pod, the names in dump-flows.
    assert_eq!(node.pod_ports().len(), 3);
    let ids = node.ovs.vsctl(&[
        "--columns=external_ids",
        "find",
        "Interface",
        &format!("external_ids:sandbox={}", a.id),
    ]);
    for want in [
        format!("sandbox={}", a.id),
        format!("ip=\"{}\"", a.ip),
        "namespace=default".to_string(),
        "pod=a".to_string(),
        "ifname=eth0".to_string(),
        format!("netns=\"{}\"", a.netns()),
        "vnid=\"0\"".to_string(),
    ] {
        assert!(ids.contains(&want), "external_ids lack {want}: {ids}");
    }
    assert_eq!(node.pod_flows().len(), 21, "{:#?}", node.pod_flows());
    let named = node
        .ovs
        .ofctl(&["--names", "--no-stats", "dump-flows", "br0"]);
    assert!(
        named.contains(&format!(
            "table=\"local_ip\", priority=100,ip,nw_dst={} actions=load:",
            a.ip
        )) && named.contains("table=\"destination_vnid\", priority=100,reg2=")
            && named.contains("actions=load:0->NXM_NX_REG1[],goto_table:\"ingress_isolation\""),
        "{named}"
    );

    // DEL everything: nothing is left.
    a.delete();
    b.delete();
    c.delete();
    node.assert_no_pod_leftovers();
}

#[test]
fn chained_after_another_plugin_the_result_extends_prev_result() {
    let node = AgentNode::start(NodeOptions::default());
    let ns = Netns::new("sdnchain");
    let netns = ns.path();
    // What an earlier plugin of a conflist returned: one interface and an address.
    let mut conf = node.netconf("0.4.0");
    conf["prevResult"] = json!({
        "cniVersion": "0.4.0",
        "interfaces": [{"name": "dummy0", "mac": "02:00:00:00:00:01", "sandbox": netns}],
        "ips": [{"version": "4", "address": "192.168.5.5/24", "interface": 0}],
        "dns": {"nameservers": ["192.168.5.1"]}
    });
    let out = node.cni(
        &[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "chained"),
            ("CNI_NETNS", &netns),
            ("CNI_IFNAME", "eth0"),
        ],
        &conf,
    );
    assert_eq!(out.code, 0, "{}", out.stdout);
    let r = &out.json;
    assert_eq!(
        r["cniVersion"], "0.4.0",
        "answered in the version asked: {r}"
    );
    assert_eq!(r["interfaces"][0]["name"], "dummy0", "{r}");
    assert_eq!(r["interfaces"][2]["name"], "eth0", "{r}");
    assert_eq!(r["ips"][0]["address"], "192.168.5.5/24", "{r}");
    assert_eq!(
        r["ips"][1]["interface"], 2,
        "our address points at our pod interface: {r}"
    );
    assert_eq!(
        r["ips"][1]["version"], "4",
        "0.4.0 results carry ips[].version: {r}"
    );
    assert_eq!(r["dns"]["nameservers"][0], "192.168.5.1", "{r}");
    assert_eq!(node.del("chained", &netns).code, 0);
    node.assert_no_pod_leftovers();
}

#[test]
fn del_is_idempotent_and_complete_when_the_netns_is_gone() {
    let node = AgentNode::start(NodeOptions::default());
    let p = node.pod("default", "gone");
    let (id, netns) = (p.id.clone(), p.netns());
    assert_eq!(node.pod_ports().len(), 1);
    // The runtime deletes the netns first (the veth dies with it), then calls DEL, twice, the
    // second time with an empty CNI_NETNS as containerd does.
    p.remove_netns();
    p.forget();
    assert_eq!(node.del(&id, &netns).code, 0);
    assert_eq!(node.del(&id, &netns).code, 0);
    assert_eq!(node.del(&id, "").code, 0);
    node.assert_no_pod_leftovers();
    // DEL of something never added succeeds too.
    assert_eq!(node.del("never-added", "").code, 0);
}

#[test]
fn bad_requests_get_clear_cni_errors_and_leave_nothing_behind() {
    let node = AgentNode::start(NodeOptions::default());
    let ns = Netns::new("sdnbad");
    let netns = ns.path();
    let env = |id: &'static str, netns: &str, args: &str| -> Vec<(String, String)> {
        vec![
            ("CNI_COMMAND".into(), "ADD".into()),
            ("CNI_CONTAINERID".into(), id.into()),
            ("CNI_NETNS".into(), netns.into()),
            ("CNI_IFNAME".into(), "eth0".into()),
            ("CNI_ARGS".into(), args.into()),
        ]
    };
    let run = |e: Vec<(String, String)>, conf: serde_json::Value| {
        let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        node.cni(&e, &conf)
    };

    // A bad network config: a namespace that is not a DNS label.
    let mut conf = node.netconf("1.0.0");
    conf["namespace"] = json!("Not_A_Namespace");
    let out = run(env("bad1", &netns, ""), conf);
    assert_eq!(out.error_code(), Some(7), "{}", out.stdout);
    assert!(out.stdout.contains("Not_A_Namespace"), "{}", out.stdout);

    // Bad CNI_ARGS: a segment without '='.
    let out = run(
        env("bad2", &netns, "K8S_POD_NAMESPACE=default;BROKEN"),
        node.netconf("1.0.0"),
    );
    assert_eq!(out.error_code(), Some(4), "{}", out.stdout);
    assert!(out.stdout.contains("BROKEN"), "{}", out.stdout);

    // A netns that does not exist.
    let out = run(
        env("bad3", "/var/run/netns/no-such-netns", ""),
        node.netconf("1.0.0"),
    );
    assert!(out.code != 0, "{}", out.stdout);
    assert!(out.stdout.contains("no-such-netns"), "{}", out.stdout);

    // A requested IP outside the node subnet.
    let out = run(env("bad4", &netns, "IP=10.200.0.5"), node.netconf("1.0.0"));
    assert!(out.code != 0, "{}", out.stdout);
    assert!(out.stdout.contains("10.200.0.5"), "{}", out.stdout);

    // An interface name that already exists in the netns: fails late (after the lease and the
    // veth), so this checks the rollback.
    ns.exec(&[
        "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p",
    ])
    .unwrap();
    let out = run(env("bad5", &netns, ""), node.netconf("1.0.0"));
    assert!(out.code != 0, "{}", out.stdout);
    assert!(out.stdout.contains("eth0"), "{}", out.stdout);
    node.assert_no_pod_leftovers();

    // An unsupported version.
    let out = run(env("bad6", &netns, ""), node.netconf("2.0.0"));
    assert_eq!(out.error_code(), Some(1), "{}", out.stdout);

    // The agent's own network namespace, by a path of its own (identity, not path, decides),
    // and the host's (PID 1's; where PID 1 is out of reach, as in some sandboxes, it cannot
    // even be read): refused before anything is touched.
    let agent_ns = format!("/proc/{}/ns/net", node.agent_pid().unwrap());
    let out = run(env("bad8", &agent_ns, ""), node.netconf("1.0.0"));
    assert_eq!(out.error_code(), Some(4), "{}", out.stdout);
    assert!(
        out.stdout.contains(
            "is the agent's own network namespace: a pod needs a network namespace of its own"
        ),
        "{}",
        out.stdout
    );
    let out = run(env("bad9", "/proc/1/ns/net", ""), node.netconf("1.0.0"));
    assert_eq!(out.error_code(), Some(4), "{}", out.stdout);
    assert!(
        out.stdout.contains("is the host's network namespace")
            || out.stdout.contains("cannot be read"),
        "{}",
        out.stdout
    );
    node.assert_no_pod_leftovers();

    // The agent is down: try again later.
    node.stop_agent(libc::SIGTERM);
    let out = run(env("bad7", &netns, ""), node.netconf("1.0.0"));
    assert_eq!(out.error_code(), Some(11), "{}", out.stdout);
    node.start_agent();
    node.assert_no_pod_leftovers();
}

/// What a runtime sees while the agent restarts (SIGTERM, as an upgrade does, and SIGKILL): the
/// CNI config stays, so the node's network stays configured; ADD gets "try again later", STATUS
/// "plugin not available", DEL "try again later" (runtimes retry it) and completes once the
/// agent is back; the pod's traffic never stops.
#[test]
fn an_agent_restart_is_invisible_to_runtimes() {
    let node = AgentNode::start(NodeOptions::default());
    let a = node.pod("default", "stays");
    let b = node.pod("default", "leaves");
    let status = |version: &str| node.cni(&[("CNI_COMMAND", "STATUS")], &node.netconf(version));
    assert_eq!(status("1.1.0").code, 0, "{}", status("1.1.0").stdout);
    for signal in [libc::SIGTERM, libc::SIGKILL] {
        node.stop_agent(signal);
        assert!(
            node.conf_file().exists(),
            "the CNI config must stay while the agent is down (signal {signal})"
        );
        let out = node.add("during-restart", &a.netns(), "");
        assert_eq!(out.error_code(), Some(11), "ADD: {}", out.stdout);
        assert!(out.stdout.contains("sdn-agent"), "{}", out.stdout);
        let out = status("1.1.0");
        assert_eq!(out.error_code(), Some(50), "STATUS: {}", out.stdout);
        let out = node.del(&b.id, &b.netns());
        assert_eq!(out.error_code(), Some(11), "DEL: {}", out.stdout);
        // Pods keep talking meanwhile.
        assert!(
            a.ping(&b.ip.to_string(), 2),
            "pod traffic while the agent is down"
        );
        node.start_agent();
        assert_eq!(status("1.1.0").code, 0, "{}", status("1.1.0").stdout);
    }
    // The runtime's retried DEL completes now, and nothing of the pod is left.
    assert_eq!(node.del(&b.id, &b.netns()).code, 0);
    b.remove_netns();
    b.forget();
    assert_eq!(node.pod_ports().len(), 1);
    // Teardown for good removes the config files the agent wrote, and only those.
    let dir = node.conf_file().parent().unwrap().to_path_buf();
    std::fs::write(dir.join("99-other.conflist"), "{}").unwrap();
    node.stop_agent(libc::SIGTERM);
    let out = std::process::Command::new(sdn_tests::harness::workspace_bin("sdn-agent"))
        .args(["remove-cni-config", "--cni-conf-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("10-sdn.conflist"),
        "{out:?}"
    );
    assert!(!node.conf_file().exists());
    assert!(dir.join("99-other.conflist").exists());
    node.start_agent();
}

#[test]
fn a_restarted_agent_serves_before_ovs_vswitchd_answers_and_reconciles_once_it_does() {
    let node = AgentNode::start(NodeOptions::default());
    let a = node.pod("default", "a");
    let b = node.pod("default", "b");
    node.stop_agent(libc::SIGTERM);
    // ovs-vswitchd answers nothing (as while it reconfigures a bridge of 1000 ports); ovsdb-server
    // still does. Continued on drop, also when an assertion fails.
    struct Stopped(i32);
    impl Drop for Stopped {
        fn drop(&mut self) {
            // SAFETY: kill on the pid of the ovs-vswitchd this test's harness started.
            unsafe { libc::kill(self.0, libc::SIGCONT) };
        }
    }
    let pid = node.ovs.vswitchd_pid().expect("ovs-vswitchd runs");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let stopped = Stopped(pid);
    let reconciled = || node.log().matches("br0 reconciled").count();
    let before = reconciled();
    // Serving: the socket accepts and the CNI config is there. STATUS asks the switch for the
    // pipeline version, so it says what is wrong (and the agent keeps waiting for the switch).
    node.start_agent_serving();
    let status = || node.cni(&[("CNI_COMMAND", "STATUS")], &node.netconf("1.1.0"));
    let out = status();
    assert_eq!(out.error_code(), Some(50), "STATUS: {}", out.stdout);
    assert!(
        out.stdout.contains("br0 is unreachable over OpenFlow"),
        "{}",
        out.stdout
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        reconciled(),
        before,
        "the start-up reconcile cannot have run with ovs-vswitchd stopped"
    );
    drop(stopped);
    assert!(
        wait_until(Duration::from_secs(20), || reconciled() == before + 1),
        "no start-up reconcile after ovs-vswitchd continued; log:\n{}",
        node.log()
    );
    assert!(a.ping(&b.ip.to_string(), 3), "pods after the restart");
    assert_eq!(status().code, 0, "STATUS: {}", status().stdout);
    let log = node.log();
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("br0 reconciled"))
        .unwrap();
    assert!(
        line.contains("pods=2") && line.contains("added=0"),
        "{line}"
    );
}

#[test]
fn an_exhausted_subnet_fails_the_add_cleanly() {
    // hostSubnetLength 3: a /29 per node = 8 addresses minus network, gateway, broadcast = 5.
    let node = AgentNode::start(NodeOptions {
        cluster_network: "10.128.0.0/14,3".into(),
        ..NodeOptions::default()
    });
    let pods: Vec<CniPod<'_>> = (0..5)
        .map(|i| node.pod("default", &format!("p{i}")))
        .collect();
    let ns = Netns::new("sdnfull");
    let out = node.add("full", &ns.path(), "");
    assert!(out.code != 0, "{}", out.stdout);
    assert!(out.stdout.contains("10.128.0.0/29"), "{}", out.stdout);
    assert_eq!(node.leases().len(), 5);
    assert_eq!(node.pod_ports().len(), 5);
    assert_eq!(node.veths().len(), 5);
    drop(pods);
    node.assert_no_pod_leftovers();
}

#[test]
fn parallel_adds_get_distinct_addresses() {
    let node = AgentNode::start(NodeOptions::default());
    let pods: Vec<CniPod<'_>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..12)
            .map(|i| {
                let node = &node;
                s.spawn(move || node.pod("default", &format!("par{i}")))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ips: Vec<&str> = pods.iter().map(|p| p.ip.as_str()).collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 12, "{ips:?}");
    for p in &pods {
        assert!(p.ping("10.128.0.1", 3), "{} cannot reach the gateway", p.ip);
    }
    assert!(pods[0].ping(&pods[11].ip, 3));
    assert_eq!(node.pod_flows().len(), 84);
    drop(pods);
    node.assert_no_pod_leftovers();
}

#[test]
fn check_gc_and_status() {
    let node = AgentNode::start(NodeOptions::default());
    let a = node.pod("default", "a");
    let b = node.pod("default", "b");
    let cmd = |c: &str, p: &CniPod<'_>, version: &str, extra: serde_json::Value| {
        let mut conf = node.netconf(version);
        if let serde_json::Value::Object(m) = extra {
            for (k, v) in m {
                conf[k] = v;
            }
        }
        let netns = p.netns();
        node.cni(
            &[
                ("CNI_COMMAND", c),
                ("CNI_CONTAINERID", &p.id),
                ("CNI_NETNS", &netns),
                ("CNI_IFNAME", "eth0"),
            ],
            &conf,
        )
    };

    // CHECK passes on a healthy pod, with its prevResult.
    let out = cmd("CHECK", &a, "1.0.0", json!({"prevResult": a.result}));
    assert_eq!(out.code, 0, "{}", out.stdout);
    // Drift of a flow is repaired by the agent at once (the flow monitor), so CHECK passes
    // again; CHECK's own report of missing flows is covered by the component tests, where no
    // monitor runs.
    let flows = node.flows();
    node.ovs
        .ofctl(&["del-flows", "br0", &format!("table=70,ip,nw_dst={}", a.ip)]);
    assert!(
        wait_until(Duration::from_secs(10), || node.flows() == flows),
        "the deleted row was not put back:\n{}",
        node.log()
    );
    let out = cmd("CHECK", &a, "1.0.0", json!({"prevResult": a.result}));
    assert_eq!(out.code, 0, "{}", out.stdout);
    // Drift inside the pod: the address is gone.
    b.ns.exec(&["ip", "addr", "flush", "dev", "eth0"]).unwrap();
    let out = cmd("CHECK", &b, "1.0.0", json!({"prevResult": b.result}));
    assert!(
        out.code != 0 && out.stdout.contains(&b.ip),
        "{}",
        out.stdout
    );

    // STATUS (1.1.0): ready.
    let out = node.cni(&[("CNI_COMMAND", "STATUS")], &node.netconf("1.1.0"));
    assert_eq!(out.code, 0, "{}", out.stdout);

    // GC keeps a, removes b.
    let out = node.cni(&[("CNI_COMMAND", "GC")], &{
        let mut c = node.netconf("1.1.0");
        c["cni.dev/valid-attachments"] = json!([{"containerID": a.id, "ifname": "eth0"}]);
        c
    });
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(node.pod_ports().len(), 1);
    assert_eq!(node.leases(), vec![a.ip.clone()]);
    assert_eq!(node.pod_flows().len(), 7, "a's seven flows only");

    // STATUS while ovsdb-server is down: not ready; ready again once it is back.
    node.ovs.stop_ovsdb();
    let out = node.cni(&[("CNI_COMMAND", "STATUS")], &node.netconf("1.1.0"));
    assert_eq!(out.error_code(), Some(50), "{}", out.stdout);
    assert!(
        out.stdout.contains("Open vSwitch database"),
        "{}",
        out.stdout
    );
    node.ovs.start_ovsdb();
    assert!(
        wait_until(Duration::from_secs(20), || node
            .cni(&[("CNI_COMMAND", "STATUS")], &node.netconf("1.1.0"))
            .code
            == 0),
        "STATUS not ready again after ovsdb-server came back"
    );
    drop(a);
    drop(b);
    node.assert_no_pod_leftovers();
}

#[test]
fn restart_keeps_traffic_flowing_and_removes_what_died_meanwhile() {
    let node = AgentNode::start(NodeOptions::default());
    let a = node.pod("default", "a");
    let b = node.pod("default", "b");
    let c = node.pod("default", "c");
    assert!(a.ping(&b.ip, 3));
    let before = node.flows();

    // A second start on a configured node changes nothing.
    node.stop_agent(libc::SIGTERM);
    node.start_agent();
    assert_eq!(node.flows(), before, "a restart changed the flows");
    assert!(
        node.log().contains(" added=0 groups=0 deleted=0 "),
        "{}",
        node.log()
    );

    // Ping through a SIGKILL and restart: not one packet lost. Meanwhile pod c dies.
    let ping = {
        let ns = a.ns.name().to_string();
        let ip = b.ip.clone();
        std::thread::spawn(move || {
            sdn_tests::harness::run(
                "ip",
                &[
                    "netns", "exec", &ns, "ping", "-i", "0.02", "-c", "150", "-W", "1", &ip,
                ],
            )
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    node.stop_agent(libc::SIGKILL);
    c.remove_netns();
    let (c_id, c_ip) = (c.id.clone(), c.ip.clone());
    c.forget();
    node.start_agent();
    let out = ping.join().unwrap().expect("ping ran");
    assert!(
        out.contains(" 0% packet loss"),
        "packets lost across the restart:\n{out}"
    );

    // c's port, lease and flows are gone; a and b are untouched.
    assert!(wait_until(Duration::from_secs(5), || node
        .pod_ports()
        .len()
        == 2));
    assert!(!node.leases().contains(&c_ip), "{:?}", node.leases());
    assert!(
        !node.pod_flows().iter().any(|f| f.contains(&c_ip)),
        "{:#?}",
        node.pod_flows()
    );
    assert_eq!(node.pod_flows().len(), 14);
    assert!(a.ping(&b.ip, 3));
    assert_eq!(node.del(&c_id, "").code, 0);
    drop(a);
    drop(b);
    node.assert_no_pod_leftovers();
}

#[test]
fn pod_port_records_read_back_with_the_agents_codec() {
    // The port's external_ids as OVS holds them (ovs-vsctl, not the agent's client), read
    // with the one codec the agent, sdnctl and these tests share.
    let node = AgentNode::start(NodeOptions::default());
    let a = node.pod("default", "a");
    let veth = node.port_of(&a.id);
    let out = node.ovs.vsctl(&[
        "--format=json",
        "--columns=external_ids",
        "find",
        "Interface",
        &format!("name={veth}"),
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let pairs = v["data"][0][0][1].as_array().expect("an OVSDB map");
    let ids: std::collections::BTreeMap<String, String> = pairs
        .iter()
        .map(|p| (p[0].as_str().unwrap().into(), p[1].as_str().unwrap().into()))
        .collect();
    let rec = agent::pod::PortRecord::from_external_ids(&ids)
        .unwrap_or_else(|| panic!("not a pod port record: {ids:?}"));
    assert_eq!(
        rec.attachment,
        flows::AttachmentId::new(a.id.clone(), "eth0")
    );
    assert_eq!(rec.ip.map(|i| i.to_string()), Some(a.ip.clone()));
    assert_eq!((rec.namespace.as_str(), rec.pod.as_str()), ("default", "a"));
    assert_eq!(rec.netns, a.netns());
    assert_eq!(rec.vnid, Some(flows::Vnid::GLOBAL));
    assert_eq!(
        rec.to_external_ids(),
        ids,
        "the codec writes exactly what it reads"
    );
}

/// `ip -d link show DEV` in the network namespace pinned at `pin`.
fn pinned_link(pin: &std::path::Path, dev: &str) -> String {
    sdn_tests::harness::run(
        "nsenter",
        &[
            &format!("--net={}", pin.display()),
            "ip",
            "-d",
            "link",
            "show",
            dev,
        ],
    )
    .unwrap_or_else(|e| e)
}

#[test]
fn pool_pods_are_macvlans_on_pinned_peers_that_outlive_the_agent_and_return_to_the_pool() {
    use std::os::unix::fs::MetadataExt;
    let node = AgentNode::start(NodeOptions::default());
    // The pool is filled in the background after start-up, 32 ports per transaction; the
    // agent takes a batch's ports only once ovs-vswitchd has them, and it starts the next
    // batch after that: with the second batch's rows there, the first is ready.
    assert!(wait_until(Duration::from_secs(20), || node
        .pool_ports()
        .len()
        >= 64));
    let a = node.pod("default", "a");
    let b = node.pod("default", "b");
    let port_a = node.port_of(&a.id);
    let port_b = node.port_of(&b.id);
    assert!(port_a.starts_with("sdnp") && port_b.starts_with("sdnp"));
    let peer = |port: &str| format!("sdnq{}", &port[4..]);

    // The pod's eth0 is a passthru macvlan on the port's peer, which waits in the namespace
    // the agent pinned next to its socket; the peer is promiscuous while the macvlan is on it.
    let eth0 = a.ns.exec(&["ip", "-d", "link", "show", "eth0"]).unwrap();
    assert!(
        eth0.contains("macvlan mode passthru"),
        "eth0 of a pool pod:\n{eth0}"
    );
    let pin = node.dir().join("run/pool-netns");
    let peer_a = pinned_link(&pin, &peer(&port_a));
    assert!(peer_a.contains("promiscuity 1"), "{peer_a}");
    assert!(tcp_works(&a, &b, 8181).is_ok(), "TCP between pool pods");

    // SIGKILL and restart: the pinned namespace is the same one, the pods keep their
    // interfaces and their traffic.
    let ino = || std::fs::metadata(&pin).map(|m| m.ino()).unwrap();
    let before = ino();
    node.stop_agent(libc::SIGKILL);
    assert!(
        a.ping(&b.ip, 3),
        "pool pods reach each other while the agent is down"
    );
    node.start_agent();
    assert_eq!(
        ino(),
        before,
        "the restarted agent pinned another namespace"
    );
    assert!(a.ping(&b.ip, 3));
    assert!(node.log().contains("pool_ports="), "{}", node.log());

    // DEL: b's macvlan goes and its port comes back to the pool (same port, same veth),
    // once its flows are gone; its peer is free again. (The restarted agent topped the pool
    // up to its size, and a full pool deletes ports given back: c makes room.)
    assert!(wait_until(Duration::from_secs(10), || node
        .pool_ports()
        .len()
        >= 64));
    let c = node.pod("default", "c");
    let ofport_b = node
        .ovs
        .vsctl(&["get", "Interface", &port_b, "ofport"])
        .trim()
        .to_string();
    assert_eq!(node.del(&b.id, &b.netns()).code, 0);
    assert!(
        b.ns.exec(&["ip", "link", "show", "eth0"]).is_err(),
        "b's eth0 is gone"
    );
    assert!(
        wait_until(Duration::from_secs(5), || node
            .pool_ports()
            .contains(&port_b)),
        "port {port_b} is not back in the pool: {:?}",
        node.pool_ports()
    );
    assert_eq!(
        node.ovs
            .vsctl(&["get", "Interface", &port_b, "ofport"])
            .trim(),
        ofport_b
    );
    let peer_b = pinned_link(&pin, &peer(&port_b));
    assert!(peer_b.contains("promiscuity 0"), "{peer_b}");
    assert!(
        !node.pod_flows().iter().any(|f| f.contains(&b.ip)),
        "{:#?}",
        node.pod_flows()
    );
    b.forget();
    drop(a);
    drop(c);
    node.assert_no_pod_leftovers();
    node.assert_pool_sane(64);
}

#[test]
fn an_agent_whose_pin_would_not_outlive_it_runs_without_a_pool_and_says_so() {
    // `ip netns exec` gives the agent a private mount namespace: a namespace pinned there
    // would go with the agent, and with it the interfaces of pods on pool ports.
    let node = AgentNode::start(NodeOptions {
        private_mounts: true,
        ..NodeOptions::default()
    });
    assert!(
        node.log().contains("port pool off"),
        "no WARN about the pool:\n{}",
        node.log()
    );
    let a = node.pod("default", "a");
    let b = node.pod("default", "b");
    assert!(a.ping(&b.ip, 3));
    for p in [&a, &b] {
        let port = node.port_of(&p.id);
        assert!(!port.starts_with("sdnp"), "{port} is a pool port");
        let eth0 = p.ns.exec(&["ip", "-d", "link", "show", "eth0"]).unwrap();
        assert!(eth0.contains("veth"), "{eth0}");
    }
    std::thread::sleep(Duration::from_millis(600));
    assert!(node.pool_ports().is_empty(), "{:?}", node.pool_ports());
    assert!(
        !node.dir().join("run/pool-netns").exists(),
        "the agent made a parking namespace anyway"
    );
    drop(a);
    drop(b);
    node.assert_no_pod_leftovers();
}

/// The state directory: a file over the size limit is refused unread (named in the problems),
/// and after a restart with a broken NetNamespace file the namespace is named as such in the ADD
/// error and in `sdnctl namespaces` (through the state directory and through the agent), not
/// told to create it.
#[test]
fn a_broken_or_oversized_state_file_is_named_not_read() {
    let node = AgentNode::start(NodeOptions {
        extra: vec!["--netnamespace-wait".into(), "1".into()],
        ..NodeOptions::default()
    });
    node.set_netnamespace("tenant-a", 10);
    let ns = Netns::new("sdnbroken");
    let ok = node.add(
        "broken-1",
        &ns.path(),
        "K8S_POD_NAMESPACE=tenant-a;K8S_POD_NAME=p",
    );
    assert_eq!(ok.code, 0, "{}", ok.stdout);
    assert_eq!(node.del("broken-1", &ns.path()).code, 0);

    // While the agent runs, a file that breaks keeps its last good objects (a half-written file
    // must not drop a tenant); after a restart there is nothing to keep: that is the case here.
    node.stop_agent(libc::SIGTERM);
    // A stray 10 MB file: refused unread.
    let big = node.state_dir().join("stray.yaml");
    std::fs::write(&big, vec![b'x'; 10 * 1024 * 1024]).unwrap();
    // tenant-a's own file broken.
    std::fs::write(
        node.state_dir().join("netnamespace-tenant-a.yaml"),
        "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nmetadata: [broken\n",
    )
    .unwrap();
    node.start_agent();
    let status = || {
        let out = node.sdnctl_api(&["status"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(
        wait_until(Duration::from_secs(10), || status().contains(
            "over the 1048576 bytes a state file may have; it is not read"
        )),
        "{}",
        status()
    );
    let refused = node.add(
        "broken-2",
        &ns.path(),
        "K8S_POD_NAMESPACE=tenant-a;K8S_POD_NAME=p",
    );
    assert_ne!(refused.code, 0, "{}", refused.stdout);
    assert!(
        refused
            .stdout
            .contains("namespace \\\"tenant-a\\\" has no NetNamespace (no VNID): its NetNamespace file is unusable")
            && refused.stdout.contains("netnamespace-tenant-a.yaml")
            && !refused.stdout.contains("sdnctl create"),
        "{}",
        refused.stdout
    );
    node.assert_no_pod_leftovers();
    // sdnctl namespaces, from the state directory and from the agent.
    let listed = node.sdnctl(&["namespaces"]);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("tenant-a ") && l.contains("(NetNamespace file unusable: ")),
        "{listed}"
    );
    let out = node.sdnctl_api(&["--json", "namespaces"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let entry = v["namespaces"]
        .as_array()
        .and_then(|a| a.iter().find(|n| n["name"] == "tenant-a"))
        .unwrap_or_else(|| panic!("{v:#}"));
    assert!(
        entry["problem"]
            .as_str()
            .is_some_and(|p| p.contains("netnamespace-tenant-a.yaml")),
        "{v:#}"
    );
}
