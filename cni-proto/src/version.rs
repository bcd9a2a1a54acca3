//! CNI specification versions the shim and the agent speak, and what each one allows.
//!
//! The set is closed (0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0): an enum rather than a semver triple,
//! so "does this version have CHECK" is a match, not a comparison against magic numbers. The
//! ordering is the specification's chronology. Older versions (0.1.0, 0.2.0) are not supported:
//! their result format (`ip4`/`ip6`) differs and no runtime we target still sends them.

use std::fmt;
use std::str::FromStr;

/// A supported CNI specification version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CniVersion {
    /// 0.3.0: the `interfaces`/`ips`/`routes` result format.
    V0_3_0,
    /// 0.3.1: same result format as 0.3.0.
    V0_3_1,
    /// 0.4.0: adds CHECK and `prevResult` on DEL.
    V0_4_0,
    /// 1.0.0: drops `version` from `ips` entries.
    V1_0_0,
    /// 1.1.0: adds GC and STATUS, interface `mtu`.
    V1_1_0,
}

/// Every supported version, oldest first.
pub const SUPPORTED_VERSIONS: [CniVersion; 5] = [
    CniVersion::V0_3_0,
    CniVersion::V0_3_1,
    CniVersion::V0_4_0,
    CniVersion::V1_0_0,
    CniVersion::V1_1_0,
];

impl CniVersion {
    /// The newest supported version: what VERSION answers when the runtime asked for none we
    /// speak.
    pub const LATEST: CniVersion = CniVersion::V1_1_0;

    /// The version string as it appears in `cniVersion`.
    pub const fn as_str(self) -> &'static str {
        match self {
            CniVersion::V0_3_0 => "0.3.0",
            CniVersion::V0_3_1 => "0.3.1",
            CniVersion::V0_4_0 => "0.4.0",
            CniVersion::V1_0_0 => "1.0.0",
            CniVersion::V1_1_0 => "1.1.0",
        }
    }

    /// Whether the CHECK command exists in this version (0.4.0 and later).
    pub fn supports_check(self) -> bool {
        self >= CniVersion::V0_4_0
    }

    /// Whether the GC and STATUS commands exist in this version (1.1.0 and later).
    pub fn supports_gc_and_status(self) -> bool {
        self >= CniVersion::V1_1_0
    }

    /// Whether result `ips` entries carry a `"version"` field (before 1.0.0).
    pub fn ips_have_version(self) -> bool {
        self < CniVersion::V1_0_0
    }

    /// Whether result interfaces may carry `mtu` (1.1.0 and later).
    pub fn interfaces_have_mtu(self) -> bool {
        self >= CniVersion::V1_1_0
    }

    /// The supported versions as a comma-separated list, for error messages.
    pub fn supported_list() -> String {
        SUPPORTED_VERSIONS
            .iter()
            .map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for CniVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `cniVersion` string this project does not speak.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsupportedVersion(pub String);

impl fmt::Display for UnsupportedVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cniVersion {:?} is not supported (supported: {})",
            self.0,
            CniVersion::supported_list()
        )
    }
}

impl std::error::Error for UnsupportedVersion {}

impl FromStr for CniVersion {
    type Err = UnsupportedVersion;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SUPPORTED_VERSIONS
            .iter()
            .copied()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| UnsupportedVersion(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_round_trips_every_supported_version() {
        for v in SUPPORTED_VERSIONS {
            assert_eq!(v.as_str().parse::<CniVersion>().unwrap(), v);
            assert_eq!(v.to_string(), v.as_str());
        }
    }

    #[test]
    fn unsupported_versions_are_rejected_with_the_list() {
        for s in ["0.2.0", "0.1.0", "1.2.0", "", "1.0", "v1.0.0", " 1.0.0"] {
            let err = s.parse::<CniVersion>().unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("cniVersion {s:?} is not supported (supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0)")
            );
        }
    }

    #[test]
    fn ordering_and_capabilities() {
        let mut sorted = SUPPORTED_VERSIONS;
        sorted.reverse();
        sorted.sort();
        assert_eq!(sorted, SUPPORTED_VERSIONS);
        assert!(CniVersion::V0_3_1 < CniVersion::V0_4_0);
        assert!(!CniVersion::V0_3_1.supports_check());
        assert!(CniVersion::V0_4_0.supports_check());
        assert!(!CniVersion::V1_0_0.supports_gc_and_status());
        assert!(CniVersion::V1_1_0.supports_gc_and_status());
        assert!(CniVersion::V0_4_0.ips_have_version());
        assert!(!CniVersion::V1_0_0.ips_have_version());
        assert!(!CniVersion::V1_0_0.interfaces_have_mtu());
        assert!(CniVersion::V1_1_0.interfaces_have_mtu());
    }
}
