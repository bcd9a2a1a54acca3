//! What the agent counts and logs (the ground floor: every other part may use it, it uses none
//! of them).
//!
//! - [`metrics`]: the Prometheus registry every part updates (CNI requests by command and
//!   result, pod operation latency, repairs, reconnects, flow counts...); the operator surface
//!   serves it on `/metrics`.
//! - [`logging`]: the process's `tracing` subscriber: text or JSON to stderr, a level that can be
//!   changed while running, and the last lines kept in memory for `sdnctl log` and bundles.

pub mod logging;
pub(crate) mod metrics;
