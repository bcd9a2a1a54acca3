//! `agent::host::netlink` against the real kernel: pod veths, the gateway interface, checksum offload
//! and sysctls, in network namespaces the tests create (a "node" netns standing for the one
//! ovs-vswitchd and the agent run in, and "pod" netns). No OVS needed.
//!
//! The API runs on a thread that entered the node netns, with a current-thread tokio runtime,
//! as the agent will. The oracle is iproute2 (`ip -j`), `ethtool -k` and a ping through the
//! veth. Every test makes its own namespaces (deleted on drop, which deletes their interfaces),
//! so the tests run in parallel with anything else.

use std::future::Future;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use agent::host::netlink::{
    enable_ip_forward, get_sysctl, host_veth_name, set_sysctl, Netlink, NetlinkError, PodIpv6Spec,
    PodLink, PodLinkSpec, PodLinkState, Route6Spec, RouteSpec,
};
use ipnet::Ipv4Net;
use sdn_tests::harness::{run, unique_name, which, Netns};
use sdn_tests::probe;
use serde_json::Value;

/// Panics unless we are root with iproute2 and ethtool.
fn require_root() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the netlink tests need root (network namespaces)"
    );
    for bin in ["ip", "ethtool"] {
        assert!(
            which(bin).is_some(),
            "the netlink tests need {bin} (apt-get install iproute2 ethtool)"
        );
    }
}

fn netns_path(ns: &Netns) -> PathBuf {
    PathBuf::from(ns.path())
}

/// Runs `f` with a fresh [`Netlink`] on a thread inside `node`, on a current-thread runtime.
fn in_node<T, F, Fut>(node: &Netns, f: F) -> T
where
    T: Send + 'static,
    F: FnOnce(Netlink) -> Fut + Send + 'static,
    Fut: Future<Output = T>,
{
    node.run_inside(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        rt.block_on(async move {
            let nl = Netlink::new().expect("Netlink::new in the node netns");
            f(nl).await
        })
    })
}

fn json(ns: &Netns, args: &[&str]) -> Value {
    let mut cmd = vec!["ip", "-j"];
    cmd.extend_from_slice(args);
    let out = ns.exec(&cmd).unwrap_or_else(|e| panic!("{e}"));
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("ip -j {args:?}: {e}: {out}"))
}

/// The interface names in `ns`.
fn link_names(ns: &Netns) -> Vec<String> {
    json(ns, &["link", "show"])
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["ifname"].as_str().unwrap().to_string())
        .collect()
}

fn ip_link(ns: &Netns, name: &str) -> Value {
    json(ns, &["-d", "link", "show", "dev", name])[0].clone()
}

fn is_up(link: &Value) -> bool {
    link["flags"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f.as_str() == Some("UP"))
}

/// `(dst, gateway, dev, scope, protocol)` of every IPv4 main-table route in `ns`, sorted.
fn routes(ns: &Netns) -> Vec<(String, String, String, String, String)> {
    let mut all: Vec<_> = json(ns, &["-4", "route", "show"])
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or("").to_string();
            let scope = if r["scope"].is_null() {
                "global".into()
            } else {
                s("scope")
            };
            let proto = if r["protocol"].is_null() {
                "boot".into()
            } else {
                s("protocol")
            };
            (s("dst"), s("gateway"), s("dev"), scope, proto)
        })
        .collect();
    all.sort();
    all
}

fn route(
    dst: &str,
    gw: &str,
    dev: &str,
    scope: &str,
    proto: &str,
) -> (String, String, String, String, String) {
    (
        dst.into(),
        gw.into(),
        dev.into(),
        scope.into(),
        proto.into(),
    )
}

/// `ipaddr/prefix` of every IPv4 address of `dev` in `ns`.
fn addresses(ns: &Netns, dev: &str) -> Vec<String> {
    json(ns, &["-4", "addr", "show", "dev", dev])[0]["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
        .collect()
}

/// The `tx-checksumming:` line of `ethtool -k dev` in `ns`: `on` or `off`.
fn tx_checksumming(ns: &Netns, dev: &str) -> String {
    let out = ns
        .exec(&["ethtool", "-k", dev])
        .unwrap_or_else(|e| panic!("{e}"));
    out.lines()
        .find_map(|l| l.strip_prefix("tx-checksumming: "))
        .unwrap_or_else(|| panic!("no tx-checksumming line in ethtool -k {dev}: {out}"))
        .trim()
        .to_string()
}

fn mac(s: &str) -> [u8; 6] {
    let v: Vec<u8> = s
        .split(':')
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

fn net(s: &str) -> Ipv4Net {
    s.parse().unwrap()
}

const GW: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 1);

/// The spec of the conventions: node subnet 10.128.0.0/23, cluster 10.128.0.0/14, services
/// 172.30.0.0/16, MTU 1450, MAC 0a:58:<ip>.
fn spec(pod: &Netns, container: &str, tx_checksum_off: bool) -> PodLinkSpec {
    PodLinkSpec {
        netns: netns_path(pod),
        ifname: "eth0".into(),
        host_ifname: host_veth_name(container, "eth0"),
        mac: [0x0a, 0x58, 10, 128, 0, 5],
        ipv4: Some(agent::host::netlink::PodIpv4Spec {
            address: net("10.128.0.5/23"),
            gateway: GW,
            routes: vec![
                RouteSpec {
                    dst: net("224.0.0.0/4"),
                    via: None,
                },
                RouteSpec {
                    dst: net("10.128.0.0/14"),
                    via: None,
                },
                RouteSpec {
                    dst: net("172.30.0.0/16"),
                    via: Some(GW),
                },
            ],
        }),
        mtu: 1450,
        tx_checksum_off,
        pool_peer: None,
        ipv6: None,
    }
}

fn ping(ns: &Netns, target: &str) -> Result<String, String> {
    if which("ping").is_some() {
        ns.exec(&["ping", "-c", "1", "-W", "2", target])
    } else if which("busybox").is_some() {
        ns.exec(&["busybox", "ping", "-c", "1", "-W", "2", target])
    } else {
        panic!("this test needs ping (apt-get install iputils-ping or busybox-static)")
    }
}

/// Only `lo` in `ns`: nothing was left behind.
fn assert_only_lo(ns: &Netns, context: &str) {
    assert_eq!(
        link_names(ns),
        vec!["lo"],
        "{context}: interfaces left behind"
    );
}

#[test]
fn pod_link_is_configured_as_specified_and_carries_traffic() {
    require_root();
    let node = Netns::new("nln");
    let pod = Netns::new("nlp");
    let container = unique_name("ctr");
    let spec = spec(&pod, &container, true);
    let host = spec.host_ifname.clone();
    let s = spec.clone();
    let (link, state): (PodLink, PodLinkState) = in_node(&node, move |nl| async move {
        let link = nl.create_pod_link(&s).await.unwrap();
        let state = nl.inspect_pod_interface(&s.netns, "eth0").await.unwrap();
        (link, state)
    });

    // Pod end: name, MAC, MTU, up; lo up.
    let eth0 = ip_link(&pod, "eth0");
    assert_eq!(eth0["address"], "0a:58:0a:80:00:05");
    assert_eq!(eth0["mtu"], 1450);
    assert!(is_up(&eth0), "eth0 not up: {eth0}");
    assert_eq!(eth0["linkinfo"]["info_kind"], "veth");
    assert!(is_up(&ip_link(&pod, "lo")), "lo not up");
    assert_eq!(addresses(&pod, "eth0"), vec!["10.128.0.5/23"]);
    // No IPv6 address at all (addrgenmode none, set before the interface came up): the pod's
    // kernel sends no DAD, router solicitation or MLD report into br0.
    let v6 = pod
        .exec(&["ip", "-6", "addr", "show", "dev", "eth0"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!v6.contains("inet6"), "eth0 has an IPv6 address: {v6}");
    let details = pod
        .exec(&["ip", "-d", "link", "show", "dev", "eth0"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(details.contains("addrgenmode none"), "{details}");
    assert_eq!(
        routes(&pod),
        vec![
            route("10.128.0.0/14", "", "eth0", "link", "static"),
            route("10.128.0.0/23", "", "eth0", "link", "kernel"),
            route("172.30.0.0/16", "10.128.0.1", "eth0", "global", "static"),
            route("224.0.0.0/4", "", "eth0", "link", "static"),
            route("default", "10.128.0.1", "eth0", "global", "static"),
        ]
    );
    assert_eq!(tx_checksumming(&pod, "eth0"), "off");

    // Host end: in the node netns, up, same MTU, the index and MAC we were told.
    let h = ip_link(&node, &host);
    assert_eq!(h["mtu"], 1450);
    assert!(is_up(&h), "{host} not up: {h}");
    assert_eq!(h["ifindex"], link.host_index);
    assert_eq!(mac(h["address"].as_str().unwrap()), link.host_mac);
    assert_eq!(tx_checksumming(&node, &host), "off");
    assert_eq!(
        link,
        PodLink {
            host_ifname: host.clone(),
            host_index: link.host_index,
            pod_ifname: "eth0".into(),
            pod_mac: [0x0a, 0x58, 10, 128, 0, 5],
            host_mac: link.host_mac,
        }
    );
    assert!(
        !link_names(&node).iter().any(|n| n == "eth0"),
        "the pod end must never appear in the node netns"
    );

    // inspect reports the same state.
    let mut got_routes = state.routes.clone();
    got_routes.sort_by_key(|r| (r.dst, r.via));
    let mut want_routes = spec.ipv4.as_ref().unwrap().routes.clone();
    want_routes.push(RouteSpec {
        dst: net("0.0.0.0/0"),
        via: Some(GW),
    });
    want_routes.sort_by_key(|r| (r.dst, r.via));
    assert_eq!(got_routes, want_routes);
    assert_eq!(
        PodLinkState {
            routes: vec![],
            ..state
        },
        PodLinkState {
            mac: [0x0a, 0x58, 10, 128, 0, 5],
            mtu: 1450,
            up: true,
            addresses: vec![net("10.128.0.5/23")],
            routes: vec![],
            addresses6: vec![],
            routes6: vec![],
            tx_checksum: false,
        }
    );

    // Traffic: the pod's frames arrive on the host end (where OVS reads them), but the node's
    // kernel is out of the pod's path there: even with the gateway address on the host end it
    // answers neither ARP nor IP (forwarding=0, rp_filter=1, arp_ignore=8, no IPv6).
    for (key, want) in [
        ("net/ipv4/conf/{}/forwarding", "0"),
        ("net/ipv4/conf/{}/rp_filter", "1"),
        ("net/ipv4/conf/{}/arp_ignore", "8"),
        ("net/ipv6/conf/{}/disable_ipv6", "1"),
    ] {
        let path = format!("/proc/sys/{}", key.replace("{}", &host));
        let got = node.exec(&["cat", &path]).unwrap();
        assert_eq!(got.trim(), want, "{path}");
    }
    node.exec(&["ip", "addr", "add", "10.128.0.1/23", "dev", &host])
        .unwrap();
    let capture = probe::Capture::start(node.name(), &host, &[0x0a, 0x58, 10, 128, 0, 5]);
    assert!(
        ping(&pod, "10.128.0.1").is_err(),
        "the node kernel answered the pod on its host veth"
    );
    assert!(
        !capture.stop().is_empty(),
        "no frame of the pod arrived on the host end"
    );

    // Deleting the host end removes both; a second delete is a no-op.
    let h2 = host.clone();
    let (first, second) = in_node(&node, move |nl| async move {
        (
            nl.delete_host_veth(&h2).await.unwrap(),
            nl.delete_host_veth(&h2).await.unwrap(),
        )
    });
    assert!(first, "first delete must report a deletion");
    assert!(!second, "second delete must report nothing to delete");
    assert_only_lo(&node, "after delete_host_veth");
    assert_only_lo(&pod, "after delete_host_veth");
}

#[test]
fn a_dual_stack_pod_link_has_its_ipv6_address_without_dad_and_its_ipv6_routes() {
    require_root();
    let node = Netns::new("nln");
    let pod = Netns::new("nlp");
    let gw6: std::net::Ipv6Addr = "fd01:0:0:5::1".parse().unwrap();
    let mut spec = spec(&pod, &unique_name("ctr"), true);
    spec.ipv6 = Some(PodIpv6Spec {
        address: "fd01:0:0:5::5/64".parse().unwrap(),
        gateway: gw6,
        routes: vec![
            Route6Spec {
                dst: "fd02::/112".parse().unwrap(),
                via: Some(gw6),
            },
            Route6Spec {
                dst: "fd01::/48".parse().unwrap(),
                via: None,
            },
        ],
    });
    let s = spec.clone();
    let state = in_node(&node, move |nl| async move {
        nl.create_pod_link(&s).await.unwrap();
        nl.inspect_pod_interface(&s.netns, "eth0").await.unwrap()
    });
    // The address is usable at once: not tentative (no DAD), and no link-local address was
    // made (addrgenmode none).
    let v6 = pod
        .exec(&["ip", "-6", "addr", "show", "dev", "eth0"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(v6.contains("inet6 fd01:0:0:5::5/64"), "{v6}");
    assert!(!v6.contains("tentative"), "{v6}");
    assert!(!v6.contains("fe80::"), "{v6}");
    let routes6 = pod
        .exec(&["ip", "-6", "route", "show", "dev", "eth0"])
        .unwrap_or_else(|e| panic!("{e}"));
    for want in [
        "fd01::/48 proto static",
        "fd02::/112 via fd01:0:0:5::1 proto static",
        "default via fd01:0:0:5::1 proto static",
    ] {
        assert!(routes6.contains(want), "{want} in {routes6}");
    }
    assert_eq!(state.addresses6, vec!["fd01:0:0:5::5/64".parse().unwrap()]);
    let mut got = state.routes6.clone();
    got.sort_by_key(|r| (r.dst, r.via));
    let mut want = spec.ipv6.clone().unwrap().routes;
    want.push(Route6Spec {
        dst: "::/0".parse().unwrap(),
        via: Some(gw6),
    });
    want.sort_by_key(|r| (r.dst, r.via));
    assert_eq!(got, want);
    // IPv4 is as for any pod.
    assert_eq!(state.addresses, vec![net("10.128.0.5/23")]);
}

#[test]
fn a_pod_netns_without_ipv6_fails_a_dual_stack_link_naming_the_setting_and_leaves_nothing() {
    require_root();
    let node = Netns::new("nln");
    let pod = Netns::new("nlp");
    pod.exec(&[
        "sysctl",
        "-qw",
        "net.ipv6.conf.all.disable_ipv6=1",
        "net.ipv6.conf.default.disable_ipv6=1",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    let mut spec = spec(&pod, &unique_name("ctr"), true);
    spec.ipv6 = Some(PodIpv6Spec {
        address: "fd01:0:0:5::5/64".parse().unwrap(),
        gateway: "fd01:0:0:5::1".parse().unwrap(),
        routes: vec![],
    });
    let host = spec.host_ifname.clone();
    let err = in_node(&node, move |nl| async move {
        nl.create_pod_link(&spec).await.unwrap_err().to_string()
    });
    assert!(err.contains("disable_ipv6=1"), "{err}");
    assert_only_lo(&pod, "after a refused dual-stack link");
    assert!(!link_names(&node).contains(&host), "{host} left behind");
}

#[test]
fn checksum_offload_untouched_unless_asked() {
    require_root();
    let node = Netns::new("nln");
    let pod = Netns::new("nlp");
    let spec = spec(&pod, &unique_name("ctr"), false);
    let host = spec.host_ifname.clone();
    let (before, after) = in_node(&node, move |nl| async move {
        nl.create_pod_link(&spec).await.unwrap();
        let state = nl.inspect_pod_interface(&spec.netns, "eth0").await.unwrap();
        let before = (
            state.tx_checksum,
            nl.tx_checksum(&spec.host_ifname).unwrap(),
        );
        nl.set_tx_checksum(&spec.host_ifname, false).unwrap();
        (before, nl.tx_checksum(&spec.host_ifname).unwrap())
    });
    assert_eq!(before, (true, true), "veth default is tx checksum on");
    assert_eq!(tx_checksumming(&pod, "eth0"), "on");
    assert!(!after);
    assert_eq!(tx_checksumming(&node, &host), "off");
}

#[test]
fn missing_netns_fails_cleanly() {
    require_root();
    let node = Netns::new("nln");
    let missing = PathBuf::from(format!("/var/run/netns/{}", unique_name("nlmissing")));
    let mut spec = spec(&node, &unique_name("ctr"), true);
    spec.netns = missing.clone();
    let (err, deleted) = in_node(&node, move |nl| async move {
        let err = nl.create_pod_link(&spec).await.unwrap_err();
        let deleted = nl.delete_pod_interface(&spec.netns, "eth0").await.unwrap();
        (err, deleted)
    });
    assert!(matches!(err, NetlinkError::Netns { .. }), "{err:?}");
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    assert_eq!(
        err.to_string(),
        format!(
            "opening netns {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
    assert!(!deleted, "deleting in a missing netns is a no-op");
    assert_only_lo(&node, "after a failed create");
}

#[test]
fn existing_pod_interface_fails_cleanly() {
    require_root();
    let node = Netns::new("nln");
    let pod = Netns::new("nlp");
    pod.exec(&[
        "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0peer",
    ])
    .unwrap();
    let spec = spec(&pod, &unique_name("ctr"), true);
    let err = in_node(&node, move |nl| async move {
        nl.create_pod_link(&spec).await.unwrap_err()
    });
    assert!(
        matches!(err, NetlinkError::PodInterfaceExists { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with(&format!(
            "interface eth0 already exists in netns {}",
            netns_path(&pod).display()
        )),
        "{err}"
    );
    assert_only_lo(&node, "after a failed create");
    let mut names = link_names(&pod);
    names.sort();
    assert_eq!(
        names,
        vec!["eth0", "eth0peer", "lo"],
        "the existing pair is untouched"
    );
}

#[test]
fn invalid_ifname_fails_before_anything() {
    require_root();
    let node = Netns::new("nln");
    let pod = Netns::new("nlp");
    let mut spec = spec(&pod, &unique_name("ctr"), true);
    spec.ifname = "eth0:1".into();
    let err = in_node(&node, move |nl| async move {
        nl.create_pod_link(&spec).await.unwrap_err()
    });
    assert_eq!(
        err.to_string(),
        "invalid interface name \"eth0:1\": contains ':' at byte 4"
    );
    assert_only_lo(&node, "after a rejected spec");
    assert_only_lo(&pod, "after a rejected spec");
}

#[test]
fn failure_after_the_veth_exists_rolls_it_back() {
    require_root();
    let node = Netns::new("nln");
    let pod = Netns::new("nlp");
    let mut spec = spec(&pod, &unique_name("ctr"), true);
    // The next hop is on no connected network of the pod: the kernel refuses the route after
    // the veth, the address and the other routes exist.
    spec.ipv4.as_mut().unwrap().routes.push(RouteSpec {
        dst: net("192.168.0.0/16"),
        via: Some(Ipv4Addr::new(10, 200, 0, 1)),
    });
    let err = in_node(&node, move |nl| async move {
        nl.create_pod_link(&spec).await.unwrap_err()
    });
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!(
            "adding route 192.168.0.0/16 via 10.200.0.1 dev eth0 in netns {}: ",
            netns_path(&pod).display()
        )),
        "{msg}"
    );
    assert_eq!(err.raw_os_error(), Some(libc::ENETUNREACH), "{msg}");
    assert_only_lo(&node, "after a rolled back create");
    assert_only_lo(&pod, "after a rolled back create");
}

#[test]
fn stale_host_veth_is_replaced() {
    require_root();
    let node = Netns::new("nln");
    let pod = Netns::new("nlp");
    let spec = spec(&pod, &unique_name("ctr"), false);
    let host = spec.host_ifname.clone();
    node.exec(&[
        "ip", "link", "add", &host, "type", "veth", "peer", "name", "stale0",
    ])
    .unwrap();
    let old_index = ip_link(&node, &host)["ifindex"].as_u64().unwrap();
    let created = in_node(&node, move |nl| async move {
        nl.create_pod_link(&spec).await.unwrap()
    });
    assert_ne!(u64::from(created.host_index), old_index, "a new veth");
    let mut names = link_names(&node);
    names.sort();
    assert_eq!(
        names,
        vec!["lo".to_string(), host.clone()],
        "stale0 went with the stale veth"
    );
    assert_eq!(ip_link(&pod, "eth0")["linkinfo"]["info_kind"], "veth");
}

#[test]
fn delete_pod_interface_is_idempotent() {
    require_root();
    let node = Netns::new("nln");
    let pod = Netns::new("nlp");
    let spec = spec(&pod, &unique_name("ctr"), false);
    let gone = PathBuf::from(format!("/var/run/netns/{}", unique_name("nlgone")));
    let (exists, first, second, missing_ns, exists_after) = in_node(&node, move |nl| async move {
        let link = nl.create_pod_link(&spec).await.unwrap();
        let exists = nl.link_exists(&link.host_ifname).await.unwrap();
        let first = nl.delete_pod_interface(&spec.netns, "eth0").await.unwrap();
        let second = nl.delete_pod_interface(&spec.netns, "eth0").await.unwrap();
        let missing_ns = nl.delete_pod_interface(&gone, "eth0").await.unwrap();
        let exists_after = nl.link_exists(&link.host_ifname).await.unwrap();
        (
            exists.map(|i| i == link.host_index),
            first,
            second,
            missing_ns,
            exists_after,
        )
    });
    assert_eq!(exists, Some(true), "link_exists returns the host index");
    assert!(first);
    assert!(!second);
    assert!(!missing_ns);
    assert_eq!(
        exists_after, None,
        "deleting the pod end removes the host end"
    );
    assert_only_lo(&node, "after delete_pod_interface");
    assert_only_lo(&pod, "after delete_pod_interface");
}

#[test]
fn inspect_of_a_missing_interface_is_a_precise_error() {
    require_root();
    let node = Netns::new("nln");
    let pod = Netns::new("nlp");
    let path = netns_path(&pod);
    let p = path.clone();
    let err = in_node(&node, move |nl| async move {
        nl.inspect_pod_interface(&p, "eth0").await.unwrap_err()
    });
    assert_eq!(
        err.to_string(),
        format!("interface eth0 not found in netns {}", path.display())
    );
}

#[test]
fn gateway_configuration_waits_for_the_link_and_is_idempotent() {
    require_root();
    let node = Netns::new("nln");
    // The link appears late, as when ovs-vswitchd creates tun0 after the port is added.
    let node_name = node.name().to_string();
    let creator = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        // A tap, as OVS userspace internal ports are (this kernel has no dummy driver).
        run(
            "ip",
            &[
                "-n", &node_name, "tuntap", "add", "dev", "tun0", "mode", "tap",
            ],
        )
    });
    let (waited, absent, timeout) = in_node(&node, move |nl| async move {
        let started = Instant::now();
        let routes = [net("10.128.0.0/14"), net("172.30.0.0/16")];
        nl.configure_gateway("tun0", Some(net("10.128.0.1/23")), 1450, &routes)
            .await
            .unwrap();
        let waited = started.elapsed();
        nl.configure_gateway("tun0", Some(net("10.128.0.1/23")), 1450, &routes)
            .await
            .unwrap();
        let absent = nl.link_exists("tun1").await.unwrap();
        let timeout = nl
            .wait_for_link("tun1", Duration::from_millis(100))
            .await
            .unwrap_err();
        (waited, absent, timeout)
    });
    creator.join().unwrap().unwrap();
    assert!(
        waited >= Duration::from_millis(250),
        "did not wait: {waited:?}"
    );
    assert_eq!(absent, None);
    assert_eq!(
        timeout.to_string(),
        "interface tun1 did not appear in the node netns within 100ms"
    );
    let tun0 = ip_link(&node, "tun0");
    assert_eq!(tun0["mtu"], 1450);
    assert!(is_up(&tun0), "{tun0}");
    assert_eq!(addresses(&node, "tun0"), vec!["10.128.0.1/23"]);
    assert_eq!(
        routes(&node),
        vec![
            route("10.128.0.0/14", "", "tun0", "link", "static"),
            route("10.128.0.0/23", "", "tun0", "link", "kernel"),
            route("172.30.0.0/16", "", "tun0", "link", "static"),
        ]
    );
}

#[test]
fn ip_forward_is_enabled_in_the_calling_netns_only() {
    require_root();
    let node = Netns::new("nln");
    let read = |ns: &Netns| {
        ns.exec(&["cat", "/proc/sys/net/ipv4/ip_forward"])
            .unwrap()
            .trim()
            .to_string()
    };
    let host_before = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap();
    // A new netns inherits the host's IPv4 settings; start from 0 in the node to see a change.
    let (zeroed, again) = in_node(&node, |_nl| async {
        let zeroed = set_sysctl("net/ipv4/ip_forward", "0").unwrap();
        let again = set_sysctl("net/ipv4/ip_forward", "0").unwrap();
        (zeroed, again)
    });
    assert!(!again, "writing the current value is skipped");
    assert_eq!(
        read(&node),
        "0",
        "set_sysctl acted on the node netns (changed: {zeroed})"
    );
    in_node(&node, |_nl| async {
        enable_ip_forward().unwrap();
        enable_ip_forward().unwrap();
        assert_eq!(get_sysctl("net/ipv4/ip_forward").unwrap(), "1");
    });
    assert_eq!(read(&node), "1");
    let host_after = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap();
    assert_eq!(host_before, host_after, "the host netns is untouched");
}

/// Polls `fut` at most `polls` times; `None` if it was not done by then (it is then dropped,
/// as a caller's deadline would drop it). Cancels at a given step, independent of timer
/// granularity.
async fn poll_at_most<F: Future>(fut: F, polls: usize) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut left = polls;
    std::future::poll_fn(move |cx| {
        if left == 0 {
            return std::task::Poll::Ready(None);
        }
        left -= 1;
        fut.as_mut().poll(cx).map(Some)
    })
    .await
}

/// A caller that gives up midway (its own deadline drops the future) leaves nothing behind: the
/// veth guard deletes what was created. Cancels after 1, 2, 3... polls, so that some attempts
/// stop before and some after the veth exists, until two in a row complete.
#[test]
fn cancelled_create_leaves_nothing_behind() {
    require_root();
    let node = Netns::new("nln");
    let pod = Netns::new("nlp");
    let spec = spec(&pod, &unique_name("ctr"), true);
    let pod_name = pod.name().to_string();
    let (cancelled, completed, guarded) = in_node(&node, move |nl| async move {
        let (mut cancelled, mut completed, mut guarded) = (0, 0, 0);
        let mut polls = 1;
        while completed < 2 {
            assert!(polls < 200, "create_pod_link never completed");
            match poll_at_most(nl.create_pod_link(&spec), polls).await {
                Some(result) => {
                    result.unwrap();
                    completed += 1;
                    assert!(nl.delete_host_veth(&spec.host_ifname).await.unwrap());
                }
                None => {
                    completed = 0;
                    cancelled += 1;
                    // Cancelled after the veth was created: only the guard can remove it.
                    if nl.link_exists(&spec.host_ifname).await.unwrap().is_some() {
                        guarded += 1;
                    }
                }
            }
            // The guard's deletion runs as a task on this runtime: wait for it (bounded).
            let started = Instant::now();
            while nl.link_exists(&spec.host_ifname).await.unwrap().is_some() {
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "host veth still there 5 s after a cancel at poll {polls}"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert!(
                run("ip", &["-n", &pod_name, "link", "show", "eth0"]).is_err(),
                "eth0 left in the pod after a cancel at poll {polls}"
            );
            polls += 1;
        }
        (cancelled, completed, guarded)
    });
    eprintln!("cancelled {cancelled} ({guarded} after the veth existed), completed {completed}");
    assert!(
        cancelled > 0,
        "no attempt was cancelled ({completed} completed)"
    );
    assert!(
        guarded > 0,
        "no cancel landed after the veth existed ({cancelled} cancelled, {completed} completed): \
         the guard was not exercised"
    );
    assert_only_lo(&node, "after cancelled creates");
    assert_only_lo(&pod, "after cancelled creates");
}

/// Latency of `create_pod_link` and `delete_host_veth`, one fresh pod netns each (the netns
/// creation is not timed). Prints the figures; asserts only that every call succeeded.
#[test]
fn create_pod_link_latency() {
    require_root();
    const N: usize = 30;
    let node = Netns::new("nln");
    let pods: Vec<Netns> = (0..N).map(|_| Netns::new("nlp")).collect();
    let specs: Vec<PodLinkSpec> = pods
        .iter()
        .map(|p| spec(p, &unique_name("ctr"), true))
        .collect();
    let (mut create, mut delete) = in_node(&node, move |nl| async move {
        let (mut create, mut delete) = (Vec::new(), Vec::new());
        for s in &specs {
            let t = Instant::now();
            nl.create_pod_link(s).await.unwrap();
            create.push(t.elapsed());
            let t = Instant::now();
            assert!(nl.delete_host_veth(&s.host_ifname).await.unwrap());
            delete.push(t.elapsed());
        }
        (create, delete)
    });
    create.sort();
    delete.sort();
    let pct = |v: &[Duration], p: usize| v[(v.len() * p / 100).min(v.len() - 1)];
    eprintln!(
        "create_pod_link over {N} pods: p50 {:?} p90 {:?} max {:?}; delete_host_veth: p50 {:?} max {:?}",
        pct(&create, 50),
        pct(&create, 90),
        create[N - 1],
        pct(&delete, 50),
        delete[N - 1]
    );
    assert_only_lo(&node, "after the latency run");
}
