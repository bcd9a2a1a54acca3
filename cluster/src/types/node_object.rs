//! A Node as a state-directory object (standalone mode): what ClusterNetworkPolicies' `nodes`
//! peers select on a node with no API server to watch, its name, labels and
//! `status.addresses`.
//!
//! Why this shape: the file is a Kubernetes Node, so `kubectl get node NAME -o yaml` written to
//! the state directory is one as it is. Its top level is strict (a misspelt `metadata` or
//! `status` is refused, naming the field), an address entry is strict and its IP addresses
//! are checked; the rest of `spec` and `status` (conditions, capacity, images: written by the
//! kubelet, read by nothing here) is accepted and not kept.

use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use multitenant::cluster_policy::NodeView;
use serde::{Deserialize, Serialize};

use super::meta_name;
use crate::validate::ValidationError;

/// `v1`: the Node's API version.
pub const NODE_API_VERSION: &str = "v1";

/// A Node file object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeObject {
    /// `v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// `Node`.
    pub kind: String,
    /// Its name and labels (what a `nodes` peer's selector matches).
    pub metadata: ObjectMeta,
    /// Its spec: accepted, not read.
    #[serde(default, skip_serializing)]
    pub spec: Option<serde_json::Value>,
    /// Its status: the addresses.
    #[serde(default)]
    pub status: NodeStatus,
}

// As for the other objects (`types/mod.rs`): ObjectMeta implements `PartialEq` only, and the
// comparison is structural.
impl Eq for NodeObject {}

/// A Node's status, as far as read (its other fields are accepted and dropped).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// Its addresses.
    #[serde(default)]
    pub addresses: Vec<NodeAddress>,
}

/// One entry of `status.addresses`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeAddress {
    /// `InternalIP`, `ExternalIP`, `Hostname`, `InternalDNS` or `ExternalDNS`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The address (a name for the `Hostname` and DNS types).
    pub address: String,
}

impl NodeObject {
    /// Node `name` as `view` says it (its addresses as InternalIP ones).
    pub fn of_view(name: &str, view: &NodeView) -> NodeObject {
        let mut metadata = super::meta_named(name);
        metadata.labels = Some(view.labels.clone());
        NodeObject {
            api_version: NODE_API_VERSION.into(),
            kind: "Node".into(),
            metadata,
            spec: None,
            status: NodeStatus {
                addresses: view
                    .addresses
                    .iter()
                    .map(|a| NodeAddress {
                        kind: "InternalIP".into(),
                        address: a.to_string(),
                    })
                    .collect(),
            },
        }
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        meta_name(&self.metadata)
    }

    /// What a `nodes` peer sees of it.
    pub fn view(&self) -> NodeView {
        NodeView::new(
            self.metadata.labels.clone().unwrap_or_default(),
            self.status.addresses.iter().map(|a| a.address.as_str()),
        )
    }

    /// Checks the name and that every IP-typed address is an IP address.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let name = self.name();
        crate::validate::dns1123_subdomain(name)
            .map_err(|r| ValidationError::new("metadata.name", name, r))?;
        for (i, a) in self.status.addresses.iter().enumerate() {
            if matches!(a.kind.as_str(), "InternalIP" | "ExternalIP")
                && a.address.parse::<IpAddr>().is_err()
            {
                return Err(ValidationError::new(
                    format!("status.addresses[{i}].address"),
                    &a.address,
                    format!("expected an IP address (the entry's type is {})", a.kind),
                ));
            }
        }
        Ok(())
    }
}
