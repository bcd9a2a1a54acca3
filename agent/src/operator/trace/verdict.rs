//! The verdict in words: from the parsed steps and the node view, where the packet ends
//! (delivered, to the node, to another node over VXLAN, dropped) and why, naming the table, the
//! tenants and the policy that decided.

use flows::Table;
use local_api::{Outcome, VxlanHop};
use std::net::{IpAddr, Ipv4Addr};

use super::*;

/// What tables 27, 28, 80 and 81 did with the packet, in words: the policy rows of
/// networkpolicy mode; in multitenant mode the ClusterNetworkPolicy rows and the replies
/// (tenancy has its own words, [`Judge::vnid_words`]).
pub(super) fn policy_words(
    p: &Parsed,
    view: &crate::features::network_policy::PolicyView,
) -> Vec<String> {
    use multitenant::policy::Direction;
    let mut out = Vec::new();
    for (table, matched, prio, _, actions) in &p.steps {
        let t = Table::from_id(*table);
        let (dir, reg) = match t {
            Some(Table::PodEgressPolicy | Table::PodEgressBaseline) => (Direction::Egress, "reg3"),
            Some(Table::IngressIsolation | Table::IngressBaseline) => (Direction::Ingress, "reg2"),
            _ => continue,
        };
        let baseline = matches!(t, Some(Table::PodEgressBaseline | Table::IngressBaseline));
        let port = p.regs.get(reg).copied().unwrap_or(0) as u32;
        let pod = view
            .pods
            .get(&port)
            .cloned()
            .unwrap_or_else(|| format!("port {port}"));
        let isolating = |iso: &flows::policy::Isolation| match dir {
            Direction::Ingress => iso.ingress.join(", "),
            Direction::Egress => iso.egress.join(", "),
        };
        // An allow rule's logging twin sits one priority above it (audit logging).
        let twin = [flows::policy::PRIO_CONJUNCTION, flows::policy::PRIO_PLAIN]
            .contains(&prio.saturating_sub(1));
        let logged = if twin || actions.iter().any(|a| a.starts_with("resubmit(,130)")) {
            ", logged to the audit log"
        } else {
            ""
        };
        // A ClusterNetworkPolicy's row: what its action did, and which rule.
        let conj = matched
            .split(',')
            .find_map(|f| f.trim().strip_prefix("conj_id="))
            .and_then(|v| v.parse::<u32>().ok());
        let cluster_rule = match conj {
            Some(id) => view.rules.get(&id).filter(|r| r.cluster.is_some()).cloned(),
            None => view
                .plain
                .get(&(dir, port))
                .and_then(|v| v.iter().find(|r| r.cluster.is_some()))
                .filter(|_| flows::policy::is_cluster_priority(*prio))
                .cloned(),
        };
        if let Some(r) = cluster_rule {
            // The row's own actions, its audit logging aside (`reg5`, `reg6`, and table 130's
            // metered copy, which the trace shows among the row's actions).
            let own: Vec<&String> = actions
                .iter()
                .filter(|a| {
                    let audit = a.starts_with("resubmit(,130)")
                        || a.ends_with("->NXM_NX_REG5[]")
                        || a.ends_with("->NXM_NX_REG6[]")
                        || a.starts_with("controller(") && a.contains("userdata=41.31");
                    !audit
                })
                .collect();
            let did = if own.iter().all(|a| *a == "drop") {
                "dropped"
            } else if own.iter().any(|a| a.starts_with("resubmit(")) {
                "passed on (the rest of the Admin tier skipped)"
            } else {
                "allowed"
            };
            out.push(format!("{dir} of {pod}: {did} by {r}{logged}"));
            continue;
        }
        if view.multitenant {
            let words = match (t, *prio) {
                (Some(Table::IngressIsolation), flows::base::PRIO_REPLY)
                    if matched.contains("arp") || matched.contains("icmp") =>
                {
                    format!("ingress of {pod}: ARP or neighbour discovery across tenants (a ClusterNetworkPolicy Accept names this pod)")
                }
                (Some(Table::IngressIsolation), flows::base::PRIO_REPLY) => {
                    "ingress: a reply: past the Admin tier, to tenancy".to_string()
                }
                (Some(Table::PodEgressPolicy), flows::base::PRIO_ADMITTED_REPLY) => {
                    "egress: a reply of a connection an Admin-tier Accept admitted: it carries its client's VNID".to_string()
                }
                (Some(Table::PodEgressBaseline), flows::base::PRIO_BEFORE_POLICY) => {
                    "egress: to a cluster network: tenancy decides, on the receiving node".to_string()
                }
                (Some(Table::PodEgressBaseline), 0) => {
                    format!("egress of {pod}: no Baseline-tier rule decided: allowed")
                }
                _ => continue,
            };
            out.push(words);
            continue;
        }
        if baseline {
            out.push(format!(
                "{dir} of {pod}: no Baseline-tier rule decided: allowed"
            ));
            continue;
        }
        let words = match if twin { *prio - 1 } else { *prio } {
            flows::base::PRIO_BEFORE_POLICY if dir == Direction::Egress => "egress: to a Service, decided after the node's DNAT (when it comes back with the endpoint as destination)".to_string(),
            flows::base::PRIO_BEFORE_POLICY => "ingress: from the node (always allowed)".to_string(),
            flows::base::PRIO_REPLY => format!("{dir}: a reply of an allowed connection"),
            flows::policy::PRIO_CONJUNCTION => {
                let id = matched
                    .split(',')
                    .find_map(|f| f.trim().strip_prefix("conj_id="))
                    .and_then(|v| v.parse::<u32>().ok());
                match id.and_then(|i| view.rules.get(&i)) {
                    Some(r) => format!("{dir} of {pod}: allowed by {r}{logged}"),
                    None => format!("{dir} of {pod}: allowed by conjunction {id:?}{logged}"),
                }
            }
            flows::policy::PRIO_PLAIN => {
                let rules: Vec<String> = view
                    .plain
                    .get(&(dir, port))
                    .map(|v| v.iter().map(ToString::to_string).collect())
                    .unwrap_or_default();
                format!("{dir} of {pod}: allowed by {}{logged}", rules.join(" and "))
            }
            flows::policy::PRIO_ISOLATION => format!(
                "{dir} of {pod}: dropped: the pod is isolated by NetworkPolicy {} and none of their rules allows this packet{logged}",
                view.isolated.get(&port).map(isolating).unwrap_or_default()
            ),
            0 if dir == Direction::Egress => format!("egress: {pod} is not isolated for egress (no NetworkPolicy selects it): the Baseline tier decides"),
            50 => format!("ingress: {pod} is not isolated for ingress (no NetworkPolicy selects it): the Baseline tier decides"),
            _ => continue,
        };
        out.push(words);
    }
    out
}

/// What the verdict needs to know.
pub(super) struct Judge<'a> {
    pub(super) src: &'a End,
    pub(super) dst: &'a End,
    pub(super) proto: Proto,
    pub(super) nw_src: IpAddr,
    pub(super) dl_src: &'a str,
    pub(super) in_port: u32,
    pub(super) pods: &'a [crate::pod::Pod],
    pub(super) tenants: &'a dyn Fn(u32) -> String,
    pub(super) remote_of: &'a dyn Fn(IpAddr) -> Option<(String, IpAddr)>,
    /// A VNID's egress route (kind, in words) and its IPs in words (`its egress IP X`, or why
    /// none is usable), if it has egress IPs.
    pub(super) egress_ip: &'a dyn Fn(u32) -> Option<EgressOf>,
    /// Networkpolicy mode: the policies' rows.
    pub(super) policy: Option<&'a crate::features::network_policy::PolicyView>,
}

impl Judge<'_> {
    pub(super) fn verdict(&self, p: &Parsed) -> (Outcome, String, Option<VxlanHop>) {
        let dst_ip = match self.dst {
            End::Pod { ip, .. } | End::Unused(ip) | End::Service(ip) | End::External(ip) => {
                Some(*ip)
            }
            End::Remote { ip, .. } => Some(*ip),
            End::Node(_) => None,
        };
        let by_egress_ip = p
            .steps
            .last()
            .is_some_and(|s| Table::from_id(s.0) == Some(Table::EgressRouting) && s.2 == 100);
        let vnid = p.regs.get("reg0").copied().unwrap_or(0) as u32;
        let ips = || {
            (self.egress_ip)(vnid)
                .map(|e| e.words)
                .unwrap_or_else(|| "its egress IP".into())
        };
        // A select group picks its bucket by a hash the datapath computes after the trace
        // ends (`hash(...),recirc`): the plan says where the buckets lead.
        let to_group = by_egress_ip
            && p.steps
                .last()
                .is_some_and(|s| s.4.iter().any(|a| a.starts_with("group:")));
        if to_group {
            let (kind, route, group) = (self.egress_ip)(vnid)
                .map(|e| (Some(e.kind), e.route, e.group))
                .unwrap_or((None, String::new(), vnid));
            return if kind == Some(local_api::EgressKind::Local) {
                (
                    Outcome::ToHost,
                    format!(
                        "leaves the overlay through tun0 with VNID {vnid} {}'s mark: this node SNATs it to {} (egress_routing, group {group})",
                        (self.tenants)(vnid),
                        ips()
                    ),
                    None,
                )
            } else {
                (
                    Outcome::ToRemoteNode,
                    format!(
                        "sent {route} (VNI {vnid}, group {group} picks one by a hash of the connection), which holds an egress IP of VNID {vnid} {}: the packet leaves the cluster there with {} as source",
                        (self.tenants)(vnid),
                        ips()
                    ),
                    None,
                )
            };
        }
        // Outputs, in order; the last decides (a flood would list several).
        if let Some(&port) = p.outputs.last() {
            if port == 1 {
                let vni = p.regs.get("reg0").copied().unwrap_or(0) as u32;
                let vtep = p.tun_dst.unwrap_or(Ipv4Addr::UNSPECIFIED);
                let node = dst_ip
                    .and_then(|ip| (self.remote_of)(ip))
                    .filter(|(_, v)| *v == vtep)
                    .map(|(n, _)| n);
                let words = format!(
                    "sent over VXLAN to node {} (VTEP {vtep}) with VNI {vni} {}; that node's ingress_isolation decides: run there `sdnctl trace {} {} {} --vni {vni}`",
                    node.as_deref().unwrap_or("?"),
                    (self.tenants)(vni),
                    self.nw_src,
                    dst_ip.map_or("node".to_string(), |i| i.to_string()),
                    proto_text(self.proto),
                );
                return (
                    Outcome::ToRemoteNode,
                    words,
                    Some(VxlanHop {
                        vni,
                        remote_vtep: vtep,
                        remote_node: node,
                    }),
                );
            }
            if port == 2 {
                let why = match self.dst {
                    End::Service(ip) => format!("handed to the node through tun0: the node's service rules (kube-proxy) DNAT {ip} to an endpoint"),
                    End::External(ip) => format!("leaves the overlay through tun0: the node routes (and masquerades) it towards {ip}"),
                    End::Node(_) => "delivered to the node through tun0".to_string(),
                    _ => "handed to the node through tun0".to_string(),
                };
                return (Outcome::ToHost, why, None);
            }
            if let Some(pod) = self.pods.iter().find(|x| x.ofport == port) {
                let why = match self.src {
                    End::Node(_) => ": the node reaches every pod".to_string(),
                    End::External(_) => {
                        ": from outside the cluster through the node (tun0)".to_string()
                    }
                    _ => match self.policy {
                        Some(v) if v.multitenant => {
                            // The Admin tier's words, then tenancy's unless an Accept
                            // admitted the packet before it.
                            let mut w = policy_words(p, v);
                            let admitted = w.last().is_some_and(|l| l.contains(": allowed by "));
                            if !admitted {
                                let vnid = self.vnid_words(p);
                                if let Some(t) = vnid.strip_prefix(": ") {
                                    w.push(format!("tenancy: {t}"));
                                }
                            }
                            if w.is_empty() {
                                String::new()
                            } else {
                                format!(": {}", w.join("; "))
                            }
                        }
                        Some(v) => {
                            let w = policy_words(p, v);
                            if w.is_empty() {
                                String::new()
                            } else {
                                format!(": {}", w.join("; "))
                            }
                        }
                        None => self.vnid_words(p),
                    },
                };
                let words = format!(
                    "delivered to pod {}/{} (port {port}){why}",
                    pod.namespace, pod.name
                );
                return (Outcome::Delivered, words, None);
            }
            return (
                Outcome::Delivered,
                format!("output to port {port}, which is no pod of this node"),
                None,
            );
        }
        (Outcome::Dropped, self.drop_reason(p), None)
    }

    /// ", same VNID 10 (tenant-a)" / ", from global VNID 0 (default)".
    pub(super) fn vnid_words(&self, p: &Parsed) -> String {
        match (p.regs.get("reg0"), p.regs.get("reg1")) {
            (Some(&s), Some(&d)) if s == d => {
                format!(": same VNID {s} {}", (self.tenants)(s as u32))
            }
            (Some(&0), Some(&d)) => format!(
                ": the source is global (VNID 0), the destination VNID {d} {}",
                (self.tenants)(d as u32)
            ),
            (Some(&s), Some(&0)) => format!(
                ": the destination is global (VNID 0), the source VNID {s} {}",
                (self.tenants)(s as u32)
            ),
            _ => String::new(),
        }
    }

    pub(super) fn drop_reason(&self, p: &Parsed) -> String {
        let Some((table, matched, _, _, _)) = p.steps.last() else {
            return "dropped before any table (the switch matched nothing)".into();
        };
        let name = table_name(*table);
        let ip_of = |e: &End| match e {
            End::Pod { ip, .. } | End::Unused(ip) | End::Service(ip) | End::External(ip) => {
                ip.to_string()
            }
            End::Remote { ip, .. } => ip.to_string(),
            End::Node(_) => "the node".into(),
        };
        let why = match Table::from_id(*table) {
            Some(Table::Classifier) => format!(
                "port {} is not a pod, tun0 or vxlan0 port the pipeline knows, or the packet is neither IP nor ARP",
                self.in_port
            ),
            Some(Table::VxlanIngress) => "VXLAN from an address that is no known node's VTEP".into(),
            Some(Table::PodEgressSpoofguard) => match self.src {
                End::Pod { ip, ns, name, mac, .. } => {
                    if self.nw_src != *ip {
                        format!("{} is not this pod's address ({ns}/{name} has {ip})", self.nw_src)
                    } else if self.dl_src != mac {
                        format!("{} is not this pod's MAC ({ns}/{name} has {mac})", self.dl_src)
                    } else if self.proto == Proto::Nd {
                        format!("neighbour discovery from {ns}/{name} must solicit from its own address with its own MAC as source link-layer address (and router messages, redirects and duplicate address detection are dropped)")
                    } else {
                        format!("the packet does not match {ns}/{name}'s port, MAC and address rows")
                    }
                }
                End::Node(_) | End::External(_) => "tun0 traffic reached the pod spoof guard".into(),
                _ => format!("port {} belongs to no pod", self.in_port),
            },
            Some(Table::SourceVnid) => format!("port {} has no VNID row (no pod on it)", self.in_port),
            Some(Table::Routing) => format!(
                "{} is in no network this node routes (cluster networks, service network) and not reachable from here",
                ip_of(self.dst)
            ),
            Some(Table::LocalArp) | Some(Table::LocalIp) => {
                format!("no pod on this node has address {}", ip_of(self.dst))
            }
            Some(Table::DestinationVnid) => "the destination port has no VNID row".into(),
            Some(
                Table::IngressIsolation
                | Table::PodEgressPolicy
                | Table::IngressBaseline
                | Table::PodEgressBaseline,
            ) if self
                .policy
                .is_some_and(|v| !v.multitenant || flows::policy::is_cluster_priority(p.steps.last().map_or(0, |s| s.2))) =>
            {
                let words = self.policy.map(|v| policy_words(p, v)).unwrap_or_default();
                words
                    .last()
                    .cloned()
                    .unwrap_or_else(|| format!("by the flow `{matched}`"))
            }
            Some(Table::IngressIsolation) => {
                let s = p.regs.get("reg0").copied().unwrap_or(0) as u32;
                let d = p.regs.get("reg1").copied().unwrap_or(0) as u32;
                if s != d && s != 0 && d != 0 {
                    format!(
                        "source VNID {s} {} ≠ destination VNID {d} {}, and neither is global",
                        (self.tenants)(s),
                        (self.tenants)(d)
                    )
                } else {
                    format!("VNIDs {s} and {d}: no table-80 row lets them through (the VNID's row is missing)")
                }
            }
            Some(Table::EgressRouting) => {
                let s = p.regs.get("reg0").copied().unwrap_or(0) as u32;
                format!(
                    "VNID {s} {} has egress IPs and none is usable, so its external traffic is dropped, not sent with the node's address: {}",
                    (self.tenants)(s),
                    (self.egress_ip)(s).map_or_else(|| "(no detail)".into(), |e| e.words)
                )
            }
            Some(Table::EgressFirewall) => {
                let s = p.regs.get("reg0").copied().unwrap_or(0) as u32;
                format!(
                    "{} is denied by the egress firewall (EgressNetworkPolicy) of VNID {s} {}: the first matching rule is `{matched}`",
                    ip_of(self.dst),
                    (self.tenants)(s)
                )
            }
            Some(Table::RemoteArp) | Some(Table::RemoteIp) => format!(
                "no node's subnet holds {} (no HostSubnet for it)",
                ip_of(self.dst)
            ),
            Some(t) => format!("by the flow `{matched}` of {}", t.name()),
            None => format!("in table {table}, which the pipeline does not define"),
        };
        format!("dropped in {name}: {why}")
    }
}

/// A tenant's egress as trace words it: where its traffic leaves and with which IPs.
#[derive(Debug, Clone)]
pub(super) struct EgressOf {
    /// Where, as one word.
    pub(super) kind: local_api::EgressKind,
    /// Where, in words.
    pub(super) route: String,
    /// Its egress IPs in use, or why it is dropped.
    pub(super) words: String,
    /// The id of the family's group.
    pub(super) group: u32,
}
