//! Unit tests of the parser: `oc get` lists, multi-document YAML, JSON lists, errors, empty files, round trips.

use super::*;

/// The shape `oc get hostsubnet -o yaml` prints (a List with server-filled metadata).
const OC_HOSTSUBNETS: &str = r#"apiVersion: v1
items:
- apiVersion: network.openshift.io/v1
  host: master-0.example.com
  hostIP: 192.168.126.11
  kind: HostSubnet
  metadata:
    annotations:
      pod.network.openshift.io/node-uid: 3e3ba9ce-6a3f-4a39-8f47-0cc44b4b6c71
    creationTimestamp: "2021-03-04T10:11:12Z"
    name: master-0.example.com
    resourceVersion: "4521"
    selfLink: /apis/network.openshift.io/v1/hostsubnets/master-0.example.com
    uid: 5c4ae1b0-0d5a-4fb4-8c8e-3a4fe0b3f2a1
  subnet: 10.128.0.0/23
- apiVersion: network.openshift.io/v1
  egressCIDRs:
  - 192.168.126.0/24
  egressIPs:
  - 192.168.126.100
  host: worker-1.example.com
  hostIP: 192.168.126.51
  kind: HostSubnet
  metadata:
    creationTimestamp: "2021-03-04T10:15:01Z"
    labels: null
    name: worker-1.example.com
    resourceVersion: "5123"
    uid: 0bb0d4a5-7d1b-4a77-8d55-27a0c34c2e3e
  subnet: 10.130.0.0/23
kind: List
metadata:
  resourceVersion: ""
  selfLink: ""
"#;

#[test]
fn parses_oc_get_hostsubnet_list() {
    let objs = parse_objects(OC_HOSTSUBNETS, Format::Yaml).unwrap();
    assert_eq!(objs.len(), 2);
    let ClusterObject::HostSubnet(w) = &objs[1] else {
        panic!("{objs:?}")
    };
    assert_eq!(w.host, "worker-1.example.com");
    assert_eq!(w.host_ip, "192.168.126.51");
    assert_eq!(w.subnet, "10.130.0.0/23");
    assert_eq!(w.egress_ips, vec!["192.168.126.100"]);
    assert_eq!(w.egress_cidrs, vec!["192.168.126.0/24"]);
    assert_eq!(w.metadata.resource_version.as_deref(), Some("5123"));
    let ClusterObject::HostSubnet(m) = &objs[0] else {
        panic!()
    };
    assert_eq!(
        m.metadata.annotations.as_ref().unwrap()["pod.network.openshift.io/node-uid"],
        "3e3ba9ce-6a3f-4a39-8f47-0cc44b4b6c71"
    );
}

#[test]
fn parses_clusternetwork_and_multi_document_yaml() {
    let text = r#"
apiVersion: network.openshift.io/v1
kind: ClusterNetwork
metadata:
  name: default
clusterNetworks:
- CIDR: 10.128.0.0/14
  hostSubnetLength: 9
hostsubnetlength: 9
network: 10.128.0.0/14
pluginName: redhat/openshift-ovs-multitenant
serviceNetwork: 172.30.0.0/16
vxlanPort: 4789
mtu: 1450
---
---
apiVersion: network.openshift.io/v1
kind: NetNamespace
metadata:
  name: openshift-ingress
netid: 7321890
netname: openshift-ingress
"#;
    let objs = parse_objects(text, Format::Yaml).unwrap();
    assert_eq!(objs.len(), 2);
    let ClusterObject::ClusterNetwork(cn) = &objs[0] else {
        panic!()
    };
    assert_eq!(
        cn.cluster_networks,
        vec![ClusterNetworkEntry {
            cidr: "10.128.0.0/14".into(),
            host_subnet_length: 9
        }]
    );
    assert_eq!(cn.service_network, "172.30.0.0/16");
    assert_eq!(cn.vxlan_port, Some(4789));
    assert_eq!(cn.mtu, Some(1450));
    let ClusterObject::NetNamespace(nn) = &objs[1] else {
        panic!()
    };
    assert_eq!(
        (nn.net_name.as_str(), nn.net_id),
        ("openshift-ingress", 7321890)
    );
}

#[test]
fn parses_json_list() {
    let text = r#"{"apiVersion":"v1","kind":"List","items":[
          {"apiVersion":"network.openshift.io/v1","kind":"NetNamespace",
           "metadata":{"name":"default"},"netname":"default","netid":0}]}"#;
    let objs = parse_objects(text, Format::Json).unwrap();
    assert_eq!(objs, vec![NetNamespace::new("default", 0).into()]);
}

#[test]
fn errors_name_document_item_and_field() {
    let text = "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nmetadata: {name: a}\n\
                netname: a\nnetid: 11\n---\napiVersion: network.openshift.io/v1\nkind: HostSubnet\n\
                metadata: {name: n1}\nhost: n1\nhostIp: 10.0.0.1\nsubnet: 10.128.0.0/23\n";
    let e = parse_objects(text, Format::Yaml).unwrap_err().to_string();
    assert!(
        e.starts_with("document 2: HostSubnet \"n1\": field "),
        "{e}"
    );
    assert!(e.contains("unknown field `hostIp`"), "{e}");

    let text = r#"{"kind":"List","apiVersion":"v1","items":[{"apiVersion":"network.openshift.io/v1",
            "kind":"ClusterNetwork","metadata":{"name":"default"},"serviceNetwork":"172.30.0.0/16",
            "clusterNetworks":[{"CIDR":"10.128.0.0/14","hostSubnetLength":"9"}]}]}"#;
    let e = parse_objects(text, Format::Json).unwrap_err().to_string();
    assert!(
        e.contains("document 1 items[0]: ClusterNetwork \"default\": field clusterNetworks[0].hostSubnetLength: invalid type: string \"9\""),
        "{e}"
    );

    let e = parse_objects("kind: Pod\napiVersion: v1\n", Format::Yaml)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unsupported kind \"Pod\""), "{e}");
    let e = parse_objects("a: [1, 2\n", Format::Yaml)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("document 1: "), "{e}");
    assert!(e.contains("line"), "{e}");
    let e = parse_objects("apiVersion: apps/v1\nkind: HostSubnet\n", Format::Yaml)
        .unwrap_err()
        .to_string();
    assert!(e.contains("apiVersion \"apps/v1\""), "{e}");
}

#[test]
fn empty_and_comment_only_files_hold_nothing() {
    assert_eq!(parse_objects("", Format::Yaml).unwrap(), vec![]);
    assert_eq!(
        parse_objects("# nothing yet\n---\n", Format::Yaml).unwrap(),
        vec![]
    );
    assert!(parse_objects("", Format::Json).is_err());
}

#[test]
fn yaml_round_trip() {
    let mut hs = HostSubnet::new("node-1", "192.168.1.10", "10.128.2.0/23");
    hs.metadata.uid = Some("u-1".into());
    let obj = ClusterObject::from(hs);
    let text = to_yaml(&obj).unwrap();
    assert!(text.contains("hostIP: 192.168.1.10"), "{text}");
    assert!(!text.contains("egressIPs"), "{text}");
    assert_eq!(parse_objects(&text, Format::Yaml).unwrap(), vec![obj]);
}

/// A compacted HostSubnet (as the Kubernetes cache keeps them) holds no annotation map for its
/// IPv6 subnet, and answers, compares and serializes as the object it came from; values that
/// are bad or written unusually stay in the annotations as written.
#[test]
fn a_compacted_host_subnet_answers_and_serializes_as_before() {
    let six = |notes: &[(&str, &str)]| {
        let mut hs = HostSubnet::new("node-1", "192.168.1.10", "10.128.0.0/23");
        hs.egress_ips = vec!["192.168.1.100".into()];
        if !notes.is_empty() {
            hs.metadata.annotations = Some(
                notes
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            );
        }
        hs
    };
    let key = annotations::IPV6_SUBNET;
    let other = "pod.network.openshift.io/node-uid";
    for notes in [
        vec![(key, "fd01:0:0:5::/64")],
        vec![(key, "fd01:0:0:5::/64"), (other, "3e3ba9ce")],
    ] {
        let hs = six(&notes);
        let compact = hs.clone().compact();
        assert_eq!(compact.ipv6_subnet().unwrap(), hs.ipv6_subnet().unwrap());
        assert_eq!(
            compact.ipv6_subnet().unwrap().unwrap().to_string(),
            "fd01:0:0:5::/64"
        );
        assert!(compact
            .metadata
            .annotations
            .as_ref()
            .is_none_or(|a| !a.contains_key(key)));
        assert_eq!(
            compact.metadata.annotations.is_none(),
            notes.len() == 1,
            "{notes:?}"
        );
        assert_eq!(
            serde_json::to_value(&compact).unwrap(),
            serde_json::to_value(&hs).unwrap()
        );
        assert_eq!(
            to_yaml(&compact.clone().into()).unwrap(),
            to_yaml(&hs.clone().into()).unwrap()
        );
        assert_eq!(compact, hs.clone().compact());
        compact.validate().unwrap();
    }
    // Kept as written: a bad value, host bits, a non-canonical spelling, no annotation.
    for notes in [
        vec![(key, "fd01::zz/64")],
        vec![(key, "fd01::5/64")],
        vec![(key, "fd01:0:0:5:0::/64")],
        vec![],
    ] {
        let hs = six(&notes);
        assert_eq!(hs.clone().compact(), hs, "{notes:?}");
    }
    // The wire shape: the fields in their order, empty egress lists left out.
    let hs = six(&[(key, "fd01:0:0:5::/64")]).compact();
    assert_eq!(
        serde_json::to_string(&hs).unwrap(),
        r#"{"apiVersion":"network.openshift.io/v1","kind":"HostSubnet","metadata":{"annotations":{"sdn.dev/ipv6-subnet":"fd01:0:0:5::/64"},"name":"node-1"},"host":"node-1","hostIP":"192.168.1.10","subnet":"10.128.0.0/23","egressIPs":["192.168.1.100"]}"#
    );
}
