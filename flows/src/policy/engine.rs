//! [`PolicyEngine`]: the NetworkPolicy rows of this node, kept by difference.
//!
//! Why by difference: a policy whose peers select across namespaces (a namespace selector that
//! matches hundreds of them, the shape cluster-admin policies have) names a large set, and a
//! node of a 150,000-pod cluster sees pod events all the time. Rebuilding every rule at every
//! event that touched a namespace some rule reads cost a node 181 ms of CPU per event and
//! hundreds of megabytes of transient maps. Here each rule part (one conjunction: a rule's
//! numbered ports, or its named ones) is split by what its rows depend on:
//!
//! - **per local pod** (target and isolation rows, with the pod's cookie): the policies and the
//!   pod alone ([`pod_rows`], which an ADD also calls for its new pod);
//! - **per part, static** (port rows, `ipBlock` rows, the `conj_id` row): the policy alone;
//! - **per part and namespace** (peer rows: the namespace's VNID, or the addresses of its pods
//!   that a peer selects, or for named egress ports an address and port per pod): that
//!   namespace's view and pods alone.
//!
//! The shared rows are the merge of all of these: a map from a row's key (table, priority,
//! match) to the conjunction clauses that name it, each with a count. An update subtracts what
//! a changed namespace gave each part before and adds what it gives now, and a part whose
//! policy, id or activity changed is taken out or put in whole; only rows whose clauses
//! changed leave the engine ([`Delta`]). A pod event in a namespace no rule reads costs a
//! selector match per part; one in a namespace a rule reads costs that namespace's pods.
//!
//! A part's rows exist whenever its policy selects a pod of this node, even while its peers
//! select nobody: its conjunction then never completes, which is the same verdict, and a peer
//! that appears adds one row instead of a part's worth.

use std::collections::hash_map::Entry as MapEntry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use ipnet::{Ipv4Net, Ipv6Net};
use multitenant::cluster_policy::{ClusterPolicy, NodeView};
use multitenant::policy::{Direction, Policy};
use ovs::flow::{Action, Flow, Match};

use super::cluster;
use super::parts::{
    holders, namespace_rows, namespaces_of, own_vnid, parts_of, pod_rows, static_rows, Ctx, Item,
    PartKey, RuleSpec,
};
use super::{
    conjunction_ids, ConjunctionIds, Isolation, LocalPod, NamespaceView, PodView, PodsByNamespace,
    PolicyInput, PolicyRows, RowBody, RuleRef, POLICY_COOKIE,
};
use crate::audit::Logged;
use crate::base::Datapath;
use crate::Vnid;

/// What OpenFlow keys a row by: table, priority, match.
pub(super) type RowKey = (u8, u16, Match);

/// An owned [`PolicyInput`]: what the engine's rows were computed from, kept so that the next
/// update can subtract what a namespace gave before. Cheap to clone: the large parts are
/// shared (`Arc`s, and the pods shard by shard).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Every NetworkPolicy.
    pub policies: Arc<Vec<Policy>>,
    /// Every ClusterNetworkPolicy.
    pub cluster_policies: Arc<Vec<ClusterPolicy>>,
    /// Their conjunction ids ([`super::conjunction_ids`]).
    pub ids: Arc<ConjunctionIds>,
    /// Every namespace, by name.
    pub namespaces: Arc<BTreeMap<String, NamespaceView>>,
    /// Every pod with an address the cluster source knows ([`PolicyInput::pods`]).
    pub pods: PodsByNamespace,
    /// This node's pod subnet ([`PolicyInput::local_subnet`]).
    pub local_subnet: Option<Ipv4Net>,
    /// This node's IPv6 pod subnet.
    pub local_subnet6: Option<Ipv6Net>,
    /// This node's pods, by ofport.
    pub local: Arc<Vec<LocalPod>>,
    /// The datapath.
    pub datapath: Datapath,
    /// Multitenant mode ([`PolicyInput::multitenant`]).
    pub multitenant: bool,
    /// The cluster's pods are listed ([`PolicyInput::pods_listed`]).
    pub pods_listed: bool,
    /// Every node, once listed ([`PolicyInput::nodes`]).
    pub nodes: Option<Arc<BTreeMap<String, NodeView>>>,
    /// IPv6 twins of the shared rows ([`PolicyInput::ipv6`]).
    pub ipv6: bool,
    /// IPv4 rows ([`PolicyInput::ipv4`]).
    pub ipv4: bool,
    /// What each namespace logs.
    pub logged: Arc<BTreeMap<String, Logged>>,
}

impl Snapshot {
    /// An owned copy of `input` (its conjunction ids computed when it has none).
    pub fn of(input: &PolicyInput<'_>) -> Snapshot {
        let ids = match input.ids {
            Some(ids) => ids.clone(),
            None => conjunction_ids(input.policies, input.cluster_policies),
        };
        Snapshot {
            policies: Arc::new(input.policies.to_vec()),
            cluster_policies: Arc::new(input.cluster_policies.to_vec()),
            ids: Arc::new(ids),
            namespaces: Arc::new(input.namespaces.clone()),
            pods: input.pods.clone(),
            local_subnet: input.local_subnet,
            local_subnet6: input.local_subnet6,
            local: Arc::new(input.local.to_vec()),
            datapath: input.datapath,
            multitenant: input.multitenant,
            pods_listed: input.pods_listed,
            nodes: input.nodes.map(|n| Arc::new(n.clone())),
            ipv6: input.ipv6,
            ipv4: input.ipv4,
            logged: Arc::new(input.logged.clone()),
        }
    }

    /// The borrowed input.
    pub fn input(&self) -> PolicyInput<'_> {
        PolicyInput {
            policies: &self.policies,
            cluster_policies: &self.cluster_policies,
            ids: Some(&self.ids),
            namespaces: &self.namespaces,
            pods: &self.pods,
            local_subnet: self.local_subnet,
            local_subnet6: self.local_subnet6,
            local: &self.local,
            datapath: self.datapath,
            multitenant: self.multitenant,
            pods_listed: self.pods_listed,
            nodes: self.nodes.as_deref(),
            ipv6: self.ipv6,
            ipv4: self.ipv4,
            logged: &self.logged,
        }
    }

    /// Whether rows computed from `self` and from `other` may differ in every part (the
    /// families, the datapath or the logging changed): the engine then starts over.
    fn differs_everywhere(&self, other: &Snapshot) -> bool {
        self.ipv4 != other.ipv4
            || self.ipv6 != other.ipv6
            || self.datapath != other.datapath
            || self.multitenant != other.multitenant
            || self.pods_listed != other.pods_listed
            || self.local_subnet != other.local_subnet
            || self.local_subnet6 != other.local_subnet6
            || !(Arc::ptr_eq(&self.logged, &other.logged) || self.logged == other.logged)
    }
}

/// What an update changed in the shared rows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    /// Rows added or changed (an add replaces the row of the same table, priority and match).
    pub upserts: Vec<Flow>,
    /// Rows that are gone (as they were).
    pub deletes: Vec<Flow>,
    /// Whether the per-pod rows ([`PolicyEngine::targets`]) may have changed.
    pub targets_changed: bool,
    /// The update started from nothing (the first, or after [`PolicyEngine::reset`]): the
    /// upserts are every row, and rows the bridge holds from before are not among the deletes.
    pub from_nothing: bool,
}

impl Delta {
    /// Whether the shared rows stayed as they were.
    pub fn shared_unchanged(&self) -> bool {
        self.upserts.is_empty() && self.deletes.is_empty()
    }
}

/// What the contributions to one shared row add up to.
#[derive(Clone, Debug, Default)]
struct Acc {
    /// Clauses: (id, clause) → (n, count).
    conj: BTreeMap<(u32, u8), (u8, u32)>,
    /// A row of its own and how many parts give it.
    row: Option<(RowBody, u32)>,
}

impl Acc {
    fn is_empty(&self) -> bool {
        self.conj.is_empty() && self.row.is_none()
    }

    fn flow(&self, key: &RowKey) -> Option<Flow> {
        let (table, prio, m) = key;
        if let Some(((cookie, actions, goto), _)) = &self.row {
            let mut f = Flow::new(*table, *prio)
                .cookie(*cookie)
                .matching(m.clone())
                .actions(actions.clone());
            f.goto_table = *goto;
            return Some(f);
        }
        if self.conj.is_empty() {
            return None;
        }
        let actions: Vec<Action> = self
            .conj
            .iter()
            .filter_map(|((id, clause), (n, _))| Action::conjunction(*id, *clause, *n).ok())
            .collect();
        Some(
            Flow::new(*table, *prio)
                .cookie(POLICY_COOKIE)
                .matching(m.clone())
                .actions(actions),
        )
    }

    fn add(&mut self, item: Item, sign: i8) {
        match item {
            Item::Conj { id, clause, n } => {
                let e = self.conj.entry((id, clause)).or_insert((n, 0));
                if sign > 0 {
                    e.0 = n;
                    e.1 += 1;
                } else {
                    e.1 = e.1.saturating_sub(1);
                    if e.1 == 0 {
                        self.conj.remove(&(id, clause));
                    }
                }
            }
            Item::Row(cookie, actions, goto) => {
                if sign > 0 {
                    match &mut self.row {
                        Some((body, count)) => {
                            *body = (cookie, actions, goto);
                            *count += 1;
                        }
                        None => self.row = Some(((cookie, actions, goto), 1)),
                    }
                } else if let Some((_, count)) = &mut self.row {
                    *count = count.saturating_sub(1);
                    if *count == 0 {
                        self.row = None;
                    }
                }
            }
        }
    }
}

/// The NetworkPolicy rows of this node, kept by difference (see the module docs).
#[derive(Debug, Default)]
pub struct PolicyEngine {
    snap: Option<Snapshot>,
    holders: BTreeMap<Vnid, usize>,
    /// The parts of the policies that select a local pod.
    parts: BTreeMap<PartKey, Arc<RuleSpec>>,
    shared: HashMap<RowKey, Acc>,
    targets: BTreeMap<u32, Vec<Flow>>,
    rules: BTreeMap<u32, RuleRef>,
    plain: BTreeMap<(Direction, u32), Vec<RuleRef>>,
    isolated: BTreeMap<u32, Isolation>,
}

/// The shared rows' changes under way: each touched row as it was before.
#[derive(Default)]
struct Touched(HashMap<RowKey, Option<Flow>>);

impl PolicyEngine {
    /// An engine with no rows.
    pub fn new() -> PolicyEngine {
        PolicyEngine::default()
    }

    /// The snapshot the rows were computed from.
    pub fn snapshot(&self) -> Option<&Snapshot> {
        self.snap.as_ref()
    }

    /// Per local pod (by ofport) that has any: its rows.
    pub fn targets(&self) -> &BTreeMap<u32, Vec<Flow>> {
        &self.targets
    }

    /// Forgets the rows: the next update starts from nothing (after the rows it gave could
    /// not be applied).
    pub fn reset(&mut self) {
        *self = PolicyEngine::new();
    }

    /// The single-dimension allow rules per (direction, ofport).
    pub fn plain(&self) -> &BTreeMap<(Direction, u32), Vec<RuleRef>> {
        &self.plain
    }

    /// The local pods policies select, by ofport.
    pub fn isolated(&self) -> &BTreeMap<u32, Isolation> {
        &self.isolated
    }

    /// How many shared rows there are.
    pub fn shared_len(&self) -> usize {
        self.shared.len()
    }

    /// What each conjunction id stands for.
    pub fn rules(&self) -> &BTreeMap<u32, RuleRef> {
        &self.rules
    }

    /// Every row, as [`PolicyRows`] (the shared rows sorted).
    pub fn rows(&self) -> PolicyRows {
        let mut shared: Vec<Flow> = self
            .shared
            .iter()
            .filter_map(|(k, acc)| acc.flow(k))
            .collect();
        shared.sort_by_cached_key(|f| (f.table, std::cmp::Reverse(f.priority), f.to_string()));
        PolicyRows {
            targets: self.targets.clone(),
            shared,
            rules: self.rules.clone(),
            plain: self.plain.clone(),
            isolated: self.isolated.clone(),
        }
    }

    fn apply(&mut self, touched: &mut Touched, rows: Vec<(RowKey, Item)>, sign: i8) {
        for (key, item) in rows {
            let acc = match self.shared.entry(key) {
                MapEntry::Occupied(o) => {
                    if !touched.0.contains_key(o.key()) {
                        touched.0.insert(o.key().clone(), o.get().flow(o.key()));
                    }
                    o.into_mut()
                }
                MapEntry::Vacant(v) => {
                    touched.0.entry(v.key().clone()).or_insert(None);
                    v.insert(Acc::default())
                }
            };
            acc.add(item, sign);
        }
    }

    /// Adds (`sign` 1) or subtracts (-1) a whole part: its static rows and every namespace's.
    fn whole(&mut self, touched: &mut Touched, part: &RuleSpec, cx: &Ctx<'_>, sign: i8) {
        let mut rows = Vec::new();
        static_rows(part, &cx.input, &mut rows);
        for ns in namespaces_of(part, &cx.input) {
            namespace_rows(part, cx, &ns, &mut rows);
        }
        self.apply(touched, rows, sign);
    }

    /// Brings the rows to `new`'s and says which shared rows changed.
    pub fn update(&mut self, new: Snapshot) -> Delta {
        let old = self.snap.take();
        let mut touched = Touched::default();
        let new_holders = match &old {
            Some(o) if Arc::ptr_eq(&o.namespaces, &new.namespaces) => self.holders.clone(),
            _ => holders(&new.namespaces),
        };
        let old_holders = std::mem::take(&mut self.holders);
        let full = old.as_ref().is_none_or(|o| o.differs_everywhere(&new));
        let policies_same = old.as_ref().is_some_and(|o| {
            (Arc::ptr_eq(&o.policies, &new.policies) || o.policies == new.policies)
                && (Arc::ptr_eq(&o.cluster_policies, &new.cluster_policies)
                    || o.cluster_policies == new.cluster_policies)
                && (Arc::ptr_eq(&o.ids, &new.ids) || o.ids == new.ids)
        });
        // The nodes, where a cluster policy has `nodes` peers: their addresses are its peers'
        // (an Accept rule whose peers match nothing has no part, so its subjects' rows change
        // with them too).
        let nodes_same = !new
            .cluster_policies
            .iter()
            .any(ClusterPolicy::has_node_peers)
            || old.as_ref().is_some_and(|o| match (&o.nodes, &new.nodes) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
                (None, None) => true,
                _ => false,
            });
        let policies_same = policies_same && nodes_same;
        // A cluster policy's subject selects by namespace labels: which local pods it selects
        // may change with them.
        let subjects_same = new.cluster_policies.is_empty()
            || old
                .as_ref()
                .is_some_and(|o| Arc::ptr_eq(&o.namespaces, &new.namespaces));
        let local_same = old.as_ref().is_some_and(|o| o.local == new.local);
        let new_input = new.input();
        let new_cx = Ctx {
            input: new_input,
            holders: &new_holders,
        };
        let new_parts: BTreeMap<PartKey, Arc<RuleSpec>> =
            if !full && policies_same && local_same && subjects_same {
                self.parts.clone()
            } else {
                active_parts(&new_input)
            };
        let old_parts = std::mem::take(&mut self.parts);
        // A part kept has the same spec before and after: only its namespaces may change.
        let kept = |k: &PartKey, spec: &Arc<RuleSpec>| -> bool {
            !full && old_parts.get(k) == Some(spec) && new_parts.get(k) == Some(spec)
        };
        if let Some(o) = &old {
            let old_cx = Ctx {
                input: o.input(),
                holders: &old_holders,
            };
            // Parts gone or changed: out whole, as they were.
            for (k, spec) in &old_parts {
                if !kept(k, spec) {
                    self.whole(&mut touched, spec, &old_cx, -1);
                }
            }
            // Parts kept: what each changed namespace gave, out; what it gives, in.
            if !full {
                let changed = changed_namespaces(o, &old_holders, &new, &new_holders);
                for (k, spec) in &old_parts {
                    if !kept(k, spec) {
                        continue;
                    }
                    for ns in &changed {
                        let mut rows = Vec::new();
                        namespace_rows(spec, &old_cx, ns, &mut rows);
                        self.apply(&mut touched, rows, -1);
                        let mut rows = Vec::new();
                        namespace_rows(spec, &new_cx, ns, &mut rows);
                        self.apply(&mut touched, rows, 1);
                    }
                }
            }
        }
        // Parts new or changed: in whole.
        for (k, spec) in &new_parts {
            if !kept(k, spec) {
                self.whole(&mut touched, spec, &new_cx, 1);
            }
        }

        // The rows of each local pod, when what they are made of changed.
        let targets_changed = full || !policies_same || !local_same || !subjects_same;
        if targets_changed {
            self.targets.clear();
            self.plain.clear();
            self.isolated.clear();
            for t in new.local.iter() {
                let (flows, iso, plain) = pod_rows(&new_input, &new.ids, t);
                if !flows.is_empty() {
                    self.targets.insert(t.ofport, flows);
                }
                if !iso.ingress.is_empty() || !iso.egress.is_empty() {
                    self.isolated.insert(t.ofport, iso);
                }
                for (d, r) in plain {
                    self.plain.entry((d, t.ofport)).or_default().push(r);
                }
            }
            self.rules = new_parts
                .values()
                .filter(|part| part.clauses() > 1 || part.cluster.is_some())
                .map(|part| (part.id, part.rref()))
                .collect();
        }

        // What left the engine.
        let mut delta = Delta {
            targets_changed,
            from_nothing: old.is_none(),
            ..Delta::default()
        };
        for (key, before) in touched.0 {
            let after = match self.shared.get(&key) {
                Some(acc) if acc.is_empty() => {
                    self.shared.remove(&key);
                    None
                }
                Some(acc) => acc.flow(&key),
                None => None,
            };
            match (before, after) {
                (b, Some(a)) if b.as_ref() != Some(&a) => delta.upserts.push(a),
                (Some(b), None) => delta.deletes.push(b),
                _ => {}
            }
        }
        delta
            .upserts
            .sort_by_cached_key(|f| (f.table, std::cmp::Reverse(f.priority), f.to_string()));
        self.parts = new_parts;
        self.holders = new_holders;
        self.snap = Some(new);
        delta
    }
}

/// The parts of every policy that selects a local pod.
fn active_parts(input: &PolicyInput<'_>) -> BTreeMap<PartKey, Arc<RuleSpec>> {
    let ids = input.ids.expect("a snapshot has its ids");
    let mut out = BTreeMap::new();
    for p in input.policies {
        if input
            .local
            .iter()
            .any(|l| p.selects(&l.pod.namespace, &l.pod.labels))
        {
            for part in parts_of(p, ids, input.logged) {
                out.insert(part.key.clone(), Arc::new(part));
            }
        }
    }
    if input.cluster_policies.is_empty() {
        return out;
    }
    let ranks = cluster::ranks(input.cluster_policies);
    let none = NamespaceView::default();
    for cp in input.cluster_policies {
        if input.local.iter().any(|l| {
            let ns = input.namespaces.get(&l.pod.namespace).unwrap_or(&none);
            cp.selects(&ns.labels, &l.pod.labels)
        }) {
            for part in cluster::parts_of(cp, ids, &ranks, input) {
                out.insert(part.key.clone(), Arc::new(part));
            }
        }
    }
    out
}

/// The namespaces whose part in the rows may differ between `old` and `new`: their pods
/// (cluster or local) changed, or their view, or whether they hold their VNID alone.
fn changed_namespaces(
    old: &Snapshot,
    old_holders: &BTreeMap<Vnid, usize>,
    new: &Snapshot,
    new_holders: &BTreeMap<Vnid, usize>,
) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = new
        .pods
        .changed_namespaces(&old.pods)
        .into_iter()
        .map(str::to_string)
        .collect();
    if old.local != new.local {
        let by_name = |l: &[LocalPod]| -> BTreeMap<(String, String), PodView> {
            l.iter()
                .map(|l| ((l.pod.namespace.clone(), l.pod.name.clone()), l.pod.clone()))
                .collect()
        };
        let (a, b) = (by_name(&old.local), by_name(&new.local));
        for (k, v) in &a {
            if b.get(k) != Some(v) {
                out.insert(k.0.clone());
            }
        }
        for k in b.keys() {
            if !a.contains_key(k) {
                out.insert(k.0.clone());
            }
        }
    }
    if !Arc::ptr_eq(&old.namespaces, &new.namespaces) {
        let none = NamespaceView::default();
        let names: BTreeSet<&String> = old.namespaces.keys().chain(new.namespaces.keys()).collect();
        for n in names {
            let (a, b) = (
                old.namespaces.get(n).unwrap_or(&none),
                new.namespaces.get(n).unwrap_or(&none),
            );
            if a != b || own_vnid(a, old_holders) != own_vnid(b, new_holders) {
                out.insert(n.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
