//! IPv6 in the pipeline (dual stack): the base rows a node with an IPv6 subnet adds beside its
//! IPv4 ones, and the per-pod IPv6 rows with the neighbour-discovery guard (pipeline.md, "IPv6").
//!
//! Why beside and not merged: every IPv6 row is a twin of an IPv4 row of the same table (the
//! registers after tables 20 and 25 carry ports and VNIDs, not addresses, so tables 26, 75 and
//! 80 serve both families unchanged), and a node without IPv6 keeps exactly the rows, and the
//! version marker, it had: an upgrade changes no flow of an IPv4 node.
//!
//! Neighbour discovery is to IPv6 what ARP is to IPv4, and is where IPv6 isolation usually
//! breaks, so it gets its own rows:
//! - a pod may send a solicitation only from its own address with its own MAC as source
//!   link-layer address, and an advertisement only for its own address with its own MAC (or none)
//!   as target link-layer address (Open vSwitch reads a missing or duplicated option as zero and
//!   then zeroes the target too, so a forged second option cannot pass as "none");
//! - router solicitations, advertisements and redirects from pods are dropped, as are
//!   solicitations from `::` (duplicate address detection: pods' addresses are added without it);
//!   MLD is dropped from anyone in table 0, before conntrack;
//! - a solicitation is routed by its target as ARP is by `arp_tpa` (local pod, remote subnet over
//!   VXLAN, the gateway on tun0) and then meets table 80 like ARP: no ND between tenants.
//!
//! Pods have no link-local address (their interfaces are made with `addrgenmode none`) and use
//! their global address for ND (their routes lead only to global addresses, and Linux solicits
//! from the source of the packet waiting). The node's tun0 may solicit from a link-local address
//! (when it forwards a packet from elsewhere), and which one the kernel gave tun0 depends on its
//! `addr_gen_mode`, so every link-local address (`fe80::/10`) counts as the node's, as the
//! gateway's does: only the node sends from tun0, and no pod has one.

use std::net::Ipv6Addr;

use ipnet::Ipv6Net;
use ovs::flow::{Action, Ct, CtFlag, CtState, Flow, MacAddr, Masked, Match};

use crate::base::{
    admin_pass, admin_unpassed, admitted_reply, admitted_reply_vnid, flow, mode_commit,
    service_reply_row, via_host_commit, Datapath, Mode, NodeConfig, PRIO_ADMITTED_REPLY,
    PRIO_BEFORE_POLICY, PRIO_REPLY, TUN_PORT, VIA_HOST_BIT, VXLAN_PORT,
};
use crate::registers::{vni_to_src_vnid, Reg};
use crate::tables::Table;

/// ICMPv6 types the pipeline names: router solicitation and advertisement, neighbour
/// solicitation and advertisement, redirect; MLD query, report, done and v2 report.
pub mod icmp6 {
    /// Router solicitation.
    pub const ROUTER_SOLICIT: u8 = 133;
    /// Router advertisement.
    pub const ROUTER_ADVERT: u8 = 134;
    /// Neighbour solicitation.
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    /// Neighbour advertisement.
    pub const NEIGHBOR_ADVERT: u8 = 136;
    /// Redirect.
    pub const REDIRECT: u8 = 137;
    /// MLD query, report (v1), done, report (v2).
    pub const MLD: [u8; 4] = [130, 131, 132, 143];
}

/// What the IPv6 rows of a dual-stack node depend on.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct NodeIpv6 {
    /// This node's IPv6 pod subnet; its first host address is the gateway on tun0.
    pub local_subnet: Ipv6Net,
    /// The cluster's IPv6 network.
    pub cluster_network: Ipv6Net,
    /// The IPv6 service network, if the cluster has one.
    pub service_cidr: Option<Ipv6Net>,
}

impl NodeIpv6 {
    /// The IPv6 gateway: the first host address of the local subnet (`::1`).
    pub fn gateway(&self) -> Ipv6Addr {
        Ipv6Addr::from(u128::from(self.local_subnet.network()) + 1)
    }
}

/// The link-local address the kernel gives an interface with MAC `mac` (modified EUI-64,
/// RFC 4291 appendix A): `fe80::` and the MAC with `ff:fe` in the middle and the U/L bit flipped.
pub fn link_local(mac: MacAddr) -> Ipv6Addr {
    let m = mac.octets();
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        m[0] ^ 0x02,
        m[1],
        m[2],
        0xff,
        0xfe,
        m[3],
        m[4],
        m[5],
    ])
}

pub(crate) fn net6(n: &Ipv6Net) -> Masked<Ipv6Addr> {
    // A prefix of /0 would be "any": validation refuses such a network.
    Masked::cidr6(n.network(), n.prefix_len()).unwrap_or_else(|_| Masked::exact(n.network()))
}

/// `fe80::/10`: link-local addresses, which only the node has (see the module docs).
fn link_local_net() -> Masked<Ipv6Addr> {
    Masked::cidr6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10)
        .unwrap_or_else(|_| Masked::exact(Ipv6Addr::UNSPECIFIED))
}

fn multicast6() -> Masked<Ipv6Addr> {
    Masked::cidr6(Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8)
        .unwrap_or_else(|_| Masked::exact(Ipv6Addr::UNSPECIFIED))
}

pub(crate) fn solicitation() -> Match {
    Match::any()
        .icmp6()
        .icmp_type(icmp6::NEIGHBOR_SOLICIT)
        .icmp_code(0)
}

/// A solicitation sent to a solicited-node group (`ff02::1:ff00:0/104`): address resolution,
/// routed by its target as ARP is by `arp_tpa`.
fn multicast_solicitation() -> Match {
    let group = Masked::cidr6(Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00, 0), 104)
        .unwrap_or_else(|_| Masked::exact(Ipv6Addr::UNSPECIFIED));
    solicitation().ipv6_dst(group)
}

pub(crate) fn advertisement() -> Match {
    Match::any()
        .icmp6()
        .icmp_type(icmp6::NEIGHBOR_ADVERT)
        .icmp_code(0)
}

/// The IPv6 base rows of a dual-stack node, in table order (none without `cfg.ipv6`).
pub(crate) fn base_rows(cfg: &NodeConfig, f: &mut Vec<Flow>) {
    let Some(v6) = cfg.ipv6 else { return };
    classifier(cfg, &v6, f);
    pod_entry(cfg, &v6, f);
    routing(cfg, &v6, f);
    delivery(cfg, &v6, f);
    f.push(
        flow(Table::EgressRouting, 150)
            .matching(
                Match::any()
                    .ipv6()
                    .ct_state(CtState::new().plus(CtFlag::Trk).plus(CtFlag::Rpl)),
            )
            .action(Action::Output(TUN_PORT)),
    );
}

/// Table 0: conntrack, then sort by in_port (the twins of the IPv4 rows).
fn classifier(cfg: &NodeConfig, v6: &NodeIpv6, f: &mut Vec<Flow>) {
    use Table::*;
    let cn = net6(&v6.cluster_network);
    let local = net6(&v6.local_subnet);
    // MLD, from anyone, before conntrack: nothing on br0 listens to it (multicast is flooded
    // within the tenant, not snooped), and every dual-stack pod's kernel sends two reports for
    // its solicited-node group when it gets its address. Matched on the ICMPv6 type alone, these
    // rows take one datapath flow for every port, not a conntrack pass and an upcall per pod.
    for t in icmp6::MLD {
        f.push(flow(Classifier, 1010).matching(Match::any().icmp6().icmp_type(t)));
    }
    f.push(
        flow(Classifier, 1000)
            .matching(
                Match::any()
                    .ipv6()
                    .ct_state(CtState::new().minus(CtFlag::Trk)),
            )
            .action(Action::Ct(Ct::new().table(Classifier.id()))),
    );
    let from_vxlan = Match::any().in_port(VXLAN_PORT).ipv6();
    for m in [from_vxlan.clone().ipv6_src(cn), from_vxlan.ipv6_dst(cn)] {
        f.push(
            flow(Classifier, 200)
                .matching(m)
                .action(vni_to_src_vnid())
                .goto(VxlanIngress.id()),
        );
    }
    let from_tun = Match::any().in_port(TUN_PORT).ipv6();
    for node in [Masked::exact(v6.gateway()), link_local_net()] {
        f.push(
            flow(Classifier, 400)
                .matching(from_tun.clone().ipv6_src(node))
                .goto(ConntrackCommit.id()),
        );
    }
    let hairpin = flow(Classifier, 300).matching(from_tun.clone().ipv6_src(local).ipv6_dst(cn));
    let hairpin = match cfg.datapath {
        Datapath::System => hairpin,
        Datapath::Netdev => hairpin.action(Reg::ViaHost.load(1)),
    };
    f.push(hairpin.goto(ServiceReturn.id()));
    f.push(flow(Classifier, 250).matching(from_tun.clone().ipv6_dst(multicast6())));
    f.push(
        flow(Classifier, 200)
            .matching(from_tun)
            .goto(ConntrackCommit.id()),
    );
    f.push(
        flow(Classifier, 100)
            .matching(Match::any().ipv6())
            .goto(PodEgressSpoofguard.id()),
    );
}

/// Table 20's guard rows (pods may not inject VXLAN, nor send router messages, nor ND
/// their per-pod rows do not allow) and tables 27 and 30.
fn pod_entry(cfg: &NodeConfig, v6: &NodeIpv6, f: &mut Vec<Flow>) {
    use Table::*;
    f.push(flow(PodEgressSpoofguard, 300).matching(Match::any().udp6().tp_dst(cfg.vxlan_port)));
    let dropped = [
        icmp6::ROUTER_SOLICIT,
        icmp6::ROUTER_ADVERT,
        icmp6::NEIGHBOR_SOLICIT,
        icmp6::NEIGHBOR_ADVERT,
        icmp6::REDIRECT,
    ];
    for t in dropped {
        f.push(flow(PodEgressSpoofguard, 105).matching(Match::any().icmp6().icmp_type(t)));
    }
    if cfg.mode != Mode::NetworkPolicy && cfg.datapath == Datapath::Netdev {
        f.push(
            flow(ConntrackCommit, 300)
                .matching(Reg::ViaHost.matching_bits(Match::any().ipv6(), 1, VIA_HOST_BIT))
                .action(Action::Ct(via_host_commit()))
                .goto(Routing.id()),
        );
    }
    if cfg.mode != Mode::Subnet {
        policy_tiers(cfg, v6, f);
    }
}

/// Networkpolicy and multitenant mode's IPv6 rows of tables 27, 28 and 30.
fn policy_tiers(cfg: &NodeConfig, v6: &NodeIpv6, f: &mut Vec<Flow>) {
    use Table::*;
    let reply = CtState::new().plus(CtFlag::Trk).plus(CtFlag::Rpl);
    let new_or_est = CtState::new().plus(CtFlag::Trk).minus(CtFlag::Rpl);
    let commit = || mode_commit(cfg);
    if cfg.mode == Mode::Multitenant {
        f.push(
            flow(PodEgressPolicy, PRIO_ADMITTED_REPLY)
                .matching(admitted_reply(Match::any().ipv6()))
                .action(admitted_reply_vnid())
                .goto(ConntrackCommit.id()),
        );
        f.push(
            flow(PodEgressBaseline, PRIO_BEFORE_POLICY)
                .matching(Match::any().ipv6().ipv6_dst(net6(&v6.cluster_network)))
                .goto(ConntrackCommit.id()),
        );
    }
    if let Some(svc) = &v6.service_cidr {
        f.push(
            flow(PodEgressPolicy, PRIO_BEFORE_POLICY)
                .matching(Match::any().ipv6().ipv6_dst(net6(svc)))
                .goto(ConntrackCommit.id()),
        );
    }
    // Neighbour discovery is not policy (the pod's ND rows of table 20 checked it), as ARP is
    // not: an isolated pod still resolves its neighbours.
    for nd in [solicitation(), advertisement()] {
        f.push(
            flow(PodEgressPolicy, PRIO_BEFORE_POLICY)
                .matching(nd)
                .goto(ConntrackCommit.id()),
        );
    }
    f.push(
        flow(PodEgressPolicy, PRIO_REPLY)
            .matching(Match::any().ipv6().ct_state(reply))
            .goto(ConntrackCommit.id()),
    );
    // As IPv4 (crate::base::tiers): not in multitenant mode on the kernel datapath.
    if !(cfg.mode == Mode::Multitenant && cfg.datapath == Datapath::System) {
        f.push(
            flow(ConntrackCommit, 160)
                .matching(
                    Match::any()
                        .ipv6()
                        .ipv6_dst(v6.gateway())
                        .ct_state(new_or_est),
                )
                .action(commit())
                .goto(Routing.id()),
        );
    }
    f.push(
        flow(ConntrackCommit, 150)
            .matching(Match::any().ipv6().ipv6_dst(net6(&v6.local_subnet)))
            .goto(Routing.id()),
    );
    let leaving = match cfg.datapath {
        Datapath::Netdev => Match::any().ipv6(),
        Datapath::System => Match::any()
            .ipv6()
            .ipv6_src(net6(&v6.cluster_network))
            .ipv6_dst(net6(&v6.cluster_network)),
    };
    f.push(
        flow(ConntrackCommit, 100)
            .matching(leaving.ct_state(new_or_est))
            .action(commit())
            .goto(Routing.id()),
    );
}

/// Table 31: routing by destination, and neighbour solicitations by their target.
fn routing(cfg: &NodeConfig, v6: &NodeIpv6, f: &mut Vec<Flow>) {
    use Table::*;
    let tun0 = Action::Output(TUN_PORT);
    let local = net6(&v6.local_subnet);
    let cn = net6(&v6.cluster_network);
    for node in [Masked::exact(v6.gateway()), link_local_net()] {
        f.push(
            flow(Routing, 300)
                .matching(multicast_solicitation().nd_target(node))
                .action(tun0.clone()),
        );
        f.push(
            flow(Routing, 300)
                .matching(Match::any().ipv6().ipv6_dst(node))
                .action(tun0.clone()),
        );
    }
    f.push(service_reply_row(
        cfg,
        Match::any().ipv6(),
        Match::any().ipv6().ipv6_dst(local),
    ));
    f.push(
        flow(Routing, 200)
            .matching(multicast_solicitation().nd_target(local))
            .goto(LocalArp.id()),
    );
    f.push(
        flow(Routing, 200)
            .matching(Match::any().ipv6().ipv6_dst(local))
            .goto(LocalIp.id()),
    );
    // The node's own solicitations for a pod on another node (its kernel forwarding to one: a
    // reply de-SNATed from an egress IP, a Service's remote endpoint) leave tun0 from a
    // link-local source, which the other node takes from VXLAN only from the cluster network
    // and which the pod could not answer across nodes. They leave with tun0's global address
    // instead (OVS fixes the ICMPv6 checksum), so the pod's advertisement comes back to it
    // through table 90 like any reply; by target, so unreachability probes (unicast) too.
    let from_gateway =
        ovs::flow::SetField::new(ovs::flow::Field::Ipv6Src, u128::from(v6.gateway()))
            .map(Action::SetField);
    if let Ok(set_src) = from_gateway {
        f.push(
            flow(Routing, 150)
                .matching(
                    solicitation()
                        .in_port(TUN_PORT)
                        .ipv6_src(link_local_net())
                        .nd_target(cn),
                )
                .action(set_src)
                .goto(RemoteArp.id()),
        );
    }
    f.push(
        flow(Routing, 100)
            .matching(multicast_solicitation().nd_target(cn))
            .goto(RemoteArp.id()),
    );
    f.push(
        flow(Routing, 100)
            .matching(Match::any().ipv6().ipv6_dst(cn))
            .goto(RemoteIp.id()),
    );
    if let Some(svc) = &v6.service_cidr {
        f.push(
            flow(Routing, 100)
                .matching(Match::any().ipv6().ipv6_dst(net6(svc)))
                .goto(Service.id()),
        );
    }
    // A solicitation to a group for anything else, and advertisements to a group (unsolicited
    // ones), go nowhere: no pod owns such an address, and a pod's neighbours learn it when they
    // ask. A unicast solicitation (neighbour unreachability detection) follows its destination
    // like any packet, below.
    f.push(flow(Routing, 60).matching(solicitation().ipv6_dst(multicast6())));
    f.push(flow(Routing, 60).matching(advertisement().ipv6_dst(multicast6())));
    f.push(
        flow(Routing, 50)
            .matching(
                Match::any()
                    .in_port(VXLAN_PORT)
                    .ipv6()
                    .ipv6_dst(multicast6()),
            )
            .goto(MulticastLocal.id()),
    );
    f.push(
        flow(Routing, 25)
            .matching(Match::any().ipv6().ipv6_dst(multicast6()))
            .goto(MulticastOut.id()),
    );
    f.push(
        flow(Routing, 0)
            .matching(Match::any().ipv6())
            .goto(EgressPrelude.id()),
    );
}

/// Table 80's IPv6 rows: the node reaches every pod (from the gateway address, and ND from
/// tun0's link-local address); in networkpolicy mode ND is not policy, replies pass, and pods
/// no policy isolates are reached.
fn delivery(cfg: &NodeConfig, v6: &NodeIpv6, f: &mut Vec<Flow>) {
    use Table::*;
    let commit = mode_commit(cfg);
    let from_node = Match::any().in_port(TUN_PORT).ipv6();
    // Networkpolicy and multitenant mode: above every policy tier.
    let (first, reply) = match cfg.mode {
        Mode::Subnet => (300, 200),
        _ => (PRIO_BEFORE_POLICY, PRIO_REPLY),
    };
    let node_row = flow(IngressIsolation, first).matching(from_node.clone().ipv6_src(v6.gateway()));
    f.push(
        match cfg.mode {
            Mode::Subnet => node_row,
            _ => node_row.action(commit.clone()),
        }
        .action(Reg::OutPort.output()),
    );
    f.push(
        flow(IngressIsolation, first)
            .matching(from_node.ipv6_src(link_local_net()))
            .action(Reg::OutPort.output()),
    );
    if cfg.mode == Mode::NetworkPolicy {
        for nd in [solicitation(), advertisement()] {
            f.push(
                flow(IngressIsolation, first)
                    .matching(nd)
                    .action(Reg::OutPort.output()),
            );
        }
        f.push(
            flow(IngressIsolation, reply)
                .matching(
                    Match::any()
                        .ipv6()
                        .ct_state(CtState::new().plus(CtFlag::Trk).plus(CtFlag::Rpl)),
                )
                .action(Reg::OutPort.output()),
        );
        f.push(
            flow(IngressIsolation, 50)
                .matching(Match::any().ipv6())
                .goto(IngressBaseline.id()),
        );
        f.push(
            flow(IngressBaseline, 1)
                .matching(Match::any().ipv6())
                .action(commit)
                .action(Reg::OutPort.output()),
        );
    } else if cfg.mode == Mode::Multitenant {
        // As IPv4 (crate::base): replies skip the Admin tier and meet tenancy, and table 81
        // commits what tenancy allowed. Neighbour discovery is not policy (table 20 checked
        // it): it skips the Admin tier too, as ARP does (ARP is no `ip`), and meets tenancy.
        for nd in [solicitation(), advertisement()] {
            f.push(
                flow(IngressIsolation, first)
                    .matching(admin_unpassed(nd))
                    .actions(admin_pass()),
            );
        }
        f.push(
            flow(IngressIsolation, reply)
                .matching(admin_unpassed(
                    Match::any()
                        .ipv6()
                        .ct_state(CtState::new().plus(CtFlag::Trk).plus(CtFlag::Rpl)),
                ))
                .actions(admin_pass()),
        );
        // Neighbour discovery tenancy allowed is delivered uncommitted (no connection).
        for nd in [solicitation(), advertisement()] {
            f.push(
                flow(IngressBaseline, 2)
                    .matching(nd)
                    .action(Reg::OutPort.output()),
            );
        }
        f.push(
            flow(IngressBaseline, 1)
                .matching(Match::any().ipv6())
                .action(commit)
                .action(Reg::OutPort.output()),
        );
    }
}

/// The per-pod IPv6 rows (ofport P, MAC M, address A, cookie C): the egress guard and ND guard
/// in table 20, the service hairpin in 25, delivery of solicitations in 40 and of IPv6 in 70.
/// Tables 26 and 75 (the port's VNID) are the pod's IPv4 rows, shared.
pub(crate) fn pod_rows(
    ofport: u32,
    mac: MacAddr,
    ip: Ipv6Addr,
    cookie: u64,
    egress_meter: Option<u32>,
) -> Vec<Flow> {
    let f = |table: Table, priority: u16| Flow::new(table.id(), priority).cookie(cookie);
    let from_pod = |m: Match| m.in_port(ofport).dl_src(mac).ipv6_src(ip);
    let noted = |fl: Flow| {
        fl.action(Reg::SrcPort.load(ofport))
            .goto(Table::SourceVnid.id())
    };
    vec![
        noted(f(Table::PodEgressSpoofguard, 110).matching(from_pod(solicitation()).nd_sll(mac))),
        noted(
            f(Table::PodEgressSpoofguard, 110)
                .matching(from_pod(advertisement()).nd_target(ip).nd_tll(mac)),
        ),
        noted(
            f(Table::PodEgressSpoofguard, 110).matching(
                from_pod(advertisement())
                    .nd_target(ip)
                    .nd_tll(MacAddr([0; 6])),
            ),
        ),
        noted(
            f(Table::PodEgressSpoofguard, 100)
                .matching(from_pod(Match::any().ipv6()))
                .actions(egress_meter.map(Action::Meter)),
        ),
        noted(f(Table::ServiceReturn, 100).matching(Match::any().ipv6().ipv6_src(ip))),
        f(Table::LocalArp, 100)
            .matching(solicitation().nd_target(ip))
            .action(Reg::OutPort.load(ofport))
            .goto(Table::DestinationVnid.id()),
        f(Table::LocalIp, 100)
            .matching(Match::any().ipv6().ipv6_dst(ip))
            .action(Reg::OutPort.load(ofport))
            .goto(Table::DestinationVnid.id()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::test_config as config;

    fn dual(mode: Mode, datapath: Datapath) -> NodeConfig {
        NodeConfig {
            datapath,
            ipv6: Some(NodeIpv6 {
                local_subnet: "fd01:0:0:5::/64".parse().unwrap(),
                cluster_network: "fd01::/48".parse().unwrap(),
                service_cidr: Some("fd02::/112".parse().unwrap()),
            }),
            ..config(mode)
        }
    }

    /// An IPv6-only node: the IPv6 side alone, an IPv6 underlay address.
    pub(crate) fn ipv6_only(mode: Mode, datapath: Datapath) -> NodeConfig {
        NodeConfig {
            node_ip: "fd00:17::2".parse().unwrap(),
            ipv4: None,
            ..dual(mode, datapath)
        }
    }

    #[test]
    fn an_ipv6_only_node_has_no_ipv4_row_and_every_table_but_111() {
        for mode in [Mode::Subnet, Mode::Multitenant, Mode::NetworkPolicy] {
            for datapath in [Datapath::System, Datapath::Netdev] {
                let only = crate::base_flows(&ipv6_only(mode, datapath));
                for f in &only {
                    f.validate().unwrap_or_else(|e| panic!("{f}: {e}"));
                    assert!(
                        !matches!(f.matches.eth_type, Some(0x0800 | 0x0806)),
                        "{mode:?} {datapath:?}: an IPv4 row: {f}"
                    );
                }
                for t in Table::ALL {
                    let has = only.iter().any(|f| f.table == t.id());
                    assert_eq!(has, t != Table::MulticastRemote, "table {}", t.name());
                }
                // Every IPv6 row of the dual-stack node is there, and the family-free rows, but
                // for tun0's MAC (from the IPv6 gateway here).
                let dual = crate::base_flows(&dual(mode, datapath));
                let text_of = |f: &Flow| {
                    f.to_string()
                        .replace("0a:58:0a:80:00:01", "TUN0")
                        .replace("0a:58:00:00:00:01", "TUN0")
                };
                let only_text: Vec<String> = only.iter().map(text_of).collect();
                for f in dual.iter().filter(|f| f.table != Table::Version.id()) {
                    let v4 = matches!(f.matches.eth_type, Some(0x0800 | 0x0806));
                    let kept = only_text.contains(&text_of(f));
                    assert_eq!(kept, !v4, "{mode:?} {datapath:?}: {f}");
                }
                let text: Vec<String> = only.iter().map(ToString::to_string).collect();
                for l4 in ["udp6", "tcp6"] {
                    let want = format!(
                        "cookie=0x1, table=99, priority=200,{l4},ipv6_dst=fd00:17::2,tp_dst=53 actions=output:2"
                    );
                    assert!(text.contains(&want), "{want}: {text:#?}");
                }
                assert_ne!(
                    crate::base::version(mode, &only),
                    crate::base::version(mode, &dual)
                );
            }
        }
        // tun0's MAC comes from the IPv6 gateway: 0a:58 and its last four bytes.
        assert_eq!(
            ipv6_only(Mode::Multitenant, Datapath::Netdev)
                .tun0_mac()
                .to_string(),
            "0a:58:00:00:00:01"
        );
    }

    #[test]
    fn link_local_is_the_kernels_eui64() {
        // `ip -6 addr` of a veth with MAC 0a:58:0a:80:00:05 shows fe80::858:aff:fe80:5.
        let mac: MacAddr = "0a:58:0a:80:00:05".parse().unwrap();
        assert_eq!(link_local(mac).to_string(), "fe80::858:aff:fe80:5");
    }

    #[test]
    fn an_ipv4_node_has_no_ipv6_row_and_a_dual_stack_node_adds_only_ipv6_rows() {
        for mode in [Mode::Subnet, Mode::Multitenant, Mode::NetworkPolicy] {
            for datapath in [Datapath::System, Datapath::Netdev] {
                let v4 = crate::base_flows(&NodeConfig {
                    datapath,
                    ..config(mode)
                });
                assert!(v4.iter().all(|f| f.matches.eth_type != Some(0x86dd)));
                let both = crate::base_flows(&dual(mode, datapath));
                let extra: Vec<&Flow> = both
                    .iter()
                    .filter(|f| !v4.contains(f) && f.table != Table::Version.id())
                    .collect();
                assert!(!extra.is_empty());
                for f in &extra {
                    f.validate().unwrap_or_else(|e| panic!("{f}: {e}"));
                    assert_eq!(f.matches.eth_type, Some(0x86dd), "{f}");
                }
                let kept = v4.iter().filter(|f| f.table != Table::Version.id());
                assert!(
                    kept.clone().all(|f| both.contains(f)),
                    "IPv4 rows unchanged"
                );
            }
        }
    }

    #[test]
    fn pod_rows_guard_nd_and_route_like_arp() {
        let mac: MacAddr = "0a:58:0a:80:00:05".parse().unwrap();
        let ip: Ipv6Addr = "fd01:0:0:5::5".parse().unwrap();
        let rows: Vec<String> = pod_rows(7, mac, ip, 0x2a, None)
            .iter()
            .map(ToString::to_string)
            .collect();
        let want = [
            "cookie=0x2a, table=20, priority=110,icmp6,in_port=7,dl_src=0a:58:0a:80:00:05,ipv6_src=fd01:0:0:5::5,icmp_type=135,icmp_code=0,nd_sll=0a:58:0a:80:00:05 actions=load:0x7->NXM_NX_REG3[],goto_table:26",
            "cookie=0x2a, table=20, priority=110,icmp6,in_port=7,dl_src=0a:58:0a:80:00:05,ipv6_src=fd01:0:0:5::5,icmp_type=136,icmp_code=0,nd_target=fd01:0:0:5::5,nd_tll=0a:58:0a:80:00:05 actions=load:0x7->NXM_NX_REG3[],goto_table:26",
            "cookie=0x2a, table=20, priority=110,icmp6,in_port=7,dl_src=0a:58:0a:80:00:05,ipv6_src=fd01:0:0:5::5,icmp_type=136,icmp_code=0,nd_target=fd01:0:0:5::5,nd_tll=00:00:00:00:00:00 actions=load:0x7->NXM_NX_REG3[],goto_table:26",
            "cookie=0x2a, table=20, priority=100,ipv6,in_port=7,dl_src=0a:58:0a:80:00:05,ipv6_src=fd01:0:0:5::5 actions=load:0x7->NXM_NX_REG3[],goto_table:26",
            "cookie=0x2a, table=25, priority=100,ipv6,ipv6_src=fd01:0:0:5::5 actions=load:0x7->NXM_NX_REG3[],goto_table:26",
            "cookie=0x2a, table=40, priority=100,icmp6,icmp_type=135,icmp_code=0,nd_target=fd01:0:0:5::5 actions=load:0x7->NXM_NX_REG2[],goto_table:75",
            "cookie=0x2a, table=70, priority=100,ipv6,ipv6_dst=fd01:0:0:5::5 actions=load:0x7->NXM_NX_REG2[],goto_table:75",
        ];
        assert_eq!(rows, want);
    }

    #[test]
    fn nd_from_pods_is_dropped_unless_a_pod_row_allows_it() {
        let base = crate::base_flows(&dual(Mode::Multitenant, Datapath::Netdev));
        let guard: Vec<String> = base
            .iter()
            .filter(|f| f.table == 20 && f.priority == 105)
            .map(|f| f.matches.icmp_type.unwrap().to_string())
            .collect();
        assert_eq!(guard, ["133", "134", "135", "136", "137"]);
        // MLD goes in table 0, before conntrack, whoever sends it.
        let mld: Vec<String> = base
            .iter()
            .filter(|f| f.table == 0 && f.priority == 1010)
            .map(|f| f.to_string())
            .collect();
        assert_eq!(
            mld,
            [130, 131, 132, 143]
                .map(|t| format!("cookie=0x1, priority=1010,icmp6,icmp_type={t} actions=drop"))
        );
        // The pod's own ND rows outrank the guard; its general row does not.
        let pod = pod_rows(
            7,
            MacAddr([0x0a, 0x58, 10, 128, 0, 5]),
            "fd01::5".parse().unwrap(),
            1,
            None,
        );
        assert!(pod
            .iter()
            .filter(|f| f.matches.icmp_type.is_some() && f.table == 20)
            .all(|f| f.priority > 105));
        assert!(pod
            .iter()
            .any(|f| f.table == 20 && f.matches.icmp_type.is_none() && f.priority < 105));
    }
}
