//! Unit tests of tenant administration: planning, the directory, the lock, the walk's memory, listings.

use super::dir::lock_within;
use super::*;
use crate::{ClusterState, NetNamespace};
use multitenant::Vnid;
use std::fs;
use std::time::Instant;

fn state(nss: &[(&str, u32)]) -> ClusterState {
    let mut s = ClusterState::default();
    for (n, v) in nss {
        s.insert(NetNamespace::new(n, *v).into());
    }
    s
}

#[allow(clippy::needless_pass_by_value)] // call sites read better with values
fn run(s: &ClusterState, cmd: TenantCommand, pods: &PodCounts, last: Option<u32>) -> Plan {
    plan_change(s, &cmd, pods, last, Path::new("/state")).unwrap()
}

#[allow(clippy::needless_pass_by_value)]
fn err(s: &ClusterState, cmd: TenantCommand, pods: &PodCounts) -> String {
    plan_change(s, &cmd, pods, None, Path::new("/state"))
        .unwrap_err()
        .to_string()
}

fn none() -> PodCounts {
    PodCounts::Known(LocalPods::default())
}

fn create(n: &str) -> TenantCommand {
    TenantCommand::Create {
        name: n.into(),
        global: false,
        vnid: None,
    }
}

fn create_with(n: &str, vnid: u32) -> TenantCommand {
    TenantCommand::Create {
        name: n.into(),
        global: false,
        vnid: Vnid::new(vnid),
    }
}

#[test]
fn create_allocates_after_the_last_and_never_one_in_use() {
    let s = state(&[("default", 0)]);
    let p = run(&s, create("a"), &none(), None);
    assert_eq!(p.write.as_ref().map(|n| n.net_id), Some(10));
    assert_eq!(p.allocated, Some(10));
    assert!(p.write.unwrap().metadata.uid.is_some());
    assert_eq!(
        p.change.to_string(),
        "a: created with VNID 10 (a tenant of its own)"
    );

    let s = state(&[("default", 0), ("a", 10), ("b", 11)]);
    assert_eq!(run(&s, create("c"), &none(), None).allocated, Some(12));
    // 12 was handed out before (its namespace is gone): not again at once.
    assert_eq!(run(&s, create("c"), &none(), Some(12)).allocated, Some(13));
    // Pods still carry 12 and 13: skipped.
    let pods = PodCounts::Known(LocalPods {
        per_namespace: BTreeMap::new(),
        vnids: [12, 13].into(),
    });
    assert_eq!(run(&s, create("c"), &pods, None).allocated, Some(14));
    // A pod of an unknown tenant (VNID 2^24-1) does not restart the walk from 10.
    let pods = PodCounts::Known(LocalPods {
        per_namespace: BTreeMap::new(),
        vnids: [Vnid::UNASSIGNED.id()].into(),
    });
    assert_eq!(run(&s, create("c"), &pods, Some(12)).allocated, Some(13));
    let g = TenantCommand::Create {
        name: "g".into(),
        global: true,
        vnid: None,
    };
    let p = run(&s, g, &none(), Some(20));
    assert_eq!((p.allocated, p.change.to), (None, Some(0)));
    assert_eq!(p.change.to_string(), "g: created with VNID 0 (global)");
}

#[test]
fn create_with_a_vnid_takes_it_unless_a_namespace_has_it() {
    // openshift-sdn's VNIDs are random: a standalone node is given them as they are.
    let s = state(&[("default", 0), ("a", 369_601)]);
    let p = run(&s, create_with("b", 12_050_132), &none(), None);
    assert_eq!(p.write.as_ref().map(|n| n.net_id), Some(12_050_132));
    assert_eq!(
        p.allocated, None,
        "nothing allocated: the walk does not move"
    );
    assert_eq!(
        p.change.to_string(),
        "b: created with VNID 12050132 (the VNID asked for)"
    );
    // Taken: refused, naming the holder and how to share it.
    let e = err(&s, create_with("b", 369_601), &none());
    assert!(
        e.contains("VNID 369601")
            && e.contains("namespace a has it")
            && e.contains("sdnctl join b a"),
        "{e}"
    );
    // Not a tenant VNID.
    for bad in [0, 5, Vnid::MAX] {
        let e = err(&s, create_with("b", bad), &none());
        assert!(e.contains("a tenant's VNID is 10 to 16777214"), "{e}");
    }
    // A namespace that exists is refused as before.
    let e = err(&s, create_with("a", 99), &none());
    assert!(e.contains("already exists"), "{e}");
    // Local pods of no namespace with that VNID (adopted at a takeover): they become its.
    let pods = PodCounts::Known(LocalPods {
        per_namespace: BTreeMap::new(),
        vnids: [777].into(),
    });
    let p = run(&s, create_with("c", 777), &pods, None);
    assert_eq!(p.change.to, Some(777));
    assert!(
        p.change.to_string().contains("local pods of no namespace"),
        "{}",
        p.change
    );
}

#[test]
fn operations_change_only_the_named_namespace() {
    let s = state(&[("default", 0), ("a", 10), ("b", 11), ("c", 10)]);
    let join = TenantCommand::Join {
        name: "b".into(),
        other: "a".into(),
    };
    let p = run(&s, join, &none(), None);
    assert_eq!(
        p.write.as_ref().map(|n| (n.name(), n.net_id)),
        Some(("b", 10))
    );
    assert_eq!(p.change.to_string(), "b: VNID 11 -> 10 (joined a)");
    assert_eq!((p.allocated, p.remember), (None, Some(11)), "11 was in use");
    // Afterwards 11 is free but remembered, so isolate does not hand it out at once.
    let after = state(&[("default", 0), ("a", 10), ("b", 10), ("c", 10)]);
    let p = run(
        &after,
        TenantCommand::Isolate { name: "c".into() },
        &none(),
        Some(11),
    );
    assert_eq!((p.allocated, p.remember), (Some(12), Some(12)));
    let p = run(
        &after,
        TenantCommand::MakeGlobal { name: "c".into() },
        &none(),
        Some(11),
    );
    assert_eq!(p.remember, None, "the walk did not move");

    let p = run(
        &s,
        TenantCommand::Isolate { name: "c".into() },
        &none(),
        None,
    );
    assert_eq!(p.change.to_string(), "c: VNID 10 -> 12 (isolated)");
    assert_eq!(p.allocated, Some(12));
    let p = run(
        &s,
        TenantCommand::Isolate { name: "b".into() },
        &none(),
        None,
    );
    assert_eq!(
        p.change.to_string(),
        "b: VNID 11, unchanged (already isolated)"
    );
    assert_eq!((p.write, p.allocated), (None, None));

    let p = run(
        &s,
        TenantCommand::MakeGlobal { name: "a".into() },
        &none(),
        None,
    );
    assert_eq!(p.change.to_string(), "a: VNID 10 -> 0 (made global)");
    let p = run(
        &s,
        TenantCommand::MakeGlobal {
            name: "default".into(),
        },
        &none(),
        None,
    );
    assert_eq!(
        p.change.to_string(),
        "default: VNID 0, unchanged (already global)"
    );
    let join = TenantCommand::Join {
        name: "a".into(),
        other: "default".into(),
    };
    let p = run(&s, join, &none(), None);
    assert_eq!(
        p.change.to_string(),
        "a: VNID 10 -> 0 (joined default, which is global)"
    );
}

#[test]
fn an_existing_object_keeps_its_metadata() {
    let mut s = state(&[("a", 10), ("b", 11)]);
    let mut nn = NetNamespace::new("b", 11);
    nn.metadata.uid = Some("u-1".into());
    nn.egress_ips = vec!["192.168.1.5".into()];
    s.insert(nn.into());
    let join = TenantCommand::Join {
        name: "b".into(),
        other: "a".into(),
    };
    let w = run(&s, join, &none(), None).write.unwrap();
    assert_eq!(w.metadata.uid.as_deref(), Some("u-1"));
    assert_eq!(w.egress_ips, vec!["192.168.1.5".to_string()]);
    assert_eq!(w.net_id, 10);
}

#[test]
fn delete_refuses_with_pods_unless_forced() {
    let s = state(&[("default", 0), ("a", 10)]);
    let pods = PodCounts::Known(LocalPods {
        per_namespace: [("a".to_string(), 2)].into(),
        vnids: [10].into(),
    });
    let del = |force| TenantCommand::Delete {
        name: "a".into(),
        force,
    };
    assert_eq!(
        err(&s, del(false), &pods),
        "refusing to delete namespace \"a\": 2 local pod(s) still use it (they would keep VNID 10); delete the pods first, or pass --force"
    );
    let p = run(&s, del(true), &pods, None);
    assert_eq!(p.delete.as_deref(), Some("a"));
    assert_eq!(
        p.change.to_string(),
        "a: deleted, was VNID 10 (forced: its 2 local pod(s) keep VNID 10 until deleted)"
    );
    let unknown = PodCounts::Unknown("no OVSDB target".into());
    assert!(err(&s, del(false), &unknown).starts_with(
        "refusing to delete namespace \"a\" without knowing whether local pods use it (no OVSDB target)"
    ));
    assert!(run(&s, del(true), &unknown, None).delete.is_some());
    assert_eq!(
        run(&s, del(false), &none(), None).change.to_string(),
        "a: deleted, was VNID 10 (no local pods)"
    );
}

#[test]
fn errors_say_why() {
    let s = state(&[("default", 0), ("a", 10)]);
    let e = err(
        &s,
        TenantCommand::Isolate {
            name: "nope".into(),
        },
        &none(),
    );
    assert_eq!(e, "unknown namespace \"nope\": it has no NetNamespace in /state; create it with `sdnctl create nope` (or list them with `sdnctl namespaces`)");
    let join = |n: &str, o: &str| TenantCommand::Join {
        name: n.into(),
        other: o.into(),
    };
    assert!(err(&s, join("a", "nope"), &none()).starts_with("unknown namespace \"nope\""));
    assert!(err(&s, join("a", "a"), &none()).starts_with("namespace \"a\" cannot join itself"));
    assert!(
        err(&s, create("a"), &none()).starts_with("namespace \"a\" already exists with VNID 10")
    );
    assert!(err(
        &s,
        TenantCommand::Isolate {
            name: "default".into()
        },
        &none()
    )
    .starts_with("namespace \"default\" is global and cannot be isolated"));
    let del = TenantCommand::Delete {
        name: "default".into(),
        force: true,
    };
    assert!(err(&s, del, &none()).starts_with("namespace \"default\" cannot be deleted"));
    for bad in ["Tenant", "a_b", "-a", "a.b", ""] {
        assert!(
            err(&s, create(bad), &none()).starts_with(&format!(
                "bad namespace name {bad:?}: expected a DNS-1123 label"
            )),
            "{bad}"
        );
    }
    assert!(err(&s, join("a", "B"), &none()).starts_with("bad namespace name \"B\""));
}

#[test]
fn pods_are_counted_by_sandbox() {
    let m = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let rows = [
        m(&[("sandbox", "s1"), ("namespace", "a"), ("vnid", "10")]),
        m(&[("sandbox", "s1"), ("namespace", "a"), ("ifname", "net1")]),
        m(&[("sandbox", "s2"), ("namespace", "a"), ("vnid", "10")]),
        m(&[("sandbox", "s3"), ("namespace", "b"), ("vnid", "x")]),
        m(&[("namespace", "c")]),
        m(&[("iface-id", "tun0")]),
    ];
    let p = LocalPods::from_external_ids(&rows);
    assert_eq!(
        p.per_namespace,
        [("a".to_string(), 2), ("b".to_string(), 1)].into()
    );
    assert_eq!(p.vnids, [10].into());
    assert_eq!(p.count("c"), 0);
}

#[test]
fn listing() {
    let mut s = state(&[("default", 0), ("g", 0), ("a", 10), ("b", 10), ("c", 11)]);
    // Multicast is in effect for VNID 10 only when both a and b carry the annotation.
    let annotate = |s: &mut ClusterState, n: &str| {
        std::sync::Arc::make_mut(&mut s.net_namespaces)
            .get_mut(n)
            .unwrap()
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(flows::MULTICAST_ANNOTATION.into(), "true".into());
    };
    annotate(&mut s, "a");
    annotate(&mut s, "c");
    let pods = PodCounts::Known(LocalPods {
        per_namespace: [("a".to_string(), 2), ("gone".to_string(), 1)].into(),
        vnids: [10, 12].into(),
    });
    let r = rows(&s, &pods, &[]);
    assert_eq!(
        table(&r),
        "NAME     VNID  SHARES-WITH        PODS  MULTICAST\n\
         a        10    b                  2     -\n\
         b        10    a                  0     -\n\
         c        11    -                  0     on\n\
         default  0     global             0     -\n\
         g        0     global             0     -\n\
         gone     -     (no NetNamespace)  1     -\n"
    );
    annotate(&mut s, "b");
    assert!(rows(&s, &pods, &[])[..2].iter().all(|r| r.multicast));
    assert_eq!(r[3].shares_with, vec!["g".to_string()]);
    let r = rows(&s, &PodCounts::Unknown("x".into()), &[]);
    assert_eq!(r.len(), 5);
    assert!(table(&r).lines().nth(1).unwrap().ends_with("?     on"));
    // A NetNamespace two files define differently is shown with both definitions.
    let conflict = |name: &str| ClusterError::Conflict {
        kind: Kind::NetNamespace,
        name: name.into(),
        definitions: vec![
            (PathBuf::from("/s/copy.yaml"), "netid 12".into()),
            (PathBuf::from("/s/netnamespace-x.yaml"), "netid 11".into()),
        ],
        kept: None,
    };
    let r = rows(&s, &pods, &[conflict("x"), conflict("c")]);
    let t = table(&r);
    assert!(
        t.ends_with("x        -     (conflict: netid 12 in copy.yaml, netid 11 in netnamespace-x.yaml)  0     -\n"),
        "{t}"
    );
    assert!(
        t.contains("c        11    (conflict: netid 12 in copy.yaml"),
        "{t}"
    );
}

#[test]
fn the_lock_is_exclusive_and_bounded() {
    let dir = std::env::temp_dir().join(format!("sdn-tenants-lock-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let held = lock(&dir).unwrap();
    let t = Instant::now();
    let e = lock_within(&dir, Duration::from_millis(100)).unwrap_err();
    assert!(t.elapsed() >= Duration::from_millis(100));
    assert!(
        e.to_string().contains("another sdnctl has held the lock"),
        "{e}"
    );
    drop(held);
    lock_within(&dir, Duration::from_millis(100)).unwrap();
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn problems_that_hide_net_namespaces() {
    let dir = std::env::temp_dir().join(format!("sdn-tenants-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let hs = dir.join("hostsubnet-x.yaml");
    fs::write(&hs, "kind: HostSubnet\nbroken: [").unwrap();
    let nn = dir.join("mine.yaml");
    fs::write(&nn, "kind: NetNamespace\nbroken: [").unwrap();
    let parse = |file: &Path| ClusterError::Parse {
        file: file.to_path_buf(),
        source: Box::new(crate::ParseError::Syntax {
            document: 1,
            message: "x".into(),
        }),
    };
    assert!(!hides_net_namespaces(&parse(&hs)));
    assert!(hides_net_namespaces(&parse(&nn)));
    assert!(hides_net_namespaces(&parse(&dir.join("vanished.yaml"))));
    let dup = ClusterError::Duplicate {
        kind: Kind::NetNamespace,
        name: "a".into(),
        first: hs.clone(),
        second: nn.clone(),
    };
    assert!(!hides_net_namespaces(&dup));
    fs::remove_dir_all(&dir).unwrap();
}
