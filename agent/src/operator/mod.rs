//! The operator surface (floor 5): what an operator (or a monitoring system) asks the running
//! agent, answered from its own view of the node, never by stopping the work.
//!
//! - [`observe`]: the node view every answer reads, health (also checked in the background, so
//!   a scrape and the CNI server's "OVS is down" answer never wait for OVS), and the
//!   `/metrics`, `/livez`, `/readyz` endpoint.
//! - [`api`]: the root-only local API `sdnctl` asks (status, pods, namespaces, flows by owner,
//!   trace, bundle, egress firewalls and IPs, network policies, log and log level); its wire
//!   types are the `local-api` crate.
//! - [`trace`]: one packet through br0's real tables (`ofproto/trace`), each step named by its
//!   table and owner, the verdict in words.

pub(crate) mod api;
pub(crate) mod observe;
pub(crate) mod trace;
