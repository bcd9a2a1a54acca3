//! The agent's start-up and its long-running loops.
//!
//! Start-up runs in the order the node needs and every step is idempotent, so a second start on
//! a configured node changes nothing and never deletes the bridge: cluster state (this node's
//! HostSubnet), `br0`, `vxlan0` at ofport 1 and `tun0` at ofport 2, tun0's gateway address, MTU
//! and routes, `net.ipv4.ip_forward`, the host iptables rules with the egress IPs this node holds
//! ([`EgressIps`]), the flow table names; then the pod
//! table is rebuilt from the pod ports' `external_ids`, and the port pool and the leases are
//! taken back. Then the node is ready: the CNI server listens and the CNI network config file is
//! written into the CNI conf dir (that file is how runtimes learn that the node is ready). The
//! file stays when the agent stops: during a restart the shim answers "try again later". Right
//! after, the whole desired flow set (base + pods + VNID rows + remote nodes) is diffed against
//! `br0` and only the difference is applied, in one bundle (so rows of HostSubnets that vanished
//! while the agent was down go at start). Serving does not wait for that diff (about 0.7 s with
//! 1000 pods): the bridge kept every running pod's flows, a switch that restarted forwards only
//! after it, and requests that change flows wait for it in the flow store.
//!
//! After start-up a loop keeps the bridge right: when the OpenFlow connection had to be re-opened
//! (ovs-vswitchd restarted, flows possibly lost) or periodically, it reconciles again. It also
//! follows the cluster state: when a NetNamespace's netid changes, the namespace's local pods are
//! re-flowed with the new VNID in one bundle ([`Pods::sync_vnids`]), with the tenants' egress
//! firewalls, egress IPs and multicast rows kept in step around it; every other node's
//! HostSubnet that was added, moved or deleted gets its rows replaced in one bundle per node
//! ([`RemoteNodes::sync`]); in standalone mode every tenant namespace gets its own CNI network
//! (`<network>-<namespace>`), so podman users pick a tenant by picking a network.
//!
//! Every flow goes through one [`FlowStore`]: the base pipeline, the pods and the remote nodes
//! hand it their flows, and the full reconcile is the store's one diff against the bridge.
//!
//! What an operator sees is started around this: the metrics and health endpoint
//! (`metricsAddress`, [`crate::observe`]) first of all, so `/livez` and `/readyz` answer while
//! start-up waits; the local API for `sdnctl` ([`crate::api`]) when the node serves; the main
//! loop's heartbeat, each reconcile (reason, time, changes) and each repair go to the health
//! record and the metrics.
//!
//! Why one file of this size: start-up and the loops that keep its result true (state changes,
//! flow and OVSDB drift, OpenFlow reconnects with tun0 and flow-restore-wait) share the daemon's
//! fields and order; the CNI handler at the end is a thin adapter.

use crate::lock;
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use flows::{base_flows, NodeConfig, Table};
use ipnet::Ipv4Net;
use ovs::flow::Flow;
use ovs::ovsdb::{self, BridgeSpec, FailMode, PortSpec};

use crate::cni::{self, AddResult, CniError, Request};
use crate::egress::EgressFirewalls;
use crate::egress_ip::EgressIps;
use crate::flowstore::{Change, FlowStore, Owner, ReconcileStats};
use crate::ipam;
use crate::iptables::Iptables;
use crate::netlink::Netlink;
use crate::observe::{NodeView, Observer};
use crate::pod::{PodIo, PodNetwork, Pods, BRIDGE};
use crate::policy::NetworkPolicies;
use crate::remote::{LocalNode, RemoteNodes};
use crate::switch::Switch;
use cluster::config::{ClusterStateSource, Config};
use cluster::{self, ClusterSource, ClusterState};

/// kube-proxy's masquerade mark bit (`--iptables-masquerade-bit`, 14 by default): egress IP
/// marks avoid it.
const KUBE_PROXY_MASQUERADE_BIT: u8 = 14;

/// A running node agent.
#[derive(Debug)]
pub struct Daemon {
    /// The configuration it runs with.
    pub config: Config,
    /// Base pipeline inputs, resolved from the cluster state.
    pub node: NodeConfig,
    /// The pods.
    pub pods: Arc<Pods>,
    /// The OpenFlow side of br0.
    pub switch: Arc<Switch>,
    /// Every flow the agent wants on br0.
    pub store: Arc<FlowStore<Switch>>,
    /// The rows of the other nodes (VXLAN).
    pub nodes: Arc<RemoteNodes>,
    /// The tenants' egress firewalls (table 100).
    pub egress: Arc<EgressFirewalls<Switch>>,
    /// The tenants' egress IPs (table 101, host addresses and rules).
    pub egress_ips: Arc<EgressIps<Switch>>,
    /// Networkpolicy mode: the NetworkPolicy rows (tables 27 and 80).
    pub policies: Option<Arc<NetworkPolicies<Switch>>>,
    db: ovsdb::Client,
    base: Vec<Flow>,
    server: Option<cni::ServerHandle>,
    conf_file: PathBuf,
    /// Serialises [`Self::sync_tenant_networks`].
    tenant_confs: std::sync::Mutex<()>,
    /// The port pool's background task ([`Pods::maintain_ports`]).
    maintenance: Option<tokio::task::JoinHandle<()>>,
    state: tokio::sync::watch::Receiver<Arc<ClusterState>>,
    cluster: Arc<dyn ClusterSource>,
    /// Health, metrics endpoint and the node view the local API reads.
    observer: Observer,
    /// The metrics endpoint and the local API (stopped with the agent).
    endpoints: Vec<tokio::task::JoinHandle<()>>,
}

/// Resolves the node's NodeConfig from the cluster state.
fn node_config(cfg: &Config, state: &ClusterState) -> Result<NodeConfig> {
    let hs = state.host_subnet_of(&cfg.node_name).with_context(|| {
        format!(
            "no HostSubnet for node {:?} in the cluster state; create one (host: {}, subnet: a \
             free /{} of the cluster network)",
            cfg.node_name,
            cfg.node_name,
            cfg.cluster_networks[0].node_prefix()
        )
    })?;
    let local_subnet: Ipv4Net = hs
        .subnet
        .parse()
        .with_context(|| format!("HostSubnet {} subnet {:?}", cfg.node_name, hs.subnet))?;
    let node_ip: Ipv4Addr = match cfg.node_ip {
        Some(ip) => ip,
        None => state
            .host_ip_of(&cfg.node_name)
            .with_context(|| format!("HostSubnet {} hostIP {:?}", cfg.node_name, hs.host_ip))?,
    };
    Ok(NodeConfig {
        datapath: flows::Datapath::of_type(&cfg.datapath_type),
        mode: cfg.mode(),
        node_ip,
        local_subnet,
        cluster_networks: cfg.cluster_cidrs(),
        service_cidr: cfg.service_network,
        vxlan_port: cfg.vxlan_port,
    })
}

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
        if cfg.mode() == flows::Mode::NetworkPolicy
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
                    cfg.mode() == flows::Mode::NetworkPolicy,
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
        let node = node_config(&cfg, &snapshot)?;
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
        let db = ovsdb::Client::connect(&cfg.ovsdb).await.with_context(|| {
            format!(
                "cannot reach ovsdb-server at {}: is Open vSwitch running?",
                cfg.ovsdb
            )
        })?;
        phases.push(("ovsdb", began.elapsed().as_millis()));
        let spec = BridgeSpec {
            datapath_type: cfg.datapath_type.clone(),
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
        crate::netlink::enable_ip_forward().context("enabling net.ipv4.ip_forward")?;
        // Host ports on 127.0.0.1: DNAT to a pod and route out of tun0 needs route_localnet.
        crate::netlink::set_sysctl("net/ipv4/conf/all/route_localnet", "1")
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
        let net = PodNetwork {
            node: node.clone(),
            mtu: cfg.mtu,
            tx_checksum_off: cfg.pod_tx_checksum_off(),
            netnamespace_wait: Duration::from_secs(cfg.netnamespace_wait_seconds),
            egress_meters: cfg.datapath_type == "netdev",
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
            match crate::egress::EgressDns::new(&cfg.egress_dns_servers) {
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
            let local: crate::policy::LocalPods = Arc::new(move || {
                let table = table.clone();
                Box::pin(async move {
                    table
                        .list()
                        .await
                        .into_iter()
                        .map(|p| crate::policy::LocalPodRef {
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
                flows::Datapath::of_type(&cfg.datapath_type),
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
            ms_at_end_of = %phases.join(","),
            "br0 reconciled"
        );
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
            .push(crate::api::serve(&self.config.api_socket(), view.clone()).await?);
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

    /// Applies the difference between the whole desired flow set and br0 (at start, after an
    /// OpenFlow reconnect, periodically): meters the switch lost first (pod flows use them),
    /// then the flow store's one diff.
    pub async fn reconcile(&self) -> Result<ReconcileStats> {
        self.pods
            .restore_meters()
            .await
            .context("re-adding lost egress meters")?;
        Ok(self.store.reconcile().await?)
    }

    /// [`Self::reconcile`], timed and recorded for `sdnctl status` and the metrics as done
    /// for `reason` (`start`, `periodic`, `flow-drift`, `switch-restart`).
    async fn reconcile_for(&self, reason: &str) -> Result<ReconcileStats> {
        let began = std::time::Instant::now();
        let r = self.reconcile().await;
        let shown = r.as_ref().map(Clone::clone).map_err(|e| format!("{e:#}"));
        self.observer
            .health
            .reconciled(reason, began.elapsed(), &shown);
        r
    }

    /// Applies a new cluster state: re-flows pods whose namespace changed VNID (one bundle),
    /// replaces the rows of remote nodes that changed (one bundle per node) and keeps the tenant
    /// networks' CNI config files in step.
    async fn apply_state(&self) {
        if let Err(e) = self.nodes.sync().await {
            tracing::warn!(error = %e, "applying remote node changes failed; retrying at the next change or repair");
        }
        let multitenant = self.node.mode.has_vnids();
        // Egress firewalls of new or changed VNIDs before pods move to them; rows of VNIDs that
        // lost their policy go only after the pods left them (see `EgressFirewalls::sync`).
        if multitenant {
            if let Err(e) = self.egress.sync(false).await {
                tracing::warn!(error = %e, "applying egress firewall changes failed; retrying at the next change or repair");
            }
        }
        if multitenant {
            self.sync_multicast().await;
        }
        // Egress IPs: new or changed tenants before pods move, as the firewall's.
        if let Err(e) = self.egress_ips.sync(false, false).await {
            tracing::warn!(error = %format!("{e:#}"), "applying egress IP changes failed; retrying at the next change or repair");
        }
        // sync_vnids logs each namespace's change as soon as its bundle is in.
        let moved = self.pods.sync_vnids().await;
        if let Err(e) = &moved {
            tracing::warn!(error = %e, "applying VNID changes failed; retrying at the next repair")
        }
        if multitenant && moved.is_ok() {
            if let Err(e) = self.egress.sync(true).await {
                tracing::warn!(error = %e, "removing egress firewall rows failed; retrying at the next change or repair");
            }
        }
        if moved.is_ok() {
            if let Err(e) = self.egress_ips.sync(false, true).await {
                tracing::warn!(error = %format!("{e:#}"), "removing egress IP rows failed; retrying at the next change or repair");
            }
        }
        self.sync_tenant_networks();
    }

    /// Multicast per tenant: the VNIDs whose every namespace carries the multicast annotation
    /// get their table-110/120 rows (the flow store keeps them in step with the pods).
    async fn sync_multicast(&self) {
        let want = self.state.borrow().multicast_vnids();
        let had = self.store.multicast().await;
        if want == had {
            return;
        }
        match self.store.set_multicast(want.clone()).await {
            Ok(()) => {
                let state = self.state.borrow().clone();
                for v in want.symmetric_difference(&had) {
                    tracing::info!(
                        vnid = v.id(),
                        namespaces = %state.namespaces_of(v.id()).join(","),
                        enabled = want.contains(v),
                        "multicast {}", if want.contains(v) { "enabled" } else { "disabled" }
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "applying multicast changes failed; retrying at the next change or repair")
            }
        }
    }

    /// Standalone mode: one CNI network per tenant namespace, so a runtime without Kubernetes
    /// (podman) can put a container into a tenant: `<confdir>/20-<network>-<namespace>.conflist`
    /// names network `<network>-<namespace>` and sets the plugin's `namespace`. Written for
    /// every NetNamespace except `default` (which is the main network), removed when the
    /// NetNamespace goes (also while the agent was down); they stay while the agent restarts.
    fn sync_tenant_networks(&self) {
        if !matches!(self.config.cluster_state, ClusterStateSource::Standalone(_)) {
            return;
        }
        let state = self.state.borrow().clone();
        let net = &self.config.cni_network_name;
        let mut want = BTreeSet::new();
        for ns in state.net_namespaces.keys().filter(|n| *n != "default") {
            let name = format!("{net}-{ns}");
            let path = self.config.cni_conf_dir.join(format!("20-{name}.conflist"));
            if let Err(e) = write_conf(&path, &self.config, &name, Some(ns)) {
                tracing::warn!(namespace = %ns, error = %format!("{e:#}"), "writing the tenant network config");
            }
            want.insert(path);
        }
        // What is on disk, not only what this run wrote: a namespace deleted while the agent
        // was down loses its network at the first sync after the restart.
        let _serial = lock(&self.tenant_confs);
        let on_disk = std::fs::read_dir(&self.config.cni_conf_dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name().map(|f| f.to_string_lossy()).is_some_and(|f| {
                    f.starts_with(&format!("20-{net}-")) && f.ends_with(".conflist")
                })
            });
        for stale in on_disk.filter(|p| !want.contains(p)) {
            remove_conf(&stale);
        }
    }

    async fn repair(&self, reason: &str, why: &str) {
        // Egress IP addresses and host rules are checked on every repair, not only on change.
        self.egress_ips.recheck_host().await;
        self.apply_state().await;
        if let Some(np) = &self.policies {
            if let Err(e) = np.sync().await {
                tracing::warn!(error = %e, "applying network policy rows failed; retrying at the next change or repair");
            }
        }
        match self.reconcile_for(reason).await {
            Ok(s) if s.added + s.deleted + s.groups > 0 => {
                crate::metrics::metrics().repaired(if reason == "switch-restart" {
                    "switch_restart"
                } else {
                    "flows"
                });
                tracing::warn!(
                    added = s.added,
                    deleted = s.deleted,
                    why,
                    changes = %s.changes.join("; "),
                    "br0 drifted; repaired"
                )
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %format!("{e:#}"), why, "reconcile failed"),
        }
    }

    /// After ovs-vswitchd restarted (the OpenFlow connection was re-opened): tun0 again (on the
    /// userspace datapath ovs-vswitchd re-creates it without its address and routes), the
    /// whole pipeline in one reconcile, then the switch may forward.
    async fn repair_switch(&self) {
        if let Err(e) = configure_tun0(&self.node, self.config.mtu).await {
            tracing::warn!(error = %format!("{e:#}"), "re-configuring tun0 after the switch restarted");
        }
        self.repair(
            "switch-restart",
            "OpenFlow connection re-opened (ovs-vswitchd restarted?)",
        )
        .await;
        release_switch(&self.db).await;
    }

    /// The OpenFlow connection closed: reconnects (every 50 ms for up to a second; the loop
    /// calls again while ovs-vswitchd stays away), then repairs the switch.
    async fn reconnect(&self) {
        let give_up = tokio::time::Instant::now() + Duration::from_secs(1);
        loop {
            match self.switch.client().await {
                Ok(_) => {
                    crate::metrics::metrics()
                        .reconnects
                        .with_label_values(&["openflow"])
                        .inc();
                    self.repair_switch().await;
                    return;
                }
                Err(e) if tokio::time::Instant::now() >= give_up => {
                    tracing::debug!(error = %e, "ovs-vswitchd still unreachable");
                    return;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Runs until `shutdown` resolves: repairs at once what it learns drifted (flows changed by
    /// others, from the flow monitor; pod ports and QoS rows, from the OVSDB monitor; a closed
    /// OpenFlow connection, i.e. ovs-vswitchd restarted), and reconciles everything every 30 s
    /// (the first time 30 s after start, which already reconciled) as the safety net.
    pub async fn run_until(&self, shutdown: impl std::future::Future<Output = ()>) {
        use tokio::time::{interval_at, Instant};
        tokio::pin!(shutdown);
        let mut seen = self.switch.generation();
        let period = Duration::from_secs(30);
        let mut tick = interval_at(Instant::now() + period, period);
        let mut fast = tokio::time::interval(Duration::from_secs(1));
        let mut db_changes = self.db.watch_cache();
        db_changes.mark_unchanged();
        let mut state = self.state.clone();
        state.mark_unchanged();
        let mut had_cluster_network = state.borrow().cluster_network.is_some();
        let mut db_state = self.db.watch_state();
        db_state.mark_unchanged();
        let health = self.observer.health.clone();
        loop {
            health.beat();
            tokio::select! {
                _ = &mut shutdown => return,
                Ok(()) = db_state.changed() => {
                    if *db_state.borrow_and_update() == ovsdb::ConnectionState::Connected {
                        crate::metrics::metrics()
                            .reconnects
                            .with_label_values(&["ovsdb"])
                            .inc();
                    }
                }
                Ok(()) = state.changed() => {
                    let has = state.borrow_and_update().cluster_network.is_some();
                    if had_cluster_network && !has {
                        tracing::error!(
                            "the ClusterNetwork \"default\" is gone from the cluster state: this node keeps \
                             running with the network it started with, but it cannot start again \
                             until the ClusterNetwork is back"
                        );
                    } else if !had_cluster_network && has {
                        tracing::info!("the ClusterNetwork \"default\" is back");
                    }
                    had_cluster_network = has;
                    self.apply_state().await;
                }
                updates = self.switch.drifted() => {
                    // A del-flows comes in several batches: take the burst as one repair.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let mut all = updates;
                    all.extend(self.switch.take_drift());
                    let shown: Vec<String> = all.iter().take(5).map(ToString::to_string).collect();
                    self.repair("flow-drift", &format!(
                        "{} flow change(s) behind the agent's back: {}{}",
                        all.len(),
                        shown.join(", "),
                        if all.len() > shown.len() { ", ..." } else { "" }
                    ))
                    .await;
                }
                Ok(()) = db_changes.changed() => {
                    // Coalesce a burst of OVSDB updates (a pod ADD is several).
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    db_changes.mark_unchanged();
                    self.pods.repair_ports().await;
                }
                () = self.switch.lost() => {
                    self.reconnect().await;
                    seen = self.switch.generation();
                }
                _ = tick.tick() => {
                    self.repair("periodic", "periodic").await;
                    self.pods.repair_ports().await;
                }
                _ = fast.tick() => {
                    // Probe the connection; a re-open elsewhere bumps the generation.
                    let _ = self.switch.client().await;
                    let g = self.switch.generation();
                    if g != seen {
                        seen = g;
                        crate::metrics::metrics()
                            .reconnects
                            .with_label_values(&["openflow"])
                            .inc();
                        self.repair_switch().await;
                    }
                }
            }
        }
    }

    /// Stops serving: removes the socket, so the shim answers "try again later" (and STATUS
    /// "not available") until an agent serves again. The CNI config files stay: a runtime that
    /// lost them would report the node's network as not ready and could not even stop
    /// sandboxes during a restart or an upgrade (`sdn-agent remove-cni-config` removes them
    /// when the node leaves for good). Pods, ports and flows stay: a restart picks them up with
    /// no data-plane gap.
    pub async fn stop(mut self) {
        if let Some(m) = self.maintenance.take() {
            m.abort();
        }
        self.observer.health.stopped_serving();
        if let Some(s) = self.server.take() {
            s.shutdown(Duration::from_secs(5)).await;
        }
        for e in self.endpoints.drain(..) {
            e.abort();
        }
    }
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
fn pool_size(cfg: &Config, netlink: &Netlink) -> usize {
    if cfg.port_pool_size == 0 {
        return 0;
    }
    let pin = pool_netns_pin(cfg);
    netlink.set_pool_netns(pin.clone());
    if crate::netlink::is_pinned_netns(&pin) {
        return cfg.port_pool_size;
    }
    match crate::netlink::pin_outlives_agent(&pin) {
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
async fn configure_tun0(node: &NodeConfig, mtu: u32) -> Result<()> {
    let netlink = Netlink::new().context("opening rtnetlink")?;
    let mut routes: Vec<Ipv4Net> = node.cluster_networks.clone();
    routes.push(node.service_cidr);
    let gw_addr = Ipv4Net::new(node.gateway(), node.local_subnet.prefix_len())?;
    netlink
        .configure_gateway("tun0", gw_addr, mtu, &routes)
        .await
        .context("configuring tun0")?;
    crate::netlink::set_sysctl("net/ipv4/conf/tun0/arp_announce", "2")
        .context("setting net.ipv4.conf.tun0.arp_announce=2 (ARP from the gateway address)")?;
    Ok(())
}

/// Node teardown: removes the CNI network config files an agent with network `name` writes in
/// `dir` (`10-<name>.conflist` and the tenant networks' `20-<name>-<namespace>.conflist`).
/// Returns the files removed.
pub fn remove_cni_configs(dir: &Path, name: &str) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    let main = format!("10-{name}.conflist");
    let tenant = format!("20-{name}-");
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        if file == main || (file.starts_with(&tenant) && file.ends_with(".conflist")) {
            let path = entry.path();
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            removed.push(path);
        }
    }
    removed.sort();
    Ok(removed)
}

/// Removes a CNI network config file (missing is fine).
fn remove_conf(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(file = %path.display(), error = %e, "removing a CNI config");
        }
    }
}

/// Writes a CNI network config file `name` (atomically: temp file + rename); with `namespace`,
/// the plugin puts every container of that network into that namespace (tenant).
fn write_conf(path: &Path, cfg: &Config, name: &str, namespace: Option<&str>) -> Result<()> {
    let mut plugin = serde_json::json!({
        "type": "sdn-cni",
        "socket": cfg.cni_socket,
        "capabilities": {"portMappings": true, "bandwidth": true},
    });
    if let Some(ns) = namespace {
        plugin["namespace"] = ns.into();
    }
    let conf = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [plugin],
    });
    let bytes = serde_json::to_vec_pretty(&conf)?;
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let dir = path.parent().context("CNI conf path has no directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The CNI handler: requests to pod operations.
#[derive(Debug)]
struct AgentHandler {
    pods: Arc<Pods>,
    view: Arc<NodeView>,
}

impl AgentHandler {
    /// Code 11 at once while Open vSwitch is known to be down: the request would only wait for
    /// it (up to the request deadline) and fail; the runtime retries later.
    async fn ovs_up(&self) -> Result<(), CniError> {
        match self.view.ovs_known_down().await {
            None => Ok(()),
            Some(why) => Err(CniError::new(
                crate::cni::codes::TRY_AGAIN_LATER,
                format!("Open vSwitch is down, try again later: {why}"),
                "the agent answers this as soon as OVSDB and br0 are reachable again (sdnctl status, /readyz)",
            )),
        }
    }
}

impl cni::Handler for AgentHandler {
    async fn add(&self, req: Request) -> Result<AddResult, CniError> {
        self.ovs_up().await?;
        let mut at = cni::attach::attachment(&req);
        let chained = cni::chain::chained_after(&self.view.config.cni_conf_dir, &req.config.name);
        if let Some(plugin) = cni::chain::needs_veth(&chained) {
            tracing::debug!(network = %req.config.name, %plugin, "a chained plugin needs a veth: no pool port for this pod");
            at.plain_veth_for = Some(plugin.to_string());
        }
        let wired = self.pods.add(&at).await?;
        Ok(cni::attach::add_result(&req, self.pods.network(), &wired))
    }

    async fn del(&self, req: Request) -> Result<(), CniError> {
        self.ovs_up().await?;
        let at = cni::attach::attachment(&req);
        Ok(self.pods.del(&at.id).await?)
    }

    async fn check(&self, req: Request) -> Result<(), CniError> {
        self.ovs_up().await?;
        Ok(self.pods.check(&cni::attach::attachment(&req)).await?)
    }

    async fn gc(&self, req: Request) -> Result<(), CniError> {
        let Some(list) = req.config.valid_attachments.as_ref() else {
            return Err(CniError::new(
                crate::cni::codes::INVALID_CONFIG,
                "GC without cni.dev/valid-attachments: refusing to remove every attachment",
                "the runtime must list the attachments to keep (an empty list removes all)",
            ));
        };
        let valid: BTreeSet<flows::AttachmentId> = list
            .iter()
            .map(|a| flows::AttachmentId::new(a.container_id.clone(), a.ifname.clone()))
            .collect();
        let removed = self.pods.gc(&valid).await?;
        tracing::info!(removed, valid = valid.len(), "GC done");
        Ok(())
    }

    /// Ready as `/readyz` is ready (one definition, see `observe`): the first failing check
    /// is the error, with every check in the details.
    async fn status(&self, _req: Request) -> Result<(), CniError> {
        let checks = self.view.readiness(false).await;
        match checks.iter().find(|c| !c.ok) {
            None => Ok(()),
            Some(bad) => Err(CniError::new(
                crate::cni::codes::PLUGIN_NOT_AVAILABLE,
                format!("not ready: {}: {}", bad.name, bad.detail),
                checks
                    .iter()
                    .map(|c| {
                        format!(
                            "{} {}: {}",
                            c.name,
                            if c.ok { "ok" } else { "failed" },
                            c.detail
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
            )),
        }
    }
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
async fn release_switch(db: &ovs::ovsdb::Client) {
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
