//! The tenant commands of a standalone node (`namespaces`, `create`, `join`, `isolate`,
//! `make-global`, `delete`, `multicast`): where the state directory and OVSDB are, the local
//! pods read from OVSDB, and the change made through [`cluster::tenants`] (under its lock, one
//! file per change, atomically). In Kubernetes mode they say how to make the change there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cluster::config::{ClusterStateSource, Config};
use cluster::tenants::{self, LocalPods, PodCounts, TenantCommand as Command, TenantError};
use serde_json::json;

use crate::{out, warn, Cli, Cmd, Failure};

/// How long sdnctl waits for OVSDB.
const OVSDB_TIMEOUT: Duration = Duration::from_secs(3);

/// The tenant commands on a standalone node's state directory.
pub(crate) fn run(a: &Cli, command: Cmd) -> Result<(), Failure> {
    if let Cmd::AuditLogging {
        name,
        deny,
        allow,
        off,
    } = &command
    {
        if !off && deny.is_none() && allow.is_none() {
            return Err(Failure::Usage(
                "audit-logging needs --deny SEVERITY and/or --allow SEVERITY, or --off".into(),
            ));
        }
        let sev = |s: &Option<String>| s.as_deref().and_then(cluster::audit::Severity::parse);
        let logging = cluster::audit::AclLogging {
            deny: sev(deny),
            allow: sev(allow),
            pass: None,
        };
        let place = locate(a)?;
        warn(&place.notes);
        let done = tenants::set_audit_logging(&place.dir, name, logging)?;
        return report(a, &done, &done.problems);
    }
    if let Cmd::Multicast { name, state } = &command {
        let place = locate(a)?;
        warn(&place.notes);
        let done = tenants::set_multicast(&place.dir, name, state == "on")?;
        return report(a, &done, &done.problems);
    }
    let cmd = tenant_command(command);
    let place = locate(a)?;
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

/// The tenant command of a subcommand (`None` for `namespaces`).
fn tenant_command(cmd: Cmd) -> Option<Command> {
    Some(match cmd {
        Cmd::Create { name, global, vnid } => Command::Create {
            name,
            global,
            vnid: vnid.and_then(multitenant::Vnid::new),
        },
        Cmd::Join { name, other } => Command::Join { name, other },
        Cmd::Isolate { name } => Command::Isolate { name },
        Cmd::MakeGlobal { name } => Command::MakeGlobal { name },
        Cmd::Delete { name, force } => Command::Delete { name, force },
        // namespaces, and the commands the agent answers ([`Cmd::asks_agent`]).
        _ => return None,
    })
}

/// Prints one namespace's change: the state directory's problems as warnings, then the change
/// in words or (`--json`) as JSON.
fn report<T: std::fmt::Display + serde::Serialize>(
    a: &Cli,
    done: &T,
    problems: &[cluster::ClusterError],
) -> Result<(), Failure> {
    warn(
        &problems
            .iter()
            .map(|p| format!("warning: state: {p}"))
            .collect::<Vec<_>>(),
    );
    if a.json {
        out(&format!("{:#}\n", json!(done)))
    } else {
        out(&format!("{done}\n"))
    }
}

/// How to do a tenant change in Kubernetes mode, where the controller owns NetNamespaces.
pub(crate) fn kube_hint(cmd: &Cmd) -> String {
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
        Cmd::AuditLogging {
            name, deny, allow, ..
        } => {
            let l = cluster::audit::AclLogging {
                deny: deny.as_deref().and_then(cluster::audit::Severity::parse),
                allow: allow.as_deref().and_then(cluster::audit::Severity::parse),
                pass: None,
            };
            return format!(
                "clusterState is kubernetes: audit logging is the Namespace's annotation: kubectl annotate namespace {name} {}{}",
                cluster::audit::ACL_LOGGING_ANNOTATION,
                if l.any() {
                    format!("='{}' --overwrite", l.to_annotation())
                } else {
                    "-".into()
                }
            );
        }
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
        ovsdb.get_or_insert_with(|| cfg.ovsdb.to_string());
        if cfg.mode == flows::Mode::Subnet {
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
    match runtime.block_on(local_pods(target, OVSDB_TIMEOUT)) {
        Ok(p) => PodCounts::Known(p),
        Err(e) => PodCounts::Unknown(e.to_string()),
    }
}

/// A note when the state directory's ClusterNetwork says subnet mode (without a config file).
fn mode_note(dir: &Path, state: &cluster::ClusterState) -> Option<String> {
    let cn = state.cluster_network.as_ref()?;
    (cn.mode().ok().flatten() == Some(flows::Mode::Subnet)).then(|| {
        format!(
            "note: the ClusterNetwork in {} says subnet mode: VNIDs have no effect until the cluster runs in multitenant mode",
            dir.display()
        )
    })
}

/// Reads the local pods from OVSDB at `target`, giving up after `timeout`.
pub(crate) async fn local_pods(target: &str, timeout: Duration) -> Result<LocalPods, TenantError> {
    let options = ovs::ovsdb::ClientOptions {
        request_timeout: timeout,
        probe_interval: None,
        ..Default::default()
    };
    let bad = |reason: String| TenantError::Ovsdb {
        target: target.to_string(),
        reason,
    };
    let client = tokio::time::timeout(timeout, ovs::ovsdb::Client::connect_with(target, options))
        .await
        .map_err(|_| bad(format!("no answer within {} s", timeout.as_secs_f32())))?
        .map_err(|e| bad(e.to_string()))?;
    Ok(client.with_cache(|c| {
        let rows: Vec<BTreeMap<String, String>> = c
            .table("Interface")
            .map(|i| i.string_map("external_ids"))
            .collect();
        LocalPods::from_external_ids(&rows)
    }))
}
