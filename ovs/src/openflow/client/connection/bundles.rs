//! Bundles over one connection: the messages of a bundle sent in one write (open, every add,
//! a barrier), the adds' errors collected before the commit, the commit, and the discard of a
//! bundle that failed on the way. Open vSwitch applies a bundle atomically and in order.

use crate::openflow::bundle::{self, BundleCtrl, BundleCtrlType, OFPBF_ATOMIC, OFPBF_ORDERED};
use crate::openflow::wire::{encode_barrier_request, msg_type, RawMsg, SwitchError};
use crate::openflow::CodecError;
use std::sync::atomic::Ordering;
use tracing::debug;

use super::*;

impl Shared {
    /// Discards bundle `id`, best effort (the bundle is already failing).
    pub(crate) async fn discard(&self, id: u32, flags: u16) {
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
    pub(crate) async fn bundle(
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
            buf.extend_from_slice(&bundle_add(
                id,
                flags,
                i,
                p.xid(i + 1),
                &mut encode,
                &describe,
            )?);
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
                        let discard = ctrl(BundleCtrlType::DiscardRequest);
                        let _ = self.send(bundle::encode_bundle_ctrl(&discard, 0), &op);
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

        // Phase 2: commit.
        match self.commit_bundle(&mut p, &op, id, n, commit_xid).await? {
            Ok(()) => Ok(()),
            Err((index, xid, error)) => Err(failed(index, xid, BundleStage::Commit, error)),
        }
    }

    /// Commits bundle `id` (its `n` messages added, xids in `p`). On failure Open vSwitch
    /// first reports the failing message (with the xid of its add), then fails the commit with
    /// OFPBFC_MSG_FAILED, and drops the bundle. `Ok(Err)` names that message (index, xid,
    /// error).
    async fn commit_bundle(
        &self,
        p: &mut Pending<'_>,
        op: &str,
        id: u32,
        n: usize,
        commit_xid: u32,
    ) -> Result<Result<(), FailedMessage>, OfError> {
        let flags = OFPBF_ATOMIC | OFPBF_ORDERED;
        let ctrl = |ctrl_type| BundleCtrl {
            bundle_id: id,
            ctrl_type,
            flags,
        };
        let switch_error = |msg: &RawMsg| {
            SwitchError::decode(&msg.body).map_err(|e| OfError::Decode {
                peer: self.peer.clone(),
                op: op.to_string(),
                reason: format!("error message: {e}"),
            })
        };
        debug!(peer = %self.peer, bundle_id = id, commit_xid, "committing bundle");
        self.send(
            bundle::encode_bundle_ctrl(&ctrl(BundleCtrlType::CommitRequest), commit_xid),
            op,
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
                    return Ok(Ok(()));
                }
                let commit_error = switch_error(&msg)?;
                return match msg_err {
                    Some(failed) => Ok(Err(failed)),
                    None => Err(OfError::Rejected {
                        peer: self.peer.clone(),
                        op: format!("{op} commit"),
                        xid: commit_xid,
                        error: commit_error,
                    }),
                };
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

/// Message `i` of a bundle (xid `xid`), encoded by `encode` and framed as a bundle add.
fn bundle_add(
    id: u32,
    flags: u16,
    i: usize,
    xid: u32,
    encode: &mut impl FnMut(usize, u32) -> Result<Vec<u8>, CodecError>,
    describe: &impl Fn(usize) -> String,
) -> Result<Vec<u8>, OfError> {
    let inner = encode(i, xid).map_err(|source| OfError::Encode {
        index: i,
        what: describe(i),
        source,
    })?;
    bundle::encode_bundle_add(id, flags, &inner).map_err(|source| OfError::Frame {
        index: i,
        what: describe(i),
        source,
    })
}

/// A bundle message the switch failed: its index, its xid and the switch's error.
type FailedMessage = (usize, u32, SwitchError);
