//! The node view: every part of the running node an operator's answer reads (pods, flow store,
//! switch, features, cluster state, health), and the readiness checks against OVS, with bounded
//! waits so a scrape or an answer never waits for a hung OVS.

use crate::bridge::flowstore::FlowStore;
use crate::bridge::flowstore::Owner;
use crate::bridge::switch::Switch;
use crate::features::Features;
use crate::lock;
use crate::pod::Pods;
use crate::telemetry::metrics::metrics;
use cluster::config::Config;
use cluster::{ClusterSource, ClusterState};
use flows::{NodeConfig, Table};
use local_api::Check;
use ovs::flow::Flow;
use ovs::openflow::DumpFilter;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

use super::*;

/// Everything the observability side reads of a running node. Built once the node's parts
/// exist (just before it serves); shared by the metrics endpoint, the local API and CNI STATUS.
#[derive(Debug)]
pub(crate) struct NodeView {
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
    /// The node features; a part that needs a feature's own answers asks for it by type
    /// ([`Features::get`]).
    pub features: Features,
}

/// The node's egress firewalls.
pub(crate) type EgressFirewalls = crate::features::egress_firewall::EgressFirewalls<Switch>;
/// The node's egress IPs.
pub(crate) type EgressIps = crate::features::egress_ip::EgressIps<Switch>;
/// The node's network policies.
pub(crate) type NetworkPolicies = crate::features::network_policy::NetworkPolicies<Switch>;

impl NodeView {
    /// The pipeline version this agent installs (the version marker's note, as text).
    pub(crate) fn pipeline_version(&self) -> String {
        self.version_note
            .as_ref()
            .map(note_text)
            .unwrap_or_default()
    }

    /// The readiness checks (see the module docs); `cni_server` false when asked over the CNI
    /// socket itself (STATUS), which is listening by definition.
    pub(crate) async fn readiness(&self, cni_server: bool) -> Vec<Check> {
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
    pub(crate) fn liveness(&self) -> Vec<Check> {
        liveness(&self.health)
    }

    /// Sets the gauges that describe the node now.
    pub(crate) async fn fill_gauges(&self) {
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
        // Each feature's own gauges.
        self.features.observe().await;
        m.pods.set(self.pods.list().await.len() as i64);
        m.pool_ports.set(self.pods.pool().idle() as i64);
        m.pool_warm_ports
            .set(self.pods.pool().warm().values().sum::<usize>() as i64);
        let (v4, v6) = self.pods.lease_counts();
        m.pod_ips.set(v4 as i64);
        m.pod_ips_by_family
            .with_label_values(&["ipv4"])
            .set(v4 as i64);
        m.pod_ips_by_family
            .with_label_values(&["ipv6"])
            .set(v6 as i64);
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
    pub(crate) async fn fill_ready(&self) {
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
    pub(crate) async fn watch_health(self: Arc<Self>) {
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
    pub(crate) async fn cookie_owners(&self) -> std::collections::BTreeMap<u64, String> {
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
                Owner::Audit(v) => format!("audit logging of VNID {v} ({})", tenants(v.id())),
            };
            out.insert(owner.cookie(), name);
        }
        out
    }

    /// Why a request that needs Open vSwitch cannot be served now, when OVSDB or OpenFlow is
    /// known to be down: OVSDB reconnecting, or br0 unreachable at the last health round and
    /// still not answering within [`OVS_RECHECK`] (so a switch that just came back is not
    /// refused for the rest of the round).
    pub(crate) async fn ovs_known_down(&self) -> Option<String> {
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
pub(crate) fn pod_mac(ip: std::net::Ipv4Addr) -> String {
    ovs::flow::MacAddr::from_pod_ip(ip).to_string()
}

/// How long a request waits for br0 to answer when the last health round found it unreachable.
pub(crate) const OVS_RECHECK: Duration = Duration::from_millis(500);

/// How long a scrape waits for the readiness checks before it takes the background round's.
pub(crate) const SCRAPE_READY_WAIT: Duration = Duration::from_millis(500);

/// How often the background health round runs.
pub(crate) const HEALTH_INTERVAL: Duration = Duration::from_secs(1);

/// How long a scrape waits for the node's gauges (locks held by work that waits for OVS)
/// before it answers with the values it has.
pub(crate) const SCRAPE_GAUGES_WAIT: Duration = Duration::from_millis(300);

/// The text of a version marker flow's note (`multitenant.6c727750`).
pub(crate) fn note_text(f: &Flow) -> String {
    f.actions
        .iter()
        .find_map(|a| match a {
            ovs::Action::Note(n) => Some(String::from_utf8_lossy(n.trimmed()).into_owned()),
            _ => None,
        })
        .unwrap_or_default()
}
