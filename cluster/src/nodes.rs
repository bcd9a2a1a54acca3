//! The Node as a node agent reads it: what ClusterNetworkPolicies' `nodes` peers select, its
//! labels and the addresses of its status ([`NodeView`]).
//!
//! [`SlimNode`] is what is decoded of each Node the watch delivers: name, resourceVersion,
//! labels and `status.addresses`. The rest (the images a node holds, its conditions, its
//! capacity, managed fields) is skipped while parsing: a Node object is tens of kilobytes and
//! the kubelet rewrites it every few minutes, so 5,000 of them are decoded often, and what is
//! kept of each is a few labels and addresses. A status update that changes neither is no
//! change of the state ([`crate::kept::Kept`] compares what it keeps).
//!
//! The watch starts once a ClusterNetworkPolicy has a `nodes` peer (`super::kube`) and runs
//! from then on: a cluster that never has one pays nothing for it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use multitenant::cluster_policy::NodeView;
use serde::Deserialize;

/// A Node, as much of it as the agent reads (see the module docs).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SlimNode {
    /// Name, resourceVersion and labels (and what [`crate::slim`] reads of every kind).
    #[serde(default, deserialize_with = "crate::slim::slim_meta")]
    pub metadata: ObjectMeta,
    /// Its status, as far as read.
    #[serde(default)]
    pub status: Option<SlimNodeStatus>,
}

/// The part of a Node's status the agent reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SlimNodeStatus {
    /// Its addresses (InternalIP, ExternalIP, Hostname, ...).
    #[serde(default)]
    pub addresses: Vec<SlimNodeAddress>,
}

/// One entry of `status.addresses` (its type is not read: every entry that is an IP address
/// counts).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SlimNodeAddress {
    /// The address (or, for `Hostname`, a name).
    #[serde(default)]
    pub address: String,
}

crate::slim::slim_resource!(SlimNode, "Node", "nodes", k8s_openapi::ClusterResourceScope);

impl SlimNode {
    /// What a `nodes` peer sees of it.
    pub fn view(&self) -> NodeView {
        NodeView::new(
            self.metadata.labels.clone().unwrap_or_default(),
            self.status
                .iter()
                .flat_map(|s| &s.addresses)
                .map(|a| a.address.as_str()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_read_as_its_labels_and_ip_addresses() {
        let n: SlimNode = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {"kubernetes.io/os": "linux"},
                         "managedFields": [{"manager": "kubelet"}]},
            "spec": {"podCIDR": "10.128.0.0/23"},
            "status": {"addresses": [
                {"type": "Hostname", "address": "n1"},
                {"type": "InternalIP", "address": "192.168.1.1"},
                {"type": "InternalIP", "address": "fd00::1"},
                {"type": "ExternalIP", "address": "203.0.113.1"}],
                "images": [{"names": ["a"], "sizeBytes": 1}],
                "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let v = n.view();
        assert_eq!(v.labels["kubernetes.io/os"], "linux");
        let a: Vec<String> = v.addresses.iter().map(ToString::to_string).collect();
        assert_eq!(a, ["192.168.1.1", "203.0.113.1", "fd00::1"]);
        assert_eq!(n.metadata.name.as_deref(), Some("n1"));
    }
}
