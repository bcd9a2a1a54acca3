//! Kubernetes NetworkPolicy (`networking.k8s.io/v1`) semantics, pure: the model a policy is read
//! into, label selectors, and which pods and namespaces a policy and its peers select.
//!
//! Why our own model and not k8s-openapi's types: this crate is pure and small (no serde, no
//! Kubernetes client), the flow builders and the tests build policies by hand, and reading a
//! policy into this model is where every bad value is found once, with a message naming the
//! field ([`crate::policy`] values are valid by construction; the agent's reader refuses the rest).
//!
//! Semantics, as Kubernetes defines them:
//! - a policy selects the pods of its own namespace that its `podSelector` matches;
//! - it affects ingress, egress or both (`policyTypes`; [`Policy::ingress`] and
//!   [`Policy::egress`] are `None` for a direction it does not affect). A pod selected by at
//!   least one policy affecting a direction is *isolated* in that direction: only what some
//!   rule of such a policy allows passes (the union of the rules); a pod no policy selects is
//!   not isolated;
//! - a rule allows traffic from (to) any of its peers, on any of its ports; no peers means every
//!   peer, no ports means every port;
//! - a peer is pods (by pod selector in the policy's namespace, by namespace selector, or both)
//!   or an IP block (a CIDR minus exceptions);
//! - a port is a protocol (TCP when not said), optionally a number, a range (`endPort`) or a
//!   name, which is looked up among the container ports of the pod that receives the traffic.
//!
//! Namespaces carry the label `kubernetes.io/metadata.name: <name>` as the API server sets it;
//! [`namespace_labels`] adds it where a source did not (standalone files), so selectors written
//! for it behave the same everywhere.

use std::collections::BTreeMap;
use std::fmt;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// Labels of an object.
pub type Labels = BTreeMap<String, String>;

/// The label the API server puts on every namespace: its name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// A namespace's labels with [`NAMESPACE_NAME_LABEL`] set to its name.
pub fn namespace_labels(name: &str, labels: &Labels) -> Labels {
    let mut l = labels.clone();
    l.entry(NAMESPACE_NAME_LABEL.to_string())
        .or_insert_with(|| name.to_string());
    l
}

/// The operator of a selector requirement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operator {
    /// The label's value is one of the values.
    In,
    /// The label is absent or its value is none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

/// One `matchExpressions` entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// The operator.
    pub operator: Operator,
    /// The values (`In`, `NotIn`: at least one; `Exists`, `DoesNotExist`: none).
    pub values: Vec<String>,
}

impl Requirement {
    fn matches(&self, labels: &Labels) -> bool {
        let v = labels.get(&self.key);
        match self.operator {
            Operator::In => v.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => v.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => v.is_some(),
            Operator::DoesNotExist => v.is_none(),
        }
    }
}

/// A label selector: every `matchLabels` pair and every requirement must hold (the empty
/// selector selects everything).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LabelSelector {
    /// `matchLabels`.
    pub match_labels: Labels,
    /// `matchExpressions`.
    pub match_expressions: Vec<Requirement>,
}

impl LabelSelector {
    /// The selector that selects everything (`{}`).
    pub fn everything() -> LabelSelector {
        LabelSelector::default()
    }

    /// A selector of `key=value` pairs.
    pub fn labels<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> LabelSelector {
        LabelSelector {
            match_labels: pairs
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            match_expressions: Vec::new(),
        }
    }

    /// Whether it selects everything.
    pub fn is_everything(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Whether `labels` are selected.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_everything() {
            return f.write_str("{}");
        }
        let mut parts: Vec<String> = self
            .match_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        for r in &self.match_expressions {
            parts.push(match r.operator {
                Operator::In => format!("{} in ({})", r.key, r.values.join(",")),
                Operator::NotIn => format!("{} notin ({})", r.key, r.values.join(",")),
                Operator::Exists => r.key.clone(),
                Operator::DoesNotExist => format!("!{}", r.key),
            });
        }
        f.write_str(&parts.join(","))
    }
}

/// A transport protocol a rule can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// TCP (the default).
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }

    /// The name Kubernetes uses (`TCP`, `UDP`, `SCTP`).
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }

    /// Parses a Kubernetes protocol name.
    pub fn parse(s: &str) -> Option<Protocol> {
        match s {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One entry of a rule's `ports`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PortSpec {
    /// Every port of the protocol (no `port`).
    Any(Protocol),
    /// Ports `first..=last` (`port`, or `port` to `endPort`).
    Range {
        /// The protocol.
        protocol: Protocol,
        /// The first port (1..=65535).
        first: u16,
        /// The last port (`first` for a single port).
        last: u16,
    },
    /// A named port: the container port of that name and protocol on the receiving pod.
    Named {
        /// The protocol.
        protocol: Protocol,
        /// The name (an IANA service name).
        name: String,
    },
}

impl PortSpec {
    /// The protocol.
    pub fn protocol(&self) -> Protocol {
        match self {
            PortSpec::Any(p) => *p,
            PortSpec::Range { protocol, .. } | PortSpec::Named { protocol, .. } => *protocol,
        }
    }
}

impl fmt::Display for PortSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortSpec::Any(p) => write!(f, "{p}"),
            PortSpec::Range {
                protocol,
                first,
                last,
            } if first == last => write!(f, "{protocol}/{first}"),
            PortSpec::Range {
                protocol,
                first,
                last,
            } => write!(f, "{protocol}/{first}-{last}"),
            PortSpec::Named { protocol, name } => write!(f, "{protocol}/{name}"),
        }
    }
}

/// One entry of a rule's `from` or `to`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Peer {
    /// Pods: those `pods` selects, in the namespaces `namespaces` selects (`None`: the
    /// policy's own namespace).
    Pods {
        /// `namespaceSelector` (`None` when absent).
        namespaces: Option<LabelSelector>,
        /// `podSelector` (everything when absent).
        pods: LabelSelector,
    },
    /// `ipBlock`: addresses in `cidr` but in none of `except`.
    IpBlock {
        /// The block.
        cidr: Ipv4Net,
        /// Addresses taken out of it (each inside `cidr`).
        except: Vec<Ipv4Net>,
    },
    /// An IPv6 `ipBlock` (dual stack): as [`Peer::IpBlock`].
    IpBlock6 {
        /// The block.
        cidr: Ipv6Net,
        /// Addresses taken out of it (each inside `cidr`).
        except: Vec<Ipv6Net>,
    },
}

impl Peer {
    /// Whether pod `labels` in namespace `pod_ns` (with labels `ns_labels`) is selected, for a
    /// policy in namespace `policy_ns`. IP blocks select no pod by this test (they match
    /// addresses).
    pub fn selects_pod(
        &self,
        policy_ns: &str,
        pod_ns: &str,
        ns_labels: &Labels,
        labels: &Labels,
    ) -> bool {
        match self {
            Peer::Pods { namespaces, pods } => {
                let ns_ok = match namespaces {
                    None => pod_ns == policy_ns,
                    Some(sel) => sel.matches(ns_labels),
                };
                ns_ok && pods.matches(labels)
            }
            Peer::IpBlock { .. } | Peer::IpBlock6 { .. } => false,
        }
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Pods {
                namespaces: None,
                pods,
            } => write!(f, "pods {pods}"),
            Peer::Pods {
                namespaces: Some(ns),
                pods,
            } if pods.is_everything() => write!(f, "namespaces {ns}"),
            Peer::Pods {
                namespaces: Some(ns),
                pods,
            } => write!(f, "pods {pods} in namespaces {ns}"),
            Peer::IpBlock { cidr, except } if except.is_empty() => write!(f, "ipBlock {cidr}"),
            Peer::IpBlock { cidr, except } => {
                let ex: Vec<String> = except.iter().map(|e| e.to_string()).collect();
                write!(f, "ipBlock {cidr} except {}", ex.join(","))
            }
            Peer::IpBlock6 { cidr, except } if except.is_empty() => write!(f, "ipBlock {cidr}"),
            Peer::IpBlock6 { cidr, except } => {
                let ex: Vec<String> = except.iter().map(|e| e.to_string()).collect();
                write!(f, "ipBlock {cidr} except {}", ex.join(","))
            }
        }
    }
}

/// One ingress or egress rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rule {
    /// `from` / `to`; empty: every peer.
    pub peers: Vec<Peer>,
    /// `ports`; empty: every port (and every protocol).
    pub ports: Vec<PortSpec>,
}

/// A direction of traffic, seen from the selected pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    /// Traffic to the pod.
    Ingress,
    /// Traffic from the pod.
    Egress,
}

impl Direction {
    /// `ingress` / `egress`.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A NetworkPolicy.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Policy {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// `podSelector`: the pods of its namespace it applies to.
    pub pod_selector: LabelSelector,
    /// Ingress rules when it affects ingress (`Some(vec![])`: it isolates and allows nothing).
    pub ingress: Option<Vec<Rule>>,
    /// Egress rules when it affects egress.
    pub egress: Option<Vec<Rule>>,
}

impl Policy {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Whether it applies to pod `labels` of namespace `namespace`.
    pub fn selects(&self, namespace: &str, labels: &Labels) -> bool {
        self.namespace == namespace && self.pod_selector.matches(labels)
    }

    /// Its rules of direction `d` (`None` when it does not affect `d`).
    pub fn rules(&self, d: Direction) -> Option<&[Rule]> {
        match d {
            Direction::Ingress => self.ingress.as_deref(),
            Direction::Egress => self.egress.as_deref(),
        }
    }
}

/// A container port of a pod (what named ports resolve against).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContainerPort {
    /// Its name (empty when unnamed).
    pub name: String,
    /// Its protocol.
    pub protocol: Protocol,
    /// Its number.
    pub port: u16,
}

/// The port number `name`/`protocol` resolves to among `ports` (the first container port of
/// that name and protocol, as kube-proxy and the upstream implementations read it).
pub fn resolve_named_port(ports: &[ContainerPort], protocol: Protocol, name: &str) -> Option<u16> {
    ports
        .iter()
        .find(|p| p.protocol == protocol && p.name == name)
        .map(|p| p.port)
}

/// `cidr` minus every net of `except`, as the fewest disjoint prefixes, in address order.
/// Exceptions outside `cidr` take nothing out; the result is empty when they cover it.
pub fn subtract(cidr: Ipv4Net, except: &[Ipv4Net]) -> Vec<Ipv4Net> {
    let except: Vec<IpNet> = except.iter().map(|e| IpNet::V4(*e)).collect();
    split_out(IpNet::V4(cidr.trunc()), &except)
        .into_iter()
        .filter_map(|n| match n {
            IpNet::V4(n) => Some(n),
            IpNet::V6(_) => None,
        })
        .collect()
}

/// [`subtract`] for an IPv6 block.
pub fn subtract6(cidr: Ipv6Net, except: &[Ipv6Net]) -> Vec<Ipv6Net> {
    let except: Vec<IpNet> = except.iter().map(|e| IpNet::V6(*e)).collect();
    split_out(IpNet::V6(cidr.trunc()), &except)
        .into_iter()
        .filter_map(|n| match n {
            IpNet::V6(n) => Some(n),
            IpNet::V4(_) => None,
        })
        .collect()
}

/// `net` less `except`: whole when no exception touches it, nothing when one covers it, else
/// its two halves, each split the same way (a single address is either excluded or untouched).
fn split_out(net: IpNet, except: &[IpNet]) -> Vec<IpNet> {
    if except.iter().any(|e| e.contains(&net)) {
        return Vec::new();
    }
    if !except.iter().any(|e| net.contains(e)) {
        return vec![net];
    }
    net.subnets(net.prefix_len() + 1)
        .map(|halves| halves.flat_map(|h| split_out(h, except)).collect())
        .unwrap_or_default()
}

/// Ports `first..=last` as the fewest `(value, mask)` pairs that match exactly them (how a range
/// becomes OpenFlow `tp_dst=value/mask` matches).
pub fn port_masks(first: u16, last: u16) -> Vec<(u16, u16)> {
    let mut out = Vec::new();
    let (mut lo, hi) = (u32::from(first), u32::from(last));
    while lo <= hi {
        // The largest aligned block starting at lo that fits.
        let mut size = if lo == 0 {
            1u32 << 16
        } else {
            1u32 << lo.trailing_zeros()
        };
        while lo + size - 1 > hi {
            size >>= 1;
        }
        let mask = !(size - 1) & 0xffff;
        out.push((lo as u16, mask as u16));
        lo += size;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_follow_kubernetes_semantics() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        assert!(LabelSelector::everything().matches(&l));
        assert!(LabelSelector::everything().matches(&Labels::new()));
        assert!(LabelSelector::labels([("app", "web")]).matches(&l));
        assert!(!LabelSelector::labels([("app", "db")]).matches(&l));
        assert!(!LabelSelector::labels([("app", "web"), ("x", "y")]).matches(&l));
        let req = |key: &str, operator, values: &[&str]| LabelSelector {
            match_labels: Labels::new(),
            match_expressions: vec![Requirement {
                key: key.into(),
                operator,
                values: values.iter().map(|v| v.to_string()).collect(),
            }],
        };
        assert!(req("app", Operator::In, &["web", "db"]).matches(&l));
        assert!(!req("app", Operator::In, &["db"]).matches(&l));
        assert!(!req("missing", Operator::In, &["db"]).matches(&l));
        assert!(req("app", Operator::NotIn, &["db"]).matches(&l));
        assert!(!req("app", Operator::NotIn, &["web"]).matches(&l));
        assert!(
            req("missing", Operator::NotIn, &["web"]).matches(&l),
            "NotIn holds for an absent key"
        );
        assert!(req("tier", Operator::Exists, &[]).matches(&l));
        assert!(!req("missing", Operator::Exists, &[]).matches(&l));
        assert!(req("missing", Operator::DoesNotExist, &[]).matches(&l));
        assert!(!req("tier", Operator::DoesNotExist, &[]).matches(&l));
        assert_eq!(
            req("app", Operator::NotIn, &["a", "b"]).to_string(),
            "app notin (a,b)"
        );
    }

    #[test]
    fn peers_select_by_namespace_and_pod() {
        let web = labels(&[("app", "web")]);
        let ns_prod = namespace_labels("prod", &labels(&[("env", "prod")]));
        let own = Peer::Pods {
            namespaces: None,
            pods: LabelSelector::labels([("app", "web")]),
        };
        assert!(own.selects_pod("prod", "prod", &ns_prod, &web));
        assert!(!own.selects_pod("dev", "prod", &ns_prod, &web));
        let by_ns = Peer::Pods {
            namespaces: Some(LabelSelector::labels([("env", "prod")])),
            pods: LabelSelector::everything(),
        };
        assert!(by_ns.selects_pod("dev", "prod", &ns_prod, &Labels::new()));
        let by_name = Peer::Pods {
            namespaces: Some(LabelSelector::labels([(NAMESPACE_NAME_LABEL, "prod")])),
            pods: LabelSelector::labels([("app", "db")]),
        };
        assert!(!by_name.selects_pod("dev", "prod", &ns_prod, &web));
        assert!(by_name.selects_pod("dev", "prod", &ns_prod, &labels(&[("app", "db")])));
        let block = Peer::IpBlock {
            cidr: "10.0.0.0/8".parse().unwrap(),
            except: vec![],
        };
        assert!(!block.selects_pod("prod", "prod", &ns_prod, &web));
    }

    #[test]
    fn ip_blocks_subtract_their_exceptions() {
        let n = |s: &str| s.parse::<Ipv4Net>().unwrap();
        assert_eq!(subtract(n("10.0.0.0/8"), &[]), vec![n("10.0.0.0/8")]);
        assert_eq!(
            subtract(n("10.0.0.0/24"), &[n("10.0.0.128/25")]),
            vec![n("10.0.0.0/25")]
        );
        assert_eq!(
            subtract(n("10.0.0.0/24"), &[n("10.0.0.0/26")]),
            vec![n("10.0.0.64/26"), n("10.0.0.128/25")]
        );
        assert_eq!(subtract(n("10.0.0.0/24"), &[n("10.0.0.0/16")]), vec![]);
        assert_eq!(
            subtract(n("10.0.0.0/24"), &[n("192.168.0.0/16")]),
            vec![n("10.0.0.0/24")]
        );
        // One address out of a /30.
        assert_eq!(
            subtract(n("10.0.0.0/30"), &[n("10.0.0.2/32")]),
            vec![n("10.0.0.0/31"), n("10.0.0.3/32")]
        );
        // Every address of the result is in the block and in no exception, and the result
        // covers every such address (checked on a small block).
        let ex = [n("10.1.0.16/28"), n("10.1.0.200/31")];
        let parts = subtract(n("10.1.0.0/24"), &ex);
        for a in 0u32..256 {
            let ip = std::net::Ipv4Addr::from(0x0a01_0000 + a);
            let want = !ex.iter().any(|e| e.contains(&ip));
            let got = parts.iter().filter(|p| p.contains(&ip)).count();
            assert_eq!(got, usize::from(want), "{ip}");
        }
        assert_eq!(subtract(n("0.0.0.0/0"), &[]), vec![n("0.0.0.0/0")]);
    }

    #[test]
    fn ipv6_blocks_subtract_their_exceptions_too() {
        let n = |s: &str| s.parse::<Ipv6Net>().unwrap();
        assert_eq!(
            subtract6(n("fd00::/8"), &[n("fd01::/16")]),
            vec![
                n("fd00::/16"),
                n("fd02::/15"),
                n("fd04::/14"),
                n("fd08::/13"),
                n("fd10::/12"),
                n("fd20::/11"),
                n("fd40::/10"),
                n("fd80::/9")
            ]
        );
        assert_eq!(subtract6(n("::/0"), &[n("::/0")]), vec![]);
        assert_eq!(
            subtract6(n("fd01::/126"), &[n("fd01::2/128")]),
            vec![n("fd01::/127"), n("fd01::3/128")]
        );
    }

    #[test]
    fn port_ranges_become_masks() {
        assert_eq!(port_masks(80, 80), vec![(80, 0xffff)]);
        assert_eq!(port_masks(8000, 8003), vec![(8000, 0xfffc)]);
        assert_eq!(port_masks(1000, 1005), vec![(1000, 0xfffc), (1004, 0xfffe)]);
        assert_eq!(port_masks(0, 65535), vec![(0, 0)]);
        assert_eq!(port_masks(1, 65535).len(), 16);
        // Every range matches exactly its ports.
        for (a, b) in [
            (1, 1),
            (1, 2),
            (3, 17),
            (1024, 65535),
            (32768, 32769),
            (5, 4000),
        ] {
            let masks = port_masks(a, b);
            for p in 0..=65535u16 {
                let hits = masks.iter().filter(|(v, m)| p & m == *v).count();
                assert_eq!(hits, usize::from((a..=b).contains(&p)), "{a}-{b} port {p}");
            }
        }
    }

    #[test]
    fn named_ports_resolve_by_name_and_protocol() {
        let ports = vec![
            ContainerPort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 8080,
            },
            ContainerPort {
                name: "dns".into(),
                protocol: Protocol::Udp,
                port: 53,
            },
        ];
        assert_eq!(
            resolve_named_port(&ports, Protocol::Tcp, "http"),
            Some(8080)
        );
        assert_eq!(resolve_named_port(&ports, Protocol::Udp, "http"), None);
        assert_eq!(resolve_named_port(&ports, Protocol::Udp, "dns"), Some(53));
        assert_eq!(resolve_named_port(&ports, Protocol::Tcp, "none"), None);
    }
}
