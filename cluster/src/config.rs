//! The agent's configuration: a YAML or JSON file (`--config`), then command-line flags on top
//! (a flag always wins), then validation of the whole.
//!
//! Every setting has a default that works for a standalone node on the system's Open vSwitch, so
//! `sdn-agent` with no arguments runs. Validation checks every value and the relations between
//! them (the cluster networks do not overlap the service network, the host subnet length fits, the
//! paths are absolute...) and its errors name the setting, the value and what is expected: the
//! agent refuses to start on a bad configuration instead of half-configuring a node.
//!
//! Why one piece: every setting's field, default, flag, environment variable and check are one
//! list; a setting split from its check would be read without it.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use flows::Mode;
use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

/// One cluster network: a CIDR and how many host bits each node's subnet has (OpenShift's
/// `hostSubnetLength`: 9 gives every node a /23 out of a /14).
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

/// Where the cluster objects (ClusterNetwork, HostSubnet, NetNamespace) come from. Spelled the
/// same in a config file and in the flag: `standalone:<absolute dir>` or `kubernetes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ClusterStateSource {
    /// A directory of YAML/JSON files, watched (standalone mode).
    Standalone(PathBuf),
    /// The Kubernetes API (a later issue).
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

impl From<ClusterStateSource> for String {
    fn from(s: ClusterStateSource) -> String {
        s.to_string()
    }
}

impl TryFrom<String> for ClusterStateSource {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse().map_err(|e: anyhow::Error| e.to_string())
    }
}

impl std::str::FromStr for ClusterStateSource {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        if s == "kubernetes" {
            return Ok(ClusterStateSource::Kubernetes);
        }
        match s.strip_prefix("standalone:") {
            Some(dir) if Path::new(dir).is_absolute() => {
                Ok(ClusterStateSource::Standalone(dir.into()))
            }
            _ => bail!("expected standalone:<absolute directory> or kubernetes, got {s:?}"),
        }
    }
}

/// Where the agent serves metrics and health by default: openshift-sdn's metrics port, on the
/// loopback address.
pub const DEFAULT_METRICS_ADDRESS: &str = "127.0.0.1:9101";

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Config {
    /// This node's name (its HostSubnet's `host`); default: the kernel host name.
    pub node_name: String,
    /// The node's underlay address; default: taken from this node's HostSubnet, else 127.0.0.1.
    #[serde(rename = "nodeIP")]
    pub node_ip: Option<Ipv4Addr>,
    /// `subnet` or `multitenant`.
    pub mode: String,
    /// Cluster networks.
    pub cluster_networks: Vec<ClusterNetworkSetting>,
    /// The service network.
    pub service_network: Ipv4Net,
    /// VXLAN UDP port.
    pub vxlan_port: u16,
    /// Overlay MTU (tun0 and pod interfaces).
    pub mtu: u32,
    /// OVSDB target, `unix:<path>` or `tcp:<ip>:<port>`.
    pub ovsdb: String,
    /// The bridge's OpenFlow management socket.
    pub bridge_mgmt: PathBuf,
    /// The CNI server's socket (the shim's `socket`).
    pub cni_socket: PathBuf,
    /// host-local compatible lease directory (`dataDir`); leases go to `<dir>/<cniNetworkName>`.
    pub ipam_dir: PathBuf,
    /// Where the agent writes its CNI network config when ready.
    pub cni_conf_dir: PathBuf,
    /// Name of the CNI network the agent writes (and of its lease directory).
    pub cni_network_name: String,
    /// `system` (kernel datapath) or `netdev` (userspace).
    pub datapath_type: String,
    /// Turn off tx checksum offload on pod interfaces (needed with `netdev`); default: on for
    /// `netdev`, off for `system`.
    pub pod_tx_checksum_off: Option<bool>,
    /// Cluster state source.
    pub cluster_state: ClusterStateSource,
    /// Deadline of one CNI request, in seconds.
    pub request_timeout_seconds: u64,
    /// How long a pod ADD waits for its namespace's NetNamespace (multitenant), in seconds.
    pub netnamespace_wait_seconds: u64,
    /// How many OVS ports (with their veth) the agent keeps ready for the next ADDs, so an ADD
    /// makes no port transaction and never waits for ovs-vswitchd (0: no pool); a VNID with a
    /// burst of ADDs also gets half as many warm ports (see `pod::pool`). 64: at 1000 pods,
    /// 32 left one ADD in nine without a warm port (p90 400 ms), 64 none (p90 38 ms).
    pub port_pool_size: usize,
    /// Kubernetes mode: the kubeconfig file; default: `$KUBECONFIG`, `~/.kube/config`, then the
    /// in-cluster service account.
    pub kubeconfig: Option<PathBuf>,
    /// Kubernetes mode: how long start-up waits for this node's HostSubnet (the controller
    /// creates it), in seconds.
    pub host_subnet_wait_seconds: u64,
    /// Controller: namespaces that get VNID 0 (global) besides `default`.
    pub global_namespaces: Vec<String>,
    /// Controller: the namespace of its leader-election Lease.
    pub controller_namespace: String,
    /// Where `/metrics`, `/livez` and `/readyz` are served over HTTP, `IP:PORT`; empty: not
    /// served. Local by default: exposing it off the node is the operator's choice.
    pub metrics_address: String,
    /// The local API's socket (`sdnctl` asks the agent there; root only); default: `api.sock`
    /// next to the CNI socket.
    pub api_socket: Option<PathBuf>,
    /// `text` or `json` (one object per line).
    pub log_format: LogFormat,
    /// The log level or filter at start (`info`, `debug`, `agent=debug,ovs=info`); `RUST_LOG`
    /// wins when set; `sdnctl log-level` changes it at run time.
    pub log_level: String,
    /// DNS servers (`IP` or `IP:PORT`) for the `dnsName` rules of egress firewalls; default:
    /// the node's `/etc/resolv.conf`.
    #[serde(rename = "egressDNSServers")]
    pub egress_dns_servers: Vec<String>,
    /// Take over a node that openshift-sdn ran even when its state is not what openshift-sdn
    /// leaves (an unknown rule version in table 253, another plugin, ports without records,
    /// pods without VNID rows): pods whose tenant cannot be read are isolated. Off by default:
    /// such a node is refused with what does not match.
    pub force_takeover: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            node_name: String::new(),
            node_ip: None,
            mode: "multitenant".into(),
            cluster_networks: vec![ClusterNetworkSetting {
                cidr: "10.128.0.0/14".parse().expect("constant"),
                host_subnet_length: 9,
            }],
            service_network: "172.30.0.0/16".parse().expect("constant"),
            vxlan_port: 4789,
            mtu: 1450,
            ovsdb: "unix:/run/openvswitch/db.sock".into(),
            bridge_mgmt: "/run/openvswitch/br0.mgmt".into(),
            cni_socket: cni_proto::DEFAULT_SOCKET.into(),
            ipam_dir: "/var/lib/cni/networks".into(),
            cni_conf_dir: "/etc/cni/net.d".into(),
            cni_network_name: "sdn".into(),
            datapath_type: "system".into(),
            pod_tx_checksum_off: None,
            cluster_state: ClusterStateSource::Standalone("/var/lib/sdn/state".into()),
            request_timeout_seconds: 120,
            netnamespace_wait_seconds: 5,
            port_pool_size: 64,
            kubeconfig: None,
            host_subnet_wait_seconds: 120,
            global_namespaces: Vec::new(),
            controller_namespace: "sdn".into(),
            metrics_address: DEFAULT_METRICS_ADDRESS.into(),
            api_socket: None,
            log_format: LogFormat::Text,
            log_level: "info".into(),
            egress_dns_servers: Vec::new(),
            force_takeover: false,
        }
    }
}

/// The agent's command-line flags: every configuration key is one (`--mtu` for `mtu`), and each
/// can also come from an environment variable (`SDN_MTU`). Unset flags leave the configuration
/// file's value (or the default) alone; a flag or its variable wins over the file.
/// `--cluster-network` and `--global-namespace` repeat and have no variable (their values
/// would need a separator of their own); any other flag given twice takes its last value, as
/// the agent's flags always did.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Flags {
    /// YAML or JSON file with the settings below (keys in camelCase: nodeName, mtu, ...)
    #[arg(long, env = "SDN_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// This node's HostSubnet host [default: the host name]
    #[arg(long, env = "SDN_NODE_NAME", value_name = "NAME")]
    pub node_name: Option<String>,
    /// Underlay address [default: from the HostSubnet, else 127.0.0.1]
    #[arg(long = "node-ip", env = "SDN_NODE_IP", value_name = "IP")]
    pub node_ip: Option<Ipv4Addr>,
    /// Isolation mode: subnet, multitenant or networkpolicy [default: multitenant]
    #[arg(long, env = "SDN_MODE", value_name = "MODE")]
    pub mode: Option<String>,
    /// Cluster network and host subnet length in bits, repeatable [default: 10.128.0.0/14,9 =
    /// one /23 per node]
    #[arg(long, value_name = "CIDR[,LEN]", value_parser = parse_cluster_network)]
    pub cluster_network: Vec<ClusterNetworkSetting>,
    /// Service network [default: 172.30.0.0/16]
    #[arg(long, env = "SDN_SERVICE_CIDR", value_name = "CIDR")]
    pub service_cidr: Option<Ipv4Net>,
    /// VXLAN UDP port [default: 4789]
    #[arg(long, env = "SDN_VXLAN_PORT", value_name = "PORT")]
    pub vxlan_port: Option<u16>,
    /// Overlay MTU of tun0 and pod interfaces [default: 1450]
    #[arg(long, env = "SDN_MTU", value_name = "MTU")]
    pub mtu: Option<u32>,
    /// OVSDB: unix:PATH or tcp:IP:PORT [default: unix:/run/openvswitch/db.sock]
    #[arg(long, env = "SDN_OVSDB", value_name = "TARGET")]
    pub ovsdb: Option<String>,
    /// br0's OpenFlow management socket [default: /run/openvswitch/br0.mgmt]
    #[arg(long, env = "SDN_BRIDGE_MGMT", value_name = "PATH")]
    pub bridge_mgmt: Option<PathBuf>,
    /// CNI server socket, the plugin's `socket` [default: /var/run/sdn/cni.sock]
    #[arg(long, env = "SDN_CNI_SOCKET", value_name = "PATH")]
    pub cni_socket: Option<PathBuf>,
    /// host-local compatible lease directory [default: /var/lib/cni/networks]
    #[arg(long, env = "SDN_IPAM_DIR", value_name = "DIR")]
    pub ipam_dir: Option<PathBuf>,
    /// CNI network config directory [default: /etc/cni/net.d]
    #[arg(long, env = "SDN_CNI_CONF_DIR", value_name = "DIR")]
    pub cni_conf_dir: Option<PathBuf>,
    /// CNI network name [default: sdn]
    #[arg(long, env = "SDN_CNI_NETWORK_NAME", value_name = "NAME")]
    pub cni_network_name: Option<String>,
    /// OVS datapath of br0: system or netdev [default: system]
    #[arg(long, env = "SDN_DATAPATH_TYPE", value_name = "TYPE")]
    pub datapath_type: Option<String>,
    /// Turn tx checksum offload off in pods; a switch, or =true/=false [default: true with
    /// netdev]
    #[arg(long, env = "SDN_POD_TX_CHECKSUM_OFF", value_name = "BOOL", num_args = 0..=1,
          default_missing_value = "true")]
    pub pod_tx_checksum_off: Option<bool>,
    /// Take over a node openshift-sdn ran even when its state does not match what openshift-sdn
    /// leaves (pods whose tenant cannot be read are isolated); a switch, or =true/=false
    /// [default: false: such a node is refused, saying what does not match]
    #[arg(long, env = "SDN_FORCE_TAKEOVER", value_name = "BOOL", num_args = 0..=1,
          default_missing_value = "true")]
    pub force_takeover: Option<bool>,
    /// Cluster state: standalone:DIR or kubernetes [default: standalone:/var/lib/sdn/state]
    #[arg(long, env = "SDN_CLUSTER_STATE", value_name = "SOURCE")]
    pub cluster_state: Option<ClusterStateSource>,
    /// Deadline of one CNI request, seconds [default: 120]
    #[arg(
        long = "request-timeout",
        env = "SDN_REQUEST_TIMEOUT",
        value_name = "SECONDS"
    )]
    pub request_timeout_seconds: Option<u64>,
    /// How long a pod ADD waits for its namespace's NetNamespace, seconds [default: 5]
    #[arg(
        long = "netnamespace-wait",
        env = "SDN_NETNAMESPACE_WAIT",
        value_name = "SECONDS"
    )]
    pub netnamespace_wait_seconds: Option<u64>,
    /// OVS ports kept ready for the next ADDs, 0..=256 (0: none) [default: 64]
    #[arg(
        long = "port-pool-size",
        env = "SDN_PORT_POOL_SIZE",
        value_name = "PORTS"
    )]
    pub port_pool_size: Option<usize>,
    /// Kubernetes mode: kubeconfig [default: $KUBECONFIG, ~/.kube/config, then the in-cluster
    /// service account]
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubernetes mode: how long start-up waits for this node's HostSubnet, seconds
    /// [default: 120]
    #[arg(
        long = "host-subnet-wait",
        env = "SDN_HOST_SUBNET_WAIT",
        value_name = "SECONDS"
    )]
    pub host_subnet_wait_seconds: Option<u64>,
    /// Controller: a namespace with VNID 0 besides default, repeatable
    #[arg(long = "global-namespace", value_name = "NAME")]
    pub global_namespaces: Vec<String>,
    /// Controller: namespace of its leader-election Lease [default: sdn]
    #[arg(long, env = "SDN_CONTROLLER_NAMESPACE", value_name = "NS")]
    pub controller_namespace: Option<String>,
    /// Metrics and health (/metrics, /livez, /readyz) over HTTP on IP:PORT, "" for none
    /// [default: 127.0.0.1:9101]
    #[arg(long, env = "SDN_METRICS_ADDRESS", value_name = "IP:PORT")]
    pub metrics_address: Option<String>,
    /// The local API socket sdnctl talks to [default: api.sock next to the CNI socket]
    #[arg(long, env = "SDN_API_SOCKET", value_name = "PATH")]
    pub api_socket: Option<PathBuf>,
    /// Log format: text or json [default: text]
    #[arg(long, env = "SDN_LOG_FORMAT", value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Log level or filter at start, e.g. debug or agent=debug,ovs=info; RUST_LOG wins
    /// [default: info]
    #[arg(long, env = "SDN_LOG_LEVEL", value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// DNS server for egress firewall dnsName rules, IP or IP:PORT, repeatable [default: the
    /// node's /etc/resolv.conf]
    #[arg(long = "egress-dns-server", value_name = "IP[:PORT]")]
    pub egress_dns_servers: Vec<String>,
}

fn parse_cluster_network(value: &str) -> Result<ClusterNetworkSetting, String> {
    let (cidr, len) = value.split_once(',').unwrap_or((value, "9"));
    let bad = || format!("expected CIDR[,hostSubnetLength], got {value:?}");
    Ok(ClusterNetworkSetting {
        cidr: cidr.parse().map_err(|_| bad())?,
        host_subnet_length: len.parse().map_err(|_| bad())?,
    })
}

/// The flags alone, for parsing an argument list without a program name.
#[derive(Debug, clap::Parser)]
#[command(
    no_binary_name = true,
    disable_help_flag = true,
    args_override_self = true
)]
struct FlagsOnly {
    #[command(flatten)]
    flags: Flags,
}

/// A clap error in this project's words where it has them: `unknown flag "--x"` and `--x
/// needs a value` (what operators and the tests grep for); any other error as clap renders it,
/// without its usage footer.
pub fn flag_error(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let arg = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => s.split_whitespace().next().unwrap_or("").to_string(),
        _ => String::new(),
    };
    let rendered = e.render().to_string();
    let first = rendered
        .lines()
        .next()
        .unwrap_or("")
        .trim_start_matches("error: ")
        .to_string();
    match e.kind() {
        ErrorKind::UnknownArgument => {
            let tip = match e.get(ContextKind::SuggestedArg) {
                Some(ContextValue::String(s)) => format!(" (did you mean {s}?)"),
                _ => String::new(),
            };
            format!("unknown flag {arg:?}{tip}")
        }
        ErrorKind::InvalidValue if rendered.contains("a value is required") => {
            format!("{arg} needs a value")
        }
        _ => first,
    }
}

impl Config {
    /// Parses flags (no program name), reads `--config` if given, applies the flags on top and
    /// validates. The arguments alone: unlike the `sdn-agent` binary, no `SDN_*` variable of
    /// the calling process stands in for a flag (tools and tests parse a command line as it
    /// would run elsewhere, e.g. the DaemonSet's).
    pub fn from_args(args: &[String]) -> Result<Config> {
        use clap::{CommandFactory, FromArgMatches};
        let without_env = FlagsOnly::command().mut_args(|a| a.env(None));
        let parsed = without_env
            .try_get_matches_from(args)
            .and_then(|m| FlagsOnly::from_arg_matches(&m))
            .map_err(|e| anyhow::anyhow!(flag_error(&e)))?;
        Config::from_flags(&parsed.flags)
    }

    /// The environment variables `sdn-agent` reads as flags (`SDN_CONFIG`, `SDN_MTU`, ...), for
    /// whoever starts an agent and must not pass its own settings on by accident.
    pub fn env_names() -> Vec<String> {
        use clap::CommandFactory;
        FlagsOnly::command()
            .get_arguments()
            .filter_map(|a| a.get_env())
            .map(|e| e.to_string_lossy().into_owned())
            .collect()
    }

    /// The configuration file named by `flags` (if any) with `flags` on top, validated.
    pub fn from_flags(flags: &Flags) -> Result<Config> {
        let mut cfg = match &flags.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        let f = flags.clone();
        macro_rules! set {
            ($($field:ident),*) => { $( if let Some(v) = f.$field { cfg.$field = v; } )* };
        }
        set!(
            node_name,
            mode,
            vxlan_port,
            mtu,
            ovsdb,
            bridge_mgmt,
            cni_socket,
            ipam_dir,
            cni_conf_dir,
            cni_network_name,
            datapath_type,
            cluster_state,
            request_timeout_seconds,
            netnamespace_wait_seconds,
            port_pool_size,
            host_subnet_wait_seconds,
            controller_namespace,
            metrics_address,
            log_format,
            log_level
        );
        if let Some(p) = f.api_socket {
            cfg.api_socket = Some(p);
        }
        if let Some(ip) = f.node_ip {
            cfg.node_ip = Some(ip);
        }
        if let Some(n) = f.service_cidr {
            cfg.service_network = n;
        }
        if let Some(b) = f.pod_tx_checksum_off {
            cfg.pod_tx_checksum_off = Some(b);
        }
        if let Some(b) = f.force_takeover {
            cfg.force_takeover = b;
        }
        if let Some(k) = f.kubeconfig {
            cfg.kubeconfig = Some(k);
        }
        if !f.cluster_network.is_empty() {
            cfg.cluster_networks = f.cluster_network;
        }
        if !f.global_namespaces.is_empty() {
            cfg.global_namespaces = f.global_namespaces;
        }
        if !f.egress_dns_servers.is_empty() {
            cfg.egress_dns_servers = f.egress_dns_servers;
        }
        if cfg.node_name.is_empty() {
            cfg.node_name = hostname()?;
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads a YAML or JSON configuration file (JSON is YAML).
    pub fn from_file(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the configuration file {}", path.display()))?;
        crate::yaml::from_str(&text)
            .with_context(|| format!("configuration file {}", path.display()))
    }

    /// The isolation mode.
    pub fn mode(&self) -> Mode {
        // Validated: one of the three names.
        Mode::parse(&self.mode).unwrap_or(Mode::Multitenant)
    }

    /// Whether pod interfaces get tx checksum offload turned off.
    pub fn pod_tx_checksum_off(&self) -> bool {
        self.pod_tx_checksum_off
            .unwrap_or(self.datapath_type == "netdev")
    }

    /// The local API's socket: `apiSocket`, else `api.sock` next to the CNI socket.
    pub fn api_socket(&self) -> PathBuf {
        self.api_socket.clone().unwrap_or_else(|| {
            self.cni_socket
                .parent()
                .unwrap_or(Path::new("/var/run/sdn"))
                .join("api.sock")
        })
    }

    /// The metrics address, when metrics are served.
    pub fn metrics_address(&self) -> Option<std::net::SocketAddr> {
        self.metrics_address.parse().ok()
    }

    /// The cluster network CIDRs.
    pub fn cluster_cidrs(&self) -> Vec<Ipv4Net> {
        self.cluster_networks.iter().map(|c| c.cidr).collect()
    }

    /// Checks every value and their relations; the error names the setting.
    pub fn validate(&self) -> Result<()> {
        validate_dns_label("nodeName", &self.node_name, 253, true)?;
        for (i, ns) in self.global_namespaces.iter().enumerate() {
            validate_dns_label(&format!("globalNamespaces[{i}]"), ns, 63, false)?;
        }
        validate_dns_label("controllerNamespace", &self.controller_namespace, 63, false)?;
        if self.port_pool_size > 256 {
            bail!(
                "portPoolSize {}: expected 0..=256 ports",
                self.port_pool_size
            );
        }
        if Mode::parse(&self.mode).is_none() {
            bail!(
                "mode {:?}: expected subnet, multitenant or networkpolicy",
                self.mode
            );
        }
        if self.cluster_networks.is_empty() {
            bail!("clusterNetworks: at least one cluster network is needed");
        }
        for (i, cn) in self.cluster_networks.iter().enumerate() {
            let what = format!("clusterNetworks[{i}] {}", cn.cidr);
            if cn.cidr.network() != cn.cidr.addr() {
                bail!(
                    "{what}: not a network address (did you mean {}?)",
                    cn.cidr.trunc()
                );
            }
            let node = u32::from(cn.node_prefix());
            if cn.host_subnet_length < 2 || node <= u32::from(cn.cidr.prefix_len()) {
                bail!(
                    "{what}: hostSubnetLength {} must be at least 2 and leave room for more than \
                     one node subnet (prefix /{} would not fit inside /{})",
                    cn.host_subnet_length,
                    32u32.saturating_sub(u32::from(cn.host_subnet_length)),
                    cn.cidr.prefix_len()
                );
            }
            for other in &self.cluster_networks[..i] {
                if overlaps(&cn.cidr, &other.cidr) {
                    bail!("{what} overlaps cluster network {}", other.cidr);
                }
            }
            if overlaps(&cn.cidr, &self.service_network) {
                bail!(
                    "{what} overlaps the service network {}",
                    self.service_network
                );
            }
        }
        if self.service_network.network() != self.service_network.addr() {
            bail!(
                "serviceNetwork {}: not a network address",
                self.service_network
            );
        }
        if self.vxlan_port == 0 {
            bail!("vxlanPort 0: expected a UDP port (4789)");
        }
        if !(576..=9000).contains(&self.mtu) {
            bail!(
                "mtu {}: expected 576..=9000 (1450 for VXLAN over a 1500 underlay)",
                self.mtu
            );
        }
        if !matches!(self.datapath_type.as_str(), "system" | "netdev") {
            bail!(
                "datapathType {:?}: expected system or netdev",
                self.datapath_type
            );
        }
        for (name, p) in [
            ("bridgeMgmt", &self.bridge_mgmt),
            ("cniSocket", &self.cni_socket),
            ("ipamDir", &self.ipam_dir),
            ("cniConfDir", &self.cni_conf_dir),
        ] {
            if !p.is_absolute() {
                bail!("{name} {}: must be an absolute path", p.display());
            }
        }
        validate_dns_label("cniNetworkName", &self.cni_network_name, 63, false)?;
        if !(self.ovsdb.starts_with("unix:") || self.ovsdb.starts_with("tcp:")) {
            bail!(
                "ovsdb {:?}: expected unix:<path> or tcp:<ip>:<port>",
                self.ovsdb
            );
        }
        if !self.metrics_address.is_empty()
            && self
                .metrics_address
                .parse::<std::net::SocketAddr>()
                .is_err()
        {
            bail!(
                "metricsAddress {:?}: expected IP:PORT (127.0.0.1:9101; 0.0.0.0:9101 to expose \
                 it off the node) or \"\" for none",
                self.metrics_address
            );
        }
        if let Some(p) = &self.api_socket {
            if !p.is_absolute() {
                bail!("apiSocket {}: must be an absolute path", p.display());
            }
            if *p == self.cni_socket {
                bail!(
                    "apiSocket {}: must differ from cniSocket (the shim and sdnctl speak \
                     different protocols)",
                    p.display()
                );
            }
        }
        parse_filter(&self.log_level).map_err(|e| anyhow::anyhow!("logLevel {e}"))?;
        for (i, s) in self.egress_dns_servers.iter().enumerate() {
            let ok =
                s.parse::<std::net::SocketAddr>().is_ok() || s.parse::<std::net::IpAddr>().is_ok();
            if !ok {
                bail!(
                    "egressDNSServers[{i}] {s:?}: expected IP or IP:PORT (192.0.2.53, \
                     192.0.2.53:5353)"
                );
            }
        }
        if self.request_timeout_seconds == 0 || self.request_timeout_seconds > 600 {
            bail!(
                "requestTimeoutSeconds {}: expected 1..=600",
                self.request_timeout_seconds
            );
        }
        Ok(())
    }
}

fn overlaps(a: &Ipv4Net, b: &Ipv4Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

fn validate_dns_label(what: &str, s: &str, max: usize, dots: bool) -> Result<()> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || (dots && c == '.');
    if s.is_empty() || s.len() > max || !s.chars().all(ok_char) || s.starts_with('-') {
        bail!(
            "{what} {s:?}: expected 1..={max} characters of a-z, 0-9, '-'{} not starting with '-'",
            if dots { ", '.'" } else { "" }
        );
    }
    Ok(())
}

fn hostname() -> Result<String> {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .context("reading the host name; pass --node-name")?;
    Ok(h.trim().to_ascii_lowercase())
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (`tracing`'s default format).
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields` (the message and
    /// the event's fields), `spans` (the sandbox, pod and namespace of a CNI request).
    Json,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn flags_override_defaults() {
        let c = Config::from_args(&args(
            "--node-name n1 --mode subnet --cluster-network 10.0.0.0/16,8 --datapath-type netdev",
        ))
        .unwrap();
        assert_eq!(c.mode(), Mode::Subnet);
        assert_eq!(c.cluster_networks[0].node_prefix(), 24);
        assert!(c.pod_tx_checksum_off());
    }

    #[test]
    fn file_then_flags() {
        let dir = std::env::temp_dir().join(format!("sdn-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("agent.yaml");
        std::fs::write(
            &f,
            "nodeName: a\nmtu: 1400\nclusterNetworks:\n- cidr: 10.128.0.0/14\n  hostSubnetLength: 9\n",
        )
        .unwrap();
        let c = Config::from_args(&args(&format!("--config {} --mtu 1300", f.display()))).unwrap();
        assert_eq!((c.node_name.as_str(), c.mtu), ("a", 1300));
        std::fs::write(&f, "nodeName: a\nmtuu: 1400\n").unwrap();
        let e = format!(
            "{:#}",
            Config::from_args(&args(&format!("--config {}", f.display()))).unwrap_err()
        );
        assert!(e.contains("unknown field `mtuu`"), "{e}");
        // clusterState is spelled as the flag spells it, in YAML and in JSON.
        std::fs::write(&f, "nodeName: a\nclusterState: standalone:/srv/state\n").unwrap();
        let c = Config::from_file(&f).unwrap();
        assert_eq!(
            c.cluster_state,
            ClusterStateSource::Standalone("/srv/state".into())
        );
        let j = dir.join("agent.json");
        std::fs::write(&j, r#"{"nodeName": "a", "clusterState": "kubernetes"}"#).unwrap();
        assert_eq!(
            Config::from_file(&j).unwrap().cluster_state,
            ClusterStateSource::Kubernetes
        );
        std::fs::write(&f, "nodeName: a\nclusterState: standalone:rel\n").unwrap();
        let e = format!("{:#}", Config::from_file(&f).unwrap_err());
        assert!(e.contains("standalone:<absolute directory>"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn every_flag_but_the_repeatable_ones_has_its_variable() {
        let names = Config::env_names();
        for n in [
            "SDN_CONFIG",
            "SDN_MTU",
            "SDN_NODE_NAME",
            "SDN_NETNAMESPACE_WAIT",
        ] {
            assert!(names.iter().any(|x| x == n), "{n} missing from {names:?}");
        }
        assert!(names.iter().all(|n| n.starts_with("SDN_")), "{names:?}");
    }

    #[test]
    fn errors_name_the_setting() {
        for (a, want) in [
            ("--node-name n --mtu 100", "mtu 100"),
            (
                "--node-name n --cluster-network 172.28.0.0/14",
                "overlaps the service network",
            ),
            (
                "--node-name n --cluster-network 10.128.0.1/14",
                "not a network address",
            ),
            (
                "--node-name n --cluster-network 10.128.0.0/24,9",
                "hostSubnetLength 9",
            ),
            ("--node-name n --cni-socket rel.sock", "cniSocket rel.sock"),
            ("--node-name n --mode flat", "mode \"flat\""),
            ("--node-name N_1", "nodeName \"N_1\""),
            (
                "--node-name n --cluster-state standalone:rel",
                "--cluster-state",
            ),
            ("--node-name n --bogus 1", "unknown flag \"--bogus\""),
            ("--node-name n --mtu 1300 --mtu 100", "mtu 100"),
            ("--node-name", "--node-name needs a value"),
            (
                "--node-name n --metrics-address localhost",
                "metricsAddress \"localhost\": expected IP:PORT",
            ),
            ("--node-name n --log-level loud", "logLevel \"loud\""),
            ("--node-name n --log-format yaml", "expected text or json"),
            ("--node-name n --api-socket api.sock", "apiSocket api.sock"),
            (
                "--node-name n --egress-dns-server dns.example.com",
                "egressDNSServers[0] \"dns.example.com\"",
            ),
        ] {
            let e = format!("{:#}", Config::from_args(&args(a)).unwrap_err());
            assert!(e.contains(want), "{a}: {e}");
        }
    }
}
