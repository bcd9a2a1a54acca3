//! Table 100, `egress_firewall`: a tenant's EgressNetworkPolicy as flows, with openshift-sdn's
//! semantics, row for row (its `UpdateEgressNetworkPolicyRules`):
//!
//! - one policy on a VNID that only one namespace has: rule `i` of `n` becomes rows of priority
//!   `n - i` (first rule wins) matching `reg0=V,ip` and the rule's destination (`nw_dst=CIDR`,
//!   none for `0.0.0.0/0`; each address a DNS name resolved to, as a `/32`), Allow →
//!   `goto_table:101`, Deny → drop. Traffic matching no rule falls to the table's base row
//!   (priority 0, → 101): allowed.
//! - a second policy on the VNID, or a VNID shared by several namespaces: one row `reg0=V`,
//!   priority 1, drop: the tenant's external traffic is dropped rather than filtered by a policy
//!   that may not be its own.
//! - a global VNID (0): no rows (openshift-sdn refuses and ignores the policy).
//! - dual stack **[ours]**: a rule's IPv6 destinations (`cidrSelector` `2001:db8::/32`, `::/0`,
//!   a name's AAAA addresses) are rows `ipv6,reg0=V,ipv6_dst=NET` at the rule's priority, so
//!   IPv6 meets the rules in their order as IPv4 does. A policy whose `cidrSelector`s name no
//!   IPv6 destination was written for IPv4: on a dual-stack node its VNID also gets
//!   `ipv6,reg0=V`, priority 1, drop, so the tenant's external IPv6 is not let out unfiltered
//!   beyond its names' AAAA addresses (fail closed; a rule `Allow ::/0` opens it). An IPv4 node
//!   writes no IPv6 row.
//!
//! Every row of a VNID carries that VNID's egress cookie, so the flow store replaces a tenant's
//! whole rule set in one bundle: the old and the new rules swap atomically, and no packet sees a
//! mix (or a window where a denied destination is reachable).

use ipnet::{IpNet, Ipv4Net};
use ovs::{Flow, Match};

use crate::audit::{log_actions, Decision, Logged};
use crate::cookie::{cookie, Feature};
use crate::registers::Reg;
use crate::tables::Table;
use crate::Vnid;

/// One rule, its destinations resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressRule {
    /// Allow (→ 101) or deny (drop).
    pub allow: bool,
    /// The destinations: a CIDR, or the addresses a DNS name resolved to (none yet: no rows).
    pub to: Vec<IpNet>,
    /// The destinations are a DNS name's addresses (its AAAA ones do not make the policy one
    /// that names IPv6: what the policy's author wrote decides that).
    pub dns: bool,
}

/// What a VNID's table-100 rows say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EgressFirewall {
    /// The one policy's rules, in order.
    Rules(Vec<EgressRule>),
    /// Drop all external traffic of the VNID (several policies, or a shared VNID).
    DropAll,
}

/// The cookie of VNID `vnid`'s egress firewall rows.
pub fn egress_cookie(vnid: Vnid) -> u64 {
    cookie(Feature::EgressFirewall, u64::from(vnid.id()))
}

/// The table-100 rows of `vnid` (none for the global VNID); `dual_stack` on a node with IPv6
/// pods (the rules' IPv6 destinations get rows; a policy naming none drops IPv6).
pub fn egress_firewall_flows(vnid: Vnid, fw: &EgressFirewall, dual_stack: bool) -> Vec<Flow> {
    egress_firewall_flows_logged(vnid, fw, dual_stack, Logged::default())
}

/// The `detail` of an audit line from the row that drops everything of a VNID (several
/// policies, a shared VNID, or a policy that cannot be applied).
pub const AUDIT_DROP_ALL: u32 = 0xff_ffff;
/// The `detail` of an audit line from the row that drops IPv6 of a policy naming none.
pub const AUDIT_NO_IPV6_RULE: u32 = 0xff_fffe;

/// [`egress_firewall_flows`], its rows logging what `log` asks ([`crate::audit`]): a
/// logged rule's rows load its index as the audit detail, then resubmit to table 130. Every
/// packet a logged row meets is copied (external traffic is not committed in every mode,
/// so there is no first packet to pick); the agent folds a connection's packets into one line.
pub fn egress_firewall_flows_logged(
    vnid: Vnid,
    fw: &EgressFirewall,
    dual_stack: bool,
    log: Logged,
) -> Vec<Flow> {
    if vnid.is_global() {
        return Vec::new();
    }
    let logged = |f: Flow, allow: bool, detail: u32| {
        let wanted = if allow { log.allow } else { log.deny };
        if !wanted {
            return f;
        }
        let decision = if allow {
            Decision::FirewallAllow
        } else {
            Decision::FirewallDeny
        };
        let mut out = f;
        let verdict = std::mem::take(&mut out.actions);
        for a in log_actions(decision, detail, None) {
            out = out.action(a);
        }
        out.actions.extend(verdict);
        out
    };
    let base = |prio: u16| {
        Flow::new(Table::EgressFirewall.id(), prio)
            .cookie(egress_cookie(vnid))
            .matching(Reg::SrcVnid.matching(Match::any(), vnid.id()))
    };
    match fw {
        EgressFirewall::DropAll => vec![logged(base(1), false, AUDIT_DROP_ALL)],
        EgressFirewall::Rules(rules) => {
            let n = rules.len();
            let mut out = Vec::new();
            for (i, rule) in rules.iter().enumerate() {
                let prio = u16::try_from(n - i).unwrap_or(u16::MAX);
                for net in &rule.to {
                    let m = match net {
                        IpNet::V4(net) => {
                            let m = Reg::SrcVnid.matching(Match::any().ip(), vnid.id());
                            if net.prefix_len() == 0 {
                                m
                            } else {
                                m.nw_dst(crate::base::net(net))
                            }
                        }
                        IpNet::V6(_) if !dual_stack => continue,
                        IpNet::V6(net) => {
                            let m = Reg::SrcVnid.matching(Match::any().ipv6(), vnid.id());
                            if net.prefix_len() == 0 {
                                m
                            } else {
                                m.ipv6_dst(crate::ipv6::net6(net))
                            }
                        }
                    };
                    let f = Flow::new(Table::EgressFirewall.id(), prio)
                        .cookie(egress_cookie(vnid))
                        .matching(m);
                    let f = logged(f, rule.allow, i as u32);
                    out.push(if rule.allow {
                        f.goto(Table::EgressRouting.id())
                    } else {
                        f
                    });
                }
            }
            // Whether the policy's author wrote an IPv6 destination (a name's AAAA answers do
            // not count: a policy written for IPv4 stays closed in IPv6 beyond them).
            let names_ipv6 = rules
                .iter()
                .filter(|r| !r.dns)
                .flat_map(|r| &r.to)
                .any(|n| n.addr().is_ipv6());
            if dual_stack && !names_ipv6 {
                out.push(logged(
                    Flow::new(Table::EgressFirewall.id(), 1)
                        .cookie(egress_cookie(vnid))
                        .matching(Reg::SrcVnid.matching(Match::any().ipv6(), vnid.id())),
                    false,
                    AUDIT_NO_IPV6_RULE,
                ));
            }
            out
        }
    }
}

/// `0.0.0.0/32` as openshift-sdn reads it: `0.0.0.0/0` (it "corrects" the selector with a
/// warning). Any other network as given, truncated to its network address.
pub fn egress_cidr(net: Ipv4Net) -> Ipv4Net {
    if net.addr().is_unspecified() && net.prefix_len() == 32 {
        Ipv4Net::default()
    } else {
        net.trunc()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(fs: &[Flow]) -> Vec<String> {
        fs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn rules_in_order_first_match_wins() {
        let v = Vnid::new(10).unwrap();
        let fw = EgressFirewall::Rules(vec![
            EgressRule {
                allow: true,
                dns: false,
                to: vec!["192.168.10.0/24".parse().unwrap()],
            },
            EgressRule {
                allow: false,
                dns: false,
                to: vec!["192.168.0.0/16".parse().unwrap()],
            },
            EgressRule {
                allow: true,
                dns: false,
                to: vec![
                    "198.51.100.7/32".parse().unwrap(),
                    "198.51.100.8/32".parse().unwrap(),
                ],
            },
            EgressRule {
                allow: false,
                dns: false,
                to: vec![egress_cidr("0.0.0.0/32".parse().unwrap()).into()],
            },
        ]);
        assert_eq!(
            text(&egress_firewall_flows(v, &fw, false)),
            [
                "cookie=0x400000000000000a, table=100, priority=4,ip,reg0=0xa,nw_dst=192.168.10.0/24 actions=goto_table:101",
                "cookie=0x400000000000000a, table=100, priority=3,ip,reg0=0xa,nw_dst=192.168.0.0/16 actions=drop",
                "cookie=0x400000000000000a, table=100, priority=2,ip,reg0=0xa,nw_dst=198.51.100.7 actions=goto_table:101",
                "cookie=0x400000000000000a, table=100, priority=2,ip,reg0=0xa,nw_dst=198.51.100.8 actions=goto_table:101",
                "cookie=0x400000000000000a, table=100, priority=1,ip,reg0=0xa actions=drop",
            ]
        );
    }

    #[test]
    fn drop_all_and_global() {
        let v = Vnid::new(11).unwrap();
        assert_eq!(
            text(&egress_firewall_flows(v, &EgressFirewall::DropAll, false)),
            ["cookie=0x400000000000000b, table=100, priority=1,reg0=0xb actions=drop"]
        );
        assert!(egress_firewall_flows(Vnid::GLOBAL, &EgressFirewall::DropAll, true).is_empty());
        // Dual stack: dropping all drops both families already.
        assert_eq!(
            egress_firewall_flows(v, &EgressFirewall::DropAll, true),
            egress_firewall_flows(v, &EgressFirewall::DropAll, false)
        );
    }

    #[test]
    fn ipv6_destinations_are_rules_in_order_with_the_ipv4_ones() {
        let v = Vnid::new(13).unwrap();
        let fw = EgressFirewall::Rules(vec![
            EgressRule {
                allow: true,
                dns: false,
                to: vec!["2001:db8::/32".parse().unwrap()],
            },
            EgressRule {
                allow: false,
                dns: false,
                to: vec!["::/0".parse().unwrap()],
            },
            EgressRule {
                allow: true,
                dns: false,
                to: vec!["0.0.0.0/0".parse().unwrap()],
            },
        ]);
        assert_eq!(
            text(&egress_firewall_flows(v, &fw, true)),
            [
                "cookie=0x400000000000000d, table=100, priority=3,ipv6,reg0=0xd,ipv6_dst=2001:db8::/32 actions=goto_table:101",
                "cookie=0x400000000000000d, table=100, priority=2,ipv6,reg0=0xd actions=drop",
                "cookie=0x400000000000000d, table=100, priority=1,ip,reg0=0xd actions=goto_table:101",
            ]
        );
        // An IPv4 node: the IPv6 destinations have no row.
        assert_eq!(
            text(&egress_firewall_flows(v, &fw, false)),
            ["cookie=0x400000000000000d, table=100, priority=1,ip,reg0=0xd actions=goto_table:101"]
        );
    }

    #[test]
    fn a_names_aaaa_answers_do_not_open_an_ipv4_policy_in_ipv6() {
        let v = Vnid::new(14).unwrap();
        let fw = EgressFirewall::Rules(vec![
            EgressRule {
                allow: true,
                dns: true,
                to: vec![
                    "192.0.2.7/32".parse().unwrap(),
                    "2001:db8::7/128".parse().unwrap(),
                ],
            },
            EgressRule {
                allow: false,
                dns: false,
                to: vec!["0.0.0.0/0".parse().unwrap()],
            },
        ]);
        assert_eq!(
            text(&egress_firewall_flows(v, &fw, true)),
            [
                "cookie=0x400000000000000e, table=100, priority=2,ip,reg0=0xe,nw_dst=192.0.2.7 actions=goto_table:101",
                "cookie=0x400000000000000e, table=100, priority=2,ipv6,reg0=0xe,ipv6_dst=2001:db8::7 actions=goto_table:101",
                "cookie=0x400000000000000e, table=100, priority=1,ip,reg0=0xe actions=drop",
                "cookie=0x400000000000000e, table=100, priority=1,ipv6,reg0=0xe actions=drop",
            ]
        );
    }

    #[test]
    fn a_dual_stack_node_drops_the_ipv6_traffic_rules_do_not_name() {
        let v = Vnid::new(12).unwrap();
        let fw = EgressFirewall::Rules(vec![EgressRule {
            allow: true,
            dns: false,
            to: vec![egress_cidr("0.0.0.0/32".parse().unwrap()).into()],
        }]);
        assert_eq!(
            text(&egress_firewall_flows(v, &fw, true)),
            [
                "cookie=0x400000000000000c, table=100, priority=1,ip,reg0=0xc actions=goto_table:101",
                "cookie=0x400000000000000c, table=100, priority=1,ipv6,reg0=0xc actions=drop",
            ]
        );
    }
}
