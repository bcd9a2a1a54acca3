//! A client of Open vSwitch's unixctl control sockets (what `ovs-appctl` talks to): one
//! JSON-RPC 1.0 request per call over the daemon's `<rundir>/<daemon>.<pid>.ctl` socket.
//!
//! The agent uses it for `ofproto/trace`, which has no OpenFlow equivalent. Speaking the protocol
//! natively (a request `{"method", "params": [strings], "id"}`, a reply `{"result", "error",
//! "id"}`) keeps the agent free of `ovs-appctl` and its exec per call, and every call is bounded
//! by a timeout.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// A failed unixctl call.
#[derive(Debug, thiserror::Error)]
pub enum UnixctlError {
    /// The daemon's pid file or control socket cannot be found.
    #[error("cannot find the control socket of {daemon} in {rundir}: {why}")]
    NotFound {
        /// The daemon (`ovs-vswitchd`).
        daemon: String,
        /// Where it was looked for.
        rundir: String,
        /// Why.
        why: String,
    },
    /// Connecting, writing or reading failed.
    #[error("{socket}: {source}")]
    Io {
        /// The socket.
        socket: String,
        /// The cause.
        source: std::io::Error,
    },
    /// No complete reply within the timeout.
    #[error("{socket}: no reply to {method} within {secs} s")]
    Timeout {
        /// The socket.
        socket: String,
        /// The command.
        method: String,
        /// The timeout.
        secs: u64,
    },
    /// The reply is not a JSON-RPC reply.
    #[error("{socket}: bad reply to {method}: {why}")]
    BadReply {
        /// The socket.
        socket: String,
        /// The command.
        method: String,
        /// What is wrong.
        why: String,
    },
    /// The daemon answered with an error (a bad argument, an unknown command).
    #[error("{0}")]
    Command(String),
}

/// The control socket of `daemon` (`ovs-vswitchd`) in `rundir`: `<rundir>/<daemon>.<pid>.ctl`,
/// the pid read from `<rundir>/<daemon>.pid`.
pub fn control_socket(rundir: &Path, daemon: &str) -> Result<PathBuf, UnixctlError> {
    let not_found = |why: String| UnixctlError::NotFound {
        daemon: daemon.to_string(),
        rundir: rundir.display().to_string(),
        why,
    };
    let pidfile = rundir.join(format!("{daemon}.pid"));
    let pid = std::fs::read_to_string(&pidfile)
        .map_err(|e| not_found(format!("{}: {e}", pidfile.display())))?;
    let pid: u32 = pid
        .trim()
        .parse()
        .map_err(|_| not_found(format!("{} holds no pid", pidfile.display())))?;
    let ctl = rundir.join(format!("{daemon}.{pid}.ctl"));
    if !ctl.exists() {
        return Err(not_found(format!(
            "{} does not exist (is {daemon} {pid} running?)",
            ctl.display()
        )));
    }
    Ok(ctl)
}

/// Runs `method` with `params` on the unixctl socket `socket` and returns its text result.
pub async fn call(
    socket: &Path,
    method: &str,
    params: &[&str],
    timeout: Duration,
) -> Result<String, UnixctlError> {
    let name = socket.display().to_string();
    let io = |source| UnixctlError::Io {
        socket: name.clone(),
        source,
    };
    let work = async {
        let mut stream = UnixStream::connect(socket).await.map_err(io)?;
        let request = json!({ "method": method, "params": params, "id": 0 });
        stream
            .write_all(request.to_string().as_bytes())
            .await
            .map_err(io)?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 64 * 1024];
        loop {
            let n = stream.read(&mut chunk).await.map_err(io)?;
            if n == 0 {
                return Err(UnixctlError::BadReply {
                    socket: name.clone(),
                    method: method.to_string(),
                    why: "the connection closed before a complete reply".into(),
                });
            }
            buf.extend_from_slice(&chunk[..n]);
            let mut values = serde_json::Deserializer::from_slice(&buf).into_iter::<Value>();
            match values.next() {
                Some(Ok(v)) => return Ok(v),
                Some(Err(e)) if e.is_eof() => continue,
                Some(Err(e)) => {
                    return Err(UnixctlError::BadReply {
                        socket: name.clone(),
                        method: method.to_string(),
                        why: e.to_string(),
                    })
                }
                None => continue,
            }
        }
    };
    let reply =
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| UnixctlError::Timeout {
                socket: name.clone(),
                method: method.to_string(),
                secs: timeout.as_secs(),
            })??;
    match (&reply["error"], &reply["result"]) {
        (Value::Null, Value::String(s)) => Ok(s.clone()),
        (Value::Null, Value::Null) => Ok(String::new()),
        (Value::String(e), _) => Err(UnixctlError::Command(e.trim_end().to_string())),
        (e, r) => Err(UnixctlError::BadReply {
            socket: name,
            method: method.to_string(),
            why: format!("error {e}, result {r}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn speaks_json_rpc_and_reports_errors() {
        let dir = std::env::temp_dir().join(format!("unixctl-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("fake.1.ctl");
        let _ = std::fs::remove_file(&sock);
        let listener = tokio::net::UnixListener::bind(&sock).unwrap();
        tokio::spawn(async move {
            for reply in [
                r#"{"id":0,"result":"Flow: ip\n","error":null}"#,
                r#"{"id":0,"result":null,"error":"unknown bridge\n"}"#,
            ] {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap();
                let req: Value = serde_json::from_slice(&buf[..n]).unwrap();
                assert_eq!(req["method"], "ofproto/trace");
                assert_eq!(req["params"], json!(["br0", "ip"]));
                // Split in two writes: the client reads until the value is complete.
                let (a, b) = reply.split_at(10);
                s.write_all(a.as_bytes()).await.unwrap();
                tokio::time::sleep(Duration::from_millis(10)).await;
                s.write_all(b.as_bytes()).await.unwrap();
            }
        });
        let t = Duration::from_secs(2);
        let out = call(&sock, "ofproto/trace", &["br0", "ip"], t)
            .await
            .unwrap();
        assert_eq!(out, "Flow: ip\n");
        let e = call(&sock, "ofproto/trace", &["br0", "ip"], t)
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "unknown bridge");
        std::fs::write(dir.join("ovs-vswitchd.pid"), "1\n").unwrap();
        let e = control_socket(&dir, "ovs-vswitchd")
            .unwrap_err()
            .to_string();
        assert!(e.contains("ovs-vswitchd.1.ctl does not exist"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
