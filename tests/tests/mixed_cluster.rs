//! A mixed cluster: two nodes of ours and one openshift-sdn node (the fixture
//! `sdn_tests::openshift_sdn`, its own rules at openshift/sdn 18a57d7) on one underlay, sharing
//! one set of cluster objects. Every ordered pod pair across the three nodes (same tenant,
//! other tenant, global) is probed (ICMP, TCP, ARP) against openshift-sdn's semantics, before
//! and after a join and an isolate (our nodes follow the NetNamespaces, the openshift-sdn node
//! re-flows its pods as its plugin does); `sdnctl trace` on our nodes agrees, also for packets
//! from the openshift-sdn node (traced on ours with the VNI openshift-sdn sends: the source
//! VNID). What our rows put on the wire that openshift-sdn reads (the VNI, the tunnel
//! destination, the inner MACs) is what pipeline.md says, and the matrix is the proof it is
//! harmless. Multicast of a tenant reaches its pods on both kinds of node, from either kind.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use sdn_tests::cluster::{underlay_ip, Cluster};
use sdn_tests::harness::require_root_and_ovs;
use sdn_tests::kubeproxy::{self, Proto, Service};
use sdn_tests::matrix::{self, Member, NodeSide, Reach};
use sdn_tests::node::{AgentNode, CniPod, NodeOptions};
use sdn_tests::openshift_sdn::{self as osdn, Plugin, PodSpec, RemoteNode, WiredPod};
use sdn_tests::probe::{
    multicast_receiver, multicast_send, tcp_echo_server, tcp_probe, tcp_whoami, tcp_whoami_server,
    unique_token,
};

const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);
const OSDN_SUBNET: &str = "10.128.10.0/23";
const GROUP: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 3);
const EXT: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 200);
const EXT_PORT: u16 = 8181;
const EGRESS_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 100);
const PORT: u16 = 6464;

fn osdn_spec() -> osdn::Node {
    osdn::Node {
        plugin: Plugin::Multitenant,
        cluster_networks: vec!["10.128.0.0/14".into()],
        service_network: "172.30.0.0/16".into(),
        local_subnet: OSDN_SUBNET.into(),
        gateway: Ipv4Addr::new(10, 128, 10, 1),
        node_ip: underlay_ip(3),
        vxlan_port: 4789,
    }
}

/// openshift-sdn's pods on node-3: (namespace, name, last octet).
const OSDN_PODS: [(&str, &str, u8); 3] = [
    ("tenant-a", "a3", 10),
    ("tenant-b", "b3", 11),
    ("default", "g3", 12),
];

/// Our pods (name, namespace, node) and openshift-sdn's.
struct Mixed<'a> {
    layout: [(&'static str, &'static str, usize); 5],
    ours: Vec<CniPod<'a>>,
    theirs: &'a [WiredPod],
}

impl Mixed<'_> {
    fn members(&self, c: &Cluster) -> Vec<Member> {
        let vnid = |ns: &str| c.state().vnid_of(ns).unwrap_or(0);
        let mut m = matrix::members_of(&self.layout, &self.ours, vnid);
        m.extend(self.theirs.iter().map(|p| Member {
            label: format!("{}@osdn", p.spec.name),
            netns: p.netns.name().to_string(),
            ifname: "eth0".into(),
            ip: p.spec.ip,
            namespace: p.spec.namespace.clone(),
            vnid: vnid(&p.spec.namespace),
        }));
        m
    }

    /// Each member's node among `[node-1, node-2]`, `None` for openshift-sdn's.
    fn node_of(&self) -> Vec<Option<usize>> {
        self.layout
            .iter()
            .map(|(_, _, i)| Some(i - 1))
            .chain(self.theirs.iter().map(|_| None))
            .collect()
    }
}

/// What openshift-sdn's semantics say a pair gets: everything between the same VNID or with a
/// global side, nothing across tenants, except ARP between two pods of an openshift-sdn node
/// (its table 40 outputs ARP by address without looking at VNIDs; across nodes it is ours that
/// refuse it, on either end).
fn openshift_sdn_rule(a: &Member, b: &Member) -> Reach {
    let allowed = matrix::allowed(a.vnid, b.vnid);
    let both_osdn = a.label.ends_with("@osdn") && b.label.ends_with("@osdn");
    Reach {
        icmp: allowed,
        tcp: allowed,
        arp: allowed || both_osdn,
    }
}

#[test]
fn two_nodes_of_ours_and_an_openshift_sdn_node_keep_openshift_sdn_s_isolation() {
    require_root_and_ovs();
    let c = Cluster::start(2, &NodeOptions::default());
    c.set_netnamespace("tenant-a", 11);
    c.set_netnamespace("tenant-b", 12);
    // node-3 runs openshift-sdn: its HostSubnet in the shared objects, its state from its rules.
    let theirs_node: AgentNode = c.join_bare_node(3);
    c.write_host_subnet(&cluster::HostSubnet::new(
        "node-3",
        &underlay_ip(3).to_string(),
        OSDN_SUBNET,
    ));
    let remote: Vec<RemoteNode> = (1..=2)
        .map(|i| {
            let hs = c.host_subnet(&format!("node-{i}"));
            RemoteNode {
                uid: hs
                    .metadata
                    .uid
                    .clone()
                    .unwrap_or_else(|| format!("uid-node-{i}")),
                host_ip: hs.host_ip.parse().unwrap(),
                subnet: hs.subnet.clone(),
            }
        })
        .collect();
    let specs: Vec<PodSpec> = OSDN_PODS
        .iter()
        .map(|(ns, name, last)| PodSpec {
            namespace: ns.to_string(),
            name: name.to_string(),
            ip: Ipv4Addr::new(10, 128, 10, *last),
            vnid: match *ns {
                "tenant-a" => 11,
                "tenant-b" => 12,
                _ => 0,
            },
            bandwidth: None,
        })
        .collect();
    let spec = osdn_spec();
    let theirs = osdn::build_node(
        &theirs_node.ovs,
        &spec,
        &remote,
        &specs,
        &theirs_node.dir().join("net.d"),
        &theirs_node.dir().join("ipam/openshift-sdn"),
    );
    // Our nodes have node-3's rows once they read its HostSubnet.
    let rows_for_3 = || {
        (1..=2).all(|i| {
            c.node(i)
                .flows()
                .iter()
                .any(|f| f.contains(&format!("tun_src={}", underlay_ip(3))))
        })
    };
    assert!(
        sdn_tests::harness::wait_until(Duration::from_secs(15), rows_for_3),
        "our nodes did not add node-3's rows:\n{}",
        c.node(1).log()
    );

    let layout = [
        ("a1", "tenant-a", 1),
        ("b1", "tenant-b", 1),
        ("g1", "default", 1),
        ("a2", "tenant-a", 2),
        ("b2", "tenant-b", 2),
    ];
    let mixed = Mixed {
        layout,
        ours: layout
            .iter()
            .map(|(name, ns, i)| c.node(*i).pod(ns, name))
            .collect(),
        theirs: &theirs,
    };
    let node_of = mixed.node_of();
    let node_side = NodeSide {
        netns: c.node(1).ovs.netns().to_string(),
        ifname: "tun0".into(),
    };
    let _servers = matrix::serve(&mixed.members(&c));
    let check = |title: &str| {
        let m = matrix::observe(title, &mixed.members(&c), &node_side, PROBE_TIMEOUT);
        eprintln!("{}", m.render());
        let bad = m.mismatches_with(openshift_sdn_rule);
        assert!(
            bad.is_empty(),
            "{}\n{} pairs differ from openshift-sdn's semantics:\n{}",
            m.render(),
            bad.len(),
            bad.join("\n")
        );
        let bad = matrix::trace_mismatches_of(&m, &[c.node(1), c.node(2)], &node_of, None);
        assert!(
            bad.is_empty(),
            "{}\nsdnctl trace disagrees in {} probes:\n{}",
            m.render(),
            bad.len(),
            bad.join("\n")
        );
    };
    check("mixed cluster: two tenants and default on ours and openshift-sdn's nodes");

    // tenant-b joins tenant-a: our nodes follow the NetNamespace; openshift-sdn's node re-flows
    // its tenant-b pod as its plugin does, and drops VNID 12's row.
    // (`old`: the VNID b3 leaves, whose row goes when no pod of node-3 has it any more.)
    let reflow = |vnid: u32, old: Option<u32>| {
        let b3 = theirs
            .iter()
            .find(|p| p.spec.namespace == "tenant-b")
            .unwrap();
        osdn::update_pod_vnid(&theirs_node.ovs, &spec, b3.ofport, b3.spec.ip, vnid);
        if let Some(old) = old {
            assert_eq!(osdn::sync_vnid_rules(&theirs_node.ovs, &spec), [old]);
        }
    };
    c.set_netnamespace("tenant-b", 11);
    reflow(11, Some(12));
    let settled = |vnid: u32| {
        sdn_tests::harness::wait_until(Duration::from_secs(15), || {
            (1..=2).all(|i| c.node(i).vnids().get("tenant-b") == Some(&vnid))
        })
    };
    assert!(settled(11), "our nodes did not take the join");
    std::thread::sleep(Duration::from_secs(1));
    check("mixed cluster after tenant-b joined tenant-a");

    // tenant-b isolated again, with a VNID of its own.
    // (VNID 11 keeps its row on node-3: a3 has it.)
    c.set_netnamespace("tenant-b", 13);
    reflow(13, None);
    assert!(settled(13), "our nodes did not take the isolate");
    std::thread::sleep(Duration::from_secs(1));
    check("mixed cluster after tenant-b was isolated");

    // Multicast for tenant-a on both kinds of node: our nodes through the NetNamespace
    // annotation (sdnctl), openshift-sdn's node with its own rows for the tenant
    // (`UpdateLocalMulticastFlows`; its table 111 already copies to our VTEPs). Each sender is
    // heard by tenant-a's pods on the three nodes and by nobody else.
    let mut ears = BTreeMap::new();
    let mut netns_of = BTreeMap::new();
    for ((name, _, _), p) in mixed.layout.iter().zip(&mixed.ours) {
        ears.insert(
            name.to_string(),
            multicast_receiver(p.ns.name(), GROUP, PORT),
        );
        netns_of.insert(name.to_string(), p.ns.name().to_string());
    }
    for p in theirs.iter() {
        ears.insert(
            p.spec.name.clone(),
            multicast_receiver(p.netns.name(), GROUP, PORT),
        );
        netns_of.insert(p.spec.name.clone(), p.netns.name().to_string());
    }
    c.node(1).sdnctl(&["multicast", "tenant-a", "on"]);
    let a3 = theirs.iter().find(|p| p.spec.name == "a3").unwrap();
    let rows = osdn::local_multicast_rows(11, &[a3.ofport]).join("\n") + "\n";
    let file = theirs_node.ovs.dir().join("multicast.flows");
    std::fs::write(&file, rows).unwrap();
    theirs_node
        .ovs
        .ofctl(&["add-flows", "br0", file.to_str().unwrap()]);
    let heard = |from: &str, expect: &[&str]| -> BTreeSet<String> {
        let token = unique_token(&format!("mc-{from}"));
        multicast_send(&netns_of[from], GROUP, PORT, token.as_bytes(), 3);
        for name in expect {
            ears[*name].wait_for(&token, Duration::from_secs(5));
        }
        std::thread::sleep(Duration::from_millis(400));
        ears.iter()
            .filter(|(_, e)| e.has(&token))
            .map(|(n, _)| n.clone())
            .collect()
    };
    let set = |v: &[&str]| -> BTreeSet<String> { v.iter().map(|s| s.to_string()).collect() };
    assert!(
        sdn_tests::harness::wait_until(Duration::from_secs(15), || heard("a1", &["a2"])
            .contains("a2")),
        "tenant-a's multicast did not come on on our nodes"
    );
    assert_eq!(
        heard("a1", &["a2", "a3"]),
        set(&["a2", "a3"]),
        "a1 (ours) sends"
    );
    assert_eq!(
        heard("a2", &["a1", "a3"]),
        set(&["a1", "a3"]),
        "a2 (ours) sends"
    );
    assert_eq!(
        heard("a3", &["a1", "a2"]),
        set(&["a1", "a2"]),
        "a3 (openshift-sdn's node) sends"
    );
    assert_eq!(
        heard("b1", &[]),
        set(&[]),
        "b1: multicast is off for tenant-b"
    );
    assert_eq!(
        heard("g3", &[]),
        set(&[]),
        "g3: multicast is off for default"
    );

    // A Service of tenant-a whose endpoint is on openshift-sdn's node, used from ours:
    // node-1's kube-proxy DNATs, the request crosses VXLAN with the client's VNID (so
    // openshift-sdn's table 80 judges it by the client's tenant), the reply comes back over
    // VXLAN and through node-1's kernel to be un-DNAT'd (pipeline.md "Services").
    let _server = tcp_echo_server(a3.netns.name(), 8080);
    let svc_ip = Ipv4Addr::new(172, 30, 9, 10);
    kubeproxy::install(
        c.node(1).ovs.ns(),
        &[Service {
            name: "osdn".into(),
            cluster_ip: svc_ip,
            port: 80,
            proto: Proto::Tcp,
            endpoints: vec![(a3.spec.ip, 8080)],
            node_port: None,
            external_local: false,
        }],
        "10.128.0.0/14",
    );
    let svc = SocketAddrV4::new(svc_ip, 80);
    let netns = |name: &str| netns_of[name].clone();
    assert!(
        sdn_tests::harness::wait_until(Duration::from_secs(10), || tcp_probe(
            &netns("a1"),
            svc,
            Duration::from_secs(2)
        )),
        "a1 (ours) -> tenant-a's Service -> a3 on openshift-sdn's node"
    );
    assert!(
        tcp_probe(&netns("g1"), svc, Duration::from_secs(2)),
        "g1 (global, ours) -> tenant-a's Service on openshift-sdn's node"
    );
    assert!(
        !tcp_probe(&netns("b1"), svc, PROBE_TIMEOUT),
        "b1 (tenant-b) reached tenant-a's Service on openshift-sdn's node"
    );

    // An egress IP of tenant-a hosted by our node-2, used by tenant-a's pods on our node-1 and
    // on openshift-sdn's node (its group sends them over VXLAN to node-2, as it does to an
    // openshift-sdn host); an external host on the underlay sees who connects.
    c.hub_exec(&["ip", "addr", "add", &format!("{EXT}/24"), "dev", "hub0"]);
    let _whoami = tcp_whoami_server(c.hub_netns(), EXT_PORT);
    let mut a = cluster::NetNamespace::new("tenant-a", 11);
    a.egress_ips = vec![EGRESS_IP.to_string()];
    cluster::StandaloneSource::write_object(
        c.state_dir(),
        &cluster::ClusterObject::NetNamespace(a),
    )
    .unwrap();
    let mut hs = c.host_subnet("node-2");
    hs.egress_ips = vec![EGRESS_IP.to_string()];
    c.write_host_subnet(&hs);
    osdn::set_egress_via_remote(&theirs_node.ovs, 11, &[underlay_ip(2)]);
    let seen_as = |name: &str, want: Ipv4Addr| {
        let ns = netns(name);
        sdn_tests::harness::wait_until(Duration::from_secs(15), || {
            (0..3).all(|_| {
                tcp_whoami(
                    &ns,
                    SocketAddrV4::new(EXT, EXT_PORT),
                    Duration::from_secs(1),
                ) == Some(want)
            })
        })
    };
    assert!(
        seen_as("a1", EGRESS_IP),
        "a1 (ours) leaves as tenant-a's egress IP"
    );
    assert!(
        seen_as("a3", EGRESS_IP),
        "a3 (openshift-sdn's node) leaves as tenant-a's egress IP, hosted by our node-2"
    );
    assert!(seen_as("b1", underlay_ip(1)), "b1 leaves as node-1");
    assert!(
        seen_as("b3", underlay_ip(3)),
        "b3 leaves as openshift-sdn's node (its own masquerade)"
    );
}
