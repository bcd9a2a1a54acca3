//! ClusterNetworkPolicy (`policy.networking.k8s.io/v1alpha2`, the network-policy-api
//! project's cluster-scoped policy) semantics, pure: the model a policy is read into, and which
//! pods its subject and peers select.
//!
//! Why our own model, as for [`crate::policy`]: the flow builders and tests build policies by
//! hand, this crate stays pure, and reading a policy into this model is where every bad value
//! is found once (the agent's reader in `cluster::cnp` refuses the rest, naming the field).
//!
//! Semantics, as the API defines them (`apis/v1alpha2/clusternetworkpolicy_types.go`):
//! - a policy is in a **tier**: `Admin` (before NetworkPolicies) or `Baseline` (after them, for
//!   pods no NetworkPolicy selects in that direction); within a tier, a lower **priority**
//!   (0..=1000) decides first, and within a policy the rules decide in the order written;
//! - its **subject** is the pods of the namespaces a selector matches, or the pods a pod
//!   selector matches in the namespaces a namespace selector matches; host-network pods are
//!   never subjects nor pod peers;
//! - a rule has an **action**: `Accept` (the connection is allowed, with its replies; no later
//!   rule of any tier decides; an egress Accept still meets the destination's ingress rules),
//!   `Deny` (dropped; no later rule decides), or `Pass` (no later rule of this tier decides:
//!   the next tier does);
//! - its **peers** are namespaces, pods, and on egress also nodes (their addresses) and
//!   networks (CIDRs, which match every address in them, pods' included); a rule applies when
//!   any peer matches;
//! - its **protocols** narrow it to TCP, UDP or SCTP with a destination port or range, or to a
//!   destination named port (resolved on the receiving pod); none: every protocol and port.
//!
//! A peer of a kind this agent does not apply (a `domainNames` peer, or one with no field it
//! knows: a newer API) **fails closed** as the API says: an Accept rule treats it as matching
//! nothing, a Deny or Pass rule becomes a rule that denies everything ([`Rule::fails_closed`]).

use std::fmt;

use ipnet::IpNet;

use crate::policy::{LabelSelector, Labels, Protocol};

/// The highest priority value (the lowest precedence).
pub const MAX_PRIORITY: u16 = 1000;
/// At most this many ingress rules, and as many egress rules, per policy.
pub const MAX_RULES: usize = 25;
/// At most this many peers per rule, protocols per rule, and networks per peer.
pub const MAX_ITEMS: usize = 25;
/// The longest rule name.
pub const MAX_RULE_NAME: usize = 100;

/// The tier of a policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// Before NetworkPolicies (multitenant mode: before VNID isolation).
    Admin,
    /// After NetworkPolicies, for pods none selects (multitenant mode: where isolation does
    /// not decide).
    Baseline,
}

impl Tier {
    /// `Admin` / `Baseline`.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Admin => "Admin",
            Tier::Baseline => "Baseline",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a rule does with the connections it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// Allowed, with its replies; nothing later decides.
    Accept,
    /// Dropped; nothing later decides.
    Deny,
    /// The rest of this tier does not decide; the next tier does.
    Pass,
}

impl Action {
    /// `Accept` / `Deny` / `Pass`.
    pub fn name(self) -> &'static str {
        match self {
            Action::Accept => "Accept",
            Action::Deny => "Deny",
            Action::Pass => "Pass",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The pods a policy applies to, or a rule's pod peers.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pods {
    /// Every pod of the namespaces the selector matches.
    Namespaces(LabelSelector),
    /// The pods `pods` matches in the namespaces `namespaces` matches.
    Pods {
        /// `namespaceSelector` (empty: every namespace).
        namespaces: LabelSelector,
        /// `podSelector`.
        pods: LabelSelector,
    },
}

impl Pods {
    /// Whether a pod with `labels` in a namespace with `ns_labels` is selected.
    pub fn selects(&self, ns_labels: &Labels, labels: &Labels) -> bool {
        match self {
            Pods::Namespaces(ns) => ns.matches(ns_labels),
            Pods::Pods { namespaces, pods } => {
                namespaces.matches(ns_labels) && pods.matches(labels)
            }
        }
    }

    /// Whether a namespace with `ns_labels` may hold selected pods.
    pub fn selects_namespace(&self, ns_labels: &Labels) -> bool {
        match self {
            Pods::Namespaces(ns) | Pods::Pods { namespaces: ns, .. } => ns.matches(ns_labels),
        }
    }
}

impl fmt::Display for Pods {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pods::Namespaces(ns) => write!(f, "namespaces {ns}"),
            Pods::Pods { namespaces, pods } => {
                write!(f, "pods {pods} in namespaces {namespaces}")
            }
        }
    }
}

/// One entry of a rule's `from` / `to`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Peer {
    /// Pods (`namespaces` or `pods`).
    Pods(Pods),
    /// Nodes whose labels the selector matches: their addresses (egress only).
    Nodes(LabelSelector),
    /// Addresses in these networks, IPv4 or IPv6 (egress only).
    Networks(Vec<IpNet>),
    /// A peer this agent does not apply: `domainNames`, or no field it knows. Named for
    /// messages.
    Unsupported(String),
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Pods(p) => write!(f, "{p}"),
            Peer::Nodes(n) => write!(f, "nodes {n}"),
            Peer::Networks(nets) => {
                let n: Vec<String> = nets.iter().map(|n| n.to_string()).collect();
                write!(f, "networks {}", n.join(","))
            }
            Peer::Unsupported(what) => write!(f, "unsupported peer ({what})"),
        }
    }
}

/// A node as a `nodes` peer sees it: its labels and the addresses of its
/// `status.addresses` (every entry that is an IP address, whatever its type: the API says
/// "the IPs present in the node.Status.Addresses field").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeView {
    /// The node's labels.
    pub labels: Labels,
    /// Its addresses, sorted, without repeats.
    pub addresses: Vec<std::net::IpAddr>,
}

impl NodeView {
    /// A node with `labels` and the addresses among `addresses` (a host name is not one).
    pub fn new<'a>(labels: Labels, addresses: impl IntoIterator<Item = &'a str>) -> NodeView {
        let mut addresses: Vec<std::net::IpAddr> = addresses
            .into_iter()
            .filter_map(|a| a.parse().ok())
            .collect();
        addresses.sort_unstable();
        addresses.dedup();
        NodeView { labels, addresses }
    }
}

impl Peer {
    /// The addresses a `nodes` peer selects among `nodes` (none for another kind of peer).
    pub fn node_addresses<'a>(
        &self,
        nodes: impl IntoIterator<Item = &'a NodeView>,
    ) -> std::collections::BTreeSet<std::net::IpAddr> {
        match self {
            Peer::Nodes(sel) => nodes
                .into_iter()
                .filter(|n| sel.matches(&n.labels))
                .flat_map(|n| n.addresses.iter().copied())
                .collect(),
            _ => std::collections::BTreeSet::new(),
        }
    }
}

/// One entry of a rule's `protocols`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Port {
    /// A protocol and destination ports `first..=last`.
    Range {
        /// TCP, UDP or SCTP.
        protocol: Protocol,
        /// The first port (1..=65535).
        first: u16,
        /// The last port (`first` for a single port).
        last: u16,
    },
    /// `destinationNamedPort`: the container port of that name on the receiving pod (its
    /// protocol and number).
    Named(String),
}

impl fmt::Display for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Port::Range {
                protocol,
                first,
                last,
            } if first == last => write!(f, "{protocol}/{first}"),
            Port::Range {
                protocol,
                first,
                last,
            } => write!(f, "{protocol}/{first}-{last}"),
            Port::Named(n) => write!(f, "port {n}"),
        }
    }
}

/// One ingress or egress rule.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rule {
    /// Its name (may be empty).
    pub name: String,
    /// Its action.
    pub action: Action,
    /// `from` / `to` (at least one).
    pub peers: Vec<Peer>,
    /// `protocols`; empty: every protocol and port.
    pub ports: Vec<Port>,
}

impl Rule {
    /// Whether a peer of it cannot be applied and the rule is a Deny or Pass: it then denies
    /// everything in its direction (the API's fail-closed meaning for such rules). An Accept
    /// rule's unsupported peers match nothing instead.
    pub fn fails_closed(&self) -> bool {
        self.action != Action::Accept
            && self.peers.iter().any(|p| matches!(p, Peer::Unsupported(_)))
    }
}

/// A ClusterNetworkPolicy.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterPolicy {
    /// Its name (cluster-scoped).
    pub name: String,
    /// Its tier.
    pub tier: Tier,
    /// Its priority (0..=[`MAX_PRIORITY`]; lower decides first).
    pub priority: u16,
    /// The pods it applies to.
    pub subject: Pods,
    /// Ingress rules, in order (empty: it does not affect ingress).
    pub ingress: Vec<Rule>,
    /// Egress rules, in order.
    pub egress: Vec<Rule>,
    /// Which of its decisions the audit log records (its `k8s.ovn.org/acl-logging`
    /// annotation, as OVN-Kubernetes reads it on an AdminNetworkPolicy).
    pub log: LoggedActions,
}

/// Which actions of a policy's rules are logged when they decide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LoggedActions {
    /// Deny.
    pub deny: bool,
    /// Accept (and a Baseline Pass, which allows).
    pub allow: bool,
    /// An Admin Pass.
    pub pass: bool,
}

impl ClusterPolicy {
    /// Whether it applies to a pod with `labels` in a namespace with `ns_labels`.
    pub fn selects(&self, ns_labels: &Labels, labels: &Labels) -> bool {
        self.subject.selects(ns_labels, labels)
    }

    /// Its rules of direction `d`.
    pub fn rules(&self, d: crate::policy::Direction) -> &[Rule] {
        match d {
            crate::policy::Direction::Ingress => &self.ingress,
            crate::policy::Direction::Egress => &self.egress,
        }
    }

    /// Whether a rule of it has a `nodes` peer (its rows then follow the nodes).
    pub fn has_node_peers(&self) -> bool {
        self.ingress
            .iter()
            .chain(&self.egress)
            .any(|r| r.peers.iter().any(|p| matches!(p, Peer::Nodes(_))))
    }

    /// What decides first: the tier, then the priority, then the name (the API leaves equal
    /// priorities to the implementation; here the name orders them, the same on every node).
    pub fn precedence(&self) -> (Tier, u16, &str) {
        (self.tier, self.priority, &self.name)
    }
}

/// The port number a named port resolves to among a pod's container ports, with its protocol
/// (container port names are unique within a pod, whatever their protocol).
pub fn resolve_named(
    ports: &[crate::policy::ContainerPort],
    name: &str,
) -> Option<(Protocol, u16)> {
    ports
        .iter()
        .find(|p| p.name == name)
        .map(|p| (p.protocol, p.port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{namespace_labels, ContainerPort};

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn subjects_and_peers_select_by_namespace_and_pod() {
        let house = namespace_labels(
            "gryffindor",
            &labels(&[("conformance-house", "gryffindor")]),
        );
        let pod = labels(&[("conformance-house", "gryffindor")]);
        let by_ns = Pods::Namespaces(LabelSelector::labels([("conformance-house", "gryffindor")]));
        assert!(by_ns.selects(&house, &Labels::new()));
        assert!(!by_ns.selects(&Labels::new(), &pod));
        let by_pod = Pods::Pods {
            namespaces: LabelSelector::everything(),
            pods: LabelSelector::labels([("conformance-house", "gryffindor")]),
        };
        assert!(by_pod.selects(&Labels::new(), &pod));
        assert!(by_pod.selects_namespace(&Labels::new()));
        assert!(!by_pod.selects(&house, &Labels::new()));
        assert_eq!(
            by_pod.to_string(),
            "pods conformance-house=gryffindor in namespaces {}"
        );
    }

    #[test]
    fn unsupported_peers_fail_closed_by_action() {
        let rule = |action| Rule {
            name: "r".into(),
            action,
            peers: vec![Peer::Unsupported("domainNames".into())],
            ports: vec![],
        };
        assert!(
            !rule(Action::Accept).fails_closed(),
            "Accept: matches nothing"
        );
        assert!(rule(Action::Deny).fails_closed());
        assert!(rule(Action::Pass).fails_closed());
    }

    #[test]
    fn named_ports_resolve_by_name_whatever_their_protocol() {
        let ports = vec![
            ContainerPort {
                name: "web".into(),
                protocol: Protocol::Tcp,
                port: 80,
            },
            ContainerPort {
                name: "dns".into(),
                protocol: Protocol::Udp,
                port: 53,
            },
        ];
        assert_eq!(resolve_named(&ports, "dns"), Some((Protocol::Udp, 53)));
        assert_eq!(resolve_named(&ports, "web"), Some((Protocol::Tcp, 80)));
        assert_eq!(resolve_named(&ports, "none"), None);
    }
}
