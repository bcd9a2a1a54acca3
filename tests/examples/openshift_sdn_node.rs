//! An openshift-sdn node to take over by hand: the fixture `sdn_tests::openshift_sdn` (its own
//! rules at openshift/sdn 18a57d7) in a private OVS, with pods of two tenants and `default`,
//! standing until Enter is pressed (then everything it made goes). It prints the flags that
//! point `sdn-agent` at it, so a person can run the agent, ping, `sdnctl` and the hand-back as
//! on a node openshift-sdn ran.
//!
//! `cargo run -p sdn-tests --example openshift_sdn_node [PODS_PER_TENANT]` (root, OVS).

// What it prints is for the person running it, on standard output.
#![allow(clippy::print_stdout)]

use std::net::Ipv4Addr;

use sdn_tests::harness::{require_root_and_ovs, Ovs};
use sdn_tests::openshift_sdn::{self as osdn, Plugin, PodSpec};

fn main() {
    require_root_and_ovs();
    let per_tenant: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("PODS_PER_TENANT is a number"))
        .unwrap_or(3);
    let ovs = Ovs::start();
    let dir = ovs.dir().join("node");
    let spec = osdn::Node {
        plugin: Plugin::Multitenant,
        cluster_networks: vec!["10.128.0.0/14".into()],
        service_network: "172.30.0.0/16".into(),
        local_subnet: "10.128.2.0/23".into(),
        gateway: Ipv4Addr::new(10, 128, 2, 1),
        node_ip: Ipv4Addr::new(192, 168, 111, 10),
        vxlan_port: 4789,
    };
    let mut specs = Vec::new();
    for (t, (ns, vnid)) in [("tenant-a", 11), ("tenant-b", 12), ("default", 0)]
        .iter()
        .enumerate()
    {
        for i in 0..per_tenant {
            specs.push(PodSpec {
                namespace: ns.to_string(),
                name: format!("{ns}-{i}"),
                ip: Ipv4Addr::new(10, 128, 2, (10 + t * 60 + i) as u8),
                vnid: *vnid,
                bandwidth: None,
            });
        }
    }
    osdn::node_uplink(&ovs, &spec);
    let pods = osdn::build_node(
        &ovs,
        &spec,
        &[],
        &specs,
        &dir.join("net.d"),
        &dir.join("ipam").join(osdn::CNI_NETWORK),
    );
    // The cluster state a standalone agent reads: this node's HostSubnet and the NetNamespaces.
    let state = dir.join("state");
    std::fs::create_dir_all(&state).expect("the state directory");
    for obj in [
        cluster::ClusterObject::HostSubnet(cluster::HostSubnet::new(
            "node-a",
            "192.168.111.10",
            "10.128.2.0/23",
        )),
        cluster::ClusterObject::NetNamespace(cluster::NetNamespace::new("tenant-a", 11)),
        cluster::ClusterObject::NetNamespace(cluster::NetNamespace::new("tenant-b", 12)),
        cluster::ClusterObject::NetNamespace(cluster::NetNamespace::new("default", 0)),
    ] {
        cluster::StandaloneSource::write_object(&state, &obj).expect("the cluster state");
    }
    println!("openshift-sdn node: OVS netns {}", ovs.netns());
    for p in &pods {
        println!(
            "  pod {}/{} {} netns {} port {} ofport {}",
            p.spec.namespace,
            p.spec.name,
            p.spec.ip,
            p.netns.name(),
            p.host_veth,
            p.ofport
        );
    }
    let d = |p: &str| dir.join(p).display().to_string();
    println!(
        "agent: nsenter --net=/run/netns/{} -- sdn-agent run --node-name node-a --node-ip \
         192.168.111.10 --mode multitenant --datapath-type netdev --ovsdb unix:{} --bridge-mgmt \
         {} --cni-socket {} --ipam-dir {} --cni-conf-dir {} --cluster-state standalone:{}",
        ovs.netns(),
        ovs.db_sock().display(),
        ovs.mgmt_sock("br0").display(),
        d("run/cni.sock"),
        d("ipam"),
        d("net.d"),
        d("state"),
    );
    println!("press Enter to remove it all");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}
