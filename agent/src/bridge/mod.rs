//! br0 and the seams (floor 2): the OpenFlow connection, the desired flows by owner, and the
//! thin traits every I/O of the pod and node logic goes through.
//!
//! - [`switch`]: the OpenFlow connection to `br0.mgmt`, re-opened at once when it closes, with a
//!   flow monitor on every connection (changes by anyone else are drift).
//! - [`flowstore`]: every desired flow by owner (base pipeline, pod, remote node, VNID row with
//!   a reference count, multicast rows that follow the pods' ports, egress firewall, egress IP,
//!   policy); "bundle, then record"; the full reconcile is one diff against the switch.
//! - [`seams`]: `PortDb`, `FlowSwitch`, `PodLinks`, `NatRules`, each method stating its
//!   idempotency and atomicity; `HostIo` is the real clients.
//! - `fake` (tests only): stateful fakes of every seam that refuse what the real thing refuses,
//!   so component tests run ADD's rollback, DEL, GC and restarts without root.

#[cfg(test)]
pub(crate) mod fake;
pub(crate) mod flowstore;
pub(crate) mod seams;
pub(crate) mod switch;
