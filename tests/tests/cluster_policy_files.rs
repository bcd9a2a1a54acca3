//! ClusterNetworkPolicies as files of a standalone node's state directory (multitenant mode,
//! one node, the real agent and pods): written, the Admin tier decides before tenancy; changed,
//! the new rules; refused by the reader, the subject fails closed and `sdnctl network-policies`
//! says why; deleted, tenancy alone again.

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

/// `sdnctl network-policies`.
fn policies(node: &AgentNode) -> String {
    let out = node.sdnctl_api(&["network-policies"]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn cluster_network_policy_files_decide_before_tenancy_and_fail_closed() {
    let node = AgentNode::start(NodeOptions::default());
    node.set_netnamespace("tenant-a", 11);
    node.set_netnamespace("tenant-b", 12);
    let a1 = node.pod("tenant-a", "a1");
    let a2 = node.pod("tenant-a", "a2");
    let b1 = node.pod("tenant-b", "b1");
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
