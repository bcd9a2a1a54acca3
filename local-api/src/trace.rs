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
    /// Also send one real, marked packet from SRC's port and report what br0 did with it
    /// ([`LiveTrace`]); SRC must be a local pod.
    #[serde(default)]
    pub live: bool,
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
    /// What the real packet did, when the request asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<LiveTrace>,
}

/// What one real, marked packet did in br0 (`sdnctl trace --live`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct LiveTrace {
    /// The packet sent, in words.
    pub packet: String,
    /// Its mark: the DSCP every row of the trace matched.
    pub dscp: u8,
    /// What the packet met, in order.
    pub hops: Vec<LiveHop>,
    /// Delivered, to host, to a remote node, or dropped.
    pub outcome: Outcome,
    /// Where and why it ended, in words.
    pub verdict: String,
    /// For a packet that left over VXLAN: the VNI and the remote VTEP it really had.
    pub vxlan: Option<VxlanHop>,
    /// Where the live path and the static trace disagree: each is a bug or drift.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub differs: Vec<String>,
    /// What the trace could not see (copies a meter or a queue dropped), when anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gaps: Option<String>,
    /// Milliseconds from sending the packet to the last report.
    pub elapsed_ms: u64,
    /// The temporary rows the trace installed on this node (its observation rows and the
    /// copies of the rows the packet could meet).
    #[serde(default)]
    pub rows: usize,
    /// For a packet that left over VXLAN to a node of this cluster: what that node's agent
    /// saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<LiveRemote>,
}

/// The part of a live trace on the node its packet went to over VXLAN.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct LiveRemote {
    /// That node.
    pub node: String,
    /// What the packet met there, in order.
    pub hops: Vec<LiveHop>,
    /// Where it ended there (none: it did not arrive, or the node could not watch).
    pub outcome: Option<Outcome>,
    /// In words.
    pub verdict: String,
}

/// What a traced packet did at one point.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum LiveEvent {
    /// It entered the table.
    Entered,
    /// A row output it to a local pod (the trace stopped it there).
    Delivered,
    /// A row output it to tun0, VXLAN or a group, and it went on.
    Left,
    /// A row ended its path without an output.
    Dropped,
}

/// One report of a traced packet.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct LiveHop {
    /// 1 for the packet from the source pod; 2 and on for the packet br0 got back from the
    /// node through tun0 (a Service, after the node's NAT).
    pub pass: u8,
    /// Table number.
    pub table: u8,
    /// Table name.
    pub table_name: String,
    /// What happened.
    pub event: LiveEvent,
    /// The port the packet entered br0 by.
    pub in_port: u32,
    /// Its conntrack state there, as `ovs-ofctl` writes it (`+new+trk`; empty: untracked).
    pub ct_state: String,
    /// The registers that were not 0 (`reg0=0xb reg3=0x4`).
    pub regs: String,
    /// For a row that ended or passed the packet on: the row, as `ovs-ofctl` prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row: Option<String>,
    /// Who owns that row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
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
