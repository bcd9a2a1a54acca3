//! The real `sdn-cni` binary, run as the runtime runs it: a subprocess with a cleared
//! environment holding only the CNI variables, the network config on stdin, against a fake agent
//! (a std `UnixListener` on a thread, in a temp dir) that records the request and sends a canned
//! response. Checks the forwarded request, the printed output and the exit status, and every
//! error code the shim produces itself.
//!
//! The binary is `<target>/debug/sdn-cni`, found next to this test's own executable
//! (`<target>/debug/deps/`), or `SDN_CNI_BIN`. Cargo does not build another package's binary
//! for a test, so run `cargo build --workspace` first (`scripts/test` does); a missing binary
//! fails the tests with that instruction. Needs no root and no OVS.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long any wait in these tests may take.
const BOUND: Duration = Duration::from_secs(20);

/// The `sdn-cni` binary to test (`SDN_CNI_BIN` overrides it).
fn shim_binary() -> PathBuf {
    sdn_tests::harness::workspace_bin("sdn-cni")
}

/// A temp dir removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "sdn-shim-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What the fake agent does with the one connection it serves.
#[derive(Clone)]
enum Behaviour {
    /// Read the request, write these bytes, close.
    Reply(Vec<u8>),
    /// Read the request, close without answering.
    HangUp,
    /// Read the request, hold the connection open this long without answering.
    Silent(Duration),
}

/// A request as the fake agent received it.
#[derive(Debug)]
struct Recorded {
    request_line: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Recorded {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("request body is not JSON ({e}): {}", self.body))
    }
}

/// A fake `sdn-agent` serving one connection on `<dir>/cni.sock`.
struct FakeAgent {
    dir: TempDir,
    requests: mpsc::Receiver<Recorded>,
}

impl FakeAgent {
    fn start(behaviour: Behaviour) -> FakeAgent {
        let dir = TempDir::new();
        let listener = UnixListener::bind(dir.0.join("cni.sock")).unwrap();
        listener.set_nonblocking(true).unwrap();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let started = Instant::now();
            let mut conn = loop {
                match listener.accept() {
                    Ok((c, _)) => break c,
                    Err(_) if started.elapsed() < BOUND => thread::sleep(Duration::from_millis(2)),
                    Err(_) => return,
                }
            };
            conn.set_nonblocking(false).unwrap();
            conn.set_read_timeout(Some(BOUND)).unwrap();
            let Some(rec) = read_request(&mut conn) else {
                return;
            };
            let _ = tx.send(rec);
            match behaviour {
                Behaviour::Reply(bytes) => {
                    let _ = conn.write_all(&bytes);
                }
                Behaviour::HangUp => {}
                Behaviour::Silent(d) => thread::sleep(d),
            }
        });
        FakeAgent { dir, requests: rx }
    }

    fn socket(&self) -> String {
        self.dir.0.join("cni.sock").display().to_string()
    }

    /// The request the agent received (panics if none came).
    fn request(&self) -> Recorded {
        self.requests
            .recv_timeout(BOUND)
            .expect("the fake agent received no request")
    }
}

/// Reads one HTTP request (head, then a Content-Length body).
fn read_request(conn: &mut UnixStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap().to_string();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (n, v) = l.split_once(':').expect("header with ':'");
            (n.trim().to_string(), v.trim().to_string())
        })
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse().unwrap())
        .expect("the shim sends Content-Length");
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Recorded {
        request_line,
        headers,
        body: String::from_utf8(body).unwrap(),
    })
}

/// One run of the shim.
#[derive(Debug)]
struct Run {
    stdout: String,
    stderr: String,
    code: i32,
    took: Duration,
}

impl Run {
    /// The shim's output as one JSON object (asserting that stdout holds exactly that).
    fn json(&self) -> Value {
        let line = self
            .stdout
            .strip_suffix('\n')
            .unwrap_or_else(|| panic!("stdout must end with a newline: {self:?}"));
        assert!(!line.contains('\n'), "one line of JSON expected: {self:?}");
        serde_json::from_str(line).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }

    /// Asserts a shim-made CNI error with `code` and returns it.
    fn error(&self, code: u64) -> Value {
        assert_eq!(self.code, 1, "exit status: {self:?}");
        assert!(self.stderr.is_empty(), "nothing on stderr: {self:?}");
        let v = self.json();
        assert_eq!(v["code"], code, "{self:?}");
        let obj = v.as_object().unwrap();
        for key in ["cniVersion", "msg", "details"] {
            assert!(obj[key].is_string(), "{key} must be a string: {self:?}");
        }
        v
    }
}

/// Runs the shim with only `vars` in its environment and `stdin` on its stdin.
fn shim(vars: &[(&str, &str)], stdin: &str) -> Run {
    let started = Instant::now();
    let mut child = Command::new(shim_binary())
        .env_clear()
        .envs(vars.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let _ = input.write_all(stdin.as_bytes());
    drop(input);
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        let _ = tx.send(s);
    });
    let stdout = match rx.recv_timeout(BOUND) {
        Ok(s) => s,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sdn-cni did not finish within {BOUND:?}");
        }
    };
    let status = child.wait().unwrap();
    Run {
        stdout,
        stderr: reader.join().unwrap(),
        code: status.code().expect("exited, not killed by a signal"),
        took: started.elapsed(),
    }
}

fn add_env<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut v = vec![
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "c0ffee"),
        ("CNI_NETNS", "/run/netns/pod1"),
        ("CNI_IFNAME", "eth0"),
    ];
    v.extend_from_slice(extra);
    v
}

fn conf(socket: &str, extra: &str) -> String {
    format!(r#"{{"cniVersion":"1.0.0","name":"sdn","type":"sdn-cni","socket":"{socket}"{extra}}}"#)
}

fn http_reply(status: &str, body: &str) -> Behaviour {
    Behaviour::Reply(
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

const RESULT: &str = r#"{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mac":"0a:58:0a:80:00:02","sandbox":"/run/netns/pod1"}],"ips":[{"address":"10.128.0.2/23","gateway":"10.128.0.1","interface":0}]}"#;

const ALL_VERSIONS: &str = r#""supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]"#;

#[test]
fn version_is_answered_without_agent() {
    let run = shim(&[("CNI_COMMAND", "VERSION")], r#"{"cniVersion":"0.4.0"}"#);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        run.stdout,
        format!("{{\"cniVersion\":\"0.4.0\",{ALL_VERSIONS}}}\n")
    );
    let run = shim(&[("CNI_COMMAND", "VERSION")], r#"{"cniVersion":"0.2.0"}"#);
    assert_eq!(run.json()["cniVersion"], "1.1.0", "{run:?}");
}

#[test]
fn version_works_with_an_empty_environment() {
    // Nothing but CNI_COMMAND: no PATH, HOME, CNI_PATH; stdin empty.
    let run = shim(&[("CNI_COMMAND", "VERSION")], "");
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stderr.is_empty(), "{run:?}");
    assert_eq!(
        run.stdout,
        format!("{{\"cniVersion\":\"1.1.0\",{ALL_VERSIONS}}}\n")
    );
}

#[test]
fn add_forwards_the_request_and_prints_the_result() {
    let agent = FakeAgent::start(http_reply("200 OK", RESULT));
    let args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;IP=10.128.0.9;X=a=b==c";
    // A config as a conflist's second plugin gets it: prevResult, runtimeConfig, floats, and
    // key order that a re-serialisation would change.
    let stdin = format!(
        r#"{{"cniVersion":"1.0.0","name":"sdn","type":"sdn-cni","socket":"{}","zeta":1.50,"alpha":[1,2],"runtimeConfig":{{"portMappings":[{{"hostPort":8080,"containerPort":80,"protocol":"tcp"}}]}},"prevResult":{{"cniVersion":"1.0.0","ips":[{{"address":"10.0.0.5/24"}}]}}}}"#,
        agent.socket()
    );
    let run = shim(
        &add_env(&[
            ("CNI_ARGS", args),
            ("CNI_PATH", "/opt/cni/bin:/usr/lib/cni"),
        ]),
        &format!("\n{stdin}\n"),
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout, format!("{RESULT}\n"));
    assert!(run.stderr.is_empty(), "{run:?}");

    let req = agent.request();
    assert_eq!(req.request_line, "POST /cni HTTP/1.1");
    assert_eq!(req.header("host"), Some("sdn-agent"));
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(req.header("connection"), Some("close"));
    assert_eq!(
        req.header("content-length"),
        Some(req.body.len().to_string().as_str())
    );
    let body = req.json();
    assert_eq!(body["command"], "ADD");
    assert_eq!(body["containerId"], "c0ffee");
    assert_eq!(body["netns"], "/run/netns/pod1");
    assert_eq!(body["ifname"], "eth0");
    assert_eq!(body["args"], args);
    assert_eq!(body["path"], "/opt/cni/bin:/usr/lib/cni");
    let sent: Value = serde_json::from_str(&stdin).unwrap();
    assert_eq!(body["config"], sent);
    // The seven CNI fields and the shim protocol's version (cni_proto::PROTOCOL).
    assert_eq!(body["protocol"], 1);
    assert_eq!(body.as_object().unwrap().len(), 8, "{body}");
    // Verbatim: the config's own text, not a re-serialisation.
    assert!(
        req.body.ends_with(&format!(",\"config\":{stdin}}}")),
        "{}",
        req.body
    );
}

#[test]
fn del_works_with_the_stripped_cleanup_environment() {
    let agent = FakeAgent::start(http_reply("200 OK", ""));
    let run = shim(
        &[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "c0ffee"),
            ("CNI_IFNAME", "eth0"),
        ],
        &conf(&agent.socket(), ""),
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout, "", "DEL prints nothing");
    let body = agent.request().json();
    assert_eq!(
        body,
        json!({"protocol":1,"command":"DEL","containerId":"c0ffee","ifname":"eth0",
               "config": serde_json::from_str::<Value>(&conf(&agent.socket(), "")).unwrap()})
    );
}

#[test]
fn del_with_empty_netns_forwards_it() {
    let agent = FakeAgent::start(http_reply("200 OK", ""));
    let run = shim(
        &[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "c0ffee"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_NETNS", ""),
        ],
        &conf(&agent.socket(), ""),
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(agent.request().json()["netns"], "");
}

#[test]
fn status_and_gc_forward_without_container_variables() {
    for command in ["STATUS", "GC"] {
        let agent = FakeAgent::start(http_reply("200 OK", ""));
        let stdin = format!(
            r#"{{"cniVersion":"1.1.0","name":"sdn","socket":"{}","cni.dev/valid-attachments":[{{"containerID":"a","ifname":"eth0"}}]}}"#,
            agent.socket()
        );
        let run = shim(&[("CNI_COMMAND", command)], &stdin);
        assert_eq!(run.code, 0, "{command}: {run:?}");
        let body = agent.request().json();
        assert_eq!(body["command"], command);
        assert_eq!(body["protocol"], 1);
        assert_eq!(body.as_object().unwrap().len(), 3, "{body}");
        assert_eq!(
            body["config"]["cni.dev/valid-attachments"][0]["containerID"],
            "a"
        );
    }
}

#[test]
fn chunked_result_is_printed() {
    let (a, b) = RESULT.split_at(40);
    let reply = format!(
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    );
    let agent = FakeAgent::start(Behaviour::Reply(reply.into_bytes()));
    let run = shim(&add_env(&[]), &conf(&agent.socket(), ""));
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout, format!("{RESULT}\n"));
}

#[test]
fn agent_error_passes_through() {
    let err = r#"{"cniVersion":"1.0.0","code":7,"msg":"invalid CNI_ARGS","details":"K8S_POD_NAME has no value"}"#;
    let agent = FakeAgent::start(http_reply("400 Bad Request", err));
    let run = shim(&add_env(&[]), &conf(&agent.socket(), ""));
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(run.stdout, format!("{err}\n"));
    agent.request();
}

#[test]
fn agent_garbage_error_body_is_wrapped_as_code_5() {
    let agent = FakeAgent::start(http_reply("502 Bad Gateway", "<html>oops</html>"));
    let run = shim(&add_env(&[]), &conf(&agent.socket(), ""));
    let v = run.error(5);
    assert!(v["msg"].as_str().unwrap().contains("502"), "{v}");
    assert!(
        v["details"].as_str().unwrap().contains("<html>oops</html>"),
        "{v}"
    );
    assert_eq!(v["cniVersion"], "1.0.0");
}

#[test]
fn unparseable_agent_response_is_code_5() {
    let agent = FakeAgent::start(Behaviour::Reply(b"SSH-2.0-nope\r\n\r\n".to_vec()));
    let run = shim(&add_env(&[]), &conf(&agent.socket(), ""));
    let v = run.error(5);
    assert!(v["msg"].as_str().unwrap().contains("unparseable"), "{v}");
}

#[test]
fn agent_hang_up_is_code_5() {
    let agent = FakeAgent::start(Behaviour::HangUp);
    let run = shim(&add_env(&[]), &conf(&agent.socket(), ""));
    let v = run.error(5);
    assert!(
        v["msg"].as_str().unwrap().contains("closed the connection"),
        "{v}"
    );
    agent.request();
}

#[test]
fn deadline_is_code_11() {
    let agent = FakeAgent::start(Behaviour::Silent(Duration::from_secs(6)));
    let run = shim(
        &add_env(&[]),
        &conf(&agent.socket(), r#","timeoutSeconds":1"#),
    );
    let v = run.error(11);
    let msg = v["msg"].as_str().unwrap();
    assert!(msg.contains("within 1s"), "{v}");
    assert!(
        v["details"].as_str().unwrap().contains("timeoutSeconds"),
        "{v}"
    );
    assert!(
        run.took >= Duration::from_millis(900) && run.took < Duration::from_secs(4),
        "took {:?}",
        run.took
    );
    agent.request();
}

#[test]
fn missing_socket_is_try_again_later() {
    let dir = TempDir::new();
    let socket = dir.0.join("absent.sock").display().to_string();
    let run = shim(&add_env(&[]), &conf(&socket, ""));
    let v = run.error(11);
    let msg = v["msg"].as_str().unwrap();
    assert!(
        msg.contains(&socket) && msg.contains("sdn-agent is not running"),
        "{v}"
    );
    assert!(msg.starts_with("try again later"), "{v}");
}

#[test]
fn refused_connection_is_try_again_later() {
    let dir = TempDir::new();
    let path = dir.0.join("stale.sock");
    // A socket file nobody listens on any more: connect gets ECONNREFUSED.
    drop(UnixListener::bind(&path).unwrap());
    let run = shim(&add_env(&[]), &conf(&path.display().to_string(), ""));
    let v = run.error(11);
    assert!(v["details"].as_str().unwrap().contains("refused"), "{v}");
}

#[test]
fn status_with_missing_socket_is_plugin_not_available() {
    let dir = TempDir::new();
    let socket = dir.0.join("absent.sock").display().to_string();
    let stdin = format!(r#"{{"cniVersion":"1.1.0","name":"sdn","socket":"{socket}"}}"#);
    let run = shim(&[("CNI_COMMAND", "STATUS")], &stdin);
    let v = run.error(50);
    assert_eq!(v["cniVersion"], "1.1.0");
    assert!(
        v["msg"].as_str().unwrap().contains("plugin not available"),
        "{v}"
    );
    assert!(v["msg"].as_str().unwrap().contains(&socket), "{v}");
}

#[test]
fn bad_json_is_code_6() {
    for stdin in ["", "{\"cniVersion\":", "not json", "[1,2]"] {
        let run = shim(&add_env(&[]), stdin);
        let v = run.error(6);
        assert_eq!(v["cniVersion"], "1.0.0", "{stdin:?}");
    }
}

#[test]
fn unsupported_version_is_code_1() {
    let run = shim(
        &add_env(&[]),
        r#"{"cniVersion":"0.2.0","name":"sdn","socket":"/nonexistent/s"}"#,
    );
    let v = run.error(1);
    assert!(
        v["msg"]
            .as_str()
            .unwrap()
            .contains("0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"),
        "{v}"
    );
    assert_eq!(v["cniVersion"], "1.0.0");
}

#[test]
fn invalid_config_is_code_7() {
    for (stdin, key) in [
        (r#"{"name":"sdn"}"#, "cniVersion"),
        (r#"{"cniVersion":["1.0.0"],"name":"sdn"}"#, "cniVersion"),
        (r#"{"cniVersion":"0.4.0"}"#, "name"),
        (
            r#"{"cniVersion":"0.4.0","name":"sdn","socket":"run/cni.sock"}"#,
            "socket",
        ),
        (
            r#"{"cniVersion":"0.4.0","name":"sdn","timeoutSeconds":0}"#,
            "timeoutSeconds",
        ),
        (
            r#"{"cniVersion":"0.4.0","name":"sdn","timeoutSeconds":"9"}"#,
            "timeoutSeconds",
        ),
    ] {
        let run = shim(&add_env(&[]), stdin);
        let v = run.error(7);
        assert!(v["details"].as_str().unwrap().contains(key), "{stdin}: {v}");
        let expect = if stdin.contains("0.4.0") {
            "0.4.0"
        } else {
            "1.0.0"
        };
        assert_eq!(v["cniVersion"], expect, "{stdin}");
    }
}

#[test]
fn missing_or_bad_environment_is_code_4() {
    let stdin = r#"{"cniVersion":"0.3.1","name":"sdn","socket":"/nonexistent/s"}"#;
    let cases: [(&[(&str, &str)], &str); 5] = [
        (&[], "CNI_COMMAND"),
        (&[("CNI_COMMAND", "UPDATE")], "UPDATE"),
        (
            &[
                ("CNI_COMMAND", "ADD"),
                ("CNI_CONTAINERID", "c"),
                ("CNI_IFNAME", "eth0"),
            ],
            "CNI_NETNS",
        ),
        (
            &[
                ("CNI_COMMAND", "CHECK"),
                ("CNI_NETNS", "/n"),
                ("CNI_IFNAME", "eth0"),
            ],
            "CNI_CONTAINERID",
        ),
        (
            &[("CNI_COMMAND", "DEL"), ("CNI_CONTAINERID", "c")],
            "CNI_IFNAME",
        ),
    ];
    for (vars, word) in cases {
        let run = shim(vars, stdin);
        let v = run.error(4);
        assert!(v["msg"].as_str().unwrap().contains(word), "{vars:?}: {v}");
    }
    // Once the command is known, errors speak the config's version.
    let run = shim(&[("CNI_COMMAND", "DEL")], stdin);
    assert_eq!(run.error(4)["cniVersion"], "0.3.1");
}
