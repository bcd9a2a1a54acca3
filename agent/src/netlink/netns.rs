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
    fd: &OwnedFd,
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

/// The agent's private network namespace where the port pool's veth peers wait
/// ([`crate::pod::pool`]): moving a peer from here into a pod's namespace makes no link event in
/// the node's namespace, so ovs-vswitchd (which reconfigures the whole bridge on every link
/// event in its namespace) does not notice the ADD at all. Anonymous: it lives while the agent
/// holds its descriptor, and with it go the parked peers and their host ends (the next agent
/// finds their ports dead and replaces them).
pub(crate) struct Parking {
    /// The namespace, as an nsfs descriptor (for `setns_by_fd`).
    pub(crate) file: File,
    /// A netlink connection inside it (driven by its own task).
    pub(crate) handle: Handle,
}

impl std::fmt::Debug for Parking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parking").finish_non_exhaustive()
    }
}

impl Parking {
    /// Creates the namespace (a thread unshares its netns, hands back the namespace file and a
    /// netlink socket opened inside, and exits) and spawns the socket's driver.
    pub(crate) async fn create() -> Result<Parking, NetlinkError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| NetlinkError::NoRuntime)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let rt = runtime.clone();
        std::thread::Builder::new()
            .name("sdn-parking".into())
            .spawn(move || {
                let made = (|| {
                    // SAFETY: unshare only changes this thread's netns; the thread exits right
                    // after opening what it hands back.
                    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                        return Err(NetlinkError::os(
                            "creating the port pool's namespace (unshare)",
                            io::Error::last_os_error(),
                        ));
                    }
                    let file = File::open("/proc/thread-self/ns/net")
                        .map_err(|e| NetlinkError::os("opening the port pool's namespace", e))?;
                    let _enter = rt.enter();
                    let (conn, handle) = connect().map_err(|e| {
                        NetlinkError::os("opening a netlink socket in the port pool's namespace", e)
                    })?;
                    Ok((file, conn, handle))
                })();
                let _ = tx.send(made);
            })
            .map_err(|e| NetlinkError::os("starting the port pool namespace thread", e))?;
        let (file, conn, handle) = rx.await.map_err(|_| {
            NetlinkError::os(
                "creating the port pool's namespace",
                io::Error::other("the thread exited without an answer"),
            )
        })??;
        runtime.spawn(conn);
        Ok(Parking { file, handle })
    }
}
