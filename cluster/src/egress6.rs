//! Egress IPs of both families on the `network.openshift.io/v1` objects. IPv4 egress IPs and
//! ranges stay in the fields openshift-sdn reads (`NetNamespace.egressIPs`,
//! `HostSubnet.egressIPs`, `HostSubnet.egressCIDRs`); OpenShift's schemas for those fields
//! accept dotted IPv4 only, so IPv6 ones live in annotations
//! ([`annotations::IPV6_EGRESS_IPS`], [`annotations::IPV6_EGRESS_CIDRS`]), comma-separated, as
//! the IPv6 subnet of a node does. An openshift-sdn node ignores them; its master keeps them
//! when it updates the object.
//!
//! The accessors here are what the agent and the controller read: each object's egress IPs of
//! both families as one list ([`NetNamespace::egress_addrs`], [`HostSubnet::egress_addrs`],
//! [`HostSubnet::egress_nets`]), checked as [`NetNamespace::validate`] and
//! [`HostSubnet::validate`] check them: a unicast global IPv6 address (not `::`, loopback,
//! link-local, multicast or IPv4-mapped), an IPv6 CIDR with no host bits.

use std::net::{IpAddr, Ipv6Addr};

use ipnet::{IpNet, Ipv6Net};

use crate::types::{annotations, HostSubnet, NetNamespace, ObjectMeta};
use crate::validate::{parse_cidr, parse_cidr6, parse_ipv4, ValidationError};

/// The entries of a comma-separated annotation (none when it is absent or empty).
fn entries<'a>(meta: &'a ObjectMeta, key: &str) -> Vec<(String, &'a str)> {
    let Some(value) = meta.annotations.as_ref().and_then(|a| a.get(key)) else {
        return Vec::new();
    };
    value
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .enumerate()
        .map(|(i, v)| (format!("metadata.annotations[{key}][{i}]"), v))
        .collect()
}

/// Parses an IPv6 egress IP: unicast, global in scope (unique-local counts), not IPv4-mapped.
pub fn parse_egress_ipv6(field: &str, value: &str) -> Result<Ipv6Addr, ValidationError> {
    let ip: Ipv6Addr = value.parse().map_err(|_| {
        let hint = if value.parse::<std::net::Ipv4Addr>().is_ok() {
            "expected an IPv6 address (IPv4 egress IPs go in egressIPs)"
        } else {
            "expected an IPv6 address"
        };
        ValidationError::new(field, value, hint)
    })?;
    let link_local = ip.segments()[0] & 0xffc0 == 0xfe80;
    if ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || link_local
        || ip.to_ipv4_mapped().is_some()
    {
        return Err(ValidationError::new(
            field,
            value,
            "expected a unicast IPv6 address of global scope (not ::, ::1, fe80::/10, ff00::/8 \
             or an IPv4-mapped one)",
        ));
    }
    Ok(ip)
}

/// Writes (or, for an empty list, removes) a comma-separated annotation.
fn set_list(meta: &mut ObjectMeta, key: &str, values: &[String]) {
    let a = meta.annotations.get_or_insert_with(Default::default);
    if values.is_empty() {
        a.remove(key);
    } else {
        a.insert(key.to_string(), values.join(","));
    }
    if a.is_empty() {
        meta.annotations = None;
    }
}

/// The IPv6 egress IPs of an object's annotation.
fn ips6(meta: &ObjectMeta) -> Result<Vec<Ipv6Addr>, ValidationError> {
    entries(meta, annotations::IPV6_EGRESS_IPS)
        .into_iter()
        .map(|(f, v)| parse_egress_ipv6(&f, v))
        .collect()
}

/// An object's egress IPs of both families: its `egressIPs` field, then the IPv6 annotation;
/// invalid entries left out (a validated object has none).
fn addrs(v4: &[String], meta: &ObjectMeta) -> Vec<IpAddr> {
    let v4 = v4.iter().filter_map(|s| s.parse().ok()).map(IpAddr::V4);
    v4.chain(ips6(meta).unwrap_or_default().into_iter().map(IpAddr::V6))
        .collect()
}

/// Sets an object's egress IPs of both families: IPv4 in its `egressIPs` field, IPv6 in the
/// annotation.
fn set_addrs(v4: &mut Vec<String>, meta: &mut ObjectMeta, ips: &[IpAddr]) {
    let of = |six: bool| -> Vec<String> {
        ips.iter()
            .filter(|ip| ip.is_ipv6() == six)
            .map(IpAddr::to_string)
            .collect()
    };
    *v4 = of(false);
    set_list(meta, annotations::IPV6_EGRESS_IPS, &of(true));
}

impl NetNamespace {
    /// Its IPv6 egress IPs (annotation [`annotations::IPV6_EGRESS_IPS`]).
    pub fn egress_ips6(&self) -> Result<Vec<Ipv6Addr>, ValidationError> {
        ips6(&self.metadata)
    }

    /// Its egress IPs of both families (`egressIPs`, then the IPv6 annotation); invalid entries
    /// are left out (a validated object has none).
    pub fn egress_addrs(&self) -> Vec<IpAddr> {
        addrs(&self.egress_ips, &self.metadata)
    }

    /// Sets its egress IPs of both families: IPv4 in `egressIPs`, IPv6 in the annotation.
    pub fn set_egress_addrs(&mut self, ips: &[IpAddr]) {
        set_addrs(&mut self.egress_ips, &mut self.metadata, ips);
    }

    pub(crate) fn validate_egress(&self) -> Result<(), ValidationError> {
        for (i, ip) in self.egress_ips.iter().enumerate() {
            parse_ipv4(&format!("egressIPs[{i}]"), ip)?;
        }
        self.egress_ips6().map(drop)
    }
}

impl HostSubnet {
    /// The IPv6 egress IPs this node hosts (annotation [`annotations::IPV6_EGRESS_IPS`]).
    pub fn egress_ips6(&self) -> Result<Vec<Ipv6Addr>, ValidationError> {
        ips6(&self.metadata)
    }

    /// The IPv6 ranges the controller may place egress IPs in (annotation
    /// [`annotations::IPV6_EGRESS_CIDRS`]).
    pub fn egress_cidrs6(&self) -> Result<Vec<Ipv6Net>, ValidationError> {
        entries(&self.metadata, annotations::IPV6_EGRESS_CIDRS)
            .into_iter()
            .map(|(f, v)| parse_cidr6(&f, v))
            .collect()
    }

    /// The egress IPs it hosts, both families; invalid entries left out.
    pub fn egress_addrs(&self) -> Vec<IpAddr> {
        addrs(&self.egress_ips, &self.metadata)
    }

    /// Its egress ranges, both families; invalid entries left out.
    pub fn egress_nets(&self) -> Vec<IpNet> {
        let v4 = self.egress_cidrs.iter().filter_map(|s| s.parse().ok());
        let v6 = self.egress_cidrs6().unwrap_or_default();
        v4.map(IpNet::V4)
            .chain(v6.into_iter().map(IpNet::V6))
            .collect()
    }

    /// Sets the egress IPs it hosts: IPv4 in `egressIPs`, IPv6 in the annotation.
    pub fn set_egress_addrs(&mut self, ips: &[IpAddr]) {
        set_addrs(&mut self.egress_ips, &mut self.metadata, ips);
    }

    /// Sets its egress ranges: IPv4 in `egressCIDRs`, IPv6 in the annotation.
    pub fn set_egress_nets(&mut self, nets: &[IpNet]) {
        self.egress_cidrs = nets
            .iter()
            .filter(|n| matches!(n, IpNet::V4(_)))
            .map(IpNet::to_string)
            .collect();
        let v6 = nets.iter().filter(|n| matches!(n, IpNet::V6(_)));
        set_list(
            &mut self.metadata,
            annotations::IPV6_EGRESS_CIDRS,
            &v6.map(IpNet::to_string).collect::<Vec<_>>(),
        );
    }

    pub(crate) fn validate_egress(&self) -> Result<(), ValidationError> {
        for (i, ip) in self.egress_ips.iter().enumerate() {
            parse_ipv4(&format!("egressIPs[{i}]"), ip)?;
        }
        for (i, c) in self.egress_cidrs.iter().enumerate() {
            parse_cidr(&format!("egressCIDRs[{i}]"), c)?;
        }
        self.egress_ips6()?;
        self.egress_cidrs6().map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_egress_ips_ride_annotations_and_bad_ones_name_the_entry() {
        let mut nn = NetNamespace::new("a", 30);
        let ips: Vec<IpAddr> = ["192.168.77.100", "fd00:77::100", "fd00:77::101"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        nn.set_egress_addrs(&ips);
        assert_eq!(nn.egress_ips, vec!["192.168.77.100"]);
        assert_eq!(
            nn.metadata.annotations.as_ref().unwrap()[annotations::IPV6_EGRESS_IPS],
            "fd00:77::100,fd00:77::101"
        );
        assert_eq!(nn.egress_addrs(), ips);
        nn.validate().unwrap();
        for (bad, why) in [
            ("fd00:77::100,x", "[1] \"x\": expected an IPv6 address"),
            ("10.0.0.1", "IPv4 egress IPs go in egressIPs"),
            ("fe80::1", "of global scope"),
            ("ff02::1", "of global scope"),
            ("::", "of global scope"),
            ("::ffff:10.0.0.1", "of global scope"),
        ] {
            nn.metadata
                .annotations
                .as_mut()
                .unwrap()
                .insert(annotations::IPV6_EGRESS_IPS.into(), bad.into());
            let e = nn.validate().unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
            assert!(e.contains(annotations::IPV6_EGRESS_IPS), "{bad}: {e}");
        }
        nn.set_egress_addrs(&[]);
        assert!(nn.metadata.annotations.is_none() && nn.egress_ips.is_empty());
    }

    #[test]
    fn host_subnets_hold_ipv6_egress_ips_and_ranges() {
        let mut hs = HostSubnet::new("n1", "192.168.77.11", "10.128.0.0/23");
        let nets: Vec<IpNet> = ["192.168.77.96/28", "fd00:77::/112"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        hs.set_egress_nets(&nets);
        hs.set_egress_addrs(&["fd00:77::5".parse().unwrap()]);
        assert_eq!(hs.egress_nets(), nets);
        assert_eq!(
            hs.egress_addrs(),
            vec!["fd00:77::5".parse::<IpAddr>().unwrap()]
        );
        hs.validate().unwrap();
        hs.metadata.annotations.as_mut().unwrap().insert(
            annotations::IPV6_EGRESS_CIDRS.into(),
            "fd00:77::1/112".into(),
        );
        let e = hs.validate().unwrap_err().to_string();
        assert!(e.contains("host bits are set"), "{e}");
    }
}
