//! Validation of single cluster objects, and the typed accessors it is built from.
//!
//! Each check names the field (`clusterNetworks[1].CIDR`, `hostIP`, `netid`), the value and what
//! is expected, so the caller only has to add where the object came from (a file, the API).
//! Checks that need more than one object (a HostSubnet inside the cluster network, two subnets
//! overlapping) live on [`super::ClusterState`].
//!
//! The rules follow OpenShift's API validation: CIDRs are IPv4 network addresses, host subnet
//! lengths 2..=30, VNIDs below 2^24, `host`/`netname` equal to the object name, names DNS-1123
//! (HostSubnet: subdomain, as node names; NetNamespace: label, as namespace names). One addition:
//! the plugin name must be one this agent implements.

use std::fmt;
use std::net::Ipv4Addr;

use flows::Mode;
use ipnet::{Ipv4Net, Ipv6Net};

use super::types::{
    annotations, ClusterNetwork, ClusterObject, EgressNetworkPolicy, HostSubnet, NetNamespace,
    ObjectMeta, CLUSTER_NETWORK_NAME,
};
use crate::config::{Ipv4ClusterNetwork as CidrEntry, Ipv6ClusterNetwork};

/// The largest VNID (24 bits, the VXLAN VNI).
pub const MAX_VNID: u32 = (1 << 24) - 1;
/// The VXLAN port when a ClusterNetwork does not set one.
pub const DEFAULT_VXLAN_PORT: u16 = 4789;
/// The most rules one EgressNetworkPolicy may hold (OpenShift SDN's limit).
pub const MAX_EGRESS_RULES: usize = 1000;
/// `pluginName` of the subnet (no isolation) mode.
pub const PLUGIN_SUBNET: &str = "redhat/openshift-ovs-subnet";
/// `pluginName` of the multitenant (VNID isolation) mode.
pub const PLUGIN_MULTITENANT: &str = "redhat/openshift-ovs-multitenant";
/// `pluginName` of the networkpolicy (Kubernetes NetworkPolicy) mode.
pub const PLUGIN_NETWORKPOLICY: &str = "redhat/openshift-ovs-networkpolicy";

/// One field of one object is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ValidationError {
    /// The field's path in the object, e.g. `clusterNetworks[0].CIDR`.
    pub field: String,
    /// The offending value as written.
    pub value: String,
    /// What is wrong or expected.
    pub reason: String,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "field {} {:?}: {}", self.field, self.value, self.reason)
    }
}

impl ValidationError {
    /// A new error.
    pub fn new(
        field: impl Into<String>,
        value: impl Into<String>,
        reason: impl Into<String>,
    ) -> ValidationError {
        ValidationError {
            field: field.into(),
            value: value.into(),
            reason: reason.into(),
        }
    }
}

/// Parses an IPv4 CIDR that must be a network address (no host bits set).
pub fn parse_cidr(field: &str, value: &str) -> Result<Ipv4Net, ValidationError> {
    let net: Ipv4Net = value.parse().map_err(|_| {
        ValidationError::new(field, value, "expected an IPv4 CIDR such as 10.128.0.0/14")
    })?;
    if net.network() != net.addr() {
        return Err(ValidationError::new(
            field,
            value,
            format!(
                "host bits are set: expected the network address {}",
                net.trunc()
            ),
        ));
    }
    Ok(net)
}

/// Parses an IPv6 CIDR that must be a network address (no host bits set).
pub fn parse_cidr6(field: &str, value: &str) -> Result<Ipv6Net, ValidationError> {
    let net: Ipv6Net = value.parse().map_err(|_| {
        ValidationError::new(field, value, "expected an IPv6 CIDR such as fd01::/48")
    })?;
    if net.network() != net.addr() {
        return Err(ValidationError::new(
            field,
            value,
            format!(
                "host bits are set: expected the network address {}",
                net.trunc()
            ),
        ));
    }
    Ok(net)
}

/// The value of annotation `key`, if set; its field path in errors is
/// `metadata.annotations[KEY]`.
fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<(String, &'a str)> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(|v| (format!("metadata.annotations[{key}]"), v.as_str()))
}

/// Parses a unicast IPv4 address.
pub fn parse_ipv4(field: &str, value: &str) -> Result<Ipv4Addr, ValidationError> {
    let ip: Ipv4Addr = value
        .parse()
        .map_err(|_| ValidationError::new(field, value, "expected an IPv4 address"))?;
    if ip.is_unspecified() || ip.is_multicast() || ip.is_broadcast() {
        return Err(ValidationError::new(
            field,
            value,
            "expected a unicast IPv4 address",
        ));
    }
    Ok(ip)
}

/// An address of either family (a HostSubnet's `hostIP`: IPv6 on the underlay of an
/// IPv6-only cluster), unicast and not link-local.
pub fn parse_ip(field: &str, value: &str) -> Result<std::net::IpAddr, ValidationError> {
    if value.parse::<Ipv4Addr>().is_ok() {
        return parse_ipv4(field, value).map(Into::into);
    }
    let ip: std::net::Ipv6Addr = value
        .parse()
        .map_err(|_| ValidationError::new(field, value, "expected an IPv4 or IPv6 address"))?;
    if ip.is_unspecified() || ip.is_multicast() || ip.is_unicast_link_local() {
        return Err(ValidationError::new(
            field,
            value,
            "expected a unicast IPv4 address or a unicast IPv6 address that is not link-local",
        ));
    }
    Ok(ip.into())
}

/// Checks a DNS-1123 label (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters).
pub fn dns1123_label(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err("expected a DNS-1123 label: 1 to 63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit".into())
    }
}

/// Checks a DNS-1123 subdomain (dot-separated labels, at most 253 characters).
pub fn dns1123_subdomain(s: &str) -> Result<(), String> {
    if !s.is_empty() && s.len() <= 253 && s.split('.').all(|l| dns1123_label(l).is_ok()) {
        Ok(())
    } else {
        Err("expected a DNS-1123 subdomain: at most 253 characters, dot-separated labels of a-z, 0-9 and '-', each starting and ending with a letter or digit".into())
    }
}

impl ClusterNetwork {
    /// The (IPv4) cluster networks, typed; falls back to the legacy `network`/`hostsubnetlength`
    /// pair when `clusterNetworks` is empty (objects from OpenShift < 3.10). Empty for an
    /// IPv6-only cluster: no entry and no legacy pair, the IPv6 network in its annotation.
    pub fn entries(&self) -> Result<Vec<CidrEntry>, ValidationError> {
        let raw: Vec<(String, String, u32)> = if self.cluster_networks.is_empty() {
            match (&self.network, self.host_subnet_length) {
                (Some(n), Some(l)) => vec![("network".into(), n.clone(), l)],
                (None, _) if self.is_ipv6_only() => return Ok(Vec::new()),
                _ => {
                    return Err(ValidationError::new(
                        "clusterNetworks",
                        "",
                        "at least one entry (CIDR and hostSubnetLength) is needed",
                    ))
                }
            }
        } else {
            self.cluster_networks
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    (
                        format!("clusterNetworks[{i}].CIDR"),
                        e.cidr.clone(),
                        e.host_subnet_length,
                    )
                })
                .collect()
        };
        let mut out: Vec<CidrEntry> = Vec::new();
        for (field, cidr, len) in raw {
            let net = parse_cidr(&field, &cidr)?;
            let len_field = if field == "network" {
                "hostsubnetlength".to_string()
            } else {
                field.replace(".CIDR", ".hostSubnetLength")
            };
            if !(2..=30).contains(&len) || 32 - len < u32::from(net.prefix_len()) {
                return Err(ValidationError::new(
                    len_field,
                    len.to_string(),
                    format!(
                        "expected 2..=30 host bits leaving a node subnet inside {cidr} (at most {})",
                        32 - u32::from(net.prefix_len())
                    ),
                ));
            }
            if let Some(other) = out.iter().find(|o| overlaps(&o.cidr, &net)) {
                return Err(ValidationError::new(
                    field,
                    cidr,
                    format!("overlaps cluster network {}", other.cidr),
                ));
            }
            out.push(CidrEntry {
                cidr: net,
                // Checked above: 2..=30 fits.
                host_subnet_length: u8::try_from(len).unwrap_or(30),
            });
        }
        Ok(out)
    }

    /// The service network.
    pub fn service_net(&self) -> Result<Ipv4Net, ValidationError> {
        parse_cidr("serviceNetwork", &self.service_network)
    }

    /// The IPv4 service network: `None` on an IPv6-only cluster (an empty `serviceNetwork`).
    pub fn ipv4_service_net(&self) -> Result<Option<Ipv4Net>, ValidationError> {
        if self.service_network.is_empty() && self.is_ipv6_only() {
            return Ok(None);
        }
        self.service_net().map(Some)
    }

    /// An IPv6-only cluster's ClusterNetwork: no IPv4 entry (`clusterNetworks` empty, no legacy
    /// `network`) and an IPv6 network in its annotation.
    pub fn is_ipv6_only(&self) -> bool {
        self.cluster_networks.is_empty()
            && self.network.is_none()
            && annotation(&self.metadata, annotations::IPV6_CLUSTER_NETWORK).is_some()
    }

    /// The IPv6 cluster network of a dual-stack cluster (annotation
    /// [`annotations::IPV6_CLUSTER_NETWORK`]), if set.
    pub fn ipv6_entry(&self) -> Result<Option<Ipv6ClusterNetwork>, ValidationError> {
        let Some((field, value)) = annotation(&self.metadata, annotations::IPV6_CLUSTER_NETWORK)
        else {
            return Ok(None);
        };
        let bad = |why: String| ValidationError::new(&field, value, why);
        let (cidr, len) = value
            .split_once(',')
            .ok_or_else(|| bad("expected CIDR,hostSubnetLength such as fd01::/48,64".into()))?;
        let cidr = parse_cidr6(&field, cidr).map_err(|e| bad(e.reason))?;
        let host_subnet_length: u8 = len
            .parse()
            .map_err(|_| bad("hostSubnetLength: expected a number such as 64".into()))?;
        let entry = Ipv6ClusterNetwork {
            cidr,
            host_subnet_length,
        };
        if host_subnet_length < 2 || entry.node_prefix() <= cidr.prefix_len() {
            return Err(bad(format!(
                "hostSubnetLength {host_subnet_length} leaves no room for node subnets in /{}",
                cidr.prefix_len()
            )));
        }
        Ok(Some(entry))
    }

    /// Whether it records no IPv6 network at all (neither annotation set): a cluster that may
    /// still turn dual stack.
    pub fn has_no_ipv6(&self) -> bool {
        matches!(self.ipv6_entry(), Ok(None)) && matches!(self.ipv6_service_net(), Ok(None))
    }

    /// The IPv6 service network (annotation [`annotations::IPV6_SERVICE_NETWORK`]), if set.
    pub fn ipv6_service_net(&self) -> Result<Option<Ipv6Net>, ValidationError> {
        annotation(&self.metadata, annotations::IPV6_SERVICE_NETWORK)
            .map(|(field, value)| parse_cidr6(&field, value))
            .transpose()
    }

    /// The VXLAN port (4789 when unset).
    pub fn vxlan_port(&self) -> Result<u16, ValidationError> {
        match self.vxlan_port {
            None => Ok(DEFAULT_VXLAN_PORT),
            Some(p) => u16::try_from(p).ok().filter(|p| *p != 0).ok_or_else(|| {
                ValidationError::new("vxlanPort", p.to_string(), "expected 1..=65535")
            }),
        }
    }

    /// The isolation mode named by `pluginName`, `None` when unset.
    pub fn mode(&self) -> Result<Option<Mode>, ValidationError> {
        match self.plugin_name.as_deref() {
            None => Ok(None),
            Some(PLUGIN_SUBNET) => Ok(Some(Mode::Subnet)),
            Some(PLUGIN_MULTITENANT) => Ok(Some(Mode::Multitenant)),
            Some(PLUGIN_NETWORKPOLICY) => Ok(Some(Mode::NetworkPolicy)),
            Some(other) => Err(ValidationError::new(
                "pluginName",
                other,
                format!(
                    "this agent implements {PLUGIN_SUBNET}, {PLUGIN_MULTITENANT} and \
                     {PLUGIN_NETWORKPOLICY} only"
                ),
            )),
        }
    }

    /// Checks every field.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.name() != CLUSTER_NETWORK_NAME {
            return Err(ValidationError::new(
                "metadata.name",
                self.name(),
                "the ClusterNetwork must be named \"default\"",
            ));
        }
        let entries = self.entries()?;
        if !self.cluster_networks.is_empty() {
            let first = &self.cluster_networks[0];
            if let Some(n) = &self.network {
                if n != &first.cidr {
                    return Err(ValidationError::new(
                        "network",
                        n,
                        format!("must equal clusterNetworks[0].CIDR {:?}", first.cidr),
                    ));
                }
            }
            if let Some(l) = self.host_subnet_length {
                if l != first.host_subnet_length {
                    return Err(ValidationError::new(
                        "hostsubnetlength",
                        l.to_string(),
                        format!(
                            "must equal clusterNetworks[0].hostSubnetLength {}",
                            first.host_subnet_length
                        ),
                    ));
                }
            }
        }
        if let Some(service) = self.ipv4_service_net()? {
            if let Some(e) = entries.iter().find(|e| overlaps(&e.cidr, &service)) {
                return Err(ValidationError::new(
                    "serviceNetwork",
                    &self.service_network,
                    format!("overlaps cluster network {}", e.cidr),
                ));
            }
        }
        let v6 = self.ipv6_entry()?;
        if let Some(svc) = self.ipv6_service_net()? {
            let Some(v6) = v6 else {
                return Err(ValidationError::new(
                    format!(
                        "metadata.annotations[{}]",
                        annotations::IPV6_SERVICE_NETWORK
                    ),
                    svc.to_string(),
                    format!(
                        "an IPv6 service network without an IPv6 cluster network ({})",
                        annotations::IPV6_CLUSTER_NETWORK
                    ),
                ));
            };
            if v6.cidr.contains(&svc.network()) || svc.contains(&v6.cidr.network()) {
                return Err(ValidationError::new(
                    format!(
                        "metadata.annotations[{}]",
                        annotations::IPV6_SERVICE_NETWORK
                    ),
                    svc.to_string(),
                    format!("overlaps the IPv6 cluster network {}", v6.cidr),
                ));
            }
        }
        self.mode()?;
        self.vxlan_port()?;
        if let Some(mtu) = self.mtu {
            if !(576..=65536).contains(&mtu) {
                return Err(ValidationError::new(
                    "mtu",
                    mtu.to_string(),
                    "expected 576..=65536",
                ));
            }
        }
        Ok(())
    }
}

impl HostSubnet {
    /// The node's pod subnet.
    pub fn subnet_net(&self) -> Result<Ipv4Net, ValidationError> {
        parse_cidr("subnet", &self.subnet)
    }

    /// The node's underlay (VTEP) address: IPv4, or IPv6 on an IPv6-only cluster.
    pub fn host_ip_addr(&self) -> Result<std::net::IpAddr, ValidationError> {
        parse_ip("hostIP", &self.host_ip)
    }

    /// The node's IPv4 pod subnet: `None` when `subnet` is empty (a node of an IPv6-only
    /// cluster, whose subnet is the IPv6 one of [`Self::ipv6_subnet`]).
    pub fn ipv4_subnet(&self) -> Result<Option<Ipv4Net>, ValidationError> {
        if self.subnet.is_empty() {
            return Ok(None);
        }
        self.subnet_net().map(Some)
    }

    /// The node's IPv6 pod subnet in a dual-stack cluster (annotation
    /// [`annotations::IPV6_SUBNET`]), if set.
    pub fn ipv6_subnet(&self) -> Result<Option<Ipv6Net>, ValidationError> {
        // An annotation set since the object was compacted wins.
        match annotation(&self.metadata, annotations::IPV6_SUBNET) {
            Some((field, value)) => parse_cidr6(&field, value).map(Some),
            None => Ok(self.ipv6_subnet_kept),
        }
    }

    /// Checks every field.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let name = self.name();
        dns1123_subdomain(name).map_err(|r| ValidationError::new("metadata.name", name, r))?;
        if self.host != name {
            return Err(ValidationError::new(
                "host",
                &self.host,
                format!("must equal metadata.name {name:?}"),
            ));
        }
        let host_ip = self.host_ip_addr()?;
        let subnet = self.ipv4_subnet()?;
        if subnet.is_some() && host_ip.is_ipv6() {
            return Err(ValidationError::new(
                "hostIP",
                &self.host_ip,
                "expected an IPv4 address: a node with an IPv4 subnet is reached over an IPv4 \
                 underlay (an IPv6 hostIP is for a node of an IPv6-only cluster, whose subnet \
                 is empty)",
            ));
        }
        if subnet.is_some_and(|s| s.prefix_len() > 30) {
            return Err(ValidationError::new(
                "subnet",
                &self.subnet,
                "expected a prefix of at most /30 (a gateway and at least one pod)",
            ));
        }
        let subnet6 = self.ipv6_subnet()?;
        if subnet.is_none() && subnet6.is_none() {
            return Err(ValidationError::new(
                "subnet",
                &self.subnet,
                format!(
                    "expected an IPv4 CIDR such as 10.128.0.0/23 (empty only on a node of an \
                     IPv6-only cluster, with its IPv6 subnet in annotation {})",
                    annotations::IPV6_SUBNET
                ),
            ));
        }
        if let Some(v6) = subnet6 {
            if v6.prefix_len() > 126 {
                return Err(ValidationError::new(
                    format!("metadata.annotations[{}]", annotations::IPV6_SUBNET),
                    v6.to_string(),
                    "expected a prefix of at most /126 (a gateway and at least one pod)",
                ));
            }
        }
        self.validate_egress()
    }
}

impl NetNamespace {
    /// Checks every field.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let name = self.name();
        dns1123_label(name).map_err(|r| ValidationError::new("metadata.name", name, r))?;
        if self.net_name != name {
            return Err(ValidationError::new(
                "netname",
                &self.net_name,
                format!("must equal metadata.name {name:?}"),
            ));
        }
        if self.net_id > MAX_VNID {
            return Err(ValidationError::new(
                "netid",
                self.net_id.to_string(),
                format!("expected 0..={MAX_VNID} (24 bits)"),
            ));
        }
        if (1..multitenant::FIRST_TENANT_VNID).contains(&self.net_id) {
            return Err(ValidationError::new(
                "netid",
                self.net_id.to_string(),
                format!(
                    "1..={} are reserved; use 0 (global) or a tenant VNID from {} (sdnctl \
                     allocates one)",
                    multitenant::FIRST_TENANT_VNID - 1,
                    multitenant::FIRST_TENANT_VNID
                ),
            ));
        }
        if self.net_id == multitenant::Vnid::UNASSIGNED.id() {
            return Err(ValidationError::new(
                "netid",
                self.net_id.to_string(),
                "reserved for pods whose tenant is unknown; use 0 (global) or a tenant VNID \
                 below it (sdnctl allocates one)",
            ));
        }
        self.validate_egress()
    }
}

/// Checks a DNS name as an egress rule names it: dot-separated labels of letters, digits and '-'
/// (not at either end of a label), at most 253 characters, an optional trailing dot.
pub fn dns_name(s: &str) -> Result<(), String> {
    let name = s.strip_suffix('.').unwrap_or(s);
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if !name.is_empty() && name.len() <= 253 && name.split('.').all(label_ok) {
        Ok(())
    } else {
        Err("expected a DNS name such as www.example.com: dot-separated labels of letters, digits and '-' (no wildcards), at most 253 characters".into())
    }
}

impl EgressNetworkPolicy {
    /// Checks every field: the name, the namespace, the number of rules and each rule's
    /// destination (exactly one of an IPv4 CIDR and a DNS name).
    pub fn validate(&self) -> Result<(), ValidationError> {
        let name = self.name();
        dns1123_subdomain(name).map_err(|r| ValidationError::new("metadata.name", name, r))?;
        let namespace = self.namespace();
        dns1123_label(namespace).map_err(|r| {
            ValidationError::new(
                "metadata.namespace",
                namespace,
                format!("an EgressNetworkPolicy lives in a namespace: {r}"),
            )
        })?;
        let rules = &self.spec.egress;
        if rules.len() > MAX_EGRESS_RULES {
            return Err(ValidationError::new(
                "spec.egress",
                format!("{} rules", rules.len()),
                format!("at most {MAX_EGRESS_RULES} rules"),
            ));
        }
        for (i, rule) in rules.iter().enumerate() {
            let to = format!("spec.egress[{i}].to");
            match (&rule.to.cidr_selector, &rule.to.dns_name) {
                (Some(cidr), None) => {
                    // Host bits are allowed here: OpenShift's CRD accepts them and Open vSwitch
                    // masks them (203.0.113.17/28 is 203.0.113.16/28); the firewall does too
                    // and warns.
                    cidr.parse::<ipnet::IpNet>().map_err(|_| {
                        ValidationError::new(
                            format!("{to}.cidrSelector"),
                            cidr,
                            "expected an IPv4 CIDR such as 10.128.0.0/14 or an IPv6 CIDR such \
                             as 2001:db8::/32",
                        )
                    })?;
                }
                (None, Some(dns)) => {
                    dns_name(dns)
                        .map_err(|r| ValidationError::new(format!("{to}.dnsName"), dns, r))?;
                }
                (Some(cidr), Some(dns)) => {
                    return Err(ValidationError::new(
                        to,
                        format!("cidrSelector {cidr}, dnsName {dns}"),
                        "set either cidrSelector or dnsName, not both",
                    ))
                }
                (None, None) => {
                    return Err(ValidationError::new(
                        to,
                        "",
                        "a destination is needed: cidrSelector (a CIDR) or dnsName",
                    ))
                }
            }
        }
        Ok(())
    }
}

impl ClusterObject {
    /// Checks every field of the object (not its relations to other objects).
    pub fn validate(&self) -> Result<(), ValidationError> {
        match self {
            ClusterObject::ClusterNetwork(o) => o.validate(),
            ClusterObject::HostSubnet(o) => o.validate(),
            ClusterObject::NetNamespace(o) => o.validate(),
            ClusterObject::EgressNetworkPolicy(o) => o.validate(),
            // Read when the state is assembled: a refused one fails closed there.
            ClusterObject::ClusterNetworkPolicy(_) => Ok(()),
            ClusterObject::Node(o) => o.validate(),
        }
    }
}

/// Whether two networks share any address.
pub fn overlaps(a: &Ipv4Net, b: &Ipv4Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ClusterNetworkEntry;

    fn cn(entries: &[(&str, u32)]) -> ClusterNetwork {
        ClusterNetwork::new(
            entries
                .iter()
                .map(|(c, l)| ClusterNetworkEntry {
                    cidr: (*c).into(),
                    host_subnet_length: *l,
                })
                .collect(),
            "172.30.0.0/16",
            Some(PLUGIN_MULTITENANT),
            Some(4789),
            Some(1450),
        )
    }

    fn err(r: Result<(), ValidationError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn good_objects_pass() {
        cn(&[("10.128.0.0/14", 9), ("10.132.0.0/14", 8)])
            .validate()
            .unwrap();
        HostSubnet::new("node-1.example.com", "192.168.1.10", "10.128.0.0/23")
            .validate()
            .unwrap();
        NetNamespace::new("tenant-a", MAX_VNID - 1)
            .validate()
            .unwrap();
    }

    #[test]
    fn ipv6_annotations_are_typed_and_checked() {
        use crate::types::annotations::{IPV6_CLUSTER_NETWORK, IPV6_SERVICE_NETWORK, IPV6_SUBNET};
        let with = |c: &mut ClusterNetwork, k: &str, v: &str| {
            c.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(k.into(), v.into());
        };
        let mut c = cn(&[("10.128.0.0/14", 9)]);
        assert_eq!(c.ipv6_entry(), Ok(None));
        with(&mut c, IPV6_CLUSTER_NETWORK, "fd01::/48,64");
        with(&mut c, IPV6_SERVICE_NETWORK, "fd02::/112");
        c.validate().unwrap();
        let e = c.ipv6_entry().unwrap().unwrap();
        assert_eq!(
            (e.cidr.to_string(), e.node_prefix()),
            ("fd01::/48".into(), 64)
        );
        assert_eq!(
            c.ipv6_service_net().unwrap().unwrap().to_string(),
            "fd02::/112"
        );
        for (key, value, want) in [
            (
                IPV6_CLUSTER_NETWORK,
                "fd01::/48",
                "expected CIDR,hostSubnetLength",
            ),
            (IPV6_CLUSTER_NETWORK, "fd01::1/48,64", "host bits are set"),
            (
                IPV6_CLUSTER_NETWORK,
                "10.0.0.0/8,64",
                "expected an IPv6 CIDR",
            ),
            (IPV6_CLUSTER_NETWORK, "fd01::/64,64", "leaves no room"),
            (
                IPV6_SERVICE_NETWORK,
                "fd01::/112",
                "overlaps the IPv6 cluster network",
            ),
            (IPV6_SERVICE_NETWORK, "fd02:::/112", "expected an IPv6 CIDR"),
        ] {
            let mut c = cn(&[("10.128.0.0/14", 9)]);
            with(&mut c, IPV6_CLUSTER_NETWORK, "fd01::/48,64");
            with(&mut c, key, value);
            let e = err(c.validate());
            assert!(
                e.starts_with(&format!("field metadata.annotations[{key}] {value:?}: ")),
                "{e}"
            );
            assert!(e.contains(want), "{e}");
        }
        let mut c = cn(&[("10.128.0.0/14", 9)]);
        with(&mut c, IPV6_SERVICE_NETWORK, "fd02::/112");
        assert!(err(c.validate()).contains("without an IPv6 cluster network"));

        let mut h = HostSubnet::new("n1", "192.168.1.1", "10.128.2.0/23");
        assert_eq!(h.ipv6_subnet(), Ok(None));
        let set = |h: &mut HostSubnet, v: &str| {
            h.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(IPV6_SUBNET.into(), v.into());
        };
        set(&mut h, "fd01:0:0:5::/64");
        h.validate().unwrap();
        assert_eq!(
            h.ipv6_subnet().unwrap().unwrap().to_string(),
            "fd01:0:0:5::/64"
        );
        for (v, want) in [
            ("fd01:0:0:5::1/64", "host bits are set"),
            ("fd01::/127", "at most /126"),
            ("10.0.0.0/24", "expected an IPv6 CIDR"),
        ] {
            set(&mut h, v);
            let e = err(h.validate());
            assert!(e.contains(want), "{v}: {e}");
        }
    }

    #[test]
    fn cluster_network_errors_name_the_field() {
        let e = err(cn(&[("10.128.0.0/14", 9), ("10.129.0.0/16", 8)]).validate());
        assert_eq!(
            e,
            "field clusterNetworks[1].CIDR \"10.129.0.0/16\": overlaps cluster network 10.128.0.0/14"
        );
        let e = err(cn(&[("10.128.0.1/14", 9)]).validate());
        assert!(
            e.starts_with("field clusterNetworks[0].CIDR \"10.128.0.1/14\": host bits are set"),
            "{e}"
        );
        let e = err(cn(&[("10.128.0.0/24", 9)]).validate());
        assert!(
            e.starts_with("field clusterNetworks[0].hostSubnetLength \"9\""),
            "{e}"
        );
        let e = err(cn(&[("10.128.0.0/14", 31)]).validate());
        assert!(e.contains("hostSubnetLength \"31\""), "{e}");
        let mut c = cn(&[("10.128.0.0/14", 9)]);
        c.service_network = "10.130.0.0/16".into();
        assert_eq!(
            err(c.validate()),
            "field serviceNetwork \"10.130.0.0/16\": overlaps cluster network 10.128.0.0/14"
        );
        let mut c = cn(&[("10.128.0.0/14", 9)]);
        c.plugin_name = Some("redhat/openshift-ovs-networkpolicy".into());
        assert_eq!(c.mode(), Ok(Some(Mode::NetworkPolicy)));
        c.plugin_name = Some("cni.projectcalico.org/calico".into());
        assert!(err(c.validate()).starts_with("field pluginName"));
        let mut c = cn(&[("10.128.0.0/14", 9)]);
        c.vxlan_port = Some(70000);
        assert_eq!(
            err(c.validate()),
            "field vxlanPort \"70000\": expected 1..=65535"
        );
        let mut c = cn(&[("10.128.0.0/14", 9)]);
        c.metadata.name = Some("other".into());
        assert!(err(c.validate()).starts_with("field metadata.name \"other\""));
        let mut c = cn(&[("10.128.0.0/14", 9)]);
        c.network = Some("10.0.0.0/8".into());
        assert!(err(c.validate()).starts_with("field network \"10.0.0.0/8\": must equal"));
        let mut c = cn(&[]);
        c.network = None;
        c.host_subnet_length = None;
        assert!(err(c.validate()).starts_with("field clusterNetworks"));
    }

    #[test]
    fn legacy_single_network_is_read() {
        let mut c = cn(&[]);
        c.network = Some("10.1.0.0/16".into());
        c.host_subnet_length = Some(8);
        c.validate().unwrap();
        let e = c.entries().unwrap();
        assert_eq!(e[0].cidr.to_string(), "10.1.0.0/16");
        assert_eq!(e[0].node_prefix(), 24);
    }

    #[test]
    fn host_subnet_errors_name_the_field() {
        let hs = |n: &str, ip: &str, s: &str| HostSubnet::new(n, ip, s);
        assert_eq!(
            err(hs("n1", "10.0.0.300", "10.128.0.0/23").validate()),
            "field hostIP \"10.0.0.300\": expected an IPv4 or IPv6 address"
        );
        // An IPv6-only node: empty subnet, its IPv6 subnet in the annotation, an IPv6 hostIP.
        let mut six = hs("n1", "fd00::1", "");
        assert!(err(six.validate()).starts_with("field subnet \"\": expected an IPv4 CIDR"));
        six.metadata.annotations = Some(
            [(
                annotations::IPV6_SUBNET.to_string(),
                "fd01:0:0:1::/64".to_string(),
            )]
            .into(),
        );
        six.validate().unwrap();
        assert_eq!(six.ipv4_subnet().unwrap(), None);
        assert_eq!(
            six.host_ip_addr().unwrap(),
            "fd00::1".parse::<std::net::IpAddr>().unwrap()
        );
        assert!(err(hs("n1", "fe80::1", "").validate()).starts_with("field hostIP"));
        assert!(err(hs("n1", "fd00::1", "10.128.0.0/23").validate()).starts_with("field hostIP"));
        assert!(err(hs("n1", "10.0.0.1", "10.128.0.0").validate())
            .starts_with("field subnet \"10.128.0.0\""));
        assert!(err(hs("Node_1", "10.0.0.1", "10.128.0.0/23").validate())
            .starts_with("field metadata.name \"Node_1\": expected a DNS-1123 subdomain"));
        let mut h = hs("n1", "10.0.0.1", "10.128.0.0/23");
        h.host = "n2".into();
        assert_eq!(
            err(h.validate()),
            "field host \"n2\": must equal metadata.name \"n1\""
        );
        let mut h = hs("n1", "10.0.0.1", "10.128.0.0/23");
        h.egress_ips = vec!["10.0.0.5".into(), "x".into()];
        assert!(err(h.validate()).starts_with("field egressIPs[1] \"x\""));
    }

    #[test]
    fn net_namespace_errors_name_the_field() {
        assert_eq!(
            err(NetNamespace::new("a", MAX_VNID + 1).validate()),
            "field netid \"16777216\": expected 0..=16777215 (24 bits)"
        );
        assert_eq!(
            err(NetNamespace::new("a", 9).validate()),
            "field netid \"9\": 1..=9 are reserved; use 0 (global) or a tenant VNID from 10 \
             (sdnctl allocates one)"
        );
        assert!(err(NetNamespace::new("a", MAX_VNID).validate()).contains("tenant is unknown"));
        for ok in [0, 10, MAX_VNID - 1] {
            NetNamespace::new("a", ok).validate().unwrap();
        }
        assert!(err(NetNamespace::new("a.b", 11).validate())
            .starts_with("field metadata.name \"a.b\": expected a DNS-1123 label"));
        let mut n = NetNamespace::new("a", 11);
        n.net_name = "b".into();
        assert!(err(n.validate()).starts_with("field netname \"b\""));
    }

    #[test]
    fn egress_network_policy_errors_name_the_field() {
        use crate::types::{EgressNetworkPolicyRule as Rule, EgressRuleType::*};
        let enp = |rules| EgressNetworkPolicy::new("tenant-a", "default", rules);
        enp(vec![
            Rule::dns(Allow, "www.example.com"),
            Rule::dns(Allow, "example.com."),
            Rule::cidr(Allow, "192.168.10.0/24"),
            Rule::cidr(Deny, "0.0.0.0/0"),
        ])
        .validate()
        .unwrap();
        enp(Vec::new()).validate().unwrap();
        // Host bits are read as OpenShift and Open vSwitch read them (masked; the firewall
        // warns).
        enp(vec![Rule::cidr(Deny, "203.0.113.17/28")])
            .validate()
            .unwrap();
        // Dual stack: IPv6 destinations; a malformed one is refused naming the field.
        enp(vec![
            Rule::cidr(Deny, "fd00::/8"),
            Rule::cidr(Allow, "::/0"),
        ])
        .validate()
        .unwrap();
        for bad in ["fd00:::/8", "fd00::/129", "fd00::"] {
            assert!(
                err(enp(vec![Rule::cidr(Deny, bad)]).validate()).starts_with(&format!(
                    "field spec.egress[0].to.cidrSelector \"{bad}\": expected an IPv4 CIDR"
                )),
                "{bad}"
            );
        }
        for bad in ["*.example.com", "-a.example.com", "a..b", ""] {
            let e =
                err(enp(vec![Rule::cidr(Allow, "10.0.0.0/8"), Rule::dns(Allow, bad)]).validate());
            assert!(
                e.starts_with(&format!(
                    "field spec.egress[1].to.dnsName {bad:?}: expected a DNS name"
                )),
                "{e}"
            );
        }
        let mut both = Rule::cidr(Allow, "10.0.0.0/8");
        both.to.dns_name = Some("example.com".into());
        assert_eq!(
            err(enp(vec![both]).validate()),
            "field spec.egress[0].to \"cidrSelector 10.0.0.0/8, dnsName example.com\": set either \
             cidrSelector or dnsName, not both"
        );
        let mut neither = Rule::cidr(Allow, "10.0.0.0/8");
        neither.to.cidr_selector = None;
        assert!(err(enp(vec![neither]).validate())
            .starts_with("field spec.egress[0].to \"\": a destination is needed"));
        let many = vec![Rule::cidr(Deny, "10.0.0.0/8"); MAX_EGRESS_RULES + 1];
        assert_eq!(
            err(enp(many).validate()),
            "field spec.egress \"1001 rules\": at most 1000 rules"
        );
        let mut e = enp(Vec::new());
        e.metadata.namespace = None;
        assert!(err(e.validate()).starts_with(
            "field metadata.namespace \"\": an EgressNetworkPolicy lives in a namespace"
        ));
    }

    #[test]
    fn dns_names() {
        assert!(dns1123_label("a-1").is_ok());
        assert!(dns1123_label("-a").is_err());
        assert!(dns1123_label("a-").is_err());
        assert!(dns1123_label(&"a".repeat(64)).is_err());
        assert!(dns1123_subdomain("node-1.example.com").is_ok());
        assert!(dns1123_subdomain("node..x").is_err());
        assert!(dns1123_subdomain("Node").is_err());
    }
}
