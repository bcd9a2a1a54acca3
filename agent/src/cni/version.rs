//! CNI specification versions: the closed set the shim and the agent speak, defined once in the
//! `cni-proto` crate (see its `version` module for what each version allows).

pub use cni_proto::version::{CniVersion, UnsupportedVersion, SUPPORTED_VERSIONS};
