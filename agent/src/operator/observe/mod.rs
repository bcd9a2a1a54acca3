//! What an operator and a kubelet see of a running agent: its health (liveness and readiness
//! checks, each named and explained), the node's state as the metrics gauges, and the HTTP
//! endpoint that serves `/metrics`, `/livez` and `/readyz` on `metricsAddress`.
//!
//! One definition of "ready" ([`NodeView::readiness`]) answers `/readyz`, CNI STATUS and the
//! `sdn_ready` gauge, so a kubelet, a container runtime and a dashboard never disagree: OVSDB
//! connected; br0 reachable over OpenFlow and holding this agent's pipeline version; the cluster
//! state loaded with this node's HostSubnet (a failing watch or a bad state file is shown but
//! does not make the node unready: the agent keeps working from its last good state, and a
//! NotReady node would stop every pod start for an API-server blip); the CNI server listening.
//!
//! "Alive" ([`NodeView::liveness`]) is narrower: the agent's main loop (repairs, cluster state)
//! has turned within the last minute and the port pool's maintenance task still runs. A slow
//! ovs-vswitchd makes the node unready, not dead: restarting the agent would not help it.
//!
//! The endpoint starts before anything else in start-up, so `/livez` answers while the agent
//! waits for its HostSubnet or for OVS, and `/readyz` says which start-up step it is in.
//!
//! An outage must not silence the tools: the checks also run in the background every second
//! ([`NodeView::watch_health`]). A scrape takes them when they answer within half a second and
//! the background result otherwise, and fills the other gauges for at most 0.3 s, so `/metrics`
//! answers within a second whatever OVS does, with `sdn_ready 0` during an outage. The CNI
//! server answers ADD, CHECK and DEL with "try again later" at once while OVSDB reconnects or
//! br0 was unreachable at the last round ([`NodeView::ovs_known_down`]). `/readyz` and STATUS
//! still ask OVS live.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hyper::{Method, StatusCode};
use local_api::Check;

use crate::telemetry::metrics::metrics;

mod health;
pub(crate) use health::Health;
pub(crate) use health::{arp_cache_free, liveness};
mod view;
pub(crate) use view::{
    pod_mac, EgressFirewalls, EgressIps, NetworkPolicies, NodeView, SCRAPE_GAUGES_WAIT,
};
mod http;
pub(crate) use http::checks_answer;
pub(crate) use http::{serve_http, HttpAnswer};

/// Why an endpoint (metrics and health, the local API) cannot listen: the setting and what to
/// do, with the cause.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub(crate) struct ListenError {
    /// The setting, the address and what to do.
    pub what: String,
    /// The cause.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// The metrics and health endpoint: `/metrics`, `/livez`, `/readyz` (`?verbose` lists every
/// check even when all pass).
#[derive(Debug, Clone, Default)]
pub(crate) struct Observer {
    /// The agent's health facts.
    pub health: Arc<Health>,
    view: Arc<OnceLock<Arc<NodeView>>>,
}

impl Observer {
    /// The node, once its parts exist.
    pub(crate) fn set_view(&self, view: Arc<NodeView>) {
        let _ = self.view.set(view);
    }

    /// The node, once its parts exist.
    pub(crate) fn view(&self) -> Option<Arc<NodeView>> {
        self.view.get().cloned()
    }

    /// The readiness checks, or the start-up step while the node is not built yet.
    pub(crate) async fn readiness(&self) -> Vec<Check> {
        match self.view() {
            Some(v) => v.readiness(true).await,
            None => vec![Check::new(
                "start-up",
                false,
                format!("starting: {}", self.health.current_phase()),
            )],
        }
    }

    /// The liveness checks.
    pub(crate) fn liveness(&self) -> Vec<Check> {
        liveness(&self.health)
    }

    /// Every series, with the node's gauges set now.
    pub(crate) async fn render_metrics(&self) -> String {
        match self.view() {
            // Never longer than a moment: gauges behind a busy lock keep their last values.
            Some(v) => {
                let _ = tokio::time::timeout(SCRAPE_GAUGES_WAIT, v.fill_gauges()).await;
                v.fill_ready().await;
            }
            None => metrics().ready.set(0),
        }
        metrics().render()
    }

    /// Answers one request of the endpoint.
    pub(crate) async fn answer(&self, method: &Method, path: &str, query: &str) -> HttpAnswer {
        if method != Method::GET && method != Method::HEAD {
            return HttpAnswer::text(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("method {method} is not allowed; use GET\n"),
            );
        }
        let verbose = query
            .split('&')
            .any(|q| q == "verbose" || q.starts_with("verbose="));
        match path {
            "/metrics" => HttpAnswer {
                status: StatusCode::OK,
                content_type: "text/plain; version=0.0.4; charset=utf-8",
                body: self.render_metrics().await,
            },
            "/livez" | "/healthz" => checks_answer("livez", &self.liveness(), verbose),
            "/readyz" => checks_answer("readyz", &self.readiness().await, verbose),
            _ => HttpAnswer::text(
                StatusCode::NOT_FOUND,
                format!("no such endpoint {path:?}; this endpoint serves /metrics, /livez and /readyz\n"),
            ),
        }
    }

    /// Starts serving on `addr`. Fails naming the setting when the address cannot be bound.
    pub(crate) async fn serve(
        &self,
        addr: SocketAddr,
    ) -> Result<tokio::task::JoinHandle<()>, ListenError> {
        // An address in use is retried for a few seconds: right after the previous agent was
        // killed, a helper it had started (iptables-restore waiting for the xtables lock) may
        // still hold its socket for a moment.
        let give_up = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        let listener = loop {
            match tokio::net::TcpListener::bind(addr).await {
                Err(e)
                    if e.kind() == std::io::ErrorKind::AddrInUse
                        && tokio::time::Instant::now() < give_up =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                r => {
                    break r.map_err(|e| ListenError {
                        what: format!(
                            "metricsAddress {addr}: cannot listen there (another agent or program \
                             uses it?); set metricsAddress to a free IP:PORT, or \"\" for no \
                             metrics endpoint"
                        ),
                        source: e.into(),
                    })?
                }
            }
        };
        let bound = listener.local_addr().unwrap_or(addr);
        tracing::info!(address = %bound, "metrics and health endpoint listening (/metrics, /livez, /readyz)");
        let me = self.clone();
        Ok(tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let me = me.clone();
                        tokio::spawn(async move {
                            serve_http(stream, move |method, path, query, _body| {
                                let me = me.clone();
                                async move { me.answer(&method, &path, &query).await }
                            })
                            .await
                        });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "metrics endpoint accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }))
    }
}

#[cfg(test)]
mod tests;
