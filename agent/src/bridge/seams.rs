//! Thin traits at every I/O seam the pod and node logic uses: OVSDB ports and QoS
//! ([`PortDb`]), OpenFlow flows and meters ([`FlowSwitch`]), netlink links ([`PodLinks`]) and
//! iptables ([`NatRules`]). [`NodeIo`] bundles one implementation of each.
//!
//! Why: the pod logic (ADD as undoable steps, DEL with pieces missing, GC, rebuild, VNID
//! re-flow) and the flow store are the riskiest code of the agent, and before these seams they
//! could only be exercised as root against real OVS. Now they are generic over [`NodeIo`]: the
//! agent runs them on [`HostIo`] (the real clients, each tested against real OVS, netlink and
//! iptables in `tests/`), and component tests run them on the stateful fakes of
//! `crate::bridge::fake`, which validate their input the way the real thing does.
//!
//! Each method states what the real implementation guarantees (idempotency, atomicity); the
//! fakes keep the same contract. Async methods return `Send` futures so the callers can run on
//! any tokio worker.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Debug;
use std::future::Future;
use std::path::Path;

use ovs::flow::{Flow, Group};
use ovs::openflow::{BundleMsg, DumpFilter, Meter, MeterModCommand, OfError};
use ovs::ovsdb::{self, InterfaceInfo, PortSpec, QosInfo, QosSpec};

use crate::bridge::switch::Switch;
use crate::host::iptables::{Iptables, IptablesError};
use crate::host::netlink::{Netlink, NetlinkError, PodLink, PodLinkSpec, PodLinkState};

mod ovsdb_client;

/// The OVSDB side of pods: ports on the bridge, their `external_ids`, policing and QoS.
pub trait PortDb: Send + Sync + Debug + 'static {
    /// Adds port `spec` (one interface) to `bridge` and waits for its ofport; an existing port
    /// of that name is updated instead (idempotent). Fails naming the interface's `error` when
    /// ovs-vswitchd cannot open the device.
    fn add_port(
        &self,
        bridge: &str,
        spec: &PortSpec,
    ) -> impl Future<Output = Result<u32, ovsdb::Error>> + Send;

    /// Deletes port `name` from `bridge`; a missing port is not an error (idempotent).
    fn delete_port(
        &self,
        bridge: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), ovsdb::Error>> + Send;

    /// Adds several new ports to `bridge` in one transaction (one reconfiguration of
    /// ovs-vswitchd) and waits for their ofports, returned in `specs` order.
    fn add_ports(
        &self,
        bridge: &str,
        specs: &[PortSpec],
    ) -> impl Future<Output = Result<Vec<u32>, ovsdb::Error>> + Send;

    /// Deletes ports from `bridge` in one transaction without waiting for ovs-vswitchd (the
    /// rows are gone on return; missing ports are skipped).
    fn delete_ports_nowait(
        &self,
        bridge: &str,
        names: &[String],
    ) -> impl Future<Output = Result<(), ovsdb::Error>> + Send;

    /// Replaces the whole `external_ids` of Interface `name`.
    fn replace_interface_external_ids(
        &self,
        name: &str,
        ids: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), ovsdb::Error>> + Send;

    /// Sets the given `external_ids` keys of Interface `name`, keeping the others.
    fn set_interface_external_ids(
        &self,
        name: &str,
        ids: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), ovsdb::Error>> + Send;

    /// Sets ingress policing of Interface `name` (`0, 0`: off).
    fn set_interface_policing(
        &self,
        name: &str,
        rate_kbps: u64,
        burst_kb: u64,
    ) -> impl Future<Output = Result<(), ovsdb::Error>> + Send;

    /// Creates a QoS row (with its queues) and attaches it to `port`, in one transaction;
    /// returns its uuid.
    fn set_port_qos(
        &self,
        port: &str,
        spec: &QosSpec,
    ) -> impl Future<Output = Result<String, ovsdb::Error>> + Send;

    /// Deletes QoS row `uuid` and its queues, detaching it from every port; a missing row is
    /// not an error.
    fn delete_qos(&self, uuid: &str) -> impl Future<Output = Result<(), ovsdb::Error>> + Send;

    /// Interfaces (from the monitored cache) whose `external_ids` hold `key`, whatever its value.
    fn interfaces_with_external_id(&self, key: &str) -> Vec<InterfaceInfo>;

    /// Interface `name` (from the cache).
    fn interface(&self, name: &str) -> Option<InterfaceInfo>;

    /// What changed in the cache after its version `since` (0: never looked), so that a reader
    /// visits only that. The default answers "look at everything" ([`DbChanges::changed`]
    /// `None`).
    fn changes_since(&self, since: u64) -> DbChanges {
        DbChanges {
            version: since,
            changed: None,
        }
    }

    /// Whether the cache follows the database now (connected): a row missing from it is a row
    /// missing from OVSDB.
    fn cache_live(&self) -> bool;

    /// The `ofport` column of every Interface whose `external_ids` hold `key`, by name (what
    /// [`Self::interfaces_with_external_id`] gives, without copying the records: it is read
    /// every second).
    fn ofports_with_external_id(&self, key: &str) -> HashMap<String, Option<i64>> {
        self.interfaces_with_external_id(key)
            .into_iter()
            .map(|i| (i.name, i.ofport))
            .collect()
    }

    /// Interface `name`'s `ofport` column in the cache now (`None`: no row or not numbered
    /// yet; -1: ovs-vswitchd cannot open it).
    fn ofport_now(&self, name: &str) -> Option<i64>;

    /// Interfaces (from the cache) whose `external_ids:key` is `value`.
    fn find_interfaces_by_external_id(&self, key: &str, value: &str) -> Vec<InterfaceInfo> {
        let mut found = self.interfaces_with_external_id(key);
        found.retain(|i| i.external_ids.get(key).map(String::as_str) == Some(value));
        found
    }

    /// QoS rows (from the cache) whose `external_ids:key` is `value`.
    fn find_qos_by_external_id(&self, key: &str, value: &str) -> Vec<QosInfo>;

    /// The `external_ids` of every QoS row (from the cache).
    fn qos_external_ids(&self) -> Vec<BTreeMap<String, String>>;
}

/// What changed in the OVSDB cache after a version ([`PortDb::changes_since`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DbChanges {
    /// The cache's version now: the `since` of the next call.
    pub version: u64,
    /// The Interfaces and Ports inserted or changed since, by name; `None` means "look at
    /// everything": a row of Interface, Port or QoS was deleted or a QoS row changed, the cache
    /// was (re)loaded, or the reader never looked.
    pub changed: Option<HashSet<String>>,
}

/// The OpenFlow side of `br0`: flows (in atomic bundles) and meters.
pub trait FlowSwitch: Send + Sync + Debug + 'static {
    /// Applies `msgs` in one atomic bundle: all of them or, on any error, none.
    fn bundle(&self, msgs: &[BundleMsg]) -> impl Future<Output = Result<(), OfError>> + Send;

    /// The flows `filter` selects.
    fn dump_flows(
        &self,
        filter: &DumpFilter,
    ) -> impl Future<Output = Result<Vec<Flow>, OfError>> + Send;

    /// The flows `filter` selects, each handed to `f` as it arrives, so a full reconcile never
    /// holds the whole bridge's flows at once (the real switch streams its dump's reply parts;
    /// this default dumps first).
    fn for_each_flow(
        &self,
        filter: &DumpFilter,
        mut f: impl FnMut(Flow) + Send,
    ) -> impl Future<Output = Result<(), OfError>> + Send {
        async move {
            self.dump_flows(filter).await?.into_iter().for_each(&mut f);
            Ok(())
        }
    }

    /// Every meter with its configuration.
    fn dump_meters(&self) -> impl Future<Output = Result<Vec<Meter>, OfError>> + Send;

    /// Every group with its buckets.
    fn dump_groups(&self) -> impl Future<Output = Result<Vec<Group>, OfError>> + Send;

    /// Adds, modifies or deletes a meter (delete of a missing meter is not an error).
    fn meter_mod(
        &self,
        command: MeterModCommand,
        meter: &Meter,
    ) -> impl Future<Output = Result<(), OfError>> + Send;

    /// How many times the connection was (re)opened: a change means the switch may have lost
    /// state (ovs-vswitchd restarted) and the desired state must be replayed.
    fn generation(&self) -> u64;
}

/// The netlink side of pods: veth pairs and the pod end's configuration.
pub trait PodLinks: Send + Sync + Debug + 'static {
    /// Creates the veth pair of `spec` with the pod end configured inside the pod's netns.
    fn create_pod_link(
        &self,
        spec: &PodLinkSpec,
    ) -> impl Future<Output = Result<PodLink, NetlinkError>> + Send;

    /// Deletes the host end of a veth (its peer goes with it); whether it existed.
    fn delete_host_veth(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<bool, NetlinkError>> + Send;

    /// The pod interface `ifname` in `netns` as it is now.
    fn inspect_pod_interface(
        &self,
        netns: &Path,
        ifname: &str,
    ) -> impl Future<Output = Result<PodLinkState, NetlinkError>> + Send;

    /// Creates a veth pair for the port pool: `host` up in the node netns with the node kernel
    /// taken out of its path, `peer` up in the agent's parking namespace (a pod's interface is
    /// made on top of it at ADD, see [`PodLinkSpec::pool_peer`]).
    fn create_pool_veth(
        &self,
        host: &str,
        peer: &str,
        mtu: u32,
        tx_checksum_off: bool,
    ) -> impl Future<Output = Result<(), NetlinkError>> + Send;

    /// Takes a pod's interface off pool peer `peer`: deletes `ifname` in `netns` (when given
    /// and still there) and says whether the peer is free again (parked, nothing on it), so
    /// that its port can go back to the pool.
    fn release_pool_link(
        &self,
        peer: &str,
        netns: Option<&Path>,
        ifname: &str,
    ) -> impl Future<Output = Result<bool, NetlinkError>> + Send;

    /// Whether pool peer `name` waits in the parking namespace, free.
    fn pool_peer_parked(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<bool, NetlinkError>> + Send;

    /// Keeps the MLD messages of a pod on pool peer `name` off br0 (a `tc` drop on the peer's
    /// egress; see `host::netlink::mld`). Idempotent, never fails (it logs).
    fn quiet_pool_peer(&self, name: &str) -> impl Future<Output = ()> + Send;

    /// The interface index of node-netns link `name`, if it exists.
    fn link_exists(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<u32>, NetlinkError>> + Send;

    /// The names of the node-netns links starting with `prefix`.
    fn links_named(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<String>, NetlinkError>> + Send;

    /// Takes the node's kernel out of a host veth's path (no forwarding, no ARP answers, no IPv6).
    fn isolate_host_veth(&self, name: &str) -> Result<(), NetlinkError>;
}

/// The iptables side: whole-table listings and atomic `iptables-restore --noflush` inputs.
pub trait NatRules: Send + Sync + Debug + 'static {
    /// `iptables -t <table> -S`: every chain (`-N X`, `-P X ACCEPT`) and rule (`-A X ...`).
    fn list(&self, table: &str) -> impl Future<Output = Result<Vec<String>, IptablesError>> + Send;

    /// Applies an `iptables-restore --noflush` input atomically: a bad line changes nothing.
    fn restore(&self, input: &str) -> impl Future<Output = Result<(), IptablesError>> + Send;

    /// The same place's IPv6 rules (`ip6tables`).
    fn six(&self) -> Self
    where
        Self: Sized;

    /// Whether this is the node's real NAT, where the agent serves `[::1]` host ports with
    /// sockets of its own (`features::hostports::loopback6`); a fake's are not served.
    fn proxies_loopback6(&self) -> bool {
        false
    }
}

/// One implementation of every seam.
pub trait NodeIo: Send + Sync + Debug + 'static {
    /// OVSDB.
    type Db: PortDb;
    /// OpenFlow on br0.
    type Switch: FlowSwitch;
    /// Netlink.
    type Links: PodLinks;
    /// iptables.
    type Nat: NatRules;
}

/// The real node: the native OVSDB and OpenFlow clients, rtnetlink and iptables.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostIo;

impl NodeIo for HostIo {
    type Db = ovsdb::Client;
    type Switch = Switch;
    type Links = Netlink;
    type Nat = Iptables;
}

/// Counts an OVS operation's result in `openshift_sdn_ovs_operations` and passes it on: every
/// OVSDB transaction and OpenFlow request of the pod logic and the flow store goes through the
/// impls below.
fn counted<T, E>(r: Result<T, E>) -> Result<T, E> {
    crate::telemetry::metrics::metrics().ovs_result(&r);
    r
}

impl FlowSwitch for Switch {
    async fn bundle(&self, msgs: &[BundleMsg]) -> Result<(), OfError> {
        counted(Switch::bundle(self, msgs).await)
    }

    async fn dump_flows(&self, filter: &DumpFilter) -> Result<Vec<Flow>, OfError> {
        counted(Switch::dump(self, filter).await)
    }

    async fn for_each_flow(
        &self,
        filter: &DumpFilter,
        f: impl FnMut(Flow) + Send,
    ) -> Result<(), OfError> {
        counted(Switch::for_each_flow(self, filter, f).await)
    }

    async fn dump_meters(&self) -> Result<Vec<Meter>, OfError> {
        counted(async { self.client().await?.dump_meters().await }.await)
    }

    async fn dump_groups(&self) -> Result<Vec<Group>, OfError> {
        counted(async { self.client().await?.dump_groups().await }.await)
    }

    async fn meter_mod(&self, command: MeterModCommand, meter: &Meter) -> Result<(), OfError> {
        counted(async { self.client().await?.meter_mod(command, meter).await }.await)
    }

    fn generation(&self) -> u64 {
        Switch::generation(self)
    }
}

impl PodLinks for Netlink {
    async fn create_pod_link(&self, spec: &PodLinkSpec) -> Result<PodLink, NetlinkError> {
        Netlink::create_pod_link(self, spec).await
    }

    async fn delete_host_veth(&self, name: &str) -> Result<bool, NetlinkError> {
        Netlink::delete_host_veth(self, name).await
    }

    async fn inspect_pod_interface(
        &self,
        netns: &Path,
        ifname: &str,
    ) -> Result<PodLinkState, NetlinkError> {
        Netlink::inspect_pod_interface(self, netns, ifname).await
    }

    async fn link_exists(&self, name: &str) -> Result<Option<u32>, NetlinkError> {
        Netlink::link_exists(self, name).await
    }

    async fn create_pool_veth(
        &self,
        host: &str,
        peer: &str,
        mtu: u32,
        tx_checksum_off: bool,
    ) -> Result<(), NetlinkError> {
        Netlink::create_pool_veth(self, host, peer, mtu, tx_checksum_off).await
    }

    async fn release_pool_link(
        &self,
        peer: &str,
        netns: Option<&Path>,
        ifname: &str,
    ) -> Result<bool, NetlinkError> {
        Netlink::release_pool_link(self, peer, netns, ifname).await
    }

    async fn pool_peer_parked(&self, name: &str) -> Result<bool, NetlinkError> {
        Netlink::parked(self, name).await
    }

    async fn quiet_pool_peer(&self, name: &str) {
        Netlink::quiet_pool_peer(self, name).await
    }

    async fn links_named(&self, prefix: &str) -> Result<Vec<String>, NetlinkError> {
        Netlink::links_named(self, prefix).await
    }

    fn isolate_host_veth(&self, name: &str) -> Result<(), NetlinkError> {
        crate::host::netlink::isolate_host_veth(name)
    }
}

impl NatRules for Iptables {
    async fn list(&self, table: &str) -> Result<Vec<String>, IptablesError> {
        Iptables::list(self, table).await
    }

    async fn restore(&self, input: &str) -> Result<(), IptablesError> {
        Iptables::restore(self, input).await
    }

    fn six(&self) -> Iptables {
        Iptables::six(self)
    }

    fn proxies_loopback6(&self) -> bool {
        true
    }
}

/// A shared handle is the thing itself (so tests keep a handle on the fakes they hand over).
impl<T: PortDb> PortDb for std::sync::Arc<T> {
    fn add_port(
        &self,
        bridge: &str,
        spec: &PortSpec,
    ) -> impl Future<Output = Result<u32, ovsdb::Error>> + Send {
        (**self).add_port(bridge, spec)
    }

    fn delete_port(
        &self,
        bridge: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), ovsdb::Error>> + Send {
        (**self).delete_port(bridge, name)
    }

    fn set_interface_external_ids(
        &self,
        name: &str,
        ids: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), ovsdb::Error>> + Send {
        (**self).set_interface_external_ids(name, ids)
    }

    fn add_ports(
        &self,
        bridge: &str,
        specs: &[PortSpec],
    ) -> impl Future<Output = Result<Vec<u32>, ovsdb::Error>> + Send {
        (**self).add_ports(bridge, specs)
    }

    fn delete_ports_nowait(
        &self,
        bridge: &str,
        names: &[String],
    ) -> impl Future<Output = Result<(), ovsdb::Error>> + Send {
        (**self).delete_ports_nowait(bridge, names)
    }

    fn replace_interface_external_ids(
        &self,
        name: &str,
        ids: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), ovsdb::Error>> + Send {
        (**self).replace_interface_external_ids(name, ids)
    }

    fn set_interface_policing(
        &self,
        name: &str,
        rate_kbps: u64,
        burst_kb: u64,
    ) -> impl Future<Output = Result<(), ovsdb::Error>> + Send {
        (**self).set_interface_policing(name, rate_kbps, burst_kb)
    }

    fn set_port_qos(
        &self,
        port: &str,
        spec: &QosSpec,
    ) -> impl Future<Output = Result<String, ovsdb::Error>> + Send {
        (**self).set_port_qos(port, spec)
    }

    fn delete_qos(&self, uuid: &str) -> impl Future<Output = Result<(), ovsdb::Error>> + Send {
        (**self).delete_qos(uuid)
    }

    fn interfaces_with_external_id(&self, key: &str) -> Vec<InterfaceInfo> {
        (**self).interfaces_with_external_id(key)
    }

    fn interface(&self, name: &str) -> Option<InterfaceInfo> {
        (**self).interface(name)
    }

    fn find_interfaces_by_external_id(&self, key: &str, value: &str) -> Vec<InterfaceInfo> {
        (**self).find_interfaces_by_external_id(key, value)
    }

    fn changes_since(&self, since: u64) -> DbChanges {
        (**self).changes_since(since)
    }

    fn cache_live(&self) -> bool {
        (**self).cache_live()
    }

    fn ofports_with_external_id(&self, key: &str) -> HashMap<String, Option<i64>> {
        (**self).ofports_with_external_id(key)
    }

    fn ofport_now(&self, name: &str) -> Option<i64> {
        (**self).ofport_now(name)
    }

    fn find_qos_by_external_id(&self, key: &str, value: &str) -> Vec<QosInfo> {
        (**self).find_qos_by_external_id(key, value)
    }

    fn qos_external_ids(&self) -> Vec<BTreeMap<String, String>> {
        (**self).qos_external_ids()
    }
}

impl<T: NatRules> NatRules for std::sync::Arc<T> {
    fn list(&self, table: &str) -> impl Future<Output = Result<Vec<String>, IptablesError>> + Send {
        (**self).list(table)
    }

    fn restore(&self, input: &str) -> impl Future<Output = Result<(), IptablesError>> + Send {
        (**self).restore(input)
    }

    fn six(&self) -> Self {
        std::sync::Arc::new((**self).six())
    }

    fn proxies_loopback6(&self) -> bool {
        (**self).proxies_loopback6()
    }
}
