//! Fake OVSDB: ports, interfaces and QoS rows (see [`super`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use ovs::ovsdb::{self, InterfaceInfo, PortSpec, QosInfo, QosSpec};

use super::{lock, FakeLinks, Faults};
use crate::bridge::seams::PortDb;

/// One fake port (with its one interface).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FakePort {
    /// Its bridge.
    pub bridge: String,
    /// Its ofport.
    pub ofport: u32,
    /// `Interface.type`.
    pub iface_type: String,
    /// `Interface.external_ids`.
    pub external_ids: BTreeMap<String, String>,
    /// `ingress_policing_rate`, `ingress_policing_burst`.
    pub policing: (u64, u64),
    /// `Port.qos`.
    pub qos: Option<String>,
}

#[derive(Debug, Default)]
struct DbState {
    ports: BTreeMap<String, FakePort>,
    qos: BTreeMap<String, QosInfo>,
    next_ofport: u32,
    next_uuid: u32,
}

/// Fake OVSDB (see the module docs).
#[derive(Debug)]
pub(crate) struct FakeDb {
    bridges: BTreeSet<String>,
    links: FakeLinks,
    state: Mutex<DbState>,
    /// Failure injection.
    pub faults: Faults,
    /// Held by a test to stop `add_port` (as a paused ovs-vswitchd would) until released.
    pub add_port_gate: tokio::sync::Mutex<()>,
}

fn db_injected(op: &str) -> ovsdb::Error {
    ovsdb::Error::Closed {
        target: "fake ovsdb".into(),
        reason: format!("injected failure of {op}"),
    }
}

impl FakeDb {
    /// A database with bridge `br0`, whose system ports must be devices of `links`.
    pub(crate) fn new(links: FakeLinks) -> FakeDb {
        FakeDb {
            bridges: BTreeSet::from(["br0".to_string()]),
            links,
            state: Mutex::new(DbState {
                next_ofport: 3,
                ..DbState::default()
            }),
            faults: Faults::default(),
            add_port_gate: tokio::sync::Mutex::new(()),
        }
    }

    /// Every port.
    pub(crate) fn ports(&self) -> BTreeMap<String, FakePort> {
        lock(&self.state).ports.clone()
    }

    /// Every QoS row.
    pub(crate) fn qos(&self) -> BTreeMap<String, QosInfo> {
        lock(&self.state).qos.clone()
    }

    /// Adds a port with a given ofport behind the agent's back (one that took a number).
    pub(crate) fn put_port_at(&self, name: &str, ofport: u32) {
        let mut s = lock(&self.state);
        s.ports.insert(
            name.into(),
            FakePort {
                bridge: "br0".into(),
                ofport,
                iface_type: String::new(),
                external_ids: BTreeMap::new(),
                policing: (0, 0),
                qos: None,
            },
        );
    }

    /// Gives port `name` another ofport, as a restarted ovs-vswitchd does when another port
    /// took its number first (-1: it cannot open the device).
    pub(crate) fn renumber(&self, name: &str, ofport: i64) {
        if let Some(p) = lock(&self.state).ports.get_mut(name) {
            p.ofport = u32::try_from(ofport).unwrap_or(u32::MAX);
        }
    }

    /// Deletes a port behind the agent's back.
    pub(crate) fn remove_port(&self, name: &str) {
        let mut s = lock(&self.state);
        s.ports.remove(name);
        for q in s.qos.values_mut() {
            q.ports.retain(|p| p != name);
        }
    }

    /// Runs `f` on interface `name`'s port, or fails as OVSDB does when there is none.
    fn with_interface(
        &self,
        name: &str,
        f: impl FnOnce(&mut FakePort),
    ) -> Result<(), ovsdb::Error> {
        let mut s = lock(&self.state);
        let p = s
            .ports
            .get_mut(name)
            .ok_or_else(|| ovsdb::Error::InterfaceNotFound(name.into()))?;
        f(p);
        Ok(())
    }

    /// Destroys a QoS row behind the agent's back (`ovs-vsctl destroy qos`, with the ports'
    /// references cleared).
    pub(crate) fn destroy_qos(&self, uuid: &str) {
        let mut s = lock(&self.state);
        s.qos.remove(uuid);
        for p in s.ports.values_mut() {
            if p.qos.as_deref() == Some(uuid) {
                p.qos = None;
            }
        }
    }

    /// Sets one `external_ids` key of a port's interface behind the agent's back.
    pub(crate) fn edit_external_id(&self, port: &str, key: &str, value: &str) {
        if let Some(p) = lock(&self.state).ports.get_mut(port) {
            p.external_ids.insert(key.into(), value.into());
        }
    }

    /// Adds a QoS row behind the agent's back.
    pub(crate) fn put_qos(&self, external_ids: BTreeMap<String, String>) -> String {
        let mut s = lock(&self.state);
        s.next_uuid += 1;
        let uuid = format!("qos-{}", s.next_uuid);
        s.qos.insert(
            uuid.clone(),
            QosInfo {
                uuid: uuid.clone(),
                qos_type: "linux-htb".into(),
                other_config: BTreeMap::new(),
                external_ids,
                queues: Vec::new(),
                ports: Vec::new(),
            },
        );
        uuid
    }

    fn info(name: &str, p: &FakePort) -> InterfaceInfo {
        InterfaceInfo {
            name: name.into(),
            // u32::MAX stands for ovs-vswitchd's -1 (the device cannot be opened).
            ofport: Some(if p.ofport == u32::MAX {
                -1
            } else {
                i64::from(p.ofport)
            }),
            external_ids: p.external_ids.clone(),
        }
    }
}

impl PortDb for FakeDb {
    async fn add_port(&self, bridge: &str, spec: &PortSpec) -> Result<u32, ovsdb::Error> {
        drop(self.add_port_gate.lock().await);
        if self.faults.hit("add_port") {
            return Err(db_injected("add_port"));
        }
        if !self.bridges.contains(bridge) {
            return Err(ovsdb::Error::BridgeNotFound(bridge.into()));
        }
        if spec.name.is_empty() {
            return Err(ovsdb::Error::BadValue {
                table: "Port".into(),
                column: "name".into(),
                reason: "empty name".into(),
            });
        }
        let mut s = lock(&self.state);
        if let Some(p) = s.ports.get_mut(&spec.name) {
            if p.bridge != bridge {
                return Err(ovsdb::Error::PortOnOtherBridge {
                    port: spec.name.clone(),
                    bridge: bridge.into(),
                    actual: p.bridge.clone(),
                });
            }
            p.external_ids = spec.external_ids.clone();
            return Ok(p.ofport);
        }
        if spec.iface_type.is_empty() && !self.links.exists(&spec.name) {
            return Err(ovsdb::Error::PortFailed {
                port: spec.name.clone(),
                bridge: bridge.into(),
                error: format!(
                    "could not open network device {} (No such device)",
                    spec.name
                ),
            });
        }
        // ofport_request is honoured when free, as ovs-vswitchd does.
        let requested = spec
            .ofport_request
            .map(u32::from)
            .filter(|r| !s.ports.values().any(|p| p.ofport == *r));
        let ofport = match requested {
            Some(r) => r,
            None => {
                let n = s.next_ofport;
                s.next_ofport += 1;
                n
            }
        };
        s.ports.insert(
            spec.name.clone(),
            FakePort {
                bridge: bridge.into(),
                ofport,
                iface_type: spec.iface_type.clone(),
                external_ids: spec.external_ids.clone(),
                policing: (0, 0),
                qos: None,
            },
        );
        Ok(ofport)
    }

    async fn delete_port(&self, bridge: &str, name: &str) -> Result<(), ovsdb::Error> {
        if self.faults.hit("delete_port") {
            return Err(db_injected("delete_port"));
        }
        let mut s = lock(&self.state);
        if s.ports.get(name).is_some_and(|p| p.bridge == bridge) {
            s.ports.remove(name);
            for q in s.qos.values_mut() {
                q.ports.retain(|p| p != name);
            }
        }
        Ok(())
    }

    async fn add_ports(&self, bridge: &str, specs: &[PortSpec]) -> Result<Vec<u32>, ovsdb::Error> {
        if self.faults.hit("add_ports") {
            return Err(db_injected("add_ports"));
        }
        let mut out = Vec::new();
        for spec in specs {
            if lock(&self.state).ports.contains_key(&spec.name) {
                return Err(ovsdb::Error::BadValue {
                    table: "Port".into(),
                    column: "name".into(),
                    reason: format!("{} exists", spec.name),
                });
            }
            out.push(PortDb::add_port(self, bridge, spec).await?);
        }
        Ok(out)
    }

    async fn delete_ports_nowait(
        &self,
        bridge: &str,
        names: &[String],
    ) -> Result<(), ovsdb::Error> {
        for n in names {
            PortDb::delete_port(self, bridge, n).await?;
        }
        Ok(())
    }

    async fn replace_interface_external_ids(
        &self,
        name: &str,
        ids: &BTreeMap<String, String>,
    ) -> Result<(), ovsdb::Error> {
        self.with_interface(name, |p| p.external_ids = ids.clone())
    }

    async fn set_interface_external_ids(
        &self,
        name: &str,
        ids: &BTreeMap<String, String>,
    ) -> Result<(), ovsdb::Error> {
        self.with_interface(name, |p| {
            p.external_ids
                .extend(ids.iter().map(|(k, v)| (k.clone(), v.clone())))
        })
    }

    async fn set_interface_policing(
        &self,
        name: &str,
        rate_kbps: u64,
        burst_kb: u64,
    ) -> Result<(), ovsdb::Error> {
        if self.faults.hit("set_interface_policing") {
            return Err(db_injected("set_interface_policing"));
        }
        let mut s = lock(&self.state);
        let p = s
            .ports
            .get_mut(name)
            .ok_or_else(|| ovsdb::Error::InterfaceNotFound(name.into()))?;
        p.policing = (rate_kbps, burst_kb);
        Ok(())
    }

    async fn set_port_qos(&self, port: &str, spec: &QosSpec) -> Result<String, ovsdb::Error> {
        if self.faults.hit("set_port_qos") {
            return Err(db_injected("set_port_qos"));
        }
        let mut s = lock(&self.state);
        if !s.ports.contains_key(port) {
            return Err(ovsdb::Error::PortNotFound(port.into()));
        }
        s.next_uuid += 1;
        let uuid = format!("qos-{}", s.next_uuid);
        s.qos.insert(
            uuid.clone(),
            QosInfo {
                uuid: uuid.clone(),
                qos_type: spec.qos_type.clone(),
                other_config: spec.other_config.clone(),
                external_ids: spec.external_ids.clone(),
                queues: spec
                    .queues
                    .keys()
                    .map(|q| format!("{uuid}-queue-{q}"))
                    .collect(),
                ports: vec![port.into()],
            },
        );
        if let Some(p) = s.ports.get_mut(port) {
            p.qos = Some(uuid.clone());
        }
        Ok(uuid)
    }

    async fn delete_qos(&self, uuid: &str) -> Result<(), ovsdb::Error> {
        let mut s = lock(&self.state);
        s.qos.remove(uuid);
        for p in s.ports.values_mut() {
            if p.qos.as_deref() == Some(uuid) {
                p.qos = None;
            }
        }
        Ok(())
    }

    fn cache_live(&self) -> bool {
        true
    }

    fn ofport_now(&self, name: &str) -> Option<i64> {
        let s = lock(&self.state);
        let p = s.ports.get(name)?;
        FakeDb::info(name, p).ofport
    }

    fn interface(&self, name: &str) -> Option<InterfaceInfo> {
        let s = lock(&self.state);
        s.ports.get(name).map(|p| FakeDb::info(name, p))
    }

    fn interfaces_with_external_id(&self, key: &str) -> Vec<InterfaceInfo> {
        lock(&self.state)
            .ports
            .iter()
            .filter(|(_, p)| p.external_ids.contains_key(key))
            .map(|(n, p)| FakeDb::info(n, p))
            .collect()
    }

    fn find_qos_by_external_id(&self, key: &str, value: &str) -> Vec<QosInfo> {
        lock(&self.state)
            .qos
            .values()
            .filter(|q| q.external_ids.get(key).map(String::as_str) == Some(value))
            .cloned()
            .collect()
    }

    fn qos_external_ids(&self) -> Vec<BTreeMap<String, String>> {
        lock(&self.state)
            .qos
            .values()
            .map(|q| q.external_ids.clone())
            .collect()
    }
}
