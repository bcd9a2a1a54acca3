//! Native Open vSwitch clients for the SDN node agent.
//!
//! - [`flow`]: the `Flow` model (match, actions, cookie) with its `ovs-ofctl` text form, used by
//!   logs, tests and operators alike.
//! - [`openflow`]: an async OpenFlow 1.3 client with the Nicira extensions the pipeline needs
//!   (registers, `ct`, `load`/`move`, bundles), talking to `br0.mgmt` directly.
//! - [`ovsdb`]: an async OVSDB (RFC 7047) JSON-RPC client with a monitored cache and the
//!   bridge/port helpers the agent uses.
//! - [`unixctl`]: the daemons' control sockets (what `ovs-appctl` talks to), for
//!   `ofproto/trace`.
//!
//! Nothing here forks `ovs-vsctl` or `ovs-ofctl`: both protocols are spoken natively over
//! persistent connections, and every wait is bounded.
//!
//! The clients (and with them tokio) sit behind the default feature `client`. The pure crates
//! that build flows (`flows`) depend on this crate with `default-features = false` and get the
//! [`flow`] model alone: no async runtime, no socket code.

pub mod flow;
#[cfg(feature = "client")]
pub mod openflow;
#[cfg(feature = "client")]
pub mod ovsdb;
#[cfg(feature = "client")]
pub mod unixctl;

pub use flow::{Action, Field, Flow, FlowError, Match, Subfield};
