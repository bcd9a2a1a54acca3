//! The pod table after a restart, and VNID changes.
//!
//! [`Pods::rebuild_from_ovs`] reads every pod port's record: a pod whose veth still exists is
//! taken back (its flows staged in the flow store for the start-up reconcile, its host ports
//! re-registered, its meter remembered); one whose veth is gone (its netns was deleted while
//! the agent was down) is removed with its lease, QoS rows and meter. A namespace without a
//! NetNamespace keeps the VNID its port recorded; without a record its pods get the
//! unknown-tenant VNID, never the global one.
//!
//! [`Pods::sync_vnids`] applies the cluster state's VNIDs to the local pods: every pod whose
//! namespace now has another netid is re-flowed, and the table-80 rows follow (the flow store
//! counts the pods per VNID), all in **one** bundle: no packet sees a namespace half-changed,
//! and once the bundle is committed no packet crosses the old boundary (table 80 decides per
//! packet; the pipeline lets no conntrack state bypass it).

use std::collections::{BTreeMap, BTreeSet};

use flows::{AttachmentId, Mode, Vnid};
use ovs::openflow::OfError;

use super::error::PodError;
use super::record::{keys, Hardening, PortRecord};
use super::{lock, pool, Pod, Pods, VnidChange, BRIDGE};
use crate::bridge::flowstore::Change;
use crate::bridge::seams::{NodeIo, PodLinks, PortDb};
use crate::features::hostports;

impl<Io: NodeIo> Pods<Io> {
    /// Rebuilds the pod table from the pod ports on `br0` (after a restart) and stages their
    /// flows in the flow store (the caller reconciles). Ports whose veth is gone are removed
    /// with their lease, flows and QoS rows, and so are QoS rows of attachments without a port.
    /// Returns (pods kept, pods removed).
    pub async fn rebuild_from_ovs(&self) -> Result<(usize, usize), PodError> {
        let ports = self.db.interfaces_with_external_id(keys::SANDBOX);
        let (mut kept, mut removed) = (0, 0);
        let mut staged = Change::new();
        // Every port's veth looked up at once (pipelined on one netlink socket): a restart
        // with 1000 pods waits for one round of lookups, not 1000.
        // A pod on a pool port is alive while its interface sits on the port's parked peer
        // (the pair outlives the pod's netns; its interface does not).
        let alive = futures::future::join_all(ports.iter().map(|p| async {
            let host = self.links.link_exists(&p.name).await?;
            if host.is_some()
                && pool::is_pool_port(&p.name)
                && self.links.pool_peer_parked(&pool::peer_of(&p.name)).await?
            {
                return Ok(None);
            }
            Ok::<_, crate::host::netlink::NetlinkError>(host)
        }))
        .await;
        for (port, alive) in ports.into_iter().zip(alive) {
            let name = port.name.clone();
            let Some(record) = PortRecord::from_external_ids(&port.external_ids) else {
                continue;
            };
            let alive = alive?.is_some();
            let ofport = port
                .ofport
                .and_then(|p| u32::try_from(p).ok())
                .filter(|p| *p >= 3);
            // A record with an address of either family (a pod of an IPv6-only cluster has no
            // IPv4 one).
            let addressed = record.ip.is_some() || record.ip6.is_some();
            match (alive, addressed, ofport) {
                (true, true, Some(ofport)) => {
                    if pool::is_pool_port(&name) {
                        self.pool.note_unquieted(&name);
                    }
                    // Pods wired by an older agent get the host-veth hardening too (and the
                    // record says so, so the next start skips the sysctl writes).
                    let mut hardened = record.hardened;
                    if hardened == Hardening::None {
                        match self.links.isolate_host_veth(&name) {
                            Ok(()) => {
                                hardened = Hardening::Full;
                                let ids = std::collections::BTreeMap::from([(
                                    keys::HARDENED.to_string(),
                                    Hardening::Full.value().unwrap_or_default().to_string(),
                                )]);
                                if let Err(e) =
                                    self.db.set_interface_external_ids(&name, &ids).await
                                {
                                    tracing::warn!(port = %name, error = %e, "recording the host veth's hardening");
                                }
                            }
                            Err(e) => {
                                tracing::warn!(port = %name, error = %e, "taking the node kernel out of the pod's path")
                            }
                        }
                    }
                    let vnid = self.rebuilt_vnid(&name, &record);
                    let pod = Pod {
                        attachment: record.attachment.clone(),
                        namespace: record.namespace.clone(),
                        name: record.pod.clone(),
                        netns: record.netns.clone(),
                        ip: record.ip,
                        ip6: record.ip6,
                        host_veth: name.clone(),
                        ofport,
                        vnid,
                        egress_meter: record
                            .meter
                            .map(|m| m.id)
                            .filter(|_| self.net.egress_meters),
                        hostports: record.hostports.clone(),
                        limits: record.bandwidth,
                        hardened,
                    };
                    if let (Some(m), true) = (record.meter, self.net.egress_meters) {
                        let config = m.rate_burst.and_then(|(rate, burst)| {
                            ovs::openflow::Meter::new(m.id, rate, burst).ok()
                        });
                        lock(&self.meters).insert(m.id, config);
                    }
                    if record.vnid != Some(vnid) {
                        self.record_vnid(&pod).await;
                    }
                    self.restore_hostports(&pod, record.hostports.as_ref());
                    staged =
                        staged.set_pod(pod.host_veth.clone(), pod.flows(), self.row_vnid(pod.vnid));
                    self.table.lock().await.insert(pod.attachment.clone(), pod);
                    kept += 1;
                }
                _ => {
                    let a = &record.attachment;
                    tracing::info!(port = %name, sandbox = %a.container_id, ifname = %a.ifname, "removing a pod whose interface is gone");
                    self.db
                        .delete_port(BRIDGE, &name)
                        .await
                        .map_err(PodError::ovsdb(format!("deleting stale port {name}")))?;
                    self.links.delete_host_veth(&name).await?;
                    self.release_lease(a).await?;
                    self.remove_bandwidth(a).await?;
                    if let Some(m) = record.meter {
                        self.delete_meter(m.id).await?;
                    }
                    removed += 1;
                }
            }
        }
        self.store.stage(staged).await;
        // QoS rows of attachments that are gone (their port too).
        self.remove_orphan_qos(&BTreeSet::new()).await?;
        self.hostports.sync().await.map_err(PodError::iptables(
            "re-creating the host port rules of the running pods",
        ))?;
        Ok((kept, removed))
    }

    /// The VNID of a pod found at start-up: its namespace's now, else the one its port recorded,
    /// else the unknown-tenant VNID.
    fn rebuilt_vnid(&self, port: &str, record: &PortRecord) -> Vnid {
        if self.net.node.mode == Mode::Subnet {
            return Vnid::GLOBAL;
        }
        let namespace = &record.namespace;
        match (self.cluster.borrow().vnid(namespace), record.vnid) {
            (Some(v), _) => v,
            (None, Some(v)) => {
                tracing::warn!(port, %namespace, vnid = %v, "namespace has no NetNamespace; keeping the pod's recorded VNID");
                v
            }
            (None, None) => {
                tracing::warn!(port, %namespace, "namespace has no NetNamespace and the port records no VNID; isolating the pod (VNID 0xffffff)");
                Vnid::UNASSIGNED
            }
        }
    }

    /// Start-up: re-registers the host ports a running pod's port records. A bad record or a
    /// conflict is logged and the pod keeps running without them.
    fn restore_hostports(&self, pod: &Pod, recorded: Option<&String>) {
        let Some(text) = recorded else { return };
        let outcome = hostports::from_json(text).and_then(|mappings| {
            self.hostports.reserve(hostports::PodPorts {
                namespace: pod.namespace.clone(),
                pod: pod.name.clone(),
                sandbox: pod.attachment.container_id.clone(),
                ifname: pod.attachment.ifname.clone(),
                ip: pod.ip,
                ip6: pod.ip6,
                mappings,
            })
        });
        if let Err(e) = outcome {
            tracing::error!(sandbox = %pod.attachment.container_id, pod = %pod.name, error = %e.msg, "restoring the pod's host ports");
        }
    }

    /// Multitenant mode: applies the cluster state's VNIDs to the local pods (see the module
    /// docs). A namespace without a NetNamespace keeps its VNID. Pods whose ADD is still running
    /// pick the new VNID up themselves (under the same lock). Returns the pods re-flowed.
    pub async fn sync_vnids(&self) -> Result<Vec<VnidChange>, OfError> {
        if !self.net.node.mode.has_vnids() {
            return Ok(Vec::new());
        }
        let asked = std::time::Instant::now();
        let mut table = self.table.lock().await;
        tracing::debug!(lock_wait_ms = asked.elapsed().as_millis(), "syncing VNIDs");
        let state = self.cluster.borrow().clone();
        let mut changes: Vec<(AttachmentId, Vnid)> = table
            .iter()
            .filter_map(|(k, p)| {
                let v = state.vnid(&p.namespace)?;
                (v != p.vnid).then(|| (k.clone(), v))
            })
            .collect();
        if changes.is_empty() {
            return Ok(Vec::new());
        }
        changes.sort();
        let mut updated: Vec<Pod> = Vec::new();
        let mut change = Change::new();
        for (k, v) in &changes {
            let mut p = table[k].clone();
            p.vnid = *v;
            // Only the rows of tables 26 and 75 change: added over the old ones.
            change = change.put_pod(p.host_veth.clone(), p.flows(), self.row_vnid(p.vnid));
            updated.push(p);
        }
        let began = std::time::Instant::now();
        self.store.apply(change).await?;
        let took = began.elapsed();
        let out: Vec<VnidChange> = updated
            .iter()
            .map(|p| VnidChange {
                namespace: p.namespace.clone(),
                pod: p.name.clone(),
                from: table.get(&p.attachment).map_or(p.vnid, |o| o.vnid),
                to: p.vnid,
            })
            .collect();
        // In effect now: said first, per namespace, then per pod.
        let mut by_ns: BTreeMap<(&str, Vnid, Vnid), usize> = BTreeMap::new();
        for c in &out {
            *by_ns.entry((&c.namespace, c.from, c.to)).or_default() += 1;
        }
        let m = crate::telemetry::metrics::metrics();
        for _ in &out {
            m.pod_operations_latency.observe("update", took);
        }
        for ((namespace, from, to), pods) in by_ns {
            m.vnid_changes.inc();
            m.vnid_change_duration.observe(took.as_secs_f64());
            tracing::info!(
                namespace,
                from = %from,
                to = %to,
                pods,
                "namespace VNID changed; its pods were re-flowed in one bundle"
            );
        }
        for (p, c) in updated.iter().zip(&out) {
            tracing::info!(sandbox = %p.attachment.container_id, namespace = %c.namespace, pod = %c.pod, from = %c.from, to = %c.to, "pod re-flowed with its namespace's new VNID");
        }
        // The records all at once (pipelined on the one OVSDB connection), not one round trip
        // per pod.
        futures::future::join_all(updated.iter().map(|p| self.record_vnid(p))).await;
        for p in updated {
            table.insert(p.attachment.clone(), p);
        }
        Ok(out)
    }
}
