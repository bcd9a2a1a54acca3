//! Native Open vSwitch clients for the SDN node agent.
//!
//! - [`flow`]: the `Flow` model (match, actions, cookie) with its `ovs-ofctl` text form, used by
//!   logs, tests and operators alike.
//! - [`openflow`]: an async OpenFlow 1.3 client with the Nicira extensions the pipeline needs
//!   (registers, `ct`, `load`/`move`, bundles), talking to `br0.mgmt` directly.
//! - [`ovsdb`]: an async OVSDB (RFC 7047) JSON-RPC client with a monitored cache and the
//!   bridge/port helpers the agent uses.
//!
//! Nothing here forks `ovs-vsctl` or `ovs-ofctl`: both protocols are spoken natively over
//! persistent connections, and every wait is bounded.

pub mod flow;
pub mod openflow;
pub mod ovsdb;

pub use flow::{Action, Field, Flow, FlowError, Match, Subfield};
