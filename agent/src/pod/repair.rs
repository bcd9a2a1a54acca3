//! Repair of what the agent owns in OVSDB for its pods: the port on `br0` (with the ofport the
//! pod's flows use), the port's record (`external_ids`), kernel-datapath egress policing and the
//! ingress QoS row. Anything removed or changed behind the agent's back (`ovs-vsctl del-port`,
//! `ovs-vsctl clear port X qos`, an edited record) is put back from the pod table, which is the
//! agent's desired state; the daemon runs [`Pods::repair_ports_among`] for the ports an OVSDB
//! change touched whenever the monitor reports one (every pod when a row was deleted or the
//! cache reloaded), and [`Pods::repair_ports`] for every pod with the periodic reconcile: a node
//! creating pods makes OVSDB changes all the time, and looking at every pod at each one made
//! the agent's CPU per ADD grow with the pods it already had.
//!
//! It runs under the table lock and looks only at pods in the table: an ADD puts its pod in the
//! table after its port exists, a DEL takes the pod out before it deletes the port, so a repair
//! never resurrects a port a DEL is removing nor races an ADD. A port comes back with
//! `ofport_request` set to the pod's ofport, so its flows match again without a re-flow; when
//! ovs-vswitchd cannot give that number back, the pod is re-flowed with the new one. A pod
//! whose host veth is gone (its netns was deleted without a DEL) is left alone: nothing can be
//! plugged, and the runtime's DEL cleans up.
//!
//! [`Pods::follow_ofports`] keeps the flows on the ports OVS has *now*: an ovs-vswitchd that
//! restarts re-opens every port and numbers it again, reusing the number the row recorded only
//! when nothing took it first (a port added while it was down, or whose number it never wrote
//! back before it died, takes the lowest free one, and the port that had it gets another). The
//! pod table, the warm pool ports and the idle ones are compared with the `ofport` column of the
//! OVSDB cache on every OVSDB change (the ports it touched) and every second (all): pods that moved are re-flowed in one
//! bundle, warm ports that moved are cooled (the maintenance warms them again), idle ones take
//! the new number; pool ports whose row is gone or whose device ovs-vswitchd cannot open leave
//! the pool.
//! A pod whose port ovs-vswitchd cannot open because its veth is gone loses its rows at once
//! (its number is free for the next port, whose rows must not collide with them) and leaves the
//! table; its lease, row and records wait for the runtime's DEL as before.

use std::collections::{BTreeMap, HashMap, HashSet};

use ovs::ovsdb::PortSpec;

use super::limits::ingress_qos;
use super::pool::{self, Followed};
use super::record::{keys, MeterRecord, PortRecord};
use super::{lock, Pod, Pods, BRIDGE};
use crate::bridge::flowstore::{Change, Owner};
use crate::bridge::seams::{NodeIo, PodLinks, PortDb};
use crate::features::network_policy::LocalPodRef;

impl Pod {
    /// The port record the pod's port should carry (`meter`: the recorded meter config).
    pub(super) fn record(&self, meter: Option<MeterRecord>) -> PortRecord {
        PortRecord {
            attachment: self.attachment.clone(),
            ip: self.ip,
            ip6: self.ip6,
            namespace: self.namespace.clone(),
            pod: self.name.clone(),
            netns: self.netns.clone(),
            vnid: Some(self.vnid),
            hostports: self.hostports.clone(),
            meter,
            bandwidth: self.limits,
            hardened: self.hardened,
        }
    }
}

impl<Io: NodeIo> Pods<Io> {
    /// Puts back every pod port, record and QoS row that differs from the pod table; logs each
    /// repair at WARN with what drifted. Returns how many pods needed one. Failures are logged
    /// and retried at the next call.
    pub async fn repair_ports(&self) -> usize {
        self.repair_ports_among(None).await
    }

    /// [`Self::repair_ports`] for the pods whose port is in `only` (the Interfaces and Ports
    /// changed since the last look, see [`crate::bridge::seams::PortDb::changes_since`]), or
    /// every pod (`None`).
    pub async fn repair_ports_among(&self, only: Option<&HashSet<String>>) -> usize {
        let mut table = self.table.lock().await;
        if table.is_empty() || only.is_some_and(HashSet::is_empty) {
            return 0;
        }
        let ifaces: HashMap<String, ovs::ovsdb::InterfaceInfo> = match only {
            None => self.db.interfaces_with_external_id(keys::SANDBOX),
            Some(names) => names
                .iter()
                .filter_map(|n| self.db.interface(n))
                .filter(|i| i.external_ids.contains_key(keys::SANDBOX))
                .collect(),
        }
        .into_iter()
        .map(|i| (i.name.clone(), i))
        .collect();
        let mut repaired = 0;
        let keys: Vec<_> = table
            .iter()
            .filter(|(_, pod)| only.is_none_or(|names| names.contains(&pod.host_veth)))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let Some(pod) = table.get(&key).cloned() else {
                continue;
            };
            match self.repair_pod(&pod, ifaces.get(&pod.host_veth)).await {
                Ok(None) => {}
                Ok(Some(fixed)) => {
                    repaired += 1;
                    table.insert(key, fixed);
                    self.policy_changed();
                }
                Err(e) => {
                    tracing::warn!(sandbox = %pod.attachment.container_id, pod = %pod.name, namespace = %pod.namespace, port = %pod.host_veth, error = %e, "repairing the pod's port failed; retrying at the next change")
                }
            }
        }
        repaired
    }

    /// Re-flows every pod whose port OVS numbers differently now, in one bundle (with its
    /// NetworkPolicy rows, which carry the number too), unplugs pods whose veth is gone, and
    /// brings the pool in line (see the module docs). Returns how many pods were re-flowed or
    /// unplugged. A failed bundle is logged and retried at the next call.
    pub async fn follow_ofports(&self) -> usize {
        self.follow_ofports_among(None).await
    }

    /// [`Self::follow_ofports`] for the ports in `only` (the Interfaces and Ports changed since
    /// the last look; none of them was deleted), or every port (`None`).
    pub async fn follow_ofports_among(&self, only: Option<&HashSet<String>>) -> usize {
        if only.is_some_and(HashSet::is_empty) {
            return 0;
        }
        // The `ofport` of the named Interfaces whose `external_ids` hold `key`.
        let ofports_of = |names: &HashSet<String>, key: &str| -> HashMap<String, Option<i64>> {
            names
                .iter()
                .filter_map(|n| self.db.interface(n))
                .filter(|i| i.external_ids.contains_key(key))
                .map(|i| (i.name, i.ofport))
                .collect()
        };
        // The pool first, from a snapshot read just before (nothing awaited in between): a
        // refill puts its ports in the pool only once their rows are in the cache. A partial
        // snapshot does not know of the other rows: none is taken for gone.
        let pool_now = match only {
            None => self.db.ofports_with_external_id(pool::POOL_KEY),
            Some(names) => ofports_of(names, pool::POOL_KEY),
        };
        let Followed {
            warm_out,
            broken_idle,
            idle_renumbered,
        } = self
            .pool
            .follow(&pool_now, only.is_none() && self.db.cache_live());
        if idle_renumbered + warm_out > 0 {
            tracing::warn!(
                idle = idle_renumbered,
                warm = warm_out,
                "OVS numbered pool ports anew or cannot open them (ovs-vswitchd restarted?); idle ones take the new number, warm ones are cooled"
            );
        }
        self.drop_broken_pool_ports(broken_idle).await;

        let mut table = self.table.lock().await;
        let now = match only {
            None => self.db.ofports_with_external_id(keys::SANDBOX),
            Some(names) => ofports_of(names, keys::SANDBOX),
        };
        let mut change = Change::new();
        let mut moved: Vec<(u32, Pod)> = Vec::new();
        let mut unplugged: Vec<Pod> = Vec::new();
        for pod in table.values() {
            let Some(&Some(n)) = now.get(&pod.host_veth) else {
                continue;
            };
            match u32::try_from(n) {
                Ok(n) if n > 0 && n != pod.ofport => {
                    let mut p = pod.clone();
                    p.ofport = n;
                    change = change.set_pod(p.host_veth.clone(), p.flows(), self.row_vnid(p.vnid));
                    if let Some(policy) = self.policy.get() {
                        let rows = policy.rows(&LocalPodRef {
                            port: p.host_veth.clone(),
                            ofport: n,
                            namespace: p.namespace.clone(),
                            name: p.name.clone(),
                            ip: p.ip,
                            ip6: p.ip6,
                        });
                        let target = Owner::PolicyTarget(p.host_veth.clone());
                        change = if rows.is_empty() {
                            change.remove(target)
                        } else {
                            change.set(target, rows)
                        };
                    }
                    moved.push((pod.ofport, p));
                }
                // ovs-vswitchd cannot open the port: with its veth gone (the pod's netns was
                // deleted without a DEL), its number is free and may go to another port, which
                // the pod's rows must not follow. Its rows go now; the rest is the DEL's.
                Err(_)
                    if self
                        .links
                        .link_exists(&pod.host_veth)
                        .await
                        .is_ok_and(|l| l.is_none()) =>
                {
                    change = change.remove(Owner::Port(pod.host_veth.clone()));
                    unplugged.push(pod.clone());
                }
                _ => {}
            }
        }
        if let Err(e) = self.store.apply(change).await {
            tracing::warn!(error = %e, pods = moved.len() + unplugged.len(), "re-flowing pods whose port OVS numbered anew failed; retrying");
            return 0;
        }
        for (was, p) in &moved {
            tracing::warn!(
                sandbox = %p.attachment.container_id, pod = %p.name, namespace = %p.namespace,
                port = %p.host_veth, from = was, to = p.ofport,
                "OVS numbered the pod's port anew (ovs-vswitchd restarted?); re-flowed"
            );
            crate::telemetry::metrics::metrics().repaired("ofport");
        }
        for p in &unplugged {
            tracing::warn!(
                sandbox = %p.attachment.container_id, pod = %p.name, namespace = %p.namespace,
                port = %p.host_veth,
                "the pod's veth is gone (its network namespace was deleted without a DEL); its flows are removed, the runtime's DEL removes the rest"
            );
            table.remove(&p.attachment);
        }
        let n = moved.len() + unplugged.len();
        for (_, p) in moved {
            table.insert(p.attachment.clone(), p);
        }
        if n > 0 {
            self.policy_changed();
        }
        n
    }

    /// Deletes the idle pool ports [`pool::PortPool::follow`] took out (row gone, or a device
    /// ovs-vswitchd cannot open): their pairs now, their rows with the next batch of dead ones.
    /// The pool is refilled by its maintenance.
    async fn drop_broken_pool_ports(&self, idle: Vec<pool::PooledPort>) {
        if idle.is_empty() {
            return;
        }
        tracing::warn!(
            ports = idle.len(),
            "idle pool ports whose row is gone or whose device ovs-vswitchd cannot open; deleting them"
        );
        for p in idle {
            self.discard_pool_port(p.host, "a broken pool port").await;
        }
    }

    /// Repairs one pod; `Some(pod)` (possibly with a new ofport) when something was repaired.
    async fn repair_pod(
        &self,
        pod: &Pod,
        iface: Option<&ovs::ovsdb::InterfaceInfo>,
    ) -> Result<Option<Pod>, String> {
        let meter = pod.egress_meter.map(|id| MeterRecord {
            id,
            rate_burst: lock(&self.meters)
                .get(&id)
                .copied()
                .flatten()
                .map(|m| (m.rate, m.burst)),
        });
        let want = pod.record(meter).to_external_ids();
        let mut fixed = pod.clone();
        let mut drift = Vec::new();
        match iface {
            None => {
                if self
                    .links
                    .link_exists(&pod.host_veth)
                    .await
                    .map_err(|e| e.to_string())?
                    .is_none()
                {
                    return Ok(None);
                }
                let mut spec = PortSpec::new(pod.host_veth.clone(), "");
                spec.external_ids = want;
                spec.ofport_request = u16::try_from(pod.ofport).ok();
                let ofport = self
                    .db
                    .add_port(BRIDGE, &spec)
                    .await
                    .map_err(|e| format!("re-adding port {}: {e}", pod.host_veth))?;
                drift.push(format!(
                    "port {} was removed from {BRIDGE}; re-added",
                    pod.host_veth
                ));
                crate::telemetry::metrics::metrics().repaired("port");
                if let (None, Some(p)) = (pod.egress_meter, pod.limits.policing()) {
                    self.db
                        .set_interface_policing(&pod.host_veth, p.rate_kbps, p.burst_kb)
                        .await
                        .map_err(|e| format!("egress policing: {e}"))?;
                }
                if ofport != pod.ofport {
                    fixed.ofport = ofport;
                    self.store
                        .apply(Change::new().set_pod(
                            pod.host_veth.clone(),
                            fixed.flows(),
                            self.row_vnid(fixed.vnid),
                        ))
                        .await
                        .map_err(|e| format!("re-flowing with ofport {ofport}: {e}"))?;
                    drift.push(format!("ofport {} -> {ofport}; re-flowed", pod.ofport));
                }
            }
            Some(i) => {
                let changed: BTreeMap<String, String> = want
                    .into_iter()
                    .filter(|(k, v)| i.external_ids.get(k) != Some(v))
                    .collect();
                if !changed.is_empty() {
                    self.db
                        .set_interface_external_ids(&pod.host_veth, &changed)
                        .await
                        .map_err(|e| format!("restoring the port record: {e}"))?;
                    crate::telemetry::metrics::metrics().repaired("port_record");
                    drift.push(format!(
                        "record keys {} changed; restored",
                        changed.keys().cloned().collect::<Vec<_>>().join(",")
                    ));
                }
            }
        }
        if let Some(spec) = ingress_qos(&pod.attachment, &pod.limits) {
            let a = &pod.attachment;
            let rows: Vec<_> = self
                .db
                .find_qos_by_external_id(keys::SANDBOX, &a.container_id)
                .into_iter()
                .filter(|q| q.external_ids.get(keys::IFNAME) == Some(&a.ifname))
                .collect();
            let attached = rows.iter().any(|q| {
                q.ports.contains(&pod.host_veth)
                    && q.qos_type == spec.qos_type
                    && q.other_config == spec.other_config
            });
            if !attached {
                for q in &rows {
                    self.db
                        .delete_qos(&q.uuid)
                        .await
                        .map_err(|e| format!("deleting a stale QoS row: {e}"))?;
                }
                self.db
                    .set_port_qos(&pod.host_veth, &spec)
                    .await
                    .map_err(|e| format!("re-creating the ingress QoS: {e}"))?;
                drift.push("ingress QoS was removed or changed; re-created".to_string());
                crate::telemetry::metrics::metrics().repaired("qos");
            }
        }
        if drift.is_empty() {
            return Ok(None);
        }
        tracing::warn!(
            sandbox = %pod.attachment.container_id, pod = %pod.name, namespace = %pod.namespace,
            port = %pod.host_veth, drift = %drift.join("; "),
            "pod's OVS state drifted behind the agent's back; repaired"
        );
        Ok(Some(fixed))
    }
}
