//! YAML as this project reads and writes it, in one place (serde-saphyr, the pure-Rust YAML
//! crate kube-rs itself uses, so the agent carries one YAML implementation and no libyaml).
//!
//! Reading (configuration files, the standalone state directory): YAML 1.2 Core scalars, as
//! the deprecated `serde_yaml` read them before: only `true`/`false` are booleans (a namespace
//! or node called `no`, `y` or `on` stays a string), `0755` and `1_000` stay strings when the
//! target is untyped.
//!
//! Writing: state files as YAML 1.2 (addresses such as `10.0.0.1` unquoted, strings on one
//! line); manifests for the Kubernetes API (`sdn-agent crds`) with YAML 1.1-safe quoting, since
//! kubectl's parser still reads `yes`/`no`/`on`/`off` as booleans.

use serde::de::DeserializeOwned;
use serde::Serialize;

pub use serde_saphyr::{Error, SerializeError};

fn read_options() -> serde_saphyr::Options {
    let mut o = serde_saphyr::Options::default();
    o.strict_booleans = true;
    o.leading_zero_numbers_as_strings = true;
    o.underscored_numbers_as_strings = true;
    o
}

/// One YAML (or JSON) document.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    serde_saphyr::from_str_with_options(text, read_options())
}

/// Every document of a YAML stream (`---`-separated); empty documents are skipped.
pub fn from_multiple<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, Error> {
    serde_saphyr::from_multiple_with_options(text, read_options())
}

/// A value as a state file holds it: YAML 1.2, no directive, strings on one line.
pub fn to_state_text<T: Serialize>(value: &T) -> Result<String, SerializeError> {
    let mut o = serde_saphyr::SerializerOptions::default();
    o.yaml_12 = true;
    o.no_lang_directive = true;
    o.prefer_block_scalars = false;
    serde_saphyr::to_string_with_options(value, o)
}

/// A value as a manifest for kubectl: ambiguous strings quoted for YAML 1.1 readers, strings on
/// one line.
pub fn to_manifest_text<T: Serialize>(value: &T) -> Result<String, SerializeError> {
    let mut o = serde_saphyr::SerializerOptions::default();
    o.prefer_block_scalars = false;
    serde_saphyr::to_string_with_options(value, o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn reads_yaml_1_2_scalars_as_serde_yaml_did() {
        let v: Value = from_str("a: n\nb: yes\nc: true\nd: 0755\ne: 1_000\nf: 9\n").unwrap();
        assert_eq!(
            v,
            json!({"a": "n", "b": "yes", "c": true, "d": "0755", "e": "1_000", "f": 9})
        );
        let docs: Vec<Value> = from_multiple("---\na: 1\n---\n---\nb: off\n").unwrap();
        assert_eq!(docs, vec![json!({"a": 1}), json!({"b": "off"})]);
    }

    #[test]
    fn state_text_round_trips_and_manifests_quote_for_yaml_1_1() {
        let v = json!({"host": "n", "hostIP": "192.168.1.10", "flag": "yes"});
        let text = to_state_text(&v).unwrap();
        assert!(text.contains("hostIP: 192.168.1.10"), "{text}");
        assert_eq!(from_str::<Value>(&text).unwrap(), v);
        let text = to_manifest_text(&v).unwrap();
        assert!(!text.contains("flag: yes"), "{text}");
        assert_eq!(from_str::<Value>(&text).unwrap(), v);
    }
}
