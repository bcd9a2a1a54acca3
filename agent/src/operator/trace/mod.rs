//! `sdnctl trace SRC DST [PROTO]`: what br0 does with one packet, and why, in words.
//!
//! The agent builds the packet from what it knows (a pod's port, MAC and address; the node's
//! tun0; a remote node's VTEP; the service network), asks ovs-vswitchd to run it through the
//! real flow tables (`ofproto/trace` over the unixctl socket, [`ovs::unixctl`]), and reads the
//! answer with its own knowledge: each step gets its table's name and the object that owns the
//! flow (by cookie), and the verdict says what happened and why, naming tenants, VNIDs, the
//! spoof guard, the VXLAN VNI and the remote VTEP. The verdict comes from the tables the packet
//! actually took, never from a model of them: if the flows are wrong, the trace shows it.
//!
//! IPv6: when SRC or DST is an IPv6 address, or the protocol is `icmp6` or `nd`, the packet is
//! IPv6 and pods are taken on their IPv6 addresses (a pod without one is refused); `nd` is a
//! neighbour solicitation for DST sent to its solicited-node group, the IPv6 `arp`.
//!
//! Conntrack: the pipeline sends every IP packet through `ct` first; the trace continues with
//! `ct_state=trk|new` (a new connection), which is what the isolation matrix probes open.
//! Traffic that leaves the node (VXLAN) is judged again by the destination node's tables: the
//! verdict names the command to run there.

use std::net::IpAddr;
use std::time::Duration;

use crate::operator::observe::NodeView;
use local_api::{Step, TraceRequest, TraceResult};

mod armed;
mod frame;
mod live;
mod packet;
mod parse;
use packet::Packet;
mod relay;
pub(crate) use parse::table_name;
pub(crate) use parse::{parse, Parsed};
pub(crate) use relay::answer_forever;
mod verdict;
use verdict::*;

/// A bad trace request (the caller's fault), said plainly.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TraceError {
    /// SRC, DST or PROTO cannot be understood.
    #[error("{0}")]
    BadRequest(String),
    /// ovs-vswitchd could not run the trace.
    #[error("{0}")]
    Switch(String),
}

/// One end of the packet.
#[derive(Clone, Debug, PartialEq, Eq)]
enum End {
    Pod {
        ns: String,
        name: String,
        /// The address traced (IPv6 in an IPv6 trace).
        ip: IpAddr,
        /// Its MAC (derived from its IPv4 address).
        mac: String,
        ofport: u32,
        vnid: u32,
    },
    /// This node: tun0's address (`node`, and every source address of the node's), or the
    /// node's own address when that is the destination asked for (its egress policy rows
    /// match it, not tun0's).
    Node(Option<IpAddr>),
    /// An address of this node's subnet no pod has.
    Unused(IpAddr),
    /// A pod of another node's subnet.
    Remote {
        ip: IpAddr,
        node: Option<String>,
        vtep: Option<IpAddr>,
    },
    Service(IpAddr),
    External(IpAddr),
}

impl End {
    fn ip(&self, node_gw: IpAddr) -> IpAddr {
        match self {
            End::Pod { ip, .. } | End::Unused(ip) | End::Service(ip) | End::External(ip) => *ip,
            End::Remote { ip, .. } => *ip,
            End::Node(ip) => ip.unwrap_or(node_gw),
        }
    }

    fn words(&self, tenants: &dyn Fn(u32) -> String) -> String {
        match self {
            End::Pod {
                ns,
                name,
                ip,
                ofport,
                vnid,
                ..
            } => format!(
                "pod {ns}/{name} ({ip}, port {ofport}, VNID {vnid} {})",
                tenants(*vnid)
            ),
            End::Node(None) => "this node (tun0)".into(),
            End::Node(Some(ip)) => format!("this node ({ip})"),
            End::Unused(ip) => format!("{ip} (this node's subnet; no pod has it)"),
            End::Remote { ip, node, vtep } => match (node, vtep) {
                (Some(n), Some(v)) => format!("{ip} (a pod of node {n}, VTEP {v})"),
                _ => format!("{ip} (cluster network; no node's subnet holds it)"),
            },
            End::Service(ip) => format!("{ip} (service network)"),
            End::External(ip) => format!("{ip} (outside the cluster)"),
        }
    }
}

/// The protocol to trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    /// An echo request (ICMPv6 in an IPv6 trace).
    Icmp,
    Arp,
    /// A neighbour solicitation (IPv6).
    Nd,
    Tcp(u16),
    Udp(u16),
}

/// The protocol, and whether it is IPv6's alone (`icmp6`, `nd`).
fn parse_proto(s: &str) -> Result<(Proto, bool), TraceError> {
    let bad = || {
        TraceError::BadRequest(format!(
            "protocol {s:?}: expected icmp, arp, tcp/PORT or udp/PORT (PORT 1-65535), or in IPv6 icmp6 or nd"
        ))
    };
    let port = |p: &str| p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(bad);
    let lower = s.to_ascii_lowercase();
    match lower.as_str() {
        "icmp6" | "icmpv6" => return Ok((Proto::Icmp, true)),
        "nd" => return Ok((Proto::Nd, true)),
        _ => {}
    }
    parse_proto4(&lower, bad, port).map(|p| (p, false))
}

fn parse_proto4(
    s: &str,
    bad: impl Fn() -> TraceError,
    port: impl Fn(&str) -> Result<u16, TraceError>,
) -> Result<Proto, TraceError> {
    match s {
        "" | "icmp" => Ok(Proto::Icmp),
        "arp" => Ok(Proto::Arp),
        other => match other.split_once('/') {
            Some(("tcp", p)) => Ok(Proto::Tcp(port(p)?)),
            Some(("udp", p)) => Ok(Proto::Udp(port(p)?)),
            _ => Err(bad()),
        },
    }
}

/// Runs the trace (see the module docs): the two ends resolved, the packet built, traced by
/// ovs-vswitchd through br0's real tables, each step named by its owner, and judged.
pub(crate) async fn trace(view: &NodeView, req: &TraceRequest) -> Result<TraceResult, TraceError> {
    let state = view.state.borrow().clone();
    let pods = view.pods.list().await;
    let node = &view.node;
    let tenants = |v: u32| -> String {
        let names = state.namespaces_of(v);
        if v == 0 {
            format!("(global: {})", names.join(", "))
        } else if names.is_empty() {
            "(no namespace)".into()
        } else {
            format!("({})", names.join(", "))
        }
    };
    let remote_of = |ip: IpAddr| -> Option<(String, IpAddr)> {
        match ip {
            IpAddr::V4(ip) => state.node_holding(ip),
            IpAddr::V6(ip) => state.node_holding6(ip),
        }
        .filter(|(node, _)| *node != view.config.node_name)
        .map(|(node, vtep)| (node.to_string(), vtep))
    };
    // Egress IPs as this node applies them, and the network policies' view.
    let (egress_ips, _) = match view.features.get::<crate::operator::observe::EgressIps>() {
        Some(e) => e.entries().await,
        None => Default::default(),
    };
    let policy_view = view
        .features
        .get::<crate::operator::observe::NetworkPolicies>()
        .map(|p| p.view());
    let (proto, v6_only) = parse_proto(&req.proto)?;
    let ends = Ends {
        pods: &pods,
        node,
        remote_of: &remote_of,
        v6: family_is_v6(req, v6_only)?,
    };
    let egress_ip = |v: u32| egress_of(&egress_ips, v, ends.v6);
    if ends.v6 && node.ipv6.is_none() {
        return Err(TraceError::BadRequest(format!(
            "an IPv6 trace ({} {} {}) on a node without an IPv6 network",
            req.src, req.dst, req.proto
        )));
    }
    let src = ends.resolve(&req.src, "source")?;
    let dst = ends.resolve(&req.dst, "destination")?;
    refuse_impossible(req, &src, &dst, proto, ends.v6)?;
    let p = Packet::build(req, &src, &dst, proto, node, ends.v6)?;
    let raw = ofproto_trace(view, &p.text).await?;
    let parsed = parse(&raw);
    let owners = view.cookie_owners().await;
    let judged = Judge {
        src: &src,
        dst: &dst,
        proto,
        nw_src: p.nw_src,
        dl_src: &p.dl_src,
        in_port: p.in_port,
        pods: &pods,
        tenants: &tenants,
        remote_of: &remote_of,
        egress_ip: &egress_ip,
        policy: policy_view.as_deref(),
    }
    .verdict(&parsed);
    let policy = policy_view
        .as_deref()
        .map(|v| policy_words(&parsed, v))
        .unwrap_or_default();
    let mut result = TraceResult {
        src: src.words(&tenants),
        dst: dst.words(&tenants),
        packet: p.text.clone(),
        decided_in: parsed
            .steps
            .last()
            .map(|s| table_name(s.0).to_string())
            .unwrap_or_default(),
        steps: named_steps(&parsed, &owners),
        outcome: judged.0,
        verdict: judged.1,
        vxlan: judged.2,
        policy,
        raw,
        live: None,
    };
    if req.live {
        let live = live::run(
            view,
            live::Ask {
                src: &src,
                dst: &dst,
                proto,
                in_port: p.in_port,
                dl_src: &p.dl_src,
                dl_dst: &p.dl_dst,
                nw_src: p.nw_src,
                nw_dst: p.nw_dst,
                expected: &result,
            },
        )
        .await?;
        result.live = Some(live);
    }
    Ok(result)
}

/// A tenant's egress IPs in trace's words, for the trace's family (`six`): where its traffic
/// leaves, and with which IPs of the family in use (or why it is dropped).
fn egress_of(
    entries: &[local_api::EgressIpEntry],
    vnid: u32,
    six: bool,
) -> Option<verdict::EgressOf> {
    let e = entries.iter().find(|e| e.vnid == vnid)?;
    let (kind, route, problem) = match (&e.ipv6, six) {
        (Some(f), true) => (f.kind, f.route.clone(), f.problem.clone()),
        _ => (e.kind, e.route.clone(), e.problem.clone()),
    };
    let words = problem.unwrap_or_else(|| {
        let used: Vec<String> = e
            .ips
            .iter()
            .filter(|i| i.ip.is_ipv6() == six && i.state == local_api::EgressIpState::InUse)
            .map(|i| match &i.node {
                Some(n) => format!("{} on {n}", i.ip),
                None => i.ip.to_string(),
            })
            .collect();
        format!("its egress IP {}", used.join(" or "))
    });
    Some(verdict::EgressOf {
        kind,
        route,
        words,
        group: if six {
            flows::EGRESS_IP6_GROUP_BASE + vnid
        } else {
            vnid
        },
    })
}

/// Whether the trace is IPv6: an end or `--spoof-ip` given as an IPv6 address, or an IPv6-only
/// protocol; an IPv4 address beside one of those is refused.
fn family_is_v6(req: &TraceRequest, v6_only: bool) -> Result<bool, TraceError> {
    let given: Vec<(&str, IpAddr)> = [("source", req.src.as_str()), ("destination", &req.dst)]
        .into_iter()
        .filter_map(|(role, s)| Some((role, s.trim().parse::<IpAddr>().ok()?)))
        .chain(req.spoof_ip.map(|ip| ("--spoof-ip", ip)))
        .collect();
    let v6 = v6_only || given.iter().any(|(_, ip)| ip.is_ipv6());
    match given.iter().find(|(_, ip)| ip.is_ipv6() != v6) {
        Some((role, ip)) => Err(TraceError::BadRequest(format!(
            "{role} {ip} is IPv4 in an IPv6 trace{}: give both ends in one family",
            if v6_only {
                format!(" ({})", req.proto)
            } else {
                String::new()
            }
        ))),
        None => Ok(v6),
    }
}

/// What a trace's ends are resolved against: this node's pods, the node, the other nodes, in
/// the trace's family.
struct Ends<'a> {
    pods: &'a [crate::pod::Pod],
    node: &'a flows::NodeConfig,
    remote_of: &'a (dyn Fn(IpAddr) -> Option<(String, IpAddr)> + Sync),
    v6: bool,
}

impl Ends<'_> {
    /// `NAMESPACE/POD`, `node`, or an address, as the end `role` (source, destination).
    fn resolve(&self, s: &str, role: &str) -> Result<End, TraceError> {
        let s = s.trim();
        if s == "node" {
            return Ok(End::Node(None));
        }
        let v6 = self.v6;
        let pod_end = |p: &crate::pod::Pod| -> Result<End, TraceError> {
            let ip = if v6 {
                IpAddr::V6(p.ip6.ok_or_else(|| {
                    TraceError::BadRequest(format!(
                        "{role} {}/{}: the pod has no IPv6 address (it was made before this node had IPv6, or the node has none)",
                        p.namespace, p.name
                    ))
                })?)
            } else {
                IpAddr::V4(p.ip.ok_or_else(|| {
                    TraceError::BadRequest(format!(
                        "{role} {}/{}: the pod has no IPv4 address (an IPv6-only cluster); trace an IPv6 destination",
                        p.namespace, p.name
                    ))
                })?)
            };
            Ok(End::Pod {
                ns: p.namespace.clone(),
                name: p.name.clone(),
                ip,
                mac: ovs::flow::MacAddr::from_pod_addrs(p.ip, p.ip6)
                    .map(|m| m.to_string())
                    .unwrap_or_default(),
                ofport: p.ofport,
                vnid: p.vnid.id(),
            })
        };
        if let Some((ns, name)) = s.split_once('/') {
            let p = self
                .pods
                .iter()
                .find(|p| p.namespace == ns && p.name == name)
                .ok_or_else(|| {
                    TraceError::BadRequest(format!(
                        "{role} {s}: no pod {ns}/{name} on this node (sdnctl pods lists them; a pod of another node is given by its address)"
                    ))
                })?;
            return pod_end(p);
        }
        let ip: IpAddr = s.parse().map_err(|_| {
            TraceError::BadRequest(format!(
                "{role} {s:?}: expected NAMESPACE/POD, node, or an IPv4 or IPv6 address"
            ))
        })?;
        if let Some(p) = self
            .pods
            .iter()
            .find(|p| p.ip.map(IpAddr::V4) == Some(ip) || p.ip6.map(IpAddr::V6) == Some(ip))
        {
            return pod_end(p);
        }
        let node = self.node;
        let (local, cluster, service, is_node) = match ip {
            IpAddr::V4(a) => match &node.ipv4 {
                Some(v4) => (
                    v4.local_subnet.contains(&a),
                    v4.cluster_networks.iter().any(|n| n.contains(&a)),
                    v4.service_cidr.contains(&a),
                    a == v4.gateway() || ip == node.node_ip,
                ),
                None => {
                    return Err(TraceError::BadRequest(format!(
                        "{role} {ip}: this node has no IPv4 network (an IPv6-only cluster)"
                    )))
                }
            },
            IpAddr::V6(a) => match &node.ipv6 {
                Some(v6) => (
                    v6.local_subnet.contains(&a),
                    v6.cluster_network.contains(&a),
                    v6.service_cidr.is_some_and(|n| n.contains(&a)),
                    a == v6.gateway() || ip == node.node_ip,
                ),
                None => {
                    return Err(TraceError::BadRequest(format!(
                        "{role} {ip}: this node has no IPv6 network"
                    )))
                }
            },
        };
        Ok(if is_node {
            // As a destination, the node's own address is traced as itself (egress rows may
            // match it); as a source, the node's traffic to pods leaves from tun0's.
            End::Node((ip == node.node_ip && role == "destination").then_some(ip))
        } else if local {
            End::Unused(ip)
        } else if cluster {
            let r = (self.remote_of)(ip);
            End::Remote {
                ip,
                node: r.as_ref().map(|r| r.0.clone()),
                vtep: r.map(|r| r.1),
            }
        } else if service {
            End::Service(ip)
        } else {
            End::External(ip)
        })
    }
}

/// Refuses ends no packet can have: a Service as the source, an unused address without a pod
/// to spoof it, ARP off the link.
fn refuse_impossible(
    req: &TraceRequest,
    src: &End,
    dst: &End,
    proto: Proto,
    v6: bool,
) -> Result<(), TraceError> {
    if v6 && proto == Proto::Arp {
        return Err(TraceError::BadRequest(
            "arp in an IPv6 trace: IPv6 has no ARP; nd traces its neighbour solicitation".into(),
        ));
    }
    if matches!(src, End::Service(_)) {
        return Err(TraceError::BadRequest(format!(
            "source {}: a service address sends nothing itself; trace from the pod behind it",
            req.src
        )));
    }
    if matches!(src, End::Unused(_)) && req.spoof_ip.is_none() {
        return Err(TraceError::BadRequest(format!(
            "source {}: no pod on this node has that address; to see what the spoof guard does, give a pod as the source and --spoof-ip {}",
            req.src, req.src
        )));
    }
    if matches!(proto, Proto::Arp | Proto::Nd)
        && !matches!(
            dst,
            End::Pod { .. } | End::Unused(_) | End::Remote { .. } | End::Node(_)
        )
    {
        return Err(TraceError::BadRequest(
            "arp, nd: the destination must be an address of the cluster network or the node (ARP and neighbour discovery stay on the link)".into(),
        ));
    }
    Ok(())
}

/// `ofproto/trace` of `packet` on br0, asked of ovs-vswitchd's control socket (next to
/// bridgeMgmt).
async fn ofproto_trace(view: &NodeView, packet: &str) -> Result<String, TraceError> {
    let ctl = vswitchd_ctl(view)?;
    ovs::unixctl::call(
        &ctl,
        "ofproto/trace",
        &[crate::pod::BRIDGE, packet],
        Duration::from_secs(10),
    )
    .await
    .map_err(|e| TraceError::Switch(format!("ofproto/trace on {}: {e}", ctl.display())))
}

/// ovs-vswitchd's control socket (next to bridgeMgmt).
fn vswitchd_ctl(view: &NodeView) -> Result<std::path::PathBuf, TraceError> {
    let rundir = view
        .config
        .bridge_mgmt
        .parent()
        .unwrap_or(std::path::Path::new("/run/openvswitch"));
    ovs::unixctl::control_socket(rundir, "ovs-vswitchd")
        .map_err(|e| TraceError::Switch(format!("{e}; the agent looks next to bridgeMgmt")))
}

/// Each step of the trace with its table's name and the owner of its row's cookie.
fn named_steps(parsed: &Parsed, owners: &std::collections::BTreeMap<u64, String>) -> Vec<Step> {
    parsed
        .steps
        .iter()
        .map(|(t, m, prio, cookie, actions)| Step {
            table: *t,
            table_name: table_name(*t).to_string(),
            matched: m.clone(),
            priority: *prio,
            cookie: format!("{cookie:#x}"),
            owner: owners
                .get(cookie)
                .cloned()
                .unwrap_or_else(|| "unknown (not the agent's)".into()),
            actions: actions.clone(),
        })
        .collect()
}

fn proto_text(p: Proto) -> String {
    match p {
        Proto::Icmp => "icmp".into(),
        Proto::Arp => "arp".into(),
        Proto::Nd => "nd".into(),
        Proto::Tcp(n) => format!("tcp/{n}"),
        Proto::Udp(n) => format!("udp/{n}"),
    }
}

#[cfg(test)]
mod tests;
