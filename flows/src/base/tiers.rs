//! The fixed rows of the policy tiers around the commit (tables 27, 28 and 30) in networkpolicy
//! and multitenant mode, and the pieces of the multitenant Admin tier the other base rows and
//! the policy rows share: the commit that records an admitted connection's client, the reply
//! that carries it back, the Pass bit a reply sets (docs/pipeline.md, "ClusterNetworkPolicy").

use ovs::flow::{Action, Ct, CtFlag, CtState, Flow, Masked, Match};

use super::{
    allow_commit, flow, net, Datapath, Mode, NodeConfig, NodeIpv4, PRIO_ADMITTED_REPLY,
    PRIO_BEFORE_POLICY, PRIO_REPLY,
};
use crate::registers::Reg;
use crate::tables::Table;

/// `ct_mark` bit 1 (multitenant mode): an Admin-tier Accept admitted the connection, and bits
/// 8..31 hold its client's VNID ([`CT_MARK_CLIENT_VNID`]), which its replies carry as their
/// source VNID (pipeline.md, "ClusterNetworkPolicy").
pub const CT_MARK_ADMITTED: u32 = 0x2;

/// The commit of a connection an Admin-tier Accept admitted into a local pod (multitenant
/// mode): `ct(commit,exec(load:1->NXM_NX_CT_MARK[1],move:NXM_NX_REG0[0..23]->NXM_NX_CT_MARK[8..31]))`.
/// Bit 0 (via host) is left as table 30 set it.
pub fn admitted_commit() -> Ct {
    super::client_commit(CT_MARK_ADMITTED.trailing_zeros() as u8)
}

/// `reg4=0/0x4`: the packet has not passed table 80's Admin tier yet.
pub(crate) fn admin_unpassed(m: Match) -> Match {
    Reg::ViaHost.matching_bits(m, 0, ADMIN_PASSED_INGRESS)
}

/// `load:1->NXM_NX_REG4[2],resubmit(,80)`: past table 80's Admin tier (a reply, multitenant
/// mode), to tenancy.
pub(crate) fn admin_pass() -> Vec<Action> {
    pass_actions(ADMIN_PASSED_INGRESS, Table::IngressIsolation.id())
}

/// `load:1->NXM_NX_REG4[b],resubmit(,table)` for the one bit `bits` of `reg4`: the rest of a
/// table's Admin tier passed (a Pass rule, or a reply), the table looked up again.
pub(crate) fn pass_actions(bits: u32, table: u8) -> Vec<Action> {
    vec![
        Reg::ViaHost.load_bit(bits.trailing_zeros() as u8, true),
        Action::Resubmit { table },
    ]
}

/// `reg4` bit 2: table 80's Admin tier passed (a Pass rule, or a reply in multitenant mode).
pub const ADMIN_PASSED_INGRESS: u32 = 0x4;

/// The commit of a connection allowed for good in tables 30, 80 and 81: networkpolicy mode's
/// records the via-host flag ([`allow_commit`]); multitenant mode's is plain (table 30 recorded
/// a via-host connection already, with its client's VNID).
pub(crate) fn mode_commit(cfg: &NodeConfig) -> Action {
    Action::Ct(match cfg.mode {
        Mode::NetworkPolicy => allow_commit(cfg.datapath),
        _ => Ct::new().commit(),
    })
}

/// `move:NXM_NX_CT_MARK[8..31]->NXM_NX_REG0[0..23]`: a reply of a connection an Admin-tier
/// Accept admitted takes its client's VNID as its source VNID (multitenant mode, table 27).
pub(crate) fn admitted_reply_vnid() -> Action {
    super::client_vnid_into(Reg::SrcVnid)
}

/// `ct_state=+rpl+trk,ct_mark=0x2/0x2`: a reply of a connection an Admin-tier Accept admitted.
pub(crate) fn admitted_reply(family: Match) -> Match {
    family
        .ct_state(CtState::new().plus(CtFlag::Trk).plus(CtFlag::Rpl))
        .ct_mark(Masked::new(CT_MARK_ADMITTED, CT_MARK_ADMITTED).expect("a one-bit mask"))
}

/// The fixed rows of tables 27, 28 and 30 in networkpolicy and multitenant mode
/// (docs/pipeline.md, "NetworkPolicy" and "ClusterNetworkPolicy").
pub(super) fn policy_egress_and_commit(cfg: &NodeConfig, v4: &NodeIpv4, f: &mut Vec<Flow>) {
    use Table::*;
    let gw = v4.gateway();
    let reply = CtState::new().plus(CtFlag::Trk).plus(CtFlag::Rpl);
    let new_or_est = CtState::new().plus(CtFlag::Trk).minus(CtFlag::Rpl);
    let commit = || mode_commit(cfg);
    if cfg.mode == Mode::Multitenant {
        // A reply of a connection an Admin-tier Accept admitted across tenants carries its
        // client's VNID, so the client's node (table 80) sees its own tenant's traffic.
        f.push(
            flow(PodEgressPolicy, PRIO_ADMITTED_REPLY)
                .matching(admitted_reply(Match::any().ip()))
                .action(admitted_reply_vnid())
                .goto(ConntrackCommit.id()),
        );
        // The Baseline tier decides only what leaves the cluster networks: between pods,
        // tenancy decides (on the receiving node).
        for cn in v4.cluster_networks.iter().map(net) {
            f.push(
                flow(PodEgressBaseline, PRIO_BEFORE_POLICY)
                    .matching(Match::any().ip().nw_dst(cn))
                    .goto(ConntrackCommit.id()),
            );
        }
    }
    // Table 27: a Service address is decided after the node's DNAT, when the packet comes
    // back through table 25 with the endpoint as destination; replies pass.
    f.push(
        flow(PodEgressPolicy, PRIO_BEFORE_POLICY)
            .matching(Match::any().ip().nw_dst(net(&v4.service_cidr)))
            .goto(ConntrackCommit.id()),
    );
    f.push(
        flow(PodEgressPolicy, PRIO_REPLY)
            .matching(Match::any().ip().ct_state(reply))
            .goto(ConntrackCommit.id()),
    );
    // Table 30: commit what leaves towards the node and elsewhere; a local pod's connections
    // are committed in table 80, once its ingress policy allowed them. Multitenant mode on the
    // kernel datapath leaves a pod's connections to the node (GW) to the host: committed by
    // OVS, the host could not NAT them (a hostPort or NodePort on GW), and nothing needs them
    // as replies (table 80 lets the node in first).
    if !(cfg.mode == Mode::Multitenant && cfg.datapath == Datapath::System) {
        f.push(
            flow(ConntrackCommit, 160)
                .matching(Match::any().ip().nw_dst(gw).ct_state(new_or_est))
                .action(commit())
                .goto(Routing.id()),
        );
    }
    f.push(
        flow(ConntrackCommit, 150)
            .matching(Match::any().ip().nw_dst(net(&v4.local_subnet)))
            .goto(Routing.id()),
    );
    match cfg.datapath {
        // OVS's own conntrack: everything, or the replies of connections that leave the cluster
        // network (to Services, to the outside) would meet table 80 as new.
        Datapath::Netdev => f.push(
            flow(ConntrackCommit, 100)
                .matching(Match::any().ip().ct_state(new_or_est))
                .action(commit())
                .goto(Routing.id()),
        ),
        // The kernel's conntrack, shared with iptables: only cluster-internal connections (a
        // packet committed here would skip the node's NAT), as openshift-sdn did.
        Datapath::System => {
            for src in v4.cluster_networks.iter().map(net) {
                for dst in v4.cluster_networks.iter().map(net) {
                    f.push(
                        flow(ConntrackCommit, 100)
                            .matching(
                                Match::any()
                                    .ip()
                                    .nw_src(src)
                                    .nw_dst(dst)
                                    .ct_state(new_or_est),
                            )
                            .action(commit())
                            .goto(Routing.id()),
                    );
                }
            }
        }
    }
}
