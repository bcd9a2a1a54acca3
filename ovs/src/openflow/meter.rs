//! OpenFlow 1.3 meters: `OFPT_METER_MOD` and the `OFPMP_METER_CONFIG` dump.
//!
//! Only the meter the agent needs is modelled: flags `KBPS|BURST` and exactly one `DROP` band
//! (rate in kbit/s, burst in kbit), which is what `ovs-ofctl add-meter
//! meter=N,kbps,burst,band=type=drop,rate=R,burst_size=B` sends. The userspace (netdev) datapath
//! of Open vSwitch implements such a meter as a token bucket policer. Decoding a dump refuses
//! other meter shapes (packet rates, DSCP remark bands, several bands) with
//! [`CodecError::Unsupported`] instead of misreporting them.
//!
//! Limits: Open vSwitch bundles do not carry meter mods, so a meter is installed with its own
//! message (and a barrier) before the flows that use it, and deleted after them.

use super::reader::{len_u16, patch_u16, Reader};
use super::CodecError;
use crate::flow::FlowError;

/// `OFPT_METER_MOD`.
pub const OFPT_METER_MOD: u8 = 29;
/// `OFPMP_METER_CONFIG`.
pub const OFPMP_METER_CONFIG: u16 = 10;
/// `OFPMF_KBPS`.
pub const OFPMF_KBPS: u16 = 1;
/// `OFPMF_BURST`.
pub const OFPMF_BURST: u16 = 4;
/// `OFPMBT_DROP`.
pub const OFPMBT_DROP: u16 = 1;
/// `OFPM_MAX`: the highest meter id that names a single meter.
pub const OFPM_MAX: u32 = 0xffff_0000;
/// `OFPM_ALL`: every meter (delete and dump only).
pub const OFPM_ALL: u32 = 0xffff_ffff;

/// `OFPMC_*`: what a meter mod does.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum MeterModCommand {
    /// `OFPMC_ADD`: fails if the meter exists.
    Add,
    /// `OFPMC_MODIFY`: fails if the meter does not exist.
    Modify,
    /// `OFPMC_DELETE`: deleting a missing meter is not an error; flows using the meter are
    /// removed with it by the switch.
    Delete,
}

impl MeterModCommand {
    fn code(self) -> u16 {
        match self {
            MeterModCommand::Add => 0,
            MeterModCommand::Modify => 1,
            MeterModCommand::Delete => 2,
        }
    }

    /// The verb used in logs and errors.
    pub fn verb(self) -> &'static str {
        match self {
            MeterModCommand::Add => "add",
            MeterModCommand::Modify => "modify",
            MeterModCommand::Delete => "delete",
        }
    }
}

/// A kbit/s policer: flags `KBPS|BURST`, one `DROP` band.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Meter {
    /// Meter id, 1..=[`OFPM_MAX`].
    pub id: u32,
    /// Band rate in kbit/s (1 kbit = 1000 bit).
    pub rate_kbps: u32,
    /// Band burst size in kbit.
    pub burst_kbits: u32,
}

impl Meter {
    /// Refuses id 0 or a reserved id, and a zero rate.
    pub fn new(id: u32, rate_kbps: u32, burst_kbits: u32) -> Result<Meter, FlowError> {
        check_id(id)?;
        if rate_kbps == 0 {
            return Err(FlowError::Invalid(format!("meter {id}: rate 0 kbit/s")));
        }
        Ok(Meter {
            id,
            rate_kbps,
            burst_kbits,
        })
    }
}

impl std::fmt::Display for Meter {
    /// As `ovs-ofctl add-meter` takes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "meter={},kbps,burst,band=type=drop,rate={},burst_size={}",
            self.id, self.rate_kbps, self.burst_kbits
        )
    }
}

fn check_id(id: u32) -> Result<(), FlowError> {
    if id == 0 || id > OFPM_MAX {
        return Err(FlowError::Invalid(format!(
            "meter id {id:#x} is not in 1..={OFPM_MAX:#x}"
        )));
    }
    Ok(())
}

fn put_header(out: &mut Vec<u8>, msg_type: u8, xid: u32) {
    out.extend_from_slice(&[super::wire::OFP13_VERSION, msg_type, 0, 0]);
    out.extend_from_slice(&xid.to_be_bytes());
}

fn put_band(out: &mut Vec<u8>, m: &Meter) {
    out.extend_from_slice(&OFPMBT_DROP.to_be_bytes());
    out.extend_from_slice(&16u16.to_be_bytes());
    out.extend_from_slice(&m.rate_kbps.to_be_bytes());
    out.extend_from_slice(&m.burst_kbits.to_be_bytes());
    out.extend_from_slice(&[0; 4]);
}

/// Encodes a complete `OFPT_METER_MOD` (header included). A delete carries only the id
/// ([`OFPM_ALL`] deletes every meter); rate and burst are ignored for it.
pub fn encode_meter_mod(
    command: MeterModCommand,
    meter: &Meter,
    xid: u32,
) -> Result<Vec<u8>, CodecError> {
    if !(command == MeterModCommand::Delete && meter.id == OFPM_ALL) {
        check_id(meter.id)?;
    }
    let mut out = Vec::with_capacity(32);
    put_header(&mut out, OFPT_METER_MOD, xid);
    out.extend_from_slice(&command.code().to_be_bytes());
    let flags = if command == MeterModCommand::Delete {
        0
    } else {
        OFPMF_KBPS | OFPMF_BURST
    };
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&meter.id.to_be_bytes());
    if command != MeterModCommand::Delete {
        if meter.rate_kbps == 0 {
            return Err(FlowError::Invalid(format!("meter {}: rate 0 kbit/s", meter.id)).into());
        }
        put_band(&mut out, meter);
    }
    let len = len_u16(&out, 0, "OFPT_METER_MOD")?;
    patch_u16(&mut out, 2, len);
    Ok(out)
}

/// Encodes an `OFPMP_METER_CONFIG` request for every meter.
pub fn encode_meter_config_request(xid: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    put_header(&mut out, super::wire::msg_type::MULTIPART_REQUEST, xid);
    out.extend_from_slice(&OFPMP_METER_CONFIG.to_be_bytes());
    out.extend_from_slice(&[0; 6]); // flags, pad
    out.extend_from_slice(&OFPM_ALL.to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    out[3] = out.len() as u8; // always 24
    out
}

/// Decodes the body of one `OFPMP_METER_CONFIG` reply (after the multipart header) into meters.
pub fn decode_meter_config_body(body: &[u8]) -> Result<Vec<Meter>, CodecError> {
    let mut r = Reader::new(body, "ofp_meter_config");
    let mut out = Vec::new();
    while r.remaining() > 0 {
        let len = r.u16()? as usize;
        r.check_len(len, 8, || format!("meter config of length {len}"))?;
        let flags = r.u16()?;
        let id = r.u32()?;
        let bands = r.take(len - 8)?;
        if flags != OFPMF_KBPS | OFPMF_BURST {
            return Err(CodecError::Unsupported {
                what: "ofp_meter_config",
                detail: format!("meter {id} flags {flags:#x} (only kbps|burst)"),
            });
        }
        if bands.len() != 16 {
            return Err(CodecError::Unsupported {
                what: "ofp_meter_config",
                detail: format!(
                    "meter {id} has {} bytes of bands (only one band)",
                    bands.len()
                ),
            });
        }
        let mut b = Reader::new(bands, "ofp_meter_band");
        let ty = b.u16()?;
        let blen = b.u16()?;
        let rate_kbps = b.u32()?;
        let burst_kbits = b.u32()?;
        if ty != OFPMBT_DROP || blen != 16 {
            return Err(CodecError::Unsupported {
                what: "ofp_meter_band",
                detail: format!("meter {id} band type {ty} length {blen} (only drop)"),
            });
        }
        out.push(
            Meter::new(id, rate_kbps, burst_kbits).map_err(|e| CodecError::Malformed {
                what: "ofp_meter_config",
                detail: e.to_string(),
            })?,
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meter_mod_layout() {
        let m = Meter::new(5, 20_000, 2_000).unwrap();
        let b = encode_meter_mod(MeterModCommand::Add, &m, 7).unwrap();
        assert_eq!(b.len(), 32);
        assert_eq!(&b[..8], &[4, 29, 0, 32, 0, 0, 0, 7]);
        assert_eq!(&b[8..16], &[0, 0, 0, 5, 0, 0, 0, 5]);
        assert_eq!(&b[16..20], &[0, 1, 0, 16]);
        assert_eq!(u32::from_be_bytes(b[20..24].try_into().unwrap()), 20_000);
        assert_eq!(u32::from_be_bytes(b[24..28].try_into().unwrap()), 2_000);
        let d = encode_meter_mod(MeterModCommand::Delete, &m, 8).unwrap();
        assert_eq!(&d[..], &[4, 29, 0, 16, 0, 0, 0, 8, 0, 2, 0, 0, 0, 0, 0, 5]);
        assert!(Meter::new(0, 1, 1).is_err());
        assert!(Meter::new(1, 0, 1).is_err());
        assert!(Meter::new(OFPM_MAX + 1, 1, 1).is_err());
    }

    #[test]
    fn config_body_round_trip() {
        let m = Meter::new(9, 1_000, 100).unwrap();
        let b = encode_meter_mod(MeterModCommand::Add, &m, 1).unwrap();
        // ofp_meter_config: length, flags, id, bands == the meter mod body from flags on.
        let mut body = vec![0, 24];
        body.extend_from_slice(&b[10..]);
        assert_eq!(decode_meter_config_body(&body).unwrap(), vec![m]);
        body[3] = 1; // packet rate flags
        assert!(decode_meter_config_body(&body).is_err());
        assert!(decode_meter_config_body(&[0, 4]).is_err());
    }
}
