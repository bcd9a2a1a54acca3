//! The egress firewall: every tenant's EgressNetworkPolicy as its VNID's table-100 rows
//! ([`flows::egress_firewall_flows`]), kept in step with the cluster state.
//!
//! Which rows a VNID gets is openshift-sdn's decision, made the same way ([`plan`]): the policy
//! of the one namespace on the VNID; drop-all when the VNID holds several policies or is shared
//! by several namespaces (a policy is per namespace, its flows per VNID, so it would also filter
//! namespaces it does not belong to); nothing on the global VNID (refused, as openshift-sdn
//! refuses it). A policy whose namespace has no NetNamespace waits for it. Each problem is logged
//! at ERROR once when it appears, naming the policies and namespaces.
//!
//! Every VNID's rows are one flow-store owner ([`Owner::EgressFirewall`]) replaced in one
//! bundle with all the other changes of a sync, so a tenant's old and new rule sets swap
//! atomically.
//!
//! `dnsName` rules cover the addresses their name resolves to ([`EgressDns`]; on a dual-stack
//! node its AAAA addresses too, as IPv6 rows of the rule): the agent
//! asks the node's resolvers (`/etc/resolv.conf`, or `egressDNSServers`) and asks again when the
//! answer's TTL ends, bounded as openshift-sdn bounded it (a TTL under 30 s as given, up to 30
//! minutes → 30 s, longer → 30 minutes; a failed lookup keeps the last addresses and retries in
//! 30 s). A changed address set re-plans every VNID, and only the VNIDs whose rows differ (the
//! tenants using that name) change, in one bundle. Until a name first resolves its rule has no
//! rows.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use flows::{egress_cidr, egress_firewall_flows, EgressFirewall, EgressRule, Vnid};
use ipnet::IpNet;
use tokio::sync::{watch, Mutex};

use crate::bridge::flowstore::{Change, FlowStore, Owner};
use crate::bridge::seams::FlowSwitch;
use cluster::{ClusterState, EgressNetworkPolicy, EgressRuleType};

mod dns;
#[cfg(test)]
use dns::normalize_ttl;
pub(crate) use dns::EgressDns;

/// One VNID's planned rows and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VnidPlan {
    /// The rows' meaning.
    pub firewall: EgressFirewall,
    /// The policies behind it (`namespace/name`).
    pub policies: Vec<String>,
    /// Why it is drop-all, if it is.
    pub problem: Option<String>,
    /// CIDRs with host bits, read masked (`203.0.113.17/28` is `203.0.113.16/28`), for a WARN.
    pub masked: Vec<String>,
    /// What the VNID's namespaces log (audit logging).
    pub logged: flows::audit::Logged,
}

/// What every VNID's table-100 rows should say; also the problems that leave a policy without
/// rows (global VNID, no NetNamespace), by policy.
pub(crate) fn plan(
    state: &ClusterState,
    resolved: &dyn Fn(&str) -> Vec<IpNet>,
) -> (BTreeMap<Vnid, VnidPlan>, BTreeMap<String, String>) {
    let Grouped {
        by_vnid,
        refused_by_vnid,
        mut ignored,
    } = group_by_vnid(state);
    let mut out = BTreeMap::new();
    let logged = cluster::audit::logged_by_vnid(state);
    for (v, policies) in by_vnid {
        let mut names: Vec<String> = policies
            .iter()
            .map(|p| format!("{}/{}", p.namespace(), p.name()))
            .collect();
        for refused in state.refused_egress_policies.keys() {
            let namespace = refused
                .split_once('/')
                .map_or(refused.as_str(), |(ns, _)| ns);
            if state.vnid_of(namespace) == Some(v) {
                names.push(refused.clone());
            }
        }
        names.sort();
        let Some(vnid) = Vnid::new(v) else { continue };
        if vnid.is_global() {
            for n in &names {
                ignored.insert(
                    n.clone(),
                    "EgressNetworkPolicy in a global network namespace (VNID 0) is not allowed; ignoring it".into(),
                );
            }
            continue;
        }
        let problem = vnid_problem(state, v, &policies, &names, refused_by_vnid.get(&v));
        let (firewall, masked) = match &problem {
            Some(_) => (EgressFirewall::DropAll, Vec::new()),
            None => rules_of(policies[0], resolved),
        };
        out.insert(
            vnid,
            VnidPlan {
                firewall,
                policies: names,
                problem,
                masked,
                logged: logged.get(&vnid).copied().unwrap_or_default(),
            },
        );
    }
    (out, ignored)
}

/// The policies by their namespace's VNID.
struct Grouped<'a> {
    by_vnid: BTreeMap<u32, Vec<&'a EgressNetworkPolicy>>,
    /// Policies that cannot be read, by VNID.
    refused_by_vnid: BTreeMap<u32, Vec<String>>,
    /// Policies without rows, and why.
    ignored: BTreeMap<String, String>,
}

/// Groups the policies by their namespace's VNID. A policy that cannot be read fails closed:
/// its namespace's VNID drops all external traffic until the policy is fixed or deleted.
fn group_by_vnid(state: &ClusterState) -> Grouped<'_> {
    let mut g = Grouped {
        by_vnid: BTreeMap::new(),
        refused_by_vnid: BTreeMap::new(),
        ignored: BTreeMap::new(),
    };
    for (key, why) in &state.refused_egress_policies {
        let namespace = key.split_once('/').map_or(key.as_str(), |(ns, _)| ns);
        match state.net_namespaces.get(namespace) {
            Some(nn) => g
                .refused_by_vnid
                .entry(nn.net_id)
                .or_default()
                .push(format!("{key} ({why})")),
            None => {
                g.ignored.insert(
                    key.clone(),
                    format!(
                        "it cannot be applied ({why}) and namespace {namespace} has no \
                         NetNamespace yet; its external traffic is dropped once it has one"
                    ),
                );
            }
        }
    }
    for v in g.refused_by_vnid.keys() {
        g.by_vnid.entry(*v).or_default();
    }
    for (key, p) in state.egress_policies.iter() {
        if p.spec.egress.is_empty() {
            continue;
        }
        match state.net_namespaces.get(p.namespace()) {
            Some(nn) => g.by_vnid.entry(nn.net_id).or_default().push(p),
            None => {
                g.ignored.insert(
                    key.clone(),
                    format!(
                        "namespace {} has no NetNamespace (no VNID) yet; the policy applies once it has one",
                        p.namespace()
                    ),
                );
            }
        }
    }
    g
}

/// Why VNID `v` drops all its external traffic, if it does: a policy that cannot be read, a
/// shared NetNamespace, or more than one policy.
fn vnid_problem(
    state: &ClusterState,
    v: u32,
    policies: &[&EgressNetworkPolicy],
    names: &[String],
    refused: Option<&Vec<String>>,
) -> Option<String> {
    let sharing = state.namespaces_of(v);
    if let Some(refused) = refused {
        Some(format!(
            "EgressNetworkPolicy cannot be applied: {}; dropping all external traffic of {} \
             until it is fixed or deleted",
            refused.join(", "),
            sharing.join(", ")
        ))
    } else if sharing.len() > 1 {
        Some(format!(
            "EgressNetworkPolicy not allowed in a shared NetNamespace ({}); dropping all their external traffic",
            sharing.join(", ")
        ))
    } else if policies.len() > 1 {
        Some(format!(
            "multiple EgressNetworkPolicies in the same network namespace ({}) are not allowed; dropping all its external traffic",
            names.join(", ")
        ))
    } else {
        None
    }
}

/// The one policy's rules (a dnsName rule with the addresses it resolved to), and the CIDRs
/// with host bits it has, as Open vSwitch reads them.
fn rules_of(
    policy: &EgressNetworkPolicy,
    resolved: &dyn Fn(&str) -> Vec<IpNet>,
) -> (EgressFirewall, Vec<String>) {
    let masked = policy
        .spec
        .egress
        .iter()
        .filter_map(|r| r.to.cidr_selector.as_deref())
        .filter(|c| c.parse::<IpNet>().is_ok_and(|n| n.addr() != n.network()))
        .map(|c| {
            let n = c.parse::<IpNet>().map(|n| n.trunc().to_string());
            format!("{c} is read as {}", n.unwrap_or_default())
        })
        .collect();
    let rules = policy
        .spec
        .egress
        .iter()
        .map(|r| EgressRule {
            allow: r.rule_type == EgressRuleType::Allow,
            dns: r.to.cidr_selector.is_none(),
            to: match (&r.to.cidr_selector, &r.to.dns_name) {
                (Some(c), _) => match c.parse::<IpNet>() {
                    Ok(IpNet::V4(n)) => vec![egress_cidr(n).into()],
                    Ok(IpNet::V6(n)) => vec![n.trunc().into()],
                    Err(_) => Vec::new(),
                },
                (None, Some(d)) => resolved(d),
                (None, None) => Vec::new(),
            },
        })
        .collect();
    (EgressFirewall::Rules(rules), masked)
}

/// The egress firewalls of the node (see the module docs).
#[derive(Debug)]
pub(crate) struct EgressFirewalls<S> {
    store: Arc<FlowStore<S>>,
    cluster: watch::Receiver<Arc<ClusterState>>,
    installed: Mutex<Installed>,
    /// What each `dnsName` resolved to last.
    dns: std::sync::Mutex<BTreeMap<String, Vec<IpNet>>>,
    /// The resolver of the `dnsName` rules, until its task takes it.
    resolver: std::sync::Mutex<Option<EgressDns>>,
    /// The node has IPv6 pods: a tenant with rules has its IPv6 traffic dropped.
    dual_stack: bool,
}

#[derive(Debug, Default)]
struct Installed {
    plans: BTreeMap<Vnid, VnidPlan>,
    /// Problems already logged (policy or VNID → message), so each is said once.
    said: BTreeSet<String>,
}

impl<S: FlowSwitch> EgressFirewalls<S> {
    /// The firewalls of `cluster`'s policies, applied through `store`.
    pub(crate) fn new(
        store: Arc<FlowStore<S>>,
        cluster: watch::Receiver<Arc<ClusterState>>,
        dual_stack: bool,
    ) -> Self {
        EgressFirewalls {
            dual_stack,
            store,
            cluster,
            installed: Mutex::default(),
            dns: std::sync::Mutex::default(),
            resolver: std::sync::Mutex::default(),
        }
    }

    /// The addresses `name` resolved to last (none before its first answer).
    fn resolved(&self, name: &str) -> Vec<IpNet> {
        crate::lock(&self.dns)
            .get(name)
            .cloned()
            .unwrap_or_default()
    }

    /// Every `dnsName` the policies use now.
    pub(crate) fn dns_names(&self) -> BTreeSet<String> {
        self.cluster
            .borrow()
            .egress_policies
            .values()
            .flat_map(|p| p.spec.egress.iter())
            .filter_map(|r| r.to.dns_name.clone())
            .collect()
    }

    /// Records what `name` resolves to; whether that changed anything.
    pub(crate) fn set_resolved(&self, name: &str, addrs: &BTreeSet<IpAddr>) -> bool {
        let nets: Vec<IpNet> = addrs.iter().map(|a| IpNet::from(*a)).collect();
        let mut dns = crate::lock(&self.dns);
        if dns.get(name) == Some(&nets) {
            return false;
        }
        dns.insert(name.to_string(), nets);
        true
    }

    /// Forgets names no policy uses any more.
    pub(crate) fn retain_names(&self, names: &BTreeSet<String>) {
        crate::lock(&self.dns).retain(|n, _| names.contains(n));
    }

    /// The plans in effect.
    pub(crate) async fn current(&self) -> BTreeMap<Vnid, VnidPlan> {
        self.installed.lock().await.plans.clone()
    }

    /// The change that brings the store from what is installed to `plans`; with `prune`
    /// false, VNIDs no longer planned keep their rows (see [`Self::sync`]).
    fn change(
        &self,
        installed: &BTreeMap<Vnid, VnidPlan>,
        plans: &BTreeMap<Vnid, VnidPlan>,
        prune: bool,
    ) -> Change {
        let mut c = Change::new();
        for (v, p) in plans {
            if installed.get(v) != Some(p) {
                c = c.set(
                    Owner::EgressFirewall(*v),
                    flows::egress::egress_firewall_flows_logged(
                        *v,
                        &p.firewall,
                        self.dual_stack,
                        p.logged,
                    ),
                );
            }
        }
        if prune {
            for v in installed.keys().filter(|v| !plans.contains_key(v)) {
                c = c.remove(Owner::EgressFirewall(*v));
            }
        }
        c
    }

    /// Stages the current plans without applying (start-up: the store's first reconcile
    /// applies them with everything else).
    pub(crate) async fn stage(&self) -> usize {
        let mut installed = self.installed.lock().await;
        let (plans, ignored) = plan(&self.cluster.borrow().clone(), &|n| self.resolved(n));
        let change = self.change(&installed.plans, &plans, true);
        self.store.stage(change).await;
        Self::say(&mut installed.said, &plans, &ignored);
        let n = plans.len();
        installed.plans = plans;
        n
    }

    /// Brings every VNID's rows to what the cluster state says, in one bundle. With `prune`
    /// false, a VNID that lost its policy keeps its rows until the next call with `prune`: when
    /// a namespace moves to another VNID, its pods keep the old VNID until they are re-flowed,
    /// and removing the old VNID's rows before that would let them reach what their policy
    /// denies. The daemon syncs without pruning, re-flows the pods, then prunes.
    pub(crate) async fn sync(&self, prune: bool) -> Result<usize, ovs::openflow::OfError> {
        let mut installed = self.installed.lock().await;
        let (plans, ignored) = plan(&self.cluster.borrow().clone(), &|n| self.resolved(n));
        let change = self.change(&installed.plans, &plans, prune);
        if change.is_empty() {
            Self::say(&mut installed.said, &plans, &ignored);
            return Ok(0);
        }
        self.store.apply(change).await?;
        let changed = plans
            .iter()
            .filter(|(v, p)| installed.plans.get(v) != Some(p))
            .count()
            + installed
                .plans
                .keys()
                .filter(|v| !plans.contains_key(v))
                .count();
        for (v, p) in &plans {
            if installed.plans.get(v) != Some(p) {
                tracing::info!(vnid = %v, policies = %p.policies.join(","), rows = egress_firewall_flows(*v, &p.firewall, self.dual_stack).len(), "egress firewall applied");
            }
        }
        let mut kept = BTreeMap::new();
        for (v, p) in &installed.plans {
            if !plans.contains_key(v) {
                if prune {
                    tracing::info!(vnid = %v, "egress firewall removed (no policy left)");
                } else {
                    kept.insert(*v, p.clone());
                }
            }
        }
        Self::say(&mut installed.said, &plans, &ignored);
        installed.plans = plans;
        installed.plans.extend(kept);
        Ok(changed)
    }

    /// Logs each problem once, when it appears.
    fn say(
        said: &mut BTreeSet<String>,
        plans: &BTreeMap<Vnid, VnidPlan>,
        ignored: &BTreeMap<String, String>,
    ) {
        let mut now = BTreeSet::new();
        for (v, p) in plans {
            if let Some(problem) = &p.problem {
                let key = format!("{v}: {problem}");
                if !said.contains(&key) {
                    tracing::error!(vnid = %v, policies = %p.policies.join(","), "{problem}");
                }
                now.insert(key);
            }
            for m in &p.masked {
                let key = format!("{v}: masked {m}");
                if !said.contains(&key) {
                    tracing::warn!(vnid = %v, policies = %p.policies.join(","), "EgressNetworkPolicy cidrSelector has host bits set: {m}, as Open vSwitch reads it");
                }
                now.insert(key);
            }
        }
        for (policy, why) in ignored {
            let key = format!("{policy}: {why}");
            if !said.contains(&key) {
                tracing::error!(policy = %policy, "EgressNetworkPolicy not applied: {why}");
            }
            now.insert(key);
        }
        *said = now;
    }
}

impl<S: FlowSwitch + 'static> EgressFirewalls<S> {
    /// The feature, where namespaces have VNIDs (not in subnet mode), with the resolver of its
    /// `dnsName` rules (`egressDNSServers`, else the node's `/etc/resolv.conf`). A resolver
    /// that cannot be set up is logged: those rules then have no rows (they allow nothing).
    pub(crate) fn feature(ctx: &super::Context<S>) -> Option<Arc<Self>> {
        if !ctx.node.mode.has_vnids() {
            return None;
        }
        let firewalls = EgressFirewalls::new(
            ctx.store.clone(),
            ctx.state.clone(),
            ctx.node.ipv6.is_some(),
        );
        match EgressDns::new(&ctx.config.egress_dns_servers, ctx.node.ipv6.is_some()) {
            Ok(dns) => *crate::lock(&firewalls.resolver) = Some(dns),
            Err(e) => {
                tracing::error!(error = %e, "egress firewall dnsName rules cannot resolve (they have no rows); fix the resolver configuration or set egressDNSServers");
            }
        }
        Some(Arc::new(firewalls))
    }
}

/// The tables egress firewalls write.
pub(crate) const FIREWALL_TABLES: &[flows::Table] = &[flows::Table::EgressFirewall];

/// How long start-up waits for the `dnsName` rules' first answers.
const SEED_DNS_WITHIN: Duration = Duration::from_secs(2);

impl<S: FlowSwitch + 'static> super::NodeFeature for EgressFirewalls<S> {
    fn name(&self) -> &'static str {
        "egress-firewall"
    }

    fn tables(&self) -> &'static [flows::Table] {
        FIREWALL_TABLES
    }

    /// dnsName rules: their names resolved before the first reconcile (at most 2 s), so a
    /// restart keeps their rows on the bridge.
    fn stage(&self) -> futures::future::BoxFuture<'_, Result<usize, super::FeatureError>> {
        Box::pin(async move {
            let dns = crate::lock(&self.resolver).take();
            if let Some(dns) = dns {
                self.seed_dns(&dns, SEED_DNS_WITHIN).await;
                *crate::lock(&self.resolver) = Some(dns);
            }
            Ok(EgressFirewalls::stage(self).await)
        })
    }

    /// New and changed VNIDs' rows before pods move to them; rows of VNIDs that lost their
    /// policy only after the pods left them (see [`EgressFirewalls::sync`]).
    fn sync(
        &self,
        phase: super::Phase,
        _: super::Reason,
    ) -> futures::future::BoxFuture<'_, Result<(), super::FeatureError>> {
        Box::pin(async move {
            if phase == (super::Phase::After { moved: false }) {
                return Ok(());
            }
            EgressFirewalls::sync(self, phase.prunes()).await?;
            Ok(())
        })
    }

    fn background(self: Arc<Self>) -> Vec<futures::future::BoxFuture<'static, ()>> {
        match crate::lock(&self.resolver).take() {
            Some(dns) => {
                tracing::info!(servers = %dns.source(), "egress firewall dnsName rules resolve through these DNS servers");
                vec![Box::pin(self.clone().follow_dns(dns))]
            }
            None => Vec::new(),
        }
    }

    fn observe(&self) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(async move {
            let m = crate::telemetry::metrics::metrics();
            let rows = self
                .store
                .rows_owned(|o| matches!(o, Owner::EgressFirewall(_)))
                .await;
            m.egress_firewall_rules.set(rows as i64);
            let plans = self.current().await;
            let drop_all = plans
                .values()
                .filter(|p| p.firewall == flows::EgressFirewall::DropAll)
                .count();
            m.egress_firewalls
                .with_label_values(&["drop_all"])
                .set(drop_all as i64);
            m.egress_firewalls
                .with_label_values(&["rules"])
                .set((plans.len() - drop_all) as i64);
        })
    }

    fn status(&self) -> futures::future::BoxFuture<'_, String> {
        Box::pin(async move {
            let plans = self.current().await;
            let dropped = plans
                .values()
                .filter(|p| p.firewall == flows::EgressFirewall::DropAll)
                .count();
            match plans.len() {
                0 => "no tenant has an EgressNetworkPolicy".to_string(),
                n if dropped > 0 => format!(
                    "{n} tenant(s) with an egress firewall, {dropped} dropping all egress (a policy could not be applied: see the log)"
                ),
                n => format!("{n} tenant(s) with an egress firewall"),
            }
        })
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cluster::{EgressNetworkPolicyRule as Rule, NetNamespace};

    fn state(nns: &[(&str, u32)], policies: &[(&str, &str, Vec<Rule>)]) -> ClusterState {
        let mut s = ClusterState::default();
        for (n, id) in nns {
            s.insert(NetNamespace::new(n, *id).into());
        }
        for (ns, name, rules) in policies {
            s.insert(EgressNetworkPolicy::new(ns, name, rules.clone()).into());
        }
        s
    }

    #[test]
    fn ttls_are_bounded_as_openshift_sdn_bounded_them() {
        let s = Duration::from_secs;
        assert_eq!(normalize_ttl(s(0)), s(1));
        assert_eq!(normalize_ttl(s(5)), s(5));
        assert_eq!(normalize_ttl(s(29)), s(29));
        assert_eq!(normalize_ttl(s(30)), s(30));
        assert_eq!(normalize_ttl(s(600)), s(30));
        assert_eq!(normalize_ttl(s(1800)), s(1800));
        assert_eq!(normalize_ttl(s(86400)), s(1800));
    }

    #[test]
    fn openshift_sdn_decisions() {
        let deny_all = || vec![Rule::cidr(EgressRuleType::Deny, "0.0.0.0/0")];
        let none = |_: &str| Vec::new();
        // One policy, one namespace: its rules.
        let (p, ignored) = plan(&state(&[("a", 10)], &[("a", "p", deny_all())]), &none);
        let v10 = Vnid::new(10).unwrap();
        assert_eq!(p[&v10].problem, None);
        assert!(matches!(p[&v10].firewall, EgressFirewall::Rules(ref r) if r.len() == 1));
        assert!(ignored.is_empty());
        // Two policies on a VNID: drop all.
        let s = state(
            &[("a", 10)],
            &[("a", "p", deny_all()), ("a", "q", deny_all())],
        );
        let (p, _) = plan(&s, &none);
        assert_eq!(p[&v10].firewall, EgressFirewall::DropAll);
        assert!(p[&v10].problem.as_ref().unwrap().contains("a/p, a/q"));
        // A shared VNID: drop all.
        let s = state(&[("a", 10), ("b", 10)], &[("a", "p", deny_all())]);
        let (p, _) = plan(&s, &none);
        assert_eq!(p[&v10].firewall, EgressFirewall::DropAll);
        assert!(p[&v10]
            .problem
            .as_ref()
            .unwrap()
            .contains("shared NetNamespace (a, b)"));
        // Global: no rows, said.
        let (p, ignored) = plan(&state(&[("g", 0)], &[("g", "p", deny_all())]), &none);
        assert!(p.is_empty());
        assert!(ignored["g/p"].contains("global"));
        // No NetNamespace yet: waits.
        let (p, ignored) = plan(&state(&[], &[("x", "p", deny_all())]), &none);
        assert!(p.is_empty());
        assert!(ignored["x/p"].contains("no NetNamespace"));
        // An empty policy is no policy.
        let (p, _) = plan(&state(&[("a", 10)], &[("a", "p", vec![])]), &none);
        assert!(p.is_empty());
        // DNS names take the resolved addresses.
        let s = state(
            &[("a", 10)],
            &[(
                "a",
                "p",
                vec![Rule::dns(EgressRuleType::Allow, "db.example.com")],
            )],
        );
        let (p, _) = plan(&s, &|n: &str| {
            assert_eq!(n, "db.example.com");
            vec!["198.51.100.7/32".parse().unwrap()]
        });
        assert_eq!(
            p[&v10].firewall,
            EgressFirewall::Rules(vec![EgressRule {
                allow: true,
                dns: true,
                to: vec!["198.51.100.7/32".parse().unwrap()]
            }])
        );
    }
}
