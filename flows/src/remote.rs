//! The flows of remote nodes (pipeline.md, "Per remote node"): for every other node's HostSubnet
//! (VTEP `HOSTIP`, pod subnet `S`) three rows, and one shared row that copies multicast to every
//! remote VTEP.
//!
//! | table | prio | match | actions |
//! |---|---|---|---|
//! | 10 | 100 | `tun_src=HOSTIP` | `goto_table:30` (VXLAN from a known node is accepted) |
//! | 50 | 100 | `arp,arp_tpa=S` | `move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31]`, `set_field:HOSTIP->tun_dst`, `output:1` |
//! | 90 | 100 | `ip,nw_dst=S` | the same |
//! | 111 | 100 | (any) | `move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31]`, then `set_field:HOSTIP->tun_dst,output:1` per remote node (past [`VTEPS_IN_ROW`] nodes: `group:G` per `all` group of VTEPs instead), `goto_table:120` |
//!
//! The VNI of every packet sent to another node is the source VNID (`reg0`), so the receiving
//! node's table 0 loads it back into `reg0` and its table 80 decides as for a local sender.
//!
//! Cookies: a node's three rows carry [`node_cookie`] (the [`Feature::Node`] prefix and a hash of
//! the HostSubnet's `metadata.uid`), so a node that changes its hostIP or goes away is re-flowed
//! or removed by cookie without touching another node's rows, and the cookie survives an agent
//! restart (it comes from the object, not from agent memory). The table-111 row belongs to all
//! remote nodes at once; it has its own fixed cookie ([`MULTICAST_COOKIE`], object id 0, which
//! [`node_cookie`] never returns) and is rewritten whenever the set of remote VTEPs changes. With
//! no remote node it only continues to table 120 (openshift-sdn does the same), so local multicast
//! keeps working.
//!
//! Cluster size: an OpenFlow message's length is 16 bits, so one row can list about 2,000 VTEPs
//! and one group about 1,300 buckets. Up to [`VTEPS_IN_ROW`] remote nodes the row lists the
//! VTEPs itself (as openshift-sdn's did); past that it sends a copy to each of a few `all`
//! groups of at most [`VTEPS_PER_GROUP`] buckets (`set_field:HOSTIP->tun_dst,output:1` each),
//! ids from [`MULTICAST_GROUP_BASE`] up, which no VNID (the egress IP groups' ids) reaches. At
//! 5,000 nodes that is one row and five groups, each well inside the limit.
//!
//! A node with an IPv6 subnet `S6` (dual stack) has two more rows, to the same (IPv4) VTEP:
//! `icmp6,icmp_type=135,icmp_code=0,nd_target=S6` in table 50 and `ipv6,ipv6_dst=S6` in table 90.
//!
//! An IPv6-only cluster has an IPv6 underlay: table 10 matches `tun_ipv6_src`, the rows set
//! `tun_ipv6_dst`, and a node has only its table-10 row and the two IPv6 rows.
//!
//! Limits: the VTEP list of table 111 is in address order, one pair per distinct
//! address (two HostSubnets with one hostIP would otherwise receive every multicast packet
//! twice; the agent refuses such a pair anyway).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use ipnet::{Ipv4Net, Ipv6Net};
use ovs::flow::{Action, Bucket, Flow, Group, GroupType, Masked, Match};

use crate::attachment::fnv1a;
use crate::base::VXLAN_PORT;
use crate::cookie::{cookie, Feature, FEATURE_MASK};
use crate::registers::src_vnid_to_vni;
use crate::tables::Table;

/// What the flows of one remote node depend on.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct RemoteNodeFlows {
    /// The node's VTEP: its HostSubnet's `hostIP` (IPv6 in an IPv6-only cluster).
    pub host_ip: IpAddr,
    /// The node's IPv4 pod subnet (`None` in an IPv6-only cluster).
    pub subnet: Option<Ipv4Net>,
    /// The node's IPv6 pod subnet in a dual-stack cluster: its rows are the IPv6 twins of the
    /// tables 50 and 90 rows (solicitations by target, IPv6 by destination), to the same VTEP.
    pub subnet6: Option<Ipv6Net>,
    /// The node's cookie, from [`node_cookie`].
    pub cookie: u64,
}

/// The cookie of the table-111 row (multicast to every remote VTEP).
pub const MULTICAST_COOKIE: u64 = cookie(Feature::Node, 0);

/// The cookie of the remote node whose HostSubnet has `metadata.uid` `uid` (its name when the
/// uid is empty): FNV-1a 64 of the text under the [`Feature::Node`] prefix, never the object id 0
/// of [`MULTICAST_COOKIE`].
pub fn node_cookie(uid: &str) -> u64 {
    let id = fnv1a(uid.as_bytes()) & !FEATURE_MASK;
    cookie(Feature::Node, id.max(1))
}

fn subnet(n: &Ipv4Net) -> Masked<Ipv4Addr> {
    // A HostSubnet's subnet is never /0 (validation refuses it); fall back to exact if it were.
    Masked::cidr(n.network(), n.prefix_len()).unwrap_or_else(|_| Masked::exact(n.network()))
}

/// The three rows of one remote node (tables 10, 50, 90), in table order, then its two IPv6 rows
/// (tables 50 and 90) if it has an IPv6 subnet.
pub fn remote_node_flows(n: &RemoteNodeFlows) -> Vec<Flow> {
    let f = |table: Table| Flow::new(table.id(), 100).cookie(n.cookie);
    let to_vtep = [
        src_vnid_to_vni(),
        Action::set_tunnel_dst(n.host_ip),
        Action::Output(VXLAN_PORT),
    ];
    let from_vtep = match n.host_ip {
        IpAddr::V4(ip) => Match::any().tun_src(ip),
        IpAddr::V6(ip) => Match::any().tun_ipv6_src(ip),
    };
    let mut rows = vec![f(Table::VxlanIngress)
        .matching(from_vtep)
        .goto(Table::ConntrackCommit.id())];
    if let Some(s4) = &n.subnet {
        rows.push(
            f(Table::RemoteArp)
                .matching(Match::any().arp().arp_tpa(subnet(s4)))
                .actions(to_vtep.clone()),
        );
        rows.push(
            f(Table::RemoteIp)
                .matching(Match::any().ip().nw_dst(subnet(s4)))
                .actions(to_vtep.clone()),
        );
    }
    if let Some(s6) = &n.subnet6 {
        let s6 = crate::ipv6::net6(s6);
        rows.push(
            f(Table::RemoteArp)
                .matching(
                    Match::any()
                        .icmp6()
                        .icmp_type(crate::ipv6::icmp6::NEIGHBOR_SOLICIT)
                        .icmp_code(0)
                        .nd_target(s6),
                )
                .actions(to_vtep.clone()),
        );
        rows.push(
            f(Table::RemoteIp)
                .matching(Match::any().ipv6().ipv6_dst(s6))
                .actions(to_vtep),
        );
    }
    rows
}

/// How many rows [`remote_node_flows`] gives for `n`, without building them.
pub fn remote_node_row_count(n: &RemoteNodeFlows) -> usize {
    1 + 2 * usize::from(n.subnet.is_some()) + 2 * usize::from(n.subnet6.is_some())
}

/// The most VTEPs the table-111 row lists itself (a row of about 2,000 would not fit an
/// OpenFlow message).
pub const VTEPS_IN_ROW: usize = 1000;

/// The most buckets of one table-111 VTEP group (about 1,300 would not fit a group_mod).
pub const VTEPS_PER_GROUP: usize = 1000;

/// The id of the first table-111 VTEP group: above every VNID, since an egress IP's group id is
/// its tenant's VNID (24 bits).
pub const MULTICAST_GROUP_BASE: u32 = 1 << 24;

/// The table-111 row for the remote VTEPs `vteps`: the VNI from `reg0`, one copy to each VTEP
/// (in address order), then local delivery in table 120. Without VTEPs: only `goto_table:120`.
/// Past [`VTEPS_IN_ROW`] VTEPs the copies go through the groups of [`multicast_remote`].
pub fn multicast_remote_flow(vteps: &BTreeSet<IpAddr>) -> Flow {
    multicast_remote(vteps).0
}

/// The table-111 row and the `all` groups it sends through (none up to [`VTEPS_IN_ROW`] VTEPs;
/// then one per [`VTEPS_PER_GROUP`] VTEPs, ids from [`MULTICAST_GROUP_BASE`], VTEPs in address
/// order).
pub fn multicast_remote(vteps: &BTreeSet<IpAddr>) -> (Flow, Vec<Group>) {
    let mut f = Flow::new(Table::MulticastRemote.id(), 100).cookie(MULTICAST_COOKIE);
    let copy = |ip: IpAddr| [Action::set_tunnel_dst(ip), Action::Output(VXLAN_PORT)];
    let mut groups = Vec::new();
    if !vteps.is_empty() {
        f = f.action(src_vnid_to_vni());
    }
    if vteps.len() <= VTEPS_IN_ROW {
        for ip in vteps {
            f = f.actions(copy(*ip));
        }
    } else {
        let all: Vec<IpAddr> = vteps.iter().copied().collect();
        for (i, chunk) in all.chunks(VTEPS_PER_GROUP).enumerate() {
            let id = MULTICAST_GROUP_BASE + i as u32;
            groups.push(Group {
                id,
                kind: GroupType::All,
                buckets: chunk
                    .iter()
                    .map(|ip| Bucket {
                        weight: 0,
                        actions: copy(*ip).to_vec(),
                    })
                    .collect(),
            });
            f = f.action(Action::Group(id));
        }
    }
    (f.goto(Table::MulticastLocal.id()), groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus_node() -> RemoteNodeFlows {
        RemoteNodeFlows {
            host_ip: Ipv4Addr::new(172, 17, 0, 3).into(),
            subnet: Some("10.129.0.0/23".parse().unwrap()),
            subnet6: None,
            cookie: cookie(Feature::Node, 3),
        }
    }

    #[test]
    fn the_row_count_is_the_rows_built() {
        let mut n = RemoteNodeFlows {
            host_ip: Ipv4Addr::new(172, 17, 0, 3).into(),
            subnet: Some("10.128.2.0/23".parse().unwrap()),
            subnet6: None,
            cookie: node_cookie("n"),
        };
        assert_eq!(remote_node_row_count(&n), remote_node_flows(&n).len());
        n.subnet6 = Some("fd01:0:0:7::/64".parse().unwrap());
        assert_eq!(remote_node_row_count(&n), remote_node_flows(&n).len());
        n.subnet = None;
        n.host_ip = "fd00:17::3".parse().unwrap();
        assert_eq!(remote_node_row_count(&n), remote_node_flows(&n).len());
    }

    #[test]
    fn an_ipv6_only_node_is_reached_over_an_ipv6_underlay() {
        let n = RemoteNodeFlows {
            host_ip: "fd00:17::3".parse().unwrap(),
            subnet: None,
            subnet6: Some("fd01:0:0:7::/64".parse().unwrap()),
            cookie: cookie(Feature::Node, 3),
        };
        let text: Vec<String> = remote_node_flows(&n)
            .iter()
            .map(ToString::to_string)
            .collect();
        let to_vtep = "actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:fd00:17::3->tun_ipv6_dst,output:1";
        assert_eq!(
            text,
            [
                "cookie=0x2000000000000003, table=10, priority=100,tun_ipv6_src=fd00:17::3 actions=goto_table:30".to_string(),
                format!("cookie=0x2000000000000003, table=50, priority=100,icmp6,icmp_type=135,icmp_code=0,nd_target=fd01:0:0:7::/64 {to_vtep}"),
                format!("cookie=0x2000000000000003, table=90, priority=100,ipv6,ipv6_dst=fd01:0:0:7::/64 {to_vtep}"),
            ]
        );
        for f in remote_node_flows(&n) {
            f.validate().unwrap();
        }
        let (row, _) = multicast_remote(&[n.host_ip].into());
        assert!(
            row.to_string()
                .contains("set_field:fd00:17::3->tun_ipv6_dst,output:1"),
            "{row}"
        );
    }

    #[test]
    fn a_dual_stack_node_adds_its_ipv6_twins_to_the_same_vtep() {
        let n = RemoteNodeFlows {
            subnet6: Some("fd01:0:0:7::/64".parse().unwrap()),
            ..corpus_node()
        };
        let text: Vec<String> = remote_node_flows(&n)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(text.len(), 5);
        assert_eq!(
            text[3..],
            [
                "cookie=0x2000000000000003, table=50, priority=100,icmp6,icmp_type=135,icmp_code=0,nd_target=fd01:0:0:7::/64 actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:172.17.0.3->tun_dst,output:1",
                "cookie=0x2000000000000003, table=90, priority=100,ipv6,ipv6_dst=fd01:0:0:7::/64 actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:172.17.0.3->tun_dst,output:1",
            ]
        );
        assert_eq!(
            text[..3],
            remote_node_flows(&corpus_node())
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()[..]
        );
    }

    #[test]
    fn rows_print_as_the_corpus_has_them() {
        // The same lines as tests/corpus/pipeline.flows (checked there against ovs-ofctl).
        let text: Vec<String> = remote_node_flows(&corpus_node())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            text,
            [
                "cookie=0x2000000000000003, table=10, priority=100,tun_src=172.17.0.3 actions=goto_table:30",
                "cookie=0x2000000000000003, table=50, priority=100,arp,arp_tpa=10.129.0.0/23 actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:172.17.0.3->tun_dst,output:1",
                "cookie=0x2000000000000003, table=90, priority=100,ip,nw_dst=10.129.0.0/23 actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:172.17.0.3->tun_dst,output:1",
            ]
        );
        for f in remote_node_flows(&corpus_node()) {
            f.validate().unwrap();
        }
    }

    #[test]
    fn multicast_row_lists_every_vtep_once_in_order() {
        let vteps: BTreeSet<IpAddr> = [
            Ipv4Addr::new(172, 17, 0, 4).into(),
            Ipv4Addr::new(172, 17, 0, 3).into(),
            Ipv4Addr::new(172, 17, 0, 4).into(),
        ]
        .into();
        let f = multicast_remote_flow(&vteps);
        f.validate().unwrap();
        assert_eq!(
            f.to_string(),
            "cookie=0x2000000000000000, table=111, priority=100 actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:172.17.0.3->tun_dst,output:1,set_field:172.17.0.4->tun_dst,output:1,goto_table:120"
        );
        let none = multicast_remote_flow(&BTreeSet::new());
        none.validate().unwrap();
        assert_eq!(
            none.to_string(),
            "cookie=0x2000000000000000, table=111, priority=100 actions=goto_table:120"
        );
    }

    #[test]
    fn past_a_thousand_vteps_the_row_sends_through_all_groups() {
        let vteps = |n: u32| -> BTreeSet<IpAddr> {
            (0..n)
                .map(|i| Ipv4Addr::from(0x6440_0000 + i).into())
                .collect()
        };
        let (row, groups) = multicast_remote(&vteps(VTEPS_IN_ROW as u32));
        assert!(groups.is_empty());
        assert_eq!(row.actions.len(), 1 + 2 * VTEPS_IN_ROW);

        let (row, groups) = multicast_remote(&vteps(5000));
        row.validate().unwrap();
        assert_eq!(
            row.to_string(),
            "cookie=0x2000000000000000, table=111, priority=100 actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],group:16777216,group:16777217,group:16777218,group:16777219,group:16777220,goto_table:120"
        );
        assert_eq!(groups.len(), 5);
        let mut seen = Vec::new();
        for (i, g) in groups.iter().enumerate() {
            assert_eq!(g.id, MULTICAST_GROUP_BASE + i as u32);
            assert_eq!(g.kind, GroupType::All);
            assert_eq!(g.buckets.len(), VTEPS_PER_GROUP);
            for b in &g.buckets {
                assert_eq!(b.actions.len(), 2);
                assert_eq!(b.actions[1], Action::Output(VXLAN_PORT));
                seen.push(b.actions[0].clone());
            }
        }
        // Every VTEP once, in address order.
        let want: Vec<Action> = vteps(5000)
            .into_iter()
            .map(Action::set_tunnel_dst)
            .collect();
        assert_eq!(seen, want);
        // The last group holds the rest.
        let (_, groups) = multicast_remote(&vteps(2345));
        assert_eq!(
            groups.iter().map(|g| g.buckets.len()).collect::<Vec<_>>(),
            [1000, 1000, 345]
        );
    }

    #[test]
    fn cookies_name_the_host_subnet() {
        let a = node_cookie("3f0c6d1e-8a51-4d43-9d2c-0b7d3f2a9e11");
        assert_eq!(a >> 60, Feature::Node as u64);
        assert_eq!(a, node_cookie("3f0c6d1e-8a51-4d43-9d2c-0b7d3f2a9e11"));
        assert_ne!(a, node_cookie("3f0c6d1e-8a51-4d43-9d2c-0b7d3f2a9e12"));
        assert_ne!(a, MULTICAST_COOKIE);
        assert_ne!(node_cookie(""), MULTICAST_COOKIE);
    }
}
