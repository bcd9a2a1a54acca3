//! [`PortDb`] on the real OVSDB client: transactions counted in the agent's metrics, and
//! reads from its monitored cache (by name through the cache's index, changes through its row
//! versions).

use std::collections::{BTreeMap, HashMap};

use ovs::ovsdb::{self, InterfaceInfo, PortSpec, QosInfo, QosSpec};

use super::{counted, DbChanges, PortDb};

/// An Interface row of the cache as [`InterfaceInfo`].
fn info(i: &ovsdb::Row) -> InterfaceInfo {
    InterfaceInfo {
        name: i.name().to_string(),
        ofport: i.integer("ofport"),
        external_ids: i.string_map("external_ids"),
    }
}

impl PortDb for ovsdb::Client {
    async fn add_port(&self, bridge: &str, spec: &PortSpec) -> Result<u32, ovsdb::Error> {
        counted(ovsdb::Client::add_port(self, bridge, spec).await)
    }

    async fn delete_port(&self, bridge: &str, name: &str) -> Result<(), ovsdb::Error> {
        counted(ovsdb::Client::delete_port(self, bridge, name).await)
    }

    async fn add_ports(&self, bridge: &str, specs: &[PortSpec]) -> Result<Vec<u32>, ovsdb::Error> {
        counted(ovsdb::Client::add_ports(self, bridge, specs).await)
    }

    async fn delete_ports_nowait(
        &self,
        bridge: &str,
        names: &[String],
    ) -> Result<(), ovsdb::Error> {
        counted(ovsdb::Client::delete_ports_nowait(self, bridge, names).await)
    }

    async fn replace_interface_external_ids(
        &self,
        name: &str,
        ids: &BTreeMap<String, String>,
    ) -> Result<(), ovsdb::Error> {
        counted(ovsdb::Client::replace_interface_external_ids(self, name, ids).await)
    }

    async fn set_interface_external_ids(
        &self,
        name: &str,
        ids: &BTreeMap<String, String>,
    ) -> Result<(), ovsdb::Error> {
        counted(ovsdb::Client::set_interface_external_ids(self, name, ids).await)
    }

    async fn set_interface_policing(
        &self,
        name: &str,
        rate_kbps: u64,
        burst_kb: u64,
    ) -> Result<(), ovsdb::Error> {
        counted(ovsdb::Client::set_interface_policing(self, name, rate_kbps, burst_kb).await)
    }

    async fn set_port_qos(&self, port: &str, spec: &QosSpec) -> Result<String, ovsdb::Error> {
        counted(ovsdb::Client::set_port_qos(self, port, spec).await)
    }

    async fn delete_qos(&self, uuid: &str) -> Result<(), ovsdb::Error> {
        counted(ovsdb::Client::delete_qos(self, uuid).await)
    }

    fn cache_live(&self) -> bool {
        self.state() == ovsdb::ConnectionState::Connected
    }

    fn ofports_with_external_id(&self, key: &str) -> HashMap<String, Option<i64>> {
        self.with_cache(|c| {
            c.table("Interface")
                .filter(|i| {
                    i.get("external_ids")
                        .is_some_and(|d| d.as_map().iter().any(|(k, _)| k.as_str() == Some(key)))
                })
                .map(|i| (i.name().to_string(), i.integer("ofport")))
                .collect()
        })
    }

    fn ofport_now(&self, name: &str) -> Option<i64> {
        self.with_cache(|c| c.interface(name).and_then(|i| i.integer("ofport")))
    }

    fn find_interfaces_by_external_id(&self, key: &str, value: &str) -> Vec<InterfaceInfo> {
        // Only the matches are copied out (a DEL asks this of a cache of every pod's port).
        let key = ovsdb::Atom::from(key);
        self.with_cache(|c| {
            c.table("Interface")
                .filter(|i| {
                    i.map_get("external_ids", &key)
                        .and_then(ovsdb::Atom::as_str)
                        == Some(value)
                })
                .map(info)
                .collect()
        })
    }

    fn interface(&self, name: &str) -> Option<InterfaceInfo> {
        self.with_cache(|c| c.interface(name).map(info))
    }

    fn changes_since(&self, since: u64) -> DbChanges {
        self.with_cache(|c| {
            let everything = since == 0
                || ["Interface", "Port", "QoS"]
                    .iter()
                    .any(|t| c.deleted_since(t, since))
                || c.changed_since("QoS", since).next().is_some();
            DbChanges {
                version: c.version(),
                changed: (!everything).then(|| {
                    ["Interface", "Port"]
                        .iter()
                        .flat_map(|t| c.changed_since(t, since))
                        .map(|r| r.name().to_string())
                        .collect()
                }),
            }
        })
    }

    fn interfaces_with_external_id(&self, key: &str) -> Vec<InterfaceInfo> {
        let key = ovsdb::Atom::from(key);
        self.with_cache(|c| {
            c.table("Interface")
                .filter(|i| i.map_get("external_ids", &key).is_some())
                .map(info)
                .collect()
        })
    }

    fn find_qos_by_external_id(&self, key: &str, value: &str) -> Vec<QosInfo> {
        ovsdb::Client::find_qos_by_external_id(self, key, value)
    }

    fn qos_external_ids(&self) -> Vec<BTreeMap<String, String>> {
        self.with_cache(|c| {
            c.table("QoS")
                .map(|q| q.string_map("external_ids"))
                .collect()
        })
    }
}
