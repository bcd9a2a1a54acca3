//! The two address families the lease store serves, as host-local does in one directory: its
//! range set 0 is the IPv4 range and set 1 the IPv6 range of a dual-stack network (each with
//! its own `last_reserved_ip.N`), lease files are named by the address of either family.
//!
//! Why a trait and not `IpAddr`: a range, its walk and a lease hold one family, known when the
//! code is written (the pod's IPv4 address is an `Ipv4Addr` everywhere else in the agent), so the
//! family is a type parameter and an IPv4 caller reads exactly as before. Scanning and release
//! work on both families at once ([`Addr`] for `IpAddr` too): host-local releases every address
//! an attachment holds, whatever its family.

use std::fmt::{Debug, Display};
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// An address a lease file can be named by: one family ([`Ipv4Addr`], [`Ipv6Addr`]) or both
/// ([`IpAddr`]).
pub trait Addr: Copy + Ord + Hash + Display + Debug + Send + Sync + 'static {
    /// The address of this kind a file name parsed as, if it is one.
    fn of(ip: IpAddr) -> Option<Self>;
    /// The address, of whichever family.
    fn ip(self) -> IpAddr;
    /// The range set whose cursor (`last_reserved_ip.N`) this address moves, host-local's
    /// order for a dual-stack network: IPv4 first.
    fn range_set(self) -> &'static str {
        match self.ip() {
            IpAddr::V4(_) => "0",
            IpAddr::V6(_) => "1",
        }
    }
}

impl Addr for IpAddr {
    fn of(ip: IpAddr) -> Option<Self> {
        Some(ip)
    }
    fn ip(self) -> IpAddr {
        self
    }
}

impl Addr for Ipv4Addr {
    fn of(ip: IpAddr) -> Option<Self> {
        match ip {
            IpAddr::V4(v4) => Some(v4),
            IpAddr::V6(_) => None,
        }
    }
    fn ip(self) -> IpAddr {
        IpAddr::V4(self)
    }
}

impl Addr for Ipv6Addr {
    fn of(ip: IpAddr) -> Option<Self> {
        match ip {
            IpAddr::V6(v6) => Some(v6),
            IpAddr::V4(_) => None,
        }
    }
    fn ip(self) -> IpAddr {
        IpAddr::V6(self)
    }
}

/// One family's arithmetic, for ranges: addresses as integers, and its subnets.
pub trait Family: Addr {
    /// The family's subnet type.
    type Net: Copy + Debug + Display + PartialEq + Eq + Send + Sync + 'static;
    /// Address length in bits (32, 128).
    const BITS: u8;
    /// The range set this family's range is in (`last_reserved_ip.N`).
    const RANGE_SET: &'static str;
    /// The address as an integer.
    fn bits(self) -> u128;
    /// The address of an integer (the low [`Self::BITS`] bits).
    fn from_bits(bits: u128) -> Self;
    /// The subnet with its host bits cleared.
    fn trunc(net: &Self::Net) -> Self::Net;
    /// Its network address.
    fn network(net: &Self::Net) -> Self;
    /// Its prefix length.
    fn prefix_len(net: &Self::Net) -> u8;
    /// Whether it holds `ip`.
    fn holds(net: &Self::Net, ip: Self) -> bool;
    /// Its broadcast address, which is never leased (IPv4 only).
    fn broadcast(net: &Self::Net) -> Option<Self>;
    /// The last address host-local leases by default: IPv4's broadcast - 1, IPv6's last.
    fn default_last(net: &Self::Net) -> Self;
    /// The subnet, of whichever family.
    fn any_net(net: &Self::Net) -> IpNet;
}

impl Family for Ipv4Addr {
    type Net = Ipv4Net;
    const BITS: u8 = 32;
    const RANGE_SET: &'static str = "0";
    fn bits(self) -> u128 {
        u128::from(u32::from(self))
    }
    fn from_bits(bits: u128) -> Self {
        Ipv4Addr::from(bits as u32)
    }
    fn trunc(net: &Ipv4Net) -> Ipv4Net {
        net.trunc()
    }
    fn network(net: &Ipv4Net) -> Self {
        net.network()
    }
    fn prefix_len(net: &Ipv4Net) -> u8 {
        net.prefix_len()
    }
    fn holds(net: &Ipv4Net, ip: Self) -> bool {
        net.contains(&ip)
    }
    fn broadcast(net: &Ipv4Net) -> Option<Self> {
        Some(net.broadcast())
    }
    fn default_last(net: &Ipv4Net) -> Self {
        Ipv4Addr::from(u32::from(net.broadcast()).wrapping_sub(1))
    }
    fn any_net(net: &Ipv4Net) -> IpNet {
        IpNet::V4(*net)
    }
}

impl Family for Ipv6Addr {
    type Net = Ipv6Net;
    const BITS: u8 = 128;
    const RANGE_SET: &'static str = "1";
    fn bits(self) -> u128 {
        u128::from(self)
    }
    fn from_bits(bits: u128) -> Self {
        Ipv6Addr::from(bits)
    }
    fn trunc(net: &Ipv6Net) -> Ipv6Net {
        net.trunc()
    }
    fn network(net: &Ipv6Net) -> Self {
        net.network()
    }
    fn prefix_len(net: &Ipv6Net) -> u8 {
        net.prefix_len()
    }
    fn holds(net: &Ipv6Net, ip: Self) -> bool {
        net.contains(&ip)
    }
    fn broadcast(_: &Ipv6Net) -> Option<Self> {
        None
    }
    fn default_last(net: &Ipv6Net) -> Self {
        net.broadcast()
    }
    fn any_net(net: &Ipv6Net) -> IpNet {
        IpNet::V6(*net)
    }
}
