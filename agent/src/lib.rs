//! The SDN node agent as a library: the `sdn-agent` binary is a thin front end, and the
//! integration tests in `tests/` drive these parts against real OVS, real network namespaces and
//! a real container runtime. Everything with I/O on the node lives here; the pure logic (flows,
//! tenancy, policy) lives in the `flows` and `multitenant` crates, the settings and cluster
//! objects in `cluster`, the local API's wire types in `local-api`.
//!
//! The folders are the architecture of `docs/architecture.md`, one floor each; a floor uses the
//! floors below it and never one above (`tests/tests/layers.rs` checks it):
//!
//! | floor | folder | what it is |
//! |---|---|---|
//! | 0 | [`telemetry`] | metrics and logging |
//! | 1 | [`host`], [`cni`] | host plumbing (netlink, iptables, IPAM); the CNI spec and server |
//! | 2 | [`bridge`] | br0: the OpenFlow connection, the flow store, the I/O seams |
//! | 3 | [`features`] | remote nodes, host ports, bandwidth, egress firewall, egress IPs, NetworkPolicy |
//! | 4 | [`pod`] | a pod's ADD, DEL, CHECK, GC, rebuild, repair |
//! | 5 | [`operator`] | node view, health, local API, trace |
//! | 6 | [`node`] | start-up, loops, the CNI handler: the wiring of all of the above |

pub(crate) mod bridge;
pub mod cni;
pub mod features;
pub mod host;
pub mod node;
pub(crate) mod operator;
pub mod pod;
pub mod telemetry;

/// Locks a std mutex, taking the data over from a thread that panicked while holding it (every
/// mutex of the agent guards plain data that stays consistent between statements).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
