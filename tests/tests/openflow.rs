//! `OfClient` against a real Open vSwitch (a private instance per test, see the harness), plus
//! fake switches (a `UnixListener` in the test) for the failure modes a real switch will not
//! produce on demand: closing mid-request and never answering the hello.
//!
//! What is checked: connecting over the management socket and over TCP inside the OVS network
//! namespace; flows installed through the client dump back equal (our dump and `ovs-ofctl`'s);
//! rejected flows are reported with index, flow text and error code and leave the connection
//! usable; cookie deletes remove exactly their cookie; groups; bundles are atomic (a concurrent
//! observer never sees a partial replacement, and a bundle with one bad flow changes nothing);
//! the switch's own echo probes are answered; every failure is prompt and bounded.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ovs::flow::{Action, Bucket, Flow, Group, GroupType, Match};
use ovs::openflow::flow_mod::{FlowMod, GroupModCommand};
use ovs::openflow::{BundleMsg, BundleStage, DumpFilter, OfClient, OfConfig, OfError};
use sdn_tests::corpus;
use sdn_tests::harness::{unique_name, Ovs};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A private OVS with bridge `br0`.
fn ovs_with_br0() -> Ovs {
    let ovs = Ovs::start();
    ovs.add_bridge("br0");
    ovs
}

fn target(ovs: &Ovs) -> String {
    format!("unix:{}", ovs.mgmt_sock("br0").display())
}

fn flow(text: &str) -> Flow {
    text.parse()
        .unwrap_or_else(|e| panic!("test flow {text}: {e}"))
}

fn set(flows: Vec<Flow>) -> HashSet<Flow> {
    let n = flows.len();
    let s: HashSet<Flow> = flows.into_iter().collect();
    assert_eq!(s.len(), n, "duplicate flows in a dump");
    s
}

/// Asserts that two flow lists hold the same flows (in any order), printing the differences as
/// flow text.
fn assert_same_flows(got: Vec<Flow>, want: Vec<Flow>) {
    let (got, want) = (set(got), set(want));
    let missing: Vec<String> = want.difference(&got).map(|f| f.to_string()).collect();
    let extra: Vec<String> = got.difference(&want).map(|f| f.to_string()).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "flows differ\nmissing: {missing:#?}\nunexpected: {extra:#?}"
    );
}

/// `ovs-ofctl dump-flows` lines without statistics, sorted.
fn ofctl_flows(ovs: &Ovs) -> Vec<String> {
    let out = ovs.ofctl(&["--no-names", "--no-stats", "dump-flows", "br0"]);
    let mut lines: Vec<String> = out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("OFPST_FLOW"))
        .map(String::from)
        .collect();
    lines.sort();
    lines
}

/// Realistic pipeline flows (tables 0..80) under `cookie`.
fn realistic(cookie: u64) -> Vec<Flow> {
    [
        "table=0, priority=200,ip,in_port=1,nw_src=10.128.0.0/14 actions=move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[],goto_table:10",
        "table=20, priority=100,ip,in_port=3,dl_src=0a:58:0a:80:00:02,nw_src=10.128.0.2 actions=load:0x5->NXM_NX_REG0[],goto_table:27",
        "table=70, priority=100,ip,nw_dst=10.128.0.2 actions=load:0x5->NXM_NX_REG1[],load:0x3->NXM_NX_REG2[],goto_table:80",
        "table=80, priority=200,ct_state=+rpl,ip actions=output:NXM_NX_REG2[]",
        "table=40, priority=100,arp,arp_tpa=10.128.0.2 actions=output:3",
        "table=30, priority=300,ip,nw_dst=10.128.0.1 actions=output:2",
    ]
    .iter()
    .map(|t| flow(t).cookie(cookie))
    .collect()
}

#[test]
fn connects_over_the_management_socket() {
    let ovs = ovs_with_br0();
    let dpid = ovs.vsctl(&["get", "bridge", "br0", "datapath_id"]);
    let dpid = u64::from_str_radix(dpid.trim().trim_matches('"'), 16).unwrap();
    let mgmt = ovs.mgmt_sock("br0");
    rt().block_on(async {
        for t in [
            format!("unix:{}", mgmt.display()),
            mgmt.display().to_string(),
        ] {
            let c = OfClient::connect(&t).await.unwrap();
            assert_eq!(c.datapath_id(), dpid);
            assert!(c.peer().contains(&format!("{dpid:016x}")), "{}", c.peer());
            c.barrier().await.unwrap();
            c.echo().await.unwrap();
            assert!(c.dump_flows(&DumpFilter::all()).await.unwrap().is_empty());
        }
    });
}

#[test]
fn a_missing_socket_fails_fast_and_clearly() {
    let dir = std::env::temp_dir().join(unique_name("ofc-missing"));
    let path = dir.join("br0.mgmt");
    let t = format!("unix:{}", path.display());
    let start = Instant::now();
    let err = rt().block_on(OfClient::connect(&t)).unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "took {:?}",
        start.elapsed()
    );
    assert!(matches!(err, OfError::Connect { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains(&t) && text.contains("No such file"), "{text}");
}

#[test]
fn a_bridge_without_openflow13_is_refused_clearly() {
    let ovs = ovs_with_br0();
    ovs.vsctl(&["set", "bridge", "br0", "protocols=OpenFlow10"]);
    let t = target(&ovs);
    let err = rt().block_on(async {
        // The setting applies asynchronously; bounded retry until the switch stops offering 1.3.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match OfClient::connect(&t).await {
                Err(e) => break e,
                Ok(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Ok(_) => panic!("still connecting with OpenFlow 1.3 after protocols=OpenFlow10"),
            }
        }
    });
    assert!(matches!(err, OfError::UnsupportedVersion { .. }), "{err}");
    assert!(err.to_string().contains("it offers 1.0"), "{err}");
}

#[test]
fn installed_flows_dump_back_equal() {
    let ovs = ovs_with_br0();
    let t = target(&ovs);
    let flows = corpus::flows();
    let want = flows.clone();
    let (dumped, stats) = rt().block_on(async move {
        let c = OfClient::connect(&t).await.unwrap();
        // The corpus has a flow to group 7.
        let g = Group::select(7, vec![vec![Action::Output(1)], vec![Action::Output(2)]]);
        c.group_mod(GroupModCommand::Add, &g).await.unwrap();
        c.add_flows(&flows).await.unwrap();
        let dumped = c.dump_flows(&DumpFilter::all()).await.unwrap();
        let stats = c.dump_flow_stats(&DumpFilter::table(70)).await.unwrap();
        (dumped, stats)
    });
    assert_same_flows(dumped, want.clone());
    // Table filter, with counters.
    assert_eq!(stats.len(), want.iter().filter(|f| f.table == 70).count());
    assert!(stats.iter().all(|s| s.flow.table == 70 && s.packets == 0));
    // And what ovs-ofctl sees is the corpus text, line for line.
    let seen = ofctl_flows(&ovs);
    for line in corpus::lines() {
        assert!(
            seen.iter().any(|l| l == line),
            "ovs-ofctl does not show {line}\n{seen:#?}"
        );
    }
    assert_eq!(seen.len(), want.len());
}

#[test]
fn tcp_connection_inside_the_ovs_netns() {
    let ovs = ovs_with_br0();
    ovs.vsctl(&["set-controller", "br0", "ptcp:16653:127.0.0.1"]);
    // OVS probes an idle controller connection and drops it if the echo goes unanswered:
    // staying idle for longer than two probe intervals proves we answer its echo requests.
    ovs.vsctl(&["set", "controller", "br0", "inactivity_probe=1000"]);
    let flows = realistic(0x77);
    let want = flows.clone();
    let (dumped, after_idle, probed) = ovs.in_netns(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            // Our own keepalive off: only the switch's probes keep the connection busy.
            let config = OfConfig {
                echo_interval: None,
                ..OfConfig::default()
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            let c = loop {
                match OfClient::connect_with("tcp:127.0.0.1:16653", config).await {
                    Ok(c) => break c,
                    Err(_) if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(100)).await
                    }
                    Err(e) => panic!("ptcp listener never came up: {e}"),
                }
            };
            c.add_flows(&flows).await.unwrap();
            let dumped = c
                .dump_flows(&DumpFilter::cookie(0x77, u64::MAX))
                .await
                .unwrap();
            // OVS clamps the probe interval to at least 5 s: an unanswered probe would drop the
            // connection after 10 s of idleness, so 11 s idle proves we answer.
            tokio::time::sleep(Duration::from_secs(11)).await;
            let after_idle = c.barrier().await.map_err(|e| e.to_string());
            // Proof that the switch does probe such a connection: a raw one that says hello
            // receives an ECHO_REQUEST within a few seconds.
            let mut raw = tokio::net::TcpStream::connect("127.0.0.1:16653")
                .await
                .unwrap();
            raw.write_all(&[4, 0, 0, 16, 0, 0, 0, 1, 0, 1, 0, 8, 0, 0, 0, 0x10])
                .await
                .unwrap();
            // Bounded generously: under a loaded machine the probe can come late.
            let probed = tokio::time::timeout(Duration::from_secs(15), async {
                loop {
                    let msg = read_msg(&mut raw).await;
                    if msg[1] == 2 {
                        break;
                    }
                }
            })
            .await
            .is_ok();
            (dumped, after_idle, probed)
        })
    });
    assert_same_flows(dumped, want);
    assert!(
        probed,
        "the switch never sent an echo request to an idle connection"
    );
    after_idle.expect("connection should survive the switch's inactivity probes");
}

#[test]
fn a_rejected_flow_is_named_and_the_connection_stays_usable() {
    let ovs = ovs_with_br0();
    let t = target(&ovs);
    let good1 = flow("table=10, priority=100,ip,nw_dst=10.128.0.2 actions=output:3");
    let bad = flow("table=10, priority=90,ip,nw_dst=10.128.0.3 actions=group:77");
    let good2 = flow("table=10, priority=80,ip,nw_dst=10.128.0.4 actions=output:4");
    let backwards = flow("table=10, priority=70,ip actions=goto_table:80").goto(5);
    let (err, enc_err, dumped) = rt().block_on(async {
        let c = OfClient::connect(&t).await.unwrap();
        let err = c
            .add_flows(&[good1.clone(), bad.clone(), good2.clone()])
            .await
            .unwrap_err();
        c.barrier().await.unwrap();
        // A flow our encoder refuses: nothing of the call is sent.
        let extra = flow("table=11, priority=1 actions=drop");
        let enc_err = c.add_flows(&[extra, backwards]).await.unwrap_err();
        let dumped = c.dump_flows(&DumpFilter::all()).await.unwrap();
        (err, enc_err, dumped)
    });
    match &err {
        OfError::ModRejected {
            index,
            total,
            what,
            error,
            more_failed,
            ..
        } => {
            assert_eq!((*index, *total, *more_failed), (1, 3, 0));
            assert!(
                what.contains("nw_dst=10.128.0.3") && what.contains("group:77"),
                "{what}"
            );
            assert_eq!(error.type_name(), Some("OFPET_BAD_ACTION"));
            assert_eq!(error.code_name(), Some("OFPBAC_BAD_OUT_GROUP"));
        }
        other => panic!("expected ModRejected, got {other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("group:77") && text.contains("OFPBAC_BAD_OUT_GROUP"),
        "{text}"
    );
    assert!(
        matches!(enc_err, OfError::Encode { index: 1, .. }),
        "{enc_err}"
    );
    assert!(enc_err.to_string().contains("goto_table:5"), "{enc_err}");
    // Plain flow_mods are not atomic: the good ones are in, the bad one and the unsent batch
    // are not.
    assert_same_flows(dumped, vec![good1, good2]);
}

#[test]
fn delete_by_cookie_removes_exactly_that_cookie() {
    let ovs = ovs_with_br0();
    let t = target(&ovs);
    let mut flows = Vec::new();
    for (i, cookie) in [0x1_0001u64, 0x1_0002, 0x2_0001].into_iter().enumerate() {
        for table in [0u8, 20, 40] {
            flows.push(
                Flow::new(table, 100 + i as u16)
                    .cookie(cookie)
                    .matching(
                        Match::any()
                            .ip()
                            .nw_dst(Ipv4Addr::new(10, 128, 0, 2 + i as u8)),
                    )
                    .action(Action::Output(3)),
            );
        }
    }
    let keep: Vec<Flow> = flows
        .iter()
        .filter(|f| f.cookie == 0x2_0001)
        .cloned()
        .collect();
    rt().block_on(async {
        let c = OfClient::connect(&t).await.unwrap();
        c.add_flows(&flows).await.unwrap();
        assert_eq!(ofctl_flows(&ovs).len(), 9);
        c.delete_by_cookie(0x1_0000, 0xffff_0000).await.unwrap();
        // Idempotent.
        c.delete_by_cookie(0x1_0000, 0xffff_0000).await.unwrap();
        assert_same_flows(c.dump_flows(&DumpFilter::all()).await.unwrap(), keep);
    });
    let lines = ofctl_flows(&ovs);
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert!(
        lines.iter().all(|l| l.starts_with("cookie=0x20001,")),
        "{lines:#?}"
    );
}

#[test]
fn groups_are_added_modified_and_deleted() {
    let ovs = ovs_with_br0();
    let t = target(&ovs);
    let g = Group {
        id: 1,
        kind: GroupType::Select,
        buckets: vec![
            Bucket {
                weight: 100,
                actions: vec![Action::load_reg(1, 7), Action::Output(3)],
            },
            Bucket {
                weight: 50,
                actions: vec![Action::Output(4)],
            },
        ],
    };
    let c = rt();
    let client = c.block_on(OfClient::connect(&t)).unwrap();
    c.block_on(client.group_mod(GroupModCommand::Add, &g))
        .unwrap();
    let groups = ovs.ofctl(&["dump-groups", "br0"]);
    assert!(groups.contains("group_id=1,type=select"), "{groups}");
    assert!(
        groups.contains("weight:100") && groups.contains("weight:50"),
        "{groups}"
    );
    assert!(groups.contains("load:0x7->NXM_NX_REG1[]"), "{groups}");
    // The native dump reads back exactly what was added.
    assert_eq!(c.block_on(client.dump_groups()).unwrap(), vec![g.clone()]);

    let err = c
        .block_on(client.group_mod(GroupModCommand::Add, &g))
        .unwrap_err();
    assert_eq!(
        err.switch_error().and_then(|e| e.code_name()),
        Some("OFPGMFC_GROUP_EXISTS")
    );
    assert!(err.to_string().contains("group_id=1"), "{err}");

    let mut g3 = g.clone();
    g3.buckets.push(Bucket {
        weight: 10,
        actions: vec![Action::Output(5)],
    });
    c.block_on(client.group_mod(GroupModCommand::Modify, &g3))
        .unwrap();
    let groups = ovs.ofctl(&["dump-groups", "br0"]);
    assert_eq!(groups.matches("bucket=").count(), 3, "{groups}");

    // A flow may now use it; deleting the group deletes that flow too (OpenFlow semantics).
    let f = flow("table=30, priority=10,ip actions=group:1");
    c.block_on(client.add_flows(&[f])).unwrap();
    assert_eq!(ofctl_flows(&ovs).len(), 1);
    c.block_on(client.group_mod(GroupModCommand::Delete, &g3))
        .unwrap();
    assert!(!ovs.ofctl(&["dump-groups", "br0"]).contains("group_id=1"));
    assert!(ofctl_flows(&ovs).is_empty());

    // A group and the flow using it in one atomic bundle; replaced (delete + add) in another.
    let g2 = Group {
        id: 2,
        kind: GroupType::Select,
        buckets: vec![Bucket {
            weight: 1,
            actions: vec![Action::Output(6)],
        }],
    };
    let f2 = flow("table=30, priority=10,ip actions=group:2");
    c.block_on(client.bundle(&[
        BundleMsg::Group(GroupModCommand::Add, g2.clone()),
        BundleMsg::add(f2.clone()),
    ]))
    .unwrap();
    assert_eq!(ofctl_flows(&ovs).len(), 1);
    let mut g2b = g2.clone();
    g2b.buckets[0].actions = vec![Action::Output(7)];
    c.block_on(client.bundle(&[
        BundleMsg::Group(GroupModCommand::Delete, g2.clone()),
        BundleMsg::Group(GroupModCommand::Add, g2b.clone()),
        BundleMsg::add(f2),
    ]))
    .unwrap();
    assert_eq!(c.block_on(client.dump_groups()).unwrap(), vec![g2b]);
    assert_eq!(
        ofctl_flows(&ovs).len(),
        1,
        "the flow is back in the same bundle"
    );
}

/// 200 flows in tables 20 and 70 under `cookie`; `generation` changes the match and actions.
fn generation(cookie: u64, generation: u8) -> Vec<Flow> {
    (0..100u32)
        .flat_map(|i| {
            let ip = Ipv4Addr::new(10, 200 + generation, (i / 250) as u8, (i % 250) as u8 + 2);
            [
                Flow::new(20, 100)
                    .cookie(cookie)
                    .matching(Match::any().ip().nw_src(ip))
                    .action(Action::load_reg(0, i))
                    .goto(27),
                Flow::new(70, 100)
                    .cookie(cookie)
                    .matching(Match::any().ip().nw_dst(ip))
                    .actions([
                        Action::load_reg(1, u32::from(generation)),
                        Action::Output(3),
                    ])
                    .goto(80),
            ]
        })
        .collect()
}

fn replace(cookie: u64, flows: &[Flow]) -> Vec<BundleMsg> {
    let mut msgs = vec![BundleMsg::delete_by_cookie(cookie, u64::MAX)];
    msgs.extend(flows.iter().cloned().map(BundleMsg::add));
    msgs
}

/// What an observer dumping `cookie` concurrently saw: (saw set A, saw set B, other states).
#[derive(Debug, Default)]
struct Observed {
    a: usize,
    b: usize,
    other: Vec<String>,
}

/// Swaps `cookie`'s flows between two generations `swaps` times with `swap` while another
/// connection dumps them in a bounded loop.
async fn observe_swaps<F, Fut>(t: &str, swaps: usize, swap: F) -> Observed
where
    F: Fn(OfClient, Vec<Flow>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let cookie = 0xc0ffee;
    let a = generation(cookie, 0);
    let b = generation(cookie, 1);
    let writer = OfClient::connect(t).await.unwrap();
    writer.add_flows(&a).await.unwrap();
    // Noise under another cookie must never move.
    writer.add_flows(&realistic(0x99)).await.unwrap();
    let observer = OfClient::connect(t).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (set_a, set_b): (HashSet<Flow>, HashSet<Flow>) =
        (a.iter().cloned().collect(), b.iter().cloned().collect());
    let obs = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut seen = Observed::default();
            let deadline = Instant::now() + Duration::from_secs(60);
            for _ in 0..100_000 {
                if stop.load(Ordering::Relaxed) || Instant::now() > deadline {
                    break;
                }
                let got: HashSet<Flow> = observer
                    .dump_flows(&DumpFilter::cookie(cookie, u64::MAX))
                    .await
                    .unwrap()
                    .into_iter()
                    .collect();
                if got == set_a {
                    seen.a += 1;
                } else if got == set_b {
                    seen.b += 1;
                } else {
                    let from_a = got.intersection(&set_a).count();
                    let from_b = got.intersection(&set_b).count();
                    seen.other
                        .push(format!("{} flows: {from_a} of A, {from_b} of B", got.len()));
                }
            }
            seen
        })
    };
    for i in 0..swaps {
        let next = if i % 2 == 0 { b.clone() } else { a.clone() };
        swap(writer.clone(), next).await;
        tokio::task::yield_now().await;
    }
    stop.store(true, Ordering::Relaxed);
    let seen = obs.await.unwrap();
    // The noise is intact.
    let noise = writer
        .dump_flows(&DumpFilter::cookie(0x99, u64::MAX))
        .await
        .unwrap();
    assert_same_flows(noise, realistic(0x99));
    seen
}

#[test]
fn a_bundle_replaces_a_cookie_atomically() {
    let ovs = ovs_with_br0();
    let t = target(&ovs);
    let seen = rt().block_on(observe_swaps(&t, 40, |c, next| async move {
        c.bundle(&replace(0xc0ffee, &next)).await.unwrap();
    }));
    assert!(
        seen.other.is_empty(),
        "observer saw partial states: {:?}",
        seen.other
    );
    assert!(
        seen.a > 0 && seen.b > 0,
        "observer did not see both generations: {seen:?}"
    );
}

#[test]
fn the_atomicity_observer_does_see_partial_states_without_a_bundle() {
    // The control experiment for the test above: the same swap as plain (non-atomic) flow_mods
    // must show the observer a partial state, or the observer proves nothing.
    // Timing decides how often the observer lands between two messages, so it gets up to five
    // rounds of 40 swaps (bounded) to catch one; it usually does in the first.
    let ovs = ovs_with_br0();
    let t = target(&ovs);
    let mut rounds = Vec::new();
    for _ in 0..5 {
        ovs.ofctl(&["del-flows", "br0"]);
        let seen = rt().block_on(observe_swaps(&t, 40, |c, next| async move {
            let mut fms = vec![FlowMod::delete_cookie(0xc0ffee, u64::MAX)];
            fms.extend(next.into_iter().map(FlowMod::add));
            c.flow_mods(&fms).await.unwrap();
        }));
        if !seen.other.is_empty() {
            return;
        }
        rounds.push(seen);
    }
    panic!("observer never saw a partial state in 5 rounds: {rounds:?}");
}

#[test]
fn a_bundle_with_one_bad_flow_changes_nothing() {
    let ovs = ovs_with_br0();
    let t = target(&ovs);
    let cookie = 0xbad;
    let old = generation(cookie, 0);
    let mut new = generation(cookie, 1);
    let bad = flow("table=70, priority=50,ip,nw_dst=10.200.0.1 actions=group:77").cookie(cookie);
    new.insert(150, bad);
    let c = rt();
    let client = c.block_on(OfClient::connect(&t)).unwrap();
    c.block_on(client.add_flows(&old)).unwrap();
    let before_text = ofctl_flows(&ovs);
    let before = c.block_on(client.dump_flows(&DumpFilter::all())).unwrap();

    let err = c
        .block_on(client.bundle(&replace(cookie, &new)))
        .unwrap_err();
    match &err {
        OfError::BundleFailed {
            index,
            total,
            what,
            stage,
            error,
            ..
        } => {
            // Message 0 is the delete.
            assert_eq!((*index, *total), (151, new.len() + 1));
            assert!(
                what.contains("nw_dst=10.200.0.1") && what.contains("group:77"),
                "{what}"
            );
            assert_eq!(*stage, BundleStage::Commit);
            assert_eq!(error.code_name(), Some("OFPBAC_BAD_OUT_GROUP"));
        }
        other => panic!("expected BundleFailed, got {other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("message #151") && text.contains("OFPBAC_BAD_OUT_GROUP"),
        "{text}"
    );

    assert_eq!(ofctl_flows(&ovs), before_text);
    let after = c.block_on(client.dump_flows(&DumpFilter::all())).unwrap();
    assert_same_flows(after, before);

    // The connection is still good, and the same bundle without the bad flow applies.
    new.remove(150);
    c.block_on(client.bundle(&replace(cookie, &new))).unwrap();
    let after = c
        .block_on(client.dump_flows(&DumpFilter::cookie(cookie, u64::MAX)))
        .unwrap();
    assert_same_flows(after, new);
}

#[test]
fn ten_thousand_flows_are_pipelined() {
    let ovs = ovs_with_br0();
    let t = target(&ovs);
    let flows = corpus::pod_flows(2000);
    assert_eq!(flows.len(), 10_000);
    let (took, dumped, bundled) = rt().block_on(async {
        let c = OfClient::connect(&t).await.unwrap();
        let start = Instant::now();
        c.add_flows(&flows).await.unwrap();
        let took = start.elapsed();
        let dumped = c.dump_flows(&DumpFilter::all()).await.unwrap();
        // The same through one bundle, after deleting everything.
        c.delete_by_cookie(0x1000_0000_0000_0000, 0xf000_0000_0000_0000)
            .await
            .unwrap();
        assert!(c.dump_flows(&DumpFilter::all()).await.unwrap().is_empty());
        let start = Instant::now();
        let msgs: Vec<BundleMsg> = flows.iter().cloned().map(BundleMsg::add).collect();
        c.bundle(&msgs).await.unwrap();
        let bundled = start.elapsed();
        assert_eq!(
            c.dump_flows(&DumpFilter::all()).await.unwrap().len(),
            10_000
        );
        (took, dumped, bundled)
    });
    eprintln!("10,000 flows: flow_mods + barrier {took:?}, one bundle {bundled:?}");
    assert_same_flows(dumped, flows);
    assert!(
        took < Duration::from_secs(20),
        "10,000 flow_mods took {took:?}"
    );
    assert!(
        bundled < Duration::from_secs(20),
        "a 10,000-flow bundle took {bundled:?}"
    );
}

/// A Unix socket path in a fresh temporary directory.
fn fake_socket() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(unique_name("ofc-fake"));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("switch.sock")
}

/// Reads one whole OpenFlow message from a raw stream.
async fn read_msg<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Vec<u8> {
    let mut head = [0u8; 8];
    s.read_exact(&mut head).await.unwrap();
    let len = u16::from_be_bytes([head[2], head[3]]) as usize;
    let mut msg = head.to_vec();
    msg.resize(len, 0);
    s.read_exact(&mut msg[8..]).await.unwrap();
    msg
}

#[test]
fn a_switch_that_closes_mid_request_fails_the_call_promptly() {
    let path = fake_socket();
    rt().block_on(async {
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let switch = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            // Hello (1.3 only), then the features reply to the request.
            s.write_all(&[4, 0, 0, 16, 0, 0, 0, 1, 0, 1, 0, 8, 0, 0, 0, 0x10])
                .await
                .unwrap();
            assert_eq!(read_msg(&mut s).await[1], 0, "hello");
            let req = read_msg(&mut s).await;
            assert_eq!(req[1], 5, "features request");
            let mut reply = vec![4, 6, 0, 32];
            reply.extend_from_slice(&req[4..8]);
            reply.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0x42]);
            reply.extend_from_slice(&[0; 16]);
            s.write_all(&reply).await.unwrap();
            // Take the barrier request, then hang up without answering.
            assert_eq!(read_msg(&mut s).await[1], 20, "barrier request");
            drop(s);
        });
        let c = OfClient::connect(&format!("unix:{}", path.display()))
            .await
            .unwrap();
        assert_eq!(c.datapath_id(), 0x42);
        let start = Instant::now();
        let err = c.barrier().await.unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "took {:?}",
            start.elapsed()
        );
        assert!(matches!(err, OfError::Closed { .. }), "{err}");
        assert!(err.to_string().contains("closed the connection"), "{err}");
        // Later calls fail at once too.
        assert!(matches!(
            c.dump_flows(&DumpFilter::all()).await,
            Err(OfError::Closed { .. })
        ));
        switch.await.unwrap();
    });
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn a_switch_that_never_says_hello_times_out_within_the_bound() {
    let path = fake_socket();
    rt().block_on(async {
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let switch = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            // Read our hello, say nothing, and hold the connection open until the client quits.
            let mut buf = [0u8; 64];
            while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
        });
        let config = OfConfig {
            connect_timeout: Duration::from_millis(500),
            ..OfConfig::default()
        };
        let start = Instant::now();
        let err = OfClient::connect_with(&format!("unix:{}", path.display()), config)
            .await
            .unwrap_err();
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(500) && took < Duration::from_secs(2),
            "{took:?}"
        );
        assert!(matches!(err, OfError::ConnectTimeout { .. }), "{err}");
        assert!(
            err.to_string().contains("waiting for the switch's hello"),
            "{err}"
        );
        tokio::time::timeout(Duration::from_secs(2), switch)
            .await
            .unwrap()
            .unwrap();
    });
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn the_flow_monitor_reports_what_others_change_in_full_and_our_own_abbreviated() {
    use ovs::openflow::{FlowEvent, FlowUpdate};
    let ovs = ovs_with_br0();
    rt().block_on(async {
        let c = OfClient::connect(&target(&ovs)).await.unwrap();
        let mut rx = c.monitor_flows().await.unwrap();
        // Our own change: only abbreviated (its xid).
        c.add_flows(&[flow("table=3,priority=7,cookie=0x11,ip,actions=drop")])
            .await
            .unwrap();
        c.barrier().await.unwrap();
        // Somebody else's: reported with table, priority and cookie.
        ovs.ofctl(&[
            "add-flow",
            "br0",
            "table=5,priority=9,cookie=0x22,arp,actions=drop",
        ]);
        ovs.ofctl(&["mod-flows", "br0", "table=3,ip,actions=output:1"]);
        ovs.ofctl(&["del-flows", "br0", "table=3"]);
        let mut got: Vec<FlowUpdate> = Vec::new();
        while got.len() < 4 {
            match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
                Ok(Some(batch)) => got.extend(batch),
                other => panic!("no update within 5 s ({other:?}); so far {got:?}"),
            }
        }
        type Seen = (FlowEvent, Option<u8>, Option<u16>, Option<u64>);
        let seen: Vec<Seen> = got
            .iter()
            .map(|u| (u.event, u.table, u.priority, u.cookie))
            .collect();
        assert_eq!(
            seen,
            vec![
                (FlowEvent::Abbreviated, None, None, None),
                (FlowEvent::Added, Some(5), Some(9), Some(0x22)),
                (FlowEvent::Modified, Some(3), Some(7), Some(0x11)),
                (FlowEvent::Deleted, Some(3), Some(7), Some(0x11)),
            ]
        );
        // Nothing else is pending.
        assert!(
            tokio::time::timeout(Duration::from_millis(300), rx.recv())
                .await
                .is_err(),
            "an unexpected update"
        );
        // The receiver ends with the connection.
        c.close();
        assert!(tokio::time::timeout(Duration::from_secs(2), rx.recv())
            .await
            .unwrap()
            .is_none());
    });
}
