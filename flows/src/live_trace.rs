//! The live-trace rows: how one real, marked packet reports every table it enters and the row
//! that ends its path, without reaching the destination application.
//!
//! **The mark.** The traced packet carries a DSCP from [`TAGS`] (values `4k+3`, which no
//! standard per-hop behaviour uses) and a source port of the trace's own; every trace row
//! matches the mark, the source address and (TCP, UDP) the source port, or (ICMP) an echo
//! request: [`Probe::matching`]. Concurrent traces get different DSCPs, so their rows never
//! match each other's packet; each trace sends its copies to its own controller connection
//! (`controller(id=..)`), so their reports never mix either.
//!
//! **Observation rows** ([`Probe::observation_rows`]): in every table of the pipeline, at the
//! top priority, a row matching the mark and a clear bit of `reg7` ([`Reg::TraceSeen`], one
//! bit per table) sends a copy up ([`Event::Entered`], with the registers and the conntrack
//! state the packet has there), sets the bit and resubmits to the same table, where the
//! packet then meets the table's real rows. A packet that recirculates (conntrack) or comes
//! back through tun0 after the node's NAT (Services) is seen again: tun0 hands br0 a new
//! packet, with registers cleared.
//!
//! **Copies of the deciding rows** ([`Probe::copy`]): every row of a table that the packet
//! could meet is copied [`COPY_OFFSET`] priorities higher, with the mark added to its match,
//! so the copies keep the table's order among themselves and all win over the originals. A
//! copy does what its row does, except that: the output to a local pod (`output:reg2`)
//! becomes a copy up ([`Event::Delivered`]: the packet stops there and no pod receives it);
//! an output to tun0 or VXLAN (or an egress-IP group) first sends a copy up ([`Event::Left`])
//! and then goes on, so the node's routing and NAT and the next node see the real packet; a
//! row that ends the packet's path with no output sends a copy up ([`Event::Dropped`]). Copies
//! never reach table 130: a traced packet writes no audit line. Conjunction clause rows are
//! copied as they are (at the same offset: Open vSwitch keys a conjunction by id and
//! priority), so a NetworkPolicy decides a traced packet exactly as it decides the real ones.
//!
//! Every row has the trace's cookie ([`trace_cookie`], feature [`Feature::LiveTrace`]) and a
//! hard timeout ([`HARD_TIMEOUT`]): the agent deletes them by cookie when the trace ends,
//! sweeps the feature at start-up, and a killed agent's rows remove themselves. Copies sent up
//! go through one meter ([`TRACE_METER`]), so a pod that sends marked traffic while a trace
//! runs cannot flood the switch's controller path.

use std::net::IpAddr;

use ovs::flow::{Action, Flow, Masked, Match};

use crate::cookie::{self, Feature};
use crate::registers::Reg;
use crate::tables::Table;

/// The DSCP values a trace marks its packet with (`4k+3`: no standard per-hop behaviour).
pub const TAGS: [u8; 16] = [3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47, 51, 55, 59, 63];
/// The priority of the observation rows, above every row of the pipeline.
pub const OBSERVE_PRIORITY: u16 = u16::MAX;
/// What a copy adds to its row's priority.
pub const COPY_OFFSET: u16 = 60_000;
/// The highest priority a row may have to be copied (the pipeline's rows are far below).
pub const COPYABLE_MAX: u16 = OBSERVE_PRIORITY - COPY_OFFSET - 1;
/// Seconds after which a trace's rows remove themselves, whatever happened to the agent.
pub const HARD_TIMEOUT: u16 = 10;
/// The meter of every trace row's copy sent up.
pub const TRACE_METER: u32 = crate::audit::SPOOF_METER + 1;
/// Its rate and burst, packets per second: a trace sends a few dozen.
pub const TRACE_METER_PPS: u32 = 1000;
/// The first byte of a trace copy's userdata (an audit copy's is `A`).
pub const USERDATA_MAGIC: u8 = b'T';
/// The controller ids traces use: `CONTROLLER_ID_BASE + tag`.
pub const CONTROLLER_ID_BASE: u16 = 0x5400;

/// The cookie of trace `id`'s rows.
pub const fn trace_cookie(id: u32) -> u64 {
    cookie::cookie(Feature::LiveTrace, id as u64)
}

/// The cookie and mask that select every trace's rows.
pub const ALL_TRACES: (u64, u64) = (trace_cookie(0), cookie::FEATURE_MASK);

/// Whether `cookie` is a trace row's.
pub const fn is_trace_cookie(cookie: u64) -> bool {
    cookie & cookie::FEATURE_MASK == ALL_TRACES.0
}

/// The tables a trace observes: every table of the pipeline but the audit and version tables.
pub const OBSERVED: [Table; Table::ALL.len() - 2] = {
    let mut out = [Table::Classifier; Table::ALL.len() - 2];
    let mut i = 0;
    let mut o = 0;
    while i < Table::ALL.len() {
        let t = Table::ALL[i];
        if !matches!(t, Table::Audit | Table::Version) {
            out[o] = t;
            o += 1;
        }
        i += 1;
    }
    assert!(
        o == out.len(),
        "OBSERVED must list every table but Audit and Version"
    );
    out
};

/// The first bit of `reg7` that holds the trace's nonce (the bits below are the tables').
pub const NONCE_FIRST_BIT: u8 = OBSERVED.len() as u8;
/// The nonce's bits.
const NONCE_MASK: u64 = (1 << (32 - NONCE_FIRST_BIT as u64)) - 1;

/// The `reg7` bit of table `t`, if the trace observes it.
pub fn seen_bit(t: Table) -> Option<u32> {
    OBSERVED.iter().position(|o| *o == t).map(|i| i as u32)
}

/// What a copy sent up says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// The packet entered the table (an observation row).
    Entered = 1,
    /// A row output it to a local pod; the copy took its place.
    Delivered = 2,
    /// A row output it to tun0, VXLAN or a group; it went on.
    Left = 3,
    /// A row ended its path without an output.
    Dropped = 4,
}

/// A copy's userdata, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Note {
    /// What happened.
    pub event: Event,
    /// The table of the row.
    pub table: u8,
    /// The copied row's index in the list given to [`Probe::copies`] (0 for observations).
    pub row: u32,
}

impl Note {
    /// The userdata bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![USERDATA_MAGIC, self.event as u8, self.table];
        v.extend_from_slice(&self.row.to_be_bytes());
        v
    }

    /// Reads userdata written by [`Note::encode`]; `None` for anything else (an audit copy).
    pub fn decode(b: &[u8]) -> Option<Note> {
        let [m, e, table, r0, r1, r2, r3] = b else {
            return None;
        };
        if *m != USERDATA_MAGIC {
            return None;
        }
        let event = match e {
            1 => Event::Entered,
            2 => Event::Delivered,
            3 => Event::Left,
            4 => Event::Dropped,
            _ => return None,
        };
        Some(Note {
            event,
            table: *table,
            row: u32::from_be_bytes([*r0, *r1, *r2, *r3]),
        })
    }
}

/// The traced packet's transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// An echo request.
    Icmp,
    /// TCP from this source port.
    Tcp(u16),
    /// UDP from this source port.
    Udp(u16),
}

/// One trace: its id (the cookie), mark, source address and transport, and the controller
/// connection its copies go to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Unique among the node's running traces.
    pub id: u32,
    /// The DSCP, one of [`TAGS`].
    pub tag: u8,
    /// The source address of the packet.
    pub src: IpAddr,
    /// Its transport.
    pub transport: Transport,
    /// The trace's part on the node the packet went to over VXLAN (its copies go to another
    /// controller id than the sending node's own traces with the same mark).
    pub relay: bool,
}

/// What is known of the traced packet wherever it goes on this node: rows that need anything
/// else cannot meet it and are not copied. `None` is "not known" (anything may match).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Known {
    /// The destination address (unknown for a Service: the node's NAT changes it).
    pub dst: Option<IpAddr>,
    /// The destination port (unknown for a Service).
    pub dst_port: Option<u16>,
    /// The ports the packet can enter br0 by (the source pod's, tun0's, VXLAN's).
    pub in_ports: Option<Vec<u32>>,
    /// `reg2` wherever a row matches it: the destination pod's port (unknown for a Service).
    pub out_port: Option<u32>,
    /// `reg3` wherever a row matches it: the sending pod's port.
    pub src_port: Option<u32>,
    /// Whether the packet arrives over VXLAN (then rows on tunnel fields may match).
    pub tunneled: bool,
}

impl Probe {
    /// The trace's cookie.
    pub fn cookie(&self) -> u64 {
        trace_cookie(self.id)
    }

    /// The controller connection id its copies go to.
    pub fn controller_id(&self) -> u16 {
        CONTROLLER_ID_BASE + u16::from(self.tag) + if self.relay { 0x80 } else { 0 }
    }

    fn v6(&self) -> bool {
        self.src.is_ipv6()
    }

    /// The match every row of the trace has: the mark, the source, the transport.
    pub fn matching(&self) -> Match {
        let m = if self.v6() {
            Match::any().ipv6()
        } else {
            Match::any().ip()
        };
        self.narrow(m).expect("the empty match admits every packet")
    }

    /// `m` narrowed to the traced packet, or `None` when `m` cannot match it.
    fn narrow(&self, mut m: Match) -> Option<Match> {
        let (eth, proto) = match (self.v6(), self.transport) {
            (false, Transport::Icmp) => (0x0800, 1),
            (true, Transport::Icmp) => (0x86dd, 58),
            (v6, Transport::Tcp(_)) => (if v6 { 0x86dd } else { 0x0800 }, 6),
            (v6, Transport::Udp(_)) => (if v6 { 0x86dd } else { 0x0800 }, 17),
        };
        if m.eth_type.is_some_and(|t| t != eth)
            || m.ip_proto.is_some_and(|p| p != proto)
            || m.ip_dscp.is_some_and(|d| d != self.tag)
        {
            return None;
        }
        m.eth_type = Some(eth);
        m.ip_proto = Some(proto);
        m.ip_dscp = Some(self.tag);
        match self.src {
            IpAddr::V4(a) => {
                if m.ipv4_src.is_some_and(|s| !s.admits(a)) {
                    return None;
                }
                m.ipv4_src = Some(Masked::exact(a));
            }
            IpAddr::V6(a) => {
                if m.ipv6_src.is_some_and(|s| !s.admits(a)) {
                    return None;
                }
                m.ipv6_src = Some(Masked::exact(a));
            }
        }
        match self.transport {
            Transport::Icmp => {
                let echo = if self.v6() { 128 } else { 8 };
                if m.icmp_type.is_some_and(|t| t != echo) || m.icmp_code.is_some_and(|c| c != 0) {
                    return None;
                }
                m.icmp_type = Some(echo);
                m.icmp_code = Some(0);
            }
            Transport::Tcp(p) | Transport::Udp(p) => {
                if m.tp_src.is_some_and(|s| !s.admits(p)) {
                    return None;
                }
                m.tp_src = Some(Masked::exact(p));
            }
        }
        Some(m)
    }

    fn row(&self, table: u8, priority: u16, m: Match) -> Flow {
        let mut f = Flow::new(table, priority).matching(m);
        f.cookie = self.cookie();
        f.hard_timeout = HARD_TIMEOUT;
        f
    }

    fn up(&self, note: Note) -> Action {
        Action::ToController {
            max_len: u16::MAX,
            userdata: note.encode(),
            meter_id: Some(TRACE_METER),
            controller_id: self.controller_id(),
        }
    }

    /// The observation row of every observed table, and the row that keeps the traced packet
    /// out of table 130 (no audit line).
    pub fn observation_rows(&self) -> Vec<Flow> {
        let mut out: Vec<Flow> = OBSERVED
            .iter()
            .enumerate()
            .map(|(bit, t)| {
                let bit = 1u32 << bit;
                let m = self.matching().reg(
                    Reg::TraceSeen.number(),
                    Masked::new(0, bit).expect("one bit"),
                );
                self.row(t.id(), OBSERVE_PRIORITY, m)
                    .action(self.up(Note {
                        event: Event::Entered,
                        table: t.id(),
                        row: 0,
                    }))
                    .action(
                        Action::load(
                            ovs::flow::Subfield::range(
                                Reg::TraceSeen.field(),
                                bit.trailing_zeros() as u8,
                                bit.trailing_zeros() as u8,
                            )
                            .expect("a bit of a register"),
                            1,
                        )
                        .expect("one bit holds 1"),
                    )
                    .action(Action::Resubmit { table: t.id() })
            })
            .collect();
        // The trace's own number in reg7's high bits, before the first conntrack: the frozen
        // state a recirculation is keyed by then differs from every earlier trace's, so the
        // packet never meets a datapath flow an earlier trace's packet left cached.
        let nonce = Action::load(
            ovs::flow::Subfield::range(Reg::TraceSeen.field(), NONCE_FIRST_BIT, 31)
                .expect("reg7's high bits"),
            u64::from(self.id) & NONCE_MASK,
        )
        .expect("the nonce fits its bits");
        out[0].actions.insert(1, nonce);
        out.push(self.row(Table::Audit.id(), OBSERVE_PRIORITY, self.matching()));
        out
    }

    /// The copy of `row` (the `index`th of the rows given), or `None` when the traced packet
    /// cannot meet it (`known`), it is a trace's own, or its table is not observed. A row whose
    /// priority is above [`COPYABLE_MAX`] or whose actions this model cannot hold is refused:
    /// the trace could not keep the table's order.
    pub fn copy(&self, row: &Flow, index: u32, known: &Known) -> Result<Option<Flow>, String> {
        if is_trace_cookie(row.cookie)
            || Table::from_id(row.table).is_none_or(|t| seen_bit(t).is_none())
            || !may_meet(row, known)
        {
            return Ok(None);
        }
        let Some(m) = self.narrow(row.matches.clone()) else {
            return Ok(None);
        };
        if row.priority > COPYABLE_MAX {
            return Err(format!(
                "table {} has a row at priority {} (a trace copies rows up to {COPYABLE_MAX})",
                row.table, row.priority
            ));
        }
        if let Some(Action::Undecoded(why)) = row
            .actions
            .iter()
            .find(|a| matches!(a, Action::Undecoded(_)))
        {
            return Err(format!(
                "table {} priority {} has actions this agent cannot copy ({why})",
                row.table, row.priority
            ));
        }
        let note = |event| Note {
            event,
            table: row.table,
            row: index,
        };
        let clause = row
            .actions
            .iter()
            .any(|a| matches!(a, Action::Conjunction { .. }));
        let mut actions = Vec::with_capacity(row.actions.len() + 1);
        let (mut ends, mut passes) = (false, row.goto_table.is_some());
        for a in &row.actions {
            match a {
                // The audit copy and its table: a traced packet writes no audit line.
                Action::ToController { userdata, .. }
                    if userdata.as_slice() == crate::audit::AUDIT_USERDATA =>
                {
                    continue
                }
                Action::Resubmit { table } if *table == Table::Audit.id() => continue,
                Action::Resubmit { .. } => passes = true,
                Action::Ct(ct) if ct.recirc_table().is_some() => passes = true,
                Action::OutputReg(_) => {
                    if !ends {
                        actions.push(self.up(note(Event::Delivered)));
                    }
                    ends = true;
                    continue;
                }
                Action::Output(_) | Action::Group(_) | Action::Controller { .. } => {
                    if !ends {
                        actions.push(self.up(note(Event::Left)));
                    }
                    ends = true;
                }
                _ => {}
            }
            actions.push(a.clone());
        }
        if !ends && !passes && !clause {
            actions.push(self.up(note(Event::Dropped)));
        }
        let mut f = self.row(row.table, row.priority + COPY_OFFSET, m);
        f.actions = actions;
        f.goto_table = row.goto_table;
        Ok(Some(f))
    }

    /// Every row of the trace: the observation rows, then the copies of `rows` (each with its
    /// index in `rows`). Copies that narrowing made equal (same table, priority and match) are
    /// one row: conjunction clauses of different rules (a pod peer's `nw_src=IP` and an
    /// ipBlock's `nw_src=CIDR`, both now the source's address) keep all their `conjunction`
    /// actions, as Open vSwitch keeps a clause row's several; of other rows the first is kept.
    pub fn rows(&self, rows: &[Flow], known: &Known) -> Result<Vec<Flow>, String> {
        let mut out = self.observation_rows();
        let mut at: std::collections::HashMap<(u8, u16, String), usize> =
            std::collections::HashMap::new();
        for (i, r) in rows.iter().enumerate() {
            let Some(c) = self.copy(r, i as u32, known)? else {
                continue;
            };
            let key = (c.table, c.priority, c.matches.to_string());
            match at.get(&key) {
                Some(&j) => {
                    let clause = |f: &Flow| {
                        !f.actions.is_empty()
                            && f.actions
                                .iter()
                                .all(|a| matches!(a, Action::Conjunction { .. }))
                    };
                    if clause(&out[j]) && clause(&c) {
                        for a in c.actions {
                            if !out[j].actions.contains(&a) {
                                out[j].actions.push(a);
                            }
                        }
                    }
                }
                None => {
                    at.insert(key, out.len());
                    out.push(c);
                }
            }
        }
        Ok(out)
    }
}

/// Whether `row` can meet the traced packet as far as `known` tells (false only when a field
/// the row needs is known to differ).
fn may_meet(row: &Flow, known: &Known) -> bool {
    let m = &row.matches;
    if m.eth_type == Some(0x0806) {
        return false;
    }
    if !known.tunneled
        && (m.tun_id.is_some()
            || m.tun_src.is_some()
            || m.tun_dst.is_some()
            || m.tun_ipv6_src.is_some()
            || m.tun_ipv6_dst.is_some())
    {
        return false;
    }
    if let (Some(p), Some(ports)) = (m.in_port, &known.in_ports) {
        if !ports.contains(&p) {
            return false;
        }
    }
    let reg = |r: Reg| m.regs[usize::from(r.number())];
    if let (Some(want), Some(p)) = (reg(Reg::OutPort), known.out_port) {
        // reg2 is 0 until a table loads the destination's port.
        if !want.admits(p) && !want.admits(0) {
            return false;
        }
    }
    if let (Some(want), Some(p)) = (reg(Reg::SrcPort), known.src_port) {
        if !want.admits(p) && !want.admits(0) {
            return false;
        }
    }
    let dst_differs = match known.dst {
        Some(IpAddr::V4(d)) => m.ipv4_dst.is_some_and(|x| !x.admits(d)),
        Some(IpAddr::V6(d)) => m.ipv6_dst.is_some_and(|x| !x.admits(d)),
        None => false,
    };
    if dst_differs {
        return false;
    }
    if let (Some(want), Some(p)) = (m.tp_dst, known.dst_port) {
        if !want.admits(p) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn probe() -> Probe {
        Probe {
            id: 7,
            tag: 11,
            src: IpAddr::V4(Ipv4Addr::new(10, 128, 0, 2)),
            transport: Transport::Tcp(41_000),
            relay: false,
        }
    }

    fn parse(s: &str) -> Flow {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn observation_rows_mark_each_table_once_and_resubmit() {
        let rows = probe().observation_rows();
        assert_eq!(rows.len(), OBSERVED.len() + 1);
        let t80 = rows.iter().find(|r| r.table == 80).unwrap();
        let bit = seen_bit(Table::IngressIsolation).unwrap();
        assert_eq!(
            t80.to_string(),
            format!(
                "cookie=0xa000000000000007, table=80, hard_timeout=10, priority=65535,tcp,reg7=0/{:#x},nw_src=10.128.0.2,nw_tos=44,tp_src=41000 \
                 actions=controller(id=21515,userdata=54.01.50.00.00.00.00,meter_id={TRACE_METER}),load:0x1->NXM_NX_REG7[{bit}],resubmit(,80)",
                1u32 << bit
            )
        );
        // Table 0's row also writes the trace's nonce above the tables' bits.
        let t0 = rows.iter().find(|r| r.table == 0).unwrap().to_string();
        assert!(
            t0.contains(&format!("load:0x7->NXM_NX_REG7[{NONCE_FIRST_BIT}..31]")),
            "{t0}"
        );
        let audit = rows.last().unwrap();
        assert_eq!(audit.table, 130);
        assert!(audit.actions.is_empty() && audit.goto_table.is_none());
        assert!(rows
            .iter()
            .all(|r| is_trace_cookie(r.cookie) && r.hard_timeout == HARD_TIMEOUT));
        for r in &rows {
            r.matches.validate().unwrap();
        }
    }

    #[test]
    fn copies_keep_order_stop_deliveries_and_report_drops() {
        let p = probe();
        let known = Known {
            dst: Some(IpAddr::V4(Ipv4Addr::new(10, 128, 0, 3))),
            dst_port: Some(80),
            in_ports: Some(vec![1, 2, 3]),
            out_port: Some(4),
            src_port: Some(3),
            tunneled: false,
        };
        let rows = [
            // Output to the pod: stopped, reported.
            parse("table=80,priority=100,reg0=5,reg1=5 actions=output:NXM_NX_REG2[]"),
            // A logged drop: the audit copy goes, the drop is reported.
            parse("table=80,priority=50,ip,reg0=5 actions=load:0x2->NXM_NX_REG5[],resubmit(,130)"),
            // Passing rows are copied as they are.
            parse("table=70,priority=100,ip,nw_dst=10.128.0.3 actions=load:0x4->NXM_NX_REG2[],goto_table:75"),
            // To tun0: reported, and it goes on.
            parse("table=101,priority=0,ip actions=output:2"),
            // Rows the packet cannot meet.
            parse("table=70,priority=100,ip,nw_dst=10.128.0.9 actions=load:0x9->NXM_NX_REG2[],goto_table:75"),
            parse("table=20,priority=100,ip,in_port=9,nw_src=10.128.0.9 actions=goto_table:26"),
            parse("table=10,priority=100,tun_src=172.17.0.3 actions=goto_table:30"),
            parse("table=40,priority=100,arp,arp_tpa=10.128.0.3 actions=goto_table:75"),
            parse("table=27,priority=150,udp,reg3=0x3 actions=goto_table:30"),
            parse("table=80,priority=150,ip,reg2=0x7 actions=conjunction(1,1/2)"),
            // A clause row that may meet it: copied as it is.
            parse("table=80,priority=150,tcp,tp_dst=80 actions=conjunction(1,2/2)"),
            // The default drop.
            parse("table=0,priority=0 actions=drop"),
        ];
        let copies: Vec<String> = rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| p.copy(r, i as u32, &known).unwrap())
            .map(|f| {
                let s = f.to_string();
                s.split_once("priority=").unwrap().1.to_string()
            })
            .collect();
        let up = |e: u8, t: u8, i: u8| {
            format!("controller(id=21515,userdata=54.{e:02x}.{t:02x}.00.00.00.{i:02x},meter_id={TRACE_METER})")
        };
        let head = "tcp,nw_src=10.128.0.2,nw_tos=44,tp_src=41000";
        assert_eq!(
            copies,
            vec![
                format!("60100,tcp,reg0=0x5,reg1=0x5,nw_src=10.128.0.2,nw_tos=44,tp_src=41000 actions={}", up(2, 80, 0)),
                format!("60050,tcp,reg0=0x5,nw_src=10.128.0.2,nw_tos=44,tp_src=41000 actions=load:0x2->NXM_NX_REG5[],{}", up(4, 80, 1)),
                format!("60100,tcp,nw_src=10.128.0.2,nw_dst=10.128.0.3,nw_tos=44,tp_src=41000 actions=load:0x4->NXM_NX_REG2[],goto_table:75"),
                format!("60000,{head} actions={},output:2", up(3, 101, 3)),
                format!("60150,tcp,nw_src=10.128.0.2,nw_tos=44,tp_src=41000,tp_dst=80 actions=conjunction(1,2/2)"),
                format!("60000,{head} actions={}", up(4, 0, 11)),
            ]
        );
        // Another transport never meets a TCP trace's copies.
        assert!(p
            .copy(&parse("table=27,priority=150,udp actions=drop"), 0, &known)
            .unwrap()
            .is_none());
        // A row above the copyable range is refused, naming it.
        let e = p
            .copy(&parse("table=0,priority=6000,ip actions=drop"), 0, &known)
            .unwrap_err();
        assert!(e.contains("priority 6000"), "{e}");
    }

    #[test]
    fn clauses_that_narrowing_made_equal_keep_every_conjunction() {
        let p = probe();
        let rows = [
            // A pod peer and an ipBlock peer of two rules: both become the source's address.
            parse("table=80,priority=150,ip,nw_src=10.128.0.2 actions=conjunction(1,1/2)"),
            parse("table=80,priority=150,ip,nw_src=10.0.0.0/8 actions=conjunction(2,1/2)"),
            parse(
                "table=80,priority=150,tcp,tp_dst=80 actions=conjunction(1,2/2),conjunction(2,2/2)",
            ),
        ];
        let all = p.rows(&rows, &Known::default()).unwrap();
        let copies: Vec<String> = all[OBSERVED.len() + 1..]
            .iter()
            .map(|f| f.to_string().split_once("priority=").unwrap().1.to_string())
            .collect();
        assert_eq!(
            copies,
            vec![
                "60150,tcp,nw_src=10.128.0.2,nw_tos=44,tp_src=41000 actions=conjunction(1,1/2),conjunction(2,1/2)".to_string(),
                "60150,tcp,nw_src=10.128.0.2,nw_tos=44,tp_src=41000,tp_dst=80 actions=conjunction(1,2/2),conjunction(2,2/2)".to_string(),
            ]
        );
    }

    #[test]
    fn notes_round_trip_and_audit_userdata_is_not_a_note() {
        for event in [
            Event::Entered,
            Event::Delivered,
            Event::Left,
            Event::Dropped,
        ] {
            let n = Note {
                event,
                table: 90,
                row: 70_000,
            };
            assert_eq!(Note::decode(&n.encode()), Some(n));
        }
        assert_eq!(Note::decode(&crate::audit::AUDIT_USERDATA), None);
        assert_eq!(Note::decode(b"T\x09\x00\x00\x00\x00\x00"), None);
        assert!(TAGS.iter().all(|t| t % 4 == 3 && *t < 64));
        assert_eq!(OBSERVED.len(), Table::ALL.len() - 2);
    }
}
