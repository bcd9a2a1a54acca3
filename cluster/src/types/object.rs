//! The kinds of cluster objects and [`ClusterObject`], any one of them: what the sources,
//! the loader and the writer pass around. Its own file so that a kind is added in one place
//! (its variant, its name, its summary) beside the types of `super`.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use super::{
    meta_name, meta_named, ClusterNetwork, ClusterPolicyObject, EgressNetworkPolicy, HostSubnet,
    NetNamespace, NodeObject,
};

/// The kinds this module knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `ClusterNetwork`.
    ClusterNetwork,
    /// `HostSubnet`.
    HostSubnet,
    /// `NetNamespace`.
    NetNamespace,
    /// `EgressNetworkPolicy` (namespaced: its key is `namespace/name`).
    EgressNetworkPolicy,
    /// `ClusterNetworkPolicy` (`policy.networking.k8s.io`, standalone files).
    ClusterNetworkPolicy,
    /// `Node` (`v1`, standalone files: what `nodes` peers select).
    Node,
}

impl Kind {
    /// The `kind` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ClusterNetwork => "ClusterNetwork",
            Kind::HostSubnet => "HostSubnet",
            Kind::NetNamespace => "NetNamespace",
            Kind::EgressNetworkPolicy => "EgressNetworkPolicy",
            Kind::ClusterNetworkPolicy => "ClusterNetworkPolicy",
            Kind::Node => "Node",
        }
    }

    /// Parses a `kind` string.
    pub fn from_kind(s: &str) -> Option<Kind> {
        match s {
            "ClusterNetwork" => Some(Kind::ClusterNetwork),
            "HostSubnet" => Some(Kind::HostSubnet),
            "NetNamespace" => Some(Kind::NetNamespace),
            "EgressNetworkPolicy" => Some(Kind::EgressNetworkPolicy),
            "ClusterNetworkPolicy" => Some(Kind::ClusterNetworkPolicy),
            "Node" => Some(Kind::Node),
            _ => None,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Any one of the cluster objects; serializes as the object itself (its `kind` field tells).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ClusterObject {
    /// A ClusterNetwork.
    ClusterNetwork(ClusterNetwork),
    /// A HostSubnet.
    HostSubnet(HostSubnet),
    /// A NetNamespace.
    NetNamespace(NetNamespace),
    /// An EgressNetworkPolicy.
    EgressNetworkPolicy(EgressNetworkPolicy),
    /// A ClusterNetworkPolicy.
    ClusterNetworkPolicy(ClusterPolicyObject),
    /// A Node.
    Node(NodeObject),
}

impl ClusterObject {
    /// The object's kind.
    pub fn kind(&self) -> Kind {
        match self {
            ClusterObject::ClusterNetwork(_) => Kind::ClusterNetwork,
            ClusterObject::HostSubnet(_) => Kind::HostSubnet,
            ClusterObject::NetNamespace(_) => Kind::NetNamespace,
            ClusterObject::EgressNetworkPolicy(_) => Kind::EgressNetworkPolicy,
            ClusterObject::ClusterNetworkPolicy(_) => Kind::ClusterNetworkPolicy,
            ClusterObject::Node(_) => Kind::Node,
        }
    }

    /// The object's metadata.
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            ClusterObject::ClusterNetwork(o) => &o.metadata,
            ClusterObject::HostSubnet(o) => &o.metadata,
            ClusterObject::NetNamespace(o) => &o.metadata,
            ClusterObject::EgressNetworkPolicy(o) => &o.metadata,
            ClusterObject::ClusterNetworkPolicy(o) => &o.metadata,
            ClusterObject::Node(o) => &o.metadata,
        }
    }

    /// Mutable metadata (e.g. to set a uid before writing).
    pub fn metadata_mut(&mut self) -> &mut ObjectMeta {
        match self {
            ClusterObject::ClusterNetwork(o) => &mut o.metadata,
            ClusterObject::HostSubnet(o) => &mut o.metadata,
            ClusterObject::NetNamespace(o) => &mut o.metadata,
            ClusterObject::EgressNetworkPolicy(o) => &mut o.metadata,
            ClusterObject::ClusterNetworkPolicy(o) => &mut o.metadata,
            ClusterObject::Node(o) => &mut o.metadata,
        }
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        meta_name(self.metadata())
    }

    /// What the object says, in a few words, for messages (`netid 11`; `subnet 10.128.2.0/23
    /// on 192.0.2.2`).
    pub fn summary(&self) -> String {
        match self {
            ClusterObject::ClusterNetwork(c) => {
                let nets: Vec<String> = c
                    .cluster_networks
                    .iter()
                    .map(|e| format!("{}/{}", e.cidr, e.host_subnet_length))
                    .collect();
                format!(
                    "clusterNetworks {}, serviceNetwork {}",
                    nets.join(","),
                    c.service_network
                )
            }
            ClusterObject::HostSubnet(h) => format!("subnet {} on {}", h.subnet, h.host_ip),
            ClusterObject::NetNamespace(n) => format!("netid {}", n.net_id),
            ClusterObject::EgressNetworkPolicy(e) => format!("{} rule(s)", e.spec.egress.len()),
            ClusterObject::ClusterNetworkPolicy(c) => format!(
                "tier {}, priority {}",
                c.value["spec"]["tier"], c.value["spec"]["priority"]
            ),
            ClusterObject::Node(n) => {
                let a: Vec<&str> = n
                    .status
                    .addresses
                    .iter()
                    .map(|a| a.address.as_str())
                    .collect();
                format!("addresses {}", a.join(","))
            }
        }
    }

    /// The object's key among objects of its kind: its name, and `namespace/name` for the
    /// namespaced EgressNetworkPolicy.
    pub fn key(&self) -> String {
        match self {
            ClusterObject::EgressNetworkPolicy(e) => format!("{}/{}", e.namespace(), e.name()),
            _ => self.name().to_string(),
        }
    }

    /// Whether two objects say the same thing (metadata such as uid aside).
    pub fn same_content(&self, other: &ClusterObject) -> bool {
        let strip = |o: &ClusterObject| {
            let mut o = o.clone();
            let name = o.name().to_string();
            let namespace = o.metadata().namespace.clone();
            // A Node's labels are what `nodes` peers select: part of what it says.
            let labels = (o.kind() == Kind::Node)
                .then(|| o.metadata().labels.clone())
                .flatten();
            *o.metadata_mut() = meta_named(&name);
            o.metadata_mut().namespace = namespace;
            o.metadata_mut().labels = labels;
            o
        };
        strip(self) == strip(other)
    }

    /// `Kind name`, for messages.
    pub fn describe(&self) -> String {
        format!("{} {:?}", self.kind(), self.key())
    }
}

/// `From<T> for ClusterObject` for each object type and its variant.
macro_rules! into_object {
    ($($ty:ident => $variant:ident),* $(,)?) => {
        $(impl From<$ty> for ClusterObject {
            fn from(o: $ty) -> Self {
                ClusterObject::$variant(o)
            }
        })*
    };
}

into_object!(
    ClusterNetwork => ClusterNetwork,
    HostSubnet => HostSubnet,
    NetNamespace => NetNamespace,
    EgressNetworkPolicy => EgressNetworkPolicy,
    ClusterPolicyObject => ClusterNetworkPolicy,
    NodeObject => Node,
);
