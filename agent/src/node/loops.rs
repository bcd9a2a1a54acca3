//! What keeps the started node true: the main loop (cluster-state changes, flow drift seen by
//! the flow monitor, OVSDB drift seen by its monitor, ports OVS numbered anew, OpenFlow
//! reconnects with tun0 and flow-restore-wait, the periodic reconcile), each repair counted and
//! recorded for operators.

use std::time::Duration;

use super::error::{Result, Step};
use ovs::ovsdb::{self};

use crate::bridge::flowstore::ReconcileStats;
use crate::features::{Phase, Reason};

use super::bridge_setup::{configure_tun0, release_switch};
use super::*;

impl Daemon {
    /// Applies the difference between the whole desired flow set and br0 (at start, after an
    /// OpenFlow reconnect, periodically): meters the switch lost first (pod flows use them),
    /// then the flow store's one diff.
    pub async fn reconcile(&self) -> Result<ReconcileStats> {
        self.pods
            .restore_meters()
            .await
            .step("re-adding lost egress meters")?;
        // The audit meters before the rows that name them (a row added before its meter
        // would send its copies unmetered).
        if let Some(audit) = self
            .features
            .get::<crate::features::audit::AuditLog<crate::bridge::switch::Switch>>()
        {
            audit
                .ensure_meters_and_rows()
                .await
                .step("adding the audit meters")?;
        }
        self.store.reconcile().await.step("reconciling br0")
    }

    /// [`Self::reconcile`], timed and recorded for `sdnctl status` and the metrics as done
    /// for `reason`.
    pub(super) async fn reconcile_for(&self, reason: Reason) -> Result<ReconcileStats> {
        let began = std::time::Instant::now();
        let r = self.reconcile().await;
        let shown = r
            .as_ref()
            .map(Clone::clone)
            .map_err(|e| crate::features::contract::chain(e));
        self.observer
            .health
            .reconciled(reason.label(), began.elapsed(), &shown);
        // A full reconcile's transient copies (the switch's dump) leave free heap behind.
        crate::host::heap::release_free_memory("a full reconcile");
        r
    }

    /// Brings the features in line with the cluster state for `reason`: every feature's new
    /// and changed rows, then the pods whose namespace changed VNID (one bundle), then what
    /// nothing needs any more (only once the pods moved, see [`Phase`]); and the tenant
    /// networks' CNI config files. Failures are logged by the feature list and retried at the
    /// next change or repair.
    async fn apply_state(&self, reason: Reason) {
        self.features.sync(Phase::Apply, reason).await;
        // sync_vnids logs each namespace's change as soon as its bundle is in.
        let moved = self.pods.sync_vnids().await;
        if let Err(e) = &moved {
            tracing::warn!(error = %e, "applying VNID changes failed; retrying at the next repair")
        }
        let moved = moved.is_ok();
        self.features.sync(Phase::After { moved }, reason).await;
        self.sync_tenant_networks();
    }

    async fn repair(&self, reason: Reason, why: &str) {
        self.features.repair().await;
        self.apply_state(reason).await;
        match self.reconcile_for(reason).await {
            Ok(s) if s.added + s.deleted + s.groups > 0 => {
                crate::telemetry::metrics::metrics().repaired(if reason == Reason::SwitchRestart {
                    "switch_restart"
                } else {
                    "flows"
                });
                tracing::warn!(
                    added = s.added,
                    deleted = s.deleted,
                    why,
                    %reason,
                    changes = %s.changes.join("; "),
                    "br0 drifted; repaired"
                )
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %crate::features::contract::chain(&e), why, %reason, "reconcile failed")
            }
        }
    }

    /// After ovs-vswitchd restarted (the OpenFlow connection was re-opened): tun0 again (on the
    /// userspace datapath ovs-vswitchd re-creates it without its address and routes), the
    /// whole pipeline in one reconcile, then the switch may forward.
    async fn repair_switch(&self) {
        if let Err(e) = configure_tun0(&self.node, self.config.mtu).await {
            tracing::warn!(error = %crate::features::contract::chain(&e), "re-configuring tun0 after the switch restarted");
        }
        // The ports as the new ovs-vswitchd numbered them, before the pipeline is reconciled.
        self.pods.follow_ofports().await;
        self.repair(
            Reason::SwitchRestart,
            "OpenFlow connection re-opened (ovs-vswitchd restarted?)",
        )
        .await;
        release_switch(&self.db).await;
    }

    /// The OpenFlow connection closed: reconnects (every 50 ms for up to a second; the loop
    /// calls again while ovs-vswitchd stays away), then repairs the switch.
    async fn reconnect(&self) {
        let give_up = tokio::time::Instant::now() + Duration::from_secs(1);
        loop {
            match self.switch.client().await {
                Ok(_) => {
                    crate::telemetry::metrics::metrics()
                        .reconnects
                        .with_label_values(&["openflow"])
                        .inc();
                    self.repair_switch().await;
                    return;
                }
                Err(e) if tokio::time::Instant::now() >= give_up => {
                    tracing::debug!(error = %e, "ovs-vswitchd still unreachable");
                    return;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Runs until `shutdown` resolves: repairs at once what it learns drifted (flows changed by
    /// others, from the flow monitor; pod ports and QoS rows, from the OVSDB monitor; a closed
    /// OpenFlow connection, i.e. ovs-vswitchd restarted), and reconciles everything every 30 s
    /// (the first time 30 s after start, which already reconciled) as the safety net.
    pub async fn run_until(&self, shutdown: impl std::future::Future<Output = ()>) {
        use tokio::time::{interval_at, Instant};
        tokio::pin!(shutdown);
        let mut seen = self.switch.generation();
        let period = Duration::from_secs(30);
        let mut tick = interval_at(Instant::now() + period, period);
        let mut fast = tokio::time::interval(Duration::from_secs(1));
        let mut db_changes = self.db.watch_cache();
        db_changes.mark_unchanged();
        // The OVSDB cache version the pods were last compared with: a change is looked at for
        // the ports it touched, not for every pod (the periodic pass looks at all).
        let mut db_seen = 0;
        let mut state = self.state.clone();
        state.mark_unchanged();
        let mut had_cluster_network = state.borrow().cluster_network.is_some();
        // The state the node's wiring last applied: a change of pods only (read at ADD, and by
        // the policy task, which follows the state itself) skips the wiring, whose work grows
        // with the cluster (every remote node, every tenant).
        let mut applied = state.borrow().clone();
        let mut db_state = self.db.watch_state();
        db_state.mark_unchanged();
        let health = self.observer.health.clone();
        loop {
            health.beat();
            tokio::select! {
                _ = &mut shutdown => return,
                Ok(()) = db_state.changed() => {
                    if *db_state.borrow_and_update() == ovsdb::ConnectionState::Connected {
                        crate::telemetry::metrics::metrics()
                            .reconnects
                            .with_label_values(&["ovsdb"])
                            .inc();
                    }
                }
                Ok(()) = state.changed() => {
                    let has = state.borrow_and_update().cluster_network.is_some();
                    if had_cluster_network && !has {
                        tracing::error!(
                            "the ClusterNetwork \"default\" is gone from the cluster state: this node keeps \
                             running with the network it started with, but it cannot start again \
                             until the ClusterNetwork is back"
                        );
                    } else if !had_cluster_network && has {
                        tracing::info!("the ClusterNetwork \"default\" is back");
                    }
                    had_cluster_network = has;
                    let now = state.borrow().clone();
                    if now.same_but_pods(&applied) {
                        continue;
                    }
                    applied = now;
                    self.apply_state(Reason::StateChange).await;
                }
                updates = self.switch.drifted() => {
                    // A del-flows comes in several batches: take the burst as one repair.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let mut all = updates;
                    all.extend(self.switch.take_drift());
                    let shown: Vec<String> = all.iter().take(5).map(ToString::to_string).collect();
                    self.repair(Reason::FlowDrift, &format!(
                        "{} flow change(s) behind the agent's back: {}{}",
                        all.len(),
                        shown.join(", "),
                        if all.len() > shown.len() { ", ..." } else { "" }
                    ))
                    .await;
                }
                Ok(()) = db_changes.changed() => {
                    // Coalesce a burst of OVSDB updates (a pod ADD is several).
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    db_changes.mark_unchanged();
                    let changes = crate::bridge::seams::PortDb::changes_since(&self.db, db_seen);
                    db_seen = changes.version;
                    self.pods.repair_ports_among(changes.changed.as_ref()).await;
                    self.pods.follow_ofports_among(changes.changed.as_ref()).await;
                }
                () = self.switch.lost() => {
                    self.reconnect().await;
                    seen = self.switch.generation();
                }
                _ = tick.tick() => {
                    self.repair(Reason::Periodic, "periodic").await;
                    self.pods.repair_ports().await;
                    self.pods.follow_ofports().await;
                    super::start::return_free_memory();
                    self.pods.remove_stale_temps().await;
                }
                _ = fast.tick() => {
                    // Ports an ADD took from the pool while OVS numbered them anew.
                    self.pods.follow_ofports().await;
                    // Probe the connection; a re-open elsewhere bumps the generation.
                    let _ = self.switch.client().await;
                    let g = self.switch.generation();
                    if g != seen {
                        seen = g;
                        crate::telemetry::metrics::metrics()
                            .reconnects
                            .with_label_values(&["openflow"])
                            .inc();
                        self.repair_switch().await;
                    }
                }
            }
        }
    }

    /// Stops serving: removes the socket, so the shim answers "try again later" (and STATUS
    /// "not available") until an agent serves again. The CNI config files stay: a runtime that
    /// lost them would report the node's network as not ready and could not even stop
    /// sandboxes during a restart or an upgrade (`sdn-agent remove-cni-config` removes them
    /// when the node leaves for good). Pods, ports and flows stay: a restart picks them up with
    /// no data-plane gap.
    pub async fn stop(mut self) {
        if let Some(m) = self.maintenance.take() {
            m.abort();
        }
        self.observer.health.stopped_serving();
        if let Some(s) = self.server.take() {
            s.shutdown(Duration::from_secs(5)).await;
        }
        for e in self.endpoints.drain(..) {
            e.abort();
        }
    }
}
