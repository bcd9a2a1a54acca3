//! The local API's requests and answers, as JSON: what the agent serves on its root-only
//! socket and what `sdnctl` (or an operator's own tool) reads. Plain data, no behaviour: the
//! agent fills them from its node view, sdnctl renders them.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One local pod, as `sdnctl pods` shows it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PodEntry {
    /// Kubernetes namespace (tenant).
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Container (sandbox) id.
    pub sandbox: String,
    /// Interface in the pod.
    pub ifname: String,
    /// IPv4 address (absent for a pod of an IPv6-only cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<Ipv4Addr>,
    /// IPv6 address (a dual-stack or IPv6-only pod's; absent for a pod with IPv4 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip6: Option<std::net::Ipv6Addr>,
    /// The pod interface's MAC.
    pub mac: String,
    /// The OVS port (host end of the veth).
    pub port: String,
    /// Its OpenFlow port.
    pub ofport: u32,
    /// The VNID its flows carry.
    pub vnid: u32,
    /// The cookie of its flows, `0x...`.
    pub cookie: String,
    /// Host port mappings, as recorded.
    pub host_ports: Value,
    /// Bandwidth limits, bit/s (`null`: unlimited).
    pub bandwidth: BandwidthEntry,
    /// The network namespace path.
    pub netns: String,
}

/// A pod's limits in bit/s.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct BandwidthEntry {
    /// Towards the pod.
    pub ingress_bps: Option<u64>,
    /// From the pod.
    pub egress_bps: Option<u64>,
}

/// One NetNamespace.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct NamespaceEntry {
    /// The namespace.
    pub name: String,
    /// Its VNID (0: global).
    pub netid: u32,
    /// Local pods in it.
    pub local_pods: usize,
    /// Whether multicast is in effect for its VNID (every namespace on it annotated).
    #[serde(default)]
    pub multicast: bool,
    /// Why it has no usable NetNamespace (its file in the state directory is broken); its
    /// `netid` is then the unknown tenant's (16777215).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// One flow of br0, named.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FlowEntry {
    /// Table number.
    pub table: u8,
    /// Table name (`ingress_isolation`).
    pub table_name: String,
    /// Priority.
    pub priority: u16,
    /// Cookie, `0x...`.
    pub cookie: String,
    /// Who owns it: `base pipeline`, `pod NS/NAME (port P)`, `VNID 10 (tenant-a)`, `remote
    /// node N`, or `unknown (not the agent's)`.
    pub owner: String,
    /// Match and actions as `ovs-ofctl` prints them, with table names.
    pub flow: String,
}

/// Egress IPs as this node applies them, for `sdnctl egress-ips`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EgressIpsView {
    /// Per tenant with egress IPs.
    pub tenants: Vec<EgressIpEntry>,
    /// The IPs this node holds, with their VNIDs.
    pub held: BTreeMap<String, u32>,
    /// The remote nodes hosting IPs this node's tenants use.
    pub nodes: BTreeMap<String, NodeReach>,
}

/// Whether a node hosting egress IPs answers its probes.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum NodeReach {
    /// It answers.
    Online,
    /// Three probes in a row went unanswered: its egress IPs are not used.
    Offline,
}

impl std::fmt::Display for NodeReach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NodeReach::Online => "online",
            NodeReach::Offline => "offline",
        })
    }
}

/// Where a tenant's external traffic leaves, as one word.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum EgressKind {
    /// Through this node (one of its egress IPs is held here).
    Local,
    /// Over VXLAN to the nodes hosting its egress IPs.
    Remote,
    /// Nowhere: none of its egress IPs is usable.
    Dropped,
}

impl std::fmt::Display for EgressKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EgressKind::Local => "local",
            EgressKind::Remote => "remote",
            EgressKind::Dropped => "dropped",
        })
    }
}

/// One requested egress IP of a tenant and what became of it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EgressIpUse {
    /// The IP (IPv4 or IPv6).
    pub ip: std::net::IpAddr,
    /// The node whose HostSubnet claims it, if one does.
    pub node: Option<String>,
    /// What became of it.
    pub state: EgressIpState,
}

/// What became of a requested egress IP.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum EgressIpState {
    /// The tenant's traffic leaves with it.
    InUse,
    /// Not used, and why when there is one reason.
    NotUsed {
        /// Why.
        why: Option<String>,
    },
    /// This node should hold it and cannot.
    NotHeld {
        /// Why.
        error: String,
    },
}

impl std::fmt::Display for EgressIpUse {
    /// `IP on NODE (in use|not used: why|not held here: error)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.ip)?;
        if let Some(n) = &self.node {
            write!(f, " on {n}")?;
        }
        match &self.state {
            EgressIpState::InUse => f.write_str(" (in use)"),
            EgressIpState::NotUsed { why: Some(w) } => write!(f, " (not used: {w})"),
            EgressIpState::NotUsed { why: None } => f.write_str(" (not used)"),
            EgressIpState::NotHeld { error } => write!(f, " (not held here: {error})"),
        }
    }
}

/// NetworkPolicies as this node applies them, for `sdnctl network-policies`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPoliciesView {
    /// Whether the node runs in networkpolicy mode.
    pub enabled: bool,
    /// NetworkPolicies in the cluster state.
    pub policies: usize,
    /// Those that select a pod of this node.
    pub active: Vec<String>,
    /// Those left out whole because a value cannot be applied, with why.
    #[serde(default)]
    pub refused: BTreeMap<String, String>,
    /// Local pods that policies isolate: `namespace/name` → (ingress policies, egress policies).
    pub isolated: BTreeMap<String, IsolationEntry>,
    /// The rules with rows here (conjunction id → rule).
    pub rules: BTreeMap<u32, String>,
    /// Rows on br0: per pod (targets, isolation) and shared (peers, ports, conjunctions).
    pub target_rows: usize,
    /// Shared rows.
    pub shared_rows: usize,
    /// What openshift-sdn's cross product would have needed for the same policies and pods.
    pub cross_product_rows: usize,
    /// The same with only this node's pods as targets.
    pub cross_product_local_rows: usize,
    /// Rebuilds that changed br0 since start, and the last one's milliseconds.
    pub rebuilds: u64,
    /// The last rebuild's duration, ms.
    pub last_rebuild_ms: u64,
    /// ClusterNetworkPolicies in the cluster state.
    #[serde(default)]
    pub cluster_policies: usize,
    /// Those with rows for a pod of this node: `name (TIER tier, priority P)`.
    #[serde(default)]
    pub cluster_active: Vec<String>,
    /// ClusterNetworkPolicies left out whole because a value cannot be applied, with why.
    #[serde(default)]
    pub cluster_refused: BTreeMap<String, String>,
}

/// The policies isolating one local pod.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct IsolationEntry {
    /// For ingress.
    pub ingress: Vec<String>,
    /// For egress.
    pub egress: Vec<String>,
}

/// One tenant's egress firewall as in effect, for `sdnctl egress-firewall`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct EgressEntry {
    /// The VNID.
    pub vnid: u32,
    /// The namespaces on it.
    pub namespaces: Vec<String>,
    /// The policies behind the rows (`namespace/name`).
    pub policies: Vec<String>,
    /// Why all external traffic is dropped, if it is.
    pub drop_all: Option<String>,
    /// The rules in order: `Allow` or `Deny` and the destinations they cover.
    pub rules: Vec<EgressRuleEntry>,
}

/// One effective rule.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct EgressRuleEntry {
    /// `Allow` or `Deny`.
    pub action: EgressAction,
    /// The destinations (CIDRs; the addresses a DNS name resolved to).
    pub to: Vec<ipnet::IpNet>,
}

/// What an egress firewall rule does to the destinations it covers; on the wire `"Allow"` or
/// `"Deny"`, as EgressNetworkPolicy spells it.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum EgressAction {
    /// Let the traffic out.
    Allow,
    /// Drop it.
    Deny,
}

impl std::fmt::Display for EgressAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EgressAction::Allow => "Allow",
            EgressAction::Deny => "Deny",
        })
    }
}

/// `sdnctl status`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Status {
    /// This node.
    pub node: String,
    /// Isolation mode.
    pub mode: String,
    /// The node's pod subnet (absent on an IPv6-only cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<Ipv4Net>,
    /// The node's IPv6 pod subnet (dual stack, IPv6-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet6: Option<ipnet::Ipv6Net>,
    /// The underlay address.
    pub node_ip: std::net::IpAddr,
    /// Datapath type.
    pub datapath: String,
    /// The agent's version.
    pub version: String,
    /// The pipeline version the agent installs.
    pub pipeline_version: String,
    /// Whether every readiness check passes.
    pub ready: bool,
    /// The readiness checks.
    pub readiness: Vec<Check>,
    /// The liveness checks.
    pub liveness: Vec<Check>,
    /// Seconds since the agent started.
    pub uptime_seconds: u64,
    /// Seconds from start to serving.
    pub ready_after_seconds: Option<f64>,
    /// The last whole-bridge reconcile.
    pub last_reconcile: Option<ReconcileRecord>,
    /// Things put back after they drifted, by kind, since start.
    pub repairs: BTreeMap<String, u64>,
    /// Re-opened connections, by connection, since start.
    pub reconnects: BTreeMap<String, u64>,
    /// Cluster-state problems kept out (files, watches, objects).
    pub state_problems: Vec<String>,
    /// Where the cluster state comes from.
    pub cluster_state: String,
    /// Counts: pods, namespaces, remote nodes, flows, warm ports, leases.
    pub counts: BTreeMap<String, usize>,
    /// The metrics endpoint, if any.
    pub metrics_address: Option<String>,
    /// The audit log file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_log: Option<String>,
    /// Each node feature's line (remote nodes, egress firewall, multicast, egress IPs, network
    /// policy), in the agent's order.
    #[serde(default)]
    pub features: Vec<FeatureLine>,
}

/// One node feature in `sdnctl status`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FeatureLine {
    /// The feature's name (`remote-nodes`, `multicast`...).
    pub name: String,
    /// What it does now, in words.
    pub summary: String,
}

/// One tenant's egress as `sdnctl egress-ips` shows it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EgressIpEntry {
    /// The VNID.
    pub vnid: u32,
    /// Its namespaces.
    pub namespaces: Vec<String>,
    /// Where its traffic leaves, in words: `local (...)`, `over VXLAN to ...` or `dropped`.
    pub route: String,
    /// The same as one word.
    pub kind: EgressKind,
    /// Why it is dropped.
    pub problem: Option<String>,
    /// Each requested IP (both families) and what became of it.
    pub ips: Vec<EgressIpUse>,
    /// On a dual-stack node: where its IPv6 traffic leaves (`route`, `kind` and `problem`
    /// above are IPv4's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<EgressFamily>,
}

/// Where one family of a tenant's traffic leaves.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EgressFamily {
    /// In words, as [`EgressIpEntry::route`].
    pub route: String,
    /// As one word.
    pub kind: EgressKind,
    /// Why it is dropped.
    pub problem: Option<String>,
}

/// One named check and what it found.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Check {
    /// `ovsdb`, `openflow`, `cluster-state`, `cni-server`, `main-loop`...
    pub name: String,
    /// Whether it passed.
    pub ok: bool,
    /// What was found, in words (what to do, when it failed).
    pub detail: String,
}

impl Check {
    /// A check named `name`.
    pub fn new(name: &str, ok: bool, detail: impl Into<String>) -> Check {
        Check {
            name: name.to_string(),
            ok,
            detail: detail.into(),
        }
    }
}

/// The last whole-bridge reconcile.
#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
pub struct ReconcileRecord {
    /// Why it ran: `start`, `periodic`, `flow-drift`, `switch-restart`.
    pub reason: String,
    /// When it ended, seconds since the Unix epoch.
    pub at_unix: u64,
    /// How long it took, ms.
    pub took_ms: u64,
    /// Flows desired.
    pub desired: usize,
    /// Flows added or replaced.
    pub added: usize,
    /// Flows deleted.
    pub deleted: usize,
    /// The first few changes, as flow text.
    pub changes: Vec<String>,
    /// The error, when it failed.
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::{EgressAction, EgressRuleEntry};

    #[test]
    fn an_egress_rule_is_typed_but_keeps_its_wire_form() {
        let rule = EgressRuleEntry {
            action: EgressAction::Deny,
            to: vec!["10.0.0.0/8".parse().unwrap()],
        };
        let json = serde_json::to_string(&rule).unwrap();
        assert_eq!(json, r#"{"action":"Deny","to":["10.0.0.0/8"]}"#);
        assert_eq!(
            serde_json::from_str::<EgressRuleEntry>(&json).unwrap(),
            rule
        );
        // A client reading an answer it does not understand says so instead of guessing.
        for bad in [
            r#"{"action":"Drop","to":["10.0.0.0/8"]}"#,
            r#"{"action":"Allow","to":["10.0.0.0/33"]}"#,
        ] {
            assert!(
                serde_json::from_str::<EgressRuleEntry>(bad).is_err(),
                "{bad}"
            );
        }
    }
}
