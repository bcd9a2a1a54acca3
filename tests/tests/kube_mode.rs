//! Kubernetes mode without a cluster: the agent's Kubernetes source and the controller against
//! the fake API server (`sdn_tests::fakeapi`), with real kube-rs clients.
//!
//! - the source lists and watches the network objects, Namespaces and this node's Pods into one
//!   `ClusterState`, follows changes (also across a forced re-list), leaves invalid objects out,
//!   and fails at start with an error naming what it could not list;
//! - the controller creates the ClusterNetwork, a HostSubnet per Node (stable, following the
//!   node's address, released when the Node goes), a NetNamespace per Namespace, applies and
//!   clears the change-network annotation, and only one of two controllers writes (Lease).

use std::time::Duration;

use cluster::kube::KubeSource;
use cluster::ClusterState;
use kube::{Client, Config};
use sdn_tests::fakeapi::FakeApi;
use serde_json::{json, Value};

fn client(fake: &FakeApi) -> Client {
    Client::try_from(Config::new(fake.url().parse().unwrap())).unwrap()
}

fn host_subnet(name: &str, ip: &str, subnet: &str) -> Value {
    json!({"apiVersion": "network.openshift.io/v1", "kind": "HostSubnet",
           "metadata": {"name": name}, "host": name, "hostIP": ip, "subnet": subnet})
}

fn net_namespace(name: &str, id: u32) -> Value {
    json!({"apiVersion": "network.openshift.io/v1", "kind": "NetNamespace",
           "metadata": {"name": name}, "netname": name, "netid": id})
}

fn cluster_network() -> Value {
    json!({"apiVersion": "network.openshift.io/v1", "kind": "ClusterNetwork",
           "metadata": {"name": "default"}, "serviceNetwork": "172.30.0.0/16",
           "clusterNetworks": [{"CIDR": "10.128.0.0/14", "hostSubnetLength": 9}],
           "pluginName": "redhat/openshift-ovs-multitenant"})
}

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

fn pod(ns: &str, name: &str, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns, "annotations": {"a": "b"}},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}})
}

fn node(name: &str, ip: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
           "status": {"addresses": [{"type": "InternalIP", "address": ip}]}})
}

/// Waits until `cond` holds for the source's state.
async fn until(src: &KubeSource, what: &str, cond: impl Fn(&ClusterState) -> bool) {
    use cluster::ClusterSource;
    let mut rx = src.subscribe();
    let ok = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if cond(&rx.borrow_and_update()) {
                return;
            }
            rx.changed().await.unwrap();
        }
    })
    .await;
    assert!(
        ok.is_ok(),
        "{what}: state is {:#?}",
        src.subscribe().borrow()
    );
}

#[tokio::test]
async fn the_source_folds_the_cluster_into_one_state_and_follows_it() {
    let fake = FakeApi::start("127.0.0.1:0");
    for o in [
        cluster_network(),
        host_subnet("n1", "192.168.1.1", "10.128.0.0/23"),
        host_subnet("n2", "192.168.1.2", "10.128.2.0/23"),
        // Outside the cluster network: left out.
        host_subnet("bad", "192.168.1.9", "10.200.0.0/23"),
        net_namespace("default", 0),
        net_namespace("tenant-a", 10),
        namespace("default"),
        namespace("tenant-a"),
        pod("tenant-a", "mine", "n1"),
        pod("tenant-a", "theirs", "n2"),
    ] {
        fake.put(o).unwrap();
    }
    let src = KubeSource::start(client(&fake), "n1", false, Duration::from_secs(10))
        .await
        .unwrap();
    until(&src, "first state", |s| {
        s.cluster_network.is_some()
            && s.host_subnets.keys().cloned().collect::<Vec<_>>() == ["n1", "n2"]
            && s.vnid_of("tenant-a") == Some(10)
            && s.namespaces.as_ref().is_some_and(|n| n.len() == 2)
            && s.pods.keys().cloned().collect::<Vec<_>>() == ["tenant-a/mine"]
            && s.pod("tenant-a", "mine")
                .is_some_and(|p| p.annotations["a"] == "b" && !p.uid.is_empty())
    })
    .await;

    // Changes arrive: a VNID, a moved node, a deleted node, a new pod.
    fake.put(net_namespace("tenant-a", 11)).unwrap();
    fake.put(host_subnet("n2", "192.168.1.22", "10.128.2.0/23"))
        .unwrap();
    until(&src, "netid and hostIP", |s| {
        s.vnid_of("tenant-a") == Some(11)
            && s.host_ip_of("n2") == Some("192.168.1.22".parse().unwrap())
    })
    .await;
    fake.delete("network.openshift.io", "hostsubnets", None, "n2");
    fake.put(pod("tenant-a", "second", "n1")).unwrap();
    until(&src, "deleted node, second pod", |s| {
        !s.host_subnets.contains_key("n2") && s.pods.len() == 2
    })
    .await;

    // A lost watch (410): the watcher re-lists and what changed meanwhile is seen, deletions
    // included.
    fake.expire_watches();
    fake.delete("network.openshift.io", "netnamespaces", None, "tenant-a");
    fake.put(net_namespace("tenant-b", 12)).unwrap();
    until(&src, "after a re-list", |s| {
        s.vnid_of("tenant-a").is_none() && s.vnid_of("tenant-b") == Some(12)
    })
    .await;

    // The wait for this node's HostSubnet: there, and not there.
    src.wait_for_host_subnet("n1", Duration::from_secs(1))
        .await
        .unwrap();
    let e = src
        .wait_for_host_subnet("n9", Duration::from_secs(1))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no HostSubnet for node \"n9\"") && e.contains("controller"),
        "{e}"
    );
}

/// The namespaces with pods in the state's peer view, sorted.
fn namespaces(s: &ClusterState) -> Vec<String> {
    let mut v: Vec<String> = s.peer_pods.namespaces().map(String::from).collect();
    v.sort();
    v
}

fn running_pod(ns: &str, name: &str, node: &str, ip: &str, app: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
           "status": {"phase": "Running", "podIP": ip}})
}

#[tokio::test]
async fn networkpolicy_mode_keeps_other_nodes_pods_reduced_and_shared_by_namespace() {
    use std::sync::Arc;
    let fake = FakeApi::start("127.0.0.1:0");
    for o in [
        cluster_network(),
        host_subnet("n1", "192.168.1.1", "10.128.0.0/23"),
        host_subnet("n2", "192.168.1.2", "10.128.2.0/23"),
        namespace("a"),
        namespace("b"),
        running_pod("a", "mine", "n1", "10.128.0.5", "web"),
        running_pod("a", "far", "n2", "10.128.2.5", "web"),
        running_pod("b", "far1", "n2", "10.128.2.6", "db"),
        running_pod("b", "far2", "n2", "10.128.2.7", "db"),
        // No address yet: not a peer.
        pod("b", "pending", "n2"),
    ] {
        fake.put(o).unwrap();
    }
    let src = KubeSource::start(client(&fake), "n1", true, Duration::from_secs(10))
        .await
        .unwrap();
    until(&src, "first state", |s| {
        s.pods.keys().cloned().collect::<Vec<_>>() == ["a/mine"]
            && namespaces(s) == ["a", "b"]
            && s.peer_pods.get("a").is_some_and(|m| m.len() == 2)
            && s.peer_pods
                .get("b")
                .is_some_and(|m| m.keys().cloned().collect::<Vec<_>>() == ["far1", "far2"])
    })
    .await;
    use cluster::ClusterSource;
    let first = src.subscribe().borrow().clone();
    let b = first.peer_pods.get("b").unwrap();
    assert!(
        Arc::ptr_eq(&b["far1"].labels, &b["far2"].labels),
        "one copy of a label set"
    );
    assert_eq!(b["far1"].ip, Some("10.128.2.6".parse().unwrap()));

    // A label change in namespace a: b's map is the same object, a's is new.
    fake.put(running_pod("a", "far", "n2", "10.128.2.5", "api"))
        .unwrap();
    until(&src, "label change", |s| {
        s.peer_pods.get("a").unwrap()["far"]
            .labels
            .get("app")
            .map(String::as_str)
            == Some("api")
    })
    .await;
    let second = src.subscribe().borrow().clone();
    assert!(second.peer_pods.shares(&first.peer_pods, "b"));
    assert!(!second.peer_pods.shares(&first.peer_pods, "a"));
    assert_eq!(second.peer_pods.changed_namespaces(&first.peer_pods), ["a"]);
    assert!(
        second.same_but_pods(&first),
        "another node's pod changes nothing but peer_pods"
    );

    // A re-list keeps the maps of namespaces that did not change; a deletion meanwhile goes.
    fake.expire_watches();
    fake.delete("", "pods", Some("a"), "far");
    until(&src, "after a re-list", |s| {
        s.peer_pods
            .get("a")
            .is_some_and(|m| m.keys().cloned().collect::<Vec<_>>() == ["mine"])
    })
    .await;
    let third = src.subscribe().borrow().clone();
    assert!(third.peer_pods.shares(&second.peer_pods, "b"));
    // The last pod of a namespace goes: so does the namespace's map.
    fake.delete("", "pods", Some("b"), "far1");
    fake.delete("", "pods", Some("b"), "far2");
    until(&src, "namespace emptied", |s| {
        s.peer_pods.get("b").is_none()
    })
    .await;
}

#[tokio::test]
async fn networkpolicy_mode_serves_before_every_pod_of_the_cluster_is_listed() {
    let fake = FakeApi::start("127.0.0.1:0");
    for o in [
        cluster_network(),
        host_subnet("n1", "192.168.1.1", "10.128.0.0/23"),
        host_subnet("n2", "192.168.1.2", "10.128.2.0/23"),
        namespace("a"),
        running_pod("a", "mine", "n1", "10.128.0.5", "web"),
        running_pod("a", "far", "n2", "10.128.2.5", "web"),
    ] {
        fake.put(o).unwrap();
    }
    // The list of every pod is slow; this node's own (field-selected) list is not.
    fake.hold_lists("pods");
    let src = KubeSource::start(client(&fake), "n1", true, Duration::from_secs(10))
        .await
        .expect("the source starts without the list of every pod");
    use cluster::ClusterSource;
    let first = src.subscribe().borrow().clone();
    assert_eq!(first.pods.keys().cloned().collect::<Vec<_>>(), ["a/mine"]);
    assert!(!first.peer_pods_listed, "the peers are not listed yet");
    assert_eq!(
        first.peer_pods.pod_count(),
        0,
        "no peer before the whole list (rows allow less, never more)"
    );
    // This node's pods follow meanwhile.
    fake.put(running_pod("a", "mine2", "n1", "10.128.0.6", "web"))
        .unwrap();
    until(&src, "a local pod added while the peers are listed", |s| {
        s.pods.contains_key("a/mine2") && !s.peer_pods_listed
    })
    .await;
    fake.release_lists("pods");
    until(&src, "peers listed", |s| {
        s.peer_pods_listed
            && s.peer_pods
                .get("a")
                .is_some_and(|m| m.keys().cloned().collect::<Vec<_>>() == ["far", "mine", "mine2"])
    })
    .await;
}

/// `o` with the audit logging annotation `{"allow": "info"}`.
fn annotated(mut o: Value) -> Value {
    o["metadata"]["annotations"] = json!({"k8s.ovn.org/acl-logging": r#"{"allow": "info"}"#});
    o
}

fn cnp(name: &str, spec: Value) -> Value {
    let mut v = json!({"apiVersion": "policy.networking.k8s.io/v1alpha2",
                       "kind": "ClusterNetworkPolicy", "metadata": {"name": name}});
    v["spec"] = spec;
    v
}

/// ClusterNetworkPolicies in multitenant mode: read, a bad one refused by field and failing
/// closed, the pods of the cluster listed once one exists (its peers); a cluster without the
/// CRD (404) has none and the source still starts.
#[tokio::test]
async fn cluster_network_policies_are_read_in_multitenant_mode_and_a_missing_crd_means_none() {
    let fake = FakeApi::start("127.0.0.1:0");
    for o in [
        cluster_network(),
        host_subnet("n1", "192.168.1.1", "10.128.0.0/23"),
        net_namespace("monitoring", 10),
        namespace("monitoring"),
        running_pod("monitoring", "prom", "n2", "10.128.2.5", "prom"),
        annotated(cnp(
            "scrape",
            json!({"tier": "Admin", "priority": 10, "subject": {"namespaces": {}},
                   "ingress": [{"name": "prometheus", "action": "Accept",
                                "from": [{"namespaces": {"matchLabels":
                                    {"kubernetes.io/metadata.name": "monitoring"}}}],
                                "protocols": [{"tcp": {"destinationPort": {"number": 9100}}}]}]}),
        )),
        cnp(
            "typo",
            json!({"tier": "Baseline", "priority": 1001, "subject": {"namespaces": {}},
                   "egress": [{"action": "Deny", "to": [{"networks": ["10.0.0.0/8"]}]}]}),
        ),
    ] {
        fake.put(o).unwrap();
    }
    let src = KubeSource::start(client(&fake), "n1", false, Duration::from_secs(10))
        .await
        .unwrap();
    until(
        &src,
        "both policies, the bad one failing closed, peers listed",
        |s| {
            let scrape = s.cluster_policies.get("scrape");
            let typo = s.cluster_policies.get("typo");
            scrape.is_some_and(|p| p.priority == 10 && p.ingress[0].name == "prometheus")
                && typo.is_some_and(|p| {
                    p.tier.name() == "Baseline"
                        && p.ingress.is_empty()
                        && p.egress.len() == 1
                        && p.egress[0].fails_closed()
                })
                && s.refused_cluster_policies
                    .get("typo")
                    .is_some_and(|why| why.contains("spec.priority"))
                && !s.refused_cluster_policies.contains_key("scrape")
                && scrape.is_some_and(|p| p.log.allow && !p.log.deny)
                && s.cluster_policy_logging.get("scrape").is_some_and(|l| {
                    l.logging.allow.map(|v| v.name()) == Some("info") && l.problem.is_none()
                })
                && s.peer_pods_listed
                && s.peer_pods
                    .get("monitoring")
                    .is_some_and(|m| m.contains_key("prom"))
        },
    )
    .await;
    // Fixed: applied, no longer refused; deleted: gone.
    fake.put(cnp(
        "typo",
        json!({"tier": "Baseline", "priority": 1000, "subject": {"namespaces": {}},
               "egress": [{"action": "Deny", "to": [{"networks": ["10.0.0.0/8"]}]}]}),
    ))
    .unwrap();
    fake.delete(
        "policy.networking.k8s.io",
        "clusternetworkpolicies",
        None,
        "scrape",
    );
    until(&src, "fixed and deleted", |s| {
        s.refused_cluster_policies.is_empty()
            && s.cluster_policies.keys().cloned().collect::<Vec<_>>() == ["typo"]
            && s.cluster_policies["typo"].priority == 1000
    })
    .await;
    drop(src);

    // No CRD: the source starts, with none, and lists no pod of other nodes.
    let bare = FakeApi::start("127.0.0.1:0");
    bare.unregister("policy.networking.k8s.io", "clusternetworkpolicies");
    for o in [
        cluster_network(),
        host_subnet("n1", "192.168.1.1", "10.128.0.0/23"),
    ] {
        bare.put(o).unwrap();
    }
    let src = KubeSource::start(client(&bare), "n1", false, Duration::from_secs(10))
        .await
        .unwrap();
    until(&src, "no policies", |s| {
        s.cluster_policies.is_empty() && s.peer_pods.is_empty() && !s.peer_pods_listed
    })
    .await;
}

/// The Nodes are watched only once a ClusterNetworkPolicy has a `nodes` peer; then the state
/// holds each node's labels and IP addresses, follows a label change and a node that leaves,
/// and a status update that changes neither (the kubelet's heartbeats) changes nothing.
#[tokio::test]
async fn nodes_are_watched_once_a_cluster_policy_has_a_nodes_peer() {
    let fake = FakeApi::start("127.0.0.1:0");
    let mut n2 = node("n2", "192.168.1.2");
    n2["metadata"]["labels"] = json!({"role": "infra"});
    n2["status"]["addresses"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "Hostname", "address": "n2"}));
    for o in [
        cluster_network(),
        host_subnet("n1", "192.168.1.1", "10.128.0.0/23"),
        node("n1", "192.168.1.1"),
        n2,
        cnp(
            "web",
            json!({"tier": "Admin", "priority": 10, "subject": {"namespaces": {}},
                   "egress": [{"action": "Deny", "to": [{"networks": ["10.0.0.0/8"]}]}]}),
        ),
    ] {
        fake.put(o).unwrap();
    }
    let src = KubeSource::start(client(&fake), "n1", false, Duration::from_secs(10))
        .await
        .unwrap();
    until(&src, "the policy", |s| {
        s.cluster_policies.contains_key("web")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        fake.requests().count("*", "/api/v1/nodes"),
        0,
        "no nodes peer: the Nodes are not asked for"
    );
    {
        use cluster::ClusterSource;
        let s = src.subscribe().borrow().clone();
        assert!(!s.nodes_listed && s.nodes.is_empty());
    }

    fake.put(cnp(
        "infra",
        json!({"tier": "Admin", "priority": 5, "subject": {"namespaces": {}},
               "egress": [{"action": "Accept", "to": [{"nodes": {"matchLabels": {"role": "infra"}}}],
                           "protocols": [{"tcp": {"destinationPort": {"number": 10250}}}]}]}),
    ))
    .unwrap();
    until(&src, "the nodes, listed", |s| {
        s.nodes_listed
            && s.nodes.len() == 2
            && s.nodes["n2"].labels.get("role").map(String::as_str) == Some("infra")
            && s.nodes["n2"].addresses == ["192.168.1.2".parse::<std::net::IpAddr>().unwrap()]
    })
    .await;

    // A heartbeat: the same labels and addresses, another condition time. No new state.
    let mut rx = {
        use cluster::ClusterSource;
        src.subscribe()
    };
    rx.borrow_and_update();
    let mut beat = fake.get("", "nodes", None, "n1").unwrap();
    beat["status"]["conditions"] = json!([{"type": "Ready", "status": "True",
        "lastHeartbeatTime": "2026-11-29T00:00:00Z"}]);
    fake.put(beat).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !rx.has_changed().unwrap(),
        "a status update that changes no label or address publishes nothing"
    );

    // n1 labelled infra, n2 gone.
    let mut n1 = fake.get("", "nodes", None, "n1").unwrap();
    n1["metadata"]["labels"] = json!({"role": "infra"});
    fake.put(n1).unwrap();
    fake.delete("", "nodes", None, "n2");
    until(&src, "n1 infra, n2 gone", |s| {
        s.nodes.keys().cloned().collect::<Vec<_>>() == ["n1"]
            && s.nodes["n1"].labels.get("role").map(String::as_str) == Some("infra")
    })
    .await;
}

#[tokio::test]
async fn the_source_says_what_it_could_not_list() {
    // Nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = Client::try_from(Config::new(
        format!("http://127.0.0.1:{port}").parse().unwrap(),
    ))
    .unwrap();
    let e = KubeSource::start(c, "n1", false, Duration::from_secs(2))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("could not list ClusterNetwork")
            && e.contains("HostSubnet")
            && e.contains("CRDs"),
        "{e}"
    );
}

/// Runs `sdn-agent controller` against the fake (a real process); killed on drop.
struct Controller(std::process::Child);

impl Controller {
    fn start(kubeconfig: &std::path::Path, name: &str, extra: &[&str]) -> Controller {
        let child = sdn_tests::harness::without_agent_env(&mut std::process::Command::new(
            sdn_tests::harness::workspace_bin("sdn-agent"),
        ))
        .args(["controller", "--node-name", name, "--kubeconfig"])
        .arg(kubeconfig)
        .args(extra)
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn sdn-agent controller");
        Controller(child)
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait(what: &str, cond: impl Fn() -> bool) {
    assert!(
        sdn_tests::harness::wait_until(Duration::from_secs(15), cond),
        "{what}"
    );
}

#[test]
fn the_controller_allocates_subnets_and_vnids_and_one_leads() {
    let fake = FakeApi::start("127.0.0.1:0");
    let dir = tempdir();
    let kc = dir.join("kubeconfig");
    fake.kubeconfig(&kc).unwrap();
    for o in [
        node("n1", "192.168.1.1"),
        node("n2", "192.168.1.2"),
        namespace("default"),
        namespace("kube-system"),
        namespace("tenant-a"),
        namespace("tenant-b"),
    ] {
        fake.put(o).unwrap();
    }
    let globals = ["--global-namespace", "kube-system"];
    let _c1 = Controller::start(&kc, "c1", &globals);
    let _c2 = Controller::start(&kc, "c2", &globals);
    let hs = |n: &str| fake.get("network.openshift.io", "hostsubnets", None, n);
    let nn = |n: &str| fake.get("network.openshift.io", "netnamespaces", None, n);
    // Every object the assertions below read: one plan's creates run concurrently, so one
    // being there says nothing of the others.
    wait("HostSubnets and NetNamespaces", || {
        hs("n1").is_some()
            && hs("n2").is_some()
            && ["default", "kube-system", "tenant-a", "tenant-b"]
                .iter()
                .all(|n| nn(n).is_some())
    });
    assert!(fake
        .get("network.openshift.io", "clusternetworks", None, "default")
        .is_some());
    let (s1, s2) = (hs("n1").unwrap(), hs("n2").unwrap());
    assert_eq!(s1["hostIP"], "192.168.1.1");
    assert_ne!(s1["subnet"], s2["subnet"]);
    let id = |n: &str| nn(n).unwrap()["netid"].as_u64().unwrap();
    assert_eq!((id("default"), id("kube-system")), (0, 0));
    assert!(id("tenant-a") >= 10 && id("tenant-b") >= 10 && id("tenant-a") != id("tenant-b"));

    // One leader: the Lease names one of the two, and each object was created once.
    let lease = fake
        .get(
            "coordination.k8s.io",
            "leases",
            Some("sdn"),
            "sdn-controller",
        )
        .expect("the controller Lease");
    let holder = lease["spec"]["holderIdentity"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        holder.starts_with("c1-") || holder.starts_with("c2-"),
        "{lease}"
    );
    assert_eq!(
        fake.requests()
            .count("create", "/apis/network.openshift.io/v1/hostsubnets"),
        2
    );

    // The change-network annotation: applied and cleared.
    let mut b = nn("tenant-b").unwrap();
    b["metadata"]["annotations"] =
        json!({"pod.network.openshift.io/multitenant.change-network": "join:tenant-a"});
    fake.put(b).unwrap();
    wait("tenant-b joined tenant-a", || {
        let b = nn("tenant-b").unwrap();
        b["netid"] == nn("tenant-a").unwrap()["netid"]
            && b["metadata"]["annotations"]
                .get("pod.network.openshift.io/multitenant.change-network")
                .is_none()
    });

    // A node moves and one goes; a namespace goes.
    fake.put(node("n2", "192.168.1.22")).unwrap();
    fake.delete("", "nodes", None, "n1");
    fake.delete("", "namespaces", None, "tenant-a");
    wait("n2 moved, n1 and tenant-a released", || {
        hs("n1").is_none()
            && hs("n2")
                .is_some_and(|h| h["hostIP"] == "192.168.1.22" && h["subnet"] == s2["subnet"])
            && nn("tenant-a").is_none()
    });
    let _ = std::fs::remove_dir_all(dir);
}

fn tempdir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(sdn_tests::harness::unique_name("kube-mode"));
    std::fs::create_dir_all(&d).unwrap();
    d
}
