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

/// The commands answered by the running agent.
pub(crate) fn ask_agent(a: &Cli, cmd: &Cmd) -> Result<(), Failure> {
    let client = local_api::Client::new(&api_socket(a)?);
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
            let st: local_api::Status =
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
            let pods: Vec<local_api::PodEntry> =
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
            let flows: Vec<local_api::FlowEntry> =
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
            let req = local_api::TraceRequest {
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
            let t: local_api::TraceResult =
                serde_json::from_value(v).map_err(|e| Failure::Error(e.to_string()))?;
            out(&view::trace(&t, *raw))
        }
        Cmd::EgressFirewall => {
            let v = get("/v1/egress-firewall".into())?;
            if a.json {
                return pretty(&v);
            }
            let e: Vec<local_api::EgressEntry> =
                serde_json::from_value(v).map_err(|e| Failure::Error(e.to_string()))?;
            out(&view::egress(&e))
        }
        Cmd::EgressIps => {
            let v = get("/v1/egress-ips".into())?;
            if a.json {
                return pretty(&v);
            }
            let e: local_api::EgressIpsView =
                serde_json::from_value(v).map_err(|e| Failure::Error(e.to_string()))?;
            out(&view::egress_ips(&e))
        }
        Cmd::NetworkPolicies => {
            let v = get("/v1/network-policies".into())?;
            if a.json {
                return pretty(&v);
            }
            let e: local_api::NetworkPoliciesView =
                serde_json::from_value(v).map_err(|e| Failure::Error(e.to_string()))?;
            out(&view::network_policies(&e))
        }
        Cmd::Bundle { output } => {
            let files: std::collections::BTreeMap<String, String> = rt
                .block_on(client.get_json("/v1/bundle"))
                .map_err(|e| Failure::Error(e.to_string()))?;
            let node = files
                .get("status.json")
                .and_then(|s| serde_json::from_str::<local_api::Status>(s).ok());
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
                .block_on(client.call(local_api::client::Method::GET, path, ""))
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
            let ns: Vec<local_api::NamespaceEntry> =
                serde_json::from_value(v).map_err(|e| Failure::Error(e.to_string()))?;
            out(&view::namespaces(&ns))
        }
        _ => Err(Failure::Error("not an agent command".into())),
    }
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
