//! The pod port's record: the `external_ids` of a pod's Interface row, written at ADD and read
//! back after a restart (the pod table is rebuilt from them), by `sdnctl` (pod counts, VNIDs in
//! use) and by the tests. One codec, [`PortRecord`], so the keys are written in one place and
//! read in one place.
//!
//! Keys: `sandbox`, `ifname` (the attachment), `ip`, `ip6` (dual stack), `namespace`, `pod`, `netns`, `vnid` (the
//! VNID its flows were installed with: a pod whose NetNamespace vanished keeps its tenant),
//! `hostports` (JSON of its port mappings), and on the netdev datapath with an egress limit
//! `meter`, `meter_rate_kbps`, `meter_burst_kbit` (to re-create a meter ovs-vswitchd lost), and
//! with bandwidth limits `ingress_rate_bps`, `ingress_burst_bits`, `egress_rate_bps`,
//! `egress_burst_bits` (to put QoS and policing back when they were removed behind the agent's
//! back), and `hardened=1` (`ipv4` for a pod adopted from openshift-sdn, see [`Hardening`]) once
//! the host veth has its sysctls (a restart skips them). Unknown keys are ignored, so an older
//! agent's records read fine.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use flows::{AttachmentId, Vnid};

use crate::features::bandwidth::{Bandwidth, Limit};

pub use cluster::ports::keys;

/// A pod's egress meter as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeterRecord {
    /// Meter id.
    pub id: u32,
    /// Rate and burst (kbit/s, kbit), when recorded.
    pub rate_burst: Option<(u32, u32)>,
}

/// Everything a pod port records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortRecord {
    /// The attachment.
    pub attachment: AttachmentId,
    /// The pod's address (`None` when the record lacks a valid one).
    pub ip: Option<Ipv4Addr>,
    /// The pod's IPv6 address (dual stack; `None` when the record has no valid one).
    pub ip6: Option<Ipv6Addr>,
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Netns path ("" when unknown).
    pub netns: String,
    /// The VNID its flows were installed with.
    pub vnid: Option<Vnid>,
    /// Host port mappings, as JSON.
    pub hostports: Option<String>,
    /// The egress meter.
    pub meter: Option<MeterRecord>,
    /// The pod's bandwidth limits.
    pub bandwidth: Bandwidth,
    /// What the host veth got of the node-kernel hardening (see [`keys::HARDENED`]).
    pub hardened: Hardening,
}

/// How far a pod's host veth has been taken out of the node kernel's path
/// (`host::netlink::isolate_host_veth`), as its record says (`hardened`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hardening {
    /// Not yet (an older agent's record): hardened at the next start.
    None,
    /// The IPv4 settings only, IPv6 kept as the network agent before ours left it (a pod
    /// adopted from openshift-sdn): `ipv4`.
    Ipv4Only,
    /// All of it: `1`.
    Full,
}

impl Hardening {
    /// The record's value for `hardened` (none when not hardened).
    pub fn value(self) -> Option<&'static str> {
        match self {
            Hardening::None => None,
            Hardening::Ipv4Only => Some("ipv4"),
            Hardening::Full => Some("1"),
        }
    }

    /// Read from the record's `hardened` value.
    pub fn of(value: Option<&str>) -> Hardening {
        match value {
            Some("1") => Hardening::Full,
            Some("ipv4") => Hardening::Ipv4Only,
            _ => Hardening::None,
        }
    }
}

impl PortRecord {
    /// The `external_ids` to write.
    pub fn to_external_ids(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::from([
            (
                keys::SANDBOX.to_string(),
                self.attachment.container_id.clone(),
            ),
            (keys::IFNAME.to_string(), self.attachment.ifname.clone()),
            (keys::NAMESPACE.to_string(), self.namespace.clone()),
            (keys::POD.to_string(), self.pod.clone()),
            (keys::NETNS.to_string(), self.netns.clone()),
        ]);
        if let Some(ip) = self.ip {
            m.insert(keys::IP.into(), ip.to_string());
        }
        if let Some(ip6) = self.ip6 {
            m.insert(keys::IP6.into(), ip6.to_string());
        }
        if let Some(v) = self.vnid {
            m.insert(keys::VNID.into(), v.to_string());
        }
        if let Some(h) = &self.hostports {
            m.insert(keys::HOSTPORTS.into(), h.clone());
        }
        if let Some(meter) = self.meter {
            m.insert(keys::METER.into(), meter.id.to_string());
            if let Some((rate, burst)) = meter.rate_burst {
                m.insert(keys::METER_RATE.into(), rate.to_string());
                m.insert(keys::METER_BURST.into(), burst.to_string());
            }
        }
        if let Some(v) = self.hardened.value() {
            m.insert(keys::HARDENED.into(), v.into());
        }
        for (limit, rate_key, burst_key) in [
            (
                self.bandwidth.ingress,
                keys::INGRESS_RATE,
                keys::INGRESS_BURST,
            ),
            (self.bandwidth.egress, keys::EGRESS_RATE, keys::EGRESS_BURST),
        ] {
            if let Some(l) = limit {
                m.insert(rate_key.into(), l.rate.to_string());
                if let Some(b) = l.burst {
                    m.insert(burst_key.into(), b.to_string());
                }
            }
        }
        m
    }

    /// The record in `ids`; `None` when they are not a pod port's (no non-empty `sandbox`).
    /// Values that do not parse read as absent.
    pub fn from_external_ids(ids: &BTreeMap<String, String>) -> Option<PortRecord> {
        let tenancy = cluster::ports::PodTenancy::from_external_ids(ids)?;
        let get = |k: &str| ids.get(k).cloned().unwrap_or_default();
        let num = |k: &str| ids.get(k).and_then(|v| v.parse::<u32>().ok());
        Some(PortRecord {
            attachment: AttachmentId::new(tenancy.sandbox, get(keys::IFNAME)),
            ip: ids.get(keys::IP).and_then(|v| v.parse().ok()),
            ip6: ids.get(keys::IP6).and_then(|v| v.parse().ok()),
            namespace: tenancy.namespace,
            pod: get(keys::POD),
            netns: get(keys::NETNS),
            vnid: tenancy.vnid,
            hostports: ids.get(keys::HOSTPORTS).cloned(),
            meter: num(keys::METER).map(|id| MeterRecord {
                id,
                rate_burst: num(keys::METER_RATE).zip(num(keys::METER_BURST)),
            }),
            bandwidth: Bandwidth {
                ingress: limit(ids, keys::INGRESS_RATE, keys::INGRESS_BURST),
                egress: limit(ids, keys::EGRESS_RATE, keys::EGRESS_BURST),
            },
            hardened: Hardening::of(ids.get(keys::HARDENED).map(String::as_str)),
        })
    }

    /// Only the VNID key, for updating the record after a re-flow.
    pub fn vnid_ids(vnid: Vnid) -> BTreeMap<String, String> {
        BTreeMap::from([(keys::VNID.to_string(), vnid.to_string())])
    }
}

/// A recorded limit: a positive rate, and its burst when recorded.
fn limit(ids: &BTreeMap<String, String>, rate: &str, burst: &str) -> Option<Limit> {
    let n = |k: &str| {
        ids.get(k)
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|v| *v > 0)
    };
    n(rate).map(|rate| Limit {
        rate,
        burst: n(burst),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_tolerates_what_older_agents_wrote() {
        let r = PortRecord {
            attachment: AttachmentId::new("c0ffee", "eth0"),
            ip: Some(Ipv4Addr::new(10, 128, 0, 5)),
            ip6: Some("fd01:0:0:5::5".parse().unwrap()),
            namespace: "tenant-a".into(),
            pod: "web".into(),
            netns: "/run/netns/p".into(),
            vnid: Vnid::new(11),
            hostports: Some("[]".into()),
            meter: Some(MeterRecord {
                id: 9,
                rate_burst: Some((20_000, 4_000)),
            }),
            bandwidth: Bandwidth {
                ingress: Some(Limit {
                    rate: 10_000_000,
                    burst: Some(100_000),
                }),
                egress: Some(Limit {
                    rate: 20_000_000,
                    burst: None,
                }),
            },
            hardened: Hardening::Full,
        };
        let ids = r.to_external_ids();
        assert_eq!(ids["sandbox"], "c0ffee");
        assert_eq!(ids["vnid"], "11");
        assert_eq!(ids["ip6"], "fd01:0:0:5::5");
        assert_eq!(ids["meter_rate_kbps"], "20000");
        assert_eq!(ids["ingress_rate_bps"], "10000000");
        assert!(!ids.contains_key("egress_burst_bits"));
        assert_eq!(PortRecord::from_external_ids(&ids), Some(r));
        // An older agent's record: no vnid, no meter; a garbled ip reads as none.
        let old = BTreeMap::from([
            ("sandbox".to_string(), "x".to_string()),
            ("ip".to_string(), "not-an-ip".to_string()),
            ("future_key".to_string(), "1".to_string()),
        ]);
        let r = PortRecord::from_external_ids(&old).unwrap();
        assert_eq!((r.ip, r.ip6, r.vnid, r.meter), (None, None, None, None));
        assert!(r.bandwidth.is_empty());
        assert_eq!(
            r.hardened,
            Hardening::None,
            "an older record is hardened again at the next start"
        );
        assert_eq!(r.attachment.ifname, "");
        let not_a_pod = BTreeMap::from([("iface-id".to_string(), "x".to_string())]);
        assert_eq!(PortRecord::from_external_ids(&not_a_pod), None);
    }
}
