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
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use futures::TryStreamExt;
use ipnet::Ipv4Net;
use netlink_packet_route::address::AddressAttribute;
use netlink_packet_route::link::LinkAttribute;
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use rtnetlink::RouteMessageBuilder;

use super::error::errno;
use super::pod::ipv4_address;
use super::{bounded, link_mac, Netlink, NetlinkError};

/// The interface that carries the node IP, as egress IPs need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressLink {
    /// Its index.
    pub index: u32,
    /// Its name.
    pub name: String,
    /// Its MAC (for gratuitous ARP).
    pub mac: [u8; 6],
    /// The node IP's network on it (egress IPs must lie inside).
    pub network: Ipv4Net,
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
}

impl Netlink {
    /// The gateways of the node's default routes (IPv4, every table): addresses an egress IP
    /// must never take.
    pub async fn default_gateways(&self) -> Result<Vec<Ipv4Addr>, NetlinkError> {
        Ok(self
            .ipv4_routes()
            .await?
            .iter()
            .filter(|r| r.header.destination_prefix_length == 0)
            .flat_map(|r| {
                r.attributes.iter().filter_map(|a| match a {
                    RouteAttribute::Gateway(RouteAddress::Inet(ip)) => Some(*ip),
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
    pub async fn egress_link(&self, node_ip: Ipv4Addr) -> Result<Option<EgressLink>, NetlinkError> {
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
            let Some((index, net)) = addrs.iter().find_map(|a| {
                ipv4_address(a)
                    .filter(|n| n.addr() == node_ip)
                    .map(|n| (a.header.index, n))
            }) else {
                return Ok(None);
            };
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
                network: net.trunc(),
            }))
        })
        .await?
    }

    /// The addresses on `link` that carry its egress label.
    pub async fn egress_addresses(&self, link: &EgressLink) -> Result<Vec<Ipv4Addr>, NetlinkError> {
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
            Ok(addrs
                .iter()
                .filter(|a| {
                    a.attributes
                        .iter()
                        .any(|x| matches!(x, AddressAttribute::Label(l) if *l == label))
                })
                .filter_map(ipv4_address)
                .map(|n| n.addr())
                .collect())
        })
        .await?
    }

    /// `ip addr add IP/PREFIX dev LINK label LINK:eip` (idempotent: present is fine).
    pub async fn add_egress_address(
        &self,
        link: &EgressLink,
        ip: Ipv4Addr,
    ) -> Result<(), NetlinkError> {
        let label = link.label()?;
        let step = format!("adding egress IP {ip} to {}", link.name);
        let mut req =
            self.handle()
                .address()
                .add(link.index, IpAddr::V4(ip), link.network.prefix_len());
        req.message_mut()
            .attributes
            .push(AddressAttribute::Label(label));
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
        ip: Ipv4Addr,
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
            if ipv4_address(&a).is_some_and(|n| n.addr() == ip) {
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

/// A raw `AF_PACKET` socket for ARP bound to `link` (it receives that link's ARP only), and
/// the broadcast address to send to.
struct ArpSocket {
    fd: OwnedFd,
    to: libc::sockaddr_ll,
}

impl ArpSocket {
    fn open(link: &EgressLink) -> io::Result<ArpSocket> {
        // SAFETY: plain socket(2); the descriptor is owned below.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                i32::from(ETH_P_ARP.to_be()),
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
        sll.sll_protocol = ETH_P_ARP.to_be();
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
        sll.sll_addr[..6].copy_from_slice(&[0xff; 6]);
        Ok(ArpSocket { fd, to: sll })
    }

    fn send(&self, frame: &[u8]) -> io::Result<()> {
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
    fn recv(&self, buf: &mut [u8], wait_ms: i32) -> Option<usize> {
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
    ArpSocket::open(link)?.send(&arp_request(&link.mac, ip, ip))
}

/// How many RFC 5227 probes [`arp_probe`] sends, and how far apart.
pub(super) const ARP_PROBES: u32 = 3;
/// The spacing of the probes.
pub(super) const ARP_PROBE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);
/// How long [`arp_probe`] listens in all.
pub(super) const ARP_PROBE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Probes `ip` on `link` as RFC 5227 describes (ARP requests from 0.0.0.0 for it) and returns
/// the MAC of a host that answers for it or probes for it too, or `None` when nobody did within
/// [`ARP_PROBE_WAIT`]. Blocking: call it from a blocking thread.
pub fn arp_probe(link: &EgressLink, ip: Ipv4Addr) -> io::Result<Option<[u8; 6]>> {
    let sock = ArpSocket::open(link)?;
    let probe = arp_request(&link.mac, Ipv4Addr::UNSPECIFIED, ip);
    let start = std::time::Instant::now();
    let mut sent = 0;
    let mut buf = [0u8; 128];
    while start.elapsed() < ARP_PROBE_WAIT {
        if sent < ARP_PROBES && start.elapsed() >= ARP_PROBE_INTERVAL * sent {
            sock.send(&probe)?;
            sent += 1;
        }
        if let Some(n) = sock.recv(&mut buf, 50) {
            if let Some(mac) = arp_conflict(&buf[..n], &link.mac, ip) {
                return Ok(Some(mac));
            }
        }
    }
    Ok(None)
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
