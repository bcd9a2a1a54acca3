//! Pod bandwidth limits end to end: netns pods through the real shim with
//! `runtimeConfig.bandwidth`, a real TCP transfer measured in both directions, the OVS rows
//! shown, and DEL and GC leaving no QoS row behind; in Kubernetes mode (fake API server) the
//! pod annotations setting the rows; and on a dual-stack node the same limits on IPv6 transfers.
//!
//! Tolerance: a shaped direction must measure within ±30% of its limit, and below half of an
//! unshaped control transfer between the same kind of pods.
//!
//! The test node runs the netdev (userspace) datapath, where the agent polices pod egress with
//! an OpenFlow 1.3 meter (kbps, one drop band) applied by the pod's table-20 IP row, not with
//! `Interface.ingress_policing_rate` (a tc `basic` classifier and `police` action, which this
//! kernel lacks: "adding cls_basic policing action failed"). So the egress check always runs;
//! the meter is shown with `ovs-ofctl dump-meters` and DEL, GC and restarts remove it.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use sdn_tests::harness::{spawn_in_netns, Netns};
use sdn_tests::node::{AgentNode, NodeOptions};
use serde_json::{json, Value};

const MB: usize = 1 << 20;

struct BwPod {
    ns: Netns,
    id: String,
    ip: IpAddr,
    /// Its IPv6 address on a dual-stack node.
    ip6: Option<Ipv6Addr>,
}

fn conf(node: &AgentNode, bandwidth: Option<Value>) -> Value {
    let mut c = node.netconf("1.0.0");
    if let Some(bw) = bandwidth {
        c["capabilities"] = json!({"bandwidth": true});
        c["runtimeConfig"] = json!({ "bandwidth": bw });
    }
    c
}

fn add(node: &AgentNode, name: &str, bandwidth: Option<Value>) -> BwPod {
    let ns = Netns::new("bwpod");
    let id = format!("{}-{name}", ns.name());
    let out = node.cni(
        &[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", &id),
            ("CNI_NETNS", &ns.path()),
            ("CNI_IFNAME", "eth0"),
            (
                "CNI_ARGS",
                &format!("K8S_POD_NAMESPACE=default;K8S_POD_NAME={name}"),
            ),
        ],
        &conf(node, bandwidth),
    );
    assert_eq!(out.code, 0, "ADD {name}: {}\n{}", out.stdout, node.log());
    let ip = out.json["ips"][0]["address"]
        .as_str()
        .and_then(|a| a.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no IP in {}", out.stdout));
    let ip6 = out.json["ips"][1]["address"]
        .as_str()
        .and_then(|a| a.split('/').next())
        .and_then(|a| a.parse().ok());
    BwPod { ns, id, ip, ip6 }
}

fn del(node: &AgentNode, p: &BwPod) {
    let out = node.cni(
        &[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", &p.id),
            ("CNI_NETNS", &p.ns.path()),
            ("CNI_IFNAME", "eth0"),
        ],
        &node.netconf("1.0.0"),
    );
    assert_eq!(out.code, 0, "DEL {}: {}", p.id, out.stdout);
}

/// Sends `bytes` from `from` to `to` over TCP; returns the receiver's rate in Mbit/s (first to
/// last byte, so connection set-up is not counted).
fn transfer(from: &BwPod, to: &BwPod, bytes: usize) -> f64 {
    transfer_to(from, to, to.ip, bytes)
}

/// [`transfer`] to `to`'s address `ip` (its IPv6 one, on a dual-stack node).
fn transfer_to(from: &BwPod, to: &BwPod, ip: IpAddr, bytes: usize) -> f64 {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let receiver = spawn_in_netns(&to.ns.path(), move || {
        let l = TcpListener::bind(SocketAddr::new(ip, 0)).expect("bind");
        ready_tx
            .send(l.local_addr().expect("addr").port())
            .expect("send port");
        let (mut s, _) = l.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(15)))
            .expect("timeout");
        let mut buf = vec![0u8; 64 * 1024];
        let mut got = 0;
        let mut first = None;
        while got < bytes {
            let n = s.read(&mut buf).expect("read");
            assert!(n > 0, "sender closed after {got} bytes");
            first.get_or_insert_with(Instant::now);
            got += n;
        }
        let secs = first.map_or(0.0, |f| f.elapsed().as_secs_f64());
        s.write_all(b"k").expect("ack");
        (got as f64) * 8.0 / secs / 1e6
    });
    let port = ready_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("receiver ready");
    spawn_in_netns(&from.ns.path(), move || {
        let mut s = TcpStream::connect_timeout(&SocketAddr::new(ip, port), Duration::from_secs(5))
            .expect("connect");
        let chunk = vec![0x5au8; 64 * 1024];
        let mut sent = 0;
        while sent < bytes {
            let n = chunk.len().min(bytes - sent);
            s.write_all(&chunk[..n]).expect("write");
            sent += n;
        }
        let mut ack = [0u8; 1];
        s.set_read_timeout(Some(Duration::from_secs(15)))
            .expect("timeout");
        s.read_exact(&mut ack).expect("ack");
    })
    .join()
    .expect("sender");
    receiver.join().expect("receiver")
}

fn qos_rows(node: &AgentNode) -> Vec<String> {
    node.ovs
        .vsctl(&["--columns=_uuid", "--bare", "list", "qos"])
        .lines()
        .chain(
            node.ovs
                .vsctl(&["--columns=_uuid", "--bare", "list", "queue"])
                .lines(),
        )
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// The pods' egress meters, one line per meter (its config and band joined).
fn meter_lines(node: &AgentNode) -> Vec<String> {
    node.egress_meters()
}

fn within(measured: f64, limit: f64) -> bool {
    (limit * 0.7..=limit * 1.3).contains(&measured)
}

#[test]
fn bandwidth_limits_shape_real_transfers_and_are_removed() {
    let node = AgentNode::start(NodeOptions {
        mode: "subnet",
        ..Default::default()
    });
    // a: ingress 10 Mbit/s, egress 20 Mbit/s (its 200 kbit egress burst is raised to 200 ms of
    // the rate, 4 Mbit, for the meter); b, c: unshaped.
    let a = add(
        &node,
        "a",
        Some(json!({"ingressRate": 10_000_000, "ingressBurst": 100_000,
                    "egressRate": 20_000_000, "egressBurst": 200_000})),
    );
    let b = add(&node, "b", None);
    let c = add(&node, "c", None);

    eprintln!(
        "--- ovs-vsctl list qos\n{}",
        node.ovs.vsctl(&["list", "qos"])
    );
    eprintln!(
        "--- ovs-vsctl list queue\n{}",
        node.ovs.vsctl(&["list", "queue"])
    );
    let veth = node.ovs.vsctl(&[
        "--bare",
        "--columns=name",
        "find",
        "interface",
        &format!("external_ids:sandbox={}", a.id),
    ]);
    let veth = veth.trim();
    eprintln!(
        "--- interface {veth}: external_ids:meter={} ingress_policing_rate={}; port qos={}",
        node.ovs
            .vsctl(&["get", "interface", veth, "external_ids:meter"])
            .trim(),
        node.ovs
            .vsctl(&["get", "interface", veth, "ingress_policing_rate"])
            .trim(),
        node.ovs.vsctl(&["get", "port", veth, "qos"]).trim(),
    );
    // netdev: the egress limit is a meter, not interface policing.
    assert_eq!(
        node.ovs
            .vsctl(&["get", "interface", veth, "ingress_policing_rate"])
            .trim(),
        "0"
    );
    let meter: u32 = node
        .ovs
        .vsctl(&["get", "interface", veth, "external_ids:meter"])
        .trim()
        .trim_matches('"')
        .parse()
        .expect("external_ids:meter is a meter id");
    let meters = meter_lines(&node);
    eprintln!("--- ovs-ofctl dump-meters br0\n{}", meters.join("\n"));
    assert_eq!(
        meters,
        vec![format!(
            "meter={meter} kbps burst bands= type=drop rate=20000 burst_size=4000"
        )]
    );
    let flows = node.ovs.ofctl(&["dump-flows", "br0", "table=20"]);
    assert!(
        flows.contains(&format!("actions=meter:{meter},")),
        "a's table-20 row applies its meter: {flows}"
    );
    assert_eq!(
        node.ovs
            .vsctl(&[
                "get",
                "qos",
                node.ovs.vsctl(&["get", "port", veth, "qos"]).trim(),
                "type"
            ])
            .trim(),
        "linux-htb"
    );
    assert_eq!(qos_rows(&node).len(), 2, "one QoS and one Queue row");

    let control = transfer(&b, &c, 8 * MB);
    let ingress = transfer(&b, &a, 5 * MB / 2);
    let egress = transfer(&a, &b, 5 * MB);
    eprintln!("control b->c {control:.1} Mbit/s; a ingress (limit 10) {ingress:.1} Mbit/s; a egress (limit 20) {egress:.1} Mbit/s");

    assert!(
        within(ingress, 10.0),
        "ingress {ingress:.1} Mbit/s not within 30% of 10"
    );
    assert!(
        ingress < control / 2.0,
        "ingress {ingress:.1} not clearly below control {control:.1}"
    );
    assert!(
        within(egress, 20.0),
        "egress {egress:.1} Mbit/s not within 30% of 20"
    );
    assert!(
        egress < control / 2.0,
        "egress {egress:.1} not clearly below control {control:.1}"
    );

    // A meter the switch lost (deleted by hand; OVS drops the flows using it too) is re-added,
    // with a's flows, when the agent reconciles (a restart does it at once).
    node.ovs
        .ofctl(&["del-meter", "br0", &format!("meter={meter}")]);
    assert!(meter_lines(&node).is_empty());
    node.stop_agent(libc::SIGTERM);
    node.start_agent();
    assert_eq!(
        meter_lines(&node),
        vec![format!(
            "meter={meter} kbps burst bands= type=drop rate=20000 burst_size=4000"
        )],
        "the restarted agent re-adds a's meter"
    );
    let flows = node.ovs.ofctl(&["dump-flows", "br0", "table=20"]);
    assert!(
        flows.contains(&format!("actions=meter:{meter},")),
        "a's metered row is back: {flows}"
    );

    // DEL removes a's rows and its meter.
    del(&node, &a);
    assert!(
        qos_rows(&node).is_empty(),
        "QoS rows after DEL: {:?}",
        qos_rows(&node)
    );
    assert!(
        meter_lines(&node).is_empty(),
        "meters after DEL: {:?}",
        meter_lines(&node)
    );

    // GC removes a pod not in the valid list, and its rows. This pod's limits come as
    // containerd 1.6 sends them: Go field names, the unset direction zero, burst MaxUint32.
    let d = add(
        &node,
        "d",
        Some(
            json!({"IngressRate": 5_000_000u64, "IngressBurst": 4_294_967_295u64,
                    "EgressRate": 0, "EgressBurst": 0}),
        ),
    );
    assert_eq!(qos_rows(&node).len(), 2);
    // And an orphan row no pod of the agent's table owns (as a crash could leave).
    node.ovs.vsctl(&[
        "create",
        "qos",
        "type=linux-htb",
        "external_ids:sandbox=ghost",
        "external_ids:ifname=eth0",
    ]);
    assert_eq!(qos_rows(&node).len(), 3);
    let out = node.cni(&[("CNI_COMMAND", "GC")], &{
        let mut cfg = node.netconf("1.1.0");
        cfg["cni.dev/valid-attachments"] = json!([{"containerID": b.id, "ifname": "eth0"},
                                               {"containerID": c.id, "ifname": "eth0"}]);
        cfg
    });
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(
        qos_rows(&node).is_empty(),
        "QoS rows after GC: {:?}",
        qos_rows(&node)
    );

    // Unreasonable values fail the ADD with the key named, leaving nothing.
    let ports = node.pod_ports().len();
    let ns = Netns::new("bwbad");
    let out = node.cni(
        &[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", &format!("{}-bad", ns.name())),
            ("CNI_NETNS", &ns.path()),
            ("CNI_IFNAME", "eth0"),
        ],
        &conf(&node, Some(json!({"egressRate": 500}))),
    );
    assert_ne!(out.code, 0);
    assert!(
        out.stdout.contains("runtimeConfig.bandwidth.egressRate"),
        "{}",
        out.stdout
    );
    eprintln!("bad value error: {}", out.stdout);
    assert_eq!(node.pod_ports().len(), ports);
    assert_eq!(node.leases().len(), 2, "b and c only");

    // A restart cleans up the rows of a pod that died while the agent was down, and orphans.
    let e = add(
        &node,
        "e",
        Some(json!({"ingressRate": 5_000_000, "egressRate": 5_000_000})),
    );
    assert_eq!(meter_lines(&node).len(), 1, "e's meter");
    // A stray meter no pod records (as a crash between meter and port could leave).
    node.ovs.ofctl(&[
        "add-meter",
        "br0",
        "meter=70000,kbps,burst,band=type=drop,rate=1000,burst_size=100",
    ]);
    node.stop_agent(libc::SIGKILL);
    let e_id = e.id.clone();
    drop(e.ns); // the pod's netns (and so its veth) goes
    node.ovs.vsctl(&[
        "create",
        "qos",
        "type=linux-htb",
        "external_ids:sandbox=ghost2",
        "external_ids:ifname=eth0",
    ]);
    assert_eq!(qos_rows(&node).len(), 3);
    node.start_agent();
    assert!(
        qos_rows(&node).is_empty(),
        "QoS rows after restart: {:?}",
        qos_rows(&node)
    );
    assert!(
        meter_lines(&node).is_empty(),
        "meters after restart: {:?}",
        meter_lines(&node)
    );
    eprintln!("restart removed the rows and meter of {e_id} and an orphan");

    for p in [&b, &c, &d] {
        del(&node, p);
    }
}

/// Kubernetes mode: the pod annotations (from the API server, via the agent's pod cache) set
/// the limits; an unreasonable annotation fails the ADD naming it; DEL removes the rows.
#[test]
fn kubernetes_annotations_set_the_limits() {
    use sdn_tests::cluster::{node_name, Cluster};
    let (c, plane) = Cluster::start_kubernetes(1, &NodeOptions::default());
    let node = c.node(1);
    let pod = |name: &str, ingress: &str, egress: &str| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "default", "annotations": {
                   "kubernetes.io/ingress-bandwidth": ingress,
                   "kubernetes.io/egress-bandwidth": egress}},
               "spec": {"nodeName": node_name(1), "containers": [{"name": "c", "image": "i"}]}})
    };
    plane.fake.put(pod("shaped", "5M", "3M")).unwrap();
    plane.fake.put(pod("bad", "5M", "100P")).unwrap();
    // The agent's pod cache follows a watch.
    std::thread::sleep(Duration::from_millis(1000));

    let p = node.pod("default", "shaped");
    let veth = node.ovs.vsctl(&[
        "--bare",
        "--columns=name",
        "find",
        "interface",
        &format!("external_ids:sandbox={}", p.id),
    ]);
    let veth = veth.trim();
    let qos = node.ovs.vsctl(&["get", "port", veth, "qos"]);
    eprintln!(
        "--- ovs-vsctl list qos\n{}",
        node.ovs.vsctl(&["list", "qos"])
    );
    assert_eq!(
        node.ovs
            .vsctl(&["get", "qos", qos.trim(), "other_config:max-rate"])
            .trim(),
        "\"5000000\""
    );
    let meter = node
        .ovs
        .vsctl(&["get", "interface", veth, "external_ids:meter"]);
    let meter = meter.trim().trim_matches('"');
    assert_eq!(
        meter_lines(node),
        vec![format!(
            "meter={meter} kbps burst bands= type=drop rate=3000 burst_size=600"
        )],
        "egress-bandwidth 3M is meter {meter}"
    );

    let ns = Netns::new("bwbad");
    let out = node.add(
        &format!("{}-bad", ns.name()),
        &ns.path(),
        "K8S_POD_NAMESPACE=default;K8S_POD_NAME=bad",
    );
    assert_ne!(out.code, 0, "{}", out.stdout);
    assert!(
        out.stdout
            .contains("kubernetes.io/egress-bandwidth=\\\"100P\\\""),
        "{}",
        out.stdout
    );
    eprintln!("bad annotation error: {}", out.stdout);

    drop(p);
    assert!(
        qos_rows(node).is_empty(),
        "QoS rows after DEL: {:?}",
        qos_rows(node)
    );
    assert!(meter_lines(node).is_empty(), "meters after DEL");
}

#[test]
fn bandwidth_limits_hold_for_ipv6_on_a_dual_stack_node() {
    let node = AgentNode::start(NodeOptions::default().dual_stack());
    let a = add(
        &node,
        "a",
        Some(json!({"ingressRate": 10_000_000, "ingressBurst": 100_000,
                    "egressRate": 20_000_000, "egressBurst": 200_000})),
    );
    let b = add(&node, "b", None);
    let c = add(&node, "c", None);
    let v6 = |p: &BwPod| {
        IpAddr::V6(
            p.ip6
                .unwrap_or_else(|| panic!("{} has no IPv6 address", p.id)),
        )
    };
    // The meter applies to the pod's IPv6 row as to its IPv4 one.
    let meter: u32 = node
        .ovs
        .vsctl(&[
            "get",
            "interface",
            node.port_of(&a.id).as_str(),
            "external_ids:meter",
        ])
        .trim()
        .trim_matches('"')
        .parse()
        .expect("external_ids:meter is a meter id");
    let flows = node.ovs.ofctl(&["dump-flows", "br0", "table=20"]);
    let metered: Vec<&str> = flows
        .lines()
        .filter(|l| l.contains(&format!("actions=meter:{meter},")))
        .collect();
    assert!(
        metered.iter().any(|l| l.contains("ipv6"))
            && metered
                .iter()
                .any(|l| l.contains(" ip,") || l.contains(",ip,")),
        "a's IPv4 and IPv6 rows apply its meter: {flows}"
    );

    let control = transfer_to(&b, &c, v6(&c), 8 * MB);
    let ingress = transfer_to(&b, &a, v6(&a), 5 * MB / 2);
    let egress = transfer_to(&a, &b, v6(&b), 5 * MB);
    eprintln!("IPv6: control b->c {control:.1} Mbit/s; a ingress (limit 10) {ingress:.1} Mbit/s; a egress (limit 20) {egress:.1} Mbit/s");
    assert!(
        within(ingress, 10.0),
        "IPv6 ingress {ingress:.1} Mbit/s not within 30% of 10"
    );
    assert!(
        within(egress, 20.0),
        "IPv6 egress {egress:.1} Mbit/s not within 30% of 20"
    );
    assert!(
        ingress < control / 2.0 && egress < control / 2.0,
        "IPv6 shaped transfers not clearly below control {control:.1}"
    );
    del(&node, &a);
    assert!(meter_lines(&node).is_empty(), "meters after DEL");
    assert!(qos_rows(&node).is_empty(), "QoS rows after DEL");
    del(&node, &b);
    del(&node, &c);
    node.assert_no_pod_leftovers();
}
