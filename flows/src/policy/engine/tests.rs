//! The engine against the rows computed from nothing: after every event of a long random
//! sequence (pods coming, going and relabelled anywhere, namespaces relabelled and their VNIDs
//! moved, local pods, policies added, changed and deleted) its rows are exactly
//! [`policy_rows`]' for the same input, and its deltas, applied to the rows before, give the
//! rows after. And what an event costs: nothing where no rule looks, one row where one does.

use super::*;
use crate::policy::{policy_rows, policy_target_cookie};
use multitenant::cluster_policy::{ClusterPolicy, Tier};
use multitenant::policy::{
    namespace_labels, ContainerPort, LabelSelector, Labels, Peer, PortSpec, Protocol, Rule,
};
use std::net::Ipv4Addr;

/// xorshift64*: a fixed sequence, so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const NAMESPACES: [&str; 6] = ["n0", "n1", "n2", "n3", "n4", "n5"];
const APPS: [&str; 3] = ["x", "y", "z"];

fn pod(ns: &str, name: &str, app: &str, ip: Ipv4Addr, named: bool) -> PodView {
    let ports: Vec<ContainerPort> = if named {
        vec![ContainerPort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: 8080,
        }]
    } else {
        Vec::new()
    };
    PodView {
        namespace: ns.into(),
        name: name.into(),
        labels: Arc::new(labels(&[("app", app)])),
        ip: Some(ip),
        ip6: None,
        ports: ports.into(),
    }
}

/// A random rule from the shapes policies have.
fn rule(rng: &mut Rng) -> Rule {
    let mut peers = Vec::new();
    for _ in 0..rng.below(3) {
        peers.push(match rng.below(5) {
            0 => Peer::Pods {
                namespaces: None,
                pods: LabelSelector::labels([("app", *rng.pick(&APPS))]),
            },
            1 => Peer::Pods {
                namespaces: Some(LabelSelector::labels([("env", *rng.pick(&["a", "b"]))])),
                pods: LabelSelector::everything(),
            },
            2 => Peer::Pods {
                namespaces: Some(LabelSelector::everything()),
                pods: LabelSelector::labels([("app", *rng.pick(&APPS))]),
            },
            3 => Peer::Pods {
                namespaces: Some(LabelSelector::labels([("env", "a")])),
                pods: LabelSelector::labels([("app", *rng.pick(&APPS))]),
            },
            _ => Peer::IpBlock {
                cidr: "10.129.0.0/16".parse().unwrap(),
                except: vec!["10.129.1.0/24".parse().unwrap()],
            },
        });
    }
    let ports = match rng.below(4) {
        0 => vec![],
        1 => vec![PortSpec::Range {
            protocol: Protocol::Tcp,
            first: 80,
            last: 80,
        }],
        2 => vec![PortSpec::Named {
            protocol: Protocol::Tcp,
            name: "http".into(),
        }],
        _ => vec![
            PortSpec::Named {
                protocol: Protocol::Tcp,
                name: "http".into(),
            },
            PortSpec::Any(Protocol::Udp),
        ],
    };
    Rule { peers, ports }
}

fn random_policy(rng: &mut Rng, name: &str) -> Policy {
    let ns = *rng.pick(&NAMESPACES[..3]);
    let rules = |rng: &mut Rng| (0..rng.below(3)).map(|_| rule(rng)).collect::<Vec<_>>();
    let (ingress, egress) = match rng.below(3) {
        0 => (Some(rules(rng)), None),
        1 => (None, Some(rules(rng))),
        _ => (Some(rules(rng)), Some(rules(rng))),
    };
    Policy {
        namespace: ns.into(),
        name: name.into(),
        pod_selector: if rng.below(2) == 0 {
            LabelSelector::everything()
        } else {
            LabelSelector::labels([("app", *rng.pick(&APPS))])
        },
        ingress,
        egress,
    }
}

/// A random ClusterNetworkPolicy of the shapes administrators write.
fn random_cluster_policy(rng: &mut Rng, name: &str) -> ClusterPolicy {
    use multitenant::cluster_policy::{Action, Peer as CPeer, Pods, Port as CPort, Rule as CRule};
    let rule = |rng: &mut Rng| CRule {
        name: String::new(),
        action: *rng.pick(&[Action::Accept, Action::Deny, Action::Pass]),
        peers: (0..1 + rng.below(2))
            .map(|_| match rng.below(4) {
                0 => CPeer::Pods(Pods::Namespaces(LabelSelector::labels([(
                    "env",
                    *rng.pick(&["a", "b"]),
                )]))),
                1 => CPeer::Pods(Pods::Pods {
                    namespaces: LabelSelector::everything(),
                    pods: LabelSelector::labels([("app", *rng.pick(&APPS))]),
                }),
                2 => CPeer::Networks(vec!["10.129.0.0/16".parse().unwrap()]),
                _ => CPeer::Unsupported("domainNames".into()),
            })
            .collect(),
        ports: match rng.below(3) {
            0 => vec![],
            1 => vec![CPort::Range {
                protocol: Protocol::Tcp,
                first: 80,
                last: 81,
            }],
            _ => vec![CPort::Named("http".into())],
        },
    };
    let rules = |rng: &mut Rng| (0..rng.below(3)).map(|_| rule(rng)).collect::<Vec<_>>();
    ClusterPolicy {
        name: name.into(),
        tier: *rng.pick(&[Tier::Admin, Tier::Baseline]),
        priority: rng.below(4) as u16 * 10,
        subject: if rng.below(2) == 0 {
            Pods::Namespaces(LabelSelector::labels([("env", *rng.pick(&["a", "b"]))]))
        } else {
            Pods::Pods {
                namespaces: LabelSelector::everything(),
                pods: LabelSelector::labels([("app", *rng.pick(&APPS))]),
            }
        },
        ingress: rules(rng),
        egress: rules(rng),
        log: multitenant::cluster_policy::LoggedActions {
            deny: rng.below(2) == 0,
            allow: rng.below(2) == 0,
            pass: rng.below(2) == 0,
        },
    }
}

/// The cluster as the test changes it.
struct World {
    cluster: BTreeMap<String, ClusterPolicy>,
    policies: BTreeMap<String, Policy>,
    namespaces: BTreeMap<String, NamespaceView>,
    pods: PodsByNamespace,
    local: BTreeMap<u32, LocalPod>,
    next_ip: u32,
}

impl World {
    fn new() -> World {
        let namespaces = NAMESPACES
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let env = if i % 2 == 0 { "a" } else { "b" };
                (
                    n.to_string(),
                    NamespaceView {
                        labels: namespace_labels(n, &labels(&[("env", env)])),
                        vnid: Vnid::new(10 + i as u32),
                    },
                )
            })
            .collect();
        World {
            cluster: BTreeMap::new(),
            policies: BTreeMap::new(),
            namespaces,
            pods: PodsByNamespace::default(),
            local: BTreeMap::new(),
            next_ip: 1,
        }
    }

    fn snapshot(&self) -> Snapshot {
        let policies: Vec<Policy> = self.policies.values().cloned().collect();
        let cluster: Vec<ClusterPolicy> = self.cluster.values().cloned().collect();
        Snapshot {
            ids: Arc::new(crate::policy::conjunction_ids(&policies, &cluster)),
            policies: Arc::new(policies),
            cluster_policies: Arc::new(cluster),
            namespaces: Arc::new(self.namespaces.clone()),
            pods: self.pods.clone(),
            local_subnet: Some("10.128.0.0/23".parse().unwrap()),
            local_subnet6: None,
            local: Arc::new(self.local.values().cloned().collect()),
            datapath: Datapath::Netdev,
            multitenant: false,
            pods_listed: true,
            nodes: None,
            ipv6: false,
            ipv4: true,
            logged: Arc::new(BTreeMap::new()),
        }
    }

    fn ip(&mut self, local: bool) -> Ipv4Addr {
        self.next_ip += 1;
        let n = self.next_ip;
        if local {
            Ipv4Addr::new(10, 128, 0, (n % 250) as u8 + 2)
        } else {
            Ipv4Addr::new(10, 129, (n / 250 % 4) as u8, (n % 250) as u8 + 2)
        }
    }

    /// One random event.
    fn event(&mut self, rng: &mut Rng, step: usize) -> String {
        match rng.below(10) {
            9 => {
                let name = format!("cnp{}", rng.below(4));
                if rng.below(3) == 0 {
                    self.cluster.remove(&name);
                    format!("cluster policy {name} gone")
                } else {
                    let p = random_cluster_policy(rng, &name);
                    self.cluster.insert(name.clone(), p);
                    format!("cluster policy {name} set")
                }
            }
            0..=2 => {
                let ns = *rng.pick(&NAMESPACES);
                let name = format!("p{}", rng.below(12));
                let ip = self.ip(false);
                let app = *rng.pick(&APPS);
                let p = pod(ns, &name, app, ip, rng.below(2) == 0);
                self.pods.set(ns, &name, Some(p));
                format!("remote pod {ns}/{name} set")
            }
            3 => {
                let ns = *rng.pick(&NAMESPACES);
                let name = format!("p{}", rng.below(12));
                self.pods.set(ns, &name, None);
                format!("remote pod {ns}/{name} gone")
            }
            4 => {
                let ns = *rng.pick(&NAMESPACES);
                let env = *rng.pick(&["a", "b", "c"]);
                let view = self.namespaces.get_mut(ns).unwrap();
                view.labels = namespace_labels(ns, &labels(&[("env", env)]));
                format!("namespace {ns} env={env}")
            }
            5 => {
                // A VNID moved: sometimes onto another namespace's (joined), sometimes global.
                let ns = *rng.pick(&NAMESPACES);
                let v = *rng.pick(&[0u32, 10, 11, 12, 20 + step as u32]);
                self.namespaces.get_mut(ns).unwrap().vnid = Vnid::new(v);
                format!("namespace {ns} vnid {v}")
            }
            6 => {
                let ofport = 3 + rng.below(5) as u32;
                if self.local.remove(&ofport).is_some() && rng.below(2) == 0 {
                    return format!("local pod {ofport} gone");
                }
                let ns = *rng.pick(&NAMESPACES[..3]);
                let ip = self.ip(true);
                let app = *rng.pick(&APPS);
                let p = pod(ns, &format!("l{ofport}"), app, ip, rng.below(2) == 0);
                self.local.insert(
                    ofport,
                    LocalPod {
                        pod: p,
                        ofport,
                        cookie: policy_target_cookie(&format!("veth{ofport}")),
                        ip6: None,
                    },
                );
                format!("local pod {ofport} in {ns}")
            }
            7 => {
                let name = format!("np{}", rng.below(6));
                if rng.below(3) == 0 {
                    self.policies.retain(|_, p| p.name != name);
                    format!("policy {name} gone")
                } else {
                    let p = random_policy(rng, &name);
                    self.policies.retain(|_, q| q.name != name);
                    let k = p.key();
                    self.policies.insert(k.clone(), p);
                    format!("policy {k} set")
                }
            }
            _ => "nothing".to_string(),
        }
    }
}

fn keyed(flows: &[Flow]) -> BTreeMap<String, String> {
    flows
        .iter()
        .map(|f| {
            let mut k = f.clone();
            k.actions.clear();
            k.goto_table = None;
            (k.to_string(), f.to_string())
        })
        .collect()
}

#[test]
fn the_engine_keeps_exactly_the_rows_computed_from_nothing() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut w = World::new();
    let mut engine = PolicyEngine::new();
    let mut on_bridge: BTreeMap<String, String> = BTreeMap::new();
    let (mut deltas, mut largest) = (0, 0);
    for step in 0..1500 {
        let what = w.event(&mut rng, step);
        let snap = w.snapshot();
        let delta = engine.update(snap.clone());
        let want = policy_rows(snap.input());
        let got = engine.rows();
        assert_eq!(got.targets, want.targets, "step {step} ({what}): targets");
        assert_eq!(
            texts(&got.shared),
            texts(&want.shared),
            "step {step} ({what}): shared rows"
        );
        assert_eq!(got.rules, want.rules, "step {step} ({what})");
        assert_eq!(got.isolated, want.isolated, "step {step} ({what})");
        // The delta takes the rows before to the rows after.
        for f in &delta.deletes {
            assert!(
                on_bridge
                    .remove(&keyed(std::slice::from_ref(f)).into_keys().next().unwrap())
                    .is_some(),
                "step {step} ({what}): delete of a row not there: {f}"
            );
        }
        for (k, v) in keyed(&delta.upserts) {
            assert_ne!(
                on_bridge.get(&k),
                Some(&v),
                "step {step} ({what}): no-op upsert"
            );
            on_bridge.insert(k, v);
        }
        assert_eq!(
            on_bridge,
            keyed(&want.shared),
            "step {step} ({what}): delta"
        );
        deltas += usize::from(!delta.shared_unchanged());
        largest = largest.max(on_bridge.len());
    }
    // The sequence exercised the rows, not only empty states.
    assert!(deltas > 300, "only {deltas} events changed the shared rows");
    assert!(largest > 30, "at most {largest} shared rows at once");
}

fn texts(flows: &[Flow]) -> Vec<String> {
    flows.iter().map(|f| f.to_string()).collect()
}

#[test]
fn a_pod_event_changes_only_the_row_it_affects() {
    let mut w = World::new();
    // 20 policies in n0, each from its own namespace's app=x pods and from env=a namespaces.
    for i in 0..20 {
        let p = Policy {
            namespace: "n0".into(),
            name: format!("np{i}"),
            pod_selector: LabelSelector::everything(),
            ingress: Some(vec![Rule {
                peers: vec![
                    Peer::Pods {
                        namespaces: None,
                        pods: LabelSelector::labels([("app", "x")]),
                    },
                    Peer::Pods {
                        namespaces: Some(LabelSelector::labels([("env", "a")])),
                        pods: LabelSelector::everything(),
                    },
                ],
                ports: vec![],
            }]),
            egress: None,
        };
        w.policies.insert(p.key(), p);
    }
    let web = pod("n0", "web", "y", Ipv4Addr::new(10, 128, 0, 3), false);
    w.local.insert(
        3,
        LocalPod {
            pod: web,
            ofport: 3,
            cookie: policy_target_cookie("veth3"),
            ip6: None,
        },
    );
    for ns in NAMESPACES {
        for k in 0..10 {
            let ip = w.ip(false);
            w.pods.set(
                ns,
                &format!("p{k}"),
                Some(pod(ns, &format!("p{k}"), "x", ip, false)),
            );
        }
    }
    let mut engine = PolicyEngine::new();
    let first = engine.update(w.snapshot());
    assert!(first.upserts.len() > 20, "{}", first.upserts.len());
    // n2 is an env=a namespace: its VNID is the peer, its pods are not; n1 is read by no rule.
    for ns in ["n1", "n2", "n3"] {
        let ip = w.ip(false);
        w.pods.set(ns, "new", Some(pod(ns, "new", "x", ip, false)));
        let d = engine.update(w.snapshot());
        assert!(
            d.shared_unchanged() && !d.targets_changed,
            "a pod of {ns} changes no row: {d:?}"
        );
    }
    // A pod of n0 with app=x: one row, its address with the 20 rules' clauses.
    let ip = w.ip(false);
    w.pods
        .set("n0", "new", Some(pod("n0", "new", "x", ip, false)));
    let d = engine.update(w.snapshot());
    assert_eq!(d.deletes, vec![]);
    assert_eq!(d.upserts.len(), 1, "{:?}", texts(&d.upserts));
    let row = d.upserts[0].to_string();
    assert!(row.contains(&format!("nw_src={ip}")), "{row}");
    assert_eq!(row.matches("conjunction(").count(), 20, "{row}");
    assert!(!d.targets_changed);
    // Relabelled out of the peers: that row goes, nothing else.
    w.pods
        .set("n0", "new", Some(pod("n0", "new", "z", ip, false)));
    let d = engine.update(w.snapshot());
    assert_eq!((d.upserts.len(), d.deletes.len()), (0, 1), "{d:?}");
    // A namespace relabelled into env=a: its VNID row joins, no pod row.
    w.namespaces.get_mut("n1").unwrap().labels = namespace_labels("n1", &labels(&[("env", "a")]));
    let d = engine.update(w.snapshot());
    assert_eq!(d.upserts.len(), 1, "{:?}", texts(&d.upserts));
    assert!(
        d.upserts[0].to_string().contains("reg0=0xb"),
        "{}",
        d.upserts[0]
    );
}
