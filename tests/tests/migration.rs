//! A cluster moving from openshift-sdn, against the fake API server with real agents and the
//! real controller: the control plane. openshift-sdn's controller wrote the ClusterNetwork,
//! HostSubnets and NetNamespaces (in its own shape: its `pluginName`, its legacy fields, its
//! `node-uid` annotations, VNIDs of its choosing, an egress IP it assigned) and holds its
//! Lease; our agents run with those objects and no controller of ours; ours, started while
//! openshift-sdn's runs, waits and writes nothing; once openshift-sdn's stops, ours leads and
//! changes no allocation; the change-network annotation and egress-IP assignment then work
//! through ours.

use std::collections::BTreeMap;
use std::time::Duration;

use sdn_tests::cluster::{node_name, underlay_ip, Cluster, KubeControlPlane};
use sdn_tests::harness::wait_until;
use sdn_tests::matrix::{self, Member, NodeSide};
use sdn_tests::node::{CniPod, NodeOptions};
use serde_json::{json, Value};

const GROUP: &str = "network.openshift.io";
const SETTLE: Duration = Duration::from_secs(20);
const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);
const CHANGE_NETWORK: &str = "pod.network.openshift.io/multitenant.change-network";

/// VNIDs openshift-sdn's controller gave (its allocator starts at random; not ours).
const VNIDS: [(&str, u32); 6] = [
    ("default", 0),
    ("kube-system", 0),
    // openshift-sdn's own namespace, global as openshift-sdn's controller makes its own.
    ("openshift-sdn", 0),
    ("tenant-a", 4_812_211),
    ("tenant-b", 9_007_104),
    ("tenant-c", 1_337_005),
];

fn pod_object(ns: &str, name: &str, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}})
}

fn now() -> String {
    // RFC 3339 with microseconds, as a Lease's renewTime.
    let out = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S.%6NZ"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// openshift-sdn's controller holding its Lease (renewed now, its 137 s duration).
fn openshift_sdn_lease(holder: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "openshift-network-controller", "namespace": "openshift-sdn"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 137,
                 "acquireTime": now(), "renewTime": now(), "leaseTransitions": 0}})
}

/// openshift-sdn's controller Lease as the API server holds it now.
fn openshift_sdn_lease_now(plane: &KubeControlPlane) -> Value {
    plane
        .fake
        .get(
            "coordination.k8s.io",
            "leases",
            Some("openshift-sdn"),
            "openshift-network-controller",
        )
        .expect("openshift-sdn's controller Lease")
}

/// Every object openshift-sdn's controller wrote, as it writes them
/// (`pkg/network/master`: `subnets.go`, `vnids.go`, `egressip.go`; the ClusterNetwork of
/// `master.go`), plus its namespace and Lease.
fn openshift_sdn_control_plane(plane: &KubeControlPlane) {
    let fake = &plane.fake;
    for ns in ["tenant-a", "tenant-b", "tenant-c", "openshift-sdn"] {
        fake.put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
            .unwrap();
    }
    fake.put(
        json!({"apiVersion": "network.openshift.io/v1", "kind": "ClusterNetwork",
        "metadata": {"name": "default"},
        "network": "10.128.0.0/14", "hostsubnetlength": 9,
        "clusterNetworks": [{"CIDR": "10.128.0.0/14", "hostSubnetLength": 9}],
        "serviceNetwork": "172.30.0.0/16",
        "pluginName": "redhat/openshift-ovs-multitenant",
        "vxlanPort": 4789, "mtu": 1450}),
    )
    .unwrap();
    // Subnets openshift-sdn handed out (not the first free ones ours would pick); node-2 may
    // host egress IPs of 192.168.77.0/24 and holds the one openshift-sdn assigned.
    for (i, subnet) in [(1, "10.128.14.0/23"), (2, "10.128.6.0/23")] {
        let mut hs = json!({"apiVersion": "network.openshift.io/v1", "kind": "HostSubnet",
            "metadata": {"name": node_name(i),
                "annotations": {"pod.network.openshift.io/node-uid": format!("uid-node-{i}")}},
            "host": node_name(i), "hostIP": underlay_ip(i).to_string(), "subnet": subnet});
        if i == 2 {
            hs["egressCIDRs"] = json!(["192.168.77.0/24"]);
            hs["egressIPs"] = json!(["192.168.77.100"]);
        }
        fake.put(hs).unwrap();
    }
    for (ns, netid) in VNIDS {
        let mut n = json!({"apiVersion": "network.openshift.io/v1", "kind": "NetNamespace",
            "metadata": {"name": ns}, "netname": ns, "netid": netid});
        if ns == "tenant-a" {
            n["egressIPs"] = json!(["192.168.77.100"]);
        }
        fake.put(n).unwrap();
    }
    fake.put(openshift_sdn_lease("master-0")).unwrap();
}

/// HostSubnets and NetNamespaces as (kind/name -> (resourceVersion, the object without it)).
fn allocations(plane: &KubeControlPlane) -> BTreeMap<String, (String, Value)> {
    let mut out = BTreeMap::new();
    for plural in ["hostsubnets", "netnamespaces", "clusternetworks"] {
        for mut o in plane.fake.list(plural) {
            let name = o["metadata"]["name"].as_str().unwrap().to_string();
            let rv = o["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if let Some(m) = o["metadata"].as_object_mut() {
                m.remove("resourceVersion");
                m.remove("managedFields");
            }
            out.insert(format!("{plural}/{name}"), (rv, o));
        }
    }
    out
}

fn netid(plane: &KubeControlPlane, ns: &str) -> u32 {
    plane.fake.get(GROUP, "netnamespaces", None, ns).unwrap()["netid"]
        .as_u64()
        .unwrap() as u32
}

#[test]
fn the_control_plane_moves_from_openshift_sdn_s_controller_to_ours_without_changing_an_allocation()
{
    let (c, mut plane) = Cluster::start_kubernetes_without_controller(
        2,
        &NodeOptions::default(),
        openshift_sdn_control_plane,
    );
    let fake = &plane.fake;
    // The agents came up on openshift-sdn's objects: its subnets.
    for (i, subnet) in [(1, "10.128.14.0/23"), (2, "10.128.6.0/23")] {
        assert!(
            c.node(i).log().contains(&format!("subnet={subnet}")),
            "node-{i} did not start on openshift-sdn's subnet {subnet}:\n{}",
            c.node(i).log()
        );
    }
    let layout = [
        ("a1", "tenant-a", 1),
        ("a2", "tenant-a", 2),
        ("b1", "tenant-b", 1),
        ("c2", "tenant-c", 2),
        ("g2", "default", 2),
    ];
    for (name, ns, i) in layout {
        fake.put(pod_object(ns, name, &node_name(i))).unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    let pods: Vec<CniPod<'_>> = layout
        .iter()
        .map(|(name, ns, i)| c.node(*i).pod(ns, name))
        .collect();
    let members = |plane: &KubeControlPlane| -> Vec<Member> {
        matrix::members_of(&layout, &pods, |ns| netid(plane, ns))
    };
    let node_side = NodeSide {
        netns: c.node(1).ovs.netns().to_string(),
        ifname: "tun0".into(),
    };
    let _servers = matrix::serve(&members(&plane));
    matrix::assert_isolation(
        "openshift-sdn's objects, no controller of ours",
        &members(&plane),
        &node_side,
        PROBE_TIMEOUT,
    );

    // openshift-sdn's controller applies a join as it does (tenant-b takes tenant-a's netid):
    // our agents follow.
    let mut b = fake.get(GROUP, "netnamespaces", None, "tenant-b").unwrap();
    b["netid"] = json!(netid(&plane, "tenant-a"));
    fake.put(b).unwrap();
    let a1 = &pods[0];
    assert!(
        wait_until(SETTLE, || pods[2].ping(&a1.ip, 1)),
        "b1 -> a1 after openshift-sdn's controller joined tenant-b to tenant-a"
    );

    // Our controller starts while openshift-sdn's still holds its Lease: it writes nothing.
    let before = allocations(&plane);
    plane.start_controller();
    let fake = &plane.fake;
    assert!(
        wait_until(SETTLE, || plane
            .controller_log()
            .contains("openshift-sdn's controller is running")),
        "{}",
        plane.controller_log()
    );
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        allocations(&plane),
        before,
        "our controller wrote while openshift-sdn's ran:\n{}",
        plane.controller_log()
    );
    assert!(!plane.controller_log().contains("leading"));

    // openshift-sdn's controller stops (its Deployment deleted): its Lease is left to expire.
    let mut lease = openshift_sdn_lease_now(&plane);
    lease["spec"]["renewTime"] = json!("2026-01-01T00:00:00.000000Z");
    plane.fake.put(lease).unwrap();
    assert!(
        wait_until(SETTLE, || plane.controller_log().contains("leading")),
        "{}",
        plane.controller_log()
    );
    assert!(plane
        .controller_log()
        .contains("holding openshift-sdn's controller Lease"));
    // Two plans later (a resync is forced by leading), nothing openshift-sdn allocated changed.
    std::thread::sleep(Duration::from_secs(5));
    let after = allocations(&plane);
    for (k, (rv, obj)) in &before {
        if k == "netnamespaces/tenant-b" {
            continue; // joined above, by openshift-sdn's controller
        }
        let (rv2, obj2) = after.get(k).unwrap_or_else(|| panic!("{k} is gone"));
        assert_eq!(
            (rv, obj),
            (rv2, obj2),
            "{k} changed when our controller took over:\n{}",
            plane.controller_log()
        );
    }
    // openshift-sdn's controller cannot lead again: its Lease is ours now.
    let held = openshift_sdn_lease_now(&plane);
    assert!(
        held["spec"]["holderIdentity"]
            .as_str()
            .unwrap()
            .starts_with("controller-"),
        "{held}"
    );

    // The change-network annotation, now through our controller: tenant-c joins tenant-a.
    let mut cns = fake.get(GROUP, "netnamespaces", None, "tenant-c").unwrap();
    cns["metadata"]["annotations"] = json!({CHANGE_NETWORK: "join:tenant-a"});
    fake.put(cns).unwrap();
    assert!(
        wait_until(SETTLE, || netid(&plane, "tenant-c")
            == netid(&plane, "tenant-a")),
        "{}",
        plane.controller_log()
    );
    // And isolate: tenant-b gets a VNID of its own again (one nobody uses).
    let mut bns = fake.get(GROUP, "netnamespaces", None, "tenant-b").unwrap();
    bns["metadata"]["annotations"] = json!({CHANGE_NETWORK: "isolate"});
    fake.put(bns).unwrap();
    assert!(
        wait_until(SETTLE, || {
            let v = netid(&plane, "tenant-b");
            VNIDS.iter().all(|(_, n)| *n != v)
        }),
        "{}",
        plane.controller_log()
    );
    std::thread::sleep(Duration::from_secs(2));
    matrix::assert_isolation(
        "our controller after the switch: tenant-c joined tenant-a, tenant-b isolated",
        &members(&plane),
        &node_side,
        PROBE_TIMEOUT,
    );

    // Egress IPs: the one openshift-sdn assigned stays on node-2; a new one of another tenant
    // (tenant-b, isolated again) is assigned by ours.
    let mut bns = fake.get(GROUP, "netnamespaces", None, "tenant-b").unwrap();
    bns["egressIPs"] = json!(["192.168.77.101"]);
    fake.put(bns).unwrap();
    assert!(
        wait_until(SETTLE, || {
            let hs = fake.get(GROUP, "hostsubnets", None, &node_name(2)).unwrap();
            hs["egressIPs"] == json!(["192.168.77.100", "192.168.77.101"])
        }),
        "{}\n{}",
        fake.get(GROUP, "hostsubnets", None, &node_name(2)).unwrap(),
        plane.controller_log()
    );
}
