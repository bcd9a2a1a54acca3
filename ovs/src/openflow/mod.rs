//! Native OpenFlow 1.3 with the Nicira (NXM/NXAST) and ONF bundle extensions Open vSwitch speaks.
//!
//! - [`oxm`]: `Match` <-> `ofp_match` (OXM TLVs).
//! - [`actions`]: `Action`s and instructions <-> wire.
//! - [`flow_mod`]: flow_mod, group_mod and flow-stats bodies.
//! - [`error`]: codec errors.

pub mod actions;
pub mod error;
pub mod flow_mod;
pub mod oxm;

pub use error::CodecError;
