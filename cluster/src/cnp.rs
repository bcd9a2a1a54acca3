//! Reading ClusterNetworkPolicies (`policy.networking.k8s.io/v1alpha2`) into the model of
//! `multitenant::cluster_policy`, checked as the API server checks them with the upstream CRD
//! installed (`deploy/crd-clusternetworkpolicies.yaml`), and more.
//!
//! Why strict, as for NetworkPolicies ([`crate::netpol`]): standalone files and an API server
//! without the CRD's schema are not validated by anyone else, and the CRD itself does not check
//! label selectors (its `operator` has no enum). A policy with a bad value is refused whole,
//! naming the field, and fails closed ([`fail_closed`]): its subject (every pod when the
//! subject cannot be read) is denied everything at its tier and priority, in the directions it
//! has rules for (both when they cannot be read), until it is fixed or deleted.
//!
//! Fields this reader does not know are refused, naming them, with one exception the API
//! defines: a peer with no field it knows (a newer API's kind of peer) and a `domainNames`
//! peer (which needs DNS answers this agent does not watch) are read as
//! [`Peer::Unsupported`]: an Accept rule treats them as matching nothing, a Deny or Pass rule
//! denies everything.

use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as KubeSelector;
use multitenant::cluster_policy::{
    Action, ClusterPolicy, LoggedActions, Peer, Pods, Port, Rule, Tier, MAX_ITEMS, MAX_PRIORITY,
    MAX_RULES, MAX_RULE_NAME,
};
use multitenant::policy::{LabelSelector, Protocol};
use serde_json::{Map, Value};

/// The API group.
pub const GROUP: &str = "policy.networking.k8s.io";
/// The version read.
pub const VERSION: &str = "v1alpha2";
/// The kind.
pub const KIND: &str = "ClusterNetworkPolicy";
/// The resource (plural).
pub const PLURAL: &str = "clusternetworkpolicies";

/// A value of a ClusterNetworkPolicy this agent cannot apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ClusterNetworkPolicy {policy}: {field}: {message}")]
pub struct CnpError {
    /// Its name.
    pub policy: String,
    /// The field's path (`spec.ingress[0].from[1].namespaces`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

type FieldError = (String, String);

fn fe(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    (field.into(), message.into())
}

/// The object's name (empty when it has none).
pub fn name_of(v: &Value) -> String {
    v.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Reads a ClusterNetworkPolicy (the whole object, as the API serves it).
pub fn read_cluster_policy(v: &Value) -> Result<ClusterPolicy, CnpError> {
    let name = name_of(v);
    read(v, &name).map_err(|(field, message)| CnpError {
        policy: name.clone(),
        field,
        message,
    })
}

fn read(v: &Value, name: &str) -> Result<ClusterPolicy, FieldError> {
    if name.is_empty() {
        return Err(fe("metadata.name", "a ClusterNetworkPolicy needs a name"));
    }
    if !dns_subdomain(name) {
        return Err(fe(
            "metadata.name",
            format!(
                "{name:?} is not a DNS subdomain (at most 253 lower-case letters, digits, '-' \
                 and '.', starting and ending with a letter or digit)"
            ),
        ));
    }
    if let Some(api) = v.get("apiVersion").and_then(Value::as_str) {
        if api != format!("{GROUP}/{VERSION}") {
            return Err(fe(
                "apiVersion",
                format!("{api:?}: this agent reads {GROUP}/{VERSION}"),
            ));
        }
    }
    let spec = object(v.get("spec"), "spec")?;
    known(
        spec,
        "spec",
        &["tier", "priority", "subject", "ingress", "egress"],
    )?;
    let tier = match spec.get("tier").and_then(Value::as_str) {
        Some("Admin") => Tier::Admin,
        Some("Baseline") => Tier::Baseline,
        Some(other) => {
            return Err(fe(
                "spec.tier",
                format!("{other:?}: expected Admin or Baseline"),
            ))
        }
        None => return Err(fe("spec.tier", "required: Admin or Baseline")),
    };
    let priority = match spec.get("priority") {
        Some(Value::Number(n)) => n
            .as_u64()
            .filter(|p| *p <= u64::from(MAX_PRIORITY))
            .map(|p| p as u16)
            .ok_or_else(|| {
                fe(
                    "spec.priority",
                    format!("{n}: expected an integer from 0 to {MAX_PRIORITY}"),
                )
            })?,
        Some(other) => {
            return Err(fe(
                "spec.priority",
                format!("{other}: expected an integer from 0 to {MAX_PRIORITY}"),
            ))
        }
        None => return Err(fe("spec.priority", "required")),
    };
    let subject = subject(spec.get("subject"))?;
    let ingress = rules(spec.get("ingress"), "spec.ingress", false)?;
    let egress = rules(spec.get("egress"), "spec.egress", true)?;
    Ok(ClusterPolicy {
        name: name.to_string(),
        tier,
        priority,
        subject,
        ingress,
        egress,
        log: logged_actions(v),
    })
}

/// What the policy's `k8s.ovn.org/acl-logging` annotation turns on (nothing without one; a
/// verdict whose severity cannot be read is off, and `sdnctl audit-logging` says why).
pub fn logged_actions(v: &Value) -> LoggedActions {
    let Some(a) = v
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(crate::audit::ACL_LOGGING_ANNOTATION))
        .and_then(Value::as_str)
    else {
        return LoggedActions::default();
    };
    let l = crate::audit::parse_acl_logging(a).logging;
    LoggedActions {
        deny: l.deny.is_some(),
        allow: l.allow.is_some(),
        pass: l.pass.is_some(),
    }
}

/// What a ClusterNetworkPolicy this agent cannot apply ([`read_cluster_policy`] refused it)
/// still does: at its tier and priority (the lowest precedence of its tier when they cannot be
/// read), its subject (every pod when it cannot be read) is denied everything in the
/// directions it has rules for (both when they cannot be read). `None` when it has no name.
pub fn fail_closed(v: &Value) -> Option<ClusterPolicy> {
    let name = name_of(v);
    if name.is_empty() {
        return None;
    }
    let spec = v.get("spec");
    let tier = match spec.and_then(|s| s.get("tier")).and_then(Value::as_str) {
        Some("Baseline") => Tier::Baseline,
        _ => Tier::Admin,
    };
    let priority = spec
        .and_then(|s| s.get("priority"))
        .and_then(Value::as_u64)
        .filter(|p| *p <= u64::from(MAX_PRIORITY))
        .map_or(MAX_PRIORITY, |p| p as u16);
    let subject = subject(spec.and_then(|s| s.get("subject")))
        .unwrap_or_else(|_| Pods::Namespaces(LabelSelector::everything()));
    // A direction it has rules for, or whose rules cannot be read (as the spec itself).
    let has = |d: &str| match spec {
        Some(Value::Object(s)) => match s.get(d) {
            None | Some(Value::Null) => false,
            Some(Value::Array(a)) => !a.is_empty(),
            Some(_) => true,
        },
        _ => true,
    };
    let deny_all = |on: bool| {
        if on {
            vec![Rule {
                name: "refused: deny all".into(),
                action: Action::Deny,
                peers: vec![Peer::Unsupported("refused policy".into())],
                ports: Vec::new(),
            }]
        } else {
            Vec::new()
        }
    };
    Some(ClusterPolicy {
        name,
        tier,
        priority,
        subject,
        ingress: deny_all(has("ingress")),
        egress: deny_all(has("egress")),
        log: logged_actions(v),
    })
}

fn object<'a>(v: Option<&'a Value>, at: &str) -> Result<&'a Map<String, Value>, FieldError> {
    match v {
        Some(Value::Object(m)) => Ok(m),
        Some(other) => Err(fe(at, format!("expected an object, found {other}"))),
        None => Err(fe(at, "required")),
    }
}

/// Refuses fields of `m` not in `names`, naming the first.
fn known(m: &Map<String, Value>, at: &str, names: &[&str]) -> Result<(), FieldError> {
    match m.keys().find(|k| !names.contains(&k.as_str())) {
        Some(k) => Err(fe(
            format!("{at}.{k}"),
            format!("unknown field (known: {})", names.join(", ")),
        )),
        None => Ok(()),
    }
}

/// A list of at most `max` items (`None`: absent).
fn list<'a>(v: Option<&'a Value>, at: &str, max: usize) -> Result<&'a [Value], FieldError> {
    match v {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) if a.len() <= max => Ok(a),
        Some(Value::Array(a)) => Err(fe(
            at,
            format!("{} items: at most {max} are allowed", a.len()),
        )),
        Some(other) => Err(fe(at, format!("expected a list, found {other}"))),
    }
}

/// Exactly one field of `m`, among `names`: its name and value.
fn one_of<'a>(
    m: &'a Map<String, Value>,
    at: &str,
    names: &[&str],
) -> Result<(&'a str, &'a Value), FieldError> {
    known(m, at, names)?;
    let mut set = m.iter().filter(|(_, v)| !v.is_null());
    match (set.next(), set.next()) {
        (Some((k, v)), None) => Ok((k.as_str(), v)),
        (None, _) => Err(fe(
            at,
            format!("exactly one of {} is required", names.join(", ")),
        )),
        (Some(_), Some(_)) => Err(fe(
            at,
            format!("exactly one of {} may be set", names.join(", ")),
        )),
    }
}

fn label_selector(v: &Value, at: &str) -> Result<LabelSelector, FieldError> {
    if let Value::Object(m) = v {
        known(m, at, &["matchLabels", "matchExpressions"])?;
    }
    let s: KubeSelector = serde_json::from_value(v.clone())
        .map_err(|e| fe(at, format!("not a label selector: {e}")))?;
    crate::netpol::selector(Some(&s), at)
}

fn subject(v: Option<&Value>) -> Result<Pods, FieldError> {
    let m = object(v, "spec.subject")?;
    let (k, v) = one_of(m, "spec.subject", &["namespaces", "pods"])?;
    pods(k, v, &format!("spec.subject.{k}"))
}

/// A `namespaces` or `pods` value.
fn pods(kind: &str, v: &Value, at: &str) -> Result<Pods, FieldError> {
    match kind {
        "namespaces" => Ok(Pods::Namespaces(label_selector(v, at)?)),
        _ => {
            let m = object(Some(v), at)?;
            known(m, at, &["namespaceSelector", "podSelector"])?;
            let namespaces = match m.get("namespaceSelector") {
                None | Some(Value::Null) => LabelSelector::everything(),
                Some(s) => label_selector(s, &format!("{at}.namespaceSelector"))?,
            };
            let pods = match m.get("podSelector") {
                None | Some(Value::Null) => {
                    return Err(fe(format!("{at}.podSelector"), "required"))
                }
                Some(s) => label_selector(s, &format!("{at}.podSelector"))?,
            };
            Ok(Pods::Pods { namespaces, pods })
        }
    }
}

fn rules(v: Option<&Value>, at: &str, egress: bool) -> Result<Vec<Rule>, FieldError> {
    let mut out = Vec::new();
    for (i, r) in list(v, at, MAX_RULES)?.iter().enumerate() {
        out.push(rule(r, &format!("{at}[{i}]"), egress)?);
    }
    Ok(out)
}

fn rule(v: &Value, at: &str, egress: bool) -> Result<Rule, FieldError> {
    let peers_field = if egress { "to" } else { "from" };
    let m = object(Some(v), at)?;
    known(m, at, &["name", "action", peers_field, "protocols"])?;
    let name = match m.get("name") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) if s.len() <= MAX_RULE_NAME => s.clone(),
        Some(Value::String(s)) => {
            return Err(fe(
                format!("{at}.name"),
                format!("{} characters: at most {MAX_RULE_NAME}", s.len()),
            ))
        }
        Some(other) => return Err(fe(format!("{at}.name"), format!("{other}: not a string"))),
    };
    let action = match m.get("action").and_then(Value::as_str) {
        Some("Accept") => Action::Accept,
        Some("Deny") => Action::Deny,
        Some("Pass") => Action::Pass,
        Some("Allow") => {
            return Err(fe(
                format!("{at}.action"),
                "\"Allow\" is v1alpha1's AdminNetworkPolicy word: a v1alpha2 ClusterNetworkPolicy says Accept",
            ))
        }
        Some(other) => {
            return Err(fe(
                format!("{at}.action"),
                format!("{other:?}: expected Accept, Deny or Pass"),
            ))
        }
        None => return Err(fe(format!("{at}.action"), "required: Accept, Deny or Pass")),
    };
    let peers_at = format!("{at}.{peers_field}");
    let raw = list(m.get(peers_field), &peers_at, MAX_ITEMS)?;
    if raw.is_empty() {
        return Err(fe(peers_at, "at least one peer is required"));
    }
    let mut peers = Vec::new();
    for (j, p) in raw.iter().enumerate() {
        peers.push(peer(p, &format!("{peers_at}[{j}]"), egress)?);
    }
    let ports_at = format!("{at}.protocols");
    let raw = list(m.get("protocols"), &ports_at, MAX_ITEMS)?;
    if matches!(m.get("protocols"), Some(Value::Array(a)) if a.is_empty()) {
        return Err(fe(
            ports_at,
            "an empty list: leave it out for every protocol",
        ));
    }
    let mut ports = Vec::new();
    for (j, p) in raw.iter().enumerate() {
        ports.push(port(p, &format!("{ports_at}[{j}]"))?);
    }
    Ok(Rule {
        name,
        action,
        peers,
        ports,
    })
}

fn peer(v: &Value, at: &str, egress: bool) -> Result<Peer, FieldError> {
    let m = object(Some(v), at)?;
    let kinds: &[&str] = if egress {
        &["namespaces", "pods", "nodes", "networks", "domainNames"]
    } else {
        &["namespaces", "pods"]
    };
    // A peer with no field this agent knows: a newer API's kind (fail closed by action).
    if !m.is_empty() && m.keys().all(|k| !kinds.contains(&k.as_str())) {
        let names: Vec<&str> = m.keys().map(String::as_str).collect();
        return Ok(Peer::Unsupported(names.join(",")));
    }
    let (k, v) = one_of(m, at, kinds)?;
    let at = format!("{at}.{k}");
    match k {
        "namespaces" | "pods" => Ok(Peer::Pods(pods(k, v, &at)?)),
        "nodes" => Ok(Peer::Nodes(label_selector(v, &at)?)),
        "networks" => {
            let raw = list(Some(v), &at, MAX_ITEMS)?;
            if raw.is_empty() {
                return Err(fe(at, "at least one network is required"));
            }
            let mut nets: Vec<IpNet> = Vec::new();
            for (i, n) in raw.iter().enumerate() {
                let f = format!("{at}[{i}]");
                let s = n
                    .as_str()
                    .ok_or_else(|| fe(&f, format!("{n}: expected a CIDR")))?;
                let net = cidr(s)
                    .ok_or_else(|| fe(&f, format!("{s:?} is not a CIDR (10.0.0.0/8, fd00::/8)")))?;
                if nets.contains(&net) {
                    return Err(fe(f, format!("{s} is listed twice")));
                }
                nets.push(net);
            }
            Ok(Peer::Networks(nets))
        }
        _ => {
            // domainNames: checked as the CRD does, then not applied (see the module docs).
            let raw = list(Some(v), &at, MAX_ITEMS)?;
            if raw.is_empty() {
                return Err(fe(at, "at least one domain name is required"));
            }
            for (i, d) in raw.iter().enumerate() {
                if !d.as_str().is_some_and(domain_name) {
                    return Err(fe(
                        format!("{at}[{i}]"),
                        format!("{d}: not a domain name (example.com, *.example.com)"),
                    ));
                }
            }
            Ok(Peer::Unsupported("domainNames".into()))
        }
    }
}

/// A CIDR as the API server's `isCIDR` reads it: an address and a prefix length; host bits
/// are allowed (and cleared here); IPv4 octets with leading zeros and zones are not.
fn cidr(s: &str) -> Option<IpNet> {
    if s.contains('%') {
        return None;
    }
    let (addr, _) = s.split_once('/')?;
    if addr.contains('.') && !addr.contains(':') {
        let octets: Vec<&str> = addr.split('.').collect();
        if octets.iter().any(|o| o.len() > 1 && o.starts_with('0')) {
            return None;
        }
    }
    let net: IpNet = s.parse().ok()?;
    if let IpNet::V6(n) = net {
        // An IPv4-mapped IPv6 network is refused by the API server.
        if n.addr().to_ipv4_mapped().is_some() {
            return None;
        }
    }
    Some(net.trunc())
}

/// A Kubernetes object name (RFC 1123 subdomain).
fn dns_subdomain(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=253).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'.')
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// The CRD's domain-name pattern: labels of letters, digits, `-` and `_`, optionally starting
/// with `*.`, at least two labels, an optional trailing dot.
fn domain_name(s: &str) -> bool {
    let s = s.strip_prefix("*.").unwrap_or(s);
    let s = s.strip_suffix('.').unwrap_or(s);
    let labels: Vec<&str> = s.split('.').collect();
    labels.len() >= 2
        && labels.iter().all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_')
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
        })
}

fn port(v: &Value, at: &str) -> Result<Port, FieldError> {
    let m = object(Some(v), at)?;
    let (k, v) = one_of(m, at, &["tcp", "udp", "sctp", "destinationNamedPort"])?;
    let at = format!("{at}.{k}");
    let protocol = match k {
        "tcp" => Protocol::Tcp,
        "udp" => Protocol::Udp,
        "sctp" => Protocol::Sctp,
        _ => {
            let name = v
                .as_str()
                .ok_or_else(|| fe(&at, format!("{v}: expected a port name")))?;
            if !crate::netpol::valid_port_name(name) {
                return Err(fe(
                    at,
                    format!(
                        "{name:?} is not a port name (1-15 lower-case letters, digits and '-', \
                         at least one letter)"
                    ),
                ));
            }
            return Ok(Port::Named(name.to_string()));
        }
    };
    let p = object(Some(v), &at)?;
    known(p, &at, &["destinationPort"])?;
    let dp_at = format!("{at}.destinationPort");
    let dp = object(p.get("destinationPort"), &dp_at)?;
    let (kind, v) = one_of(dp, &dp_at, &["number", "range"])?;
    let number = |v: &Value, f: &str| {
        v.as_u64()
            .filter(|n| (1..=65535).contains(n))
            .map(|n| n as u16)
            .ok_or_else(|| fe(f, format!("{v}: expected a port number from 1 to 65535")))
    };
    match kind {
        "number" => {
            let n = number(v, &format!("{dp_at}.number"))?;
            Ok(Port::Range {
                protocol,
                first: n,
                last: n,
            })
        }
        _ => {
            let r_at = format!("{dp_at}.range");
            let r = object(Some(v), &r_at)?;
            known(r, &r_at, &["start", "end"])?;
            let start = number(
                r.get("start").unwrap_or(&Value::Null),
                &format!("{r_at}.start"),
            )?;
            let end = number(r.get("end").unwrap_or(&Value::Null), &format!("{r_at}.end"))?;
            if start >= end {
                return Err(fe(
                    r_at,
                    format!("start {start} must be less than end {end}"),
                ));
            }
            Ok(Port::Range {
                protocol,
                first: start,
                last: end,
            })
        }
    }
}

#[cfg(test)]
mod tests;
