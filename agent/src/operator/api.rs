//! The agent's local API: JSON over HTTP/1.1 on a root-only Unix socket (`apiSocket`, by
//! default `api.sock` next to the CNI socket), for `sdnctl` and for operators' own tools.
//!
//! Why the agent answers instead of `sdnctl` reading OVS and the state directory itself: the
//! agent is the one that knows which pod owns a port, which tenant a VNID is, which cookie
//! belongs to whom, what drifted and what it repaired, in both cluster-state modes. Why a socket
//! of its own: the CNI socket speaks the shim's protocol and nothing else, and the two have
//! different clients. The socket is made as the CNI socket is (0700 directory owned by the
//! agent, 0600 socket, stale socket removed only when nobody listens) and every connection's
//! peer must be root.
//!
//! Endpoints (`GET` unless said):
//! - `/v1/status`: connections, pipeline version, readiness and liveness checks, the last
//!   reconcile and what it repaired, cluster-state problems, counts.
//! - `/v1/pods[?namespace=NS]`: every local pod with its sandbox, address, MAC, port, ofport,
//!   VNID, cookie, host ports and bandwidth.
//! - `/v1/namespaces`: NetNamespaces with their VNIDs and local pod counts.
//! - `/v1/flows[?pod=NS/NAME|table=NAME|tenant=NS]`: br0's flows as the switch holds them,
//!   each with its table name and the object that owns it (by cookie).
//! - `/v1/log`: the agent's recent log lines; `PUT /v1/log-level` (body: a level or filter)
//!   changes the level at once, `GET` shows it.
//! - `POST /v1/trace` (`{"src", "dst", "proto", "vni", "spoof_ip", "spoof_mac"}`): one packet
//!   through br0's real tables (`ofproto/trace`), each step named, the verdict in words
//!   ([`crate::operator::trace`]).
//! - `/v1/bundle`: everything `sdnctl bundle` archives, as `{file name: content}`.
//! - `/v1/egress-firewall`: every tenant's egress firewall in effect, rule by rule.
//! - `/v1/network-policies`: networkpolicy mode: the policies that select this node's pods,
//!   which pods they isolate, the rules with rows here and the row counts;
//! - `/v1/egress-ips`: every tenant's egress IPs: where its traffic leaves, each IP's node and
//!   state, the IPs this node holds and the watched nodes (online or offline).
//! - `/v1/config`: the configuration in force (it holds no secrets: a kubeconfig is a path).
//! - `/metrics`, `/livez`, `/readyz`: as on the metrics endpoint.
//!
//! Errors are `{"error": "..."}` with a 4xx/5xx status, each saying what to do.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use flows::Table;
use hyper::body::Bytes;
use hyper::{Method, StatusCode};
use ovs::openflow::DumpFilter;
use serde_json::{json, Value};

use crate::operator::observe::pod_mac;
use crate::operator::observe::{HttpAnswer, NodeView};
use local_api::{
    BandwidthEntry, Check, EgressEntry, EgressIpsView, EgressRuleEntry, FlowEntry, IsolationEntry,
    NamespaceEntry, NetworkPoliciesView, PodEntry, Status, TraceRequest,
};

/// Egress IPs as this node applies them.
pub async fn egress_ips(view: &NodeView) -> EgressIpsView {
    let (tenants, nodes) = view.egress_ips.entries().await;
    let held = view
        .egress_ips
        .held()
        .await
        .into_iter()
        .map(|(ip, v)| (ip.to_string(), v.id()))
        .collect();
    EgressIpsView {
        tenants,
        held,
        nodes,
    }
}

/// NetworkPolicies as this node applies them.
pub fn network_policies(view: &NodeView) -> NetworkPoliciesView {
    let Some(np) = &view.policies else {
        return NetworkPoliciesView::default();
    };
    let v = np.view();
    NetworkPoliciesView {
        enabled: true,
        policies: v.policies,
        active: v.active.iter().cloned().collect(),
        refused: view.state.borrow().refused_policies.clone(),
        isolated: v
            .isolated
            .iter()
            .map(|(port, iso)| {
                (
                    v.pods
                        .get(port)
                        .cloned()
                        .unwrap_or_else(|| format!("port {port}")),
                    IsolationEntry {
                        ingress: iso.ingress.clone(),
                        egress: iso.egress.clone(),
                    },
                )
            })
            .collect(),
        rules: v.rules.iter().map(|(id, r)| (*id, r.to_string())).collect(),
        target_rows: v.target_rows,
        shared_rows: v.shared_rows,
        cross_product_rows: v.cross_product_rows(false),
        cross_product_local_rows: v.cross_product_rows(true),
        rebuilds: v.rebuilds,
        last_rebuild_ms: u64::try_from(v.last_rebuild.as_millis()).unwrap_or(u64::MAX),
    }
}

/// Every tenant's egress firewall in effect.
pub async fn egress_entries(view: &NodeView) -> Vec<EgressEntry> {
    let state = view.state.borrow().clone();
    view.egress
        .current()
        .await
        .into_iter()
        .map(|(v, p)| EgressEntry {
            vnid: v.id(),
            namespaces: state
                .namespaces_of(v.id())
                .into_iter()
                .map(String::from)
                .collect(),
            policies: p.policies.clone(),
            drop_all: p.problem.clone(),
            rules: match &p.firewall {
                flows::EgressFirewall::DropAll => Vec::new(),
                flows::EgressFirewall::Rules(r) => r
                    .iter()
                    .map(|r| EgressRuleEntry {
                        action: if r.allow { "Allow" } else { "Deny" }.into(),
                        to: r.to.iter().map(ToString::to_string).collect(),
                    })
                    .collect(),
            },
        })
        .collect()
}

fn err(status: StatusCode, msg: impl Into<String>) -> HttpAnswer {
    HttpAnswer::json(status, &json!({ "error": msg.into() }))
}

fn query_params(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = |b: u8| (b as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The pods of the node as entries.
pub async fn pod_entries(view: &NodeView) -> Vec<PodEntry> {
    view.pods
        .list()
        .await
        .into_iter()
        .map(|p| PodEntry {
            namespace: p.namespace.clone(),
            pod: p.name.clone(),
            sandbox: p.attachment.container_id.clone(),
            ifname: p.attachment.ifname.clone(),
            ip: p.ip,
            mac: pod_mac(p.ip),
            port: p.host_veth.clone(),
            ofport: p.ofport,
            vnid: p.vnid.id(),
            cookie: format!("{:#x}", p.cookie()),
            host_ports: p
                .hostports
                .as_deref()
                .and_then(|h| serde_json::from_str(h).ok())
                .unwrap_or(Value::Null),
            bandwidth: BandwidthEntry {
                ingress_bps: p.limits.ingress.map(|l| l.rate),
                egress_bps: p.limits.egress.map(|l| l.rate),
            },
            netns: p.netns.clone(),
        })
        .collect()
}

/// The namespaces with their VNIDs and local pod counts.
pub async fn namespace_entries(view: &NodeView) -> Vec<NamespaceEntry> {
    let state = view.state.borrow().clone();
    let pods = view.pods.list().await;
    let multicast = state.multicast_vnids();
    state
        .net_namespaces
        .values()
        .map(|n| NamespaceEntry {
            name: n.net_name.clone(),
            netid: n.net_id,
            local_pods: pods.iter().filter(|p| p.namespace == n.net_name).count(),
            multicast: multitenant::Vnid::new(n.net_id).is_some_and(|v| multicast.contains(&v)),
            problem: None,
        })
        .chain(
            state
                .broken_namespaces
                .iter()
                .map(|(name, why)| NamespaceEntry {
                    name: name.clone(),
                    netid: multitenant::Vnid::UNASSIGNED.id(),
                    local_pods: pods.iter().filter(|p| &p.namespace == name).count(),
                    multicast: false,
                    problem: Some(why.clone()),
                }),
        )
        .collect()
}

/// br0's flows selected by the query (`pod=NS/NAME`, `table=NAME|NUMBER`, `tenant=NS`), each
/// named.
pub async fn flow_entries(
    view: &NodeView,
    q: &BTreeMap<String, String>,
) -> Result<Vec<FlowEntry>, HttpAnswer> {
    let owners = view.cookie_owners().await;
    let pods = view.pods.list().await;
    let state = view.state.borrow().clone();
    let mut cookies: Option<Vec<u64>> = None;
    let mut table: Option<u8> = None;
    if let Some(p) = q.get("pod") {
        let (ns, name) = p.split_once('/').ok_or_else(|| {
            err(
                StatusCode::BAD_REQUEST,
                format!("pod {p:?}: expected NAMESPACE/NAME"),
            )
        })?;
        let pod = pods
            .iter()
            .find(|x| x.namespace == ns && x.name == name)
            .ok_or_else(|| {
                err(
                    StatusCode::NOT_FOUND,
                    format!("no pod {ns}/{name} on this node (sdnctl pods lists them)"),
                )
            })?;
        cookies = Some(vec![
            pod.cookie(),
            flows::vnid_cookie(pod.vnid),
            flows::policy_target_cookie(&pod.host_veth),
        ]);
    }
    if let Some(ns) = q.get("tenant") {
        let nn = state.net_namespaces.get(ns).ok_or_else(|| {
            err(
                StatusCode::NOT_FOUND,
                format!("no NetNamespace {ns:?} (sdnctl namespaces lists them)"),
            )
        })?;
        let vnid = multitenant::Vnid::new(nn.net_id).ok_or_else(|| {
            err(
                StatusCode::BAD_REQUEST,
                format!("NetNamespace {ns} has netid {} out of range", nn.net_id),
            )
        })?;
        let mut c: Vec<u64> = pods
            .iter()
            .filter(|p| p.vnid == vnid)
            .map(|p| p.cookie())
            .collect();
        c.push(flows::vnid_cookie(vnid));
        c.push(flows::egress_cookie(vnid));
        c.push(flows::multicast_cookie(vnid));
        c.push(flows::egress_ip_cookie(vnid));
        cookies = Some(c);
    }
    if let Some(t) = q.get("table") {
        let found = t
            .parse::<u8>()
            .ok()
            .and_then(Table::from_id)
            .or_else(|| Table::ALL.into_iter().find(|x| x.name() == t))
            .ok_or_else(|| {
                let names: Vec<&str> = Table::ALL.iter().map(|x| x.name()).collect();
                err(
                    StatusCode::BAD_REQUEST,
                    format!("no table {t:?}; the tables are {}", names.join(", ")),
                )
            })?;
        table = Some(found.id());
    }
    let filter = match table {
        Some(t) => DumpFilter::table(t),
        None => DumpFilter::all(),
    };
    let dumped = view.switch.dump(&filter).await.map_err(|e| {
        err(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("dumping br0's flows: {e}; is ovs-vswitchd running?"),
        )
    })?;
    let names = table_names();
    let mut out: Vec<FlowEntry> = dumped
        .into_iter()
        .filter(|f| cookies.as_ref().is_none_or(|c| c.contains(&f.cookie)))
        .map(|f| FlowEntry {
            table: f.table,
            table_name: Table::from_id(f.table)
                .map_or("unknown", Table::name)
                .to_string(),
            priority: f.priority,
            cookie: format!("{:#x}", f.cookie),
            owner: owners
                .get(&f.cookie)
                .cloned()
                .unwrap_or_else(|| "unknown (not the agent's: added by hand?)".into()),
            flow: f.text(&names).to_string(),
        })
        .collect();
    out.sort_by(|a, b| {
        (a.table, std::cmp::Reverse(a.priority), &a.flow).cmp(&(
            b.table,
            std::cmp::Reverse(b.priority),
            &b.flow,
        ))
    });
    Ok(out)
}

/// Table names for flow text.
pub fn table_names() -> ovs::flow::Names {
    ovs::flow::Names::new().tables(Table::names())
}

/// `sdnctl status`.
pub async fn status(view: &NodeView) -> Status {
    let m = crate::telemetry::metrics::metrics();
    let family = |name: &str, label: &str| -> BTreeMap<String, u64> {
        let v = match name {
            "repairs" => &m.drift_repairs,
            _ => &m.reconnects,
        };
        let mut out = BTreeMap::new();
        for mf in prometheus::core::Collector::collect(v) {
            for metric in mf.get_metric() {
                let key = metric
                    .get_label()
                    .iter()
                    .find(|l| l.name() == label)
                    .map(|l| l.value().to_string())
                    .unwrap_or_default();
                out.insert(key, metric.get_counter().get_value() as u64);
            }
        }
        out
    };
    let readiness = view.readiness(true).await;
    let state = view.state.borrow().clone();
    let mut problems = view.source.problems();
    problems.extend(
        state
            .problems()
            .into_iter()
            .map(|(kind, name, e)| format!("{} {name}: {e}", kind.as_str())),
    );
    let pods = view.pods.list().await;
    let desired = view.store.desired().await;
    let counts = BTreeMap::from([
        ("pods".to_string(), pods.len()),
        ("namespaces".to_string(), state.net_namespaces.len()),
        (
            "remote_nodes".to_string(),
            state.host_subnets.len().saturating_sub(1),
        ),
        ("flows".to_string(), desired.len()),
        ("warm_ports".to_string(), view.pods.pool().idle()),
        ("leases".to_string(), view.pods.lease_count()),
    ]);
    Status {
        node: view.config.node_name.clone(),
        mode: view.node.mode.name().to_string(),
        subnet: view.node.local_subnet.to_string(),
        node_ip: view.node.node_ip.to_string(),
        datapath: view.config.datapath_type.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        pipeline_version: view.pipeline_version(),
        ready: readiness.iter().all(|c| c.ok),
        readiness,
        liveness: view.liveness(),
        uptime_seconds: view.health.uptime().as_secs(),
        ready_after_seconds: view.health.ready_after().map(|d| d.as_secs_f64()),
        last_reconcile: view.health.last_reconcile(),
        repairs: family("repairs", "kind"),
        reconnects: family("reconnects", "connection"),
        state_problems: problems,
        cluster_state: view.config.cluster_state.to_string(),
        counts,
        metrics_address: view.config.metrics_address().map(|a| a.to_string()),
    }
}

/// The OVSDB tables a bundle shows, as the agent's monitor holds them.
const BUNDLE_TABLES: [&str; 6] = [
    "Open_vSwitch",
    "Bridge",
    "Port",
    "Interface",
    "QoS",
    "Queue",
];

/// Everything `sdnctl bundle` archives, as file name → content. What is left out on purpose:
/// the contents of a kubeconfig or service-account token (the config holds a path at most),
/// pods' annotations (they can hold anything), the environment.
pub async fn bundle(view: &NodeView) -> BTreeMap<String, String> {
    let pretty = |v: &dyn erased::Json| v.json();
    let mut files = BTreeMap::new();
    let st = status(view).await;
    files.insert("status.json".into(), pretty(&st));
    files.insert("config.json".into(), pretty(&view.config));
    if let Some(l) = crate::telemetry::logging::logging() {
        files.insert("agent.log".into(), l.recent());
    }
    files.insert("pods.json".into(), pretty(&pod_entries(view).await));
    files.insert(
        "namespaces.json".into(),
        pretty(&namespace_entries(view).await),
    );
    files.insert(
        "egress-firewall.json".into(),
        pretty(&egress_entries(view).await),
    );
    files.insert("egress-ips.json".into(), pretty(&egress_ips(view).await));
    files.insert(
        "network-policies.json".into(),
        pretty(&network_policies(view)),
    );
    match flow_entries(view, &BTreeMap::new()).await {
        Ok(flows) => {
            let mut text = String::new();
            let mut table = None;
            for f in &flows {
                if table != Some(f.table) {
                    text.push_str(&format!("table {} {}:\n", f.table, f.table_name));
                    table = Some(f.table);
                }
                text.push_str(&format!("  {}\n      owner: {}\n", f.flow, f.owner));
            }
            files.insert("flows.txt".into(), text);
            files.insert("flows.json".into(), pretty(&flows));
        }
        Err(e) => {
            files.insert("flows.error.txt".into(), e.body);
        }
    }
    let ovsdb: BTreeMap<&str, BTreeMap<String, BTreeMap<String, Value>>> =
        view.db.with_cache(|c| {
            BUNDLE_TABLES
                .iter()
                .filter(|t| c.schema().has_table(t))
                .map(|t| {
                    let rows = c
                        .table(t)
                        .map(|r| {
                            let cols = r
                                .columns()
                                .iter()
                                .map(|(k, d)| (k.clone(), d.to_json()))
                                .collect();
                            (r.uuid().to_string(), cols)
                        })
                        .collect();
                    (*t, rows)
                })
                .collect()
        });
    files.insert("ovsdb.json".into(), pretty(&ovsdb));
    let ipt = crate::host::iptables::Iptables::host();
    let mut rules = String::new();
    for table in ["nat", "filter"] {
        match ipt.list(table).await {
            Ok(lines) => {
                rules.push_str(&format!("# iptables -t {table} -S (the agent's chains)\n"));
                for l in lines.iter().filter(|l| l.contains("SDN-")) {
                    rules.push_str(l);
                    rules.push('\n');
                }
            }
            Err(e) => rules.push_str(&format!("# iptables -t {table}: {e}\n")),
        }
    }
    files.insert("iptables.txt".into(), rules);
    let state = view.state.borrow().clone();
    let cluster = json!({
        "clusterNetwork": state.cluster_network,
        "hostSubnets": state.host_subnets,
        "netNamespaces": state.net_namespaces,
        "problems": st.state_problems,
        "source": view.config.cluster_state.to_string(),
    });
    files.insert("cluster-state.json".into(), pretty(&cluster));
    view.fill_gauges().await;
    view.fill_ready().await;
    files.insert(
        "metrics.txt".into(),
        crate::telemetry::metrics::metrics().render(),
    );
    files.insert(
        "README.txt".into(),
        format!(
            "sdn-agent {} debug bundle of node {}\n\nstatus.json      readiness, liveness, last reconcile, repairs, problems, counts\nconfig.json      the agent's configuration\nagent.log        the agent's last log lines\npods.json        pods: sandbox, IP, MAC, port, ofport, VNID, cookie\nnamespaces.json  NetNamespaces and local pod counts\negress-firewall.json  each tenant's egress firewall in effect\negress-ips.json  each tenant's egress IPs, the IPs held here, watched nodes\nnetwork-policies.json  NetworkPolicies applied here: isolated pods, rules, rows\nflows.txt/json   br0's flows by table, each with its owner\novsdb.json       OVSDB rows: Open_vSwitch, Bridge, Port, Interface, QoS, Queue\niptables.txt     the agent's iptables chains (nat, filter)\ncluster-state.json  ClusterNetwork, HostSubnets, NetNamespaces, problems\nmetrics.txt      a scrape of /metrics\n\nLeft out on purpose: kubeconfig and token contents, pod annotations, the environment.\n",
            env!("CARGO_PKG_VERSION"),
            view.config.node_name
        ),
    );
    files
}

/// Pretty JSON of any serializable value, for the bundle's files.
mod erased {
    /// A value the bundle writes as JSON.
    pub trait Json {
        /// Pretty JSON with a final newline.
        fn json(&self) -> String;
    }
    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> String {
            serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
        }
    }
}

/// Answers one API request.
pub async fn answer(
    view: &NodeView,
    method: &Method,
    path: &str,
    query: &str,
    body: &Bytes,
) -> HttpAnswer {
    let q = query_params(query);
    let get = method == Method::GET || method == Method::HEAD;
    match (path, get) {
        ("/v1/status", true) => HttpAnswer::json(StatusCode::OK, &status(view).await),
        ("/v1/pods", true) => {
            let mut pods = pod_entries(view).await;
            if let Some(ns) = q.get("namespace") {
                pods.retain(|p| &p.namespace == ns);
            }
            HttpAnswer::json(StatusCode::OK, &pods)
        }
        ("/v1/namespaces", true) => {
            HttpAnswer::json(StatusCode::OK, &namespace_entries(view).await)
        }
        ("/v1/flows", true) => match flow_entries(view, &q).await {
            Ok(f) => HttpAnswer::json(StatusCode::OK, &f),
            Err(e) => e,
        },
        ("/v1/config", true) => HttpAnswer::json(StatusCode::OK, &view.config),
        ("/v1/egress-firewall", true) => {
            HttpAnswer::json(StatusCode::OK, &egress_entries(view).await)
        }
        ("/v1/egress-ips", true) => HttpAnswer::json(StatusCode::OK, &egress_ips(view).await),
        ("/v1/network-policies", true) => HttpAnswer::json(StatusCode::OK, &network_policies(view)),
        ("/v1/bundle", true) => HttpAnswer::json(StatusCode::OK, &bundle(view).await),
        ("/v1/trace", false) if method == Method::POST => {
            let req: TraceRequest = match serde_json::from_slice(body) {
                Ok(r) => r,
                Err(e) => {
                    return err(
                        StatusCode::BAD_REQUEST,
                        format!("the trace request is not {{\"src\", \"dst\", \"proto\"}}: {e}"),
                    )
                }
            };
            match crate::operator::trace::trace(view, &req).await {
                Ok(t) => HttpAnswer::json(StatusCode::OK, &t),
                Err(e @ crate::operator::trace::TraceError::BadRequest(_)) => {
                    err(StatusCode::BAD_REQUEST, e.to_string())
                }
                Err(e) => err(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
            }
        }
        ("/v1/trace", true) => err(
            StatusCode::METHOD_NOT_ALLOWED,
            "use POST /v1/trace with {\"src\", \"dst\", \"proto\"}",
        ),
        ("/v1/log", true) => match crate::telemetry::logging::logging() {
            Some(l) if q.get("format").map(String::as_str) == Some("json") => HttpAnswer {
                status: StatusCode::OK,
                content_type: "application/json",
                body: l.recent_json(),
            },
            Some(l) => HttpAnswer::text(StatusCode::OK, l.recent()),
            None => err(StatusCode::NOT_FOUND, "this agent keeps no log in memory"),
        },
        ("/v1/log-level", _) => match (crate::telemetry::logging::logging(), method.as_str()) {
            (None, _) => err(
                StatusCode::NOT_FOUND,
                "this agent's logger cannot change level",
            ),
            (Some(l), "GET") => HttpAnswer::json(StatusCode::OK, &json!({ "level": l.level() })),
            (Some(l), "PUT") => {
                let text = String::from_utf8_lossy(body);
                match l.set_level(&text) {
                    Ok(previous) => HttpAnswer::json(
                        StatusCode::OK,
                        &json!({ "level": l.level(), "previous": previous }),
                    ),
                    Err(e) => err(StatusCode::BAD_REQUEST, e),
                }
            }
            (Some(_), m) => err(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("method {m} is not allowed on /v1/log-level; use GET or PUT"),
            ),
        },
        ("/metrics", true) => {
            view.fill_gauges().await;
            view.fill_ready().await;
            HttpAnswer {
                status: StatusCode::OK,
                content_type: "text/plain; version=0.0.4; charset=utf-8",
                body: crate::telemetry::metrics::metrics().render(),
            }
        }
        ("/livez", true) => {
            let c = view.liveness();
            checks_json(&c)
        }
        ("/readyz", true) => {
            let c = view.readiness(true).await;
            checks_json(&c)
        }
        (
            "/v1/status" | "/v1/pods" | "/v1/namespaces" | "/v1/flows" | "/v1/config" | "/v1/log"
            | "/metrics" | "/livez" | "/readyz",
            false,
        ) => err(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("method {method} is not allowed on {path}; use GET"),
        ),
        _ => err(
            StatusCode::NOT_FOUND,
            format!("no such endpoint {path:?}; see the agent::api docs (sdnctl --help)"),
        ),
    }
}

fn checks_json(checks: &[Check]) -> HttpAnswer {
    let ok = checks.iter().all(|c| c.ok);
    HttpAnswer::json(
        if ok {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        &json!({ "ok": ok, "checks": checks }),
    )
}

/// Starts the API on `socket` (see the module docs for the socket's hygiene).
pub async fn serve(socket: &Path, view: Arc<NodeView>) -> Result<tokio::task::JoinHandle<()>> {
    let listener = crate::cni::server::bind_private_socket(socket)
        .await
        .with_context(|| format!("starting the local API on {} (apiSocket)", socket.display()))?;
    tracing::info!(socket = %socket.display(), "local API listening (sdnctl)");
    let socket = socket.to_path_buf();
    Ok(tokio::spawn(async move {
        let _cleanup = crate::cni::server::RemoveOnDrop::new(&socket);
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let refusal = match stream.peer_cred() {
                        Ok(c) if c.uid() == 0 => None,
                        Ok(c) => Some(format!("peer uid {} is not root", c.uid())),
                        Err(e) => Some(format!("peer credentials unavailable: {e}")),
                    };
                    let view = view.clone();
                    tokio::spawn(async move {
                        crate::operator::observe::serve_http(
                            stream,
                            move |method, path, query, body| {
                                let view = view.clone();
                                let refusal = refusal.clone();
                                async move {
                                    if let Some(why) = refusal {
                                        tracing::warn!(%why, "refusing a local API connection");
                                        return err(
                                            StatusCode::FORBIDDEN,
                                            format!("{why}: the local API is root only"),
                                        );
                                    }
                                    answer(&view, &method, &path, &query, &body).await
                                }
                            },
                        )
                        .await
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "local API accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_and_mac() {
        let q = query_params("pod=tenant-a%2Fweb&table=local_ip&x");
        assert_eq!(q["pod"], "tenant-a/web");
        assert_eq!(q["table"], "local_ip");
        assert_eq!(q["x"], "");
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(pod_mac("10.128.0.2".parse().unwrap()), "0a:58:0a:80:00:02");
    }
}
