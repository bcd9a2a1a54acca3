//! The SDN node agent as a library: the `sdn-agent` and `sdnctl` binaries are thin front ends,
//! and the integration tests in `tests/` drive these modules against real OVS, real network
//! namespaces and a real container runtime.
//!
//! Everything with I/O lives here; the pure logic (flows, tenancy) lives in the `flows` and
//! `multitenant` crates.

pub mod bandwidth;
pub mod cluster;
pub mod cni;
pub mod config;
pub mod controller;
pub mod daemon;
#[cfg(test)]
pub mod fake;
pub mod flowstore;
pub mod hostports;
pub mod ipam;
pub mod iptables;
pub mod netlink;
pub mod pod;
pub mod remote;
pub mod seams;
pub mod switch;
pub mod tenants;
pub mod yaml;
