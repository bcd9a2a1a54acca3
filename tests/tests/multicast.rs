//! Multicast per tenant (tables 110, 111 and 120) on real traffic: two nodes of one standalone
//! cluster, pods of three tenants and the global namespace on both, every pod with a UDP socket
//! that joined the group (so the kernel sends IGMP as an application's would), senders using
//! ordinary UDP sockets. Multicast is off by default; `sdnctl multicast NS on` (the NetNamespace
//! annotation `netnamespace.network.openshift.io/multicast-enabled`) turns it on for the
//! namespace's VNID when every namespace of the VNID has it. What each sender is heard by is
//! compared with what must hear it: the same tenant's pods on both nodes and nobody else, through
//! a join (off while the joined namespace lacks the annotation), an isolation, pod ADD and DEL,
//! and an agent restart (whose reconcile changes nothing). The rows are pipeline.md's.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::Duration;

use sdn_tests::cluster::Cluster;
use sdn_tests::harness::wait_until;
use sdn_tests::node::{AgentNode, CniPod, NodeOptions};
use sdn_tests::probe::{multicast_receiver, multicast_send, unique_token, MulticastReceiver};

const GROUP: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 3);
const PORT: u16 = 6464;
const VNID_A: u32 = 20;
const VNID_B: u32 = 21;
const VNID_C: u32 = 22;
/// How long a change may take to reach both agents.
const SETTLE: Duration = Duration::from_secs(10);

/// The pods and their receivers, by name.
struct Pods<'a> {
    pods: BTreeMap<&'static str, CniPod<'a>>,
    ears: BTreeMap<&'static str, MulticastReceiver>,
}

impl<'a> Pods<'a> {
    fn add(&mut self, node: &'a AgentNode, ns: &str, name: &'static str) {
        let pod = node.pod(ns, name);
        self.ears
            .insert(name, multicast_receiver(pod.ns.name(), GROUP, PORT));
        self.pods.insert(name, pod);
    }

    fn remove(&mut self, name: &str) {
        self.ears.remove(name);
        self.pods.remove(name).expect("a pod of the test").delete();
    }

    /// Which pods hear one datagram `from` sends: waits for every pod in `expect`, then a
    /// little longer for anyone else.
    fn heard(&self, from: &str, expect: &[&str]) -> BTreeSet<String> {
        let token = unique_token(&format!("mc-from-{from}"));
        multicast_send(self.pods[from].ns.name(), GROUP, PORT, token.as_bytes(), 3);
        for name in expect {
            self.ears[name].wait_for(&token, Duration::from_secs(5));
        }
        std::thread::sleep(Duration::from_millis(400));
        self.ears
            .iter()
            .filter(|(_, ear)| ear.has(&token))
            .map(|(n, _)| n.to_string())
            .collect()
    }

    #[track_caller]
    fn assert_heard(&self, from: &str, expect: &[&str], when: &str) {
        let want: BTreeSet<String> = expect.iter().map(|s| s.to_string()).collect();
        assert_eq!(self.heard(from, expect), want, "{from} sends ({when})");
    }

    fn ofport(&self, node: &AgentNode, name: &str) -> u32 {
        let port = node.port_of(&self.pods[name].id);
        node.ovs
            .vsctl(&["get", "Interface", &port, "ofport"])
            .trim()
            .parse()
            .expect("an ofport")
    }
}

/// Rows of tables 110, 111 and 120 on `node` (base rows included), as dump-flows prints them.
fn multicast_rows(node: &AgentNode) -> Vec<String> {
    node.flows()
        .into_iter()
        .filter(|l| {
            l.contains("table=110,") || l.contains("table=111,") || l.contains("table=120,")
        })
        .collect()
}

/// The rows pipeline.md gives a multicast-enabled VNID with local ports `ports` (output in
/// port order).
fn tenant_rows(vnid: u32, ports: &[u32]) -> Vec<String> {
    let cookie = format!("cookie=0x5{:015x}", vnid);
    let ports: BTreeSet<u32> = ports.iter().copied().collect();
    let outs: Vec<String> = ports.iter().map(|p| format!("output:{p}")).collect();
    vec![
        format!("{cookie}, table=110, priority=100,reg0={vnid:#x} actions=goto_table:111"),
        format!(
            "{cookie}, table=120, priority=100,reg0={vnid:#x} actions={}",
            outs.join(",")
        ),
    ]
}

/// Moves `ns` to VNID `vnid`, keeping the rest of its NetNamespace (its annotations), as a
/// controller or sdnctl does.
fn move_namespace(c: &Cluster, ns: &str, vnid: u32) {
    use cluster::{ClusterObject, StandaloneSource};
    let mut nn = c.state().net_namespaces[ns].clone();
    nn.net_id = vnid;
    StandaloneSource::write_object(c.state_dir(), &ClusterObject::NetNamespace(nn))
        .unwrap_or_else(|e| panic!("writing NetNamespace {ns}: {e}"));
}

fn wait_rows(c: &Cluster, i: usize, want: &[String], when: &str) {
    let node = c.node(i);
    let ok = wait_until(SETTLE, || {
        let rows = multicast_rows(node);
        want.iter().all(|w| rows.contains(w))
    });
    assert!(
        ok,
        "node {i} ({when}): want {want:#?}\nhas {:#?}",
        multicast_rows(node)
    );
}

fn no_rows(c: &Cluster, i: usize, vnid: u32, when: &str) {
    let node = c.node(i);
    let cookie = format!("cookie=0x5{:015x}", vnid);
    let ok = wait_until(SETTLE, || {
        !multicast_rows(node).iter().any(|r| r.starts_with(&cookie))
    });
    assert!(ok, "node {i} ({when}): {:#?}", multicast_rows(node));
}

#[test]
fn multicast_reaches_the_tenants_pods_on_every_node_and_nobody_else() {
    let c = Cluster::start(2, &NodeOptions::default());
    c.set_netnamespace("mc-a", VNID_A);
    c.set_netnamespace("mc-b", VNID_B);
    c.set_netnamespace("mc-c", VNID_C);
    let (n1, n2) = (c.node(1), c.node(2));
    let mut p = Pods {
        pods: BTreeMap::new(),
        ears: BTreeMap::new(),
    };
    for (node, ns, name) in [
        (n1, "mc-a", "a1"),
        (n1, "mc-a", "a2"),
        (n1, "mc-b", "b1"),
        (n1, "mc-c", "c1"),
        (n1, "default", "g1"),
        (n2, "mc-a", "a3"),
        (n2, "mc-b", "b2"),
        (n2, "mc-c", "c2"),
        (n2, "default", "g2"),
    ] {
        p.add(node, ns, name);
    }

    // Off by default: only the base rows, and nobody hears anybody.
    for i in [1, 2] {
        let rows = multicast_rows(c.node(i));
        assert!(
            rows.iter().all(|r| !r.starts_with("cookie=0x5")),
            "node {i}: {rows:#?}"
        );
    }
    for from in ["a1", "b2", "g1"] {
        p.assert_heard(from, &[], "multicast off");
    }

    // On for mc-a and mc-b: each tenant's pods on both nodes, nobody else.
    let said = n1.sdnctl(&["multicast", "mc-a", "on"]);
    assert_eq!(said, "namespace mc-a: multicast on\n");
    n1.sdnctl(&["multicast", "mc-b", "on"]);
    let a_ports = [p.ofport(n1, "a1"), p.ofport(n1, "a2")];
    wait_rows(&c, 1, &tenant_rows(VNID_A, &a_ports), "mc-a on");
    wait_rows(
        &c,
        2,
        &tenant_rows(VNID_A, &[p.ofport(n2, "a3")]),
        "mc-a on",
    );
    wait_rows(
        &c,
        2,
        &tenant_rows(VNID_B, &[p.ofport(n2, "b2")]),
        "mc-b on",
    );
    // Table 111 copies to the other node's VTEP with the sender's VNID as VNI.
    for (i, other) in [
        (1, sdn_tests::cluster::underlay_ip(2)),
        (2, sdn_tests::cluster::underlay_ip(1)),
    ] {
        let row: Vec<String> = multicast_rows(c.node(i))
            .into_iter()
            .filter(|r| r.contains("table=111,"))
            .collect();
        assert_eq!(
            row,
            [format!("cookie=0x2000000000000000, table=111, priority=100 actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:{other}->tun_dst,output:1,goto_table:120")],
            "node {i}"
        );
    }
    p.assert_heard("a1", &["a2", "a3"], "mc-a on");
    p.assert_heard("a3", &["a1", "a2"], "mc-a on");
    let m = n1.metrics();
    assert_eq!(m.get("sdn_multicast_tenants"), Some(&2.0), "{m:#?}");
    assert_eq!(
        m.get("sdn_flows{table=\"multicast_local\"}"),
        Some(&3.0),
        "base row + mc-a's + mc-b's"
    );
    p.assert_heard("b1", &["b2"], "mc-b on");
    p.assert_heard("c1", &[], "mc-c off");
    p.assert_heard("g2", &[], "default off");
    let listed = n1.sdnctl(&["namespaces"]);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("mc-a ") && l.ends_with(" on")),
        "{listed}"
    );

    // mc-c joins mc-a's VNID without the annotation: multicast is off for the whole VNID.
    move_namespace(&c, "mc-c", VNID_A);
    no_rows(&c, 1, VNID_A, "mc-c joined without the annotation");
    no_rows(&c, 2, VNID_A, "mc-c joined without the annotation");
    p.assert_heard("a1", &[], "joined, mc-c not annotated");
    let said = n1.sdnctl(&["multicast", "mc-a", "on"]);
    assert!(
        said.contains(
            "(unchanged); not in effect: VNID 20 is shared with mc-c, which is not annotated"
        ),
        "{said}"
    );
    // With the annotation on mc-c too, the joined tenant is one multicast group.
    n1.sdnctl(&["multicast", "mc-c", "on"]);
    let mut joined = vec![p.ofport(n1, "a1"), p.ofport(n1, "a2"), p.ofport(n1, "c1")];
    joined.sort();
    wait_rows(
        &c,
        1,
        &tenant_rows(VNID_A, &joined),
        "joined, both annotated",
    );
    p.assert_heard("a1", &["a2", "a3", "c1", "c2"], "joined, both annotated");
    p.assert_heard("c2", &["a1", "a2", "a3", "c1"], "joined, both annotated");
    p.assert_heard("b2", &["b1"], "mc-b unaffected by the join");

    // Isolated again (its annotation kept): two tenants, each its own group.
    move_namespace(&c, "mc-c", VNID_C);
    wait_rows(&c, 1, &tenant_rows(VNID_A, &a_ports), "mc-c isolated");
    wait_rows(
        &c,
        1,
        &tenant_rows(VNID_C, &[p.ofport(n1, "c1")]),
        "mc-c isolated",
    );
    p.assert_heard("a1", &["a2", "a3"], "mc-c isolated");
    p.assert_heard("c1", &["c2"], "mc-c isolated");

    // Pod ADD and DEL change the row in their own bundles.
    p.add(n2, "mc-a", "a4");
    let mut n2_a = vec![p.ofport(n2, "a3"), p.ofport(n2, "a4")];
    n2_a.sort();
    wait_rows(&c, 2, &tenant_rows(VNID_A, &n2_a), "a4 added");
    p.assert_heard("a1", &["a2", "a3", "a4"], "a4 added");
    p.remove("a2");
    wait_rows(
        &c,
        1,
        &tenant_rows(VNID_A, &[p.ofport(n1, "a1")]),
        "a2 deleted",
    );
    p.assert_heard("a4", &["a1", "a3"], "a2 deleted");

    // An agent restart keeps the rows (its reconcile changes nothing) and the traffic.
    let before = multicast_rows(n1);
    n1.stop_agent(libc::SIGTERM);
    n1.start_agent();
    let reconciled = n1.last_reconcile();
    assert!(
        reconciled.contains(" added=0 ") && reconciled.contains(" deleted=0 "),
        "the restart's reconcile changed flows: {reconciled}"
    );
    assert_eq!(multicast_rows(n1), before);
    p.assert_heard("a3", &["a1", "a4"], "after node-1's agent restarted");
    p.assert_heard("b1", &["b2"], "after node-1's agent restarted");

    // Off again: the rows go on both nodes and nobody hears mc-a.
    n2.sdnctl(&["multicast", "mc-a", "off"]);
    no_rows(&c, 1, VNID_A, "mc-a off");
    no_rows(&c, 2, VNID_A, "mc-a off");
    p.assert_heard("a1", &[], "mc-a off");
    p.assert_heard("c2", &["c1"], "mc-c still on");
}
