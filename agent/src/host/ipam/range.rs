//! One address range (`subnet`, `rangeStart`, `rangeEnd`, `gateway`) of either family:
//! checks, and whether a requested address may be handed out.

use std::fmt;
use std::net::Ipv4Addr;

use super::*;

/// An allocation range: a subnet with its gateway and optional inclusive bounds, as in
/// host-local's `ranges` entries. IPv4 unless said otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range<A: Family = Ipv4Addr> {
    /// The subnet (host bits are ignored).
    pub subnet: A::Net,
    /// The gateway, never leased.
    pub gateway: A,
    /// First address to lease (inclusive); default: the network address + 1.
    pub start: Option<A>,
    /// Last address to lease (inclusive); default: IPv4's broadcast address - 1, IPv6's last
    /// address (host-local's defaults).
    pub end: Option<A>,
}

impl<A: Family> Range<A> {
    /// The whole subnet with the given gateway.
    pub fn new(subnet: A::Net, gateway: A) -> Range<A> {
        Range {
            subnet: A::trunc(&subnet),
            gateway,
            start: None,
            end: None,
        }
    }

    /// First address of the allocation range (inclusive).
    pub fn first(&self) -> A {
        self.start
            .unwrap_or_else(|| A::from_bits(A::network(&self.subnet).bits().wrapping_add(1)))
    }

    /// Last address of the allocation range (inclusive).
    pub fn last(&self) -> A {
        self.end.unwrap_or_else(|| A::default_last(&self.subnet))
    }

    /// Whether `ip` lies within `first()..=last()`.
    pub fn contains(&self, ip: A) -> bool {
        self.first() <= ip && ip <= self.last()
    }

    /// Checks the range is usable: at most a /30 (IPv6: a /126), gateway and bounds inside the
    /// subnet, `start <= end`.
    pub fn validate(&self) -> Result<(), IpamError> {
        let invalid = |reason: String| IpamError::InvalidRange {
            subnet: A::any_net(&self.subnet),
            reason,
        };
        let longest = A::BITS - 2;
        if A::prefix_len(&self.subnet) > longest {
            return Err(invalid(format!(
                "a /{} has no address to lease (use at most a /{longest})",
                A::prefix_len(&self.subnet)
            )));
        }
        if !A::holds(&self.subnet, self.gateway) {
            return Err(invalid(format!(
                "gateway {} is outside the subnet",
                self.gateway
            )));
        }
        for (what, bound) in [("start", self.start), ("end", self.end)] {
            if let Some(ip) = bound {
                if !A::holds(&self.subnet, ip) {
                    return Err(invalid(format!("range {what} {ip} is outside the subnet")));
                }
            }
        }
        if self.first() > self.last() {
            return Err(invalid(format!(
                "range start {} is after range end {}",
                self.first(),
                self.last()
            )));
        }
        Ok(())
    }

    /// What `ip` is if it may never be leased: the network address, broadcast (IPv4) or
    /// gateway.
    pub(crate) fn reserved_kind(&self, ip: A) -> Option<&'static str> {
        if ip == A::network(&self.subnet) {
            Some("network address")
        } else if Some(ip) == A::broadcast(&self.subnet) {
            Some("broadcast address")
        } else if ip == self.gateway {
            Some("gateway")
        } else {
            None
        }
    }

    /// How many addresses of the range can be leased at all (at most `u32::MAX`).
    pub(crate) fn leasable(&self) -> u32 {
        let mut reserved = vec![A::network(&self.subnet), self.gateway];
        reserved.extend(A::broadcast(&self.subnet));
        reserved.sort();
        reserved.dedup();
        let inside = reserved.iter().filter(|ip| self.contains(**ip)).count() as u128;
        let span = (self.last().bits().saturating_sub(self.first().bits())).saturating_add(1);
        u32::try_from(span.saturating_sub(inside)).unwrap_or(u32::MAX)
    }

    /// Candidate addresses in host-local order: after `last_reserved` if it is in the range
    /// (wrapping round to the start, `last_reserved` itself last), else from the start.
    pub(crate) fn candidates(&self, last_reserved: Option<A>) -> impl Iterator<Item = A> {
        let (first, last) = (self.first().bits(), self.last().bits());
        // Where the pass begins: just after the last reserved address if that is in the range
        // and not its end, else at the start (then the wrapped part below is empty).
        let split = match last_reserved.filter(|ip| self.contains(*ip)) {
            Some(ip) if ip.bits() < last => ip.bits() + 1,
            _ => first,
        };
        (split..=last).chain(first..split).map(A::from_bits)
    }
}

impl<A: Family> fmt::Display for Range<A> {
    /// `first-last`, as host-local prints a range.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first(), self.last())
    }
}

/// The checks on a requested address that need no directory access.
pub(crate) fn check_requested<A: Family>(range: &Range<A>, ip: A) -> Result<(), IpamError> {
    let subnet = A::any_net(&range.subnet);
    if !A::holds(&range.subnet, ip) {
        return Err(IpamError::NotInSubnet {
            ip: ip.ip(),
            subnet,
        });
    }
    if let Some(what) = range.reserved_kind(ip) {
        return Err(IpamError::Reserved {
            ip: ip.ip(),
            subnet,
            what,
        });
    }
    if !range.contains(ip) {
        return Err(IpamError::OutsideRange {
            ip: ip.ip(),
            subnet,
            range: range.to_string(),
        });
    }
    Ok(())
}
