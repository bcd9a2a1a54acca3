//! The pool's upkeep by the pod logic: keeping it filled, trimmed, warmed per VNID and cooled,
//! retiring and reaping ports given back after DEL in batches, and taking it back after a
//! restart.

use crate::bridge::flowstore::Change;
use crate::bridge::seams::{NodeIo, PodLinks, PortDb};
use crate::pod::error::PodError;
use crate::pod::{lock, Pods, BRIDGE};
use flows::Vnid;
use ovs::ovsdb::PortSpec;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::*;

impl<Io: NodeIo> Pods<Io> {
    /// The port pool.
    pub fn pool(&self) -> &PortPool {
        &self.pool
    }

    /// Makes warm port `w` attachment `a`'s: its address's lease is handed over in place, and
    /// from now on its flows, row and veth are undone with the ADD (flows first, the address
    /// last).
    pub(in crate::pod) async fn hand_over_warm_port(
        &self,
        a: &flows::AttachmentId,
        w: &WarmPort,
        done: &mut Vec<crate::pod::add::Undo>,
    ) -> Result<(), PodError> {
        let (host, warm) = (w.port.host.clone(), w.clone());
        let (cid, ifn) = (a.container_id.clone(), a.ifname.clone());
        let moved = self
            .ipam(move |store| warm.hand_over(store, (&cid, &ifn)))
            .await;
        done.push(crate::pod::add::Undo::Lease);
        done.push(crate::pod::add::Undo::Veth(host.clone()));
        done.push(crate::pod::add::Undo::Port(host.clone()));
        done.push(crate::pod::add::Undo::Flows(host));
        moved.map(drop)
    }

    /// Runs forever (the daemon spawns it and aborts it at stop): every [`REAP_EVERY`], and
    /// when woken (a warm port was taken, or a batch of deleted pods is waiting), removes the
    /// flows of deleted pods and then their addresses, deletes the dead ports in one
    /// transaction, cools the warm ports of VNIDs no longer recent and warms ports for the
    /// recent ones; meanwhile, and when the pool has fallen to half, tops the pool up in one
    /// transaction.
    pub async fn maintain_ports(&self) {
        // Two loops: a refill waits for ovs-vswitchd to add the ports (a whole-bridge
        // reconfiguration, a second or more on a busy node with 1000 ports), and warm-ups and
        // retirements must not wait behind it.
        let refill = async {
            loop {
                tokio::select! {
                    () = self.pool.refill.notified() => {}
                    () = tokio::time::sleep(REAP_EVERY) => {}
                }
                if self.pool.idle() <= self.net.port_pool_size / 2 {
                    self.refill_pool().await;
                }
            }
        };
        let rest = async {
            loop {
                tokio::select! {
                    () = self.pool.wake.notified() => {}
                    () = tokio::time::sleep(REAP_EVERY) => {}
                }
                self.retire_ports().await;
                self.reap_dead_ports().await;
                self.cool_ports().await;
                self.warm_ports().await;
                self.trim_pool().await;
                if self.pool.idle() <= self.net.port_pool_size / 2 {
                    self.pool.refill.notify_one();
                }
            }
        };
        tokio::join!(refill, rest);
    }

    /// Deletes the idle ports beyond `portPoolSize` (cooled warm ports, and ports given back
    /// while a refill was on its way, can overfill the pool): marked dead, their pairs deleted
    /// now, their rows with the next batch of dead ones.
    pub async fn trim_pool(&self) {
        let excess: Vec<PooledPort> = {
            let mut idle = lock(&self.pool.idle);
            let keep = self.net.port_pool_size.min(idle.len());
            idle.drain(keep..).collect()
        };
        let dead = BTreeMap::from([(DEAD_KEY.to_string(), "1".to_string())]);
        for p in excess {
            // Dead first: a restart meanwhile deletes the row rather than taking the port back.
            if let Err(e) = self.db.replace_interface_external_ids(&p.host, &dead).await {
                tracing::warn!(port = %p.host, error = %e, "marking a pool port beyond the pool's size dead");
            }
            self.discard_pool_port(p.host, "a pool port beyond the pool's size")
                .await;
        }
    }

    /// Deletes pool port `host`'s pair now and queues its row for the next batch of dead ones
    /// (`what` names it in the warning if the pair cannot be deleted).
    pub(crate) async fn discard_pool_port(&self, host: String, what: &str) {
        if let Err(e) = self.links.delete_host_veth(&host).await {
            tracing::warn!(port = %host, error = %e, "deleting {what}");
        }
        self.pool.bury(host);
    }

    /// How many warm ports a recent VNID keeps: as many as the pool holds. Under a stream of
    /// ADDs each warm-up is one bundle that waits for ovs-vswitchd, so warm-ups keep pace only
    /// when each brings many ports (half the pool fell behind at 1000 pods).
    pub(crate) fn warm_target(&self) -> usize {
        self.net.port_pool_size
    }

    /// Removes the flows of the deleted pods' ports in one bundle, then releases their addresses
    /// and queues their rows for deletion. They stay queued when the bundle fails.
    pub async fn retire_ports(&self) {
        let ports = std::mem::take(&mut *lock(&self.pool.retiring));
        if ports.is_empty() {
            return;
        }
        if let Err(e) = self.store.apply(remove_ports(ports.iter())).await {
            tracing::warn!(ports = ports.len(), error = %e, "removing the flows of deleted pods; retrying");
            lock(&self.pool.retiring).extend(ports);
            return;
        }
        self.release_pool_leases(ports.iter().map(|p| retired_lease(p)), "deleted pods")
            .await;
        for p in ports {
            // One lock at a time (`wants_back` takes `idle`, then `recycled`).
            let back = lock(&self.pool.recycled).remove(&p);
            match back {
                Some(port) => {
                    if self.pool.take_unquieted(&port.host) {
                        self.links.quiet_pool_peer(&port.peer).await;
                    }
                    lock(&self.pool.idle).push_back(port)
                }
                None => {
                    self.pool.take_unquieted(&p);
                    self.pool.bury(p)
                }
            }
        }
    }

    /// Cools the warm ports of VNIDs that are no longer recent, and those OVS numbered anew or
    /// cannot open ([`PortPool::follow`]): their flows go in one bundle, then their addresses,
    /// and the ports go back to the pool (the broken ones are deleted). On a failed bundle they
    /// stay queued, out of every ADD's reach, and the next round tries again (the removal is by
    /// cookie, whatever the store recorded).
    pub async fn cool_ports(&self) {
        let mut cold: Vec<Cooling> = std::mem::take(&mut *lock(&self.pool.cooling));
        {
            let recent = self.pool.warm_vnids();
            let mut warm = lock(&self.pool.warm);
            let gone: Vec<Vnid> = warm
                .keys()
                .filter(|v| !recent.contains(v))
                .copied()
                .collect();
            cold.extend(
                gone.iter()
                    .filter_map(|v| warm.remove(v))
                    .flatten()
                    .map(|w| Cooling {
                        back_as: Some(w.port.ofport),
                        warm: w,
                    }),
            );
        }
        if cold.is_empty() {
            return;
        }
        if let Err(e) = self
            .store
            .apply(remove_ports(cold.iter().map(|c| &c.warm.port.host)))
            .await
        {
            tracing::warn!(ports = cold.len(), error = %e, "removing the flows of warm ports; retrying");
            lock(&self.pool.cooling).extend(cold);
            return;
        }
        self.release_pool_leases(
            cold.iter().map(|c| warm_lease(&c.warm.port.host)),
            "warm ports",
        )
        .await;
        for c in cold {
            match c.back_as {
                Some(ofport) => lock(&self.pool.idle).push_back(PooledPort {
                    ofport,
                    ..c.warm.port
                }),
                None => {
                    self.discard_pool_port(c.warm.port.host, "a broken warm port")
                        .await
                }
            }
        }
    }

    /// Releases, in one IPAM pass, the addresses leased to the pool owners `owners` (after
    /// their flows are gone). A failure is logged: an address left leased is only unused until
    /// the next start-up.
    pub(crate) async fn release_pool_leases(
        &self,
        owners: impl Iterator<Item = String>,
        what: &str,
    ) {
        let owners: BTreeSet<String> = owners.collect();
        match self
            .ipam(move |store| store.retain(|l| !owners.contains(&l.container_id)))
            .await
        {
            Ok(gone) => {
                for l in &gone {
                    tracing::debug!(ip = %l.ip, owner = %l.container_id, "released a pool address");
                }
            }
            Err(e) => tracing::warn!(error = %e, "releasing the addresses of {what}"),
        }
    }

    /// Warms ports for the recent VNIDs below their target of warm ports: takes
    /// pool ports, leases them addresses in one IPAM pass and installs their flows in one bundle
    /// per VNID. On failure the addresses are released and the ports go back to the pool.
    pub async fn warm_ports(&self) {
        let target = self.warm_target();
        if target == 0 {
            return;
        }
        for vnid in self.pool.warm_vnids() {
            let have = lock(&self.pool.warm).get(&vnid).map_or(0, Vec::len);
            if have >= target {
                continue;
            }
            let ports: Vec<PooledPort> = {
                let mut idle = lock(&self.pool.idle);
                let n = (target - have).min(idle.len());
                idle.drain(..n).collect()
            };
            if ports.is_empty() {
                return;
            }
            let ids: Vec<String> = ports.iter().map(|p| warm_lease(&p.host)).collect();
            let (range, range6) = (self.net.range(), self.net.range6());
            let ifname = warm_lease_ifname(vnid);
            let leases = match self
                .ipam(move |store| {
                    warm_leases(store, (range.as_ref(), range6.as_ref()), &ids, &ifname)
                })
                .await
            {
                Ok(l) => l,
                Err(e) => {
                    tracing::debug!(error = %e, "no addresses for warm ports");
                    lock(&self.pool.idle).extend(ports);
                    return;
                }
            };
            let mut ports = ports.into_iter();
            let warm: Vec<WarmPort> = ports
                .by_ref()
                .zip(leases)
                .map(|(port, (ip, ip6))| WarmPort {
                    port,
                    ip,
                    ip6,
                    vnid,
                })
                .collect();
            lock(&self.pool.idle).extend(ports);
            let chunk = WARM_CHUNK;
            // In chunks, each one bundle that ovs-vswitchd takes in one main-loop iteration: an
            // ADD that needs a bundle of its own (no warm port left) waits for one chunk, not
            // for the whole batch, and each chunk's ports can be taken as soon as it is in.
            let mut chunks = warm.chunks(chunk);
            while let Some(chunk) = chunks.next() {
                let change = chunk.iter().fold(Change::new(), |c, w| {
                    c.set_pod(w.port.host.clone(), w.flows(), self.row_vnid(vnid))
                });
                match self.store.apply(change).await {
                    Ok(()) => {
                        tracing::debug!(%vnid, ports = chunk.len(), "warmed pool ports");
                        lock(&self.pool.warm)
                            .entry(vnid)
                            .or_default()
                            .extend(chunk.iter().cloned());
                    }
                    Err(e) => {
                        // This chunk and the ones not tried: addresses released, ports back.
                        let left: Vec<WarmPort> =
                            chunk.iter().chain(chunks.flatten()).cloned().collect();
                        tracing::warn!(%vnid, ports = left.len(), error = %e, "installing the flows of warm ports");
                        self.release_pool_leases(
                            left.iter().map(|w| warm_lease(&w.port.host)),
                            "warm ports whose flows failed",
                        )
                        .await;
                        lock(&self.pool.idle).extend(left.into_iter().map(|w| w.port));
                        return;
                    }
                }
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

    /// Adds pool ports until the pool holds `portPoolSize` (at most [`BATCH`] per call); none
    /// while the pool is held until an ADD asks for a port ([`PortPool::hold_until_demand`]).
    pub async fn refill_pool(&self) {
        if self.pool.held() {
            return;
        }
        let want = self
            .net
            .port_pool_size
            .saturating_sub(self.pool.idle())
            .min(BATCH);
        if want == 0 {
            return;
        }
        // All at once (pipelined on the netlink sockets): their link events reach ovs-vswitchd
        // together, and it reconfigures once for the batch rather than once per pair.
        let names: Vec<(String, String)> = (0..want).map(|_| pool_names()).collect();
        let made = futures::future::join_all(names.iter().map(|(host, peer)| {
            self.links
                .create_pool_veth(host, peer, self.net.mtu, self.net.tx_checksum_off)
        }))
        .await;
        let mut pairs = Vec::new();
        for (pair, made) in names.into_iter().zip(made) {
            match made {
                Ok(()) => pairs.push(pair),
                Err(e) => tracing::warn!(error = %e, "creating a pool veth"),
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

    /// Start-up: takes back the idle (and warm) pool ports whose host end and parked peer are both still
    /// there and queues the others (the previous agent's parking namespace is gone, or an ADD
    /// was cut off after moving the peer) and every dead port for the batched deletion, which
    /// the maintenance runs after the agent serves (deleting rows makes ovs-vswitchd
    /// reconfigure, which would slow the start-up reconcile). Returns (taken back, queued).
    pub async fn restore_pool(&self) -> Result<PoolRestored, PodError> {
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
                (true, Some(ofport)) => {
                    // A pair made by an agent before the MLD drop existed gets it now.
                    self.links.quiet_pool_peer(&peer).await;
                    kept.push(PooledPort {
                        host: i.name,
                        peer,
                        ofport,
                    })
                }
                _ => {
                    if host_alive {
                        self.links.delete_host_veth(&i.name).await?;
                    }
                    doomed.push(i.name);
                }
            }
        }
        // Dead rows: their pairs go too (a trim cut off between marking a port dead and
        // deleting its pair leaves one; for the others this finds nothing).
        for i in self.db.interfaces_with_external_id(DEAD_KEY) {
            self.links.delete_host_veth(&i.name).await?;
            doomed.push(i.name);
        }
        // Pool pairs of a refill cut off before their ports were added: their peers wait in
        // the pinned namespace, which outlived that agent.
        let rows: BTreeSet<String> = [POOL_KEY, DEAD_KEY, crate::pod::record::keys::SANDBOX]
            .into_iter()
            .flat_map(|k| self.db.interfaces_with_external_id(k))
            .map(|i| i.name)
            .collect();
        for orphan in self.links.links_named("sdnp").await? {
            if is_pool_port(&orphan) && !rows.contains(&orphan) {
                tracing::info!(veth = %orphan, "deleting a pool veth that never became a port");
                self.links.delete_host_veth(&orphan).await?;
            }
        }
        let queued = doomed.len();
        lock(&self.pool.dead).extend(doomed);
        let n = kept.len();
        // Warm ports stay warm: their leases name their VNID, and their flows are staged so
        // the start-up reconcile keeps them (nothing to delete, nothing to make again).
        let leases = self
            .ipam(|store| store.leases_of_family::<std::net::IpAddr>())
            .await?;
        let dual = self.net.range6().is_some();
        // An IPv6-only node's warm ports are its IPv6 leases.
        let ipv6_only = self.net.range().is_none();
        let mut warm: Vec<WarmPort> = Vec::new();
        let mut kept_leases = BTreeSet::new();
        let (mut ip6s, mut stray6) = (BTreeMap::new(), Vec::new());
        for l in leases {
            let Some((port, vnid)) = parse_warm_lease(&l.container_id, &l.ifname) else {
                continue;
            };
            let (ip, ip6) = match l.ip {
                std::net::IpAddr::V4(ip) => (Some(ip), None),
                std::net::IpAddr::V6(ip) if ipv6_only => (None, Some(ip)),
                // Kept only where the node still serves IPv6 (else released here, and the
                // port's IPv6 rows go with the reconcile).
                std::net::IpAddr::V6(ip) => {
                    if dual {
                        // By port and VNID: a lease pair left by a failed cooling names
                        // another VNID, and the orphan release frees it.
                        ip6s.insert((port, l.ifname.clone()), ip);
                    } else {
                        stray6.push(ip);
                    }
                    continue;
                }
            };
            if let Some(i) = kept.iter().position(|p| p.host == port) {
                kept_leases.insert(flows::AttachmentId::new(l.container_id, l.ifname));
                warm.push(WarmPort {
                    port: kept.remove(i),
                    ip,
                    ip6,
                    vnid,
                });
            }
        }
        // A warm port of a node that has turned IPv6 on since keeps IPv4 only: an ADD that
        // takes it leases the IPv6 address then.
        for w in warm.iter_mut().filter(|w| w.ip.is_some()) {
            w.ip6 = ip6s.remove(&(w.port.host.clone(), warm_lease_ifname(w.vnid)));
        }
        if !stray6.is_empty() {
            self.ipam(move |store| {
                stray6
                    .into_iter()
                    .try_for_each(|ip| store.release_ip(ip).map(drop))
            })
            .await?;
        }
        if !warm.is_empty() {
            let change = warm.iter().fold(Change::new(), |c, w| {
                c.set_pod(w.port.host.clone(), w.flows(), self.row_vnid(w.vnid))
            });
            self.store.stage(change).await;
            let mut by_vnid = lock(&self.pool.warm);
            for w in warm {
                by_vnid.entry(w.vnid).or_default().push(w);
            }
            for ports in by_vnid.values_mut() {
                ports.sort_by_key(|w| (w.ip, w.ip6));
            }
            // Recent again (cooled after WARM_IDLE without an ADD, as before the restart).
            let mut recent = lock(&self.pool.recent);
            for v in by_vnid.keys().take(WARM_VNIDS) {
                recent.push_back((*v, Instant::now()));
            }
        }
        lock(&self.pool.idle).extend(kept);
        Ok(PoolRestored {
            kept: n,
            queued,
            warm_leases: kept_leases,
        })
    }
}

/// A warm port's leases for each of `ids` (as far as the subnets go): IPv4, and IPv6 with the
/// same owner on a dual-stack node (IPv6 alone on an IPv6-only one), under one lock and one
/// listing of the directory.
#[allow(clippy::type_complexity)]
fn warm_leases(
    store: &crate::host::ipam::Store,
    (range, range6): (
        Option<&crate::host::ipam::Range>,
        Option<&crate::host::ipam::Range<std::net::Ipv6Addr>>,
    ),
    ids: &[String],
    ifname: &str,
) -> Result<
    Vec<(Option<std::net::Ipv4Addr>, Option<std::net::Ipv6Addr>)>,
    crate::host::ipam::IpamError,
> {
    let Some(range) = range else {
        // An IPv6-only node: IPv6 leases whose last 32 bits (the pods' MACs) are unique.
        let Some(range6) = range6 else {
            return Ok(Vec::new());
        };
        return Ok(store
            .allocate_many_ipv6_only(range6, ids, ifname)?
            .into_iter()
            .map(|l| (None, Some(l.ip)))
            .collect());
    };
    Ok(match range6 {
        None => store
            .allocate_many(range, ids, ifname)?
            .into_iter()
            .map(|l| (Some(l.ip), None))
            .collect(),
        Some(range6) => store
            .allocate_many_dual((range, range6), ids, ifname)?
            .into_iter()
            .map(|(l4, l6)| (Some(l4.ip), Some(l6.ip)))
            .collect(),
    })
}
