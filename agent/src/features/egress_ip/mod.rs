//! Egress IPs: a namespace's traffic leaving the cluster leaves with its egress IP as source, as
//! openshift-sdn's multitenant plugin did it (its `EgressIPTracker` and `egressIPWatcher`).
//!
//! The cluster state says who wants what: `NetNamespace.egressIPs` (the IPs a namespace's
//! external traffic must use) and `HostSubnet.egressIPs` (the IPs a node hosts; in Kubernetes
//! mode the controller fills them from `HostSubnet.egressCIDRs`). [`plan`] (pure) decides, with
//! openshift-sdn's rules:
//!
//! - an egress IP is **active** when exactly one node and exactly one tenant (VNID) claim it, and
//!   no other IP of that tenant is on the same node;
//! - a tenant whose IPs include one claimed by another tenant, or none of whose IPs is active on
//!   a node that is online, is **dropped** (table 101 `reg0=V → drop`): its external traffic is
//!   never sent out with the node's address instead;
//! - **[ours]** an IP that belongs to someone else ([`reserved`]: any node's address, a pod
//!   gateway or pod subnet, the cluster or service network) is refused and its tenant dropped,
//!   on every node alike; the hosting node also refuses its default gateways and an address
//!   another host answers for (an RFC 5227 probe before it first holds the address);
//! - otherwise its traffic goes to the nodes of its active IPs (a `select` group over their
//!   VTEPs); when one of them is this node, only to this node (`flows::egress_ip`).
//!
//! [`EgressIps`] applies the plan. On the node hosting an IP it holds the host side: the address
//! on the interface that carries the node IP (label `<ifname>:eip`, so stale ones are found and
//! removed), a gratuitous ARP so the network learns where it is now, and the iptables rules
//! (`iptables::EgressIpRule`: tun0 + the tenant's mark MAC → mark; mark → SNAT to the IP; new
//! connections *to* the IP rejected). The order never lets a packet leave with the wrong source:
//! host rules are added before the flows that send traffic to them, and removed after the flows
//! stopped doing so.
//!
//! Offline nodes are found by [`EgressIps::monitor`]: every node hosting an egress IP this node's
//! tenants use is probed each second with a TCP connection to port 9 of its gateway address
//! (through VXLAN, so the whole path is checked, as openshift-sdn did with a 5 s poll): a refusal
//! or an answer means online, 3 probes in a row without one (1 s timeout each) offline, so a node
//! that goes away stops getting traffic within about 4 s and one that comes back gets it again
//! within about 1 s.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use flows::{EgressRoute, NodeConfig, Vnid};
use tokio::sync::watch;

use crate::bridge::flowstore::{Change, FlowStore, Owner};
use crate::bridge::seams::FlowSwitch;
use crate::host::iptables::{EgressIpRule, HostRules};
use crate::host::netlink::Netlink;
use cluster::ClusterState;
use local_api::{EgressIpEntry, EgressIpState, EgressIpUse, EgressKind, NodeReach};

mod plan;
pub(crate) use plan::route_text;
pub(crate) use plan::{plan, EgressPlan, Monitored, TenantEgress};
mod probe;
pub(crate) use probe::{probe, probe_before_holding};
pub(crate) use probe::{OFFLINE_AFTER, PROBE_INTERVAL};

/// Why applying the egress IPs failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EgressIpError {
    /// The interface that carries the node IP could not be found.
    #[error("finding the node IP's interface for egress IPs")]
    NodeInterface(#[source] crate::host::netlink::NetlinkError),
    /// The host rules for the IPs held could not be written.
    #[error("installing the egress IP rules")]
    InstallRules(#[source] crate::host::iptables::IptablesError),
    /// The switch refused the flows.
    #[error("applying the egress IP flows")]
    Flows(#[source] ovs::openflow::OfError),
    /// The host rules of IPs no longer held could not be removed.
    #[error("removing egress IP rules")]
    RemoveRules(#[source] crate::host::iptables::IptablesError),
}

/// What was last applied.
#[derive(Debug, Default)]
struct Applied {
    plan: EgressPlan,
    /// The IPs held on this node (address and rules), with their VNIDs.
    held: BTreeMap<IpAddr, Vnid>,
    /// IPs this node should hold and cannot, and why.
    errors: BTreeMap<IpAddr, String>,
    /// The host rules last written.
    rules: Option<HostRules>,
    /// Whether a sync ran (the first one checks the host whatever it finds).
    started: bool,
}

/// This node's egress IPs (see the module docs).
#[derive(Debug)]
pub(crate) struct EgressIps<S> {
    store: Arc<FlowStore<S>>,
    cluster: watch::Receiver<Arc<ClusterState>>,
    local_node: String,
    /// This node (node IP, tun0's MAC, mode, the networks of the host rules).
    node: NodeConfig,
    masquerade_bit: u8,
    netlink: Netlink,
    offline: std::sync::Mutex<BTreeSet<String>>,
    applied: tokio::sync::Mutex<Applied>,
    watched: watch::Sender<BTreeSet<Monitored>>,
    /// Tenants with egress IPs when start-up staged their rows.
    staged: std::sync::atomic::AtomicUsize,
}

impl<S: FlowSwitch> EgressIps<S> {
    /// An idle component; nothing happens until [`Self::sync`]. Egress IPs are per tenant: in
    /// subnet mode it only writes the host rules.
    pub(crate) fn new(
        store: Arc<FlowStore<S>>,
        cluster: watch::Receiver<Arc<ClusterState>>,
        local_node: &str,
        node: NodeConfig,
        masquerade_bit: u8,
        netlink: Netlink,
    ) -> Self {
        EgressIps {
            store,
            cluster,
            local_node: local_node.to_string(),
            node,
            masquerade_bit,
            netlink,
            offline: std::sync::Mutex::default(),
            applied: tokio::sync::Mutex::default(),
            watched: watch::channel(BTreeSet::new()).0,
            staged: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The host rules, with the egress IPs `held`.
    fn rules(&self, held: &BTreeMap<IpAddr, Vnid>) -> HostRules {
        let mut r = HostRules {
            cluster_networks: self
                .node
                .ipv4
                .as_ref()
                .map(|v4| v4.cluster_networks.clone())
                .unwrap_or_default(),
            service_cidr: self.node.ipv4.as_ref().map(|v4| v4.service_cidr),
            vxlan_port: self.node.vxlan_port,
            underlay_ipv6: self.node.node_ip.is_ipv6(),
            egress_ips: Vec::new(),
            ipv6: self.node.ipv6.map(|v6| crate::host::iptables::HostRules6 {
                cluster_network: v6.cluster_network,
                service_cidr: v6.service_cidr,
            }),
        };
        r.egress_ips = held
            .iter()
            .map(|(ip, v)| EgressIpRule {
                ip: *ip,
                mark: flows::egress_mark(*v, self.masquerade_bit),
                mac: flows::egress_mark_mac(*v).0,
                vnid: v.id(),
            })
            .collect();
        r
    }

    /// Applies the cluster state's egress IPs: the host side first for what is added, the
    /// flows (staged only with `stage`, at start before the first reconcile), the host side
    /// last for what is removed. Without `prune`, tenants (VNIDs) that lost their egress IPs
    /// keep their rows and IPs until a later sync with `prune`: a namespace moving to another
    /// VNID gets its rows on the new VNID before its pods move, and the old VNID's go after, so
    /// its traffic never leaves with the node's address in between. Returns how many tenants
    /// have egress IPs. Also writes the node's host rules (`iptables`) as a whole.
    pub(crate) async fn sync(&self, stage: bool, prune: bool) -> Result<usize, EgressIpError> {
        let mut applied = self.applied.lock().await;
        let state = self.cluster.borrow().clone();
        let mut plan = self.planned(&state, &applied, prune);
        // The host side is looked at only when what this node must hold changed, and at every
        // repair ([`Self::recheck_host`], which also retries what failed): most cluster-state
        // changes (pods, other tenants) leave it alone.
        let host_changed = !applied.started || plan.local != applied.plan.local;
        // The interface that carries the node IP: where egress IPs go. Always looked up at the
        // first sync, so addresses this node held before a restart and must not hold now go.
        let link = if !host_changed
            || (applied.started && plan.local.is_empty() && applied.held.is_empty())
        {
            None
        } else {
            self.netlink
                .egress_link(self.node.node_ip)
                .await
                .map_err(EgressIpError::NodeInterface)?
        };
        let (hold, errors) = if host_changed {
            self.hold_addresses(&plan, link.as_ref()).await
        } else {
            (applied.held.clone(), applied.errors.clone())
        };
        self.drop_tenants_not_held(&mut plan, &hold, &errors);
        // Rules for the old and the new IPs while the flows change.
        let mut both = applied.held.clone();
        both.extend(hold.iter().map(|(k, v)| (*k, *v)));
        let both_rules = self.rules(&both);
        if applied.rules.as_ref() != Some(&both_rules) {
            crate::host::iptables::sync(&both_rules)
                .await
                .map_err(EgressIpError::InstallRules)?;
            applied.rules = Some(both_rules);
        }
        // The flows: one owner per tenant whose route changed, in one bundle.
        let change = self.flow_change(&plan, &applied.plan, stage);
        if stage {
            self.store.stage(change).await;
        } else {
            self.store
                .apply(change)
                .await
                .map_err(EgressIpError::Flows)?;
        }
        // Now the rules and addresses of IPs no longer held go.
        if both.len() != hold.len() {
            let rules = self.rules(&hold);
            crate::host::iptables::sync(&rules)
                .await
                .map_err(EgressIpError::RemoveRules)?;
            applied.rules = Some(rules);
        }
        if let Some(l) = &link {
            self.tidy_addresses(l, &hold, &applied.held).await;
        }
        log_tenant_changes(&plan, &applied.plan, &state);
        self.watched.send_if_modified(|w| {
            let changed = *w != plan.monitor;
            w.clone_from(&plan.monitor);
            changed
        });
        let n = plan.tenants.len();
        let rules = applied.rules.take();
        *applied = Applied {
            plan,
            held: hold,
            errors,
            rules,
            started: true,
        };
        Ok(n)
    }

    /// The plan for the cluster state now; without `prune`, what was applied stays in it.
    fn planned(&self, state: &ClusterState, applied: &Applied, prune: bool) -> EgressPlan {
        let offline = crate::lock(&self.offline).clone();
        let mut plan = if self.node.mode.has_vnids() {
            plan(state, &self.local_node, &offline, self.node.ipv6.is_some())
        } else {
            EgressPlan::default()
        };
        if !prune {
            for (v, t) in &applied.plan.tenants {
                plan.tenants.entry(*v).or_insert_with(|| t.clone());
            }
            for (ip, v) in &applied.held {
                plan.local.entry(*ip).or_insert(*v);
            }
        }
        plan
    }

    /// Holds each IP this node must hold on `link`, or says why it cannot: not on the node
    /// IP's network (an IPv6 one: on none of the link's IPv6 networks), the node IP itself (or
    /// another address of the link), a default gateway, or another host answers for it.
    /// Returns what is held and what is not, with why.
    async fn hold_addresses(
        &self,
        plan: &EgressPlan,
        link: Option<&crate::host::netlink::EgressLink>,
    ) -> (BTreeMap<IpAddr, Vnid>, BTreeMap<IpAddr, String>) {
        let (mut hold, mut errors) = (BTreeMap::new(), BTreeMap::new());
        // What the host already has: labelled addresses are ours (not probed again), default
        // gateways are never taken.
        let (present, gateways) = match link {
            Some(l) if !plan.local.is_empty() => (
                self.netlink.egress_addresses(l).await.unwrap_or_default(),
                self.netlink.default_gateways().await.unwrap_or_default(),
            ),
            _ => Default::default(),
        };
        for (ip, v) in &plan.local {
            let why = match link {
                None => Some(format!(
                    "the node IP {} is on no interface of this host",
                    self.node.node_ip
                )),
                Some(l) => match l.cannot_hold(*ip) {
                    Some(why) => Some(why),
                    None if *ip == self.node.node_ip => Some("it is the node IP itself".into()),
                    None if gateways.contains(ip) => {
                        Some("it is this node's default gateway".into())
                    }
                    None => match probe_before_holding(l, *ip, present.contains(ip)).await {
                        Some(owner) => Some(owner),
                        None => match self.netlink.add_egress_address(l, *ip).await {
                            Ok(()) => None,
                            Err(e) => Some(e.to_string()),
                        },
                    },
                },
            };
            match why {
                None => {
                    hold.insert(*ip, *v);
                }
                Some(w) => {
                    tracing::error!(egress_ip = %ip, vnid = v.id(), error = %w, "cannot hold egress IP on this node; its tenant's external traffic is dropped here");
                    errors.insert(*ip, w);
                }
            }
        }
        (hold, errors)
    }

    /// A tenant that would leave through an IP this node cannot hold is dropped instead.
    fn drop_tenants_not_held(
        &self,
        plan: &mut EgressPlan,
        hold: &BTreeMap<IpAddr, Vnid>,
        errors: &BTreeMap<IpAddr, String>,
    ) {
        for t in plan.tenants.values_mut() {
            for six in [false, true] {
                let local = match t.family(six) {
                    Some((r, _)) => *r == EgressRoute::Local,
                    None => false,
                };
                let held_here = t.ips.iter().any(|s| {
                    s.ip.is_ipv6() == six
                        && s.in_use
                        && s.node.as_deref() == Some(&self.local_node)
                        && hold.contains_key(&s.ip)
                });
                if !local || held_here {
                    continue;
                }
                let problem = Some(format!(
                    "its egress IP on this node cannot be held: {}; dropping its external traffic",
                    t.ips
                        .iter()
                        .filter(|s| s.ip.is_ipv6() == six)
                        .filter_map(|s| errors.get(&s.ip).map(|e| format!("{}: {e}", s.ip)))
                        .collect::<Vec<_>>()
                        .join("; ")
                ));
                if six {
                    t.ipv6 = Some((EgressRoute::Dropped, problem));
                } else {
                    t.route = EgressRoute::Dropped;
                    t.problem = problem;
                }
            }
        }
    }

    /// The flow change from `before` to `plan`: one owner per tenant whose route changed
    /// (every tenant when staging), and the rows of tenants gone.
    fn flow_change(&self, plan: &EgressPlan, before: &EgressPlan, stage: bool) -> Change {
        let mut change = Change::new();
        for (v, t) in &plan.tenants {
            let routes = |t: &TenantEgress| (t.route.clone(), t.ipv6.as_ref().map(|r| r.0.clone()));
            if !stage && before.tenants.get(v).map(routes) == Some(routes(t)) {
                continue;
            }
            let route6 = t.ipv6.as_ref().map(|r| &r.0);
            // An IPv6-only node has no IPv4 row (its table 0 drops IPv4).
            let route = self.node.ipv4.as_ref().map(|_| &t.route);
            let (f, g) = flows::egress_ip_flows(*v, route, route6, self.node.tun0_mac());
            change = change.set_with_groups(Owner::EgressIp(*v), f, g);
        }
        for v in before.tenants.keys() {
            if !plan.tenants.contains_key(v) {
                change = change.remove(Owner::EgressIp(*v));
            }
        }
        change
    }

    /// Removes labelled addresses this node no longer holds (also those held before a
    /// restart, or by an older state), and announces the new ones with a gratuitous ARP (an
    /// unsolicited neighbour advertisement for IPv6).
    async fn tidy_addresses(
        &self,
        l: &crate::host::netlink::EgressLink,
        hold: &BTreeMap<IpAddr, Vnid>,
        held_before: &BTreeMap<IpAddr, Vnid>,
    ) {
        let present = self.netlink.egress_addresses(l).await.unwrap_or_default();
        for ip in present.iter().filter(|ip| !hold.contains_key(ip)) {
            if let Err(e) = self.netlink.del_egress_address(l, *ip).await {
                tracing::warn!(egress_ip = %ip, error = %e, "removing a stale egress IP");
            } else {
                tracing::info!(egress_ip = %ip, interface = %l.name, "egress IP released");
            }
        }
        for (ip, v) in hold.iter().filter(|(ip, _)| !held_before.contains_key(ip)) {
            tracing::info!(egress_ip = %ip, vnid = v.id(), interface = %l.name, "egress IP held on this node");
            let sent = match ip {
                IpAddr::V4(ip) => crate::host::netlink::gratuitous_arp(l, *ip),
                IpAddr::V6(ip) => crate::host::netlink::unsolicited_na(l, *ip),
            };
            if let Err(e) = sent {
                tracing::warn!(egress_ip = %ip, error = %e, "announcing the egress IP (gratuitous ARP or unsolicited NA)");
            }
        }
    }

    /// Makes the next [`Self::sync`] look at the host whatever changed: addresses put back
    /// (or removed) and rules rewritten (the daemon's repairs, every 30 s and after drift).
    pub(crate) async fn recheck_host(&self) {
        let mut a = self.applied.lock().await;
        a.started = false;
        a.rules = None;
    }

    /// Every tenant's egress, for `sdnctl egress-ips`.
    pub(crate) async fn entries(&self) -> (Vec<EgressIpEntry>, BTreeMap<String, NodeReach>) {
        let a = self.applied.lock().await;
        let state = self.cluster.borrow().clone();
        let entries = a
            .plan
            .tenants
            .iter()
            .map(|(v, t)| EgressIpEntry {
                vnid: v.id(),
                namespaces: t.namespaces.clone(),
                route: route_text(&t.route, &state),
                kind: kind_of(&t.route),
                problem: t.problem.clone(),
                ipv6: t.ipv6.as_ref().map(|(r, p)| local_api::EgressFamily {
                    route: route_text(r, &state),
                    kind: kind_of(r),
                    problem: p.clone(),
                }),
                ips: t
                    .ips
                    .iter()
                    .map(|s| EgressIpUse {
                        ip: s.ip,
                        node: s.node.clone(),
                        state: match (&s.why_not, a.errors.get(&s.ip)) {
                            (_, Some(e)) => EgressIpState::NotHeld { error: e.clone() },
                            (None, _) if s.in_use => EgressIpState::InUse,
                            (why, _) => EgressIpState::NotUsed { why: why.clone() },
                        },
                    })
                    .collect(),
            })
            .collect();
        let offline = crate::lock(&self.offline).clone();
        let nodes = a
            .plan
            .monitor
            .iter()
            .map(|m| {
                (
                    m.node.clone(),
                    if offline.contains(&m.node) {
                        NodeReach::Offline
                    } else {
                        NodeReach::Online
                    },
                )
            })
            .collect();
        (entries, nodes)
    }

    /// The egress IPs held on this node.
    pub(crate) async fn held(&self) -> BTreeMap<IpAddr, Vnid> {
        self.applied.lock().await.held.clone()
    }

    /// Watches the nodes hosting egress IPs this node's tenants use (see the module docs) and
    /// re-syncs when one goes offline or comes back. Runs until dropped.
    pub(crate) async fn monitor(self: Arc<Self>) {
        let mut targets = self.watched.subscribe();
        let mut misses: BTreeMap<String, u32> = BTreeMap::new();
        let mut tick = tokio::time::interval(PROBE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let nodes = targets.borrow_and_update().clone();
            if nodes.is_empty() {
                misses.clear();
                if crate::lock(&self.offline).is_empty() {
                    if targets.changed().await.is_err() {
                        return;
                    }
                    continue;
                }
            }
            tick.tick().await;
            let results = futures::future::join_all(nodes.iter().map(|m| probe(m.gateway))).await;
            let mut changed = false;
            {
                let mut offline = crate::lock(&self.offline);
                let names: BTreeSet<&String> = nodes.iter().map(|m| &m.node).collect();
                let before = offline.len();
                offline.retain(|n| names.contains(n));
                changed |= offline.len() != before;
                misses.retain(|n, _| names.contains(n));
                for (m, up) in nodes.iter().zip(results) {
                    if up {
                        misses.remove(&m.node);
                        if offline.remove(&m.node) {
                            tracing::info!(node = %m.node, gateway = %m.gateway, "egress IP node is back online");
                            crate::telemetry::metrics::metrics()
                                .egress_node_changes
                                .with_label_values(&["online"])
                                .inc();
                            changed = true;
                        }
                    } else {
                        let n = misses.entry(m.node.clone()).or_default();
                        *n += 1;
                        if *n == OFFLINE_AFTER && offline.insert(m.node.clone()) {
                            tracing::warn!(node = %m.node, gateway = %m.gateway, probes = OFFLINE_AFTER, "egress IP node is offline: its egress IPs are not used until it answers again");
                            crate::telemetry::metrics::metrics()
                                .egress_node_changes
                                .with_label_values(&["offline"])
                                .inc();
                            changed = true;
                        }
                    }
                }
            }
            if changed {
                if let Err(e) = self.sync(false, true).await {
                    tracing::warn!(error = %super::contract::chain(&e), "applying an egress IP node's change failed; retrying at the next change");
                }
            }
        }
    }
}

/// A route as one word.
fn kind_of(r: &EgressRoute) -> EgressKind {
    match r {
        EgressRoute::Local => EgressKind::Local,
        EgressRoute::Remote(_) => EgressKind::Remote,
        EgressRoute::Dropped => EgressKind::Dropped,
    }
}

/// Logs each tenant and family whose route or problem changed.
fn log_tenant_changes(plan: &EgressPlan, before: &EgressPlan, state: &ClusterState) {
    for (v, t) in &plan.tenants {
        for six in [false, true] {
            let Some((route, problem)) = t.family(six) else {
                continue;
            };
            if before.tenants.get(v).and_then(|o| o.family(six)) == Some((route, problem)) {
                continue;
            }
            let family = if six { "ipv6" } else { "ipv4" };
            match problem {
                Some(p) => {
                    tracing::error!(vnid = v.id(), namespaces = %t.namespaces.join(","), family, problem = %p, "egress IPs: tenant's external traffic dropped")
                }
                None => {
                    tracing::info!(vnid = v.id(), namespaces = %t.namespaces.join(","), family, route = %route_text(route, state), "egress IPs in effect")
                }
            }
        }
    }
}

impl<S: FlowSwitch + 'static> EgressIps<S> {
    /// The feature: on every node (in subnet mode it writes only the host rules).
    pub(crate) fn feature(ctx: &super::Context<S>) -> Option<Arc<Self>> {
        Some(Arc::new(EgressIps::new(
            ctx.store.clone(),
            ctx.state.clone(),
            &ctx.config.node_name,
            ctx.node.clone(),
            super::KUBE_PROXY_MASQUERADE_BIT,
            ctx.netlink.clone(),
        )))
    }
}

/// The tables egress IPs write.
pub(crate) const EGRESS_IP_TABLES: &[flows::Table] = &[flows::Table::EgressRouting];

impl<S: FlowSwitch + 'static> super::NodeFeature for EgressIps<S> {
    fn name(&self) -> &'static str {
        "egress-ips"
    }

    fn tables(&self) -> &'static [flows::Table] {
        EGRESS_IP_TABLES
    }

    /// The host iptables rules, with the egress IPs this node holds; their flows are staged
    /// for the first reconcile at once.
    fn prepare_host(&self) -> futures::future::BoxFuture<'_, Result<(), super::FeatureError>> {
        Box::pin(async move {
            let tenants = EgressIps::sync(self, true, true).await?;
            self.staged
                .store(tenants, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        })
    }

    /// Staged with the host rules ([`Self::prepare_host`]): how many tenants have egress IPs.
    fn stage(&self) -> futures::future::BoxFuture<'_, Result<usize, super::FeatureError>> {
        Box::pin(async move { Ok(self.staged.load(std::sync::atomic::Ordering::Relaxed)) })
    }

    /// New and changed tenants before pods move, as the firewall's; the rest after.
    fn sync(
        &self,
        phase: super::Phase,
        _: super::Reason,
    ) -> futures::future::BoxFuture<'_, Result<(), super::FeatureError>> {
        Box::pin(async move {
            if phase == (super::Phase::After { moved: false }) {
                return Ok(());
            }
            EgressIps::sync(self, false, phase.prunes())
                .await
                .map(drop)
                .map_err(super::FeatureError::from)
        })
    }

    /// Addresses and host rules are checked on every repair, not only on change.
    fn repair(&self) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(self.recheck_host())
    }

    /// The nodes hosting egress IPs this node's tenants use, probed.
    fn background(self: Arc<Self>) -> Vec<futures::future::BoxFuture<'static, ()>> {
        vec![Box::pin(self.monitor())]
    }

    fn observe(&self) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(async move {
            let m = crate::telemetry::metrics::metrics();
            let (eips, _) = self.entries().await;
            for kind in [EgressKind::Local, EgressKind::Remote, EgressKind::Dropped] {
                let n = eips.iter().filter(|e| e.kind == kind).count();
                m.egress_ip_tenants
                    .with_label_values(&[&kind.to_string()])
                    .set(n as i64);
            }
            m.egress_ips_held.set(self.held().await.len() as i64);
        })
    }

    fn status(&self) -> futures::future::BoxFuture<'_, String> {
        Box::pin(async move {
            let (tenants, nodes) = self.entries().await;
            let dropped = tenants
                .iter()
                .filter(|e| e.kind == EgressKind::Dropped)
                .count();
            let offline = nodes.values().filter(|s| **s == NodeReach::Offline).count();
            format!(
                "{} tenant(s) with egress IPs ({dropped} dropped), {} held here, {offline} of {} hosting node(s) offline",
                tenants.len(),
                self.held().await.len(),
                nodes.len()
            )
        })
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

#[cfg(test)]
mod tests;
