//! [`OfClient`]: an async OpenFlow 1.3 controller-side connection to one switch (an Open vSwitch
//! bridge's `br0.mgmt` socket or a passive TCP listener).
//!
//! How it is built, and why:
//! - **One reader task** owns the read half and splits the byte stream into whole messages
//!   (several per read, or one split across reads). It answers `ECHO_REQUEST` itself and hands
//!   every other message to whoever registered its xid. It never waits on anything but the
//!   socket: Open vSwitch stops reading from a controller whose replies pile up, so a reader
//!   that blocked on the writer could deadlock both sides.
//! - **One writer task** owns the write half and drains an unbounded channel, coalescing queued
//!   messages into large writes. Batch operations encode everything first and hand the writer one
//!   buffer, so 10,000 flow_mods go out pipelined, followed by a single barrier.
//! - **Replies by xid**: a call registers the xids it will use (a contiguous range for batches)
//!   and receives, in order, every message carrying them. An `OFPT_ERROR` therefore reaches the
//!   call that sent the offending message, which knows the flow it was and reports it by index
//!   and text. Registrations are removed when the call returns, however it returns.
//! - **Closing**: when the connection dies (EOF, I/O error, framing error, missed echo, or the
//!   client is dropped) every pending call fails at once with the reason, and later calls fail
//!   immediately. There is no reconnect here: the owner reconnects and replays desired state.
//! - **Bounded waits**: connecting (socket, hello, features) is bounded by
//!   [`OfConfig::connect_timeout`], every call by [`OfConfig::request_timeout`], and a switch that
//!   stops answering our periodic echo within [`OfConfig::echo_timeout`] is declared dead.
//!
//! - **Flow monitor**: [`OfClient::monitor_flows`] asks the switch to report flow changes made
//!   by others; those replies arrive unsolicited (xid 0) and go to the monitor's channel.
//!
//! Limits: other asynchronous messages (packet-in, port-status, flow-removed) are logged and dropped;
//! there is no TLS (`ssl:`) transport; a batch of plain flow_mods is *not* atomic (some may be
//! applied when another fails): use [`OfClient::bundle`] for all-or-nothing changes.
//!
//! Why one file of this size: the reader, writer and keepalive tasks, the xid registry and every
//! request kind share the connection state; its tests against fake switches are in the file.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, trace, warn};

use super::bundle::{self, BundleCtrl, BundleCtrlType, OFPBF_ATOMIC, OFPBF_ORDERED};
use super::flow_mod::{
    decode_flow_stats_body, decode_group_desc_body, encode_flow_mod, encode_flow_stats_request,
    encode_group_desc_request, encode_group_mod, FlowMod, FlowModCommand, FlowStats,
    GroupModCommand, OFPMP_GROUP_DESC,
};
use super::meter::{
    decode_meter_config_body, encode_meter_config_request, encode_meter_mod, Meter,
    MeterModCommand, OFPMP_METER_CONFIG,
};
use super::monitor::{
    decode_flow_updates, encode_flow_monitor_request, is_flow_monitor_body, FlowEvent, FlowUpdate,
    NXFMF_ADD, NXFMF_DELETE, NXFMF_MODIFY, OFPMP_EXPERIMENTER,
};
use super::wire::{
    self, decode_features_reply, decode_multipart_reply, encode_barrier_request, encode_echo_reply,
    encode_echo_request, encode_features_request, encode_hello, hello_versions, msg_type,
    version_names, FrameBuffer, RawMsg, SwitchError, WireError, OFP13_VERSION, OFPMP_FLOW,
};
use super::CodecError;
use crate::flow::{Flow, Group};

/// Timeouts and keepalive of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OfConfig {
    /// Bound on connecting: socket, hello exchange and features request together.
    pub connect_timeout: Duration,
    /// Bound on every call (a whole batch or bundle counts as one call).
    pub request_timeout: Duration,
    /// How long the connection may be silent before we send an echo request; `None` disables
    /// the keepalive.
    pub echo_interval: Option<Duration>,
    /// How long an echo request may go unanswered before the connection is declared dead.
    pub echo_timeout: Duration,
}

impl Default for OfConfig {
    fn default() -> Self {
        OfConfig {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            echo_interval: Some(Duration::from_secs(10)),
            echo_timeout: Duration::from_secs(15),
        }
    }
}

/// Where the switch listens, in Open vSwitch's spelling.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Target {
    /// `unix:PATH`, or a plain path.
    Unix(PathBuf),
    /// `tcp:HOST:PORT` (an IPv6 host in brackets).
    Tcp {
        /// Host name or address.
        host: String,
        /// Port.
        port: u16,
    },
}

impl Target {
    /// Parses `unix:PATH`, `tcp:HOST:PORT` or a plain path (one that does not start with a
    /// `word:` prefix).
    pub fn parse(s: &str) -> Result<Target, OfError> {
        let bad = |reason: &str| OfError::BadTarget {
            target: s.to_string(),
            reason: reason.into(),
        };
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(bad("empty socket path"));
            }
            return Ok(Target::Unix(PathBuf::from(path)));
        }
        if let Some(rest) = s.strip_prefix("tcp:") {
            let (host, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| bad("expected tcp:HOST:PORT"))?;
            let port: u16 = port.parse().map_err(|_| bad("invalid port"))?;
            let host = host
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(host);
            if host.is_empty() {
                return Err(bad("empty host"));
            }
            return Ok(Target::Tcp {
                host: host.to_string(),
                port,
            });
        }
        if let Some((method, _)) = s.split_once(':') {
            if !method.is_empty() && method.chars().all(|c| c.is_ascii_alphanumeric()) {
                return Err(bad(
                    "unsupported connection method (use unix:PATH or tcp:HOST:PORT)",
                ));
            }
        }
        if s.is_empty() {
            return Err(bad("empty target"));
        }
        Ok(Target::Unix(PathBuf::from(s)))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Unix(p) => write!(f, "unix:{}", p.display()),
            Target::Tcp { host, port } if host.contains(':') => write!(f, "tcp:[{host}]:{port}"),
            Target::Tcp { host, port } => write!(f, "tcp:{host}:{port}"),
        }
    }
}

fn fmt_more_failed(n: usize) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" ({n} more messages of the batch failed too)")
    }
}

/// What can go wrong talking to a switch. Every variant names the switch (`peer`: target and
/// datapath id) and, where there is one, the operation, xid and flow.
#[derive(Debug, thiserror::Error)]
pub enum OfError {
    /// The target string is not `unix:PATH`, `tcp:HOST:PORT` or a path.
    #[error("invalid openflow target {target:?}: {reason}")]
    BadTarget {
        /// The target as given.
        target: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The socket could not be opened.
    #[error("cannot connect to {target}: {source}")]
    Connect {
        /// The target.
        target: String,
        /// The system error.
        source: io::Error,
    },
    /// Connecting (socket, hello, features) took longer than the connect timeout.
    #[error("timed out after {after:?} connecting to {target} while {stage}")]
    ConnectTimeout {
        /// The target.
        target: String,
        /// The bound that expired.
        after: Duration,
        /// What we were waiting for.
        stage: &'static str,
    },
    /// The switch cannot speak OpenFlow 1.3.
    #[error(
        "switch at {target} does not support openflow 1.3 (it offers {offered}): \
         add OpenFlow13 to the bridge's protocols"
    )]
    UnsupportedVersion {
        /// The target.
        target: String,
        /// The versions the switch offered.
        offered: String,
    },
    /// The switch answered the handshake with an error (`OFPET_HELLO_FAILED`...).
    #[error("switch at {target} refused the openflow handshake: {error}")]
    HandshakeRejected {
        /// The target.
        target: String,
        /// The switch's error.
        error: SwitchError,
    },
    /// The handshake broke the protocol or the connection closed during it.
    #[error("openflow handshake with {target} failed: {reason}")]
    Handshake {
        /// The target.
        target: String,
        /// What happened.
        reason: String,
    },
    /// The connection is closed (or closed while the call waited).
    #[error("{op} failed: the connection to {peer} is closed: {reason}")]
    Closed {
        /// The switch.
        peer: String,
        /// The call.
        op: String,
        /// Why the connection closed.
        reason: String,
    },
    /// No answer within the request timeout.
    #[error("{op} (xid {xid}) on {peer} got no answer within {after:?}")]
    Timeout {
        /// The switch.
        peer: String,
        /// The call.
        op: String,
        /// The xid that went unanswered.
        xid: u32,
        /// The bound that expired.
        after: Duration,
    },
    /// The switch rejected a request that is not one of a batch's flow/group mods.
    #[error("switch {peer} rejected {op} (xid {xid}): {error}")]
    Rejected {
        /// The switch.
        peer: String,
        /// The request.
        op: String,
        /// Its xid.
        xid: u32,
        /// The switch's error.
        error: SwitchError,
    },
    /// The switch rejected a flow_mod or group_mod of a (non-atomic) batch. Messages before it
    /// and after it may have been applied.
    #[error(
        "switch {peer} rejected message #{index} of {total} (xid {xid}) `{what}`: {error}{}",
        fmt_more_failed(*.more_failed)
    )]
    ModRejected {
        /// The switch.
        peer: String,
        /// Index of the first failed message in the batch.
        index: usize,
        /// Messages in the batch.
        total: usize,
        /// Its xid.
        xid: u32,
        /// The message as text (command and flow in `ovs-ofctl` syntax).
        what: String,
        /// The switch's error.
        error: SwitchError,
        /// How many other messages of the batch failed.
        more_failed: usize,
    },
    /// A bundle failed and was discarded: nothing of it was applied.
    #[error(
        "bundle {bundle_id} on {peer} was not applied: message #{index} of {total} (xid {xid}) \
         `{what}` failed at {stage}: {error}"
    )]
    BundleFailed {
        /// The switch.
        peer: String,
        /// The bundle id.
        bundle_id: u32,
        /// Index of the failed message in the bundle.
        index: usize,
        /// Messages in the bundle.
        total: usize,
        /// Its xid.
        xid: u32,
        /// The message as text.
        what: String,
        /// When it failed.
        stage: BundleStage,
        /// The switch's error for that message.
        error: SwitchError,
    },
    /// A message could not be encoded; nothing of the call was sent.
    #[error("cannot encode message #{index} `{what}`: {source}")]
    Encode {
        /// Index of the message in the call.
        index: usize,
        /// The message as text.
        what: String,
        /// The codec's reason.
        source: CodecError,
    },
    /// A message could not be framed (too long for OpenFlow); nothing of the call was sent.
    #[error("cannot frame message #{index} `{what}`: {source}")]
    Frame {
        /// Index of the message in the call.
        index: usize,
        /// The message as text.
        what: String,
        /// Why.
        source: WireError,
    },
    /// A reply that could not be decoded.
    #[error("cannot decode the reply to {op} from {peer}: {reason}")]
    Decode {
        /// The switch.
        peer: String,
        /// The call.
        op: String,
        /// Why.
        reason: String,
    },
    /// A reply of the wrong kind.
    #[error("unexpected reply to {op} (xid {xid}) from {peer}: {got}")]
    Unexpected {
        /// The switch.
        peer: String,
        /// The call.
        op: String,
        /// The xid.
        xid: u32,
        /// What arrived.
        got: String,
    },
}

impl OfError {
    /// The switch's error, for the variants that carry one.
    pub fn switch_error(&self) -> Option<&SwitchError> {
        match self {
            OfError::HandshakeRejected { error, .. }
            | OfError::Rejected { error, .. }
            | OfError::ModRejected { error, .. }
            | OfError::BundleFailed { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// When a bundle message failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BundleStage {
    /// The switch refused to add it to the bundle (it could not parse or check it).
    Add,
    /// It failed when the bundle was committed (for example a group it needs does not exist).
    Commit,
}

impl fmt::Display for BundleStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BundleStage::Add => "add",
            BundleStage::Commit => "commit",
        })
    }
}

/// Which flows a dump returns.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct DumpFilter {
    /// One table, or every table.
    pub table: Option<u8>,
    /// Cookie value the flows must have under `cookie_mask`.
    pub cookie: u64,
    /// Cookie bits that must equal `cookie` (0 = any cookie).
    pub cookie_mask: u64,
}

impl DumpFilter {
    /// Every flow of every table.
    pub fn all() -> Self {
        Self::default()
    }

    /// Every flow of `table`.
    pub fn table(table: u8) -> Self {
        DumpFilter {
            table: Some(table),
            ..Self::default()
        }
    }

    /// The flows whose cookie equals `cookie` under `mask`, in every table.
    pub fn cookie(cookie: u64, mask: u64) -> Self {
        DumpFilter {
            table: None,
            cookie,
            cookie_mask: mask,
        }
    }
}

/// One message of a bundle.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum BundleMsg {
    /// A flow_mod.
    Flow(FlowMod),
    /// A group_mod.
    Group(GroupModCommand, Group),
}

impl BundleMsg {
    /// Adds `flow`.
    pub fn add(flow: Flow) -> Self {
        BundleMsg::Flow(FlowMod::add(flow))
    }

    /// Deletes every flow (of every table) whose cookie equals `cookie` under `mask`.
    pub fn delete_by_cookie(cookie: u64, mask: u64) -> Self {
        BundleMsg::Flow(FlowMod::delete_cookie(cookie, mask))
    }

    fn encode(&self, xid: u32) -> Result<Vec<u8>, CodecError> {
        match self {
            BundleMsg::Flow(fm) => encode_flow_mod(fm, xid),
            BundleMsg::Group(cmd, g) => encode_group_mod(*cmd, g, xid),
        }
    }

    /// The message as text, for errors and logs.
    pub fn describe(&self) -> String {
        match self {
            BundleMsg::Flow(fm) => describe_flow_mod(fm),
            BundleMsg::Group(cmd, g) => describe_group_mod(*cmd, g),
        }
    }
}

impl From<FlowMod> for BundleMsg {
    fn from(fm: FlowMod) -> Self {
        BundleMsg::Flow(fm)
    }
}

/// A flow_mod as text: the command, then the flow in `ovs-ofctl` syntax.
pub fn describe_flow_mod(fm: &FlowMod) -> String {
    let cmd = match fm.command {
        FlowModCommand::Add => "add",
        FlowModCommand::Modify => "modify",
        FlowModCommand::ModifyStrict => "modify_strict",
        FlowModCommand::Delete => "delete",
        FlowModCommand::DeleteStrict => "delete_strict",
    };
    if !fm.command.is_delete() {
        return format!("{cmd} {}", fm.flow);
    }
    // A delete selects by table, cookie/mask, match (and priority when strict).
    let f = &fm.flow;
    let mut out = format!("{cmd} cookie={:#x}/{:#x}", f.cookie, fm.cookie_mask);
    if f.table == 255 {
        out.push_str(" table=all");
    } else {
        out.push_str(&format!(" table={}", f.table));
    }
    if fm.command == FlowModCommand::DeleteStrict {
        out.push_str(&format!(" priority={}", f.priority));
    }
    if !f.matches.is_any() {
        out.push_str(&format!(" {}", f.matches));
    }
    out
}

/// A group_mod as text.
pub fn describe_group_mod(cmd: GroupModCommand, g: &Group) -> String {
    let cmd = match cmd {
        GroupModCommand::Add => "add",
        GroupModCommand::Modify => "modify",
        GroupModCommand::Delete => "delete",
    };
    format!(
        "group {cmd} group_id={},type={},{} buckets",
        g.id,
        g.kind.name(),
        g.buckets.len()
    )
}

type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

struct State {
    next_xid: u32,
    pending: HashMap<u32, mpsc::UnboundedSender<RawMsg>>,
    closed: Option<String>,
    /// Where flow monitor updates go (see [`OfClient::monitor_flows`]).
    monitor: Option<mpsc::UnboundedSender<Vec<FlowUpdate>>>,
}

/// The connection state the tasks and the client share.
struct Shared {
    peer: String,
    config: OfConfig,
    state: Mutex<State>,
    out: mpsc::UnboundedSender<Vec<u8>>,
    closed_tx: watch::Sender<bool>,
    epoch: Instant,
    last_rx_ms: AtomicU64,
    next_bundle: AtomicU32,
}

/// Xids registered by one call; unregistered on drop.
struct Pending<'a> {
    shared: &'a Shared,
    first: u32,
    n: u32,
    rx: mpsc::UnboundedReceiver<RawMsg>,
}

impl Pending<'_> {
    fn xid(&self, i: usize) -> u32 {
        self.first.wrapping_add(i as u32)
    }

    fn index_of(&self, xid: u32) -> Option<usize> {
        let i = xid.wrapping_sub(self.first);
        (i < self.n).then_some(i as usize)
    }

    /// The next message for one of our xids, bounded by `deadline`.
    async fn recv(&mut self, deadline: Instant, op: &str, xid: u32) -> Result<RawMsg, OfError> {
        match tokio::time::timeout_at(deadline, self.rx.recv()).await {
            Ok(Some(m)) => Ok(m),
            Ok(None) => Err(self.shared.closed_error(op)),
            Err(_) => Err(OfError::Timeout {
                peer: self.shared.peer.clone(),
                op: op.to_string(),
                xid,
                after: self.shared.config.request_timeout,
            }),
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        for i in 0..self.n {
            st.pending.remove(&self.first.wrapping_add(i));
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock only means another thread panicked while holding it; the map is
        // still consistent (every operation on it is a single insert/remove).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn closed_reason(&self) -> String {
        self.lock()
            .closed
            .clone()
            .unwrap_or_else(|| "connection closed".into())
    }

    fn closed_error(&self, op: &str) -> OfError {
        OfError::Closed {
            peer: self.peer.clone(),
            op: op.to_string(),
            reason: self.closed_reason(),
        }
    }

    /// Marks the connection closed (first reason wins), fails every pending call and stops the
    /// tasks.
    fn close(&self, reason: String) {
        let mut st = self.lock();
        if st.closed.is_none() {
            debug!(peer = %self.peer, %reason, "openflow connection closed");
            st.closed = Some(reason);
            st.pending.clear();
            st.monitor = None;
        }
        drop(st);
        self.closed_tx.send_replace(true);
    }

    /// Registers `n` consecutive xids.
    fn register(&self, n: usize, op: &str) -> Result<Pending<'_>, OfError> {
        let n = u32::try_from(n).map_err(|_| OfError::Unexpected {
            peer: self.peer.clone(),
            op: op.to_string(),
            xid: 0,
            got: "too many messages for one call".into(),
        })?;
        let (tx, rx) = mpsc::unbounded_channel();
        let mut st = self.lock();
        if let Some(reason) = &st.closed {
            return Err(OfError::Closed {
                peer: self.peer.clone(),
                op: op.to_string(),
                reason: reason.clone(),
            });
        }
        if st.next_xid.checked_add(n).is_none() {
            st.next_xid = 1;
        }
        let first = st.next_xid;
        st.next_xid += n;
        for i in 0..n {
            st.pending.insert(first + i, tx.clone());
        }
        drop(st);
        Ok(Pending {
            shared: self,
            first,
            n,
            rx,
        })
    }

    fn send(&self, bytes: Vec<u8>, op: &str) -> Result<(), OfError> {
        self.out.send(bytes).map_err(|_| self.closed_error(op))
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.config.request_timeout
    }

    fn touch(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_rx_ms.store(ms, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let now = self.epoch.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_rx_ms.load(Ordering::Relaxed)))
    }

    /// Routes one received message (called by the reader task only).
    fn incoming(&self, msg: RawMsg) {
        trace!(peer = %self.peer, xid = msg.xid, msg_type = msg_type::name(msg.msg_type), len = msg.body.len() + 8, "received");
        if msg.msg_type == msg_type::ECHO_REQUEST {
            match encode_echo_reply(&msg) {
                Ok(reply) => {
                    debug!(peer = %self.peer, xid = msg.xid, "answering echo request");
                    // Only fails when the writer is gone, which means we are closing anyway.
                    let _ = self.out.send(reply);
                }
                Err(e) => warn!(peer = %self.peer, error = %e, "cannot answer echo request"),
            }
            return;
        }
        let tx = self.lock().pending.get(&msg.xid).cloned();
        match tx {
            Some(tx) => {
                // The receiver may have just given up (timeout); nothing to do then.
                let _ = tx.send(msg);
            }
            None if msg.msg_type == msg_type::MULTIPART_REPLY && self.flow_monitor_update(&msg) => {
            }
            None if msg.msg_type == msg_type::ERROR => match SwitchError::decode(&msg.body) {
                Ok(e) => {
                    warn!(peer = %self.peer, xid = msg.xid, error = %e, "unsolicited openflow error")
                }
                Err(e) => {
                    warn!(peer = %self.peer, xid = msg.xid, error = %e, "undecodable openflow error")
                }
            },
            None => debug!(
                peer = %self.peer,
                xid = msg.xid,
                msg_type = msg_type::name(msg.msg_type),
                "ignoring unsolicited message"
            ),
        }
    }

    fn rejected(&self, op: &str, msg: &RawMsg) -> OfError {
        match SwitchError::decode(&msg.body) {
            Ok(error) => OfError::Rejected {
                peer: self.peer.clone(),
                op: op.into(),
                xid: msg.xid,
                error,
            },
            Err(e) => OfError::Decode {
                peer: self.peer.clone(),
                op: op.into(),
                reason: format!("error message: {e}"),
            },
        }
    }

    fn unexpected(&self, op: &str, msg: &RawMsg) -> OfError {
        OfError::Unexpected {
            peer: self.peer.clone(),
            op: op.into(),
            xid: msg.xid,
            got: format!(
                "{} ({} bytes)",
                msg_type::name(msg.msg_type),
                msg.body.len() + 8
            ),
        }
    }

    /// Sends one request and returns the first message with its xid; an `OFPT_ERROR` becomes
    /// [`OfError::Rejected`].
    async fn request(
        &self,
        op: &str,
        build: impl FnOnce(u32) -> Vec<u8>,
    ) -> Result<RawMsg, OfError> {
        let mut p = self.register(1, op)?;
        let xid = p.xid(0);
        let bytes = build(xid);
        debug!(peer = %self.peer, xid, msg_type = msg_type::name(bytes.get(1).copied().unwrap_or(0xff)), op, "sending request");
        self.send(bytes, op)?;
        let msg = p.recv(self.deadline(), op, xid).await?;
        if msg.msg_type == msg_type::ERROR {
            return Err(self.rejected(op, &msg));
        }
        Ok(msg)
    }

    async fn echo(&self) -> Result<Duration, OfError> {
        let start = Instant::now();
        let msg = self
            .request("echo", |xid| encode_echo_request(xid, b"ovs-rs"))
            .await?;
        if msg.msg_type != msg_type::ECHO_REPLY {
            return Err(self.unexpected("echo", &msg));
        }
        Ok(start.elapsed())
    }

    async fn barrier(&self) -> Result<(), OfError> {
        let msg = self.request("barrier", encode_barrier_request).await?;
        if msg.msg_type != msg_type::BARRIER_REPLY {
            return Err(self.unexpected("barrier", &msg));
        }
        Ok(())
    }

    /// Sends `n` messages pipelined, then a barrier, and waits for the barrier reply; returns the
    /// first (lowest-index) rejected message.
    async fn batch(
        &self,
        op: &str,
        n: usize,
        mut encode: impl FnMut(usize, u32) -> Result<Vec<u8>, CodecError>,
        describe: impl Fn(usize) -> String,
    ) -> Result<(), OfError> {
        let mut p = self.register(n + 1, op)?;
        let mut buf = Vec::with_capacity(n * 128 + 8);
        for i in 0..n {
            let msg = encode(i, p.xid(i)).map_err(|source| OfError::Encode {
                index: i,
                what: describe(i),
                source,
            })?;
            buf.extend_from_slice(&msg);
        }
        let barrier_xid = p.xid(n);
        buf.extend_from_slice(&encode_barrier_request(barrier_xid));
        debug!(peer = %self.peer, op, n, first_xid = p.xid(0), barrier_xid, bytes = buf.len(), "sending batch");
        self.send(buf, op)?;
        let deadline = self.deadline();
        let mut first_err: Option<(usize, u32, SwitchError)> = None;
        let mut failed = 0usize;
        loop {
            let msg = p.recv(deadline, op, barrier_xid).await?;
            if msg.xid == barrier_xid {
                match msg.msg_type {
                    msg_type::BARRIER_REPLY => break,
                    msg_type::ERROR => return Err(self.rejected(&format!("{op} barrier"), &msg)),
                    _ => return Err(self.unexpected(op, &msg)),
                }
            }
            let Some(index) = p.index_of(msg.xid) else {
                continue;
            };
            if msg.msg_type != msg_type::ERROR {
                debug!(peer = %self.peer, xid = msg.xid, msg_type = msg_type::name(msg.msg_type), "ignoring reply to a batch message");
                continue;
            }
            let error = match SwitchError::decode(&msg.body) {
                Ok(e) => e,
                Err(e) => {
                    return Err(OfError::Decode {
                        peer: self.peer.clone(),
                        op: op.into(),
                        reason: format!("error for message #{index}: {e}"),
                    })
                }
            };
            debug!(peer = %self.peer, xid = msg.xid, index, %error, "batch message rejected");
            failed += 1;
            if first_err.as_ref().is_none_or(|(i, _, _)| index < *i) {
                first_err = Some((index, msg.xid, error));
            }
        }
        match first_err {
            None => Ok(()),
            Some((index, xid, error)) => Err(OfError::ModRejected {
                peer: self.peer.clone(),
                index,
                total: n,
                xid,
                what: describe(index),
                error,
                more_failed: failed - 1,
            }),
        }
    }

    async fn dump(&self, filter: &DumpFilter) -> Result<Vec<FlowStats>, OfError> {
        let out = self
            .multipart(
                "dump flows",
                |xid| {
                    encode_flow_stats_request(filter.table, filter.cookie, filter.cookie_mask, xid)
                },
                (OFPMP_FLOW, "OFPMP_FLOW"),
                decode_flow_stats_body,
            )
            .await?;
        debug!(peer = %self.peer, ?filter, flows = out.len(), "flow stats received");
        Ok(out)
    }

    /// Hands an unsolicited flow monitor reply to the monitor's receiver; false when `msg` is
    /// not one (or nobody monitors).
    fn flow_monitor_update(&self, msg: &RawMsg) -> bool {
        let Ok((h, body)) = decode_multipart_reply(&msg.body) else {
            return false;
        };
        if h.mp_type != OFPMP_EXPERIMENTER || !is_flow_monitor_body(body) {
            return false;
        }
        let mut st = self.lock();
        let Some(tx) = st.monitor.as_ref() else {
            return false;
        };
        match decode_flow_updates(body) {
            Ok(updates) => {
                if tx.send(updates).is_err() {
                    st.monitor = None;
                }
            }
            Err(e) => {
                warn!(peer = %self.peer, error = %e, "undecodable flow monitor update; reporting a pause");
                let paused = FlowUpdate {
                    event: FlowEvent::Paused,
                    table: None,
                    priority: None,
                    cookie: None,
                    reason: None,
                };
                let _ = tx.send(vec![paused]);
            }
        }
        true
    }

    async fn dump_groups(&self) -> Result<Vec<Group>, OfError> {
        self.multipart(
            "dump groups",
            encode_group_desc_request,
            (OFPMP_GROUP_DESC, "OFPMP_GROUP_DESC"),
            decode_group_desc_body,
        )
        .await
    }

    async fn dump_meters(&self) -> Result<Vec<Meter>, OfError> {
        self.multipart(
            "dump meters",
            encode_meter_config_request,
            (OFPMP_METER_CONFIG, "OFPMP_METER_CONFIG"),
            decode_meter_config_body,
        )
        .await
    }

    /// One multipart request (built by `request` with its xid) and every part of its reply
    /// (`mp_type`, decoded by `decode`), until a part without the "more" flag.
    async fn multipart<T>(
        &self,
        op: &str,
        request: impl FnOnce(u32) -> Vec<u8>,
        (mp_type, mp_name): (u16, &str),
        decode: impl Fn(&[u8]) -> Result<Vec<T>, CodecError>,
    ) -> Result<Vec<T>, OfError> {
        let mut p = self.register(1, op)?;
        let xid = p.xid(0);
        debug!(peer = %self.peer, xid, op, "sending multipart request");
        self.send(request(xid), op)?;
        let deadline = self.deadline();
        let mut out = Vec::new();
        loop {
            let msg = p.recv(deadline, op, xid).await?;
            match msg.msg_type {
                msg_type::ERROR => return Err(self.rejected(op, &msg)),
                msg_type::MULTIPART_REPLY => {}
                _ => return Err(self.unexpected(op, &msg)),
            }
            let decode_err = |reason: String| OfError::Decode {
                peer: self.peer.clone(),
                op: op.into(),
                reason,
            };
            let (h, body) =
                decode_multipart_reply(&msg.body).map_err(|e| decode_err(e.to_string()))?;
            if h.mp_type != mp_type {
                return Err(decode_err(format!(
                    "multipart type {} instead of {mp_name}",
                    h.mp_type
                )));
            }
            out.extend(decode(body).map_err(|e| decode_err(e.to_string()))?);
            if !h.more() {
                return Ok(out);
            }
        }
    }

    async fn bundle_ctrl(&self, op: &str, ctrl: BundleCtrl) -> Result<BundleCtrl, OfError> {
        let msg = self
            .request(op, |xid| bundle::encode_bundle_ctrl(&ctrl, xid))
            .await?;
        self.expect_ctrl(op, &msg, ctrl.ctrl_type.reply())
    }

    fn expect_ctrl(
        &self,
        op: &str,
        msg: &RawMsg,
        want: BundleCtrlType,
    ) -> Result<BundleCtrl, OfError> {
        match bundle::decode_bundle_ctrl(msg) {
            Ok(Some(c)) if c.ctrl_type == want => Ok(c),
            Ok(Some(c)) => Err(OfError::Unexpected {
                peer: self.peer.clone(),
                op: op.into(),
                xid: msg.xid,
                got: format!("bundle control {:?} instead of {want:?}", c.ctrl_type),
            }),
            Ok(None) => Err(self.unexpected(op, msg)),
            Err(e) => Err(OfError::Decode {
                peer: self.peer.clone(),
                op: op.into(),
                reason: e.to_string(),
            }),
        }
    }

    /// Discards bundle `id`, best effort (the bundle is already failing).
    async fn discard(&self, id: u32, flags: u16) {
        let ctrl = BundleCtrl {
            bundle_id: id,
            ctrl_type: BundleCtrlType::DiscardRequest,
            flags,
        };
        let op = format!("bundle {id} discard");
        match self.bundle_ctrl(&op, ctrl).await {
            Ok(_) => debug!(peer = %self.peer, bundle_id = id, "bundle discarded"),
            // BAD_ID: the switch already dropped it, which is what we want.
            Err(e) => {
                debug!(peer = %self.peer, bundle_id = id, error = %e, "bundle discard failed")
            }
        }
    }

    /// Runs one atomic, ordered bundle of `n` messages produced by `encode` (index, xid).
    async fn bundle(
        &self,
        n: usize,
        mut encode: impl FnMut(usize, u32) -> Result<Vec<u8>, CodecError>,
        describe: impl Fn(usize) -> String,
    ) -> Result<(), OfError> {
        if n == 0 {
            return Ok(());
        }
        let id = self.next_bundle.fetch_add(1, Ordering::Relaxed);
        let flags = OFPBF_ATOMIC | OFPBF_ORDERED;
        let op = format!("bundle {id}");
        // Xids: open, n adds, barrier, commit.
        let mut p = self.register(n + 3, &op)?;
        let (open_xid, barrier_xid, commit_xid) = (p.xid(0), p.xid(n + 1), p.xid(n + 2));
        let ctrl = |ctrl_type| BundleCtrl {
            bundle_id: id,
            ctrl_type,
            flags,
        };
        let mut buf = bundle::encode_bundle_ctrl(&ctrl(BundleCtrlType::OpenRequest), open_xid);
        for i in 0..n {
            let inner = encode(i, p.xid(i + 1)).map_err(|source| OfError::Encode {
                index: i,
                what: describe(i),
                source,
            })?;
            let add =
                bundle::encode_bundle_add(id, flags, &inner).map_err(|source| OfError::Frame {
                    index: i,
                    what: describe(i),
                    source,
                })?;
            buf.extend_from_slice(&add);
        }
        buf.extend_from_slice(&encode_barrier_request(barrier_xid));
        debug!(peer = %self.peer, bundle_id = id, n, open_xid, barrier_xid, bytes = buf.len(), "opening bundle");
        self.send(buf, &op)?;

        let deadline = self.deadline();
        let failed = |index: usize, xid: u32, stage, error| OfError::BundleFailed {
            peer: self.peer.clone(),
            bundle_id: id,
            index,
            total: n,
            xid,
            what: describe(index),
            stage,
            error,
        };
        let switch_error = |msg: &RawMsg| {
            SwitchError::decode(&msg.body).map_err(|e| OfError::Decode {
                peer: self.peer.clone(),
                op: op.clone(),
                reason: format!("error message: {e}"),
            })
        };

        // Phase 1: open, add everything, barrier. Errors of adds arrive before the barrier reply.
        let mut open_err = None;
        let mut add_err: Option<(usize, u32, SwitchError)> = None;
        loop {
            let msg = match p.recv(deadline, &op, barrier_xid).await {
                Ok(m) => m,
                Err(e) => {
                    if matches!(e, OfError::Timeout { .. }) {
                        // Best effort; the switch also drops idle bundles on its own.
                        let _ = self.send(
                            bundle::encode_bundle_ctrl(&ctrl(BundleCtrlType::DiscardRequest), 0),
                            &op,
                        );
                    }
                    return Err(e);
                }
            };
            if msg.xid == open_xid {
                if msg.msg_type == msg_type::ERROR {
                    open_err = Some(self.rejected(&format!("{op} open"), &msg));
                } else {
                    self.expect_ctrl(&format!("{op} open"), &msg, BundleCtrlType::OpenReply)?;
                }
            } else if msg.xid == barrier_xid {
                match msg.msg_type {
                    msg_type::BARRIER_REPLY => break,
                    msg_type::ERROR => return Err(self.rejected(&format!("{op} barrier"), &msg)),
                    _ => return Err(self.unexpected(&op, &msg)),
                }
            } else if let Some(i) = p.index_of(msg.xid).filter(|i| (1..=n).contains(i)) {
                if msg.msg_type == msg_type::ERROR {
                    let error = switch_error(&msg)?;
                    debug!(peer = %self.peer, bundle_id = id, index = i - 1, %error, "bundle add rejected");
                    if add_err.as_ref().is_none_or(|(j, _, _)| i - 1 < *j) {
                        add_err = Some((i - 1, msg.xid, error));
                    }
                }
            }
        }
        if let Some(e) = open_err {
            self.discard(id, flags).await;
            return Err(e);
        }
        if let Some((index, xid, error)) = add_err {
            self.discard(id, flags).await;
            return Err(failed(index, xid, BundleStage::Add, error));
        }

        // Phase 2: commit. On failure Open vSwitch first reports the failing message (with the
        // xid of its add), then fails the commit with OFPBFC_MSG_FAILED, and drops the bundle.
        debug!(peer = %self.peer, bundle_id = id, commit_xid, "committing bundle");
        self.send(
            bundle::encode_bundle_ctrl(&ctrl(BundleCtrlType::CommitRequest), commit_xid),
            &op,
        )?;
        let deadline = self.deadline();
        let mut msg_err: Option<(usize, u32, SwitchError)> = None;
        loop {
            let msg = p
                .recv(deadline, &format!("{op} commit"), commit_xid)
                .await?;
            if msg.xid == commit_xid {
                if msg.msg_type != msg_type::ERROR {
                    self.expect_ctrl(&format!("{op} commit"), &msg, BundleCtrlType::CommitReply)?;
                    debug!(peer = %self.peer, bundle_id = id, n, "bundle committed");
                    return Ok(());
                }
                let commit_error = switch_error(&msg)?;
                return Err(match msg_err {
                    Some((index, xid, error)) => failed(index, xid, BundleStage::Commit, error),
                    None => OfError::Rejected {
                        peer: self.peer.clone(),
                        op: format!("{op} commit"),
                        xid: commit_xid,
                        error: commit_error,
                    },
                });
            }
            if let Some(i) = p.index_of(msg.xid).filter(|i| (1..=n).contains(i)) {
                if msg.msg_type == msg_type::ERROR {
                    let error = switch_error(&msg)?;
                    debug!(peer = %self.peer, bundle_id = id, index = i - 1, %error, "bundle message failed at commit");
                    if msg_err.is_none() {
                        msg_err = Some((i - 1, msg.xid, error));
                    }
                }
            }
        }
    }
}

/// Waits until the connection is marked closed.
async fn closed(rx: &mut watch::Receiver<bool>) {
    // An error means the sender is gone, which also means closed.
    let _ = rx.wait_for(|c| *c).await;
}

async fn reader_task(
    shared: Arc<Shared>,
    mut rd: BoxRead,
    mut frames: FrameBuffer,
    mut closed_rx: watch::Receiver<bool>,
) {
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        loop {
            match frames.next_msg() {
                Ok(Some(msg)) => shared.incoming(msg),
                Ok(None) => break,
                Err(e) => {
                    shared.close(format!("framing error: {e}"));
                    return;
                }
            }
        }
        let read = tokio::select! {
            _ = closed(&mut closed_rx) => return,
            r = rd.read(&mut chunk) => r,
        };
        match read {
            Ok(0) => {
                shared.close("the switch closed the connection".into());
                return;
            }
            Ok(n) => {
                shared.touch();
                frames.extend(&chunk[..n]);
            }
            Err(e) => {
                shared.close(format!("read failed: {e}"));
                return;
            }
        }
    }
}

async fn writer_task(
    shared: Arc<Shared>,
    mut wr: BoxWrite,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    mut closed_rx: watch::Receiver<bool>,
) {
    loop {
        let mut buf = tokio::select! {
            _ = closed(&mut closed_rx) => break,
            m = rx.recv() => match m {
                Some(m) => m,
                None => break,
            },
        };
        while buf.len() < (1 << 20) {
            match rx.try_recv() {
                Ok(m) => buf.extend_from_slice(&m),
                Err(_) => break,
            }
        }
        let res = tokio::select! {
            _ = closed(&mut closed_rx) => break,
            r = async {
                wr.write_all(&buf).await?;
                wr.flush().await
            } => r,
        };
        if let Err(e) = res {
            shared.close(format!("write failed: {e}"));
            break;
        }
    }
}

async fn keepalive_task(
    shared: Arc<Shared>,
    interval: Duration,
    timeout: Duration,
    mut closed_rx: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = closed(&mut closed_rx) => return,
            _ = tokio::time::sleep(interval) => {}
        }
        if shared.idle_for() < interval {
            continue;
        }
        let probe = tokio::time::timeout(timeout, shared.echo());
        let res = tokio::select! {
            _ = closed(&mut closed_rx) => return,
            r = probe => r,
        };
        match res {
            Ok(Ok(rtt)) => trace!(peer = %shared.peer, ?rtt, "echo reply"),
            Err(_) | Ok(Err(OfError::Timeout { .. })) => {
                warn!(peer = %shared.peer, ?timeout, "no echo reply: closing the connection");
                shared.close(format!(
                    "no echo reply within {timeout:?}: connection presumed dead"
                ));
                return;
            }
            Ok(Err(e)) => {
                debug!(peer = %shared.peer, error = %e, "keepalive stopping");
                return;
            }
        }
    }
}

/// The task handles; dropping the last client closes the connection.
struct Inner {
    shared: Arc<Shared>,
    datapath_id: u64,
    n_tables: u8,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.close("the client was dropped".into());
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OfClient")
            .field("peer", &self.shared.peer)
            .field("datapath_id", &format_args!("{:016x}", self.datapath_id))
            .finish()
    }
}

/// An OpenFlow 1.3 connection to one switch. Cheap to clone (clones share the connection); all
/// methods take `&self` and may run concurrently. The connection closes when the last clone is
/// dropped or [`OfClient::close`] is called.
#[derive(Clone, Debug)]
pub struct OfClient {
    inner: Arc<Inner>,
}

const STAGE_CONNECT: u8 = 0;
const STAGE_HELLO: u8 = 1;
const STAGE_FEATURES: u8 = 2;

fn stage_name(stage: u8) -> &'static str {
    match stage {
        STAGE_CONNECT => "opening the socket",
        STAGE_HELLO => "waiting for the switch's hello",
        _ => "waiting for the features reply",
    }
}

async fn read_msg(
    rd: &mut BoxRead,
    frames: &mut FrameBuffer,
    target: &str,
) -> Result<RawMsg, OfError> {
    let hs = |reason: String| OfError::Handshake {
        target: target.to_string(),
        reason,
    };
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(m) = frames.next_msg().map_err(|e| hs(e.to_string()))? {
            return Ok(m);
        }
        match rd.read(&mut chunk).await {
            Ok(0) => return Err(hs("the switch closed the connection".into())),
            Ok(n) => frames.extend(&chunk[..n]),
            Err(e) => return Err(hs(format!("read failed: {e}"))),
        }
    }
}

/// HELLO exchange and FEATURES_REQUEST, on the raw halves before the tasks start.
async fn handshake(
    rd: &mut BoxRead,
    wr: &mut BoxWrite,
    frames: &mut FrameBuffer,
    target: &str,
    stage: &AtomicU8,
) -> Result<wire::Features, OfError> {
    let hs = |reason: String| OfError::Handshake {
        target: target.to_string(),
        reason,
    };
    let rejected = |msg: &RawMsg| match SwitchError::decode(&msg.body) {
        Ok(error) => OfError::HandshakeRejected {
            target: target.to_string(),
            error,
        },
        Err(e) => hs(format!("undecodable error message: {e}")),
    };
    stage.store(STAGE_HELLO, Ordering::Relaxed);
    wr.write_all(&encode_hello(0))
        .await
        .map_err(|e| hs(format!("sending hello: {e}")))?;
    let hello = read_msg(rd, frames, target).await?;
    match hello.msg_type {
        msg_type::HELLO => {}
        msg_type::ERROR => return Err(rejected(&hello)),
        t => return Err(hs(format!("expected HELLO, got {}", msg_type::name(t)))),
    }
    let offered = hello_versions(&hello).map_err(|e| hs(e.to_string()))?;
    debug!(target, versions = %version_names(&offered), "switch hello");
    if !offered.contains(&OFP13_VERSION) {
        return Err(OfError::UnsupportedVersion {
            target: target.to_string(),
            offered: version_names(&offered),
        });
    }
    stage.store(STAGE_FEATURES, Ordering::Relaxed);
    const FEATURES_XID: u32 = 0;
    wr.write_all(&encode_features_request(FEATURES_XID))
        .await
        .map_err(|e| hs(format!("sending features request: {e}")))?;
    loop {
        let msg = read_msg(rd, frames, target).await?;
        match msg.msg_type {
            msg_type::FEATURES_REPLY => {
                return decode_features_reply(&msg.body).map_err(|e| hs(e.to_string()));
            }
            msg_type::ERROR => return Err(rejected(&msg)),
            msg_type::ECHO_REQUEST => {
                let reply = encode_echo_reply(&msg).map_err(|e| hs(e.to_string()))?;
                wr.write_all(&reply)
                    .await
                    .map_err(|e| hs(format!("answering echo: {e}")))?;
            }
            t => debug!(
                target,
                msg_type = msg_type::name(t),
                "ignoring message during handshake"
            ),
        }
    }
}

impl OfClient {
    /// Connects to `target` (`unix:PATH`, `tcp:HOST:PORT` or a path) with default timeouts.
    pub async fn connect(target: &str) -> Result<OfClient, OfError> {
        Self::connect_with(target, OfConfig::default()).await
    }

    /// Connects to `target`: opens the socket, exchanges HELLO (OpenFlow 1.3 only) and asks for
    /// the features (datapath id), all within `config.connect_timeout`.
    pub async fn connect_with(target: &str, config: OfConfig) -> Result<OfClient, OfError> {
        let parsed = Target::parse(target)?;
        let name = parsed.to_string();
        let stage = AtomicU8::new(STAGE_CONNECT);
        let attempt = async {
            let conn_err = |source| OfError::Connect {
                target: name.clone(),
                source,
            };
            let (rd, wr): (BoxRead, BoxWrite) = match &parsed {
                Target::Unix(path) => {
                    let s = tokio::net::UnixStream::connect(path)
                        .await
                        .map_err(conn_err)?;
                    let (r, w) = s.into_split();
                    (Box::new(r), Box::new(w))
                }
                Target::Tcp { host, port } => {
                    let s = tokio::net::TcpStream::connect((host.as_str(), *port))
                        .await
                        .map_err(conn_err)?;
                    // Small control messages: do not wait for Nagle.
                    s.set_nodelay(true).map_err(conn_err)?;
                    let (r, w) = s.into_split();
                    (Box::new(r), Box::new(w))
                }
            };
            Self::start(rd, wr, name.clone(), config, &stage).await
        };
        match tokio::time::timeout(config.connect_timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err(OfError::ConnectTimeout {
                target: name.clone(),
                after: config.connect_timeout,
                stage: stage_name(stage.load(Ordering::Relaxed)),
            }),
        }
    }

    /// Runs the handshake over an already open stream (a socket pair in tests, a proxied
    /// connection...) named `name` in errors, within `config.connect_timeout`.
    pub async fn from_stream<S>(
        stream: S,
        name: &str,
        config: OfConfig,
    ) -> Result<OfClient, OfError>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (r, w) = tokio::io::split(stream);
        let stage = AtomicU8::new(STAGE_HELLO);
        let attempt = Self::start(Box::new(r), Box::new(w), name.to_string(), config, &stage);
        match tokio::time::timeout(config.connect_timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err(OfError::ConnectTimeout {
                target: name.to_string(),
                after: config.connect_timeout,
                stage: stage_name(stage.load(Ordering::Relaxed)),
            }),
        }
    }

    async fn start(
        mut rd: BoxRead,
        mut wr: BoxWrite,
        target: String,
        config: OfConfig,
        stage: &AtomicU8,
    ) -> Result<OfClient, OfError> {
        let mut frames = FrameBuffer::new();
        let features = handshake(&mut rd, &mut wr, &mut frames, &target, stage).await?;
        let peer = format!("{target} (dpid {:016x})", features.datapath_id);
        debug!(%peer, n_tables = features.n_tables, "openflow connection established");
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let (closed_tx, closed_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            peer,
            config,
            state: Mutex::new(State {
                next_xid: 1,
                pending: HashMap::new(),
                closed: None,
                monitor: None,
            }),
            out: out_tx,
            closed_tx,
            epoch: Instant::now(),
            last_rx_ms: AtomicU64::new(0),
            next_bundle: AtomicU32::new(1),
        });
        let mut tasks = vec![
            tokio::spawn(reader_task(shared.clone(), rd, frames, closed_rx.clone())),
            tokio::spawn(writer_task(shared.clone(), wr, out_rx, closed_rx.clone())),
        ];
        if let Some(interval) = config.echo_interval {
            tasks.push(tokio::spawn(keepalive_task(
                shared.clone(),
                interval,
                config.echo_timeout,
                closed_rx,
            )));
        }
        Ok(OfClient {
            inner: Arc::new(Inner {
                shared,
                datapath_id: features.datapath_id,
                n_tables: features.n_tables,
                tasks,
            }),
        })
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// The switch's datapath id (from the features reply).
    pub fn datapath_id(&self) -> u64 {
        self.inner.datapath_id
    }

    /// Number of flow tables the switch reports.
    pub fn n_tables(&self) -> u8 {
        self.inner.n_tables
    }

    /// The switch as named in errors and logs: target and datapath id.
    pub fn peer(&self) -> &str {
        &self.shared().peer
    }

    /// Why the connection is closed, or `None` while it is open.
    pub fn closed_reason(&self) -> Option<String> {
        self.shared().lock().closed.clone()
    }

    /// Closes the connection; pending and later calls fail with [`OfError::Closed`].
    pub fn close(&self) {
        self.shared().close("closed by the client".into());
    }

    /// Round-trips an echo request; returns the round-trip time.
    pub async fn echo(&self) -> Result<Duration, OfError> {
        self.shared().echo().await
    }

    /// Sends a barrier and waits for its reply: every message sent before it has been processed.
    pub async fn barrier(&self) -> Result<(), OfError> {
        self.shared().barrier().await
    }

    /// Applies one flow_mod and waits for it (barrier).
    pub async fn flow_mod(&self, fm: FlowMod) -> Result<(), OfError> {
        self.flow_mods(std::slice::from_ref(&fm)).await
    }

    /// Sends every flow_mod pipelined, then one barrier; returns Ok when the switch accepted all,
    /// or the first rejected one ([`OfError::ModRejected`], with its index and flow). Not
    /// atomic: the others are applied regardless. Nothing is sent if one fails to encode.
    pub async fn flow_mods(&self, fms: &[FlowMod]) -> Result<(), OfError> {
        self.shared()
            .batch(
                "flow_mods",
                fms.len(),
                |i, xid| encode_flow_mod(&fms[i], xid),
                |i| describe_flow_mod(&fms[i]),
            )
            .await
    }

    /// Adds `flows` (as [`OfClient::flow_mods`] with `OFPFC_ADD`).
    pub async fn add_flows(&self, flows: &[Flow]) -> Result<(), OfError> {
        self.shared()
            .batch(
                "add flows",
                flows.len(),
                |i, xid| encode_flow_mod(&FlowMod::add(flows[i].clone()), xid),
                |i| format!("add {}", flows[i]),
            )
            .await
    }

    /// Deletes every flow, in every table, whose cookie equals `cookie` under `mask` (a mask of
    /// 0 deletes every flow). Idempotent: deleting nothing is not an error.
    pub async fn delete_by_cookie(&self, cookie: u64, mask: u64) -> Result<(), OfError> {
        self.flow_mod(FlowMod::delete_cookie(cookie, mask)).await
    }

    /// Adds, modifies or deletes a group and waits for it (barrier).
    pub async fn group_mod(&self, command: GroupModCommand, group: &Group) -> Result<(), OfError> {
        self.shared()
            .batch(
                "group_mod",
                1,
                |_, xid| encode_group_mod(command, group, xid),
                |_| describe_group_mod(command, group),
            )
            .await
    }

    /// Adds, modifies or deletes a meter and waits for it (barrier). Meter mods cannot go into a
    /// bundle on Open vSwitch: add a meter before the flows that use it, delete it after them.
    pub async fn meter_mod(&self, command: MeterModCommand, meter: &Meter) -> Result<(), OfError> {
        self.shared()
            .batch(
                "meter_mod",
                1,
                |_, xid| encode_meter_mod(command, meter, xid),
                |_| format!("{} {meter}", command.verb()),
            )
            .await
    }

    /// Every group (`OFPMP_GROUP_DESC`, all reply parts), sorted by id.
    pub async fn dump_groups(&self) -> Result<Vec<Group>, OfError> {
        let mut groups = self.shared().dump_groups().await?;
        groups.sort_by_key(|g| g.id);
        Ok(groups)
    }

    /// Every meter's configuration (`OFPMP_METER_CONFIG`, all reply parts), sorted by id.
    pub async fn dump_meters(&self) -> Result<Vec<Meter>, OfError> {
        let mut meters = self.shared().dump_meters().await?;
        meters.sort_by_key(|m| m.id);
        Ok(meters)
    }

    /// Resolves when the connection has closed (for whatever reason; at once if it already
    /// has), so an owner can reconnect without polling.
    pub async fn wait_closed(&self) {
        let mut rx = self.shared().closed_tx.subscribe();
        closed(&mut rx).await;
    }

    /// Starts monitoring every flow of the switch: adds, deletes and modifications made by
    /// other connections (and by the switch itself, such as flows removed with their meter)
    /// in full, changes made through this client abbreviated ([`FlowEvent::Abbreviated`]),
    /// delivered in batches as they arrive, until the connection closes (then the receiver
    /// ends). A second call replaces the first receiver. See [`super::monitor`].
    pub async fn monitor_flows(&self) -> Result<mpsc::UnboundedReceiver<Vec<FlowUpdate>>, OfError> {
        let shared = self.shared();
        let (tx, rx) = mpsc::unbounded_channel();
        shared.lock().monitor = Some(tx);
        let flags = NXFMF_ADD | NXFMF_DELETE | NXFMF_MODIFY;
        let initial = shared
            .multipart(
                "monitor flows",
                |xid| encode_flow_monitor_request(xid, 1, flags),
                (OFPMP_EXPERIMENTER, "ONFST13_FLOW_MONITOR"),
                decode_flow_updates,
            )
            .await;
        if let Err(e) = initial {
            shared.lock().monitor = None;
            return Err(e);
        }
        Ok(rx)
    }

    /// The flows the filter selects, with their counters (every multipart reply part).
    pub async fn dump_flow_stats(&self, filter: &DumpFilter) -> Result<Vec<FlowStats>, OfError> {
        self.shared().dump(filter).await
    }

    /// The flows the filter selects.
    pub async fn dump_flows(&self, filter: &DumpFilter) -> Result<Vec<Flow>, OfError> {
        Ok(self
            .dump_flow_stats(filter)
            .await?
            .into_iter()
            .map(|s| s.flow)
            .collect())
    }

    /// Applies `msgs` atomically and in order, in one ONF bundle: open (atomic, ordered), add
    /// every message, commit. Either every message takes effect at once (other connections never
    /// see a partial state) or none does, and the error ([`OfError::BundleFailed`]) says which
    /// message failed, with its index, text and the switch's error. An empty bundle is a no-op.
    ///
    /// If the connection closes or the call times out before the commit reply, the outcome of a
    /// commit already sent is unknown (Open vSwitch discards uncommitted bundles when the
    /// connection closes): the caller should dump or replay its desired state.
    pub async fn bundle(&self, msgs: &[BundleMsg]) -> Result<(), OfError> {
        self.shared()
            .bundle(
                msgs.len(),
                |i, xid| msgs[i].encode(xid),
                |i| msgs[i].describe(),
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openflow::wire::{be32, errors};
    use tokio::io::{DuplexStream, ReadHalf, WriteHalf};

    /// A scripted switch on the other end of an in-memory pipe.
    struct FakeSwitch {
        rd: ReadHalf<DuplexStream>,
        wr: WriteHalf<DuplexStream>,
        frames: FrameBuffer,
    }

    impl FakeSwitch {
        fn new(stream: DuplexStream) -> Self {
            let (rd, wr) = tokio::io::split(stream);
            FakeSwitch {
                rd,
                wr,
                frames: FrameBuffer::new(),
            }
        }

        async fn recv(&mut self) -> RawMsg {
            let mut chunk = [0u8; 4096];
            loop {
                if let Some(m) = self.frames.next_msg().unwrap() {
                    return m;
                }
                let n = tokio::time::timeout(Duration::from_secs(5), self.rd.read(&mut chunk))
                    .await
                    .expect("fake switch: nothing received within 5 s")
                    .unwrap();
                assert!(n > 0, "fake switch: client closed the connection");
                self.frames.extend(&chunk[..n]);
            }
        }

        async fn recv_type(&mut self, t: u8) -> RawMsg {
            let m = self.recv().await;
            assert_eq!(
                m.msg_type,
                t,
                "fake switch expected {} got {m:?}",
                msg_type::name(t)
            );
            m
        }

        async fn send(&mut self, bytes: &[u8]) {
            self.wr.write_all(bytes).await.unwrap();
        }

        async fn send_msg(&mut self, t: u8, xid: u32, body: &[u8]) {
            self.send(&wire::encode_msg(t, xid, body).unwrap()).await;
        }

        async fn send_error(&mut self, xid: u32, err_type: u16, code: u16, exp: Option<u32>) {
            let e = SwitchError {
                err_type,
                code,
                experimenter: exp,
                data: vec![],
            };
            self.send_msg(msg_type::ERROR, xid, &e.encode_body()).await;
        }

        /// Hello offering 1.0 to 1.5 as Open vSwitch 3.1 does, then the features reply.
        async fn handshake(&mut self) {
            self.send(&[6, 0, 0, 16, 0, 0, 0, 1, 0, 1, 0, 8, 0, 0, 0, 0x7e])
                .await;
            let hello = self.recv_type(msg_type::HELLO).await;
            assert_eq!(hello_versions(&hello).unwrap(), vec![4]);
            let req = self.recv_type(msg_type::FEATURES_REQUEST).await;
            let mut body = vec![0u8; 24];
            body[..8].copy_from_slice(&0xabu64.to_be_bytes());
            body[12] = 254;
            self.send_msg(msg_type::FEATURES_REPLY, req.xid, &body)
                .await;
        }
    }

    fn quick() -> OfConfig {
        OfConfig {
            connect_timeout: Duration::from_millis(500),
            request_timeout: Duration::from_millis(500),
            echo_interval: None,
            echo_timeout: Duration::from_millis(200),
        }
    }

    async fn connected(config: OfConfig) -> (OfClient, FakeSwitch) {
        let (a, b) = tokio::io::duplex(1 << 20);
        let mut sw = FakeSwitch::new(b);
        let (client, ()) = tokio::join!(OfClient::from_stream(a, "fake", config), sw.handshake());
        (client.unwrap(), sw)
    }

    fn dummy(i: usize, xid: u32) -> Result<Vec<u8>, CodecError> {
        Ok(wire::encode_msg(msg_type::FLOW_MOD, xid, &[i as u8; 8]).unwrap())
    }

    #[tokio::test]
    async fn handshake_learns_the_datapath_id() {
        let (client, _sw) = connected(quick()).await;
        assert_eq!(client.datapath_id(), 0xab);
        assert_eq!(client.n_tables(), 254);
        assert_eq!(client.peer(), "fake (dpid 00000000000000ab)");
        assert_eq!(client.closed_reason(), None);
    }

    #[tokio::test]
    async fn switch_echo_requests_are_answered_and_barriers_matched() {
        let (client, mut sw) = connected(quick()).await;
        sw.send_msg(msg_type::ECHO_REQUEST, 77, b"hi").await;
        let reply = sw.recv_type(msg_type::ECHO_REPLY).await;
        assert_eq!((reply.xid, reply.body.as_slice()), (77, &b"hi"[..]));
        let (res, ()) = tokio::join!(client.barrier(), async {
            let b = sw.recv_type(msg_type::BARRIER_REQUEST).await;
            // Something unrelated first, then the reply.
            sw.send_msg(msg_type::PORT_STATUS, 0, &[0; 8]).await;
            sw.send_msg(msg_type::BARRIER_REPLY, b.xid, &[]).await;
        });
        res.unwrap();
    }

    #[tokio::test]
    async fn batch_errors_name_the_first_failed_message() {
        let (client, mut sw) = connected(quick()).await;
        let sh = client.shared();
        let (res, ()) = tokio::join!(
            sh.batch("test batch", 5, dummy, |i| format!("msg {i}")),
            async {
                let mut xids = Vec::new();
                for _ in 0..5 {
                    xids.push(sw.recv_type(msg_type::FLOW_MOD).await.xid);
                }
                let b = sw.recv_type(msg_type::BARRIER_REQUEST).await;
                sw.send_error(
                    xids[3],
                    errors::OFPET_BAD_MATCH,
                    errors::OFPBMC_BAD_PREREQ,
                    None,
                )
                .await;
                sw.send_error(
                    xids[1],
                    errors::OFPET_BAD_ACTION,
                    errors::OFPBAC_BAD_OUT_GROUP,
                    None,
                )
                .await;
                sw.send_msg(msg_type::BARRIER_REPLY, b.xid, &[]).await;
            }
        );
        let err = res.unwrap_err();
        match &err {
            OfError::ModRejected {
                index,
                total,
                what,
                error,
                more_failed,
                ..
            } => {
                assert_eq!((*index, *total, *more_failed), (1, 5, 1));
                assert_eq!(what, "msg 1");
                assert_eq!(error.code_name(), Some("OFPBAC_BAD_OUT_GROUP"));
            }
            other => panic!("unexpected {other}"),
        }
        let text = err.to_string();
        assert!(text.contains("message #1 of 5"), "{text}");
        assert!(text.contains("`msg 1`"), "{text}");
        assert!(text.contains("OFPBAC_BAD_OUT_GROUP"), "{text}");
        assert!(text.contains("1 more"), "{text}");
        // Still usable, and the batch's xids are no longer registered.
        assert!(sh.lock().pending.is_empty());
        let (res, ()) = tokio::join!(client.barrier(), async {
            let b = sw.recv_type(msg_type::BARRIER_REQUEST).await;
            sw.send_msg(msg_type::BARRIER_REPLY, b.xid, &[]).await;
        });
        res.unwrap();
    }

    #[tokio::test]
    async fn batches_are_pipelined_in_one_write() {
        let (client, mut sw) = connected(quick()).await;
        let n = 2000;
        let (res, ()) = tokio::join!(
            client.shared().batch("big", n, dummy, |i| i.to_string()),
            async {
                let first = sw.recv_type(msg_type::FLOW_MOD).await.xid;
                // Everything arrives without any reply from us: nothing waits per message.
                for i in 1..n {
                    assert_eq!(sw.recv_type(msg_type::FLOW_MOD).await.xid, first + i as u32);
                }
                let b = sw.recv_type(msg_type::BARRIER_REQUEST).await;
                sw.send_msg(msg_type::BARRIER_REPLY, b.xid, &[]).await;
            }
        );
        res.unwrap();
    }

    #[tokio::test]
    async fn closing_mid_request_fails_promptly() {
        let (client, mut sw) = connected(quick()).await;
        let start = Instant::now();
        let (res, ()) = tokio::join!(client.barrier(), async {
            sw.recv_type(msg_type::BARRIER_REQUEST).await;
            drop(sw);
        });
        let err = res.unwrap_err();
        assert!(matches!(err, OfError::Closed { .. }), "{err}");
        assert!(
            err.to_string().contains("the switch closed the connection"),
            "{err}"
        );
        assert!(start.elapsed() < Duration::from_millis(400));
        // Later calls fail at once.
        let err = client.echo().await.unwrap_err();
        assert!(matches!(err, OfError::Closed { .. }), "{err}");
    }

    #[tokio::test]
    async fn unanswered_requests_time_out() {
        let (client, mut sw) = connected(quick()).await;
        let start = Instant::now();
        let (res, _) = tokio::join!(client.barrier(), sw.recv_type(msg_type::BARRIER_REQUEST));
        let err = res.unwrap_err();
        assert!(matches!(err, OfError::Timeout { .. }), "{err}");
        assert!(start.elapsed() >= Duration::from_millis(500));
        assert!(start.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn a_silent_switch_fails_the_handshake_in_time() {
        let (a, _b) = tokio::io::duplex(1 << 16);
        let start = Instant::now();
        let err = OfClient::from_stream(a, "silent", quick())
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                OfError::ConnectTimeout {
                    stage: "waiting for the switch's hello",
                    ..
                }
            ),
            "{err}"
        );
        assert!(start.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn a_switch_without_1_3_is_refused_clearly() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let mut sw = FakeSwitch::new(b);
        let (res, ()) = tokio::join!(OfClient::from_stream(a, "old", quick()), async {
            sw.send(&[1, 0, 0, 8, 0, 0, 0, 1]).await;
        });
        let err = res.unwrap_err();
        assert!(matches!(err, OfError::UnsupportedVersion { .. }), "{err}");
        assert!(err.to_string().contains("it offers 1.0"), "{err}");

        let (a, b) = tokio::io::duplex(1 << 16);
        let mut sw = FakeSwitch::new(b);
        let (res, ()) = tokio::join!(OfClient::from_stream(a, "picky", quick()), async {
            let mut body = vec![0, 0, 0, 0];
            body.extend_from_slice(b"no common version");
            sw.send_msg(msg_type::ERROR, 0, &body).await;
        });
        let err = res.unwrap_err();
        assert!(matches!(err, OfError::HandshakeRejected { .. }), "{err}");
        assert!(err.to_string().contains("OFPHFC_INCOMPATIBLE"), "{err}");
        assert!(err.to_string().contains("no common version"), "{err}");
    }

    #[tokio::test]
    async fn a_missed_echo_closes_the_connection() {
        let config = OfConfig {
            echo_interval: Some(Duration::from_millis(100)),
            ..quick()
        };
        let (client, mut sw) = connected(config).await;
        let echo = sw.recv_type(msg_type::ECHO_REQUEST).await;
        assert_eq!(echo.version, OFP13_VERSION);
        // No reply: within interval + timeout (+ slack) the connection is declared dead.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let reason = client.closed_reason().expect("connection should be closed");
        assert!(reason.contains("no echo reply"), "{reason}");
        let err = client.barrier().await.unwrap_err();
        assert!(err.to_string().contains("no echo reply"), "{err}");
    }

    #[tokio::test]
    async fn answered_echoes_keep_the_connection() {
        let config = OfConfig {
            echo_interval: Some(Duration::from_millis(50)),
            ..quick()
        };
        let (client, mut sw) = connected(config).await;
        for _ in 0..4 {
            let echo = sw.recv_type(msg_type::ECHO_REQUEST).await;
            sw.send_msg(msg_type::ECHO_REPLY, echo.xid, &echo.body)
                .await;
        }
        assert_eq!(client.closed_reason(), None);
    }

    async fn expect_bundle_ctrl(sw: &mut FakeSwitch, want: BundleCtrlType) -> (u32, BundleCtrl) {
        let m = sw.recv_type(msg_type::EXPERIMENTER).await;
        let c = bundle::decode_bundle_ctrl(&m)
            .unwrap()
            .expect("bundle control");
        assert_eq!(c.ctrl_type, want);
        assert_eq!(c.flags, OFPBF_ATOMIC | OFPBF_ORDERED);
        (m.xid, c)
    }

    async fn reply_ctrl(sw: &mut FakeSwitch, xid: u32, c: BundleCtrl) {
        let reply = BundleCtrl {
            ctrl_type: c.ctrl_type.reply(),
            ..c
        };
        sw.send(&bundle::encode_bundle_ctrl(&reply, xid)).await;
    }

    /// Receives open, `n` adds and the barrier; checks the adds; returns (open xid, ctrl, add xids).
    async fn recv_bundle(sw: &mut FakeSwitch, n: usize) -> (u32, BundleCtrl, Vec<u32>, u32) {
        let (open_xid, open) = expect_bundle_ctrl(sw, BundleCtrlType::OpenRequest).await;
        let mut adds = Vec::new();
        for i in 0..n {
            let m = sw.recv_type(msg_type::EXPERIMENTER).await;
            assert_eq!(be32(&m.body, 4), bundle::ONFT_BUNDLE_ADD_MESSAGE);
            assert_eq!(be32(&m.body, 8), open.bundle_id);
            let inner = &m.body[16..];
            assert_eq!(inner[1], msg_type::FLOW_MOD);
            assert_eq!(be32(inner, 4), m.xid, "inner xid must equal the add's xid");
            assert_eq!(inner[8], i as u8);
            adds.push(m.xid);
        }
        let b = sw.recv_type(msg_type::BARRIER_REQUEST).await;
        (open_xid, open, adds, b.xid)
    }

    #[tokio::test]
    async fn bundle_commits() {
        let (client, mut sw) = connected(quick()).await;
        let mut ids = Vec::new();
        for _ in 0..2 {
            let (res, ()) =
                tokio::join!(client.shared().bundle(3, dummy, |i| i.to_string()), async {
                    let (open_xid, open, _adds, barrier) = recv_bundle(&mut sw, 3).await;
                    ids.push(open.bundle_id);
                    reply_ctrl(&mut sw, open_xid, open).await;
                    sw.send_msg(msg_type::BARRIER_REPLY, barrier, &[]).await;
                    let (xid, c) = expect_bundle_ctrl(&mut sw, BundleCtrlType::CommitRequest).await;
                    assert_eq!(c.bundle_id, open.bundle_id);
                    reply_ctrl(&mut sw, xid, c).await;
                });
            res.unwrap();
        }
        assert_ne!(ids[0], ids[1], "bundle ids are unique per connection");
    }

    #[tokio::test]
    async fn bundle_commit_failure_names_the_failing_message() {
        let (client, mut sw) = connected(quick()).await;
        let (res, ()) = tokio::join!(
            client.shared().bundle(3, dummy, |i| format!("flow {i}")),
            async {
                let (open_xid, open, adds, barrier) = recv_bundle(&mut sw, 3).await;
                reply_ctrl(&mut sw, open_xid, open).await;
                sw.send_msg(msg_type::BARRIER_REPLY, barrier, &[]).await;
                let (xid, _) = expect_bundle_ctrl(&mut sw, BundleCtrlType::CommitRequest).await;
                // As Open vSwitch does: the message's error, then OFPBFC_MSG_FAILED for the commit.
                sw.send_error(
                    adds[2],
                    errors::OFPET_BAD_ACTION,
                    errors::OFPBAC_BAD_OUT_GROUP,
                    None,
                )
                .await;
                sw.send_error(
                    xid,
                    errors::OFPET_EXPERIMENTER,
                    2313,
                    Some(wire::ONF_EXPERIMENTER),
                )
                .await;
            }
        );
        let err = res.unwrap_err();
        match &err {
            OfError::BundleFailed {
                index,
                total,
                what,
                stage,
                error,
                ..
            } => {
                assert_eq!((*index, *total, *stage), (2, 3, BundleStage::Commit));
                assert_eq!(what, "flow 2");
                assert_eq!(error.code_name(), Some("OFPBAC_BAD_OUT_GROUP"));
            }
            other => panic!("unexpected {other}"),
        }
        assert!(
            err.to_string().contains("was not applied: message #2 of 3"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn bundle_add_failure_discards_the_bundle() {
        let (client, mut sw) = connected(quick()).await;
        let (res, ()) = tokio::join!(
            client.shared().bundle(2, dummy, |i| format!("flow {i}")),
            async {
                let (open_xid, open, adds, barrier) = recv_bundle(&mut sw, 2).await;
                reply_ctrl(&mut sw, open_xid, open).await;
                sw.send_error(
                    adds[0],
                    errors::OFPET_BAD_MATCH,
                    errors::OFPBMC_BAD_PREREQ,
                    None,
                )
                .await;
                sw.send_msg(msg_type::BARRIER_REPLY, barrier, &[]).await;
                // No commit: a discard instead.
                let (xid, c) = expect_bundle_ctrl(&mut sw, BundleCtrlType::DiscardRequest).await;
                assert_eq!(c.bundle_id, open.bundle_id);
                reply_ctrl(&mut sw, xid, c).await;
            }
        );
        match res.unwrap_err() {
            OfError::BundleFailed {
                index,
                stage,
                error,
                ..
            } => {
                assert_eq!((index, stage), (0, BundleStage::Add));
                assert_eq!(error.code_name(), Some("OFPBMC_BAD_PREREQ"));
            }
            other => panic!("unexpected {other}"),
        }
    }

    #[test]
    fn futures_are_send() {
        fn send<T: Send>(_: &T) {}
        fn check(c: &OfClient, fms: &[FlowMod], msgs: &[BundleMsg], g: &Group) {
            send(&c.barrier());
            send(&c.echo());
            send(&c.flow_mods(fms));
            send(&c.add_flows(&[]));
            send(&c.delete_by_cookie(1, 1));
            send(&c.group_mod(GroupModCommand::Add, g));
            send(&c.dump_flows(&DumpFilter::all()));
            send(&c.bundle(msgs));
            send(&OfClient::connect("x"));
        }
        let _ = check;
        fn sync<T: Send + Sync>() {}
        sync::<OfClient>();
    }

    #[test]
    fn targets_parse_like_ovs() {
        assert_eq!(
            Target::parse("unix:/run/openvswitch/br0.mgmt").unwrap(),
            Target::Unix("/run/openvswitch/br0.mgmt".into())
        );
        assert_eq!(
            Target::parse("/tmp/br0.mgmt").unwrap(),
            Target::Unix("/tmp/br0.mgmt".into())
        );
        assert_eq!(
            Target::parse("tcp:127.0.0.1:6653").unwrap(),
            Target::Tcp {
                host: "127.0.0.1".into(),
                port: 6653
            }
        );
        let v6 = Target::parse("tcp:[::1]:6653").unwrap();
        assert_eq!(
            v6,
            Target::Tcp {
                host: "::1".into(),
                port: 6653
            }
        );
        assert_eq!(v6.to_string(), "tcp:[::1]:6653");
        for bad in [
            "ssl:1.2.3.4:6653",
            "tcp:1.2.3.4",
            "tcp:host:99999",
            "unix:",
            "",
            "ptcp:6653",
        ] {
            let err = Target::parse(bad).unwrap_err();
            assert!(matches!(err, OfError::BadTarget { .. }), "{bad}: {err}");
        }
    }
}
