//! Where and how to connect: the target (`unix:PATH`, `tcp:IP:PORT`) and the timeouts, echo
//! interval and limits of a connection.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::*;

/// Timeouts and keepalive of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OfConfig {
    /// Bound on connecting: socket, hello exchange and features request together.
    pub connect_timeout: Duration,
    /// Bound on every call (a whole batch or bundle counts as one call).
    pub request_timeout: Duration,
    /// How long the connection may be silent before we send an echo request; `None` disables
    /// the keepalive.
    pub echo_interval: Option<Duration>,
    /// How long an echo request may go unanswered before the connection is declared dead.
    pub echo_timeout: Duration,
}

impl Default for OfConfig {
    fn default() -> Self {
        OfConfig {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            echo_interval: Some(Duration::from_secs(10)),
            echo_timeout: Duration::from_secs(15),
        }
    }
}

/// Where the switch listens, in Open vSwitch's spelling.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Target {
    /// `unix:PATH`, or a plain path.
    Unix(PathBuf),
    /// `tcp:HOST:PORT` (an IPv6 host in brackets).
    Tcp {
        /// Host name or address.
        host: String,
        /// Port.
        port: u16,
    },
}

impl Target {
    /// Parses `unix:PATH`, `tcp:HOST:PORT` or a plain path (one that does not start with a
    /// `word:` prefix).
    pub fn parse(s: &str) -> Result<Target, OfError> {
        let bad = |reason: &str| OfError::BadTarget {
            target: s.to_string(),
            reason: reason.into(),
        };
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(bad("empty socket path"));
            }
            return Ok(Target::Unix(PathBuf::from(path)));
        }
        if let Some(rest) = s.strip_prefix("tcp:") {
            let (host, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| bad("expected tcp:HOST:PORT"))?;
            let port: u16 = port.parse().map_err(|_| bad("invalid port"))?;
            let host = host
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(host);
            if host.is_empty() {
                return Err(bad("empty host"));
            }
            return Ok(Target::Tcp {
                host: host.to_string(),
                port,
            });
        }
        if let Some((method, _)) = s.split_once(':') {
            if !method.is_empty() && method.chars().all(|c| c.is_ascii_alphanumeric()) {
                return Err(bad(
                    "unsupported connection method (use unix:PATH or tcp:HOST:PORT)",
                ));
            }
        }
        if s.is_empty() {
            return Err(bad("empty target"));
        }
        Ok(Target::Unix(PathBuf::from(s)))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Unix(p) => write!(f, "unix:{}", p.display()),
            Target::Tcp { host, port } if host.contains(':') => write!(f, "tcp:[{host}]:{port}"),
            Target::Tcp { host, port } => write!(f, "tcp:{host}:{port}"),
        }
    }
}
