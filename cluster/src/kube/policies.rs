//! The policy kinds of the Kubernetes source: NetworkPolicies (networkpolicy mode) and
//! ClusterNetworkPolicies (both modes), each read once when its event arrives, a refused one
//! kept in its fail-closed form, and their part of the state assembled with the refusals
//! logged once per reason.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::DynamicObject;
use kube::runtime::watcher;
use multitenant::cluster_policy::ClusterPolicy;
use multitenant::policy::Policy;

use crate::{cnp, netpol};

/// A NetworkPolicy or ClusterNetworkPolicy as read: applied, or refused (with what it still
/// does, failing closed, its key, and why).
#[derive(Clone, PartialEq)]
pub(super) enum PolicyRead<P> {
    Applied(P),
    Refused(Option<P>, String, String),
}

/// Which kind [`assemble`] assembles (its key and its refusal's words).
#[derive(Clone, Copy)]
pub(super) enum Kind {
    Network,
    Cluster,
}

/// What a policy is keyed by in the state.
pub(super) trait Keyed {
    fn state_key(&self) -> String;
}

impl Keyed for Policy {
    fn state_key(&self) -> String {
        self.key()
    }
}

impl Keyed for ClusterPolicy {
    fn state_key(&self) -> String {
        self.name.clone()
    }
}

/// The policies in effect (read, and the fail-closed form of the refused) and the refused with
/// why, from what the watch kept; each refusal is logged once per reason (`logged` holds what
/// was).
pub(super) fn assemble<P: Keyed + Clone>(
    kept: &BTreeMap<String, PolicyRead<P>>,
    logged: &std::sync::Mutex<BTreeMap<String, String>>,
    kind: Kind,
) -> (BTreeMap<String, P>, BTreeMap<String, String>) {
    let mut policies = BTreeMap::new();
    let mut refused = BTreeMap::new();
    for read in kept.values() {
        match read {
            PolicyRead::Applied(p) => {
                policies.insert(p.state_key(), p.clone());
            }
            PolicyRead::Refused(closed, key, why) => {
                if let Some(p) = closed {
                    policies.insert(p.state_key(), p.clone());
                }
                refused.insert(key.clone(), why.clone());
            }
        }
    }
    let mut logged = crate::lock(logged);
    for (key, why) in &refused {
        if logged.get(key) == Some(why) {
            continue;
        }
        match kind {
            Kind::Network => {
                tracing::error!(policy = %key, error = %why, "NetworkPolicy cannot be applied: the pods it selects are isolated in the directions it names and nothing is allowed until it is fixed or deleted")
            }
            Kind::Cluster => {
                tracing::error!(cluster_policy = %key, error = %why, "ClusterNetworkPolicy cannot be applied: its subject is denied everything at its tier and priority until it is fixed or deleted")
            }
        }
    }
    logged.clone_from(&refused);
    (policies, refused)
}

/// Whether a watch failed because the API server does not serve the resource (404: its CRD
/// is not installed).
pub(super) fn not_served(e: &watcher::Error) -> bool {
    let api = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(r))
        | watcher::Error::WatchStartFailed(kube::Error::Api(r))
        | watcher::Error::WatchFailed(kube::Error::Api(r)) => r,
        watcher::Error::WatchError(r) => r,
        _ => return false,
    };
    api.code == 404
}

/// A ClusterNetworkPolicy as read: applied, or refused and failing closed (its subject denied
/// everything at its place).
pub(super) fn read_cluster_policy(o: &DynamicObject) -> PolicyRead<ClusterPolicy> {
    let v = serde_json::to_value(o).unwrap_or_default();
    match cnp::read_cluster_policy(&v) {
        Ok(p) => PolicyRead::Applied(p),
        Err(e) => PolicyRead::Refused(cnp::fail_closed(&v), e.policy.clone(), e.to_string()),
    }
}

/// A NetworkPolicy's `namespace/name`.
pub(super) fn policy_key(np: &NetworkPolicy) -> Option<String> {
    Some(format!(
        "{}/{}",
        np.metadata.namespace.as_deref().unwrap_or_default(),
        np.metadata.name.as_deref().unwrap_or_default()
    ))
}

/// A NetworkPolicy as read: applied, or refused and failing closed (what it selects is
/// isolated, nothing allowed).
pub(super) fn read_policy(np: &NetworkPolicy) -> PolicyRead<Policy> {
    match netpol::read_policy(np) {
        Ok(p) => PolicyRead::Applied(p),
        Err(e) => PolicyRead::Refused(netpol::fail_closed(np), e.policy.clone(), e.to_string()),
    }
}
