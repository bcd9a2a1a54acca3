//! The tables `sdnctl` prints of the agent's answers (with `--json` it prints the answer as it
//! came).

use local_api::{FlowEntry, NamespaceEntry, PodEntry, Status};

/// Percent-encodes a query value.
pub(crate) fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Left-aligned columns separated by two spaces.
fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut s = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        s.push_str(line.join("  ").trim_end());
        s.push('\n');
    }
    s
}

pub(crate) fn status(st: &Status) -> String {
    let subnets: Vec<String> = st
        .subnet
        .map(|s| s.to_string())
        .into_iter()
        .chain(st.subnet6.map(|s| s.to_string()))
        .collect();
    let mut s = format!(
        "node {} ({} mode, subnet {}, node IP {}, {} datapath), agent {}, pipeline {}\n",
        st.node,
        st.mode,
        subnets.join(","),
        st.node_ip,
        st.datapath,
        st.version,
        st.pipeline_version
    );
    s.push_str(&format!(
        "{}; up {} s{}\n",
        if st.ready { "READY" } else { "NOT READY" },
        st.uptime_seconds,
        st.ready_after_seconds
            .map(|r| format!(", served {r:.3} s after start"))
            .unwrap_or_default()
    ));
    for c in st.readiness.iter().chain(&st.liveness) {
        s.push_str(&format!(
            "  [{}] {}: {}\n",
            if c.ok { "ok" } else { "FAIL" },
            c.name,
            c.detail
        ));
    }
    match &st.last_reconcile {
        Some(r) => {
            s.push_str(&format!(
                "last reconcile: {} ({} ms), {} flows desired, {} added, {} deleted{}\n",
                r.reason,
                r.took_ms,
                r.desired,
                r.added,
                r.deleted,
                r.error
                    .as_ref()
                    .map(|e| format!(", FAILED: {e}"))
                    .unwrap_or_default()
            ));
            for c in &r.changes {
                s.push_str(&format!("  changed: {c}\n"));
            }
        }
        None => s.push_str("last reconcile: none yet\n"),
    }
    let list = |m: &std::collections::BTreeMap<String, u64>| {
        if m.is_empty() {
            "none".to_string()
        } else {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    s.push_str(&format!("repairs since start: {}\n", list(&st.repairs)));
    s.push_str(&format!(
        "reconnects since start: {}\n",
        list(&st.reconnects)
    ));
    s.push_str(&format!(
        "counts: {}\n",
        st.counts
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if !st.features.is_empty() {
        s.push_str("features:\n");
        for f in &st.features {
            s.push_str(&format!("  {}: {}\n", f.name, f.summary));
        }
    }
    s.push_str(&format!("cluster state: {}", st.cluster_state));
    if st.state_problems.is_empty() {
        s.push_str(", no problems\n");
    } else {
        s.push_str(&format!(", {} problem(s):\n", st.state_problems.len()));
        for p in &st.state_problems {
            s.push_str(&format!("  {p}\n"));
        }
    }
    if let Some(m) = &st.metrics_address {
        s.push_str(&format!(
            "metrics: http://{m}/metrics (health: /livez, /readyz)\n"
        ));
    }
    s
}

pub(crate) fn pods(pods: &[PodEntry]) -> String {
    let mut rows = vec![[
        "NAMESPACE",
        "POD",
        "SANDBOX",
        "IP",
        "MAC",
        "PORT",
        "OFPORT",
        "VNID",
        "COOKIE",
        "HOSTPORTS",
        "BANDWIDTH",
    ]
    .map(String::from)
    .to_vec()];
    for p in pods {
        let hp = match &p.host_ports {
            serde_json::Value::Array(a) => a
                .iter()
                .map(|m| {
                    format!(
                        "{}->{}/{}",
                        m["hostPort"].as_u64().unwrap_or(0),
                        m["containerPort"].as_u64().unwrap_or(0),
                        m["protocol"].as_str().unwrap_or("tcp").to_lowercase()
                    )
                })
                .collect::<Vec<_>>()
                .join(","),
            _ => "-".into(),
        };
        let bw = |v: Option<u64>| v.map_or("-".to_string(), |b| format!("{b}bps"));
        let bandwidth = match (p.bandwidth.ingress_bps, p.bandwidth.egress_bps) {
            (None, None) => "-".to_string(),
            (i, e) => format!("in {} out {}", bw(i), bw(e)),
        };
        rows.push(vec![
            p.namespace.clone(),
            p.pod.clone(),
            p.sandbox.chars().take(12).collect(),
            p.ip.map(|ip| ip.to_string())
                .into_iter()
                .chain(p.ip6.map(|ip6| ip6.to_string()))
                .collect::<Vec<_>>()
                .join(","),
            p.mac.clone(),
            p.port.clone(),
            p.ofport.to_string(),
            p.vnid.to_string(),
            p.cookie.clone(),
            if hp.is_empty() { "-".into() } else { hp },
            bandwidth,
        ]);
    }
    columns(&rows)
}

pub(crate) fn flows(flows: &[FlowEntry]) -> String {
    let mut s = String::new();
    let mut table = None;
    for f in flows {
        if table != Some(f.table) {
            s.push_str(&format!("table {} {}:\n", f.table, f.table_name));
            table = Some(f.table);
        }
        s.push_str(&format!("  {}\n      owner: {}\n", f.flow, f.owner));
    }
    if flows.is_empty() {
        s.push_str("no flows match\n");
    }
    s
}

pub(crate) fn trace(t: &local_api::TraceResult, raw: bool) -> String {
    let mut s = format!("from {}\nto   {}\npacket {}\n", t.src, t.dst, t.packet);
    for step in &t.steps {
        let m = if step.matched.is_empty() {
            format!("priority {}", step.priority)
        } else {
            format!("{}, priority {}", step.matched, step.priority)
        };
        s.push_str(&format!(
            "  {:>3} {:<22} {m}\n      {}  [{}]\n",
            step.table,
            step.table_name,
            step.actions.join(", "),
            step.owner
        ));
    }
    let outcome = match t.outcome {
        local_api::Outcome::Delivered => "DELIVERED",
        local_api::Outcome::ToHost => "TO THE NODE",
        local_api::Outcome::ToRemoteNode => "TO ANOTHER NODE",
        local_api::Outcome::Dropped => "DROPPED",
    };
    for p in &t.policy {
        s.push_str(&format!("policy: {p}\n"));
    }
    match t.verdict.strip_prefix("dropped ") {
        Some(rest) => s.push_str(&format!("verdict: DROPPED {rest}\n")),
        None => s.push_str(&format!("verdict: {outcome}: {}\n", t.verdict)),
    }
    if raw {
        s.push_str("\nofproto/trace:\n");
        s.push_str(&t.raw);
    }
    if let Some(l) = &t.live {
        s.push_str(&live_trace(l));
    }
    s
}

/// The live part of `sdnctl trace --live`.
/// The hops of a live trace, one line each (and the row that ended or passed the packet on).
fn live_hops(s: &mut String, hops: &[local_api::LiveHop]) {
    let mut pass = 1;
    for h in hops {
        if h.pass != pass {
            pass = h.pass;
            s.push_str(&format!(
                "  -- back from the node through tun0 (pass {pass}) --\n"
            ));
        }
        let what = match h.event {
            local_api::LiveEvent::Entered => "entered",
            local_api::LiveEvent::Delivered => "DELIVERED",
            local_api::LiveEvent::Left => "LEFT",
            local_api::LiveEvent::Dropped => "DROPPED",
        };
        let mut facts = vec![format!("in_port {}", h.in_port)];
        if !h.ct_state.is_empty() {
            facts.push(format!("ct {}", h.ct_state));
        }
        if !h.regs.is_empty() {
            facts.push(h.regs.clone());
        }
        s.push_str(&format!(
            "  {:>3} {:<22} {what:<9} {}\n",
            h.table,
            h.table_name,
            facts.join(", ")
        ));
        if let Some(row) = &h.row {
            s.push_str(&format!(
                "      row: {row}  [{}]\n",
                h.owner.as_deref().unwrap_or("?")
            ));
        }
    }
}

fn live_trace(l: &local_api::LiveTrace) -> String {
    let mut s = format!("\nlive: {}\n", l.packet);
    live_hops(&mut s, &l.hops);
    if let Some(r) = &l.remote {
        s.push_str(&format!("  -- on node {} --\n", r.node));
        live_hops(&mut s, &r.hops);
    }
    let outcome = match l.outcome {
        local_api::Outcome::Delivered => "DELIVERED",
        local_api::Outcome::ToHost => "TO THE NODE",
        local_api::Outcome::ToRemoteNode => "TO ANOTHER NODE",
        local_api::Outcome::Dropped => "DROPPED",
    };
    s.push_str(&format!(
        "live verdict: {outcome}: {} ({} ms; {} temporary rows)\n",
        l.verdict, l.elapsed_ms, l.rows
    ));
    if let Some(g) = &l.gaps {
        s.push_str(&format!("live gaps: {g}\n"));
    }
    if l.differs.is_empty() {
        s.push_str("live and static agree\n");
    }
    for d in &l.differs {
        s.push_str(&format!("DIFFERS: {d}\n"));
    }
    s
}

pub(crate) fn egress(entries: &[local_api::EgressEntry]) -> String {
    if entries.is_empty() {
        return "no tenant has an egress firewall (EgressNetworkPolicy)\n".into();
    }
    let mut s = String::new();
    for e in entries {
        s.push_str(&format!(
            "VNID {} ({}), policy {}:\n",
            e.vnid,
            e.namespaces.join(", "),
            e.policies.join(", ")
        ));
        match &e.drop_all {
            Some(why) => s.push_str(&format!("  all external traffic dropped: {why}\n")),
            None => {
                for (i, r) in e.rules.iter().enumerate() {
                    let to = if r.to.is_empty() {
                        "(nothing yet: its name has not resolved)".to_string()
                    } else {
                        let to: Vec<String> = r.to.iter().map(ToString::to_string).collect();
                        to.join(", ")
                    };
                    s.push_str(&format!("  {}. {} {to}\n", i + 1, r.action));
                }
                s.push_str("  otherwise: Allow\n");
            }
        }
    }
    s
}

pub(crate) fn network_policies(v: &local_api::NetworkPoliciesView) -> String {
    if !v.enabled {
        return "this node does not run in networkpolicy mode (mode: networkpolicy in its configuration)\n".into();
    }
    let mut s = format!(
        "{} NetworkPolicies in the cluster, {} select pods of this node\n",
        v.policies,
        v.active.len()
    );
    for p in &v.active {
        s.push_str(&format!("  {p}\n"));
    }
    for (p, why) in &v.refused {
        s.push_str(&format!(
            "NOT APPLIED {p}: {why}; fails closed: what it selects is isolated, nothing allowed\n"
        ));
    }
    s.push_str(&format!(
        "{} ClusterNetworkPolicies in the cluster, {} with rows for pods of this node\n",
        v.cluster_policies,
        v.cluster_active.len()
    ));
    for p in &v.cluster_active {
        s.push_str(&format!("  {p}\n"));
    }
    for (p, why) in &v.cluster_refused {
        s.push_str(&format!(
            "NOT APPLIED ClusterNetworkPolicy {p}: {why}; fails closed: its subject is denied everything at its tier and priority\n"
        ));
    }
    if v.isolated.is_empty() {
        s.push_str("no pod of this node is isolated\n");
    } else {
        s.push_str(&format!("{:<32} {:<30} EGRESS\n", "POD", "INGRESS"));
        let list = |l: &[String]| {
            if l.is_empty() {
                "-".to_string()
            } else {
                l.join(",")
            }
        };
        for (pod, iso) in &v.isolated {
            s.push_str(&format!(
                "{pod:<32} {:<30} {}\n",
                list(&iso.ingress),
                list(&iso.egress)
            ));
        }
    }
    if !v.rules.is_empty() {
        s.push_str("rules with rows here:\n");
        for (id, r) in &v.rules {
            s.push_str(&format!("  conj_id={id:<11} {r}\n"));
        }
    }
    s.push_str(&format!(
        "rows: {} per pod + {} shared = {} (openshift-sdn's cross product: {}, {} with this node's pods only as targets); {} rebuilds, the last {} ms\n",
        v.target_rows,
        v.shared_rows,
        v.target_rows + v.shared_rows,
        v.cross_product_rows,
        v.cross_product_local_rows,
        v.rebuilds,
        v.last_rebuild_ms
    ));
    s
}

pub(crate) fn egress_ips(v: &local_api::EgressIpsView) -> String {
    if v.tenants.is_empty() && v.held.is_empty() {
        return "no tenant has egress IPs (NetNamespace egressIPs)\n".into();
    }
    let mut s = String::new();
    for t in &v.tenants {
        let v4 = if t.ipv6.is_some() { "IPv4 " } else { "" };
        s.push_str(&format!(
            "VNID {} ({}): {v4}{}\n",
            t.vnid,
            t.namespaces.join(", "),
            t.route
        ));
        if let Some(p) = &t.problem {
            s.push_str(&format!("  {p}\n"));
        }
        if let Some(f) = &t.ipv6 {
            s.push_str(&format!("  IPv6 {}\n", f.route));
            if let Some(p) = &f.problem {
                s.push_str(&format!("  {p}\n"));
            }
        }
        for ip in &t.ips {
            s.push_str(&format!("  {ip}\n"));
        }
    }
    if !v.held.is_empty() {
        let held: Vec<String> = v
            .held
            .iter()
            .map(|(ip, vnid)| format!("{ip} (VNID {vnid})"))
            .collect();
        s.push_str(&format!("held on this node: {}\n", held.join(", ")));
    }
    for (node, st) in &v.nodes {
        s.push_str(&format!("node {node}: {st}\n"));
    }
    s
}

pub(crate) fn namespaces(ns: &[NamespaceEntry]) -> String {
    let mut rows = vec![["NAME", "NETID", "LOCAL PODS", "MULTICAST"]
        .map(String::from)
        .to_vec()];
    let mut problems = String::new();
    for n in ns {
        rows.push(vec![
            n.name.clone(),
            match n.problem {
                Some(_) => "-".to_string(),
                None => n.netid.to_string(),
            },
            n.local_pods.to_string(),
            if n.multicast { "on" } else { "-" }.to_string(),
        ]);
        if let Some(p) = &n.problem {
            problems.push_str(&format!("{}: NetNamespace file unusable: {p}\n", n.name));
        }
    }
    columns(&rows) + &problems
}
