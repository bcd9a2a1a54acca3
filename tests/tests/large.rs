//! The integration tests that simulate a cluster of 5,000 nodes (a fake API server with 5,000
//! HostSubnets and NetNamespaces, 150,000 pods and 10,000 NetworkPolicies for the policy truth
//! tables), as a test binary of their own: cargo runs it after `integration`, so they never
//! share the two cores with the rest of the suite, and the 5,000-node tests take
//! `harness::one_large_cluster_at_a_time` among themselves. One file: `cargo test -p sdn-tests
//! --test large -- large_cluster::`.

mod large_cluster;
mod network_policy;
