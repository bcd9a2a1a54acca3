//! Transmit checksum offload through the legacy ethtool ioctl (`SIOCETHTOOL` with
//! `ETHTOOL_GTXCSUM` / `ETHTOOL_STXCSUM`), the equivalent of `ethtool -K <if> tx on|off`.
//!
//! Why: with the OVS userspace (`netdev`) datapath, packets a pod sends with a partial checksum
//! (checksum offload on its veth) leave OVS with a wrong checksum, so TCP fails while ICMP works.
//! Turning tx checksumming off on the pod end makes the pod's stack compute checksums.
//!
//! The ioctl acts on the interface of that name in the netns of the *socket* passed in, whatever
//! thread calls it: callers pass a socket created in the right netns. `ETHTOOL_STXCSUM` toggles
//! every `tx-checksum-*` feature; the kernel then drops the features that depend on it (TSO...).
//! The ethtool netlink family would do the same with more code; the ioctl is stable and small.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::names::MAX_IFNAME_LEN;

/// `SIOCETHTOOL` from `<linux/sockios.h>`.
const SIOCETHTOOL: libc::c_ulong = 0x8946;
/// `ETHTOOL_GTXCSUM`: get transmit checksum offload.
const ETHTOOL_GTXCSUM: u32 = 0x16;
/// `ETHTOOL_STXCSUM`: set transmit checksum offload.
const ETHTOOL_STXCSUM: u32 = 0x17;

/// `struct ethtool_value` from `<linux/ethtool.h>`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// A datagram `AF_INET` socket for ioctls, in the netns of the calling thread.
pub(crate) fn inet_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether tx checksum offload is on for `ifname` (in the socket's netns).
pub(crate) fn tx_checksum(sock: BorrowedFd<'_>, ifname: &str) -> io::Result<bool> {
    ethtool_value(sock, ifname, ETHTOOL_GTXCSUM, 0).map(|v| v != 0)
}

/// Turns tx checksum offload on or off for `ifname` (in the socket's netns).
pub(crate) fn set_tx_checksum(sock: BorrowedFd<'_>, ifname: &str, on: bool) -> io::Result<()> {
    ethtool_value(sock, ifname, ETHTOOL_STXCSUM, u32::from(on)).map(|_| ())
}

/// Issues one `struct ethtool_value` command; returns the value the kernel wrote back.
fn ethtool_value(sock: BorrowedFd<'_>, ifname: &str, cmd: u32, data: u32) -> io::Result<u32> {
    let name = ifname.as_bytes();
    if name.is_empty() || name.len() > MAX_IFNAME_LEN || name.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid interface name {ifname:?}"),
        ));
    }
    let mut value = EthtoolValue { cmd, data };
    // SAFETY: ifreq is plain old data; all-zero is a valid value (empty name, null pointers).
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(name) {
        *dst = *src as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast::<libc::c_char>();
    // SAFETY: SIOCETHTOOL reads the NUL-terminated name (at most 15 bytes + the zeroed rest) and
    // reads/writes `value` through `ifru_data`, which points to a live `EthtoolValue` of the
    // layout the kernel expects for these commands.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL, &mut ifr) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value.data)
}
