//! The agent's OpenFlow side of `br0`: one persistent connection to the bridge's management
//! socket, re-opened on demand, and the reconciler that turns a desired flow set into the smallest
//! atomic change.
//!
//! The `ovs` OpenFlow client deliberately does not reconnect by itself: after a reconnect the
//! switch may have lost flows (ovs-vswitchd restarted) and only the owner of the desired state
//! can repair that. [`Switch`] therefore re-opens the connection when a request finds it closed,
//! bumps [`Switch::generation`], and the agent's reconcile loop notices the new generation and
//! re-applies the whole desired set with [`Switch::reconcile`].
//!
//! [`diff`] keys flows by what OpenFlow keys them by (table, priority, match): a desired flow
//! missing or different on the bridge is (re-)added, a flow on the bridge that nobody desires is
//! deleted strictly, and everything is applied in one bundle so no packet sees a half-applied
//! change. Flows that are already right are not touched, so their counters and established
//! traffic are undisturbed by a restart of the agent.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use ovs::flow::{Flow, Match};
use ovs::openflow::flow_mod::FlowMod;
use ovs::openflow::{BundleMsg, DumpFilter, OfClient, OfConfig, OfError};
use tokio::sync::Mutex;

/// What [`Switch::reconcile`] changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReconcileStats {
    /// Flows on the bridge before.
    pub existing: usize,
    /// Flows desired.
    pub desired: usize,
    /// Flows added or replaced.
    pub added: usize,
    /// Flows deleted.
    pub deleted: usize,
}

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

    /// Makes the flows selected by `scope` (all flows, or one cookie under a mask) equal to
    /// `desired` with one bundle holding only the difference.
    pub async fn reconcile(
        &self,
        scope: &DumpFilter,
        desired: &[Flow],
    ) -> Result<ReconcileStats, OfError> {
        let client = self.client().await?;
        let existing = client.dump_flows(scope).await?;
        let msgs = diff(desired, &existing);
        let mut stats = ReconcileStats {
            existing: existing.len(),
            desired: desired.len(),
            ..ReconcileStats::default()
        };
        for m in &msgs {
            match m {
                BundleMsg::Flow(fm) if fm.command.is_delete() => stats.deleted += 1,
                _ => stats.added += 1,
            }
        }
        client.bundle(&msgs).await?;
        Ok(stats)
    }
}

type Key = (u8, u16, Match);

fn key(f: &Flow) -> Key {
    (f.table, f.priority, f.matches.clone())
}

/// The bundle messages that turn `existing` into `desired`: strict deletes first, then adds.
/// An empty result means the bridge already has exactly the desired flows.
pub fn diff(desired: &[Flow], existing: &[Flow]) -> Vec<BundleMsg> {
    let want: HashMap<Key, &Flow> = desired.iter().map(|f| (key(f), f)).collect();
    let have: BTreeMap<usize, Key> = existing.iter().map(key).enumerate().collect();
    let have_by_key: HashMap<&Key, &Flow> = have.values().zip(existing.iter()).collect();
    let mut msgs = Vec::new();
    for (k, f) in have.values().zip(existing.iter()) {
        if !want.contains_key(k) {
            msgs.push(BundleMsg::Flow(FlowMod::delete_strict(f)));
        }
    }
    for f in desired {
        match have_by_key.get(&key(f)) {
            Some(old) if same(old, f) => {}
            _ => msgs.push(BundleMsg::add(f.clone())),
        }
    }
    msgs
}

/// Equal as far as the switch is concerned (a dumped flow against a built one).
fn same(a: &Flow, b: &Flow) -> bool {
    a.cookie == b.cookie
        && a.actions == b.actions
        && a.goto_table == b.goto_table
        && a.idle_timeout == b.idle_timeout
        && a.hard_timeout == b.hard_timeout
}

#[cfg(test)]
mod tests {
    use super::*;
    use ovs::flow::Action;

    fn f(table: u8, prio: u16, port: u32, out: u32) -> Flow {
        Flow::new(table, prio)
            .matching(Match::any().in_port(port))
            .action(Action::Output(out))
    }

    #[test]
    fn diff_touches_only_what_differs() {
        let existing = vec![f(0, 10, 1, 2), f(0, 10, 2, 1), f(0, 5, 3, 3)];
        let desired = vec![f(0, 10, 1, 2), f(0, 10, 2, 4), f(0, 7, 9, 9)];
        let msgs = diff(&desired, &existing);
        let text: Vec<String> = msgs.iter().map(BundleMsg::describe).collect();
        assert_eq!(msgs.len(), 3, "{text:?}");
        assert!(matches!(&msgs[0], BundleMsg::Flow(fm) if fm.command.is_delete()));
        assert!(text[0].contains("in_port=3"), "{text:?}");
        assert!(text[1].contains("in_port=2") && text[1].contains("output:4"));
        assert!(text[2].contains("in_port=9"));
        assert!(diff(&desired, &desired).is_empty());
    }

    #[test]
    fn cookie_change_is_a_difference() {
        let a = f(0, 10, 1, 2);
        let b = a.clone().cookie(7);
        assert_eq!(diff(&[b], &[a]).len(), 1);
    }
}
