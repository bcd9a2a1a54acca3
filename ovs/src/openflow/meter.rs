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
/// Flag: rate in packets/s (`OFPMF_PKTPS`).
pub const OFPMF_PKTPS: u16 = 2;
/// Multipart type of meter statistics (`OFPMP_METER`).
pub const OFPMP_METER: u16 = 9;
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

/// What a meter's rate and burst count.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum MeterUnit {
    /// kbit/s and kbit (flags `KBPS|BURST`): the pods' egress policers.
    Kbps,
    /// packets/s and packets (flags `PKTPS|BURST`): the rate limits of packets sent to the
    /// agent (audit copies).
    Pktps,
}

impl MeterUnit {
    fn flags(self) -> u16 {
        match self {
            MeterUnit::Kbps => OFPMF_KBPS | OFPMF_BURST,
            MeterUnit::Pktps => OFPMF_PKTPS | OFPMF_BURST,
        }
    }

    fn from_flags(flags: u16) -> Option<Self> {
        match flags {
            f if f == OFPMF_KBPS | OFPMF_BURST => Some(MeterUnit::Kbps),
            f if f == OFPMF_PKTPS | OFPMF_BURST => Some(MeterUnit::Pktps),
            _ => None,
        }
    }
}

/// A policer: one `DROP` band, in kbit/s or packets/s, with a burst.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Meter {
    /// Meter id, 1..=[`OFPM_MAX`].
    pub id: u32,
    /// What the rate and burst count.
    pub unit: MeterUnit,
    /// Band rate, in kbit/s (1 kbit = 1000 bit) or packets/s.
    pub rate: u32,
    /// Band burst size, in kbit or packets.
    pub burst: u32,
}

impl Meter {
    /// A kbit/s policer. Refuses id 0 or a reserved id, and a zero rate.
    pub fn new(id: u32, rate_kbps: u32, burst_kbits: u32) -> Result<Meter, FlowError> {
        Meter::with_unit(id, MeterUnit::Kbps, rate_kbps, burst_kbits)
    }

    /// A packets/s policer. Refuses id 0 or a reserved id, and a zero rate.
    pub fn packets(id: u32, rate_pps: u32, burst_packets: u32) -> Result<Meter, FlowError> {
        Meter::with_unit(id, MeterUnit::Pktps, rate_pps, burst_packets)
    }

    fn with_unit(id: u32, unit: MeterUnit, rate: u32, burst: u32) -> Result<Meter, FlowError> {
        check_id(id)?;
        if rate == 0 {
            return Err(FlowError::Invalid(format!("meter {id}: rate 0")));
        }
        Ok(Meter {
            id,
            unit,
            rate,
            burst,
        })
    }

    /// The meter `id` as a delete names it (rate and burst are not sent).
    pub fn id_only(id: u32) -> Meter {
        Meter {
            id,
            unit: MeterUnit::Kbps,
            rate: 0,
            burst: 0,
        }
    }
}

impl std::fmt::Display for Meter {
    /// As `ovs-ofctl add-meter` takes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = match self.unit {
            MeterUnit::Kbps => "kbps",
            MeterUnit::Pktps => "pktps",
        };
        write!(
            f,
            "meter={},{unit},burst,band=type=drop,rate={},burst_size={}",
            self.id, self.rate, self.burst
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
    out.extend_from_slice(&m.rate.to_be_bytes());
    out.extend_from_slice(&m.burst.to_be_bytes());
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
        meter.unit.flags()
    };
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&meter.id.to_be_bytes());
    if command != MeterModCommand::Delete {
        if meter.rate == 0 {
            return Err(FlowError::Invalid(format!("meter {}: rate 0", meter.id)).into());
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
        let Some(unit) = MeterUnit::from_flags(flags) else {
            return Err(CodecError::Unsupported {
                what: "ofp_meter_config",
                detail: format!("meter {id} flags {flags:#x} (only kbps|burst, pktps|burst)"),
            });
        };
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
        let rate = b.u32()?;
        let burst = b.u32()?;
        if ty != OFPMBT_DROP || blen != 16 {
            return Err(CodecError::Unsupported {
                what: "ofp_meter_band",
                detail: format!("meter {id} band type {ty} length {blen} (only drop)"),
            });
        }
        out.push(
            Meter::with_unit(id, unit, rate, burst).map_err(|e| CodecError::Malformed {
                what: "ofp_meter_config",
                detail: e.to_string(),
            })?,
        );
    }
    Ok(out)
}

/// One meter's counters (`ofp_meter_stats`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MeterStats {
    /// Meter id.
    pub id: u32,
    /// Rows using it.
    pub flow_count: u32,
    /// Packets that entered it.
    pub packets_in: u64,
    /// Packets its drop band dropped (the sum over its bands).
    pub packets_dropped: u64,
}

/// Encodes an `OFPMP_METER` request for every meter.
pub fn encode_meter_stats_request(xid: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    put_header(&mut out, super::wire::msg_type::MULTIPART_REQUEST, xid);
    out.extend_from_slice(&OFPMP_METER.to_be_bytes());
    out.extend_from_slice(&[0; 6]); // flags, pad
    out.extend_from_slice(&OFPM_ALL.to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    out[3] = out.len() as u8; // always 24
    out
}

/// Decodes the body of one `OFPMP_METER` reply (after the multipart header).
pub fn decode_meter_stats_body(body: &[u8]) -> Result<Vec<MeterStats>, CodecError> {
    let mut r = Reader::new(body, "ofp_meter_stats");
    let mut out = Vec::new();
    while r.remaining() > 0 {
        let id = r.u32()?;
        let len = r.u16()? as usize;
        r.check_len(len, 40, || format!("meter stats of length {len}"))?;
        r.skip(6)?;
        let flow_count = r.u32()?;
        let packets_in = r.u64()?;
        let _bytes_in = r.u64()?;
        r.skip(8)?; // duration
        let mut packets_dropped = 0u64;
        let mut bands = Reader::new(r.take(len - 40)?, "ofp_meter_band_stats");
        while bands.remaining() > 0 {
            packets_dropped = packets_dropped.saturating_add(bands.u64()?);
            let _bytes = bands.u64()?;
        }
        out.push(MeterStats {
            id,
            flow_count,
            packets_in,
            packets_dropped,
        });
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
        body[3] = 2 | 4; // packet rate flags
        let p = decode_meter_config_body(&body).unwrap();
        assert_eq!(p[0].unit, MeterUnit::Pktps);
        assert_eq!((p[0].rate, p[0].burst), (1_000, 100));
        body[3] = 1 | 2; // kbps and pktps at once
        assert!(decode_meter_config_body(&body).is_err());
        assert!(decode_meter_config_body(&[0, 4]).is_err());
    }

    #[test]
    fn stats_body_sums_the_bands() {
        let mut body = Vec::new();
        body.extend_from_slice(&7u32.to_be_bytes());
        body.extend_from_slice(&56u16.to_be_bytes());
        body.extend_from_slice(&[0; 6]);
        body.extend_from_slice(&3u32.to_be_bytes());
        body.extend_from_slice(&1000u64.to_be_bytes());
        body.extend_from_slice(&64_000u64.to_be_bytes());
        body.extend_from_slice(&[0; 8]);
        body.extend_from_slice(&900u64.to_be_bytes());
        body.extend_from_slice(&57_600u64.to_be_bytes());
        let s = decode_meter_stats_body(&body).unwrap();
        assert_eq!(
            s,
            vec![MeterStats {
                id: 7,
                flow_count: 3,
                packets_in: 1000,
                packets_dropped: 900
            }]
        );
        assert!(decode_meter_stats_body(&body[..50]).is_err());
        assert_eq!(encode_meter_stats_request(1)[8..10], [0, 9]);
    }
}
