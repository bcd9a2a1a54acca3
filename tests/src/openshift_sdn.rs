//! openshift-sdn's node, as its own code leaves it: the flow rows, OVSDB rows, devices, routes,
//! iptables chains, nftables table and files its node process and CNI plugin make, for the tests
//! of mixed clusters and of taking a running node over. openshift-sdn is Go and cannot be built
//! here, so what is made is its node's *state*, from a transcription of its code at one named
//! version. This is the one place that transcription lives. Everything set here names the
//! upstream `file:line` it comes from (paths under `pkg/network/node/` unless said otherwise;
//! `openshift-sdn.go` is `pkg/cmd/openshift-sdn-cni/openshift-sdn.go`, `cmd.go` and `sdn.go` are
//! in `pkg/cmd/openshift-sdn-node/`, `ovs.go` and `parse.go` are in `pkg/util/ovs/`, `common/…`
//! is `pkg/network/common/…`, "vendor k8s iptables.go" is
//! `vendor/k8s.io/kubernetes/pkg/util/iptables/iptables.go`, `*_linux.go` are
//! `vendor/github.com/vishvananda/netlink/` v1.1.0's, `backend.go`, `lock.go`, `allocator.go` and
//! `host-local/main.go` are the vendored host-local v0.6.0's under
//! `vendor/github.com/containernetworking/plugins/plugins/ipam/host-local/`), and keeps its text
//! and order (the facts carry over, not the code).
//!
//! Upstream: github.com/openshift/sdn, commit 18a57d7, whose `ovscontroller.go:186` has
//! `ruleVersion = 13`: the note in table 253 is `<plugin>.0D` with the plugin id of
//! `node.go:122-135` (00 subnet, 01 multitenant, 02 networkpolicy).
//!
//! **Audit.** Audited line by line against openshift/sdn 18a57d7 (2026-11-27): every OVSDB
//! column, flow row, route, address, MAC, iptables rule and file compared with the code that
//! makes it. Found and fixed: tun0's `mac` was pinned (upstream reads `mac_in_use`) and the
//! node's MAC was given rather than read from the interface holding the node IP; tun0's routes
//! had `proto kernel` and the service route `scope link`, its address no broadcast, the kernel's
//! local-subnet route was left and `ip_forward` not set; pod routes carried `mtu 1450` (upstream:
//! the routable MTU, none by default) and `scope link`, eth0 had no broadcast, veths
//! txqueuelen 1000 (upstream 0, 1000 on the host end only with an ingress limit), no nftables
//! table; leases were in host-local v1.x's format (`<id>\r\n<ifname>`, 0644) instead of the
//! vendored v0.6.0's (`<id>`, 0600); the networkpolicy plugin had no rows at all; the
//! `OPENSHIFT-SDN-CANARY` chains were missing; the chain sync never flushed a chain holding
//! stale rules and ran after the bridge instead of before; the restart's already-set-up test
//! checked only the note and did nothing when set up (upstream still syncs the chains and
//! re-adds its start rows), and a reattached pod lost its bandwidth; the VNID-row removal was
//! named after a function that does not exist and matched `reg0=V, reg1=V` (upstream:
//! `SyncVNIDRules`, `table=80, reg1=V`, hourly); the egress-IP group was added without the
//! delete that replaces it, with another bucket text, outside a bundle; pod re-flows deleted in
//! four commands instead of one bundle.
//!
//! **Not modelled, and why.**
//! - The CNI server's state, `/var/run/openshift-sdn/cniserver/` (directory 0700, `config.json`
//!   `{"mtu":1450}` 0444, the Unix socket 0600; `common/cniserver/cniserver.go:141-195`,
//!   `pod.go:162-172`): it belongs to the running process (a socket nobody listens on once it
//!   is stopped) and the tests drive no CNI call through it.
//! - The kube-proxy openshift-sdn runs in-process (`cmd.go:181-186`, `kube_proxy.go`): its
//!   `KUBE-*` chains and sysctls are kube-proxy's state, not the SDN node's.
//! - Multicast: `PodSpec` has no multicast flag, so every namespace is multicast-disabled, for
//!   which a pod ADD's `UpdateLocalMulticastFlows` only deletes (`pod.go:283-293`,
//!   `ovscontroller.go:742-764`); [`local_multicast_rows`] is there for tests that enable it.
//! - An `--mtu-override` (`node.go:155-160`, `cmd.go:273-290`): the routable MTU is 0, so no
//!   route has an `mtu`; with an override every tun0 and pod route would carry it.
//! - NetworkPolicy objects (the policy branches of `networkpolicy.go:407-503`), EgressNetwork
//!   Policies, egress IPs hosted on this node (`iptables.go:288-308`), the fixed-VNID HostSubnet
//!   branch (`ovscontroller.go:721-723`), macvlan pods (`openshift-sdn.go:252-286`), the
//!   AlibabaCloud metadata address (`openshift-sdn.go:142-145`), bandwidth annotation limits
//!   (`bandwidth.go:27-38`), the reattach's CRI sandbox check and pod kills
//!   (`node.go:386-391, 417-435`), and the iptables Monitor's reload when the canary goes
//!   (vendor k8s iptables.go:584-617): none of them is in the states the tests build.
//! - host-local's own choice of addresses (`.2`, `.3`, ... round robin): the tests give each
//!   pod its address.
//!
//! **Harness, not openshift-sdn's** (flagged where they are done): br0's
//! `datapath_type=netdev` (no OVS kernel module here), `ethtool -K eth0 tx off` in pods (the
//! userspace datapath does not complete offloaded checksums), the waits for br0's management
//! socket, tun0 and its `mac_in_use`, [`node_uplink`] for a node with no underlay, and a
//! node's rows loaded as one bundle rather than one per upstream transaction (the same adds,
//! the same end state).

use std::net::Ipv4Addr;

/// The upstream commit transcribed.
pub const UPSTREAM_COMMIT: &str = "18a57d7";
/// `ovscontroller.go:186` `ruleVersion`.
pub const RULE_VERSION: u8 = 13;
/// `ovscontroller.go:188` `ruleVersionTable`.
pub const RULE_VERSION_TABLE: u8 = 253;
/// The CNI network name of its pods' host-local leases (`pod.go:147`, host-local's directory
/// `<dataDir>/<name>`, `backend/disk/backend.go:45`) and of its CNI config file (`sdn.go:54`).
pub const CNI_NETWORK: &str = "openshift-sdn";
/// Its CNI config file's name in the CNI config directory (`sdn.go:14`).
pub const CNI_CONF_FILE: &str = "80-openshift-network.conf";
/// The chain its iptables Monitor keeps in `mangle`, `nat` and `filter` (`cmd.go:193-197`).
pub const CANARY_CHAIN: &str = "OPENSHIFT-SDN-CANARY";
/// The pod's nftables table (`openshift-sdn.go:120`, family `ip`).
pub const BLOCK_OUTPUT_TABLE: &str = "openshift-block-output";

/// The plugin (`node.go:122-135`: the plugin id in the version note).
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

/// What the node's state is made of (`ovscontroller.go:220` `SetupOVS` arguments and the
/// node's fields, `node.go:110-187`).
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
    /// Its gateway, tun0's address: the subnet's address with the last octet `|1`
    /// (`common/common.go:208-211`, `sdn_controller.go:125`); callers pass that.
    pub gateway: Ipv4Addr,
    /// The node's IP (`localIP`): an interface of the node's namespace must hold it (its MAC
    /// is `localMAC`, `node.go:116, 189-208`).
    pub node_ip: Ipv4Addr,
    /// The VXLAN port (`common/common.go:76-80`, 4789 by default).
    pub vxlan_port: u16,
}

/// The two MACs openshift-sdn's base rows carry, read from the node as it reads them (never
/// chosen by the fixture).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Macs {
    /// `localMAC`: the MAC of the node's interface holding the node IP (`node.go:116`,
    /// `validateNodeIP` at `node.go:189-208`).
    pub node_mac: String,
    /// `tunMAC`: tun0's `mac_in_use` (`ovscontroller.go:875-888` `ensureTunMAC`); tun0's MAC is
    /// whatever the device got, since `SetupOVS` never sets it (`ovscontroller.go:239`).
    pub tun_mac: String,
}

/// `ovscontroller.go:195-200` `getVersionNote`: `<plugin id>.<rule version>`, two hex digits
/// each.
pub fn version_note(plugin: Plugin) -> String {
    format!("{:02X}.{:02X}", plugin.id(), RULE_VERSION)
}

/// `ovscontroller.go` `SetupOVS`: the base rows, in its order (`ovscontroller.go:254-378`).
pub fn setup_ovs_rows(n: &Node, macs: &Macs) -> Vec<String> {
    let mut r = Vec::new();
    let (sub, gw) = (&n.local_subnet, n.gateway);
    // Table 0 (ovscontroller.go:253-276).
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

    // Table 10 (:278-286).
    r.push(format!(
        "table=10, priority=210, ip, nw_dst={gw}, eth_dst={}, actions=set_field:{}->eth_dst, resubmit:10",
        macs.node_mac, macs.tun_mac
    ));
    r.push(format!(
        "table=10, priority=200, ip, nw_dst={sub}, eth_dst={}, actions=move:nw_dst->eth_dst[0..31], set_field:0a:58:00:00:00:00/ff:ff:00:00:00:00->eth_dst, resubmit:10",
        macs.node_mac
    ));
    r.push("table=10, priority=0, actions=drop".to_string());

    // Tables 20, 25, 27, 30 (:288-303).
    r.push(format!(
        "table=20, priority=300, udp, udp_dst={}, actions=drop",
        n.vxlan_port
    ));
    r.push("table=20, priority=0, actions=drop".to_string());
    r.push("table=25, priority=0, actions=drop".to_string());
    r.push("table=27, priority=0, actions=drop".to_string());
    r.push("table=30, priority=0, actions=goto_table:31".to_string());

    // Table 31 (:305-325).
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

    // Tables 40-90 (:327-349).
    r.push("table=40, priority=0, actions=drop".to_string());
    r.push("table=50, priority=0, actions=drop".to_string());
    r.push("table=60, priority=200, actions=output:2".to_string());
    r.push("table=70, priority=0, actions=drop".to_string());
    r.push(format!(
        "table=80, priority=300, ip, nw_src={gw}/32, actions=output:NXM_NX_REG2[]"
    ));
    r.push("table=80, priority=0, actions=drop".to_string());
    r.push("table=90, priority=0, actions=drop".to_string());
    // Tables 99-101 (:351-366).
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
    // Tables 110-120 (:368-378).
    r.push("table=110, priority=0, actions=drop".to_string());
    r.push("table=111, priority=100, actions=goto_table:120".to_string());
    r.push("table=120, priority=0, actions=drop".to_string());
    r
}

/// The plugin's own rows at its `Start` (`node.go:324`), in its order: `singletenant.go:27-31`
/// (everything allowed), `multitenant.go:49-53` (VNID 0 allowed both ways), or
/// `networkpolicy.go:155-177` (services and replies skip policy; pod-network connections are
/// committed to conntrack, for every pair of cluster networks). The networkpolicy text keeps
/// upstream's space before the comma (`:159`).
pub fn plugin_start_rows(n: &Node) -> Vec<String> {
    match n.plugin {
        Plugin::Subnet => vec![
            // singletenant.go:29-30
            "table=27, priority=500, actions=goto_table:30".to_string(),
            "table=80, priority=200, actions=output:NXM_NX_REG2[]".to_string(),
        ],
        Plugin::Multitenant => vec![
            // multitenant.go:50-52
            "table=27, priority=500, actions=goto_table:30".to_string(),
            "table=80, priority=200, reg0=0, actions=output:NXM_NX_REG2[]".to_string(),
            "table=80, priority=200, reg1=0, actions=output:NXM_NX_REG2[]".to_string(),
        ],
        Plugin::NetworkPolicy => {
            let mut r = vec![
                // networkpolicy.go:159
                format!(
                    "table=27, priority=300, ip, nw_dst={} , actions=goto_table:30",
                    n.service_network
                ),
                // networkpolicy.go:162-163
                "table=80, priority=200, ip, ct_state=+rpl, actions=output:NXM_NX_REG2[]"
                    .to_string(),
                "table=27, priority=200, ip, ct_state=+rpl, actions=goto_table:30".to_string(),
            ];
            // networkpolicy.go:173-177
            for scn in &n.cluster_networks {
                for dcn in &n.cluster_networks {
                    r.push(format!("table=30, priority=100, ip, nw_src={scn}, nw_dst={dcn}, ct_state=-rpl, actions=ct(commit,table=31)"));
                }
            }
            r
        }
    }
}

/// `ovscontroller.go:386-393` `FinishSetupOVS`: the version note, written last
/// (`node.go:358`).
pub fn version_row(plugin: Plugin) -> String {
    format!(
        "table={RULE_VERSION_TABLE}, actions=note:{}",
        version_note(plugin)
    )
}

/// `ovscontroller.go:461-480` `setupPodFlows`: a pod's rows (`:469-471, 474, 477`).
pub fn pod_rows(ofport: u32, ip: Ipv4Addr, vnid: u32) -> Vec<String> {
    let o = ip.octets();
    // ovscontroller.go:466
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

/// The rows a VNID in use on the node gets, the plugin's `EnsureVNIDRules` (`pod.go:531`):
/// none for the subnet plugin (`singletenant.go:59-60`); for multitenant one table-80 row,
/// none for VNID 0, which its start rows allow (`multitenant.go:118-137`, row `:133`); for
/// networkpolicy the namespace is marked in use and synced (`networkpolicy.go:550-565`,
/// `342-347`, `358-379`), and `generateNamespaceFlows` (`:395-405`) writes, for a namespace
/// with no NetworkPolicy (the only kind modelled), "all ingress accepted" (`:431-433`) then "all
/// egress accepted" (`:480-482`), VNID 0 included. (Its `SetUpPod` adds no per-pod rows then:
/// with no policy, `refreshPodNetworkPolicies` triggers no sync (`:1114-1128`), so no
/// isolation rows (`:318-326`); those rows, when there are, go at the next sync (`:372-375`),
/// before the state a running node leaves.)
pub fn vnid_rows(plugin: Plugin, vnid: u32) -> Vec<String> {
    match plugin {
        Plugin::Subnet => Vec::new(),
        Plugin::Multitenant if vnid == 0 => Vec::new(),
        Plugin::Multitenant => vec![format!(
            "table=80, priority=100, reg0={vnid}, reg1={vnid}, actions=output:NXM_NX_REG2[]"
        )],
        Plugin::NetworkPolicy => vec![
            format!("table=80, priority=50, reg1={vnid}, actions=output:NXM_NX_REG2[]"),
            format!("table=27, priority=50, reg0={vnid}, actions=goto_table:30"),
        ],
    }
}

/// `ovscontroller.go:711-714` `hostSubnetCookie`: the first four bytes of the SHA-256 of the
/// HostSubnet's UID.
pub fn host_subnet_cookie(uid: &str) -> u32 {
    use sha2::Digest;
    let h = sha2::Sha256::digest(uid.as_bytes());
    u32::from_be_bytes([h[0], h[1], h[2], h[3]])
}

/// `ovscontroller.go:716-730` `AddHostSubnetRules`: a remote node's rows (`:720, 725-726`;
/// without the fixed-VNID annotation).
pub fn host_subnet_rows(uid: &str, host_ip: Ipv4Addr, subnet: &str) -> Vec<String> {
    let c = host_subnet_cookie(uid);
    vec![
        format!("table=10, priority=100, cookie=0x{c:08x}, tun_src={host_ip}, actions=goto_table:30"),
        format!("table=50, priority=100, cookie=0x{c:08x}, arp, nw_dst={subnet}, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:{host_ip}->tun_dst,output:1"),
        format!("table=90, priority=100, cookie=0x{c:08x}, ip, nw_dst={subnet}, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:{host_ip}->tun_dst,output:1"),
    ]
}

/// `ovscontroller.go:766-781` `UpdateVXLANMulticastFlows`: the one table-111 row (its per-VTEP
/// actions sorted as strings, `:774`; a byte-wise sort is Go's `sort.Strings`).
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

/// `ovscontroller.go:742-764` `UpdateLocalMulticastFlows`, enabled: a multicast-enabled
/// tenant's rows (`:746`, `:758`).
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

/// One of openshift-sdn's iptables chains (`iptables.go:79-85` `Chain`): made in `table`, jumped
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

/// `iptables.go:177-286` `getNodeIPTablesChains`: the node's chains, in its order (the same
/// chain may appear twice, jumped to from two built-in chains). `masquerade_bit`: kube-proxy's
/// (`--masquerade-bit`, 14 by default; `sdn.go:32`, `node.go:145-148`), written `%#x` of
/// `1<<bit` (`iptables.go:67`).
#[rustfmt::skip]
pub fn iptables_chains(
    cluster_networks: &[String],
    vxlan_port: u16,
    masquerade_bit: u32,
) -> Vec<Chain> {
    let port = vxlan_port.to_string();
    let bit = format!("{:#x}", 1u32 << masquerade_bit);
    let chain = |table, name, src_chain, src_rule: &[&str], rules: Vec<Vec<String>>| Chain {
        table, name, src_chain, src_rule: args(src_rule), rules,
    };
    let overrides = ["-m", "comment", "--comment", "firewall overrides"];
    // iptables.go:201-217
    let mut masq = vec![args(&["-m", "mark", "--mark", &format!("{bit}/{bit}"), "-j", "RETURN"])];
    let mut masq2 = Vec::new();
    let mut filter = Vec::new();
    for cn in cluster_networks.iter().map(String::as_str) {
        masq.push(args(&["-s", cn, "-m", "comment", "--comment", "masquerade pod-to-external traffic", "-j", "OPENSHIFT-MASQUERADE-2"]));
        masq2.push(args(&["-d", cn, "-m", "comment", "--comment", "masquerade pod-to-external traffic", "-j", "RETURN"]));
        filter.push(args(&["-s", cn, "-m", "comment", "--comment", "attempted resend after connection close", "-m", "conntrack", "--ctstate", "INVALID", "-j", "DROP"]));
        filter.push(args(&["-d", cn, "-m", "comment", "--comment", "forward traffic from SDN", "-j", "ACCEPT"]));
        filter.push(args(&["-s", cn, "-m", "comment", "--comment", "forward traffic to SDN", "-j", "ACCEPT"]));
    }
    masq2.push(args(&["-j", "MASQUERADE"]));
    let notrack = || vec![args(&["-p", "udp", "--dport", &port, "-j", "NOTRACK"])];
    let no_conntrack = ["-m", "comment", "--comment", "disable conntrack for vxlan"];
    vec![
        // iptables.go:182-191
        chain("filter", "OPENSHIFT-FIREWALL-ALLOW", Some("INPUT"), &overrides, vec![
            args(&["-p", "udp", "--dport", &port, "-m", "comment", "--comment", "VXLAN incoming", "-j", "ACCEPT"]),
            args(&["-i", "tun0", "-m", "comment", "--comment", "from SDN to localhost", "-j", "ACCEPT"]),
        ]),
        // iptables.go:192-198
        chain("filter", "OPENSHIFT-ADMIN-OUTPUT-RULES", Some("FORWARD"),
            &["-i", "tun0", "!", "-o", "tun0", "-m", "comment", "--comment", "administrator overrides"], Vec::new()),
        // iptables.go:220-226
        chain("nat", "OPENSHIFT-MASQUERADE", Some("POSTROUTING"),
            &["-m", "comment", "--comment", "rules for masquerading OpenShift traffic"], masq),
        // iptables.go:227-231
        chain("nat", "OPENSHIFT-MASQUERADE-2", None, &[], masq2),
        // iptables.go:232-238
        chain("filter", "OPENSHIFT-FIREWALL-FORWARD", Some("FORWARD"), &overrides, filter),
        // iptables.go:244-253
        chain("filter", "OPENSHIFT-BLOCK-OUTPUT", Some("OUTPUT"), &overrides, vec![
            args(&["-p", "tcp", "-m", "tcp", "--dport", "22623", "--syn", "-j", "REJECT"]),
            args(&["-p", "tcp", "-m", "tcp", "--dport", "22624", "--syn", "-j", "REJECT"]),
        ]),
        // iptables.go:254-260
        chain("filter", "OPENSHIFT-BLOCK-OUTPUT", Some("FORWARD"), &overrides, Vec::new()),
        // iptables.go:265-273
        chain("raw", "OPENSHIFT-NOTRACK", Some("OUTPUT"), &no_conntrack, notrack()),
        // iptables.go:274-282
        chain("raw", "OPENSHIFT-NOTRACK", Some("PREROUTING"), &no_conntrack, notrack()),
    ]
}

/// Runs `argv` inside network namespace `netns` (`ip netns exec`), `stdin` fed to it: its exit
/// code (`None`: killed by a signal) and its stdout and stderr.
fn run_in(netns: &str, argv: &[&str], stdin: Option<&str>) -> (Option<i32>, String) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(crate::harness::which("ip").unwrap_or_else(|| "ip".into()))
        .args(["netns", "exec", netns])
        .args(argv)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("ip netns exec {netns} {}: {e}", argv.join(" ")));
    if let Some(text) = stdin {
        let mut w = child.stdin.take().expect("the child's stdin");
        w.write_all(text.as_bytes())
            .expect("write the child's stdin");
    }
    let out = child.wait_with_output().expect("wait for the child");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// One iptables call as kube's runner makes it (vendor k8s iptables.go:465-474, arguments by
/// `makeFullArgs`, :646-648): iptables >= 1.6.1's wait flags `-w 5 -W 100000` (:674-682,
/// :188-198), the operation, the chain, `-t <table>`, the rule. Its exit code.
fn iptables(netns: &str, op: &str, table: &str, chain: &str, rule: &[String]) -> i32 {
    let mut argv = vec![
        "iptables", "-w", "5", "-W", "100000", op, chain, "-t", table,
    ];
    argv.extend(rule.iter().map(String::as_str));
    let (code, out) = run_in(netns, &argv, None);
    code.unwrap_or_else(|| panic!("{} was killed: {out}", argv.join(" ")))
}

/// vendor k8s iptables.go:254-270 `EnsureChain`: `-N`, exit status 1 meaning it existed.
/// Whether it existed.
fn ensure_chain(netns: &str, table: &str, chain: &str) -> bool {
    match iptables(netns, "-N", table, chain, &[]) {
        0 => false,
        1 => true,
        c => panic!("iptables -N {chain} -t {table}: exit {c}"),
    }
}

/// vendor k8s iptables.go:301-318 `EnsureRule`: `-C` (:543-562; exit 1: absent), then `-I`
/// (`Prepend`, no position: the top) or `-A` (`Append`) (:45-48). Whether it existed.
fn ensure_rule(netns: &str, position: &str, table: &str, chain: &str, rule: &[String]) -> bool {
    match iptables(netns, "-C", table, chain, rule) {
        0 => return true,
        1 => {}
        c => panic!(
            "iptables -C {chain} -t {table} {}: exit {c}",
            rule.join(" ")
        ),
    }
    let c = iptables(netns, position, table, chain, rule);
    assert_eq!(
        c,
        0,
        "iptables {position} {chain} -t {table} {}",
        rule.join(" ")
    );
    false
}

/// `iptables.go:88-105` `addChainRules`: each rule appended unless it is there. Whether all
/// were there.
fn add_chain_rules(netns: &str, c: &Chain) -> bool {
    let mut all = true;
    for r in &c.rules {
        if !ensure_rule(netns, "-A", c.table, c.name, r) {
            all = false;
        }
    }
    all
}

/// `iptables.go:109-166` `syncIPTableRules` in network namespace `netns`, call for call: the
/// chains in reverse order (`:120`, so that the jumps it prepends end in list order), each
/// `EnsureChain` (`:123-131`), its jump `EnsureRule(Prepend)` in its source chain (`:132-145`),
/// its rules `EnsureRule(Append)` (`:148`), and a chain that existed without all its rules
/// flushed and filled again (`:152-165`: rules of another subnet go). (On a fresh node that
/// flush happens once, to the still empty `OPENSHIFT-BLOCK-OUTPUT` its `FORWARD` entry made.)
pub fn sync_iptables(netns: &str, chains: &[Chain]) {
    for c in chains.iter().rev() {
        let existed = ensure_chain(netns, c.table, c.name);
        if let Some(src) = c.src_chain {
            let mut jump = c.src_rule.clone();
            jump.extend(args(&["-j", c.name]));
            ensure_rule(netns, "-I", c.table, src, &jump);
        }
        if !add_chain_rules(netns, c) && existed {
            // vendor k8s iptables.go:272-284 FlushChain
            let code = iptables(netns, "-F", c.table, c.name, &[]);
            assert_eq!(code, 0, "iptables -F {} -t {}", c.name, c.table);
            add_chain_rules(netns, c);
        }
    }
}

/// `cmd.go:193-197`: the iptables Monitor's first pass (vendor k8s iptables.go:572-582), an
/// empty [`CANARY_CHAIN`] made (`EnsureChain`) in `mangle`, `nat` and `filter`, once the CNI
/// config is written (`cmd.go:188`).
pub fn ensure_canary_chains(netns: &str) {
    for table in ["mangle", "nat", "filter"] {
        ensure_chain(netns, table, CANARY_CHAIN);
    }
}

/// [`sync_iptables`] of the node's chains ([`iptables_chains`] with kube-proxy's default
/// masquerade bit, 14) in the node's namespace (`node.go:311-314`).
pub fn sync_chains(ovs: &crate::harness::Ovs, node: &Node) {
    sync_iptables(
        ovs.netns(),
        &iptables_chains(&node.cluster_networks, node.vxlan_port, 14),
    );
}

/// `sdn.go:45-58` `writeConfigFile`: the CNI config file's bytes (`:51-57`), written with
/// mode 0600 in the CNI config directory as [`CNI_CONF_FILE`] once the node and its proxy have
/// started (`cmd.go:188`).
pub fn cni_conf_text() -> &'static str {
    "\n{\n  \"cniVersion\": \"0.3.1\",\n  \"name\": \"openshift-sdn\",\n  \"type\": \"openshift-sdn\"\n}\n"
}

/// Writes [`cni_conf_text`] as [`CNI_CONF_FILE`] in `conf_dir`, mode 0600 (`sdn.go:51-57`:
/// `ioutil.WriteFile(…, 0600)`).
pub fn write_cni_conf(conf_dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(conf_dir).expect("CNI config directory");
    let conf = conf_dir.join(CNI_CONF_FILE);
    std::fs::write(&conf, cni_conf_text()).expect("the CNI config file");
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o600))
        .expect("chmod the CNI config file");
}

/// Where its pods' leases live (`pod.go:35` `hostLocalDataDir` and the network name,
/// `pod.go:147`): host-local's directory under `root` (`/` on a node).
pub fn lease_dir(root: &std::path::Path) -> std::path::PathBuf {
    root.join("var/lib/cni/networks").join(CNI_NETWORK)
}

/// `host-local` as openshift-sdn runs it (`pod.go:416`: `osdn-host-local`, built from its
/// vendored containernetworking/plugins v0.6.0, `go.mod:151`, `Makefile:10-13`), `Reserve`
/// (`vendor/.../host-local/backend/disk/backend.go:57-82`): under `flock(LOCK_EX)` on the
/// directory itself (`lock.go:28-50`; no `lock` file), the file named by the address created
/// `O_EXCL`, mode 0600, holding `strings.TrimSpace(id)` and nothing else, then
/// `last_reserved_ip.0` (one range, `allocator.go:35-41`), mode 0600, holding the address.
/// `false` when the address is taken.
pub fn host_local_reserve(dir: &std::path::Path, ip: Ipv4Addr, id: &str) -> bool {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // backend.go:41-47: MkdirAll(dir, 0755).
    std::fs::create_dir_all(dir).expect("lease directory");
    let lock = std::fs::File::open(dir).expect("open the lease directory");
    lock.lock().expect("flock the lease directory");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dir.join(ip.to_string()));
    let mut f = match f {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return false,
        Err(e) => panic!("lease of {ip}: {e}"),
    };
    f.write_all(id.trim().as_bytes()).expect("write the lease");
    let mut last = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(dir.join("last_reserved_ip.0"))
        .expect("last_reserved_ip.0");
    last.write_all(ip.to_string().as_bytes())
        .expect("write last_reserved_ip.0");
    true
}

/// openshift-sdn's release of a pod's lease at its DEL (`pod.go:434-441` `ipamDel`, the
/// sandbox as `CNI_CONTAINERID`), as v0.6.0's host-local does it: `cmdDel`
/// (`host-local/main.go:113-140`) → `allocator.Release` (`allocator.go:113-118`, under the
/// directory's flock) → `ReleaseByID` (`backend.go:100-117`): every file of the directory whose
/// `TrimSpace`d content equals the `TrimSpace`d id is removed (errors eaten). Returns the
/// names of the files removed.
pub fn host_local_release_by_id(dir: &std::path::Path, id: &str) -> Vec<String> {
    let lock = std::fs::File::open(dir).expect("open the lease directory");
    lock.lock().expect("flock the lease directory");
    let mut removed = Vec::new();
    for entry in std::fs::read_dir(dir)
        .expect("read the lease directory")
        .flatten()
    {
        let path = entry.path();
        if path.is_dir() {
            continue;
        }
        let Ok(data) = std::fs::read(&path) else {
            continue;
        };
        if String::from_utf8_lossy(&data).trim() == id.trim() && std::fs::remove_file(&path).is_ok()
        {
            removed.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    removed
}

/// The MAC openshift-sdn's CNI plugin gives a pod's interface (`openshift-sdn.go:236`
/// `ip.SetHWAddrByIP` → vendor `plugins/pkg/ip/link.go:194-219`, `pkg/utils/hwaddr/hwaddr.go:29`):
/// `0a:58:` and the four bytes of its address.
pub fn pod_mac(ip: Ipv4Addr) -> String {
    let o = ip.octets();
    format!("0a:58:{:02x}:{:02x}:{:02x}:{:02x}", o[0], o[1], o[2], o[3])
}

/// The pod's nftables transaction (`openshift-sdn.go:119-186` `doNFTablesRules`, run in the
/// pod at `:304-307`) as knftables v0.0.16 (`go.mod:33`) writes it to `nft -f -`
/// (`vendor/sigs.k8s.io/knftables/nftables.go:137-151`): `add table` (`objects.go:69-84`),
/// `add chain`, a base chain with `{ type … hook … priority N ; }` and the `filter` priority
/// written as its number, 0 (`objects.go:132-169`, `util.go:30-37, 47-74`), `add rule`
/// (`objects.go:231-249`; `Concat` joins its parts with spaces). The metadata address is
/// 169.254.169.254: the platform is not AlibabaCloud (`openshift-sdn.go:142-145`).
pub fn pod_nftables_text() -> String {
    let t = format!("ip {BLOCK_OUTPUT_TABLE}");
    let meta = "169.254.169.254";
    [
        // openshift-sdn.go:126
        format!("add table {t}"),
        // :128-130
        format!("add chain {t} block"),
        // :133-139
        format!("add rule {t} block tcp dport {{ 22623, 22624 }} tcp flags syn reject"),
        // :146-153
        format!("add rule {t} block ip daddr {meta} udp dport != 53 reject"),
        // :154-161
        format!("add rule {t} block ip daddr {meta} tcp dport != 53 reject"),
        // :163-168
        format!("add chain {t} output {{ type filter hook output priority 0 ; }}"),
        // :169-172
        format!("add rule {t} output goto block"),
        // :174-179
        format!("add chain {t} forward {{ type filter hook forward priority 0 ; }}"),
        // :180-183
        format!("add rule {t} forward goto block"),
    ]
    .iter()
    .map(|l| format!("{l}\n"))
    .collect()
}

/// A pod to wire as openshift-sdn's pod manager and CNI plugin wire it.
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
    /// Its bandwidth annotations (ingress, egress), bit/s, as `setupPodBandwidth` applies them
    /// (`pod.go:443-468`); a 0 is an absent annotation (upstream refuses values under 1k,
    /// `bandwidth.go:27-38`).
    pub bandwidth: Option<(u64, u64)>,
}

/// A pod openshift-sdn wired: its network namespace (gone with it), host veth and ofport.
#[derive(Debug)]
pub struct WiredPod {
    /// What it was made from.
    pub spec: PodSpec,
    /// The sandbox (container) ID in its port's `external_ids:sandbox` and its lease.
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

/// openshift-sdn's overlay MTU: the ClusterNetwork's `mtu`, 1450 by default
/// (`common/common.go:82-86`); tun0's `mtu_request` and its veths' MTU. The routable MTU
/// (routes' `mtu`) is 0, none, without an `--mtu-override` (`node.go:155-160`).
pub const OVERLAY_MTU: u32 = 1450;

/// Runs the command line `cmd` (split at whitespace: no argument here holds a space) in the
/// node's namespace, panicking with its error.
fn node_sh(ovs: &crate::harness::Ovs, cmd: &str) -> String {
    ovs.exec_in_netns(&cmd.split_whitespace().collect::<Vec<_>>())
        .unwrap_or_else(|e| panic!("{cmd}: {e}"))
}

/// The prefix length of a CIDR.
fn prefix_len(cidr: &str) -> u8 {
    cidr.split('/')
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{cidr} is not a CIDR"))
}

/// `sdn_controller.go:104-117`: IPv4 forwarding on in the node's namespace if it is not, on
/// every start, before the already-set-up test.
pub fn enable_ip_forward(ovs: &crate::harness::Ovs) {
    if node_sh(ovs, "sysctl -n net.ipv4.ip_forward").trim() != "1" {
        node_sh(ovs, "sysctl -qw net.ipv4.ip_forward=1");
    }
}

/// `ovs.go:247-273` `AddPort` on br0: `--may-exist add-port br0 <port>`, then
/// `-- set Interface <port>` with `ofport_request` (when one is asked for) and `props` (only
/// when either is there), then its ofport (`GetOFPort`, `:228-245`): a failure when it is -1 or
/// not the one asked for.
fn add_port(
    ovs: &crate::harness::Ovs,
    port: &str,
    ofport_request: Option<u32>,
    props: &[String],
) -> u32 {
    let mut a = args(&["--may-exist", "add-port", "br0", port]);
    if ofport_request.is_some() || !props.is_empty() {
        a.extend(args(&["--", "set", "Interface", port]));
        if let Some(o) = ofport_request {
            a.push(format!("ofport_request={o}"));
        }
        a.extend(props.iter().cloned());
    }
    ovs.vsctl(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let got = ovs.vsctl(&["get", "Interface", port, "ofport"]);
    let ofport: i64 = got
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{port}'s ofport {got:?}"));
    assert!(
        ofport != -1,
        "error on port {port}: {}",
        ovs.vsctl(&["get", "Interface", port, "error"])
    );
    if let Some(o) = ofport_request {
        assert_eq!(ofport, i64::from(o), "{port}: ofport did not match request");
    }
    u32::try_from(ofport).expect("an ofport")
}

/// `sdn_controller.go:162-206` `setup` with `ovscontroller.go:220-249` `SetupOVS`'s OVSDB half,
/// in their order: br0 made afresh (`ovscontroller.go:221-229`: `--if-exists del-br`,
/// `--may-exist add-br` with `fail_mode=secure` and OpenFlow 1.3, `set-frags nx-match`; `ovs.go:
/// 209-226, 287-290`), vxlan0 on ofport 1 (`:234`), tun0 on ofport 2 with `type=internal` and
/// `mtu_request` only (`:239`: its MAC is the device's own, read back by [`live_macs`]; the
/// `DeletePort`s before each, `:233, 238`, are no-ops on a new bridge), tun0's address with its
/// broadcast (`sdn_controller.go:169-172`; netlink's `AddrAdd` fills `brd` in,
/// `addr_linux.go:133-147`), tun0 up (`:177-179`), a `scope link` route per cluster network
/// (`:180-191`) and one with no scope set, so universe, for the service network (`:193-200`;
/// netlink's defaults: `proto boot`, no `mtu` while the routable MTU is 0,
/// `route_linux.go:643-646, 665`), and the kernel's route of the local subnet on tun0 deleted
/// (`:70-101`, deferred at `:173-175`). Returns the subnet's prefix length.
///
/// Harness, not openshift-sdn's: br0's `datapath_type=netdev` (no OVS kernel module here; a
/// production node's br0 has the kernel datapath), and the waits for br0's management socket
/// and tun0 to appear.
pub fn setup_bridge(ovs: &crate::harness::Ovs, node: &Node) -> u8 {
    let prefix = prefix_len(&node.local_subnet);
    // ovscontroller.go:221-228 (ovs.go:209-226).
    ovs.vsctl(&["--if-exists", "del-br", "br0"]);
    ovs.vsctl(&[
        "--may-exist",
        "add-br",
        "br0",
        "--",
        "set",
        "Bridge",
        "br0",
        "fail_mode=secure",
        "protocols=OpenFlow13",
        // Harness: the userspace datapath (no OVS kernel module on this machine).
        "datapath_type=netdev",
    ]);
    // Harness: wait for the bridge's management socket.
    let mgmt = ovs.mgmt_sock("br0");
    assert!(
        crate::harness::wait_until(std::time::Duration::from_secs(10), || mgmt.exists()),
        "br0's management socket"
    );
    // ovscontroller.go:229 (ovs.go:287-290).
    ovs.ofctl(&["set-frags", "br0", "nx-match"]);
    // ovscontroller.go:234.
    add_port(
        ovs,
        "vxlan0",
        Some(1),
        &args(&[
            "type=vxlan",
            "options:remote_ip=\"flow\"",
            "options:key=\"flow\"",
            &format!("options:dst_port={}", node.vxlan_port),
        ]),
    );
    // ovscontroller.go:239: type and MTU, nothing else (no `mac`).
    add_port(
        ovs,
        "tun0",
        Some(2),
        &args(&["type=internal", &format!("mtu_request={OVERLAY_MTU}")]),
    );
    // Harness: wait for the tun0 device.
    let tun_up = crate::harness::wait_until(std::time::Duration::from_secs(10), || {
        ovs.exec_in_netns(&["ip", "link", "show", "tun0"]).is_ok()
    });
    assert!(tun_up, "tun0 did not appear");
    let (gw, sub) = (node.gateway, &node.local_subnet);
    // sdn_controller.go:171-172 (netlink's AddrAdd sets the broadcast: `brd +`).
    node_sh(ovs, &format!("ip addr add {gw}/{prefix} brd + dev tun0"));
    // sdn_controller.go:177-179.
    node_sh(ovs, "ip link set tun0 up");
    // sdn_controller.go:180-191: scope link, netlink's proto boot (iproute2's default too).
    for cn in &node.cluster_networks {
        node_sh(ovs, &format!("ip route add {cn} dev tun0 scope link"));
    }
    // sdn_controller.go:193-200: no scope set, so netlink's universe (global).
    let svc = &node.service_network;
    node_sh(ovs, &format!("ip route add {svc} dev tun0 scope global"));
    // sdn_controller.go:173-175 and 70-101: the kernel's route of the local subnet on tun0
    // (made by the address) is deleted.
    node_sh(
        ovs,
        &format!("ip route del {sub} dev tun0 proto kernel scope link src {gw}"),
    );
    prefix
}

/// Not openshift-sdn's: the node's own uplink, which every real node has before openshift-sdn
/// starts, for a node with no underlay in the test (a multi-node test's nodes have theirs,
/// `br-phy`): a dummy interface `ens3` holding the node IP (`/24`), up. On a kernel without
/// the dummy driver, `ens3` is one end of a veth pair whose other end (`ens3-peer`, up) stays
/// in the node's namespace.
pub fn node_uplink(ovs: &crate::harness::Ovs, node: &Node) {
    if ovs
        .exec_in_netns(&["ip", "link", "add", "ens3", "type", "dummy"])
        .is_err()
    {
        node_sh(ovs, "ip link add ens3 type veth peer name ens3-peer");
        node_sh(ovs, "ip link set ens3-peer up");
    }
    node_sh(ovs, &format!("ip addr add {}/24 dev ens3", node.node_ip));
    node_sh(ovs, "ip link set ens3 up");
}

/// The MACs openshift-sdn's rows carry, read from the node as it reads them: tun0's
/// `mac_in_use` (`ovscontroller.go:875-888`; on the userspace datapath filled in a moment after
/// the port is added: waited for, this machine's need) and the MAC of the interface holding
/// the node IP (`node.go:189-208`; none is a failure there too, `ovscontroller.go:244-246`).
pub fn live_macs(ovs: &crate::harness::Ovs, node: &Node) -> Macs {
    let mut tun_mac = String::new();
    let read = crate::harness::wait_until(std::time::Duration::from_secs(10), || {
        let v = ovs
            .try_vsctl(&["get", "Interface", "tun0", "mac_in_use"])
            .unwrap_or_default();
        let v = v.trim();
        // ovscontroller.go:883: 19 characters, quoted.
        if v.len() == 19 && v.starts_with('"') && v.ends_with('"') {
            tun_mac = v[1..18].to_string();
            true
        } else {
            false
        }
    });
    assert!(read, "tun0 has no mac_in_use");
    let addrs = ovs
        .exec_in_netns(&["ip", "-j", "addr", "show"])
        .unwrap_or_else(|e| panic!("ip addr: {e}"));
    let addrs: serde_json::Value = serde_json::from_str(&addrs).expect("ip -j addr");
    let ip = node.node_ip.to_string();
    let node_mac = addrs
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| {
            l["addr_info"]
                .as_array()
                .is_some_and(|a| a.iter().any(|i| i["local"] == ip.as_str()))
        })
        .and_then(|l| l["address"].as_str())
        .unwrap_or_else(|| {
            panic!(
                "no interface of the node holds its IP {ip}: openshift-sdn fails to start \
                 there (\"failed to find the MAC address for local IP\"); give the node one"
            )
        })
        .to_string();
    Macs { node_mac, tun_mac }
}

/// `ovs-ofctl -O OpenFlow13 bundle br0 -` (`ovs.go:403-415`, `-O OpenFlow13` at `:145-149`):
/// one transaction, applied whole or not at all, one line per change as upstream's
/// transaction writes them: `flow add <f>` (`:432-437`), `flow delete <f>` (`:439-444`),
/// `group add …` (`:446-448`), `group delete group_id=N` (`:450-452`). Nothing is run for no
/// line (`:409-411`). (The lines go through a file rather than stdin: the same lines.)
pub fn bundle(ovs: &crate::harness::Ovs, lines: &[String]) {
    if lines.is_empty() {
        return;
    }
    let file = ovs.dir().join("openshift-sdn.bundle");
    std::fs::write(&file, lines.join("\n") + "\n").expect("the bundle file");
    ovs.ofctl(&["bundle", "br0", file.to_str().expect("a UTF-8 path")]);
}

/// `flow add` lines for [`bundle`] (`ovs.go:432-437`).
fn flow_adds(rows: &[String]) -> Vec<String> {
    rows.iter().map(|r| format!("flow add {r}")).collect()
}

/// The rows the HostSubnet informer adds (`subnets.go:40-43, 67-98`) once the node's start has
/// returned (`cmd.go:178-183`): each remote node's (`AddHostSubnetRules`), then the table-111
/// row naming them all (`updateVXLANMulticastRules`, after each one; the last one stays). It
/// replaces the base row of the same match; with no remote node it is never written.
fn host_subnet_informer_rows(remote: &[RemoteNode]) -> Vec<String> {
    let mut rows = Vec::new();
    for r in remote {
        rows.extend(host_subnet_rows(&r.uid, r.host_ip, &r.subnet));
    }
    if !remote.is_empty() {
        let vteps: Vec<Ipv4Addr> = remote.iter().map(|r| r.host_ip).collect();
        rows.push(vxlan_multicast_row(&vteps));
    }
    rows
}

/// Every row of a node whose br0 was just set up, with `pods` (ofport, address, VNID) on it,
/// the MACs read from the node ([`live_macs`]), in the order of upstream's start
/// (`node.go:298-373`): `SetupOVS`'s base rows (`sdn_controller.go:165`), the plugin's start
/// rows (`node.go:324`), per pod its rows and, the first time its VNID is seen, the VNID's
/// rows (`pod.go:523, 531`), the note last (`node.go:358`); then the HostSubnet informer's
/// rows. (On a fresh node the pods come after all of it, kubelet starting them once the CNI
/// config is written, `cmd.go:188`; networkpolicy's VNID rows come from its sync runner
/// within a second, `networkpolicy.go:183-187`. Neither changes a row.) Harness: the start's
/// rows go as one bundle and the informer's as another, where upstream commits one bundle per
/// transaction: the same adds, the same end state.
pub fn load_rows(
    ovs: &crate::harness::Ovs,
    node: &Node,
    remote: &[RemoteNode],
    pods: &[(u32, Ipv4Addr, u32)],
) {
    let mut rows = setup_ovs_rows(node, &live_macs(ovs, node));
    rows.extend(plugin_start_rows(node));
    let mut seen = std::collections::BTreeSet::new();
    for (ofport, ip, vnid) in pods {
        rows.extend(pod_rows(*ofport, *ip, *vnid));
        if seen.insert(*vnid) {
            rows.extend(vnid_rows(node.plugin, *vnid));
        }
    }
    rows.push(version_row(node.plugin));
    bundle(ovs, &flow_adds(&rows));
    bundle(ovs, &flow_adds(&host_subnet_informer_rows(remote)));
}

/// The names `ovs-vsctl --bare --columns=<column> find <table> <condition>` prints
/// (`ovs.go:321-373` `Find`/`FindOne`).
fn find_one(ovs: &crate::harness::Ovs, table: &str, column: &str, condition: &str) -> Vec<String> {
    ovs.vsctl(&[
        "--bare",
        &format!("--columns={column}"),
        "find",
        table,
        condition,
    ])
    .split_whitespace()
    .map(str::to_string)
    .collect()
}

/// `pod.go:443-468` `setupPodBandwidth` with `ovscontroller.go:528-559` `SetPodBandwidth`, at
/// a pod's ADD and at its reattach (`pod.go:527`), command for command: txqueuelen 1000 on the
/// host veth when there is an ingress limit (`pod.go:451-462`); the ports of the sandbox found
/// by `external_ids:sandbox` (`ovscontroller.go:501-504`) lose their `qos`, and the sandbox's
/// QoS rows are destroyed (`ClearPodBandwidth`, `:506-526`; `ovs.go:300-303, 375-382`); a
/// `linux-htb` QoS row with `other_config:max-rate` (bit/s) and the sandbox in its
/// `external_ids`, set as the port's `qos`, for an ingress limit (`:540-549`); the
/// interface's `ingress_policing_rate` in kbit/s, bit/s divided by 1024, for an egress limit
/// (`:550-556`). No `ingress_policing_burst`, no queues.
pub fn set_pod_bandwidth(
    ovs: &crate::harness::Ovs,
    host_veth: &str,
    sandbox: &str,
    bandwidth: Option<(u64, u64)>,
) {
    let (ingress, egress) = bandwidth.unwrap_or((0, 0));
    if ingress > 0 {
        node_sh(ovs, &format!("ip link set {host_veth} txqueuelen 1000"));
    }
    let by_sandbox = format!("external_ids:sandbox={sandbox}");
    for port in find_one(ovs, "interface", "name", &by_sandbox) {
        ovs.vsctl(&["--if-exists", "clear", "port", &port, "qos"]);
    }
    for qos in find_one(ovs, "qos", "_uuid", &by_sandbox) {
        ovs.vsctl(&["--if-exists", "destroy", "qos", &qos]);
    }
    if ingress > 0 {
        let qos = ovs.vsctl(&[
            "create",
            "qos",
            "type=linux-htb",
            &format!("other_config:max-rate={ingress}"),
            &format!("external_ids=sandbox={sandbox}"),
        ]);
        ovs.vsctl(&["set", "port", host_veth, &format!("qos={}", qos.trim())]);
    }
    if egress > 0 {
        ovs.vsctl(&[
            "set",
            "interface",
            host_veth,
            &format!("ingress_policing_rate={}", egress / 1024),
        ]);
    }
}

/// Multitenant's re-flow of a pod whose namespace's VNID changed (`multitenant.go:60-88`
/// `updatePodNetwork` → `node.go:439-459` → `ovscontroller.go:592-604` `UpdatePod`):
/// `cleanupPodFlows`, one bundle of four deletes (every row matching the pod's address as
/// source or destination, ip and arp, `:482-491`), then `setupPodFlows` with the new VNID, a
/// bundle (`:603`), then `EnsureVNIDRules` of the new VNID, another (`multitenant.go:79`). (The
/// networkpolicy plugin re-flows nothing on a VNID change, `networkpolicy.go:276-282`.)
pub fn update_pod_vnid(
    ovs: &crate::harness::Ovs,
    node: &Node,
    ofport: u32,
    ip: Ipv4Addr,
    vnid: u32,
) {
    assert_eq!(
        node.plugin,
        Plugin::Multitenant,
        "only the multitenant plugin re-flows pods on a VNID change"
    );
    bundle(
        ovs,
        &["ip, nw_dst", "ip, nw_src", "arp, nw_dst", "arp, nw_src"]
            .map(|m| format!("flow delete {m}={ip}")),
    );
    bundle(ovs, &flow_adds(&pod_rows(ofport, ip, vnid)));
    bundle(ovs, &flow_adds(&vnid_rows(node.plugin, vnid)));
}

/// Parses a Go-style integer (`strconv.ParseInt(s, 0, 32)`: `0x` hex or decimal).
fn parse_go_int(s: &str) -> Option<u32> {
    match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// A dumped flow as `ovs.ParseFlow(ParseForDump, …)` reads it (`pkg/util/ovs/parse.go:172-…`):
/// its table (0 when the dump leaves it out), its match items (`key=value` or `key`, split at
/// commas and spaces) and its actions (split at commas).
fn parse_dumped(line: &str) -> (u32, Vec<(String, String)>, Vec<String>) {
    let (m, a) = line.split_once("actions=").unwrap_or((line, ""));
    let fields: Vec<(String, String)> = m
        .split([',', ' '])
        .filter(|f| !f.is_empty())
        .map(|f| {
            let (k, v) = f.split_once('=').unwrap_or((f, ""));
            (k.to_string(), v.to_string())
        })
        .collect();
    let table = fields
        .iter()
        .find(|(k, _)| k == "table")
        .and_then(|(_, v)| parse_go_int(v))
        .unwrap_or(0);
    let actions = a.trim().split(',').map(str::to_string).collect();
    (table, fields, actions)
}

/// `ovs.go:384-401` `DumpFlows`: the lines of `ovs-ofctl dump-flows br0 <filter>` that hold a
/// flow (`cookie=`).
fn dump_flows(ovs: &crate::harness::Ovs, filter: &str) -> Result<Vec<String>, String> {
    Ok(ovs
        .try_ofctl(&["dump-flows", "br0", filter])?
        .lines()
        .filter(|l| l.contains("cookie="))
        .map(str::to_string)
        .collect())
}

/// The plugin's `SyncVNIDRules`, which upstream runs at its start and then hourly
/// (`node.go:366`; nothing removes a VNID's rows when its last pod goes): `FindUnusedVNIDs`
/// (`ovscontroller.go:792-803`, reading every flow, `:808-873`: VNIDs a table-27 row matches as
/// `reg0` or a table-80 row as `reg1`, less those a table-70 row loads into `reg1`, less 0,
/// always in use); then multitenant deletes `table=80, reg1=V` for each, in one bundle
/// (`multitenant.go:139-154`, `:149`), and networkpolicy marks each namespace unused and its
/// sync deletes `table=80, reg1=V` and `table=27, reg0=V` (`networkpolicy.go:567-582`,
/// `395-401`); the subnet plugin does nothing (`singletenant.go:62`). Returns the unused
/// VNIDs, sorted.
pub fn sync_vnid_rules(ovs: &crate::harness::Ovs, node: &Node) -> Vec<u32> {
    if node.plugin == Plugin::Subnet {
        return Vec::new();
    }
    let mut in_use = std::collections::BTreeSet::from([0]);
    let mut policy = std::collections::BTreeSet::new();
    for line in dump_flows(ovs, "").unwrap_or_else(|e| panic!("{e}")) {
        let (table, fields, actions) = parse_dumped(&line);
        let field = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .and_then(|(_, v)| parse_go_int(v))
        };
        match table {
            70 => {
                let load = actions.iter().find_map(|a| {
                    let v = a.strip_prefix("load:")?;
                    let (n, dst) = v.split_once("->")?;
                    dst.contains("REG1").then(|| parse_go_int(n))?
                });
                in_use.extend(load);
            }
            27 => policy.extend(field("reg0")),
            80 => policy.extend(field("reg1")),
            _ => {}
        }
    }
    let unused: Vec<u32> = policy.difference(&in_use).copied().collect();
    let mut deletes = Vec::new();
    for v in &unused {
        deletes.push(format!("flow delete table=80, reg1={v}"));
        if node.plugin == Plugin::NetworkPolicy {
            deletes.push(format!("flow delete table=27, reg0={v}"));
        }
    }
    bundle(ovs, &deletes);
    unused
}

/// `egressip.go:146-157` `getMarkForVNID`: the packet mark of a tenant's egress-IP traffic, a
/// value that is never 0 and keeps kube-proxy's masquerade bit (`masquerade_bit`) and kubelet's
/// drop bit (15, `egressip.go:25`) clear (upstream writes it `0x%08x`).
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

/// `ovscontroller.go:905-940` `SetNamespaceEgressViaEgressIPs` for a tenant whose egress IPs
/// other nodes host (`nodes`: their IPs, in the order given, not sorted), as its one bundle:
/// the tenant's table-101 rows and group deleted (`:907-908`), select group `vnid` with one
/// bucket per node, the VNID as VNI and the node as tunnel destination, `output:vxlan0`
/// (`:922`), the buckets joined by the bare `bucket=` (`ovs.go:446-448`), and the table-101 row
/// committing and sending to it (`:934-938`).
pub fn set_egress_via_remote(ovs: &crate::harness::Ovs, vnid: u32, nodes: &[Ipv4Addr]) {
    let buckets: Vec<String> = nodes
        .iter()
        .map(|ip| {
            format!(
                "actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:{ip}->tun_dst,output:vxlan0"
            )
        })
        .collect();
    bundle(
        ovs,
        &[
            format!("flow delete table=101, reg0={vnid}"),
            format!("group delete group_id={vnid}"),
            format!(
                "group add group_id={vnid},type=select,bucket={}",
                buckets.join("bucket=")
            ),
            format!(
                "flow add table=101, priority=100,ip,reg0={vnid}, actions=ct(commit),group:{vnid}"
            ),
        ],
    );
}

/// A pod port openshift-sdn found at its start (`ovscontroller.go:402-443`
/// `GetPodNetworkInfo`) and reattached.
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

/// `ovscontroller.go:402-443` `GetPodNetworkInfo`: every Interface with a `sandbox`
/// external-id, as (name, sandbox, address); rows without a name, an `ip` or `sandbox`, a
/// parsable address or a parsable ofport are skipped (`:410-433`).
fn pod_network_info(ovs: &crate::harness::Ovs) -> Vec<(String, String, Ipv4Addr)> {
    let rows = ovs.vsctl(&[
        "--format=csv",
        "--no-headings",
        "--data=bare",
        "--columns=name,external_ids,ofport",
        "find",
        "Interface",
        "external_ids:sandbox!=\"\"",
    ]);
    let mut found = Vec::new();
    for line in rows.lines().filter(|l| !l.trim().is_empty()) {
        let Some((name, rest)) = line.split_once(',') else {
            continue;
        };
        let Some((ids, ofport)) = rest.rsplit_once(',') else {
            continue;
        };
        if name.is_empty() || ofport.trim().parse::<i64>().is_err() {
            continue;
        }
        let ids = ids.trim_matches('"');
        let get = |key: &str| {
            ids.split(' ')
                .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        let (Some(sandbox), Some(ip)) = (get("sandbox"), get("ip")) else {
            continue;
        };
        if let Ok(ip) = ip.parse::<Ipv4Addr>() {
            found.push((name.to_string(), sandbox, ip));
        }
    }
    found
}

/// `sdn_controller.go:20-68` `alreadySetUp`: `Ok` when openshift-sdn would leave the node as
/// it is, else why not, in its order: tun0 exists and holds `<gateway>/<prefix>` (`:23-41`);
/// tun0 has a route to every cluster network and to the service network whose MTU is the
/// routable MTU, 0 here (`:43-61`; `netlink.RouteList` reads the main table); and
/// `ovscontroller.go:202-218` `AlreadySetUp`: table 253 holds exactly one flow (`:203-206`),
/// vxlan0's `options:dst_port` is `"<port>"`, quotes included (`:208-213`), and that flow's
/// note starts with the version note, case aside (`:214-217`, `parse.go:167-170`).
pub fn already_set_up(ovs: &crate::harness::Ovs, node: &Node) -> Result<(), String> {
    let prefix = prefix_len(&node.local_subnet);
    let json = |cmd: &[&str]| -> Result<Vec<serde_json::Value>, String> {
        let text = ovs.exec_in_netns(cmd)?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        Ok(v.as_array().cloned().unwrap_or_default())
    };
    let gw = node.gateway.to_string();
    let has_gw = json(&["ip", "-j", "-4", "addr", "show", "dev", "tun0"])?
        .iter()
        .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
        .any(|a| a["local"] == gw.as_str() && a["prefixlen"] == prefix);
    if !has_gw {
        return Err("local subnet gateway CIDR not found".into());
    }
    let mut expected: std::collections::BTreeSet<String> =
        node.cluster_networks.iter().cloned().collect();
    expected.insert(node.service_network.clone());
    for r in json(&["ip", "-j", "-4", "route", "show", "dev", "tun0"])? {
        let mtu = r["metrics"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|m| m["mtu"].as_u64())
            .unwrap_or(0);
        if let Some(dst) = r["dst"].as_str().filter(|d| *d != "default") {
            if mtu == 0 {
                expected.remove(dst);
            }
        }
    }
    if !expected.is_empty() {
        return Err(format!(
            "one or more cluster routes not found or not correct: {expected:?}"
        ));
    }
    let flows = dump_flows(ovs, &format!("table={RULE_VERSION_TABLE}"))?;
    if flows.len() != 1 {
        return Err(format!("table 253 holds {} flows", flows.len()));
    }
    let port = ovs.try_vsctl(&["get", "Interface", "vxlan0", "options:dst_port"])?;
    if port.trim() != format!("\"{}\"", node.vxlan_port) {
        return Err(format!("vxlan0's dst_port is {}", port.trim()));
    }
    let (_, _, actions) = parse_dumped(&flows[0]);
    let note = actions
        .iter()
        .find_map(|a| a.strip_prefix("note:"))
        .unwrap_or_default()
        .to_lowercase();
    if !note.starts_with(&version_note(node.plugin).to_lowercase()) {
        return Err(format!("plugin is not setup (note {note:?})"));
    }
    Ok(())
}

/// openshift-sdn's node process starting on a node (`node.go:298-373` `Start`), in its order:
/// the chains synced (`:311-314`), IPv4 forwarding (`sdn_controller.go:104-117`), the pod ports
/// read (`GetPodNetworkInfo`, `sdn_controller.go:136`), then [`already_set_up`]. When the node
/// is set up, `None`: the plugin's start rows (`node.go:324`), the note (`:358`) and the
/// informer's HostSubnet rows are added again (the same rows), and the canary chains ensured
/// (`cmd.go:193-197`). Otherwise `setup` makes br0 afresh with tun0's address and routes
/// ([`setup_bridge`]) and `reattachPods` (`node.go:351-356, 378-421`) sets up again each pod
/// whose veth still exists (`:392-395`) with its assigned address and no IPAM (`pod.go:506-516`):
/// its port with its external-ids (`SetUpPod`, `pod.go:523`), its bandwidth
/// ([`set_pod_bandwidth`], `pod.go:527`: the QoS rows the old br0 left are destroyed, new ones
/// made), its rows and its VNID's ([`load_rows`]); then the canary chains. `pod_of` gives each
/// pod's namespace's VNID (`pod.go:518`) and bandwidth annotations (ingress, egress) by
/// address. Returns the reattached pods.
pub fn restart_node(
    ovs: &crate::harness::Ovs,
    node: &Node,
    remote: &[RemoteNode],
    pod_of: &dyn Fn(Ipv4Addr) -> (u32, Option<(u64, u64)>),
) -> Option<Vec<Reattached>> {
    sync_chains(ovs, node);
    enable_ip_forward(ovs);
    let found = pod_network_info(ovs);
    if already_set_up(ovs, node).is_ok() {
        let mut rows = plugin_start_rows(node);
        rows.push(version_row(node.plugin));
        bundle(ovs, &flow_adds(&rows));
        bundle(ovs, &flow_adds(&host_subnet_informer_rows(remote)));
        ensure_canary_chains(ovs.netns());
        return None;
    }
    setup_bridge(ovs, node);
    let mut out = Vec::new();
    let mut pods = Vec::new();
    for (veth, sandbox, ip) in found {
        if ovs.exec_in_netns(&["ip", "link", "show", &veth]).is_err() {
            continue;
        }
        // ovscontroller.go:449-459, as at the pod's first ADD.
        let ext_ids = format!("external_ids=sandbox=\"{sandbox}\",ip=\"{ip}\"");
        let ofport = add_port(ovs, &veth, None, &[ext_ids]);
        let (vnid, bandwidth) = pod_of(ip);
        set_pod_bandwidth(ovs, &veth, &sandbox, bandwidth);
        pods.push((ofport, ip, vnid));
        out.push(Reattached {
            sandbox,
            host_veth: veth,
            ip,
            ofport,
        });
    }
    load_rows(ovs, node, remote, &pods);
    ensure_canary_chains(ovs.netns());
    Some(out)
}

/// One pod's CNI ADD, in upstream's order. The plugin in the pod's namespace
/// (`openshift-sdn.go:196-202` → vendor `plugins/pkg/ip/link.go:121-155` `SetupVeth`): the
/// veth pair made there with eth0 up, both ends with the overlay MTU and txqueuelen 0 (netlink
/// sends `LinkAttrs.TxQLen`, 0, and the MTU for both ends, `link.go:33-47`,
/// `link_linux.go:1158-1161, 1196-1204, 1267-1277`), the host end moved to the node and set up.
/// The node's CNI server (`pod.go:485-539` `setup`): IPAM by host-local ([`host_local_reserve`],
/// `pod.go:509, 410-431`), the port (`ovscontroller.go:449-459` `ensureOvsPort`: no
/// `ofport_request`, `sandbox` and `ip` external-ids), the bandwidth ([`set_pod_bandwidth`],
/// `pod.go:527`); its rows are in [`load_rows`]. The plugin again, in the pod
/// (`openshift-sdn.go:234-307`): the MAC of the address (`:236`), `ConfigureIface` (`:239`;
/// vendor `plugins/pkg/ipam/ipam.go:40-99`: eth0 up, `:50`, its address with the subnet's mask
/// and netlink's broadcast, `:65-66`, no routes, taken out at `openshift-sdn.go:219-221`), `lo`
/// up (`:243-250`: done by `Netns::new`), the IPAM routes in their order (`:288-302`: no scope
/// set, so universe; `proto boot`; `MTU: RoutableMTU`, 0, so none), the nftables table
/// (`:304-307`, [`pod_nftables_text`]).
fn cni_add(
    ovs: &crate::harness::Ovs,
    node: &Node,
    prefix: u8,
    lease_dir: &std::path::Path,
    index: usize,
    p: &PodSpec,
) -> WiredPod {
    let netns = crate::harness::Netns::new("osdnpod");
    let sandbox = format!("{:064x}", 0x05d0_0000_u64 + index as u64);
    let host_veth = format!("veth{:08x}", 0x05d0_0000_u32 + index as u32);
    // (Command lines split at whitespace, as for `node_sh`.)
    let ns = |cmd: &str| {
        netns
            .exec(&cmd.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_else(|e| panic!("{cmd}: {e}"))
    };
    let (mtu, ip, gw) = (OVERLAY_MTU, p.ip, node.gateway);
    ns(&format!(
        "ip link add eth0 mtu {mtu} txqueuelen 0 up type veth peer name {host_veth} mtu {mtu} txqueuelen 0"
    ));
    ns(&format!("ip link set {host_veth} netns {}", ovs.netns()));
    node_sh(ovs, &format!("ip link set {host_veth} up"));
    assert!(
        host_local_reserve(lease_dir, ip, &sandbox),
        "{ip} is leased twice"
    );
    let ext_ids = format!("external_ids=sandbox=\"{sandbox}\",ip=\"{ip}\"");
    let ofport = add_port(ovs, &host_veth, None, &[ext_ids]);
    set_pod_bandwidth(ovs, &host_veth, &sandbox, p.bandwidth);
    // openshift-sdn.go:236
    ns(&format!("ip link set eth0 address {}", pod_mac(ip)));
    // openshift-sdn.go:239: ipam.go:50, then :65-66 (netlink's broadcast: `brd +`).
    ns("ip link set eth0 up");
    ns(&format!("ip addr add {ip}/{prefix} brd + dev eth0"));
    // openshift-sdn.go:288-302 with the IPAM routes of pod.go:118-143: the default route
    // (:120-127) and the service network (:131-134) via the gateway, each cluster network
    // (:135-137) and multicast (:139-143) on the link, scope global.
    ns(&format!("ip route add default via {gw} dev eth0"));
    ns(&format!(
        "ip route add {} via {gw} dev eth0",
        node.service_network
    ));
    for cn in &node.cluster_networks {
        ns(&format!("ip route add {cn} dev eth0 scope global"));
    }
    ns("ip route add 224.0.0.0/4 dev eth0 scope global");
    // openshift-sdn.go:304-307: knftables runs `nft -f -` (nftables.go:147-149).
    let nft = pod_nftables_text();
    let (code, out) = run_in(netns.name(), &["nft", "-f", "-"], Some(&nft));
    assert_eq!(code, Some(0), "nft -f - in the pod: {out}");
    // Harness, not openshift-sdn's: this machine's userspace datapath does not complete
    // offloaded checksums (testing.md), so the pod computes its own, as ours do on netdev.
    ns("ethtool -K eth0 tx off");
    WiredPod {
        spec: p.clone(),
        sandbox,
        host_veth,
        ofport,
        netns,
    }
}

/// Makes the state openshift-sdn leaves on a node it has run with `pods`, in the private OVS
/// `ovs` (its network namespace is the node's), in upstream's order: the `OPENSHIFT-*` chains
/// (`node.go:311-314`, [`sync_chains`]), IPv4 forwarding ([`enable_ip_forward`]), br0, vxlan0,
/// tun0 and tun0's address and routes ([`setup_bridge`]), its CNI config file in `conf_dir`
/// ([`write_cni_conf`], `cmd.go:188`) and the canary chains ([`ensure_canary_chains`],
/// `cmd.go:193-197`); then each pod's CNI ADD (`cni_add`: veth, lease in `lease_dir`, port,
/// bandwidth, MAC, address, routes, nftables table) and every row ([`load_rows`]: base,
/// plugin, pods, VNIDs, the note, then the remote nodes' rows and table 111).
pub fn build_node(
    ovs: &crate::harness::Ovs,
    node: &Node,
    remote: &[RemoteNode],
    pods: &[PodSpec],
    conf_dir: &std::path::Path,
    lease_dir: &std::path::Path,
) -> Vec<WiredPod> {
    sync_chains(ovs, node);
    enable_ip_forward(ovs);
    let prefix = setup_bridge(ovs, node);
    write_cni_conf(conf_dir);
    ensure_canary_chains(ovs.netns());
    let wired: Vec<WiredPod> = pods
        .iter()
        .enumerate()
        .map(|(i, p)| cni_add(ovs, node, prefix, lease_dir, i, p))
        .collect();
    let on_bridge: Vec<(u32, Ipv4Addr, u32)> = wired
        .iter()
        .map(|w| (w.ofport, w.spec.ip, w.spec.vnid))
        .collect();
    load_rows(ovs, node, remote, &on_bridge);
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

    #[test]
    fn networkpolicy_start_rows_keep_upstream_s_text() {
        let n = Node {
            plugin: Plugin::NetworkPolicy,
            cluster_networks: vec!["10.128.0.0/14".into(), "10.132.0.0/14".into()],
            service_network: "172.30.0.0/16".into(),
            local_subnet: "10.128.2.0/23".into(),
            gateway: Ipv4Addr::new(10, 128, 2, 1),
            node_ip: Ipv4Addr::new(192, 168, 77, 12),
            vxlan_port: 4789,
        };
        let rows = plugin_start_rows(&n);
        // networkpolicy.go:159, the space before the comma included.
        assert_eq!(
            rows[0],
            "table=27, priority=300, ip, nw_dst=172.30.0.0/16 , actions=goto_table:30"
        );
        // One commit row per ordered pair of cluster networks (networkpolicy.go:173-177).
        assert_eq!(rows.len(), 3 + 4);
        assert!(rows.contains(&"table=30, priority=100, ip, nw_src=10.132.0.0/14, nw_dst=10.128.0.0/14, ct_state=-rpl, actions=ct(commit,table=31)".to_string()));
        assert_eq!(
            vnid_rows(Plugin::NetworkPolicy, 0),
            [
                "table=80, priority=50, reg1=0, actions=output:NXM_NX_REG2[]",
                "table=27, priority=50, reg0=0, actions=goto_table:30"
            ]
        );
        assert!(vnid_rows(Plugin::Multitenant, 0).is_empty());
        assert!(vnid_rows(Plugin::Subnet, 11).is_empty());
    }

    #[test]
    fn the_pod_nftables_transaction_is_knftables_text() {
        let t = "ip openshift-block-output";
        let want = [
            format!("add table {t}"),
            format!("add chain {t} block"),
            format!("add rule {t} block tcp dport {{ 22623, 22624 }} tcp flags syn reject"),
            format!("add rule {t} block ip daddr 169.254.169.254 udp dport != 53 reject"),
            format!("add rule {t} block ip daddr 169.254.169.254 tcp dport != 53 reject"),
            format!("add chain {t} output {{ type filter hook output priority 0 ; }}"),
            format!("add rule {t} output goto block"),
            format!("add chain {t} forward {{ type filter hook forward priority 0 ; }}"),
            format!("add rule {t} forward goto block"),
        ];
        assert_eq!(pod_nftables_text(), want.join("\n") + "\n");
    }

    #[test]
    fn dumped_flows_parse_as_upstream_reads_them() {
        let (table, fields, actions) = parse_dumped(
            " cookie=0x0, duration=0.04s, table=70, n_packets=0, n_bytes=0, priority=100,ip,nw_dst=10.128.2.5 actions=load:0xb->NXM_NX_REG1[],load:0x3->NXM_NX_REG2[],goto_table:80",
        );
        assert_eq!(table, 70);
        assert!(fields.contains(&("nw_dst".to_string(), "10.128.2.5".to_string())));
        assert_eq!(actions[0], "load:0xb->NXM_NX_REG1[]");
        assert_eq!(parse_go_int("0xb"), Some(11));
        assert_eq!(parse_go_int("12"), Some(12));
    }
}
