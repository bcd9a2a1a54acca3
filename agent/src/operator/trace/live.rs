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

use super::frame::Frame;
use super::{armed, relay, End, Proto, TraceError};
use crate::operator::observe::NodeView;

/// How long the trace waits for the packet's last report.
const WAIT: Duration = Duration::from_millis(800);
/// After a report that ends the path, how long it waits for stragglers.
const SETTLE: Duration = Duration::from_millis(100);
/// How long the trace waits for the destination's node to be ready to watch.
const ARM_WAIT: Duration = Duration::from_secs(2);

/// The marks in use on this node.
static IN_USE: Mutex<u16> = Mutex::new(0);

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
    if ask.nw_dst.is_multicast() {
        return Err(TraceError::BadRequest(format!(
            "{}: a live trace follows one unicast packet; multicast reaches every member (trace a member's address)",
            ask.nw_dst
        )));
    }
    let mark = Mark::take()?;
    let id = next_id();
    // A source port of the trace's own, among the ephemeral ones.
    let sport = 49_152 + (id % 16_384) as u16;
    let transport = match transport {
        Transport::Tcp(_) => Transport::Tcp(sport),
        Transport::Udp(_) => Transport::Udp(sport),
        t => t,
    };
    let probe = Probe {
        // Unique on this node, and across its restarts (the relay's request names use it).
        id,
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
        nonce: id,
    }
    .bytes();
    // Where the node's NAT may change the destination and send the packet back into br0: a
    // Service, and the node's own or an outside address (a NodePort, an external IP).
    let service = matches!(ask.dst, End::Service(_) | End::Node(_) | End::External(_));
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
            _ if service => None,
            // No table loads a pod's port for it (it is not a reply: a new connection).
            _ => Some(0),
        },
        src_port: Some(src_port),
        tunneled: false,
    };
    // A pod of another node of ours: ask that node to watch for the packet first.
    let mut unasked = None;
    let mut asked: Vec<Asked> = Vec::new();
    if let End::Remote { node: Some(n), .. } = ask.dst {
        match ask_node(view, &probe, &ask, n, None, "").await {
            Ok(r) => asked.push(r),
            Err(lr) => unasked = Some(lr),
        }
    }
    let result = async {
        // Only a packet the node's NAT may send back comes into br0 again from the datapath.
        let mut armed = armed::arm(view, &probe, &known, service).await?;
        await_all_armed(&mut asked).await;
        if !asked.is_empty() && !asked.iter().any(|r| r.armed) {
            // Unwatched there, the packet would reach the pod: it is not sent at all.
            armed.disarm().await;
            let part = asked[0].finish().await;
            return Ok(not_sent(&probe, &ask, part));
        }
        let start = Instant::now();
        let back = matches!(ask.dst, End::Service(_));
        let ends = |n: Note, rows: &[Flow]| armed::ends_path(n, rows, back);
        if let Err(e) = armed.send(src_port, &frame).await {
            armed.disarm().await;
            return Err(e);
        }
        let seen = armed.collect(start, start + WAIT, SETTLE, ends).await;
        // Where it left over VXLAN (by a VXLAN row, or a tenant's egress-IP group).
        let (nodes, seen_dst) = vxlan_nodes(view, &armed, &seen).await;
        // For nodes nobody asked (a Service's endpoint there, a tenant's egress IP there): ask
        // them now and send the same packet again. The node's conntrack takes it as the same
        // connection, so its NAT sends it the same way, and an egress-IP group's hash picks
        // the same bucket.
        if asked.is_empty() && unasked.is_none() && !nodes.is_empty() {
            for (i, node) in nodes.iter().enumerate() {
                let suffix = if nodes.len() > 1 { format!("-{i}") } else { String::new() };
                match ask_node(view, &probe, &ask, node, seen_dst, &suffix).await {
                    Ok(r) => asked.push(r),
                    Err(lr) => unasked = Some(lr),
                }
            }
            await_all_armed(&mut asked).await;
            for r in &mut asked {
                r.again = true;
            }
            if asked.iter().any(|r| r.armed) {
                let at = Instant::now();
                armed.send(src_port, &frame).await.ok();
                armed.collect(at, at + WAIT, SETTLE, ends).await;
            }
        }
        let lost = armed.lost();
        let installed = armed.installed;
        let rows = std::mem::take(&mut armed.rows);
        armed.disarm().await;
        let mut parts = Vec::with_capacity(asked.len());
        for r in &asked {
            parts.push(r.finish().await);
        }
        // Of several nodes asked (an egress-IP group's), the one the packet reached.
        let arrived = parts.iter().position(|p| !p.hops.is_empty());
        let mut differs = Vec::new();
        if arrived.is_none() && asked.iter().any(|r| r.again && r.armed) {
            differs.push(format!(
                "the packet sent again for {} did not arrive there (the node's NAT or the group chose another way)",
                nodes.join(", ")
            ));
        }
        let remote_part = match arrived {
            Some(i) => Some(parts.swap_remove(i)),
            None => parts.into_iter().next().or(unasked.take()),
        };
        let owners = view.cookie_owners().await;
        let mut live = answer(
            &probe,
            &ask,
            Seen {
                rows: &rows,
                reports: &seen,
                left_for_nodes: !nodes.is_empty(),
            },
            &owners,
            lost,
            remote_part,
        );
        live.differs.extend(differs);
        live.rows = installed;
        Ok(live)
    }
    .await;
    for r in &asked {
        r.board.remove(&r.req.name).await;
    }
    drop(mark);
    result
}

/// Waits until each of `asked` is armed or gives up, all at once.
async fn await_all_armed(asked: &mut [Asked]) {
    let armed = futures::future::join_all(asked.iter().map(|r| r.await_armed())).await;
    for (r, a) in asked.iter_mut().zip(armed) {
        r.armed = a;
    }
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
/// going after the node's NAT) or else to the trace's destination; `suffix` tells apart the
/// requests of one trace to several nodes.
async fn ask_node(
    view: &NodeView,
    probe: &Probe,
    ask: &Ask<'_>,
    node: &str,
    seen: Option<(IpAddr, u16)>,
    suffix: &str,
) -> Result<Asked, LiveRemote> {
    let (src_port, dst_port) = match (probe.transport, ask.proto) {
        (Transport::Tcp(s), Proto::Tcp(d)) | (Transport::Udp(s), Proto::Udp(d)) => (s, d),
        _ => (0, 0),
    };
    let (dst, dst_port) = seen.unwrap_or((ask.nw_dst, dst_port));
    let req = relay::Request {
        name: format!("{}-{:08x}{suffix}", view.config.node_name, probe.id),
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
        expires: relay::now_secs() + relay::LIFETIME.as_secs(),
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

/// The nodes of ours the packet left for over VXLAN (by the VTEP it really had; for an
/// egress-IP group, every VTEP among its buckets, one of which its hash picks), and where the
/// packet was going then.
async fn vxlan_nodes(
    view: &NodeView,
    armed: &armed::Armed,
    seen: &[armed::Report],
) -> (Vec<String>, Option<(IpAddr, u16)>) {
    let rows = &armed.rows;
    let Some((n, pin, _)) = seen.iter().find(|(n, _, _)| {
        n.event == Event::Left
            && (armed::exit_port(rows, *n) == Some(flows::base::VXLAN_PORT)
                || armed::exit_group(rows, *n).is_some())
    }) else {
        return (Vec::new(), None);
    };
    let vteps: Vec<IpAddr> = match (armed::exit_group(rows, *n), pin.metadata.tun_dst) {
        (Some(g), _) => armed.group_vteps(g).await,
        (None, Some(ip)) => vec![IpAddr::V4(ip)],
        (None, None) => Vec::new(),
    };
    let state = view.state.borrow().clone();
    let nodes = state
        .host_subnets
        .values()
        .filter(|hs| hs.host != view.config.node_name)
        .filter(|hs| hs.host_ip_addr().is_ok_and(|ip| vteps.contains(&ip)))
        .map(|hs| hs.host.clone())
        .collect();
    (nodes, armed::destination(&pin.packet))
}

/// A trace's id: a random start per process (request names differ across restarts), then one
/// more per trace (reg7's nonce bits, 9 above the tables' 23, and the source port differ from
/// the last 512 and 16,384 traces' on this node).
fn next_id() -> u32 {
    static BASE: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = *BASE.get_or_init(|| {
        let mut b = [0u8; 4];
        if getrandom::fill(&mut b).is_err() {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            return t.subsec_nanos() ^ (t.as_secs() as u32).rotate_left(16) ^ std::process::id();
        }
        u32::from_ne_bytes(b)
    });
    base.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed))
}

/// What the trace saw on this node: br0's rows as armed, the reports, and whether the packet
/// left over VXLAN for nodes of ours (by a VXLAN row or an egress-IP group).
#[derive(Clone, Copy)]
struct Seen<'a> {
    rows: &'a [Flow],
    reports: &'a [armed::Report],
    left_for_nodes: bool,
}

/// The answer when the packet was not sent (the node it goes to could not watch).
fn not_sent(probe: &Probe, ask: &Ask<'_>, remote: LiveRemote) -> LiveTrace {
    LiveTrace {
        packet: describe(probe, ask),
        dscp: probe.tag,
        hops: Vec::new(),
        outcome: ask.expected.outcome,
        verdict: format!(
            "not sent: {}; unwatched there, the packet would reach the pod (the static trace above says where it goes)",
            remote.verdict
        ),
        vxlan: None,
        differs: Vec::new(),
        gaps: None,
        elapsed_ms: 0,
        rows: 0,
        remote: Some(remote),
    }
}

/// The answer from the reports, in the order they came.
fn answer(
    probe: &Probe,
    ask: &Ask<'_>,
    seen: Seen<'_>,
    owners: &BTreeMap<u64, String>,
    lost_queue: u64,
    remote: Option<LiveRemote>,
) -> LiveTrace {
    let Seen {
        rows,
        reports: seen,
        left_for_nodes,
    } = seen;
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
                End::Node(_) => ": it is for this node".into(),
                _ => ": it is not for a pod of this node".into(),
            };
            (Outcome::ToHost, format!("{words}{why}"))
        }
        // A tenant's egress-IP group whose IPs are on other nodes: over VXLAN.
        Some((Outcome::ToHost, words, n))
            if left_for_nodes && armed::exit_group(rows, n).is_some() =>
        {
            (
                Outcome::ToRemoteNode,
                format!("{words}, over VXLAN to the node holding it"),
            )
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
        .map(|(_, (n, _, _))| match armed::exit_group(rows, *n) {
            Some(_) if left_for_nodes => Some(flows::base::VXLAN_PORT),
            _ => armed::exit_port(rows, *n),
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(pass: u8, table: u8, event: LiveEvent, ct: &str) -> LiveHop {
        LiveHop {
            pass,
            table,
            table_name: super::super::table_name(table).to_string(),
            event,
            in_port: 3,
            ct_state: ct.into(),
            regs: String::new(),
            row: None,
            owner: None,
        }
    }

    fn expected(outcome: Outcome, decided_in: &str) -> TraceResult {
        TraceResult {
            src: String::new(),
            dst: String::new(),
            packet: String::new(),
            steps: Vec::new(),
            outcome,
            decided_in: decided_in.into(),
            verdict: String::new(),
            vxlan: None,
            policy: Vec::new(),
            raw: String::new(),
            live: None,
        }
    }

    fn live(hops: Vec<LiveHop>) -> LiveTrace {
        LiveTrace {
            packet: String::new(),
            dscp: 3,
            hops,
            outcome: Outcome::Dropped,
            verdict: String::new(),
            vxlan: None,
            differs: Vec::new(),
            gaps: None,
            elapsed_ms: 1,
            rows: 0,
            remote: None,
        }
    }

    #[test]
    fn differences_from_the_static_trace_are_said_plainly() {
        let dropped_80 = live(vec![
            hop(1, 0, LiveEvent::Entered, ""),
            hop(1, 20, LiveEvent::Entered, "+new+trk"),
            hop(1, 80, LiveEvent::Dropped, "+new+trk"),
        ]);
        assert!(compare(
            &dropped_80,
            None,
            &expected(Outcome::Dropped, "ingress_isolation")
        )
        .is_empty());
        let d = compare(
            &dropped_80,
            None,
            &expected(Outcome::Delivered, "ingress_isolation"),
        );
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            d[0].contains("the real packet was dropped but the static trace says delivered")
                && d[0].contains("a bug or drift"),
            "{d:?}"
        );
        let d = compare(
            &dropped_80,
            None,
            &expected(Outcome::Dropped, "pod_egress_spoofguard"),
        );
        assert!(
            d[0].contains(
                "ended in table ingress_isolation but the static trace in pod_egress_spoofguard"
            ),
            "{d:?}"
        );
        // Conntrack that saw an existing connection.
        let est = live(vec![
            hop(1, 0, LiveEvent::Entered, ""),
            hop(1, 20, LiveEvent::Entered, "+est+trk"),
            hop(1, 80, LiveEvent::Dropped, "+est+trk"),
        ]);
        let d = compare(&est, None, &expected(Outcome::Dropped, "ingress_isolation"));
        assert_eq!(
            d,
            vec!["conntrack had the packet as +est+trk in table pod_egress_spoofguard (the static trace assumes +new+trk)".to_string()]
        );
        // The first pass left by VXLAN; a tun0 exit is "to the node".
        let left = live(vec![hop(1, 90, LiveEvent::Left, "+new+trk")]);
        assert!(compare(
            &left,
            Some(Some(flows::base::VXLAN_PORT)),
            &expected(Outcome::ToRemoteNode, "remote_ip")
        )
        .is_empty());
        let d = compare(
            &left,
            Some(Some(flows::base::TUN_PORT)),
            &expected(Outcome::ToRemoteNode, "remote_ip"),
        );
        assert!(
            d[0].contains("was to the node (tun0) but the static trace says to another node"),
            "{d:?}"
        );
    }
}
