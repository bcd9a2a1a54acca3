//! The ADD result: one internal type ([`AddResult`]), rendered in the exact shape of each
//! supported CNI version and parsed back from a `prevResult` of any of them.
//!
//! Why one type: handlers build a result once and the version only matters at the edge, so the
//! per-version differences live in [`AddResult::to_json`] alone:
//! - 0.3.0, 0.3.1, 0.4.0: `ips[]` carry `"version": "4"` or `"6"`;
//! - 1.0.0: no `version` in `ips[]`;
//! - 1.1.0: interfaces may carry `mtu` (omitted for older versions: never a newer shape than
//!   asked).
//!
//! Field order and omission follow libcni's `types040`/`types100` encoders (empty lists and
//! absent optionals omitted, `dns` always present, possibly `{}`), so our output matches what the
//! reference plugins print.
//!
//! Both families: a dual-stack pod's result has one entry per family in `ips` (IPv4 first, as
//! OVN-Kubernetes and the reference plugins order them) and the routes of both. Limits: 1.1.0
//! extras we do not model
//! (`socketPath`, `pciID`, route `mtu`/`advmss`/`priority`/`table`/`scope`) are not carried
//! through chaining.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::types::CniError;
use super::version::CniVersion;

/// An interface in a result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Interface name (the host veth, or CNI_IFNAME inside the sandbox).
    pub name: String,
    /// Hardware address, if the interface has one (`xx:xx:xx:xx:xx:xx`).
    pub mac: Option<String>,
    /// The netns path for interfaces inside the sandbox; `None` for host interfaces.
    pub sandbox: Option<String>,
    /// MTU; rendered for 1.1.0 and later only.
    pub mtu: Option<u32>,
}

/// An address assigned by the plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpConfig {
    /// Address with prefix length (`10.128.0.5/23`, `fd01:0:0:5::5/64`).
    pub address: IpNet,
    /// The default gateway for this subnet, if any (of the address's family).
    pub gateway: Option<IpAddr>,
    /// Index into [`AddResult::interfaces`] of the interface holding the address.
    pub interface: Option<usize>,
}

/// A route the plugin installed in the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Destination.
    pub dst: IpNet,
    /// Next hop; `None` means the default gateway (or on-link).
    pub gw: Option<IpAddr>,
}

/// DNS settings of a result (all optional).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dns {
    /// Name server addresses.
    pub nameservers: Vec<String>,
    /// Local domain.
    pub domain: Option<String>,
    /// Search domains.
    pub search: Vec<String>,
    /// Resolver options.
    pub options: Vec<String>,
}

/// The result of ADD (and the parsed `prevResult` of chained plugins).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddResult {
    /// Interfaces created or used.
    pub interfaces: Vec<Interface>,
    /// Addresses assigned.
    pub ips: Vec<IpConfig>,
    /// Routes installed.
    pub routes: Vec<Route>,
    /// DNS settings.
    pub dns: Dns,
}

// ---- rendering ----

#[derive(Serialize)]
struct ResultOut<'a> {
    #[serde(rename = "cniVersion")]
    cni_version: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    interfaces: Vec<InterfaceOut<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ips: Vec<IpOut>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    routes: Vec<RouteOut>,
    dns: DnsOut<'a>,
}

#[derive(Serialize)]
struct InterfaceOut<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    mac: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mtu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<&'a str>,
}

#[derive(Serialize)]
struct IpOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    interface: Option<usize>,
    address: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    gateway: Option<String>,
}

#[derive(Serialize)]
struct RouteOut {
    dst: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    gw: Option<String>,
}

#[derive(Serialize)]
struct DnsOut<'a> {
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    nameservers: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    domain: Option<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    search: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    options: &'a [String],
}

impl AddResult {
    /// Appends an interface and returns its index (for [`IpConfig::interface`]).
    pub fn push_interface(&mut self, iface: Interface) -> usize {
        self.interfaces.push(iface);
        self.interfaces.len() - 1
    }

    /// The result as the JSON the runtime expects for `version` (see the module docs).
    pub fn to_json(&self, version: CniVersion) -> String {
        let out = ResultOut {
            cni_version: version.as_str(),
            interfaces: self
                .interfaces
                .iter()
                .map(|i| InterfaceOut {
                    name: &i.name,
                    mac: i.mac.as_deref(),
                    mtu: i.mtu.filter(|_| version.interfaces_have_mtu()),
                    sandbox: i.sandbox.as_deref(),
                })
                .collect(),
            ips: self
                .ips
                .iter()
                .map(|ip| IpOut {
                    version: version.ips_have_version().then_some(match ip.address {
                        IpNet::V4(_) => "4",
                        IpNet::V6(_) => "6",
                    }),
                    interface: ip.interface,
                    address: ip.address.to_string(),
                    gateway: ip.gateway.map(|g| g.to_string()),
                })
                .collect(),
            routes: self
                .routes
                .iter()
                .map(|r| RouteOut {
                    dst: r.dst.to_string(),
                    gw: r.gw.map(|g| g.to_string()),
                })
                .collect(),
            dns: DnsOut {
                nameservers: &self.dns.nameservers,
                domain: self.dns.domain.as_deref(),
                search: &self.dns.search,
                options: &self.dns.options,
            },
        };
        // Strings, integers and options only: serialisation cannot fail.
        serde_json::to_string(&out).unwrap_or_default()
    }

    /// Parses a result of any supported version (a chained plugin's `prevResult`). Errors are
    /// code 7 (invalid network configuration) and name the JSON path of the bad value.
    pub fn from_value(value: &Value) -> Result<AddResult, CniError> {
        let bad = |msg: String| CniError::invalid_config(msg);
        let wire: ResultIn = serde_json::from_value(value.clone())
            .map_err(|e| bad(format!("prevResult is not a CNI result: {e}")))?;
        if let Some(v) = &wire.cni_version {
            v.parse::<CniVersion>()
                .map_err(|e| bad(format!("prevResult: {e}")))?;
        }
        let interfaces: Vec<Interface> = wire
            .interfaces
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, x)| {
                if x.name.is_empty() {
                    return Err(bad(format!("prevResult.interfaces[{i}].name is empty")));
                }
                Ok(Interface {
                    name: x.name,
                    mac: x.mac.filter(|m| !m.is_empty()),
                    sandbox: x.sandbox.filter(|s| !s.is_empty()),
                    mtu: x.mtu.filter(|m| *m != 0),
                })
            })
            .collect::<Result<_, _>>()?;
        let mut ips = Vec::new();
        for (i, x) in wire.ips.unwrap_or_default().into_iter().enumerate() {
            let address: IpNet = x.address.parse().map_err(|_| {
                bad(format!(
                    "prevResult.ips[{i}].address {:?} is not an IP address with prefix length",
                    x.address
                ))
            })?;
            let family = if address.addr().is_ipv4() { "4" } else { "6" };
            if let Some(v) = x.version.as_deref() {
                if v != family {
                    return Err(bad(format!(
                        "prevResult.ips[{i}].version is {v:?} but its address {address} is IPv{family}"
                    )));
                }
            }
            let gateway = match x.gateway.as_deref() {
                None | Some("") => None,
                Some(g) => Some(
                    g.parse::<IpAddr>()
                        .ok()
                        .filter(|g| g.is_ipv4() == address.addr().is_ipv4())
                        .ok_or_else(|| {
                            bad(format!(
                                "prevResult.ips[{i}].gateway {g:?} is not an IPv{family} address"
                            ))
                        })?,
                ),
            };
            if let Some(idx) = x.interface {
                if idx >= interfaces.len() {
                    return Err(bad(format!(
                        "prevResult.ips[{i}].interface {idx} is out of range ({} interfaces)",
                        interfaces.len()
                    )));
                }
            }
            ips.push(IpConfig {
                address,
                gateway,
                interface: x.interface,
            });
        }
        let mut routes = Vec::new();
        for (i, x) in wire.routes.unwrap_or_default().into_iter().enumerate() {
            let dst: IpNet = x.dst.parse().map_err(|_| {
                bad(format!(
                    "prevResult.routes[{i}].dst {:?} is not an IP prefix",
                    x.dst
                ))
            })?;
            let family = if dst.addr().is_ipv4() { "4" } else { "6" };
            let gw = match x.gw.as_deref() {
                None | Some("") => None,
                Some(g) => Some(
                    g.parse::<IpAddr>()
                        .ok()
                        .filter(|g| g.is_ipv4() == dst.addr().is_ipv4())
                        .ok_or_else(|| {
                            bad(format!(
                                "prevResult.routes[{i}].gw {g:?} is not an IPv{family} address"
                            ))
                        })?,
                ),
            };
            routes.push(Route { dst, gw });
        }
        let dns = wire.dns.unwrap_or_default();
        Ok(AddResult {
            interfaces,
            ips,
            routes,
            dns: Dns {
                nameservers: dns.nameservers.unwrap_or_default(),
                domain: dns.domain.filter(|d| !d.is_empty()),
                search: dns.search.unwrap_or_default(),
                options: dns.options.unwrap_or_default(),
            },
        })
    }
}

// ---- parsing (lenient about absent/null fields, strict about types) ----

#[derive(Deserialize)]
struct ResultIn {
    #[serde(rename = "cniVersion")]
    cni_version: Option<String>,
    interfaces: Option<Vec<InterfaceIn>>,
    ips: Option<Vec<IpIn>>,
    routes: Option<Vec<RouteIn>>,
    dns: Option<DnsIn>,
}

#[derive(Deserialize)]
struct InterfaceIn {
    name: String,
    mac: Option<String>,
    mtu: Option<u32>,
    sandbox: Option<String>,
}

#[derive(Deserialize)]
struct IpIn {
    version: Option<String>,
    interface: Option<usize>,
    address: String,
    gateway: Option<String>,
}

#[derive(Deserialize)]
struct RouteIn {
    dst: String,
    gw: Option<String>,
}

#[derive(Deserialize, Default)]
struct DnsIn {
    nameservers: Option<Vec<String>>,
    domain: Option<String>,
    search: Option<Vec<String>>,
    options: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::version::SUPPORTED_VERSIONS;

    fn pod_result() -> AddResult {
        let mut r = AddResult::default();
        r.push_interface(Interface {
            name: "veth0123456789a".into(),
            mac: Some("ee:ee:ee:ee:ee:ee".into()),
            sandbox: None,
            mtu: Some(1450),
        });
        let pod = r.push_interface(Interface {
            name: "eth0".into(),
            mac: Some("0a:58:0a:80:00:05".into()),
            sandbox: Some("/run/netns/p1".into()),
            mtu: Some(1450),
        });
        r.ips.push(IpConfig {
            address: "10.128.0.5/23".parse().unwrap(),
            gateway: Some("10.128.0.1".parse().unwrap()),
            interface: Some(pod),
        });
        r.routes.push(Route {
            dst: "0.0.0.0/0".parse().unwrap(),
            gw: Some("10.128.0.1".parse().unwrap()),
        });
        r.routes.push(Route {
            dst: "10.128.0.0/14".parse().unwrap(),
            gw: None,
        });
        r
    }

    #[test]
    fn renders_0_3_x_and_0_4_0_with_ip_version() {
        for v in ["0.3.0", "0.3.1", "0.4.0"] {
            let version: CniVersion = v.parse().unwrap();
            let expected = format!(
                concat!(
                    r#"{{"cniVersion":"{v}","#,
                    r#""interfaces":[{{"name":"veth0123456789a","mac":"ee:ee:ee:ee:ee:ee"}},"#,
                    r#"{{"name":"eth0","mac":"0a:58:0a:80:00:05","sandbox":"/run/netns/p1"}}],"#,
                    r#""ips":[{{"version":"4","interface":1,"address":"10.128.0.5/23","gateway":"10.128.0.1"}}],"#,
                    r#""routes":[{{"dst":"0.0.0.0/0","gw":"10.128.0.1"}},{{"dst":"10.128.0.0/14"}}],"#,
                    r#""dns":{{}}}}"#
                ),
                v = v
            );
            assert_eq!(pod_result().to_json(version), expected);
        }
    }

    #[test]
    fn renders_1_0_0_without_ip_version_or_mtu() {
        assert_eq!(
            pod_result().to_json(CniVersion::V1_0_0),
            concat!(
                r#"{"cniVersion":"1.0.0","#,
                r#""interfaces":[{"name":"veth0123456789a","mac":"ee:ee:ee:ee:ee:ee"},"#,
                r#"{"name":"eth0","mac":"0a:58:0a:80:00:05","sandbox":"/run/netns/p1"}],"#,
                r#""ips":[{"interface":1,"address":"10.128.0.5/23","gateway":"10.128.0.1"}],"#,
                r#""routes":[{"dst":"0.0.0.0/0","gw":"10.128.0.1"},{"dst":"10.128.0.0/14"}],"#,
                r#""dns":{}}"#
            )
        );
    }

    #[test]
    fn renders_1_1_0_with_mtu() {
        assert_eq!(
            pod_result().to_json(CniVersion::V1_1_0),
            concat!(
                r#"{"cniVersion":"1.1.0","#,
                r#""interfaces":[{"name":"veth0123456789a","mac":"ee:ee:ee:ee:ee:ee","mtu":1450},"#,
                r#"{"name":"eth0","mac":"0a:58:0a:80:00:05","mtu":1450,"sandbox":"/run/netns/p1"}],"#,
                r#""ips":[{"interface":1,"address":"10.128.0.5/23","gateway":"10.128.0.1"}],"#,
                r#""routes":[{"dst":"0.0.0.0/0","gw":"10.128.0.1"},{"dst":"10.128.0.0/14"}],"#,
                r#""dns":{}}"#
            )
        );
    }

    #[test]
    fn renders_empty_result_and_dns() {
        let mut r = AddResult::default();
        assert_eq!(
            r.to_json(CniVersion::V1_0_0),
            r#"{"cniVersion":"1.0.0","dns":{}}"#
        );
        r.dns = Dns {
            nameservers: vec!["172.30.0.10".into()],
            domain: Some("cluster.local".into()),
            search: vec!["ns.svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        };
        assert_eq!(
            r.to_json(CniVersion::V0_3_1),
            r#"{"cniVersion":"0.3.1","dns":{"nameservers":["172.30.0.10"],"domain":"cluster.local","search":["ns.svc.cluster.local"],"options":["ndots:5"]}}"#
        );
    }

    #[test]
    fn parses_its_own_output_in_every_version() {
        for v in SUPPORTED_VERSIONS {
            let json: Value = serde_json::from_str(&pod_result().to_json(v)).unwrap();
            let parsed = AddResult::from_value(&json).unwrap();
            let mut expected = pod_result();
            if !v.interfaces_have_mtu() {
                for i in &mut expected.interfaces {
                    i.mtu = None;
                }
            }
            assert_eq!(parsed, expected, "version {v}");
        }
    }

    #[test]
    fn reference_plugin_output_round_trips() {
        // Printed by the bridge plugin of containernetworking-plugins 1.1.1 (Debian) on this
        // machine, compacted: our rendering must be byte-identical after a parse.
        for v in ["0.3.1", "0.4.0", "1.0.0"] {
            let ip_version = if v == "1.0.0" {
                ""
            } else {
                r#""version":"4","#
            };
            let text = format!(
                concat!(
                    r#"{{"cniVersion":"{v}","interfaces":[{{"name":"cnisrvbr0","mac":"1a:12:4b:d7:fe:75"}},"#,
                    r#"{{"name":"veth56ae5720","mac":"32:1c:86:af:08:c9"}},"#,
                    r#"{{"name":"e040","mac":"be:c6:db:70:f4:0f","sandbox":"/run/netns/cnisrv-p"}}],"#,
                    r#""ips":[{{{ipv}"interface":2,"address":"10.99.0.2/24","gateway":"10.99.0.1"}}],"#,
                    r#""routes":[{{"dst":"0.0.0.0/0"}}],"dns":{{}}}}"#
                ),
                v = v,
                ipv = ip_version
            );
            let r = AddResult::from_value(&serde_json::from_str(&text).unwrap()).unwrap();
            assert_eq!(r.interfaces.len(), 3);
            assert_eq!(
                r.interfaces[2].sandbox.as_deref(),
                Some("/run/netns/cnisrv-p")
            );
            assert_eq!(r.ips[0].interface, Some(2));
            assert_eq!(r.routes[0].gw, None);
            assert_eq!(r.to_json(v.parse().unwrap()), text);
        }
    }

    #[test]
    fn a_dual_stack_result_has_one_address_per_family() {
        let mut r = pod_result();
        r.ips.push(IpConfig {
            address: "fd01:0:0:5::5/64".parse().unwrap(),
            gateway: Some("fd01:0:0:5::1".parse().unwrap()),
            interface: Some(1),
        });
        r.routes.push(Route {
            dst: "::/0".parse().unwrap(),
            gw: Some("fd01:0:0:5::1".parse().unwrap()),
        });
        let old = r.to_json("0.4.0".parse().unwrap());
        assert!(
            old.contains(r#"{"version":"6","interface":1,"address":"fd01:0:0:5::5/64","gateway":"fd01:0:0:5::1"}"#),
            "{old}"
        );
        assert!(
            old.contains(r#"{"dst":"::/0","gw":"fd01:0:0:5::1"}"#),
            "{old}"
        );
        for v in SUPPORTED_VERSIONS {
            let text = r.to_json(v);
            let back = AddResult::from_value(&serde_json::from_str(&text).unwrap()).unwrap();
            assert_eq!(back.ips, r.ips, "{v}");
            assert_eq!(back.routes, r.routes, "{v}");
        }
    }

    #[test]
    fn prev_result_errors_name_the_path() {
        let cases = [
            (
                r#"{"ips":[{"version":"4","address":"fd00::2/64"}]}"#,
                "prevResult.ips[0].version is \"4\" but its address fd00::2/64 is IPv6",
            ),
            (
                r#"{"ips":[{"address":"fd00::2"}]}"#,
                "prevResult.ips[0].address \"fd00::2\" is not an IP address with prefix length",
            ),
            (
                r#"{"ips":[{"address":"10.0.0.2/24","gateway":"x"}]}"#,
                "prevResult.ips[0].gateway \"x\" is not an IPv4 address",
            ),
            (
                r#"{"ips":[{"address":"fd00::2/64","gateway":"10.0.0.1"}]}"#,
                "prevResult.ips[0].gateway \"10.0.0.1\" is not an IPv6 address",
            ),
            (
                r#"{"routes":[{"dst":"::/0","gw":"10.0.0.1"}]}"#,
                "prevResult.routes[0].gw \"10.0.0.1\" is not an IPv6 address",
            ),
            (
                r#"{"interfaces":[{"name":"a"}],"ips":[{"address":"10.0.0.2/24","interface":1}]}"#,
                "prevResult.ips[0].interface 1 is out of range (1 interfaces)",
            ),
            (
                r#"{"routes":[{"dst":"10.0.0.0/33"}]}"#,
                "prevResult.routes[0].dst \"10.0.0.0/33\" is not an IP prefix",
            ),
            (
                r#"{"cniVersion":"0.2.0"}"#,
                "prevResult: cniVersion \"0.2.0\" is not supported (supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0)",
            ),
            (
                r#"{"interfaces":[{"name":""}]}"#,
                "prevResult.interfaces[0].name is empty",
            ),
        ];
        for (json, msg) in cases {
            let e = AddResult::from_value(&serde_json::from_str(json).unwrap()).unwrap_err();
            assert_eq!(e.code, 7);
            assert_eq!(e.msg, msg, "{json}");
        }
        let e = AddResult::from_value(&serde_json::json!({"ips": 5})).unwrap_err();
        assert!(
            e.msg
                .starts_with("prevResult is not a CNI result: invalid type"),
            "{}",
            e.msg
        );
        let e = AddResult::from_value(&serde_json::json!("x")).unwrap_err();
        assert_eq!(e.code, 7);
    }

    #[test]
    fn null_lists_are_empty() {
        let r = AddResult::from_value(
            &serde_json::json!({"cniVersion":"1.0.0","interfaces":null,"ips":null,"dns":null}),
        )
        .unwrap();
        assert_eq!(r, AddResult::default());
    }
}
