//! What an OpenFlow request can fail with, each error naming the operation, the message and
//! the switch's own error, and for bundles the stage and the failed message.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::openflow::wire::{SwitchError, WireError};
use crate::openflow::CodecError;

pub(crate) fn fmt_more_failed(n: usize) -> String {
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
