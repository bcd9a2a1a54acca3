//! The commands the running agent answers over its root-only local API (`status`, `pods`,
//! `flows`, `trace`, `egress-firewall`, `egress-ips`, `network-policies`, `bundle`,
//! `log-level`, `log`, and `namespaces` in Kubernetes mode), in both cluster-state modes.

use std::path::{Path, PathBuf};

use cluster::config::Config;

use crate::view;
use crate::{out, Cli, Cmd, Failure};

/// The agent's configuration named by `--config` (or `$SDN_CONFIG`), if any.
pub(crate) fn agent_config(a: &Cli) -> Result<Option<Config>, Failure> {
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

/// The agent's answer `v`: as it is with `--json`, else read as a `T` and shown by `render`.
fn show<T: serde::de::DeserializeOwned>(
    a: &Cli,
    v: serde_json::Value,
    render: impl FnOnce(&T) -> String,
) -> Result<(), Failure> {
    if a.json {
        return out(&format!("{v:#}\n"));
    }
    let typed: T = serde_json::from_value(v).map_err(|e| Failure::Error(e.to_string()))?;
    out(&render(&typed))
}

/// The running agent's audit log file, when an agent answers.
pub(crate) fn agent_audit_log(a: &Cli) -> Option<PathBuf> {
    let client = local_api::Client::new(&api_socket(a).ok()?);
    let rt = runtime().ok()?;
    // A short wait: this only finds the file; an agent that does not answer leaves the default.
    let v = rt
        .block_on(async {
            tokio::time::timeout(
                std::time::Duration::from_secs(3),
                client.get_json::<serde_json::Value>("/v1/status"),
            )
            .await
        })
        .ok()?
        .ok()?;
    v["audit_log"].as_str().map(PathBuf::from)
}

/// The commands answered by the running agent.
pub(crate) fn ask_agent(a: &Cli, cmd: &Cmd) -> Result<(), Failure> {
    let client = local_api::Client::new(&api_socket(a)?);
    let rt = runtime()?;
    let get = |path: &str| -> Result<serde_json::Value, Failure> {
        rt.block_on(client.get_json::<serde_json::Value>(path))
            .map_err(|e| Failure::Error(e.to_string()))
    };
    match cmd {
        Cmd::Status => show(a, get("/v1/status")?, view::status),
        Cmd::Pods { namespace } => {
            let path = match namespace {
                Some(ns) => format!("/v1/pods?namespace={}", view::encode(ns)),
                None => "/v1/pods".into(),
            };
            show(a, get(&path)?, |p: &Vec<local_api::PodEntry>| view::pods(p))
        }
        Cmd::Flows { pod, table, tenant } => {
            let q: Vec<String> = [("pod", pod), ("table", table), ("tenant", tenant)]
                .into_iter()
                .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", view::encode(v))))
                .collect();
            let v = get(&format!("/v1/flows?{}", q.join("&")))?;
            show(a, v, |f: &Vec<local_api::FlowEntry>| view::flows(f))
        }
        Cmd::Trace { .. } => trace(a, cmd, &client, &rt),
        Cmd::EgressFirewall => show(a, get("/v1/egress-firewall")?, |e: &Vec<_>| view::egress(e)),
        Cmd::EgressIps => show(a, get("/v1/egress-ips")?, view::egress_ips),
        Cmd::NetworkPolicies => show(a, get("/v1/network-policies")?, view::network_policies),
        Cmd::Bundle { output } => bundle(a, output.as_deref(), &client, &rt),
        Cmd::LogLevel { level } => {
            let v: serde_json::Value = match level {
                None => get("/v1/log-level")?,
                Some(l) => rt
                    .block_on(client.put_json::<serde_json::Value>("/v1/log-level", l))
                    .map_err(|e| Failure::Error(e.to_string()))?,
            };
            if a.json {
                return out(&format!("{v:#}\n"));
            }
            let level = v["level"].as_str().unwrap_or("");
            match v["previous"].as_str() {
                Some(p) => out(&format!("log level {level} (was {p})\n")),
                None => out(&format!("log level {level}\n")),
            }
        }
        Cmd::Log => {
            let path = if a.json {
                "/v1/log?format=json"
            } else {
                "/v1/log"
            };
            let (status, body) = rt
                .block_on(client.call(local_api::client::Method::GET, path, ""))
                .map_err(|e| Failure::Error(e.to_string()))?;
            if !status.is_success() {
                return Err(Failure::Error(body));
            }
            out(&body)
        }
        Cmd::Namespaces => {
            let v = get("/v1/namespaces")?;
            if a.json {
                let v = serde_json::json!({ "namespaces": v, "source": "agent" });
                return out(&format!("{v:#}\n"));
            }
            show(a, v, |n: &Vec<local_api::NamespaceEntry>| {
                view::namespaces(n)
            })
        }
        _ => Err(Failure::Error("not an agent command".into())),
    }
}

/// `sdnctl trace`: the request from the flags, the agent's answer in words.
fn trace(
    a: &Cli,
    cmd: &Cmd,
    client: &local_api::Client,
    rt: &tokio::runtime::Runtime,
) -> Result<(), Failure> {
    let Cmd::Trace {
        src,
        dst,
        proto,
        vni,
        spoof_ip,
        spoof_mac,
        raw,
        live,
    } = cmd
    else {
        return Err(Failure::Error("not a trace".into()));
    };
    let req = local_api::TraceRequest {
        src: src.clone(),
        dst: dst.clone(),
        proto: proto.clone().unwrap_or_default(),
        vni: *vni,
        spoof_ip: *spoof_ip,
        spoof_mac: spoof_mac.clone(),
        live: *live,
    };
    let body = serde_json::to_string(&req).map_err(|e| Failure::Error(e.to_string()))?;
    let v: serde_json::Value = rt
        .block_on(client.post_json("/v1/trace", &body))
        .map_err(|e| Failure::Error(e.to_string()))?;
    show(a, v, |t: &local_api::TraceResult| view::trace(t, *raw))
}

/// `sdnctl bundle`: the agent's files, with the status in words, into one tarball.
fn bundle(
    a: &Cli,
    output: Option<&Path>,
    client: &local_api::Client,
    rt: &tokio::runtime::Runtime,
) -> Result<(), Failure> {
    let mut files: std::collections::BTreeMap<String, String> = rt
        .block_on(client.get_json("/v1/bundle"))
        .map_err(|e| Failure::Error(e.to_string()))?;
    let node = files
        .get("status.json")
        .and_then(|s| serde_json::from_str::<local_api::Status>(s).ok());
    if let Some(st) = &node {
        files.insert("status.txt".into(), view::status(st));
    }
    let name = node.as_ref().map_or("node", |s| s.node.as_str());
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let base = format!("sdn-bundle-{name}-{stamp}");
    let path = output.map_or_else(
        || PathBuf::from(format!("{base}.tar.gz")),
        Path::to_path_buf,
    );
    write_bundle(&path, &base, &files)?;
    if a.json {
        let v = serde_json::json!({
            "file": path,
            "files": files.keys().collect::<Vec<_>>(),
        });
        return out(&format!("{v:#}\n"));
    }
    out(&format!(
        "wrote {} ({} files: {})\n",
        path.display(),
        files.len(),
        files.keys().cloned().collect::<Vec<_>>().join(", ")
    ))
}

/// Writes `files` as `base/<name>` into a gzipped tar at `path` (mode 0600: it describes the
/// node), whole or not at all ([`cluster::files`]).
fn write_bundle(
    path: &Path,
    base: &str,
    files: &std::collections::BTreeMap<String, String>,
) -> Result<(), Failure> {
    let fail = |e: std::io::Error| Failure::Error(format!("writing {}: {e}", path.display()));
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
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
    let bytes = tar.into_inner().and_then(|gz| gz.finish()).map_err(fail)?;
    cluster::files::write(path, &bytes, 0o600, cluster::files::Durability::Process).map_err(fail)
}
