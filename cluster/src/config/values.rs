//! The typed values of settings that are more than a number, a path or a name: each parses
//! from the text a flag, a variable or a file gives, and prints back as that text, so an
//! unknown value is an error naming the allowed ones, never a fallback.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};

/// One cluster network of either family: a CIDR and how many host bits each node's subnet has
/// (OpenShift's `hostSubnetLength`: 9 gives every node a /23 out of a /14; 64 a /64 out of an
/// IPv6 /48). On the command line `CIDR[,LEN]` (LEN 9 for IPv4 and 64 for IPv6 when left out).
/// A dual-stack cluster has IPv4 networks and one IPv6 network; [`ClusterNetworkSetting::v4`]
/// and [`ClusterNetworkSetting::v6`] give an entry typed by its family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterNetworkSetting {
    /// The network, e.g. `10.128.0.0/14` or `fd01::/48`.
    pub cidr: IpNet,
    /// Host bits of a node subnet, e.g. 9 for /23, 64 for an IPv6 /64.
    pub host_subnet_length: u8,
}

impl ClusterNetworkSetting {
    /// Prefix length of one node's subnet (0 when the host bits do not fit the family, which
    /// validation refuses).
    pub fn node_prefix(&self) -> u8 {
        self.cidr
            .max_prefix_len()
            .saturating_sub(self.host_subnet_length)
    }

    /// The entry when it is an IPv4 network.
    pub fn v4(&self) -> Option<ClusterNetworkEntry<Ipv4Net>> {
        match self.cidr {
            IpNet::V4(cidr) => Some(ClusterNetworkEntry {
                cidr,
                host_subnet_length: self.host_subnet_length,
            }),
            IpNet::V6(_) => None,
        }
    }

    /// The entry when it is an IPv6 network.
    pub fn v6(&self) -> Option<ClusterNetworkEntry<Ipv6Net>> {
        match self.cidr {
            IpNet::V6(cidr) => Some(ClusterNetworkEntry {
                cidr,
                host_subnet_length: self.host_subnet_length,
            }),
            IpNet::V4(_) => None,
        }
    }
}

impl std::str::FromStr for ClusterNetworkSetting {
    type Err = String;
    fn from_str(value: &str) -> Result<Self, String> {
        let bad =
            || "expected CIDR[,hostSubnetLength] (10.128.0.0/14,9 or fd01::/48,64)".to_string();
        let (cidr, len) = match value.split_once(',') {
            Some((cidr, len)) => (cidr.parse::<IpNet>().map_err(|_| bad())?, Some(len)),
            None => (value.parse::<IpNet>().map_err(|_| bad())?, None),
        };
        let default = if cidr.max_prefix_len() == 32 { 9 } else { 64 };
        Ok(ClusterNetworkSetting {
            cidr,
            host_subnet_length: len.map_or(Ok(default), str::parse).map_err(|_| bad())?,
        })
    }
}

impl std::fmt::Display for ClusterNetworkSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{}", self.cidr, self.host_subnet_length)
    }
}

/// One cluster network of one family (`Ipv4Net` or `Ipv6Net`): what the subnet allocator, the
/// ClusterNetwork object and the flows read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterNetworkEntry<N> {
    /// The network.
    pub cidr: N,
    /// Host bits of a node subnet.
    pub host_subnet_length: u8,
}

impl ClusterNetworkEntry<Ipv4Net> {
    /// Prefix length of one node's subnet.
    pub fn node_prefix(&self) -> u8 {
        32u8.saturating_sub(self.host_subnet_length)
    }
}

impl ClusterNetworkEntry<Ipv6Net> {
    /// Prefix length of one node's subnet.
    pub fn node_prefix(&self) -> u8 {
        128u8.saturating_sub(self.host_subnet_length)
    }
}

/// The service network: one CIDR per family, e.g. `172.30.0.0/16` or, dual stack,
/// `172.30.0.0/16,fd02::/112`. In a file a string (comma-separated) or a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ServiceNetworksText", into = "String")]
pub struct ServiceNetworks(Vec<IpNet>);

/// How a file may spell the service network.
#[derive(Deserialize)]
#[serde(untagged)]
enum ServiceNetworksText {
    One(String),
    Many(Vec<String>),
}

impl TryFrom<ServiceNetworksText> for ServiceNetworks {
    type Error = String;
    fn try_from(t: ServiceNetworksText) -> Result<Self, String> {
        match t {
            ServiceNetworksText::One(s) => s.parse(),
            ServiceNetworksText::Many(v) => v.join(",").parse(),
        }
    }
}

impl ServiceNetworks {
    /// The given networks, as they are (validation checks them).
    pub fn new(nets: Vec<IpNet>) -> Self {
        ServiceNetworks(nets)
    }

    /// Every network, in the order given.
    pub fn all(&self) -> &[IpNet] {
        &self.0
    }

    /// The IPv4 service network, if any.
    pub fn v4(&self) -> Option<Ipv4Net> {
        self.0.iter().find_map(|n| match n {
            IpNet::V4(n) => Some(*n),
            IpNet::V6(_) => None,
        })
    }

    /// The IPv6 service network, if any.
    pub fn v6(&self) -> Option<Ipv6Net> {
        self.0.iter().find_map(|n| match n {
            IpNet::V6(n) => Some(*n),
            IpNet::V4(_) => None,
        })
    }
}

impl std::str::FromStr for ServiceNetworks {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        s.split(',')
            .map(|n| {
                n.trim().parse::<IpNet>().map_err(|_| {
                    format!(
                        "{n:?} is not a CIDR: expected CIDR[,CIDR], one per family                          (172.30.0.0/16 or 172.30.0.0/16,fd02::/112)"
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(ServiceNetworks)
    }
}

impl std::fmt::Display for ServiceNetworks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&text.join(","))
    }
}

impl From<ServiceNetworks> for String {
    fn from(s: ServiceNetworks) -> String {
        s.to_string()
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

/// How audit lines are written to the audit log file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuditFormat {
    /// One JSON object per line.
    #[default]
    Json,
    /// RFC 5424 syslog lines (`<PRI>1 TIMESTAMP HOST sdn-agent - audit - MESSAGE`).
    Syslog,
}

impl std::fmt::Display for AuditFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AuditFormat::Json => "json",
            AuditFormat::Syslog => "syslog",
        })
    }
}

impl std::str::FromStr for AuditFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "json" => Ok(AuditFormat::Json),
            "syslog" => Ok(AuditFormat::Syslog),
            _ => Err(format!("expected json or syslog, got {s:?}")),
        }
    }
}

/// Where audit lines go besides the file: a syslog daemon's socket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum SyslogTarget {
    /// A Unix datagram socket (`unix:/dev/log`).
    Unix(PathBuf),
    /// A UDP address (`udp:192.0.2.10:514`).
    Udp(std::net::SocketAddr),
}

impl std::fmt::Display for SyslogTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SyslogTarget::Unix(p) => write!(f, "unix:{}", p.display()),
            SyslogTarget::Udp(a) => write!(f, "udp:{a}"),
        }
    }
}

impl std::str::FromStr for SyslogTarget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let want = "expected unix:/dev/log or udp:IP:PORT";
        if let Some(p) = s.strip_prefix("unix:") {
            if !p.starts_with('/') {
                return Err(format!(
                    "{s:?}: the socket must be an absolute path; {want}"
                ));
            }
            return Ok(SyslogTarget::Unix(p.into()));
        }
        if let Some(a) = s.strip_prefix("udp:") {
            return a
                .parse()
                .map(SyslogTarget::Udp)
                .map_err(|e| format!("{s:?}: {e}; {want}"));
        }
        Err(format!("{s:?}: {want}"))
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
text_serde!(ClusterStateSource, OvsdbTarget, Listen, SyslogTarget);

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
