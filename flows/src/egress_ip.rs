//! Table 101, `egress_routing`: a tenant's egress IPs, as openshift-sdn's
//! `SetNamespaceEgress{Normal,Dropped,ViaEgressIPs}` wrote them, with one change for the
//! userspace datapath (below).
//!
//! Per VNID V whose namespace has egress IPs (cookie [`egress_ip_cookie`], one owner per VNID):
//!
//! - **dropped** (no egress IP of the namespace is usable: none hosted, its node offline, or an IP
//!   claimed by two namespaces): `reg0=V → drop`, priority 100. The tenant's external traffic is
//!   dropped rather than leaving with the node's address.
//! - **via egress IPs**: `ip,reg0=V → [ct(commit),]group:V`, priority 100, and a `select` group V
//!   with one bucket per usable egress IP's node:
//!   - the IP is on this node: `set_field:MARK_MAC->eth_src, set_field:TUN0_MAC->eth_dst,
//!     output:2`: the packet goes to the node's kernel through tun0, which marks it (by the
//!     source MAC, see [`egress_mark_mac`]) and SNATs it to the egress IP. When one of the IPs is
//!     local, only that bucket is used (traffic never bounces between nodes);
//!   - the IP is on node N: `move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31], set_field:N->tun_dst,
//!     output:1`: over VXLAN to N with the VNI V, where N's table 101 takes the local bucket.
//!     Without a local bucket the row commits the connection first (`ct(commit)`), as
//!     openshift-sdn did, so its replies are `+rpl`.
//!
//! The base row `ip,ct_state=+rpl+trk → output:2` (priority 150) keeps replies off egress IPs.
//!
//! On a dual-stack node each family has its own row and group (IPv6: `ipv6,reg0=V`, group
//! [`EGRESS_IP6_GROUP_BASE`] + V), with the same buckets: the IPv6 egress IPs may sit on other
//! nodes than the IPv4 ones, and a family the tenant has no usable egress IP of is dropped on its
//! own (`ip,reg0=V` or `ipv6,reg0=V` → drop). IPv6 rides VXLAN over the IPv4 underlay, so the
//! remote buckets' `tun_dst` is the node's IPv4 VTEP in both.
//!
//! Why a MAC and not `pkt_mark`: openshift-sdn set `pkt_mark` in the bucket and matched it in
//! iptables. On the userspace (netdev) datapath tun0 is a tap device and a packet written to it
//! carries no skb mark, so the mark would be lost. The source MAC survives on both datapaths:
//! the node's `mangle` PREROUTING turns `-i tun0 -m mac --mac-source MARK_MAC` into the mark,
//! and `nat` POSTROUTING SNATs by it. One mechanism on both datapaths keeps the tested path the
//! production path.

use std::net::IpAddr;

use ovs::flow::{Action, Bucket, Ct, Group, GroupType, MacAddr};
use ovs::{Flow, Match};

use crate::base::{TUN_PORT, VXLAN_PORT};
use crate::cookie::{cookie, Feature};
use crate::registers::{src_vnid_to_vni, Reg};
use crate::tables::Table;
use crate::Vnid;

/// Where a tenant's external traffic goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EgressRoute {
    /// Nowhere: the namespace wants egress IPs and none is usable.
    Dropped,
    /// Through this node's kernel (one of its egress IPs is here).
    Local,
    /// Over VXLAN to the nodes hosting its egress IPs (their VTEPs), load-balanced.
    Remote(Vec<IpAddr>),
}

/// The cookie of VNID `vnid`'s egress IP rows.
pub fn egress_ip_cookie(vnid: Vnid) -> u64 {
    cookie(Feature::EgressIp, u64::from(vnid.id()))
}

/// The source MAC that tells the node's kernel a packet is VNID `vnid`'s egress IP traffic:
/// `0a:59:` and the four bytes of the VNID (locally administered, unicast, never a pod's
/// `0a:58:` MAC).
pub fn egress_mark_mac(vnid: Vnid) -> MacAddr {
    let v = vnid.id().to_be_bytes();
    MacAddr([0x0a, 0x59, v[0], v[1], v[2], v[3]])
}

/// The packet mark the node's kernel gives VNID `vnid`'s egress IP traffic, as openshift-sdn
/// computed it: the VNID (0 → `0xff000000`), moved off kubelet's drop bit (`0x8000`) and
/// kube-proxy's masquerade bit (`1 << masquerade_bit`), unique per VNID.
pub fn egress_mark(vnid: Vnid, masquerade_bit: u8) -> u32 {
    const KUBELET_DROP: u32 = 1 << 15;
    let masq = 1u32 << masquerade_bit;
    let mut m = if vnid.is_global() {
        0xff00_0000
    } else {
        vnid.id()
    };
    if m & KUBELET_DROP != 0 {
        m = (m | 0x1000_0000) ^ KUBELET_DROP;
    }
    if m & masq != 0 {
        m = (m | 0x0100_0000) ^ masq;
    }
    m
}

/// The id of VNID V's IPv6 egress group is `EGRESS_IP6_GROUP_BASE + V`: above every VNID (the
/// IPv4 groups' ids) and every multicast VTEP group (`MULTICAST_GROUP_BASE` up).
pub const EGRESS_IP6_GROUP_BASE: u32 = 1 << 25;

/// The table-101 rows and groups of VNID `vnid` whose IPv4 traffic takes `route` (on a node
/// with IPv4) and, on a dual-stack or IPv6-only node, whose IPv6 traffic takes `route6`;
/// `tun0_mac` is this node's. Every family there dropped is the one row `reg0=V → drop`;
/// otherwise each family has
/// its row (`ip,reg0=V` / `ipv6,reg0=V`): a drop, or its own group (id V for IPv4,
/// [`EGRESS_IP6_GROUP_BASE`] + V for IPv6), since the families' IPs may sit on different nodes.
pub fn egress_ip_flows(
    vnid: Vnid,
    route: Option<&EgressRoute>,
    route6: Option<&EgressRoute>,
    tun0_mac: MacAddr,
) -> (Vec<Flow>, Vec<Group>) {
    let row = Flow::new(Table::EgressRouting.id(), 100).cookie(egress_ip_cookie(vnid));
    let dropped = |r: Option<&EgressRoute>| r.is_none_or(|r| *r == EgressRoute::Dropped);
    if dropped(route) && dropped(route6) {
        return (
            vec![row.matching(Reg::SrcVnid.matching(Match::any(), vnid.id()))],
            Vec::new(),
        );
    }
    let (mut rows, mut groups) = (Vec::new(), Vec::new());
    let families = [
        (route, Match::any().ip(), vnid.id()),
        (
            route6,
            Match::any().ipv6(),
            EGRESS_IP6_GROUP_BASE + vnid.id(),
        ),
    ];
    for (r, m, group) in families {
        let Some(r) = r else { continue };
        let (f, g) = family_rows(
            vnid,
            r,
            Reg::SrcVnid.matching(m, vnid.id()),
            group,
            tun0_mac,
        );
        rows.push(f);
        groups.extend(g);
    }
    (rows, groups)
}

/// One family's row (matching `m`) and group (id `group`) for `route`.
fn family_rows(
    vnid: Vnid,
    route: &EgressRoute,
    m: Match,
    group: u32,
    tun0_mac: MacAddr,
) -> (Flow, Option<Group>) {
    let row = Flow::new(Table::EgressRouting.id(), 100)
        .cookie(egress_ip_cookie(vnid))
        .matching(m);
    let buckets = |actions: Vec<Vec<Action>>| Group {
        id: group,
        kind: GroupType::Select,
        buckets: actions
            .into_iter()
            .map(|actions| Bucket {
                weight: 100,
                actions,
            })
            .collect(),
    };
    match route {
        EgressRoute::Dropped => (row, None),
        EgressRoute::Local => {
            let mut mac = [0u8; 8];
            mac[2..].copy_from_slice(&egress_mark_mac(vnid).0);
            let local = vec![
                Action::set_field(ovs::flow::Field::EthSrc, u64::from_be_bytes(mac))
                    .expect("a MAC fits eth_src"),
                Action::set_eth_dst(tun0_mac),
                Action::Output(TUN_PORT),
            ];
            (row.action(Action::Group(group)), Some(buckets(vec![local])))
        }
        EgressRoute::Remote(nodes) => {
            let mut nodes = nodes.clone();
            nodes.sort();
            nodes.dedup();
            let remote = nodes
                .iter()
                .map(|n| {
                    vec![
                        src_vnid_to_vni(),
                        Action::set_tunnel_dst(*n),
                        Action::Output(VXLAN_PORT),
                    ]
                })
                .collect();
            (
                row.action(Action::Ct(Ct::new().commit()))
                    .action(Action::Group(group)),
                Some(buckets(remote)),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn rows_and_groups_print_as_pipeline_md_says() {
        let v = Vnid::new(20).unwrap();
        let tun = MacAddr::from_pod_ip(Ipv4Addr::new(10, 128, 0, 1));
        let (f, g) = egress_ip_flows(v, Some(&EgressRoute::Dropped), None, tun);
        assert_eq!(
            f[0].to_string(),
            "cookie=0x6000000000000014, table=101, priority=100,reg0=0x14 actions=drop"
        );
        assert!(g.is_empty());
        let (f, g) = egress_ip_flows(v, Some(&EgressRoute::Local), None, tun);
        assert_eq!(
            f[0].to_string(),
            "cookie=0x6000000000000014, table=101, priority=100,ip,reg0=0x14 actions=group:20"
        );
        let g = &g[0];
        assert_eq!((g.id, g.kind, g.buckets.len()), (20, GroupType::Select, 1));
        assert_eq!(
            ovs::flow::Flow::new(0, 0)
                .actions(g.buckets[0].actions.clone())
                .actions_text(None),
            "set_field:0a:59:00:00:00:14->eth_src,set_field:0a:58:0a:80:00:01->eth_dst,output:2"
        );
        let nodes = vec![
            IpAddr::from(Ipv4Addr::new(192, 168, 77, 13)),
            IpAddr::from(Ipv4Addr::new(192, 168, 77, 12)),
        ];
        let (f, g) = egress_ip_flows(v, Some(&EgressRoute::Remote(nodes.clone())), None, tun);
        assert_eq!(
            f[0].to_string(),
            "cookie=0x6000000000000014, table=101, priority=100,ip,reg0=0x14 actions=ct(commit),group:20"
        );
        let texts: Vec<String> = g[0]
            .buckets
            .iter()
            .map(|b| {
                Flow::new(0, 0)
                    .actions(b.actions.clone())
                    .actions_text(None)
            })
            .collect();
        assert_eq!(
            texts,
            [
                "move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:192.168.77.12->tun_dst,output:1",
                "move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:192.168.77.13->tun_dst,output:1",
            ]
        );
        for f in &f {
            f.validate().unwrap();
        }
        // Dual stack: each family its row and group; IPv6 through node-2 only, or dropped.
        let remote = EgressRoute::Remote(nodes.clone());
        let to_2 = EgressRoute::Remote(vec![nodes[1]]);
        let (both, g) = egress_ip_flows(v, Some(&remote), Some(&to_2), tun);
        assert_eq!(both[..1], f[..]);
        assert_eq!(
            both[1].to_string(),
            "cookie=0x6000000000000014, table=101, priority=100,ipv6,reg0=0x14 actions=ct(commit),group:33554452"
        );
        assert_eq!(
            g.iter()
                .map(|g| (g.id, g.buckets.len()))
                .collect::<Vec<_>>(),
            [(20, 2), (EGRESS_IP6_GROUP_BASE + 20, 1)]
        );
        let (v6_dropped, g) = egress_ip_flows(v, Some(&remote), Some(&EgressRoute::Dropped), tun);
        assert_eq!(
            v6_dropped[1].to_string(),
            "cookie=0x6000000000000014, table=101, priority=100,ipv6,reg0=0x14 actions=drop"
        );
        assert_eq!(g.len(), 1);
        let (v4_dropped, g) = egress_ip_flows(
            v,
            Some(&EgressRoute::Dropped),
            Some(&EgressRoute::Local),
            tun,
        );
        assert_eq!(
            v4_dropped.iter().map(Flow::to_string).collect::<Vec<_>>(),
            [
                "cookie=0x6000000000000014, table=101, priority=100,ip,reg0=0x14 actions=drop",
                "cookie=0x6000000000000014, table=101, priority=100,ipv6,reg0=0x14 actions=group:33554452",
            ]
        );
        assert_eq!(g[0].id, EGRESS_IP6_GROUP_BASE + 20);
        let dropped = egress_ip_flows(
            v,
            Some(&EgressRoute::Dropped),
            Some(&EgressRoute::Dropped),
            tun,
        )
        .0;
        assert_eq!(
            dropped,
            egress_ip_flows(v, Some(&EgressRoute::Dropped), None, tun).0
        );
        // An IPv6-only node: no IPv4 row, whatever the IPv4 plan says; all dropped is the one
        // family-free row.
        let (only6, g) = egress_ip_flows(v, None, Some(&to_2), tun);
        let text: Vec<String> = only6.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 1, "{text:?}");
        assert!(
            text[0].ends_with("ipv6,reg0=0x14 actions=ct(commit),group:33554452"),
            "{text:?}"
        );
        assert_eq!(g.len(), 1);
        assert_eq!(
            egress_ip_flows(v, None, Some(&EgressRoute::Dropped), tun).0,
            dropped
        );
        for f in both.iter().chain(&v4_dropped) {
            f.validate().unwrap();
        }
    }

    #[test]
    fn marks_avoid_the_kubelet_and_kube_proxy_bits_and_stay_unique() {
        let m = |v: u32| egress_mark(Vnid::new(v).unwrap(), 14);
        assert_eq!(m(0), 0xff00_0000);
        assert_eq!(m(20), 20);
        assert_eq!(m(0x8000), 0x1000_0000);
        assert_eq!(m(0x4000), 0x0100_0000);
        assert_eq!(m(0xc000), 0x1100_0000);
        let all: std::collections::BTreeSet<u32> = (0..0x20000).map(m).collect();
        assert_eq!(all.len(), 0x20000, "one mark per VNID");
        assert!(all.iter().all(|x| x & 0xc000 == 0));
        assert_eq!(
            egress_mark_mac(Vnid::new(0x123456).unwrap()).0,
            [0x0a, 0x59, 0, 0x12, 0x34, 0x56]
        );
    }
}
