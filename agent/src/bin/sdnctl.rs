//! `sdnctl`: the operator CLI for tenants (NetNamespaces and their VNIDs) of a standalone node.
//!
//! Every command edits the agent's cluster state directory through [`agent::tenants`] (under a
//! lock, one file per change, atomically); the running agent applies the change on its next poll.
//! Local pod counts come from the node's OVSDB. Where things are: `--config FILE` (the agent's own
//! configuration file; or `$SDN_CONFIG`) gives the state directory (`clusterState:
//! standalone:DIR`), the OVSDB target and the mode; `--state-dir` and `--ovsdb` override it or
//! stand alone. In Kubernetes mode the controller owns NetNamespaces, so sdnctl refuses.
//!
//! Output goes to stdout (a table, one line per change, or JSON with `--json`); warnings and
//! notes go to stderr, one line each; errors to stderr with exit status 1 (2 for usage errors).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use agent::config::{ClusterStateSource, Config};
use agent::tenants::{self, Command, Pods};
use serde_json::json;

/// How long sdnctl waits for OVSDB.
const OVSDB_TIMEOUT: Duration = Duration::from_secs(3);

const USAGE: &str = "\
sdnctl: manage the tenants (NetNamespaces and their VNIDs) of a standalone SDN node

usage: sdnctl [--config FILE | --state-dir DIR] [--ovsdb TARGET] [--json] COMMAND [ARGS]

commands:
  namespaces                 list namespaces: VNID, namespaces sharing it, local pods (alias: list)
  create NAME [--global]     create a tenant namespace with a fresh VNID (--global: VNID 0)
  join NAME OTHER            NAME takes OTHER's VNID, so their pods reach each other
  isolate NAME               give NAME a fresh VNID of its own (refused for default)
  make-global NAME           give NAME VNID 0: it reaches and is reached by every namespace
  delete NAME [--force]      delete NAME's NetNamespace (refused while local pods use it)
  help                       show this text

options:
  --config FILE     the agent's configuration file (default: $SDN_CONFIG); gives the state
                    directory (clusterState standalone:DIR), the OVSDB target and the mode
  --state-dir DIR   the agent's standalone cluster state directory (overrides the config)
  --ovsdb TARGET    OVSDB for local pod counts: unix:PATH or tcp:IP:PORT (overrides the config)
  --json            machine-readable output

Each command edits the state directory; the running agent applies the change within a poll
interval (500 ms).";

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

/// The parsed command line.
#[derive(Debug, Default)]
struct Args {
    config: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    ovsdb: Option<String>,
    json: bool,
    global: bool,
    force: bool,
    words: Vec<String>,
}

fn parse_args(raw: &[String]) -> Result<Args, Failure> {
    let mut a = Args::default();
    let mut it = raw.iter();
    while let Some(arg) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| Failure::Usage(format!("{flag} needs a value")))
        };
        match arg.as_str() {
            "--config" => a.config = Some(value(arg)?.into()),
            "--state-dir" => a.state_dir = Some(value(arg)?.into()),
            "--ovsdb" => a.ovsdb = Some(value(arg)?),
            "--json" => a.json = true,
            "--global" => a.global = true,
            "--force" => a.force = true,
            "-h" | "--help" => a.words.insert(0, "help".into()),
            s if s.starts_with('-') && s.len() > 1 => {
                return Err(Failure::Usage(format!("unknown option {s:?}")))
            }
            _ => a.words.push(arg.clone()),
        }
    }
    Ok(a)
}

/// The command, from the positional words.
fn command(a: &Args) -> Result<Option<Command>, Failure> {
    let w: Vec<&str> = a.words.iter().map(String::as_str).collect();
    let only = |flag: &str, set: bool, allowed: bool| {
        if set && !allowed {
            Err(Failure::Usage(format!("{flag} does not apply to {}", w[0])))
        } else {
            Ok(())
        }
    };
    let (create, delete) = (w.first() == Some(&"create"), w.first() == Some(&"delete"));
    if !w.is_empty() {
        only("--global", a.global, create)?;
        only("--force", a.force, delete)?;
    }
    let args = |n: usize, shape: &str| {
        if w.len() == n + 1 {
            Ok(())
        } else {
            Err(Failure::Usage(format!("usage: sdnctl {} {shape}", w[0])))
        }
    };
    let name = |i: usize| w[i].to_string();
    Ok(Some(match w.first().copied() {
        None => return Err(Failure::Usage("no command given".into())),
        Some("namespaces" | "list") => {
            args(0, "")?;
            return Ok(None);
        }
        Some("create") => {
            args(1, "NAME [--global]")?;
            Command::Create {
                name: name(1),
                global: a.global,
            }
        }
        Some("join") => {
            args(2, "NAME OTHER")?;
            Command::Join {
                name: name(1),
                other: name(2),
            }
        }
        Some("isolate") => {
            args(1, "NAME")?;
            Command::Isolate { name: name(1) }
        }
        Some("make-global") => {
            args(1, "NAME")?;
            Command::MakeGlobal { name: name(1) }
        }
        Some("delete") => {
            args(1, "NAME [--force]")?;
            Command::Delete {
                name: name(1),
                force: a.force,
            }
        }
        Some(other) => return Err(Failure::Usage(format!("unknown command {other:?}"))),
    }))
}

/// Where the state directory and OVSDB are, and what to tell the operator about them.
struct Place {
    dir: PathBuf,
    config: Option<PathBuf>,
    ovsdb: Option<String>,
    notes: Vec<String>,
}

fn locate(a: &Args) -> Result<Place, Failure> {
    let config = a.config.clone().or_else(|| {
        if a.state_dir.is_some() {
            None
        } else {
            std::env::var_os("SDN_CONFIG")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        }
    });
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
fn pods(ovsdb: Option<&str>) -> Pods {
    let Some(target) = ovsdb else {
        return Pods::Unknown("no OVSDB target: pass --ovsdb TARGET or --config FILE".into());
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return Pods::Unknown(format!("cannot start a runtime: {e}")),
    };
    match runtime.block_on(tenants::local_pods(target, OVSDB_TIMEOUT)) {
        Ok(p) => Pods::Known(p),
        Err(e) => Pods::Unknown(e.to_string()),
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
    let a = parse_args(raw)?;
    if a.words.first().map(String::as_str) == Some("help") {
        return out(&format!("{USAGE}\n"));
    }
    let cmd = command(&a)?;
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
            if let Pods::Unknown(why) = &pods {
                warnings.push(format!(
                    "warning: local pod counts unknown (shown as ?): {why}"
                ));
            }
            if !config_given {
                warnings.extend(mode_note(dir, &snap.state));
            }
            warn(&warnings);
            let rows = tenants::rows(&snap.state, &pods);
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
                Pods::Unknown("not needed".into())
            };
            // Unknown pod VNIDs matter to allocation when an OVSDB was named but not read.
            let allocates = matches!(
                cmd,
                Command::Create { global: false, .. } | Command::Isolate { .. }
            );
            if let (true, Some(_), Pods::Unknown(why)) = (allocates, &place.ovsdb, &pods) {
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
