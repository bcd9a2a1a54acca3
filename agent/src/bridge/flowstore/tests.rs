//! Component tests of the flow store on the fake switch: diffs, VNID rows, policy rows, reference counts, batching, refused bundles, reconcile, multicast, groups.

use super::*;
use crate::bridge::fake::FakeSwitch;
use flows::cookie;
use ovs::flow::Action;
use ovs::flow::Match;

fn f(table: u8, prio: u16, port: u32, out: u32) -> Flow {
    Flow::new(table, prio)
        .matching(Match::any().in_port(port))
        .action(Action::Output(out))
}

#[test]
fn diff_touches_only_what_differs() {
    let existing = vec![f(0, 10, 1, 2), f(0, 10, 2, 1), f(0, 5, 3, 3)];
    let desired = vec![f(0, 10, 1, 2), f(0, 10, 2, 4), f(0, 7, 9, 9)];
    let msgs = diff(&desired, &existing);
    let text: Vec<String> = msgs.iter().map(BundleMsg::describe).collect();
    assert_eq!(msgs.len(), 3, "{text:?}");
    assert!(matches!(&msgs[0], BundleMsg::Flow(fm) if fm.command.is_delete()));
    assert!(text[0].contains("in_port=3"), "{text:?}");
    assert!(text[1].contains("in_port=2") && text[1].contains("output:4"));
    assert!(text[2].contains("in_port=9"));
    assert!(diff(&desired, &desired).is_empty());
}

#[test]
fn the_streamed_reconcile_diff_gives_the_same_messages_in_the_same_order() {
    let existing = vec![f(0, 10, 1, 2), f(0, 10, 2, 1), f(0, 5, 3, 3), f(1, 5, 3, 3)];
    let desired = vec![f(0, 7, 9, 9), f(0, 10, 1, 2), f(0, 10, 2, 4), f(1, 5, 3, 3)];
    let mut stream = diff::StreamDiff::new(desired.iter());
    for e in &existing {
        stream.see(e);
    }
    assert_eq!(stream.existing(), 4);
    let text = |m: &[BundleMsg]| m.iter().map(BundleMsg::describe).collect::<Vec<_>>();
    assert_eq!(
        text(&stream.finish(desired.iter())),
        text(&diff(&desired, &existing))
    );
    let mut same = diff::StreamDiff::new(desired.iter());
    desired.iter().for_each(|e| same.see(e));
    assert!(same.finish(desired.iter()).is_empty());
}

#[test]
fn cookie_change_is_a_difference() {
    let a = f(0, 10, 1, 2);
    let b = a.clone().cookie(7);
    assert_eq!(diff(&[b], &[a]).len(), 1);
}

fn pod(n: u32) -> (String, Vec<Flow>) {
    let a = format!("veth{n:08x}");
    let c = flows::pod::port_cookie(&a);
    let flow = Flow::new(70, 100)
        .cookie(c)
        .matching(
            Match::any()
                .ip()
                .nw_dst(std::net::Ipv4Addr::new(10, 128, 0, n as u8)),
        )
        .action(Action::Output(n + 2));
    (a, vec![flow])
}

fn vnid(v: u32) -> Vnid {
    Vnid::new(v).unwrap()
}

#[tokio::test]
async fn vnid_rows_follow_their_first_and_last_pod_in_the_same_bundle() {
    let sw = Arc::new(FakeSwitch::new());
    let store = FlowStore::new(sw.clone(), true);
    let (a, fa) = pod(2);
    let (b, fb) = pod(3);
    store
        .apply(Change::new().set_pod(a.clone(), fa, vnid(11)))
        .await
        .unwrap();
    assert_eq!(sw.bundles(), 1);
    assert_eq!(sw.flows_with_cookie(vnid_cookie(vnid(11))).len(), 1);
    store
        .apply(Change::new().set_pod(b.clone(), fb, vnid(11)))
        .await
        .unwrap();
    store
        .apply(Change::new().remove(Owner::Port(a)))
        .await
        .unwrap();
    assert_eq!(
        sw.flows_with_cookie(vnid_cookie(vnid(11))).len(),
        1,
        "b still uses VNID 11"
    );
    store
        .apply(Change::new().remove(Owner::Port(b)))
        .await
        .unwrap();
    assert!(sw.flows().is_empty(), "{:?}", sw.flows());
    assert_eq!(sw.bundles(), 4, "one bundle per change");
    // Global and unknown-tenant pods have no row.
    let (c, fc) = pod(4);
    store
        .apply(Change::new().set_pod(c.clone(), fc, Vnid::GLOBAL))
        .await
        .unwrap();
    assert_eq!(sw.flows().len(), 1);
    assert_eq!(store.owners().await, vec![Owner::Port(c)]);
}

fn policy_row(port: &str, n: u32) -> Flow {
    Flow::new(80, 100)
        .cookie(flows::policy_target_cookie(port))
        .matching(Match::any().ip().reg(2, n))
}

fn shared_row(n: u8) -> Flow {
    Flow::new(80, 150)
        .cookie(flows::POLICY_COOKIE)
        .matching(
            Match::any()
                .ip()
                .nw_src(std::net::Ipv4Addr::new(10, 129, 0, n)),
        )
        .action(Action::conjunction(7, 2, 2).unwrap())
}

#[tokio::test]
async fn policy_rows_live_and_die_with_their_port_and_shared_rows_change_row_by_row() {
    let sw = Arc::new(FakeSwitch::new());
    let store = FlowStore::new(sw.clone(), false);
    let (a, fa) = pod(2);
    // A pod and its policy rows in one bundle.
    store
        .apply(
            Change::new()
                .set_pod(a.clone(), fa, vnid(11))
                .set(Owner::PolicyTarget(a.clone()), vec![policy_row(&a, 4)]),
        )
        .await
        .unwrap();
    assert_eq!(sw.bundles(), 1);
    assert_eq!(
        sw.flows_with_cookie(flows::policy_target_cookie(&a)).len(),
        1
    );
    // Rows for a port the store does not hold (a pod deleted meanwhile) are dropped.
    let (b, _) = pod(3);
    store
        .apply(Change::new().set(Owner::PolicyTarget(b.clone()), vec![policy_row(&b, 5)]))
        .await
        .unwrap();
    assert!(sw
        .flows_with_cookie(flows::policy_target_cookie(&b))
        .is_empty());
    assert_eq!(store.flows_of(&Owner::PolicyTarget(b)).await, None);
    // Shared rows: only the difference is sent.
    store
        .apply(Change::new().diff(Owner::Policy, vec![shared_row(1), shared_row(2)]))
        .await
        .unwrap();
    assert_eq!(sw.last_bundle_len(), 2);
    store
        .apply(Change::new().diff(Owner::Policy, vec![shared_row(2), shared_row(3)]))
        .await
        .unwrap();
    assert_eq!(sw.last_bundle_len(), 2, "one strict delete, one add");
    let mut on: Vec<String> = sw
        .flows_with_cookie(flows::POLICY_COOKIE)
        .iter()
        .map(|f| f.to_string())
        .collect();
    on.sort();
    assert_eq!(on.len(), 2);
    assert!(
        on[0].contains("10.129.0.2") && on[1].contains("10.129.0.3"),
        "{on:?}"
    );
    // A patch: one row changed in place (its clauses), one gone, nothing else sent or
    // compared; the store then holds what the bridge holds.
    let changed = shared_row(3).action(Action::conjunction(9, 2, 2).unwrap());
    store
        .apply(Change::new().patch(Owner::Policy, vec![changed.clone()], vec![shared_row(2)]))
        .await
        .unwrap();
    assert_eq!(sw.last_bundle_len(), 2, "one strict delete, one add");
    let on: Vec<String> = sw
        .flows_with_cookie(flows::POLICY_COOKIE)
        .iter()
        .map(|f| f.to_string())
        .collect();
    assert_eq!(on, vec![changed.to_string()]);
    assert_eq!(store.flows_of(&Owner::Policy).await, Some(vec![changed]));
    // Removing the port removes its policy rows in the same bundle.
    let before = sw.bundles();
    store
        .apply(Change::new().remove(Owner::Port(a.clone())))
        .await
        .unwrap();
    assert_eq!(sw.bundles(), before + 1);
    assert!(sw
        .flows_with_cookie(flows::policy_target_cookie(&a))
        .is_empty());
    assert_eq!(store.flows_of(&Owner::PolicyTarget(a)).await, None);
    assert_eq!(store.owners().await, vec![Owner::Policy]);
}

#[tokio::test]
async fn reference_counts_follow_multi_owner_changes_without_recounting() {
    let sw = Arc::new(FakeSwitch::new());
    let store = FlowStore::new(sw.clone(), true);
    let pods: Vec<_> = (2..8).map(pod).collect();
    // Three pods in 11, three in 12, in one bundle.
    let mut c = Change::new();
    for (i, (a, f)) in pods.iter().enumerate() {
        c = c.set_pod(a.clone(), f.clone(), vnid(11 + (i % 2) as u32));
    }
    store.apply(c).await.unwrap();
    assert_eq!(sw.bundles(), 1);
    // One change moving every pod of 11 to 13, and one of them twice (to 12, then 13).
    let mut c = Change::new().set_pod(pods[0].0.clone(), pods[0].1.clone(), vnid(12));
    for (a, f) in pods.iter().step_by(2) {
        c = c.set_pod(a.clone(), f.clone(), vnid(13));
    }
    store.apply(c).await.unwrap();
    let rows = |v| sw.flows_with_cookie(vnid_cookie(vnid(v))).len();
    assert_eq!((rows(11), rows(12), rows(13)), (0, 1, 1));
    let state = store.state.lock().await;
    let mut recount: BTreeMap<Vnid, usize> = BTreeMap::new();
    for e in state.owners.values() {
        if let Some(v) = e.vnid {
            *recount.entry(v).or_default() += 1;
        }
    }
    assert_eq!(state.refs, recount);
    assert_eq!(recount, BTreeMap::from([(vnid(12), 3), (vnid(13), 3)]));
}

#[tokio::test]
async fn concurrent_changes_share_bundles_and_a_bad_one_fails_alone() {
    let sw = Arc::new(FakeSwitch::new());
    let store = FlowStore::new(sw.clone(), true);
    let pods: Vec<_> = (2..12).map(pod).collect();
    // nw_dst without ip: the switch refuses it.
    let bad = Flow::new(70, 100)
        .cookie(flows::pod::port_cookie("vethbad"))
        .matching(Match::any().nw_dst(std::net::Ipv4Addr::new(10, 128, 0, 99)))
        .action(Action::Output(3));
    let mut changes: Vec<Change> = pods
        .iter()
        .map(|(a, f)| Change::new().set_pod(a.clone(), f.clone(), vnid(11)))
        .collect();
    changes.insert(
        5,
        Change::new().set_pod("vethbad".into(), vec![bad], vnid(12)),
    );
    let results = futures::future::join_all(changes.into_iter().map(|c| store.apply(c))).await;
    let failed: Vec<usize> = (0..results.len())
        .filter(|i| results[*i].is_err())
        .collect();
    assert_eq!(failed, vec![5], "{results:?}");
    for (a, f) in &pods {
        assert_eq!(sw.flows_with_cookie(flows::pod::port_cookie(a)), *f);
        assert_eq!(
            store.flows_of(&Owner::Port(a.clone())).await.as_ref(),
            Some(f)
        );
    }
    assert!(store
        .flows_of(&Owner::Port("vethbad".into()))
        .await
        .is_none());
    assert!(store.flows_of(&Owner::Vnid(vnid(12))).await.is_none());
    assert_eq!(sw.flows_with_cookie(vnid_cookie(vnid(11))).len(), 1);
    // Without a bad change: the first goes alone, the nine that waited for it go together.
    let sw2 = Arc::new(FakeSwitch::new());
    let store2 = FlowStore::new(sw2.clone(), true);
    let results = futures::future::join_all(
        pods.iter()
            .map(|(a, f)| store2.apply(Change::new().set_pod(a.clone(), f.clone(), vnid(11)))),
    )
    .await;
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(
        sw2.bundles(),
        2,
        "one bundle, then one for the nine that waited"
    );
    assert_eq!(sw2.flows().len(), pods.len() + 1);
}

#[tokio::test]
async fn a_refused_bundle_changes_neither_the_bridge_nor_the_store() {
    let sw = Arc::new(FakeSwitch::new());
    let store = FlowStore::new(sw.clone(), true);
    let (a, fa) = pod(2);
    store
        .apply(Change::new().set_pod(a.clone(), fa.clone(), vnid(11)))
        .await
        .unwrap();
    let before = sw.flows();
    // nw_dst without ip: the switch refuses it, the whole bundle goes.
    let bad = Flow::new(70, 100)
        .cookie(flows::pod::port_cookie(&a))
        .matching(Match::any().nw_dst(std::net::Ipv4Addr::new(10, 128, 0, 9)))
        .action(Action::Output(3));
    let e = store
        .apply(Change::new().set_pod(a.clone(), vec![bad], vnid(12)))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("nw_dst"), "{e}");
    assert_eq!(sw.flows(), before);
    assert_eq!(store.flows_of(&Owner::Port(a)).await, Some(fa));
    assert!(store.flows_of(&Owner::Vnid(vnid(12))).await.is_none());
}

#[tokio::test]
async fn reconcile_repairs_drift_in_one_bundle_and_keeps_right_flows() {
    let sw = Arc::new(FakeSwitch::new());
    let store = FlowStore::new(sw.clone(), true);
    let base = vec![f(0, 0, 1, 2).cookie(cookie::BASE)];
    let (a, fa) = pod(2);
    store
        .stage(
            Change::new()
                .set(Owner::Base, base)
                .set_pod(a, fa, vnid(11)),
        )
        .await;
    assert!(sw.flows().is_empty(), "stage touches nothing");
    let s = store.reconcile().await.unwrap();
    assert_eq!((s.existing, s.desired, s.added, s.deleted), (0, 3, 3, 0));
    // Drift: a stray flow, a lost one.
    sw.put_flow(f(5, 1, 9, 9));
    sw.remove_flows_with_cookie(vnid_cookie(vnid(11)));
    let bundles = sw.bundles();
    let s = store.reconcile().await.unwrap();
    assert_eq!((s.added, s.deleted), (1, 1));
    assert_eq!(sw.bundles(), bundles + 1);
    let s = store.reconcile().await.unwrap();
    assert_eq!((s.added, s.deleted), (0, 0));
    assert_eq!(sw.bundles(), bundles + 1, "nothing to do, nothing sent");
}

/// A real pod's flows (with the table-26 row the store reads the port from).
fn real_pod(ofport: u32, v: u32) -> (String, Vec<Flow>) {
    let port = format!("vethmc{ofport}");
    let flows = flows::pod_flows(&flows::PodFlows {
        ofport,
        ip: Some(std::net::Ipv4Addr::new(10, 128, 0, ofport as u8)),
        ipv6: None,
        vnid: vnid(v),
        cookie: flows::pod::port_cookie(&port),
        egress_meter: None,
    });
    (port, flows)
}

fn table_120(sw: &FakeSwitch, v: u32) -> Vec<String> {
    sw.flows_with_cookie(flows::multicast_cookie(vnid(v)))
        .iter()
        .filter(|f| f.table == 120)
        .map(|f| f.actions_text(None))
        .collect()
}

#[tokio::test]
async fn multicast_rows_follow_the_enabled_set_and_the_pods_in_their_bundles() {
    let sw = Arc::new(FakeSwitch::new());
    let store = FlowStore::new(sw.clone(), true);
    let (a, fa) = real_pod(3, 11);
    let (b, fb) = real_pod(4, 11);
    let (c, fc) = real_pod(5, 12);
    store
        .apply(
            Change::new()
                .set_pod(a.clone(), fa.clone(), vnid(11))
                .set_pod(c.clone(), fc.clone(), vnid(12)),
        )
        .await
        .unwrap();
    assert!(table_120(&sw, 11).is_empty(), "off by default");
    // Enabling VNID 11: both rows for its one pod, in one bundle; VNID 12 stays off.
    let bundles = sw.bundles();
    store
        .set_multicast(std::collections::BTreeSet::from([vnid(11)]))
        .await
        .unwrap();
    assert_eq!(sw.bundles(), bundles + 1);
    assert_eq!(table_120(&sw, 11), ["output:3"]);
    assert_eq!(
        sw.flows_with_cookie(flows::multicast_cookie(vnid(11)))
            .len(),
        2
    );
    assert!(table_120(&sw, 12).is_empty());
    // A second pod joins the row in the ADD's own bundle.
    let bundles = sw.bundles();
    store
        .apply(Change::new().set_pod(b.clone(), fb, vnid(11)))
        .await
        .unwrap();
    assert_eq!(sw.bundles(), bundles + 1);
    assert_eq!(table_120(&sw, 11), ["output:3,output:4"]);
    // Pod a moves to VNID 12 (not enabled): it leaves 11's row in the move's bundle.
    let moved = real_pod(3, 12).1;
    store
        .apply(Change::new().put_pod(a.clone(), moved, vnid(12)))
        .await
        .unwrap();
    assert_eq!(table_120(&sw, 11), ["output:4"]);
    // The desired set names the rows; a reconcile finds the bridge right.
    let owners = store.owners().await;
    assert!(owners.contains(&Owner::MulticastTenant(vnid(11))));
    assert!(!owners.contains(&Owner::MulticastTenant(vnid(12))));
    let s = store.reconcile().await.unwrap();
    assert_eq!((s.added, s.deleted), (0, 0), "{:?}", s.changes);
    // Lost rows come back with a reconcile.
    sw.remove_flows_with_cookie(flows::multicast_cookie(vnid(11)));
    let s = store.reconcile().await.unwrap();
    assert_eq!(s.added, 2);
    // The last pod of the VNID goes: its rows go with it.
    store
        .apply(Change::new().remove(Owner::Port(b)))
        .await
        .unwrap();
    assert!(sw
        .flows_with_cookie(flows::multicast_cookie(vnid(11)))
        .is_empty());
    // Disabling removes the rows of a VNID with pods.
    store
        .set_multicast(std::collections::BTreeSet::from([vnid(12)]))
        .await
        .unwrap();
    assert_eq!(table_120(&sw, 12), ["output:3,output:5"]);
    store
        .set_multicast(std::collections::BTreeSet::new())
        .await
        .unwrap();
    assert!(sw
        .flows_with_cookie(flows::multicast_cookie(vnid(12)))
        .is_empty());
    let s = store.reconcile().await.unwrap();
    assert_eq!((s.added, s.deleted), (0, 0), "{:?}", s.changes);
}

#[tokio::test]
async fn groups_go_with_their_owner_and_a_reconcile_puts_back_a_lost_one() {
    let sw = Arc::new(FakeSwitch::new());
    let store = FlowStore::new(sw.clone(), true);
    let v = vnid(20);
    let tun = ovs::flow::MacAddr::from_pod_ip(std::net::Ipv4Addr::new(10, 128, 0, 1));
    let remote = flows::EgressRoute::Remote(vec![std::net::Ipv4Addr::new(192, 168, 77, 12).into()]);
    let (f, g) = flows::egress_ip_flows(v, Some(&remote), None, tun);
    store
        .apply(Change::new().set_with_groups(Owner::EgressIp(v), f, g))
        .await
        .unwrap();
    assert_eq!(sw.groups().len(), 1);
    assert_eq!(sw.flows_with_cookie(flows::egress_ip_cookie(v)).len(), 1);
    // Replaced: the group is deleted and added again in the same bundle, its flow with it.
    let (f, g) = flows::egress_ip_flows(v, Some(&flows::EgressRoute::Local), None, tun);
    store
        .apply(Change::new().set_with_groups(Owner::EgressIp(v), f, g))
        .await
        .unwrap();
    assert_eq!(sw.groups()[&20].buckets.len(), 1);
    assert!(sw.flows_with_cookie(flows::egress_ip_cookie(v))[0]
        .to_string()
        .ends_with("actions=group:20"));
    let s = store.reconcile().await.unwrap();
    assert_eq!((s.added, s.deleted, s.groups), (0, 0, 0), "{:?}", s.changes);
    // Someone deletes the group (and with it the flow): the reconcile puts both back.
    sw.remove_group(20);
    assert!(sw.flows_with_cookie(flows::egress_ip_cookie(v)).is_empty());
    let s = store.reconcile().await.unwrap();
    assert_eq!((s.added, s.groups), (1, 1), "{:?}", s.changes);
    assert_eq!(sw.flows_with_cookie(flows::egress_ip_cookie(v)).len(), 1);
    // A stray group is deleted; a dropped tenant has a row and no group.
    let (f, _) = flows::egress_ip_flows(v, Some(&flows::EgressRoute::Dropped), None, tun);
    store
        .apply(Change::new().set_with_groups(Owner::EgressIp(v), f, Vec::new()))
        .await
        .unwrap();
    assert!(sw.groups().is_empty());
    store
        .apply(Change::new().remove(Owner::EgressIp(v)))
        .await
        .unwrap();
    assert!(sw.flows_with_cookie(flows::egress_ip_cookie(v)).is_empty());
}

#[tokio::test]
async fn a_message_that_cannot_be_encoded_is_left_out_and_the_rest_applied() {
    let sw = Arc::new(FakeSwitch::new());
    let store = FlowStore::new(sw.clone(), true);
    let base = vec![f(0, 0, 1, 2).cookie(cookie::BASE)];
    // openshift-sdn's one-row table 111 at 2,100 remote nodes: longer than 64 KiB.
    let mut huge = Flow::new(111, 100).cookie(flows::MULTICAST_COOKIE);
    for i in 0..2100u32 {
        huge = huge
            .action(Action::set_tun_dst(std::net::Ipv4Addr::from(
                0x6440_0000 + i,
            )))
            .action(Action::Output(1));
    }
    let (a, fa) = pod(2);
    store
        .stage(
            Change::new()
                .set(Owner::Base, base)
                .set(Owner::Multicast, vec![huge])
                .set_pod(a, fa, vnid(11)),
        )
        .await;
    let s = store.reconcile().await.unwrap();
    assert_eq!(s.refused.len(), 1, "{:?}", s.refused);
    assert!(
        s.refused[0].starts_with("add cookie=0x2000000000000000, table=111")
            && s.refused[0].contains("characters)")
            && s.refused[0].contains("16-bit"),
        "{}",
        s.refused[0]
    );
    // Everything else is on the switch.
    assert_eq!((s.desired, s.added, s.deleted), (4, 3, 0));
    assert_eq!(sw.flows().len(), 3);
    assert!(sw.flows().iter().all(|f| f.table != 111));
}

/// A removal the switch did not take (ovs-vswitchd restarting under a DEL or a failed ADD's
/// undo) stays a removal: the reconcile after the reconnect deletes the rows, and so does the
/// table-80 row of the VNID's last pod. A failed set changes nothing.
#[tokio::test]
async fn a_removal_the_switch_missed_is_not_put_back_by_the_reconcile() {
    let sw = Arc::new(FakeSwitch::new());
    let store = FlowStore::new(sw.clone(), true);
    let (a, fa) = pod(2);
    let (b, fb) = pod(3);
    store
        .apply(Change::new().set_pod(a.clone(), fa, vnid(11)))
        .await
        .unwrap();
    sw.faults.fail_next("bundle");
    assert!(store
        .apply(Change::new().set_pod(b.clone(), fb, vnid(12)))
        .await
        .is_err());
    sw.faults.fail_next("bundle");
    assert!(store
        .apply(Change::new().remove(Owner::Port(a.clone())))
        .await
        .is_err());
    let cookie = flows::pod::port_cookie(&a);
    assert_eq!(sw.flows_with_cookie(cookie).len(), 1, "still on the switch");
    let stats = store.reconcile().await.unwrap();
    assert!(stats.deleted >= 2, "{stats:?}");
    assert!(
        sw.flows_with_cookie(cookie).is_empty(),
        "the reconcile put a's rows back"
    );
    assert!(sw.flows_with_cookie(vnid_cookie(vnid(11))).is_empty());
    assert!(sw.flows_with_cookie(flows::pod::port_cookie(&b)).is_empty());
    assert!(sw.flows_with_cookie(vnid_cookie(vnid(12))).is_empty());
}
