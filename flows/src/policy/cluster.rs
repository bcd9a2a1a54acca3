//! ClusterNetworkPolicies as rule parts (docs/pipeline.md, "ClusterNetworkPolicy"): each rule
//! of a policy whose subject selects a pod of this node becomes the same conjunctive rows as a
//! NetworkPolicy rule (subject, peers, ports: N + M + P), placed by its tier and rank and
//! giving its action.
//!
//! Why the peers and ports become NetworkPolicy ones: a `namespaces` peer is a NetworkPolicy
//! peer with a namespace selector and every pod (on ingress, the namespace's VNID when it holds
//! it alone), a `pods` peer one with both selectors, `networks` are `ipBlock`s without
//! exceptions, and a named port (resolved by name whatever its protocol, names being unique in a
//! pod) is the three named ports of that name: the rows, their merge and their upkeep by
//! difference are then the NetworkPolicy ones, tested once.
//!
//! A `nodes` peer is the addresses of the nodes its selector matches, as `ipBlock`s of one
//! address each: a part with one is made again when those change (the engine compares the
//! nodes only where such a peer exists).
//!
//! Fail closed: a Deny or Pass rule with a peer this agent does not apply (`domainNames`, a
//! kind it does not know) denies everything in its direction; an Accept rule's such peers
//! match nothing. Until the cluster's pods and nodes are listed, a Deny rule's pod and node
//! peers are every address; an Admin Pass with such a peer denies on its ports (passing every
//! address would skip its tier's later Deny rules); an Accept's or a Baseline Pass's node
//! peers are none and its pod peers those known so far.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;
use multitenant::cluster_policy::{Action, ClusterPolicy, Peer as CnpPeer, Pods, Port, Tier};
use multitenant::policy::{Direction, LabelSelector, Peer, PortSpec, Protocol};

use super::parts::{PartKey, Place, RuleSpec};
use super::verdict::Verdict;
use super::{table_of, ClusterRule, ConjunctionIds, PolicyInput};
use crate::audit::Logged;
use crate::tables::Table;

/// The priority of a tier's first rule: just below the rows that decide before any policy
/// ([`crate::base::PRIO_REPLY`]).
pub(super) const PRIO_TIER_TOP: u16 = crate::base::PRIO_REPLY - 1;
/// How many (priority, rule position) pairs a tier has room for; pairs past them share the
/// last priority.
pub(super) const TIER_ROOM: usize = 5000;

/// The `reg4` bits a Pass of the Admin tier sets: bit 1 egress, bit 2 ingress (which a reply
/// sets too in multitenant mode, [`crate::base`]).
pub(super) fn pass_bits(d: Direction) -> u32 {
    match d {
        Direction::Egress => 0x2,
        Direction::Ingress => crate::base::ADMIN_PASSED_INGRESS,
    }
}

/// The table of a tier's rows in direction `d`.
pub fn tier_table(tier: Tier, d: Direction) -> Table {
    match (tier, d) {
        (Tier::Admin, _) => table_of(d),
        (Tier::Baseline, Direction::Egress) => Table::PodEgressBaseline,
        (Tier::Baseline, Direction::Ingress) => Table::IngressBaseline,
    }
}

/// The OpenFlow priority of each (tier, policy priority, rule position) in use.
pub(super) type Ranks = BTreeMap<(Tier, u16, usize), u16>;

/// The ranks of every rule of `policies`: per tier, the pairs (priority, position) in use,
/// a lower priority then an earlier position first, from [`PRIO_TIER_TOP`] down.
pub(super) fn ranks(policies: &[ClusterPolicy]) -> Ranks {
    let mut pairs: BTreeMap<Tier, BTreeSet<(u16, usize)>> = BTreeMap::new();
    for cp in policies {
        let rules = cp.ingress.len().max(cp.egress.len());
        let set = pairs.entry(cp.tier).or_default();
        for i in 0..rules {
            set.insert((cp.priority, i));
        }
    }
    let mut out = Ranks::new();
    for (tier, set) in pairs {
        for (k, (p, i)) in set.into_iter().enumerate() {
            let k = k.min(TIER_ROOM - 1) as u16;
            out.insert((tier, p, i), PRIO_TIER_TOP - k);
        }
    }
    out
}

fn key(cp: &ClusterPolicy, d: Direction, i: usize, named: bool) -> String {
    format!(
        "cnp:{}/{}/{i}/{}",
        cp.name,
        d.name(),
        if named { "named" } else { "ports" }
    )
}

/// The conjunction-id keys of `policies`' rule parts (beside the NetworkPolicies' in one id
/// space; a namespace name has no `:`, so no NetworkPolicy key starts with `cnp:`).
pub(super) fn rule_keys(policies: &[ClusterPolicy]) -> impl Iterator<Item = String> + '_ {
    policies.iter().flat_map(|cp| {
        [Direction::Ingress, Direction::Egress]
            .into_iter()
            .flat_map(move |d| {
                cp.rules(d).iter().enumerate().flat_map(move |(i, r)| {
                    let named = r.ports.iter().any(|p| matches!(p, Port::Named(_)));
                    let mut keys = vec![key(cp, d, i, false)];
                    if named {
                        keys.push(key(cp, d, i, true));
                    }
                    keys
                })
            })
    })
}

/// The parts of `cp`'s rules (in multitenant mode no Baseline ingress rule: tenancy decides
/// every connection between pods before it could). While the cluster's pods
/// ([`PolicyInput::pods_listed`]) or nodes ([`PolicyInput::nodes`]) are not listed, a rule
/// with such peers denies more, never less (see the module docs).
pub(super) fn parts_of(
    cp: &ClusterPolicy,
    ids: &ConjunctionIds,
    ranks: &Ranks,
    input: &PolicyInput<'_>,
) -> Vec<RuleSpec> {
    let multitenant = input.multitenant;
    let mut out = Vec::new();
    for d in [Direction::Ingress, Direction::Egress] {
        if multitenant && cp.tier == Tier::Baseline && d == Direction::Ingress {
            continue;
        }
        for (index, rule) in cp.rules(d).iter().enumerate() {
            let prio = ranks
                .get(&(cp.tier, cp.priority, index))
                .copied()
                .unwrap_or(PRIO_TIER_TOP - (TIER_ROOM as u16 - 1));
            let place = Place {
                table: tier_table(cp.tier, d),
                conj: prio,
                plain: prio,
                unpassed: (cp.tier == Tier::Admin).then(|| pass_bits(d)),
            };
            let verdict = match (rule.action, cp.tier) {
                (Action::Accept, _) | (Action::Pass, Tier::Baseline) => Verdict::Allow,
                (Action::Deny, _) => Verdict::Deny,
                (Action::Pass, Tier::Admin) => Verdict::Pass(pass_bits(d)),
            };
            let spec = |named: bool, peers: Vec<Peer>, ports: Vec<PortSpec>, verdict| {
                let id = ids.get(&key(cp, d, index, named)).copied()?;
                Some(RuleSpec {
                    key: PartKey {
                        policy: cp.name.clone(),
                        d,
                        index,
                        named,
                    },
                    id,
                    namespace: String::new(),
                    peers,
                    ports,
                    log: Logged::default(),
                    place,
                    verdict,
                    cluster: Some(ClusterRule {
                        tier: cp.tier,
                        priority: cp.priority,
                        action: rule.action,
                        name: rule.name.clone(),
                        log: cp.log,
                    }),
                })
            };
            let unapplied = rule
                .peers
                .iter()
                .any(|p| matches!(p, CnpPeer::Unsupported(_)));
            if unapplied && rule.action != Action::Accept {
                // Fail closed: every peer, every port, dropped.
                out.extend(spec(false, Vec::new(), Vec::new(), Verdict::Deny));
                continue;
            }
            // Peers not known yet (the cluster's pods, or nodes, not listed): a Deny takes them
            // as every address; an Accept or a Baseline Pass (which allows) as none (pods: those
            // known so far); an Admin Pass would hand every address to the next tier, past its
            // tier's later Deny rules, so it denies on its ports until they are known.
            let unknown = |p: &CnpPeer| match p {
                CnpPeer::Pods(_) => !input.pods_listed,
                CnpPeer::Nodes(_) => input.nodes.is_none(),
                _ => false,
            };
            let pending_pass =
                matches!(verdict, Verdict::Pass(_)) && rule.peers.iter().any(unknown);
            let verdict = if pending_pass { Verdict::Deny } else { verdict };
            let peers: Vec<Peer> = if pending_pass {
                every_address()
            } else {
                rule.peers
                    .iter()
                    .flat_map(|p| match (p, input.nodes) {
                        _ if unknown(p) && verdict == Verdict::Deny => every_address(),
                        (CnpPeer::Nodes(_), Some(nodes)) => p
                            .node_addresses(nodes.values())
                            .into_iter()
                            .map(address_block)
                            .collect(),
                        _ => peer(p),
                    })
                    .collect()
            };
            if peers.is_empty() {
                // An Accept whose peers all match nothing.
                continue;
            }
            let numbered: Vec<PortSpec> = rule
                .ports
                .iter()
                .filter_map(|p| match p {
                    Port::Range {
                        protocol,
                        first,
                        last,
                    } => Some(PortSpec::Range {
                        protocol: *protocol,
                        first: *first,
                        last: *last,
                    }),
                    Port::Named(_) => None,
                })
                .collect();
            let mut named: Vec<PortSpec> = rule
                .ports
                .iter()
                .filter_map(|p| match p {
                    Port::Named(n) => Some(n),
                    Port::Range { .. } => None,
                })
                .flat_map(|name| {
                    [Protocol::Tcp, Protocol::Udp, Protocol::Sctp].map(|protocol| PortSpec::Named {
                        protocol,
                        name: name.clone(),
                    })
                })
                .collect();
            // An egress named part's peers are the pods declaring the name: it has no rows of
            // addresses, so while a denying rule's peers stand in as every address its named
            // ports are every port of their protocols (a numbered part).
            let mut numbered = numbered;
            if verdict == Verdict::Deny
                && d == Direction::Egress
                && !named.is_empty()
                && rule.peers.iter().any(unknown)
            {
                named.clear();
                numbered.extend([Protocol::Tcp, Protocol::Udp, Protocol::Sctp].map(PortSpec::Any));
            }
            if rule.ports.is_empty() || !numbered.is_empty() {
                out.extend(spec(false, peers.clone(), numbered, verdict));
            }
            if !named.is_empty() {
                out.extend(spec(true, peers, named, verdict));
            }
        }
    }
    out
}

/// Every address of both families, as `ipBlock`s.
fn every_address() -> Vec<Peer> {
    vec![
        Peer::IpBlock {
            cidr: "0.0.0.0/0".parse().expect("a valid prefix"),
            except: Vec::new(),
        },
        Peer::IpBlock6 {
            cidr: "::/0".parse().expect("a valid prefix"),
            except: Vec::new(),
        },
    ]
}

/// One address as an `ipBlock`.
fn address_block(a: IpAddr) -> Peer {
    match a {
        IpAddr::V4(a) => Peer::IpBlock {
            cidr: a.into(),
            except: Vec::new(),
        },
        IpAddr::V6(a) => Peer::IpBlock6 {
            cidr: a.into(),
            except: Vec::new(),
        },
    }
}

/// A peer as a NetworkPolicy peer (none for a peer that matches nothing here; `nodes` peers
/// are resolved by the caller).
fn peer(p: &CnpPeer) -> Vec<Peer> {
    match p {
        CnpPeer::Pods(Pods::Namespaces(ns)) => vec![Peer::Pods {
            namespaces: Some(ns.clone()),
            pods: LabelSelector::everything(),
        }],
        CnpPeer::Pods(Pods::Pods { namespaces, pods }) => vec![Peer::Pods {
            namespaces: Some(namespaces.clone()),
            pods: pods.clone(),
        }],
        CnpPeer::Networks(nets) => nets
            .iter()
            .map(|n| match n {
                IpNet::V4(cidr) => Peer::IpBlock {
                    cidr: *cidr,
                    except: Vec::new(),
                },
                IpNet::V6(cidr) => Peer::IpBlock6 {
                    cidr: *cidr,
                    except: Vec::new(),
                },
            })
            .collect(),
        CnpPeer::Nodes(_) | CnpPeer::Unsupported(_) => Vec::new(),
    }
}

#[cfg(test)]
pub(crate) mod tests;
