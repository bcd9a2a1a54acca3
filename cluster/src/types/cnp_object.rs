//! A ClusterNetworkPolicy as a state-directory object (standalone mode): its metadata and the
//! whole object as written. The object is kept as JSON, not as a typed wire shape, because the
//! one reader of ClusterNetworkPolicies is the strict one the Kubernetes source uses
//! (`crate::cnp`): the state reads it when the object is assembled ([`ClusterPolicyObject::read`]),
//! and a policy it refuses fails closed there, as in Kubernetes mode, instead of being left out
//! (which would open what it denied).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use multitenant::cluster_policy::ClusterPolicy;
use serde::{Serialize, Serializer};

/// `policy.networking.k8s.io/v1alpha2`: the ClusterNetworkPolicy version this agent reads (the
/// newest the network-policy-api repository defines).
pub const CNP_API_VERSION: &str = "policy.networking.k8s.io/v1alpha2";

/// A ClusterNetworkPolicy file object.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterPolicyObject {
    /// Its metadata (the name keys it).
    pub metadata: ObjectMeta,
    /// The whole object as written.
    pub value: serde_json::Value,
}

// As for the other objects (`types/mod.rs`): ObjectMeta implements `PartialEq` only, and the
// comparison is structural.
impl Eq for ClusterPolicyObject {}

impl Serialize for ClusterPolicyObject {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut v = self.value.clone();
        if let Ok(meta) = serde_json::to_value(&self.metadata) {
            v["metadata"] = meta;
        }
        v.serialize(s)
    }
}

impl ClusterPolicyObject {
    /// The object of `value` (its `metadata` must be an ObjectMeta).
    pub fn new(value: serde_json::Value) -> Result<ClusterPolicyObject, serde_json::Error> {
        let metadata: ObjectMeta =
            serde_json::from_value(value.get("metadata").cloned().unwrap_or_default())?;
        Ok(ClusterPolicyObject { metadata, value })
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// The policy in effect for it: the policy it says, or, when the strict reader refuses it,
    /// its fail-closed form (its subject denied everything at its tier and priority) with why.
    pub fn read(&self) -> (Option<ClusterPolicy>, Result<(), String>) {
        match crate::cnp::read_cluster_policy(&self.value) {
            Ok(p) => (Some(p), Ok(())),
            Err(e) => (crate::cnp::fail_closed(&self.value), Err(e.to_string())),
        }
    }
}
