//! The node features (floor 3): each turns a part of the cluster state into br0 rows (through
//! the flow store) and, where it needs them, host rules and addresses.
//!
//! - [`remote`]: other nodes' HostSubnets into VXLAN rows (tables 10, 50, 90, 111).
//! - [`hostports`]: a pod's `portMappings` into DNAT rules to the pod through tun0.
//! - [`bandwidth`]: a pod's annotations or `runtimeConfig.bandwidth` into OVS values (pure).
//! - [`egress_firewall`]: EgressNetworkPolicy into table-100 rows per VNID, `dnsName` rules
//!   followed at their TTL.
//! - [`egress_ip`]: NetNamespace and HostSubnet egress IPs into table-101 rows and groups, the
//!   held addresses and their mark/SNAT rules, the probes of the hosting nodes.
//! - [`network_policy`]: networkpolicy mode: NetworkPolicies into tables 27 and 80, rebuilt on
//!   every change of what they read.
//!
//! Tenancy itself (each VNID's table-80 row, counted by its pods) and multicast (tables 110,
//! 111 and 120, rewritten from the pods' ports and the enabled VNIDs) are rows the flow store
//! keeps as pods come and go (`crate::bridge::flowstore`); the node's wiring feeds it the
//! cluster state's VNIDs and multicast set. Every feature fails closed: what it cannot apply
//! (a refused policy, an unusable egress IP) becomes a drop, with the reason logged and shown
//! by sdnctl.

pub mod bandwidth;
pub(crate) mod egress_firewall;
pub(crate) mod egress_ip;
pub mod hostports;
pub(crate) mod network_policy;
pub(crate) mod remote;
