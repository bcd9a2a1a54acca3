//! Reading Kubernetes objects into the policy model (`multitenant::policy`): NetworkPolicies
//! (`networking.k8s.io/v1`); what policies need of Pods is read by [`crate::pods::SlimPod`].
//!
//! Why here and strict: the API server validates NetworkPolicies, but the standalone files and a
//! fake or old API server do not, and a policy read wrongly is a hole or an outage. Every value
//! is checked; a policy with one bad value is refused whole (logged with the field's path, never
//! half applied), because a partial policy would allow more or less than its author wrote. It
//! fails closed ([`fail_closed`]): what it selects is isolated in the directions it names and
//! nothing is allowed, until it is fixed or deleted.
//!
//! IPv6 `ipBlock`s are [`Peer::IpBlock6`]: they match the IPv6 traffic of a dual-stack node's
//! pods (on an IPv4 node, nothing).

use ipnet::IpNet;
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as KubeSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use multitenant::policy::{
    LabelSelector, Operator, Peer, Policy, PortSpec, Protocol, Requirement, Rule,
};

/// A value of a NetworkPolicy this agent cannot apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NetworkPolicy {policy}: {field}: {message}")]
pub struct PolicyError {
    /// `namespace/name`.
    pub policy: String,
    /// The field's path (`spec.ingress[0].ports[1].port`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// Reads a NetworkPolicy.
pub fn read_policy(np: &NetworkPolicy) -> Result<Policy, PolicyError> {
    let namespace = np.metadata.namespace.clone().unwrap_or_default();
    let name = np.metadata.name.clone().unwrap_or_default();
    let key = format!("{namespace}/{name}");
    let err = |field: String, message: String| PolicyError {
        policy: key.clone(),
        field,
        message,
    };
    if namespace.is_empty() || name.is_empty() {
        return Err(err(
            "metadata".into(),
            "a NetworkPolicy needs a name and a namespace".into(),
        ));
    }
    let spec = np.spec.clone().unwrap_or_default();
    let pod_selector =
        selector(spec.pod_selector.as_ref(), "spec.podSelector").map_err(|(f, m)| err(f, m))?;
    // policyTypes: as the API server defaults it when absent or empty
    // (`SetDefaults_NetworkPolicy`: Ingress, and Egress only for a non-empty egress list).
    let types: Vec<String> = match &spec.policy_types {
        Some(t) if !t.is_empty() => t.clone(),
        _ => {
            let mut t = vec!["Ingress".to_string()];
            if spec.egress.as_ref().is_some_and(|e| !e.is_empty()) {
                t.push("Egress".into());
            }
            t
        }
    };
    for (i, t) in types.iter().enumerate() {
        if t != "Ingress" && t != "Egress" {
            return Err(err(
                format!("spec.policyTypes[{i}]"),
                format!("{t:?}: expected Ingress or Egress"),
            ));
        }
    }
    let ingress = if types.iter().any(|t| t == "Ingress") {
        let mut rules = Vec::new();
        for (i, r) in spec.ingress.iter().flatten().enumerate() {
            let at = format!("spec.ingress[{i}]");
            rules.push(
                rule(r.from.as_deref(), r.ports.as_deref(), &at, "from")
                    .map_err(|(f, m)| err(f, m))?,
            );
        }
        Some(rules)
    } else {
        None
    };
    let egress = if types.iter().any(|t| t == "Egress") {
        let mut rules = Vec::new();
        for (i, r) in spec.egress.iter().flatten().enumerate() {
            let at = format!("spec.egress[{i}]");
            rules.push(
                rule(r.to.as_deref(), r.ports.as_deref(), &at, "to").map_err(|(f, m)| err(f, m))?,
            );
        }
        Some(rules)
    } else {
        None
    };
    Ok(Policy {
        namespace,
        name,
        pod_selector,
        ingress,
        egress,
    })
}

/// What a NetworkPolicy this agent cannot apply ([`read_policy`] refused it) still does: it
/// isolates the pods it selects, in the directions it names, and allows nothing (fail closed: a
/// policy meant to let some traffic through lets none, rather than all). Its selector, when
/// unreadable, selects every pod of its namespace; its directions, when unreadable, are both.
/// `None` when it has no namespace or name (it cannot be placed).
pub fn fail_closed(np: &NetworkPolicy) -> Option<Policy> {
    let namespace = np.metadata.namespace.clone().filter(|n| !n.is_empty())?;
    let name = np.metadata.name.clone().filter(|n| !n.is_empty())?;
    let spec = np.spec.clone().unwrap_or_default();
    let pod_selector = selector(spec.pod_selector.as_ref(), "spec.podSelector")
        .unwrap_or_else(|_| LabelSelector::everything());
    let (ingress, egress) = match &spec.policy_types {
        Some(t) if !t.is_empty() => {
            if t.iter().all(|t| t == "Ingress" || t == "Egress") {
                (
                    t.iter().any(|t| t == "Ingress"),
                    t.iter().any(|t| t == "Egress"),
                )
            } else {
                (true, true)
            }
        }
        _ => (true, spec.egress.as_ref().is_some_and(|e| !e.is_empty())),
    };
    Some(Policy {
        namespace,
        name,
        pod_selector,
        ingress: ingress.then(Vec::new),
        egress: egress.then(Vec::new),
    })
}

type FieldError = (String, String);

fn rule(
    peers: Option<&[NetworkPolicyPeer]>,
    ports: Option<&[NetworkPolicyPort]>,
    at: &str,
    peers_field: &str,
) -> Result<Rule, FieldError> {
    let mut out = Rule::default();
    for (j, p) in peers.unwrap_or_default().iter().enumerate() {
        let at = format!("{at}.{peers_field}[{j}]");
        out.peers.push(peer(p, &at)?);
    }
    for (j, p) in ports.unwrap_or_default().iter().enumerate() {
        out.ports.push(port(p, &format!("{at}.ports[{j}]"))?);
    }
    Ok(out)
}

/// One peer.
fn peer(p: &NetworkPolicyPeer, at: &str) -> Result<Peer, FieldError> {
    match (&p.ip_block, &p.namespace_selector, &p.pod_selector) {
        (Some(b), None, None) => {
            let cidr: IpNet = b.cidr.parse().map_err(|_| {
                (
                    format!("{at}.ipBlock.cidr"),
                    format!("{:?} is not a CIDR", b.cidr),
                )
            })?;
            let mut except = Vec::new();
            for (k, e) in b.except.iter().flatten().enumerate() {
                let f = format!("{at}.ipBlock.except[{k}]");
                let n: IpNet = e
                    .parse()
                    .map_err(|_| (f.clone(), format!("{e:?} is not a CIDR")))?;
                // An exception of the other family (a dual-stack policy's habit) takes
                // nothing out of this block.
                if n.addr().is_ipv4() != cidr.addr().is_ipv4() {
                    continue;
                }
                if !cidr.trunc().contains(&n) {
                    return Err((f, format!("{e} is not inside the block {cidr}")));
                }
                except.push(n);
            }
            Ok(match cidr {
                IpNet::V4(cidr) => Peer::IpBlock {
                    cidr,
                    except: except
                        .into_iter()
                        .filter_map(|e| match e {
                            IpNet::V4(e) => Some(e),
                            IpNet::V6(_) => None,
                        })
                        .collect(),
                },
                IpNet::V6(cidr) => Peer::IpBlock6 {
                    cidr,
                    except: except
                        .into_iter()
                        .filter_map(|e| match e {
                            IpNet::V6(e) => Some(e),
                            IpNet::V4(_) => None,
                        })
                        .collect(),
                },
            })
        }
        (Some(_), _, _) => Err((
            at.to_string(),
            "ipBlock cannot be combined with namespaceSelector or podSelector".into(),
        )),
        (None, None, None) => Err((
            at.to_string(),
            "a peer needs ipBlock, namespaceSelector or podSelector".into(),
        )),
        (None, ns, pods) => Ok(Peer::Pods {
            namespaces: ns
                .as_ref()
                .map(|s| selector(Some(s), &format!("{at}.namespaceSelector")))
                .transpose()?,
            pods: selector(pods.as_ref(), &format!("{at}.podSelector"))?,
        }),
    }
}

fn port(p: &NetworkPolicyPort, at: &str) -> Result<PortSpec, FieldError> {
    let protocol = match p.protocol.as_deref() {
        None => Protocol::Tcp,
        Some(s) => Protocol::parse(s).ok_or_else(|| {
            (
                format!("{at}.protocol"),
                format!("{s:?}: expected TCP, UDP or SCTP"),
            )
        })?,
    };
    let number = |n: i32, field: &str| {
        u16::try_from(n).ok().filter(|n| *n != 0).ok_or_else(|| {
            (
                format!("{at}.{field}"),
                format!("{n}: expected a port number 1..=65535"),
            )
        })
    };
    match (&p.port, p.end_port) {
        (None, None) => Ok(PortSpec::Any(protocol)),
        (None, Some(_)) => Err((
            format!("{at}.endPort"),
            "endPort needs a numeric port".into(),
        )),
        (Some(IntOrString::Int(n)), end) => {
            let first = number(*n, "port")?;
            let last = match end {
                None => first,
                Some(e) => {
                    let e = number(e, "endPort")?;
                    if e < first {
                        return Err((
                            format!("{at}.endPort"),
                            format!("{e} is below port {first}"),
                        ));
                    }
                    e
                }
            };
            Ok(PortSpec::Range {
                protocol,
                first,
                last,
            })
        }
        (Some(IntOrString::String(s)), None) => {
            // A number written as a string is the number (the API server accepts it so).
            if let Ok(n) = s.parse::<i32>() {
                let first = number(n, "port")?;
                return Ok(PortSpec::Range {
                    protocol,
                    first,
                    last: first,
                });
            }
            if !valid_port_name(s) {
                return Err((
                    format!("{at}.port"),
                    format!(
                        "{s:?} is not a port name (1-15 lower-case letters, digits and '-', \
                         at least one letter)"
                    ),
                ));
            }
            Ok(PortSpec::Named {
                protocol,
                name: s.clone(),
            })
        }
        (Some(IntOrString::String(_)), Some(_)) => Err((
            format!("{at}.endPort"),
            "endPort needs a numeric port, not a named one".into(),
        )),
    }
}

/// An IANA service name, as Kubernetes checks container port names.
pub(crate) fn valid_port_name(s: &str) -> bool {
    (1..=15).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.bytes().any(|b| b.is_ascii_lowercase())
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--")
}

pub(crate) fn selector(s: Option<&KubeSelector>, at: &str) -> Result<LabelSelector, FieldError> {
    let Some(s) = s else {
        return Ok(LabelSelector::everything());
    };
    let mut out = LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions: Vec::new(),
    };
    for (i, e) in s.match_expressions.iter().flatten().enumerate() {
        let f = format!("{at}.matchExpressions[{i}]");
        let operator = match e.operator.as_str() {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            other => {
                return Err((
                    format!("{f}.operator"),
                    format!("{other:?}: expected In, NotIn, Exists or DoesNotExist"),
                ))
            }
        };
        let values = e.values.clone().unwrap_or_default();
        match operator {
            Operator::In | Operator::NotIn if values.is_empty() => {
                return Err((
                    format!("{f}.values"),
                    format!("{} needs at least one value", e.operator),
                ))
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                return Err((
                    format!("{f}.values"),
                    format!("{} takes no values", e.operator),
                ))
            }
            _ => {}
        }
        if e.key.is_empty() {
            return Err((format!("{f}.key"), "empty key".into()));
        }
        out.match_expressions.push(Requirement {
            key: e.key.clone(),
            operator,
            values,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn np(json: serde_json::Value) -> NetworkPolicy {
        serde_json::from_value(json).unwrap()
    }

    fn read(spec: serde_json::Value) -> Result<Policy, PolicyError> {
        let mut v = serde_json::json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "p", "namespace": "ns"}});
        v["spec"] = spec;
        read_policy(&np(v))
    }

    #[test]
    fn reads_the_default_deny_shapes() {
        let p = read(serde_json::json!({"podSelector": {}})).unwrap();
        assert_eq!(p.ingress, Some(vec![]), "ingress isolated, nothing allowed");
        assert_eq!(p.egress, None);
        let p = read(serde_json::json!({"podSelector": {}, "policyTypes": ["Egress"]})).unwrap();
        assert_eq!((p.ingress, p.egress), (None, Some(vec![])));
        let p = read(serde_json::json!({"podSelector": {}, "ingress": [{}]})).unwrap();
        assert_eq!(p.ingress, Some(vec![Rule::default()]), "allow all");
        // egress rules without policyTypes make it an egress policy too.
        let p = read(serde_json::json!({"podSelector": {}, "egress": [{}]})).unwrap();
        assert_eq!(
            (p.ingress, p.egress),
            (Some(vec![]), Some(vec![Rule::default()]))
        );
        // An empty egress list does not (the API server adds Egress only for a non-empty one):
        // an ingress default-deny, egress untouched.
        let p = read(serde_json::json!({"podSelector": {}, "egress": []})).unwrap();
        assert_eq!((p.ingress, p.egress), (Some(vec![]), None));
        let p =
            read(serde_json::json!({"podSelector": {}, "policyTypes": [], "egress": []})).unwrap();
        assert_eq!((p.ingress, p.egress), (Some(vec![]), None));
    }

    #[test]
    fn a_policy_that_cannot_be_read_isolates_what_it_selects_and_allows_nothing() {
        let np = |spec: serde_json::Value| -> NetworkPolicy {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "bad", "namespace": "x"}, "spec": spec}))
            .unwrap()
        };
        // An unreadable selector: every pod of the namespace, ingress (the default).
        let bad_selector = np(serde_json::json!({"podSelector": {"matchExpressions": [
            {"key": "pod", "operator": "Near", "values": ["a"]}]},
            "ingress": [{"ports": [{"port": 99999}]}]}));
        assert!(read_policy(&bad_selector).is_err());
        let p = fail_closed(&bad_selector).unwrap();
        assert_eq!(p.pod_selector, LabelSelector::everything());
        assert_eq!((p.ingress, p.egress), (Some(vec![]), None));
        // A readable selector and named directions are kept; the rules are not.
        let bad_port = np(
            serde_json::json!({"podSelector": {"matchLabels": {"app": "db"}},
            "policyTypes": ["Egress"], "egress": [{"ports": [{"port": 99999}]}]}),
        );
        assert!(read_policy(&bad_port).is_err());
        let p = fail_closed(&bad_port).unwrap();
        assert_eq!(p.pod_selector, LabelSelector::labels([("app", "db")]));
        assert_eq!((p.ingress, p.egress), (None, Some(vec![])));
        // Unreadable directions: both.
        let p = fail_closed(&np(
            serde_json::json!({"podSelector": {}, "policyTypes": ["Both"]}),
        ))
        .unwrap();
        assert_eq!((p.ingress, p.egress), (Some(vec![]), Some(vec![])));
    }

    #[test]
    fn reads_peers_and_ports() {
        let p = read(serde_json::json!({
            "podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [{
                "from": [
                    {"podSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}},
                    {"namespaceSelector": {"matchLabels": {"env": "prod"}}, "podSelector": {}},
                    {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}},
                    {"ipBlock": {"cidr": "fd00::/8"}}
                ],
                "ports": [{"port": 5432}, {"protocol": "UDP", "port": 8000, "endPort": 8010},
                          {"port": "http"}, {"protocol": "SCTP"}, {"port": "53", "protocol": "UDP"}]
            }]})).unwrap();
        let r = &p.ingress.as_ref().unwrap()[0];
        assert_eq!(r.peers.len(), 4, "{:?}", r.peers);
        assert!(matches!(&r.peers[3], Peer::IpBlock6 { .. }));
        assert!(matches!(
            &r.peers[0],
            Peer::Pods {
                namespaces: None,
                ..
            }
        ));
        assert!(
            matches!(&r.peers[1], Peer::Pods { namespaces: Some(_), pods } if pods.is_everything())
        );
        assert_eq!(
            r.ports,
            vec![
                PortSpec::Range {
                    protocol: Protocol::Tcp,
                    first: 5432,
                    last: 5432
                },
                PortSpec::Range {
                    protocol: Protocol::Udp,
                    first: 8000,
                    last: 8010
                },
                PortSpec::Named {
                    protocol: Protocol::Tcp,
                    name: "http".into()
                },
                PortSpec::Any(Protocol::Sctp),
                PortSpec::Range {
                    protocol: Protocol::Udp,
                    first: 53,
                    last: 53
                },
            ]
        );
        // IPv6 blocks are IPv6 peers; an exception of the other family takes nothing out.
        let p = read(serde_json::json!({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "fd00::/8", "except": ["fd01::/16", "10.0.0.0/8"]}}]}]})).unwrap();
        let r = &p.ingress.unwrap()[0];
        assert_eq!(r.peers.len(), 1);
        let Peer::IpBlock6 { cidr, except } = &r.peers[0] else {
            panic!("{:?}", r.peers[0])
        };
        assert_eq!(cidr.to_string(), "fd00::/8");
        assert_eq!(except, &vec!["fd01::/16".parse().unwrap()]);
    }

    #[test]
    fn refuses_bad_values_naming_the_field() {
        let cases = [
            (
                serde_json::json!({"podSelector": {}, "policyTypes": ["Both"]}),
                "spec.policyTypes[0]: \"Both\"",
            ),
            (
                serde_json::json!({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}),
                "spec.podSelector.matchExpressions[0].operator",
            ),
            (
                serde_json::json!({"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}),
                "needs at least one value",
            ),
            (
                serde_json::json!({"podSelector": {}, "ingress": [{"ports": [{"port": 0}]}]}),
                "spec.ingress[0].ports[0].port: 0",
            ),
            (
                serde_json::json!({"podSelector": {}, "ingress": [{"ports": [{"port": 70000}]}]}),
                "70000",
            ),
            (
                serde_json::json!({"podSelector": {}, "ingress": [{"ports": [{"port": 90, "endPort": 80}]}]}),
                "80 is below port 90",
            ),
            (
                serde_json::json!({"podSelector": {}, "ingress": [{"ports": [{"endPort": 80}]}]}),
                "endPort needs a numeric port",
            ),
            (
                serde_json::json!({"podSelector": {}, "ingress": [{"ports": [{"port": "http", "endPort": 80}]}]}),
                "not a named one",
            ),
            (
                serde_json::json!({"podSelector": {}, "ingress": [{"ports": [{"port": "HTTP!"}]}]}),
                "is not a port name",
            ),
            (
                serde_json::json!({"podSelector": {}, "ingress": [{"ports": [{"protocol": "ICMP"}]}]}),
                "expected TCP, UDP or SCTP",
            ),
            (
                serde_json::json!({"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]}),
                "spec.egress[0].to[0].ipBlock.cidr",
            ),
            (
                serde_json::json!({"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/16"]}}]}]}),
                "not inside the block",
            ),
            (
                serde_json::json!({"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}]}),
                "cannot be combined",
            ),
            (
                serde_json::json!({"podSelector": {}, "egress": [{"to": [{}]}]}),
                "a peer needs",
            ),
        ];
        for (spec, want) in cases {
            let e = read(spec.clone()).unwrap_err().to_string();
            assert!(e.starts_with("NetworkPolicy ns/p: "), "{e}");
            assert!(e.contains(want), "{spec}: {e}");
        }
    }
}
