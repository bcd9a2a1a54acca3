//! One address range (`subnet`, `rangeStart`, `rangeEnd`, `gateway`): parsing, checks, and
//! whether a requested address may be handed out.

use ipnet::Ipv4Net;
use std::fmt;
use std::net::Ipv4Addr;

use super::*;

/// An allocation range: a subnet with its gateway and optional inclusive bounds, as in
/// host-local's `ranges` entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The subnet (host bits are ignored).
    pub subnet: Ipv4Net,
    /// The gateway, never leased.
    pub gateway: Ipv4Addr,
    /// First address to lease (inclusive); default: the network address + 1.
    pub start: Option<Ipv4Addr>,
    /// Last address to lease (inclusive); default: the broadcast address - 1.
    pub end: Option<Ipv4Addr>,
}

impl Range {
    /// The whole subnet with the given gateway.
    pub fn new(subnet: Ipv4Net, gateway: Ipv4Addr) -> Range {
        Range {
            subnet: subnet.trunc(),
            gateway,
            start: None,
            end: None,
        }
    }

    /// First address of the allocation range (inclusive).
    pub fn first(&self) -> Ipv4Addr {
        self.start
            .unwrap_or_else(|| Ipv4Addr::from(u32::from(self.subnet.network()).wrapping_add(1)))
    }

    /// Last address of the allocation range (inclusive).
    pub fn last(&self) -> Ipv4Addr {
        self.end
            .unwrap_or_else(|| Ipv4Addr::from(u32::from(self.subnet.broadcast()).wrapping_sub(1)))
    }

    /// Whether `ip` lies within `first()..=last()`.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        self.first() <= ip && ip <= self.last()
    }

    /// Checks the range is usable: at most a /30, gateway and bounds inside the subnet,
    /// `start <= end`.
    pub fn validate(&self) -> Result<(), IpamError> {
        let invalid = |reason: String| IpamError::InvalidRange {
            subnet: self.subnet,
            reason,
        };
        if self.subnet.prefix_len() > 30 {
            return Err(invalid(format!(
                "a /{} has no address to lease (use at most a /30)",
                self.subnet.prefix_len()
            )));
        }
        if !self.subnet.contains(&self.gateway) {
            return Err(invalid(format!(
                "gateway {} is outside the subnet",
                self.gateway
            )));
        }
        for (what, bound) in [("start", self.start), ("end", self.end)] {
            if let Some(ip) = bound {
                if !self.subnet.contains(&ip) {
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

    /// What `ip` is if it may never be leased: the network address, broadcast or gateway.
    pub(crate) fn reserved_kind(&self, ip: Ipv4Addr) -> Option<&'static str> {
        if ip == self.subnet.network() {
            Some("network address")
        } else if ip == self.subnet.broadcast() {
            Some("broadcast address")
        } else if ip == self.gateway {
            Some("gateway")
        } else {
            None
        }
    }

    /// How many addresses of the range can be leased at all.
    pub(crate) fn leasable(&self) -> u32 {
        let mut reserved = vec![self.subnet.network(), self.subnet.broadcast(), self.gateway];
        reserved.sort();
        reserved.dedup();
        let inside = reserved.iter().filter(|ip| self.contains(**ip)).count() as u64;
        let span = u64::from(u32::from(self.last())) - u64::from(u32::from(self.first())) + 1;
        u32::try_from(span.saturating_sub(inside)).unwrap_or(u32::MAX)
    }

    /// Candidate addresses in host-local order: after `last_reserved` if it is in the range
    /// (wrapping round to the start, `last_reserved` itself last), else from the start.
    pub(crate) fn candidates(
        &self,
        last_reserved: Option<Ipv4Addr>,
    ) -> impl Iterator<Item = Ipv4Addr> {
        let (first, last) = (u32::from(self.first()), u32::from(self.last()));
        // Where the pass begins: just after the last reserved address if that is in the range
        // and not its end, else at the start (then the wrapped part below is empty).
        let split = match last_reserved.filter(|ip| self.contains(*ip)) {
            Some(ip) if u32::from(ip) < last => u32::from(ip) + 1,
            _ => first,
        };
        (split..=last).chain(first..split).map(Ipv4Addr::from)
    }
}

impl fmt::Display for Range {
    /// `first-last`, as host-local prints a range.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first(), self.last())
    }
}

/// The checks on a requested address that need no directory access.
pub(crate) fn check_requested(range: &Range, ip: Ipv4Addr) -> Result<(), IpamError> {
    if !range.subnet.contains(&ip) {
        return Err(IpamError::NotInSubnet {
            ip,
            subnet: range.subnet,
        });
    }
    if let Some(what) = range.reserved_kind(ip) {
        return Err(IpamError::Reserved {
            ip,
            subnet: range.subnet,
            what,
        });
    }
    if !range.contains(ip) {
        return Err(IpamError::OutsideRange {
            ip,
            subnet: range.subnet,
            range: range.to_string(),
        });
    }
    Ok(())
}
