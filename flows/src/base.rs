//! The base flows of the pipeline: every table's fixed rows, derived from the node's
//! configuration alone (see `pipeline.md`, "Base flows worth spelling out").
//!
//! Per-pod, per-node and per-VNID rows are other features' business; the base set is what a node
//! has before its first pod. Table 253 carries the version marker: the mode plus a hash of the
//! text of every other base flow, so any change to the base set changes the marker (there is no
//! hand-bumped number to forget).

use std::net::{IpAddr, Ipv4Addr};

use ipnet::Ipv4Net;
use ovs::flow::{Action, Ct, CtFlag, CtState, Field, Flow, Masked, Match, Move, Nat, Subfield};

use crate::cookie;
use crate::registers::{vni_to_src_vnid, Reg};
use crate::tables::Table;

pub use crate::node::{Datapath, Mode, NodeConfig, NodeIpv4};
use tiers::policy_egress_and_commit;
pub(crate) use tiers::{
    admin_pass, admin_unpassed, admitted_reply, admitted_reply_vnid, mode_commit, pass_actions,
};
pub use tiers::{admitted_commit, ADMIN_PASSED_INGRESS, CT_MARK_ADMITTED};

mod tiers;

/// OpenFlow port of `vxlan0`.
pub const VXLAN_PORT: u32 = 1;
/// OpenFlow port of `tun0`.
pub const TUN_PORT: u32 = 2;

/// `ct_mark` bit of a connection that a pod opened to a Service and the node's kube-proxy
/// DNAT'd to a pod without SNAT (userspace datapath): its replies must go back through the
/// kernel. In subnet and multitenant mode bits 8..31 hold the client's VNID
/// ([`CT_MARK_CLIENT_VNID`]), so table 80 decides the replies with it as their destination VNID.
pub const CT_MARK_VIA_HOST: u32 = 0x1;

/// Where a via-host connection's `ct_mark` keeps the client pod's VNID: bits 8..31.
pub const CT_MARK_CLIENT_VNID: (u8, u8) = (8, 31);

pub(crate) fn net(n: &Ipv4Net) -> Masked<Ipv4Addr> {
    // A prefix of /0 would be "any": callers never pass one (config validation refuses it).
    Masked::cidr(n.network(), n.prefix_len()).unwrap_or_else(|_| Masked::exact(n.network()))
}

fn multicast() -> Masked<Ipv4Addr> {
    Masked::cidr(Ipv4Addr::new(224, 0, 0, 0), 4)
        .unwrap_or_else(|_| Masked::exact(Ipv4Addr::UNSPECIFIED))
}

fn ct_mark_bits(first: u8, last: u8) -> Subfield {
    Subfield::range(Field::CtMark, first, last).expect("ct_mark has 32 bits")
}

/// `reg4`'s bit 0, the via-host flag, as a mask (its other bits are the Admin tier's Pass
/// flags).
pub(crate) const VIA_HOST_BIT: u32 = 0x1;

/// `reg4`'s bit 0 (its other bits are the Admin tier's Pass flags).
fn via_host_bit() -> Subfield {
    Subfield::range(Reg::ViaHost.field(), 0, 0).expect("a register has 32 bits")
}

/// `ct(commit,exec(load:0x1->NXM_NX_CT_MARK[0],move:NXM_NX_REG0[0..23]->NXM_NX_CT_MARK[8..31]))`:
/// table 30 records a via-host connection with the client's VNID (subnet and multitenant mode,
/// userspace datapath).
pub(crate) fn via_host_commit() -> Ct {
    client_commit(CT_MARK_VIA_HOST.trailing_zeros() as u8)
}

/// `ct(commit,exec(load:0x1->NXM_NX_CT_MARK[bit],move:NXM_NX_REG0[0..23]->NXM_NX_CT_MARK[8..31]))`:
/// a connection recorded with one flag of `ct_mark` and its client's VNID (the via-host flag,
/// bit 0; an Admin Accept's, bit 1). The flag alone (a load, not a set_field of the whole
/// mark): the other flag may be the same connection's, set by its other commit, and a reply read
/// between the two commits of one packet must not see it cleared.
pub(crate) fn client_commit(bit: u8) -> Ct {
    let (first, last) = CT_MARK_CLIENT_VNID;
    let vnid = Subfield::range(Reg::SrcVnid.field(), 0, last - first).expect("24 bits of reg0");
    Action::load(ct_mark_bits(bit, bit), 1)
        .and_then(|mark| Ct::new().commit().exec(mark))
        .and_then(|ct| {
            Move::new(vnid, ct_mark_bits(first, last)).and_then(|m| ct.exec(Action::Move(m)))
        })
        .expect("a load and a move into ct_mark inside ct(commit) are valid")
}

/// `move:NXM_NX_CT_MARK[8..31]->NXM_NX_REGn[0..23]`: the client's VNID a connection's mark
/// recorded ([`client_commit`]), into `reg` (a Service reply's destination VNID in table 31, an
/// admitted reply's source VNID in table 27).
pub(crate) fn client_vnid_into(reg: Reg) -> Action {
    let (first, last) = CT_MARK_CLIENT_VNID;
    let to = Subfield::range(reg.field(), 0, last - first).expect("24 bits of a register");
    Action::Move(Move::new(ct_mark_bits(first, last), to).expect("24 bits on both sides"))
}

/// The commit of an allowed connection in networkpolicy mode (tables 30 and 80). On the
/// userspace datapath it copies the via-host flag (`reg4[0]`) into `ct_mark` bit 0, so a
/// Service connection is marked only where it is allowed; on the kernel datapath a plain
/// commit (the agent writes no `ct_mark` into the kernel's conntrack).
pub fn allow_commit(datapath: Datapath) -> Ct {
    match datapath {
        Datapath::System => Ct::new().commit(),
        Datapath::Netdev => Move::new(via_host_bit(), ct_mark_bits(0, 0))
            .and_then(|m| Ct::new().commit().exec(Action::Move(m)))
            .expect("a move into ct_mark inside ct(commit) is valid"),
    }
}

/// Networkpolicy and multitenant mode, tables 27 and 80: the rows that decide before any
/// policy of any tier (the node, ARP, a Service address) sit at this priority, above the Admin tier's rows (and
/// below [`crate::live_trace::COPYABLE_MAX`], so a live trace can copy them).
pub const PRIO_BEFORE_POLICY: u16 = 5500;
/// Networkpolicy mode, tables 27 and 80: replies of allowed connections, just below.
pub const PRIO_REPLY: u16 = 5400;
/// Multitenant mode, table 27: replies of connections an Admin-tier Accept admitted, which
/// take their client's VNID (above the other replies).
pub const PRIO_ADMITTED_REPLY: u16 = 5450;

pub(crate) fn flow(table: Table, priority: u16) -> Flow {
    Flow::new(table.id(), priority).cookie(cookie::BASE)
}

/// Every base flow, table 253 included.
pub fn base_flows(cfg: &NodeConfig) -> Vec<Flow> {
    let mut flows = base_flows_without_version(cfg);
    flows.push(version_flow(cfg.mode, &flows));
    flows
}

/// The version marker of a base flow set: `<mode>.<8 hex digits of a hash of the flows' text>`.
pub fn version(mode: Mode, base: &[Flow]) -> String {
    // FNV-1a 64: tiny, stable across Rust versions and platforms (std's hasher is not promised
    // to be).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for f in base.iter().filter(|f| f.table != Table::Version.id()) {
        for b in f.to_string().bytes().chain([b'\n']) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{}.{:08x}", mode.name(), (h >> 32) as u32 ^ h as u32)
}

fn version_flow(mode: Mode, base: &[Flow]) -> Flow {
    flow(Table::Version, 0).action(Action::note(version(mode, base).as_bytes()))
}

fn base_flows_without_version(cfg: &NodeConfig) -> Vec<Flow> {
    let mut f = Vec::new();
    classifier(cfg, &mut f);
    pod_entry(cfg, &mut f);
    routing(cfg, &mut f);
    delivery(cfg, &mut f);
    egress(cfg, &mut f);
    crate::ipv6::base_rows(cfg, &mut f);
    // Spoofing attempts are always logged; table 130 sends every logged decision up.
    f.extend(crate::audit::spoof_rows(
        cfg.ipv4.is_some(),
        cfg.ipv6.is_some(),
    ));
    f.extend(crate::audit::audit_table());
    f
}

/// Table 0: the classifier: untracked IP to conntrack, then sort by in_port.
fn classifier(cfg: &NodeConfig, f: &mut Vec<Flow>) {
    use Table::*;
    let v4 = cfg.ipv4.as_ref();
    if let Some(v4) = v4 {
        classifier_from_vxlan(v4, f);
    }
    f.push(flow(Classifier, 150).matching(Match::any().in_port(VXLAN_PORT)));
    let from_tun = Match::any().in_port(TUN_PORT);
    if let Some(v4) = v4 {
        classifier_from_tun(cfg, v4, f);
    }
    f.push(flow(Classifier, 150).matching(from_tun));
    if v4.is_some() {
        f.push(
            flow(Classifier, 100)
                .matching(Match::any().arp())
                .goto(PodEgressSpoofguard.id()),
        );
        f.push(
            flow(Classifier, 100)
                .matching(Match::any().ip())
                .goto(PodEgressSpoofguard.id()),
        );
    }
    f.push(flow(Classifier, 0));
}

/// Table 0's IPv4 rows for VXLAN: untracked IP to conntrack, then what comes from the cluster
/// network.
fn classifier_from_vxlan(v4: &NodeIpv4, f: &mut Vec<Flow>) {
    use Table::*;
    let local = net(&v4.local_subnet);
    f.push(
        flow(Classifier, 1000)
            .matching(
                Match::any()
                    .ip()
                    .ct_state(CtState::new().minus(CtFlag::Trk)),
            )
            .action(Action::Ct(Ct::new().table(Classifier.id()))),
    );
    for cn in v4.cluster_networks.iter().map(net) {
        let from_vxlan = Match::any().in_port(VXLAN_PORT);
        f.push(
            flow(Classifier, 200)
                .matching(from_vxlan.clone().arp().arp_spa(cn).arp_tpa(local))
                .action(vni_to_src_vnid())
                .goto(VxlanIngress.id()),
        );
        f.push(
            flow(Classifier, 200)
                .matching(from_vxlan.clone().ip().nw_src(cn))
                .action(vni_to_src_vnid())
                .goto(VxlanIngress.id()),
        );
        f.push(
            flow(Classifier, 200)
                .matching(from_vxlan.ip().nw_dst(cn))
                .action(vni_to_src_vnid())
                .goto(VxlanIngress.id()),
        );
    }
}

/// Table 0's IPv4 rows for what comes from tun0.
fn classifier_from_tun(cfg: &NodeConfig, v4: &NodeIpv4, f: &mut Vec<Flow>) {
    use Table::*;
    let gw = v4.gateway();
    let local = net(&v4.local_subnet);
    let from_tun = Match::any().in_port(TUN_PORT);
    f.push(
        flow(Classifier, 400)
            .matching(from_tun.clone().ip().nw_src(gw))
            .goto(ConntrackCommit.id()),
    );
    for cn in v4.cluster_networks.iter().map(net) {
        let hairpin =
            flow(Classifier, 300).matching(from_tun.clone().ip().nw_src(local).nw_dst(cn));
        let hairpin = match cfg.datapath {
            Datapath::System => hairpin,
            // Flag the packet; the connection is committed with the flag in `ct_mark` later,
            // once the client's VNID is known (table 30) or the ingress policy allowed it
            // (networkpolicy mode, table 80), so its replies go back out tun0.
            Datapath::Netdev => hairpin.action(Reg::ViaHost.load(1)),
        };
        f.push(hairpin.goto(ServiceReturn.id()));
    }
    f.push(flow(Classifier, 250).matching(from_tun.clone().ip().nw_dst(multicast())));
    for cn in v4.cluster_networks.iter().map(net) {
        f.push(
            flow(Classifier, 200)
                .matching(from_tun.clone().arp().arp_spa(gw).arp_tpa(cn))
                .goto(ConntrackCommit.id()),
        );
    }
    f.push(
        flow(Classifier, 200)
            .matching(from_tun.ip())
            .goto(ConntrackCommit.id()),
    );
}

/// Tables 10, 20, 25 and 26 (per-node and per-pod rows come later), 27 and 30.
fn pod_entry(cfg: &NodeConfig, f: &mut Vec<Flow>) {
    use Table::*;

    // Tables 10, 20, 25, 26: per-node and per-pod rows come later; pods may not inject VXLAN.
    f.push(flow(VxlanIngress, 0));
    if cfg.ipv4.is_some() {
        f.push(flow(PodEgressSpoofguard, 300).matching(Match::any().udp().tp_dst(cfg.vxlan_port)));
    }
    f.push(flow(PodEgressSpoofguard, 0));
    f.push(flow(ServiceReturn, 0));
    f.push(flow(SourceVnid, 0));

    if cfg.mode != Mode::NetworkPolicy && cfg.ipv4.is_some() && cfg.datapath == Datapath::Netdev {
        // A pod's connection to a Service, back from the node's DNAT: recorded with the
        // client's VNID, which table 80 checks its replies against.
        f.push(
            flow(ConntrackCommit, 300)
                .matching(Reg::ViaHost.matching_bits(Match::any().ip(), 1, VIA_HOST_BIT))
                .action(Action::Ct(via_host_commit()))
                .goto(Routing.id()),
        );
    }
    // Tables 27, 28, 30: the policy tiers and the commits in networkpolicy and multitenant
    // mode; pass through in subnet mode.
    if let (Mode::NetworkPolicy | Mode::Multitenant, Some(v4)) = (cfg.mode, &cfg.ipv4) {
        policy_egress_and_commit(cfg, v4, f);
    }
    // What no egress rule decided meets the Baseline tier (table 28).
    f.push(flow(PodEgressPolicy, 0).goto(match cfg.mode {
        Mode::Subnet => ConntrackCommit.id(),
        _ => PodEgressBaseline.id(),
    }));
    f.push(flow(PodEgressBaseline, 0).goto(ConntrackCommit.id()));
    f.push(flow(ConntrackCommit, 0).goto(Routing.id()));
}

/// Table 31: routing by destination.
fn routing(cfg: &NodeConfig, f: &mut Vec<Flow>) {
    use Table::*;
    let Some(v4) = &cfg.ipv4 else { return };
    let gw = v4.gateway();
    let local = net(&v4.local_subnet);

    // Table 31: routing.
    let tun0 = Action::Output(TUN_PORT);
    f.push(
        flow(Routing, 300)
            .matching(Match::any().arp().arp_tpa(gw))
            .action(tun0.clone()),
    );
    f.push(
        flow(Routing, 300)
            .matching(Match::any().ip().nw_dst(gw))
            .action(tun0.clone()),
    );
    f.push(service_reply_row(
        cfg,
        Match::any().ip(),
        Match::any().ip().nw_dst(local),
    ));
    f.push(
        flow(Routing, 200)
            .matching(Match::any().arp().arp_tpa(local))
            .goto(LocalArp.id()),
    );
    f.push(
        flow(Routing, 200)
            .matching(Match::any().ip().nw_dst(local))
            .goto(LocalIp.id()),
    );
    for cn in v4.cluster_networks.iter().map(net) {
        f.push(
            flow(Routing, 100)
                .matching(Match::any().arp().arp_tpa(cn))
                .goto(RemoteArp.id()),
        );
        f.push(
            flow(Routing, 100)
                .matching(Match::any().ip().nw_dst(cn))
                .goto(RemoteIp.id()),
        );
    }
    f.push(
        flow(Routing, 100)
            .matching(Match::any().ip().nw_dst(net(&v4.service_cidr)))
            .goto(Service.id()),
    );
    f.push(
        flow(Routing, 50)
            .matching(Match::any().in_port(VXLAN_PORT).ip().nw_dst(multicast()))
            .goto(MulticastLocal.id()),
    );
    f.push(
        flow(Routing, 25)
            .matching(Match::any().ip().nw_dst(multicast()))
            .goto(MulticastOut.id()),
    );
    f.push(
        flow(Routing, 0)
            .matching(Match::any().ip())
            .goto(EgressPrelude.id()),
    );
    f.push(flow(Routing, 0).matching(Match::any().arp()));
}

/// Table 31's Service reply row of one family: `family` is `ip` or `ipv6`, `to_local` that with
/// the local subnet as destination (pipeline.md, "Services").
pub(crate) fn service_reply_row(cfg: &NodeConfig, family: Match, to_local: Match) -> Flow {
    use Table::*;
    match cfg.datapath {
        // Shared conntrack: the reply of a DNAT'd connection is un-DNAT'd right here.
        Datapath::System => flow(Routing, 250)
            .matching(to_local.ct_state(CtState::new().plus(CtFlag::Rpl)))
            .action(Action::Ct(
                Ct::new().table(LocalIp.id()).nat(Nat::reverse()),
            )),
        // Separate conntrack: replies of marked connections go to the kernel through tun0,
        // from wherever they came (a local pod, or VXLAN from a pod on another node), but only
        // through table 80: the replier's VNID (reg0) against the client's, kept in the mark
        // (reg1), so a pod of another tenant cannot answer in an endpoint's name. They are
        // addressed to tun0's MAC: the kernel takes only frames for it.
        Datapath::Netdev => flow(Routing, 260)
            .matching(
                family
                    .ct_state(CtState::new().plus(CtFlag::Trk).plus(CtFlag::Rpl))
                    .ct_mark(
                        Masked::new(CT_MARK_VIA_HOST, CT_MARK_VIA_HOST).expect("a one-bit mask"),
                    ),
            )
            .action(Action::set_eth_dst(cfg.tun0_mac()))
            .action(Reg::OutPort.load(TUN_PORT))
            .action(client_vnid_into(Reg::DstVnid))
            .goto(IngressIsolation.id()),
    }
}

/// Tables 40, 50, 60, 70 and 75, and 80: the tenancy decision.
fn delivery(cfg: &NodeConfig, f: &mut Vec<Flow>) {
    use Table::*;
    let tun0 = Action::Output(TUN_PORT);

    // Tables 40, 50, 60, 70, 75.
    f.push(flow(LocalArp, 0));
    f.push(flow(RemoteArp, 0));
    f.push(flow(Service, 0).action(tun0.clone()));
    f.push(flow(LocalIp, 0));
    f.push(flow(DestinationVnid, 0));

    // Table 80: the tenancy decision (for IP from table 70 and ARP from table 40, through 75). The node
    // (tun0's gateway address) reaches every pod.
    let commit = mode_commit(cfg);
    // Networkpolicy and multitenant mode: above every policy tier.
    let (first, reply) = match cfg.mode {
        Mode::Subnet => (300, 200),
        _ => (PRIO_BEFORE_POLICY, PRIO_REPLY),
    };
    if let Some(gw) = cfg.gateway() {
        let node_row = flow(IngressIsolation, first).matching(Match::any().ip().nw_src(gw));
        f.push(
            match cfg.mode {
                // The node's connections are committed so that the pod's replies pass its
                // egress rules as replies (kubelet probes).
                Mode::Subnet => node_row,
                _ => node_row.action(commit.clone()),
            }
            .action(Reg::OutPort.output()),
        );
        f.push(
            flow(IngressIsolation, first)
                .matching(match cfg.mode {
                    // Every ARP: policies are about IP.
                    Mode::NetworkPolicy => Match::any().arp(),
                    _ => Match::any().arp().arp_spa(gw),
                })
                .action(Reg::OutPort.output()),
        );
    }
    match cfg.mode {
        Mode::Subnet => f.push(flow(IngressIsolation, 200).action(Reg::OutPort.output())),
        Mode::NetworkPolicy if cfg.ipv4.is_none() => {}
        Mode::NetworkPolicy => {
            // Replies of allowed connections; then the per-policy rows (`policy`, 100..150);
            // then every pod no policy isolates, to the Baseline tier (table 81), which
            // allows what it does not decide.
            f.push(
                flow(IngressIsolation, reply)
                    .matching(
                        Match::any()
                            .ip()
                            .ct_state(CtState::new().plus(CtFlag::Trk).plus(CtFlag::Rpl)),
                    )
                    .action(Reg::OutPort.output()),
            );
            f.push(
                flow(IngressIsolation, 50)
                    .matching(Match::any().ip())
                    .goto(IngressBaseline.id()),
            );
            f.push(
                flow(IngressBaseline, 1)
                    .matching(Match::any().ip())
                    .action(commit)
                    .action(Reg::OutPort.output()),
            );
        }
        Mode::Multitenant => {
            if cfg.ipv4.is_some() {
                // Replies skip the Admin tier and meet tenancy, as its Pass does.
                f.push(
                    flow(IngressIsolation, reply)
                        .matching(admin_unpassed(
                            Match::any()
                                .ip()
                                .ct_state(CtState::new().plus(CtFlag::Trk).plus(CtFlag::Rpl)),
                        ))
                        .actions(admin_pass()),
                );
                // What tenancy allowed is committed in table 81.
                f.push(
                    flow(IngressBaseline, 1)
                        .matching(Match::any().ip())
                        .action(commit)
                        .action(Reg::OutPort.output()),
                );
            }
            f.push(
                flow(IngressIsolation, 200)
                    .matching(Reg::SrcVnid.matching(Match::any(), 0))
                    .goto(IngressBaseline.id()),
            );
            f.push(
                flow(IngressIsolation, 200)
                    .matching(Reg::DstVnid.matching(Match::any(), 0))
                    .goto(IngressBaseline.id()),
            );
        }
    }
    f.push(flow(IngressIsolation, 0));
    f.push(match cfg.mode {
        // Reached only from the tenancy rows: ARP and neighbour discovery they allowed.
        Mode::Multitenant => flow(IngressBaseline, 0).action(Reg::OutPort.output()),
        _ => flow(IngressBaseline, 0),
    });
}

/// Tables 90 to 120: remote subnets, the egress prelude, firewall and routing, multicast.
fn egress(cfg: &NodeConfig, f: &mut Vec<Flow>) {
    use Table::*;
    let tun0 = Action::Output(TUN_PORT);

    // Tables 90..120.
    f.push(flow(RemoteIp, 0));
    let dns = match cfg.node_ip {
        IpAddr::V4(ip) => [Match::any().udp(), Match::any().tcp()].map(|l4| l4.nw_dst(ip)),
        IpAddr::V6(ip) => [Match::any().udp6(), Match::any().tcp6()].map(|l4| l4.ipv6_dst(ip)),
    };
    for to_node in dns {
        f.push(
            flow(EgressPrelude, 200)
                .matching(to_node.tp_dst(53))
                .action(tun0.clone()),
        );
    }
    f.push(flow(EgressPrelude, 0).goto(EgressFirewall.id()));
    f.push(flow(EgressFirewall, 0).goto(EgressRouting.id()));
    // Replies never take an egress IP (openshift-sdn's row, before the per-VNID rows).
    if cfg.ipv4.is_some() {
        f.push(
            flow(EgressRouting, 150)
                .matching(
                    Match::any()
                        .ip()
                        .ct_state(CtState::new().plus(CtFlag::Trk).plus(CtFlag::Rpl)),
                )
                .action(tun0.clone()),
        );
    }
    f.push(flow(EgressRouting, 0).action(tun0));
    f.push(flow(MulticastOut, 0));
    f.push(flow(MulticastLocal, 0));
}

/// The node configuration of the unit tests: netdev, the default networks, no IPv6.
#[cfg(test)]
pub(crate) fn test_config(mode: Mode) -> NodeConfig {
    NodeConfig {
        datapath: Datapath::Netdev,
        mode,
        node_ip: Ipv4Addr::new(172, 17, 0, 2).into(),
        ipv4: Some(NodeIpv4 {
            local_subnet: "10.128.0.0/23".parse().unwrap(),
            cluster_networks: vec!["10.128.0.0/14".parse().unwrap()],
            service_cidr: "172.30.0.0/16".parse().unwrap(),
        }),
        vxlan_port: 4789,
        tun0_mac: None,
        ipv6: None,
    }
}

#[cfg(test)]
mod tests;
