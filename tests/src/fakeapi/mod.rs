//! A fake Kubernetes API server for tests: real HTTP over TCP, good enough for kube-rs clients
//! (typed and dynamic `Api`s, `watcher`, `reflector`) and shared by several processes.
//!
//! There is no kube-apiserver for this machine, and the agent's Kubernetes wiring (reflectors,
//! resumed watches, re-lists after a 410, leases) is only worth testing through the same client
//! library it uses in production. So this is a small in-memory API server, not a mock: a generic
//! JSON object store ([`store`]) with one global resourceVersion counter and a bounded event
//! history, served over HTTP/1.1 by hyper ([`server`]) with the REST paths, list/watch semantics,
//! patch formats and `Status` errors of kube-apiserver. It serves the kinds in
//! [`resources::Registry::default`] (OpenShift SDN kinds, Nodes, Namespaces, Pods, Leases, a few
//! more); tests can [`FakeApi::register`] others.
//!
//! ```no_run
//! use sdn_tests::fakeapi::FakeApi;
//! let api = FakeApi::start("127.0.0.1:0");
//! api.put(serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})).unwrap();
//! api.kubeconfig("/tmp/kubeconfig").unwrap();            // for agent processes
//! let before = api.requests();
//! // ... exercise the agent ...
//! assert_eq!(api.requests().since(&before).count("get", "/api/v1/namespaces/a/pods"), 0);
//! api.expire_watches();                                 // every watcher must re-list
//! ```
//!
//! The server runs on its own thread with its own tokio runtime, so it works from synchronous
//! tests and from any async runtime, and keeps serving while a test blocks. Dropping the
//! [`FakeApi`] stops it and closes every connection.
//!
//! Limits (beyond those of [`store`] and [`server`]): single version per group, no auth, no
//! admission (defaults are not filled in, e.g. pods get no status), strategic merge and
//! server-side apply are served as JSON merge patches (no field ownership, no list merge keys).

pub mod patch;
pub mod proto;
pub mod resources;
pub mod select;
pub mod server;
pub mod store;

pub use resources::{Registry, ResourceType};
pub use server::Options;
pub use store::ApiError;

use serde_json::Value;
use server::Shared;
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::oneshot;

/// Errors of the test-side handle.
#[derive(Debug)]
pub enum FakeApiError {
    /// The listening socket could not be bound.
    Bind {
        /// The requested address.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The server thread or runtime could not be started.
    Start {
        /// The bound address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The kubeconfig could not be written.
    Kubeconfig {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// No served type has this apiVersion and kind.
    UnknownKind {
        /// The object's apiVersion.
        api_version: String,
        /// The object's kind.
        kind: String,
    },
    /// The store refused the object.
    Put {
        /// The object's kind.
        kind: String,
        /// The object's name.
        name: String,
        /// Why.
        source: Box<ApiError>,
    },
}

// A hand-written `Error` impl: the tests crate does not depend on thiserror.
impl std::fmt::Display for FakeApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FakeApiError::Bind { addr, source } => {
                write!(f, "bind fake api server to {addr}: {source}")
            }
            FakeApiError::Start { addr, source } => {
                write!(f, "start fake api server on {addr}: {source}")
            }
            FakeApiError::Kubeconfig { path, source } => {
                write!(f, "write kubeconfig {path}: {source}")
            }
            FakeApiError::UnknownKind { api_version, kind } => write!(
                f,
                "no served resource type has apiVersion {api_version:?} and kind {kind:?}"
            ),
            FakeApiError::Put { kind, name, source } => write!(f, "put {kind} {name:?}: {source}"),
        }
    }
}

impl std::error::Error for FakeApiError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FakeApiError::Bind { source, .. }
            | FakeApiError::Start { source, .. }
            | FakeApiError::Kubeconfig { source, .. } => Some(source),
            FakeApiError::Put { source, .. } => Some(source.as_ref()),
            FakeApiError::UnknownKind { .. } => None,
        }
    }
}

/// Request counters: how many requests each (verb, path) pair received. Verbs are the
/// Kubernetes ones: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
/// `deletecollection` (discovery documents count as `get`, unknown paths as `unknown`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requests {
    counts: BTreeMap<(String, String), u64>,
}

impl Requests {
    pub(crate) fn add(&mut self, verb: &str, path: &str) {
        *self
            .counts
            .entry((verb.to_string(), path.to_string()))
            .or_default() += 1;
    }

    /// Requests with this verb (`*` for any) whose path starts with `path_prefix`.
    pub fn count(&self, verb: &str, path_prefix: &str) -> u64 {
        self.counts
            .iter()
            .filter(|((v, p), _)| (verb == "*" || v == verb) && p.starts_with(path_prefix))
            .map(|(_, n)| n)
            .sum()
    }

    /// All requests.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// The requests made after `earlier` was taken.
    pub fn since(&self, earlier: &Requests) -> Requests {
        let counts = self
            .counts
            .iter()
            .filter_map(|(k, n)| {
                let d = n - earlier.counts.get(k).copied().unwrap_or(0).min(*n);
                (d > 0).then(|| (k.clone(), d))
            })
            .collect();
        Requests { counts }
    }

    /// Every (verb, path, count).
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str, u64)> {
        self.counts
            .iter()
            .map(|((v, p), n)| (v.as_str(), p.as_str(), *n))
    }
}

impl std::fmt::Display for Requests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (v, p, n) in self.entries() {
            writeln!(f, "{n:6} {v} {p}")?;
        }
        Ok(())
    }
}

/// A running fake API server (see the module docs). Stopped on drop.
#[derive(Debug)]
pub struct FakeApi {
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl FakeApi {
    /// Serves on `addr` (e.g. `127.0.0.1:0` for a free port) with default [`Options`]. Panics
    /// with the reason if that is impossible.
    pub fn start(addr: impl ToSocketAddrs + std::fmt::Debug) -> FakeApi {
        FakeApi::try_start(addr).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`FakeApi::start`], returning the error instead of panicking.
    pub fn try_start(addr: impl ToSocketAddrs + std::fmt::Debug) -> Result<FakeApi, FakeApiError> {
        let listener = TcpListener::bind(&addr).map_err(|source| FakeApiError::Bind {
            addr: format!("{addr:?}"),
            source,
        })?;
        FakeApi::serve(listener, Options::default())
    }

    /// Serves on `addr` inside network namespace `netns` (a name under /var/run/netns or a
    /// path): the listening socket is bound by a thread that entered the namespace, so
    /// processes there (agents in node namespaces) reach it, e.g. on an underlay address.
    /// Panics with the reason if that is impossible.
    pub fn start_in_netns(netns: &str, addr: &str) -> FakeApi {
        let a = addr.to_string();
        let bound = crate::harness::in_netns(netns, move || TcpListener::bind(a.as_str()));
        let listener = bound
            .unwrap_or_else(|e| panic!("bind fake api server to {addr} in netns {netns}: {e}"));
        FakeApi::serve(listener, Options::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Serves on an already bound listener (any namespace) with the given options.
    pub fn serve(listener: TcpListener, options: Options) -> Result<FakeApi, FakeApiError> {
        let addr = listener.local_addr().map_err(|source| FakeApiError::Bind {
            addr: "listener".to_string(),
            source,
        })?;
        let start_err = |source| FakeApiError::Start { addr, source };
        listener.set_nonblocking(true).map_err(start_err)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("fake-apiserver")
            .enable_all()
            .build()
            .map_err(start_err)?;
        let listener = {
            let _guard = runtime.enter();
            tokio::net::TcpListener::from_std(listener).map_err(start_err)?
        };
        let shared = Arc::new(Shared::new(addr, options));
        let (stop, stopped) = oneshot::channel();
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fake-apiserver-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(accept_loop(listener, sh, stopped));
                runtime.shutdown_timeout(Duration::from_secs(2));
            })
            .map_err(start_err)?;
        tracing::debug!(%addr, "fake api server started");
        Ok(FakeApi {
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address served.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// A kubeconfig (YAML) pointing at [`FakeApi::url`], with an empty user (no auth) and
    /// namespace `default`.
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\n\
             current-context: fake\nusers:\n- name: fake\n  user: {{}}\npreferences: {{}}\n",
            self.url()
        )
    }

    /// Writes [`FakeApi::kubeconfig_yaml`] to `path`.
    pub fn kubeconfig(&self, path: impl AsRef<Path>) -> Result<(), FakeApiError> {
        let path = path.as_ref();
        std::fs::write(path, self.kubeconfig_yaml()).map_err(|source| FakeApiError::Kubeconfig {
            path: path.display().to_string(),
            source,
        })
    }

    /// Adds a served resource type.
    pub fn register(&self, ty: ResourceType) {
        self.shared
            .registry
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .register(ty);
    }

    /// Stops serving a resource type (as a cluster without its CRD): requests for it get 404.
    pub fn unregister(&self, group: &str, plural: &str) {
        self.shared
            .registry
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .unregister(group, plural);
    }

    /// Creates or replaces an object directly in the store (no HTTP, no version check): its
    /// type comes from `apiVersion` and `kind`, namespaced kinds need `metadata.namespace`.
    /// Watchers see ADDED or MODIFIED. Returns the stored object.
    pub fn put(&self, obj: Value) -> Result<Value, FakeApiError> {
        let api_version = obj["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = obj["kind"].as_str().unwrap_or_default().to_string();
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let ty = self
            .shared
            .registry()
            .find_kind(&api_version, &kind)
            .cloned()
            .ok_or_else(|| FakeApiError::UnknownKind {
                api_version,
                kind: kind.clone(),
            })?;
        self.shared
            .store()
            .put(&ty, obj)
            .map_err(|source| FakeApiError::Put {
                kind,
                name,
                source: Box::new(source),
            })
    }

    fn type_of(&self, group: &str, plural: &str) -> Option<ResourceType> {
        self.shared.registry().find_plural(group, plural).cloned()
    }

    /// One object (`group` is empty for core kinds; `ns` is ignored for cluster-scoped kinds).
    pub fn get(&self, group: &str, plural: &str, ns: Option<&str>, name: &str) -> Option<Value> {
        let ty = self.type_of(group, plural)?;
        self.shared.store().get(&ty, ns, name).cloned()
    }

    /// Removes an object at once, ignoring finalizers; watchers see DELETED. Returns it, if
    /// it existed.
    pub fn delete(&self, group: &str, plural: &str, ns: Option<&str>, name: &str) -> Option<Value> {
        let ty = self.type_of(group, plural)?;
        self.shared.store().remove(&ty, ns, name)
    }

    /// Every object of every served type with this plural (all namespaces), ordered by
    /// namespace and name.
    pub fn list(&self, plural: &str) -> Vec<Value> {
        let reg = self.shared.registry();
        let store = self.shared.store();
        reg.by_plural(plural)
            .flat_map(|ty| store.all(ty, None))
            .collect()
    }

    /// The current resourceVersion (of the last write).
    pub fn resource_version(&self) -> u64 {
        self.shared.store().resource_version()
    }

    /// A snapshot of the request counters.
    pub fn requests(&self) -> Requests {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Zeroes the request counters.
    pub fn reset_requests(&self) {
        *self
            .shared
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Requests::default();
    }

    /// Forgets the event history and ends every watch with a 410 `Expired` ERROR event, as
    /// kube-apiserver does after compaction: watchers must re-list. Later watches from a
    /// version before now get 410 too.
    pub fn expire_watches(&self) {
        self.shared.store().expire_watches();
    }

    /// Ends every watch stream cleanly (as the server-side watch timeout does): watchers
    /// resume from their last version.
    pub fn close_watches(&self) {
        self.shared.store().close_watches();
    }

    /// Holds every list of `plural` (e.g. `pods`) that has no field selector until
    /// [`FakeApi::release_lists`]: a cluster whose whole list is slow to come (a node's
    /// field-selected lists still answer).
    pub fn hold_lists(&self, plural: &str) {
        self.shared.held.send_modify(|h| {
            h.insert(plural.to_string());
        });
    }

    /// Lets the lists [`FakeApi::hold_lists`] holds go.
    pub fn release_lists(&self, plural: &str) {
        self.shared.held.send_modify(|h| {
            h.remove(plural);
        });
    }

    /// How many watch streams are open.
    pub fn watch_count(&self) -> usize {
        self.shared.store().watch_count()
    }

    /// Waits (bounded by `timeout`) until at least `n` watch streams are open; returns whether
    /// they are.
    pub fn wait_for_watches(&self, n: usize, timeout: Duration) -> bool {
        let end = std::time::Instant::now() + timeout;
        loop {
            if self.watch_count() >= n {
                return true;
            }
            if std::time::Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Accepts connections until `stopped` fires; each connection is served by its own task.
async fn accept_loop(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    mut stopped: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        let io = hyper_util::rt::TokioIo::new(stream);
                        let svc = hyper::service::service_fn(move |req| {
                            server::handle(shared.clone(), req)
                        });
                        // No header read timeout: hyper's default (30 s) would also close idle
                        // keep-alive connections, racing clients that reuse them.
                        let conn = hyper::server::conn::http1::Builder::new()
                            .timer(hyper_util::rt::TokioTimer::new())
                            .header_read_timeout(None)
                            .serve_connection(io, svc);
                        if let Err(e) = conn.await {
                            tracing::debug!(error = %e, "fake api connection ended");
                        }
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "fake api server accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}
