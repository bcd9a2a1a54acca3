//! The agent's OpenFlow connection to `br0`: one persistent connection to the bridge's
//! management socket, re-opened on demand.
//!
//! The `ovs` OpenFlow client deliberately does not reconnect by itself: after a reconnect the
//! switch may have lost flows (ovs-vswitchd restarted) and only the owner of the desired state
//! can repair that. [`Switch`] therefore re-opens the connection when a request finds it closed,
//! bumps [`Switch::generation`], and the agent's reconcile loop notices the new generation and
//! has the flow store ([`crate::bridge::flowstore`]) re-apply the whole desired set. The loop learns of
//! a closed connection at once ([`Switch::lost`]), and of flows changed by anyone else
//! (`ovs-ofctl`, a deleted meter) from the flow monitor every connection opens
//! ([`Switch::drifted`]), so drift is repaired within milliseconds, not at the next poll.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ovs::flow::Flow;
use ovs::openflow::{BundleMsg, DumpFilter, FlowEvent, FlowUpdate, OfClient, OfConfig, OfError};
use tokio::sync::{mpsc, Mutex, Notify};

/// Flow changes other connections made, waiting for the reconcile loop.
#[derive(Debug, Default)]
struct Drift {
    updates: std::sync::Mutex<Vec<FlowUpdate>>,
    notify: Notify,
}

/// The OpenFlow connection to one bridge.
#[derive(Debug)]
pub struct Switch {
    mgmt: PathBuf,
    conn: Mutex<Option<OfClient>>,
    generation: AtomicU64,
    drift: Arc<Drift>,
}

impl Switch {
    /// The switch at the bridge management socket `mgmt` (e.g. `/run/openvswitch/br0.mgmt`),
    /// not connected yet: the first request (or [`Switch::client`]) connects, and requests
    /// meanwhile wait for that connection.
    pub fn new(mgmt: &Path) -> Switch {
        Switch {
            mgmt: mgmt.to_path_buf(),
            conn: Mutex::new(None),
            generation: AtomicU64::new(0),
            drift: Arc::default(),
        }
    }

    /// The management socket.
    pub fn mgmt(&self) -> &Path {
        &self.mgmt
    }

    /// How many times a connection was opened: a change means the switch may have lost state.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The live connection, re-opened if the previous one closed. Every new connection gets a
    /// flow monitor: flows other connections add, delete or modify (`ovs-ofctl del-flows`, a
    /// deleted meter taking its flows along) are queued for [`Switch::drifted`].
    pub async fn client(&self) -> Result<OfClient, OfError> {
        let mut conn = self.conn.lock().await;
        if let Some(c) = conn.as_ref() {
            if c.closed_reason().is_none() {
                return Ok(c.clone());
            }
            tracing::warn!(
                bridge = %self.mgmt.display(),
                reason = c.closed_reason().unwrap_or_default(),
                "OpenFlow connection closed; reconnecting"
            );
            // Forget it, so failed attempts while ovs-vswitchd is down do not log again.
            *conn = None;
        }
        let target = format!("unix:{}", self.mgmt.display());
        let c = OfClient::connect_with(&target, OfConfig::default()).await?;
        match c.monitor_flows().await {
            Ok(rx) => {
                tokio::spawn(forward_drift(rx, self.drift.clone()));
            }
            Err(e) => tracing::warn!(
                bridge = %self.mgmt.display(), error = %e,
                "cannot monitor the flows of the bridge: flows changed behind the agent's back are repaired only by the periodic reconcile"
            ),
        }
        self.generation.fetch_add(1, Ordering::SeqCst);
        *conn = Some(c.clone());
        Ok(c)
    }

    /// Whether a connection is open now (none was, or it closed: ovs-vswitchd went away).
    pub async fn connected(&self) -> bool {
        self.conn
            .lock()
            .await
            .as_ref()
            .is_some_and(|c| c.closed_reason().is_none())
    }

    /// Resolves when the current connection closes (at once when there is none), so the owner
    /// reconnects and replays its state without waiting for a poll.
    pub async fn lost(&self) {
        let current = self.conn.lock().await.clone();
        if let Some(c) = current {
            c.wait_closed().await;
        }
    }

    /// The queued flow changes, without waiting.
    pub fn take_drift(&self) -> Vec<FlowUpdate> {
        std::mem::take(
            &mut *self
                .drift
                .updates
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Waits until other connections changed flows of the bridge, and returns those changes
    /// (a pause of the monitor's stream counts as a change: anything may have been missed).
    pub async fn drifted(&self) -> Vec<FlowUpdate> {
        loop {
            let taken = self.take_drift();
            if !taken.is_empty() {
                return taken;
            }
            self.drift.notify.notified().await;
        }
    }

    /// Applies `msgs` in one atomic bundle.
    pub async fn bundle(&self, msgs: &[BundleMsg]) -> Result<(), OfError> {
        self.client().await?.bundle(msgs).await
    }

    /// The flows `filter` selects.
    pub async fn dump(&self, filter: &DumpFilter) -> Result<Vec<Flow>, OfError> {
        self.client().await?.dump_flows(filter).await
    }

    /// The flows `filter` selects, each handed to `f` as it is decoded.
    pub async fn for_each_flow(
        &self,
        filter: &DumpFilter,
        f: impl FnMut(Flow) + Send,
    ) -> Result<(), OfError> {
        self.client().await?.for_each_flow(filter, f).await
    }
}

/// Queues a monitor's updates that are not this connection's own work, until the connection
/// closes.
async fn forward_drift(mut rx: mpsc::UnboundedReceiver<Vec<FlowUpdate>>, drift: Arc<Drift>) {
    while let Some(batch) = rx.recv().await {
        let foreign: Vec<FlowUpdate> = batch
            .into_iter()
            .filter(|u| u.event != FlowEvent::Abbreviated)
            .collect();
        if foreign.is_empty() {
            continue;
        }
        drift
            .updates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(foreign);
        drift.notify.notify_one();
    }
}
