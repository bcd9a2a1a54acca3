//! The cluster objects in OpenShift's `network.openshift.io/v1` wire shapes, and the parser that
//! turns a YAML/JSON text (several documents, `kind: List`) into them.
//!
//! Why strings: the addresses and CIDRs stay strings exactly as the object carries them, so a bad
//! value reaches validation ([`super::validate`]) where the error can name the field and the value;
//! a typed `Ipv4Net` field would fail inside serde with a message that names neither. The typed
//! accessors (`HostSubnet::subnet_net`, ...) parse on demand and are what validation itself uses.
//!
//! Why field names are spelled out one by one: OpenShift is not consistently camelCase
//! (`hostsubnetlength`, `netname`, `netid`, `CIDR`, `hostIP`), and files copied from
//! `oc get hostsubnet -o yaml` must parse as they are. Top-level unknown fields are rejected (a
//! typo such as `hostIp` is an error, not a silently missing field). `metadata` is Kubernetes'
//! own `ObjectMeta` (k8s-openapi's type), so server-filled fields (`creationTimestamp`,
//! `managedFields`, ...) are kept and written back as they came.
//!
//! The same types are the Kubernetes resources: each implements [`kube::Resource`] (group
//! `network.openshift.io`, version `v1`; EgressNetworkPolicy namespaced, the others cluster
//! scoped) and derives [`schemars::JsonSchema`], from which `super::crd` builds the
//! CustomResourceDefinitions. The schema attributes (`pattern`, `minimum`...) are the API
//! server's first line of checks; [`super::validate`] is the complete one.
//!
//! `Namespace` and `Pod` are Kubernetes' own types; a ClusterNetworkPolicy is kept as written
//! JSON (`cnp_object`), read by the one strict reader of the kind.
//!
//! The parts: the wire types here (with their schema attributes, which generate
//! `deploy/crds.yaml`: kept in one file so the types and their JSON schema stay in step), and
//! the one parser all sources share (`parse`).

mod cnp_object;
mod node_object;
mod object;
mod patterns;
pub use cnp_object::{ClusterPolicyObject, CNP_API_VERSION};
pub use node_object::{NodeAddress, NodeObject, NodeStatus, NODE_API_VERSION};
pub use object::{ClusterObject, Kind};
pub use patterns::{
    CIDR_EITHER_PATTERN, CIDR_OR_EMPTY_PATTERN, CIDR_PATTERN, IPV4_PATTERN, IP_EITHER_PATTERN,
};

use std::borrow::Cow;

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use schemars::JsonSchema;

use serde::{Deserialize, Deserializer, Serialize};

mod compact;
mod parse;
pub use parse::{parse_objects, to_yaml, Format, ParseError};

/// The API group of every object here.
pub const GROUP: &str = "network.openshift.io";
/// The API version (within [`GROUP`]) of every object here.
pub const VERSION: &str = "v1";
/// The apiVersion of every object here.
pub const API_VERSION: &str = "network.openshift.io/v1";
/// The apiVersion OpenShift 3.x printed for these kinds; accepted on input, never written.
pub const LEGACY_API_VERSION: &str = "v1";
/// Annotations this project writes on the `network.openshift.io/v1` objects for what their
/// fields cannot hold: IPv6. OpenShift's schemas for those fields accept IPv4 only, and an
/// openshift-sdn master or node that found an IPv6 entry in `clusterNetworks` would stop, so a
/// dual-stack cluster keeps its IPv4 networks in the fields (what openshift-sdn reads) and its
/// IPv6 network here (openshift-sdn reads no annotation of this prefix, and keeps annotations
/// when it updates an object). Values are written as the agent's flags spell them.
pub mod annotations {
    /// On the `default` ClusterNetwork: the IPv6 cluster network, `CIDR,hostSubnetLength`
    /// (`fd01::/48,64`).
    pub const IPV6_CLUSTER_NETWORK: &str = "sdn.dev/ipv6-cluster-network";
    /// On the `default` ClusterNetwork: the IPv6 service network (`fd02::/112`).
    pub const IPV6_SERVICE_NETWORK: &str = "sdn.dev/ipv6-service-network";
    /// On a HostSubnet: the node's IPv6 pod subnet (`fd01:0:0:5::/64`).
    pub const IPV6_SUBNET: &str = "sdn.dev/ipv6-subnet";
    /// On a NetNamespace: its IPv6 egress IPs; on a HostSubnet: the IPv6 egress IPs the node
    /// hosts. Comma-separated (`fd00:77::100,fd00:77::101`); IPv4 ones stay in `egressIPs`.
    pub const IPV6_EGRESS_IPS: &str = "sdn.dev/ipv6-egress-ips";
    /// On a HostSubnet: IPv6 ranges the controller may place egress IPs of either tenant in
    /// (as `egressCIDRs` for IPv4), comma-separated (`fd00:77::/112`).
    pub const IPV6_EGRESS_CIDRS: &str = "sdn.dev/ipv6-egress-cidrs";
}

/// The only valid ClusterNetwork name.
pub const CLUSTER_NETWORK_NAME: &str = "default";
/// The namespace every node needs (VNID 0).
pub const DEFAULT_NAMESPACE: &str = "default";

/// Deserializes `null` as the type's default (Kubernetes prints `labels: null` at times).
fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Kubernetes' object metadata, as the API server sends it. It is k8s-openapi's type (not a
/// subset of our own) because [`kube::Resource`] hands out `&ObjectMeta` of exactly this type: the
/// kube-rs clients, watchers and reflector stores of the Kubernetes mode key objects by it.
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Metadata with just a name.
pub fn meta_named(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        ..ObjectMeta::default()
    }
}

/// The name in a metadata, `""` when unset.
pub fn meta_name(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

/// The schema of `metadata` in a CRD: an object, which the API server validates itself.
fn metadata_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "object" })
}

/// One entry of `ClusterNetwork.clusterNetworks`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClusterNetworkEntry {
    /// The network, e.g. `10.128.0.0/14`.
    #[serde(rename = "CIDR")]
    #[schemars(regex(pattern = CIDR_PATTERN))]
    pub cidr: String,
    /// Host bits of each node's subnet (9 gives a /23).
    #[serde(rename = "hostSubnetLength")]
    #[schemars(range(min = 2, max = 30), extend("format" = "int32"))]
    pub host_subnet_length: u32,
}

/// `ClusterNetwork` (named `default`): the cluster's overlay address space.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClusterNetwork {
    /// `network.openshift.io/v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// `ClusterNetwork`.
    pub kind: String,
    /// Metadata; the name must be `default`.
    #[serde(default)]
    #[schemars(schema_with = "metadata_schema")]
    pub metadata: ObjectMeta,
    /// Legacy single network: mirrors `clusterNetworks[0].CIDR` when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = CIDR_PATTERN))]
    pub network: Option<String>,
    /// Legacy single host subnet length: mirrors `clusterNetworks[0].hostSubnetLength` when set.
    #[serde(
        rename = "hostsubnetlength",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 2, max = 30), extend("format" = "int32"))]
    pub host_subnet_length: Option<u32>,
    /// The service CIDR (empty on an IPv6-only cluster).
    #[serde(rename = "serviceNetwork")]
    #[schemars(regex(pattern = CIDR_OR_EMPTY_PATTERN))]
    pub service_network: String,
    /// `redhat/openshift-ovs-subnet` or `redhat/openshift-ovs-multitenant`.
    #[serde(
        rename = "pluginName",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub plugin_name: Option<String>,
    /// The cluster networks (empty in objects of OpenShift < 3.10, which only had `network`).
    #[serde(rename = "clusterNetworks", default, deserialize_with = "null_default")]
    pub cluster_networks: Vec<ClusterNetworkEntry>,
    /// VXLAN UDP port; unset means 4789.
    #[serde(rename = "vxlanPort", default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535), extend("format" = "int32"))]
    pub vxlan_port: Option<u32>,
    /// Overlay MTU; unset means "detected".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 576, max = 65536), extend("format" = "int32"))]
    pub mtu: Option<u32>,
}

/// `HostSubnet` (one per node, named after the node): the node's pod subnet and VTEP address.
// Serialized by hand (`compact.rs`): an IPv6 subnet a cache took out of the annotations goes
// back into them. (Not in the doc comment above: that is the CRD's description.)
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostSubnet {
    /// `network.openshift.io/v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// `HostSubnet`.
    pub kind: String,
    /// Metadata; the name is the node name.
    #[serde(default)]
    #[schemars(schema_with = "metadata_schema")]
    pub metadata: ObjectMeta,
    /// The node name (must equal `metadata.name`).
    #[schemars(regex(
        pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
    ))]
    pub host: String,
    /// The node's underlay address, the VXLAN endpoint other nodes send to (IPv6 on an
    /// IPv6-only cluster).
    #[serde(rename = "hostIP")]
    #[schemars(regex(pattern = IP_EITHER_PATTERN))]
    pub host_ip: String,
    /// The node's pod subnet, e.g. `10.128.0.0/23` (empty on an IPv6-only cluster).
    #[schemars(regex(pattern = CIDR_OR_EMPTY_PATTERN))]
    pub subnet: String,
    /// Egress IPs hosted by this node.
    #[serde(
        rename = "egressIPs",
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(inner(regex(pattern = IPV4_PATTERN)))]
    pub egress_ips: Vec<String>,
    /// Egress CIDRs this node may host IPs from.
    #[serde(
        rename = "egressCIDRs",
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(inner(regex(pattern = CIDR_PATTERN)))]
    pub egress_cidrs: Vec<String>,
    /// The IPv6 subnet of [`annotations::IPV6_SUBNET`] while a cache holds it here rather than
    /// in `metadata.annotations` ([`HostSubnet::compact`]); never on the wire as a field.
    #[serde(skip)]
    #[schemars(skip)]
    pub(crate) ipv6_subnet_kept: Option<ipnet::Ipv6Net>,
}

/// `NetNamespace` (one per namespace, named after it): the namespace's VNID.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetNamespace {
    /// `network.openshift.io/v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// `NetNamespace`.
    pub kind: String,
    /// Metadata; the name is the namespace name.
    #[serde(default)]
    #[schemars(schema_with = "metadata_schema")]
    pub metadata: ObjectMeta,
    /// The namespace name (must equal `metadata.name`).
    #[serde(rename = "netname")]
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub net_name: String,
    /// The VNID, 0..=2^24-1; 0 is global (reaches and is reached by every namespace).
    #[serde(rename = "netid")]
    #[schemars(range(min = 0, max = 16777215), extend("format" = "int32"))]
    pub net_id: u32,
    /// Egress IPs of this namespace.
    #[serde(
        rename = "egressIPs",
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(inner(regex(pattern = IPV4_PATTERN)))]
    pub egress_ips: Vec<String>,
}

impl NetNamespace {
    /// Whether the NetNamespace carries `netnamespace.network.openshift.io/multicast-enabled:
    /// "true"` (any other value, or none, is off).
    pub fn multicast_enabled(&self) -> bool {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(flows::MULTICAST_ANNOTATION))
            .is_some_and(|v| v == "true")
    }
}

/// `EgressNetworkPolicy` (namespaced, at most one per namespace in OpenShift): the egress
/// firewall of the namespace's pods, rules evaluated in order, the first match wins. Unlike the
/// other kinds it has a `spec`, as in OpenShift.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EgressNetworkPolicy {
    /// `network.openshift.io/v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// `EgressNetworkPolicy`.
    pub kind: String,
    /// Metadata: name and namespace.
    #[serde(default)]
    #[schemars(schema_with = "metadata_schema")]
    pub metadata: ObjectMeta,
    /// The rules.
    pub spec: EgressNetworkPolicySpec,
}

/// `EgressNetworkPolicy.spec`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EgressNetworkPolicySpec {
    /// The rules, in order; traffic matching none is allowed.
    #[schemars(length(max = 1000))]
    pub egress: Vec<EgressNetworkPolicyRule>,
}

/// One egress rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EgressNetworkPolicyRule {
    /// `Allow` or `Deny`.
    #[serde(rename = "type")]
    pub rule_type: EgressRuleType,
    /// The destination.
    pub to: EgressNetworkPolicyPeer,
}

/// Whether a rule allows or denies its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum EgressRuleType {
    /// Traffic to the destination is allowed.
    Allow,
    /// Traffic to the destination is dropped.
    Deny,
}

/// The destination of an egress rule: exactly one of a CIDR and a DNS name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EgressNetworkPolicyPeer {
    /// An IPv4 or (dual stack) IPv6 CIDR, e.g. `0.0.0.0/0`, `192.168.10.0/24`, `2001:db8::/32`.
    #[serde(
        rename = "cidrSelector",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(regex(pattern = CIDR_EITHER_PATTERN))]
    pub cidr_selector: Option<String>,
    /// A DNS name whose addresses the rule covers, e.g. `www.example.com`.
    #[serde(rename = "dnsName", default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([A-Za-z0-9-]+\.)*[A-Za-z0-9-]+\.?$"))]
    pub dns_name: Option<String>,
}

// k8s-openapi's ObjectMeta is only PartialEq (its types may hold floats); it holds none (strings,
// maps, timestamps, JSON values), so equality is an equivalence and the objects are `Eq`.
impl Eq for ClusterNetwork {}
impl Eq for HostSubnet {}
impl Eq for NetNamespace {}
impl Eq for EgressNetworkPolicy {}

/// Implements [`kube::Resource`] for a kind of the `network.openshift.io/v1` group.
///
/// By hand rather than with kube-derive's `CustomResource`: the derive generates a new root type
/// around a spec struct (`#[kube(no_spec)]` flattens that struct onto the root but still builds the
/// root), while these types are the roots themselves, used as they are by the standalone parser,
/// [`super::ClusterState`] and the flow builders.
macro_rules! network_resource {
    ($ty:ty, $kind:literal, $plural:literal, $scope:ty) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(GROUP)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(VERSION)
            }
            fn api_version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(API_VERSION)
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }

        impl $ty {
            /// The object's name (`metadata.name`, `""` when unset).
            pub fn name(&self) -> &str {
                meta_name(&self.metadata)
            }
        }
    };
}

network_resource!(
    ClusterNetwork,
    "ClusterNetwork",
    "clusternetworks",
    ClusterResourceScope
);
network_resource!(
    HostSubnet,
    "HostSubnet",
    "hostsubnets",
    ClusterResourceScope
);
network_resource!(
    NetNamespace,
    "NetNamespace",
    "netnamespaces",
    ClusterResourceScope
);
network_resource!(
    EgressNetworkPolicy,
    "EgressNetworkPolicy",
    "egressnetworkpolicies",
    NamespaceResourceScope
);

impl ClusterNetwork {
    /// A `default` ClusterNetwork with the given entries; the legacy `network` and
    /// `hostsubnetlength` fields mirror the first entry, as OpenShift writes them.
    pub fn new(
        entries: Vec<ClusterNetworkEntry>,
        service_network: &str,
        plugin_name: Option<&str>,
        vxlan_port: Option<u32>,
        mtu: Option<u32>,
    ) -> ClusterNetwork {
        ClusterNetwork {
            api_version: API_VERSION.into(),
            kind: Kind::ClusterNetwork.as_str().into(),
            metadata: meta_named(CLUSTER_NETWORK_NAME),
            network: entries.first().map(|e| e.cidr.clone()),
            host_subnet_length: entries.first().map(|e| e.host_subnet_length),
            service_network: service_network.into(),
            plugin_name: plugin_name.map(String::from),
            cluster_networks: entries,
            vxlan_port,
            mtu,
        }
    }
}

impl HostSubnet {
    /// A HostSubnet for `node` (name and `host`).
    pub fn new(node: &str, host_ip: &str, subnet: &str) -> HostSubnet {
        HostSubnet {
            api_version: API_VERSION.into(),
            kind: Kind::HostSubnet.as_str().into(),
            metadata: meta_named(node),
            host: node.into(),
            host_ip: host_ip.into(),
            subnet: subnet.into(),
            egress_ips: Vec::new(),
            egress_cidrs: Vec::new(),
            ipv6_subnet_kept: None,
        }
    }
}

impl NetNamespace {
    /// A NetNamespace for `namespace` (name and `netname`) with VNID `net_id`.
    pub fn new(namespace: &str, net_id: u32) -> NetNamespace {
        NetNamespace {
            api_version: API_VERSION.into(),
            kind: Kind::NetNamespace.as_str().into(),
            metadata: meta_named(namespace),
            net_name: namespace.into(),
            net_id,
            egress_ips: Vec::new(),
        }
    }
}

impl EgressNetworkPolicy {
    /// The kind string.
    pub const KIND: &'static str = "EgressNetworkPolicy";

    /// An EgressNetworkPolicy `name` in `namespace` with `rules`.
    pub fn new(
        namespace: &str,
        name: &str,
        rules: Vec<EgressNetworkPolicyRule>,
    ) -> EgressNetworkPolicy {
        let mut metadata = meta_named(name);
        metadata.namespace = Some(namespace.to_string());
        EgressNetworkPolicy {
            api_version: API_VERSION.into(),
            kind: Self::KIND.into(),
            metadata,
            spec: EgressNetworkPolicySpec { egress: rules },
        }
    }

    /// The namespace (`metadata.namespace`, `""` when unset).
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }
}

impl EgressNetworkPolicyRule {
    /// A rule for a CIDR.
    pub fn cidr(rule_type: EgressRuleType, cidr: &str) -> EgressNetworkPolicyRule {
        EgressNetworkPolicyRule {
            rule_type,
            to: EgressNetworkPolicyPeer {
                cidr_selector: Some(cidr.into()),
                dns_name: None,
            },
        }
    }

    /// A rule for a DNS name.
    pub fn dns(rule_type: EgressRuleType, name: &str) -> EgressNetworkPolicyRule {
        EgressNetworkPolicyRule {
            rule_type,
            to: EgressNetworkPolicyPeer {
                cidr_selector: None,
                dns_name: Some(name.into()),
            },
        }
    }
}

#[cfg(test)]
mod tests;
