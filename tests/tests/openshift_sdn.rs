//! The openshift-sdn node fixture (`sdn_tests::openshift_sdn`), checked against Open vSwitch:
//! every row it transcribes loads into a real bridge as openshift-sdn's `ovs-ofctl` calls
//! loaded it (OpenFlow 1.3), nothing is merged or refused, and the version note in table 253 is
//! the one openshift-sdn looks for at start-up. The mixed-cluster and takeover tests build on
//! this fixture.

use std::net::Ipv4Addr;

use sdn_tests::harness::{require_root_and_ovs, Ovs};
use sdn_tests::openshift_sdn::{self as osdn, Node, Plugin};

/// A multitenant node of 10.128.0.0/14 with subnet 10.128.2.0/23.
fn fixture_node() -> Node {
    Node {
        plugin: Plugin::Multitenant,
        cluster_networks: vec!["10.128.0.0/14".into()],
        service_network: "172.30.0.0/16".into(),
        local_subnet: "10.128.2.0/23".into(),
        gateway: Ipv4Addr::new(10, 128, 2, 1),
        node_ip: Ipv4Addr::new(192, 168, 77, 12),
        node_mac: "52:54:00:4d:0c:0c".into(),
        tun_mac: "6e:2c:9a:11:22:33".into(),
        vxlan_port: 4789,
    }
}

#[test]
fn an_openshift_sdn_node_s_rows_load_into_open_vswitch() {
    require_root_and_ovs();
    let ovs = Ovs::start();
    ovs.add_bridge("br0");
    let node = fixture_node();
    let pod = Ipv4Addr::new(10, 128, 2, 5);
    let remote = Ipv4Addr::new(192, 168, 77, 13);
    let mut rows = osdn::setup_ovs_rows(&node);
    rows.extend(osdn::plugin_start_rows(node.plugin));
    rows.extend(osdn::pod_rows(3, pod, 11));
    rows.extend(osdn::vnid_rows(11));
    rows.extend(osdn::host_subnet_rows("hs-uid-1", remote, "10.128.4.0/23"));
    rows.extend(osdn::local_multicast_rows(11, &[3]));
    // The table-111 row replaces the base one (same match), as upstream's update does.
    rows.retain(|r| !r.starts_with("table=111,"));
    rows.push(osdn::vxlan_multicast_row(&[remote]));
    rows.push(osdn::version_row(node.plugin));
    let file = ovs.dir().join("openshift-sdn.flows");
    std::fs::write(&file, rows.join("\n") + "\n").unwrap();
    ovs.ofctl(&["add-flows", "br0", file.to_str().unwrap()]);

    let dump = ovs.ofctl(&["--no-stats", "dump-flows", "br0"]);
    // (ovs-ofctl leaves out `table=0`.)
    let flows: Vec<&str> = dump.lines().filter(|l| l.contains("actions=")).collect();
    assert_eq!(
        flows.len(),
        rows.len(),
        "every transcribed row is a flow of its own:\n{dump}"
    );
    let note: Vec<&&str> = flows.iter().filter(|l| l.contains("table=253")).collect();
    assert_eq!(note.len(), 1, "{dump}");
    assert!(
        note[0].contains("actions=note:01.0d"),
        "the version note openshift-sdn's AlreadySetUp looks for (01.0D): {}",
        note[0]
    );
    let c = osdn::host_subnet_cookie("hs-uid-1");
    assert_eq!(
        flows
            .iter()
            .filter(|l| l.contains(&format!("cookie={c:#x}")))
            .count(),
        3,
        "a remote node's three rows carry its HostSubnet's cookie:\n{dump}"
    );
    assert!(
        flows
            .iter()
            .any(|l| l.contains("table=20")
                && l.contains("arp_sha=00:00:0a:80:02:05/00:00:ff:ff:ff:ff")),
        "the pod's ARP row checks the MAC made from its address:\n{dump}"
    );

    // Our OpenFlow client dumps this bridge whole: openshift-sdn's `resubmit:10` (in_port
    // form), which our flow model does not hold, comes back as an undecoded action on a flow
    // that keeps its table, priority and match (a reconcile can delete or replace it), instead
    // of failing the dump.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let target = format!("unix:{}", ovs.mgmt_sock("br0").display());
    let dumped = rt.block_on(async {
        let c = ovs::openflow::OfClient::connect(&target).await.unwrap();
        c.dump_flows(&ovs::openflow::DumpFilter::all()).await
    });
    let dumped = dumped.expect("the dump of openshift-sdn's bridge decodes");
    assert_eq!(dumped.len(), rows.len());
    let undecoded: Vec<_> = dumped
        .iter()
        .filter(|f| {
            f.actions
                .iter()
                .any(|a| matches!(a, ovs::flow::Action::Undecoded(_)))
        })
        .collect();
    assert_eq!(
        undecoded
            .iter()
            .map(|f| (f.table, f.priority))
            .collect::<Vec<_>>(),
        [(10, 210), (10, 200)],
        "only the two rows with resubmit:10 are undecoded: {undecoded:?}"
    );
}

/// Its `OPENSHIFT-*` chains, made as its `syncIPTableRules` makes them, in a private network
/// namespace: every command iptables accepts, and `iptables-save` shows the chains, the jumps
/// from the built-in chains and the VXLAN port.
#[test]
fn an_openshift_sdn_node_s_iptables_chains_load() {
    require_root_and_ovs();
    let ns = sdn_tests::harness::Netns::new("osdnipt");
    let chains = osdn::iptables_chains(&["10.128.0.0/14".to_string()], 4789, 14);
    for cmd in osdn::iptables_commands(&chains) {
        let mut argv = vec!["iptables", "-w"];
        argv.extend(cmd.iter().map(String::as_str));
        ns.exec(&argv)
            .unwrap_or_else(|e| panic!("iptables {}: {e}", cmd.join(" ")));
    }
    let saved = ns.exec(&["iptables-save"]).unwrap();
    for (table, chain) in [
        ("filter", "OPENSHIFT-FIREWALL-ALLOW"),
        ("filter", "OPENSHIFT-ADMIN-OUTPUT-RULES"),
        ("filter", "OPENSHIFT-FIREWALL-FORWARD"),
        ("filter", "OPENSHIFT-BLOCK-OUTPUT"),
        ("nat", "OPENSHIFT-MASQUERADE"),
        ("nat", "OPENSHIFT-MASQUERADE-2"),
        ("raw", "OPENSHIFT-NOTRACK"),
    ] {
        let section = saved
            .split("*")
            .find(|s| s.starts_with(table))
            .unwrap_or_else(|| panic!("no {table} table:\n{saved}"));
        assert!(
            section.contains(&format!(":{chain} ")) && section.contains(&format!("-j {chain}")),
            "{table} {chain} made and jumped to:\n{saved}"
        );
    }
    assert!(
        saved.contains("-A OPENSHIFT-NOTRACK -p udp -m udp --dport 4789 -j NOTRACK"),
        "{saved}"
    );
    assert!(
        saved.contains("-A OPENSHIFT-MASQUERADE -m mark --mark 0x4000/0x4000 -j RETURN"),
        "{saved}"
    );
}

/// A whole openshift-sdn node (`build_node`): br0 with vxlan0 and tun0, four pods of two
/// tenants wired as its pod manager wires them, its rows, chains, CNI config and leases. Its
/// own rows forward as openshift-sdn's semantics say: a pod reaches the pod of its tenant and
/// the gateway, never the other tenant's pods.
#[test]
fn an_openshift_sdn_node_forwards_by_its_own_rules() {
    require_root_and_ovs();
    let ovs = Ovs::start();
    let node = fixture_node();
    let pod = |ns: &str, name: &str, last: u8, vnid: u32| osdn::PodSpec {
        namespace: ns.into(),
        name: name.into(),
        ip: Ipv4Addr::new(10, 128, 2, last),
        vnid,
        bandwidth: None,
    };
    let specs = [
        pod("a", "a1", 5, 11),
        pod("a", "a2", 6, 11),
        pod("b", "b1", 7, 12),
        pod("b", "b2", 8, 12),
    ];
    let remote = [osdn::RemoteNode {
        uid: "hs-uid-2".into(),
        host_ip: Ipv4Addr::new(192, 168, 77, 13),
        subnet: "10.128.4.0/23".into(),
    }];
    let conf_dir = ovs.dir().join("net.d");
    let lease_dir = osdn::lease_dir(&ovs.dir().join("root"));
    let pods = osdn::build_node(&ovs, &node, &remote, &specs, &conf_dir, &lease_dir);

    // The records openshift-sdn reads back (GetPodNetworkInfo): sandbox and ip on each port.
    for p in &pods {
        let ids = ovs.vsctl(&["get", "Interface", &p.host_veth, "external_ids"]);
        assert!(
            ids.contains(&format!("sandbox=\"{}\"", p.sandbox))
                && ids.contains(&format!("ip=\"{}\"", p.spec.ip)),
            "{}: {ids}",
            p.host_veth
        );
        let mac = p
            .netns
            .exec(&["cat", "/sys/class/net/eth0/address"])
            .unwrap();
        assert_eq!(mac.trim(), osdn::pod_mac(p.spec.ip));
        assert!(lease_dir.join(p.spec.ip.to_string()).exists());
    }
    assert_eq!(
        std::fs::read_to_string(conf_dir.join(osdn::CNI_CONF_FILE)).unwrap(),
        osdn::cni_conf_text()
    );
    let ping = |from: &osdn::WiredPod, to: Ipv4Addr| {
        from.netns
            .exec(&["ping", "-c", "1", "-W", "1", &to.to_string()])
            .is_ok()
    };
    for from in &pods {
        assert!(
            ping(from, node.gateway),
            "{} cannot reach the gateway",
            from.spec.name
        );
        for to in &pods {
            if from.spec.name == to.spec.name {
                continue;
            }
            let same = from.spec.vnid == to.spec.vnid;
            assert_eq!(
                ping(from, to.spec.ip),
                same,
                "{} -> {}: openshift-sdn's multitenant rule says {}",
                from.spec.name,
                to.spec.name,
                if same { "allowed" } else { "isolated" }
            );
        }
    }
}
