//! A local copy of the monitored tables, fed by `monitor_cond` and `update2`.
//!
//! The cache holds, per table, rows as uuid -> column -> [`Datum`], with typed accessors for the
//! columns the helpers read. `update2` sends modifications as diffs whose meaning depends on the
//! column type (a scalar is replaced, a set toggles elements, a map adds/removes/replaces pairs),
//! and `initial`/`insert` rows omit columns that hold their default value; both need the schema,
//! so the cache keeps the column types from `get_schema` and fills in defaults.
//!
//! Ordering: the reply to `monitor_cond` (the initial snapshot) reaches the client task while the
//! reader may already have passed it `update2` notifications sent right after it. Between
//! [`Cache::begin_load`] and [`Cache::load`] such updates are buffered, then applied on top of the
//! snapshot, so none is lost or applied out of order. During a reconnect the previous contents
//! stay readable (stale) and are replaced in one step when the new snapshot arrives.
//!
//! Changes: every applied notification (and every snapshot) gets the next [`Cache::version`];
//! each row carries the version that last inserted or changed it, and each table the version of
//! its last deletion, so a reader that remembers the version it last looked at can visit only
//! the rows changed since ([`Cache::changed_since`]) instead of every row at every change. Rows
//! of the tables whose names are unique (Bridge, Port, Interface) are also indexed by name.
//!
//! Limits: every row of each monitored table is mirrored (no conditions), fine for the
//! `Open_vSwitch` database of one node; the columns ovs-vswitchd keeps rewriting and nothing
//! reads ([`UNMONITORED`]) are not.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

use super::ops::{Atom, ColumnKind, Datum};

/// Tables the client monitors.
pub const MONITORED: &[&str] = &[
    "Open_vSwitch",
    "Bridge",
    "Port",
    "Interface",
    "Flow_Table",
    "QoS",
];

/// Columns of the monitored tables the cache leaves out: ovs-vswitchd rewrites them for every
/// interface all the time (statistics every 5 s, link state and status on every link event), so
/// with 1000 ports each rewrite would be a large update to parse, and a large initial snapshot
/// at every (re)connect, for columns nothing here reads.
pub const UNMONITORED: &[(&str, &[&str])] = &[
    ("Open_vSwitch", &["statistics"]),
    ("Bridge", &["status", "rstp_status"]),
    (
        "Port",
        &["statistics", "status", "rstp_statistics", "rstp_status"],
    ),
    (
        "Interface",
        &[
            "statistics",
            "status",
            "admin_state",
            "link_state",
            "link_resets",
            "link_speed",
            "duplex",
            "lacp_current",
            "bfd_status",
            "cfm_fault",
            "cfm_fault_status",
            "cfm_remote_mpids",
            "cfm_flap_count",
            "cfm_health",
            "cfm_remote_opstate",
        ],
    ),
];

/// Whether the cache holds `table.column` (not one of the [`UNMONITORED`]).
fn monitored(table: &str, column: &str) -> bool {
    !UNMONITORED
        .iter()
        .any(|(t, cols)| *t == table && cols.contains(&column))
}

/// The type of one column, as far as the cache needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnType {
    /// Single-valued, set or map: how `update2` diffs apply.
    pub kind: ColumnKind,
    /// The value a row has when `initial`/`insert` omits the column.
    pub default: Datum,
}

/// Table -> column -> type, parsed from a `get_schema` reply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Schema {
    tables: HashMap<String, HashMap<String, ColumnType>>,
}

impl Schema {
    /// Parses the column types of a `get_schema` reply.
    pub fn from_json(schema: &Value) -> Result<Schema, String> {
        let tables = schema
            .get("tables")
            .and_then(Value::as_object)
            .ok_or("schema has no tables")?;
        let mut out = HashMap::new();
        for (tname, t) in tables {
            let cols = t
                .get("columns")
                .and_then(Value::as_object)
                .ok_or_else(|| format!("table {tname} has no columns"))?;
            let mut types = HashMap::new();
            for (cname, c) in cols {
                let ty = c
                    .get("type")
                    .ok_or_else(|| format!("column {tname}.{cname} has no type"))?;
                types.insert(cname.clone(), column_type(ty));
            }
            out.insert(tname.clone(), types);
        }
        Ok(Schema { tables: out })
    }

    /// The type of `table.column`, if the schema has it.
    pub fn column(&self, table: &str, column: &str) -> Option<&ColumnType> {
        self.tables.get(table).and_then(|t| t.get(column))
    }

    /// Whether the schema has `table`.
    pub fn has_table(&self, table: &str) -> bool {
        self.tables.contains_key(table)
    }

    /// The `monitor_cond` requests for [`MONITORED`]: every row, every column but the
    /// [`UNMONITORED`] ones.
    pub fn monitor_requests(&self) -> Value {
        let mut o = serde_json::Map::new();
        for t in MONITORED {
            let Some(cols) = self.tables.get(*t) else {
                continue;
            };
            let mut columns: Vec<&String> = cols.keys().filter(|c| monitored(t, c)).collect();
            columns.sort();
            o.insert(t.to_string(), json!([{ "columns": columns }]));
        }
        Value::Object(o)
    }
}

fn column_type(ty: &Value) -> ColumnType {
    let base = |key: Option<&Value>| -> String {
        match key {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Object(o)) => o
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            _ => String::new(),
        }
    };
    let scalar_default = |base: &str| -> Datum {
        match base {
            "integer" => Datum::from(0),
            "real" => Datum::from(Atom::Real(0.0)),
            "boolean" => Datum::from(false),
            "uuid" => Datum::uuid("00000000-0000-0000-0000-000000000000"),
            _ => Datum::from(""),
        }
    };
    match ty {
        Value::String(s) => ColumnType {
            kind: ColumnKind::Single,
            default: scalar_default(s),
        },
        Value::Object(o) => {
            let min = o.get("min").and_then(Value::as_u64).unwrap_or(1);
            let max = match o.get("max") {
                None => Some(1),
                Some(v) => v.as_u64(), // "unlimited" -> None
            };
            let kind = if max == Some(1) {
                ColumnKind::Single
            } else if o.contains_key("value") {
                ColumnKind::Map
            } else {
                ColumnKind::Set
            };
            let default = if min >= 1 && !o.contains_key("value") {
                scalar_default(&base(o.get("key")))
            } else if o.contains_key("value") {
                Datum::Map(Vec::new())
            } else {
                Datum::empty()
            };
            ColumnType { kind, default }
        }
        _ => ColumnType {
            kind: ColumnKind::Set,
            default: Datum::empty(),
        },
    }
}

/// One row: its uuid and every column (defaults filled in).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Row {
    uuid: String,
    columns: BTreeMap<String, Datum>,
    /// The [`Cache::version`] that inserted or last changed it.
    changed: u64,
}

impl Row {
    /// The row's uuid.
    pub fn uuid(&self) -> &str {
        &self.uuid
    }

    /// The [`Cache::version`] that inserted or last changed the row.
    pub fn changed(&self) -> u64 {
        self.changed
    }

    /// The raw value of `column`.
    pub fn get(&self, column: &str) -> Option<&Datum> {
        self.columns.get(column)
    }

    /// Every column.
    pub fn columns(&self) -> &BTreeMap<String, Datum> {
        &self.columns
    }

    /// The `name` column ("" when absent).
    pub fn name(&self) -> &str {
        self.string("name").unwrap_or_default()
    }

    /// A string scalar, or an optional string that is set.
    pub fn string(&self, column: &str) -> Option<&str> {
        self.get(column)?.as_atom()?.as_str()
    }

    /// An integer scalar, or an optional integer that is set (e.g. `ofport`).
    pub fn integer(&self, column: &str) -> Option<i64> {
        self.get(column)?.as_atom()?.as_integer()
    }

    /// A reference (uuid scalar or optional uuid that is set).
    pub fn uuid_ref(&self, column: &str) -> Option<&str> {
        self.get(column)?.as_atom()?.as_uuid()
    }

    /// A set of references (e.g. `Bridge.ports`).
    pub fn uuids(&self, column: &str) -> Vec<&str> {
        self.get(column)
            .map(|d| d.as_set().iter().filter_map(Atom::as_uuid).collect())
            .unwrap_or_default()
    }

    /// A set of strings (e.g. `Bridge.protocols`).
    pub fn strings(&self, column: &str) -> Vec<&str> {
        self.get(column)
            .map(|d| d.as_set().iter().filter_map(Atom::as_str).collect())
            .unwrap_or_default()
    }

    /// A string-to-string map (e.g. `external_ids`, `options`, `other_config`).
    pub fn string_map(&self, column: &str) -> BTreeMap<String, String> {
        self.get(column)
            .map(|d| {
                d.as_map()
                    .iter()
                    .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The value for `key` in a map column (e.g. `Bridge.flow_tables`, key = table id).
    pub fn map_get(&self, column: &str, key: &Atom) -> Option<&Atom> {
        self.get(column)?.get(key)
    }
}

/// Tables whose rows are unique by `name` (by schema index), indexed by it.
const NAMED: &[&str] = &["Bridge", "Port", "Interface"];

/// The monitored tables (see the module docs).
#[derive(Debug, Default)]
pub struct Cache {
    schema: Schema,
    tables: BTreeMap<String, BTreeMap<String, Row>>,
    /// [`NAMED`] tables: name -> uuid.
    names: HashMap<&'static str, HashMap<String, String>>,
    /// `update2` params received before the snapshot they follow; `Some` while loading.
    buffered: Option<Vec<Value>>,
    loads: u64,
    /// Bumped by every snapshot and every applied notification.
    version: u64,
    /// Per table, the version of its last row deletion.
    deleted: HashMap<String, u64>,
}

impl Cache {
    /// Rows of `table` (none if the table is not monitored), in uuid order.
    pub fn table(&self, table: &str) -> impl Iterator<Item = &Row> {
        self.tables.get(table).into_iter().flat_map(|t| t.values())
    }

    /// The row of `table` with `uuid`.
    pub fn row(&self, table: &str, uuid: &str) -> Option<&Row> {
        self.tables.get(table)?.get(uuid)
    }

    /// The first row of `table` whose `name` is `name` (Bridge, Port and Interface names are
    /// unique by schema index, and looked up by name; other tables are searched).
    pub fn by_name(&self, table: &str, name: &str) -> Option<&Row> {
        match self.names.get(table) {
            Some(index) => self.row(table, index.get(name)?),
            None => self.table(table).find(|r| r.name() == name),
        }
    }

    /// The version of the cache: bumped by every snapshot and every applied notification.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Rows of `table` inserted or changed after version `since`.
    pub fn changed_since(&self, table: &str, since: u64) -> impl Iterator<Item = &Row> {
        self.table(table).filter(move |r| r.changed > since)
    }

    /// Whether a row of `table` was deleted after version `since`.
    pub fn deleted_since(&self, table: &str, since: u64) -> bool {
        self.deleted.get(table).is_some_and(|&v| v > since)
    }

    /// The `Open_vSwitch` row (there is one after `ovs-vsctl init`).
    pub fn open_vswitch(&self) -> Option<&Row> {
        self.table("Open_vSwitch").next()
    }

    /// The bridge named `name`.
    pub fn bridge(&self, name: &str) -> Option<&Row> {
        self.by_name("Bridge", name)
    }

    /// The port named `name`.
    pub fn port(&self, name: &str) -> Option<&Row> {
        self.by_name("Port", name)
    }

    /// The interface named `name`.
    pub fn interface(&self, name: &str) -> Option<&Row> {
        self.by_name("Interface", name)
    }

    /// The bridge whose `ports` contain the port with uuid `port`.
    pub fn bridge_of_port(&self, port: &str) -> Option<&Row> {
        self.table("Bridge")
            .find(|b| b.uuids("ports").contains(&port))
    }

    /// The schema the cache was loaded with.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// How many snapshots have been loaded (1 after connecting, +1 per reconnect).
    pub fn loads(&self) -> u64 {
        self.loads
    }

    /// Starts buffering updates until the next [`Cache::load`].
    pub fn begin_load(&mut self) {
        self.buffered = Some(Vec::new());
    }

    /// Replaces the contents with the `monitor_cond` reply `initial`, then applies the updates
    /// buffered since [`Cache::begin_load`].
    pub fn load(&mut self, schema: Schema, initial: &Value) -> Result<(), String> {
        self.schema = schema;
        self.tables = MONITORED
            .iter()
            .map(|t| (t.to_string(), BTreeMap::new()))
            .collect();
        self.names.clear();
        // Whatever the snapshot lacks was deleted.
        for t in MONITORED {
            self.deleted.insert(t.to_string(), self.version + 1);
        }
        let result = self.apply(initial);
        for params in self.buffered.take().unwrap_or_default() {
            if let Err(e) = self.apply(&params) {
                tracing::warn!(error = %e, "bad buffered update2");
            }
        }
        self.loads += 1;
        result
    }

    /// Applies the `<table-updates2>` of an `update2` notification, or buffers it while a
    /// snapshot is loading.
    pub fn update2(&mut self, updates: Value) -> Result<(), String> {
        if let Some(buf) = &mut self.buffered {
            buf.push(updates);
            return Ok(());
        }
        self.apply(&updates)
    }

    fn apply(&mut self, updates: &Value) -> Result<(), String> {
        self.version += 1;
        let version = self.version;
        let Value::Object(tables) = updates else {
            return Err(format!("table-updates2 is not an object: {updates}"));
        };
        for (tname, rows) in tables {
            let Value::Object(rows) = rows else {
                return Err(format!("table-update2 of {tname} is not an object"));
            };
            let table = self.tables.entry(tname.clone()).or_default();
            let mut names = NAMED
                .iter()
                .find(|t| **t == tname.as_str())
                .map(|t| self.names.entry(*t).or_default());
            for (uuid, update) in rows {
                let Value::Object(update) = update else {
                    return Err(format!("row-update2 of {tname} {uuid} is not an object"));
                };
                // The name index loses the row's old name here and gets its new one below.
                let old_name = names
                    .as_ref()
                    .and_then(|_| table.get(uuid))
                    .map(|r| r.name().to_string());
                if let (Some(index), Some(old)) = (names.as_mut(), &old_name) {
                    if index.get(old) == Some(uuid) {
                        index.remove(old);
                    }
                }
                if update.contains_key("delete") {
                    table.remove(uuid);
                    self.deleted.insert(tname.clone(), version);
                    continue;
                }
                if let Some(new) = update.get("initial").or_else(|| update.get("insert")) {
                    let mut row = Row {
                        changed: version,
                        uuid: uuid.clone(),
                        columns: self
                            .schema
                            .tables
                            .get(tname)
                            .map(|cols| {
                                cols.iter()
                                    .filter(|(c, _)| monitored(tname, c))
                                    .map(|(c, ty)| (c.clone(), ty.default.clone()))
                                    .collect()
                            })
                            .unwrap_or_default(),
                    };
                    for (col, v) in new.as_object().into_iter().flatten() {
                        let d = Datum::from_json(v).map_err(|e| format!("{tname}.{col}: {e}"))?;
                        row.columns.insert(col.clone(), d);
                    }
                    if let Some(index) = names.as_mut() {
                        index.insert(row.name().to_string(), uuid.clone());
                    }
                    table.insert(uuid.clone(), row);
                } else if let Some(diff) = update.get("modify") {
                    let Some(row) = table.get_mut(uuid) else {
                        return Err(format!("modify of unknown row {tname} {uuid}"));
                    };
                    for (col, v) in diff.as_object().into_iter().flatten() {
                        let d = Datum::from_json(v).map_err(|e| format!("{tname}.{col}: {e}"))?;
                        let kind = self
                            .schema
                            .column(tname, col)
                            .map(|t| t.kind)
                            .unwrap_or(ColumnKind::Single);
                        row.columns
                            .entry(col.clone())
                            .or_default()
                            .apply_diff(kind, d);
                    }
                    row.changed = version;
                    if let Some(index) = names.as_mut() {
                        index.insert(row.name().to_string(), uuid.clone());
                    }
                } else {
                    return Err(format!("row-update2 of {tname} {uuid} has no known member"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema {
        Schema::from_json(&json!({"tables": {
            "Bridge": {"columns": {
                "name": {"type": "string"},
                "ports": {"type": {"key": {"type": "uuid", "refTable": "Port"},
                                   "min": 0, "max": "unlimited"}},
                "other_config": {"type": {"key": "string", "value": "string",
                                          "min": 0, "max": "unlimited"}},
                "fail_mode": {"type": {"key": {"type": "string"}, "min": 0, "max": 1}},
                "stp_enable": {"type": "boolean"},
            }},
            "Interface": {"columns": {
                "name": {"type": "string"},
                "ofport": {"type": {"key": "integer", "min": 0, "max": 1}},
                "error": {"type": {"key": "string", "min": 0, "max": 1}},
                "statistics": {"type": {"key": "string", "value": "integer",
                                        "min": 0, "max": "unlimited"}},
                "link_state": {"type": {"key": "string", "min": 0, "max": 1}},
            }},
        }}))
        .unwrap()
    }

    #[test]
    fn the_monitor_leaves_out_what_ovs_vswitchd_keeps_rewriting() {
        let req = schema().monitor_requests();
        assert_eq!(
            req["Interface"],
            json!([{"columns": ["error", "name", "ofport"]}]),
            "statistics and link_state are rewritten for every port all the time"
        );
        assert_eq!(
            req["Bridge"],
            json!([{"columns": ["fail_mode", "name", "other_config", "ports", "stp_enable"]}])
        );
        assert!(
            req.get("Port").is_none(),
            "a table the schema lacks is not asked for"
        );
    }

    #[test]
    fn schema_kinds_and_defaults() {
        let s = schema();
        let c = |t, c| s.column(t, c).unwrap().clone();
        assert_eq!(c("Bridge", "name").kind, ColumnKind::Single);
        assert_eq!(c("Bridge", "ports").kind, ColumnKind::Set);
        assert_eq!(c("Bridge", "other_config").kind, ColumnKind::Map);
        assert_eq!(c("Bridge", "fail_mode").kind, ColumnKind::Single);
        assert_eq!(c("Bridge", "stp_enable").default, Datum::from(false));
        assert_eq!(c("Interface", "ofport").default, Datum::empty());
    }

    #[test]
    fn snapshot_updates_and_buffering() {
        let mut cache = Cache::default();
        cache.begin_load();
        // An update that arrived before the snapshot was applied is buffered...
        cache
            .update2(json!({"Bridge": {"b1": {"modify": {"other_config": ["map", [["x", "y"]]]}}}}))
            .unwrap();
        cache
            .load(
                schema(),
                &json!({"Bridge": {"b1": {"initial": {"name": "br0"}}},
                        "Interface": {"i1": {"initial": {"name": "p1"}}}}),
            )
            .unwrap();
        // ... and applied on top of it.
        let b = cache.bridge("br0").unwrap();
        assert_eq!(b.string_map("other_config")["x"], "y");
        assert_eq!(b.get("stp_enable"), Some(&Datum::from(false)));
        assert!(b.uuids("ports").is_empty());
        assert_eq!(b.string("fail_mode"), None);
        assert_eq!(cache.interface("p1").unwrap().integer("ofport"), None);

        cache
            .update2(json!({"Interface": {"i1": {"modify": {"ofport": 3}}},
                            "Bridge": {"b1": {"modify": {"ports": ["uuid", "p"],
                                                         "fail_mode": "secure"}}}}))
            .unwrap();
        assert_eq!(cache.interface("p1").unwrap().integer("ofport"), Some(3));
        assert_eq!(cache.bridge("br0").unwrap().uuids("ports"), vec!["p"]);
        assert_eq!(
            cache.bridge("br0").unwrap().string("fail_mode"),
            Some("secure")
        );
        assert_eq!(cache.bridge_of_port("p").unwrap().name(), "br0");
        // Optional columns take the diff as the new value (as ovsdb-server sends them).
        cache
            .update2(json!({"Interface": {"i1": {"modify": {"ofport": 4}}},
                            "Bridge": {"b1": {"modify": {"fail_mode": "standalone"}}}}))
            .unwrap();
        assert_eq!(cache.interface("p1").unwrap().integer("ofport"), Some(4));
        assert_eq!(
            cache.bridge("br0").unwrap().string("fail_mode"),
            Some("standalone")
        );
        cache
            .update2(json!({"Bridge": {"b1": {"modify": {"fail_mode": ["set", []]}}}}))
            .unwrap();
        assert_eq!(
            cache.bridge("br0").unwrap().get("fail_mode"),
            Some(&Datum::empty())
        );
        cache
            .update2(json!({"Interface": {"i1": {"delete": null},
                                          "i2": {"insert": {"name": "p2", "ofport": -1,
                                                            "error": "boom"}}}}))
            .unwrap();
        assert!(cache.interface("p1").is_none());
        let p2 = cache.interface("p2").unwrap();
        assert_eq!(
            (p2.integer("ofport"), p2.string("error")),
            (Some(-1), Some("boom"))
        );
        assert!(cache
            .update2(json!({"Interface": {"zz": {"modify": {}}}}))
            .is_err());
        assert_eq!(cache.loads(), 1);
    }

    #[test]
    fn versions_say_which_rows_changed_and_names_find_rows() {
        let mut cache = Cache::default();
        cache.begin_load();
        cache
            .load(
                schema(),
                &json!({"Interface": {"i1": {"initial": {"name": "p1"}},
                                      "i2": {"initial": {"name": "p2"}}}}),
            )
            .unwrap();
        let v0 = cache.version();
        assert!(
            cache.deleted_since("Interface", v0 - 1),
            "a snapshot replaces everything"
        );
        assert_eq!(cache.changed_since("Interface", v0).count(), 0);

        cache
            .update2(json!({"Interface": {"i2": {"modify": {"ofport": 7}},
                                          "i3": {"insert": {"name": "p3"}}}}))
            .unwrap();
        let v1 = cache.version();
        assert!(v1 > v0);
        let changed: Vec<&str> = cache
            .changed_since("Interface", v0)
            .map(Row::name)
            .collect();
        assert_eq!(changed, ["p2", "p3"]);
        assert!(!cache.deleted_since("Interface", v0));
        assert_eq!(cache.interface("p2").unwrap().changed(), v1);
        assert_eq!(cache.interface("p1").unwrap().changed(), v0);

        // A rename moves the name; a deletion frees it and is recorded.
        cache
            .update2(json!({"Interface": {"i3": {"modify": {"name": "p3b"}},
                                          "i1": {"delete": null}}}))
            .unwrap();
        let v2 = cache.version();
        assert!(cache.interface("p3").is_none());
        assert_eq!(cache.interface("p3b").unwrap().uuid(), "i3");
        assert!(cache.interface("p1").is_none());
        assert!(cache.deleted_since("Interface", v1));
        assert!(!cache.deleted_since("Interface", v2));
        assert!(!cache.deleted_since("Bridge", v1), "per table");
        // The index agrees with a search of every row.
        for name in ["p1", "p2", "p3", "p3b"] {
            assert_eq!(
                cache.interface(name).map(Row::uuid),
                cache
                    .table("Interface")
                    .find(|r| r.name() == name)
                    .map(Row::uuid),
                "{name}"
            );
        }
        // A new snapshot indexes afresh.
        cache.begin_load();
        cache
            .load(
                schema(),
                &json!({"Interface": {"i9": {"initial": {"name": "p2"}}}}),
            )
            .unwrap();
        assert_eq!(cache.interface("p2").unwrap().uuid(), "i9");
        assert!(cache.interface("p3b").is_none());
        assert!(cache.deleted_since("Interface", v2));
    }
}
