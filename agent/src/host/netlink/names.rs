//! Interface names: the deterministic host-side veth name of a pod attachment, and the kernel's
//! rules for interface names, checked before any request so errors name the exact problem.
//!
//! The host veth name is a pure function of the attachment (container id, ifname) so that DEL
//! finds the veth even when the agent lost its state and OVS lost the port. It is `"veth"` plus
//! the first 11 hex digits of the attachment's hash (`flows::AttachmentId::hash`, FNV-1a-64 of
//! `"<container id>/<ifname>"`): 15 bytes, the kernel's
//! limit. 44 bits of hash make a collision between two live attachments on one node
//! astronomically unlikely (about 1 in 10^8 at 500 pods); a collision would make the second ADD
//! replace the first attachment's veth, as a stale one.

use super::NetlinkError;

/// The kernel's IFNAMSIZ minus the terminating NUL: the longest valid interface name in bytes.
pub const MAX_IFNAME_LEN: usize = 15;

use flows::AttachmentId;

/// The name of the host end of the veth of attachment (`container_id`, `ifname`):
/// `"veth"` + the first 11 hex digits (lowercase) of FNV-1a-64 of `"<container_id>/<ifname>"`.
///
/// Always 15 bytes, a valid interface name whatever the inputs.
pub fn host_veth_name(container_id: &str, ifname: &str) -> String {
    let hash = AttachmentId::new(container_id, ifname).hash();
    // The first 11 of 16 hex digits are the top 44 bits.
    format!("veth{:011x}", hash >> 20)
}

/// Checks `name` against the kernel's rules for interface names (`dev_valid_name`): 1 to 15
/// bytes, not `.` or `..`, no `/`, `:`, NUL or whitespace (as the kernel's `isspace`, which also
/// counts byte 0xa0). `%` is refused too: the kernel accepts it but treats the name as a
/// template (`eth%d`) and picks another name, which later lookups by name would not find.
pub fn validate_ifname(name: &str) -> Result<(), NetlinkError> {
    let invalid = |reason: String| {
        Err(NetlinkError::InvalidName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return invalid("empty".into());
    }
    if name.len() > MAX_IFNAME_LEN {
        return invalid(format!(
            "{} bytes long, the kernel allows at most {MAX_IFNAME_LEN}",
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return invalid("\".\" and \"..\" are reserved".into());
    }
    for (i, b) in name.bytes().enumerate() {
        let what = match b {
            b'/' => "'/'",
            b':' => "':'",
            b'%' => "'%' (the kernel treats it as a name template)",
            0 => "a NUL byte",
            b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | 0xa0 => "whitespace",
            _ => continue,
        };
        return invalid(format!("contains {what} at byte {i}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flows::attachment::fnv1a as fnv1a64;

    #[test]
    fn fnv1a64_known_vectors() {
        // Reference values of the FNV specification.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn host_veth_name_is_deterministic_and_valid() {
        let a = host_veth_name("abc", "eth0");
        assert_eq!(a, host_veth_name("abc", "eth0"));
        assert_eq!(a.len(), 15);
        assert!(a.starts_with("veth"));
        assert!(a[4..]
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(a, host_veth_name("abc", "eth1"));
        assert_ne!(a, host_veth_name("abd", "eth0"));
        validate_ifname(&a).unwrap();
        // The first 11 hex digits of the hash of "abc/eth0".
        let full = format!("{:016x}", fnv1a64(b"abc/eth0"));
        assert_eq!(a, format!("veth{}", &full[..11]));
    }

    #[test]
    fn validate_ifname_accepts_kernel_valid_names() {
        for ok in ["eth0", "a", "net1", "veth0123456789a", "e-th_0.1", "ÿ"] {
            validate_ifname(ok).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
        }
    }

    #[test]
    fn validate_ifname_rejects_with_precise_messages() {
        let cases = [
            ("", "invalid interface name \"\": empty"),
            (
                "0123456789abcdef",
                "invalid interface name \"0123456789abcdef\": 16 bytes long, the kernel allows at most 15",
            ),
            (".", "invalid interface name \".\": \".\" and \"..\" are reserved"),
            ("..", "invalid interface name \"..\": \".\" and \"..\" are reserved"),
            ("a/b", "invalid interface name \"a/b\": contains '/' at byte 1"),
            ("eth0:1", "invalid interface name \"eth0:1\": contains ':' at byte 4"),
            ("eth 0", "invalid interface name \"eth 0\": contains whitespace at byte 3"),
            ("eth\t0", "invalid interface name \"eth\\t0\": contains whitespace at byte 3"),
            (
                "eth%d",
                "invalid interface name \"eth%d\": contains '%' (the kernel treats it as a name template) at byte 3",
            ),
            ("a\0b", "invalid interface name \"a\\0b\": contains a NUL byte at byte 1"),
            // U+00E0 is C3 A0 in UTF-8; the kernel's isspace(0xa0) is true.
            ("\u{e0}", "invalid interface name \"\u{e0}\": contains whitespace at byte 1"),
        ];
        for (name, msg) in cases {
            let err = validate_ifname(name).unwrap_err();
            assert_eq!(err.to_string(), msg);
        }
    }
}
