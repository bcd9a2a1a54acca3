//! The harness itself: a private OVS comes up, takes a bridge, and leaves nothing behind.

use sdn_tests::harness::{Ovs, Pod};

#[test]
fn private_ovs_starts_takes_a_bridge_and_cleans_up() {
    let ovs = Ovs::start();
    ovs.add_bridge("br0");
    assert!(ovs.vsctl(&["list-br"]).lines().any(|l| l == "br0"));
    let pod = Pod::new(&ovs, "10.128.0.2/23");
    ovs.vsctl(&["add-port", "br0", pod.host_if()]);
    let ofport = ovs.vsctl(&["get", "interface", pod.host_if(), "ofport"]);
    assert!(ofport.trim().parse::<i32>().unwrap() > 0, "ofport {ofport}");
    let dir = ovs.dir().to_path_buf();
    let ns = ovs.netns().to_string();
    let pod_ns = pod.ns().name().to_string();
    drop(pod);
    drop(ovs);
    assert!(!dir.exists(), "{} left behind", dir.display());
    let netns = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&netns.stdout);
    assert!(
        !list.contains(&ns) && !list.contains(&pod_ns),
        "namespaces left: {list}"
    );
}

/// No test relies on the machine's initial namespace's forwarding (which a new namespace
/// inherits, and which other tests or the host may have turned on): every namespace the
/// harness makes starts with it off, so a node forwards only because its network agent (ours,
/// or the openshift-sdn fixture as its own start does) turned it on.
#[test]
fn a_test_namespace_starts_with_forwarding_off_whatever_the_host_has() {
    sdn_tests::harness::require_root_and_ovs();
    let host = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap();
    let ns = sdn_tests::harness::Netns::new("fwd");
    let inside = ns.exec(&["cat", "/proc/sys/net/ipv4/ip_forward"]).unwrap();
    eprintln!(
        "initial namespace ip_forward={}, a test namespace's={}",
        host.trim(),
        inside.trim()
    );
    assert_eq!(inside.trim(), "0");
}
