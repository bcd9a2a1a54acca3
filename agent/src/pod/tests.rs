//! Component tests of the pod logic on the fakes of `crate::bridge::fake` (no root, no OVS): ADD and its
//! rollback at every step, DEL with pieces missing, GC, the rebuild after a restart, VNID
//! re-flows (also during an ADD), CHECK, meters lost by the switch, and bad input. Every real
//! seam is also exercised against real OVS, netlink and iptables in `tests/`.
//!
//! Why one piece: one rig (every fake, a node's pod manager) serves every scenario.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use flows::{vnid_cookie, AttachmentId, Mode, NodeConfig, Vnid};
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;

use super::record::PortRecord;
use super::{Attachment, PodIo, PodNetwork, Pods};
use crate::bridge::fake::{FakeDb, FakeIo, FakeLinks, FakeNat, FakeSwitch};
use crate::bridge::flowstore::FlowStore;
use crate::bridge::seams::{PodLinks, PortDb};
use crate::cni::{codes, CniError};
use crate::features::hostports;
use crate::host::ipam;
use crate::host::netlink::host_veth_name;
use cluster::{ClusterObject, ClusterState, NetNamespace};

/// One node's pods on fakes, with handles on every fake.
struct Rig {
    pods: Pods<FakeIo>,
    links: FakeLinks,
    db: Arc<FakeDb>,
    switch: Arc<FakeSwitch>,
    store: Arc<FlowStore<FakeSwitch>>,
    nat: Arc<FakeNat>,
    ipam: Arc<ipam::Store>,
    state: watch::Sender<Arc<ClusterState>>,
    dir: PathBuf,
    egress_meters: bool,
    pool: usize,
    ipv6: Option<flows::ipv6::NodeIpv6>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn vnid(v: u32) -> Vnid {
    Vnid::new(v).unwrap()
}

fn cluster(netids: &[(&str, u32)]) -> ClusterState {
    let mut st = ClusterState::default();
    for (ns, id) in netids {
        st.insert(ClusterObject::NetNamespace(NetNamespace::new(ns, *id)));
    }
    st
}

fn network(egress_meters: bool) -> PodNetwork {
    PodNetwork {
        node: NodeConfig {
            datapath: flows::Datapath::Netdev,
            mode: Mode::Multitenant,
            node_ip: Ipv4Addr::new(192, 168, 77, 11).into(),
            ipv4: Some(flows::NodeIpv4 {
                local_subnet: "10.128.0.0/23".parse().unwrap(),
                cluster_networks: vec!["10.128.0.0/14".parse().unwrap()],
                service_cidr: "172.30.0.0/16".parse().unwrap(),
            }),
            vxlan_port: 4789,
            tun0_mac: None,
            ipv6: None,
        },
        mtu: 1450,
        tx_checksum_off: true,
        netnamespace_wait: Duration::from_millis(200),
        egress_meters,
        port_pool_size: 0,
    }
}

/// [`network`] with a pool of `pool` ports and, when given, the node's IPv6 network.
fn rig_network(
    egress_meters: bool,
    pool: usize,
    ipv6: Option<flows::ipv6::NodeIpv6>,
) -> PodNetwork {
    let mut net = network(egress_meters);
    net.port_pool_size = pool;
    net.node.ipv6 = ipv6;
    net
}

/// The IPv6 network of a dual-stack rig.
fn dual_stack() -> flows::ipv6::NodeIpv6 {
    flows::ipv6::NodeIpv6 {
        local_subnet: "fd01:0:0:5::/64".parse().unwrap(),
        cluster_network: "fd01::/48".parse().unwrap(),
        service_cidr: None,
    }
}

impl Rig {
    fn new(egress_meters: bool) -> Rig {
        Rig::build(egress_meters, 0)
    }

    /// A rig whose pods keep `pool` ports ready.
    fn with_pool(pool: usize) -> Rig {
        Rig::build(false, pool)
    }

    /// A dual-stack rig whose pods keep `pool` ports ready.
    fn dual_with_pool(pool: usize) -> Rig {
        Rig::build_with(false, pool, Some(dual_stack()))
    }

    fn build(egress_meters: bool, pool: usize) -> Rig {
        Rig::build_with(egress_meters, pool, None)
    }

    fn build_with(egress_meters: bool, pool: usize, ipv6: Option<flows::ipv6::NodeIpv6>) -> Rig {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "sdn-pod-tests-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        ));
        let links = FakeLinks::new();
        let db = Arc::new(FakeDb::new(links.clone()));
        let switch = Arc::new(FakeSwitch::new());
        let store = Arc::new(FlowStore::new(switch.clone(), true));
        let nat = Arc::new(FakeNat::new());
        let ipam = Arc::new(ipam::Store::new(&dir, "sdn").unwrap());
        let (state, rx) = watch::channel(Arc::new(cluster(&[
            ("default", 0),
            ("tenant-a", 11),
            ("tenant-b", 12),
        ])));
        let pods = Pods::new(
            rig_network(egress_meters, pool, ipv6),
            PodIo {
                db: db.clone(),
                store: store.clone(),
                links: links.clone(),
                nat: nat.clone(),
            },
            ipam.clone(),
            rx,
        );
        Rig {
            pods,
            links,
            db,
            switch,
            store,
            nat,
            ipam,
            state,
            dir,
            egress_meters,
            pool,
            ipv6,
        }
    }

    /// The agent restarted: a new pod table and flow store on the same node (same OVS, links,
    /// leases and iptables).
    fn restarted(&self) -> Pods<FakeIo> {
        Pods::new(
            rig_network(self.egress_meters, self.pool, self.ipv6),
            PodIo {
                db: self.db.clone(),
                store: self.store_after_restart(),
                links: self.links.clone(),
                nat: self.nat.clone(),
            },
            self.ipam.clone(),
            self.state.subscribe(),
        )
    }

    fn store_after_restart(&self) -> Arc<FlowStore<FakeSwitch>> {
        Arc::new(FlowStore::new(self.switch.clone(), true))
    }

    fn attachment(&self, cid: &str, namespace: &str) -> Attachment {
        let netns = self.links.add_netns(cid);
        Attachment {
            id: AttachmentId::new(cid, "eth0"),
            netns: Some(netns),
            namespace: namespace.into(),
            pod: format!("pod-{cid}"),
            requested_ip: None,
            requested_ip6: None,
            runtime_config: None,
            prev_result: None,
            deadline: Instant::now() + Duration::from_secs(10),
            plain_veth_for: None,
        }
    }

    /// Puts an `eth0` (veth `host`) into the attachment's netns before its ADD, so the ADD
    /// fails after it took its port.
    async fn squat_eth0(&self, at: &Attachment, host: &str) {
        crate::bridge::seams::PodLinks::create_pod_link(
            &self.links,
            &crate::host::netlink::PodLinkSpec {
                netns: at.netns.clone().unwrap(),
                ifname: "eth0".into(),
                host_ifname: host.into(),
                mac: [2, 0, 0, 0, 0, 1],
                ipv4: Some(crate::host::netlink::PodIpv4Spec {
                    address: "10.128.1.200/23".parse().unwrap(),
                    gateway: Ipv4Addr::new(10, 128, 0, 1),
                    routes: Vec::new(),
                }),
                mtu: 1450,
                tx_checksum_off: false,
                pool_peer: None,
                ipv6: None,
            },
        )
        .await
        .unwrap();
    }

    fn set_netid(&self, ns: &str, id: u32) {
        let mut st = (**self.state.borrow()).clone();
        st.insert(ClusterObject::NetNamespace(NetNamespace::new(ns, id)));
        self.state.send_replace(Arc::new(st));
    }

    fn leases(&self) -> Vec<(String, Option<Ipv4Addr>)> {
        self.ipam
            .leases()
            .unwrap()
            .into_iter()
            .map(|l| (l.container_id, Some(l.ip)))
            .collect()
    }

    /// The flows of attachment `a`'s port (by its record, else the port named after it).
    fn pod_flows(&self, a: &AttachmentId) -> usize {
        let port = self
            .db
            .ports()
            .into_iter()
            .find(|(_, p)| {
                p.external_ids.get("sandbox") == Some(&a.container_id)
                    && p.external_ids.get("ifname") == Some(&a.ifname)
            })
            .map_or_else(|| host_veth_name(&a.container_id, &a.ifname), |(n, _)| n);
        self.port_flows(&port)
    }

    /// The flows carrying port `port`'s cookie.
    fn port_flows(&self, port: &str) -> usize {
        self.switch
            .flows_with_cookie(flows::pod::port_cookie(port))
            .len()
    }

    /// Asserts nothing of attachment `cid/eth0` is left anywhere.
    fn assert_nothing_left(&self, cid: &str) {
        let a = AttachmentId::new(cid, "eth0");
        let veth = host_veth_name(cid, "eth0");
        assert!(self.links.link(&veth).is_none(), "veth {veth} left");
        // A deleted pod's port row may wait for the batched deletion, as a dead row (the pool
        // tests check that it goes).
        if let Some(p) = self.db.ports().get(&veth) {
            assert_eq!(
                p.external_ids,
                std::collections::BTreeMap::from([("sdn-dead".to_string(), "1".to_string())]),
                "port {veth} left as a pod's"
            );
        }
        assert_eq!(self.pod_flows(&a), 0, "flows of {a} left");
        assert!(
            !self.leases().iter().any(|(c, _)| c == cid),
            "lease of {cid} left: {:?}",
            self.leases()
        );
        assert!(
            !self
                .db
                .qos()
                .values()
                .any(|q| q.external_ids.get("sandbox").map(String::as_str) == Some(cid)),
            "QoS of {cid} left"
        );
        assert!(
            self.nat
                .rules(&hostports::chain_name(cid, "eth0"))
                .is_none(),
            "host port chain of {cid} left"
        );
    }
}

fn code(e: super::PodError) -> (u32, String) {
    let c = CniError::from(e);
    (c.code, format!("{}: {}", c.msg, c.details))
}

#[tokio::test]
async fn add_wires_every_piece_and_del_removes_every_piece() {
    let rig = Rig::new(false);
    let at = rig.attachment("c1", "tenant-a");
    let wired = rig.pods.add(&at).await.unwrap();
    let pod = &wired.pod;
    assert_eq!(pod.ip, Some(Ipv4Addr::new(10, 128, 0, 2)));
    assert_eq!(pod.vnid, vnid(11));
    let veth = host_veth_name("c1", "eth0");
    let link = rig.links.link(&veth).expect("veth");
    assert_eq!(link.state.mtu, 1450);
    assert!(!link.state.tx_checksum, "checksum offload off on netdev");
    // The port's record reads back as what ADD knew.
    let port = &rig.db.ports()[&veth];
    let rec = PortRecord::from_external_ids(&port.external_ids).unwrap();
    assert_eq!(
        (rec.attachment, rec.ip, rec.vnid, rec.namespace.as_str()),
        (at.id.clone(), pod.ip, Some(vnid(11)), "tenant-a")
    );
    assert_eq!(port.ofport, pod.ofport);
    // Five flows and the VNID's table-80 row, in one bundle.
    assert_eq!(rig.pod_flows(&at.id), flows::POD_FLOWS);
    assert_eq!(rig.switch.flows_with_cookie(vnid_cookie(vnid(11))).len(), 1);
    assert_eq!(rig.switch.bundles(), 1);
    assert_eq!(rig.leases(), vec![("c1".to_string(), pod.ip)]);
    assert_eq!(rig.pods.list().await.len(), 1);

    rig.pods.del(&at.id).await.unwrap();
    rig.assert_nothing_left("c1");
    assert!(rig.switch.flows().is_empty(), "{:?}", rig.switch.flows());
    assert!(rig.pods.list().await.is_empty());
    // Twice is fine.
    rig.pods.del(&at.id).await.unwrap();
}

#[tokio::test]
async fn a_failure_at_every_add_step_rolls_back_exactly_what_was_done() {
    let bandwidth = json!({"bandwidth": {"ingressRate": 10_000_000, "egressRate": 20_000_000},
                           "portMappings": [{"hostPort": 8080, "containerPort": 80}]});
    for (egress_meters, fault) in [
        (false, "create_pod_link"),
        (false, "add_port"),
        (false, "set_interface_policing"),
        (false, "set_port_qos"),
        (true, "meter_mod"),
        (false, "bundle"),
        (false, "restore"),
    ] {
        let rig = Rig::new(egress_meters);
        // A pod that stays, so rollback must not touch what others own.
        let keep = rig.attachment("keep", "tenant-a");
        rig.pods.add(&keep).await.unwrap();
        let flows_before = rig.switch.flows();
        let mut at = rig.attachment("c1", "tenant-a");
        at.runtime_config = Some(bandwidth.clone());
        match fault {
            "create_pod_link" => rig.links.faults.fail_next(fault),
            "add_port" | "set_interface_policing" | "set_port_qos" => {
                rig.db.faults.fail_next(fault)
            }
            "meter_mod" | "bundle" => rig.switch.faults.fail_next(fault),
            _ => rig.nat.faults.fail_next(fault),
        }
        let e = rig.pods.add(&at).await.unwrap_err();
        let (c, text) = code(e);
        assert_eq!(c, codes::INTERNAL, "{fault}: {text}");
        rig.assert_nothing_left("c1");
        assert_eq!(
            rig.switch.flows(),
            flows_before,
            "{fault}: other flows untouched"
        );
        assert!(rig.switch.meters().is_empty(), "{fault}: meter left");
        assert!(
            rig.nat
                .user_chains()
                .iter()
                .all(|c| !c.starts_with("SDN-HP-") || c == "SDN-HP-MASQ"),
            "{fault}: {:?}",
            rig.nat.user_chains()
        );
        assert_eq!(rig.pods.list().await.len(), 1, "{fault}");
        // Everything was released: the same ADD now succeeds, host port included.
        rig.pods
            .add(&at)
            .await
            .unwrap_or_else(|e| panic!("{fault}: retry: {e}"));
        assert!(rig
            .nat
            .rules(&hostports::chain_name("c1", "eth0"))
            .is_some());
    }
}

#[tokio::test]
async fn a_passed_deadline_undoes_and_says_try_again() {
    let rig = Rig::new(false);
    let mut at = rig.attachment("c1", "default");
    at.deadline = Instant::now();
    let (c, text) = code(rig.pods.add(&at).await.unwrap_err());
    assert_eq!(c, codes::TRY_AGAIN_LATER, "{text}");
    assert!(
        text.contains("deadline passed before creating the veth"),
        "{text}"
    );
    rig.assert_nothing_left("c1");
}

#[tokio::test]
async fn del_works_with_the_netns_veth_port_or_memory_already_gone() {
    let rig = Rig::new(false);
    let a = rig.attachment("c1", "tenant-a");
    let b = rig.attachment("c2", "tenant-a");
    rig.pods.add(&a).await.unwrap();
    rig.pods.add(&b).await.unwrap();
    // a: the netns (and with it the veth) and the port are gone.
    rig.links.remove_netns(a.netns.as_ref().unwrap());
    rig.db.remove_port(&host_veth_name("c1", "eth0"));
    rig.pods.del(&a.id).await.unwrap();
    rig.assert_nothing_left("c1");
    assert_eq!(
        rig.switch.flows_with_cookie(vnid_cookie(vnid(11))).len(),
        1,
        "c2 still needs VNID 11's row"
    );
    // b: the agent restarted and has no memory of it; DEL is complete anyway.
    let fresh = rig.restarted();
    fresh.del(&b.id).await.unwrap();
    rig.assert_nothing_left("c2");
    fresh.del(&b.id).await.unwrap();
}

#[tokio::test]
async fn gc_removes_stale_attachments_orphan_leases_and_qos() {
    let rig = Rig::new(false);
    let a = rig.attachment("c1", "default");
    let b = rig.attachment("c2", "default");
    rig.pods.add(&a).await.unwrap();
    rig.pods.add(&b).await.unwrap();
    // Leftovers of a crashed ADD: a lease and a QoS row nobody owns.
    rig.ipam
        .allocate(&network(false).range().unwrap(), "ghost", "eth0", None)
        .unwrap();
    rig.db.put_qos(
        [("sandbox", "ghost"), ("ifname", "eth0")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    let valid = BTreeSet::from([a.id.clone()]);
    let removed = rig.pods.gc(&valid).await.unwrap();
    assert_eq!(removed, 2, "c2 and the ghost lease");
    rig.assert_nothing_left("c2");
    rig.assert_nothing_left("ghost");
    assert_eq!(
        rig.pod_flows(&a.id),
        flows::POD_FLOWS,
        "c1 is valid and stays"
    );
    assert_eq!(rig.leases().len(), 1);
}

#[tokio::test]
async fn a_restart_rebuilds_the_table_from_port_records_and_removes_dead_pods() {
    let rig = Rig::new(true);
    let mut a = rig.attachment("c1", "tenant-a");
    a.runtime_config = Some(json!({"bandwidth": {"egressRate": 20_000_000},
                                    "portMappings": [{"hostPort": 8080, "containerPort": 80}]}));
    let b = rig.attachment("c2", "tenant-b");
    let wa = rig.pods.add(&a).await.unwrap();
    rig.pods.add(&b).await.unwrap();
    let desired_before = rig.switch.flows();
    // While the agent is down: c2's netns is deleted, tenant-a's NetNamespace vanishes, and
    // flows are lost.
    rig.links.remove_netns(b.netns.as_ref().unwrap());
    rig.state
        .send_replace(Arc::new(cluster(&[("default", 0), ("tenant-b", 12)])));
    rig.switch.remove_flows_with_cookie(vnid_cookie(vnid(11)));
    // c1 as an older agent left it: its record does not say its veth is hardened (nor is it).
    let veth_a = wa.pod.host_veth.clone();
    rig.db.edit_external_id(&veth_a, "hardened", "");
    rig.links.set_isolated(&veth_a, false);

    let store = rig.store_after_restart();
    let fresh: Pods<FakeIo> = Pods::new(
        network(true),
        PodIo {
            db: rig.db.clone(),
            store: store.clone(),
            links: rig.links.clone(),
            nat: rig.nat.clone(),
        },
        rig.ipam.clone(),
        rig.state.subscribe(),
    );
    let (kept, removed) = fresh.rebuild_from_ovs().await.unwrap();
    assert_eq!((kept, removed), (1, 1));
    let pods = fresh.list().await;
    assert_eq!(pods.len(), 1);
    assert_eq!(
        pods[0].vnid,
        vnid(11),
        "the recorded VNID is kept without a NetNamespace"
    );
    assert_eq!(pods[0].egress_meter, wa.pod.egress_meter);
    assert!(rig.links.link(&pods[0].host_veth).unwrap().isolated);
    assert_eq!(
        rig.db.ports()[&veth_a].external_ids["hardened"],
        "1",
        "the record now says so: the next start skips the sysctls"
    );
    fresh.restore_meters().await.unwrap();
    let stats = store.reconcile().await.unwrap();
    assert_eq!(stats.added, 1, "only the lost table-80 row comes back");
    assert_eq!(
        stats.deleted,
        flows::POD_FLOWS + 1,
        "the dead pod's seven flows and its VNID's row go"
    );
    rig.assert_nothing_left("c2");
    let c2_cookie = flows::pod::port_cookie(&host_veth_name(&b.id.container_id, &b.id.ifname));
    let expected: Vec<_> = desired_before
        .into_iter()
        .filter(|f| f.cookie != c2_cookie && f.cookie != vnid_cookie(vnid(12)))
        .collect();
    assert_eq!(rig.switch.flows(), expected);
    assert!(
        rig.nat
            .rules(&hostports::chain_name("c1", "eth0"))
            .is_some(),
        "host port back"
    );
}

#[tokio::test]
async fn a_vnid_change_reflows_the_namespace_in_one_bundle_and_moves_table_80() {
    let rig = Rig::new(false);
    let a = rig.attachment("c1", "tenant-a");
    let b = rig.attachment("c2", "tenant-a");
    let c = rig.attachment("c3", "tenant-b");
    for at in [&a, &b, &c] {
        rig.pods.add(at).await.unwrap();
    }
    let bundles = rig.switch.bundles();
    rig.set_netid("tenant-a", 12);
    let changes = rig.pods.sync_vnids().await.unwrap();
    assert_eq!(changes.len(), 2);
    assert!(changes
        .iter()
        .all(|c| c.from == vnid(11) && c.to == vnid(12)));
    assert_eq!(rig.switch.bundles(), bundles + 1, "one bundle");
    assert_eq!(
        rig.switch.last_bundle_len(),
        2 * 2 + 1,
        "two rows per pod (tables 26 and 75) and VNID 11's table-80 row out (tenant-b has 12's)"
    );
    assert!(rig
        .switch
        .flows_with_cookie(vnid_cookie(vnid(11)))
        .is_empty());
    assert_eq!(rig.switch.flows_with_cookie(vnid_cookie(vnid(12))).len(), 1);
    let port = &rig.db.ports()[&host_veth_name("c1", "eth0")];
    assert_eq!(port.external_ids["vnid"], "12", "the record follows");
    assert!(
        rig.pods.sync_vnids().await.unwrap().is_empty(),
        "nothing more to do"
    );
}

#[tokio::test]
async fn an_add_in_flight_when_its_namespace_changes_vnid_takes_the_new_one() {
    let rig = Arc::new(Rig::new(false));
    let at = rig.attachment("c1", "tenant-a");
    // Hold the ADD at its port step, as a paused ovs-vswitchd would.
    let gate = rig.db.add_port_gate.lock().await;
    let task = {
        let (rig, at) = (rig.clone(), at.clone());
        tokio::spawn(async move { rig.pods.add(&at).await.map(|w| w.pod.vnid) })
    };
    let veth = host_veth_name("c1", "eth0");
    for _ in 0..200 {
        if rig.links.link(&veth).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        rig.links.link(&veth).is_some(),
        "the ADD reached its port step"
    );
    rig.set_netid("tenant-a", 13);
    rig.pods.sync_vnids().await.unwrap();
    drop(gate);
    assert_eq!(task.await.unwrap().unwrap(), vnid(13));
    assert!(rig
        .switch
        .flows_with_cookie(vnid_cookie(vnid(11)))
        .is_empty());
    assert_eq!(rig.switch.flows_with_cookie(vnid_cookie(vnid(13))).len(), 1);
    assert_eq!(rig.db.ports()[&veth].external_ids["vnid"], "13");
}

#[tokio::test]
async fn check_reports_each_kind_of_drift() {
    let rig = Rig::new(false);
    let mut at = rig.attachment("c1", "default");
    at.runtime_config = Some(json!({"portMappings": [{"hostPort": 8080, "containerPort": 80}]}));
    rig.pods.add(&at).await.unwrap();
    rig.pods.check(&at).await.unwrap();
    let veth = host_veth_name("c1", "eth0");

    rig.links.edit(&veth, |s| s.mtu = 1500);
    let (c, text) = code(rig.pods.check(&at).await.unwrap_err());
    assert_eq!(c, codes::INTERNAL);
    assert!(text.contains("MTU is 1500 instead of 1450"), "{text}");
    rig.links.edit(&veth, |s| s.mtu = 1450);

    rig.nat.flush(&hostports::chain_name("c1", "eth0"));
    let (_, text) = code(rig.pods.check(&at).await.unwrap_err());
    assert!(text.contains("host port rules missing"), "{text}");
    rig.pods.del(&at.id).await.unwrap();
    rig.pods.add(&at).await.unwrap();

    rig.switch
        .remove_flows_with_cookie(flows::pod::port_cookie(&host_veth_name(
            &at.id.container_id,
            &at.id.ifname,
        )));
    let (_, text) = code(rig.pods.check(&at).await.unwrap_err());
    assert!(
        text.contains("flows differ from the pod's: missing"),
        "{text}"
    );

    let other = rig.attachment("nope", "default");
    let (c, _) = code(rig.pods.check(&other).await.unwrap_err());
    assert_eq!(c, codes::UNKNOWN_CONTAINER);
}

#[tokio::test]
async fn a_meter_the_switch_lost_comes_back_before_the_flows_using_it() {
    let rig = Rig::new(true);
    let mut at = rig.attachment("c1", "default");
    at.runtime_config = Some(json!({"bandwidth": {"egressRate": 20_000_000}}));
    let w = rig.pods.add(&at).await.unwrap();
    let m = w.pod.egress_meter.expect("netdev: an egress meter");
    assert!(rig.switch.meters().contains_key(&m));
    assert!(rig.pods.check(&at).await.is_ok());
    // ovs-vswitchd restarted: flows and meters gone.
    rig.switch.restart();
    rig.pods.restore_meters().await.unwrap();
    rig.store.reconcile().await.unwrap();
    assert!(rig.switch.meters().contains_key(&m));
    rig.pods.check(&at).await.unwrap();
    rig.pods.del(&at.id).await.unwrap();
    assert!(rig.switch.meters().is_empty(), "DEL deletes the meter");
}

#[tokio::test]
async fn bad_input_fails_with_its_code_and_leaves_nothing() {
    let rig = Rig::new(false);
    // A requested address with another prefix length than the node subnet's.
    let mut at = rig.attachment("c1", "default");
    at.requested_ip = Some((Ipv4Addr::new(10, 128, 0, 9), Some(24)));
    let (c, text) = code(rig.pods.add(&at).await.unwrap_err());
    assert_eq!(c, codes::INVALID_ENV, "{text}");
    assert!(
        text.contains("does not match the node subnet 10.128.0.0/23"),
        "{text}"
    );
    rig.assert_nothing_left("c1");
    // An address outside the subnet.
    at.requested_ip = Some((Ipv4Addr::new(10, 129, 0, 9), None));
    let (c, text) = code(rig.pods.add(&at).await.unwrap_err());
    assert_eq!(c, codes::INVALID_ENV, "{text}");
    rig.assert_nothing_left("c1");
    // An unusable bandwidth value.
    at.requested_ip = None;
    at.runtime_config = Some(json!({"bandwidth": {"egressRate": 500}}));
    let (c, text) = code(rig.pods.add(&at).await.unwrap_err());
    assert_eq!(c, codes::INVALID_CONFIG, "{text}");
    assert!(text.contains("egressRate"), "{text}");
    rig.assert_nothing_left("c1");
    // A host port another pod holds: the error names the holder.
    let mut holder = rig.attachment("holder", "default");
    holder.runtime_config =
        Some(json!({"portMappings": [{"hostPort": 8080, "containerPort": 80}]}));
    rig.pods.add(&holder).await.unwrap();
    at.runtime_config = holder.runtime_config.clone();
    let (c, text) = code(rig.pods.add(&at).await.unwrap_err());
    assert_eq!(c, codes::INVALID_ENV, "{text}");
    assert!(text.contains("pod-holder"), "{text}");
    rig.assert_nothing_left("c1");
    // A namespace without NetNamespace, after the bounded wait.
    let nowhere = rig.attachment("c2", "nowhere");
    let (c, text) = code(rig.pods.add(&nowhere).await.unwrap_err());
    assert_eq!(c, codes::INTERNAL, "{text}");
    assert!(text.contains("sdnctl create nowhere"), "{text}");
    rig.assert_nothing_left("c2");
    // ADD twice.
    let (c, text) = code(rig.pods.add(&holder).await.unwrap_err());
    assert!(text.contains("already has interface eth0"), "{c} {text}");
}

#[tokio::test]
async fn ports_records_and_qos_removed_behind_the_agents_back_are_put_back() {
    let rig = Rig::new(false);
    let mut at = rig.attachment("r1", "tenant-a");
    at.runtime_config =
        Some(json!({"bandwidth": {"ingressRate": 10_000_000, "egressRate": 5_000_000}}));
    let pod = rig.pods.add(&at).await.unwrap().pod;
    let other = rig
        .pods
        .add(&rig.attachment("r2", "tenant-a"))
        .await
        .unwrap()
        .pod;
    let veth = host_veth_name("r1", "eth0");
    let before = rig.db.ports()[&veth].clone();
    assert_eq!(rig.pods.repair_ports().await, 0, "nothing drifted yet");

    // del-port: back with the same ofport (flows unchanged), record, policing and QoS.
    let flows_before = rig.switch.flows();
    rig.db.remove_port(&veth);
    assert_eq!(rig.pods.repair_ports().await, 1);
    let after = rig.db.ports()[&veth].clone();
    assert_eq!(after.ofport, pod.ofport);
    assert_eq!(after.external_ids, before.external_ids);
    assert_eq!(after.policing, before.policing);
    assert!(after.policing.0 > 0, "egress policing is back");
    let qos = after.qos.clone().expect("QoS attached again");
    assert_eq!(rig.db.qos()[&qos].other_config["max-rate"], "10000000");
    assert_eq!(rig.switch.flows(), flows_before, "same ofport: no re-flow");

    // The QoS row destroyed: re-created and attached; the other pod is untouched.
    rig.db.destroy_qos(&qos);
    assert_eq!(rig.pods.repair_ports().await, 1);
    assert!(rig.db.ports()[&veth].qos.is_some());
    assert_eq!(rig.db.qos().len(), 1);

    // A record key edited: restored.
    rig.db.edit_external_id(&veth, "vnid", "0");
    assert_eq!(rig.pods.repair_ports().await, 1);
    assert_eq!(rig.db.ports()[&veth].external_ids["vnid"], "11");

    // After an OVSDB change, only the ports it touched are looked at; the periodic pass looks
    // at every pod.
    rig.db.edit_external_id(&veth, "vnid", "0");
    rig.db.edit_external_id(&other.host_veth, "vnid", "0");
    let touched: std::collections::HashSet<String> = [veth.clone()].into();
    assert_eq!(rig.pods.repair_ports_among(Some(&touched)).await, 1);
    assert_eq!(rig.db.ports()[&veth].external_ids["vnid"], "11");
    assert_eq!(rig.db.ports()[&other.host_veth].external_ids["vnid"], "0");
    assert_eq!(
        rig.pods.repair_ports_among(Some(&Default::default())).await,
        0
    );
    assert_eq!(rig.pods.repair_ports().await, 1);
    assert_eq!(rig.db.ports()[&other.host_veth].external_ids["vnid"], "11");

    // The ofport taken meanwhile: the port comes back with another and the pod is re-flowed.
    rig.db.remove_port(&veth);
    rig.db.put_port_at("squatter", pod.ofport);
    assert_eq!(rig.pods.repair_ports().await, 1);
    let moved = rig.db.ports()[&veth].ofport;
    assert_ne!(moved, pod.ofport);
    let reflowed = rig.switch.flows_with_cookie(flows::pod::port_cookie(&veth));
    assert_eq!(reflowed.len(), flows::POD_FLOWS);
    assert!(
        reflowed
            .iter()
            .any(|f| f.to_string().contains(&format!("in_port={moved}"))),
        "{reflowed:?}"
    );
    assert_eq!(
        rig.pods
            .list()
            .await
            .iter()
            .find(|p| p.attachment == at.id)
            .unwrap()
            .ofport,
        moved
    );
    assert_eq!(rig.pods.repair_ports().await, 0, "repaired for good");

    // A pod whose veth is gone (netns deleted without DEL) is left for the runtime's DEL.
    rig.db.remove_port(&veth);
    rig.links.remove_netns(at.netns.as_deref().unwrap());
    assert_eq!(rig.pods.repair_ports().await, 0);
    assert!(!rig.db.ports().contains_key(&veth));
    assert!(rig.db.ports().contains_key(&other.host_veth));
}

#[tokio::test]
async fn adds_take_ready_ports_and_dels_leave_rows_to_one_batched_deletion() {
    let rig = Rig::with_pool(4);
    rig.pods.refill_pool().await;
    assert_eq!(rig.pods.pool().idle(), 4);
    let pool_ports: Vec<String> = rig
        .db
        .ports()
        .into_iter()
        .filter(|(_, p)| p.external_ids.contains_key("sdn-pool"))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(pool_ports.len(), 4);
    let adds_before = rig.db.ports().len();

    // ADD: a ready port, no new one; the record replaces the pool marker.
    let at = rig.attachment("p1", "tenant-a");
    let pod = rig.pods.add(&at).await.unwrap().pod;
    assert!(
        pool_ports.contains(&pod.host_veth),
        "{} is not a pool port",
        pod.host_veth
    );
    assert_eq!(rig.db.ports().len(), adds_before, "the ADD added a port");
    let port = &rig.db.ports()[&pod.host_veth];
    assert_eq!(port.ofport, pod.ofport);
    assert!(!port.external_ids.contains_key("sdn-pool"));
    assert_eq!(port.external_ids["sandbox"], "p1");
    let link = rig.links.link(&pod.host_veth).expect("the pod's veth");
    assert_eq!(
        (link.ifname.as_str(), link.netns.clone()),
        ("eth0", at.netns.clone().unwrap())
    );
    assert_eq!(rig.pods.pool().idle(), 3);
    assert_eq!(rig.pod_flows(&at.id), flows::POD_FLOWS);

    // DEL: the pod's interface comes off the port's peer at once, the pod leaves the table,
    // its address is handed to the port and the row is a pool port's again; the flows, then
    // the address go in the next batch, and then the port is back in the pool, without a
    // bundle on the DEL itself and without deleting the pair.
    let bundles = rig.switch.bundles();
    rig.pods.del(&at.id).await.unwrap();
    assert_eq!(rig.switch.bundles(), bundles, "the DEL waited for a bundle");
    let link = rig.links.link(&pod.host_veth).expect("the pool pair stays");
    assert!(link.netns.as_os_str().is_empty(), "the pod interface went");
    assert!(rig.pods.list().await.is_empty());
    assert_eq!(rig.pods.pool().retiring(), 1);
    assert!(rig.db.ports()[&pod.host_veth]
        .external_ids
        .contains_key("sdn-pool"));
    assert_eq!(
        rig.port_flows(&pod.host_veth),
        flows::POD_FLOWS,
        "flows go with the batch"
    );
    assert_eq!(
        rig.leases(),
        vec![(format!("sdn-retired-{}", pod.host_veth), pod.ip)],
        "the address stays leased, to the port, while its flows exist"
    );
    assert_eq!(
        rig.pods.pool().idle(),
        3,
        "not reused before its flows are gone"
    );
    // A GC meanwhile keeps the retiring port's address.
    rig.pods.gc(&BTreeSet::new()).await.unwrap();
    assert_eq!(rig.leases().len(), 1);
    rig.pods.retire_ports().await;
    assert_eq!(rig.port_flows(&pod.host_veth), 0);
    assert!(rig.leases().is_empty());
    rig.assert_nothing_left("p1");
    assert_eq!(rig.pods.pool().idle(), 4, "the port is back in the pool");
    assert_eq!(rig.pods.pool().dead(), 0);

    // A DEL whose pod interface cannot be taken off the peer: the pair goes, and the row in
    // a later batch.
    let at = rig.attachment("p1b", "tenant-a");
    let pod = rig.pods.add(&at).await.unwrap().pod;
    rig.links.faults.fail_next("release_pool_link");
    rig.pods.del(&at.id).await.unwrap();
    assert!(rig.links.link(&pod.host_veth).is_none());
    rig.pods.retire_ports().await;
    assert_eq!(rig.port_flows(&pod.host_veth), 0);
    assert!(rig.leases().is_empty());
    assert_eq!(rig.pods.pool().dead(), 1);
    rig.pods.reap_dead_ports().await;
    assert!(!rig.db.ports().contains_key(&pod.host_veth));
    assert_eq!(rig.pods.pool().dead(), 0);

    // An ADD that fails after taking a port (the pod already has an eth0) leaves nothing of it.
    rig.pods.refill_pool().await;
    let bad = rig.attachment("p2", "tenant-a");
    rig.squat_eth0(&bad, "squat0").await;
    let before: BTreeSet<String> = rig.db.ports().into_keys().collect();
    let (_, text) = code(rig.pods.add(&bad).await.unwrap_err());
    assert!(text.contains("eth0"), "{text}");
    let after: BTreeSet<String> = rig.db.ports().into_keys().collect();
    assert_eq!(
        after.len(),
        before.len() - 1,
        "the taken pool port went with the ADD"
    );
    assert!(rig.leases().is_empty());
}

#[tokio::test]
async fn a_restart_takes_back_ready_ports_and_deletes_broken_and_dead_ones() {
    let rig = Rig::with_pool(3);
    rig.pods.refill_pool().await;
    let at = rig.attachment("r1", "default");
    let pod = rig.pods.add(&at).await.unwrap().pod;
    // A DEL that could not free its port: the pair went, the row is dead.
    rig.links.faults.fail_next("release_pool_link");
    rig.pods.del(&at.id).await.unwrap();
    // One ready port's peer vanished.
    let broken = rig
        .db
        .ports()
        .into_iter()
        .find(|(_, p)| p.external_ids.contains_key("sdn-pool"))
        .map(|(n, _)| n)
        .unwrap();
    let peer = rig.db.ports()[&broken].external_ids["sdn-pool"].clone();
    rig.links.remove_parked_peer(&peer);
    // A refill cut off between the veth and its port.
    rig.links
        .create_pool_veth("sdnp00000000ff", "sdnq00000000ff", 1450, false)
        .await
        .unwrap();
    // A trim cut off between marking a port dead and deleting its pair.
    rig.links
        .create_pool_veth("sdnp00000000ee", "sdnq00000000ee", 1450, false)
        .await
        .unwrap();
    let mut trimmed = ovs::ovsdb::PortSpec::new("sdnp00000000ee".to_string(), "");
    trimmed.external_ids =
        std::collections::BTreeMap::from([("sdn-dead".to_string(), "1".to_string())]);
    rig.db.add_port("br0", &trimmed).await.unwrap();

    let fresh = rig.restarted();
    let restored = fresh.restore_pool().await.unwrap();
    let (kept, deleted) = (restored.kept, restored.queued);
    assert!(
        rig.links.link("sdnp00000000ff").is_none(),
        "a pool veth without a port goes"
    );
    assert!(
        rig.links.link("sdnp00000000ee").is_none(),
        "a dead port's pair goes"
    );
    assert_eq!(kept, 1, "the other ready port is taken back");
    assert_eq!(deleted, 3, "the broken pool port and the two dead ones");
    assert!(
        rig.links.link(&broken).is_none(),
        "the broken port's veth goes at once"
    );
    assert_eq!(
        fresh.pool().dead(),
        3,
        "their rows wait for the first batch"
    );
    fresh.reap_dead_ports().await;
    assert!(!rig.db.ports().contains_key(&broken));
    assert!(!rig.db.ports().contains_key(&pod.host_veth));
    assert!(rig.links.link(&broken).is_none());
    assert_eq!(fresh.pool().idle(), 1);
}

#[tokio::test]
async fn a_restart_keeps_pods_on_pool_ports_only_while_their_interface_is_on_the_peer() {
    let rig = Rig::with_pool(4);
    rig.pods.refill_pool().await;
    let alive = rig.attachment("k1", "default");
    let gone = rig.attachment("k2", "default");
    let alive_pod = rig.pods.add(&alive).await.unwrap().pod;
    let gone_pod = rig.pods.add(&gone).await.unwrap().pod;
    assert!(super::pool::is_pool_port(&gone_pod.host_veth));
    // While the agent is down, the runtime deletes k2's netns: its macvlan goes, the pool
    // pair stays, its peer free.
    rig.links.remove_netns(gone.netns.as_ref().unwrap());
    assert!(rig.links.link(&gone_pod.host_veth).is_some());

    let fresh = rig.restarted();
    let (kept, removed) = fresh.rebuild_from_ovs().await.unwrap();
    assert_eq!((kept, removed), (1, 1));
    let listed: Vec<_> = fresh
        .list()
        .await
        .into_iter()
        .map(|p| p.attachment)
        .collect();
    assert_eq!(listed, vec![alive.id.clone()]);
    assert!(!rig.db.ports().contains_key(&gone_pod.host_veth));
    assert!(rig.links.link(&gone_pod.host_veth).is_none());
    assert!(rig.leases().iter().all(|(_, ip)| *ip != gone_pod.ip));
    assert!(rig.links.link(&alive_pod.host_veth).is_some());

    // The surviving pod's pair may come from an agent before the MLD drop: its peer gets
    // it when the pod's DEL gives the port back to the pool, once, and no other peer does.
    let peer = super::pool::peer_of(&alive_pod.host_veth);
    let before = rig.links.quieted();
    assert!(!before.contains(&peer), "{before:?}");
    fresh.del(&alive.id).await.unwrap();
    fresh.retire_ports().await;
    assert_eq!(fresh.pool().idle(), 1, "the port is back in the pool");
    assert_eq!(rig.links.quieted()[before.len()..], [peer]);
    assert!(
        !fresh.pool().take_unquieted(&alive_pod.host_veth),
        "noted once"
    );
}

#[tokio::test]
async fn ports_given_back_during_a_refill_never_overfill_the_pool() {
    let rig = Rig::with_pool(2);
    rig.pods.refill_pool().await;
    let a = rig.attachment("t1", "default");
    let b = rig.attachment("t2", "default");
    rig.pods.add(&a).await.unwrap();
    rig.pods.add(&b).await.unwrap();
    assert_eq!(rig.pods.pool().idle(), 0);
    // Both DELs give their ports back (the pool is empty), and a refill runs meanwhile.
    rig.pods.del(&a.id).await.unwrap();
    rig.pods.del(&b.id).await.unwrap();
    rig.pods.refill_pool().await;
    rig.pods.retire_ports().await;
    assert_eq!(rig.pods.pool().idle(), 4, "overfilled before the trim");
    rig.pods.trim_pool().await;
    assert_eq!(rig.pods.pool().idle(), 2);
    assert_eq!(rig.pods.pool().dead(), 2);
    rig.pods.reap_dead_ports().await;
    let pool_rows = rig
        .db
        .ports()
        .values()
        .filter(|p| p.external_ids.contains_key("sdn-pool"))
        .count();
    assert_eq!(pool_rows, 2);
    assert_eq!(rig.links.host_ends().len(), 2, "the trimmed pairs are gone");
}

#[tokio::test]
async fn a_burst_of_adds_warms_ports_whose_flows_are_in_before_the_add() {
    let rig = Rig::with_pool(8);
    rig.pods.refill_pool().await;
    // Fewer ADDs than a burst: nothing warms.
    let mut pods = Vec::new();
    for i in 0..super::pool::WARM_AFTER - 1 {
        let at = rig.attachment(&format!("w{i}"), "tenant-a");
        pods.push(rig.pods.add(&at).await.unwrap().pod);
    }
    rig.pods.refill_pool().await;
    rig.pods.warm_ports().await;
    assert!(rig.pods.pool().warm().is_empty());
    // The burst's last ADD: the VNID warms as many ports as the pool holds, in bundles of
    // WARM_CHUNK ports (each fits one ovs-vswitchd main-loop iteration), addresses leased to
    // the ports.
    let at = rig.attachment("w-last", "tenant-a");
    rig.pods.add(&at).await.unwrap();
    rig.pods.refill_pool().await;
    let bundles = rig.switch.bundles();
    rig.pods.warm_ports().await;
    let chunk = super::pool::WARM_CHUNK;
    assert_eq!(rig.switch.bundles(), bundles + 8_usize.div_ceil(chunk));
    assert_eq!(
        rig.switch.last_bundle_len(),
        (8 % chunk) * (flows::POD_FLOWS + 1),
        "the last chunk: per port a delete by cookie and its flows"
    );
    assert_eq!(rig.pods.pool().warm(), [(vnid(11), 8)].into());
    let warm_leases: Vec<_> = rig
        .leases()
        .into_iter()
        .filter(|(c, _)| c.starts_with("sdn-warm-"))
        .collect();
    assert_eq!(warm_leases.len(), 8);

    // An ADD in that VNID takes one: no bundle, the lowest warm address, the port's flows.
    let at = rig.attachment("hot", "tenant-a");
    let bundles = rig.switch.bundles();
    let pod = rig.pods.add(&at).await.unwrap().pod;
    assert_eq!(
        rig.switch.bundles(),
        bundles,
        "the warm ADD waited for a bundle"
    );
    let lowest = warm_leases.iter().map(|(_, ip)| *ip).min().unwrap();
    assert_eq!(pod.ip, lowest);
    assert!(rig.leases().contains(&("hot".to_string(), pod.ip)));
    assert!(!rig
        .leases()
        .contains(&(format!("sdn-warm-{}", pod.host_veth), pod.ip)));
    assert_eq!(rig.port_flows(&pod.host_veth), flows::POD_FLOWS);
    assert_eq!(pod.vnid, vnid(11));
    rig.pods.check(&at).await.unwrap();
    assert_eq!(rig.pods.pool().warm(), [(vnid(11), 7)].into());

    // Another VNID's ADD does not take tenant-a's warm ports.
    let other = rig.attachment("b1", "tenant-b");
    let b = rig.pods.add(&other).await.unwrap().pod;
    assert_eq!(b.vnid, vnid(12));
    assert_eq!(rig.pods.pool().warm()[&vnid(11)], 7);

    // A warm ADD that fails (the pod already has an eth0) leaves nothing: flows, port, address.
    let bad = rig.attachment("bad", "tenant-a");
    rig.squat_eth0(&bad, "squat1").await;
    let taken = rig.pods.pool().warm()[&vnid(11)];
    rig.pods.add(&bad).await.unwrap_err();
    assert_eq!(rig.pods.pool().warm()[&vnid(11)], taken - 1);
    rig.assert_nothing_left("bad");
    let warm_ports: usize = rig.pods.pool().warm().values().sum();
    let all_warm_flows = rig
        .switch
        .flows()
        .into_iter()
        .filter(|f| f.cookie >> 60 == 1)
        .count();
    assert_eq!(
        all_warm_flows,
        flows::POD_FLOWS * (warm_ports + pods.len() + 3),
        "pods' and warm ports' flows only"
    );

    // The VNID moves: an ADD in the namespace no longer matches the old VNID's warm ports.
    rig.set_netid("tenant-a", 13);
    let moved = rig.attachment("m1", "tenant-a");
    let m = rig.pods.add(&moved).await.unwrap().pod;
    assert_eq!(m.vnid, vnid(13));
    assert_eq!(rig.pods.pool().warm()[&vnid(11)], taken - 1);

    // A restart: warm ports stay warm (their leases name their VNID), with their addresses
    // and their flows staged for the start-up reconcile; the VNID is recent again.
    let warm_before = rig.pods.pool().warm();
    let leases_before: Vec<_> = rig
        .leases()
        .into_iter()
        .filter(|(c, _)| c.starts_with("sdn-warm-"))
        .collect();
    let fresh = rig.restarted();
    fresh.rebuild_from_ovs().await.unwrap();
    let restored = fresh.restore_pool().await.unwrap();
    assert_eq!(restored.warm_leases.len(), leases_before.len());
    fresh
        .release_orphan_leases(&restored.warm_leases, true)
        .await
        .unwrap();
    let leases_after: Vec<_> = rig
        .leases()
        .into_iter()
        .filter(|(c, _)| c.starts_with("sdn-warm-"))
        .collect();
    assert_eq!(leases_after, leases_before);
    assert_eq!(fresh.pool().warm(), warm_before);
    assert!(
        fresh.pool().take_warm(vnid(11), 2, 1).is_some(),
        "the restarted agent hands out a warm port"
    );

    // A warm port whose lease is gone is an idle port after a restart, and its flows nobody's.
    let again = rig.restarted();
    again.rebuild_from_ovs().await.unwrap();
    rig.ipam
        .retain(|l| !l.container_id.starts_with("sdn-warm-"))
        .unwrap();
    let restored = again.restore_pool().await.unwrap();
    assert!(restored.warm_leases.is_empty());
    assert!(again.pool().warm().is_empty());
}

#[tokio::test]
async fn warm_ports_of_a_vnid_displaced_by_newer_bursts_are_cooled() {
    let rig = Rig::with_pool(4);
    let burst = |ns: &'static str, tag: &'static str| {
        let rig = &rig;
        async move {
            for i in 0..super::pool::WARM_AFTER {
                rig.pods.refill_pool().await;
                let at = rig.attachment(&format!("{tag}{i}"), ns);
                rig.pods.add(&at).await.unwrap();
            }
            rig.pods.refill_pool().await;
            rig.pods.cool_ports().await;
            rig.pods.warm_ports().await;
        }
    };
    burst("tenant-a", "a").await;
    assert_eq!(rig.pods.pool().warm(), [(vnid(11), 4)].into());
    let a_ports: Vec<String> = rig
        .leases()
        .into_iter()
        .filter_map(|(c, _)| c.strip_prefix("sdn-warm-").map(str::to_string))
        .collect();
    assert_eq!(a_ports.len(), 4);
    burst("tenant-b", "b").await;
    burst("default", "d").await;
    // tenant-a (VNID 11) is the third most recent: its warm ports are cooled (flows, addresses)
    // and back in the pool.
    let warm = rig.pods.pool().warm();
    assert!(!warm.contains_key(&vnid(11)), "{warm:?}");
    for p in &a_ports {
        assert_eq!(rig.port_flows(p), 0, "flows of cooled port {p}");
        assert!(!rig.leases().iter().any(|(c, _)| c.ends_with(p.as_str())));
        assert!(rig.db.ports()[p].external_ids.contains_key("sdn-pool"));
    }
}

#[tokio::test]
async fn a_pod_with_an_egress_meter_is_deleted_at_once_not_retired() {
    let rig = Rig::build(true, 4);
    rig.pods.refill_pool().await;
    let mut at = rig.attachment("m1", "tenant-a");
    at.runtime_config =
        Some(json!({"bandwidth": {"egressRate": 20_000_000, "egressBurst": 1_000_000}}));
    let pod = rig.pods.add(&at).await.unwrap().pod;
    assert!(super::pool::is_pool_port(&pod.host_veth));
    assert!(pod.egress_meter.is_some());
    // Deleting the meter takes the flows using it: the DEL removes them itself.
    rig.pods.del(&at.id).await.unwrap();
    assert_eq!(rig.pods.pool().retiring(), 0);
    assert_eq!(rig.port_flows(&pod.host_veth), 0);
    rig.assert_nothing_left("m1");
}

/// A restarted ovs-vswitchd numbers ports anew: pods are re-flowed on their new number in one
/// bundle, warm pool ports are cooled, idle pool ports take theirs, an idle port that cannot be
/// opened leaves the pool, and a pod whose veth is gone loses its rows (its number is free) and waits
/// for the runtime's DEL.
#[tokio::test]
async fn ports_numbered_anew_by_a_restarted_switch_are_followed() {
    let rig = Rig::with_pool(8);
    rig.pods.refill_pool().await;
    let mut pods = Vec::new();
    for i in 0..super::pool::WARM_AFTER {
        let at = rig.attachment(&format!("n{i}"), "tenant-a");
        pods.push((at.clone(), rig.pods.add(&at).await.unwrap().pod));
    }
    rig.pods.refill_pool().await;
    rig.pods.warm_ports().await;
    rig.pods.refill_pool().await;
    assert_eq!(rig.pods.follow_ofports().await, 0, "nothing moved yet");
    let warm_port = rig.db.interfaces_with_external_id(super::pool::POOL_KEY);
    let warm_leases = rig.leases();
    let (warm_name, warm_ip) = warm_leases
        .iter()
        .find_map(|(c, ip)| Some((c.strip_prefix("sdn-warm-")?.to_string(), *ip)))
        .expect("a warm port");
    let idle_name = warm_port
        .iter()
        .map(|i| i.name.clone())
        .find(|n| !warm_leases.iter().any(|(c, _)| c.ends_with(n.as_str())))
        .expect("an idle pool port");
    let broken_name = warm_port
        .iter()
        .map(|i| i.name.clone())
        .find(|n| *n != idle_name && !warm_leases.iter().any(|(c, _)| c.ends_with(n.as_str())))
        .expect("another idle pool port");

    let (_, moved) = &pods[0];
    rig.db.renumber(&moved.host_veth, 200);
    rig.db.renumber(&warm_name, 201);
    rig.db.renumber(&idle_name, 202);
    rig.db.renumber(&broken_name, -1);
    let bundles = rig.switch.bundles();
    assert_eq!(rig.pods.follow_ofports().await, 1);
    assert_eq!(rig.switch.bundles(), bundles + 1, "one bundle");
    let has_port = |port: &str, n: u32| {
        let f = rig.switch.flows_with_cookie(flows::pod::port_cookie(port));
        f.len() == flows::POD_FLOWS
            && f.iter()
                .any(|f| f.to_string().contains(&format!("in_port={n},")))
    };
    assert!(has_port(&moved.host_veth, 200));
    // The warm port so numbered is out of the warm ports at once (no ADD can take it with its
    // old rows) and cooled by the maintenance: flows and address gone, back in the pool with
    // its new number, which a later warm-up uses.
    assert!(
        !rig.pods.pool().warm().values().any(|n| *n == 8),
        "still 8 warm"
    );
    rig.pods.cool_ports().await;
    assert!(rig
        .switch
        .flows_with_cookie(flows::pod::port_cookie(&warm_name))
        .is_empty());
    assert!(!rig.leases().iter().any(|(_, ip)| *ip == warm_ip));
    rig.pods.warm_ports().await;
    let rewarmed = rig
        .switch
        .flows_with_cookie(flows::pod::port_cookie(&warm_name));
    assert!(
        rewarmed.is_empty() || has_port(&warm_name, 201),
        "warmed again on its old number: {rewarmed:?}"
    );
    let listed = rig.pods.list().await;
    assert_eq!(
        listed
            .iter()
            .find(|p| p.host_veth == moved.host_veth)
            .unwrap()
            .ofport,
        200
    );
    // The broken idle port left the pool.
    assert!(
        rig.links.link(&broken_name).is_none(),
        "its pair is deleted"
    );
    assert_eq!(rig.pods.follow_ofports().await, 0, "followed for good");

    // An ADD in that VNID takes a warm port: its flows carry the port's number now.
    let at = rig.attachment("after", "tenant-a");
    let pod = rig.pods.add(&at).await.unwrap().pod;
    assert_eq!(
        i64::from(pod.ofport),
        rig.db.ports()[&pod.host_veth].ofport as i64
    );

    // A pod whose veth went with its netns and whose port ovs-vswitchd cannot open: its rows
    // go (its number is free for another port), the DEL does the rest.
    let mut gone_at = rig.attachment("plain", "tenant-a");
    gone_at.plain_veth_for = Some(crate::cni::chain::PlainVeth::ChainNotSeen {
        network: "elsewhere".into(),
    });
    let gone = rig.pods.add(&gone_at).await.unwrap().pod;
    assert!(!super::pool::is_pool_port(&gone.host_veth));
    let (gone_at, gone) = (&gone_at, &gone);
    rig.links.remove_netns(gone_at.netns.as_deref().unwrap());
    rig.db.renumber(&gone.host_veth, -1);
    assert_eq!(rig.pods.follow_ofports().await, 1);
    assert!(rig
        .switch
        .flows_with_cookie(flows::pod::port_cookie(&gone.host_veth))
        .is_empty());
    assert!(!rig
        .pods
        .list()
        .await
        .iter()
        .any(|p| p.attachment == gone_at.id));
    rig.pods.del(&gone_at.id).await.unwrap();
    rig.pods.retire_ports().await;
    rig.pods.reap_dead_ports().await;
    assert!(!rig.db.ports().contains_key(&gone.host_veth));
    assert!(!rig.leases().iter().any(|(_, ip)| *ip == gone.ip));
}

#[tokio::test]
async fn dual_stack_warm_ports_hold_both_addresses_and_hand_both_over() {
    use std::collections::{BTreeMap, BTreeSet};
    use std::net::IpAddr;
    let rig = Rig::dual_with_pool(8);
    rig.pods.refill_pool().await;
    for i in 0..super::pool::WARM_AFTER {
        let at = rig.attachment(&format!("w{i}"), "tenant-a");
        assert!(rig.pods.add(&at).await.unwrap().pod.ip6.is_some());
    }
    rig.pods.refill_pool().await;
    let bundles = rig.switch.bundles();
    rig.pods.warm_ports().await;
    // Chunks of as many ports as on an IPv4 node (twice the rows: two ovs-vswitchd main-loop
    // iterations each).
    let chunk = super::pool::WARM_CHUNK;
    assert_eq!(rig.switch.bundles(), bundles + 8_usize.div_ceil(chunk));
    assert_eq!(
        rig.switch.last_bundle_len(),
        (8 % chunk) * (flows::POD_FLOWS_DUAL_STACK + 1)
    );
    assert_eq!(rig.pods.pool().warm(), [(vnid(11), 8)].into());
    // One lease per family under each warm port's name.
    let warm_leases = |rig: &Rig| {
        let mut by_owner: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
        for l in rig.ipam.leases_of_family::<IpAddr>().unwrap() {
            if l.container_id.starts_with("sdn-warm-") {
                by_owner.entry(l.container_id).or_default().push(l.ip);
            }
        }
        by_owner
    };
    let before = warm_leases(&rig);
    assert_eq!(before.len(), 8);
    assert!(before
        .values()
        .all(|ips| ips.len() == 2 && ips[0].is_ipv4() != ips[1].is_ipv4()));

    // An ADD takes one: no bundle, both addresses handed over, the port's dual-stack rows.
    let at = rig.attachment("hot", "tenant-a");
    let bundles = rig.switch.bundles();
    let pod = rig.pods.add(&at).await.unwrap().pod;
    assert_eq!(
        rig.switch.bundles(),
        bundles,
        "the warm ADD waited for a bundle"
    );
    let ip6 = pod.ip6.expect("the warm port's IPv6 address");
    assert_eq!(
        before[&format!("sdn-warm-{}", pod.host_veth)]
            .iter()
            .copied()
            .collect::<BTreeSet<_>>(),
        BTreeSet::from([IpAddr::V4(pod.ip.unwrap()), IpAddr::V6(ip6)])
    );
    let hot: Vec<IpAddr> = rig
        .ipam
        .leases_of_family::<IpAddr>()
        .unwrap()
        .into_iter()
        .filter(|l| l.container_id == "hot")
        .map(|l| l.ip)
        .collect();
    assert_eq!(hot.len(), 2, "both leases are the pod's: {hot:?}");
    assert_eq!(rig.port_flows(&pod.host_veth), flows::POD_FLOWS_DUAL_STACK);
    rig.pods.check(&at).await.unwrap();
    assert_eq!(warm_leases(&rig).len(), 7);

    // A lease pair left by a failed cooling in another VNID does not pair with the port's
    // own IPv4 lease: the restart keeps the port's own pair and frees the stray.
    let some_warm = before
        .keys()
        .find(|o| **o != format!("sdn-warm-{}", pod.host_veth))
        .unwrap()
        .clone();
    let stray: std::net::Ipv6Addr = "fd01:0:0:5::ffff".parse().unwrap();
    rig.ipam.record(stray, &some_warm, "vnid-99").unwrap();
    // A restart keeps both addresses of each warm port, and its flows.
    let fresh = rig.restarted();
    fresh.rebuild_from_ovs().await.unwrap();
    let restored = fresh.restore_pool().await.unwrap();
    fresh
        .release_orphan_leases(&restored.warm_leases, true)
        .await
        .unwrap();
    assert_eq!(warm_leases(&rig), {
        let mut b = before.clone();
        b.remove(&format!("sdn-warm-{}", pod.host_veth));
        b
    });
    let w = fresh.pool().take_warm(vnid(11), 8, 1).unwrap();
    assert!(
        w.ip6.is_some(),
        "a restored warm port keeps its IPv6 address"
    );
    assert!(
        !rig.ipam
            .leases_of_family::<std::net::Ipv6Addr>()
            .unwrap()
            .iter()
            .any(|l| l.ip == stray),
        "the stray IPv6 lease of another VNID is released"
    );
    let own6 = before[&some_warm].iter().find(|ip| ip.is_ipv6()).copied();
    let restored = std::iter::once(w)
        .chain(std::iter::from_fn(|| {
            fresh.pool().take_warm(vnid(11), 8, 1)
        }))
        .find(|w| format!("sdn-warm-{}", w.port.host) == some_warm)
        .expect("the port with the stray lease is warm again");
    assert_eq!(
        restored.ip6.map(IpAddr::V6),
        own6,
        "the port's own IPv6 address, not the stray"
    );

    // Warm ports from before the node had IPv6 (their IPv6 leases gone here): an ADD that
    // takes one leases its IPv6 address then and installs the dual-stack rows.
    rig.ipam
        .retain(|l| !(l.container_id.starts_with("sdn-warm-") && l.ip.is_ipv6()))
        .unwrap();
    let again = rig.restarted();
    again.rebuild_from_ovs().await.unwrap();
    again.restore_pool().await.unwrap();
    assert_eq!(again.pool().warm()[&vnid(11)], 7);
    let at = rig.attachment("late", "tenant-a");
    let pod = again.add(&at).await.unwrap().pod;
    assert!(
        pod.ip6.is_some(),
        "an IPv6 lease for a pod on an IPv4 warm port"
    );
    assert_eq!(rig.port_flows(&pod.host_veth), flows::POD_FLOWS_DUAL_STACK);
    again.check(&at).await.unwrap();
}
