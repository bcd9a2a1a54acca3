//! The host plumbing (floor 1): what the agent does to the node's kernel and disk besides
//! br0, each behind a client the seams wrap (`crate::bridge::seams`).
//!
//! - [`netlink`]: pod veth pairs (or a macvlan on a warm pool veth), the pod's netns
//!   configuration (address, MAC `0a:58:<ip>`, routes, MTU), tun0 and the held egress IPs, over
//!   rtnetlink; the errors name the step and the kernel's message.
//! - [`iptables`]: the node's host rules (the `SDN-*` chains: masquerade, egress IP marks and
//!   SNAT, host ports), one `iptables-restore` per change.
//! - [`heap`]: the allocator's free memory given back to the kernel after large transient
//!   work (a full reconcile).
//! - [`ipam`]: host-local compatible address leases on disk, in process (no exec).
//!
//! Nothing here knows a pod, a tenant or a flow: the callers (node features, pod logic) do.

pub mod heap;
pub mod ipam;
pub mod iptables;
pub mod netlink;
