//! Errors of the OpenFlow codec: what could not be encoded or decoded, and where.

use crate::flow::FlowError;

/// A message, match or action that could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The flow is invalid before encoding (prerequisites, ranges...).
    #[error(transparent)]
    Flow(#[from] FlowError),
    /// The bytes are shorter than a structure or a length field says.
    #[error("truncated {what}: need {need} bytes, have {have}")]
    Truncated {
        /// What was being decoded.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// Well-formed bytes that this client does not model (an unknown OXM field or action).
    #[error("unsupported {what}: {detail}")]
    Unsupported {
        /// What was being decoded.
        what: &'static str,
        /// Type codes and values seen.
        detail: String,
    },
    /// Bytes that break the protocol's rules.
    #[error("malformed {what}: {detail}")]
    Malformed {
        /// What was being decoded.
        what: &'static str,
        /// Why.
        detail: String,
    },
}
