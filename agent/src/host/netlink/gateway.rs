//! The node's gateway interface (`tun0`, an OVS internal port of `br0`): address, MTU, up, and
//! the routes that send cluster and service traffic into OVS.
//!
//! ovs-vswitchd creates `tun0` asynchronously after the port is added to the database, so the
//! link is waited for (bounded by [`GATEWAY_LINK_WAIT`], polling with a short backoff).
//! Everything is idempotent and additive: an address already present is kept, routes are
//! created or replaced (`NLM_F_REPLACE`, so a second run makes no duplicates and a route to the
//! same destination through another device is moved to the gateway), and nothing is removed.
//! The cluster CIDR route (`10.128.0.0/14 dev tun0`) coexists with the connected route of the
//! node subnet (`10.128.0.0/23 dev tun0 proto kernel`) that the address creates.

use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

use futures::future::join_all;
use futures::TryStreamExt;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use netlink_packet_route::address::{AddressAttribute, AddressFlags};
use netlink_packet_route::link::LinkMessage;
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol,
};
use rtnetlink::LinkUnspec;

use super::error::errno;
use super::pod::{ipv4_address, ipv6_address, route6_message, route_message};
use super::{
    bounded, get_link, link_mtu, link_up, validate_ifname, Netlink, NetlinkError, Route6Spec,
    RouteSpec,
};

/// How long [`Netlink::configure_gateway`] waits for the gateway link to appear.
pub const GATEWAY_LINK_WAIT: Duration = Duration::from_secs(10);

/// The polling interval bounds while waiting for a link.
const POLL_FIRST: Duration = Duration::from_millis(5);
const POLL_MAX: Duration = Duration::from_millis(100);

impl Netlink {
    /// Configures the gateway interface `ifname` in the node netns. Equals:
    ///
    /// ```text
    /// (wait up to GATEWAY_LINK_WAIT for IFNAME to exist)
    /// ip link set IFNAME mtu MTU up
    /// ip addr add ADDRESS dev IFNAME                      # unless already there
    /// ip route replace CIDR dev IFNAME scope link proto static   # each of `routes` not
    ///                                                           # already through IFNAME
    /// ```
    ///
    /// Idempotent; removes nothing. `address` is the gateway address with the node subnet's
    /// prefix length (e.g. `10.128.0.1/23`); `routes` are the cluster CIDRs and the service CIDR.
    /// Bounded by [`GATEWAY_LINK_WAIT`] plus [`super::OP_TIMEOUT`].
    pub async fn configure_gateway(
        &self,
        ifname: &str,
        address: Option<Ipv4Net>,
        mtu: u32,
        routes: &[Ipv4Net],
    ) -> Result<(), NetlinkError> {
        validate_ifname(ifname)?;
        let link = self
            .wait_link(
                ifname,
                GATEWAY_LINK_WAIT,
                " (ovs-vswitchd creates it once the port is in the bridge: is ovs-vswitchd \
                 running and the port added?)",
            )
            .await?;
        let step = format!("configuring gateway interface {ifname}");
        bounded(
            step,
            self.configure_gateway_steps(ifname, &link, address, mtu, routes),
        )
        .await?
    }

    async fn configure_gateway_steps(
        &self,
        ifname: &str,
        link: &LinkMessage,
        address: Option<Ipv4Net>,
        mtu: u32,
        routes: &[Ipv4Net],
    ) -> Result<(), NetlinkError> {
        let h = self.handle();
        let index = link.header.index;
        if link_mtu(link) != mtu || !link_up(link) {
            h.link()
                .set(LinkUnspec::new_with_index(index).mtu(mtu).up().build())
                .execute()
                .await
                .map_err(|e| {
                    NetlinkError::nl(format!("setting mtu {mtu} and up on {ifname}"), e)
                })?;
        }
        // An IPv6-only node: tun0 up with its MTU, no IPv4 side.
        let Some(address) = address else {
            return Ok(());
        };
        let present: Vec<Ipv4Net> = h
            .address()
            .get()
            .set_link_index_filter(index)
            .execute()
            .try_collect::<Vec<_>>()
            .await
            .map_err(|e| NetlinkError::nl(format!("listing the addresses of {ifname}"), e))?
            .iter()
            .filter_map(ipv4_address)
            .collect();
        if !present.contains(&address) {
            let added = h
                .address()
                .add(index, IpAddr::V4(address.addr()), address.prefix_len())
                .execute()
                .await;
            match added {
                Ok(()) => {}
                // Added concurrently by someone else: the state we want.
                Err(e) if errno(&e) == Some(libc::EEXIST) => {}
                Err(e) => {
                    return Err(NetlinkError::nl(
                        format!("adding address {address} to {ifname}"),
                        e,
                    ))
                }
            }
        }
        // A route already there through this link (any protocol or scope: openshift-sdn's
        // `proto boot` ones at a takeover, ours after a restart) is left alone: every route
        // change makes ovs-vswitchd's userspace datapath rebuild its tunnel routes, which can
        // drop a tunnelled packet in flight.
        let existing = self.ipv4_routes().await?;
        let specs: Vec<RouteSpec> = routes
            .iter()
            .filter(|dst| !on_link_through(&existing, index, IpNet::V4(**dst)))
            .map(|dst| RouteSpec {
                dst: *dst,
                via: None,
            })
            .collect();
        let replaced = join_all(specs.iter().map(|r| {
            h.route()
                .add(route_message(r, index, RouteProtocol::Static))
                .replace()
                .execute()
        }))
        .await;
        for (route, result) in specs.iter().zip(replaced) {
            result.map_err(|e| {
                NetlinkError::nl(format!("replacing route {} dev {ifname}", route.dst), e)
            })?;
        }
        Ok(())
    }

    /// The IPv6 side of the gateway interface on a dual-stack node (after
    /// [`Self::configure_gateway`], which waited for the link and brought it up):
    ///
    /// ```text
    /// ip -6 addr add ADDRESS dev IFNAME nodad            # unless already there
    /// ip -6 route replace CIDR dev IFNAME proto static   # each of `routes` not already through IFNAME
    /// ```
    ///
    /// `address` is the IPv6 gateway with the node's IPv6 subnet's prefix length; `routes` the
    /// cluster's IPv6 network and the IPv6 service network. No duplicate address detection:
    /// the address is the node's by allocation, and DAD would keep it unusable for a second.
    /// Also `fe80::1/64 nodad`: a link-local address usable at once (see the steps). Idempotent;
    /// removes nothing.
    pub async fn configure_gateway6(
        &self,
        ifname: &str,
        address: Ipv6Net,
        routes: &[Ipv6Net],
    ) -> Result<(), NetlinkError> {
        validate_ifname(ifname)?;
        let link = self.wait_link(ifname, GATEWAY_LINK_WAIT, "").await?;
        let step = format!("configuring the IPv6 side of gateway interface {ifname}");
        bounded(
            step,
            self.configure_gateway6_steps(ifname, &link, address, routes),
        )
        .await?
    }

    async fn configure_gateway6_steps(
        &self,
        ifname: &str,
        link: &LinkMessage,
        address: Ipv6Net,
        routes: &[Ipv6Net],
    ) -> Result<(), NetlinkError> {
        let h = self.handle();
        let index = link.header.index;
        let present: Vec<Ipv6Net> = h
            .address()
            .get()
            .set_link_index_filter(index)
            .execute()
            .try_collect::<Vec<_>>()
            .await
            .map_err(|e| NetlinkError::nl(format!("listing the addresses of {ifname}"), e))?
            .iter()
            .filter_map(ipv6_address)
            .collect();
        // A link-local address that is usable at once, beside whatever one the kernel gave
        // tun0 (it stays tentative for duplicate address detection a second or more after tun0
        // comes up, and the kernel solicits a pod's address for forwarded traffic only from a
        // usable link-local one: without this, a Service's first packets after a start found
        // no neighbour). Per link, so the same on every node; the flows take any link-local
        // address from tun0 as the node's.
        let usable_ll =
            Ipv6Net::new(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1), 64).expect("constant");
        let wanted = [address, usable_ll];
        for address in wanted.into_iter().filter(|a| !present.contains(a)) {
            let mut add = h
                .address()
                .add(index, IpAddr::V6(address.addr()), address.prefix_len());
            add.message_mut()
                .attributes
                .push(AddressAttribute::Flags(AddressFlags::Nodad));
            match add.execute().await {
                Ok(()) => {}
                Err(e) if errno(&e) == Some(libc::EEXIST) => {}
                Err(e) => {
                    let hint = if errno(&e) == Some(libc::EACCES) {
                        format!(" (IPv6 is disabled on {ifname}: net.ipv6.conf.{ifname}.disable_ipv6=1 or net.ipv6.conf.default.disable_ipv6=1; a dual-stack node needs IPv6)")
                    } else {
                        String::new()
                    };
                    return Err(NetlinkError::nl(
                        format!("adding address {address} to {ifname}{hint}"),
                        e,
                    ));
                }
            }
        }
        let existing: Vec<_> = h
            .route()
            .get(rtnetlink::RouteMessageBuilder::<Ipv6Addr>::new().build())
            .execute()
            .try_collect::<Vec<_>>()
            .await
            .map_err(|e| NetlinkError::nl("listing the node's IPv6 routes".to_string(), e))?;
        let specs: Vec<Route6Spec> = routes
            .iter()
            .filter(|dst| !on_link_through(&existing, index, IpNet::V6(**dst)))
            .map(|dst| Route6Spec {
                dst: *dst,
                via: None,
            })
            .collect();
        let replaced = join_all(specs.iter().map(|r| {
            h.route()
                .add(route6_message(r, index, RouteProtocol::Static))
                .replace()
                .execute()
        }))
        .await;
        for (route, result) in specs.iter().zip(replaced) {
            result.map_err(|e| {
                NetlinkError::nl(format!("replacing route {} dev {ifname}", route.dst), e)
            })?;
        }
        Ok(())
    }

    /// Waits until interface `name` exists in the node netns, polling with a short backoff, for
    /// at most `timeout`; returns its index.
    pub async fn wait_for_link(&self, name: &str, timeout: Duration) -> Result<u32, NetlinkError> {
        validate_ifname(name)?;
        Ok(self.wait_link(name, timeout, "").await?.header.index)
    }

    async fn wait_link(
        &self,
        name: &str,
        timeout: Duration,
        hint: &str,
    ) -> Result<LinkMessage, NetlinkError> {
        let deadline = Instant::now() + timeout;
        let mut pause = POLL_FIRST;
        loop {
            let step = || format!("looking up interface {name} in the node netns");
            let found = bounded(step(), get_link(&self.node.handle, name))
                .await?
                .map_err(|e| NetlinkError::nl(step(), e))?;
            if let Some(link) = found {
                return Ok(link);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(NetlinkError::LinkWaitTimeout {
                    ifname: name.to_string(),
                    waited: timeout,
                    hint: hint.to_string(),
                });
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(POLL_MAX);
        }
    }
}

/// Whether `existing` (a route dump of the main table's family) holds an on-link route to `dst`
/// out of interface `index`, whatever its protocol or scope: such a route is left alone (see
/// [`Netlink::configure_gateway`]).
fn on_link_through(existing: &[RouteMessage], index: u32, dst: IpNet) -> bool {
    let want = dst.trunc().addr();
    existing.iter().any(|r| {
        r.header.destination_prefix_length == dst.prefix_len()
            && r.header.table == RouteHeader::RT_TABLE_MAIN
            && r.attributes
                .iter()
                .any(|a| matches!(a, RouteAttribute::Oif(i) if *i == index))
            && r.attributes.iter().any(|a| match a {
                RouteAttribute::Destination(RouteAddress::Inet(ip)) => IpAddr::V4(*ip) == want,
                RouteAttribute::Destination(RouteAddress::Inet6(ip)) => IpAddr::V6(*ip) == want,
                _ => false,
            })
            && !r
                .attributes
                .iter()
                .any(|a| matches!(a, RouteAttribute::Gateway(_)))
    })
}
