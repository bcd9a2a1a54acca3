//! Services through the node's kube-proxy, on the userspace (netdev) datapath these machines
//! run: rules shaped like kube-proxy's iptables mode ([`sdn_tests::kubeproxy`]) DNAT a ClusterIP
//! to pods on the node, and every client gets its answer from the service address (TCP
//! connects and a *connected* UDP socket accept nothing else).
//!
//! What is checked: pod → ClusterIP → pod over TCP (two endpoints picked at random) and UDP,
//! within a tenant and from a global namespace; across tenants refused as openshift-sdn refuses
//! it (table 80 sees the client's VNID, reloaded in table 25); a pod reaching itself through a
//! service (hairpin, masqueraded as kube-proxy does); NodePort from a client outside the node,
//! masqueraded and with `externalTrafficPolicy: Local`; a pod of the other tenant forging the
//! refused endpoint's reply (UDP, and TCP as the SYN-ACK) is dropped, the tenant's own endpoint
//! doing the same is not; and the rows of pipeline.md that do it.
//! The multi-node case is in `multinode.rs`.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use sdn_tests::harness::Netns;
use sdn_tests::kubeproxy::{self, Proto, Service};
use sdn_tests::node::{AgentNode, NodeOptions};
use sdn_tests::probe::{
    forged_service_reply, tcp_echo_server, tcp_probe, udp_echo_server, udp_probe,
};

const TIMEOUT: Duration = Duration::from_secs(3);
const REFUSED_TIMEOUT: Duration = Duration::from_millis(1500);

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn at(ip: Ipv4Addr, port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(ip, port)
}

#[test]
fn pods_reach_services_on_their_node_and_tenants_stay_apart() {
    let node = AgentNode::start(NodeOptions::default());
    node.set_netnamespace("tenant-a", 11);
    node.set_netnamespace("tenant-b", 12);
    let a1 = node.pod("tenant-a", "a1");
    let a2 = node.pod("tenant-a", "a2");
    let a3 = node.pod("tenant-a", "a3");
    let b1 = node.pod("tenant-b", "b1");
    let g = node.pod("default", "g");
    let _servers: Vec<_> = [&a1, &a2, &a3, &b1]
        .iter()
        .map(|p| tcp_echo_server(p.ns.name(), 8080))
        .collect();
    let _udp = udp_echo_server(a2.ns.name(), 5353);

    let svc_a = ip("172.30.0.10");
    let svc_u = ip("172.30.0.11");
    let svc_b = ip("172.30.0.12");
    let svc_h = ip("172.30.0.13");
    // Tenant-b endpoints nothing listens on: a pod there forges replies from them.
    let svc_bt = ip("172.30.0.14");
    let svc_bu = ip("172.30.0.15");
    let svc_au = ip("172.30.0.16");
    let services = vec![
        Service {
            name: "a".into(),
            cluster_ip: svc_a,
            port: 80,
            proto: Proto::Tcp,
            endpoints: vec![(ip(&a2.ip), 8080), (ip(&a3.ip), 8080)],
            node_port: Some(30080),
            external_local: false,
        },
        Service {
            name: "u".into(),
            cluster_ip: svc_u,
            port: 53,
            proto: Proto::Udp,
            endpoints: vec![(ip(&a2.ip), 5353)],
            node_port: None,
            external_local: false,
        },
        Service {
            name: "b".into(),
            cluster_ip: svc_b,
            port: 80,
            proto: Proto::Tcp,
            endpoints: vec![(ip(&b1.ip), 8080)],
            node_port: Some(30081),
            external_local: true,
        },
        Service {
            name: "h".into(),
            cluster_ip: svc_h,
            port: 80,
            proto: Proto::Tcp,
            endpoints: vec![(ip(&a1.ip), 8080)],
            node_port: None,
            external_local: false,
        },
        Service {
            name: "bt".into(),
            cluster_ip: svc_bt,
            port: 80,
            proto: Proto::Tcp,
            endpoints: vec![(ip(&b1.ip), 9090)],
            node_port: None,
            external_local: false,
        },
        Service {
            name: "bu".into(),
            cluster_ip: svc_bu,
            port: 53,
            proto: Proto::Udp,
            endpoints: vec![(ip(&b1.ip), 5353)],
            node_port: None,
            external_local: false,
        },
        Service {
            name: "au".into(),
            cluster_ip: svc_au,
            port: 53,
            proto: Proto::Udp,
            endpoints: vec![(ip(&a2.ip), 5354)],
            node_port: None,
            external_local: false,
        },
    ];
    kubeproxy::install(node.ovs.ns(), &services, "10.128.0.0/14");

    // Within tenant-a, TCP: many connections, so both endpoints are picked.
    for i in 0..12 {
        assert!(
            tcp_probe(a1.ns.name(), at(svc_a, 80), TIMEOUT),
            "a1 -> {svc_a}:80 (attempt {i}); flows:\n{}\nnat:\n{}",
            node.ovs.ofctl(&["dump-flows", "br0"]),
            node.ovs
                .exec_in_netns(&["iptables", "-t", "nat", "-L", "-v", "-n"])
                .unwrap_or_default()
        );
    }
    // UDP, answered from the service address.
    assert!(
        udp_probe(a1.ns.name(), at(svc_u, 53), TIMEOUT),
        "a1 -> {svc_u}:53/udp"
    );
    // A global namespace reaches every tenant's service.
    assert!(tcp_probe(g.ns.name(), at(svc_a, 80), TIMEOUT), "g -> svc a");
    assert!(tcp_probe(g.ns.name(), at(svc_b, 80), TIMEOUT), "g -> svc b");
    // Across tenants: refused, both ways.
    assert!(
        !tcp_probe(a1.ns.name(), at(svc_b, 80), REFUSED_TIMEOUT),
        "a1 (tenant-a) reached tenant-b's service"
    );
    assert!(
        !tcp_probe(b1.ns.name(), at(svc_a, 80), REFUSED_TIMEOUT),
        "b1 (tenant-b) reached tenant-a's service"
    );
    assert!(
        !udp_probe(b1.ns.name(), at(svc_u, 53), REFUSED_TIMEOUT),
        "b1 reached tenant-a's UDP service"
    );
    // A refused Service connection leaves nothing a pod of the other tenant can answer
    // through: b1 forging the endpoint's reply to a1 (TCP and UDP) is dropped, never
    // un-DNAT'd and delivered as the Service's answer.
    for (svc, port, proto, endpoint_port) in [
        (svc_bt, 80, Proto::Tcp, 9090),
        (svc_bu, 53, Proto::Udp, 5353),
    ] {
        assert!(
            !forged_service_reply(
                a1.ns.name(),
                at(svc, port),
                b1.ns.name(),
                at(ip(&b1.ip), endpoint_port),
                proto,
                REFUSED_TIMEOUT,
            ),
            "b1 (tenant-b) answered a1 (tenant-a) in the name of {svc}:{port} ({proto:?}): a \
             refused Service connection let a forged reply through; flows:\n{}",
            node.ovs.ofctl(&["dump-flows", "br0"])
        );
    }
    // The same forgery from the tenant's own endpoint is a reply and arrives, so the check
    // above can see a leak: a2 answering a1 in the name of svc_au's endpoint a2:5354.
    assert!(
        forged_service_reply(
            a1.ns.name(),
            at(svc_au, 53),
            a2.ns.name(),
            at(ip(&a2.ip), 5354),
            Proto::Udp,
            TIMEOUT,
        ),
        "a2's reply in the name of {svc_au}:53 never reached a1 (same tenant)"
    );

    // Hairpin: a1 through a service whose only endpoint is a1.
    assert!(
        tcp_probe(a1.ns.name(), at(svc_h, 80), TIMEOUT),
        "a1 -> itself via {svc_h}"
    );

    // NodePort from a client outside the node (its own namespace on a veth to the node).
    let ext = Netns::new("sdnext");
    let (host_end, ext_end) = ("sdnext0", "sdnext1");
    node.ovs
        .exec_in_netns(&[
            "ip", "link", "add", host_end, "type", "veth", "peer", "name", ext_end,
        ])
        .unwrap();
    node.ovs
        .exec_in_netns(&["ip", "link", "set", ext_end, "netns", ext.name()])
        .unwrap();
    node.ovs
        .exec_in_netns(&["ip", "addr", "add", "192.168.220.1/24", "dev", host_end])
        .unwrap();
    node.ovs
        .exec_in_netns(&["ip", "link", "set", host_end, "up"])
        .unwrap();
    for cmd in [
        vec!["ip", "addr", "add", "192.168.220.2/24", "dev", ext_end],
        vec!["ip", "link", "set", ext_end, "up"],
        vec!["ip", "route", "add", "default", "via", "192.168.220.1"],
    ] {
        ext.exec(&cmd).unwrap();
    }
    let node_addr = ip("192.168.220.1");
    assert!(
        tcp_probe(ext.name(), at(node_addr, 30080), TIMEOUT),
        "external client -> NodePort 30080 (masqueraded)"
    );
    assert!(
        tcp_probe(ext.name(), at(node_addr, 30081), TIMEOUT),
        "external client -> NodePort 30081 (externalTrafficPolicy: Local, client address kept)"
    );

    // The rows that do it (pipeline.md, "Services"): the via-host flag in table 0, the commit
    // with the client's VNID in table 30, and the steering row in table 31, which counted the
    // replies and sends them through table 80.
    let flows = node.ovs.ofctl(&["dump-flows", "br0"]);
    let steer = flows
        .lines()
        .find(|l| l.contains("table=31") && l.contains("ct_mark=0x1/0x1"))
        .unwrap_or_else(|| panic!("no table-31 ct_mark row:\n{flows}"));
    assert!(
        steer.contains("ct_state=+rpl+trk")
            && steer.contains(
                "actions=set_field:0a:58:0a:80:00:01->eth_dst,load:0x2->NXM_NX_REG2[],\
                 move:NXM_NX_CT_MARK[8..31]->NXM_NX_REG1[0..23],goto_table:80"
            ),
        "{steer}"
    );
    assert!(
        !steer.contains("n_packets=0,"),
        "the steering row saw no reply: {steer}"
    );
    assert!(
        flows.lines().any(|l| l.contains("table=0")
            && l.contains("in_port=2")
            && l.contains("actions=load:0x1->NXM_NX_REG4[],goto_table:25")),
        "no table-0 via-host row:\n{flows}"
    );
    assert!(
        flows.lines().any(|l| l.contains("table=30")
            && l.contains("reg4=0x1")
            && l.contains(
                "ct(commit,exec(load:0x1->NXM_NX_CT_MARK[0],\
                 move:NXM_NX_REG0[0..23]->NXM_NX_CT_MARK[8..31]))"
            )),
        "no table-30 commit row:\n{flows}"
    );
}
