//! ClusterNetworkPolicies as files of a standalone node's state directory (multitenant mode,
//! one node, the real agent and pods): written, the Admin tier decides before tenancy; changed,
//! the new rules; refused by the reader, the subject fails closed and `sdnctl network-policies`
//! says why; deleted, tenancy alone again. A `nodes` peer selects the nodes of the `Node`
//! files by their labels.

use std::net::SocketAddrV4;
use std::time::Duration;

use sdn_tests::harness::wait_until;
use sdn_tests::node::{AgentNode, CniPod, NodeOptions};
use sdn_tests::probe;

const PORT: u16 = 8080;
const SETTLE: Duration = Duration::from_secs(15);

fn reach(from: &CniPod<'_>, to: &CniPod<'_>) -> bool {
    let dst = SocketAddrV4::new(to.ip.parse().unwrap(), PORT);
    probe::tcp_probe(from.ns.name(), dst, Duration::from_millis(700))
}

/// Admin tier, priority 10, subject namespace `tenant-a`, one ingress rule from namespace
/// `tenant-b` with `action`; `priority` as written.
fn policy(priority: &str, action: &str) -> String {
    format!(
        "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\n\
         metadata: {{name: b-into-a}}\nspec:\n  tier: Admin\n  priority: {priority}\n  \
         subject: {{namespaces: {{matchLabels: {{kubernetes.io/metadata.name: tenant-a}}}}}}\n  \
         ingress:\n  - action: {action}\n    \
         from: [{{namespaces: {{matchLabels: {{kubernetes.io/metadata.name: tenant-b}}}}}}]\n"
    )
}

/// Tenants `tenant-a` (VNID 11: pods a1, a2) and `tenant-b` (VNID 12: pod b1).
fn two_tenants(node: &AgentNode) -> [CniPod<'_>; 3] {
    node.set_netnamespace("tenant-a", 11);
    node.set_netnamespace("tenant-b", 12);
    [
        node.pod("tenant-a", "a1"),
        node.pod("tenant-a", "a2"),
        node.pod("tenant-b", "b1"),
    ]
}

/// `sdnctl network-policies`.
fn policies(node: &AgentNode) -> String {
    let out = node.sdnctl_api(&["network-policies"]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn cluster_network_policy_files_decide_before_tenancy_and_fail_closed() {
    let node = AgentNode::start(NodeOptions::default());
    let [a1, a2, b1] = two_tenants(&node);
    let _servers: Vec<_> = [&a1, &a2, &b1]
        .iter()
        .map(|p| probe::tcp_echo_server(p.ns.name(), PORT))
        .collect();
    assert!(reach(&a2, &a1), "same tenant");
    assert!(!reach(&b1, &a1), "across tenants");

    let file = node.state_dir().join("clusternetworkpolicy-b-into-a.yaml");
    std::fs::write(&file, policy("10", "Accept")).unwrap();
    assert!(
        wait_until(SETTLE, || reach(&b1, &a1)),
        "the Admin Accept lets tenant-b into tenant-a:\n{}",
        node.log()
    );
    assert!(!reach(&a1, &b1), "not the other way");
    let listed = policies(&node);
    assert!(
        listed.contains("b-into-a (Admin tier, priority 10)"),
        "{listed}"
    );

    // Changed to a Deny: tenant-b is out again (tenancy alone would say so too; a2 still in).
    std::fs::write(&file, policy("10", "Deny")).unwrap();
    assert!(wait_until(SETTLE, || !reach(&b1, &a1)));
    assert!(reach(&a2, &a1));

    // A priority past the API's bound: refused, and tenant-a's pods are denied everything
    // (even from their own tenant) until the file is fixed.
    std::fs::write(&file, policy("1001", "Accept")).unwrap();
    assert!(
        wait_until(SETTLE, || !reach(&a2, &a1)),
        "a refused policy fails closed:\n{}",
        node.log()
    );
    let listed = policies(&node);
    assert!(
        listed.contains("b-into-a") && listed.contains("priority"),
        "sdnctl names the refused policy and the field: {listed}"
    );

    // Deleted: tenancy alone.
    std::fs::remove_file(&file).unwrap();
    assert!(wait_until(SETTLE, || reach(&a2, &a1) && !reach(&b1, &a1)));
}

/// A standalone node's `Node` files are what `nodes` peers select: an Admin egress Deny to
/// the nodes labelled `role: infra` on TCP 10250 holds once a Node file gives this node's
/// address that label, and lets go when the label goes; other ports stay open.
#[test]
fn node_files_are_what_a_nodes_peer_selects() {
    const NODE_ADDR: &str = "192.168.111.10";
    let node = AgentNode::start(NodeOptions::default());
    node.set_netnamespace("tenant-a", 11);
    let a1 = node.pod("tenant-a", "a1");
    // The node's address, served in the agent's namespace (the host).
    node.ovs
        .exec_in_netns(&["ip", "addr", "add", &format!("{NODE_ADDR}/32"), "dev", "lo"])
        .unwrap();
    let _servers = [
        probe::tcp_echo_server(node.ovs.netns(), 10250),
        probe::tcp_echo_server(node.ovs.netns(), 10251),
    ];
    let to_node = |port: u16| {
        probe::tcp_probe(
            a1.ns.name(),
            SocketAddrV4::new(NODE_ADDR.parse().unwrap(), port),
            Duration::from_millis(700),
        )
    };
    assert!(to_node(10250) && to_node(10251), "the node's address");

    std::fs::write(
        node.state_dir()
            .join("clusternetworkpolicy-no-kubelet.yaml"),
        "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\n\
         metadata: {name: no-kubelet}\nspec:\n  tier: Admin\n  priority: 10\n  \
         subject: {namespaces: {}}\n  egress:\n  - name: kubelet\n    action: Deny\n    \
         to: [{nodes: {matchLabels: {role: infra}}}]\n    \
         protocols: [{tcp: {destinationPort: {number: 10250}}}]\n",
    )
    .unwrap();
    let node_file = |labels: &str| {
        format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: {}, labels: {{{labels}}}}}\n\
             status:\n  addresses: [{{type: InternalIP, address: {NODE_ADDR}}}]\n",
            node.node_name()
        )
    };
    let file = node.state_dir().join("node.yaml");
    std::fs::write(&file, node_file("role: worker")).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert!(to_node(10250), "no infra node: the Deny has no peer");

    std::fs::write(&file, node_file("role: infra")).unwrap();
    assert!(
        wait_until(SETTLE, || !to_node(10250)),
        "the node labelled infra: its address denied on 10250\n{}",
        node.log()
    );
    assert!(to_node(10251), "other ports stay open");
    let trace = node.trace("tenant-a/a1", NODE_ADDR, "tcp/10250", None);
    let trace = trace["verdict"].as_str().unwrap_or_default();
    assert!(
        trace.contains(
            "dropped by ClusterNetworkPolicy no-kubelet (Admin tier, priority 10) egress rule 0 \"kubelet\" (Deny)"
        ),
        "sdnctl trace names the rule: {trace}"
    );

    std::fs::write(&file, node_file("role: worker")).unwrap();
    assert!(
        wait_until(SETTLE, || to_node(10250)),
        "the label gone: open again"
    );
}

/// A policy that carries the `k8s.ovn.org/acl-logging` annotation has its decisions written to
/// the audit log, each line naming the policy, its tier and priority, and the rule: a Deny
/// (alert), an Accept across tenants (notice, one line for the connection), a Pass to tenancy
/// (warning); a namespace that logs nothing has no say. A bad severity is named in a note
/// line and turns that verdict off.
#[test]
fn a_logged_policy_names_its_rule_in_the_audit_log() {
    let node = AgentNode::start(NodeOptions::default());
    let [a1, a2, b1] = two_tenants(&node);
    let _servers: Vec<_> = [8080, 8081]
        .iter()
        .map(|port| probe::tcp_echo_server(a1.ns.name(), *port))
        .collect();
    let to_a1 = |from: &CniPod<'_>, port: u16| {
        let dst = SocketAddrV4::new(a1.ip.parse().unwrap(), port);
        probe::tcp_probe(from.ns.name(), dst, Duration::from_millis(700))
    };
    let policy = |annotation: &str| {
        format!(
            "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\n\
             metadata:\n  name: watch-a\n  annotations:\n    k8s.ovn.org/acl-logging: '{annotation}'\n\
             spec:\n  tier: Admin\n  priority: 10\n  \
             subject: {{namespaces: {{matchLabels: {{kubernetes.io/metadata.name: tenant-a}}}}}}\n  \
             ingress:\n  \
             - name: no-8081\n    action: Deny\n    \
             from: [{{namespaces: {{matchLabels: {{kubernetes.io/metadata.name: tenant-b}}}}}}]\n    \
             protocols: [{{tcp: {{destinationPort: {{number: 8081}}}}}}]\n  \
             - name: b-in\n    action: Accept\n    \
             from: [{{namespaces: {{matchLabels: {{kubernetes.io/metadata.name: tenant-b}}}}}}]\n  \
             - name: own\n    action: Pass\n    \
             from: [{{namespaces: {{matchLabels: {{kubernetes.io/metadata.name: tenant-a}}}}}}]\n"
        )
    };
    let file = node.state_dir().join("clusternetworkpolicy-watch-a.yaml");
    std::fs::write(
        &file,
        policy(r#"{"deny": "alert", "allow": "notice", "pass": "warning"}"#),
    )
    .unwrap();
    assert!(
        wait_until(SETTLE, || to_a1(&b1, 8080)),
        "the Accept lets tenant-b in:\n{}",
        node.log()
    );
    assert!(!to_a1(&b1, 8081), "the Deny holds");
    assert!(to_a1(&a2, 8080), "the Pass hands tenant-a's own to tenancy");

    let decisions = |port: u16| -> Vec<serde_json::Value> {
        node.audit_lines()
            .into_iter()
            .filter(|l| l["event"] == "decision" && l["dst"]["port"] == port)
            .collect()
    };
    let lines_of = |verdict: &str, port: u16, from: &str| -> Vec<serde_json::Value> {
        decisions(port)
            .into_iter()
            .filter(|l| l["verdict"] == verdict && l["src"]["pod"] == from)
            .collect()
    };
    assert!(
        wait_until(Duration::from_secs(5), || {
            !lines_of("allow", 8080, "b1").is_empty()
                && !lines_of("deny", 8081, "b1").is_empty()
                && !lines_of("pass", 8080, "a2").is_empty()
        }),
        "every verdict's line: {:#?}\n{}",
        node.audit_lines(),
        node.log()
    );
    let object = "ClusterNetworkPolicy watch-a (Admin tier, priority 10)";
    let deny = &lines_of("deny", 8081, "b1")[0];
    assert_eq!(deny["kind"], "cluster-network-policy", "{deny}");
    assert_eq!(deny["object"], object, "{deny}");
    assert_eq!(deny["rule"], "ingress rule 0 \"no-8081\" (Deny)", "{deny}");
    assert_eq!(deny["severity"], "alert", "{deny}");
    assert_eq!(deny["namespace"], "tenant-a", "{deny}");
    assert_eq!(deny["direction"], "ingress", "{deny}");
    assert_eq!(deny["table"], 80, "{deny}");
    let allow = lines_of("allow", 8080, "b1");
    let ports: std::collections::BTreeSet<u64> = allow
        .iter()
        .filter_map(|l| l["src"]["port"].as_u64())
        .collect();
    assert_eq!(
        ports.len(),
        allow.len(),
        "one line a connection: {allow:#?}"
    );
    assert_eq!(allow[0]["object"], object);
    assert_eq!(allow[0]["rule"], "ingress rule 1 \"b-in\" (Accept)");
    assert_eq!(allow[0]["severity"], "notice");
    assert_eq!(allow[0]["dst"]["pod"], "a1");
    let pass = &lines_of("pass", 8080, "a2")[0];
    assert_eq!(pass["rule"], "ingress rule 2 \"own\" (Pass)", "{pass}");
    assert_eq!(pass["severity"], "warning", "{pass}");
    // sdnctl trace says what the logged rows do, and that they log.
    let t = node.trace("tenant-b/b1", "tenant-a/a1", "tcp/8081", None);
    assert_eq!(
        t["verdict"].as_str().unwrap_or_default(),
        "dropped in ingress_isolation: ingress of tenant-a/a1: dropped by ClusterNetworkPolicy watch-a (Admin tier, priority 10) ingress rule 0 \"no-8081\" (Deny), logged to the audit log",
        "{t:#}"
    );
    let t = node.trace("tenant-b/b1", "tenant-a/a1", "tcp/8080", None);
    assert!(
        t["policy"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.as_str())
            .any(|p| p.contains("allowed by ClusterNetworkPolicy watch-a (Admin tier, priority 10) ingress rule 1 \"b-in\" (Accept), logged to the audit log")),
        "{t:#}"
    );
    // Tenancy's own decision is not logged: tenant-a's namespace asks for nothing.
    assert!(
        decisions(8080)
            .iter()
            .all(|l| l["kind"] == "cluster-network-policy"),
        "{:#?}",
        decisions(8080)
    );

    // A severity that is none: a note names the policy, and denials are no longer logged
    // (the Deny itself holds).
    std::fs::write(&file, policy(r#"{"deny": "loud", "allow": "notice"}"#)).unwrap();
    assert!(
        wait_until(SETTLE, || node.audit_lines().iter().any(|l| l["event"]
            == "note"
            && l["message"].as_str().is_some_and(|m| m
                .contains("ClusterNetworkPolicy watch-a")
                && m.contains("loud")))),
        "a note names the policy's bad severity: {:#?}",
        node.audit_lines()
    );
    std::thread::sleep(Duration::from_secs(2));
    let before = lines_of("deny", 8081, "b1").len();
    assert!(!to_a1(&b1, 8081), "the Deny still holds");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        lines_of("deny", 8081, "b1").len(),
        before,
        "denials are not logged any more"
    );
}
