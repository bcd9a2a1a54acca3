//! Host ports: a pod's `runtimeConfig.portMappings` made into DNAT rules on the node.
//!
//! What: for each mapping (hostPort, containerPort, protocol, optional hostIP) traffic to the
//! node's addresses (or only hostIP) on hostPort is DNATed to podIP:containerPort and reaches
//! the pod through tun0. Rules live in the agent's own nat chains:
//! - `SDN-HOSTPORTS`, jumped to from `PREROUTING` and `OUTPUT` for local destinations
//!   (`-m addrtype --dst-type LOCAL`), holds one jump per pod, each to the pod's chain
//!   `SDN-HP-<hash of sandbox/ifname>` (commented `"<namespace>/<pod> <sandbox>"`) with the DNATs;
//! - `SDN-HP-MASQ`, jumped to from `POSTROUTING`, masquerades host port connections (matched by
//!   pod address, container port and `--ctorigdstport` hostPort) that come from localhost
//!   (127.0.0.0/8; needs `net.ipv4.conf.all.route_localnet=1`, set at start-up) or from a
//!   cluster network (a pod to its own hostport, or another pod via the node address): without
//!   it the reply would go pod to pod through br0 and never be un-DNATed. Other DNATed traffic
//!   (pod to Service through kube-proxy) is left alone: table 25 needs the source pod's address.
//!   Connections from outside the node keep their source.
//!
//! Why this way: every change (ADD, DEL, start-up) rewrites the whole set of our chains from
//! the registry in one `iptables-restore --noflush` input (dry run first, through
//! [`crate::host::iptables::Iptables::restore`]), so a sync is atomic and also removes stale
//! `SDN-HP-*` chains. The registry of taken (hostPort, protocol, hostIP) is node-wide: a second
//! pod asking for a taken one fails its ADD with an error naming the holder.
//!
//! Limits: IPv4 only; hostIP must be an IPv4 address (empty or 0.0.0.0 = every node address);
//! a sync is O(pods with host ports) lines; the rules do not check that hostIP is actually an
//! address of the node, nor that a node process already listens on hostPort (the DNAT wins);
//! conntrack entries of a previous holder of a UDP host port are not flushed (a client that
//! keeps sending keeps reaching the old address until its entry expires). A kube-proxy Service
//! DNAT whose port equals a host port of the same pod and container port is masqueraded too
//! (harmless: that pod port is published on the node anyway).

use crate::lock;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde_json::Value;

use crate::bridge::seams::NatRules;
use crate::cni::config::runtime_key;
use crate::cni::{codes, CniError};
use crate::host::iptables::{Iptables, IptablesError};

/// The chain jumped to from `PREROUTING` and `OUTPUT`; holds one jump per pod.
pub const HOSTPORTS_CHAIN: &str = "SDN-HOSTPORTS";
/// The chain jumped to from `POSTROUTING`; masquerades hairpin and localhost hostport traffic.
pub const MASQ_CHAIN: &str = "SDN-HP-MASQ";
/// Prefix of the per-pod chains.
pub const POD_CHAIN_PREFIX: &str = "SDN-HP-";
/// The pod port's `external_ids` key holding its mappings (compact JSON).
pub const EXTERNAL_ID: &str = "hostports";

/// Transport protocol of a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// The lowercase name iptables uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One port mapping of a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortMapping {
    /// The node port.
    pub host_port: u16,
    /// The pod port.
    pub container_port: u16,
    /// The protocol.
    pub protocol: Protocol,
    /// Only this node address (`None`: every node address).
    pub host_ip: Option<Ipv4Addr>,
}

impl PortMapping {
    /// Whether two mappings want the same node socket: same port and protocol, and the same
    /// address or either on every address.
    pub fn conflicts_with(&self, other: &PortMapping) -> bool {
        self.host_port == other.host_port
            && self.protocol == other.protocol
            && (self.host_ip.is_none() || other.host_ip.is_none() || self.host_ip == other.host_ip)
    }
}

impl std::fmt::Display for PortMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ip = self.host_ip.unwrap_or(Ipv4Addr::UNSPECIFIED);
        write!(
            f,
            "{ip}:{}/{} -> {}",
            self.host_port, self.protocol, self.container_port
        )
    }
}

fn bad(msg: String, details: &str) -> CniError {
    CniError::new(codes::INVALID_ENV, msg, details.to_string())
}

const SHAPE: &str = "each entry needs hostPort and containerPort (1..=65535), optional protocol \
                     (tcp, udp, sctp; default tcp) and hostIP (an IPv4 address, empty or 0.0.0.0 \
                     for every node address); camelCase (podman) or capitalised (containerd) keys";

/// The mappings of `runtimeConfig` (`None` or no `portMappings`: none). Accepts podman's
/// camelCase keys, containerd's capitalised ones and any other case ([`runtime_key`]). Duplicates within the list (two entries
/// wanting the same node socket) are refused.
pub fn parse(runtime_config: Option<&Value>) -> Result<Vec<PortMapping>, CniError> {
    let Some(list) = runtime_config.and_then(|rc| runtime_key(rc, "portMappings")) else {
        return Ok(Vec::new());
    };
    if list.is_null() {
        return Ok(Vec::new());
    }
    let Some(list) = list.as_array() else {
        return Err(bad(
            format!("runtimeConfig.portMappings must be a list, got {list}"),
            SHAPE,
        ));
    };
    let mut out: Vec<PortMapping> = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let m = parse_entry(entry).map_err(|what| {
            bad(
                format!("runtimeConfig.portMappings[{i}] {entry}: {what}"),
                SHAPE,
            )
        })?;
        if let Some(prev) = out.iter().find(|p| p.conflicts_with(&m)) {
            return Err(bad(
                format!(
                    "runtimeConfig.portMappings[{i}] {entry}: host port {} conflicts with an \
                     earlier entry ({prev})",
                    m.host_port
                ),
                SHAPE,
            ));
        }
        out.push(m);
    }
    Ok(out)
}

fn field<'a>(entry: &'a Value, camel: &str) -> Option<&'a Value> {
    runtime_key(entry, camel).filter(|v| !v.is_null())
}

fn parse_entry(entry: &Value) -> Result<PortMapping, String> {
    if !entry.is_object() {
        return Err("not an object".into());
    }
    let port = |camel: &str| -> Result<u16, String> {
        let v = field(entry, camel).ok_or_else(|| format!("{camel} is missing"))?;
        v.as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("{camel} {v} is not a port (1..=65535)"))
    };
    let host_port = port("hostPort")?;
    let container_port = port("containerPort")?;
    let protocol = match field(entry, "protocol") {
        None => Protocol::Tcp,
        Some(v) => match v.as_str().map(str::to_ascii_lowercase).as_deref() {
            Some("tcp" | "") => Protocol::Tcp,
            Some("udp") => Protocol::Udp,
            Some("sctp") => Protocol::Sctp,
            _ => return Err(format!("protocol {v} is not tcp, udp or sctp")),
        },
    };
    let host_ip = match field(entry, "hostIP") {
        None => None,
        Some(v) => match v.as_str() {
            Some("") => None,
            Some(s) => match s.parse::<Ipv4Addr>() {
                Ok(ip) if ip.is_unspecified() => None,
                Ok(ip) => Some(ip),
                Err(_) => return Err(format!("hostIP {v} is not an IPv4 address")),
            },
            None => return Err(format!("hostIP {v} is not an IPv4 address")),
        },
    };
    Ok(PortMapping {
        host_port,
        container_port,
        protocol,
        host_ip,
    })
}

/// The compact JSON recorded in the pod port's `external_ids` (podman's key names).
pub fn to_json(mappings: &[PortMapping]) -> String {
    let list: Vec<Value> = mappings
        .iter()
        .map(|m| {
            let mut o = serde_json::json!({
                "hostPort": m.host_port,
                "containerPort": m.container_port,
                "protocol": m.protocol.as_str(),
            });
            if let Some(ip) = m.host_ip {
                o["hostIP"] = Value::String(ip.to_string());
            }
            o
        })
        .collect();
    Value::Array(list).to_string()
}

/// Parses [`to_json`]'s output back.
pub fn from_json(text: &str) -> Result<Vec<PortMapping>, CniError> {
    let list: Value = serde_json::from_str(text)
        .map_err(|e| bad(format!("recorded hostports {text:?} are not JSON: {e}"), ""))?;
    parse(Some(&serde_json::json!({ "portMappings": list })))
}

/// The per-pod chain name: `SDN-HP-` and 16 hex digits of the attachment's hash
/// (`flows::AttachmentId::hash` of `sandbox/ifname`) (23 characters, under iptables' 28).
pub fn chain_name(sandbox: &str, ifname: &str) -> String {
    let h = flows::AttachmentId::new(sandbox, ifname).hash();
    format!("{POD_CHAIN_PREFIX}{h:016X}")
}

/// One pod's host ports as the rules need them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPorts {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Container (sandbox) id.
    pub sandbox: String,
    /// Interface in the pod.
    pub ifname: String,
    /// The pod's address (`None` while its ADD has not leased one yet: no rules).
    pub ip: Option<Ipv4Addr>,
    /// The mappings.
    pub mappings: Vec<PortMapping>,
}

impl PodPorts {
    fn comment(&self) -> String {
        // iptables comments are at most 256 bytes; sandbox ids are validated CNI ids.
        let mut c = format!("{}/{} {}", self.namespace, self.pod, self.sandbox);
        c.retain(|ch| ch != '"' && ch != '\\' && !ch.is_control());
        c.truncate(250);
        c
    }
}

/// A jump from a built-in nat chain into ours.
const JUMPS: [(&str, &str, &str); 3] = [
    (
        "PREROUTING",
        "-m addrtype --dst-type LOCAL -m comment --comment \"sdn: hostports\"",
        HOSTPORTS_CHAIN,
    ),
    (
        "OUTPUT",
        "-m addrtype --dst-type LOCAL -m comment --comment \"sdn: hostports\"",
        HOSTPORTS_CHAIN,
    ),
    (
        "POSTROUTING",
        "-m comment --comment \"sdn: hostports masquerade\"",
        MASQ_CHAIN,
    ),
];

/// Renders the nat-table `iptables-restore --noflush` input making our chains hold exactly the
/// rules of `pods` (those with an address): `existing` is `iptables -t nat -S` (to add missing
/// jumps from the built-in chains and delete stale `SDN-HP-*` chains). Pure.
pub fn render(pods: &[PodPorts], cluster_networks: &[Ipv4Net], existing: &[String]) -> String {
    let mut pods: Vec<&PodPorts> = pods
        .iter()
        .filter(|p| p.ip.is_some() && !p.mappings.is_empty())
        .collect();
    pods.sort_by(|a, b| (&a.sandbox, &a.ifname).cmp(&(&b.sandbox, &b.ifname)));
    let wanted: BTreeSet<String> = pods
        .iter()
        .map(|p| chain_name(&p.sandbox, &p.ifname))
        .collect();
    let mut out = String::from("*nat\n");
    let _ = writeln!(out, ":{HOSTPORTS_CHAIN} - [0:0]");
    let _ = writeln!(out, ":{MASQ_CHAIN} - [0:0]");
    for c in &wanted {
        let _ = writeln!(out, ":{c} - [0:0]");
    }
    // Stale per-pod chains: declared (flushed) and deleted; their jumps went with the flush of
    // SDN-HOSTPORTS above.
    let stale: BTreeSet<&str> = existing
        .iter()
        .filter_map(|l| l.strip_prefix("-N "))
        .map(str::trim)
        .filter(|c| c.starts_with(POD_CHAIN_PREFIX) && *c != MASQ_CHAIN && !wanted.contains(*c))
        .collect();
    for c in &stale {
        let _ = writeln!(out, ":{c} - [0:0]");
    }
    for p in &pods {
        let chain = chain_name(&p.sandbox, &p.ifname);
        let comment = p.comment();
        let _ = writeln!(
            out,
            "-A {HOSTPORTS_CHAIN} -m comment --comment \"{comment}\" -j {chain}"
        );
        let ip = p.ip.unwrap_or(Ipv4Addr::UNSPECIFIED);
        for m in &p.mappings {
            let dst = m.host_ip.map(|h| format!(" -d {h}/32")).unwrap_or_default();
            let proto = m.protocol;
            let _ = writeln!(
                out,
                "-A {chain}{dst} -p {proto} -m comment --comment \"{comment}\" -m {proto} --dport {} -j DNAT --to-destination {ip}:{}",
                m.host_port, m.container_port
            );
        }
    }
    // Masquerade only connections DNATed by a host port (matched by the pod's address and port
    // and the original destination port): pod to Service traffic DNATed by kube-proxy keeps its
    // source, which table 25 needs for the source pod's VNID.
    let sources: Vec<String> = std::iter::once("127.0.0.0/8".to_string())
        .chain(cluster_networks.iter().map(ToString::to_string))
        .collect();
    for p in &pods {
        let comment = p.comment();
        let ip = p.ip.unwrap_or(Ipv4Addr::UNSPECIFIED);
        for m in &p.mappings {
            let proto = m.protocol;
            for src in &sources {
                let _ = writeln!(
                    out,
                    "-A {MASQ_CHAIN} -s {src} -d {ip}/32 -p {proto} -m comment --comment \"{comment}\" -m {proto} --dport {} -m conntrack --ctstate DNAT --ctorigdstport {} -j MASQUERADE",
                    m.container_port, m.host_port
                );
            }
        }
    }
    for (from, spec, to) in JUMPS {
        let has = existing.iter().any(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            t.len() > 2
                && t[0] == "-A"
                && t[1] == from
                && t.windows(2).any(|w| w[0] == "-j" && w[1] == to)
        });
        if !has {
            let _ = writeln!(out, "-I {from} 1 {spec} -j {to}");
        }
    }
    for c in &stale {
        let _ = writeln!(out, "-X {c}");
    }
    out.push_str("COMMIT\n");
    out
}

/// Renders the removal of every host port rule of ours (teardown): the jumps from the built-in
/// chains, then `SDN-HOSTPORTS`, `SDN-HP-MASQ` and every `SDN-HP-*` chain; `existing` is
/// `iptables -t nat -S`. `None` when none of ours exists. Pure.
pub fn render_removal(existing: &[String]) -> Option<String> {
    let ours = |c: &str| c == HOSTPORTS_CHAIN || c.starts_with(POD_CHAIN_PREFIX);
    let chains: Vec<&str> = existing
        .iter()
        .filter_map(|l| l.strip_prefix("-N "))
        .map(str::trim)
        .filter(|c| ours(c))
        .collect();
    if chains.is_empty() {
        return None;
    }
    let mut out = String::from("*nat\n");
    for l in existing {
        let t: Vec<&str> = l.split_whitespace().collect();
        let jumps_to_ours = t.windows(2).any(|w| w[0] == "-j" && ours(w[1]));
        if t.len() > 2 && t[0] == "-A" && !ours(t[1]) && jumps_to_ours {
            let _ = writeln!(out, "{}", l.replacen("-A ", "-D ", 1));
        }
    }
    for c in &chains {
        let _ = writeln!(out, ":{c} - [0:0]");
    }
    for c in &chains {
        let _ = writeln!(out, "-X {c}");
    }
    out.push_str("COMMIT\n");
    Some(out)
}

/// Removes every host port rule of ours (node teardown, `sdn-agent remove-host-rules`).
/// Idempotent: without our chains it runs nothing.
pub async fn remove_all(iptables: &impl NatRules) -> Result<(), IptablesError> {
    match render_removal(&iptables.list("nat").await?) {
        Some(input) => iptables.restore(&input).await,
        None => Ok(()),
    }
}

/// The nat rules `pod` needs that `existing` (`iptables -t nat -S`) lacks, as readable
/// descriptions (empty: all there). Pure; for CNI CHECK.
pub fn missing_rules(pod: &PodPorts, existing: &[String]) -> Vec<String> {
    let Some(ip) = pod.ip else { return Vec::new() };
    let chain = chain_name(&pod.sandbox, &pod.ifname);
    let has = |pred: &dyn Fn(&[&str]) -> bool| {
        existing.iter().any(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            pred(&t)
        })
    };
    let pair = |t: &[&str], a: &str, b: &str| t.windows(2).any(|w| w[0] == a && w[1] == b);
    let mut missing = Vec::new();
    if pod.mappings.is_empty() {
        return missing;
    }
    if !has(&|t| t.len() > 1 && t[0] == "-A" && t[1] == HOSTPORTS_CHAIN && pair(t, "-j", &chain)) {
        missing.push(format!("the jump from {HOSTPORTS_CHAIN} to {chain}"));
    }
    for (from, _, to) in JUMPS {
        if !has(&|t| t.len() > 1 && t[0] == "-A" && t[1] == from && pair(t, "-j", to)) {
            missing.push(format!("the jump from {from} to {to}"));
        }
    }
    for m in &pod.mappings {
        let dst = format!("{ip}:{}", m.container_port);
        let port = m.host_port.to_string();
        if !has(&|t| {
            t.len() > 1
                && t[0] == "-A"
                && t[1] == chain
                && pair(t, "-p", m.protocol.as_str())
                && pair(t, "--dport", &port)
                && pair(t, "--to-destination", &dst)
                && m.host_ip.is_none_or(|h| pair(t, "-d", &format!("{h}/32")))
        }) {
            missing.push(format!("the DNAT of {m} to {dst} in {chain}"));
        }
    }
    missing
}

type Key = (String, String);

/// The node's host ports: who holds which, and the rules made from that (applied through any
/// [`NatRules`], the real iptables or the fake).
#[derive(Debug)]
pub struct HostPorts<N: NatRules = Iptables> {
    iptables: N,
    cluster_networks: Vec<Ipv4Net>,
    taken: std::sync::Mutex<BTreeMap<Key, PodPorts>>,
    /// Serialises syncs (a sync reads the registry and writes the whole rule set).
    sync_lock: tokio::sync::Mutex<()>,
}

impl<N: NatRules> HostPorts<N> {
    /// An empty registry applying rules through `iptables`.
    pub fn new(iptables: N, cluster_networks: Vec<Ipv4Net>) -> HostPorts<N> {
        HostPorts {
            iptables,
            cluster_networks,
            taken: std::sync::Mutex::default(),
            sync_lock: tokio::sync::Mutex::const_new(()),
        }
    }

    /// Reserves `pod`'s mappings (with or without its address yet). Fails, reserving nothing,
    /// when one is taken by another attachment; the error names the holder.
    pub fn reserve(&self, pod: PodPorts) -> Result<(), CniError> {
        let key = (pod.sandbox.clone(), pod.ifname.clone());
        let mut taken = lock(&self.taken);
        for (k, other) in taken.iter() {
            if *k == key {
                continue;
            }
            for m in &pod.mappings {
                if let Some(o) = other.mappings.iter().find(|o| o.conflicts_with(m)) {
                    return Err(CniError::new(
                        codes::INVALID_ENV,
                        format!(
                            "host port {}/{} ({m}) is already taken on this node by pod {}/{} \
                             (sandbox {}, mapping {o})",
                            m.host_port, m.protocol, other.namespace, other.pod, other.sandbox
                        ),
                        "use another hostPort (or hostIP), or remove that pod first",
                    ));
                }
            }
        }
        if !pod.mappings.is_empty() {
            taken.insert(key, pod);
        }
        Ok(())
    }

    /// Sets the address of a reserved attachment (after its lease).
    pub fn set_ip(&self, sandbox: &str, ifname: &str, ip: Ipv4Addr) {
        if let Some(p) = lock(&self.taken).get_mut(&(sandbox.to_string(), ifname.to_string())) {
            p.ip = Some(ip);
        }
    }

    /// The mappings reserved for an attachment.
    pub fn mappings(&self, sandbox: &str, ifname: &str) -> Vec<PortMapping> {
        lock(&self.taken)
            .get(&(sandbox.to_string(), ifname.to_string()))
            .map(|p| p.mappings.clone())
            .unwrap_or_default()
    }

    /// CNI CHECK: the attachment's rules are all in place; the error lists what is missing.
    pub async fn check(&self, sandbox: &str, ifname: &str) -> Result<(), String> {
        let pod = lock(&self.taken)
            .get(&(sandbox.to_string(), ifname.to_string()))
            .cloned();
        let Some(pod) = pod else { return Ok(()) };
        let existing = self.iptables.list("nat").await.map_err(|e| e.to_string())?;
        let missing = missing_rules(&pod, &existing);
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("host port rules missing: {}", missing.join(", ")))
        }
    }

    /// Forgets an attachment's reservation; whether it had one.
    pub fn release(&self, sandbox: &str, ifname: &str) -> bool {
        lock(&self.taken)
            .remove(&(sandbox.to_string(), ifname.to_string()))
            .is_some()
    }

    /// Makes the nat rules exactly the registry's, in one restore (dry run first). Removes stale
    /// `SDN-HP-*` chains.
    pub async fn sync(&self) -> Result<(), IptablesError> {
        let _serial = self.sync_lock.lock().await;
        let existing = self.iptables.list("nat").await?;
        let pods: Vec<PodPorts> = lock(&self.taken).values().cloned().collect();
        let input = render(&pods, &self.cluster_networks, &existing);
        self.iptables.restore(&input).await?;
        tracing::debug!(pods = pods.len(), "hostport rules synced");
        Ok(())
    }

    /// DEL of an attachment: releases it and, when it had host ports (in the registry, or
    /// `recorded` on its OVS port), rewrites the rules without its chain (one sync).
    /// Idempotent; costs nothing for pods without host ports.
    pub async fn remove(
        &self,
        sandbox: &str,
        ifname: &str,
        recorded: bool,
    ) -> Result<(), IptablesError> {
        if self.release(sandbox, ifname) || recorded {
            self.sync().await
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn m(hp: u16, cp: u16, p: Protocol, ip: Option<&str>) -> PortMapping {
        PortMapping {
            host_port: hp,
            container_port: cp,
            protocol: p,
            host_ip: ip.map(|i| i.parse().unwrap()),
        }
    }

    #[test]
    fn parses_podman_and_containerd_keys() {
        let rc = json!({"portMappings": [
            {"hostPort": 8080, "containerPort": 80, "protocol": "tcp", "hostIP": ""},
            {"HostPort": 53, "ContainerPort": 5353, "Protocol": "UDP", "HostIP": "10.0.0.5"},
            {"hostPort": 9000, "containerPort": 9000, "protocol": "Sctp", "hostIP": "0.0.0.0"},
            {"hostPort": 8081, "containerPort": 81},
        ]});
        assert_eq!(
            parse(Some(&rc)).unwrap(),
            vec![
                m(8080, 80, Protocol::Tcp, None),
                m(53, 5353, Protocol::Udp, Some("10.0.0.5")),
                m(9000, 9000, Protocol::Sctp, None),
                m(8081, 81, Protocol::Tcp, None),
            ]
        );
        assert!(parse(None).unwrap().is_empty());
        assert!(parse(Some(&json!({"bandwidth": {}}))).unwrap().is_empty());
    }

    #[test]
    fn bad_entries_are_named() {
        for (entry, want) in [
            (json!({"hostPort": 0, "containerPort": 80}), "[1]"),
            (
                json!({"hostPort": 70000, "containerPort": 80}),
                "hostPort 70000",
            ),
            (json!({"hostPort": 80}), "containerPort is missing"),
            (
                json!({"hostPort": 80, "containerPort": "x"}),
                "containerPort \"x\"",
            ),
            (
                json!({"hostPort": 80, "containerPort": 80, "protocol": "icmp"}),
                "protocol \"icmp\"",
            ),
            (
                json!({"hostPort": 80, "containerPort": 80, "hostIP": "::1"}),
                "hostIP \"::1\"",
            ),
            (json!(5), "not an object"),
        ] {
            let rc = json!({"portMappings": [{"hostPort": 1, "containerPort": 1}, entry]});
            let e = parse(Some(&rc)).unwrap_err();
            assert_eq!(e.code, codes::INVALID_ENV);
            assert!(e.msg.contains("portMappings[1]"), "{}", e.msg);
            assert!(e.msg.contains(want), "{} lacks {want}", e.msg);
        }
        let e = parse(Some(&json!({"portMappings": {"hostPort": 1}}))).unwrap_err();
        assert!(e.msg.contains("must be a list"), "{}", e.msg);
        let dup = json!({"portMappings": [
            {"hostPort": 80, "containerPort": 80, "hostIP": "10.0.0.1"},
            {"hostPort": 80, "containerPort": 81},
        ]});
        let e = parse(Some(&dup)).unwrap_err();
        assert!(
            e.msg.contains("portMappings[1]") && e.msg.contains("conflicts"),
            "{}",
            e.msg
        );
    }

    #[test]
    fn conflicts() {
        let any = m(80, 1, Protocol::Tcp, None);
        let a = m(80, 2, Protocol::Tcp, Some("10.0.0.1"));
        let b = m(80, 3, Protocol::Tcp, Some("10.0.0.2"));
        assert!(any.conflicts_with(&a) && a.conflicts_with(&any));
        assert!(!a.conflicts_with(&b));
        assert!(a.conflicts_with(&m(80, 9, Protocol::Tcp, Some("10.0.0.1"))));
        assert!(!any.conflicts_with(&m(80, 1, Protocol::Udp, None)));
        assert!(!any.conflicts_with(&m(81, 1, Protocol::Tcp, None)));
    }

    #[test]
    fn json_round_trip() {
        let v = vec![
            m(8080, 80, Protocol::Tcp, None),
            m(53, 53, Protocol::Udp, Some("10.1.2.3")),
        ];
        let text = to_json(&v);
        assert_eq!(
            text,
            r#"[{"containerPort":80,"hostPort":8080,"protocol":"tcp"},{"containerPort":53,"hostIP":"10.1.2.3","hostPort":53,"protocol":"udp"}]"#
        );
        assert_eq!(from_json(&text).unwrap(), v);
        assert!(from_json("nope").is_err());
    }

    fn pod(sandbox: &str, name: &str, ip: Option<&str>, maps: Vec<PortMapping>) -> PodPorts {
        PodPorts {
            namespace: "ns".into(),
            pod: name.into(),
            sandbox: sandbox.into(),
            ifname: "eth0".into(),
            ip: ip.map(|i| i.parse().unwrap()),
            mappings: maps,
        }
    }

    #[test]
    fn registry_refuses_taken_ports_naming_the_holder() {
        let hp = HostPorts::new(Iptables::host(), vec![]);
        hp.reserve(pod(
            "s1",
            "web",
            None,
            vec![m(8080, 80, Protocol::Tcp, None)],
        ))
        .unwrap();
        let e = hp
            .reserve(pod(
                "s2",
                "web2",
                None,
                vec![
                    m(9090, 80, Protocol::Tcp, None),
                    m(8080, 80, Protocol::Tcp, Some("10.0.0.1")),
                ],
            ))
            .unwrap_err();
        assert!(
            e.msg.contains("ns/web") && e.msg.contains("s1") && e.msg.contains("8080/tcp"),
            "{}",
            e.msg
        );
        // Nothing of s2 was reserved: 9090 is free.
        hp.reserve(pod("s3", "x", None, vec![m(9090, 1, Protocol::Tcp, None)]))
            .unwrap();
        // UDP on the same port is fine; re-reserving the same attachment is fine.
        hp.reserve(pod("s4", "u", None, vec![m(8080, 1, Protocol::Udp, None)]))
            .unwrap();
        hp.reserve(pod(
            "s1",
            "web",
            None,
            vec![m(8080, 80, Protocol::Tcp, None)],
        ))
        .unwrap();
        assert!(hp.release("s1", "eth0"));
        assert!(!hp.release("s1", "eth0"));
        hp.reserve(pod(
            "s2",
            "web2",
            None,
            vec![m(8080, 80, Protocol::Tcp, None)],
        ))
        .unwrap();
        hp.set_ip("s2", "eth0", "10.128.0.9".parse().unwrap());
        assert_eq!(
            hp.mappings("s2", "eth0"),
            vec![m(8080, 80, Protocol::Tcp, None)]
        );
    }

    #[test]
    fn finds_missing_rules() {
        let web = pod(
            "s1",
            "web",
            Some("10.128.0.5"),
            vec![
                m(8080, 80, Protocol::Tcp, None),
                m(5353, 53, Protocol::Udp, Some("192.168.1.2")),
            ],
        );
        let cn: Vec<Ipv4Net> = vec!["10.128.0.0/14".parse().unwrap()];
        // What iptables -S prints back for the rendered input.
        let all: Vec<String> = render(std::slice::from_ref(&web), &cn, &[])
            .lines()
            .filter(|l| l.starts_with("-A ") || l.starts_with("-I "))
            .map(|l| {
                let l = l.replacen(" 1 -m", " -m", 1);
                l.replacen("-I ", "-A ", 1)
            })
            .collect();
        assert_eq!(missing_rules(&web, &all), Vec::<String>::new());
        let without_udp: Vec<String> = all
            .iter()
            .filter(|l| !l.contains("-p udp"))
            .cloned()
            .collect();
        let missing = missing_rules(&web, &without_udp);
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert!(missing[0].contains("5353/udp") && missing[0].contains("10.128.0.5:53"));
        assert_eq!(missing_rules(&web, &[]).len(), 6);
    }

    #[test]
    fn renders_the_teardown() {
        assert_eq!(render_removal(&["-N SDN-POSTROUTING".to_string()]), None);
        let existing: Vec<String> = [
            "-P PREROUTING ACCEPT",
            "-N SDN-HOSTPORTS",
            "-N SDN-HP-MASQ",
            "-N SDN-HP-0123456789ABCDEF",
            "-N SDN-POSTROUTING",
            "-A PREROUTING -m addrtype --dst-type LOCAL -m comment --comment \"sdn: hostports\" -j SDN-HOSTPORTS",
            "-A POSTROUTING -m comment --comment \"sdn: hostports masquerade\" -j SDN-HP-MASQ",
            "-A POSTROUTING -j SDN-POSTROUTING",
            "-A SDN-HOSTPORTS -m comment --comment \"a/b c\" -j SDN-HP-0123456789ABCDEF",
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            render_removal(&existing).unwrap(),
            r#"*nat
-D PREROUTING -m addrtype --dst-type LOCAL -m comment --comment "sdn: hostports" -j SDN-HOSTPORTS
-D POSTROUTING -m comment --comment "sdn: hostports masquerade" -j SDN-HP-MASQ
:SDN-HOSTPORTS - [0:0]
:SDN-HP-MASQ - [0:0]
:SDN-HP-0123456789ABCDEF - [0:0]
-X SDN-HOSTPORTS
-X SDN-HP-MASQ
-X SDN-HP-0123456789ABCDEF
COMMIT
"#
        );
    }

    #[test]
    fn renders_chains_jumps_and_stale_removal() {
        let web = pod(
            "s1",
            "web",
            Some("10.128.0.5"),
            vec![
                m(8080, 80, Protocol::Tcp, None),
                m(5353, 53, Protocol::Udp, Some("192.168.1.2")),
            ],
        );
        let pending = pod("s2", "new", None, vec![m(9000, 9, Protocol::Tcp, None)]);
        let c = chain_name("s1", "eth0");
        assert_eq!(c.len(), 23);
        assert!(c.starts_with("SDN-HP-"));
        assert_ne!(c, chain_name("s1", "eth1"));
        let existing = vec![
            "-N SDN-HP-MASQ".to_string(),
            "-N SDN-HP-0000000000000001".to_string(),
            format!("-N {c}"),
            "-A POSTROUTING -m comment --comment \"sdn: hostports masquerade\" -j SDN-HP-MASQ"
                .to_string(),
        ];
        let cn: Vec<Ipv4Net> = vec!["10.128.0.0/14".parse().unwrap()];
        let text = render(&[pending, web], &cn, &existing);
        let want = format!(
            r#"*nat
:SDN-HOSTPORTS - [0:0]
:SDN-HP-MASQ - [0:0]
:{c} - [0:0]
:SDN-HP-0000000000000001 - [0:0]
-A SDN-HOSTPORTS -m comment --comment "ns/web s1" -j {c}
-A {c} -p tcp -m comment --comment "ns/web s1" -m tcp --dport 8080 -j DNAT --to-destination 10.128.0.5:80
-A {c} -d 192.168.1.2/32 -p udp -m comment --comment "ns/web s1" -m udp --dport 5353 -j DNAT --to-destination 10.128.0.5:53
-A SDN-HP-MASQ -s 127.0.0.0/8 -d 10.128.0.5/32 -p tcp -m comment --comment "ns/web s1" -m tcp --dport 80 -m conntrack --ctstate DNAT --ctorigdstport 8080 -j MASQUERADE
-A SDN-HP-MASQ -s 10.128.0.0/14 -d 10.128.0.5/32 -p tcp -m comment --comment "ns/web s1" -m tcp --dport 80 -m conntrack --ctstate DNAT --ctorigdstport 8080 -j MASQUERADE
-A SDN-HP-MASQ -s 127.0.0.0/8 -d 10.128.0.5/32 -p udp -m comment --comment "ns/web s1" -m udp --dport 53 -m conntrack --ctstate DNAT --ctorigdstport 5353 -j MASQUERADE
-A SDN-HP-MASQ -s 10.128.0.0/14 -d 10.128.0.5/32 -p udp -m comment --comment "ns/web s1" -m udp --dport 53 -m conntrack --ctstate DNAT --ctorigdstport 5353 -j MASQUERADE
-I PREROUTING 1 -m addrtype --dst-type LOCAL -m comment --comment "sdn: hostports" -j SDN-HOSTPORTS
-I OUTPUT 1 -m addrtype --dst-type LOCAL -m comment --comment "sdn: hostports" -j SDN-HOSTPORTS
-X SDN-HP-0000000000000001
COMMIT
"#
        );
        assert_eq!(text, want);
        // Nothing wanted: the chains stay (empty), the pod chain goes.
        let empty = render(&[], &cn, &existing);
        assert!(empty.contains(&format!("-X {c}")), "{empty}");
        assert!(!empty.contains("DNAT --to"), "{empty}");
        assert!(!empty.contains("MASQUERADE"), "{empty}");
    }
}
