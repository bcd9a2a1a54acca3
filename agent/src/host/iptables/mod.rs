//! The node's host firewall and NAT rules, applied with `iptables-restore --noflush` into chains
//! the agent owns, so that everything else in the host's tables stays untouched.
//!
//! What the rules do (see [`render`] for the exact text):
//! - `nat` / `SDN-POSTROUTING` (jumped to from `POSTROUTING`): traffic to a cluster network or the
//!   service network keeps its source (`RETURN`); traffic from a cluster network to anywhere
//!   else is masqueraded, so pods reach the outside world with the node's address. Pod to
//!   Service traffic is deliberately not masqueraded: the pipeline (table 25, and the `ct(nat)`
//!   replies of table 31) relies on it keeping the pod's source, as in openshift-sdn.
//! - `filter` / `SDN-INPUT` (from `INPUT`): accept VXLAN from other nodes and traffic from pods to
//!   this node (DNS to the node IP, the gateway).
//! - `filter` / `SDN-FORWARD` (from `FORWARD`): drop conntrack-INVALID packets from pods (a
//!   resend after a service connection closed would otherwise leave un-NATed), then accept
//!   traffic from and to the cluster networks, so a host whose FORWARD policy is DROP still
//!   forwards pod traffic.
//!
//! How: every sync writes the whole content of the three chains in one `iptables-restore
//! --noflush` input. Declaring `:CHAIN - [0:0]` creates the chain or flushes it, and the rules
//! follow in the same transaction, so readers see the old rules or the new ones, never an empty
//! chain. The jumps from the built-in chains are inserted (at position 1, ahead of any REJECT of
//! the host's) only when `iptables -S` shows them missing, and surplus copies are deleted, so
//! there is exactly one of each. The input is first checked with `iptables-restore --test`, so a
//! bad input changes nothing.
//!
//! Dual stack: a node with an IPv6 subnet gets the IPv6 twins of these chains through
//! `ip6tables-restore` ([`render6`]): the cluster's IPv6 network and the IPv6 service network
//! keep their source, pod IPv6 leaving the cluster is masqueraded, and forwarded or delivered
//! IPv6 from the cluster network is accepted only from tun0 (IPv6 has no `rp_filter`: a pod
//! veth whose IPv6 is on, as an adopted openshift-sdn pod's is, must not be a way in with a
//! forged cluster source). Egress IPs are IPv4, so the IPv6 `mangle` chain stays empty.
//!
//! The parts: `rules` (the chains, what the rules depend on, their exact text per family:
//! pure) and here running `iptables`/`ip6tables` to apply, list and remove them.
//!
//! Limits: iptables-restore commits table by table (`COMMIT`), in both the nft and the legacy
//! backend; a kernel-level failure in the second table (after the test pass) leaves the first
//! updated and is returned as an error; the next sync converges. The binaries are
//! `iptables` and `iptables-restore` from PATH (on Debian 12 the nft backend); both must be of the
//! same backend. Syncs within this process are serialised; other programs editing the same
//! built-in chains concurrently are not coordinated with (the nft backend has no lock).

use std::fmt::Write as _;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

mod rules;
use rules::{is_rule_to, jump_spec, render6_with, render_with, JUMPS, TABLES};
pub use rules::{
    render, render6, EgressIpRule, HostRules, HostRules6, FORWARD_CHAIN, INPUT_CHAIN,
    POSTROUTING_CHAIN, PREROUTING_CHAIN,
};

/// How long one iptables command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Errors of applying or reading the rules; each names the command and, with `netns`, where.
#[derive(Debug, thiserror::Error)]
pub enum IptablesError {
    /// The binary could not be started.
    #[error(
        "cannot run {cmd}{}: {source} (is iptables installed and on PATH?)",
        at(netns)
    )]
    Spawn {
        /// The command.
        cmd: String,
        /// The network namespace, when not the agent's own.
        netns: Option<String>,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The command did not finish in time (it was killed).
    #[error("{cmd}{} did not finish within {} s and was killed", at(netns), timeout.as_secs())]
    Timeout {
        /// The command.
        cmd: String,
        /// The network namespace.
        netns: Option<String>,
        /// The bound.
        timeout: Duration,
    },
    /// A command (`iptables -S`, `iptables-save`) failed.
    #[error("{cmd}{} failed ({status}): {stderr}", at(netns))]
    Command {
        /// The command line.
        cmd: String,
        /// The network namespace.
        netns: Option<String>,
        /// The exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// iptables-restore rejected the input.
    #[error("iptables-restore{}{} rejected line {} `{}`: {stderr}", if *test { " --test" } else { "" }, at(netns), line.map(|l| l.to_string()).unwrap_or_else(|| "?".into()), text.as_deref().unwrap_or(""))]
    Restore {
        /// The network namespace.
        netns: Option<String>,
        /// Whether the dry run (`--test`) rejected it (then nothing was changed).
        test: bool,
        /// The 1-based input line iptables-restore named, when it named one.
        line: Option<usize>,
        /// That line of the input.
        text: Option<String>,
        /// iptables-restore's message (its usage hint removed).
        stderr: String,
    },
}

fn at(netns: &Option<String>) -> String {
    netns
        .as_ref()
        .map(|n| format!(" in netns {n}"))
        .unwrap_or_default()
}

/// Finds the input line number in iptables-restore's stderr: "Error occurred at line: 8"
/// (nft), "line 3 failed" (legacy and `-D`).
fn error_line(stderr: &str) -> Option<usize> {
    stderr.match_indices("line").find_map(|(i, m)| {
        let rest = stderr[i + m.len()..].trim_start_matches([':', ' ']);
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

/// iptables-restore's message without its usage hint.
fn clean_stderr(stderr: &str) -> String {
    stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Try `"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Serialises syncs and removals within this process.
static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Where the rules are applied: the agent's own network namespace, or a named one (tests, and
/// agents driving a node namespace), entered with `ip netns exec`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Iptables {
    netns: Option<String>,
    /// IPv6: `ip6tables`, `ip6tables-restore`, `ip6tables-save`.
    v6: bool,
}

impl Iptables {
    /// The agent's own network namespace.
    pub fn host() -> Iptables {
        Iptables {
            netns: None,
            v6: false,
        }
    }

    /// The named network namespace (under `/var/run/netns`).
    pub fn in_netns(name: &str) -> Iptables {
        Iptables {
            netns: Some(name.to_string()),
            v6: false,
        }
    }

    /// The same place's IPv6 rules (`ip6tables`).
    pub fn six(&self) -> Iptables {
        Iptables {
            netns: self.netns.clone(),
            v6: true,
        }
    }

    /// `iptables`, `iptables-restore`... or their IPv6 twins.
    fn program(&self, base: &str) -> String {
        if self.v6 {
            base.replacen("iptables", "ip6tables", 1)
        } else {
            base.to_string()
        }
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, program]);
                c
            }
            None => Command::new(program),
        };
        cmd.kill_on_drop(true)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Runs `program args` with `stdin`, bounded; returns (success, stdout, stderr).
    async fn run(
        &self,
        program: &str,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<(std::process::ExitStatus, String, String), IptablesError> {
        let program = &self.program(program);
        let line = format!("{program} {}", args.join(" "));
        let mut cmd = self.command(program);
        cmd.args(args).stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        let spawn_err = |source| IptablesError::Spawn {
            cmd: line.clone(),
            netns: self.netns.clone(),
            source,
        };
        let mut child = cmd.spawn().map_err(spawn_err)?;
        let work = async {
            if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
                pipe.write_all(input.as_bytes()).await?;
                pipe.shutdown().await?;
            }
            child.wait_with_output().await
        };
        let out = match tokio::time::timeout(COMMAND_TIMEOUT, work).await {
            Ok(out) => out.map_err(spawn_err)?,
            Err(_) => {
                return Err(IptablesError::Timeout {
                    cmd: line,
                    netns: self.netns.clone(),
                    timeout: COMMAND_TIMEOUT,
                })
            }
        };
        Ok((
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// `iptables -w 5 -t <table> -S`: every chain and rule of a table, as rule specs.
    pub async fn list(&self, table: &str) -> Result<Vec<String>, IptablesError> {
        let args = ["-w", "5", "-t", table, "-S"];
        let (status, stdout, stderr) = self.run("iptables", &args, None).await?;
        if !status.success() {
            return Err(IptablesError::Command {
                cmd: format!("{} {}", self.program("iptables"), args.join(" ")),
                netns: self.netns.clone(),
                status: status.to_string(),
                stderr: clean_stderr(&stderr),
            });
        }
        Ok(stdout.lines().map(str::to_string).collect())
    }

    /// `iptables-save`: the whole IPv4 ruleset (for diagnostics and tests).
    pub async fn save(&self) -> Result<String, IptablesError> {
        let (status, stdout, stderr) = self.run("iptables-save", &[], None).await?;
        if !status.success() {
            return Err(IptablesError::Command {
                cmd: self.program("iptables-save"),
                netns: self.netns.clone(),
                status: status.to_string(),
                stderr: clean_stderr(&stderr),
            });
        }
        Ok(stdout)
    }

    /// Applies an `iptables-restore` input with `--noflush`: first a dry run (`--test`), so an
    /// input with a bad line changes nothing, then for real. Errors carry the offending line.
    pub async fn restore(&self, input: &str) -> Result<(), IptablesError> {
        for test in [true, false] {
            let args: &[&str] = if test {
                &["--test", "--noflush"]
            } else {
                &["--noflush"]
            };
            let (status, _, stderr) = self.run("iptables-restore", args, Some(input)).await?;
            if !status.success() {
                let line = error_line(&stderr);
                return Err(IptablesError::Restore {
                    netns: self.netns.clone(),
                    test,
                    line,
                    text: line
                        .and_then(|l| input.lines().nth(l.checked_sub(1)?))
                        .map(str::to_string),
                    stderr: clean_stderr(&stderr),
                });
            }
        }
        Ok(())
    }

    /// Makes the host rules exactly `rules`: rewrites our chains in one restore and ensures one
    /// jump into each of them. Idempotent: a second call with the same rules leaves
    /// `iptables-save` unchanged.
    pub async fn sync(&self, rules: &HostRules) -> Result<(), IptablesError> {
        let _serial = LOCK.lock().await;
        self.sync_family(|extra| render_with(rules, extra)).await?;
        if let Some(v6) = &rules.ipv6 {
            self.six()
                .sync_family(|extra| {
                    let vxlan = rules.underlay_ipv6.then_some(rules.vxlan_port);
                    render6_with(v6, &rules.egress_ips, vxlan, extra)
                })
                .await?;
        }
        Ok(())
    }

    /// One family's sync (the lock held): the jumps that are missing or doubled, and the
    /// chains' content `render` gives with them.
    async fn sync_family(
        &self,
        render: impl Fn(&[(&str, String)]) -> String,
    ) -> Result<(), IptablesError> {
        let mut extra: Vec<(&str, String)> = Vec::new();
        for table in TABLES {
            let lines = self.list(table).await?;
            for j in JUMPS.iter().filter(|j| j.table == table) {
                let existing: Vec<&String> = lines
                    .iter()
                    .filter(|l| is_rule_to(l, j.from, j.to))
                    .collect();
                if existing.is_empty() {
                    extra.push((table, format!("-I {} 1 {}", j.from, jump_spec(j))));
                }
                // Surplus copies (from a crash between list and restore of another agent
                // version, or a person): keep the first.
                for l in existing.iter().skip(1) {
                    extra.push((table, l.replacen("-A ", "-D ", 1)));
                }
            }
        }
        let input = render(&extra);
        self.restore(&input).await?;
        tracing::debug!(
            netns = self.netns.as_deref().unwrap_or(""),
            ipv6 = self.v6,
            jumps_added = extra.len(),
            "host iptables rules synced"
        );
        Ok(())
    }

    /// Removes every jump into our chains and the chains themselves (teardown). Idempotent:
    /// without our chains it runs nothing.
    pub async fn remove(&self) -> Result<(), IptablesError> {
        let ours: Vec<(&str, &str)> = JUMPS.iter().map(|j| (j.table, j.to)).collect();
        self.remove_chains(&ours).await?;
        if !self.v6 {
            // A dual-stack node's IPv6 twins (none on an IPv4 node: nothing runs then).
            self.six().remove_chains(&ours).await?;
        }
        Ok(())
    }

    /// Removes the chains `(table, chain)` that exist, with every jump into them from chains
    /// that stay, in one `iptables-restore` (checked first): the agent's own at teardown,
    /// openshift-sdn's when the agent takes a node over. Returns the chains removed.
    pub async fn remove_chains<'a>(
        &self,
        chains: &[(&'a str, &'a str)],
    ) -> Result<Vec<(&'a str, &'a str)>, IptablesError> {
        let _serial = LOCK.lock().await;
        let mut input = String::new();
        let mut removed = Vec::new();
        let mut tables: Vec<&str> = chains.iter().map(|(t, _)| *t).collect();
        tables.sort_unstable();
        tables.dedup();
        for table in tables {
            let lines = self.list(table).await?;
            let gone: Vec<&str> = chains
                .iter()
                .filter(|(t, c)| *t == table && lines.iter().any(|l| l == &format!("-N {c}")))
                .map(|(_, c)| *c)
                .collect();
            if gone.is_empty() {
                continue;
            }
            let _ = writeln!(input, "*{table}");
            // Flushed first, so a chain that jumps to another one of the list no longer
            // references it when that one is deleted.
            for c in &gone {
                let _ = writeln!(input, ":{c} - [0:0]");
            }
            // Jumps into them from chains that stay, deleted before the chains.
            for l in &lines {
                let mut tokens = l.split_whitespace();
                let from = match (tokens.next(), tokens.next()) {
                    (Some("-A"), Some(from)) => from,
                    _ => continue,
                };
                if gone.iter().any(|c| is_rule_to(l, from, c)) && !gone.contains(&from) {
                    let _ = writeln!(input, "{}", l.replacen("-A ", "-D ", 1));
                }
            }
            for c in &gone {
                let _ = writeln!(input, "-X {c}");
                removed.push((table, *c));
            }
            input.push_str("COMMIT\n");
        }
        if input.is_empty() {
            return Ok(removed);
        }
        self.restore(&input).await?;
        Ok(chains
            .iter()
            .filter(|(t, c)| removed.contains(&(*t, *c)))
            .copied()
            .collect())
    }
}

/// [`Iptables::sync`] in the agent's own network namespace.
pub async fn sync(rules: &HostRules) -> Result<(), IptablesError> {
    Iptables::host().sync(rules).await
}

/// [`Iptables::remove`] in the agent's own network namespace.
pub async fn remove() -> Result<(), IptablesError> {
    Iptables::host().remove().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(cns: &[&str]) -> HostRules {
        HostRules {
            cluster_networks: cns.iter().map(|c| c.parse().unwrap()).collect(),
            service_cidr: Some("172.30.0.0/16".parse().unwrap()),
            vxlan_port: 4789,
            underlay_ipv6: false,
            egress_ips: Vec::new(),
            ipv6: None,
        }
    }

    #[test]
    fn a_dual_stack_node_s_ipv6_rules_take_pod_addresses_only_from_tun0() {
        let v6 = HostRules6 {
            cluster_network: "fd01::/48".parse().unwrap(),
            service_cidr: Some("fd02::/112".parse().unwrap()),
        };
        let want = r#"*mangle
:SDN-PREROUTING - [0:0]
COMMIT
*nat
:SDN-POSTROUTING - [0:0]
-A SDN-POSTROUTING -d fd01::/48 -m comment --comment "sdn: traffic to the cluster network keeps its source" -j RETURN
-A SDN-POSTROUTING -d fd02::/112 -m comment --comment "sdn: traffic to services keeps its source" -j RETURN
-A SDN-POSTROUTING -s fd01::/48 ! -d fd01::/48 -m comment --comment "sdn: masquerade pod traffic leaving the cluster network" -j MASQUERADE
COMMIT
*filter
:SDN-INPUT - [0:0]
:SDN-FORWARD - [0:0]
-A SDN-INPUT -s fd01::/48 -i tun0 -m comment --comment "sdn: pods reach this node" -j ACCEPT
-A SDN-INPUT -s fd01::/48 -m comment --comment "sdn: pod addresses come only from tun0" -j DROP
-A SDN-FORWARD -s fd01::/48 ! -i tun0 -m comment --comment "sdn: pod addresses come only from tun0" -j DROP
-A SDN-FORWARD -s fd01::/48 -m conntrack --ctstate INVALID -m comment --comment "sdn: invalid packets from pods" -j DROP
-A SDN-FORWARD -s fd01::/48 -m comment --comment "sdn: forward traffic from pods" -j ACCEPT
-A SDN-FORWARD -d fd01::/48 -m comment --comment "sdn: forward traffic to pods" -j ACCEPT
COMMIT
"#;
        assert_eq!(render6(&v6, &[], None), want);
    }

    #[test]
    fn ipv6_egress_ips_mark_snat_and_reject_in_ip6tables_only() {
        let v6 = HostRules6 {
            cluster_network: "fd01::/48".parse().unwrap(),
            service_cidr: None,
        };
        let egress = [
            EgressIpRule {
                ip: "192.168.77.100".parse().unwrap(),
                mark: 0x14,
                mac: [0x0a, 0x59, 0, 0, 0, 0x14],
                vnid: 20,
            },
            EgressIpRule {
                ip: "fd00:77::100".parse().unwrap(),
                mark: 0x14,
                mac: [0x0a, 0x59, 0, 0, 0, 0x14],
                vnid: 20,
            },
        ];
        let text = render6(&v6, &egress, None);
        for want in [
            "-A SDN-PREROUTING -i tun0 -m mac --mac-source 0a:59:00:00:00:14 -m comment --comment \"sdn: egress IP fd00:77::100 of VNID 20\" -j MARK --set-xmark 0x14/0xffffffff",
            "-A SDN-POSTROUTING -s fd01::/48 -m mark --mark 0x14 -m comment --comment \"sdn: egress IP fd00:77::100 of VNID 20\" -j SNAT --to-source fd00:77::100",
            "-A SDN-INPUT -d fd00:77::100/128 -m conntrack --ctstate NEW -m comment --comment \"sdn: egress IPs are source addresses only\" -j REJECT --reject-with icmp6-port-unreachable",
        ] {
            assert!(text.contains(want), "{want}\nnot in:\n{text}");
        }
        assert!(!text.contains("192.168.77.100"), "IPv4 stays in iptables");
        let pos = |s: &str| text.find(s).unwrap();
        assert!(pos("keeps its source") < pos("-j SNAT"));
        assert!(pos("-j SNAT") < pos("-j MASQUERADE"));
        assert!(pos("-j REJECT") < pos("pods reach this node"));
        // And IPv4's render leaves the IPv6 one out.
        let mut r = rules(&["10.128.0.0/14"]);
        r.egress_ips = egress.to_vec();
        assert!(!render(&r).contains("fd00:77::100"));
    }

    #[test]
    fn renders_the_exact_restore_input() {
        let want = r#"*mangle
:SDN-PREROUTING - [0:0]
COMMIT
*nat
:SDN-POSTROUTING - [0:0]
-A SDN-POSTROUTING -d 10.128.0.0/14 -m comment --comment "sdn: traffic to the cluster network keeps its source" -j RETURN
-A SDN-POSTROUTING -d 172.30.0.0/16 -m comment --comment "sdn: traffic to services keeps its source" -j RETURN
-A SDN-POSTROUTING -s 10.128.0.0/14 ! -d 10.128.0.0/14 -m comment --comment "sdn: masquerade pod traffic leaving the cluster network" -j MASQUERADE
COMMIT
*filter
:SDN-INPUT - [0:0]
:SDN-FORWARD - [0:0]
-A SDN-INPUT -p udp -m udp --dport 4789 -m comment --comment "sdn: vxlan from other nodes" -j ACCEPT
-A SDN-INPUT -s 10.128.0.0/14 -m comment --comment "sdn: pods reach this node" -j ACCEPT
-A SDN-FORWARD -s 10.128.0.0/14 -m conntrack --ctstate INVALID -m comment --comment "sdn: invalid packets from pods" -j DROP
-A SDN-FORWARD -s 10.128.0.0/14 -m comment --comment "sdn: forward traffic from pods" -j ACCEPT
-A SDN-FORWARD -d 10.128.0.0/14 -m comment --comment "sdn: forward traffic to pods" -j ACCEPT
COMMIT
"#;
        assert_eq!(render(&rules(&["10.128.0.0/14"])), want);
    }

    #[test]
    fn egress_ips_mark_snat_and_reject() {
        let mut r = rules(&["10.128.0.0/14"]);
        r.egress_ips.push(EgressIpRule {
            ip: "192.168.77.100".parse().unwrap(),
            mark: 0x14,
            mac: [0x0a, 0x59, 0, 0, 0, 0x14],
            vnid: 20,
        });
        let text = render(&r);
        for want in [
            "-A SDN-PREROUTING -i tun0 -m mac --mac-source 0a:59:00:00:00:14 -m comment --comment \"sdn: egress IP 192.168.77.100 of VNID 20\" -j MARK --set-xmark 0x14/0xffffffff",
            "-A SDN-POSTROUTING -s 10.128.0.0/14 -m mark --mark 0x14 -m comment --comment \"sdn: egress IP 192.168.77.100 of VNID 20\" -j SNAT --to-source 192.168.77.100",
            "-A SDN-INPUT -d 192.168.77.100/32 -m conntrack --ctstate NEW -m comment --comment \"sdn: egress IPs are source addresses only\" -j REJECT --reject-with icmp-port-unreachable",
        ] {
            assert!(text.contains(want), "{want}\nnot in:\n{text}");
        }
        // The SNAT comes before the masquerade of other pod traffic, after the RETURNs.
        let pos = |s: &str| text.find(s).unwrap();
        assert!(pos("-j SNAT") < pos("-j MASQUERADE"));
        assert!(pos("traffic to services keeps its source") < pos("-j SNAT"));
    }

    #[test]
    fn two_cluster_networks_return_before_masquerade() {
        let text = render(&HostRules {
            egress_ips: Vec::new(),
            vxlan_port: 8472,
            ..rules(&["10.128.0.0/14", "10.200.0.0/16"])
        });
        let nat: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("-A SDN-POSTROUTING"))
            .map(|l| l.split(" -m comment").next().unwrap())
            .collect();
        assert_eq!(
            nat,
            [
                "-A SDN-POSTROUTING -d 10.128.0.0/14",
                "-A SDN-POSTROUTING -d 10.200.0.0/16",
                "-A SDN-POSTROUTING -d 172.30.0.0/16",
                "-A SDN-POSTROUTING -s 10.128.0.0/14 ! -d 10.128.0.0/14",
                "-A SDN-POSTROUTING -s 10.200.0.0/16 ! -d 10.200.0.0/16",
            ]
        );
        assert!(text.contains("--dport 8472 "));
        assert_eq!(text.matches("-A SDN-FORWARD").count(), 6);
    }

    #[test]
    fn extra_lines_go_into_their_table() {
        let text = render_with(
            &rules(&["10.128.0.0/14"]),
            &[("filter", "-I INPUT 1 -j SDN-INPUT".into())],
        );
        let filter = text.split("*filter").nth(1).unwrap();
        assert!(
            filter.ends_with("-I INPUT 1 -j SDN-INPUT\nCOMMIT\n"),
            "{filter}"
        );
        assert!(!text.split("*filter").next().unwrap().contains("-I INPUT"));
    }

    #[test]
    fn recognises_jumps_and_error_lines() {
        assert!(is_rule_to(
            "-A POSTROUTING -m comment --comment \"sdn: x\" -j SDN-POSTROUTING",
            "POSTROUTING",
            "SDN-POSTROUTING"
        ));
        assert!(!is_rule_to(
            "-A POSTROUTING -j SDN-POSTROUTING-2",
            "POSTROUTING",
            "SDN-POSTROUTING"
        ));
        assert!(!is_rule_to(
            "-N SDN-POSTROUTING",
            "POSTROUTING",
            "SDN-POSTROUTING"
        ));
        assert_eq!(
            error_line("iptables-restore v1.8.9 (nf_tables): invalid mask `33' specified\nError occurred at line: 8\nTry `iptables-restore -h' or 'iptables-restore --help' for more information.\n"),
            Some(8)
        );
        assert_eq!(
            error_line("iptables-restore: line 3 failed: Bad rule"),
            Some(3)
        );
        assert_eq!(error_line("something else"), None);
        assert_eq!(
            clean_stderr("a\nError occurred at line: 8\nTry `iptables-restore -h' or more\n"),
            "a; Error occurred at line: 8"
        );
    }
}
