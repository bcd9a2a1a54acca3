//! OpenFlow 1.3 framing and the small messages that are not flows: header, HELLO with version
//! negotiation, ECHO, FEATURES, BARRIER, multipart headers, and OFPT_ERROR with names for the
//! error types and codes Open vSwitch sends.
//!
//! Everything here is pure (bytes in, values out), so it is unit-tested without a switch. The
//! flow_mod, group_mod and flow-stats bodies live in [`super::flow_mod`]; bundles in
//! [`super::bundle`]. Decoding never panics on bad input: short or inconsistent bytes give a
//! [`WireError`].
//!
//! Limits: only what a controller needs from OpenFlow 1.3 is modelled; other message types pass
//! through as [`RawMsg`] with their type number.
//!
//! Why one piece: each message's encoder sits beside its decoder (so the two stay inverse), and the
//! names of OVS's error types and codes are one table, kept whole.

use std::fmt;

/// The OpenFlow version this crate speaks: 1.3 (wire version 4).
pub const OFP13_VERSION: u8 = 4;
/// Length of the common header.
pub const HEADER_LEN: usize = 8;
/// Largest message the 16-bit length field can describe.
pub const MAX_MSG_LEN: usize = 0xffff;

/// Message type numbers of OpenFlow 1.3 (`ofp_type`).
pub mod msg_type {
    /// `OFPT_HELLO`.
    pub const HELLO: u8 = 0;
    /// `OFPT_ERROR`.
    pub const ERROR: u8 = 1;
    /// `OFPT_ECHO_REQUEST`.
    pub const ECHO_REQUEST: u8 = 2;
    /// `OFPT_ECHO_REPLY`.
    pub const ECHO_REPLY: u8 = 3;
    /// `OFPT_EXPERIMENTER`.
    pub const EXPERIMENTER: u8 = 4;
    /// `OFPT_FEATURES_REQUEST`.
    pub const FEATURES_REQUEST: u8 = 5;
    /// `OFPT_FEATURES_REPLY`.
    pub const FEATURES_REPLY: u8 = 6;
    /// `OFPT_PACKET_IN`.
    pub const PACKET_IN: u8 = 10;
    /// `OFPT_FLOW_REMOVED`.
    pub const FLOW_REMOVED: u8 = 11;
    /// `OFPT_PORT_STATUS`.
    pub const PORT_STATUS: u8 = 12;
    /// `OFPT_FLOW_MOD`.
    pub const FLOW_MOD: u8 = 14;
    /// `OFPT_GROUP_MOD`.
    pub const GROUP_MOD: u8 = 15;
    /// `OFPT_MULTIPART_REQUEST`.
    pub const MULTIPART_REQUEST: u8 = 18;
    /// `OFPT_MULTIPART_REPLY`.
    pub const MULTIPART_REPLY: u8 = 19;
    /// `OFPT_BARRIER_REQUEST`.
    pub const BARRIER_REQUEST: u8 = 20;
    /// `OFPT_BARRIER_REPLY`.
    pub const BARRIER_REPLY: u8 = 21;

    /// A short name for logs.
    pub fn name(t: u8) -> &'static str {
        match t {
            HELLO => "HELLO",
            ERROR => "ERROR",
            ECHO_REQUEST => "ECHO_REQUEST",
            ECHO_REPLY => "ECHO_REPLY",
            EXPERIMENTER => "EXPERIMENTER",
            FEATURES_REQUEST => "FEATURES_REQUEST",
            FEATURES_REPLY => "FEATURES_REPLY",
            7 => "GET_CONFIG_REQUEST",
            8 => "GET_CONFIG_REPLY",
            9 => "SET_CONFIG",
            PACKET_IN => "PACKET_IN",
            FLOW_REMOVED => "FLOW_REMOVED",
            PORT_STATUS => "PORT_STATUS",
            13 => "PACKET_OUT",
            FLOW_MOD => "FLOW_MOD",
            GROUP_MOD => "GROUP_MOD",
            16 => "PORT_MOD",
            17 => "TABLE_MOD",
            MULTIPART_REQUEST => "MULTIPART_REQUEST",
            MULTIPART_REPLY => "MULTIPART_REPLY",
            BARRIER_REQUEST => "BARRIER_REQUEST",
            BARRIER_REPLY => "BARRIER_REPLY",
            24 => "ROLE_REQUEST",
            25 => "ROLE_REPLY",
            29 => "METER_MOD",
            _ => "UNKNOWN",
        }
    }
}

/// Multipart type of flow statistics (`OFPMP_FLOW`).
pub const OFPMP_FLOW: u16 = 1;
/// Multipart flag: more reply parts follow (`OFPMPF_REPLY_MORE`).
pub const OFPMPF_REPLY_MORE: u16 = 1;
/// Experimenter id of the ONF extensions (bundles in OpenFlow 1.3): "ONF\0".
pub const ONF_EXPERIMENTER: u32 = 0x4f4e_4600;
/// Experimenter id of the Nicira extensions.
pub const NX_EXPERIMENTER: u32 = 0x0000_2320;
/// Hello element type carrying a version bitmap (`OFPHET_VERSIONBITMAP`).
const OFPHET_VERSIONBITMAP: u16 = 1;

/// Bytes that do not form the message they should.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Fewer bytes than a structure needs.
    #[error("truncated {what}: need {need} bytes, have {have}")]
    Truncated {
        /// What was being decoded.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// Bytes that break the protocol's rules.
    #[error("malformed {what}: {detail}")]
    Malformed {
        /// What was being decoded.
        what: &'static str,
        /// Why.
        detail: String,
    },
    /// A message that would not fit the 16-bit length field.
    #[error("{what} of {len} bytes exceeds the openflow limit of 65535 bytes")]
    TooLong {
        /// What was being encoded.
        what: &'static str,
        /// Its length.
        len: usize,
    },
}

fn need(buf: &[u8], n: usize, what: &'static str) -> Result<(), WireError> {
    if buf.len() < n {
        Err(WireError::Truncated {
            what,
            need: n,
            have: buf.len(),
        })
    } else {
        Ok(())
    }
}

pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

/// The 8-byte OpenFlow header.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Header {
    /// Wire version (4 = OpenFlow 1.3).
    pub version: u8,
    /// Message type (`ofp_type`).
    pub msg_type: u8,
    /// Total length including the header.
    pub length: u16,
    /// Transaction id.
    pub xid: u32,
}

impl Header {
    /// Decodes the header at the start of `buf`.
    pub fn decode(buf: &[u8]) -> Result<Header, WireError> {
        need(buf, HEADER_LEN, "openflow header")?;
        let h = Header {
            version: buf[0],
            msg_type: buf[1],
            length: be16(buf, 2),
            xid: be32(buf, 4),
        };
        if (h.length as usize) < HEADER_LEN {
            return Err(WireError::Malformed {
                what: "openflow header",
                detail: format!("length field {} is shorter than the header", h.length),
            });
        }
        Ok(h)
    }

    /// Appends the header to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.version);
        out.push(self.msg_type);
        out.extend_from_slice(&self.length.to_be_bytes());
        out.extend_from_slice(&self.xid.to_be_bytes());
    }
}

/// One whole received message: its header fields and the bytes after the header.
#[derive(Clone, PartialEq, Eq)]
pub struct RawMsg {
    /// Wire version.
    pub version: u8,
    /// Message type.
    pub msg_type: u8,
    /// Transaction id.
    pub xid: u32,
    /// Everything after the 8-byte header.
    pub body: Vec<u8>,
}

impl fmt::Debug for RawMsg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RawMsg {{ v{} {} xid={} body={} bytes }}",
            self.version,
            msg_type::name(self.msg_type),
            self.xid,
            self.body.len()
        )
    }
}

/// Encodes a message of `msg_type` with `body` after the header.
pub fn encode_msg(msg_type: u8, xid: u32, body: &[u8]) -> Result<Vec<u8>, WireError> {
    let len = HEADER_LEN + body.len();
    if len > MAX_MSG_LEN {
        return Err(WireError::TooLong {
            what: msg_type::name(msg_type),
            len,
        });
    }
    let mut out = Vec::with_capacity(len);
    Header {
        version: OFP13_VERSION,
        msg_type,
        length: len as u16,
        xid,
    }
    .encode(&mut out);
    out.extend_from_slice(body);
    Ok(out)
}

/// Encodes a message that has no body or a tiny fixed one (cannot exceed the limit).
fn encode_small(msg_type: u8, xid: u32, body: &[u8]) -> Vec<u8> {
    debug_assert!(body.len() < 1024);
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    Header {
        version: OFP13_VERSION,
        msg_type,
        length: (HEADER_LEN + body.len()) as u16,
        xid,
    }
    .encode(&mut out);
    out.extend_from_slice(body);
    out
}

/// Splits whole messages off the front of a byte stream.
///
/// Feed it whatever a read returned ([`FrameBuffer::extend`]); take messages out with
/// [`FrameBuffer::next_msg`] until it returns `None` (a partial message stays buffered). A
/// header whose length is below 8 is a framing error: the stream cannot be resynchronised.
#[derive(Debug, Default)]
pub struct FrameBuffer {
    buf: Vec<u8>,
    pos: usize,
}

impl FrameBuffer {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends received bytes.
    pub fn extend(&mut self, bytes: &[u8]) {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > 64 * 1024 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes buffered but not yet returned as messages.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next whole message, if one is buffered.
    pub fn next_msg(&mut self) -> Result<Option<RawMsg>, WireError> {
        let rest = &self.buf[self.pos..];
        if rest.len() < HEADER_LEN {
            return Ok(None);
        }
        let h = Header::decode(rest)?;
        let len = h.length as usize;
        if rest.len() < len {
            return Ok(None);
        }
        let msg = RawMsg {
            version: h.version,
            msg_type: h.msg_type,
            xid: h.xid,
            body: rest[HEADER_LEN..len].to_vec(),
        };
        self.pos += len;
        Ok(Some(msg))
    }
}

/// `OFPT_HELLO` offering exactly OpenFlow 1.3, with a version bitmap element.
pub fn encode_hello(xid: u32) -> Vec<u8> {
    let mut body = Vec::with_capacity(8);
    body.extend_from_slice(&OFPHET_VERSIONBITMAP.to_be_bytes());
    body.extend_from_slice(&8u16.to_be_bytes());
    body.extend_from_slice(&(1u32 << OFP13_VERSION).to_be_bytes());
    encode_small(msg_type::HELLO, xid, &body)
}

/// The versions a peer's HELLO offers: those in its version bitmap when it sends one, otherwise
/// (OpenFlow 1.0 style) every version up to its header version.
pub fn hello_versions(msg: &RawMsg) -> Result<Vec<u8>, WireError> {
    let mut b = msg.body.as_slice();
    let mut bitmap: Option<Vec<u8>> = None;
    while b.len() >= 4 {
        let t = be16(b, 0);
        let len = be16(b, 2) as usize;
        if len < 4 || len > b.len() {
            return Err(WireError::Malformed {
                what: "hello element",
                detail: format!("element type {t} length {len} with {} bytes left", b.len()),
            });
        }
        if t == OFPHET_VERSIONBITMAP {
            let mut versions = bitmap.take().unwrap_or_default();
            for (word, chunk) in b[4..len].chunks_exact(4).enumerate() {
                let bits = be32(chunk, 0);
                for bit in 0..32 {
                    if bits & (1 << bit) != 0 {
                        let v = word * 32 + bit;
                        if let Ok(v) = u8::try_from(v) {
                            versions.push(v);
                        }
                    }
                }
            }
            bitmap = Some(versions);
        }
        // Elements are padded to 8 bytes.
        let padded = len.div_ceil(8) * 8;
        b = &b[padded.min(b.len())..];
    }
    Ok(match bitmap {
        Some(v) => v,
        None => (1..=msg.version).collect(),
    })
}

/// A printable list of wire versions: `1.0, 1.3`.
pub fn version_names(versions: &[u8]) -> String {
    let names: Vec<String> = versions
        .iter()
        .map(|v| {
            if *v >= 1 {
                format!("1.{}", v - 1)
            } else {
                format!("wire version {v}")
            }
        })
        .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// `OFPT_ECHO_REQUEST` with an optional payload.
pub fn encode_echo_request(xid: u32, payload: &[u8]) -> Vec<u8> {
    encode_small(msg_type::ECHO_REQUEST, xid, payload)
}

/// `OFPT_ECHO_REPLY` answering a request: same xid, same payload.
pub fn encode_echo_reply(request: &RawMsg) -> Result<Vec<u8>, WireError> {
    encode_msg(msg_type::ECHO_REPLY, request.xid, &request.body)
}

/// `OFPT_FEATURES_REQUEST`.
pub fn encode_features_request(xid: u32) -> Vec<u8> {
    encode_small(msg_type::FEATURES_REQUEST, xid, &[])
}

/// `OFPT_BARRIER_REQUEST`.
pub fn encode_barrier_request(xid: u32) -> Vec<u8> {
    encode_small(msg_type::BARRIER_REQUEST, xid, &[])
}

/// What `OFPT_FEATURES_REPLY` says about the switch.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Features {
    /// Datapath id.
    pub datapath_id: u64,
    /// Packets the switch can buffer.
    pub n_buffers: u32,
    /// Number of flow tables.
    pub n_tables: u8,
    /// Capability bits (`ofp_capabilities`).
    pub capabilities: u32,
}

/// Decodes the body of `OFPT_FEATURES_REPLY`.
pub fn decode_features_reply(body: &[u8]) -> Result<Features, WireError> {
    need(body, 24, "features reply")?;
    Ok(Features {
        datapath_id: be64(body, 0),
        n_buffers: be32(body, 8),
        n_tables: body[12],
        capabilities: be32(body, 16),
    })
}

/// Header of a multipart reply body.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MultipartHeader {
    /// `ofp_multipart_type`.
    pub mp_type: u16,
    /// Flags (`OFPMPF_REPLY_MORE`).
    pub flags: u16,
}

impl MultipartHeader {
    /// Whether more parts follow.
    pub fn more(&self) -> bool {
        self.flags & OFPMPF_REPLY_MORE != 0
    }
}

/// Splits the body of `OFPT_MULTIPART_REPLY` into its header and the part's body.
pub fn decode_multipart_reply(body: &[u8]) -> Result<(MultipartHeader, &[u8]), WireError> {
    need(body, 8, "multipart reply")?;
    Ok((
        MultipartHeader {
            mp_type: be16(body, 0),
            flags: be16(body, 2),
        },
        &body[8..],
    ))
}

/// Error types (`ofp_error_type`) and the codes this client names.
pub mod errors {
    /// `OFPET_HELLO_FAILED`.
    pub const OFPET_HELLO_FAILED: u16 = 0;
    /// `OFPET_BAD_REQUEST`.
    pub const OFPET_BAD_REQUEST: u16 = 1;
    /// `OFPET_BAD_ACTION`.
    pub const OFPET_BAD_ACTION: u16 = 2;
    /// `OFPET_BAD_INSTRUCTION`.
    pub const OFPET_BAD_INSTRUCTION: u16 = 3;
    /// `OFPET_BAD_MATCH`.
    pub const OFPET_BAD_MATCH: u16 = 4;
    /// `OFPET_FLOW_MOD_FAILED`.
    pub const OFPET_FLOW_MOD_FAILED: u16 = 5;
    /// `OFPET_GROUP_MOD_FAILED`.
    pub const OFPET_GROUP_MOD_FAILED: u16 = 6;
    /// `OFPET_BUNDLE_FAILED` (OpenFlow 1.4; Open vSwitch sends ONF experimenter errors in 1.3).
    pub const OFPET_BUNDLE_FAILED: u16 = 17;
    /// `OFPET_EXPERIMENTER`.
    pub const OFPET_EXPERIMENTER: u16 = 0xffff;

    /// `OFPHFC_INCOMPATIBLE`.
    pub const OFPHFC_INCOMPATIBLE: u16 = 0;
    /// `OFPBAC_BAD_OUT_PORT`.
    pub const OFPBAC_BAD_OUT_PORT: u16 = 4;
    /// `OFPBAC_BAD_OUT_GROUP`.
    pub const OFPBAC_BAD_OUT_GROUP: u16 = 9;
    /// `OFPBIC_BAD_TABLE_ID`.
    pub const OFPBIC_BAD_TABLE_ID: u16 = 2;
    /// `OFPBMC_BAD_PREREQ`.
    pub const OFPBMC_BAD_PREREQ: u16 = 9;
    /// `OFPGMFC_GROUP_EXISTS`.
    pub const OFPGMFC_GROUP_EXISTS: u16 = 0;
    /// `OFPGMFC_UNKNOWN_GROUP`.
    pub const OFPGMFC_UNKNOWN_GROUP: u16 = 8;
    /// `OFPBFC_MSG_FAILED` in OpenFlow 1.4 numbering (type 17).
    pub const OFPBFC_MSG_FAILED: u16 = 13;
    /// ONF experimenter code of bundle error `i` in OpenFlow 1.3 is `ONF_BUNDLE_ERROR_BASE + i`.
    pub const ONF_BUNDLE_ERROR_BASE: u16 = 2300;
}

const HELLO_FAILED: &[&str] = &["OFPHFC_INCOMPATIBLE", "OFPHFC_EPERM"];
const BAD_REQUEST: &[&str] = &[
    "OFPBRC_BAD_VERSION",
    "OFPBRC_BAD_TYPE",
    "OFPBRC_BAD_MULTIPART",
    "OFPBRC_BAD_EXPERIMENTER",
    "OFPBRC_BAD_EXP_TYPE",
    "OFPBRC_EPERM",
    "OFPBRC_BAD_LEN",
    "OFPBRC_BUFFER_EMPTY",
    "OFPBRC_BUFFER_UNKNOWN",
    "OFPBRC_BAD_TABLE_ID",
    "OFPBRC_IS_SLAVE",
    "OFPBRC_BAD_PORT",
    "OFPBRC_BAD_PACKET",
    "OFPBRC_MULTIPART_BUFFER_OVERFLOW",
];
const BAD_ACTION: &[&str] = &[
    "OFPBAC_BAD_TYPE",
    "OFPBAC_BAD_LEN",
    "OFPBAC_BAD_EXPERIMENTER",
    "OFPBAC_BAD_EXP_TYPE",
    "OFPBAC_BAD_OUT_PORT",
    "OFPBAC_BAD_ARGUMENT",
    "OFPBAC_EPERM",
    "OFPBAC_TOO_MANY",
    "OFPBAC_BAD_QUEUE",
    "OFPBAC_BAD_OUT_GROUP",
    "OFPBAC_MATCH_INCONSISTENT",
    "OFPBAC_UNSUPPORTED_ORDER",
    "OFPBAC_BAD_TAG",
    "OFPBAC_BAD_SET_TYPE",
    "OFPBAC_BAD_SET_LEN",
    "OFPBAC_BAD_SET_ARGUMENT",
];
const BAD_INSTRUCTION: &[&str] = &[
    "OFPBIC_UNKNOWN_INST",
    "OFPBIC_UNSUP_INST",
    "OFPBIC_BAD_TABLE_ID",
    "OFPBIC_UNSUP_METADATA",
    "OFPBIC_UNSUP_METADATA_MASK",
    "OFPBIC_BAD_EXPERIMENTER",
    "OFPBIC_BAD_EXP_TYPE",
    "OFPBIC_BAD_LEN",
    "OFPBIC_EPERM",
];
const BAD_MATCH: &[&str] = &[
    "OFPBMC_BAD_TYPE",
    "OFPBMC_BAD_LEN",
    "OFPBMC_BAD_TAG",
    "OFPBMC_BAD_DL_ADDR_MASK",
    "OFPBMC_BAD_NW_ADDR_MASK",
    "OFPBMC_BAD_WILDCARDS",
    "OFPBMC_BAD_FIELD",
    "OFPBMC_BAD_VALUE",
    "OFPBMC_BAD_MASK",
    "OFPBMC_BAD_PREREQ",
    "OFPBMC_DUP_FIELD",
    "OFPBMC_EPERM",
];
const FLOW_MOD_FAILED: &[&str] = &[
    "OFPFMFC_UNKNOWN",
    "OFPFMFC_TABLE_FULL",
    "OFPFMFC_BAD_TABLE_ID",
    "OFPFMFC_OVERLAP",
    "OFPFMFC_EPERM",
    "OFPFMFC_BAD_TIMEOUT",
    "OFPFMFC_BAD_COMMAND",
    "OFPFMFC_BAD_FLAGS",
];
const GROUP_MOD_FAILED: &[&str] = &[
    "OFPGMFC_GROUP_EXISTS",
    "OFPGMFC_INVALID_GROUP",
    "OFPGMFC_WEIGHT_UNSUPPORTED",
    "OFPGMFC_OUT_OF_GROUPS",
    "OFPGMFC_OUT_OF_BUCKETS",
    "OFPGMFC_CHAINING_UNSUPPORTED",
    "OFPGMFC_WATCH_UNSUPPORTED",
    "OFPGMFC_LOOP",
    "OFPGMFC_UNKNOWN_GROUP",
    "OFPGMFC_CHAINED_GROUP",
    "OFPGMFC_BAD_TYPE",
    "OFPGMFC_BAD_COMMAND",
    "OFPGMFC_BAD_BUCKET",
    "OFPGMFC_BAD_WATCH",
    "OFPGMFC_EPERM",
];
const PORT_MOD_FAILED: &[&str] = &[
    "OFPPMFC_BAD_PORT",
    "OFPPMFC_BAD_HW_ADDR",
    "OFPPMFC_BAD_CONFIG",
    "OFPPMFC_BAD_ADVERTISE",
    "OFPPMFC_EPERM",
];
const TABLE_MOD_FAILED: &[&str] = &["OFPTMFC_BAD_TABLE", "OFPTMFC_BAD_CONFIG", "OFPTMFC_EPERM"];
const QUEUE_OP_FAILED: &[&str] = &["OFPQOFC_BAD_PORT", "OFPQOFC_BAD_QUEUE", "OFPQOFC_EPERM"];
const SWITCH_CONFIG_FAILED: &[&str] = &["OFPSCFC_BAD_FLAGS", "OFPSCFC_BAD_LEN", "OFPSCFC_EPERM"];
const ROLE_REQUEST_FAILED: &[&str] = &["OFPRRFC_STALE", "OFPRRFC_UNSUP", "OFPRRFC_BAD_ROLE"];
const METER_MOD_FAILED: &[&str] = &[
    "OFPMMFC_UNKNOWN",
    "OFPMMFC_METER_EXISTS",
    "OFPMMFC_INVALID_METER",
    "OFPMMFC_UNKNOWN_METER",
    "OFPMMFC_BAD_COMMAND",
    "OFPMMFC_BAD_FLAGS",
    "OFPMMFC_BAD_RATE",
    "OFPMMFC_BAD_BURST",
    "OFPMMFC_BAD_BAND",
    "OFPMMFC_BAD_BAND_VALUE",
    "OFPMMFC_OUT_OF_METERS",
    "OFPMMFC_OUT_OF_BANDS",
];
const TABLE_FEATURES_FAILED: &[&str] = &[
    "OFPTFFC_BAD_TABLE",
    "OFPTFFC_BAD_METADATA",
    "OFPTFFC_BAD_TYPE",
    "OFPTFFC_BAD_LEN",
    "OFPTFFC_BAD_ARGUMENT",
    "OFPTFFC_EPERM",
];
const BUNDLE_FAILED: &[&str] = &[
    "OFPBFC_UNKNOWN",
    "OFPBFC_EPERM",
    "OFPBFC_BAD_ID",
    "OFPBFC_BUNDLE_EXIST",
    "OFPBFC_BUNDLE_CLOSED",
    "OFPBFC_OUT_OF_BUNDLES",
    "OFPBFC_BAD_TYPE",
    "OFPBFC_BAD_FLAGS",
    "OFPBFC_MSG_BAD_LEN",
    "OFPBFC_MSG_BAD_XID",
    "OFPBFC_MSG_UNSUP",
    "OFPBFC_MSG_CONFLICT",
    "OFPBFC_MSG_TOO_MANY",
    "OFPBFC_MSG_FAILED",
    "OFPBFC_TIMEOUT",
    "OFPBFC_BUNDLE_IN_PROGRESS",
];

/// (type, name, code names) of the standard error types.
const ERROR_TYPES: &[(u16, &str, &[&str])] = &[
    (0, "OFPET_HELLO_FAILED", HELLO_FAILED),
    (1, "OFPET_BAD_REQUEST", BAD_REQUEST),
    (2, "OFPET_BAD_ACTION", BAD_ACTION),
    (3, "OFPET_BAD_INSTRUCTION", BAD_INSTRUCTION),
    (4, "OFPET_BAD_MATCH", BAD_MATCH),
    (5, "OFPET_FLOW_MOD_FAILED", FLOW_MOD_FAILED),
    (6, "OFPET_GROUP_MOD_FAILED", GROUP_MOD_FAILED),
    (7, "OFPET_PORT_MOD_FAILED", PORT_MOD_FAILED),
    (8, "OFPET_TABLE_MOD_FAILED", TABLE_MOD_FAILED),
    (9, "OFPET_QUEUE_OP_FAILED", QUEUE_OP_FAILED),
    (10, "OFPET_SWITCH_CONFIG_FAILED", SWITCH_CONFIG_FAILED),
    (11, "OFPET_ROLE_REQUEST_FAILED", ROLE_REQUEST_FAILED),
    (12, "OFPET_METER_MOD_FAILED", METER_MOD_FAILED),
    (13, "OFPET_TABLE_FEATURES_FAILED", TABLE_FEATURES_FAILED),
    (17, "OFPET_BUNDLE_FAILED", BUNDLE_FAILED),
];

/// Names of the Nicira extension errors Open vSwitch sends in OpenFlow 1.2+ (experimenter
/// 0x2320, by experimenter code).
fn nx_error_name(code: u16) -> Option<&'static str> {
    Some(match code {
        2 => "NXBRC_NXM_INVALID",
        3 => "NXBRC_NXM_BAD_TYPE",
        4 => "NXBRC_MUST_BE_ZERO",
        5 => "NXBRC_BAD_REASON",
        6 => "OFPMOFC_MONITOR_EXISTS",
        7 => "OFPMOFC_BAD_FLAGS",
        8 => "OFPMOFC_UNKNOWN_MONITOR",
        9 => "NXBRC_FM_BAD_EVENT",
        10 => "NXBRC_UNENCODABLE_ERROR",
        11 => "NXBAC_MUST_BE_ZERO",
        12 => "NXFMFC_HARDWARE",
        13 => "NXFMFC_BAD_TABLE_ID",
        15 => "NXBAC_BAD_CONJUNCTION",
        16 => "NXTTMFC_BAD_COMMAND",
        17 => "NXTTMFC_BAD_OPT_LEN",
        18 => "NXTTMFC_BAD_FIELD_IDX",
        19 => "NXTTMFC_TABLE_FULL",
        20 => "NXTTMFC_ALREADY_MAPPED",
        21 => "NXTTMFC_DUP_ENTRY",
        34 => "NXR_NOT_SUPPORTED",
        35 => "NXR_STALE",
        36 => "NXST_NOT_CONFIGURED",
        _ => return None,
    })
}

/// Names of the ONF extension errors of OpenFlow 1.3 (experimenter 0x4f4e4600).
fn onf_error_name(code: u16) -> Option<&'static str> {
    Some(match code {
        2300..=2315 => BUNDLE_FAILED[(code - 2300) as usize],
        2600 => "OFPBIC_DUP_INST",
        4250 => "OFPBAC_BAD_SET_MASK",
        4443 => "OFPBPC_TOO_MANY",
        4444 => "OFPBPC_DUP_TYPE",
        4445 => "OFPBPC_BAD_EXPERIMENTER",
        4446 => "OFPBPC_BAD_EXP_TYPE",
        4447 => "OFPBPC_BAD_EXP_VALUE",
        4448 => "OFPBPC_EPERM",
        _ => return None,
    })
}

/// An `OFPT_ERROR` from the switch: the standard type and code, or an experimenter error
/// (`type == 0xffff`) with its experimenter id and code, plus the data (usually the start of the
/// message that failed; ASCII text for `OFPET_HELLO_FAILED`).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SwitchError {
    /// `ofp_error_type`; 0xffff for experimenter errors.
    pub err_type: u16,
    /// The code (for experimenter errors: the experimenter's code, `exp_code`).
    pub code: u16,
    /// The experimenter id of an experimenter error.
    pub experimenter: Option<u32>,
    /// The data that followed.
    pub data: Vec<u8>,
}

impl SwitchError {
    /// Decodes the body of an `OFPT_ERROR` message.
    pub fn decode(body: &[u8]) -> Result<SwitchError, WireError> {
        need(body, 4, "error message")?;
        let err_type = be16(body, 0);
        let code = be16(body, 2);
        if err_type == errors::OFPET_EXPERIMENTER {
            need(body, 8, "experimenter error message")?;
            return Ok(SwitchError {
                err_type,
                code,
                experimenter: Some(be32(body, 4)),
                data: body[8..].to_vec(),
            });
        }
        Ok(SwitchError {
            err_type,
            code,
            experimenter: None,
            data: body[4..].to_vec(),
        })
    }

    /// Encodes the body (used by fake switches in tests).
    pub fn encode_body(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + self.data.len());
        out.extend_from_slice(&self.err_type.to_be_bytes());
        out.extend_from_slice(&self.code.to_be_bytes());
        if let Some(e) = self.experimenter {
            out.extend_from_slice(&e.to_be_bytes());
        }
        out.extend_from_slice(&self.data);
        out
    }

    /// The name of the error type (`OFPET_BAD_ACTION`), when known.
    pub fn type_name(&self) -> Option<&'static str> {
        if self.err_type == errors::OFPET_EXPERIMENTER {
            return Some(match self.experimenter {
                Some(ONF_EXPERIMENTER) => "ONF experimenter error",
                Some(NX_EXPERIMENTER) => "Nicira experimenter error",
                _ => "OFPET_EXPERIMENTER",
            });
        }
        ERROR_TYPES
            .iter()
            .find(|(t, _, _)| *t == self.err_type)
            .map(|(_, n, _)| *n)
    }

    /// The name of the code (`OFPBAC_BAD_OUT_GROUP`, `OFPBFC_MSG_FAILED`...), when known.
    /// Bundle errors have the same names whether sent as ONF experimenter errors (OpenFlow 1.3)
    /// or as `OFPET_BUNDLE_FAILED` (1.4).
    pub fn code_name(&self) -> Option<&'static str> {
        match self.experimenter {
            Some(ONF_EXPERIMENTER) => onf_error_name(self.code),
            Some(NX_EXPERIMENTER) => nx_error_name(self.code),
            Some(_) => None,
            None => ERROR_TYPES
                .iter()
                .find(|(t, _, _)| *t == self.err_type)
                .and_then(|(_, _, codes)| codes.get(self.code as usize).copied()),
        }
    }

    /// Whether this is the error that fails a whole bundle because one of its messages failed.
    pub fn is_bundle_msg_failed(&self) -> bool {
        self.code_name() == Some("OFPBFC_MSG_FAILED")
    }

    /// The header of the offending message when the data carries one: (type, xid).
    pub fn offending(&self) -> Option<(u8, u32)> {
        (self.err_type != errors::OFPET_HELLO_FAILED && self.data.len() >= HEADER_LEN)
            .then(|| (self.data[1], be32(&self.data, 4)))
    }
}

impl fmt::Display for SwitchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.experimenter, self.code_name()) {
            (Some(exp), Some(name)) => {
                write!(f, "{name} (experimenter {exp:#010x} code {})", self.code)?
            }
            (Some(exp), None) => write!(f, "experimenter {exp:#010x} error code {}", self.code)?,
            (None, code) => {
                let t = self.type_name().unwrap_or("unknown error type");
                match code {
                    Some(c) => write!(f, "{t} {c} (type {}, code {})", self.err_type, self.code)?,
                    None => write!(f, "{t} (type {}, code {})", self.err_type, self.code)?,
                }
            }
        }
        if self.err_type == errors::OFPET_HELLO_FAILED && !self.data.is_empty() {
            let text = String::from_utf8_lossy(&self.data);
            let text = text.trim_matches(|c: char| c == '\0' || c.is_whitespace());
            if !text.is_empty() {
                write!(f, ": {text}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_offers_only_1_3_with_a_bitmap() {
        let h = encode_hello(7);
        assert_eq!(h, vec![4, 0, 0, 16, 0, 0, 0, 7, 0, 1, 0, 8, 0, 0, 0, 0x10]);
        let mut fb = FrameBuffer::new();
        fb.extend(&h);
        let msg = fb.next_msg().unwrap().unwrap();
        assert_eq!(hello_versions(&msg).unwrap(), vec![4]);
    }

    #[test]
    fn hello_without_bitmap_offers_versions_up_to_its_own() {
        let msg = RawMsg {
            version: 1,
            msg_type: 0,
            xid: 1,
            body: vec![],
        };
        assert_eq!(hello_versions(&msg).unwrap(), vec![1]);
        assert_eq!(version_names(&hello_versions(&msg).unwrap()), "1.0");
        // OVS 3.1 offering 1.0 to 1.5.
        let msg = RawMsg {
            version: 6,
            msg_type: 0,
            xid: 1,
            body: vec![0, 1, 0, 8, 0, 0, 0, 0x7e],
        };
        assert_eq!(hello_versions(&msg).unwrap(), vec![1, 2, 3, 4, 5, 6]);
        let bad = RawMsg {
            version: 6,
            msg_type: 0,
            xid: 1,
            body: vec![0, 1, 0, 40, 0, 0, 0, 0],
        };
        assert!(hello_versions(&bad).is_err());
    }

    #[test]
    fn frames_split_across_reads_and_several_per_read() {
        let a = encode_barrier_request(1);
        let b = encode_echo_request(2, b"ping");
        let c = encode_features_request(3);
        let mut stream = Vec::new();
        stream.extend(&a);
        stream.extend(&b);
        stream.extend(&c);
        let mut fb = FrameBuffer::new();
        let mut got = Vec::new();
        // One byte at a time, then everything at once.
        for byte in &stream {
            fb.extend(std::slice::from_ref(byte));
            while let Some(m) = fb.next_msg().unwrap() {
                got.push(m);
            }
        }
        fb.extend(&stream);
        while let Some(m) = fb.next_msg().unwrap() {
            got.push(m);
        }
        assert_eq!(got.len(), 6);
        assert_eq!(got[1].body, b"ping");
        assert_eq!(got[1].msg_type, msg_type::ECHO_REQUEST);
        assert_eq!(got[5].xid, 3);
        assert_eq!(fb.pending(), 0);
    }

    #[test]
    fn a_length_below_the_header_is_a_framing_error() {
        let mut fb = FrameBuffer::new();
        fb.extend(&[4, 0, 0, 4, 0, 0, 0, 1]);
        assert!(matches!(fb.next_msg(), Err(WireError::Malformed { .. })));
    }

    #[test]
    fn echo_reply_mirrors_the_request() {
        let req = RawMsg {
            version: 4,
            msg_type: 2,
            xid: 99,
            body: b"abc".to_vec(),
        };
        let rep = encode_echo_reply(&req).unwrap();
        assert_eq!(rep, vec![4, 3, 0, 11, 0, 0, 0, 99, b'a', b'b', b'c']);
    }

    #[test]
    fn too_long_messages_are_refused() {
        assert!(matches!(
            encode_msg(14, 1, &vec![0; 65528]),
            Err(WireError::TooLong { .. })
        ));
        assert!(encode_msg(14, 1, &vec![0; 65527]).is_ok());
    }

    #[test]
    fn features_reply_decodes() {
        let mut body = vec![0u8; 24];
        body[..8].copy_from_slice(&0x0000_1234_5678_9abcu64.to_be_bytes());
        body[12] = 254;
        let f = decode_features_reply(&body).unwrap();
        assert_eq!(f.datapath_id, 0x1234_5678_9abc);
        assert_eq!(f.n_tables, 254);
        assert!(decode_features_reply(&body[..20]).is_err());
    }

    #[test]
    fn standard_errors_are_named() {
        let e = SwitchError::decode(&[0, 2, 0, 9, 4, 14, 0, 8, 0, 0, 0, 5]).unwrap();
        assert_eq!(e.type_name(), Some("OFPET_BAD_ACTION"));
        assert_eq!(e.code_name(), Some("OFPBAC_BAD_OUT_GROUP"));
        assert_eq!(
            e.to_string(),
            "OFPET_BAD_ACTION OFPBAC_BAD_OUT_GROUP (type 2, code 9)"
        );
        assert_eq!(e.offending(), Some((14, 5)));
        let e = SwitchError::decode(&[0, 4, 0, 9]).unwrap();
        assert_eq!(e.code_name(), Some("OFPBMC_BAD_PREREQ"));
        let e = SwitchError::decode(&[0, 3, 0, 2]).unwrap();
        assert_eq!(e.code_name(), Some("OFPBIC_BAD_TABLE_ID"));
        let e = SwitchError::decode(&[0, 17, 0, 13]).unwrap();
        assert!(e.is_bundle_msg_failed());
        let e = SwitchError::decode(&[0, 99, 0, 1]).unwrap();
        assert_eq!(e.to_string(), "unknown error type (type 99, code 1)");
        assert!(SwitchError::decode(&[0, 1]).is_err());
    }

    #[test]
    fn experimenter_errors_are_named() {
        // OFPBFC_MSG_FAILED as OVS sends it in OpenFlow 1.3.
        let body = [0xff, 0xff, 0x09, 0x09, 0x4f, 0x4e, 0x46, 0x00];
        let e = SwitchError::decode(&body).unwrap();
        assert_eq!(e.experimenter, Some(ONF_EXPERIMENTER));
        assert_eq!(e.code, 2313);
        assert!(e.is_bundle_msg_failed());
        assert_eq!(
            e.to_string(),
            "OFPBFC_MSG_FAILED (experimenter 0x4f4e4600 code 2313)"
        );
        assert_eq!(e.encode_body(), body);
        let e = SwitchError::decode(&[0xff, 0xff, 0, 12, 0, 0, 0x23, 0x20]).unwrap();
        assert_eq!(e.code_name(), Some("NXFMFC_HARDWARE"));
        assert!(SwitchError::decode(&[0xff, 0xff, 0, 12, 0, 0]).is_err());
    }

    #[test]
    fn hello_failed_shows_its_text() {
        let mut body = vec![0, 0, 0, 0];
        body.extend_from_slice(b"We support version 0x01, you support version 0x04\0");
        let e = SwitchError::decode(&body).unwrap();
        assert_eq!(
            e.to_string(),
            "OFPET_HELLO_FAILED OFPHFC_INCOMPATIBLE (type 0, code 0): We support version 0x01, \
             you support version 0x04"
        );
        assert_eq!(e.offending(), None);
    }

    #[test]
    fn multipart_reply_header() {
        let body = [0, 1, 0, 1, 0, 0, 0, 0, 9, 9];
        let (h, rest) = decode_multipart_reply(&body).unwrap();
        assert_eq!(h.mp_type, OFPMP_FLOW);
        assert!(h.more());
        assert_eq!(rest, &[9, 9]);
        assert!(decode_multipart_reply(&body[..7]).is_err());
    }
}
