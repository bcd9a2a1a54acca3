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
//! peer waiting, down, in a private namespace of the agent ([`crate::netlink`]'s parking
//! namespace). An ADD takes one: its peer is moved from there into the pod's netns as the pod
//! interface (one netlink request, [`crate::netlink::PodLinkSpec::pool_peer`]), the port's
//! record replaces the pool marker (an `external_ids` write, which ovs-vswitchd does not read,
//! so it does not reconfigure), and the pod's flows use the known ofport. Why the parking
//! namespace: ovs-vswitchd also reconfigures on every link event in its own namespace (a veth
//! created, deleted or moved out of it); moving a peer between two other namespaces makes none.
//! The pool is refilled in the background when it has fallen to half, many ports per
//! transaction: one reconfiguration per batch of pods, not per pod. When the pool is empty (a
//! burst larger than it), an ADD creates its veth and port itself, as before. The cost is the
//! kernel's: moving a device between namespaces waits for an RCU grace period (about 15 ms
//! here), so a pooled ADD is slower than a fresh one on a nearly empty node and the pool pays
//! off as the node fills.
//!
//! A DEL deletes the pod's flows and veth at once and replaces the port's record with
//! `sdn-dead=1` (again no reconfiguration), so no pod port, veth, flow or lease is left when it
//! answers; the dead row itself is deleted with the others in the next batch (within
//! [`REAP_EVERY`]), without waiting for ovs-vswitchd.
//!
//! Restarts and crashes: the parking namespace lives as long as the agent holds it, so when the
//! agent exits the parked peers go, and their host ends with them. At start-up a pool port is
//! taken back only when its host end and peer are both still there (possible with an agent that
//! kept its namespace, and with the component tests' fakes); the others, and every dead port,
//! are deleted, and the pool is refilled. An ADD cut off after writing the record leaves a normal
//! pod port, which the restart keeps and the runtime's DEL removes.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use ovs::ovsdb::PortSpec;

use super::error::PodError;
use super::{lock, Pods, BRIDGE};
use crate::seams::{NodeIo, PodLinks, PortDb};

/// `external_ids` key of an idle pool port; its value is the peer's name.
pub const POOL_KEY: &str = "sdn-pool";
/// `external_ids` key of the port of a deleted pod, waiting for the batched deletion.
pub const DEAD_KEY: &str = "sdn-dead";
/// The most ports added in one transaction; also how many dead ports make a deletion batch
/// before [`REAP_EVERY`] is up.
const BATCH: usize = 32;
/// How often dead ports are deleted (and the pool checked) at the latest.
pub const REAP_EVERY: Duration = Duration::from_millis(250);

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

/// The pool and the dead ports (see the module docs).
#[derive(Debug, Default)]
pub struct PortPool {
    idle: std::sync::Mutex<VecDeque<PooledPort>>,
    dead: std::sync::Mutex<Vec<String>>,
    wake: tokio::sync::Notify,
}

impl PortPool {
    /// Takes a ready port, if any; wakes the refill when the pool has fallen to half of
    /// `size` (so refills come in batches of at least half the pool: one ovs-vswitchd
    /// reconfiguration per batch, not per pod).
    pub fn take(&self, size: usize) -> Option<PooledPort> {
        let mut idle = lock(&self.idle);
        let p = idle.pop_front();
        if idle.len() <= size / 2 {
            self.wake.notify_one();
        }
        p
    }

    /// How many ports are ready.
    pub fn idle(&self) -> usize {
        lock(&self.idle).len()
    }

    /// Queues a dead port for the next batched deletion (within [`REAP_EVERY`], or at once when
    /// [`BATCH`] are waiting).
    pub fn bury(&self, port: String) {
        let mut dead = lock(&self.dead);
        dead.push(port);
        if dead.len() >= BATCH {
            self.wake.notify_one();
        }
    }

    /// How many dead ports wait for deletion.
    pub fn dead(&self) -> usize {
        lock(&self.dead).len()
    }
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

impl<Io: NodeIo> Pods<Io> {
    /// The port pool.
    pub fn pool(&self) -> &PortPool {
        &self.pool
    }

    /// Runs forever (the daemon spawns it and aborts it at stop): every [`REAP_EVERY`], and
    /// when woken (the pool fell to half, or a batch of dead ports is waiting), deletes the dead
    /// ports in one transaction and, when the pool is at half or less, tops it up in one.
    pub async fn maintain_ports(&self) {
        loop {
            tokio::select! {
                () = self.pool.wake.notified() => {}
                () = tokio::time::sleep(REAP_EVERY) => {}
            }
            self.reap_dead_ports().await;
            if self.pool.idle() <= self.net.port_pool_size / 2 {
                self.refill_pool().await;
            }
        }
    }

    /// Deletes the dead ports queued so far, in one transaction; they stay queued on failure.
    pub async fn reap_dead_ports(&self) {
        let names = std::mem::take(&mut *lock(&self.pool.dead));
        if names.is_empty() {
            return;
        }
        if let Err(e) = self.db.delete_ports_nowait(BRIDGE, &names).await {
            tracing::warn!(ports = names.len(), error = %e, "deleting the ports of deleted pods; retrying");
            lock(&self.pool.dead).extend(names);
        }
    }

    /// Adds pool ports until the pool holds `portPoolSize` (at most [`BATCH`] per call).
    pub async fn refill_pool(&self) {
        let want = self
            .net
            .port_pool_size
            .saturating_sub(self.pool.idle())
            .min(BATCH);
        if want == 0 {
            return;
        }
        let mut pairs = Vec::new();
        for _ in 0..want {
            let (host, peer) = pool_names();
            match self
                .links
                .create_pool_veth(&host, &peer, self.net.mtu, self.net.tx_checksum_off)
                .await
            {
                Ok(()) => pairs.push((host, peer)),
                Err(e) => {
                    tracing::warn!(error = %e, "creating a pool veth");
                    break;
                }
            }
        }
        if pairs.is_empty() {
            return;
        }
        let specs: Vec<PortSpec> = pairs
            .iter()
            .map(|(host, peer)| {
                let mut spec = PortSpec::new(host.clone(), "");
                spec.external_ids = BTreeMap::from([(POOL_KEY.to_string(), peer.clone())]);
                spec
            })
            .collect();
        match self.db.add_ports(BRIDGE, &specs).await {
            Ok(ofports) => {
                let mut idle = lock(&self.pool.idle);
                for ((host, peer), ofport) in pairs.into_iter().zip(ofports) {
                    idle.push_back(PooledPort { host, peer, ofport });
                }
            }
            Err(e) => {
                tracing::warn!(ports = pairs.len(), error = %e, "adding pool ports; deleting them");
                let names: Vec<String> = pairs.iter().map(|(h, _)| h.clone()).collect();
                for h in &names {
                    let _ = self.links.delete_host_veth(h).await;
                }
                let _ = self.db.delete_ports_nowait(BRIDGE, &names).await;
            }
        }
    }

    /// Start-up: takes back the idle pool ports whose host end and parked peer are both still
    /// there and deletes the others (the previous agent's parking namespace is gone, or an ADD
    /// was cut off after moving the peer) and every dead port. Returns (taken back, deleted).
    pub async fn restore_pool(&self) -> Result<(usize, usize), PodError> {
        let mut doomed = Vec::new();
        let mut kept = Vec::new();
        for i in self.db.interfaces_with_external_id(POOL_KEY) {
            let peer = i.external_ids.get(POOL_KEY).cloned().unwrap_or_default();
            let ofport = i
                .ofport
                .and_then(|p| u32::try_from(p).ok())
                .filter(|p| *p >= 3);
            let host_alive = self.links.link_exists(&i.name).await?.is_some();
            let peer_parked = !peer.is_empty() && self.links.pool_peer_parked(&peer).await?;
            match (host_alive && peer_parked, ofport) {
                (true, Some(ofport)) => kept.push(PooledPort {
                    host: i.name,
                    peer,
                    ofport,
                }),
                _ => {
                    self.links.delete_host_veth(&i.name).await?;
                    doomed.push(i.name);
                }
            }
        }
        doomed.extend(
            self.db
                .interfaces_with_external_id(DEAD_KEY)
                .into_iter()
                .map(|i| i.name),
        );
        let deleted = doomed.len();
        if !doomed.is_empty() {
            self.db
                .delete_ports_nowait(BRIDGE, &doomed)
                .await
                .map_err(PodError::ovsdb(
                    "deleting broken pool ports and ports of deleted pods".to_string(),
                ))?;
        }
        let n = kept.len();
        lock(&self.pool.idle).extend(kept);
        Ok((n, deleted))
    }
}
