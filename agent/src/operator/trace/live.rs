//! `sdnctl trace --live`: one real, marked packet from a local pod's port, and what br0 really
//! did with it.
//!
//! The trace takes a free mark ([`flows::live_trace::TAGS`]), arms br0 ([`armed`]: a
//! connection of its own as controller `0x5400 + mark`, so its reports never reach another
//! trace or the audit reader; the trace's rows in one bundle, observation rows and copies of
//! every row the packet could meet, [`flows::live_trace`]), injects the packet at the pod's
//! port (`packet-out`, through the tables from table 0), reads the reports and deletes the rows
//! by their cookie, on every path out. The rows also carry a hard timeout and the agent sweeps
//! them at start-up, so a killed agent leaves none behind for long.
//!
//! To a pod of another node, that node's agent is asked first to arm its own br0 for the
//! packet ([`relay`]) and reports what its br0 did; a packet that leaves over VXLAN for a node
//! nobody asked (a Service's endpoint, an egress IP) is sent again once that node is armed.
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

use flows::live_trace::{Event, Known, Note, Probe, Transport, TAGS};
use local_api::{LiveEvent, LiveHop, LiveRemote, LiveTrace, Outcome, TraceResult};
use ovs::flow::Flow;
use ovs::openflow::PacketIn;

use super::frame::Frame;
use super::{armed, relay, End, Proto, TraceError};
use crate::operator::observe::NodeView;

/// How long the trace waits for the packet's last report.
const WAIT: Duration = Duration::from_millis(1500);
/// After a report that ends the path, how long it waits for stragglers.
const SETTLE: Duration = Duration::from_millis(100);
/// How long the trace waits for the destination's node to be ready to watch.
const ARM_WAIT: Duration = Duration::from_secs(3);

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
        relay: false,
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
            // The node's NAT may send it to any pod.
            End::Service(_) => None,
            // No table loads a pod's port for it (it is not a reply: a new connection).
            _ => Some(0),
        },
        src_port: Some(src_port),
        tunneled: false,
    };
    // A pod of another node of ours: ask that node to watch for the packet first.
    let mut unasked = None;
    let mut asked = match ask.dst {
        End::Remote { node: Some(n), .. } => match ask_node(view, &probe, &ask, n, None).await {
            Ok(r) => Some(r),
            Err(lr) => {
                unasked = Some(lr);
                None
            }
        },
        _ => None,
    };
    let result = async {
        // Only a Service's packet comes back into br0 (through tun0, from the datapath).
        let mut armed = armed::arm(view, &probe, &known, service).await?;
        if let Some(r) = &mut asked {
            r.armed = r.await_armed().await;
        }
        let start = Instant::now();
        let ends = |n: Note, pin: &PacketIn, rows: &[Flow]| ends_path(n, pin, rows, ask.dst);
        if let Err(e) = armed.send(src_port, &frame).await {
            armed.disarm().await;
            return Err(e);
        }
        let seen = armed.collect(start, start + WAIT, SETTLE, ends).await;
        // It left over VXLAN for a node nobody asked (a Service's endpoint there, a tenant's
        // egress IP there): ask that node now and send the same packet again. The node's
        // conntrack takes it as the same connection, so its NAT sends it the same way.
        let mut again_differs = None;
        if asked.is_none() && unasked.is_none() {
            if let Some((node, dst)) = vxlan_node(view, &armed.rows, &seen) {
                match ask_node(view, &probe, &ask, &node, Some(dst)).await {
                    Ok(mut r) => {
                        r.armed = r.await_armed().await;
                        r.again = true;
                        if r.armed {
                            let at = Instant::now();
                            armed.send(src_port, &frame).await.ok();
                            let again = armed.collect(at, at + WAIT, SETTLE, ends).await;
                            let went = vxlan_node(view, &armed.rows, &again).map(|v| v.0);
                            if went.as_deref() != Some(node.as_str()) {
                                again_differs = Some(format!(
                                    "the packet sent again for node {node} did not leave for it (the node's NAT chose another way)"
                                ));
                            }
                        }
                        asked = Some(r);
                    }
                    Err(lr) => unasked = Some(lr),
                }
            }
        }
        let lost = armed.lost();
        let installed = armed.installed;
        let rows = std::mem::take(&mut armed.rows);
        armed.disarm().await;
        let remote_part = match &asked {
            Some(r) => Some(r.finish().await),
            None => unasked.take(),
        };
        let owners = view.cookie_owners().await;
        let mut live = answer(&probe, &ask, &rows, &owners, &seen, lost, remote_part);
        live.differs.extend(again_differs);
        live.rows = installed;
        Ok(live)
    }
    .await;
    if let Some(r) = &asked {
        r.board.remove(&r.req.name).await;
    }
    drop(mark);
    result
}

/// A request to another node to watch for the packet, as it stands.
struct Asked {
    board: relay::Board,
    req: relay::Request,
    /// The node said it is ready.
    armed: bool,
    /// The packet was sent again for it.
    again: bool,
}

impl Asked {
    async fn await_armed(&self) -> bool {
        relay::await_reply(
            &self.board,
            &self.req.name,
            Instant::now() + ARM_WAIT,
            |r| r.armed || r.done,
        )
        .await
        .is_some_and(|r| r.armed)
    }

    /// What the node said, or why it said nothing.
    async fn finish(&self) -> LiveRemote {
        let node = self.req.target.clone();
        let silent = |verdict: String| LiveRemote {
            node: node.clone(),
            hops: Vec::new(),
            outcome: None,
            verdict,
        };
        if !self.armed {
            return silent(
                match self.board.reply(&self.req.name).await.and_then(|r| r.error) {
                    Some(e) => format!("node {node} could not watch: {e}"),
                    None => format!(
                        "node {node} did not get ready to watch within {} ms (is its agent running?)",
                        ARM_WAIT.as_millis()
                    ),
                },
            );
        }
        let give_up = Instant::now() + WAIT + Duration::from_millis(500);
        match relay::await_reply(&self.board, &self.req.name, give_up, |r| r.done)
            .await
            .filter(|r| r.done)
        {
            Some(r) => LiveRemote {
                node: r.node,
                hops: r.hops,
                outcome: r.outcome,
                verdict: match (r.error, self.again) {
                    (Some(e), _) => e,
                    (None, true) => format!(
                        "{} (the same packet, sent again once this node was ready: the sending node's conntrack keeps a connection's way)",
                        r.verdict
                    ),
                    (None, false) => r.verdict,
                },
            },
            None => silent(format!(
                "node {node} did not say what its br0 did within {} ms",
                (WAIT + Duration::from_millis(500)).as_millis()
            )),
        }
    }
}

/// Asks `node` to watch for the probe's packet, going to `seen` (where a report showed it
/// going after the node's NAT) or else to the trace's destination.
async fn ask_node(
    view: &NodeView,
    probe: &Probe,
    ask: &Ask<'_>,
    node: &str,
    seen: Option<(IpAddr, u16)>,
) -> Result<Asked, LiveRemote> {
    let (src_port, dst_port) = match (probe.transport, ask.proto) {
        (Transport::Tcp(s), Proto::Tcp(d)) | (Transport::Udp(s), Proto::Udp(d)) => (s, d),
        _ => (0, 0),
    };
    let (dst, dst_port) = seen.unwrap_or((ask.nw_dst, dst_port));
    let req = relay::Request {
        name: format!("{}-{:08x}", view.config.node_name, probe.id),
        origin: view.config.node_name.clone(),
        target: node.to_string(),
        dscp: probe.tag,
        src: ask.nw_src,
        dst,
        protocol: match probe.transport {
            Transport::Icmp => "icmp",
            Transport::Tcp(_) => "tcp",
            Transport::Udp(_) => "udp",
        }
        .into(),
        src_port,
        dst_port,
        expires: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| (d + relay::LIFETIME).as_secs()),
    };
    let posted = match relay::board(view).await {
        Ok(board) => board.post(&req).await.map(|()| board),
        Err(e) => Err(e),
    };
    match posted {
        Ok(board) => Ok(Asked {
            board,
            req,
            armed: false,
            again: false,
        }),
        Err(e) => {
            tracing::warn!(node, error = %e, "a live trace could not ask the destination's node to watch");
            Err(LiveRemote {
                node: node.to_string(),
                hops: Vec::new(),
                outcome: None,
                verdict: format!("this node could not ask it to watch: {e}"),
            })
        }
    }
}

/// The node of ours the packet left for over VXLAN, by the VTEP it really had, and where the
/// packet was going then.
fn vxlan_node(
    view: &NodeView,
    rows: &[Flow],
    seen: &[armed::Report],
) -> Option<(String, (IpAddr, u16))> {
    let (_, pin, _) = seen.iter().find(|(n, _, _)| {
        n.event == Event::Left && armed::exit_port(rows, *n) == Some(flows::base::VXLAN_PORT)
    })?;
    let vtep = IpAddr::V4(pin.metadata.tun_dst?);
    let state = view.state.borrow().clone();
    state
        .host_subnets
        .values()
        .find(|hs| hs.host_ip_addr().ok() == Some(vtep) && hs.host != view.config.node_name)
        .and_then(|hs| Some((hs.host.clone(), armed::destination(&pin.packet)?)))
}

fn nonce() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    t.subsec_nanos() ^ (t.as_secs() as u32).rotate_left(16) ^ std::process::id()
}

/// Whether a report ends what the trace waits for: a delivery, a drop, a VXLAN exit, or a
/// tun0 exit that does not come back (anything but a Service).
fn ends_path(note: Note, _pin: &PacketIn, rows: &[Flow], dst: &End) -> bool {
    match note.event {
        Event::Entered => false,
        Event::Delivered | Event::Dropped => true,
        Event::Left => match armed::exit_port(rows, note) {
            Some(p) if p == flows::base::TUN_PORT => !matches!(dst, End::Service(_)),
            _ => true,
        },
    }
}

/// The answer from the reports, in the order they came.
fn answer(
    probe: &Probe,
    ask: &Ask<'_>,
    rows: &[Flow],
    owners: &BTreeMap<u64, String>,
    seen: &[armed::Report],
    lost_queue: u64,
    remote: Option<LiveRemote>,
) -> LiveTrace {
    let (hops, vxlan_hop) = armed::hops(rows, owners, seen);
    let pod_at = |port: u32| match ask.dst {
        End::Pod {
            ns, name, ofport, ..
        } if *ofport == port => Some(format!("{ns}/{name}")),
        _ => None,
    };
    let elapsed = seen.last().map_or(Duration::ZERO, |r| r.2);
    let (mut outcome, mut verdict) = match armed::ending(rows, seen, vxlan_hop.as_ref(), &pod_at) {
        Some((Outcome::ToHost, words, n))
            if armed::exit_port(rows, n) == Some(flows::base::TUN_PORT) =>
        {
            let why = match ask.dst {
                End::Service(_) => format!(
                    "; not seen back in br0 within {} ms: the node's NAT and routing did not send it back (no endpoint, or one off the cluster network)",
                    WAIT.as_millis()
                ),
                End::External(ip) => format!(
                    ": {ip} is outside the cluster, so beyond br0 the node's routing and NAT take it"
                ),
                End::Node => ": it is for this node".into(),
                _ => ": it is not for a pod of this node".into(),
            };
            (Outcome::ToHost, format!("{words}{why}"))
        }
        Some((o, words, _)) => (o, words),
        None => (Outcome::Dropped, armed::no_ending(seen)),
    };
    if let Some(r) = &remote {
        if let Some(o) = r.outcome {
            outcome = o;
        }
        verdict = format!("{verdict}; on node {}: {}", r.node, r.verdict);
    }
    let vxlan = vxlan_hop.map(|mut v| {
        v.remote_node = remote.as_ref().map(|r| r.node.clone()).or(match ask.dst {
            End::Remote { node, .. } => node.clone(),
            _ => None,
        });
        v
    });
    let mut live = LiveTrace {
        packet: describe(probe, ask),
        dscp: probe.tag,
        hops,
        outcome,
        verdict,
        vxlan,
        differs: Vec::new(),
        gaps: (lost_queue > 0).then(|| format!("{lost_queue} reports were lost in the queue")),
        elapsed_ms: elapsed.as_millis() as u64,
        rows: 0,
        remote,
    };
    // Where the first pass left br0 (the static trace stops there too).
    let first_exit = live
        .hops
        .iter()
        .zip(seen)
        .filter(|(h, (n, _, _))| h.pass == 1 && n.event == Event::Left)
        .map(|(_, (n, _, _))| armed::exit_port(rows, *n))
        .next_back();
    live.differs = compare(&live, first_exit, ask.expected);
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
fn compare(
    live: &LiveTrace,
    first_exit: Option<Option<u32>>,
    expected: &TraceResult,
) -> Vec<String> {
    let mut out = Vec::new();
    let first: Vec<&LiveHop> = live.hops.iter().filter(|h| h.pass == 1).collect();
    // Where the first pass ended: the static trace stops where the packet leaves br0.
    let first_end = first.iter().rev().find(|h| h.event != LiveEvent::Entered);
    let live_first = match first_end.map(|h| h.event) {
        Some(LiveEvent::Delivered) => Outcome::Delivered,
        Some(LiveEvent::Dropped) | None => Outcome::Dropped,
        Some(_) => match first_exit.flatten() {
            Some(p) if p == flows::base::VXLAN_PORT => Outcome::ToRemoteNode,
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
    // Where a packet was delivered or dropped names the deciding table; an exit is compared
    // by where it went (below).
    if live_first == expected.outcome && matches!(live_first, Outcome::Delivered | Outcome::Dropped)
    {
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
