//! The OVSDB [`Client`]: one persistent connection to ovsdb-server, a monitored [`Cache`], and
//! reconnection.
//!
//! On connect the client fetches the schema (`get_schema`), starts `monitor_cond` on the
//! [`MONITORED`](super::cache::MONITORED) tables and loads the reply into the cache; the reader
//! task then applies every `update2` as it arrives, before any reply that follows it on the
//! wire, so when a `transact` returns, the cache already shows its effects (ovsdb-server sends a
//! transaction's updates before its reply).
//!
//! A supervisor task watches the connection. When it drops (ovsdb-server restarted, socket
//! error, no answer to the periodic `echo` probe, or a cache inconsistency), the client
//! reconnects with exponential backoff (deterministic doubling from
//! [`ClientOptions::backoff_initial`] up to [`ClientOptions::backoff_max`], forever, until the
//! client is dropped), then re-monitors and replaces the cache in one step; the stale cache stays
//! readable meanwhile. [`Client::state`] tells which phase it is in.
//!
//! Requests never hang: a call made while disconnected waits for the connection at most
//! [`ClientOptions::request_timeout`] and then fails with [`Error::NotConnected`]; a request in
//! flight when the connection drops fails at once with [`Error::Closed`] (it is not retried: the
//! caller knows whether its transaction is safe to repeat).
//!
//! Limits: needs a tokio runtime; the supervisor stops when the last clone of the client is
//! dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::{broadcast, oneshot, watch, Notify};
use tokio::time::Instant;

use super::cache::{Cache, Schema};
use super::jsonrpc::{Connection, Notification, Target};
use super::ops::{parse_results, OpResult, Operation};
use super::{Error, DB};

/// The `monitor_cond` id of the cache's monitor.
const MONITOR_ID: &str = "sdn-cache";

/// Timeouts and backoff of a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Longest wait for a reply, and for a connection when disconnected (default 10 s).
    pub request_timeout: Duration,
    /// Longest wait for ovs-vswitchd to apply a change (`cur_cfg`, `ofport`) in the helpers
    /// (default 10 s).
    pub apply_timeout: Duration,
    /// Whether helpers wait for ovs-vswitchd to apply their changes (`cur_cfg` catching up
    /// with `next_cfg`, as `ovs-vsctl` does without `--no-wait`). Default true.
    pub wait_for_vswitchd: bool,
    /// First delay before reconnecting (default 100 ms); doubles per failed attempt.
    pub backoff_initial: Duration,
    /// Longest delay between reconnect attempts (default 5 s).
    pub backoff_max: Duration,
    /// Interval between `echo` probes that check the connection; a probe unanswered within the
    /// request timeout drops it (default 5 s; `None` disables probing; a Unix socket reports a
    /// dead server anyway, this catches a silent TCP peer or a hung server).
    pub probe_interval: Option<Duration>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            request_timeout: Duration::from_secs(10),
            apply_timeout: Duration::from_secs(10),
            wait_for_vswitchd: true,
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            probe_interval: Some(Duration::from_secs(5)),
        }
    }
}

/// Whether the client has a live, monitored connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionState {
    /// Connected, monitor established, cache current.
    Connected,
    /// The connection dropped; `attempt` reconnects have been made so far.
    Reconnecting {
        /// Attempts made since the drop.
        attempt: u32,
        /// Why the connection dropped, or why the last attempt failed.
        last_error: String,
    },
}

/// What the reader task feeds: the cache and the notification subscribers.
#[derive(Debug)]
struct Events {
    cache: watch::Sender<Cache>,
    notifications: broadcast::Sender<Notification>,
    /// Connection generation; notifications from older connections are ignored.
    epoch: AtomicU64,
    /// Set when an update could not be applied: the cache must be rebuilt.
    resync: Notify,
}

impl Events {
    fn handle(&self, epoch: u64, n: Notification) {
        let ours = n.method == "update2"
            && n.params.get(0).and_then(Value::as_str) == Some(MONITOR_ID)
            && epoch == self.epoch.load(Ordering::SeqCst);
        if ours {
            if let Some(updates) = n.params.get(1) {
                let mut result = Ok(());
                self.cache
                    .send_modify(|c| result = c.update2(updates.clone()));
                if let Err(e) = result {
                    tracing::warn!(error = %e, "ovsdb cache update failed; resyncing");
                    self.resync.notify_one();
                }
            }
        }
        let _ = self.notifications.send(n);
    }
}

#[derive(Debug)]
struct Shared {
    target: Target,
    options: ClientOptions,
    conn: Mutex<Option<Arc<Connection>>>,
    state: watch::Sender<ConnectionState>,
    events: Arc<Events>,
}

impl Shared {
    fn current(&self) -> Option<Arc<Connection>> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set_current(&self, c: Option<Arc<Connection>>) {
        *self.conn.lock().unwrap_or_else(|e| e.into_inner()) = c;
    }

    fn protocol(&self, reason: String) -> Error {
        Error::Protocol {
            target: self.target.to_string(),
            reason,
        }
    }

    /// Connects, fetches the schema, starts the monitor and loads the cache.
    async fn establish(&self) -> Result<Arc<Connection>, Error> {
        let t = self.options.request_timeout;
        let epoch = self.events.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        let events = self.events.clone();
        let conn = Connection::connect(&self.target, t, move |n| events.handle(epoch, n)).await?;
        self.events.cache.send_modify(Cache::begin_load);
        let schema = conn.request("get_schema", json!([DB]), t).await?;
        let schema = Schema::from_json(&schema).map_err(|e| self.protocol(e))?;
        let initial = conn
            .request(
                "monitor_cond",
                json!([DB, MONITOR_ID, schema.monitor_requests()]),
                t,
            )
            .await?;
        let mut loaded = Ok(());
        self.events
            .cache
            .send_modify(|c| loaded = c.load(schema, &initial));
        loaded.map_err(|e| self.protocol(format!("bad monitor snapshot: {e}")))?;
        Ok(Arc::new(conn))
    }

    /// Resolves with the reason when `conn` should be replaced.
    async fn watch(&self, conn: &Connection) -> Error {
        let probe = async {
            let Some(interval) = self.options.probe_interval else {
                return std::future::pending().await;
            };
            loop {
                tokio::time::sleep(interval).await;
                if let Err(e) = conn
                    .request("echo", json!([]), self.options.request_timeout)
                    .await
                {
                    return e;
                }
            }
        };
        tokio::select! {
            e = conn.closed() => e,
            e = probe => e,
            () = self.events.resync.notified() => self.protocol("cache out of sync".to_string()),
        }
    }

    /// The supervisor: reconnects whenever the connection drops, until `shutdown` fires (the
    /// last client clone is dropped).
    async fn supervise(
        self: Arc<Self>,
        mut conn: Arc<Connection>,
        mut shutdown: oneshot::Receiver<()>,
    ) {
        loop {
            let reason = tokio::select! {
                _ = &mut shutdown => break,
                e = self.watch(&conn) => e,
            };
            tracing::warn!(target = %self.target, error = %reason, "ovsdb connection lost; reconnecting");
            conn.shutdown(&reason.to_string());
            self.set_current(None);
            self.state.send_replace(ConnectionState::Reconnecting {
                attempt: 0,
                last_error: reason.to_string(),
            });
            let mut delay = self.options.backoff_initial;
            let mut attempt = 0u32;
            conn = loop {
                tokio::select! {
                    _ = &mut shutdown => return,
                    () = tokio::time::sleep(delay) => {}
                }
                attempt = attempt.saturating_add(1);
                let result = tokio::select! {
                    _ = &mut shutdown => return,
                    r = self.establish() => r,
                };
                match result {
                    Ok(c) => break c,
                    Err(e) => {
                        tracing::debug!(target = %self.target, attempt, error = %e, "reconnect failed");
                        self.state.send_replace(ConnectionState::Reconnecting {
                            attempt,
                            last_error: e.to_string(),
                        });
                        delay = (delay * 2).min(self.options.backoff_max);
                    }
                }
            };
            tracing::info!(target = %self.target, attempt, "ovsdb reconnected");
            self.set_current(Some(conn.clone()));
            self.state.send_replace(ConnectionState::Connected);
        }
        conn.shutdown("client dropped");
        self.set_current(None);
    }
}

/// An OVSDB client (see the module docs). Cheap to clone; all clones share the connection and
/// the cache.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
    /// Dropped with the last clone, which stops the supervisor.
    _shutdown: Arc<oneshot::Sender<()>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("target", &self.shared.target.to_string())
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to `target` (`unix:/path` or `tcp:HOST:PORT`) with default options.
    /// See [`Client::connect_with`].
    pub async fn connect(target: &str) -> Result<Client, Error> {
        Client::connect_with(target, ClientOptions::default()).await
    }

    /// Connects, fetches the schema and loads the cache before returning. The first connection
    /// is not retried: a missing socket or a refused connection fails at once
    /// ([`Error::Connect`]). Later drops are reconnected in the background.
    pub async fn connect_with(target: &str, options: ClientOptions) -> Result<Client, Error> {
        let target: Target = target.parse()?;
        let (cache, _) = watch::channel(Cache::default());
        let (notifications, _) = broadcast::channel(1024);
        let (state, _) = watch::channel(ConnectionState::Reconnecting {
            attempt: 0,
            last_error: "connecting".to_string(),
        });
        let shared = Arc::new(Shared {
            target,
            options,
            conn: Mutex::new(None),
            state,
            events: Arc::new(Events {
                cache,
                notifications,
                epoch: AtomicU64::new(0),
                resync: Notify::new(),
            }),
        });
        let conn = shared.establish().await?;
        shared.set_current(Some(conn.clone()));
        shared.state.send_replace(ConnectionState::Connected);
        let (tx, rx) = oneshot::channel();
        tokio::spawn(shared.clone().supervise(conn, rx));
        Ok(Client {
            shared,
            _shutdown: Arc::new(tx),
        })
    }

    /// The target, as given.
    pub fn target(&self) -> &Target {
        &self.shared.target
    }

    /// The options in force.
    pub fn options(&self) -> &ClientOptions {
        &self.shared.options
    }

    /// The connection state now.
    pub fn state(&self) -> ConnectionState {
        self.shared.state.borrow().clone()
    }

    /// A receiver that sees every state change.
    pub fn watch_state(&self) -> watch::Receiver<ConnectionState> {
        self.shared.state.subscribe()
    }

    /// Every notification the server sends (`update2` included, after the cache applied it;
    /// `locked`, `stolen`...). Slow receivers lose the oldest (see `broadcast`).
    pub fn notifications(&self) -> broadcast::Receiver<Notification> {
        self.shared.events.notifications.subscribe()
    }

    /// The live connection, waiting for one at most the request timeout.
    async fn connection(&self) -> Result<Arc<Connection>, Error> {
        let deadline = Instant::now() + self.shared.options.request_timeout;
        let mut rx = self.shared.state.subscribe();
        loop {
            if let Some(c) = self.shared.current().filter(|c| !c.is_closed()) {
                return Ok(c);
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                _ => break,
            }
        }
        let last_error = match &*self.shared.state.borrow() {
            ConnectionState::Reconnecting { last_error, .. } => last_error.clone(),
            ConnectionState::Connected => "connection closed".to_string(),
        };
        Err(Error::NotConnected {
            target: self.shared.target.to_string(),
            last_error,
        })
    }

    /// Sends any JSON-RPC request and returns its `result` (e.g. `list_dbs`, `lock`). Waits
    /// for a connection and for the reply, each at most the request timeout.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, Error> {
        let conn = self.connection().await?;
        conn.request(method, params, self.shared.options.request_timeout)
            .await
    }

    /// Runs `ops` as one atomic transaction on `db` and returns one result per operation.
    /// Fails with [`Error::Transaction`] naming the first failing operation (or the commit),
    /// with the server's `error` and `details`. Not idempotent by itself: guard inserts with
    /// `wait` operations ([`Operation::assert_rows`]). When it returns, the cache already
    /// reflects the transaction.
    pub async fn transact(&self, db: &str, ops: &[Operation]) -> Result<Vec<OpResult>, Error> {
        let mut params = vec![json!(db)];
        params.extend(ops.iter().map(Operation::to_json));
        let result = self.request("transact", Value::Array(params)).await?;
        parse_results(db, ops, &result)
    }

    /// Runs `f` on the cache. Do not block in `f` (it holds the cache's read lock).
    pub fn with_cache<R>(&self, f: impl FnOnce(&Cache) -> R) -> R {
        f(&self.shared.events.cache.borrow())
    }

    /// A receiver of cache changes, with the current contents marked as seen.
    /// A receiver that is marked changed whenever the cache changes (an update from the
    /// server, a reload after a reconnect): what an owner watches to repair rows removed or
    /// changed behind its back.
    pub fn watch_cache(&self) -> watch::Receiver<Cache> {
        self.cache_changes()
    }

    pub(crate) fn cache_changes(&self) -> watch::Receiver<Cache> {
        self.shared.events.cache.subscribe()
    }

    /// Waits until `f` returns `Some` for the cache (checked now and after every change), at
    /// most `timeout`; `what` names the condition in the [`Error::WaitTimeout`].
    pub async fn wait_for<R>(
        &self,
        what: &str,
        timeout: Duration,
        mut f: impl FnMut(&Cache) -> Option<R>,
    ) -> Result<R, Error> {
        let mut rx = self.shared.events.cache.subscribe();
        let wait = async {
            loop {
                if let Some(r) = f(&rx.borrow_and_update()) {
                    return Some(r);
                }
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(Some(r)) => Ok(r),
            _ => Err(Error::WaitTimeout {
                what: what.to_string(),
                timeout,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ovsdb::jsonrpc::MessageBuffer;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::UnixListener;

    /// A minimal ovsdb-server: answers get_schema and monitor_cond; the first connection
    /// ignores `echo`, later ones answer it.
    async fn fake_server(listener: UnixListener) {
        let mut n = 0;
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            n += 1;
            let answer_echo = n > 1;
            tokio::spawn(async move {
                let mut buf = MessageBuffer::default();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(len) = s.read(&mut chunk).await else {
                        return;
                    };
                    if len == 0 {
                        return;
                    }
                    buf.extend(&chunk[..len]);
                    for m in buf.drain_messages().unwrap() {
                        let result = match m["method"].as_str() {
                            Some("get_schema") => json!({"tables": {"Bridge": {"columns": {
                                "name": {"type": "string"}}}}}),
                            Some("monitor_cond") => {
                                assert_eq!(
                                    m["params"][2],
                                    json!({"Bridge": [{"columns": ["name"]}]})
                                );
                                json!({"Bridge": {"u1": {"initial": {"name": format!("br{n}")}}}})
                            }
                            Some("echo") if answer_echo => m["params"].clone(),
                            _ => continue,
                        };
                        let reply = json!({"id": m["id"], "result": result, "error": null});
                        if s.write_all(reply.to_string().as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    }

    #[tokio::test]
    async fn an_unanswered_probe_triggers_reconnect_and_cache_rebuild() {
        let dir = std::env::temp_dir().join(format!("ovsdb-client-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("db.sock");
        let server = tokio::spawn(fake_server(UnixListener::bind(&sock).unwrap()));
        let options = ClientOptions {
            request_timeout: Duration::from_millis(300),
            backoff_initial: Duration::from_millis(20),
            backoff_max: Duration::from_millis(100),
            probe_interval: Some(Duration::from_millis(100)),
            ..ClientOptions::default()
        };
        let client = Client::connect_with(&format!("unix:{}", sock.display()), options)
            .await
            .unwrap();
        assert_eq!(client.state(), ConnectionState::Connected);
        assert!(client.with_cache(|c| c.bridge("br1").is_some()));

        let mut state = client.watch_state();
        let dropped = tokio::time::timeout(
            Duration::from_secs(5),
            state.wait_for(|s| matches!(s, ConnectionState::Reconnecting { .. })),
        )
        .await
        .expect("the silent connection is dropped")
        .unwrap()
        .clone();
        let ConnectionState::Reconnecting { last_error, .. } = dropped else {
            unreachable!()
        };
        assert!(last_error.starts_with("no reply to echo"), "{last_error}");

        client
            .wait_for("rebuilt cache", Duration::from_secs(5), |c| {
                c.bridge("br2").is_some().then_some(())
            })
            .await
            .unwrap();
        assert!(client.with_cache(|c| c.bridge("br1").is_none()));
        assert_eq!(client.with_cache(Cache::loads), 2);
        tokio::time::timeout(
            Duration::from_secs(5),
            state.wait_for(|s| *s == ConnectionState::Connected),
        )
        .await
        .unwrap()
        .unwrap();
        // The second connection answers probes: it stays up across several intervals.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(client.state(), ConnectionState::Connected);
        assert_eq!(
            client.request("echo", json!(["x"])).await.unwrap(),
            json!(["x"])
        );
        server.abort();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
