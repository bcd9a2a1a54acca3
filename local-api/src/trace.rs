//! `sdnctl trace`'s request and answer: one packet through br0's real tables, each step named,
//! the verdict in words. The agent builds the answer from `ofproto/trace`; sdnctl prints it.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

/// What to trace (the body of `POST /v1/trace`).
#[derive(Clone, Debug, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct TraceRequest {
    /// `NAMESPACE/POD` (a local pod), `node`, or an address of either family.
    pub src: String,
    /// `NAMESPACE/POD`, `node`, or an address of either family (pod, remote pod, service,
    /// external).
    pub dst: String,
    /// `icmp` (default), `arp`, `tcp/PORT`, `udp/PORT`; in IPv6 `icmp6`, `nd` (a neighbour
    /// solicitation for DST), or any of the others with an IPv6 address as SRC or DST.
    #[serde(default)]
    pub proto: String,
    /// The VXLAN VNI a packet from a remote pod arrives with (its tenant's VNID).
    #[serde(default)]
    pub vni: Option<u32>,
    /// Send from SRC's port with this source address instead of SRC's own (spoofing).
    #[serde(default)]
    pub spoof_ip: Option<std::net::IpAddr>,
    /// Send from SRC's port with this source MAC instead of SRC's own (spoofing).
    #[serde(default)]
    pub spoof_mac: Option<String>,
}

/// One flow the packet matched.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Step {
    /// Table number.
    pub table: u8,
    /// Table name.
    pub table_name: String,
    /// The flow's match as the switch prints it (`No match` when none matched).
    pub matched: String,
    /// Priority.
    pub priority: u16,
    /// Cookie, `0x...`.
    pub cookie: String,
    /// Who owns the flow.
    pub owner: String,
    /// The actions executed, one per line.
    pub actions: Vec<String>,
}

/// The outcome, for machines.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Output to a local pod's port.
    Delivered,
    /// Output to tun0: the node (its routing, services, NAT) takes it.
    ToHost,
    /// Output to vxlan0: another node decides.
    ToRemoteNode,
    /// No output.
    Dropped,
}

/// The trace's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TraceResult {
    /// The source, in words.
    pub src: String,
    /// The destination, in words.
    pub dst: String,
    /// The packet given to `ofproto/trace`.
    pub packet: String,
    /// The tables the packet took (after conntrack), in order.
    pub steps: Vec<Step>,
    /// Delivered, to host, to a remote node, or dropped.
    pub outcome: Outcome,
    /// The table that decided (the last one the packet went through).
    pub decided_in: String,
    /// Why, in words.
    pub verdict: String,
    /// For traffic that left over VXLAN: the VNI and the remote VTEP.
    pub vxlan: Option<VxlanHop>,
    /// Networkpolicy mode: what the NetworkPolicy tables (27, 80) decided, naming the policy
    /// and rule that allowed the packet or the policies that isolate the pod that dropped it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy: Vec<String>,
    /// `ofproto/trace`'s own text.
    pub raw: String,
}

/// Where a packet went over VXLAN.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct VxlanHop {
    /// The VNI (the source's VNID).
    pub vni: u32,
    /// The remote VTEP address.
    pub remote_vtep: Ipv4Addr,
    /// The node owning that VTEP, if known.
    pub remote_node: Option<String>,
}
