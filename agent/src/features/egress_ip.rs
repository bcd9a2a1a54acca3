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
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use flows::{EgressRoute, NodeConfig, Vnid};
use tokio::sync::watch;

use crate::bridge::flowstore::{Change, FlowStore, Owner};
use crate::bridge::seams::FlowSwitch;
use crate::host::iptables::{EgressIpRule, HostRules};
use crate::host::netlink::Netlink;
use cluster::ClusterState;
use local_api::EgressIpEntry;

/// How a tenant's egress IPs stand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantEgress {
    /// The namespaces of the VNID (by name).
    pub namespaces: Vec<String>,
    /// The IPs they ask for, each with where it is and whether it is used.
    pub ips: Vec<IpState>,
    /// Where its external traffic goes.
    pub route: EgressRoute,
    /// Why it is dropped, when it is.
    pub problem: Option<String>,
}

/// One requested egress IP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpState {
    /// The address.
    pub ip: Ipv4Addr,
    /// The node hosting it, when exactly one does.
    pub node: Option<String>,
    /// Whether it is active: one node, one tenant, no other IP of the tenant on that node (its
    /// node holds it, whether or not traffic uses it).
    pub active: bool,
    /// Whether traffic uses it now.
    pub in_use: bool,
    /// Why not, when not.
    pub why_not: Option<String>,
}

/// A remote node hosting egress IPs that this node's tenants use.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Monitored {
    /// Its HostSubnet's name.
    pub node: String,
    /// Its VTEP (`hostIP`).
    pub vtep: Ipv4Addr,
    /// Its gateway address (first address of its subnet), the probe's target.
    pub gateway: Ipv4Addr,
}

/// What the cluster state asks of this node (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressPlan {
    /// Per VNID with egress IPs.
    pub tenants: BTreeMap<Vnid, TenantEgress>,
    /// The egress IPs this node must hold, with the VNID each is for.
    pub local: BTreeMap<Ipv4Addr, Vnid>,
    /// The remote nodes to watch.
    pub monitor: BTreeSet<Monitored>,
}

/// Why `ip` can never be an egress IP, naming what owns it: a node's address (its HostSubnet's
/// `hostIP`), a pod gateway or any address of a node's pod subnet, the cluster networks, the
/// service network. Holding such an address would take it from its owner (a node's underlay
/// address: the node drops off the network) or shadow cluster traffic.
pub fn reserved(state: &ClusterState, ip: Ipv4Addr) -> Option<String> {
    for (name, hs) in &state.host_subnets {
        if hs.host_ip_addr().ok() == Some(ip) {
            return Some(format!(
                "it is node {name}'s address (HostSubnet {name} hostIP)"
            ));
        }
        if let Ok(subnet) = hs.subnet_net() {
            if Ipv4Addr::from(u32::from(subnet.network()) + 1) == ip {
                return Some(format!(
                    "it is node {name}'s pod gateway (the first address of its subnet {subnet})"
                ));
            }
            if subnet.contains(&ip) {
                return Some(format!("it is inside node {name}'s pod subnet {subnet}"));
            }
        }
    }
    if let Some(cn) = &state.cluster_network {
        let nets = cn
            .cluster_networks
            .iter()
            .map(|e| e.cidr.as_str())
            .chain(cn.network.as_deref());
        for cidr in nets {
            if cidr
                .parse::<ipnet::Ipv4Net>()
                .is_ok_and(|n| n.contains(&ip))
            {
                return Some(format!("it is inside the cluster network {cidr}"));
            }
        }
        if cn
            .service_network
            .parse::<ipnet::Ipv4Net>()
            .is_ok_and(|n| n.contains(&ip))
        {
            return Some(format!(
                "it is inside the service network {}",
                cn.service_network
            ));
        }
    }
    None
}

fn parse_ips(ips: &[String]) -> Vec<Ipv4Addr> {
    // Validated objects hold IPv4 addresses only; anything else was refused with the object.
    ips.iter().filter_map(|s| s.parse().ok()).collect()
}

/// Decides every tenant's egress (pure). `local_node` is this node's HostSubnet name,
/// `offline` the nodes found offline.
pub fn plan(state: &ClusterState, local_node: &str, offline: &BTreeSet<String>) -> EgressPlan {
    // Who claims each IP: nodes (HostSubnets) and tenants (VNIDs).
    let mut nodes_of: BTreeMap<Ipv4Addr, Vec<&str>> = BTreeMap::new();
    for (name, hs) in &state.host_subnets {
        for ip in parse_ips(&hs.egress_ips) {
            nodes_of.entry(ip).or_default().push(name);
        }
    }
    let mut vnids_of: BTreeMap<Ipv4Addr, BTreeSet<u32>> = BTreeMap::new();
    let mut wanted: BTreeMap<u32, BTreeSet<Ipv4Addr>> = BTreeMap::new();
    for nn in state.net_namespaces.values() {
        for ip in parse_ips(&nn.egress_ips) {
            vnids_of.entry(ip).or_default().insert(nn.net_id);
            wanted.entry(nn.net_id).or_default().insert(ip);
        }
    }
    let node_of = |ip: &Ipv4Addr| -> Result<&str, String> {
        match nodes_of.get(ip).map(Vec::as_slice) {
            None | Some([]) => Err("no node hosts it (no HostSubnet lists it in egressIPs)".into()),
            Some([one]) => Ok(one),
            Some(many) => Err(format!(
                "several nodes claim it ({}); it is used by nobody",
                many.join(", ")
            )),
        }
    };
    let mut out = EgressPlan::default();
    for (v, ips) in &wanted {
        let Some(vnid) = Vnid::new(*v) else { continue };
        let mut states = Vec::new();
        let mut problem = None;
        let mut local = false;
        let mut remote: Vec<Ipv4Addr> = Vec::new();
        for ip in ips {
            let mut st = IpState {
                ip: *ip,
                node: None,
                active: false,
                in_use: false,
                why_not: None,
            };
            if let Some(why) = reserved(state, *ip) {
                let what =
                    format!("egress IP {ip} is refused: {why}; dropping its external traffic");
                st.why_not = Some(format!("refused: {why}"));
                problem.get_or_insert(what);
                states.push(st);
                continue;
            }
            let claimants = &vnids_of[ip];
            if claimants.len() > 1 {
                let what = format!(
                    "egress IP {ip} is claimed by several tenants (VNIDs {}); dropping their external traffic",
                    claimants.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
                );
                st.why_not = Some(what.clone());
                problem.get_or_insert(what);
                states.push(st);
                continue;
            }
            match node_of(ip) {
                Err(why) => st.why_not = Some(why),
                Ok(node) => {
                    st.node = Some(node.to_string());
                    // Another IP of this tenant on the same node: openshift-sdn refuses both.
                    let twin = ips
                        .iter()
                        .filter(|o| *o != ip)
                        .find(|o| node_of(o).is_ok_and(|n| n == node));
                    if let Some(twin) = twin {
                        st.why_not = Some(format!(
                            "{twin}, another egress IP of this tenant, is on the same node {node}"
                        ));
                    } else if node != local_node && offline.contains(node) {
                        st.active = true;
                        st.why_not = Some(format!("node {node} is offline"));
                    } else if node == local_node {
                        st.active = true;
                        st.in_use = true;
                        local = true;
                    } else if let Some(vtep) = state.host_ip_of(node) {
                        st.active = true;
                        st.in_use = true;
                        remote.push(vtep);
                    } else {
                        st.why_not = Some(format!("node {node} has no valid hostIP"));
                    }
                }
            }
            states.push(st);
        }
        let route = if problem.is_some() {
            EgressRoute::Dropped
        } else if local {
            EgressRoute::Local
        } else if !remote.is_empty() {
            EgressRoute::Remote(remote)
        } else {
            problem = Some(format!(
                "none of its egress IPs ({}) is usable: {}; dropping its external traffic",
                ips.iter()
                    .map(Ipv4Addr::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                states
                    .iter()
                    .filter_map(|s| s.why_not.as_ref().map(|w| format!("{}: {w}", s.ip)))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
            EgressRoute::Dropped
        };
        // With a local IP only that one carries traffic (the others stay assigned).
        if route == EgressRoute::Local {
            for s in &mut states {
                if s.in_use && s.node.as_deref() != Some(local_node) {
                    s.in_use = false;
                    s.why_not = Some(
                        "an egress IP of this tenant is on this node; that one is used here".into(),
                    );
                }
            }
        }
        for s in states.iter().filter(|s| s.active) {
            let Some(node) = &s.node else { continue };
            if node == local_node {
                // Held here whenever it is active: other nodes send the tenant's traffic here.
                out.local.insert(s.ip, vnid);
            } else if let (Some(vtep), Some(subnet)) =
                (state.host_ip_of(node), state.subnet_of(node))
            {
                // Watched while active, offline or not, so it can come back.
                out.monitor.insert(Monitored {
                    node: node.clone(),
                    vtep,
                    gateway: Ipv4Addr::from(u32::from(subnet.network()) + 1),
                });
            }
        }
        out.tenants.insert(
            vnid,
            TenantEgress {
                namespaces: state
                    .namespaces_of(*v)
                    .into_iter()
                    .map(String::from)
                    .collect(),
                ips: states,
                route,
                problem,
            },
        );
    }
    out
}

/// How many times an answered probe is repeated (a second apart) before the address is refused:
/// when an egress IP moves between nodes, the node it leaves releases it a moment after the
/// node it moves to first probes it.
const PROBE_ROUNDS: u32 = 4;

/// Probes `ip` on `link` before this node takes it (RFC 5227, [`crate::host::netlink::arp_probe`]),
/// unless the node already holds it: why it must not be held (another host still answers for
/// it after [`PROBE_ROUNDS`] probes a second apart, or the probe could not run: when in doubt
/// the address is not taken), or `None`.
async fn probe_before_holding(
    link: &crate::host::netlink::EgressLink,
    ip: Ipv4Addr,
    held: bool,
) -> Option<String> {
    if held {
        return None;
    }
    let mut answer = Ok(Ok(None));
    for round in 0..PROBE_ROUNDS {
        if round > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let l = link.clone();
        answer = tokio::task::spawn_blocking(move || crate::host::netlink::arp_probe(&l, ip)).await;
        if !matches!(answer, Ok(Ok(Some(_)))) {
            break;
        }
        tracing::warn!(egress_ip = %ip, round, "another host answers for the egress IP; probing again before refusing it");
    }
    match answer {
        Ok(Ok(None)) => None,
        Ok(Ok(Some(mac))) => Some(format!(
            "another host answers for it on {} (MAC {}; RFC 5227 probe): it is that host's \
             address",
            link.name,
            mac.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        )),
        Ok(Err(e)) => Some(format!(
            "probing whether another host holds it on {} failed: {e}",
            link.name
        )),
        Err(e) => Some(format!("probing whether another host holds it: {e}")),
    }
}

/// How often a watched node is probed, and how long a probe waits.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// Probes in a row without an answer before a node counts as offline.
pub const OFFLINE_AFTER: u32 = 3;
/// The port probed (TCP "discard", as openshift-sdn probed): closed, so an online node refuses.
pub const PROBE_PORT: u16 = 9;

/// What was last applied.
#[derive(Debug, Default)]
struct Applied {
    plan: EgressPlan,
    /// The IPs held on this node (address and rules), with their VNIDs.
    held: BTreeMap<Ipv4Addr, Vnid>,
    /// IPs this node should hold and cannot, and why.
    errors: BTreeMap<Ipv4Addr, String>,
    /// The host rules last written.
    rules: Option<HostRules>,
    /// Whether a sync ran (the first one checks the host whatever it finds).
    started: bool,
}

/// This node's egress IPs (see the module docs).
#[derive(Debug)]
pub struct EgressIps<S> {
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
}

impl<S: FlowSwitch> EgressIps<S> {
    /// An idle component; nothing happens until [`Self::sync`]. Egress IPs are per tenant: in
    /// subnet mode it only writes the host rules.
    pub fn new(
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
        }
    }

    /// The host rules, with the egress IPs `held`.
    fn rules(&self, held: &BTreeMap<Ipv4Addr, Vnid>) -> HostRules {
        let mut r = HostRules {
            cluster_networks: self.node.cluster_networks.clone(),
            service_cidr: self.node.service_cidr,
            vxlan_port: self.node.vxlan_port,
            egress_ips: Vec::new(),
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
    pub async fn sync(&self, stage: bool, prune: bool) -> anyhow::Result<usize> {
        use anyhow::Context as _;
        let mut applied = self.applied.lock().await;
        let state = self.cluster.borrow().clone();
        let offline = crate::lock(&self.offline).clone();
        let mut plan = if self.node.mode.has_vnids() {
            plan(&state, &self.local_node, &offline)
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
                .context("finding the node IP's interface for egress IPs")?
        };
        let (mut errors, mut hold) = (BTreeMap::new(), BTreeMap::new());
        if !host_changed {
            errors.clone_from(&applied.errors);
            hold.clone_from(&applied.held);
        }
        // What the host already has: labelled addresses are ours (not probed again), default
        // gateways are never taken.
        let (present, gateways) = match &link {
            Some(l) if host_changed && !plan.local.is_empty() => (
                self.netlink.egress_addresses(l).await.unwrap_or_default(),
                self.netlink.default_gateways().await.unwrap_or_default(),
            ),
            _ => Default::default(),
        };
        for (ip, v) in plan.local.iter().filter(|_| host_changed) {
            let why = match &link {
                None => Some(format!(
                    "the node IP {} is on no interface of this host",
                    self.node.node_ip
                )),
                Some(l) if !l.network.contains(ip) => Some(format!(
                    "it is not in the network {} of {} (the node IP's interface)",
                    l.network, l.name
                )),
                _ if *ip == self.node.node_ip => Some("it is the node IP itself".into()),
                _ if gateways.contains(ip) => Some("it is this node's default gateway".into()),
                Some(l) => match probe_before_holding(l, *ip, present.contains(ip)).await {
                    Some(owner) => Some(owner),
                    None => match self.netlink.add_egress_address(l, *ip).await {
                        Ok(()) => None,
                        Err(e) => Some(e.to_string()),
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
        // A tenant that would leave through an IP this node cannot hold is dropped instead.
        for t in plan.tenants.values_mut() {
            if t.route != EgressRoute::Local {
                continue;
            }
            let held_here = t.ips.iter().any(|s| {
                s.in_use && s.node.as_deref() == Some(&self.local_node) && hold.contains_key(&s.ip)
            });
            if !held_here {
                t.route = EgressRoute::Dropped;
                t.problem = Some(format!(
                    "its egress IP on this node cannot be held: {}; dropping its external traffic",
                    t.ips
                        .iter()
                        .filter_map(|s| errors.get(&s.ip).map(|e| format!("{}: {e}", s.ip)))
                        .collect::<Vec<_>>()
                        .join("; ")
                ));
            }
        }
        // Rules for the old and the new IPs while the flows change.
        let mut both = applied.held.clone();
        both.extend(hold.iter().map(|(k, v)| (*k, *v)));
        let both_rules = self.rules(&both);
        if applied.rules.as_ref() != Some(&both_rules) {
            crate::host::iptables::sync(&both_rules)
                .await
                .context("installing the egress IP rules")?;
            applied.rules = Some(both_rules);
        }
        // The flows: one owner per tenant whose route changed, in one bundle.
        let mut change = Change::new();
        for (v, t) in &plan.tenants {
            if !stage && applied.plan.tenants.get(v).map(|o| &o.route) == Some(&t.route) {
                continue;
            }
            let (f, g) = flows::egress_ip_flows(*v, &t.route, self.node.tun0_mac());
            change = change.set_with_groups(Owner::EgressIp(*v), f, g.into_iter().collect());
        }
        for v in applied.plan.tenants.keys() {
            if !plan.tenants.contains_key(v) {
                change = change.remove(Owner::EgressIp(*v));
            }
        }
        if stage {
            self.store.stage(change).await;
        } else {
            self.store
                .apply(change)
                .await
                .context("applying the egress IP flows")?;
        }
        // Now the rules and addresses of IPs no longer held go.
        if both.len() != hold.len() {
            let rules = self.rules(&hold);
            crate::host::iptables::sync(&rules)
                .await
                .context("removing egress IP rules")?;
            applied.rules = Some(rules);
        }
        if let Some(l) = &link {
            // Stale labelled addresses too (held before a restart, or by an older state).
            let present = self.netlink.egress_addresses(l).await.unwrap_or_default();
            for ip in present.iter().filter(|ip| !hold.contains_key(ip)) {
                if let Err(e) = self.netlink.del_egress_address(l, *ip).await {
                    tracing::warn!(egress_ip = %ip, error = %e, "removing a stale egress IP");
                } else {
                    tracing::info!(egress_ip = %ip, interface = %l.name, "egress IP released");
                }
            }
            for (ip, v) in hold.iter().filter(|(ip, _)| !applied.held.contains_key(ip)) {
                tracing::info!(egress_ip = %ip, vnid = v.id(), interface = %l.name, "egress IP held on this node");
                if let Err(e) = crate::host::netlink::gratuitous_arp(l, *ip) {
                    tracing::warn!(egress_ip = %ip, error = %e, "sending a gratuitous ARP");
                }
            }
        }
        for (v, t) in &plan.tenants {
            if applied.plan.tenants.get(v).map(|o| (&o.route, &o.problem))
                != Some((&t.route, &t.problem))
            {
                match &t.problem {
                    Some(p) => {
                        tracing::error!(vnid = v.id(), namespaces = %t.namespaces.join(","), problem = %p, "egress IPs: tenant's external traffic dropped")
                    }
                    None => {
                        tracing::info!(vnid = v.id(), namespaces = %t.namespaces.join(","), route = %route_text(&t.route, &state), "egress IPs in effect")
                    }
                }
            }
        }
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

    /// Makes the next [`Self::sync`] look at the host whatever changed: addresses put back
    /// (or removed) and rules rewritten (the daemon's repairs, every 30 s and after drift).
    pub async fn recheck_host(&self) {
        let mut a = self.applied.lock().await;
        a.started = false;
        a.rules = None;
    }

    /// Every tenant's egress, for `sdnctl egress-ips`.
    pub async fn entries(&self) -> (Vec<EgressIpEntry>, BTreeMap<String, String>) {
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
                kind: match t.route {
                    EgressRoute::Local => "local",
                    EgressRoute::Remote(_) => "remote",
                    EgressRoute::Dropped => "dropped",
                }
                .into(),
                problem: t.problem.clone(),
                ips: t
                    .ips
                    .iter()
                    .map(|s| {
                        let on = s
                            .node
                            .as_deref()
                            .map_or(String::new(), |n| format!(" on {n}"));
                        let how = match (&s.why_not, a.errors.get(&s.ip)) {
                            (_, Some(e)) => format!("not held here: {e}"),
                            (None, _) if s.in_use => "in use".to_string(),
                            (Some(w), _) => format!("not used: {w}"),
                            (None, _) => "not used".to_string(),
                        };
                        format!("{}{on} ({how})", s.ip)
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
                        "offline"
                    } else {
                        "online"
                    }
                    .to_string(),
                )
            })
            .collect();
        (entries, nodes)
    }

    /// The egress IPs held on this node.
    pub async fn held(&self) -> BTreeMap<Ipv4Addr, Vnid> {
        self.applied.lock().await.held.clone()
    }

    /// Watches the nodes hosting egress IPs this node's tenants use (see the module docs) and
    /// re-syncs when one goes offline or comes back. Runs until dropped.
    pub async fn monitor(self: Arc<Self>) {
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
                    tracing::warn!(error = %format!("{e:#}"), "applying an egress IP node's change failed; retrying at the next change");
                }
            }
        }
    }
}

/// Whether the node whose gateway is `gw` answers a TCP connection to port 9 within
/// [`PROBE_INTERVAL`]: connected or refused is online; no answer, or no route, is not.
async fn probe(gw: Ipv4Addr) -> bool {
    let connect = tokio::net::TcpStream::connect((gw, PROBE_PORT));
    match tokio::time::timeout(PROBE_INTERVAL, connect).await {
        Err(_) => false,
        Ok(Ok(_)) => true,
        Ok(Err(e)) => !matches!(
            e.raw_os_error(),
            Some(libc::EHOSTUNREACH) | Some(libc::ENETUNREACH)
        ),
    }
}

/// A route in words: `local`, `remote node-2 (192.168.77.12), ...`, `dropped`.
fn route_text(r: &EgressRoute, state: &ClusterState) -> String {
    match r {
        EgressRoute::Dropped => "dropped".into(),
        EgressRoute::Local => "local (this node's kernel SNATs it)".into(),
        EgressRoute::Remote(vteps) => format!(
            "over VXLAN to {}",
            vteps
                .iter()
                .map(|v| {
                    let name = state
                        .host_subnets
                        .values()
                        .find(|h| h.host_ip_addr().ok() == Some(*v))
                        .map_or(String::new(), |h| format!("{} ", h.host));
                    format!("{name}({v})")
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cluster::{HostSubnet, NetNamespace};

    const A: &str = "192.168.77.100";
    const B: &str = "192.168.77.101";

    /// Three nodes (node-1 is "here"), tenants a (VNID 10) and b (11) and c (12).
    fn state(node_ips: &[(&str, &[&str])], ns_ips: &[(&str, u32, &[&str])]) -> ClusterState {
        let mut s = ClusterState::default();
        for (i, n) in ["node-1", "node-2", "node-3"].iter().enumerate() {
            let mut hs = HostSubnet::new(
                n,
                &format!("192.168.77.{}", 11 + i),
                &format!("10.128.{}.0/23", 2 * i),
            );
            if let Some((_, ips)) = node_ips.iter().find(|(x, _)| x == n) {
                hs.egress_ips = ips.iter().map(|s| s.to_string()).collect();
            }
            s.insert(hs.into());
        }
        for (n, v, ips) in ns_ips {
            let mut nn = NetNamespace::new(n, *v);
            nn.egress_ips = ips.iter().map(|s| s.to_string()).collect();
            s.insert(nn.into());
        }
        s
    }

    fn vnid(v: u32) -> Vnid {
        Vnid::new(v).unwrap()
    }

    fn vtep(i: u8) -> Ipv4Addr {
        Ipv4Addr::new(192, 168, 77, 10 + i)
    }

    #[test]
    fn one_ip_on_another_node_routes_there_and_is_watched() {
        let s = state(&[("node-2", &[A])], &[("a", 10, &[A]), ("b", 11, &[])]);
        let p = plan(&s, "node-1", &BTreeSet::new());
        assert_eq!(p.tenants.len(), 1, "b has no egress IPs");
        assert_eq!(
            p.tenants[&vnid(10)].route,
            EgressRoute::Remote(vec![vtep(2)])
        );
        assert!(p.local.is_empty());
        assert_eq!(
            p.monitor
                .iter()
                .map(|m| (m.node.as_str(), m.gateway))
                .collect::<Vec<_>>(),
            [("node-2", Ipv4Addr::new(10, 128, 2, 1))]
        );
        // On node-2 it is local: held there, route local.
        let p2 = plan(&s, "node-2", &BTreeSet::new());
        assert_eq!(p2.tenants[&vnid(10)].route, EgressRoute::Local);
        assert_eq!(p2.local, BTreeMap::from([(A.parse().unwrap(), vnid(10))]));
        assert!(p2.monitor.is_empty());
        // node-2 offline: dropped (never the node's own address), still watched.
        let off = BTreeSet::from(["node-2".to_string()]);
        let p = plan(&s, "node-1", &off);
        assert_eq!(p.tenants[&vnid(10)].route, EgressRoute::Dropped);
        assert!(p.tenants[&vnid(10)]
            .problem
            .as_ref()
            .unwrap()
            .contains("node node-2 is offline"));
        assert_eq!(p.monitor.len(), 1);
    }

    #[test]
    fn two_ips_balance_fail_over_and_prefer_a_local_one() {
        let s = state(&[("node-2", &[A]), ("node-3", &[B])], &[("a", 10, &[A, B])]);
        let p = plan(&s, "node-1", &BTreeSet::new());
        assert_eq!(
            p.tenants[&vnid(10)].route,
            EgressRoute::Remote(vec![vtep(2), vtep(3)])
        );
        let off = BTreeSet::from(["node-2".to_string()]);
        assert_eq!(
            plan(&s, "node-1", &off).tenants[&vnid(10)].route,
            EgressRoute::Remote(vec![vtep(3)])
        );
        let p3 = plan(&s, "node-3", &BTreeSet::new());
        assert_eq!(p3.tenants[&vnid(10)].route, EgressRoute::Local);
        assert_eq!(p3.local.len(), 1);
        assert_eq!(
            p3.monitor.len(),
            1,
            "node-2 still watched: node-1's pods may use it"
        );
    }

    #[test]
    fn addresses_of_the_cluster_and_its_nodes_are_refused_and_their_tenant_dropped() {
        use cluster::{ClusterNetwork, ClusterNetworkEntry};
        let cases = [
            (
                "192.168.77.11",
                "it is node node-1's address (HostSubnet node-1 hostIP)",
            ),
            (
                "10.128.2.1",
                "it is node node-2's pod gateway (the first address of its subnet 10.128.2.0/23)",
            ),
            (
                "10.128.4.9",
                "it is inside node node-3's pod subnet 10.128.4.0/23",
            ),
            (
                "10.130.0.5",
                "it is inside the cluster network 10.128.0.0/14",
            ),
            (
                "172.30.0.10",
                "it is inside the service network 172.30.0.0/16",
            ),
        ];
        for (ip, why) in cases {
            // node-3 claims it for tenant a; every node (node-3 too) refuses it.
            let mut s = state(&[("node-3", &[ip])], &[("a", 10, &[ip])]);
            s.insert(
                ClusterNetwork::new(
                    vec![ClusterNetworkEntry {
                        cidr: "10.128.0.0/14".into(),
                        host_subnet_length: 9,
                    }],
                    "172.30.0.0/16",
                    None,
                    None,
                    None,
                )
                .into(),
            );
            for here in ["node-1", "node-3"] {
                let p = plan(&s, here, &BTreeSet::new());
                let t = &p.tenants[&vnid(10)];
                assert_eq!(t.route, EgressRoute::Dropped, "{ip} on {here}");
                assert_eq!(
                    t.problem.as_deref(),
                    Some(
                        format!("egress IP {ip} is refused: {why}; dropping its external traffic")
                            .as_str()
                    ),
                    "{ip} on {here}"
                );
                assert!(p.local.is_empty(), "{ip}: nobody holds it");
                assert!(p.monitor.is_empty());
            }
        }
        // An address of the node network that no node has is fine.
        let s = state(&[("node-3", &[A])], &[("a", 10, &[A])]);
        assert_eq!(reserved(&s, A.parse().unwrap()), None);
    }

    #[test]
    fn conflicts_drop_or_disable_as_openshift_sdn_did() {
        // Two tenants claim A: both dropped; nobody holds A.
        let s = state(&[("node-1", &[A])], &[("a", 10, &[A]), ("b", 11, &[A])]);
        let p = plan(&s, "node-1", &BTreeSet::new());
        for v in [10, 11] {
            assert_eq!(p.tenants[&vnid(v)].route, EgressRoute::Dropped);
            assert!(p.tenants[&vnid(v)]
                .problem
                .as_ref()
                .unwrap()
                .contains("claimed by several tenants"));
        }
        assert!(p.local.is_empty());
        // Two nodes claim A: unused, tenant dropped.
        let s = state(&[("node-1", &[A]), ("node-2", &[A])], &[("a", 10, &[A])]);
        let p = plan(&s, "node-1", &BTreeSet::new());
        assert_eq!(p.tenants[&vnid(10)].route, EgressRoute::Dropped);
        assert!(p.local.is_empty());
        assert!(p.tenants[&vnid(10)].ips[0]
            .why_not
            .as_ref()
            .unwrap()
            .contains("several nodes claim it"));
        // No node hosts it: dropped.
        let s = state(&[], &[("a", 10, &[A])]);
        let p = plan(&s, "node-1", &BTreeSet::new());
        assert_eq!(p.tenants[&vnid(10)].route, EgressRoute::Dropped);
        // Two IPs of one tenant on one node: neither is used.
        let s = state(&[("node-2", &[A, B])], &[("a", 10, &[A, B])]);
        let p = plan(&s, "node-1", &BTreeSet::new());
        assert_eq!(p.tenants[&vnid(10)].route, EgressRoute::Dropped);
        assert!(p.monitor.is_empty());
        // Joined namespaces (one VNID) asking for the same IP are one tenant.
        let s = state(&[("node-2", &[A])], &[("a", 10, &[A]), ("j", 10, &[A])]);
        let p = plan(&s, "node-1", &BTreeSet::new());
        assert_eq!(
            p.tenants[&vnid(10)].route,
            EgressRoute::Remote(vec![vtep(2)])
        );
        assert_eq!(p.tenants[&vnid(10)].namespaces, ["a", "j"]);
    }
}
