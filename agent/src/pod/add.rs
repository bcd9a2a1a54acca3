//! ADD as undoable steps (see the module docs of [`super`]): each step pushes its undo before
//! it runs, so a step that fails half-way is undone too (every undo is idempotent), and a failed
//! ADD runs the undos in reverse order.

use std::path::Path;

use flows::{AttachmentId, Vnid};
use ovs::flow::MacAddr;
use ovs::ovsdb::PortSpec;
use tokio::time::Instant;

use super::error::PodError;
use super::record::{Hardening, MeterRecord, PortRecord};
use super::{lock, pool, Attachment, Pod, Pods, Wired, BRIDGE};
use crate::bridge::flowstore::{Change, Owner};
use crate::bridge::seams::{FlowSwitch, NodeIo, PodLinks, PortDb};
use crate::features::bandwidth::Bandwidth;
use crate::features::hostports;
use crate::features::network_policy::LocalPodRef;
use crate::host::netlink::{self, PodLinkSpec};

/// Undo steps of a partly done ADD, run in reverse.
#[derive(Debug)]
pub(super) enum Undo {
    Lease,
    Veth(String),
    Port(String),
    /// A reserved meter id (the meter may or may not exist yet).
    Meter(u32),
    Bandwidth,
    /// The flows of this port.
    Flows(String),
    HostPorts,
}

impl std::fmt::Display for Undo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Undo::Lease => f.write_str("releasing the lease"),
            Undo::Veth(v) => write!(f, "deleting veth {v}"),
            Undo::Port(p) => write!(f, "deleting port {p}"),
            Undo::Meter(m) => write!(f, "deleting meter {m}"),
            Undo::Bandwidth => f.write_str("removing the bandwidth limits"),
            Undo::Flows(p) => write!(f, "removing the flows of port {p}"),
            Undo::HostPorts => f.write_str("removing the host port rules"),
        }
    }
}

/// How long an ADD waits for ovs-vswitchd to number its port before it asks whether the
/// switch answers at all.
const SWITCH_GRACE: std::time::Duration = std::time::Duration::from_millis(700);

/// How long that question waits for br0's answer. A switch reconfiguring a bridge of 1000
/// ports for the link events of a burst of new veths answers OpenFlow only every second or two
/// (the `scale` benchmark: 0.5 s here turned such ADDs into "try again later" at 900 pods), so
/// only a longer silence is a switch that does not answer.
const SWITCH_PROBE: std::time::Duration = std::time::Duration::from_secs(2);

/// Where an ADD's time went, for the "pod wired" line, and its deadline.
struct StepClock {
    started: Instant,
    deadline: Instant,
    /// Each step and the milliseconds since the start when it began.
    marks: std::sync::Mutex<Vec<(&'static str, f64)>>,
}

impl StepClock {
    fn started(deadline: Instant) -> StepClock {
        StepClock {
            started: Instant::now(),
            deadline,
            marks: std::sync::Mutex::default(),
        }
    }

    /// Notes that `step` begins; refuses it once the deadline passed.
    fn check(&self, step: &'static str) -> Result<(), PodError> {
        lock(&self.marks).push((step, self.started.elapsed().as_secs_f64() * 1e3));
        if Instant::now() >= self.deadline {
            return Err(PodError::Deadline { step });
        }
        Ok(())
    }

    fn shown(&self) -> String {
        let marks: Vec<String> = lock(&self.marks)
            .iter()
            .map(|(s, ms)| format!("{s}:{ms:.1}"))
            .collect();
        marks.join(",")
    }
}

/// What steps 2 and 3 made: the pod's interface and port, its record and host ports.
struct Plugged {
    host_veth: String,
    link: netlink::PodLink,
    ofport: u32,
    record: PortRecord,
    mappings: Vec<hostports::PortMapping>,
}

/// Step 1's addresses: IPv4 (none on an IPv6-only cluster), IPv6 when allocated with it or
/// brought by the warm port, and that warm port.
type Taken = (
    Option<std::net::Ipv4Addr>,
    Option<std::net::Ipv6Addr>,
    Option<pool::WarmPort>,
);

/// A pod's addresses: IPv4 (none on an IPv6-only cluster) and IPv6 (none on an IPv4 cluster).
type Addrs = (Option<std::net::Ipv4Addr>, Option<std::net::Ipv6Addr>);

/// What the ADD established before its steps ran.
struct Plan<'a> {
    at: &'a Attachment,
    netns: &'a Path,
    vnid: Vnid,
    requested: Option<std::net::Ipv4Addr>,
    requested6: Option<std::net::Ipv6Addr>,
    bandwidth: Bandwidth,
}

impl<Io: NodeIo> Pods<Io> {
    /// CNI ADD: wires the attachment, or undoes everything and says why.
    pub async fn add(&self, at: &Attachment) -> Result<Wired, PodError> {
        let key = at.id.clone();
        if let Some(p) = self.table.lock().await.get(&key) {
            return Err(PodError::AlreadyAttached {
                attachment: key,
                ip: p.ip,
                ip6: p.ip6,
            });
        }
        let netns = at.netns.as_deref().ok_or(PodError::NoNetns)?;
        let vnid = self.vnid_of(&at.namespace).await?;
        let (requested, requested6) = self.net.requested(at)?;

        let m = crate::telemetry::metrics::metrics();
        // Bandwidth limits: checked first (pure), so a bad value fails with nothing reserved.
        let bandwidth = self
            .bandwidth_of(at)
            .inspect_err(|_| m.bandwidth_errors.inc())?;

        // Host ports: reserved before anything else, so a taken one fails the ADD with nothing
        // done.
        hostports::parse(at.runtime_config.as_ref())
            .and_then(|mappings| {
                self.hostports.reserve(hostports::PodPorts {
                    namespace: at.namespace.clone(),
                    pod: at.pod.clone(),
                    sandbox: at.id.container_id.clone(),
                    ifname: at.id.ifname.clone(),
                    ip: None,
                    ip6: None,
                    mappings,
                })
            })
            .inspect_err(|_| m.hostport_errors.inc())?;

        let plan = Plan {
            at,
            netns,
            vnid,
            requested,
            requested6,
            bandwidth,
        };
        let mut done = Vec::new();
        self.lock_in_flight().insert(key.clone());
        let result = self.add_steps(&plan, &mut done).await;
        self.lock_in_flight().remove(&key);
        match result {
            Ok(r) => Ok(r),
            Err(e) => {
                match &e {
                    PodError::Iptables { .. } => m.hostport_errors.inc(),
                    PodError::NoFreeMeter { .. } | PodError::Bandwidth { .. } => {
                        m.bandwidth_errors.inc()
                    }
                    _ => {}
                }
                tracing::warn!(
                    sandbox = %key.container_id, ifname = %key.ifname, namespace = %at.namespace,
                    pod = %at.pod, error = %e, details = %e.details(), steps = done.len(),
                    "ADD failed; undoing"
                );
                self.undo(&key, done).await;
                self.hostports.release(&key.container_id, &key.ifname);
                Err(e)
            }
        }
    }

    /// ADD's steps, in order (see the module docs of [`super`]): each pushes its undo before
    /// it runs, and none starts after the request's deadline.
    async fn add_steps(&self, plan: &Plan<'_>, done: &mut Vec<Undo>) -> Result<Wired, PodError> {
        let a = &plan.at.id;
        let clock = StepClock::started(plan.at.deadline);
        // 1. Lease: a warm port's address, or a new lease (and a plain pool port, if one is
        // ready); on a dual-stack node an IPv6 lease too (after a warm port is the pod's, so
        // a failure undoes the port with the ADD).
        let (ip, ip6, warm) = self.take_address(plan, done).await?;
        let pooled = match &warm {
            Some(w) => {
                self.hand_over_warm_port(a, w, done).await?;
                Some(w.port.clone())
            }
            None if plan.at.plain_veth_for.is_some() => None,
            None => self.pool.take(self.net.port_pool_size),
        };
        let ip6 = match ip6 {
            Some(ip6) => Some(ip6),
            None => self.take_ipv6_address(plan, done).await?,
        };
        clock.check("creating the veth")?;
        // 2 and 3. The veth and the OVS port, with the pod's record.
        let plugged = self
            .plug(
                plan,
                (ip, ip6),
                warm.is_some(),
                pooled.as_ref(),
                done,
                &clock,
            )
            .await?;
        clock.check("applying bandwidth limits")?;
        // 3b. Bandwidth limits.
        let egress_meter = plugged.record.meter.map(|m| m.id);
        if !plan.bandwidth.is_empty() {
            done.push(Undo::Bandwidth);
            self.apply_bandwidth(a, &plugged.host_veth, &plan.bandwidth, egress_meter)
                .await?;
        }
        clock.check("installing the pod's flows")?;
        // 4. Flows, and the pod in the table.
        let pod = self
            .install_pod(plan, (ip, ip6), &plugged, egress_meter, warm.as_ref(), done)
            .await?;
        // 5. Host ports: the pod's nat chain (one sync of all host port rules).
        if !plugged.mappings.is_empty() {
            clock.check("installing the host port rules")?;
            done.push(Undo::HostPorts);
            self.hostports.set_ip(&a.container_id, &a.ifname, ip, ip6);
            self.hostports
                .sync()
                .await
                .map_err(PodError::iptables(format!(
                    "installing the host port rules of {a}"
                )))?;
        }
        tracing::info!(
            sandbox = %a.container_id, ifname = %a.ifname, namespace = %pod.namespace,
            pod = %pod.name, ip = %ip.map_or_else(|| "none".into(), |i| i.to_string()), ip6 = %ip6.map_or_else(|| "none".into(), |i| i.to_string()), ofport = pod.ofport, vnid = %pod.vnid,
            pooled_port = pooled.is_some(), warm_port = warm.is_some(),
            ms_before = %clock.shown(), ms = %format_args!("{:.1}", clock.started.elapsed().as_secs_f64() * 1e3), "pod wired"
        );
        Ok(Wired {
            pod,
            host_mac: plugged.link.host_mac,
        })
    }

    /// Step 1: a warm port of the pod's VNID brings its own address (and its flows are on the
    /// bridge already, see `pool`); else a new lease. Requested addresses and bandwidth limits
    /// take the plain way; so does a pod a network policy selects (it needs its own rows before
    /// its first packet, and the plain way's flows go in with them), and a pod whose network
    /// chains a plugin that needs a veth or whose chain the agent cannot see (`cni::chain`).
    async fn take_address(&self, plan: &Plan<'_>, done: &mut Vec<Undo>) -> Result<Taken, PodError> {
        let at = plan.at;
        let eligible = plan.requested.is_none()
            && plan.requested6.is_none()
            && plan.bandwidth.is_empty()
            && at.plain_veth_for.is_none()
            && self
                .policy
                .get()
                .is_none_or(|p| !p.selects(&at.namespace, &at.pod));
        if let Some(w) = eligible
            .then(|| {
                self.pool
                    .take_warm(plan.vnid, self.warm_target(), pool::WARM_CHUNK)
            })
            .flatten()
        {
            return Ok((w.ip, w.ip6, Some(w)));
        }
        let (cid, ifn) = (at.id.container_id.clone(), at.id.ifname.clone());
        let requested = (plan.requested, plan.requested6);
        // A dual-stack pod's two leases under one lock and one read of the directory.
        let allocated = match (self.net.range(), self.net.range6()) {
            (Some(range), Some(range6)) => {
                done.push(Undo::Lease);
                self.ipam(move |store| {
                    store
                        .allocate_dual((&range, &range6), &cid, &ifn, requested)
                        .map(|(l4, l6)| (Some(l4.ip), Some(l6.ip)))
                })
                .await
            }
            (Some(range), None) => self
                .ipam(move |store| store.allocate(&range, &cid, &ifn, requested.0))
                .await
                .map(|l| (Some(l.ip), None)),
            // An IPv6-only cluster: the IPv6 address is taken in the next step.
            (None, _) => Ok((None, None)),
        };
        match allocated {
            Ok((ip, ip6)) => {
                if !done.iter().any(|u| matches!(u, Undo::Lease)) {
                    done.push(Undo::Lease);
                }
                Ok((ip, ip6, None))
            }
            // Every address is taken, some by warm ports: take one of any VNID (after letting
            // go of an IPv4 lease taken before the IPv6 range said no).
            Err(PodError::Ipam(e @ crate::host::ipam::IpamError::Exhausted { .. })) => {
                let w = eligible.then(|| self.pool.take_any_warm()).flatten();
                if w.is_some() && self.net.range6().is_some() && self.net.range().is_some() {
                    self.release_lease(&at.id).await?;
                }
                match w {
                    Some(w) => Ok((w.ip, w.ip6, Some(w))),
                    None => Err(PodError::Ipam(e)),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Step 1 on a dual-stack node: the attachment's IPv6 lease, beside its IPv4 one (a warm
    /// port from before the node had IPv6 holds IPv4 only). Releasing the lease releases both.
    async fn take_ipv6_address(
        &self,
        plan: &Plan<'_>,
        done: &mut Vec<Undo>,
    ) -> Result<Option<std::net::Ipv6Addr>, PodError> {
        let Some(range) = self.net.range6() else {
            return Ok(None);
        };
        let (cid, ifn, req) = (
            plan.at.id.container_id.clone(),
            plan.at.id.ifname.clone(),
            plan.requested6,
        );
        let ipv6_only = self.net.range().is_none();
        if !done.iter().any(|u| matches!(u, Undo::Lease)) {
            done.push(Undo::Lease);
        }
        let lease = self.ipam(move |store| {
            if ipv6_only {
                // Pods' MACs come from their addresses' last 32 bits.
                store.allocate_ipv6_only(&range, &cid, &ifn, req)
            } else {
                store.allocate(&range, &cid, &ifn, req)
            }
        });
        Ok(Some(lease.await?.ip))
    }

    /// Steps 2 and 3: the pod's interface (on a pooled pair's parked peer when one was taken,
    /// else a new veth) and its OVS port with the pod's record. A pooled port exists already:
    /// its record is written while the pod interface is made (two round trips at once, to the
    /// kernel and to ovsdb-server, whose transactions slow as the database grows: 0 ms at 100
    /// pods, 2 ms at 1000). Either failing undoes both (the pooled pair's Veth and Port undos
    /// are in `done` already), and a crash in between leaves a pod record on a free pool peer,
    /// which a restart removes like a pod whose interface is gone.
    async fn plug(
        &self,
        plan: &Plan<'_>,
        (ip, ip6): Addrs,
        warm: bool,
        pooled: Option<&pool::PooledPort>,
        done: &mut Vec<Undo>,
        clock: &StepClock,
    ) -> Result<Plugged, PodError> {
        let a = &plan.at.id;
        let host_veth = pooled.map_or_else(
            || netlink::host_veth_name(&a.container_id, &a.ifname),
            |p| p.host.clone(),
        );
        let spec = PodLinkSpec {
            netns: plan.netns.to_path_buf(),
            ifname: a.ifname.clone(),
            host_ifname: host_veth.clone(),
            mac: MacAddr::from_pod_addrs(ip, ip6)
                .ok_or(PodError::NoAddress)?
                .0,
            // The default route is always added by create_pod_link.
            ipv4: ip.and_then(|a| self.net.ipv4_spec(a)),
            mtu: self.net.mtu,
            tx_checksum_off: self.net.tx_checksum_off,
            pool_peer: pooled.map(|p| p.peer.clone()),
            ipv6: ip6.and_then(|a| self.net.ipv6_spec(a)),
        };
        if !warm {
            done.push(Undo::Veth(host_veth.clone()));
            if pooled.is_some() {
                // A taken pool port is the ADD's own from now on: undone with it.
                done.push(Undo::Port(host_veth.clone()));
            }
        }
        let record = self.port_record(plan, (ip, ip6), done)?;
        let mappings = self.hostports.mappings(&a.container_id, &a.ifname);
        let (link, ofport) = match pooled {
            // The port exists: its record replaces the pool marker (ovs-vswitchd does not read
            // external ids, so nothing waits for it).
            Some(p) => {
                let ids = record.to_external_ids();
                let (link, recorded) = tokio::join!(
                    self.links.create_pod_link(&spec),
                    self.db.replace_interface_external_ids(&host_veth, &ids)
                );
                let link = link?;
                recorded.map_err(PodError::ovsdb(format!(
                    "recording the pod on port {host_veth}"
                )))?;
                clock.check("adding the OVS port")?;
                // The number OVS gives the port now: a restarted ovs-vswitchd may have numbered
                // it anew since the pool recorded it.
                let now = self
                    .db
                    .ofport_now(&host_veth)
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| *n > 0);
                (link, now.unwrap_or(p.ofport))
            }
            None => {
                let link = self.links.create_pod_link(&spec).await?;
                clock.check("adding the OVS port")?;
                let mut port = PortSpec::new(host_veth.clone(), "");
                port.external_ids = record.to_external_ids();
                done.push(Undo::Port(host_veth.clone()));
                (link, self.add_port_while_switch_answers(&port).await?)
            }
        };
        Ok(Plugged {
            host_veth,
            link,
            ofport,
            record,
            mappings,
        })
    }

    /// The pod's port record, with its egress meter reserved when its egress is limited on
    /// the userspace datapath.
    fn port_record(
        &self,
        plan: &Plan<'_>,
        (ip, ip6): Addrs,
        done: &mut Vec<Undo>,
    ) -> Result<PortRecord, PodError> {
        let (at, a) = (plan.at, &plan.at.id);
        let meter = if self.net.egress_meters && plan.bandwidth.policing().is_some() {
            let m = self.reserve_meter(a)?;
            done.push(Undo::Meter(m));
            Some(MeterRecord {
                id: m,
                rate_burst: plan.bandwidth.meter().map(|p| {
                    let clamp = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
                    (clamp(p.rate_kbps), clamp(p.burst_kb))
                }),
            })
        } else {
            None
        };
        let mappings = self.hostports.mappings(&a.container_id, &a.ifname);
        Ok(PortRecord {
            attachment: a.clone(),
            ip,
            ip6,
            namespace: at.namespace.clone(),
            pod: at.pod.clone(),
            netns: plan.netns.display().to_string(),
            vnid: Some(plan.vnid),
            hostports: (!mappings.is_empty()).then(|| hostports::to_json(&mappings)),
            meter,
            bandwidth: plan.bandwidth,
            // create_pod_link hardens a new host end; a pool port's was hardened when the pool
            // made it.
            hardened: Hardening::Full,
        })
    }

    /// Adds `port` to br0 and waits for ovs-vswitchd to number it; one that does not answer
    /// OpenFlow either for [`SWITCH_PROBE`] (stopped, or reconfiguring a huge bridge) is "try
    /// again later" within about three seconds, not a wait for the OVSDB timeout.
    async fn add_port_while_switch_answers(&self, port: &PortSpec) -> Result<u32, PodError> {
        let adding = self.db.add_port(BRIDGE, port);
        tokio::select! {
            added = adding => added.map_err(PodError::ovsdb(format!(
                "adding port {} to {BRIDGE}", port.name
            ))),
            waited = self.switch_stops_answering() => Err(PodError::SwitchNotAnswering {
                bridge: BRIDGE.to_string(),
                port: port.name.clone(),
                waited,
            }),
        }
    }

    /// Step 4: the pod's flows (and, in networkpolicy mode, its policy rows in the same
    /// bundle), installed outside the table lock (a bundle can wait for ovs-vswitchd for a
    /// while, and warm ADDs must not queue behind it); the VNID is checked again under the
    /// lock, where the pod enters the table, so a VNID re-flow never misses the pod.
    async fn install_pod(
        &self,
        plan: &Plan<'_>,
        (ip, ip6): Addrs,
        plugged: &Plugged,
        egress_meter: Option<u32>,
        warm: Option<&pool::WarmPort>,
        done: &mut Vec<Undo>,
    ) -> Result<Pod, PodError> {
        let (at, a) = (plan.at, &plan.at.id);
        let (host_veth, ofport) = (&plugged.host_veth, plugged.ofport);
        let mut pod = Pod {
            attachment: a.clone(),
            namespace: at.namespace.clone(),
            name: at.pod.clone(),
            netns: plan.netns.display().to_string(),
            ip,
            ip6,
            host_veth: host_veth.clone(),
            ofport,
            vnid: plan.vnid,
            egress_meter,
            hostports: plugged.record.hostports.clone(),
            limits: plan.bandwidth,
            hardened: Hardening::Full,
        };
        let policy_rows = self.policy.get().map_or_else(Vec::new, |p| {
            p.rows(&LocalPodRef {
                port: host_veth.clone(),
                ofport,
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                ip,
                ip6,
            })
        });
        let install = |pod: &Pod| {
            let change =
                Change::new().set_pod(host_veth.clone(), pod.flows(), self.row_vnid(pod.vnid));
            self.store.apply(if policy_rows.is_empty() {
                change
            } else {
                change.set(Owner::PolicyTarget(host_veth.clone()), policy_rows.clone())
            })
        };
        // A warm port of the pod's VNID has the pod's flows already (unless OVS numbered it
        // anew meanwhile, or it had no IPv6 address and the pod got one).
        if warm.is_none_or(|w| w.vnid != pod.vnid || w.port.ofport != ofport || w.ip6 != ip6) {
            if warm.is_none() {
                done.push(Undo::Flows(host_veth.clone()));
            }
            install(&pod).await.map_err(PodError::openflow(format!(
                "installing the flows of {host_veth}"
            )))?;
        } else if !policy_rows.is_empty() {
            // A policy selected the pod after it took a warm port.
            self.store
                .apply(
                    Change::new().set(Owner::PolicyTarget(host_veth.clone()), policy_rows.clone()),
                )
                .await
                .map_err(PodError::openflow(format!(
                    "installing the network policy rows of {host_veth}"
                )))?;
        }
        {
            let mut table = self.table.lock().await;
            // A VNID change may have arrived since the VNID was read: `sync_vnids` only
            // re-flows pods already in the table, so take the newest VNID here, under the lock.
            if let Some(now) = self.current_vnid(&pod.namespace) {
                if now != pod.vnid {
                    tracing::info!(sandbox = %a.container_id, namespace = %pod.namespace, from = %pod.vnid, to = %now, "namespace VNID changed during ADD");
                    pod.vnid = now;
                    install(&pod).await.map_err(PodError::openflow(format!(
                        "re-installing the flows of {host_veth} with VNID {now}"
                    )))?;
                }
            }
            table.insert(a.clone(), pod.clone());
            if pod.vnid != plan.vnid {
                self.record_vnid(&pod).await;
            }
        }
        self.policy_changed();
        Ok(pod)
    }

    /// The VNID whose table-80 row the pod needs (none in subnet mode: every pod is global).
    /// Resolves once br0 has not answered OpenFlow for [`SWITCH_PROBE`] after
    /// [`SWITCH_GRACE`] (with how long that took); never while it answers. Raced against a
    /// step that waits for ovs-vswitchd.
    async fn switch_stops_answering(&self) -> std::time::Duration {
        let began = Instant::now();
        tokio::time::sleep(SWITCH_GRACE).await;
        let probe = flows::Table::Version.id();
        loop {
            let asked = tokio::time::timeout(
                SWITCH_PROBE,
                self.store
                    .switch()
                    .dump_flows(&ovs::openflow::DumpFilter::table(probe)),
            )
            .await;
            if !matches!(asked, Ok(Ok(_))) {
                return began.elapsed();
            }
            tokio::time::sleep(SWITCH_GRACE).await;
        }
    }

    pub(super) fn row_vnid(&self, vnid: Vnid) -> Vnid {
        if self.net.node.mode.has_vnids() {
            vnid
        } else {
            Vnid::GLOBAL
        }
    }

    pub(super) async fn undo(&self, a: &AttachmentId, done: Vec<Undo>) {
        for step in done.into_iter().rev() {
            let outcome = match &step {
                Undo::HostPorts => self
                    .hostports
                    .remove(&a.container_id, &a.ifname, true)
                    .await
                    .map_err(|e| e.to_string()),
                Undo::Flows(port) => self.remove_flows(a, port).await.map_err(|e| e.to_string()),
                Undo::Bandwidth => self.remove_bandwidth(a).await.map_err(|e| e.to_string()),
                Undo::Meter(m) => self.delete_meter(*m).await.map_err(|e| e.to_string()),
                // Without waiting for ovs-vswitchd: the row is gone on return (a retry may add
                // the port again at once), and a switch that does not answer does not hold the
                // undo up.
                Undo::Port(p) => self
                    .db
                    .delete_ports_nowait(BRIDGE, std::slice::from_ref(p))
                    .await
                    .map_err(|e| e.to_string()),
                Undo::Veth(v) => self
                    .links
                    .delete_host_veth(v)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string()),
                Undo::Lease => self
                    .release_lease(a)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string()),
            };
            if let Err(e) = outcome {
                tracing::error!(sandbox = %a.container_id, ifname = %a.ifname, step = %step, error = %e, "undo step failed");
            }
        }
    }

    /// Removes the flows of pod port `port` (and its VNID's table-80 row if it was the VNID's
    /// last local pod) and forgets attachment `a`, under the table lock (a VNID re-flow never
    /// re-adds them). Deletes by cookie even when the store does not know the port (a DEL after
    /// a restart, a crashed ADD).
    pub(super) async fn remove_flows(&self, a: &AttachmentId, port: &str) -> Result<(), PodError> {
        let mut table = self.table.lock().await;
        self.store
            .apply(Change::new().remove(Owner::Port(port.to_string())))
            .await
            .map_err(PodError::openflow(format!(
                "removing the flows of {a} (port {port})"
            )))?;
        if table.remove(a).is_some() {
            self.policy_changed();
        }
        Ok(())
    }

    /// Records the pod's VNID in its port's `external_ids` (what a restart falls back to when
    /// the NetNamespace is gone). A failure is logged: the flows are already right, and the
    /// record is refreshed on the next change.
    pub(super) async fn record_vnid(&self, pod: &Pod) {
        if let Err(e) = self
            .db
            .set_interface_external_ids(&pod.host_veth, &PortRecord::vnid_ids(pod.vnid))
            .await
        {
            tracing::warn!(port = %pod.host_veth, sandbox = %pod.attachment.container_id, vnid = %pod.vnid, error = %e, "recording the pod's VNID in OVSDB");
        }
    }
}
