//! The start-up's wait for Open vSwitch: an agent that starts while ovsdb-server or
//! ovs-vswitchd is still coming back (a node upgrade restarts both) waits for them, up to
//! [`OVS_WAIT`] for both together, rather than exiting. Exiting would leave the pods cut off for
//! as long as the agent's supervisor backs off: a restarted ovs-vswitchd forwards nothing until
//! the agent has put the pipeline back. Only a socket that is not there yet or refuses is
//! waited for; any other error (a malformed target) fails at once.

use std::time::Duration;

use super::error::{Result, Step};
use cluster::config::Config;
use ovs::ovsdb;

use crate::operator::observe::Health;
use crate::pod::BRIDGE;

/// Connects to ovsdb-server and, when br0 exists, waits for its ovs-vswitchd's management
/// socket (a node without br0 yet has none: the bridge's creation waits for ovs-vswitchd).
pub(super) async fn connect(cfg: &Config, health: &Health) -> Result<ovsdb::Client> {
    // One bound for both waits below.
    let ovs_deadline = tokio::time::Instant::now() + OVS_WAIT;
    let target = cfg.ovsdb.to_string();
    let db = waiting_for_ovs(
        "ovsdb-server",
        ovs_deadline,
        || ovsdb::Client::connect(&target),
        |e| {
            matches!(
                e,
                ovsdb::Error::Connect { .. }
                    | ovsdb::Error::Closed { .. }
                    | ovsdb::Error::NotConnected { .. }
            )
        },
    )
    .await
    .with_step(|| {
        format!(
            "cannot reach ovsdb-server at {} (waited {}s): is Open vSwitch running?",
            cfg.ovsdb,
            OVS_WAIT.as_secs()
        )
    })?;
    // An ovs-vswitchd restarting beside the agent (a node upgrade restarts both) is waited
    // for: exiting would leave the pods cut off (a restarted switch forwards nothing until
    // the agent restores the pipeline) for as long as the agent's supervisor backs off.
    // (A node without br0 yet has no socket to wait for: the bridge's creation below waits
    // for ovs-vswitchd.)
    if db.with_cache(|c| c.bridge(BRIDGE).is_some()) {
        health.phase("waiting for ovs-vswitchd (br0's management socket)");
        let mgmt = cfg.bridge_mgmt.clone();
        waiting_for_ovs(
            "ovs-vswitchd",
            ovs_deadline,
            || {
                let mgmt = mgmt.clone();
                async move { tokio::net::UnixStream::connect(&mgmt).await.map(drop) }
            },
            |e: &std::io::Error| {
                matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                )
            },
        )
        .await
        .with_step(|| {
            format!(
                "opening OpenFlow to {} (waited {}s); is ovs-vswitchd running, and is that \
             br0's management socket (bridgeMgmt)?",
                cfg.bridge_mgmt.display(),
                OVS_WAIT.as_secs()
            )
        })?;
    }
    Ok(db)
}

/// How long the start-up waits for ovsdb-server and ovs-vswitchd together (restarting beside
/// the agent) before it fails.
const OVS_WAIT: Duration = Duration::from_secs(60);

/// Tries `attempt` every 200 ms while it fails as a daemon still coming up does (`retry`),
/// until `deadline` (the last error then); any other error at once. Says once, at WARN, what it
/// waits for.
async fn waiting_for_ovs<T, E, F, Fut>(
    what: &str,
    deadline: tokio::time::Instant,
    mut attempt: F,
    retry: impl Fn(&E) -> bool,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let mut said = false;
    loop {
        match attempt().await {
            Ok(v) => {
                if said {
                    tracing::info!("{what} is back");
                }
                return Ok(v);
            }
            Err(e) if !retry(&e) || tokio::time::Instant::now() >= deadline => return Err(e),
            Err(e) => {
                if !said {
                    tracing::warn!(error = %e, "waiting for {what} (up to {}s)", OVS_WAIT.as_secs());
                    said = true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
