//! One connection's shared state: the xid registry that matches replies to requests, the send
//! queue, and every request kind (echo, barrier, batches, dumps, multipart, bundles) over it.

use crate::flow::Group;
use crate::openflow::bundle::{self, BundleCtrl, BundleCtrlType};
use crate::openflow::flow_mod::{
    decode_flow_stats_body, decode_group_desc_body, encode_flow_stats_request,
    encode_group_desc_request, FlowStats, OFPMP_GROUP_DESC,
};
use crate::openflow::meter::{
    decode_meter_config_body, encode_meter_config_request, Meter, OFPMP_METER_CONFIG,
};
use crate::openflow::monitor::{
    decode_flow_updates, is_flow_monitor_body, FlowEvent, FlowUpdate, OFPMP_EXPERIMENTER,
};
use crate::openflow::packets::{decode_packet_in2, is_packet_in2, PacketIn};
use crate::openflow::wire::{
    decode_multipart_reply, encode_barrier_request, encode_echo_reply, encode_echo_request,
    msg_type, RawMsg, SwitchError, OFPMP_FLOW,
};
use crate::openflow::CodecError;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{debug, trace, warn};

use super::*;

mod bundles;

pub(crate) type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
pub(crate) type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

pub(crate) struct State {
    pub(crate) next_xid: u32,
    pub(crate) pending: HashMap<u32, mpsc::UnboundedSender<RawMsg>>,
    pub(crate) closed: Option<String>,
    /// Where flow monitor updates go (see [`OfClient::monitor_flows`]).
    pub(crate) monitor: Option<mpsc::UnboundedSender<Vec<FlowUpdate>>>,
    /// Where packet-ins go (see [`OfClient::receive_packet_ins`]).
    pub(crate) packet_ins: Option<PacketInSink>,
}

/// The bounded queue packet-ins go to, and what did not fit. The reader never waits for the
/// receiver: a packet-in that finds the queue full is counted and dropped.
pub(crate) struct PacketInSink {
    pub(crate) tx: mpsc::Sender<PacketIn>,
    pub(crate) counters: Arc<PacketInCounters>,
}

/// The connection state the tasks and the client share.
pub(crate) struct Shared {
    pub(crate) peer: String,
    pub(crate) config: OfConfig,
    pub(crate) state: Mutex<State>,
    pub(crate) out: mpsc::UnboundedSender<Vec<u8>>,
    pub(crate) closed_tx: watch::Sender<bool>,
    pub(crate) epoch: Instant,
    pub(crate) last_rx_ms: AtomicU64,
    pub(crate) next_bundle: AtomicU32,
}

/// Xids registered by one call; unregistered on drop.
pub(crate) struct Pending<'a> {
    pub(crate) shared: &'a Shared,
    pub(crate) first: u32,
    pub(crate) n: u32,
    pub(crate) rx: mpsc::UnboundedReceiver<RawMsg>,
}

impl Pending<'_> {
    pub(crate) fn xid(&self, i: usize) -> u32 {
        self.first.wrapping_add(i as u32)
    }

    pub(crate) fn index_of(&self, xid: u32) -> Option<usize> {
        let i = xid.wrapping_sub(self.first);
        (i < self.n).then_some(i as usize)
    }

    /// The next message for one of our xids, bounded by `deadline`.
    pub(crate) async fn recv(
        &mut self,
        deadline: Instant,
        op: &str,
        xid: u32,
    ) -> Result<RawMsg, OfError> {
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
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock only means another thread panicked while holding it; the map is
        // still consistent (every operation on it is a single insert/remove).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn closed_reason(&self) -> String {
        self.lock()
            .closed
            .clone()
            .unwrap_or_else(|| "connection closed".into())
    }

    pub(crate) fn closed_error(&self, op: &str) -> OfError {
        OfError::Closed {
            peer: self.peer.clone(),
            op: op.to_string(),
            reason: self.closed_reason(),
        }
    }

    /// Marks the connection closed (first reason wins), fails every pending call and stops the
    /// tasks.
    pub(crate) fn close(&self, reason: String) {
        let mut st = self.lock();
        if st.closed.is_none() {
            debug!(peer = %self.peer, %reason, "openflow connection closed");
            st.closed = Some(reason);
            st.pending.clear();
            st.monitor = None;
            st.packet_ins = None;
        }
        drop(st);
        self.closed_tx.send_replace(true);
    }

    /// Registers `n` consecutive xids.
    pub(crate) fn register(&self, n: usize, op: &str) -> Result<Pending<'_>, OfError> {
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

    pub(crate) fn send(&self, bytes: Vec<u8>, op: &str) -> Result<(), OfError> {
        self.out.send(bytes).map_err(|_| self.closed_error(op))
    }

    pub(crate) fn deadline(&self) -> Instant {
        Instant::now() + self.config.request_timeout
    }

    pub(crate) fn touch(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_rx_ms.store(ms, Ordering::Relaxed);
    }

    pub(crate) fn idle_for(&self) -> Duration {
        let now = self.epoch.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_rx_ms.load(Ordering::Relaxed)))
    }

    /// Routes one received message (called by the reader task only).
    pub(crate) fn incoming(&self, msg: RawMsg) {
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
            None if msg.msg_type == msg_type::EXPERIMENTER && is_packet_in2(&msg.body) => {
                self.packet_in(&msg)
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

    pub(crate) fn rejected(&self, op: &str, msg: &RawMsg) -> OfError {
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

    pub(crate) fn unexpected(&self, op: &str, msg: &RawMsg) -> OfError {
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
    pub(crate) async fn request(
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

    pub(crate) async fn echo(&self) -> Result<Duration, OfError> {
        let start = Instant::now();
        let msg = self
            .request("echo", |xid| encode_echo_request(xid, b"ovs-rs"))
            .await?;
        if msg.msg_type != msg_type::ECHO_REPLY {
            return Err(self.unexpected("echo", &msg));
        }
        Ok(start.elapsed())
    }

    pub(crate) async fn barrier(&self) -> Result<(), OfError> {
        let msg = self.request("barrier", encode_barrier_request).await?;
        if msg.msg_type != msg_type::BARRIER_REPLY {
            return Err(self.unexpected("barrier", &msg));
        }
        Ok(())
    }

    /// Sends `n` messages pipelined, then a barrier, and waits for the barrier reply; returns the
    /// first (lowest-index) rejected message.
    pub(crate) async fn batch(
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

    pub(crate) async fn dump(&self, filter: &DumpFilter) -> Result<Vec<FlowStats>, OfError> {
        let mut out = Vec::new();
        self.dump_each(filter, |part| out.extend(part)).await?;
        Ok(out)
    }

    /// The flows `filter` selects, handed to `sink` one reply part at a time as they are
    /// decoded: the caller never holds more than one part's flows unless it keeps them.
    pub(crate) async fn dump_each(
        &self,
        filter: &DumpFilter,
        mut sink: impl FnMut(Vec<FlowStats>),
    ) -> Result<(), OfError> {
        let mut n = 0;
        self.multipart_each(
            "dump flows",
            |xid| encode_flow_stats_request(filter.table, filter.cookie, filter.cookie_mask, xid),
            (OFPMP_FLOW, "OFPMP_FLOW"),
            decode_flow_stats_body,
            |part| {
                n += part.len();
                sink(part);
            },
        )
        .await?;
        debug!(peer = %self.peer, ?filter, flows = n, "flow stats received");
        Ok(())
    }

    /// Hands an unsolicited flow monitor reply to the monitor's receiver; false when `msg` is
    /// not one (or nobody monitors).
    /// Hands one packet-in to its queue (called by the reader task only).
    pub(crate) fn packet_in(&self, msg: &RawMsg) {
        let mut st = self.lock();
        let Some(sink) = st.packet_ins.as_ref() else {
            return;
        };
        match decode_packet_in2(&msg.body) {
            Ok(pin) => match sink.tx.try_send(pin) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    sink.counters.dropped.fetch_add(1, Ordering::Relaxed);
                }
                Err(mpsc::error::TrySendError::Closed(_)) => st.packet_ins = None,
            },
            Err(e) => {
                sink.counters.undecodable.fetch_add(1, Ordering::Relaxed);
                debug!(peer = %self.peer, error = %e, "undecodable packet-in");
            }
        }
    }

    pub(crate) fn flow_monitor_update(&self, msg: &RawMsg) -> bool {
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

    pub(crate) async fn dump_groups(&self) -> Result<Vec<Group>, OfError> {
        self.multipart(
            "dump groups",
            encode_group_desc_request,
            (OFPMP_GROUP_DESC, "OFPMP_GROUP_DESC"),
            decode_group_desc_body,
        )
        .await
    }

    pub(crate) async fn dump_meters(&self) -> Result<Vec<Meter>, OfError> {
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
    pub(crate) async fn multipart<T>(
        &self,
        op: &str,
        request: impl FnOnce(u32) -> Vec<u8>,
        mp: (u16, &str),
        decode: impl Fn(&[u8]) -> Result<Vec<T>, CodecError>,
    ) -> Result<Vec<T>, OfError> {
        let mut out = Vec::new();
        self.multipart_each(op, request, mp, decode, |part| out.extend(part))
            .await?;
        Ok(out)
    }

    /// [`Self::multipart`], each part's decoded items handed to `sink` as it arrives.
    pub(crate) async fn multipart_each<T>(
        &self,
        op: &str,
        request: impl FnOnce(u32) -> Vec<u8>,
        (mp_type, mp_name): (u16, &str),
        decode: impl Fn(&[u8]) -> Result<Vec<T>, CodecError>,
        mut sink: impl FnMut(Vec<T>),
    ) -> Result<(), OfError> {
        let mut p = self.register(1, op)?;
        let xid = p.xid(0);
        debug!(peer = %self.peer, xid, op, "sending multipart request");
        self.send(request(xid), op)?;
        let deadline = self.deadline();
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
            sink(decode(body).map_err(|e| decode_err(e.to_string()))?);
            if !h.more() {
                return Ok(());
            }
        }
    }

    pub(crate) async fn bundle_ctrl(
        &self,
        op: &str,
        ctrl: BundleCtrl,
    ) -> Result<BundleCtrl, OfError> {
        let msg = self
            .request(op, |xid| bundle::encode_bundle_ctrl(&ctrl, xid))
            .await?;
        self.expect_ctrl(op, &msg, ctrl.ctrl_type.reply())
    }

    pub(crate) fn expect_ctrl(
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
}
