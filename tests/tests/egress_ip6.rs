//! Egress IPs in IPv6 on real traffic: three dual-stack nodes of one standalone cluster, their
//! underlay in both families (`192.168.77.1N/24` and `fd00:77::1N/64` on `br-phy`) and an
//! "external" host on it (`192.168.77.200` and `fd00:77::c8` on the hub, TCP servers that answer
//! each connection with the source address they see).
//!
//! Tenant eg-a asks for 192.168.77.100 (hosted by node-2) and fd00:77::100 (node-3): its IPv4
//! leaves through node-2 and its IPv6 through node-3, from either node; eg-b asks for none (its
//! IPv6 is masqueraded to its node's address); eg-c asks for an IPv4 one only, so its IPv6 is
//! dropped, never sent with the node's address. Then: the rows and groups of pipeline.md, the
//! address held as the module says (a deprecated /128 that the node's own connections never use
//! as source), `sdnctl egress-ips` and `sdnctl trace` in IPv6; the IPv6 IP moved to node-2 with
//! the external host's neighbour cache following the unsolicited advertisement; an address the
//! external host holds refused by the duplicate-address probe with its MAC named; an agent
//! restart that changes nothing; and the IP given up, released.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use cluster::{ClusterObject, NetNamespace, StandaloneSource};
use sdn_tests::cluster::Cluster;
use sdn_tests::harness::wait_until;
use sdn_tests::node::{AgentNode, CniPod, NodeOptions};
use sdn_tests::probe::{tcp_whoami_at, tcp_whoami_server_on};

use super::egress_ip::{sdnctl_egress_ips, table_101};

const EXT4: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 200);
const EXT6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 0xc8);
const PORT: u16 = 8181;
const IP_A4: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 100);
const IP_A6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 0x100);
const IP_C4: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 102);
const SETTLE: Duration = Duration::from_secs(20);

/// Node `i`'s IPv6 underlay address.
fn ul6(i: u16) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 0x10 + i)
}

fn set_ns(c: &Cluster, name: &str, vnid: u32, egress: &[IpAddr]) {
    let mut nn = NetNamespace::new(name, vnid);
    nn.set_egress_addrs(egress);
    StandaloneSource::write_object(c.state_dir(), &ClusterObject::NetNamespace(nn))
        .unwrap_or_else(|e| panic!("writing NetNamespace {name}: {e}"));
}

fn host_ips(c: &Cluster, node: &str, egress: &[IpAddr]) {
    let mut hs = c.host_subnet(node);
    hs.set_egress_addrs(egress);
    c.write_host_subnet(&hs);
}

/// The source the external host sees for one connection from `pod` to `ext` (None: no answer
/// in 1 s).
fn seen(pod: &CniPod<'_>, ext: IpAddr) -> Option<IpAddr> {
    tcp_whoami_at(
        pod.ns.name(),
        SocketAddr::new(ext, PORT),
        Duration::from_secs(1),
    )
}

/// Waits until `pod`'s connections to `ext` are seen as `want` (three in a row); returns how
/// long it took.
#[track_caller]
fn wait_seen(pod: &CniPod<'_>, ext: IpAddr, want: Option<IpAddr>, what: &str) -> Duration {
    wait_seen_within(SETTLE, pod, ext, want, what)
}

/// [`wait_seen`] giving up after `settle`.
#[track_caller]
pub(crate) fn wait_seen_within(
    settle: Duration,
    pod: &CniPod<'_>,
    ext: IpAddr,
    want: Option<IpAddr>,
    what: &str,
) -> Duration {
    let began = Instant::now();
    let (mut streak, mut last) = (0, Vec::new());
    while began.elapsed() < settle {
        let got = seen(pod, ext);
        last.push(got);
        streak = if got == want { streak + 1 } else { 0 };
        if streak == 3 {
            return began.elapsed();
        }
        if got.is_some() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    panic!(
        "{what}: want {want:?}, the last answers were {:?}",
        &last[last.len().saturating_sub(8)..]
    );
}

/// `ip -6 addr show dev br-phy` in `node`'s namespace.
fn addrs6(node: &AgentNode) -> String {
    node.ovs
        .exec_in_netns(&["ip", "-6", "addr", "show", "dev", "br-phy"])
        .unwrap_or_else(|e| panic!("{e}"))
}

fn mac_of_br_phy(node: &AgentNode) -> String {
    node.ovs
        .exec_in_netns(&["cat", "/sys/class/net/br-phy/address"])
        .unwrap_or_else(|e| panic!("{e}"))
        .trim()
        .to_string()
}

#[test]
fn ipv6_egress_ips_set_the_source_move_with_an_advertisement_and_refuse_a_taken_address() {
    let c = Cluster::start(3, &NodeOptions::default().dual_stack());
    let (n1, n2, n3) = (c.node(1), c.node(2), c.node(3));
    // The underlay in IPv6, and the external host.
    for (i, n) in [(1, n1), (2, n2), (3, n3)] {
        n.ovs
            .exec_in_netns(&[
                "ip",
                "-6",
                "addr",
                "add",
                &format!("{}/64", ul6(i)),
                "dev",
                "br-phy",
                "nodad",
            ])
            .unwrap_or_else(|e| panic!("{e}"));
    }
    c.hub_exec(&["ip", "addr", "add", &format!("{EXT4}/24"), "dev", "hub0"]);
    c.hub_exec(&[
        "ip",
        "-6",
        "addr",
        "add",
        &format!("{EXT6}/64"),
        "dev",
        "hub0",
        "nodad",
    ]);
    let (ext4, ext6) = (IpAddr::V4(EXT4), IpAddr::V6(EXT6));
    let _s4 = tcp_whoami_server_on(c.hub_netns(), ext4, PORT);
    let _s6 = tcp_whoami_server_on(c.hub_netns(), ext6, PORT);
    let (a4, a6) = (IpAddr::V4(IP_A4), IpAddr::V6(IP_A6));
    set_ns(&c, "eg-a", 30, &[a4, a6]);
    set_ns(&c, "eg-b", 31, &[]);
    set_ns(&c, "eg-c", 32, &[IpAddr::V4(IP_C4)]);
    host_ips(&c, "node-2", &[a4, IpAddr::V4(IP_C4)]);
    host_ips(&c, "node-3", &[a6]);
    let a1 = n1.pod("eg-a", "a1");
    let a3 = n3.pod("eg-a", "a3");
    let b1 = n1.pod("eg-b", "b1");
    let c1 = n1.pod("eg-c", "c1");

    // What the external host sees, per family.
    wait_seen(&a1, ext6, Some(a6), "eg-a IPv6 from node-1 (IP on node-3)");
    wait_seen(&a3, ext6, Some(a6), "eg-a IPv6 from node-3 (IP local)");
    wait_seen(&a1, ext4, Some(a4), "eg-a IPv4 from node-1 (IP on node-2)");
    wait_seen(&a3, ext4, Some(a4), "eg-a IPv4 from node-3 (IP on node-2)");
    wait_seen(
        &b1,
        ext6,
        Some(IpAddr::V6(ul6(1))),
        "eg-b (no egress IP): node-1's IPv6 address",
    );
    wait_seen(&c1, ext6, None, "eg-c asks for no IPv6 egress IP: dropped");
    wait_seen(&c1, ext4, Some(IpAddr::V4(IP_C4)), "eg-c IPv4");

    // Rows (pipeline.md "Egress IPs") and groups: each family its own.
    let t = table_101(n1);
    for want in [
        "table=101, priority=100,ip,reg0=0x1e actions=ct(commit),group:30",
        "table=101, priority=100,ipv6,reg0=0x1e actions=ct(commit),group:33554462",
        "table=101, priority=100,ip,reg0=0x20 actions=ct(commit),group:32",
        "table=101, priority=100,ipv6,reg0=0x20 actions=drop",
    ] {
        assert!(t.iter().any(|l| l == want), "node-1 lacks {want}: {t:#?}");
    }
    let g = n1.ovs.ofctl(&["dump-groups", "br0"]);
    assert!(
        g.contains("group_id=33554462,type=select,bucket=weight:100,actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:192.168.77.13->tun_dst,output:1"),
        "{g}"
    );
    assert!(table_101(n3)
        .iter()
        .any(|l| l == "table=101, priority=100,ipv6,reg0=0x1e actions=group:33554462"));
    // node-3 holds the IPv6 IP: a deprecated /128 without DAD, with the mark, SNAT and reject.
    let held = addrs6(n3);
    assert!(
        held.contains(&format!("inet6 {IP_A6}/128")) && held.contains("deprecated"),
        "{held}"
    );
    let nat = n3
        .ovs
        .exec_in_netns(&["ip6tables", "-t", "nat", "-S", "SDN-POSTROUTING"])
        .unwrap();
    assert!(
        nat.contains("-m mark --mark 0x1e") && nat.contains(&format!("--to-source {IP_A6}")),
        "{nat}"
    );
    // The node's own connections keep its own address (the egress IP is deprecated).
    let own = tcp_whoami_at(
        n3.ovs.netns(),
        SocketAddr::new(ext6, PORT),
        Duration::from_secs(2),
    );
    assert_eq!(own, Some(IpAddr::V6(ul6(3))), "node-3's own source");
    // Egress IPs are sources only: a connection to one is refused.
    let to_eip = c.hub_exec(&[
        "sh",
        "-c",
        &format!("timeout 3 bash -c 'exec 3<>/dev/tcp/{IP_A6}/22' 2>&1; echo rc=$?"),
    ]);
    assert!(
        to_eip.contains("refused") && !to_eip.contains("rc=0"),
        "{to_eip}"
    );

    // What sdnctl says, and trace in IPv6.
    let said = sdnctl_egress_ips(n1);
    for want in [
        "VNID 30 (eg-a): IPv4 over VXLAN to node-2 (192.168.77.12)\n  IPv6 over VXLAN to node-3 (192.168.77.13)\n",
        "  fd00:77::100 on node-3 (in use)\n",
        "VNID 32 (eg-c): IPv4 over VXLAN to node-2 (192.168.77.12)\n  IPv6 dropped\n  it asks for no egress IP of this family",
    ] {
        assert!(said.contains(want), "{want:?} not in:\n{said}");
    }
    let t = n1.trace("eg-a/a1", &EXT6.to_string(), "tcp/8181", None);
    let words = t["verdict"].as_str().unwrap_or_default();
    assert!(
        words.contains("sent over VXLAN to node-3 (192.168.77.13) (VNI 30, group 33554462 picks one by a hash of the connection)")
            && words.contains(&format!("with its egress IP {IP_A6} on node-3 as source")),
        "{t:#}"
    );
    let t = n3.trace("eg-a/a3", &EXT6.to_string(), "tcp/8181", None);
    let words = t["verdict"].as_str().unwrap_or_default();
    assert!(
        words.contains(&format!(
            "this node SNATs it to its egress IP {IP_A6} on node-3"
        )),
        "{t:#}"
    );
    let t = n1.trace("eg-c/c1", &EXT6.to_string(), "tcp/8181", None);
    let words = t["verdict"].as_str().unwrap_or_default();
    assert!(
        words.contains("dropped in egress_routing")
            && words.contains("no egress IP of this family"),
        "{t:#}"
    );

    // The IPv6 IP moves to node-2 (where eg-a's IPv4 one is: one per family is no twin). The
    // external host's neighbour entry follows node-2's advertisement, and eg-a's IPv6 leaves
    // there.
    let hub_neigh = || c.hub_exec(&["ip", "-6", "neigh", "show", &IP_A6.to_string()]);
    let mac3 = mac_of_br_phy(n3);
    assert!(hub_neigh().contains(&mac3), "{}", hub_neigh());
    let moved = Instant::now();
    host_ips(&c, "node-3", &[]);
    host_ips(&c, "node-2", &[a4, IpAddr::V4(IP_C4), a6]);
    let mac2 = mac_of_br_phy(n2);
    // The hub's entry was confirmed by the last connection: without the advertisement it would
    // stay reachable at node-3's MAC for at least 15 s (the kernel's base reachable time).
    assert!(
        wait_until(Duration::from_secs(8), || hub_neigh().contains(&mac2)),
        "the external host still resolves {IP_A6} as {}",
        hub_neigh()
    );
    let took = wait_seen(&a1, ext6, Some(a6), "eg-a IPv6 through node-2");
    eprintln!(
        "IPv6 egress IP moved node-3 -> node-2: the external host resolved it to node-2 and \
         traffic left there in {:.1} s",
        moved.elapsed().as_secs_f64().max(took.as_secs_f64())
    );
    assert!(
        wait_until(SETTLE, || !addrs6(n3).contains(&IP_A6.to_string())),
        "{}",
        addrs6(n3)
    );

    // An address the external host holds: node-3 refuses it, naming the host's MAC, and holds
    // nothing; the tenant's IPv6 never leaves with another address.
    let d6 = IpAddr::V6(EXT6);
    set_ns(&c, "eg-d", 33, &[d6]);
    host_ips(&c, "node-3", &[d6]);
    let d1 = n1.pod("eg-d", "d1");
    let hub_mac = c
        .hub_exec(&["cat", "/sys/class/net/hub0/address"])
        .trim()
        .to_string();
    assert!(
        wait_until(SETTLE, || {
            let s = sdnctl_egress_ips(n3);
            s.contains(
                "fd00:77::c8 on node-3 (not held here: another host answers for it on br-phy",
            ) && s.contains(&hub_mac)
                && s.contains("duplicate address detection")
        }),
        "{}",
        sdnctl_egress_ips(n3)
    );
    wait_seen(
        &d1,
        ext6,
        None,
        "eg-d, whose IPv6 IP is the external host's",
    );
    assert!(!addrs6(n3).contains("fd00:77::c8"), "{}", addrs6(n3));

    // node-2's agent restarts: nothing changes, the address is recognised as its own.
    let line = n2.restart_unchanged();
    assert!(line.contains(" groups=0 "), "{line}");
    assert!(addrs6(n2).contains(&format!("inet6 {IP_A6}/128")));
    wait_seen(
        &a1,
        ext6,
        Some(a6),
        "eg-a IPv6 after node-2's agent restarted",
    );

    // eg-a gives its IPv6 IP up: its IPv6 is dropped (it has an IPv4 one only now), node-2
    // releases the address once its HostSubnet no longer lists it.
    set_ns(&c, "eg-a", 30, &[a4]);
    host_ips(&c, "node-2", &[a4, IpAddr::V4(IP_C4)]);
    wait_seen(&a1, ext6, None, "eg-a without an IPv6 egress IP");
    wait_seen(&a1, ext4, Some(a4), "eg-a IPv4 unchanged");
    assert!(
        wait_until(SETTLE, || !addrs6(n2).contains(&IP_A6.to_string())),
        "{}",
        addrs6(n2)
    );
    let nat = n2
        .ovs
        .exec_in_netns(&["ip6tables", "-t", "nat", "-S", "SDN-POSTROUTING"])
        .unwrap();
    assert!(!nat.contains("--to-source"), "{nat}");
}
