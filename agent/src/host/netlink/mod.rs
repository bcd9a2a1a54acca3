//! Interface plumbing for pods and the node gateway, natively: rtnetlink for links, addresses
//! and routes, the ethtool ioctl for tx checksum offload, `/proc/sys` files for sysctls. No `ip`,
//! `ethtool` or `sysctl` processes.
//!
//! # Shape
//!
//! [`Netlink`] holds one rtnetlink connection (and one ioctl socket) in the *node* netns: the
//! netns of the thread that called [`Netlink::new`], where ovs-vswitchd runs and the host ends
//! of the veths stay. It is created once by the agent and cloned cheaply; concurrent calls share
//! the connection (netlink requests are matched to answers by sequence number). A pod netns
//! needs its own sockets (a socket belongs to the netns of the thread that creates it), created
//! by a short-lived std thread that enters the netns, never a tokio thread (a worker left in a
//! pod netns would run later tasks there; see `netns.rs`); that costs one thread spawn per pod
//! operation.
//!
//! Each method documents the `ip` commands it equals, its idempotency, and its bound: every
//! operation is limited by [`OP_TIMEOUT`] (and [`Netlink::configure_gateway`] additionally waits
//! at most [`GATEWAY_LINK_WAIT`] for the link), so nothing waits forever.
//!
//! # Pod link creation
//!
//! [`Netlink::create_pod_link`] creates the veth pair with **one** `RTM_NEWLINK` sent in the node
//! netns whose peer part carries the pod netns (as a descriptor), the final interface name, MAC
//! and MTU: the kernel creates the pod end directly inside the pod netns
//! (`ip link add vethX mtu M up type veth peer name eth0 address A mtu M netns FD`). Compared
//! with creating the peer under a temporary name in the node netns, then moving and renaming
//! it, this is atomic (either both ends exist, named and addressed, or nothing does), needs no
//! temporary name and saves three round trips. (The peer cannot be brought up in the same
//! request: the kernel opens it before the pair is linked and answers ENOTCONN.) Then, in the
//! pod netns: the interface and `lo` up, the address, the routes (default via the gateway, and
//! the spec's), tx checksum off if asked; meanwhile, in the node netns, the host end's index and
//! MAC are read.
//!
//! With a pool veth ([`PodLinkSpec::pool_peer`]) the pod interface is instead a passthru macvlan
//! made on the pool veth's peer, which waits, up, in the parking namespace
//! ([`netns::Parking`], pinned so it outlives the agent): the peer gets the pod's MAC, then one
//! `RTM_NEWLINK` sent in the parking namespace creates the macvlan directly in the pod netns
//! (`ip -n PARKING link add link PEER name eth0 netns FD type macvlan mode passthru`). The
//! pod-side steps are the same. No device moves between namespaces (a move waits for an RCU
//! grace period) and nothing happens in the node netns. The peer has tx checksum offload off
//! (the macvlan's own is fixed on), so what the pod sends reaches the host end checksummed.
//!
//! # Limits
//!
//! The node connection is not re-established if the kernel closes it (it does not in
//! practice; requests would then fail with "the netlink connection is closed"). The routes of
//! [`Netlink::configure_gateway`] go to the main table with `proto static`; nothing is ever
//! removed by it. Deleting a veth costs the kernel 20-50 ms (network device unregistration waits
//! for RCU grace periods), as `ip link del` does; creation is about 1.5 ms.

mod egress;
pub use egress::{arp_probe, gratuitous_arp, EgressLink, EGRESS_IPV6_PROTO};
mod egress6;
pub use egress6::{nd_probe, unsolicited_na};
mod error;
mod ethtool;
mod gateway;
mod mld;
mod names;
mod netns;
pub use netns::{is_pinned_netns, pin_outlives_agent};
mod pod;
mod sysctl;

use std::fmt;
use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use ipnet::{Ipv4Net, Ipv6Net};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;
use rtnetlink::{Handle, LinkUnspec};

pub use error::NetlinkError;
pub use gateway::GATEWAY_LINK_WAIT;
pub use names::{host_veth_name, validate_ifname, MAX_IFNAME_LEN};
pub use sysctl::{
    enable_ip_forward, get_sysctl, isolate_host_veth, isolate_host_veth_ipv4, set_sysctl,
};

/// The interface index of pool peer `peer` in the parking namespace.
pub(crate) async fn pool_peer_index(
    parking: &netns::Parking,
    peer: &str,
) -> Result<u32, NetlinkError> {
    Ok(get_link(&parking.handle, peer)
        .await
        .map_err(|e| NetlinkError::nl(format!("looking up pool veth {peer}"), e))?
        .ok_or_else(|| NetlinkError::LinkNotFound {
            ifname: peer.to_string(),
            netns: "the port pool's namespace".into(),
        })?
        .header
        .index)
}

/// The bound on any single operation of this module (one pod link creation, one deletion...).
pub const OP_TIMEOUT: Duration = Duration::from_secs(10);

/// An rtnetlink connection future; it must be polled for requests to progress.
pub(crate) type NetlinkConnection = rtnetlink::proto::Connection<RouteNetlinkMessage>;

/// What to create for one pod attachment (see [`Netlink::create_pod_link`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLinkSpec {
    /// The pod's netns file (`CNI_NETNS`), e.g. `/run/netns/x` or `/proc/<pid>/ns/net`.
    pub netns: PathBuf,
    /// The interface name inside the pod (`CNI_IFNAME`), e.g. `eth0`.
    pub ifname: String,
    /// The host end's name, normally [`host_veth_name`] of the attachment.
    pub host_ifname: String,
    /// The pod end's MAC (`0a:58:<ip>`).
    pub mac: [u8; 6],
    /// The pod's IPv4 side (`None` on an IPv6-only cluster).
    pub ipv4: Option<PodIpv4Spec>,
    /// MTU of both veth ends.
    pub mtu: u32,
    /// Turn tx checksum offload off on both veth ends (needed with the OVS userspace datapath).
    pub tx_checksum_off: bool,
    /// A pooled veth to use instead of creating one: the peer of `host_ifname` waiting in the
    /// parking namespace (see [`Netlink::create_pool_veth`]); the pod interface `ifname` is a
    /// passthru macvlan made on top of it directly in the pod netns, with `mac` and `mtu`.
    pub pool_peer: Option<String>,
    /// The pod's IPv6 side on a dual-stack node.
    pub ipv6: Option<PodIpv6Spec>,
}

/// A pod's IPv4 address and routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodIpv4Spec {
    /// The pod's address with the node subnet's prefix length, e.g. `10.128.0.5/23`.
    pub address: Ipv4Net,
    /// The gateway for the default route; must be inside `address`'s subnet.
    pub gateway: Ipv4Addr,
    /// Routes besides the default route (which is always added, via `gateway`).
    pub routes: Vec<RouteSpec>,
}

/// A dual-stack pod's IPv6 address and routes: the address is added without duplicate
/// address detection (`nodad`: the lease makes it unique, and DAD would hold it back for a
/// second), the default route goes via `gateway`, and the kernel's own routes (the address's
/// prefix, `fe80::/64` when there is a link-local address) are left as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodIpv6Spec {
    /// The address with the node's IPv6 subnet's prefix length, e.g. `fd01:0:0:5::5/64`.
    pub address: Ipv6Net,
    /// The gateway (tun0's IPv6 address) for the default route; inside `address`'s subnet.
    pub gateway: Ipv6Addr,
    /// Routes besides the default route (which is always added, via `gateway`).
    pub routes: Vec<Route6Spec>,
}

/// One IPv6 route of a pod interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route6Spec {
    /// The destination.
    pub dst: Ipv6Net,
    /// The next hop; `None` means on-link.
    pub via: Option<Ipv6Addr>,
}

impl fmt::Display for Route6Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.via {
            Some(gw) => write!(f, "{} via {gw}", self.dst),
            None => write!(f, "{} on-link", self.dst),
        }
    }
}

/// One IPv4 route of a pod interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RouteSpec {
    /// The destination.
    pub dst: Ipv4Net,
    /// The next hop; `None` means on-link (`scope link`, straight out of the interface).
    pub via: Option<Ipv4Addr>,
}

impl fmt::Display for RouteSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.via {
            Some(gw) => write!(f, "{} via {gw}", self.dst),
            None => write!(f, "{} on-link", self.dst),
        }
    }
}

/// The result of [`Netlink::create_pod_link`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLink {
    /// The host end's name (in the node netns).
    pub host_ifname: String,
    /// The host end's interface index (in the node netns).
    pub host_index: u32,
    /// The pod end's name (in the pod netns).
    pub pod_ifname: String,
    /// The pod end's MAC.
    pub pod_mac: [u8; 6],
    /// The host end's MAC (chosen by the kernel).
    pub host_mac: [u8; 6],
}

/// The observed state of a pod interface (see [`Netlink::inspect_pod_interface`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLinkState {
    /// Its MAC.
    pub mac: [u8; 6],
    /// Its MTU.
    pub mtu: u32,
    /// Whether it is administratively up.
    pub up: bool,
    /// Its IPv4 addresses with prefix lengths.
    pub addresses: Vec<Ipv4Net>,
    /// Its IPv4 routes in the main table, in kernel dump order, without the connected routes the
    /// kernel derives from the addresses (`proto kernel`). The default route is
    /// `0.0.0.0/0 via <gateway>`.
    pub routes: Vec<RouteSpec>,
    /// Its global IPv6 addresses with prefix lengths (link-local ones left out).
    pub addresses6: Vec<Ipv6Net>,
    /// Its IPv6 routes as `routes` (not the kernel's own, not `fe80::/64`, not multicast).
    pub routes6: Vec<Route6Spec>,
    /// Whether tx checksum offload is on.
    pub tx_checksum: bool,
}

/// The node-netns netlink handle of the agent (see the module docs). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Netlink {
    node: Arc<Node>,
}

#[derive(Debug)]
struct Node {
    handle: Handle,
    /// `AF_INET` socket in the node netns, for ethtool ioctls on host-side interfaces.
    ioctl: OwnedFd,
    /// Where pool veth peers wait, opened or created on first use ([`netns::Parking`]).
    parking: tokio::sync::OnceCell<netns::Parking>,
    /// Where the parking namespace is pinned ([`Netlink::set_pool_netns`]).
    pool_pin: std::sync::OnceLock<std::path::PathBuf>,
}

impl Netlink {
    /// Opens the node-netns connection in the netns of the calling thread and spawns its driver
    /// on the current tokio runtime (it ends when the last clone is dropped). Must be called
    /// inside a tokio runtime.
    pub fn new() -> Result<Netlink, NetlinkError> {
        tokio::runtime::Handle::try_current().map_err(|_| NetlinkError::NoRuntime)?;
        let (conn, handle) = connect()
            .map_err(|e| NetlinkError::os("opening a netlink socket in the node netns", e))?;
        let ioctl = ethtool::inet_socket()
            .map_err(|e| NetlinkError::os("opening an ioctl socket in the node netns", e))?;
        tokio::spawn(conn);
        Ok(Netlink {
            node: Arc::new(Node {
                handle,
                ioctl,
                parking: tokio::sync::OnceCell::new(),
                pool_pin: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Whether pool peer `name` waits in the parking namespace, free: no pod interface on
    /// top of it (a passthru macvlan makes its lower promiscuous, so a free peer has a
    /// promiscuity of 0). False when there is no parking namespace yet.
    pub async fn parked(&self, name: &str) -> Result<bool, NetlinkError> {
        validate_ifname(name)?;
        let parking = match self.node.parking.get() {
            Some(p) => p,
            None if self.node.pool_pin.get().is_some_and(|p| is_pinned_netns(p)) => {
                self.parking().await?
            }
            None => return Ok(false),
        };
        let link = bounded(
            format!("looking up pool veth {name}"),
            get_link(&parking.handle, name),
        )
        .await?
        .map_err(|e| NetlinkError::nl(format!("looking up pool veth {name}"), e))?;
        Ok(link.is_some_and(|l| {
            !l.attributes
                .iter()
                .any(|a| matches!(a, LinkAttribute::Promiscuity(n) if *n > 0))
        }))
    }

    /// Sets the MLD drop on pool peer `peer`'s egress ([`mld`]): at the pair's creation, and
    /// for the pairs an agent finds at start-up, which an agent from before the drop may have
    /// made (idle ones at once, ones holding a pod when the pod's DEL gives them back).
    /// Never fails: the drop is an economy (table 0 drops MLD anyway), so a kernel without
    /// `clsact` or `cls_bpf` gets one warning and pool ports without it.
    pub async fn quiet_pool_peer(&self, peer: &str) {
        static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let set = async {
            let parking = self.parking().await?;
            let index = pool_peer_index(parking, peer).await?;
            mld::drop_mld_on_egress(&parking.handle, index)
                .await
                .map_err(|e| {
                    NetlinkError::nl(format!("setting the MLD drop on pool veth {peer}"), e)
                })
        };
        let Err(e) = bounded(format!("setting the MLD drop on pool veth {peer}"), set)
            .await
            .and_then(|r| r)
        else {
            return;
        };
        if WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::debug!(pool_peer = %peer, error = %e, "no MLD drop on a pool port");
        } else {
            tracing::warn!(pool_peer = %peer, error = %e, "pool ports go without their MLD drop (the kernel's clsact qdisc or cls_bpf classifier missing?): dual-stack pods on them send their MLD reports to br0, which drops them");
        }
    }

    /// Takes a pod's interface off pool peer `peer` (see [`crate::bridge::seams::PodLinks`]): deletes
    /// `ifname` in `netns` if the netns is given and still there (a failure is logged: the
    /// peer then is not free, and its pair is deleted instead), then whether the peer is free.
    pub async fn release_pool_link(
        &self,
        peer: &str,
        netns: Option<&std::path::Path>,
        ifname: &str,
    ) -> Result<bool, NetlinkError> {
        if let Some(netns) = netns {
            if let Err(e) = self.delete_pod_interface(netns, ifname).await {
                tracing::warn!(netns = %netns.display(), %ifname, pool_peer = %peer, error = %e, "deleting a pod interface on a pool port");
            }
        }
        self.parked(peer).await
    }

    /// Sets where the port pool's parking namespace is pinned (once; before the pool is used).
    pub fn set_pool_netns(&self, pin: std::path::PathBuf) {
        let _ = self.node.pool_pin.set(pin);
    }

    /// The port pool's parking namespace, opened (or created) on first use.
    pub(crate) async fn parking(&self) -> Result<&netns::Parking, NetlinkError> {
        let pin = self.node.pool_pin.get().ok_or_else(|| {
            NetlinkError::os(
                "opening the port pool's namespace",
                std::io::Error::other("no place to pin it was set"),
            )
        })?;
        self.node
            .parking
            .get_or_try_init(|| netns::Parking::open_or_create(pin))
            .await
    }

    /// The index of interface `name` in the node netns, or `None` if there is none
    /// (`ip link show NAME`).
    pub async fn link_exists(&self, name: &str) -> Result<Option<u32>, NetlinkError> {
        validate_ifname(name)?;
        let step = || format!("looking up interface {name} in the node netns");
        bounded(step(), get_link(&self.node.handle, name))
            .await?
            .map(|link| link.map(|l| l.header.index))
            .map_err(|e| NetlinkError::nl(step(), e))
    }

    /// The hardware address of interface `name` in the node netns (`ip link show NAME`), or
    /// `None` if there is none or it has no Ethernet address.
    pub async fn interface_mac(&self, name: &str) -> Result<Option<[u8; 6]>, NetlinkError> {
        validate_ifname(name)?;
        let step = || format!("reading the address of interface {name} in the node netns");
        let link = bounded(step(), get_link(&self.node.handle, name))
            .await?
            .map_err(|e| NetlinkError::nl(step(), e))?;
        Ok(link.as_ref().and_then(link_mac))
    }

    /// Deletes the host end of a pod veth, which also deletes the pod end
    /// (`ip link del NAME`). Idempotent: `Ok(false)` when there is no such interface.
    pub async fn delete_host_veth(&self, host_ifname: &str) -> Result<bool, NetlinkError> {
        validate_ifname(host_ifname)?;
        let step = || format!("deleting host veth {host_ifname}");
        bounded(step(), del_link(&self.node.handle, host_ifname))
            .await?
            .map_err(|e| NetlinkError::nl(step(), e))
    }

    /// The names of the node-netns links that start with `prefix` (`ip -o link | grep`): one
    /// dump.
    pub async fn links_named(&self, prefix: &str) -> Result<Vec<String>, NetlinkError> {
        let step = || format!("listing the links named {prefix}* in the node netns");
        let links: Vec<LinkMessage> = bounded(
            step(),
            self.node.handle.link().get().execute().try_collect(),
        )
        .await?
        .map_err(|e| NetlinkError::nl(step(), e))?;
        Ok(links
            .iter()
            .filter_map(|l| {
                l.attributes.iter().find_map(|a| match a {
                    LinkAttribute::IfName(n) if n.starts_with(prefix) => Some(n.clone()),
                    _ => None,
                })
            })
            .collect())
    }

    /// Turns tx checksum offload of `ifname` in the node netns on or off
    /// (`ethtool -K IFNAME tx on|off`).
    pub fn set_tx_checksum(&self, ifname: &str, on: bool) -> Result<(), NetlinkError> {
        validate_ifname(ifname)?;
        ethtool::set_tx_checksum(self.node.ioctl.as_fd(), ifname, on).map_err(|e| {
            NetlinkError::os(
                format!(
                    "turning tx checksum offload {} on {ifname} in the node netns",
                    on_off(on)
                ),
                e,
            )
        })
    }

    /// Whether tx checksum offload is on for `ifname` in the node netns (`ethtool -k IFNAME`).
    pub fn tx_checksum(&self, ifname: &str) -> Result<bool, NetlinkError> {
        validate_ifname(ifname)?;
        ethtool::tx_checksum(self.node.ioctl.as_fd(), ifname).map_err(|e| {
            NetlinkError::os(
                format!("reading tx checksum offload of {ifname} in the node netns"),
                e,
            )
        })
    }

    fn handle(&self) -> Handle {
        self.node.handle.clone()
    }
}

/// Opens an rtnetlink connection in the netns of the calling thread (which must be inside a
/// tokio runtime context). Errors carry the kernel's extended ack message when the kernel
/// supports `NETLINK_CAP_ACK` and `NETLINK_EXT_ACK`.
pub(crate) fn connect() -> io::Result<(NetlinkConnection, Handle)> {
    let (mut conn, handle, _unsolicited) = rtnetlink::new_connection()?;
    let socket = rtnetlink::sys::AsyncSocket::socket_mut(conn.socket_mut());
    // The extended ack parser expects capped acks (no copy of the request before the
    // attributes), so ask for extended acks only when capping works.
    if socket.set_cap_ack(true).is_ok() {
        let _ = socket.set_ext_ack(true);
    }
    Ok((conn, handle))
}

/// Runs `fut` within [`OP_TIMEOUT`]; `step` names the operation in the timeout error.
pub(crate) async fn bounded<F: Future>(step: String, fut: F) -> Result<F::Output, NetlinkError> {
    tokio::time::timeout(OP_TIMEOUT, fut)
        .await
        .map_err(|_| NetlinkError::Timeout {
            step,
            after: OP_TIMEOUT,
        })
}

/// The link named `name`, or `None` if there is none (`ip link show NAME`).
pub(crate) async fn get_link(
    handle: &Handle,
    name: &str,
) -> Result<Option<LinkMessage>, rtnetlink::Error> {
    let mut links = handle.link().get().match_name(name).execute();
    match links.try_next().await {
        Ok(link) => Ok(link),
        Err(e) if error::errno(&e) == Some(libc::ENODEV) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Deletes the link named `name` (`ip link del NAME`); `Ok(false)` if there is none.
pub(crate) async fn del_link(handle: &Handle, name: &str) -> Result<bool, rtnetlink::Error> {
    let msg = LinkUnspec::new_with_name(name).build();
    match handle.link().del_with_message(msg).execute().await {
        Ok(()) => Ok(true),
        Err(e) if error::errno(&e) == Some(libc::ENODEV) => Ok(false),
        Err(e) => Err(e),
    }
}

/// A link's MAC, if it has a 6-byte hardware address.
pub(crate) fn link_mac(link: &LinkMessage) -> Option<[u8; 6]> {
    link.attributes.iter().find_map(|a| match a {
        LinkAttribute::Address(bytes) => <[u8; 6]>::try_from(bytes.as_slice()).ok(),
        _ => None,
    })
}

/// A link's MTU (0 if the kernel did not say).
pub(crate) fn link_mtu(link: &LinkMessage) -> u32 {
    link.attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::Mtu(mtu) => Some(*mtu),
            _ => None,
        })
        .unwrap_or(0)
}

/// Whether a link is administratively up.
pub(crate) fn link_up(link: &LinkMessage) -> bool {
    link.header.flags.contains(LinkFlags::Up)
}

/// `aa:bb:cc:dd:ee:ff`.
pub(crate) fn fmt_mac(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_spec_display() {
        let via = RouteSpec {
            dst: "172.30.0.0/16".parse().unwrap(),
            via: Some(Ipv4Addr::new(10, 128, 0, 1)),
        };
        assert_eq!(via.to_string(), "172.30.0.0/16 via 10.128.0.1");
        let onlink = RouteSpec {
            dst: "224.0.0.0/4".parse().unwrap(),
            via: None,
        };
        assert_eq!(onlink.to_string(), "224.0.0.0/4 on-link");
    }

    #[test]
    fn mac_formatting() {
        assert_eq!(fmt_mac(&[0x0a, 0x58, 10, 128, 0, 2]), "0a:58:0a:80:00:02");
    }

    /// The CNI server runs these on a multi-threaded runtime: their futures must be `Send`.
    #[allow(dead_code)]
    fn futures_are_send(nl: &Netlink, spec: &PodLinkSpec, netns: &std::path::Path) {
        fn send<T: Send>(_: T) {}
        send(nl.create_pod_link(spec));
        send(nl.delete_pod_interface(netns, "eth0"));
        send(nl.inspect_pod_interface(netns, "eth0"));
        send(nl.delete_host_veth("x"));
        send(nl.link_exists("x"));
        send(nl.configure_gateway("tun0", Some(Ipv4Net::default()), 1450, &[]));
        send(nl.wait_for_link("tun0", Duration::ZERO));
        send(nl.clone());
    }

    #[tokio::test]
    async fn new_outside_runtime_is_an_error_not_a_panic() {
        let err = std::thread::spawn(Netlink::new)
            .join()
            .unwrap()
            .unwrap_err();
        assert!(matches!(err, NetlinkError::NoRuntime), "{err}");
    }
}
