//! Support for the integration tests in `tests/tests/`: private Open vSwitch instances in their
//! own network namespaces ([`harness`]), a whole node with the real agent and shim ([`node`]),
//! several such nodes joined by a VXLAN underlay and sharing one cluster state ([`cluster`]),
//! podman as the runtime ([`podman`]), reachability probes and crafted packets run inside network
//! namespaces ([`probe`]), the isolation matrix built on them ([`matrix`]), and the flow corpus
//! they install ([`corpus`]). [`fakeapi`] is a fake Kubernetes API server (HTTP, kube-rs
//! compatible) for the Kubernetes-mode and multi-node tests; [`kubeproxy`] writes Service rules
//! shaped like kube-proxy's iptables mode.

pub mod cluster;
pub mod cnp_conformance;
pub mod corpus;
pub mod dns;
pub mod fakeapi;
pub mod harness;
pub mod kubeproxy;
pub mod matrix;
pub mod node;
pub mod openshift_sdn;
pub mod podman;
pub mod probe;
pub mod probe6;
pub mod simulated;
