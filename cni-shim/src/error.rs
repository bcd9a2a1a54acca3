//! CNI error objects produced by the shim itself, and the spec's error codes.
//!
//! The runtime reads a failed plugin's stdout as `{"cniVersion","code","msg","details"}`, so
//! every failure path of the shim ends here: there is no other way for the shim to fail (no
//! panics, no text on stdout). The object is written by hand, in the spec's field order, to keep
//! the binary small and the output stable. Errors that the agent sends are not rebuilt here:
//! the shim prints those verbatim (see `agent.rs`).
//!
//! Limits: `details` is always present (possibly empty); the code is not checked against the
//! command (the spec reserves 50 and 51 for STATUS, and the shim only uses them there).

use std::fmt;

/// Code 1: the network config asks for a CNI version the shim does not support.
pub const INCOMPATIBLE_VERSION: u32 = 1;
/// Code 4: a CNI environment variable is missing or invalid.
pub const INVALID_ENV: u32 = 4;
/// Code 5: I/O failure (stdin unreadable, agent hung up or sent garbage).
pub const IO_FAILURE: u32 = 5;
/// Code 6: stdin is not a JSON object.
pub const DECODE_FAILURE: u32 = 6;
/// Code 7: the network config is invalid.
pub const INVALID_CONFIG: u32 = 7;
/// Code 11: try again later (the agent is not running or did not answer in time).
pub const TRY_AGAIN_LATER: u32 = 11;
/// Code 50: STATUS only, the plugin cannot serve ADD requests now.
pub const PLUGIN_NOT_AVAILABLE: u32 = 50;

/// The version used for errors when the config's version is unknown or unsupported.
pub const FALLBACK_VERSION: &str = "1.0.0";

/// An error the shim reports itself, rendered as a CNI error object by [`CniError::render`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniError {
    /// The CNI error code (see the constants of this module).
    pub code: u32,
    /// Short description, lowercase, no trailing period.
    pub msg: String,
    /// What exactly went wrong and what to do about it.
    pub details: String,
}

impl CniError {
    /// An error with `code`, `msg` and `details`.
    pub fn new(code: u32, msg: impl Into<String>, details: impl Into<String>) -> CniError {
        CniError {
            code,
            msg: msg.into(),
            details: details.into(),
        }
    }

    /// The CNI error object as one line of JSON (no trailing newline), tagged `cni_version`.
    pub fn render(&self, cni_version: &str) -> String {
        format!(
            "{{\"cniVersion\":{},\"code\":{},\"msg\":{},\"details\":{}}}",
            json_str(cni_version),
            self.code,
            json_str(&self.msg),
            json_str(&self.details)
        )
    }
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "code {}: {}: {}", self.code, self.msg, self.details)
    }
}

/// `s` as a JSON string literal (quoted and escaped).
pub fn json_str(s: &str) -> String {
    // Serialising a &str cannot fail; the fallback only keeps this panic-free.
    serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_spec_fields_and_escapes() {
        let e = CniError::new(7, "bad \"name\"", "line1\nline2");
        let out = e.render("0.4.0");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["cniVersion"], "0.4.0");
        assert_eq!(v["code"], 7);
        assert_eq!(v["msg"], "bad \"name\"");
        assert_eq!(v["details"], "line1\nline2");
        assert!(!out.contains('\n'), "one line: {out}");
        assert!(out.starts_with("{\"cniVersion\":\"0.4.0\",\"code\":7,"));
    }
}
