//! What the host rules are: our chains, the jumps into them, what they depend on
//! ([`HostRules`], [`HostRules6`]) and their exact `iptables-restore` text for each family
//! ([`render`], [`render6`]). Pure: applying them is the parent module's.

use std::fmt::Write as _;

use ipnet::{Ipv4Net, Ipv6Net};

/// The nat chain for masquerading, jumped to from `POSTROUTING`.
pub const POSTROUTING_CHAIN: &str = "SDN-POSTROUTING";
/// The filter chain for traffic to this node, jumped to from `INPUT`.
pub const INPUT_CHAIN: &str = "SDN-INPUT";
/// The filter chain for forwarded pod traffic, jumped to from `FORWARD`.
pub const FORWARD_CHAIN: &str = "SDN-FORWARD";
/// The mangle chain marking egress IP traffic, jumped to from `PREROUTING`.
pub const PREROUTING_CHAIN: &str = "SDN-PREROUTING";

/// A jump from a built-in chain into one of ours.
#[derive(Debug, Clone, Copy)]
pub(super) struct Jump {
    pub(super) table: &'static str,
    pub(super) from: &'static str,
    pub(super) to: &'static str,
    pub(super) comment: &'static str,
}

/// Our chains, by table, with the jumps into them; tables in the order they are restored.
pub(super) const JUMPS: [Jump; 4] = [
    Jump {
        table: "mangle",
        from: "PREROUTING",
        to: PREROUTING_CHAIN,
        comment: "sdn: mark egress IP traffic from tun0",
    },
    Jump {
        table: "nat",
        from: "POSTROUTING",
        to: POSTROUTING_CHAIN,
        comment: "sdn: masquerade pod traffic leaving the cluster",
    },
    Jump {
        table: "filter",
        from: "INPUT",
        to: INPUT_CHAIN,
        comment: "sdn: vxlan and pod traffic to this node",
    },
    Jump {
        table: "filter",
        from: "FORWARD",
        to: FORWARD_CHAIN,
        comment: "sdn: forward pod traffic",
    },
];

pub(super) const TABLES: [&str; 3] = ["mangle", "nat", "filter"];

/// What the host rules depend on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRules {
    /// The IPv4 cluster networks (pod addresses of every node; none on an IPv6-only cluster).
    pub cluster_networks: Vec<Ipv4Net>,
    /// The IPv4 service network (none on an IPv6-only cluster).
    pub service_cidr: Option<Ipv4Net>,
    /// The VXLAN UDP port other nodes send to.
    pub vxlan_port: u16,
    /// The underlay is IPv6 (an IPv6-only cluster): VXLAN from other nodes is accepted by
    /// `ip6tables`, not `iptables`.
    pub underlay_ipv6: bool,
    /// The egress IPs this node holds (see [`EgressIpRule`]).
    pub egress_ips: Vec<EgressIpRule>,
    /// A dual-stack node's IPv6 rules.
    pub ipv6: Option<HostRules6>,
}

/// What a dual-stack node's IPv6 rules depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostRules6 {
    /// The cluster's IPv6 network.
    pub cluster_network: Ipv6Net,
    /// The IPv6 service network, if any.
    pub service_cidr: Option<Ipv6Net>,
}

/// One egress IP held by this node: traffic of its tenant arrives from tun0 with the tenant's
/// mark MAC as source (`flows::egress_mark_mac`); `mangle` marks it, `nat` SNATs the mark to the
/// IP (before the masquerade of other pod traffic), and `filter` rejects new connections *to*
/// the IP (it is a source address only, as in openshift-sdn).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressIpRule {
    /// The egress IP (an IPv6 one goes to `ip6tables`).
    pub ip: std::net::IpAddr,
    /// The tenant's packet mark (`flows::egress_mark`).
    pub mark: u32,
    /// The tenant's mark MAC (`flows::egress_mark_mac`).
    pub mac: [u8; 6],
    /// The tenant's VNID (for the rules' comments).
    pub vnid: u32,
}

/// Renders the complete content of our chains as `iptables-restore` input: per table, the chain
/// declarations (which flush them under `--noflush`) and the rules, in the exact form
/// `iptables-save` prints them back. Pure; the jumps from the built-in chains are not included
/// ([`Iptables::sync`] adds them only when missing).
pub fn render(rules: &HostRules) -> String {
    render_with(rules, &[])
}

/// [`render`] plus extra lines appended to a table's block before its `COMMIT`.
pub(super) fn render_with(rules: &HostRules, extra: &[(&str, String)]) -> String {
    let comment = |c: &str| format!("-m comment --comment \"sdn: {c}\"");
    let mut out = String::new();
    for table in TABLES {
        out.push_str(&format!("*{table}\n"));
        for j in JUMPS.iter().filter(|j| j.table == table) {
            out.push_str(&format!(":{} - [0:0]\n", j.to));
        }
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        match table {
            "mangle" => {
                for e in rules.egress_ips.iter().filter(|e| e.ip.is_ipv4()) {
                    let m = e.mac;
                    line(format!(
                        "-A {PREROUTING_CHAIN} -i tun0 -m mac --mac-source {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x} {} -j MARK --set-xmark {:#x}/0xffffffff",
                        m[0], m[1], m[2], m[3], m[4], m[5],
                        comment(&format!("egress IP {} of VNID {}", e.ip, e.vnid)),
                        e.mark
                    ));
                }
            }
            "nat" => {
                let chain = POSTROUTING_CHAIN;
                for cn in &rules.cluster_networks {
                    line(format!(
                        "-A {chain} -d {cn} {} -j RETURN",
                        comment("traffic to the cluster network keeps its source")
                    ));
                }
                if let Some(svc) = rules.service_cidr {
                    line(format!(
                        "-A {chain} -d {svc} {} -j RETURN",
                        comment("traffic to services keeps its source")
                    ));
                }
                for e in rules.egress_ips.iter().filter(|e| e.ip.is_ipv4()) {
                    for cn in &rules.cluster_networks {
                        line(format!(
                            "-A {chain} -s {cn} -m mark --mark {:#x} {} -j SNAT --to-source {}",
                            e.mark,
                            comment(&format!("egress IP {} of VNID {}", e.ip, e.vnid)),
                            e.ip
                        ));
                    }
                }
                for cn in &rules.cluster_networks {
                    line(format!(
                        "-A {chain} -s {cn} ! -d {cn} {} -j MASQUERADE",
                        comment("masquerade pod traffic leaving the cluster network")
                    ));
                }
            }
            _ => {
                for e in rules.egress_ips.iter().filter(|e| e.ip.is_ipv4()) {
                    line(format!(
                        "-A {INPUT_CHAIN} -d {}/32 -m conntrack --ctstate NEW {} -j REJECT --reject-with icmp-port-unreachable",
                        e.ip,
                        comment("egress IPs are source addresses only")
                    ));
                }
                if !rules.underlay_ipv6 {
                    line(format!(
                        "-A {INPUT_CHAIN} -p udp -m udp --dport {} {} -j ACCEPT",
                        rules.vxlan_port,
                        comment("vxlan from other nodes")
                    ));
                }
                for cn in &rules.cluster_networks {
                    line(format!(
                        "-A {INPUT_CHAIN} -s {cn} {} -j ACCEPT",
                        comment("pods reach this node")
                    ));
                }
                for cn in &rules.cluster_networks {
                    line(format!(
                        "-A {FORWARD_CHAIN} -s {cn} -m conntrack --ctstate INVALID {} -j DROP",
                        comment("invalid packets from pods")
                    ));
                }
                for cn in &rules.cluster_networks {
                    line(format!(
                        "-A {FORWARD_CHAIN} -s {cn} {} -j ACCEPT",
                        comment("forward traffic from pods")
                    ));
                    line(format!(
                        "-A {FORWARD_CHAIN} -d {cn} {} -j ACCEPT",
                        comment("forward traffic to pods")
                    ));
                }
            }
        }
        for (t, l) in extra {
            if *t == table {
                line(l.clone());
            }
        }
        out.push_str("COMMIT\n");
    }
    out
}

/// The IPv6 twin of [`render`] (`ip6tables-restore` input) for a dual-stack node, with its
/// IPv6 egress IPs (the IPv4 ones of `egress` are [`render`]'s).
pub fn render6(v6: &HostRules6, egress: &[EgressIpRule], vxlan: Option<u16>) -> String {
    render6_with(v6, egress, vxlan, &[])
}

pub(super) fn render6_with(
    v6: &HostRules6,
    egress: &[EgressIpRule],
    vxlan: Option<u16>,
    extra: &[(&str, String)],
) -> String {
    let cn = v6.cluster_network;
    let (mangle, nat, filter) = ("mangle", "nat", "filter");
    let egress: Vec<&EgressIpRule> = egress.iter().filter(|e| e.ip.is_ipv6()).collect();
    let of = |e: &EgressIpRule| format!("egress IP {} of VNID {}", e.ip, e.vnid);
    // (table, chain and match, comment, target)
    let mut rules: Vec<(&str, String, String, String)> = Vec::new();
    for e in &egress {
        let m = e.mac;
        rules.push((
            mangle,
            format!(
                "{PREROUTING_CHAIN} -i tun0 -m mac --mac-source {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                m[0], m[1], m[2], m[3], m[4], m[5]
            ),
            of(e),
            format!("MARK --set-xmark {:#x}/0xffffffff", e.mark),
        ));
    }
    let mut add = |t: &'static str, spec: String, c: &str, target: &str| {
        rules.push((t, spec, c.to_string(), target.to_string()));
    };
    add(
        nat,
        format!("{POSTROUTING_CHAIN} -d {cn}"),
        "traffic to the cluster network keeps its source",
        "RETURN",
    );
    if let Some(svc) = v6.service_cidr {
        let m = format!("{POSTROUTING_CHAIN} -d {svc}");
        add(nat, m, "traffic to services keeps its source", "RETURN");
    }
    for e in &egress {
        rules.push((
            nat,
            format!("{POSTROUTING_CHAIN} -s {cn} -m mark --mark {:#x}", e.mark),
            of(e),
            format!("SNAT --to-source {}", e.ip),
        ));
    }
    for e in &egress {
        rules.push((
            filter,
            format!("{INPUT_CHAIN} -d {}/128 -m conntrack --ctstate NEW", e.ip),
            "egress IPs are source addresses only".into(),
            "REJECT --reject-with icmp6-port-unreachable".into(),
        ));
    }
    // VXLAN over an IPv6 underlay (an IPv6-only cluster).
    if let Some(port) = vxlan {
        rules.push((
            filter,
            format!("{INPUT_CHAIN} -p udp -m udp --dport {port}"),
            "vxlan from other nodes".into(),
            "ACCEPT".into(),
        ));
    }
    let (leaving, only_tun0) = (
        "masquerade pod traffic leaving the cluster network",
        "pod addresses come only from tun0",
    );
    let mut add = |t: &'static str, spec: String, c: &str, target: &str| {
        rules.push((t, spec, c.to_string(), target.to_string()));
    };
    add(
        nat,
        format!("{POSTROUTING_CHAIN} -s {cn} ! -d {cn}"),
        leaving,
        "MASQUERADE",
    );
    add(
        filter,
        format!("{INPUT_CHAIN} -s {cn} -i tun0"),
        "pods reach this node",
        "ACCEPT",
    );
    add(filter, format!("{INPUT_CHAIN} -s {cn}"), only_tun0, "DROP");
    add(
        filter,
        format!("{FORWARD_CHAIN} -s {cn} ! -i tun0"),
        only_tun0,
        "DROP",
    );
    add(
        filter,
        format!("{FORWARD_CHAIN} -s {cn} -m conntrack --ctstate INVALID"),
        "invalid packets from pods",
        "DROP",
    );
    add(
        filter,
        format!("{FORWARD_CHAIN} -s {cn}"),
        "forward traffic from pods",
        "ACCEPT",
    );
    add(
        filter,
        format!("{FORWARD_CHAIN} -d {cn}"),
        "forward traffic to pods",
        "ACCEPT",
    );
    let mut out = String::new();
    for table in TABLES {
        let _ = writeln!(out, "*{table}");
        for j in JUMPS.iter().filter(|j| j.table == table) {
            let _ = writeln!(out, ":{} - [0:0]", j.to);
        }
        for (_, spec, c, target) in rules.iter().filter(|r| r.0 == table) {
            let _ = writeln!(
                out,
                "-A {spec} -m comment --comment \"sdn: {c}\" -j {target}"
            );
        }
        for (_, l) in extra.iter().filter(|(t, _)| *t == table) {
            let _ = writeln!(out, "{l}");
        }
        out.push_str("COMMIT\n");
    }
    out
}

/// The jump rule text (without `-A`/`-I`/`-D` and chain).
pub(super) fn jump_spec(j: &Jump) -> String {
    format!("-m comment --comment \"{}\" -j {}", j.comment, j.to)
}

/// Whether an `iptables -S` line is a rule in `chain` whose target is `target`.
pub(super) fn is_rule_to(line: &str, chain: &str, target: &str) -> bool {
    let mut tokens = line.split_whitespace();
    if tokens.next() != Some("-A") || tokens.next() != Some(chain) {
        return false;
    }
    let tokens: Vec<&str> = tokens.collect();
    tokens
        .windows(2)
        .any(|w| (w[0] == "-j" || w[0] == "-g") && w[1] == target)
}
