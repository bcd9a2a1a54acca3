//! Host ports end to end: a network config carrying `runtimeConfig.portMappings` (as a runtime
//! passes it) through the real shim and agent; TCP to the node's addresses reaches the pod's
//! listener through tun0, conflicts fail the ADD, DEL and restarts keep the rules exact. On a
//! dual-stack node the same in IPv6: `ip6tables` DNATs to the pod's IPv6 address for the node's
//! IPv6 addresses, the agent's relay for `[::1]`, `hostIP` limiting a mapping to its family.

use std::net::{SocketAddr, SocketAddrV4};
use std::time::Duration;

use sdn_tests::harness::{wait_until, Netns};
use sdn_tests::node::{workspace_bin, AgentNode, CniOutcome, NodeOptions};
use sdn_tests::podman::Podman;
use sdn_tests::probe::{
    tcp6_echo_server, tcp_echo_server, tcp_probe, tcp_probe_to, udp6_echo_server, udp_probe_to,
};
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(3);
/// A node address besides the gateway, added to the OVS netns (the agent's namespace).
const NODE_ADDR: &str = "192.168.111.10";

fn conf(node: &AgentNode, mappings: &Value) -> Value {
    let mut c = node.netconf("1.0.0");
    c["capabilities"] = json!({"portMappings": true});
    c["runtimeConfig"] = json!({ "portMappings": &mappings });
    c
}

fn add(node: &AgentNode, id: &str, ns: &Netns, pod: &str, mappings: &Value) -> CniOutcome {
    let args = format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod}");
    node.cni(
        &[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", id),
            ("CNI_NETNS", &ns.path()),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", &args),
            ("CNI_PATH", "/opt/cni/bin"),
        ],
        &conf(node, mappings),
    )
}

fn del(node: &AgentNode, id: &str, ns: &Netns) -> CniOutcome {
    node.cni(
        &[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", id),
            ("CNI_NETNS", &ns.path()),
            ("CNI_IFNAME", "eth0"),
        ],
        &node.netconf("1.0.0"),
    )
}

fn ip_of(out: &CniOutcome) -> String {
    out.json["ips"][0]["address"]
        .as_str()
        .and_then(|a| a.split('/').next())
        .unwrap_or_else(|| panic!("no IP in {}", out.stdout))
        .to_string()
}

fn nat(node: &AgentNode) -> String {
    nat_saved(node, "iptables-save")
}

fn nat6(node: &AgentNode) -> String {
    nat_saved(node, "ip6tables-save")
}

/// `save -t nat` in the node namespace (`iptables-save` or `ip6tables-save`).
fn nat_saved(node: &AgentNode, save: &str) -> String {
    let text = node
        .ovs
        .exec_in_netns(&[save, "-t", "nat"])
        .unwrap_or_else(|e| panic!("{save}: {e}"));
    // Without the "# Generated ... on <time>" lines, to compare two saves.
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// CNI CHECK of attachment `id` in `ns` with its ADD result `prev`.
fn check(node: &AgentNode, id: &str, ns: &Netns, prev: &Value) -> CniOutcome {
    let mut c = conf(node, &json!([]));
    c["prevResult"] = prev.clone();
    node.cni(
        &[
            ("CNI_COMMAND", "CHECK"),
            ("CNI_CONTAINERID", id),
            ("CNI_NETNS", &ns.path()),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/opt/cni/bin"),
        ],
        &c,
    )
}

/// The per-pod chain `SDN-HOSTPORTS` jumps to for sandbox `id`, in a nat save.
fn pod_chain(rules: &str, id: &str) -> String {
    rules
        .lines()
        .find(|l| l.starts_with("-A SDN-HOSTPORTS") && l.contains(id))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or_else(|| panic!("no jump to {id}'s chain in {rules}"))
        .to_string()
}

fn addr(ip: &str, port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(ip.parse().unwrap(), port)
}

#[test]
fn hostports_reach_the_pod_and_follow_its_lifecycle() {
    let node = AgentNode::start(NodeOptions::default());
    let ovs_ns = node.ovs.netns().to_string();
    // (On lo: the test kernel may lack the dummy link type.)
    node.ovs
        .exec_in_netns(&["ip", "addr", "add", &format!("{NODE_ADDR}/32"), "dev", "lo"])
        .unwrap();

    // Pod "web": containerd's capitalised keys; 18080 -> 8080 on every address, 18081 only on
    // the node address.
    let web_ns = Netns::new("hpweb");
    let web_id = format!("{}-web", web_ns.name());
    let out = add(
        &node,
        &web_id,
        &web_ns,
        "web",
        &json!([
            {"HostPort": 18080, "ContainerPort": 8080, "Protocol": "TCP"},
            {"HostPort": 18081, "ContainerPort": 8080, "Protocol": "tcp", "HostIP": NODE_ADDR},
        ]),
    );
    assert_eq!(out.code, 0, "ADD web: {}\n{}", out.stdout, node.log());
    let web_ip = ip_of(&out);
    let web_result = out.json.clone();
    let _server = tcp_echo_server(web_ns.name(), 8080);

    // A client pod (podman's camelCase keys, a UDP mapping on the same port number: no conflict).
    let client_ns = Netns::new("hpcli");
    let client_id = format!("{}-client", client_ns.name());
    let out = add(
        &node,
        &client_id,
        &client_ns,
        "client",
        &json!([{"hostPort": 18080, "containerPort": 53, "protocol": "udp"}]),
    );
    assert_eq!(out.code, 0, "ADD client: {}\n{}", out.stdout, node.log());

    let rules = nat(&node);
    assert!(rules.contains(":SDN-HOSTPORTS"), "{rules}");
    assert!(
        rules.contains(&format!("--comment \"default/web {web_id}\"")),
        "{rules}"
    );
    assert!(
        rules.contains(&format!("--to-destination {web_ip}:8080")),
        "{rules}"
    );
    assert!(
        rules.contains(&format!("-d {NODE_ADDR}/32 -p tcp")),
        "{rules}"
    );
    assert_eq!(rules.matches("-j SDN-HOSTPORTS").count(), 2, "{rules}");
    assert_eq!(rules.matches("-j SDN-HP-MASQ").count(), 1, "{rules}");

    let reach = |from: &str, ip: &str, port: u16| tcp_probe(from, addr(ip, port), TIMEOUT);
    // The node's own addresses from the node with a cold ARP cache: the kernel's ARP request
    // on tun0 must carry the gateway address as its sender (table 0 drops any other).
    let cold_arp = || {
        node.ovs
            .exec_in_netns(&["ip", "neigh", "flush", "dev", "tun0"])
            .unwrap();
    };
    let check_all = |when: &str| {
        cold_arp();
        assert!(
            reach(&ovs_ns, NODE_ADDR, 18080),
            "{when}: node address, cold ARP"
        );
        cold_arp();
        assert!(
            reach(&ovs_ns, NODE_ADDR, 18081),
            "{when}: hostIP mapping, cold ARP"
        );
        cold_arp();
        assert!(
            reach(&ovs_ns, "127.0.0.1", 18080),
            "{when}: 127.0.0.1:18080"
        );
        assert!(reach(&ovs_ns, NODE_ADDR, 18080), "{when}: node address");
        assert!(
            reach(&ovs_ns, "10.128.0.1", 18080),
            "{when}: gateway address"
        );
        assert!(reach(&ovs_ns, NODE_ADDR, 18081), "{when}: hostIP mapping");
        assert!(
            !reach(&ovs_ns, "127.0.0.1", 18081),
            "{when}: hostIP mapping on 127.0.0.1"
        );
        assert!(
            reach(client_ns.name(), NODE_ADDR, 18080),
            "{when}: other pod via node addr"
        );
        assert!(reach(web_ns.name(), NODE_ADDR, 18080), "{when}: hairpin");
    };
    check_all("after ADD");

    // A second pod asking for a taken port fails clearly and leaves nothing.
    let ports_before = node.pod_ports();
    let leases_before = node.leases();
    let dup_ns = Netns::new("hpdup");
    let dup_id = format!("{}-dup", dup_ns.name());
    let out = add(
        &node,
        &dup_id,
        &dup_ns,
        "dup",
        &json!([{"hostPort": 18081, "containerPort": 80}]),
    );
    assert_ne!(out.code, 0, "duplicate hostPort accepted: {}", out.stdout);
    let msg = out.json["msg"].as_str().unwrap_or_default();
    assert!(
        msg.contains("18081/tcp") && msg.contains("default/web") && msg.contains(&web_id),
        "{}",
        out.stdout
    );
    assert_eq!(node.pod_ports(), ports_before);
    assert_eq!(node.leases(), leases_before);
    assert!(!nat(&node).contains(&dup_id));
    // A bad entry is named.
    let out = add(
        &node,
        &dup_id,
        &dup_ns,
        "dup",
        &json!([{"hostPort": 99999, "containerPort": 80}]),
    );
    assert_ne!(out.code, 0);
    assert!(out.stdout.contains("portMappings[0]"), "{}", out.stdout);
    // An IPv6 hostIP on this IPv4-only node can never be served: refused, nothing left.
    let out = add(
        &node,
        &dup_id,
        &dup_ns,
        "dup",
        &json!([{"hostPort": 18090, "containerPort": 80, "hostIP": "::"}]),
    );
    assert_ne!(out.code, 0, "{}", out.stdout);
    assert!(out.stdout.contains("no IPv6 network"), "{}", out.stdout);
    assert_eq!(node.pod_ports(), ports_before);
    assert_eq!(node.leases(), leases_before);

    // CHECK sees the rules; a flushed pod chain is drift (the restart below repairs it).
    let check = || check(&node, &web_id, &web_ns, &web_result);
    let out = check();
    assert_eq!(out.code, 0, "CHECK: {}", out.stdout);
    let web_chain = pod_chain(&rules, &web_id);
    node.ovs
        .exec_in_netns(&["iptables", "-t", "nat", "-F", &web_chain])
        .unwrap();
    let out = check();
    assert!(
        out.code != 0 && out.stdout.contains("host port rules missing"),
        "{}",
        out.stdout
    );

    // The agent restarts: the rules stay (re-created from the ports' external_ids), exactly.
    node.stop_agent(libc::SIGTERM);
    // A stale pod chain (of a pod deleted while the agent was down) goes at start-up.
    node.ovs
        .exec_in_netns(&["iptables", "-t", "nat", "-N", "SDN-HP-00000000DEADBEEF"])
        .unwrap();
    node.start_agent();
    assert_eq!(nat(&node), rules, "rules changed over a restart");
    check_all("after restart");
    // The registry came back too: the port is still taken.
    let out = add(
        &node,
        &dup_id,
        &dup_ns,
        "dup",
        &json!([{"hostPort": 18080, "containerPort": 80}]),
    );
    assert_ne!(
        out.code, 0,
        "taken port accepted after restart: {}",
        out.stdout
    );

    // DEL removes exactly web's chain and jump.
    let out = del(&node, &web_id, &web_ns);
    assert_eq!(out.code, 0, "DEL web: {}", out.stdout);
    let after = nat(&node);
    assert!(!after.contains(&web_id), "{after}");
    assert!(after.contains(&client_id), "{after}");
    assert!(!reach(&ovs_ns, "127.0.0.1", 18080), "port open after DEL");
    let out = del(&node, &client_id, &client_ns);
    assert_eq!(out.code, 0, "DEL client: {}", out.stdout);
    let after = nat(&node);
    assert!(!after.contains("-j DNAT"), "{after}");
    assert!(
        !after
            .lines()
            .any(|l| l.starts_with(":SDN-HP-") && l != ":SDN-HP-MASQ - [0:0]"),
        "{after}"
    );
    assert!(wait_until(Duration::from_secs(5), || node
        .pod_ports()
        .is_empty()));
    node.assert_no_pod_leftovers();

    // Node teardown (`sdn-agent remove-host-rules`, as deploy/node-down.sh runs it) leaves no
    // chain or jump of ours.
    node.stop_agent(libc::SIGTERM);
    let agent = workspace_bin("sdn-agent");
    node.ovs
        .exec_in_netns(&[agent.to_str().unwrap(), "remove-host-rules"])
        .unwrap_or_else(|e| panic!("remove-host-rules: {e}"));
    let after = nat(&node);
    assert!(!after.contains("SDN-"), "{after}");
}

/// `GET /index.html` over TCP from namespace `netns` to `dst`; the response, or why it failed.
fn http_get(netns: &str, dst: SocketAddrV4) -> Result<String, String> {
    use std::io::{Read, Write};
    sdn_tests::harness::in_netns(netns, move || {
        let mut s = std::net::TcpStream::connect_timeout(&dst.into(), TIMEOUT)
            .map_err(|e| format!("connect {dst}: {e}"))?;
        s.set_read_timeout(Some(TIMEOUT))
            .map_err(|e| e.to_string())?;
        s.write_all(b"GET /index.html HTTP/1.0\r\n\r\n")
            .map_err(|e| format!("send to {dst}: {e}"))?;
        let mut out = String::new();
        s.read_to_string(&mut out)
            .map_err(|e| format!("read from {dst}: {e}"))?;
        Ok(out)
    })
}

/// podman publishes a container port (`-p 8080:80`) on the sdn network. podman runs in the
/// host network namespace, but the node of this network is the OVS namespace: the agent, tun0
/// (the pods' gateway 10.128.0.1) and the host port rules live there, so "the node's address"
/// is an address of that namespace and localhost access is tested from inside it.
#[test]
fn podman_publishes_a_port() {
    let node = AgentNode::start(NodeOptions::default());
    let ovs_ns = node.ovs.netns().to_string();
    node.ovs
        .exec_in_netns(&["ip", "addr", "add", &format!("{NODE_ADDR}/32"), "dev", "lo"])
        .unwrap();
    let mut podman = Podman::new(&node);
    podman
        .run(&[
            "run",
            "-d",
            "--name",
            "web",
            "--network",
            "sdn",
            "-p",
            "8080:80",
            "localhost/sdn-bb",
            "httpd",
            "-f",
            "-p",
            "80",
            "-h",
            "/www",
        ])
        .unwrap_or_else(|e| panic!("{e}\n{}", node.log()));
    podman.start("client", &["sleep", "300"]);
    let web_ip = podman.ip_of("web");
    let rules = nat(&node);
    assert!(
        rules.contains(&format!(
            "--dport 8080 -j DNAT --to-destination {web_ip}:80"
        )),
        "{rules}\n{}",
        node.log()
    );

    let ok = |what: &str, page: Result<String, String>| {
        let page = page.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            page.starts_with("HTTP/1.1 200") && page.ends_with("served by a pod on br0\n"),
            "{what}: {page}"
        );
    };
    ok("127.0.0.1", http_get(&ovs_ns, addr("127.0.0.1", 8080)));
    ok("node address", http_get(&ovs_ns, addr(NODE_ADDR, 8080)));
    ok(
        "gateway address",
        http_get(&ovs_ns, addr("10.128.0.1", 8080)),
    );
    let from = |container: &str, ip: &str| {
        let request = format!("printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {ip} 8080");
        podman
            .exec(container, &["sh", "-c", &request])
            .map(|p| format!("{p}\n"))
    };
    ok("client via node address", from("client", NODE_ADDR));
    ok("client via gateway", from("client", "10.128.0.1"));
    ok("hairpin", from("web", NODE_ADDR));

    podman.rm("web");
    assert!(
        http_get(&ovs_ns, addr("127.0.0.1", 8080)).is_err(),
        "port 8080 still open after podman rm -f"
    );
    let after = nat(&node);
    assert!(!after.contains("-j DNAT"), "{after}");
    assert!(
        !after
            .lines()
            .any(|l| l.starts_with(":SDN-HP-") && l != ":SDN-HP-MASQ - [0:0]"),
        "{after}"
    );
    podman.rm("client");
    assert!(wait_until(Duration::from_secs(5), || node
        .pod_ports()
        .is_empty()));
    node.assert_no_pod_leftovers();
}

/// A node address besides the gateway, IPv6.
const NODE_ADDR6: &str = "fd00:111::10";

fn sock(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), port)
}

#[test]
fn ipv6_hostports_on_a_dual_stack_node_node_addresses_loopback_and_families() {
    let node = AgentNode::start(NodeOptions::default().dual_stack());
    let ovs_ns = node.ovs.netns().to_string();
    node.ovs
        .exec_in_netns(&["ip", "addr", "add", &format!("{NODE_ADDR}/32"), "dev", "lo"])
        .unwrap();
    node.ovs
        .exec_in_netns(&[
            "ip",
            "addr",
            "add",
            &format!("{NODE_ADDR6}/128"),
            "dev",
            "lo",
            "nodad",
        ])
        .unwrap();

    // 18080: every address, both families; 18081: the node's IPv6 address only; 18082: every
    // IPv4 address only (0.0.0.0); 18053/udp: every address.
    let web_ns = Netns::new("hp6web");
    let web_id = format!("{}-web", web_ns.name());
    let out = add(
        &node,
        &web_id,
        &web_ns,
        "web",
        &json!([
            {"hostPort": 18080, "containerPort": 8080},
            {"hostPort": 18081, "containerPort": 8080, "hostIP": NODE_ADDR6},
            {"hostPort": 18082, "containerPort": 8080, "hostIP": "0.0.0.0"},
            {"hostPort": 18053, "containerPort": 53, "protocol": "udp"},
        ]),
    );
    assert_eq!(out.code, 0, "ADD web: {}\n{}", out.stdout, node.log());
    let web_ip6 = out.json["ips"][1]["address"]
        .as_str()
        .and_then(|a| a.split('/').next())
        .unwrap_or_else(|| panic!("no IPv6 address in {}", out.stdout))
        .to_string();
    let web_result = out.json.clone();
    // An IPv6 socket on `::` takes IPv4 too: one server per protocol serves both families.
    let _tcp = tcp6_echo_server(web_ns.name(), 8080);
    let _udp = udp6_echo_server(web_ns.name(), 53);
    let client_ns = Netns::new("hp6cli");
    let client_id = format!("{}-client", client_ns.name());
    let out = add(&node, &client_id, &client_ns, "client", &json!([]));
    assert_eq!(out.code, 0, "ADD client: {}", out.stdout);

    let rules6 = nat6(&node);
    assert!(
        rules6.contains(&format!("--to-destination [{web_ip6}]:8080")),
        "{rules6}"
    );
    assert!(
        rules6.contains(&format!("-d {NODE_ADDR6}/128 -p tcp")),
        "{rules6}"
    );
    assert!(
        !rules6.contains("--dport 18082"),
        "an IPv4-only mapping in ip6tables: {rules6}"
    );
    assert!(rules6.contains("! -d ::1/128"), "{rules6}");
    assert!(
        !nat(&node).contains("--dport 18081"),
        "an IPv6-only mapping in iptables"
    );

    let reach = |from: &str, ip: &str, port: u16| tcp_probe_to(from, sock(ip, port), TIMEOUT);
    let udp = |from: &str, ip: &str, port: u16| udp_probe_to(from, sock(ip, port), TIMEOUT);
    let check_all = |when: &str| {
        let truth: [(&str, &str, u16, bool); 12] = [
            ("node", NODE_ADDR6, 18080, true),
            ("node", "fd01:0:0:0::1", 18080, true),
            ("node", "::1", 18080, true),
            ("node", NODE_ADDR, 18080, true),
            ("node", "127.0.0.1", 18080, true),
            ("node", NODE_ADDR6, 18081, true),
            ("node", "::1", 18081, false),
            ("node", NODE_ADDR, 18081, false),
            ("node", NODE_ADDR6, 18082, false),
            ("node", NODE_ADDR, 18082, true),
            ("client", NODE_ADDR6, 18080, true),
            ("web", NODE_ADDR6, 18080, true),
        ];
        let mut wrong = Vec::new();
        for (from, ip, port, want) in truth {
            let ns = match from {
                "node" => ovs_ns.as_str(),
                "client" => client_ns.name(),
                _ => web_ns.name(),
            };
            if reach(ns, ip, port) != want {
                wrong.push(format!("{from} -> [{ip}]:{port}: expected {want}"));
            }
        }
        for (ip, want) in [(NODE_ADDR6, true), ("::1", true), (NODE_ADDR, true)] {
            if udp(&ovs_ns, ip, 18053) != want {
                wrong.push(format!("node -> [{ip}]:18053/udp: expected {want}"));
            }
        }
        assert!(
            wrong.is_empty(),
            "{when}: {wrong:#?}\nip6tables:\n{}\nlog:\n{}",
            nat6(&node),
            node.log()
        );
    };
    check_all("after ADD");

    // CHECK covers the IPv6 rules: a flushed IPv6 pod chain is drift, named as ip6tables'.
    let check = || check(&node, &web_id, &web_ns, &web_result);
    let out = check();
    assert_eq!(out.code, 0, "CHECK: {}", out.stdout);
    let chain = pod_chain(&rules6, &web_id);
    node.ovs
        .exec_in_netns(&["ip6tables", "-t", "nat", "-F", &chain])
        .unwrap();
    let out = check();
    assert!(
        out.code != 0 && out.stdout.contains("ip6tables"),
        "{}",
        out.stdout
    );

    // A restart puts the IPv6 rules back and serves [::1] again.
    node.stop_agent(libc::SIGTERM);
    assert!(
        !reach(&ovs_ns, "::1", 18080),
        "[::1] served with the agent down"
    );
    node.start_agent();
    assert_eq!(nat6(&node), rules6, "IPv6 rules after a restart");
    check_all("after restart");

    // DEL: the IPv6 rules and the [::1] relay go; the port is free for the next pod.
    let out = del(&node, &web_id, &web_ns);
    assert_eq!(out.code, 0, "DEL web: {}", out.stdout);
    assert!(!nat6(&node).contains(&web_id));
    assert!(!reach(&ovs_ns, "::1", 18080), "[::1] open after DEL");
    let out = add(
        &node,
        &format!("{}-again", web_ns.name()),
        &web_ns,
        "again",
        &json!([{"hostPort": 18080, "containerPort": 8080, "hostIP": "::1"}]),
    );
    assert_eq!(out.code, 0, "ADD again: {}", out.stdout);
    assert!(reach(&ovs_ns, "::1", 18080), "[::1] relay of the next pod");
    assert!(
        !reach(&ovs_ns, NODE_ADDR6, 18080),
        "hostIP ::1 published elsewhere"
    );
    let out = del(&node, &format!("{}-again", web_ns.name()), &web_ns);
    assert_eq!(out.code, 0, "{}", out.stdout);
    let out = del(&node, &client_id, &client_ns);
    assert_eq!(out.code, 0, "{}", out.stdout);
    node.assert_no_pod_leftovers();

    // Teardown removes the IPv6 rules too.
    node.stop_agent(libc::SIGTERM);
    let agent = workspace_bin("sdn-agent");
    node.ovs
        .exec_in_netns(&[agent.to_str().unwrap(), "remove-host-rules"])
        .unwrap_or_else(|e| panic!("remove-host-rules: {e}"));
    assert!(!nat6(&node).contains("SDN-"), "{}", nat6(&node));
}
