//! What can go wrong with a lease, each error naming the file, the address or the request.

use ipnet::IpNet;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Errors of the IPAM store. Each names the directory, address or container concerned.
#[derive(Debug, thiserror::Error)]
pub enum IpamError {
    /// The network name cannot be used as a directory name.
    #[error("invalid network name {name:?} for the lease directory: {reason}")]
    InvalidNetworkName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// The container id cannot be stored in a host-local lease file.
    #[error("invalid container id {id:?} for a lease: {reason}")]
    InvalidContainerId {
        /// The rejected id.
        id: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// The interface name cannot be stored in a host-local lease file.
    #[error("invalid interface name {ifname:?} for a lease: {reason}")]
    InvalidIfname {
        /// The rejected name.
        ifname: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// The range is not usable (too small, gateway or bounds outside the subnet).
    #[error("invalid address range for subnet {subnet}: {reason}")]
    InvalidRange {
        /// The subnet of the range.
        subnet: IpNet,
        /// What is wrong with it.
        reason: String,
    },
    /// A requested address is outside the range's subnet.
    #[error("requested ip {ip} is not in subnet {subnet}")]
    NotInSubnet {
        /// The requested address.
        ip: IpAddr,
        /// The subnet it should be in.
        subnet: IpNet,
    },
    /// A requested address is in the subnet but outside the allocation bounds.
    #[error("requested ip {ip} is in subnet {subnet} but outside its allocation range {range}")]
    OutsideRange {
        /// The requested address.
        ip: IpAddr,
        /// The subnet.
        subnet: IpNet,
        /// The allocation range, `first-last`.
        range: String,
    },
    /// A requested address is the network address, the broadcast address or the gateway.
    #[error("requested ip {ip} is the {what} of subnet {subnet} and cannot be leased")]
    Reserved {
        /// The requested address.
        ip: IpAddr,
        /// The subnet.
        subnet: IpNet,
        /// `network address`, `broadcast address` or `gateway`.
        what: &'static str,
    },
    /// A requested IPv6 address of an IPv6-only node has the last 32 bits of another lease's
    /// address: the two pods' MACs (`0a:58` and those bits) would be the same.
    #[error(
        "requested ip {ip} has the last 32 bits of {taken}, leased to container \
         {container_id:?} (interface {ifname:?}): pods of an IPv6-only cluster take their MAC \
         from them"
    )]
    SameMac {
        /// The requested address.
        ip: IpAddr,
        /// The leased address with the same last 32 bits.
        taken: IpAddr,
        /// The container holding it.
        container_id: String,
        /// Its interface.
        ifname: String,
    },
    /// A requested address is leased to another attachment.
    #[error(
        "requested ip {ip} is in use by container {container_id:?} (interface {ifname:?}), \
         lease file {}",
        path.display()
    )]
    InUse {
        /// The requested address.
        ip: IpAddr,
        /// The container holding it (may be empty for a damaged lease file).
        container_id: String,
        /// Its interface (empty for a legacy lease).
        ifname: String,
        /// The lease file.
        path: PathBuf,
    },
    /// The attachment already holds another address than the one it requested.
    #[error(
        "container {container_id:?} interface {ifname:?} already holds {held} in {}, \
         cannot also take the requested {requested}: release it first",
        dir.display()
    )]
    AlreadyAllocated {
        /// The container.
        container_id: String,
        /// The interface.
        ifname: String,
        /// The address it holds.
        held: IpAddr,
        /// The address it asked for.
        requested: IpAddr,
        /// The lease directory.
        dir: PathBuf,
    },
    /// Every leasable address of the range is leased.
    #[error(
        "no free ip in range {range} of subnet {subnet}: all {leasable} leasable addresses \
         are leased in {}",
        dir.display()
    )]
    Exhausted {
        /// The allocation range, `first-last`.
        range: String,
        /// The subnet.
        subnet: IpNet,
        /// How many addresses the range can lease at all.
        leasable: u32,
        /// The lease directory.
        dir: PathBuf,
    },
    /// Another process held the lock for longer than the timeout.
    #[error("timed out after {waited:?} waiting for the ipam lock {}", path.display())]
    LockTimeout {
        /// The lock file.
        path: PathBuf,
        /// How long we waited.
        waited: Duration,
    },
    /// A file system operation failed.
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        /// What we were doing (`create lease file`, `read lease directory`...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

pub(crate) fn io_err<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> IpamError + 'a {
    move |source| IpamError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}
