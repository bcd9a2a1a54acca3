//! `CNI_ARGS`: the runtime's `K=V;K=V` string, parsed and validated in one pass.
//!
//! Rules (the CNI convention, as libcni's `types.LoadArgs` applies them, with two deliberate
//! differences noted):
//! - `;` separates segments; each segment is `KEY=VALUE`. The value is everything after the
//!   *first* `=`, so values may contain `=` (libcni splits on every `=` and rejects such values;
//!   we accept them, the issue asks for it). Empty segments (`A=1;;B=2`, a trailing `;`) are
//!   rejected, as libcni does.
//! - Keys are non-empty `[A-Za-z0-9_-]` and case-sensitive (libcni matches struct field names
//!   exactly); a key given twice is rejected (libcni silently keeps the last: we would rather
//!   say so than guess).
//! - Keys we do not know are an error unless `IgnoreUnknown` is `1` or `true` (case-insensitive,
//!   `0`/`false` also accepted), wherever it appears in the string — exactly libcni's rule.
//!   Runtimes (podman, containerd, CRI-O) always send `IgnoreUnknown=1`.
//!
//! Known keys are parsed into typed accessors here, so a bad `IP=` fails validation with code 4
//! before any handler runs. Empty values of the `K8S_*` keys count as absent (some runtimes send
//! the key with no value when they have none); empty `IP`, `MAC` or `IgnoreUnknown` are errors.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ovs::flow::MacAddr;

use super::names::{is_container_id, is_dns1123_label, CONTAINER_ID_RULE, DNS1123_LABEL_RULE};
use super::types::CniError;

/// Keys this agent understands.
pub const KNOWN_KEYS: [&str; 7] = [
    "IgnoreUnknown",
    "K8S_POD_NAMESPACE",
    "K8S_POD_NAME",
    "K8S_POD_UID",
    "K8S_POD_INFRA_CONTAINER_ID",
    "IP",
    "MAC",
];

/// A static address asked for with `IP=`: `a.b.c.d` or `a.b.c.d/len` (IPv4 unless said
/// otherwise; a dual-stack pod may ask for one of each family, `IP=a.b.c.d,fd01::7`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestedIp<A = Ipv4Addr> {
    /// The address.
    pub addr: A,
    /// The prefix length when the runtime wrote `a.b.c.d/len` (the IPAM checks it against the
    /// node subnet); `None` for a bare address.
    pub prefix_len: Option<u8>,
}

/// Parsed, validated `CNI_ARGS`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CniArgs {
    pairs: Vec<(String, String)>,
    ignore_unknown: bool,
    pod_namespace: Option<String>,
    pod_name: Option<String>,
    pod_uid: Option<String>,
    infra_container_id: Option<String>,
    ip: Option<RequestedIp>,
    ip6: Option<RequestedIp<Ipv6Addr>>,
    mac: Option<MacAddr>,
}

impl CniArgs {
    /// Parses the raw `CNI_ARGS` string; the empty string means no arguments. Errors are code 4
    /// (invalid environment variable) and name the segment, key and value.
    pub fn parse(raw: &str) -> Result<CniArgs, CniError> {
        let mut args = CniArgs::default();
        if raw.is_empty() {
            return Ok(args);
        }
        // (key, value, 1-based segment number)
        let mut seen: Vec<(String, String, usize)> = Vec::new();
        for (i, segment) in raw.split(';').enumerate() {
            let n = i + 1;
            if segment.is_empty() {
                return Err(CniError::invalid_env(format!(
                    "CNI_ARGS segment {n} is empty (CNI_ARGS is {raw:?}; segments are KEY=VALUE separated by ';')"
                )));
            }
            let Some((key, value)) = segment.split_once('=') else {
                return Err(CniError::invalid_env(format!(
                    "CNI_ARGS segment {n} {segment:?} has no '='"
                )));
            };
            if key.is_empty() {
                return Err(CniError::invalid_env(format!(
                    "CNI_ARGS segment {n} {segment:?} has an empty key"
                )));
            }
            if !key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Err(CniError::invalid_env(format!(
                    "CNI_ARGS segment {n} {segment:?}: key {key:?} may only contain letters, digits, '_' and '-'"
                )));
            }
            if let Some((_, _, first)) = seen.iter().find(|(k, _, _)| k == key) {
                return Err(CniError::invalid_env(format!(
                    "CNI_ARGS key {key:?} appears twice (segments {first} and {n})"
                )));
            }
            seen.push((key.to_string(), value.to_string(), n));
        }

        let mut unknown = Vec::new();
        for (key, value, _) in &seen {
            match key.as_str() {
                "IgnoreUnknown" => args.ignore_unknown = parse_bool(key, value)?,
                "K8S_POD_NAMESPACE" => {
                    args.pod_namespace = non_empty(value)
                        .map(|v| {
                            if is_dns1123_label(v) {
                                Ok(v.to_string())
                            } else {
                                Err(CniError::invalid_env(format!(
                                    "CNI_ARGS K8S_POD_NAMESPACE={v:?} is not a valid namespace name ({DNS1123_LABEL_RULE})"
                                )))
                            }
                        })
                        .transpose()?;
                }
                "K8S_POD_NAME" => {
                    args.pod_name = non_empty(value)
                        .map(|v| check_object_name(key, v, 253))
                        .transpose()?;
                }
                "K8S_POD_UID" => {
                    args.pod_uid = non_empty(value)
                        .map(|v| {
                            if v.len() <= 64
                                && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                            {
                                Ok(v.to_string())
                            } else {
                                Err(CniError::invalid_env(format!(
                                    "CNI_ARGS K8S_POD_UID={v:?} is not a pod UID (at most 64 letters, digits or '-')"
                                )))
                            }
                        })
                        .transpose()?;
                }
                "K8S_POD_INFRA_CONTAINER_ID" => {
                    args.infra_container_id = non_empty(value)
                        .map(|v| {
                            if is_container_id(v) {
                                Ok(v.to_string())
                            } else {
                                Err(CniError::invalid_env(format!(
                                    "CNI_ARGS K8S_POD_INFRA_CONTAINER_ID={v:?} is not a container id ({CONTAINER_ID_RULE})"
                                )))
                            }
                        })
                        .transpose()?;
                }
                "IP" => (args.ip, args.ip6) = parse_ips(value)?,
                "MAC" => args.mac = Some(parse_mac(value)?),
                _ => unknown.push(key.as_str()),
            }
        }
        if !unknown.is_empty() && !args.ignore_unknown {
            let list = unknown
                .iter()
                .map(|k| format!("{k:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(CniError::invalid_env(format!(
                "CNI_ARGS has unknown keys {list} (known: {}); add IgnoreUnknown=1 to ignore them",
                KNOWN_KEYS.join(", ")
            )));
        }
        args.pairs = seen.into_iter().map(|(k, v, _)| (k, v)).collect();
        Ok(args)
    }

    /// Every `(key, value)` pair in the order given, known or not.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The raw value of `key`, if given.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Keys not in [`KNOWN_KEYS`] (present only when `IgnoreUnknown` allowed them).
    pub fn unknown_keys(&self) -> impl Iterator<Item = &str> {
        self.pairs
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !KNOWN_KEYS.contains(k))
    }

    /// `IgnoreUnknown` (false when absent).
    pub fn ignore_unknown(&self) -> bool {
        self.ignore_unknown
    }

    /// `K8S_POD_NAMESPACE`: a DNS-1123 label.
    pub fn pod_namespace(&self) -> Option<&str> {
        self.pod_namespace.as_deref()
    }

    /// `K8S_POD_NAME` (podman puts the container name here).
    pub fn pod_name(&self) -> Option<&str> {
        self.pod_name.as_deref()
    }

    /// `K8S_POD_UID`.
    pub fn pod_uid(&self) -> Option<&str> {
        self.pod_uid.as_deref()
    }

    /// `K8S_POD_INFRA_CONTAINER_ID`.
    pub fn infra_container_id(&self) -> Option<&str> {
        self.infra_container_id.as_deref()
    }

    /// `IP`: a static address the runtime asks for (a unicast IPv4 address; the IPAM checks it
    /// is in the subnet and free).
    pub fn ip(&self) -> Option<RequestedIp> {
        self.ip
    }

    /// `IP`'s IPv6 address, for a dual-stack pod.
    pub fn ip6(&self) -> Option<RequestedIp<Ipv6Addr>> {
        self.ip6
    }

    /// `MAC`: a static unicast MAC the runtime asks for.
    pub fn mac(&self) -> Option<MacAddr> {
        self.mac
    }
}

fn non_empty(v: &str) -> Option<&str> {
    (!v.is_empty()).then_some(v)
}

fn parse_bool(key: &str, value: &str) -> Result<bool, CniError> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        _ => Err(CniError::invalid_env(format!(
            "CNI_ARGS {key}={value:?} is not a boolean (1, 0, true or false)"
        ))),
    }
}

fn check_object_name(key: &str, v: &str, max: usize) -> Result<String, CniError> {
    if v.len() <= max
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-')
    {
        Ok(v.to_string())
    } else {
        Err(CniError::invalid_env(format!(
            "CNI_ARGS {key}={v:?} is not a valid name (at most {max} letters, digits, '_', '.' or '-')"
        )))
    }
}

/// `IP=`: one address, or one of each family separated by a comma.
#[allow(clippy::type_complexity)]
fn parse_ips(
    value: &str,
) -> Result<(Option<RequestedIp>, Option<RequestedIp<Ipv6Addr>>), CniError> {
    let (mut v4, mut v6) = (None, None);
    for part in value.split(',') {
        match parse_ip(value, part)? {
            (IpAddr::V4(addr), prefix_len) if v4.is_none() => {
                v4 = Some(RequestedIp { addr, prefix_len })
            }
            (IpAddr::V6(addr), prefix_len) if v6.is_none() => {
                v6 = Some(RequestedIp { addr, prefix_len })
            }
            _ => {
                return Err(CniError::invalid_env(format!(
                    "CNI_ARGS IP={value:?} asks for two addresses of one family (at most one \
                     IPv4 and one IPv6 address)"
                )))
            }
        }
    }
    Ok((v4, v6))
}

fn parse_ip(value: &str, part: &str) -> Result<(IpAddr, Option<u8>), CniError> {
    let bad = || {
        CniError::invalid_env(format!(
            "CNI_ARGS IP={value:?} is not an IP address (a.b.c.d or a.b.c.d/len, an IPv6 \
             address with or without /len, or one of each separated by a comma)"
        ))
    };
    let (addr, prefix_len) = match part.split_once('/') {
        Some((a, len)) => {
            let len: u8 = if !len.is_empty() && len.bytes().all(|b| b.is_ascii_digit()) {
                len.parse().map_err(|_| bad())?
            } else {
                return Err(bad());
            };
            (a, Some(len))
        }
        None => (part, None),
    };
    let addr: IpAddr = addr.parse().map_err(|_| bad())?;
    let (max, unusable) = match addr {
        IpAddr::V4(a) => (
            32,
            a.is_unspecified() || a.is_broadcast() || a.is_multicast() || a.is_loopback(),
        ),
        IpAddr::V6(a) => (
            128,
            a.is_unspecified() || a.is_multicast() || a.is_loopback() || a.is_unicast_link_local(),
        ),
    };
    if prefix_len.is_some_and(|l| l > max) {
        return Err(bad());
    }
    if unusable {
        return Err(CniError::invalid_env(format!(
            "CNI_ARGS IP={value:?}: {addr} is not a unicast address a pod can use"
        )));
    }
    Ok((addr, prefix_len))
}

fn parse_mac(value: &str) -> Result<MacAddr, CniError> {
    let well_formed = value.len() == 17
        && value.split(':').count() == 6
        && value
            .split(':')
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()));
    let mac: MacAddr = if well_formed {
        value.parse().ok()
    } else {
        None
    }
    .ok_or_else(|| {
        CniError::invalid_env(format!(
            "CNI_ARGS MAC={value:?} is not a MAC address (xx:xx:xx:xx:xx:xx)"
        ))
    })?;
    if mac.0[0] & 1 == 1 {
        return Err(CniError::invalid_env(format!(
            "CNI_ARGS MAC={value:?} is a multicast address; a pod interface needs a unicast MAC"
        )));
    }
    if mac.0 == [0; 6] {
        return Err(CniError::invalid_env(format!(
            "CNI_ARGS MAC={value:?} is all zeros"
        )));
    }
    Ok(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(raw: &str) -> String {
        let e = CniArgs::parse(raw).unwrap_err();
        assert_eq!(e.code, 4, "{e}");
        e.msg
    }

    #[test]
    fn empty_string_means_no_args() {
        let a = CniArgs::parse("").unwrap();
        assert!(a.pairs().is_empty());
        assert!(!a.ignore_unknown());
        assert_eq!(a.pod_name(), None);
    }

    #[test]
    fn podman_and_kubernetes_strings() {
        let a = CniArgs::parse("IgnoreUnknown=1;K8S_POD_NAME=web_1.x").unwrap();
        assert!(a.ignore_unknown());
        assert_eq!(a.pod_name(), Some("web_1.x"));
        assert_eq!(a.pod_namespace(), None);

        let a = CniArgs::parse(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-abc;\
             K8S_POD_INFRA_CONTAINER_ID=0123abcd;K8S_POD_UID=8a3c-11ee-b962",
        )
        .unwrap();
        assert_eq!(a.pod_namespace(), Some("kube-system"));
        assert_eq!(a.pod_name(), Some("coredns-abc"));
        assert_eq!(a.infra_container_id(), Some("0123abcd"));
        assert_eq!(a.pod_uid(), Some("8a3c-11ee-b962"));
        assert_eq!(a.get("K8S_POD_NAME"), Some("coredns-abc"));
        assert_eq!(a.unknown_keys().count(), 0);
    }

    #[test]
    fn values_may_contain_equals_signs() {
        let a = CniArgs::parse("IgnoreUnknown=true;TOKEN=a=b==;K8S_POD_NAME=p").unwrap();
        assert_eq!(a.get("TOKEN"), Some("a=b=="));
        assert_eq!(a.unknown_keys().collect::<Vec<_>>(), vec!["TOKEN"]);
        // An empty value is a value.
        let a = CniArgs::parse("IgnoreUnknown=1;X=").unwrap();
        assert_eq!(a.get("X"), Some(""));
    }

    #[test]
    fn segment_errors_are_precise() {
        assert_eq!(
            err("K8S_POD_NAME=a;IgnoreUnknown=1;FOO"),
            "CNI_ARGS segment 3 \"FOO\" has no '='"
        );
        assert_eq!(
            err("A=1;;B=2"),
            "CNI_ARGS segment 2 is empty (CNI_ARGS is \"A=1;;B=2\"; segments are KEY=VALUE separated by ';')"
        );
        assert!(err("IgnoreUnknown=1;").starts_with("CNI_ARGS segment 2 is empty"));
        assert_eq!(err("=x"), "CNI_ARGS segment 1 \"=x\" has an empty key");
        assert_eq!(
            err("IgnoreUnknown=1;K Y=1"),
            "CNI_ARGS segment 2 \"K Y=1\": key \"K Y\" may only contain letters, digits, '_' and '-'"
        );
        assert_eq!(
            err("IP=10.0.0.5;K8S_POD_NAME=a;IP=10.0.0.6"),
            "CNI_ARGS key \"IP\" appears twice (segments 1 and 3)"
        );
    }

    #[test]
    fn unknown_keys_need_ignore_unknown_anywhere_in_the_string() {
        assert_eq!(
            err("FOO=1;K8S_POD_NAME=a"),
            "CNI_ARGS has unknown keys \"FOO\" (known: IgnoreUnknown, K8S_POD_NAMESPACE, K8S_POD_NAME, \
             K8S_POD_UID, K8S_POD_INFRA_CONTAINER_ID, IP, MAC); add IgnoreUnknown=1 to ignore them"
        );
        // Keys are case-sensitive, as in libcni.
        assert!(err("ignoreunknown=1").contains("unknown keys \"ignoreunknown\""));
        assert!(err("FOO=1;IgnoreUnknown=0").contains("unknown keys \"FOO\""));
        let a = CniArgs::parse("FOO=1;IgnoreUnknown=TRUE").unwrap();
        assert!(a.ignore_unknown());
        assert_eq!(
            err("IgnoreUnknown=yes"),
            "CNI_ARGS IgnoreUnknown=\"yes\" is not a boolean (1, 0, true or false)"
        );
    }

    #[test]
    fn typed_values_are_validated() {
        assert_eq!(
            err("K8S_POD_NAMESPACE=Foo"),
            format!(
                "CNI_ARGS K8S_POD_NAMESPACE=\"Foo\" is not a valid namespace name ({DNS1123_LABEL_RULE})"
            )
        );
        assert!(err("K8S_POD_NAME=a/b").contains("K8S_POD_NAME=\"a/b\" is not a valid name"));
        assert!(err("K8S_POD_UID=a b").contains("K8S_POD_UID=\"a b\" is not a pod UID"));
        assert!(err("K8S_POD_INFRA_CONTAINER_ID=-x").contains("is not a container id"));
        // Empty K8S_* values count as absent.
        let a = CniArgs::parse("K8S_POD_NAMESPACE=;K8S_POD_NAME=").unwrap();
        assert_eq!(a.pod_namespace(), None);
        assert_eq!(a.pod_name(), None);
    }

    #[test]
    fn ip_arg() {
        let a = CniArgs::parse("IP=10.128.0.7").unwrap();
        assert_eq!(
            a.ip(),
            Some(RequestedIp {
                addr: Ipv4Addr::new(10, 128, 0, 7),
                prefix_len: None
            })
        );
        assert_eq!(a.ip6(), None);
        let a = CniArgs::parse("IP=10.128.0.7/23").unwrap();
        assert_eq!(a.ip().unwrap().prefix_len, Some(23));
        // Dual stack: one of each family, in either order; IPv6 alone.
        for v in ["10.128.0.7,fd01::7/64", "fd01::7/64,10.128.0.7"] {
            let a = CniArgs::parse(&format!("IP={v}")).unwrap();
            assert_eq!(a.ip().unwrap().addr, Ipv4Addr::new(10, 128, 0, 7));
            let six = a.ip6().unwrap();
            assert_eq!(
                (six.addr.to_string(), six.prefix_len),
                ("fd01::7".into(), Some(64))
            );
        }
        let a = CniArgs::parse("IP=fd01::7").unwrap();
        assert_eq!((a.ip(), a.ip6().unwrap().prefix_len), (None, None));
        for bad in [
            "10.128.0.300",
            "10.128.0.7/33",
            "10.128.0.7/",
            "x",
            "",
            "fd01::7/129",
            "fd01:::7",
            "10.0.0.1/+2",
            "10.0.0.1,",
        ] {
            assert_eq!(
                err(&format!("IP={bad}")),
                format!(
                    "CNI_ARGS IP={bad:?} is not an IP address (a.b.c.d or a.b.c.d/len, an IPv6 \
                     address with or without /len, or one of each separated by a comma)"
                )
            );
        }
        for (bad, addr) in [
            ("0.0.0.0", "0.0.0.0"),
            ("255.255.255.255", "255.255.255.255"),
            ("224.0.0.1", "224.0.0.1"),
            ("127.0.0.1", "127.0.0.1"),
            ("10.0.0.1,::1", "::1"),
            ("fe80::1", "fe80::1"),
            ("ff02::1", "ff02::1"),
            ("::", "::"),
        ] {
            assert_eq!(
                err(&format!("IP={bad}")),
                format!("CNI_ARGS IP={bad:?}: {addr} is not a unicast address a pod can use")
            );
        }
        assert_eq!(
            err("IP=10.0.0.1,10.0.0.2"),
            "CNI_ARGS IP=\"10.0.0.1,10.0.0.2\" asks for two addresses of one family (at most \
             one IPv4 and one IPv6 address)"
        );
    }

    #[test]
    fn mac_arg() {
        let a = CniArgs::parse("MAC=0a:58:0a:80:00:07").unwrap();
        assert_eq!(a.mac(), Some(MacAddr([0x0a, 0x58, 0x0a, 0x80, 0, 7])));
        let a = CniArgs::parse("MAC=0A:58:0A:80:00:07").unwrap();
        assert_eq!(a.mac().unwrap().to_string(), "0a:58:0a:80:00:07");
        for bad in [
            "0a:58:0a:80:00",
            "0a:58:0a:80:00:7",
            "0a-58-0a-80-00-07",
            "+a:58:0a:80:00:07",
            "",
        ] {
            assert_eq!(
                err(&format!("MAC={bad}")),
                format!("CNI_ARGS MAC={bad:?} is not a MAC address (xx:xx:xx:xx:xx:xx)")
            );
        }
        assert!(err("MAC=01:00:5e:00:00:01").contains("is a multicast address"));
        assert!(err("MAC=00:00:00:00:00:00").contains("is all zeros"));
    }
}
