//! The agent's own health facts, written by the node as it runs (start-up step, serving, the
//! main loop's heartbeat, reconciles, repairs, reconnects), and the liveness checks read from
//! them.

use crate::lock;
use crate::telemetry::metrics::metrics;
use local_api::{Check, ReconcileRecord};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The main loop counts as stuck when it has not turned for this long.
pub(crate) const LOOP_STALL: Duration = Duration::from_secs(60);

/// The agent's own health facts, written by the daemon as it runs.
#[derive(Debug)]
pub(crate) struct Health {
    pub(crate) started: Instant,
    pub(crate) phase: Mutex<String>,
    /// ms after `started` of the main loop's last turn; 0 before it runs.
    pub(crate) heartbeat_ms: AtomicU64,
    pub(crate) ready_ms: AtomicU64,
    pub(crate) last_reconcile: Mutex<Option<ReconcileRecord>>,
    pub(crate) maintenance: Mutex<Option<tokio::task::AbortHandle>>,
    pub(crate) cni_socket: Mutex<Option<std::path::PathBuf>>,
    /// The readiness checks [`NodeView::watch_health`] ran last (a scrape reads them, never
    /// waits for OVS), and whether br0 was unreachable over OpenFlow then.
    pub(crate) latest: Mutex<Option<(Vec<Check>, Option<String>)>>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            started: Instant::now(),
            phase: Mutex::new("starting".into()),
            heartbeat_ms: AtomicU64::new(0),
            ready_ms: AtomicU64::new(0),
            last_reconcile: Mutex::default(),
            maintenance: Mutex::default(),
            cni_socket: Mutex::default(),
            latest: Mutex::default(),
        }
    }
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Health {
    /// The readiness checks of the last background round, if one ran.
    pub(crate) fn latest_readiness(&self) -> Option<Vec<Check>> {
        lock(&self.latest).as_ref().map(|(c, _)| c.clone())
    }

    /// Why br0 was unreachable over OpenFlow at the last background round, if it was.
    pub(crate) fn openflow_unreachable(&self) -> Option<String> {
        lock(&self.latest).as_ref().and_then(|(_, u)| u.clone())
    }

    /// Notes the start-up step the agent is in (shown by `/readyz` until it serves).
    pub(crate) fn phase(&self, what: &str) {
        *lock(&self.phase) = what.to_string();
    }

    /// The main loop turned.
    pub(crate) fn beat(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.heartbeat_ms.store(ms.max(1), Ordering::SeqCst);
    }

    /// The agent serves CNI requests on `socket` from now on.
    pub(crate) fn serving(&self, socket: &std::path::Path) {
        let took = self.started.elapsed();
        self.ready_ms
            .store(took.as_millis() as u64, Ordering::SeqCst);
        metrics().ready_seconds.set(took.as_secs_f64());
        *lock(&self.cni_socket) = Some(socket.to_path_buf());
        self.phase("serving");
    }

    /// The CNI server stopped.
    pub(crate) fn stopped_serving(&self) {
        *lock(&self.cni_socket) = None;
        self.phase("stopping");
    }

    /// The port pool's maintenance task, whose end means the agent is not alive.
    pub(crate) fn maintenance(&self, task: tokio::task::AbortHandle) {
        *lock(&self.maintenance) = Some(task);
    }

    /// Records a reconcile (and counts it in the metrics).
    pub(crate) fn reconciled(
        &self,
        reason: &str,
        took: Duration,
        result: &Result<crate::bridge::flowstore::ReconcileStats, String>,
    ) {
        metrics()
            .reconcile_duration
            .with_label_values(&[reason])
            .observe(took.as_secs_f64());
        let mut r = ReconcileRecord {
            reason: reason.to_string(),
            at_unix: unix_now(),
            took_ms: took.as_millis() as u64,
            ..ReconcileRecord::default()
        };
        match result {
            Ok(s) => {
                r.desired = s.desired;
                r.added = s.added;
                r.deleted = s.deleted;
                r.changes = s.changes.clone();
                if !s.refused.is_empty() {
                    r.error = Some(format!(
                        "{} message(s) left out, they cannot be encoded: {}",
                        s.refused.len(),
                        s.refused.join("; ")
                    ));
                }
            }
            Err(e) => r.error = Some(e.clone()),
        }
        *lock(&self.last_reconcile) = Some(r);
    }

    /// The last reconcile.
    pub(crate) fn last_reconcile(&self) -> Option<ReconcileRecord> {
        lock(&self.last_reconcile).clone()
    }

    /// Seconds the process has run.
    pub(crate) fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Seconds from start to serving (0 while starting).
    pub(crate) fn ready_after(&self) -> Option<Duration> {
        match self.ready_ms.load(Ordering::SeqCst) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    pub(crate) fn current_phase(&self) -> String {
        lock(&self.phase).clone()
    }
}

pub(crate) fn liveness(health: &Health) -> Vec<Check> {
    liveness_at(health, health.started.elapsed().as_millis() as u64)
}

/// The liveness checks as of `now` ms after start.
pub(crate) fn liveness_at(health: &Health, now: u64) -> Vec<Check> {
    let mut out = Vec::new();
    let beat = health.heartbeat_ms.load(Ordering::SeqCst);
    out.push(if beat == 0 {
        Check::new(
            "main-loop",
            true,
            format!("starting ({})", health.current_phase()),
        )
    } else {
        let age = Duration::from_millis(now.saturating_sub(beat));
        if age <= LOOP_STALL {
            Check::new(
                "main-loop",
                true,
                format!("turned {} ms ago", age.as_millis()),
            )
        } else {
            Check::new(
                "main-loop",
                false,
                format!(
                    "has not turned for {} s (stuck in a repair or a cluster-state change?)",
                    age.as_secs()
                ),
            )
        }
    });
    if let Some(task) = lock(&health.maintenance).as_ref() {
        out.push(if task.is_finished() {
            Check::new(
                "port-pool",
                false,
                "the port pool's maintenance task ended (see the log for a panic)",
            )
        } else {
            Check::new("port-pool", true, "maintenance task running")
        });
    }
    out
}

/// Free entries of the kernel's ARP cache: `gc_thresh3` minus the entries in `/proc/net/arp`
/// (openshift-sdn's `arp_cache_entries`).
pub(crate) fn arp_cache_free() -> Option<i64> {
    let max: i64 = std::fs::read_to_string("/proc/sys/net/ipv4/neigh/default/gc_thresh3")
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let used = std::fs::read_to_string("/proc/net/arp")
        .ok()?
        .lines()
        .count()
        .saturating_sub(1) as i64;
    Some(max - used)
}
