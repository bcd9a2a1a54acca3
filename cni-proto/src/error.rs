//! The CNI error object: what the runtime reads on a failed plugin's stdout,
//! `{"cniVersion","code","msg","details"}`.
//!
//! A [`CniError`] carries a spec code (or ours, 100 and above, see [`crate::codes`]), a one-line
//! `msg` that names the field or object and the offending value, and `details` (which step
//! failed, what to do; may be empty). It is built where the failure is understood, with the
//! per-code constructors, so the code is chosen once. The agent renders it in the cniVersion the
//! runtime asked for and the shim prints the agent's rendering verbatim; the shim's own failures
//! (no agent, bad stdin) are rendered by the same code.

use std::fmt;

use serde::Serialize;

use crate::codes;
use crate::version::CniVersion;

/// A CNI error object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CniError {
    /// The spec error code (or ours, 100 and above).
    pub code: u32,
    /// One line naming the field/object and the offending value; lowercase, no trailing period.
    pub msg: String,
    /// More context (which step, what to do); may be empty.
    pub details: String,
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CNI error {}: {}", self.code, self.msg)?;
        if !self.details.is_empty() {
            write!(f, " ({})", self.details)?;
        }
        Ok(())
    }
}

impl std::error::Error for CniError {}

#[derive(Serialize)]
struct Wire<'a> {
    #[serde(rename = "cniVersion")]
    cni_version: &'a str,
    code: u32,
    msg: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    details: &'a str,
}

impl CniError {
    /// An error with an explicit code.
    pub fn new(code: u32, msg: impl Into<String>, details: impl Into<String>) -> Self {
        CniError {
            code,
            msg: msg.into(),
            details: details.into(),
        }
    }

    /// Replaces the details.
    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// Code 1: incompatible CNI version.
    pub fn incompatible_version(msg: impl Into<String>) -> Self {
        Self::new(codes::INCOMPATIBLE_VERSION, msg, "")
    }

    /// Code 2: unsupported field in the network configuration.
    pub fn unsupported_field(msg: impl Into<String>) -> Self {
        Self::new(codes::UNSUPPORTED_FIELD, msg, "")
    }

    /// Code 3: container unknown or does not exist.
    pub fn unknown_container(msg: impl Into<String>) -> Self {
        Self::new(codes::UNKNOWN_CONTAINER, msg, "")
    }

    /// Code 4: invalid environment variable (CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_ARGS...).
    pub fn invalid_env(msg: impl Into<String>) -> Self {
        Self::new(codes::INVALID_ENV, msg, "")
    }

    /// Code 5: I/O failure.
    pub fn io_failure(msg: impl Into<String>) -> Self {
        Self::new(codes::IO_FAILURE, msg, "")
    }

    /// Code 6: failed to decode content.
    pub fn decode(msg: impl Into<String>) -> Self {
        Self::new(codes::DECODE_FAILURE, msg, "")
    }

    /// Code 7: invalid network configuration.
    pub fn invalid_config(msg: impl Into<String>) -> Self {
        Self::new(codes::INVALID_CONFIG, msg, "")
    }

    /// Code 11: try again later.
    pub fn try_again_later(msg: impl Into<String>) -> Self {
        Self::new(codes::TRY_AGAIN_LATER, msg, "")
    }

    /// Code 50 (STATUS): the plugin is not available.
    pub fn plugin_not_available(msg: impl Into<String>) -> Self {
        Self::new(codes::PLUGIN_NOT_AVAILABLE, msg, "")
    }

    /// Code 51 (STATUS): not available, existing containers may have limited connectivity.
    pub fn limited_connectivity(msg: impl Into<String>) -> Self {
        Self::new(codes::LIMITED_CONNECTIVITY, msg, "")
    }

    /// Code 100 (ours): internal failure; say which step in `details`.
    pub fn internal(msg: impl Into<String>) -> Self {
        Self::new(codes::INTERNAL, msg, "")
    }

    /// Code 101 (ours): the peer is not allowed to use the agent.
    pub fn permission_denied(msg: impl Into<String>) -> Self {
        Self::new(codes::PERMISSION_DENIED, msg, "")
    }

    /// Whether the error is the client's fault (spec codes 1 to 7).
    pub fn is_client_error(&self) -> bool {
        (1..=7).contains(&self.code)
    }

    /// The CNI error object as one line of JSON, with `cniVersion` set to `version`; `details`
    /// is omitted when empty (as libcni does).
    pub fn to_json(&self, version: CniVersion) -> String {
        self.to_json_tagged(version.as_str())
    }

    /// [`CniError::to_json`] with the version as a string (the shim tags its own errors with
    /// the config's `cniVersion` text, or a fallback when that is unusable).
    pub fn to_json_tagged(&self, cni_version: &str) -> String {
        let wire = Wire {
            cni_version,
            code: self.code,
            msg: &self.msg,
            details: &self.details,
        };
        // Serialising a struct of strings and integers cannot fail; the fallback keeps this
        // panic-free.
        serde_json::to_string(&wire).unwrap_or_else(|_| {
            format!(
                "{{\"cniVersion\":\"1.0.0\",\"code\":{},\"msg\":\"unencodable error\"}}",
                self.code
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_use_spec_codes() {
        let cases = [
            (CniError::incompatible_version("x"), 1),
            (CniError::unsupported_field("x"), 2),
            (CniError::unknown_container("x"), 3),
            (CniError::invalid_env("x"), 4),
            (CniError::io_failure("x"), 5),
            (CniError::decode("x"), 6),
            (CniError::invalid_config("x"), 7),
            (CniError::try_again_later("x"), 11),
            (CniError::plugin_not_available("x"), 50),
            (CniError::limited_connectivity("x"), 51),
            (CniError::internal("x"), 100),
            (CniError::permission_denied("x"), 101),
        ];
        for (e, code) in cases {
            assert_eq!(e.code, code);
            assert_eq!(e.is_client_error(), (1..=7).contains(&code));
        }
    }

    #[test]
    fn error_json_per_version() {
        let e = CniError::invalid_env("netns \"x\" is not absolute").with_details("set CNI_NETNS");
        assert_eq!(
            e.to_json(CniVersion::V0_3_1),
            r#"{"cniVersion":"0.3.1","code":4,"msg":"netns \"x\" is not absolute","details":"set CNI_NETNS"}"#
        );
        let e = CniError::try_again_later("busy");
        assert_eq!(
            e.to_json(CniVersion::V1_0_0),
            r#"{"cniVersion":"1.0.0","code":11,"msg":"busy"}"#
        );
        assert_eq!(e.to_string(), "CNI error 11: busy");
        let out = CniError::new(7, "bad \"name\"", "line1\nline2").to_json_tagged("0.4.0");
        assert!(!out.contains('\n'), "one line: {out}");
    }
}
