//! The SDN node agent as a library: the `sdn-agent` and `sdnctl` binaries are thin front ends,
//! and the integration tests in `tests/` drive these modules against real OVS, real network
//! namespaces and a real container runtime.
//!
//! Everything with I/O lives here; the pure logic (flows, tenancy) lives in the `flows` and
//! `multitenant` crates.

pub mod api;
pub mod bandwidth;
pub mod cni;
pub mod daemon;
pub mod egress;
pub mod egress_ip;
#[cfg(test)]
pub mod fake;
pub mod flowstore;
pub mod hostports;
pub mod ipam;
pub mod iptables;
pub mod logging;
pub mod metrics;
pub mod netlink;
pub mod observe;
pub mod pod;
pub mod policy;
pub mod remote;
pub mod seams;
pub mod switch;
pub mod trace;

/// Locks a std mutex, taking the data over from a thread that panicked while holding it (every
/// mutex of the agent guards plain data that stays consistent between statements).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
