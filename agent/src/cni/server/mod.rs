//! The agent's CNI server: HTTP/1.1 over a Unix socket, one `POST /cni` per shim invocation.
//!
//! Layers (as Antrea's cniserver): this module owns the protocol — socket hygiene, peer
//! credentials, decoding, validation, CNI error codes, per-sandbox serialisation and
//! deadlines — and hands validated [`Request`]s to a [`Handler`] (the pod logic: IPAM, veth,
//! OVS), which it never sees inside.
//!
//! Guarantees:
//! - **Socket hygiene.** The socket's directory is created (or fixed) with mode 0700 and must be
//!   a directory owned by us; a stale socket file is removed only if it is a socket nobody
//!   listens on; the socket is chmodded 0600 right after bind (the 0700 directory already keeps
//!   others out in between). Dropping the [`ServerHandle`] stops accepting and removes the
//!   socket file, if it is still the one we bound.
//! - **Peers.** Every connection's SO_PEERCRED uid must be in [`ServerOptions::allowed_uids`]
//!   (default: root only); others get 403 with a CNI error (code 101) and a log line.
//! - **Serialisation.** Requests for the same container id (ADD, DEL, CHECK) run one at a time,
//!   in arrival order (tokio's mutex is fair); different container ids run in parallel. GC and
//!   STATUS are not serialised: a handler's GC must itself skip attachments being added. The
//!   lock table holds only keys with a holder or waiter, so it does not grow with history.
//! - **Deadlines.** Each request has a deadline: [`ServerOptions::request_timeout`], shortened
//!   so the answer reaches the shim before the shim's own deadline (the config's
//!   `timeoutSeconds`, default 120 s, minus a tenth, at most 1 s; see
//!   [`answer_within`](super::request::answer_within)). The handler runs in its own task and is never
//!   cancelled, not by the deadline and not by the client going away: it finishes (or rolls
//!   back) and keeps the sandbox lock until then, so a retry for the same container waits for
//!   it. At the deadline the client gets code 11. A request still queued behind another one at
//!   its deadline is abandoned without running.
//!
//! HTTP status: 200 with the rendered result (ADD) or an empty body; otherwise a CNI error
//! object in the request's cniVersion (1.0.0 when unknown) with 400 (codes 1-7), 403 (peer
//! refused), 404/405 (wrong path/method), 413 (body too large), 503 (codes 11, 50, 51) or 500.
//! The shim only distinguishes 200 from the rest.
//!
//! The parts: here the socket (made private, stale sockets removed only when nobody listens)
//! and the accept loop; `lifecycle`, one request's life from the peer check to the answer (one
//! state machine, kept in one file); `locks`, the per-sandbox serialisation.

use std::future::Future;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};

use tokio::task::JoinHandle;
use tokio::time::{timeout, timeout_at, Instant};
use tracing::{info, warn};

use super::request::Request;
use super::result::AddResult;
use super::types::CniError;

mod lifecycle;
use lifecycle::*;
mod locks;
pub(crate) use locks::*;

/// The pod logic behind the server. The server calls these with validated requests.
///
/// Concurrency: calls for the same container id never overlap (ADD, DEL, CHECK); calls for
/// different ids, and GC/STATUS, may run concurrently. Each call runs in its own task and is
/// never cancelled: a handler should aim to finish before `req.deadline` (after which the
/// runtime has been told "try again later") but must always complete its rollback.
pub trait Handler: Send + Sync + 'static {
    /// ADD: attach and return the result (append to `req.config.prev_result` when chained).
    /// On error, every step already taken must be undone before returning.
    fn add(&self, req: Request) -> impl Future<Output = Result<AddResult, CniError>> + Send;
    /// DEL: detach; idempotent (success when already gone, netns missing or `None`).
    fn del(&self, req: Request) -> impl Future<Output = Result<(), CniError>> + Send;
    /// CHECK: verify the attachment matches `req.config.prev_result`; a precise error on drift.
    fn check(&self, req: Request) -> impl Future<Output = Result<(), CniError>> + Send;
    /// GC: remove resources of attachments not in `req.config.valid_attachments`.
    fn gc(&self, req: Request) -> impl Future<Output = Result<(), CniError>> + Send;
    /// STATUS: `Ok` when ready for ADDs, else code 50 or 51.
    fn status(&self, req: Request) -> impl Future<Output = Result<(), CniError>> + Send;
}

/// Server settings.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// The longest a request may take (default 120 s); the shim's deadline (`timeoutSeconds`,
    /// default 120 s) shortens it, see [`answer_within`](super::request::answer_within).
    pub request_timeout: Duration,
    /// Peer uids allowed to connect (default: `[0]`, root only).
    pub allowed_uids: Vec<u32>,
    /// The largest request body accepted (default 1 MiB).
    pub max_body_bytes: usize,
    /// How long a client may take to send the request headers, and then the body (default 10 s).
    pub read_timeout: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            request_timeout: Duration::from_secs(120),
            allowed_uids: vec![0],
            max_body_bytes: 1 << 20,
            read_timeout: Duration::from_secs(10),
        }
    }
}

/// Failures to start the server (each names the path involved).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The socket path has no parent directory or file name.
    #[error("CNI socket path {0:?} must be an absolute file path")]
    BadPath(PathBuf),
    /// The socket directory exists but is not a directory.
    #[error("CNI socket directory {0:?} exists and is not a directory")]
    NotADirectory(PathBuf),
    /// The socket directory belongs to someone else.
    #[error("CNI socket directory {path:?} is owned by uid {owner}, not by this process (uid {euid}); refusing to use it")]
    DirectoryOwner {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// Our effective uid.
        euid: u32,
    },
    /// Creating, inspecting or chmodding the directory failed.
    #[error("CNI socket directory {path:?}: {op}: {source}")]
    Directory {
        /// The directory.
        path: PathBuf,
        /// What we tried.
        op: &'static str,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Something other than a socket is at the socket path.
    #[error("{0:?} exists and is not a socket; refusing to remove it")]
    NotASocket(PathBuf),
    /// Another process serves on the socket.
    #[error("another process is already serving on {0:?}")]
    InUse(PathBuf),
    /// Inspecting, removing, binding or chmodding the socket failed.
    #[error("CNI socket {path:?}: {op}: {source}")]
    Socket {
        /// The socket path.
        path: PathBuf,
        /// What we tried.
        op: &'static str,
        /// Why it failed.
        source: std::io::Error,
    },
}

/// A running server. Dropping it (or [`ServerHandle::shutdown`]) stops accepting and removes
/// the socket file; requests already accepted run to completion.
#[derive(Debug)]
pub struct ServerHandle {
    socket: PathBuf,
    /// (dev, ino) of the socket we bound, so we never remove someone else's.
    ident: (u64, u64),
    accept: Option<JoinHandle<()>>,
    locks: Arc<KeyedLocks>,
    inflight: Arc<Inflight>,
}

impl ServerHandle {
    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Handler calls currently running or queued (including ones whose client timed out).
    pub fn in_flight(&self) -> usize {
        self.inflight.count.load(Ordering::SeqCst)
    }

    /// Container ids with a running or queued request (the size of the lock table).
    pub fn locked_sandboxes(&self) -> usize {
        self.locks.len()
    }

    /// Stops accepting, removes the socket, then waits up to `grace` for running handler calls
    /// (they finish or roll back). Returns how many were still running at the end.
    pub async fn shutdown(mut self, grace: Duration) -> usize {
        if let Some(task) = self.accept.take() {
            task.abort();
            let _ = task.await;
        }
        self.remove_socket();
        let deadline = Instant::now() + grace;
        loop {
            let notified = self.inflight.idle.notified();
            let n = self.in_flight();
            if n == 0 {
                return 0;
            }
            if timeout_at(deadline, notified).await.is_err() {
                return self.in_flight();
            }
        }
    }

    fn remove_socket(&self) {
        match std::fs::symlink_metadata(&self.socket) {
            Ok(m) if (m.dev(), m.ino()) == self.ident => {
                if let Err(e) = std::fs::remove_file(&self.socket) {
                    warn!(socket = %self.socket.display(), error = %e, "cannot remove CNI socket");
                }
            }
            _ => {}
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if let Some(task) = self.accept.take() {
            task.abort();
        }
        self.remove_socket();
    }
}

/// Starts serving on `socket` (see the module docs for what is checked and guaranteed).
pub async fn serve<H: Handler>(
    socket: &Path,
    handler: Arc<H>,
    opts: ServerOptions,
) -> Result<ServerHandle, ServerError> {
    let listener = bind_private_socket(socket).await?;
    let meta = std::fs::symlink_metadata(socket).map_err(|source| ServerError::Socket {
        path: socket.to_path_buf(),
        op: "stat",
        source,
    })?;
    let locks = Arc::new(KeyedLocks::default());
    let inflight = Arc::new(Inflight::default());
    let ctx = Arc::new(Ctx {
        handler,
        opts,
        locks: locks.clone(),
        inflight: inflight.clone(),
    });
    info!(socket = %socket.display(), "CNI server listening");
    let accept = tokio::spawn(accept_loop(listener, ctx));
    Ok(ServerHandle {
        socket: socket.to_path_buf(),
        ident: (meta.dev(), meta.ino()),
        accept: Some(accept),
        locks,
        inflight,
    })
}

/// Binds a root-only socket at `socket` as the CNI server's is bound (the local API uses it
/// too): the directory made or fixed to 0700 and owned by us, a stale socket removed only when
/// nobody listens on it, the socket chmodded 0600 right after bind.
pub async fn bind_private_socket(socket: &Path) -> Result<UnixListener, ServerError> {
    let dir = match (socket.parent(), socket.file_name()) {
        (Some(d), Some(_)) if socket.is_absolute() => d.to_path_buf(),
        _ => return Err(ServerError::BadPath(socket.to_path_buf())),
    };
    prepare_dir(&dir)?;
    remove_stale_socket(socket).await?;
    let sock_err = |op: &'static str| {
        move |source| ServerError::Socket {
            path: socket.to_path_buf(),
            op,
            source,
        }
    };
    let listener = UnixListener::bind(socket).map_err(sock_err("bind"))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
        .map_err(sock_err("chmod 0600"))?;
    Ok(listener)
}

/// Removes a socket file on drop, if it is still the one that was there when this was made
/// (never another process's).
#[derive(Debug)]
pub struct RemoveOnDrop {
    path: PathBuf,
    ident: Option<(u64, u64)>,
}

impl RemoveOnDrop {
    /// Guards the socket now at `path`.
    pub fn new(path: &Path) -> RemoveOnDrop {
        RemoveOnDrop {
            path: path.to_path_buf(),
            ident: std::fs::symlink_metadata(path)
                .ok()
                .map(|m| (m.dev(), m.ino())),
        }
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let now = std::fs::symlink_metadata(&self.path)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        if now.is_some() && now == self.ident {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn prepare_dir(dir: &Path) -> Result<(), ServerError> {
    let dir_err = |op: &'static str| {
        move |source| ServerError::Directory {
            path: dir.to_path_buf(),
            op,
            source,
        }
    };
    match std::fs::symlink_metadata(dir) {
        Ok(m) if !m.is_dir() => return Err(ServerError::NotADirectory(dir.to_path_buf())),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(dir_err("create"))?;
        }
        Err(e) => return Err(dir_err("stat")(e)),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(dir_err("stat"))?;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if meta.uid() != euid {
        return Err(ServerError::DirectoryOwner {
            path: dir.to_path_buf(),
            owner: meta.uid(),
            euid,
        });
    }
    if meta.mode() & 0o7777 != 0o700 {
        warn!(dir = %dir.display(), mode = format!("{:o}", meta.mode() & 0o7777), "fixing CNI socket directory mode to 0700");
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(dir_err("chmod 0700"))?;
    }
    Ok(())
}

async fn remove_stale_socket(socket: &Path) -> Result<(), ServerError> {
    let meta = match std::fs::symlink_metadata(socket) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(ServerError::Socket {
                path: socket.to_path_buf(),
                op: "stat",
                source,
            })
        }
    };
    if !meta.file_type().is_socket() {
        return Err(ServerError::NotASocket(socket.to_path_buf()));
    }
    // A live server accepts (or at least does not refuse) the connection.
    match timeout(Duration::from_secs(1), UnixStream::connect(socket)).await {
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
        Ok(Err(e)) => {
            return Err(ServerError::Socket {
                path: socket.to_path_buf(),
                op: "probe for a live server",
                source: e,
            })
        }
        Ok(Ok(_)) | Err(_) => return Err(ServerError::InUse(socket.to_path_buf())),
    }
    info!(socket = %socket.display(), "removing stale CNI socket");
    std::fs::remove_file(socket).map_err(|source| ServerError::Socket {
        path: socket.to_path_buf(),
        op: "remove stale socket",
        source,
    })
}

struct Ctx<H> {
    handler: Arc<H>,
    opts: ServerOptions,
    locks: Arc<KeyedLocks>,
    inflight: Arc<Inflight>,
}

async fn accept_loop<H: Handler>(listener: UnixListener, ctx: Arc<Ctx<H>>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve_connection(stream, ctx.clone()));
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                warn!(error = %e, "CNI server accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests;
