//! The integration tests of the workspace, as one test binary (the 5,000-node simulations
//! aside, in `large`): each file of this directory is a module (`cargo test -p sdn-tests --test integration -- chains::` runs one file,
//! `-- chains::a_chain_configured_outside` one test).
//!
//! Why one binary: each of the 46 files was a binary of its own, and each linked tokio, kube,
//! hyper and the agent; a clean build spent most of its time and disk on those links
//! (docs/testing.md, "Build time and size"). One binary links them once. Tests of different
//! files may now run at the same time: every test names what it creates uniquely
//! (`harness::unique_name`), keeps its OVS, agents and namespaces to itself, and no file sets
//! process-wide state other files read. The files whose tests simulate a cluster of 5,000 nodes
//! (`large_cluster`, `network_policy`) are a second binary, `large` (tests/tests/large.rs),
//! which runs after this one: next to the other tests they starved past their bounds.

mod audit;
mod bandwidth;
mod chains;
mod cluster_policy_files;
mod cluster_state;
mod cni_server;
mod corpus;
mod deploy;
mod dual_stack;
mod egress_firewall;
mod egress_ip;
mod egress_ip6;
mod fakeapi;
mod faults;
mod flow_text;
mod harness;
mod hostports;
mod image;
mod ipam;
mod iptables;
mod ipv6_only;
mod kube_cluster;
mod kube_mode;
mod kubectl;
mod layers;
mod libcni;
mod live_trace;
mod meters;
mod migration;
mod mixed_cluster;
mod multicast;
mod multinode;
mod netlink;
mod node;
mod observe;
mod openflow;
mod openflow_codec;
mod openshift_sdn;
mod ovsdb;
mod packets;
mod parsers;
mod podman;
mod probe;
mod purity;
mod qos;
mod readme;
mod sdnctl;
mod services;
mod shim;
mod spoofing;
mod takeover;
mod tenants;
