//! Pure builders of the `br0` OpenFlow pipeline (see `docs/pipeline.md`).
//!
//! State in, flows out: no sockets, files, clocks or processes (the `ovs` crate comes without
//! its clients, so not even tokio is linked). This crate declares every table once
//! ([`tables::Table`]) with its number, name and purpose, and every register once
//! ([`registers::Reg`]) with its bits and meaning, so builders say `Table::LocalIp` and
//! `Reg::DstVnid`, never `70` or `reg1`; the agent registers the same table names in OVSDB so
//! that `ovs-ofctl --names dump-flows br0` prints them. VNIDs are [`Vnid`]s (the `multitenant`
//! crate's). [`cookie`] gives every flow an owner; [`base`] builds the fixed rows of every table
//! from the node's configuration; [`pod`] and [`remote`] the rows of local pods and of remote
//! nodes; [`policy`] the NetworkPolicy rows (conjunctive matches); [`attachment`] the identity
//! (and its one hash) every pod-owned name derives from.

pub mod attachment;
pub mod audit;
pub mod base;
pub mod cookie;
pub mod egress;
pub mod egress_ip;
pub mod ipv6;
pub mod live_trace;
pub mod multicast;
pub mod node;
pub mod pod;
pub mod policy;
pub mod registers;
pub mod remote;
pub mod tables;

pub use attachment::AttachmentId;
pub use base::{base_flows, Datapath, Mode, NodeConfig, NodeIpv4, CT_MARK_VIA_HOST};
pub use egress::{egress_cidr, egress_cookie, egress_firewall_flows, EgressFirewall, EgressRule};
pub use egress_ip::{
    egress_ip_cookie, egress_ip_flows, egress_mark, egress_mark_mac, EgressRoute,
    EGRESS_IP6_GROUP_BASE,
};
pub use ipv6::{link_local, NodeIpv6};
pub use multicast::{multicast_cookie, multicast_tenant_flows, MULTICAST_ANNOTATION};
pub use multitenant::Vnid;
pub use pod::{
    ofport_of, pod_flows, port_cookie, vnid_cookie, vnid_flow, PodFlows, POD_FLOWS,
    POD_FLOWS_DUAL_STACK, UNASSIGNED_VNID,
};
pub use policy::{
    conjunction_ids, policy_rows, policy_target_cookie, ConjunctionIds, LocalPod, NamespaceView,
    PodView, PolicyInput, PolicyRows, RuleRef, POLICY_COOKIE,
};
pub use registers::Reg;
pub use remote::{
    multicast_remote, multicast_remote_flow, node_cookie, remote_node_flows, remote_node_row_count,
    RemoteNodeFlows, MULTICAST_COOKIE, MULTICAST_GROUP_BASE, VTEPS_IN_ROW, VTEPS_PER_GROUP,
};
pub use tables::Table;
