//! OVSDB data and `transact` operations (RFC 7047 sections 5.1 and 5.2), typed.
//!
//! Data: an [`Atom`] is an integer, real, boolean, string or uuid (or a `named-uuid` that refers
//! to a row inserted earlier in the same transaction). A [`Datum`] is a set of atoms or a map
//! from atoms to atoms; a scalar column holds a set of exactly one atom. On the wire a
//! one-element set is written as the bare atom, which is valid for scalar and set columns
//! alike, so no schema is needed to encode. Decoding is also schema-free: `["set", ...]`,
//! `["map", ...]`, `["uuid", ...]` and bare atoms are unambiguous in JSON.
//!
//! Operations: [`Operation`] covers `insert` (optionally with a `uuid-name`), `select`, `update`,
//! `mutate`, `delete`, `wait` and `comment`. [`parse_results`] turns the server's per-operation
//! result array into [`OpResult`]s, or into an [`Error::Transaction`] naming the first failing
//! operation (or the commit, for the trailing error OVSDB adds on constraint violations).
//!
//! Limits: `commit`, `abort` and `assert` are not modelled; send them with
//! [`crate::ovsdb::Client::request`] if ever needed.
//!
//! Why one piece: the typed data (atoms, datums) and the operations that carry them are one codec
//! of RFC 7047 sections 5.1 and 5.2; each encoder sits beside its decoder so the two stay inverse.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::jsonrpc::error_parts;
use super::Error;

/// One OVSDB atom.
#[derive(Debug, Clone, PartialEq)]
pub enum Atom {
    /// A 64-bit integer.
    Integer(i64),
    /// A real number.
    Real(f64),
    /// A boolean.
    Boolean(bool),
    /// A string.
    String(String),
    /// A row uuid, `["uuid", "..."]`.
    Uuid(String),
    /// A row inserted earlier in the same transaction, `["named-uuid", "name"]`.
    NamedUuid(String),
}

impl Atom {
    /// The JSON form.
    pub fn to_json(&self) -> Value {
        match self {
            Atom::Integer(i) => json!(i),
            Atom::Real(r) => json!(r),
            Atom::Boolean(b) => json!(b),
            Atom::String(s) => json!(s),
            Atom::Uuid(u) => json!(["uuid", u]),
            Atom::NamedUuid(n) => json!(["named-uuid", n]),
        }
    }

    /// Parses the JSON form of an atom.
    pub fn from_json(v: &Value) -> Result<Atom, String> {
        match v {
            Value::Bool(b) => Ok(Atom::Boolean(*b)),
            Value::String(s) => Ok(Atom::String(s.clone())),
            Value::Number(n) => match n.as_i64() {
                Some(i) => Ok(Atom::Integer(i)),
                None => n
                    .as_f64()
                    .map(Atom::Real)
                    .ok_or_else(|| format!("number out of range: {n}")),
            },
            Value::Array(a) => match (a.first().and_then(Value::as_str), a.get(1), a.len()) {
                (Some("uuid"), Some(Value::String(u)), 2) => Ok(Atom::Uuid(u.clone())),
                (Some("named-uuid"), Some(Value::String(u)), 2) => Ok(Atom::NamedUuid(u.clone())),
                _ => Err(format!("not an atom: {v}")),
            },
            _ => Err(format!("not an atom: {v}")),
        }
    }

    /// The string, if this is a string atom.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Atom::String(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, if this is an integer atom.
    pub fn as_integer(&self) -> Option<i64> {
        match self {
            Atom::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// The uuid, if this is a uuid atom.
    pub fn as_uuid(&self) -> Option<&str> {
        match self {
            Atom::Uuid(u) => Some(u),
            _ => None,
        }
    }
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Atom::Integer(i) => write!(f, "{i}"),
            Atom::Real(r) => write!(f, "{r}"),
            Atom::Boolean(b) => write!(f, "{b}"),
            Atom::String(s) => write!(f, "{s:?}"),
            Atom::Uuid(u) => write!(f, "{u}"),
            Atom::NamedUuid(n) => write!(f, "@{n}"),
        }
    }
}

impl From<&str> for Atom {
    fn from(s: &str) -> Atom {
        Atom::String(s.to_string())
    }
}

impl From<String> for Atom {
    fn from(s: String) -> Atom {
        Atom::String(s)
    }
}

impl From<&String> for Atom {
    fn from(s: &String) -> Atom {
        Atom::String(s.clone())
    }
}

impl From<i64> for Atom {
    fn from(i: i64) -> Atom {
        Atom::Integer(i)
    }
}

impl From<bool> for Atom {
    fn from(b: bool) -> Atom {
        Atom::Boolean(b)
    }
}

/// A column value: a set of atoms (a scalar is a one-element set) or a map.
#[derive(Debug, Clone, PartialEq)]
pub enum Datum {
    /// A set; `["set", [...]]` on the wire, or the bare atom for one element.
    Set(Vec<Atom>),
    /// A map; `["map", [[k, v], ...]]` on the wire.
    Map(Vec<(Atom, Atom)>),
}

impl Datum {
    /// The empty set (an absent optional value, an empty set or map column).
    pub fn empty() -> Datum {
        Datum::Set(Vec::new())
    }

    /// A set of the given atoms.
    pub fn set<A: Into<Atom>>(items: impl IntoIterator<Item = A>) -> Datum {
        Datum::Set(items.into_iter().map(Into::into).collect())
    }

    /// A map of the given pairs.
    pub fn map<K: Into<Atom>, V: Into<Atom>>(pairs: impl IntoIterator<Item = (K, V)>) -> Datum {
        Datum::Map(
            pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }

    /// A reference to the row with this uuid.
    pub fn uuid(u: impl Into<String>) -> Datum {
        Datum::Set(vec![Atom::Uuid(u.into())])
    }

    /// A reference to the row inserted with `uuid-name` `name` in the same transaction.
    pub fn named_uuid(name: impl Into<String>) -> Datum {
        Datum::Set(vec![Atom::NamedUuid(name.into())])
    }

    /// An optional value (`min 0, max 1` columns): empty for `None`.
    pub fn optional<A: Into<Atom>>(v: Option<A>) -> Datum {
        Datum::set(v)
    }

    /// The JSON form.
    pub fn to_json(&self) -> Value {
        match self {
            Datum::Set(items) if items.len() == 1 => items[0].to_json(),
            Datum::Set(items) => {
                json!(["set", items.iter().map(Atom::to_json).collect::<Vec<_>>()])
            }
            Datum::Map(pairs) => json!([
                "map",
                pairs
                    .iter()
                    .map(|(k, v)| json!([k.to_json(), v.to_json()]))
                    .collect::<Vec<_>>()
            ]),
        }
    }

    /// Parses the JSON form of a datum.
    pub fn from_json(v: &Value) -> Result<Datum, String> {
        if let Value::Array(a) = v {
            match (a.first().and_then(Value::as_str), a.get(1), a.len()) {
                (Some("set"), Some(Value::Array(items)), 2) => {
                    return items
                        .iter()
                        .map(Atom::from_json)
                        .collect::<Result<_, _>>()
                        .map(Datum::Set);
                }
                (Some("map"), Some(Value::Array(pairs)), 2) => {
                    return pairs
                        .iter()
                        .map(|p| match p.as_array().map(Vec::as_slice) {
                            Some([k, v]) => Ok((Atom::from_json(k)?, Atom::from_json(v)?)),
                            _ => Err(format!("not a map pair: {p}")),
                        })
                        .collect::<Result<_, _>>()
                        .map(Datum::Map);
                }
                _ => {}
            }
        }
        Atom::from_json(v).map(|a| Datum::Set(vec![a]))
    }

    /// The elements of a set (empty for a map).
    pub fn as_set(&self) -> &[Atom] {
        match self {
            Datum::Set(items) => items,
            Datum::Map(_) => &[],
        }
    }

    /// The pairs of a map (empty for a set).
    pub fn as_map(&self) -> &[(Atom, Atom)] {
        match self {
            Datum::Map(pairs) => pairs,
            Datum::Set(_) => &[],
        }
    }

    /// The single atom of a scalar or of an optional value that is present.
    pub fn as_atom(&self) -> Option<&Atom> {
        match self.as_set() {
            [a] => Some(a),
            _ => None,
        }
    }

    /// The value for `key` in a map.
    pub fn get(&self, key: &Atom) -> Option<&Atom> {
        self.as_map().iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Applies an `update2` modify diff (ovsdb-server(7) section 4.1.14) to this value.
    /// `kind` says how to read the diff: a single-valued column (scalar or optional, `max 1`)
    /// takes the diff as its new value, a set toggles every element of the diff, a map adds new
    /// keys, removes pairs given with their current value and replaces the value of the
    /// others. (This is what ovsdb-server sends and the OVS IDLs apply.)
    pub fn apply_diff(&mut self, kind: ColumnKind, diff: Datum) {
        match kind {
            ColumnKind::Single => *self = diff,
            ColumnKind::Set => {
                let mut items = std::mem::take(self).into_set();
                for a in diff.into_set() {
                    match items.iter().position(|x| *x == a) {
                        Some(i) => {
                            items.remove(i);
                        }
                        None => items.push(a),
                    }
                }
                *self = Datum::Set(items);
            }
            ColumnKind::Map => {
                let mut pairs = std::mem::take(self).into_map();
                for (k, v) in diff.into_map() {
                    match pairs.iter().position(|(x, _)| *x == k) {
                        Some(i) if pairs[i].1 == v => {
                            pairs.remove(i);
                        }
                        Some(i) => pairs[i].1 = v,
                        None => pairs.push((k, v)),
                    }
                }
                *self = Datum::Map(pairs);
            }
        }
    }

    fn into_set(self) -> Vec<Atom> {
        match self {
            Datum::Set(items) => items,
            Datum::Map(_) => Vec::new(),
        }
    }

    fn into_map(self) -> Vec<(Atom, Atom)> {
        match self {
            Datum::Map(pairs) => pairs,
            Datum::Set(_) => Vec::new(),
        }
    }
}

impl Default for Datum {
    fn default() -> Datum {
        Datum::empty()
    }
}

impl<A: Into<Atom>> From<A> for Datum {
    fn from(a: A) -> Datum {
        Datum::Set(vec![a.into()])
    }
}

impl From<&BTreeMap<String, String>> for Datum {
    fn from(m: &BTreeMap<String, String>) -> Datum {
        Datum::map(m.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }
}

/// How a column's values combine, from the schema: what an `update2` diff means for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    /// At most one element (`max 1`): a scalar, or an optional value such as `ofport`.
    Single,
    /// A set of possibly many elements.
    Set,
    /// A map of possibly many pairs (the type has a `value`).
    Map,
}

/// A row's columns, for `insert`, `update` and `wait`.
pub type RowData = BTreeMap<String, Datum>;

/// Builds a [`RowData`] from `(column, value)` pairs.
pub fn row<K: Into<String>, V: Into<Datum>>(cols: impl IntoIterator<Item = (K, V)>) -> RowData {
    cols.into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
}

/// A condition function (RFC 7047 section 5.1, `<function>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `includes` (set/map superset)
    Includes,
    /// `excludes` (disjoint)
    Excludes,
}

impl Function {
    fn as_str(self) -> &'static str {
        match self {
            Function::Eq => "==",
            Function::Ne => "!=",
            Function::Lt => "<",
            Function::Le => "<=",
            Function::Gt => ">",
            Function::Ge => ">=",
            Function::Includes => "includes",
            Function::Excludes => "excludes",
        }
    }
}

/// One `where` clause element: `[column, function, value]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// The column (`_uuid` for the row's uuid).
    pub column: String,
    /// The comparison.
    pub function: Function,
    /// The value compared with.
    pub value: Datum,
}

impl Condition {
    /// `[column, function, value]`.
    pub fn new(column: impl Into<String>, function: Function, value: impl Into<Datum>) -> Self {
        Condition {
            column: column.into(),
            function,
            value: value.into(),
        }
    }

    /// `column == value`.
    pub fn eq(column: impl Into<String>, value: impl Into<Datum>) -> Self {
        Condition::new(column, Function::Eq, value)
    }

    /// `_uuid == ["uuid", uuid]`: the one row with that uuid.
    pub fn uuid(uuid: impl Into<String>) -> Self {
        Condition::new("_uuid", Function::Eq, Datum::uuid(uuid))
    }

    fn to_json(&self) -> Value {
        json!([self.column, self.function.as_str(), self.value.to_json()])
    }
}

/// A mutator (RFC 7047 section 5.1, `<mutator>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutator {
    /// `+=`
    Add,
    /// `-=`
    Sub,
    /// `*=`
    Mul,
    /// `/=`
    Div,
    /// `%=`
    Rem,
    /// `insert`: add elements to a set, or pairs whose key is absent to a map.
    Insert,
    /// `delete`: remove elements from a set; from a map, pairs (given a map) or keys (given a
    /// set).
    Delete,
}

impl Mutator {
    fn as_str(self) -> &'static str {
        match self {
            Mutator::Add => "+=",
            Mutator::Sub => "-=",
            Mutator::Mul => "*=",
            Mutator::Div => "/=",
            Mutator::Rem => "%=",
            Mutator::Insert => "insert",
            Mutator::Delete => "delete",
        }
    }
}

/// One mutation: `[column, mutator, value]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Mutation {
    /// The column.
    pub column: String,
    /// What to do.
    pub mutator: Mutator,
    /// The operand.
    pub value: Datum,
}

impl Mutation {
    /// `[column, mutator, value]`.
    pub fn new(column: impl Into<String>, mutator: Mutator, value: impl Into<Datum>) -> Self {
        Mutation {
            column: column.into(),
            mutator,
            value: value.into(),
        }
    }

    /// `insert` into a set or map column.
    pub fn insert(column: impl Into<String>, value: impl Into<Datum>) -> Self {
        Mutation::new(column, Mutator::Insert, value)
    }

    /// `delete` from a set or map column.
    pub fn delete(column: impl Into<String>, value: impl Into<Datum>) -> Self {
        Mutation::new(column, Mutator::Delete, value)
    }

    /// `+=` on an integer column.
    pub fn add(column: impl Into<String>, value: i64) -> Self {
        Mutation::new(column, Mutator::Add, value)
    }

    fn to_json(&self) -> Value {
        json!([self.column, self.mutator.as_str(), self.value.to_json()])
    }
}

/// What a `wait` operation waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitUntil {
    /// The selected rows equal `rows`.
    Equal,
    /// The selected rows differ from `rows`.
    NotEqual,
}

/// One `transact` operation.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    /// Inserts a row; `uuid_name` lets later operations refer to it as a `named-uuid`.
    Insert {
        /// The table.
        table: String,
        /// Column values (others take their defaults).
        row: RowData,
        /// The `uuid-name`.
        uuid_name: Option<String>,
    },
    /// Reads rows; result in [`OpResult::rows`].
    Select {
        /// The table.
        table: String,
        /// The `where` clause (empty: every row).
        conditions: Vec<Condition>,
        /// Columns to return (`None`: all).
        columns: Option<Vec<String>>,
    },
    /// Sets columns of matching rows; count in [`OpResult::count`].
    Update {
        /// The table.
        table: String,
        /// The `where` clause.
        conditions: Vec<Condition>,
        /// Column values to set.
        row: RowData,
    },
    /// Mutates columns of matching rows; count in [`OpResult::count`].
    Mutate {
        /// The table.
        table: String,
        /// The `where` clause.
        conditions: Vec<Condition>,
        /// The mutations, applied in order.
        mutations: Vec<Mutation>,
    },
    /// Deletes matching rows; count in [`OpResult::count`].
    Delete {
        /// The table.
        table: String,
        /// The `where` clause.
        conditions: Vec<Condition>,
    },
    /// Waits until the selected rows (projected on `columns`) equal / differ from `rows`, or
    /// fails the transaction with `timed out` after `timeout` (`Some(ZERO)`: check once now).
    Wait {
        /// The table.
        table: String,
        /// The `where` clause.
        conditions: Vec<Condition>,
        /// Columns compared.
        columns: Vec<String>,
        /// Equal or not equal.
        until: WaitUntil,
        /// The expected rows.
        rows: Vec<RowData>,
        /// How long the server may wait (`None`: forever, bounded only by the request
        /// timeout).
        timeout: Option<Duration>,
    },
    /// A comment for the database log.
    Comment(String),
}

impl Operation {
    /// `insert` without a name.
    pub fn insert(table: impl Into<String>, row: RowData) -> Self {
        Operation::Insert {
            table: table.into(),
            row,
            uuid_name: None,
        }
    }

    /// `insert` with `uuid-name` `name`, referable as [`Datum::named_uuid`].
    pub fn insert_named(table: impl Into<String>, name: impl Into<String>, row: RowData) -> Self {
        Operation::Insert {
            table: table.into(),
            row,
            uuid_name: Some(name.into()),
        }
    }

    /// `select` of `columns` (all when `None`).
    pub fn select(
        table: impl Into<String>,
        conditions: Vec<Condition>,
        columns: Option<&[&str]>,
    ) -> Self {
        Operation::Select {
            table: table.into(),
            conditions,
            columns: columns.map(|c| c.iter().map(|s| s.to_string()).collect()),
        }
    }

    /// `update`.
    pub fn update(table: impl Into<String>, conditions: Vec<Condition>, row: RowData) -> Self {
        Operation::Update {
            table: table.into(),
            conditions,
            row,
        }
    }

    /// `mutate`.
    pub fn mutate(
        table: impl Into<String>,
        conditions: Vec<Condition>,
        mutations: Vec<Mutation>,
    ) -> Self {
        Operation::Mutate {
            table: table.into(),
            conditions,
            mutations,
        }
    }

    /// `delete`.
    pub fn delete(table: impl Into<String>, conditions: Vec<Condition>) -> Self {
        Operation::Delete {
            table: table.into(),
            conditions,
        }
    }

    /// A `wait` with timeout 0 that fails the transaction unless exactly the rows matching
    /// `conditions`, projected on the columns of `rows`, are `rows` (`rows` empty: no row
    /// matches). All rows must have the same columns.
    pub fn assert_rows(
        table: impl Into<String>,
        conditions: Vec<Condition>,
        rows: Vec<RowData>,
    ) -> Self {
        let columns = rows
            .first()
            .map(|r| r.keys().cloned().collect())
            .unwrap_or_default();
        Operation::Wait {
            table: table.into(),
            conditions,
            columns,
            until: WaitUntil::Equal,
            rows,
            timeout: Some(Duration::ZERO),
        }
    }

    /// Short description for errors, e.g. `insert into Bridge`.
    pub fn describe(&self) -> String {
        match self {
            Operation::Insert { table, .. } => format!("insert into {table}"),
            Operation::Select { table, .. } => format!("select from {table}"),
            Operation::Update { table, .. } => format!("update of {table}"),
            Operation::Mutate { table, .. } => format!("mutate of {table}"),
            Operation::Delete { table, .. } => format!("delete from {table}"),
            Operation::Wait { table, .. } => format!("wait on {table}"),
            Operation::Comment(_) => "comment".to_string(),
        }
    }

    /// The JSON form.
    pub fn to_json(&self) -> Value {
        let conds = |c: &[Condition]| Value::Array(c.iter().map(Condition::to_json).collect());
        let row_json = |r: &RowData| {
            Value::Object(
                r.iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect::<Map<_, _>>(),
            )
        };
        match self {
            Operation::Insert {
                table,
                row,
                uuid_name,
            } => {
                let mut o = json!({"op": "insert", "table": table, "row": row_json(row)});
                if let Some(n) = uuid_name {
                    o["uuid-name"] = json!(n);
                }
                o
            }
            Operation::Select {
                table,
                conditions,
                columns,
            } => {
                let mut o = json!({"op": "select", "table": table, "where": conds(conditions)});
                if let Some(c) = columns {
                    o["columns"] = json!(c);
                }
                o
            }
            Operation::Update {
                table,
                conditions,
                row,
            } => json!({"op": "update", "table": table, "where": conds(conditions),
                        "row": row_json(row)}),
            Operation::Mutate {
                table,
                conditions,
                mutations,
            } => json!({"op": "mutate", "table": table, "where": conds(conditions),
                        "mutations": mutations.iter().map(Mutation::to_json).collect::<Vec<_>>()}),
            Operation::Delete { table, conditions } => {
                json!({"op": "delete", "table": table, "where": conds(conditions)})
            }
            Operation::Wait {
                table,
                conditions,
                columns,
                until,
                rows,
                timeout,
            } => {
                let mut o = json!({"op": "wait", "table": table, "where": conds(conditions),
                    "columns": columns,
                    "until": if *until == WaitUntil::Equal { "==" } else { "!=" },
                    "rows": rows.iter().map(row_json).collect::<Vec<_>>()});
                if let Some(t) = timeout {
                    o["timeout"] = json!(u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
                }
                o
            }
            Operation::Comment(c) => json!({"op": "comment", "comment": c}),
        }
    }
}

/// The successful result of one operation.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OpResult {
    /// `insert`: the new row's uuid.
    pub uuid: Option<String>,
    /// `update`, `mutate`, `delete`: how many rows matched.
    pub count: Option<u64>,
    /// `select`: the rows (projected on the requested columns; `_uuid` as a uuid atom).
    pub rows: Vec<RowData>,
}

/// Turns a `transact` reply's result array into per-operation results, or the error of the
/// first failing operation (or of the commit). `db` and `ops` are only used for messages.
pub fn parse_results(db: &str, ops: &[Operation], result: &Value) -> Result<Vec<OpResult>, Error> {
    let protocol = |reason: String| Error::Transaction {
        db: db.to_string(),
        index: None,
        op: "reply".to_string(),
        error: "malformed reply".to_string(),
        details: Some(reason),
    };
    let Value::Array(items) = result else {
        return Err(protocol(format!("result is not an array: {result}")));
    };
    // The first error wins: operations after a failed one have null results, and a failed
    // commit adds one trailing error element.
    for (i, item) in items.iter().enumerate() {
        if let Some(err) = item.get("error").filter(|e| !e.is_null()) {
            let (error, mut details) = error_parts(err);
            if details.is_none() {
                details = item
                    .get("details")
                    .and_then(Value::as_str)
                    .map(str::to_string);
            }
            let (index, op) = match ops.get(i) {
                Some(op) => (Some(i), op.describe()),
                None => (None, "commit".to_string()),
            };
            return Err(Error::Transaction {
                db: db.to_string(),
                index,
                op,
                error,
                details,
            });
        }
    }
    if items.len() < ops.len() {
        return Err(protocol(format!(
            "{} results for {} operations",
            items.len(),
            ops.len()
        )));
    }
    items
        .iter()
        .take(ops.len())
        .map(|item| {
            let mut r = OpResult::default();
            if let Some(u) = item.get("uuid") {
                match Atom::from_json(u) {
                    Ok(Atom::Uuid(u)) => r.uuid = Some(u),
                    _ => return Err(protocol(format!("bad uuid {u}"))),
                }
            }
            r.count = item.get("count").and_then(Value::as_u64);
            if let Some(Value::Array(rows)) = item.get("rows") {
                for row in rows {
                    let Value::Object(cols) = row else {
                        return Err(protocol(format!("bad row {row}")));
                    };
                    let mut data = RowData::new();
                    for (k, v) in cols {
                        data.insert(k.clone(), Datum::from_json(v).map_err(&protocol)?);
                    }
                    r.rows.push(data);
                }
            }
            Ok(r)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datum_json_round_trips() {
        let cases = [
            (Datum::from("br0"), json!("br0")),
            (Datum::from(5), json!(5)),
            (Datum::from(true), json!(true)),
            (Datum::empty(), json!(["set", []])),
            (
                Datum::set(["OpenFlow13", "OpenFlow14"]),
                json!(["set", ["OpenFlow13", "OpenFlow14"]]),
            ),
            (Datum::uuid("u1"), json!(["uuid", "u1"])),
            (Datum::named_uuid("p"), json!(["named-uuid", "p"])),
            (
                Datum::map([("remote_ip", "flow"), ("key", "flow")]),
                json!(["map", [["remote_ip", "flow"], ["key", "flow"]]]),
            ),
            (
                Datum::Map(vec![(Atom::Integer(3), Atom::Uuid("u".into()))]),
                json!(["map", [[3, ["uuid", "u"]]]]),
            ),
            (Datum::from(Atom::Real(1.5)), json!(1.5)),
        ];
        for (d, j) in cases {
            assert_eq!(d.to_json(), j);
            assert_eq!(Datum::from_json(&j).unwrap(), d, "{j}");
        }
        assert_eq!(Datum::optional::<i64>(None), Datum::empty());
        assert_eq!(Datum::optional(Some(7)).as_atom(), Some(&Atom::Integer(7)));
        assert!(Datum::from_json(&json!({"a": 1})).is_err());
        assert!(Datum::from_json(&json!(["map", [[1]]])).is_err());
        assert!(Datum::from_json(&json!(null)).is_err());
    }

    #[test]
    fn diffs_apply_as_ovsdb_server_documents() {
        let mut s = Datum::from("a");
        s.apply_diff(ColumnKind::Single, Datum::from("b"));
        assert_eq!(s, Datum::from("b"));

        // Optional values: the diff is the new value, including the empty set.
        let mut ofport = Datum::empty();
        ofport.apply_diff(ColumnKind::Single, Datum::from(5));
        assert_eq!(ofport, Datum::from(5));
        ofport.apply_diff(ColumnKind::Single, Datum::from(6));
        assert_eq!(ofport, Datum::from(6));
        ofport.apply_diff(ColumnKind::Single, Datum::empty());
        assert_eq!(ofport, Datum::empty());

        let mut ports = Datum::set([Atom::Uuid("a".into())]);
        ports.apply_diff(
            ColumnKind::Set,
            Datum::set([Atom::Uuid("a".into()), Atom::Uuid("b".into())]),
        );
        assert_eq!(ports, Datum::set([Atom::Uuid("b".into())]));
        ports.apply_diff(ColumnKind::Set, Datum::set([Atom::Uuid("c".into())]));
        assert_eq!(ports.as_set().len(), 2);

        let mut m = Datum::map([("a", "1"), ("b", "2")]);
        m.apply_diff(
            ColumnKind::Map,
            Datum::map([("a", "1"), ("b", "3"), ("c", "4")]),
        );
        assert_eq!(m, Datum::map([("b", "3"), ("c", "4")]));
        let mut empty = Datum::empty();
        empty.apply_diff(ColumnKind::Map, Datum::map([("x", "y")]));
        assert_eq!(empty, Datum::map([("x", "y")]));
    }

    #[test]
    fn operations_encode_as_rfc_7047() {
        let ops = [
            Operation::insert_named(
                "Interface",
                "i",
                row([
                    ("name", Datum::from("p1")),
                    ("ofport_request", Datum::from(1)),
                ]),
            ),
            Operation::mutate(
                "Bridge",
                vec![Condition::eq("name", "br0")],
                vec![Mutation::insert("ports", Datum::named_uuid("p"))],
            ),
            Operation::select("Open_vSwitch", vec![], Some(&["next_cfg"])),
            Operation::assert_rows(
                "Bridge",
                vec![Condition::uuid("u")],
                vec![row([("name", "br0")])],
            ),
            Operation::Comment("hi".into()),
        ];
        let j: Vec<Value> = ops.iter().map(Operation::to_json).collect();
        assert_eq!(
            j,
            vec![
                json!({"op":"insert","table":"Interface","uuid-name":"i",
                       "row":{"name":"p1","ofport_request":1}}),
                json!({"op":"mutate","table":"Bridge","where":[["name","==","br0"]],
                       "mutations":[["ports","insert",["named-uuid","p"]]]}),
                json!({"op":"select","table":"Open_vSwitch","where":[],"columns":["next_cfg"]}),
                json!({"op":"wait","table":"Bridge","where":[["_uuid","==",["uuid","u"]]],
                       "columns":["name"],"until":"==","rows":[{"name":"br0"}],"timeout":0}),
                json!({"op":"comment","comment":"hi"}),
            ]
        );
    }

    #[test]
    fn results_name_the_failing_operation_or_the_commit() {
        let ops = [
            Operation::insert("Bridge", row([("name", "b")])),
            Operation::select("Bridge", vec![], None),
        ];
        let ok = parse_results(
            "Open_vSwitch",
            &ops,
            &json!([{"uuid":["uuid","u1"]},{"rows":[{"name":"b","ports":["set",[]]}]}]),
        )
        .unwrap();
        assert_eq!(ok[0].uuid.as_deref(), Some("u1"));
        assert_eq!(ok[1].rows[0]["name"], Datum::from("b"));

        let e = parse_results(
            "Open_vSwitch",
            &ops,
            &json!([{"error":"syntax error","details":"No table named Nope."}, null]),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "transaction on Open_vSwitch failed at operation 0 (insert into Bridge): syntax error (No table named Nope.)"
        );
        let e = parse_results(
            "Open_vSwitch",
            &ops,
            &json!([{"uuid":["uuid","u1"]},{"rows":[]},
                    {"error":"constraint violation","details":"duplicate"}]),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "transaction on Open_vSwitch failed at commit: constraint violation (duplicate)"
        );
        assert!(parse_results("db", &ops, &json!(false)).is_err());
        assert!(parse_results("db", &ops, &json!([{}])).is_err());
    }
}
