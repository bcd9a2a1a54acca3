//! The error type of the netlink module, and the conversion of rtnetlink failures into system
//! errors that keep the errno and the kernel's own explanation (the extended ack message, e.g.
//! "Nexthop has invalid gateway"), which the sockets request with `NETLINK_EXT_ACK`.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// What went wrong in a netlink, ethtool or sysctl operation. Every message names the step and
/// the object (interface, address, route, netns) it failed on.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// An interface name breaks the kernel's rules (see [`super::validate_ifname`]).
    #[error("invalid interface name {name:?}: {reason}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A pod link specification is inconsistent (checked before anything is created).
    #[error("invalid pod link spec for {ifname} in netns {}: {reason}", netns.display())]
    InvalidSpec {
        /// The pod netns.
        netns: PathBuf,
        /// The pod interface name.
        ifname: String,
        /// What is wrong.
        reason: String,
    },
    /// The pod netns already holds an interface with the requested name; nothing was created.
    #[error(
        "interface {ifname} already exists in netns {}: another attachment of this sandbox uses \
         that interface name (choose another CNI_IFNAME or delete the attachment first)",
        netns.display()
    )]
    PodInterfaceExists {
        /// The pod netns.
        netns: PathBuf,
        /// The interface name.
        ifname: String,
    },
    /// An interface that must exist does not.
    #[error("interface {ifname} not found in {netns}")]
    LinkNotFound {
        /// The interface name.
        ifname: String,
        /// Where it was looked up: `the node netns` or `netns <path>`.
        netns: String,
    },
    /// An interface did not appear within the bounded wait.
    #[error("interface {ifname} did not appear in the node netns within {waited:?}{hint}")]
    LinkWaitTimeout {
        /// The interface name.
        ifname: String,
        /// How long we waited.
        waited: Duration,
        /// What usually creates it, as `" (...)"`, or empty.
        hint: String,
    },
    /// Opening or entering a network namespace failed.
    #[error("{action} netns {}: {source}", netns.display())]
    Netns {
        /// The netns path.
        netns: PathBuf,
        /// `opening`, `entering`...
        action: &'static str,
        /// The system error.
        source: io::Error,
    },
    /// A system call or netlink request failed.
    #[error("{step}: {source}{}", kernel_says(.extack))]
    Os {
        /// The step and its object, e.g. `adding route 0.0.0.0/0 via 10.128.0.1 in netns /run/netns/x`.
        step: String,
        /// The system error (errno).
        source: io::Error,
        /// The kernel's extended ack message, when it gave one.
        extack: Option<String>,
    },
    /// A netlink operation did not finish within its bound.
    #[error("{step}: timed out after {after:?}")]
    Timeout {
        /// The operation.
        step: String,
        /// The bound that expired.
        after: Duration,
    },
    /// [`super::Netlink::new`] was called outside a tokio runtime.
    #[error("netlink: Netlink::new must be called inside a tokio runtime")]
    NoRuntime,
}

fn kernel_says(extack: &Option<String>) -> String {
    match extack {
        Some(msg) => format!(" (kernel: {msg})"),
        None => String::new(),
    }
}

impl NetlinkError {
    /// The errno behind this error, when it comes from the system.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            NetlinkError::Netns { source, .. } | NetlinkError::Os { source, .. } => {
                source.raw_os_error()
            }
            _ => None,
        }
    }

    /// An [`NetlinkError::Os`] from a plain system error.
    pub(crate) fn os(step: impl Into<String>, source: io::Error) -> NetlinkError {
        NetlinkError::Os {
            step: step.into(),
            source,
            extack: None,
        }
    }

    /// An [`NetlinkError::Os`] from an rtnetlink failure (errno and extended ack kept).
    pub(crate) fn nl(step: impl Into<String>, err: rtnetlink::Error) -> NetlinkError {
        let (source, extack) = split_rtnetlink(err);
        NetlinkError::Os {
            step: step.into(),
            source,
            extack,
        }
    }
}

/// The errno of an rtnetlink failure (positive), if the kernel reported one.
pub(crate) fn errno(err: &rtnetlink::Error) -> Option<i32> {
    match err {
        rtnetlink::Error::NetlinkError(msg) => msg.code.map(|c| c.get().abs()),
        _ => None,
    }
}

/// Splits an rtnetlink failure into a system error and the kernel's extended ack message.
fn split_rtnetlink(err: rtnetlink::Error) -> (io::Error, Option<String>) {
    match err {
        rtnetlink::Error::NetlinkError(msg) => (msg.to_io(), extack_message(&msg.header)),
        rtnetlink::Error::RequestFailed => (
            io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the netlink connection is closed",
            ),
            None,
        ),
        other => (io::Error::other(other.to_string()), None),
    }
}

/// The length of `struct nlmsghdr`.
const NLMSGHDR_LEN: usize = 16;
/// `NLMSGERR_ATTR_MSG`: the extended ack's human readable message.
const NLMSGERR_ATTR_MSG: u16 = 1;

/// Extracts `NLMSGERR_ATTR_MSG` from the payload of an `NLMSG_ERROR` that follows the error
/// code. Our sockets set `NETLINK_CAP_ACK`, so the payload is the request's `nlmsghdr` alone,
/// then the attributes. Anything malformed yields `None`.
pub(crate) fn extack_message(payload: &[u8]) -> Option<String> {
    let mut rest = payload.get(NLMSGHDR_LEN..)?;
    while rest.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([rest[0], rest[1]]));
        let kind = u16::from_ne_bytes([rest[2], rest[3]]) & 0x3fff;
        if len < 4 || len > rest.len() {
            return None;
        }
        if kind == NLMSGERR_ATTR_MSG {
            let text = &rest[4..len];
            let end = text.iter().position(|b| *b == 0).unwrap_or(text.len());
            let msg = String::from_utf8_lossy(&text[..end]).trim().to_string();
            return (!msg.is_empty()).then_some(msg);
        }
        let aligned = (len + 3) & !3;
        rest = rest.get(aligned..)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nla(kind: u16, data: &[u8]) -> Vec<u8> {
        let len = (4 + data.len()) as u16;
        let mut v = len.to_ne_bytes().to_vec();
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(data);
        while v.len() & 3 != 0 {
            v.push(0);
        }
        v
    }

    #[test]
    fn extack_message_found_after_other_attributes() {
        let mut payload = vec![0u8; NLMSGHDR_LEN];
        payload.extend(nla(3, &7u32.to_ne_bytes())); // NLMSGERR_ATTR_OFFS
        payload.extend(nla(NLMSGERR_ATTR_MSG, b"Nexthop has invalid gateway\0"));
        assert_eq!(
            extack_message(&payload).as_deref(),
            Some("Nexthop has invalid gateway")
        );
    }

    #[test]
    fn extack_message_absent_or_malformed() {
        assert_eq!(extack_message(&[]), None);
        assert_eq!(extack_message(&[0u8; NLMSGHDR_LEN]), None);
        let mut bad = vec![0u8; NLMSGHDR_LEN];
        bad.extend_from_slice(&[200, 0, 1, 0, b'x']);
        assert_eq!(extack_message(&bad), None);
    }

    #[test]
    fn os_error_display_names_step_errno_and_kernel_message() {
        let e = NetlinkError::Os {
            step: "adding route 0.0.0.0/0 via 10.1.0.1 in netns /run/netns/x".into(),
            source: io::Error::from_raw_os_error(libc::ENETUNREACH),
            extack: Some("Nexthop has invalid gateway".into()),
        };
        assert_eq!(
            e.to_string(),
            "adding route 0.0.0.0/0 via 10.1.0.1 in netns /run/netns/x: Network is unreachable \
             (os error 101) (kernel: Nexthop has invalid gateway)"
        );
        assert_eq!(e.raw_os_error(), Some(libc::ENETUNREACH));
    }
}
