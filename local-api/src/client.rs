//! A client of the local API (what `sdnctl` uses): one HTTP/1.1 request per call over the
//! root-only Unix socket, with bounded waits, and errors that say what to do.

use std::path::Path;
use std::time::Duration;

use hyper::body::Bytes;
pub use hyper::{Method, StatusCode};
use serde_json::Value;

/// A client of the local API (what `sdnctl` uses).
#[derive(Debug, Clone)]
pub struct Client {
    socket: std::path::PathBuf,
}

/// A failed API call, with what to do.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nobody listens on the socket.
    #[error("cannot reach the agent at {socket}: {why}; is sdn-agent running on this node (and is this its apiSocket)?")]
    Unreachable {
        /// The socket.
        socket: String,
        /// Why.
        why: String,
    },
    /// The agent answered with an error.
    #[error("{0}")]
    Agent(String),
}

impl Client {
    /// A client of the API on `socket`.
    pub fn new(socket: &Path) -> Client {
        Client {
            socket: socket.to_path_buf(),
        }
    }

    /// Sends one request and returns the status and body.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: &str,
    ) -> Result<(StatusCode, String), ClientError> {
        use http_body_util::{BodyExt, Full};
        let unreachable = |why: String| ClientError::Unreachable {
            socket: self.socket.display().to_string(),
            why,
        };
        let stream = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::net::UnixStream::connect(&self.socket),
        )
        .await
        .map_err(|_| unreachable("no answer within 5 s".into()))?
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                ClientError::Agent(format!(
                    "{}: permission denied: the agent's local API is root only; run sdnctl as root",
                    self.socket.display()
                ))
            } else {
                unreachable(e.to_string())
            }
        })?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| unreachable(e.to_string()))?;
        tokio::spawn(conn);
        let req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, "sdn-agent")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| ClientError::Agent(e.to_string()))?;
        let resp = tokio::time::timeout(Duration::from_secs(60), sender.send_request(req))
            .await
            .map_err(|_| ClientError::Agent("the agent did not answer within 60 s".into()))?
            .map_err(|e| unreachable(e.to_string()))?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| ClientError::Agent(format!("reading the answer: {e}")))?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// `GET path` as JSON; an error status becomes the agent's error message.
    pub async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<T, ClientError> {
        let (status, body) = self.call(Method::GET, path, "").await?;
        decode(status, &body)
    }

    /// `POST path` with `body`, as JSON.
    pub async fn post_json<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &str,
    ) -> Result<T, ClientError> {
        let (status, text) = self.call(Method::POST, path, body).await?;
        decode(status, &text)
    }

    /// `PUT path` with `body`, as JSON.
    pub async fn put_json<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &str,
    ) -> Result<T, ClientError> {
        let (status, text) = self.call(Method::PUT, path, body).await?;
        decode(status, &text)
    }
}

fn decode<T: serde::de::DeserializeOwned>(
    status: StatusCode,
    body: &str,
) -> Result<T, ClientError> {
    if !status.is_success() {
        let msg = serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| v["error"].as_str().map(String::from))
            .unwrap_or_else(|| format!("{status}: {}", body.trim()));
        return Err(ClientError::Agent(msg));
    }
    serde_json::from_str(body).map_err(|e| ClientError::Agent(format!("the agent's answer is not what this sdnctl expects ({e}); are sdnctl and sdn-agent the same version?")))
}
