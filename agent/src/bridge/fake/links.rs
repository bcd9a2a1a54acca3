//! Fake netlink: network namespaces and veth pairs (see [`super`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::bridge::seams::PodLinks;
use crate::host::netlink::{NetlinkError, PodLink, PodLinkSpec, PodLinkState, RouteSpec};

use super::{lock, Faults};

/// One fake veth pair (for a pool pair, with the pod interface on top of its peer, if any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FakeLink {
    /// The pod's netns (empty: a free pool pair, its peer parked).
    pub netns: PathBuf,
    /// The pod interface's name (a free pool pair's: its peer's).
    pub ifname: String,
    /// A pool pair's peer name: the pod interface sits on top of it and goes without the pair.
    pub peer: Option<String>,
    /// The pod end's state.
    pub state: PodLinkState,
    /// Whether the node kernel was taken out of the host end's path.
    pub isolated: bool,
}

#[derive(Debug, Default)]
struct LinksState {
    netns: BTreeSet<PathBuf>,
    /// By host end name.
    links: BTreeMap<String, FakeLink>,
    next_index: u32,
    /// Pool peers given the MLD drop, in order.
    quieted: Vec<String>,
}

/// Fake netlink: network namespaces and veth pairs (see the module docs). Clones share state.
#[derive(Debug, Clone, Default)]
pub(crate) struct FakeLinks {
    state: Arc<Mutex<LinksState>>,
    /// Failure injection.
    pub faults: Arc<Faults>,
}

impl FakeLinks {
    /// No namespaces, no links.
    pub(crate) fn new() -> FakeLinks {
        FakeLinks::default()
    }

    /// Creates a network namespace (as `ip netns add` does), returning its path.
    pub(crate) fn add_netns(&self, name: &str) -> PathBuf {
        let p = PathBuf::from(format!("/run/netns/{name}"));
        lock(&self.state).netns.insert(p.clone());
        p
    }

    /// Deletes a namespace; its veths go with it, and the pod interfaces on pool pairs (the
    /// pairs stay, free).
    pub(crate) fn remove_netns(&self, path: &Path) {
        let mut s = lock(&self.state);
        s.netns.remove(path);
        s.links.retain(|_, l| l.netns != path || l.peer.is_some());
        for l in s.links.values_mut().filter(|l| l.netns == path) {
            free(l);
        }
    }

    /// The pool peers given the MLD drop ([`PodLinks::quiet_pool_peer`]), in order.
    pub(crate) fn quieted(&self) -> Vec<String> {
        lock(&self.state).quieted.clone()
    }

    /// The veth whose host end is `name`.
    pub(crate) fn link(&self, name: &str) -> Option<FakeLink> {
        lock(&self.state).links.get(name).cloned()
    }

    /// Host ends of every veth.
    pub(crate) fn host_ends(&self) -> Vec<String> {
        lock(&self.state).links.keys().cloned().collect()
    }

    /// Removes a parked pool peer (and so its pair) behind the agent's back, as when an ADD
    /// was cut off after moving it into a namespace that is gone since.
    pub(crate) fn remove_parked_peer(&self, peer: &str) {
        lock(&self.state)
            .links
            .retain(|_, l| !(l.netns.as_os_str().is_empty() && l.ifname == peer));
    }

    /// Sets whether a host veth is hardened (an older agent's veth is not).
    pub(crate) fn set_isolated(&self, host: &str, isolated: bool) {
        if let Some(l) = lock(&self.state).links.get_mut(host) {
            l.isolated = isolated;
        }
    }

    /// Changes a pod interface behind the agent's back (drift).
    pub(crate) fn edit(&self, host: &str, f: impl FnOnce(&mut PodLinkState)) {
        if let Some(l) = lock(&self.state).links.get_mut(host) {
            f(&mut l.state);
        }
    }

    pub(super) fn exists(&self, name: &str) -> bool {
        lock(&self.state).links.contains_key(name)
    }
}

/// A pool pair without its pod interface.
fn free(l: &mut FakeLink) {
    if let Some(peer) = &l.peer {
        l.netns = PathBuf::new();
        l.ifname = peer.clone();
        l.state.addresses.clear();
        l.state.routes.clear();
    }
}

fn os_error(step: String, errno: i32) -> NetlinkError {
    NetlinkError::Os {
        step,
        source: io::Error::from_raw_os_error(errno),
        extack: None,
    }
}

impl PodLinks for FakeLinks {
    async fn create_pod_link(&self, spec: &PodLinkSpec) -> Result<PodLink, NetlinkError> {
        crate::host::netlink::validate_ifname(&spec.host_ifname)?;
        crate::host::netlink::validate_ifname(&spec.ifname)?;
        if self.faults.hit("create_pod_link") {
            return Err(os_error(
                format!("creating veth {}", spec.host_ifname),
                libc::EIO,
            ));
        }
        let mut s = lock(&self.state);
        if !s.netns.contains(&spec.netns) {
            return Err(NetlinkError::Netns {
                netns: spec.netns.clone(),
                action: "opening",
                source: io::Error::from_raw_os_error(libc::ENOENT),
            });
        }
        if s.links
            .values()
            .any(|l| l.netns == spec.netns && l.ifname == spec.ifname)
        {
            return Err(NetlinkError::PodInterfaceExists {
                netns: spec.netns.clone(),
                ifname: spec.ifname.clone(),
            });
        }
        if let Some(peer) = &spec.pool_peer {
            // A pooled pair: its peer must be parked, free.
            let parked = s
                .links
                .get(&spec.host_ifname)
                .is_some_and(|l| l.netns.as_os_str().is_empty() && l.ifname == *peer);
            if !parked {
                return Err(os_error(
                    format!("creating a macvlan on pool veth {peer}"),
                    libc::EINVAL,
                ));
            }
        } else if s.links.contains_key(&spec.host_ifname) {
            return Err(os_error(
                format!("creating veth {}", spec.host_ifname),
                libc::EEXIST,
            ));
        }
        if let Some(v4) = spec
            .ipv4
            .as_ref()
            .filter(|v4| !v4.address.contains(&v4.gateway))
        {
            return Err(NetlinkError::InvalidSpec {
                ifname: spec.ifname.clone(),
                netns: spec.netns.clone(),
                reason: format!("gateway {} is outside {}", v4.gateway, v4.address),
            });
        }
        s.next_index += 1;
        let host_index = 100 + s.next_index;
        let host_mac = [0xee, 0xee, 0, 0, (host_index >> 8) as u8, host_index as u8];
        let routes: Vec<RouteSpec> = spec
            .ipv4
            .iter()
            .flat_map(|v4| {
                std::iter::once(RouteSpec {
                    dst: ipnet::Ipv4Net::default(),
                    via: Some(v4.gateway),
                })
                .chain(v4.routes.iter().copied())
            })
            .collect();
        s.links.insert(
            spec.host_ifname.clone(),
            FakeLink {
                netns: spec.netns.clone(),
                ifname: spec.ifname.clone(),
                state: PodLinkState {
                    mac: spec.mac,
                    mtu: spec.mtu,
                    up: true,
                    addresses: spec.ipv4.iter().map(|v4| v4.address).collect(),
                    routes,
                    addresses6: spec.ipv6.iter().map(|v6| v6.address).collect(),
                    routes6: spec
                        .ipv6
                        .iter()
                        .flat_map(|v6| {
                            std::iter::once(crate::host::netlink::Route6Spec {
                                dst: ipnet::Ipv6Net::default(),
                                via: Some(v6.gateway),
                            })
                            .chain(v6.routes.iter().copied())
                        })
                        .collect(),
                    tx_checksum: !spec.tx_checksum_off,
                },
                peer: spec.pool_peer.clone(),
                // The real create_pod_link hardens the host end.
                isolated: true,
            },
        );
        Ok(PodLink {
            host_ifname: spec.host_ifname.clone(),
            host_index,
            pod_ifname: spec.ifname.clone(),
            pod_mac: spec.mac,
            host_mac,
        })
    }

    async fn delete_host_veth(&self, name: &str) -> Result<bool, NetlinkError> {
        if self.faults.hit("delete_host_veth") {
            return Err(os_error(format!("deleting {name}"), libc::EIO));
        }
        Ok(lock(&self.state).links.remove(name).is_some())
    }

    async fn inspect_pod_interface(
        &self,
        netns: &Path,
        ifname: &str,
    ) -> Result<PodLinkState, NetlinkError> {
        let s = lock(&self.state);
        if !s.netns.contains(netns) {
            return Err(NetlinkError::Netns {
                netns: netns.to_path_buf(),
                action: "opening",
                source: io::Error::from_raw_os_error(libc::ENOENT),
            });
        }
        s.links
            .values()
            .find(|l| l.netns == netns && l.ifname == ifname)
            .map(|l| l.state.clone())
            .ok_or_else(|| NetlinkError::LinkNotFound {
                ifname: ifname.into(),
                netns: format!("netns {}", netns.display()),
            })
    }

    async fn link_exists(&self, name: &str) -> Result<Option<u32>, NetlinkError> {
        let s = lock(&self.state);
        let parked_peer = s
            .links
            .values()
            .any(|l| l.netns.as_os_str().is_empty() && l.ifname == name);
        Ok((s.links.contains_key(name) || parked_peer).then_some(1))
    }

    async fn release_pool_link(
        &self,
        peer: &str,
        netns: Option<&Path>,
        ifname: &str,
    ) -> Result<bool, NetlinkError> {
        if self.faults.hit("release_pool_link") {
            return Err(os_error(format!("deleting {ifname}"), libc::EIO));
        }
        let mut s = lock(&self.state);
        let Some(l) = s
            .links
            .values_mut()
            .find(|l| l.peer.as_deref() == Some(peer))
        else {
            return Ok(false);
        };
        if l.netns.as_os_str().is_empty() {
            return Ok(true);
        }
        if netns == Some(l.netns.as_path()) && l.ifname == ifname {
            free(l);
            return Ok(true);
        }
        Ok(false)
    }

    async fn pool_peer_parked(&self, name: &str) -> Result<bool, NetlinkError> {
        Ok(lock(&self.state)
            .links
            .values()
            .any(|l| l.netns.as_os_str().is_empty() && l.ifname == name))
    }

    async fn quiet_pool_peer(&self, name: &str) {
        lock(&self.state).quieted.push(name.to_string());
    }

    async fn create_pool_veth(
        &self,
        host: &str,
        peer: &str,
        mtu: u32,
        tx_checksum_off: bool,
    ) -> Result<(), NetlinkError> {
        crate::host::netlink::validate_ifname(host)?;
        crate::host::netlink::validate_ifname(peer)?;
        if self.faults.hit("create_pool_veth") {
            return Err(os_error(format!("creating pool veth {host}"), libc::EIO));
        }
        let mut s = lock(&self.state);
        if s.links.contains_key(host) {
            return Err(os_error(format!("creating pool veth {host}"), libc::EEXIST));
        }
        s.links.insert(
            host.into(),
            FakeLink {
                netns: PathBuf::new(),
                ifname: peer.into(),
                state: PodLinkState {
                    mac: [0; 6],
                    mtu,
                    up: false,
                    addresses: Vec::new(),
                    routes: Vec::new(),
                    addresses6: Vec::new(),
                    routes6: Vec::new(),
                    tx_checksum: !tx_checksum_off,
                },
                peer: Some(peer.into()),
                isolated: true,
            },
        );
        Ok(())
    }

    async fn links_named(&self, prefix: &str) -> Result<Vec<String>, NetlinkError> {
        Ok(lock(&self.state)
            .links
            .keys()
            .filter(|n| n.starts_with(prefix))
            .cloned()
            .collect())
    }

    fn isolate_host_veth(&self, name: &str) -> Result<(), NetlinkError> {
        match lock(&self.state).links.get_mut(name) {
            Some(l) => {
                l.isolated = true;
                Ok(())
            }
            None => Err(NetlinkError::LinkNotFound {
                ifname: name.into(),
                netns: "the node netns".into(),
            }),
        }
    }
}
