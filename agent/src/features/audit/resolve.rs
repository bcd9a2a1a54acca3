//! From a packet-in to an audit line: what decided (the registers the decision row wrote),
//! who the two ends are (the node's pods by port and address, the cluster's pods by address,
//! a VNID's namespaces), and whether the namespace concerned asked for the line at all (rows
//! outlive a setting by one sync, and a VNID shared by two namespaces carries both's rows).
//!
//! Pure over its inputs (the cluster state, the local pods, the policy view), so each kind of
//! decision is tested here without a switch.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use cluster::audit::{AclLogging, Severity};
use cluster::ClusterState;
use flows::audit::Decision;
use flows::Reg;
use multitenant::policy::Direction;
use ovs::openflow::PacketIn;

use super::line::{now, End, Line};
use super::packet::{self, Headers};
use crate::features::network_policy::{LocalPodRef, PolicyView};

/// What a line is resolved against.
pub(crate) struct World<'a> {
    /// This node's name.
    pub node: &'a str,
    /// The cluster state.
    pub state: &'a ClusterState,
    /// The node's pods, by ofport.
    pub by_port: &'a HashMap<u32, LocalPodRef>,
    /// The node's pods, by address.
    pub by_ip: &'a HashMap<IpAddr, LocalPodRef>,
    /// Networkpolicy mode: what the rows' rules and isolations are.
    pub policy: Option<&'a PolicyView>,
    /// The node's own addresses: its gateways (tun0) and its node address.
    pub gateways: &'a [IpAddr],
    /// Namespaces by VNID (from the state's NetNamespaces).
    pub vnid_names: &'a HashMap<u32, Vec<String>>,
}

/// A resolved copy: its line and what folds it with the copies of its connection.
pub(crate) struct Resolved {
    /// The line.
    pub line: Line,
    /// Its connection.
    pub key: super::fold::Key,
}

/// Namespaces by VNID.
pub(crate) fn vnid_names(state: &ClusterState) -> HashMap<u32, Vec<String>> {
    let mut out: HashMap<u32, Vec<String>> = HashMap::new();
    for n in state.net_namespaces.values() {
        out.entry(n.net_id).or_default().push(n.net_name.clone());
    }
    out
}

impl World<'_> {
    fn logging(&self, ns: &str) -> AclLogging {
        self.state.audit_of(ns)
    }

    /// An end by its address: a local pod, a pod of the cluster (searched in `vnid`'s
    /// namespaces first), the node, or an address alone.
    fn end(&self, ip: IpAddr, port: Option<u16>, vnid: Option<u32>) -> End {
        let mut e = End {
            ip: Some(ip),
            port,
            ..End::default()
        };
        if let Some(p) = self.by_ip.get(&ip) {
            e.namespace = Some(p.namespace.clone());
            e.pod = Some(p.name.clone());
            return e;
        }
        if self.gateways.contains(&ip) {
            e.host = Some("node".into());
            return e;
        }
        let names = vnid.and_then(|v| self.vnid_names.get(&v));
        let matches = |pv: &flows::PodView| {
            pv.ip.map(IpAddr::from) == Some(ip) || pv.ip6.map(IpAddr::from) == Some(ip)
        };
        let pods = &self.state.peer_pods;
        let mut found = names.into_iter().flatten().find_map(|ns| {
            pods.get(ns)?
                .values()
                .find(|pv| matches(pv))
                .map(|pv| (ns.clone(), pv.name.clone()))
        });
        if found.is_none() && names.is_none() {
            found = pods.iter().find_map(|(ns, m)| {
                m.values()
                    .find(|pv| matches(pv))
                    .map(|pv| (ns.to_string(), pv.name.clone()))
            });
        }
        match (found, names) {
            (Some((ns, pod)), _) => {
                e.namespace = Some(ns);
                e.pod = Some(pod);
            }
            (None, _) if vnid == Some(0) => e.host = Some("host network".into()),
            (None, Some(ns)) if ns.len() == 1 => e.namespace = Some(ns[0].clone()),
            (None, _) if vnid.is_none() => e.host = Some("external".into()),
            _ => {}
        }
        e
    }

    fn pod_at(&self, port: u32) -> Option<&LocalPodRef> {
        (port != 0).then(|| self.by_port.get(&port)).flatten()
    }

    /// The namespaces of a VNID, or of the pod on a port.
    fn namespaces(&self, port: Option<&LocalPodRef>, vnid: u32) -> Vec<String> {
        match port {
            Some(p) => vec![p.namespace.clone()],
            None => self.vnid_names.get(&vnid).cloned().unwrap_or_default(),
        }
    }
}

/// The severity `logging` gives a verdict.
fn severity(logging: AclLogging, allow: bool) -> Option<Severity> {
    if allow {
        logging.allow
    } else {
        logging.deny
    }
}

/// The first namespace of `candidates` that logs the verdict, with its severity.
fn first_logging(w: &World<'_>, candidates: &[String], allow: bool) -> Option<(String, Severity)> {
    candidates
        .iter()
        .find_map(|ns| severity(w.logging(ns), allow).map(|s| (ns.clone(), s)))
}

fn vnid_words(w: &World<'_>, v: u32) -> String {
    match w.vnid_names.get(&v) {
        Some(ns) if !ns.is_empty() => format!("VNID {v} ({})", ns.join(", ")),
        _ => format!("VNID {v}"),
    }
}

/// The line of one packet-in, or `None` when it is not an audit copy, cannot be read, or no
/// namespace concerned asks for it any more.
pub(crate) fn resolve(w: &World<'_>, pin: &PacketIn) -> Option<Resolved> {
    if pin.userdata != flows::audit::AUDIT_USERDATA {
        return None;
    }
    let md = &pin.metadata;
    let reg = |r: Reg| md.reg(usize::from(r.number()));
    let (decision, detail) = Decision::from_reg(reg(Reg::AuditCode))?;
    let mut h: Headers = packet::parse(&pin.packet)?;
    let allow = decision.allows();
    let mut src_vnid = reg(Reg::SrcVnid);
    let mut dst_vnid = reg(Reg::DstVnid);
    let in_port = md.in_port.unwrap_or(0);
    let mut src_pod = w.pod_at(reg(Reg::SrcPort)).or_else(|| w.pod_at(in_port));
    let mut dst_pod = w.pod_at(reg(Reg::OutPort));
    // Every packet of a logged tenancy allow is copied, both ways, and the copies of the two
    // directions may come up out of order (different handler threads): the line, written at
    // the connection's first copy read, names the connection as its client opened it, with
    // the end on an ephemeral port (32768 and up) as the source.
    if decision == Decision::TenancyAllow && server_side(&h) {
        std::mem::swap(&mut h.src, &mut h.dst);
        std::mem::swap(&mut h.sport, &mut h.dport);
        std::mem::swap(&mut src_vnid, &mut dst_vnid);
        std::mem::swap(&mut src_pod, &mut dst_pod);
    }
    let (sport, dport) = if h.is_icmp() {
        (None, None)
    } else {
        (h.sport, h.dport)
    };
    let mut src = w.end(
        h.src,
        sport,
        (decision != Decision::Spoof).then_some(src_vnid),
    );
    let mut dst = w.end(h.dst, dport, (dst_pod.is_some()).then_some(dst_vnid));
    if let Some(p) = src_pod {
        if decision != Decision::Spoof {
            src.namespace = Some(p.namespace.clone());
            src.pod = Some(p.name.clone());
            src.host = None;
        }
    }
    if let Some(p) = dst_pod {
        dst.namespace = Some(p.namespace.clone());
        dst.pod = Some(p.name.clone());
        dst.host = None;
    }
    let mut line = Line {
        time: now(),
        node: w.node.to_string(),
        event: "decision",
        verdict: if decision.passes() {
            "pass"
        } else if allow {
            "allow"
        } else {
            "deny"
        },
        kind: decision.kind(),
        protocol: Some(h.protocol()),
        icmp: h
            .is_icmp()
            .then(|| (h.sport.unwrap_or(0), h.dport.unwrap_or(0))),
        ip_len: (!h.arp).then_some(h.ip_len),
        table: Some(decision.table().id()),
        packets: Some(1),
        ..Line::default()
    };
    let (namespace, sev) = match decision {
        Decision::TenancyAllow | Decision::TenancyDeny => {
            line.src_vnid = Some(src_vnid);
            line.dst_vnid = Some(dst_vnid);
            line.object = Some("tenancy".into());
            line.rule = Some(if allow {
                if src_vnid == dst_vnid {
                    format!("same tenant: {}", vnid_words(w, src_vnid))
                } else {
                    format!(
                        "a global namespace: {} to {}",
                        vnid_words(w, src_vnid),
                        vnid_words(w, dst_vnid)
                    )
                }
            } else {
                format!(
                    "different tenants: {} to {}",
                    vnid_words(w, src_vnid),
                    vnid_words(w, dst_vnid)
                )
            });
            let mut candidates = w.namespaces(dst_pod, dst_vnid);
            candidates.extend(w.namespaces(src_pod, src_vnid));
            first_logging(w, &candidates, allow)?
        }
        Decision::PolicyIngressAllow
        | Decision::PolicyIngressDeny
        | Decision::PolicyEgressAllow
        | Decision::PolicyEgressDeny => {
            let ingress = matches!(
                decision,
                Decision::PolicyIngressAllow | Decision::PolicyIngressDeny
            );
            let (dir, target) = if ingress {
                (Direction::Ingress, dst_pod)
            } else {
                (Direction::Egress, src_pod)
            };
            line.direction = Some(if ingress { "ingress" } else { "egress" });
            line.src_vnid = Some(src_vnid);
            let port = target.map_or(0, |p| p.ofport);
            let view = w.policy;
            if allow {
                let rule = reg(Reg::AuditRule);
                let refs: Vec<flows::RuleRef> = match view {
                    Some(v) if rule != 0 => v.rules.get(&rule).cloned().into_iter().collect(),
                    Some(v) => v.plain.get(&(dir, port)).cloned().unwrap_or_default(),
                    None => Vec::new(),
                };
                let policies: Vec<String> = refs.iter().map(|r| r.policy.clone()).collect();
                line.object = Some(if policies.is_empty() {
                    "NetworkPolicy (rule no longer in effect)".into()
                } else {
                    format!("NetworkPolicy {}", policies.join(", "))
                });
                line.rule = Some(if refs.is_empty() {
                    format!("conjunction {rule}")
                } else {
                    refs.iter()
                        .map(|r| {
                            format!(
                                "{} rule {}{}",
                                r.direction,
                                r.index,
                                if r.named { " (named ports)" } else { "" }
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(" and ")
                });
            } else {
                let isolating = view
                    .and_then(|v| v.isolated.get(&port))
                    .map(|i| {
                        if ingress {
                            i.ingress.clone()
                        } else {
                            i.egress.clone()
                        }
                    })
                    .unwrap_or_default();
                line.object = Some(format!("NetworkPolicy {}", isolating.join(", ")));
                line.rule = Some(format!(
                    "default deny: the pod is isolated for {dir} and no rule allows this"
                ));
            }
            let ns = target
                .map(|p| p.namespace.clone())
                .into_iter()
                .collect::<Vec<_>>();
            first_logging(w, &ns, allow)?
        }
        Decision::ClusterIngressDeny
        | Decision::ClusterIngressAllow
        | Decision::ClusterIngressPass
        | Decision::ClusterEgressDeny
        | Decision::ClusterEgressAllow
        | Decision::ClusterEgressPass => {
            let ingress = matches!(
                decision,
                Decision::ClusterIngressDeny
                    | Decision::ClusterIngressAllow
                    | Decision::ClusterIngressPass
            );
            line.direction = Some(if ingress { "ingress" } else { "egress" });
            line.src_vnid = Some(src_vnid);
            let id = reg(Reg::AuditRule);
            let subject = if ingress { dst_pod } else { src_pod };
            let ns = subject.map(|p| p.namespace.clone()).unwrap_or_default();
            // The rule, from the rows in effect; its policy's annotation says at what severity
            // (a policy that two standalone files define differently is keyed `name (file)`).
            let rref = w.policy.and_then(|v| v.rules.get(&id));
            match rref.and_then(|r| Some((r, r.cluster.as_ref()?))) {
                Some((rref, c)) => {
                    let base = rref.policy.split(" (").next().unwrap_or_default();
                    let logging = w
                        .state
                        .cluster_policy_logging
                        .get(base)
                        .map(|s| s.logging)
                        .unwrap_or_default();
                    let sev = match decision {
                        Decision::ClusterIngressPass | Decision::ClusterEgressPass => logging.pass,
                        _ if allow => logging.allow,
                        _ => logging.deny,
                    }?;
                    line.object = Some(format!(
                        "ClusterNetworkPolicy {} ({} tier, priority {})",
                        rref.policy, c.tier, c.priority
                    ));
                    let name = if c.name.is_empty() {
                        String::new()
                    } else {
                        format!(" {:?}", c.name)
                    };
                    line.rule = Some(format!(
                        "{} rule {}{name} ({})",
                        rref.direction, rref.index, c.action
                    ));
                    line.table = Some(flows::policy::cluster_table(c.tier, rref.direction).id());
                    (ns, sev)
                }
                // A copy of a row that changed since: the decision was made, its rule is gone.
                None => {
                    line.object = Some("ClusterNetworkPolicy (rule no longer in effect)".into());
                    line.rule = Some(format!("conjunction {id}"));
                    (ns, Severity::Notice)
                }
            }
        }
        Decision::FirewallAllow | Decision::FirewallDeny => {
            line.src_vnid = Some(src_vnid);
            line.direction = Some("egress");
            let candidates = w.namespaces(src_pod, src_vnid);
            let (ns, sev) = first_logging(w, &candidates, allow)?;
            let (object, rule) = firewall_words(w.state, &ns, detail);
            line.object = Some(object);
            line.rule = Some(rule);
            if dst.namespace.is_none() && dst.pod.is_none() {
                dst.host = Some("external".into());
            }
            (ns, sev)
        }
        Decision::Spoof => {
            let pod = w.pod_at(in_port);
            src.namespace = pod.map(|p| p.namespace.clone());
            src.pod = pod.map(|p| p.name.clone());
            line.object = Some("spoof guard".into());
            line.rule = Some(match pod {
                Some(p) => format!(
                    "sent from port {in_port} with a source that is not the pod's ({})",
                    p.ip.map(|a| a.to_string())
                        .or(p.ip6.map(|a| a.to_string()))
                        .unwrap_or_else(|| "no address".into())
                ),
                None => format!("sent from port {in_port}, which holds no pod of this node"),
            });
            let ns = pod.map(|p| p.namespace.clone());
            let sev = ns
                .as_deref()
                .and_then(|n| w.logging(n).deny)
                .unwrap_or(Severity::Alert);
            (ns.unwrap_or_default(), sev)
        }
    };
    line.severity = sev.name();
    line.namespace = (!namespace.is_empty()).then_some(namespace);
    // Both directions of a connection are one key: where every packet is copied (multitenant
    // allows), a reply folds into its connection's line.
    let (a, b) = ((h.src, h.sport), (h.dst, h.dport));
    let ((lo, lo_port), (hi, hi_port)) = if h.is_icmp() || a <= b {
        (a, b)
    } else {
        (b, a)
    };
    let key = super::fold::Key {
        code: reg(Reg::AuditCode),
        rule: reg(Reg::AuditRule),
        src: lo,
        dst: hi,
        proto: h.proto,
        sport: lo_port,
        dport: hi_port,
    };
    line.src = Some(src);
    line.dst = Some(dst);
    Some(Resolved { line, key })
}

/// Whether a TCP, UDP or SCTP packet goes from a server's port to a client's: from a port
/// below the ephemeral range to one in it.
fn server_side(h: &Headers) -> bool {
    const EPHEMERAL: u16 = 32768;
    matches!(h.proto, 6 | 17 | 132)
        && !h.arp
        && matches!((h.sport, h.dport), (Some(s), Some(d)) if s < EPHEMERAL && d >= EPHEMERAL)
}

/// The EgressNetworkPolicy of `namespace` and rule `detail`, in words.
fn firewall_words(state: &ClusterState, namespace: &str, detail: u32) -> (String, String) {
    let policy = state
        .egress_policies
        .values()
        .find(|p| p.metadata.namespace.as_deref() == Some(namespace));
    let name = policy
        .map(|p| format!("{namespace}/{}", p.metadata.name.as_deref().unwrap_or("?")))
        .unwrap_or_else(|| format!("{namespace}/?"));
    let object = format!("EgressNetworkPolicy {name}");
    let rule = match detail {
        flows::egress::AUDIT_DROP_ALL => {
            "every external destination dropped: the namespace's egress policies cannot be applied as one (several policies, a shared VNID, or a policy that cannot be read)".to_string()
        }
        flows::egress::AUDIT_NO_IPV6_RULE => {
            "IPv6 dropped: the policy names no IPv6 destination".to_string()
        }
        i => match policy.and_then(|p| p.spec.egress.get(i as usize)) {
            Some(r) => format!(
                "rule {i}: {:?} to {}",
                r.rule_type,
                r.to.cidr_selector
                    .clone()
                    .or_else(|| r.to.dns_name.clone())
                    .unwrap_or_default()
            ),
            None => format!("rule {i}"),
        },
    };
    (object, rule)
}

/// Shared handles the resolver's inputs come from, kept between copies.
#[derive(Default)]
pub(crate) struct Cache {
    /// The state the VNID map was built from.
    pub names_of: Option<Arc<std::collections::BTreeMap<String, cluster::NetNamespace>>>,
    /// Namespaces by VNID.
    pub vnid_names: HashMap<u32, Vec<String>>,
}

impl Cache {
    /// Rebuilds the VNID map when the state's NetNamespaces changed.
    pub(crate) fn refresh(&mut self, state: &ClusterState) {
        if self
            .names_of
            .as_ref()
            .is_none_or(|m| !Arc::ptr_eq(m, &state.net_namespaces))
        {
            self.vnid_names = vnid_names(state);
            self.names_of = Some(state.net_namespaces.clone());
        }
    }
}
