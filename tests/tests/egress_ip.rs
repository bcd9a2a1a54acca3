//! Egress IPs on real traffic: three nodes of one standalone cluster and an "external" host on
//! their underlay (192.168.77.200 on the hub, a TCP server that answers each connection with the
//! source address it sees). Tenant eg-a asks for 192.168.77.100 (hosted by node-2), eg-c for
//! .101 (node-2) and .102 (node-3), eg-b for none. What the external host sees: eg-a's pods on
//! node-1 and node-2 as .100 (over VXLAN to node-2, and locally), eg-b's as its node's own
//! address (masquerade), eg-c's as .101 and .102 (load-balanced). A hosting node cut off the
//! underlay: eg-c fails over to the other IP within seconds (measured and printed), eg-a's
//! traffic is dropped rather than leaving with node-1's address, and both come back with the
//! node. An IP claimed by two tenants drops both. Agent restarts (of the sending and the hosting
//! node) change no flow. Rows and host rules as pipeline.md and the iptables module say.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use cluster::{ClusterObject, NetNamespace, StandaloneSource};
use sdn_tests::cluster::{underlay_ip, Cluster};
use sdn_tests::harness::wait_until;
use sdn_tests::node::{AgentNode, CniPod, NodeOptions};
use sdn_tests::probe::{tcp_whoami, tcp_whoami_server};

const EXT: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 200);
const PORT: u16 = 8181;
const IP_A: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 100);
const IP_C2: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 101);
const IP_C3: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 102);
const SETTLE: Duration = Duration::from_secs(15);

fn set_ns(c: &Cluster, name: &str, vnid: u32, ips: &[Ipv4Addr]) {
    let mut nn = NetNamespace::new(name, vnid);
    nn.egress_ips = ips.iter().map(Ipv4Addr::to_string).collect();
    StandaloneSource::write_object(c.state_dir(), &ClusterObject::NetNamespace(nn))
        .unwrap_or_else(|e| panic!("writing NetNamespace {name}: {e}"));
}

fn host_ips(c: &Cluster, node: &str, ips: &[Ipv4Addr]) {
    let mut hs = c.host_subnet(node);
    hs.egress_ips = ips.iter().map(Ipv4Addr::to_string).collect();
    c.write_host_subnet(&hs);
}

/// The source the external host sees for one connection from `pod` (None: no answer in 1 s).
fn seen(pod: &CniPod<'_>) -> Option<Ipv4Addr> {
    tcp_whoami(
        pod.ns.name(),
        SocketAddrV4::new(EXT, PORT),
        Duration::from_secs(1),
    )
}

/// Waits until `pod`'s connections are seen as `want` (three in a row).
#[track_caller]
fn wait_seen(pod: &CniPod<'_>, want: Option<Ipv4Addr>, what: &str) -> Duration {
    super::egress_ip6::wait_seen_within(SETTLE, pod, EXT.into(), want.map(Into::into), what)
}

/// The set of sources `pod`'s next `n` connections are seen with.
fn seen_set(pod: &CniPod<'_>, n: usize) -> BTreeSet<Option<Ipv4Addr>> {
    (0..n).map(|_| seen(pod)).collect()
}

pub(crate) fn table_101(node: &AgentNode) -> Vec<String> {
    node.flows()
        .into_iter()
        .filter(|l| l.contains("table=101,"))
        .map(|l| l.split(", ").skip(1).collect::<Vec<_>>().join(", "))
        .collect()
}

fn groups(node: &AgentNode) -> String {
    node.ovs.ofctl(&["dump-groups", "br0"])
}

/// `ip -4 addr show dev br-phy` in node `node`'s namespace.
fn underlay_addrs(node: &AgentNode) -> String {
    node.ovs
        .exec_in_netns(&["ip", "-4", "addr", "show", "dev", "br-phy"])
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `sdnctl egress-ips` against node's agent.
pub(crate) fn sdnctl_egress_ips(node: &AgentNode) -> String {
    let out = node.sdnctl_api(&["egress-ips"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[track_caller]
fn last_reconcile_unchanged(node: &AgentNode) {
    let log = node.log();
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("br0 reconciled"))
        .unwrap_or_default();
    assert!(
        line.contains(" added=0 ") && line.contains(" groups=0 ") && line.contains(" deleted=0 "),
        "the restart's reconcile changed br0: {line}"
    );
}

#[test]
fn egress_ips_set_the_source_fail_over_and_never_leak_the_node_address() {
    let c = Cluster::start(3, &NodeOptions::default());
    let (n1, n2, n3) = (c.node(1), c.node(2), c.node(3));
    // The external host.
    c.hub_exec(&["ip", "addr", "add", &format!("{EXT}/24"), "dev", "hub0"]);
    let _server = tcp_whoami_server(c.hub_netns(), PORT);
    set_ns(&c, "eg-a", 30, &[IP_A]);
    set_ns(&c, "eg-b", 31, &[]);
    set_ns(&c, "eg-c", 32, &[IP_C2, IP_C3]);
    host_ips(&c, "node-2", &[IP_A, IP_C2]);
    host_ips(&c, "node-3", &[IP_C3]);
    let a1 = n1.pod("eg-a", "a1");
    let a2 = n2.pod("eg-a", "a2");
    let b1 = n1.pod("eg-b", "b1");
    let c1 = n1.pod("eg-c", "c1");

    // What the external host sees.
    wait_seen(&a1, Some(IP_A), "eg-a from node-1 (IP on node-2)");
    wait_seen(&a2, Some(IP_A), "eg-a from node-2 (IP local)");
    wait_seen(
        &b1,
        Some(underlay_ip(1)),
        "eg-b (no egress IP): node-1's address",
    );
    let both: BTreeSet<_> = [Some(IP_C2), Some(IP_C3)].into();
    assert!(
        wait_until(SETTLE, || seen_set(&c1, 12) == both),
        "eg-c balances over .101 and .102: {:?}",
        seen_set(&c1, 12)
    );

    // Rows (pipeline.md "Egress IPs") and groups.
    let t = table_101(n1);
    for want in [
        "table=101, priority=150,ct_state=+rpl+trk,ip actions=output:2",
        "table=101, priority=100,ip,reg0=0x1e actions=ct(commit),group:30",
        "table=101, priority=100,ip,reg0=0x20 actions=ct(commit),group:32",
        "table=101, priority=0 actions=output:2",
    ] {
        assert!(t.iter().any(|l| l == want), "node-1 lacks {want}: {t:#?}");
    }
    let g = groups(n1);
    assert!(
        g.contains("group_id=32,type=select,bucket=weight:100,actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:192.168.77.12->tun_dst,output:1,bucket=weight:100,actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:192.168.77.13->tun_dst,output:1"),
        "{g}"
    );
    assert!(table_101(n2)
        .iter()
        .any(|l| l == "table=101, priority=100,ip,reg0=0x1e actions=group:30"));
    let g2 = groups(n2);
    assert!(
        g2.contains("group_id=30,type=select,bucket=weight:100,actions=set_field:0a:59:00:00:00:1e->eth_src,set_field:0a:58:0a:80:02:01->eth_dst,output:2")
            || g2.contains("group_id=30,type=select,bucket=weight:100,actions=set_field:0a:59:00:00:00:1e->eth_src"),
        "{g2}"
    );
    // node-2 holds both of its IPs, labelled, with the mark and SNAT rules.
    let addrs = underlay_addrs(n2);
    for ip in [IP_A, IP_C2] {
        assert!(
            addrs.contains(&format!("inet {ip}/24")) && addrs.contains("br-phy:eip"),
            "{addrs}"
        );
    }
    assert!(!underlay_addrs(n1).contains("eip"));
    let nat = n2
        .ovs
        .exec_in_netns(&["iptables", "-t", "nat", "-S", "SDN-POSTROUTING"])
        .unwrap();
    assert!(
        nat.contains("-m mark --mark 0x1e") && nat.contains("--to-source 192.168.77.100"),
        "{nat}"
    );

    // What sdnctl and the metrics say.
    let said = sdnctl_egress_ips(n1);
    for want in [
        "VNID 30 (eg-a): over VXLAN to node-2 (192.168.77.12)\n  192.168.77.100 on node-2 (in use)\n",
        "VNID 31",
        "VNID 32 (eg-c): over VXLAN to node-2 (192.168.77.12), node-3 (192.168.77.13)\n",
        "node node-2: online\nnode node-3: online\n",
    ] {
        if want == "VNID 31" {
            assert!(!said.contains(want), "eg-b has no egress IPs:\n{said}");
        } else {
            assert!(said.contains(want), "{want:?} not in:\n{said}");
        }
    }
    let said = sdnctl_egress_ips(n2);
    assert!(
        said.contains("VNID 30 (eg-a): local (this node's kernel SNATs it)")
            && said
                .contains("held on this node: 192.168.77.100 (VNID 30), 192.168.77.101 (VNID 32)"),
        "{said}"
    );
    // sdnctl trace says where the packet leaves and with which source.
    let t = n1.trace("eg-a/a1", &EXT.to_string(), "tcp/8181", None);
    let words = t["verdict"].as_str().unwrap_or_default();
    assert!(
        words.contains("sent over VXLAN to node-2 (192.168.77.12) (VNI 30, group 30 picks one by a hash of the connection), which holds an egress IP of VNID 30 (eg-a): the packet leaves the cluster there with its egress IP 192.168.77.100 on node-2 as source"),
        "{t:#}"
    );
    let t = n2.trace("eg-a/a2", &EXT.to_string(), "tcp/8181", None);
    let words = t["verdict"].as_str().unwrap_or_default();
    assert!(
        words.contains("this node SNATs it to its egress IP 192.168.77.100 on node-2"),
        "{t:#}"
    );
    let m = n1.metrics();
    assert_eq!(
        m.get("sdn_egress_ip_tenants{route=\"remote\"}"),
        Some(&2.0),
        "{m:#?}"
    );
    assert_eq!(n2.metrics().get("sdn_egress_ips_held"), Some(&2.0));

    // node-3 cut off the underlay: eg-c fails over to .101 alone.
    let h3 = c.hub_port(3);
    c.hub_exec(&["ip", "link", "set", &h3, "down"]);
    let cut = Instant::now();
    // Failed over when node-1's group for eg-c has node-2's bucket only.
    assert!(
        wait_until(SETTLE, || !groups(n1).contains("192.168.77.13->tun_dst")),
        "{}",
        groups(n1)
    );
    let took = cut.elapsed();
    // Only .101 now: no connection leaves by .102 or the node's address. One may find no
    // answer within its second on a loaded machine (the whole suite at once), right after the
    // switch-over; that is not a leak.
    let after = seen_set(&c1, 10);
    assert!(
        after.contains(&Some(IP_C2)) && after.iter().all(|s| s.is_none() || *s == Some(IP_C2)),
        "only .101 now: {after:?}"
    );
    eprintln!(
        "egress IP failover: node-3 unreachable -> eg-c only through node-2 after {:.1} s",
        took.as_secs_f64()
    );
    assert!(n1.log().contains("egress IP node is offline"));
    c.hub_exec(&["ip", "link", "set", &h3, "up"]);
    let back = Instant::now();
    assert!(
        wait_until(SETTLE, || seen_set(&c1, 12) == both),
        "eg-c uses node-3 again"
    );
    eprintln!(
        "egress IP failback: node-3 reachable again -> both IPs in use after {:.1} s (offline for {:.1} s)",
        back.elapsed().as_secs_f64(),
        (back - cut).as_secs_f64()
    );

    // node-2 cut off: eg-a's one IP is gone, so its traffic is dropped, never masqueraded.
    let h2 = c.hub_port(2);
    c.hub_exec(&["ip", "link", "set", &h2, "down"]);
    assert!(
        wait_until(SETTLE, || !groups(n1).contains("192.168.77.12->tun_dst")),
        "{}",
        groups(n1)
    );
    // A probe in flight while br0 changes the group may go unanswered (dropped, never
    // masqueraded); no probe may leave with another source, and the next ones all use node-3.
    let c_seen = seen_set(&c1, 6);
    assert!(
        c_seen.iter().all(|s| s.is_none() || *s == Some(IP_C3)),
        "eg-c through node-3 alone: {c_seen:?}"
    );
    assert!(
        wait_until(SETTLE, || seen_set(&c1, 6) == [Some(IP_C3)].into()),
        "eg-c through node-3 alone"
    );
    let a_seen = seen_set(&a1, 6);
    assert_eq!(a_seen, [None].into(), "eg-a leaked: {a_seen:?}");
    let t = table_101(n1);
    assert!(
        t.iter()
            .any(|l| l == "table=101, priority=100,reg0=0x1e actions=drop"),
        "{t:#?}"
    );
    wait_seen(&b1, Some(underlay_ip(1)), "eg-b unaffected");
    let said = sdnctl_egress_ips(n1);
    assert!(
        said.contains("VNID 30 (eg-a): dropped\n  none of its egress IPs (192.168.77.100) is usable: 192.168.77.100: node node-2 is offline; dropping its external traffic\n")
            && said.contains("node node-2: offline"),
        "{said}"
    );
    assert!(
        n1.metrics()
            .get("sdn_egress_node_changes_total{change=\"offline\"}")
            >= Some(&2.0)
    );
    let t = n1.trace("eg-a/a1", &EXT.to_string(), "tcp/8181", None);
    assert_eq!(t["decided_in"], "egress_routing", "{t:#}");
    assert!(
        t["verdict"]
            .as_str()
            .unwrap_or_default()
            .contains("node node-2 is offline"),
        "{t:#}"
    );
    c.hub_exec(&["ip", "link", "set", &h2, "up"]);
    wait_seen(&a1, Some(IP_A), "eg-a after node-2 came back");

    // Restarts: the sending node, then the hosting node; nothing on br0 changes.
    n1.stop_agent(libc::SIGTERM);
    n1.start_agent();
    last_reconcile_unchanged(n1);
    wait_seen(&a1, Some(IP_A), "eg-a after node-1's agent restarted");
    n2.stop_agent(libc::SIGTERM);
    n2.start_agent();
    last_reconcile_unchanged(n2);
    wait_seen(
        &a2,
        Some(IP_A),
        "eg-a on node-2 after node-2's agent restarted",
    );
    wait_seen(
        &a1,
        Some(IP_A),
        "eg-a on node-1 after node-2's agent restarted",
    );
    assert!(underlay_addrs(n2).contains(&format!("inet {IP_A}/24")));
    // An egress address removed behind the agent's back comes back with the next repair (every
    // 30 s, or at once after flow drift, which this provokes).
    n2.ovs
        .exec_in_netns(&["ip", "addr", "del", &format!("{IP_A}/24"), "dev", "br-phy"])
        .unwrap();
    n2.ovs.ofctl(&["del-flows", "br0", "table=253"]);
    assert!(
        wait_until(SETTLE, || underlay_addrs(n2)
            .contains(&format!("inet {IP_A}/24"))),
        "{}",
        underlay_addrs(n2)
    );
    wait_seen(&a1, Some(IP_A), "eg-a after its address was put back");

    // Claimed by two tenants: both dropped; released: back.
    set_ns(&c, "eg-b", 31, &[IP_A]);
    wait_seen(&a1, None, "eg-a with its IP claimed twice");
    wait_seen(&b1, None, "eg-b with an IP claimed twice");
    set_ns(&c, "eg-b", 31, &[]);
    wait_seen(&a1, Some(IP_A), "eg-a after the double claim ended");
    wait_seen(
        &b1,
        Some(underlay_ip(1)),
        "eg-b after the double claim ended",
    );

    // An IP its node cannot hold (outside the node's underlay network): that node drops the
    // tenant's traffic and says why; nothing leaves with another address.
    let bad = Ipv4Addr::new(10, 99, 0, 5);
    set_ns(&c, "eg-d", 33, &[bad]);
    host_ips(&c, "node-3", &[IP_C3, bad]);
    let d1 = n1.pod("eg-d", "d1");
    wait_seen(&d1, None, "eg-d, whose IP node-3 cannot hold");
    assert!(
        wait_until(SETTLE, || {
            sdnctl_egress_ips(n3).contains(
            "10.99.0.5 on node-3 (not held here: it is not in the network 192.168.77.0/24 of br-phy"
        )
        }),
        "{}",
        sdnctl_egress_ips(n3)
    );
    assert!(n3.log().contains("cannot hold egress IP on this node"));
    assert!(!underlay_addrs(n3).contains("10.99.0.5"));

    // eg-a gives its IP up: its traffic is masqueraded again and node-2 releases the address.
    set_ns(&c, "eg-a", 30, &[]);
    wait_seen(&a1, Some(underlay_ip(1)), "eg-a without egress IPs");
    host_ips(&c, "node-2", &[IP_C2]);
    assert!(
        wait_until(SETTLE, || !underlay_addrs(n2)
            .contains(&format!("inet {IP_A}/"))),
        "{}",
        underlay_addrs(n2)
    );
    let nat = n2
        .ovs
        .exec_in_netns(&["iptables", "-t", "nat", "-S", "SDN-POSTROUTING"])
        .unwrap();
    assert!(!nat.contains("192.168.77.100"), "{nat}");

    // Taken off node-2 while its agent is down: the restarted agent removes the stale address.
    n2.stop_agent(libc::SIGTERM);
    host_ips(&c, "node-2", &[]);
    n2.start_agent();
    assert!(
        wait_until(SETTLE, || !underlay_addrs(n2)
            .contains(&format!("inet {IP_C2}/"))),
        "{}",
        underlay_addrs(n2)
    );
    wait_seen(&c1, Some(IP_C3), "eg-c with .101 hosted nowhere");
}

/// Egress IPs that belong to someone else are refused with the owner named, and their tenant
/// is dropped, never masqueraded: another node's address (taking it would move the underlay's
/// ARP and the other nodes' VXLAN to the claiming node), a pod gateway, and an address another
/// host on the underlay answers for (RFC 5227 probe before holding).
#[test]
fn egress_ips_owned_by_a_node_the_cluster_or_another_host_are_refused() {
    let c = Cluster::start(3, &NodeOptions::default());
    let (n1, n2, n3) = (c.node(1), c.node(2), c.node(3));
    c.hub_exec(&["ip", "addr", "add", &format!("{EXT}/24"), "dev", "hub0"]);
    let _server = tcp_whoami_server(c.hub_netns(), PORT);
    let node1 = underlay_ip(1);
    let gateway1 = Ipv4Addr::new(10, 128, 0, 1);
    set_ns(&c, "eg-n", 40, &[node1]);
    set_ns(&c, "eg-g", 41, &[gateway1]);
    set_ns(&c, "eg-h", 42, &[EXT]);
    set_ns(&c, "eg-p", 43, &[]);
    host_ips(&c, "node-3", &[node1, gateway1, EXT]);
    let n_pod = n2.pod("eg-n", "n2");
    let g_pod = n2.pod("eg-g", "g2");
    let h_pod = n2.pod("eg-h", "h2");
    let h_local = n3.pod("eg-h", "h3");
    let p1 = n1.pod("eg-p", "p1");
    let p2 = n2.pod("eg-p", "p2");

    // Dropped, never masqueraded, from the claiming node and from the others.
    wait_seen(&n_pod, None, "eg-n (node-1's address as egress IP)");
    wait_seen(&g_pod, None, "eg-g (a pod gateway as egress IP)");
    wait_seen(
        &h_pod,
        None,
        "eg-h (the external host's address as egress IP)",
    );
    wait_seen(&h_local, None, "eg-h from node-3 itself");
    // node-3 took none of them; node-1 keeps its address, the underlay and VXLAN to it work.
    let addrs = underlay_addrs(n3);
    for ip in [node1, gateway1, EXT] {
        assert!(!addrs.contains(&format!("inet {ip}/")), "{addrs}");
    }
    wait_seen(&p1, Some(node1), "eg-p on node-1 leaves as node-1");
    assert!(p2.ping(&p1.ip, 3), "node-2 -> node-1 over VXLAN");
    // The owner is named, in sdnctl and in the log (ERROR), on every node.
    let refused_node =
        "192.168.77.11 (not used: refused: it is node node-1's address (HostSubnet node-1 hostIP))";
    let refused_gw = "10.128.0.1 (not used: refused: it is node node-1's pod gateway";
    for n in [n1, n2, n3] {
        let said = sdnctl_egress_ips(n);
        assert!(
            said.contains(refused_node) && said.contains(refused_gw),
            "{said}"
        );
        let log = n.log();
        assert!(
            log.lines().any(|l| l.contains("ERROR")
                && l.contains("egress IP 192.168.77.11 is refused: it is node node-1's address")),
            "no ERROR naming node-1 on {}",
            n.ovs.ns().name()
        );
    }
    // The external host's address: node-3 probed it and another host answered.
    assert!(
        wait_until(SETTLE, || sdnctl_egress_ips(n3).contains(
            "192.168.77.200 on node-3 (not held here: another host answers for it on br-phy (MAC "
        )),
        "{}",
        sdnctl_egress_ips(n3)
    );
    assert!(n3
        .log()
        .lines()
        .any(|l| l.contains("ERROR") && l.contains("RFC 5227 probe")));
    // Given up: the tenants are masqueraded again and nothing was left behind.
    set_ns(&c, "eg-n", 40, &[]);
    wait_seen(&n_pod, Some(underlay_ip(2)), "eg-n without egress IPs");
}
