//! openshift-sdn's node, as its own rules leave it: the flow rows, pod wiring and names its node
//! process writes, for the tests of mixed clusters and of taking a running node over.
//! openshift-sdn is Go and cannot be built here, so what is made is its node's *state*, from a
//! transcription of its rules at one named version. This is the one place that transcription
//! lives; every function names the upstream file and function its rows come from, and keeps
//! their text and order as `ovs-ofctl add-flow` reads them (the facts carry over, not the code).
//!
//! Upstream: github.com/openshift/sdn, commit 18a57d7 (`pkg/network/node`), whose
//! `ovscontroller.go` has `ruleVersion = 13`: the note in table 253 is `<plugin>.0D` with the
//! plugin id of `node.go` `New` (00 subnet, 01 multitenant, 02 networkpolicy).

use std::net::Ipv4Addr;

/// The upstream commit transcribed.
pub const UPSTREAM_COMMIT: &str = "18a57d7";
/// `ovscontroller.go` `ruleVersion`.
pub const RULE_VERSION: u8 = 13;
/// `ovscontroller.go` `ruleVersionTable`.
pub const RULE_VERSION_TABLE: u8 = 253;
/// The CNI network name of its pods' host-local leases (`/var/lib/cni/networks/openshift-sdn`)
/// and of its CNI config file (`80-openshift-network.conf`, `"name": "openshift-sdn"`).
pub const CNI_NETWORK: &str = "openshift-sdn";
/// Its CNI config file's name in the CNI config directory.
pub const CNI_CONF_FILE: &str = "80-openshift-network.conf";

/// The plugin (`node.go` `New`: the plugin id in the version note).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plugin {
    /// `redhat/openshift-ovs-subnet`.
    Subnet,
    /// `redhat/openshift-ovs-multitenant`.
    Multitenant,
    /// `redhat/openshift-ovs-networkpolicy`.
    NetworkPolicy,
}

impl Plugin {
    fn id(self) -> u8 {
        match self {
            Plugin::Subnet => 0,
            Plugin::Multitenant => 1,
            Plugin::NetworkPolicy => 2,
        }
    }
}

/// What the node's rows are made of (`ovscontroller.go` `SetupOVS` arguments and the
/// controller's fields).
#[derive(Debug, Clone)]
pub struct Node {
    /// The plugin.
    pub plugin: Plugin,
    /// The ClusterNetwork's CIDRs.
    pub cluster_networks: Vec<String>,
    /// The service network.
    pub service_network: String,
    /// This node's HostSubnet.
    pub local_subnet: String,
    /// Its gateway (tun0's address, the subnet's first host).
    pub gateway: Ipv4Addr,
    /// The node's IP (`localIP`).
    pub node_ip: Ipv4Addr,
    /// The MAC of the node's interface holding `node_ip` (`localMAC`).
    pub node_mac: String,
    /// tun0's MAC (`tunMAC`).
    pub tun_mac: String,
    /// The VXLAN port.
    pub vxlan_port: u16,
}

/// `ovscontroller.go` `getVersionNote`: `<plugin id>.<rule version>`, two hex digits each.
pub fn version_note(plugin: Plugin) -> String {
    format!("{:02X}.{:02X}", plugin.id(), RULE_VERSION)
}

/// `ovscontroller.go` `SetupOVS`: the base rows, in its order.
pub fn setup_ovs_rows(n: &Node) -> Vec<String> {
    let mut r = Vec::new();
    let (sub, gw) = (&n.local_subnet, n.gateway);
    r.push("table=0, priority=1000, ip, ct_state=-trk, actions=ct(table=0)".to_string());
    for cn in &n.cluster_networks {
        r.push(format!("table=0, priority=200, in_port=1, arp, nw_src={cn}, nw_dst={sub}, actions=move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[],goto_table:10"));
        r.push(format!("table=0, priority=200, in_port=1, ip, nw_src={cn}, actions=move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[],goto_table:10"));
        r.push(format!("table=0, priority=200, in_port=1, ip, nw_dst={cn}, actions=move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[],goto_table:10"));
    }
    r.push("table=0, priority=150, in_port=1, actions=drop".to_string());
    r.push(format!(
        "table=0, priority=400, in_port=2, ip, nw_src={gw}, actions=goto_table:30"
    ));
    for cn in &n.cluster_networks {
        r.push(format!("table=0, priority=300, in_port=2, ip, nw_src={sub}, nw_dst={cn}, actions=goto_table:25"));
    }
    r.push("table=0, priority=250, in_port=2, ip, nw_dst=224.0.0.0/4, actions=drop".to_string());
    for cn in &n.cluster_networks {
        r.push(format!(
            "table=0, priority=200, in_port=2, arp, nw_src={gw}, nw_dst={cn}, actions=goto_table:30"
        ));
    }
    r.push("table=0, priority=200, in_port=2, ip, actions=goto_table:30".to_string());
    r.push("table=0, priority=150, in_port=2, actions=drop".to_string());
    r.push("table=0, priority=100, arp, actions=goto_table:20".to_string());
    r.push("table=0, priority=100, ip, actions=goto_table:20".to_string());
    r.push("table=0, priority=0, actions=drop".to_string());

    r.push(format!(
        "table=10, priority=210, ip, nw_dst={gw}, eth_dst={}, actions=set_field:{}->eth_dst, resubmit:10",
        n.node_mac, n.tun_mac
    ));
    r.push(format!(
        "table=10, priority=200, ip, nw_dst={sub}, eth_dst={}, actions=move:nw_dst->eth_dst[0..31], set_field:0a:58:00:00:00:00/ff:ff:00:00:00:00->eth_dst, resubmit:10",
        n.node_mac
    ));
    r.push("table=10, priority=0, actions=drop".to_string());

    r.push(format!(
        "table=20, priority=300, udp, udp_dst={}, actions=drop",
        n.vxlan_port
    ));
    r.push("table=20, priority=0, actions=drop".to_string());
    r.push("table=25, priority=0, actions=drop".to_string());
    r.push("table=27, priority=0, actions=drop".to_string());
    r.push("table=30, priority=0, actions=goto_table:31".to_string());

    r.push(format!(
        "table=31, priority=300, arp, nw_dst={gw}, actions=output:2"
    ));
    r.push(format!(
        "table=31, priority=200, arp, nw_dst={sub}, actions=goto_table:40"
    ));
    for cn in &n.cluster_networks {
        r.push(format!(
            "table=31, priority=100, arp, nw_dst={cn}, actions=goto_table:50"
        ));
    }
    r.push(format!(
        "table=31, priority=300, ip, nw_dst={gw}, actions=output:2"
    ));
    r.push(format!(
        "table=31, priority=100, ip, nw_dst={}, actions=goto_table:60",
        n.service_network
    ));
    r.push(format!(
        "table=31, priority=250, ip, nw_dst={sub}, ct_state=+rpl, actions=ct(nat,table=70)"
    ));
    r.push(format!(
        "table=31, priority=200, ip, nw_dst={sub}, actions=goto_table:70"
    ));
    for cn in &n.cluster_networks {
        r.push(format!(
            "table=31, priority=100, ip, nw_dst={cn}, actions=goto_table:90"
        ));
    }
    r.push(
        "table=31, priority=50, in_port=1, ip, nw_dst=224.0.0.0/4, actions=goto_table:120"
            .to_string(),
    );
    r.push("table=31, priority=25, ip, nw_dst=224.0.0.0/4, actions=goto_table:110".to_string());
    r.push("table=31, priority=0, ip, actions=goto_table:99".to_string());
    r.push("table=31, priority=0, arp, actions=drop".to_string());

    r.push("table=40, priority=0, actions=drop".to_string());
    r.push("table=50, priority=0, actions=drop".to_string());
    r.push("table=60, priority=200, actions=output:2".to_string());
    r.push("table=70, priority=0, actions=drop".to_string());
    r.push(format!(
        "table=80, priority=300, ip, nw_src={gw}/32, actions=output:NXM_NX_REG2[]"
    ));
    r.push("table=80, priority=0, actions=drop".to_string());
    r.push("table=90, priority=0, actions=drop".to_string());
    r.push(format!(
        "table=99, priority=200, tcp, tcp_dst=53, nw_dst={}, actions=output:2",
        n.node_ip
    ));
    r.push(format!(
        "table=99, priority=200, udp, udp_dst=53, nw_dst={}, actions=output:2",
        n.node_ip
    ));
    r.push("table=99, priority=0, actions=goto_table:100".to_string());
    r.push("table=100, priority=0, actions=goto_table:101".to_string());
    r.push("table=101, priority=150, ct_state=+rpl, actions=output:2".to_string());
    r.push("table=101, priority=0, actions=output:2".to_string());
    r.push("table=110, priority=0, actions=drop".to_string());
    r.push("table=111, priority=100, actions=goto_table:120".to_string());
    r.push("table=120, priority=0, actions=drop".to_string());
    r
}

/// The plugin's own rows at start: `multitenant.go` `Start` (the subnet plugin's `Start` in
/// `singletenant.go` adds the same shape with everything allowed; networkpolicy's are not
/// transcribed yet).
pub fn plugin_start_rows(plugin: Plugin) -> Vec<String> {
    match plugin {
        Plugin::Multitenant => vec![
            "table=27, priority=500, actions=goto_table:30".to_string(),
            "table=80, priority=200, reg0=0, actions=output:NXM_NX_REG2[]".to_string(),
            "table=80, priority=200, reg1=0, actions=output:NXM_NX_REG2[]".to_string(),
        ],
        Plugin::Subnet => vec![
            "table=27, priority=500, actions=goto_table:30".to_string(),
            "table=80, priority=200, actions=output:NXM_NX_REG2[]".to_string(),
        ],
        Plugin::NetworkPolicy => Vec::new(),
    }
}

/// `ovscontroller.go` `FinishSetupOVS`: the version note, written last.
pub fn version_row(plugin: Plugin) -> String {
    format!(
        "table={RULE_VERSION_TABLE}, actions=note:{}",
        version_note(plugin)
    )
}

/// `ovscontroller.go` `setupPodFlows`: a pod's rows.
pub fn pod_rows(ofport: u32, ip: Ipv4Addr, vnid: u32) -> Vec<String> {
    let o = ip.octets();
    let ipmac = format!(
        "00:00:{:02x}:{:02x}:{:02x}:{:02x}/00:00:ff:ff:ff:ff",
        o[0], o[1], o[2], o[3]
    );
    vec![
        format!("table=20, priority=100, in_port={ofport}, arp, nw_src={ip}, arp_sha={ipmac}, actions=load:{vnid}->NXM_NX_REG0[], goto_table:30"),
        format!("table=20, priority=100, in_port={ofport}, ip, nw_src={ip}, actions=load:{vnid}->NXM_NX_REG0[], goto_table:27"),
        format!("table=25, priority=100, ip, nw_src={ip}, actions=load:{vnid}->NXM_NX_REG0[], goto_table:27"),
        format!("table=40, priority=100, arp, nw_dst={ip}, actions=output:{ofport}"),
        format!("table=70, priority=100, ip, nw_dst={ip}, actions=load:{vnid}->NXM_NX_REG1[], load:{ofport}->NXM_NX_REG2[], goto_table:80"),
    ]
}

/// `multitenant.go` `EnsureVNIDRules`: a tenant's row in table 80 (none for VNID 0, which the
/// start rows allow).
pub fn vnid_rows(vnid: u32) -> Vec<String> {
    if vnid == 0 {
        return Vec::new();
    }
    vec![format!(
        "table=80, priority=100, reg0={vnid}, reg1={vnid}, actions=output:NXM_NX_REG2[]"
    )]
}

/// `ovscontroller.go` `hostSubnetCookie`: the first four bytes of the SHA-256 of the
/// HostSubnet's UID.
pub fn host_subnet_cookie(uid: &str) -> u32 {
    use sha2::Digest;
    let h = sha2::Sha256::digest(uid.as_bytes());
    u32::from_be_bytes([h[0], h[1], h[2], h[3]])
}

/// `ovscontroller.go` `AddHostSubnetRules`: a remote node's rows (without the fixed-VNID
/// annotation).
pub fn host_subnet_rows(uid: &str, host_ip: Ipv4Addr, subnet: &str) -> Vec<String> {
    let c = host_subnet_cookie(uid);
    vec![
        format!("table=10, priority=100, cookie=0x{c:08x}, tun_src={host_ip}, actions=goto_table:30"),
        format!("table=50, priority=100, cookie=0x{c:08x}, arp, nw_dst={subnet}, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:{host_ip}->tun_dst,output:1"),
        format!("table=90, priority=100, cookie=0x{c:08x}, ip, nw_dst={subnet}, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:{host_ip}->tun_dst,output:1"),
    ]
}

/// `ovscontroller.go` `UpdateVXLANMulticastFlows`: the one table-111 row (its per-VTEP
/// actions sorted as strings, as upstream sorts them).
pub fn vxlan_multicast_row(remote_ips: &[Ipv4Addr]) -> String {
    if remote_ips.is_empty() {
        return "table=111, priority=100, actions=goto_table:120".to_string();
    }
    let mut actions: Vec<String> = remote_ips
        .iter()
        .map(|ip| format!("set_field:{ip}->tun_dst,output:1"))
        .collect();
    actions.sort();
    format!(
        "table=111, priority=100, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],{},goto_table:120",
        actions.join(",")
    )
}

/// `ovscontroller.go` `UpdateLocalMulticastFlows`: a multicast-enabled tenant's rows.
pub fn local_multicast_rows(vnid: u32, ofports: &[u32]) -> Vec<String> {
    let mut r = vec![format!("table=110, reg0={vnid}, actions=goto_table:111")];
    if !ofports.is_empty() {
        let mut actions: Vec<String> = ofports.iter().map(|o| format!("output:{o}")).collect();
        actions.sort();
        r.push(format!(
            "table=120, priority=100, reg0={vnid}, actions={}",
            actions.join(",")
        ));
    }
    r
}

/// One of openshift-sdn's iptables chains (`iptables.go` `Chain`): made in `table`, jumped
/// to from `src_chain` (if any) by a rule prepended there with `src_rule`, holding `rules` in
/// order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// `filter`, `nat` or `raw`.
    pub table: &'static str,
    /// `OPENSHIFT-...`.
    pub name: &'static str,
    /// The built-in chain that jumps to it.
    pub src_chain: Option<&'static str>,
    /// The jump rule's match (before `-j <name>`).
    pub src_rule: Vec<String>,
    /// Its rules, each an iptables argument list after `-A <name>`.
    pub rules: Vec<Vec<String>>,
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// `iptables.go` `getNodeIPTablesChains`: the node's chains, in its order (the same chain may
/// appear twice, jumped to from two built-in chains). `masquerade_bit`: kube-proxy's
/// (`--masquerade-bit`, 14 by default).
pub fn iptables_chains(
    cluster_networks: &[String],
    vxlan_port: u16,
    masquerade_bit: u32,
) -> Vec<Chain> {
    let port = vxlan_port.to_string();
    let bit = format!("{:#x}", 1u32 << masquerade_bit);
    let mut masq = vec![args(&[
        "-m",
        "mark",
        "--mark",
        &format!("{bit}/{bit}"),
        "-j",
        "RETURN",
    ])];
    let mut masq2 = Vec::new();
    let mut filter = Vec::new();
    for cidr in cluster_networks {
        let c = cidr.as_str();
        masq.push(args(&[
            "-s",
            c,
            "-m",
            "comment",
            "--comment",
            "masquerade pod-to-external traffic",
            "-j",
            "OPENSHIFT-MASQUERADE-2",
        ]));
        masq2.push(args(&[
            "-d",
            c,
            "-m",
            "comment",
            "--comment",
            "masquerade pod-to-external traffic",
            "-j",
            "RETURN",
        ]));
        filter.push(args(&[
            "-s",
            c,
            "-m",
            "comment",
            "--comment",
            "attempted resend after connection close",
            "-m",
            "conntrack",
            "--ctstate",
            "INVALID",
            "-j",
            "DROP",
        ]));
        filter.push(args(&[
            "-d",
            c,
            "-m",
            "comment",
            "--comment",
            "forward traffic from SDN",
            "-j",
            "ACCEPT",
        ]));
        filter.push(args(&[
            "-s",
            c,
            "-m",
            "comment",
            "--comment",
            "forward traffic to SDN",
            "-j",
            "ACCEPT",
        ]));
    }
    masq2.push(args(&["-j", "MASQUERADE"]));
    let overrides = args(&["-m", "comment", "--comment", "firewall overrides"]);
    let notrack = vec![args(&["-p", "udp", "--dport", &port, "-j", "NOTRACK"])];
    vec![
        Chain {
            table: "filter",
            name: "OPENSHIFT-FIREWALL-ALLOW",
            src_chain: Some("INPUT"),
            src_rule: overrides.clone(),
            rules: vec![
                args(&[
                    "-p",
                    "udp",
                    "--dport",
                    &port,
                    "-m",
                    "comment",
                    "--comment",
                    "VXLAN incoming",
                    "-j",
                    "ACCEPT",
                ]),
                args(&[
                    "-i",
                    "tun0",
                    "-m",
                    "comment",
                    "--comment",
                    "from SDN to localhost",
                    "-j",
                    "ACCEPT",
                ]),
            ],
        },
        Chain {
            table: "filter",
            name: "OPENSHIFT-ADMIN-OUTPUT-RULES",
            src_chain: Some("FORWARD"),
            src_rule: args(&[
                "-i",
                "tun0",
                "!",
                "-o",
                "tun0",
                "-m",
                "comment",
                "--comment",
                "administrator overrides",
            ]),
            rules: Vec::new(),
        },
        Chain {
            table: "nat",
            name: "OPENSHIFT-MASQUERADE",
            src_chain: Some("POSTROUTING"),
            src_rule: args(&[
                "-m",
                "comment",
                "--comment",
                "rules for masquerading OpenShift traffic",
            ]),
            rules: masq,
        },
        Chain {
            table: "nat",
            name: "OPENSHIFT-MASQUERADE-2",
            src_chain: None,
            src_rule: Vec::new(),
            rules: masq2,
        },
        Chain {
            table: "filter",
            name: "OPENSHIFT-FIREWALL-FORWARD",
            src_chain: Some("FORWARD"),
            src_rule: overrides.clone(),
            rules: filter,
        },
        Chain {
            table: "filter",
            name: "OPENSHIFT-BLOCK-OUTPUT",
            src_chain: Some("OUTPUT"),
            src_rule: overrides.clone(),
            rules: vec![
                args(&[
                    "-p", "tcp", "-m", "tcp", "--dport", "22623", "--syn", "-j", "REJECT",
                ]),
                args(&[
                    "-p", "tcp", "-m", "tcp", "--dport", "22624", "--syn", "-j", "REJECT",
                ]),
            ],
        },
        Chain {
            table: "filter",
            name: "OPENSHIFT-BLOCK-OUTPUT",
            src_chain: Some("FORWARD"),
            src_rule: overrides,
            rules: Vec::new(),
        },
        Chain {
            table: "raw",
            name: "OPENSHIFT-NOTRACK",
            src_chain: Some("OUTPUT"),
            src_rule: args(&["-m", "comment", "--comment", "disable conntrack for vxlan"]),
            rules: notrack.clone(),
        },
        Chain {
            table: "raw",
            name: "OPENSHIFT-NOTRACK",
            src_chain: Some("PREROUTING"),
            src_rule: args(&["-m", "comment", "--comment", "disable conntrack for vxlan"]),
            rules: notrack,
        },
    ]
}

/// `iptables.go` `syncIPTableRules`, as `iptables` commands: the chains in reverse order (so
/// the jumps it prepends end in list order, and a chain exists before a rule of an earlier
/// one jumps to it), each made once, the jump prepended to its source chain, its rules
/// appended once (`EnsureRule` adds a rule that is there already no second time).
pub fn iptables_commands(chains: &[Chain]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut made: Vec<(&str, &str)> = Vec::new();
    let mut filled: Vec<(&str, &str)> = Vec::new();
    for c in chains.iter().rev() {
        if !made.contains(&(c.table, c.name)) {
            out.push(args(&["-t", c.table, "-N", c.name]));
            made.push((c.table, c.name));
        }
        if let Some(src) = c.src_chain {
            let mut jump = args(&["-t", c.table, "-I", src]);
            jump.extend(c.src_rule.iter().cloned());
            jump.extend(args(&["-j", c.name]));
            out.push(jump);
        }
        if !c.rules.is_empty() && !filled.contains(&(c.table, c.name)) {
            for r in &c.rules {
                let mut a = args(&["-t", c.table, "-A", c.name]);
                a.extend(r.iter().cloned());
                out.push(a);
            }
            filled.push((c.table, c.name));
        }
    }
    out
}

/// `openshift-sdn-node/sdn.go` `writeConfigFile`: the CNI config file it writes (0600) in
/// the CNI config directory as [`CNI_CONF_FILE`] once the node is set up, byte for byte.
pub fn cni_conf_text() -> &'static str {
    "\n{\n  \"cniVersion\": \"0.3.1\",\n  \"name\": \"openshift-sdn\",\n  \"type\": \"openshift-sdn\"\n}\n"
}

/// Where its pods' leases live (`pod.go` `hostLocalDataDir` and the network name):
/// host-local's directory under `root` (`/` on a node).
pub fn lease_dir(root: &std::path::Path) -> std::path::PathBuf {
    root.join("var/lib/cni/networks").join(CNI_NETWORK)
}

/// A host-local lease as the reference plugin (v1.x) writes it: a file named by the address,
/// holding the container ID and the interface name on two lines (`\r\n`), plus the
/// `last_reserved_ip.0` file of its range.
pub fn lease_files(ip: Ipv4Addr, container_id: &str, ifname: &str) -> Vec<(String, String)> {
    vec![
        (ip.to_string(), format!("{container_id}\r\n{ifname}")),
        ("last_reserved_ip.0".to_string(), ip.to_string()),
    ]
}

/// The MAC openshift-sdn's CNI plugin gives a pod's interface (`openshift-sdn.go` `cmdAdd`:
/// `ip.SetHWAddrByIP`): `0a:58:` and the four bytes of its address.
pub fn pod_mac(ip: Ipv4Addr) -> String {
    let o = ip.octets();
    format!("0a:58:{:02x}:{:02x}:{:02x}:{:02x}", o[0], o[1], o[2], o[3])
}

/// A pod to wire as openshift-sdn's pod manager wires it.
#[derive(Debug, Clone)]
pub struct PodSpec {
    /// Its Kubernetes namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its address (in the node's subnet).
    pub ip: Ipv4Addr,
    /// Its namespace's VNID.
    pub vnid: u32,
    /// Its bandwidth annotations (ingress, egress), bit/s, as `setupPodBandwidth` applies them.
    pub bandwidth: Option<(u64, u64)>,
}

/// A pod openshift-sdn wired: its network namespace (gone with it), host veth and ofport.
#[derive(Debug)]
pub struct WiredPod {
    /// What it was made from.
    pub spec: PodSpec,
    /// The sandbox (container) ID in its port's `external_ids:sandbox`.
    pub sandbox: String,
    /// The host end of its veth, a port of br0.
    pub host_veth: String,
    /// Its ofport.
    pub ofport: u32,
    /// Its network namespace (`eth0` inside).
    pub netns: crate::harness::Netns,
}

/// A remote node, as its HostSubnet gives it.
#[derive(Debug, Clone)]
pub struct RemoteNode {
    /// The HostSubnet's UID (its rows' cookie).
    pub uid: String,
    /// The node's IP (VTEP).
    pub host_ip: Ipv4Addr,
    /// Its pod subnet.
    pub subnet: String,
}

/// `ovscontroller.go` `SetupOVS` and `sdn_controller.go` `setup`: br0 (made afresh:
/// `fail_mode=secure`, OpenFlow 1.3; the userspace datapath here, where a production node has the
/// kernel's) with vxlan0 on ofport 1 and tun0 on 2 (its MAC pinned, `ensureTunMAC`), tun0's
/// address and the cluster and service routes. Returns the subnet's prefix length.
pub fn setup_bridge(ovs: &crate::harness::Ovs, node: &Node) -> u8 {
    let prefix: u8 = node
        .local_subnet
        .split('/')
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("local_subnet is a CIDR");
    ovs.vsctl(&[
        "--may-exist",
        "add-br",
        "br0",
        "--",
        "set",
        "bridge",
        "br0",
        "datapath_type=netdev",
        "fail_mode=secure",
        "protocols=OpenFlow13",
    ]);
    let mgmt = ovs.mgmt_sock("br0");
    assert!(
        crate::harness::wait_until(std::time::Duration::from_secs(10), || mgmt.exists()),
        "br0's management socket"
    );
    ovs.ofctl(&["set-frags", "br0", "nx-match"]);
    let port = node.vxlan_port.to_string();
    ovs.vsctl(&[
        "add-port",
        "br0",
        "vxlan0",
        "--",
        "set",
        "Interface",
        "vxlan0",
        "ofport_request=1",
        "type=vxlan",
        "options:remote_ip=flow",
        "options:key=flow",
        &format!("options:dst_port={port}"),
    ]);
    ovs.vsctl(&[
        "add-port",
        "br0",
        "tun0",
        "--",
        "set",
        "Interface",
        "tun0",
        "ofport_request=2",
        "type=internal",
        "mtu_request=1450",
        &format!("mac=\"{}\"", node.tun_mac),
    ]);
    let sh = |cmd: &[&str]| {
        ovs.exec_in_netns(cmd)
            .unwrap_or_else(|e| panic!("{}: {e}", cmd.join(" ")))
    };
    let tun_up = crate::harness::wait_until(std::time::Duration::from_secs(10), || {
        ovs.exec_in_netns(&["ip", "link", "show", "tun0"]).is_ok()
    });
    assert!(tun_up, "tun0 did not appear");
    sh(&[
        "ip",
        "addr",
        "add",
        &format!("{}/{prefix}", node.gateway),
        "dev",
        "tun0",
    ]);
    sh(&["ip", "link", "set", "tun0", "up"]);
    for cn in &node.cluster_networks {
        sh(&[
            "ip", "route", "replace", cn, "dev", "tun0", "proto", "kernel", "scope", "link",
        ]);
    }
    sh(&[
        "ip",
        "route",
        "replace",
        &node.service_network,
        "dev",
        "tun0",
    ]);

    prefix
}

/// Every row of a node with `pods` (ofport, address, VNID) on br0, loaded with `ovs-ofctl
/// add-flows`: base and plugin rows, the pods' rows, their VNIDs' rows (multitenant), the remote
/// nodes' rows, table 111 for them (`UpdateVXLANMulticastFlows` replaces the base row), and the
/// version note last, as `FinishSetupOVS` writes it once the rest is in.
pub fn load_rows(
    ovs: &crate::harness::Ovs,
    node: &Node,
    remote: &[RemoteNode],
    pods: &[(u32, Ipv4Addr, u32)],
) {
    let mut rows = setup_ovs_rows(node);
    rows.extend(plugin_start_rows(node.plugin));
    let mut vnids = std::collections::BTreeSet::new();
    for (ofport, ip, vnid) in pods {
        rows.extend(pod_rows(*ofport, *ip, *vnid));
        vnids.insert(*vnid);
    }
    if node.plugin == Plugin::Multitenant {
        for v in vnids {
            rows.extend(vnid_rows(v));
        }
    }
    for r in remote {
        rows.extend(host_subnet_rows(&r.uid, r.host_ip, &r.subnet));
    }
    rows.retain(|r| !r.starts_with("table=111,"));
    let vteps: Vec<Ipv4Addr> = remote.iter().map(|r| r.host_ip).collect();
    rows.push(vxlan_multicast_row(&vteps));
    rows.push(version_row(node.plugin));
    let file = ovs.dir().join("openshift-sdn.flows");
    std::fs::write(&file, rows.join("\n") + "\n").expect("the flow file");
    ovs.ofctl(&["add-flows", "br0", file.to_str().expect("a UTF-8 path")]);
}

/// `iptables.go` `syncIPTableRules` in the node's namespace (kube-proxy's masquerade bit 14),
/// idempotent as upstream's `EnsureChain` and `EnsureRule`: a chain or rule already there is
/// not made again.
pub fn sync_chains(ovs: &crate::harness::Ovs, node: &Node) {
    for cmd in iptables_commands(&iptables_chains(
        &node.cluster_networks,
        node.vxlan_port,
        14,
    )) {
        let mut argv = vec!["iptables", "-w"];
        argv.extend(cmd.iter().map(String::as_str));
        let exists = match cmd.get(2).map(String::as_str) {
            Some("-N") => {
                let list = ["iptables", "-w", "-t", &cmd[1], "-S", &cmd[3]];
                ovs.exec_in_netns(&list).is_ok()
            }
            Some("-I") | Some("-A") => {
                let mut check = argv.clone();
                check[4] = "-C";
                ovs.exec_in_netns(&check).is_ok()
            }
            _ => false,
        };
        if !exists {
            ovs.exec_in_netns(&argv)
                .unwrap_or_else(|e| panic!("{}: {e}", argv.join(" ")));
        }
    }
}

/// `ovscontroller.go` `UpdatePod`, for a pod whose namespace's VNID changed (the plugin's
/// `updatePodNetwork`): `cleanupPodFlows` (every row matching the pod's address as source or
/// destination, ip and arp), then `setupPodFlows` with the new VNID, each as one bundle, then
/// `EnsureVNIDRules` of the new VNID.
pub fn update_pod_vnid(
    ovs: &crate::harness::Ovs,
    node: &Node,
    ofport: u32,
    ip: Ipv4Addr,
    vnid: u32,
) {
    for m in ["ip, nw_dst", "ip, nw_src", "arp, nw_dst", "arp, nw_src"] {
        ovs.ofctl(&["del-flows", "br0", &format!("{m}={ip}")]);
    }
    let mut rows = pod_rows(ofport, ip, vnid);
    if node.plugin == Plugin::Multitenant {
        rows.extend(vnid_rows(vnid));
    }
    let file = ovs.dir().join("openshift-sdn-update.flows");
    std::fs::write(&file, rows.join("\n") + "\n").expect("the flow file");
    ovs.ofctl(&[
        "--bundle",
        "add-flows",
        "br0",
        file.to_str().expect("a UTF-8 path"),
    ]);
}

/// `multitenant.go` `RemoveVNIDRules`: a VNID no local pod has any more loses its table-80 row.
pub fn remove_vnid_rows(ovs: &crate::harness::Ovs, vnid: u32) {
    ovs.ofctl(&[
        "del-flows",
        "br0",
        &format!("table=80, reg0={vnid}, reg1={vnid}"),
    ]);
}

/// `egressip.go` `getMarkForVNID`: the packet mark of a tenant's egress-IP traffic, a value
/// that is never 0 and keeps kube-proxy's masquerade bit (`masquerade_bit`) and kubelet's drop
/// bit (15) clear.
pub fn egress_mark(vnid: u32, masquerade_bit: u32) -> u32 {
    const KUBELET_DROP_BIT: u32 = 1 << 15;
    let masq = 1u32 << masquerade_bit;
    let mut v = if vnid == 0 { 0xff00_0000 } else { vnid };
    if v & KUBELET_DROP_BIT != 0 {
        v = (v | 0x1000_0000) ^ KUBELET_DROP_BIT;
    }
    if v & masq != 0 {
        v = (v | 0x0100_0000) ^ masq;
    }
    v
}

/// `ovscontroller.go` `SetNamespaceEgressViaEgressIPs` for a tenant whose egress IPs other
/// nodes host (`nodes`: their IPs): select group `vnid` with one bucket per node (the VNID as
/// VNI, the node as tunnel destination) and the table-101 row committing and sending to it.
pub fn set_egress_via_remote(ovs: &crate::harness::Ovs, vnid: u32, nodes: &[Ipv4Addr]) {
    let buckets: Vec<String> = nodes
        .iter()
        .map(|ip| {
            format!(
                "bucket=actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:{ip}->tun_dst,output:1"
            )
        })
        .collect();
    ovs.ofctl(&["del-flows", "br0", &format!("table=101, reg0={vnid}")]);
    ovs.ofctl(&[
        "add-group",
        "br0",
        &format!("group_id={vnid},type=select,{}", buckets.join(",")),
    ]);
    ovs.ofctl(&[
        "add-flow",
        "br0",
        &format!("table=101, priority=100,ip,reg0={vnid}, actions=ct(commit),group:{vnid}"),
    ]);
}

/// A pod port openshift-sdn found at its start (`ovscontroller.go` `GetPodNetworkInfo`) and
/// reattached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reattached {
    /// Its sandbox.
    pub sandbox: String,
    /// Its host veth.
    pub host_veth: String,
    /// Its address.
    pub ip: Ipv4Addr,
    /// Its ofport on the new br0.
    pub ofport: u32,
}

/// openshift-sdn's node process starting on a node (`node.go` `Start`): `GetPodNetworkInfo`
/// reads every port with `sandbox` and `ip` external-ids; `alreadySetUp` compares table 253 with
/// its note and, when they differ (a node another agent ran), `setup` makes br0 afresh
/// (`SetupOVS` deletes the bridge), writes tun0's address and routes, and `reattachPods` sets
/// each of those pods up again whose veth still exists, with its assigned address and its
/// namespace's VNID (`vnid_of` its address; `SetUpPod`: the port added back with its
/// external-ids, its rows), then the chains (`syncIPTableRules`). `None` when br0 already
/// carried its note (nothing is set up again).
pub fn restart_node(
    ovs: &crate::harness::Ovs,
    node: &Node,
    remote: &[RemoteNode],
    vnid_of: &dyn Fn(Ipv4Addr) -> u32,
) -> Option<Vec<Reattached>> {
    let existing = ovs.vsctl(&[
        "--format=csv",
        "--no-headings",
        "--data=bare",
        "--columns=name,external_ids",
        "find",
        "Interface",
        "external_ids:sandbox!=\"\"",
    ]);
    let mut found = Vec::new();
    for line in existing.lines().filter(|l| !l.trim().is_empty()) {
        let (name, ids) = line.split_once(',').expect("name,external_ids");
        let ids = ids.trim_matches('"');
        let get = |key: &str| {
            ids.split(' ')
                .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
                .map(str::to_string)
        };
        if let (Some(sandbox), Some(ip)) = (get("sandbox"), get("ip")) {
            found.push((
                name.to_string(),
                sandbox,
                ip.parse::<Ipv4Addr>().expect("an ip"),
            ));
        }
    }
    let note = ovs.ofctl(&["dump-flows", "br0", "table=253"]);
    let ours = format!("note:{}", version_note(node.plugin).to_lowercase());
    if note.contains(&ours) {
        return None;
    }
    ovs.vsctl(&["--if-exists", "del-br", "br0"]);
    setup_bridge(ovs, node);
    let mut out = Vec::new();
    for (veth, sandbox, ip) in found {
        if ovs.exec_in_netns(&["ip", "link", "show", &veth]).is_err() {
            continue;
        }
        ovs.vsctl(&[
            "add-port",
            "br0",
            &veth,
            "--",
            "set",
            "Interface",
            &veth,
            &format!("external_ids=sandbox=\"{sandbox}\",ip=\"{ip}\""),
        ]);
        let ofport: u32 = ovs
            .vsctl(&["get", "Interface", &veth, "ofport"])
            .trim()
            .parse()
            .expect("an ofport");
        out.push(Reattached {
            sandbox,
            host_veth: veth,
            ip,
            ofport,
        });
    }
    let pods: Vec<(u32, Ipv4Addr, u32)> = out
        .iter()
        .map(|p| (p.ofport, p.ip, vnid_of(p.ip)))
        .collect();
    load_rows(ovs, node, remote, &pods);
    sync_chains(ovs, node);
    Some(out)
}

/// Makes the state openshift-sdn's node leaves on a node, in the private OVS `ovs` (its
/// network namespace is the node's): br0 (`fail_mode=secure`, OpenFlow 1.3; the userspace
/// datapath here, where a production node has the kernel's) with vxlan0 on ofport 1 and tun0
/// on 2 (`SetupOVS`), tun0's address and routes (`node.go` `SetupSDN`), each pod's veth with
/// the MAC of its address, its port's `sandbox`/`ip` external-ids (`ensureOvsPort`), every row
/// (base, plugin, pods, VNIDs, remote nodes, table 111, the version note last), the
/// `OPENSHIFT-*` chains, its CNI config file in `conf_dir` and its leases in `lease_dir`.
pub fn build_node(
    ovs: &crate::harness::Ovs,
    node: &Node,
    remote: &[RemoteNode],
    pods: &[PodSpec],
    conf_dir: &std::path::Path,
    lease_dir: &std::path::Path,
) -> Vec<WiredPod> {
    let prefix = setup_bridge(ovs, node);
    let sh = |cmd: &[&str]| {
        ovs.exec_in_netns(cmd)
            .unwrap_or_else(|e| panic!("{}: {e}", cmd.join(" ")))
    };
    let mut wired = Vec::new();
    let mut on_bridge = Vec::new();
    for (i, p) in pods.iter().enumerate() {
        let netns = crate::harness::Netns::new("osdnpod");
        let sandbox = format!("{:064x}", 0x05d0_0000_u64 + i as u64);
        let host_veth = format!("veth{:08x}", 0x05d0_0000_u32 + i as u32);
        let ns = |cmd: &[&str]| {
            netns
                .exec(cmd)
                .unwrap_or_else(|e| panic!("{}: {e}", cmd.join(" ")))
        };
        ns(&[
            "ip", "link", "add", "eth0", "type", "veth", "peer", "name", &host_veth,
        ]);
        ns(&["ip", "link", "set", &host_veth, "netns", ovs.netns()]);
        ns(&[
            "ip",
            "link",
            "set",
            "eth0",
            "address",
            &pod_mac(p.ip),
            "mtu",
            "1450",
        ]);
        ns(&[
            "ip",
            "addr",
            "add",
            &format!("{}/{prefix}", p.ip),
            "dev",
            "eth0",
        ]);
        ns(&["ip", "link", "set", "eth0", "up"]);
        // Not openshift-sdn's doing: this harness's userspace datapath does not complete
        // offloaded checksums (testing.md), so the pod computes its own, as ours do on netdev.
        ns(&["ethtool", "-K", "eth0", "tx", "off"]);
        ns(&[
            "ip",
            "route",
            "add",
            "default",
            "via",
            &node.gateway.to_string(),
        ]);
        // `openshift-sdn.go` `CmdAdd`: the IPAM routes (`pod.go` `getIPAMConfig`: the
        // service network via the gateway, each cluster network, multicast), with the MTU.
        ns(&[
            "ip",
            "route",
            "add",
            &node.service_network,
            "via",
            &node.gateway.to_string(),
            "mtu",
            "1450",
        ]);
        for cn in &node.cluster_networks {
            ns(&["ip", "route", "replace", cn, "dev", "eth0", "mtu", "1450"]);
        }
        ns(&[
            "ip",
            "route",
            "add",
            "224.0.0.0/4",
            "dev",
            "eth0",
            "mtu",
            "1450",
        ]);
        sh(&["ip", "link", "set", &host_veth, "mtu", "1450", "up"]);
        ovs.vsctl(&[
            "add-port",
            "br0",
            &host_veth,
            "--",
            "set",
            "Interface",
            &host_veth,
            &format!("external_ids=sandbox=\"{sandbox}\",ip=\"{}\"", p.ip),
        ]);
        // `ovscontroller.go` `SetPodBandwidth`: pod ingress as a linux-htb QoS row on the port
        // (tagged with the sandbox), pod egress as the interface's policing rate in kbit/s
        // (its bit/s divided by 1024, as upstream divides).
        if let Some((ingress, egress)) = p.bandwidth {
            if ingress > 0 {
                ovs.vsctl(&[
                    "--",
                    "set",
                    "Port",
                    &host_veth,
                    "qos=@q",
                    "--",
                    "--id=@q",
                    "create",
                    "QoS",
                    "type=linux-htb",
                    &format!("other_config:max-rate={ingress}"),
                    &format!("external_ids:sandbox={sandbox}"),
                ]);
            }
            if egress > 0 {
                ovs.vsctl(&[
                    "set",
                    "Interface",
                    &host_veth,
                    &format!("ingress_policing_rate={}", egress / 1024),
                ]);
            }
        }
        let ofport: u32 = ovs
            .vsctl(&["get", "Interface", &host_veth, "ofport"])
            .trim()
            .parse()
            .expect("an ofport");
        on_bridge.push((ofport, p.ip, p.vnid));
        for (file, text) in lease_files(p.ip, &sandbox, "eth0") {
            std::fs::create_dir_all(lease_dir).expect("lease directory");
            std::fs::write(lease_dir.join(file), text).expect("a lease");
        }
        wired.push(WiredPod {
            spec: p.clone(),
            sandbox,
            host_veth,
            ofport,
            netns,
        });
    }
    load_rows(ovs, node, remote, &on_bridge);
    sync_chains(ovs, node);
    std::fs::create_dir_all(conf_dir).expect("CNI config directory");
    let conf = conf_dir.join(CNI_CONF_FILE);
    std::fs::write(&conf, cni_conf_text()).expect("the CNI config file");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o600))
            .expect("chmod the CNI config file");
    }
    wired
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_subnet_cookie_is_the_first_four_bytes_of_the_uid_hash() {
        // SHA-256("abc") = ba7816bf...
        assert_eq!(host_subnet_cookie("abc"), 0xba78_16bf);
    }

    #[test]
    fn cni_conf_is_what_openshift_sdn_writes() {
        let v: serde_json::Value = serde_json::from_str(cni_conf_text()).unwrap();
        assert_eq!(v["name"], CNI_NETWORK);
        assert_eq!(v["type"], "openshift-sdn");
        assert_eq!(v["cniVersion"], "0.3.1");
    }

    #[test]
    fn egress_marks_keep_kube_s_bits_clear() {
        assert_eq!(egress_mark(11, 14), 11);
        assert_eq!(egress_mark(0, 14), 0xff00_0000);
        // Bit 14 (kube-proxy's masquerade bit) and 15 (kubelet's drop bit) moved up.
        assert_eq!(egress_mark(0x4000, 14), 0x0100_0000);
        assert_eq!(egress_mark(0x8000, 14), 0x1000_0000);
    }

    #[test]
    fn version_note_and_pod_mac() {
        assert_eq!(version_note(Plugin::Multitenant), "01.0D");
        assert_eq!(
            version_row(Plugin::NetworkPolicy),
            "table=253, actions=note:02.0D"
        );
        assert_eq!(pod_mac(Ipv4Addr::new(10, 128, 2, 5)), "0a:58:0a:80:02:05");
    }
}
