//! Egress IP addresses on the node's interface (the one that carries the node IP), natively:
//! found, added and removed with rtnetlink, each with the label `<ifname>:eip` so the agent
//! recognises its own (and removes stale ones after a restart) without touching any other
//! address; announced with a gratuitous ARP (a raw `AF_PACKET` frame) so the network's ARP
//! caches move to this node at once when an egress IP fails over to it.
//!
//! Before an egress IP is put on the interface it is probed as RFC 5227 describes
//! ([`arp_probe`]): ARP requests with sender address 0.0.0.0 ask for it, and any host that
//! answers for it (or probes for it at the same time) owns it; the agent then refuses it rather
//! than take another machine's address away from it. The RFC spaces three probes 1-2 s apart;
//! the agent sends three 200 ms apart and listens for one second, a shorter wait that still
//! hears any host on the link (an answer takes milliseconds) and keeps egress IP failover fast.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use futures::TryStreamExt;
use ipnet::{Ipv4Net, Ipv6Net};
use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressMessage, AddressProtocol, CacheInfo,
};
use netlink_packet_route::link::LinkAttribute;
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use rtnetlink::RouteMessageBuilder;

use super::error::errno;
use super::pod::{ipv4_address, ipv6_address};
use super::{bounded, link_mac, link_mtu, Netlink, NetlinkError};

/// The address protocol (`IFA_PROTO`, `ip addr ... proto 0xe9`) IPv6 egress IPs carry, since an
/// IPv6 address has no label: how the agent recognises its own after a restart. The kernel's
/// own values are 0-3.
pub const EGRESS_IPV6_PROTO: u8 = 0xe9;

/// The interface that carries the node IP, as egress IPs need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressLink {
    /// Its index.
    pub index: u32,
    /// Its name.
    pub name: String,
    /// Its MAC (for gratuitous ARP and neighbour advertisements).
    pub mac: [u8; 6],
    /// Its MTU (what the underlay carries: the pods' MTU plus VXLAN's overhead must fit).
    pub mtu: u32,
    /// The node IP's IPv4 network on it (IPv4 egress IPs must lie inside; none on the IPv6
    /// underlay of an IPv6-only cluster).
    pub network: Option<Ipv4Net>,
    /// Its own global IPv6 addresses (not egress IPs), with their prefixes: an IPv6 egress IP
    /// must lie inside one of their networks, and must not be one of them.
    pub addresses6: Vec<Ipv6Net>,
}

impl EgressLink {
    /// The address label of egress IPs on this link (`<ifname>:eip`, at most 15 bytes, as the
    /// kernel requires a label to start with the link's name).
    pub fn label(&self) -> Result<String, NetlinkError> {
        let label = format!("{}:eip", self.name);
        if label.len() > 15 {
            return Err(NetlinkError::InvalidName {
                name: self.name.clone(),
                reason: format!(
                    "too long to label egress IPs on it ({label:?} is over the kernel's 15 bytes)"
                ),
            });
        }
        Ok(label)
    }

    /// Why `ip` cannot be held on this link (outside its networks, or its own address), or
    /// `None`.
    pub fn cannot_hold(&self, ip: IpAddr) -> Option<String> {
        match ip {
            IpAddr::V4(ip) => match self.network {
                Some(net) => (!net.contains(&ip)).then(|| {
                    format!(
                        "it is not in the network {net} of {} (the node IP's interface)",
                        self.name
                    )
                }),
                None => Some(format!(
                    "{} (the node IP's interface) has no IPv4 network",
                    self.name
                )),
            },
            IpAddr::V6(ip) => {
                if self.addresses6.iter().any(|a| a.addr() == ip) {
                    return Some(format!("it is an address of {} itself", self.name));
                }
                let nets: Vec<String> = self
                    .addresses6
                    .iter()
                    .map(|a| a.trunc().to_string())
                    .collect();
                (!self.addresses6.iter().any(|a| a.contains(&ip))).then(|| {
                    format!(
                        "it is not in an IPv6 network of {} (the node IP's interface has {})",
                        self.name,
                        if nets.is_empty() {
                            "no global IPv6 address".to_string()
                        } else {
                            nets.join(", ")
                        }
                    )
                })
            }
        }
    }
}

/// Whether an address message is one of our IPv6 egress IPs.
fn is_egress6(a: &AddressMessage) -> bool {
    a.attributes
        .iter()
        .any(|x| matches!(x, AddressAttribute::Protocol(p) if u8::from(*p) == EGRESS_IPV6_PROTO))
}

impl Netlink {
    /// The gateways of the node's default routes (both families, every table): addresses an
    /// egress IP must never take.
    pub async fn default_gateways(&self) -> Result<Vec<IpAddr>, NetlinkError> {
        let mut routes = self.ipv4_routes().await?;
        let h = self.handle();
        let step = "listing the node's IPv6 routes".to_string();
        routes.extend(
            bounded(step.clone(), async {
                h.route()
                    .get(RouteMessageBuilder::<Ipv6Addr>::new().build())
                    .execute()
                    .try_collect::<Vec<_>>()
                    .await
                    .map_err(|e| NetlinkError::nl(step.clone(), e))
            })
            .await??,
        );
        Ok(routes
            .iter()
            .filter(|r| r.header.destination_prefix_length == 0)
            .flat_map(|r| {
                r.attributes.iter().filter_map(|a| match a {
                    RouteAttribute::Gateway(RouteAddress::Inet(ip)) => Some(IpAddr::V4(*ip)),
                    RouteAttribute::Gateway(RouteAddress::Inet6(ip)) => Some(IpAddr::V6(*ip)),
                    _ => None,
                })
            })
            .collect())
    }

    /// Every IPv4 route of the node netns, every table (`ip -4 route show table all`): one dump.
    pub(crate) async fn ipv4_routes(&self) -> Result<Vec<RouteMessage>, NetlinkError> {
        let h = self.handle();
        let step = "listing the node's routes".to_string();
        bounded(step.clone(), async {
            h.route()
                .get(RouteMessageBuilder::<Ipv4Addr>::new().build())
                .execute()
                .try_collect()
                .await
                .map_err(|e| NetlinkError::nl(step.clone(), e))
        })
        .await?
    }

    /// The interface holding `node_ip` (`ip -4 addr show to NODE_IP`), or `None`.
    pub async fn egress_link(&self, node_ip: IpAddr) -> Result<Option<EgressLink>, NetlinkError> {
        let h = self.handle();
        let step = format!("finding the interface of {node_ip}");
        bounded(step.clone(), async {
            let addrs: Vec<_> = h
                .address()
                .get()
                .execute()
                .try_collect()
                .await
                .map_err(|e| NetlinkError::nl(step.clone(), e))?;
            let Some(index) = addrs.iter().find_map(|a| {
                let is_node_ip = match node_ip {
                    IpAddr::V4(ip) => ipv4_address(a).is_some_and(|n| n.addr() == ip),
                    IpAddr::V6(ip) => ipv6_address(a).is_some_and(|n| n.addr() == ip),
                };
                is_node_ip.then_some(a.header.index)
            }) else {
                return Ok(None);
            };
            let net = addrs.iter().find_map(|a| {
                let n = ipv4_address(a).filter(|_| a.header.index == index)?;
                match node_ip {
                    IpAddr::V4(ip) => (n.addr() == ip).then_some(n),
                    IpAddr::V6(_) => Some(n),
                }
            });
            let addresses6 = addrs
                .iter()
                .filter(|a| a.header.index == index && !is_egress6(a))
                .filter_map(ipv6_address)
                .collect();
            let link = h
                .link()
                .get()
                .match_index(index)
                .execute()
                .try_next()
                .await
                .map_err(|e| NetlinkError::nl(step.clone(), e))?;
            let Some(link) = link else { return Ok(None) };
            let name = link
                .attributes
                .iter()
                .find_map(|a| match a {
                    LinkAttribute::IfName(n) => Some(n.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            Ok(Some(EgressLink {
                index,
                name,
                mac: link_mac(&link).unwrap_or_default(),
                mtu: link_mtu(&link),
                network: net.map(|n| n.trunc()),
                addresses6,
            }))
        })
        .await?
    }

    /// The egress IPs on `link`: IPv4 addresses that carry its egress label, IPv6 ones that
    /// carry [`EGRESS_IPV6_PROTO`].
    pub async fn egress_addresses(&self, link: &EgressLink) -> Result<Vec<IpAddr>, NetlinkError> {
        let label = link.label()?;
        let h = self.handle();
        let step = format!("listing the egress IPs on {}", link.name);
        bounded(step.clone(), async {
            let addrs: Vec<_> = h
                .address()
                .get()
                .set_link_index_filter(link.index)
                .execute()
                .try_collect()
                .await
                .map_err(|e| NetlinkError::nl(step.clone(), e))?;
            let v4 = addrs
                .iter()
                .filter(|a| {
                    a.attributes
                        .iter()
                        .any(|x| matches!(x, AddressAttribute::Label(l) if *l == label))
                })
                .filter_map(ipv4_address)
                .map(|n| IpAddr::V4(n.addr()));
            let v6 = addrs
                .iter()
                .filter(|a| is_egress6(a))
                .filter_map(ipv6_address)
                .map(|n| IpAddr::V6(n.addr()));
            Ok(v4.chain(v6).collect())
        })
        .await?
    }

    /// `ip addr add IP/PREFIX dev LINK label LINK:eip` for IPv4; for IPv6 `ip -6 addr add
    /// IP/128 dev LINK nodad preferred_lft 0 proto 0xe9`: no duplicate address detection (the
    /// agent probed first), deprecated so the node never picks it as the source of its own
    /// connections (an IPv4 egress IP is a secondary address for the same reason), a host
    /// route only. Idempotent: present is fine.
    pub async fn add_egress_address(
        &self,
        link: &EgressLink,
        ip: IpAddr,
    ) -> Result<(), NetlinkError> {
        let step = format!("adding egress IP {ip} to {}", link.name);
        let prefix = match ip {
            IpAddr::V4(_) => link.network.map_or(32, |n| n.prefix_len()),
            IpAddr::V6(_) => 128,
        };
        let mut req = self.handle().address().add(link.index, ip, prefix);
        let attrs = &mut req.message_mut().attributes;
        match ip {
            IpAddr::V4(_) => attrs.push(AddressAttribute::Label(link.label()?)),
            IpAddr::V6(_) => {
                let mut life = CacheInfo::default();
                life.ifa_preferred = 0;
                life.ifa_valid = u32::MAX;
                attrs.push(AddressAttribute::CacheInfo(life));
                attrs.push(AddressAttribute::Flags(AddressFlags::Nodad));
                attrs.push(AddressAttribute::Protocol(AddressProtocol::from(
                    EGRESS_IPV6_PROTO,
                )));
            }
        }
        match bounded(step.clone(), req.execute()).await? {
            Ok(()) => Ok(()),
            Err(e) if errno(&e) == Some(libc::EEXIST) => Ok(()),
            Err(e) => Err(NetlinkError::nl(step, e)),
        }
    }

    /// `ip addr del IP/PREFIX dev LINK` (idempotent: absent is fine).
    pub async fn del_egress_address(
        &self,
        link: &EgressLink,
        ip: IpAddr,
    ) -> Result<(), NetlinkError> {
        let step = format!("removing egress IP {ip} from {}", link.name);
        let h = self.handle();
        let addrs: Vec<_> = bounded(
            step.clone(),
            h.address()
                .get()
                .set_link_index_filter(link.index)
                .execute()
                .try_collect::<Vec<_>>(),
        )
        .await?
        .map_err(|e| NetlinkError::nl(step.clone(), e))?;
        for a in addrs {
            let this = match ip {
                IpAddr::V4(ip) => ipv4_address(&a).is_some_and(|n| n.addr() == ip),
                IpAddr::V6(ip) => ipv6_address(&a).is_some_and(|n| n.addr() == ip),
            };
            if this {
                match bounded(step.clone(), h.address().del(a).execute()).await? {
                    Ok(()) => {}
                    Err(e) if errno(&e) == Some(libc::EADDRNOTAVAIL) => {}
                    Err(e) => return Err(NetlinkError::nl(step, e)),
                }
            }
        }
        Ok(())
    }
}

const ETH_P_ARP: u16 = 0x0806;

/// A broadcast ARP request from `mac`: sender address `spa`, target address `tpa`.
fn arp_request(mac: &[u8; 6], spa: Ipv4Addr, tpa: Ipv4Addr) -> Vec<u8> {
    let mut frame = Vec::with_capacity(42);
    frame.extend_from_slice(&[0xff; 6]);
    frame.extend_from_slice(mac);
    frame.extend_from_slice(&ETH_P_ARP.to_be_bytes());
    frame.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]); // Ethernet, IPv4, request
    frame.extend_from_slice(mac);
    frame.extend_from_slice(&spa.octets());
    frame.extend_from_slice(&[0; 6]);
    frame.extend_from_slice(&tpa.octets());
    frame
}

/// A raw `AF_PACKET` socket for one ethertype bound to `link` (it receives that link's frames
/// of the type only), and the address to send to.
pub(super) struct RawSocket {
    fd: OwnedFd,
    to: libc::sockaddr_ll,
}

impl RawSocket {
    /// For ARP, sending to the broadcast address.
    fn arp(link: &EgressLink) -> io::Result<RawSocket> {
        RawSocket::open(link, ETH_P_ARP, [0xff; 6])
    }

    /// For `ethertype` on `link`, sending to `dst`.
    pub(super) fn open(link: &EgressLink, ethertype: u16, dst: [u8; 6]) -> io::Result<RawSocket> {
        // SAFETY: plain socket(2); the descriptor is owned below.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                i32::from(ethertype.to_be()),
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_ll is plain old data; all-zero is valid.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ethertype.to_be();
        sll.sll_ifindex = i32::try_from(link.index).map_err(io::Error::other)?;
        // SAFETY: binds a valid descriptor to a properly sized sockaddr_ll.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        sll.sll_halen = 6;
        sll.sll_addr[..6].copy_from_slice(&dst);
        Ok(RawSocket { fd, to: sll })
    }

    /// Receives frames sent to the multicast MAC `mac` too (`PACKET_ADD_MEMBERSHIP`).
    pub(super) fn join(&self, mac: [u8; 6]) -> io::Result<()> {
        // SAFETY: packet_mreq is plain old data; all-zero is valid.
        let mut mreq: libc::packet_mreq = unsafe { std::mem::zeroed() };
        mreq.mr_ifindex = self.to.sll_ifindex;
        mreq.mr_type = libc::PACKET_MR_MULTICAST as u16;
        mreq.mr_alen = 6;
        mreq.mr_address[..6].copy_from_slice(&mac);
        // SAFETY: a valid descriptor and a properly sized packet_mreq.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                (&mreq as *const libc::packet_mreq).cast(),
                std::mem::size_of::<libc::packet_mreq>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    pub(super) fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: sends `frame.len()` bytes from a live buffer to a properly sized sockaddr_ll.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&self.to as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// One received frame into `buf` within `wait_ms`, or `None`.
    pub(super) fn recv(&self, buf: &mut [u8], wait_ms: i32) -> Option<usize> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, wait_ms) } <= 0 {
            return None;
        }
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        usize::try_from(n).ok()
    }
}

/// Sends one gratuitous ARP request (`arping -U`) for `ip` out of `link`: sender and target
/// `ip`, sender MAC the link's, broadcast. Best effort: the caller logs a failure.
pub fn gratuitous_arp(link: &EgressLink, ip: Ipv4Addr) -> io::Result<()> {
    RawSocket::arp(link)?.send(&arp_request(&link.mac, ip, ip))
}

/// How many probes an address-conflict probe sends ([`arp_probe`], and for IPv6
/// `super::nd_probe`), and how far apart.
pub(super) const ARP_PROBES: u32 = 3;
/// The spacing of the probes.
pub(super) const ARP_PROBE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);
/// How long a probe listens in all.
pub(super) const ARP_PROBE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl RawSocket {
    /// Sends `probe` [`ARP_PROBES`] times [`ARP_PROBE_INTERVAL`] apart while listening for
    /// [`ARP_PROBE_WAIT`]; the first frame `conflict` names a MAC in ends it with that MAC.
    pub(super) fn probe(
        &self,
        probe: &[u8],
        conflict: impl Fn(&[u8]) -> Option<[u8; 6]>,
    ) -> io::Result<Option<[u8; 6]>> {
        let start = std::time::Instant::now();
        let mut sent = 0;
        let mut buf = [0u8; 256];
        while start.elapsed() < ARP_PROBE_WAIT {
            if sent < ARP_PROBES && start.elapsed() >= ARP_PROBE_INTERVAL * sent {
                self.send(probe)?;
                sent += 1;
            }
            if let Some(n) = self.recv(&mut buf, 50) {
                if let Some(mac) = conflict(&buf[..n]) {
                    return Ok(Some(mac));
                }
            }
        }
        Ok(None)
    }
}

/// Probes `ip` on `link` as RFC 5227 describes (ARP requests from 0.0.0.0 for it) and returns
/// the MAC of a host that answers for it or probes for it too, or `None` when nobody did within
/// [`ARP_PROBE_WAIT`]. Blocking: call it from a blocking thread.
pub fn arp_probe(link: &EgressLink, ip: Ipv4Addr) -> io::Result<Option<[u8; 6]>> {
    let probe = arp_request(&link.mac, Ipv4Addr::UNSPECIFIED, ip);
    RawSocket::arp(link)?.probe(&probe, |f| arp_conflict(f, &link.mac, ip))
}

/// Whether an ARP frame says another host holds `ip` (RFC 5227 2.1.1): its sender address is
/// `ip`, or it is another host's probe for `ip`. Returns that host's MAC.
fn arp_conflict(frame: &[u8], own: &[u8; 6], ip: Ipv4Addr) -> Option<[u8; 6]> {
    let arp = frame.get(14..42)?;
    if frame.get(12..14)? != [0x08, 0x06] || arp[..6] != [0, 1, 8, 0, 6, 4] {
        return None;
    }
    let sha: [u8; 6] = arp[8..14].try_into().ok()?;
    let spa = Ipv4Addr::new(arp[14], arp[15], arp[16], arp[17]);
    let tpa = Ipv4Addr::new(arp[24], arp[25], arp[26], arp[27]);
    if sha == *own {
        return None;
    }
    let op = u16::from_be_bytes([arp[6], arp[7]]);
    (spa == ip || (op == 1 && spa.is_unspecified() && tpa == ip)).then_some(sha)
}

#[cfg(test)]
mod probe_tests {
    use super::*;

    fn arp(op: u16, sha: [u8; 6], spa: [u8; 4], tpa: [u8; 4]) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&sha);
        f.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4]);
        f.extend_from_slice(&op.to_be_bytes());
        f.extend_from_slice(&sha);
        f.extend_from_slice(&spa);
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&tpa);
        f
    }

    #[test]
    fn an_answer_or_a_rival_probe_is_a_conflict_our_own_probe_is_not() {
        let own = [2, 0, 0, 0, 0, 1];
        let other = [2, 0, 0, 0, 0, 2];
        let ip = Ipv4Addr::new(192, 168, 1, 50);
        // Another host answers for the address.
        assert_eq!(
            arp_conflict(&arp(2, other, [192, 168, 1, 50], [0; 4]), &own, ip),
            Some(other)
        );
        // Another host announces or asks from it.
        assert_eq!(
            arp_conflict(
                &arp(1, other, [192, 168, 1, 50], [192, 168, 1, 1]),
                &own,
                ip
            ),
            Some(other)
        );
        // Another host probes for it at the same time.
        assert_eq!(
            arp_conflict(&arp(1, other, [0; 4], [192, 168, 1, 50]), &own, ip),
            Some(other)
        );
        // Our own probe, echoed back; other addresses; a short frame.
        assert_eq!(
            arp_conflict(&arp(1, own, [0; 4], [192, 168, 1, 50]), &own, ip),
            None
        );
        assert_eq!(
            arp_conflict(&arp(2, other, [192, 168, 1, 51], [0; 4]), &own, ip),
            None
        );
        assert_eq!(arp_conflict(&[0u8; 20], &own, ip), None);
    }
}
