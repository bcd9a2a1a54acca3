//! The warm pool of pod ports, and the batched deletion of the ports of deleted pods: what keeps
//! ovs-vswitchd's reconfiguration off the ADD and DEL paths.
//!
//! Why: every OVSDB transaction that changes the set of ports makes ovs-vswitchd reconfigure
//! the whole bridge, and that costs time proportional to the number of ports (on this machine
//! an `add-port` waited 8 ms at 0 ports and 288 ms at 1000). A pod ADD that adds its own port
//! and waits for the ofport therefore slows down as the node fills, and a DEL that deletes one
//! makes the next request's flow bundle wait for ovs-vswitchd's main loop.
//!
//! How: the agent keeps `portPoolSize` veth pairs ready: the host end already a port of `br0`
//! (ofport known, `external_ids:sdn-pool=<peer name>`, no flows, so nothing can pass it), the
//! peer up in the agent's parking namespace ([`crate::host::netlink`]'s, pinned on a file next to the
//! CNI socket so that it outlives the agent). An ADD takes one and makes the pod's interface a
//! passthru macvlan on the parked peer, created directly in the pod's netns (one netlink
//! request, [`crate::host::netlink::PodLinkSpec::pool_peer`]); the port's record replaces the pool
//! marker (an `external_ids` write, which ovs-vswitchd does not read, so it does not
//! reconfigure), and the pod's flows use the known ofport. Why a macvlan and not the peer
//! itself: moving a device between namespaces waits for an RCU grace period (15-40 ms on this
//! machine, serialised under the kernel's rtnl lock, so concurrent ADDs queued behind each
//! other), creating one in another namespace does not. Why the parking namespace: ovs-vswitchd
//! reconfigures the whole bridge on every link event in its own namespace; the macvlan's
//! creation and deletion, and the peer's MAC and promiscuity changes, happen elsewhere, and the
//! host end keeps its carrier throughout (the peer stays up). Passthru mode gives the pod the
//! peer's MAC (set to the pod's first), allows one macvlan per peer (a second is refused), and
//! makes the peer promiscuous while the macvlan exists, which is how the agent tells a free
//! peer from a taken one. The pool is refilled in the background when it has fallen to half,
//! many ports per transaction: one reconfiguration per batch of pods, not per pod. When the
//! pool is empty (a burst larger than it), an ADD creates its veth and port itself, as before;
//! requested addresses and bandwidth limits take that way too.
//!
//! **Warm ports.** The pool alone still leaves one ovs-vswitchd round trip on the ADD: the
//! pod's flow bundle. ovs-vswitchd answers it only between two bridge reconfigurations, and it
//! reconfigures the whole bridge on every link event in its namespace, a pod's own veth coming
//! up included (130 ms a time at 1000 ports here, measured with an OpenFlow echo while veths came
//! and went): under a stream of ADDs the bundle waits for one or two of them. So the agent also
//! installs flows *before* the ADD: for each VNID that recently had a burst of ADDs
//! ([`WARM_AFTER`] within [`WARM_WINDOW`]; at most [`WARM_VNIDS`], most recent first; cooled
//! after [`WARM_IDLE`] without an ADD), it keeps up to the pool's size of *warm* ports: pool
//! ports with an address leased under the port's name (`sdn-warm-<port>`; on a dual-stack node
//! one per family, under the same name) and the pod flows of that address, that ofport and that
//! VNID already on the bridge (their cookie is the port's:
//! [`flows::port_cookie`]). Nothing is behind a warm port (no pod interface on its peer), so
//! its flows let nothing through. An ADD in a VNID with a warm port (and without a requested
//! address or bandwidth limits) takes it: the lease (both, on a dual-stack node) is handed over in place
//! ([`crate::host::ipam::Store::transfer`]), the pod interface is made on the peer, the record is
//! written, and the flows are already right; nothing waits for ovs-vswitchd. Warm ports are
//! made in batches in the background, one bundle per [`WARM_CHUNK`] ports; a VNID that falls out
//! of the recent ones has its warm ports cooled (flows removed, addresses released, ports back in
//! the pool). When the subnet has no free address left, an ADD takes a warm port of any VNID and
//! re-flows it.
//!
//! **DEL** deletes the pod's macvlan (its netns is known from the table), hands its lease to
//! the port (`sdn-retired-<port>`), writes the pool marker back on the row (no
//! reconfiguration, no flow bundle), and answers: the pod is gone from the node. The flows go in
//! the next batch (within [`REAP_EVERY`]): one bundle for every pod deleted meanwhile, then
//! their addresses are released (an address is never leased again while flows for it exist),
//! then the ports go back to the pool (never taken again while the deleted pod's flows exist).
//! When the pool is full, or the peer is not free (the macvlan could not be deleted: a netns
//! the agent cannot reach any more), the pair is deleted instead and its row is marked
//! `sdn-dead=1` and deleted with the other dead ones, without waiting for ovs-vswitchd.
//!
//! Restarts and crashes: the parking namespace is pinned, so the pool and the peers of pods on
//! pool ports survive the agent; a restarted agent opens the pin. The agent uses a pool only
//! when the pin can outlive it (`daemon::pool_size`). At start-up a pool port is taken back
//! when its host end is there and its peer parked and free; the others (an ADD cut off after
//! making its macvlan, whose runtime retries), and every dead port, are deleted, and the pool
//! is refilled. A pod port on a pool port whose peer is free lost its interface while the
//! agent was down (its netns went) and is removed like a pod whose veth is gone. An ADD cut off
//! after writing the record leaves a normal pod port, which the restart keeps and the
//! runtime's DEL removes. Warm and retired addresses belong to no pod, so the start-up's orphan
//! lease release frees them, and their flows, which nobody stages, go with the start-up
//! reconcile (before the agent serves any ADD).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use flows::{pod_flows, PodFlows, Vnid};
use ovs::flow::Flow;

use super::lock;
use crate::bridge::flowstore::{Change, Owner};

mod upkeep;

/// `external_ids` key of an idle pool port; its value is the peer's name.
pub const POOL_KEY: &str = "sdn-pool";
/// `external_ids` key of the port of a deleted pod, waiting for the batched deletion.
pub const DEAD_KEY: &str = "sdn-dead";
/// The most ports added in one transaction; also how many dead ports make a deletion batch
/// before [`REAP_EVERY`] is up.
const BATCH: usize = 32;
/// How often dead ports are deleted (and the pool checked) at the latest.
pub const REAP_EVERY: Duration = Duration::from_millis(250);

/// Warm ports per flow bundle, in both families: ovs-vswitchd takes 50 messages per OpenFlow
/// connection per main-loop iteration, and five ports' flows ([`flows::POD_FLOWS`] each, after
/// a delete by cookie) and a table-80 row fit in one, so an ADD that needs a bundle of its own
/// waits for at most one chunk (a whole batch of 34 ports once held such ADDs 0.4 s at 1000
/// pods). A dual-stack port carries twice the rows ([`flows::POD_FLOWS_DUAL_STACK`]): the same
/// five take two iterations. Fewer ports per bundle there (three fit one iteration) made a
/// bundle, and a revalidation of every datapath flow in ovs-vswitchd, every three ADDs instead
/// of every five: background work beside the next ADD that an IPv4 node did not have.
pub const WARM_CHUNK: usize = 5;
// A chunk's flows, their deletes by cookie, a table-80 row and the bundle's open and commit
// stay within one iteration's 50 messages (two on a dual-stack node).
const _: () = assert!(WARM_CHUNK * (flows::POD_FLOWS + 1) + 1 + 2 <= 50);
const _: () = assert!(WARM_CHUNK * (flows::POD_FLOWS_DUAL_STACK + 1) + 1 + 2 <= 100);

/// How many VNIDs keep warm ports (the most recent ones to have a burst of ADDs).
pub const WARM_VNIDS: usize = 2;
/// A VNID gets warm ports once it had this many ADDs within [`WARM_WINDOW`]: warm ports pay
/// off under a stream of ADDs (when ovs-vswitchd is busy reconfiguring); a lone ADD's bundle is
/// answered at once, and a quiet VNID does not hold addresses in advance.
pub const WARM_AFTER: usize = 8;
/// See [`WARM_AFTER`].
pub const WARM_WINDOW: Duration = Duration::from_secs(10);
/// A VNID without an ADD for this long has its warm ports cooled.
pub const WARM_IDLE: Duration = Duration::from_secs(60);
/// Lease owner (container id) prefix of a warm port's address, followed by the port's name.
pub const WARM_LEASE_PREFIX: &str = "sdn-warm-";
/// Lease owner prefix of a deleted pod's address until its flows are gone.
pub const RETIRED_LEASE_PREFIX: &str = "sdn-retired-";
/// The interface name of a retired port's lease (a warm port's names its VNID,
/// [`warm_lease_ifname`]).
pub const LEASE_IFNAME: &str = "eth0";

/// The lease owner of warm port `port`'s address.
pub fn warm_lease(port: &str) -> String {
    format!("{WARM_LEASE_PREFIX}{port}")
}

/// The `ifname` of a warm port's lease: its VNID (`vnid-<id>`), so that a restarted agent
/// takes the warm port back with its flows instead of deleting and making them again.
pub fn warm_lease_ifname(vnid: Vnid) -> String {
    format!("vnid-{}", vnid.id())
}

/// The port and VNID of a warm port's lease (owner, ifname), if it is one.
pub fn parse_warm_lease(owner: &str, ifname: &str) -> Option<(String, Vnid)> {
    let port = owner.strip_prefix(WARM_LEASE_PREFIX)?;
    let vnid = ifname
        .strip_prefix("vnid-")?
        .parse()
        .ok()
        .and_then(Vnid::new)?;
    is_pool_port(port).then(|| (port.to_string(), vnid))
}

/// The lease owner of the address of the deleted pod of port `port`.
pub fn retired_lease(port: &str) -> String {
    format!("{RETIRED_LEASE_PREFIX}{port}")
}

/// A ready port: the veth's host end (the port) and its peer, parked until an ADD takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PooledPort {
    /// The host end, a port of `br0`.
    pub host: String,
    /// The peer, down in the parking namespace until an ADD moves it into a pod.
    pub peer: String,
    /// The port's ofport.
    pub ofport: u32,
}

/// A warm port: a pool port with an address (one per family on a dual-stack node) and that
/// address's pod flows for one VNID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarmPort {
    /// The port.
    pub port: PooledPort,
    /// The address leased to it (`sdn-warm-<port>`; none on an IPv6-only cluster).
    pub ip: Option<Ipv4Addr>,
    /// Its IPv6 address on a dual-stack node (leased the same way).
    pub ip6: Option<Ipv6Addr>,
    /// The VNID its flows carry.
    pub vnid: Vnid,
}

impl WarmPort {
    /// The flows it has on the bridge: exactly those of a pod with its port, address and VNID
    /// and no egress meter.
    pub fn flows(&self) -> Vec<Flow> {
        pod_flows(&PodFlows {
            ofport: self.port.ofport,
            ip: self.ip,
            ipv6: self.ip6,
            vnid: self.vnid,
            cookie: flows::port_cookie(&self.port.host),
            egress_meter: None,
        })
    }

    /// Hands its leases (both families') to attachment `to` (container id, ifname) in place:
    /// the addresses are never free in between.
    pub fn hand_over(
        &self,
        store: &crate::host::ipam::Store,
        to: (&str, &str),
    ) -> Result<(), crate::host::ipam::IpamError> {
        let (owner, ifname) = (warm_lease(&self.port.host), warm_lease_ifname(self.vnid));
        let ips = crate::host::ipam::addresses(self.ip, self.ip6);
        store.transfer_all(&ips, (&owner, &ifname), to)
    }
}

/// The pool, the warm ports, and the ports of deleted pods (see the module docs).
#[derive(Debug, Default)]
pub struct PortPool {
    idle: std::sync::Mutex<VecDeque<PooledPort>>,
    /// Warm ports by VNID.
    warm: std::sync::Mutex<BTreeMap<Vnid, Vec<WarmPort>>>,
    /// The VNIDs that keep warm ports, most recent ADD first (at most [`WARM_VNIDS`]), with
    /// the time of their last ADD.
    recent: std::sync::Mutex<VecDeque<(Vnid, Instant)>>,
    /// The times of the last [`WARM_AFTER`] ADDs of each VNID not (yet) in `recent`.
    adds: std::sync::Mutex<BTreeMap<Vnid, VecDeque<Instant>>>,
    /// Warm ports being cooled ([`Cooling`]).
    cooling: std::sync::Mutex<Vec<Cooling>>,
    /// Ports of deleted pods whose flows are still on the bridge.
    retiring: std::sync::Mutex<Vec<String>>,
    /// The retiring ports that go back to the pool after their flows (their peer is free),
    /// by name; the others are deleted.
    recycled: std::sync::Mutex<BTreeMap<String, PooledPort>>,
    dead: std::sync::Mutex<Vec<String>>,
    /// Pool ports that held a pod when this agent started: their pairs may have been made by
    /// an agent from before the MLD drop, which their peers get when they come back to the
    /// pool (see `retire_ports`).
    unquieted: std::sync::Mutex<BTreeSet<String>>,
    wake: tokio::sync::Notify,
    /// Wakes the refill (the pool fell to half).
    refill: tokio::sync::Notify,
    /// The pool is not filled until the first ADD takes a port ([`PortPool::hold_until_demand`]).
    held: std::sync::atomic::AtomicBool,
}

impl PortPool {
    /// Takes a ready port, if any; wakes the refill when the pool has fallen to half of
    /// `size` (so refills come in batches of at least half the pool: one ovs-vswitchd
    /// reconfiguration per batch, not per pod).
    pub fn take(&self, size: usize) -> Option<PooledPort> {
        self.held.store(false, std::sync::atomic::Ordering::Relaxed);
        let mut idle = lock(&self.idle);
        let p = idle.pop_front();
        if idle.len() <= size / 2 {
            self.refill.notify_one();
        }
        p
    }

    /// Makes no pool port until an ADD asks for one. After a takeover the node's links stay
    /// as openshift-sdn left them until the runtime asks for a pod: on the userspace datapath
    /// every new link makes ovs-vswitchd rebuild its tunnel routes, which can drop a tunnelled
    /// packet in flight (docs/pipeline.md, "Datapaths: netdev (tested here) and system
    /// (production)").
    pub fn hold_until_demand(&self) {
        self.held.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the pool waits for an ADD before it is filled.
    pub fn held(&self) -> bool {
        self.held.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many ports are ready.
    pub fn idle(&self) -> usize {
        lock(&self.idle).len()
    }

    /// Notes an ADD in `vnid` (a VNID with a burst of ADDs, [`WARM_AFTER`], becomes the most
    /// recent to keep warm ports) and takes one of its warm ports, if any; wakes the maintenance
    /// when the VNID has fallen a whole `chunk` (a warm-up bundle's ports, [`WARM_CHUNK`])
    /// below its target of warm ports, or to half of it when that comes first (a small pool).
    pub fn take_warm(&self, vnid: Vnid, target: usize, chunk: usize) -> Option<WarmPort> {
        if target == 0 {
            return None;
        }
        let now = Instant::now();
        {
            let mut recent = lock(&self.recent);
            if let Some(i) = recent.iter().position(|(v, _)| *v == vnid) {
                recent.remove(i);
                recent.push_front((vnid, now));
            } else {
                let mut adds = lock(&self.adds);
                let times = adds.entry(vnid).or_default();
                times.push_back(now);
                while times.len() > WARM_AFTER
                    || times.front().is_some_and(|t| now - *t > WARM_WINDOW)
                {
                    times.pop_front();
                }
                if times.len() >= WARM_AFTER {
                    adds.remove(&vnid);
                    recent.push_front((vnid, now));
                    recent.truncate(WARM_VNIDS);
                    self.wake.notify_one();
                }
            }
        }
        let mut warm = lock(&self.warm);
        let ports = warm.get_mut(&vnid)?;
        // Lowest address first: pods get addresses in the order host-local would give them.
        let w = (!ports.is_empty()).then(|| ports.remove(0));
        // Topped up a chunk at a time: a burst after a stream of ADDs finds the VNID's warm
        // ports all but full (not at half), and each warm-up is one full bundle. Woken after
        // every take, the maintenance warmed one port per ADD: one more bundle, one more
        // revalidation of every datapath flow in ovs-vswitchd and two more lease files per
        // ADD, each running beside the next ADD on a busy node.
        if ports.len() + chunk.min(target / 2).max(1) <= target {
            self.wake.notify_one();
        }
        w
    }

    /// The VNIDs that keep warm ports (cooling those idle for [`WARM_IDLE`]).
    fn warm_vnids(&self) -> Vec<Vnid> {
        let mut recent = lock(&self.recent);
        recent.retain(|(_, t)| t.elapsed() < WARM_IDLE);
        recent.iter().map(|(v, _)| *v).collect()
    }

    /// Takes a warm port of any VNID (the subnet is out of free addresses).
    pub fn take_any_warm(&self) -> Option<WarmPort> {
        lock(&self.warm).values_mut().find_map(Vec::pop)
    }

    /// How many warm ports each VNID has.
    pub fn warm(&self) -> BTreeMap<Vnid, usize> {
        lock(&self.warm)
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (*k, v.len()))
            .collect()
    }

    /// Queues the port of a deleted pod: its flows, then its address, then its row go in the
    /// next batch.
    pub fn retire(&self, port: String) {
        self.enqueue(&self.retiring, port);
    }

    /// Whether the pool takes back the port of a deleted pod: while it holds fewer than `size`
    /// ports, counting those on their way back (the others are deleted).
    pub fn wants_back(&self, size: usize) -> bool {
        // One lock at a time (the retirement takes `recycled`, then `idle`).
        let idle = lock(&self.idle).len();
        idle + lock(&self.recycled).len() < size
    }

    /// Queues the port of a deleted pod whose peer is free again: like [`PortPool::retire`],
    /// but the port goes back to the pool after its flows and address.
    pub fn recycle(&self, port: PooledPort) {
        let name = port.host.clone();
        lock(&self.recycled).insert(name.clone(), port);
        self.enqueue(&self.retiring, name);
    }

    /// How many deleted pods' ports still have flows.
    pub fn retiring(&self) -> usize {
        lock(&self.retiring).len()
    }

    /// Queues a dead port for the next batched deletion (within [`REAP_EVERY`], or at once when
    /// [`BATCH`] are waiting).
    pub fn bury(&self, port: String) {
        self.enqueue(&self.dead, port);
    }

    /// Queues `port` on `queue`, waking the maintenance when a whole batch waits.
    fn enqueue(&self, queue: &std::sync::Mutex<Vec<String>>, port: String) {
        let mut q = lock(queue);
        q.push(port);
        if q.len() >= BATCH {
            self.wake.notify_one();
        }
    }

    /// How many dead ports wait for deletion.
    pub fn dead(&self) -> usize {
        lock(&self.dead).len()
    }
}

/// An OVS port's `ofport` column as the OVSDB cache has it now: `None` when the cache has no
/// row of that name, `Some(None)` while ovs-vswitchd has not numbered it yet, `Some(Some(-1))`
/// when it cannot open the device.
pub type OfportNow<'a> = &'a std::collections::HashMap<String, Option<i64>>;

/// What [`PortPool::follow`] found (see [`crate::pod::Pods::follow_ofports`]).
#[derive(Debug, Default)]
pub struct Followed {
    /// Warm ports taken out of the warm ports to be cooled ([`PortPool::cooling`]): OVS
    /// numbered them anew, or cannot open them.
    pub warm_out: usize,
    /// Idle ports taken out: their row is gone, or ovs-vswitchd cannot open the device.
    pub broken_idle: Vec<PooledPort>,
    /// Idle and returning ports given their new number (no flows to follow).
    pub idle_renumbered: usize,
}

/// A warm port being cooled: its flows go, then its address, then it goes back to the pool
/// (with `back_as`, its number now) or, broken (`None`), is deleted. It stays queued until
/// each step is done, so no ADD takes it with rows that are going.
#[derive(Debug, Clone)]
pub struct Cooling {
    /// The port, as it was warm.
    pub warm: WarmPort,
    /// Its ofport now, or `None` when it is to be deleted.
    pub back_as: Option<u32>,
}

/// `Some(n)`: port `name` has ofport `n` now; `None`: unknown or not numbered yet. `Err`: its
/// row is gone (when `rows_known`) or ovs-vswitchd cannot open it.
fn ofport_now(now: OfportNow<'_>, name: &str, rows_known: bool) -> Result<Option<u32>, ()> {
    match now.get(name) {
        None if rows_known => Err(()),
        None | Some(None) => Ok(None),
        Some(Some(n)) if *n < 0 => Err(()),
        Some(Some(n)) => Ok(u32::try_from(*n).ok().filter(|n| *n > 0)),
    }
}

impl PortPool {
    /// Brings the pool in line with the ports as OVS numbers them now (`now`, every pool
    /// port's row; `rows_known`: the cache is live, so a missing row is a deleted port): idle
    /// and returning ports take their new number at once, warm ports whose number changed leave
    /// the warm ports (to be cooled), and ports whose row is gone or whose device ovs-vswitchd
    /// cannot open leave the pool.
    pub fn follow(&self, now: OfportNow<'_>, rows_known: bool) -> Followed {
        let mut out = Followed::default();
        {
            let mut idle = lock(&self.idle);
            let mut kept = VecDeque::with_capacity(idle.len());
            for mut p in idle.drain(..) {
                match ofport_now(now, &p.host, rows_known) {
                    Err(()) => out.broken_idle.push(p),
                    Ok(Some(n)) if n != p.ofport => {
                        p.ofport = n;
                        out.idle_renumbered += 1;
                        kept.push_back(p);
                    }
                    Ok(_) => kept.push_back(p),
                }
            }
            *idle = kept;
        }
        for p in lock(&self.recycled).values_mut() {
            if let Ok(Some(n)) = ofport_now(now, &p.host, false) {
                if n != p.ofport {
                    p.ofport = n;
                    out.idle_renumbered += 1;
                }
            }
        }
        let mut out_of_warm = Vec::new();
        for ports in lock(&self.warm).values_mut() {
            ports.retain(|w| {
                let back_as = match ofport_now(now, &w.port.host, rows_known) {
                    Err(()) => None,
                    Ok(Some(n)) if n != w.port.ofport => Some(n),
                    Ok(_) => return true,
                };
                out_of_warm.push(Cooling {
                    warm: w.clone(),
                    back_as,
                });
                false
            });
        }
        out.warm_out = out_of_warm.len();
        if !out_of_warm.is_empty() {
            lock(&self.cooling).extend(out_of_warm);
            self.wake.notify_one();
        }
        out
    }

    /// Notes that pool port `port` held a pod at start-up ([`PortPool::unquieted`]).
    pub fn note_unquieted(&self, port: &str) {
        lock(&self.unquieted).insert(port.to_string());
    }

    /// Whether pool port `port` was noted at start-up and not yet taken care of (once).
    pub fn take_unquieted(&self, port: &str) -> bool {
        lock(&self.unquieted).remove(port)
    }

    /// Puts ports back in the idle pool.
    pub fn give_back(&self, ports: impl Iterator<Item = PooledPort>) {
        lock(&self.idle).extend(ports);
    }
}

/// What the start-up took back of the pool.
#[derive(Debug, Default)]
pub struct PoolRestored {
    /// Pool ports taken back (idle and warm).
    pub kept: usize,
    /// Pool ports queued for deletion (broken or dead).
    pub queued: usize,
    /// The leases of the warm ports taken back (the start-up's orphan release keeps them).
    pub warm_leases: BTreeSet<flows::AttachmentId>,
}

/// One change removing the flows of `ports`.
fn remove_ports<'a>(ports: impl Iterator<Item = &'a String>) -> Change {
    ports.fold(Change::new(), |c, p| c.remove(Owner::Port(p.clone())))
}

/// Whether a lease owner is the pool's (a warm or a retiring port's address).
pub fn is_pool_lease(container_id: &str) -> bool {
    container_id.starts_with(WARM_LEASE_PREFIX) || container_id.starts_with(RETIRED_LEASE_PREFIX)
}

/// Whether `name` is a pool port's (`sdnp<10 hex>`): a name no ADD derives from an attachment,
/// so it is never reused while a deleted pod's flows still carry its cookie.
pub fn is_pool_port(name: &str) -> bool {
    name.len() == 14 && name.starts_with("sdnp") && name[4..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// The peer of pool port `host` (`sdnp<hex>` -> `sdnq<hex>`).
pub fn peer_of(host: &str) -> String {
    format!("sdnq{}", host.get(4..).unwrap_or_default())
}

/// A random pair of interface names (`sdnp<10 hex>`, `sdnq<same>`), 14 characters.
fn pool_names() -> (String, String) {
    let mut b = [0u8; 5];
    if getrandom::fill(&mut b).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        b.copy_from_slice(&t.to_le_bytes()[..5]);
    }
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    (format!("sdnp{hex}"), format!("sdnq{hex}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    /// Whether the maintenance was woken since the last look (a stored permit).
    fn woken(pool: &PortPool) -> bool {
        pool.wake.notified().now_or_never().is_some()
    }

    #[test]
    fn warm_ports_are_topped_up_a_chunk_at_a_time() {
        let pool = PortPool::default();
        let v = Vnid::new(11).unwrap();
        let (target, chunk) = (8, 3);
        // A burst makes the VNID recent (and wakes the maintenance to warm it).
        for _ in 0..WARM_AFTER {
            assert!(pool.take_warm(v, target, chunk).is_none());
        }
        assert!(woken(&pool));
        let warm: Vec<WarmPort> = (0..target)
            .map(|i| WarmPort {
                port: PooledPort {
                    host: format!("sdnp{i:010x}"),
                    peer: format!("sdnq{i:010x}"),
                    ofport: 10 + i as u32,
                },
                ip: Some(Ipv4Addr::new(10, 128, 0, 2 + i as u8)),
                ip6: None,
                vnid: v,
            })
            .collect();
        lock(&pool.warm).insert(v, warm);
        // The first two takes leave the VNID less than a chunk short: no warm-up yet.
        for _ in 0..chunk - 1 {
            assert!(pool.take_warm(v, target, chunk).is_some());
            assert!(!woken(&pool), "woken before a whole chunk was taken");
        }
        // The third: a chunk short, one warm-up bundle's worth.
        assert!(pool.take_warm(v, target, chunk).is_some());
        assert!(woken(&pool), "not woken a whole chunk short");
        // Refilled meanwhile to 7 of 8; with a chunk of 5, the VNID is topped up once it is
        // at half (4 left), before a whole chunk is gone.
        let more = lock(&pool.warm)[&v][..2].to_vec();
        lock(&pool.warm).get_mut(&v).unwrap().extend(more);
        for _ in 0..2 {
            assert!(pool.take_warm(v, target, 5).is_some());
            assert!(!woken(&pool), "woken above half, less than a chunk short");
        }
        assert!(pool.take_warm(v, target, 5).is_some());
        assert!(woken(&pool), "not woken at half");
    }
}
