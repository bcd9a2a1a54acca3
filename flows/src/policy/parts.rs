//! The rule parts of NetworkPolicies and the rows each gives, split by what they depend on
//! (see [`super::engine`]): per local pod ([`pod_rows`]), per part whatever the pods
//! ([`static_rows`]), and per part and namespace ([`namespace_rows`]).
//!
//! A part is one conjunction: a rule's numbered ports (and protocol-only entries, or all
//! traffic when it names none), or its named ports, which resolve on the receiving pod and so
//! cannot share a dimension with numbered ones.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::{Ipv4Net, Ipv6Net};
use multitenant::cluster_policy::{Action as CnpAction, Peer as CnpPeer, Tier};
use multitenant::policy::{
    port_masks, resolve_named_port, subtract, subtract6, Direction, Labels, Peer, Policy, PortSpec,
    Protocol,
};
use ovs::flow::{Action, Flow, Masked, Match};

use super::engine::RowKey;
use super::verdict::{verdict_rows, Verdict};
use super::{
    families, l4, l4_6, peer_net, peer_net6, rule_key, table_of, target_reg, ClusterRule,
    ConjunctionIds, Isolation, LocalPod, NamespaceView, PodView, PolicyInput, Rows, RuleCtx,
    RuleRef, Table, POLICY_COOKIE, PRIO_CONJUNCTION, PRIO_ISOLATION, PRIO_PLAIN,
};
use crate::audit::{self, Decision, Logged};
use crate::registers::Reg;
use crate::Vnid;

/// Which part of which rule: the identity of one conjunction.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct PartKey {
    pub(super) policy: String,
    pub(super) d: Direction,
    pub(super) index: usize,
    pub(super) named: bool,
}

/// One rule part compiled from its policy: everything its rows are made of, owned, so the
/// engine keeps the parts of the rows on the bridge and compares a policy's new parts with them
/// (a part that compares equal keeps its rows).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct RuleSpec {
    pub(super) key: PartKey,
    pub(super) id: u32,
    /// Its policy's namespace (where a peer without a namespace selector selects pods).
    pub(super) namespace: String,
    /// Its rule's peers (none: every peer).
    pub(super) peers: Vec<Peer>,
    /// Its port entries: a numbered part's numbered and protocol-only ones (none: every port),
    /// a named part's named ones.
    pub(super) ports: Vec<PortSpec>,
    /// What its policy's namespace logs.
    pub(super) log: Logged,
    /// Where its rows sit.
    pub(super) place: Place,
    /// What a packet it matches gets.
    pub(super) verdict: Verdict,
    /// A ClusterNetworkPolicy rule's tier, priority, action and name.
    pub(super) cluster: Option<ClusterRule>,
}

/// Where a part's rows sit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Place {
    pub(super) table: Table,
    /// The priority of its conjunction clauses and `conj_id` rows.
    pub(super) conj: u16,
    /// The priority of its single-dimension rows.
    pub(super) plain: u16,
    /// An Admin-tier part: its target rows also match these bits of `reg4` clear (a Pass sets
    /// them, and the packet meets no Admin-tier row of that direction again).
    pub(super) unpassed: Option<u32>,
}

impl Place {
    /// A NetworkPolicy's part: table 27 or 80 at the NetworkPolicy priorities.
    pub(super) fn network_policy(d: Direction) -> Place {
        Place {
            table: table_of(d),
            conj: PRIO_CONJUNCTION,
            plain: PRIO_PLAIN,
            unpassed: None,
        }
    }
}

impl RuleSpec {
    pub(super) fn d(&self) -> Direction {
        self.key.d
    }

    pub(super) fn named(&self) -> bool {
        self.key.named
    }

    pub(super) fn rref(&self) -> RuleRef {
        RuleRef {
            policy: self.key.policy.clone(),
            direction: self.key.d,
            index: self.key.index,
            named: self.key.named,
            cluster: self.cluster.clone(),
        }
    }

    fn named_ports(&self) -> Vec<(Protocol, &str)> {
        self.ports
            .iter()
            .filter_map(|s| match s {
                PortSpec::Named { protocol, name } => Some((*protocol, name.as_str())),
                _ => None,
            })
            .collect()
    }

    /// The number of clauses of its conjunction (1: no conjunction, plain rows per target).
    pub(super) fn clauses(&self) -> u8 {
        let with_peers = !self.peers.is_empty();
        match (self.named(), self.d()) {
            (false, _) => 1 + u8::from(with_peers) + u8::from(!self.ports.is_empty()),
            (true, Direction::Ingress) => 1 + u8::from(with_peers),
            (true, Direction::Egress) => 2,
        }
    }

    /// Whether its peers are rows of their own (clause 2) in the shared rows.
    fn has_peer_clause(&self) -> bool {
        !(self.peers.is_empty() || self.named() && self.d() == Direction::Egress)
    }

    fn ctx(&self, input: &PolicyInput<'_>) -> RuleCtx {
        RuleCtx {
            log: self.log,
            datapath: input.datapath,
            multitenant: input.multitenant,
            ipv6: input.ipv6,
            ipv4: input.ipv4,
            d: self.d(),
            table: self.place.table,
            reg: target_reg(self.d()),
            cluster_log: self.cluster.as_ref().map(|c| c.log),
        }
    }
}

/// The parts of policy `p`: per direction it affects, per rule, its numbered part (unless it
/// names only named ports) and its named part (when it names any).
pub(super) fn parts_of(
    p: &Policy,
    ids: &ConjunctionIds,
    logged: &BTreeMap<String, Logged>,
) -> Vec<RuleSpec> {
    let mut out = Vec::new();
    let log = logged.get(&p.namespace).copied().unwrap_or_default();
    for d in [Direction::Ingress, Direction::Egress] {
        for (index, rule) in p.rules(d).unwrap_or_default().iter().enumerate() {
            let (named, numbered): (Vec<&PortSpec>, Vec<&PortSpec>) = rule
                .ports
                .iter()
                .partition(|s| matches!(s, PortSpec::Named { .. }));
            let parts = [
                (
                    false,
                    rule.ports.is_empty() || !numbered.is_empty(),
                    numbered,
                ),
                (true, !named.is_empty(), named),
            ];
            for (is_named, exists, ports) in parts {
                if !exists {
                    continue;
                }
                let Some(id) = ids.get(&rule_key(p, d, index, is_named)) else {
                    continue;
                };
                out.push(RuleSpec {
                    key: PartKey {
                        policy: p.key(),
                        d,
                        index,
                        named: is_named,
                    },
                    id: *id,
                    namespace: p.namespace.clone(),
                    peers: rule.peers.clone(),
                    ports: ports.into_iter().cloned().collect(),
                    log,
                    place: Place::network_policy(d),
                    verdict: Verdict::Allow,
                    cluster: None,
                });
            }
        }
    }
    out
}

/// One contribution to a shared row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Item {
    /// A conjunction clause (`conjunction(id, clause/n)`).
    Conj { id: u32, clause: u8, n: u8 },
    /// A whole row of its own (a `conj_id` row): cookie, actions, `goto_table`.
    Row(u64, Vec<Action>, Option<u8>),
}

/// How many namespaces hold each VNID (a namespace peer on ingress is its VNID only when the
/// namespace holds it alone).
pub(super) fn holders(namespaces: &BTreeMap<String, NamespaceView>) -> BTreeMap<Vnid, usize> {
    let mut out: BTreeMap<Vnid, usize> = BTreeMap::new();
    for ns in namespaces.values() {
        if let Some(v) = ns.vnid {
            *out.entry(v).or_default() += 1;
        }
    }
    out
}

/// The VNID namespace `ns` stands for as a peer: its own, when it is a tenant's (not 0, which
/// the node's own traffic carries, nor the unknown tenant's) and no other namespace holds it.
pub(super) fn own_vnid(ns: &NamespaceView, holders: &BTreeMap<Vnid, usize>) -> Option<Vnid> {
    ns.vnid
        .filter(|v| !v.is_global() && *v != Vnid::UNASSIGNED && holders.get(v).copied() == Some(1))
}

/// An input with its VNID holders.
pub(super) struct Ctx<'a> {
    pub(super) input: PolicyInput<'a>,
    pub(super) holders: &'a BTreeMap<Vnid, usize>,
}

impl Ctx<'_> {
    fn view(&self, ns: &str) -> &NamespaceView {
        static NONE: std::sync::OnceLock<NamespaceView> = std::sync::OnceLock::new();
        self.input
            .namespaces
            .get(ns)
            .unwrap_or_else(|| NONE.get_or_init(NamespaceView::default))
    }
}

/// The rows a part has whatever the pods: its ports, its `ipBlock` peers, its `conj_id` rows.
pub(super) fn static_rows(part: &RuleSpec, input: &PolicyInput<'_>, out: &mut Vec<(RowKey, Item)>) {
    let n = part.clauses();
    if n == 1 {
        return;
    }
    let ctx = part.ctx(input);
    let table = ctx.table.id();
    let conj = |clause| Item::Conj {
        id: part.id,
        clause,
        n,
    };
    if part.has_peer_clause() {
        for peer in &part.peers {
            match peer {
                Peer::IpBlock { cidr, except } if input.ipv4 => {
                    for net in subtract(*cidr, except) {
                        out.push(((table, part.place.conj, peer_net(part.d(), &net)), conj(2)));
                    }
                }
                Peer::IpBlock6 { cidr, except } if input.ipv6 => {
                    for net in subtract6(*cidr, except) {
                        out.push(((table, part.place.conj, peer_net6(part.d(), &net)), conj(2)));
                    }
                }
                _ => {}
            }
        }
    }
    if !part.named() && !part.ports.is_empty() {
        let clause = 2 + u8::from(!part.peers.is_empty());
        for spec in &part.ports {
            let l4s = |proto: Protocol| {
                [ctx.ipv4.then(|| l4(proto)), ctx.ipv6.then(|| l4_6(proto))]
                    .into_iter()
                    .flatten()
            };
            match spec {
                PortSpec::Any(proto) => {
                    for m in l4s(*proto) {
                        out.push(((table, part.place.conj, m), conj(clause)));
                    }
                }
                PortSpec::Range {
                    protocol,
                    first,
                    last,
                } => {
                    for (v, mask) in port_masks(*first, *last) {
                        let masked = Masked::new(v, mask).unwrap_or(Masked::exact(v));
                        for m in l4s(*protocol) {
                            let m = if mask == 0 { m } else { m.tp_dst(masked) };
                            out.push(((table, part.place.conj, m), conj(clause)));
                        }
                    }
                }
                PortSpec::Named { .. } => {}
            }
        }
    }
    for m in families(Match::any().ip(), ctx.ipv4, ctx.ipv6) {
        let row = Flow::new(table, part.place.conj)
            .cookie(POLICY_COOKIE)
            .matching(m.conj_id(part.id));
        for f in verdict_rows(row, part.verdict, &ctx, Some(part.id)) {
            out.push((
                (f.table, f.priority, f.matches),
                Item::Row(f.cookie, f.actions, f.goto_table),
            ));
        }
    }
}

/// The rows namespace `ns` gives a part: its VNID, or the addresses of its pods the part's
/// peers select (for named egress ports: address and port, per pod declaring the name).
pub(super) fn namespace_rows(
    part: &RuleSpec,
    cx: &Ctx<'_>,
    ns: &str,
    out: &mut Vec<(RowKey, Item)>,
) {
    let input = &cx.input;
    let n = part.clauses();
    let table = part.place.table.id();
    let egress_named = part.named() && part.d() == Direction::Egress;
    if !egress_named && (n == 1 || part.peers.is_empty()) {
        return;
    }
    let view = cx.view(ns);
    let mut vnid = None;
    let mut pods: BTreeMap<IpAddr, &PodView> = BTreeMap::new();
    if part.peers.is_empty() {
        // Named egress ports to any peer: every pod.
        for pod in input.pods_in(ns) {
            if let Some(k) = pod.key() {
                pods.insert(k, pod);
            }
        }
    }
    for peer in &part.peers {
        let Peer::Pods {
            namespaces,
            pods: sel,
        } = peer
        else {
            continue;
        };
        let selected = match namespaces {
            None => ns == part.namespace,
            Some(s) => s.matches(&view.labels),
        };
        if !selected {
            continue;
        }
        if part.d() == Direction::Ingress && sel.is_everything() && namespaces.is_some() {
            if let Some(v) = own_vnid(view, cx.holders) {
                vnid = Some(v);
                continue;
            }
        }
        for pod in input.pods_in(ns) {
            if let Some(k) = pod.key() {
                if sel.matches(&pod.labels) {
                    pods.insert(k, pod);
                }
            }
        }
    }
    let conj = |clause| Item::Conj {
        id: part.id,
        clause,
        n,
    };
    if egress_named {
        let named = part.named_ports();
        for pod in pods.values() {
            for (proto, name) in &named {
                let Some(port) = resolve_named_port(&pod.ports, *proto, name) else {
                    continue;
                };
                if let Some(ip) = pod.ip.filter(|_| input.ipv4) {
                    let m = l4(*proto)
                        .nw_dst(Masked::exact(ip))
                        .tp_dst(Masked::exact(port));
                    out.push(((table, part.place.conj, m), conj(2)));
                }
                if let Some(ip6) = pod.ip6.filter(|_| input.ipv6) {
                    let m = l4_6(*proto)
                        .ipv6_dst(Masked::exact(ip6))
                        .tp_dst(Masked::exact(port));
                    out.push(((table, part.place.conj, m), conj(2)));
                }
            }
        }
        return;
    }
    if let Some(v) = vnid {
        for m in families(Match::any().ip(), input.ipv4, input.ipv6) {
            let m = Reg::SrcVnid.matching(m, v.id());
            out.push(((table, part.place.conj, m), conj(2)));
        }
    }
    let v4: BTreeSet<Ipv4Net> = pods
        .values()
        .filter_map(|p| p.ip.filter(|_| input.ipv4).map(Ipv4Net::from))
        .collect();
    let v6: BTreeSet<Ipv6Net> = pods
        .values()
        .filter_map(|p| p.ip6.filter(|_| input.ipv6).map(Ipv6Net::from))
        .collect();
    for net in &v4 {
        out.push(((table, part.place.conj, peer_net(part.d(), net)), conj(2)));
    }
    for net in &v6 {
        out.push(((table, part.place.conj, peer_net6(part.d(), net)), conj(2)));
    }
}

/// Every namespace a part's rows may come from.
pub(super) fn namespaces_of(part: &RuleSpec, input: &PolicyInput<'_>) -> BTreeSet<String> {
    let all = || input.namespace_names().into_iter().map(str::to_string);
    if part.named() && part.d() == Direction::Egress && part.peers.is_empty() {
        return all().collect();
    }
    let mut out = BTreeSet::new();
    let mut names: Option<Vec<String>> = None;
    let none = NamespaceView::default();
    for peer in &part.peers {
        if let Peer::Pods { namespaces, .. } = peer {
            match namespaces {
                None => {
                    out.insert(part.namespace.clone());
                }
                Some(sel) => {
                    let names = names.get_or_insert_with(|| all().collect());
                    out.extend(
                        names
                            .iter()
                            .filter(|n| {
                                sel.matches(&input.namespaces.get(*n).unwrap_or(&none).labels)
                            })
                            .cloned(),
                    );
                }
            }
        }
    }
    out
}

/// Multitenant mode: a pod an Admin-tier Accept lets other tenants into (its subject), or lets
/// into another tenant (its peer, on whichever node the subject is), resolves and is resolved
/// across tenants: ARP of either kind and IPv6 neighbour solicitations and advertisements to it
/// are delivered from every pod (`arp,reg2=P` → output, at the replies' priority), where they
/// would otherwise meet tenancy. Both ends need it: the client resolves the server, and the
/// server resolves the client again before it answers (its kernel's entry learnt from the
/// request goes stale, and a Service's client is never seen asking). Table 20 holds what a pod
/// sends to its own address and MAC, so it tells only the truth about a pod that answers
/// (pipeline.md, "Tenancy").
fn neighbour_rows(t: &LocalPod, ipv4: bool, rows: &mut Rows) {
    let row = |m: Match| {
        Flow::new(Table::IngressIsolation.id(), crate::base::PRIO_REPLY)
            .cookie(t.cookie)
            .matching(Reg::OutPort.matching(m, t.ofport))
            .action(Reg::OutPort.output())
    };
    if ipv4 {
        rows.put(row(Match::any().arp()));
    }
    if t.ip6.is_some() {
        rows.put(row(crate::ipv6::solicitation()));
        rows.put(row(crate::ipv6::advertisement()));
    }
}

/// Whether a pod (its namespace's labels, its labels and addresses) is among the peers of an
/// Admin-tier Accept ingress rule of `policies`: the client side of [`neighbour_rows`].
pub fn admitted_client<'a>(
    policies: impl IntoIterator<Item = &'a multitenant::cluster_policy::ClusterPolicy>,
    ns_labels: &Labels,
    labels: &Labels,
    ip: Option<std::net::Ipv4Addr>,
    ip6: Option<std::net::Ipv6Addr>,
) -> bool {
    let peer_of = |p: &CnpPeer| match p {
        CnpPeer::Pods(pods) => pods.selects(ns_labels, labels),
        CnpPeer::Networks(nets) => nets.iter().any(|n| match n {
            ipnet::IpNet::V4(n) => ip.is_some_and(|ip| n.contains(&ip)),
            ipnet::IpNet::V6(n) => ip6.is_some_and(|ip| n.contains(&ip)),
        }),
        CnpPeer::Nodes(_) | CnpPeer::Unsupported(_) => false,
    };
    policies
        .into_iter()
        .filter(|cp| cp.tier == Tier::Admin)
        .flat_map(|cp| &cp.ingress)
        .filter(|r| r.action == CnpAction::Accept)
        .any(|r| r.peers.iter().any(peer_of))
}

/// The rows of one local pod: the target rows of every part of every policy that selects it,
/// and its isolation rows; with what it is isolated by and its plain (single-dimension)
/// rules.
pub fn pod_rows(
    input: &PolicyInput<'_>,
    ids: &ConjunctionIds,
    t: &LocalPod,
) -> (Vec<Flow>, Isolation, Vec<(Direction, RuleRef)>) {
    let mut rows = Rows::default();
    let mut iso = Isolation::default();
    let mut plain = Vec::new();
    let mut selecting: Vec<&Policy> = input
        .policies
        .iter()
        .filter(|p| p.selects(&t.pod.namespace, &t.pod.labels))
        .collect();
    selecting.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    for p in selecting {
        for d in [Direction::Ingress, Direction::Egress] {
            if p.rules(d).is_none() {
                continue;
            }
            match d {
                Direction::Ingress => iso.ingress.push(p.key()),
                Direction::Egress => iso.egress.push(p.key()),
            }
            let log = input.logged.get(&p.namespace).copied().unwrap_or_default();
            let fams = [
                input.ipv4.then(|| Match::any().ip()),
                t.ip6.map(|_| Match::any().ipv6()),
            ];
            for m in fams.into_iter().flatten() {
                let mut f = Flow::new(table_of(d).id(), PRIO_ISOLATION)
                    .cookie(t.cookie)
                    .matching(target_reg(d).matching(m, t.ofport));
                if log.deny {
                    let decision = match d {
                        Direction::Ingress => Decision::PolicyIngressDeny,
                        Direction::Egress => Decision::PolicyEgressDeny,
                    };
                    for a in audit::log_actions(decision, 0, None) {
                        f = f.action(a);
                    }
                }
                rows.put(f);
            }
        }
        for part in parts_of(p, ids, input.logged) {
            target_rows(&part, input, t, &mut rows, &mut plain);
        }
    }
    // Ranked only when a cluster policy selects the pod (most pods, most nodes: none).
    let mut ranks = None;
    let none = NamespaceView::default();
    let ns_labels = &input
        .namespaces
        .get(&t.pod.namespace)
        .unwrap_or(&none)
        .labels;
    if input.multitenant
        && admitted_client(
            input.cluster_policies,
            ns_labels,
            &t.pod.labels,
            t.pod.ip,
            t.ip6,
        )
    {
        neighbour_rows(t, input.ipv4, &mut rows);
    }
    for cp in input.cluster_policies {
        if !cp.selects(ns_labels, &t.pod.labels) {
            continue;
        }
        let ranks = ranks.get_or_insert_with(|| super::cluster::ranks(input.cluster_policies));
        for part in super::cluster::parts_of(cp, ids, ranks, input) {
            target_rows(&part, input, t, &mut rows, &mut plain);
        }
    }
    (rows.flows(), iso, plain)
}

/// The rows part `part` gives local pod `t`: its clause-1 rows (per named port the pod declares
/// on ingress), or its single-dimension rows; `plain` notes the latter's rule.
fn target_rows(
    part: &RuleSpec,
    input: &PolicyInput<'_>,
    t: &LocalPod,
    rows: &mut Rows,
    plain: &mut Vec<(Direction, RuleRef)>,
) {
    let ctx = part.ctx(input);
    let n = part.clauses();
    // The target's matches: per named port it declares (ingress), else the pod.
    let mut matches = Vec::new();
    if part.named() && part.d() == Direction::Ingress {
        for (proto, name) in part.named_ports() {
            let Some(port) = resolve_named_port(&t.pod.ports, proto, name) else {
                continue;
            };
            let l4s = [ctx.ipv4.then(|| l4(proto)), t.ip6.map(|_| l4_6(proto))];
            for m in l4s.into_iter().flatten() {
                matches.push(ctx.reg.matching(m, t.ofport).tp_dst(Masked::exact(port)));
            }
            if n == 1 {
                plain.push((part.d(), part.rref()));
            }
        }
    } else {
        for m in families(Match::any().ip(), ctx.ipv4, t.ip6.is_some()) {
            matches.push(ctx.reg.matching(m, t.ofport));
        }
        if n == 1 {
            plain.push((part.d(), part.rref()));
        }
    }
    if ctx.multitenant
        && part.d() == Direction::Ingress
        && part.verdict == Verdict::Allow
        && !matches.is_empty()
    {
        neighbour_rows(t, ctx.ipv4, rows);
    }
    for m in matches {
        let m = match part.place.unpassed {
            Some(bits) => m.reg(
                Reg::ViaHost.number(),
                Masked::new(0, bits).unwrap_or(Masked::exact(0)),
            ),
            None => m,
        };
        if n == 1 {
            let row = Flow::new(ctx.table.id(), part.place.plain)
                .cookie(t.cookie)
                .matching(m);
            // A cluster rule's logged rows name it by its id (in the engine's rules too).
            let rule = part.cluster.is_some().then_some(part.id);
            for f in verdict_rows(row, part.verdict, &ctx, rule) {
                rows.put(f);
            }
        } else {
            rows.conj(ctx.table, part.place.conj, m, t.cookie, part.id, 1, n);
        }
    }
}
