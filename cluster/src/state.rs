//! [`ClusterState`]: the cluster objects one node cares about, as one immutable value that a
//! source publishes whole on every change (consumers diff it against the previous one).
//!
//! Why a plain value: the flow builders and the tenancy logic are pure; they take a state and
//! return flows, and the tests build states by hand. Holding it in an `Arc` behind a
//! `tokio::sync::watch` channel makes "the latest state" cheap to read and lets a slow consumer
//! skip intermediate versions, which is what a reconciler wants.
//!
//! Also here: the checks that involve more than one object (a HostSubnet against the
//! ClusterNetwork and against the other HostSubnets) and node subnet allocation.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use flows::policy::PodsByNamespace;
use ipnet::{Ipv4Net, Ipv6Net};
use multitenant::cluster_policy::{ClusterPolicy, NodeView};
use multitenant::policy::{ContainerPort, Labels, Policy};

use super::types::{
    ClusterNetwork, ClusterObject, EgressNetworkPolicy, HostSubnet, Kind, NetNamespace,
};
use super::validate::ValidationError;
use crate::audit::{AclLogging, AuditSetting};
use crate::config::Ipv4ClusterNetwork as CidrEntry;

/// The cluster objects known to this node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterState {
    /// The `default` ClusterNetwork, once it exists.
    pub cluster_network: Option<ClusterNetwork>,
    /// HostSubnets by object name (= node name). The large maps are shared (`Arc`): a state
    /// published after a pod event shares them with the one before, so publishing and
    /// comparing cost a pointer, not a copy of 5,000 nodes.
    pub host_subnets: Arc<BTreeMap<String, HostSubnet>>,
    /// NetNamespaces by object name (= namespace name).
    pub net_namespaces: Arc<BTreeMap<String, NetNamespace>>,
    /// Kubernetes mode: the namespaces that exist (`None` where the source does not know them,
    /// as in standalone mode).
    pub namespaces: Option<Arc<BTreeSet<String>>>,
    /// Kubernetes mode: this node's pods by `namespace/name` (empty in standalone mode).
    pub pods: BTreeMap<String, PodInfo>,
    /// Kubernetes networkpolicy mode: every pod of the cluster that has an address (this
    /// node's too), reduced to what policies read, by namespace: policies select peers
    /// anywhere. Each namespace's map is shared, so publishing a state after one pod changed
    /// copies one namespace, not the cluster.
    pub peer_pods: PodsByNamespace,
    /// Networkpolicy mode: whether [`Self::peer_pods`] holds the cluster's first list. Until
    /// then it is empty: the agent serves before the cluster's largest list is in, and a
    /// policy's peers only ever allow, so rows built meanwhile allow less, never more (fail
    /// closed). The start-up reconcile waits for it, so a restart changes no row.
    pub peer_pods_listed: bool,
    /// The cluster's nodes as ClusterNetworkPolicies' `nodes` peers see them (labels and
    /// addresses), by name: in Kubernetes mode watched from the first ClusterNetworkPolicy
    /// with such a peer on, in standalone mode the `Node` files.
    pub nodes: Arc<BTreeMap<String, NodeView>>,
    /// Whether [`Self::nodes`] holds the cluster's nodes. Until then a Deny or Pass rule's
    /// `nodes` peers are every address and an Accept rule's none (fail closed).
    pub nodes_listed: bool,
    /// EgressNetworkPolicies by `namespace/name`.
    pub egress_policies: Arc<BTreeMap<String, EgressNetworkPolicy>>,
    /// The labels of every namespace the source knows, by name.
    pub namespace_labels: Arc<BTreeMap<String, Labels>>,
    /// Networkpolicy mode: the NetworkPolicies that could be read, by `namespace/name`.
    pub network_policies: Arc<BTreeMap<String, Policy>>,
    /// Networkpolicy mode: the NetworkPolicies left out whole, with why, by `namespace/name`.
    pub refused_policies: BTreeMap<String, String>,
    /// ClusterNetworkPolicies (both modes), by name: those read, and the fail-closed form of
    /// those refused (`crate::cnp::fail_closed`).
    pub cluster_policies: Arc<BTreeMap<String, ClusterPolicy>>,
    /// ClusterNetworkPolicies refused whole, with why, by name.
    pub refused_cluster_policies: BTreeMap<String, String>,
    /// EgressNetworkPolicies (`namespace/name`) that cannot be applied, with why: their
    /// namespace's external traffic is dropped (fail closed).
    pub refused_egress_policies: BTreeMap<String, String>,
    /// Namespaces without a NetNamespace because its file is unusable (standalone mode), with
    /// the file's problem: an ADD there says so instead of "create it".
    pub broken_namespaces: BTreeMap<String, String>,
    /// The audit logging of every namespace that carries the `k8s.ovn.org/acl-logging`
    /// annotation (on its Namespace in Kubernetes mode, its NetNamespace in standalone mode),
    /// as read, with what was wrong with it ([`crate::audit`]).
    pub audit_logging: Arc<BTreeMap<String, AuditSetting>>,
    /// The audit logging of every ClusterNetworkPolicy that carries the
    /// `k8s.ovn.org/acl-logging` annotation (deny, allow and pass, as OVN-Kubernetes reads it
    /// on an AdminNetworkPolicy), by policy name.
    pub cluster_policy_logging: Arc<BTreeMap<String, AuditSetting>>,
}

/// What the agent keeps of one of its node's Kubernetes Pods (from the watch cache, so a CNI ADD
/// never asks the API server).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodInfo {
    /// The pod's UID.
    pub uid: String,
    /// The pod's annotations.
    pub annotations: BTreeMap<String, String>,
    /// The pod's labels.
    pub labels: Labels,
    /// The node it runs on (`spec.nodeName`).
    pub node: String,
    /// Its address (`status.podIP`), once it has one; none for host-network pods.
    pub ip: Option<Ipv4Addr>,
    /// Its named container ports.
    pub ports: Vec<ContainerPort>,
}

impl ClusterState {
    /// The HostSubnet of `node`.
    pub fn host_subnet_of(&self, node: &str) -> Option<&HostSubnet> {
        self.host_subnets.get(node)
    }

    /// The pod subnet of `node`, when it has a valid HostSubnet.
    pub fn subnet_of(&self, node: &str) -> Option<Ipv4Net> {
        self.host_subnet_of(node)?.subnet_net().ok()
    }

    /// The node whose subnet holds `ip`, with its underlay address (valid HostSubnets only).
    pub fn node_holding(&self, ip: Ipv4Addr) -> Option<(&str, std::net::IpAddr)> {
        self.host_subnets.values().find_map(|hs| {
            let held = hs.subnet_net().is_ok_and(|n| n.contains(&ip));
            held.then(|| Some((hs.host.as_str(), hs.host_ip_addr().ok()?)))
                .flatten()
        })
    }

    /// The underlay address of `node`, when it has a valid HostSubnet.
    pub fn host_ip_of(&self, node: &str) -> Option<std::net::IpAddr> {
        self.host_subnet_of(node)?.host_ip_addr().ok()
    }

    /// The netid of `namespace`'s NetNamespace, as the object holds it (see [`Self::vnid`]
    /// for the typed VNID).
    pub fn vnid_of(&self, namespace: &str) -> Option<u32> {
        self.net_namespaces.get(namespace).map(|n| n.net_id)
    }

    /// The VNID of `namespace`, when it has a NetNamespace (validated netids always fit).
    pub fn vnid(&self, namespace: &str) -> Option<multitenant::Vnid> {
        self.vnid_of(namespace).and_then(multitenant::Vnid::new)
    }

    /// Kubernetes mode: pod `namespace/name` of this node, from the watch cache.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&PodInfo> {
        self.pods.get(&format!("{namespace}/{name}"))
    }

    /// The cluster networks (empty while there is no valid ClusterNetwork).
    pub fn cluster_entries(&self) -> Vec<CidrEntry> {
        self.cluster_network
            .as_ref()
            .and_then(|c| c.entries().ok())
            .unwrap_or_default()
    }

    /// The namespaces whose NetNamespace has VNID `netid`, by name.
    pub fn namespaces_of(&self, netid: u32) -> Vec<&str> {
        self.net_namespaces
            .values()
            .filter(|n| n.net_id == netid)
            .map(|n| n.net_name.as_str())
            .collect()
    }

    /// The VNIDs with multicast enabled, as openshift-sdn decided it: every namespace holding
    /// the VNID carries `netnamespace.network.openshift.io/multicast-enabled: "true"` (one
    /// namespace of a joined pair without it turns multicast off for both).
    pub fn multicast_vnids(&self) -> BTreeSet<multitenant::Vnid> {
        let mut by_vnid: BTreeMap<u32, bool> = BTreeMap::new();
        for n in self.net_namespaces.values() {
            let on = n.multicast_enabled();
            by_vnid
                .entry(n.net_id)
                .and_modify(|all| *all &= on)
                .or_insert(on);
        }
        by_vnid
            .into_iter()
            .filter(|(_, on)| *on)
            .filter_map(|(v, _)| multitenant::Vnid::new(v))
            .collect()
    }

    /// Looks an object up by kind and name.
    pub fn get(&self, kind: Kind, name: &str) -> Option<ClusterObject> {
        match kind {
            Kind::ClusterNetwork => self
                .cluster_network
                .clone()
                .filter(|c| c.name() == name)
                .map(Into::into),
            Kind::HostSubnet => self.host_subnets.get(name).cloned().map(Into::into),
            Kind::NetNamespace => self.net_namespaces.get(name).cloned().map(Into::into),
            Kind::EgressNetworkPolicy => self.egress_policies.get(name).cloned().map(Into::into),
            // The state keeps the policy read from it, not the object.
            Kind::ClusterNetworkPolicy => None,
            Kind::Node => self
                .nodes
                .get(name)
                .map(|v| crate::types::NodeObject::of_view(name, v).into()),
        }
    }

    /// Inserts or replaces an object (no checks), returning the one it replaced.
    pub fn insert(&mut self, obj: ClusterObject) -> Option<ClusterObject> {
        match obj {
            ClusterObject::ClusterNetwork(c) => self.cluster_network.replace(c).map(Into::into),
            ClusterObject::HostSubnet(h) => Arc::make_mut(&mut self.host_subnets)
                .insert(h.name().to_string(), h)
                .map(Into::into),
            ClusterObject::NetNamespace(n) => Arc::make_mut(&mut self.net_namespaces)
                .insert(n.name().to_string(), n)
                .map(Into::into),
            ClusterObject::EgressNetworkPolicy(e) => Arc::make_mut(&mut self.egress_policies)
                .insert(format!("{}/{}", e.namespace(), e.name()), e)
                .map(Into::into),
            // Read with the strict reader: one it refuses is in effect in its fail-closed
            // form, and listed as refused with why.
            ClusterObject::ClusterNetworkPolicy(o) => {
                let name = o.name().to_string();
                let logging = crate::audit::annotation(&o.metadata)
                    .map(|v| crate::audit::parse_acl_logging(&v));
                let all = Arc::make_mut(&mut self.cluster_policy_logging);
                match logging {
                    Some(l) => all.insert(name.clone(), l),
                    None => all.remove(&name),
                };
                let (policy, read) = o.read();
                match read {
                    Ok(()) => self.refused_cluster_policies.remove(&name),
                    Err(why) => self.refused_cluster_policies.insert(name.clone(), why),
                };
                let policies = Arc::make_mut(&mut self.cluster_policies);
                match policy {
                    Some(p) => policies.insert(name, p),
                    None => policies.remove(&name),
                };
                None
            }
            ClusterObject::Node(n) => {
                Arc::make_mut(&mut self.nodes).insert(n.name().to_string(), n.view());
                None
            }
        }
    }

    /// Every object: the ClusterNetwork, then HostSubnets and NetNamespaces by name.
    pub fn objects(&self) -> Vec<ClusterObject> {
        let mut out: Vec<ClusterObject> = self
            .cluster_network
            .iter()
            .cloned()
            .map(Into::into)
            .collect();
        out.extend(self.host_subnets.values().cloned().map(ClusterObject::from));
        out.extend(
            self.net_namespaces
                .values()
                .cloned()
                .map(ClusterObject::from),
        );
        out.extend(
            self.egress_policies
                .values()
                .cloned()
                .map(ClusterObject::from),
        );
        out
    }

    /// Checks a HostSubnet against this state: its subnet must be one node subnet of a cluster
    /// network (inside it, with the prefix its host subnet length gives) and must not overlap
    /// the subnet of another node. Without a ClusterNetwork only the overlap is checked.
    pub fn check_host_subnet(&self, hs: &HostSubnet) -> Result<(), ValidationError> {
        self.check_host_subnet_in(hs, &SubnetIndex::of(self))
    }

    /// [`Self::check_host_subnet`] against the node subnets of `index` (which a caller
    /// admitting many HostSubnets keeps as it goes: a check then costs O(log n), not O(n)).
    pub fn check_host_subnet_in(
        &self,
        hs: &HostSubnet,
        index: &SubnetIndex,
    ) -> Result<(), ValidationError> {
        if let Some(subnet6) = hs.ipv6_subnet()? {
            self.check_ipv6_subnet_in(hs, subnet6, index)?;
        }
        let Some(subnet) = hs.ipv4_subnet()? else {
            return Ok(());
        };
        if let Some(cn) = &self.cluster_network {
            let entries = cn.entries()?;
            match entries.iter().find(|e| e.cidr.contains(&subnet.network())) {
                None => {
                    return Err(ValidationError::new(
                        "subnet",
                        &hs.subnet,
                        format!(
                            "not inside any cluster network ({})",
                            entries
                                .iter()
                                .map(|e| e.cidr.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ))
                }
                Some(e) if subnet.prefix_len() != e.node_prefix() => {
                    return Err(ValidationError::new(
                        "subnet",
                        &hs.subnet,
                        format!(
                            "cluster network {} has hostSubnetLength {}, so node subnets are /{}",
                            e.cidr,
                            e.host_subnet_length,
                            e.node_prefix()
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
        if let Some((name, o)) = index.overlap(hs.name(), subnet) {
            return Err(ValidationError::new(
                "subnet",
                &hs.subnet,
                format!("overlaps HostSubnet {name:?} ({o})"),
            ));
        }
        Ok(())
    }

    /// The IPv6 half of [`Self::check_host_subnet_in`]: inside the cluster's IPv6 network with
    /// its node prefix (when the ClusterNetwork has one), overlapping no other node's.
    fn check_ipv6_subnet_in(
        &self,
        hs: &HostSubnet,
        subnet: Ipv6Net,
        index: &SubnetIndex,
    ) -> Result<(), ValidationError> {
        let field = format!(
            "metadata.annotations[{}]",
            crate::types::annotations::IPV6_SUBNET
        );
        if let Some(v6) = self.ipv6_cluster_network() {
            if !v6.cidr.contains(&subnet.network()) {
                return Err(ValidationError::new(
                    field,
                    subnet.to_string(),
                    format!("not inside the IPv6 cluster network {}", v6.cidr),
                ));
            }
            if subnet.prefix_len() != v6.node_prefix() {
                return Err(ValidationError::new(
                    field,
                    subnet.to_string(),
                    format!(
                        "the IPv6 cluster network {} has hostSubnetLength {}, so node subnets \
                         are /{}",
                        v6.cidr,
                        v6.host_subnet_length,
                        v6.node_prefix()
                    ),
                ));
            }
        }
        if let Some((name, o)) = index.overlap6(hs.name(), subnet) {
            return Err(ValidationError::new(
                field,
                subnet.to_string(),
                format!("overlaps HostSubnet {name:?}'s IPv6 subnet ({o})"),
            ));
        }
        Ok(())
    }

    /// Whether `other` differs from this state only in its pods ([`Self::pods`],
    /// [`Self::peer_pods`]): what the node's wiring reads (nodes, tenants, egress) is the same.
    /// A pod's API object is read at its ADD and by the policy task, which follows the state
    /// itself.
    pub fn same_but_pods(&self, other: &ClusterState) -> bool {
        let ClusterState {
            cluster_network,
            host_subnets,
            net_namespaces,
            namespaces,
            pods: _,
            peer_pods: _,
            peer_pods_listed: _,
            nodes,
            nodes_listed,
            egress_policies,
            namespace_labels,
            network_policies,
            refused_policies,
            cluster_policies,
            refused_cluster_policies,
            refused_egress_policies,
            broken_namespaces,
            audit_logging,
            cluster_policy_logging,
        } = self;
        *cluster_network == other.cluster_network
            && *host_subnets == other.host_subnets
            && *net_namespaces == other.net_namespaces
            && *namespaces == other.namespaces
            && *nodes == other.nodes
            && *nodes_listed == other.nodes_listed
            && *egress_policies == other.egress_policies
            && *namespace_labels == other.namespace_labels
            && *network_policies == other.network_policies
            && *refused_policies == other.refused_policies
            && *cluster_policies == other.cluster_policies
            && *refused_cluster_policies == other.refused_cluster_policies
            && *refused_egress_policies == other.refused_egress_policies
            && *broken_namespaces == other.broken_namespaces
            && *audit_logging == other.audit_logging
            && *cluster_policy_logging == other.cluster_policy_logging
    }

    /// What `namespace` logs (nothing when it has no annotation).
    pub fn audit_of(&self, namespace: &str) -> AclLogging {
        self.audit_logging
            .get(namespace)
            .map(|s| s.logging)
            .unwrap_or_default()
    }

    /// Every problem of this state, for states assembled elsewhere (the Kubernetes source):
    /// each object's own validation and each HostSubnet against the ClusterNetwork and the
    /// other nodes. Empty when the state is consistent.
    pub fn problems(&self) -> Vec<(Kind, String, ValidationError)> {
        let mut out = Vec::new();
        let index = SubnetIndex::of(self);
        for obj in self.objects() {
            if let Err(e) = obj.validate() {
                out.push((obj.kind(), obj.name().to_string(), e));
            } else if let ClusterObject::HostSubnet(hs) = &obj {
                if let Err(e) = self.check_host_subnet_in(hs, &index) {
                    out.push((Kind::HostSubnet, hs.name().to_string(), e));
                }
            }
        }
        out
    }

    /// The first free node subnet: walks the cluster networks in order and returns the lowest
    /// subnet of each network's node prefix that overlaps no HostSubnet. `None` when the
    /// ClusterNetwork is missing or every network is full.
    pub fn allocate_subnet(&self) -> Option<Ipv4Net> {
        let used: Vec<Ipv4Net> = self
            .host_subnets
            .values()
            .filter_map(|h| h.subnet_net().ok())
            .collect();
        allocate_subnet(&self.cluster_entries(), &used)
    }
}

/// The lowest node subnet of the first cluster network with room that overlaps none of `used`.
pub fn allocate_subnet(entries: &[CidrEntry], used: &[Ipv4Net]) -> Option<Ipv4Net> {
    SubnetAllocator::new(entries, used).next()
}

/// Hands out node subnets in order: each [`SubnetAllocator::next`] is the lowest subnet of the
/// first cluster network with room that overlaps neither the used subnets nor one handed out
/// before. The used subnets are sorted and merged once, and a cursor only moves forward within
/// a cluster network, so allocating for 5,000 new nodes costs one walk over the used subnets,
/// not one per node.
#[derive(Debug, Clone)]
pub struct SubnetAllocator {
    entries: Vec<CidrEntry>,
    /// Used address ranges (first, last), sorted by first, overlapping ones merged.
    used: Vec<(u64, u64)>,
    /// The cluster network being allocated from, and the next candidate in it.
    entry: usize,
    candidate: Option<u64>,
}

impl SubnetAllocator {
    /// An allocator over `entries` with `used` taken.
    pub fn new(entries: &[CidrEntry], used: &[Ipv4Net]) -> SubnetAllocator {
        let mut ranges: Vec<(u64, u64)> = used
            .iter()
            .map(|u| {
                (
                    u64::from(u32::from(u.network())),
                    u64::from(u32::from(u.broadcast())),
                )
            })
            .collect();
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (a, b) in ranges {
            match merged.last_mut() {
                Some(last) if a <= last.1 + 1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        SubnetAllocator {
            entries: entries.to_vec(),
            used: merged,
            entry: 0,
            candidate: None,
        }
    }

    /// The next free node subnet, or `None` when every cluster network is full.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Ipv4Net> {
        while let Some(e) = self.entries.get(self.entry) {
            let prefix = e.node_prefix();
            let size = 1u64 << (32 - u32::from(prefix));
            let start = u64::from(u32::from(e.cidr.network()));
            let end = start + (1u64 << (32 - u32::from(e.cidr.prefix_len())));
            let mut candidate = self.candidate.unwrap_or(start);
            // The first used range that ends at or after the candidate.
            let mut i = self.used.partition_point(|r| r.1 < candidate);
            while candidate + size <= end {
                let last = candidate + size - 1;
                while i < self.used.len() && self.used[i].1 < candidate {
                    i += 1;
                }
                match self.used.get(i) {
                    Some(&(us, ue)) if us <= last => {
                        // Round up past the blocking range to the next subnet boundary.
                        candidate = (ue + 1).div_ceil(size) * size;
                    }
                    _ => {
                        self.candidate = Some(candidate + size);
                        let addr = Ipv4Addr::from(u32::try_from(candidate).ok()?);
                        return Ipv4Net::new(addr, prefix).ok();
                    }
                }
            }
            self.entry += 1;
            self.candidate = None;
        }
        None
    }
}

/// Node subnets as address intervals, by first address: whether a subnet overlaps another
/// node's costs O(log n) while the subnets in the index are disjoint (admitted ones always
/// are), so admitting the HostSubnets of a 5,000-node cluster is not 12.5 million comparisons.
/// An index that holds overlapping subnets (a state assembled elsewhere, checked by
/// [`ClusterState::problems`]) is walked whole, and stays exact.
/// IPv6 subnets (dual stack, IPv6-only) have an index of their own.
#[derive(Debug, Clone, Default)]
pub struct SubnetIndex {
    v4: Intervals,
    v6: Intervals,
}

/// One family's subnets as intervals of addresses (as integers).
#[derive(Debug, Clone)]
struct Intervals {
    by_start: BTreeMap<u128, Vec<(u128, String)>>,
    disjoint: bool,
}

impl Default for Intervals {
    fn default() -> Self {
        Intervals {
            by_start: BTreeMap::new(),
            disjoint: true,
        }
    }
}

impl Intervals {
    fn insert(&mut self, name: &str, (first, last): (u128, u128)) {
        if self.disjoint && self.overlap("", (first, last)).is_some() {
            self.disjoint = false;
        }
        self.by_start
            .entry(first)
            .or_default()
            .push((last, name.to_string()));
    }

    /// The first and last address of another node's interval that overlaps `(first, last)`.
    fn overlap(&self, name: &str, (first, last): (u128, u128)) -> Option<(&str, (u128, u128))> {
        // Intervals starting at or before `last`, nearest first; when they are disjoint, once
        // one ends before `first` every earlier one does too.
        for (start, list) in self.by_start.range(..=last).rev() {
            let mut reaches = false;
            for (end, other) in list {
                if *end < first {
                    continue;
                }
                reaches = true;
                if other != name {
                    return Some((other, (*start, *end)));
                }
            }
            if !reaches && self.disjoint {
                break;
            }
        }
        None
    }
}

/// The prefix length of an aligned interval of `bits`-bit addresses.
fn prefix_of((first, last): (u128, u128), bits: u32) -> u8 {
    let size = last.wrapping_sub(first).wrapping_add(1);
    let host_bits = if size == 0 {
        128
    } else {
        size.trailing_zeros()
    };
    bits.saturating_sub(host_bits) as u8
}

impl SubnetIndex {
    /// The index of `state`'s HostSubnets (those whose subnets parse).
    pub fn of(state: &ClusterState) -> SubnetIndex {
        let mut index = SubnetIndex::default();
        for (name, hs) in state.host_subnets.iter() {
            index.insert_host_subnet(name, hs);
        }
        index
    }

    /// Adds the subnets of HostSubnet `name` (IPv4 and IPv6, those that parse).
    pub fn insert_host_subnet(&mut self, name: &str, hs: &HostSubnet) {
        if let Ok(net) = hs.subnet_net() {
            self.insert(name, net);
        }
        if let Ok(Some(net)) = hs.ipv6_subnet() {
            self.insert6(name, net);
        }
    }

    /// Adds `name`'s subnet.
    pub fn insert(&mut self, name: &str, net: Ipv4Net) {
        let span = (
            u128::from(u32::from(net.network())),
            u128::from(u32::from(net.broadcast())),
        );
        self.v4.insert(name, span);
    }

    /// Adds `name`'s IPv6 subnet.
    pub fn insert6(&mut self, name: &str, net: Ipv6Net) {
        self.v6.insert(
            name,
            (u128::from(net.network()), u128::from(net.broadcast())),
        );
    }

    /// A subnet of a node other than `name` that overlaps `net`, if any.
    pub fn overlap(&self, name: &str, net: Ipv4Net) -> Option<(&str, Ipv4Net)> {
        let span = (
            u128::from(u32::from(net.network())),
            u128::from(u32::from(net.broadcast())),
        );
        let (other, (first, last)) = self.v4.overlap(name, span)?;
        let o = Ipv4Net::new(Ipv4Addr::from(first as u32), prefix_of((first, last), 32)).ok()?;
        Some((other, o))
    }

    /// An IPv6 subnet of a node other than `name` that overlaps `net`, if any.
    pub fn overlap6(&self, name: &str, net: Ipv6Net) -> Option<(&str, Ipv6Net)> {
        let span = (u128::from(net.network()), u128::from(net.broadcast()));
        let (other, (first, last)) = self.v6.overlap(name, span)?;
        let o = Ipv6Net::new(Ipv6Addr::from(first), prefix_of((first, last), 128)).ok()?;
        Some((other, o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ClusterNetworkEntry;

    fn entry(cidr: &str, len: u8) -> CidrEntry {
        CidrEntry {
            cidr: cidr.parse().unwrap(),
            host_subnet_length: len,
        }
    }

    fn nets(s: &[&str]) -> Vec<Ipv4Net> {
        s.iter().map(|n| n.parse().unwrap()).collect()
    }

    fn state(entries: &[(&str, u32)], subnets: &[(&str, &str)]) -> ClusterState {
        let mut st = ClusterState {
            cluster_network: Some(ClusterNetwork::new(
                entries
                    .iter()
                    .map(|(c, l)| ClusterNetworkEntry {
                        cidr: (*c).into(),
                        host_subnet_length: *l,
                    })
                    .collect(),
                "172.30.0.0/16",
                None,
                None,
                None,
            )),
            ..ClusterState::default()
        };
        for (node, subnet) in subnets {
            st.insert(HostSubnet::new(node, "192.168.0.1", subnet).into());
        }
        st
    }

    #[test]
    fn allocation_takes_the_lowest_free_subnet() {
        let e = [entry("10.128.0.0/14", 9)];
        assert_eq!(
            allocate_subnet(&e, &[]).unwrap().to_string(),
            "10.128.0.0/23"
        );
        assert_eq!(
            allocate_subnet(&e, &nets(&["10.128.0.0/23", "10.128.4.0/23"]))
                .unwrap()
                .to_string(),
            "10.128.2.0/23"
        );
        // A bigger foreign subnet is skipped in one step, to the next aligned candidate.
        assert_eq!(
            allocate_subnet(&e, &nets(&["10.128.0.0/16"]))
                .unwrap()
                .to_string(),
            "10.129.0.0/23"
        );
        // A smaller one blocks only the candidate containing it.
        assert_eq!(
            allocate_subnet(&e, &nets(&["10.128.1.0/24"]))
                .unwrap()
                .to_string(),
            "10.128.2.0/23"
        );
    }

    #[test]
    fn allocation_moves_to_the_next_network_and_reports_exhaustion() {
        let e = [entry("10.0.0.0/23", 8), entry("10.1.0.0/24", 7)];
        assert_eq!(
            allocate_subnet(&e, &nets(&["10.0.0.0/24", "10.0.1.0/24"]))
                .unwrap()
                .to_string(),
            "10.1.0.0/25"
        );
        assert_eq!(
            allocate_subnet(
                &e,
                &nets(&["10.0.0.0/24", "10.0.1.0/24", "10.1.0.0/25", "10.1.0.128/25"])
            ),
            None
        );
        // A /8 of /30s fully used by one /8 terminates immediately.
        let big = [entry("10.0.0.0/8", 2)];
        assert_eq!(allocate_subnet(&big, &nets(&["10.0.0.0/8"])), None);
    }

    #[test]
    fn the_allocator_hands_out_what_one_allocation_at_a_time_would() {
        let e = [entry("10.0.0.0/23", 8), entry("10.1.0.0/22", 8)];
        let used = nets(&["10.0.1.0/24", "10.1.1.0/24", "10.1.0.0/25"]);
        let mut alloc = SubnetAllocator::new(&e, &used);
        let mut taken = used.clone();
        loop {
            let one = allocate_subnet(&e, &taken);
            assert_eq!(alloc.next(), one);
            match one {
                Some(n) => taken.push(n),
                None => break,
            }
        }
        assert_eq!(taken.len(), 3 + 3, "10.0.0.0, 10.1.2.0, 10.1.3.0");
        // 5,000 nodes of a /8 with /24s: distinct, in order, at once.
        let mut alloc = SubnetAllocator::new(&[entry("10.0.0.0/8", 8)], &[]);
        let all: Vec<Ipv4Net> = (0..5000).map(|_| alloc.next().unwrap()).collect();
        assert_eq!(all[0].to_string(), "10.0.0.0/24");
        assert_eq!(all[4999].to_string(), "10.19.135.0/24");
        assert!(all.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn state_allocation_and_lookups() {
        let st = state(
            &[("10.128.0.0/14", 9)],
            &[("a", "10.128.0.0/23"), ("b", "10.128.2.0/23")],
        );
        assert_eq!(st.allocate_subnet().unwrap().to_string(), "10.128.4.0/23");
        assert_eq!(st.subnet_of("b").unwrap().to_string(), "10.128.2.0/23");
        assert_eq!(
            st.host_ip_of("a"),
            Some(Ipv4Addr::new(192, 168, 0, 1).into())
        );
        assert_eq!(st.subnet_of("c"), None);
        let mut st = st;
        st.insert(NetNamespace::new("default", 0).into());
        st.insert(NetNamespace::new("t", 12).into());
        assert_eq!(st.vnid_of("t"), Some(12));
        assert_eq!(st.vnid_of("x"), None);
        assert_eq!(st.objects().len(), 5);
        assert_eq!(
            ClusterState::default().allocate_subnet(),
            None,
            "no ClusterNetwork, no allocation"
        );
    }

    #[test]
    fn host_subnet_checks() {
        let st = state(&[("10.128.0.0/14", 9)], &[("a", "10.128.0.0/23")]);
        let check = |n: &str, s: &str| {
            st.check_host_subnet(&HostSubnet::new(n, "192.168.0.2", s))
                .map_err(|e| e.to_string())
        };
        assert_eq!(check("b", "10.128.2.0/23"), Ok(()));
        assert_eq!(check("a", "10.128.0.0/23"), Ok(()), "itself is no overlap");
        assert_eq!(
            check("b", "10.128.0.0/24"),
            Err("field subnet \"10.128.0.0/24\": cluster network 10.128.0.0/14 has hostSubnetLength 9, so node subnets are /23".into())
        );
        assert_eq!(
            check("b", "10.200.0.0/23"),
            Err(
                "field subnet \"10.200.0.0/23\": not inside any cluster network (10.128.0.0/14)"
                    .into()
            )
        );
        assert_eq!(
            check("b", "10.128.0.0/23"),
            Err("field subnet \"10.128.0.0/23\": overlaps HostSubnet \"a\" (10.128.0.0/23)".into())
        );
    }

    #[test]
    fn the_subnet_index_finds_overlaps_as_a_scan_would() {
        let net = |s: &str| s.parse::<Ipv4Net>().unwrap();
        let mut idx = SubnetIndex::default();
        // 5,000 disjoint /23s, inserted out of order.
        for i in (0..5000u32).rev() {
            let n = Ipv4Net::new(Ipv4Addr::from(0x0a00_0000 + (i << 9)), 23).unwrap();
            idx.insert(&format!("node-{i}"), n);
        }
        assert_eq!(
            idx.overlap("x", net("10.0.2.0/24")),
            Some(("node-1", net("10.0.2.0/23")))
        );
        assert_eq!(idx.overlap("node-1", net("10.0.2.0/23")), None, "itself");
        assert_eq!(
            idx.overlap("x", net("10.0.0.0/16")),
            Some(("node-127", net("10.0.254.0/23"))),
            "a wider subnet meets the nearest below its end"
        );
        assert_eq!(idx.overlap("x", net("10.200.0.0/23")), None);
        // Overlapping entries (a state assembled elsewhere): still exact, both ways.
        let mut idx = SubnetIndex::default();
        idx.insert("wide", net("10.1.0.0/16"));
        idx.insert("a", net("10.1.4.0/23"));
        idx.insert("b", net("10.1.4.0/23"));
        assert_eq!(idx.overlap("a", net("10.1.4.0/23")).map(|o| o.0), Some("b"));
        assert_eq!(idx.overlap("b", net("10.1.4.0/23")).map(|o| o.0), Some("a"));
        assert_eq!(
            idx.overlap("x", net("10.1.200.0/23")),
            Some(("wide", net("10.1.0.0/16"))),
            "an earlier, wider subnet is found past a nearer one that ends before"
        );
    }

    #[test]
    fn problems_lists_every_bad_object() {
        let mut st = state(
            &[("10.128.0.0/14", 9)],
            &[
                ("a", "10.128.0.0/23"),
                ("b", "10.128.0.0/23"),
                ("c", "10.128.2.0/23"),
            ],
        );
        st.insert(NetNamespace::new("t", 1 << 24).into());
        let p: Vec<String> = st
            .problems()
            .iter()
            .map(|(k, n, e)| format!("{k} {n}: {e}"))
            .collect();
        assert_eq!(
            p,
            [
                "HostSubnet a: field subnet \"10.128.0.0/23\": overlaps HostSubnet \"b\" (10.128.0.0/23)",
                "HostSubnet b: field subnet \"10.128.0.0/23\": overlaps HostSubnet \"a\" (10.128.0.0/23)",
                "NetNamespace t: field netid \"16777216\": expected 0..=16777215 (24 bits)",
            ]
        );
    }
}
