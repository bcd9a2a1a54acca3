//! The openshift-sdn node fixture (`sdn_tests::openshift_sdn`), checked against Open vSwitch,
//! the kernel and upstream's facts: every row it transcribes loads into a real bridge as
//! openshift-sdn's `ovs-ofctl` calls loaded it (OpenFlow 1.3), nothing is merged or refused,
//! and the version note in table 253 is the one openshift-sdn looks for at start-up; the node it
//! builds is the one openshift/sdn 18a57d7 leaves (tun0 without a `mac` column, its MAC the
//! device's, `ip_forward` on, tun0's and the pods' addresses and routes as netlink makes them,
//! veths with txqueuelen 0, the pod's nftables table, v0.6.0 leases, the `OPENSHIFT-*` and
//! canary chains) and forwards by its plugin's semantics (multitenant, networkpolicy);
//! openshift-sdn's own start leaves a set-up node alone and rebuilds any other, bandwidth
//! included. The mixed-cluster and takeover tests build on this fixture.

use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;

use std::time::Duration;

use sdn_tests::harness::{require_root_and_ovs, unique_name, wait_until, Netns, Ovs};
use sdn_tests::openshift_sdn::{self as osdn, Node, Plugin, PodSpec, WiredPod};

/// A node of 10.128.0.0/14 with subnet 10.128.2.0/23.
fn node_of(plugin: Plugin) -> Node {
    Node {
        plugin,
        cluster_networks: vec!["10.128.0.0/14".into()],
        service_network: "172.30.0.0/16".into(),
        local_subnet: "10.128.2.0/23".into(),
        gateway: Ipv4Addr::new(10, 128, 2, 1),
        node_ip: Ipv4Addr::new(192, 168, 77, 12),
        vxlan_port: 4789,
    }
}

/// A multitenant node of 10.128.0.0/14 with subnet 10.128.2.0/23.
fn fixture_node() -> Node {
    node_of(Plugin::Multitenant)
}

/// A pod of the node's subnet.
fn pod(ns: &str, name: &str, last: u8, vnid: u32) -> PodSpec {
    PodSpec {
        namespace: ns.into(),
        name: name.into(),
        ip: Ipv4Addr::new(10, 128, 2, last),
        vnid,
        bandwidth: None,
    }
}

/// One remote node.
fn remote() -> [osdn::RemoteNode; 1] {
    [osdn::RemoteNode {
        uid: "hs-uid-2".into(),
        host_ip: Ipv4Addr::new(192, 168, 77, 13),
        subnet: "10.128.4.0/23".into(),
    }]
}

/// Builds `node` with `specs` in a fresh OVS (with its uplink): the OVS, the pods, the CNI
/// config directory and the lease directory.
fn build(
    node: &Node,
    specs: &[PodSpec],
) -> (Ovs, Vec<WiredPod>, std::path::PathBuf, std::path::PathBuf) {
    let ovs = Ovs::start();
    let conf_dir = ovs.dir().join("net.d");
    let lease_dir = osdn::lease_dir(&ovs.dir().join("root"));
    osdn::node_uplink(&ovs, node);
    let pods = osdn::build_node(&ovs, node, &remote(), specs, &conf_dir, &lease_dir);
    (ovs, pods, conf_dir, lease_dir)
}

/// Runs `cmd` in `ns`, panicking with its error.
fn ok(ns: &Netns, cmd: &[&str]) -> String {
    ns.exec(cmd)
        .unwrap_or_else(|e| panic!("{}: {e}", cmd.join(" ")))
}

/// `ip -j` output as its array.
fn json(ns: &Netns, cmd: &[&str]) -> Vec<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(&ok(ns, cmd)).expect("ip -j");
    v.as_array().cloned().unwrap_or_default()
}

/// Whether `from` reaches `to` with one ping.
fn ping(from: &WiredPod, to: Ipv4Addr) -> bool {
    from.netns
        .exec(&["ping", "-c", "1", "-W", "1", &to.to_string()])
        .is_ok()
}

/// A `sysfs` value of a device in `ns`.
fn sys(ns: &Netns, dev: &str, attr: &str) -> String {
    ok(ns, &["cat", &format!("/sys/class/net/{dev}/{attr}")])
        .trim()
        .to_string()
}

#[test]
fn an_openshift_sdn_node_s_rows_load_into_open_vswitch() {
    require_root_and_ovs();
    let ovs = Ovs::start();
    ovs.add_bridge("br0");
    let node = fixture_node();
    let pod = Ipv4Addr::new(10, 128, 2, 5);
    let remote = Ipv4Addr::new(192, 168, 77, 13);
    // (MACs as a node would have them; `build_node` reads them from the node.)
    let macs = osdn::Macs {
        node_mac: "52:54:00:4d:0c:0c".into(),
        tun_mac: "6e:2c:9a:11:22:33".into(),
    };
    let mut rows = osdn::setup_ovs_rows(&node, &macs);
    rows.extend(osdn::plugin_start_rows(&node));
    rows.extend(osdn::pod_rows(3, pod, 11));
    rows.extend(osdn::vnid_rows(node.plugin, 11));
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

/// Its `OPENSHIFT-*` chains, synced as its `syncIPTableRules` syncs them, in a private network
/// namespace: iptables takes every call, `iptables-save` shows the chains, the jumps from the
/// built-in chains and the VXLAN port; a second sync changes nothing; a chain holding a rule of
/// another subnet is flushed and filled again; the canary chains are empty chains of `mangle`,
/// `nat` and `filter`.
#[test]
fn an_openshift_sdn_node_s_iptables_chains_load() {
    require_root_and_ovs();
    let ns = Netns::new("osdnipt");
    let chains = osdn::iptables_chains(&["10.128.0.0/14".to_string()], 4789, 14);
    osdn::sync_iptables(ns.name(), &chains);
    let saved = ok(&ns, &["iptables-save"]);
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
            .split('*')
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
    // The prepended jumps end in list order (iptables.go:133-137).
    let forward: Vec<&str> = saved
        .lines()
        .filter(|l| l.starts_with("-A FORWARD"))
        .collect();
    assert!(
        forward[0].ends_with("-j OPENSHIFT-ADMIN-OUTPUT-RULES")
            && forward[1].ends_with("-j OPENSHIFT-FIREWALL-FORWARD")
            && forward[2].ends_with("-j OPENSHIFT-BLOCK-OUTPUT"),
        "{forward:#?}"
    );
    let rules = |chain: &str| ok(&ns, &["iptables", "-S", chain]);
    let want = rules("OPENSHIFT-FIREWALL-FORWARD");

    osdn::sync_iptables(ns.name(), &chains);
    assert_eq!(
        ok(&ns, &["iptables-save"])
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>(),
        saved
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>(),
        "a second sync changes nothing"
    );

    // The chain of a node whose cluster network was another: flushed and filled again
    // (iptables.go:152-165), not left holding the stale rule.
    ok(
        &ns,
        &[
            "iptables",
            "-D",
            "OPENSHIFT-FIREWALL-FORWARD",
            "-d",
            "10.128.0.0/14",
            "-m",
            "comment",
            "--comment",
            "forward traffic from SDN",
            "-j",
            "ACCEPT",
        ],
    );
    ok(
        &ns,
        &[
            "iptables",
            "-I",
            "OPENSHIFT-FIREWALL-FORWARD",
            "-d",
            "10.1.0.0/16",
            "-j",
            "ACCEPT",
        ],
    );
    osdn::sync_iptables(ns.name(), &chains);
    assert_eq!(rules("OPENSHIFT-FIREWALL-FORWARD"), want);

    osdn::ensure_canary_chains(ns.name());
    osdn::ensure_canary_chains(ns.name());
    for table in ["mangle", "nat", "filter"] {
        assert_eq!(
            ok(&ns, &["iptables", "-t", table, "-S", osdn::CANARY_CHAIN]).trim(),
            format!("-N {}", osdn::CANARY_CHAIN),
            "an empty canary chain in {table}"
        );
    }
}

/// host-local as openshift-sdn vendors it (v0.6.0): a lease file holds the sandbox ID and
/// nothing else, mode 0600, as does `last_reserved_ip.0` its address; no `lock` file; the
/// release by ID removes it. A lease of the same sandbox in v1.x's format (`<id>\r\neth0`) is
/// never released by it (its trimmed content is not the ID), so that address leaks.
#[test]
fn openshift_sdn_s_host_local_leases_are_v0_6_0_s() {
    struct Dir(std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let root = Dir(std::env::temp_dir().join(unique_name("osdnlease")));
    let dir = osdn::lease_dir(&root.0);
    let ip = Ipv4Addr::new(10, 128, 2, 5);
    let id = format!("{:064x}", 0xabc_u64);
    assert!(osdn::host_local_reserve(&dir, ip, &id));
    assert!(
        !osdn::host_local_reserve(&dir, ip, "another"),
        "an address is leased once"
    );
    let mode = |name: &str| {
        std::fs::metadata(dir.join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(std::fs::read_to_string(dir.join("10.128.2.5")).unwrap(), id);
    assert_eq!(mode("10.128.2.5"), 0o600);
    assert_eq!(
        std::fs::read_to_string(dir.join("last_reserved_ip.0")).unwrap(),
        "10.128.2.5"
    );
    assert_eq!(mode("last_reserved_ip.0"), 0o600);
    assert!(!dir.join("lock").exists(), "v0.6.0 locks the directory");

    // The same sandbox's lease in v1.x's format (what a newer host-local writes: the ID, CRLF,
    // the interface), at another address.
    std::fs::write(dir.join("10.128.2.6"), format!("{id}\r\neth0")).unwrap();
    assert_eq!(
        osdn::host_local_release_by_id(&dir, &id),
        ["10.128.2.5"],
        "the release by ID removes the v0.6.0 lease and only it"
    );
    assert!(!dir.join("10.128.2.5").exists());
    assert!(
        dir.join("10.128.2.6").exists(),
        "the v1.x lease of the same sandbox stays: its address leaks"
    );
}

/// A whole multitenant openshift-sdn node (`build_node`): four pods of two tenants, one with
/// bandwidth limits, wired as its CNI plugin and pod manager wire them. The node is upstream's
/// (tun0, forwarding, routes, addresses, veths, nftables, leases, chains, CNI config), and its
/// own rows forward as openshift-sdn's semantics say: a pod reaches the pod of its tenant and
/// the gateway, never the other tenant's pods; a re-flowed pod follows its new VNID and
/// `SyncVNIDRules` finds the VNID no pod has; the egress-IP group is replaced as upstream
/// replaces it.
#[test]
fn an_openshift_sdn_node_forwards_by_its_own_rules() {
    require_root_and_ovs();
    let node = fixture_node();
    let mut specs = [
        pod("a", "a1", 5, 11),
        pod("a", "a2", 6, 11),
        pod("b", "b1", 7, 12),
        pod("b", "b2", 8, 12),
    ];
    specs[1].bandwidth = Some((10_000_000, 10_240_000));
    let (ovs, pods, conf_dir, lease_dir) = build(&node, &specs);
    let n = ovs.ns();

    // tun0: no `mac` column (ovscontroller.go:239); its rows carry its mac_in_use.
    assert_eq!(ovs.vsctl(&["get", "Interface", "tun0", "mac"]).trim(), "[]");
    let tun_mac = ovs.vsctl(&["get", "Interface", "tun0", "mac_in_use"]);
    let tun_mac = tun_mac.trim().trim_matches('"');
    let ens3_mac = sys(n, "ens3", "address");
    let table10 = ovs.ofctl(&["dump-flows", "br0", "table=10"]);
    assert!(
        table10.contains(&format!(
            "dl_dst={ens3_mac},nw_dst=10.128.2.1 actions=set_field:{tun_mac}->eth_dst"
        )),
        "localMAC is the uplink's, tunMAC tun0's mac_in_use:\n{table10}"
    );
    assert_eq!(sys(n, "tun0", "address"), tun_mac);
    assert_eq!(sys(n, "tun0", "mtu"), "1450");
    // sdn_controller.go:104-117 (a new namespace starts with it off).
    assert_eq!(ok(n, &["sysctl", "-n", "net.ipv4.ip_forward"]).trim(), "1");
    // tun0's address with its broadcast, its two routes as netlink makes them, no route of the
    // local subnet.
    let addr = &json(n, &["ip", "-j", "-4", "addr", "show", "dev", "tun0"])[0]["addr_info"][0];
    assert_eq!(addr["local"], "10.128.2.1");
    assert_eq!(addr["prefixlen"], 23);
    assert_eq!(addr["broadcast"], "10.128.3.255");
    let routes: Vec<(String, String, String, bool)> =
        json(n, &["ip", "-d", "-j", "-4", "route", "show", "dev", "tun0"])
            .iter()
            .map(|r| {
                (
                    r["dst"].as_str().unwrap().to_string(),
                    r["protocol"].as_str().unwrap().to_string(),
                    r["scope"].as_str().unwrap().to_string(),
                    r.get("metrics").is_some(),
                )
            })
            .collect();
    let route = |dst: &str, scope: &str| -> (String, String, String, bool) {
        (dst.to_string(), "boot".into(), scope.into(), false)
    };
    assert_eq!(
        routes,
        [
            route("10.128.0.0/14", "link"),
            route("172.30.0.0/16", "global")
        ]
    );
    assert_eq!(osdn::already_set_up(&ovs, &node), Ok(()));

    for p in &pods {
        // The records openshift-sdn reads back (GetPodNetworkInfo): sandbox and ip on each
        // port.
        let ids = ovs.vsctl(&["get", "Interface", &p.host_veth, "external_ids"]);
        assert!(
            ids.contains(&format!("sandbox=\"{}\"", p.sandbox))
                && ids.contains(&format!("ip=\"{}\"", p.spec.ip)),
            "{}: {ids}",
            p.host_veth
        );
        let pns = &p.netns;
        assert_eq!(sys(pns, "eth0", "address"), osdn::pod_mac(p.spec.ip));
        assert_eq!(sys(pns, "eth0", "mtu"), "1450");
        assert_eq!(sys(n, &p.host_veth, "mtu"), "1450");
        // txqueuelen 0 on both ends; 1000 on the host end of a pod with an ingress limit.
        assert_eq!(sys(pns, "eth0", "tx_queue_len"), "0");
        let host_qlen = if p.spec.bandwidth.is_some() {
            "1000"
        } else {
            "0"
        };
        assert_eq!(sys(n, &p.host_veth, "tx_queue_len"), host_qlen);
        let addr =
            &json(pns, &["ip", "-j", "-4", "addr", "show", "dev", "eth0"])[0]["addr_info"][0];
        assert_eq!(addr["broadcast"], "10.128.3.255");
        // The IPAM routes (default, service, cluster, multicast), proto boot, scope global,
        // no mtu; and the kernel's route of the address's subnet.
        let routes: Vec<String> = json(pns, &["ip", "-d", "-j", "-4", "route", "show"])
            .iter()
            .map(|r| {
                assert!(r.get("metrics").is_none(), "no route has an mtu: {r}");
                format!(
                    "{} {} {} {}",
                    r["dst"].as_str().unwrap(),
                    r["gateway"].as_str().unwrap_or("-"),
                    r["protocol"].as_str().unwrap(),
                    r["scope"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(
            routes,
            [
                "default 10.128.2.1 boot global",
                "10.128.0.0/14 - boot global",
                "10.128.2.0/23 - kernel link",
                "172.30.0.0/16 10.128.2.1 boot global",
                "224.0.0.0/4 - boot global",
            ],
            "{}",
            p.spec.name
        );
        let nft = ok(
            pns,
            &["nft", "list", "table", "ip", osdn::BLOCK_OUTPUT_TABLE],
        );
        for line in [
            "tcp dport { 22623, 22624 } tcp flags syn reject",
            "ip daddr 169.254.169.254 udp dport != 53 reject",
            "ip daddr 169.254.169.254 tcp dport != 53 reject",
            "type filter hook output priority filter; policy accept;",
            "type filter hook forward priority filter; policy accept;",
        ] {
            assert!(nft.contains(line), "{line}:\n{nft}");
        }
        // The v0.6.0 lease: the sandbox ID only, 0600.
        let lease = lease_dir.join(p.spec.ip.to_string());
        assert_eq!(std::fs::read_to_string(&lease).unwrap(), p.sandbox);
        assert_eq!(
            std::fs::metadata(&lease).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    // The bandwidth of a2: one QoS row of its sandbox on its port, its policing rate.
    let a2 = &pods[1];
    let qos = qos_of(&ovs, &a2.sandbox);
    assert_eq!(qos.split_whitespace().count(), 1, "{qos}");
    assert_eq!(
        ovs.vsctl(&["get", "Port", &a2.host_veth, "qos"]).trim(),
        qos.trim()
    );
    assert_eq!(
        ovs.vsctl(&["get", "QoS", qos.trim(), "other_config:max-rate"])
            .trim(),
        "\"10000000\""
    );
    assert_eq!(
        ovs.vsctl(&["get", "Interface", &a2.host_veth, "ingress_policing_rate"])
            .trim(),
        "10000"
    );
    let conf = conf_dir.join(osdn::CNI_CONF_FILE);
    assert_eq!(
        std::fs::read_to_string(&conf).unwrap(),
        osdn::cni_conf_text()
    );
    assert_eq!(
        std::fs::metadata(&conf).unwrap().permissions().mode() & 0o777,
        0o600
    );
    for table in ["mangle", "nat", "filter"] {
        assert!(
            ovs.exec_in_netns(&["iptables", "-t", table, "-S", osdn::CANARY_CHAIN])
                .is_ok(),
            "the canary chain in {table}"
        );
    }

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

    // b joins a: its pods re-flowed one by one; VNID 12 unused only once both moved.
    let (a1, b1, b2) = (&pods[0], &pods[2], &pods[3]);
    osdn::update_pod_vnid(&ovs, &node, b1.ofport, b1.spec.ip, 11);
    assert!(ping(a1, b1.spec.ip) && !ping(a1, b2.spec.ip));
    assert!(osdn::sync_vnid_rules(&ovs, &node).is_empty());
    osdn::update_pod_vnid(&ovs, &node, b2.ofport, b2.spec.ip, 11);
    assert_eq!(osdn::sync_vnid_rules(&ovs, &node), [12]);
    assert!(ping(a1, b2.spec.ip));
    let table80 = ovs.ofctl(&["dump-flows", "br0", "table=80"]);
    assert!(
        !table80.contains("reg1=0xc"),
        "VNID 12's row is gone:\n{table80}"
    );

    // The egress-IP group, set twice: replaced whole (its delete first), buckets in order.
    let (n2, n3) = (
        Ipv4Addr::new(192, 168, 77, 2),
        Ipv4Addr::new(192, 168, 77, 3),
    );
    osdn::set_egress_via_remote(&ovs, 11, &[n2]);
    osdn::set_egress_via_remote(&ovs, 11, &[n3, n2]);
    let groups = ovs.ofctl(&["dump-groups", "br0"]);
    let group: Vec<&str> = groups.lines().filter(|l| l.contains("group_id=")).collect();
    assert_eq!(group.len(), 1, "{groups}");
    assert!(
        group[0].ends_with("bucket=actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:192.168.77.3->tun_dst,output:1,bucket=actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:192.168.77.2->tun_dst,output:1"),
        "{groups}"
    );
    let table101 = ovs.ofctl(&["dump-flows", "br0", "table=101, reg0=11"]);
    assert!(
        table101.contains("actions=ct(commit),group:11"),
        "{table101}"
    );
}

/// openshift-sdn's networkpolicy plugin with no NetworkPolicy: its start rows and each in-use
/// VNID's "all accepted" rows load, and pods reach the pods of their namespace, and (nothing
/// isolating them) of the other.
#[test]
fn a_networkpolicy_node_allows_what_no_policy_denies() {
    require_root_and_ovs();
    let node = node_of(Plugin::NetworkPolicy);
    let specs = [
        pod("a", "a1", 5, 11),
        pod("a", "a2", 6, 11),
        pod("b", "b1", 7, 12),
    ];
    let (ovs, pods, _conf, _leases) = build(&node, &specs);
    let dump = ovs.ofctl(&["dump-flows", "br0"]);
    let rows = |table: u8, parts: &[&str]| {
        dump.lines()
            .filter(|l| l.contains(&format!("table={table},")))
            .filter(|l| parts.iter().all(|p| l.contains(p)))
            .count()
    };
    for (table, parts) in [
        (
            27,
            &[
                "priority=300",
                "nw_dst=172.30.0.0/16 ",
                "actions=goto_table:30",
            ][..],
        ),
        (
            80,
            &[
                "priority=200",
                "ct_state=+rpl",
                "actions=output:NXM_NX_REG2[]",
            ],
        ),
        (
            27,
            &["priority=200", "ct_state=+rpl", "actions=goto_table:30"],
        ),
        (
            30,
            &[
                "priority=100",
                "ct_state=-rpl",
                "nw_src=10.128.0.0/14,nw_dst=10.128.0.0/14",
                "actions=ct(commit,table=31)",
            ],
        ),
        (
            80,
            &["priority=50,reg1=0xb ", "actions=output:NXM_NX_REG2[]"],
        ),
        (27, &["priority=50,reg0=0xb ", "actions=goto_table:30"]),
        (
            80,
            &["priority=50,reg1=0xc ", "actions=output:NXM_NX_REG2[]"],
        ),
        (27, &["priority=50,reg0=0xc ", "actions=goto_table:30"]),
    ] {
        assert_eq!(rows(table, parts), 1, "table {table} {parts:?}:\n{dump}");
    }
    assert_eq!(
        rows(80, &["priority=50"]),
        2,
        "one per VNID in use:\n{dump}"
    );
    assert!(dump.contains("actions=note:02.0d"), "{dump}");
    assert!(ping(&pods[0], pods[1].spec.ip), "a1 -> a2, its namespace");
    assert!(ping(&pods[1], pods[0].spec.ip), "a2 -> a1, its namespace");
    assert!(ping(&pods[0], pods[2].spec.ip), "a1 -> b1, no policy");
    assert!(ping(&pods[2], node.gateway), "b1 -> the gateway");
}

/// openshift-sdn's start on a node (`restart_node`): on the node it set up it changes nothing
/// there but syncs its chains again (a stale chain flushed and refilled); each condition of its
/// already-set-up test failing makes it set up again: br0 afresh, every pod reattached with its
/// bandwidth (the old QoS rows destroyed, new ones on the new ports), pods reaching each other.
#[test]
fn openshift_sdn_s_start_keeps_a_set_up_node_and_rebuilds_any_other() {
    require_root_and_ovs();
    let node = fixture_node();
    let mut specs = [pod("a", "a1", 5, 11), pod("a", "a2", 6, 11)];
    specs[0].bandwidth = Some((10_000_000, 10_240_000));
    let (ovs, pods, _conf, _leases) = build(&node, &specs);
    let n = ovs.ns();
    let pod_of = |ip: Ipv4Addr| {
        let p = pods.iter().find(|p| p.spec.ip == ip).expect("a known pod");
        (p.spec.vnid, p.spec.bandwidth)
    };
    let br0_uuid = || ovs.vsctl(&["get", "Bridge", "br0", "_uuid"]);

    let before = br0_uuid();
    ok(
        n,
        &[
            "iptables",
            "-I",
            "OPENSHIFT-FIREWALL-ALLOW",
            "-s",
            "10.9.0.0/16",
            "-j",
            "ACCEPT",
        ],
    );
    ok(
        n,
        &[
            "iptables",
            "-D",
            "OPENSHIFT-FIREWALL-ALLOW",
            "-i",
            "tun0",
            "-m",
            "comment",
            "--comment",
            "from SDN to localhost",
            "-j",
            "ACCEPT",
        ],
    );
    assert_eq!(osdn::restart_node(&ovs, &node, &remote(), &pod_of), None);
    assert_eq!(br0_uuid(), before, "a set-up node keeps its bridge");
    let allow = ok(n, &["iptables", "-S", "OPENSHIFT-FIREWALL-ALLOW"]);
    assert!(
        !allow.contains("10.9.0.0/16") && allow.contains("from SDN to localhost"),
        "the chains are synced on every start:\n{allow}"
    );

    // Each condition of alreadySetUp, broken, sets the node up again.
    let breakers: [(&str, &[&[&str]]); 4] = [
        (
            "a second flow in table 253",
            &[&[
                "ovs-ofctl",
                "add-flow",
                "table=253, priority=5, actions=note:00",
            ]],
        ),
        (
            "vxlan0's dst_port",
            &[&[
                "ovs-vsctl",
                "set",
                "Interface",
                "vxlan0",
                "options:dst_port=4790",
            ]],
        ),
        (
            "the service route with an mtu",
            &[&[
                "ip",
                "route",
                "change",
                "172.30.0.0/16",
                "dev",
                "tun0",
                "mtu",
                "1400",
            ]],
        ),
        ("tun0's address", &[&["ip", "addr", "flush", "dev", "tun0"]]),
    ];
    for (what, cmds) in breakers {
        for cmd in cmds {
            match cmd[0] {
                "ovs-ofctl" => {
                    ovs.ofctl(&[cmd[1], "br0", cmd[2]]);
                }
                "ovs-vsctl" => {
                    ovs.vsctl(&cmd[1..]);
                }
                _ => {
                    ok(n, cmd);
                }
            }
        }
        assert!(osdn::already_set_up(&ovs, &node).is_err(), "{what}");
        let old_qos = ovs.vsctl(&["get", "Port", &pods[0].host_veth, "qos"]);
        let reattached = osdn::restart_node(&ovs, &node, &remote(), &pod_of)
            .unwrap_or_else(|| panic!("{what}: set up again"));
        assert_eq!(reattached.len(), pods.len(), "{what}: {reattached:?}");
        assert_eq!(osdn::already_set_up(&ovs, &node), Ok(()), "{what}");
        let p = &pods[0];
        let qos = qos_of(&ovs, &p.sandbox);
        assert_eq!(qos.split_whitespace().count(), 1, "{what}: {qos}");
        assert_ne!(qos.trim(), old_qos.trim(), "{what}: a new QoS row");
        assert_eq!(
            ovs.vsctl(&["get", "Port", &p.host_veth, "qos"]).trim(),
            qos.trim(),
            "{what}"
        );
        assert_eq!(
            ovs.vsctl(&["get", "Interface", &p.host_veth, "ingress_policing_rate"])
                .trim(),
            "10000",
            "{what}"
        );
        assert_eq!(sys(n, &p.host_veth, "tx_queue_len"), "1000", "{what}");
        assert!(ping(&pods[0], pods[1].spec.ip), "{what}: a1 -> a2");
        // tun0 is a new device with a new MAC: the pod's ARP entry of the old one fails and
        // goes by itself within a minute (its reachable time, then unanswered probes), as on
        // a node openshift-sdn set up again; flushed here so that the test need not wait.
        ok(&pods[1].netns, &["ip", "neigh", "flush", "dev", "eth0"]);
        assert!(
            wait_until(Duration::from_secs(5), || ping(&pods[1], node.gateway)),
            "{what}: a2 -> the gateway"
        );
    }
}

/// The QoS rows (their uuids, one a line) tagged with `sandbox`, as openshift-sdn finds them.
fn qos_of(ovs: &Ovs, sandbox: &str) -> String {
    ovs.vsctl(&[
        "--bare",
        "--columns=_uuid",
        "find",
        "qos",
        &format!("external_ids:sandbox={sandbox}"),
    ])
}
