//! `sdnctl`: the operator CLI of a node: what the running agent knows (`status`, `pods`,
//! `flows`, `log-level`, and `namespaces` in Kubernetes mode), asked over the agent's root-only
//! local API ([`agent::api`]), and the tenants (NetNamespaces and their VNIDs) of a standalone
//! node.
//!
//! The agent's view works in both cluster-state modes: the socket is `--api-socket`, else the
//! config's `apiSocket` (or `api.sock` next to its `cniSocket`), else `/var/run/sdn/api.sock`.
//!
//! Every command edits the agent's cluster state directory through [`agent::tenants`] (under a
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
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use agent::config::{ClusterStateSource, Config};
use agent::tenants::{self, PodCounts, TenantCommand as Command};
use clap::{Parser, Subcommand};
use serde_json::json;

/// How long sdnctl waits for OVSDB.
const OVSDB_TIMEOUT: Duration = Duration::from_secs(3);

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
    /// DST: NAMESPACE/POD (a pod of this node), node, or an IPv4 address (a pod here or on
    /// another node, a service, an external address)
    Trace {
        /// The source
        src: String,
        /// The destination
        dst: String,
        /// icmp (default), arp, tcp/PORT or udp/PORT
        proto: Option<String>,
        /// The VNI a packet from a pod of another node arrives with (its namespace's VNID)
        #[arg(long, value_name = "VNID")]
        vni: Option<u32>,
        /// Send from SRC's port with this source address (what the spoof guard does)
        #[arg(long, value_name = "IP")]
        spoof_ip: Option<std::net::Ipv4Addr>,
        /// Send from SRC's port with this source MAC
        #[arg(long, value_name = "MAC")]
        spoof_mac: Option<String>,
        /// Print ofproto/trace's own text too
        #[arg(long)]
        raw: bool,
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
    /// List namespaces: VNID, namespaces sharing it, local pods, multicast
    #[command(alias = "list")]
    Namespaces,
    /// Create a tenant namespace with a fresh VNID
    Create {
        /// The namespace (a DNS-1123 label)
        name: String,
        /// VNID 0 instead of a fresh one: it reaches and is reached by every namespace
        #[arg(long)]
        global: bool,
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
const SHAPES: [(&str, &str); 18] = [
    ("egress-firewall", ""),
    ("egress-ips", ""),
    ("network-policies", ""),
    ("bundle", "[-o FILE]"),
    ("status", ""),
    (
        "trace",
        "SRC DST [icmp|arp|tcp/PORT|udp/PORT] [--vni N] [--spoof-ip IP] [--spoof-mac MAC]",
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

/// The command closest to a mistyped `word` (edit distance at most 2, or a unique prefix).
fn nearest_command(word: &str) -> Option<String> {
    use clap::CommandFactory;
    let names: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    let prefixed: Vec<&String> = names
        .iter()
        .filter(|n| !word.is_empty() && n.starts_with(word))
        .collect();
    if let [one] = prefixed.as_slice() {
        return Some((*one).clone());
    }
    names
        .iter()
        .map(|n| (edit_distance(word, n), n))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, n)| n.clone())
}

/// Levenshtein distance, with a swap of two neighbours counted as one edit (`stauts`).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

/// A clap error in sdnctl's words: which command's shape was wrong, which flag belongs to
/// another command, which command does not exist.
fn usage_error(raw: &[String], e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let word = raw.iter().find_map(|w| {
        SHAPES
            .iter()
            .find(|(c, _)| c == w)
            .map(|(c, shape)| (*c, *shape))
    });
    let invalid = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => s.split_whitespace().next().unwrap_or("").to_string(),
        _ => String::new(),
    };
    match (e.kind(), word) {
        (ErrorKind::InvalidSubcommand, _) => {
            let word = match e.get(ContextKind::InvalidSubcommand) {
                Some(ContextValue::String(s)) => s.clone(),
                _ => invalid,
            };
            match nearest_command(&word) {
                Some(near) => format!("unknown command {word:?}; did you mean {near:?}?"),
                None => format!("unknown command {word:?}"),
            }
        }
        (ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand, _) => {
            "no command given".into()
        }
        (ErrorKind::UnknownArgument, Some((cmd, _)))
            if ["--global", "--force"].contains(&invalid.as_str()) =>
        {
            format!("{invalid} does not apply to {cmd}")
        }
        (ErrorKind::UnknownArgument, _) if invalid.starts_with('-') => {
            format!("unknown option {invalid:?}")
        }
        (
            ErrorKind::MissingRequiredArgument
            | ErrorKind::UnknownArgument
            | ErrorKind::TooManyValues,
            Some((cmd, shape)),
        ) => format!("usage: sdnctl {cmd} {shape}")
            .trim_end()
            .to_string(),
        (ErrorKind::InvalidValue, _) if !invalid.is_empty() => {
            match (
                e.get(ContextKind::InvalidValue),
                e.get(ContextKind::ValidValue),
            ) {
                (Some(ContextValue::String(v)), Some(ContextValue::Strings(valid)))
                    if !v.is_empty() =>
                {
                    format!(
                        "bad value {v:?} for {}: expected {}",
                        invalid
                            .trim_start_matches('<')
                            .trim_end_matches('>')
                            .to_lowercase(),
                        valid.join(" or ")
                    )
                }
                _ => format!("{invalid} needs a value"),
            }
        }
        _ => e
            .render()
            .to_string()
            .lines()
            .next()
            .unwrap_or("")
            .trim_start_matches("error: ")
            .to_string(),
    }
}

/// The tenant command of a subcommand (`None` for `namespaces`).
fn tenant_command(cmd: Cmd) -> Option<Command> {
    Some(match cmd {
        Cmd::Create { name, global } => Command::Create { name, global },
        Cmd::Join { name, other } => Command::Join { name, other },
        Cmd::Isolate { name } => Command::Isolate { name },
        Cmd::MakeGlobal { name } => Command::MakeGlobal { name },
        Cmd::Delete { name, force } => Command::Delete { name, force },
        // namespaces, and the commands the agent answers ([`Cmd::asks_agent`]).
        _ => return None,
    })
}

/// How to do a tenant change in Kubernetes mode, where the controller owns NetNamespaces.
fn kube_hint(cmd: &Cmd) -> String {
    const KEY: &str = "pod.network.openshift.io/multitenant.change-network";
    let how = match cmd {
        Cmd::Join { name, other } => {
            format!("kubectl annotate netnamespace {name} {KEY}=join:{other}")
        }
        Cmd::Isolate { name } => format!("kubectl annotate netnamespace {name} {KEY}=isolate"),
        Cmd::MakeGlobal { name } => {
            format!("kubectl annotate netnamespace {name} {KEY}=global")
        }
        Cmd::Create { name, .. } => format!(
            "kubectl create namespace {name} (the controller gives it a NetNamespace; add --global's effect with: kubectl annotate netnamespace {name} {KEY}=global)"
        ),
        Cmd::Delete { name, .. } => format!(
            "kubectl delete namespace {name} (the controller deletes its NetNamespace)"
        ),
        Cmd::Multicast { name, state } => format!(
            "kubectl annotate netnamespace {name} {}{}",
            flows::MULTICAST_ANNOTATION,
            if state == "on" { "=true --overwrite" } else { "-" }
        ),
        _ => String::new(),
    };
    format!(
        "clusterState is kubernetes: the controller owns NetNamespaces, so change them through the API: {how}"
    )
}

/// Where the state directory and OVSDB are, and what to tell the operator about them.
struct Place {
    dir: PathBuf,
    config: Option<PathBuf>,
    ovsdb: Option<String>,
    notes: Vec<String>,
}

fn locate(a: &Cli) -> Result<Place, Failure> {
    // `$SDN_CONFIG` (clap fills `config` from it) only stands in when no directory is named.
    let from_env = std::env::var_os("SDN_CONFIG").is_some_and(|v| !v.is_empty())
        && !std::env::args().any(|a| a == "--config" || a.starts_with("--config="));
    let config = a
        .config
        .clone()
        .filter(|c| !(c.as_os_str().is_empty() || from_env && a.state_dir.is_some()));
    let mut notes = Vec::new();
    let mut dir = a.state_dir.clone();
    let mut ovsdb = a.ovsdb.clone();
    if let Some(file) = &config {
        let cfg = Config::from_file(file).map_err(|e| format!("{e:#}"))?;
        match &cfg.cluster_state {
            ClusterStateSource::Kubernetes if dir.is_none() => {
                return Err(Failure::Error(format!(
                    "{}: clusterState is kubernetes: there the cluster's controller owns NetNamespaces; change them through the Kubernetes API (sdnctl edits standalone state directories only)",
                    file.display()
                )))
            }
            ClusterStateSource::Kubernetes => {}
            ClusterStateSource::Standalone(d) => {
                dir.get_or_insert_with(|| d.clone());
            }
        }
        ovsdb.get_or_insert_with(|| cfg.ovsdb.clone());
        if cfg.mode == "subnet" {
            notes.push(format!(
                "note: the agent runs in subnet mode ({}): VNIDs have no effect until it runs in multitenant mode",
                file.display()
            ));
        }
    }
    let Some(dir) = dir else {
        return Err(Failure::Usage(
            "where is the node's state? pass --config FILE (the agent's configuration file; or set SDN_CONFIG) or --state-dir DIR (with --ovsdb TARGET for pod counts)".into(),
        ));
    };
    Ok(Place {
        dir,
        config,
        ovsdb,
        notes,
    })
}

/// Reads the local pods, or says why not.
fn pods(ovsdb: Option<&str>) -> PodCounts {
    let Some(target) = ovsdb else {
        return PodCounts::Unknown("no OVSDB target: pass --ovsdb TARGET or --config FILE".into());
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return PodCounts::Unknown(format!("cannot start a runtime: {e}")),
    };
    match runtime.block_on(tenants::local_pods(target, OVSDB_TIMEOUT)) {
        Ok(p) => PodCounts::Known(p),
        Err(e) => PodCounts::Unknown(e.to_string()),
    }
}

/// A note when the state directory's ClusterNetwork says subnet mode (without a config file).
fn mode_note(dir: &Path, state: &agent::cluster::ClusterState) -> Option<String> {
    let cn = state.cluster_network.as_ref()?;
    (cn.mode().ok().flatten() == Some(flows::Mode::Subnet)).then(|| {
        format!(
            "note: the ClusterNetwork in {} says subnet mode: VNIDs have no effect until the cluster runs in multitenant mode",
            dir.display()
        )
    })
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

/// The agent's configuration named by `--config` (or `$SDN_CONFIG`), if any.
fn agent_config(a: &Cli) -> Result<Option<Config>, Failure> {
    match &a.config {
        Some(f) if !f.as_os_str().is_empty() => Config::from_file(f)
            .map(Some)
            .map_err(|e| Failure::Error(format!("{e:#}"))),
        _ => Ok(None),
    }
}

/// The local API socket: `--api-socket`, the config's, or the default.
fn api_socket(a: &Cli) -> Result<PathBuf, Failure> {
    if let Some(p) = &a.api_socket {
        return Ok(p.clone());
    }
    Ok(match agent_config(a)? {
        Some(cfg) => cfg.api_socket(),
        None => Config::default().api_socket(),
    })
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Error(format!("cannot start a runtime: {e}")))
}

/// The commands answered by the running agent.
fn ask_agent(a: &Cli, cmd: &Cmd) -> Result<(), Failure> {
    let client = agent::api::Client::new(&api_socket(a)?);
    let rt = runtime()?;
    let get = |path: String| -> Result<serde_json::Value, Failure> {
        rt.block_on(client.get_json::<serde_json::Value>(&path))
            .map_err(|e| Failure::Error(e.to_string()))
    };
    let pretty = |v: &serde_json::Value| out(&format!("{v:#}\n"));
    match cmd {
        Cmd::Status => {
            let v = get("/v1/status".into())?;
            if a.json {
                return pretty(&v);
            }
            let st: agent::api::Status =
                serde_json::from_value(v).map_err(|e| Failure::Error(e.to_string()))?;
            out(&view::status(&st))
        }
        Cmd::Pods { namespace } => {
            let path = match namespace {
                Some(ns) => format!("/v1/pods?namespace={}", view::encode(ns)),
                None => "/v1/pods".into(),
            };
            let v = get(path)?;
            if a.json {
                return pretty(&v);
            }
            let pods: Vec<agent::api::PodEntry> =
                serde_json::from_value(v).map_err(|e| Failure::Error(e.to_string()))?;
            out(&view::pods(&pods))
        }
        Cmd::Flows { pod, table, tenant } => {
            let mut q = Vec::new();
            if let Some(p) = pod {
                q.push(format!("pod={}", view::encode(p)));
            }
            if let Some(t) = table {
                q.push(format!("table={}", view::encode(t)));
            }
            if let Some(t) = tenant {
                q.push(format!("tenant={}", view::encode(t)));
            }
            let v = get(format!("/v1/flows?{}", q.join("&")))?;
            if a.json {
                return pretty(&v);
            }
            let flows: Vec<agent::api::FlowEntry> =
                serde_json::from_value(v).map_err(|e| Failure::Error(e.to_string()))?;
            out(&view::flows(&flows))
        }
        Cmd::Trace {
            src,
            dst,
            proto,
            vni,
            spoof_ip,
            spoof_mac,
            raw,
        } => {
            let req = agent::trace::TraceRequest {
                src: src.clone(),
                dst: dst.clone(),
                proto: proto.clone().unwrap_or_default(),
                vni: *vni,
                spoof_ip: *spoof_ip,
                spoof_mac: spoof_mac.clone(),
            };
            let body = serde_json::to_string(&req).map_err(|e| Failure::Error(e.to_string()))?;
            let v: serde_json::Value = rt
                .block_on(client.post_json("/v1/trace", &body))
                .map_err(|e| Failure::Error(e.to_string()))?;
            if a.json {
                return pretty(&v);
            }
            let t: agent::trace::TraceResult =
                serde_json::from_value(v).map_err(|e| Failure::Error(e.to_string()))?;
            out(&view::trace(&t, *raw))
        }
        Cmd::EgressFirewall => {
            let v = get("/v1/egress-firewall".into())?;
            if a.json {
                return pretty(&v);
            }
            let e: Vec<agent::api::EgressEntry> =
                serde_json::from_value(v).map_err(|e| Failure::Error(e.to_string()))?;
            out(&view::egress(&e))
        }
        Cmd::EgressIps => {
            let v = get("/v1/egress-ips".into())?;
            if a.json {
                return pretty(&v);
            }
            let e: agent::api::EgressIpsView =
                serde_json::from_value(v).map_err(|e| Failure::Error(e.to_string()))?;
            out(&view::egress_ips(&e))
        }
        Cmd::NetworkPolicies => {
            let v = get("/v1/network-policies".into())?;
            if a.json {
                return pretty(&v);
            }
            let e: agent::api::NetworkPoliciesView =
                serde_json::from_value(v).map_err(|e| Failure::Error(e.to_string()))?;
            out(&view::network_policies(&e))
        }
        Cmd::Bundle { output } => {
            let files: std::collections::BTreeMap<String, String> = rt
                .block_on(client.get_json("/v1/bundle"))
                .map_err(|e| Failure::Error(e.to_string()))?;
            let node = files
                .get("status.json")
                .and_then(|s| serde_json::from_str::<agent::api::Status>(s).ok());
            let mut files = files;
            if let Some(st) = &node {
                files.insert("status.txt".into(), view::status(st));
            }
            let name = node.as_ref().map_or("node", |s| s.node.as_str());
            let stamp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let base = format!("sdn-bundle-{name}-{stamp}");
            let path = output
                .clone()
                .unwrap_or_else(|| PathBuf::from(format!("{base}.tar.gz")));
            write_bundle(&path, &base, &files)?;
            if a.json {
                return pretty(&serde_json::json!({
                    "file": path,
                    "files": files.keys().collect::<Vec<_>>(),
                }));
            }
            out(&format!(
                "wrote {} ({} files: {})\n",
                path.display(),
                files.len(),
                files.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        }
        Cmd::LogLevel { level } => {
            let v: serde_json::Value = match level {
                None => get("/v1/log-level".into())?,
                Some(l) => rt
                    .block_on(client.put_json::<serde_json::Value>("/v1/log-level", l))
                    .map_err(|e| Failure::Error(e.to_string()))?,
            };
            if a.json {
                return pretty(&v);
            }
            match v["previous"].as_str() {
                Some(p) => out(&format!(
                    "log level {} (was {p})\n",
                    v["level"].as_str().unwrap_or("")
                )),
                None => out(&format!(
                    "log level {}\n",
                    v["level"].as_str().unwrap_or("")
                )),
            }
        }
        Cmd::Log => {
            let path = if a.json {
                "/v1/log?format=json"
            } else {
                "/v1/log"
            };
            let (status, body) = rt
                .block_on(client.call(hyper::Method::GET, path, ""))
                .map_err(|e| Failure::Error(e.to_string()))?;
            if !status.is_success() {
                return Err(Failure::Error(body));
            }
            out(&body)
        }
        Cmd::Namespaces => {
            let v = get("/v1/namespaces".into())?;
            if a.json {
                return pretty(&serde_json::json!({ "namespaces": v, "source": "agent" }));
            }
            let ns: Vec<agent::api::NamespaceEntry> =
                serde_json::from_value(v).map_err(|e| Failure::Error(e.to_string()))?;
            out(&view::namespaces(&ns))
        }
        _ => Err(Failure::Error("not an agent command".into())),
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
    if let Cmd::Multicast { name, state } = &command {
        let place = locate(&a)?;
        warn(&place.notes);
        let done = tenants::set_multicast(&place.dir, name, state == "on")?;
        warn(
            &done
                .problems
                .iter()
                .map(|p| format!("warning: state: {p}"))
                .collect::<Vec<_>>(),
        );
        return if a.json {
            out(&format!("{:#}\n", json!(done)))
        } else {
            out(&format!("{done}\n"))
        };
    }
    let cmd = tenant_command(command);
    let place = locate(&a)?;
    let config_given = place.config.is_some();
    warn(&place.notes);
    let dir = &place.dir;
    match cmd {
        None => {
            let snap = tenants::load(dir)?;
            let pods = pods(place.ovsdb.as_deref());
            let mut warnings: Vec<String> = snap
                .problems
                .iter()
                .map(|p| format!("warning: state: {p}"))
                .collect();
            if let PodCounts::Unknown(why) = &pods {
                warnings.push(format!(
                    "warning: local pod counts unknown (shown as ?): {why}"
                ));
            }
            if !config_given {
                warnings.extend(mode_note(dir, &snap.state));
            }
            warn(&warnings);
            let rows = tenants::rows(&snap.state, &pods, &snap.problems);
            if a.json {
                let doc = json!({
                    "stateDir": dir,
                    "namespaces": rows,
                    "podsKnown": pods.known().is_some(),
                    "warnings": warnings,
                });
                out(&format!("{doc:#}\n"))
            } else {
                out(&tenants::table(&rows))
            }
        }
        Some(cmd) => {
            let pods = if cmd.needs_pods() {
                pods(place.ovsdb.as_deref())
            } else {
                PodCounts::Unknown("not needed".into())
            };
            // Unknown pod VNIDs matter to allocation when an OVSDB was named but not read.
            let allocates = matches!(
                cmd,
                Command::Create { global: false, .. } | Command::Isolate { .. }
            );
            if let (true, Some(_), PodCounts::Unknown(why)) = (allocates, &place.ovsdb, &pods) {
                warn(&[format!("warning: VNIDs of local pods unknown, so one still held by pods of a deleted namespace could be handed out: {why}")]);
            }
            let outcome = tenants::execute(dir, &cmd, &pods)?;
            let mut warnings: Vec<String> = outcome
                .problems
                .iter()
                .map(|p| format!("warning: state: {p}"))
                .collect();
            if !config_given {
                if let Ok(snap) = tenants::load(dir) {
                    warnings.extend(mode_note(dir, &snap.state));
                }
            }
            warn(&warnings);
            if a.json {
                let doc = json!({
                    "change": outcome.change,
                    "file": outcome.file,
                    "warnings": warnings,
                });
                out(&format!("{doc:#}\n"))
            } else {
                out(&format!("{}\n", outcome.change))
            }
        }
    }
}

/// Writes `files` as `base/<name>` into a gzipped tar at `path` (mode 0600: it describes the
/// node), through a temporary file renamed into place.
fn write_bundle(
    path: &Path,
    base: &str,
    files: &std::collections::BTreeMap<String, String>,
) -> Result<(), Failure> {
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |e: std::io::Error| Failure::Error(format!("writing {}: {e}", path.display()));
    let tmp = path.with_extension("tmp");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(fail)?;
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    let mtime = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for (name, content) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(content.len() as u64);
        h.set_mode(0o600);
        h.set_mtime(mtime);
        h.set_cksum();
        tar.append_data(&mut h, format!("{base}/{name}"), content.as_bytes())
            .map_err(fail)?;
    }
    let gz = tar.into_inner().map_err(fail)?;
    gz.finish().map_err(fail)?;
    std::fs::rename(&tmp, path).map_err(fail)?;
    Ok(())
}

/// The tables `sdnctl` prints of the agent's answers.
mod view {
    use agent::api::{FlowEntry, NamespaceEntry, PodEntry, Status};

    /// Percent-encodes a query value.
    pub fn encode(s: &str) -> String {
        s.bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    }

    /// Left-aligned columns separated by two spaces.
    fn columns(rows: &[Vec<String>]) -> String {
        let n = rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..n)
            .map(|i| {
                rows.iter()
                    .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut s = String::new();
        for r in rows {
            let line: Vec<String> = r
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
                .collect();
            s.push_str(line.join("  ").trim_end());
            s.push('\n');
        }
        s
    }

    pub fn status(st: &Status) -> String {
        let mut s = format!(
            "node {} ({} mode, subnet {}, node IP {}, {} datapath), agent {}, pipeline {}\n",
            st.node, st.mode, st.subnet, st.node_ip, st.datapath, st.version, st.pipeline_version
        );
        s.push_str(&format!(
            "{}; up {} s{}\n",
            if st.ready { "READY" } else { "NOT READY" },
            st.uptime_seconds,
            st.ready_after_seconds
                .map(|r| format!(", served {r:.3} s after start"))
                .unwrap_or_default()
        ));
        for c in st.readiness.iter().chain(&st.liveness) {
            s.push_str(&format!(
                "  [{}] {}: {}\n",
                if c.ok { "ok" } else { "FAIL" },
                c.name,
                c.detail
            ));
        }
        match &st.last_reconcile {
            Some(r) => {
                s.push_str(&format!(
                    "last reconcile: {} ({} ms), {} flows desired, {} added, {} deleted{}\n",
                    r.reason,
                    r.took_ms,
                    r.desired,
                    r.added,
                    r.deleted,
                    r.error
                        .as_ref()
                        .map(|e| format!(", FAILED: {e}"))
                        .unwrap_or_default()
                ));
                for c in &r.changes {
                    s.push_str(&format!("  changed: {c}\n"));
                }
            }
            None => s.push_str("last reconcile: none yet\n"),
        }
        let list = |m: &std::collections::BTreeMap<String, u64>| {
            if m.is_empty() {
                "none".to_string()
            } else {
                m.iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        s.push_str(&format!("repairs since start: {}\n", list(&st.repairs)));
        s.push_str(&format!(
            "reconnects since start: {}\n",
            list(&st.reconnects)
        ));
        s.push_str(&format!(
            "counts: {}\n",
            st.counts
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        s.push_str(&format!("cluster state: {}", st.cluster_state));
        if st.state_problems.is_empty() {
            s.push_str(", no problems\n");
        } else {
            s.push_str(&format!(", {} problem(s):\n", st.state_problems.len()));
            for p in &st.state_problems {
                s.push_str(&format!("  {p}\n"));
            }
        }
        if let Some(m) = &st.metrics_address {
            s.push_str(&format!(
                "metrics: http://{m}/metrics (health: /livez, /readyz)\n"
            ));
        }
        s
    }

    pub fn pods(pods: &[PodEntry]) -> String {
        let mut rows = vec![[
            "NAMESPACE",
            "POD",
            "SANDBOX",
            "IP",
            "MAC",
            "PORT",
            "OFPORT",
            "VNID",
            "COOKIE",
            "HOSTPORTS",
            "BANDWIDTH",
        ]
        .map(String::from)
        .to_vec()];
        for p in pods {
            let hp = match &p.host_ports {
                serde_json::Value::Array(a) => a
                    .iter()
                    .map(|m| {
                        format!(
                            "{}->{}/{}",
                            m["hostPort"].as_u64().unwrap_or(0),
                            m["containerPort"].as_u64().unwrap_or(0),
                            m["protocol"].as_str().unwrap_or("tcp").to_lowercase()
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(","),
                _ => "-".into(),
            };
            let bw = |v: Option<u64>| v.map_or("-".to_string(), |b| format!("{b}bps"));
            let bandwidth = match (p.bandwidth.ingress_bps, p.bandwidth.egress_bps) {
                (None, None) => "-".to_string(),
                (i, e) => format!("in {} out {}", bw(i), bw(e)),
            };
            rows.push(vec![
                p.namespace.clone(),
                p.pod.clone(),
                p.sandbox.chars().take(12).collect(),
                p.ip.to_string(),
                p.mac.clone(),
                p.port.clone(),
                p.ofport.to_string(),
                p.vnid.to_string(),
                p.cookie.clone(),
                if hp.is_empty() { "-".into() } else { hp },
                bandwidth,
            ]);
        }
        columns(&rows)
    }

    pub fn flows(flows: &[FlowEntry]) -> String {
        let mut s = String::new();
        let mut table = None;
        for f in flows {
            if table != Some(f.table) {
                s.push_str(&format!("table {} {}:\n", f.table, f.table_name));
                table = Some(f.table);
            }
            s.push_str(&format!("  {}\n      owner: {}\n", f.flow, f.owner));
        }
        if flows.is_empty() {
            s.push_str("no flows match\n");
        }
        s
    }

    pub fn trace(t: &agent::trace::TraceResult, raw: bool) -> String {
        let mut s = format!("from {}\nto   {}\npacket {}\n", t.src, t.dst, t.packet);
        for step in &t.steps {
            let m = if step.matched.is_empty() {
                format!("priority {}", step.priority)
            } else {
                format!("{}, priority {}", step.matched, step.priority)
            };
            s.push_str(&format!(
                "  {:>3} {:<22} {m}\n      {}  [{}]\n",
                step.table,
                step.table_name,
                step.actions.join(", "),
                step.owner
            ));
        }
        let outcome = match t.outcome {
            agent::trace::Outcome::Delivered => "DELIVERED",
            agent::trace::Outcome::ToHost => "TO THE NODE",
            agent::trace::Outcome::ToRemoteNode => "TO ANOTHER NODE",
            agent::trace::Outcome::Dropped => "DROPPED",
        };
        for p in &t.policy {
            s.push_str(&format!("policy: {p}\n"));
        }
        match t.verdict.strip_prefix("dropped ") {
            Some(rest) => s.push_str(&format!("verdict: DROPPED {rest}\n")),
            None => s.push_str(&format!("verdict: {outcome}: {}\n", t.verdict)),
        }
        if raw {
            s.push_str("\nofproto/trace:\n");
            s.push_str(&t.raw);
        }
        s
    }

    pub fn egress(entries: &[agent::api::EgressEntry]) -> String {
        if entries.is_empty() {
            return "no tenant has an egress firewall (EgressNetworkPolicy)\n".into();
        }
        let mut s = String::new();
        for e in entries {
            s.push_str(&format!(
                "VNID {} ({}), policy {}:\n",
                e.vnid,
                e.namespaces.join(", "),
                e.policies.join(", ")
            ));
            match &e.drop_all {
                Some(why) => s.push_str(&format!("  all external traffic dropped: {why}\n")),
                None => {
                    for (i, r) in e.rules.iter().enumerate() {
                        let to = if r.to.is_empty() {
                            "(nothing yet: its name has not resolved)".to_string()
                        } else {
                            r.to.join(", ")
                        };
                        s.push_str(&format!("  {}. {} {to}\n", i + 1, r.action));
                    }
                    s.push_str("  otherwise: Allow\n");
                }
            }
        }
        s
    }

    pub fn network_policies(v: &agent::api::NetworkPoliciesView) -> String {
        if !v.enabled {
            return "this node does not run in networkpolicy mode (mode: networkpolicy in its configuration)\n".into();
        }
        let mut s = format!(
            "{} NetworkPolicies in the cluster, {} select pods of this node\n",
            v.policies,
            v.active.len()
        );
        for p in &v.active {
            s.push_str(&format!("  {p}\n"));
        }
        for (p, why) in &v.refused {
            s.push_str(&format!(
                "NOT APPLIED {p}: {why}; fails closed: what it selects is isolated, nothing allowed\n"
            ));
        }
        if v.isolated.is_empty() {
            s.push_str("no pod of this node is isolated\n");
        } else {
            s.push_str(&format!("{:<32} {:<30} EGRESS\n", "POD", "INGRESS"));
            let list = |l: &[String]| {
                if l.is_empty() {
                    "-".to_string()
                } else {
                    l.join(",")
                }
            };
            for (pod, iso) in &v.isolated {
                s.push_str(&format!(
                    "{pod:<32} {:<30} {}\n",
                    list(&iso.ingress),
                    list(&iso.egress)
                ));
            }
        }
        if !v.rules.is_empty() {
            s.push_str("rules with rows here:\n");
            for (id, r) in &v.rules {
                s.push_str(&format!("  conj_id={id:<11} {r}\n"));
            }
        }
        s.push_str(&format!(
            "rows: {} per pod + {} shared = {} (openshift-sdn's cross product: {}, {} with this node's pods only as targets); {} rebuilds, the last {} ms\n",
            v.target_rows,
            v.shared_rows,
            v.target_rows + v.shared_rows,
            v.cross_product_rows,
            v.cross_product_local_rows,
            v.rebuilds,
            v.last_rebuild_ms
        ));
        s
    }

    pub fn egress_ips(v: &agent::api::EgressIpsView) -> String {
        if v.tenants.is_empty() && v.held.is_empty() {
            return "no tenant has egress IPs (NetNamespace egressIPs)\n".into();
        }
        let mut s = String::new();
        for t in &v.tenants {
            s.push_str(&format!(
                "VNID {} ({}): {}\n",
                t.vnid,
                t.namespaces.join(", "),
                t.route
            ));
            if let Some(p) = &t.problem {
                s.push_str(&format!("  {p}\n"));
            }
            for ip in &t.ips {
                s.push_str(&format!("  {ip}\n"));
            }
        }
        if !v.held.is_empty() {
            let held: Vec<String> = v
                .held
                .iter()
                .map(|(ip, vnid)| format!("{ip} (VNID {vnid})"))
                .collect();
            s.push_str(&format!("held on this node: {}\n", held.join(", ")));
        }
        for (node, st) in &v.nodes {
            s.push_str(&format!("node {node}: {st}\n"));
        }
        s
    }

    pub fn namespaces(ns: &[NamespaceEntry]) -> String {
        let mut rows = vec![["NAME", "NETID", "LOCAL PODS", "MULTICAST"]
            .map(String::from)
            .to_vec()];
        let mut problems = String::new();
        for n in ns {
            rows.push(vec![
                n.name.clone(),
                match n.problem {
                    Some(_) => "-".to_string(),
                    None => n.netid.to_string(),
                },
                n.local_pods.to_string(),
                if n.multicast { "on" } else { "-" }.to_string(),
            ]);
            if let Some(p) = &n.problem {
                problems.push_str(&format!("{}: NetNamespace file unusable: {p}\n", n.name));
            }
        }
        columns(&rows) + &problems
    }
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
