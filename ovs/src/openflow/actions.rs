//! `Action`s and instructions <-> OpenFlow 1.3 wire form, with the Nicira extension actions
//! Open vSwitch 3.1 speaks.
//!
//! Each action is encoded the way Open vSwitch itself encodes it for OpenFlow 1.3, so that a flow
//! dumped back from the switch decodes to the value that was installed:
//!
//! | action | wire |
//! |---|---|
//! | `Output(p)` | `OFPAT_OUTPUT` (max_len 0) |
//! | `Controller{max_len}` | `OFPAT_OUTPUT` to `OFPP_CONTROLLER` |
//! | `Group(g)` | `OFPAT_GROUP` |
//! | `SetField` | `OFPAT_SET_FIELD` with the field's OXM header |
//! | `Load` | `NXAST_REG_LOAD` |
//! | `Move` | `NXAST_REG_MOVE` |
//! | `Resubmit{table}` | `NXAST_RESUBMIT_TABLE` with in_port `OFPP_IN_PORT` |
//! | `OutputReg` | `NXAST_OUTPUT_REG` |
//! | `Note` | `NXAST_NOTE` |
//! | `Ct` | `NXAST_CT`, nesting `NXAST_NAT` first and then the exec actions |
//! | `Conjunction{id,clause,n_clauses}` | `NXAST_CONJUNCTION` (clause 0-based on the wire) |
//! | `ToController{max_len,userdata,meter_id}` | `NXAST_CONTROLLER2` with its `NXAC2PT_*` properties |
//!
//! Layouts follow `lib/ofp-actions.c` of Open vSwitch (`struct nx_action_*`). Every action is a
//! multiple of 8 bytes; lengths are patched after the body is written.
//!
//! Decoding accepts exactly these forms (and both NXM and OXM headers for fields); anything else
//! (other OpenFlow actions, other Nicira subtypes, other experimenters, IPv6 NAT, `ct` with an
//! ALG) is [`CodecError::Unsupported`], so a dump never silently loses an action. Decoded values
//! go through the model's checked constructors, so they satisfy the same invariants as values
//! built by hand.
//!
//! Instructions: meter, apply-actions and goto-table exist in the model (a leading
//! `Action::Meter` is the `OFPIT_METER` instruction, which precedes the others); other
//! instructions are refused when decoding.
//!
//! Why one piece: the table above is one contract with Open vSwitch's own encoding; each action's
//! encoder sits beside its decoder, so a dumped flow decodes to the value that was installed.

use std::net::Ipv4Addr;

use super::reader::{be_u128, len_u16, pad_to_8, patch_u16, Reader};
use super::CodecError;
use crate::flow::{
    ports, Action, Ct, CtZone, Field, FlowError, Load, Move, Nat, NatKind, Note, SetField, Subfield,
};

/// `OFPAT_OUTPUT`.
pub const OFPAT_OUTPUT: u16 = 0;
/// `OFPAT_GROUP`.
pub const OFPAT_GROUP: u16 = 22;
/// `OFPAT_SET_FIELD`.
pub const OFPAT_SET_FIELD: u16 = 25;
/// `OFPAT_EXPERIMENTER`.
pub const OFPAT_EXPERIMENTER: u16 = 0xffff;
/// The Nicira experimenter id.
pub const NX_VENDOR_ID: u32 = 0x0000_2320;

/// Nicira action subtypes this codec knows.
pub mod nxast {
    /// `NXAST_REG_MOVE`.
    pub const REG_MOVE: u16 = 6;
    /// `NXAST_REG_LOAD`.
    pub const REG_LOAD: u16 = 7;
    /// `NXAST_NOTE`.
    pub const NOTE: u16 = 8;
    /// `NXAST_RESUBMIT_TABLE`.
    pub const RESUBMIT_TABLE: u16 = 14;
    /// `NXAST_OUTPUT_REG`.
    pub const OUTPUT_REG: u16 = 15;
    /// `NXAST_CT`.
    pub const CT: u16 = 35;
    /// `NXAST_NAT`.
    pub const NAT: u16 = 36;
    /// `NXAST_CONTROLLER2`.
    pub const CONTROLLER2: u16 = 37;
    /// `NXAST_CONJUNCTION`.
    pub const CONJUNCTION: u16 = 34;
}

/// `OFPIT_GOTO_TABLE`.
pub const OFPIT_GOTO_TABLE: u16 = 1;
/// `OFPIT_APPLY_ACTIONS`.
pub const OFPIT_APPLY_ACTIONS: u16 = 4;
/// `OFPIT_METER`.
pub const OFPIT_METER: u16 = 6;

/// 16-bit `OFPP_IN_PORT`, the in_port of `resubmit(,T)`.
const OFPP_IN_PORT_16: u16 = 0xfff8;
/// `NX_CT_F_COMMIT`.
const NX_CT_F_COMMIT: u16 = 1;
/// `NX_CT_F_FORCE`.
const NX_CT_F_FORCE: u16 = 2;
/// `NX_CT_RECIRC_NONE`.
const NX_CT_RECIRC_NONE: u8 = 0xff;
const NX_NAT_F_SRC: u16 = 1;
const NX_NAT_F_DST: u16 = 2;
const NX_NAT_F_PERSISTENT: u16 = 4;
const NX_NAT_F_PROTO_HASH: u16 = 8;
const NX_NAT_F_PROTO_RANDOM: u16 = 16;
const NX_NAT_RANGE_IPV4_MIN: u16 = 1;
const NX_NAT_RANGE_IPV4_MAX: u16 = 2;
const NX_NAT_RANGE_IPV6_MIN: u16 = 4;
const NX_NAT_RANGE_IPV6_MAX: u16 = 8;
const NX_NAT_RANGE_PROTO_MIN: u16 = 16;
const NX_NAT_RANGE_PROTO_MAX: u16 = 32;

fn put16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}
fn put32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}
fn put64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Starts a Nicira action: type, length placeholder, vendor, subtype. Returns its offset.
fn nx_header(out: &mut Vec<u8>, subtype: u16) -> usize {
    let start = out.len();
    put16(out, OFPAT_EXPERIMENTER);
    put16(out, 0);
    put32(out, NX_VENDOR_ID);
    put16(out, subtype);
    start
}

/// Pads the action begun at `start` to 8 bytes and writes its length.
fn finish(out: &mut Vec<u8>, start: usize, what: &'static str) -> Result<(), CodecError> {
    pad_to_8(out, start);
    let len = len_u16(out, start, what)?;
    patch_u16(out, start + 2, len);
    Ok(())
}

/// `NXAC2PT_*` property types of `NXAST_CONTROLLER2` (`enum nx_action_controller2_prop_type`).
mod nxac2pt {
    pub(super) const MAX_LEN: u16 = 0;
    pub(super) const CONTROLLER_ID: u16 = 1;
    pub(super) const REASON: u16 = 2;
    pub(super) const USERDATA: u16 = 3;
    pub(super) const PAUSE: u16 = 4;
    pub(super) const METER_ID: u16 = 5;
}

/// `NXAST_CONTROLLER2` as Open vSwitch writes it (`encode_CONTROLLER`): the 16-byte extended
/// header, then only the properties that differ from their defaults, in type order, each
/// padded to 8 bytes.
fn encode_controller2(
    out: &mut Vec<u8>,
    max_len: u16,
    userdata: &[u8],
    meter_id: Option<u32>,
    controller_id: u16,
) -> Result<(), CodecError> {
    let start = nx_header(out, nxast::CONTROLLER2);
    out.extend_from_slice(&[0; 6]);
    let prop = |out: &mut Vec<u8>, ty: u16, value: &[u8]| -> Result<(), CodecError> {
        let at = out.len();
        put16(out, ty);
        put16(out, 0);
        out.extend_from_slice(value);
        let len = len_u16(out, at, "NXAST_CONTROLLER2 property")?;
        patch_u16(out, at + 2, len);
        pad_to_8(out, at);
        Ok(())
    };
    if max_len != u16::MAX {
        prop(out, nxac2pt::MAX_LEN, &max_len.to_be_bytes())?;
    }
    if controller_id != 0 {
        prop(out, nxac2pt::CONTROLLER_ID, &controller_id.to_be_bytes())?;
    }
    prop(out, nxac2pt::USERDATA, userdata)?;
    if let Some(m) = meter_id {
        prop(out, nxac2pt::METER_ID, &m.to_be_bytes())?;
    }
    finish(out, start, "NXAST_CONTROLLER2")
}

/// Reads `NXAST_CONTROLLER2`'s properties (`r` after the subtype). A reason other than
/// `action` and `pause` are refused: nothing here writes them, and a row holding one must not
/// decode to a row without it.
fn decode_controller2(mut r: Reader<'_>) -> Result<Action, CodecError> {
    r.set_what("NXAST_CONTROLLER2");
    if r.take(6)?.iter().any(|b| *b != 0) {
        return Err(CodecError::Malformed {
            what: "NXAST_CONTROLLER2",
            detail: "padding is not zero".into(),
        });
    }
    let (mut max_len, mut userdata, mut meter_id, mut controller_id) =
        (u16::MAX, Vec::new(), None, 0);
    while r.remaining() > 0 {
        let ty = r.u16()?;
        let len = usize::from(r.u16()?);
        if len < 4 {
            return Err(CodecError::Malformed {
                what: "NXAST_CONTROLLER2",
                detail: format!("property {ty} of length {len}"),
            });
        }
        let mut p = Reader::new(r.take(len - 4)?, "NXAST_CONTROLLER2 property");
        r.skip((8 - len % 8) % 8)?;
        match ty {
            nxac2pt::MAX_LEN => max_len = p.u16()?,
            nxac2pt::USERDATA => userdata = p.rest().to_vec(),
            nxac2pt::METER_ID => meter_id = Some(p.u32()?),
            nxac2pt::REASON if p.u8()? == 1 => {}
            nxac2pt::CONTROLLER_ID => controller_id = p.u16()?,
            nxac2pt::REASON | nxac2pt::PAUSE => {
                return Err(CodecError::Unsupported {
                    what: "NXAST_CONTROLLER2",
                    detail: format!("property {ty} (reason or pause)"),
                })
            }
            other => {
                return Err(CodecError::Unsupported {
                    what: "NXAST_CONTROLLER2",
                    detail: format!("unknown property {other}"),
                })
            }
        }
    }
    let a = Action::ToController {
        max_len,
        userdata,
        meter_id,
        controller_id,
    };
    a.validate().map_err(malformed("NXAST_CONTROLLER2"))?;
    Ok(a)
}

/// Appends the wire form of `actions` (each padded to 8 bytes) to `out`.
pub fn encode_actions(actions: &[Action], out: &mut Vec<u8>) -> Result<(), CodecError> {
    for a in actions {
        encode_action(a, out)?;
    }
    Ok(())
}

/// Refuses actions that the model's constructors refuse but that can be built directly from the
/// public variants, so that every encoded action decodes back to itself.
fn check_encodable(a: &Action) -> Result<(), FlowError> {
    a.validate()?;
    match a {
        Action::Output(ports::CONTROLLER) => Err(FlowError::Invalid(
            "output to CONTROLLER must be Action::Controller (it carries max_len)".into(),
        )),
        Action::Group(id) => Action::group(*id).map(|_| ()),
        Action::OutputReg(src) => Action::output_reg(*src).map(|_| ()),
        Action::Meter(id) => Err(FlowError::Invalid(format!(
            "meter:{id} is an instruction: only valid as the first action of a flow"
        ))),
        _ => Ok(()),
    }
}

fn encode_action(a: &Action, out: &mut Vec<u8>) -> Result<(), CodecError> {
    check_encodable(a)?;
    match a {
        Action::Output(port) => encode_output(out, *port, 0),
        Action::Controller { max_len } => encode_output(out, ports::CONTROLLER, *max_len),
        Action::ToController {
            max_len,
            userdata,
            meter_id,
            controller_id,
        } => encode_controller2(out, *max_len, userdata, *meter_id, *controller_id)?,
        Action::Group(id) => {
            put16(out, OFPAT_GROUP);
            put16(out, 8);
            put32(out, *id);
        }
        // Refused by check_encodable: a meter is an instruction, not an action; an undecoded
        // action fails validation.
        Action::Meter(_) | Action::Undecoded(_) => {}
        Action::SetField(sf) => encode_set_field(out, sf)?,
        Action::Load(l) => {
            let start = nx_header(out, nxast::REG_LOAD);
            put16(out, l.dst().ofs_nbits());
            put32(out, l.dst().field().nxm_header());
            put64(out, l.value());
            finish(out, start, "NXAST_REG_LOAD")?;
        }
        Action::Move(m) => {
            let start = nx_header(out, nxast::REG_MOVE);
            put16(out, u16::from(m.src().n_bits()));
            put16(out, u16::from(m.src().ofs()));
            put16(out, u16::from(m.dst().ofs()));
            put32(out, m.src().field().nxm_header());
            put32(out, m.dst().field().nxm_header());
            finish(out, start, "NXAST_REG_MOVE")?;
        }
        Action::Resubmit { table } => {
            let start = nx_header(out, nxast::RESUBMIT_TABLE);
            put16(out, OFPP_IN_PORT_16);
            out.push(*table);
            finish(out, start, "NXAST_RESUBMIT_TABLE")?;
        }
        Action::OutputReg(src) => {
            let start = nx_header(out, nxast::OUTPUT_REG);
            put16(out, src.ofs_nbits());
            put32(out, src.field().nxm_header());
            // What `ovs-ofctl` puts for `output:SUBFIELD`; Open vSwitch does not print it.
            put16(out, u16::MAX);
            finish(out, start, "NXAST_OUTPUT_REG")?;
        }
        Action::Note(note) => {
            let start = nx_header(out, nxast::NOTE);
            out.extend_from_slice(note.bytes());
            finish(out, start, "NXAST_NOTE")?;
        }
        Action::Ct(ct) => encode_ct(out, ct)?,
        Action::Conjunction {
            id,
            clause,
            n_clauses,
        } => {
            // struct nx_action_conjunction: the clause is 0-based on the wire.
            let start = nx_header(out, nxast::CONJUNCTION);
            out.push(clause - 1);
            out.push(*n_clauses);
            put32(out, *id);
            finish(out, start, "NXAST_CONJUNCTION")?;
        }
    }
    Ok(())
}

fn encode_output(out: &mut Vec<u8>, port: u32, max_len: u16) {
    put16(out, OFPAT_OUTPUT);
    put16(out, 16);
    put32(out, port);
    put16(out, max_len);
    out.extend_from_slice(&[0; 6]);
}

fn encode_set_field(out: &mut Vec<u8>, sf: &SetField) -> Result<(), CodecError> {
    let start = out.len();
    put16(out, OFPAT_SET_FIELD);
    put16(out, 0);
    let field = sf.field();
    put32(out, field.oxm_header());
    let bytes = field.bytes() as usize;
    out.extend_from_slice(&sf.value().to_be_bytes()[16 - bytes..]);
    finish(out, start, "OFPAT_SET_FIELD")
}

fn encode_ct(out: &mut Vec<u8>, ct: &Ct) -> Result<(), CodecError> {
    if let Some(nat) = ct.nat_spec() {
        // Open vSwitch refuses a NAT with arguments in an uncommitted ct (decode_NXAST_RAW_CT).
        if !ct.is_commit() && nat.kind().is_some() {
            return Err(FlowError::Invalid(
                "ct(nat(src|dst...)) needs commit; only plain nat works without it".into(),
            )
            .into());
        }
    }
    if ct.recirc_table() == Some(NX_CT_RECIRC_NONE) {
        return Err(
            FlowError::Invalid("ct(table=255): 255 means no table on the wire".into()).into(),
        );
    }
    let start = nx_header(out, nxast::CT);
    let mut flags = 0;
    if ct.is_commit() {
        flags |= NX_CT_F_COMMIT;
    }
    if ct.is_force() {
        flags |= NX_CT_F_FORCE;
    }
    put16(out, flags);
    match ct.zone_spec() {
        CtZone::Default => {
            put32(out, 0);
            put16(out, 0);
        }
        CtZone::Immediate(z) => {
            put32(out, 0);
            put16(out, z);
        }
        CtZone::Field(sf) => {
            put32(out, sf.field().nxm_header());
            put16(out, sf.ofs_nbits());
        }
    }
    out.push(ct.recirc_table().unwrap_or(NX_CT_RECIRC_NONE));
    out.extend_from_slice(&[0; 3]);
    put16(out, 0); // alg
    if let Some(nat) = ct.nat_spec() {
        encode_nat(out, &nat)?;
    }
    encode_actions(ct.exec_actions(), out)?;
    finish(out, start, "NXAST_CT")
}

fn encode_nat(out: &mut Vec<u8>, nat: &Nat) -> Result<(), CodecError> {
    let start = nx_header(out, nxast::NAT);
    out.extend_from_slice(&[0; 2]);
    let mut flags = match nat.kind() {
        None => 0,
        Some(NatKind::Src) => NX_NAT_F_SRC,
        Some(NatKind::Dst) => NX_NAT_F_DST,
    };
    let (persistent, hash, random) = nat.flag_bits();
    if persistent {
        flags |= NX_NAT_F_PERSISTENT;
    }
    if hash {
        flags |= NX_NAT_F_PROTO_HASH;
    }
    if random {
        flags |= NX_NAT_F_PROTO_RANDOM;
    }
    put16(out, flags);
    let present_at = out.len();
    put16(out, 0);
    // Like Open vSwitch: the maximum is sent only when it differs from the minimum, and the
    // decoder reads a missing maximum as equal to the minimum.
    let mut present = 0;
    if let Some((min, max)) = nat.addrs() {
        if min.is_unspecified() {
            return Err(FlowError::Invalid("nat range cannot start at 0.0.0.0".into()).into());
        }
        present |= NX_NAT_RANGE_IPV4_MIN;
        put32(out, u32::from(min));
        if max != min {
            present |= NX_NAT_RANGE_IPV4_MAX;
            put32(out, u32::from(max));
        }
    }
    if let Some((min, max)) = nat.port_range() {
        present |= NX_NAT_RANGE_PROTO_MIN;
        put16(out, min);
        if max != min {
            present |= NX_NAT_RANGE_PROTO_MAX;
            put16(out, max);
        }
    }
    patch_u16(out, present_at, present);
    finish(out, start, "NXAST_NAT")
}

/// One decoded item of an action list: an action, or a NAT (only valid first inside `ct`).
enum Item {
    Action(Action),
    Nat(Nat),
}

/// Decodes a complete action list.
pub fn decode_actions(buf: &[u8]) -> Result<Vec<Action>, CodecError> {
    decode_items(buf, false)?
        .into_iter()
        .map(|i| match i {
            Item::Action(a) => Ok(a),
            Item::Nat(_) => Err(CodecError::Malformed {
                what: "action list",
                detail: "NXAST_NAT outside of NXAST_CT".into(),
            }),
        })
        .collect()
}

/// Decodes a list of actions; `in_ct` when it is the nested list of a `ct`, where another `ct`
/// is refused before it is decoded (Open vSwitch refuses it too), which also bounds recursion.
fn decode_items(buf: &[u8], in_ct: bool) -> Result<Vec<Item>, CodecError> {
    let mut r = Reader::new(buf, "action");
    let mut items = Vec::new();
    while r.remaining() > 0 {
        let ty = r.u16()?;
        let len = r.u16()? as usize;
        r.check_len(len, 8, || {
            format!("action type {ty} has length {len} (needs a multiple of 8, >= 8)")
        })?;
        let body = r.take(len - 4)?;
        items.push(decode_one(ty, len, body, in_ct)?);
    }
    Ok(items)
}

fn malformed(what: &'static str) -> impl FnOnce(FlowError) -> CodecError {
    move |e| CodecError::Malformed {
        what,
        detail: e.to_string(),
    }
}

/// The field whose NXM/OXM header is `hdr`, which must be unmasked and of the field's width.
fn field_from_header(hdr: u32, what: &'static str) -> Result<Field, CodecError> {
    let f = Field::from_header(hdr).ok_or_else(|| CodecError::Unsupported {
        what,
        detail: format!(
            "field class {:#06x} field {} (header {hdr:#010x})",
            hdr >> 16,
            (hdr >> 9) & 0x7f
        ),
    })?;
    if hdr & 0x100 != 0 || (hdr & 0xff) as u8 != f.bytes() {
        return Err(CodecError::Malformed {
            what,
            detail: format!(
                "header {hdr:#010x} for {} has the wrong length or a mask",
                f.name()
            ),
        });
    }
    Ok(f)
}

/// Decodes one action of type `ty` and total length `len`; `body` is everything after the
/// 4-byte type/length.
fn decode_one(ty: u16, len: usize, body: &[u8], in_ct: bool) -> Result<Item, CodecError> {
    let mut r = Reader::new(body, "action");
    let action = match ty {
        OFPAT_OUTPUT => {
            r.set_what("OFPAT_OUTPUT");
            let port = r.u32()?;
            let max_len = r.u16()?;
            if port == ports::CONTROLLER {
                Action::Controller { max_len }
            } else {
                Action::output(port).map_err(malformed("OFPAT_OUTPUT"))?
            }
        }
        OFPAT_GROUP => {
            r.set_what("OFPAT_GROUP");
            Action::group(r.u32()?).map_err(malformed("OFPAT_GROUP"))?
        }
        OFPAT_SET_FIELD => {
            r.set_what("OFPAT_SET_FIELD");
            let hdr = r.u32()?;
            let field = field_from_header(hdr, "OFPAT_SET_FIELD")?;
            let value = be_u128(r.take(field.bytes() as usize)?);
            Action::SetField(SetField::new(field, value).map_err(malformed("OFPAT_SET_FIELD"))?)
        }
        OFPAT_EXPERIMENTER => {
            let vendor = r.u32()?;
            if vendor != NX_VENDOR_ID {
                return Err(CodecError::Unsupported {
                    what: "action",
                    detail: format!("experimenter {vendor:#010x}"),
                });
            }
            let subtype = r.u16()?;
            return decode_nx(subtype, len, r, in_ct);
        }
        other => {
            return Err(CodecError::Unsupported {
                what: "action",
                detail: format!("OpenFlow action type {other}"),
            })
        }
    };
    Ok(Item::Action(action))
}

/// Decodes a Nicira action; `r` is positioned after the subtype.
fn decode_nx(subtype: u16, len: usize, mut r: Reader<'_>, in_ct: bool) -> Result<Item, CodecError> {
    let action = match subtype {
        nxast::REG_LOAD => {
            r.set_what("NXAST_REG_LOAD");
            let ofs_nbits = r.u16()?;
            let field = field_from_header(r.u32()?, "NXAST_REG_LOAD")?;
            let value = r.u64()?;
            let dst =
                Subfield::from_ofs_nbits(field, ofs_nbits).map_err(malformed("NXAST_REG_LOAD"))?;
            Action::Load(Load::new(dst, value).map_err(malformed("NXAST_REG_LOAD"))?)
        }
        nxast::REG_MOVE => {
            r.set_what("NXAST_REG_MOVE");
            let n_bits = r.u16()?;
            let src_ofs = r.u16()?;
            let dst_ofs = r.u16()?;
            let src = field_from_header(r.u32()?, "NXAST_REG_MOVE")?;
            let dst = field_from_header(r.u32()?, "NXAST_REG_MOVE")?;
            let range = |f: Field, ofs: u16| -> Result<Subfield, CodecError> {
                let end = u32::from(ofs) + u32::from(n_bits);
                if n_bits == 0 || end > u32::from(f.bits()) {
                    return Err(CodecError::Malformed {
                        what: "NXAST_REG_MOVE",
                        detail: format!(
                            "{n_bits} bits at offset {ofs} do not fit {}",
                            f.nxm_name()
                        ),
                    });
                }
                Subfield::range(f, ofs as u8, (end - 1) as u8).map_err(malformed("NXAST_REG_MOVE"))
            };
            let m = Move::new(range(src, src_ofs)?, range(dst, dst_ofs)?)
                .map_err(malformed("NXAST_REG_MOVE"))?;
            Action::Move(m)
        }
        nxast::RESUBMIT_TABLE => {
            r.set_what("NXAST_RESUBMIT_TABLE");
            let in_port = r.u16()?;
            let table = r.u8()?;
            if in_port != OFPP_IN_PORT_16 {
                return Err(CodecError::Unsupported {
                    what: "NXAST_RESUBMIT_TABLE",
                    detail: format!("resubmit with in_port {in_port:#06x} (only resubmit(,T))"),
                });
            }
            Action::resubmit(table).map_err(malformed("NXAST_RESUBMIT_TABLE"))?
        }
        nxast::OUTPUT_REG => {
            r.set_what("NXAST_OUTPUT_REG");
            let ofs_nbits = r.u16()?;
            let field = field_from_header(r.u32()?, "NXAST_OUTPUT_REG")?;
            let src = Subfield::from_ofs_nbits(field, ofs_nbits)
                .map_err(malformed("NXAST_OUTPUT_REG"))?;
            Action::output_reg(src).map_err(malformed("NXAST_OUTPUT_REG"))?
        }
        nxast::NOTE => {
            let bytes = r.rest();
            let note = Note::new(bytes);
            if note.bytes() != bytes {
                return Err(CodecError::Malformed {
                    what: "NXAST_NOTE",
                    detail: format!("note of {len} bytes is not padded like the wire"),
                });
            }
            Action::Note(note)
        }
        nxast::CONTROLLER2 => decode_controller2(r)?,
        nxast::CONJUNCTION => {
            r.set_what("NXAST_CONJUNCTION");
            let clause = r.u8()?;
            let n_clauses = r.u8()?;
            let id = r.u32()?;
            Action::conjunction(id, clause.saturating_add(1), n_clauses)
                .map_err(malformed("NXAST_CONJUNCTION"))?
        }
        nxast::CT if in_ct => {
            return Err(CodecError::Unsupported {
                what: "NXAST_CT",
                detail: "ct nested inside ct".into(),
            })
        }
        nxast::CT => {
            r.set_what("NXAST_CT");
            return decode_ct(r).map(|ct| Item::Action(Action::Ct(ct)));
        }
        nxast::NAT => {
            r.set_what("NXAST_NAT");
            return decode_nat(r).map(Item::Nat);
        }
        other => {
            return Err(CodecError::Unsupported {
                what: "action",
                detail: format!("Nicira action subtype {other}"),
            })
        }
    };
    Ok(Item::Action(action))
}

fn decode_ct(mut r: Reader<'_>) -> Result<Ct, CodecError> {
    let flags = r.u16()?;
    let zone_src = r.u32()?;
    let zone = r.u16()?;
    let recirc = r.u8()?;
    r.skip(3)?;
    let alg = r.u16()?;
    if flags & !(NX_CT_F_COMMIT | NX_CT_F_FORCE) != 0 {
        return Err(CodecError::Unsupported {
            what: "NXAST_CT",
            detail: format!("flags {flags:#06x}"),
        });
    }
    if alg != 0 {
        return Err(CodecError::Unsupported {
            what: "NXAST_CT",
            detail: format!("alg {alg}"),
        });
    }
    let mut ct = Ct::new();
    if flags & NX_CT_F_FORCE != 0 {
        if flags & NX_CT_F_COMMIT == 0 {
            return Err(CodecError::Malformed {
                what: "NXAST_CT",
                detail: "force without commit".into(),
            });
        }
        ct = ct.force();
    } else if flags & NX_CT_F_COMMIT != 0 {
        ct = ct.commit();
    }
    if recirc != NX_CT_RECIRC_NONE {
        ct = ct.table(recirc);
    }
    if zone_src != 0 {
        let field = field_from_header(zone_src, "NXAST_CT")?;
        let sf = Subfield::from_ofs_nbits(field, zone).map_err(malformed("NXAST_CT"))?;
        ct = ct.zone_from(sf).map_err(malformed("NXAST_CT"))?;
    } else {
        ct = ct.zone(zone);
    }
    let nested = decode_items(r.rest(), true)?;
    let mut first = true;
    for item in nested {
        match item {
            Item::Nat(nat) if first => ct = ct.nat(nat),
            Item::Nat(_) => {
                return Err(CodecError::Unsupported {
                    what: "NXAST_CT",
                    detail: "NXAST_NAT that is not the first nested action".into(),
                })
            }
            Item::Action(a) => ct = ct.exec(a).map_err(malformed("NXAST_CT"))?,
        }
        first = false;
    }
    Ok(ct)
}

fn decode_nat(mut r: Reader<'_>) -> Result<Nat, CodecError> {
    r.skip(2)?;
    let flags = r.u16()?;
    let present = r.u16()?;
    let bad = |detail: String| CodecError::Malformed {
        what: "NXAST_NAT",
        detail,
    };
    let known = NX_NAT_F_SRC
        | NX_NAT_F_DST
        | NX_NAT_F_PERSISTENT
        | NX_NAT_F_PROTO_HASH
        | NX_NAT_F_PROTO_RANDOM;
    if flags & !known != 0 {
        return Err(bad(format!("unknown flags {flags:#06x}")));
    }
    if present & (NX_NAT_RANGE_IPV6_MIN | NX_NAT_RANGE_IPV6_MAX) != 0 {
        return Err(CodecError::Unsupported {
            what: "NXAST_NAT",
            detail: "IPv6 address range".into(),
        });
    }
    let known_present = NX_NAT_RANGE_IPV4_MIN
        | NX_NAT_RANGE_IPV4_MAX
        | NX_NAT_RANGE_PROTO_MIN
        | NX_NAT_RANGE_PROTO_MAX;
    if present & !known_present != 0 {
        return Err(bad(format!("unknown range_present bits {present:#06x}")));
    }
    let kind = match (flags & NX_NAT_F_SRC != 0, flags & NX_NAT_F_DST != 0) {
        (false, false) => None,
        (true, false) => Some(NatKind::Src),
        (false, true) => Some(NatKind::Dst),
        (true, true) => return Err(bad("both src and dst".into())),
    };
    let mut addrs = None;
    if present & NX_NAT_RANGE_IPV4_MIN != 0 {
        let min = Ipv4Addr::from(r.u32()?);
        let max = if present & NX_NAT_RANGE_IPV4_MAX != 0 {
            Ipv4Addr::from(r.u32()?)
        } else {
            min
        };
        addrs = Some((min, max));
    } else if present & NX_NAT_RANGE_IPV4_MAX != 0 {
        return Err(bad("address maximum without minimum".into()));
    }
    let mut ports = None;
    if present & NX_NAT_RANGE_PROTO_MIN != 0 {
        let min = r.u16()?;
        let max = if present & NX_NAT_RANGE_PROTO_MAX != 0 {
            r.u16()?
        } else {
            min
        };
        ports = Some((min, max));
    } else if present & NX_NAT_RANGE_PROTO_MAX != 0 {
        return Err(bad("port maximum without minimum".into()));
    }
    let nat = match (kind, addrs) {
        (None, None) if ports.is_none() && flags == 0 => Nat::reverse(),
        (None, _) => return Err(bad("range or flags without src or dst".into())),
        (Some(k), None) => {
            if ports.is_some() || flags & !(NX_NAT_F_SRC | NX_NAT_F_DST) != 0 {
                return Err(CodecError::Unsupported {
                    what: "NXAST_NAT",
                    detail: "port range or flags without an address range".into(),
                });
            }
            Nat::kind_only(k)
        }
        (Some(k), Some((min, max))) => {
            let mut nat = Nat::new(k, min, max).map_err(malformed("NXAST_NAT"))?;
            if let Some((pmin, pmax)) = ports {
                nat = nat.ports(pmin, pmax).map_err(malformed("NXAST_NAT"))?;
            }
            nat.flags(
                flags & NX_NAT_F_PERSISTENT != 0,
                flags & NX_NAT_F_PROTO_HASH != 0,
                flags & NX_NAT_F_PROTO_RANDOM != 0,
            )
            .map_err(malformed("NXAST_NAT"))?
        }
    };
    Ok(nat)
}

/// Appends instructions: `OFPIT_METER` when the first action is [`Action::Meter`], then
/// `OFPIT_APPLY_ACTIONS` (omitted when no other action is left), then `OFPIT_GOTO_TABLE` when
/// `goto` is set.
pub fn encode_instructions(
    actions: &[Action],
    goto: Option<u8>,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let mut actions = actions;
    if let Some((Action::Meter(id), rest)) = actions.split_first() {
        Action::meter(*id)?;
        put16(out, OFPIT_METER);
        put16(out, 8);
        out.extend_from_slice(&id.to_be_bytes());
        actions = rest;
    }
    if !actions.is_empty() {
        let start = out.len();
        put16(out, OFPIT_APPLY_ACTIONS);
        put16(out, 0);
        out.extend_from_slice(&[0; 4]);
        encode_actions(actions, out)?;
        let len = len_u16(out, start, "OFPIT_APPLY_ACTIONS")?;
        patch_u16(out, start + 2, len);
    }
    if let Some(t) = goto {
        put16(out, OFPIT_GOTO_TABLE);
        put16(out, 8);
        out.push(t);
        out.extend_from_slice(&[0; 3]);
    }
    Ok(())
}

/// Decodes a complete instruction list into (apply-actions, goto_table).
pub fn decode_instructions(buf: &[u8]) -> Result<(Vec<Action>, Option<u8>), CodecError> {
    let mut r = Reader::new(buf, "instruction");
    let mut actions: Option<Vec<Action>> = None;
    let mut goto = None;
    let mut meter = None;
    while r.remaining() > 0 {
        let ty = r.u16()?;
        let len = r.u16()? as usize;
        r.check_len(len, 8, || format!("instruction type {ty} has length {len}"))?;
        let body = r.take(len - 4)?;
        let dup = || CodecError::Malformed {
            what: "instruction",
            detail: format!("instruction type {ty} appears twice"),
        };
        match ty {
            OFPIT_APPLY_ACTIONS => {
                if actions.is_some() {
                    return Err(dup());
                }
                actions = Some(decode_actions(&body[4..])?);
            }
            OFPIT_GOTO_TABLE => {
                if goto.is_some() {
                    return Err(dup());
                }
                goto = Some(body[0]);
            }
            OFPIT_METER => {
                if meter.is_some() {
                    return Err(dup());
                }
                let id = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
                meter = Some(Action::meter(id).map_err(malformed("OFPIT_METER"))?);
            }
            other => {
                let name = match other {
                    2 => "write-metadata".to_string(),
                    3 => "write-actions".to_string(),
                    5 => "clear-actions".to_string(),
                    0xffff => "experimenter".to_string(),
                    n => format!("type {n}"),
                };
                return Err(CodecError::Unsupported {
                    what: "instruction",
                    detail: format!("{name} instruction"),
                });
            }
        }
    }
    let mut actions = actions.unwrap_or_default();
    if let Some(m) = meter {
        actions.insert(0, m);
    }
    Ok((actions, goto))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::MacAddr;

    fn sf(s: &str) -> Subfield {
        s.parse().unwrap()
    }

    /// `controller(userdata=..,meter_id=..)` is `NXAST_CONTROLLER2` byte for byte as Open
    /// vSwitch writes it (properties padded to 8, defaults left out), prints as ovs-ofctl
    /// prints it, parses back, and refuses what it cannot carry.
    #[test]
    fn controller2_is_written_printed_and_refused_as_open_vswitch_does() {
        use crate::flow::{parse_actions, parse_flow, Names};
        let show = |a: &Action| {
            let mut f = parse_flow("table=0,actions=drop", &Names::new()).unwrap();
            f.actions = vec![a.clone()];
            f.actions_text(None)
        };
        let parse = |t: &str| parse_actions(t, &Names::new()).map(|(a, _)| a);
        let a = Action::to_controller(vec![1, 2, 3], Some(7)).unwrap();
        let mut out = Vec::new();
        encode_actions(std::slice::from_ref(&a), &mut out).unwrap();
        assert_eq!(
            out,
            [
                0xff, 0xff, 0, 32, 0, 0, 0x23, 0x20, 0, 37, 0, 0, 0, 0, 0, 0, // header
                0, 3, 0, 7, 1, 2, 3, 0, // NXAC2PT_USERDATA, padded
                0, 5, 0, 8, 0, 0, 0, 7, // NXAC2PT_METER_ID
            ]
        );
        assert_eq!(decode_actions(&out).unwrap(), vec![a.clone()]);
        let text = show(&a);
        assert_eq!(text, "controller(userdata=01.02.03,meter_id=7)");
        assert_eq!(parse(&text).unwrap(), vec![a]);
        let short = Action::ToController {
            max_len: 64,
            userdata: vec![0xff],
            meter_id: None,
            controller_id: 0,
        };
        let text = show(&short);
        assert_eq!(text, "controller(max_len=64,userdata=ff)");
        assert_eq!(parse(&text).unwrap(), vec![short]);
        let aimed = Action::ToController {
            max_len: u16::MAX,
            userdata: vec![0x5d],
            meter_id: Some(9),
            controller_id: 0x5d03,
        };
        let mut wire = Vec::new();
        encode_actions(std::slice::from_ref(&aimed), &mut wire).unwrap();
        assert_eq!(decode_actions(&wire).unwrap(), vec![aimed.clone()]);
        let text = show(&aimed);
        assert_eq!(text, "controller(id=23811,userdata=5d,meter_id=9)");
        assert_eq!(parse(&text).unwrap(), vec![aimed]);
        // Without userdata or meter it is the plain output to the controller.
        assert_eq!(
            parse("controller(max_len=64)").unwrap(),
            vec![Action::Controller { max_len: 64 }]
        );
        for (bad, says) in [
            ("controller(userdata=0g)", "bad hex digit"),
            ("controller(userdata=012)", "expected hex bytes"),
            ("controller(meter_id=0)", "1 to 64 are allowed"),
            (
                "controller(userdata=01,pause)",
                "\"pause\" is not supported",
            ),
            (
                "controller(userdata=01,reason=no_match)",
                "\"reason\" is not supported",
            ),
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert!(Action::to_controller(Vec::new(), Some(1)).is_err());
        assert!(Action::to_controller(vec![0; crate::flow::USERDATA_MAX + 1], None).is_err());
        assert!(Action::to_controller(vec![1], Some(0)).is_err());
        // A pause or another controller id on the wire is refused, not dropped.
        let mut paused = out.clone();
        paused[2..4].copy_from_slice(&40u16.to_be_bytes());
        paused.extend_from_slice(&[0, 4, 0, 4, 0, 0, 0, 0]);
        let e = decode_actions(&paused).unwrap_err().to_string();
        assert!(e.contains("pause"), "{e}");
    }

    /// One of every action kind, in the shapes the pipeline uses.
    pub(crate) fn corpus() -> Vec<Action> {
        let ct_mark = Action::load(sf("NXM_NX_CT_MARK[]"), 1).unwrap();
        vec![
            Action::Output(3),
            Action::in_port(),
            Action::Output(ports::LOCAL),
            Action::Output(ports::NORMAL),
            Action::controller(),
            Action::Controller { max_len: 128 },
            Action::to_controller(vec![1, 2, 3], Some(7)).unwrap(),
            Action::to_controller(vec![0xab; 8], None).unwrap(),
            Action::ToController {
                max_len: 128,
                userdata: vec![0],
                meter_id: Some(1),
                controller_id: 0,
            },
            Action::ToController {
                max_len: u16::MAX,
                userdata: vec![0x5d, 3],
                meter_id: None,
                controller_id: 7,
            },
            Action::group(7).unwrap(),
            Action::set_tun_dst(Ipv4Addr::new(192, 168, 1, 2)),
            Action::set_field(Field::TunId, 0x1234_5678_9abc).unwrap(),
            Action::set_eth_dst(MacAddr([0x0a, 0x58, 10, 128, 0, 2])),
            Action::set_field(Field::PktMark, 0x1).unwrap(),
            Action::set_field(Field::Reg(3), 0xffff_ffff).unwrap(),
            Action::set_field(Field::IpDst, 0x0a00_0001).unwrap(),
            Action::load_reg(0, 5),
            Action::load(sf("NXM_NX_REG1[0..7]"), 0x42).unwrap(),
            Action::load(sf("NXM_NX_TUN_ID[0..31]"), 0xdead_beef).unwrap(),
            Action::load(sf("NXM_NX_TUN_ID[]"), u64::MAX).unwrap(),
            Action::load(sf("NXM_NX_PKT_MARK[]"), 0x10).unwrap(),
            Action::move_bits(sf("NXM_NX_REG0[]"), sf("NXM_NX_TUN_ID[0..31]")).unwrap(),
            Action::move_bits(sf("NXM_OF_ETH_SRC[]"), sf("NXM_OF_ETH_DST[]")).unwrap(),
            Action::move_bits(sf("NXM_NX_REG2[3]"), sf("NXM_NX_REG5[31]")).unwrap(),
            Action::resubmit(40).unwrap(),
            Action::resubmit(0).unwrap(),
            Action::output_reg(sf("NXM_NX_REG2[]")).unwrap(),
            Action::output_reg(sf("NXM_NX_REG2[0..15]")).unwrap(),
            Action::note(b""),
            Action::note(b"ab"),
            Action::note(b"subnet.1"),
            Action::Ct(Ct::new()),
            Action::Ct(Ct::new().table(30)),
            Action::Ct(Ct::new().zone(5).table(30)),
            Action::Ct(
                Ct::new()
                    .commit()
                    .zone_from(sf("NXM_NX_REG0[0..15]"))
                    .unwrap(),
            ),
            Action::Ct(Ct::new().nat(Nat::reverse()).table(40)),
            Action::Ct(Ct::new().commit().nat(Nat::kind_only(NatKind::Dst))),
            Action::Ct(
                Ct::new()
                    .commit()
                    .table(30)
                    .zone(9)
                    .nat(
                        Nat::new(
                            NatKind::Src,
                            Ipv4Addr::new(10, 0, 0, 1),
                            Ipv4Addr::new(10, 0, 0, 5),
                        )
                        .unwrap()
                        .ports(100, 200)
                        .unwrap()
                        .flags(false, false, true)
                        .unwrap(),
                    )
                    .exec(ct_mark.clone())
                    .unwrap(),
            ),
            Action::Ct(
                Ct::new()
                    .force()
                    .nat(
                        Nat::new(
                            NatKind::Dst,
                            Ipv4Addr::new(1, 2, 3, 4),
                            Ipv4Addr::new(1, 2, 3, 4),
                        )
                        .unwrap()
                        .ports(80, 80)
                        .unwrap()
                        .flags(true, true, false)
                        .unwrap(),
                    )
                    .exec(Action::set_field(Field::CtMark, 7).unwrap())
                    .unwrap()
                    .exec(ct_mark)
                    .unwrap(),
            ),
        ]
    }

    #[test]
    fn every_action_round_trips() {
        for a in corpus() {
            let mut out = Vec::new();
            encode_actions(std::slice::from_ref(&a), &mut out).unwrap();
            assert_eq!(out.len() % 8, 0, "{a:?}");
            assert_eq!(
                u16::from_be_bytes([out[2], out[3]]) as usize,
                out.len(),
                "{a:?}"
            );
            assert_eq!(decode_actions(&out).unwrap(), vec![a.clone()], "{a:?}");
        }
        let all = corpus();
        let mut out = Vec::new();
        encode_actions(&all, &mut out).unwrap();
        assert_eq!(decode_actions(&out).unwrap(), all);
    }

    #[test]
    fn known_layouts() {
        let enc = |a: Action| {
            let mut out = Vec::new();
            encode_actions(&[a], &mut out).unwrap();
            out
        };
        assert_eq!(
            enc(Action::Output(3)),
            [0, 0, 0, 16, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            enc(Action::load_reg(0, 5)),
            [
                0xff, 0xff, 0, 24, 0, 0, 0x23, 0x20, 0, 7, 0, 31, 0, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0,
                5
            ]
        );
        assert_eq!(
            enc(Action::resubmit(40).unwrap()),
            [0xff, 0xff, 0, 16, 0, 0, 0x23, 0x20, 0, 14, 0xff, 0xf8, 40, 0, 0, 0]
        );
        assert_eq!(
            enc(Action::set_tun_dst(Ipv4Addr::new(1, 2, 3, 4))),
            [0, 25, 0, 16, 0, 1, 0x40, 4, 1, 2, 3, 4, 0, 0, 0, 0]
        );
        assert_eq!(enc(Action::group(9).unwrap()), [0, 22, 0, 8, 0, 0, 0, 9]);
        // ct(commit,table=30,zone=5) without nested actions: 24 bytes.
        let ct = enc(Action::Ct(Ct::new().commit().table(30).zone(5)));
        assert_eq!(
            ct,
            [
                0xff, 0xff, 0, 24, 0, 0, 0x23, 0x20, 0, 35, 0, 1, 0, 0, 0, 0, 0, 5, 30, 0, 0, 0, 0,
                0
            ]
        );
    }

    #[test]
    fn instructions_round_trip() {
        let acts = vec![Action::load_reg(0, 5), Action::resubmit(40).unwrap()];
        for (a, g) in [
            (vec![], None),
            (vec![], Some(30)),
            (acts.clone(), None),
            (acts, Some(30)),
        ] {
            let mut out = Vec::new();
            encode_instructions(&a, g, &mut out).unwrap();
            if a.is_empty() && g.is_none() {
                assert!(out.is_empty());
            }
            if !a.is_empty() {
                assert_eq!(u16::from_be_bytes([out[0], out[1]]), OFPIT_APPLY_ACTIONS);
            }
            assert_eq!(decode_instructions(&out).unwrap(), (a, g));
        }
    }

    #[test]
    fn refusals() {
        // Unknown Nicira subtype (NXAST_EXIT = 17).
        let mut out = Vec::new();
        let start = nx_header(&mut out, 17);
        finish(&mut out, start, "t").unwrap();
        let err = decode_actions(&out).unwrap_err();
        assert!(matches!(err, CodecError::Unsupported { .. }), "{err}");
        assert!(err.to_string().contains("subtype 17"), "{err}");
        // Other experimenter.
        let mut out = vec![0xff, 0xff, 0, 16, 0, 0, 0, 1];
        out.extend_from_slice(&[0; 8]);
        assert!(matches!(
            decode_actions(&out),
            Err(CodecError::Unsupported { .. })
        ));
        // OFPAT_DEC_NW_TTL (24).
        let out = [0, 24, 0, 8, 0, 0, 0, 0];
        assert!(matches!(
            decode_actions(&out),
            Err(CodecError::Unsupported { .. })
        ));
        // Bad lengths.
        assert!(matches!(
            decode_actions(&[0, 0, 0, 12, 0, 0, 0, 1, 0, 0, 0, 0]),
            Err(CodecError::Malformed { .. })
        ));
        assert!(matches!(
            decode_actions(&[0, 0, 0, 0]),
            Err(CodecError::Malformed { .. })
        ));
        // Write-actions instruction.
        let out = [0, 3, 0, 8, 0, 0, 0, 0];
        let err = decode_instructions(&out).unwrap_err();
        assert!(err.to_string().contains("write-actions"), "{err}");
        // A load whose value does not fit its range (OVS would refuse it too).
        let mut out = Vec::new();
        let start = nx_header(&mut out, nxast::REG_LOAD);
        put16(
            &mut out,
            Subfield::range(Field::Reg(0), 0, 3).unwrap().ofs_nbits(),
        );
        put32(&mut out, Field::Reg(0).nxm_header());
        put64(&mut out, 0x10);
        finish(&mut out, start, "t").unwrap();
        assert!(matches!(
            decode_actions(&out),
            Err(CodecError::Malformed { .. })
        ));
        // NAT with arguments in an uncommitted ct.
        let nat = Nat::new(
            NatKind::Src,
            Ipv4Addr::new(1, 1, 1, 1),
            Ipv4Addr::new(1, 1, 1, 1),
        )
        .unwrap();
        let err = encode_actions(&[Action::Ct(Ct::new().nat(nat))], &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("needs commit"), "{err}");
        // NAT at top level.
        let mut out = Vec::new();
        encode_nat(&mut out, &Nat::reverse()).unwrap();
        assert!(matches!(
            decode_actions(&out),
            Err(CodecError::Malformed { .. })
        ));
        // Invalid actions built by hand from the public variants.
        for bad in [
            Action::Output(0),
            Action::Output(ports::CONTROLLER),
            Action::Group(0xffff_fffc),
            Action::OutputReg(sf("NXM_NX_REG0[0..7]")),
            Action::Resubmit { table: 255 },
        ] {
            assert!(
                encode_actions(std::slice::from_ref(&bad), &mut Vec::new()).is_err(),
                "{bad:?}"
            );
        }
        let err = encode_actions(&[Action::Ct(Ct::new().table(255))], &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("table=255"), "{err}");
    }

    #[test]
    fn nested_ct_is_refused_without_deep_recursion() {
        // 2000 ct actions each nested in the previous: refused at the second level.
        let mut inner: Vec<u8> = Vec::new();
        for _ in 0..2000 {
            let mut out = Vec::new();
            let start = nx_header(&mut out, nxast::CT);
            put16(&mut out, NX_CT_F_COMMIT);
            put32(&mut out, 0);
            put16(&mut out, 0);
            out.extend_from_slice(&[NX_CT_RECIRC_NONE, 0, 0, 0, 0, 0]);
            out.extend_from_slice(&inner);
            let len = (out.len() - start) as u16;
            patch_u16(&mut out, start + 2, len);
            inner = out;
            if inner.len() > 60_000 {
                break;
            }
        }
        let err = decode_actions(&inner).unwrap_err();
        assert!(err.to_string().contains("ct nested inside ct"), "{err}");
    }

    #[test]
    fn truncation_never_panics() {
        let mut out = Vec::new();
        encode_instructions(&corpus(), Some(200), &mut out).unwrap();
        for n in 0..out.len() {
            // Cutting at an instruction boundary leaves a valid shorter list; any other cut
            // must be a clean error.
            match decode_instructions(&out[..n]) {
                Ok(_) | Err(CodecError::Truncated { .. }) => {}
                Err(e) => panic!("prefix of {n} bytes: {e}"),
            }
        }
        let mut out = Vec::new();
        encode_actions(&corpus(), &mut out).unwrap();
        for n in 0..out.len() {
            let _ = decode_actions(&out[..n]);
        }
        // Corrupt each length field: errors, never panics.
        for i in 0..out.len() {
            let mut bad = out.clone();
            bad[i] ^= 0x5a;
            let _ = decode_actions(&bad);
        }
    }
}
