//! Value types shared by matches and actions: MAC addresses and masked values.
//!
//! `Masked<T>` is canonical by construction, the way Open vSwitch stores a match: value bits
//! outside the mask are cleared, an all-ones mask is stored as "exact" and an all-zero mask is
//! refused (it would match nothing in particular and encode to nothing). Canonical values are
//! what make a flow read back from the switch compare equal to the flow that was installed.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use super::FlowError;

/// An Ethernet address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// The pod MAC of the pipeline: `0a:58:` followed by the four bytes of the IPv4 address.
    pub fn from_pod_ip(ip: Ipv4Addr) -> Self {
        let o = ip.octets();
        MacAddr([0x0a, 0x58, o[0], o[1], o[2], o[3]])
    }

    /// The pod MAC of an IPv6-only pod: `0a:58:` followed by the last four bytes of its IPv6
    /// address (as OVN-Kubernetes derives it). Unique among a node's pods as long as their
    /// addresses differ in the low 32 bits, which the agent's address management keeps.
    pub fn from_pod_ip6(ip: Ipv6Addr) -> Self {
        let o = ip.octets();
        MacAddr([0x0a, 0x58, o[12], o[13], o[14], o[15]])
    }

    /// The pod MAC of a pod with these addresses: from the IPv4 address where there is one,
    /// else from the IPv6 address (`None` without either).
    pub fn from_pod_addrs(ip: Option<Ipv4Addr>, ip6: Option<Ipv6Addr>) -> Option<Self> {
        match (ip, ip6) {
            (Some(ip), _) => Some(MacAddr::from_pod_ip(ip)),
            (None, Some(ip6)) => Some(MacAddr::from_pod_ip6(ip6)),
            (None, None) => None,
        }
    }

    /// The six bytes of the address.
    pub fn octets(&self) -> [u8; 6] {
        self.0
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MacAddr({self})")
    }
}

impl FromStr for MacAddr {
    type Err = FlowError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || FlowError::Parse(format!("invalid MAC address {s:?}"));
        let mut out = [0u8; 6];
        let mut parts = s.split(':');
        for byte in out.iter_mut() {
            let p = parts.next().ok_or_else(bad)?;
            if p.is_empty() || p.len() > 2 {
                return Err(bad());
            }
            *byte = u8::from_str_radix(p, 16).map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(MacAddr(out))
    }
}

/// Values that can be matched under a bit mask.
pub trait Maskable: Copy + PartialEq + fmt::Debug {
    /// `self & mask`.
    fn and(self, mask: Self) -> Self;
    /// The mask with every bit set.
    fn all_ones() -> Self;
    /// The mask with no bit set.
    fn zero() -> Self;
}

macro_rules! maskable_int {
    ($($t:ty),*) => {$(
        impl Maskable for $t {
            fn and(self, mask: Self) -> Self { self & mask }
            fn all_ones() -> Self { <$t>::MAX }
            fn zero() -> Self { 0 }
        }
    )*};
}
maskable_int!(u8, u16, u32, u64, u128);

impl Maskable for Ipv4Addr {
    fn and(self, mask: Self) -> Self {
        Ipv4Addr::from(u32::from(self) & u32::from(mask))
    }
    fn all_ones() -> Self {
        Ipv4Addr::BROADCAST
    }
    fn zero() -> Self {
        Ipv4Addr::UNSPECIFIED
    }
}

impl Maskable for MacAddr {
    fn and(self, mask: Self) -> Self {
        let mut out = self.0;
        for (o, m) in out.iter_mut().zip(mask.0) {
            *o &= m;
        }
        MacAddr(out)
    }
    fn all_ones() -> Self {
        MacAddr([0xff; 6])
    }
    fn zero() -> Self {
        MacAddr([0; 6])
    }
}

impl Maskable for Ipv6Addr {
    fn and(self, mask: Self) -> Self {
        Ipv6Addr::from(u128::from(self) & u128::from(mask))
    }
    fn all_ones() -> Self {
        Ipv6Addr::from(u128::MAX)
    }
    fn zero() -> Self {
        Ipv6Addr::UNSPECIFIED
    }
}

/// A value with an optional mask, kept canonical (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Masked<T> {
    value: T,
    mask: Option<T>,
}

impl<T: Maskable> Masked<T> {
    /// An exact match on `value`.
    pub fn exact(value: T) -> Self {
        Masked { value, mask: None }
    }

    /// A match on the bits of `value` selected by `mask`. An all-ones mask gives an exact match;
    /// an all-zero mask is an error because it matches nothing in particular.
    pub fn new(value: T, mask: T) -> Result<Self, FlowError> {
        if mask == T::zero() {
            return Err(FlowError::Invalid(format!(
                "mask {mask:?} for value {value:?} has no bit set: leave the field out instead"
            )));
        }
        if mask == T::all_ones() {
            return Ok(Self::exact(value));
        }
        Ok(Masked {
            value: value.and(mask),
            mask: Some(mask),
        })
    }

    /// The (already masked) value.
    pub fn value(&self) -> T {
        self.value
    }

    /// The mask, `None` when the match is exact.
    pub fn mask(&self) -> Option<T> {
        self.mask
    }

    /// The mask with exact matches spelled as all ones.
    pub fn full_mask(&self) -> T {
        self.mask.unwrap_or_else(T::all_ones)
    }

    /// Whether `v` matches (its bits under the mask equal the value's).
    pub fn admits(&self, v: T) -> bool {
        v.and(self.full_mask()) == self.value
    }
}

impl<T: Maskable> From<T> for Masked<T> {
    fn from(value: T) -> Self {
        Masked::exact(value)
    }
}

impl Masked<Ipv4Addr> {
    /// A CIDR match such as `10.128.0.0/14`; `/32` is an exact match, `/0` is refused.
    pub fn cidr(addr: Ipv4Addr, prefix_len: u8) -> Result<Self, FlowError> {
        if prefix_len > 32 {
            return Err(FlowError::Invalid(format!(
                "prefix length /{prefix_len} is longer than 32"
            )));
        }
        let mask = if prefix_len == 0 {
            0
        } else {
            u32::MAX << (32 - prefix_len)
        };
        Masked::new(addr, Ipv4Addr::from(mask))
    }

    /// The prefix length when the mask is a CIDR mask (exact = 32).
    pub fn prefix_len(&self) -> Option<u8> {
        let m = u32::from(self.full_mask());
        let len = m.leading_ones();
        (m.checked_shl(len).unwrap_or(0) == 0).then_some(len as u8)
    }
}

impl FromStr for Masked<Ipv4Addr> {
    type Err = FlowError;

    /// `10.0.0.1`, `10.0.0.0/8` or `10.0.0.0/255.0.255.0`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || FlowError::Parse(format!("invalid IPv4 address or prefix {s:?}"));
        match s.split_once('/') {
            None => Ok(Masked::exact(s.parse().map_err(|_| bad())?)),
            Some((a, m)) => {
                let addr: Ipv4Addr = a.parse().map_err(|_| bad())?;
                if m.contains('.') {
                    Masked::new(addr, m.parse().map_err(|_| bad())?)
                } else {
                    Masked::cidr(addr, m.parse().map_err(|_| bad())?)
                }
            }
        }
    }
}

impl Masked<Ipv6Addr> {
    /// A CIDR match such as `fd01::/48`; `/128` is an exact match, `/0` is refused. (Named
    /// apart from the IPv4 [`Masked::cidr`] so that a call needs no type annotation.)
    pub fn cidr6(addr: Ipv6Addr, prefix_len: u8) -> Result<Self, FlowError> {
        if prefix_len > 128 {
            return Err(FlowError::Invalid(format!(
                "prefix length /{prefix_len} is longer than 128"
            )));
        }
        let mask = if prefix_len == 0 {
            0
        } else {
            u128::MAX << (128 - prefix_len)
        };
        Masked::new(addr, Ipv6Addr::from(mask))
    }

    /// The prefix length when the mask is a CIDR mask (exact = 128).
    pub fn prefix_len(&self) -> Option<u8> {
        let m = u128::from(self.full_mask());
        let len = m.leading_ones();
        (m.checked_shl(len).unwrap_or(0) == 0).then_some(len as u8)
    }
}

impl FromStr for Masked<Ipv6Addr> {
    type Err = FlowError;

    /// `fd01::1`, `fd01::/48` or `fd01::/ffff:ffff::ffff` (a mask that is not a prefix).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || FlowError::Parse(format!("invalid IPv6 address or prefix {s:?}"));
        match s.split_once('/') {
            None => Ok(Masked::exact(s.parse().map_err(|_| bad())?)),
            Some((a, m)) => {
                let addr: Ipv6Addr = a.parse().map_err(|_| bad())?;
                if m.contains(':') {
                    Masked::new(addr, m.parse().map_err(|_| bad())?)
                } else {
                    Masked::cidr6(addr, m.parse().map_err(|_| bad())?)
                }
            }
        }
    }
}

impl FromStr for Masked<MacAddr> {
    type Err = FlowError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('/') {
            None => Ok(Masked::exact(s.parse()?)),
            Some((v, m)) => Masked::new(v.parse()?, m.parse()?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_values_are_canonical() {
        let m = Masked::new(0x1234u32, 0xff).unwrap();
        assert_eq!(m.value(), 0x34);
        assert_eq!(Masked::new(7u32, u32::MAX).unwrap(), Masked::exact(7));
        assert!(Masked::new(7u32, 0).is_err());
    }

    #[test]
    fn cidr_and_prefix_len() {
        let m: Masked<Ipv4Addr> = "10.129.3.4/14".parse().unwrap();
        assert_eq!(m.value(), Ipv4Addr::new(10, 128, 0, 0));
        assert_eq!(m.prefix_len(), Some(14));
        let m: Masked<Ipv4Addr> = "10.0.0.0/255.0.255.0".parse().unwrap();
        assert_eq!(m.prefix_len(), None);
        assert_eq!(
            "10.1.2.3/32".parse::<Masked<Ipv4Addr>>().unwrap().mask(),
            None
        );
        assert!("10.0.0.0/33".parse::<Masked<Ipv4Addr>>().is_err());
        assert!("10.0.0.0/0".parse::<Masked<Ipv4Addr>>().is_err());
    }

    #[test]
    fn ipv6_cidr_and_prefix_len() {
        let m: Masked<Ipv6Addr> = "fd01:0:0:5::7/48".parse().unwrap();
        assert_eq!(m.value(), "fd01::".parse::<Ipv6Addr>().unwrap());
        assert_eq!(m.prefix_len(), Some(48));
        assert_eq!(
            "fd01::7/128".parse::<Masked<Ipv6Addr>>().unwrap().mask(),
            None
        );
        let odd: Masked<Ipv6Addr> = "fd01::ff/ffff::ff".parse().unwrap();
        assert_eq!(odd.prefix_len(), None);
        assert_eq!(odd.value(), "fd01::ff".parse::<Ipv6Addr>().unwrap());
        for bad in ["fd01::/129", "fd01::/0", "10.0.0.1", "fd01::/x", "fd01:::1"] {
            assert!(bad.parse::<Masked<Ipv6Addr>>().is_err(), "{bad}");
        }
    }

    #[test]
    fn mac_parse_and_print() {
        let m: MacAddr = "0a:58:0A:80:00:02".parse().unwrap();
        assert_eq!(m, MacAddr::from_pod_ip(Ipv4Addr::new(10, 128, 0, 2)));
        assert_eq!(m.to_string(), "0a:58:0a:80:00:02");
        assert!("0a:58:0a:80:00".parse::<MacAddr>().is_err());
        assert!("0a:58:0a:80:00:02:03".parse::<MacAddr>().is_err());
    }
}
