//! The reader against the upstream CRD's schema (`config/crd/experimental/
//! policy.networking.k8s.io_clusternetworkpolicies.yaml` of kubernetes-sigs/network-policy-api):
//! what it accepts and refuses, and the field each refusal names; what a refused policy still
//! does; the API's fail-closed reading of peers this agent does not apply.

use super::*;
use serde_json::json;

fn cnp(spec: Value) -> Value {
    let mut v = json!({"apiVersion": "policy.networking.k8s.io/v1alpha2",
                       "kind": "ClusterNetworkPolicy", "metadata": {"name": "p"}});
    v["spec"] = spec;
    v
}

fn minimal() -> Value {
    json!({"tier": "Admin", "priority": 0, "subject": {"namespaces": {}}})
}

fn with(path: &str, v: Value) -> Value {
    let mut spec = minimal();
    let mut at = &mut spec;
    let parts: Vec<&str> = path.split('.').collect();
    for p in &parts[..parts.len() - 1] {
        at = at
            .as_object_mut()
            .unwrap()
            .entry(p.to_string())
            .or_insert(json!({}));
    }
    at[parts[parts.len() - 1]] = v;
    cnp(spec)
}

fn refused(v: &Value) -> (String, String) {
    let e = read_cluster_policy(v).expect_err(&format!("refused: {v}"));
    (e.field, e.message)
}

fn ingress(rule: Value) -> Value {
    with("ingress", Value::Array(vec![rule]))
}

fn egress(rule: Value) -> Value {
    with("egress", Value::Array(vec![rule]))
}

#[test]
fn the_minimal_policy_and_its_bounds() {
    let p = read_cluster_policy(&cnp(minimal())).unwrap();
    assert_eq!((p.tier, p.priority), (Tier::Admin, 0));
    assert_eq!(p.subject, Pods::Namespaces(LabelSelector::everything()));
    assert!(p.ingress.is_empty() && p.egress.is_empty());
    assert_eq!(
        read_cluster_policy(&with("priority", json!(1000)))
            .unwrap()
            .priority,
        1000
    );
    for bad in [json!(-1), json!(1001), json!(1.5), json!("5")] {
        assert_eq!(refused(&with("priority", bad)).0, "spec.priority");
    }
    for bad in [json!("admin"), json!("Default")] {
        assert_eq!(refused(&with("tier", bad)).0, "spec.tier");
    }
    let mut no_tier = minimal();
    no_tier.as_object_mut().unwrap().remove("tier");
    assert_eq!(refused(&cnp(no_tier)).0, "spec.tier");
    let mut no_subject = minimal();
    no_subject.as_object_mut().unwrap().remove("subject");
    assert_eq!(refused(&cnp(no_subject)).0, "spec.subject");
    assert_eq!(
        refused(&json!({"metadata": {}, "spec": minimal()})).0,
        "metadata.name"
    );
    assert_eq!(
        refused(&json!({"metadata": {"name": "Bad_Name"}, "spec": minimal()})).0,
        "metadata.name"
    );
    assert_eq!(
        refused(&json!({"apiVersion": "policy.networking.k8s.io/v1alpha1",
                        "metadata": {"name": "p"}, "spec": minimal()}))
        .0,
        "apiVersion"
    );
}

#[test]
fn a_subject_is_exactly_one_of_namespaces_and_pods() {
    assert_eq!(refused(&with("subject", json!({}))).0, "spec.subject");
    assert_eq!(
        refused(&with(
            "subject",
            json!({"namespaces": {}, "pods": {"podSelector": {}}})
        ))
        .0,
        "spec.subject"
    );
    assert_eq!(
        refused(&with("subject", json!({"pods": {}}))).0,
        "spec.subject.pods.podSelector"
    );
    let p = read_cluster_policy(&with(
        "subject",
        json!({"pods": {"podSelector": {"matchLabels": {"app": "db"}}}}),
    ))
    .unwrap();
    assert_eq!(
        p.subject,
        Pods::Pods {
            namespaces: LabelSelector::everything(),
            pods: LabelSelector::labels([("app", "db")]),
        }
    );
}

#[test]
fn rules_are_read_in_order_with_their_peers_and_protocols() {
    let p = read_cluster_policy(&with(
        "ingress",
        json!([
            {"name": "monitoring", "action": "Accept",
             "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
             "protocols": [{"tcp": {"destinationPort": {"number": 9100}}},
                           {"udp": {"destinationPort": {"range": {"start": 5000, "end": 5010}}}},
                           {"destinationNamedPort": "metrics"}]},
            {"action": "Pass", "from": [{"pods": {"namespaceSelector": {}, "podSelector": {}}}]},
        ]),
    ))
    .unwrap();
    assert_eq!(p.ingress.len(), 2);
    assert_eq!(p.ingress[0].name, "monitoring");
    assert_eq!(p.ingress[0].action, Action::Accept);
    assert_eq!(
        p.ingress[0].ports,
        vec![
            Port::Range {
                protocol: Protocol::Tcp,
                first: 9100,
                last: 9100
            },
            Port::Range {
                protocol: Protocol::Udp,
                first: 5000,
                last: 5010
            },
            Port::Named("metrics".into()),
        ]
    );
    assert_eq!(p.ingress[1].action, Action::Pass);
    let e = read_cluster_policy(&with(
        "egress",
        json!([{"action": "Deny", "to": [
            {"networks": ["10.0.0.1/8", "::/0", "0.0.0.0/0"]},
            {"nodes": {"matchLabels": {"kubernetes.io/os": "linux"}}}]}]),
    ))
    .unwrap();
    assert_eq!(
        e.egress[0].peers[0],
        Peer::Networks(vec![
            "10.0.0.0/8".parse().unwrap(),
            "::/0".parse().unwrap(),
            "0.0.0.0/0".parse().unwrap()
        ]),
        "host bits are allowed and cleared"
    );
    assert_eq!(
        e.egress[0].peers[1],
        Peer::Nodes(LabelSelector::labels([("kubernetes.io/os", "linux")]))
    );
    // Pass is valid in the Baseline tier (the API allows it on purpose).
    let mut b = with(
        "ingress",
        json!([{"action": "Pass", "from": [{"namespaces": {}}]}]),
    );
    b["spec"]["tier"] = json!("Baseline");
    assert!(read_cluster_policy(&b).is_ok());
}

#[test]
fn rule_bounds_are_the_crd_s() {
    let r = |i| json!({"action": "Deny", "from": [{"namespaces": {}}], "name": format!("r{i}")});
    assert!(
        read_cluster_policy(&with("ingress", json!((0..25).map(r).collect::<Vec<_>>()))).is_ok()
    );
    assert_eq!(
        refused(&with("ingress", json!((0..26).map(r).collect::<Vec<_>>()))).0,
        "spec.ingress"
    );
    assert!(read_cluster_policy(&with("ingress", json!([]))).is_ok());
    assert_eq!(
        refused(&ingress(json!({"from": [{"namespaces": {}}]}))).0,
        "spec.ingress[0].action"
    );
    let (field, why) = refused(&ingress(
        json!({"action": "Allow", "from": [{"namespaces": {}}]}),
    ));
    assert_eq!(field, "spec.ingress[0].action");
    assert!(
        why.contains("says Accept"),
        "the v1alpha1 word is named: {why}"
    );
    assert_eq!(
        refused(&ingress(json!({"action": "Deny", "from": []}))).0,
        "spec.ingress[0].from"
    );
    assert_eq!(
        refused(&ingress(json!({"action": "Deny"}))).0,
        "spec.ingress[0].from"
    );
    let peers: Vec<Value> = (0..26).map(|_| json!({"namespaces": {}})).collect();
    assert_eq!(
        refused(&ingress(json!({"action": "Deny", "from": peers}))).0,
        "spec.ingress[0].from"
    );
    let long = "x".repeat(101);
    assert_eq!(
        refused(&ingress(
            json!({"name": long, "action": "Deny", "from": [{"namespaces": {}}]})
        ))
        .0,
        "spec.ingress[0].name"
    );
    // An ingress rule says `from`, an egress rule `to`.
    assert_eq!(
        refused(&ingress(
            json!({"action": "Deny", "to": [{"namespaces": {}}]})
        ))
        .0,
        "spec.ingress[0].to"
    );
}

#[test]
fn protocols_as_the_crd_checks_them() {
    let with_ports = |ports: Value| {
        egress(json!({"action": "Deny", "to": [{"namespaces": {}}], "protocols": ports}))
    };
    for (ports, field) in [
        (json!([]), "spec.egress[0].protocols"),
        (json!([{}]), "spec.egress[0].protocols[0]"),
        (
            json!([{"tcp": {"destinationPort": {"number": 1}}, "udp": {"destinationPort": {"number": 1}}}]),
            "spec.egress[0].protocols[0]",
        ),
        (
            json!([{"tcp": {}}]),
            "spec.egress[0].protocols[0].tcp.destinationPort",
        ),
        (
            json!([{"tcp": {"destinationPort": {}}}]),
            "spec.egress[0].protocols[0].tcp.destinationPort",
        ),
        (
            json!([{"tcp": {"destinationPort": {"number": 0}}}]),
            "spec.egress[0].protocols[0].tcp.destinationPort.number",
        ),
        (
            json!([{"sctp": {"destinationPort": {"number": 65536}}}]),
            "spec.egress[0].protocols[0].sctp.destinationPort.number",
        ),
        (
            json!([{"tcp": {"destinationPort": {"range": {"start": 80, "end": 80}}}}]),
            "spec.egress[0].protocols[0].tcp.destinationPort.range",
        ),
        (
            json!([{"tcp": {"destinationPort": {"range": {"start": 80}}}}]),
            "spec.egress[0].protocols[0].tcp.destinationPort.range.end",
        ),
        (
            json!([{"destinationNamedPort": ""}]),
            "spec.egress[0].protocols[0].destinationNamedPort",
        ),
        (json!([{"icmp": {}}]), "spec.egress[0].protocols[0].icmp"),
    ] {
        let (f, m) = refused(&with_ports(ports.clone()));
        assert_eq!(f, field, "{ports}: {m}");
    }
    let p = read_cluster_policy(&with_ports(
        json!([{"tcp": {"destinationPort": {"range": {"start": 1, "end": 65535}}}}]),
    ))
    .unwrap();
    assert_eq!(
        p.egress[0].ports,
        vec![Port::Range {
            protocol: Protocol::Tcp,
            first: 1,
            last: 65535
        }]
    );
    let (_, m) = refused(&with_ports(
        json!([{"tcp": {"destinationPort": {"range": {"start": 90, "end": 80}}}}]),
    ));
    assert!(m.contains("less than"), "{m}");
}

#[test]
fn networks_are_cidrs_as_the_api_server_reads_them() {
    let nets = |n: Value| egress(json!({"action": "Deny", "to": [{"networks": n}]}));
    for bad in [
        json!([]),
        json!(["10.0.0.0"]),
        json!(["::ffff:1.2.3.4/120"]),
        json!(["fe80::1%eth0/64"]),
        json!(["010.0.0.0/8"]),
        json!(["10.0.0.0/8", "10.0.0.0/8"]),
        json!([5]),
    ] {
        let (f, m) = refused(&nets(bad.clone()));
        assert!(
            f.starts_with("spec.egress[0].to[0].networks"),
            "{bad}: {f}: {m}"
        );
    }
    let many: Vec<String> = (0..26).map(|i| format!("10.{i}.0.0/16")).collect();
    assert!(refused(&nets(json!(many))).1.contains("at most 25"));
    // Ingress peers have no networks: an ingress peer with only unknown fields is a newer
    // API's peer (fail closed by action), not a network.
    let p = read_cluster_policy(&ingress(
        json!({"action": "Deny", "from": [{"networks": ["10.0.0.0/8"]}]}),
    ))
    .unwrap();
    assert!(matches!(p.ingress[0].peers[0], Peer::Unsupported(_)));
    assert!(p.ingress[0].fails_closed());
}

#[test]
fn peers_this_agent_does_not_apply_fail_closed_as_the_api_says() {
    // domainNames: checked as the CRD checks them, then unsupported.
    let dn = |names: Value, action: &str| {
        egress(json!({"action": action, "to": [{"domainNames": names}]}))
    };
    let p = read_cluster_policy(&dn(
        json!(["kubernetes.io", "*.kubernetes.io", "x.io."]),
        "Accept",
    ))
    .unwrap();
    assert_eq!(
        p.egress[0].peers,
        vec![Peer::Unsupported("domainNames".into())]
    );
    assert!(
        !p.egress[0].fails_closed(),
        "an Accept rule matches nothing"
    );
    let p = read_cluster_policy(&dn(json!(["kubernetes.io"]), "Deny")).unwrap();
    assert!(p.egress[0].fails_closed(), "a Deny rule denies everything");
    for bad in [
        json!(["*.io"]),
        json!(["localhost"]),
        json!(["a*.b.com"]),
        json!(["*"]),
        json!([]),
    ] {
        assert!(
            read_cluster_policy(&dn(bad.clone(), "Accept")).is_err(),
            "{bad}"
        );
    }
    // A peer with a field this agent does not know.
    let p = read_cluster_policy(&egress(
        json!({"action": "Pass", "to": [{"services": {"name": "x"}}]}),
    ))
    .unwrap();
    assert!(p.egress[0].fails_closed());
    // An empty peer is not a newer API's: it names nothing.
    assert_eq!(
        refused(&egress(json!({"action": "Deny", "to": [{}]}))).0,
        "spec.egress[0].to[0]"
    );
    // A known field beside an unknown one is a typo, not a newer peer.
    assert_eq!(
        refused(&egress(
            json!({"action": "Deny", "to": [{"namespaces": {}, "extra": 1}]})
        ))
        .0,
        "spec.egress[0].to[0].extra"
    );
}

#[test]
fn selectors_the_crd_lets_through_are_checked_here() {
    for (sel, field) in [
        (
            json!({"matchExpressions": [{"key": "a", "operator": "Foo"}]}),
            "spec.subject.namespaces.matchExpressions[0].operator",
        ),
        (
            json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
            "spec.subject.namespaces.matchExpressions[0].values",
        ),
        (
            json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
            "spec.subject.namespaces.matchExpressions[0].values",
        ),
        (
            json!({"matchLabels": {"app": 1}}),
            "spec.subject.namespaces",
        ),
        (
            json!({"matchNames": ["x"]}),
            "spec.subject.namespaces.matchNames",
        ),
    ] {
        let (f, m) = refused(&with("subject", json!({"namespaces": sel.clone()})));
        assert_eq!(f, field, "{sel}: {m}");
    }
}

#[test]
fn unknown_fields_are_refused_by_name() {
    assert_eq!(refused(&with("foo", json!(1))).0, "spec.foo");
    assert_eq!(
        refused(&ingress(
            json!({"action": "Deny", "from": [{"namespaces": {}}], "ports": []})
        ))
        .0,
        "spec.ingress[0].ports"
    );
}

#[test]
fn a_refused_policy_denies_its_subject_everything_at_its_place() {
    let v = with(
        "ingress",
        json!([{"action": "Accept", "from": [{"namespaces": {}}],
                "protocols": [{"tcp": {"destinationPort": {"number": 99999}}}]}]),
    );
    assert!(read_cluster_policy(&v).is_err());
    let p = fail_closed(&v).unwrap();
    assert_eq!((p.tier, p.priority), (Tier::Admin, 0));
    assert_eq!(p.ingress.len(), 1);
    assert!(p.ingress[0].fails_closed());
    assert!(
        p.egress.is_empty(),
        "it has no egress rules: egress untouched"
    );
    // An unreadable subject: every pod; unreadable rules: their direction.
    let p = fail_closed(&json!({"metadata": {"name": "x"},
                               "spec": {"subject": 3, "ingress": 5, "priority": 7}}))
    .unwrap();
    assert_eq!(p.subject, Pods::Namespaces(LabelSelector::everything()));
    assert_eq!((p.tier, p.priority), (Tier::Admin, 7));
    assert!(p.ingress[0].fails_closed() && p.egress.is_empty());
    // Nothing readable: every pod, both directions, the Admin tier's last place.
    let p = fail_closed(&json!({"metadata": {"name": "x"}, "spec": 7})).unwrap();
    assert_eq!((p.tier, p.priority), (Tier::Admin, MAX_PRIORITY));
    assert!(p.ingress[0].fails_closed() && p.egress[0].fails_closed());
    assert_eq!(fail_closed(&json!({"spec": {}})), None);
}
