//! The flows of remote nodes (pipeline.md, "Per remote node"): for every other node's HostSubnet
//! (VTEP `HOSTIP`, pod subnet `S`) three rows, and one shared row that copies multicast to every
//! remote VTEP.
//!
//! | table | prio | match | actions |
//! |---|---|---|---|
//! | 10 | 100 | `tun_src=HOSTIP` | `goto_table:30` (VXLAN from a known node is accepted) |
//! | 50 | 100 | `arp,arp_tpa=S` | `move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31]`, `set_field:HOSTIP->tun_dst`, `output:1` |
//! | 90 | 100 | `ip,nw_dst=S` | the same |
//! | 111 | 100 | (any) | `move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31]`, then `set_field:HOSTIP->tun_dst,output:1` per remote node, `goto_table:120` |
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
//! Limits: IPv4 only; the VTEP list of table 111 is in address order, one pair per distinct
//! address (two HostSubnets with one hostIP would otherwise receive every multicast packet
//! twice; the agent refuses such a pair anyway).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use ovs::flow::{Action, Flow, Masked, Match};

use crate::attachment::fnv1a;
use crate::base::VXLAN_PORT;
use crate::cookie::{cookie, Feature, FEATURE_MASK};
use crate::registers::src_vnid_to_vni;
use crate::tables::Table;

/// What the flows of one remote node depend on.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct RemoteNodeFlows {
    /// The node's VTEP: its HostSubnet's `hostIP`.
    pub host_ip: Ipv4Addr,
    /// The node's pod subnet.
    pub subnet: Ipv4Net,
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

/// The three rows of one remote node (tables 10, 50, 90), in table order.
pub fn remote_node_flows(n: &RemoteNodeFlows) -> Vec<Flow> {
    let f = |table: Table| Flow::new(table.id(), 100).cookie(n.cookie);
    let to_vtep = [
        src_vnid_to_vni(),
        Action::set_tun_dst(n.host_ip),
        Action::Output(VXLAN_PORT),
    ];
    vec![
        f(Table::VxlanIngress)
            .matching(Match::any().tun_src(n.host_ip))
            .goto(Table::ConntrackCommit.id()),
        f(Table::RemoteArp)
            .matching(Match::any().arp().arp_tpa(subnet(&n.subnet)))
            .actions(to_vtep.clone()),
        f(Table::RemoteIp)
            .matching(Match::any().ip().nw_dst(subnet(&n.subnet)))
            .actions(to_vtep),
    ]
}

/// The table-111 row for the remote VTEPs `vteps`: the VNI from `reg0`, one copy to each VTEP
/// (in address order), then local delivery in table 120. Without VTEPs: only `goto_table:120`.
pub fn multicast_remote_flow(vteps: &BTreeSet<Ipv4Addr>) -> Flow {
    let mut f = Flow::new(Table::MulticastRemote.id(), 100).cookie(MULTICAST_COOKIE);
    if !vteps.is_empty() {
        f = f.action(src_vnid_to_vni());
        for ip in vteps {
            f = f
                .action(Action::set_tun_dst(*ip))
                .action(Action::Output(VXLAN_PORT));
        }
    }
    f.goto(Table::MulticastLocal.id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus_node() -> RemoteNodeFlows {
        RemoteNodeFlows {
            host_ip: Ipv4Addr::new(172, 17, 0, 3),
            subnet: "10.129.0.0/23".parse().unwrap(),
            cookie: cookie(Feature::Node, 3),
        }
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
        let vteps: BTreeSet<Ipv4Addr> = [
            Ipv4Addr::new(172, 17, 0, 4),
            Ipv4Addr::new(172, 17, 0, 3),
            Ipv4Addr::new(172, 17, 0, 4),
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
    fn cookies_name_the_host_subnet() {
        let a = node_cookie("3f0c6d1e-8a51-4d43-9d2c-0b7d3f2a9e11");
        assert_eq!(a >> 60, Feature::Node as u64);
        assert_eq!(a, node_cookie("3f0c6d1e-8a51-4d43-9d2c-0b7d3f2a9e11"));
        assert_ne!(a, node_cookie("3f0c6d1e-8a51-4d43-9d2c-0b7d3f2a9e12"));
        assert_ne!(a, MULTICAST_COOKIE);
        assert_ne!(node_cookie(""), MULTICAST_COOKIE);
    }
}
