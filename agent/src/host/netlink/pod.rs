//! Pod interfaces: create (veth pair with its pod end configured inside the pod netns),
//! delete, inspect. See the module docs of [`super`] for the creation sequence and why the veth
//! peer is created directly inside the pod netns.
//!
//! Rollback: from the moment the creation request is sent, a guard owns the host veth. Any
//! later failure deletes it (deleting the host end removes the pod end too) before the error is
//! returned; if the caller drops the operation midway (its own deadline), the guard's `Drop`
//! spawns the deletion on the runtime.
//!
//! Why one piece: creating (or adopting from the pool), deleting and inspecting a
//! pod interface share the veth guard, the pod-netns session and the message builders.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::Path;

use futures::future::join_all;
use futures::TryStreamExt;
use ipnet::{Ipv4Net, Ipv6Net};
use netlink_packet_route::address::{AddressAttribute, AddressFlags};
use netlink_packet_route::link::{AfSpecInet6, AfSpecUnspec, In6AddrGenMode, MacVlanMode};
use netlink_packet_route::link::{InfoData, InfoKind, InfoVeth, LinkAttribute, LinkMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::AddressFamily;
use rtnetlink::{
    Handle, LinkMacVlan, LinkMessageBuilder, LinkUnspec, LinkVeth, RouteMessageBuilder,
};

use super::error::errno;
use super::netns::{open_netns, NetnsSession};
use super::{
    bounded, del_link, ethtool, fmt_mac, get_link, link_mac, link_mtu, link_up, on_off,
    validate_ifname, Netlink, NetlinkError, PodIpv6Spec, PodLink, PodLinkSpec, PodLinkState,
    Route6Spec, RouteSpec, OP_TIMEOUT,
};

/// Deletes the host veth on drop while armed (see the module docs).
struct VethGuard {
    handle: Handle,
    name: String,
    armed: bool,
}

impl Drop for VethGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (handle, name) = (self.handle.clone(), std::mem::take(&mut self.name));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let deleted = tokio::time::timeout(OP_TIMEOUT, del_link(&handle, &name)).await;
                tracing::warn!(
                    host_veth = %name,
                    ?deleted,
                    "pod link creation was cancelled: deleted its host veth"
                );
            });
        }
    }
}

impl Netlink {
    /// Creates the veth pair of a pod attachment and configures the pod end (see the module
    /// docs of [`super`]). Equals, in order:
    ///
    /// ```text
    /// ip link del HOST                       # a stale veth of an interrupted ADD, if any
    /// ip link add HOST mtu MTU up type veth peer name IFNAME address MAC mtu MTU netns NETNS
    /// ip -n NETNS link set IFNAME up; ip -n NETNS link set lo up
    /// ip -n NETNS addr add ADDRESS dev IFNAME
    /// ip -n NETNS route add default via GATEWAY dev IFNAME proto static
    /// ip -n NETNS route add DST [via GW | scope link] dev IFNAME proto static   # each route
    /// ethtool -K HOST tx off; ip netns exec NETNS ethtool -K IFNAME tx off   # if asked
    /// ```
    ///
    /// Not idempotent for the pod end: an interface named `ifname` already in the pod netns is
    /// [`NetlinkError::PodInterfaceExists`] and nothing is created. On any failure after the
    /// veth exists it is deleted before the error returns; if the future is dropped midway, the
    /// deletion is spawned on the runtime. Bounded by [`OP_TIMEOUT`]. About 1.5 ms on a 2-core
    /// VM, mostly kernel work (the veth creation alone is ~0.5 ms).
    pub async fn create_pod_link(&self, spec: &PodLinkSpec) -> Result<PodLink, NetlinkError> {
        validate_spec(spec)?;
        let mut guard = VethGuard {
            handle: self.handle(),
            name: spec.host_ifname.clone(),
            armed: false,
        };
        let step = format!(
            "creating veth {} with peer {} in netns {}",
            spec.host_ifname,
            spec.ifname,
            spec.netns.display()
        );
        let result = bounded(step, self.create_pod_link_steps(spec, &mut guard))
            .await
            .and_then(|r| r);
        if result.is_err() && guard.armed {
            guard.armed = false;
            let cleanup = bounded(
                format!("deleting host veth {}", spec.host_ifname),
                del_link(&self.node.handle, &spec.host_ifname),
            )
            .await;
            match cleanup {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(
                    host_veth = %spec.host_ifname,
                    error = %NetlinkError::nl("deleting host veth after a failed ADD", e),
                    "rollback failed"
                ),
                Err(e) => {
                    tracing::warn!(host_veth = %spec.host_ifname, error = %e, "rollback failed")
                }
            }
        }
        guard.armed = false;
        result
    }

    async fn create_pod_link_steps(
        &self,
        spec: &PodLinkSpec,
        guard: &mut VethGuard,
    ) -> Result<PodLink, NetlinkError> {
        let netns = spec.netns.as_path();
        let file = open_netns(netns)?;
        let node = self.handle();

        // In parallel: the pod-netns session (a thread enters the netns), and in the node netns
        // the removal of a stale host veth then the creation of the pair.
        let host_side = async {
            if let Some(peer) = &spec.pool_peer {
                return self
                    .macvlan_on_pool_peer(spec, peer, file.as_raw_fd(), guard)
                    .await;
            }
            let stale = del_link(&node, &spec.host_ifname).await.map_err(|e| {
                NetlinkError::nl(format!("deleting stale host veth {}", spec.host_ifname), e)
            })?;
            if stale {
                tracing::info!(
                    host_veth = %spec.host_ifname,
                    "deleted a stale host veth left by an interrupted ADD"
                );
            }
            guard.armed = true;
            let created = node
                .link()
                .add(veth_message(spec, file.as_raw_fd()))
                .execute()
                .await;
            Ok::<_, NetlinkError>(created)
        };
        let (session, created) = tokio::join!(
            NetnsSession::open(
                netns,
                &file,
                spec.tx_checksum_off && spec.pool_peer.is_none()
            ),
            host_side
        );
        if let Err(e) = created? {
            let exists = errno(&e) == Some(libc::EEXIST);
            return Err(match session {
                Ok(mut session) if exists => {
                    let h = session.handle();
                    match session.drive(get_link(&h, &spec.ifname)).await {
                        Ok(Ok(Some(_))) => NetlinkError::PodInterfaceExists {
                            netns: spec.netns.clone(),
                            ifname: spec.ifname.clone(),
                        },
                        _ => creating_error(spec, e),
                    }
                }
                // Entering the netns failing says more than the creation failing.
                Err(session_error) => session_error,
                Ok(_) => creating_error(spec, e),
            });
        }
        let mut session = session?;

        // Pod side: the interface and lo up and the index, then the address, then the routes.
        let pod = session.handle();
        let pod_side = configure_pod_side(&pod, spec);
        // Node side meanwhile: the host end's index and MAC, its checksum offload.
        let host_side = self.host_end(&node, spec);
        let (pod_result, host_result) = tokio::join!(session.drive(pod_side), host_side);
        pod_result??;
        let (host_index, host_mac) = host_result?;
        // A pool peer has it off already (see create_pool_veth).
        if spec.tx_checksum_off && spec.pool_peer.is_none() {
            set_pod_tx_checksum(&session, spec)?;
        }
        Ok(PodLink {
            host_ifname: spec.host_ifname.clone(),
            host_index,
            pod_ifname: spec.ifname.clone(),
            pod_mac: spec.mac,
            host_mac,
        })
    }

    /// A pooled pair: the pod interface is a passthru macvlan on its parked peer `peer`,
    /// created directly in the pod netns (`fd`; no device moves between namespaces: a move
    /// waits for an RCU grace period, tens of ms here). Passthru: the macvlan takes the peer's
    /// MAC (so the peer gets the pod's first), owns the peer alone (a second one is refused),
    /// and makes it promiscuous while it exists. The outer error is a step before the
    /// creation; the inner one the creation's, which the caller explains.
    async fn macvlan_on_pool_peer(
        &self,
        spec: &PodLinkSpec,
        peer: &str,
        fd: RawFd,
        guard: &mut VethGuard,
    ) -> Result<Result<(), rtnetlink::Error>, NetlinkError> {
        guard.armed = true;
        let parking = self.parking().await?;
        let index = super::pool_peer_index(parking, peer).await?;
        parking
            .handle
            .link()
            .set(
                LinkUnspec::new_with_index(index)
                    .address(spec.mac.to_vec())
                    .build(),
            )
            .execute()
            .await
            .map_err(|e| {
                NetlinkError::nl(format!("setting the pod's MAC on pool veth {peer}"), e)
            })?;
        let created = parking
            .handle
            .link()
            .add(
                LinkMessageBuilder::<LinkMacVlan>::new(&spec.ifname)
                    .link(index)
                    .mode(MacVlanMode::Passthrough)
                    .setns_by_fd(fd)
                    .mtu(spec.mtu)
                    .build(),
            )
            .execute()
            .await;
        Ok(created)
    }

    /// The host end of a new interface: its index and MAC, and (a new veth's) checksum
    /// offload and hardening; a pool pair's host end was configured when the pool made it.
    async fn host_end(
        &self,
        node: &Handle,
        spec: &PodLinkSpec,
    ) -> Result<(u32, [u8; 6]), NetlinkError> {
        let link = get_link(node, &spec.host_ifname)
            .await
            .map_err(|e| NetlinkError::nl(format!("looking up host veth {}", spec.host_ifname), e))?
            .ok_or_else(|| NetlinkError::LinkNotFound {
                ifname: spec.host_ifname.clone(),
                netns: "the node netns right after creating it".into(),
            })?;
        // A pool pair's host end was configured when the pool made it.
        if spec.pool_peer.is_none() {
            if spec.tx_checksum_off {
                self.set_tx_checksum(&spec.host_ifname, false)?;
            }
            super::isolate_host_veth(&spec.host_ifname)?;
        }
        let mac = link_mac(&link).ok_or_else(|| {
            NetlinkError::os(
                format!("reading the MAC of host veth {}", spec.host_ifname),
                std::io::Error::other("the kernel reported no 6-byte address"),
            )
        })?;
        Ok((link.header.index, mac))
    }

    /// Creates a veth pair for the port pool: the host end in the node netns, the peer in the
    /// pool's parking namespace ([`super::netns::Parking`]), where pods' interfaces are made on
    /// top of it, so that ADD and DEL make no link event where ovs-vswitchd runs:
    ///
    /// ```text
    /// ip link add HOST mtu MTU type veth peer name PEER mtu MTU netns PARKING
    /// ethtool -K HOST tx off; ip -n PARKING ... ethtool -K PEER tx off   # if asked
    /// sysctls taking the node kernel out of HOST's path               # see isolate_host_veth
    /// tc on PEER's egress dropping MLD                                # see quiet_pool_peer
    /// ip -n PARKING link set PEER up; ip link set HOST up
    /// ```
    ///
    /// The host end comes up last, configured, with its carrier at once: one link event for
    /// ovs-vswitchd besides the creation (no carrier change later, no IPv6 address coming and
    /// going). On a failure after the pair exists it is deleted before the error returns.
    pub async fn create_pool_veth(
        &self,
        host: &str,
        peer: &str,
        mtu: u32,
        tx_checksum_off: bool,
    ) -> Result<(), NetlinkError> {
        validate_ifname(host)?;
        validate_ifname(peer)?;
        let node = self.handle();
        let parking = self.parking().await?;
        let msg = LinkMessageBuilder::<LinkVeth>::new_with_info_kind(InfoKind::Veth)
            .name(host.to_string())
            .mtu(mtu)
            .set_info_data(InfoData::Veth(InfoVeth::Peer(
                LinkUnspec::new_with_name(peer)
                    .mtu(mtu)
                    .setns_by_fd(parking.file.as_raw_fd())
                    .build(),
            )))
            .build();
        bounded(format!("creating pool veth {host}"), async {
            node.link()
                .add(msg)
                .execute()
                .await
                .map_err(|e| NetlinkError::nl(format!("creating pool veth {host}"), e))
        })
        .await??;
        let up = |handle: Handle, name: &str| {
            let name = name.to_string();
            bounded(format!("bringing pool veth {name} up"), async move {
                handle
                    .link()
                    .set(LinkUnspec::new_with_name(&name).up().build())
                    .execute()
                    .await
                    .map_err(|e| NetlinkError::nl(format!("bringing pool veth {name} up"), e))
            })
        };
        let configured = async {
            if tx_checksum_off {
                self.set_tx_checksum(host, false)?;
                // A macvlan on the peer keeps its own checksum offload fixed on; the peer
                // turns what it sends into full checksums.
                ethtool::set_tx_checksum(parking.ioctl.as_fd(), peer, false).map_err(|e| {
                    NetlinkError::os(
                        format!("turning tx checksum offload off on pool veth {peer}"),
                        e,
                    )
                })?;
            }
            super::isolate_host_veth(host)?;
            // Before the peer comes up (a pod's interface will transmit through it).
            self.quiet_pool_peer(peer).await;
            // Both ends up for good: the host end keeps its carrier whether or not a pod
            // sits on the peer.
            up(parking.handle.clone(), peer).await??;
            up(node.clone(), host).await?
        }
        .await;
        if let Err(e) = configured {
            let _ = bounded(format!("deleting pool veth {host}"), del_link(&node, host)).await;
            return Err(e);
        }
        Ok(())
    }

    /// Deletes interface `ifname` in the pod netns (`ip -n NETNS link del IFNAME`); for a veth
    /// this removes the host end too. Idempotent: `Ok(false)` when the interface is absent, the
    /// netns file does not exist, or the file is no longer a netns (its namespace is gone).
    /// Bounded by [`OP_TIMEOUT`].
    pub async fn delete_pod_interface(
        &self,
        netns: &Path,
        ifname: &str,
    ) -> Result<bool, NetlinkError> {
        validate_ifname(ifname)?;
        let step = format!("deleting interface {ifname} in netns {}", netns.display());
        bounded(step.clone(), async {
            let file = match open_netns(netns) {
                Ok(file) => file,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(false),
                Err(e) => return Err(e),
            };
            let mut session = match NetnsSession::open(netns, &file, false).await {
                Ok(session) => session,
                Err(e @ NetlinkError::Netns { .. }) if e.raw_os_error() == Some(libc::EINVAL) => {
                    tracing::info!(netns = %netns.display(), error = %e, "not a netns any more");
                    return Ok(false);
                }
                Err(e) => return Err(e),
            };
            let h = session.handle();
            session
                .drive(del_link(&h, ifname))
                .await?
                .map_err(|e| NetlinkError::nl(step, e))
        })
        .await?
    }

    /// The state of interface `ifname` in the pod netns, for CNI CHECK (`ip -n NETNS addr show
    /// dev IFNAME; ip -n NETNS route show dev IFNAME; ethtool -k IFNAME`). A missing netns or
    /// interface is an error. Bounded by [`OP_TIMEOUT`].
    pub async fn inspect_pod_interface(
        &self,
        netns: &Path,
        ifname: &str,
    ) -> Result<PodLinkState, NetlinkError> {
        validate_ifname(ifname)?;
        let step = format!("inspecting interface {ifname} in netns {}", netns.display());
        bounded(step, async {
            let file = open_netns(netns)?;
            let mut session = NetnsSession::open(netns, &file, true).await?;
            let h = session.handle();
            let in_netns = |what: &str| format!("{what} of {ifname} in netns {}", netns.display());
            let (link, addresses, routes) = session
                .drive(async {
                    let link = get_link(&h, ifname)
                        .await
                        .map_err(|e| NetlinkError::nl(in_netns("looking up the link"), e))?
                        .ok_or_else(|| NetlinkError::LinkNotFound {
                            ifname: ifname.to_string(),
                            netns: format!("netns {}", netns.display()),
                        })?;
                    let index = link.header.index;
                    // One dump at a time: the kernel answers EBUSY to a second dump on a
                    // netlink socket while the first is running.
                    let addresses = h
                        .address()
                        .get()
                        .set_link_index_filter(index)
                        .execute()
                        .try_collect::<Vec<_>>()
                        .await;
                    let routes = h
                        .route()
                        .get(RouteMessageBuilder::<Ipv4Addr>::new().build())
                        .execute()
                        .try_collect::<Vec<_>>()
                        .await;
                    let routes6 = h
                        .route()
                        .get(RouteMessageBuilder::<Ipv6Addr>::new().build())
                        .execute()
                        .try_collect::<Vec<_>>()
                        .await;
                    let addresses = addresses
                        .map_err(|e| NetlinkError::nl(in_netns("listing the addresses"), e))?;
                    let mut routes =
                        routes.map_err(|e| NetlinkError::nl(in_netns("listing the routes"), e))?;
                    // A kernel without IPv6 has no IPv6 routes to list.
                    routes.extend(routes6.unwrap_or_default());
                    Ok::<_, NetlinkError>((link, addresses, routes))
                })
                .await??;
            let index = link.header.index;
            let step = in_netns("reading tx checksum offload");
            let sock = session.ioctl().ok_or_else(|| {
                NetlinkError::os(step.clone(), std::io::Error::other("no ioctl socket"))
            })?;
            let tx_checksum =
                ethtool::tx_checksum(sock, ifname).map_err(|e| NetlinkError::os(step, e))?;
            Ok(PodLinkState {
                mac: link_mac(&link).unwrap_or_default(),
                mtu: link_mtu(&link),
                up: link_up(&link),
                addresses: addresses.iter().filter_map(ipv4_address).collect(),
                routes: routes.iter().filter_map(|r| pod_route(r, index)).collect(),
                addresses6: addresses.iter().filter_map(ipv6_address).collect(),
                routes6: routes.iter().filter_map(|r| pod_route6(r, index)).collect(),
                tx_checksum,
            })
        })
        .await?
    }
}

fn set_pod_tx_checksum(session: &NetnsSession, spec: &PodLinkSpec) -> Result<(), NetlinkError> {
    let step = || {
        in_pod(
            spec,
            &format!("turning tx checksum offload {} on", on_off(false)),
        )
    };
    let sock = session.ioctl().ok_or_else(|| {
        NetlinkError::os(
            step(),
            std::io::Error::other("no ioctl socket in the pod netns"),
        )
    })?;
    ethtool::set_tx_checksum(sock, &spec.ifname, false).map_err(|e| NetlinkError::os(step(), e))
}

/// `"<what> <ifname> in netns <path>"`.
fn in_pod(spec: &PodLinkSpec, what: &str) -> String {
    format!("{what} {} in netns {}", spec.ifname, spec.netns.display())
}

fn creating_error(spec: &PodLinkSpec, e: rtnetlink::Error) -> NetlinkError {
    if let Some(peer) = &spec.pool_peer {
        return NetlinkError::nl(
            format!(
                "creating {} (mac {}, mtu {}) in netns {} as a macvlan on pool veth {peer} of \
                 port {}",
                spec.ifname,
                fmt_mac(&spec.mac),
                spec.mtu,
                spec.netns.display(),
                spec.host_ifname,
            ),
            e,
        );
    }
    NetlinkError::nl(
        format!(
            "creating veth {} with peer {} (mac {}, mtu {}) in netns {}",
            spec.host_ifname,
            spec.ifname,
            fmt_mac(&spec.mac),
            spec.mtu,
            spec.netns.display()
        ),
        e,
    )
}

/// Checks what the kernel would reject, or what would fail halfway, before creating anything.
fn validate_spec(spec: &PodLinkSpec) -> Result<(), NetlinkError> {
    validate_ifname(&spec.ifname)?;
    validate_ifname(&spec.host_ifname)?;
    let invalid = |reason: String| {
        Err(NetlinkError::InvalidSpec {
            netns: spec.netns.clone(),
            ifname: spec.ifname.clone(),
            reason,
        })
    };
    if !(68..=65535).contains(&spec.mtu) {
        return invalid(format!("mtu {} is outside 68..=65535", spec.mtu));
    }
    if spec.mac[0] & 1 != 0 || spec.mac == [0; 6] {
        return invalid(format!(
            "mac {} is not a unicast address",
            fmt_mac(&spec.mac)
        ));
    }
    if spec.ipv4.is_none() && spec.ipv6.is_none() {
        return invalid("no address of either family".into());
    }
    if let Some(v4) = &spec.ipv4 {
        let (addr, net) = (v4.address.addr(), v4.address);
        if !net.contains(&v4.gateway) || v4.gateway == addr {
            return invalid(format!(
                "gateway {} is not another address of the pod subnet {}",
                v4.gateway,
                net.trunc()
            ));
        }
        if net.prefix_len() < 31 && (addr == net.network() || addr == net.broadcast()) {
            return invalid(format!(
                "address {addr} is the network or broadcast address of {}",
                net.trunc()
            ));
        }
    }
    if let Some(v6) = &spec.ipv6 {
        let (addr, net) = (v6.address.addr(), v6.address);
        if !net.contains(&v6.gateway) || v6.gateway == addr {
            return invalid(format!(
                "IPv6 gateway {} is not another address of the pod's IPv6 subnet {}",
                v6.gateway,
                net.trunc()
            ));
        }
        if net.prefix_len() > 126 || addr == net.network() || addr.is_multicast() {
            return invalid(format!(
                "IPv6 address {addr} is the subnet-router anycast address of {}, a multicast \
                 address, or in a subnet too small for a pod",
                net.trunc()
            ));
        }
    }
    Ok(())
}

/// The `RTM_NEWLINK` that creates the pair, the peer directly in the netns of `netns_fd`.
fn veth_message(spec: &PodLinkSpec, netns_fd: RawFd) -> LinkMessage {
    let peer = LinkUnspec::new_with_name(&spec.ifname)
        .mtu(spec.mtu)
        .address(spec.mac.to_vec())
        .setns_by_fd(netns_fd)
        .build();
    LinkMessageBuilder::<LinkVeth>::new_with_info_kind(InfoKind::Veth)
        .name(spec.host_ifname.clone())
        .mtu(spec.mtu)
        .up()
        .set_info_data(InfoData::Veth(InfoVeth::Peer(peer)))
        .build()
}

/// An IPv4 route out of interface `index`: via a gateway (scope universe), or on-link
/// (scope link). Destinations are truncated to their prefix.
pub(crate) fn route_message(
    route: &RouteSpec,
    index: u32,
    protocol: RouteProtocol,
) -> RouteMessage {
    let dst = route.dst.trunc();
    let builder = RouteMessageBuilder::<Ipv4Addr>::new()
        .destination_prefix(dst.addr(), dst.prefix_len())
        .output_interface(index)
        .protocol(protocol);
    match route.via {
        Some(gw) => builder.gateway(gw).scope(RouteScope::Universe).build(),
        None => builder.scope(RouteScope::Link).build(),
    }
}

/// An IPv6 route out of interface `index`, as [`route_message`].
pub(crate) fn route6_message(
    route: &Route6Spec,
    index: u32,
    protocol: RouteProtocol,
) -> RouteMessage {
    let dst = route.dst.trunc();
    let builder = RouteMessageBuilder::<Ipv6Addr>::new()
        .destination_prefix(dst.addr(), dst.prefix_len())
        .output_interface(index)
        .protocol(protocol);
    match route.via {
        Some(gw) => builder.gateway(gw).scope(RouteScope::Universe).build(),
        None => builder.scope(RouteScope::Link).build(),
    }
}

/// A global IPv6 address of an `RTM_NEWADDR` dump entry (link-local ones are `None`).
pub(crate) fn ipv6_address(msg: &netlink_packet_route::address::AddressMessage) -> Option<Ipv6Net> {
    if msg.header.family != AddressFamily::Inet6 {
        return None;
    }
    let ip = msg.attributes.iter().find_map(|a| match a {
        AddressAttribute::Address(IpAddr::V6(ip)) => Some(*ip),
        _ => None,
    })?;
    if ip.is_unicast_link_local() {
        return None;
    }
    Ipv6Net::new(ip, msg.header.prefix_len).ok()
}

/// An IPv6 unicast route out of interface `index`, as [`pod_route`] (`fe80::/64` and the
/// address's prefix are the kernel's own).
fn pod_route6(msg: &RouteMessage, index: u32) -> Option<Route6Spec> {
    let (dst, via) = pod_route_parts(msg, AddressFamily::Inet6, index)?;
    let dst = match dst {
        Some(RouteAddress::Inet6(ip)) => *ip,
        _ => Ipv6Addr::UNSPECIFIED,
    };
    Some(Route6Spec {
        dst: Ipv6Net::new(dst, msg.header.destination_prefix_length).ok()?,
        via: match via {
            Some(RouteAddress::Inet6(ip)) => Some(*ip),
            _ => None,
        },
    })
}

/// An IPv4 address of an `RTM_NEWADDR` dump entry.
pub(crate) fn ipv4_address(msg: &netlink_packet_route::address::AddressMessage) -> Option<Ipv4Net> {
    if msg.header.family != AddressFamily::Inet {
        return None;
    }
    let local = msg.attributes.iter().find_map(|a| match a {
        AddressAttribute::Local(IpAddr::V4(ip)) => Some(*ip),
        _ => None,
    });
    let address = msg.attributes.iter().find_map(|a| match a {
        AddressAttribute::Address(IpAddr::V4(ip)) => Some(*ip),
        _ => None,
    });
    Ipv4Net::new(local.or(address)?, msg.header.prefix_len).ok()
}

/// The kernel's local routing table (`RT_TABLE_LOCAL` in `linux/rtnetlink.h`).
const RT_TABLE_LOCAL: u32 = 255;

/// An IPv4 unicast route out of interface `index` that is not a kernel-derived connected
/// route, in any routing table but the local one: a chained `sbr` plugin moves the pod's routes
/// from the main table to a table of its own, and they are still the pod's routes.
fn pod_route(msg: &RouteMessage, index: u32) -> Option<RouteSpec> {
    let (dst, via) = pod_route_parts(msg, AddressFamily::Inet, index)?;
    let dst = match dst {
        Some(RouteAddress::Inet(ip)) => *ip,
        _ => Ipv4Addr::UNSPECIFIED,
    };
    Some(RouteSpec {
        dst: Ipv4Net::new(dst, msg.header.destination_prefix_length).ok()?,
        via: match via {
            Some(RouteAddress::Inet(ip)) => Some(*ip),
            _ => None,
        },
    })
}

/// The destination and gateway of a `family` unicast route out of interface `index` that is
/// not the kernel's own (`proto kernel`), in any table but the local one (see [`pod_route`]).
fn pod_route_parts(
    msg: &RouteMessage,
    family: AddressFamily,
    index: u32,
) -> Option<(Option<&RouteAddress>, Option<&RouteAddress>)> {
    let h = &msg.header;
    if h.address_family != family
        || h.kind != RouteType::Unicast
        || h.protocol == RouteProtocol::Kernel
        || route_table(msg) == RT_TABLE_LOCAL
    {
        return None;
    }
    let (mut dst, mut via, mut oif) = (None, None, None);
    for attr in &msg.attributes {
        match attr {
            RouteAttribute::Destination(a) => dst = Some(a),
            RouteAttribute::Gateway(a) => via = Some(a),
            RouteAttribute::Oif(i) => oif = Some(*i),
            _ => {}
        }
    }
    (oif == Some(index)).then_some((dst, via))
}

/// A route's table: the `RTA_TABLE` attribute if present, else the header's.
pub(crate) fn route_table(msg: &RouteMessage) -> u32 {
    msg.attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(msg.header.table))
}

/// The pod side of a new interface: the interface and lo up and the index, then the address,
/// then the routes (the default one through the gateway first).
async fn configure_pod_side(pod: &Handle, spec: &PodLinkSpec) -> Result<(), NetlinkError> {
    let netns = spec.netns.as_path();
    // Sent together, processed by the kernel in this order: the pod end up (it cannot
    // be brought up at creation: the kernel opens the peer before the pair is linked,
    // ENOTCONN), lo up, and the lookup for the index.
    let up = |ifname: &str| {
        let req = pod
            .link()
            .set(LinkUnspec::new_with_name(ifname).up().build())
            .execute();
        let ifname = ifname.to_string();
        async move {
            req.await.map_err(|e| {
                NetlinkError::nl(
                    format!("bringing {ifname} up in netns {}", netns.display()),
                    e,
                )
            })
        }
    };
    // First of all, while it is down: no automatic IPv6 address on the pod interface
    // (`ip link set IFNAME addrgenmode none`). A pod's IPv6 addresses are the agent's
    // (dual stack: added below, without DAD), and a link-local address would make the pod's
    // kernel send DAD, router solicitations and MLD reports into br0 for seconds after every ADD; on
    // the userspace datapath each such packet wakes ovs-vswitchd's main loop, which
    // polls every port (milliseconds at 1000 pods): a node creating pods kept it busy.
    // A kernel without IPv6 refuses the attribute; that is fine (nothing to quiet).
    let quiet = pod
        .link()
        .set(
            LinkUnspec::new_with_name(&spec.ifname)
                .append_extra_attribute(LinkAttribute::AfSpecUnspec(vec![AfSpecUnspec::Inet6(
                    vec![AfSpecInet6::AddrGenMode(In6AddrGenMode::None)],
                )]))
                .build(),
        )
        .execute();
    let (quiet, pod_up, lo_up, link) = tokio::join!(
        quiet,
        up(&spec.ifname),
        up("lo"),
        get_link(pod, &spec.ifname)
    );
    if let Err(e) = quiet {
        tracing::debug!(ifname = %spec.ifname, netns = %netns.display(), error = %e, "not setting addrgenmode none (no IPv6 in this kernel?)");
    }
    let link = link
        .map_err(|e| NetlinkError::nl(in_pod(spec, "looking up interface"), e))?
        .ok_or_else(|| NetlinkError::LinkNotFound {
            ifname: spec.ifname.clone(),
            netns: format!("netns {} right after creating it", netns.display()),
        })?;
    pod_up?;
    lo_up?;
    let index = link.header.index;
    // Both families' addresses at once, then every route at once (a route needs its family's
    // address for its gateway to be on-link): two round trips to the kernel, dual stack or not.
    let add4 = async {
        let Some(v4) = &spec.ipv4 else { return Ok(()) };
        pod.address()
            .add(
                index,
                IpAddr::V4(v4.address.addr()),
                v4.address.prefix_len(),
            )
            .execute()
            .await
            .map_err(|e| {
                NetlinkError::nl(
                    in_pod(spec, &format!("adding address {} to", v4.address)),
                    e,
                )
            })
    };
    let add6 = async {
        match &spec.ipv6 {
            Some(v6) => add_ipv6_address(pod, spec, v6, index).await,
            None => Ok(()),
        }
    };
    let (added4, added6) = tokio::join!(add4, add6);
    added4?;
    added6?;
    let routes: Vec<RouteSpec> = spec
        .ipv4
        .iter()
        .flat_map(|v4| {
            std::iter::once(RouteSpec {
                dst: Ipv4Net::default(),
                via: Some(v4.gateway),
            })
            .chain(v4.routes.iter().copied())
        })
        .collect();
    let routes6: Vec<Route6Spec> = spec
        .ipv6
        .iter()
        .flat_map(|v6| {
            std::iter::once(Route6Spec {
                dst: Ipv6Net::default(),
                via: Some(v6.gateway),
            })
            .chain(v6.routes.iter().copied())
        })
        .collect();
    let (added, added6) = tokio::join!(
        join_all(routes.iter().map(|r| {
            pod.route()
                .add(route_message(r, index, RouteProtocol::Static))
                .execute()
        })),
        join_all(routes6.iter().map(|r| {
            pod.route()
                .add(route6_message(r, index, RouteProtocol::Static))
                .execute()
        }))
    );
    for (route, result) in routes.iter().zip(added) {
        result
            .map_err(|e| NetlinkError::nl(in_pod(spec, &format!("adding route {route} dev")), e))?;
    }
    for (route, result) in routes6.iter().zip(added6) {
        result
            .map_err(|e| NetlinkError::nl(in_pod(spec, &format!("adding route {route} dev")), e))?;
    }
    Ok(())
}

/// A dual-stack pod's IPv6 address, without duplicate address detection (`nodad`).
async fn add_ipv6_address(
    pod: &Handle,
    spec: &PodLinkSpec,
    v6: &PodIpv6Spec,
    index: u32,
) -> Result<(), NetlinkError> {
    let mut add = pod.address().add(
        index,
        IpAddr::V6(v6.address.addr()),
        v6.address.prefix_len(),
    );
    add.message_mut()
        .attributes
        .push(AddressAttribute::Flags(AddressFlags::Nodad));
    add.execute().await.map_err(|e| {
        let what = if errno(&e) == Some(libc::EACCES) {
            format!(
                "adding IPv6 address {} (IPv6 is disabled in the pod's network namespace: \
                 net.ipv6.conf.{}.disable_ipv6=1; a dual-stack pod needs it on) to",
                v6.address, spec.ifname
            )
        } else {
            format!("adding IPv6 address {} to", v6.address)
        };
        NetlinkError::nl(in_pod(spec, &what), e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn spec() -> PodLinkSpec {
        PodLinkSpec {
            netns: PathBuf::from("/run/netns/x"),
            ifname: "eth0".into(),
            host_ifname: "veth0123456789a".into(),
            mac: [0x0a, 0x58, 10, 128, 0, 5],
            ipv4: Some(v4("10.128.0.5/23", Ipv4Addr::new(10, 128, 0, 1))),
            mtu: 1450,
            tx_checksum_off: true,
            pool_peer: None,
            ipv6: None,
        }
    }

    fn v4(address: &str, gateway: Ipv4Addr) -> crate::host::netlink::PodIpv4Spec {
        crate::host::netlink::PodIpv4Spec {
            address: address.parse().unwrap(),
            gateway,
            routes: vec![],
        }
    }

    #[test]
    fn spec_validation_names_the_problem() {
        validate_spec(&spec()).unwrap();
        let check = |s: PodLinkSpec, msg: &str| {
            let err = validate_spec(&s).unwrap_err().to_string();
            assert_eq!(err, msg);
        };
        check(
            PodLinkSpec {
                ipv4: Some(v4("10.128.0.5/23", Ipv4Addr::new(10, 129, 0, 1))),
                ..spec()
            },
            "invalid pod link spec for eth0 in netns /run/netns/x: gateway 10.129.0.1 is not \
             another address of the pod subnet 10.128.0.0/23",
        );
        check(
            PodLinkSpec { mtu: 40, ..spec() },
            "invalid pod link spec for eth0 in netns /run/netns/x: mtu 40 is outside 68..=65535",
        );
        check(
            PodLinkSpec {
                mac: [1, 0, 0, 0, 0, 1],
                ..spec()
            },
            "invalid pod link spec for eth0 in netns /run/netns/x: mac 01:00:00:00:00:01 is not \
             a unicast address",
        );
        check(
            PodLinkSpec {
                ipv4: Some(v4("10.128.1.255/23", Ipv4Addr::new(10, 128, 0, 1))),
                ..spec()
            },
            "invalid pod link spec for eth0 in netns /run/netns/x: address 10.128.1.255 is the \
             network or broadcast address of 10.128.0.0/23",
        );
        check(
            PodLinkSpec {
                ifname: "eth0/1".into(),
                ..spec()
            },
            "invalid interface name \"eth0/1\": contains '/' at byte 4",
        );
        let v6 = |address: &str, gateway: &str| PodLinkSpec {
            ipv6: Some(PodIpv6Spec {
                address: address.parse().unwrap(),
                gateway: gateway.parse().unwrap(),
                routes: vec![],
            }),
            ..spec()
        };
        validate_spec(&v6("fd01:0:0:5::5/64", "fd01:0:0:5::1")).unwrap();
        // An IPv6-only pod; a pod without any address is refused.
        validate_spec(&PodLinkSpec {
            ipv4: None,
            ..v6("fd01:0:0:5::5/64", "fd01:0:0:5::1")
        })
        .unwrap();
        check(
            PodLinkSpec {
                ipv4: None,
                ..spec()
            },
            "invalid pod link spec for eth0 in netns /run/netns/x: no address of either family",
        );
        check(
            v6("fd01:0:0:5::5/64", "fd01:0:0:6::1"),
            "invalid pod link spec for eth0 in netns /run/netns/x: IPv6 gateway fd01:0:0:6::1 is \
             not another address of the pod's IPv6 subnet fd01:0:0:5::/64",
        );
        check(
            v6("fd01:0:0:5::/64", "fd01:0:0:5::1"),
            "invalid pod link spec for eth0 in netns /run/netns/x: IPv6 address fd01:0:0:5:: is \
             the subnet-router anycast address of fd01:0:0:5::/64, a multicast address, or in a \
             subnet too small for a pod",
        );
    }

    #[test]
    fn route_messages() {
        let via = route_message(
            &RouteSpec {
                dst: "172.30.1.2/16".parse().unwrap(),
                via: Some(Ipv4Addr::new(10, 128, 0, 1)),
            },
            7,
            RouteProtocol::Static,
        );
        assert_eq!(via.header.destination_prefix_length, 16);
        assert_eq!(via.header.scope, RouteScope::Universe);
        assert!(via
            .attributes
            .contains(&RouteAttribute::Destination(RouteAddress::Inet(
                Ipv4Addr::new(172, 30, 0, 0)
            ))));
        assert!(via.attributes.contains(&RouteAttribute::Oif(7)));
        let onlink = route_message(
            &RouteSpec {
                dst: "224.0.0.0/4".parse().unwrap(),
                via: None,
            },
            7,
            RouteProtocol::Static,
        );
        assert_eq!(onlink.header.scope, RouteScope::Link);
        assert!(!onlink
            .attributes
            .iter()
            .any(|a| matches!(a, RouteAttribute::Gateway(_))));
        // The parser used by inspect reads back what we build.
        assert_eq!(
            pod_route(&onlink, 7),
            Some(RouteSpec {
                dst: "224.0.0.0/4".parse().unwrap(),
                via: None
            })
        );
        assert_eq!(pod_route(&onlink, 8), None);
    }
}
