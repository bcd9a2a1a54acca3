//! A real container runtime as the client: podman (see `sdn_tests::podman`) runs containers on
//! the network the agent declares in its CNI conf dir, whose plugin is `sdn-cni`.

use std::time::Duration;

use sdn_tests::harness::wait_until;
use sdn_tests::node::{AgentNode, NodeOptions};
use sdn_tests::podman::Podman;

fn in_subnet(ip: &str) -> bool {
    let ip: std::net::Ipv4Addr = ip.parse().unwrap_or_else(|_| panic!("bad ip {ip:?}"));
    let o = ip.octets();
    o[0] == 10 && o[1] == 128 && o[2] <= 1
}

#[test]
fn podman_containers_on_the_sdn_network() {
    let node = AgentNode::start(NodeOptions::default());
    let mut podman = Podman::new(&node);

    podman.start("web", &["httpd", "-f", "-p", "8080", "-h", "/www"]);
    podman.start("client", &["sleep", "300"]);
    let (web, client) = (podman.ip_of("web"), podman.ip_of("client"));
    assert!(in_subnet(&web) && in_subnet(&client), "{web} {client}");
    assert_ne!(web, client);

    // They reach each other and the gateway; TCP works between them.
    podman
        .exec("client", &["ping", "-c", "1", "-W", "3", &web])
        .unwrap_or_else(|e| panic!("client -> web: {e}"));
    podman
        .exec("web", &["ping", "-c", "1", "-W", "3", &client])
        .unwrap_or_else(|e| panic!("web -> client: {e}"));
    podman
        .exec("client", &["ping", "-c", "1", "-W", "3", "10.128.0.1"])
        .unwrap_or_else(|e| panic!("client -> gateway: {e}"));
    // HTTP over TCP with nc (the wget of Debian's static busybox crashes).
    let request = format!("printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {web} 8080");
    let page = podman
        .exec("client", &["sh", "-c", &request])
        .unwrap_or_else(|e| panic!("HTTP client -> web: {e}"));
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.ends_with("served by a pod on br0"), "{page}");

    // The agent sees them as pods: ports with the container ids, leases, flows.
    assert_eq!(node.pod_ports().len(), 2);
    let mut leases = node.leases();
    leases.sort();
    let mut want = vec![web.clone(), client.clone()];
    want.sort();
    assert_eq!(leases, want);
    assert_eq!(node.pod_flows().len(), 14);

    // podman rm -f releases everything.
    podman.rm("web");
    podman.rm("client");
    assert!(
        wait_until(Duration::from_secs(5), || node.pod_ports().is_empty()),
        "ports left: {:?}",
        node.pod_ports()
    );
    node.assert_no_pod_leftovers();
}
