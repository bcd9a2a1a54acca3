//! Support for the integration tests in `tests/tests/`: private Open vSwitch instances in their
//! own network namespaces ([`harness`]), a whole node with the real agent and shim ([`node`]),
//! the flow corpus they install ([`corpus`]), and reachability probes and crafted packets run
//! inside network namespaces ([`probe`]).

pub mod corpus;
pub mod harness;
pub mod node;
pub mod probe;
