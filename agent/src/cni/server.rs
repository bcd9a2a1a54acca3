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
//! Why one file of this size: the request lifecycle (peer check, body limits, per-sandbox lock,
//! deadline, abandonment) is one state machine; its parts only make sense together.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Notify, OwnedMutexGuard};
use tokio::task::JoinHandle;
use tokio::time::{timeout, timeout_at, Instant};
use tracing::{info, info_span, warn, Instrument};

use super::config::NetConf;
use super::request::{check_netns, Request, RequestBody};
use super::result::AddResult;
use super::types::{codes, CniError, Command};
use super::version::CniVersion;

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
                    warn!(socket = ?self.socket, error = %e, "cannot remove CNI socket");
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
    info!(socket = ?socket, "CNI server listening");
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
        warn!(dir = ?dir, mode = format!("{:o}", meta.mode() & 0o7777), "fixing CNI socket directory mode to 0700");
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
    info!(socket = ?socket, "removing stale CNI socket");
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

/// Who is on the other end, and whether they may talk to us.
#[derive(Clone, Debug)]
struct Peer {
    uid: Option<u32>,
    pid: Option<i32>,
    refusal: Option<String>,
}

fn check_peer(stream: &UnixStream, allowed: &[u32]) -> Peer {
    match stream.peer_cred() {
        Ok(cred) => {
            let uid = cred.uid();
            let refusal = (!allowed.contains(&uid)).then(|| {
                if allowed == [0] {
                    format!("peer uid {uid} is not root")
                } else {
                    format!("peer uid {uid} is not allowed (allowed uids: {allowed:?})")
                }
            });
            Peer {
                uid: Some(uid),
                pid: cred.pid(),
                refusal,
            }
        }
        Err(e) => Peer {
            uid: None,
            pid: None,
            refusal: Some(format!("peer credentials unavailable: {e}")),
        },
    }
}

async fn serve_connection<H: Handler>(stream: UnixStream, ctx: Arc<Ctx<H>>) {
    let peer = check_peer(&stream, &ctx.opts.allowed_uids);
    if let Some(why) = &peer.refusal {
        warn!(uid = ?peer.uid, pid = ?peer.pid, "refusing CNI connection: {why}");
    }
    let limit = ctx.opts.read_timeout * 2 + ctx.opts.request_timeout + Duration::from_secs(5);
    let svc_ctx = ctx.clone();
    let svc = service_fn(move |req| {
        let ctx = svc_ctx.clone();
        let peer = peer.clone();
        async move { Ok::<_, Infallible>(handle_http(ctx, peer, req).await) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(ctx.opts.read_timeout)
        .keep_alive(false);
    let conn = builder.serve_connection(TokioIo::new(stream), svc);
    match timeout(limit, conn).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => info!(error = %e, "CNI connection ended with an error"),
        Err(_) => warn!(
            "CNI connection still open after {} s; closing it",
            limit.as_secs()
        ),
    }
}

type Response = hyper::Response<Full<Bytes>>;

fn response(status: StatusCode, body: String) -> Response {
    let json = !body.is_empty();
    let mut r = hyper::Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if json {
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    r
}

/// The HTTP status for a CNI error code (see the module docs).
pub fn http_status(code: u32) -> StatusCode {
    match code {
        1..=7 => StatusCode::BAD_REQUEST,
        codes::TRY_AGAIN_LATER | codes::PLUGIN_NOT_AVAILABLE | codes::LIMITED_CONNECTIVITY => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        codes::PERMISSION_DENIED => StatusCode::FORBIDDEN,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn error_response(e: &CniError, version: CniVersion) -> Response {
    let mut r = response(http_status(e.code), e.to_json(version));
    r.extensions_mut().insert(ErrorCode(e.code));
    r
}

async fn handle_http<H: Handler>(
    ctx: Arc<Ctx<H>>,
    peer: Peer,
    req: hyper::Request<Incoming>,
) -> Response {
    let received = Instant::now();
    let v1 = CniVersion::V1_0_0;
    if let Some(why) = peer.refusal {
        return error_response(&CniError::permission_denied(why), v1);
    }
    if req.uri().path() != "/cni" {
        let e = CniError::new(
            codes::INTERNAL,
            format!(
                "no such endpoint {:?}; the shim posts to /cni",
                req.uri().path()
            ),
            "",
        );
        return response(StatusCode::NOT_FOUND, e.to_json(v1));
    }
    if req.method() != Method::POST {
        let e = CniError::new(
            codes::INTERNAL,
            format!("method {} is not allowed on /cni; use POST", req.method()),
            "",
        );
        let mut r = response(StatusCode::METHOD_NOT_ALLOWED, e.to_json(v1));
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("POST"));
        return r;
    }
    let max = ctx.opts.max_body_bytes;
    let too_large = || {
        let e = CniError::decode(format!("request body is larger than {max} bytes"));
        response(StatusCode::PAYLOAD_TOO_LARGE, e.to_json(v1))
    };
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return too_large();
    }
    let collected = timeout(
        ctx.opts.read_timeout,
        Limited::new(req.into_body(), max).collect(),
    )
    .await;
    let bytes = match collected {
        Ok(Ok(c)) => c.to_bytes(),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => return too_large(),
        Ok(Err(e)) => {
            let e = CniError::decode(format!("cannot read the request body: {e}"));
            return error_response(&e, v1);
        }
        Err(_) => {
            let e = CniError::decode(format!(
                "request body not received within {} s",
                ctx.opts.read_timeout.as_secs()
            ));
            return error_response(&e, v1);
        }
    };
    let body: RequestBody = match serde_json::from_slice(&bytes) {
        Ok(b) => b,
        Err(e) => {
            let e = CniError::decode(format!("request body is not a valid request object: {e}"));
            warn!(error = %e, "rejected CNI request");
            return error_response(&e, v1);
        }
    };
    let version = body
        .config
        .as_ref()
        .and_then(|c| NetConf::parse_version(c).ok())
        .unwrap_or(v1);
    let (cmd, cid) = (body.command.clone(), body.container_id.clone());
    let validated = match Request::from_body(body, received, ctx.opts.request_timeout) {
        Ok(r) => match r.command {
            Command::Add | Command::Check => match &r.netns {
                Some(ns) => check_netns(ns).await.map(|()| r),
                None => Ok(r),
            },
            _ => Ok(r),
        },
        Err(e) => Err(e),
    };
    match validated {
        Ok(r) => dispatch(ctx, r, received).await,
        Err(e) => {
            warn!(command = ?cmd, container_id = ?cid, code = e.code, "rejected CNI request: {}", e.msg);
            let r = error_response(&e, version);
            observe_request(cmd.as_deref().unwrap_or("unknown"), received.elapsed(), &r);
            r
        }
    }
}

/// Where a dispatched request is; decides what the client is told at the deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Queued behind another request for the same container.
    Waiting,
    /// The handler is running (it will run to completion).
    Started,
    /// The client was answered (deadline or disconnect) before the handler started: it must
    /// not start.
    Abandoned,
}

/// Marks a still-waiting request abandoned when the response side gives up or is dropped.
struct AbandonOnDrop(Arc<Mutex<Phase>>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        let mut p = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if *p == Phase::Waiting {
            *p = Phase::Abandoned;
        }
    }
}

enum Outcome {
    Done(Result<Option<AddResult>, CniError>),
    NotStarted,
}

async fn dispatch<H: Handler>(ctx: Arc<Ctx<H>>, req: Request, received: Instant) -> Response {
    let version = req.version();
    let command = req.command;
    let deadline = req.deadline;
    let budget = deadline.saturating_duration_since(received);
    let container_id = req.container_id.clone();
    let span = info_span!(
        "cni",
        command = %command,
        container_id = %req.container_id,
        ifname = %req.ifname,
        netns = tracing::field::Empty,
        k8s_namespace = tracing::field::Empty,
        k8s_pod = tracing::field::Empty,
    );
    // Plain values, and only those the request has (a query for k8s_pod="x" finds them).
    if let Some(n) = &req.netns {
        span.record("netns", tracing::field::display(n.display()));
    }
    if let Some(ns) = req.args.pod_namespace() {
        span.record("k8s_namespace", ns);
    }
    if let Some(pod) = req.args.pod_name() {
        span.record("k8s_pod", pod);
    }
    let phase = Arc::new(Mutex::new(Phase::Waiting));
    let abandon = AbandonOnDrop(phase.clone());
    let key = command
        .is_per_attachment()
        .then(|| req.container_id.clone());
    let task_phase = phase.clone();
    let handler = ctx.handler.clone();
    let locks = ctx.locks.clone();
    let inflight = ctx.inflight.enter();
    let task = tokio::spawn(
        async move {
            let _inflight = inflight;
            let guard = match key {
                Some(k) => match timeout_at(deadline, locks.lock(k)).await {
                    Ok(g) => Some(g),
                    Err(_) => return Outcome::NotStarted,
                },
                None => None,
            };
            {
                let mut p = task_phase.lock().unwrap_or_else(PoisonError::into_inner);
                if *p == Phase::Abandoned {
                    return Outcome::NotStarted;
                }
                *p = Phase::Started;
            }
            let start = Instant::now();
            let result = match command {
                Command::Add => handler.add(req).await.map(Some),
                Command::Del => handler.del(req).await.map(|()| None),
                Command::Check => handler.check(req).await.map(|()| None),
                Command::Gc => handler.gc(req).await.map(|()| None),
                Command::Status => handler.status(req).await.map(|()| None),
                // Refused by `Request::from_body`: the shim answers VERSION alone.
                Command::Version => Err(CniError::invalid_env(
                    "CNI_COMMAND VERSION is answered by the sdn-cni shim",
                )),
            };
            drop(guard);
            observe_handler(command, start.elapsed(), &result);
            let elapsed_ms = start.elapsed().as_millis() as u64;
            let total_ms = received.elapsed().as_millis() as u64;
            let late = Instant::now() > deadline;
            match &result {
                Ok(_) => info!(elapsed_ms, total_ms, late, "CNI request succeeded"),
                Err(e) => warn!(
                    elapsed_ms,
                    total_ms,
                    late,
                    code = e.code,
                    details = %e.details,
                    "CNI request failed: {}",
                    e.msg
                ),
            }
            Outcome::Done(result)
        }
        .instrument(span.clone()),
    );
    let outcome = timeout_at(deadline, task).await;
    drop(abandon);
    let _enter = span.enter();
    let response = answer(outcome, &phase, &container_id, command, version, budget);
    observe_request(command.as_str(), received.elapsed(), &response);
    response
}

/// Records the handler's own time and failure (openshift-sdn's `setup`/`teardown` series).
fn observe_handler<T>(command: Command, took: Duration, result: &Result<T, CniError>) {
    let m = crate::telemetry::metrics::metrics();
    let op = match command {
        Command::Add => "setup",
        Command::Del => "teardown",
        _ => return,
    };
    m.pod_operations_latency.observe(op, took);
    if result.is_err() {
        m.pod_operations_errors.with_label_values(&[op]).inc();
    }
}

/// Records a whole request as its client saw it, from receipt to answer (the CNI histograms,
/// openshift-sdn's `e2esetup`/`e2eteardown`).
fn observe_request(name: &str, took: Duration, response: &Response) {
    let m = crate::telemetry::metrics::metrics();
    // Label values come from a closed set: a misspelt command counts as "unknown".
    let name = match name.parse::<Command>() {
        Ok(c) => c.as_str(),
        Err(_) => "unknown",
    };
    let ok = response.status() == StatusCode::OK;
    m.cni_request_duration
        .with_label_values(&[name, if ok { "success" } else { "error" }])
        .observe(took.as_secs_f64());
    if !ok {
        let code = response
            .extensions()
            .get::<ErrorCode>()
            .map_or(0, |c| c.0)
            .to_string();
        m.cni_request_errors
            .with_label_values(&[name, code.as_str()])
            .inc();
    }
    match name {
        "ADD" => m.pod_operations_latency.observe("e2esetup", took),
        "DEL" => m.pod_operations_latency.observe("e2eteardown", took),
        _ => {}
    }
}

/// The CNI error code of an error response, kept for the metrics.
#[derive(Clone, Copy, Debug)]
struct ErrorCode(u32);

/// The client's answer: the handler's result, or "try again later" at the deadline.
fn answer(
    outcome: Result<Result<Outcome, tokio::task::JoinError>, tokio::time::error::Elapsed>,
    phase: &Mutex<Phase>,
    container_id: &str,
    command: Command,
    version: CniVersion,
    budget: Duration,
) -> Response {
    let secs = fmt_secs(budget);
    let not_started = || {
        CniError::try_again_later(format!(
            "timed out after {secs} waiting for an earlier request for container {container_id} to finish; this request was not started"
        ))
    };
    match outcome {
        Ok(Ok(Outcome::Done(Ok(Some(result))))) => {
            response(StatusCode::OK, result.to_json(version))
        }
        Ok(Ok(Outcome::Done(Ok(None)))) => response(StatusCode::OK, String::new()),
        Ok(Ok(Outcome::Done(Err(e)))) => error_response(&e, version),
        Ok(Ok(Outcome::NotStarted)) => {
            let e = not_started();
            warn!("{}", e.msg);
            error_response(&e, version)
        }
        Ok(Err(join)) => {
            let e = CniError::internal(format!("the {command} handler failed unexpectedly"))
                .with_details(format!("handler task: {join}"));
            warn!("{e}");
            error_response(&e, version)
        }
        Err(_) => {
            let started = *phase.lock().unwrap_or_else(PoisonError::into_inner) == Phase::Started;
            let e = if started {
                CniError::try_again_later(format!(
                    "timed out after {secs}; the agent is still completing or rolling back this request"
                ))
            } else {
                not_started()
            };
            warn!("{}", e.msg);
            error_response(&e, version)
        }
    }
}

/// `1s`, `119s`, `0.9s`, `4.5s`: seconds with a decimal only when needed.
fn fmt_secs(d: Duration) -> String {
    let tenths = (d.as_millis() + 50) / 100;
    let (whole, frac) = (tenths / 10, tenths % 10);
    if frac == 0 {
        format!("{whole}s")
    } else {
        format!("{whole}.{frac}s")
    }
}

/// Counts handler tasks (queued or running) so shutdown can wait for them.
#[derive(Debug, Default)]
struct Inflight {
    count: AtomicUsize,
    idle: Notify,
}

struct InflightGuard(Arc<Inflight>);

impl Inflight {
    fn enter(self: &Arc<Self>) -> InflightGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        InflightGuard(self.clone())
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// One async mutex per key, created on demand and removed when nobody holds or waits for it.
///
/// Invariant: every clone of an entry's `Arc` is made under the map lock, and every holder
/// re-checks under the map lock after dropping its clone, so the last one out removes the entry.
#[derive(Debug, Default)]
pub(crate) struct KeyedLocks {
    map: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Holds the lock for one key; releasing it may remove the key's entry.
#[derive(Debug)]
pub(crate) struct KeyGuard {
    locks: Arc<KeyedLocks>,
    key: String,
    guard: Option<OwnedMutexGuard<()>>,
}

/// A waiter's reference to the key's mutex; cleans up if the wait is cancelled.
struct Waiter {
    locks: Arc<KeyedLocks>,
    key: String,
    mutex: Option<Arc<tokio::sync::Mutex<()>>>,
}

impl KeyedLocks {
    /// Waits for the lock of `key` (FIFO among waiters).
    pub(crate) async fn lock(self: Arc<Self>, key: String) -> KeyGuard {
        let mutex = {
            let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            map.entry(key.clone()).or_default().clone()
        };
        let mut waiter = Waiter {
            locks: self.clone(),
            key: key.clone(),
            mutex: Some(mutex.clone()),
        };
        let guard = mutex.lock_owned().await;
        waiter.mutex = None; // the guard keeps the mutex alive now
        drop(waiter);
        KeyGuard {
            locks: self,
            key,
            guard: Some(guard),
        }
    }

    /// Number of keys with a holder or waiter.
    pub(crate) fn len(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn release(&self, key: &str) {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if map.get(key).is_some_and(|m| Arc::strong_count(m) == 1) {
            map.remove(key);
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if self.mutex.take().is_some() {
            self.locks.release(&self.key);
        }
    }
}

impl Drop for KeyGuard {
    fn drop(&mut self) {
        drop(self.guard.take());
        self.locks.release(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keyed_locks_serialise_per_key_and_clean_up() {
        let locks = Arc::new(KeyedLocks::default());
        let a = locks.clone().lock("a".into()).await;
        // A different key is free.
        let b = timeout(Duration::from_secs(1), locks.clone().lock("b".into()))
            .await
            .expect("key b must not wait for key a");
        assert_eq!(locks.len(), 2);
        // The same key waits until the first guard is dropped.
        let second = tokio::spawn(locks.clone().lock("a".into()));
        tokio::task::yield_now().await;
        assert!(!second.is_finished());
        drop(a);
        let a2 = timeout(Duration::from_secs(1), second)
            .await
            .expect("waiter must get the lock once it is released")
            .unwrap();
        assert_eq!(locks.len(), 2);
        drop(a2);
        drop(b);
        assert_eq!(locks.len(), 0);
    }

    #[tokio::test]
    async fn cancelled_waiters_do_not_leak_entries() {
        let locks = Arc::new(KeyedLocks::default());
        let a = locks.clone().lock("a".into()).await;
        for _ in 0..10 {
            let r = timeout(Duration::from_millis(5), locks.clone().lock("a".into())).await;
            assert!(r.is_err());
        }
        assert_eq!(locks.len(), 1);
        drop(a);
        assert_eq!(locks.len(), 0);
        // Cancelled after the holder released but before the waiter ran.
        let a = locks.clone().lock("k".into()).await;
        let waiter = tokio::spawn(locks.clone().lock("k".into()));
        tokio::task::yield_now().await;
        drop(a);
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(locks.len(), 0);
    }

    #[test]
    fn seconds_formatting() {
        assert_eq!(fmt_secs(Duration::from_secs(119)), "119s");
        assert_eq!(fmt_secs(Duration::from_millis(900)), "0.9s");
        assert_eq!(fmt_secs(Duration::from_millis(4500)), "4.5s");
        assert_eq!(fmt_secs(Duration::from_millis(999)), "1s");
    }

    #[test]
    fn status_mapping() {
        assert_eq!(http_status(4), StatusCode::BAD_REQUEST);
        assert_eq!(http_status(7), StatusCode::BAD_REQUEST);
        assert_eq!(http_status(11), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(http_status(50), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(http_status(100), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(http_status(101), StatusCode::FORBIDDEN);
        assert_eq!(http_status(5), StatusCode::BAD_REQUEST);
    }
}
