//! The agent's OpenFlow connection to `br0`: one persistent connection to the bridge's
//! management socket, re-opened on demand.
//!
//! The `ovs` OpenFlow client deliberately does not reconnect by itself: after a reconnect the
//! switch may have lost flows (ovs-vswitchd restarted) and only the owner of the desired state
//! can repair that. [`Switch`] therefore re-opens the connection when a request finds it closed,
//! bumps [`Switch::generation`], and the agent's reconcile loop notices the new generation and
//! has the flow store ([`crate::flowstore`]) re-apply the whole desired set.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use ovs::flow::Flow;
use ovs::openflow::{BundleMsg, DumpFilter, OfClient, OfConfig, OfError};
use tokio::sync::Mutex;

/// The OpenFlow connection to one bridge.
#[derive(Debug)]
pub struct Switch {
    mgmt: PathBuf,
    conn: Mutex<Option<OfClient>>,
    generation: AtomicU64,
}

impl Switch {
    /// Connects to the bridge management socket `mgmt` (e.g. `/run/openvswitch/br0.mgmt`).
    pub async fn connect(mgmt: &Path) -> Result<Switch, OfError> {
        let sw = Switch {
            mgmt: mgmt.to_path_buf(),
            conn: Mutex::new(None),
            generation: AtomicU64::new(0),
        };
        sw.client().await?;
        Ok(sw)
    }

    /// The management socket.
    pub fn mgmt(&self) -> &Path {
        &self.mgmt
    }

    /// How many times a connection was opened: a change means the switch may have lost state.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The live connection, re-opened if the previous one closed.
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
        }
        let target = format!("unix:{}", self.mgmt.display());
        let c = OfClient::connect_with(&target, OfConfig::default()).await?;
        self.generation.fetch_add(1, Ordering::SeqCst);
        *conn = Some(c.clone());
        Ok(c)
    }

    /// Applies `msgs` in one atomic bundle.
    pub async fn bundle(&self, msgs: &[BundleMsg]) -> Result<(), OfError> {
        self.client().await?.bundle(msgs).await
    }

    /// The flows `filter` selects.
    pub async fn dump(&self, filter: &DumpFilter) -> Result<Vec<Flow>, OfError> {
        self.client().await?.dump_flows(filter).await
    }
}
