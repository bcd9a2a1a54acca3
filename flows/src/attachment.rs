//! The identity of a pod's attachment to the node network, `(container id, interface name)`,
//! and its one hash.
//!
//! Everything the agent names after an attachment derives from [`AttachmentId::hash`] (FNV-1a 64
//! of `"<container id>/<ifname>"`, stable across Rust versions and platforms): the host veth
//! name of a port the ADD creates itself (a pool port has its own name; the pod's flow cookie,
//! [`crate::port_cookie`], follows the port), the host-port nat chain and the egress meter id. Being derived from the attachment rather than from agent memory, they survive an
//! agent restart, and DEL finds them with no state at all.

use std::fmt;

/// FNV-1a 64 of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h: u64, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// One attachment: a container (sandbox) id and the interface name inside it.
#[derive(Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, Default)]
pub struct AttachmentId {
    /// The container (sandbox) id, `CNI_CONTAINERID`.
    pub container_id: String,
    /// The interface inside the container, `CNI_IFNAME`.
    pub ifname: String,
}

impl AttachmentId {
    /// The attachment `container_id`/`ifname`.
    pub fn new(container_id: impl Into<String>, ifname: impl Into<String>) -> AttachmentId {
        AttachmentId {
            container_id: container_id.into(),
            ifname: ifname.into(),
        }
    }

    /// The hash every name of the attachment derives from.
    pub fn hash(&self) -> u64 {
        fnv1a(self.to_string().as_bytes())
    }
}

impl fmt::Display for AttachmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.container_id, self.ifname)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_known_vectors_and_the_attachment_text() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        let a = AttachmentId::new("abc", "eth0");
        assert_eq!(a.to_string(), "abc/eth0");
        assert_eq!(a.hash(), fnv1a(b"abc/eth0"));
    }
}
