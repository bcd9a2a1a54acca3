//! The reader: one OpenFlow connection of its own to br0 that asks for packet-ins, and the
//! loop that turns each audit copy into a line (or a count), writes it, and every ten seconds
//! says what the meters and its queue kept back.
//!
//! Why a connection of its own: the agent's main connection carries the bundles that install
//! pods; a flood of copies on it would queue behind them or ahead of them. Here the copies have
//! a bounded queue ([`QUEUE`]) the connection's reader never waits on, and whatever this loop
//! cannot keep up with is dropped and counted, never slowing the switch or the traffic. The
//! loop reconnects when ovs-vswitchd restarts.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use cluster::config::Config;
use cluster::ClusterState;
use ovs::openflow::{OfClient, PacketIn, PacketIns};

use super::fold::Fold;
use super::line::{now, Line};
use super::resolve::{resolve, Cache, World};
use super::sink::Sink;
use super::Stats;
use crate::features::network_policy::{LocalPodRef, LocalPods, PolicyView};
use crate::telemetry::metrics::metrics;

/// Copies queued between the connection and this loop.
pub(crate) const QUEUE: usize = 4096;
/// How often what was kept back is counted and written.
const SUPPRESSED_EVERY: Duration = Duration::from_secs(10);

/// What the loop needs.
pub(crate) struct Reader {
    pub node: String,
    pub mgmt: PathBuf,
    pub state: watch::Receiver<Arc<ClusterState>>,
    pub local_pods: LocalPods,
    pub policy: Option<Arc<dyn Fn() -> Arc<PolicyView> + Send + Sync>>,
    pub gateways: Vec<IpAddr>,
    pub config: Config,
    pub stats: Arc<Stats>,
}

/// The local pods by port and address, refreshed at most once a second.
#[derive(Default)]
struct Pods {
    by_port: HashMap<u32, LocalPodRef>,
    by_ip: HashMap<IpAddr, LocalPodRef>,
    at: Option<Instant>,
}

impl Pods {
    /// Reads the pod table again unless it was read in the last 10 ms (a pod may send during
    /// its ADD, before the table holds it; the copies are metered, so this stays bounded).
    async fn refresh_now(&mut self, list: &LocalPods) {
        if self
            .at
            .is_some_and(|t| t.elapsed() < Duration::from_millis(10))
        {
            return;
        }
        self.at = None;
        self.refresh(list).await;
    }

    async fn refresh(&mut self, list: &LocalPods) {
        if self
            .at
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        let pods = list().await;
        self.by_port.clear();
        self.by_ip.clear();
        for p in pods {
            if let Some(ip) = p.ip {
                self.by_ip.insert(ip.into(), p.clone());
            }
            if let Some(ip) = p.ip6 {
                self.by_ip.insert(ip.into(), p.clone());
            }
            self.by_port.insert(p.ofport, p);
        }
        self.at = Some(Instant::now());
    }
}

struct Loop {
    r: Reader,
    sink: Sink,
    fold: Fold,
    cache: Cache,
    pods: Pods,
    /// Packets each audit meter had dropped when last counted.
    dropped: HashMap<u32, u64>,
    /// The queue's drops when last counted.
    lost: u64,
    /// The syslog socket's losses when last said.
    syslog_lost: u64,
    /// The annotation problems last written, by namespace.
    problems: std::collections::BTreeMap<String, String>,
}

fn counted(line: &Line) {
    metrics()
        .audit_lines
        .with_label_values(&[
            line.event,
            if line.verdict.is_empty() {
                "none"
            } else {
                line.verdict
            },
        ])
        .inc();
}

impl Loop {
    fn write(&mut self, line: &Line) {
        self.sink.write(line);
        counted(line);
        self.r.stats.lines.fetch_add(1, Ordering::Relaxed);
    }

    async fn handle(&mut self, pin: PacketIn) {
        // A port the index does not know is a pod newer than the index: read it again.
        let md = &pin.metadata;
        let ports = [
            md.in_port.unwrap_or(0),
            md.reg(usize::from(flows::Reg::OutPort.number())),
            md.reg(usize::from(flows::Reg::SrcPort.number())),
        ];
        if ports.iter().any(|p| {
            (1..ovs::flow::ports::MAX).contains(p) && *p > 2 && !self.pods.by_port.contains_key(p)
        }) {
            self.pods.refresh_now(&self.r.local_pods).await;
        }
        self.pods.refresh(&self.r.local_pods).await;
        let state = self.r.state.borrow().clone();
        self.cache.refresh(&state);
        let view = self.r.policy.as_ref().map(|f| f());
        let world = World {
            node: &self.r.node,
            state: &state,
            by_port: &self.pods.by_port,
            by_ip: &self.pods.by_ip,
            policy: view.as_deref(),
            gateways: &self.r.gateways,
            vnid_names: &self.cache.vnid_names,
        };
        let Some(r) = resolve(&world, &pin) else {
            // Not an audit copy, unreadable, or no namespace concerned asks for it any more
            // (rows outlive a setting by one sync).
            metrics()
                .audit_suppressed
                .with_label_values(&["unlogged"])
                .inc();
            return;
        };
        let now = Instant::now();
        if self.fold.repeat(&r.key, now) {
            self.r.stats.repeats.fetch_add(1, Ordering::Relaxed);
            metrics()
                .audit_suppressed
                .with_label_values(&["repeat"])
                .inc();
            return;
        }
        self.write(&r.line);
        if let Some(evicted) = self.fold.remember(r.key, r.line, now) {
            self.write(&evicted);
        }
    }

    /// A `note` line for each namespace or ClusterNetworkPolicy whose annotation became
    /// unusable (or changed problem), so the trail says why its lines stopped.
    fn note_problems(&mut self) {
        let state = self.r.state.borrow().clone();
        let now = super::annotation_problems(&state);
        for (what, p) in &now {
            if self.problems.get(what) != Some(p) {
                let mut line = Line::note(&self.r.node, &format!("{what}: {p}"));
                line.namespace = what.strip_prefix("namespace ").map(str::to_string);
                line.severity = "warning";
                self.write(&line);
            }
        }
        self.problems = now;
    }

    fn sweep(&mut self, pins: &PacketIns) {
        self.note_problems();
        let syslog_lost = self.sink.syslog_dropped();
        if syslog_lost > self.syslog_lost {
            tracing::warn!(lines = syslog_lost - self.syslog_lost, total = syslog_lost, "the syslog socket did not take every audit line (it reads too slowly or is gone); the audit log file has them all");
            self.syslog_lost = syslog_lost;
        }
        for l in self.fold.sweep(Instant::now()) {
            self.write(&l);
        }
        let (full, _) = pins.lost();
        let lost = full.saturating_sub(self.lost);
        self.lost = full;
        if lost > 0 {
            self.r
                .stats
                .queue_dropped
                .fetch_add(lost, Ordering::Relaxed);
            metrics()
                .audit_suppressed
                .with_label_values(&["queue"])
                .inc_by(lost);
            let line = Line {
                time: now(),
                node: self.r.node.clone(),
                event: "suppressed",
                severity: "warning",
                packets: Some(lost),
                message: Some(format!(
                    "the agent's queue of {} copies was full: {lost} logged packets were decided as always but not logged",
                    super::reader::QUEUE
                )),
                ..Line::default()
            };
            self.write(&line);
        }
        self.sink.flush();
    }

    /// The meters' drops since last time, as `suppressed` lines per verdict and bucket.
    async fn count_rate_limited(&mut self, client: &OfClient) {
        let Ok(stats) = client.dump_meter_stats().await else {
            return;
        };
        let state = self.r.state.borrow().clone();
        self.cache.refresh(&state);
        for s in stats {
            let spoof = s.id == flows::audit::SPOOF_METER;
            let bucket = super::meter_bucket(s.id);
            if !spoof && bucket.is_none() {
                continue;
            }
            let before = self.dropped.insert(s.id, s.packets_dropped);
            let delta = match before {
                Some(b) => s.packets_dropped.saturating_sub(b),
                // The first count after (re)connecting is the baseline.
                None => continue,
            };
            if delta == 0 {
                continue;
            }
            self.r
                .stats
                .rate_limited
                .fetch_add(delta, Ordering::Relaxed);
            metrics()
                .audit_suppressed
                .with_label_values(&["rate-limit"])
                .inc_by(delta);
            // The namespaces whose packets the meter counted: its bucket's sources.
            let (verdict, namespaces) = match bucket {
                Some((allow, b)) => {
                    let mut ns: Vec<String> = self
                        .cache
                        .vnid_names
                        .iter()
                        .filter(|(v, _)| super::bucket_of(**v) == b)
                        .flat_map(|(_, names)| names.iter().cloned())
                        .collect();
                    ns.sort();
                    (if allow { "allow" } else { "deny" }, ns)
                }
                None => ("deny", Vec::new()),
            };
            let line = Line {
                time: now(),
                node: self.r.node.clone(),
                event: "suppressed",
                verdict,
                severity: "warning",
                kind: if spoof { "spoofing" } else { "" },
                namespaces,
                packets: Some(delta),
                message: Some(format!(
                    "rate limit of {}/s reached (auditRateLimit, per verdict and source-namespace bucket; the namespaces are the bucket's sources): {delta} logged packets were decided as always but not logged",
                    self.r.config.audit_rate_limit
                )),
                ..Line::default()
            };
            self.write(&line);
        }
        self.sink.flush();
    }
}

/// Runs the reader until the agent stops.
pub(crate) async fn run(r: Reader) {
    let mgmt = r.mgmt.clone();
    let sink = Sink::new(
        &r.config.audit_log_file,
        r.config.audit_log_format,
        r.config.audit_log_max_size_mb.saturating_mul(1 << 20),
        r.config.audit_log_max_files,
        r.config.audit_syslog.as_ref(),
    );
    let mut l = Loop {
        r,
        sink,
        fold: Fold::default(),
        cache: Cache::default(),
        pods: Pods::default(),
        dropped: HashMap::new(),
        lost: 0,
        syslog_lost: 0,
        problems: std::collections::BTreeMap::new(),
    };
    let started = Line::note(
        &l.r.node,
        &format!(
            "audit log started: {}; rate limit {}/s per verdict and source-namespace bucket",
            l.sink.path().display(),
            l.r.config.audit_rate_limit
        ),
    );
    l.write(&started);
    l.sink.flush();
    let target = format!("unix:{}", mgmt.display());
    let mut warned = false;
    loop {
        let connected = async {
            let c = OfClient::connect(&target).await?;
            let pins = c.receive_packet_ins(QUEUE).await?;
            Ok::<_, ovs::openflow::OfError>((c, pins))
        }
        .await;
        let (client, mut pins) = match connected {
            Ok(x) => x,
            Err(e) => {
                if !warned {
                    tracing::warn!(bridge = %mgmt.display(), error = %e, "the audit log cannot receive from br0 yet; retrying");
                    warned = true;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        warned = false;
        tracing::info!(bridge = %mgmt.display(), file = %l.sink.path().display(), "audit log receiving");
        l.r.stats.connected.store(1, Ordering::Relaxed);
        l.dropped.clear();
        l.lost = 0;
        l.count_rate_limited(&client).await;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut counting = tokio::time::interval(SUPPRESSED_EVERY);
        counting.tick().await;
        loop {
            tokio::select! {
                pin = pins.recv() => {
                    let Some(pin) = pin else { break };
                    l.handle(pin).await;
                    // What else is queued, before flushing once.
                    for _ in 0..256 {
                        let Some(p) = pins.try_recv() else { break };
                        l.handle(p).await;
                    }
                    l.sink.flush();
                }
                _ = tick.tick() => l.sweep(&pins),
                _ = counting.tick() => l.count_rate_limited(&client).await,
            }
        }
        l.r.stats.connected.store(0, Ordering::Relaxed);
        tracing::warn!(bridge = %mgmt.display(), "the audit log's connection to br0 closed; reconnecting");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
