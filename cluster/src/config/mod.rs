//! The agent's configuration: a YAML or JSON file (`--config`), then command-line flags and
//! their `SDN_*` variables on top (a flag always wins), then validation of the whole.
//!
//! Every setting is declared once, in the `settings!` list below: its field and type, default,
//! file key, flag, environment variable (or why it has none), the default as `--help` shows it,
//! its check and its one doc line ([`setting`] turns the list into the [`Config`] struct, its
//! `Default`, the flags and [`SETTINGS`]; `docs/settings.md` is generated from it and a test
//! holds every entry to all of that). Enumerated settings are enums ([`values`]): a value the
//! agent does not know is an error naming the allowed ones, never a fallback.
//!
//! Every setting has a default that works for a standalone node on the system's Open vSwitch,
//! so `sdn-agent` with no arguments runs. Validation checks every value, then the relations
//! between them (the cluster networks do not overlap the service network, the API socket is
//! not the CNI socket), and its errors name the setting, the value and what is expected: the
//! agent refuses to start on a bad configuration instead of half-configuring a node.

mod setting;
mod values;

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use flows::{Datapath, Mode};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use setting::{any, settings, Env, Shown};
pub use setting::{flag_error, Arity, Env as SettingEnv, Flags, Setting, Shown as SettingDefault};
/// An IPv4 cluster network, as the ClusterNetwork object's `clusterNetworks` holds it.
pub type Ipv4ClusterNetwork = ClusterNetworkEntry<Ipv4Net>;
/// The IPv6 cluster network of a dual-stack or IPv6-only cluster.
pub type Ipv6ClusterNetwork = ClusterNetworkEntry<Ipv6Net>;

pub use values::{
    parse_filter, AuditFormat, ClusterNetworkEntry, ClusterNetworkSetting, ClusterStateSource,
    Listen, LogFormat, OvsdbTarget, ServiceNetworks, SyslogTarget,
};

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A flag or its variable is unusable.
    #[error("{0}")]
    Flag(String),
    /// The configuration file cannot be read.
    #[error("reading the configuration file {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The configuration file does not parse.
    #[error("configuration file {}: {message}", .path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the key.
        message: String,
    },
    /// A value, or two values together, are not usable.
    #[error("{0}")]
    Invalid(String),
    /// No node name was given and the host name cannot be read.
    #[error("reading the host name: {0}; pass --node-name")]
    Hostname(std::io::Error),
}

/// The default cluster network: 10.128.0.0/14, a /23 per node.
fn default_cluster_network() -> ClusterNetworkSetting {
    ClusterNetworkSetting {
        cidr: IpNet::V4(Ipv4Net::new(Ipv4Addr::new(10, 128, 0, 0), 14).expect("constant")),
        host_subnet_length: 9,
    }
}

const REPEATABLE: Env = Env::None("repeatable: a list would need a separator of its own");

settings! {
    node_name: String = String::new(),
        key "nodeName", flag "node-name", env Env::Var("SDN_NODE_NAME"), value "NAME",
        shown Shown::Words("the host name"),
        check |v| dns_label("nodeName", v, 253, true),
        doc "This node's name: its HostSubnet's host";
    node_ip: Option<IpAddr> = None,
        key "nodeIP", flag "node-ip", env Env::Var("SDN_NODE_IP"), value "IP",
        shown Shown::Words("from the HostSubnet, else 127.0.0.1 (::1 IPv6-only)"), check any,
        doc "The node's underlay address";
    mode: Mode = Mode::Multitenant,
        key "mode", flag "mode", env Env::Var("SDN_MODE"), value "MODE",
        shown Shown::Value("multitenant"), check any,
        doc "Isolation mode: subnet, multitenant or networkpolicy";
    cluster_networks: Vec<ClusterNetworkSetting> = vec![default_cluster_network()],
        key "clusterNetworks", flag "cluster-network", env REPEATABLE, value "CIDR[,LEN]",
        shown Shown::Value("10.128.0.0/14,9"), check |v| check_cluster_networks(v),
        doc "Cluster network and the host bits of a node's subnet (9: one /23 per node); \
             repeat for more, at most one IPv6 (fd01::/48,64: one /64 per node) for dual stack";
    service_network: ServiceNetworks = ServiceNetworks::new(vec![IpNet::V4(
            Ipv4Net::new(Ipv4Addr::new(172, 30, 0, 0), 16).expect("constant"),
        )]),
        key "serviceNetwork", flag "service-cidr", env Env::Var("SDN_SERVICE_CIDR"),
        value "CIDR[,CIDR]", shown Shown::Value("172.30.0.0/16"),
        check |v| check_service_networks(v),
        doc "Service network, one CIDR per family (172.30.0.0/16,fd02::/112 for dual stack)";
    vxlan_port: u16 = 4789,
        key "vxlanPort", flag "vxlan-port", env Env::Var("SDN_VXLAN_PORT"), value "PORT",
        shown Shown::Value("4789"),
        check |v| if *v == 0 { Err("vxlanPort 0: expected a UDP port (4789)".into()) } else { Ok(()) },
        doc "VXLAN UDP port";
    mtu: u32 = 1450,
        key "mtu", flag "mtu", env Env::Var("SDN_MTU"), value "MTU",
        shown Shown::Value("1450"),
        check |v| within("mtu", *v, 576..=9000, " (1450 for VXLAN over a 1500 underlay)"),
        doc "Overlay MTU of tun0 and pod interfaces";
    ovsdb: OvsdbTarget = OvsdbTarget::Unix("/run/openvswitch/db.sock".into()),
        key "ovsdb", flag "ovsdb", env Env::Var("SDN_OVSDB"), value "TARGET",
        shown Shown::Value("unix:/run/openvswitch/db.sock"), check any,
        doc "OVSDB: unix:PATH or tcp:IP:PORT";
    bridge_mgmt: PathBuf = "/run/openvswitch/br0.mgmt".into(),
        key "bridgeMgmt", flag "bridge-mgmt", env Env::Var("SDN_BRIDGE_MGMT"), value "PATH",
        shown Shown::Value("/run/openvswitch/br0.mgmt"),
        check |v| absolute("bridgeMgmt", v),
        doc "br0's OpenFlow management socket";
    cni_socket: PathBuf = cni_proto::DEFAULT_SOCKET.into(),
        key "cniSocket", flag "cni-socket", env Env::Var("SDN_CNI_SOCKET"), value "PATH",
        shown Shown::Value(cni_proto::DEFAULT_SOCKET),
        check |v| absolute("cniSocket", v),
        doc "CNI server socket, the plugin's socket";
    ipam_dir: PathBuf = "/var/lib/cni/networks".into(),
        key "ipamDir", flag "ipam-dir", env Env::Var("SDN_IPAM_DIR"), value "DIR",
        shown Shown::Value("/var/lib/cni/networks"),
        check |v| absolute("ipamDir", v),
        doc "host-local compatible lease directory (leases in DIR/cniNetworkName)";
    cni_conf_dir: PathBuf = "/etc/cni/net.d".into(),
        key "cniConfDir", flag "cni-conf-dir", env Env::Var("SDN_CNI_CONF_DIR"), value "DIR",
        shown Shown::Value("/etc/cni/net.d"),
        check |v| absolute("cniConfDir", v),
        doc "CNI network config directory: the agent writes its conflist there when ready";
    cni_network_name: String = "sdn".into(),
        key "cniNetworkName", flag "cni-network-name", env Env::Var("SDN_CNI_NETWORK_NAME"),
        value "NAME", shown Shown::Value("sdn"),
        check |v| dns_label("cniNetworkName", v, 63, false),
        doc "CNI network name (and of its lease directory)";
    datapath_type: Datapath = Datapath::System,
        key "datapathType", flag "datapath-type", env Env::Var("SDN_DATAPATH_TYPE"), value "TYPE",
        shown Shown::Value("system"), check any,
        doc "OVS datapath of br0: system (the kernel's) or netdev (userspace)";
    pod_tx_checksum_off: Option<bool> = None,
        key "podTxChecksumOff", flag "pod-tx-checksum-off", env Env::Var("SDN_POD_TX_CHECKSUM_OFF"),
        value "BOOL", shown Shown::Words("true with netdev, false with system"), check any,
        doc "Turn tx checksum offload off in pods (needed with netdev); a switch, or =true/=false";
    force_takeover: bool = false,
        key "forceTakeover", flag "force-takeover", env Env::Var("SDN_FORCE_TAKEOVER"),
        value "BOOL", shown Shown::Value("false"), check any,
        doc "Take over a node openshift-sdn ran even when its state is not what openshift-sdn \
             leaves (pods whose tenant cannot be read are isolated); off: such a node is \
             refused, saying what does not match";
    cluster_state: ClusterStateSource = ClusterStateSource::Standalone("/var/lib/sdn/state".into()),
        key "clusterState", flag "cluster-state", env Env::Var("SDN_CLUSTER_STATE"), value "SOURCE",
        shown Shown::Value("standalone:/var/lib/sdn/state"), check any,
        doc "Cluster state: standalone:DIR (YAML files) or kubernetes";
    request_timeout_seconds: u64 = 120,
        key "requestTimeoutSeconds", flag "request-timeout", env Env::Var("SDN_REQUEST_TIMEOUT"),
        value "SECONDS", shown Shown::Value("120"),
        check |v| within("requestTimeoutSeconds", *v, 1..=600, ""),
        doc "Deadline of one CNI request, seconds";
    netnamespace_wait_seconds: u64 = 5,
        key "netnamespaceWaitSeconds", flag "netnamespace-wait", env Env::Var("SDN_NETNAMESPACE_WAIT"),
        value "SECONDS", shown Shown::Value("5"), check any,
        doc "How long a pod ADD waits for its namespace's NetNamespace, seconds";
    // 64: at 1000 pods, 32 left one ADD in nine without a warm port (p90 400 ms), 64 none (p90
    // 38 ms); a VNID with a burst of ADDs also gets half as many warm ports (see `pod::pool`).
    port_pool_size: usize = 64,
        key "portPoolSize", flag "port-pool-size", env Env::Var("SDN_PORT_POOL_SIZE"),
        value "PORTS", shown Shown::Value("64"),
        check |v| within("portPoolSize", *v, 0..=256, " ports"),
        doc "OVS ports kept ready for the next ADDs, so an ADD never waits for ovs-vswitchd, \
             0..=256 (0: none)";
    kubeconfig: Option<PathBuf> = None,
        key "kubeconfig", flag "kubeconfig",
        env Env::None("kube's own KUBECONFIG is read when the setting is unset"), value "FILE",
        shown Shown::Words("$KUBECONFIG, ~/.kube/config, then the in-cluster service account"),
        check any,
        doc "Kubernetes mode: the kubeconfig file";
    host_subnet_wait_seconds: u64 = 120,
        key "hostSubnetWaitSeconds", flag "host-subnet-wait", env Env::Var("SDN_HOST_SUBNET_WAIT"),
        value "SECONDS", shown Shown::Value("120"), check any,
        doc "Kubernetes mode: how long start-up waits for this node's HostSubnet, seconds";
    global_namespaces: Vec<String> = Vec::new(),
        key "globalNamespaces", flag "global-namespace", env REPEATABLE, value "NAME",
        shown Shown::Words("none"),
        check |v| v.iter().enumerate().try_for_each(|(i, ns)| {
            dns_label(&format!("globalNamespaces[{i}]"), ns, 63, false)
        }),
        doc "Controller: a namespace with VNID 0 besides default";
    controller_namespace: String = "sdn".into(),
        key "controllerNamespace", flag "controller-namespace",
        env Env::Var("SDN_CONTROLLER_NAMESPACE"), value "NS", shown Shown::Value("sdn"),
        check |v| dns_label("controllerNamespace", v, 63, false),
        doc "Controller: the namespace of its leader-election Lease";
    metrics_address: Listen = Listen::At(std::net::SocketAddr::from(([127, 0, 0, 1], 9101))),
        key "metricsAddress", flag "metrics-address", env Env::Var("SDN_METRICS_ADDRESS"),
        value "IP:PORT", shown Shown::Value("127.0.0.1:9101"), check any,
        doc "Metrics and health (/metrics, /livez, /readyz) over HTTP on IP:PORT, \"\" for none; \
             local by default: exposing it off the node is the operator's choice";
    api_socket: Option<PathBuf> = None,
        key "apiSocket", flag "api-socket", env Env::Var("SDN_API_SOCKET"), value "PATH",
        shown Shown::Words("api.sock next to the CNI socket"),
        check |v| v.as_ref().map_or(Ok(()), |p| absolute("apiSocket", p)),
        doc "The local API socket sdnctl talks to (root only)";
    log_format: LogFormat = LogFormat::Text,
        key "logFormat", flag "log-format", env Env::Var("SDN_LOG_FORMAT"), value "FORMAT",
        shown Shown::Value("text"), check any,
        doc "Log format: text or json (one object per line)";
    log_level: String = "info".into(),
        key "logLevel", flag "log-level", env Env::Var("SDN_LOG_LEVEL"), value "LEVEL",
        shown Shown::Value("info"),
        check |v| parse_filter(v).map(drop).map_err(|e| format!("logLevel {e}")),
        doc "Log level or filter at start, e.g. debug or agent=debug,ovs=info; RUST_LOG wins; \
             sdnctl log-level changes it at run time";
    egress_dns_servers: Vec<String> = Vec::new(),
        key "egressDNSServers", flag "egress-dns-server", env REPEATABLE, value "IP[:PORT]",
        shown Shown::Words("the node's /etc/resolv.conf"),
        check |v| v.iter().enumerate().try_for_each(|(i, s)| dns_server(i, s)),
        doc "DNS server for egress firewall dnsName rules, IP or IP:PORT";
    audit_log_file: PathBuf = "/var/log/sdn/audit.log".into(),
        key "auditLogFile", flag "audit-log-file", env Env::Var("SDN_AUDIT_LOG_FILE"), value "FILE",
        shown Shown::Value("/var/log/sdn/audit.log"),
        check |v| absolute("auditLogFile", v),
        doc "Audit log of isolation decisions, for namespaces that turn it on \
             (k8s.ovn.org/acl-logging); rotated to FILE.1 (newest) up to auditLogMaxFiles";
    audit_log_format: AuditFormat = AuditFormat::Json,
        key "auditLogFormat", flag "audit-log-format", env Env::Var("SDN_AUDIT_LOG_FORMAT"),
        value "FORMAT", shown Shown::Value("json"), check any,
        doc "Audit log file format: json (one object per line) or syslog (RFC 5424 lines)";
    audit_log_max_size_mb: u64 = 50,
        key "auditLogMaxSizeMB", flag "audit-log-max-size", env Env::Var("SDN_AUDIT_LOG_MAX_SIZE"),
        value "MB", shown Shown::Value("50"),
        check |v| within("auditLogMaxSizeMB", *v, 1..=10_240, " MB"),
        doc "Audit log file size at which it is rotated, MB";
    audit_log_max_files: u32 = 5,
        key "auditLogMaxFiles", flag "audit-log-max-files", env Env::Var("SDN_AUDIT_LOG_MAX_FILES"),
        value "N", shown Shown::Value("5"),
        check |v| within("auditLogMaxFiles", *v, 1..=100, " rotated files"),
        doc "Rotated audit log files kept besides the current one";
    audit_rate_limit: u32 = 20,
        key "auditRateLimit", flag "audit-rate-limit", env Env::Var("SDN_AUDIT_RATE_LIMIT"),
        value "PPS", shown Shown::Value("20"),
        check |v| within("auditRateLimit", *v, 1..=100_000, " packets/s"),
        doc "Logged packets per second the switch sends the agent, per verdict and source \
             namespace (a meter each; the rest are counted as suppressed)";
    audit_syslog: Option<SyslogTarget> = None,
        key "auditSyslog", flag "audit-syslog", env Env::Var("SDN_AUDIT_SYSLOG"),
        value "TARGET", shown Shown::Words("none"), check any,
        doc "Also send audit lines (RFC 5424) to a syslog socket: unix:/dev/log or udp:IP:PORT";
    live_trace_namespace: String = "sdn".into(),
        key "liveTraceNamespace", flag "trace-namespace",
        env Env::Var("SDN_LIVE_TRACE_NAMESPACE"), value "NS", shown Shown::Value("sdn"),
        check |v| dns_label("liveTraceNamespace", v, 63, false),
        doc "Kubernetes mode: the agents' namespace, for live-trace ConfigMaps";
}

impl Config {
    /// Parses flags (no program name), reads `--config` if given, applies the flags on top and
    /// validates. The arguments alone: unlike the `sdn-agent` binary, no `SDN_*` variable of
    /// the calling process stands in for a flag (tools and tests parse a command line as it
    /// would run elsewhere, e.g. the DaemonSet's).
    pub fn from_args(args: &[String]) -> Result<Config, ConfigError> {
        use clap::{CommandFactory, FromArgMatches};
        let without_env = FlagsOnly::command().mut_args(|a| a.env(None));
        let parsed = without_env
            .try_get_matches_from(args)
            .and_then(|m| FlagsOnly::from_arg_matches(&m))
            .map_err(|e| ConfigError::Flag(flag_error(&e)))?;
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
    pub fn from_flags(flags: &Flags) -> Result<Config, ConfigError> {
        let mut cfg = match &flags.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        flags.apply_to(&mut cfg).map_err(ConfigError::Flag)?;
        if cfg.node_name.is_empty() {
            cfg.node_name = hostname()?;
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads a YAML or JSON configuration file (JSON is YAML).
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        crate::yaml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// Whether pod interfaces get tx checksum offload turned off.
    pub fn pod_tx_checksum_off(&self) -> bool {
        self.pod_tx_checksum_off
            .unwrap_or(self.datapath_type == Datapath::Netdev)
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
        self.metrics_address.addr()
    }

    /// The IPv4 cluster network CIDRs.
    pub fn cluster_cidrs(&self) -> Vec<Ipv4Net> {
        self.ipv4_cluster_networks()
            .iter()
            .map(|c| c.cidr)
            .collect()
    }

    /// The IPv4 cluster networks, in the order given.
    pub fn ipv4_cluster_networks(&self) -> Vec<ClusterNetworkEntry<Ipv4Net>> {
        self.cluster_networks
            .iter()
            .filter_map(|c| c.v4())
            .collect()
    }

    /// The IPv6 cluster network, if the cluster has one (dual stack or IPv6 only).
    pub fn ipv6_cluster_network(&self) -> Option<ClusterNetworkEntry<Ipv6Net>> {
        self.cluster_networks.iter().find_map(|c| c.v6())
    }

    /// Checks every setting, then their relations; the error names the setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for s in SETTINGS {
            s.check(self).map_err(ConfigError::Invalid)?;
        }
        self.check_relations().map_err(ConfigError::Invalid)
    }

    /// What no setting can check alone.
    fn check_relations(&self) -> Result<(), String> {
        for (i, cn) in self.cluster_networks.iter().enumerate() {
            for svc in self.service_network.all() {
                if overlaps(&cn.cidr, svc) {
                    return Err(format!(
                        "clusterNetworks[{i}] {} overlaps the service network {svc}",
                        cn.cidr
                    ));
                }
            }
        }
        let ipv6_only = self.ipv4_cluster_networks().is_empty();
        if !ipv6_only && self.service_network.v4().is_none() {
            return Err(format!(
                "serviceNetwork {}: no IPv4 network; the cluster's Services need one while its \
                 pods have IPv4 addresses (give 172.30.0.0/16,{} for dual stack)",
                self.service_network, self.service_network
            ));
        }
        if ipv6_only && self.service_network.v6().is_none() {
            return Err(format!(
                "serviceNetwork {}: no IPv6 network for an IPv6-only cluster (give fd02::/112)",
                self.service_network
            ));
        }
        match self.node_ip {
            Some(ip @ IpAddr::V6(_)) if !ipv6_only => {
                return Err(format!(
                    "nodeIP {ip}: an IPv6 underlay address is for an IPv6-only cluster; this \
                     cluster has IPv4 networks, whose nodes reach each other over IPv4"
                ))
            }
            Some(ip @ IpAddr::V4(_)) if ipv6_only => {
                return Err(format!(
                    "nodeIP {ip}: an IPv6-only cluster's nodes reach each other over IPv6; give \
                     the node's IPv6 address"
                ))
            }
            _ => {}
        }
        for svc in self.service_network.all() {
            let family = |n: &IpNet| n.max_prefix_len();
            if !self
                .cluster_networks
                .iter()
                .any(|cn| family(&cn.cidr) == family(svc))
            {
                return Err(format!(
                    "serviceNetwork {svc}: no cluster network of its family (IPv{}); add one to \
                     clusterNetworks or leave this service network out",
                    if family(svc) == 32 { 4 } else { 6 }
                ));
            }
        }
        if self.api_socket.as_ref() == Some(&self.cni_socket) {
            return Err(format!(
                "apiSocket {}: must differ from cniSocket (the shim and sdnctl speak different \
                 protocols)",
                self.cni_socket.display()
            ));
        }
        Ok(())
    }
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

/// The settings reference (`docs/settings.md`), generated from [`SETTINGS`].
pub fn reference() -> String {
    let mut out = String::from(
        "# Settings\n\n<!-- Generated from cluster/src/config/mod.rs (`sdn-agent settings`); a test \
         checks it. -->\n\nEvery setting of `sdn-agent run` (and `sdn-agent controller`): a key \
         of the YAML or JSON file given with `--config`, a flag, and most also an environment \
         variable. A flag or its variable wins over the file; the file wins over the default. \
         A value the agent does not know is refused at start, naming what is allowed.\n\n\
         | key | flag | variable | default | what |\n|---|---|---|---|---|\n",
    );
    for s in SETTINGS {
        let env = match s.env {
            Env::Var(v) => format!("`{v}`"),
            Env::None(why) => format!("none ({why})"),
        };
        let default = match s.default {
            Shown::Value("") => "\"\"".to_string(),
            Shown::Value(v) => format!("`{v}`"),
            Shown::Words(w) => w.to_string(),
        };
        let flag = match s.arity {
            Arity::Switch => format!("`--{}[=BOOL]`", s.flag),
            Arity::Many => format!("`--{} {}` (repeatable)", s.flag, s.value_name),
            Arity::One => format!("`--{} {}`", s.flag, s.value_name),
        };
        out.push_str(&format!(
            "| `{}` | {flag} | {env} | {default} | {} |\n",
            s.key,
            s.doc.replace('|', "\\|")
        ));
    }
    out
}

fn check_cluster_networks(networks: &[ClusterNetworkSetting]) -> Result<(), String> {
    if networks.is_empty() {
        return Err("clusterNetworks: at least one cluster network is needed".into());
    }
    for (i, cn) in networks.iter().enumerate() {
        let what = format!("clusterNetworks[{i}] {}", cn.cidr);
        if cn.cidr.network() != cn.cidr.addr() {
            return Err(format!(
                "{what}: not a network address (did you mean {}?)",
                cn.cidr.trunc()
            ));
        }
        let bits = cn.cidr.max_prefix_len();
        let prefix = cn.cidr.prefix_len();
        if cn.host_subnet_length < 2 || cn.host_subnet_length >= bits || cn.node_prefix() <= prefix
        {
            return Err(format!(
                "{what}: hostSubnetLength {} must be at least 2 and leave room for more than one \
                 node subnet (a node's /{} does not fit inside /{prefix} more than once{})",
                cn.host_subnet_length,
                bits.saturating_sub(cn.host_subnet_length),
                if bits == 128 {
                    "; 64 gives each node a /64"
                } else {
                    ""
                }
            ));
        }
        if bits == 128 {
            if let Some(j) = networks[..i]
                .iter()
                .position(|o| o.cidr.max_prefix_len() == 128)
            {
                return Err(format!(
                    "{what}: a second IPv6 cluster network (clusterNetworks[{j}] is one); a \
                     cluster has at most one"
                ));
            }
        }
        for other in &networks[..i] {
            if overlaps(&cn.cidr, &other.cidr) {
                return Err(format!("{what} overlaps cluster network {}", other.cidr));
            }
        }
    }
    Ok(())
}

fn check_service_networks(nets: &ServiceNetworks) -> Result<(), String> {
    if nets.all().is_empty() {
        return Err("serviceNetwork: expected one CIDR per family (172.30.0.0/16)".into());
    }
    for (i, net) in nets.all().iter().enumerate() {
        if net.network() != net.addr() {
            return Err(format!(
                "serviceNetwork {net}: not a network address (did you mean {}?)",
                net.trunc()
            ));
        }
        if nets.all()[..i]
            .iter()
            .any(|o| o.max_prefix_len() == net.max_prefix_len())
        {
            return Err(format!(
                "serviceNetwork {nets}: two networks of one family; give one per family"
            ));
        }
    }
    Ok(())
}

fn within<T: PartialOrd + std::fmt::Display + Copy>(
    key: &str,
    v: T,
    range: std::ops::RangeInclusive<T>,
    note: &str,
) -> Result<(), String> {
    if !range.contains(&v) {
        return Err(format!(
            "{key} {v}: expected {}..={}{note}",
            range.start(),
            range.end()
        ));
    }
    Ok(())
}

fn absolute(key: &str, p: &Path) -> Result<(), String> {
    if !p.is_absolute() {
        return Err(format!("{key} {}: must be an absolute path", p.display()));
    }
    Ok(())
}

fn dns_server(i: usize, s: &str) -> Result<(), String> {
    if s.parse::<std::net::SocketAddr>().is_ok() || s.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    Err(format!(
        "egressDNSServers[{i}] {s:?}: expected IP or IP:PORT (192.0.2.53, 192.0.2.53:5353)"
    ))
}

fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

fn dns_label(what: &str, s: &str, max: usize, dots: bool) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || (dots && c == '.');
    if s.is_empty() || s.len() > max || !s.chars().all(ok_char) || s.starts_with('-') {
        return Err(format!(
            "{what} {s:?}: expected 1..={max} characters of a-z, 0-9, '-'{} not starting with '-'",
            if dots { ", '.'" } else { "" }
        ));
    }
    Ok(())
}

fn hostname() -> Result<String, ConfigError> {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname").map_err(ConfigError::Hostname)?;
    Ok(h.trim().to_ascii_lowercase())
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
        assert_eq!(c.mode, Mode::Subnet);
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
    fn dual_stack_in_flags_and_in_a_file() {
        let c = Config::from_args(&args(
            "--node-name n --cluster-network 10.128.0.0/14,9 --cluster-network fd01::/48 \
             --service-cidr 172.30.0.0/16,fd02::/112",
        ))
        .unwrap();
        assert_eq!(
            c.cluster_cidrs(),
            ["10.128.0.0/14".parse::<Ipv4Net>().unwrap()]
        );
        let v6 = c.ipv6_cluster_network().unwrap();
        assert_eq!(
            (v6.cidr.to_string(), v6.node_prefix()),
            ("fd01::/48".into(), 64)
        );
        assert_eq!(c.service_network.v6().unwrap().to_string(), "fd02::/112");
        assert_eq!(c.service_network.v4().unwrap().to_string(), "172.30.0.0/16");

        let dir = std::env::temp_dir().join(format!("sdn-config-6-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("agent.yaml");
        for (service, v6_service) in [
            ("serviceNetwork: 172.30.0.0/16,fd02::/112", true),
            ("serviceNetwork: [172.30.0.0/16, \"fd02::/112\"]", true),
            ("serviceNetwork: 172.30.0.0/16", false),
        ] {
            std::fs::write(
                &f,
                format!(
                    "nodeName: a\nclusterNetworks: [{{cidr: 10.128.0.0/14, hostSubnetLength: 9}}, \
                     {{cidr: \"fd01::/48\", hostSubnetLength: 64}}]\n{service}\n"
                ),
            )
            .unwrap();
            let c = Config::from_args(&args(&format!("--config {}", f.display()))).unwrap();
            assert_eq!(
                c.ipv6_cluster_network().unwrap().node_prefix(),
                64,
                "{service}"
            );
            assert_eq!(c.service_network.v6().is_some(), v6_service, "{service}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn bad_dual_stack_settings_name_the_setting() {
        let base = "--node-name n --cluster-network 10.128.0.0/14";
        for (a, want) in [
            (
                format!("{base} --cluster-network fd01::/48 --cluster-network fd03::/48"),
                "clusterNetworks[2] fd03::/48: a second IPv6 cluster network",
            ),
            (
                format!("{base} --cluster-network fd01::/64,64"),
                "clusterNetworks[1] fd01::/64: hostSubnetLength 64 must be at least 2 and leave \
                 room",
            ),
            (
                format!("{base} --cluster-network fd01::/48,200"),
                "hostSubnetLength 200",
            ),
            (
                format!("{base} --cluster-network fd01::1/48"),
                "not a network address (did you mean fd01::/48?)",
            ),
            (
                format!("{base} --service-cidr 172.30.0.0/16,fd02::/112"),
                "serviceNetwork fd02::/112: no cluster network of its family (IPv6)",
            ),
            (
                format!(
                    "{base} --cluster-network fd01::/48 --service-cidr 172.30.0.0/16,172.31.0.0/16"
                ),
                "two networks of one family",
            ),
            (
                format!("{base} --cluster-network fd01::/48 --service-cidr fd01::/112"),
                "clusterNetworks[1] fd01::/48 overlaps the service network fd01::/112",
            ),
            (
                format!("{base} --service-cidr 172.30.0.0/16,fd02::/x"),
                "\"fd02::/x\" is not a CIDR",
            ),
            (
                format!("{base} --cluster-network fd01::/48 --service-cidr fd02::/112"),
                "serviceNetwork fd02::/112: no IPv4 network",
            ),
            (
                "--node-name n --cluster-network fd01::/48".into(),
                "serviceNetwork 172.30.0.0/16: no IPv6 network for an IPv6-only cluster",
            ),
            (
                "--node-name n --cluster-network fd01::/48 --service-cidr fd02::/112 \
                 --node-ip 192.168.1.10"
                    .into(),
                "nodeIP 192.168.1.10: an IPv6-only cluster's nodes reach each other over IPv6",
            ),
            (
                format!("{base} --node-ip fd00::10"),
                "nodeIP fd00::10: an IPv6 underlay address is for an IPv6-only cluster",
            ),
            (
                format!("{base} --cluster-network fd01::/48,x"),
                "expected CIDR[,hostSubnetLength]",
            ),
        ] {
            let e = format!("{:#}", Config::from_args(&args(&a)).unwrap_err());
            assert!(e.contains(want), "{a}: {e}");
        }
    }

    #[test]
    fn an_ipv6_only_cluster_is_configured_with_its_ipv6_networks_and_node_ip() {
        let c = Config::from_args(&args(
            "--node-name n --cluster-network fd01::/48,64 --service-cidr fd02::/112 \
             --node-ip fd00::10",
        ))
        .unwrap();
        assert!(c.ipv4_cluster_networks().is_empty());
        assert_eq!(
            c.ipv6_cluster_network().unwrap().cidr.to_string(),
            "fd01::/48"
        );
        assert_eq!(c.node_ip, Some("fd00::10".parse().unwrap()));
        assert_eq!(c.service_network.v4(), None);
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
                "--metrics-address \"localhost\": expected IP:PORT",
            ),
            (
                "--node-name n --mode flat",
                "--mode \"flat\": expected subnet, multitenant or networkpolicy",
            ),
            (
                "--node-name n --datapath-type dpdk",
                "--datapath-type \"dpdk\": expected system or netdev",
            ),
            (
                "--node-name n --ovsdb /run/db.sock",
                "--ovsdb \"/run/db.sock\": neither unix: nor tcp:: expected unix:<path> or tcp:<host>[:<port>]",
            ),
            (
                "--node-name n --ovsdb tcp:host:x",
                "an invalid port",
            ),
            (
                "--node-name n --port-pool-size 300",
                "portPoolSize 300: expected 0..=256",
            ),
            (
                "--node-name n --force-takeover=yes",
                "--force-takeover \"yes\"",
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

    #[test]
    fn every_setting_has_a_key_flag_variable_default_doc_and_check() {
        use std::collections::BTreeSet;
        let named = Config {
            node_name: "n".into(),
            ..Config::default()
        };
        assert_eq!(named.validate().map_err(|e| e.to_string()), Ok(()));
        // Every field of Config is a setting, and every setting a field (the file's keys).
        let file = serde_json::to_value(Config::default()).unwrap();
        let keys: BTreeSet<&str> = file
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let declared: BTreeSet<&str> = SETTINGS.iter().map(|s| s.key).collect();
        assert_eq!(keys, declared);
        let help = {
            use clap::CommandFactory;
            FlagsOnly::command().render_long_help().to_string()
        };
        let mut flags = BTreeSet::new();
        let mut vars = BTreeSet::new();
        for s in SETTINGS {
            let who = format!("setting {} ({})", s.key, s.field);
            assert!(flags.insert(s.flag), "{who}: flag --{} twice", s.flag);
            assert!(
                s.flag.chars().all(|c| c.is_ascii_lowercase() || c == '-'),
                "{who}: flag --{}",
                s.flag
            );
            assert!(
                help.contains(&format!("--{}", s.flag)),
                "{who}: not in --help"
            );
            match s.env {
                Env::Var(v) => {
                    assert!(v.starts_with("SDN_"), "{who}: variable {v}");
                    assert!(vars.insert(v), "{who}: variable {v} twice");
                    assert!(Config::env_names().iter().any(|n| n == v), "{who}: {v}");
                }
                Env::None(why) => assert!(why.len() > 10, "{who}: say why it has no variable"),
            }
            assert!(
                !s.doc.is_empty() && !s.doc.contains('\n') && !s.doc.ends_with('.'),
                "{who}: one doc line without a trailing period: {:?}",
                s.doc
            );
            assert!(!s.value_name.is_empty(), "{who}: value name");
            assert!(!s.default.text().is_empty(), "{who}: default shown");
            // A default shown as a value is the default.
            if let Shown::Value(v) = s.default {
                let mut c = named.clone();
                s.apply(&mut c, &[v.to_string()])
                    .unwrap_or_else(|e| panic!("{who}: its default {v:?}: {e}"));
                assert_eq!(
                    c, named,
                    "{who}: the default shown, {v:?}, is not the default"
                );
            }
            // The check runs (and passes on the default).
            assert_eq!(s.check(&named), Ok(()), "{who}");
        }
    }

    #[test]
    fn ovsdb_takes_what_the_client_takes() {
        for ok in [
            "unix:/run/openvswitch/db.sock",
            "unix:db.sock",
            "tcp:10.0.0.1",
            "tcp:10.0.0.1:6640",
            "tcp:ovsdb.example:6641",
            "tcp:[2001:db8::1]:6640",
        ] {
            let t: OvsdbTarget = ok.parse().unwrap_or_else(|e| panic!("{ok}: {e}"));
            assert_eq!(t.to_string(), ok);
        }
        for bad in ["db.sock", "tcp:", "unix:", "tcp:[::1", "ssl:1.2.3.4:6640"] {
            assert!(bad.parse::<OvsdbTarget>().is_err(), "{bad}");
        }
    }

    #[test]
    fn enumerated_settings_refuse_unknown_values_from_a_file_too() {
        let dir = std::env::temp_dir().join(format!("sdn-config-enum-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("agent.yaml");
        for (text, want) in [
            ("mode: flat\n", "networkpolicy"),
            ("datapathType: dpdk\n", "netdev"),
            ("ovsdb: db.sock\n", "unix:<path>"),
            ("metricsAddress: localhost\n", "expected IP:PORT"),
            ("logFormat: yaml\n", "json"),
        ] {
            std::fs::write(&f, format!("nodeName: a\n{text}")).unwrap();
            let e = Config::from_file(&f).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
        std::fs::write(&f, "nodeName: a\nmetricsAddress: \"\"\nmode: subnet\n").unwrap();
        let c = Config::from_file(&f).unwrap();
        assert_eq!((c.metrics_address(), c.mode), (None, Mode::Subnet));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_settings_reference_is_generated_from_the_settings() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/settings.md");
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == reference(),
            "docs/settings.md is not what the settings say: run `sdn-agent settings > docs/settings.md`"
        );
    }
}
