//! Kernel parameters through `/proc/sys` files (no `sysctl` exec).
//!
//! The `net/` subtree is per network namespace: the kernel resolves it against the netns of the
//! thread that opens the file, so these functions act on the netns of the calling thread. The
//! agent calls them from its own threads, which stay in the node netns.
//!
//! Why the per-interface keys go through a directory opened once: every network namespace has
//! its own `/proc/sys/net` directory, and the kernel keeps them all under the one name `net`
//! below `/proc/sys`, in one hash chain that a path lookup walks comparing each (the
//! `proc_sys_compare` check of whether the calling thread's netns sees that copy). With a
//! thousand pods, a thousand copies: looking up `net/ipv4/conf/IFNAME/rp_filter` from
//! `/proc/sys` was most of the agent's CPU while it warmed pool ports (four sysctls per port,
//! each read and written). The `net/ipv4/conf` and `net/ipv6/conf` directories of the netns
//! the agent runs in are opened once ([`ConfDirs`], with the netns pinned so its identity cannot
//! be reused) and the keys below them are opened relative to them, from a thread in that same
//! netns only; any other thread or key takes the full path.

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use super::NetlinkError;

/// The root of the sysctl tree.
const PROC_SYS: &str = "/proc/sys";

/// The calling thread's network namespace.
const THREAD_NETNS: &str = "/proc/thread-self/ns/net";
/// The process's (its main thread's) network namespace: the node's.
const PROCESS_NETNS: &str = "/proc/self/ns/net";

/// The per-interface sysctl directories of one netns, opened once (see the module docs).
struct ConfDirs {
    /// The netns they belong to (device and inode of its nsfs file).
    netns: (u64, u64),
    /// Held open so that the netns, and with it the identity above, outlives the cache.
    _pin: File,
    /// `net/ipv4/conf` and `net/ipv6/conf` (none on a kernel without IPv6), as `O_PATH`.
    v4: File,
    v6: Option<File>,
}

/// The node netns's [`ConfDirs`], opened by the first call from it (a thread in the
/// process's netns: one in a pod's would pin that pod's netns).
static CONF_DIRS: Mutex<Option<ConfDirs>> = Mutex::new(None);

/// Opens `rel` below the directory `dir` (`O_PATH` fd) with `flags`.
fn open_at(dir: &File, rel: &Path, flags: libc::c_int) -> std::io::Result<File> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(rel.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `dir` is an open fd and `c` a NUL-terminated path; the fd returned is owned here.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new fd nobody else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Opens `path` with `flags` (`O_RDONLY` or `O_RDWR`).
fn open_path(path: &Path, flags: libc::c_int) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(flags & libc::O_ACCMODE == libc::O_RDWR)
        .open(path)
}

/// Opens the sysctl file `key` with `flags` (`O_RDONLY` or `O_RDWR`): below the cached
/// per-interface directory when `key` is in one and the thread runs in the cached netns, else by
/// its full path.
fn open_key(key: &str, flags: libc::c_int) -> std::io::Result<File> {
    let (family, rel) = if let Some(rel) = key.strip_prefix("net/ipv4/conf/") {
        (4, rel)
    } else if let Some(rel) = key.strip_prefix("net/ipv6/conf/") {
        (6, rel)
    } else {
        return open_path(&Path::new(PROC_SYS).join(key), flags);
    };
    let identity = |p: &str| fs::metadata(p).map(|m| (m.dev(), m.ino()));
    let netns = identity(THREAD_NETNS)?;
    let mut cache = CONF_DIRS.lock().unwrap_or_else(|e| e.into_inner());
    if cache.is_none() && identity(PROCESS_NETNS)? == netns {
        // All opened by this thread, so all of its netns (the one `netns` names).
        let dir = |d: &str| {
            OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
                .open(Path::new(PROC_SYS).join(d))
        };
        *cache = Some(ConfDirs {
            netns,
            _pin: File::open(THREAD_NETNS)?,
            v4: dir("net/ipv4/conf")?,
            v6: dir("net/ipv6/conf").ok(),
        });
    }
    let dir = cache.as_ref().filter(|c| c.netns == netns).and_then(|c| {
        if family == 4 {
            Some(&c.v4)
        } else {
            c.v6.as_ref()
        }
    });
    match dir {
        Some(dir) => open_at(dir, Path::new(rel), flags),
        None => open_path(&Path::new(PROC_SYS).join(key), flags),
    }
}

/// Sets the sysctl `key` (slash form relative to `/proc/sys`, e.g. `net/ipv4/ip_forward`) to
/// `value`, writing only when the current value differs. Returns whether it wrote.
///
/// Idempotent. The dotted form (`net.ipv4.ip_forward`) is not accepted, since interface names in
/// keys may contain dots.
pub fn set_sysctl(key: &str, value: &str) -> Result<bool, NetlinkError> {
    let path = sysctl_path(key)?;
    let mut file = open_key(key, libc::O_RDWR)
        .map_err(|e| NetlinkError::os(format!("opening {}", path.display()), e))?;
    let mut current = String::new();
    file.read_to_string(&mut current)
        .map_err(|e| NetlinkError::os(format!("reading {}", path.display()), e))?;
    if current.trim() == value.trim() {
        return Ok(false);
    }
    // At offset 0: the kernel takes a sysctl write at the start of the file as the new value.
    file.write_at(value.as_bytes(), 0)
        .map_err(|e| NetlinkError::os(format!("writing {value:?} to {}", path.display()), e))?;
    Ok(true)
}

/// Reads the sysctl `key` (slash form), trimmed.
pub fn get_sysctl(key: &str) -> Result<String, NetlinkError> {
    let path = sysctl_path(key)?;
    let mut s = String::new();
    open_key(key, libc::O_RDONLY)
        .and_then(|mut f| f.read_to_string(&mut s))
        .map(|_| s.trim().to_string())
        .map_err(|e| NetlinkError::os(format!("reading {}", path.display()), e))
}

/// `net.ipv4.ip_forward = 1` in the netns of the calling thread. Idempotent.
pub fn enable_ip_forward() -> Result<(), NetlinkError> {
    set_sysctl("net/ipv4/ip_forward", "1").map(|_| ())
}

/// Takes the node kernel out of a pod's path on the host end `ifname` of its veth.
///
/// With the userspace datapath OVS reads the port through a packet socket, and the node's kernel
/// *also* sees every frame the pod sends on it. Left alone, the kernel would answer the pod's ARP
/// for any node address with the veth's own MAC, and route IP sent to that MAC, with whatever
/// source the pod wrote, out of tun0 back into br0, where tables 0 and 25 trust the source
/// address: a way around the spoof guard of table 20 and across tenants. So on the host end:
/// `forwarding=0` (never route what arrives here), `rp_filter=1` (strict: no route points at the
/// veth, so every IP packet arriving on it fails the reverse-path check and is dropped, local
/// delivery included), `arp_ignore=8` (never answer ARP here), and IPv6 off (no link-local
/// address, no neighbour discovery). With the kernel datapath the frames never reach the stack
/// and these settings change nothing. Idempotent.
pub fn isolate_host_veth(ifname: &str) -> Result<(), NetlinkError> {
    isolate_host_veth_ipv4(ifname)?;
    match set_sysctl(&format!("net/ipv6/conf/{ifname}/disable_ipv6"), "1") {
        // No IPv6 in this kernel (or on this interface): nothing to turn off.
        Err(NetlinkError::Os { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(())
        }
        other => other.map(|_| ()),
    }
}

/// The IPv4 half of [`isolate_host_veth`] (`forwarding=0`, `rp_filter=1`, `arp_ignore=8`):
/// sysctls only, no address or route changes (a pod adopted at a takeover keeps its veth's
/// IPv6, see `cluster::ports::keys::HARDENED`). Idempotent.
pub fn isolate_host_veth_ipv4(ifname: &str) -> Result<(), NetlinkError> {
    super::validate_ifname(ifname)?;
    for (key, value) in [("forwarding", "0"), ("rp_filter", "1"), ("arp_ignore", "8")] {
        set_sysctl(&format!("net/ipv4/conf/{ifname}/{key}"), value)?;
    }
    Ok(())
}

fn sysctl_path(key: &str) -> Result<PathBuf, NetlinkError> {
    let rel = Path::new(key);
    let plain = !key.is_empty() && rel.components().all(|c| matches!(c, Component::Normal(_)));
    if !plain {
        return Err(NetlinkError::os(
            format!("sysctl key {key:?}"),
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "expected a relative path below /proc/sys such as net/ipv4/ip_forward",
            ),
        ));
    }
    Ok(Path::new(PROC_SYS).join(rel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctl_keys_must_stay_below_proc_sys() {
        assert_eq!(
            sysctl_path("net/ipv4/ip_forward").unwrap(),
            Path::new("/proc/sys/net/ipv4/ip_forward")
        );
        for bad in ["", "/etc/passwd", "net/../../etc/passwd", "./net"] {
            let err = sysctl_path(bad).unwrap_err().to_string();
            assert!(err.contains("expected a relative path"), "{bad}: {err}");
        }
    }

    /// Runs `f` on a thread of its own in a new, empty network namespace (root needed).
    fn in_new_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(move || {
            // SAFETY: unshare of this thread's netns only; the thread ends after `f`.
            let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
            assert_eq!(
                rc,
                0,
                "unshare(CLONE_NEWNET) failed ({}): this test needs root",
                std::io::Error::last_os_error()
            );
            f()
        })
        .join()
        .expect("the netns thread")
    }

    #[test]
    fn per_interface_keys_act_on_the_calling_threads_netns() {
        // In the process's netns, through the directories opened once: read only (this is the
        // machine's own netns).
        let lo = get_sysctl("net/ipv4/conf/lo/arp_ignore").unwrap();
        let by_path = fs::read_to_string("/proc/sys/net/ipv4/conf/lo/arp_ignore").unwrap();
        assert_eq!(lo, by_path.trim());
        assert!(
            lock_conf_dirs().is_some(),
            "opened by a thread of the process's netns"
        );
        // Two other namespaces, each with its own `lo`: a value set in one is not seen in the
        // other, nor in the process's.
        let (wrote, again, read) = in_new_netns(|| {
            let wrote = set_sysctl("net/ipv4/conf/lo/arp_ignore", "8").unwrap();
            let again = set_sysctl("net/ipv4/conf/lo/arp_ignore", "8").unwrap();
            (
                wrote,
                again,
                get_sysctl("net/ipv4/conf/lo/arp_ignore").unwrap(),
            )
        });
        assert!(wrote, "the first set writes");
        assert!(!again, "an equal value is not written again");
        assert_eq!(read, "8");
        let (other, v6) = in_new_netns(|| {
            let other = get_sysctl("net/ipv4/conf/lo/arp_ignore").unwrap();
            set_sysctl("net/ipv6/conf/lo/disable_ipv6", "1").unwrap();
            (other, get_sysctl("net/ipv6/conf/lo/disable_ipv6").unwrap())
        });
        assert_eq!(other, "0", "another netns keeps its own value");
        assert_eq!(get_sysctl("net/ipv4/conf/lo/arp_ignore").unwrap(), lo);
        assert_eq!(v6, "1");
        // Keys outside the per-interface directories, and missing interfaces.
        let err = in_new_netns(|| {
            set_sysctl("net/ipv4/ip_forward", "1").unwrap();
            assert_eq!(get_sysctl("net/ipv4/ip_forward").unwrap(), "1");
            set_sysctl("net/ipv4/conf/nosuchif0/rp_filter", "1").unwrap_err()
        });
        assert!(
            err.to_string()
                .contains("/proc/sys/net/ipv4/conf/nosuchif0/rp_filter"),
            "{err}"
        );
    }

    fn lock_conf_dirs() -> Option<(u64, u64)> {
        CONF_DIRS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|c| c.netns)
    }

    #[test]
    fn get_sysctl_reads_a_value() {
        // Present in every netns; 0 or 1.
        let v = get_sysctl("net/ipv4/ip_forward").unwrap();
        assert!(v == "0" || v == "1", "{v}");
    }
}
