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
//! Dual stack: a pod with an IPv6 address gets the same rules in `ip6tables` ([`rules`] renders
//! either family), and `[::1]:hostPort` is served by the agent's proxy ([`loopback6`]: IPv6 has
//! no `route_localnet`, a DNAT of `::1` is dropped). A mapping without `hostIP` is published in
//! both families; `hostIP` `0.0.0.0` means every IPv4 address of the node, `::` every IPv6
//! one, and any other address that address only (as the CNI `portmap` plugin reads them). An
//! IPv6 `hostIP` on a node without an IPv6 network is refused.
//!
//! Limits: a sync is O(pods with host ports) lines; the rules do not check that hostIP is actually an
//! address of the node, nor that a node process already listens on hostPort (the DNAT wins);
//! conntrack entries of a previous holder of a UDP host port are not flushed (a client that
//! keeps sending keeps reaching the old address until its entry expires). A kube-proxy Service
//! DNAT whose port equals a host port of the same pod and container port is masqueraded too
//! (harmless: that pod port is published on the node anyway).

use crate::lock;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV6};

use ipnet::IpNet;
use serde_json::Value;

pub mod loopback6;
pub mod rules;

use rules::Family;

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
    /// Only this node address (`None`: every node address of both families; `0.0.0.0` or
    /// `::`: every one of that family).
    pub host_ip: Option<IpAddr>,
}

impl PortMapping {
    /// Whether two mappings want the same node socket: same port and protocol, and either on
    /// every address, or in the same family the same address or either on all of them.
    pub fn conflicts_with(&self, other: &PortMapping) -> bool {
        self.host_port == other.host_port
            && self.protocol == other.protocol
            && match (self.host_ip, other.host_ip) {
                (None, _) | (_, None) => true,
                (Some(a), Some(b)) => {
                    Family::of(a) == Family::of(b)
                        && (a.is_unspecified() || b.is_unspecified() || a == b)
                }
            }
    }
}

impl std::fmt::Display for PortMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.host_ip {
            None => write!(f, "*:"),
            Some(IpAddr::V6(ip)) => write!(f, "[{ip}]:"),
            Some(IpAddr::V4(ip)) => write!(f, "{ip}:"),
        }?;
        write!(
            f,
            "{}/{} -> {}",
            self.host_port, self.protocol, self.container_port
        )
    }
}

fn bad(msg: String, details: &str) -> CniError {
    CniError::new(codes::INVALID_ENV, msg, details.to_string())
}

const SHAPE: &str = "each entry needs hostPort and containerPort (1..=65535), optional protocol \
                     (tcp, udp, sctp; default tcp) and hostIP (a node address; empty for every \
                     address, 0.0.0.0 or :: for every one of that family); camelCase (podman) or capitalised (containerd) keys";

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
            Some(s) => match s.parse::<IpAddr>() {
                Ok(ip) => Some(ip),
                Err(_) => return Err(format!("hostIP {v} is not an IP address")),
            },
            None => return Err(format!("hostIP {v} is not an IP address")),
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
    /// Its IPv6 address on a dual-stack node (its `ip6tables` rules and `[::1]` relays).
    pub ip6: Option<Ipv6Addr>,
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

/// Removes every host port rule of ours, both families (node teardown, `sdn-agent
/// remove-host-rules`). Idempotent: without our chains it runs nothing; a node without
/// `ip6tables` has no IPv6 rules to remove.
pub async fn remove_all(iptables: &impl NatRules) -> Result<(), IptablesError> {
    remove_family(iptables).await?;
    let six = iptables.six();
    match six.list("nat").await {
        Ok(_) => remove_family(&six).await,
        Err(e) => {
            tracing::debug!(error = %e, "no IPv6 host port rules to remove");
            Ok(())
        }
    }
}

async fn remove_family(iptables: &impl NatRules) -> Result<(), IptablesError> {
    match rules::render_removal(&iptables.list("nat").await?) {
        Some(input) => iptables.restore(&input).await,
        None => Ok(()),
    }
}

type Key = (String, String);

/// The IPv6 side of a dual-stack node's host ports.
#[derive(Debug)]
struct Ipv6Side<N> {
    ip6tables: N,
    cluster_networks: Vec<IpNet>,
    /// The `[::1]` relays (`None` with a fake NAT: unit tests bind no real sockets).
    loopback: Option<loopback6::Loopback6>,
}

/// The node's host ports: who holds which, and the rules made from that (applied through any
/// [`NatRules`], the real iptables or the fake; on a dual-stack node also through its IPv6
/// twin, with the `[::1]` relays).
#[derive(Debug)]
pub struct HostPorts<N: NatRules = Iptables> {
    iptables: N,
    cluster_networks: Vec<IpNet>,
    ipv6: Option<Ipv6Side<N>>,
    taken: std::sync::Mutex<BTreeMap<Key, PodPorts>>,
    /// Serialises syncs (a sync reads the registry and writes the whole rule set).
    sync_lock: tokio::sync::Mutex<()>,
}

impl<N: NatRules> HostPorts<N> {
    /// An empty registry applying rules through `iptables`; on a dual-stack node
    /// (`cluster_networks6` not empty) also through its IPv6 twin.
    pub fn new(
        iptables: N,
        cluster_networks: &[ipnet::Ipv4Net],
        cluster_networks6: &[ipnet::Ipv6Net],
    ) -> HostPorts<N> {
        let ipv6 = (!cluster_networks6.is_empty()).then(|| Ipv6Side {
            ip6tables: iptables.six(),
            cluster_networks: cluster_networks6.iter().map(|n| IpNet::V6(*n)).collect(),
            loopback: iptables
                .proxies_loopback6()
                .then(loopback6::Loopback6::default),
        });
        HostPorts {
            cluster_networks: cluster_networks.iter().map(|n| IpNet::V4(*n)).collect(),
            iptables,
            ipv6,
            taken: std::sync::Mutex::default(),
            sync_lock: tokio::sync::Mutex::const_new(()),
        }
    }

    /// Reserves `pod`'s mappings (with or without its address yet). Fails, reserving nothing,
    /// when one is taken by another attachment (the error names the holder), or asks for an
    /// IPv6 `hostIP` on a node without IPv6.
    pub fn reserve(&self, pod: PodPorts) -> Result<(), CniError> {
        if self.ipv6.is_none() {
            if let Some(m) = pod
                .mappings
                .iter()
                .find(|m| m.host_ip.is_some_and(|h| h.is_ipv6()))
            {
                return Err(CniError::new(
                    codes::INVALID_ENV,
                    format!("host port {m}: hostIP is IPv6 and this node has no IPv6 network"),
                    "give an IPv4 hostIP (or none), or add an IPv6 entry to clusterNetworks",
                ));
            }
        }
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

    /// Sets the addresses of a reserved attachment (after its leases).
    pub fn set_ip(&self, sandbox: &str, ifname: &str, ip: Option<Ipv4Addr>, ip6: Option<Ipv6Addr>) {
        if let Some(p) = lock(&self.taken).get_mut(&(sandbox.to_string(), ifname.to_string())) {
            p.ip = ip;
            p.ip6 = ip6;
        }
    }

    /// The mappings reserved for an attachment.
    pub fn mappings(&self, sandbox: &str, ifname: &str) -> Vec<PortMapping> {
        lock(&self.taken)
            .get(&(sandbox.to_string(), ifname.to_string()))
            .map(|p| p.mappings.clone())
            .unwrap_or_default()
    }

    /// CNI CHECK: the attachment's rules (both families') and `[::1]` relays are all in place;
    /// the error lists what is missing.
    pub async fn check(&self, sandbox: &str, ifname: &str) -> Result<(), String> {
        let pod = lock(&self.taken)
            .get(&(sandbox.to_string(), ifname.to_string()))
            .cloned();
        let Some(pod) = pod else { return Ok(()) };
        let existing = self.iptables.list("nat").await.map_err(|e| e.to_string())?;
        let mut missing = rules::missing_rules(&pod, Family::V4, &existing);
        if let Some(v6) = &self.ipv6 {
            let existing = v6.ip6tables.list("nat").await.map_err(|e| e.to_string())?;
            missing.extend(rules::missing_rules(&pod, Family::V6, &existing));
            if let Some(lo) = &v6.loopback {
                missing.extend(
                    loopback_wanted(std::slice::from_ref(&pod))
                        .into_iter()
                        .filter_map(|((port, proto), to)| lo.problem(port, proto, to)),
                );
            }
        }
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

    /// Makes the nat rules exactly the registry's, one restore per family (dry run first), and
    /// the `[::1]` relays with them. Removes stale `SDN-HP-*` chains.
    pub async fn sync(&self) -> Result<(), IptablesError> {
        let _serial = self.sync_lock.lock().await;
        let pods: Vec<PodPorts> = lock(&self.taken).values().cloned().collect();
        let existing = self.iptables.list("nat").await?;
        let input = rules::render(&pods, Family::V4, &self.cluster_networks, &existing);
        self.iptables.restore(&input).await?;
        if let Some(v6) = &self.ipv6 {
            let existing = v6.ip6tables.list("nat").await?;
            let input = rules::render(&pods, Family::V6, &v6.cluster_networks, &existing);
            v6.ip6tables.restore(&input).await?;
            if let Some(lo) = &v6.loopback {
                lo.sync(&loopback_wanted(&pods)).await;
            }
        }
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

/// The `[::1]` relays `pods` need: each mapping published on `::1` (no `hostIP`, `::` or `::1`)
/// of a pod with an IPv6 address, to its IPv6 address and container port.
fn loopback_wanted(pods: &[PodPorts]) -> BTreeMap<(u16, Protocol), SocketAddrV6> {
    let mut wanted = BTreeMap::new();
    for p in pods {
        let Some(ip6) = p.ip6 else { continue };
        for m in &p.mappings {
            let on_loopback = match m.host_ip {
                None => true,
                Some(IpAddr::V6(h)) => h.is_unspecified() || h == Ipv6Addr::LOCALHOST,
                Some(IpAddr::V4(_)) => false,
            };
            if on_loopback {
                wanted.insert(
                    (m.host_port, m.protocol),
                    SocketAddrV6::new(ip6, m.container_port, 0, 0),
                );
            }
        }
    }
    wanted
}

#[cfg(test)]
mod tests {
    use super::rules::{missing_rules, render, render_removal};
    use super::*;
    use ipnet::Ipv4Net;
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
                m(9000, 9000, Protocol::Sctp, Some("0.0.0.0")),
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
                json!({"hostPort": 80, "containerPort": 80, "hostIP": "::1x"}),
                "hostIP \"::1x\" is not an IP address",
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
            ip6: None,
            mappings: maps,
        }
    }

    #[test]
    fn registry_refuses_taken_ports_naming_the_holder() {
        let hp = HostPorts::new(Iptables::host(), &[], &[]);
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
        hp.set_ip("s2", "eth0", Some("10.128.0.9".parse().unwrap()), None);
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
        let cn: Vec<IpNet> = vec![IpNet::V4("10.128.0.0/14".parse::<Ipv4Net>().unwrap())];
        // What iptables -S prints back for the rendered input.
        let all: Vec<String> = render(std::slice::from_ref(&web), Family::V4, &cn, &[])
            .lines()
            .filter(|l| l.starts_with("-A ") || l.starts_with("-I "))
            .map(|l| {
                let l = l.replacen(" 1 -m", " -m", 1);
                l.replacen("-I ", "-A ", 1)
            })
            .collect();
        assert_eq!(missing_rules(&web, Family::V4, &all), Vec::<String>::new());
        let without_udp: Vec<String> = all
            .iter()
            .filter(|l| !l.contains("-p udp"))
            .cloned()
            .collect();
        let missing = missing_rules(&web, Family::V4, &without_udp);
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert!(missing[0].contains("5353/udp") && missing[0].contains("10.128.0.5:53"));
        assert_eq!(missing_rules(&web, Family::V4, &[]).len(), 6);
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
        let cn: Vec<IpNet> = vec![IpNet::V4("10.128.0.0/14".parse::<Ipv4Net>().unwrap())];
        let text = render(&[pending, web], Family::V4, &cn, &existing);
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
        let empty = render(&[], Family::V4, &cn, &existing);
        assert!(empty.contains(&format!("-X {c}")), "{empty}");
        assert!(!empty.contains("DNAT --to"), "{empty}");
        assert!(!empty.contains("MASQUERADE"), "{empty}");
    }

    #[test]
    fn families_conflict_only_where_they_share_an_address() {
        let any = m(80, 1, Protocol::Tcp, None);
        let all4 = m(80, 2, Protocol::Tcp, Some("0.0.0.0"));
        let all6 = m(80, 3, Protocol::Tcp, Some("::"));
        let one6 = m(80, 4, Protocol::Tcp, Some("fd00::5"));
        assert!(any.conflicts_with(&all6) && all6.conflicts_with(&any));
        assert!(
            !all4.conflicts_with(&all6),
            "IPv4 and IPv6 wildcards are different sockets"
        );
        assert!(all6.conflicts_with(&one6) && !all4.conflicts_with(&one6));
        assert!(!one6.conflicts_with(&m(80, 5, Protocol::Tcp, Some("fd00::6"))));
        assert_eq!(one6.to_string(), "[fd00::5]:80/tcp -> 4");
        assert_eq!(any.to_string(), "*:80/tcp -> 1");
    }

    #[test]
    fn an_ipv6_host_ip_needs_an_ipv6_network() {
        let v4 = HostPorts::new(Iptables::host(), &[], &[]);
        let e = v4
            .reserve(pod(
                "s1",
                "w",
                None,
                vec![m(80, 80, Protocol::Tcp, Some("::"))],
            ))
            .unwrap_err();
        assert!(e.msg.contains("no IPv6 network"), "{}", e.msg);
        let dual = HostPorts::new(Iptables::host(), &[], &["fd01::/48".parse().unwrap()]);
        dual.reserve(pod(
            "s1",
            "w",
            None,
            vec![m(80, 80, Protocol::Tcp, Some("::"))],
        ))
        .unwrap();
    }

    #[test]
    fn renders_ipv6_rules_leaving_loopback_to_the_proxy() {
        let mut web = pod(
            "s1",
            "web",
            Some("10.128.0.5"),
            vec![
                m(8080, 80, Protocol::Tcp, None),
                m(5353, 53, Protocol::Udp, Some("fd00::9")),
                m(7070, 70, Protocol::Tcp, Some("10.0.0.1")),
                m(6060, 60, Protocol::Tcp, Some("::1")),
            ],
        );
        web.ip6 = Some("fd01:0:0:5::5".parse().unwrap());
        let c = chain_name("s1", "eth0");
        let cn6 = vec![IpNet::V6("fd01::/48".parse().unwrap())];
        let text = render(std::slice::from_ref(&web), Family::V6, &cn6, &[]);
        let want = format!(
            r#"*nat
:SDN-HOSTPORTS - [0:0]
:SDN-HP-MASQ - [0:0]
:{c} - [0:0]
-A SDN-HOSTPORTS -m comment --comment "ns/web s1" -j {c}
-A {c} -p tcp -m comment --comment "ns/web s1" -m tcp --dport 8080 -j DNAT --to-destination [fd01:0:0:5::5]:80
-A {c} -d fd00::9/128 -p udp -m comment --comment "ns/web s1" -m udp --dport 5353 -j DNAT --to-destination [fd01:0:0:5::5]:53
-A SDN-HP-MASQ -s fd01::/48 -d fd01:0:0:5::5/128 -p tcp -m comment --comment "ns/web s1" -m tcp --dport 80 -m conntrack --ctstate DNAT --ctorigdstport 8080 -j MASQUERADE
-A SDN-HP-MASQ -s fd01::/48 -d fd01:0:0:5::5/128 -p udp -m comment --comment "ns/web s1" -m udp --dport 53 -m conntrack --ctstate DNAT --ctorigdstport 5353 -j MASQUERADE
-I PREROUTING 1 -m addrtype --dst-type LOCAL -m comment --comment "sdn: hostports" -j SDN-HOSTPORTS
-I OUTPUT 1 ! -d ::1/128 -m addrtype --dst-type LOCAL -m comment --comment "sdn: hostports" -j SDN-HOSTPORTS
-I POSTROUTING 1 -m comment --comment "sdn: hostports masquerade" -j SDN-HP-MASQ
COMMIT
"#
        );
        assert_eq!(text, want);
        // The IPv4 rules leave the IPv6 hostIPs out, and keep the IPv4 one.
        let cn = vec![IpNet::V4("10.128.0.0/14".parse::<Ipv4Net>().unwrap())];
        let v4 = render(std::slice::from_ref(&web), Family::V4, &cn, &[]);
        assert!(
            v4.contains("--dport 7070") && v4.contains("--dport 8080"),
            "{v4}"
        );
        assert!(!v4.contains("5353") && !v4.contains("6060"), "{v4}");
        // CHECK's view of each family.
        let listed = |text: &str| -> Vec<String> {
            text.lines()
                .filter(|l| l.starts_with("-A ") || l.starts_with("-I "))
                .map(|l| l.replacen(" 1 ", " ", 1).replacen("-I ", "-A ", 1))
                .collect()
        };
        assert!(missing_rules(&web, Family::V6, &listed(&text)).is_empty());
        let missing = missing_rules(&web, Family::V6, &listed(&v4));
        assert!(
            missing
                .iter()
                .any(|m| m.contains("[fd01:0:0:5::5]:53") && m.contains("ip6tables")),
            "{missing:?}"
        );
        // [::1] relays: no hostIP, `::` and `::1`, to the pod's IPv6 address.
        let relays = loopback_wanted(std::slice::from_ref(&web));
        assert_eq!(
            relays.keys().copied().collect::<Vec<_>>(),
            [(6060, Protocol::Tcp), (8080, Protocol::Tcp)]
        );
        assert_eq!(
            relays[&(8080, Protocol::Tcp)].to_string(),
            "[fd01:0:0:5::5]:80"
        );
    }
}
