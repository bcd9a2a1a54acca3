//! The start-up sequence, in the order the node needs (see the node module's docs), up to
//! serving: the CNI server, the CNI config file that announces readiness, the local API.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use flows::{base_flows, NodeConfig, Table};
use ipnet::Ipv4Net;
use ovs::ovsdb::{BridgeSpec, FailMode, PortSpec};

use crate::bridge::flowstore::{Change, FlowStore, Owner};
use crate::bridge::switch::Switch;
use crate::cni::{self};
use crate::features::egress_firewall::EgressFirewalls;
use crate::features::egress_ip::EgressIps;
use crate::features::network_policy::NetworkPolicies;
use crate::features::remote::{LocalNode, RemoteNodes};
use crate::host::ipam;
use crate::host::iptables::Iptables;
use crate::host::netlink::Netlink;
use crate::operator::observe::{NodeView, Observer};
use crate::pod::{PodIo, PodNetwork, Pods, BRIDGE};

use super::cni_handler::AgentHandler;
use super::conflist::write_conf;
use super::*;

impl Daemon {
    /// Runs the start-up sequence and starts serving. Returns when the node is ready.
    pub async fn start(cfg: Config) -> Result<Daemon> {
        // Health first: /livez answers and /readyz says which step start-up is in, however
        // long the steps below wait (for the HostSubnet, for OVS).
        let observer = Observer::default();
        let health = observer.health.clone();
        let mut endpoints = Vec::new();
        if let Some(addr) = cfg.metrics_address() {
            endpoints.push(observer.serve(addr).await?);
        }
        // NetworkPolicies, namespace labels and pod labels come from the Kubernetes API; a
        // standalone node would run without any policy, isolating nothing, silently.
        if cfg.mode == flows::Mode::NetworkPolicy
            && matches!(cfg.cluster_state, ClusterStateSource::Standalone(_))
        {
            bail!(
                "mode networkpolicy needs clusterState: kubernetes (NetworkPolicies, namespace and \
                 pod labels come from the API server; a standalone state directory holds none, so \
                 no pod would be isolated): use multitenant for a standalone node"
            );
        }
        health.phase("loading the cluster state");
        // Cluster state.
        let (source, state) = match &cfg.cluster_state {
            ClusterStateSource::Standalone(dir) => {
                cluster::seed(
                    dir,
                    &cfg.node_name,
                    cfg.node_ip,
                    &cluster::ClusterNetworkSpec::from_config(&cfg),
                )
                .with_context(|| format!("preparing the cluster state in {}", dir.display()))?;
                let src = cluster::StandaloneSource::start(dir, cluster::DEFAULT_POLL_INTERVAL)
                    .with_context(|| format!("watching the cluster state in {}", dir.display()))?;
                let rx = src.subscribe();
                (Arc::new(src) as Arc<dyn ClusterSource>, rx)
            }
            ClusterStateSource::Kubernetes => {
                let client = cluster::kube::client(cfg.kubeconfig.as_deref()).await?;
                let src = cluster::kube::KubeSource::start(
                    client,
                    &cfg.node_name,
                    cfg.mode == flows::Mode::NetworkPolicy,
                    Duration::from_secs(60),
                )
                .await?;
                health.phase("waiting for this node's HostSubnet (the controller creates it)");
                src.wait_for_host_subnet(
                    &cfg.node_name,
                    Duration::from_secs(cfg.host_subnet_wait_seconds),
                )
                .await?;
                // The agent and the controller must agree on the network (same ConfigMap).
                if let Some(cn) = &src.current().cluster_network {
                    let spec = cluster::ClusterNetworkSpec::from_config(&cfg);
                    if let Some((field, in_cluster, in_config)) = spec.difference(cn) {
                        bail!(
                            "the cluster's ClusterNetwork default has {field} {in_cluster}, this \
                             agent's configuration says {in_config}; give the agent the \
                             controller's settings (a live cluster network is never changed)"
                        );
                    }
                }
                let rx = src.subscribe();
                (Arc::new(src) as Arc<dyn ClusterSource>, rx)
            }
        };
        let snapshot = state.borrow().clone();
        let mut node = node_config(&cfg, &snapshot)?;
        // Where start-up time goes, for the "br0 reconciled" line: (phase, ms at its end).
        let began = std::time::Instant::now();
        let mut phases: Vec<(&'static str, u128)> = Vec::new();
        let gw = node.gateway();
        tracing::info!(
            node = %cfg.node_name, subnet = %node.local_subnet, gateway = %gw,
            node_ip = %node.node_ip, mode = node.mode.name(), "starting"
        );

        // OVS: bridge and the two fixed ports.
        health.phase("connecting to OVSDB and setting up br0");
        let db = super::ovs_wait::connect(&cfg, &health).await?;
        phases.push(("ovsdb", began.elapsed().as_millis()));
        // A node openshift-sdn ran is taken over (or refused) before anything on it changes.
        health.phase("looking for openshift-sdn's state on br0");
        let takeover = takeover::inspect(
            &db,
            &cfg.bridge_mgmt,
            &cfg.cni_conf_dir,
            &node,
            cfg.force_takeover,
        )
        .await
        .context("taking the node over from openshift-sdn")?;
        node.tun0_mac = takeover::kept_tun0_mac(&db, takeover.as_ref());
        let spec = BridgeSpec {
            datapath_type: cfg.datapath_type.datapath_type().to_string(),
            fail_mode: Some(FailMode::Secure),
            protocols: vec!["OpenFlow13".into()],
            other_config: BTreeMap::new(),
        };
        db.ensure_bridge(BRIDGE, &spec).await?;
        let mut vxlan = PortSpec::new("vxlan0", "vxlan");
        vxlan.options = BTreeMap::from([
            ("remote_ip".to_string(), "flow".to_string()),
            ("key".to_string(), "flow".to_string()),
            ("dst_port".to_string(), cfg.vxlan_port.to_string()),
        ]);
        vxlan.ofport_request = Some(1);
        let mut tun = PortSpec::new("tun0", "internal");
        tun.ofport_request = Some(2);
        tun.mtu_request = Some(cfg.mtu);
        tun.mac = Some(node.tun0_mac().to_string());
        if node.tun0_mac.is_some() {
            tun.external_ids =
                BTreeMap::from([(takeover::KEPT_MAC_KEY.to_string(), "openshift-sdn".into())]);
        }
        for port in [vxlan, tun] {
            let ofport = db.add_port(BRIDGE, &port).await?;
            if ofport != u32::from(port.ofport_request.unwrap_or(0)) {
                bail!(
                    "{} has ofport {ofport} on {BRIDGE}, the pipeline needs {}; another port \
                     took it: remove that port or the bridge and start again",
                    port.name,
                    port.ofport_request.unwrap_or(0)
                );
            }
        }

        phases.push(("ovs ports", began.elapsed().as_millis()));

        // OpenFlow: connected while the host side is set up (ovs-vswitchd answers between two
        // reconfigurations, which take a while on a node with 1000 ports).
        let switch = Arc::new(Switch::new(&cfg.bridge_mgmt));
        let connecting = tokio::spawn({
            let switch = switch.clone();
            async move { switch.client().await.map(drop) }
        });
        // Host side: tun0 address, MTU, routes; forwarding; iptables.
        health.phase("configuring tun0 and the host rules");
        configure_tun0(&node, cfg.mtu).await?;
        crate::host::netlink::enable_ip_forward().context("enabling net.ipv4.ip_forward")?;
        // Host ports on 127.0.0.1: DNAT to a pod and route out of tun0 needs route_localnet.
        crate::host::netlink::set_sysctl("net/ipv4/conf/all/route_localnet", "1")
            .context("enabling net.ipv4.conf.all.route_localnet (host ports on 127.0.0.1)")?;
        let netlink = Netlink::new().context("opening rtnetlink")?;

        phases.push(("host", began.elapsed().as_millis()));
        // Flows: table names, then everything in one diff.
        let names: Vec<(u8, &str)> = Table::names().collect();
        db.set_flow_table_names(BRIDGE, &names).await?;
        // The management socket is there (ovs-vswitchd made it with the bridge); the connection
        // itself is awaited after the node serves (see below).
        if let Err(e) = std::os::unix::net::UnixStream::connect(&cfg.bridge_mgmt) {
            connecting.abort();
            bail!(
                "opening OpenFlow to {}: {e}; is ovs-vswitchd running, and is that br0's \
                 management socket (bridgeMgmt)?",
                cfg.bridge_mgmt.display()
            );
        }
        phases.push(("openflow", began.elapsed().as_millis()));
        let store = ipam::Store::new(&cfg.ipam_dir, &cfg.cni_network_name)
            .with_context(|| format!("lease directory {}", cfg.ipam_dir.display()))?;
        // openshift-sdn's pods become ours before the pod table is rebuilt from the records.
        let adopted = match &takeover {
            Some(found) => Some(
                found
                    .adopt(&db, &state.borrow().clone(), &store, &cfg.ipam_dir, &node)
                    .await
                    .context("adopting openshift-sdn's pods")?,
            ),
            None => None,
        };
        let net = PodNetwork {
            node: node.clone(),
            mtu: cfg.mtu,
            tx_checksum_off: cfg.pod_tx_checksum_off(),
            netnamespace_wait: Duration::from_secs(cfg.netnamespace_wait_seconds),
            egress_meters: cfg.datapath_type == flows::Datapath::Netdev,
            port_pool_size: pool_size(&cfg, &netlink),
        };
        let flow_store = Arc::new(FlowStore::new(
            switch.clone(),
            node.mode == flows::Mode::Multitenant,
        ));
        // The host iptables rules, with the egress IPs this node holds (their flows are staged
        // for the first reconcile).
        let egress_ips = Arc::new(EgressIps::new(
            flow_store.clone(),
            state.clone(),
            &cfg.node_name,
            node.clone(),
            KUBE_PROXY_MASQUERADE_BIT,
            netlink.clone(),
        ));
        let egress_ip_tenants = egress_ips
            .sync(true, true)
            .await
            .context("installing the host iptables rules and egress IPs")?;
        let pods = Arc::new(Pods::new(
            net,
            PodIo {
                db: db.clone(),
                store: flow_store.clone(),
                links: netlink,
                nat: Iptables::host(),
            },
            Arc::new(store),
            state.clone(),
        ));
        phases.push(("setup", began.elapsed().as_millis()));
        health.phase("rebuilding the pod table from OVS");
        let (kept, removed) = pods.rebuild_from_ovs().await.map_err(|e| {
            anyhow::anyhow!("rebuilding the pod table from OVS: {e} {}", e.details())
        })?;
        phases.push(("pods", began.elapsed().as_millis()));
        let restored = pods
            .restore_pool()
            .await
            .map_err(|e| anyhow::anyhow!("restoring the port pool: {e} {}", e.details()))?;
        let (pool_kept, pool_deleted) = (restored.kept, restored.queued);
        if takeover.is_some() || (pool_kept == 0 && kept > 0) {
            // Pods run here and no pool was kept (a takeover, or the first start of the agent
            // on a node with pods): no new link on the node until the runtime asks for a pod
            // (see the pool's docs). Held before the CNI server serves, so the first ADD's
            // demand is never overwritten.
            pods.pool().hold_until_demand();
        }
        let orphans = pods
            .release_orphan_leases(&restored.warm_leases, true)
            .await
            .map_err(|e| anyhow::anyhow!("releasing orphan leases: {e} {}", e.details()))?;

        let nodes = Arc::new(RemoteNodes::new(
            LocalNode {
                name: cfg.node_name.clone(),
                node_ip: node.node_ip,
                subnet: node.local_subnet,
            },
            flow_store.clone(),
            state.clone(),
        ));
        let remote_nodes = nodes.stage().await;
        let egress = Arc::new(EgressFirewalls::new(flow_store.clone(), state.clone()));
        // dnsName rules: their names resolved before the first reconcile (at most 2 s), so a
        // restart keeps their rows on the bridge.
        let egress_dns = if node.mode.has_vnids() {
            match crate::features::egress_firewall::EgressDns::new(&cfg.egress_dns_servers) {
                Ok(dns) => {
                    egress.seed_dns(&dns, Duration::from_secs(2)).await;
                    Some(dns)
                }
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "egress firewall dnsName rules cannot resolve (they have no rows); fix the resolver configuration or set egressDNSServers");
                    None
                }
            }
        } else {
            None
        };
        let egress_firewalls = if node.mode.has_vnids() {
            egress.stage().await
        } else {
            0
        };

        // Networkpolicy mode: the policy rows of the pods found, staged for the first
        // reconcile (a restart keeps them in place), and every later ADD asks for its own.
        let policies = if node.mode == flows::Mode::NetworkPolicy {
            let table = pods.clone();
            let local: crate::features::network_policy::LocalPods = Arc::new(move || {
                let table = table.clone();
                Box::pin(async move {
                    table
                        .list()
                        .await
                        .into_iter()
                        .map(|p| crate::features::network_policy::LocalPodRef {
                            port: p.host_veth,
                            ofport: p.ofport,
                            namespace: p.namespace,
                            name: p.name,
                            ip: p.ip,
                        })
                        .collect()
                })
            });
            let np = Arc::new(NetworkPolicies::new(
                flow_store.clone(),
                state.clone(),
                node.local_subnet,
                cfg.datapath_type,
                local,
                cfg.bridge_mgmt
                    .parent()
                    .unwrap_or(Path::new("/run/openvswitch"))
                    .to_path_buf(),
            ));
            np.stage().await;
            pods.set_policy(np.clone());
            Some(np)
        } else {
            None
        };
        let base = base_flows(&node);
        flow_store
            .stage(Change::new().set(Owner::Base, base.clone()))
            .await;
        if node.mode.has_vnids() {
            flow_store
                .stage_multicast(state.borrow().multicast_vnids())
                .await;
        }
        let mut n = Daemon {
            conf_file: cfg
                .cni_conf_dir
                .join(format!("10-{}.conflist", cfg.cni_network_name)),
            config: cfg,
            node,
            pods,
            switch,
            store: flow_store,
            nodes,
            egress,
            egress_ips,
            policies,
            db,
            base,
            server: None,
            tenant_confs: std::sync::Mutex::default(),
            maintenance: None,
            state: state.clone(),
            cluster: source,
            observer,
            endpoints,
        };
        phases.push(("pool and leases", began.elapsed().as_millis()));
        // Ready before the whole-bridge reconcile: the pod table, the pool and the leases are
        // known, and the bridge still holds the flows of every running pod (ovs-vswitchd kept
        // them; a switch that restarted does not forward until `release_switch` below). A
        // request that changes flows meanwhile waits for the reconcile in the flow store (it
        // holds the store from dump to bundle), and a warm ADD needs no flow change at all.
        n.serve().await?;
        phases.push(("serving", began.elapsed().as_millis()));
        // Our CNI config and host rules are in place: openshift-sdn's go.
        let cleaned = if takeover.is_some() {
            takeover::Found::clean_up(&n.config.cni_conf_dir, &n.config.ipam_dir)
                .await
                .context("removing what openshift-sdn left")?
        } else {
            Vec::new()
        };
        // The node serves already: an ovs-vswitchd that is slow to answer (a long
        // reconfiguration) gets a minute before the agent gives up.
        let mut connected = connecting
            .await
            .context("the OpenFlow connect task failed")?;
        let give_up = tokio::time::Instant::now() + Duration::from_secs(60);
        while let Err(e) = connected {
            if tokio::time::Instant::now() >= give_up {
                return Err(e).with_context(|| {
                    format!("opening OpenFlow to {}", n.config.bridge_mgmt.display())
                });
            }
            tracing::warn!(bridge = %n.config.bridge_mgmt.display(), error = %e, "ovs-vswitchd has not answered OpenFlow yet; retrying");
            tokio::time::sleep(Duration::from_millis(200)).await;
            connected = n.switch.client().await.map(drop);
        }
        // Networkpolicy mode: the start-up reconcile waits for the list of every pod of the
        // cluster (the peers of the policies), which completes in the background: rows staged
        // before it allow less than the ones on the bridge, and the reconcile would cut the
        // running pods' allowed traffic until the list came in.
        if let Some(np) = &n.policies {
            if wait_for_peer_pods(&n.state, PEER_POD_WAIT).await {
                np.stage().await;
            }
            phases.push(("peer pods", began.elapsed().as_millis()));
        }
        n.pods
            .remove_stray_meters()
            .await
            .map_err(|e| anyhow::anyhow!("removing stray egress meters: {e} {}", e.details()))?;
        let stats = n
            .reconcile_for("start")
            .await
            .context("reconciling the flows of br0")?;
        phases.push(("flows", began.elapsed().as_millis()));
        let phases: Vec<String> = phases.iter().map(|(p, ms)| format!("{p}:{ms}")).collect();
        // A switch that restarted while the agent was away waits for the pipeline (see
        // `release_switch`): it is complete now.
        release_switch(&n.db).await;
        tracing::info!(
            pods = kept,
            stale_pods_removed = removed,
            orphan_leases_released = orphans,
            pool_ports = pool_kept,
            stale_ports_queued_for_deletion = pool_deleted,
            remote_nodes,
            egress_firewalls,
            egress_ip_tenants,
            flows = stats.desired,
            added = stats.added,
            groups = stats.groups,
            deleted = stats.deleted,
            refused = stats.refused.len(),
            ms_at_end_of = %phases.join(","),
            "br0 reconciled"
        );
        if let (Some(found), Some(adopted)) = (&takeover, adopted) {
            tracing::info!(
                pods = adopted.pods,
                adopted_before = found.adopted_before,
                namespace_unknown = adopted.unnamed,
                leases = adopted.leases,
                stale_leases = adopted.stale_leases,
                removed = %cleaned.join(", "),
                ms = began.elapsed().as_millis() as u64,
                "took the node over from openshift-sdn: its pods are ours, its rows replaced in one bundle"
            );
        }
        return_free_memory();
        // The port pool: filled and kept full in the background (ADDs meanwhile add their own
        // ports), so readiness does not wait for ovs-vswitchd to take a batch of ports.
        let pods = n.pods.clone();
        let task = tokio::spawn(async move {
            pods.reap_dead_ports().await;
            pods.refill_pool().await;
            pods.maintain_ports().await
        });
        n.observer.health.maintenance(task.abort_handle());
        n.maintenance = Some(task);
        // Nodes hosting egress IPs this node's tenants use: watched in the background.
        n.endpoints
            .push(tokio::spawn(n.egress_ips.clone().monitor()));
        // NetworkPolicies: rebuilt on every change that matters, in the background.
        if let Some(np) = &n.policies {
            n.endpoints.push(tokio::spawn(np.clone().run()));
        }
        // dnsName rules of egress firewalls: kept current in the background.
        if let Some(dns) = egress_dns {
            tracing::info!(servers = %dns.source(), "egress firewall dnsName rules resolve through these DNS servers");
            n.endpoints
                .push(tokio::spawn(n.egress.clone().follow_dns(dns)));
        }
        Ok(n)
    }

    async fn serve(&mut self) -> Result<()> {
        let view = Arc::new(NodeView {
            config: self.config.clone(),
            node: self.node.clone(),
            pods: self.pods.clone(),
            store: self.store.clone(),
            switch: self.switch.clone(),
            db: self.db.clone(),
            state: self.state.clone(),
            source: self.cluster.clone(),
            health: self.observer.health.clone(),
            version_note: self.base.last().cloned(),
            egress: self.egress.clone(),
            egress_ips: self.egress_ips.clone(),
            policies: self.policies.clone(),
        });
        self.observer.set_view(view.clone());
        self.endpoints
            .push(tokio::spawn(view.clone().watch_health()));
        self.endpoints
            .push(crate::operator::api::serve(&self.config.api_socket(), view.clone()).await?);
        let handler = Arc::new(AgentHandler {
            pods: self.pods.clone(),
            view,
        });
        let opts = cni::ServerOptions {
            request_timeout: Duration::from_secs(self.config.request_timeout_seconds),
            ..cni::ServerOptions::default()
        };
        let server = cni::serve(&self.config.cni_socket, handler, opts)
            .await
            .with_context(|| {
                format!(
                    "starting the CNI server on {}",
                    self.config.cni_socket.display()
                )
            })?;
        self.observer.health.serving(&self.config.cni_socket);
        self.server = Some(server);
        write_conf(
            &self.conf_file,
            &self.config,
            &self.config.cni_network_name,
            None,
        )?;
        self.sync_tenant_networks();
        tracing::info!(
            socket = %self.config.cni_socket.display(), conf = %self.conf_file.display(),
            "ready"
        );
        Ok(())
    }
}

/// How long the start-up reconcile waits for the list of every pod (networkpolicy mode).
const PEER_POD_WAIT: Duration = Duration::from_secs(120);

/// Waits until the cluster state holds every pod of the cluster (networkpolicy mode), at most
/// `wait`; returns whether it had to wait (the policy rows are then staged again). Past `wait`
/// the agent goes on failing closed: its rows allow only the peers it knows, and the policy
/// task rebuilds them when the list completes.
async fn wait_for_peer_pods(
    state: &tokio::sync::watch::Receiver<Arc<cluster::ClusterState>>,
    wait: Duration,
) -> bool {
    let mut rx = state.clone();
    if rx.borrow_and_update().peer_pods_listed {
        return false;
    }
    tracing::info!("serving; the start-up reconcile waits for the list of every pod of the cluster (NetworkPolicy peers)");
    let listed = tokio::time::timeout(wait, async {
        loop {
            if rx.changed().await.is_err() {
                return false;
            }
            if rx.borrow_and_update().peer_pods_listed {
                return true;
            }
        }
    })
    .await;
    if !matches!(listed, Ok(true)) {
        tracing::error!(
            seconds = wait.as_secs(),
            "the pods of the cluster are not listed yet: reconciling br0 with the NetworkPolicy peers known so far (connections policies allow from unlisted pods are dropped until the list completes); check the API server's load and the Pod watch's errors in sdnctl status"
        );
    }
    true
}

/// Where the port pool's parking namespace is pinned: next to the CNI socket (the agent's run
/// directory, which the DaemonSet mounts from the host with `Bidirectional` propagation).
pub fn pool_netns_pin(cfg: &Config) -> std::path::PathBuf {
    cfg.cni_socket
        .parent()
        .unwrap_or(std::path::Path::new("/var/run/sdn"))
        .join("pool-netns")
}

/// The port pool's size: the configured one, or 0 (every ADD makes its own port) when the
/// parking namespace could not outlive the agent: pods on pool ports keep their peer there, and
/// would lose their interface when the agent exits. A pool pinned by an earlier agent is used
/// whatever this agent's mounts, since pods may sit on it.
pub(super) fn pool_size(cfg: &Config, netlink: &Netlink) -> usize {
    if cfg.port_pool_size == 0 {
        return 0;
    }
    let pin = pool_netns_pin(cfg);
    netlink.set_pool_netns(pin.clone());
    if crate::host::netlink::is_pinned_netns(&pin) {
        return cfg.port_pool_size;
    }
    match crate::host::netlink::pin_outlives_agent(&pin) {
        Ok(()) => cfg.port_pool_size,
        Err(why) => {
            tracing::warn!(pin = %pin.display(), %why, "port pool off: every ADD adds its own OVS port (slower on a full node); run the agent in the host's mount namespace or make its run directory a shared mount");
            0
        }
    }
}

/// tun0's address (the gateway), MTU and routes (cluster networks and the service network), and
/// ARP on tun0 always from the gateway address: a connection from the node to one of its own
/// addresses (a host port on the underlay IP) keeps that source after DNAT, and the kernel
/// would otherwise ask for the pod's MAC with it as sender, which table 0 drops as spoofed.
/// Idempotent; run at start and after ovs-vswitchd re-created tun0.
pub(super) async fn configure_tun0(node: &NodeConfig, mtu: u32) -> Result<()> {
    let netlink = Netlink::new().context("opening rtnetlink")?;
    let mut routes: Vec<Ipv4Net> = node.cluster_networks.clone();
    routes.push(node.service_cidr);
    let gw_addr = Ipv4Net::new(node.gateway(), node.local_subnet.prefix_len())?;
    netlink
        .configure_gateway("tun0", gw_addr, mtu, &routes)
        .await
        .context("configuring tun0")?;
    crate::host::netlink::set_sysctl("net/ipv4/conf/tun0/arp_announce", "2")
        .context("setting net.ipv4.conf.tun0.arp_announce=2 (ARP from the gateway address)")?;
    Ok(())
}

/// `flow-restore-wait`: the agent keeps it `true` in OVSDB, so an ovs-vswitchd that (re)starts
/// forwards nothing until the agent has put the whole pipeline back. This clears it (a waiting
/// ovs-vswitchd starts forwarding with the pipeline the agent just completed; applied before
/// this returns) and sets it again for the next ovs-vswitchd start, a second later, in the
/// background. Failures are logged: the periodic repair calls this again. Why the second: ovs-vswitchd reads the flag in its main loop only while it
/// still waits, and its `cur_cfg` can reach the clearing transaction's `next_cfg` before that
/// loop has looked (seen after a restart with a pool of ports to re-add); a flag set again at
/// once was then never seen cleared, and the switch waited for good. Setting it again later
/// costs nothing: with `fail_mode=secure`, an ovs-vswitchd that starts meanwhile without the
/// flag forwards nothing until the agent's flows are in either. One release (and its re-arm)
/// at a time.
pub(super) async fn release_switch(db: &ovs::ovsdb::Client) {
    static RELEASING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let one = RELEASING.lock().await;
    if let Err(e) = db.set_flow_restore_wait(false).await {
        tracing::warn!(error = %e, "clearing flow-restore-wait");
        return;
    }
    drop(one);
    let db = db.clone();
    tokio::spawn(async move {
        let _one = RELEASING.lock().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Err(e) = db.set_flow_restore_wait(true).await {
            tracing::warn!(error = %e, "setting flow-restore-wait for the next ovs-vswitchd start");
        }
    });
}

/// Hands the allocator's free pages back to the kernel. The first list of a large cluster
/// (150,000 pods arrive in pages of 500, decoded and mostly dropped) leaves the heap full of
/// freed holes that glibc keeps mapped: without this the agent's RSS stays at the list's peak.
/// Called after start-up and by the periodic repair (a re-list after a lost watch does the
/// same); it costs milliseconds.
pub(super) fn return_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions; it only releases free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}
