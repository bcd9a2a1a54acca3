//! placeholder: action and instruction codec (being written)
use super::CodecError;
use crate::flow::Action;

/// Appends the wire form of `actions` (each padded to 8 bytes) to `out`.
pub fn encode_actions(actions: &[Action], out: &mut Vec<u8>) -> Result<(), CodecError> {
    let _ = (actions, out);
    todo!()
}

/// Decodes a complete action list.
pub fn decode_actions(buf: &[u8]) -> Result<Vec<Action>, CodecError> {
    let _ = buf;
    todo!()
}

/// Appends instructions: `OFPIT_APPLY_ACTIONS` (omitted when `actions` is empty), then
/// `OFPIT_GOTO_TABLE` when `goto` is set.
pub fn encode_instructions(
    actions: &[Action],
    goto: Option<u8>,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let _ = (actions, goto, out);
    todo!()
}

/// Decodes a complete instruction list into (apply-actions, goto_table).
pub fn decode_instructions(buf: &[u8]) -> Result<(Vec<Action>, Option<u8>), CodecError> {
    let _ = buf;
    todo!()
}
