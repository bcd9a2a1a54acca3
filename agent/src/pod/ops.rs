//! DEL, CHECK and GC of attachments.
//!
//! DEL is idempotent and complete without a netns, a veth or any memory of the pod: each piece
//! is found from the attachment (its hash names the veth and the flow cookie; its port record
//! names its host ports and meter; the lease is found by container id and ifname) and removing a
//! missing piece is not an error. CHECK compares the attachment with what ADD left: interface,
//! address, MTU, routes, OVS port, host port rules and flows. GC removes every attachment not in
//! the runtime's list, then leases and QoS rows that belong to no attachment.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use flows::AttachmentId;
use ovs::flow::{Flow, MacAddr};
use ovs::openflow::DumpFilter;

use super::error::PodError;
use super::record::keys;
use super::{lock, pool, Attachment, Pods, BRIDGE};
use crate::bridge::seams::{FlowSwitch, NodeIo, PodLinks, PortDb};
use crate::features::hostports;
use crate::host::netlink;

impl<Io: NodeIo> Pods<Io> {
    /// CNI DEL: idempotent, complete without a netns, a veth or any memory of the pod.
    ///
    /// A pod on a pool port that the table knows is retired (see `pool`): its interface comes
    /// off the port's peer, its lease is handed to its port and it leaves the table at once;
    /// its flows and address go in the next batch, and then the port goes back to the pool (or,
    /// when the pool is full or the peer is not free, the pair is deleted at once and the row
    /// with the next batch of dead ones), so the DEL does not wait for ovs-vswitchd. Any other
    /// pod (an unknown one, one on a port named after its attachment, which a new ADD of the
    /// same attachment would reuse, or one with an egress meter, whose deletion takes the flows
    /// using it) has its flows removed before the DEL answers.
    pub async fn del(&self, a: &AttachmentId) -> Result<(), PodError> {
        // The pod's port, found by its record (a pooled port has its own name), else by the
        // attachment's hash name.
        let port = self
            .db
            .find_interfaces_by_external_id(keys::SANDBOX, &a.container_id)
            .into_iter()
            .find(|i| i.external_ids.get(keys::IFNAME) == Some(&a.ifname));
        // Host ports: known to the registry, or recorded on the port (stateless DEL).
        let recorded = port
            .as_ref()
            .is_some_and(|i| i.external_ids.contains_key(hostports::EXTERNAL_ID));
        self.hostports
            .remove(&a.container_id, &a.ifname, recorded)
            .await
            .map_err(PodError::iptables(format!(
                "removing the host port rules of {a}"
            )))?;
        let veth = port.as_ref().map_or_else(
            || netlink::host_veth_name(&a.container_id, &a.ifname),
            |i| i.name.clone(),
        );
        let retired = {
            let mut table = self.table.lock().await;
            match table.get(a) {
                // Not with an egress meter: deleting the meter (below) makes OVS delete the
                // flows using it, which the store would still want until the batch.
                Some(p)
                    if p.host_veth == veth
                        && pool::is_pool_port(&veth)
                        && p.egress_meter.is_none() =>
                {
                    let gone = ((p.ip, p.ip6), p.netns.clone(), p.ofport);
                    table.remove(a);
                    self.policy_changed();
                    Some(gone)
                }
                _ => None,
            }
        };
        let (recycled, mut released) = match &retired {
            None => {
                self.remove_flows(a, &veth).await?;
                (false, Vec::new())
            }
            Some((ip, netns, ofport)) => {
                self.retire_pool_port(a, &veth, *ip, netns, *ofport).await?
            }
        };
        self.remove_bandwidth(a).await?;
        if !recycled {
            self.links.delete_host_veth(&veth).await?;
        }
        self.release_row(&veth, port.is_some(), recycled, retired.is_some())
            .await?;
        if retired.is_none() {
            released = self.release_lease(a).await?;
        }
        tracing::info!(sandbox = %a.container_id, ifname = %a.ifname, ?released, retired = retired.is_some(), port_back_in_pool = recycled, "pod removed");
        Ok(())
    }

    /// A deleted pod's pool port: its address stays leased (to the port) until the port's
    /// flows are gone, and the port is queued at once, so whatever fails, its flows still go.
    /// The pod's interface comes off the port's peer; a free peer keeps its pair and the port
    /// goes back to the pool after its flows, else the pair goes. Returns whether the port
    /// went back to the pool, and the leases released now (when the address could not be
    /// handed to the port).
    async fn retire_pool_port(
        &self,
        a: &AttachmentId,
        veth: &str,
        (ip, ip6): (Option<std::net::Ipv4Addr>, Option<std::net::Ipv6Addr>),
        netns: &str,
        ofport: u32,
    ) -> Result<(bool, Vec<std::net::IpAddr>), PodError> {
        let (cid, ifn, owner) = (
            a.container_id.clone(),
            a.ifname.clone(),
            pool::retired_lease(veth),
        );
        // Both families' addresses go to the port (its batch releases whatever it holds).
        let moved = self
            .ipam(move |store| {
                let ips = crate::host::ipam::addresses(ip, ip6);
                store.transfer_all(&ips, (&cid, &ifn), (&owner, pool::LEASE_IFNAME))
            })
            .await;
        let peer = pool::peer_of(veth);
        let netns = Some(PathBuf::from(netns)).filter(|n| !n.as_os_str().is_empty());
        let free = if self.pool.wants_back(self.net.port_pool_size) {
            match self
                .links
                .release_pool_link(&peer, netns.as_deref(), &a.ifname)
                .await
            {
                Ok(free) => free,
                Err(e) => {
                    tracing::warn!(sandbox = %a.container_id, port = %veth, error = %e, "freeing the pool port of a deleted pod; deleting it");
                    false
                }
            }
        } else {
            false
        };
        if free {
            self.pool.recycle(pool::PooledPort {
                host: veth.to_string(),
                peer,
                ofport,
            });
        } else {
            self.pool.retire(veth.to_string());
        }
        let mut released = Vec::new();
        if let Err(e) = moved {
            // Same-match adds replace these flows and deletes go by cookie, so even a reuse of
            // the address before they go is safe.
            tracing::warn!(sandbox = %a.container_id, ip = %crate::pod::shown_addrs(ip, ip6), error = %e, "handing the deleted pod's address to its port; releasing it now");
            released = self.release_lease(a).await?;
        }
        Ok((free, released))
    }

    /// The row of a deleted pod's port: no longer a pod's from now on; a pool port's again,
    /// or deleted in a later batch (see `pool`). A port with no record (an ADD cut off before
    /// writing it) is deleted now, when it was not retired to the pool.
    async fn release_row(
        &self,
        veth: &str,
        recorded: bool,
        recycled: bool,
        retired: bool,
    ) -> Result<(), PodError> {
        if recorded {
            let marker = if recycled {
                (pool::POOL_KEY.to_string(), pool::peer_of(veth))
            } else {
                (pool::DEAD_KEY.to_string(), "1".to_string())
            };
            match self
                .db
                .replace_interface_external_ids(veth, &BTreeMap::from([marker]))
                .await
            {
                Ok(()) if !retired => self.pool.bury(veth.to_string()),
                Ok(()) | Err(ovs::ovsdb::Error::InterfaceNotFound(_)) => {}
                Err(e) => return Err(PodError::ovsdb(format!("retiring port {veth}"))(e)),
            }
        } else if !retired {
            self.db
                .delete_port(BRIDGE, veth)
                .await
                .map_err(PodError::ovsdb(format!(
                    "deleting port {veth} from {BRIDGE}"
                )))?;
        }
        Ok(())
    }

    /// CNI CHECK: the interface, address, routes, OVS port and flows are as ADD left them.
    pub async fn check(&self, at: &Attachment) -> Result<(), PodError> {
        let a = &at.id;
        let pod = self
            .table
            .lock()
            .await
            .get(a)
            .cloned()
            .ok_or_else(|| PodError::NotAttached {
                attachment: a.clone(),
            })?;
        let drift = |what: String| PodError::Drift {
            attachment: a.clone(),
            what,
        };
        if let Some(prev) = &at.prev_result {
            for ip in crate::host::ipam::addresses(pod.ip, pod.ip6) {
                if !prev.ips.iter().any(|c| c.address.addr() == ip) {
                    return Err(drift(format!(
                        "prevResult does not hold the pod's address {ip}"
                    )));
                }
            }
        }
        let netns = at
            .netns
            .clone()
            .unwrap_or_else(|| PathBuf::from(&pod.netns));
        let state = self
            .links
            .inspect_pod_interface(&netns, &a.ifname)
            .await
            .map_err(|e| drift(e.to_string()))?;
        let mac = MacAddr::from_pod_addrs(pod.ip, pod.ip6).ok_or(PodError::NoAddress)?;
        if state.mac != mac.0 {
            return Err(drift(format!(
                "MAC is {} instead of {mac}",
                MacAddr(state.mac)
            )));
        }
        if let Some(v4) = pod.ip.and_then(|ip| self.net.ipv4_spec(ip)) {
            if !state.addresses.contains(&v4.address) {
                return Err(drift(format!(
                    "address {} missing (has {:?})",
                    v4.address, state.addresses
                )));
            }
        }
        if state.mtu != self.net.mtu {
            return Err(drift(format!(
                "MTU is {} instead of {}",
                state.mtu, self.net.mtu
            )));
        }
        if !state.up {
            return Err(drift(format!("{} is down", a.ifname)));
        }
        for want in self.net.routes() {
            if !state.routes.contains(&want) {
                return Err(drift(format!("route {want} missing")));
            }
        }
        if let Some(v6) = pod.ip6.and_then(|ip6| self.net.ipv6_spec(ip6)) {
            if !state.addresses6.contains(&v6.address) {
                return Err(drift(format!(
                    "IPv6 address {} missing (has {:?})",
                    v6.address, state.addresses6
                )));
            }
            let default = crate::host::netlink::Route6Spec {
                dst: ipnet::Ipv6Net::default(),
                via: Some(v6.gateway),
            };
            for want in std::iter::once(default).chain(v6.routes) {
                if !state.routes6.contains(&want) {
                    return Err(drift(format!("route {want} missing")));
                }
            }
        }
        let port = self
            .db
            .find_interfaces_by_external_id(keys::SANDBOX, &a.container_id)
            .into_iter()
            .find(|i| i.external_ids.get(keys::IFNAME) == Some(&a.ifname));
        match port {
            Some(i) if i.ofport == Some(i64::from(pod.ofport)) => {}
            Some(i) => {
                return Err(drift(format!(
                    "OVS port {} has ofport {:?} instead of {}",
                    i.name, i.ofport, pod.ofport
                )))
            }
            None => return Err(drift(format!("no OVS port {} on {BRIDGE}", pod.host_veth))),
        }
        self.hostports
            .check(&a.container_id, &a.ifname)
            .await
            .map_err(drift)?;
        let have = self
            .store
            .switch()
            .dump_flows(&DumpFilter::cookie(pod.cookie(), u64::MAX))
            .await
            .map_err(|e| drift(format!("dumping flows: {e}")))?;
        let text = |v: &[Flow]| {
            let mut t: Vec<String> = v.iter().map(ToString::to_string).collect();
            t.sort();
            t
        };
        let (have, want) = (text(&have), text(&pod.flows()));
        if have != want {
            let missing: Vec<&String> = want.iter().filter(|w| !have.contains(w)).collect();
            let extra: Vec<&String> = have.iter().filter(|h| !want.contains(h)).collect();
            return Err(drift(format!(
                "flows differ from the pod's: missing {missing:?}, unexpected {extra:?}"
            )));
        }
        Ok(())
    }

    /// CNI GC: removes every attachment not in `valid`, and leases and QoS rows that belong to no
    /// attachment on this node.
    pub async fn gc(&self, valid: &BTreeSet<AttachmentId>) -> Result<usize, PodError> {
        let stale: Vec<AttachmentId> = self
            .table
            .lock()
            .await
            .keys()
            .filter(|k| !valid.contains(*k))
            .cloned()
            .collect();
        let mut removed = 0;
        for a in &stale {
            self.del(a).await?;
            removed += 1;
        }
        removed += self.release_orphan_leases(valid, false).await?;
        self.remove_orphan_qos(valid).await?;
        Ok(removed)
    }

    /// Releases, in one pass under the lease lock, leases held by no pod of the table, not in
    /// `keep` and not of an ADD in flight; the warm and retiring ports' leases (`pool`) only with
    /// `pool_too` (at start-up, before the reconcile removes their flows and before any ADD:
    /// while the agent runs, the pool releases them itself, after their flows). An ADD enters `in_flight` before it takes its lease
    /// and leaves it only after its pod entered the table, which this holds locked meanwhile: a
    /// live attachment's lease is always seen as live.
    pub async fn release_orphan_leases(
        &self,
        keep: &BTreeSet<AttachmentId>,
        pool_too: bool,
    ) -> Result<usize, PodError> {
        let table = self.table.lock().await;
        let mut live: BTreeSet<AttachmentId> = table.keys().cloned().collect();
        live.extend(keep.iter().cloned());
        let in_flight = self.in_flight.clone();
        let gone = self
            .ipam(move |store| {
                store.retain(|l| {
                    let k = AttachmentId::new(l.container_id.clone(), l.ifname.clone());
                    live.contains(&k)
                        || lock(&in_flight).contains(&k)
                        || (!pool_too && pool::is_pool_lease(&l.container_id))
                })
            })
            .await?;
        drop(table);
        for l in &gone {
            tracing::info!(ip = %l.ip, sandbox = %l.container_id, ifname = %l.ifname, "released an orphan lease");
        }
        Ok(gone.len())
    }
}
