//! The host port rules of one family, rendered from the registry: the nat-table
//! `iptables-restore --noflush` input (IPv4 through `iptables`, IPv6 through `ip6tables`), the
//! teardown, and what CHECK finds missing. Pure: no I/O.
//!
//! The two families differ in three places only: the DNAT target (`10.128.0.5:80` against
//! `[fd01::5]:80`), the sources masqueraded (IPv4 also `127.0.0.0/8`, which `route_localnet`
//! lets the kernel route; IPv6 has no such setting, so `[::1]` is served by the agent's
//! proxy, [`super::loopback6`], and the IPv6 `OUTPUT` jump leaves `::1` alone for it), and which
//! mappings apply (a `hostIP` of the other family does not).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv6Addr};

use ipnet::IpNet;

use super::{chain_name, PodPorts, PortMapping, HOSTPORTS_CHAIN, MASQ_CHAIN, POD_CHAIN_PREFIX};

/// Which family's rules: `iptables` or `ip6tables`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// IPv4 (`iptables`).
    V4,
    /// IPv6 (`ip6tables`).
    V6,
}

impl Family {
    /// The family of `ip`.
    pub fn of(ip: IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    fn host_prefix(self) -> u8 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }

    /// `ip:port`, bracketed in IPv6.
    fn socket(ip: IpAddr, port: u16) -> String {
        match ip {
            IpAddr::V4(ip) => format!("{ip}:{port}"),
            IpAddr::V6(ip) => format!("[{ip}]:{port}"),
        }
    }
}

impl PortMapping {
    /// Whether the mapping has rules in `family`: without a `hostIP` in both, with one in its
    /// own only.
    pub fn applies_to(&self, family: Family) -> bool {
        self.host_ip.is_none_or(|h| Family::of(h) == family)
    }

    /// The `-d` of its DNAT: its `hostIP` unless that is every address of its family.
    fn dst(&self) -> Option<IpAddr> {
        self.host_ip.filter(|h| !h.is_unspecified())
    }

    /// Whether its DNAT can work at all in `family`: an IPv6 `hostIP` of `::1` cannot (the
    /// kernel routes no packet from `::1` off the node), the proxy serves it.
    fn natted(&self, family: Family) -> bool {
        self.applies_to(family) && self.dst() != Some(IpAddr::V6(Ipv6Addr::LOCALHOST))
    }
}

impl PodPorts {
    /// The pod's address in `family`.
    pub fn ip_of(&self, family: Family) -> Option<IpAddr> {
        match family {
            Family::V4 => self.ip.map(IpAddr::V4),
            Family::V6 => self.ip6.map(IpAddr::V6),
        }
    }
}

/// A jump from a built-in nat chain into ours: (chain, match, target).
fn jumps(family: Family) -> [(&'static str, &'static str, &'static str); 3] {
    [
        (
            "PREROUTING",
            "-m addrtype --dst-type LOCAL -m comment --comment \"sdn: hostports\"",
            HOSTPORTS_CHAIN,
        ),
        (
            "OUTPUT",
            match family {
                Family::V4 => "-m addrtype --dst-type LOCAL -m comment --comment \"sdn: hostports\"",
                // `::1` is the proxy's: a DNAT of it would be dropped.
                Family::V6 => {
                    "! -d ::1/128 -m addrtype --dst-type LOCAL -m comment --comment \"sdn: hostports\""
                }
            },
            HOSTPORTS_CHAIN,
        ),
        (
            "POSTROUTING",
            "-m comment --comment \"sdn: hostports masquerade\"",
            MASQ_CHAIN,
        ),
    ]
}

/// Renders the nat-table `iptables-restore --noflush` input of `family` making our chains hold
/// exactly the rules of `pods` (those with an address of that family): `existing` is
/// `iptables -t nat -S` (or `ip6tables`'), to add missing jumps from the built-in chains and
/// delete stale `SDN-HP-*` chains; `cluster_networks` are that family's.
pub fn render(
    pods: &[PodPorts],
    family: Family,
    cluster_networks: &[IpNet],
    existing: &[String],
) -> String {
    let mut pods: Vec<(&PodPorts, IpAddr, Vec<&PortMapping>)> = pods
        .iter()
        .filter_map(|p| {
            let ip = p.ip_of(family)?;
            let maps: Vec<&PortMapping> = p.mappings.iter().filter(|m| m.natted(family)).collect();
            (!maps.is_empty()).then_some((p, ip, maps))
        })
        .collect();
    pods.sort_by(|(a, ..), (b, ..)| (&a.sandbox, &a.ifname).cmp(&(&b.sandbox, &b.ifname)));
    let wanted: BTreeSet<String> = pods
        .iter()
        .map(|(p, ..)| chain_name(&p.sandbox, &p.ifname))
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
    let prefix = family.host_prefix();
    for (p, ip, maps) in &pods {
        let chain = chain_name(&p.sandbox, &p.ifname);
        let comment = p.comment();
        let _ = writeln!(
            out,
            "-A {HOSTPORTS_CHAIN} -m comment --comment \"{comment}\" -j {chain}"
        );
        for m in maps {
            let dst = m
                .dst()
                .map(|h| format!(" -d {h}/{prefix}"))
                .unwrap_or_default();
            let proto = m.protocol;
            let _ = writeln!(
                out,
                "-A {chain}{dst} -p {proto} -m comment --comment \"{comment}\" -m {proto} --dport {} -j DNAT --to-destination {}",
                m.host_port,
                Family::socket(*ip, m.container_port)
            );
        }
    }
    // Masquerade only connections DNATed by a host port (matched by the pod's address and port
    // and the original destination port): pod to Service traffic DNATed by kube-proxy keeps its
    // source, which table 25 needs for the source pod's VNID.
    let localhost = (family == Family::V4).then(|| "127.0.0.0/8".to_string());
    let sources: Vec<String> = localhost
        .into_iter()
        .chain(cluster_networks.iter().map(ToString::to_string))
        .collect();
    for (p, ip, maps) in &pods {
        let comment = p.comment();
        for m in maps {
            let proto = m.protocol;
            for src in &sources {
                let _ = writeln!(
                    out,
                    "-A {MASQ_CHAIN} -s {src} -d {ip}/{prefix} -p {proto} -m comment --comment \"{comment}\" -m {proto} --dport {} -m conntrack --ctstate DNAT --ctorigdstport {} -j MASQUERADE",
                    m.container_port, m.host_port
                );
            }
        }
    }
    for (from, spec, to) in jumps(family) {
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
/// `iptables -t nat -S` (either family's). `None` when none of ours exists.
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

/// The nat rules of `family` that `pod` needs and `existing` (`iptables -t nat -S`, or
/// `ip6tables`') lacks, as readable descriptions (empty: all there). For CNI CHECK.
pub fn missing_rules(pod: &PodPorts, family: Family, existing: &[String]) -> Vec<String> {
    let Some(ip) = pod.ip_of(family) else {
        return Vec::new();
    };
    let maps: Vec<&PortMapping> = pod.mappings.iter().filter(|m| m.natted(family)).collect();
    let mut missing = Vec::new();
    if maps.is_empty() {
        return missing;
    }
    let chain = chain_name(&pod.sandbox, &pod.ifname);
    let has = |pred: &dyn Fn(&[&str]) -> bool| {
        existing.iter().any(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            pred(&t)
        })
    };
    let pair = |t: &[&str], a: &str, b: &str| t.windows(2).any(|w| w[0] == a && w[1] == b);
    let tool = match family {
        Family::V4 => "",
        Family::V6 => " (ip6tables)",
    };
    if !has(&|t| t.len() > 1 && t[0] == "-A" && t[1] == HOSTPORTS_CHAIN && pair(t, "-j", &chain)) {
        missing.push(format!("the jump from {HOSTPORTS_CHAIN} to {chain}{tool}"));
    }
    for (from, _, to) in jumps(family) {
        if !has(&|t| t.len() > 1 && t[0] == "-A" && t[1] == from && pair(t, "-j", to)) {
            missing.push(format!("the jump from {from} to {to}{tool}"));
        }
    }
    let prefix = family.host_prefix();
    for m in maps {
        let dst = Family::socket(ip, m.container_port);
        let port = m.host_port.to_string();
        if !has(&|t| {
            t.len() > 1
                && t[0] == "-A"
                && t[1] == chain
                && pair(t, "-p", m.protocol.as_str())
                && pair(t, "--dport", &port)
                && pair(t, "--to-destination", &dst)
                && m.dst()
                    .is_none_or(|h| pair(t, "-d", &format!("{h}/{prefix}")))
        }) {
            missing.push(format!("the DNAT of {m} to {dst} in {chain}{tool}"));
        }
    }
    missing
}
