//! ClusterNetworkPolicies' rows, exactly: each tier's table and ranked priority, the Admin
//! tier's `reg4` guard and Pass, Accept and Deny, the Baseline tier, fail-closed rules, named
//! ports.

use std::collections::BTreeMap;

use multitenant::cluster_policy::{
    Action, ClusterPolicy, LoggedActions, NodeView, Peer as CnpPeer, Pods, Port, Rule as CnpRule,
    Tier,
};
use multitenant::policy::{namespace_labels, LabelSelector, Labels, Protocol};

use crate::policy::{
    pods_by_namespace, policy_rows, policy_target_cookie, LocalPod, NamespaceView, PodView,
    PolicyInput, PolicyRows,
};
use crate::{Datapath, Vnid};

/// A pod labelled `app: <its name>`.
fn pod(ns: &str, name: &str, ip: [u8; 4]) -> PodView {
    super::super::tests::pod(ns, name, name, ip)
}

/// Namespaces `tenant` (VNID 11) and `monitoring` (VNID 12); `web` of `tenant` is local on
/// port 3; `prom` of `monitoring` is on another node.
struct World {
    cluster: Vec<ClusterPolicy>,
    namespaces: BTreeMap<String, NamespaceView>,
    pods: Vec<PodView>,
    local: Vec<LocalPod>,
    multitenant: bool,
    pods_listed: bool,
    nodes: Option<BTreeMap<String, NodeView>>,
}

fn world() -> World {
    let web = pod("tenant", "web", [10, 128, 0, 3]);
    let prom = pod("monitoring", "prom", [10, 129, 0, 5]);
    let ns = |name: &str, vnid| {
        (
            name.to_string(),
            NamespaceView {
                labels: namespace_labels(name, &Labels::new()),
                vnid: Vnid::new(vnid),
            },
        )
    };
    World {
        cluster: Vec::new(),
        namespaces: [ns("tenant", 11), ns("monitoring", 12)].into(),
        local: vec![LocalPod {
            pod: web.clone(),
            ofport: 3,
            cookie: policy_target_cookie("veth3"),
            ip6: None,
        }],
        pods: vec![web, prom],
        multitenant: false,
        pods_listed: true,
        nodes: Some(BTreeMap::new()),
    }
}

/// What a world logs by namespace: nothing.
static NO_LOGGING: BTreeMap<String, crate::audit::Logged> = BTreeMap::new();

impl World {
    /// The engine's input (`pods`: the world's, by namespace).
    fn input<'a>(&'a self, pods: &'a crate::policy::PodsByNamespace) -> PolicyInput<'a> {
        PolicyInput {
            policies: &[],
            cluster_policies: &self.cluster,
            ids: None,
            namespaces: &self.namespaces,
            pods,
            local_subnet: None,
            local_subnet6: None,
            local: &self.local,
            datapath: Datapath::System,
            multitenant: self.multitenant,
            pods_listed: self.pods_listed,
            nodes: self.nodes.as_ref(),
            ipv6: false,
            ipv4: true,
            logged: &NO_LOGGING,
        }
    }

    fn rows(&self) -> PolicyRows {
        policy_rows(self.input(&pods_by_namespace(self.pods.clone())))
    }
}

fn everything() -> Pods {
    Pods::Namespaces(LabelSelector::everything())
}

fn from_monitoring() -> CnpPeer {
    CnpPeer::Pods(Pods::Namespaces(LabelSelector::labels([(
        multitenant::policy::NAMESPACE_NAME_LABEL,
        "monitoring",
    )])))
}

fn rule(name: &str, action: Action, peers: Vec<CnpPeer>, ports: Vec<Port>) -> CnpRule {
    CnpRule {
        name: name.into(),
        action,
        peers,
        ports,
    }
}

fn tcp(port: u16) -> Port {
    Port::Range {
        protocol: Protocol::Tcp,
        first: port,
        last: port,
    }
}

fn cnp(
    name: &str,
    tier: Tier,
    priority: u16,
    ingress: Vec<CnpRule>,
    egress: Vec<CnpRule>,
) -> ClusterPolicy {
    ClusterPolicy {
        name: name.into(),
        tier,
        priority,
        subject: everything(),
        ingress,
        egress,
        log: LoggedActions::default(),
    }
}

/// Every row, without cookies, with conjunction ids as `ID<n>` in order of appearance.
fn texts(rows: &PolicyRows) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    rows.all()
        .map(|f| {
            let t = f.to_string();
            let mut t = t.split_once(", ").map(|(_, r)| r.to_string()).unwrap_or(t);
            for id in rows.rules.keys() {
                let s = id.to_string();
                if t.contains(&s) {
                    if !ids.contains(&s) {
                        ids.push(s.clone());
                    }
                    let n = ids.iter().position(|i| *i == s).unwrap();
                    t = t.replace(&s, &format!("ID{n}"));
                }
            }
            t
        })
        .collect()
}

#[test]
fn an_admin_accept_is_a_conjunction_above_every_networkpolicy_row() {
    let mut w = world();
    w.cluster.push(cnp(
        "scrape",
        Tier::Admin,
        10,
        vec![rule(
            "metrics",
            Action::Accept,
            vec![from_monitoring()],
            vec![tcp(9100)],
        )],
        vec![],
    ));
    let rows = w.rows();
    let t = texts(&rows);
    let commit = "ct(commit),output:NXM_NX_REG2[]";
    for want in [
        "table=80, priority=5399,ip,reg2=0x3,reg4=0/0x4 actions=conjunction(ID0,1/3)".to_string(),
        "table=80, priority=5399,ip,reg0=0xc actions=conjunction(ID0,2/3)".to_string(),
        "table=80, priority=5399,tcp,tp_dst=9100 actions=conjunction(ID0,3/3)".to_string(),
        format!("table=80, priority=5399,conj_id=ID0,ip actions={commit}"),
    ] {
        assert!(t.contains(&want), "{want}\n{t:#?}");
    }
    assert_eq!(t.len(), 4, "no isolation row: {t:#?}");
    let r = rows.rules.values().next().unwrap().to_string();
    assert_eq!(
        r,
        "ClusterNetworkPolicy scrape (Admin tier, priority 10) ingress rule 0 \"metrics\" (Accept)"
    );
}

#[test]
fn deny_drops_pass_skips_the_rest_of_the_admin_tier_and_ranks_order_them() {
    let mut w = world();
    w.cluster.push(cnp(
        "second",
        Tier::Admin,
        20,
        vec![],
        vec![rule("out", Action::Deny, vec![from_monitoring()], vec![])],
    ));
    w.cluster.push(cnp(
        "first",
        Tier::Admin,
        5,
        vec![
            rule("skip", Action::Pass, vec![from_monitoring()], vec![tcp(80)]),
            rule("", Action::Deny, vec![CnpPeer::Pods(everything())], vec![]),
        ],
        vec![],
    ));
    let t = texts(&w.rows()).join("\n");
    // Ranks: (5, 0) → 5399, (5, 1) → 5398, (20, 0) → 5397.
    assert!(t.contains("table=80, priority=5399,conj_id=ID"), "{t}");
    assert!(
        t.contains(",ip actions=load:0x1->NXM_NX_REG4[2],resubmit(,80)"),
        "a Pass sets its bit and looks again: {t}"
    );
    assert!(t.contains("table=80, priority=5398,conj_id="), "{t}");
    assert!(
        t.contains("table=80, priority=5398,ip,reg2=0x3,reg4=0/0x4"),
        "{t}"
    );
    // Egress: table 27, its own pass bit.
    assert!(
        t.contains("table=27, priority=5397,ip,reg3=0x3,reg4=0/0x2"),
        "{t}"
    );
    assert!(
        t.contains("table=27, priority=5397,ip,nw_dst=10.129.0.5 actions=conjunction("),
        "an egress namespace peer is its pods' addresses: {t}"
    );
    for line in t.lines().filter(|l| l.contains("conj_id=")) {
        if line.contains("priority=5398") || line.contains("priority=5397") {
            assert!(line.ends_with("actions=drop"), "Deny drops: {line}");
        }
    }
}

#[test]
fn the_baseline_tier_has_tables_28_and_81_and_its_pass_allows() {
    let mut w = world();
    w.cluster.push(cnp(
        "default",
        Tier::Baseline,
        0,
        vec![rule("p", Action::Pass, vec![from_monitoring()], vec![])],
        vec![rule(
            "d",
            Action::Deny,
            vec![CnpPeer::Networks(vec!["0.0.0.0/0".parse().unwrap()])],
            vec![],
        )],
    ));
    let t = texts(&w.rows()).join("\n");
    assert!(
        t.contains("table=81, priority=5399,ip,reg2=0x3 actions=conjunction("),
        "{t}"
    );
    assert!(!t.contains("reg4"), "no Pass bit in the Baseline tier: {t}");
    assert!(
        t.contains("table=81, priority=5399,conj_id=ID")
            && t.contains("actions=ct(commit),output:NXM_NX_REG2[]"),
        "a Baseline Pass is the default, allowed: {t}"
    );
    assert!(
        t.contains("table=28, priority=5399,ip actions=conjunction("),
        "0.0.0.0/0 is every IPv4 destination: {t}"
    );
    assert!(
        t.lines()
            .any(|l| l.starts_with("table=28, priority=5399,conj_id=")
                && l.ends_with("actions=drop")),
        "{t}"
    );
}

#[test]
fn peers_this_agent_does_not_apply_fail_closed() {
    let mut w = world();
    let dn = CnpPeer::Unsupported("domainNames".into());
    w.cluster.push(cnp(
        "names",
        Tier::Admin,
        1,
        vec![],
        vec![
            rule("ok", Action::Accept, vec![dn.clone()], vec![]),
            rule(
                "deny",
                Action::Deny,
                vec![dn.clone(), from_monitoring()],
                vec![tcp(53)],
            ),
        ],
    ));
    let rows = w.rows();
    let t = texts(&rows);
    // The Accept matches nothing: no row of rule 0. The Deny denies everything of the pod.
    assert_eq!(
        t,
        vec!["table=27, priority=5398,ip,reg3=0x3,reg4=0/0x2 actions=drop".to_string()],
        "{t:#?}"
    );
    assert_eq!(rows.plain.values().flatten().count(), 1);
}

#[test]
fn named_ports_resolve_by_name_on_the_receiving_pod_whatever_the_protocol() {
    let mut w = world();
    let mut web = w.local[0].clone();
    web.pod.ports = vec![multitenant::policy::ContainerPort {
        name: "dns".into(),
        protocol: Protocol::Udp,
        port: 53,
    }]
    .into();
    w.local = vec![web];
    w.cluster.push(cnp(
        "dns",
        Tier::Admin,
        1,
        vec![rule(
            "dns",
            Action::Accept,
            vec![from_monitoring()],
            vec![Port::Named("dns".into())],
        )],
        vec![],
    ));
    let t = texts(&w.rows()).join("\n");
    assert!(
        t.contains(
            "table=80, priority=5399,udp,reg2=0x3,reg4=0/0x4,tp_dst=53 actions=conjunction("
        ),
        "{t}"
    );
    assert!(!t.contains("tcp,reg2"), "{t}");
}

/// Rows of an Admin-tier policy with a Pass and an Accept both ways (the register registry
/// reads them).
pub(crate) fn sample_rows() -> Vec<ovs::flow::Flow> {
    let mut w = world();
    let both = |action| rule("r", action, vec![from_monitoring()], vec![tcp(80)]);
    w.cluster.push(cnp(
        "sample",
        Tier::Admin,
        1,
        vec![both(Action::Pass), both(Action::Accept)],
        vec![both(Action::Pass), both(Action::Accept)],
    ));
    // A logged Baseline policy: its rows write the audit registers in tables 28 and 81.
    let mut logged = cnp(
        "logged",
        Tier::Baseline,
        1,
        vec![both(Action::Deny), both(Action::Accept)],
        vec![both(Action::Deny), both(Action::Accept)],
    );
    logged.log = LoggedActions {
        deny: true,
        allow: true,
        pass: true,
    };
    w.cluster.push(logged);
    w.rows().all().cloned().collect()
}

#[test]
fn multitenant_mode_records_the_client_vnid_answers_arp_and_has_no_baseline_ingress() {
    let mut w = world();
    w.multitenant = true;
    w.cluster.push(cnp(
        "scrape",
        Tier::Admin,
        10,
        vec![rule(
            "metrics",
            Action::Accept,
            vec![from_monitoring()],
            vec![tcp(9100)],
        )],
        vec![rule("deny", Action::Deny, vec![from_monitoring()], vec![])],
    ));
    w.cluster.push(cnp(
        "default",
        Tier::Baseline,
        0,
        vec![rule("in", Action::Deny, vec![from_monitoring()], vec![])],
        vec![rule(
            "out",
            Action::Deny,
            vec![CnpPeer::Networks(vec!["0.0.0.0/0".parse().unwrap()])],
            vec![],
        )],
    ));
    // Conjunction ids by order of appearance do not matter here: `ID` for each.
    let t: Vec<String> = texts(&w.rows())
        .into_iter()
        .map(|l| {
            let mut out = String::new();
            let mut rest = l.as_str();
            while let Some(i) = rest.find("ID") {
                out.push_str(&rest[..i + 2]);
                rest = rest[i + 2..].trim_start_matches(|c: char| c.is_ascii_digit());
            }
            out + rest
        })
        .collect();
    let admitted = "ct(commit,exec(load:0x1->NXM_NX_CT_MARK[1],\
                    move:NXM_NX_REG0[0..23]->NXM_NX_CT_MARK[8..31])),output:NXM_NX_REG2[]";
    for want in [
        // The Accept records that it admitted the connection and the client's VNID.
        format!("table=80, priority=5399,conj_id=ID,ip actions={admitted}"),
        "table=80, priority=5399,ip,reg0=0xc actions=conjunction(ID,2/3)".to_string(),
        // Its subject answers ARP from every pod (the request would meet tenancy).
        "table=80, priority=5400,arp,reg2=0x3 actions=output:NXM_NX_REG2[]".to_string(),
        // Egress Admin rows and the Baseline egress tier as in networkpolicy mode.
        "table=27, priority=5399,ip,reg3=0x3,reg4=0/0x2 actions=conjunction(ID,1/2)".to_string(),
        "table=28, priority=5399,ip,reg3=0x3 actions=conjunction(ID,1/2)".to_string(),
    ] {
        assert!(t.contains(&want), "{want}\n{t:#?}");
    }
    assert!(
        !t.iter().any(|l| l.starts_with("table=81")),
        "Baseline ingress rules never decide in multitenant mode: {t:#?}"
    );
    assert!(
        !t.iter().any(|l| l.contains("priority=100,")),
        "no NetworkPolicy isolation: {t:#?}"
    );
    assert_eq!(
        t.iter().filter(|l| l.contains("arp")).count(),
        1,
        "web, a subject, answers ARP (one row; it is no peer of an Accept): {t:#?}"
    );
    // A Deny gives its subject no ARP row.
    w.cluster.remove(0);
    assert!(!texts(&w.rows()).iter().any(|l| l.contains("arp")));
    // A pod among an Accept's peers (wherever its subject is) takes ARP of either kind from
    // every pod: its server, of another tenant, resolves it before it answers.
    w.cluster.push(cnp(
        "tenant-scrapes",
        Tier::Admin,
        3,
        vec![rule(
            "",
            Action::Accept,
            vec![CnpPeer::Pods(Pods::Namespaces(LabelSelector::labels([(
                multitenant::policy::NAMESPACE_NAME_LABEL,
                "tenant",
            )])))],
            vec![],
        )],
        vec![],
    ));
    w.cluster.last_mut().unwrap().subject = Pods::Namespaces(LabelSelector::labels([(
        multitenant::policy::NAMESPACE_NAME_LABEL,
        "monitoring",
    )]));
    assert_eq!(
        texts(&w.rows())
            .into_iter()
            .filter(|l| l.contains("arp"))
            .collect::<Vec<_>>(),
        ["table=80, priority=5400,arp,reg2=0x3 actions=output:NXM_NX_REG2[]"]
    );
}

#[test]
fn until_the_pods_are_listed_a_deny_takes_its_pod_peers_as_every_address() {
    let mut w = world();
    w.cluster.push(cnp(
        "no-monitoring",
        Tier::Admin,
        10,
        vec![
            rule("deny", Action::Deny, vec![from_monitoring()], vec![tcp(22)]),
            rule(
                "ok",
                Action::Accept,
                vec![from_monitoring()],
                vec![tcp(9100)],
            ),
        ],
        vec![],
    ));
    w.pods_listed = false;
    let t = texts(&w.rows()).join("\n");
    assert!(
        t.contains("table=80, priority=5399,ip actions=conjunction("),
        "the Deny's peers are every IPv4 source: {t}"
    );
    assert!(
        t.contains("table=80, priority=5398,ip,reg0=0xc actions=conjunction("),
        "an Accept keeps its peers (it allows less meanwhile): {t}"
    );
    w.pods_listed = true;
    let t = texts(&w.rows()).join("\n");
    assert!(!t.contains("priority=5399,ip actions=conjunction("), "{t}");
    assert!(
        t.contains("table=80, priority=5399,ip,reg0=0xc actions=conjunction("),
        "{t}"
    );
}

/// Nodes `n1` (`role: infra`, 192.168.1.1 and 192.168.1.11) and `n2` (no role, 192.168.1.2);
/// a host name among the addresses is not one.
fn nodes() -> BTreeMap<String, NodeView> {
    let node = |role: Option<&str>, addresses: &[&str]| {
        NodeView::new(
            role.map(|r| [("role".to_string(), r.to_string())].into())
                .unwrap_or_default(),
            addresses.iter().copied(),
        )
    };
    [
        (
            "n1".to_string(),
            node(
                Some("infra"),
                &["192.168.1.11", "192.168.1.1", "n1.example"],
            ),
        ),
        ("n2".to_string(), node(None, &["192.168.1.2"])),
    ]
    .into()
}

fn infra_nodes() -> CnpPeer {
    CnpPeer::Nodes(LabelSelector::labels([("role", "infra")]))
}

#[test]
fn node_peers_are_the_addresses_of_the_nodes_selected_and_fail_closed_until_listed() {
    let mut w = world();
    w.nodes = Some(nodes());
    w.cluster.push(cnp(
        "to-nodes",
        Tier::Admin,
        10,
        vec![],
        vec![
            rule(
                "kubelet",
                Action::Accept,
                vec![infra_nodes()],
                vec![tcp(10250)],
            ),
            rule(
                "others",
                Action::Deny,
                vec![CnpPeer::Nodes(LabelSelector::everything())],
                vec![],
            ),
        ],
    ));
    let t = texts(&w.rows()).join("\n");
    for a in ["192.168.1.1", "192.168.1.11"] {
        assert!(
            t.contains(&format!(
                "table=27, priority=5399,ip,nw_dst={a} actions=conjunction(ID"
            )),
            "the Accept's peers are n1's two addresses: {t}"
        );
    }
    assert!(
        !t.contains("priority=5399,ip,nw_dst=192.168.1.2 "),
        "n2 is not infra: {t}"
    );
    for a in ["192.168.1.1", "192.168.1.11", "192.168.1.2"] {
        assert!(
            t.contains(&format!(
                "table=27, priority=5398,ip,nw_dst={a} actions=conjunction(ID1,2/2)"
            )),
            "the Deny's peers are every node's address: {t}"
        );
    }

    // Before the nodes are listed: the Deny takes every address, the Accept none.
    w.nodes = None;
    let t = texts(&w.rows()).join("\n");
    assert!(!t.contains("priority=5399"), "the Accept has no rows: {t}");
    assert!(
        t.contains("table=27, priority=5398,ip actions=conjunction(ID0,2/2)"),
        "the Deny's peers are every address meanwhile: {t}"
    );
}

#[test]
fn the_engine_follows_a_node_that_joins_changes_labels_and_leaves() {
    use crate::policy::engine::{PolicyEngine, Snapshot};
    let mut w = world();
    w.cluster.push(cnp(
        "to-infra",
        Tier::Admin,
        10,
        vec![],
        vec![rule(
            "kubelet",
            Action::Accept,
            vec![infra_nodes()],
            vec![tcp(10250)],
        )],
    ));
    let snap = |w: &World| Snapshot::of(&w.input(&pods_by_namespace(w.pods.clone())));
    let mut engine = PolicyEngine::new();
    w.nodes = Some(BTreeMap::new());
    engine.update(snap(&w));
    assert!(
        engine.targets().is_empty(),
        "no infra node: the Accept matches nothing"
    );
    // n1 joins: its addresses and the pod's target row come in.
    w.nodes = Some(nodes());
    let d = engine.update(snap(&w));
    let up: Vec<String> = d.upserts.iter().map(ToString::to_string).collect();
    assert!(d.targets_changed && !engine.targets().is_empty(), "{up:#?}");
    assert_eq!(
        up.iter()
            .filter(|u| u.contains("nw_dst=192.168.1.1"))
            .count(),
        2,
        "{up:#?}"
    );
    // n2 labelled infra: one address more, nothing out.
    let mut ns = nodes();
    ns.get_mut("n2")
        .unwrap()
        .labels
        .insert("role".into(), "infra".into());
    w.nodes = Some(ns.clone());
    let d = engine.update(snap(&w));
    let up: Vec<String> = d.upserts.iter().map(ToString::to_string).collect();
    assert!(
        up.len() == 1 && up[0].contains("nw_dst=192.168.1.2 ") && d.deletes.is_empty(),
        "{up:#?} {:?}",
        d.deletes
    );
    // n1 leaves: its two rows go.
    ns.remove("n1");
    w.nodes = Some(ns);
    let d = engine.update(snap(&w));
    assert_eq!(d.deletes.len(), 2, "{:?}", d.deletes);
    assert!(d.upserts.is_empty(), "{:?}", d.upserts);
}

#[test]
fn a_logged_policy_logs_every_denied_packet_and_the_first_of_each_accepted_or_passed_one() {
    let mut w = world();
    let mut p = cnp(
        "watched",
        Tier::Admin,
        10,
        vec![
            rule(
                "no-ssh",
                Action::Deny,
                vec![from_monitoring()],
                vec![tcp(22)],
            ),
            rule(
                "scrape",
                Action::Accept,
                vec![from_monitoring()],
                vec![tcp(9100)],
            ),
            rule("later", Action::Pass, vec![from_monitoring()], vec![]),
        ],
        vec![rule(
            "names",
            Action::Deny,
            vec![CnpPeer::Unsupported("domainNames".into())],
            vec![],
        )],
    );
    p.log = LoggedActions {
        deny: true,
        allow: true,
        pass: false,
    };
    w.cluster.push(p);
    let rows = w.rows();
    let t = texts(&rows);
    let line = |prefix: &str| -> &str {
        t.iter()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no row {prefix}: {t:#?}"))
    };
    // The Deny: its conj_id row logs (naming the rule's id in reg6), then drops.
    let deny = line("table=80, priority=5399,conj_id=ID0,ip actions=");
    assert!(
        deny.contains("actions=load:0xc->NXM_NX_REG5[],load:0x")
            && deny.ends_with("->NXM_NX_REG6[],resubmit(,130)"),
        "{deny}"
    );
    // The Accept: its first packet logs, then commits and outputs; later ones do not log.
    let first = line("table=80, priority=5398,conj_id=ID1,ct_state=+new+trk,ip actions=");
    assert!(
        first.contains("actions=load:0xd->NXM_NX_REG5[],load:0x")
            && first.ends_with("->NXM_NX_REG6[],resubmit(,130),ct(commit),output:NXM_NX_REG2[]"),
        "{first}"
    );
    assert_eq!(
        line("table=80, priority=5398,conj_id=ID1,ct_state=-new+trk,ip actions="),
        "table=80, priority=5398,conj_id=ID1,ct_state=-new+trk,ip actions=ct(commit),output:NXM_NX_REG2[]"
    );
    assert!(
        !t.iter()
            .any(|l| l.starts_with("table=80, priority=5398,conj_id=ID1,ip ")),
        "no unsplit row: {t:#?}"
    );
    // The Pass is not logged ("pass" off): one row as without logging.
    assert_eq!(
        line("table=80, priority=5397,conj_id=ID2,ip actions="),
        "table=80, priority=5397,conj_id=ID2,ip actions=load:0x1->NXM_NX_REG4[2],resubmit(,80)"
    );
    // The egress Deny that fails closed (a peer not applied): the pod's own row logs, naming
    // the rule.
    let egress: Vec<&String> = t.iter().filter(|l| l.starts_with("table=27")).collect();
    assert_eq!(egress.len(), 1, "{egress:#?}");
    assert!(
        egress[0].starts_with(
            "table=27, priority=5399,ip,reg3=0x3,reg4=0/0x2 actions=load:0xe->NXM_NX_REG5[],load:0x"
        ) && egress[0].ends_with("->NXM_NX_REG6[],resubmit(,130)"),
        "{egress:#?}"
    );
    // Every logged rule's id names it (the audit reader resolves lines by it).
    assert_eq!(
        rows.rules.values().filter(|r| r.cluster.is_some()).count(),
        4,
        "{:?}",
        rows.rules
    );
}

#[test]
fn a_pass_with_peers_not_listed_yet_denies_instead_of_passing_every_address() {
    let mut w = world();
    w.nodes = None;
    w.pods_listed = false;
    w.cluster.push(cnp(
        "admin",
        Tier::Admin,
        10,
        vec![rule(
            "later",
            Action::Pass,
            vec![from_monitoring()],
            vec![tcp(22)],
        )],
        vec![rule(
            "infra",
            Action::Pass,
            vec![infra_nodes()],
            vec![tcp(10250)],
        )],
    ));
    w.cluster.push(cnp(
        "base",
        Tier::Baseline,
        10,
        vec![],
        vec![rule(
            "infra",
            Action::Pass,
            vec![infra_nodes()],
            vec![tcp(10250)],
        )],
    ));
    let t = texts(&w.rows()).join("\n");
    // Admin: each Pass denies (every address, its port) meanwhile; no row passes.
    assert!(!t.contains("resubmit("), "nothing is passed on: {t}");
    assert!(
        t.contains("table=27, priority=5399,conj_id=ID")
            && t.contains("table=27, priority=5399,ip actions=conjunction(")
            && t.contains("table=27, priority=5399,tcp,tp_dst=10250 actions=conjunction("),
        "{t}"
    );
    assert!(
        t.contains("table=80, priority=5399,ip actions=conjunction(")
            && t.contains("table=80, priority=5399,tcp,tp_dst=22 actions=conjunction("),
        "{t}"
    );
    // Baseline: a Pass allows, so its unknown node peers are none: no rows.
    assert!(!t.contains("table=28,"), "{t}");

    // Listed: the Admin Pass passes its peers.
    w.nodes = Some(nodes());
    w.pods_listed = true;
    let t = texts(&w.rows()).join("\n");
    assert!(
        t.contains("resubmit(,27)") && t.contains("resubmit(,80)"),
        "{t}"
    );
    assert!(
        t.contains("table=27, priority=5399,ip,nw_dst=192.168.1.1 "),
        "{t}"
    );
    assert!(
        t.contains("table=28, priority=5399,ip,nw_dst=192.168.1.1 "),
        "{t}"
    );
}

#[test]
fn an_egress_named_port_rule_with_peers_not_listed_yet_denies_every_port_of_its_protocols() {
    let mut w = world();
    w.pods_listed = false;
    w.cluster.push(cnp(
        "named",
        Tier::Admin,
        10,
        vec![],
        vec![
            rule(
                "no-web",
                Action::Deny,
                vec![from_monitoring()],
                vec![Port::Named("web".into())],
            ),
            rule(
                "later",
                Action::Pass,
                vec![from_monitoring()],
                vec![Port::Named("web".into())],
            ),
        ],
    ));
    let t = texts(&w.rows()).join("\n");
    assert!(!t.contains("resubmit("), "nothing is passed on: {t}");
    for proto in ["tcp", "udp", "sctp"] {
        assert!(
            t.contains(&format!(
                "table=27, priority=5399,{proto} actions=conjunction("
            )) && t.contains(&format!(
                "table=27, priority=5398,{proto} actions=conjunction("
            )),
            "every {proto} port, for both rules: {t}"
        );
    }
    assert!(
        t.contains("table=27, priority=5399,ip actions=conjunction(")
            && t.contains("table=27, priority=5398,ip actions=conjunction("),
        "every address: {t}"
    );
    // Listed: the named parts again (the pods declaring the name), the Pass passes.
    w.pods_listed = true;
    let t = texts(&w.rows()).join("\n");
    assert!(t.contains("resubmit(,27)"), "{t}");
    assert!(!t.contains("priority=5399,ip actions=conjunction("), "{t}");
}
