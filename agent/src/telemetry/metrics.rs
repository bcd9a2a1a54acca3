//! The agent's Prometheus metrics: one process-wide registry ([`metrics()`]), rendered in the
//! Prometheus text format by the metrics endpoint ([`crate::operator::observe`]).
//!
//! Two families of series:
//! - **openshift-sdn's own**, under their own names and labels, so the dashboards and alerts
//!   written for the agent this one replaces keep working: `openshift_sdn_pod_operations_latency`
//!   (a summary in microseconds by `operation_type`: `setup`/`teardown` are the agent's work,
//!   `e2esetup`/`e2eteardown` the whole CNI request from receipt to answer, `update` a pod
//!   re-flowed for a VNID change), `openshift_sdn_pod_operations_errors`,
//!   `openshift_sdn_ovs_operations` (every OVSDB transaction and OpenFlow request of the pod
//!   logic and the flow store, by `result_type`), `openshift_sdn_ovs_flows`,
//!   `openshift_sdn_pod_ips`, `openshift_sdn_arp_cache_entries` and
//!   `openshift_sdn_vnid_not_found_errors`. openshift-sdn's egress-IP gauges come with egress IPs.
//! - **the agent's own** (`sdn_*`, seconds and `_total` as Prometheus' naming rules ask):
//!   histograms of every CNI command by result, flows per table by table name, reconnects to
//!   OVSDB and OpenFlow, drift repairs by kind, reconcile duration by reason, time to ready,
//!   cluster-state problems, VNID changes, host-port and bandwidth errors.
//!
//! Why a global: every counter is a fact about the one agent a process runs, and the places
//! that count (the CNI server, the pod logic, the OVS seams, the daemon's loops) would
//! otherwise all need a handle threaded through constructors the component tests build by the
//! hundred. Gauges that describe the node now (flows, pods, leases, ARP entries) are not counted
//! anywhere: the endpoint sets them from the daemon's state at each scrape, so they cannot
//! drift from it.
//!
//! The crate is `prometheus` (TiKV's, the most used Rust client): its text encoder writes the
//! classic exposition format, with counter names exactly as given (openshift-sdn's counters have
//! no `_total`), and it takes custom collectors, which the openshift-sdn latency summary needs
//! (the crate has histograms only).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType, Quantile, Summary};
use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::lock;

/// Buckets in seconds for pod operations and reconciles: 1 ms to about 65 s.
const SECONDS_BUCKETS: [f64; 17] = [
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192, 16.384, 32.768, 65.536,
];

/// The quantiles of openshift-sdn's latency summary.
const QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];

/// How long an observation counts for the summary's quantiles (as client_golang's default).
const SUMMARY_MAX_AGE: Duration = Duration::from_secs(600);

/// At most this many observations per label value are kept for the quantiles (the oldest go
/// first); sum and count cover every observation.
const SUMMARY_WINDOW: usize = 2048;

/// The kinds of drift repair (`sdn_drift_repairs_total{kind}`), exported at 0 from the start.
pub(crate) const DRIFT_KINDS: [&str; 7] = [
    "flows",
    "switch_restart",
    "port",
    "port_record",
    "qos",
    "meter",
    "ofport",
];

/// The CNI error codes `sdn_cni_request_errors_total` exports at 0 from the start for ADD, DEL
/// and CHECK: try again later (11) and the agent's generic failure (100); other codes appear
/// with their first error.
pub(crate) const ERROR_CODES_AT_ZERO: [&str; 2] = ["11", "100"];

/// Every series the agent exports.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    /// openshift-sdn: pod operation latency in microseconds, by `operation_type`.
    pub pod_operations_latency: LatencySummary,
    /// openshift-sdn: failed pod operations by `operation_type` (`setup`, `teardown`).
    pub pod_operations_errors: IntCounterVec,
    /// openshift-sdn: OVS operations by `result_type` (`success`, `failure`).
    pub ovs_operations: IntCounterVec,
    /// openshift-sdn: pod ADDs refused because their namespace had no NetNamespace in time.
    pub vnid_not_found_errors: IntCounter,
    /// openshift-sdn: flows on br0 (set at scrape from the flow store).
    pub ovs_flows: IntGauge,
    /// openshift-sdn: allocated pod addresses (set at scrape from the lease store; IPv4, as
    /// openshift-sdn counted them).
    pub pod_ips: IntGauge,
    /// Allocated pod addresses by `family` (`ipv4`, `ipv6`; set at scrape).
    pub pod_ips_by_family: IntGaugeVec,
    /// openshift-sdn: free entries of the kernel's ARP cache (`gc_thresh3` minus entries).
    pub arp_cache_entries: IntGauge,
    /// CNI requests by `command` and `result` (`success` or `error`), seconds from receipt to
    /// answer.
    pub cni_request_duration: HistogramVec,
    /// Failed CNI requests by `command` and CNI error `code`.
    pub cni_request_errors: IntCounterVec,
    /// Flows by `table` name (set at scrape).
    pub flows: IntGaugeVec,
    /// Re-opened connections by `connection` (`ovsdb`, `openflow`).
    pub reconnects: IntCounterVec,
    /// Things put back after they changed behind the agent's back, by `kind`.
    pub drift_repairs: IntCounterVec,
    /// Whole-bridge reconciles by `reason`, in seconds.
    pub reconcile_duration: HistogramVec,
    /// Seconds from process start to serving CNI requests.
    pub ready_seconds: Gauge,
    /// Whether the agent is ready now (what `/readyz` answers), set at scrape.
    pub ready: IntGauge,
    /// Cluster-state problems (unparsable files, conflicts) in effect now, set at scrape.
    pub state_problems: IntGauge,
    /// NetNamespace VNID changes applied to local pods.
    pub vnid_changes: IntCounter,
    /// Seconds to re-flow a namespace's local pods for a VNID change.
    pub vnid_change_duration: Histogram,
    /// Host-port failures (a taken port, a bad mapping, iptables).
    pub hostport_errors: IntCounter,
    /// Bandwidth failures (a bad value, no free meter, QoS).
    pub bandwidth_errors: IntCounter,
    /// Pods on this node (set at scrape).
    pub pods: IntGauge,
    /// Idle ports in the port pool (set at scrape).
    pub pool_ports: IntGauge,
    /// Warm pool ports (an address and flows ready for one VNID; set at scrape).
    pub pool_warm_ports: IntGauge,
    /// Agent version.
    pub build_info: IntGaugeVec,
    /// Tenants with an egress firewall, by state (`rules`, `drop_all`) (set at scrape).
    pub egress_firewalls: IntGaugeVec,
    /// Egress firewall rows on br0 (table 100 without its base row; set at scrape).
    pub egress_firewall_rules: IntGauge,
    /// dnsName lookups of egress firewalls, by result (`changed`, `unchanged`, `failed`).
    pub egress_dns_lookups: IntCounterVec,
    /// VNIDs with multicast in effect (set at scrape).
    pub multicast_tenants: IntGauge,
    /// Tenants with egress IPs by route (`local`, `remote`, `dropped`; set at scrape).
    pub egress_ip_tenants: IntGaugeVec,
    /// Egress IPs held on this node (set at scrape).
    pub egress_ips_held: IntGauge,
    /// Egress IP nodes found offline or back online, by change.
    pub egress_node_changes: IntCounterVec,
    /// Networkpolicy mode: NetworkPolicies in the cluster state.
    pub policies: IntGauge,
    /// Networkpolicy mode: NetworkPolicies that select a pod of this node.
    pub policies_active: IntGauge,
    /// Networkpolicy mode: ClusterNetworkPolicies in the cluster state.
    pub cluster_policies: IntGauge,
    /// Networkpolicy mode: ClusterNetworkPolicies with rows for a pod of this node.
    pub cluster_policies_active: IntGauge,
    /// Networkpolicy mode: policy rows on br0, by kind (`target`: per pod; `shared`: peers,
    /// ports and conjunction rows).
    pub policy_flows: IntGaugeVec,
    /// Networkpolicy mode: local pods some policy isolates.
    pub policy_isolated_pods: IntGauge,
    /// Networkpolicy mode: seconds from a rebuild's inputs to its bundle accepted.
    pub policy_rebuild_seconds: Histogram,
    /// Networkpolicy mode: datapath purges after policy changes.
    pub policy_datapath_purges: IntCounter,
    /// Audit lines written, by event (`decision`, `repeats`, `suppressed`, `note`) and verdict.
    pub audit_lines: IntCounterVec,
    /// Logged packets that made no line of their own, by reason (`rate-limit`: the switch's
    /// meter; `queue`: the agent's queue was full; `repeat`: folded into a connection's line).
    pub audit_suppressed: IntCounterVec,
    /// Audit lines lost to write errors of the file.
    pub audit_write_errors: IntCounter,
    /// Namespaces whose audit logging is on (set at scrape).
    pub audit_namespaces: IntGauge,
}

/// The process-wide metrics.
pub(crate) fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
    &METRICS
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help)
}

fn hist(name: &str, help: &str) -> HistogramOpts {
    HistogramOpts::new(name, help).buckets(SECONDS_BUCKETS.to_vec())
}

/// Registers each series as it is made. Every name and label set is a constant: registration
/// cannot fail but on a typo, which the unit test renders.
struct Registrar(Registry);

impl Registrar {
    fn add<C: Collector + Clone + 'static>(&self, c: C) -> C {
        self.0
            .register(Box::new(c.clone()))
            .expect("metric names are constants");
        c
    }

    fn counter(&self, name: &str, help: &str) -> IntCounter {
        self.add(IntCounter::with_opts(opts(name, help)).expect("constant"))
    }

    fn counters(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.add(IntCounterVec::new(opts(name, help), labels).expect("constant"))
    }

    fn gauge(&self, name: &str, help: &str) -> IntGauge {
        self.add(IntGauge::with_opts(opts(name, help)).expect("constant"))
    }

    fn float_gauge(&self, name: &str, help: &str) -> Gauge {
        self.add(Gauge::with_opts(opts(name, help)).expect("constant"))
    }

    fn gauges(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        self.add(IntGaugeVec::new(opts(name, help), labels).expect("constant"))
    }

    fn histogram(&self, name: &str, help: &str) -> Histogram {
        self.add(Histogram::with_opts(hist(name, help)).expect("constant"))
    }

    fn histograms(&self, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
        self.add(HistogramVec::new(hist(name, help), labels).expect("constant"))
    }
}

impl Metrics {
    fn new() -> Metrics {
        let r = Registrar(Registry::new());
        let latency = r.add(LatencySummary::new(
            "openshift_sdn_pod_operations_latency",
            "Latency in microseconds of SDN operations by operation type",
            "operation_type",
        ));
        let m = Metrics {
            pod_operations_latency: latency,
            pod_operations_errors: r.counters("openshift_sdn_pod_operations_errors", "Cumulative number of SDN operation errors by operation type", &["operation_type"]),
            ovs_operations: r.counters("openshift_sdn_ovs_operations", "Cumulative number of OVS operations by result type", &["result_type"]),
            vnid_not_found_errors: r.counter("openshift_sdn_vnid_not_found_errors", "Number of VNID-not-found errors"),
            ovs_flows: r.gauge("openshift_sdn_ovs_flows", "Number of Open vSwitch flows"),
            pod_ips: r.gauge("openshift_sdn_pod_ips", "Number of allocated pod IPs"),
            pod_ips_by_family: r.gauges("sdn_pod_ips", "Allocated pod addresses (pods, warm pool ports, deleted pods' until their flows go), by family", &["family"]),
            arp_cache_entries: r.gauge("openshift_sdn_arp_cache_entries", "Number of available entries in the ARP cache"),
            cni_request_duration: r.histograms("sdn_cni_request_duration_seconds", "CNI requests by command and result, seconds from receipt to answer", &["command", "result"]),
            cni_request_errors: r.counters("sdn_cni_request_errors_total", "Failed CNI requests by command and CNI error code", &["command", "code"]),
            flows: r.gauges("sdn_flows", "Flows the agent keeps on br0, by table name", &["table"]),
            reconnects: r.counters("sdn_ovs_reconnects_total", "Connections to Open vSwitch re-opened, by connection (ovsdb, openflow)", &["connection"]),
            drift_repairs: r.counters("sdn_drift_repairs_total", "Things the agent owns put back after they changed behind its back, by kind", &["kind"]),
            reconcile_duration: r.histograms("sdn_reconcile_duration_seconds", "Whole-bridge reconciles (desired flows against br0) by reason, seconds", &["reason"]),
            ready_seconds: r.float_gauge("sdn_ready_seconds", "Seconds from the agent's start to serving CNI requests"),
            ready: r.gauge("sdn_ready", "1 when the agent is ready (as /readyz and CNI STATUS), else 0"),
            state_problems: r.gauge("sdn_cluster_state_problems", "Cluster-state problems in effect (unparsable files, conflicting objects)"),
            vnid_changes: r.counter("sdn_vnid_changes_total", "NetNamespace VNID changes applied to this node's pods"),
            vnid_change_duration: r.histogram("sdn_vnid_change_duration_seconds", "Seconds to re-flow a namespace's pods for a VNID change"),
            hostport_errors: r.counter("sdn_hostport_errors_total", "Host-port failures (port taken, bad mapping, iptables)"),
            bandwidth_errors: r.counter("sdn_bandwidth_errors_total", "Bandwidth failures (bad value, no free meter, QoS)"),
            pods: r.gauge("sdn_pods", "Pods attached on this node"),
            pool_ports: r.gauge("sdn_port_pool_free", "Idle OVS ports ready for the next pod ADDs"),
            pool_warm_ports: r.gauge("sdn_port_pool_warm", "Pool ports with an address and a VNID's pod flows ready for the next ADD in that VNID"),
            build_info: r.gauges("sdn_build_info", "The agent's version, as a label; always 1", &["version"]),
            egress_firewalls: r.gauges("sdn_egress_firewall_tenants", "Tenants (VNIDs) with an EgressNetworkPolicy in effect, by state: rules, or drop_all (a second policy, a shared VNID)", &["state"]),
            egress_firewall_rules: r.gauge("sdn_egress_firewall_flows", "Egress firewall rows on br0 (table 100, one per CIDR or resolved address)"),
            egress_dns_lookups: r.counters("sdn_egress_dns_lookups_total", "DNS lookups of egress firewall dnsName rules, by result: changed (new addresses), unchanged, failed (last addresses kept)", &["result"]),
            multicast_tenants: r.gauge("sdn_multicast_tenants", "VNIDs with multicast in effect (every namespace of the VNID annotated)"),
            egress_ip_tenants: r.gauges("sdn_egress_ip_tenants", "Tenants (VNIDs) with egress IPs, by route: local (held here), remote (over VXLAN to their nodes), dropped (none usable)", &["route"]),
            egress_ips_held: r.gauge("sdn_egress_ips_held", "Egress IPs held on this node (address, mark and SNAT rules)"),
            egress_node_changes: r.counters("sdn_egress_node_changes_total", "Nodes hosting egress IPs found offline (3 probes of 1 s without answer) or back online", &["change"]),
            policies: r.gauge("sdn_network_policies", "NetworkPolicies in the cluster state (networkpolicy mode)"),
            policies_active: r.gauge("sdn_network_policies_active", "NetworkPolicies that select a pod of this node (networkpolicy mode)"),
            cluster_policies: r.gauge("sdn_cluster_network_policies", "ClusterNetworkPolicies in the cluster state (networkpolicy mode)"),
            cluster_policies_active: r.gauge("sdn_cluster_network_policies_active", "ClusterNetworkPolicies whose subject selects a pod of this node (networkpolicy mode)"),
            policy_flows: r.gauges("sdn_network_policy_flows", "NetworkPolicy rows on br0, by kind: target (per pod: its rules and isolation), shared (peers, ports, conjunction rows)", &["kind"]),
            policy_isolated_pods: r.gauge("sdn_network_policy_isolated_pods", "Local pods some NetworkPolicy isolates (ingress or egress)"),
            policy_rebuild_seconds: r.histogram("sdn_network_policy_rebuild_seconds", "Seconds from a NetworkPolicy rebuild's inputs to its bundle accepted by br0"),
            policy_datapath_purges: r.counter("sdn_network_policy_datapath_purges_total", "Datapath flow purges after NetworkPolicy changes (one per burst of rebuilds)"),
            audit_lines: r.counters("sdn_audit_lines_total", "Audit log lines written, by event (decision, repeats, suppressed, note) and verdict (allow, deny, none)", &["event", "verdict"]),
            audit_suppressed: r.counters("sdn_audit_suppressed_packets_total", "Logged packets that made no line of their own, by reason: rate-limit (the switch's meter), queue (the agent's queue was full), repeat (folded into their connection's line), unlogged (no namespace concerned asks for it any more, or not readable)", &["reason"]),
            audit_write_errors: r.counter("sdn_audit_write_errors_total", "Audit lines lost because the audit log file could not be written"),
            audit_namespaces: r.gauge("sdn_audit_namespaces", "Namespaces whose audit logging is on (k8s.ovn.org/acl-logging)"),
            registry: r.0,
        };
        m.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        m.exported_at_zero();
        m
    }

    /// Counters an alert reads exist at 0 from the start (an absent series reads "no data").
    fn exported_at_zero(&self) {
        let m = self;
        for op in ["setup", "teardown"] {
            m.pod_operations_errors.with_label_values(&[op]);
        }
        for result in ["success", "failure"] {
            m.ovs_operations.with_label_values(&[result]);
        }
        for command in ["ADD", "DEL", "CHECK"] {
            for code in ERROR_CODES_AT_ZERO {
                m.cni_request_errors.with_label_values(&[command, code]);
            }
        }
        for kind in DRIFT_KINDS {
            m.drift_repairs.with_label_values(&[kind]);
        }
        for connection in ["ovsdb", "openflow"] {
            m.reconnects.with_label_values(&[connection]);
        }
        // Set by the egress firewall feature, which subnet mode does not run: 0 there.
        for state in ["drop_all", "rules"] {
            m.egress_firewalls.with_label_values(&[state]);
        }
        for reason in ["rate-limit", "queue", "repeat", "unlogged"] {
            m.audit_suppressed.with_label_values(&[reason]);
        }
        for verdict in ["allow", "deny"] {
            m.audit_lines.with_label_values(&["decision", verdict]);
        }
    }

    /// Every series in the Prometheus text format (version 0.0.4).
    pub(crate) fn render(&self) -> String {
        let mut out = Vec::new();
        // Encoding our own families into a Vec cannot fail.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Counts one OVS operation's result.
    pub(crate) fn ovs_result<T, E>(&self, r: &Result<T, E>) {
        let kind = if r.is_ok() { "success" } else { "failure" };
        self.ovs_operations.with_label_values(&[kind]).inc();
    }

    /// Counts one drift repair of `kind` (one of [`DRIFT_KINDS`]).
    pub(crate) fn repaired(&self, kind: &str) {
        self.drift_repairs.with_label_values(&[kind]).inc();
    }
}

/// openshift-sdn's latency summary: sum and count of every observation, and quantiles over the
/// observations of the last ten minutes (at most [`SUMMARY_WINDOW`] per label value).
#[derive(Clone, Debug)]
pub(crate) struct LatencySummary {
    desc: Desc,
    label: &'static str,
    series: std::sync::Arc<Mutex<BTreeMap<String, Series>>>,
}

#[derive(Debug, Default)]
struct Series {
    sum: f64,
    count: u64,
    recent: VecDeque<(Instant, f64)>,
}

impl LatencySummary {
    fn new(name: &str, help: &str, label: &'static str) -> LatencySummary {
        LatencySummary {
            desc: Desc::new(
                name.into(),
                help.into(),
                vec![label.into()],
                Default::default(),
            )
            .expect("constant"),
            label,
            series: Default::default(),
        }
    }

    /// Records one operation of `operation_type` that took `took`.
    pub(crate) fn observe(&self, operation_type: &str, took: Duration) {
        let micros = (took.as_secs_f64() * 1e6).round();
        let mut all = lock(&self.series);
        let s = all.entry(operation_type.to_string()).or_default();
        s.sum += micros;
        s.count += 1;
        s.recent.push_back((Instant::now(), micros));
        if s.recent.len() > SUMMARY_WINDOW {
            s.recent.pop_front();
        }
    }
}

/// The `q` quantile of sorted `v` (nearest rank), NaN when empty (as client_golang).
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = (q * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

impl Collector for LatencySummary {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut all = lock(&self.series);
        let now = Instant::now();
        let mut metrics = Vec::new();
        for (value, s) in all.iter_mut() {
            while s
                .recent
                .front()
                .is_some_and(|(t, _)| now.duration_since(*t) > SUMMARY_MAX_AGE)
            {
                s.recent.pop_front();
            }
            let mut sorted: Vec<f64> = s.recent.iter().map(|(_, v)| *v).collect();
            sorted.sort_by(f64::total_cmp);
            let mut summary = Summary::default();
            summary.set_sample_sum(s.sum);
            summary.set_sample_count(s.count);
            summary.set_quantile(
                QUANTILES
                    .iter()
                    .map(|&q| {
                        let mut x = Quantile::default();
                        x.set_quantile(q);
                        x.set_value(quantile(&sorted, q));
                        x
                    })
                    .collect(),
            );
            let mut label = LabelPair::default();
            label.set_name(self.label.to_string());
            label.set_value(value.clone());
            let mut m = Metric::default();
            m.set_label(vec![label]);
            m.set_summary(summary);
            metrics.push(m);
        }
        let mut family = MetricFamily::default();
        family.set_name(self.desc.fq_name.clone());
        family.set_help(self.desc.help.clone());
        family.set_field_type(MetricType::SUMMARY);
        family.set_metric(metrics);
        vec![family]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_openshift_sdn_names_and_our_own() {
        let m = Metrics::new();
        m.pod_operations_latency
            .observe("setup", Duration::from_millis(3));
        m.pod_operations_latency
            .observe("setup", Duration::from_millis(5));
        m.pod_operations_errors.with_label_values(&["setup"]).inc();
        m.ovs_result::<(), ()>(&Ok(()));
        m.ovs_result::<(), ()>(&Err(()));
        m.cni_request_duration
            .with_label_values(&["ADD", "success"])
            .observe(0.003);
        m.flows.with_label_values(&["classifier"]).set(7);
        let text = m.render();
        for line in [
            "# TYPE openshift_sdn_pod_operations_latency summary",
            "openshift_sdn_pod_operations_latency{operation_type=\"setup\",quantile=\"0.5\"} 3000",
            "openshift_sdn_pod_operations_latency{operation_type=\"setup\",quantile=\"0.99\"} 5000",
            "openshift_sdn_pod_operations_latency_sum{operation_type=\"setup\"} 8000",
            "openshift_sdn_pod_operations_latency_count{operation_type=\"setup\"} 2",
            "openshift_sdn_pod_operations_errors{operation_type=\"setup\"} 1",
            "openshift_sdn_ovs_operations{result_type=\"success\"} 1",
            "openshift_sdn_ovs_operations{result_type=\"failure\"} 1",
            "sdn_cni_request_duration_seconds_bucket{command=\"ADD\",result=\"success\",le=\"0.004\"} 1",
            "sdn_cni_request_duration_seconds_count{command=\"ADD\",result=\"success\"} 1",
            "sdn_flows{table=\"classifier\"} 7",
            "sdn_build_info{version=\"",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.9), 90.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&[7.0], 0.5), 7.0);
        assert!(quantile(&[], 0.5).is_nan());
    }
}
