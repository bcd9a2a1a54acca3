//! The I/O of pod bandwidth limits (what the limits are is [`crate::features::bandwidth`], pure).
//!
//! Pod egress: on the netdev datapath an OpenFlow meter (the switch polices what the pod
//! sends; the pod's table-20 IP row applies it), on the kernel datapath the Interface's
//! `ingress_policing_rate`. Pod ingress: a `linux-htb` QoS row with one queue on the pod's port
//! (veths are Linux netdevs on both datapaths; OVS 3.1's `egress-policer` works only on DPDK
//! ports). QoS rows carry `sandbox`/`ifname` external ids, so DEL and GC find them without the
//! pod table (QoS is a root table: a row outlives its port unless removed).
//!
//! Meter ids are the attachment's hash into 1..=[`MAX_METERS`], probed upwards past ids other
//! pods hold; the id is recorded on the port. A meter is added before the flow bundle (OVS
//! bundles cannot carry meter mods) and deleted after the flows. A reconcile re-adds meters the
//! switch lost before the flows using them ([`Pods::restore_meters`]); start-up deletes meters
//! no pod records.

use std::collections::{BTreeMap, BTreeSet};

use flows::AttachmentId;
use ovs::openflow::{Meter, MeterModCommand, OfError};
use ovs::ovsdb::QosSpec;

use super::error::PodError;
use super::record::keys;
use super::{lock, Attachment, Pods};
use crate::bridge::seams::{FlowSwitch, NodeIo, PortDb};
use crate::features::bandwidth::{Bandwidth, QosKind};

/// Meter ids pods use: 1..=MAX_METERS (the netdev datapath of Open vSwitch 3.1 offers far more;
/// a node runs a few hundred pods at most).
pub const MAX_METERS: u32 = 65_536;

/// The pod's ingress QoS row (a `linux-htb` QoS tagged with the attachment), if it has an
/// ingress limit.
pub(super) fn ingress_qos(a: &AttachmentId, bw: &Bandwidth) -> Option<QosSpec> {
    let plan = bw.qos(QosKind::LinuxHtb)?;
    Some(QosSpec {
        qos_type: plan.qos_type.to_string(),
        other_config: plan.other_config,
        queues: plan.queues,
        external_ids: BTreeMap::from([
            (keys::SANDBOX.to_string(), a.container_id.clone()),
            (keys::IFNAME.to_string(), a.ifname.clone()),
        ]),
    })
}

impl<Io: NodeIo> Pods<Io> {
    /// Re-adds the meters of the table's pods that the switch lost (an ovs-vswitchd restart), so
    /// the flows using them can be installed. A meter whose configuration is unknown is logged
    /// and its pod's flows will fail to install until the pod is re-added.
    pub async fn restore_meters(&self) -> Result<(), OfError> {
        let table = self.table.lock().await;
        let wanted: Vec<u32> = table.values().filter_map(|p| p.egress_meter).collect();
        if wanted.is_empty() {
            return Ok(());
        }
        let switch = self.store.switch();
        let present: BTreeSet<u32> = switch.dump_meters().await?.iter().map(|m| m.id).collect();
        for m in wanted.into_iter().filter(|m| !present.contains(m)) {
            let config = lock(&self.meters).get(&m).copied().flatten();
            match config {
                Some(meter) => {
                    tracing::warn!(meter = m, "re-adding an egress meter the switch lost");
                    switch.meter_mod(MeterModCommand::Add, &meter).await?;
                    crate::telemetry::metrics::metrics().repaired("meter");
                }
                None => tracing::error!(meter = m, "egress meter lost and its rate is unknown"),
            }
        }
        Ok(())
    }

    /// The pod's limits from its annotations (Kubernetes mode: the cluster state's pod) and
    /// `runtimeConfig.bandwidth`; an error names the bad annotation or key.
    pub(super) fn bandwidth_of(&self, at: &Attachment) -> Result<Bandwidth, PodError> {
        let annotations = self
            .cluster
            .borrow()
            .pod(&at.namespace, &at.pod)
            .map(|p| p.annotations.clone());
        Bandwidth::from_pod(annotations.as_ref(), at.runtime_config.as_ref()).map_err(|e| {
            PodError::Bandwidth {
                namespace: at.namespace.clone(),
                pod: at.pod.clone(),
                reason: e.to_string(),
            }
        })
    }

    /// Pod egress: meter `egress_meter` when set (netdev datapath), else policing on the
    /// port's Interface (kernel datapath). Pod ingress: a `linux-htb` QoS row tagged with the
    /// attachment.
    pub(super) async fn apply_bandwidth(
        &self,
        a: &AttachmentId,
        host_veth: &str,
        bw: &Bandwidth,
        egress_meter: Option<u32>,
    ) -> Result<(), PodError> {
        self.apply_bandwidth_steps(a, host_veth, bw, egress_meter)
            .await
            .inspect_err(|_| crate::telemetry::metrics::metrics().bandwidth_errors.inc())
    }

    async fn apply_bandwidth_steps(
        &self,
        a: &AttachmentId,
        host_veth: &str,
        bw: &Bandwidth,
        egress_meter: Option<u32>,
    ) -> Result<(), PodError> {
        if let (Some(p), Some(m)) = (bw.meter(), egress_meter) {
            self.install_meter(m, p.rate_kbps, p.burst_kb)
                .await
                .map_err(PodError::openflow(format!(
                    "installing egress meter {m} of port {host_veth}"
                )))?;
        } else if let Some(p) = bw.policing() {
            self.db
                .set_interface_policing(host_veth, p.rate_kbps, p.burst_kb)
                .await
                .map_err(PodError::ovsdb(format!(
                    "setting egress policing on port {host_veth}"
                )))?;
        }
        if let Some(spec) = ingress_qos(a, bw) {
            self.db
                .set_port_qos(host_veth, &spec)
                .await
                .map_err(PodError::ovsdb(format!(
                    "setting ingress QoS on port {host_veth}"
                )))?;
        }
        tracing::info!(sandbox = %a.container_id, ifname = %a.ifname, ingress = %crate::features::bandwidth::shown(bw.ingress), egress = %crate::features::bandwidth::shown(bw.egress), "bandwidth limits applied");
        Ok(())
    }

    /// A meter id for the attachment: its hash into 1..=MAX_METERS, probing upwards past ids
    /// other pods hold. Reserved until [`Pods::remove_bandwidth`] deletes the meter.
    pub(super) fn reserve_meter(&self, a: &AttachmentId) -> Result<u32, PodError> {
        let mut used = lock(&self.meters);
        let start = (a.hash() % u64::from(MAX_METERS)) as u32;
        (0..MAX_METERS)
            .map(|i| (start + i) % MAX_METERS + 1)
            .find(|m| !used.contains_key(m))
            .inspect(|m| {
                used.insert(*m, None);
            })
            .ok_or_else(|| PodError::NoFreeMeter {
                attachment: a.clone(),
                ids: MAX_METERS,
            })
    }

    /// Adds meter `m` (or replaces a stray one with the same id left by a crash).
    async fn install_meter(&self, m: u32, rate_kbps: u64, burst_kb: u64) -> Result<(), OfError> {
        let clamp = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        let meter = Meter::new(m, clamp(rate_kbps).max(1), clamp(burst_kb)).map_err(|e| {
            OfError::Encode {
                index: 0,
                what: format!("meter {m}"),
                source: e.into(),
            }
        })?;
        lock(&self.meters).insert(m, Some(meter));
        let switch = self.store.switch();
        match switch.meter_mod(MeterModCommand::Add, &meter).await {
            Err(e)
                if e.switch_error().and_then(|s| s.code_name()) == Some("OFPMMFC_METER_EXISTS") =>
            {
                switch.meter_mod(MeterModCommand::Modify, &meter).await
            }
            r => r,
        }
    }

    /// Deletes meter `m` (idempotent) and frees its id.
    pub(super) async fn delete_meter(&self, m: u32) -> Result<(), PodError> {
        let meter = Meter::id_only(m);
        self.store
            .switch()
            .meter_mod(MeterModCommand::Delete, &meter)
            .await
            .map_err(PodError::openflow(format!("deleting egress meter {m}")))?;
        lock(&self.meters).remove(&m);
        Ok(())
    }

    /// Start-up (netdev), right after the node serves (it waits for ovs-vswitchd): deletes
    /// meters no pod of the table holds (a crashed ADD, a pod whose port vanished while the
    /// agent was down).
    pub async fn remove_stray_meters(&self) -> Result<(), PodError> {
        if !self.net.egress_meters {
            return Ok(());
        }
        let existing = self
            .store
            .switch()
            .dump_meters()
            .await
            .map_err(PodError::openflow("dumping meters"))?;
        // The audit log's meters are not the pods'.
        for m in existing
            .into_iter()
            .filter(|m| !flows::audit::is_audit_meter(m.id))
        {
            let known = lock(&self.meters)
                .get_mut(&m.id)
                .map(|config| *config = config.or(Some(m)))
                .is_some();
            if !known {
                tracing::info!(meter = m.id, "deleting a stray egress meter");
                self.delete_meter(m.id).await?;
            }
        }
        Ok(())
    }

    /// Deletes the egress meter recorded on the attachment's port, and the QoS rows (and
    /// queues) tagged with the attachment.
    pub(super) async fn remove_bandwidth(&self, a: &AttachmentId) -> Result<(), PodError> {
        let meter = self
            .db
            .find_interfaces_by_external_id(keys::SANDBOX, &a.container_id)
            .into_iter()
            .filter(|i| i.external_ids.get(keys::IFNAME) == Some(&a.ifname))
            .find_map(|i| {
                i.external_ids
                    .get(keys::METER)
                    .and_then(|m| m.parse::<u32>().ok())
            });
        if let Some(m) = meter {
            self.delete_meter(m).await?;
        }
        for q in self
            .db
            .find_qos_by_external_id(keys::SANDBOX, &a.container_id)
        {
            if q.external_ids.get(keys::IFNAME) != Some(&a.ifname) {
                continue;
            }
            self.db
                .delete_qos(&q.uuid)
                .await
                .map_err(PodError::ovsdb(format!("deleting QoS {} of {a}", q.uuid)))?;
        }
        Ok(())
    }

    /// GC: deletes QoS rows of attachments that are neither in the table, in `keep`, nor being
    /// added (rows a crashed ADD or an agent restart left behind).
    pub(super) async fn remove_orphan_qos(
        &self,
        keep: &BTreeSet<AttachmentId>,
    ) -> Result<(), PodError> {
        let table = self.table.lock().await;
        let orphans: Vec<AttachmentId> = self
            .db
            .qos_external_ids()
            .into_iter()
            .filter_map(|ext| {
                Some(AttachmentId::new(
                    ext.get(keys::SANDBOX)?.clone(),
                    ext.get(keys::IFNAME)?.clone(),
                ))
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .filter(|k| {
                !table.contains_key(k) && !keep.contains(k) && !self.lock_in_flight().contains(k)
            })
            .collect();
        drop(table);
        for a in orphans {
            tracing::info!(sandbox = %a.container_id, ifname = %a.ifname, "removing orphan QoS");
            self.remove_bandwidth(&a).await?;
        }
        Ok(())
    }
}
