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
use multitenant::policy::{
    port_masks, resolve_named_port, subtract, subtract6, ContainerPort, Direction, Labels, Peer,
    Policy, PortSpec, Protocol, Rule,
};
use ovs::flow::{Action, Flow, Masked, Match};

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

/// Which namespaces' pods a set of rows was computed from: a change to the pods of any other
/// namespace cannot change the rows (the agent skips its rebuild then).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodsRead {
    /// Every pod (a rule with named ports that sends anywhere).
    All,
    /// The pods of these namespaces.
    Namespaces(BTreeSet<String>),
}

impl Default for PodsRead {
    fn default() -> Self {
        PodsRead::Namespaces(BTreeSet::new())
    }
}

impl PodsRead {
    /// Whether a change to namespace `ns`'s pods may change the rows.
    pub fn reads(&self, ns: &str) -> bool {
        match self {
            PodsRead::All => true,
            PodsRead::Namespaces(set) => set.contains(ns),
        }
    }

    fn add(&mut self, ns: &str) {
        if let PodsRead::Namespaces(set) = self {
            if !set.contains(ns) {
                set.insert(ns.to_string());
            }
        }
    }
}

/// Which rule a conjunction id stands for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RuleRef {
    /// The policy's `namespace/name`.
    pub policy: String,
    /// The direction.
    pub direction: Direction,
    /// The rule's index in the policy's rules of that direction.
    pub index: usize,
    /// Whether this is the conjunction of the rule's named ports.
    pub named: bool,
}

impl std::fmt::Display for RuleRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NetworkPolicy {} {} rule {}{}",
            self.policy,
            self.direction,
            self.index,
            if self.named { " (named ports)" } else { "" }
        )
    }
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
    /// The namespaces whose pods these rows were computed from.
    pub pods_read: PodsRead,
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
fn allow(flow: Flow, ctx: &RuleCtx<'_, '_>) -> Flow {
    match ctx.d {
        Direction::Ingress => flow
            .action(Action::Ct(allow_commit(ctx.datapath)))
            .action(Reg::OutPort.output()),
        Direction::Egress => flow.goto(Table::ConntrackCommit.id()),
    }
}

/// [`allow`], and when the policy's namespace logs allowed connections, its twin one
/// priority above for a connection's first packet (`+new+trk`) that logs the rule first
/// (`rule`: its conjunction id; `None` for a rule without peers and ports).
fn allow_rows(flow: Flow, ctx: &RuleCtx<'_, '_>, rule: Option<u32>) -> Vec<Flow> {
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
pub fn conjunction_ids(policies: &[Policy]) -> ConjunctionIds {
    let mut keys = BTreeSet::new();
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

/// What a rule's peers resolve to.
#[derive(Default)]
struct Peers<'a> {
    /// The rule names no peer: every peer.
    all: bool,
    /// Source VNIDs (ingress namespace peers).
    vnids: BTreeSet<Vnid>,
    /// Addresses and blocks.
    nets: BTreeSet<Ipv4Net>,
    /// IPv6 addresses and blocks (dual stack).
    nets6: BTreeSet<Ipv6Net>,
    /// The pods among the peers (for named egress ports), by address (the IPv4 one where
    /// there is one).
    pods: BTreeMap<IpAddr, &'a PodView>,
}

impl Peers<'_> {
    fn is_empty(&self) -> bool {
        !self.all && self.vnids.is_empty() && self.nets.is_empty() && self.nets6.is_empty()
    }
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
    fn conj(&mut self, table: Table, m: Match, cookie: u64, id: u32, clause: u8, n: u8) {
        let Ok(a) = Action::conjunction(id, clause, n) else {
            return;
        };
        let e = self
            .rows
            .entry((table.id(), PRIO_CONJUNCTION, m))
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

/// The local pods a policy selects.
fn targets<'a>(p: &Policy, local: &'a [LocalPod]) -> Vec<&'a LocalPod> {
    local
        .iter()
        .filter(|l| p.selects(&l.pod.namespace, &l.pod.labels))
        .collect()
}

/// Every policy's rows for this node's pods.
pub fn policy_rows(input: PolicyInput<'_>) -> PolicyRows {
    let mut out = PolicyRows::default();
    // Policies with targets here, in name order.
    let mut active: Vec<(&Policy, Vec<&LocalPod>)> = input
        .policies
        .iter()
        .map(|p| (p, targets(p, input.local)))
        .filter(|(_, t)| !t.is_empty())
        .collect();
    active.sort_by_key(|(p, _)| (p.namespace.clone(), p.name.clone()));

    // Conjunction ids of every rule part, assigned over every policy (not only the active
    // ones), so one pod's rows computed alone (at its ADD) carry the same ids.
    let computed;
    let ids = match input.ids {
        Some(ids) => ids,
        None => {
            computed = conjunction_ids(input.policies);
            &computed
        }
    };

    // VNIDs a single namespace holds, for namespace peers on ingress.
    let mut holders: BTreeMap<Vnid, usize> = BTreeMap::new();
    for ns in input.namespaces.values() {
        if let Some(v) = ns.vnid {
            *holders.entry(v).or_default() += 1;
        }
    }
    let own_vnid = |ns: &NamespaceView| {
        ns.vnid.filter(|v| {
            !v.is_global() && *v != Vnid::UNASSIGNED && holders.get(v).copied() == Some(1)
        })
    };

    let mut shared = Rows::default();
    let mut target_rows: BTreeMap<u32, Rows> = BTreeMap::new();
    for (p, tgts) in &active {
        for d in [Direction::Ingress, Direction::Egress] {
            let Some(rules) = p.rules(d) else { continue };
            let table = table_of(d);
            let reg = target_reg(d);
            let log = input.logged.get(&p.namespace).copied().unwrap_or_default();
            let isolation = |m: Match, cookie: u64| {
                let mut f = Flow::new(table.id(), PRIO_ISOLATION)
                    .cookie(cookie)
                    .matching(m);
                if log.deny {
                    let decision = match d {
                        Direction::Ingress => Decision::PolicyIngressDeny,
                        Direction::Egress => Decision::PolicyEgressDeny,
                    };
                    for a in audit::log_actions(decision, 0, None) {
                        f = f.action(a);
                    }
                }
                f
            };
            for t in tgts {
                let iso = out.isolated.entry(t.ofport).or_default();
                match d {
                    Direction::Ingress => iso.ingress.push(p.key()),
                    Direction::Egress => iso.egress.push(p.key()),
                }
                let rows = target_rows.entry(t.ofport).or_default();
                if input.ipv4 {
                    rows.put(isolation(
                        reg.matching(Match::any().ip(), t.ofport),
                        t.cookie,
                    ));
                }
                if t.ip6.is_some() {
                    rows.put(isolation(
                        reg.matching(Match::any().ipv6(), t.ofport),
                        t.cookie,
                    ));
                }
            }
            for (i, rule) in rules.iter().enumerate() {
                let peers = resolve_peers(p, d, rule, input, &own_vnid, &mut out.pods_read);
                let ctx = RuleCtx {
                    log,
                    datapath: input.datapath,
                    ipv6: input.ipv6,
                    ipv4: input.ipv4,
                    d,
                    table,
                    reg,
                    targets: tgts,
                };
                let rref = |named| RuleRef {
                    policy: p.key(),
                    direction: d,
                    index: i,
                    named,
                };
                numbered_part(
                    &ctx,
                    rule,
                    &peers,
                    ids[&rule_key(p, d, i, false)],
                    rref(false),
                    &mut shared,
                    &mut target_rows,
                    &mut out,
                );
                if let Some(id) = ids.get(&rule_key(p, d, i, true)) {
                    named_part(
                        &ctx,
                        rule,
                        &peers,
                        &input,
                        *id,
                        rref(true),
                        &mut shared,
                        &mut target_rows,
                        &mut out,
                    );
                }
            }
        }
    }
    out.shared = shared.flows();
    out.targets = target_rows
        .into_iter()
        .map(|(port, rows)| (port, rows.flows()))
        .collect();
    out
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

/// The resolved peers of a rule.
fn resolve_peers<'a>(
    p: &Policy,
    d: Direction,
    rule: &Rule,
    input: PolicyInput<'a>,
    own_vnid: &dyn Fn(&NamespaceView) -> Option<Vnid>,
    read: &mut PodsRead,
) -> Peers<'a> {
    let mut peers = Peers {
        all: rule.peers.is_empty(),
        ..Peers::default()
    };
    let no_labels = NamespaceView::default();
    let ns_of = |name: &str| input.namespaces.get(name).unwrap_or(&no_labels);
    for peer in &rule.peers {
        match peer {
            Peer::IpBlock { cidr, except } if input.ipv4 => {
                peers.nets.extend(subtract(*cidr, except))
            }
            Peer::IpBlock { .. } => {}
            Peer::IpBlock6 { cidr, except } if input.ipv6 => {
                peers.nets6.extend(subtract6(*cidr, except))
            }
            Peer::IpBlock6 { .. } => {}
            Peer::Pods { namespaces, pods } => {
                // A whole namespace on ingress: its VNID when it holds one alone.
                let mut by_vnid = BTreeSet::new();
                if d == Direction::Ingress && pods.is_everything() {
                    if let Some(sel) = namespaces {
                        for (name, ns) in input.namespaces {
                            if sel.matches(&ns.labels) {
                                if let Some(v) = own_vnid(ns) {
                                    peers.vnids.insert(v);
                                    by_vnid.insert(name.as_str());
                                }
                            }
                        }
                    }
                }
                // Only the namespaces the peer can select are read: its own without a
                // namespace selector, else those whose labels the selector matches.
                let candidates: Vec<&str> = match namespaces {
                    None => vec![p.namespace.as_str()],
                    Some(sel) => input
                        .namespace_names()
                        .into_iter()
                        .filter(|n| sel.matches(&ns_of(n).labels))
                        .collect(),
                };
                for name in candidates {
                    read.add(name);
                    let ns = ns_of(name);
                    for pod in input.pods_in(name) {
                        let Some(key) = pod.key() else { continue };
                        if by_vnid.contains(name) {
                            peers.pods.insert(key, pod);
                            continue;
                        }
                        if peer.selects_pod(&p.namespace, name, &ns.labels, &pod.labels) {
                            if let Some(ip) = pod.ip.filter(|_| input.ipv4) {
                                peers.nets.insert(Ipv4Net::from(ip));
                            }
                            if let Some(ip6) = pod.ip6.filter(|_| input.ipv6) {
                                peers.nets6.insert(Ipv6Net::from(ip6));
                            }
                            peers.pods.insert(key, pod);
                        }
                    }
                }
            }
        }
    }
    peers
}

struct RuleCtx<'a, 'b> {
    datapath: Datapath,
    /// Dual stack: IPv6 twins of the shared rows.
    ipv6: bool,
    /// IPv4 rows (every node but an IPv6-only cluster's).
    ipv4: bool,
    d: Direction,
    table: Table,
    reg: Reg,
    targets: &'b [&'a LocalPod],
    /// What the policy's namespace logs.
    log: Logged,
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

/// The rule's numbered ports (and the protocol-only entries), or all traffic when it names none.
#[allow(clippy::too_many_arguments)]
fn numbered_part(
    ctx: &RuleCtx<'_, '_>,
    rule: &Rule,
    peers: &Peers<'_>,
    id: u32,
    rref: RuleRef,
    shared: &mut Rows,
    target_rows: &mut BTreeMap<u32, Rows>,
    out: &mut PolicyRows,
) {
    let numbered: Vec<&PortSpec> = rule
        .ports
        .iter()
        .filter(|s| !matches!(s, PortSpec::Named { .. }))
        .collect();
    // Only named ports: this part allows nothing.
    if !rule.ports.is_empty() && numbered.is_empty() {
        return;
    }
    if peers.is_empty() {
        return;
    }
    let with_peers = !peers.all;
    let with_ports = !numbered.is_empty();
    let n = 1 + u8::from(with_peers) + u8::from(with_ports);
    let table = ctx.table;
    if n == 1 {
        for t in ctx.targets {
            for m in families(Match::any().ip(), ctx.ipv4, t.ip6.is_some()) {
                for f in allow_rows(
                    Flow::new(table.id(), PRIO_PLAIN)
                        .cookie(t.cookie)
                        .matching(ctx.reg.matching(m, t.ofport)),
                    ctx,
                    None,
                ) {
                    target_rows.entry(t.ofport).or_default().put(f);
                }
            }
            out.plain
                .entry((ctx.d, t.ofport))
                .or_default()
                .push(rref.clone());
        }
        return;
    }
    for t in ctx.targets {
        for m in families(Match::any().ip(), ctx.ipv4, t.ip6.is_some()) {
            target_rows.entry(t.ofport).or_default().conj(
                table,
                ctx.reg.matching(m, t.ofport),
                t.cookie,
                id,
                1,
                n,
            );
        }
    }
    let mut clause = 1;
    if with_peers {
        clause += 1;
        add_peer_rows(ctx, peers, id, clause, n, shared);
    }
    if with_ports {
        clause += 1;
        for spec in numbered {
            match spec {
                PortSpec::Any(proto) => {
                    if ctx.ipv4 {
                        shared.conj(table, l4(*proto), POLICY_COOKIE, id, clause, n);
                    }
                    if ctx.ipv6 {
                        shared.conj(table, l4_6(*proto), POLICY_COOKIE, id, clause, n);
                    }
                }
                PortSpec::Range {
                    protocol,
                    first,
                    last,
                } => {
                    for (v, m) in port_masks(*first, *last) {
                        let mask = Masked::new(v, m).unwrap_or(Masked::exact(v));
                        let l4s = [
                            ctx.ipv4.then(|| l4(*protocol)),
                            ctx.ipv6.then(|| l4_6(*protocol)),
                        ];
                        for l4 in l4s.into_iter().flatten() {
                            let m = if m == 0 { l4 } else { l4.tp_dst(mask) };
                            shared.conj(table, m, POLICY_COOKIE, id, clause, n);
                        }
                    }
                }
                PortSpec::Named { .. } => {}
            }
        }
    }
    finish_rule(ctx, id, rref, shared, out);
}

fn add_peer_rows(
    ctx: &RuleCtx<'_, '_>,
    peers: &Peers<'_>,
    id: u32,
    clause: u8,
    n: u8,
    shared: &mut Rows,
) {
    let (d, table) = (ctx.d, ctx.table);
    for v in &peers.vnids {
        for m in families(Match::any().ip(), ctx.ipv4, ctx.ipv6) {
            shared.conj(
                table,
                Reg::SrcVnid.matching(m, v.id()),
                POLICY_COOKIE,
                id,
                clause,
                n,
            );
        }
    }
    for net in &peers.nets {
        shared.conj(table, peer_net(d, net), POLICY_COOKIE, id, clause, n);
    }
    for net in &peers.nets6 {
        shared.conj(table, peer_net6(d, net), POLICY_COOKIE, id, clause, n);
    }
}

/// The rule's named ports: resolved on the target (ingress) or on each peer pod (egress).
#[allow(clippy::too_many_arguments)]
fn named_part(
    ctx: &RuleCtx<'_, '_>,
    rule: &Rule,
    peers: &Peers<'_>,
    input: &PolicyInput<'_>,
    id: u32,
    rref: RuleRef,
    shared: &mut Rows,
    target_rows: &mut BTreeMap<u32, Rows>,
    out: &mut PolicyRows,
) {
    let named: Vec<(Protocol, &str)> = rule
        .ports
        .iter()
        .filter_map(|s| match s {
            PortSpec::Named { protocol, name } => Some((*protocol, name.as_str())),
            _ => None,
        })
        .collect();
    if peers.is_empty() {
        return;
    }
    let table = ctx.table;
    let mut any = false;
    match ctx.d {
        Direction::Ingress => {
            let n = if peers.all { 1 } else { 2 };
            for t in ctx.targets {
                for (proto, name) in &named {
                    let Some(port) = resolve_named_port(&t.pod.ports, *proto, name) else {
                        continue;
                    };
                    let l4s = [ctx.ipv4.then(|| l4(*proto)), t.ip6.map(|_| l4_6(*proto))];
                    for l4 in l4s.into_iter().flatten() {
                        let m = ctx.reg.matching(l4, t.ofport).tp_dst(Masked::exact(port));
                        let rows = target_rows.entry(t.ofport).or_default();
                        if n == 1 {
                            for f in allow_rows(
                                Flow::new(table.id(), PRIO_PLAIN)
                                    .cookie(t.cookie)
                                    .matching(m),
                                ctx,
                                None,
                            ) {
                                rows.put(f);
                            }
                        } else {
                            rows.conj(table, m, t.cookie, id, 1, 2);
                            any = true;
                        }
                    }
                    if n == 1 {
                        out.plain
                            .entry((ctx.d, t.ofport))
                            .or_default()
                            .push(rref.clone());
                    }
                }
            }
            if any {
                add_peer_rows(ctx, peers, id, 2, 2, shared);
            }
        }
        Direction::Egress => {
            // The peer pods (every pod when the rule names no peer) with the port.
            let candidates: Vec<&PodView> = if peers.all {
                out.pods_read = PodsRead::All;
                input.all_pods().collect()
            } else {
                peers.pods.values().copied().collect()
            };
            for pod in candidates {
                for (proto, name) in &named {
                    if let Some(port) = resolve_named_port(&pod.ports, *proto, name) {
                        if let Some(ip) = pod.ip.filter(|_| ctx.ipv4) {
                            shared.conj(
                                table,
                                l4(*proto)
                                    .nw_dst(Masked::exact(ip))
                                    .tp_dst(Masked::exact(port)),
                                POLICY_COOKIE,
                                id,
                                2,
                                2,
                            );
                        }
                        if let Some(ip6) = pod.ip6.filter(|_| ctx.ipv6) {
                            shared.conj(
                                table,
                                l4_6(*proto)
                                    .ipv6_dst(Masked::exact(ip6))
                                    .tp_dst(Masked::exact(port)),
                                POLICY_COOKIE,
                                id,
                                2,
                                2,
                            );
                        }
                        any = true;
                    }
                }
            }
            if any {
                for t in ctx.targets {
                    for m in families(Match::any().ip(), ctx.ipv4, t.ip6.is_some()) {
                        target_rows.entry(t.ofport).or_default().conj(
                            table,
                            ctx.reg.matching(m, t.ofport),
                            t.cookie,
                            id,
                            1,
                            2,
                        );
                    }
                }
            }
        }
    }
    if any {
        finish_rule(ctx, id, rref, shared, out);
    }
}

/// The `conj_id=ID` row that allows what conjunction `id` matched, and the id's rule.
fn finish_rule(
    ctx: &RuleCtx<'_, '_>,
    id: u32,
    rref: RuleRef,
    shared: &mut Rows,
    out: &mut PolicyRows,
) {
    for m in families(Match::any().ip(), ctx.ipv4, ctx.ipv6) {
        for f in allow_rows(
            Flow::new(ctx.table.id(), PRIO_CONJUNCTION)
                .cookie(POLICY_COOKIE)
                .matching(m.conj_id(id)),
            ctx,
            Some(id),
        ) {
            shared.put(f);
        }
    }
    out.rules.insert(id, rref);
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

mod pods;

#[cfg(test)]
pub(crate) mod tests;
