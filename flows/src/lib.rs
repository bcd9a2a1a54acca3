//! Pure builders of the `br0` OpenFlow pipeline (see `shared/design/pipeline.md`).
//!
//! State in, flows out: no sockets, files, clocks or processes. This crate declares every table
//! once ([`tables::Table`]) with its number, name and purpose, so builders say
//! `Table::LocalIp`, never `70`, and the agent registers the same names in OVSDB so that
//! `ovs-ofctl --names dump-flows br0` prints them. [`cookie`] gives every flow an owner;
//! [`base`] builds the fixed rows of every table from the node's configuration; [`pod`] and
//! [`node`] the rows of local pods and of remote nodes.

pub mod base;
pub mod cookie;
pub mod node;
pub mod pod;
pub mod tables;

pub use base::{base_flows, Mode, NodeConfig};
pub use node::{
    multicast_remote_flow, node_cookie, remote_node_flows, RemoteNodeFlows, MULTICAST_COOKIE,
};
pub use pod::{pod_cookie, pod_flows, vnid_cookie, vnid_flow, PodFlows, UNASSIGNED_VNID};
pub use tables::Table;
