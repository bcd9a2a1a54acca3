//! The CNI protocol as both ends of this project speak it: the `sdn-cni` shim, which the
//! container runtime executes, and `sdn-agent`, which the shim forwards requests to.
//!
//! Everything that must be the same on both ends is defined here once: the CNI commands and the
//! environment each needs ([`Command`]), the spec's error codes and ours ([`codes`]), the error
//! object the runtime reads ([`CniError`]), the supported CNI versions ([`CniVersion`]), and the
//! body of `POST /cni` on the agent's socket ([`RequestBody`], with a [`PROTOCOL`] number so a
//! shim and an agent of different releases recognise each other).
//!
//! Why a crate of its own, with std, serde and serde_json only: the shim is executed once per
//! pod operation and must stay small and start fast, so it cannot pull in the agent (tokio,
//! kube, netlink). Before this crate the shim and the agent each had their own copy of these
//! lists and they could drift apart.

pub mod body;
pub mod codes;
pub mod command;
pub mod error;
pub mod version;

pub use body::{RequestBody, ENDPOINT, PROTOCOL};
pub use command::Command;
pub use error::CniError;
pub use version::{CniVersion, UnsupportedVersion, SUPPORTED_VERSIONS};

/// The agent's socket when the network config has no `socket` key.
pub const DEFAULT_SOCKET: &str = "/var/run/sdn/cni.sock";

/// The shim's deadline in seconds when the network config has no `timeoutSeconds` key.
pub const DEFAULT_TIMEOUT_SECS: u64 = 120;
