//! Forwarding one request to `sdn-agent` over its Unix socket, within the config's deadline.
//!
//! The exchange (connect, write, read) runs on a worker thread while the main thread waits for
//! it at most `timeoutSeconds`: `UnixStream::connect` has no timeout and blocks when the agent's
//! listen backlog is full, so socket timeouts alone would not bound the wait. The socket still
//! gets read and write timeouts so that the worker ends by itself too. Every outcome becomes
//! either the agent's answer or a [`CniError`] with the spec's code:
//!
//! - socket missing or connection refused: 11 "try again later" (STATUS: 50 "plugin not
//!   available"), naming the socket and saying that sdn-agent is not running;
//! - deadline exceeded: 11, naming the deadline and the `timeoutSeconds` key;
//! - the agent hung up, reset the connection or sent something that is not HTTP, or a body
//!   that is not what the protocol says: 5.
//!
//! Limits: a request that hits the deadline may still complete in the agent; the runtime retries
//! (ADD after a timeout is followed by DEL, and both are idempotent in the agent).

use std::io;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::config::NetConf;
use crate::env::Command;
use crate::error::{CniError, IO_FAILURE, PLUGIN_NOT_AVAILABLE, TRY_AGAIN_LATER};
use crate::http::{self, HttpError, Response};

/// The agent's answer to print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    /// Whether the agent succeeded (HTTP 200): exit 0, else exit 1.
    pub ok: bool,
    /// The body to print: the CNI result (maybe empty) or the agent's CNI error object.
    pub body: String,
}

/// How much of a bad body to quote in an error's details.
const QUOTE_MAX: usize = 512;

/// Sends `body` to the agent named by `conf` and interprets its response.
pub(crate) fn forward(conf: &NetConf, command: Command, body: String) -> Result<Answer, CniError> {
    let timeout = conf.timeout;
    let body = Arc::new(body);
    let (tx, rx) = mpsc::channel();
    let (socket, request) = (conf.socket.clone(), Arc::clone(&body));
    let worker = thread::Builder::new()
        .name("sdn-cni-agent".into())
        .stack_size(256 << 10)
        .spawn(move || {
            let _ = tx.send(exchange(&socket, &request, timeout));
        });
    let result = match worker {
        Ok(_) => match rx.recv_timeout(timeout) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => Err(Failure::Deadline),
            Err(RecvTimeoutError::Disconnected) => Err(Failure::Worker),
        },
        // No thread: run inline, still bounded by the socket timeouts (all but connect).
        Err(_) => exchange(&conf.socket, &body, timeout),
    };
    match result {
        Ok(resp) => interpret(command, resp),
        Err(f) => Err(failure_error(conf, command, f)),
    }
}

/// Why the exchange failed.
#[derive(Debug)]
enum Failure {
    Connect(io::Error),
    Write(io::Error),
    Read(HttpError),
    Deadline,
    Worker,
}

/// Connects, writes the request and reads the response, with socket timeouts.
fn exchange(socket: &Path, body: &str, timeout: Duration) -> Result<Response, Failure> {
    let started = Instant::now();
    let mut stream = UnixStream::connect(socket).map_err(Failure::Connect)?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(Failure::Write)?;
    http::write_request(&mut stream, "/cni", body).map_err(|e| {
        if http::is_timeout(&e) {
            Failure::Deadline
        } else {
            Failure::Write(e)
        }
    })?;
    let left = timeout.saturating_sub(started.elapsed());
    if left.is_zero() {
        return Err(Failure::Deadline);
    }
    stream
        .set_read_timeout(Some(left))
        .map_err(|e| Failure::Read(HttpError::Io(e)))?;
    http::read_response(&mut stream).map_err(|e| {
        if e.is_timeout() {
            Failure::Deadline
        } else {
            Failure::Read(e)
        }
    })
}

/// Turns an exchange failure into the CNI error the runtime understands.
fn failure_error(conf: &NetConf, command: Command, f: Failure) -> CniError {
    let socket = conf.socket.display();
    match f {
        Failure::Connect(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
            ) =>
        {
            let details = format!(
                "cannot connect to {socket}: {e}; start sdn-agent, or set `socket` in the \
                 network config to the socket it listens on"
            );
            if command == Command::Status {
                CniError::new(
                    PLUGIN_NOT_AVAILABLE,
                    format!(
                        "plugin not available: sdn-agent is not running (no agent on {socket})"
                    ),
                    details,
                )
            } else {
                CniError::new(
                    TRY_AGAIN_LATER,
                    format!("try again later: sdn-agent is not running (no agent on {socket})"),
                    details,
                )
            }
        }
        Failure::Connect(e) => {
            let hint = if e.kind() == io::ErrorKind::PermissionDenied {
                " (sdn-cni must run as root: the agent's socket is root-only)"
            } else {
                ""
            };
            CniError::new(
                IO_FAILURE,
                format!("cannot connect to sdn-agent on {socket}"),
                format!("{e}{hint}"),
            )
        }
        Failure::Write(e) => CniError::new(
            IO_FAILURE,
            format!("sdn-agent on {socket} closed the connection"),
            format!("sending the {} request failed: {e}", command.as_str()),
        ),
        Failure::Read(e @ (HttpError::Closed(_) | HttpError::Io(_))) => CniError::new(
            IO_FAILURE,
            format!("sdn-agent on {socket} closed the connection without an answer"),
            format!(
                "reading the answer to {} failed: {e}; see the sdn-agent log",
                command.as_str()
            ),
        ),
        Failure::Read(e @ HttpError::Malformed(_)) => CniError::new(
            IO_FAILURE,
            format!("sdn-agent on {socket} sent an unparseable response"),
            format!("answer to {}: {e}", command.as_str()),
        ),
        Failure::Deadline => {
            let secs = conf.timeout.as_secs_f64();
            CniError::new(
                TRY_AGAIN_LATER,
                format!(
                    "try again later: sdn-agent did not answer {} within {secs}s",
                    command.as_str()
                ),
                format!(
                    "the deadline of the request to {socket} passed; the agent may still finish \
                     it; raise `timeoutSeconds` (now {secs}) in the network config if the agent \
                     is just slow"
                ),
            )
        }
        Failure::Worker => CniError::new(
            IO_FAILURE,
            "sdn-cni could not run the request",
            format!("the worker thread for the request to {socket} died"),
        ),
    }
}

/// Checks the response against the protocol: 200 with a JSON object (or an empty body, except
/// for ADD), or an error status with a CNI error object. Anything else is a code-5 error that
/// quotes what the agent sent.
fn interpret(command: Command, resp: Response) -> Result<Answer, CniError> {
    let status = resp.status;
    let text = String::from_utf8(resp.body)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    let trimmed = text.trim();
    if status == 200 {
        if trimmed.is_empty() && command != Command::Add {
            return Ok(Answer {
                ok: true,
                body: String::new(),
            });
        }
        return match serde_json::from_str::<Value>(trimmed) {
            Ok(Value::Object(_)) => Ok(Answer {
                ok: true,
                body: trimmed.to_owned(),
            }),
            _ => Err(CniError::new(
                IO_FAILURE,
                format!(
                    "sdn-agent answered {} with a result that is not a JSON object",
                    command.as_str()
                ),
                format!("body: {}", quote(trimmed)),
            )),
        };
    }
    match serde_json::from_str::<Value>(trimmed) {
        Ok(Value::Object(obj)) if obj.get("code").is_some_and(Value::is_u64) => Ok(Answer {
            ok: false,
            body: trimmed.to_owned(),
        }),
        _ => Err(CniError::new(
            IO_FAILURE,
            format!(
                "sdn-agent failed {} with HTTP {status} and no CNI error object",
                command.as_str()
            ),
            format!("body: {}", quote(trimmed)),
        )),
    }
}

/// At most [`QUOTE_MAX`] bytes of `s` (on a char boundary), marked when cut.
fn quote(s: &str) -> String {
    if s.is_empty() {
        return "(empty)".into();
    }
    if s.len() <= QUOTE_MAX {
        return format!("{s:?}");
    }
    let mut end = QUOTE_MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}... ({} bytes)", &s[..end], s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(status: u16, body: &str) -> Response {
        Response {
            status,
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn success_bodies() {
        let a = interpret(Command::Add, resp(200, "{\"cniVersion\":\"1.0.0\"}\n")).unwrap();
        assert!(a.ok);
        assert_eq!(a.body, "{\"cniVersion\":\"1.0.0\"}");
        let a = interpret(Command::Del, resp(200, "")).unwrap();
        assert!(a.ok && a.body.is_empty());
        assert_eq!(interpret(Command::Add, resp(200, "")).unwrap_err().code, 5);
        assert_eq!(
            interpret(Command::Check, resp(200, "ok")).unwrap_err().code,
            5
        );
    }

    #[test]
    fn agent_errors_pass_through_and_garbage_is_wrapped() {
        let body = "{\"cniVersion\":\"0.4.0\",\"code\":7,\"msg\":\"m\",\"details\":\"d\"}";
        let a = interpret(Command::Add, resp(400, body)).unwrap();
        assert!(!a.ok);
        assert_eq!(a.body, body);
        for bad in [
            "<html>502 bad gateway</html>",
            "",
            "{\"msg\":\"no code\"}",
            "[1]",
        ] {
            let e = interpret(Command::Add, resp(502, bad)).unwrap_err();
            assert_eq!(e.code, 5, "{bad}");
            assert!(e.msg.contains("HTTP 502"), "{e}");
        }
        let e = interpret(Command::Add, resp(500, &"x".repeat(2000))).unwrap_err();
        assert!(e.details.len() < 600, "{}", e.details.len());
    }

    #[test]
    fn quote_cuts_on_char_boundary() {
        let s = "é".repeat(400);
        let q = quote(&s);
        assert!(q.ends_with("(800 bytes)"), "{q}");
    }
}
