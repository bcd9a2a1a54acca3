//! Several nodes on one machine, joined by an underlay, sharing one cluster (testing.md,
//! "Multi-node on one machine").
//!
//! Shape:
//! - a **hub** network namespace holding a Linux bridge `hub0`: the underlay's switch;
//! - N **nodes**, each an [`AgentNode`] (a private OVS whose ovs-vswitchd runs in the node's own
//!   network namespace, and the real `sdn-agent` in that namespace) named `node-<i>`;
//! - per node a veth from the hub (`h<i>`, a port of `hub0`) to the node (`ul0`), the node end a
//!   port of an OVS bridge `br-phy` (userspace datapath, normal switching) whose internal
//!   interface carries the node's underlay address `192.168.77.<10+i>/24`. Userspace VXLAN routes
//!   through ovs-vswitchd's own route table, which it learns from the namespace's kernel routes,
//!   and sends from an address that must sit on an OVS bridge: hence `br-phy`, not an address on
//!   the veth itself;
//! - ONE standalone cluster state directory for all agents (each agent seeds its own HostSubnet
//!   with its `--node-ip`; agents start one after another, so subnet allocation cannot race).
//!
//! Captures on the hub side ([`Cluster::hub_port`]) see exactly what a node puts on the wire.
//!
//! Clean-up on drop, also when a test fails: each node's agent and OVS daemons are stopped by pid
//! and its namespace deleted (the veth goes with it), then the hub namespace (with `hub0`) and
//! the state directory.
//!
//! Limits: one underlay subnet, no routers between nodes; addresses exist only inside the
//! namespaces made here.

use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cluster::{ClusterObject, HostSubnet, Kind, NetNamespace, StandaloneSource};

use crate::fakeapi::FakeApi;
use crate::harness::{
    run, unique_name, wait_until, which, without_agent_env, workspace_bin, Netns,
};
use crate::node::{AgentNode, NodeOptions};

/// The underlay bridge in the hub namespace.
pub const HUB_BRIDGE: &str = "hub0";
/// The node end of each underlay veth (a port of `br-phy`).
pub const UNDERLAY_PORT: &str = "ul0";
/// The OVS bridge carrying each node's underlay address.
pub const UNDERLAY_BRIDGE: &str = "br-phy";
/// Prefix length of the underlay subnet (192.168.77.0/24).
pub const UNDERLAY_PREFIX: u8 = 24;

/// The underlay address of node `i` (1-based): `192.168.77.<10+i>`.
pub fn underlay_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(
        192,
        168,
        77,
        10 + u8::try_from(i).expect("a handful of nodes"),
    )
}

/// The IPv6 underlay address of node `i` (1-based): `fd00:77::<10+i>` (hex), for an
/// IPv6-only cluster ([`Cluster::start_ipv6_underlay`]).
pub fn underlay_ip6(i: usize) -> std::net::Ipv6Addr {
    std::net::Ipv6Addr::new(
        0xfd00,
        0x77,
        0,
        0,
        0,
        0,
        0,
        0x10 + u16::try_from(i).expect("a handful of nodes"),
    )
}

/// The networkpolicy-mode fixture on node 1 of a Kubernetes-mode cluster: namespaces `x`
/// (with `x_annotations`) and `y`, labelled `ns=NAME`; pods x/a, x/b and y/a made through the
/// runtime, their objects in the API before the ADDs (as the scheduler has them) and with their
/// addresses after; and x/a taking TCP 80 from pods labelled `pod=b` and nothing else
/// (NetworkPolicy `x/web-from-b`, put once the pods are in).
pub fn web_from_b<'a>(
    fake: &FakeApi,
    node: &'a AgentNode,
    x_annotations: &serde_json::Value,
) -> [crate::node::CniPod<'a>; 3] {
    use serde_json::json;
    fake.put(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "x", "labels": {"ns": "x"}, "annotations": x_annotations}}))
        .expect("Namespace x");
    fake.put(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "y", "labels": {"ns": "y"}}}))
        .expect("Namespace y");
    for (ns, name) in [("x", "a"), ("x", "b"), ("y", "a")] {
        fake.put(labelled_pod(ns, name, None)).expect("Pod");
    }
    std::thread::sleep(Duration::from_millis(500));
    let pods = [node.pod("x", "a"), node.pod("x", "b"), node.pod("y", "a")];
    for (ns, name, p) in [
        ("x", "a", &pods[0]),
        ("x", "b", &pods[1]),
        ("y", "a", &pods[2]),
    ] {
        fake.put(labelled_pod(ns, name, Some(&p.ip))).expect("Pod");
    }
    fake.put(
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "web-from-b", "namespace": "x"},
        "spec": {"podSelector": {"matchLabels": {"pod": "a"}},
                 "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}],
                              "ports": [{"protocol": "TCP", "port": 80}]}]}}),
    )
    .expect("NetworkPolicy");
    pods
}

/// A Pod as the API holds it on node 1, labelled `pod=NAME`, with a named container port
/// (`http`, TCP 80), and its address in `status` once the runtime gave it one: the shape the
/// networkpolicy-mode tests put into the fake API server before and after the pod's ADD.
pub fn labelled_pod(ns: &str, name: &str, ip: Option<&str>) -> serde_json::Value {
    let mut v = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"pod": name}},
        "spec": {"nodeName": node_name(1), "containers": [{"name": "c", "image": "agnhost",
            "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}]}]}});
    if let Some(ip) = ip {
        v["status"] = serde_json::json!({"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]});
    }
    v
}

/// The name of node `i` (1-based).
pub fn node_name(i: usize) -> String {
    format!("node-{i}")
}

/// The API server's address on the underlay (Kubernetes mode), on the hub.
pub const API_SERVER_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 1);

/// Kubernetes mode's control plane: the fake API server and the real controller process.
#[derive(Debug)]
pub struct KubeControlPlane {
    /// The API server every agent and the controller talk to.
    pub fake: FakeApi,
    controller: Option<std::process::Child>,
    controller_args: Vec<String>,
    hub: String,
    log: PathBuf,
    /// The kubeconfig of the agents and the controller.
    pub kubeconfig: PathBuf,
}

impl KubeControlPlane {
    /// Starts the real controller in the hub namespace (a cluster started without one, as while
    /// openshift-sdn's controller still allocates); a no-op while it runs.
    pub fn start_controller(&mut self) {
        if self.controller.is_some() {
            return;
        }
        let log = fs::File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("controller log");
        let child = without_agent_env(&mut Command::new("ip"))
            .args(["netns", "exec", &self.hub])
            .arg(workspace_bin("sdn-agent"))
            .args(&self.controller_args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("controller log"))
            .stderr(log)
            .spawn()
            .expect("spawn sdn-agent controller");
        self.controller = Some(child);
    }

    /// The controller's log so far.
    pub fn controller_log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for KubeControlPlane {
    fn drop(&mut self) {
        if let Some(mut c) = self.controller.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- controller log ---\n{}", self.controller_log());
        }
    }
}

/// A multi-node cluster (see the module docs).
#[derive(Debug)]
pub struct Cluster {
    /// The nodes, `nodes[0]` is `node-1`.
    pub nodes: Vec<AgentNode>,
    // Dropped after the nodes (fields drop in order): the veths die with the node namespaces.
    hub: Netns,
    state: PathBuf,
}

impl Cluster {
    /// Starts `n` nodes with `opts` (mode, cluster network, extra flags; node name, node IP and
    /// state directory are set here), one after another, each joined to the underlay.
    pub fn start(n: usize, opts: &NodeOptions) -> Cluster {
        Cluster::start_with_underlay(n, opts, false)
    }

    /// [`Cluster::start`] for an IPv6-only cluster: each node's underlay also has
    /// [`underlay_ip6`]`(i)/64` on `br-phy` (added without duplicate address detection, so it is
    /// usable at once), and that is its `--node-ip`.
    pub fn start_ipv6_underlay(n: usize, opts: &NodeOptions) -> Cluster {
        Cluster::start_with_underlay(n, opts, true)
    }

    fn start_with_underlay(n: usize, opts: &NodeOptions, ipv6: bool) -> Cluster {
        let state = std::env::temp_dir().join(unique_name("sdnstate"));
        fs::create_dir_all(&state).unwrap_or_else(|e| panic!("create {}: {e}", state.display()));
        let hub = Netns::new("sdnhub");
        must(hub.exec(&["ip", "link", "add", HUB_BRIDGE, "type", "bridge"]));
        must(hub.exec(&["ip", "link", "set", HUB_BRIDGE, "up"]));
        let mut cluster = Cluster {
            nodes: Vec::with_capacity(n),
            hub,
            state,
        };
        for i in 1..=n {
            let node = AgentNode::new(NodeOptions {
                node_name: node_name(i),
                node_ip: if ipv6 {
                    underlay_ip6(i).to_string()
                } else {
                    underlay_ip(i).to_string()
                },
                state_dir: Some(cluster.state.clone()),
                ..opts.clone()
            });
            if ipv6 {
                // The agent finds its IPv6 node address on br-phy at start.
                cluster.join_underlay(i, &node);
                let addr = format!("{}/64", underlay_ip6(i));
                must(node.ovs.exec_in_netns(&[
                    "ip",
                    "-6",
                    "addr",
                    "add",
                    &addr,
                    "dev",
                    UNDERLAY_BRIDGE,
                    "nodad",
                ]));
                node.start_agent();
            } else {
                node.start_agent();
                cluster.join_underlay(i, &node);
            }
            cluster.nodes.push(node);
        }
        cluster
    }

    /// Kubernetes mode: the hub gets the API server's underlay address [`API_SERVER_IP`] and
    /// runs the fake API server (`sdn_tests::fakeapi`) there, with a Node object per node (its
    /// InternalIP the underlay address) and the Namespaces `default` and `kube-system`; the real
    /// `sdn-agent controller` runs in the hub namespace; then the nodes start one after another,
    /// each agent with `--cluster-state kubernetes` and a kubeconfig pointing at the fake (it
    /// waits for the HostSubnet the controller allocates). The controller stops on drop.
    pub fn start_kubernetes(n: usize, opts: &NodeOptions) -> (Cluster, KubeControlPlane) {
        Cluster::start_kubernetes_with(n, opts, |_| {})
    }

    /// [`Cluster::start_kubernetes`], with `before_agents` run once the controller runs and
    /// before any agent starts (e.g. to build a large simulated cluster around the nodes,
    /// `crate::simulated`, which the agents then list at start).
    pub fn start_kubernetes_with(
        n: usize,
        opts: &NodeOptions,
        before_agents: impl FnOnce(&KubeControlPlane),
    ) -> (Cluster, KubeControlPlane) {
        Cluster::start_kubernetes_inner(n, opts, true, before_agents)
    }

    /// [`Cluster::start_kubernetes_with`] without our controller: the HostSubnets and
    /// NetNamespaces are someone else's (`before_agents` writes them, as openshift-sdn's
    /// controller did); [`KubeControlPlane::start_controller`] starts ours later.
    pub fn start_kubernetes_without_controller(
        n: usize,
        opts: &NodeOptions,
        before_agents: impl FnOnce(&KubeControlPlane),
    ) -> (Cluster, KubeControlPlane) {
        Cluster::start_kubernetes_inner(n, opts, false, before_agents)
    }

    fn start_kubernetes_inner(
        n: usize,
        opts: &NodeOptions,
        with_controller: bool,
        before_agents: impl FnOnce(&KubeControlPlane),
    ) -> (Cluster, KubeControlPlane) {
        let state = std::env::temp_dir().join(unique_name("sdnkube"));
        fs::create_dir_all(&state).unwrap_or_else(|e| panic!("create {}: {e}", state.display()));
        let hub = Netns::new("sdnhub");
        must(hub.exec(&["ip", "link", "add", HUB_BRIDGE, "type", "bridge"]));
        must(hub.exec(&["ip", "link", "set", HUB_BRIDGE, "up"]));
        let api_cidr = format!("{API_SERVER_IP}/{UNDERLAY_PREFIX}");
        must(hub.exec(&["ip", "addr", "add", &api_cidr, "dev", HUB_BRIDGE]));
        let fake = FakeApi::start_in_netns(hub.name(), &format!("{API_SERVER_IP}:6443"));
        let kubeconfig = state.join("kubeconfig");
        fake.kubeconfig(&kubeconfig)
            .unwrap_or_else(|e| panic!("writing the kubeconfig: {e}"));
        for ns in ["default", "kube-system"] {
            fake.put(serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns}}))
                .expect("namespace");
        }
        for i in 1..=n {
            fake.put(serde_json::json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": node_name(i)},
                "status": {"addresses": [{"type": "InternalIP", "address": underlay_ip(i).to_string()}]}}))
                .expect("node");
        }
        let mut controller_args: Vec<String> = vec![
            "controller".into(),
            "--node-name".into(),
            "controller".into(),
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--mode".into(),
            opts.mode.into(),
            "--cluster-network".into(),
            opts.cluster_network.clone(),
            "--global-namespace".into(),
            "kube-system".into(),
        ];
        controller_args.extend(opts.extra.iter().cloned());
        let mut plane = KubeControlPlane {
            fake,
            controller: None,
            controller_args,
            hub: hub.name().to_string(),
            log: state.join("controller.log"),
            kubeconfig: kubeconfig.clone(),
        };
        if with_controller {
            plane.start_controller();
        }
        let mut cluster = Cluster {
            nodes: Vec::with_capacity(n),
            hub,
            state,
        };
        before_agents(&plane);
        for i in 1..=n {
            let mut extra = opts.extra.clone();
            extra.extend([
                "--cluster-state".to_string(),
                "kubernetes".to_string(),
                "--kubeconfig".to_string(),
                kubeconfig.display().to_string(),
                "--host-subnet-wait".to_string(),
                "30".to_string(),
            ]);
            let node = AgentNode::new(NodeOptions {
                node_name: node_name(i),
                node_ip: underlay_ip(i).to_string(),
                extra,
                ..opts.clone()
            });
            cluster.join_underlay(i, &node);
            // The node reaches the API server over the underlay before its agent starts.
            let api = std::net::SocketAddr::from((API_SERVER_IP, 6443));
            let ns = node.ovs.netns().to_string();
            let reached = wait_until(Duration::from_secs(10), || {
                crate::harness::in_netns(&ns, move || {
                    std::net::TcpStream::connect_timeout(&api, Duration::from_millis(500)).is_ok()
                })
            });
            assert!(
                reached,
                "node-{i} cannot reach the API server at {api}: ping says {:?}",
                node.ovs
                    .exec_in_netns(&["ping", "-c", "1", "-W", "1", &API_SERVER_IP.to_string()])
            );
            node.start_agent();
            cluster.nodes.push(node);
        }
        (cluster, plane)
    }

    /// A node `i` (`node-<i>`, [`underlay_ip`]`(i)`) with OVS and the underlay but no agent of
    /// ours, for another network's node (the openshift-sdn fixture). Keep it declared after the
    /// cluster, so it goes first.
    pub fn join_bare_node(&self, i: usize) -> AgentNode {
        let node = AgentNode::new(NodeOptions {
            node_name: node_name(i),
            node_ip: underlay_ip(i).to_string(),
            state_dir: Some(self.state.clone()),
            ..NodeOptions::default()
        });
        self.join_underlay(i, &node);
        node
    }

    /// Wires node `i` to the hub: veth `h<i>` (hub) / `ul0` (node), `ul0` into `br-phy`, the
    /// underlay address on `br-phy`.
    fn join_underlay(&self, i: usize, node: &AgentNode) {
        let hub_if = Self::hub_port_name(i);
        let ns = node.ovs.netns();
        must(self.hub.exec(&[
            "ip",
            "link",
            "add",
            &hub_if,
            "type",
            "veth",
            "peer",
            "name",
            UNDERLAY_PORT,
            "netns",
            ns,
        ]));
        must(
            self.hub
                .exec(&["ip", "link", "set", &hub_if, "master", HUB_BRIDGE, "up"]),
        );
        node.ovs.vsctl(&[
            "add-br",
            UNDERLAY_BRIDGE,
            "--",
            "set",
            "bridge",
            UNDERLAY_BRIDGE,
            "datapath_type=netdev",
            "--",
            "add-port",
            UNDERLAY_BRIDGE,
            UNDERLAY_PORT,
        ]);
        must(
            node.ovs
                .exec_in_netns(&["ip", "link", "set", UNDERLAY_PORT, "up"]),
        );
        let ok = wait_until(Duration::from_secs(10), || {
            node.ovs
                .exec_in_netns(&["ip", "link", "show", UNDERLAY_BRIDGE])
                .is_ok()
        });
        assert!(ok, "{UNDERLAY_BRIDGE} of node {i} did not appear");
        // TCP between the hub and a node's kernel crosses the userspace datapath, which does not
        // complete offloaded checksums (testing.md): checksums in software on both ends.
        must(self.hub.exec(&["ethtool", "-K", &hub_if, "tx", "off"]));
        must(
            node.ovs
                .exec_in_netns(&["ethtool", "-K", UNDERLAY_BRIDGE, "tx", "off"]),
        );
        let addr = format!("{}/{UNDERLAY_PREFIX}", underlay_ip(i));
        must(
            node.ovs
                .exec_in_netns(&["ip", "addr", "add", &addr, "dev", UNDERLAY_BRIDGE]),
        );
        must(
            node.ovs
                .exec_in_netns(&["ip", "link", "set", UNDERLAY_BRIDGE, "up"]),
        );
    }

    fn hub_port_name(i: usize) -> String {
        format!("h{i}")
    }

    /// The hub namespace's name (where the API server listens in Kubernetes mode).
    pub fn hub_name(&self) -> &str {
        self.hub.name()
    }

    /// Node `i` (1-based).
    pub fn node(&self, i: usize) -> &AgentNode {
        &self.nodes[i - 1]
    }

    /// The shared cluster state directory.
    pub fn state_dir(&self) -> &Path {
        &self.state
    }

    /// The hub namespace (for captures on [`Cluster::hub_port`]).
    pub fn hub_netns(&self) -> &str {
        self.hub.name()
    }

    /// Runs a command in the hub namespace (the underlay's switch, where tests put "external"
    /// hosts); panics with its stderr when it fails.
    pub fn hub_exec(&self, args: &[&str]) -> String {
        self.hub.exec(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The hub end of node `i`'s underlay veth: what node `i` sends arrives here.
    pub fn hub_port(&self, i: usize) -> String {
        Self::hub_port_name(i)
    }

    /// Replaces node `i`'s underlay address `from` with `to` (on `br-phy`), as when a machine
    /// is renumbered; its HostSubnet is not touched. The old address goes first: deleting a
    /// primary address deletes the secondaries of its subnet with it.
    pub fn renumber_underlay(&self, i: usize, from: Ipv4Addr, to: Ipv4Addr) {
        let node = self.node(i);
        for (op, ip) in [("del", from), ("add", to)] {
            let cidr = format!("{ip}/{UNDERLAY_PREFIX}");
            must(
                node.ovs
                    .exec_in_netns(&["ip", "addr", op, &cidr, "dev", UNDERLAY_BRIDGE]),
            );
        }
    }

    /// The cluster state as the files have it now.
    pub fn state(&self) -> cluster::ClusterState {
        let (state, errors) = StandaloneSource::load(&self.state)
            .unwrap_or_else(|e| panic!("loading {}: {e}", self.state.display()));
        assert!(errors.is_empty(), "cluster state has problems: {errors:?}");
        state
    }

    /// The HostSubnet of node `name`.
    pub fn host_subnet(&self, name: &str) -> HostSubnet {
        self.state()
            .host_subnets
            .get(name)
            .cloned()
            .unwrap_or_else(|| panic!("no HostSubnet {name:?}"))
    }

    /// Writes (creates or replaces) a HostSubnet.
    pub fn write_host_subnet(&self, hs: &HostSubnet) {
        StandaloneSource::write_object(&self.state, &ClusterObject::HostSubnet(hs.clone()))
            .unwrap_or_else(|e| panic!("writing HostSubnet {}: {e}", hs.name()));
    }

    /// Deletes the HostSubnet of node `name`.
    pub fn delete_host_subnet(&self, name: &str) {
        let gone = StandaloneSource::delete_object(&self.state, Kind::HostSubnet, name)
            .unwrap_or_else(|e| panic!("deleting HostSubnet {name}: {e}"));
        assert!(gone, "HostSubnet {name} had no file of its own");
    }

    /// Writes the NetNamespace of `namespace` with VNID `netid` (every agent applies it within a
    /// poll).
    pub fn set_netnamespace(&self, namespace: &str, netid: u32) {
        StandaloneSource::write_object(
            &self.state,
            &ClusterObject::NetNamespace(NetNamespace::new(namespace, netid)),
        )
        .unwrap_or_else(|e| panic!("writing NetNamespace {namespace}: {e}"));
    }

    /// The remote-node rows (cookie feature 2) of node `i`'s br0 as `ovs-ofctl --names
    /// --no-stats dump-flows` prints them, sorted.
    pub fn remote_rows(&self, i: usize) -> Vec<String> {
        let text = self.node(i).ovs.ofctl(&[
            "--names",
            "--no-stats",
            "dump-flows",
            "br0",
            "cookie=0x2000000000000000/0xf000000000000000",
        ]);
        let mut v: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("cookie="))
            .map(String::from)
            .collect();
        v.sort();
        v
    }

    /// `ovs-appctl <args>` against node `i`'s ovs-vswitchd (output or error text).
    pub fn appctl(&self, i: usize, args: &[&str]) -> String {
        let ctl = self.node(i).ovs.vswitchd_ctl().display().to_string();
        let mut all = vec!["-t", ctl.as_str()];
        all.extend_from_slice(args);
        run("ovs-appctl", &all).unwrap_or_else(|e| e)
    }

    /// What ovs-vswitchd of node `i` uses for userspace tunnels: its route table, tunnel
    /// neighbours and tunnel ports (for failure messages).
    pub fn tunnel_state(&self, i: usize) -> String {
        format!(
            "node-{i} ovs/route/show:\n{}\ntnl/neigh/show:\n{}\ntnl/ports/show:\n{}",
            self.appctl(i, &["ovs/route/show"]),
            self.appctl(i, &["tnl/neigh/show"]),
            self.appctl(i, &["tnl/ports/show", "-v"]),
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Nodes first (agents, daemons, namespaces with their veth ends), then the hub.
        self.nodes.clear();
        let _ = fs::remove_dir_all(&self.state);
    }
}

/// `ovs-ofctl monitor br0 watch:!initial` on one node: every flow added, modified or deleted on
/// br0 from [`FlowMonitor::start`] until [`FlowMonitor::stop`], to prove what a change touched.
/// The process is stopped by its pid on stop or drop.
#[derive(Debug)]
pub struct FlowMonitor {
    child: Option<Child>,
    out: PathBuf,
}

impl FlowMonitor {
    /// Starts monitoring `node`'s br0 and waits until the switch acknowledged the monitor
    /// request (so no later change is missed).
    pub fn start(node: &AgentNode) -> FlowMonitor {
        let out = node.dir().join(format!("{}.monitor", unique_name("mon")));
        let file = fs::File::create(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
        let child = Command::new(which("ovs-ofctl").unwrap_or_else(|| "ovs-ofctl".into()))
            .args(["-O", "OpenFlow13", "monitor"])
            .arg(format!("unix:{}", node.ovs.mgmt_sock("br0").display()))
            .arg("watch:!initial")
            // Its unixctl socket goes into the instance's directory, not /var/run/openvswitch.
            .env("OVS_RUNDIR", node.ovs.dir())
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("monitor output fd"))
            .stderr(file)
            .spawn()
            .expect("spawn ovs-ofctl monitor");
        let mon = FlowMonitor {
            child: Some(child),
            out,
        };
        let ready = wait_until(Duration::from_secs(5), || {
            fs::read_to_string(&mon.out).is_ok_and(|t| t.contains("FLOW_MONITOR reply"))
        });
        assert!(ready, "ovs-ofctl monitor did not start: {}", mon.text());
        mon
    }

    /// Everything the monitor printed so far.
    pub fn text(&self) -> String {
        fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// The events so far (`event=ADDED|MODIFIED|DELETED ... cookie=0x...`), one per line.
    pub fn events(&self) -> Vec<String> {
        self.text()
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("event="))
            .map(String::from)
            .collect()
    }

    /// Stops the monitor and returns every event it saw.
    pub fn stop(mut self) -> Vec<String> {
        self.kill();
        self.events()
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill on a pid we spawned and have not reaped.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }
}

impl Drop for FlowMonitor {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_file(&self.out);
    }
}

/// The cookie of a flow-monitor event or a dumped flow line.
pub fn cookie_of(line: &str) -> Option<u64> {
    let hex = line.split("cookie=0x").nth(1)?;
    let hex: String = hex.chars().take_while(char::is_ascii_hexdigit).collect();
    u64::from_str_radix(&hex, 16).ok()
}

fn must(r: Result<String, String>) -> String {
    r.unwrap_or_else(|e| panic!("{e}"))
}
