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
//! # Limits
//!
//! - IPv4 and one range set with one range (`last_reserved_ip.0`); files named by IPv6
//!   addresses (a dual-stack host-local network) are ignored, not released.
//! - Like host-local, writes are not fsynced and `last_reserved_ip.0` is rewritten in place: a
//!   crash between creating a lease file and writing its content leaves an empty lease that
//!   blocks the address until removed ([`Store::release_ip`] or [`Store::retain`]); a torn
//!   `last_reserved_ip.0` only costs one round of round robin.
//! - Blocking file I/O: call it from `spawn_blocking` in async code.
//!
//! Why one file of this size: the on-disk format, the lock and the allocation walk are one
//! contract with `host-local`; split, each part would be read without the others it must agree
//! with. About a third of the file is its unit tests.

use std::collections::HashSet;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ipnet::Ipv4Net;

/// Name of the lock file inside a network's lease directory.
pub const LOCK_FILE: &str = "lock";
/// Prefix of the files recording the last reserved address of each range set.
pub const LAST_RESERVED_PREFIX: &str = "last_reserved_ip.";
/// The range set index we allocate from (we support exactly one).
const RANGE_ID: &str = "0";
/// Separator between container id and interface name in a lease file (host-local's `LineBreak`).
const LINE_BREAK: &str = "\r\n";
/// How long an operation waits for the lock by default.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

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
        subnet: Ipv4Net,
        /// What is wrong with it.
        reason: String,
    },
    /// A requested address is outside the range's subnet.
    #[error("requested ip {ip} is not in subnet {subnet}")]
    NotInSubnet {
        /// The requested address.
        ip: Ipv4Addr,
        /// The subnet it should be in.
        subnet: Ipv4Net,
    },
    /// A requested address is in the subnet but outside the allocation bounds.
    #[error("requested ip {ip} is in subnet {subnet} but outside its allocation range {range}")]
    OutsideRange {
        /// The requested address.
        ip: Ipv4Addr,
        /// The subnet.
        subnet: Ipv4Net,
        /// The allocation range, `first-last`.
        range: String,
    },
    /// A requested address is the network address, the broadcast address or the gateway.
    #[error("requested ip {ip} is the {what} of subnet {subnet} and cannot be leased")]
    Reserved {
        /// The requested address.
        ip: Ipv4Addr,
        /// The subnet.
        subnet: Ipv4Net,
        /// `network address`, `broadcast address` or `gateway`.
        what: &'static str,
    },
    /// A requested address is leased to another attachment.
    #[error(
        "requested ip {ip} is in use by container {container_id:?} (interface {ifname:?}), \
         lease file {}",
        path.display()
    )]
    InUse {
        /// The requested address.
        ip: Ipv4Addr,
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
        held: Ipv4Addr,
        /// The address it asked for.
        requested: Ipv4Addr,
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
        subnet: Ipv4Net,
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

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> IpamError + 'a {
    move |source| IpamError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// An allocation range: a subnet with its gateway and optional inclusive bounds, as in
/// host-local's `ranges` entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The subnet (host bits are ignored).
    pub subnet: Ipv4Net,
    /// The gateway, never leased.
    pub gateway: Ipv4Addr,
    /// First address to lease (inclusive); default: the network address + 1.
    pub start: Option<Ipv4Addr>,
    /// Last address to lease (inclusive); default: the broadcast address - 1.
    pub end: Option<Ipv4Addr>,
}

impl Range {
    /// The whole subnet with the given gateway.
    pub fn new(subnet: Ipv4Net, gateway: Ipv4Addr) -> Range {
        Range {
            subnet: subnet.trunc(),
            gateway,
            start: None,
            end: None,
        }
    }

    /// First address of the allocation range (inclusive).
    pub fn first(&self) -> Ipv4Addr {
        self.start
            .unwrap_or_else(|| Ipv4Addr::from(u32::from(self.subnet.network()).wrapping_add(1)))
    }

    /// Last address of the allocation range (inclusive).
    pub fn last(&self) -> Ipv4Addr {
        self.end
            .unwrap_or_else(|| Ipv4Addr::from(u32::from(self.subnet.broadcast()).wrapping_sub(1)))
    }

    /// Whether `ip` lies within `first()..=last()`.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        self.first() <= ip && ip <= self.last()
    }

    /// Checks the range is usable: at most a /30, gateway and bounds inside the subnet,
    /// `start <= end`.
    pub fn validate(&self) -> Result<(), IpamError> {
        let invalid = |reason: String| IpamError::InvalidRange {
            subnet: self.subnet,
            reason,
        };
        if self.subnet.prefix_len() > 30 {
            return Err(invalid(format!(
                "a /{} has no address to lease (use at most a /30)",
                self.subnet.prefix_len()
            )));
        }
        if !self.subnet.contains(&self.gateway) {
            return Err(invalid(format!(
                "gateway {} is outside the subnet",
                self.gateway
            )));
        }
        for (what, bound) in [("start", self.start), ("end", self.end)] {
            if let Some(ip) = bound {
                if !self.subnet.contains(&ip) {
                    return Err(invalid(format!("range {what} {ip} is outside the subnet")));
                }
            }
        }
        if self.first() > self.last() {
            return Err(invalid(format!(
                "range start {} is after range end {}",
                self.first(),
                self.last()
            )));
        }
        Ok(())
    }

    /// What `ip` is if it may never be leased: the network address, broadcast or gateway.
    fn reserved_kind(&self, ip: Ipv4Addr) -> Option<&'static str> {
        if ip == self.subnet.network() {
            Some("network address")
        } else if ip == self.subnet.broadcast() {
            Some("broadcast address")
        } else if ip == self.gateway {
            Some("gateway")
        } else {
            None
        }
    }

    /// How many addresses of the range can be leased at all.
    fn leasable(&self) -> u32 {
        let mut reserved = vec![self.subnet.network(), self.subnet.broadcast(), self.gateway];
        reserved.sort();
        reserved.dedup();
        let inside = reserved.iter().filter(|ip| self.contains(**ip)).count() as u64;
        let span = u64::from(u32::from(self.last())) - u64::from(u32::from(self.first())) + 1;
        u32::try_from(span.saturating_sub(inside)).unwrap_or(u32::MAX)
    }

    /// Candidate addresses in host-local order: after `last_reserved` if it is in the range
    /// (wrapping round to the start, `last_reserved` itself last), else from the start.
    fn candidates(&self, last_reserved: Option<Ipv4Addr>) -> impl Iterator<Item = Ipv4Addr> {
        let (first, last) = (u32::from(self.first()), u32::from(self.last()));
        // Where the pass begins: just after the last reserved address if that is in the range
        // and not its end, else at the start (then the wrapped part below is empty).
        let split = match last_reserved.filter(|ip| self.contains(*ip)) {
            Some(ip) if u32::from(ip) < last => u32::from(ip) + 1,
            _ => first,
        };
        (split..=last).chain(first..split).map(Ipv4Addr::from)
    }
}

impl fmt::Display for Range {
    /// `first-last`, as host-local prints a range.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first(), self.last())
    }
}

/// One leased address, as read from its file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Lease {
    /// The leased address (the file's name).
    pub ip: Ipv4Addr,
    /// The container id (first line of the file, trimmed).
    pub container_id: String,
    /// The interface name; empty for a legacy file that holds only the container id.
    pub ifname: String,
}

impl Lease {
    fn parse(ip: Ipv4Addr, content: &str) -> Lease {
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

/// A network's lease directory, `<dataDir>/<network>/`. Cheap to clone; holds no open files.
///
/// Every method takes the directory's flock for its whole duration, so it is safe to use from
/// many threads and processes at once, and alongside a real host-local.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    lock_timeout: Duration,
}

/// Held while an operation runs; closing the descriptor releases the flock.
#[derive(Debug)]
struct LockGuard {
    _file: File,
}

impl Store {
    /// Opens (creating if needed, mode `0755`) the lease directory of `network` under
    /// `data_dir`, and its `lock` file. The network name must be usable as one path component.
    pub fn new(data_dir: impl Into<PathBuf>, network: &str) -> Result<Store, IpamError> {
        let reason = if network.is_empty() {
            Some("it is empty")
        } else if network == "." || network == ".." {
            Some("it is a relative directory name")
        } else if network.contains('/') {
            Some("it contains '/'")
        } else if network.contains('\0') {
            Some("it contains a NUL byte")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(IpamError::InvalidNetworkName {
                name: network.to_string(),
                reason,
            });
        }
        let dir = data_dir.into().join(network);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&dir)
            .map_err(io_err("create lease directory", &dir))?;
        let store = Store {
            dir,
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
        };
        store.open_lock_file()?;
        Ok(store)
    }

    /// The same store with another bound on the wait for the lock.
    pub fn with_lock_timeout(mut self, timeout: Duration) -> Store {
        self.lock_timeout = timeout;
        self
    }

    /// The lease directory, `<dataDir>/<network>`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Leases an address of `range` to `container_id` + `ifname`.
    ///
    /// With `requested`, that address is leased if it is in the subnet and the range, is not the
    /// network, broadcast or gateway address, and is free; otherwise a precise error. Without,
    /// the first free address after `last_reserved_ip.0` (wrapping round) is taken, skipping the
    /// network, broadcast and gateway addresses.
    ///
    /// Idempotent: when the attachment already holds an address in the range (also a legacy
    /// id-only lease, as host-local's duplicate check counts those), that lease is returned
    /// unchanged (an error if `requested` names another address).
    pub fn allocate(
        &self,
        range: &Range,
        container_id: &str,
        ifname: &str,
        requested: Option<Ipv4Addr>,
    ) -> Result<Lease, IpamError> {
        validate_id(container_id)?;
        validate_ifname(ifname)?;
        range.validate()?;
        if let Some(ip) = requested {
            check_requested(range, ip)?;
        }
        let _lock = self.lock()?;
        let leases = self.scan()?;

        let held = leases
            .iter()
            .filter(|l| range.contains(l.ip))
            .find(|l| l.is_exactly(container_id, ifname))
            .or_else(|| {
                leases
                    .iter()
                    .filter(|l| range.contains(l.ip))
                    .find(|l| l.is_legacy_of(container_id))
            });
        if let Some(held) = held {
            return match requested {
                Some(ip) if ip != held.ip => Err(IpamError::AlreadyAllocated {
                    container_id: container_id.to_string(),
                    ifname: ifname.to_string(),
                    held: held.ip,
                    requested: ip,
                    dir: self.dir.clone(),
                }),
                _ => Ok(held.clone()),
            };
        }

        if let Some(ip) = requested {
            let in_use = |holder: Option<&Lease>| IpamError::InUse {
                ip,
                container_id: holder.map(|l| l.container_id.clone()).unwrap_or_default(),
                ifname: holder.map(|l| l.ifname.clone()).unwrap_or_default(),
                path: self.lease_path(ip),
            };
            if let Some(holder) = leases.iter().find(|l| l.ip == ip) {
                return Err(in_use(Some(holder)));
            }
            if !self.reserve(ip, container_id, ifname)? {
                // Created since our scan by someone not taking the lock.
                let holder = self.read_lease(ip)?;
                return Err(in_use(holder.as_ref()));
            }
            return Ok(Lease {
                ip,
                container_id: container_id.to_string(),
                ifname: ifname.to_string(),
            });
        }

        let taken: HashSet<Ipv4Addr> = leases.iter().map(|l| l.ip).collect();
        let last = self.last_reserved();
        for ip in range.candidates(last) {
            if range.reserved_kind(ip).is_some() || taken.contains(&ip) {
                continue;
            }
            if self.reserve(ip, container_id, ifname)? {
                return Ok(Lease {
                    ip,
                    container_id: container_id.to_string(),
                    ifname: ifname.to_string(),
                });
            }
        }
        Err(IpamError::Exhausted {
            range: range.to_string(),
            subnet: range.subnet,
            leasable: range.leasable(),
            dir: self.dir.clone(),
        })
    }

    /// Releases what `container_id` + `ifname` holds, with host-local's matching: every lease
    /// written for exactly this attachment; if there is none, every legacy id-only lease of
    /// the container. Returns the released addresses; idempotent (`Ok` and empty when nothing
    /// is held). On a removal failure the others are still attempted and the first error is
    /// returned.
    pub fn release(&self, container_id: &str, ifname: &str) -> Result<Vec<Ipv4Addr>, IpamError> {
        validate_id(container_id)?;
        validate_ifname(ifname)?;
        let _lock = self.lock()?;
        let leases = self.scan()?;
        let mut mine: Vec<&Lease> = leases
            .iter()
            .filter(|l| l.is_exactly(container_id, ifname))
            .collect();
        if mine.is_empty() {
            mine = leases
                .iter()
                .filter(|l| l.is_legacy_of(container_id))
                .collect();
        }
        self.remove_all(mine.into_iter().map(|l| l.ip))
    }

    /// Leases one address to each of `ids` (container ids, all with `ifname`) under one lock and
    /// one scan of the directory (the warm pool takes a batch of addresses at once). Stops early
    /// when the range has no more: fewer leases than ids is not an error, none is
    /// [`IpamError::Exhausted`].
    pub fn allocate_many(
        &self,
        range: &Range,
        ids: &[String],
        ifname: &str,
    ) -> Result<Vec<Lease>, IpamError> {
        for id in ids {
            validate_id(id)?;
        }
        validate_ifname(ifname)?;
        range.validate()?;
        let _lock = self.lock()?;
        let mut taken: HashSet<Ipv4Addr> = self.scan()?.into_iter().map(|l| l.ip).collect();
        let mut candidates = range.candidates(self.last_reserved());
        let mut out = Vec::new();
        'ids: for id in ids {
            for ip in candidates.by_ref() {
                if range.reserved_kind(ip).is_some() || taken.contains(&ip) {
                    continue;
                }
                if self.reserve(ip, id, ifname)? {
                    taken.insert(ip);
                    out.push(Lease {
                        ip,
                        container_id: id.clone(),
                        ifname: ifname.to_string(),
                    });
                    continue 'ids;
                }
            }
            break;
        }
        if out.is_empty() && !ids.is_empty() {
            return Err(IpamError::Exhausted {
                range: range.to_string(),
                subnet: range.subnet,
                leasable: range.leasable(),
                dir: self.dir.clone(),
            });
        }
        Ok(out)
    }

    /// Hands the lease of `ip` from `from` (container id, ifname) to `to`, in place: the address
    /// is never free in between (the agent's warm pool ports hold an address under their own
    /// name until a pod takes the port, and a deleted pod's address is held under its port's
    /// name until its flows are gone). Fails with [`IpamError::InUse`] when `from` does not
    /// hold `ip` (naming whoever does), and leaves the lease untouched then. One file read and
    /// one rename, no scan of the directory.
    pub fn transfer(
        &self,
        ip: Ipv4Addr,
        from: (&str, &str),
        to: (&str, &str),
    ) -> Result<Lease, IpamError> {
        validate_id(to.0)?;
        validate_ifname(to.1)?;
        let _lock = self.lock()?;
        let holder = self.read_lease(ip)?;
        if !holder
            .as_ref()
            .is_some_and(|l| l.is_exactly(from.0, from.1))
        {
            return Err(IpamError::InUse {
                ip,
                container_id: holder
                    .as_ref()
                    .map(|l| l.container_id.clone())
                    .unwrap_or_default(),
                ifname: holder.map(|l| l.ifname).unwrap_or_default(),
                path: self.lease_path(ip),
            });
        }
        let path = self.lease_path(ip);
        let tmp = self.dir.join(format!(".{ip}.transfer"));
        let content = format!("{}{LINE_BREAK}{}", to.0, to.1);
        let written = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&tmp)
            .and_then(|mut f| f.write_all(content.as_bytes()))
            .and_then(|()| fs::rename(&tmp, &path));
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(io_err("rewrite lease file", &path)(e));
        }
        Ok(Lease {
            ip,
            container_id: to.0.to_string(),
            ifname: to.1.to_string(),
        })
    }

    /// Removes the lease of `ip` whoever holds it. `Ok(false)` when it was not leased.
    pub fn release_ip(&self, ip: Ipv4Addr) -> Result<bool, IpamError> {
        let _lock = self.lock()?;
        self.remove_lease(ip)
    }

    /// Removes, in one locked pass, every lease for which `keep` is false (garbage collection
    /// of attachments that no longer exist). Returns the removed leases; on a removal failure
    /// the others are still attempted and the first error is returned.
    pub fn retain(&self, mut keep: impl FnMut(&Lease) -> bool) -> Result<Vec<Lease>, IpamError> {
        let _lock = self.lock()?;
        let gone: Vec<Lease> = self.scan()?.into_iter().filter(|l| !keep(l)).collect();
        self.remove_all(gone.iter().map(|l| l.ip))?;
        Ok(gone)
    }

    /// All IPv4 leases of the directory, sorted by address. `lock` and `last_reserved_ip.*`
    /// are skipped, so are files named by IPv6 addresses; other files are skipped with a
    /// warning (once per path per process).
    pub fn leases(&self) -> Result<Vec<Lease>, IpamError> {
        let _lock = self.lock()?;
        self.scan()
    }

    /// The lease of `container_id` + `ifname` (the lowest address if, unusually, it holds
    /// several), else its legacy id-only lease, else `None`.
    pub fn lease_of(&self, container_id: &str, ifname: &str) -> Result<Option<Lease>, IpamError> {
        validate_id(container_id)?;
        validate_ifname(ifname)?;
        let leases = self.leases()?;
        let exact = leases.iter().find(|l| l.is_exactly(container_id, ifname));
        Ok(exact
            .or_else(|| leases.iter().find(|l| l.is_legacy_of(container_id)))
            .cloned())
    }

    fn lease_path(&self, ip: Ipv4Addr) -> PathBuf {
        self.dir.join(ip.to_string())
    }

    fn lock_path(&self) -> PathBuf {
        self.dir.join(LOCK_FILE)
    }

    fn last_reserved_path(&self) -> PathBuf {
        self.dir.join(format!("{LAST_RESERVED_PREFIX}{RANGE_ID}"))
    }

    fn open_lock_file(&self) -> Result<File, IpamError> {
        let path = self.lock_path();
        File::open(&path)
            .or_else(|e| {
                if e.kind() == io::ErrorKind::NotFound {
                    // O_CREAT needs write access in std's OpenOptions.
                    OpenOptions::new()
                        .write(true)
                        .create(true)
                        .truncate(false)
                        .mode(0o644)
                        .open(&path)
                } else {
                    Err(e)
                }
            })
            .map_err(io_err("open lock file", &path))
    }

    /// Takes the directory's flock, polling with back-off up to the lock timeout.
    fn lock(&self) -> Result<LockGuard, IpamError> {
        let file = self.open_lock_file()?;
        let started = Instant::now();
        let mut pause = Duration::from_micros(50);
        loop {
            // std's file lock is flock(2) on Linux, the lock host-local takes too.
            match file.try_lock() {
                Ok(()) => return Ok(LockGuard { _file: file }),
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(err)) => {
                    return Err(io_err("lock", &self.lock_path())(err))
                }
            }
            let waited = started.elapsed();
            if waited >= self.lock_timeout {
                return Err(IpamError::LockTimeout {
                    path: self.lock_path(),
                    waited,
                });
            }
            std::thread::sleep(pause.min(self.lock_timeout - waited));
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    /// Reads every IPv4 lease file. Caller holds the lock.
    fn scan(&self) -> Result<Vec<Lease>, IpamError> {
        let mut leases = Vec::new();
        let entries = fs::read_dir(&self.dir).map_err(io_err("read lease directory", &self.dir))?;
        for entry in entries {
            let entry = entry.map_err(io_err("read lease directory", &self.dir))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                warn_junk(&entry.path(), "its name is not UTF-8");
                continue;
            };
            if name == LOCK_FILE || name.starts_with(LAST_RESERVED_PREFIX) {
                continue;
            }
            let ip = match name.parse::<IpAddr>() {
                Ok(IpAddr::V4(ip)) => ip,
                Ok(IpAddr::V6(_)) => continue,
                Err(_) => {
                    warn_junk(&entry.path(), "its name is not an ip address");
                    continue;
                }
            };
            match self.read_lease(ip) {
                Ok(Some(lease)) => leases.push(lease),
                Ok(None) => {}
                Err(IpamError::Io { source, .. })
                    if source.raw_os_error() == Some(libc::EISDIR) =>
                {
                    warn_junk(&entry.path(), "it is a directory");
                }
                Err(e) => return Err(e),
            }
        }
        leases.sort_by_key(|l| l.ip);
        Ok(leases)
    }

    /// Reads one lease file; `None` if it does not exist.
    fn read_lease(&self, ip: Ipv4Addr) -> Result<Option<Lease>, IpamError> {
        let path = self.lease_path(ip);
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(Lease::parse(ip, &String::from_utf8_lossy(&bytes)))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("read lease file", &path)(e)),
        }
    }

    /// The last reserved address, if the file exists and holds one.
    fn last_reserved(&self) -> Option<Ipv4Addr> {
        let path = self.last_reserved_path();
        match fs::read_to_string(&path) {
            Ok(s) => {
                let ip = s.trim().parse().ok();
                if ip.is_none() {
                    tracing::warn!(path = %path.display(), content = %s.trim(),
                        "ignoring unparsable last reserved ip, allocating from the range start");
                }
                ip
            }
            Err(e) => {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(path = %path.display(), error = %e,
                        "cannot read last reserved ip, allocating from the range start");
                }
                None
            }
        }
    }

    /// Creates the lease file of `ip` exclusively and records `ip` as the last reserved.
    /// `Ok(false)` if the file already exists. On any failure nothing is left behind.
    fn reserve(&self, ip: Ipv4Addr, container_id: &str, ifname: &str) -> Result<bool, IpamError> {
        let path = self.lease_path(ip);
        let mut file = match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(io_err("create lease file", &path)(e)),
        };
        let content = format!("{container_id}{LINE_BREAK}{ifname}");
        if let Err(e) = file.write_all(content.as_bytes()) {
            drop(file);
            let _ = fs::remove_file(&path);
            return Err(io_err("write lease file", &path)(e));
        }
        drop(file);
        let last = self.last_reserved_path();
        let written = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&last)
            .and_then(|mut f| f.write_all(ip.to_string().as_bytes()));
        if let Err(e) = written {
            let _ = fs::remove_file(&path);
            return Err(io_err("write last reserved ip file", &last)(e));
        }
        Ok(true)
    }

    fn remove_lease(&self, ip: Ipv4Addr) -> Result<bool, IpamError> {
        let path = self.lease_path(ip);
        match fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_err("remove lease file", &path)(e)),
        }
    }

    fn remove_all(&self, ips: impl Iterator<Item = Ipv4Addr>) -> Result<Vec<Ipv4Addr>, IpamError> {
        let mut removed = Vec::new();
        let mut first_err = None;
        for ip in ips {
            match self.remove_lease(ip) {
                Ok(true) => removed.push(ip),
                Ok(false) => {}
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(removed),
        }
    }
}

/// The checks on a requested address that need no directory access.
fn check_requested(range: &Range, ip: Ipv4Addr) -> Result<(), IpamError> {
    if !range.subnet.contains(&ip) {
        return Err(IpamError::NotInSubnet {
            ip,
            subnet: range.subnet,
        });
    }
    if let Some(what) = range.reserved_kind(ip) {
        return Err(IpamError::Reserved {
            ip,
            subnet: range.subnet,
            what,
        });
    }
    if !range.contains(ip) {
        return Err(IpamError::OutsideRange {
            ip,
            subnet: range.subnet,
            range: range.to_string(),
        });
    }
    Ok(())
}

/// A container id must survive host-local's whitespace trimming and `\r\n` split unchanged.
fn validate_id(id: &str) -> Result<(), IpamError> {
    let reason = if id.is_empty() {
        Some("it is empty")
    } else if id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("it contains whitespace or control characters")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(IpamError::InvalidContainerId {
            id: id.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

/// An interface name must be non-empty (an empty one would read back as a legacy lease) and
/// free of whitespace and control characters.
fn validate_ifname(ifname: &str) -> Result<(), IpamError> {
    let reason = if ifname.is_empty() {
        Some("it is empty")
    } else if ifname.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("it contains whitespace or control characters")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(IpamError::InvalidIfname {
            ifname: ifname.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Warns once per path per process about a file that is not a lease.
fn warn_junk(path: &Path, why: &str) {
    static WARNED: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);
    let first = match WARNED.lock() {
        Ok(mut set) => set
            .get_or_insert_with(HashSet::new)
            .insert(path.to_path_buf()),
        Err(_) => true,
    };
    if first {
        tracing::warn!(path = %path.display(), "ignoring file in the ipam lease directory: {why}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    /// A temporary data dir removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            static N: AtomicU32 = AtomicU32::new(0);
            let dir = std::env::temp_dir().join(format!(
                "ipam-unit-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn range(subnet: &str, gw: &str) -> Range {
        Range::new(subnet.parse().unwrap(), ip(gw))
    }

    fn store(t: &TempDir) -> Store {
        Store::new(&t.0, "sdn").unwrap()
    }

    fn alloc(s: &Store, r: &Range, id: &str) -> Result<Ipv4Addr, IpamError> {
        s.allocate(r, id, "eth0", None).map(|l| l.ip)
    }

    fn files(s: &Store) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(s.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn new_creates_dir_and_lock_and_validates_name() {
        let t = TempDir::new();
        let s = Store::new(&t.0, "net1").unwrap();
        assert_eq!(s.dir(), t.0.join("net1"));
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(s.dir()).unwrap().permissions().mode() & 0o7777;
        // 0755 minus the umask: never group- or world-writable, always usable by the owner.
        assert_eq!(mode & !0o755, 0, "dir mode {mode:o}");
        assert_eq!(mode & 0o700, 0o700, "dir mode {mode:o}");
        assert!(s.dir().join("lock").is_file());
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            let e = Store::new(&t.0, bad).unwrap_err();
            assert!(
                matches!(e, IpamError::InvalidNetworkName { .. }),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn allocates_in_order_skipping_network_gateway_broadcast_then_exhausts_a_29() {
        let t = TempDir::new();
        let s = store(&t);
        let r = range("10.0.0.0/29", "10.0.0.1");
        let got: Vec<Ipv4Addr> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|id| alloc(&s, &r, id).unwrap())
            .collect();
        assert_eq!(
            got,
            ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"].map(ip)
        );
        let e = alloc(&s, &r, "f").unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, IpamError::Exhausted { leasable: 5, .. }), "{e}");
        assert!(msg.contains("10.0.0.1-10.0.0.6"), "{msg}");
        assert!(msg.contains("10.0.0.0/29"), "{msg}");
        assert!(msg.contains(&s.dir().display().to_string()), "{msg}");
        // Exact host-local bytes.
        assert_eq!(fs::read(s.dir().join("10.0.0.2")).unwrap(), b"a\r\neth0");
        assert_eq!(
            fs::read(s.dir().join("last_reserved_ip.0")).unwrap(),
            b"10.0.0.6"
        );
        assert!(!s.dir().join("10.0.0.7").exists());
    }

    #[test]
    fn a_30_has_one_address() {
        let t = TempDir::new();
        let s = store(&t);
        let r = range("10.0.0.4/30", "10.0.0.5");
        assert_eq!(alloc(&s, &r, "a").unwrap(), ip("10.0.0.6"));
        let e = alloc(&s, &r, "b").unwrap_err();
        assert!(matches!(e, IpamError::Exhausted { leasable: 1, .. }), "{e}");
        assert!(e.to_string().contains("10.0.0.5-10.0.0.6"), "{e}");
        // Releasing makes it available again (wrapping round past last_reserved_ip).
        assert_eq!(s.release("a", "eth0").unwrap(), vec![ip("10.0.0.6")]);
        assert_eq!(alloc(&s, &r, "b").unwrap(), ip("10.0.0.6"));
    }

    #[test]
    fn round_robin_does_not_reuse_a_released_address_first() {
        let t = TempDir::new();
        let s = store(&t);
        let r = range("10.0.0.0/24", "10.0.0.1");
        assert_eq!(alloc(&s, &r, "a").unwrap(), ip("10.0.0.2"));
        s.release("a", "eth0").unwrap();
        assert_eq!(alloc(&s, &r, "b").unwrap(), ip("10.0.0.3"));
    }

    #[test]
    fn wraps_around_after_the_range_end() {
        let t = TempDir::new();
        let s = store(&t);
        let r = range("10.0.0.0/29", "10.0.0.1");
        for id in ["a", "b", "c", "d", "e"] {
            alloc(&s, &r, id).unwrap();
        }
        s.release("b", "eth0").unwrap(); // .3
        s.release("d", "eth0").unwrap(); // .5
                                         // last reserved is .6 (the end): wrap to the start, .2 is taken, .3 is free.
        assert_eq!(alloc(&s, &r, "f").unwrap(), ip("10.0.0.3"));
        assert_eq!(alloc(&s, &r, "g").unwrap(), ip("10.0.0.5"));
        // From the middle: last reserved .5, .6 taken, wrap, .2 .3 .4 taken, .5 taken: full.
        assert!(matches!(
            alloc(&s, &r, "h"),
            Err(IpamError::Exhausted { .. })
        ));
        s.release("a", "eth0").unwrap(); // .2, before last reserved .5
        assert_eq!(alloc(&s, &r, "h").unwrap(), ip("10.0.0.2"));
    }

    #[test]
    fn follows_last_reserved_ip_written_by_someone_else_and_ignores_a_bad_one() {
        let t = TempDir::new();
        let s = store(&t);
        let r = range("10.0.0.0/24", "10.0.0.1");
        fs::write(s.dir().join("last_reserved_ip.0"), "10.0.0.100").unwrap();
        assert_eq!(alloc(&s, &r, "a").unwrap(), ip("10.0.0.101"));
        fs::write(s.dir().join("last_reserved_ip.0"), "garbage").unwrap();
        assert_eq!(alloc(&s, &r, "b").unwrap(), ip("10.0.0.2"));
        fs::write(s.dir().join("last_reserved_ip.0"), "192.168.0.9").unwrap();
        assert_eq!(alloc(&s, &r, "c").unwrap(), ip("10.0.0.3"));
        fs::write(s.dir().join("last_reserved_ip.0"), "10.0.0.254\n").unwrap();
        assert_eq!(alloc(&s, &r, "d").unwrap(), ip("10.0.0.4"));
    }

    #[test]
    fn skips_addresses_leased_by_others_and_a_gateway_in_the_middle() {
        let t = TempDir::new();
        let s = store(&t);
        let r = range("10.0.0.0/29", "10.0.0.4");
        fs::write(s.dir().join("10.0.0.3"), "other\r\neth0").unwrap();
        let got: Vec<Ipv4Addr> = ["a", "b", "c"]
            .iter()
            .map(|id| alloc(&s, &r, id).unwrap())
            .collect();
        // .1 is leasable here (the gateway is .4); .3 is someone else's.
        assert_eq!(got, ["10.0.0.1", "10.0.0.2", "10.0.0.5"].map(ip));
        assert_eq!(alloc(&s, &r, "d").unwrap(), ip("10.0.0.6"));
        assert!(matches!(
            alloc(&s, &r, "e"),
            Err(IpamError::Exhausted { leasable: 5, .. })
        ));
    }

    #[test]
    fn explicit_bounds_are_honoured_and_never_yield_network_or_broadcast() {
        let t = TempDir::new();
        let s = store(&t);
        let mut r = range("10.0.0.0/29", "10.0.0.1");
        r.start = Some(ip("10.0.0.5"));
        r.end = Some(ip("10.0.0.7"));
        assert_eq!(alloc(&s, &r, "a").unwrap(), ip("10.0.0.5"));
        assert_eq!(alloc(&s, &r, "b").unwrap(), ip("10.0.0.6"));
        assert!(matches!(
            alloc(&s, &r, "c"),
            Err(IpamError::Exhausted { leasable: 2, .. })
        ));
        let t2 = TempDir::new();
        let s2 = store(&t2);
        let mut r2 = range("10.0.0.0/29", "10.0.0.6");
        r2.start = Some(ip("10.0.0.0"));
        assert_eq!(alloc(&s2, &r2, "a").unwrap(), ip("10.0.0.1"));
    }

    #[test]
    fn allocate_many_leases_distinct_addresses_and_stops_at_the_end_of_the_range() {
        let t = TempDir::new();
        let s = store(&t);
        let r = range("10.0.0.0/29", "10.0.0.1");
        alloc(&s, &r, "a").unwrap();
        let ids: Vec<String> = (0..3).map(|i| format!("sdn-warm-p{i}")).collect();
        let got = s.allocate_many(&r, &ids, "eth0").unwrap();
        let ips: std::collections::BTreeSet<Ipv4Addr> = got.iter().map(|l| l.ip).collect();
        assert_eq!(ips.len(), 3, "{got:?}");
        assert!(!ips.contains(&ip("10.0.0.1")) && !ips.contains(&ip("10.0.0.2")));
        // 10.0.0.2-6 leasable, four taken: one left for five more ids.
        let more: Vec<String> = (4..9).map(|i| format!("sdn-warm-p{i}")).collect();
        assert_eq!(s.allocate_many(&r, &more, "eth0").unwrap().len(), 1);
        assert!(matches!(
            s.allocate_many(&r, &more, "eth0"),
            Err(IpamError::Exhausted { .. })
        ));
        assert_eq!(s.leases().unwrap().len(), 5);
    }

    #[test]
    fn transfer_hands_a_lease_over_in_place_and_only_from_its_holder() {
        let t = TempDir::new();
        let s = store(&t);
        let r = range("10.0.0.0/29", "10.0.0.1");
        let l = s.allocate(&r, "sdn-warm-sdnp01", "eth0", None).unwrap();
        let moved = s
            .transfer(l.ip, ("sdn-warm-sdnp01", "eth0"), ("pod-a", "net1"))
            .unwrap();
        assert_eq!(
            (moved.container_id.as_str(), moved.ifname.as_str()),
            ("pod-a", "net1")
        );
        assert_eq!(
            s.lease_of("pod-a", "net1").unwrap().map(|x| x.ip),
            Some(l.ip)
        );
        assert!(s.lease_of("sdn-warm-sdnp01", "eth0").unwrap().is_none());
        assert_eq!(
            s.leases().unwrap().len(),
            1,
            "no temporary file left as a lease"
        );
        // Not the holder: refused, naming the holder, lease untouched.
        let e = s
            .transfer(l.ip, ("sdn-warm-sdnp01", "eth0"), ("pod-b", "eth0"))
            .unwrap_err();
        assert!(
            matches!(&e, IpamError::InUse { container_id, .. } if container_id == "pod-a"),
            "{e}"
        );
        assert!(
            s.transfer(ip("10.0.0.5"), ("x", "eth0"), ("y", "eth0"))
                .is_err(),
            "not leased"
        );
        assert_eq!(
            s.lease_of("pod-a", "net1").unwrap().map(|x| x.ip),
            Some(l.ip)
        );
        // A bad new holder is refused before anything is read.
        assert!(matches!(
            s.transfer(l.ip, ("pod-a", "net1"), ("", "eth0")),
            Err(IpamError::InvalidContainerId { .. })
        ));
    }

    #[test]
    fn invalid_ranges_are_refused() {
        let t = TempDir::new();
        let s = store(&t);
        let cases = [
            (range("10.0.0.0/31", "10.0.0.0"), "/31"),
            (range("10.0.0.0/32", "10.0.0.0"), "/32"),
            (range("10.0.0.0/24", "10.0.1.1"), "gateway 10.0.1.1"),
            (
                Range {
                    start: Some(ip("10.0.0.9")),
                    end: Some(ip("10.0.0.5")),
                    ..range("10.0.0.0/24", "10.0.0.1")
                },
                "after range end",
            ),
            (
                Range {
                    end: Some(ip("10.0.1.5")),
                    ..range("10.0.0.0/24", "10.0.0.1")
                },
                "end 10.0.1.5",
            ),
        ];
        for (r, needle) in cases {
            let e = s.allocate(&r, "a", "eth0", None).unwrap_err();
            assert!(matches!(e, IpamError::InvalidRange { .. }), "{e}");
            assert!(e.to_string().contains(needle), "{e} lacks {needle}");
        }
        assert_eq!(files(&s), ["lock"]);
    }

    #[test]
    fn requested_ip_is_honoured_when_free_and_valid() {
        let t = TempDir::new();
        let s = store(&t);
        let r = range("10.0.0.0/24", "10.0.0.1");
        let l = s.allocate(&r, "a", "eth0", Some(ip("10.0.0.50"))).unwrap();
        assert_eq!(l.ip, ip("10.0.0.50"));
        assert_eq!(
            fs::read(s.dir().join("last_reserved_ip.0")).unwrap(),
            b"10.0.0.50"
        );
        // Dynamic allocation continues after it, as host-local does.
        assert_eq!(alloc(&s, &r, "b").unwrap(), ip("10.0.0.51"));
    }

    #[test]
    fn requested_ip_errors_are_precise() {
        let t = TempDir::new();
        let s = store(&t);
        let mut r = range("10.0.0.0/24", "10.0.0.1");
        r.end = Some(ip("10.0.0.100"));
        s.allocate(&r, "holder", "net1", Some(ip("10.0.0.7")))
            .unwrap();
        let req = |ipx: &str| s.allocate(&r, "a", "eth0", Some(ip(ipx))).unwrap_err();

        let e = req("10.0.0.7");
        assert!(matches!(e, IpamError::InUse { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("in use by container \"holder\"") && msg.contains("net1"),
            "{msg}"
        );
        let e = req("10.0.1.7");
        assert_eq!(
            e.to_string(),
            "requested ip 10.0.1.7 is not in subnet 10.0.0.0/24"
        );
        let e = req("10.0.0.1");
        assert!(e.to_string().contains("is the gateway of subnet"), "{e}");
        let e = req("10.0.0.0");
        assert!(e.to_string().contains("network address"), "{e}");
        let e = req("10.0.0.255");
        assert!(e.to_string().contains("broadcast address"), "{e}");
        let e = req("10.0.0.200");
        assert!(matches!(e, IpamError::OutsideRange { .. }), "{e}");
        assert!(e.to_string().contains("10.0.0.1-10.0.0.100"), "{e}");
        // Nothing was written by the failures.
        assert_eq!(files(&s), ["10.0.0.7", "last_reserved_ip.0", "lock"]);
    }

    #[test]
    fn allocation_is_idempotent_per_attachment() {
        let t = TempDir::new();
        let s = store(&t);
        let r = range("10.0.0.0/24", "10.0.0.1");
        let a = s.allocate(&r, "a", "eth0", None).unwrap();
        assert_eq!(s.allocate(&r, "a", "eth0", None).unwrap(), a);
        // Retried with the address it got: same lease.
        assert_eq!(s.allocate(&r, "a", "eth0", Some(a.ip)).unwrap(), a);
        // Another address requested while holding one: refused.
        let e = s
            .allocate(&r, "a", "eth0", Some(ip("10.0.0.9")))
            .unwrap_err();
        assert!(matches!(e, IpamError::AlreadyAllocated { .. }), "{e}");
        assert!(e.to_string().contains("already holds 10.0.0.2"), "{e}");
        // Another interface of the same container is another attachment.
        let b = s.allocate(&r, "a", "eth1", None).unwrap();
        assert_ne!(a.ip, b.ip);
        assert_eq!(s.leases().unwrap(), vec![a, b]);
    }

    #[test]
    fn a_lease_outside_the_range_does_not_count_as_held() {
        let t = TempDir::new();
        let s = store(&t);
        let r = range("10.0.0.0/24", "10.0.0.1");
        fs::write(s.dir().join("10.9.9.9"), "a\r\neth0").unwrap();
        assert_eq!(alloc(&s, &r, "a").unwrap(), ip("10.0.0.2"));
        // Release frees both, as host-local's does.
        let mut got = s.release("a", "eth0").unwrap();
        got.sort();
        assert_eq!(got, [ip("10.0.0.2"), ip("10.9.9.9")]);
    }

    #[test]
    fn release_is_idempotent_and_matches_like_host_local() {
        let t = TempDir::new();
        let s = store(&t);
        let r = range("10.0.0.0/24", "10.0.0.1");
        let a = s.allocate(&r, "a", "eth0", None).unwrap();
        let a1 = s.allocate(&r, "a", "eth1", None).unwrap();
        assert_eq!(s.release("a", "eth0").unwrap(), vec![a.ip]);
        assert!(!s.dir().join(a.ip.to_string()).exists());
        assert_eq!(s.release("a", "eth0").unwrap(), Vec::<Ipv4Addr>::new());
        assert_eq!(s.release("nobody", "eth0").unwrap(), Vec::<Ipv4Addr>::new());
        assert_eq!(s.leases().unwrap(), vec![a1.clone()]);

        // Legacy id-only files: released only when no exact match exists.
        fs::write(s.dir().join("10.0.0.20"), "old\n").unwrap();
        fs::write(s.dir().join("10.0.0.21"), "old\r\neth3").unwrap();
        assert_eq!(s.release("old", "eth3").unwrap(), vec![ip("10.0.0.21")]);
        assert_eq!(s.release("old", "eth3").unwrap(), vec![ip("10.0.0.20")]);
        assert_eq!(s.leases().unwrap(), vec![a1]);
    }

    #[test]
    fn release_ip_and_retain() {
        let t = TempDir::new();
        let s = store(&t);
        let r = range("10.0.0.0/24", "10.0.0.1");
        for id in ["a", "b", "c"] {
            alloc(&s, &r, id).unwrap();
        }
        assert!(s.release_ip(ip("10.0.0.3")).unwrap());
        assert!(!s.release_ip(ip("10.0.0.3")).unwrap());
        let gone = s.retain(|l| l.container_id == "a").unwrap();
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].container_id, "c");
        let left = s.leases().unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].container_id, "a");
    }

    #[test]
    fn leases_parse_files_and_skip_lock_last_reserved_ipv6_and_junk() {
        let t = TempDir::new();
        let s = store(&t);
        let d = s.dir();
        fs::write(d.join("10.0.0.9"), "x\r\neth0").unwrap();
        fs::write(d.join("10.0.0.3"), "  legacy \n").unwrap();
        fs::write(d.join("10.0.0.4"), "").unwrap();
        fs::write(d.join("fd00::3"), "v6\r\neth0").unwrap();
        fs::write(d.join("last_reserved_ip.0"), "10.0.0.9").unwrap();
        fs::write(d.join("last_reserved_ip.1"), "fd00::3").unwrap();
        fs::write(d.join("junk"), "x\r\neth0").unwrap();
        fs::create_dir(d.join("10.0.0.77")).unwrap();
        let leases = s.leases().unwrap();
        let want = vec![
            Lease {
                ip: ip("10.0.0.3"),
                container_id: "legacy".into(),
                ifname: String::new(),
            },
            Lease {
                ip: ip("10.0.0.4"),
                container_id: String::new(),
                ifname: String::new(),
            },
            Lease {
                ip: ip("10.0.0.9"),
                container_id: "x".into(),
                ifname: "eth0".into(),
            },
        ];
        assert_eq!(leases, want);
        assert_eq!(s.lease_of("x", "eth0").unwrap(), Some(want[2].clone()));
        assert_eq!(s.lease_of("x", "eth1").unwrap(), None);
        assert_eq!(s.lease_of("legacy", "eth7").unwrap(), Some(want[0].clone()));
        // The empty (damaged) lease blocks its address.
        let r = range("10.0.0.0/24", "10.0.0.1");
        let got: Vec<Ipv4Addr> = ["p", "q", "r"]
            .iter()
            .map(|id| alloc(&s, &r, id).unwrap())
            .collect();
        assert_eq!(got, ["10.0.0.10", "10.0.0.11", "10.0.0.12"].map(ip));
    }

    #[test]
    fn a_legacy_lease_counts_as_held() {
        let t = TempDir::new();
        let s = store(&t);
        let r = range("10.0.0.0/24", "10.0.0.1");
        fs::write(s.dir().join("10.0.0.30"), "old").unwrap();
        let l = s.allocate(&r, "old", "eth0", None).unwrap();
        assert_eq!(l.ip, ip("10.0.0.30"));
        assert_eq!(l.ifname, "");
    }

    #[test]
    fn bad_ids_and_ifnames_are_refused_before_any_write() {
        let t = TempDir::new();
        let s = store(&t);
        let r = range("10.0.0.0/24", "10.0.0.1");
        for id in ["", "a b", "a\r\nb", " a"] {
            let e = s.allocate(&r, id, "eth0", None).unwrap_err();
            assert!(matches!(e, IpamError::InvalidContainerId { .. }), "{e}");
            assert!(s.release(id, "eth0").is_err());
        }
        for ifname in ["", "eth 0", "eth0\n"] {
            let e = s.allocate(&r, "a", ifname, None).unwrap_err();
            assert!(matches!(e, IpamError::InvalidIfname { .. }), "{e}");
        }
        assert_eq!(files(&s), ["lock"]);
    }

    #[test]
    fn lock_wait_is_bounded() {
        let t = TempDir::new();
        let s = store(&t).with_lock_timeout(Duration::from_millis(200));
        let holder = File::open(s.dir().join("lock")).unwrap();
        holder.lock().unwrap();
        let started = Instant::now();
        let e = s.leases().unwrap_err();
        assert!(matches!(e, IpamError::LockTimeout { .. }), "{e}");
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(holder);
        assert_eq!(s.leases().unwrap(), Vec::<Lease>::new());
    }

    #[test]
    fn lock_file_is_recreated_if_deleted() {
        let t = TempDir::new();
        let s = store(&t);
        fs::remove_file(s.dir().join("lock")).unwrap();
        let r = range("10.0.0.0/24", "10.0.0.1");
        alloc(&s, &r, "a").unwrap();
        assert!(s.dir().join("lock").is_file());
    }

    #[test]
    fn concurrent_allocations_get_distinct_addresses_until_exhausted() {
        let t = TempDir::new();
        let s = Arc::new(store(&t));
        let r = range("10.0.0.0/25", "10.0.0.1"); // 125 leasable
        let threads: Vec<_> = (0..8)
            .map(|n| {
                let s = Arc::clone(&s);
                std::thread::spawn(move || {
                    // Separate Store values too: the flock must be what serialises them.
                    let mine = Store::new(s.dir().parent().unwrap(), "sdn").unwrap();
                    let mut got = Vec::new();
                    for i in 0..20 {
                        match mine.allocate(&r, &format!("c{n}-{i}"), "eth0", None) {
                            Ok(l) => got.push(l.ip),
                            Err(IpamError::Exhausted { .. }) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                    got
                })
            })
            .collect();
        let all: Vec<Ipv4Addr> = threads
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        let distinct: HashSet<Ipv4Addr> = all.iter().copied().collect();
        assert_eq!(all.len(), 125, "160 attempts for 125 addresses");
        assert_eq!(distinct.len(), 125);
        assert!(!distinct.contains(&ip("10.0.0.1")));
        assert!(!distinct.contains(&ip("10.0.0.127")));
        let leases = s.leases().unwrap();
        assert_eq!(leases.len(), 125);
        for l in leases {
            assert!(
                l.container_id.starts_with('c') && l.ifname == "eth0",
                "{l:?}"
            );
        }
    }
}
