//! The kinds the fake API server serves, and the discovery documents built from them.
//!
//! A real kube-apiserver learns its resources from compiled-in types and CRDs; the fake has a
//! fixed table ([`Registry::default`]): the OpenShift SDN kinds (`network.openshift.io/v1`
//! ClusterNetwork, HostSubnet, NetNamespace, EgressNetworkPolicy), core/v1 Nodes, Namespaces,
//! Pods, ConfigMaps, Events, `events.k8s.io/v1` Events, `coordination.k8s.io/v1` Leases and
//! `networking.k8s.io/v1` NetworkPolicies. Tests
//! may [`Registry::register`] more. Each entry also says which field selectors the real server
//! accepts for it, so code that would be refused by a real cluster (`host=node1` on HostSubnets)
//! is refused here too.
//!
//! Limits: one version per group; no short names beyond a few; no aggregated (v2) discovery.

use serde_json::{json, Value};

/// One resource type (a group/version/plural with its kind).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: String,
    /// Version, e.g. `v1`.
    pub version: String,
    /// Plural resource name used in paths, e.g. `hostsubnets`.
    pub plural: String,
    /// Singular lowercase name, e.g. `hostsubnet`.
    pub singular: String,
    /// Kind, e.g. `HostSubnet`.
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Whether the kind has a `/status` subresource: writes to the main resource then keep the
    /// stored `status`, writes to `/status` change only `status`.
    pub status_subresource: bool,
    /// Field selector labels accepted besides `metadata.name` and `metadata.namespace`.
    pub fields: Vec<String>,
    /// Short names for discovery.
    pub short_names: Vec<String>,
}

impl ResourceType {
    /// A resource type without a status subresource, extra selectable fields or short names.
    pub fn new(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        ResourceType {
            group: group.to_string(),
            version: version.to_string(),
            plural: plural.to_string(),
            singular: kind.to_lowercase(),
            kind: kind.to_string(),
            namespaced,
            status_subresource: false,
            fields: Vec::new(),
            short_names: Vec::new(),
        }
    }

    /// Marks the kind as having a `/status` subresource.
    #[must_use]
    pub fn with_status(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    /// Adds selectable fields (field selector labels).
    #[must_use]
    pub fn with_fields(mut self, fields: &[&str]) -> Self {
        self.fields.extend(fields.iter().map(|f| f.to_string()));
        self
    }

    /// Adds discovery short names.
    #[must_use]
    pub fn with_short_names(mut self, names: &[&str]) -> Self {
        self.short_names.extend(names.iter().map(|f| f.to_string()));
        self
    }

    /// `apiVersion` of objects: `v1` for core, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The name used in messages, as kube-apiserver prints it: `pods`, `hostsubnets.network.openshift.io`.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Whether `label` is a field selector label this kind accepts.
    pub fn selectable(&self, label: &str) -> bool {
        label == "metadata.name"
            || (label == "metadata.namespace")
            || self.fields.iter().any(|f| f == label)
    }
}

/// The set of served resource types.
#[derive(Debug, Clone)]
pub struct Registry {
    types: Vec<ResourceType>,
}

/// The OpenShift SDN group.
pub const NETWORK_GROUP: &str = "network.openshift.io";

/// The group of CustomResourceDefinitions.
pub const CRD_GROUP: &str = "apiextensions.k8s.io";

impl Default for Registry {
    fn default() -> Self {
        let n = NETWORK_GROUP;
        let types = vec![
            ResourceType::new("", "v1", "nodes", "Node", false)
                .with_status()
                .with_fields(&["spec.unschedulable"])
                .with_short_names(&["no"]),
            ResourceType::new("", "v1", "namespaces", "Namespace", false)
                .with_status()
                .with_fields(&["status.phase"])
                .with_short_names(&["ns"]),
            ResourceType::new("", "v1", "pods", "Pod", true)
                .with_status()
                .with_fields(&[
                    "spec.nodeName",
                    "spec.restartPolicy",
                    "spec.schedulerName",
                    "spec.serviceAccountName",
                    "spec.hostNetwork",
                    "status.phase",
                    "status.podIP",
                    "status.nominatedNodeName",
                ])
                .with_short_names(&["po"]),
            ResourceType::new("", "v1", "configmaps", "ConfigMap", true).with_short_names(&["cm"]),
            ResourceType::new("", "v1", "events", "Event", true).with_fields(&[
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ]),
            ResourceType::new("events.k8s.io", "v1", "events", "Event", true),
            ResourceType::new("coordination.k8s.io", "v1", "leases", "Lease", true),
            // A CustomResourceDefinition written through the API serves its kind
            // ([`Registry::serve_crds`]).
            ResourceType::new(
                CRD_GROUP,
                "v1",
                "customresourcedefinitions",
                "CustomResourceDefinition",
                false,
            )
            .with_status()
            .with_short_names(&["crd", "crds"]),
            ResourceType::new(
                "networking.k8s.io",
                "v1",
                "networkpolicies",
                "NetworkPolicy",
                true,
            )
            .with_short_names(&["netpol"]),
            // The network-policy-api CRD (deploy/crd-clusternetworkpolicies.yaml) installed.
            ResourceType::new(
                "policy.networking.k8s.io",
                "v1alpha2",
                "clusternetworkpolicies",
                "ClusterNetworkPolicy",
                false,
            )
            .with_status()
            .with_short_names(&["cnp"]),
            ResourceType::new(n, "v1", "clusternetworks", "ClusterNetwork", false),
            ResourceType::new(n, "v1", "hostsubnets", "HostSubnet", false),
            ResourceType::new(n, "v1", "netnamespaces", "NetNamespace", false)
                .with_short_names(&["netns"]),
            ResourceType::new(
                n,
                "v1",
                "egressnetworkpolicies",
                "EgressNetworkPolicy",
                true,
            ),
        ];
        Registry { types }
    }
}

impl Registry {
    /// Adds (or replaces, by group/version/plural) a resource type.
    pub fn register(&mut self, ty: ResourceType) {
        self.types
            .retain(|t| !(t.group == ty.group && t.version == ty.version && t.plural == ty.plural));
        self.types.push(ty);
    }

    /// Serves what the stored CustomResourceDefinitions define, as an API server does: each
    /// served version of each (`crds`: every CRD object), and no longer what `before` (the
    /// types the last call added) defined and they do not. Returns the types now added.
    pub fn serve_crds(&mut self, crds: &[Value], before: &[ResourceType]) -> Vec<ResourceType> {
        let mut now = Vec::new();
        for crd in crds {
            let spec = &crd["spec"];
            let (Some(group), Some(plural), Some(kind)) = (
                spec["group"].as_str(),
                spec["names"]["plural"].as_str(),
                spec["names"]["kind"].as_str(),
            ) else {
                continue;
            };
            let namespaced = spec["scope"] == "Namespaced";
            let short: Vec<&str> = spec["names"]["shortNames"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            for v in spec["versions"].as_array().into_iter().flatten() {
                let Some(version) = v["name"].as_str().filter(|_| v["served"] == true) else {
                    continue;
                };
                let mut ty = ResourceType::new(group, version, plural, kind, namespaced)
                    .with_short_names(&short);
                if v["subresources"].get("status").is_some() {
                    ty = ty.with_status();
                }
                now.push(ty);
            }
        }
        for gone in before {
            if !now.iter().any(|t| {
                t.group == gone.group && t.version == gone.version && t.plural == gone.plural
            }) {
                self.types.retain(|t| {
                    !(t.group == gone.group && t.version == gone.version && t.plural == gone.plural)
                });
            }
        }
        for ty in &now {
            self.register(ty.clone());
        }
        now
    }

    /// Removes every version of a resource type.
    pub fn unregister(&mut self, group: &str, plural: &str) {
        self.types
            .retain(|t| !(t.group == group && t.plural == plural));
    }

    /// The type served at `group/version/plural`.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.types
            .iter()
            .find(|t| t.group == group && t.version == version && t.plural == plural)
    }

    /// The type of objects with this `apiVersion` and `kind`.
    pub fn find_kind(&self, api_version: &str, kind: &str) -> Option<&ResourceType> {
        self.types
            .iter()
            .find(|t| t.api_version() == api_version && t.kind == kind)
    }

    /// The type with this group and plural (any version).
    pub fn find_plural(&self, group: &str, plural: &str) -> Option<&ResourceType> {
        self.types
            .iter()
            .find(|t| t.group == group && t.plural == plural)
    }

    /// All types with this plural, in any group.
    pub fn by_plural<'a>(&'a self, plural: &'a str) -> impl Iterator<Item = &'a ResourceType> {
        self.types.iter().filter(move |t| t.plural == plural)
    }

    /// Whether any type is served under `group/version`.
    pub fn has_group_version(&self, group: &str, version: &str) -> bool {
        self.types
            .iter()
            .any(|t| t.group == group && t.version == version)
    }

    /// Groups other than core, in registration order, each with its versions.
    fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for t in self.types.iter().filter(|t| !t.group.is_empty()) {
            match out.iter_mut().find(|(g, _)| *g == t.group) {
                Some((_, versions)) => {
                    if !versions.contains(&t.version) {
                        versions.push(t.version.clone());
                    }
                }
                None => out.push((t.group.clone(), vec![t.version.clone()])),
            }
        }
        out
    }

    /// `GET /api`: `APIVersions`.
    pub fn api_versions(&self, server: &str) -> Value {
        json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}],
        })
    }

    fn group_doc(group: &str, versions: &[String]) -> Value {
        let versions: Vec<Value> = versions
            .iter()
            .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
            .collect();
        json!({
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": versions.clone(),
            "preferredVersion": versions.first().cloned().unwrap_or(Value::Null),
        })
    }

    /// `GET /apis`: `APIGroupList`.
    pub fn group_list(&self) -> Value {
        let groups: Vec<Value> = self
            .groups()
            .iter()
            .map(|(g, vs)| {
                let mut doc = Self::group_doc(g, vs);
                if let Some(o) = doc.as_object_mut() {
                    o.remove("kind");
                    o.remove("apiVersion");
                }
                doc
            })
            .collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    }

    /// `GET /apis/{group}`: `APIGroup`, if the group is served.
    pub fn group(&self, group: &str) -> Option<Value> {
        self.groups()
            .into_iter()
            .find(|(g, _)| g == group)
            .map(|(g, vs)| Self::group_doc(&g, &vs))
    }

    /// `GET /api/v1` or `/apis/{group}/{version}`: `APIResourceList`, if served.
    pub fn resource_list(&self, group: &str, version: &str) -> Option<Value> {
        if !self.has_group_version(group, version) {
            return None;
        }
        let verbs = json!([
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch"
        ]);
        let mut resources = Vec::new();
        for t in self
            .types
            .iter()
            .filter(|t| t.group == group && t.version == version)
        {
            let mut r = json!({
                "name": t.plural,
                "singularName": t.singular,
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": verbs,
            });
            if !t.short_names.is_empty() {
                r["shortNames"] = json!(t.short_names);
            }
            resources.push(r);
            if t.status_subresource {
                resources.push(json!({
                    "name": format!("{}/status", t.plural),
                    "singularName": "",
                    "namespaced": t.namespaced,
                    "kind": t.kind,
                    "verbs": ["get", "patch", "update"],
                }));
            }
        }
        let gv = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        Some(json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": gv,
            "resources": resources,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_lists_the_sdn_group_and_status_subresources() {
        let r = Registry::default();
        let groups = r.group_list();
        let names: Vec<&str> = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&NETWORK_GROUP), "{names:?}");
        let core = r.resource_list("", "v1").unwrap();
        let res: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert!(res.contains(&"pods/status"), "{res:?}");
        assert!(r.resource_list(NETWORK_GROUP, "v2").is_none());
        assert_eq!(
            r.find(NETWORK_GROUP, "v1", "hostsubnets")
                .unwrap()
                .qualified(),
            "hostsubnets.network.openshift.io"
        );
    }
}
