//! Name rules of the CNI spec and Kubernetes, in one place, each with its rule in words so
//! error messages can say what a valid value looks like.
//!
//! - container id (spec): `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`, non-empty; we cap the length at
//!   [`MAX_CONTAINER_ID_LEN`] (runtimes use 64 hex characters) so a hostile id cannot bloat logs
//!   or OVS external_ids;
//! - network name (spec): the same character rule; capped at 255 bytes because the IPAM uses it
//!   as a directory name;
//! - interface name (spec and kernel `dev_valid_name`): 1 to 15 bytes, not `.` or `..`, no `/`,
//!   `:`, whitespace; we also refuse control characters;
//! - Kubernetes namespace: a DNS-1123 label.

/// The maximum container id length we accept.
pub const MAX_CONTAINER_ID_LEN: usize = 256;

/// The maximum network name length we accept (a file name).
pub const MAX_NETWORK_NAME_LEN: usize = 255;

/// The maximum interface name length (IFNAMSIZ - 1).
pub const MAX_IFNAME_LEN: usize = 15;

/// The container id rule in words.
pub const CONTAINER_ID_RULE: &str =
    "1 to 256 characters: a letter or digit, then letters, digits, '_', '.' or '-'";

/// The network name rule in words.
pub const NETWORK_NAME_RULE: &str =
    "1 to 255 characters: a letter or digit, then letters, digits, '_', '.' or '-'";

/// The DNS-1123 label rule in words.
pub const DNS1123_LABEL_RULE: &str =
    "a DNS-1123 label: 1 to 63 lowercase letters, digits or '-', starting and ending with a letter or digit";

fn spec_name(s: &str, max: usize) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= max
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// Whether `s` is a valid CNI container id.
pub fn is_container_id(s: &str) -> bool {
    spec_name(s, MAX_CONTAINER_ID_LEN)
}

/// Whether `s` is a valid CNI network name.
pub fn is_network_name(s: &str) -> bool {
    spec_name(s, MAX_NETWORK_NAME_LEN)
}

/// Whether `s` is a DNS-1123 label (a Kubernetes namespace name).
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Checks an interface name; the error says what is wrong with it (without naming the field,
/// so callers can prefix `CNI_IFNAME` or `cni.dev/valid-attachments[i].ifname`).
pub fn check_ifname(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("is empty".into());
    }
    if s.len() > MAX_IFNAME_LEN {
        return Err(format!(
            "is {} bytes long; the kernel allows at most {MAX_IFNAME_LEN}",
            s.len()
        ));
    }
    if s == "." || s == ".." {
        return Err("is not a valid interface name ('.' and '..' are reserved)".into());
    }
    if let Some(c) = s
        .chars()
        .find(|c| *c == '/' || *c == ':' || c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "contains {c:?}; interface names may not contain '/', ':', whitespace or control characters"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1123_labels() {
        assert!(is_dns1123_label("a"));
        assert!(is_dns1123_label("kube-system"));
        assert!(!is_dns1123_label(""));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label("a-"));
        assert!(!is_dns1123_label("A"));
        assert!(!is_dns1123_label("a.b"));
        assert!(is_dns1123_label(&"a".repeat(63)));
        assert!(!is_dns1123_label(&"a".repeat(64)));
    }

    #[test]
    fn container_ids_and_network_names() {
        assert!(is_container_id("0123abcdef"));
        assert!(is_container_id("a_b.c-d"));
        assert!(!is_container_id(""));
        assert!(!is_container_id("_a"));
        assert!(!is_container_id(".a"));
        assert!(!is_container_id("a/b"));
        assert!(!is_container_id("a b"));
        assert!(!is_container_id("é"));
        assert!(is_container_id(&"a".repeat(MAX_CONTAINER_ID_LEN)));
        assert!(!is_container_id(&"a".repeat(MAX_CONTAINER_ID_LEN + 1)));
        assert!(is_network_name("sdn"));
        assert!(is_network_name("podman-net.1"));
        assert!(!is_network_name(".."));
        assert!(!is_network_name("a/b"));
        assert!(!is_network_name(&"a".repeat(256)));
    }

    #[test]
    fn interface_names() {
        for ok in ["eth0", "net1", "a", "123456789012345", "é"] {
            assert_eq!(check_ifname(ok), Ok(()), "{ok}");
        }
        assert_eq!(check_ifname(""), Err("is empty".into()));
        assert_eq!(
            check_ifname("1234567890123456"),
            Err("is 16 bytes long; the kernel allows at most 15".into())
        );
        // Bytes, not characters: 8 two-byte characters are 16 bytes.
        assert!(check_ifname("éééééééé").is_err());
        assert!(check_ifname(".").unwrap_err().contains("reserved"));
        assert!(check_ifname("..").unwrap_err().contains("reserved"));
        assert_eq!(
            check_ifname("eth/0"),
            Err("contains '/'; interface names may not contain '/', ':', whitespace or control characters".into())
        );
        assert!(check_ifname("eth:0")
            .unwrap_err()
            .starts_with("contains ':'"));
        assert!(check_ifname("eth 0")
            .unwrap_err()
            .starts_with("contains ' '"));
        assert!(check_ifname("eth\t0")
            .unwrap_err()
            .starts_with("contains '\\t'"));
        assert!(check_ifname("eth\u{0}")
            .unwrap_err()
            .starts_with("contains '\\0'"));
    }
}
