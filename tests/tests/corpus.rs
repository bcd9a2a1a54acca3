//! The flow corpus installed on a real `br0` through our clients, then read back three ways:
//! `ovs-ofctl --names dump-flows` must print exactly our rendering with names,
//! `ovs-ofctl --no-names dump-flows` exactly our plain rendering, and a dump through our own
//! OpenFlow client must decode to `Flow` values equal to the ones installed.
//!
//! The bridge, its ports and its table names are set up through our OVSDB client, so this test
//! also proves the two clients together the way the agent uses them.

use std::collections::BTreeMap;

use ovs::flow::{Action, Flow, Group};
use ovs::openflow::flow_mod::GroupModCommand;
use ovs::openflow::{DumpFilter, OfClient};
use ovs::ovsdb::{BridgeSpec, Client, FailMode, PortSpec};
use sdn_tests::corpus;
use sdn_tests::harness::Ovs;

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// Sets up br0 with vxlan0 (1), tun0 (2), pod3 (3) and every table name, over OVSDB.
async fn bridge(ovs: &Ovs) -> Client {
    let db = Client::connect(&format!("unix:{}", ovs.db_sock().display()))
        .await
        .unwrap();
    let spec = BridgeSpec {
        datapath_type: "netdev".into(),
        fail_mode: Some(FailMode::Secure),
        protocols: vec!["OpenFlow13".into()],
        other_config: BTreeMap::new(),
    };
    db.ensure_bridge("br0", &spec).await.unwrap();
    let mut vxlan = PortSpec::new("vxlan0", "vxlan");
    vxlan.options = [("remote_ip", "flow"), ("key", "flow"), ("dst_port", "4789")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    vxlan.ofport_request = Some(1);
    assert_eq!(db.add_port("br0", &vxlan).await.unwrap(), 1);
    for (no, name) in [(2u16, "tun0"), (3, "pod3")] {
        let mut p = PortSpec::new(name, "internal");
        p.ofport_request = Some(no);
        assert_eq!(db.add_port("br0", &p).await.unwrap(), u32::from(no));
    }
    for (id, name) in flows::Table::names() {
        db.set_flow_table_name("br0", id, name).await.unwrap();
    }
    db
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_installed_by_our_client_reads_back_identically() {
    let ovs = Ovs::start();
    let _db = bridge(&ovs).await;
    let mgmt = format!("unix:{}", ovs.mgmt_sock("br0").display());
    sdn_tests::harness::wait_until(std::time::Duration::from_secs(10), || {
        ovs.mgmt_sock("br0").exists()
    });
    let of = OfClient::connect(&mgmt).await.unwrap();

    // The corpus uses group 7.
    let group = Group::select(
        7,
        vec![vec![Action::output_port(2)], vec![Action::output_port(3)]],
    );
    of.group_mod(GroupModCommand::Add, &group).await.unwrap();

    let flows = corpus::flows();
    of.add_flows(&flows).await.unwrap();

    // 1. ovs-ofctl --names prints our rendering with names, flow for flow.
    let names = corpus::names();
    let theirs = ovs.ofctl(&["--names", "--no-stats", "dump-flows", "br0"]);
    let theirs = sorted(theirs.lines().map(|l| l.trim().to_string()).collect());
    let ours = sorted(flows.iter().map(|f| f.text(&names).to_string()).collect());
    assert_eq!(
        theirs.len(),
        flows.len(),
        "switch holds a different number of flows"
    );
    for (t, o) in theirs.iter().zip(&ours) {
        assert_eq!(t, o, "ovs-ofctl --names vs our rendering");
    }
    assert!(
        theirs.iter().any(|l| l.contains("table=\"local_ip\"")),
        "table names missing"
    );
    assert!(
        theirs.iter().any(|l| l.contains("in_port=vxlan0")),
        "port names missing"
    );

    // 2. Without names.
    let theirs = ovs.ofctl(&["--no-names", "--no-stats", "dump-flows", "br0"]);
    let theirs = sorted(theirs.lines().map(|l| l.trim().to_string()).collect());
    let ours = sorted(flows.iter().map(Flow::to_string).collect());
    assert_eq!(theirs, ours);

    // 3. Our own dump decodes to the same Flow values.
    let mut dumped = of.dump_flows(&DumpFilter::all()).await.unwrap();
    let mut want = flows.clone();
    let key = |f: &Flow| (f.table, f.priority, f.to_string());
    dumped.sort_by_key(key);
    want.sort_by_key(key);
    assert_eq!(dumped.len(), want.len());
    for (d, w) in dumped.iter().zip(&want) {
        assert_eq!(d, w, "dumped flow differs:\n dumped {d}\n wanted {w}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ovs_ofctl_flows_are_decoded_by_our_dump() {
    // The other direction: flows that ovs-ofctl encodes itself, read back through our client.
    let ovs = Ovs::start();
    let _db = bridge(&ovs).await;
    ovs.ofctl(&["add-group", "br0", "group_id=7,type=select,bucket=output:2"]);
    let file = ovs.dir().join("corpus.flows");
    std::fs::write(&file, corpus::lines().join("\n")).unwrap();
    ovs.ofctl(&["add-flows", "br0", &file.to_string_lossy()]);
    let of = OfClient::connect(&format!("unix:{}", ovs.mgmt_sock("br0").display()))
        .await
        .unwrap();
    let dumped = of.dump_flows(&DumpFilter::all()).await.unwrap();
    let ours = sorted(dumped.iter().map(Flow::to_string).collect());
    let want = sorted(corpus::lines().into_iter().map(String::from).collect());
    assert_eq!(ours, want);
}

/// Every row a dual-stack node builds (base rows of each mode and datapath, a pod with both
/// addresses, a remote node with both subnets) goes onto a real switch through our client and comes back as installed, and
/// `ovs-ofctl` prints each exactly as we do: the IPv6 and neighbour-discovery matches are ones
/// Open vSwitch accepts as written, prerequisites included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dual_stack_rows_install_and_read_back_identically() {
    use flows::{Datapath, Mode, NodeIpv6};
    let ovs = Ovs::start();
    let _db = bridge(&ovs).await;
    let of = OfClient::connect(&format!("unix:{}", ovs.mgmt_sock("br0").display()))
        .await
        .unwrap();
    for mode in [Mode::Subnet, Mode::Multitenant, Mode::NetworkPolicy] {
        for datapath in [Datapath::System, Datapath::Netdev] {
            let cfg = flows::NodeConfig {
                mode,
                datapath,
                ipv6: Some(NodeIpv6 {
                    local_subnet: "fd01:0:0:5::/64".parse().unwrap(),
                    cluster_network: "fd01::/48".parse().unwrap(),
                    service_cidr: Some("fd02::/112".parse().unwrap()),
                }),
                ..corpus::node_config()
            };
            let mut rows = flows::base_flows(&cfg);
            rows.extend(flows::pod_flows(&flows::PodFlows {
                ofport: 3,
                ip: Some("10.128.0.5".parse().unwrap()),
                ipv6: Some("fd01:0:0:5::5".parse().unwrap()),
                vnid: flows::Vnid::new(10).unwrap(),
                cookie: flows::port_cookie("pod3"),
                egress_meter: None,
            }));
            rows.extend(flows::remote_node_flows(&flows::RemoteNodeFlows {
                host_ip: "172.17.0.3".parse().unwrap(),
                subnet: Some("10.128.2.0/23".parse().unwrap()),
                subnet6: Some("fd01:0:0:2::/64".parse().unwrap()),
                cookie: flows::node_cookie("node-2"),
            }));
            assert!(rows.iter().any(|f| f.matches.nd_target.is_some()));
            of.delete_by_cookie(0, 0).await.unwrap();
            of.add_flows(&rows).await.unwrap();
            let theirs = ovs.ofctl(&["--no-names", "--no-stats", "dump-flows", "br0"]);
            let theirs = sorted(theirs.lines().map(|l| l.trim().to_string()).collect());
            let ours = sorted(rows.iter().map(Flow::to_string).collect());
            assert_eq!(theirs, ours, "{mode:?} {datapath:?}");
            let mut dumped = of.dump_flows(&DumpFilter::all()).await.unwrap();
            let key = |f: &Flow| (f.table, f.priority, f.to_string());
            dumped.sort_by_key(key);
            rows.sort_by_key(key);
            assert_eq!(dumped, rows, "{mode:?} {datapath:?}");
        }
    }
}
