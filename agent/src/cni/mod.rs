//! The CNI front door (floor 1): the types of the CNI specification (versions, commands, errors,
//! `CNI_ARGS`, network configuration, results), the plugins a conflist chains after sdn-cni
//! ([`chain`]), and the server the `sdn-cni` shim talks to. It knows nothing of pods: the
//! server calls a [`Handler`], which the node's wiring implements (`crate::node`), and the pod
//! logic takes the spec types from here.
//!
//! Layering (see `server`): the shim forwards the runtime's environment and stdin as one JSON
//! body over a Unix socket; [`server`] validates it into a [`Request`] and calls a [`Handler`]
//! (the pod logic, elsewhere), then renders the [`AddResult`] or [`CniError`] in the cniVersion
//! the runtime asked for. Everything except the server and the netns check is pure and
//! unit-tested here; the server is tested end to end over a real socket in
//! `tests/tests/cni_server.rs`.

pub mod args;
pub mod chain;
pub mod config;
pub mod names;
pub mod request;
pub mod result;
pub mod server;
pub mod types;
pub mod version;

pub use args::{CniArgs, RequestedIp};
pub use config::{NetConf, ValidAttachment};
pub use request::{check_netns, Request, RequestBody};
pub use result::{AddResult, Dns, Interface, IpConfig, Route};
pub use server::{serve, Handler, ServerError, ServerHandle, ServerOptions};
pub use types::{codes, parse_command, CniError, Command};
pub use version::CniVersion;
