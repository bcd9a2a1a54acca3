//! In-process IPAM that reads and writes the on-disk format of the reference CNI `host-local`
//! plugin (as shipped in containernetworking-plugins 1.1.1), so the real `host-local` can read
//! and release our leases and we theirs.
//!
//! # Format (verified against `/usr/lib/cni/host-local` 1.1.1)
//!
//! A network's leases live in `<dataDir>/<network>/` (created `0755`):
//!
//! - one file per leased address, named by the address (`10.128.0.2`), mode `0644`, created with
//!   `O_CREAT|O_EXCL` so two allocators can never both take one address; its content is
//!   `<container id>\r\n<ifname>` with no trailing newline. Files written by old host-local
//!   versions hold only `<container id>` ("legacy" leases, [`Lease::ifname`] is empty);
//! - `last_reserved_ip.0`: the last address handed out from range set 0, no trailing newline.
//!   Allocation continues after it (round robin), so a crash-looping pod does not get the same
//!   address back until the whole range has been used;
//! - `lock`: an empty file locked with `flock(LOCK_EX)` for the whole of every operation, by
//!   host-local and by us. Every [`Store`] method takes it, so a real host-local running at the
//!   same time never sees a half-done operation of ours and we never see one of its.
//!
//! Matching on release is host-local's: all files whose trimmed content is exactly
//! `<id>\r\n<ifname>` are removed; only when there is none, legacy files holding exactly `<id>`
//! are removed instead.
//!
//! # Decisions where host-local differs
//!
//! - **Idempotent ADD.** host-local refuses an allocation for a container id + ifname that
//!   already holds an address in the range ("duplicate allocation is not allowed"). We return the
//!   existing lease instead, so a runtime retrying ADD after a timeout gets the same address
//!   rather than an error. A requested address that differs from the held one is an error
//!   ([`IpamError::AlreadyAllocated`]).
//! - The network address, the broadcast address and the gateway are never handed out, even
//!   when an explicit `start`/`end` includes them (host-local only skips the gateway).
//! - The lock wait is bounded ([`Store::with_lock_timeout`], default
//!   [`DEFAULT_LOCK_TIMEOUT`]): we poll `flock(LOCK_EX|LOCK_NB)` with a short back-off instead of
//!   blocking forever behind a stuck peer.
//! - `lock` is created `0644` (host-local creates it `0750`; either works, it is only opened
//!   read-only to be locked).
//!
//! # Families
//!
//! A dual-stack network has two range sets, as host-local's `ranges: [[v4], [v6]]`: set 0 the
//! IPv4 range (`last_reserved_ip.0`), set 1 the IPv6 one (`last_reserved_ip.1`), one range
//! each, lease files of both in the one directory ([`family`]). An attachment leases one
//! address per family; releasing it releases both, as host-local does.
//!
//! # Limits
//!
//! - One range per range set.
//! - Like host-local, writes are not fsynced and `last_reserved_ip.0` is rewritten in place: a
//!   crash between creating a lease file and writing its content leaves an empty lease that
//!   blocks the address until removed ([`Store::release_ip`] or [`Store::retain`]); a torn
//!   `last_reserved_ip.0` only costs one round of round robin.
//! - Blocking file I/O: call it from `spawn_blocking` in async code.
//!
//! The parts: `range` (one range and what it may hand out), `store` (the on-disk format, the
//! lock and the allocation walk: one contract with `host-local`, kept in one file so each part
//! is read with the others it must agree with), `error` (every error names the file, address or
//! request), `legacy` (the older format openshift-sdn's vendored host-local v0.6.0 writes and
//! releases, for the hand-back), `family` (the two address families as types), and here the
//! lease itself.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

mod error;
mod family;
pub(crate) use error::io_err;
pub use error::IpamError;
pub use family::{Addr, Family};
mod legacy;
pub use legacy::V060Dir;
mod range;
pub(crate) use range::check_requested;
pub use range::Range;
mod store;
pub use store::Store;

/// An attachment's addresses, IPv4 first: its IPv4 one and, on a dual-stack node, its IPv6 one
/// (what [`Store::transfer_all`] hands over together).
pub fn addresses(ip: Option<Ipv4Addr>, ip6: Option<Ipv6Addr>) -> Vec<IpAddr> {
    ip.map(IpAddr::V4)
        .into_iter()
        .chain(ip6.map(IpAddr::V6))
        .collect()
}

/// Name of the lock file inside a network's lease directory.
pub const LOCK_FILE: &str = "lock";
/// Prefix of the files recording the last reserved address of each range set.
pub const LAST_RESERVED_PREFIX: &str = "last_reserved_ip.";
/// Separator between container id and interface name in a lease file (host-local's `LineBreak`).
const LINE_BREAK: &str = "\r\n";
/// How long an operation waits for the lock by default.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// One leased address, as read from its file (IPv4 unless said otherwise).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Lease<A: Addr = Ipv4Addr> {
    /// The leased address (the file's name).
    pub ip: A,
    /// The container id (first line of the file, trimmed).
    pub container_id: String,
    /// The interface name; empty for a legacy file that holds only the container id.
    pub ifname: String,
}

impl<A: Addr> Lease<A> {
    fn parse(ip: A, content: &str) -> Lease<A> {
        // host-local compares the whitespace-trimmed content with "<id>\r\n<ifname>", else
        // with "<id>" alone; splitting at the first "\r\n" gives the same matches.
        let content = content.trim();
        let (container_id, ifname) = content.split_once(LINE_BREAK).unwrap_or((content, ""));
        Lease {
            ip,
            container_id: container_id.to_string(),
            ifname: ifname.to_string(),
        }
    }

    /// Whether this lease was written for exactly `container_id` + `ifname`.
    fn is_exactly(&self, container_id: &str, ifname: &str) -> bool {
        !self.ifname.is_empty() && self.container_id == container_id && self.ifname == ifname
    }

    /// Whether this is a legacy (id-only) lease of `container_id`.
    fn is_legacy_of(&self, container_id: &str) -> bool {
        self.ifname.is_empty() && self.container_id == container_id
    }
}

#[cfg(test)]
mod tests;
