//! A live trace's part on one node's br0, shared by the node that sends the packet and the node
//! it goes to over VXLAN: a connection of its own (controller id per mark and role), the
//! trace's rows installed in one bundle with the datapath's cache revalidated after them, the
//! reports read and told apart from any other trace's by the packet's source, and the rows
//! deleted by their cookie when the part ends (a hard timeout and the start-up sweep cover a
//! killed agent).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use flows::live_trace::{Event, Known, Note, Probe, Transport, TRACE_METER, TRACE_METER_PPS};
use local_api::{LiveEvent, LiveHop, Outcome, VxlanHop};
use ovs::flow::Flow;
use ovs::openflow::{BundleMsg, DumpFilter, OfClient, PacketIn, PacketIns};

use super::{table_name, TraceError};
use crate::operator::observe::NodeView;

/// The reports queued between the connection and the trace.
const QUEUE: usize = 1024;
/// The most rows a trace installs (copies of the rows the packet can meet, and its own).
const MAX_ROWS: usize = 60_000;

/// One report, with when it came (since the packet was sent).
pub(super) type Report = (Note, PacketIn, Duration);

/// A trace's rows on br0 and the connection that reads their reports.
pub(super) struct Armed {
    client: OfClient,
    reports: PacketIns,
    /// br0's rows when the trace was armed (the copies' indexes point into it).
    pub(super) rows: Vec<Flow>,
    /// How many rows the trace installed.
    pub(super) installed: usize,
    probe: Probe,
}

fn switch(what: &str, e: impl std::fmt::Display) -> TraceError {
    TraceError::Switch(format!("{what}: {e}"))
}

/// Installs `probe`'s rows on br0 (copies of the rows the packet can meet, as `known` tells)
/// and, when the packet will reach br0 through the datapath (`through_datapath`: back from the
/// node through tun0, or over VXLAN), waits until the datapath's cache follows them.
pub(super) async fn arm(
    view: &NodeView,
    probe: &Probe,
    known: &Known,
    through_datapath: bool,
) -> Result<Armed, TraceError> {
    let target = format!("unix:{}", view.config.bridge_mgmt.display());
    let client = OfClient::connect(&target)
        .await
        .map_err(|e| switch(&format!("connecting to br0 at {target}"), e))?;
    let armed = async {
        let reports = client
            .receive_packet_ins_as(QUEUE, probe.controller_id())
            .await
            .map_err(|e| switch("asking br0 for the trace's reports", e))?;
        ensure_meter(&client).await?;
        let rows = client
            .dump_flows(&DumpFilter::all())
            .await
            .map_err(|e| switch("reading br0's rows", e))?;
        let ours = probe
            .rows(&rows, known)
            .map_err(|e| TraceError::Switch(format!("br0's rows cannot be traced live: {e}")))?;
        if ours.len() > MAX_ROWS {
            return Err(TraceError::Switch(format!(
                "a live trace of this packet would copy {} rows (at most {MAX_ROWS}); trace a packet to a pod rather than a Service",
                ours.len()
            )));
        }
        let installed = ours.len();
        let msgs: Vec<BundleMsg> = ours.into_iter().map(BundleMsg::add).collect();
        client
            .bundle(&msgs)
            .await
            .map_err(|e| switch("installing the trace's rows", e))?;
        // A packet-out meets the new rows at once, but a packet the datapath gets (back from
        // the node through tun0, over VXLAN) may meet a cached datapath flow made before them,
        // which ignores the mark: wait until ovs-vswitchd has revalidated its cache.
        if through_datapath {
            let ctl = super::vswitchd_ctl(view)?;
            ovs::unixctl::call(&ctl, "revalidator/wait", &[], Duration::from_secs(2))
                .await
                .map_err(|e| switch(&format!("revalidator/wait on {}", ctl.display()), e))?;
        }
        Ok((reports, rows, installed))
    }
    .await;
    match armed {
        Ok((reports, rows, installed)) => Ok(Armed {
            client,
            reports,
            rows,
            installed,
            probe: probe.clone(),
        }),
        Err(e) => {
            disarm_client(&client, probe).await;
            Err(e)
        }
    }
}

async fn disarm_client(client: &OfClient, probe: &Probe) {
    if let Err(e) = client.delete_by_cookie(probe.cookie(), u64::MAX).await {
        tracing::warn!(trace = probe.id, error = %e, "a live trace's rows could not be deleted; they remove themselves within {} s", flows::live_trace::HARD_TIMEOUT);
    }
    client.close();
}

impl Armed {
    /// Sends `frame` into br0 as if `in_port` had received it.
    pub(super) async fn send(&self, in_port: u32, frame: &[u8]) -> Result<(), TraceError> {
        self.client
            .packet_out(
                in_port,
                &[ovs::flow::Action::Output(ovs::flow::ports::TABLE)],
                frame,
            )
            .await
            .map_err(|e| switch("sending the packet", e))
    }

    /// Reads the reports of this trace's packet until `deadline`, or a little after one that
    /// `ends` says ends what the caller waits for.
    pub(super) async fn collect(
        &mut self,
        start: Instant,
        mut deadline: Instant,
        settle: Duration,
        mut ends: impl FnMut(Note, &[Flow]) -> bool,
    ) -> Vec<Report> {
        let mut seen = Vec::new();
        loop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let Ok(Some(pin)) = tokio::time::timeout(deadline - now, self.reports.recv()).await
            else {
                break;
            };
            let Some(note) = Note::decode(&pin.userdata) else {
                continue;
            };
            // Another trace with the same mark from another source (a relay's rows match
            // the source's address; the reports share its connection id).
            if !from_probe(&self.probe, &pin.packet) {
                continue;
            }
            if ends(note, &self.rows) {
                deadline = deadline.min(Instant::now() + settle);
            }
            seen.push((note, pin, start.elapsed()));
        }
        seen
    }

    /// The VTEPs group `id`'s buckets send to over VXLAN (an egress-IP group of a tenant
    /// whose IPs are on other nodes); empty when it has none or cannot be read.
    pub(super) async fn group_vteps(&self, id: u32) -> Vec<IpAddr> {
        let Ok(groups) = self.client.dump_groups().await else {
            return Vec::new();
        };
        groups
            .iter()
            .filter(|g| g.id == id)
            .flat_map(|g| &g.buckets)
            .filter(|b| {
                b.actions
                    .contains(&ovs::flow::Action::Output(flows::base::VXLAN_PORT))
            })
            .flat_map(|b| &b.actions)
            .filter_map(|a| match a {
                ovs::flow::Action::SetField(sf) if sf.field() == ovs::flow::Field::TunDst => {
                    Some(IpAddr::from(std::net::Ipv4Addr::from(sf.value() as u32)))
                }
                _ => None,
            })
            .collect()
    }

    /// Reports the queue dropped.
    pub(super) fn lost(&self) -> u64 {
        self.reports.lost().0
    }

    /// Deletes the trace's rows and closes its connection.
    pub(super) async fn disarm(self) {
        disarm_client(&self.client, &self.probe).await;
    }
}

/// Whether `packet` (Ethernet on) is the probe's: its source address and, for TCP and UDP,
/// its source port.
fn from_probe(probe: &Probe, packet: &[u8]) -> bool {
    let Some(ethertype) = packet.get(12..14) else {
        return false;
    };
    let (src, l4): (IpAddr, usize) = match (ethertype, probe.src) {
        ([0x08, 0x00], IpAddr::V4(_)) => {
            let Some(ip) = packet.get(14..34) else {
                return false;
            };
            let src = IpAddr::from([ip[12], ip[13], ip[14], ip[15]]);
            (src, 14 + usize::from(ip[0] & 0x0f) * 4)
        }
        ([0x86, 0xdd], IpAddr::V6(_)) => {
            let Some(s) = packet.get(22..38) else {
                return false;
            };
            let mut o = [0u8; 16];
            o.copy_from_slice(s);
            (IpAddr::from(o), 54)
        }
        _ => return false,
    };
    if src != probe.src {
        return false;
    }
    match probe.transport {
        Transport::Icmp => true,
        Transport::Tcp(p) | Transport::Udp(p) => packet
            .get(l4..l4 + 2)
            .is_some_and(|b| u16::from_be_bytes([b[0], b[1]]) == p),
    }
}

/// The destination address and (TCP, UDP) port of `packet` (Ethernet on): where a report
/// shows the packet really going, after the node's NAT.
pub(super) fn destination(packet: &[u8]) -> Option<(IpAddr, u16)> {
    let (dst, proto, l4): (IpAddr, u8, usize) = match packet.get(12..14)? {
        [0x08, 0x00] => {
            let ip = packet.get(14..34)?;
            (
                IpAddr::from([ip[16], ip[17], ip[18], ip[19]]),
                ip[9],
                14 + usize::from(ip[0] & 0x0f) * 4,
            )
        }
        [0x86, 0xdd] => {
            let mut o = [0u8; 16];
            o.copy_from_slice(packet.get(38..54)?);
            (IpAddr::from(o), *packet.get(20)?, 54)
        }
        _ => return None,
    };
    let port = match proto {
        6 | 17 => packet
            .get(l4 + 2..l4 + 4)
            .map_or(0, |b| u16::from_be_bytes([b[0], b[1]])),
        _ => 0,
    };
    Some((dst, port))
}

/// Adds the trace meter when br0 lacks it.
async fn ensure_meter(client: &OfClient) -> Result<(), TraceError> {
    let has = |ms: &[ovs::openflow::Meter]| ms.iter().any(|m| m.id == TRACE_METER);
    let meters = client
        .dump_meters()
        .await
        .map_err(|e| switch("reading br0's meters", e))?;
    if has(&meters) {
        return Ok(());
    }
    let m = ovs::openflow::Meter::packets(TRACE_METER, TRACE_METER_PPS, TRACE_METER_PPS)
        .map_err(|e| switch("the trace meter", e))?;
    match client
        .meter_mod(ovs::openflow::MeterModCommand::Add, &m)
        .await
    {
        Ok(()) => Ok(()),
        // Another trace added it meanwhile.
        Err(_) if client.dump_meters().await.is_ok_and(|ms| has(&ms)) => Ok(()),
        Err(e) => Err(switch("adding the trace meter", e)),
    }
}

/// Whether a report ends the packet's path on this node: a delivery, a drop, or an exit (one
/// at tun0 only when the packet does not come back, `tun0_comes_back`).
pub(super) fn ends_path(note: Note, rows: &[Flow], tun0_comes_back: bool) -> bool {
    match note.event {
        Event::Entered => false,
        Event::Delivered | Event::Dropped => true,
        Event::Left => !(tun0_comes_back && exit_port(rows, note) == Some(flows::base::TUN_PORT)),
    }
}

/// The port the copied row outputs to.
pub(super) fn exit_port(rows: &[Flow], note: Note) -> Option<u32> {
    exit(rows, note, |a| match a {
        ovs::flow::Action::Output(p) => Some(*p),
        _ => None,
    })
}

/// The group the copied row outputs to.
pub(super) fn exit_group(rows: &[Flow], note: Note) -> Option<u32> {
    exit(rows, note, |a| match a {
        ovs::flow::Action::Group(g) => Some(*g),
        _ => None,
    })
}

fn exit(rows: &[Flow], note: Note, f: impl Fn(&ovs::flow::Action) -> Option<u32>) -> Option<u32> {
    rows.get(note.row as usize)?.actions.iter().find_map(f)
}

/// `ct_state` bits as `ovs-ofctl` writes them.
fn ct_text(bits: Option<u32>) -> String {
    let Some(bits) = bits else {
        return String::new();
    };
    [
        (0x01, "new"),
        (0x02, "est"),
        (0x04, "rel"),
        (0x08, "rpl"),
        (0x10, "inv"),
        (0x20, "trk"),
        (0x40, "snat"),
        (0x80, "dnat"),
    ]
    .into_iter()
    .filter(|(bit, _)| bits & bit != 0)
    .map(|(_, name)| format!("+{name}"))
    .collect()
}

fn regs_text(pin: &PacketIn) -> String {
    (0..7)
        .filter(|n| pin.metadata.reg(*n) != 0)
        .map(|n| format!("reg{n}={:#x}", pin.metadata.reg(n)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The hops of `seen`, in order (a new pass each time the packet comes back into table 0
/// through tun0 after leaving by it), and where it left over VXLAN, if it did.
pub(super) fn hops(
    rows: &[Flow],
    owners: &BTreeMap<u64, String>,
    seen: &[Report],
) -> (Vec<LiveHop>, Option<VxlanHop>) {
    let tun0 = flows::base::TUN_PORT;
    let vxlan = flows::base::VXLAN_PORT;
    let mut out = Vec::with_capacity(seen.len());
    let mut pass = 1u8;
    let mut left_to_tun0 = false;
    let mut vxlan_hop = None;
    for (note, pin, _) in seen {
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
        out.push(LiveHop {
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
    (out, vxlan_hop)
}

/// Where the reports say the packet's path on this node ended, and in words; `pods` names a
/// local pod by its port. `None` when no row ended it (see the callers).
pub(super) fn ending(
    rows: &[Flow],
    seen: &[Report],
    vxlan: Option<&VxlanHop>,
    pod_at: &dyn Fn(u32) -> Option<String>,
) -> Option<(Outcome, String, Note)> {
    let (n, pin, _) = seen
        .iter()
        .rev()
        .find(|(n, _, _)| n.event != Event::Entered)?;
    let n = *n;
    let at = format!("table {} ({})", n.table, table_name(n.table));
    let said = match n.event {
        Event::Delivered => {
            let port = pin.metadata.reg(usize::from(flows::Reg::OutPort.number()));
            (
                Outcome::Delivered,
                format!(
                    "delivered: {at} output it to port {port}{}; the trace stopped it there, so no pod received it",
                    pod_at(port).map(|p| format!(" ({p})")).unwrap_or_default()
                ),
            )
        }
        Event::Dropped => (
            Outcome::Dropped,
            format!("dropped in {at} by the row shown last"),
        ),
        _ => match (exit_port(rows, n), exit_group(rows, n)) {
            (Some(p), _) if p == flows::base::VXLAN_PORT => (
                Outcome::ToRemoteNode,
                match vxlan {
                    Some(v) => format!(
                        "left over VXLAN from {at} with VNI {} to VTEP {}",
                        v.vni, v.remote_vtep
                    ),
                    None => format!("left over VXLAN from {at}"),
                },
            ),
            (Some(p), _) if p == flows::base::TUN_PORT => (
                Outcome::ToHost,
                format!("handed to the node at tun0 from {at}"),
            ),
            (_, Some(g)) => (
                Outcome::ToHost,
                format!("left by group {g} from {at} (a tenant's egress IP)"),
            ),
            (p, _) => (
                Outcome::ToHost,
                format!("left by port {} from {at}", p.unwrap_or(0)),
            ),
        },
    };
    Some((said.0, said.1, n))
}

/// The words for reports with no row that ended the path.
pub(super) fn no_ending(seen: &[Report]) -> String {
    match seen.last() {
        Some((n, _, _)) => format!(
            "dropped in table {} ({}): no row of that table matched it (a table miss)",
            n.table,
            table_name(n.table)
        ),
        None => "no report came back: br0 did not run the packet through its tables".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_told_apart_by_the_packets_source() {
        let probe = Probe {
            id: 1,
            tag: 3,
            src: "10.128.0.2".parse().unwrap(),
            transport: Transport::Tcp(50_000),
            relay: false,
        };
        let frame = |src: &str, sport: u16| {
            super::super::frame::Frame {
                src_mac: [0; 6],
                dst_mac: [0; 6],
                src: src.parse().unwrap(),
                dst: "10.128.0.3".parse().unwrap(),
                dscp: 3,
                transport: Transport::Tcp(sport),
                dst_port: 80,
                nonce: 7,
            }
            .bytes()
        };
        assert!(from_probe(&probe, &frame("10.128.0.2", 50_000)));
        assert!(!from_probe(&probe, &frame("10.128.0.2", 50_001)));
        assert!(!from_probe(&probe, &frame("10.128.0.9", 50_000)));
        assert!(!from_probe(&probe, &[0; 10]));
        assert_eq!(
            destination(&frame("10.128.0.2", 50_000)),
            Some(("10.128.0.3".parse().unwrap(), 80))
        );
        assert_eq!(ct_text(Some(0x21)), "+new+trk");
        assert_eq!(ct_text(None), "");
    }
}
