//! placeholder: OXM match codec (being written)
use super::CodecError;
use crate::flow::Match;

/// Appends an OF1.3 `ofp_match` (type OFPMT_OXM) for `m` to `out`, padded to a multiple of 8.
pub fn encode_match(m: &Match, out: &mut Vec<u8>) -> Result<(), CodecError> {
    let _ = (m, out);
    todo!()
}

/// Decodes an `ofp_match` at the start of `buf`; returns the match and the bytes consumed
/// (including padding).
pub fn decode_match(buf: &[u8]) -> Result<(Match, usize), CodecError> {
    let _ = buf;
    todo!()
}
