//! `sdnctl`: the operator CLI of a node: what the running agent knows (`status`, `pods`,
//! `flows`, `log-level`, and `namespaces` in Kubernetes mode), asked over the agent's root-only
//! local API ([`local_api`]), and the tenants (NetNamespaces and their VNIDs) of a standalone
//! node.
//!
//! The agent's view works in both cluster-state modes: the socket is `--api-socket`, else the
//! config's `apiSocket` (or `api.sock` next to its `cniSocket`), else `/var/run/sdn/api.sock`.
//!
//! Every command edits the agent's cluster state directory through [`cluster::tenants`] (under a
//! lock, one file per change, atomically); the running agent applies the change as soon as it sees the write.
//! Local pod counts come from the node's OVSDB. Where things are: `--config FILE` (the agent's own
//! configuration file; or `$SDN_CONFIG`) gives the state directory (`clusterState:
//! standalone:DIR`), the OVSDB target and the mode; `--state-dir` and `--ovsdb` override it or
//! stand alone. In Kubernetes mode the controller owns NetNamespaces, so sdnctl refuses.
//!
//! Output goes to stdout (a table, one line per change, or JSON with `--json`); warnings and
//! notes go to stderr, one line each; errors to stderr with exit status 1 (2 for usage errors).
//! The command line is clap's (`--help` on every command, `--version`, `--flag=value`, global
//! options before or after the command); its errors are put in sdnctl's words ("usage: sdnctl
//! create NAME [--global]", "--force does not apply to join").

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use cluster::config::{ClusterStateSource, Config};

mod agent;
mod audit;
mod tenants;
mod usage;
mod view;

use agent::{agent_config, ask_agent};
use tenants::kube_hint;
use usage::usage_error;

/// The SDN node's operator CLI: what the running agent knows (status, pods, flows, trace,
/// egress firewalls and IPs, bundle, log level) and the tenants (NetNamespaces: VNIDs,
/// multicast) of a standalone node.
///
/// status, pods, flows, trace, egress-firewall, egress-ips, network-policies, bundle, log-level and log ask the
/// agent over its root-only local API. The tenant commands edit a standalone node's state directory; the running agent applies
/// the change as soon as it sees the write (inotify). In Kubernetes mode they say how to make
/// the change there, and namespaces asks the agent.
#[derive(Debug, Parser)]
#[command(name = "sdnctl", version, args_override_self = true)]
struct Cli {
    /// The agent's configuration file; gives the state directory (clusterState standalone:DIR),
    /// the OVSDB target and the mode
    #[arg(long, global = true, env = "SDN_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// The agent's standalone cluster state directory (overrides the config)
    #[arg(long, global = true, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// OVSDB for local pod counts: unix:PATH or tcp:IP:PORT (overrides the config)
    #[arg(long, global = true, value_name = "TARGET")]
    ovsdb: Option<String>,
    /// The agent's local API socket [default: from --config, else /var/run/sdn/api.sock]
    #[arg(long, global = true, env = "SDN_API_SOCKET", value_name = "PATH")]
    api_socket: Option<PathBuf>,
    /// Machine-readable output
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// The agent: readiness, connections, pipeline version, last reconcile and repairs,
    /// cluster-state problems, counts
    Status,
    /// This node's pods: sandbox, IP, MAC, port, ofport, VNID, cookie, host ports, bandwidth
    Pods {
        /// Only the pods of this namespace
        #[arg(short = 'n', long = "namespace", value_name = "NS")]
        namespace: Option<String>,
    },
    /// br0's flows, each with its table name and owner: a pod's (NS/NAME), a table's, a tenant's
    Flows {
        /// The flows of this pod (NAMESPACE/NAME)
        pod: Option<String>,
        /// Only this table (name or number)
        #[arg(long, value_name = "NAME")]
        table: Option<String>,
        /// The flows of this tenant's pods, its VNID row and its egress firewall
        #[arg(long, value_name = "NS")]
        tenant: Option<String>,
    },
    /// What br0 does with one packet from SRC to DST, table by table, and why, in words. SRC and
    /// DST: NAMESPACE/POD (a pod of this node), node, or an address (a pod here or on another
    /// node, a service, an external address). IPv6 when either is an IPv6 address or PROTO is
    /// icmp6 or nd (then pods are taken on their IPv6 addresses)
    Trace {
        /// The source
        src: String,
        /// The destination
        dst: String,
        /// icmp (default), arp, tcp/PORT or udp/PORT; icmp6 or nd (neighbour solicitation)
        proto: Option<String>,
        /// The VNI a packet from a pod of another node arrives with (its namespace's VNID)
        #[arg(long, value_name = "VNID")]
        vni: Option<u32>,
        /// Send from SRC's port with this source address (what the spoof guard does)
        #[arg(long, value_name = "IP")]
        spoof_ip: Option<std::net::IpAddr>,
        /// Send from SRC's port with this source MAC
        #[arg(long, value_name = "MAC")]
        spoof_mac: Option<String>,
        /// Print ofproto/trace's own text too
        #[arg(long)]
        raw: bool,
        /// Also send one real, marked packet from SRC (a local pod) and report what br0 did
        /// with it: each table, the conntrack state, where it left or the row that dropped it,
        /// and where that differs from the static trace. The packet never reaches a pod.
        #[arg(long)]
        live: bool,
    },
    /// Every tenant's egress firewall (EgressNetworkPolicy) in effect: its rules in order, or
    /// why all its external traffic is dropped
    EgressFirewall,
    /// Every tenant's egress IPs: where its external traffic leaves (this node, other nodes over
    /// VXLAN, or dropped and why), each IP's node and state, the IPs this node holds, and the
    /// watched nodes (online or offline)
    EgressIps,
    /// Networkpolicy mode: the NetworkPolicies that select this node's pods, which pods they
    /// isolate (ingress, egress), the rules with rows here, and the rows next to what
    /// openshift-sdn's cross product would need
    NetworkPolicies,
    /// One archive (.tar.gz) with everything needed to debug this node: status, config, log,
    /// flows with names, OVSDB ports and interfaces, the agent's iptables chains, cluster state,
    /// metrics (no secrets)
    Bundle {
        /// Where to write it [default: sdn-bundle-NODE-TIME.tar.gz here]
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Show the agent's log level, or change it at once (error, warn, info, debug, trace, or
    /// directives such as agent=debug,ovs=info)
    LogLevel {
        /// The new level or filter
        level: Option<String>,
    },
    /// The agent's recent log lines (kept in memory)
    Log,
    /// The audit log: isolation decisions the namespaces asked to log, and spoofing attempts,
    /// one line per connection (from the agent's auditLogFile, rotated files first)
    Audit {
        /// Only lines about this namespace (either end, or the namespace that logged it)
        #[arg(short = 'n', long = "namespace", value_name = "NS")]
        namespace: Option<String>,
        /// Only this verdict
        #[arg(long, value_parser = ["allow", "deny", "pass"])]
        verdict: Option<String>,
        /// Keep printing lines as they are written (across rotations)
        #[arg(short = 'f', long)]
        follow: bool,
        /// Only the last N lines that match
        #[arg(long, value_name = "N")]
        tail: Option<usize>,
        /// The audit log file [default: the agent's auditLogFile]
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
    },
    /// Audit logging of NAME's decisions (the k8s.ovn.org/acl-logging annotation of a
    /// standalone namespace; in Kubernetes mode annotate the Namespace): --deny and --allow
    /// each at a syslog severity, or --off
    AuditLogging {
        /// The namespace
        name: String,
        /// Log denied connections at this severity
        #[arg(long, value_name = "SEVERITY", value_parser = ["alert", "warning", "notice", "info", "debug"])]
        deny: Option<String>,
        /// Log allowed connections at this severity
        #[arg(long, value_name = "SEVERITY", value_parser = ["alert", "warning", "notice", "info", "debug"])]
        allow: Option<String>,
        /// Log nothing for NAME
        #[arg(long, conflicts_with_all = ["deny", "allow"])]
        off: bool,
    },
    /// List namespaces: VNID, namespaces sharing it, local pods, multicast
    #[command(alias = "list")]
    Namespaces,
    /// Create a tenant namespace with a fresh VNID (or the one --vnid names)
    Create {
        /// The namespace (a DNS-1123 label)
        name: String,
        /// VNID 0 instead of a fresh one: it reaches and is reached by every namespace
        #[arg(long, conflicts_with = "vnid")]
        global: bool,
        /// This tenant VNID (10 to 16777214) instead of a fresh one, e.g. the one openshift-sdn
        /// gave the namespace; refused while another namespace has it
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=16_777_215))]
        vnid: Option<u32>,
    },
    /// NAME takes OTHER's VNID, so their pods reach each other
    Join {
        /// The namespace that changes
        name: String,
        /// The namespace whose VNID it takes
        other: String,
    },
    /// Give NAME a fresh VNID of its own (refused for default)
    Isolate {
        /// The namespace
        name: String,
    },
    /// Give NAME VNID 0: it reaches and is reached by every namespace
    MakeGlobal {
        /// The namespace
        name: String,
    },
    /// Multicast for NAME's pods on or off (the NetNamespace annotation
    /// netnamespace.network.openshift.io/multicast-enabled); in effect when every namespace of
    /// the VNID has it on
    Multicast {
        /// The namespace
        name: String,
        /// on or off
        #[arg(value_parser = ["on", "off"])]
        state: String,
    },
    /// Delete NAME's NetNamespace (refused while local pods use it)
    Delete {
        /// The namespace
        name: String,
        /// Delete even when local pods use it (they keep their VNID)
        #[arg(long)]
        force: bool,
    },
}

impl Cmd {
    /// Whether only the running agent can answer (in either mode).
    fn asks_agent(&self) -> bool {
        matches!(
            self,
            Cmd::Status
                | Cmd::Pods { .. }
                | Cmd::Flows { .. }
                | Cmd::Trace { .. }
                | Cmd::Bundle { .. }
                | Cmd::EgressFirewall
                | Cmd::EgressIps
                | Cmd::NetworkPolicies
                | Cmd::LogLevel { .. }
                | Cmd::Log
        )
    }
}

/// The argument shape of each command, for usage errors.
const SHAPES: [(&str, &str); 20] = [
    (
        "audit",
        "[-n NAMESPACE] [--verdict allow|deny|pass] [--follow] [--tail N] [--file FILE]",
    ),
    (
        "audit-logging",
        "NAME [--deny SEVERITY] [--allow SEVERITY] | NAME --off",
    ),
    ("egress-firewall", ""),
    ("egress-ips", ""),
    ("network-policies", ""),
    ("bundle", "[-o FILE]"),
    ("status", ""),
    (
        "trace",
        "SRC DST [icmp|arp|tcp/PORT|udp/PORT|icmp6|nd] [--vni N] [--spoof-ip IP] [--spoof-mac MAC]",
    ),
    ("pods", "[-n NAMESPACE]"),
    (
        "flows",
        "[NAMESPACE/POD] [--table NAME] [--tenant NAMESPACE]",
    ),
    ("log-level", "[LEVEL]"),
    ("log", ""),
    ("namespaces", ""),
    ("list", ""),
    ("create", "NAME [--global]"),
    ("join", "NAME OTHER"),
    ("isolate", "NAME"),
    ("make-global", "NAME"),
    ("delete", "NAME [--force]"),
    ("multicast", "NAME on|off"),
];

/// A usage error (exit status 2) or a failure (exit status 1).
enum Failure {
    Usage(String),
    Error(String),
}

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Failure {
        Failure::Error(e.to_string())
    }
}

fn run(raw: &[String]) -> Result<(), Failure> {
    let mut a =
        match Cli::try_parse_from(std::iter::once("sdnctl".to_string()).chain(raw.iter().cloned()))
        {
            Ok(a) => a,
            Err(e) if e.use_stderr() => return Err(Failure::Usage(usage_error(raw, &e))),
            // --help, --version, help.
            Err(e) => e.exit(),
        };
    let Some(command) = a.command.take() else {
        return Err(Failure::Usage("no command given".into()));
    };
    if command.asks_agent() {
        return ask_agent(&a, &command);
    }
    if let Cmd::Audit { .. } = command {
        return audit::show(&a, &command);
    }
    // `namespaces` with no state directory at hand (no --state-dir, no config): the running
    // agent lists what it sees, in either mode.
    if matches!(command, Cmd::Namespaces)
        && a.state_dir.is_none()
        && agent_config(&a)?.is_none()
        && (a.api_socket.is_some() || Config::default().api_socket().exists())
    {
        return ask_agent(&a, &command);
    }
    // Kubernetes mode: the controller owns NetNamespaces; the agent shows them.
    if a.state_dir.is_none()
        && agent_config(&a)?.is_some_and(|c| c.cluster_state == ClusterStateSource::Kubernetes)
    {
        return match command {
            Cmd::Namespaces => ask_agent(&a, &command),
            other => Err(Failure::Error(kube_hint(&other))),
        };
    }
    tenants::run(&a, command)
}

fn warn(lines: &[String]) {
    let mut err = std::io::stderr().lock();
    for l in lines {
        let _ = writeln!(err, "{l}");
    }
}

fn out(text: &str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| Failure::Error(format!("writing the output: {e}")))
}

fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    match run(&raw) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(m)) => {
            warn(&[
                format!("sdnctl: {m}"),
                "run `sdnctl help` for the commands".into(),
            ]);
            ExitCode::from(2)
        }
        Err(Failure::Error(m)) => {
            warn(&[format!("sdnctl: error: {m}")]);
            ExitCode::FAILURE
        }
    }
}
