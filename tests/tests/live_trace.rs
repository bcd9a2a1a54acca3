//! `sdnctl trace --live` on real OVS (netdev): one real, marked packet from a pod's port, and
//! what br0 did with it, compared with the static trace and with a real probe.
//!
//! What is proven on one node:
//! - delivered within a tenant (TCP, UDP, ICMP): every table the packet entered, the conntrack
//!   state it met, the row that would have output it to the destination's port, and the packet
//!   never reaching the destination (a capture in its namespace sees nothing);
//! - dropped by each table that drops a pod's packet: VNID isolation (80), the spoof guard
//!   (20), the egress firewall (100), a tenant's unavailable egress IP (101), NetworkPolicy
//!   ingress (80) and egress (27) isolation, each with the row;
//! - a Service: out to tun0, through the node's NAT, back into br0 and delivered to the
//!   endpoint (the second pass shown);
//! - an external address: handed to the node at tun0 at once, with no timeout;
//! - every answer agrees with the static trace and with a real probe of the same pair;
//! - concurrent traces do not mix; the trace's rows are gone when it ends, and a trace's rows
//!   left by a killed agent are swept when it starts again.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::Command;
use std::time::{Duration, Instant};

use cluster::{
    ClusterObject, EgressNetworkPolicy, EgressNetworkPolicyRule as Rule,
    EgressRuleType::{Allow, Deny},
    NetNamespace, StandaloneSource,
};
use sdn_tests::cluster::{node_name, underlay_ip, web_from_b, Cluster};
use sdn_tests::harness::{wait_until, workspace_bin};
use sdn_tests::kubeproxy::{self, Proto, Service};
use sdn_tests::node::{AgentNode, NodeOptions};
use sdn_tests::probe::{tcp_echo_server, tcp_probe, Capture};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(3);
const REFUSED: Duration = Duration::from_millis(1500);

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

/// `sdnctl --json trace --live SRC DST PROTO [extra]`: the answer (panics when it fails).
fn live(node: &AgentNode, src: &str, dst: &str, proto: &str, extra: &[&str]) -> Value {
    let out = Command::new(workspace_bin("sdnctl"))
        .arg("--api-socket")
        .arg(node.api_socket())
        .args(["--json", "trace", "--live", src, dst, proto])
        .args(extra)
        .env_remove("SDN_CONFIG")
        .env_remove("SDN_API_SOCKET")
        .output()
        .expect("run sdnctl");
    assert!(
        out.status.success(),
        "sdnctl trace --live {src} {dst} {proto}: {}\nagent log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        node.log()
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// The tables the packet entered on pass `pass`, in order.
fn entered(l: &Value, pass: u64) -> Vec<u64> {
    l["hops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["pass"] == pass && h["event"] == "entered")
        .map(|h| h["table"].as_u64().unwrap())
        .collect()
}

/// The last report that was not an entry, of a node's part (`live`, or `live.remote`):
/// (event, table, row).
fn end(l: &Value) -> (String, u64, String) {
    let h = l["hops"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|h| h["event"] != "entered")
        .unwrap_or_else(|| panic!("no end in {l:#}"));
    (
        h["event"].as_str().unwrap().to_string(),
        h["table"].as_u64().unwrap(),
        h["row"].as_str().unwrap_or_default().to_string(),
    )
}

/// A Service `svc`:80/TCP on `node` (kube-proxy-shaped rules) with one endpoint, `endpoint`:8080.
fn service(node: &AgentNode, svc: Ipv4Addr, endpoint: &str) {
    kubeproxy::install(
        node.ovs.ns(),
        &[Service {
            name: "s".into(),
            cluster_ip: svc,
            port: 80,
            proto: Proto::Tcp,
            endpoints: vec![(ip(endpoint), 8080)],
            node_port: None,
            external_local: false,
        }],
        "10.128.0.0/14",
    );
}

/// The trace rows on br0 (cookie feature 0xa).
fn trace_rows(node: &AgentNode) -> Vec<String> {
    node.flows()
        .into_iter()
        .filter(|l| l.starts_with("cookie=0xa"))
        .collect()
}

#[test]
fn live_traces_on_one_node_agree_with_the_static_trace_and_real_probes() {
    let node = AgentNode::start(NodeOptions::default());
    node.set_netnamespace("tenant-a", 11);
    node.set_netnamespace("tenant-b", 12);
    let a1 = node.pod("tenant-a", "a1");
    let a2 = node.pod("tenant-a", "a2");
    let b1 = node.pod("tenant-b", "b1");
    let _servers: Vec<_> = [&a2, &b1]
        .iter()
        .map(|p| tcp_echo_server(p.ns.name(), 8080))
        .collect();

    // Delivered within the tenant; the packet never reaches a2.
    let cap = Capture::start(a2.ns.name(), "eth0", b"sdn live trace");
    for proto in ["tcp/8080", "udp/5353", "icmp"] {
        let t = live(&node, "tenant-a/a1", &a2.ip, proto, &[]);
        let l = &t["live"];
        assert_eq!(l["outcome"], "delivered", "{proto}: {l:#}");
        assert_eq!(t["outcome"], "delivered");
        assert_eq!(l["differs"], Value::Null, "{proto}: {l:#}");
        // Tenancy (table 80, `reg0=0xb,reg1=0xb`) lets it on to table 81, which commits the
        // connection and delivers it (pipeline.md, "Tenancy").
        let (event, table, row) = end(l);
        assert_eq!((event.as_str(), table), ("delivered", 81), "{l:#}");
        assert!(row.contains("ct(commit)"), "{row}");
        assert!(row.contains("output:NXM_NX_REG2[]"), "{row}");
        let tables = entered(l, 1);
        for t in [0, 20, 26, 30, 31, 70, 75, 80, 81] {
            assert!(tables.contains(&t), "{proto}: table {t} not in {tables:?}");
        }
        // Conntrack: the packet is a new connection where the pipeline has tracked it.
        let at20 = l["hops"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["table"] == 20 && h["event"] == "entered")
            .unwrap();
        assert_eq!(at20["ct_state"], "+new+trk", "{at20:#}");
        assert!(
            l["verdict"].as_str().unwrap().contains("tenant-a/a2"),
            "{l:#}"
        );
        assert!(l["elapsed_ms"].as_u64().unwrap() < 1000, "{l:#}");
    }
    // The words, as an operator reads them.
    let text = node.sdnctl_api(&["trace", "--live", "tenant-a/a1", &b1.ip, "tcp/8080"]);
    let words = String::from_utf8_lossy(&text.stdout);
    eprintln!("{words}");
    for want in [
        "\nlive: TCP SYN 10.128.0.",
        " 80 ingress_isolation      DROPPED",
        "live verdict: DROPPED: dropped in table 80 (ingress_isolation) by the row shown last",
        "live and static agree",
    ] {
        assert!(words.contains(want), "{want:?} not in:\n{words}");
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(cap.stop().len(), 0, "a traced packet reached the pod");
    assert!(tcp_probe(
        a1.ns.name(),
        SocketAddrV4::new(ip(&a2.ip), 8080),
        TIMEOUT
    ));
    // Refused, saying why: not from a local pod, not IP.
    for (args, says) in [
        (
            vec!["trace", "--live", "node", &a2.ip, "tcp/80"],
            "a live trace sends its packet from a local pod's port",
        ),
        (
            vec!["trace", "--live", "tenant-a/a1", &a2.ip, "arp"],
            "ARP and neighbour discovery carry no mark",
        ),
    ] {
        let out = node.sdnctl_api(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }

    // Dropped by VNID isolation (table 80), and a real probe agrees.
    let t = live(&node, "tenant-a/a1", &b1.ip, "tcp/8080", &[]);
    let l = &t["live"];
    assert_eq!(l["outcome"], "dropped", "{l:#}");
    assert_eq!(t["outcome"], "dropped");
    let (event, table, _) = end(l);
    assert_eq!((event.as_str(), table), ("dropped", 80), "{l:#}");
    assert_eq!(l["differs"], Value::Null, "{l:#}");
    assert!(!tcp_probe(
        a1.ns.name(),
        SocketAddrV4::new(ip(&b1.ip), 8080),
        REFUSED
    ));

    // Dropped by the spoof guard (table 20).
    let t = live(
        &node,
        "tenant-a/a1",
        &a2.ip,
        "tcp/8080",
        &["--spoof-ip", &b1.ip],
    );
    let l = &t["live"];
    let (event, table, row) = end(l);
    assert_eq!((event.as_str(), table), ("dropped", 20), "{l:#}");
    assert!(row.contains("priority=1,ip"), "{row}");
    assert_eq!(entered(l, 1), vec![0, 20], "{l:#}");
    assert_eq!(l["differs"], Value::Null, "{l:#}");

    // An external address: handed to the node at tun0 at once.
    let started = Instant::now();
    let t = live(&node, "tenant-a/a1", "192.0.2.10", "tcp/443", &[]);
    let l = &t["live"];
    assert_eq!(l["outcome"], "to-host", "{l:#}");
    let (event, table, row) = end(l);
    assert_eq!((event.as_str(), table), ("left", 101), "{l:#}");
    assert!(row.contains("output:2"), "{row}");
    assert!(
        l["verdict"]
            .as_str()
            .unwrap()
            .contains("outside the cluster"),
        "{l:#}"
    );
    assert_eq!(l["differs"], Value::Null, "{l:#}");
    assert!(started.elapsed() < Duration::from_secs(2));

    // A Service: to tun0, the node's DNAT, back into br0, delivered to the endpoint.
    let svc = ip("172.30.0.10");
    service(&node, svc, &a2.ip);
    assert!(tcp_probe(a1.ns.name(), SocketAddrV4::new(svc, 80), TIMEOUT));
    let t = live(&node, "tenant-a/a1", "172.30.0.10", "tcp/80", &[]);
    let l = &t["live"];
    if l["outcome"] != "delivered" {
        // What the node's NAT did with it, to tell the node's part from br0's.
        eprintln!(
            "nat counters after the trace:\n{}",
            node.ovs
                .exec_in_netns(&["iptables", "-t", "nat", "-L", "-v", "-n"])
                .unwrap_or_default()
        );
    }
    assert_eq!(t["outcome"], "to-host", "the static trace ends at tun0");
    assert_eq!(l["outcome"], "delivered", "{l:#}");
    let hops = l["hops"].as_array().unwrap();
    let out60 = hops
        .iter()
        .find(|h| h["pass"] == 1 && h["event"] == "left")
        .unwrap_or_else(|| panic!("{l:#}"));
    assert_eq!(out60["table"], 60, "{l:#}");
    let second = entered(l, 2);
    assert!(
        second.starts_with(&[0]) && second.contains(&25),
        "{second:?}"
    );
    let back = hops.iter().find(|h| h["pass"] == 2).unwrap();
    assert_eq!(back["in_port"], 2, "back through tun0: {back:#}");
    let (event, table, _) = end(l);
    assert_eq!((event.as_str(), table), ("delivered", 81), "{l:#}");
    assert_eq!(l["differs"], Value::Null, "{l:#}");

    // The egress firewall (table 100): a denied address dropped there, an allowed one handed
    // to the node by table 101; real probes agree.
    let p = EgressNetworkPolicy::new(
        "tenant-a",
        "default",
        vec![
            Rule::cidr(Allow, "203.0.113.0/24"),
            Rule::cidr(Deny, "198.51.100.0/24"),
        ],
    );
    StandaloneSource::write_object(&node.state_dir(), &ClusterObject::EgressNetworkPolicy(p))
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || node
        .ovs
        .ofctl(&["dump-flows", "br0", "table=100"])
        .contains("198.51.100.0/24")));
    let t = live(&node, "tenant-a/a1", "198.51.100.7", "udp/53", &[]);
    let l = &t["live"];
    let (event, table, row) = end(l);
    assert_eq!((event.as_str(), table), ("dropped", 100), "{l:#}");
    assert!(row.contains("nw_dst=198.51.100.0/24"), "{row}");
    assert_eq!(l["differs"], Value::Null, "{l:#}");
    let t = live(&node, "tenant-a/a1", "203.0.113.10", "tcp/443", &[]);
    let (event, table, _) = end(&t["live"]);
    assert_eq!((event.as_str(), table), ("left", 101), "{:#}", t["live"]);
    assert!(!tcp_probe(
        a1.ns.name(),
        SocketAddrV4::new(ip("198.51.100.7"), 7777),
        REFUSED
    ));

    // A tenant whose egress IP no node holds: its external traffic is dropped in table 101
    // rather than leaving with the node's address.
    let mut nn = NetNamespace::new("tenant-e", 13);
    nn.egress_ips = vec!["192.168.77.150".into()];
    StandaloneSource::write_object(&node.state_dir(), &ClusterObject::NetNamespace(nn)).unwrap();
    let e1 = node.pod("tenant-e", "e1");
    assert!(wait_until(Duration::from_secs(10), || node
        .ovs
        .ofctl(&["dump-flows", "br0", "table=101"])
        .contains("reg0=0xd actions=drop")));
    let t = live(&node, "tenant-e/e1", "192.0.2.10", "tcp/443", &[]);
    let l = &t["live"];
    let (event, table, row) = end(l);
    assert_eq!((event.as_str(), table), ("dropped", 101), "{l:#}");
    assert!(row.contains("reg0=0xd"), "{row}");
    assert_eq!(l["differs"], Value::Null, "{l:#}");
    drop(e1);

    // Traces at the same time each get their own answer.
    let pairs = [
        (a2.ip.clone(), "delivered"),
        (b1.ip.clone(), "dropped"),
        ("192.0.2.10".to_string(), "to-host"),
        ("198.51.100.9".to_string(), "dropped"),
    ];
    let answers: Vec<(String, &str)> = std::thread::scope(|s| {
        let handles: Vec<_> = pairs
            .iter()
            .map(|(dst, want)| {
                let node = &node;
                s.spawn(move || {
                    let t = live(node, "tenant-a/a1", dst, "tcp/8080", &[]);
                    (t["live"]["outcome"].as_str().unwrap().to_string(), *want)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (got, want) in answers {
        assert_eq!(got, want);
    }

    // Nothing of any trace is left on br0.
    assert_eq!(trace_rows(&node), Vec::<String>::new());
}

/// Starts `sdnctl trace --live` in the background (its outcome is not awaited).
fn live_in_background(node: &AgentNode, src: &str, dst: &str) -> std::process::Child {
    Command::new(workspace_bin("sdnctl"))
        .arg("--api-socket")
        .arg(node.api_socket())
        .args(["--json", "trace", "--live", src, dst, "tcp/80"])
        .env_remove("SDN_CONFIG")
        .env_remove("SDN_API_SOCKET")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run sdnctl")
}

/// An agent killed in the middle of a trace leaves its rows; the next agent sweeps them when it
/// starts, and without one they remove themselves (hard timeout).
#[test]
fn a_killed_agent_leaves_no_trace_rows() {
    let node = AgentNode::start(NodeOptions::default());
    node.set_netnamespace("tenant-a", 11);
    let _a1 = node.pod("tenant-a", "a1");
    // A Service address with no rules: the packet goes into the node and never comes back, so
    // the trace waits its whole time, rows in place.
    for restart in [true, false] {
        let mut sdnctl = live_in_background(&node, "tenant-a/a1", "172.30.0.99");
        assert!(
            wait_until(Duration::from_secs(5), || !trace_rows(&node).is_empty()),
            "the trace's rows never appeared"
        );
        node.stop_agent(libc::SIGKILL);
        let left = trace_rows(&node);
        assert!(
            !left.is_empty(),
            "the agent was killed after its trace ended"
        );
        assert!(
            left.iter().all(|r| r.contains("hard_timeout=10")),
            "{left:#?}"
        );
        let _ = sdnctl.wait();
        if restart {
            node.start_agent();
            assert_eq!(trace_rows(&node), Vec::<String>::new(), "not swept");
        } else {
            assert!(
                wait_until(Duration::from_secs(12), || trace_rows(&node).is_empty()),
                "rows outlived their hard timeout: {:#?}",
                trace_rows(&node)
            );
            node.start_agent();
        }
    }
}

/// Two nodes sharing a standalone state directory: the packet leaves node-1 over VXLAN with
/// its tenant's VNI to node-2's VTEP, and node-2's agent reports its arrival and its fate
/// (delivered within the tenant, dropped across tenants); real probes agree. A Service whose
/// endpoint is on node-2 goes out through node-1's NAT and over VXLAN.
#[test]
fn a_live_trace_follows_its_packet_to_the_other_node() {
    let c = Cluster::start(2, &NodeOptions::default());
    c.set_netnamespace("tenant-a", 11);
    c.set_netnamespace("tenant-b", 12);
    let (n1, n2) = (c.node(1), c.node(2));
    let a1 = n1.pod("tenant-a", "a1");
    let a2 = n2.pod("tenant-a", "a2");
    let b2 = n2.pod("tenant-b", "b2");
    let _servers: Vec<_> = [&a2, &b2]
        .iter()
        .map(|p| tcp_echo_server(p.ns.name(), 8080))
        .collect();
    let to_a2 = SocketAddrV4::new(ip(&a2.ip), 8080);
    assert!(wait_until(Duration::from_secs(15), || tcp_probe(
        a1.ns.name(),
        to_a2,
        Duration::from_millis(500)
    )));

    let cap = Capture::start(a2.ns.name(), "eth0", b"sdn live trace");
    for proto in ["tcp/8080", "udp/5353", "icmp"] {
        let t = live(n1, "tenant-a/a1", &a2.ip, proto, &[]);
        let l = &t["live"];
        assert_eq!(t["outcome"], "to-remote-node");
        assert_eq!(l["outcome"], "delivered", "{proto}: {l:#}");
        assert_eq!(l["vxlan"]["vni"], 11, "{l:#}");
        assert_eq!(
            l["vxlan"]["remote_vtep"],
            underlay_ip(2).to_string(),
            "{l:#}"
        );
        assert_eq!(l["vxlan"]["remote_node"], node_name(2));
        let (event, table, row) = end(l);
        assert_eq!((event.as_str(), table), ("left", 90), "{l:#}");
        assert!(row.contains("output:1"), "{row}");
        let r = &l["remote"];
        assert_eq!(r["node"], node_name(2), "{l:#}");
        let hops = r["hops"].as_array().unwrap_or_else(|| panic!("{l:#}"));
        assert_eq!(hops[0]["table"], 0, "{r:#}");
        assert_eq!(hops[0]["in_port"], 1, "arrived over VXLAN: {r:#}");
        assert!(
            hops.iter().any(|h| h["table"] == 10),
            "vxlan_ingress: {r:#}"
        );
        let (event, table, _) = end(r);
        assert_eq!((event.as_str(), table), ("delivered", 81), "{r:#}");
        assert!(
            r["verdict"].as_str().unwrap().contains("tenant-a/a2"),
            "{r:#}"
        );
        assert_eq!(l["differs"], Value::Null, "{l:#}");
    }
    let text = n1.sdnctl_api(&["trace", "--live", "tenant-a/a1", &a2.ip, "tcp/8080"]);
    let words = String::from_utf8_lossy(&text.stdout);
    for want in [
        " 90 remote_ip              LEFT",
        &format!("  -- on node {} --\n", node_name(2)),
        " 81 ingress_baseline       DELIVERED",
        &format!("; on node {}: delivered", node_name(2)),
    ] {
        assert!(words.contains(want), "{want:?} not in:\n{words}");
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(cap.stop().len(), 0, "a traced packet reached the pod");

    // Across tenants: it leaves node-1 (VNI 11) and node-2 drops it in table 80.
    let t = live(n1, "tenant-a/a1", &b2.ip, "tcp/8080", &[]);
    let l = &t["live"];
    assert_eq!(l["outcome"], "dropped", "{l:#}");
    let (event, table, _) = end(&l["remote"]);
    assert_eq!((event.as_str(), table), ("dropped", 80), "{l:#}");
    assert!(!tcp_probe(
        a1.ns.name(),
        SocketAddrV4::new(ip(&b2.ip), 8080),
        REFUSED
    ));

    // A Service with its endpoint on node-2: out through node-1's NAT, back into br0, over
    // VXLAN.
    let svc = ip("172.30.1.10");
    service(n1, svc, &a2.ip);
    assert!(tcp_probe(a1.ns.name(), SocketAddrV4::new(svc, 80), TIMEOUT));
    let t = live(n1, "tenant-a/a1", &svc.to_string(), "tcp/80", &[]);
    let l = &t["live"];
    let left: Vec<(u64, u64)> = l["hops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["event"] == "left")
        .map(|h| (h["pass"].as_u64().unwrap(), h["table"].as_u64().unwrap()))
        .collect();
    assert_eq!(left, vec![(1, 60), (2, 90)], "{l:#}");
    assert_eq!(l["vxlan"]["vni"], 11, "{l:#}");
    // node-2 was asked once the packet showed where it went, and saw the same packet again.
    let r = &l["remote"];
    assert_eq!(r["node"], node_name(2), "{l:#}");
    let (event, table, _) = end(r);
    assert_eq!((event.as_str(), table), ("delivered", 81), "{l:#}");
    assert!(
        r["verdict"].as_str().unwrap().contains("sent again"),
        "{r:#}"
    );
    assert_eq!(l["outcome"], "delivered", "{l:#}");
    assert_eq!(l["differs"], Value::Null, "{l:#}");
    // node-2's agent is down: unwatched there, the packet would reach the pod, so it is not
    // sent, and the answer says why.
    n2.stop_agent(libc::SIGTERM);
    let cap = Capture::start(a2.ns.name(), "eth0", b"sdn live trace");
    let t = live(n1, "tenant-a/a1", &a2.ip, "udp/5353", &[]);
    let l = &t["live"];
    assert_eq!(l["hops"], serde_json::json!([]), "{l:#}");
    let verdict = l["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("not sent: node ")
            && verdict
                .contains("did not get ready to watch within 2000 ms (is its agent running?)"),
        "{l:#}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        cap.stop().len(),
        0,
        "an unwatched traced packet reached the pod"
    );
    n2.start_agent();
    for n in [n1, n2] {
        assert_eq!(trace_rows(n), Vec::<String>::new());
    }
    assert!(
        std::fs::read_dir(c.state_dir().join("live-traces"))
            .map(|d| d.count())
            .unwrap_or(0)
            == 0,
        "the requests were not removed"
    );
}

/// Networkpolicy mode, Kubernetes mode (the fake API server): the copies of the NetworkPolicy
/// rows (conjunctions included) decide the traced packet as the rows decide real ones: the
/// allowed peer and port delivered by the rule's row, another port and another namespace
/// dropped by the isolation row; real probes agree.
#[test]
fn live_traces_meet_network_policies_as_real_packets_do() {
    let (c, plane) = Cluster::start_kubernetes(
        1,
        &NodeOptions {
            mode: "networkpolicy",
            ..NodeOptions::default()
        },
    );
    let fake = &plane.fake;
    let node = c.node(1);
    let [xa, xb, ya] = web_from_b(fake, node, &serde_json::json!({}));
    let _srv = tcp_echo_server(xa.ns.name(), 80);
    let _srv81 = tcp_echo_server(xa.ns.name(), 81);
    let to_xa = |port| SocketAddrV4::new(ip(&xa.ip), port);
    assert!(wait_until(Duration::from_secs(20), || !tcp_probe(
        ya.ns.name(),
        to_xa(80),
        Duration::from_millis(500)
    )));
    assert!(tcp_probe(xb.ns.name(), to_xa(80), TIMEOUT));
    assert!(!tcp_probe(xb.ns.name(), to_xa(81), REFUSED));

    let t = live(node, "x/b", &xa.ip, "tcp/80", &[]);
    let l = &t["live"];
    assert_eq!(l["outcome"], "delivered", "{l:#}");
    let (event, table, row) = end(l);
    assert_eq!((event.as_str(), table), ("delivered", 80), "{l:#}");
    assert!(row.contains("conj_id="), "the rule's row: {row}");
    assert_eq!(l["differs"], Value::Null, "{l:#}");
    for (from, port) in [("y/a", 80), ("x/b", 81)] {
        let t = live(node, from, &xa.ip, &format!("tcp/{port}"), &[]);
        let l = &t["live"];
        assert_eq!(l["outcome"], "dropped", "{from} :{port}: {l:#}");
        let (event, table, row) = end(l);
        assert_eq!((event.as_str(), table), ("dropped", 80), "{l:#}");
        assert!(row.contains("priority=100"), "the isolation row: {row}");
        assert_eq!(l["differs"], Value::Null, "{l:#}");
    }
    // Egress isolation (table 27): y/a may send nothing.
    fake.put(
        serde_json::json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "no-egress", "namespace": "y"},
        "spec": {"podSelector": {}, "policyTypes": ["Egress"]}}),
    )
    .unwrap();
    let _srv_b = tcp_echo_server(xb.ns.name(), 80);
    let to_xb = SocketAddrV4::new(ip(&xb.ip), 80);
    assert!(wait_until(Duration::from_secs(20), || !tcp_probe(
        ya.ns.name(),
        to_xb,
        Duration::from_millis(500)
    )));
    let t = live(node, "y/a", &xb.ip, "tcp/80", &[]);
    let l = &t["live"];
    let (event, table, row) = end(l);
    assert_eq!((event.as_str(), table), ("dropped", 27), "{l:#}");
    assert!(row.contains("reg3="), "the egress isolation row: {row}");
    assert_eq!(l["differs"], Value::Null, "{l:#}");
    assert_eq!(trace_rows(node), Vec::<String>::new());
}

/// Kubernetes mode, two nodes (the fake API server and the real controller): the request goes
/// as a ConfigMap labelled with node-2, whose agent watches for it, reports in the reply
/// ConfigMap, and both are gone when the trace ends.
#[test]
fn in_kubernetes_mode_the_other_node_reports_through_config_maps() {
    let (c, plane) = Cluster::start_kubernetes(2, &NodeOptions::default());
    let fake = &plane.fake;
    fake.put(serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "tenant-a"}}))
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || fake
            .get("network.openshift.io", "netnamespaces", None, "tenant-a")
            .is_some()),
        "no NetNamespace:\n{}",
        plane.controller_log()
    );
    for (name, i) in [("a1", 1), ("a2", 2)] {
        fake.put(serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "tenant-a"},
            "spec": {"nodeName": node_name(i), "containers": [{"name": "c", "image": "busybox"}]}}))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    let (n1, n2) = (c.node(1), c.node(2));
    let a1 = n1.pod("tenant-a", "a1");
    let a2 = n2.pod("tenant-a", "a2");
    let _srv = tcp_echo_server(a2.ns.name(), 8080);
    let to_a2 = SocketAddrV4::new(ip(&a2.ip), 8080);
    assert!(wait_until(Duration::from_secs(20), || tcp_probe(
        a1.ns.name(),
        to_a2,
        Duration::from_millis(500)
    )));
    let t = live(n1, "tenant-a/a1", &a2.ip, "tcp/8080", &[]);
    let l = &t["live"];
    assert_eq!(l["outcome"], "delivered", "{l:#}\n{}", n2.log());
    assert_eq!(l["remote"]["node"], node_name(2));
    let hops = l["remote"]["hops"].as_array().unwrap();
    assert_eq!(hops[0]["in_port"], 1, "{l:#}");
    assert_eq!(hops.last().unwrap()["event"], "delivered", "{l:#}");
    assert_eq!(l["differs"], Value::Null, "{l:#}");
    let left: Vec<Value> = fake
        .list("configmaps")
        .into_iter()
        .filter(|cm| {
            cm["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("live-trace-"))
        })
        .collect();
    assert!(left.is_empty(), "ConfigMaps left: {left:#?}");
    for n in [n1, n2] {
        assert_eq!(trace_rows(n), Vec::<String>::new());
    }
}

/// IPv6 on a dual-stack node: the mark rides in the traffic class; delivered within a tenant
/// (TCP and ICMPv6), dropped across tenants, each as the static trace and a real probe say.
#[test]
fn live_traces_in_ipv6() {
    let node = AgentNode::start(NodeOptions::default().dual_stack());
    node.set_netnamespace("tenant-a", 11);
    node.set_netnamespace("tenant-b", 12);
    let a1 = node.pod("tenant-a", "a1");
    let a2 = node.pod("tenant-a", "a2");
    let b1 = node.pod("tenant-b", "b1");
    let (a2_6, b1_6) = (a2.ip6.clone().unwrap(), b1.ip6.clone().unwrap());
    let _srv = sdn_tests::probe::tcp6_echo_server(a2.ns.name(), 8080);
    let _srv_b = sdn_tests::probe::tcp6_echo_server(b1.ns.name(), 8080);
    let cap = Capture::start(a2.ns.name(), "eth0", b"sdn live trace");
    for proto in ["tcp/8080", "icmp6"] {
        let t = live(&node, "tenant-a/a1", &a2_6, proto, &[]);
        let l = &t["live"];
        assert_eq!(l["outcome"], "delivered", "{proto}: {l:#}");
        assert!(l["packet"].as_str().unwrap().contains("fd01:"), "{l:#}");
        let (event, table, _) = end(l);
        assert_eq!((event.as_str(), table), ("delivered", 81), "{l:#}");
        assert_eq!(l["differs"], Value::Null, "{proto}: {l:#}");
    }
    let t = live(&node, "tenant-a/a1", &b1_6, "tcp/8080", &[]);
    let (event, table, _) = end(&t["live"]);
    assert_eq!((event.as_str(), table), ("dropped", 80), "{:#}", t["live"]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(cap.stop().len(), 0, "a traced packet reached the pod");
    let to = |ip: &str| std::net::SocketAddr::new(ip.parse().unwrap(), 8080);
    assert!(sdn_tests::probe::tcp_probe_to(
        a1.ns.name(),
        to(&a2_6),
        TIMEOUT
    ));
    assert!(!sdn_tests::probe::tcp_probe_to(
        a1.ns.name(),
        to(&b1_6),
        REFUSED
    ));
}

/// A tenant whose egress IP is on node-2: from node-1 the packet leaves by the tenant's
/// egress-IP group over VXLAN; the trace asks node-2 (the group's VTEP), sends the packet
/// again, and node-2 reports its arrival and what its own egress-IP row did with it.
#[test]
fn an_egress_ip_on_another_node_is_followed_there() {
    let c = Cluster::start(2, &NodeOptions::default());
    let egress = "192.168.77.100";
    let mut nn = NetNamespace::new("eg-a", 30);
    nn.egress_ips = vec![egress.into()];
    StandaloneSource::write_object(c.state_dir(), &ClusterObject::NetNamespace(nn)).unwrap();
    let mut hs = c.host_subnet(&node_name(2));
    hs.egress_ips = vec![egress.into()];
    c.write_host_subnet(&hs);
    let (n1, n2) = (c.node(1), c.node(2));
    let _a1 = n1.pod("eg-a", "a1");
    assert!(
        wait_until(Duration::from_secs(15), || n1
            .ovs
            .ofctl(&["dump-flows", "br0", "table=101"])
            .contains("reg0=0x1e actions=ct(commit),group:30")),
        "no egress-IP row on node-1:\n{}",
        n1.ovs.ofctl(&["dump-flows", "br0", "table=101"])
    );
    // node-2 has taken the address (until then its row drops the tenant's traffic).
    assert!(
        wait_until(Duration::from_secs(20), || n2
            .ovs
            .ofctl(&["dump-flows", "br0", "table=101"])
            .contains("reg0=0x1e actions=group:30")),
        "node-2 did not take the egress IP:\n{}",
        n2.log()
    );
    let t = live(n1, "eg-a/a1", "192.0.2.10", "tcp/443", &[]);
    let l = &t["live"];
    let (event, table, row) = end(l);
    assert_eq!((event.as_str(), table), ("left", 101), "{l:#}");
    assert!(row.contains("group:30"), "{row}");
    let r = &l["remote"];
    assert_eq!(r["node"], node_name(2), "{l:#}");
    let hops = r["hops"].as_array().unwrap_or_else(|| panic!("{l:#}"));
    assert_eq!(hops[0]["in_port"], 1, "arrived over VXLAN: {r:#}");
    // node-2's own row for the tenant decides there: the egress IP's group when node-2 holds
    // the address, a drop while it does not (it has not been able to take it yet).
    let (event, table, row) = end(r);
    let t101 = n2
        .ovs
        .ofctl(&["--no-stats", "dump-flows", "br0", "table=101"]);
    let mine = t101
        .lines()
        .find(|l| l.contains("reg0=0x1e "))
        .unwrap_or_else(|| panic!("node-2 has no row for the tenant:\n{t101}"));
    let want = if mine.ends_with("actions=drop") {
        "dropped"
    } else {
        "left"
    };
    assert_eq!((event.as_str(), table), (want, 101), "{r:#}\n{t101}");
    assert_eq!(row, mine.trim(), "node-2's egress-IP row");
    assert!(
        r["verdict"].as_str().unwrap().contains("sent again"),
        "{r:#}"
    );
    for n in [n1, n2] {
        assert_eq!(trace_rows(n), Vec::<String>::new());
    }
}
