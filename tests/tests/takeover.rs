//! Taking a running openshift-sdn node over: the openshift-sdn node fixture
//! (`sdn_tests::openshift_sdn`, its own code at openshift/sdn 18a57d7) as a migrating
//! administrator finds it: a node of a two-node cluster (the other node stays openshift-sdn's),
//! on a subnet that is not the cluster's first, with VNIDs as openshift-sdn's allocator hands
//! them out (random), 100 pods in four tenants and `default` (bandwidth on two, a hole in the
//! leases), kube-proxy's Service rules and an external host on the underlay. While the real
//! `sdn-agent` starts on it, probes 50 ms apart from pods with warm ARP caches run to every
//! kind of destination: pods of every tenant on the node, the gateway, a Service, the external
//! host and the pods of the other node (both ways). What should talk loses no packet, what
//! must not never answers; the pods keep their addresses, MACs, ports, leases, bandwidth and
//! their gateway's MAC; openshift-sdn's rows, CNI config, leases and chains go; the runtime's
//! CHECK and DEL of an adopted pod work; a new pod's address never collides; a restart changes
//! nothing. A node that is not as openshift-sdn leaves it is refused, naming what does not
//! match, and left untouched; forced, it is taken over. Handed back, openshift-sdn's own
//! release (its vendored host-local) frees a handed-back pod's address.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cluster::{ClusterObject, HostSubnet, StandaloneSource};
use sdn_tests::cluster::{underlay_ip, Cluster};
use sdn_tests::harness::{require_root_and_ovs, wait_until};
use sdn_tests::kubeproxy::{self, Proto, Service};
use sdn_tests::node::{workspace_bin, AgentNode, NodeOptions};
use sdn_tests::openshift_sdn::{self as osdn, Plugin, PodSpec, RemoteNode, WiredPod};
use sdn_tests::probe::{udp_echo_server_at, udp_probe, udp_stream};
use serde_json::json;

/// This node's subnet: not the cluster's first (the other node has 10.128.2.0/23).
const SUBNET: &str = "10.128.4.0/23";
const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 128, 4, 1);
const OTHER_SUBNET: &str = "10.128.2.0/23";
/// The node IP of the single-node tests (on the node's uplink, `osdn::node_uplink`).
const NODE_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 111, 10);
/// The tenants: namespace and VNID, as openshift-sdn's allocator hands them out (at random
/// from 10 to 2^24-1); `default` is global.
const TENANTS: [(&str, u32); 5] = [
    ("tenant-a", 369_601),
    ("tenant-b", 12_050_132),
    ("tenant-c", 5_163),
    ("tenant-d", 888_810),
    ("default", 0),
];
/// A Service (kube-proxy's rules on the node) whose endpoint is a host-network server of the
/// node (as the API server's or a node-local DNS's are), and an external host on the underlay.
const SERVICE: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 10);
const SERVICE_PORT: u16 = 53;
const ENDPOINT_PORT: u16 = 5353;
const EXTERNAL: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 200);
/// A Service whose one endpoint is a pod, used by that pod (hairpin).
const HAIRPIN_SERVICE: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 11);
/// Probes of each stream: 600 at 50 ms, 30 s, long enough to span the agent's start.
const PROBES: u32 = 600;

fn spec(plugin: Plugin, node_ip: Ipv4Addr, subnet: &str) -> osdn::Node {
    let net: ipnet::Ipv4Net = subnet.parse().unwrap();
    let o = net.network().octets();
    osdn::Node {
        plugin,
        cluster_networks: vec!["10.128.0.0/14".into()],
        service_network: "172.30.0.0/16".into(),
        local_subnet: subnet.into(),
        gateway: Ipv4Addr::new(o[0], o[1], o[2], o[3] | 1),
        node_ip,
        vxlan_port: 4789,
    }
}

/// The pods of a node openshift-sdn ran: `per_tenant` of each tenant (4 of `default`) in
/// `subnet`, addresses with a hole (host-local hands out the next free one: a pod deleted
/// leaves a gap), bandwidth on the first two.
fn pod_specs(per_tenant: usize, subnet: &str) -> Vec<PodSpec> {
    let net: ipnet::Ipv4Net = subnet.parse().unwrap();
    let base = u32::from(net.network());
    let mut specs = Vec::new();
    for (t, (ns, vnid)) in TENANTS.iter().enumerate() {
        let n = if *ns == "default" { 4 } else { per_tenant };
        for i in 0..n {
            let host = 10 + t * 30 + i + usize::from(i >= 5);
            specs.push(PodSpec {
                namespace: ns.to_string(),
                name: format!("{ns}-{i}"),
                ip: Ipv4Addr::from(base + host as u32),
                vnid: *vnid,
                bandwidth: (specs.len() < 2).then_some((10_000_000, 10_240_000)),
            });
        }
    }
    specs
}

/// A node openshift-sdn ran (no agent of ours yet): the cluster state our agent will read
/// (this node's HostSubnet, the tenants' NetNamespaces) and `per_tenant` pods of each tenant
/// wired by openshift-sdn's rules.
fn openshift_sdn_node(per_tenant: usize, extra: Vec<String>) -> (AgentNode, Vec<WiredPod>) {
    openshift_sdn_node_with(Plugin::Multitenant, "multitenant", per_tenant, extra)
}

/// [`openshift_sdn_node`] with openshift-sdn's `plugin` and our agent's `mode`.
fn openshift_sdn_node_with(
    plugin: Plugin,
    mode: &'static str,
    per_tenant: usize,
    extra: Vec<String>,
) -> (AgentNode, Vec<WiredPod>) {
    let node = AgentNode::new(NodeOptions {
        mode,
        extra,
        ..NodeOptions::default()
    });
    let state = node.state_dir();
    std::fs::create_dir_all(&state).unwrap();
    StandaloneSource::write_object(
        &state,
        &ClusterObject::HostSubnet(HostSubnet::new("node-a", &NODE_IP.to_string(), SUBNET)),
    )
    .unwrap();
    // The guide's standalone procedure: each namespace gets openshift-sdn's VNID through
    // `sdnctl create --vnid` (`--global` for VNID 0) before the agent's first start.
    for (ns, vnid) in TENANTS {
        let vnid = vnid.to_string();
        let args: Vec<&str> = if vnid == "0" {
            vec!["create", ns, "--global"]
        } else {
            vec!["create", ns, "--vnid", &vnid]
        };
        let out = node.sdnctl(&args);
        assert!(out.contains(&format!("created with VNID {vnid}")), "{out}");
    }
    let spec = spec(plugin, NODE_IP, SUBNET);
    osdn::node_uplink(&node.ovs, &spec);
    let pods = osdn::build_node(
        &node.ovs,
        &spec,
        &[],
        &pod_specs(per_tenant, SUBNET),
        &node.dir().join("net.d"),
        &node.dir().join("ipam").join(osdn::CNI_NETWORK),
    );
    (node, pods)
}

/// A stream of pings from a pod to `to`, in the background: [`PROBES`] packets 50 ms apart.
struct Ping {
    pair: String,
    allowed: bool,
    child: Child,
}

impl Ping {
    fn start(from: &WiredPod, label: &str, to: Ipv4Addr, allowed: bool) -> Ping {
        Ping::start_in(from.netns.name(), &from.spec.name, label, to, allowed)
    }

    /// From namespace `netns` (named `from` in the report).
    fn start_in(netns: &str, from: &str, label: &str, to: Ipv4Addr, allowed: bool) -> Ping {
        let child = Command::new("ip")
            .args(["netns", "exec", netns, "ping", "-n", "-D", "-O"])
            .args(["-c", &PROBES.to_string(), "-i", "0.05", "-W", "1"])
            .arg(to.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ping");
        Ping {
            pair: format!("{from} -> {label}"),
            allowed,
            child,
        }
    }

    /// (pair, allowed, transmitted, received).
    fn finish(self) -> (String, bool, u64, u64) {
        let out = self.child.wait_with_output().expect("ping output");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let stat = text
            .lines()
            .find(|l| l.contains("packets transmitted"))
            .unwrap_or_else(|| panic!("no ping statistics: {text}"));
        // Which probes went unanswered, and when the next answer came (`-D` timestamps): to
        // line a loss up with the agent's log.
        if self.allowed {
            let got: std::collections::BTreeSet<u64> = text
                .lines()
                .filter(|l| l.contains("bytes from"))
                .filter_map(|l| l.split("icmp_seq=").nth(1)?.split(' ').next()?.parse().ok())
                .collect();
            let max = got.iter().max().copied().unwrap_or(0);
            for seq in (1..=max).filter(|s| !got.contains(s)) {
                let near = text
                    .lines()
                    .find(|l| l.contains(&format!("icmp_seq={} ", seq + 1)))
                    .unwrap_or("");
                eprintln!("{}: lost icmp_seq={seq}; next: {near}", self.pair);
            }
        }
        let num = |word: &str| -> u64 {
            let words: Vec<&str> = stat.split([' ', ',']).filter(|w| !w.is_empty()).collect();
            let i = words.iter().position(|w| w.starts_with(word)).unwrap();
            words[i - 1].parse().unwrap()
        };
        (self.pair, self.allowed, num("packets"), num("received"))
    }
}

/// One ping from namespace `netns` to `dst`, answered within 2 s.
fn ping_once(netns: &str, dst: Ipv4Addr) -> bool {
    Command::new("ip")
        .args(["netns", "exec", netns, "ping", "-c", "1", "-W", "2"])
        .arg(dst.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn ext_ids(node: &AgentNode, port: &str) -> BTreeMap<String, String> {
    let out = node.ovs.vsctl(&[
        "--format=json",
        "--columns=external_ids",
        "list",
        "Interface",
        port,
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["data"][0][0][1]
        .as_array()
        .unwrap()
        .iter()
        .map(|kv| {
            (
                kv[0].as_str().unwrap().to_string(),
                kv[1].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn iptables_save(node: &AgentNode) -> String {
    node.ovs.exec_in_netns(&["iptables-save"]).unwrap()
}

fn tun0_mac(node: &AgentNode) -> String {
    node.ovs
        .exec_in_netns(&["cat", "/sys/class/net/tun0/address"])
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn a_running_openshift_sdn_node_is_taken_over_with_no_packet_lost() {
    require_root_and_ovs();
    // Two nodes on one underlay, both openshift-sdn's; node-1 is taken over, node-2 stays.
    let c = Cluster::start(0, &NodeOptions::default());
    let node = c.join_bare_node(1);
    let other = c.join_bare_node(2);
    let mut hs1 = HostSubnet::new("node-1", &underlay_ip(1).to_string(), SUBNET);
    hs1.metadata.uid = Some("5b0a0c4e-node-1".into());
    let mut hs2 = HostSubnet::new("node-2", &underlay_ip(2).to_string(), OTHER_SUBNET);
    hs2.metadata.uid = Some("5b0a0c4e-node-2".into());
    c.write_host_subnet(&hs1);
    c.write_host_subnet(&hs2);
    for (ns, vnid) in TENANTS {
        c.set_netnamespace(ns, vnid);
    }
    let remote_of = |hs: &HostSubnet| RemoteNode {
        uid: hs.metadata.uid.clone().unwrap(),
        host_ip: hs.host_ip.parse().unwrap(),
        subnet: hs.subnet.clone(),
    };
    let pods = osdn::build_node(
        &node.ovs,
        &spec(Plugin::Multitenant, underlay_ip(1), SUBNET),
        &[remote_of(&hs2)],
        &pod_specs(24, SUBNET),
        &node.dir().join("net.d"),
        &node.dir().join("ipam").join(osdn::CNI_NETWORK),
    );
    assert_eq!(pods.len(), 100);
    let far: Vec<WiredPod> = osdn::build_node(
        &other.ovs,
        &spec(Plugin::Multitenant, underlay_ip(2), OTHER_SUBNET),
        &[remote_of(&hs1)],
        &pod_specs(1, OTHER_SUBNET),
        &other.dir().join("net.d"),
        &other.dir().join("ipam").join(osdn::CNI_NETWORK),
    );
    // kube-proxy's rules for two Services: one whose endpoint is a server of the node's host
    // network (as the API server's or a node-local DNS's is), and one whose endpoint is a pod,
    // used by that pod itself (hairpin: kube-proxy masquerades it). A pod-backed Service used
    // by another pod needs the kernel's conntrack shared with OVS on openshift-sdn's rows (its
    // table 31 un-DNATs the reply there): it cannot work on this machine's userspace datapath
    // before the takeover, so it is not probed across it (pipeline.md, "Services").
    let hairpin_pod = &pods[1];
    kubeproxy::install(
        node.ovs.ns(),
        &[
            Service {
                name: "dns".into(),
                cluster_ip: SERVICE,
                port: SERVICE_PORT,
                proto: Proto::Udp,
                endpoints: vec![(underlay_ip(1), ENDPOINT_PORT)],
                node_port: None,
                external_local: false,
            },
            Service {
                name: "self".into(),
                cluster_ip: HAIRPIN_SERVICE,
                port: 80,
                proto: Proto::Udp,
                endpoints: vec![(hairpin_pod.spec.ip, ENDPOINT_PORT)],
                node_port: None,
                external_local: false,
            },
        ],
        "10.128.0.0/14",
    );
    let _endpoint = udp_echo_server_at(
        node.ovs.netns(),
        SocketAddrV4::new(underlay_ip(1), ENDPOINT_PORT),
    );
    let _hairpin_endpoint = udp_echo_server_at(
        hairpin_pod.netns.name(),
        SocketAddrV4::new(hairpin_pod.spec.ip, ENDPOINT_PORT),
    );
    let hairpin = SocketAddrV4::new(HAIRPIN_SERVICE, 80);
    c.hub_exec(&[
        "ip",
        "addr",
        "add",
        &format!("{EXTERNAL}/24"),
        "dev",
        "hub0",
    ]);

    let before: Vec<(String, String)> = pods
        .iter()
        .map(|p| {
            (
                p.host_veth.clone(),
                node.ovs
                    .vsctl(&["get", "Interface", &p.host_veth, "ofport"]),
            )
        })
        .collect();
    let flows_before = node.flows();
    assert!(flows_before.iter().any(|f| f.contains("note:01.0d")));
    let tun_mac = tun0_mac(&node);
    assert_eq!(
        node.ovs.vsctl(&["get", "Interface", "tun0", "mac"]).trim(),
        "[]",
        "openshift-sdn leaves tun0's mac column unset"
    );

    let first = |ns: &str| pods.iter().find(|p| p.spec.namespace == ns).unwrap();
    let second = |ns: &str| {
        pods.iter()
            .filter(|p| p.spec.namespace == ns)
            .nth(1)
            .unwrap()
    };
    let far_of = |ns: &str| far.iter().find(|p| p.spec.namespace == ns).unwrap();
    let service = SocketAddrV4::new(SERVICE, SERVICE_PORT);
    // Every kind of destination answers under openshift-sdn's rows before anything starts (so
    // a loss below is the takeover's), and the pods' ARP caches are warm.
    for (ns, _) in TENANTS {
        let p = first(ns);
        for dst in [GATEWAY, EXTERNAL, far_of(ns).spec.ip, second(ns).spec.ip] {
            // The first packet to a destination waits for ARP (across VXLAN for the far pod)
            // on a shared machine: a warm-up may take a second try; the losses counted
            // below start only after it.
            assert!(
                (0..3).any(|_| ping_once(p.netns.name(), dst)),
                "{} -> {dst} before the takeover",
                p.spec.name
            );
        }
        assert!(
            udp_probe(p.netns.name(), service, Duration::from_secs(3)),
            "{} -> the Service before the takeover",
            p.spec.name
        );
        assert!(
            (0..3).any(|_| ping_once(node.ovs.netns(), p.spec.ip)),
            "the node -> {} before the takeover",
            p.spec.name
        );
    }
    assert!(
        udp_probe(hairpin_pod.netns.name(), hairpin, Duration::from_secs(3)),
        "{} -> its own Service (hairpin) before the takeover",
        hairpin_pod.spec.name
    );
    // What the takeover must leave as it is: tun0's routes.
    let tun0_routes = || {
        node.ovs
            .exec_in_netns(&["ip", "route", "show", "dev", "tun0"])
            .unwrap()
    };
    let routes_before = tun0_routes();

    let began = Instant::now();
    let mut pings = Vec::new();
    let mut streams = Vec::new();
    for (from, fv) in TENANTS {
        let src = first(from);
        // Pods of every tenant on this node (one per ordered pair of tenants).
        for (to, tv) in TENANTS {
            let allowed = fv == tv || fv == 0 || tv == 0;
            let dst = second(to);
            pings.push(Ping::start(src, &dst.spec.name, dst.spec.ip, allowed));
        }
        pings.push(Ping::start(src, "gateway", GATEWAY, true));
        pings.push(Ping::start(src, "external host", EXTERNAL, true));
        pings.push(Ping::start(src, "the node's IP", underlay_ip(1), true));
        // The node to the pod (kubelet's probes).
        pings.push(Ping::start_in(
            node.ovs.netns(),
            "node-1",
            &src.spec.name,
            src.spec.ip,
            true,
        ));
        // The other node's pod of the same tenant, both ways.
        let f = far_of(from);
        pings.push(Ping::start(
            src,
            &format!("{}@node-2", f.spec.name),
            f.spec.ip,
            true,
        ));
        pings.push(Ping::start(
            f,
            &format!("{}@node-1", second(from).spec.name),
            second(from).spec.ip,
            true,
        ));
        streams.push((
            format!("{} -> the Service", src.spec.name),
            udp_stream(
                src.netns.name(),
                service,
                u64::from(PROBES),
                Duration::from_millis(50),
            ),
        ));
    }
    streams.push((
        format!("{} -> its own Service (hairpin)", hairpin_pod.spec.name),
        udp_stream(
            hairpin_pod.netns.name(),
            hairpin,
            u64::from(PROBES),
            Duration::from_millis(50),
        ),
    ));
    // Across nodes between tenants: never answered.
    for (a, b) in [("tenant-a", "tenant-b"), ("tenant-c", "tenant-a")] {
        pings.push(Ping::start(
            first(a),
            &format!("{}@node-2", far_of(b).spec.name),
            far_of(b).spec.ip,
            false,
        ));
        pings.push(Ping::start(
            far_of(a),
            &format!("{}@node-1", second(b).spec.name),
            second(b).spec.ip,
            false,
        ));
    }
    std::thread::sleep(Duration::from_secs(2));
    let agent_started = Instant::now();
    node.start_agent();
    let ready_after = agent_started.elapsed();
    assert!(
        began.elapsed() < Duration::from_secs(25),
        "the takeover took too long to be inside the probes' 30 s ({:?}); log:\n{}",
        began.elapsed(),
        node.log()
    );
    let line = takeover_line(&node);
    assert!(line.contains("pods=100"), "{line}");
    assert!(line.contains("leases=100"), "{line}");
    let log = node.log();
    let found = log
        .lines()
        .find(|l| l.contains("taking it over with its pods running"))
        .unwrap_or_default();
    eprintln!("found: {found}");
    assert!(
        found.contains(&format!("tun0_mac={tun_mac}")),
        "the takeover keeps tun0's MAC as ovs-vswitchd has it ({tun_mac}):\n{log}"
    );
    let reconcile = node.last_reconcile();
    eprintln!("takeover: {line}\nreconcile: {reconcile}\nready after {ready_after:?}");

    let mut lost = Vec::new();
    let mut answered = Vec::new();
    let (mut sent_all, mut lost_all, mut isolated_all) = (0, 0, 0);
    for p in pings {
        let (pair, allowed, sent, received) = p.finish();
        eprintln!("{pair}: sent {sent} received {received} (allowed: {allowed})");
        if allowed {
            sent_all += sent;
        }
        if allowed && received != sent {
            lost_all += sent - received;
            lost.push(format!("{pair}: {} of {sent} lost", sent - received));
        }
        if !allowed {
            isolated_all += sent;
            if received != 0 {
                answered.push(format!("{pair}: {received} of {sent} answered"));
            }
        }
    }
    for (pair, s) in streams {
        let (sent, received) = s.finish();
        eprintln!("{pair}: sent {sent} answered {received}");
        sent_all += sent;
        if received != sent {
            lost_all += sent - received;
            lost.push(format!("{pair}: {} of {sent} lost", sent - received));
        }
    }
    eprintln!(
        "across the takeover: {sent_all} probes that must be answered, {lost_all} lost; {isolated_all} isolated probes, answered in {} streams",
        answered.len()
    );
    if !lost.is_empty() {
        // ovs-vswitchd's own count of what it dropped and why, on both nodes.
        for (name, n) in [("node-1", &node), ("node-2", &other)] {
            let ctl = n.ovs.vswitchd_ctl().display().to_string();
            let cov = sdn_tests::harness::run("ovs-appctl", &["-t", &ctl, "coverage/show"])
                .unwrap_or_else(|e| e);
            for l in cov.lines().filter(|l| l.contains("drop")) {
                eprintln!("{name} coverage: {l}");
            }
        }
    }
    assert!(
        lost.is_empty(),
        "packets lost across the takeover: {lost:?}\n{}",
        node.log()
    );
    assert!(
        answered.is_empty(),
        "isolated tenants answered during the takeover: {answered:?}"
    );

    // Pods keep their ports, addresses and MACs; their records keep openshift-sdn's keys and
    // gain ours.
    for (p, (veth, ofport)) in pods.iter().zip(&before) {
        assert_eq!(
            &node.ovs.vsctl(&["get", "Interface", veth, "ofport"]),
            ofport
        );
        let ids = ext_ids(&node, veth);
        assert_eq!(ids["sandbox"], p.sandbox);
        assert_eq!(ids["ip"], p.spec.ip.to_string());
        assert_eq!(ids["ifname"], "eth0");
        assert_eq!(ids["namespace"], p.spec.namespace);
        assert_eq!(ids["vnid"], p.spec.vnid.to_string());
        let mac = p
            .netns
            .exec(&["cat", "/sys/class/net/eth0/address"])
            .unwrap();
        assert_eq!(mac.trim(), osdn::pod_mac(p.spec.ip));
    }
    // Bandwidth carries over: the QoS row stays on the port, the record has both limits.
    for bw in &pods[..2] {
        let ids = ext_ids(&node, &bw.host_veth);
        assert_eq!(ids["ingress_rate_bps"], "10000000", "{ids:?}");
        assert_eq!(ids["egress_rate_bps"], "10000000", "{ids:?}");
        assert_ne!(
            node.ovs
                .vsctl(&["get", "Port", &bw.host_veth, "qos"])
                .trim(),
            "[]",
            "the pod's QoS row is still on its port"
        );
        assert_eq!(
            node.ovs
                .vsctl(&["get", "Interface", &bw.host_veth, "ingress_policing_rate"])
                .trim(),
            "10000"
        );
    }
    // Leases moved: ours hold the 100 addresses, openshift-sdn's directory is gone.
    let mut ips: Vec<String> = pods.iter().map(|p| p.spec.ip.to_string()).collect();
    ips.sort();
    assert_eq!(node.leases(), ips);
    assert!(!node.dir().join("ipam").join(osdn::CNI_NETWORK).exists());
    // Its CNI config went, ours is there.
    assert!(!node.dir().join("net.d").join(osdn::CNI_CONF_FILE).exists());
    assert!(node.conf_file().exists());
    // Its rows went: our version note, none of its rows (its resubmit:10 rows, its note).
    let flows = node.flows();
    let text = flows.join("\n");
    assert!(
        !text.contains("note:01.0d") && !text.contains("resubmit:10"),
        "{text}"
    );
    let ours: Vec<String> = "multitenant.".bytes().map(|b| format!("{b:02x}")).collect();
    assert!(
        text.contains(&format!("note:{}", ours.join("."))),
        "our note (multitenant.<hash>) in table 253: {text}"
    );
    // Its chains went, except the platform's block of the machine-config ports; ours are in.
    let saved = iptables_save(&node);
    for gone in [
        "OPENSHIFT-FIREWALL-ALLOW",
        "OPENSHIFT-FIREWALL-FORWARD",
        "OPENSHIFT-MASQUERADE",
        "OPENSHIFT-NOTRACK",
        "OPENSHIFT-ADMIN-OUTPUT-RULES",
    ] {
        assert!(!saved.contains(gone), "{gone} is still there:\n{saved}");
    }
    assert!(saved.contains("-A OPENSHIFT-BLOCK-OUTPUT"), "{saved}");
    assert!(
        saved.contains("SDN-POSTROUTING") && saved.contains("SDN-INPUT"),
        "{saved}"
    );
    // The operator's checks of the guide: sdnctl status, pods and trace on the taken-over node.
    let status = node.sdnctl_api(&["status"]);
    let status_text = String::from_utf8_lossy(&status.stdout).to_string();
    assert!(status.status.success(), "{status_text}");
    eprintln!("$ sdnctl status\n{status_text}");
    assert!(status_text.contains("\nREADY; "), "{status_text}");
    let listed = node.sdnctl_api(&["pods", "-n", "tenant-b"]);
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    let b1 = second("tenant-b");
    assert!(
        listed.contains(&b1.spec.ip.to_string()) && listed.contains(&b1.host_veth),
        "sdnctl pods lists the adopted pods: {listed}"
    );
    assert_eq!(node.metrics().get("sdn_ready"), Some(&1.0));
    let repairs = status_text
        .lines()
        .find_map(|l| l.strip_prefix("repairs since start: "))
        .expect("a repairs line");
    assert!(
        repairs == "none" || repairs.split(", ").all(|r| r.ends_with(" 0")),
        "the taken-over node drifts from what the agent wants: {status_text}"
    );
    let a0 = first("tenant-a");
    let b0 = first("tenant-b");
    let t = node.trace(
        &a0.spec.ip.to_string(),
        &b0.spec.ip.to_string(),
        "tcp/80",
        None,
    );
    assert_ne!(t["outcome"], "delivered", "{t}");
    eprintln!("trace a0 -> b0: {}", t["verdict"]);
    // Nothing on the node's links and routes changed under the pods: tun0's routes are
    // openshift-sdn's, the adopted pods' veths have the IPv4 hardening and keep their IPv6,
    // and no pool port was made (the pool fills at the first ADD, below).
    assert_eq!(tun0_routes(), routes_before, "tun0's routes changed");
    for p in &pods[..3] {
        let get = |key: &str| {
            node.ovs
                .exec_in_netns(&["sysctl", "-n", key])
                .unwrap()
                .trim()
                .to_string()
        };
        let v = &p.host_veth;
        assert_eq!(
            [
                get(&format!("net.ipv4.conf.{v}.forwarding")),
                get(&format!("net.ipv4.conf.{v}.rp_filter")),
                get(&format!("net.ipv4.conf.{v}.arp_ignore")),
                get(&format!("net.ipv6.conf.{v}.disable_ipv6")),
            ],
            ["0", "1", "8", "0"],
            "{v}: the node kernel out of the adopted pod's path (IPv4), IPv6 as it was"
        );
        assert_eq!(ext_ids(&node, v)["hardened"], "ipv4");
    }
    assert!(node.pool_ports().is_empty(), "a pool port was made");
    // tun0 keeps openshift-sdn's MAC (the pods' ARP caches hold it), and says so.
    assert_eq!(tun0_mac(&node), tun_mac);
    assert_eq!(
        node.ovs
            .vsctl(&["get", "Interface", "tun0", "external_ids:mac-kept-from"])
            .trim(),
        "openshift-sdn"
    );
    assert_eq!(
        node.ovs.vsctl(&["get", "Interface", "tun0", "mac"]).trim(),
        format!("\"{tun_mac}\""),
        "pinned, so later starts keep it"
    );
    // The runtime's CHECK and DEL of an adopted pod, with the result openshift-sdn's plugin
    // returned at its ADD (libcni hands it over as prevResult; the MAC in it is the veth's
    // before openshift-sdn changed it).
    let b1 = second("tenant-b");
    let env = |cmd: &'static str| {
        vec![
            ("CNI_COMMAND", cmd.to_string()),
            ("CNI_CONTAINERID", b1.sandbox.clone()),
            ("CNI_NETNS", b1.netns.path()),
            ("CNI_IFNAME", "eth0".to_string()),
            (
                "CNI_ARGS",
                format!(
                    "K8S_POD_NAMESPACE={};K8S_POD_NAME={}",
                    b1.spec.namespace, b1.spec.name
                ),
            ),
            ("CNI_PATH", "/opt/cni/bin".to_string()),
        ]
    };
    let mut conf = node.netconf("1.0.0");
    conf["prevResult"] = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "mac": "8a:4f:10:22:33:44", "sandbox": b1.netns.path()}],
        "ips": [{"address": format!("{}/23", b1.spec.ip), "gateway": GATEWAY.to_string(), "interface": 0}],
    });
    let run = |cmd: &'static str, conf: &serde_json::Value| {
        let e = env(cmd);
        let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
        node.cni(&e, conf)
    };
    let out = run("CHECK", &conf);
    assert_eq!(out.code, 0, "CHECK of an adopted pod: {}", out.stdout);
    let out = run("DEL", &node.netconf("1.0.0"));
    assert_eq!(out.code, 0, "DEL of an adopted pod: {}", out.stdout);
    assert!(!node.pod_ports().contains(&b1.host_veth));
    assert!(!node.leases().contains(&b1.spec.ip.to_string()));
    assert!(
        !node
            .flows()
            .iter()
            .any(|f| f.contains(&format!("nw_dst={},", b1.spec.ip))),
        "the deleted pod's rows are gone"
    );

    // A runtime that deletes with the config it cached at ADD (as CRI-O does) calls
    // openshift-sdn's plugin with openshift-sdn's config: `sdn-cni` put in that plugin's place
    // (the guide's step) serves it from our agent.
    let c1 = second("tenant-c");
    let cached = serde_json::json!({"cniVersion": "0.3.1", "name": "openshift-sdn", "type": "openshift-sdn"});
    // (Its config names no socket: the plugin uses the default, /var/run/sdn/cni.sock. In
    // openshift-sdn's plugin's place here: sdn-cni run in a private mount namespace where that
    // path is this node's agent's socket.)
    let plugin = node.dir().join(osdn::CNI_NETWORK);
    std::fs::write(
        &plugin,
        format!(
            "#!/bin/sh\nexec /usr/bin/unshare --mount --propagation private /bin/sh -c \
             '/usr/bin/mount -t tmpfs sdn /run && /usr/bin/mkdir -p /run/sdn && \
             /usr/bin/ln -s {} /run/sdn/cni.sock && exec {}'\n",
            node.socket().display(),
            workspace_bin("sdn-cni").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let netns = c1.netns.path();
    let del = sdn_tests::node::plugin_exec(
        &plugin,
        &[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", &c1.sandbox),
            ("CNI_NETNS", &netns),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/opt/cni/bin"),
        ],
        &cached.to_string(),
    );
    assert_eq!(
        del.code, 0,
        "DEL with openshift-sdn's cached config: {}",
        del.stdout
    );
    assert!(!node.pod_ports().contains(&c1.host_veth));

    // A new pod never gets an adopted pod's address, and is isolated as its tenant is.
    let adopted: Vec<String> = pods
        .iter()
        .filter(|p| p.sandbox != b1.sandbox && p.sandbox != c1.sandbox)
        .map(|p| p.spec.ip.to_string())
        .collect();
    let fresh: Vec<_> = (0..3)
        .map(|i| node.pod("tenant-a", &format!("new-{i}")))
        .collect();
    for p in &fresh {
        assert!(
            !adopted.contains(&p.ip),
            "{} collides with an adopted pod",
            p.ip
        );
    }
    let a0 = first("tenant-a");
    assert!(
        fresh[0].ping(&a0.spec.ip.to_string(), 2),
        "new pod -> adopted pod of its tenant"
    );
    assert!(
        !fresh[0].ping(&first("tenant-c").spec.ip.to_string(), 1),
        "new pod -> adopted pod of another tenant"
    );
    // The first ADD filled the pool.
    assert!(
        wait_until(Duration::from_secs(10), || !node.pool_ports().is_empty()),
        "the pool was not filled after the first ADD"
    );
    drop(fresh);
    // (The new pods' DELs retire their pool ports within a second: waited for here.)
    assert_eq!(node.leases().len(), 98);

    // A restart of our agent changes no flow, and tun0 keeps its MAC.
    node.restart_unchanged();
    assert_eq!(tun0_mac(&node), tun_mac);
}

/// Runs the agent once in the node's namespace and returns its exit status and output, or
/// `None` if it was still running after 20 s (then it is stopped).
fn agent_once(node: &AgentNode, extra: &[&str]) -> Option<(std::process::ExitStatus, String)> {
    let mut child = sdn_tests::harness::without_agent_env(&mut Command::new("nsenter"))
        .arg(format!("--net=/run/netns/{}", node.ovs.netns()))
        .arg("--")
        .arg(workspace_bin("sdn-agent"))
        .args(node.agent_args())
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sdn-agent");
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            return Some((status, text));
        }
        if started.elapsed() > Duration::from_secs(20) {
            // SAFETY: kill on a pid we spawned and have not reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_node_not_as_openshift_sdn_leaves_it_is_refused_unless_forced() {
    require_root_and_ovs();
    let (node, pods) = openshift_sdn_node(1, Vec::new());
    // Another rule version, and a port nobody recorded.
    node.ovs
        .ofctl(&["add-flow", "br0", "table=253, actions=note:01.0C"]);
    node.ovs.vsctl(&[
        "add-port",
        "br0",
        "stray0",
        "--",
        "set",
        "Interface",
        "stray0",
        "type=internal",
    ]);
    let flows = node.flows();
    let (status, out) = agent_once(&node, &[]).expect("the agent refuses at once");
    assert!(!status.success(), "{out}");
    eprintln!("refused:\n{out}");
    for needle in [
        "not taken over (nothing was changed)",
        "rule version 12",
        "port stray0 on br0 has no pod record",
        "--force-takeover",
    ] {
        assert!(out.contains(needle), "{needle:?} not in:\n{out}");
    }
    // Nothing changed: openshift-sdn's rows, config, leases and records are as they were.
    assert_eq!(node.flows(), flows);
    assert!(node.dir().join("net.d").join(osdn::CNI_CONF_FILE).exists());
    assert!(!node.conf_file().exists());
    assert!(node
        .dir()
        .join("ipam")
        .join(osdn::CNI_NETWORK)
        .join(pods[0].spec.ip.to_string())
        .exists());
    assert!(!ext_ids(&node, &pods[0].host_veth).contains_key("ifname"));

    // Another plugin than our mode: refused, naming both.
    node.ovs.vsctl(&["del-port", "br0", "stray0"]);
    node.ovs
        .ofctl(&["add-flow", "br0", "table=253, actions=note:02.0D"]);
    let (status, out) = agent_once(&node, &[]).expect("the agent refuses at once");
    assert!(!status.success());
    assert!(
        out.contains("networkpolicy plugin") && out.contains("multitenant mode"),
        "{out}"
    );

    // Forced: taken over, the pods adopted, isolation kept; a pod whose VNID row is gone is
    // isolated (VNID 0xffffff: it reaches global pods only, not even its tenant's), never
    // made global.
    node.ovs
        .ofctl(&["add-flow", "br0", "table=253, actions=note:01.0C"]);
    let node = {
        drop(node);
        let (node, pods) = openshift_sdn_node(2, vec!["--force-takeover".into()]);
        node.ovs
            .ofctl(&["add-flow", "br0", "table=253, actions=note:01.0C"]);
        let of = |ns: &str| -> Vec<&WiredPod> {
            pods.iter().filter(|p| p.spec.namespace == ns).collect()
        };
        let (a, b, d) = (of("tenant-a"), of("tenant-b"), of("default"));
        let lost = a[0];
        node.ovs.ofctl(&[
            "del-flows",
            "br0",
            &format!("table=70, ip, nw_dst={}", lost.spec.ip),
        ]);
        node.start_agent();
        let log = node.log();
        assert!(
            log.contains("although its state does not match (forced)")
                && log.contains("has no VNID row in table 70"),
            "{log}"
        );
        takeover_line(&node);
        let ping = |from: &WiredPod, to: &WiredPod| {
            from.netns
                .exec(&["ping", "-c", "1", "-W", "1", &to.spec.ip.to_string()])
                .is_ok()
        };
        assert!(
            ping(a[1], d[0]) && !ping(a[1], b[0]),
            "isolation after a forced takeover"
        );
        assert_eq!(ext_ids(&node, &lost.host_veth)["vnid"], "16777215");
        assert!(
            ping(lost, d[0]) && !ping(lost, a[1]) && !ping(a[1], lost) && !ping(lost, b[0]),
            "a pod whose VNID could not be read reaches global pods only"
        );
        node
    };
    assert!(wait_until(Duration::from_secs(5), || node.agent_running()));
}

/// The rollback: a node taken over (with a pod our agent added since) is handed back with the
/// agent stopped, and openshift-sdn's own start (its rules: a br0 without its note is set up
/// afresh and every pod reattached) finds what it needs: every pod's port record, its leases,
/// its CNI config; none of our chains. The isolation matrix holds under its rows again.
#[test]
fn a_node_taken_over_is_handed_back_to_openshift_sdn() {
    require_root_and_ovs();
    let (node, pods) = openshift_sdn_node(3, Vec::new());
    // An administrator's rule in openshift-sdn's chain for them: the takeover keeps the chain.
    let admin_rule = [
        "-A",
        "OPENSHIFT-ADMIN-OUTPUT-RULES",
        "-d",
        "198.51.100.7/32",
        "-j",
        "REJECT",
    ];
    let mut argv = vec!["iptables", "-w"];
    argv.extend(admin_rule);
    node.ovs.exec_in_netns(&argv).unwrap();
    node.start_agent();
    let saved = iptables_save(&node);
    assert!(
        saved.contains("-A OPENSHIFT-ADMIN-OUTPUT-RULES -d 198.51.100.7/32 -j REJECT")
            && !saved.contains("OPENSHIFT-FIREWALL-FORWARD"),
        "an administrator's rules stay, the chains ours replace go:\n{saved}"
    );
    let added = node.pod("tenant-a", "added-by-us");
    let added_ip: Ipv4Addr = added.ip.parse().unwrap();
    // A pod that knows the gateway (its ARP cache holds tun0's MAC).
    let of =
        |ns: &str| -> Vec<&WiredPod> { pods.iter().filter(|p| p.spec.namespace == ns).collect() };
    let (warm, flushed) = (of("tenant-b")[1], of("tenant-c")[1]);
    for p in [warm, flushed] {
        assert!(p
            .netns
            .exec(&["ping", "-c", "1", "-W", "2", &GATEWAY.to_string()])
            .is_ok());
    }
    // Refused while the agent runs.
    let (status, text) = node.agent_command("hand-back-to-openshift-sdn");
    assert!(
        !status.success() && text.contains("the agent is running on this node"),
        "{text}"
    );
    node.stop_agent(libc::SIGTERM);

    let (status, text) = node.agent_command("hand-back-to-openshift-sdn");
    assert!(status.success(), "{text}");
    eprintln!("hand-back:\n{text}");
    assert!(
        text.contains(&format!("{} pods' leases written", pods.len() + 1)),
        "{text}"
    );
    let conf_dir = node.dir().join("net.d");
    assert_eq!(
        std::fs::read_to_string(conf_dir.join(osdn::CNI_CONF_FILE)).unwrap(),
        osdn::cni_conf_text(),
        "openshift-sdn's CNI config, byte for byte"
    );
    assert!(!node.conf_file().exists(), "our conflist is gone");
    // Leases as openshift-sdn's vendored host-local (v0.6.0) writes them: the sandbox alone,
    // mode 0600, no lock file.
    let leases = node.dir().join("ipam").join(osdn::CNI_NETWORK);
    for p in &pods {
        let lease = leases.join(p.spec.ip.to_string());
        assert_eq!(std::fs::read_to_string(&lease).unwrap(), p.sandbox);
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(&lease).unwrap().permissions()
            ) & 0o777,
            0o600
        );
    }
    assert_eq!(
        std::fs::read_to_string(leases.join(added_ip.to_string())).unwrap(),
        added.id
    );
    assert!(
        !leases.join("lock").exists(),
        "v0.6.0 locks the directory, makes no lock file"
    );
    assert!(!node.dir().join("ipam/sdn").exists(), "our leases are gone");
    let saved = iptables_save(&node);
    assert!(
        !saved
            .lines()
            .any(|l| l.starts_with(":SDN-") || l.contains(" -j SDN-")),
        "our chains are gone (openshift-sdn's OPENSHIFT-SDN-CANARY stays):\n{saved}"
    );
    // Running it again finds the work done.
    let (again, _) = node.agent_command("hand-back-to-openshift-sdn");
    assert!(again.success());
    // Our rows keep forwarding until openshift-sdn starts.
    let ping = |from: &WiredPod, to: Ipv4Addr| {
        from.netns
            .exec(&["ping", "-c", "1", "-W", "1", &to.to_string()])
            .is_ok()
    };
    assert!(
        ping(of("tenant-a")[0], of("tenant-a")[1].spec.ip),
        "our rows forward between the hand-back and openshift-sdn's start"
    );

    // openshift-sdn starts.
    // Each pod's namespace's VNID and bandwidth annotations, as its API would give them.
    let pod_of = |ip: Ipv4Addr| {
        if ip == added_ip {
            return (TENANTS[0].1, None);
        }
        pods.iter()
            .find(|p| p.spec.ip == ip)
            .map(|p| (p.spec.vnid, p.spec.bandwidth))
            .expect("a known pod")
    };
    let reattached = osdn::restart_node(
        &node.ovs,
        &spec(Plugin::Multitenant, NODE_IP, SUBNET),
        &[],
        &pod_of,
    )
    .expect("our note is not openshift-sdn's: it sets the node up afresh");
    assert_eq!(
        reattached.len(),
        pods.len() + 1,
        "{reattached:?}\n{}",
        node.ovs.vsctl(&[
            "--format=csv",
            "--data=bare",
            "--columns=name,external_ids",
            "list",
            "Interface"
        ])
    );
    let flows = node.flows().join("\n");
    assert!(flows.contains("note:01.0d"), "{flows}");
    let (a, b, d) = (of("tenant-a"), of("tenant-b"), of("default"));
    assert!(
        ping(a[0], a[1].spec.ip),
        "same tenant under openshift-sdn again"
    );
    assert!(
        ping(a[0], added_ip),
        "the pod our agent added, reattached by openshift-sdn"
    );
    assert!(
        ping(a[0], d[0].spec.ip) && ping(d[0], b[0].spec.ip),
        "global"
    );
    assert!(
        !ping(a[0], b[0].spec.ip) && !ping(b[0], a[1].spec.ip),
        "other tenants stay isolated"
    );
    assert!(ping(b[0], GATEWAY), "the gateway");
    // openshift-sdn's start made tun0 afresh, with a MAC of the kernel's choosing: a pod that
    // had the old one cached reaches its gateway again only once that entry is stale and
    // re-resolved (the rollback's known gap, in the guide).
    assert!(
        !ping(warm, GATEWAY) && !ping(flushed, GATEWAY),
        "pods that had the old gateway MAC cached lose the gateway at openshift-sdn's start"
    );
    // The guide's remedy: flushing the pod's neighbour entry for the gateway.
    flushed
        .netns
        .exec(&["ip", "neigh", "flush", &GATEWAY.to_string()])
        .unwrap();
    assert!(ping(flushed, GATEWAY), "after ip neigh flush");
    let since = Instant::now();
    let back = wait_until(Duration::from_secs(120), || ping(warm, GATEWAY));
    eprintln!(
        "after openshift-sdn's start, a pod with the old gateway MAC cached reached the gateway again after {:.1} s",
        since.elapsed().as_secs_f64()
    );
    assert!(back, "the pod never reached its gateway again");
    assert!(
        iptables_save(&node).contains("-A OPENSHIFT-ADMIN-OUTPUT-RULES -d 198.51.100.7/32"),
        "the administrator's rule is still there for openshift-sdn"
    );
    // openshift-sdn deletes pods: its release (v0.6.0's ReleaseByID, by sandbox) frees the
    // address of a pod it adopted back from us, and of the pod our agent had added.
    for (id, ip) in [
        (pods[0].sandbox.as_str(), pods[0].spec.ip),
        (added.id.as_str(), added_ip),
    ] {
        let removed = osdn::host_local_release_by_id(&leases, id);
        assert_eq!(removed, vec![ip.to_string()], "openshift-sdn's DEL of {id}");
        assert!(!leases.join(ip.to_string()).exists());
    }
    // (The pod's DEL would go to openshift-sdn now; the test only removes its namespace.)
    added.forget();
}

/// A node openshift-sdn ran (`plugin`) in a cluster whose API (the fake API server, in the
/// node's namespace) holds its HostSubnet, the tenants' Namespaces and NetNamespaces (plus
/// `also`), and its pods (labelled `app=<name>`), with our agent in `mode` pointed at it (not
/// started). Returns the node, its pods, the API server and a directory to remove.
fn kubernetes_node(
    plugin: Plugin,
    mode: &'static str,
    also: &[(&str, u32)],
) -> (
    AgentNode,
    Vec<WiredPod>,
    sdn_tests::fakeapi::FakeApi,
    std::path::PathBuf,
) {
    let dir = std::env::temp_dir().join(sdn_tests::harness::unique_name("osdnkube"));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let (node, pods) = openshift_sdn_node_with(
        plugin,
        mode,
        2,
        vec![
            "--cluster-state".into(),
            "kubernetes".into(),
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--host-subnet-wait".into(),
            "30".into(),
        ],
    );
    let fake = sdn_tests::fakeapi::FakeApi::start_in_netns(node.ovs.netns(), "127.0.0.1:6443");
    fake.kubeconfig(&kubeconfig).unwrap();
    for (ns, netid) in TENANTS.iter().chain(also) {
        fake.put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
            .unwrap();
        fake.put(
            json!({"apiVersion": "network.openshift.io/v1", "kind": "NetNamespace",
            "metadata": {"name": ns}, "netname": ns, "netid": netid}),
        )
        .unwrap();
    }
    fake.put(
        json!({"apiVersion": "network.openshift.io/v1", "kind": "HostSubnet",
        "metadata": {"name": "node-a"}, "host": "node-a", "hostIP": "192.168.111.10",
        "subnet": SUBNET}),
    )
    .unwrap();
    for p in &pods {
        fake.put(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": p.spec.name, "namespace": p.spec.namespace,
                         "labels": {"app": p.spec.name}},
            "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running", "podIP": p.spec.ip.to_string()}}))
            .unwrap();
    }
    (node, pods, fake, dir)
}

/// The takeover line of the agent's log, asserting every pod was adopted and named.
fn assert_all_adopted_and_named(node: &AgentNode, pods: &[WiredPod]) {
    let line = takeover_line(node);
    assert!(
        line.contains(&format!("pods={}", pods.len())) && line.contains("namespace_unknown=0"),
        "{line}"
    );
    for p in pods {
        let ids = ext_ids(node, &p.host_veth);
        assert_eq!(ids["namespace"], p.spec.namespace, "{ids:?}");
        assert_eq!(ids["pod"], p.spec.name, "{ids:?}");
    }
}

/// The log line saying the takeover is done (written just after the start-up reconcile's, which
/// `start_agent` waits for).
fn takeover_line(node: &AgentNode) -> String {
    let find = || {
        node.log()
            .lines()
            .find(|l| l.contains("took the node over from openshift-sdn"))
            .map(str::to_string)
    };
    wait_until(Duration::from_secs(10), || find().is_some());
    find().unwrap_or_else(|| panic!("no takeover line:\n{}", node.log()))
}

fn pings(from: &WiredPod, to: &WiredPod) -> bool {
    from.netns
        .exec(&["ping", "-c", "1", "-W", "1", &to.spec.ip.to_string()])
        .is_ok()
}

/// In Kubernetes mode an adopted pod gets its namespace and name from this node's pods in the
/// API (by address), where a standalone node could only guess the namespace from the VNID: here
/// two namespaces share tenant-a's VNID, and every pod is still named.
#[test]
fn in_kubernetes_mode_adopted_pods_are_named_from_the_api() {
    require_root_and_ovs();
    let (node, pods, fake, dir) = kubernetes_node(
        Plugin::Multitenant,
        "multitenant",
        &[("tenant-a-too", TENANTS[0].1)],
    );
    node.start_agent();
    assert_all_adopted_and_named(&node, &pods);
    let of =
        |ns: &str| -> Vec<&WiredPod> { pods.iter().filter(|p| p.spec.namespace == ns).collect() };
    let (a, b) = (of("tenant-a"), of("tenant-b"));
    assert!(
        pings(a[0], a[1]) && !pings(a[0], b[0]),
        "isolation after a takeover in Kubernetes mode"
    );
    node.stop_agent(libc::SIGTERM);
    drop(fake);
    let _ = std::fs::remove_dir_all(&dir);
}

/// openshift-sdn's networkpolicy plugin (the default of OpenShift 4) taken over by our agent in
/// networkpolicy mode: the pods adopted and named, and the cluster's NetworkPolicies applied to
/// them (tenant-b denies all ingress: nobody reaches its pods; tenant-a has no policy: everybody
/// reaches its pods).
#[test]
fn a_networkpolicy_node_is_taken_over_and_its_policies_hold() {
    require_root_and_ovs();
    let (node, pods, fake, dir) = kubernetes_node(Plugin::NetworkPolicy, "networkpolicy", &[]);
    fake.put(
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "deny-ingress", "namespace": "tenant-b"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}),
    )
    .unwrap();
    node.start_agent();
    assert_all_adopted_and_named(&node, &pods);
    let of =
        |ns: &str| -> Vec<&WiredPod> { pods.iter().filter(|p| p.spec.namespace == ns).collect() };
    let (a, b, c) = (of("tenant-a"), of("tenant-b"), of("tenant-c"));
    assert!(pings(a[0], a[1]), "tenant-a -> tenant-a (no policy)");
    assert!(
        pings(b[0], a[0]),
        "tenant-b -> tenant-a (no policy in tenant-a)"
    );
    assert!(
        pings(c[0], a[1]),
        "tenant-c -> tenant-a (no policy in tenant-a)"
    );
    assert!(
        !pings(a[0], b[0]),
        "tenant-a -> tenant-b (tenant-b denies all ingress)"
    );
    assert!(
        !pings(b[1], b[0]),
        "tenant-b -> tenant-b (deny all ingress)"
    );
    node.stop_agent(libc::SIGTERM);
    drop(fake);
    let _ = std::fs::remove_dir_all(&dir);
}
