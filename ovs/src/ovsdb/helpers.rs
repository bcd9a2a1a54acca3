//! Bridge and port operations the node agent needs, on top of [`Client`].
//!
//! Each helper reads the cache to plan, then runs ONE transaction whose first operations are
//! `wait` guards (timeout 0) asserting what the plan assumed (the bridge still exists, the port
//! does not exist yet, ...). If another client changed the database in between, a guard fails,
//! nothing is committed, and the helper re-plans from the (by then updated) cache, at most
//! [`ATTEMPTS`] times. Like `ovs-vsctl` without `--no-wait`, changes also bump
//! `Open_vSwitch.next_cfg`, and the helper waits (bounded by [`ClientOptions::apply_timeout`])
//! until ovs-vswitchd has applied them (`cur_cfg` caught up), unless
//! [`ClientOptions::wait_for_vswitchd`] is off.
//!
//! Helpers that find nothing to change commit nothing (no `next_cfg` bump), so calling them in a
//! reconcile loop is cheap.
//!
//! Limits: one interface per port (no bonds); the port's external ids live on its Interface
//! row, as OpenShift SDN and OVN do.
//!
//! Why one piece: every helper follows the same plan / guarded transaction /
//! re-plan / wait-for-ovs-vswitchd pattern over the same cache accessors.
//!
//! [`ClientOptions::apply_timeout`]: super::ClientOptions::apply_timeout
//! [`ClientOptions::wait_for_vswitchd`]: super::ClientOptions::wait_for_vswitchd

use std::collections::BTreeMap;

use super::cache::{Cache, Row};
use super::ops::{row, Atom, Condition, Datum, Mutation, OpResult, Operation};
use super::{Client, Error, DB};

/// How many times a helper re-plans after a guard saw a concurrent change.
pub const ATTEMPTS: usize = 3;

/// `Bridge.fail_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailMode {
    /// Act as a learning switch when no controller is connected.
    Standalone,
    /// Only the installed flows forward traffic.
    Secure,
}

impl FailMode {
    /// The database value.
    pub fn as_str(self) -> &'static str {
        match self {
            FailMode::Standalone => "standalone",
            FailMode::Secure => "secure",
        }
    }
}

/// The columns [`Client::ensure_bridge`] manages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BridgeSpec {
    /// `datapath_type`: `netdev` (userspace) or `system`/`""` (kernel).
    pub datapath_type: String,
    /// `fail_mode`; `None` leaves it unset.
    pub fail_mode: Option<FailMode>,
    /// `protocols`, e.g. `["OpenFlow13"]`; empty means OVS's default set.
    pub protocols: Vec<String>,
    /// `other_config` keys to set; keys not listed here are left alone.
    pub other_config: BTreeMap<String, String>,
}

/// A port with one interface, for [`Client::add_port`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortSpec {
    /// Port and interface name.
    pub name: String,
    /// `Interface.type`: `""` (a system device), `internal`, `vxlan`, `patch`...
    pub iface_type: String,
    /// `Interface.options`, e.g. `remote_ip=flow, key=flow`.
    pub options: BTreeMap<String, String>,
    /// `Interface.external_ids`.
    pub external_ids: BTreeMap<String, String>,
    /// `Interface.ofport_request`.
    pub ofport_request: Option<u16>,
    /// `Interface.mtu_request`.
    pub mtu_request: Option<u32>,
    /// `Interface.mac` (internal ports: the MAC ovs-vswitchd gives the device, kept across its
    /// restarts), e.g. `0a:58:0a:80:00:01`.
    pub mac: Option<String>,
}

impl PortSpec {
    /// A port named `name` of type `iface_type`, nothing else set.
    pub fn new(name: impl Into<String>, iface_type: impl Into<String>) -> Self {
        PortSpec {
            name: name.into(),
            iface_type: iface_type.into(),
            ..PortSpec::default()
        }
    }
}

/// An interface found by [`Client::find_interfaces_by_external_id`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceInfo {
    /// Interface name.
    pub name: String,
    /// OpenFlow port number; `None` before ovs-vswitchd assigned one, `Some(-1)` on failure.
    pub ofport: Option<i64>,
    /// `external_ids`.
    pub external_ids: BTreeMap<String, String>,
}

/// `[Open_vSwitch next_cfg += 1, select next_cfg]`: what makes ovs-vswitchd report back.
fn bump(root: &str) -> [Operation; 2] {
    [
        Operation::mutate(
            "Open_vSwitch",
            vec![Condition::uuid(root)],
            vec![Mutation::add("next_cfg", 1)],
        ),
        Operation::select(
            "Open_vSwitch",
            vec![Condition::uuid(root)],
            Some(&["next_cfg"]),
        ),
    ]
}

/// The cached row of `bridge`, or [`Error::BridgeNotFound`].
fn existing_bridge<'c>(c: &'c Cache, bridge: &str) -> Result<&'c Row, Error> {
    c.bridge(bridge)
        .ok_or_else(|| Error::BridgeNotFound(bridge.to_string()))
}

pub(super) fn root_uuid(c: &Cache) -> Result<String, Error> {
    c.open_vswitch()
        .map(|r| r.uuid().to_string())
        .ok_or(Error::NoRootRow)
}

/// Whether ovs-vswitchd has applied configuration `next_cfg` (`cur_cfg` caught up); `None`
/// (not waiting for ovs-vswitchd) counts as applied.
fn cfg_applied(c: &Cache, next_cfg: Option<i64>) -> bool {
    next_cfg.is_none_or(|n| {
        c.open_vswitch()
            .and_then(|r| r.integer("cur_cfg"))
            .is_some_and(|cur| cur >= n)
    })
}

/// A wait guard that failed: another client changed what the plan assumed.
fn guard_failed(e: &Error, guards: usize) -> bool {
    matches!(e, Error::Transaction { index: Some(i), error, .. } if *i < guards && error == "timed out")
}

/// `wait` guard: exactly the row `uuid` of `table`, still named `name`.
fn assert_named(table: &str, uuid: &str, name: &str) -> Operation {
    Operation::assert_rows(
        table,
        vec![Condition::uuid(uuid)],
        vec![row([("name", name)])],
    )
}

/// `wait` guard: no row of `table` named `name`.
fn assert_absent(table: &str, name: &str) -> Operation {
    Operation::assert_rows(table, vec![Condition::eq("name", name)], vec![])
}

fn interface_columns(spec: &PortSpec) -> super::ops::RowData {
    row([
        ("type", Datum::from(spec.iface_type.as_str())),
        ("options", Datum::from(&spec.options)),
        ("external_ids", Datum::from(&spec.external_ids)),
        (
            "ofport_request",
            Datum::optional(spec.ofport_request.map(i64::from)),
        ),
        (
            "mtu_request",
            Datum::optional(spec.mtu_request.map(i64::from)),
        ),
        ("mac", Datum::optional(spec.mac.as_deref())),
    ])
}

impl Client {
    /// Runs `ops` plus a `next_cfg` bump (when waiting for ovs-vswitchd is on) and returns
    /// the results of `ops` and the `next_cfg` to wait for.
    pub(super) async fn transact_bumped(
        &self,
        root: &str,
        mut ops: Vec<Operation>,
    ) -> Result<(Vec<OpResult>, Option<i64>), Error> {
        let n = ops.len();
        let wait = self.options().wait_for_vswitchd;
        if wait {
            ops.extend(bump(root));
        }
        let mut results = self.transact(DB, &ops).await?;
        let next_cfg = if wait {
            let cfg = results
                .get(n + 1)
                .and_then(|r| r.rows.first())
                .and_then(|r| r.get("next_cfg"))
                .and_then(Datum::as_atom)
                .and_then(Atom::as_integer);
            if cfg.is_none() {
                return Err(Error::BadValue {
                    table: "Open_vSwitch".to_string(),
                    column: "next_cfg".to_string(),
                    reason: "not returned by select".to_string(),
                });
            }
            cfg
        } else {
            None
        };
        results.truncate(n);
        Ok((results, next_cfg))
    }

    /// After a guard failed: waits (at most the request timeout) until the cache has changed
    /// since the plan was made, so the next plan sees the concurrent change.
    async fn settle(&self, changes: &mut tokio::sync::watch::Receiver<Cache>) {
        let _ = tokio::time::timeout(self.options().request_timeout, changes.changed()).await;
    }

    /// Waits until ovs-vswitchd reports `cur_cfg >= next_cfg` (no-op for `None`).
    pub(super) async fn wait_applied(
        &self,
        what: &str,
        next_cfg: Option<i64>,
    ) -> Result<(), Error> {
        let Some(n) = next_cfg else { return Ok(()) };
        self.wait_for(
            &format!("ovs-vswitchd to apply {what} (next_cfg {n}; is ovs-vswitchd running?)"),
            self.options().apply_timeout,
            |c| cfg_applied(c, Some(n)).then_some(()),
        )
        .await
        .map(|_| ())
    }

    /// Creates bridge `name` (with its internal port and interface, added to
    /// `Open_vSwitch.bridges`) or updates an existing one to match `spec`: `datapath_type`,
    /// `fail_mode` and `protocols` are set exactly, the `other_config` keys of `spec` are set
    /// and other keys are left alone. Never deletes anything.
    ///
    /// Idempotent: when the bridge already matches, nothing is sent. Waits for ovs-vswitchd to
    /// apply the change (so `<rundir>/<name>.mgmt` exists when it returns). Returns the
    /// bridge's uuid.
    pub async fn ensure_bridge(&self, name: &str, spec: &BridgeSpec) -> Result<String, Error> {
        let columns = row([
            ("datapath_type", Datum::from(spec.datapath_type.as_str())),
            (
                "fail_mode",
                Datum::optional(spec.fail_mode.map(FailMode::as_str)),
            ),
            ("protocols", Datum::set(spec.protocols.iter())),
        ]);
        let mut last = None;
        for _ in 0..ATTEMPTS {
            let mut changes = self.cache_changes();
            let (root, existing) = self.with_cache(|c| {
                let existing = c.bridge(name).map(|b| {
                    let mut protocols = b.strings("protocols");
                    protocols.sort_unstable();
                    let mut want: Vec<&str> = spec.protocols.iter().map(String::as_str).collect();
                    want.sort_unstable();
                    want.dedup();
                    let config = b.string_map("other_config");
                    let matches = b.string("datapath_type") == Some(spec.datapath_type.as_str())
                        && b.string("fail_mode") == spec.fail_mode.map(FailMode::as_str)
                        && protocols == want
                        && spec
                            .other_config
                            .iter()
                            .all(|(k, v)| config.get(k) == Some(v));
                    (b.uuid().to_string(), matches)
                });
                root_uuid(c).map(|r| (r, existing))
            })?;
            let ops = match &existing {
                Some((uuid, true)) => return Ok(uuid.clone()),
                Some((uuid, false)) => {
                    let mut ops = vec![
                        assert_named("Bridge", uuid, name),
                        Operation::update("Bridge", vec![Condition::uuid(uuid)], columns.clone()),
                    ];
                    if !spec.other_config.is_empty() {
                        ops.push(Operation::mutate(
                            "Bridge",
                            vec![Condition::uuid(uuid)],
                            vec![
                                Mutation::delete(
                                    "other_config",
                                    Datum::set(spec.other_config.keys()),
                                ),
                                Mutation::insert("other_config", Datum::from(&spec.other_config)),
                            ],
                        ));
                    }
                    ops
                }
                None => {
                    let mut bridge = columns.clone();
                    bridge.insert("name".into(), Datum::from(name));
                    bridge.insert("ports".into(), Datum::named_uuid("port"));
                    bridge.insert("other_config".into(), Datum::from(&spec.other_config));
                    vec![
                        assert_absent("Bridge", name),
                        Operation::insert_named(
                            "Interface",
                            "iface",
                            row([("name", name), ("type", "internal")]),
                        ),
                        Operation::insert_named(
                            "Port",
                            "port",
                            row([
                                ("name", Datum::from(name)),
                                ("interfaces", Datum::named_uuid("iface")),
                            ]),
                        ),
                        Operation::insert_named("Bridge", "bridge", bridge),
                        Operation::mutate(
                            "Open_vSwitch",
                            vec![Condition::uuid(&root)],
                            vec![Mutation::insert("bridges", Datum::named_uuid("bridge"))],
                        ),
                    ]
                }
            };
            match self.transact_bumped(&root, ops).await {
                Ok((results, next_cfg)) => {
                    self.wait_applied(&format!("bridge {name}"), next_cfg)
                        .await?;
                    return match existing {
                        Some((uuid, _)) => Ok(uuid),
                        None => results.get(3).and_then(|r| r.uuid.clone()).ok_or_else(|| {
                            Error::BadValue {
                                table: "Bridge".into(),
                                column: "_uuid".into(),
                                reason: "insert returned no uuid".into(),
                            }
                        }),
                    };
                }
                Err(e) if guard_failed(&e, 1) => {
                    self.settle(&mut changes).await;
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or(Error::BridgeNotFound(name.to_string())))
    }

    /// Adds port `spec.name` with one interface to `bridge` in one transaction, or, when that
    /// port is already on `bridge`, sets its interface's columns to `spec` (external ids and
    /// options replaced as a whole). Then waits (bounded by the apply timeout) for ovs-vswitchd
    /// to assign an `ofport`, and returns it.
    ///
    /// Idempotent: calling it again with the same spec sends nothing and returns the ofport.
    /// Errors: [`Error::BridgeNotFound`], [`Error::PortOnOtherBridge`], and
    /// [`Error::PortFailed`] with the Interface `error` column when ovs-vswitchd could not open
    /// the interface (ofport -1; the port stays in the database, as with `ovs-vsctl add-port`).
    pub async fn add_port(&self, bridge: &str, spec: &PortSpec) -> Result<u32, Error> {
        let port = spec.name.as_str();
        let mut last = None;
        for _ in 0..ATTEMPTS {
            let mut changes = self.cache_changes();
            let plan = self.with_cache(|c| -> Result<_, Error> {
                let root = root_uuid(c)?;
                let br = existing_bridge(c, bridge)?;
                let existing = match c.port(port) {
                    None => None,
                    Some(p) => {
                        let on = c.bridge_of_port(p.uuid()).map(|b| b.name().to_string());
                        if on.as_deref() != Some(bridge) {
                            return Err(Error::PortOnOtherBridge {
                                port: port.to_string(),
                                bridge: bridge.to_string(),
                                actual: on.unwrap_or_else(|| "(none)".to_string()),
                            });
                        }
                        let iface = c.interface(port);
                        let unchanged = iface.is_some_and(|i| {
                            interface_columns(spec)
                                .iter()
                                .all(|(col, v)| same_value(i.get(col), v))
                        });
                        let ofport = iface.and_then(|i| i.integer("ofport")).filter(|o| *o > 0);
                        Some((p.uuid().to_string(), unchanged, ofport))
                    }
                };
                Ok((root, br.uuid().to_string(), existing))
            })?;
            let (root, br, existing) = plan;
            let ops = match &existing {
                Some((_, true, Some(ofport))) => return to_ofport(*ofport, bridge, port),
                Some((uuid, _, _)) => vec![
                    assert_named("Bridge", &br, bridge),
                    assert_named("Port", uuid, port),
                    Operation::update(
                        "Interface",
                        vec![Condition::eq("name", port)],
                        interface_columns(spec),
                    ),
                ],
                None => {
                    let mut iface = interface_columns(spec);
                    iface.insert("name".into(), Datum::from(port));
                    vec![
                        assert_named("Bridge", &br, bridge),
                        assert_absent("Port", port),
                        Operation::insert_named("Interface", "iface", iface),
                        Operation::insert_named(
                            "Port",
                            "port",
                            row([
                                ("name", Datum::from(port)),
                                ("interfaces", Datum::named_uuid("iface")),
                            ]),
                        ),
                        Operation::mutate(
                            "Bridge",
                            vec![Condition::uuid(&br)],
                            vec![Mutation::insert("ports", Datum::named_uuid("port"))],
                        ),
                    ]
                }
            };
            let next_cfg = match self.transact_bumped(&root, ops).await {
                Ok((_, n)) => n,
                Err(e) if guard_failed(&e, 2) => {
                    self.settle(&mut changes).await;
                    last = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let ofport = self
                .wait_for(
                    &format!("ofport of port {port} on bridge {bridge}"),
                    self.options().apply_timeout,
                    |c| {
                        let applied = cfg_applied(c, next_cfg);
                        let iface = c.interface(port)?;
                        let ofport = iface.integer("ofport")?;
                        applied.then(|| (ofport, iface.string("error").map(str::to_string)))
                    },
                )
                .await?;
            return match ofport {
                (o, _) if o > 0 => to_ofport(o, bridge, port),
                (_, error) => Err(Error::PortFailed {
                    port: port.to_string(),
                    bridge: bridge.to_string(),
                    error: error.unwrap_or_else(|| "no ofport assigned (ofport -1)".to_string()),
                }),
            };
        }
        Err(last.unwrap_or(Error::BridgeNotFound(bridge.to_string())))
    }

    /// Removes port `name` from `bridge` (its Port and Interface rows are then garbage
    /// collected by ovsdb-server) and waits for ovs-vswitchd to apply it.
    ///
    /// Idempotent: a port that does not exist is not an error. Errors:
    /// [`Error::BridgeNotFound`], [`Error::PortOnOtherBridge`].
    pub async fn delete_port(&self, bridge: &str, name: &str) -> Result<(), Error> {
        let mut last = None;
        for _ in 0..ATTEMPTS {
            let mut changes = self.cache_changes();
            let plan = self.with_cache(|c| -> Result<_, Error> {
                let root = root_uuid(c)?;
                let br = existing_bridge(c, bridge)?;
                let Some(p) = c.port(name) else {
                    return Ok(None);
                };
                if !br.uuids("ports").contains(&p.uuid()) {
                    return Err(Error::PortOnOtherBridge {
                        port: name.to_string(),
                        bridge: bridge.to_string(),
                        actual: c
                            .bridge_of_port(p.uuid())
                            .map(|b| b.name().to_string())
                            .unwrap_or_else(|| "(none)".to_string()),
                    });
                }
                Ok(Some((root, br.uuid().to_string(), p.uuid().to_string())))
            })?;
            let Some((root, br, port)) = plan else {
                return Ok(());
            };
            let ops = vec![
                assert_named("Bridge", &br, bridge),
                Operation::mutate(
                    "Bridge",
                    vec![Condition::uuid(&br)],
                    vec![Mutation::delete("ports", Datum::uuid(port))],
                ),
            ];
            match self.transact_bumped(&root, ops).await {
                Ok((_, next_cfg)) => {
                    return self
                        .wait_applied(
                            &format!("deletion of port {name} from bridge {bridge}"),
                            next_cfg,
                        )
                        .await
                }
                Err(e) if guard_failed(&e, 1) => {
                    self.settle(&mut changes).await;
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or(Error::BridgeNotFound(bridge.to_string())))
    }

    /// Adds several new ports (each with one interface) to `bridge` in ONE transaction, so
    /// ovs-vswitchd reconfigures once for all of them, then waits (bounded by the apply
    /// timeout) until each has an ofport; returns them in `specs` order. Every port must be
    /// new ([`Error::Transaction`] from a guard otherwise). A port ovs-vswitchd cannot open is
    /// [`Error::PortFailed`] (the others stay added; the caller deletes what it does not want).
    pub async fn add_ports(&self, bridge: &str, specs: &[PortSpec]) -> Result<Vec<u32>, Error> {
        if specs.is_empty() {
            return Ok(Vec::new());
        }
        let (root, br) = self.with_cache(|c| -> Result<_, Error> {
            Ok((
                root_uuid(c)?,
                existing_bridge(c, bridge)?.uuid().to_string(),
            ))
        })?;
        let mut ops = vec![assert_named("Bridge", &br, bridge)];
        let mut ports = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            ops.push(assert_absent("Port", &spec.name));
            let mut iface = interface_columns(spec);
            iface.insert("name".into(), Datum::from(spec.name.as_str()));
            let (iface_id, port_id) = (format!("iface{i}"), format!("port{i}"));
            ops.push(Operation::insert_named("Interface", &iface_id, iface));
            ops.push(Operation::insert_named(
                "Port",
                &port_id,
                row([
                    ("name", Datum::from(spec.name.as_str())),
                    ("interfaces", Datum::named_uuid(&iface_id)),
                ]),
            ));
            ports.push(port_id);
        }
        ops.push(Operation::mutate(
            "Bridge",
            vec![Condition::uuid(&br)],
            ports
                .iter()
                .map(|p| Mutation::insert("ports", Datum::named_uuid(p)))
                .collect(),
        ));
        let (_, next_cfg) = self.transact_bumped(&root, ops).await?;
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        let found = self
            .wait_for(
                &format!("ofports of {} new ports on bridge {bridge}", specs.len()),
                self.options().apply_timeout,
                |c| {
                    let applied = cfg_applied(c, next_cfg);
                    if !applied {
                        return None;
                    }
                    names
                        .iter()
                        .map(|n| {
                            let iface = c.interface(n)?;
                            Some((
                                iface.integer("ofport")?,
                                iface.string("error").map(str::to_string),
                            ))
                        })
                        .collect::<Option<Vec<_>>>()
                },
            )
            .await?;
        names
            .iter()
            .zip(found)
            .map(|(port, (ofport, error))| {
                if ofport > 0 {
                    to_ofport(ofport, bridge, port)
                } else {
                    Err(Error::PortFailed {
                        port: port.to_string(),
                        bridge: bridge.to_string(),
                        error: error
                            .unwrap_or_else(|| "no ofport assigned (ofport -1)".to_string()),
                    })
                }
            })
            .collect()
    }

    /// Removes several ports from `bridge` in ONE transaction (missing ones are skipped) and,
    /// unlike [`Client::delete_port`], does not wait for ovs-vswitchd: the rows are gone from
    /// the database when this returns, and ovs-vswitchd reconfigures once, in its own time.
    pub async fn delete_ports_nowait(&self, bridge: &str, names: &[String]) -> Result<(), Error> {
        let plan = self.with_cache(|c| -> Result<_, Error> {
            let br = existing_bridge(c, bridge)?;
            let on_bridge = br.uuids("ports");
            let uuids: Vec<String> = names
                .iter()
                .filter_map(|n| c.port(n))
                .map(|p| p.uuid().to_string())
                .filter(|u| on_bridge.contains(&u.as_str()))
                .collect();
            Ok((br.uuid().to_string(), uuids))
        })?;
        let (br, uuids) = plan;
        if uuids.is_empty() {
            return Ok(());
        }
        let ops = vec![
            assert_named("Bridge", &br, bridge),
            Operation::mutate(
                "Bridge",
                vec![Condition::uuid(&br)],
                vec![Mutation::delete(
                    "ports",
                    Datum::Set(uuids.iter().cloned().map(Atom::Uuid).collect()),
                )],
            ),
        ];
        self.transact(DB, &ops).await.map(|_| ())
    }

    /// Replaces the whole `external_ids` of Interface `name` in one transaction (no
    /// ovs-vswitchd involvement: it does not read Interface external ids);
    /// [`Error::InterfaceNotFound`] when no interface has that name.
    pub async fn replace_interface_external_ids(
        &self,
        name: &str,
        ids: &BTreeMap<String, String>,
    ) -> Result<(), Error> {
        let ops = [Operation::update(
            "Interface",
            vec![Condition::eq("name", name)],
            row([("external_ids", Datum::from(ids))]),
        )];
        let results = self.transact(DB, &ops).await?;
        if results.first().and_then(|r| r.count) == Some(0) {
            return Err(Error::InterfaceNotFound(name.to_string()));
        }
        Ok(())
    }

    /// Sets `external_ids` keys of Interface `name` (other keys stay) in one transaction;
    /// [`Error::InterfaceNotFound`] when no interface has that name.
    pub async fn set_interface_external_ids(
        &self,
        name: &str,
        ids: &BTreeMap<String, String>,
    ) -> Result<(), Error> {
        let cond = vec![Condition::eq("name", name)];
        let ops = [Operation::mutate(
            "Interface",
            cond,
            vec![
                Mutation::delete("external_ids", Datum::set(ids.keys())),
                Mutation::insert("external_ids", Datum::from(ids)),
            ],
        )];
        let results = self.transact(DB, &ops).await?;
        if results.first().and_then(|r| r.count) == Some(0) {
            return Err(Error::InterfaceNotFound(name.to_string()));
        }
        Ok(())
    }

    /// Interfaces whose `external_ids:key` is `value`, from the cache (no round trip; current
    /// as of the last update received, which includes every transaction this client made).
    pub fn find_interfaces_by_external_id(&self, key: &str, value: &str) -> Vec<InterfaceInfo> {
        self.with_cache(|c| {
            c.table("Interface")
                .filter_map(|i| {
                    let ids = i.string_map("external_ids");
                    (ids.get(key).map(String::as_str) == Some(value)).then(|| InterfaceInfo {
                        name: i.name().to_string(),
                        ofport: i.integer("ofport"),
                        external_ids: ids,
                    })
                })
                .collect()
        })
    }

    /// Sets `Open_vSwitch.other_config:flow-restore-wait`. While it is `true` when
    /// ovs-vswitchd starts, ovs-vswitchd neither forwards nor flushes datapath flows (and
    /// connects to no controller but the management socket) until it is set to `false`: an
    /// owner restores the whole pipeline first, so a restarted switch never forwards with a
    /// partial one. Setting it to `true` on a running ovs-vswitchd changes nothing until its
    /// next start. Turning it off waits until ovs-vswitchd has applied it. Idempotent.
    pub async fn set_flow_restore_wait(&self, on: bool) -> Result<(), Error> {
        let value = if on { "true" } else { "false" };
        let (root, current) = self.with_cache(|c| -> Result<_, Error> {
            let root = root_uuid(c)?.to_string();
            let current = c.open_vswitch().and_then(|r| {
                r.string_map("other_config")
                    .get("flow-restore-wait")
                    .cloned()
            });
            Ok((root, current))
        })?;
        if current.as_deref() == Some(value) {
            return Ok(());
        }
        let ids = BTreeMap::from([("flow-restore-wait".to_string(), value.to_string())]);
        let ops = vec![Operation::mutate(
            "Open_vSwitch",
            vec![Condition::uuid(&root)],
            vec![
                Mutation::delete("other_config", Datum::set(ids.keys())),
                Mutation::insert("other_config", Datum::from(&ids)),
            ],
        )];
        let (_, next_cfg) = self.transact_bumped(&root, ops).await?;
        if !on {
            self.wait_applied("flow-restore-wait=false", next_cfg)
                .await?;
        }
        Ok(())
    }

    /// Names OpenFlow table `table_id` of `bridge` `name` (a `Flow_Table` row referenced from
    /// `Bridge.flow_tables`), so `ovs-ofctl --names dump-flows` prints `table=name`. Waits for
    /// ovs-vswitchd to apply it. See [`Client::set_flow_table_names`] to name many at once.
    ///
    /// Idempotent: nothing is sent when the table already has that name.
    pub async fn set_flow_table_name(
        &self,
        bridge: &str,
        table_id: u8,
        name: &str,
    ) -> Result<(), Error> {
        self.set_flow_table_names(bridge, &[(table_id, name)]).await
    }

    /// Names several OpenFlow tables of `bridge` in one transaction (see
    /// [`Client::set_flow_table_name`]); a table id given twice takes the last name. Tables
    /// not listed keep their names.
    ///
    /// Idempotent: only tables whose name differs are written; nothing is sent when all match.
    /// Waits for ovs-vswitchd to apply the change.
    pub async fn set_flow_table_names(
        &self,
        bridge: &str,
        names: &[(u8, &str)],
    ) -> Result<(), Error> {
        let wanted: BTreeMap<u8, &str> = names.iter().copied().collect();
        let mut last = None;
        // One extra round: the plan after the last transaction checks that the names stuck.
        for attempt in 0..=ATTEMPTS {
            let mut changes = self.cache_changes();
            let plan = self.with_cache(|c| -> Result<_, Error> {
                let root = root_uuid(c)?;
                let br = existing_bridge(c, bridge)?;
                let mut ops = Vec::new();
                let mut new_keys = Vec::new();
                for (&id, &name) in &wanted {
                    let key = Atom::Integer(i64::from(id));
                    match br.map_get("flow_tables", &key).and_then(Atom::as_uuid) {
                        Some(u)
                            if c.row("Flow_Table", u).and_then(|r| r.string("name"))
                                == Some(name) => {}
                        Some(u) => ops.push(Operation::update(
                            "Flow_Table",
                            vec![Condition::uuid(u)],
                            row([("name", name)]),
                        )),
                        None => {
                            let ft = format!("ft{id}");
                            ops.push(Operation::insert_named(
                                "Flow_Table",
                                &ft,
                                row([("name", name)]),
                            ));
                            new_keys.push((key, Atom::NamedUuid(ft)));
                        }
                    }
                }
                if !new_keys.is_empty() {
                    // Keys another client added meanwhile are left alone (a map insert skips
                    // existing keys, and the unreferenced new row is garbage collected); the
                    // next round re-checks.
                    ops.push(Operation::mutate(
                        "Bridge",
                        vec![Condition::uuid(br.uuid())],
                        vec![Mutation::insert("flow_tables", Datum::Map(new_keys))],
                    ));
                }
                if !ops.is_empty() {
                    ops.insert(0, assert_named("Bridge", br.uuid(), bridge));
                }
                Ok((root, ops))
            })?;
            let (root, ops) = plan;
            if ops.is_empty() {
                return Ok(());
            }
            if attempt == ATTEMPTS {
                break;
            }
            match self.transact_bumped(&root, ops).await {
                Ok((_, next_cfg)) => {
                    self.wait_applied(&format!("table names on bridge {bridge}"), next_cfg)
                        .await?;
                }
                Err(e) if guard_failed(&e, 1) => {
                    self.settle(&mut changes).await;
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::WaitTimeout {
            what: format!("table names on bridge {bridge} to stick"),
            timeout: self.options().apply_timeout,
        }))
    }
}

/// Whether a cached value equals a value to write (sets and maps compared as unordered).
fn same_value(have: Option<&Datum>, want: &Datum) -> bool {
    let Some(have) = have else {
        return *want == Datum::empty();
    };
    match (have, want) {
        (Datum::Set(a), Datum::Set(b)) => a.len() == b.len() && a.iter().all(|x| b.contains(x)),
        (Datum::Map(a), Datum::Map(b)) => a.len() == b.len() && a.iter().all(|x| b.contains(x)),
        (Datum::Map(a), Datum::Set(b)) | (Datum::Set(b), Datum::Map(a)) => {
            a.is_empty() && b.is_empty()
        }
    }
}

fn to_ofport(ofport: i64, bridge: &str, port: &str) -> Result<u32, Error> {
    u32::try_from(ofport).map_err(|_| Error::BadValue {
        table: "Interface".to_string(),
        column: "ofport".to_string(),
        reason: format!("{ofport} for port {port} on bridge {bridge}"),
    })
}
