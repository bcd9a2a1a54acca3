//! The shim's own failures as CNI error objects.
//!
//! The runtime reads a failed plugin's stdout as `{"cniVersion","code","msg","details"}`, so
//! every failure path of the shim ends here: there is no other way for the shim to fail (no
//! panics, no text on stdout). The object, its codes and its rendering are `cni-proto`'s, the
//! same the agent uses. Errors that the agent sends are not rebuilt here: the shim prints those
//! verbatim (see `agent.rs`).
//!
//! Limits: every error the shim makes itself has non-empty `details` (what to do); the code is
//! not checked against the command (the spec reserves 50 and 51 for STATUS, and the shim only
//! uses them there).

pub(crate) use cni_proto::codes::{
    DECODE_FAILURE, INCOMPATIBLE_VERSION, INVALID_CONFIG, INVALID_ENV, IO_FAILURE,
    PLUGIN_NOT_AVAILABLE, TRY_AGAIN_LATER,
};
pub(crate) use cni_proto::CniError;

/// The version used for errors when the config's version is unknown or unsupported.
pub(crate) const FALLBACK_VERSION: &str = "1.0.0";

/// `s` as a JSON string literal (quoted and escaped).
pub(crate) fn json_str(s: &str) -> String {
    // Serialising a &str cannot fail; the fallback only keeps this panic-free.
    serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_spec_fields_and_escapes() {
        let e = CniError::new(7, "bad \"name\"", "line1\nline2");
        let out = e.to_json_tagged("0.4.0");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["cniVersion"], "0.4.0");
        assert_eq!(v["code"], 7);
        assert_eq!(v["msg"], "bad \"name\"");
        assert_eq!(v["details"], "line1\nline2");
        assert!(!out.contains('\n'), "one line: {out}");
        assert!(out.starts_with("{\"cniVersion\":\"0.4.0\",\"code\":7,"));
    }
}
