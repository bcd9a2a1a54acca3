//! The agent's CNI server end to end over a real Unix socket, with fake handlers that record
//! what they were called with and how calls overlapped.
//!
//! The client is raw HTTP/1.1 over a Unix stream, byte for byte what the `sdn-cni` shim sends
//! (`cni_proto::RequestBody`, `docs/architecture.md`), so these tests also pin the wire protocol. Concurrency claims are proven
//! with gates, barriers and counters (a barrier of two handlers only opens if they run at the
//! same time), not with sleeps. The non-root test switches the credentials of one dedicated OS
//! thread (raw `setresuid`, which is per-thread on Linux) to `nobody`.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent::cni::{
    serve, AddResult, CniError, Command, Handler, Interface, IpConfig, Request, Route, ServerError,
    ServerHandle, ServerOptions,
};
use sdn_tests::harness::{unique_name, Netns};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{watch, Barrier};
use tokio::time::{timeout, Instant};

// ---------- fixtures ----------

/// A temp directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let p = std::env::temp_dir().join(unique_name("cnisrv-"));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    /// The socket path, one directory below, so the server creates its directory.
    fn socket(&self) -> PathBuf {
        self.0.join("run").join("cni.sock")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Records every call: entries/exits per container id, overlap, the requests themselves.
#[derive(Default)]
struct Tracker {
    active: Mutex<HashMap<String, usize>>,
    same_id_overlaps: AtomicUsize,
    current: AtomicUsize,
    max_concurrent: AtomicUsize,
    events: Mutex<Vec<(String, &'static str)>>,
    requests: Mutex<Vec<Request>>,
}

impl Tracker {
    fn enter(&self, req: &Request) {
        let id = req.container_id.clone();
        {
            let mut a = self.active.lock().unwrap();
            let n = a.entry(id.clone()).or_default();
            *n += 1;
            if *n > 1 && !id.is_empty() {
                self.same_id_overlaps.fetch_add(1, Ordering::SeqCst);
            }
        }
        let cur = self.current.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_concurrent.fetch_max(cur, Ordering::SeqCst);
        self.events.lock().unwrap().push((id, "enter"));
        self.requests.lock().unwrap().push(req.clone());
    }

    fn exit(&self, id: &str) {
        *self.active.lock().unwrap().get_mut(id).unwrap() -= 1;
        self.current.fetch_sub(1, Ordering::SeqCst);
        self.events.lock().unwrap().push((id.to_string(), "exit"));
    }

    fn count(&self, id: &str, what: &str) -> usize {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|(i, w)| i == id && *w == what)
            .count()
    }

    fn events_for(&self, id: &str) -> Vec<&'static str> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|(i, _)| i == id)
            .map(|(_, w)| *w)
            .collect()
    }

    fn last_request(&self) -> Request {
        self.requests.lock().unwrap().last().cloned().unwrap()
    }
}

/// A fake pod handler. Behaviour by container id prefix:
/// `gate*` waits until the test opens the gate; `barrier*` waits (up to 5 s) until a second
/// `barrier*` call arrives; `slow*` sleeps 5 ms; `err*` fails with code 7; `panic*` panics.
struct Fake {
    tracker: Tracker,
    gate: watch::Sender<bool>,
    barrier: Barrier,
    not_ready: std::sync::atomic::AtomicBool,
}

impl Fake {
    fn new() -> Arc<Fake> {
        Arc::new(Fake {
            tracker: Tracker::default(),
            gate: watch::channel(false).0,
            barrier: Barrier::new(2),
            not_ready: Default::default(),
        })
    }

    fn open_gate(&self) {
        self.gate.send_replace(true);
    }

    async fn behave(&self, req: &Request) -> Result<(), CniError> {
        let id = req.container_id.as_str();
        if id.starts_with("gate") {
            let mut rx = self.gate.subscribe();
            timeout(Duration::from_secs(30), rx.wait_for(|open| *open))
                .await
                .expect("the test never opened the gate")
                .unwrap();
        } else if id.starts_with("barrier") {
            timeout(Duration::from_secs(5), self.barrier.wait())
                .await
                .map_err(|_| CniError::internal("barrier: no second handler ran in parallel"))?;
        } else if id.starts_with("slow") {
            tokio::time::sleep(Duration::from_millis(5)).await;
        } else if id.starts_with("err") {
            return Err(CniError::invalid_config("fake: the subnet is exhausted")
                .with_details("step: ipam"));
        } else if id.starts_with("panic") {
            panic!("fake handler panics on purpose");
        }
        Ok(())
    }

    async fn run(&self, req: &Request) -> Result<(), CniError> {
        self.tracker.enter(req);
        let r = self.behave(req).await;
        self.tracker.exit(&req.container_id);
        r
    }
}

/// The result the fake returns: prevResult (if any) plus a host veth and the pod interface.
fn fake_result(req: &Request) -> AddResult {
    let mut r = req.config.prev_result.clone().unwrap_or_default();
    r.push_interface(Interface {
        name: "vethfake0000001".into(),
        mac: Some("ee:ee:ee:ee:ee:ee".into()),
        sandbox: None,
        mtu: Some(1450),
    });
    let pod = r.push_interface(Interface {
        name: req.ifname.clone(),
        mac: Some("0a:58:0a:80:00:05".into()),
        sandbox: req.netns.as_ref().map(|p| p.display().to_string()),
        mtu: Some(1450),
    });
    r.ips.push(IpConfig {
        address: "10.128.0.5/23".parse().unwrap(),
        gateway: Some("10.128.0.1".parse().unwrap()),
        interface: Some(pod),
    });
    r.routes.push(Route {
        dst: "0.0.0.0/0".parse().unwrap(),
        gw: Some("10.128.0.1".parse().unwrap()),
    });
    r
}

impl Handler for Fake {
    async fn add(&self, req: Request) -> Result<AddResult, CniError> {
        self.run(&req).await?;
        Ok(fake_result(&req))
    }

    async fn del(&self, req: Request) -> Result<(), CniError> {
        self.run(&req).await
    }

    async fn check(&self, req: Request) -> Result<(), CniError> {
        self.run(&req).await
    }

    async fn gc(&self, req: Request) -> Result<(), CniError> {
        self.run(&req).await
    }

    async fn status(&self, req: Request) -> Result<(), CniError> {
        self.run(&req).await?;
        if self.not_ready.load(Ordering::SeqCst) {
            return Err(CniError::plugin_not_available("fake: OVS is unreachable"));
        }
        Ok(())
    }
}

async fn start(dir: &TempDir, opts: ServerOptions) -> (Arc<Fake>, ServerHandle) {
    let fake = Fake::new();
    let handle = serve(&dir.socket(), fake.clone(), opts).await.unwrap();
    (fake, handle)
}

// ---------- client ----------

/// A parsed HTTP response.
#[derive(Debug)]
struct Resp {
    status: u16,
    headers: String,
    body: String,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("response body is not JSON ({e}): {:?}", self.body))
    }

    /// Asserts a CNI error response and returns (code, msg).
    fn cni_error(&self, status: u16, version: &str) -> (u64, String) {
        assert_eq!(self.status, status, "{self:?}");
        assert!(
            self.headers
                .to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{self:?}"
        );
        let v = self.json();
        assert_eq!(v["cniVersion"], version, "{self:?}");
        (
            v["code"].as_u64().unwrap(),
            v["msg"].as_str().unwrap().to_string(),
        )
    }
}

fn parse_response(raw: &[u8]) -> Resp {
    let text = String::from_utf8_lossy(raw).to_string();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP header end in {text:?}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line in {head:?}"));
    Resp {
        status,
        headers: head.to_string(),
        body: body.to_string(),
    }
}

fn request_bytes(method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "{method} {path} HTTP/1.1\r\nHost: sdn-agent\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

async fn raw(sock: &Path, bytes: &[u8]) -> Resp {
    let mut s = UnixStream::connect(sock).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut buf = Vec::new();
    timeout(Duration::from_secs(30), s.read_to_end(&mut buf))
        .await
        .expect("no response within 30 s")
        .unwrap();
    parse_response(&buf)
}

async fn post(sock: &Path, body: &Value) -> Resp {
    raw(
        sock,
        &request_bytes("POST", "/cni", body.to_string().as_bytes()),
    )
    .await
}

/// A shim body for `command` with a config of `version`.
fn body(command: &str, cid: &str, netns: &str, version: &str) -> Value {
    json!({
        "command": command, "containerId": cid, "netns": netns, "ifname": "eth0",
        "args": "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=pod-1",
        "path": "/opt/cni/bin",
        "config": {"cniVersion": version, "name": "sdn", "type": "sdn-cni"}
    })
}

/// A path that is a network namespace and not the server's own (which the server refuses): one
/// namespace for the whole test binary, deleted when the process exits.
fn test_netns() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    static NS: std::sync::Mutex<Option<sdn_tests::harness::Netns>> = std::sync::Mutex::new(None);
    extern "C" fn cleanup() {
        drop(NS.lock().map(|mut n| n.take()));
    }
    PATH.get_or_init(|| {
        let ns = sdn_tests::harness::Netns::new("cnisrv");
        let path = ns.path();
        *NS.lock().unwrap_or_else(|e| e.into_inner()) = Some(ns);
        // SAFETY: registers a plain function without arguments to run at exit.
        unsafe { libc::atexit(cleanup) };
        path
    })
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

// ---------- socket and peers ----------

#[tokio::test]
async fn socket_directory_0700_socket_0600_removed_on_drop() {
    let dir = TempDir::new();
    let sock = dir.socket();
    let (_fake, handle) = start(&dir, ServerOptions::default()).await;
    assert_eq!(mode(sock.parent().unwrap()), 0o700);
    assert_eq!(mode(&sock), 0o600);
    assert_eq!(handle.socket(), sock);
    let r = post(&sock, &body("ADD", "c1", test_netns(), "1.0.0")).await;
    assert_eq!(r.status, 200, "{r:?}");
    drop(handle);
    assert!(!sock.exists(), "socket file must be removed on drop");
    assert!(UnixStream::connect(&sock).await.is_err());

    // An existing directory with a loose mode is tightened.
    std::fs::set_permissions(
        sock.parent().unwrap(),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let (_fake, handle) = start(&dir, ServerOptions::default()).await;
    assert_eq!(mode(sock.parent().unwrap()), 0o700);
    assert_eq!(mode(&sock), 0o600);
    drop(handle);
}

#[tokio::test]
async fn socket_path_hygiene() {
    let dir = TempDir::new();
    let sock = dir.socket();

    // The directory is a file: refused.
    std::fs::write(sock.parent().unwrap(), b"x").unwrap();
    let err = serve(&sock, Fake::new(), ServerOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ServerError::NotADirectory(_)), "{err}");
    assert!(
        err.to_string().contains("exists and is not a directory"),
        "{err}"
    );
    std::fs::remove_file(sock.parent().unwrap()).unwrap();

    // A regular file at the socket path: refused and left alone.
    std::fs::create_dir(sock.parent().unwrap()).unwrap();
    std::fs::write(&sock, b"keep me").unwrap();
    let err = serve(&sock, Fake::new(), ServerOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ServerError::NotASocket(_)), "{err}");
    assert_eq!(std::fs::read(&sock).unwrap(), b"keep me");
    std::fs::remove_file(&sock).unwrap();

    // A stale socket (its listener is gone) is replaced.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let (_fake, handle) = start(&dir, ServerOptions::default()).await;
    let r = post(&sock, &body("DEL", "c1", "", "1.0.0")).await;
    assert_eq!(r.status, 200, "{r:?}");

    // A live server's socket is not stolen.
    let err = serve(&sock, Fake::new(), ServerOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ServerError::InUse(_)), "{err}");
    let r = post(&sock, &body("DEL", "c1", "", "1.0.0")).await;
    assert_eq!(r.status, 200, "the first server must still serve: {r:?}");

    // Relative paths are refused.
    let err = serve(Path::new("cni.sock"), Fake::new(), ServerOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ServerError::BadPath(_)), "{err}");
    drop(handle);
}

#[tokio::test]
async fn peer_uid_outside_the_allowed_set_is_refused() {
    let dir = TempDir::new();
    let opts = ServerOptions {
        allowed_uids: vec![4242],
        ..Default::default()
    };
    let (fake, _handle) = start(&dir, opts).await;
    // We are root (uid 0), which this server does not allow.
    let r = post(&dir.socket(), &body("ADD", "c1", test_netns(), "1.0.0")).await;
    let (code, msg) = r.cni_error(403, "1.0.0");
    assert_eq!(code, 101);
    assert_eq!(msg, "peer uid 0 is not allowed (allowed uids: [4242])");
    assert_eq!(fake.tracker.requests.lock().unwrap().len(), 0);
}

/// Runs `f` on a fresh OS thread whose credentials are uid/gid 65534 (nobody). Raw syscalls:
/// the kernel's setresuid is per-thread (glibc's wrapper would change every thread).
fn as_nobody<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::spawn(move || {
        // SAFETY: raw credential syscalls affect only this thread, which ends after `f`.
        unsafe {
            assert_eq!(
                libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()),
                0
            );
            assert_eq!(libc::syscall(libc::SYS_setresgid, 65534, 65534, 65534), 0);
            assert_eq!(libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534), 0);
        }
        // SAFETY: geteuid has no preconditions.
        assert_eq!(unsafe { libc::geteuid() }, 65534);
        f()
    })
}

fn blocking_post(sock: &Path, body: &Value) -> std::io::Result<Resp> {
    let mut s = std::os::unix::net::UnixStream::connect(sock)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(&request_bytes("POST", "/cni", body.to_string().as_bytes()))?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    Ok(parse_response(&buf))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_root_peer_is_refused() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root");
    let dir = TempDir::new();
    let (fake, _handle) = start(&dir, ServerOptions::default()).await;
    let sock = dir.socket();

    // First layer: the 0700 directory keeps nobody from reaching the socket at all.
    let s = sock.clone();
    let t =
        as_nobody(move || blocking_post(&s, &body("ADD", "c1", test_netns(), "1.0.0")).map(|_| ()));
    let res = tokio::task::spawn_blocking(move || t.join().unwrap())
        .await
        .unwrap();
    let err = res.expect_err("nobody must not reach a socket in a 0700 root directory");
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{err}");

    // Second layer: with the file modes opened up (a misconfiguration), SO_PEERCRED still
    // refuses the connection.
    std::fs::set_permissions(
        sock.parent().unwrap(),
        std::fs::Permissions::from_mode(0o711),
    )
    .unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let s = sock.clone();
    let t = as_nobody(move || blocking_post(&s, &body("ADD", "c1", test_netns(), "1.0.0")));
    let r = tokio::task::spawn_blocking(move || t.join().unwrap())
        .await
        .unwrap()
        .expect("with open modes nobody can connect");
    let (code, msg) = r.cni_error(403, "1.0.0");
    assert_eq!(code, 101);
    assert_eq!(msg, "peer uid 65534 is not root");
    assert_eq!(
        fake.tracker.requests.lock().unwrap().len(),
        0,
        "a refused peer must never reach the handler"
    );
    // Root still gets through.
    let r = post(&sock, &body("ADD", "c1", test_netns(), "1.0.0")).await;
    assert_eq!(r.status, 200, "{r:?}");
}

// ---------- HTTP and validation errors ----------

#[tokio::test]
async fn http_level_errors() {
    let dir = TempDir::new();
    let opts = ServerOptions {
        max_body_bytes: 1000,
        ..Default::default()
    };
    let (fake, _handle) = start(&dir, opts).await;
    let sock = dir.socket();

    let r = raw(&sock, &request_bytes("GET", "/cni", b"")).await;
    let (code, msg) = r.cni_error(405, "1.0.0");
    assert_eq!(
        (code, msg.as_str()),
        (100, "method GET is not allowed on /cni; use POST")
    );
    assert!(
        r.headers.to_ascii_lowercase().contains("allow: post"),
        "{r:?}"
    );

    let r = raw(&sock, &request_bytes("POST", "/other", b"{}")).await;
    let (_, msg) = r.cni_error(404, "1.0.0");
    assert_eq!(msg, "no such endpoint \"/other\"; the shim posts to /cni");

    // Declared too large.
    let big = vec![b' '; 1001];
    let r = raw(&sock, &request_bytes("POST", "/cni", &big)).await;
    let (code, msg) = r.cni_error(413, "1.0.0");
    assert_eq!(
        (code, msg.as_str()),
        (6, "request body is larger than 1000 bytes")
    );

    // Too large without a declared length (chunked).
    let mut chunked = b"POST /cni HTTP/1.1\r\nHost: sdn-agent\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec();
    for _ in 0..3 {
        chunked.extend_from_slice(b"190\r\n");
        chunked.extend_from_slice(&[b' '; 0x190]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let r = raw(&sock, &chunked).await;
    let (code, _) = r.cni_error(413, "1.0.0");
    assert_eq!(code, 6);

    let r = raw(&sock, &request_bytes("POST", "/cni", b"{\"command\": ")).await;
    let (code, msg) = r.cni_error(400, "1.0.0");
    assert_eq!(code, 6);
    assert!(
        msg.starts_with("request body is not a valid request object: EOF while parsing"),
        "{msg}"
    );

    let r = raw(&sock, &request_bytes("POST", "/cni", b"[1,2]")).await;
    let (code, _) = r.cni_error(400, "1.0.0");
    assert_eq!(code, 6);

    let r = raw(&sock, &request_bytes("POST", "/cni", b"{\"command\": 5}")).await;
    let (code, msg) = r.cni_error(400, "1.0.0");
    assert_eq!(code, 6);
    assert!(
        msg.contains("invalid type: integer `5`, expected a string"),
        "{msg}"
    );

    assert_eq!(fake.tracker.requests.lock().unwrap().len(), 0);
}

#[tokio::test]
async fn validation_errors_name_the_field_and_value() {
    let dir = TempDir::new();
    let (fake, _handle) = start(&dir, ServerOptions::default()).await;
    let sock = dir.socket();
    let missing_ns = format!("/run/netns/{}", unique_name("cnisrv-missing"));
    let plain_file = dir.0.join("not-a-netns");
    std::fs::write(&plain_file, b"").unwrap();
    let plain_file = plain_file.display().to_string();

    type Case = (Value, u16, &'static str, u64, String);
    let with = |f: &dyn Fn(&mut Value)| {
        let mut b = body("ADD", "c1", test_netns(), "0.3.1");
        f(&mut b);
        b
    };
    let cases: Vec<Case> = vec![
        (
            with(&|b| b["netns"] = json!(missing_ns)),
            400, "0.3.1", 4,
            format!("CNI_NETNS {missing_ns:?} does not exist"),
        ),
        (
            with(&|b| b["netns"] = json!(plain_file)),
            400, "0.3.1", 4,
            format!("CNI_NETNS {plain_file:?} is not a network namespace (not on nsfs; a deleted namespace leaves such a file)"),
        ),
        (
            with(&|b| b["netns"] = json!("/tmp")),
            400, "0.3.1", 4,
            "CNI_NETNS \"/tmp\" is a directory, not a network namespace".into(),
        ),
        (
            with(&|b| { b.as_object_mut().unwrap().remove("netns"); }),
            400, "0.3.1", 4,
            "CNI_NETNS is missing (ADD needs the path of the container's network namespace)".into(),
        ),
        (
            with(&|b| b["containerId"] = json!("abc def")),
            400, "0.3.1", 4,
            "CNI_CONTAINERID \"abc def\" is not a valid container id (1 to 256 characters: a letter or digit, then letters, digits, '_', '.' or '-')".into(),
        ),
        (
            with(&|b| b["ifname"] = json!("eth0123456789abc")),
            400, "0.3.1", 4,
            "CNI_IFNAME \"eth0123456789abc\" is 16 bytes long; the kernel allows at most 15".into(),
        ),
        (
            with(&|b| b["ifname"] = json!("eth:0")),
            400, "0.3.1", 4,
            "CNI_IFNAME \"eth:0\" contains ':'; interface names may not contain '/', ':', whitespace or control characters".into(),
        ),
        (
            with(&|b| b["args"] = json!("IgnoreUnknown=1;K8S_POD_NAME=p;FOO")),
            400, "0.3.1", 4,
            "CNI_ARGS segment 3 \"FOO\" has no '='".into(),
        ),
        (
            with(&|b| b["args"] = json!("K8S_POD_NAME=p;EXTRA=1")),
            400, "0.3.1", 4,
            "CNI_ARGS has unknown keys \"EXTRA\" (known: IgnoreUnknown, K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID, K8S_POD_INFRA_CONTAINER_ID, IP, MAC); add IgnoreUnknown=1 to ignore them".into(),
        ),
        (
            with(&|b| b["args"] = json!("IP=10.128.0.999")),
            400, "0.3.1", 4,
            "CNI_ARGS IP=\"10.128.0.999\" is not an IP address (a.b.c.d or a.b.c.d/len, an IPv6 address with or without /len, or one of each separated by a comma)".into(),
        ),
        (
            with(&|b| b["command"] = json!("VERSION")),
            400, "0.3.1", 4,
            "CNI_COMMAND VERSION is answered by the sdn-cni shim and must not be forwarded to the agent".into(),
        ),
        (
            with(&|b| b["command"] = json!("CHECK")),
            400, "0.3.1", 1,
            "CHECK needs cniVersion 0.4.0 or later; the network config asks for 0.3.1".into(),
        ),
        (
            with(&|b| b["config"]["name"] = json!("bad name")),
            400, "0.3.1", 7,
            "network config \"name\" \"bad name\" is not a valid network name (1 to 255 characters: a letter or digit, then letters, digits, '_', '.' or '-')".into(),
        ),
        (
            with(&|b| b["config"]["timeoutSeconds"] = json!("30")),
            400, "0.3.1", 7,
            "network config \"timeoutSeconds\" must be a positive number of seconds up to 86400, got \"30\"".into(),
        ),
        // Unknown version: the error is rendered in 1.0.0.
        (
            with(&|b| b["config"]["cniVersion"] = json!("0.2.0")),
            400, "1.0.0", 1,
            "cniVersion \"0.2.0\" is not supported (supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0)".into(),
        ),
        (
            with(&|b| { b.as_object_mut().unwrap().remove("config"); }),
            400, "1.0.0", 7,
            "request has no network config (the runtime passes it on the plugin's stdin)".into(),
        ),
        (
            {
                let mut b = body("GC", "", "", "1.0.0");
                b.as_object_mut().unwrap().remove("containerId");
                b
            },
            400, "1.0.0", 1,
            "GC needs cniVersion 1.1.0 or later; the network config asks for 1.0.0".into(),
        ),
    ];
    for (b, status, version, code, msg) in cases {
        let r = post(&sock, &b).await;
        let (c, m) = r.cni_error(status, version);
        assert_eq!((c, m.as_str()), (code, msg.as_str()), "body {b}");
    }
    assert_eq!(
        fake.tracker.requests.lock().unwrap().len(),
        0,
        "invalid requests must never reach the handler"
    );
}

// ---------- results ----------

#[tokio::test]
async fn results_in_every_version_end_to_end() {
    let dir = TempDir::new();
    let (fake, _handle) = start(&dir, ServerOptions::default()).await;
    let sock = dir.socket();
    let ns = Netns::new("cnisrv");
    let netns = ns.path();

    let iface_out = |mtu: bool| {
        let m = if mtu { r#","mtu":1450"# } else { "" };
        format!(
            r#""interfaces":[{{"name":"vethfake0000001","mac":"ee:ee:ee:ee:ee:ee"{m}}},{{"name":"eth0","mac":"0a:58:0a:80:00:05"{m},"sandbox":"{netns}"}}]"#
        )
    };
    let expected = |v: &str| {
        let (ipv, mtu) = match v {
            "1.0.0" => ("", false),
            "1.1.0" => ("", true),
            _ => (r#""version":"4","#, false),
        };
        format!(
            r#"{{"cniVersion":"{v}",{},"ips":[{{{ipv}"interface":1,"address":"10.128.0.5/23","gateway":"10.128.0.1"}}],"routes":[{{"dst":"0.0.0.0/0","gw":"10.128.0.1"}}],"dns":{{}}}}"#,
            iface_out(mtu)
        )
    };
    for v in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let r = post(&sock, &body("ADD", "c1", &netns, v)).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert!(r
            .headers
            .to_ascii_lowercase()
            .contains("content-type: application/json"));
        assert_eq!(r.body, expected(v), "ADD result for {v}");

        let r = post(&sock, &body("DEL", "c1", &netns, v)).await;
        assert_eq!((r.status, r.body.as_str()), (200, ""), "DEL {v}");
        if v >= "0.4.0" {
            let r = post(&sock, &body("CHECK", "c1", &netns, v)).await;
            assert_eq!((r.status, r.body.as_str()), (200, ""), "CHECK {v}");
        }
    }
    let req = fake.tracker.last_request();
    assert_eq!(req.command, Command::Check);
    assert_eq!(req.args.pod_namespace(), Some("ns1"));
    assert_eq!(req.args.pod_name(), Some("pod-1"));
    assert_eq!(req.path, vec![PathBuf::from("/opt/cni/bin")]);

    // STATUS and GC (1.1.0), no attachment fields.
    let status = json!({"command": "STATUS", "config": {"cniVersion": "1.1.0", "name": "sdn", "type": "sdn-cni"}});
    let r = post(&sock, &status).await;
    assert_eq!((r.status, r.body.as_str()), (200, ""));
    fake.not_ready.store(true, Ordering::SeqCst);
    let r = post(&sock, &status).await;
    let (code, msg) = r.cni_error(503, "1.1.0");
    assert_eq!((code, msg.as_str()), (50, "fake: OVS is unreachable"));

    let gc = json!({"command": "GC", "path": "/opt/cni/bin", "config": {
        "cniVersion": "1.1.0", "name": "sdn", "type": "sdn-cni",
        "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}, {"containerID": "c2", "ifname": "net1"}]}});
    let r = post(&sock, &gc).await;
    assert_eq!((r.status, r.body.as_str()), (200, ""));
    let req = fake.tracker.last_request();
    assert_eq!(req.command, Command::Gc);
    let valid = req.config.valid_attachments.unwrap();
    assert_eq!(valid.len(), 2);
    assert_eq!(
        (valid[1].container_id.as_str(), valid[1].ifname.as_str()),
        ("c2", "net1")
    );

    // DEL after the namespace is gone, and with an empty netns (containerd's second DEL).
    drop(ns);
    let r = post(&sock, &body("DEL", "c1", &netns, "1.0.0")).await;
    assert_eq!((r.status, r.body.as_str()), (200, ""));
    assert_eq!(
        fake.tracker.last_request().netns,
        Some(PathBuf::from(&netns))
    );
    let r = post(&sock, &body("DEL", "c1", "", "1.0.0")).await;
    assert_eq!((r.status, r.body.as_str()), (200, ""));
    assert_eq!(fake.tracker.last_request().netns, None);
    // ...but ADD into it is refused.
    let r = post(&sock, &body("ADD", "c1", &netns, "1.0.0")).await;
    let (code, msg) = r.cni_error(400, "1.0.0");
    assert_eq!(
        (code, msg),
        (4, format!("CNI_NETNS {netns:?} does not exist"))
    );
}

#[tokio::test]
async fn prev_result_reaches_the_handler_and_chains() {
    let dir = TempDir::new();
    let (fake, _handle) = start(&dir, ServerOptions::default()).await;
    let sock = dir.socket();
    let prev = json!({"cniVersion": "0.4.0",
        "interfaces": [{"name": "tap0", "mac": "aa:bb:cc:dd:ee:01", "sandbox": test_netns()}],
        "ips": [{"version": "4", "interface": 0, "address": "192.168.5.2/24"}],
        "routes": [{"dst": "192.168.0.0/16"}],
        "dns": {"nameservers": ["192.168.5.1"]}});
    let mut b = body("ADD", "c1", test_netns(), "0.4.0");
    b["config"]["prevResult"] = prev.clone();
    let r = post(&sock, &b).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.body,
        concat!(
            r#"{"cniVersion":"0.4.0","interfaces":[{"name":"tap0","mac":"aa:bb:cc:dd:ee:01","sandbox":"/proc/self/ns/net"},"#,
            r#"{"name":"vethfake0000001","mac":"ee:ee:ee:ee:ee:ee"},{"name":"eth0","mac":"0a:58:0a:80:00:05","sandbox":"/proc/self/ns/net"}],"#,
            r#""ips":[{"version":"4","interface":0,"address":"192.168.5.2/24"},{"version":"4","interface":2,"address":"10.128.0.5/23","gateway":"10.128.0.1"}],"#,
            r#""routes":[{"dst":"192.168.0.0/16"},{"dst":"0.0.0.0/0","gw":"10.128.0.1"}],"dns":{"nameservers":["192.168.5.1"]}}"#
        )
            .replace("/proc/self/ns/net", test_netns())
    );
    let req = fake.tracker.last_request();
    assert_eq!(req.raw_config["prevResult"], prev);
    assert_eq!(
        req.config.prev_result.as_ref().unwrap().interfaces[0].name,
        "tap0"
    );

    // DEL carries our own result back as prevResult (podman does this).
    let added: Value = serde_json::from_str(&r.body).unwrap();
    let mut d = body("DEL", "c1", test_netns(), "0.4.0");
    d["config"]["prevResult"] = added;
    let r = post(&sock, &d).await;
    assert_eq!(r.status, 200, "{r:?}");
    let got = fake.tracker.last_request().config.prev_result.unwrap();
    assert_eq!(got.interfaces.len(), 3);
    assert_eq!(got.ips[1].address.to_string(), "10.128.0.5/23");

    // A prevResult we cannot represent is refused precisely (IPv6 addresses are results of
    // dual-stack plugins, and fine; a gateway of the other family is not).
    let mut b = body("ADD", "c2", test_netns(), "1.0.0");
    b["config"]["prevResult"] =
        json!({"cniVersion": "1.0.0", "ips": [{"address": "fd00::2/64", "gateway": "10.0.0.1"}]});
    let (code, msg) = post(&sock, &b).await.cni_error(400, "1.0.0");
    assert_eq!(
        (code, msg.as_str()),
        (
            7,
            "prevResult.ips[0].gateway \"10.0.0.1\" is not an IPv6 address"
        )
    );
}

#[tokio::test]
async fn handler_errors_and_panics() {
    let dir = TempDir::new();
    let (_fake, handle) = start(&dir, ServerOptions::default()).await;
    let sock = dir.socket();
    let r = post(&sock, &body("ADD", "err1", test_netns(), "0.3.1")).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body,
        r#"{"cniVersion":"0.3.1","code":7,"msg":"fake: the subnet is exhausted","details":"step: ipam"}"#
    );
    let r = post(&sock, &body("ADD", "panic1", test_netns(), "1.0.0")).await;
    let (code, msg) = r.cni_error(500, "1.0.0");
    assert_eq!(
        (code, msg.as_str()),
        (100, "the ADD handler failed unexpectedly")
    );
    assert!(
        r.json()["details"].as_str().unwrap().contains("panicked"),
        "{r:?}"
    );
    // The panicking call released its sandbox lock.
    let r = post(&sock, &body("DEL", "panic1", test_netns(), "1.0.0")).await;
    assert_eq!(
        r.status, 500,
        "DEL panics too (same prefix), but is not blocked: {r:?}"
    );
    assert_eq!(handle.locked_sandboxes(), 0);
}

// ---------- concurrency and deadlines ----------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn same_sandbox_is_serialised() {
    let dir = TempDir::new();
    let (fake, handle) = start(&dir, ServerOptions::default()).await;
    let sock = dir.socket();

    let s = sock.clone();
    let first =
        tokio::spawn(async move { post(&s, &body("ADD", "gate-1", test_netns(), "1.0.0")).await });
    wait_for("the first ADD to enter the handler", || {
        fake.tracker.count("gate-1", "enter") == 1
    })
    .await;
    let s = sock.clone();
    let second =
        tokio::spawn(async move { post(&s, &body("DEL", "gate-1", test_netns(), "1.0.0")).await });
    // The DEL has reached the server (it is counted in flight) and queues behind the ADD.
    wait_for("the DEL to be dispatched", || handle.in_flight() == 2).await;
    assert_eq!(handle.locked_sandboxes(), 1);
    // Other sandboxes are not blocked meanwhile.
    let r = post(&sock, &body("ADD", "other-1", test_netns(), "1.0.0")).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        fake.tracker.count("gate-1", "enter"),
        1,
        "the DEL must not enter while the ADD runs"
    );
    fake.open_gate();
    let (a, b) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!((a.status, b.status), (200, 200), "{a:?} {b:?}");
    assert_eq!(
        fake.tracker.events_for("gate-1"),
        vec!["enter", "exit", "enter", "exit"]
    );
    assert_eq!(
        handle.locked_sandboxes(),
        0,
        "the lock table must be empty when idle"
    );
    assert_eq!(handle.in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn different_sandboxes_run_in_parallel() {
    let dir = TempDir::new();
    let (fake, handle) = start(&dir, ServerOptions::default()).await;
    let sock = dir.socket();
    // Each barrier handler waits for the other: both succeed only if they overlap.
    let (ba, bb) = (
        body("ADD", "barrier-a", test_netns(), "1.0.0"),
        body("ADD", "barrier-b", test_netns(), "1.0.0"),
    );
    let (a, b) = tokio::join!(post(&sock, &ba), post(&sock, &bb));
    assert_eq!((a.status, b.status), (200, 200), "{a:?} {b:?}");

    // Many requests over a few sandboxes: never two at once for one id, and some overlap.
    let mut tasks = Vec::new();
    for i in 0..40 {
        let s = sock.clone();
        let cmd = if i % 2 == 0 { "ADD" } else { "DEL" };
        let cid = format!("slow-{}", i % 4);
        tasks.push(tokio::spawn(async move {
            post(&s, &body(cmd, &cid, test_netns(), "1.0.0")).await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().status, 200);
    }
    assert_eq!(fake.tracker.same_id_overlaps.load(Ordering::SeqCst), 0);
    assert!(fake.tracker.max_concurrent.load(Ordering::SeqCst) >= 2);
    assert_eq!(handle.locked_sandboxes(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deadline_answers_code_11_and_the_handler_finishes() {
    let dir = TempDir::new();
    let opts = ServerOptions {
        request_timeout: Duration::from_secs(1),
        ..Default::default()
    };
    let (fake, handle) = start(&dir, opts).await;
    let sock = dir.socket();

    let t0 = Instant::now();
    let r = post(&sock, &body("ADD", "gate-d", test_netns(), "0.4.0")).await;
    let waited = t0.elapsed();
    let (code, msg) = r.cni_error(503, "0.4.0");
    assert_eq!(
        (code, msg.as_str()),
        (
            11,
            "timed out after 1s; the agent is still completing or rolling back this request"
        )
    );
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
        "answered after {waited:?}"
    );
    // The handler was not cancelled: it is still inside, holding the sandbox.
    assert_eq!(fake.tracker.events_for("gate-d"), vec!["enter"]);
    assert_eq!(handle.in_flight(), 1);

    // A retry for the same sandbox waits for it...
    let s = sock.clone();
    let retry =
        tokio::spawn(async move { post(&s, &body("DEL", "gate-d", test_netns(), "0.4.0")).await });
    wait_for("the retry to be dispatched", || handle.in_flight() == 2).await;
    assert_eq!(fake.tracker.events_for("gate-d"), vec!["enter"]);
    // ...and runs once the first call has finished.
    fake.open_gate();
    let r = retry.await.unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        fake.tracker.events_for("gate-d"),
        vec!["enter", "exit", "enter", "exit"]
    );
    assert_eq!(handle.in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_queued_past_its_deadline_never_runs() {
    let dir = TempDir::new();
    let opts = ServerOptions {
        request_timeout: Duration::from_secs(1),
        ..Default::default()
    };
    let (fake, handle) = start(&dir, opts).await;
    let sock = dir.socket();

    let s = sock.clone();
    let first =
        tokio::spawn(async move { post(&s, &body("ADD", "gate-q", test_netns(), "1.0.0")).await });
    wait_for("the ADD to enter", || {
        fake.tracker.count("gate-q", "enter") == 1
    })
    .await;
    let r = post(&sock, &body("DEL", "gate-q", test_netns(), "1.0.0")).await;
    let (code, msg) = r.cni_error(503, "1.0.0");
    assert_eq!(
        (code, msg.as_str()),
        (11, "timed out after 1s waiting for an earlier request for container gate-q to finish; this request was not started")
    );
    let r = first.await.unwrap();
    assert_eq!(r.cni_error(503, "1.0.0").0, 11);
    fake.open_gate();
    wait_for("all handler calls to end", || handle.in_flight() == 0).await;
    assert_eq!(
        fake.tracker.events_for("gate-q"),
        vec!["enter", "exit"],
        "the abandoned DEL must never run"
    );
    assert_eq!(handle.locked_sandboxes(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn config_timeout_seconds_shortens_the_deadline() {
    let dir = TempDir::new();
    let (fake, handle) = start(&dir, ServerOptions::default()).await;
    let mut b = body("ADD", "gate-t", test_netns(), "1.1.0");
    b["config"]["timeoutSeconds"] = json!(1);
    let t0 = Instant::now();
    let r = post(&dir.socket(), &b).await;
    let (code, msg) = r.cni_error(503, "1.1.0");
    assert_eq!(code, 11);
    assert!(msg.starts_with("timed out after 0.9s;"), "{msg}");
    // The answer comes a tenth early, so it reaches the shim before the shim's own 1 s.
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(850) && waited < Duration::from_secs(3),
        "answered after {waited:?}"
    );
    fake.open_gate();
    wait_for("the handler to finish", || handle.in_flight() == 0).await;
    assert_eq!(fake.tracker.events_for("gate-t"), vec!["enter", "exit"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_stops_accepting_and_waits_for_running_handlers() {
    let dir = TempDir::new();
    let (fake, handle) = start(&dir, ServerOptions::default()).await;
    let sock = dir.socket();
    let s = sock.clone();
    let running =
        tokio::spawn(async move { post(&s, &body("ADD", "gate-s", test_netns(), "1.0.0")).await });
    wait_for("the ADD to enter", || {
        fake.tracker.count("gate-s", "enter") == 1
    })
    .await;
    let left = handle.shutdown(Duration::from_millis(200)).await;
    assert_eq!(
        left, 1,
        "the gated handler is still running after the grace period"
    );
    assert!(!sock.exists());
    assert!(UnixStream::connect(&sock).await.is_err());
    // The accepted request still completes and is answered.
    fake.open_gate();
    let r = running.await.unwrap();
    assert_eq!(r.status, 200, "{r:?}");
}

// ---------- the real shim against the real server ----------

/// The `sdn-cni` binary (`<target>/<profile>/sdn-cni` next to this test's `deps/`, or
/// `SDN_CNI_BIN`); `cargo build --workspace` builds it.
fn shim_binary() -> PathBuf {
    sdn_tests::harness::workspace_bin("sdn-cni")
}

/// Runs the shim as a runtime does (cleared environment, config on stdin): (exit code, stdout).
async fn run_shim(env: &[(&str, &str)], config: &Value) -> (i32, String) {
    let mut cmd = tokio::process::Command::new(shim_binary());
    cmd.env_clear()
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(config.to_string().as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let out = timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("the shim did not exit within 20 s")
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_real_shim_speaks_to_the_server() {
    let dir = TempDir::new();
    let (fake, handle) = start(&dir, ServerOptions::default()).await;
    let sock = dir.socket().display().to_string();
    let config =
        |v: &str| json!({"cniVersion": v, "name": "sdn", "type": "sdn-cni", "socket": sock});
    let env = |cmd: &'static str, cid: &'static str, args: &'static str| {
        vec![
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", cid),
            ("CNI_NETNS", test_netns()),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", args),
            ("CNI_PATH", "/opt/cni/bin"),
        ]
    };

    let (code, out) = run_shim(
        &env("ADD", "c1", "IgnoreUnknown=1;K8S_POD_NAME=web"),
        &config("0.3.1"),
    )
    .await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.trim_end(),
        concat!(
            r#"{"cniVersion":"0.3.1","interfaces":[{"name":"vethfake0000001","mac":"ee:ee:ee:ee:ee:ee"},"#,
            r#"{"name":"eth0","mac":"0a:58:0a:80:00:05","sandbox":"/proc/self/ns/net"}],"#,
            r#""ips":[{"version":"4","interface":1,"address":"10.128.0.5/23","gateway":"10.128.0.1"}],"#,
            r#""routes":[{"dst":"0.0.0.0/0","gw":"10.128.0.1"}],"dns":{}}"#
        )
            .replace("/proc/self/ns/net", test_netns())
    );
    let req = fake.tracker.last_request();
    assert_eq!(
        (req.command, req.args.pod_name()),
        (Command::Add, Some("web"))
    );
    assert_eq!(req.raw_config["socket"], sock.as_str());

    let (code, out) = run_shim(
        &env("DEL", "c1", "IgnoreUnknown=1;K8S_POD_NAME=web"),
        &config("1.0.0"),
    )
    .await;
    assert_eq!((code, out.trim()), (0, ""));

    // The agent's validation error reaches the runtime verbatim.
    let (code, out) = run_shim(&env("ADD", "c1", "K8S_POD_NAME=web;"), &config("0.4.0")).await;
    assert_eq!(code, 1, "{out}");
    let e: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(e["cniVersion"], "0.4.0");
    assert_eq!(e["code"], 4);
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .starts_with("CNI_ARGS segment 2 is empty"),
        "{e}"
    );

    // At the deadline the runtime gets the agent's code 11, which arrives before the shim's own
    // timeout fires.
    let mut c = config("1.0.0");
    c["timeoutSeconds"] = json!(1);
    let (code, out) = run_shim(&env("ADD", "gate-x", "IgnoreUnknown=1"), &c).await;
    assert_eq!(code, 1, "{out}");
    let e: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(e["code"], 11);
    assert_eq!(
        e["msg"],
        "timed out after 0.9s; the agent is still completing or rolling back this request"
    );
    fake.open_gate();
    wait_for("the gated ADD to finish", || handle.in_flight() == 0).await;
}
