//! Unit tests of the NetworkPolicy rows: the exact rows of small policies (targets, peers,
//! ports, conj_id rows, isolation), merging of shared addresses, namespace peers by VNID and
//! their fallback to addresses, named ports on both sides, stable conjunction ids, the
//! N + M + P count against the cross product, and that every row is a valid flow. Real traffic
//! through these rows is `tests/tests/network_policy.rs`.

use super::*;
use multitenant::policy::{LabelSelector, Rule, NAMESPACE_NAME_LABEL};

pub(crate) fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub(crate) fn pod(ns: &str, name: &str, app: &str, ip: [u8; 4]) -> PodView {
    PodView {
        namespace: ns.into(),
        name: name.into(),
        labels: Arc::new(labels(&[("app", app)])),
        ip: Some(Ipv4Addr::from(ip)),
        ip6: None,
        ports: Vec::new().into(),
    }
}

fn local(p: &PodView, ofport: u32) -> LocalPod {
    LocalPod {
        pod: p.clone(),
        ofport,
        cookie: policy_target_cookie(&format!("veth{ofport}")),
        ip6: None,
    }
}

/// A namespace: name, VNID, labels.
type Ns<'a> = (&'a str, u32, &'a [(&'a str, &'a str)]);

fn namespaces(list: &[Ns<'_>]) -> BTreeMap<String, NamespaceView> {
    list.iter()
        .map(|(n, v, l)| {
            (
                n.to_string(),
                NamespaceView {
                    labels: multitenant::policy::namespace_labels(n, &labels(l)),
                    vnid: Vnid::new(*v),
                },
            )
        })
        .collect()
}

fn policy(ns: &str, name: &str, sel: LabelSelector) -> Policy {
    Policy {
        namespace: ns.into(),
        name: name.into(),
        pod_selector: sel,
        ingress: None,
        egress: None,
    }
}

fn texts(flows: &[Flow]) -> Vec<String> {
    flows
        .iter()
        .map(|f| {
            let t = f.to_string();
            // Without the cookie, for readable expectations.
            t.split_once(", ").map(|(_, r)| r.to_string()).unwrap_or(t)
        })
        .collect()
}

struct World {
    policies: Vec<Policy>,
    namespaces: BTreeMap<String, NamespaceView>,
    pods: Vec<PodView>,
    local: Vec<LocalPod>,
}

impl World {
    fn rows(&self) -> PolicyRows {
        policy_rows(PolicyInput {
            policies: &self.policies,
            cluster_policies: &[],
            ids: None,
            namespaces: &self.namespaces,
            pods: &pods_by_namespace(self.pods.clone()),
            local_subnet: None,
            local_subnet6: None,
            local: &self.local,
            datapath: Datapath::System,
            multitenant: false,
            pods_listed: true,
            nodes: None,
            ipv6: self.local.iter().any(|l| l.ip6.is_some()),
            ipv4: true,
            logged: &BTreeMap::new(),
        })
    }
}

/// Two namespaces; in `prod`: web (local, port 3) and db (local, port 4); in `dev`: a client
/// on another node.
fn world() -> World {
    let web = pod("prod", "web", "web", [10, 128, 0, 3]);
    let db = pod("prod", "db", "db", [10, 128, 0, 4]);
    let client = pod("dev", "client", "client", [10, 129, 0, 5]);
    World {
        policies: vec![],
        namespaces: namespaces(&[("prod", 11, &[("env", "prod")]), ("dev", 12, &[])]),
        local: vec![local(&web, 3), local(&db, 4)],
        pods: vec![web, db, client],
    }
}

#[test]
fn no_policy_no_rows() {
    let rows = world().rows();
    assert_eq!(rows, PolicyRows::default());
}

#[test]
fn a_dual_stack_pod_is_isolated_and_allowed_in_ipv6_as_in_ipv4() {
    let mut w = world();
    w.local[0].ip6 = Some("fd01::3".parse().unwrap());
    w.pods[2].ip6 = Some("fd01:0:0:1::5".parse().unwrap());
    // Allow from everywhere: a plain row per family for the dual-stack pod.
    let mut p = policy("prod", "allow-all", LabelSelector::everything());
    p.ingress = Some(vec![Rule::default()]);
    w.policies.push(p);
    let rows = w.rows();
    let web = texts(&rows.targets[&3]);
    assert_eq!(
        web,
        [
            "table=80, priority=140,ip,reg2=0x3 actions=ct(commit),output:NXM_NX_REG2[]",
            "table=80, priority=140,ipv6,reg2=0x3 actions=ct(commit),output:NXM_NX_REG2[]",
            "table=80, priority=100,ip,reg2=0x3 actions=drop",
            "table=80, priority=100,ipv6,reg2=0x3 actions=drop",
        ]
    );
    // The IPv4-only pod keeps exactly its IPv4 rows.
    assert!(texts(&rows.targets[&4]).iter().all(|r| !r.contains("ipv6")));

    // Peers by pod selector and IPv6 blocks, with a port: every clause in both families.
    let mut w2 = world();
    w2.local[0].ip6 = Some("fd01::3".parse().unwrap());
    w2.pods[2].ip6 = Some("fd01:0:0:1::5".parse().unwrap());
    let mut p = policy(
        "prod",
        "from-client",
        LabelSelector::labels([("app", "web")]),
    );
    p.ingress = Some(vec![Rule {
        peers: vec![
            Peer::Pods {
                namespaces: Some(LabelSelector::everything()),
                pods: LabelSelector::labels([("app", "client")]),
            },
            Peer::IpBlock6 {
                cidr: "fd99::/64".parse().unwrap(),
                except: vec!["fd99::/65".parse().unwrap()],
            },
        ],
        ports: vec![PortSpec::Range {
            protocol: Protocol::Tcp,
            first: 80,
            last: 80,
        }],
    }]);
    w2.policies.push(p);
    let rows = w2.rows();
    let shared = texts(&rows.shared);
    for want in [
        "ip,nw_src=10.129.0.5 actions=conjunction(",
        "ipv6,ipv6_src=fd01:0:0:1::5 actions=conjunction(",
        "ipv6,ipv6_src=fd99::8000:0:0:0/65 actions=conjunction(",
        "tcp,tp_dst=80 actions=conjunction(",
        "tcp6,tp_dst=80 actions=conjunction(",
        ",ip actions=ct(commit)",
        ",ipv6 actions=ct(commit)",
    ] {
        assert!(
            shared.iter().any(|r| r.contains(want)),
            "{want} in {shared:#?}"
        );
    }
    let web = texts(&rows.targets[&3]);
    assert!(
        web.iter()
            .any(|r| r.starts_with("table=80, priority=150,ipv6,reg2=0x3 actions=conjunction(")),
        "{web:#?}"
    );
    // An IPv4 node: no IPv6 row at all, the IPv6 block included.
    let mut w4 = w2;
    w4.local[0].ip6 = None;
    let rows = w4.rows();
    assert!(
        texts(&rows.shared)
            .iter()
            .chain(texts(&rows.targets[&3]).iter())
            .all(|r| !r.contains("ipv6") && !r.contains("tcp6")),
        "{:#?}",
        texts(&rows.shared)
    );
}

#[test]
fn default_deny_isolates_every_selected_pod() {
    let mut w = world();
    let mut p = policy("prod", "deny", LabelSelector::everything());
    p.ingress = Some(vec![]);
    w.policies.push(p);
    let rows = w.rows();
    assert!(rows.shared.is_empty());
    assert_eq!(
        texts(&rows.targets[&3]),
        vec!["table=80, priority=100,ip,reg2=0x3 actions=drop"]
    );
    assert_eq!(
        texts(&rows.targets[&4]),
        vec!["table=80, priority=100,ip,reg2=0x4 actions=drop"]
    );
    assert_eq!(rows.isolated[&3].ingress, vec!["prod/deny"]);
    assert!(rows.isolated[&3].egress.is_empty());
    // A policy in another namespace selects nothing here.
    let mut w = world();
    let mut p = policy("dev", "deny", LabelSelector::everything());
    p.ingress = Some(vec![]);
    w.policies.push(p);
    assert_eq!(w.rows(), PolicyRows::default());
}

#[test]
fn a_rule_is_one_conjunction_of_targets_peers_and_ports() {
    let mut w = world();
    let mut p = policy(
        "prod",
        "db-from-web",
        LabelSelector::labels([("app", "db")]),
    );
    p.ingress = Some(vec![Rule {
        peers: vec![Peer::Pods {
            namespaces: None,
            pods: LabelSelector::labels([("app", "web")]),
        }],
        ports: vec![
            PortSpec::Range {
                protocol: Protocol::Tcp,
                first: 5432,
                last: 5432,
            },
            PortSpec::Range {
                protocol: Protocol::Udp,
                first: 8000,
                last: 8003,
            },
        ],
    }]);
    w.policies.push(p);
    let rows = w.rows();
    let (id, rule) = rows.rules.iter().next().expect("one rule");
    assert_eq!(
        rule.to_string(),
        "NetworkPolicy prod/db-from-web ingress rule 0"
    );
    assert!(!rows.targets.contains_key(&3), "web is not selected");
    assert_eq!(
        texts(&rows.targets[&4]),
        vec![
            format!("table=80, priority=150,ip,reg2=0x4 actions=conjunction({id},1/3)"),
            "table=80, priority=100,ip,reg2=0x4 actions=drop".to_string(),
        ]
    );
    let mut shared = texts(&rows.shared);
    shared.sort();
    let mut want = vec![
        format!("table=80, priority=150,ip,nw_src=10.128.0.3 actions=conjunction({id},2/3)"),
        format!("table=80, priority=150,tcp,tp_dst=5432 actions=conjunction({id},3/3)"),
        format!("table=80, priority=150,udp,tp_dst=0x1f40/0xfffc actions=conjunction({id},3/3)"),
        format!("table=80, priority=150,conj_id={id},ip actions=ct(commit),output:NXM_NX_REG2[]"),
    ];
    want.sort();
    assert_eq!(shared, want);
}

#[test]
fn rows_grow_with_the_sum_not_the_product() {
    // 50 local targets, 200 peer pods, 5 ports: 50 + 200 + 5 + 1 rows, where the cross
    // product needs 50 * 200 * 5.
    let mut w = world();
    w.local.clear();
    w.pods.clear();
    for i in 0..50u32 {
        let p = pod("prod", &format!("t{i}"), "target", [10, 128, 1, i as u8]);
        w.local.push(local(&p, 10 + i));
        w.pods.push(p);
    }
    for i in 0..200u32 {
        w.pods.push(pod(
            "dev",
            &format!("c{i}"),
            "client",
            [10, 129, (i / 250) as u8, (i % 250) as u8 + 1],
        ));
    }
    let mut p = policy("prod", "wide", LabelSelector::labels([("app", "target")]));
    p.ingress = Some(vec![Rule {
        peers: vec![Peer::Pods {
            namespaces: Some(LabelSelector::everything()),
            pods: LabelSelector::labels([("app", "client")]),
        }],
        ports: (0..5)
            .map(|i| PortSpec::Range {
                protocol: Protocol::Tcp,
                first: 8080 + i,
                last: 8080 + i,
            })
            .collect(),
    }]);
    w.policies.push(p);
    let rows = w.rows();
    let conj_rows: usize = rows
        .all()
        .filter(|f| f.priority == PRIO_CONJUNCTION)
        .count();
    assert_eq!(conj_rows, 50 + 200 + 5 + 1);
    assert_eq!(
        rows.all().count(),
        50 + 200 + 5 + 1 + 50,
        "plus 50 isolation rows"
    );
    let pods = pods_by_namespace(w.pods.clone());
    let input = PolicyInput {
        policies: &w.policies,
        cluster_policies: &[],
        ids: None,
        namespaces: &w.namespaces,
        pods: &pods,
        local_subnet: None,
        local_subnet6: None,
        local: &w.local,
        datapath: Datapath::System,
        multitenant: false,
        pods_listed: true,
        nodes: None,
        ipv6: false,
        ipv4: true,
        logged: &BTreeMap::new(),
    };
    assert_eq!(cross_product_rows(input, false), 50 * 200 * 5 + 50);
    assert_eq!(cross_product_rows(input, true), 50 * 200 * 5 + 50);
}

#[test]
fn shared_addresses_are_one_row_with_every_rule() {
    let mut w = world();
    for (name, port) in [("a", 80u16), ("b", 443)] {
        let mut p = policy("prod", name, LabelSelector::labels([("app", "db")]));
        p.ingress = Some(vec![Rule {
            peers: vec![Peer::Pods {
                namespaces: Some(LabelSelector::everything()),
                pods: LabelSelector::labels([("app", "client")]),
            }],
            ports: vec![PortSpec::Range {
                protocol: Protocol::Tcp,
                first: port,
                last: port,
            }],
        }]);
        w.policies.push(p);
    }
    let rows = w.rows();
    let ids: Vec<u32> = rows.rules.keys().copied().collect();
    assert_eq!(ids.len(), 2);
    let peer_rows: Vec<String> = texts(&rows.shared)
        .into_iter()
        .filter(|t| t.contains("nw_src=10.129.0.5"))
        .collect();
    let mut want_ids = ids.clone();
    want_ids.sort();
    assert_eq!(
        peer_rows,
        vec![format!(
            "table=80, priority=150,ip,nw_src=10.129.0.5 actions=conjunction({},2/3),conjunction({},2/3)",
            want_ids[0], want_ids[1]
        )]
    );
    // The target row lists both rules too.
    assert!(texts(&rows.targets[&4])[0].contains(&format!(
        "conjunction({},1/3),conjunction({},1/3)",
        want_ids[0], want_ids[1]
    )));
}

#[test]
fn namespace_peers_on_ingress_match_the_vnid_when_it_is_theirs_alone() {
    let mut w = world();
    let mut p = policy("prod", "from-dev", LabelSelector::labels([("app", "web")]));
    p.ingress = Some(vec![Rule {
        peers: vec![Peer::Pods {
            namespaces: Some(LabelSelector::labels([(NAMESPACE_NAME_LABEL, "dev")])),
            pods: LabelSelector::everything(),
        }],
        ports: vec![],
    }]);
    w.policies.push(p.clone());
    let rows = w.rows();
    let id = *rows.rules.keys().next().unwrap();
    let shared = texts(&rows.shared);
    assert!(
        shared.contains(&format!(
            "table=80, priority=150,ip,reg0=0xc actions=conjunction({id},2/2)"
        )),
        "{shared:#?}"
    );
    assert!(!shared.iter().any(|t| t.contains("nw_src")), "{shared:#?}");
    // Egress: addresses.
    let mut e = p.clone();
    e.ingress = None;
    e.egress = p.ingress.clone();
    w.policies = vec![e];
    let shared = texts(&w.rows().shared);
    assert!(
        shared.iter().any(|t| t.contains("table=27, priority=150,ip,nw_dst=10.129.0.5 actions=conjunction(")),
        "{shared:#?}"
    );
    // A VNID two namespaces share, or VNID 0: addresses again.
    let mut w = world();
    w.namespaces.get_mut("prod").unwrap().vnid = Vnid::new(12);
    w.policies.push(p.clone());
    let shared = texts(&w.rows().shared);
    assert!(
        shared.iter().any(|t| t.contains("nw_src=10.129.0.5")),
        "{shared:#?}"
    );
    assert!(!shared.iter().any(|t| t.contains("reg0=")), "{shared:#?}");
    let mut w = world();
    w.namespaces.get_mut("dev").unwrap().vnid = Some(Vnid::GLOBAL);
    w.policies.push(p);
    let shared = texts(&w.rows().shared);
    assert!(
        shared.iter().any(|t| t.contains("nw_src=10.129.0.5")),
        "{shared:#?}"
    );
}

#[test]
fn allow_all_rules_are_plain_rows_and_ip_blocks_lose_their_exceptions() {
    let mut w = world();
    let mut p = policy("prod", "open", LabelSelector::labels([("app", "web")]));
    p.ingress = Some(vec![Rule::default()]);
    p.egress = Some(vec![Rule {
        peers: vec![Peer::IpBlock {
            cidr: "192.168.0.0/24".parse().unwrap(),
            except: vec!["192.168.0.128/25".parse().unwrap()],
        }],
        ports: vec![],
    }]);
    w.policies.push(p);
    let rows = w.rows();
    let t = texts(&rows.targets[&3]);
    assert!(
        t.contains(
            &"table=80, priority=140,ip,reg2=0x3 actions=ct(commit),output:NXM_NX_REG2[]"
                .to_string()
        ),
        "{t:#?}"
    );
    assert!(
        t.contains(&"table=27, priority=100,ip,reg3=0x3 actions=drop".to_string()),
        "{t:#?}"
    );
    let shared = texts(&rows.shared);
    let id = *rows.rules.keys().next().unwrap();
    assert!(
        shared.contains(&format!(
            "table=27, priority=150,ip,nw_dst=192.168.0.0/25 actions=conjunction({id},2/2)"
        )),
        "{shared:#?}"
    );
    assert!(shared.contains(&format!(
        "table=27, priority=150,conj_id={id},ip actions=goto_table:30"
    )));
    assert_eq!(rows.plain[&(Direction::Ingress, 3)].len(), 1);
}

#[test]
fn named_ports_resolve_on_the_receiving_pod() {
    let mut w = world();
    let http = |port| ContainerPort {
        name: "http".into(),
        protocol: Protocol::Tcp,
        port,
    };
    w.local[0].pod.ports = vec![http(8080)].into();
    w.local[1].pod.ports = vec![http(9090)].into();
    w.pods[0].ports = vec![http(8080)].into();
    w.pods[1].ports = vec![http(9090)].into();
    let named = vec![PortSpec::Named {
        protocol: Protocol::Tcp,
        name: "http".into(),
    }];
    // Ingress: each target's own number, in its own row.
    let mut p = policy("prod", "http-in", LabelSelector::everything());
    p.ingress = Some(vec![Rule {
        peers: vec![Peer::Pods {
            namespaces: Some(LabelSelector::everything()),
            pods: LabelSelector::labels([("app", "client")]),
        }],
        ports: named.clone(),
    }]);
    w.policies.push(p);
    let rows = w.rows();
    assert_eq!(rows.rules.len(), 1, "{:?}", rows.rules);
    let (id, r) = rows.rules.iter().next().unwrap();
    assert!(r.named);
    assert!(texts(&rows.targets[&3]).contains(&format!(
        "table=80, priority=150,tcp,reg2=0x3,tp_dst=8080 actions=conjunction({id},1/2)"
    )));
    assert!(texts(&rows.targets[&4]).contains(&format!(
        "table=80, priority=150,tcp,reg2=0x4,tp_dst=9090 actions=conjunction({id},1/2)"
    )));
    // Egress: each peer's number, with the peer's address.
    let mut w2 = world();
    w2.local[0].pod.ports = vec![http(8080)].into();
    w2.local[1].pod.ports = vec![http(9090)].into();
    w2.pods[0].ports = vec![http(8080)].into();
    w2.pods[1].ports = vec![http(9090)].into();
    let mut p = policy("prod", "http-out", LabelSelector::labels([("app", "web")]));
    p.egress = Some(vec![Rule {
        peers: vec![],
        ports: named,
    }]);
    w2.policies.push(p);
    let rows = w2.rows();
    let id = *rows.rules.keys().next().unwrap();
    let mut shared = texts(&rows.shared);
    shared.retain(|t| t.contains("tp_dst"));
    shared.sort();
    assert_eq!(
        shared,
        vec![
            format!("table=27, priority=150,tcp,nw_dst=10.128.0.3,tp_dst=8080 actions=conjunction({id},2/2)"),
            format!("table=27, priority=150,tcp,nw_dst=10.128.0.4,tp_dst=9090 actions=conjunction({id},2/2)"),
        ]
    );
}

#[test]
fn conjunction_ids_are_stable_and_distinct() {
    let mut w = world();
    for i in 0..40 {
        let mut p = policy("prod", &format!("p{i}"), LabelSelector::everything());
        p.ingress = Some(vec![Rule {
            peers: vec![],
            ports: vec![PortSpec::Any(Protocol::Udp)],
        }]);
        w.policies.push(p);
    }
    let a = w.rows();
    assert_eq!(a.rules.len(), 40);
    w.policies.reverse();
    assert_eq!(w.rows(), a, "order of the input does not matter");
    // Every id's rows are at one priority, and every rule has its conj_id row.
    for id in a.rules.keys() {
        assert!(a
            .shared
            .iter()
            .any(|f| f.matches.conj_id == Some(*id) && f.priority == PRIO_CONJUNCTION));
    }
    // Collisions are probed past.
    let keys: BTreeSet<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
    let ids = assign_ids(&keys);
    assert_ne!(ids["a"], ids["b"]);
    assert!(ids.values().all(|v| *v != 0));
}

#[test]
fn every_row_is_a_valid_flow() {
    let mut w = world();
    let mut p = policy("prod", "all", LabelSelector::everything());
    p.ingress = Some(vec![
        Rule {
            peers: vec![
                Peer::IpBlock {
                    cidr: "0.0.0.0/0".parse().unwrap(),
                    except: vec!["10.0.0.0/8".parse().unwrap()],
                },
                Peer::Pods {
                    namespaces: Some(LabelSelector::everything()),
                    pods: LabelSelector::everything(),
                },
            ],
            ports: vec![
                PortSpec::Any(Protocol::Sctp),
                PortSpec::Range {
                    protocol: Protocol::Tcp,
                    first: 1,
                    last: 65535,
                },
            ],
        },
        Rule::default(),
    ]);
    p.egress = p.ingress.clone();
    w.policies.push(p);
    for f in w.rows().all() {
        f.validate().unwrap_or_else(|e| panic!("{f}: {e}"));
    }
}

#[test]
fn a_stale_address_of_the_local_subnet_is_not_a_peer() {
    let mut w = world();
    let mut p = policy("prod", "all-in", LabelSelector::labels([("app", "web")]));
    p.ingress = Some(vec![Rule {
        peers: vec![Peer::Pods {
            namespaces: Some(LabelSelector::everything()),
            pods: LabelSelector::labels([("app", "client")]),
        }],
        ports: vec![],
    }]);
    w.policies.push(p);
    // A pod of the API claims an address of this node's subnet that the pod table does not
    // give it (a stale status): left out; the same pod elsewhere is a peer.
    w.pods.push(pod("dev", "stale", "client", [10, 128, 0, 77]));
    w.pods.push(pod("dev", "far", "client", [10, 130, 0, 9]));
    let pods = pods_by_namespace(w.pods.clone());
    let rows = policy_rows(PolicyInput {
        policies: &w.policies,
        cluster_policies: &[],
        ids: None,
        namespaces: &w.namespaces,
        pods: &pods,
        local_subnet: Some("10.128.0.0/23".parse().unwrap()),
        local_subnet6: None,
        local: &w.local,
        datapath: Datapath::System,
        multitenant: false,
        pods_listed: true,
        nodes: None,
        ipv6: false,
        ipv4: true,
        logged: &BTreeMap::new(),
    });
    let shared = texts(&rows.shared).join("\n");
    assert!(!shared.contains("nw_src=10.128.0.77"), "{shared}");
    assert!(shared.contains("nw_src=10.130.0.9"), "{shared}");
}

#[test]
fn ids_computed_once_give_the_same_rows() {
    let mut w = world();
    let mut p = policy("prod", "web", LabelSelector::labels([("app", "web")]));
    p.ingress = Some(vec![Rule {
        peers: vec![Peer::Pods {
            namespaces: Some(LabelSelector::everything()),
            pods: LabelSelector::labels([("app", "client")]),
        }],
        ports: vec![PortSpec::Any(Protocol::Tcp)],
    }]);
    w.policies.push(p);
    let ids = conjunction_ids(&w.policies, &[]);
    let pods = pods_by_namespace(w.pods.clone());
    let given = policy_rows(PolicyInput {
        policies: &w.policies,
        cluster_policies: &[],
        ids: Some(&ids),
        namespaces: &w.namespaces,
        pods: &pods,
        local_subnet: None,
        local_subnet6: None,
        local: &w.local,
        datapath: Datapath::System,
        multitenant: false,
        pods_listed: true,
        nodes: None,
        ipv6: false,
        ipv4: true,
        logged: &BTreeMap::new(),
    });
    assert_eq!(given, w.rows());
    assert!(!given.rules.is_empty());
}

/// Rows of every kind the policies make, for the register registry's check
/// (`registers::tests`): ingress from pods of selected namespaces (by VNID) and an ipBlock on
/// a port, egress to pods of the policy's namespace and an ipBlock with an exception, and a
/// default deny, over both datapaths.
pub(crate) fn sample_rows() -> Vec<Flow> {
    let mut out = Vec::new();
    for datapath in [Datapath::System, Datapath::Netdev] {
        let mut w = world();
        let mut p = policy("prod", "in", LabelSelector::labels([("app", "web")]));
        p.ingress = Some(vec![Rule {
            peers: vec![
                Peer::Pods {
                    namespaces: Some(LabelSelector::everything()),
                    pods: LabelSelector::everything(),
                },
                Peer::IpBlock {
                    cidr: "192.0.2.0/24".parse().unwrap(),
                    except: vec![],
                },
            ],
            ports: vec![PortSpec::Range {
                protocol: Protocol::Tcp,
                first: 80,
                last: 80,
            }],
        }]);
        p.egress = Some(vec![Rule {
            peers: vec![
                Peer::Pods {
                    namespaces: None,
                    pods: LabelSelector::labels([("app", "db")]),
                },
                Peer::IpBlock {
                    cidr: "198.51.100.0/24".parse().unwrap(),
                    except: vec!["198.51.100.0/28".parse().unwrap()],
                },
            ],
            ports: vec![],
        }]);
        w.policies.push(p);
        let mut deny = policy("prod", "deny", LabelSelector::labels([("app", "db")]));
        deny.ingress = Some(vec![]);
        w.policies.push(deny);
        let rows = policy_rows(PolicyInput {
            policies: &w.policies,
            cluster_policies: &[],
            ids: None,
            namespaces: &w.namespaces,
            pods: &pods_by_namespace(w.pods.clone()),
            local_subnet: None,
            local_subnet6: None,
            local: &w.local,
            datapath,
            multitenant: false,
            pods_listed: true,
            nodes: None,
            ipv6: false,
            ipv4: true,
            logged: &BTreeMap::from([(
                "prod".to_string(),
                crate::audit::Logged {
                    deny: true,
                    allow: true,
                },
            )]),
        });
        out.extend(rows.shared);
        out.extend(rows.targets.into_values().flatten());
    }
    out
}
