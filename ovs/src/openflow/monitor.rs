//! Flow monitoring: Open vSwitch's ONF extension for OpenFlow 1.3 (`ONFST13_FLOW_MONITOR`,
//! experimenter multipart type 1870): Nicira's `NXST_FLOW_MONITOR` events with OpenFlow 1.3's
//! 32-bit ports and OXM matches.
//!
//! A controller asks once; from then on the switch sends a multipart reply with xid 0 for every
//! flow that another connection (or `ovs-ofctl`) adds, deletes or modifies, and for flows the
//! switch itself removes (a deleted meter takes the flows that use it along). Changes made on
//! the monitoring connection come abbreviated ([`FlowEvent::Abbreviated`], the xid only) unless
//! [`NXFMF_OWN`] is asked for, so an owner that installs its flows on the same connection tells
//! drift from its own work by the event alone. When the controller does
//! not read fast enough, the switch pauses the stream ([`FlowEvent::Paused`]) and resumes it
//! later ([`FlowEvent::Resumed`]); updates in between are lost, so a pause means "anything may
//! have changed".
//!
//! Only what a drift detector needs is decoded: the event, table, priority, cookie and reason of
//! each update; the match and actions are skipped (the owner diffs against the switch anyway).
//! Checked against Open vSwitch 3.1 in `tests/tests/openflow.rs`.

use super::reader::Reader;
use super::wire::{msg_type, OFP13_VERSION};
use super::CodecError;

/// `OFPMP_EXPERIMENTER`.
pub const OFPMP_EXPERIMENTER: u16 = 0xffff;
/// The ONF experimenter id.
pub const ONF_EXPERIMENTER_ID: u32 = 0x4f4e_4600;
/// `ONFMP_FLOW_MONITOR`: the experimenter multipart type of flow monitoring in OpenFlow 1.3.
pub const ONFMP_FLOW_MONITOR: u32 = 1870;

/// `NXFMF_INITIAL`: report the flows that match when the monitor is created.
pub const NXFMF_INITIAL: u16 = 1 << 0;
/// `NXFMF_ADD`: report flows added later.
pub const NXFMF_ADD: u16 = 1 << 1;
/// `NXFMF_DELETE`: report flows deleted later.
pub const NXFMF_DELETE: u16 = 1 << 2;
/// `NXFMF_MODIFY`: report flows modified later.
pub const NXFMF_MODIFY: u16 = 1 << 3;
/// `NXFMF_ACTIONS`: include the actions in updates.
pub const NXFMF_ACTIONS: u16 = 1 << 4;
/// `NXFMF_OWN`: report this connection's own changes too (abbreviated).
pub const NXFMF_OWN: u16 = 1 << 5;

/// What happened to a flow (`NXFME_*`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FlowEvent {
    /// A flow was added.
    Added,
    /// A flow was deleted (by a controller, a timeout, or with its meter or group).
    Deleted,
    /// A flow's actions or cookie changed.
    Modified,
    /// This connection's own change, abbreviated to its xid (with [`NXFMF_OWN`]).
    Abbreviated,
    /// The switch stopped sending updates because they piled up: anything may change unseen.
    Paused,
    /// The switch sends updates again.
    Resumed,
    /// An event this decoder does not know.
    Other(u16),
}

impl FlowEvent {
    fn from_wire(v: u16) -> FlowEvent {
        match v {
            0 => FlowEvent::Added,
            1 => FlowEvent::Deleted,
            2 => FlowEvent::Modified,
            3 => FlowEvent::Abbreviated,
            4 => FlowEvent::Paused,
            5 => FlowEvent::Resumed,
            other => FlowEvent::Other(other),
        }
    }
}

/// One update of a flow monitor.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FlowUpdate {
    /// What happened.
    pub event: FlowEvent,
    /// The flow's table (full updates only).
    pub table: Option<u8>,
    /// The flow's priority (full updates only).
    pub priority: Option<u16>,
    /// The flow's cookie (full updates only).
    pub cookie: Option<u64>,
    /// Why a flow was deleted (`OFPRR_*`; full updates only).
    pub reason: Option<u16>,
}

impl std::fmt::Display for FlowUpdate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let event = match self.event {
            FlowEvent::Added => "added",
            FlowEvent::Deleted => "deleted",
            FlowEvent::Modified => "modified",
            FlowEvent::Abbreviated => "own change",
            FlowEvent::Paused => "updates paused",
            FlowEvent::Resumed => "updates resumed",
            FlowEvent::Other(_) => "unknown event",
        };
        f.write_str(event)?;
        if let Some(t) = self.table {
            write!(f, " table={t}")?;
        }
        if let Some(p) = self.priority {
            write!(f, " priority={p}")?;
        }
        if let Some(c) = self.cookie {
            write!(f, " cookie={c:#x}")?;
        }
        Ok(())
    }
}

/// An `ONFST13_FLOW_MONITOR` request with one monitor `id` over every table, port and match,
/// reporting what `flags` ([`NXFMF_ADD`]...) ask for.
pub fn encode_flow_monitor_request(xid: u32, id: u32, flags: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(48);
    out.extend_from_slice(&[OFP13_VERSION, msg_type::MULTIPART_REQUEST, 0, 0]);
    out.extend_from_slice(&xid.to_be_bytes());
    out.extend_from_slice(&OFPMP_EXPERIMENTER.to_be_bytes());
    out.extend_from_slice(&[0; 6]); // flags, pad
    out.extend_from_slice(&ONF_EXPERIMENTER_ID.to_be_bytes());
    out.extend_from_slice(&ONFMP_FLOW_MONITOR.to_be_bytes());
    // The OpenFlow 1.3 monitor request: id, flags, match_len, out_port (OFPP_ANY), table_id
    // (0xff: every table), zeros, then an empty OXM `ofp_match` (type 1, length 4, padded).
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&4u16.to_be_bytes());
    out.extend_from_slice(&0xffff_ffffu32.to_be_bytes());
    out.push(0xff);
    out.extend_from_slice(&[0; 3]);
    out.extend_from_slice(&[0, 1, 0, 4, 0, 0, 0, 0]);
    let len = out.len() as u16;
    out[2..4].copy_from_slice(&len.to_be_bytes());
    out
}

/// Whether the body of a multipart reply (after its 8-byte header, whose type must be
/// [`OFPMP_EXPERIMENTER`]) is a flow monitor reply.
pub fn is_flow_monitor_body(body: &[u8]) -> bool {
    body.len() >= 8
        && body[0..4] == ONF_EXPERIMENTER_ID.to_be_bytes()
        && body[4..8] == ONFMP_FLOW_MONITOR.to_be_bytes()
}

/// Decodes the updates of one flow monitor reply body (after the multipart header: the
/// experimenter id and type, then `nx_flow_update_*` records).
pub fn decode_flow_updates(body: &[u8]) -> Result<Vec<FlowUpdate>, CodecError> {
    let mut r = Reader::new(body, "flow monitor reply");
    let experimenter = r.u32()?;
    let exp_type = r.u32()?;
    if experimenter != ONF_EXPERIMENTER_ID || exp_type != ONFMP_FLOW_MONITOR {
        return Err(CodecError::Unsupported {
            what: "flow monitor reply",
            detail: format!("experimenter {experimenter:#x} type {exp_type}"),
        });
    }
    let mut out = Vec::new();
    r.set_what("nx_flow_update");
    while r.remaining() > 0 {
        let len = usize::from(r.u16()?);
        r.check_len(len, 8, || format!("flow update of length {len}"))?;
        let event = FlowEvent::from_wire(r.u16()?);
        let rest = r.take(len - 4)?;
        let mut u = FlowUpdate {
            event,
            table: None,
            priority: None,
            cookie: None,
            reason: None,
        };
        if matches!(
            event,
            FlowEvent::Added | FlowEvent::Deleted | FlowEvent::Modified
        ) {
            // nx_flow_update_full after length and event: reason, priority, idle and hard
            // timeouts, match_len, table_id, pad, cookie; then the match and actions.
            let mut f = Reader::new(rest, "nx_flow_update_full");
            u.reason = Some(f.u16()?);
            u.priority = Some(f.u16()?);
            f.skip(4)?;
            let _match_len = f.u16()?;
            u.table = Some(f.u8()?);
            f.skip(1)?;
            u.cookie = Some(f.u64()?);
        }
        out.push(u);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_layout() {
        // What `ovs-ofctl ofp-print` shows as "ONFST_FLOW_MONITOR request (OF1.3) (xid=0x7):
        // id=1 flags=add,delete,modify".
        let m = encode_flow_monitor_request(7, 1, NXFMF_ADD | NXFMF_DELETE | NXFMF_MODIFY);
        let hex: Vec<String> = m.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex.join(" "),
            "04 12 00 30 00 00 00 07 ff ff 00 00 00 00 00 00 4f 4e 46 00 00 00 07 4e \
             00 00 00 01 00 0e 00 04 ff ff ff ff ff 00 00 00 00 01 00 04 00 00 00 00"
        );
    }

    #[test]
    fn updates_decode() {
        let mut body = Vec::new();
        body.extend_from_slice(&ONF_EXPERIMENTER_ID.to_be_bytes());
        body.extend_from_slice(&ONFMP_FLOW_MONITOR.to_be_bytes());
        // A full update (deleted, table 80, priority 100, cookie 0xabc) with an 8-byte match.
        body.extend_from_slice(&32u16.to_be_bytes());
        body.extend_from_slice(&1u16.to_be_bytes());
        body.extend_from_slice(&3u16.to_be_bytes()); // reason
        body.extend_from_slice(&100u16.to_be_bytes());
        body.extend_from_slice(&[0; 4]);
        body.extend_from_slice(&4u16.to_be_bytes());
        body.push(80);
        body.push(0);
        body.extend_from_slice(&0xabcu64.to_be_bytes());
        body.extend_from_slice(&[0; 8]);
        // A pause.
        body.extend_from_slice(&8u16.to_be_bytes());
        body.extend_from_slice(&4u16.to_be_bytes());
        body.extend_from_slice(&[0; 4]);
        let u = decode_flow_updates(&body).unwrap();
        assert_eq!(u.len(), 2);
        assert_eq!(u[0].event, FlowEvent::Deleted);
        assert_eq!(
            (u[0].table, u[0].priority, u[0].cookie, u[0].reason),
            (Some(80), Some(100), Some(0xabc), Some(3))
        );
        assert_eq!(
            u[0].to_string(),
            "deleted table=80 priority=100 cookie=0xabc"
        );
        assert_eq!(u[1].event, FlowEvent::Paused);
        assert!(is_flow_monitor_body(&body));
        // A record whose length overruns the body is an error, not a panic.
        let mut bad = body[..8].to_vec();
        bad.extend_from_slice(&[0, 64, 0, 0]);
        assert!(decode_flow_updates(&bad).is_err());
    }
}
