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
//! Conntrack: the pipeline sends every IP packet through `ct` first; the trace continues with
//! `ct_state=trk|new` (a new connection), which is what the isolation matrix probes open.
//! Traffic that leaves the node (VXLAN) is judged again by the destination node's tables: the
//! verdict names the command to run there.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use flows::Table;
use ipnet::Ipv4Net;

use crate::operator::observe::pod_mac;
use crate::operator::observe::NodeView;
use local_api::{Outcome, Step, TraceRequest, TraceResult, VxlanHop};

/// A bad trace request (the caller's fault), said plainly.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
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
        ip: Ipv4Addr,
        ofport: u32,
        vnid: u32,
    },
    Node,
    /// An address of this node's subnet no pod has.
    Unused(Ipv4Addr),
    /// A pod of another node's subnet.
    Remote {
        ip: Ipv4Addr,
        node: Option<String>,
        vtep: Option<Ipv4Addr>,
    },
    Service(Ipv4Addr),
    External(Ipv4Addr),
}

impl End {
    fn ip(&self, node_gw: Ipv4Addr) -> Ipv4Addr {
        match self {
            End::Pod { ip, .. } | End::Unused(ip) | End::Service(ip) | End::External(ip) => *ip,
            End::Remote { ip, .. } => *ip,
            End::Node => node_gw,
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
            } => format!(
                "pod {ns}/{name} ({ip}, port {ofport}, VNID {vnid} {})",
                tenants(*vnid)
            ),
            End::Node => "this node (tun0)".into(),
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
    Icmp,
    Arp,
    Tcp(u16),
    Udp(u16),
}

fn parse_proto(s: &str) -> Result<Proto, TraceError> {
    let bad = || {
        TraceError::BadRequest(format!(
            "protocol {s:?}: expected icmp, arp, tcp/PORT or udp/PORT (PORT 1-65535)"
        ))
    };
    let port = |p: &str| p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(bad);
    match s.to_ascii_lowercase().as_str() {
        "" | "icmp" => Ok(Proto::Icmp),
        "arp" => Ok(Proto::Arp),
        other => match other.split_once('/') {
            Some(("tcp", p)) => Ok(Proto::Tcp(port(p)?)),
            Some(("udp", p)) => Ok(Proto::Udp(port(p)?)),
            _ => Err(bad()),
        },
    }
}

/// The parsed `ofproto/trace` answer: the steps of the last pipeline pass (after the last
/// conntrack recirculation), the final flow's registers and the outputs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// (table, match, priority, cookie, actions) of each step.
    pub steps: Vec<(u8, String, u16, u64, Vec<String>)>,
    /// OpenFlow ports the packet was output to.
    pub outputs: Vec<u32>,
    /// `tun_dst` set before an output (VXLAN).
    pub tun_dst: Option<Ipv4Addr>,
    /// Registers of the final flow (`reg0` → value).
    pub regs: BTreeMap<String, u64>,
}

/// Parses `ofproto/trace` output (see [`Parsed`]).
pub fn parse(text: &str) -> Parsed {
    // The last pass: after the last recirculation header, or the whole text.
    let last = text
        .rfind("\n=====")
        .and_then(|i| text[i..].find("\nFlow: ").map(|j| &text[i + j..]))
        .unwrap_or(text);
    let mut p = Parsed::default();
    for line in last.lines() {
        let trimmed = line.trim_start();
        if let Some((num, rest)) = step_line(line) {
            let (matched, priority, cookie) = split_step(rest);
            p.steps.push((num, matched, priority, cookie, Vec::new()));
            continue;
        }
        if let Some(port) = trimmed.strip_prefix("-> output port is ") {
            if let Ok(n) = port.trim().parse() {
                p.outputs.push(n);
            }
            continue;
        }
        if trimmed.starts_with("Final flow:") {
            for kv in trimmed.trim_start_matches("Final flow:").split(',') {
                if let Some((k, v)) = kv.trim().split_once('=') {
                    if k.starts_with("reg") {
                        if let Ok(n) = u64::from_str_radix(v.trim_start_matches("0x"), 16) {
                            p.regs.insert(k.to_string(), n);
                        }
                    }
                }
            }
            continue;
        }
        if line.starts_with("    ") && !trimmed.is_empty() && !trimmed.starts_with("->") {
            if let Some(step) = p.steps.last_mut() {
                step.4.push(trimmed.to_string());
                if let Some(port) = trimmed.strip_prefix("output:") {
                    if let Ok(n) = port.parse() {
                        p.outputs.push(n);
                    }
                }
                if let Some(v) = trimmed
                    .strip_prefix("set_field:")
                    .and_then(|r| r.strip_suffix("->tun_dst"))
                {
                    p.tun_dst = v.parse().ok();
                }
            }
        }
    }
    p
}

/// `20. ip,in_port=3, priority 100, cookie 0x1` → (20, rest).
fn step_line(line: &str) -> Option<(u8, &str)> {
    let t = line.trim_start();
    let (num, rest) = t.split_once(". ")?;
    let n: u8 = num.parse().ok()?;
    // Steps are indented at most one space (`0.` under `20.`); actions four.
    (line.len() - t.len() <= 2).then_some((n, rest))
}

fn split_step(rest: &str) -> (String, u16, u64) {
    let mut matched = rest.to_string();
    let mut priority = 0;
    let mut cookie = 0;
    if let Some(i) = rest.find(", cookie 0x") {
        cookie = u64::from_str_radix(rest[i + 11..].trim(), 16).unwrap_or(0);
        matched.truncate(i);
    }
    if let Some(i) = matched.rfind("priority ") {
        priority = matched[i + 9..].trim().parse().unwrap_or(0);
        matched.truncate(i);
    }
    let matched = matched.trim().trim_end_matches(',').trim().to_string();
    (matched, priority, cookie)
}

fn table_name(id: u8) -> &'static str {
    Table::from_id(id).map_or("unknown", Table::name)
}

/// Runs the trace (see the module docs).
pub async fn trace(view: &NodeView, req: &TraceRequest) -> Result<TraceResult, TraceError> {
    let state = view.state.borrow().clone();
    let pods = view.pods.list().await;
    let node = &view.node;
    let gw = node.gateway();
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
    let remote_of = |ip: Ipv4Addr| -> Option<(String, Ipv4Addr)> {
        state.host_subnets.values().find_map(|hs| {
            let net: Ipv4Net = hs.subnet.parse().ok()?;
            (net.contains(&ip) && hs.host != view.config.node_name)
                .then(|| Some((hs.host.clone(), hs.host_ip.parse().ok()?)))
                .flatten()
        })
    };
    // Egress IPs as this node applies them: VNID -> (held here / used, problem).
    let (egress_ips, _) = view.egress_ips.entries().await;
    let policy_view = view.policies.as_ref().map(|p| p.view());
    let egress_ip = |v: u32| -> Option<(String, String, String)> {
        egress_ips.iter().find(|e| e.vnid == v).map(|e| {
            let words = e.problem.clone().unwrap_or_else(|| {
                let used: Vec<&str> = e
                    .ips
                    .iter()
                    .filter(|i| i.contains("(in use)"))
                    .map(|i| i.split(" (").next().unwrap_or(i))
                    .collect();
                format!("its egress IP {}", used.join(" or "))
            });
            (e.kind.clone(), e.route.clone(), words)
        })
    };
    let resolve = |s: &str, role: &str| -> Result<End, TraceError> {
        let s = s.trim();
        if s == "node" {
            return Ok(End::Node);
        }
        if let Some((ns, name)) = s.split_once('/') {
            return pods
                .iter()
                .find(|p| p.namespace == ns && p.name == name)
                .map(|p| End::Pod {
                    ns: p.namespace.clone(),
                    name: p.name.clone(),
                    ip: p.ip,
                    ofport: p.ofport,
                    vnid: p.vnid.id(),
                })
                .ok_or_else(|| {
                    TraceError::BadRequest(format!(
                        "{role} {s}: no pod {ns}/{name} on this node (sdnctl pods lists them; a pod of another node is given by its address)"
                    ))
                });
        }
        let ip: Ipv4Addr = s.parse().map_err(|_| {
            TraceError::BadRequest(format!(
                "{role} {s:?}: expected NAMESPACE/POD, node, or an IPv4 address"
            ))
        })?;
        if let Some(p) = pods.iter().find(|p| p.ip == ip) {
            return Ok(End::Pod {
                ns: p.namespace.clone(),
                name: p.name.clone(),
                ip: p.ip,
                ofport: p.ofport,
                vnid: p.vnid.id(),
            });
        }
        if ip == gw || ip == node.node_ip {
            return Ok(End::Node);
        }
        if node.local_subnet.contains(&ip) {
            return Ok(End::Unused(ip));
        }
        if node.cluster_networks.iter().any(|n| n.contains(&ip)) {
            let r = remote_of(ip);
            return Ok(End::Remote {
                ip,
                node: r.as_ref().map(|r| r.0.clone()),
                vtep: r.map(|r| r.1),
            });
        }
        if node.service_cidr.contains(&ip) {
            return Ok(End::Service(ip));
        }
        Ok(End::External(ip))
    };
    let src = resolve(&req.src, "source")?;
    let dst = resolve(&req.dst, "destination")?;
    let proto = parse_proto(&req.proto)?;
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
    if proto == Proto::Arp
        && !matches!(
            dst,
            End::Pod { .. } | End::Unused(_) | End::Remote { .. } | End::Node
        )
    {
        return Err(TraceError::BadRequest(
            "arp: the destination must be an address of the cluster network or the node (ARP stays on the link)".into(),
        ));
    }
    let tun0_mac = node.tun0_mac().to_string();
    // The packet's ingress and source.
    let (in_port, mut dl_src, mut nw_src, tunnel) = match &src {
        End::Pod { ip, ofport, .. } => (*ofport, pod_mac(*ip), *ip, String::new()),
        End::Node | End::External(_) => (2, tun0_mac.clone(), src.ip(gw), String::new()),
        End::Remote { ip, vtep, .. } => {
            let Some(vtep) = vtep else {
                return Err(TraceError::BadRequest(format!(
                    "source {ip}: no node's subnet holds it, so it cannot arrive over VXLAN"
                )));
            };
            let vni = req.vni.ok_or_else(|| {
                TraceError::BadRequest(format!(
                    "source {ip} is a pod of another node: give the VNI its packets arrive with (--vni, the VNID of its namespace; the source node's trace names it)"
                ))
            })?;
            (
                1,
                pod_mac(*ip),
                *ip,
                format!("tun_id={vni:#x},tun_src={vtep},tun_dst={},", node.node_ip),
            )
        }
        End::Unused(ip) => (0, pod_mac(*ip), *ip, String::new()),
        End::Service(_) => unreachable!("refused above"),
    };
    if let Some(ip) = req.spoof_ip {
        if !matches!(src, End::Pod { .. }) {
            return Err(TraceError::BadRequest(
                "--spoof-ip needs a pod as the source (NAMESPACE/POD)".into(),
            ));
        }
        nw_src = ip;
    }
    if let Some(mac) = &req.spoof_mac {
        if !matches!(src, End::Pod { .. }) {
            return Err(TraceError::BadRequest(
                "--spoof-mac needs a pod as the source (NAMESPACE/POD)".into(),
            ));
        }
        let ok = mac.split(':').count() == 6
            && mac
                .split(':')
                .all(|b| b.len() == 2 && u8::from_str_radix(b, 16).is_ok());
        if !ok {
            return Err(TraceError::BadRequest(format!(
                "--spoof-mac {mac:?}: expected a MAC such as 0a:58:0a:80:00:09"
            )));
        }
        dl_src = mac.to_ascii_lowercase();
    }
    let dst_ip = dst.ip(gw);
    let dl_dst = match &dst {
        End::Pod { ip, .. } | End::Unused(ip) | End::Remote { ip, .. } => pod_mac(*ip),
        _ => tun0_mac.clone(),
    };
    let packet = match proto {
        Proto::Arp => format!(
            "arp,{tunnel}in_port={in_port},dl_src={dl_src},dl_dst=ff:ff:ff:ff:ff:ff,arp_op=1,arp_spa={nw_src},arp_tpa={dst_ip},arp_sha={dl_src}"
        ),
        Proto::Icmp => format!(
            "icmp,{tunnel}in_port={in_port},dl_src={dl_src},dl_dst={dl_dst},nw_src={nw_src},nw_dst={dst_ip},nw_ttl=64,icmp_type=8,icmp_code=0"
        ),
        Proto::Tcp(p) => format!(
            "tcp,{tunnel}in_port={in_port},dl_src={dl_src},dl_dst={dl_dst},nw_src={nw_src},nw_dst={dst_ip},nw_ttl=64,tp_src=40000,tp_dst={p},tcp_flags=0x002"
        ),
        Proto::Udp(p) => format!(
            "udp,{tunnel}in_port={in_port},dl_src={dl_src},dl_dst={dl_dst},nw_src={nw_src},nw_dst={dst_ip},nw_ttl=64,udp_src=40000,udp_dst={p}"
        ),
    };
    let rundir = view
        .config
        .bridge_mgmt
        .parent()
        .unwrap_or(std::path::Path::new("/run/openvswitch"));
    let ctl = ovs::unixctl::control_socket(rundir, "ovs-vswitchd")
        .map_err(|e| TraceError::Switch(format!("{e}; the agent looks next to bridgeMgmt")))?;
    let raw = ovs::unixctl::call(
        &ctl,
        "ofproto/trace",
        &[crate::pod::BRIDGE, &packet],
        Duration::from_secs(10),
    )
    .await
    .map_err(|e| TraceError::Switch(format!("ofproto/trace on {}: {e}", ctl.display())))?;
    let parsed = parse(&raw);
    let owners = view.cookie_owners().await;
    let steps: Vec<Step> = parsed
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
        .collect();
    let judged = Judge {
        src: &src,
        dst: &dst,
        proto,
        nw_src,
        dl_src: &dl_src,
        in_port,
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
    Ok(TraceResult {
        src: src.words(&tenants),
        dst: dst.words(&tenants),
        packet,
        decided_in: parsed
            .steps
            .last()
            .map(|s| table_name(s.0).to_string())
            .unwrap_or_default(),
        steps,
        outcome: judged.0,
        verdict: judged.1,
        vxlan: judged.2,
        policy,
        raw,
    })
}

/// Networkpolicy mode: what tables 27 and 80 did with the packet, in words.
fn policy_words(p: &Parsed, view: &crate::features::network_policy::PolicyView) -> Vec<String> {
    use multitenant::policy::Direction;
    let mut out = Vec::new();
    for (table, matched, prio, _, _) in &p.steps {
        let (dir, reg) = match Table::from_id(*table) {
            Some(Table::PodEgressPolicy) => (Direction::Egress, "reg3"),
            Some(Table::IngressIsolation) => (Direction::Ingress, "reg2"),
            _ => continue,
        };
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
        let words = match *prio {
            300 if dir == Direction::Egress => "egress: to a Service, decided after the node's DNAT (when it comes back with the endpoint as destination)".to_string(),
            300 => "ingress: from the node (always allowed)".to_string(),
            200 => format!("{dir}: a reply of an allowed connection"),
            flows::policy::PRIO_CONJUNCTION => {
                let id = matched
                    .split(',')
                    .find_map(|f| f.trim().strip_prefix("conj_id="))
                    .and_then(|v| v.parse::<u32>().ok());
                match id.and_then(|i| view.rules.get(&i)) {
                    Some(r) => format!("{dir} of {pod}: allowed by {r}"),
                    None => format!("{dir} of {pod}: allowed by conjunction {id:?}"),
                }
            }
            flows::policy::PRIO_PLAIN => {
                let rules: Vec<String> = view
                    .plain
                    .get(&(dir, port))
                    .map(|v| v.iter().map(ToString::to_string).collect())
                    .unwrap_or_default();
                format!("{dir} of {pod}: allowed by {}", rules.join(" and "))
            }
            flows::policy::PRIO_ISOLATION => format!(
                "{dir} of {pod}: dropped: the pod is isolated by NetworkPolicy {} and none of their rules allows this packet",
                view.isolated.get(&port).map(isolating).unwrap_or_default()
            ),
            0 if dir == Direction::Egress => format!("egress: {pod} is not isolated for egress (no NetworkPolicy selects it)"),
            50 => format!("ingress: {pod} is not isolated for ingress (no NetworkPolicy selects it)"),
            _ => continue,
        };
        out.push(words);
    }
    out
}

/// What the verdict needs to know.
struct Judge<'a> {
    src: &'a End,
    dst: &'a End,
    proto: Proto,
    nw_src: Ipv4Addr,
    dl_src: &'a str,
    in_port: u32,
    pods: &'a [crate::pod::Pod],
    tenants: &'a dyn Fn(u32) -> String,
    remote_of: &'a dyn Fn(Ipv4Addr) -> Option<(String, Ipv4Addr)>,
    /// A VNID's egress route (kind, in words) and its IPs in words (`its egress IP X`, or why
    /// none is usable), if it has egress IPs.
    egress_ip: &'a dyn Fn(u32) -> Option<(String, String, String)>,
    /// Networkpolicy mode: the policies' rows.
    policy: Option<&'a crate::features::network_policy::PolicyView>,
}

impl Judge<'_> {
    fn verdict(&self, p: &Parsed) -> (Outcome, String, Option<VxlanHop>) {
        let dst_ip = match self.dst {
            End::Pod { ip, .. } | End::Unused(ip) | End::Service(ip) | End::External(ip) => {
                Some(*ip)
            }
            End::Remote { ip, .. } => Some(*ip),
            End::Node => None,
        };
        let by_egress_ip = p
            .steps
            .last()
            .is_some_and(|s| Table::from_id(s.0) == Some(Table::EgressRouting) && s.2 == 100);
        let vnid = p.regs.get("reg0").copied().unwrap_or(0) as u32;
        let ips = || {
            (self.egress_ip)(vnid)
                .map(|e| e.2)
                .unwrap_or_else(|| "its egress IP".into())
        };
        // A select group picks its bucket by a hash the datapath computes after the trace
        // ends (`hash(...),recirc`): the plan says where the buckets lead.
        let to_group = by_egress_ip
            && p.steps
                .last()
                .is_some_and(|s| s.4.iter().any(|a| a.starts_with("group:")));
        if to_group {
            let (kind, route) = (self.egress_ip)(vnid)
                .map(|e| (e.0, e.1))
                .unwrap_or_default();
            return if kind == "local" {
                (
                    Outcome::ToHost,
                    format!(
                        "leaves the overlay through tun0 with VNID {vnid} {}'s mark: this node SNATs it to {} (egress_routing, group {vnid})",
                        (self.tenants)(vnid),
                        ips()
                    ),
                    None,
                )
            } else {
                (
                    Outcome::ToRemoteNode,
                    format!(
                        "sent {route} (VNI {vnid}, group {vnid} picks one by a hash of the connection), which holds an egress IP of VNID {vnid} {}: the packet leaves the cluster there with {} as source",
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
                let node = (self.remote_of)(dst_ip.unwrap_or(Ipv4Addr::UNSPECIFIED))
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
                    End::Node => "delivered to the node through tun0".to_string(),
                    _ => "handed to the node through tun0".to_string(),
                };
                return (Outcome::ToHost, why, None);
            }
            if let Some(pod) = self.pods.iter().find(|x| x.ofport == port) {
                let why = match self.src {
                    End::Node => ": the node reaches every pod".to_string(),
                    End::External(_) => {
                        ": from outside the cluster through the node (tun0)".to_string()
                    }
                    _ => match self.policy {
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
    fn vnid_words(&self, p: &Parsed) -> String {
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

    fn drop_reason(&self, p: &Parsed) -> String {
        let Some((table, matched, _, _, _)) = p.steps.last() else {
            return "dropped before any table (the switch matched nothing)".into();
        };
        let name = table_name(*table);
        let ip_of = |e: &End| match e {
            End::Pod { ip, .. } | End::Unused(ip) | End::Service(ip) | End::External(ip) => {
                ip.to_string()
            }
            End::Remote { ip, .. } => ip.to_string(),
            End::Node => "the node".into(),
        };
        let why = match Table::from_id(*table) {
            Some(Table::Classifier) => format!(
                "port {} is not a pod, tun0 or vxlan0 port the pipeline knows, or the packet is neither IP nor ARP",
                self.in_port
            ),
            Some(Table::VxlanIngress) => "VXLAN from an address that is no known node's VTEP".into(),
            Some(Table::PodEgressSpoofguard) => match self.src {
                End::Pod { ip, ns, name, .. } => {
                    let own_mac = pod_mac(*ip);
                    if self.nw_src != *ip {
                        format!("{} is not this pod's address ({ns}/{name} has {ip})", self.nw_src)
                    } else if self.dl_src != own_mac {
                        format!("{} is not this pod's MAC ({ns}/{name} has {own_mac})", self.dl_src)
                    } else {
                        format!("the packet does not match {ns}/{name}'s port, MAC and address rows")
                    }
                }
                End::Node | End::External(_) => "tun0 traffic reached the pod spoof guard".into(),
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
            Some(Table::IngressIsolation | Table::PodEgressPolicy) if self.policy.is_some() => {
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
                    (self.egress_ip)(s).map_or_else(|| "(no detail)".into(), |e| e.2)
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

fn proto_text(p: Proto) -> String {
    match p {
        Proto::Icmp => "icmp".into(),
        Proto::Arp => "arp".into(),
        Proto::Tcp(n) => format!("tcp/{n}"),
        Proto::Udp(n) => format!("udp/{n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CROSS_TENANT: &str = r#"Flow: icmp,in_port=3,vlan_tci=0x0000,dl_src=0a:58:0a:80:00:02,dl_dst=0a:58:0a:80:00:03,nw_src=10.128.0.2,nw_dst=10.128.0.3

bridge("br0")
-------------
 0. ct_state=-trk,ip, priority 1000, cookie 0x1
    ct(table=0)
    drop
     -> A clone of the packet is forked to recirculate. The forked pipeline will be resumed at table 0.

Final flow: unchanged
Datapath actions: ct,recirc(0x1)

===============================================================================
recirc(0x1) - resume conntrack with default ct_state=trk|new (use --ct-next to customize)
===============================================================================

Flow: recirc_id=0x1,ct_state=new|trk,eth,icmp,in_port=3

bridge("br0")
-------------
    thaw
        Resuming from table 0
 0. ip, priority 100, cookie 0x1
    goto_table:20
20. ip,in_port=3,dl_src=0a:58:0a:80:00:02,nw_src=10.128.0.2, priority 100, cookie 0x1466df81e88c5fc2
    load:0x3->NXM_NX_REG3[]
    goto_table:26
26. reg3=0x3, priority 100, cookie 0x1466df81e88c5fc2
    load:0xa->NXM_NX_REG0[]
    goto_table:27
70. ip,nw_dst=10.128.0.3, priority 100, cookie 0x1c12068452c8ee9e
    load:0x24->NXM_NX_REG2[]
    goto_table:75
75. reg2=0x24, priority 100, cookie 0x1c12068452c8ee9e
    load:0xb->NXM_NX_REG1[]
    goto_table:80
80. priority 0, cookie 0x1
    drop

Final flow: recirc_id=0x1,ct_state=new|trk,eth,icmp,reg0=0xa,reg1=0xb,reg2=0x24,reg3=0x3,in_port=3
Megaflow: recirc_id=0x1
Datapath actions: drop
"#;

    #[test]
    fn parses_the_last_pass_with_registers() {
        let p = parse(CROSS_TENANT);
        let tables: Vec<u8> = p.steps.iter().map(|s| s.0).collect();
        assert_eq!(tables, [0, 20, 26, 70, 75, 80]);
        assert_eq!(
            p.steps[1].1,
            "ip,in_port=3,dl_src=0a:58:0a:80:00:02,nw_src=10.128.0.2"
        );
        assert_eq!((p.steps[1].2, p.steps[1].3), (100, 0x1466df81e88c5fc2));
        assert_eq!(p.steps[5].1, "");
        assert_eq!(p.steps[5].4, ["drop"]);
        assert_eq!(p.regs["reg0"], 10);
        assert_eq!(p.regs["reg1"], 11);
        assert!(p.outputs.is_empty());
    }

    #[test]
    fn outputs_and_tunnels() {
        let text = "Flow: ip\n\nbridge(\"br0\")\n-------------\n80. reg0=0xa,reg1=0xa, priority 100, cookie 0x300000000000000a\n    output:NXM_NX_REG2[]\n     -> output port is 18\n\nFinal flow: reg0=0xa\nDatapath actions: 19\n";
        let p = parse(text);
        assert_eq!(p.outputs, [18]);
        let text = "Flow: ip\n\nbridge(\"br0\")\n-------------\n90. ip,nw_dst=10.129.0.0/23, priority 100, cookie 0x2000000000000003\n    move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31]\n    set_field:172.17.0.3->tun_dst\n    output:1\n\nFinal flow: reg0=0xa\n";
        let p = parse(text);
        assert_eq!(p.outputs, [1]);
        assert_eq!(p.tun_dst, Some("172.17.0.3".parse().unwrap()));
    }

    #[test]
    fn protocols() {
        assert_eq!(parse_proto("").unwrap(), Proto::Icmp);
        assert_eq!(parse_proto("TCP/80").unwrap(), Proto::Tcp(80));
        assert_eq!(parse_proto("udp/53").unwrap(), Proto::Udp(53));
        assert_eq!(parse_proto("arp").unwrap(), Proto::Arp);
        for bad in ["tcp", "tcp/0", "udp/70000", "sctp/1", "icmp6"] {
            let e = parse_proto(bad).unwrap_err().to_string();
            assert!(
                e.contains("expected icmp, arp, tcp/PORT or udp/PORT"),
                "{bad}: {e}"
            );
        }
    }
}
