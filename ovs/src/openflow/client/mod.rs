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
//! - **Packet-ins**: [`OfClient::receive_packet_ins`] asks the switch for `NXT_PACKET_IN2`s
//!   and hands them to a bounded queue; the reader never waits for it (a full queue drops and
//!   counts), so a slow consumer cannot stall the connection's replies.
//!
//! Limits: other asynchronous messages (port-status, flow-removed) are logged and dropped;
//! there is no TLS (`ssl:`) transport; a batch of plain flow_mods is *not* atomic (some may be
//! applied when another fails): use [`OfClient::bundle`] for all-or-nothing changes.
//!
//! The parts: `options` (target, timeouts), `error` (what a request fails with), `requests`
//! (dump filters, bundle messages, their descriptions), `connection` (the xid registry and every
//! request kind over one connection's shared state), `tasks` (reader, writer, keepalive), and
//! here the handshake and the public client.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::debug;

use super::flow_mod::{encode_flow_mod, encode_group_mod, FlowMod, FlowStats, GroupModCommand};
use super::meter::{
    decode_meter_stats_body, encode_meter_mod, encode_meter_stats_request, Meter, MeterModCommand,
    MeterStats, OFPMP_METER,
};
use super::monitor::{
    decode_flow_updates, encode_flow_monitor_request, FlowUpdate, NXFMF_ADD, NXFMF_DELETE,
    NXFMF_MODIFY, OFPMP_EXPERIMENTER,
};
use super::packets::{
    decode_get_config_flags, encode_get_config_request, encode_packet_out, encode_set_config,
    encode_set_controller_id, encode_set_packet_in_format, PacketIn, OFPCML_NO_BUFFER,
    OFPT_GET_CONFIG_REPLY,
};
use super::wire::{
    self, decode_features_reply, encode_echo_reply, encode_features_request, encode_hello,
    hello_versions, msg_type, version_names, FrameBuffer, RawMsg, SwitchError, OFP13_VERSION,
};
use crate::flow::{Flow, Group};

mod options;
pub use options::{OfConfig, Target};
mod error;
pub use error::{BundleStage, OfError};
mod requests;
pub use requests::{describe_flow_mod, describe_group_mod, BundleMsg, DumpFilter};
mod connection;
use connection::*;
mod tasks;
use tasks::*;

/// What became of packet-ins that did not reach the queue.
#[derive(Debug, Default)]
pub struct PacketInCounters {
    /// Dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Dropped because they could not be decoded.
    pub undecodable: AtomicU64,
}

/// The queue of packet-ins of one connection ([`OfClient::receive_packet_ins`]). It ends
/// (`recv` gives `None`) when the connection closes.
#[derive(Debug)]
pub struct PacketIns {
    rx: mpsc::Receiver<PacketIn>,
    counters: Arc<PacketInCounters>,
}

impl PacketIns {
    /// The next packet-in; `None` once the connection has closed.
    pub async fn recv(&mut self) -> Option<PacketIn> {
        self.rx.recv().await
    }

    /// A packet-in already queued, without waiting.
    pub fn try_recv(&mut self) -> Option<PacketIn> {
        self.rx.try_recv().ok()
    }

    /// Packet-ins dropped because the queue was full, and because they could not be decoded.
    pub fn lost(&self) -> (u64, u64) {
        (
            self.counters.dropped.load(Ordering::Relaxed),
            self.counters.undecodable.load(Ordering::Relaxed),
        )
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
                packet_ins: None,
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

    /// Every meter's counters (`OFPMP_METER`, all reply parts), sorted by id.
    pub async fn dump_meter_stats(&self) -> Result<Vec<MeterStats>, OfError> {
        let mut stats = self
            .shared()
            .multipart(
                "dump meter stats",
                encode_meter_stats_request,
                (OFPMP_METER, "OFPMP_METER"),
                decode_meter_stats_body,
            )
            .await?;
        stats.sort_by_key(|m| m.id);
        Ok(stats)
    }

    /// Asks the switch to send this connection its packet-ins as `NXT_PACKET_IN2` (a non-zero
    /// `miss_send_len`, without which Open vSwitch sends a service connection none, and the
    /// packet-in2 format) and returns their queue, which holds at most `capacity`. A second
    /// call replaces the first queue. Packet-ins start flowing once this returns.
    pub async fn receive_packet_ins(&self, capacity: usize) -> Result<PacketIns, OfError> {
        self.receive_packet_ins_as(capacity, 0).await
    }

    /// [`OfClient::receive_packet_ins`] as controller `id` (`NXT_SET_CONTROLLER_ID`): the
    /// connection then gets only the packet-ins of `controller(id=ID,...)` actions, so two
    /// readers with different ids never see each other's copies.
    pub async fn receive_packet_ins_as(
        &self,
        capacity: usize,
        id: u16,
    ) -> Result<PacketIns, OfError> {
        let shared = self.shared();
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let counters = Arc::new(PacketInCounters::default());
        shared.lock().packet_ins = Some(PacketInSink {
            tx,
            counters: counters.clone(),
        });
        // The bridge's fragment handling, kept as it is (set_config sets it bridge-wide).
        let flags = match shared
            .request("get config", encode_get_config_request)
            .await
        {
            Ok(m) if m.msg_type == OFPT_GET_CONFIG_REPLY => decode_get_config_flags(&m.body)
                .map_err(|e| OfError::Decode {
                    peer: shared.peer.clone(),
                    op: "get config".into(),
                    reason: e.to_string(),
                }),
            Ok(m) => Err(shared.unexpected("get config", &m)),
            Err(e) => Err(e),
        };
        let flags = match flags {
            Ok(f) => f,
            Err(e) => {
                shared.lock().packet_ins = None;
                return Err(e);
            }
        };
        let asked = shared
            .batch(
                "ask for packet-ins",
                3,
                |i, xid| {
                    Ok(match i {
                        0 => encode_set_config(xid, flags, OFPCML_NO_BUFFER),
                        1 => encode_set_packet_in_format(xid),
                        _ => encode_set_controller_id(xid, id),
                    })
                },
                |i| match i {
                    0 => "OFPT_SET_CONFIG miss_send_len=no_buffer".into(),
                    1 => "NXT_SET_PACKET_IN_FORMAT packet-in2".into(),
                    _ => format!("NXT_SET_CONTROLLER_ID {id}"),
                },
            )
            .await;
        if let Err(e) = asked {
            shared.lock().packet_ins = None;
            return Err(e);
        }
        Ok(PacketIns { rx, counters })
    }

    /// Injects `packet` as if it had entered by `in_port`, meeting `actions` (`output:TABLE`
    /// sends it through the tables from table 0). Waits for a barrier, so a refused packet-out
    /// is this call's error.
    pub async fn packet_out(
        &self,
        in_port: u32,
        actions: &[crate::flow::Action],
        packet: &[u8],
    ) -> Result<(), OfError> {
        let msg =
            encode_packet_out(0, in_port, actions, packet).map_err(|source| OfError::Encode {
                index: 0,
                what: "packet-out".into(),
                source,
            })?;
        self.shared()
            .batch(
                "packet-out",
                1,
                |_, xid| {
                    let mut m = msg.clone();
                    m[4..8].copy_from_slice(&xid.to_be_bytes());
                    Ok(m)
                },
                |_| format!("packet-out of {} bytes at port {in_port}", packet.len()),
            )
            .await
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

    /// The flows the filter selects, each handed to `f` as its reply part is decoded (a full
    /// table need not be held at once).
    pub async fn for_each_flow(
        &self,
        filter: &DumpFilter,
        mut f: impl FnMut(Flow),
    ) -> Result<(), OfError> {
        self.shared()
            .dump_each(filter, |part| part.into_iter().for_each(|s| f(s.flow)))
            .await
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
mod tests;
