//! JSON-RPC 1.0 over a byte stream, the way OVSDB speaks it (RFC 7047 section 4).
//!
//! OVS writes JSON messages back to back with no delimiter, and a read may hold several messages
//! or part of one. [`MessageBuffer`] keeps the unparsed bytes and pulls every complete JSON value
//! out with serde_json's streaming deserializer, treating "EOF in the middle of a value" as
//! "need more bytes".
//!
//! A [`Connection`] owns two background tasks: a writer fed through a channel (so requests and
//! `echo` replies never interleave) and a reader that routes each message: replies go to the
//! request with the same id, `echo` requests are answered at once, notifications (`update2`,
//! `locked`, ...) are passed in arrival order to the callback given at construction. When the
//! stream ends or breaks, every pending request fails immediately with [`Error::Closed`], and so
//! does every later request. Every request is bounded by a timeout.
//!
//! Limits: ids are integers chosen by this side; replies with unknown ids (a late reply to a
//! request that already timed out) are dropped. A single message may not exceed
//! [`MAX_MESSAGE`] bytes.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::Error;

/// Largest message accepted before the connection is declared broken (64 MiB).
pub const MAX_MESSAGE: usize = 64 << 20;

/// Where ovsdb-server listens, spelled as OVS spells it: `unix:/path/db.sock` or
/// `tcp:HOST:PORT` (`tcp:[::1]:6640` for IPv6; the port defaults to 6640).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// A Unix stream socket.
    Unix(PathBuf),
    /// A TCP address, `host:port`.
    Tcp(String),
}

impl FromStr for Target {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = |reason: &str| Error::InvalidTarget {
            target: s.to_string(),
            reason: reason.to_string(),
        };
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(bad("empty socket path"));
            }
            Ok(Target::Unix(PathBuf::from(path)))
        } else if let Some(addr) = s.strip_prefix("tcp:") {
            if addr.is_empty() {
                return Err(bad("empty address"));
            }
            // "HOST:PORT", "[V6]:PORT", or a bare host/"[V6]" with the default port.
            let has_port = match addr.rfind(']') {
                Some(close) => addr[close..].contains(':'),
                None => addr.contains(':'),
            };
            if addr.starts_with('[') != addr.contains(']') {
                return Err(bad("unbalanced brackets"));
            }
            if has_port {
                let port = addr.rsplit(':').next().unwrap_or_default();
                if port.parse::<u16>().is_err() {
                    return Err(bad("invalid port"));
                }
                Ok(Target::Tcp(addr.to_string()))
            } else {
                Ok(Target::Tcp(format!("{addr}:6640")))
            }
        } else if s.starts_with("ssl:") {
            Err(bad("ssl targets are not supported"))
        } else {
            Err(bad("expected unix:PATH or tcp:HOST:PORT"))
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Unix(p) => write!(f, "unix:{}", p.display()),
            Target::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

/// A message the server sent without expecting a reply (`"id": null`).
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    /// `update`, `update2`, `update3`, `locked`, `stolen`...
    pub method: String,
    /// The `params` array as sent.
    pub params: Value,
}

/// Accumulates bytes and yields the complete JSON values in them.
#[derive(Debug, Default)]
pub struct MessageBuffer {
    buf: Vec<u8>,
}

impl MessageBuffer {
    /// Appends bytes read from the stream.
    pub fn extend(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held that do not yet form a complete message (whitespace excluded).
    pub fn pending(&self) -> usize {
        self.buf.iter().filter(|b| !b.is_ascii_whitespace()).count()
    }

    /// Removes and returns every complete JSON value at the front of the buffer. A value cut
    /// short stays for the next call; malformed JSON is an error (the stream cannot resync).
    pub fn drain_messages(&mut self) -> Result<Vec<Value>, String> {
        let mut out = Vec::new();
        let mut consumed = 0;
        let mut stream = serde_json::Deserializer::from_slice(&self.buf).into_iter::<Value>();
        loop {
            match stream.next() {
                Some(Ok(v)) => {
                    out.push(v);
                    consumed = stream.byte_offset();
                }
                Some(Err(e)) if e.is_eof() => break,
                Some(Err(e)) => return Err(format!("malformed JSON: {e}")),
                None => {
                    consumed = stream.byte_offset();
                    break;
                }
            }
        }
        self.buf.drain(..consumed);
        if self.buf.len() > MAX_MESSAGE {
            return Err(format!("message larger than {MAX_MESSAGE} bytes"));
        }
        Ok(out)
    }
}

type Reply = Result<Value, Error>;

#[derive(Default)]
struct Pending {
    /// Set once the connection is gone; later requests fail with it.
    closed: Option<Error>,
    waiters: HashMap<u64, (String, oneshot::Sender<Reply>)>,
}

struct Shared {
    name: String,
    pending: Mutex<Pending>,
    closed_tx: watch::Sender<Option<Error>>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        // A panic while holding this lock cannot leave the map inconsistent; keep going.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks the connection closed and fails every pending request. Idempotent.
    fn close(&self, reason: String) {
        let err = Error::Closed {
            target: self.name.clone(),
            reason,
        };
        let waiters = {
            let mut p = self.lock();
            if p.closed.is_some() {
                return;
            }
            p.closed = Some(err.clone());
            std::mem::take(&mut p.waiters)
        };
        tracing::debug!(target = %self.name, error = %err, "ovsdb connection closed");
        for (_, (_, tx)) in waiters {
            let _ = tx.send(Err(err.clone()));
        }
        self.closed_tx.send_replace(Some(err));
    }
}

/// One JSON-RPC connection with its reader and writer tasks (see the module docs). Dropping it
/// stops both tasks and closes the socket.
pub struct Connection {
    shared: Arc<Shared>,
    out: mpsc::UnboundedSender<Vec<u8>>,
    next_id: AtomicU64,
    closed_rx: watch::Receiver<Option<Error>>,
    tasks: Vec<JoinHandle<()>>,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("target", &self.shared.name)
            .field("closed", &self.closed_rx.borrow().is_some())
            .finish()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Strips the " (os error N)" suffix std adds, for messages like "No such file or directory".
pub(crate) fn io_reason(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

impl Connection {
    /// Opens `target` (bounded by `timeout`) and starts the connection's tasks; `on_notification`
    /// runs on the reader task for every notification, in order, and must not block.
    pub async fn connect(
        target: &Target,
        timeout: Duration,
        on_notification: impl FnMut(Notification) + Send + 'static,
    ) -> Result<Connection, Error> {
        let name = target.to_string();
        let fail = |reason: String| Error::Connect {
            target: name.clone(),
            reason,
        };
        let timed_out = || fail(format!("no connection within {timeout:?}"));
        match target {
            Target::Unix(path) => {
                let s = tokio::time::timeout(timeout, tokio::net::UnixStream::connect(path))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| fail(io_reason(&e)))?;
                Ok(Connection::new(name, s, on_notification))
            }
            Target::Tcp(addr) => {
                let s =
                    tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr.as_str()))
                        .await
                        .map_err(|_| timed_out())?
                        .map_err(|e| fail(io_reason(&e)))?;
                let _ = s.set_nodelay(true);
                Ok(Connection::new(name, s, on_notification))
            }
        }
    }

    /// Wraps an already open stream (tests, or transports opened elsewhere). `name` appears in
    /// errors. Must be called inside a tokio runtime.
    pub fn new<S>(
        name: String,
        stream: S,
        on_notification: impl FnMut(Notification) + Send + 'static,
    ) -> Connection
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (closed_tx, closed_rx) = watch::channel(None);
        let shared = Arc::new(Shared {
            name,
            pending: Mutex::new(Pending::default()),
            closed_tx,
        });
        let (read_half, write_half) = tokio::io::split(stream);
        let (out, out_rx) = mpsc::unbounded_channel();
        let writer = tokio::spawn(write_loop(shared.clone(), write_half, out_rx));
        let reader = tokio::spawn(read_loop(
            shared.clone(),
            read_half,
            out.clone(),
            on_notification,
        ));
        Connection {
            shared,
            out,
            next_id: AtomicU64::new(1),
            closed_rx,
            tasks: vec![reader, writer],
        }
    }

    /// The target this connection talks to, as OVS spells it.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Whether the connection has closed.
    pub fn is_closed(&self) -> bool {
        self.closed_rx.borrow().is_some()
    }

    /// Closes the connection now: pending and later requests fail with [`Error::Closed`] and
    /// `reason`. Idempotent.
    pub fn shutdown(&self, reason: &str) {
        self.shared.close(reason.to_string());
        for t in &self.tasks {
            t.abort();
        }
    }

    /// Resolves when the connection closes, with the reason.
    pub async fn closed(&self) -> Error {
        let mut rx = self.closed_rx.clone();
        let name = self.shared.name.clone();
        let closed = rx.wait_for(|c| c.is_some()).await.map(|c| c.clone());
        match closed {
            Ok(Some(e)) => e,
            _ => Error::Closed {
                target: name,
                reason: "connection dropped".to_string(),
            },
        }
    }

    /// Sends a request and waits (at most `timeout`) for its reply's `result`. A JSON-RPC error
    /// reply becomes [`Error::Rpc`]; a connection that closes meanwhile gives [`Error::Closed`]
    /// at once.
    pub async fn request(&self, method: &str, params: Value, timeout: Duration) -> Reply {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut p = self.shared.lock();
            if let Some(e) = &p.closed {
                return Err(e.clone());
            }
            p.waiters.insert(id, (method.to_string(), tx));
        }
        let msg = json!({"method": method, "params": params, "id": id});
        tracing::trace!(target = %self.shared.name, %msg, "ovsdb send");
        if self.out.send(msg.to_string().into_bytes()).is_err() {
            self.shared.close("writer stopped".to_string());
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(self.shared.lock().closed.clone().unwrap_or(Error::Closed {
                target: self.shared.name.clone(),
                reason: "request dropped".to_string(),
            })),
            Err(_) => {
                self.shared.lock().waiters.remove(&id);
                Err(Error::Timeout {
                    method: method.to_string(),
                    target: self.shared.name.clone(),
                    timeout,
                })
            }
        }
    }
}

async fn write_loop<W>(shared: Arc<Shared>, mut w: W, mut rx: mpsc::UnboundedReceiver<Vec<u8>>)
where
    W: AsyncWrite + Unpin,
{
    while let Some(bytes) = rx.recv().await {
        if let Err(e) = w.write_all(&bytes).await {
            shared.close(format!("write failed: {}", io_reason(&e)));
            return;
        }
    }
}

async fn read_loop<R, F>(
    shared: Arc<Shared>,
    mut r: R,
    out: mpsc::UnboundedSender<Vec<u8>>,
    mut on_notification: F,
) where
    R: AsyncRead + Unpin,
    F: FnMut(Notification),
{
    let mut buf = MessageBuffer::default();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match r.read(&mut chunk).await {
            Ok(0) => {
                let reason = if buf.pending() > 0 {
                    "end of stream in the middle of a message".to_string()
                } else {
                    "end of stream".to_string()
                };
                shared.close(reason);
                return;
            }
            Ok(n) => n,
            Err(e) => {
                shared.close(format!("read failed: {}", io_reason(&e)));
                return;
            }
        };
        buf.extend(&chunk[..n]);
        let msgs = match buf.drain_messages() {
            Ok(m) => m,
            Err(reason) => {
                shared.close(reason);
                return;
            }
        };
        for msg in msgs {
            if let Err(reason) = dispatch(&shared, &out, &mut on_notification, msg) {
                shared.close(reason);
                return;
            }
        }
    }
}

/// Routes one message; an error is a protocol violation that ends the connection.
fn dispatch(
    shared: &Shared,
    out: &mpsc::UnboundedSender<Vec<u8>>,
    on_notification: &mut impl FnMut(Notification),
    msg: Value,
) -> Result<(), String> {
    tracing::trace!(target = %shared.name, %msg, "ovsdb recv");
    let Value::Object(mut obj) = msg else {
        return Err(format!("message is not a JSON object: {msg}"));
    };
    let id = obj.remove("id").unwrap_or(Value::Null);
    if let Some(method) = obj.remove("method") {
        let Value::String(method) = method else {
            return Err(format!("method is not a string: {method}"));
        };
        let params = obj.remove("params").unwrap_or(Value::Array(Vec::new()));
        if id.is_null() {
            on_notification(Notification { method, params });
        } else {
            let reply = if method == "echo" {
                json!({"id": id, "result": params, "error": null})
            } else {
                tracing::debug!(target = %shared.name, %method, "unsupported request from server");
                json!({"id": id, "result": null, "error": format!("unknown method {method}")})
            };
            let _ = out.send(reply.to_string().into_bytes());
        }
        return Ok(());
    }
    let Some(id) = id.as_u64() else {
        // Not one of ours (e.g. a reply to an echo some other layer sent): ignore.
        tracing::debug!(target = %shared.name, %id, "reply with a foreign id");
        return Ok(());
    };
    let Some((method, tx)) = shared.lock().waiters.remove(&id) else {
        tracing::debug!(target = %shared.name, id, "reply to no pending request (timed out?)");
        return Ok(());
    };
    let error = obj.remove("error").unwrap_or(Value::Null);
    let reply = if error.is_null() {
        Ok(obj.remove("result").unwrap_or(Value::Null))
    } else {
        let (error, details) = error_parts(&error);
        Err(Error::Rpc {
            method,
            error,
            details,
        })
    };
    let _ = tx.send(reply);
    Ok(())
}

/// Splits an OVSDB `<error>` (an object with `error` and `details`, or a bare value) into text.
pub(crate) fn error_parts(error: &Value) -> (String, Option<String>) {
    match error {
        Value::Object(o) => {
            let text = match o.get("error") {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => error.to_string(),
            };
            let details = o.get("details").map(|d| match d {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            });
            (text, details)
        }
        Value::String(s) => (s.clone(), None),
        v => (v.to_string(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncBufReadExt;
    use tokio::net::UnixListener;

    #[test]
    fn targets_parse_as_ovs_spells_them() {
        assert_eq!(
            "unix:/run/db.sock".parse::<Target>().unwrap(),
            Target::Unix("/run/db.sock".into())
        );
        assert_eq!(
            "tcp:127.0.0.1:6641".parse::<Target>().unwrap(),
            Target::Tcp("127.0.0.1:6641".into())
        );
        assert_eq!(
            "tcp:[::1]:6641".parse::<Target>().unwrap(),
            Target::Tcp("[::1]:6641".into())
        );
        assert_eq!(
            "tcp:10.0.0.1".parse::<Target>().unwrap(),
            Target::Tcp("10.0.0.1:6640".into())
        );
        assert_eq!(
            "tcp:[::1]".parse::<Target>().unwrap(),
            Target::Tcp("[::1]:6640".into())
        );
        assert_eq!("unix:/a".parse::<Target>().unwrap().to_string(), "unix:/a");
        for bad in [
            "",
            "/run/db.sock",
            "unix:",
            "tcp:",
            "tcp:h:port",
            "ssl:1.2.3.4:6640",
        ] {
            let e = bad.parse::<Target>().unwrap_err();
            assert!(e.to_string().starts_with("invalid ovsdb target"), "{e}");
        }
    }

    #[test]
    fn buffer_splits_back_to_back_messages_and_keeps_partial_ones() {
        let mut b = MessageBuffer::default();
        b.extend(br#"{"id":1,"result":[]}{"id":2,"result":{"a":"#);
        let m = b.drain_messages().unwrap();
        assert_eq!(m, vec![json!({"id":1,"result":[]})]);
        assert!(b.pending() > 0);
        b.extend(br#""x"}} {"id":3"#);
        let m = b.drain_messages().unwrap();
        assert_eq!(m, vec![json!({"id":2,"result":{"a":"x"}})]);
        b.extend(br#","result":null}"#);
        assert_eq!(b.drain_messages().unwrap().len(), 1);
        assert_eq!(b.pending(), 0);
        b.extend(b"{]");
        assert!(b.drain_messages().is_err());
    }

    #[test]
    fn buffer_handles_one_byte_at_a_time_including_multibyte_utf8() {
        let text = r#"{"method":"update2","params":["m",{"é":"ü"}],"id":null}"#;
        let mut b = MessageBuffer::default();
        let mut got = Vec::new();
        for byte in text.as_bytes() {
            b.extend(&[*byte]);
            got.extend(b.drain_messages().unwrap());
        }
        assert_eq!(got, vec![serde_json::from_str::<Value>(text).unwrap()]);
    }

    fn socket_path(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ovsdb-jsonrpc-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("s.sock")
    }

    #[tokio::test]
    async fn missing_socket_fails_fast_with_the_os_reason() {
        let t: Target = "unix:/nonexistent/ovsdb-test.sock".parse().unwrap();
        let start = std::time::Instant::now();
        let e = Connection::connect(&t, Duration::from_secs(5), |_| {})
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot connect to unix:/nonexistent/ovsdb-test.sock: No such file or directory"
        );
        assert!(start.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn replies_in_one_write_echo_and_notifications_are_routed() {
        let path = socket_path("routing");
        let listener = UnixListener::bind(&path).unwrap();
        let server = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let (r, mut w) = tokio::io::split(s);
            let mut r = tokio::io::BufReader::new(r);
            // Read both requests (the client writes them as separate JSON values).
            let mut buf = MessageBuffer::default();
            let mut reqs = Vec::new();
            while reqs.len() < 2 {
                let got = r.fill_buf().await.unwrap().to_vec();
                r.consume(got.len());
                buf.extend(&got);
                reqs.extend(buf.drain_messages().unwrap());
            }
            let ids: Vec<Value> = reqs.iter().map(|m| m["id"].clone()).collect();
            // Echo request, a notification and both replies (in reverse order), one write,
            // then the second reply's tail split across writes.
            let all = format!(
                r#"{{"id":"echo","method":"echo","params":[42]}}{{"id":null,"method":"update2","params":["m",{{}}]}}{{"id":{},"result":"second","error":null}}{{"id":{},"result":"#,
                ids[1], ids[0]
            );
            w.write_all(all.as_bytes()).await.unwrap();
            w.flush().await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            w.write_all(br#""first","error":null}"#).await.unwrap();
            // The echo reply comes back.
            let mut got = Vec::new();
            while got.is_empty() {
                let bytes = r.fill_buf().await.unwrap().to_vec();
                assert!(!bytes.is_empty(), "client closed before echoing");
                r.consume(bytes.len());
                buf.extend(&bytes);
                got.extend(buf.drain_messages().unwrap());
            }
            got
        });
        let (ntx, mut nrx) = mpsc::unbounded_channel();
        let conn = Connection::connect(
            &Target::Unix(path.clone()),
            Duration::from_secs(5),
            move |n| {
                let _ = ntx.send(n);
            },
        )
        .await
        .unwrap();
        let t = Duration::from_secs(5);
        let (a, b) = tokio::join!(
            conn.request("first", json!([]), t),
            conn.request("second", json!([]), t)
        );
        assert_eq!(a.unwrap(), json!("first"));
        assert_eq!(b.unwrap(), json!("second"));
        let n = nrx.recv().await.unwrap();
        assert_eq!(n.method, "update2");
        assert_eq!(n.params, json!(["m", {}]));
        let echo = server.await.unwrap();
        assert_eq!(echo, vec![json!({"id":"echo","result":[42],"error":null})]);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[tokio::test]
    async fn server_closing_mid_request_fails_promptly() {
        let path = socket_path("close");
        let listener = UnixListener::bind(&path).unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut b = [0u8; 1024];
            let _ = s.read(&mut b).await;
            // Half a reply, then hang up.
            let _ = s.write_all(br#"{"id":1,"res"#).await;
        });
        let conn = Connection::connect(&Target::Unix(path.clone()), Duration::from_secs(5), |_| {})
            .await
            .unwrap();
        let start = std::time::Instant::now();
        let e = conn
            .request("transact", json!(["Open_vSwitch"]), Duration::from_secs(30))
            .await
            .unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "took {:?}",
            start.elapsed()
        );
        assert!(matches!(e, Error::Closed { .. }), "{e:?}");
        assert!(e.to_string().contains("in the middle of a message"), "{e}");
        assert!(conn.is_closed());
        // Later requests fail at once too.
        let e2 = conn
            .request("echo", json!([]), Duration::from_secs(30))
            .await
            .unwrap_err();
        assert_eq!(e, e2);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[tokio::test]
    async fn silent_server_times_out_and_error_replies_carry_details() {
        let path = socket_path("silent");
        let listener = UnixListener::bind(&path).unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut b = MessageBuffer::default();
            let mut chunk = [0u8; 1024];
            loop {
                let n = s.read(&mut chunk).await.unwrap();
                if n == 0 {
                    return;
                }
                b.extend(&chunk[..n]);
                for m in b.drain_messages().unwrap() {
                    if m["method"] == "get_schema" {
                        let r = json!({"id": m["id"], "result": null,
                            "error": {"error": "unknown database", "details": "no db"}});
                        s.write_all(r.to_string().as_bytes()).await.unwrap();
                    }
                }
            }
        });
        let conn = Connection::connect(&Target::Unix(path.clone()), Duration::from_secs(5), |_| {})
            .await
            .unwrap();
        let e = conn
            .request("list_dbs", json!([]), Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(
            e.to_string().starts_with("no reply to list_dbs from unix:"),
            "{e}"
        );
        let e = conn
            .request("get_schema", json!(["x"]), Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "get_schema failed: unknown database (no db)");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
