//! Kubernetes mode, several nodes, end to end (issue 5): three node namespaces, each with its
//! own OVS (userspace) and the real `sdn-agent` in Kubernetes mode, joined by an underlay; one
//! fake API server and the real `sdn-agent controller` on the hub (`Cluster::start_kubernetes`).
//!
//! The controller allocates every node's HostSubnet and every namespace's NetNamespace; each
//! agent learns the cluster from the API and installs the remote-node rows of the two others;
//! pods on every node (ADD through the real shim) see the isolation matrix across nodes; a pod
//! ADD whose NetNamespace and HostSubnet are known asks the API server nothing; the
//! change-network annotation re-flows the namespace on every node; a deleted Node's rows go
//! everywhere.

use std::time::Duration;

use sdn_tests::cluster::{node_name, Cluster, KubeControlPlane};
use sdn_tests::harness::{wait_until, workspace_bin};
use sdn_tests::matrix::{self, Member, NodeSide};
use sdn_tests::node::{AgentNode, CniPod, NodeOptions};
use sdn_tests::probe;
use serde_json::{json, Value};

const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);
const SETTLE: Duration = Duration::from_secs(15);
const GROUP: &str = "network.openshift.io";

fn netns_obj(plane: &KubeControlPlane, ns: &str) -> Option<Value> {
    plane.fake.get(GROUP, "netnamespaces", None, ns)
}

fn vnid(plane: &KubeControlPlane, ns: &str) -> u32 {
    netns_obj(plane, ns)
        .and_then(|v| v["netid"].as_u64())
        .unwrap_or_else(|| panic!("no NetNamespace {ns}")) as u32
}

/// Remote-node rows (tables 10, 50, 90) of `node` naming `host_ip`.
fn rows_for(node: &AgentNode, host_ip: &str) -> usize {
    node.ovs
        .ofctl(&["--no-stats", "dump-flows", "br0"])
        .lines()
        .filter(|l| {
            l.contains(&format!("tun_src={host_ip} "))
                || (l.contains(&format!("set_field:{host_ip}->tun_dst"))
                    && !l.contains("table=111"))
        })
        .count()
}

fn pod_object(ns: &str, name: &str, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}})
}

/// API requests other than watches (the long-lived watch streams are not per-pod work).
fn non_watch_requests(r: &sdn_tests::fakeapi::Requests) -> u64 {
    // The controller's Lease renewals (every few seconds, whatever the pods do) are not the
    // agents' requests: a slow run lets one fall into the window.
    ["get", "list", "create", "update", "patch", "delete"]
        .iter()
        .map(|v| r.count(v, "/") - r.count(v, "/apis/coordination.k8s.io/"))
        .sum()
}

#[test]
fn kubernetes_mode_on_three_nodes() {
    let (c, plane) = Cluster::start_kubernetes(3, &NodeOptions::default());
    let fake = &plane.fake;

    // The controller allocated a HostSubnet per node (distinct subnets, hostIP = InternalIP).
    let mut subnets = Vec::new();
    for i in 1..=3 {
        let hs = fake
            .get(GROUP, "hostsubnets", None, &node_name(i))
            .unwrap_or_else(|| panic!("no HostSubnet for node-{i}"));
        assert_eq!(hs["hostIP"], sdn_tests::cluster::underlay_ip(i).to_string());
        subnets.push(hs["subnet"].as_str().unwrap().to_string());
    }
    subnets.sort();
    subnets.dedup();
    assert_eq!(subnets.len(), 3, "{subnets:?}");
    // Every agent has the remote-node rows of the two others (3 rows each).
    let ok = wait_until(SETTLE, || {
        (1..=3).all(|i| {
            (1..=3)
                .filter(|j| *j != i)
                .all(|j| rows_for(c.node(i), &sdn_tests::cluster::underlay_ip(j).to_string()) == 3)
        })
    });
    assert!(ok, "remote-node rows did not appear:\n{}", c.node(1).log());

    // Tenants: namespaces in the API; the controller gives each a NetNamespace.
    for ns in ["tenant-a", "tenant-b"] {
        fake.put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
            .unwrap();
    }
    assert!(
        wait_until(SETTLE, || netns_obj(&plane, "tenant-b").is_some()),
        "no NetNamespaces:\n{}",
        plane.controller_log()
    );
    let (va, vb) = (vnid(&plane, "tenant-a"), vnid(&plane, "tenant-b"));
    assert!(va >= 10 && vb >= 10 && va != vb);
    assert_eq!(vnid(&plane, "default"), 0);

    // Pods: the Pod objects exist (as the scheduler would have them), then the runtime's ADDs.
    let layout = [
        ("a1", "tenant-a", 1),
        ("a2", "tenant-a", 2),
        ("b1", "tenant-b", 1),
        ("b3", "tenant-b", 3),
        ("g2", "default", 2),
    ];
    for (name, ns, i) in layout {
        fake.put(pod_object(ns, name, &node_name(i))).unwrap();
    }
    // Give the agents' pod caches the objects before the ADDs (they watch).
    std::thread::sleep(Duration::from_millis(500));
    let before = fake.requests();
    let pods: Vec<CniPod<'_>> = layout
        .iter()
        .map(|(name, ns, i)| c.node(*i).pod(ns, name))
        .collect();
    let during = fake.requests().since(&before);
    eprintln!(
        "{} pod ADDs over 3 nodes: {} API requests besides the watches",
        pods.len(),
        non_watch_requests(&during)
    );
    assert_eq!(
        non_watch_requests(&during),
        0,
        "pod ADDs asked the API server:\n{during}"
    );

    let members = |plane: &KubeControlPlane| -> Vec<Member> {
        matrix::members_of(&layout, &pods, |ns| vnid(plane, ns))
    };
    let node_side = NodeSide {
        netns: c.node(1).ovs.netns().to_string(),
        ifname: "tun0".into(),
    };
    let _servers = matrix::serve(&members(&plane));
    matrix::assert_isolation(
        "Kubernetes mode, 3 nodes, two tenants and default",
        &members(&plane),
        &node_side,
        PROBE_TIMEOUT,
    );

    // sdnctl in Kubernetes mode: the agent lists the NetNamespaces it sees (from the API's
    // watch, not a state directory), with its local pods.
    let listed = std::process::Command::new(workspace_bin("sdnctl"))
        .arg("--api-socket")
        .arg(c.node(1).api_socket())
        .args(["--json", "namespaces"])
        .env_remove("SDN_CONFIG")
        .output()
        .expect("sdnctl namespaces");
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    for ns in ["tenant-a", "tenant-b", "default"] {
        let row = listed["namespaces"]
            .as_array()
            .and_then(|a| a.iter().find(|r| r["name"] == ns))
            .unwrap_or_else(|| panic!("{ns} not listed: {listed}"));
        assert_eq!(row["netid"], vnid(&plane, ns), "{listed}");
    }

    // An EgressNetworkPolicy through the API: every node installs tenant-a's table-100 rows
    // (its VNID, the rules in order); deleted, they go.
    fake.put(json!({
        "apiVersion": "network.openshift.io/v1",
        "kind": "EgressNetworkPolicy",
        "metadata": {"name": "default", "namespace": "tenant-a"},
        "spec": {"egress": [
            {"type": "Allow", "to": {"cidrSelector": "203.0.113.0/24"}},
            {"type": "Deny", "to": {"cidrSelector": "0.0.0.0/0"}},
        ]},
    }))
    .unwrap();
    let egress_rows = |n: &AgentNode| -> Vec<String> {
        n.flows()
            .into_iter()
            .filter(|f| f.contains("table=100,") && !f.contains("priority=0 "))
            .collect()
    };
    let want = [
        format!(
            "priority=2,ip,reg0={:#x},nw_dst=203.0.113.0/24 actions=goto_table:101",
            va
        ),
        format!("priority=1,ip,reg0={:#x} actions=drop", va),
    ];
    let ok = wait_until(SETTLE, || {
        c.nodes.iter().all(|n| {
            let rows = egress_rows(n);
            rows.len() == 2
                && want
                    .iter()
                    .all(|w| rows.iter().any(|r| r.contains(w.as_str())))
        })
    });
    assert!(
        ok,
        "tenant-a's egress firewall not on every node: {:#?}",
        c.nodes.iter().map(egress_rows).collect::<Vec<_>>()
    );
    // One the agent cannot apply (a malformed destination; the fake does not validate) fails
    // closed: tenant-a's external traffic is dropped on every node (the drop-all row alone),
    // never left unfiltered.
    fake.put(json!({
        "apiVersion": "network.openshift.io/v1",
        "kind": "EgressNetworkPolicy",
        "metadata": {"name": "default", "namespace": "tenant-a"},
        "spec": {"egress": [
            {"type": "Deny", "to": {"cidrSelector": "2001:db8:::/32"}},
            {"type": "Allow", "to": {"cidrSelector": "0.0.0.0/0"}},
        ]},
    }))
    .unwrap();
    let drop_all = format!("priority=1,reg0={:#x} actions=drop", va);
    let ok = wait_until(SETTLE, || {
        c.nodes.iter().all(|n| {
            let rows = egress_rows(n);
            rows.len() == 1 && rows[0].contains(drop_all.as_str())
        })
    });
    assert!(
        ok,
        "a policy that cannot be applied did not drop tenant-a's external traffic: {:#?}",
        c.nodes.iter().map(egress_rows).collect::<Vec<_>>()
    );
    assert!(c.nodes[0].log().lines().any(|l| l.contains("ERROR")
        && l.contains("EgressNetworkPolicy cannot be applied: tenant-a/default (invalid:")));
    fake.delete(
        "network.openshift.io",
        "egressnetworkpolicies",
        Some("tenant-a"),
        "default",
    );
    assert!(wait_until(SETTLE, || c
        .nodes
        .iter()
        .all(|n| egress_rows(n).is_empty())));

    // Multicast through the API (`oc annotate netnamespace tenant-a
    // netnamespace.network.openshift.io/multicast-enabled=true`): tenant-a's pods on nodes 1 and
    // 2 hear each other, nobody else hears them; the annotation removed, the rows go.
    let group = std::net::Ipv4Addr::new(239, 7, 7, 7);
    let ears: Vec<_> = pods
        .iter()
        .map(|p| probe::multicast_receiver(p.ns.name(), group, 7070))
        .collect();
    let set_multicast = |on: bool| {
        let mut a = netns_obj(&plane, "tenant-a").unwrap();
        a["metadata"]["annotations"] = if on {
            json!({"netnamespace.network.openshift.io/multicast-enabled": "true"})
        } else {
            json!({})
        };
        fake.put(a).unwrap();
    };
    let mc_rows = |n: &AgentNode| -> usize {
        n.flows()
            .iter()
            .filter(|f| f.contains(&format!("table=120, priority=100,reg0={va:#x} ")))
            .count()
    };
    set_multicast(true);
    assert!(
        wait_until(SETTLE, || mc_rows(c.node(1)) == 1
            && mc_rows(c.node(2)) == 1),
        "tenant-a's multicast rows: {:#?}",
        c.nodes.iter().map(|n| n.flows()).collect::<Vec<_>>()
    );
    assert_eq!(mc_rows(c.node(3)), 0, "node 3 has no tenant-a pod");
    let token = probe::unique_token("kube-mc");
    probe::multicast_send(pods[0].ns.name(), group, 7070, token.as_bytes(), 3);
    assert!(
        ears[1].wait_for(&token, Duration::from_secs(5)),
        "a2 on node 2 hears a1"
    );
    std::thread::sleep(Duration::from_millis(400));
    let heard: Vec<&str> = layout
        .iter()
        .zip(&ears)
        .filter(|(_, e)| e.has(&token))
        .map(|((name, _, _), _)| *name)
        .collect();
    assert_eq!(heard, ["a2"], "who heard tenant-a's a1");
    set_multicast(false);
    assert!(wait_until(SETTLE, || c
        .nodes
        .iter()
        .all(|n| mc_rows(n) == 0)));
    drop(ears);

    // Egress IPs assigned by the controller from egressCIDRs (node-2 and node-3 may host
    // 192.168.77.96/28): tenant-a's pods leave as .100 seen from an external host on the
    // underlay; its hosting node stops being Ready, the controller moves the IP to the other
    // node, which takes the address (with a gratuitous ARP), and the traffic follows.
    c.hub_exec(&["ip", "addr", "add", "192.168.77.200/24", "dev", "hub0"]);
    let _whoami = probe::tcp_whoami_server(c.hub_netns(), 8181);
    let ext = std::net::SocketAddrV4::new(std::net::Ipv4Addr::new(192, 168, 77, 200), 8181);
    let eip: std::net::Ipv4Addr = "192.168.77.100".parse().unwrap();
    let a1_seen = || probe::tcp_whoami(pods[0].ns.name(), ext, Duration::from_secs(1));
    let seen_as =
        |want: std::net::Ipv4Addr| wait_until(SETTLE, || (0..3).all(|_| a1_seen() == Some(want)));
    for n in ["node-2", "node-3"] {
        let mut hs = fake.get(GROUP, "hostsubnets", None, n).unwrap();
        hs["egressCIDRs"] = json!(["192.168.77.96/28"]);
        fake.put(hs).unwrap();
    }
    let mut a = netns_obj(&plane, "tenant-a").unwrap();
    a["egressIPs"] = json!([eip.to_string()]);
    fake.put(a).unwrap();
    let host_of = || -> Option<String> {
        ["node-2", "node-3"]
            .into_iter()
            .find(|n| {
                fake.get(GROUP, "hostsubnets", None, n)
                    .is_some_and(|h| h["egressIPs"] == json!([eip.to_string()]))
            })
            .map(String::from)
    };
    assert!(
        wait_until(SETTLE, || host_of().is_some()),
        "the controller assigned no node:\n{}",
        plane.controller_log()
    );
    let first = host_of().unwrap();
    assert!(seen_as(eip), "tenant-a leaves as {eip}: {:?}", a1_seen());
    let mut node = fake.get("", "nodes", None, &first).unwrap();
    node["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
    fake.put(node).unwrap();
    assert!(
        wait_until(SETTLE, || host_of().is_some_and(|h| h != first)),
        "the IP stayed on the unready {first}:\n{}",
        plane.controller_log()
    );
    let second = host_of().unwrap();
    assert!(seen_as(eip), "after the move to {second}: {:?}", a1_seen());
    let on = |n: &str| {
        c.node(n.trim_start_matches("node-").parse().unwrap())
            .ovs
            .exec_in_netns(&["ip", "-4", "addr", "show", "dev", "br-phy"])
            .unwrap()
            .contains("inet 192.168.77.100/24")
    };
    assert!(
        wait_until(SETTLE, || on(&second) && !on(&first)),
        "the address did not move from {first} to {second}"
    );
    assert!(seen_as(eip), "after {first} released it: {:?}", a1_seen());
    let mut a = netns_obj(&plane, "tenant-a").unwrap();
    a["egressIPs"] = json!([]);
    fake.put(a).unwrap();
    assert!(
        seen_as(sdn_tests::cluster::underlay_ip(1)),
        "without egress IPs: node-1's address"
    );

    // The change-network annotation (as `oc adm pod-network join-projects` sets it): the
    // controller applies and clears it, every node re-flows tenant-b.
    let mut b = netns_obj(&plane, "tenant-b").unwrap();
    b["metadata"]["annotations"] =
        json!({"pod.network.openshift.io/multitenant.change-network": "join:tenant-a"});
    fake.put(b).unwrap();
    let t0 = std::time::Instant::now();
    let ok = wait_until(SETTLE, || {
        vnid(&plane, "tenant-b") == va
            && c.node(1).flowed_vnid(&pods[2].ip) == Some(va)
            && c.node(3).flowed_vnid(&pods[3].ip) == Some(va)
    });
    assert!(
        ok,
        "tenant-b did not join tenant-a: netid {}, flows node-1 {:?}, node-3 {:?}\n{}",
        vnid(&plane, "tenant-b"),
        c.node(1).flowed_vnid(&pods[2].ip),
        c.node(3).flowed_vnid(&pods[3].ip),
        plane.controller_log()
    );
    eprintln!(
        "change-network annotation to re-flowed on nodes 1 and 3: {} ms",
        t0.elapsed().as_millis()
    );
    for n in &c.nodes {
        n.datapath_settled();
    }
    matrix::assert_isolation(
        "after tenant-b joined tenant-a",
        &members(&plane),
        &node_side,
        PROBE_TIMEOUT,
    );

    // A Node goes: the controller deletes its HostSubnet and the other nodes drop its rows.
    let ip3 = sdn_tests::cluster::underlay_ip(3).to_string();
    fake.delete("", "nodes", None, &node_name(3));
    let t0 = std::time::Instant::now();
    let ok = wait_until(SETTLE, || {
        fake.get(GROUP, "hostsubnets", None, &node_name(3))
            .is_none()
            && rows_for(c.node(1), &ip3) == 0
            && rows_for(c.node(2), &ip3) == 0
    });
    assert!(
        ok,
        "node-3's rows stayed: node-1 {}, node-2 {}",
        rows_for(c.node(1), &ip3),
        rows_for(c.node(2), &ip3)
    );
    eprintln!(
        "Node deleted to its rows gone on nodes 1 and 2: {} ms",
        t0.elapsed().as_millis()
    );
    assert!(
        !pods[0].ping(&pods[3].ip, 1),
        "a pod still reaches a pod of the deleted node"
    );
    assert!(pods[0].ping(&pods[1].ip, 3), "node-1 to node-2 broke");
}
