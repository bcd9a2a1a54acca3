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
//! atomically. `dnsName` rules cover the addresses their name resolves to; until it resolves they
//! have no rows.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use flows::{egress_cidr, egress_firewall_flows, EgressFirewall, EgressRule, Vnid};
use ipnet::Ipv4Net;
use tokio::sync::{watch, Mutex};

use crate::cluster::{ClusterState, EgressNetworkPolicy, EgressRuleType};
use crate::flowstore::{Change, FlowStore, Owner};
use crate::seams::FlowSwitch;

/// One VNID's planned rows and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VnidPlan {
    /// The rows' meaning.
    pub firewall: EgressFirewall,
    /// The policies behind it (`namespace/name`).
    pub policies: Vec<String>,
    /// Why it is drop-all, if it is.
    pub problem: Option<String>,
}

/// What every VNID's table-100 rows should say; also the problems that leave a policy without
/// rows (global VNID, no NetNamespace), by policy.
pub fn plan(
    state: &ClusterState,
    resolved: &dyn Fn(&str) -> Vec<Ipv4Net>,
) -> (BTreeMap<Vnid, VnidPlan>, BTreeMap<String, String>) {
    let mut by_vnid: BTreeMap<u32, Vec<&EgressNetworkPolicy>> = BTreeMap::new();
    let mut ignored = BTreeMap::new();
    for (key, p) in &state.egress_policies {
        if p.spec.egress.is_empty() {
            continue;
        }
        match state.net_namespaces.get(p.namespace()) {
            Some(nn) => by_vnid.entry(nn.net_id).or_default().push(p),
            None => {
                ignored.insert(
                    key.clone(),
                    format!(
                        "namespace {} has no NetNamespace (no VNID) yet; the policy applies once it has one",
                        p.namespace()
                    ),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    for (v, policies) in by_vnid {
        let names: Vec<String> = policies
            .iter()
            .map(|p| format!("{}/{}", p.namespace(), p.name()))
            .collect();
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
        let sharing: Vec<&str> = state
            .net_namespaces
            .values()
            .filter(|n| n.net_id == v)
            .map(|n| n.net_name.as_str())
            .collect();
        let problem = if sharing.len() > 1 {
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
        };
        let firewall = match &problem {
            Some(_) => EgressFirewall::DropAll,
            None => EgressFirewall::Rules(
                policies[0]
                    .spec
                    .egress
                    .iter()
                    .map(|r| EgressRule {
                        allow: r.rule_type == EgressRuleType::Allow,
                        to: match (&r.to.cidr_selector, &r.to.dns_name) {
                            (Some(c), _) => c
                                .parse::<Ipv4Net>()
                                .map(|n| vec![egress_cidr(n)])
                                .unwrap_or_default(),
                            (None, Some(d)) => resolved(d),
                            (None, None) => Vec::new(),
                        },
                    })
                    .collect(),
            ),
        };
        out.insert(
            vnid,
            VnidPlan {
                firewall,
                policies: names,
                problem,
            },
        );
    }
    (out, ignored)
}

/// The egress firewalls of the node (see the module docs).
#[derive(Debug)]
pub struct EgressFirewalls<S> {
    store: Arc<FlowStore<S>>,
    cluster: watch::Receiver<Arc<ClusterState>>,
    installed: Mutex<Installed>,
}

#[derive(Debug, Default)]
struct Installed {
    plans: BTreeMap<Vnid, VnidPlan>,
    /// Problems already logged (policy or VNID → message), so each is said once.
    said: BTreeSet<String>,
}

impl<S: FlowSwitch> EgressFirewalls<S> {
    /// The firewalls of `cluster`'s policies, applied through `store`.
    pub fn new(store: Arc<FlowStore<S>>, cluster: watch::Receiver<Arc<ClusterState>>) -> Self {
        EgressFirewalls {
            store,
            cluster,
            installed: Mutex::default(),
        }
    }

    /// The plans in effect.
    pub async fn current(&self) -> BTreeMap<Vnid, VnidPlan> {
        self.installed.lock().await.plans.clone()
    }

    /// The change that brings the store from what is installed to `plans`; with `prune`
    /// false, VNIDs no longer planned keep their rows (see [`Self::sync`]).
    fn change(
        installed: &BTreeMap<Vnid, VnidPlan>,
        plans: &BTreeMap<Vnid, VnidPlan>,
        prune: bool,
    ) -> Change {
        let mut c = Change::new();
        for (v, p) in plans {
            if installed.get(v) != Some(p) {
                c = c.set(
                    Owner::EgressFirewall(*v),
                    egress_firewall_flows(*v, &p.firewall),
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
    pub async fn stage(&self) -> usize {
        let mut installed = self.installed.lock().await;
        let (plans, ignored) = plan(&self.cluster.borrow().clone(), &|_| Vec::new());
        let change = Self::change(&installed.plans, &plans, true);
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
    pub async fn sync(&self, prune: bool) -> Result<usize, ovs::openflow::OfError> {
        let mut installed = self.installed.lock().await;
        let (plans, ignored) = plan(&self.cluster.borrow().clone(), &|_| Vec::new());
        let change = Self::change(&installed.plans, &plans, prune);
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
                tracing::info!(vnid = %v, policies = %p.policies.join(","), rows = egress_firewall_flows(*v, &p.firewall).len(), "egress firewall applied");
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{EgressNetworkPolicyRule as Rule, NetNamespace};

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
                to: vec!["198.51.100.7/32".parse().unwrap()]
            }])
        );
    }
}
