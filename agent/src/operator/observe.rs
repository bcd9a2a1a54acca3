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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use flows::{NodeConfig, Table};

use crate::bridge::flowstore::Owner;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, StatusCode};
use local_api::{Check, ReconcileRecord};
use ovs::flow::Flow;
use ovs::openflow::DumpFilter;
use serde::Serialize;
use tokio::sync::watch;

use crate::bridge::flowstore::FlowStore;
use crate::bridge::switch::Switch;
use crate::lock;
use crate::pod::Pods;
use crate::telemetry::metrics::metrics;
use cluster::config::Config;
use cluster::{ClusterSource, ClusterState};

/// The main loop counts as stuck when it has not turned for this long.
pub const LOOP_STALL: Duration = Duration::from_secs(60);

/// The agent's own health facts, written by the daemon as it runs.
#[derive(Debug)]
pub struct Health {
    started: Instant,
    phase: Mutex<String>,
    /// ms after `started` of the main loop's last turn; 0 before it runs.
    heartbeat_ms: AtomicU64,
    ready_ms: AtomicU64,
    last_reconcile: Mutex<Option<ReconcileRecord>>,
    maintenance: Mutex<Option<tokio::task::AbortHandle>>,
    cni_socket: Mutex<Option<std::path::PathBuf>>,
    /// The readiness checks [`NodeView::watch_health`] ran last (a scrape reads them, never
    /// waits for OVS), and whether br0 was unreachable over OpenFlow then.
    latest: Mutex<Option<(Vec<Check>, Option<String>)>>,
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

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Health {
    /// The readiness checks of the last background round, if one ran.
    pub fn latest_readiness(&self) -> Option<Vec<Check>> {
        lock(&self.latest).as_ref().map(|(c, _)| c.clone())
    }

    /// Why br0 was unreachable over OpenFlow at the last background round, if it was.
    pub fn openflow_unreachable(&self) -> Option<String> {
        lock(&self.latest).as_ref().and_then(|(_, u)| u.clone())
    }

    /// Notes the start-up step the agent is in (shown by `/readyz` until it serves).
    pub fn phase(&self, what: &str) {
        *lock(&self.phase) = what.to_string();
    }

    /// The main loop turned.
    pub fn beat(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.heartbeat_ms.store(ms.max(1), Ordering::SeqCst);
    }

    /// The agent serves CNI requests on `socket` from now on.
    pub fn serving(&self, socket: &std::path::Path) {
        let took = self.started.elapsed();
        self.ready_ms
            .store(took.as_millis() as u64, Ordering::SeqCst);
        metrics().ready_seconds.set(took.as_secs_f64());
        *lock(&self.cni_socket) = Some(socket.to_path_buf());
        self.phase("serving");
    }

    /// The CNI server stopped.
    pub fn stopped_serving(&self) {
        *lock(&self.cni_socket) = None;
        self.phase("stopping");
    }

    /// The port pool's maintenance task, whose end means the agent is not alive.
    pub fn maintenance(&self, task: tokio::task::AbortHandle) {
        *lock(&self.maintenance) = Some(task);
    }

    /// Records a reconcile (and counts it in the metrics).
    pub fn reconciled(
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
            }
            Err(e) => r.error = Some(e.clone()),
        }
        *lock(&self.last_reconcile) = Some(r);
    }

    /// The last reconcile.
    pub fn last_reconcile(&self) -> Option<ReconcileRecord> {
        lock(&self.last_reconcile).clone()
    }

    /// Seconds the process has run.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Seconds from start to serving (0 while starting).
    pub fn ready_after(&self) -> Option<Duration> {
        match self.ready_ms.load(Ordering::SeqCst) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    fn current_phase(&self) -> String {
        lock(&self.phase).clone()
    }
}

/// Everything the observability side reads of a running node. Built once the node's parts
/// exist (just before it serves); shared by the metrics endpoint, the local API and CNI STATUS.
#[derive(Debug)]
pub struct NodeView {
    /// The configuration in force.
    pub config: Config,
    /// The node's pipeline inputs.
    pub node: NodeConfig,
    /// The pods.
    pub pods: Arc<Pods>,
    /// The desired flows.
    pub store: Arc<FlowStore<Switch>>,
    /// br0 over OpenFlow.
    pub switch: Arc<Switch>,
    /// OVSDB.
    pub db: ovs::ovsdb::Client,
    /// The cluster state.
    pub state: watch::Receiver<Arc<ClusterState>>,
    /// Where the cluster state comes from (its problems).
    pub source: Arc<dyn ClusterSource>,
    /// The agent's health facts.
    pub health: Arc<Health>,
    /// The version marker flow of the base pipeline (table 253).
    pub version_note: Option<Flow>,
    /// The tenants' egress firewalls.
    pub egress: Arc<crate::features::egress_firewall::EgressFirewalls<Switch>>,
    /// The tenants' egress IPs.
    pub egress_ips: Arc<crate::features::egress_ip::EgressIps<Switch>>,
    /// Networkpolicy mode: the NetworkPolicy rows.
    pub policies: Option<Arc<crate::features::network_policy::NetworkPolicies<Switch>>>,
}

impl NodeView {
    /// The pipeline version this agent installs (the version marker's note, as text).
    pub fn pipeline_version(&self) -> String {
        self.version_note
            .as_ref()
            .map(note_text)
            .unwrap_or_default()
    }

    /// The readiness checks (see the module docs); `cni_server` false when asked over the CNI
    /// socket itself (STATUS), which is listening by definition.
    pub async fn readiness(&self, cni_server: bool) -> Vec<Check> {
        let mut out = Vec::new();
        out.push(match self.db.state() {
            ovs::ovsdb::ConnectionState::Connected => {
                Check::new("ovsdb", true, format!("connected to {}", self.db.target()))
            }
            ovs::ovsdb::ConnectionState::Reconnecting {
                attempt,
                last_error,
            } => Check::new(
                "ovsdb",
                false,
                format!(
                    "the Open vSwitch database is unreachable, reconnecting to {} (attempt {attempt}): {last_error}; is ovsdb-server running?",
                    self.db.target()
                ),
            ),
        });
        let dump = tokio::time::timeout(
            Duration::from_secs(5),
            self.switch.dump(&DumpFilter::table(Table::Version.id())),
        )
        .await;
        out.push(match dump {
            Err(_) => Check::new(
                "openflow",
                false,
                "br0 is unreachable over OpenFlow: no answer within 5 s (ovs-vswitchd busy or stuck?)",
            ),
            Ok(Err(e)) => Check::new(
                "openflow",
                false,
                format!(
                    "br0 is unreachable over OpenFlow ({}): {e}; is ovs-vswitchd running?",
                    self.switch.mgmt().display()
                ),
            ),
            Ok(Ok(flows)) => {
                let want = self.version_note.as_ref().map(|f| &f.actions);
                match flows.first() {
                    Some(f) if Some(&f.actions) == want => Check::new(
                        "openflow",
                        true,
                        format!("br0 holds pipeline {}", self.pipeline_version()),
                    ),
                    Some(f) => Check::new(
                        "openflow",
                        false,
                        format!(
                            "br0 holds pipeline {}, this agent installs {}; the agent is repairing the pipeline",
                            note_text(f),
                            self.pipeline_version()
                        ),
                    ),
                    None => Check::new(
                        "openflow",
                        false,
                        "br0 holds no base flows (ovs-vswitchd restarted or flows deleted); the agent is repairing the pipeline",
                    ),
                }
            }
        });
        let state = self.state.borrow().clone();
        let problems = self.source.problems();
        let shown = if problems.is_empty() {
            String::new()
        } else {
            format!(
                "; {} problem(s) kept out (sdnctl status shows them): {}",
                problems.len(),
                problems.first().cloned().unwrap_or_default()
            )
        };
        out.push(match state.host_subnet_of(&self.config.node_name) {
            Some(hs) => Check::new(
                "cluster-state",
                true,
                format!(
                    "HostSubnet {} ({}), {} NetNamespaces, {} other nodes{shown}",
                    hs.host,
                    hs.subnet,
                    state.net_namespaces.len(),
                    state.host_subnets.len().saturating_sub(1)
                ),
            ),
            None => Check::new(
                "cluster-state",
                false,
                format!(
                    "this node's HostSubnet {} is gone from the cluster state{shown}",
                    self.config.node_name
                ),
            ),
        });
        if cni_server {
            let socket = lock(&self.health.cni_socket).clone();
            out.push(match socket {
                Some(s) if s.exists() => {
                    Check::new("cni-server", true, format!("listening on {}", s.display()))
                }
                Some(s) => Check::new(
                    "cni-server",
                    false,
                    format!(
                        "the socket {} was removed; restart the agent to serve again",
                        s.display()
                    ),
                ),
                None => Check::new("cni-server", false, "not serving (stopping)"),
            });
        }
        out
    }

    /// The liveness checks (see the module docs).
    pub fn liveness(&self) -> Vec<Check> {
        liveness(&self.health)
    }

    /// Sets the gauges that describe the node now.
    pub async fn fill_gauges(&self) {
        let m = metrics();
        let desired = self.store.desired().await;
        m.ovs_flows.set(desired.len() as i64);
        let mut per_table: std::collections::BTreeMap<&'static str, i64> =
            Table::ALL.iter().map(|t| (t.name(), 0)).collect();
        for (_, f) in &desired {
            let name = Table::from_id(f.table).map_or("unknown", Table::name);
            *per_table.entry(name).or_default() += 1;
        }
        for (table, n) in per_table {
            m.flows.with_label_values(&[table]).set(n);
        }
        m.egress_firewall_rules.set(
            desired
                .iter()
                .filter(|(o, _)| matches!(o, crate::bridge::flowstore::Owner::EgressFirewall(_)))
                .count() as i64,
        );
        let plans = self.egress.current().await;
        let drop_all = plans
            .values()
            .filter(|p| p.firewall == flows::EgressFirewall::DropAll)
            .count();
        m.egress_firewalls
            .with_label_values(&["drop_all"])
            .set(drop_all as i64);
        m.egress_firewalls
            .with_label_values(&["rules"])
            .set((plans.len() - drop_all) as i64);
        m.multicast_tenants
            .set(self.state.borrow().multicast_vnids().len() as i64);
        let (eips, _) = self.egress_ips.entries().await;
        for route in ["local", "remote", "dropped"] {
            let n = eips.iter().filter(|e| e.kind == route).count();
            m.egress_ip_tenants
                .with_label_values(&[route])
                .set(n as i64);
        }
        m.egress_ips_held
            .set(self.egress_ips.held().await.len() as i64);
        m.pods.set(self.pods.list().await.len() as i64);
        m.pool_ports.set(self.pods.pool().idle() as i64);
        m.pod_ips.set(self.pods.lease_count() as i64);
        if let Some(free) = arp_cache_free() {
            m.arp_cache_entries.set(free);
        }
        let state = self.state.borrow().clone();
        m.state_problems
            .set((self.source.problems().len() + state.problems().len()) as i64);
    }

    /// `sdn_ready` for a scrape: the checks run now when they answer within
    /// [`SCRAPE_READY_WAIT`] (a healthy node), else what the background round found last
    /// ([`Self::watch_health`]): a scrape never waits for a hung OVS.
    pub async fn fill_ready(&self) {
        let ready = match tokio::time::timeout(SCRAPE_READY_WAIT, self.readiness(true)).await {
            Ok(checks) => checks.iter().all(|c| c.ok),
            Err(_) => self
                .health
                .latest_readiness()
                .is_some_and(|checks| checks.iter().all(|c| c.ok)),
        };
        metrics().ready.set(i64::from(ready));
    }

    /// Runs the readiness checks every [`HEALTH_INTERVAL`] for ever, keeping the result for
    /// `/metrics` (`sdn_ready`) and for the CNI server's "Open vSwitch is down" answer. A check
    /// of OpenFlow can take 5 s while ovs-vswitchd hangs: a scrape never waits for it.
    pub async fn watch_health(self: Arc<Self>) {
        loop {
            let checks = self.readiness(true).await;
            let unreachable = checks
                .iter()
                .find(|c| c.name == "openflow" && !c.ok && c.detail.contains("unreachable"))
                .map(|c| c.detail.clone());
            metrics().ready.set(i64::from(checks.iter().all(|c| c.ok)));
            *lock(&self.health.latest) = Some((checks, unreachable));
            tokio::time::sleep(HEALTH_INTERVAL).await;
        }
    }

    /// Who owns each cookie the agent uses, in words.
    pub async fn cookie_owners(&self) -> std::collections::BTreeMap<u64, String> {
        let pods = self.pods.list().await;
        let by_port: std::collections::BTreeMap<&str, String> = pods
            .iter()
            .map(|p| {
                (
                    p.host_veth.as_str(),
                    format!(
                        "pod {}/{} (port {}, VNID {})",
                        p.namespace, p.name, p.host_veth, p.vnid
                    ),
                )
            })
            .collect();
        let state = self.state.borrow().clone();
        let tenants = |v: u32| -> String {
            let names = state.namespaces_of(v);
            if names.is_empty() {
                "no namespace".to_string()
            } else {
                names.join(", ")
            }
        };
        let mut out = std::collections::BTreeMap::new();
        for owner in self.store.owners().await {
            let name = match &owner {
                Owner::Base => "base pipeline".to_string(),
                Owner::Port(p) => by_port
                    .get(p.as_str())
                    .cloned()
                    .unwrap_or_else(|| format!("warm port {p} (no pod yet)")),
                Owner::RemoteNode { name, .. } => {
                    let hs = state.host_subnets.get(name);
                    format!(
                        "remote node {name}{}",
                        hs.map(|h| format!(" (subnet {}, VTEP {})", h.subnet, h.host_ip))
                            .unwrap_or_default()
                    )
                }
                Owner::Multicast => "multicast to remote nodes".to_string(),
                Owner::Vnid(v) => format!("VNID {v} ({})", tenants(v.id())),
                Owner::EgressFirewall(v) => {
                    format!("egress firewall of VNID {v} ({})", tenants(v.id()))
                }
                Owner::MulticastTenant(v) => {
                    format!("multicast of VNID {v} ({})", tenants(v.id()))
                }
                Owner::EgressIp(v) => format!("egress IPs of VNID {v} ({})", tenants(v.id())),
                Owner::PolicyTarget(p) => format!(
                    "network policies of {}",
                    by_port
                        .get(p.as_str())
                        .cloned()
                        .unwrap_or_else(|| format!("port {p}"))
                ),
                Owner::Policy => "network policy peers and ports".to_string(),
            };
            out.insert(owner.cookie(), name);
        }
        out
    }

    /// Why a request that needs Open vSwitch cannot be served now, when OVSDB or OpenFlow is
    /// known to be down: OVSDB reconnecting, or br0 unreachable at the last health round and
    /// still not answering within [`OVS_RECHECK`] (so a switch that just came back is not
    /// refused for the rest of the round).
    pub async fn ovs_known_down(&self) -> Option<String> {
        if let ovs::ovsdb::ConnectionState::Reconnecting { last_error, .. } = self.db.state() {
            return Some(format!(
                "the Open vSwitch database is unreachable ({}: {last_error}); is ovsdb-server running?",
                self.db.target()
            ));
        }
        let why = self.health.openflow_unreachable()?;
        let dump = tokio::time::timeout(
            OVS_RECHECK,
            self.switch.dump(&DumpFilter::table(Table::Version.id())),
        )
        .await;
        match dump {
            Ok(Ok(_)) => None,
            _ => Some(why),
        }
    }
}

/// A pod interface's MAC as text: `0a:58:` and its address (as openshift-sdn derives it).
pub fn pod_mac(ip: std::net::Ipv4Addr) -> String {
    ovs::flow::MacAddr::from_pod_ip(ip).to_string()
}

/// How long a request waits for br0 to answer when the last health round found it unreachable.
pub const OVS_RECHECK: Duration = Duration::from_millis(500);

/// How long a scrape waits for the readiness checks before it takes the background round's.
pub const SCRAPE_READY_WAIT: Duration = Duration::from_millis(500);

/// How often the background health round runs.
pub const HEALTH_INTERVAL: Duration = Duration::from_secs(1);

/// How long a scrape waits for the node's gauges (locks held by work that waits for OVS)
/// before it answers with the values it has.
pub const SCRAPE_GAUGES_WAIT: Duration = Duration::from_millis(300);

/// The text of a version marker flow's note (`multitenant.6c727750`).
pub fn note_text(f: &Flow) -> String {
    f.actions
        .iter()
        .find_map(|a| match a {
            ovs::Action::Note(n) => Some(String::from_utf8_lossy(n.trimmed()).into_owned()),
            _ => None,
        })
        .unwrap_or_default()
}

fn liveness(health: &Health) -> Vec<Check> {
    liveness_at(health, health.started.elapsed().as_millis() as u64)
}

/// The liveness checks as of `now` ms after start.
fn liveness_at(health: &Health, now: u64) -> Vec<Check> {
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
fn arp_cache_free() -> Option<i64> {
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

/// The metrics and health endpoint: `/metrics`, `/livez`, `/readyz` (`?verbose` lists every
/// check even when all pass).
#[derive(Debug, Clone, Default)]
pub struct Observer {
    /// The agent's health facts.
    pub health: Arc<Health>,
    view: Arc<OnceLock<Arc<NodeView>>>,
}

impl Observer {
    /// The node, once its parts exist.
    pub fn set_view(&self, view: Arc<NodeView>) {
        let _ = self.view.set(view);
    }

    /// The node, once its parts exist.
    pub fn view(&self) -> Option<Arc<NodeView>> {
        self.view.get().cloned()
    }

    /// The readiness checks, or the start-up step while the node is not built yet.
    pub async fn readiness(&self) -> Vec<Check> {
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
    pub fn liveness(&self) -> Vec<Check> {
        liveness(&self.health)
    }

    /// Every series, with the node's gauges set now.
    pub async fn render_metrics(&self) -> String {
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
    pub async fn answer(&self, method: &Method, path: &str, query: &str) -> HttpAnswer {
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
    pub async fn serve(&self, addr: SocketAddr) -> Result<tokio::task::JoinHandle<()>> {
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
                    break r.with_context(|| {
                        format!(
                            "metricsAddress {addr}: cannot listen there (another agent or program \
                             uses it?); set metricsAddress to a free IP:PORT, or \"\" for no \
                             metrics endpoint"
                        )
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

/// `/livez` or `/readyz` as Kubernetes components answer them: 200 `ok` (or every check with
/// `?verbose`), else 503 with every check, `[+]` passed and `[-]` failed, and why.
fn checks_answer(what: &str, checks: &[Check], verbose: bool) -> HttpAnswer {
    let ok = checks.iter().all(|c| c.ok);
    let mut body = String::new();
    if verbose || !ok {
        for c in checks {
            body.push_str(&format!(
                "[{}]{} {}: {}\n",
                if c.ok { "+" } else { "-" },
                c.name,
                if c.ok { "ok" } else { "failed" },
                c.detail
            ));
        }
    }
    if ok {
        body.push_str(&format!("{what} check passed\n"));
        HttpAnswer::text(StatusCode::OK, body)
    } else {
        body.push_str(&format!("{what} check failed\n"));
        HttpAnswer::text(StatusCode::SERVICE_UNAVAILABLE, body)
    }
}

/// One answer of the agent's small HTTP endpoints.
#[derive(Debug)]
pub struct HttpAnswer {
    /// HTTP status.
    pub status: StatusCode,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

impl HttpAnswer {
    /// A plain-text answer.
    pub fn text(status: StatusCode, body: impl Into<String>) -> HttpAnswer {
        HttpAnswer {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }

    /// A JSON answer.
    pub fn json(status: StatusCode, value: &impl Serialize) -> HttpAnswer {
        HttpAnswer {
            status,
            content_type: "application/json",
            body: serde_json::to_string_pretty(value).unwrap_or_default() + "\n",
        }
    }
}

/// The largest request body the endpoints read.
const MAX_BODY: usize = 64 << 10;

/// Serves one HTTP/1.1 connection with `answer(method, path, query, body)`: request headers
/// within 10 s, the body (at most 64 KiB) within 10 s, no keep-alive.
pub async fn serve_http<IO, F, Fut>(io: IO, answer: F)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    F: Fn(Method, String, String, Bytes) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = HttpAnswer> + Send,
{
    use http_body_util::{BodyExt, Limited};
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let answer = answer.clone();
        async move {
            let method = req.method().clone();
            let path = req.uri().path().to_string();
            let query = req.uri().query().unwrap_or("").to_string();
            let head = method == Method::HEAD;
            let body = tokio::time::timeout(
                Duration::from_secs(10),
                Limited::new(req.into_body(), MAX_BODY).collect(),
            )
            .await;
            let a = match body {
                Ok(Ok(b)) => answer(method, path, query, b.to_bytes()).await,
                Ok(Err(e)) => HttpAnswer::text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("cannot read the request body (at most {MAX_BODY} bytes): {e}\n"),
                ),
                Err(_) => HttpAnswer::text(
                    StatusCode::REQUEST_TIMEOUT,
                    "request body not received within 10 s\n",
                ),
            };
            let body = if head { String::new() } else { a.body };
            let mut r = hyper::Response::new(Full::new(Bytes::from(body)));
            *r.status_mut() = a.status;
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(a.content_type));
            Ok::<_, std::convert::Infallible>(r)
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10))
        .keep_alive(false);
    let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(io), svc);
    if let Err(e) = tokio::time::timeout(Duration::from_secs(120), conn).await {
        tracing::debug!(error = %e, "HTTP connection closed after 120 s");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_render_as_kubernetes_components_do() {
        let good = [Check::new("ovsdb", true, "connected")];
        let a = checks_answer("readyz", &good, false);
        assert_eq!(
            (a.status, a.body.as_str()),
            (StatusCode::OK, "readyz check passed\n")
        );
        let a = checks_answer("readyz", &good, true);
        assert_eq!(a.body, "[+]ovsdb ok: connected\nreadyz check passed\n");
        let bad = [
            Check::new("ovsdb", true, "connected"),
            Check::new("openflow", false, "br0 holds no base flows"),
        ];
        let a = checks_answer("readyz", &bad, false);
        assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            a.body,
            "[+]ovsdb ok: connected\n[-]openflow failed: br0 holds no base flows\nreadyz check failed\n"
        );
    }

    #[test]
    fn a_stalled_main_loop_is_not_alive() {
        let h = Health::default();
        assert!(liveness(&h)[0].ok, "starting counts as alive");
        h.heartbeat_ms.store(1000, Ordering::SeqCst);
        let stall = LOOP_STALL.as_millis() as u64;
        assert!(liveness_at(&h, 1000 + stall)[0].ok);
        let late = liveness_at(&h, 1001 + stall);
        assert!(!late[0].ok);
        assert!(
            late[0].detail.contains("has not turned for 60 s"),
            "{late:?}"
        );
    }

    #[tokio::test]
    async fn the_endpoint_answers_before_the_node_exists() {
        let o = Observer::default();
        o.health.phase("waiting for this node's HostSubnet");
        let a = o.answer(&Method::GET, "/readyz", "").await;
        assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            a.body
                .contains("starting: waiting for this node's HostSubnet"),
            "{}",
            a.body
        );
        let a = o.answer(&Method::GET, "/livez", "").await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        let a = o.answer(&Method::GET, "/metrics", "").await;
        assert!(a.body.contains("sdn_ready 0"), "{}", a.body);
        let a = o.answer(&Method::GET, "/nope", "").await;
        assert_eq!(a.status, StatusCode::NOT_FOUND);
        let a = o.answer(&Method::POST, "/metrics", "").await;
        assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
    }
}
