//! The agent's local API: JSON over HTTP/1.1 on a root-only Unix socket (`apiSocket`, by
//! default `api.sock` next to the CNI socket), for `sdnctl` and for operators' own tools.
//!
//! Why the agent answers instead of `sdnctl` reading OVS and the state directory itself: the
//! agent is the one that knows which pod owns a port, which tenant a VNID is, which cookie
//! belongs to whom, what drifted and what it repaired, in both cluster-state modes. Why a socket
//! of its own: the CNI socket speaks the shim's protocol and nothing else, and the two have
//! different clients. The socket is made as the CNI socket is (0700 directory owned by the
//! agent, 0600 socket, stale socket removed only when nobody listens) and every connection's
//! peer must be root.
//!
//! Endpoints (`GET` unless said):
//! - `/v1/status`: connections, pipeline version, readiness and liveness checks, the last
//!   reconcile and what it repaired, cluster-state problems, counts.
//! - `/v1/pods[?namespace=NS]`: every local pod with its sandbox, address, MAC, port, ofport,
//!   VNID, cookie, host ports and bandwidth.
//! - `/v1/namespaces`: NetNamespaces with their VNIDs and local pod counts.
//! - `/v1/flows[?pod=NS/NAME|table=NAME|tenant=NS]`: br0's flows as the switch holds them,
//!   each with its table name and the object that owns it (by cookie).
//! - `/v1/log`: the agent's recent log lines; `PUT /v1/log-level` (body: a level or filter)
//!   changes the level at once, `GET` shows it.
//! - `POST /v1/trace` (`{"src", "dst", "proto", "vni", "spoof_ip", "spoof_mac"}`): one packet
//!   through br0's real tables (`ofproto/trace`), each step named, the verdict in words
//!   ([`crate::operator::trace`]).
//! - `/v1/bundle`: everything `sdnctl bundle` archives, as `{file name: content}`.
//! - `/v1/egress-firewall`: every tenant's egress firewall in effect, rule by rule.
//! - `/v1/network-policies`: networkpolicy mode: the policies that select this node's pods,
//!   which pods they isolate, the rules with rows here and the row counts;
//! - `/v1/egress-ips`: every tenant's egress IPs: where its traffic leaves, each IP's node and
//!   state, the IPs this node holds and the watched nodes (online or offline).
//! - `/v1/config`: the configuration in force (it holds no secrets: a kubeconfig is a path).
//! - `/metrics`, `/livez`, `/readyz`: as on the metrics endpoint.
//!
//! Errors are `{"error": "..."}` with a 4xx/5xx status, each saying what to do.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Bytes;
use hyper::{Method, StatusCode};
use serde_json::json;

use crate::operator::observe::{HttpAnswer, NodeView};
use local_api::{Check, TraceRequest};

mod answers;
pub(crate) use answers::{
    egress_entries, egress_ips, flow_entries, namespace_entries, network_policies, pod_entries,
    status,
};
mod bundle;
pub(crate) use bundle::bundle;

fn err(status: StatusCode, msg: impl Into<String>) -> HttpAnswer {
    HttpAnswer::json(status, &json!({ "error": msg.into() }))
}

fn query_params(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = |b: u8| (b as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Pretty JSON of any serializable value, for the bundle's files.
mod erased {
    /// A value the bundle writes as JSON.
    pub(super) trait Json {
        /// Pretty JSON with a final newline.
        fn json(&self) -> String;
    }
    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> String {
            serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
        }
    }
}

/// Answers one API request.
pub(crate) async fn answer(
    view: &NodeView,
    method: &Method,
    path: &str,
    query: &str,
    body: &Bytes,
) -> HttpAnswer {
    let q = query_params(query);
    let get = method == Method::GET || method == Method::HEAD;
    match (path, get) {
        ("/v1/status", true) => HttpAnswer::json(StatusCode::OK, &status(view).await),
        ("/v1/pods", true) => {
            let mut pods = pod_entries(view).await;
            if let Some(ns) = q.get("namespace") {
                pods.retain(|p| &p.namespace == ns);
            }
            HttpAnswer::json(StatusCode::OK, &pods)
        }
        ("/v1/namespaces", true) => {
            HttpAnswer::json(StatusCode::OK, &namespace_entries(view).await)
        }
        ("/v1/flows", true) => match flow_entries(view, &q).await {
            Ok(f) => HttpAnswer::json(StatusCode::OK, &f),
            Err(e) => e,
        },
        ("/v1/config", true) => HttpAnswer::json(StatusCode::OK, &view.config),
        ("/v1/egress-firewall", true) => {
            HttpAnswer::json(StatusCode::OK, &egress_entries(view).await)
        }
        ("/v1/egress-ips", true) => HttpAnswer::json(StatusCode::OK, &egress_ips(view).await),
        ("/v1/network-policies", true) => HttpAnswer::json(StatusCode::OK, &network_policies(view)),
        ("/v1/bundle", true) => HttpAnswer::json(StatusCode::OK, &bundle(view).await),
        ("/v1/trace", false) if method == Method::POST => {
            let req: TraceRequest = match serde_json::from_slice(body) {
                Ok(r) => r,
                Err(e) => {
                    return err(
                        StatusCode::BAD_REQUEST,
                        format!("the trace request is not {{\"src\", \"dst\", \"proto\"}}: {e}"),
                    )
                }
            };
            match crate::operator::trace::trace(view, &req).await {
                Ok(t) => HttpAnswer::json(StatusCode::OK, &t),
                Err(e @ crate::operator::trace::TraceError::BadRequest(_)) => {
                    err(StatusCode::BAD_REQUEST, e.to_string())
                }
                Err(e) => err(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
            }
        }
        ("/v1/trace", true) => err(
            StatusCode::METHOD_NOT_ALLOWED,
            "use POST /v1/trace with {\"src\", \"dst\", \"proto\"}",
        ),
        ("/v1/log", true) => match crate::telemetry::logging::logging() {
            Some(l) if q.get("format").map(String::as_str) == Some("json") => HttpAnswer {
                status: StatusCode::OK,
                content_type: "application/json",
                body: l.recent_json(),
            },
            Some(l) => HttpAnswer::text(StatusCode::OK, l.recent()),
            None => err(StatusCode::NOT_FOUND, "this agent keeps no log in memory"),
        },
        ("/v1/log-level", _) => match (crate::telemetry::logging::logging(), method.as_str()) {
            (None, _) => err(
                StatusCode::NOT_FOUND,
                "this agent's logger cannot change level",
            ),
            (Some(l), "GET") => HttpAnswer::json(StatusCode::OK, &json!({ "level": l.level() })),
            (Some(l), "PUT") => {
                let text = String::from_utf8_lossy(body);
                match l.set_level(&text) {
                    Ok(previous) => HttpAnswer::json(
                        StatusCode::OK,
                        &json!({ "level": l.level(), "previous": previous }),
                    ),
                    Err(e) => err(StatusCode::BAD_REQUEST, e),
                }
            }
            (Some(_), m) => err(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("method {m} is not allowed on /v1/log-level; use GET or PUT"),
            ),
        },
        ("/metrics", true) => {
            view.fill_gauges().await;
            view.fill_ready().await;
            HttpAnswer {
                status: StatusCode::OK,
                content_type: "text/plain; version=0.0.4; charset=utf-8",
                body: crate::telemetry::metrics::metrics().render(),
            }
        }
        ("/livez", true) => {
            let c = view.liveness();
            checks_json(&c)
        }
        ("/readyz", true) => {
            let c = view.readiness(true).await;
            checks_json(&c)
        }
        (
            "/v1/status" | "/v1/pods" | "/v1/namespaces" | "/v1/flows" | "/v1/config" | "/v1/log"
            | "/metrics" | "/livez" | "/readyz",
            false,
        ) => err(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("method {method} is not allowed on {path}; use GET"),
        ),
        _ => err(
            StatusCode::NOT_FOUND,
            format!("no such endpoint {path:?}; see the agent::api docs (sdnctl --help)"),
        ),
    }
}

fn checks_json(checks: &[Check]) -> HttpAnswer {
    let ok = checks.iter().all(|c| c.ok);
    HttpAnswer::json(
        if ok {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        &json!({ "ok": ok, "checks": checks }),
    )
}

/// Starts the API on `socket` (see the module docs for the socket's hygiene).
pub(crate) async fn serve(
    socket: &Path,
    view: Arc<NodeView>,
) -> Result<tokio::task::JoinHandle<()>, crate::operator::observe::ListenError> {
    let listener = crate::cni::server::bind_private_socket(socket)
        .await
        .map_err(|e| crate::operator::observe::ListenError {
            what: format!("starting the local API on {} (apiSocket)", socket.display()),
            source: e.into(),
        })?;
    tracing::info!(socket = %socket.display(), "local API listening (sdnctl)");
    let socket = socket.to_path_buf();
    Ok(tokio::spawn(async move {
        let _cleanup = crate::cni::server::RemoveOnDrop::new(&socket);
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let refusal = match stream.peer_cred() {
                        Ok(c) if c.uid() == 0 => None,
                        Ok(c) => Some(format!("peer uid {} is not root", c.uid())),
                        Err(e) => Some(format!("peer credentials unavailable: {e}")),
                    };
                    let view = view.clone();
                    tokio::spawn(async move {
                        crate::operator::observe::serve_http(
                            stream,
                            move |method, path, query, body| {
                                let view = view.clone();
                                let refusal = refusal.clone();
                                async move {
                                    if let Some(why) = refusal {
                                        tracing::warn!(%why, "refusing a local API connection");
                                        return err(
                                            StatusCode::FORBIDDEN,
                                            format!("{why}: the local API is root only"),
                                        );
                                    }
                                    answer(&view, &method, &path, &query, &body).await
                                }
                            },
                        )
                        .await
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "local API accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::observe::pod_mac;

    #[test]
    fn query_and_mac() {
        let q = query_params("pod=tenant-a%2Fweb&table=local_ip&x");
        assert_eq!(q["pod"], "tenant-a/web");
        assert_eq!(q["table"], "local_ip");
        assert_eq!(q["x"], "");
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(pod_mac("10.128.0.2".parse().unwrap()), "0a:58:0a:80:00:02");
    }
}
