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

/// `from` fetches the test image's page from port 8080 of `web` (an address of either family)
/// over TCP with nc (the wget of Debian's static busybox crashes).
fn assert_serves_its_page(podman: &Podman, from: &str, web: &str) {
    let request = format!("printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {web} 8080");
    let page = podman
        .exec(from, &["sh", "-c", &request])
        .unwrap_or_else(|e| panic!("HTTP {from} -> {web} port 8080: {e}"));
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.ends_with("served by a pod on br0"), "{page}");
}

/// `podman rm -f` of `containers` releases everything they held on the node.
fn remove_all(podman: &mut Podman, node: &AgentNode, containers: &[&str]) {
    for c in containers {
        podman.rm(c);
    }
    assert!(
        wait_until(Duration::from_secs(5), || node.pod_ports().is_empty()),
        "ports left: {:?}",
        node.pod_ports()
    );
    node.assert_no_pod_leftovers();
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
    assert_serves_its_page(&podman, "client", &web);

    // The agent sees them as pods: ports with the container ids, leases, flows.
    assert_eq!(node.pod_ports().len(), 2);
    let mut leases = node.leases();
    leases.sort();
    let mut want = vec![web.clone(), client.clone()];
    want.sort();
    assert_eq!(leases, want);
    assert_eq!(node.pod_flows().len(), 14);

    remove_all(&mut podman, &node, &["web", "client"]);
}

/// podman on a dual-stack node: each container gets an address of each family from the one
/// CNI result (podman shows both), they reach each other and both gateways over IPv6 and TCP
/// works over IPv6; `podman rm` releases both leases.
#[test]
fn podman_containers_get_both_families_on_a_dual_stack_node() {
    let node = AgentNode::start(NodeOptions::default().dual_stack());
    let mut podman = Podman::new(&node);

    podman.start("web", &["httpd", "-f", "-p", "8080", "-h", "/www"]);
    podman.start("client", &["sleep", "300"]);
    let (web, client) = (podman.ip_of("web"), podman.ip_of("client"));
    assert!(in_subnet(&web) && in_subnet(&client), "{web} {client}");
    let six = |name: &str| -> std::net::Ipv6Addr {
        let a = podman.ip6_of(name);
        a.parse()
            .unwrap_or_else(|_| panic!("{name}: no IPv6 address in podman's view: {a:?}"))
    };
    let (web6, client6) = (six("web"), six("client"));
    assert_ne!(web6, client6);
    // Both in this node's /64 of fd01::/48; the gateway is its first address.
    let net = |a: std::net::Ipv6Addr| ipnet::Ipv6Net::new(a, 64).unwrap().trunc();
    assert_eq!(net(web6), net(client6), "{web6} {client6}");
    assert_eq!(web6.segments()[0], 0xfd01, "{web6}");
    let gateway6 = std::net::Ipv6Addr::from(u128::from(net(web6).network()) + 1).to_string();

    for (from, to) in [
        ("client", web6.to_string()),
        ("web", client6.to_string()),
        ("client", gateway6.clone()),
        ("client", web.clone()),
    ] {
        podman
            .exec(from, &["ping", "-c", "1", "-W", "3", &to])
            .unwrap_or_else(|e| panic!("{from} -> {to}: {e}"));
    }
    assert_serves_its_page(&podman, "client", &web6.to_string());

    // The agent's view: two ports, a lease of each family per container, 14 rows per pod.
    assert_eq!(node.pod_ports().len(), 2);
    let mut want6 = vec![web6.to_string(), client6.to_string()];
    want6.sort();
    assert_eq!(node.leases6(), want6);
    assert_eq!(node.leases().len(), 2);
    assert_eq!(node.pod_flows().len(), 28);

    remove_all(&mut podman, &node, &["web", "client"]);
    assert_eq!(node.leases6(), Vec::<String>::new(), "IPv6 leases left");
}
