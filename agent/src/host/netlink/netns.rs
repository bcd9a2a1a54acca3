//! Netlink sessions inside another network namespace (a pod's).
//!
//! A netlink (or any) socket belongs to the netns of the thread that created it, whatever thread
//! uses it later. So a session is opened by a dedicated, short-lived std thread that enters the
//! netns with `setns(fd, CLONE_NEWNET)`, creates the rtnetlink socket (and, when asked, an
//! `AF_INET` socket for ethtool ioctls) and exits; the connection is then driven on the caller's
//! tokio task. Tokio threads never change netns: a worker (or a `spawn_blocking` thread, which
//! goes back to a pool) left in a pod netns would run every later task there.
//!
//! The session's connection future is polled only while [`NetnsSession::drive`] runs work on it,
//! and dropped with the session, which closes the sockets: no task outlives the operation.
//!
//! Cost: one thread spawn plus two sockets per session, tens of microseconds.

use std::fs::File;
use std::future::Future;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rtnetlink::Handle;

use super::{connect, ethtool, NetlinkConnection, NetlinkError};

/// Opens a netns file (`/run/netns/<name>`, `/proc/<pid>/ns/net`...) read-only, close-on-exec.
pub(crate) fn open_netns(path: &Path) -> Result<File, NetlinkError> {
    File::open(path).map_err(|source| NetlinkError::Netns {
        netns: path.to_path_buf(),
        action: "opening",
        source,
    })
}

/// An rtnetlink connection (and optionally an ioctl socket) living in another netns.
pub(crate) struct NetnsSession {
    path: PathBuf,
    handle: Handle,
    conn: NetlinkConnection,
    ioctl: Option<OwnedFd>,
}

impl std::fmt::Debug for NetnsSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetnsSession")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// What the netns thread hands back.
type Opened = (NetlinkConnection, Handle, Option<OwnedFd>);

impl NetnsSession {
    /// Opens a session in the netns of `file` (opened from `path`, which is used in messages).
    /// With `with_ioctl`, also an `AF_INET` socket for ethtool ioctls in that netns.
    pub(crate) async fn open(
        path: &Path,
        file: &File,
        with_ioctl: bool,
    ) -> Result<NetnsSession, NetlinkError> {
        // The thread gets its own descriptor: if this future is dropped early, the thread must
        // not setns on a closed (or reused) descriptor number.
        let fd: OwnedFd = file
            .try_clone()
            .map_err(|source| NetlinkError::Netns {
                netns: path.to_path_buf(),
                action: "duplicating the descriptor of",
                source,
            })?
            .into();
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| NetlinkError::NoRuntime)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let thread_path = path.to_path_buf();
        std::thread::Builder::new()
            .name("sdn-netns".into())
            .spawn(move || {
                let opened = open_in_netns(&thread_path, &fd, &runtime, with_ioctl);
                drop(fd);
                let _ = tx.send(opened);
            })
            .map_err(|e| {
                NetlinkError::os(
                    format!("starting a thread to enter netns {}", path.display()),
                    e,
                )
            })?;
        let (conn, handle, ioctl) = rx.await.map_err(|_| {
            NetlinkError::os(
                format!("entering netns {}", path.display()),
                io::Error::other("the netns thread exited without an answer"),
            )
        })??;
        Ok(NetnsSession {
            path: path.to_path_buf(),
            handle,
            conn,
            ioctl,
        })
    }

    /// A handle for requests in this netns (they progress only inside [`NetnsSession::drive`]).
    pub(crate) fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// The ethtool ioctl socket of this netns, if the session was opened with one.
    pub(crate) fn ioctl(&self) -> Option<BorrowedFd<'_>> {
        self.ioctl.as_ref().map(|fd| fd.as_fd())
    }

    /// Runs `work` (which makes requests through [`NetnsSession::handle`]) while driving the
    /// connection.
    pub(crate) async fn drive<F: Future>(&mut self, work: F) -> Result<F::Output, NetlinkError> {
        tokio::select! {
            biased;
            out = work => Ok(out),
            () = &mut self.conn => Err(NetlinkError::os(
                format!("netlink connection in netns {}", self.path.display()),
                io::Error::new(io::ErrorKind::BrokenPipe, "closed unexpectedly"),
            )),
        }
    }
}

/// Body of the netns thread: enter the netns, open the sockets there.
fn open_in_netns(
    path: &Path,
    fd: &impl AsRawFd,
    runtime: &tokio::runtime::Handle,
    with_ioctl: bool,
) -> Result<Opened, NetlinkError> {
    // SAFETY: setns with a valid descriptor changes only the netns of this thread, which is ours
    // and exits right after opening the sockets.
    if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(NetlinkError::Netns {
            netns: path.to_path_buf(),
            action: "entering",
            source: io::Error::last_os_error(),
        });
    }
    // The socket registers with the runtime's reactor, which needs the runtime context.
    let _enter = runtime.enter();
    let (conn, handle) = connect().map_err(|e| {
        NetlinkError::os(
            format!("opening a netlink socket in netns {}", path.display()),
            e,
        )
    })?;
    let ioctl = if with_ioctl {
        Some(ethtool::inet_socket().map_err(|e| {
            NetlinkError::os(
                format!("opening an ioctl socket in netns {}", path.display()),
                e,
            )
        })?)
    } else {
        None
    };
    Ok((conn, handle, ioctl))
}

/// The network namespace where the port pool's veth peers wait ([`crate::pod::pool`]), and
/// where the peers of pods on pool ports stay: such a pod's interface is a passthru macvlan
/// created directly in the pod's namespace on top of the parked peer (creating a device in
/// another namespace is cheap, moving one there waits for an RCU grace period). Link events
/// here are not seen by ovs-vswitchd (which reconfigures the whole bridge on every link event
/// in its own namespace), so an ADD does not make it reconfigure.
///
/// Pinned like `ip netns add` pins a namespace: bound onto a file (by default next to the CNI
/// socket), so it outlives the agent, and pods keep their interfaces across agent restarts
/// and upgrades. The next agent opens it from there.
pub(crate) struct Parking {
    /// The namespace, as an nsfs descriptor (for `setns_by_fd`).
    pub(crate) file: File,
    /// A netlink connection inside it (driven by its own task).
    pub(crate) handle: Handle,
    /// An `AF_INET` socket inside it, for ethtool ioctls on the parked peers.
    pub(crate) ioctl: OwnedFd,
}

impl std::fmt::Debug for Parking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parking").finish_non_exhaustive()
    }
}

/// `statfs` magic of nsfs: a file where a namespace is pinned.
const NSFS_MAGIC: i64 = 0x6e73_6673;

/// Whether `path` is a pinned namespace (an nsfs bind mount).
pub fn is_pinned_netns(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes into the zeroed struct we own; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0) && st.f_type as i64 == NSFS_MAGIC
}

impl Parking {
    /// Opens the namespace pinned at `pin`, or creates one and pins it there (a thread
    /// unshares its netns, turns IPv6 off in it, binds it onto `pin`, hands back the namespace
    /// file and a netlink socket opened inside, and exits); spawns the socket's driver.
    pub(crate) async fn open_or_create(pin: &Path) -> Result<Parking, NetlinkError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| NetlinkError::NoRuntime)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let rt = runtime.clone();
        let pin = pin.to_path_buf();
        std::thread::Builder::new()
            .name("sdn-parking".into())
            .spawn(move || {
                let _ = tx.send(enter_parking(&pin, &rt));
            })
            .map_err(|e| NetlinkError::os("starting the port pool namespace thread", e))?;
        let (file, conn, handle, ioctl) = rx.await.map_err(|_| {
            NetlinkError::os(
                "opening the port pool's namespace",
                io::Error::other("the thread exited without an answer"),
            )
        })??;
        runtime.spawn(conn);
        Ok(Parking {
            file,
            handle,
            ioctl,
        })
    }
}

/// Body of the parking thread (see [`Parking::open_or_create`]); the thread exits after it.
fn enter_parking(
    pin: &Path,
    rt: &tokio::runtime::Handle,
) -> Result<(File, NetlinkConnection, Handle, OwnedFd), NetlinkError> {
    if !is_pinned_netns(pin) {
        pin_new_netns(pin)?;
    }
    let file = open_netns(pin)?;
    let (conn, handle, ioctl) = open_in_netns(pin, &file, rt, true)?;
    let ioctl = ioctl.ok_or_else(|| {
        NetlinkError::os(
            "opening an ioctl socket in the port pool's namespace",
            io::Error::other("none was opened"),
        )
    })?;
    Ok((file, conn, handle, ioctl))
}

/// Moves the calling thread into a new network namespace with IPv6 off and pins it on `pin`
/// (a bind mount, as `ip netns add` makes).
fn pin_new_netns(pin: &Path) -> Result<(), NetlinkError> {
    let os = |what: String| move |e: io::Error| NetlinkError::os(what, e);
    if let Some(dir) = pin.parent() {
        std::fs::create_dir_all(dir).map_err(os(format!("creating {}", dir.display())))?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(pin)
        .map_err(os(format!("creating {}", pin.display())))?;
    // SAFETY: unshare only changes this thread's netns; the thread exits right after.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(NetlinkError::os(
            "creating the port pool's namespace (unshare)",
            io::Error::last_os_error(),
        ));
    }
    // Parked peers are up (so their host ends keep their carrier): no IPv6 chatter from them.
    // The net sysctls under /proc/sys are those of the opening thread's netns.
    for key in ["all", "default"] {
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{key}/disable_ipv6"), "1");
    }
    let src = c"/proc/thread-self/ns/net";
    let dst = std::ffi::CString::new(pin.as_os_str().as_encoded_bytes()).map_err(|_| {
        NetlinkError::os(
            format!("pinning the port pool's namespace on {}", pin.display()),
            io::Error::other("the path holds a NUL byte"),
        )
    })?;
    // SAFETY: both paths are NUL-terminated; a bind mount changes no memory of ours.
    if unsafe {
        libc::mount(
            src.as_ptr(),
            dst.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    } != 0
    {
        return Err(NetlinkError::os(
            format!(
                "pinning the port pool's namespace on {} (bind mount)",
                pin.display()
            ),
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Why a namespace pinned on `pin` would not outlive the agent, if it would not. It does when
/// the pin is on a shared mount (one that propagates to the host, like a `Bidirectional` volume
/// in a pod), or when the agent runs in the mount namespace it was started from and is not the
/// first process of a container (whose mount namespace goes with it). `ip netns exec` fails
/// this (it gives the agent a private mount namespace): the pin would go with the agent, and
/// with it every pod interface whose peer is parked there.
pub fn pin_outlives_agent(pin: &Path) -> Result<(), String> {
    let ino = |p: &str| std::fs::metadata(p).map(|m| std::os::unix::fs::MetadataExt::ino(&m));
    let ours = ino("/proc/self/ns/mnt").ok();
    // SAFETY: getppid and getpid cannot fail.
    let (pid, ppid) = unsafe { (libc::getpid(), libc::getppid()) };
    let parents = ino(&format!("/proc/{ppid}/ns/mnt")).ok();
    let first = ino("/proc/1/ns/mnt").ok();
    let inherited =
        pid != 1 && ours.is_some() && ours == parents && first.is_none_or(|f| Some(f) == ours);
    let dir = pin.parent().unwrap_or(Path::new("/"));
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let info = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
    // The mount holding `dir`: the longest mount point above it (the last one when stacked).
    let mut best: Option<(usize, bool, String)> = None;
    for line in info.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(point) = fields.get(4) else { continue };
        let point = point.replace("\\040", " ");
        if !dir.starts_with(&point) {
            continue;
        }
        let shared = fields
            .iter()
            .skip(6)
            .take_while(|f| **f != "-")
            .any(|f| f.starts_with("shared:"));
        if best.as_ref().is_none_or(|(len, _, _)| point.len() >= *len) {
            best = Some((point.len(), shared, point));
        }
    }
    match best {
        Some((_, true, _)) => Ok(()),
        _ if inherited => Ok(()),
        Some((_, false, point)) => Err(format!(
            "{} is on mount {point}, which is not shared, and the agent has a mount namespace \
             of its own: a namespace pinned there would go when the agent exits",
            dir.display()
        )),
        None => Err(format!("no mount holds {}", dir.display())),
    }
}
