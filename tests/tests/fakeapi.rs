//! The fake Kubernetes API server (`sdn_tests::fakeapi`) driven by kube-rs itself: typed and
//! dynamic `Api`s, the runtime `watcher`/`reflector`, 410 and closed-stream recovery, chunked
//! watch streams, request counters, and serving inside a network namespace.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Client, Config, ResourceExt};
use sdn_tests::fakeapi::{FakeApi, Options};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn client(fake: &FakeApi) -> Client {
    let cfg = Config::new(fake.url().parse().unwrap());
    Client::try_from(cfg).unwrap()
}

/// A fake with frequent bookmarks and a small history.
fn fake_with(history_limit: usize) -> FakeApi {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let options = Options {
        history_limit,
        bookmark_interval: Duration::from_millis(100),
        ..Options::default()
    };
    FakeApi::serve(listener, options).unwrap()
}

/// The `Status` of a failed call.
fn api_err<T: std::fmt::Debug>(r: kube::Result<T>) -> (u16, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.reason.clone()),
        other => panic!("expected an api error, got {other:?}"),
    }
}

/// Polls `cond` (async-friendly) until it holds; panics after 5 s naming `what`.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn pod(ns: &str, name: &str, node: &str, app: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "pause"}]},
    }))
    .unwrap()
}

fn ar(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("network.openshift.io", "v1", kind),
        plural,
    )
}

fn dynamic(name: &str, data: Value, ar: &ApiResource) -> DynamicObject {
    let mut o = DynamicObject::new(name, ar);
    o.data = data;
    o
}

#[tokio::test]
async fn nodes_namespaces_pods_and_leases_through_typed_apis() {
    let fake = FakeApi::start("127.0.0.1:0");
    let c = client(&fake);

    // Nodes: create, conflicts, get, list with label selectors, replace, merge patch, delete.
    let nodes: Api<Node> = Api::all(c.clone());
    let n1: Node =
        serde_json::from_value(json!({"metadata": {"name": "n1", "labels": {"role": "worker"}}}))
            .unwrap();
    let created = nodes.create(&PostParams::default(), &n1).await.unwrap();
    assert!(created.uid().is_some_and(|u| u.len() == 36));
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(
        api_err(nodes.create(&PostParams::default(), &n1).await),
        (409, "AlreadyExists".into())
    );
    assert_eq!(nodes.get("n1").await.unwrap(), created);
    let names = |l: kube::core::ObjectList<Node>| -> Vec<String> {
        l.items.iter().map(ResourceExt::name_any).collect()
    };
    let lp = |s: &str| ListParams::default().labels(s);
    assert_eq!(names(nodes.list(&lp("role=worker")).await.unwrap()), ["n1"]);
    assert!(names(nodes.list(&lp("role!=worker")).await.unwrap()).is_empty());
    assert_eq!(names(nodes.list(&lp("role")).await.unwrap()), ["n1"]);
    assert!(names(nodes.list(&lp("!role")).await.unwrap()).is_empty());

    let mut changed = created.clone();
    changed.labels_mut().insert("zone".into(), "a".into());
    let replaced = nodes
        .replace("n1", &PostParams::default(), &changed)
        .await
        .unwrap();
    let rv = |o: &Node| o.resource_version().unwrap().parse::<u64>().unwrap();
    assert!(rv(&replaced) > rv(&created));
    assert_eq!(
        api_err(nodes.replace("n1", &PostParams::default(), &changed).await),
        (409, "Conflict".into()),
        "a replace with a stale resourceVersion conflicts"
    );
    let patched = nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"zone": null, "x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.labels().get("x").map(String::as_str), Some("y"));
    assert!(!patched.labels().contains_key("zone"));
    let gone = nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    assert_eq!(gone.left().unwrap().name_any(), "n1");
    assert_eq!(api_err(nodes.get("n1").await), (404, "NotFound".into()));

    // Namespaces get an Active phase.
    let namespaces: Api<Namespace> = Api::all(c.clone());
    for ns in ["tenant-a", "tenant-b"] {
        let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        let n = namespaces.create(&PostParams::default(), &n).await.unwrap();
        assert_eq!(n.status.unwrap().phase.as_deref(), Some("Active"));
    }
    assert_eq!(
        namespaces
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );

    // Pods: across namespaces with the node field selector, per namespace, status subresource.
    for (ns, name, node) in [
        ("tenant-a", "a1", "n1"),
        ("tenant-a", "a2", "n2"),
        ("tenant-b", "b1", "n1"),
    ] {
        let api: Api<Pod> = Api::namespaced(c.clone(), ns);
        api.create(&PostParams::default(), &pod(ns, name, node, "web"))
            .await
            .unwrap();
    }
    let all: Api<Pod> = Api::all(c.clone());
    let on = |sel: &str| {
        let all = all.clone();
        let lp = ListParams::default().fields(sel);
        async move {
            let mut v: Vec<String> = all
                .list(&lp)
                .await
                .unwrap()
                .items
                .iter()
                .map(|p| format!("{}/{}", p.namespace().unwrap(), p.name_any()))
                .collect();
            v.sort();
            v
        }
    };
    assert_eq!(on("spec.nodeName=n1").await, ["tenant-a/a1", "tenant-b/b1"]);
    assert_eq!(on("spec.nodeName!=n1").await, ["tenant-a/a2"]);
    assert_eq!(
        on("spec.nodeName=n1,metadata.namespace=tenant-b").await,
        ["tenant-b/b1"]
    );
    assert_eq!(
        api_err(
            all.list(&ListParams::default().fields("spec.host=n1"))
                .await
        ),
        (400, "BadRequest".into()),
        "unsupported field selectors are refused, as on a real server"
    );
    // Pagination: limit and continue, served from one snapshot.
    let page1 = all.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(page1.items.len(), 2);
    let token = page1.metadata.continue_.clone().expect("a continue token");
    let page2 = all
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(page2.items.len(), 1);
    assert!(page2.metadata.continue_.is_none());
    assert_eq!(
        page2.metadata.resource_version,
        page1.metadata.resource_version
    );
    let tenant_a: Api<Pod> = Api::namespaced(c.clone(), "tenant-a");
    assert_eq!(
        tenant_a
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    assert_eq!(api_err(tenant_a.get("b1").await).0, 404);
    let with_ip = tenant_a
        .patch_status(
            "a1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"podIP": "10.128.0.5"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        with_ip.status.as_ref().unwrap().pod_ip.as_deref(),
        Some("10.128.0.5")
    );
    let mut no_status = with_ip.clone();
    no_status.status = None;
    no_status.labels_mut().insert("v".into(), "2".into());
    let kept = tenant_a
        .replace("a1", &PostParams::default(), &no_status)
        .await
        .unwrap();
    assert_eq!(
        kept.status.unwrap().pod_ip.as_deref(),
        Some("10.128.0.5"),
        "writes to the main resource keep the status"
    );
    assert_eq!(on("status.podIP=10.128.0.5").await, ["tenant-a/a1"]);

    // Leases: two contenders, the one with the stale version loses.
    let leases: Api<Lease> = Api::namespaced(c.clone(), "kube-system");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "sdn-controller"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
    }))
    .unwrap();
    let held = leases.create(&PostParams::default(), &lease).await.unwrap();
    assert_eq!(held.namespace().as_deref(), Some("kube-system"));
    let mut by_b = held.clone();
    by_b.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let mut by_c = held.clone();
    by_c.spec.as_mut().unwrap().holder_identity = Some("c".into());
    leases
        .replace("sdn-controller", &PostParams::default(), &by_b)
        .await
        .unwrap();
    assert_eq!(
        api_err(
            leases
                .replace("sdn-controller", &PostParams::default(), &by_c)
                .await
        ),
        (409, "Conflict".into())
    );
    let now = leases.get("sdn-controller").await.unwrap();
    assert_eq!(now.spec.unwrap().holder_identity.as_deref(), Some("b"));
    assert_eq!(now.metadata.generation, Some(2));
}

#[tokio::test]
async fn openshift_kinds_through_dynamic_apis() {
    let fake = FakeApi::start("127.0.0.1:0");
    let c = client(&fake);
    let hs_ar = ar("HostSubnet", "hostsubnets");
    let hs: Api<DynamicObject> = Api::all_with(c.clone(), &hs_ar);

    let n1 = dynamic(
        "n1",
        json!({"host": "n1", "hostIP": "172.18.0.1", "subnet": "10.128.0.0/23"}),
        &hs_ar,
    );
    let created = hs.create(&PostParams::default(), &n1).await.unwrap();
    assert_eq!(created.data["hostIP"], "172.18.0.1");
    assert!(created.metadata.namespace.is_none(), "cluster-scoped");
    let got = hs.get("n1").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);
    assert_eq!(
        hs.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );

    let mut moved = got.clone();
    moved.data["hostIP"] = json!("172.18.0.9");
    let replaced = hs
        .replace("n1", &PostParams::default(), &moved)
        .await
        .unwrap();
    assert_eq!(replaced.data["hostIP"], "172.18.0.9");
    assert_eq!(replaced.metadata.generation, Some(2));

    let merged = hs
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(merged.annotations()["a"], "b");
    assert_eq!(
        merged.metadata.generation,
        Some(2),
        "metadata changes keep the generation"
    );
    let strategic = hs
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"subnet": "10.128.2.0/23"})),
        )
        .await
        .unwrap();
    assert_eq!(strategic.data["subnet"], "10.128.2.0/23");

    // JSON patch (RFC 6902). kube's `Patch::Json` wants the `json_patch` crate's type, which
    // this crate does not depend on; the client sends the same request raw.
    let jp: DynamicObject = json_patch(
        &c,
        "/apis/network.openshift.io/v1/hostsubnets/n1",
        json!([
            {"op": "test", "path": "/hostIP", "value": "172.18.0.9"},
            {"op": "replace", "path": "/hostIP", "value": "172.18.0.2"},
            {"op": "add", "path": "/metadata/labels", "value": {"k": "v"}},
        ]),
    )
    .await
    .unwrap();
    assert_eq!(jp.data["hostIP"], "172.18.0.2");
    assert_eq!(jp.labels()["k"], "v");
    let failing = json_patch::<DynamicObject>(
        &c,
        "/apis/network.openshift.io/v1/hostsubnets/n1",
        json!([
            {"op": "test", "path": "/hostIP", "value": "172.18.0.9"},
            {"op": "replace", "path": "/hostIP", "value": "1.1.1.1"},
        ]),
    )
    .await;
    assert_eq!(api_err(failing), (422, "Invalid".into()));
    assert_eq!(hs.get("n1").await.unwrap().data["hostIP"], "172.18.0.2");

    // Server-side apply creates, then updates; it needs a field manager.
    let n2 = dynamic(
        "n2",
        json!({"host": "n2", "hostIP": "172.18.0.3", "subnet": "10.128.4.0/23"}),
        &hs_ar,
    );
    let applied = hs
        .patch("n2", &PatchParams::apply("test"), &Patch::Apply(&n2))
        .await
        .unwrap();
    assert_eq!(applied.data["subnet"], "10.128.4.0/23");
    let mut n2b = n2.clone();
    n2b.data["hostIP"] = json!("172.18.0.4");
    let reapplied = hs
        .patch(
            "n2",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&n2b),
        )
        .await
        .unwrap();
    assert_eq!(reapplied.data["hostIP"], "172.18.0.4");
    assert_eq!(reapplied.metadata.uid, applied.metadata.uid);
    assert_eq!(
        api_err(
            hs.patch("n2", &PatchParams::default(), &Patch::Apply(&n2b))
                .await
        )
        .0,
        422
    );
    assert_eq!(
        api_err(
            hs.patch("n9", &PatchParams::default(), &Patch::Merge(json!({})))
                .await
        ),
        (404, "NotFound".into())
    );

    // NetNamespaces and ClusterNetwork, cluster-scoped; EgressNetworkPolicy, namespaced.
    let nn_ar = ar("NetNamespace", "netnamespaces");
    let nn: Api<DynamicObject> = Api::all_with(c.clone(), &nn_ar);
    for (name, id) in [("tenant-a", 11), ("tenant-b", 12)] {
        nn.create(
            &PostParams::default(),
            &dynamic(name, json!({"netname": name, "netid": id}), &nn_ar),
        )
        .await
        .unwrap();
    }
    let ids: BTreeSet<i64> = nn
        .list(&ListParams::default().fields("metadata.name=tenant-b"))
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| o.data["netid"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, BTreeSet::from([12]));
    let cn_ar = ar("ClusterNetwork", "clusternetworks");
    let cn: Api<DynamicObject> = Api::all_with(c.clone(), &cn_ar);
    cn.create(
        &PostParams::default(),
        &dynamic(
            "default",
            json!({"network": "10.128.0.0/14", "hostsubnetlength": 9, "serviceNetwork": "172.30.0.0/16",
                   "pluginName": "redhat/openshift-ovs-multitenant"}),
            &cn_ar,
        ),
    )
    .await
    .unwrap();
    assert_eq!(cn.get("default").await.unwrap().data["hostsubnetlength"], 9);
    let enp_ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("network.openshift.io", "v1", "EgressNetworkPolicy"),
        "egressnetworkpolicies",
    );
    let enp: Api<DynamicObject> = Api::namespaced_with(c.clone(), "tenant-a", &enp_ar);
    let e = enp
        .create(
            &PostParams::default(),
            &dynamic("default", json!({"spec": {"egress": []}}), &enp_ar),
        )
        .await
        .unwrap();
    assert_eq!(e.metadata.namespace.as_deref(), Some("tenant-a"));

    // Delete preconditions, dry runs and finalizers.
    let tb = nn.get("tenant-b").await.unwrap();
    let stale = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: Some("1".into()),
            uid: None,
        }),
        ..DeleteParams::default()
    };
    assert_eq!(
        api_err(nn.delete("tenant-b", &stale).await),
        (409, "Conflict".into())
    );
    nn.delete("tenant-b", &DeleteParams::default().dry_run())
        .await
        .unwrap();
    assert_eq!(
        nn.get("tenant-b").await.unwrap(),
        tb,
        "a dry run changes nothing"
    );
    nn.patch(
        "tenant-b",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["sdn/cleanup"]}})),
    )
    .await
    .unwrap();
    let pending = nn
        .delete("tenant-b", &DeleteParams::default())
        .await
        .unwrap();
    let pending = pending.left().unwrap();
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert!(
        nn.get("tenant-b").await.is_ok(),
        "finalizers hold the object"
    );
    nn.patch(
        "tenant-b",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(
        api_err(nn.get("tenant-b").await).0,
        404,
        "gone with its last finalizer"
    );

    // Deletes return the object; the direct store view agrees with the API.
    let d = hs.delete("n1", &DeleteParams::default()).await.unwrap();
    assert_eq!(d.left().unwrap().name_any(), "n1");
    assert!(fake
        .get("network.openshift.io", "hostsubnets", None, "n1")
        .is_none());
    assert_eq!(fake.list("hostsubnets").len(), 1);
    assert_eq!(fake.list("netnamespaces").len(), 1);

    // An unknown kind is a 404 Status.
    let nope = ar("Nope", "nopes");
    let nope: Api<DynamicObject> = Api::all_with(c.clone(), &nope);
    assert_eq!(
        api_err(nope.list(&ListParams::default()).await),
        (404, "NotFound".into())
    );
}

/// Sends a JSON patch (`application/json-patch+json`) through the kube client.
async fn json_patch<T: serde::de::DeserializeOwned>(
    c: &Client,
    path: &str,
    ops: Value,
) -> kube::Result<T> {
    let req = hyper::Request::builder()
        .method("PATCH")
        .uri(path)
        .header("content-type", "application/json-patch+json")
        .body(serde_json::to_vec(&ops).unwrap())
        .unwrap();
    c.request(req).await
}

#[tokio::test]
async fn kubeconfig_version_and_discovery() {
    let fake = FakeApi::start("127.0.0.1:0");
    let dir = std::env::temp_dir().join(format!("fakeapi-kc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("kubeconfig");
    fake.kubeconfig(&path).unwrap();
    let kc = Kubeconfig::read_from(&path).unwrap();
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    assert_eq!(cfg.default_namespace, "default");
    let c = Client::try_from(cfg).unwrap();
    let v = c.apiserver_version().await.unwrap();
    assert_eq!(v.major, "1");

    let discovery = kube::Discovery::new(c.clone()).run().await.unwrap();
    let group = discovery
        .get("network.openshift.io")
        .expect("sdn group discovered");
    let (hs, caps) = group
        .recommended_kind("HostSubnet")
        .expect("HostSubnet discovered");
    assert_eq!(hs.plural, "hostsubnets");
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);
    let (_, lease_caps) = discovery
        .get("coordination.k8s.io")
        .and_then(|g| g.recommended_kind("Lease"))
        .expect("leases discovered");
    assert_eq!(lease_caps.scope, kube::discovery::Scope::Namespaced);
    assert!(discovery
        .get("")
        .and_then(|g| g.recommended_kind("Pod"))
        .is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn reflectors_converge_and_recover_from_410_and_closed_streams() {
    let fake = fake_with(10_000);
    let c = client(&fake);
    for (ns, name, node) in [("a", "p1", "n1"), ("a", "p2", "n2"), ("b", "p3", "n1")] {
        fake.put(serde_json::to_value(pod(ns, name, node, "web")).unwrap())
            .unwrap();
    }
    let hs_ar = ar("HostSubnet", "hostsubnets");
    fake.put(json!({"apiVersion": "network.openshift.io/v1", "kind": "HostSubnet",
                    "metadata": {"name": "n1"}, "host": "n1", "hostIP": "172.18.0.1", "subnet": "10.128.0.0/23"}))
        .unwrap();

    // This node's pods (field selector) and all HostSubnets, as the agent watches them.
    let (pods, writer) = reflector::store::<Pod>();
    let cfg = watcher::Config::default().fields("spec.nodeName=n1");
    let stream = reflector(writer, watcher(Api::<Pod>::all(c.clone()), cfg)).default_backoff();
    let pods_task = tokio::spawn(stream.for_each(|_| async {}));
    let hs_writer = reflector::store::Writer::<DynamicObject>::new(hs_ar.clone());
    let subnets = hs_writer.as_reader();
    let hs_api: Api<DynamicObject> = Api::all_with(c.clone(), &hs_ar);
    let stream = reflector(
        hs_writer,
        watcher(hs_api.clone(), watcher::Config::default()),
    )
    .default_backoff();
    let hs_task = tokio::spawn(stream.for_each(|_| async {}));
    pods.wait_until_ready().await.unwrap();
    subnets.wait_until_ready().await.unwrap();

    let pod_names = || -> BTreeSet<String> {
        pods.state()
            .iter()
            .map(|p| format!("{}/{}", p.namespace().unwrap(), p.name_any()))
            .collect()
    };
    let set = |v: &[&str]| -> BTreeSet<String> { v.iter().map(|s| s.to_string()).collect() };
    assert_eq!(pod_names(), set(&["a/p1", "b/p3"]));
    let host_ip = |name: &str| -> Option<String> {
        subnets
            .state()
            .iter()
            .find(|o| o.name_any() == name)
            .map(|o| o.data["hostIP"].as_str().unwrap_or_default().to_string())
    };
    assert_eq!(host_ip("n1").as_deref(), Some("172.18.0.1"));

    // Live changes through the API.
    let a: Api<Pod> = Api::namespaced(c.clone(), "a");
    a.create(&PostParams::default(), &pod("a", "p4", "n1", "web"))
        .await
        .unwrap();
    a.create(&PostParams::default(), &pod("a", "p5", "n2", "web"))
        .await
        .unwrap();
    a.delete("p1", &DeleteParams::default()).await.unwrap();
    hs_api
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"hostIP": "172.18.0.7"})),
        )
        .await
        .unwrap();
    hs_api
        .create(
            &PostParams::default(),
            &dynamic(
                "n2",
                json!({"host": "n2", "hostIP": "172.18.0.2", "subnet": "10.128.2.0/23"}),
                &hs_ar,
            ),
        )
        .await
        .unwrap();
    eventually("pods after live changes", || {
        pod_names() == set(&["a/p4", "b/p3"])
    })
    .await;
    eventually("hostsubnets after live changes", || {
        host_ip("n1").as_deref() == Some("172.18.0.7") && host_ip("n2").is_some()
    })
    .await;

    // 410: every watch ends with an Expired ERROR; the watchers must re-list. Changes made while
    // they are down show up only through that re-list.
    let before = fake.requests();
    fake.expire_watches();
    fake.delete("", "pods", Some("b"), "p3").unwrap();
    fake.put(serde_json::to_value(pod("b", "p6", "n1", "web")).unwrap())
        .unwrap();
    fake.delete("network.openshift.io", "hostsubnets", None, "n2")
        .unwrap();
    eventually("pods after 410", || pod_names() == set(&["a/p4", "b/p6"])).await;
    eventually("hostsubnets after 410", || host_ip("n2").is_none()).await;
    let since = fake.requests().since(&before);
    assert!(
        since.count("list", "/api/v1/pods") >= 1,
        "pods re-listed:\n{since}"
    );
    assert!(
        since.count("list", "/apis/network.openshift.io/v1/hostsubnets") >= 1,
        "hostsubnets re-listed:\n{since}"
    );

    // Closed streams: the watchers resume from their last version, without a list.
    assert!(
        wait_watches(&fake, 2).await,
        "both watchers watch again after the 410"
    );
    let before = fake.requests();
    fake.close_watches();
    a.create(&PostParams::default(), &pod("a", "p7", "n1", "web"))
        .await
        .unwrap();
    hs_api
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"hostIP": "172.18.0.8"})),
        )
        .await
        .unwrap();
    eventually("pods after closed streams", || {
        pod_names() == set(&["a/p4", "a/p7", "b/p6"])
    })
    .await;
    eventually("hostsubnets after closed streams", || {
        host_ip("n1").as_deref() == Some("172.18.0.8")
    })
    .await;
    let since = fake.requests().since(&before);
    assert!(since.count("watch", "/api/v1/pods") >= 1, "{since}");
    assert_eq!(
        since.count("list", "/"),
        0,
        "resumed, not re-listed:\n{since}"
    );

    pods_task.abort();
    hs_task.abort();
}

#[tokio::test]
async fn event_recorder_publishes_and_counts_a_series() {
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let fake = FakeApi::start("127.0.0.1:0");
    let c = client(&fake);
    let recorder = Recorder::new(
        c.clone(),
        Reporter {
            controller: "sdn-controller".into(),
            instance: Some("test".into()),
        },
    );
    let node = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some("n1".into()),
        ..Default::default()
    };
    let ev = Event {
        type_: EventType::Normal,
        reason: "SubnetAllocated".into(),
        note: Some("10.128.0.0/23".into()),
        action: "Allocate".into(),
        secondary: None,
    };
    recorder.publish(&ev, &node).await.unwrap();
    recorder.publish(&ev, &node).await.unwrap();
    let events = fake.list("events");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["apiVersion"], "events.k8s.io/v1");
    assert_eq!(events[0]["metadata"]["namespace"], "default");
    assert_eq!(events[0]["series"]["count"], 2);
}

async fn wait_watches(fake: &FakeApi, n: usize) -> bool {
    let end = Instant::now() + Duration::from_secs(5);
    while fake.watch_count() < n {
        if Instant::now() > end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

#[tokio::test]
async fn watch_from_a_forgotten_version_gets_410_and_streaming_lists_work() {
    let fake = fake_with(3);
    let c = client(&fake);
    let leases: Api<Lease> = Api::namespaced(c.clone(), "ns");
    let old = leases.list(&ListParams::default()).await.unwrap();
    let old_rv = old.metadata.resource_version.unwrap();
    for i in 0..5 {
        let l: Lease =
            serde_json::from_value(json!({"metadata": {"name": format!("l{i}")}})).unwrap();
        leases.create(&PostParams::default(), &l).await.unwrap();
    }
    let mut s = leases
        .watch(&WatchParams::default(), &old_rv)
        .await
        .unwrap()
        .boxed();
    match tokio::time::timeout(Duration::from_secs(2), s.try_next()).await {
        Ok(Ok(Some(WatchEvent::Error(e)))) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"), "{e:?}")
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    // Within the history: the last two creations are replayed.
    let recent = fake.resource_version() - 2;
    let mut s = leases
        .watch(&WatchParams::default(), &recent.to_string())
        .await
        .unwrap()
        .boxed();
    for want in ["l3", "l4"] {
        match tokio::time::timeout(Duration::from_secs(2), s.try_next()).await {
            Ok(Ok(Some(WatchEvent::Added(l)))) => assert_eq!(l.name_any(), want),
            other => panic!("expected ADDED {want}, got {other:?}"),
        }
    }

    // Streaming lists: initial events, then the initial-events-end bookmark.
    let (store, writer) = reflector::store::<Lease>();
    let cfg = watcher::Config::default().streaming_lists();
    let task = tokio::spawn(
        reflector(writer, watcher(leases.clone(), cfg))
            .default_backoff()
            .for_each(|_| async {}),
    );
    tokio::time::timeout(Duration::from_secs(5), store.wait_until_ready())
        .await
        .expect("streaming list finished")
        .unwrap();
    assert_eq!(store.len(), 5);
    leases.delete("l0", &DeleteParams::default()).await.unwrap();
    eventually("streaming-list reflector sees the delete", || {
        store.len() == 4
    })
    .await;
    task.abort();
}

#[tokio::test]
async fn watch_events_arrive_one_by_one() {
    let fake = FakeApi::start("127.0.0.1:0");
    let c = client(&fake);
    let hs_ar = ar("HostSubnet", "hostsubnets");
    let hs: Api<DynamicObject> = Api::all_with(c, &hs_ar);
    let mut s = hs
        .watch(
            &WatchParams::default(),
            &fake.resource_version().to_string(),
        )
        .await
        .unwrap()
        .boxed();
    for i in 0..5 {
        fake.put(
            json!({"apiVersion": "network.openshift.io/v1", "kind": "HostSubnet",
                        "metadata": {"name": format!("n{i}")}, "host": format!("n{i}")}),
        )
        .unwrap();
        // The next event must come now, while the stream stays open, not when it ends.
        match tokio::time::timeout(Duration::from_secs(2), s.try_next()).await {
            Ok(Ok(Some(WatchEvent::Added(o)))) => assert_eq!(o.name_any(), format!("n{i}")),
            other => panic!("event {i}: {other:?}"),
        }
    }
    fake.delete("network.openshift.io", "hostsubnets", None, "n0");
    match tokio::time::timeout(Duration::from_secs(2), s.try_next()).await {
        Ok(Ok(Some(WatchEvent::Deleted(o)))) => {
            assert_eq!(o.name_any(), "n0");
            assert_eq!(
                o.resource_version().unwrap(),
                fake.resource_version().to_string(),
                "a deleted object carries the delete's version"
            );
        }
        other => panic!("delete: {other:?}"),
    }
}

/// Sends a raw HTTP/1.1 request and returns the stream, for looking at the wire.
fn raw_request(addr: std::net::SocketAddr, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: fake\r\nAccept: application/json\r\n\r\n"
    )
    .unwrap();
    s
}

/// Reads until `needle` has been seen (bounded by the read timeout).
fn read_until(s: &mut TcpStream, buf: &mut String, needle: &str) {
    let mut chunk = [0u8; 4096];
    while !buf.contains(needle) {
        let n = s
            .read(&mut chunk)
            .unwrap_or_else(|e| panic!("waiting for {needle:?} after {buf:?}: {e}"));
        assert!(n > 0, "connection closed before {needle:?}: {buf:?}");
        buf.push_str(&String::from_utf8_lossy(&chunk[..n]));
    }
}

#[test]
fn watch_stream_is_chunked_json_with_bookmarks_selector_moves_and_timeout() {
    let fake = fake_with(10_000);
    let rv = fake.resource_version();
    let path = format!(
        "/api/v1/namespaces/a/pods?watch=1&resourceVersion={rv}&labelSelector=app%3Dweb\
         &allowWatchBookmarks=true&timeoutSeconds=2"
    );
    let started = Instant::now();
    let mut s = raw_request(fake.addr(), &path);
    let mut buf = String::new();
    read_until(&mut s, &mut buf, "\r\n\r\n");
    let head = buf.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{buf}");
    assert!(head.contains("transfer-encoding: chunked"), "{buf}");
    assert!(head.contains("content-type: application/json"), "{buf}");

    let p = |app: &str| serde_json::to_value(pod("a", "x", "n1", app)).unwrap();
    fake.put(p("web")).unwrap();
    read_until(&mut s, &mut buf, r#""type":"ADDED""#);
    fake.put(p("db")).unwrap();
    read_until(&mut s, &mut buf, r#""type":"DELETED""#);
    fake.put(p("web")).unwrap();
    let added = buf.matches(r#""type":"ADDED""#).count();
    while buf.matches(r#""type":"ADDED""#).count() == added {
        let mut more = String::new();
        read_until(&mut s, &mut more, "\n");
        buf.push_str(&more);
    }
    fake.put(serde_json::to_value(pod("other", "y", "n1", "web")).unwrap())
        .unwrap();
    read_until(&mut s, &mut buf, r#""type":"BOOKMARK""#);
    // The stream ends after timeoutSeconds with the terminating zero-length chunk.
    read_until(&mut s, &mut buf, "\r\n0\r\n\r\n");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(3),
        "stream lasted {took:?}"
    );
    assert!(
        !buf.contains(r#""name":"y""#),
        "other namespaces are not watched: {buf}"
    );
    assert!(!buf.contains(r#""type":"MODIFIED""#), "{buf}");
}

#[test]
fn request_counters_and_status_errors_on_the_wire() {
    let fake = FakeApi::start("127.0.0.1:0");
    let get = |path: &str| {
        let mut s = TcpStream::connect(fake.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: fake\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    let v = get("/version");
    assert!(v.starts_with("HTTP/1.1 200"), "{v}");
    let missing = get("/apis/nope.io/v1/things");
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    let body: Value = serde_json::from_str(missing.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["apiVersion"], "v1");
    assert_eq!(body["status"], "Failure");
    assert_eq!(body["reason"], "NotFound");
    assert_eq!(body["code"], 404);
    let before = fake.requests();
    get("/api/v1/namespaces/a/pods");
    get("/api/v1/namespaces/a/pods/p");
    get("/api/v1/pods?limit=1");
    let since = fake.requests().since(&before);
    assert_eq!(since.count("list", "/api/v1/"), 2, "{since}");
    assert_eq!(
        since.count("get", "/api/v1/namespaces/a/pods/"),
        1,
        "{since}"
    );
    assert_eq!(since.count("*", "/"), 3, "{since}");
    assert_eq!(since.total(), 3);
    let all = fake.requests();
    assert_eq!(all.count("get", "/version"), 1);
    assert_eq!(all.count("unknown", "/apis/nope.io"), 1);
    fake.reset_requests();
    assert_eq!(fake.requests().total(), 0);
}

#[test]
fn serves_inside_a_network_namespace() {
    let ns = sdn_tests::harness::Netns::new("fapi");
    let fake = FakeApi::start_in_netns(ns.name(), "127.0.0.1:0");
    let addr = fake.addr();
    let reply = ns.run_inside(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        write!(
            s,
            "GET /version HTTP/1.1\r\nHost: fake\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    });
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err(),
        "the server listens in {}, not in the host namespace",
        ns.name()
    );
    assert_eq!(fake.requests().count("get", "/version"), 1);
}

/// Defaulting as kube-apiserver does it for the built-in kinds the agent reads, through the
/// API (create, replace) and the test helper alike: a Namespace's `kubernetes.io/metadata.name`
/// label, a NetworkPolicy's `policyTypes` (Egress only for a non-empty egress list) and its
/// ports' protocol.
#[tokio::test]
async fn built_in_kinds_are_defaulted_as_the_api_server_does() {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let fake = FakeApi::start("127.0.0.1:0");
    let c = client(&fake);
    let namespaces: Api<Namespace> = Api::all(c.clone());
    let created = namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "tenant-a"}})).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        created
            .labels()
            .get("kubernetes.io/metadata.name")
            .map(String::as_str),
        Some("tenant-a")
    );
    // A replace that drops or changes the label gets it back.
    let mut changed = created.clone();
    changed
        .labels_mut()
        .insert("kubernetes.io/metadata.name".into(), "other".into());
    let replaced = namespaces
        .replace("tenant-a", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_eq!(
        replaced
            .labels()
            .get("kubernetes.io/metadata.name")
            .map(String::as_str),
        Some("tenant-a")
    );

    let policies: Api<NetworkPolicy> = Api::namespaced(c.clone(), "tenant-a");
    let np = |name: &str, spec: Value| -> NetworkPolicy {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    };
    for (name, spec, want) in [
        ("none", json!({"podSelector": {}}), json!(["Ingress"])),
        (
            "empty-egress",
            json!({"podSelector": {}, "egress": []}),
            json!(["Ingress"]),
        ),
        (
            "egress",
            json!({"podSelector": {}, "egress": [{}]}),
            json!(["Ingress", "Egress"]),
        ),
        (
            "explicit",
            json!({"podSelector": {}, "policyTypes": ["Egress"]}),
            json!(["Egress"]),
        ),
    ] {
        let p = policies
            .create(&PostParams::default(), &np(name, spec))
            .await
            .unwrap();
        let got = serde_json::to_value(&p).unwrap();
        assert_eq!(got["spec"]["policyTypes"], want, "{name}: {got:#}");
    }
    let p = policies
        .create(
            &PostParams::default(),
            &np(
                "port",
                json!({"podSelector": {}, "ingress": [{"ports": [{"port": 80}]}]}),
            ),
        )
        .await
        .unwrap();
    let got = serde_json::to_value(&p).unwrap();
    assert_eq!(got["spec"]["ingress"][0]["ports"][0]["protocol"], "TCP");
    // The test helper defaults too (tests put policies with it).
    fake.put(
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "put", "namespace": "tenant-a"},
        "spec": {"podSelector": {}, "egress": []}}),
    )
    .unwrap();
    let got = fake
        .get(
            "networking.k8s.io",
            "networkpolicies",
            Some("tenant-a"),
            "put",
        )
        .unwrap();
    assert_eq!(got["spec"]["policyTypes"], json!(["Ingress"]));
}
