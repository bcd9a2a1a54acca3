//! The typed values of settings that are more than a number, a path or a name: each parses
//! from the text a flag, a variable or a file gives, and prints back as that text, so an
//! unknown value is an error naming the allowed ones, never a fallback.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

/// One cluster network: a CIDR and how many host bits each node's subnet has (OpenShift's
/// `hostSubnetLength`: 9 gives every node a /23 out of a /14). On the command line
/// `CIDR[,LEN]` (LEN 9 when left out).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterNetworkSetting {
    /// The network, e.g. `10.128.0.0/14`.
    pub cidr: Ipv4Net,
    /// Host bits of a node subnet, e.g. 9 for /23.
    pub host_subnet_length: u8,
}

impl ClusterNetworkSetting {
    /// Prefix length of one node's subnet.
    pub fn node_prefix(&self) -> u8 {
        32 - self.host_subnet_length
    }
}

impl std::str::FromStr for ClusterNetworkSetting {
    type Err = String;
    fn from_str(value: &str) -> Result<Self, String> {
        let (cidr, len) = value.split_once(',').unwrap_or((value, "9"));
        let bad = || "expected CIDR[,hostSubnetLength] (10.128.0.0/14,9)".to_string();
        Ok(ClusterNetworkSetting {
            cidr: cidr.parse().map_err(|_| bad())?,
            host_subnet_length: len.parse().map_err(|_| bad())?,
        })
    }
}

impl std::fmt::Display for ClusterNetworkSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{}", self.cidr, self.host_subnet_length)
    }
}

/// Where the cluster objects (ClusterNetwork, HostSubnet, NetNamespace) come from. Spelled the
/// same in a config file and in the flag: `standalone:<absolute dir>` or `kubernetes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ClusterStateSource {
    /// A directory of YAML/JSON files, watched (standalone mode).
    Standalone(PathBuf),
    /// The Kubernetes API.
    Kubernetes,
}

impl std::fmt::Display for ClusterStateSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClusterStateSource::Standalone(dir) => write!(f, "standalone:{}", dir.display()),
            ClusterStateSource::Kubernetes => f.write_str("kubernetes"),
        }
    }
}

impl std::str::FromStr for ClusterStateSource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "kubernetes" {
            return Ok(ClusterStateSource::Kubernetes);
        }
        match s.strip_prefix("standalone:") {
            Some(dir) if Path::new(dir).is_absolute() => {
                Ok(ClusterStateSource::Standalone(dir.into()))
            }
            _ => Err(format!(
                "expected standalone:<absolute directory> or kubernetes, got {s:?}"
            )),
        }
    }
}

/// Where the OVSDB server listens: `unix:<path>` or `tcp:<host>[:<port>]` (port 6640 when
/// left out), as the OVSDB client reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum OvsdbTarget {
    /// A Unix socket.
    Unix(PathBuf),
    /// A TCP address: `HOST`, `HOST:PORT`, `[V6]` or `[V6]:PORT`.
    Tcp(String),
}

impl std::fmt::Display for OvsdbTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OvsdbTarget::Unix(p) => write!(f, "unix:{}", p.display()),
            OvsdbTarget::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

impl std::str::FromStr for OvsdbTarget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("{why}: expected unix:<path> or tcp:<host>[:<port>]");
        if let Some(p) = s.strip_prefix("unix:") {
            if p.is_empty() {
                return Err(bad("an empty socket path"));
            }
            return Ok(OvsdbTarget::Unix(p.into()));
        }
        let Some(addr) = s.strip_prefix("tcp:") else {
            return Err(bad("neither unix: nor tcp:"));
        };
        if addr.is_empty() {
            return Err(bad("an empty address"));
        }
        if addr.starts_with('[') != addr.contains(']') {
            return Err(bad("unbalanced brackets"));
        }
        let has_port = match addr.rfind(']') {
            Some(close) => addr[close..].contains(':'),
            None => addr.contains(':'),
        };
        if has_port
            && addr
                .rsplit(':')
                .next()
                .unwrap_or_default()
                .parse::<u16>()
                .is_err()
        {
            return Err(bad("an invalid port"));
        }
        Ok(OvsdbTarget::Tcp(addr.to_string()))
    }
}

/// Where an HTTP endpoint listens: `IP:PORT`, or `""` for nowhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Listen {
    /// Not served.
    Off,
    /// Served on this address.
    At(SocketAddr),
}

impl Listen {
    /// The address, when served.
    pub fn addr(self) -> Option<SocketAddr> {
        match self {
            Listen::Off => None,
            Listen::At(a) => Some(a),
        }
    }
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Off => Ok(()),
            Listen::At(a) => write!(f, "{a}"),
        }
    }
}

impl std::str::FromStr for Listen {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Ok(Listen::Off);
        }
        s.parse().map(Listen::At).map_err(|_| {
            "expected IP:PORT (127.0.0.1:9101; 0.0.0.0:9101 to expose it off the node) or \"\" \
             for none"
                .to_string()
        })
    }
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (`tracing`'s default format).
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields` (the message and
    /// the event's fields), `spans` (the sandbox, pod and namespace of a CNI request).
    Json,
}

impl std::fmt::Display for LogFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

impl std::str::FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(format!("expected text or json, got {s:?}")),
        }
    }
}

macro_rules! text_serde {
    ($($t:ty),*) => {$(
        impl From<$t> for String {
            fn from(v: $t) -> String {
                v.to_string()
            }
        }
        impl TryFrom<String> for $t {
            type Error = String;
            fn try_from(s: String) -> Result<Self, String> {
                s.parse()
            }
        }
    )*};
}
text_serde!(ClusterStateSource, OvsdbTarget, Listen);

/// Checks a filter (`info`, `debug`, `agent=debug,ovs=info`...) and returns it parsed.
pub fn parse_filter(filter: &str) -> Result<tracing_subscriber::EnvFilter, String> {
    let filter = filter.trim();
    if filter.is_empty() {
        return Err("a log level is needed: error, warn, info, debug, trace, or directives such as agent=debug,ovs=info".into());
    }
    // A bare word is a target for tracing ("loud" would enable target `loud` at trace): here
    // each directive must say its level, so a misspelt level is an error, not a silence.
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    for d in filter.split(',').map(str::trim) {
        let level = d.rsplit_once('=').map_or(d, |(_, l)| l);
        if !LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "{filter:?}: {d:?} names no level; use error, warn, info, debug, trace, or directives such as agent=debug,ovs=info"
            ));
        }
    }
    tracing_subscriber::EnvFilter::builder()
        .with_regex(false)
        .parse(filter)
        .map_err(|e| {
            format!("{filter:?} is not a log level or filter ({e}); use error, warn, info, debug, trace, or directives such as agent=debug,ovs=info")
        })
}
