//! The audit log on a real node (private OVS, netdev datapath, the real `sdn-agent`, pods through
//! `sdn-cni`): what a namespace's `k8s.ovn.org/acl-logging` annotation turns on is written, one
//! line per connection, with every field right; what it does not turn on is not; spoofing is
//! always logged; the verdict itself never changes.

use std::net::{IpAddr, SocketAddrV4};
use std::time::Duration;

use sdn_tests::harness::wait_until;
use sdn_tests::node::{AgentNode, CniPod, NodeOptions};
use sdn_tests::probe::{send_frames, tcp_echo_server, tcp_probe, udp_frame, Endpoint};
use serde_json::Value;

const VNID_A: u32 = 11;
const VNID_B: u32 = 12;

fn ip(p: &CniPod<'_>) -> std::net::Ipv4Addr {
    p.ip.parse().unwrap()
}

/// Lines of `event` `decision` whose destination is `dst` on `port`.
fn decisions_to(node: &AgentNode, dst: &CniPod<'_>, port: u16) -> Vec<Value> {
    node.audit_lines()
        .into_iter()
        .filter(|l| {
            l["event"] == "decision"
                && l["dst"]["ip"] == dst.ip.as_str()
                && l["dst"]["port"] == port
        })
        .collect()
}

fn wait_lines(node: &AgentNode, what: &str, f: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let mut last = Vec::new();
    let ok = wait_until(Duration::from_secs(5), || {
        last = node.audit_lines();
        f(&last)
    });
    assert!(
        ok,
        "{what}: audit log:\n{}\ntables 80 and 130:\n{}{}\nmeters:\n{}",
        lines_text(&last),
        node.ovs.ofctl(&["dump-flows", "br0", "table=80"]),
        node.ovs
            .ofctl(&["dump-flows", "br0", "table=130"])
            .lines()
            .filter(|l| !l.contains("n_packets=0"))
            .collect::<Vec<_>>()
            .join("\n"),
        node.ovs
            .ofctl(&["meter-stats", "br0"])
            .lines()
            .filter(|l| !l.contains("packet_in_count:0"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    last
}

fn lines_text(lines: &[Value]) -> String {
    lines
        .iter()
        .map(|l| l.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn tenancy_decisions_are_logged_for_the_namespace_that_asks_one_line_per_connection() {
    let node = AgentNode::start(NodeOptions {
        mode: "multitenant",
        ..Default::default()
    });
    node.set_netnamespace("tenant-a", VNID_A);
    node.set_audit_logging(
        "tenant-b",
        VNID_B,
        r#"{"deny": "alert", "allow": "notice"}"#,
    );
    let a = node.pod("tenant-a", "client-a");
    let b = node.pod("tenant-b", "server-b");
    let b2 = node.pod("tenant-b", "client-b");
    let _srv = tcp_echo_server(b.ns.name(), 8080);
    let to_b = SocketAddrV4::new(ip(&b), 8080);

    // Denied: another tenant. A connect across tenants ends at ARP (refused in table 80):
    // its requests, retried every second, are one line.
    assert!(!tcp_probe(a.ns.name(), to_b, Duration::from_millis(2500)));
    let lines = wait_lines(&node, "the denied ARP's line", |ls| {
        ls.iter()
            .any(|l| l["verdict"] == "deny" && l["dst"]["ip"] == b.ip.as_str())
    });
    let deny: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "decision" && l["verdict"] == "deny")
        .collect();
    assert_eq!(
        deny.len(),
        1,
        "one line for the retried ARP:\n{}",
        lines_text(&lines)
    );
    let d = deny[0];
    assert_eq!(d["protocol"], "arp");
    assert_eq!(d["src"]["pod"], "client-a");
    assert_eq!(d["dst"]["pod"], "server-b");
    assert!(d["dst"].get("port").is_none(), "{d}");

    // An IP packet across the boundary (sent with the right MAC, as a pod with a stale ARP
    // entry would): a line with its ports.
    let frames: Vec<Vec<u8>> = (0..5)
        .map(|_| {
            udp_frame(
                Endpoint::pod(ip(&a)),
                40000,
                Endpoint::pod(ip(&b)),
                8080,
                b"audit",
            )
        })
        .collect();
    send_frames(a.ns.name(), "eth0", &frames);
    let lines = wait_lines(&node, "the denied UDP packets' line", |ls| {
        ls.iter()
            .any(|l| l["protocol"] == "udp" && l["verdict"] == "deny")
    });
    let deny: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "decision" && l["protocol"] == "udp")
        .collect();
    assert_eq!(
        deny.len(),
        1,
        "five packets of one 5-tuple, one line:\n{}",
        lines_text(&lines)
    );
    let d = deny[0];
    assert_eq!(d["kind"], "tenancy");
    assert_eq!(d["severity"], "alert");
    assert_eq!(d["namespace"], "tenant-b");
    assert_eq!(d["node"], node.node_name());
    assert_eq!(d["src"]["namespace"], "tenant-a");
    assert_eq!(d["src"]["pod"], "client-a");
    assert_eq!(d["src"]["ip"], a.ip.as_str());
    assert_eq!(d["src"]["port"], 40000);
    assert_eq!(d["dst"]["namespace"], "tenant-b");
    assert_eq!(d["dst"]["pod"], "server-b");
    assert_eq!(d["dst"]["port"], 8080);
    assert_eq!(d["packets"], 1);
    assert_eq!(d["src_vnid"], VNID_A);
    assert_eq!(d["dst_vnid"], VNID_B);
    assert_eq!(d["table"], 80);
    assert!(
        d["rule"].as_str().unwrap().contains("different tenants"),
        "{d}"
    );
    assert!(d["time"].as_str().unwrap().ends_with('Z'));

    // Allowed: same tenant; one line however many packets the connection carries.
    for _ in 0..3 {
        assert!(tcp_probe(b2.ns.name(), to_b, Duration::from_secs(3)));
    }
    let lines = wait_lines(&node, "the allowed connections' lines", |ls| {
        ls.iter()
            .filter(|l| l["verdict"] == "allow" && l["event"] == "decision")
            .count()
            >= 3
    });
    let allow: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "decision" && l["verdict"] == "allow")
        .collect();
    assert_eq!(
        allow.len(),
        3,
        "three connections, three lines:\n{}",
        lines_text(&lines)
    );
    for l in &allow {
        assert_eq!(l["severity"], "notice");
        assert_eq!(l["src"]["pod"], "client-b");
        assert_eq!(l["dst"]["pod"], "server-b");
        assert_eq!(l["packets"], 1);
        assert!(l["rule"].as_str().unwrap().contains("same tenant"), "{l}");
    }
    let ports: std::collections::BTreeSet<u64> = allow
        .iter()
        .map(|l| l["src"]["port"].as_u64().unwrap())
        .collect();
    assert_eq!(ports.len(), 3, "each connection its own line");

    // tenant-a asked for nothing: its own connections are not logged.
    let a2 = node.pod("tenant-a", "server-a");
    let _srv_a = tcp_echo_server(a2.ns.name(), 9090);
    assert!(tcp_probe(
        a.ns.name(),
        SocketAddrV4::new(ip(&a2), 9090),
        Duration::from_secs(3)
    ));
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        decisions_to(&node, &a2, 9090).is_empty(),
        "{}",
        lines_text(&node.audit_lines())
    );
    let _ = IpAddr::from(ip(&a));
}
