//! Egress IP addresses on the node's interface (the one that carries the node IP), natively:
//! found, added and removed with rtnetlink, each with the label `<ifname>:eip` so the agent
//! recognises its own (and removes stale ones after a restart) without touching any other
//! address; announced with a gratuitous ARP (a raw `AF_PACKET` frame) so the network's ARP
//! caches move to this node at once when an egress IP fails over to it.

use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use futures::TryStreamExt;
use ipnet::Ipv4Net;
use netlink_packet_route::address::AddressAttribute;
use netlink_packet_route::link::LinkAttribute;

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

/// Sends one gratuitous ARP request (`arping -U`) for `ip` out of `link`: sender and target
/// `ip`, sender MAC the link's, broadcast. Best effort: the caller logs a failure.
pub fn gratuitous_arp(link: &EgressLink, ip: Ipv4Addr) -> io::Result<()> {
    const ETH_P_ARP: u16 = 0x0806;
    let mut frame = Vec::with_capacity(42);
    frame.extend_from_slice(&[0xff; 6]);
    frame.extend_from_slice(&link.mac);
    frame.extend_from_slice(&ETH_P_ARP.to_be_bytes());
    frame.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]); // Ethernet, IPv4, request
    frame.extend_from_slice(&link.mac);
    frame.extend_from_slice(&ip.octets());
    frame.extend_from_slice(&[0; 6]);
    frame.extend_from_slice(&ip.octets());
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
    sll.sll_halen = 6;
    sll.sll_addr[..6].copy_from_slice(&[0xff; 6]);
    // SAFETY: sends `frame.len()` bytes from a live buffer to a properly sized sockaddr_ll.
    let n = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            frame.as_ptr().cast(),
            frame.len(),
            0,
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
