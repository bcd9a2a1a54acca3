//! The local API's answers, each built from the node view: status, pods, namespaces, flows with
//! their owners and table names, egress firewalls, egress IPs, network policies.

use crate::operator::observe::{HttpAnswer, NodeView};
use flows::Table;
use hyper::StatusCode;
use local_api::{
    BandwidthEntry, EgressAction, EgressEntry, EgressIpsView, EgressRuleEntry, FlowEntry,
    IsolationEntry, NamespaceEntry, NetworkPoliciesView, PodEntry, Status,
};
use ovs::openflow::DumpFilter;
use serde_json::Value;
use std::collections::BTreeMap;

use super::*;
use crate::operator::observe::{EgressFirewalls, EgressIps, NetworkPolicies};

/// Egress IPs as this node applies them.
pub(crate) async fn egress_ips(view: &NodeView) -> EgressIpsView {
    let Some(eips) = view.features.get::<EgressIps>() else {
        return EgressIpsView {
            tenants: Vec::new(),
            held: BTreeMap::new(),
            nodes: BTreeMap::new(),
        };
    };
    let (tenants, nodes) = eips.entries().await;
    let held = eips
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
pub(crate) fn network_policies(view: &NodeView) -> NetworkPoliciesView {
    let Some(np) = view.features.get::<NetworkPolicies>() else {
        return NetworkPoliciesView::default();
    };
    let v = np.view();
    // One borrow, dropped before the rest: a `borrow()` in a field of the struct literal lives
    // to the end of the statement, and a second one there is a recursive read lock of the
    // state, which deadlocks once the state's writer waits between the two.
    let (refused, cluster_refused) = {
        let st = view.state.borrow();
        (
            st.refused_policies.clone(),
            st.refused_cluster_policies.clone(),
        )
    };
    NetworkPoliciesView {
        enabled: true,
        policies: v.policies,
        active: v.active.iter().cloned().collect(),
        refused,
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
        cluster_policies: v.cluster_policies,
        cluster_active: v.cluster_active.iter().cloned().collect(),
        cluster_refused,
    }
}

/// Every tenant's egress firewall in effect.
pub(crate) async fn egress_entries(view: &NodeView) -> Vec<EgressEntry> {
    let state = view.state.borrow().clone();
    let Some(firewalls) = view.features.get::<EgressFirewalls>() else {
        return Vec::new();
    };
    firewalls
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
                        action: if r.allow {
                            EgressAction::Allow
                        } else {
                            EgressAction::Deny
                        },
                        to: r.to.clone(),
                    })
                    .collect(),
            },
        })
        .collect()
}

/// The pods of the node as entries.
pub(crate) async fn pod_entries(view: &NodeView) -> Vec<PodEntry> {
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
            ip6: p.ip6,
            mac: ovs::flow::MacAddr::from_pod_addrs(p.ip, p.ip6)
                .map(|m| m.to_string())
                .unwrap_or_default(),
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
pub(crate) async fn namespace_entries(view: &NodeView) -> Vec<NamespaceEntry> {
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
pub(crate) async fn flow_entries(
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
pub(crate) fn table_names() -> ovs::flow::Names {
    ovs::flow::Names::new().tables(Table::names())
}

/// `sdnctl status`.
pub(crate) async fn status(view: &NodeView) -> Status {
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
        subnet: view.node.ipv4.as_ref().map(|v4| v4.local_subnet),
        subnet6: view.node.ipv6.as_ref().map(|v6| v6.local_subnet),
        node_ip: view.node.node_ip,
        datapath: view.config.datapath_type.to_string(),
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
        audit_log: Some(view.config.audit_log_file.display().to_string()),
        features: view
            .features
            .status()
            .await
            .into_iter()
            .map(|(name, summary)| local_api::FeatureLine {
                name: name.to_string(),
                summary,
            })
            .collect(),
    }
}
