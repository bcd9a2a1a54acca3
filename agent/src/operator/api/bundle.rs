//! `sdnctl bundle`'s content: everything an operator attaches to a bug report, as
//! `{file name: content}` (status, pods, flows, OVS tables and config, the log, the cluster state
//! problems), each part bounded so a bundle is taken even while OVS hangs.

use crate::operator::observe::NodeView;
use serde_json::{json, Value};
use std::collections::BTreeMap;

use super::*;

/// The OVSDB tables a bundle shows, as the agent's monitor holds them.
pub(crate) const BUNDLE_TABLES: [&str; 6] = [
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
pub(crate) async fn bundle(view: &NodeView) -> BTreeMap<String, String> {
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
        "hostSubnets": &*state.host_subnets,
        "netNamespaces": &*state.net_namespaces,
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
