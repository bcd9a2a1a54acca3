//! Support for the integration tests in `tests/tests/`: private Open vSwitch instances in their
//! own network namespaces ([`harness`]) and the flow corpus they install ([`corpus`]).

pub mod corpus;
pub mod harness;
