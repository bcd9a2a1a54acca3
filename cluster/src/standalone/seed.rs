//! A node's first start: the ClusterNetwork the settings describe, this node's HostSubnet
//! (a free subnet, its host IP kept current) and the `default` NetNamespace, written once; a
//! directory that disagrees with the settings is reported with both values.

use std::fs;

use std::net::IpAddr;

use std::path::Path;

use flows::Mode;

use ipnet::{Ipv4Net, Ipv6Net};

use crate::config::{Config, Ipv4ClusterNetwork as CidrEntry, Ipv6ClusterNetwork};
use crate::types::annotations;
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
    /// The IPv4 service network (none on an IPv6-only cluster).
    pub service_network: Option<Ipv4Net>,
    /// The IPv6 cluster network of a dual-stack cluster.
    pub ipv6_network: Option<Ipv6ClusterNetwork>,
    /// The IPv6 service network.
    pub ipv6_service_network: Option<Ipv6Net>,
    /// VXLAN UDP port.
    pub vxlan_port: u16,
    /// Overlay MTU.
    pub mtu: u32,
    /// Isolation mode (`pluginName`).
    pub mode: Mode,
}

impl ClusterNetworkSpec {
    /// The spec of an agent configuration, or why it cannot be written: a configuration
    /// without a cluster network of either family, or with IPv4 networks and no IPv4 service
    /// network (the settings' validation refuses both first).
    pub fn from_config(cfg: &Config) -> Result<ClusterNetworkSpec, ClusterError> {
        let ipv4 = cfg.ipv4_cluster_networks();
        let service_network = cfg.service_network.v4();
        if !ipv4.is_empty() && service_network.is_none() {
            return Err(ClusterError::Unsupported(format!(
                "serviceNetwork {} has no IPv4 network while clusterNetworks has one",
                cfg.service_network
            )));
        }
        if ipv4.is_empty() && cfg.ipv6_cluster_network().is_none() {
            return Err(ClusterError::Unsupported(
                "clusterNetworks is empty: give an IPv4 network, an IPv6 one, or both".into(),
            ));
        }
        Ok(ClusterNetworkSpec {
            cluster_networks: ipv4,
            service_network,
            ipv6_network: cfg.ipv6_cluster_network(),
            ipv6_service_network: cfg.service_network.v6(),
            vxlan_port: cfg.vxlan_port,
            mtu: cfg.mtu,
            mode: cfg.mode,
        })
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
        let mut cn = ClusterNetwork::new(
            self.cluster_networks
                .iter()
                .map(|e| ClusterNetworkEntry {
                    cidr: e.cidr.to_string(),
                    host_subnet_length: u32::from(e.host_subnet_length),
                })
                .collect(),
            &self
                .service_network
                .map(|s| s.to_string())
                .unwrap_or_default(),
            Some(Self::plugin_name(self.mode)),
            Some(u32::from(self.vxlan_port)),
            Some(self.mtu),
        );
        let mut notes = std::collections::BTreeMap::new();
        if let Some(v6) = &self.ipv6_network {
            notes.insert(
                annotations::IPV6_CLUSTER_NETWORK.to_string(),
                format!("{},{}", v6.cidr, v6.host_subnet_length),
            );
        }
        if let Some(svc) = &self.ipv6_service_network {
            notes.insert(
                annotations::IPV6_SERVICE_NETWORK.to_string(),
                svc.to_string(),
            );
        }
        if !notes.is_empty() {
            cn.metadata.annotations = Some(notes);
        }
        cn
    }

    /// `cn` with this spec's IPv6 networks added, when that is all it lacks (a running IPv4
    /// cluster turning dual stack); `None` when it has them already or differs otherwise.
    pub fn with_ipv6_added(&self, cn: &ClusterNetwork) -> Option<ClusterNetwork> {
        if !cn.has_no_ipv6() || self.ipv6_network.is_none() {
            return None;
        }
        let mut with = cn.clone();
        let notes = with
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        notes.extend(self.to_object().metadata.annotations.unwrap_or_default());
        self.difference(&with).is_none().then_some(with)
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
        let v6 = match cn.ipv6_entry() {
            Ok(Some(e)) => format!("{},{}", e.cidr, e.host_subnet_length),
            Ok(None) => "none".into(),
            Err(e) => format!("an invalid value ({e})"),
        };
        let wanted = self.ipv6_network.map_or("none".into(), |e| {
            format!("{},{}", e.cidr, e.host_subnet_length)
        });
        if v6 != wanted {
            return Some(("the IPv6 cluster network", v6, wanted));
        }
        let svc6 = match cn.ipv6_service_net() {
            Ok(n) => n.map_or("none".into(), |n| n.to_string()),
            Err(e) => format!("an invalid value ({e})"),
        };
        let wanted = self
            .ipv6_service_network
            .map_or("none".into(), |n| n.to_string());
        if svc6 != wanted {
            return Some(("the IPv6 service network", svc6, wanted));
        }
        if cn.ipv4_service_net().ok() != Some(self.service_network) {
            return Some((
                "serviceNetwork",
                cn.service_network.clone(),
                self.service_network
                    .map_or("none (IPv6-only)".into(), |s| s.to_string()),
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
    node_ip: Option<IpAddr>,
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
            let file = loaded
                .origins
                .get(&(Kind::ClusterNetwork, cn.name().to_string()))
                .cloned()
                .unwrap_or_else(|| dir.to_path_buf());
            // A running IPv4 cluster gains its IPv6 network: an addition, never a change.
            if let Some(with_v6) = spec.with_ipv6_added(cn) {
                let own = dir.join(StandaloneSource::file_name(Kind::ClusterNetwork, cn.name()));
                if file != own {
                    return Err(ClusterError::NotOwnFile {
                        file,
                        what: "the ClusterNetwork \"default\" needs the IPv6 cluster network of \
                               the configuration"
                            .into(),
                        own,
                    });
                }
                let path = StandaloneSource::write_object(dir, &with_v6.clone().into())?;
                tracing::info!(file = %path.display(), "added the IPv6 cluster network to the ClusterNetwork");
                state.cluster_network = Some(with_v6);
                wrote = true;
            } else if let Some((field, in_file, in_config)) = spec.difference(cn) {
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
    wrote |= seed_ipv6_subnet(dir, &state, &loaded.origins, node_name)?;

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

/// This node's IPv6 subnet when the cluster has an IPv6 network and the node has none yet:
/// the first free one, written into its HostSubnet (only in its own file). Returns whether it
/// wrote.
fn seed_ipv6_subnet(
    dir: &Path,
    state: &ClusterState,
    origins: &std::collections::BTreeMap<(Kind, String), std::path::PathBuf>,
    node_name: &str,
) -> Result<bool, ClusterError> {
    // A HostSubnet written by this start got its IPv6 subnet when it was made.
    let (Some(v6), Some(hs)) = (
        state.ipv6_cluster_network(),
        state.host_subnet_of(node_name),
    ) else {
        return Ok(false);
    };
    if hs.ipv6_subnet().map_or(true, |s| s.is_some()) {
        // Set already, or set to something invalid: the loader reports that.
        return Ok(false);
    }
    let own = dir.join(StandaloneSource::file_name(Kind::HostSubnet, node_name));
    let file = origins
        .get(&(Kind::HostSubnet, node_name.to_string()))
        .cloned()
        .unwrap_or_else(|| own.clone());
    if file != own {
        return Err(ClusterError::NotOwnFile {
            file,
            what: format!(
                "HostSubnet {node_name:?} needs an IPv6 subnet of {} (annotation {})",
                v6.cidr,
                annotations::IPV6_SUBNET
            ),
            own,
        });
    }
    let mut updated = hs.clone();
    let subnet = give_ipv6_subnet(state, node_name, &mut updated)?.unwrap_or(v6.cidr);
    let path = StandaloneSource::write_object(dir, &updated.into())?;
    tracing::info!(file = %path.display(), node = node_name, %subnet, "allocated this node's IPv6 subnet");
    Ok(true)
}

/// Gives `hs` the first free IPv6 subnet when the cluster has an IPv6 network (the subnet, or
/// `None` without one).
fn give_ipv6_subnet(
    state: &ClusterState,
    node_name: &str,
    hs: &mut HostSubnet,
) -> Result<Option<Ipv6Net>, ClusterError> {
    let Some(v6) = state.ipv6_cluster_network() else {
        return Ok(None);
    };
    let subnet = state
        .allocate_ipv6_subnet()
        .ok_or_else(|| ClusterError::SubnetsExhausted {
            node: node_name.into(),
            networks: format!("{} with /{} node subnets", v6.cidr, v6.node_prefix()),
        })?;
    hs.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(annotations::IPV6_SUBNET.into(), subnet.to_string());
    Ok(Some(subnet))
}

/// This node's HostSubnet: a new one with the first free subnet, or the existing one's hostIP
/// brought to the configured node IP (only in its own file). Returns whether it wrote.
fn seed_host_subnet(
    dir: &Path,
    state: &ClusterState,
    origins: &std::collections::BTreeMap<(Kind, String), std::path::PathBuf>,
    node_name: &str,
    node_ip: Option<IpAddr>,
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
            // An IPv6-only cluster's HostSubnet has an empty subnet and its IPv6 one only.
            let ipv6_only = state.cluster_entries().is_empty();
            let subnet = if ipv6_only {
                None
            } else {
                Some(state.allocate_subnet().ok_or_else(|| {
                    ClusterError::SubnetsExhausted {
                        node: node_name.into(),
                        networks: state
                            .cluster_entries()
                            .iter()
                            .map(|e| format!("{} with /{} node subnets", e.cidr, e.node_prefix()))
                            .collect::<Vec<_>>()
                            .join(", "),
                    }
                })?)
            };
            let ip = node_ip.unwrap_or(if ipv6_only {
                IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
            } else {
                IpAddr::V4(FALLBACK_NODE_IP)
            });
            let mut hs = HostSubnet::new(
                node_name,
                &ip.to_string(),
                &subnet.map(|s| s.to_string()).unwrap_or_default(),
            );
            let subnet6 = give_ipv6_subnet(state, node_name, &mut hs)?;
            let path = StandaloneSource::write_object(dir, &with_uid(hs.into()))?;
            tracing::info!(file = %path.display(), node = node_name,
                subnet = %subnet.map_or_else(|| "none".into(), |s| s.to_string()),
                subnet6 = %subnet6.map_or_else(|| "none".into(), |s| s.to_string()),
                "allocated this node's subnet");
            Ok(true)
        }
    }
}
