//! Tables 27 (`pod_egress_policy`) and 80 (`ingress_isolation`) in networkpolicy mode: the
//! node's NetworkPolicies as conjunctive flows (docs/pipeline.md, "NetworkPolicy").
//!
//! openshift-sdn wrote one row per (target × peer × port) of every rule; a rule selecting N
//! pods, allowing M peers on P ports cost N·M·P rows, and it gave up on a policy past 10,000.
//! Here each rule is one conjunction (`conjunction(id, k/n)`, matched by `conj_id=id`): N rows
//! for its targets (dimension 1), M for its peers, P for its ports, plus one `conj_id` row, so
//! it costs N + M + P + 1. Rows with the same match merge their conjunction actions, so an
//! address many rules name is one row (an address set, as OVN and Antrea build them).
//!
//! The rows, per direction (ingress in table 80, egress in table 27):
//!
//! | prio | rows |
//! |---|---|
//! | 150 | clause rows: targets (`reg2=P` ingress, `reg3=P` egress), peers (`reg0=VNID` or `nw_src=` for ingress, `nw_dst=` for egress), ports (`tcp,tp_dst=v/m`); and per rule `ip,conj_id=ID` → allow |
//! | 140 | rules with one dimension only (a rule without peers and ports): `ip,reg2=P` → allow |
//! | 100 | isolation: `ip,reg2=P` (`reg3=P`) → drop, for a pod some policy selects in that direction |
//!
//! Allow is `ct(commit),output:NXM_NX_REG2[]` in table 80 (the connection is committed only once
//! it is allowed, so its replies pass as replies, and a refused one leaves no entry; on the
//! userspace datapath the commit also copies the via-host flag into `ct_mark`, so only an
//! allowed Service connection has its replies sent back through the node) and
//! `goto_table:30` in table 27. The base rows around them (replies, the node, services) are in
//! [`crate::base`].
//!
//! Named ports: the port a name stands for is the receiving pod's, so it cannot sit in a
//! dimension of its own. For ingress the receiving pod is the target: its row carries the port
//! (`tcp,reg2=P,tp_dst=8080`); for egress it is the peer: the peer's row does
//! (`tcp,nw_dst=IP,tp_dst=8080`). Each rule therefore has up to two conjunctions: its numbered
//! ports and its named ones.
//!
//! Namespace peers on ingress match the source VNID (`reg0=V`, one row for the whole namespace,
//! whichever node its pods are on) when the namespace holds its VNID alone and the VNID is a
//! tenant's (not 0, which the node's own traffic carries, nor the unknown tenant's); otherwise
//! they match the namespace's pod addresses. Egress peers are always addresses (the destination
//! VNID is not known before table 80).
//!
//! Conjunction ids are a hash of the rule's identity (`namespace/name`, direction, rule index,
//! numbered or named), probed past collisions in name order: the same policies give the same
//! ids on every node and after every restart, so a restarted agent finds its rows in place.
//!
//! Only policies that select a pod of this node produce rows: a node holds the rules of its own
//! pods, whatever the size of the cluster.
//!
//! Why one piece: the row layout above (priorities, dimensions, conjunction ids, named ports, the
//! merge of rows that share a match) is one contract with pipeline.md; the builder, the id
//! allocation and the merge must agree line by line, so they are read together.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use ipnet::{Ipv4Net, Ipv6Net};
use multitenant::cluster_policy::{Action as ClusterAction, ClusterPolicy, NodeView, Tier};
use multitenant::policy::{
    subtract, subtract6, ContainerPort, Direction, Labels, Peer, Policy, PortSpec, Protocol,
};
use ovs::flow::{Action, Flow, Match};

pub use pods::{pods_by_namespace, NamespacePods, PodsByNamespace};

use crate::audit::{self, Decision, Logged};
use crate::base::{allow_commit, net, Datapath};
use crate::cookie::{cookie, Feature};
use crate::registers::Reg;
use crate::tables::Table;
use crate::Vnid;

/// Priority of conjunction clause rows and `conj_id` rows.
pub const PRIO_CONJUNCTION: u16 = 150;
/// Priority of single-dimension allow rows.
pub const PRIO_PLAIN: u16 = 140;
/// Priority of a selected pod's isolation drop.
pub const PRIO_ISOLATION: u16 = 100;

/// The cookie of the shared policy rows (peers, ports, `conj_id` rows).
pub const POLICY_COOKIE: u64 = cookie(Feature::Policy, 1);

/// The cookie of the policy rows of the pod on OVS port `port` (its targets and isolation).
pub fn policy_target_cookie(port: &str) -> u64 {
    cookie(
        Feature::PolicyTarget,
        crate::pod::port_cookie(port) & !crate::cookie::FEATURE_MASK,
    )
}

/// A namespace, as policies see it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceView {
    /// Its labels (with `kubernetes.io/metadata.name`).
    pub labels: Labels,
    /// Its VNID, when it has a NetNamespace.
    pub vnid: Option<Vnid>,
}

/// A pod with an address, anywhere in the cluster, as policies see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its labels (shared: the pods of one workload carry the same set, and a cluster source
    /// keeps one copy of it).
    pub labels: Arc<Labels>,
    /// Its IPv4 address (`None`: a pod of an IPv6-only cluster).
    pub ip: Option<Ipv4Addr>,
    /// Its IPv6 address (a dual-stack or IPv6-only pod's).
    pub ip6: Option<Ipv6Addr>,
    /// Its container ports (for named ports; shared like the labels: a workload's pods
    /// declare the same ones).
    pub ports: Arc<[ContainerPort]>,
}

/// A pod of this node: a [`PodView`] and its OVS port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalPod {
    /// The pod.
    pub pod: PodView,
    /// Its ofport (`reg2` / `reg3`).
    pub ofport: u32,
    /// The cookie of its policy rows ([`policy_target_cookie`] of its port's name).
    pub cookie: u64,
    /// Its IPv6 address on a dual-stack node: its isolation and its rules' rows then cover
    /// IPv6 too.
    pub ip6: Option<Ipv6Addr>,
}

/// What the rows are built from.
#[derive(Clone, Copy, Debug)]
pub struct PolicyInput<'a> {
    /// Every NetworkPolicy.
    pub policies: &'a [Policy],
    /// Every ClusterNetworkPolicy.
    pub cluster_policies: &'a [ClusterPolicy],
    /// [`conjunction_ids`] of `policies`, when the caller keeps them (computed when `None`).
    pub ids: Option<&'a ConjunctionIds>,
    /// Every namespace, by name.
    pub namespaces: &'a BTreeMap<String, NamespaceView>,
    /// Every pod with an address the cluster source knows (host-network pods left out). This
    /// node's pods are taken from `local` instead: one of these with the name of a local pod,
    /// or with an address of `local_subnet` (a stale status), is left out.
    pub pods: &'a PodsByNamespace,
    /// This node's pod subnet, whose addresses only `local` gives.
    pub local_subnet: Option<Ipv4Net>,
    /// This node's IPv6 pod subnet, likewise.
    pub local_subnet6: Option<Ipv6Net>,
    /// This node's pods.
    pub local: &'a [LocalPod],
    /// The datapath (what an allowed connection's commit records).
    pub datapath: Datapath,
    /// Multitenant mode: only ClusterNetworkPolicies apply, their Admin tier around tenancy
    /// (an ingress Accept's commit records the client's VNID, its subjects answer ARP from
    /// every pod; Baseline ingress rules never decide).
    pub multitenant: bool,
    /// Whether `pods` holds the cluster's first list of pods. Until it does, a
    /// ClusterNetworkPolicy's Deny rule takes its pod peers as every address and an Admin
    /// Pass with pod peers denies on its ports (it denies more, never less, while the peers
    /// are unknown).
    pub pods_listed: bool,
    /// Every node of the cluster, by name, once listed (`None` until then): what
    /// ClusterNetworkPolicies' `nodes` peers select. Until they are listed, a Deny rule takes
    /// its `nodes` peers as every address, an Admin Pass with one denies on its ports, an
    /// Accept (or Baseline Pass) takes them as none.
    pub nodes: Option<&'a BTreeMap<String, NodeView>>,
    /// The node is dual stack: the shared rows (peers, ports, `conj_id`) get IPv6 twins. An
    /// IPv4 node's rows are exactly those of an IPv4 cluster.
    pub ipv6: bool,
    /// The node has IPv4 (every node but those of an IPv6-only cluster, whose rows are IPv6
    /// alone: IPv4 peers and blocks select nothing there).
    pub ipv4: bool,
    /// What each namespace logs (audit logging, by namespace name; a namespace missing logs
    /// nothing): a policy's allow rules get logging twins, its isolation rows log the default
    /// deny ([`crate::audit`]).
    pub logged: &'a BTreeMap<String, Logged>,
}

impl PodView {
    /// The pod's address that keys it among a rule's peers: its IPv4 address, else its IPv6
    /// one.
    fn key(&self) -> Option<IpAddr> {
        self.ip.map(IpAddr::V4).or_else(|| self.ip6.map(IpAddr::V6))
    }
}

impl<'a> PolicyInput<'a> {
    /// The pods of namespace `ns`: the cluster's (less this node's) and this node's.
    fn pods_in<'b>(&'b self, ns: &'b str) -> impl Iterator<Item = &'a PodView> + 'b {
        let local = self.local;
        let subnet = self.local_subnet;
        let subnet6 = self.local_subnet6;
        // Names are compared only in a namespace with a local pod (few): the rest are cheap.
        let has_local = local.iter().any(|l| l.pod.namespace == ns);
        self.pods
            .get(ns)
            .into_iter()
            .flat_map(|m| m.values())
            .filter(move |p| {
                let stale = subnet.is_some_and(|s| p.ip.is_some_and(|ip| s.contains(&ip)))
                    || subnet6.is_some_and(|s| p.ip6.is_some_and(|ip| s.contains(&ip)));
                let shadowed = has_local
                    && local
                        .iter()
                        .any(|l| l.pod.name == p.name && l.pod.namespace == p.namespace);
                !stale && !shadowed
            })
            .chain(
                local
                    .iter()
                    .map(|l| &l.pod)
                    .filter(move |p| p.namespace == ns),
            )
    }

    /// Every namespace that has a pod or a view.
    fn namespace_names(&self) -> BTreeSet<&'a str> {
        let mut names: BTreeSet<&str> = self.pods.namespaces().collect();
        names.extend(self.namespaces.keys().map(String::as_str));
        names.extend(self.local.iter().map(|l| l.pod.namespace.as_str()));
        names
    }

    /// Every pod, namespace by namespace.
    fn all_pods(&self) -> impl Iterator<Item = &'a PodView> + '_ {
        self.namespace_names()
            .into_iter()
            .flat_map(move |ns| self.pods_in(ns).collect::<Vec<_>>())
    }
}

/// Which rule a conjunction id stands for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RuleRef {
    /// The policy's `namespace/name` (a ClusterNetworkPolicy's name).
    pub policy: String,
    /// The direction.
    pub direction: Direction,
    /// The rule's index in the policy's rules of that direction.
    pub index: usize,
    /// Whether this is the conjunction of the rule's named ports.
    pub named: bool,
    /// A ClusterNetworkPolicy's rule: its tier, priority, action and name.
    pub cluster: Option<ClusterRule>,
}

/// What names a ClusterNetworkPolicy's rule beside its policy and position.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ClusterRule {
    /// The policy's tier.
    pub tier: Tier,
    /// The policy's priority.
    pub priority: u16,
    /// The rule's action.
    pub action: ClusterAction,
    /// The rule's name (may be empty).
    pub name: String,
    /// Which of its policy's decisions are logged.
    pub log: multitenant::cluster_policy::LoggedActions,
}

impl std::fmt::Display for RuleRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let named = if self.named { " (named ports)" } else { "" };
        match &self.cluster {
            None => write!(
                f,
                "NetworkPolicy {} {} rule {}{named}",
                self.policy, self.direction, self.index
            ),
            Some(c) => {
                write!(
                    f,
                    "ClusterNetworkPolicy {} ({} tier, priority {}) {} rule {}",
                    self.policy, c.tier, c.priority, self.direction, self.index
                )?;
                if !c.name.is_empty() {
                    write!(f, " {:?}", c.name)?;
                }
                write!(f, " ({}){named}", c.action)
            }
        }
    }
}

/// Whether `prio` is one a ClusterNetworkPolicy rule's rows take (a tier's ranks).
pub fn is_cluster_priority(prio: u16) -> bool {
    prio <= cluster::PRIO_TIER_TOP && prio > cluster::PRIO_TIER_TOP - cluster::TIER_ROOM as u16
}

/// The policies that isolate one local pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Isolation {
    /// Policies (`namespace/name`) selecting it for ingress.
    pub ingress: Vec<String>,
    /// Policies selecting it for egress.
    pub egress: Vec<String>,
}

/// The rows of every policy on this node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyRows {
    /// Per local pod (by ofport) that has any: its target and isolation rows, with its cookie.
    pub targets: BTreeMap<u32, Vec<Flow>>,
    /// The peer, port and `conj_id` rows ([`POLICY_COOKIE`]), sorted.
    pub shared: Vec<Flow>,
    /// What each conjunction id stands for.
    pub rules: BTreeMap<u32, RuleRef>,
    /// The single-dimension allow rows: (direction, ofport) → the rules that allow everything.
    pub plain: BTreeMap<(Direction, u32), Vec<RuleRef>>,
    /// The local pods policies select, by ofport.
    pub isolated: BTreeMap<u32, Isolation>,
}

impl PolicyRows {
    /// Every row.
    pub fn all(&self) -> impl Iterator<Item = &Flow> {
        self.targets.values().flatten().chain(&self.shared)
    }
}

fn table_of(d: Direction) -> Table {
    match d {
        Direction::Ingress => Table::IngressIsolation,
        Direction::Egress => Table::PodEgressPolicy,
    }
}

/// The register that names the local pod a rule applies to.
fn target_reg(d: Direction) -> Reg {
    match d {
        Direction::Ingress => Reg::OutPort,
        Direction::Egress => Reg::SrcPort,
    }
}

/// The actions that let a packet through in the rule's direction: the commit records the
/// via-host flag on the userspace datapath ([`allow_commit`]).
///
/// Multitenant mode: an ingress allow is an Admin-tier Accept, whose commit records that it
/// admitted the connection and the client's VNID ([`crate::base::admitted_commit`]), which the
/// replies carry.
fn allow(flow: Flow, ctx: &RuleCtx) -> Flow {
    let commit = if ctx.multitenant {
        crate::base::admitted_commit()
    } else {
        allow_commit(ctx.datapath)
    };
    match ctx.d {
        Direction::Ingress => flow
            .action(Action::Ct(commit))
            .action(Reg::OutPort.output()),
        Direction::Egress => flow.goto(Table::ConntrackCommit.id()),
    }
}

/// [`allow`], and when the policy's namespace logs allowed connections, its twin one
/// priority above for a connection's first packet (`+new+trk`) that logs the rule first
/// (`rule`: its conjunction id; `None` for a rule without peers and ports).
fn allow_rows(flow: Flow, ctx: &RuleCtx, rule: Option<u32>) -> Vec<Flow> {
    let mut out = Vec::with_capacity(2);
    if ctx.log.allow {
        let decision = match ctx.d {
            Direction::Ingress => Decision::PolicyIngressAllow,
            Direction::Egress => Decision::PolicyEgressAllow,
        };
        let mut twin = Flow::new(flow.table, flow.priority + 1)
            .cookie(flow.cookie)
            .matching(flow.matches.clone().ct_state(audit::new_connection()));
        for a in audit::log_actions(decision, 0, rule) {
            twin = twin.action(a);
        }
        out.push(allow(twin, ctx));
    }
    out.push(allow(flow, ctx));
    out
}

fn l4(proto: Protocol) -> Match {
    match proto {
        Protocol::Tcp => Match::any().tcp(),
        Protocol::Udp => Match::any().udp(),
        Protocol::Sctp => Match::any().sctp(),
    }
}

/// [`l4`] in IPv6.
fn l4_6(proto: Protocol) -> Match {
    match proto {
        Protocol::Tcp => Match::any().tcp6(),
        Protocol::Udp => Match::any().udp6(),
        Protocol::Sctp => Match::any().sctp6(),
    }
}

/// The match `m` of one family (`ip`) and its IPv6 twin when `twin` (the same fields on an
/// IPv6 packet: `ip` → `ipv6`, `tcp` → `tcp6`...). Only for matches without addresses.
fn families(m: Match, ipv4: bool, twin: bool) -> Vec<Match> {
    let mut out = Vec::with_capacity(2);
    if ipv4 {
        out.push(m.clone());
    }
    if twin {
        let mut six = m;
        six.eth_type = Some(0x86dd);
        out.push(six);
    }
    out
}

/// FNV-1a, 32 bits: the starting point of a rule's conjunction id.
fn fnv32(s: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in s.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The conjunction id of every rule part of `policies` (see the module docs). A caller that
/// computes rows often for the same policies computes these once and passes them in
/// [`PolicyInput::ids`]: with 10,000 policies they are 20,000 keys to hash.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConjunctionIds(HashMap<String, u32>);

impl std::ops::Index<&String> for ConjunctionIds {
    type Output = u32;
    fn index(&self, key: &String) -> &u32 {
        &self.0[key]
    }
}

impl ConjunctionIds {
    fn get(&self, key: &String) -> Option<&u32> {
        self.0.get(key)
    }
}

/// The conjunction ids of `policies`' rule parts.
pub fn conjunction_ids(policies: &[Policy], cluster: &[ClusterPolicy]) -> ConjunctionIds {
    let mut keys: BTreeSet<String> = cluster::rule_keys(cluster).collect();
    for p in policies {
        for d in [Direction::Ingress, Direction::Egress] {
            for (i, r) in p.rules(d).unwrap_or_default().iter().enumerate() {
                keys.insert(rule_key(p, d, i, false));
                if r.ports.iter().any(|s| matches!(s, PortSpec::Named { .. })) {
                    keys.insert(rule_key(p, d, i, true));
                }
            }
        }
    }
    ConjunctionIds(assign_ids(&keys))
}

/// Conjunction ids for `keys` (sorted): each key's hash, probed forward past ids taken by keys
/// that sort before it (never 0).
fn assign_ids(keys: &BTreeSet<String>) -> HashMap<String, u32> {
    let mut taken = BTreeSet::new();
    let mut ids = HashMap::new();
    for k in keys {
        let mut id = fnv32(k).max(1);
        while !taken.insert(id) {
            id = id.wrapping_add(1).max(1);
        }
        ids.insert(k.clone(), id);
    }
    ids
}

/// The rows under construction: (table, priority, match) → actions, so rows with the same match
/// merge their conjunction actions.
#[derive(Default)]
struct Rows {
    rows: HashMap<RowKey, RowBody>,
}

/// What OpenFlow keys a row by: table, priority, match.
type RowKey = (u8, u16, Match);
/// A row's cookie, actions and `goto_table`.
type RowBody = (u64, Vec<Action>, Option<u8>);

impl Rows {
    #[allow(clippy::too_many_arguments)]
    fn conj(&mut self, table: Table, prio: u16, m: Match, cookie: u64, id: u32, clause: u8, n: u8) {
        let Ok(a) = Action::conjunction(id, clause, n) else {
            return;
        };
        let e = self
            .rows
            .entry((table.id(), prio, m))
            .or_insert((cookie, Vec::new(), None));
        if !e.1.contains(&a) {
            e.1.push(a);
        }
    }

    fn put(&mut self, flow: Flow) {
        self.rows.insert(
            (flow.table, flow.priority, flow.matches.clone()),
            (flow.cookie, flow.actions, flow.goto_table),
        );
    }

    fn flows(self) -> Vec<Flow> {
        let mut out: Vec<Flow> = self
            .rows
            .into_iter()
            .map(|((table, prio, m), (cookie, mut actions, goto))| {
                actions.sort_by_key(|a| match a {
                    Action::Conjunction { id, clause, .. } => (*id, *clause),
                    _ => (0, 0),
                });
                let mut f = Flow::new(table, prio)
                    .cookie(cookie)
                    .matching(m)
                    .actions(actions);
                f.goto_table = goto;
                f
            })
            .collect();
        out.sort_by_cached_key(|f| (f.table, std::cmp::Reverse(f.priority), f.to_string()));
        out
    }
}

/// Every policy's rows for this node's pods (the engine's rows, computed from nothing).
pub fn policy_rows(input: PolicyInput<'_>) -> PolicyRows {
    let snapshot = Snapshot::of(&input);
    let mut engine = PolicyEngine::new();
    engine.update(snapshot);
    engine.rows()
}

fn rule_key(p: &Policy, d: Direction, i: usize, named: bool) -> String {
    format!(
        "{}/{}/{}/{i}/{}",
        p.namespace,
        p.name,
        d.name(),
        if named { "named" } else { "ports" }
    )
}

/// What the rows of one rule are built with.
#[derive(Clone, Copy)]
struct RuleCtx {
    datapath: Datapath,
    /// Multitenant mode ([`PolicyInput::multitenant`]).
    multitenant: bool,
    /// Dual stack: IPv6 twins of the shared rows.
    ipv6: bool,
    /// IPv4 rows (every node but an IPv6-only cluster's).
    ipv4: bool,
    d: Direction,
    table: Table,
    reg: Reg,
    /// What the policy's namespace logs.
    log: Logged,
    /// A ClusterNetworkPolicy rule's: which of its policy's decisions are logged (its rows
    /// then log those, [`policy::parts::verdict_rows`]).
    cluster_log: Option<multitenant::cluster_policy::LoggedActions>,
}

/// The match of a peer address or block in direction `d`.
fn peer_net6(d: Direction, n: &Ipv6Net) -> Match {
    let m = Match::any().ipv6();
    if n.prefix_len() == 0 {
        return m;
    }
    match d {
        Direction::Ingress => m.ipv6_src(crate::ipv6::net6(n)),
        Direction::Egress => m.ipv6_dst(crate::ipv6::net6(n)),
    }
}

fn peer_net(d: Direction, n: &Ipv4Net) -> Match {
    let m = Match::any().ip();
    if n.prefix_len() == 0 {
        return m;
    }
    match d {
        Direction::Ingress => m.nw_src(net(n)),
        Direction::Egress => m.nw_dst(net(n)),
    }
}

/// What openshift-sdn's cross product would have installed for the same policies and pods
/// (its `parseNetworkPolicy`, for the scale comparison in the README; not used by the agent):
/// for every policy of a namespace with a pod on this node, per rule, one row per (target ×
/// peer × port), where
/// - targets: 1 for an empty pod selector (no `nw_dst`), else every pod of the namespace it
///   selects, on any node;
/// - peers: 1 for no peers, an empty pod selector on ingress (`reg0`) or an empty namespace
///   selector; one per namespace for a namespace selector on ingress; one per pod address for a
///   pod selector, a namespace selector on egress, or both; one per CIDR of an ipBlock;
/// - ports: one per entry, 1 for none;
///
/// plus one isolation row per selected pod and direction when the selector is not empty.
/// `local_targets`: count only this node's pods as targets (a cross product that left out the
/// rows of other nodes' pods, which openshift-sdn did not).
pub fn cross_product_rows(input: PolicyInput<'_>, local_targets: bool) -> usize {
    let no_labels = NamespaceView::default();
    let ns_of = |n: &str| input.namespaces.get(n).unwrap_or(&no_labels);
    let mut total = 0usize;
    for p in input.policies {
        if !input.local.iter().any(|l| l.pod.namespace == p.namespace) {
            continue;
        }
        let targets = if p.pod_selector.is_everything() {
            1
        } else if local_targets {
            input
                .local
                .iter()
                .filter(|l| p.selects(&l.pod.namespace, &l.pod.labels))
                .count()
        } else {
            input
                .all_pods()
                .filter(|pod| p.selects(&pod.namespace, &pod.labels))
                .count()
        };
        for d in [Direction::Ingress, Direction::Egress] {
            let Some(rules) = p.rules(d) else { continue };
            if !p.pod_selector.is_everything() {
                total += targets;
            }
            for rule in rules {
                let pods_of = |peer: &Peer| {
                    input
                        .all_pods()
                        .filter(|pod| {
                            peer.selects_pod(
                                &p.namespace,
                                &pod.namespace,
                                &ns_of(&pod.namespace).labels,
                                &pod.labels,
                            )
                        })
                        .count()
                };
                let peers = if rule.peers.is_empty() {
                    1
                } else {
                    rule.peers
                        .iter()
                        .map(|peer| match peer {
                            Peer::IpBlock { cidr, except } => subtract(*cidr, except).len(),
                            Peer::IpBlock6 { cidr, except } => subtract6(*cidr, except).len(),
                            Peer::Pods {
                                namespaces: None,
                                pods,
                            } if pods.is_everything() && d == Direction::Ingress => 1,
                            Peer::Pods {
                                namespaces: Some(ns),
                                pods,
                            } if pods.is_everything() => {
                                if ns.is_everything() {
                                    1
                                } else if d == Direction::Ingress {
                                    input
                                        .namespaces
                                        .values()
                                        .filter(|n| ns.matches(&n.labels))
                                        .count()
                                } else {
                                    pods_of(peer)
                                }
                            }
                            Peer::Pods { .. } => pods_of(peer),
                        })
                        .sum()
                };
                total += targets * peers * rule.ports.len().max(1);
            }
        }
    }
    total
}

pub(crate) mod cluster;
mod engine;
mod parts;
mod pods;
mod verdict;

pub use cluster::tier_table as cluster_table;
pub use engine::{Delta, PolicyEngine, Snapshot};
pub use parts::{admitted_client, pod_rows};

#[cfg(test)]
pub(crate) mod tests;
