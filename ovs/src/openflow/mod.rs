//! Native OpenFlow 1.3 with the Nicira (NXM/NXAST) and ONF bundle extensions Open vSwitch speaks.
//!
//! - [`oxm`]: `Match` <-> `ofp_match` (OXM TLVs).
//! - [`actions`]: `Action`s and instructions <-> wire.
//! - [`flow_mod`]: flow_mod, group_mod and flow-stats bodies.
//! - [`meter`]: meter_mod and the meter config dump (kbit/s drop-band policers).
//! - [`monitor`]: the flow monitor (changes made by others, as they happen).
//! - [`packets`]: packets from the switch (`NXT_PACKET_IN2`, and the messages that ask for it) and to it (`OFPT_PACKET_OUT`).
//! - [`error`]: codec errors.
//! - [`wire`]: header framing, hello/echo/features/barrier, `OFPT_ERROR` with named codes.
//! - [`bundle`]: ONF bundle control and add messages (atomic commits in OpenFlow 1.3).
//! - [`client`]: [`OfClient`], the async connection to a switch.

pub mod actions;
pub mod bundle;
pub mod client;
pub mod error;
pub mod flow_mod;
pub mod meter;
pub mod monitor;
pub mod oxm;
pub mod packets;
mod reader;
pub mod wire;

pub use client::{
    BundleMsg, BundleStage, DumpFilter, OfClient, OfConfig, OfError, PacketIns, Target,
};
pub use error::CodecError;
pub use meter::{Meter, MeterModCommand, MeterStats, MeterUnit};
pub use monitor::{FlowEvent, FlowUpdate};
pub use packets::{PacketIn, PacketMetadata};
pub use wire::SwitchError;
