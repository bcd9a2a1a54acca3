//! Taking over a node that openshift-sdn ran, with its pods running.
//!
//! openshift-sdn leaves on a node: br0 with vxlan0 (ofport 1) and tun0 (ofport 2, `type=internal`
//! and `mtu_request` only: its MAC is whatever the device got, which openshift-sdn reads back
//! from `mac_in_use` and never pins), its rows with the note `<plugin>.<rule version>` (two bytes) in
//! table 253, each pod's host veth as a port whose `external_ids` are only `sandbox` and `ip`
//! (the pod's VNID is in its table-70 row: `load:VNID->NXM_NX_REG1[], load:OFPORT->
//! NXM_NX_REG2[]`), the pod's QoS (`QoS` `linux-htb` `other_config:max-rate`, `external_ids:
//! sandbox`) and policing (`ingress_policing_rate`, kbit/s), host-local leases in
//! `<ipamDir>/openshift-sdn`, `80-openshift-network.conf` in the CNI config directory, and its
//! `OPENSHIFT-*` iptables chains. Its pods use the same MACs (`0a:58:<ip>`) and addresses as
//! ours, so they need no change inside: only what is around them.
//!
//! The takeover, in start-up order (see `start.rs`):
//! 1. [`inspect`], before anything on the node is changed: reads the ports and, unless br0 is
//!    plainly ours (its tables named by this agent in OVSDB, no pod port shaped as
//!    openshift-sdn's, none of its files left; then ovs-vswitchd is not asked, so a busy one
//!    does not hold the start up), table 253 (one OpenFlow dump of br0). openshift-sdn's note at the rule version we know (13), of the
//!    plugin matching our mode, with every port on br0 a pod port with an address in this
//!    node's subnet and a VNID row, is taken over; anything else is refused with every
//!    mismatch named, unless `forceTakeover` (a pod whose VNID cannot be read is then
//!    isolated, VNID 0xffffff; fail closed).
//! 2. [`Found::adopt`]: each pod's port record gets our keys next to openshift-sdn's (`ifname
//!    eth0`, namespace and pod from the API's pods by address, or the namespace from the VNID
//!    in a standalone node, the VNID from its row, its bandwidth from its QoS and policing; its
//!    QoS row gets `ifname`), and its lease moves into our lease directory. From here the
//!    pod table is rebuilt as after any restart, tun0 keeps its MAC (the pods' ARP caches hold
//!    it), and the start-up reconcile replaces openshift-sdn's rows by ours in **one** bundle:
//!    no packet meets half of each pipeline.
//! 3. [`Found::clean_up`], once our CNI config and host rules are in place: openshift-sdn's CNI
//!    config file, its lease directory and the chains ours replace are removed.
//!    `OPENSHIFT-BLOCK-OUTPUT` (the platform's block of the machine-config ports) is kept, so is
//!    `OPENSHIFT-ADMIN-OUTPUT-RULES` when an administrator put rules in it.
//!
//! Each step is idempotent: an agent that stops half-way takes the node over again at its next
//! start (the note is openshift-sdn's until the reconcile, adopted records are recognised, the
//! clean-up removes what is left). Going back is `sdnctl handback` (docs/migrating-from-openshift-sdn.md).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;

use super::error::{Result, Step};
use flows::{Mode, NodeConfig, Vnid};
use ovs::flow::{Action, Field, Flow, MacAddr};
use ovs::openflow::{DumpFilter, OfClient};

use crate::host::ipam;
use crate::host::iptables::Iptables;
use crate::pod::record::keys;
use crate::pod::BRIDGE;

/// The openshift-sdn rule version whose rows this agent knows (`ovscontroller.go`
/// `ruleVersion` at openshift/sdn 18a57d7).
pub(super) const RULE_VERSION: u8 = 13;
/// openshift-sdn's CNI config file in the CNI config directory.
pub(super) const CNI_CONF_FILE: &str = "80-openshift-network.conf";
/// openshift-sdn's CNI network: its host-local lease directory's name.
pub(super) const CNI_NETWORK: &str = "openshift-sdn";
/// openshift-sdn's chains that the agent's own replace (`iptables.go`
/// `getNodeIPTablesChains`): removed at the takeover.
pub(super) const REPLACED_CHAINS: [(&str, &str); 5] = [
    ("filter", "OPENSHIFT-FIREWALL-ALLOW"),
    ("filter", "OPENSHIFT-FIREWALL-FORWARD"),
    ("nat", "OPENSHIFT-MASQUERADE"),
    ("nat", "OPENSHIFT-MASQUERADE-2"),
    ("raw", "OPENSHIFT-NOTRACK"),
];
/// openshift-sdn's chain for administrators' rules: removed only when empty.
pub(super) const ADMIN_CHAIN: (&str, &str) = ("filter", "OPENSHIFT-ADMIN-OUTPUT-RULES");
/// The interface name openshift-sdn's pods have (kubelet's `CNI_IFNAME`).
const POD_IFNAME: &str = "eth0";
/// tun0's `external_ids` key saying its MAC is kept from the network agent before ours (the
/// value names it), so later starts keep it too.
pub(super) const KEPT_MAC_KEY: &str = "mac-kept-from";

/// The MAC tun0 keeps: openshift-sdn's at a takeover (`found`), else the one an earlier
/// takeover kept (tun0 says so in [`KEPT_MAC_KEY`]); `None`: the derived one.
pub(super) fn kept_tun0_mac(db: &ovs::ovsdb::Client, found: Option<&Found>) -> Option<MacAddr> {
    if let Some(f) = found {
        return f.tun0_mac;
    }
    db.with_cache(|c| {
        let i = c.interface("tun0")?;
        i.string_map("external_ids").get(KEPT_MAC_KEY)?;
        i.string("mac")?.parse().ok()
    })
}

/// Who set br0 up, by its table-253 row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Marker {
    /// No row (no bridge, or one no pipeline was ever installed on).
    None,
    /// This agent's (`<mode>.<hash>`).
    Ours(String),
    /// openshift-sdn's: `note:<plugin>.<rule version>`.
    OpenshiftSdn {
        /// 0 subnet, 1 multitenant, 2 networkpolicy.
        plugin: u8,
        /// Its rule version.
        version: u8,
    },
    /// Something else, as text.
    Unknown(String),
}

/// The marker of `flows` (a dump of br0).
pub(super) fn marker(flows: &[Flow]) -> Marker {
    let rows: Vec<&Flow> = flows.iter().filter(|f| f.table == 253).collect();
    let note = match rows.as_slice() {
        [] => return Marker::None,
        [one] => one.actions.iter().find_map(|a| match a {
            Action::Note(n) => Some(n.trimmed().to_vec()),
            _ => None,
        }),
        more => return Marker::Unknown(format!("{} rows in table 253", more.len())),
    };
    let Some(note) = note else {
        return Marker::Unknown("a table-253 row without a note".into());
    };
    // openshift-sdn writes two bytes (ovs-ofctl `note:01.0D`); padding is zeros.
    if let [plugin, version] = note.as_slice() {
        if *plugin <= 2 {
            return Marker::OpenshiftSdn {
                plugin: *plugin,
                version: *version,
            };
        }
    }
    match std::str::from_utf8(&note) {
        Ok(text) if Mode::parse(text.split('.').next().unwrap_or("")).is_some() => {
            Marker::Ours(text.to_string())
        }
        _ => Marker::Unknown(
            note.iter()
                .map(|b| format!("{b:02X}"))
                .collect::<Vec<_>>()
                .join("."),
        ),
    }
}

/// The mode of openshift-sdn's plugin id (`node.go` `New`).
pub(super) fn plugin_mode(plugin: u8) -> Option<Mode> {
    match plugin {
        0 => Some(Mode::Subnet),
        1 => Some(Mode::Multitenant),
        2 => Some(Mode::NetworkPolicy),
        _ => None,
    }
}

/// Each pod port's VNID by ofport, from openshift-sdn's table-70 rows (`setupPodFlows`:
/// `load:VNID->NXM_NX_REG1[], load:OFPORT->NXM_NX_REG2[]`).
pub(super) fn vnids_by_ofport(flows: &[Flow]) -> BTreeMap<u32, u32> {
    let mut out = BTreeMap::new();
    for f in flows.iter().filter(|f| f.table == 70) {
        let load = |reg: u8| {
            f.actions.iter().find_map(|a| match a {
                Action::Load(l) if l.dst().field() == Field::Reg(reg) => {
                    u32::try_from(l.value()).ok()
                }
                _ => None,
            })
        };
        if let (Some(vnid), Some(ofport)) = (load(1), load(2)) {
            out.insert(ofport, vnid);
        }
    }
    out
}

/// A pod port openshift-sdn wired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FoundPod {
    /// The host veth (the port's name).
    pub port: String,
    /// Its ofport.
    pub ofport: u32,
    /// `external_ids:sandbox`.
    pub sandbox: String,
    /// `external_ids:ip`.
    pub ip: Ipv4Addr,
    /// From its table-70 row; `None`: it has none (isolated when forced).
    pub vnid: Option<u32>,
    /// Its QoS row's `max-rate` (the pod's ingress limit, bit/s).
    pub ingress_bps: Option<u64>,
    /// Its `ingress_policing_rate` (the pod's egress limit, kbit/s).
    pub egress_kbps: Option<u64>,
}

/// A port on br0, as [`inspect`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Port {
    /// Its name.
    pub name: String,
    /// Its ofport (`None` when ovs-vswitchd gave it none).
    pub ofport: Option<u32>,
    /// Its interface's `external_ids`.
    pub external_ids: BTreeMap<String, String>,
    /// Its QoS row's `other_config:max-rate`, when it has a QoS row.
    pub max_rate: Option<u64>,
    /// Its interface's `ingress_policing_rate` when not 0.
    pub policing_kbps: Option<u64>,
}

impl Port {
    /// A pod port as openshift-sdn records one: `sandbox` (and `ip`), none of our keys.
    fn shaped_as_openshift_sdn(&self) -> bool {
        self.external_ids.contains_key(keys::SANDBOX)
            && !self.external_ids.contains_key(keys::IFNAME)
    }
}

/// br0's ports (one per interface) as the OVSDB cache holds them; `None` without br0.
pub(super) fn bridge_ports(c: &ovs::ovsdb::Cache) -> Option<Vec<Port>> {
    let bridge = c.bridge(BRIDGE)?;
    let mut ports = Vec::new();
    for pu in bridge.uuids("ports") {
        let Some(port) = c.row("Port", pu) else {
            continue;
        };
        let max_rate = port
            .uuid_ref("qos")
            .and_then(|q| c.row("QoS", q))
            .and_then(|q| q.string_map("other_config").get("max-rate")?.parse().ok());
        for iu in port.uuids("interfaces") {
            let Some(i) = c.row("Interface", iu) else {
                continue;
            };
            ports.push(Port {
                name: i.name().to_string(),
                ofport: i.integer("ofport").and_then(|p| u32::try_from(p).ok()),
                external_ids: i.string_map("external_ids"),
                max_rate,
                policing_kbps: i
                    .integer("ingress_policing_rate")
                    .and_then(|r| u64::try_from(r).ok())
                    .filter(|r| *r > 0),
            });
        }
    }
    Some(ports)
}

/// Whether this agent named br0's tables in OVSDB (openshift-sdn does not): table 253 named
/// after ours says which agent set the bridge up, without asking ovs-vswitchd.
fn named_by_us(c: &ovs::ovsdb::Cache) -> bool {
    let version = flows::Table::Version;
    c.bridge(BRIDGE)
        .and_then(|b| {
            b.map_get(
                "flow_tables",
                &ovs::ovsdb::ops::Atom::Integer(i64::from(version.id())),
            )
        })
        .and_then(ovs::ovsdb::ops::Atom::as_uuid)
        .and_then(|u| c.row("Flow_Table", u))
        .and_then(|r| r.string("name"))
        == Some(version.name())
}

/// A node openshift-sdn ran, as found: what the agent takes over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Found {
    /// Its plugin id.
    pub plugin: u8,
    /// Its rule version.
    pub version: u8,
    /// Its pods, by port.
    pub pods: Vec<FoundPod>,
    /// Pod ports adopted at an earlier, interrupted start (already with our records).
    pub adopted_before: usize,
    /// tun0's MAC, kept.
    pub tun0_mac: Option<MacAddr>,
    /// What does not match openshift-sdn's state (taken over anyway only when forced).
    pub mismatches: Vec<String>,
}

/// Reads what openshift-sdn left on br0 (the pure half of [`inspect`]): `None` when br0's
/// marker is not openshift-sdn's and no port is shaped as its pods'.
pub(super) fn judge(
    marker: &Marker,
    flows: &[Flow],
    ports: &[Port],
    tun0_mac: Option<MacAddr>,
    node: &NodeConfig,
) -> Option<Found> {
    let mut mismatches = Vec::new();
    let (plugin, version) = match marker {
        Marker::OpenshiftSdn { plugin, version } => (*plugin, *version),
        Marker::Ours(_) => return None,
        Marker::None | Marker::Unknown(_) if !ports.iter().any(Port::shaped_as_openshift_sdn) => {
            return None
        }
        Marker::None => {
            mismatches.push(
                "br0 has pod ports shaped as openshift-sdn's (sandbox and ip only) but no \
                 version row in table 253: its rows are gone, so the pods' VNIDs cannot be read"
                    .to_string(),
            );
            (u8::MAX, 0)
        }
        Marker::Unknown(text) => {
            mismatches.push(format!(
                "table 253 holds {text:?}, neither openshift-sdn's note nor this agent's"
            ));
            (u8::MAX, 0)
        }
    };
    if plugin != u8::MAX && version != RULE_VERSION {
        mismatches.push(format!(
            "table 253 says openshift-sdn rule version {version} (note {plugin:02X}.{version:02X}); \
             this agent knows the rows of version {RULE_VERSION} (openshift/sdn 18a57d7)"
        ));
    }
    match plugin_mode(plugin) {
        Some(m) if m != node.mode => mismatches.push(format!(
            "openshift-sdn ran its {} plugin here and this agent runs in {} mode: the node's \
             isolation would change under its pods; start the agent in {} mode",
            m.name(),
            node.mode.name(),
            m.name()
        )),
        None if plugin != u8::MAX => mismatches.push(format!(
            "table 253 names openshift-sdn plugin {plugin}, which does not exist"
        )),
        _ => {}
    }
    if tun0_mac.is_none() {
        mismatches.push(
            "tun0's MAC cannot be read (no tun0 in OVSDB with mac_in_use, none in the kernel): \
             the pods' ARP caches hold openshift-sdn's gateway MAC, which this agent could not \
             keep; is ovs-vswitchd running?"
                .to_string(),
        );
    }
    let (pods, adopted_before) = found_pods(flows, ports, node, &mut mismatches);
    Some(Found {
        plugin,
        version,
        pods,
        adopted_before,
        tun0_mac,
        mismatches,
    })
}

/// openshift-sdn's pod ports, with their VNIDs from table 70, and how many pod ports carry
/// this agent's records already (a takeover cut short); every port that is not what
/// openshift-sdn leaves is a mismatch.
fn found_pods(
    flows: &[Flow],
    ports: &[Port],
    node: &NodeConfig,
    mismatches: &mut Vec<String>,
) -> (Vec<FoundPod>, usize) {
    let vnids = vnids_by_ofport(flows);
    let subnet = node.ipv4.as_ref().map(|v4| v4.local_subnet);
    let shown = |s: &Option<ipnet::Ipv4Net>| s.map_or("none (IPv6-only)".into(), |s| s.to_string());
    let mut pods = Vec::new();
    let mut adopted_before = 0;
    for p in ports {
        if ["br0", "vxlan0", "tun0"].contains(&p.name.as_str())
            || crate::pod::pool::is_pool_port(&p.name)
        {
            continue;
        }
        if !p.external_ids.contains_key(keys::SANDBOX) {
            mismatches.push(format!(
                "port {} on br0 has no pod record (external_ids sandbox and ip): openshift-sdn \
                 made no such port; remove it or say what it is",
                p.name
            ));
            continue;
        }
        if !p.shaped_as_openshift_sdn() {
            adopted_before += 1;
            continue;
        }
        let sandbox = p.external_ids[keys::SANDBOX].clone();
        let ip = p.external_ids.get(keys::IP).and_then(|v| v.parse().ok());
        let Some(ip) = ip else {
            mismatches.push(format!(
                "pod port {} (sandbox {sandbox}) has no valid external_ids:ip",
                p.name
            ));
            continue;
        };
        if !subnet.is_some_and(|s| s.contains(&ip)) {
            let (port, subnet) = (&p.name, shown(&subnet));
            mismatches.push(format!(
                "pod port {port} has {ip}, outside this node's {subnet}"
            ));
            continue;
        }
        let Some(ofport) = p.ofport else {
            mismatches.push(format!("pod port {} has no ofport", p.name));
            continue;
        };
        let vnid = vnids.get(&ofport).copied();
        if vnid.is_none() && node.mode.has_vnids() {
            mismatches.push(format!(
                "pod port {} ({ip}, ofport {ofport}) has no VNID row in table 70",
                p.name
            ));
        }
        pods.push(FoundPod {
            port: p.name.clone(),
            ofport,
            sandbox,
            ip,
            vnid,
            ingress_bps: p.max_rate,
            egress_kbps: p.policing_kbps,
        });
    }
    (pods, adopted_before)
}

/// Looks at br0 before anything is changed: `Ok(None)` when openshift-sdn did not run here
/// (or the agent took the node over already), `Ok(Some)` when it did and its state matches
/// (or `force`), an error naming every mismatch otherwise.
pub(super) async fn inspect(
    db: &ovs::ovsdb::Client,
    bridge_mgmt: &Path,
    cni_conf_dir: &Path,
    node: &NodeConfig,
    force: bool,
) -> Result<Option<Found>> {
    let (ports, tun0_mac, named_by_us) = db.with_cache(|c| {
        // openshift-sdn never sets tun0's `mac` (`SetupOVS` adds it with `type=internal` and
        // `mtu_request` only); the MAC the pods' ARP caches hold is the one the device got,
        // which ovs-vswitchd reports in `mac_in_use` (what its `ensureTunMAC` reads).
        let mac = c.interface("tun0").and_then(|i| {
            ["mac_in_use", "mac"]
                .iter()
                .find_map(|col| i.string(col)?.parse::<MacAddr>().ok())
        });
        (bridge_ports(c), mac, named_by_us(c))
    });
    let Some(ports) = ports else {
        return Ok(None);
    };
    // Our own bridge (the common start): no pod port shaped as openshift-sdn's and none of its
    // files left means nothing to take over, and start-up does not wait for ovs-vswitchd here
    // (it may be busy; the agent serves first and reconciles when it answers).
    let osdn_shaped = ports.iter().any(Port::shaped_as_openshift_sdn);
    if named_by_us && !osdn_shaped && !cni_conf_dir.join(CNI_CONF_FILE).exists() {
        return Ok(None);
    }
    // ovs-vswitchd not (yet) reporting it: the kernel's tun0 has it.
    let tun0_mac = match tun0_mac {
        Some(m) => Some(m),
        None => crate::host::netlink::Netlink::new()
            .step("opening rtnetlink")?
            .interface_mac("tun0")
            .await
            .step("reading tun0's MAC")?
            .map(MacAddr),
    };
    let target = format!("unix:{}", bridge_mgmt.display());
    let flows = match OfClient::connect(&target).await {
        Ok(of) => of
            .dump_flows(&DumpFilter::all())
            .await
            .with_step(|| format!("reading br0's flows at {target}"))?,
        // A bridge ovs-vswitchd has not made yet has no flows to read.
        Err(e) if !bridge_mgmt.exists() => {
            tracing::debug!(error = %e, "br0 has no management socket yet");
            Vec::new()
        }
        Err(e) => return Err(e).with_step(|| format!("reading br0's flows at {target}")),
    };
    let marker = marker(&flows);
    let Some(found) = judge(&marker, &flows, &ports, tun0_mac, node) else {
        return Ok(None);
    };
    if !found.mismatches.is_empty() {
        if !force {
            super::error::bail!(
                "br0 was set up by openshift-sdn, but not as it leaves a node, so it is not taken \
                 over (nothing was changed):\n  - {}\nfix what is named, or start with \
                 --force-takeover (forceTakeover: true) to adopt the pods anyway (a pod whose \
                 VNID cannot be read is isolated)",
                found.mismatches.join("\n  - ")
            );
        }
        for m in &found.mismatches {
            tracing::warn!(mismatch = %m, "taking the node over from openshift-sdn although its state does not match (forced)");
        }
    }
    tracing::info!(
        plugin = found.plugin,
        rule_version = found.version,
        pods = found.pods.len(),
        adopted_before = found.adopted_before,
        tun0_mac = %found.tun0_mac.map(|m| m.to_string()).unwrap_or_default(),
        "openshift-sdn ran this node; taking it over with its pods running"
    );
    Ok(Some(found))
}

/// What [`Found::adopt`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Adopted {
    /// Pod ports given our records.
    pub pods: usize,
    /// Of those, pods whose namespace is not known (their recorded VNID stands).
    pub unnamed: usize,
    /// Leases moved into our lease directory.
    pub leases: usize,
    /// openshift-sdn leases of addresses no port has (not carried over).
    pub stale_leases: usize,
}

impl Found {
    /// Logs what the takeover did, once the first reconcile replaced openshift-sdn's rows.
    pub(super) fn log_adopted(
        &self,
        adopted: &Adopted,
        removed: &[String],
        took: std::time::Duration,
    ) {
        tracing::info!(
            pods = adopted.pods,
            adopted_before = self.adopted_before,
            namespace_unknown = adopted.unnamed,
            leases = adopted.leases,
            stale_leases = adopted.stale_leases,
            removed = %removed.join(", "),
            ms = took.as_millis() as u64,
            "took the node over from openshift-sdn: its pods are ours, its rows replaced in one bundle"
        );
    }

    /// Gives each pod port our record (next to openshift-sdn's keys, which stay), tags its QoS
    /// row with the attachment, and moves the pods' leases into `store` (see the module docs).
    pub(super) async fn adopt(
        &self,
        db: &ovs::ovsdb::Client,
        state: &cluster::ClusterState,
        store: &ipam::Store,
        ipam_dir: &Path,
        node: &NodeConfig,
    ) -> Result<Adopted> {
        let mut done = Adopted::default();
        let by_ip: BTreeMap<Ipv4Addr, (&str, &str)> = state
            .pods
            .iter()
            .filter_map(|(key, p)| {
                let (ns, name) = key.split_once('/')?;
                Some((p.ip?, (ns, name)))
            })
            .collect();
        for p in &self.pods {
            let vnid = match p.vnid {
                Some(v) => v,
                None if node.mode.has_vnids() => Vnid::UNASSIGNED.id(),
                None => 0,
            };
            let (namespace, pod) = match by_ip.get(&p.ip) {
                Some((ns, name)) => (ns.to_string(), name.to_string()),
                None => {
                    // A standalone node knows no pods: the namespace is the VNID's when one
                    // namespace has it.
                    let ns = match state.namespaces_of(vnid).as_slice() {
                        [one] => one.to_string(),
                        _ => String::new(),
                    };
                    (ns, String::new())
                }
            };
            if namespace.is_empty() {
                done.unnamed += 1;
                tracing::warn!(port = %p.port, sandbox = %p.sandbox, ip = %p.ip, vnid, "adopted pod's namespace is not known (no pod of this node has its address, and no single namespace has its VNID): it keeps its VNID until it is re-created");
            }
            let mut ids = BTreeMap::from([
                (keys::IFNAME.to_string(), POD_IFNAME.to_string()),
                (keys::NAMESPACE.to_string(), namespace.clone()),
                (keys::POD.to_string(), pod.clone()),
                // Not known (openshift-sdn did not record it): the runtime names it in CHECK
                // and DEL.
                (keys::NETNS.to_string(), String::new()),
                (keys::VNID.to_string(), vnid.to_string()),
            ]);
            // The host veth's IPv4 hardening now (sysctls, nothing else); its IPv6 stays as
            // openshift-sdn left it (see `keys::HARDENED`).
            match crate::host::netlink::isolate_host_veth_ipv4(&p.port) {
                Ok(()) => {
                    let v = crate::pod::record::Hardening::Ipv4Only.value();
                    ids.insert(
                        keys::HARDENED.to_string(),
                        v.unwrap_or_default().to_string(),
                    );
                }
                Err(e) => {
                    tracing::warn!(port = %p.port, error = %e, "taking the node kernel out of the adopted pod's path (retried at the next start)");
                }
            }
            if let Some(bps) = p.ingress_bps.filter(|b| *b > 0) {
                ids.insert(keys::INGRESS_RATE.into(), bps.to_string());
            }
            if let Some(kbps) = p.egress_kbps {
                ids.insert(keys::EGRESS_RATE.into(), (kbps * 1000).to_string());
            }
            db.set_interface_external_ids(&p.port, &ids)
                .await
                .with_step(|| format!("recording adopted pod port {}", p.port))?;
            for q in db.find_qos_by_external_id(keys::SANDBOX, &p.sandbox) {
                let ids = BTreeMap::from([(keys::IFNAME.to_string(), POD_IFNAME.to_string())]);
                db.set_qos_external_ids(&q.uuid, &ids).await.with_step(|| {
                    format!("recording the QoS row of adopted pod port {}", p.port)
                })?;
            }
            tracing::info!(port = %p.port, sandbox = %p.sandbox, ip = %p.ip, %namespace, %pod, vnid, "pod adopted from openshift-sdn");
            done.pods += 1;
        }
        // Leases: each adopted pod's moves into ours (taken first, then removed there, so the
        // address is never free in between).
        let theirs_dir = ipam_dir.join(CNI_NETWORK);
        if theirs_dir.is_dir() {
            let theirs = ipam::Store::new(ipam_dir, CNI_NETWORK)
                .with_step(|| format!("openshift-sdn's leases in {}", theirs_dir.display()))?;
            let pods: BTreeMap<Ipv4Addr, &FoundPod> = self.pods.iter().map(|p| (p.ip, p)).collect();
            for lease in theirs.leases().step("reading openshift-sdn's leases")? {
                match pods.get(&lease.ip) {
                    Some(p) => {
                        store
                            .record(p.ip, &p.sandbox, POD_IFNAME)
                            .with_step(|| format!("carrying over the lease of {}", p.ip))?;
                        done.leases += 1;
                    }
                    None => {
                        tracing::info!(ip = %lease.ip, sandbox = %lease.container_id, "openshift-sdn lease of an address no port has: not carried over");
                        done.stale_leases += 1;
                    }
                }
                theirs
                    .release_ip(lease.ip)
                    .with_step(|| format!("releasing openshift-sdn's lease of {}", lease.ip))?;
            }
        }
        Ok(done)
    }

    /// Removes what openshift-sdn's node left that nothing uses once ours is in place: its CNI
    /// config file, its lease directory (emptied by [`Found::adopt`]), the chains ours replace
    /// and its administrators' chain when empty. Returns what was removed, for the log.
    pub(super) async fn clean_up(cni_conf_dir: &Path, ipam_dir: &Path) -> Result<Vec<String>> {
        let mut removed = Vec::new();
        let conf = cni_conf_dir.join(CNI_CONF_FILE);
        match std::fs::remove_file(&conf) {
            Ok(()) => removed.push(conf.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_step(|| format!("removing {}", conf.display())),
        }
        let leases = ipam_dir.join(CNI_NETWORK);
        if leases.is_dir() {
            let left: Vec<String> = std::fs::read_dir(&leases)
                .with_step(|| format!("reading {}", leases.display()))?
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != "lock" && !n.starts_with("last_reserved_ip"))
                .collect();
            if left.is_empty() {
                std::fs::remove_dir_all(&leases)
                    .with_step(|| format!("removing {}", leases.display()))?;
                removed.push(leases.display().to_string());
            } else {
                tracing::warn!(dir = %leases.display(), files = %left.join(","), "openshift-sdn's lease directory holds files that are not its leases; left in place");
            }
        }
        let ipt = Iptables::host();
        let mut chains: Vec<(&str, &str)> = REPLACED_CHAINS.to_vec();
        let admin = ipt
            .list(ADMIN_CHAIN.0)
            .await
            .step("listing the filter table")?;
        let admin_rules = admin
            .iter()
            .filter(|l| l.starts_with(&format!("-A {} ", ADMIN_CHAIN.1)))
            .count();
        if admin_rules == 0 {
            chains.push(ADMIN_CHAIN);
        } else {
            tracing::warn!(chain = ADMIN_CHAIN.1, rules = admin_rules, "openshift-sdn's chain for administrators' rules holds rules; kept (move them to a chain of your own, then delete it)");
        }
        for (table, chain) in ipt
            .remove_chains(&chains)
            .await
            .step("removing openshift-sdn's iptables chains")?
        {
            removed.push(format!("iptables {table} {chain}"));
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(mode: Mode) -> NodeConfig {
        NodeConfig {
            datapath: flows::Datapath::Netdev,
            mode,
            node_ip: Ipv4Addr::new(192, 0, 2, 1).into(),
            ipv4: Some(flows::NodeIpv4 {
                local_subnet: "10.128.2.0/23".parse().unwrap(),
                cluster_networks: vec!["10.128.0.0/14".parse().unwrap()],
                service_cidr: "172.30.0.0/16".parse().unwrap(),
            }),
            vxlan_port: 4789,
            tun0_mac: None,
            ipv6: None,
        }
    }

    fn parse(rows: &[&str]) -> Vec<Flow> {
        rows.iter()
            .map(|r| ovs::flow::parse_flow(r, &ovs::flow::Names::default()).unwrap())
            .collect()
    }

    fn pod_port(name: &str, ofport: u32, ip: &str) -> Port {
        Port {
            name: name.into(),
            ofport: Some(ofport),
            external_ids: BTreeMap::from([
                ("sandbox".to_string(), format!("sb-{name}")),
                ("ip".to_string(), ip.to_string()),
            ]),
            max_rate: None,
            policing_kbps: None,
        }
    }

    #[test]
    fn markers_tell_openshift_sdn_from_ours() {
        let osdn = parse(&["table=253, actions=note:01.0D"]);
        assert_eq!(
            marker(&osdn),
            Marker::OpenshiftSdn {
                plugin: 1,
                version: 13
            }
        );
        let subnet = parse(&["table=253, actions=note:00.0C"]);
        assert_eq!(
            marker(&subnet),
            Marker::OpenshiftSdn {
                plugin: 0,
                version: 12
            }
        );
        let ours = flows::base_flows(&node(Mode::Multitenant));
        assert!(matches!(marker(&ours), Marker::Ours(t) if t.starts_with("multitenant.")));
        assert_eq!(marker(&[]), Marker::None);
        assert!(matches!(
            marker(&parse(&["table=253, actions=note:07.07.07"])),
            Marker::Unknown(_)
        ));
    }

    #[test]
    fn vnids_come_from_the_table_70_rows() {
        let flows = parse(&[
            "table=70, priority=100, ip, nw_dst=10.128.2.5, actions=load:0xb->NXM_NX_REG1[], load:0x3->NXM_NX_REG2[], goto_table:80",
            "table=70, priority=100, ip, nw_dst=10.128.2.6, actions=load:0->NXM_NX_REG1[], load:0x4->NXM_NX_REG2[], goto_table:80",
            "table=70, priority=0, actions=drop",
        ]);
        assert_eq!(vnids_by_ofport(&flows), BTreeMap::from([(3, 11), (4, 0)]));
    }

    #[test]
    fn a_matching_node_is_taken_over_and_every_mismatch_is_named() {
        let flows = parse(&[
            "table=253, actions=note:01.0D",
            "table=70, priority=100, ip, nw_dst=10.128.2.5, actions=load:0xb->NXM_NX_REG1[], load:0x3->NXM_NX_REG2[], goto_table:80",
        ]);
        let ports = vec![
            pod_port("vxlan0", 1, ""),
            pod_port("veth1", 3, "10.128.2.5"),
        ];
        let tun0: MacAddr = "2a:80:5a:9d:34:c0".parse().unwrap();
        let found = judge(
            &marker(&flows),
            &flows,
            &ports,
            Some(tun0),
            &node(Mode::Multitenant),
        )
        .unwrap();
        assert!(found.mismatches.is_empty(), "{:?}", found.mismatches);
        assert_eq!(found.tun0_mac, Some(tun0));
        assert_eq!(found.pods.len(), 1);
        assert_eq!(found.pods[0].vnid, Some(11));

        // Another version, another plugin, a stray port, a pod without a VNID row, an
        // address outside the subnet: each named.
        let flows2 = parse(&["table=253, actions=note:02.0C"]);
        let mut stray = pod_port("eth9", 7, "");
        stray.external_ids.clear();
        let ports2 = vec![
            stray,
            pod_port("veth1", 3, "10.128.2.5"),
            pod_port("veth2", 4, "10.9.0.1"),
        ];
        let found = judge(
            &marker(&flows2),
            &flows2,
            &ports2,
            None,
            &node(Mode::Multitenant),
        )
        .unwrap();
        let text = found.mismatches.join("\n");
        for needle in [
            "rule version 12",
            "networkpolicy plugin",
            "port eth9",
            "veth1 (10.128.2.5, ofport 3) has no VNID row",
            "10.9.0.1, outside",
            "tun0's MAC cannot be read",
        ] {
            assert!(text.contains(needle), "{needle:?} not in {text}");
        }

        // Our own node, and a node nobody set up: nothing to take over.
        let ours = flows::base_flows(&node(Mode::Multitenant));
        assert!(judge(
            &marker(&ours),
            &ours,
            &ports,
            None,
            &node(Mode::Multitenant)
        )
        .is_none());
        assert!(judge(&Marker::None, &[], &[], None, &node(Mode::Multitenant)).is_none());
        // Pods shaped as openshift-sdn's without its note: refused, not ignored.
        let found = judge(&Marker::None, &[], &ports, None, &node(Mode::Multitenant)).unwrap();
        assert!(found.mismatches[0].contains("no version row"));
    }
}
