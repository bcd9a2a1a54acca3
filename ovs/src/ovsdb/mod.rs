//! A native, async OVSDB client (RFC 7047) for the `Open_vSwitch` database, with a monitored
//! cache and the bridge/port helpers the node agent needs.
//!
//! Layers, bottom up:
//! - [`jsonrpc`]: JSON-RPC 1.0 over a Unix or TCP stream. A background reader task parses the
//!   undelimited stream of JSON values, matches replies to requests by id, answers the server's
//!   `echo`, and hands notifications to a callback in arrival order. A closed connection fails
//!   every pending request at once.
//! - [`ops`]: typed OVSDB data (atoms, sets, maps, named uuids) and the `transact` operations,
//!   with per-operation results and errors that name the failing operation.
//! - [`cache`]: a local copy of the `Open_vSwitch`, `Bridge`, `Port`, `Interface`, `Flow_Table`
//!   and `QoS` tables, kept up to date by `monitor_cond` / `update2` (schema-aware diffs).
//! - [`client`]: the [`Client`]: one persistent connection, reconnect with bounded exponential
//!   backoff, re-monitor and cache rebuild on reconnect, bounded waits on cache conditions.
//! - [`helpers`]: `ensure_bridge`, `add_port`, `delete_port`, `find_interfaces_by_external_id`,
//!   `set_flow_table_name`, each one transaction guarded by `wait` operations.
//!
//! Why native: forking `ovs-vsctl` per operation costs a process, a connection and a full
//! database download each time, and gives stringly errors; a persistent monitored connection
//! gives cheap reads (from the cache), event-driven waits (`ofport`, `cur_cfg`) and typed errors.
//!
//! Limits: no SSL remotes, no `monitor_cond_since` (a reconnect downloads the monitored tables
//! again, which is small for these tables), no locks API beyond raw [`Client::request`], one
//! database (`Open_vSwitch`) monitored. Transactions are never retried automatically: a request in
//! flight when the connection drops fails, and the caller decides.

pub mod cache;
pub mod client;
pub mod helpers;
pub mod jsonrpc;
pub mod ops;
pub mod qos;

use std::time::Duration;

pub use cache::{Cache, Row};
pub use client::{Client, ClientOptions, ConnectionState};
pub use helpers::{BridgeSpec, FailMode, InterfaceInfo, PortSpec};
pub use jsonrpc::{Notification, Target};
pub use ops::{
    row, Atom, Condition, Datum, Function, Mutation, Mutator, OpResult, Operation, RowData,
    WaitUntil,
};
pub use qos::{QosInfo, QosSpec};

/// The database the helpers and the cache work on.
pub const DB: &str = "Open_vSwitch";

/// What can go wrong talking to ovsdb-server. Cloneable, because one closed connection fails many
/// pending requests with the same error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// A target string that is not `unix:PATH` or `tcp:HOST:PORT`.
    #[error("invalid ovsdb target {target:?}: {reason}")]
    InvalidTarget {
        /// The string given.
        target: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The socket could not be opened.
    #[error("cannot connect to {target}: {reason}")]
    Connect {
        /// The target, as OVS spells it.
        target: String,
        /// The operating system's reason.
        reason: String,
    },
    /// The connection closed (or broke) while a request was pending or being sent.
    #[error("connection to {target} closed: {reason}")]
    Closed {
        /// The target, as OVS spells it.
        target: String,
        /// End of stream, I/O error or protocol error.
        reason: String,
    },
    /// The client has no connection right now and none came up within the request timeout.
    #[error("not connected to {target} (reconnecting; last error: {last_error})")]
    NotConnected {
        /// The target, as OVS spells it.
        target: String,
        /// Why the last connection attempt failed.
        last_error: String,
    },
    /// No reply within the request timeout.
    #[error("no reply to {method} from {target} within {timeout:?}")]
    Timeout {
        /// The JSON-RPC method.
        method: String,
        /// The target, as OVS spells it.
        target: String,
        /// The timeout that expired.
        timeout: Duration,
    },
    /// The peer broke the JSON-RPC or OVSDB protocol.
    #[error("protocol error from {target}: {reason}")]
    Protocol {
        /// The target, as OVS spells it.
        target: String,
        /// What was wrong.
        reason: String,
    },
    /// The server answered a request with a JSON-RPC error (unknown database, bad syntax...).
    #[error("{method} failed: {error}{}", details_suffix(.details))]
    Rpc {
        /// The JSON-RPC method.
        method: String,
        /// The server's `error` string.
        error: String,
        /// The server's `details`, when given.
        details: Option<String>,
    },
    /// A `transact` whose operation (or commit) the server rejected.
    #[error(
        "transaction on {db} failed at {}: {error}{}",
        location(*.index, .op),
        details_suffix(.details)
    )]
    Transaction {
        /// The database.
        db: String,
        /// Index of the failing operation; `None` when the commit itself failed (constraint
        /// violation, referential integrity...), reported by OVSDB as an extra trailing result.
        index: Option<usize>,
        /// The failing operation, e.g. `insert into Bridge`.
        op: String,
        /// The server's `error` string, e.g. `constraint violation`.
        error: String,
        /// The server's `details`, when given.
        details: Option<String>,
    },
    /// A bounded wait on the cache expired.
    #[error("timed out after {timeout:?} waiting for {what}")]
    WaitTimeout {
        /// What was awaited, e.g. `ofport of port p1 on bridge br0`.
        what: String,
        /// The timeout that expired.
        timeout: Duration,
    },
    /// The database has no `Open_vSwitch` row (`ovs-vsctl init` was never run).
    #[error("database has no Open_vSwitch row (run ovs-vsctl init)")]
    NoRootRow,
    /// The named bridge does not exist.
    #[error("bridge {0} does not exist")]
    BridgeNotFound(String),
    /// The named interface does not exist.
    #[error("interface {0} does not exist")]
    InterfaceNotFound(String),
    /// The named port does not exist.
    #[error("port {0} does not exist")]
    PortNotFound(String),
    /// A port of that name exists on another bridge.
    #[error("port {port} is on bridge {actual}, not on bridge {bridge}")]
    PortOnOtherBridge {
        /// The port.
        port: String,
        /// The bridge asked for.
        bridge: String,
        /// The bridge it is on.
        actual: String,
    },
    /// ovs-vswitchd could not open the port's interface (`ofport` is -1).
    #[error("port {port} on bridge {bridge} failed: {error}")]
    PortFailed {
        /// The port.
        port: String,
        /// Its bridge.
        bridge: String,
        /// The Interface `error` column.
        error: String,
    },
    /// A value read from the database does not have the expected type.
    #[error("unexpected value in {table}.{column}: {reason}")]
    BadValue {
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// What was wrong.
        reason: String,
    },
}

fn details_suffix(details: &Option<String>) -> String {
    match details {
        Some(d) if !d.is_empty() => format!(" ({d})"),
        _ => String::new(),
    }
}

fn location(index: Option<usize>, op: &str) -> String {
    match index {
        Some(i) => format!("operation {i} ({op})"),
        None => "commit".to_string(),
    }
}
