//! `sdnctl trace --live`: one real, marked packet from a local pod's port, and what br0 really
//! did with it.
//!
//! The trace takes a free mark ([`flows::live_trace::TAGS`]), opens a connection of its own to
//! br0 as controller `0x5400 + mark` (so its reports never reach another trace or the audit
//! reader), dumps br0's rows, installs the trace's rows in one bundle (observation rows and
//! copies of every row the packet could meet, [`flows::live_trace`]), injects the packet at
//! the pod's port (`packet-out`, through the tables from table 0), reads the reports and
//! deletes the rows by their cookie, on every path out. The rows also carry a hard timeout and
//! the agent sweeps them at start-up, so a killed agent leaves none behind for long.
//!
//! The answer lists each table entered (with the conntrack state and registers the packet had
//! there) and the row that ended the packet's path: a local pod's port (the packet is stopped
//! there: no pod receives it), tun0 (the packet goes on into the node; for a Service the trace
//! follows it back into br0 after the node's NAT), VXLAN (the VNI and VTEP it really left
//! with), or the row that dropped it. Then it is compared with the static trace of the same
//! packet: where they disagree, the datapath and the tables disagree, and the answer says so.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use flows::live_trace::{Event, Known, Note, Probe, Transport, TAGS, TRACE_METER, TRACE_METER_PPS};
use local_api::{LiveEvent, LiveHop, LiveTrace, Outcome, TraceResult, VxlanHop};
use ovs::flow::Flow;
use ovs::openflow::{BundleMsg, DumpFilter, OfClient, PacketIn};

use super::frame::Frame;
use super::{table_name, End, Proto, TraceError};
use crate::operator::observe::NodeView;

/// How long the trace waits for the packet's last report.
const WAIT: Duration = Duration::from_millis(1500);
/// After a report that ends the path, how long it waits for stragglers.
const SETTLE: Duration = Duration::from_millis(100);
/// The most rows a trace installs (copies of the rows the packet can meet, and its own).
const MAX_ROWS: usize = 60_000;
/// The reports queued between the connection and the trace.
const QUEUE: usize = 1024;

/// The marks in use on this node.
static IN_USE: Mutex<u16> = Mutex::new(0);
/// The next trace id.
static NEXT_ID: AtomicU32 = AtomicU32::new(0);

/// A mark held for one trace, given back when dropped.
struct Mark(usize);

impl Mark {
    fn take() -> Result<Mark, TraceError> {
        let mut used = IN_USE.lock().unwrap_or_else(|e| e.into_inner());
        let free = (0..TAGS.len()).find(|i| *used & (1 << i) == 0).ok_or_else(|| {
            TraceError::BadRequest(format!(
                "{} live traces are running on this node, each with a mark of its own; try again when one ends (each takes about a second)",
                TAGS.len()
            ))
        })?;
        *used |= 1 << free;
        Ok(Mark(free))
    }

    fn dscp(&self) -> u8 {
        TAGS[self.0]
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        let mut used = IN_USE.lock().unwrap_or_else(|e| e.into_inner());
        *used &= !(1 << self.0);
    }
}

/// What the live trace needs from the static one: the resolved ends and the packet.
pub(super) struct Ask<'a> {
    pub src: &'a End,
    pub dst: &'a End,
    pub proto: Proto,
    pub in_port: u32,
    pub dl_src: &'a str,
    pub dl_dst: &'a str,
    pub nw_src: IpAddr,
    pub nw_dst: IpAddr,
    /// The static trace's answer, to compare with.
    pub expected: &'a TraceResult,
}

fn mac(s: &str) -> Result<[u8; 6], TraceError> {
    let m: ovs::flow::MacAddr = s
        .parse()
        .map_err(|_| TraceError::BadRequest(format!("MAC {s:?}: expected six hex bytes")))?;
    Ok(m.0)
}

/// Runs the live trace (see the module docs).
pub(super) async fn run(view: &NodeView, ask: Ask<'_>) -> Result<LiveTrace, TraceError> {
    let End::Pod { ofport, .. } = ask.src else {
        return Err(TraceError::BadRequest(
            "a live trace sends its packet from a local pod's port: give the source as NAMESPACE/POD (or a local pod's address)".into(),
        ));
    };
    let src_port = *ofport;
    let (transport, dst_port) = match ask.proto {
        Proto::Icmp => (Transport::Icmp, 0),
        Proto::Tcp(p) => (Transport::Tcp(0), p),
        Proto::Udp(p) => (Transport::Udp(0), p),
        Proto::Arp | Proto::Nd => {
            return Err(TraceError::BadRequest(
                "a live trace sends IP (icmp, tcp/PORT or udp/PORT): ARP and neighbour discovery carry no mark".into(),
            ))
        }
    };
    let mark = Mark::take()?;
    let nonce = nonce();
    // A source port of the trace's own, among the ephemeral ones.
    let sport = 49_152 + (nonce % 16_384) as u16;
    let transport = match transport {
        Transport::Tcp(_) => Transport::Tcp(sport),
        Transport::Udp(_) => Transport::Udp(sport),
        t => t,
    };
    let probe = Probe {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed) ^ (std::process::id() << 16),
        tag: mark.dscp(),
        src: ask.nw_src,
        transport,
    };
    let frame = Frame {
        src_mac: mac(ask.dl_src)?,
        dst_mac: mac(ask.dl_dst)?,
        src: ask.nw_src,
        dst: ask.nw_dst,
        dscp: probe.tag,
        transport,
        dst_port,
        nonce,
    }
    .bytes();
    let target = format!("unix:{}", view.config.bridge_mgmt.display());
    let client = OfClient::connect(&target)
        .await
        .map_err(|e| TraceError::Switch(format!("connecting to br0 at {target}: {e}")))?;
    let outcome = trace_on(view, &client, &probe, &ask, src_port, dst_port, &frame).await;
    // Every path out removes the rows (the hard timeout is for a killed agent).
    let removed = client.delete_by_cookie(probe.cookie(), u64::MAX).await;
    client.close();
    if let Err(e) = removed {
        tracing::warn!(trace = probe.id, error = %e, "a live trace's rows could not be deleted; they remove themselves within {} s", flows::live_trace::HARD_TIMEOUT);
    }
    drop(mark);
    outcome
}

fn nonce() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    t.subsec_nanos() ^ (t.as_secs() as u32).rotate_left(16) ^ std::process::id()
}

/// The trace on its connection: rows in, packet out, reports read, answer built.
async fn trace_on(
    view: &NodeView,
    client: &OfClient,
    probe: &Probe,
    ask: &Ask<'_>,
    src_port: u32,
    dst_port: u16,
    frame: &[u8],
) -> Result<LiveTrace, TraceError> {
    let switch = |what: &str, e: ovs::openflow::OfError| TraceError::Switch(format!("{what}: {e}"));
    let mut reports = client
        .receive_packet_ins_as(QUEUE, probe.controller_id())
        .await
        .map_err(|e| switch("asking br0 for the trace's reports", e))?;
    ensure_meter(client).await?;
    let rows = client
        .dump_flows(&DumpFilter::all())
        .await
        .map_err(|e| switch("reading br0's rows", e))?;
    let service = matches!(ask.dst, End::Service(_));
    let known = Known {
        dst: (!service).then_some(ask.nw_dst),
        dst_port: (!service && dst_port != 0).then_some(dst_port),
        in_ports: Some(vec![
            src_port,
            flows::base::TUN_PORT,
            flows::base::VXLAN_PORT,
        ]),
        out_port: match ask.dst {
            End::Pod { ofport, .. } => Some(*ofport),
            _ if service => None,
            // Nothing local receives it: no pod's port is ever loaded.
            _ => Some(0),
        },
        src_port: Some(src_port),
        tunneled: false,
    };
    let ours = probe
        .rows(&rows, &known)
        .map_err(|e| TraceError::Switch(format!("br0's rows cannot be traced live: {e}")))?;
    if ours.len() > MAX_ROWS {
        return Err(TraceError::Switch(format!(
            "a live trace of this packet would copy {} rows (at most {MAX_ROWS}); trace a packet to a pod rather than a Service",
            ours.len()
        )));
    }
    let msgs: Vec<BundleMsg> = ours.into_iter().map(BundleMsg::add).collect();
    client
        .bundle(&msgs)
        .await
        .map_err(|e| switch("installing the trace's rows", e))?;
    // The packet-out meets the new rows at once, but a packet the datapath gets later (back
    // from the node through tun0) may meet a cached datapath flow made before them, which
    // ignores the mark: wait until ovs-vswitchd has revalidated its cache.
    let ctl = super::vswitchd_ctl(view)?;
    ovs::unixctl::call(&ctl, "revalidator/wait", &[], Duration::from_secs(5))
        .await
        .map_err(|e| TraceError::Switch(format!("revalidator/wait on {}: {e}", ctl.display())))?;
    let start = Instant::now();
    client
        .packet_out(
            src_port,
            &[ovs::flow::Action::Output(ovs::flow::ports::TABLE)],
            frame,
        )
        .await
        .map_err(|e| switch("sending the packet", e))?;
    let mut seen = Vec::new();
    let mut deadline = start + WAIT;
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let Ok(Some(pin)) = tokio::time::timeout(deadline - now, reports.recv()).await else {
            break;
        };
        let Some(note) = Note::decode(&pin.userdata) else {
            continue;
        };
        let ends = ends_path(note, &pin, &rows, ask.dst);
        seen.push((note, pin, start.elapsed()));
        if ends {
            deadline = Instant::now() + SETTLE;
        }
    }
    let (lost_queue, _) = reports.lost();
    let owners = view.cookie_owners().await;
    Ok(answer(probe, ask, &rows, &owners, &seen, lost_queue))
}

/// Whether a report ends what the trace waits for: a delivery, a drop, a VXLAN exit, or a
/// tun0 exit that does not come back (anything but a Service and the node itself).
fn ends_path(note: Note, pin: &PacketIn, rows: &[Flow], dst: &End) -> bool {
    match note.event {
        Event::Entered => false,
        Event::Delivered | Event::Dropped => true,
        Event::Left => match exit_port(rows, note) {
            Some(p) if p == flows::base::TUN_PORT => {
                !matches!(dst, End::Service(_)) || pin.metadata.in_port == Some(p)
            }
            _ => true,
        },
    }
}

/// The port (or group) the copied row outputs to.
fn exit_port(rows: &[Flow], note: Note) -> Option<u32> {
    rows.get(note.row as usize)?
        .actions
        .iter()
        .find_map(|a| match a {
            ovs::flow::Action::Output(p) => Some(*p),
            _ => None,
        })
}

fn exit_group(rows: &[Flow], note: Note) -> Option<u32> {
    rows.get(note.row as usize)?
        .actions
        .iter()
        .find_map(|a| match a {
            ovs::flow::Action::Group(g) => Some(*g),
            _ => None,
        })
}

/// Adds the trace meter when br0 lacks it.
async fn ensure_meter(client: &OfClient) -> Result<(), TraceError> {
    let meters = client
        .dump_meters()
        .await
        .map_err(|e| TraceError::Switch(format!("reading br0's meters: {e}")))?;
    if meters.iter().any(|m| m.id == TRACE_METER) {
        return Ok(());
    }
    let m = ovs::openflow::Meter::packets(TRACE_METER, TRACE_METER_PPS, TRACE_METER_PPS)
        .map_err(|e| TraceError::Switch(format!("the trace meter: {e}")))?;
    match client
        .meter_mod(ovs::openflow::MeterModCommand::Add, &m)
        .await
    {
        Ok(()) => Ok(()),
        // Another trace added it meanwhile.
        Err(_)
            if client
                .dump_meters()
                .await
                .is_ok_and(|ms| ms.iter().any(|m| m.id == TRACE_METER)) =>
        {
            Ok(())
        }
        Err(e) => Err(TraceError::Switch(format!("adding the trace meter: {e}"))),
    }
}

/// `ct_state` bits as `ovs-ofctl` writes them.
fn ct_text(bits: Option<u32>) -> String {
    let Some(bits) = bits else {
        return String::new();
    };
    let mut s = String::new();
    for (bit, name) in [
        (0x01, "new"),
        (0x02, "est"),
        (0x04, "rel"),
        (0x08, "rpl"),
        (0x10, "inv"),
        (0x20, "trk"),
        (0x40, "snat"),
        (0x80, "dnat"),
    ] {
        if bits & bit != 0 {
            s.push('+');
            s.push_str(name);
        }
    }
    s
}

fn regs_text(pin: &PacketIn) -> String {
    (0..7)
        .filter(|n| pin.metadata.reg(*n) != 0)
        .map(|n| format!("reg{n}={:#x}", pin.metadata.reg(n)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The answer from the reports, in the order they came.
fn answer(
    probe: &Probe,
    ask: &Ask<'_>,
    rows: &[Flow],
    owners: &BTreeMap<u64, String>,
    seen: &[(Note, PacketIn, Duration)],
    lost_queue: u64,
) -> LiveTrace {
    let tun0 = flows::base::TUN_PORT;
    let vxlan = flows::base::VXLAN_PORT;
    let mut hops = Vec::with_capacity(seen.len());
    let mut pass = 1u8;
    let mut left_to_tun0 = false;
    let mut elapsed = Duration::ZERO;
    let mut vxlan_hop = None;
    for (note, pin, at) in seen {
        elapsed = *at;
        let in_port = pin.metadata.in_port.unwrap_or(0);
        if note.event == Event::Entered && note.table == 0 && left_to_tun0 && in_port == tun0 {
            pass += 1;
            left_to_tun0 = false;
        }
        let row = (note.event != Event::Entered)
            .then(|| rows.get(note.row as usize))
            .flatten();
        if note.event == Event::Left {
            match exit_port(rows, *note) {
                Some(p) if p == tun0 => left_to_tun0 = true,
                Some(p) if p == vxlan => {
                    vxlan_hop = pin.metadata.tun_dst.map(|ip| VxlanHop {
                        vni: pin.metadata.tun_id.unwrap_or(0) as u32,
                        remote_vtep: ip,
                        remote_node: None,
                    })
                }
                _ => {}
            }
        }
        hops.push(LiveHop {
            pass,
            table: note.table,
            table_name: table_name(note.table).to_string(),
            event: match note.event {
                Event::Entered => LiveEvent::Entered,
                Event::Delivered => LiveEvent::Delivered,
                Event::Left => LiveEvent::Left,
                Event::Dropped => LiveEvent::Dropped,
            },
            in_port,
            ct_state: ct_text(pin.metadata.ct_state),
            regs: regs_text(pin),
            row: row.map(|r| r.to_string()),
            owner: row.map(|r| {
                owners
                    .get(&r.cookie)
                    .cloned()
                    .unwrap_or_else(|| "unknown (not the agent's)".into())
            }),
        });
    }
    let last = seen
        .iter()
        .rev()
        .find(|(n, _, _)| n.event != Event::Entered)
        .map(|(n, p, _)| (*n, p));
    let (outcome, verdict) = match last {
        Some((n, pin)) => match n.event {
            Event::Delivered => {
                let port = pin.metadata.reg(usize::from(flows::Reg::OutPort.number()));
                (
                    Outcome::Delivered,
                    format!(
                        "delivered: table {} ({}) output it to port {port}{}; the trace stopped it there, so no pod received it",
                        n.table,
                        table_name(n.table),
                        match ask.dst {
                            End::Pod { ns, name, ofport, .. } if *ofport == port => format!(" ({ns}/{name})"),
                            _ => String::new(),
                        }
                    ),
                )
            }
            Event::Dropped => (
                Outcome::Dropped,
                format!(
                    "dropped in table {} ({}) by the row shown last",
                    n.table,
                    table_name(n.table)
                ),
            ),
            _ => match (exit_port(rows, n), exit_group(rows, n)) {
                (Some(p), _) if p == vxlan => (
                    Outcome::ToRemoteNode,
                    match &vxlan_hop {
                        Some(v) => format!(
                            "left over VXLAN from table {} ({}) with VNI {} to VTEP {}",
                            n.table,
                            table_name(n.table),
                            v.vni,
                            v.remote_vtep
                        ),
                        None => format!("left over VXLAN from table {}", n.table),
                    },
                ),
                (Some(p), _) if p == tun0 => (
                    Outcome::ToHost,
                    match ask.dst {
                        End::Service(_) => format!(
                            "handed to the node at tun0 from table {} ({}) and not seen back in br0 within {} ms: the node's NAT and routing did not send it back (no endpoint, or one off the cluster network)",
                            n.table,
                            table_name(n.table),
                            WAIT.as_millis()
                        ),
                        _ => format!(
                            "handed to the node at tun0 from table {} ({}): beyond br0 the node's routing and NAT take it ({})",
                            n.table,
                            table_name(n.table),
                            match ask.dst {
                                End::External(ip) => format!("{ip} is outside the cluster"),
                                End::Node => "it is for this node".into(),
                                _ => "it is not for a pod of this node".into(),
                            }
                        ),
                    },
                ),
                (_, Some(g)) => (
                    Outcome::ToHost,
                    format!("left by group {g} from table {} ({}) (a tenant's egress IP)", n.table, table_name(n.table)),
                ),
                (p, _) => (
                    Outcome::ToHost,
                    format!("left by port {} from table {}", p.unwrap_or(0), n.table),
                ),
            },
        },
        None => match seen.last() {
            Some((n, _, _)) => (
                Outcome::Dropped,
                format!(
                    "dropped in table {} ({}): no row of that table matched it (a table miss)",
                    n.table,
                    table_name(n.table)
                ),
            ),
            None => (
                Outcome::Dropped,
                "no report came back: br0 did not run the packet through its tables (is the pod's port still on br0?)".into(),
            ),
        },
    };
    let mut live = LiveTrace {
        packet: describe(probe, ask),
        dscp: probe.tag,
        hops,
        outcome,
        verdict,
        vxlan: vxlan_hop,
        differs: Vec::new(),
        gaps: (lost_queue > 0).then(|| format!("{lost_queue} reports were lost in the queue")),
        elapsed_ms: elapsed.as_millis() as u64,
    };
    live.differs = compare(&live, ask.expected);
    live
}

fn describe(probe: &Probe, ask: &Ask<'_>) -> String {
    let (kind, sport, dport) = match (probe.transport, ask.proto) {
        (Transport::Tcp(s), Proto::Tcp(d)) => ("TCP SYN", format!(":{s}"), format!(":{d}")),
        (Transport::Udp(s), Proto::Udp(d)) => ("UDP", format!(":{s}"), format!(":{d}")),
        _ => ("ICMP echo request", String::new(), String::new()),
    };
    format!(
        "{kind} {}{sport} -> {}{dport}, DSCP {} (the trace's mark), sent at port {}",
        ask.nw_src, ask.nw_dst, probe.tag, ask.in_port
    )
}

/// Where the first pass of the live packet and the static trace disagree.
fn compare(live: &LiveTrace, expected: &TraceResult) -> Vec<String> {
    let mut out = Vec::new();
    let first: Vec<&LiveHop> = live.hops.iter().filter(|h| h.pass == 1).collect();
    // Where the first pass ended: the static trace stops where the packet leaves br0.
    let first_end = first.iter().rev().find(|h| h.event != LiveEvent::Entered);
    let live_first = match first_end.map(|h| h.event) {
        Some(LiveEvent::Delivered) => Outcome::Delivered,
        Some(LiveEvent::Dropped) | None => Outcome::Dropped,
        Some(_) => match (&live.vxlan, live.outcome) {
            (Some(_), _) => Outcome::ToRemoteNode,
            _ => Outcome::ToHost,
        },
    };
    let name = |o: Outcome| match o {
        Outcome::Delivered => "delivered",
        Outcome::ToHost => "to the node (tun0)",
        Outcome::ToRemoteNode => "to another node (VXLAN)",
        Outcome::Dropped => "dropped",
    };
    if live_first != expected.outcome {
        out.push(format!(
            "the real packet was {} but the static trace says {}: br0's datapath and its tables disagree (a bug or drift: report both answers)",
            name(live_first),
            name(expected.outcome)
        ));
    }
    let live_table = first_end.or(first.last()).map(|h| h.table_name.as_str());
    if live_first == expected.outcome {
        if let Some(t) = live_table.filter(|t| *t != expected.decided_in) {
            out.push(format!(
                "the real packet ended in table {t} but the static trace in {}",
                expected.decided_in
            ));
        }
    }
    if let (Some(l), Some(s)) = (&live.vxlan, &expected.vxlan) {
        if l.vni != s.vni || l.remote_vtep != s.remote_vtep {
            out.push(format!(
                "the real packet left with VNI {} to {} but the static trace says VNI {} to {}",
                l.vni, l.remote_vtep, s.vni, s.remote_vtep
            ));
        }
    }
    // The static trace assumes a new connection; say when conntrack saw something else.
    if let Some(h) = first
        .iter()
        .find(|h| h.ct_state.contains("trk"))
        .filter(|h| !h.ct_state.contains("new"))
    {
        out.push(format!(
            "conntrack had the packet as {} in table {} (the static trace assumes +new+trk)",
            h.ct_state, h.table_name
        ));
    }
    out
}
