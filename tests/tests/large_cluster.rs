//! A node in a cluster of 5,000 nodes, on real OVS: the agent starts and installs every other
//! node's rows, the table-111 multicast row fits (past 1,000 remote nodes it sends through `all`
//! groups of VTEPs, pipeline.md "Per remote node"), a restart changes no flow, and when the
//! cluster shrinks the row lists its VTEPs again and the groups go.
//!
//! The other nodes are HostSubnet objects in the node's standalone state directory (what the
//! agent reads of them is the same in Kubernetes mode).
//!
//! And correct at scale, not only fast: in Kubernetes mode, two real nodes in a cluster of
//! 5,000 more simulated nodes and 5,000 more namespaces (`sdn_tests::simulated`) keep the
//! isolation matrix of their pods, before and after a join, and a restart changes no flow.
//! (networkpolicy mode's truth tables at that size are in `network_policy.rs`.) openshift-sdn's one-row form cannot be
//! encoded past about 2,045 nodes (a 16-bit OpenFlow length): an agent building it exits at
//! start.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use sdn_tests::harness::wait_until;
use sdn_tests::node::{AgentNode, NodeOptions};
use serde_json::json;

const NODES: u32 = 5000;
const PER_FILE: u32 = 500;

/// Node `i`'s VTEP and pod subnet (the local node seeds 10.0.0.0/24 for itself).
fn sim_node(i: u32) -> (Ipv4Addr, String) {
    let vtep = Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 1)) + i);
    let n = i + 256;
    (vtep, format!("10.{}.{}.0/24", n / 256, n % 256))
}

/// Writes the HostSubnets of nodes `0..count` as JSON lists, `PER_FILE` a file, and removes
/// the files of nodes past `count`.
fn write_nodes(node: &AgentNode, count: u32) {
    let dir = node.state_dir();
    for f in 0..NODES.div_ceil(PER_FILE) {
        let path = dir.join(format!("sim-hostsubnets-{f:02}.json"));
        let first = f * PER_FILE;
        let items: Vec<_> = (first..(first + PER_FILE).min(count))
            .map(|i| {
                let (vtep, subnet) = sim_node(i);
                json!({
                    "apiVersion": "network.openshift.io/v1",
                    "kind": "HostSubnet",
                    "metadata": {"name": format!("sim-{i:05}"), "uid": format!("sim-uid-{i:05}")},
                    "host": format!("sim-{i:05}"),
                    "hostIP": vtep.to_string(),
                    "subnet": subnet,
                })
            })
            .collect();
        if items.is_empty() {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec(&list).unwrap()).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }
}

/// Rows per table of br0 at priority 100 (a remote node's rows; the base rows of tables 10, 50
/// and 90 are at other priorities).
fn rows_per_table(node: &AgentNode) -> BTreeMap<u8, usize> {
    let mut per = BTreeMap::new();
    for l in node
        .flows()
        .iter()
        .filter(|l| l.contains(" priority=100,") || l.contains(" priority=100 "))
    {
        if let Some(t) = l
            .split("table=")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .and_then(|t| t.parse::<u8>().ok())
        {
            *per.entry(t).or_default() += 1;
        }
    }
    per
}

/// The table-111 row as `ovs-ofctl` prints it.
fn row_111(node: &AgentNode) -> String {
    node.flows()
        .into_iter()
        .find(|l| l.contains("table=111,"))
        .unwrap_or_default()
}

/// br0's groups: id -> number of buckets.
fn groups(node: &AgentNode) -> BTreeMap<u32, usize> {
    node.ovs
        .ofctl(&["dump-groups", "br0"])
        .lines()
        .filter_map(|l| {
            let id = l
                .split("group_id=")
                .nth(1)?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((id, l.matches("bucket=").count()))
        })
        .collect()
}

#[test]
fn a_node_of_a_5000_node_cluster_starts_and_its_multicast_row_fits() {
    let _large = sdn_tests::harness::one_large_cluster_at_a_time();
    let node = AgentNode::new(NodeOptions {
        cluster_network: "10.0.0.0/8,8".into(),
        ..NodeOptions::default()
    });
    node.start_agent();
    let written = std::time::Instant::now();
    write_nodes(&node, NODES);

    // Every other node's three rows, and the table-111 row through five groups of 1000.
    let settled = wait_until(Duration::from_secs(300), || {
        rows_per_table(&node).get(&90).copied() == Some(NODES as usize) && groups(&node).len() == 5
    });
    let per = rows_per_table(&node);
    assert!(
        settled,
        "rows per table: {per:?}; groups: {:?}; log tail:\n{}",
        groups(&node),
        tail(&node.log())
    );
    eprintln!(
        "{NODES} HostSubnets written -> every remote row and the five VTEP groups on br0: {:.1} s",
        written.elapsed().as_secs_f64()
    );
    for t in [10, 50, 90] {
        assert_eq!(per.get(&t), Some(&(NODES as usize)), "table {t}: {per:?}");
    }
    let row = row_111(&node);
    assert!(
        row.contains(
            "actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],group:16777216,group:16777217,group:16777218,group:16777219,group:16777220,goto_table:120"
        ),
        "{row}"
    );
    let g = groups(&node);
    assert_eq!(
        g,
        (0..5)
            .map(|i| (16_777_216 + i, 1000))
            .collect::<BTreeMap<_, _>>()
    );
    let dump = node.ovs.ofctl(&["dump-groups", "br0"]);
    let (first_vtep, _) = sim_node(0);
    let (last_vtep, _) = sim_node(NODES - 1);
    assert!(
        dump.contains("type=all")
            && dump.contains(&format!(
                "bucket=actions=set_field:{first_vtep}->tun_dst,output:1"
            ))
            && dump.contains(&format!("set_field:{last_vtep}->tun_dst,output:1")),
        "groups lack the first or last VTEP"
    );

    // A restart at 5,000 nodes: ready, and its reconcile changes no flow and no group.
    let before = node.flows();
    node.stop_agent(libc::SIGTERM);
    node.start_agent();
    let reconciled = node.last_reconcile();
    eprintln!(
        "agent restarted with {NODES} remote nodes, its phases (ms since start): {}",
        reconciled
            .split("ms_at_end_of=")
            .nth(1)
            .unwrap_or_default()
            .trim()
    );
    assert!(
        reconciled.contains(" added=0 ")
            && reconciled.contains(" deleted=0 ")
            && reconciled.contains(" groups=0 ")
            && reconciled.contains(" refused=0 "),
        "the restart's reconcile changed br0: {reconciled}"
    );
    assert_eq!(node.flows(), before, "flows changed across the restart");

    // The cluster shrinks to 800 other nodes: the row lists its VTEPs again, the groups go.
    let shrinking = std::time::Instant::now();
    write_nodes(&node, 800);
    let shrunk = wait_until(Duration::from_secs(300), || {
        groups(&node).is_empty() && rows_per_table(&node).get(&90).copied() == Some(800)
    });
    assert!(
        shrunk,
        "groups: {:?}; rows: {:?}",
        groups(&node),
        rows_per_table(&node)
    );
    eprintln!(
        "{} HostSubnets deleted -> their rows and the VTEP groups gone: {:.1} s",
        NODES - 800,
        shrinking.elapsed().as_secs_f64()
    );
    let row = row_111(&node);
    assert_eq!(row.matches("output:1").count(), 800, "{row}");
    assert!(!row.contains("group:"), "{row}");
    assert!(
        node.agent_running(),
        "the agent exited:\n{}",
        tail(&node.log())
    );
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

#[test]
fn the_isolation_matrix_holds_in_a_cluster_of_5000_nodes() {
    let _large = sdn_tests::harness::one_large_cluster_at_a_time();
    use sdn_tests::cluster::{node_name, Cluster};
    use sdn_tests::matrix::{self, Member, NodeSide};
    use sdn_tests::simulated::{self, Size};
    const GROUP: &str = "network.openshift.io";
    const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);
    let size = Size {
        nodes: NODES as usize,
        namespaces: 5000,
        pods_per_namespace: 0,
        policies: false,
    };
    // The agents start in the large cluster (the benchmark grows one around a running agent).
    let (c, plane) = Cluster::start_kubernetes_with(
        2,
        &NodeOptions {
            // Room for 5,002 node subnets.
            cluster_network: "10.0.0.0/8,8".into(),
            ..NodeOptions::default()
        },
        |plane| {
            simulated::simulate(&plane.fake, size, Duration::from_secs(300));
        },
    );
    let fake = &plane.fake;
    simulated::assert_every_remote_row(&c, size, Duration::from_secs(600));
    let vnid = |ns: &str| -> u32 {
        fake.get(GROUP, "netnamespaces", None, ns)
            .and_then(|v| v["netid"].as_u64())
            .unwrap_or_else(|| panic!("no NetNamespace {ns}")) as u32
    };
    for ns in ["tenant-a", "tenant-b"] {
        fake.put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
            .unwrap();
    }
    assert!(
        wait_until(Duration::from_secs(60), || fake
            .get(GROUP, "netnamespaces", None, "tenant-b")
            .is_some()),
        "no NetNamespace for tenant-b:\n{}",
        plane.controller_log()
    );
    let layout = [
        ("a1", "tenant-a", 1),
        ("a2", "tenant-a", 2),
        ("b1", "tenant-b", 1),
        ("b2", "tenant-b", 2),
        ("g2", "default", 2),
    ];
    for (name, ns, i) in layout {
        fake.put(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"nodeName": node_name(i), "containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    let pods: Vec<_> = layout
        .iter()
        .map(|(name, ns, i)| c.node(*i).pod(ns, name))
        .collect();
    let members = || -> Vec<Member> { matrix::members_of(&layout, &pods, |ns| vnid(ns)) };
    let node_side = NodeSide {
        netns: c.node(1).ovs.netns().to_string(),
        ifname: "tun0".into(),
    };
    let _servers = matrix::serve(&members());
    matrix::assert_isolation(
        "two tenants and default among 5,000 nodes and 5,000 namespaces",
        &members(),
        &node_side,
        PROBE_TIMEOUT,
    );

    // tenant-b joins tenant-a (the change-network annotation, as `oc adm pod-network
    // join-projects` sets it): both nodes re-flow b's pods.
    let va = vnid("tenant-a");
    let mut b = fake.get(GROUP, "netnamespaces", None, "tenant-b").unwrap();
    b["metadata"]["annotations"] =
        json!({"pod.network.openshift.io/multitenant.change-network": "join:tenant-a"});
    let before = fake.requests();
    fake.put(b).unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || vnid("tenant-b") == va
            && c.node(1).flowed_vnid(&pods[2].ip) == Some(va)
            && c.node(2).flowed_vnid(&pods[3].ip) == Some(va)),
        "tenant-b did not join tenant-a (VNID {va}): its NetNamespace has {}, node 1 flows b1 with {:?}, node 2 b2 with {:?}; {} watches open; requests since the annotation:\n{}\n{}",
        vnid("tenant-b"),
        c.node(1).flowed_vnid(&pods[2].ip),
        c.node(2).flowed_vnid(&pods[3].ip),
        fake.watch_count(),
        fake.requests().since(&before),
        plane.controller_log()
    );
    for n in &c.nodes {
        n.datapath_settled();
    }
    matrix::assert_isolation(
        "after tenant-b joined tenant-a, among 5,000 nodes",
        &members(),
        &node_side,
        PROBE_TIMEOUT,
    );

    // A restart among 5,000 nodes changes no flow.
    for i in 1..=2 {
        c.node(i).restart_unchanged();
    }
    matrix::assert_isolation(
        "after both agents restarted, among 5,000 nodes",
        &members(),
        &node_side,
        PROBE_TIMEOUT,
    );
}
