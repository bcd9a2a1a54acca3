//! Pod bandwidth limits: what a pod asks for, validated, and the OVS values that enforce it.
//!
//! Two sources, as in Kubernetes: the pod annotations `kubernetes.io/ingress-bandwidth` and
//! `kubernetes.io/egress-bandwidth` (Kubernetes mode; Kubernetes quantities meaning bits per
//! second, like openshift-sdn and kubelet read them), and the CNI capability
//! `runtimeConfig.bandwidth` (`ingressRate`/`egressRate` in bit/s, `ingressBurst`/`egressBurst`
//! in bits, the CNI bandwidth plugin's convention). Kubelet itself derives `runtimeConfig.bandwidth`
//! from these same annotations, so the annotations are the source of truth: per direction, an
//! annotation wins over `runtimeConfig`.
//!
//! Rates are checked like kubelet's `validateBandwidthIsReasonable` (and ovn-kubernetes'): below
//! 1 kbit/s is an error naming the annotation or key and the value. Kubelet's upper bound is
//! 1 Pbit/s; ours is 32 Gbit/s, because OVS hands `linux-htb` rates to the kernel as a u32 of
//! bytes/s (at most 34.4 Gbit/s) and a larger limit would silently become a smaller one.
//!
//! Enforcement (everything is from OVS's point of view, so directions swap):
//! - pod **egress** is traffic OVS receives on the pod's port: `Interface.ingress_policing_rate`
//!   (kbit/s, 1 kbit = 1000 bit) and `ingress_policing_burst` (kbit); see [`Policing`].
//! - pod **ingress** is traffic OVS sends out of the pod's port: a `QoS` row on the pod's `Port`.
//!   For `linux-htb` (any Linux netdev, which a pod veth is on both datapaths), `other_config:
//!   max-rate` in bit/s and one `Queue` with the same `max-rate` (and `burst` in bits when the
//!   pod asked for one). `egress-policer` (`cir` bytes/s, `cbs` bytes) is computed too, but OVS
//!   3.1 implements it only for DPDK ports: for a veth `ovs-appctl qos/show-types` lists only
//!   the `linux-*` types and `qos/show` says "QoS not configured" (checked with OVS 3.1; the
//!   `qos` test asserts the first), so the agent uses `linux-htb` for pod ports on
//!   the netdev datapath as well.
//!
//! Limits: pure; no per-packet-rate (`kpkts`) limits; bursts of 2^31-1 bits or more (kubelet's
//! "no limit" burst) are treated as "not given".

use std::collections::BTreeMap;

use serde_json::Value;

use crate::cni::config::runtime_key;

/// Annotation: the pod's ingress rate (traffic towards the pod), a Kubernetes quantity in bit/s.
pub const INGRESS_ANNOTATION: &str = "kubernetes.io/ingress-bandwidth";
/// Annotation: the pod's egress rate (traffic from the pod), a Kubernetes quantity in bit/s.
pub const EGRESS_ANNOTATION: &str = "kubernetes.io/egress-bandwidth";

/// The smallest accepted rate: 1 kbit/s.
pub const MIN_RATE: u64 = 1_000;
/// The largest accepted rate: 32 Gbit/s.
pub const MAX_RATE: u64 = 32_000_000_000;
/// Bursts at or above this (kubelet's `math.MaxInt32` "no limit") count as not given.
pub const UNLIMITED_BURST: u64 = i32::MAX as u64;

/// A bandwidth request that cannot be honoured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BandwidthError {
    /// Not a Kubernetes quantity or not a non-negative integer.
    #[error("{key}={value:?}: {reason}")]
    Invalid {
        /// The annotation or runtimeConfig key.
        key: String,
        /// The value as given.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// Below [`MIN_RATE`].
    #[error("{key}={value:?}: unreasonably small bandwidth (< 1 kbit/s)")]
    TooSmall {
        /// The annotation or runtimeConfig key.
        key: String,
        /// The value as given.
        value: String,
    },
    /// Above [`MAX_RATE`].
    #[error("{key}={value:?}: unreasonably large bandwidth (> 32 Gbit/s)")]
    TooLarge {
        /// The annotation or runtimeConfig key.
        key: String,
        /// The value as given.
        value: String,
    },
}

/// Parses a Kubernetes quantity (`10M`, `1.5Gi`, `500k`, `2e6`, `100m`, `1000`) to an integer,
/// rounding a fraction up (like `Quantity.Value()`). Negative values are errors.
pub fn parse_quantity(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty quantity".into());
    }
    let t = t.strip_prefix('+').unwrap_or(t);
    if t.starts_with('-') {
        return Err("negative quantity".into());
    }
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(end);
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() && frac.is_empty() {
        return Err("no digits".into());
    }
    if frac.contains('.') || frac.len() > 18 {
        return Err("bad number".into());
    }
    let digits = format!("{int}{frac}");
    let mantissa: u128 = digits.parse().map_err(|_| "number too large".to_string())?;
    // value = mantissa * num / den
    let mut den: u128 = 10u128.pow(u32::try_from(frac.len()).map_err(|_| "bad number")?);
    let mut num: u128 = 1;
    match suffix {
        "" => {}
        "m" => den *= 1000,
        "k" => num = 1_000,
        "M" => num = 1_000_000,
        "G" => num = 1_000_000_000,
        "T" => num = 1_000_000_000_000,
        "P" => num = 1_000_000_000_000_000,
        "E" => num = 1_000_000_000_000_000_000,
        "Ki" => num = 1 << 10,
        "Mi" => num = 1 << 20,
        "Gi" => num = 1 << 30,
        "Ti" => num = 1 << 40,
        "Pi" => num = 1 << 50,
        "Ei" => num = 1 << 60,
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..]
                .parse()
                .map_err(|_| format!("unknown suffix {suffix:?}"))?;
            if !(-18..=18).contains(&exp) {
                return Err(format!("exponent {exp} out of range"));
            }
            let p = 10u128.pow(exp.unsigned_abs());
            if exp >= 0 {
                num = p;
            } else {
                den *= p;
            }
        }
        _ => {
            return Err(format!(
                "unknown suffix {suffix:?} (expected k M G T P E, Ki Mi Gi Ti Pi Ei, m or e<n>)"
            ))
        }
    }
    let value = mantissa
        .checked_mul(num)
        .ok_or_else(|| "number too large".to_string())?
        .div_ceil(den);
    u64::try_from(value).map_err(|_| "number too large".to_string())
}

/// One direction's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// Rate in bit/s.
    pub rate: u64,
    /// Burst in bits, if given.
    pub burst: Option<u64>,
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bit/s", self.rate)?;
        match self.burst {
            Some(b) => write!(f, ", burst {b} bit"),
            None => Ok(()),
        }
    }
}

/// A limit in a log field: its value, or `none`.
pub fn shown(limit: Option<Limit>) -> String {
    limit.map_or_else(|| "none".to_string(), |l| l.to_string())
}

/// A pod's bandwidth limits (`None`: unlimited in that direction).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bandwidth {
    /// Traffic towards the pod.
    pub ingress: Option<Limit>,
    /// Traffic from the pod.
    pub egress: Option<Limit>,
}

/// `Interface.ingress_policing_rate` / `ingress_policing_burst` for pod egress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policing {
    /// kbit/s (1000 bit/s).
    pub rate_kbps: u64,
    /// kbit.
    pub burst_kb: u64,
}

/// QoS types for a pod's port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosKind {
    /// `linux-htb`: tc HTB on the Linux device (kernel datapath, and netdev-linux ports such
    /// as veths on the netdev datapath).
    LinuxHtb,
    /// `egress-policer`: DPDK ports of the netdev datapath only.
    EgressPolicer,
}

/// The columns of a QoS row (and its queues) for a pod's ingress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QosPlan {
    /// `QoS.type`.
    pub qos_type: &'static str,
    /// `QoS.other_config`.
    pub other_config: BTreeMap<String, String>,
    /// `QoS.queues`: queue number to the Queue's `other_config`.
    pub queues: BTreeMap<u32, BTreeMap<String, String>>,
}

fn check_rate(key: &str, value: &str, rate: u64) -> Result<u64, BandwidthError> {
    if rate < MIN_RATE {
        return Err(BandwidthError::TooSmall {
            key: key.into(),
            value: value.into(),
        });
    }
    if rate > MAX_RATE {
        return Err(BandwidthError::TooLarge {
            key: key.into(),
            value: value.into(),
        });
    }
    Ok(rate)
}

fn annotation(
    annotations: &BTreeMap<String, String>,
    key: &str,
) -> Result<Option<Limit>, BandwidthError> {
    let Some(value) = annotations.get(key) else {
        return Ok(None);
    };
    let rate = parse_quantity(value).map_err(|reason| BandwidthError::Invalid {
        key: key.into(),
        value: value.clone(),
        reason,
    })?;
    Ok(Some(Limit {
        rate: check_rate(key, value, rate)?,
        burst: None,
    }))
}

fn runtime_limit(bw: &Value, dir: &str) -> Result<Option<Limit>, BandwidthError> {
    let get = |name: &str| -> Result<Option<u64>, BandwidthError> {
        let key = format!("runtimeConfig.bandwidth.{dir}{name}");
        match runtime_key(bw, &format!("{dir}{name}")) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or(BandwidthError::Invalid {
                key,
                value: v.to_string(),
                reason: "expected a non-negative integer".into(),
            }),
        }
    };
    let rate = get("Rate")?.filter(|r| *r > 0);
    let burst = get("Burst")?.filter(|b| *b > 0 && *b < UNLIMITED_BURST);
    match rate {
        None if burst.is_some() => Err(BandwidthError::Invalid {
            key: format!("runtimeConfig.bandwidth.{dir}Burst"),
            value: burst.unwrap_or_default().to_string(),
            reason: format!("a burst needs {dir}Rate too"),
        }),
        None => Ok(None),
        Some(r) => {
            let key = format!("runtimeConfig.bandwidth.{dir}Rate");
            check_rate(&key, &r.to_string(), r)?;
            Ok(Some(Limit { rate: r, burst }))
        }
    }
}

impl Bandwidth {
    /// The pod's limits from its annotations (Kubernetes mode) and `runtimeConfig` (the whole
    /// object; only its `bandwidth` key is read). Per direction, an annotation wins.
    pub fn from_pod(
        annotations: Option<&BTreeMap<String, String>>,
        runtime_config: Option<&Value>,
    ) -> Result<Bandwidth, BandwidthError> {
        let mut bw = Bandwidth::default();
        if let Some(rc) = runtime_config.and_then(|r| runtime_key(r, "bandwidth")) {
            if !rc.is_null() && !rc.is_object() {
                return Err(BandwidthError::Invalid {
                    key: "runtimeConfig.bandwidth".into(),
                    value: rc.to_string(),
                    reason: "expected an object".into(),
                });
            }
            bw.ingress = runtime_limit(rc, "ingress")?;
            bw.egress = runtime_limit(rc, "egress")?;
        }
        if let Some(a) = annotations {
            if let Some(l) = annotation(a, INGRESS_ANNOTATION)? {
                bw.ingress = Some(l);
            }
            if let Some(l) = annotation(a, EGRESS_ANNOTATION)? {
                bw.egress = Some(l);
            }
        }
        Ok(bw)
    }

    /// No limit in either direction.
    pub fn is_empty(&self) -> bool {
        self.ingress.is_none() && self.egress.is_none()
    }

    /// Interface policing for the pod's egress. The burst defaults to 10% of the rate per
    /// second (at least 10 kbit, several full-size frames), OVS's recommendation; OVS's own
    /// default (8000 kbit) would let several MB pass unshaped on slow links.
    pub fn policing(&self) -> Option<Policing> {
        let l = self.egress?;
        let rate_kbps = l.rate.div_ceil(1000);
        let burst_kb = l
            .burst
            .map_or_else(|| (rate_kbps / 10).max(10), |b| b.div_ceil(1000).max(1));
        Some(Policing {
            rate_kbps,
            burst_kb,
        })
    }

    /// The OpenFlow meter for the pod's egress (netdev datapath): the policing rate, and its
    /// burst raised to at least 200 ms of the rate. The userspace datapath meters packets in
    /// batches (up to 32 frames, ~48 KB), so a smaller bucket drops whole batches and TCP backs
    /// off far below the limit: at 20 Mbit/s a 200 kbit bucket measured 1.0 Mbit/s, 2 Mbit
    /// 11.6 Mbit/s, 4 Mbit 19-20.5 Mbit/s.
    pub fn meter(&self) -> Option<Policing> {
        let p = self.policing()?;
        Some(Policing {
            rate_kbps: p.rate_kbps,
            burst_kb: p.burst_kb.max(p.rate_kbps / 5).max(64),
        })
    }

    /// The QoS row for the pod's ingress, of `kind`.
    pub fn qos(&self, kind: QosKind) -> Option<QosPlan> {
        let l = self.ingress?;
        let mut other = BTreeMap::new();
        let mut queues = BTreeMap::new();
        let qos_type = match kind {
            QosKind::LinuxHtb => {
                other.insert("max-rate".to_string(), l.rate.to_string());
                let mut q = BTreeMap::from([("max-rate".to_string(), l.rate.to_string())]);
                if let Some(b) = l.burst {
                    q.insert("burst".to_string(), b.to_string());
                }
                queues.insert(0, q);
                "linux-htb"
            }
            QosKind::EgressPolicer => {
                other.insert("cir".to_string(), l.rate.div_ceil(8).to_string());
                let cbs = l.burst.map_or(l.rate / 80, |b| b.div_ceil(8)).max(1600);
                other.insert("cbs".to_string(), cbs.to_string());
                "egress-policer"
            }
        };
        Some(QosPlan {
            qos_type,
            other_config: other,
            queues,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities() {
        let cases = [
            ("1000", 1000),
            ("10M", 10_000_000),
            ("10Mi", 10 << 20),
            ("1.5G", 1_500_000_000),
            ("1k", 1000),
            ("1Ki", 1024),
            ("2e6", 2_000_000),
            ("2E3", 2000),
            ("1500m", 2),
            ("1000000m", 1000),
            ("+5k", 5000),
            ("0.5", 1),
            (".5k", 500),
            ("1Ti", 1 << 40),
            ("2P", 2_000_000_000_000_000),
        ];
        for (s, want) in cases {
            assert_eq!(parse_quantity(s), Ok(want), "{s}");
        }
        for bad in ["", "-1M", "10Q", "M", "1.2.3", "10 M", "1e", "99999999999E"] {
            assert!(parse_quantity(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn annotations_are_validated_and_named_in_errors() {
        let a = BTreeMap::from([
            (INGRESS_ANNOTATION.to_string(), "10M".to_string()),
            (EGRESS_ANNOTATION.to_string(), "20M".to_string()),
        ]);
        let bw = Bandwidth::from_pod(Some(&a), None).unwrap();
        assert_eq!(bw.ingress.unwrap().rate, 10_000_000);
        assert_eq!(bw.egress.unwrap().rate, 20_000_000);

        let small = BTreeMap::from([(INGRESS_ANNOTATION.to_string(), "999".to_string())]);
        let e = Bandwidth::from_pod(Some(&small), None).unwrap_err();
        assert!(matches!(e, BandwidthError::TooSmall { .. }));
        assert_eq!(
            e.to_string(),
            "kubernetes.io/ingress-bandwidth=\"999\": unreasonably small bandwidth (< 1 kbit/s)"
        );
        let large = BTreeMap::from([(EGRESS_ANNOTATION.to_string(), "33G".to_string())]);
        let e = Bandwidth::from_pod(Some(&large), None).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("kubernetes.io/egress-bandwidth=\"33G\""));
        let junk = BTreeMap::from([(EGRESS_ANNOTATION.to_string(), "fast".to_string())]);
        assert!(matches!(
            Bandwidth::from_pod(Some(&junk), None),
            Err(BandwidthError::Invalid { .. })
        ));
        // 32G is the limit itself.
        let edge = BTreeMap::from([(EGRESS_ANNOTATION.to_string(), "32G".to_string())]);
        assert!(Bandwidth::from_pod(Some(&edge), None).is_ok());
    }

    #[test]
    fn runtime_config_and_precedence() {
        let rc = json!({"bandwidth": {"ingressRate": 10_000_000, "ingressBurst": 200_000,
                                      "egressRate": 20_000_000, "egressBurst": 2_147_483_647}});
        let bw = Bandwidth::from_pod(None, Some(&rc)).unwrap();
        assert_eq!(
            bw.ingress,
            Some(Limit {
                rate: 10_000_000,
                burst: Some(200_000)
            })
        );
        assert_eq!(
            bw.egress,
            Some(Limit {
                rate: 20_000_000,
                burst: None
            })
        );
        // The annotation wins in its direction only.
        let a = BTreeMap::from([(INGRESS_ANNOTATION.to_string(), "1M".to_string())]);
        let bw = Bandwidth::from_pod(Some(&a), Some(&rc)).unwrap();
        assert_eq!(bw.ingress.unwrap().rate, 1_000_000);
        assert_eq!(bw.egress.unwrap().rate, 20_000_000);

        assert!(Bandwidth::from_pod(None, Some(&json!({})))
            .unwrap()
            .is_empty());
        let e =
            Bandwidth::from_pod(None, Some(&json!({"bandwidth": {"egressRate": 10}}))).unwrap_err();
        assert!(e.to_string().contains("runtimeConfig.bandwidth.egressRate"));
        let e = Bandwidth::from_pod(None, Some(&json!({"bandwidth": {"egressRate": "10M"}})))
            .unwrap_err();
        assert!(matches!(e, BandwidthError::Invalid { .. }));
        let e = Bandwidth::from_pod(None, Some(&json!({"bandwidth": {"ingressBurst": 100}})))
            .unwrap_err();
        assert!(e.to_string().contains("ingressRate"));
        assert!(Bandwidth::from_pod(None, Some(&json!({"bandwidth": 5}))).is_err());
    }

    #[test]
    fn containerd_go_field_names_are_read() {
        // What containerd 1.6 sends for a pod with kubernetes.io/ingress-bandwidth: 10M and no
        // egress annotation: go-cni's BandWidth has no JSON tags, the unset direction is zero
        // and the burst of a set one is math.MaxUint32 ("unlimited").
        let rc: Value = serde_json::from_str(
            r#"{"bandwidth":{"IngressRate":10000000,"IngressBurst":4294967295,"EgressRate":0,"EgressBurst":0},"portMappings":[{"HostPort":8080,"ContainerPort":80,"Protocol":"tcp","HostIP":""}]}"#,
        )
        .unwrap();
        let bw = Bandwidth::from_pod(None, Some(&rc)).unwrap();
        assert_eq!(
            bw.ingress,
            Some(Limit {
                rate: 10_000_000,
                burst: None
            })
        );
        assert_eq!(bw.egress, None);
        // Both directions, another case spelling, and errors name the key as documented.
        let rc = json!({"Bandwidth": {"egressrate": 5_000_000, "EGRESSBURST": 100_000}});
        let bw = Bandwidth::from_pod(None, Some(&rc)).unwrap();
        assert_eq!(
            bw.egress,
            Some(Limit {
                rate: 5_000_000,
                burst: Some(100_000)
            })
        );
        let e = Bandwidth::from_pod(None, Some(&json!({"bandwidth": {"EgressRate": "5M"}})))
            .unwrap_err();
        assert!(
            e.to_string().contains("runtimeConfig.bandwidth.egressRate"),
            "{e}"
        );
    }

    #[test]
    fn ovs_values() {
        let bw = Bandwidth {
            ingress: Some(Limit {
                rate: 10_000_000,
                burst: None,
            }),
            egress: Some(Limit {
                rate: 20_000_000,
                burst: Some(500_000),
            }),
        };
        assert_eq!(
            bw.policing(),
            Some(Policing {
                rate_kbps: 20_000,
                burst_kb: 500
            })
        );
        // The meter keeps the rate and raises the burst to 200 ms of it (500 -> 4000 kbit).
        assert_eq!(
            bw.meter(),
            Some(Policing {
                rate_kbps: 20_000,
                burst_kb: 4_000
            })
        );
        let htb = bw.qos(QosKind::LinuxHtb).unwrap();
        assert_eq!(htb.qos_type, "linux-htb");
        assert_eq!(htb.other_config["max-rate"], "10000000");
        assert_eq!(htb.queues[&0]["max-rate"], "10000000");
        let pol = bw.qos(QosKind::EgressPolicer).unwrap();
        assert_eq!(pol.qos_type, "egress-policer");
        assert_eq!(pol.other_config["cir"], "1250000");
        assert_eq!(pol.other_config["cbs"], "125000");
        assert!(pol.queues.is_empty());
        // Default policing burst: 10% of the rate.
        let e = Bandwidth {
            egress: Some(Limit {
                rate: 10_000_000,
                burst: None,
            }),
            ..Bandwidth::default()
        };
        assert_eq!(e.policing().unwrap().burst_kb, 1000);
        assert!(e.qos(QosKind::LinuxHtb).is_none());
    }
}
