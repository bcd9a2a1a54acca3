//! Bundles for OpenFlow 1.3: the ONF extension (EXT-230) that Open vSwitch implements, giving
//! atomic multi-message commits.
//!
//! On the wire a bundle message is `OFPT_EXPERIMENTER` with experimenter `ONF` (0x4f4e4600) and
//! exp_type 2300 (`ONFT_BUNDLE_CONTROL`: bundle_id u32, type u16, flags u16) or 2301
//! (`ONFT_BUNDLE_ADD_MESSAGE`: bundle_id u32, pad u16, flags u16, then a complete inner message
//! whose xid equals the outer one), the same layout as Open vSwitch's `lib/ofp-bundle.c`.
//!
//! This module only encodes and decodes; [`super::client::OfClient::bundle`] runs the
//! open/add/commit exchange. Limits: bundle properties (none are defined for 1.3) are neither
//! sent nor read.

use super::wire::{self, be16, be32, msg_type, RawMsg, WireError, HEADER_LEN, ONF_EXPERIMENTER};

/// exp_type of `ONFT_BUNDLE_CONTROL`.
pub const ONFT_BUNDLE_CONTROL: u32 = 2300;
/// exp_type of `ONFT_BUNDLE_ADD_MESSAGE`.
pub const ONFT_BUNDLE_ADD_MESSAGE: u32 = 2301;
/// Bundle flag: all or nothing.
pub const OFPBF_ATOMIC: u16 = 1;
/// Bundle flag: apply in the order added.
pub const OFPBF_ORDERED: u16 = 2;

/// Bundle control types (`ofp14_bundle_ctrl_type`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BundleCtrlType {
    /// `OFPBCT_OPEN_REQUEST`.
    OpenRequest,
    /// `OFPBCT_OPEN_REPLY`.
    OpenReply,
    /// `OFPBCT_CLOSE_REQUEST`.
    CloseRequest,
    /// `OFPBCT_CLOSE_REPLY`.
    CloseReply,
    /// `OFPBCT_COMMIT_REQUEST`.
    CommitRequest,
    /// `OFPBCT_COMMIT_REPLY`.
    CommitReply,
    /// `OFPBCT_DISCARD_REQUEST`.
    DiscardRequest,
    /// `OFPBCT_DISCARD_REPLY`.
    DiscardReply,
}

impl BundleCtrlType {
    /// The wire code.
    pub fn code(self) -> u16 {
        match self {
            BundleCtrlType::OpenRequest => 0,
            BundleCtrlType::OpenReply => 1,
            BundleCtrlType::CloseRequest => 2,
            BundleCtrlType::CloseReply => 3,
            BundleCtrlType::CommitRequest => 4,
            BundleCtrlType::CommitReply => 5,
            BundleCtrlType::DiscardRequest => 6,
            BundleCtrlType::DiscardReply => 7,
        }
    }

    /// From the wire code.
    pub fn from_code(code: u16) -> Option<Self> {
        Some(match code {
            0 => BundleCtrlType::OpenRequest,
            1 => BundleCtrlType::OpenReply,
            2 => BundleCtrlType::CloseRequest,
            3 => BundleCtrlType::CloseReply,
            4 => BundleCtrlType::CommitRequest,
            5 => BundleCtrlType::CommitReply,
            6 => BundleCtrlType::DiscardRequest,
            7 => BundleCtrlType::DiscardReply,
            _ => return None,
        })
    }

    /// The reply a request expects.
    pub fn reply(self) -> Self {
        match self {
            BundleCtrlType::OpenRequest => BundleCtrlType::OpenReply,
            BundleCtrlType::CloseRequest => BundleCtrlType::CloseReply,
            BundleCtrlType::CommitRequest => BundleCtrlType::CommitReply,
            BundleCtrlType::DiscardRequest => BundleCtrlType::DiscardReply,
            reply => reply,
        }
    }
}

/// A decoded bundle control message.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct BundleCtrl {
    /// Bundle id.
    pub bundle_id: u32,
    /// Control type.
    pub ctrl_type: BundleCtrlType,
    /// Flags.
    pub flags: u16,
}

fn experimenter_prefix(exp_type: u32, out: &mut Vec<u8>) {
    out.extend_from_slice(&ONF_EXPERIMENTER.to_be_bytes());
    out.extend_from_slice(&exp_type.to_be_bytes());
}

/// Encodes `ONFT_BUNDLE_CONTROL`.
pub fn encode_bundle_ctrl(ctrl: &BundleCtrl, xid: u32) -> Vec<u8> {
    let mut body = Vec::with_capacity(16);
    experimenter_prefix(ONFT_BUNDLE_CONTROL, &mut body);
    body.extend_from_slice(&ctrl.bundle_id.to_be_bytes());
    body.extend_from_slice(&ctrl.ctrl_type.code().to_be_bytes());
    body.extend_from_slice(&ctrl.flags.to_be_bytes());
    // 24 bytes in all: cannot exceed the length limit.
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    wire::Header {
        version: wire::OFP13_VERSION,
        msg_type: msg_type::EXPERIMENTER,
        length: (HEADER_LEN + body.len()) as u16,
        xid,
    }
    .encode(&mut out);
    out.extend_from_slice(&body);
    out
}

/// Wraps a complete inner message (header included) in `ONFT_BUNDLE_ADD_MESSAGE`; the outer
/// xid is the inner message's xid, as Open vSwitch requires.
pub fn encode_bundle_add(bundle_id: u32, flags: u16, inner: &[u8]) -> Result<Vec<u8>, WireError> {
    let h = wire::Header::decode(inner)?;
    if h.length as usize != inner.len() {
        return Err(WireError::Malformed {
            what: "bundled message",
            detail: format!(
                "header says {} bytes, message has {}",
                h.length,
                inner.len()
            ),
        });
    }
    let mut body = Vec::with_capacity(16 + inner.len());
    experimenter_prefix(ONFT_BUNDLE_ADD_MESSAGE, &mut body);
    body.extend_from_slice(&bundle_id.to_be_bytes());
    body.extend_from_slice(&0u16.to_be_bytes());
    body.extend_from_slice(&flags.to_be_bytes());
    body.extend_from_slice(inner);
    wire::encode_msg(msg_type::EXPERIMENTER, h.xid, &body)
}

/// Decodes an `OFPT_EXPERIMENTER` message if it is an ONF bundle control message; `Ok(None)`
/// for any other experimenter message.
pub fn decode_bundle_ctrl(msg: &RawMsg) -> Result<Option<BundleCtrl>, WireError> {
    if msg.msg_type != msg_type::EXPERIMENTER || msg.body.len() < 8 {
        return Ok(None);
    }
    let b = &msg.body;
    if be32(b, 0) != ONF_EXPERIMENTER || be32(b, 4) != ONFT_BUNDLE_CONTROL {
        return Ok(None);
    }
    if b.len() < 16 {
        return Err(WireError::Truncated {
            what: "bundle control",
            need: 16,
            have: b.len(),
        });
    }
    let code = be16(b, 12);
    let ctrl_type = BundleCtrlType::from_code(code).ok_or_else(|| WireError::Malformed {
        what: "bundle control",
        detail: format!("unknown control type {code}"),
    })?;
    Ok(Some(BundleCtrl {
        bundle_id: be32(b, 8),
        ctrl_type,
        flags: be16(b, 14),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_layout_matches_ovs() {
        let ctrl = BundleCtrl {
            bundle_id: 5,
            ctrl_type: BundleCtrlType::OpenRequest,
            flags: OFPBF_ATOMIC | OFPBF_ORDERED,
        };
        let m = encode_bundle_ctrl(&ctrl, 0x11);
        assert_eq!(
            m,
            vec![
                4, 4, 0, 24, 0, 0, 0, 0x11, // header
                0x4f, 0x4e, 0x46, 0, 0, 0, 0x08, 0xfc, // ONF, 2300
                0, 0, 0, 5, 0, 0, 0, 3, // id, type, flags
            ]
        );
        let mut fb = wire::FrameBuffer::new();
        fb.extend(&m);
        let raw = fb.next_msg().unwrap().unwrap();
        assert_eq!(decode_bundle_ctrl(&raw).unwrap(), Some(ctrl));
    }

    #[test]
    fn add_wraps_the_inner_message_with_its_xid() {
        let inner = wire::encode_barrier_request(0x42);
        let m = encode_bundle_add(7, OFPBF_ATOMIC, &inner).unwrap();
        assert_eq!(m.len(), 24 + 8);
        assert_eq!(&m[..8], &[4, 4, 0, 32, 0, 0, 0, 0x42]);
        assert_eq!(&m[8..16], &[0x4f, 0x4e, 0x46, 0, 0, 0, 0x08, 0xfd]);
        assert_eq!(&m[16..24], &[0, 0, 0, 7, 0, 0, 0, 1]);
        assert_eq!(&m[24..], inner.as_slice());
        assert!(encode_bundle_add(7, 0, &inner[..7]).is_err());
        let big = wire::encode_msg(14, 9, &vec![0u8; 65512]).unwrap();
        assert!(matches!(
            encode_bundle_add(7, 0, &big),
            Err(WireError::TooLong { .. })
        ));
    }

    #[test]
    fn other_experimenter_messages_are_not_bundle_control() {
        let raw = RawMsg {
            version: 4,
            msg_type: 4,
            xid: 1,
            body: vec![0, 0, 0x23, 0x20, 0, 0, 0, 1],
        };
        assert_eq!(decode_bundle_ctrl(&raw).unwrap(), None);
        let mut body = vec![0x4f, 0x4e, 0x46, 0, 0, 0, 0x08, 0xfc];
        body.extend_from_slice(&[0, 0, 0, 1, 0, 9, 0, 0]);
        let raw = RawMsg {
            version: 4,
            msg_type: 4,
            xid: 1,
            body,
        };
        assert!(decode_bundle_ctrl(&raw).is_err());
    }
}
