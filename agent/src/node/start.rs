//! The start-up sequence, in the order the node needs (see the node module's docs), up to
//! serving: the CNI server, the CNI config file that announces readiness, the local API.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::error::{bail, Result, Step};
use flows::{base_flows, NodeConfig};

use crate::bridge::flowstore::{Change, FlowStore, Owner, ReconcileStats};
use crate::bridge::switch::Switch;
use crate::cni::{self};
use crate::features::{self, Reason};
use crate::host::ipam;
use crate::host::iptables::Iptables;
use crate::host::netlink::Netlink;
use crate::operator::observe::{NodeView, Observer};
use crate::pod::{PodIo, PodNetwork, Pods};

use super::bridge_setup::{name_tables, release_switch, set_up_bridge, set_up_host};
use super::cni_handler::AgentHandler;
use super::conflist::write_conf;
use super::*;

/// How long a starting agent that serves already waits for ovs-vswitchd to answer OpenFlow
/// (a long reconfiguration, a restart beside the agent) before it gives up.
const OPENFLOW_GRACE: Duration = Duration::from_secs(60);

impl Daemon {
    /// Runs the start-up sequence and starts serving. Returns when the node is ready. Each
    /// step is a function below, in the order the node needs (see the module docs of
    /// [`super`]); every one is idempotent, so a second start changes nothing.
    pub async fn start(cfg: Config) -> Result<Daemon> {
        // Health first: /livez answers and /readyz says which step start-up is in, however
        // long the steps below wait (for the HostSubnet, for OVS).
        let observer = Observer::default();
        let health = observer.health.clone();
        let endpoints = serve_health(&cfg, &observer).await?;
        refuse_policies_without_kubernetes(&cfg)?;
        health.phase("loading the cluster state");
        let (source, state) = load_cluster_state(&cfg, &health).await?;
        let mut node = node_config(&cfg, &state.borrow().clone())?;
        let mut clock = Phases::started();
        tracing::info!(
            node = %cfg.node_name,
            subnet = %node.ipv4.as_ref().map_or_else(|| "none".into(), |v4| v4.local_subnet.to_string()),
            gateway = %node.gateway().map_or_else(|| "none".into(), |g| g.to_string()),
            subnet6 = %node.ipv6.as_ref().map_or_else(|| "none".into(), |v6| v6.local_subnet.to_string()),
            node_ip = %node.node_ip, mode = node.mode.name(), "starting"
        );

        health.phase("connecting to OVSDB and setting up br0");
        let db = super::ovs_wait::connect(&cfg, &health).await?;
        clock.mark("ovsdb");
        // A node openshift-sdn ran is taken over (or refused) before anything on it changes.
        health.phase("looking for openshift-sdn's state on br0");
        let takeover = look_for_openshift_sdn(&db, &cfg, &mut node).await?;
        set_up_bridge(&db, &cfg, &node).await?;
        clock.mark("ovs ports");

        // OpenFlow: connected while the host side is set up (ovs-vswitchd answers between two
        // reconfigurations, which take a while on a node with 1000 ports).
        let switch = Arc::new(Switch::new(&cfg.bridge_mgmt));
        let connecting = tokio::spawn({
            let switch = switch.clone();
            async move { switch.client().await.map(drop) }
        });
        health.phase("configuring tun0 and the host rules");
        let netlink = set_up_host(&node, cfg.mtu).await?;
        warn_if_the_underlay_is_too_small(&netlink, &node, cfg.mtu).await;
        clock.mark("host");
        if let Err(e) = name_tables(&db, &cfg).await {
            connecting.abort();
            return Err(e);
        }
        clock.mark("openflow");

        let flow_store = Arc::new(FlowStore::new(
            switch.clone(),
            node.mode == flows::Mode::Multitenant,
        ));
        // The features, with the host rules some keep (egress IPs) in place before the pod
        // table is rebuilt; their rows are staged once the pods are known.
        let table: Arc<std::sync::OnceLock<Arc<Pods>>> = Arc::default();
        let features = register_features(&cfg, &node, &flow_store, &netlink, &state, &table);
        features.prepare_host().await.map_err(|(name, e)| {
            super::error::NodeError::Refused(format!(
                "installing the host rules of {name}: {}",
                features::contract::chain(e.as_ref())
            ))
        })?;
        let (pods, found) = take_pods_back(
            &cfg,
            &node,
            &db,
            &flow_store,
            &netlink,
            &state,
            takeover.as_ref(),
            &health,
            &mut clock,
        )
        .await?;
        let _ = table.set(pods.clone());
        let staged = stage_features(&features, &pods).await?;
        let base = base_flows(&node);
        flow_store
            .stage(Change::new().set(Owner::Base, base.clone()))
            .await;
        let mut n = Daemon {
            conf_file: cfg
                .cni_conf_dir
                .join(format!("10-{}.conflist", cfg.cni_network_name)),
            config: cfg,
            node,
            pods,
            switch,
            store: flow_store,
            features,
            db,
            base,
            server: None,
            tenant_confs: std::sync::Mutex::default(),
            maintenance: None,
            state,
            cluster: source,
            observer,
            endpoints,
        };
        clock.mark("pool and leases");
        // Ready before the whole-bridge reconcile: the pod table, the pool and the leases are
        // known, and the bridge still holds the flows of every running pod (ovs-vswitchd kept
        // them; a switch that restarted does not forward until `release_switch`). A request
        // that changes flows meanwhile waits for the reconcile in the flow store (it holds the
        // store from dump to bundle), and a warm ADD needs no flow change at all.
        n.serve().await?;
        clock.mark("serving");
        // Our CNI config and host rules are in place: openshift-sdn's go.
        let cleaned = match &takeover {
            Some(_) => takeover::Found::clean_up(&n.config.cni_conf_dir, &n.config.ipam_dir)
                .await
                .step("removing what openshift-sdn left")?,
            None => Vec::new(),
        };
        n.await_openflow(connecting).await?;
        // What the features' rows need before the first reconcile (the list of every pod of
        // the cluster, for network policies' peers).
        n.features.settle().await;
        clock.mark("settled");
        let stats = n.first_reconcile().await?;
        clock.mark("flows");
        found.log(&stats, &staged, &clock);
        if let (Some(t), Some(adopted)) = (&takeover, &found.adopted) {
            t.log_adopted(adopted, &cleaned, clock.began.elapsed());
        }
        return_free_memory();
        n.start_background();
        Ok(n)
    }

    /// The node serves already: an ovs-vswitchd that is slow to answer (a long
    /// reconfiguration) gets [`OPENFLOW_GRACE`] before the agent gives up.
    async fn await_openflow(
        &self,
        connecting: tokio::task::JoinHandle<Result<(), ovs::openflow::OfError>>,
    ) -> Result<()> {
        let mut connected = connecting.await.step("the OpenFlow connect task failed")?;
        let give_up = tokio::time::Instant::now() + OPENFLOW_GRACE;
        while let Err(e) = connected {
            if tokio::time::Instant::now() >= give_up {
                return Err(e).with_step(|| {
                    format!("opening OpenFlow to {}", self.config.bridge_mgmt.display())
                });
            }
            tracing::warn!(bridge = %self.config.bridge_mgmt.display(), error = %e, "ovs-vswitchd has not answered OpenFlow yet; retrying");
            tokio::time::sleep(Duration::from_millis(200)).await;
            connected = self.switch.client().await.map(drop);
        }
        Ok(())
    }

    /// Meters no pod uses go, then the whole desired flow set is diffed against br0 in one
    /// bundle; a switch that restarted while the agent was away waits for the pipeline (see
    /// [`release_switch`]): it is complete now.
    async fn first_reconcile(&self) -> Result<ReconcileStats> {
        self.pods.remove_stray_meters().await.map_err(|e| {
            super::error::NodeError::Refused(format!(
                "removing stray egress meters: {e} {}",
                e.details()
            ))
        })?;
        // ovs-vswitchd restarting meanwhile (a node upgrade restarts it beside the agent)
        // closes the connection under the reconcile: once it answers again (within
        // `OPENFLOW_GRACE`, as for `await_openflow`), the whole desired set goes in anew.
        // Any other failure stops the agent, as before.
        // A live trace the last agent ran when it died: its rows go now (they would go by their
        // hard timeout anyway; the reconcile leaves a trace's rows alone).
        let (cookie, mask) = flows::live_trace::ALL_TRACES;
        if let Err(e) = self
            .switch
            .bundle(&[ovs::openflow::BundleMsg::delete_by_cookie(cookie, mask)])
            .await
        {
            tracing::warn!(error = %e, "the rows of live traces that a previous agent left could not be swept; they remove themselves within {} s", flows::live_trace::HARD_TIMEOUT);
        }
        let give_up = tokio::time::Instant::now() + OPENFLOW_GRACE;
        let stats = loop {
            match self.reconcile_for(Reason::Start).await {
                Ok(stats) => break stats,
                Err(e)
                    if tokio::time::Instant::now() < give_up && !self.switch.connected().await =>
                {
                    tracing::warn!(error = %crate::features::contract::chain(&e), "ovs-vswitchd went away during the first reconcile; retrying once it answers");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e).step("reconciling the flows of br0"),
            }
        };
        release_switch(&self.db).await;
        Ok(stats)
    }

    /// The tasks that run while the node does: the port pool, filled and kept full (ADDs
    /// meanwhile add their own ports, so readiness does not wait for ovs-vswitchd to take a
    /// batch of ports), and the features' (egress IP node probes, dnsName lookups, the policy
    /// rebuilds).
    fn start_background(&mut self) {
        let pods = self.pods.clone();
        let task = tokio::spawn(async move {
            pods.reap_dead_ports().await;
            pods.refill_pool().await;
            pods.maintain_ports().await
        });
        self.observer.health.maintenance(task.abort_handle());
        self.maintenance = Some(task);
        let tasks = self.features.start_background();
        self.endpoints.extend(tasks);
        // Another node's live traces of packets to this node's pods (after the first reconcile,
        // whose sweep of trace rows would take an early one's).
        if let Some(view) = self.observer.view() {
            self.endpoints
                .push(tokio::spawn(crate::operator::trace::answer_forever(view)));
        }
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
            features: self.features.clone(),
        });
        self.observer.set_view(view.clone());
        self.endpoints
            .push(tokio::spawn(view.clone().watch_health()));
        self.endpoints.push(
            crate::operator::api::serve(&self.config.api_socket(), view.clone())
                .await
                .step("serving the local API")?,
        );
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
            .with_step(|| {
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

/// Where start-up time goes, for the "br0 reconciled" line: each phase and the milliseconds
/// since the start at its end.
#[derive(Debug)]
pub(super) struct Phases {
    began: std::time::Instant,
    marks: Vec<(&'static str, u128)>,
}

impl Phases {
    fn started() -> Phases {
        Phases {
            began: std::time::Instant::now(),
            marks: Vec::new(),
        }
    }

    fn mark(&mut self, phase: &'static str) {
        self.marks.push((phase, self.began.elapsed().as_millis()));
    }

    fn shown(&self) -> String {
        let marks: Vec<String> = self
            .marks
            .iter()
            .map(|(p, ms)| format!("{p}:{ms}"))
            .collect();
        marks.join(",")
    }
}

/// The metrics and health endpoint, when `metricsAddress` names one.
async fn serve_health(
    cfg: &Config,
    observer: &Observer,
) -> Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut endpoints = Vec::new();
    if let Some(addr) = cfg.metrics_address() {
        let task = observer.serve(addr).await;
        endpoints.push(task.step("serving metrics and health")?);
    }
    Ok(endpoints)
}

/// openshift-sdn's state on the node, if it ran it: taken over (or refused) before anything
/// changes; tun0 keeps the MAC openshift-sdn gave it.
async fn look_for_openshift_sdn(
    db: &ovs::ovsdb::Client,
    cfg: &Config,
    node: &mut NodeConfig,
) -> Result<Option<takeover::Found>> {
    let found = takeover::inspect(
        db,
        &cfg.bridge_mgmt,
        &cfg.cni_conf_dir,
        node,
        cfg.force_takeover,
    )
    .await
    .step("taking the node over from openshift-sdn")?;
    node.tun0_mac = takeover::kept_tun0_mac(db, found.as_ref());
    Ok(found)
}

/// NetworkPolicies, namespace labels and pod labels come from the Kubernetes API; a standalone
/// node would run without any policy, isolating nothing, silently.
fn refuse_policies_without_kubernetes(cfg: &Config) -> Result<()> {
    if cfg.mode == flows::Mode::NetworkPolicy
        && matches!(cfg.cluster_state, ClusterStateSource::Standalone(_))
    {
        bail!(
            "mode networkpolicy needs clusterState: kubernetes (NetworkPolicies, namespace and \
             pod labels come from the API server; a standalone state directory holds none, so \
             no pod would be isolated): use multitenant for a standalone node"
        );
    }
    Ok(())
}

/// The cluster state: a standalone directory (seeded with this node's HostSubnet), or the
/// Kubernetes API, whose ClusterNetwork must say what this agent's settings say.
async fn load_cluster_state(
    cfg: &Config,
    health: &crate::operator::observe::Health,
) -> Result<(
    Arc<dyn ClusterSource>,
    tokio::sync::watch::Receiver<Arc<ClusterState>>,
)> {
    match &cfg.cluster_state {
        ClusterStateSource::Standalone(dir) => {
            cluster::seed(
                dir,
                &cfg.node_name,
                cfg.node_ip,
                &cluster::ClusterNetworkSpec::from_config(cfg)
                    .step("reading the cluster network settings")?,
            )
            .with_step(|| format!("preparing the cluster state in {}", dir.display()))?;
            let src = cluster::StandaloneSource::start(dir, cluster::DEFAULT_POLL_INTERVAL)
                .with_step(|| format!("watching the cluster state in {}", dir.display()))?;
            let rx = src.subscribe();
            Ok((Arc::new(src), rx))
        }
        ClusterStateSource::Kubernetes => {
            let client = cluster::kube::client(cfg.kubeconfig.as_deref())
                .await
                .step("connecting to the Kubernetes API")?;
            let src = cluster::kube::KubeSource::start(
                client,
                &cfg.node_name,
                cfg.mode == flows::Mode::NetworkPolicy,
                Duration::from_secs(60),
            )
            .await
            .step("watching the cluster state in the Kubernetes API")?;
            health.phase("waiting for this node's HostSubnet (the controller creates it)");
            src.wait_for_host_subnet(
                &cfg.node_name,
                Duration::from_secs(cfg.host_subnet_wait_seconds),
            )
            .await
            .step("waiting for this node's HostSubnet")?;
            // The agent and the controller must agree on the network (same ConfigMap).
            if let Some(cn) = &src.current().cluster_network {
                let spec = cluster::ClusterNetworkSpec::from_config(cfg)
                    .step("reading the cluster network settings")?;
                if let Some((field, in_cluster, in_config)) = spec.difference(cn) {
                    bail!(
                        "the cluster's ClusterNetwork default has {field} {in_cluster}, this \
                         agent's configuration says {in_config}; give the agent the \
                         controller's settings (a live cluster network is never changed)"
                    );
                }
            }
            let rx = src.subscribe();
            Ok((Arc::new(src), rx))
        }
    }
}

/// What start-up found of the pods, the pool and the leases, for the "br0 reconciled" line.
#[derive(Debug)]
struct Found {
    /// Pods rebuilt from their ports' records.
    kept: usize,
    /// Pods whose netns or veth was gone.
    removed: usize,
    /// Pool ports kept.
    pool_kept: usize,
    /// Stale pool ports queued for deletion.
    pool_deleted: usize,
    /// Leases no pod holds, released.
    orphans: usize,
    /// openshift-sdn's pods, when the node was taken over.
    adopted: Option<takeover::Adopted>,
}

impl Found {
    fn log(&self, stats: &ReconcileStats, staged: &[(&'static str, usize)], clock: &Phases) {
        tracing::info!(
            pods = self.kept,
            stale_pods_removed = self.removed,
            orphan_leases_released = self.orphans,
            pool_ports = self.pool_kept,
            stale_ports_queued_for_deletion = self.pool_deleted,
            staged = %staged.iter().map(|(f, n)| format!("{f}:{n}")).collect::<Vec<_>>().join(","),
            flows = stats.desired,
            added = stats.added,
            groups = stats.groups,
            deleted = stats.deleted,
            refused = stats.refused.len(),
            ms_at_end_of = %clock.shown(),
            "br0 reconciled"
        );
    }
}

/// The pods: openshift-sdn's adopted first (a takeover), then the pod table rebuilt from the
/// pod ports' records, the port pool and the leases taken back.
#[allow(clippy::too_many_arguments)]
async fn take_pods_back(
    cfg: &Config,
    node: &NodeConfig,
    db: &ovs::ovsdb::Client,
    flow_store: &Arc<FlowStore<Switch>>,
    netlink: &Netlink,
    state: &tokio::sync::watch::Receiver<Arc<ClusterState>>,
    takeover: Option<&takeover::Found>,
    health: &crate::operator::observe::Health,
    clock: &mut Phases,
) -> Result<(Arc<Pods>, Found)> {
    let store = ipam::Store::new(&cfg.ipam_dir, &cfg.cni_network_name)
        .with_step(|| format!("lease directory {}", cfg.ipam_dir.display()))?;
    // openshift-sdn's pods become ours before the pod table is rebuilt from the records.
    let adopted = match takeover {
        Some(found) => Some(
            found
                .adopt(db, &state.borrow().clone(), &store, &cfg.ipam_dir, node)
                .await
                .step("adopting openshift-sdn's pods")?,
        ),
        None => None,
    };
    let net = PodNetwork {
        node: node.clone(),
        mtu: cfg.mtu,
        tx_checksum_off: cfg.pod_tx_checksum_off(),
        netnamespace_wait: Duration::from_secs(cfg.netnamespace_wait_seconds),
        egress_meters: cfg.datapath_type == flows::Datapath::Netdev,
        port_pool_size: pool_size(cfg, netlink),
    };
    let io = PodIo {
        db: db.clone(),
        store: flow_store.clone(),
        links: netlink.clone(),
        nat: Iptables::host(),
    };
    let pods = Arc::new(Pods::new(net, io, Arc::new(store), state.clone()));
    clock.mark("setup");
    health.phase("rebuilding the pod table from OVS");
    let (kept, removed) = pods.rebuild_from_ovs().await.map_err(|e| {
        super::error::NodeError::Refused(format!(
            "rebuilding the pod table from OVS: {e} {}",
            e.details()
        ))
    })?;
    clock.mark("pods");
    let restored = pods.restore_pool().await.map_err(|e| {
        super::error::NodeError::Refused(format!("restoring the port pool: {e} {}", e.details()))
    })?;
    if takeover.is_some() || (restored.kept == 0 && kept > 0) {
        // Pods run here and no pool was kept (a takeover, or the first start of the agent on
        // a node with pods): no new link on the node until the runtime asks for a pod (see the
        // pool's docs). Held before the CNI server serves, so the first ADD's demand is never
        // overwritten.
        pods.pool().hold_until_demand();
    }
    let orphans = pods
        .release_orphan_leases(&restored.warm_leases, true)
        .await
        .map_err(|e| {
            super::error::NodeError::Refused(format!(
                "releasing orphan leases: {e} {}",
                e.details()
            ))
        })?;
    let found = Found {
        kept,
        removed,
        pool_kept: restored.kept,
        pool_deleted: restored.queued,
        orphans,
        adopted,
    };
    Ok((pods, found))
}

/// The node's features (`features::register`). Those that build rows per local pod read the
/// pod table through `table`, set once the pods are taken back.
fn register_features(
    cfg: &Config,
    node: &NodeConfig,
    flow_store: &Arc<FlowStore<Switch>>,
    netlink: &Netlink,
    state: &tokio::sync::watch::Receiver<Arc<ClusterState>>,
    table: &Arc<std::sync::OnceLock<Arc<Pods>>>,
) -> features::Features {
    let table = table.clone();
    let local_pods: crate::features::network_policy::LocalPods = Arc::new(move || {
        let table = table.clone();
        Box::pin(async move {
            let Some(pods) = table.get() else {
                return Vec::new();
            };
            pods.list()
                .await
                .into_iter()
                .map(|p| crate::features::network_policy::LocalPodRef {
                    port: p.host_veth,
                    ofport: p.ofport,
                    namespace: p.namespace,
                    name: p.name,
                    ip: p.ip,
                    ip6: p.ip6,
                })
                .collect()
        })
    });
    features::register(&features::Context {
        store: flow_store.clone(),
        state: state.clone(),
        node: node.clone(),
        config: cfg.clone(),
        netlink: netlink.clone(),
        local_pods,
        ovs_run_dir: cfg
            .bridge_mgmt
            .parent()
            .unwrap_or(Path::new("/run/openvswitch"))
            .to_path_buf(),
    })
}

/// Every feature's rows staged for the first reconcile; the pod logic gets the features' pod
/// hooks. Returns each feature's count, by name.
async fn stage_features(
    all: &features::Features,
    pods: &Arc<Pods>,
) -> Result<Vec<(&'static str, usize)>> {
    let staged = all.stage().await.map_err(|(name, e)| {
        super::error::NodeError::Refused(format!(
            "staging {name}: {}",
            features::contract::chain(e.as_ref())
        ))
    })?;
    // Every later ADD asks the features' pod hooks (network policies) for its own rows.
    for policy in all.pod_policies() {
        pods.set_policy(policy);
    }
    Ok(staged)
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

/// VXLAN's cost per packet on the underlay: outer IP (20 bytes, 40 in IPv6), UDP (8), VXLAN (8)
/// and the inner Ethernet header (14).
pub(crate) fn vxlan_overhead(underlay: std::net::IpAddr) -> u32 {
    if underlay.is_ipv6() {
        70
    } else {
        50
    }
}

/// Says so when the interface of the node IP cannot carry the pods' largest packets over VXLAN
/// (`mtu` plus [`vxlan_overhead`]): such packets between nodes would be dropped. A warning, not
/// a refusal: a node IP on no interface (a one-machine node) or a path MTU the agent cannot see
/// is common, and the pods keep working for smaller packets.
async fn warn_if_the_underlay_is_too_small(netlink: &Netlink, node: &NodeConfig, mtu: u32) {
    let Ok(Some(link)) = netlink.egress_link(node.node_ip).await else {
        return;
    };
    let need = mtu + vxlan_overhead(node.node_ip);
    if link.mtu < need {
        tracing::warn!(
            node_ip = %node.node_ip, interface = %link.name, interface_mtu = link.mtu, mtu,
            "mtu {mtu} and {} bytes of VXLAN over IPv{} need an underlay MTU of {need}, but {} has {}: pods' larger packets between nodes are dropped; set mtu to at most {}",
            vxlan_overhead(node.node_ip),
            if node.node_ip.is_ipv6() { 6 } else { 4 },
            link.name,
            link.mtu,
            link.mtu.saturating_sub(vxlan_overhead(node.node_ip))
        );
    }
}
