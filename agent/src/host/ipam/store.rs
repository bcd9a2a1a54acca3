//! The lease store: host-local's directory format (one file per address holding `id\r\nifname`,
//! the walk's last reserved address, a lock file), allocation under the lock, release by owner,
//! and the checks of ids and interface names. Every file is written whole or not at all
//! ([`cluster::files`]: a lease is linked into place, the cursor renamed over), so an agent
//! killed at any moment leaves no empty lease and no empty cursor; no fsync, since leases
//! describe pods, which do not outlive the machine either.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use cluster::files::{create_new, Durability, Tail};
use std::sync::Mutex;
use std::time::Duration;

use super::*;

mod batch;
mod lock;

use lock::InProcess;

/// A network's lease directory, `<dataDir>/<network>/`. Cheap to clone (clones share one
/// in-process lock); holds no open files.
///
/// Every method takes the directory's flock for its whole duration, so it is safe to use from
/// many threads and processes at once, and alongside a real host-local. Threads of this
/// process first queue on an in-process lock ([`InProcess`]), woken the moment it is free;
/// only another process's holding of the flock is waited out by polling.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    lock_timeout: Duration,
    local: std::sync::Arc<InProcess>,
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
            local: Default::default(),
        };
        store.open_lock_file()?;
        store.remove_stale_temps();
        Ok(store)
    }

    /// Deletes the temporary files of writes a kill cut off ([`cluster::files::remove_stale_temps`]):
    /// at start-up and with the periodic repair.
    pub fn remove_stale_temps(&self) {
        let stale = cluster::files::remove_stale_temps(&self.dir);
        if stale > 0 {
            tracing::info!(dir = %self.dir.display(), files = stale, "removed the temporary files of writes cut off by a kill");
        }
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
    pub fn allocate<A: Family>(
        &self,
        range: &Range<A>,
        container_id: &str,
        ifname: &str,
        requested: Option<A>,
    ) -> Result<Lease<A>, IpamError> {
        self.allocate_checked(range, (container_id, ifname), requested, false)
    }

    /// [`Self::allocate`] for a node of an IPv6-only cluster, whose pods take their MAC from
    /// their address's last 32 bits ([`ovs::flow::MacAddr::from_pod_ip6`]): the walk skips an
    /// address whose last 32 bits a lease has, and a requested one is refused
    /// ([`IpamError::SameMac`]).
    pub fn allocate_ipv6_only(
        &self,
        range: &Range<std::net::Ipv6Addr>,
        container_id: &str,
        ifname: &str,
        requested: Option<std::net::Ipv6Addr>,
    ) -> Result<Lease<std::net::Ipv6Addr>, IpamError> {
        self.allocate_checked(range, (container_id, ifname), requested, true)
    }

    /// The checks, the lock and the walk of one allocation.
    fn allocate_checked<A: Family>(
        &self,
        range: &Range<A>,
        (container_id, ifname): (&str, &str),
        requested: Option<A>,
        unique_low32: bool,
    ) -> Result<Lease<A>, IpamError> {
        validate_id(container_id)?;
        validate_ifname(ifname)?;
        range.validate()?;
        if let Some(ip) = requested {
            check_requested(range, ip)?;
        }
        let _lock = self.lock()?;
        let leases = self.scan::<A>()?;
        self.allocate_locked(
            range,
            container_id,
            ifname,
            requested,
            &leases,
            unique_low32,
        )
    }

    /// [`Self::allocate`] of both families for a dual-stack attachment, under one lock and one
    /// read of the directory. On an error the IPv4 lease may be taken: the caller releases the
    /// attachment (both families) as it does after any failed step.
    #[allow(clippy::type_complexity)]
    pub fn allocate_dual(
        &self,
        (r4, r6): (&Range, &Range<std::net::Ipv6Addr>),
        container_id: &str,
        ifname: &str,
        (req4, req6): (Option<Ipv4Addr>, Option<std::net::Ipv6Addr>),
    ) -> Result<(Lease, Lease<std::net::Ipv6Addr>), IpamError> {
        validate_id(container_id)?;
        validate_ifname(ifname)?;
        r4.validate()?;
        r6.validate()?;
        if let Some(ip) = req4 {
            check_requested(r4, ip)?;
        }
        if let Some(ip) = req6 {
            check_requested(r6, ip)?;
        }
        let _lock = self.lock()?;
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for l in self.scan::<IpAddr>()? {
            let (container_id, ifname) = (l.container_id, l.ifname);
            match l.ip {
                IpAddr::V4(ip) => v4.push(Lease {
                    ip,
                    container_id,
                    ifname,
                }),
                IpAddr::V6(ip) => v6.push(Lease {
                    ip,
                    container_id,
                    ifname,
                }),
            }
        }
        Ok((
            self.allocate_locked(r4, container_id, ifname, req4, &v4, false)?,
            self.allocate_locked(r6, container_id, ifname, req6, &v6, false)?,
        ))
    }

    /// The allocation walk, the lock held and the family's `leases` read. With `unique_low32`,
    /// no two leases share their last 32 bits (IPv6-only pods' MACs).
    fn allocate_locked<A: Family>(
        &self,
        range: &Range<A>,
        container_id: &str,
        ifname: &str,
        requested: Option<A>,
        leases: &[Lease<A>],
        unique_low32: bool,
    ) -> Result<Lease<A>, IpamError> {
        let low32 = |ip: A| ip.bits() as u32;
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
                    held: held.ip.ip(),
                    requested: ip.ip(),
                    dir: self.dir.clone(),
                }),
                _ => Ok(held.clone()),
            };
        }

        if let Some(ip) = requested {
            if let Some(holder) = leases.iter().find(|l| l.ip == ip) {
                return Err(self.in_use(ip, Some(holder)));
            }
            if let Some(other) = leases
                .iter()
                .find(|l| unique_low32 && low32(l.ip) == low32(ip))
            {
                return Err(IpamError::SameMac {
                    ip: ip.ip(),
                    taken: other.ip.ip(),
                    container_id: other.container_id.clone(),
                    ifname: other.ifname.clone(),
                });
            }
            if !self.reserve(ip, container_id, ifname)? {
                // Created since our scan by someone not taking the lock.
                let holder = self.read_lease(ip)?;
                return Err(self.in_use(ip, holder.as_ref()));
            }
            return Ok(Lease {
                ip,
                container_id: container_id.to_string(),
                ifname: ifname.to_string(),
            });
        }

        let taken: HashSet<A> = leases.iter().map(|l| l.ip).collect();
        let taken_low32: HashSet<u32> = if unique_low32 {
            leases.iter().map(|l| low32(l.ip)).collect()
        } else {
            HashSet::new()
        };
        let last = self.last_reserved::<A>();
        for ip in range.candidates(last) {
            if range.reserved_kind(ip).is_some()
                || taken.contains(&ip)
                || taken_low32.contains(&low32(ip))
            {
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
            subnet: A::any_net(&range.subnet),
            leasable: range.leasable(),
            dir: self.dir.clone(),
        })
    }

    /// Records that `container_id` + `ifname` holds `ip`, an address handed over from another
    /// network agent's leases (a takeover from openshift-sdn, or the hand-back to it): no
    /// range check, since the address is in use already. Idempotent when that attachment holds
    /// it; [`IpamError::InUse`] (naming the holder) when someone else does.
    pub fn record<A: Addr>(
        &self,
        ip: A,
        container_id: &str,
        ifname: &str,
    ) -> Result<Lease<A>, IpamError> {
        validate_id(container_id)?;
        validate_ifname(ifname)?;
        let _lock = self.lock()?;
        let lease = Lease {
            ip,
            container_id: container_id.to_string(),
            ifname: ifname.to_string(),
        };
        if self.reserve(ip, container_id, ifname)? {
            return Ok(lease);
        }
        match self.read_lease(ip)? {
            Some(held) if held.is_exactly(container_id, ifname) => Ok(lease),
            holder => Err(self.in_use(ip, holder.as_ref())),
        }
    }

    /// Releases what `container_id` + `ifname` holds, in both families, with host-local's
    /// matching: every lease written for exactly this attachment; if there is none, every
    /// legacy id-only lease of the container. Returns the released addresses; idempotent (`Ok`
    /// and empty when nothing is held). On a removal failure the others are still attempted
    /// and the first error is returned.
    pub fn release(&self, container_id: &str, ifname: &str) -> Result<Vec<IpAddr>, IpamError> {
        validate_id(container_id)?;
        validate_ifname(ifname)?;
        let _lock = self.lock()?;
        let leases = self.scan::<IpAddr>()?;
        let mut mine: Vec<&Lease<IpAddr>> = leases
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

    /// Removes the lease of `ip` whoever holds it. `Ok(false)` when it was not leased.
    pub fn release_ip<A: Addr>(&self, ip: A) -> Result<bool, IpamError> {
        let _lock = self.lock()?;
        self.remove_lease(ip)
    }

    /// Removes, in one locked pass, every lease of either family for which `keep` is false
    /// (garbage collection of attachments that no longer exist). Returns the removed leases; on
    /// a removal failure the others are still attempted and the first error is returned.
    pub fn retain(
        &self,
        mut keep: impl FnMut(&Lease<IpAddr>) -> bool,
    ) -> Result<Vec<Lease<IpAddr>>, IpamError> {
        let _lock = self.lock()?;
        let gone: Vec<Lease<IpAddr>> = self
            .scan::<IpAddr>()?
            .into_iter()
            .filter(|l| !keep(l))
            .collect();
        self.remove_all(gone.iter().map(|l| l.ip))?;
        Ok(gone)
    }

    /// How many addresses are leased, (IPv4, IPv6), from the file names alone.
    pub fn count_by_family(&self) -> Result<(usize, usize), IpamError> {
        let _lock = self.lock()?;
        let ips = self.leased()?;
        let v6 = ips.iter().filter(|ip| ip.is_ipv6()).count();
        Ok((ips.len() - v6, v6))
    }

    /// All IPv4 leases of the directory, sorted by address. `lock` and `last_reserved_ip.*`
    /// are skipped, so are files named by IPv6 addresses; other files are skipped with a
    /// warning (once per path per process).
    pub fn leases(&self) -> Result<Vec<Lease>, IpamError> {
        self.leases_of_family::<Ipv4Addr>()
    }

    /// All leases of family `A` (`IpAddr`: both), sorted by address.
    pub fn leases_of_family<A: Addr>(&self) -> Result<Vec<Lease<A>>, IpamError> {
        let _lock = self.lock()?;
        self.scan::<A>()
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

    /// [`IpamError::InUse`]: `ip` is `holder`'s (unknown when `None`: a file written by
    /// someone not taking the lock, gone again or unreadable).
    fn in_use<A: Addr>(&self, ip: A, holder: Option<&Lease<A>>) -> IpamError {
        IpamError::InUse {
            ip: ip.ip(),
            container_id: holder.map(|l| l.container_id.clone()).unwrap_or_default(),
            ifname: holder.map(|l| l.ifname.clone()).unwrap_or_default(),
            path: self.lease_path(ip),
        }
    }

    pub(crate) fn lease_path<A: Addr>(&self, ip: A) -> PathBuf {
        self.dir.join(ip.to_string())
    }

    pub(crate) fn lock_path(&self) -> PathBuf {
        self.dir.join(LOCK_FILE)
    }

    /// `last_reserved_ip.N` of range set `set` (`Addr::range_set`).
    pub(crate) fn last_reserved_path(&self, set: &str) -> PathBuf {
        self.dir.join(format!("{LAST_RESERVED_PREFIX}{set}"))
    }

    pub(crate) fn open_lock_file(&self) -> Result<File, IpamError> {
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

    /// The addresses the directory's lease files are named by, both families, without reading
    /// the files (an allocation needs only which addresses are taken: at 1000 pods reading
    /// every holder cost the warm pool's top-ups milliseconds under the lock). Caller holds
    /// the lock.
    pub(crate) fn leased(&self) -> Result<Vec<IpAddr>, IpamError> {
        let mut ips = Vec::new();
        let entries = fs::read_dir(&self.dir).map_err(io_err("read lease directory", &self.dir))?;
        for entry in entries {
            let entry = entry.map_err(io_err("read lease directory", &self.dir))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                warn_junk(&entry.path(), "its name is not UTF-8");
                continue;
            };
            if name == LOCK_FILE
                || name.starts_with(LAST_RESERVED_PREFIX)
                || cluster::files::is_temp(name)
            {
                continue;
            }
            match name.parse::<IpAddr>() {
                Ok(ip) => ips.push(ip),
                Err(_) => warn_junk(&entry.path(), "its name is not an ip address"),
            }
        }
        Ok(ips)
    }

    /// Reads every lease file of family `A`. Caller holds the lock.
    pub(crate) fn scan<A: Addr>(&self) -> Result<Vec<Lease<A>>, IpamError> {
        let mut leases = Vec::new();
        for ip in self.leased()?.into_iter().filter_map(A::of) {
            match self.read_lease(ip) {
                Ok(Some(lease)) => leases.push(lease),
                Ok(None) => {}
                Err(IpamError::Io { source, .. })
                    if source.raw_os_error() == Some(libc::EISDIR) =>
                {
                    warn_junk(&self.lease_path(ip), "it is a directory");
                }
                Err(e) => return Err(e),
            }
        }
        leases.sort_by_key(|l| l.ip);
        Ok(leases)
    }

    /// Reads one lease file; `None` if it does not exist.
    pub(crate) fn read_lease<A: Addr>(&self, ip: A) -> Result<Option<Lease<A>>, IpamError> {
        let path = self.lease_path(ip);
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(Lease::parse(ip, &String::from_utf8_lossy(&bytes)))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("read lease file", &path)(e)),
        }
    }

    /// The last reserved address of family `A`'s range set, if the file exists and holds one.
    pub(crate) fn last_reserved<A: Family>(&self) -> Option<A> {
        let path = self.last_reserved_path(A::RANGE_SET);
        match fs::read_to_string(&path) {
            Ok(s) => {
                let ip = s.trim().parse::<IpAddr>().ok().and_then(A::of);
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
    pub(crate) fn reserve<A: Addr>(
        &self,
        ip: A,
        container_id: &str,
        ifname: &str,
    ) -> Result<bool, IpamError> {
        let path = self.lease_path(ip);
        let content = format!("{container_id}{LINE_BREAK}{ifname}");
        // Whole or not at all: a kill never leaves an empty or half lease.
        if !create_new(&path, content.as_bytes(), 0o644, Durability::Process)
            .map_err(io_err("create lease file", &path))?
        {
            return Ok(false);
        }
        let last = self.last_reserved_path(ip.range_set());
        if let Err(e) = write(
            &last,
            ip.to_string().as_bytes(),
            Durability::Process,
            Tail::Exact,
        ) {
            let _ = fs::remove_file(&path);
            return Err(io_err("write last reserved ip file", &last)(e));
        }
        Ok(true)
    }

    pub(crate) fn remove_lease<A: Addr>(&self, ip: A) -> Result<bool, IpamError> {
        let path = self.lease_path(ip);
        match fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_err("remove lease file", &path)(e)),
        }
    }

    pub(crate) fn remove_all<A: Addr>(
        &self,
        ips: impl Iterator<Item = A>,
    ) -> Result<Vec<A>, IpamError> {
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

/// Writes `bytes` over `path` atomically, mode 0644 ([`cluster::files::write`]).
/// A lease or the cursor, in place when one write makes it whole (every reader of this
/// directory takes its lock, host-local too: `cluster::files::overwrite`); `tail`: a lease
/// may end in spaces (host-local and [`Lease`]'s parser trim its content), the cursor not
/// (host-local parses it as it is).
fn write(path: &Path, bytes: &[u8], durability: Durability, tail: Tail) -> io::Result<()> {
    cluster::files::overwrite(path, bytes, 0o644, durability, tail)
}

/// A container id must survive host-local's whitespace trimming and `\r\n` split unchanged.
pub(crate) fn validate_id(id: &str) -> Result<(), IpamError> {
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
pub(crate) fn validate_ifname(ifname: &str) -> Result<(), IpamError> {
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
pub(crate) fn warn_junk(path: &Path, why: &str) {
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
