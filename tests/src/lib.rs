//! Support for the integration tests in `tests/tests/`: private Open vSwitch instances in their
//! own network namespaces ([`harness`]). Every integration test of the project uses it.

pub mod harness;
