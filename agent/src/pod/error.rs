//! Why a pod operation failed, typed, each kind with its CNI error code.
//!
//! The pod logic returns [`PodError`]; the CNI layer turns it into the error object the runtime
//! reads ([`CniError::from`]), with the code chosen here, once per kind: a bad request
//! (`CNI_ARGS IP=` outside the subnet, a taken address, a bad bandwidth value) is the client's
//! fault (4 or 7), a passed deadline or a busy lease lock is "try again later" (11), a missing
//! attachment on CHECK is "unknown container" (3), and every failure of the node itself is ours
//! (100) with the step in `msg` and the cause in `details`.

use flows::AttachmentId;

use crate::cni::{codes, CniError};
use crate::host::ipam::IpamError;
use crate::host::iptables::IptablesError;
use crate::host::netlink::NetlinkError;

/// Why a pod's namespace has no VNID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoVnid {
    /// Standalone mode: its NetNamespace file in the state directory is unusable.
    UnusableFile {
        /// What is wrong with the file.
        problem: String,
    },
    /// Kubernetes mode: the namespace does not exist.
    NoSuchNamespace {
        /// How long the ADD waited.
        waited: std::time::Duration,
    },
    /// Kubernetes mode: the namespace exists and the controller has not given it a
    /// NetNamespace.
    NotCreatedByController {
        /// How long the ADD waited.
        waited: std::time::Duration,
    },
    /// Standalone mode: nobody created its NetNamespace.
    NotCreated {
        /// How long the ADD waited.
        waited: std::time::Duration,
    },
}

impl NoVnid {
    /// What to do about it, for the error's `details`.
    pub fn hint(&self, namespace: &str) -> String {
        match self {
            NoVnid::UnusableFile { problem } => format!(
                "its NetNamespace file is unusable: {problem}; fix or remove that file (sdnctl \
                 namespaces lists it), then retry"
            ),
            NoVnid::NoSuchNamespace { waited } => format!(
                "waited {}s; the namespace does not exist in the cluster",
                waited.as_secs()
            ),
            NoVnid::NotCreatedByController { waited } => format!(
                "waited {}s; the controller (sdn-agent controller) creates a NetNamespace for \
                 every namespace: is it running?",
                waited.as_secs()
            ),
            NoVnid::NotCreated { waited } => format!(
                "waited {}s; create it (sdnctl create {namespace}) or use an existing namespace, \
                 then retry",
                waited.as_secs()
            ),
        }
    }
}

/// A failed pod operation.
#[derive(Debug, thiserror::Error)]
pub enum PodError {
    /// ADD of an attachment that exists.
    #[error("container {} already has interface {} (ip {})", .attachment.container_id, .attachment.ifname, super::shown_addrs(*.ip, *.ip6))]
    AlreadyAttached {
        /// The attachment.
        attachment: AttachmentId,
        /// Its IPv4 address.
        ip: Option<std::net::Ipv4Addr>,
        /// Its IPv6 address.
        ip6: Option<std::net::Ipv6Addr>,
    },
    /// ADD without `CNI_NETNS`.
    #[error("CNI_NETNS is required for ADD")]
    NoNetns,
    /// The pod's namespace has no NetNamespace (no VNID) within the wait.
    #[error("namespace {namespace:?} has no NetNamespace (no VNID){}", if matches!(.why, NoVnid::UnusableFile { .. }) { ": its NetNamespace file is unusable" } else { "" })]
    NoNetNamespace {
        /// The namespace.
        namespace: String,
        /// Why, and so what to do.
        why: NoVnid,
    },
    /// `CNI_ARGS IP=` with a prefix length other than the node subnet's.
    #[error("CNI_ARGS IP={addr}/{prefix_len} does not match the node subnet {subnet}")]
    RequestedPrefix {
        /// The address asked for.
        addr: std::net::IpAddr,
        /// The prefix length asked for.
        prefix_len: u8,
        /// The node subnet of the address's family.
        subnet: ipnet::IpNet,
    },
    /// `CNI_ARGS IP=` asks for an IPv6 address on a node without an IPv6 subnet.
    #[error("CNI_ARGS IP= asks for IPv6 address {addr}, but this node has no IPv6 subnet")]
    NoIpv6 {
        /// The address asked for.
        addr: std::net::Ipv6Addr,
    },
    /// `CNI_ARGS IP=` asks for an IPv4 address on a node of an IPv6-only cluster.
    #[error("CNI_ARGS IP= asks for IPv4 address {addr}, but this node has no IPv4 subnet (an IPv6-only cluster)")]
    NoIpv4 {
        /// The address asked for.
        addr: std::net::Ipv4Addr,
    },
    /// The node has no subnet of either family to address a pod from (a HostSubnet without
    /// one).
    #[error("this node has no pod subnet of either family")]
    NoAddress,
    /// A bandwidth annotation or `runtimeConfig.bandwidth` value is unusable.
    #[error("bandwidth of pod {namespace}/{pod}: {reason}")]
    Bandwidth {
        /// Namespace.
        namespace: String,
        /// Pod.
        pod: String,
        /// What is wrong, naming the key.
        reason: String,
    },
    /// The request's deadline passed before a step; everything done was undone.
    #[error("deadline passed before {step}")]
    Deadline {
        /// The step not started.
        step: &'static str,
    },
    /// IPAM.
    #[error("IPAM: {0}")]
    Ipam(#[from] IpamError),
    /// The IPAM worker task died.
    #[error("IPAM task failed")]
    IpamTask(String),
    /// Netlink (veth, pod interface).
    #[error("{0}")]
    Netlink(#[from] NetlinkError),
    /// OVSDB.
    #[error("{what}")]
    Ovsdb {
        /// The step and its object (`adding port vethX to br0`).
        what: String,
        /// The cause.
        source: Box<ovs::ovsdb::Error>,
    },
    /// OpenFlow (flows, meters).
    #[error("{what}")]
    OpenFlow {
        /// The step and its object.
        what: String,
        /// The cause.
        source: Box<ovs::openflow::OfError>,
    },
    /// iptables (host port rules).
    #[error("{what}")]
    Iptables {
        /// The step and its object.
        what: String,
        /// The cause.
        source: Box<IptablesError>,
    },
    /// ovs-vswitchd did not number the pod's port and does not answer OpenFlow on the bridge
    /// (stopped, or busy reconfiguring): the ADD was undone.
    #[error("{bridge} does not answer: ovs-vswitchd has not numbered port {port} after {:.1}s and does not answer OpenFlow; try again later", .waited.as_secs_f64())]
    SwitchNotAnswering {
        /// The bridge.
        bridge: String,
        /// The pod's port.
        port: String,
        /// How long the ADD waited.
        waited: std::time::Duration,
    },
    /// Every meter id is in use.
    #[error("no free egress meter for {attachment}")]
    NoFreeMeter {
        /// The attachment.
        attachment: AttachmentId,
        /// How many ids there are.
        ids: u32,
    },
    /// CHECK of an attachment this node does not have.
    #[error("container {} has no interface {} on this node", .attachment.container_id, .attachment.ifname)]
    NotAttached {
        /// The attachment.
        attachment: AttachmentId,
    },
    /// CHECK found the attachment differing from what ADD left.
    #[error("{attachment}: {what}")]
    Drift {
        /// The attachment.
        attachment: AttachmentId,
        /// What differs.
        what: String,
    },
    /// An error some part already put in CNI terms (host port mappings).
    #[error("{}", .0.msg)]
    Cni(CniError),
}

impl PodError {
    /// The CNI error code of this kind of failure.
    pub fn code(&self) -> u32 {
        use crate::host::ipam::IpamError as E;
        match self {
            PodError::NoNetns
            | PodError::RequestedPrefix { .. }
            | PodError::NoIpv6 { .. }
            | PodError::NoIpv4 { .. } => codes::INVALID_ENV,
            PodError::Bandwidth { .. } => codes::INVALID_CONFIG,
            PodError::Deadline { .. } | PodError::SwitchNotAnswering { .. } => {
                codes::TRY_AGAIN_LATER
            }
            PodError::NotAttached { .. } => codes::UNKNOWN_CONTAINER,
            // The address came from CNI_ARGS IP=.
            PodError::Ipam(
                E::NotInSubnet { .. }
                | E::OutsideRange { .. }
                | E::Reserved { .. }
                | E::InUse { .. }
                | E::SameMac { .. }
                | E::AlreadyAllocated { .. },
            ) => codes::INVALID_ENV,
            PodError::Ipam(E::LockTimeout { .. }) => codes::TRY_AGAIN_LATER,
            PodError::Cni(e) => e.code,
            _ => codes::INTERNAL,
        }
    }

    /// What to do, or the cause, for the error object's `details`.
    pub fn details(&self) -> String {
        match self {
            PodError::AlreadyAttached { .. } => "DEL the attachment before adding it again".into(),
            PodError::NoNetNamespace { namespace, why } => why.hint(namespace),
            PodError::RequestedPrefix { subnet, .. } => {
                format!("ask for an address of {subnet} (or leave IP out)")
            }
            PodError::NoIpv6 { .. } => "the cluster has no IPv6 network, or this node's \
                HostSubnet has no IPv6 subnet (sdn.dev/ipv6-subnet) yet; ask for an IPv4 address \
                only"
                .into(),
            PodError::NoIpv4 { .. } => {
                "the cluster is IPv6-only; ask for an IPv6 address only".into()
            }
            PodError::NoAddress => "the node's HostSubnet has no subnet of either family; \
                check the HostSubnet (sdnctl status, the agent's start-up log)"
                .into(),
            PodError::Bandwidth { .. } => {
                "rates are Kubernetes quantities in bit/s between 1k and 32G".into()
            }
            PodError::Deadline { .. } => "the request was undone; retry".into(),
            PodError::SwitchNotAnswering { bridge, .. } => format!(
                "the request was undone; is ovs-vswitchd running (sdnctl status, /readyz)? the agent adds {bridge}'s ports again once it answers"
            ),
            PodError::IpamTask(e) => e.clone(),
            PodError::Ovsdb { source, .. } => source.to_string(),
            PodError::OpenFlow { source, .. } => source.to_string(),
            PodError::Iptables { source, .. } => source.to_string(),
            PodError::NoFreeMeter { ids, .. } => format!("all {ids} meter ids are in use"),
            PodError::Cni(e) => e.details.clone(),
            PodError::NoNetns
            | PodError::Ipam(_)
            | PodError::Netlink(_)
            | PodError::NotAttached { .. }
            | PodError::Drift { .. } => String::new(),
        }
    }

    /// An OVSDB failure of step `what`.
    pub fn ovsdb(what: impl Into<String>) -> impl FnOnce(ovs::ovsdb::Error) -> PodError {
        let what = what.into();
        move |source| PodError::Ovsdb {
            what,
            source: Box::new(source),
        }
    }

    /// An OpenFlow failure of step `what`.
    pub fn openflow(what: impl Into<String>) -> impl FnOnce(ovs::openflow::OfError) -> PodError {
        let what = what.into();
        move |source| PodError::OpenFlow {
            what,
            source: Box::new(source),
        }
    }

    /// An iptables failure of step `what`.
    pub fn iptables(what: impl Into<String>) -> impl FnOnce(IptablesError) -> PodError {
        let what = what.into();
        move |source| PodError::Iptables {
            what,
            source: Box::new(source),
        }
    }
}

impl From<CniError> for PodError {
    fn from(e: CniError) -> PodError {
        PodError::Cni(e)
    }
}

impl From<PodError> for CniError {
    fn from(e: PodError) -> CniError {
        match e {
            PodError::Cni(c) => c,
            other => CniError::new(other.code(), other.to_string(), other.details()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_carries_its_code() {
        let a = AttachmentId::new("c", "eth0");
        let cases: Vec<(PodError, u32)> = vec![
            (PodError::NoNetns, 4),
            (
                PodError::Bandwidth {
                    namespace: "n".into(),
                    pod: "p".into(),
                    reason: "r".into(),
                },
                7,
            ),
            (PodError::Deadline { step: "x" }, 11),
            (
                PodError::NotAttached {
                    attachment: a.clone(),
                },
                3,
            ),
            (
                PodError::Drift {
                    attachment: a,
                    what: "w".into(),
                },
                100,
            ),
            (PodError::Cni(CniError::invalid_env("m")), 4),
        ];
        for (e, code) in cases {
            let text = e.to_string();
            let c = CniError::from(e);
            assert_eq!(c.code, code, "{text}");
            assert_eq!(c.msg, text);
        }
        let e = CniError::from(PodError::Deadline {
            step: "adding the OVS port",
        });
        assert_eq!(e.msg, "deadline passed before adding the OVS port");
        assert_eq!(e.details, "the request was undone; retry");
    }
}
