//! `sdnctl`: the operator CLI for tenants (NetNamespaces and their VNIDs) of a standalone node.
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

/// Manage the tenants (NetNamespaces and their VNIDs) of a standalone SDN node.
///
/// Each command edits the agent's state directory; the running agent applies the change as soon
/// as it sees the write (inotify).
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
    /// Machine-readable output
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// List namespaces: VNID, namespaces sharing it, local pods
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
    /// Delete NAME's NetNamespace (refused while local pods use it)
    Delete {
        /// The namespace
        name: String,
        /// Delete even when local pods use it (they keep their VNID)
        #[arg(long)]
        force: bool,
    },
}

/// The argument shape of each command, for usage errors.
const SHAPES: [(&str, &str); 7] = [
    ("namespaces", ""),
    ("list", ""),
    ("create", "NAME [--global]"),
    ("join", "NAME OTHER"),
    ("isolate", "NAME"),
    ("make-global", "NAME"),
    ("delete", "NAME [--force]"),
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
            format!("unknown command {word:?}")
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
        (ErrorKind::InvalidValue, _) if !invalid.is_empty() => format!("{invalid} needs a value"),
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
        Cmd::Namespaces => return None,
        Cmd::Create { name, global } => Command::Create { name, global },
        Cmd::Join { name, other } => Command::Join { name, other },
        Cmd::Isolate { name } => Command::Isolate { name },
        Cmd::MakeGlobal { name } => Command::MakeGlobal { name },
        Cmd::Delete { name, force } => Command::Delete { name, force },
    })
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

fn run(raw: &[String]) -> Result<(), Failure> {
    let mut a =
        match Cli::try_parse_from(std::iter::once("sdnctl".to_string()).chain(raw.iter().cloned()))
        {
            Ok(a) => a,
            Err(e) if e.use_stderr() => return Err(Failure::Usage(usage_error(raw, &e))),
            // --help, --version, help.
            Err(e) => e.exit(),
        };
    let cmd = match a.command.take() {
        Some(c) => tenant_command(c),
        None => return Err(Failure::Usage("no command given".into())),
    };
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
