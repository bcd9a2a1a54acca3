//! A node's first start: the ClusterNetwork the settings describe, this node's HostSubnet
//! (a free subnet, its host IP kept current) and the `default` NetNamespace, written once; a
//! directory that disagrees with the settings is reported with both values.

use std::fs;

use std::net::Ipv4Addr;

use std::path::Path;

use flows::Mode;

use ipnet::Ipv4Net;

use crate::config::{ClusterNetworkSetting as CidrEntry, Config};
use crate::types::{
    ClusterNetwork, ClusterNetworkEntry, ClusterObject, HostSubnet, Kind, NetNamespace,
    DEFAULT_NAMESPACE,
};
use crate::validate::{PLUGIN_MULTITENANT, PLUGIN_NETWORKPOLICY, PLUGIN_SUBNET};
use crate::{ClusterError, ClusterState};

use super::*;

/// The cluster-wide settings from the agent's configuration that the `default` ClusterNetwork
/// must agree with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNetworkSpec {
    /// Cluster networks with their host subnet lengths.
    pub cluster_networks: Vec<CidrEntry>,
    /// The service network.
    pub service_network: Ipv4Net,
    /// VXLAN UDP port.
    pub vxlan_port: u16,
    /// Overlay MTU.
    pub mtu: u32,
    /// Isolation mode (`pluginName`).
    pub mode: Mode,
}

impl ClusterNetworkSpec {
    /// The spec of an agent configuration.
    pub fn from_config(cfg: &Config) -> ClusterNetworkSpec {
        ClusterNetworkSpec {
            cluster_networks: cfg.cluster_networks.clone(),
            service_network: cfg.service_network,
            vxlan_port: cfg.vxlan_port,
            mtu: cfg.mtu,
            mode: cfg.mode,
        }
    }

    /// The `pluginName` of a mode.
    pub fn plugin_name(mode: Mode) -> &'static str {
        match mode {
            Mode::Subnet => PLUGIN_SUBNET,
            Mode::Multitenant => PLUGIN_MULTITENANT,
            Mode::NetworkPolicy => PLUGIN_NETWORKPOLICY,
        }
    }

    /// The `default` ClusterNetwork this spec describes.
    pub fn to_object(&self) -> ClusterNetwork {
        ClusterNetwork::new(
            self.cluster_networks
                .iter()
                .map(|e| ClusterNetworkEntry {
                    cidr: e.cidr.to_string(),
                    host_subnet_length: u32::from(e.host_subnet_length),
                })
                .collect(),
            &self.service_network.to_string(),
            Some(Self::plugin_name(self.mode)),
            Some(u32::from(self.vxlan_port)),
            Some(self.mtu),
        )
    }

    /// The first field on which `cn` disagrees with this spec: (field, value in the object,
    /// value in the spec). Unset optional fields (`pluginName`, `mtu`) agree with anything.
    pub fn difference(&self, cn: &ClusterNetwork) -> Option<(&'static str, String, String)> {
        let show = |entries: &[CidrEntry]| {
            entries
                .iter()
                .map(|e| format!("{} (hostSubnetLength {})", e.cidr, e.host_subnet_length))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let entries = match cn.entries() {
            Ok(e) => show(&e),
            Err(e) => format!("an invalid list ({e})"),
        };
        let wanted = show(&self.cluster_networks);
        if entries != wanted {
            return Some(("clusterNetworks", entries, wanted));
        }
        if cn.service_net().ok() != Some(self.service_network) {
            return Some((
                "serviceNetwork",
                cn.service_network.clone(),
                self.service_network.to_string(),
            ));
        }
        let port = cn.vxlan_port().ok();
        if port != Some(self.vxlan_port) {
            let shown = cn
                .vxlan_port
                .map(|p| p.to_string())
                .unwrap_or_else(|| "unset (4789)".into());
            return Some(("vxlanPort", shown, self.vxlan_port.to_string()));
        }
        if let Some(mtu) = cn.mtu.filter(|m| *m != self.mtu) {
            return Some(("mtu", mtu.to_string(), self.mtu.to_string()));
        }
        if let Ok(Some(mode)) = cn.mode() {
            if mode != self.mode {
                return Some((
                    "pluginName",
                    cn.plugin_name.clone().unwrap_or_default(),
                    Self::plugin_name(self.mode).to_string(),
                ));
            }
        }
        None
    }
}

/// Prepares the state directory for this node's start, idempotently, and returns the state:
///
/// - creates `dir` if needed; tolerates files with problems as the running agent does (their
///   objects are missing, conflicting definitions are left out), but refuses
///   ([`ClusterError::Broken`]) when the ClusterNetwork or this node's HostSubnet is missing
///   while any file has a problem, since it may be in that file and writing another would
///   duplicate it; for the same reason a missing `default` NetNamespace is then not written;
/// - no ClusterNetwork: writes one from `spec`; one that disagrees with `spec`:
///   [`ClusterError::ConfigMismatch`] naming the field and both values;
/// - no HostSubnet for `node_name`: allocates the first free node subnet and writes
///   `hostsubnet-<node>.yaml` (hostIP `node_ip`, or 127.0.0.1 when not configured) with a new
///   uid; an existing one whose hostIP differs from a configured `node_ip` is rewritten when it
///   lives in `hostsubnet-<node>.yaml`, else [`ClusterError::HostIpMismatch`];
/// - no NetNamespace `default`: writes it with netid 0.
///
/// A second call with the same arguments writes nothing.
pub fn seed(
    dir: &Path,
    node_name: &str,
    node_ip: Option<Ipv4Addr>,
    spec: &ClusterNetworkSpec,
) -> Result<ClusterState, ClusterError> {
    fs::create_dir_all(dir).map_err(|e| ClusterError::io(dir, "create", e))?;
    let loaded = load_dir(dir);
    // Bad files elsewhere are tolerated as the running agent tolerates them; only what seeding
    // would otherwise write a second copy of must be readable.
    if !loaded.errors.is_empty() {
        let missing = if loaded.state.cluster_network.is_none() {
            Some("the ClusterNetwork \"default\"".to_string())
        } else if loaded.state.host_subnet_of(node_name).is_none() {
            Some(format!("this node's HostSubnet {node_name:?}"))
        } else {
            None
        };
        if let Some(missing) = missing {
            return Err(ClusterError::Broken {
                dir: dir.to_path_buf(),
                missing,
                errors: loaded.errors,
            });
        }
    }
    let mut state = loaded.state;
    let mut wrote = false;
    let with_uid = |obj: ClusterObject| {
        let mut obj = obj;
        obj.metadata_mut().uid = Some(new_uid());
        obj
    };

    match &state.cluster_network {
        None => {
            let cn = spec.to_object();
            let path = StandaloneSource::write_object(dir, &with_uid(cn.clone().into()))?;
            tracing::info!(file = %path.display(), "wrote the ClusterNetwork from the configuration");
            state.cluster_network = Some(cn);
            wrote = true;
        }
        Some(cn) => {
            if let Some((field, in_file, in_config)) = spec.difference(cn) {
                let file = loaded
                    .origins
                    .get(&(Kind::ClusterNetwork, cn.name().to_string()))
                    .cloned()
                    .unwrap_or_else(|| dir.to_path_buf());
                return Err(ClusterError::ConfigMismatch {
                    file,
                    field,
                    in_file,
                    in_config,
                });
            }
        }
    }

    wrote |= seed_host_subnet(dir, &state, &loaded.origins, node_name, node_ip)?;

    if !state.net_namespaces.contains_key(DEFAULT_NAMESPACE) && !loaded.errors.is_empty() {
        tracing::error!(
            "the NetNamespace \"default\" cannot be read while the state directory has problems; \
             not writing one (it may be in a file that does not parse): pods of namespace \
             default cannot be added until it is readable"
        );
    } else if !state.net_namespaces.contains_key(DEFAULT_NAMESPACE) {
        let nn = NetNamespace::new(DEFAULT_NAMESPACE, 0);
        StandaloneSource::write_object(dir, &with_uid(nn.into()))?;
        wrote = true;
    }

    if wrote {
        Ok(load_dir(dir).state)
    } else {
        Ok(state)
    }
}

/// This node's HostSubnet: a new one with the first free subnet, or the existing one's hostIP
/// brought to the configured node IP (only in its own file). Returns whether it wrote.
fn seed_host_subnet(
    dir: &Path,
    state: &ClusterState,
    origins: &std::collections::BTreeMap<(Kind, String), std::path::PathBuf>,
    node_name: &str,
    node_ip: Option<Ipv4Addr>,
) -> Result<bool, ClusterError> {
    let with_uid = |obj: ClusterObject| {
        let mut obj = obj;
        obj.metadata_mut().uid = Some(new_uid());
        obj
    };
    let own = dir.join(StandaloneSource::file_name(Kind::HostSubnet, node_name));
    match state.host_subnet_of(node_name) {
        Some(hs) => {
            if let Some(ip) = node_ip.filter(|ip| hs.host_ip_addr().ok() != Some(*ip)) {
                let file = origins
                    .get(&(Kind::HostSubnet, node_name.to_string()))
                    .cloned()
                    .unwrap_or_else(|| own.clone());
                if file != own {
                    return Err(ClusterError::HostIpMismatch {
                        file,
                        node: node_name.into(),
                        in_file: hs.host_ip.clone(),
                        in_config: ip.to_string(),
                        own,
                    });
                }
                let mut updated = hs.clone();
                tracing::info!(node = node_name, from = %hs.host_ip, to = %ip, "updating this node's HostSubnet hostIP");
                updated.host_ip = ip.to_string();
                StandaloneSource::write_object(dir, &updated.into())?;
                return Ok(true);
            }
            Ok(false)
        }
        None => {
            let subnet = state
                .allocate_subnet()
                .ok_or_else(|| ClusterError::SubnetsExhausted {
                    node: node_name.into(),
                    networks: state
                        .cluster_entries()
                        .iter()
                        .map(|e| format!("{} with /{} node subnets", e.cidr, e.node_prefix()))
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
            let ip = node_ip.unwrap_or(FALLBACK_NODE_IP);
            let hs = HostSubnet::new(node_name, &ip.to_string(), &subnet.to_string());
            let path = StandaloneSource::write_object(dir, &with_uid(hs.into()))?;
            tracing::info!(file = %path.display(), node = node_name, %subnet, "allocated this node's subnet");
            Ok(true)
        }
    }
}
