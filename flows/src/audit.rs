//! The audit rows: how a decision of the pipeline (a tenant boundary, a NetworkPolicy, an
//! egress firewall rule, a spoofing attempt) reaches the agent as one copy of the packet,
//! without the verdict ever depending on it.
//!
//! A decision row that is logged first writes what decided into `reg5` ([`Reg::AuditCode`]:
//! the kind of decision and its verdict, and for the egress firewall the rule's index) and,
//! for a NetworkPolicy rule, the rule's conjunction id into `reg6` ([`Reg::AuditRule`]), then
//! `resubmit(,130)`, then does what it would have done anyway (drop, or commit and output).
//! Table 130 ([`Table::Audit`]) sends a copy up with `controller(userdata=A1,meter_id=M)`:
//! the copy, not the packet, meets the meter, so a flood is cut to the meter's rate at the
//! datapath while the traffic itself passes or drops exactly as without logging (a meter on
//! the row itself would throttle allowed traffic). The agent reads the registers and the
//! packet from the packet-in.
//!
//! **Fairness.** Table 130 picks the meter by the low 6 bits of the source VNID (`reg0`), one
//! meter per bucket and verdict: a namespace flooding denied packets fills its own bucket and
//! no other namespace's lines are lost with it (VNIDs are handed out in sequence, so 64
//! namespaces in a row never share one; allowed and denied lines never share one). Spoofing
//! attempts, before the pipeline knows a VNID, have a meter of their own.
//!
//! **One line per connection.** Where the pipeline commits allowed connections (networkpolicy
//! mode), their logging rows match `ct_state=+new+trk` only. Elsewhere (multitenant tenancy,
//! the egress firewall) nothing is committed and a logging row must not commit either (that
//! would change what later rows see), so every packet is copied, metered; the agent folds the
//! copies of one 5-tuple into one line and a count, as it does a denied flood.

use ovs::flow::{Action, CtFlag, CtState, Flow, Masked, Match};

use crate::cookie::{self, Feature};
use crate::registers::Reg;
use crate::tables::Table;

/// The `userdata` of every audit copy (a live trace's copies carry another).
pub const AUDIT_USERDATA: [u8; 2] = *b"A1";
/// The bytes of each copy sent up: enough for Ethernet, IPv6 and a TCP header.
pub const AUDIT_MAX_LEN: u16 = 128;
/// Meter buckets per verdict (the low bits of the source VNID).
pub const BUCKETS: u32 = 64;
/// The first audit meter id: above the pods' egress meters (1..=65536).
pub const METER_BASE: u32 = 0x10_0000;
/// The meter of spoofing attempts.
pub const SPOOF_METER: u32 = METER_BASE + 2 * BUCKETS;
/// The cookie of table 130's rows and the spoofing rows (base rows: always there).
pub const AUDIT_BASE_COOKIE: u64 = cookie::BASE;

/// The meter of a verdict's bucket.
pub const fn meter_id(allow: bool, bucket: u32) -> u32 {
    METER_BASE + if allow { BUCKETS } else { 0 } + bucket % BUCKETS
}

/// Whether `id` is one of the audit meters (table 130's and the spoofing rows').
pub const fn is_audit_meter(id: u32) -> bool {
    id >= METER_BASE && id <= SPOOF_METER
}

/// What decided, as `reg5` carries it: bits 0..7 the [`Decision`], 8..31 a detail (the
/// egress firewall rule's index).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum Decision {
    /// VNID isolation dropped it: different tenants.
    TenancyDeny,
    /// VNID isolation let it through (same tenant, or a global namespace).
    TenancyAllow,
    /// No NetworkPolicy rule allowed it into a pod that policies isolate (default deny).
    PolicyIngressDeny,
    /// A NetworkPolicy ingress rule allowed it (`reg6`: the rule's conjunction id).
    PolicyIngressAllow,
    /// No NetworkPolicy rule allowed it out of a pod that policies isolate.
    PolicyEgressDeny,
    /// A NetworkPolicy egress rule allowed it (`reg6`: the rule's conjunction id).
    PolicyEgressAllow,
    /// An egress firewall rule (or the firewall's fail-closed row) dropped it.
    FirewallDeny,
    /// An egress firewall rule allowed it.
    FirewallAllow,
    /// A pod sent with an address or port that is not its own.
    Spoof,
    /// A ClusterNetworkPolicy ingress Deny rule dropped it (`reg6`: the rule's conjunction id).
    ClusterIngressDeny,
    /// A ClusterNetworkPolicy ingress Accept (or Baseline Pass) let it in (`reg6` likewise).
    ClusterIngressAllow,
    /// A ClusterNetworkPolicy egress Deny rule dropped it.
    ClusterEgressDeny,
    /// A ClusterNetworkPolicy egress Accept (or Baseline Pass) let it out.
    ClusterEgressAllow,
    /// An Admin-tier ingress Pass handed it to the next step.
    ClusterIngressPass,
    /// An Admin-tier egress Pass handed it to the next step.
    ClusterEgressPass,
}

impl Decision {
    /// Every decision.
    pub const ALL: [Decision; 15] = [
        Decision::TenancyDeny,
        Decision::TenancyAllow,
        Decision::PolicyIngressDeny,
        Decision::PolicyIngressAllow,
        Decision::PolicyEgressDeny,
        Decision::PolicyEgressAllow,
        Decision::FirewallDeny,
        Decision::FirewallAllow,
        Decision::Spoof,
        Decision::ClusterIngressDeny,
        Decision::ClusterIngressAllow,
        Decision::ClusterEgressDeny,
        Decision::ClusterEgressAllow,
        Decision::ClusterIngressPass,
        Decision::ClusterEgressPass,
    ];

    /// The code in bits 0..7 of `reg5`: bit 0 is the verdict (1 allow; a Pass decides
    /// nothing yet and is metered with the allows), so table 130 picks the meter with one
    /// masked match.
    pub const fn code(self) -> u8 {
        match self {
            Decision::TenancyDeny => 0x02,
            Decision::TenancyAllow => 0x03,
            Decision::PolicyIngressDeny => 0x04,
            Decision::PolicyIngressAllow => 0x05,
            Decision::PolicyEgressDeny => 0x06,
            Decision::PolicyEgressAllow => 0x07,
            Decision::FirewallDeny => 0x08,
            Decision::FirewallAllow => 0x09,
            Decision::Spoof => 0x0a,
            Decision::ClusterIngressDeny => 0x0c,
            Decision::ClusterIngressAllow => 0x0d,
            Decision::ClusterEgressDeny => 0x0e,
            Decision::ClusterEgressAllow => 0x0f,
            Decision::ClusterIngressPass => 0x11,
            Decision::ClusterEgressPass => 0x13,
        }
    }

    /// Whether this is an allow (a Pass counts as one: it drops nothing).
    pub const fn allows(self) -> bool {
        self.code() & 1 == 1
    }

    /// Whether this is a ClusterNetworkPolicy's Pass.
    pub const fn passes(self) -> bool {
        matches!(
            self,
            Decision::ClusterIngressPass | Decision::ClusterEgressPass
        )
    }

    /// A ClusterNetworkPolicy rule's decision in direction `ingress` (else egress) for its
    /// action.
    pub const fn cluster(ingress: bool, action: multitenant::cluster_policy::Action) -> Decision {
        use multitenant::cluster_policy::Action;
        match (ingress, action) {
            (true, Action::Deny) => Decision::ClusterIngressDeny,
            (true, Action::Accept) => Decision::ClusterIngressAllow,
            (true, Action::Pass) => Decision::ClusterIngressPass,
            (false, Action::Deny) => Decision::ClusterEgressDeny,
            (false, Action::Accept) => Decision::ClusterEgressAllow,
            (false, Action::Pass) => Decision::ClusterEgressPass,
        }
    }

    /// The decision a `reg5` value names, with its detail.
    pub fn from_reg(reg5: u32) -> Option<(Decision, u32)> {
        let code = (reg5 & 0xff) as u8;
        Decision::ALL
            .into_iter()
            .find(|d| d.code() == code)
            .map(|d| (d, reg5 >> 8))
    }

    /// The `reg5` value of this decision with `detail` (24 bits).
    pub const fn reg(self, detail: u32) -> u32 {
        self.code() as u32 | (detail << 8)
    }

    /// The table of the rows that make this decision.
    pub const fn table(self) -> Table {
        match self {
            Decision::TenancyDeny
            | Decision::TenancyAllow
            | Decision::PolicyIngressDeny
            | Decision::PolicyIngressAllow
            | Decision::ClusterIngressDeny
            | Decision::ClusterIngressAllow
            | Decision::ClusterIngressPass => Table::IngressIsolation,
            Decision::PolicyEgressDeny
            | Decision::PolicyEgressAllow
            | Decision::ClusterEgressDeny
            | Decision::ClusterEgressAllow
            | Decision::ClusterEgressPass => Table::PodEgressPolicy,
            Decision::FirewallDeny | Decision::FirewallAllow => Table::EgressFirewall,
            Decision::Spoof => Table::PodEgressSpoofguard,
        }
    }

    /// The name in log lines.
    pub const fn kind(self) -> &'static str {
        match self {
            Decision::TenancyDeny | Decision::TenancyAllow => "tenancy",
            Decision::PolicyIngressDeny
            | Decision::PolicyIngressAllow
            | Decision::PolicyEgressDeny
            | Decision::PolicyEgressAllow => "network-policy",
            Decision::FirewallDeny | Decision::FirewallAllow => "egress-firewall",
            Decision::Spoof => "spoofing",
            Decision::ClusterIngressDeny
            | Decision::ClusterIngressAllow
            | Decision::ClusterEgressDeny
            | Decision::ClusterEgressAllow
            | Decision::ClusterIngressPass
            | Decision::ClusterEgressPass => "cluster-network-policy",
        }
    }
}

/// The actions that log a decision, put before the row's own: `load:CODE->NXM_NX_REG5[]`,
/// `load:ID->NXM_NX_REG6[]` (a policy rule's conjunction id, else 0), `resubmit(,130)`.
pub fn log_actions(decision: Decision, detail: u32, rule: Option<u32>) -> Vec<Action> {
    // `reg6` always: a value an earlier logged row left (an egress rule's, in table 27)
    // must not name this decision's rule.
    let out_rule = Reg::AuditRule.load(rule.unwrap_or(0));
    let mut out = vec![Reg::AuditCode.load(decision.reg(detail)), out_rule];
    out.push(Action::resubmit(Table::Audit.id()).expect("table 130 is a table"));
    out
}

/// `ct_state=+new+trk`: the first packet of a connection (allow rows log only it).
pub fn new_connection() -> CtState {
    CtState::new().plus(CtFlag::New).plus(CtFlag::Trk)
}

/// `ct_state=-new+trk`: every later packet of a connection.
pub fn later_packet() -> CtState {
    CtState::new().minus(CtFlag::New).plus(CtFlag::Trk)
}

fn copy_up(meter: u32) -> Action {
    Action::ToController {
        max_len: AUDIT_MAX_LEN,
        userdata: AUDIT_USERDATA.to_vec(),
        meter_id: Some(meter),
        controller_id: 0,
    }
}

/// Table 130: per verdict and bucket of the source VNID, a metered copy to the agent; the
/// packet itself goes back to the row that resubmitted it.
pub fn audit_table() -> Vec<Flow> {
    let mut out = Vec::with_capacity(2 * BUCKETS as usize);
    for allow in [false, true] {
        for bucket in 0..BUCKETS {
            out.push(
                Flow::new(Table::Audit.id(), 100)
                    .cookie(AUDIT_BASE_COOKIE)
                    .matching(
                        Match::any()
                            .reg(
                                Reg::SrcVnid.number(),
                                Masked::new(bucket, BUCKETS - 1).expect("bucket within mask"),
                            )
                            .reg(
                                Reg::AuditCode.number(),
                                Masked::new(u32::from(allow), 1).expect("one bit"),
                            ),
                    )
                    .action(copy_up(meter_id(allow, bucket))),
            );
        }
    }
    out.push(Flow::new(Table::Audit.id(), 0).cookie(AUDIT_BASE_COOKIE));
    out
}

/// Table 20's spoofing rows (prio 1, under every pod's own rows): a pod's IPv4 or ARP that
/// matched none of its rows is copied up (one meter for the node) and dropped. With IPv6,
/// its packets too, but not those from the link-local or unspecified address (router and
/// neighbour solicitations, MLD: every pod's kernel sends them, prio 2 drops them quietly).
pub fn spoof_rows(ipv4: bool, ipv6: bool) -> Vec<Flow> {
    let row = |m: Match| {
        let mut f = Flow::new(Table::PodEgressSpoofguard.id(), 1)
            .cookie(AUDIT_BASE_COOKIE)
            .matching(m)
            .action(Reg::AuditCode.load(Decision::Spoof.reg(0)));
        f = f.action(copy_up(SPOOF_METER));
        f
    };
    let mut out = Vec::new();
    if ipv4 {
        out.push(row(Match::any().ip()));
        out.push(row(Match::any().arp()));
    }
    if ipv6 {
        for quiet in ["fe80::/10", "::/128"] {
            out.push(
                Flow::new(Table::PodEgressSpoofguard.id(), 2)
                    .cookie(AUDIT_BASE_COOKIE)
                    .matching(
                        Match::any()
                            .ipv6()
                            .ipv6_src(quiet.parse::<Masked<std::net::Ipv6Addr>>().expect("prefix")),
                    ),
            );
        }
        out.push(row(Match::any().ipv6()));
    }
    out
}

/// The ids of the meters table 130 and the spoofing rows use (packets/s meters the agent
/// creates before the rows).
pub fn meter_ids() -> Vec<u32> {
    (0..BUCKETS)
        .flat_map(|b| [meter_id(false, b), meter_id(true, b)])
        .chain([SPOOF_METER])
        .collect()
}

/// The cookie of a VNID's tenancy audit rows (table 80, multitenant mode).
pub fn tenancy_cookie(vnid: multitenant::Vnid) -> u64 {
    cookie::cookie(Feature::Audit, u64::from(vnid.id()))
}

/// What a namespace (or a VNID's namespaces) logs: its decisions' rows are built with this.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Logged {
    /// Denied connections.
    pub deny: bool,
    /// Allowed connections.
    pub allow: bool,
}

impl Logged {
    /// Whether anything is logged.
    pub fn any(self) -> bool {
        self.deny || self.allow
    }
}

/// Table 80's audit rows of one VNID in multitenant mode, beside its tenancy row (`reg0=V,
/// reg1=V` prio 100) and the global rows (prio 200):
///
/// - allow: prio 101 `reg0=V,reg1=V` and prio 201 `reg0=0,reg1=V`, `reg0=V,reg1=0` (for V
///   global, prio 201 `reg0=0` and `reg1=0`): log, output. Every packet is copied (metered)
///   and the agent folds a connection's copies into one line. Not committed (the tenancy rows
///   without logging go to table 81, which commits): the copies take the slow path, where a
///   commit for each packet lost 5% of 10,000 new connections a second
///   (`audit::logging_allowed_connections_loses_no_traffic`). Such a connection's replies
///   are new packets to the Admin tier of their direction, which can only drop more;
/// - deny: prio 50 `reg1=V` (into V) and prio 40 `reg0=V` (out of V): log, drop.
///
/// IP (`ipv4`) and IPv6 (`ipv6`), as the node has them; ARP only when it is refused (across
/// tenants a connection attempt usually ends at ARP).
pub fn tenancy_rows(vnid: multitenant::Vnid, log: Logged, ipv4: bool, ipv6: bool) -> Vec<Flow> {
    let v = vnid.id();
    let families: Vec<fn(Match) -> Match> =
        [(ipv4, Match::ip as fn(Match) -> Match), (ipv6, Match::ipv6)]
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, f)| f)
            .collect();
    let mut out = Vec::new();
    let row = |prio: u16, m: Match| {
        Flow::new(Table::IngressIsolation.id(), prio)
            .cookie(tenancy_cookie(vnid))
            .matching(m)
    };
    for fam in &families {
        if log.allow {
            let pairs: Vec<(u16, Option<u32>, Option<u32>)> = if v == 0 {
                vec![(201, Some(0), None), (201, None, Some(0))]
            } else {
                vec![
                    (101, Some(v), Some(v)),
                    (201, Some(0), Some(v)),
                    (201, Some(v), Some(0)),
                ]
            };
            for (prio, src, dst) in pairs {
                let mut m = fam(Match::any());
                if let Some(s) = src {
                    m = Reg::SrcVnid.matching(m, s);
                }
                if let Some(d) = dst {
                    m = Reg::DstVnid.matching(m, d);
                }
                let mut f = row(prio, m);
                for a in log_actions(Decision::TenancyAllow, 0, None) {
                    f = f.action(a);
                }
                out.push(f.action(Reg::OutPort.output()));
            }
        }
        if log.deny && v != 0 {
            out.extend(deny_rows(vnid, &fam(Match::any())));
        }
    }
    // Across tenants even ARP is refused, and a connection attempt usually ends there: its
    // refusals are logged too (the pod's address asked for, no ports).
    if log.deny && v != 0 && ipv4 {
        out.extend(deny_rows(vnid, &Match::any().arp()));
    }
    out
}

/// Prio 50 `reg1=V` (into V) and prio 40 `reg0=V` (out of V) on `m`: log, drop.
fn deny_rows(vnid: multitenant::Vnid, m: &Match) -> Vec<Flow> {
    [(50, Reg::DstVnid), (40, Reg::SrcVnid)]
        .into_iter()
        .map(|(prio, reg)| {
            let mut f = Flow::new(Table::IngressIsolation.id(), prio)
                .cookie(tenancy_cookie(vnid))
                .matching(reg.matching(m.clone(), vnid.id()));
            for a in log_actions(Decision::TenancyDeny, 0, None) {
                f = f.action(a);
            }
            f
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use multitenant::Vnid;

    fn text(rows: &[Flow]) -> Vec<String> {
        rows.iter().map(|f| f.to_string()).collect()
    }

    #[test]
    fn codes_round_trip_and_carry_the_verdict_in_bit_0() {
        for d in Decision::ALL {
            assert_eq!(Decision::from_reg(d.reg(7)), Some((d, 7)));
            assert_eq!(d.allows(), d.code() & 1 == 1);
        }
        assert!(Decision::TenancyAllow.allows() && !Decision::Spoof.allows());
        assert_eq!(Decision::from_reg(0xff), None);
        let mut codes: Vec<u8> = Decision::ALL.iter().map(|d| d.code()).collect();
        codes.dedup();
        assert_eq!(codes.len(), Decision::ALL.len());
    }

    #[test]
    fn table_130_copies_through_one_meter_per_verdict_and_bucket() {
        let rows = audit_table();
        assert_eq!(rows.len(), 2 * BUCKETS as usize + 1);
        let t = text(&rows);
        assert!(
            t.contains(
                &"cookie=0x1, table=130, priority=100,reg0=0x5/0x3f,reg5=0/0x1 \
              actions=controller(max_len=128,userdata=41.31,meter_id=1048581)"
                    .to_string()
            ),
            "{t:#?}"
        );
        assert!(
            t.contains(
                &"cookie=0x1, table=130, priority=100,reg0=0x5/0x3f,reg5=0x1/0x1 \
              actions=controller(max_len=128,userdata=41.31,meter_id=1048645)"
                    .to_string()
            ),
            "{t:#?}"
        );
        let mut ids = meter_ids();
        assert_eq!(ids.len(), 2 * BUCKETS as usize + 1);
        assert!(ids.contains(&SPOOF_METER));
        ids.dedup();
        assert_eq!(ids.len(), 2 * BUCKETS as usize + 1);
    }

    #[test]
    fn tenancy_rows_log_allowed_and_denied_packets_and_commit_nothing() {
        let v = Vnid::new(10).unwrap();
        let t = text(&tenancy_rows(
            v,
            Logged {
                deny: true,
                allow: true,
            },
            true,
            false,
        ));
        assert_eq!(t.len(), 7, "{t:#?}");
        assert!(t.contains(&"cookie=0x900000000000000a, table=80, priority=50,arp,reg1=0xa actions=load:0x2->NXM_NX_REG5[],load:0->NXM_NX_REG6[],resubmit(,130)".to_string()), "{t:#?}");
        assert!(t.contains(&"cookie=0x900000000000000a, table=80, priority=101,ip,reg0=0xa,reg1=0xa actions=load:0x3->NXM_NX_REG5[],load:0->NXM_NX_REG6[],resubmit(,130),output:NXM_NX_REG2[]".to_string()), "{t:#?}");
        assert!(t.contains(&"cookie=0x900000000000000a, table=80, priority=50,ip,reg1=0xa actions=load:0x2->NXM_NX_REG5[],load:0->NXM_NX_REG6[],resubmit(,130)".to_string()), "{t:#?}");
        assert!(
            t.iter().all(|l| !l.contains("ct(")),
            "nothing committed (the copies take the slow path): {t:#?}"
        );
        let g = text(&tenancy_rows(
            Vnid::GLOBAL,
            Logged {
                deny: true,
                allow: true,
            },
            true,
            true,
        ));
        // A global namespace is never denied; its allowed connections are, twice per family.
        assert_eq!(g.len(), 4, "{g:#?}");
        assert!(tenancy_rows(v, Logged::default(), true, true).is_empty());
        // An IPv6-only node: no IPv4 or ARP row.
        let six = text(&tenancy_rows(
            v,
            Logged {
                deny: true,
                allow: true,
            },
            false,
            true,
        ));
        assert!(six.iter().all(|l| l.contains("ipv6")), "{six:#?}");
    }

    #[test]
    fn spoofing_rows_leave_link_local_ipv6_quiet() {
        let t = text(&spoof_rows(true, true));
        assert_eq!(t.len(), 5, "{t:#?}");
        assert!(t.contains(&"cookie=0x1, table=20, priority=1,ip actions=load:0xa->NXM_NX_REG5[],controller(max_len=128,userdata=41.31,meter_id=1048704)".to_string()), "{t:#?}");
        assert!(
            t.contains(
                &"cookie=0x1, table=20, priority=2,ipv6,ipv6_src=fe80::/10 actions=drop"
                    .to_string()
            ),
            "{t:#?}"
        );
        assert_eq!(spoof_rows(true, false).len(), 2);
    }
}
