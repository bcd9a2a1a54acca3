//! Tests of the OpenFlow client against fake switches: handshake, echo, barriers, batches, bundles,
//! timeouts, closing, targets.

use super::*;
use crate::openflow::bundle;
use crate::openflow::bundle::BundleCtrl;
use crate::openflow::bundle::BundleCtrlType;
use crate::openflow::bundle::OFPBF_ATOMIC;
use crate::openflow::bundle::OFPBF_ORDERED;
use crate::openflow::wire::{be32, errors};
use crate::openflow::CodecError;
use tokio::io::{DuplexStream, ReadHalf, WriteHalf};

/// A scripted switch on the other end of an in-memory pipe.
struct FakeSwitch {
    rd: ReadHalf<DuplexStream>,
    wr: WriteHalf<DuplexStream>,
    frames: FrameBuffer,
}

impl FakeSwitch {
    fn new(stream: DuplexStream) -> Self {
        let (rd, wr) = tokio::io::split(stream);
        FakeSwitch {
            rd,
            wr,
            frames: FrameBuffer::new(),
        }
    }

    async fn recv(&mut self) -> RawMsg {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(m) = self.frames.next_msg().unwrap() {
                return m;
            }
            let n = tokio::time::timeout(Duration::from_secs(5), self.rd.read(&mut chunk))
                .await
                .expect("fake switch: nothing received within 5 s")
                .unwrap();
            assert!(n > 0, "fake switch: client closed the connection");
            self.frames.extend(&chunk[..n]);
        }
    }

    async fn recv_type(&mut self, t: u8) -> RawMsg {
        let m = self.recv().await;
        assert_eq!(
            m.msg_type,
            t,
            "fake switch expected {} got {m:?}",
            msg_type::name(t)
        );
        m
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.wr.write_all(bytes).await.unwrap();
    }

    async fn send_msg(&mut self, t: u8, xid: u32, body: &[u8]) {
        self.send(&wire::encode_msg(t, xid, body).unwrap()).await;
    }

    async fn send_error(&mut self, xid: u32, err_type: u16, code: u16, exp: Option<u32>) {
        let e = SwitchError {
            err_type,
            code,
            experimenter: exp,
            data: vec![],
        };
        self.send_msg(msg_type::ERROR, xid, &e.encode_body()).await;
    }

    /// Hello offering 1.0 to 1.5 as Open vSwitch 3.1 does, then the features reply.
    async fn handshake(&mut self) {
        self.send(&[6, 0, 0, 16, 0, 0, 0, 1, 0, 1, 0, 8, 0, 0, 0, 0x7e])
            .await;
        let hello = self.recv_type(msg_type::HELLO).await;
        assert_eq!(hello_versions(&hello).unwrap(), vec![4]);
        let req = self.recv_type(msg_type::FEATURES_REQUEST).await;
        let mut body = vec![0u8; 24];
        body[..8].copy_from_slice(&0xabu64.to_be_bytes());
        body[12] = 254;
        self.send_msg(msg_type::FEATURES_REPLY, req.xid, &body)
            .await;
    }
}

fn quick() -> OfConfig {
    OfConfig {
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(500),
        echo_interval: None,
        echo_timeout: Duration::from_millis(200),
    }
}

async fn connected(config: OfConfig) -> (OfClient, FakeSwitch) {
    let (a, b) = tokio::io::duplex(1 << 20);
    let mut sw = FakeSwitch::new(b);
    let (client, ()) = tokio::join!(OfClient::from_stream(a, "fake", config), sw.handshake());
    (client.unwrap(), sw)
}

fn dummy(i: usize, xid: u32) -> Result<Vec<u8>, CodecError> {
    Ok(wire::encode_msg(msg_type::FLOW_MOD, xid, &[i as u8; 8]).unwrap())
}

#[tokio::test]
async fn handshake_learns_the_datapath_id() {
    let (client, _sw) = connected(quick()).await;
    assert_eq!(client.datapath_id(), 0xab);
    assert_eq!(client.n_tables(), 254);
    assert_eq!(client.peer(), "fake (dpid 00000000000000ab)");
    assert_eq!(client.closed_reason(), None);
}

#[tokio::test]
async fn switch_echo_requests_are_answered_and_barriers_matched() {
    let (client, mut sw) = connected(quick()).await;
    sw.send_msg(msg_type::ECHO_REQUEST, 77, b"hi").await;
    let reply = sw.recv_type(msg_type::ECHO_REPLY).await;
    assert_eq!((reply.xid, reply.body.as_slice()), (77, &b"hi"[..]));
    let (res, ()) = tokio::join!(client.barrier(), async {
        let b = sw.recv_type(msg_type::BARRIER_REQUEST).await;
        // Something unrelated first, then the reply.
        sw.send_msg(msg_type::PORT_STATUS, 0, &[0; 8]).await;
        sw.send_msg(msg_type::BARRIER_REPLY, b.xid, &[]).await;
    });
    res.unwrap();
}

#[tokio::test]
async fn batch_errors_name_the_first_failed_message() {
    let (client, mut sw) = connected(quick()).await;
    let sh = client.shared();
    let (res, ()) = tokio::join!(
        sh.batch("test batch", 5, dummy, |i| format!("msg {i}")),
        async {
            let mut xids = Vec::new();
            for _ in 0..5 {
                xids.push(sw.recv_type(msg_type::FLOW_MOD).await.xid);
            }
            let b = sw.recv_type(msg_type::BARRIER_REQUEST).await;
            sw.send_error(
                xids[3],
                errors::OFPET_BAD_MATCH,
                errors::OFPBMC_BAD_PREREQ,
                None,
            )
            .await;
            sw.send_error(
                xids[1],
                errors::OFPET_BAD_ACTION,
                errors::OFPBAC_BAD_OUT_GROUP,
                None,
            )
            .await;
            sw.send_msg(msg_type::BARRIER_REPLY, b.xid, &[]).await;
        }
    );
    let err = res.unwrap_err();
    match &err {
        OfError::ModRejected {
            index,
            total,
            what,
            error,
            more_failed,
            ..
        } => {
            assert_eq!((*index, *total, *more_failed), (1, 5, 1));
            assert_eq!(what, "msg 1");
            assert_eq!(error.code_name(), Some("OFPBAC_BAD_OUT_GROUP"));
        }
        other => panic!("unexpected {other}"),
    }
    let text = err.to_string();
    assert!(text.contains("message #1 of 5"), "{text}");
    assert!(text.contains("`msg 1`"), "{text}");
    assert!(text.contains("OFPBAC_BAD_OUT_GROUP"), "{text}");
    assert!(text.contains("1 more"), "{text}");
    // Still usable, and the batch's xids are no longer registered.
    assert!(sh.lock().pending.is_empty());
    let (res, ()) = tokio::join!(client.barrier(), async {
        let b = sw.recv_type(msg_type::BARRIER_REQUEST).await;
        sw.send_msg(msg_type::BARRIER_REPLY, b.xid, &[]).await;
    });
    res.unwrap();
}

#[tokio::test]
async fn batches_are_pipelined_in_one_write() {
    let (client, mut sw) = connected(quick()).await;
    let n = 2000;
    let (res, ()) = tokio::join!(
        client.shared().batch("big", n, dummy, |i| i.to_string()),
        async {
            let first = sw.recv_type(msg_type::FLOW_MOD).await.xid;
            // Everything arrives without any reply from us: nothing waits per message.
            for i in 1..n {
                assert_eq!(sw.recv_type(msg_type::FLOW_MOD).await.xid, first + i as u32);
            }
            let b = sw.recv_type(msg_type::BARRIER_REQUEST).await;
            sw.send_msg(msg_type::BARRIER_REPLY, b.xid, &[]).await;
        }
    );
    res.unwrap();
}

#[tokio::test]
async fn closing_mid_request_fails_promptly() {
    let (client, mut sw) = connected(quick()).await;
    let start = Instant::now();
    let (res, ()) = tokio::join!(client.barrier(), async {
        sw.recv_type(msg_type::BARRIER_REQUEST).await;
        drop(sw);
    });
    let err = res.unwrap_err();
    assert!(matches!(err, OfError::Closed { .. }), "{err}");
    assert!(
        err.to_string().contains("the switch closed the connection"),
        "{err}"
    );
    assert!(start.elapsed() < Duration::from_millis(400));
    // Later calls fail at once.
    let err = client.echo().await.unwrap_err();
    assert!(matches!(err, OfError::Closed { .. }), "{err}");
}

#[tokio::test]
async fn unanswered_requests_time_out() {
    let (client, mut sw) = connected(quick()).await;
    let start = Instant::now();
    let (res, _) = tokio::join!(client.barrier(), sw.recv_type(msg_type::BARRIER_REQUEST));
    let err = res.unwrap_err();
    assert!(matches!(err, OfError::Timeout { .. }), "{err}");
    assert!(start.elapsed() >= Duration::from_millis(500));
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_silent_switch_fails_the_handshake_in_time() {
    let (a, _b) = tokio::io::duplex(1 << 16);
    let start = Instant::now();
    let err = OfClient::from_stream(a, "silent", quick())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            OfError::ConnectTimeout {
                stage: "waiting for the switch's hello",
                ..
            }
        ),
        "{err}"
    );
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_switch_without_1_3_is_refused_clearly() {
    let (a, b) = tokio::io::duplex(1 << 16);
    let mut sw = FakeSwitch::new(b);
    let (res, ()) = tokio::join!(OfClient::from_stream(a, "old", quick()), async {
        sw.send(&[1, 0, 0, 8, 0, 0, 0, 1]).await;
    });
    let err = res.unwrap_err();
    assert!(matches!(err, OfError::UnsupportedVersion { .. }), "{err}");
    assert!(err.to_string().contains("it offers 1.0"), "{err}");

    let (a, b) = tokio::io::duplex(1 << 16);
    let mut sw = FakeSwitch::new(b);
    let (res, ()) = tokio::join!(OfClient::from_stream(a, "picky", quick()), async {
        let mut body = vec![0, 0, 0, 0];
        body.extend_from_slice(b"no common version");
        sw.send_msg(msg_type::ERROR, 0, &body).await;
    });
    let err = res.unwrap_err();
    assert!(matches!(err, OfError::HandshakeRejected { .. }), "{err}");
    assert!(err.to_string().contains("OFPHFC_INCOMPATIBLE"), "{err}");
    assert!(err.to_string().contains("no common version"), "{err}");
}

#[tokio::test]
async fn a_missed_echo_closes_the_connection() {
    let config = OfConfig {
        echo_interval: Some(Duration::from_millis(100)),
        ..quick()
    };
    let (client, mut sw) = connected(config).await;
    let echo = sw.recv_type(msg_type::ECHO_REQUEST).await;
    assert_eq!(echo.version, OFP13_VERSION);
    // No reply: within interval + timeout (+ slack) the connection is declared dead.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let reason = client.closed_reason().expect("connection should be closed");
    assert!(reason.contains("no echo reply"), "{reason}");
    let err = client.barrier().await.unwrap_err();
    assert!(err.to_string().contains("no echo reply"), "{err}");
}

#[tokio::test]
async fn answered_echoes_keep_the_connection() {
    let config = OfConfig {
        echo_interval: Some(Duration::from_millis(50)),
        ..quick()
    };
    let (client, mut sw) = connected(config).await;
    for _ in 0..4 {
        let echo = sw.recv_type(msg_type::ECHO_REQUEST).await;
        sw.send_msg(msg_type::ECHO_REPLY, echo.xid, &echo.body)
            .await;
    }
    assert_eq!(client.closed_reason(), None);
}

async fn expect_bundle_ctrl(sw: &mut FakeSwitch, want: BundleCtrlType) -> (u32, BundleCtrl) {
    let m = sw.recv_type(msg_type::EXPERIMENTER).await;
    let c = bundle::decode_bundle_ctrl(&m)
        .unwrap()
        .expect("bundle control");
    assert_eq!(c.ctrl_type, want);
    assert_eq!(c.flags, OFPBF_ATOMIC | OFPBF_ORDERED);
    (m.xid, c)
}

async fn reply_ctrl(sw: &mut FakeSwitch, xid: u32, c: BundleCtrl) {
    let reply = BundleCtrl {
        ctrl_type: c.ctrl_type.reply(),
        ..c
    };
    sw.send(&bundle::encode_bundle_ctrl(&reply, xid)).await;
}

/// Receives open, `n` adds and the barrier; checks the adds; returns (open xid, ctrl, add xids).
async fn recv_bundle(sw: &mut FakeSwitch, n: usize) -> (u32, BundleCtrl, Vec<u32>, u32) {
    let (open_xid, open) = expect_bundle_ctrl(sw, BundleCtrlType::OpenRequest).await;
    let mut adds = Vec::new();
    for i in 0..n {
        let m = sw.recv_type(msg_type::EXPERIMENTER).await;
        assert_eq!(be32(&m.body, 4), bundle::ONFT_BUNDLE_ADD_MESSAGE);
        assert_eq!(be32(&m.body, 8), open.bundle_id);
        let inner = &m.body[16..];
        assert_eq!(inner[1], msg_type::FLOW_MOD);
        assert_eq!(be32(inner, 4), m.xid, "inner xid must equal the add's xid");
        assert_eq!(inner[8], i as u8);
        adds.push(m.xid);
    }
    let b = sw.recv_type(msg_type::BARRIER_REQUEST).await;
    (open_xid, open, adds, b.xid)
}

#[tokio::test]
async fn bundle_commits() {
    let (client, mut sw) = connected(quick()).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (res, ()) = tokio::join!(client.shared().bundle(3, dummy, |i| i.to_string()), async {
            let (open_xid, open, _adds, barrier) = recv_bundle(&mut sw, 3).await;
            ids.push(open.bundle_id);
            reply_ctrl(&mut sw, open_xid, open).await;
            sw.send_msg(msg_type::BARRIER_REPLY, barrier, &[]).await;
            let (xid, c) = expect_bundle_ctrl(&mut sw, BundleCtrlType::CommitRequest).await;
            assert_eq!(c.bundle_id, open.bundle_id);
            reply_ctrl(&mut sw, xid, c).await;
        });
        res.unwrap();
    }
    assert_ne!(ids[0], ids[1], "bundle ids are unique per connection");
}

#[tokio::test]
async fn bundle_commit_failure_names_the_failing_message() {
    let (client, mut sw) = connected(quick()).await;
    let (res, ()) = tokio::join!(
        client.shared().bundle(3, dummy, |i| format!("flow {i}")),
        async {
            let (open_xid, open, adds, barrier) = recv_bundle(&mut sw, 3).await;
            reply_ctrl(&mut sw, open_xid, open).await;
            sw.send_msg(msg_type::BARRIER_REPLY, barrier, &[]).await;
            let (xid, _) = expect_bundle_ctrl(&mut sw, BundleCtrlType::CommitRequest).await;
            // As Open vSwitch does: the message's error, then OFPBFC_MSG_FAILED for the commit.
            sw.send_error(
                adds[2],
                errors::OFPET_BAD_ACTION,
                errors::OFPBAC_BAD_OUT_GROUP,
                None,
            )
            .await;
            sw.send_error(
                xid,
                errors::OFPET_EXPERIMENTER,
                2313,
                Some(wire::ONF_EXPERIMENTER),
            )
            .await;
        }
    );
    let err = res.unwrap_err();
    match &err {
        OfError::BundleFailed {
            index,
            total,
            what,
            stage,
            error,
            ..
        } => {
            assert_eq!((*index, *total, *stage), (2, 3, BundleStage::Commit));
            assert_eq!(what, "flow 2");
            assert_eq!(error.code_name(), Some("OFPBAC_BAD_OUT_GROUP"));
        }
        other => panic!("unexpected {other}"),
    }
    assert!(
        err.to_string().contains("was not applied: message #2 of 3"),
        "{err}"
    );
}

#[tokio::test]
async fn bundle_add_failure_discards_the_bundle() {
    let (client, mut sw) = connected(quick()).await;
    let (res, ()) = tokio::join!(
        client.shared().bundle(2, dummy, |i| format!("flow {i}")),
        async {
            let (open_xid, open, adds, barrier) = recv_bundle(&mut sw, 2).await;
            reply_ctrl(&mut sw, open_xid, open).await;
            sw.send_error(
                adds[0],
                errors::OFPET_BAD_MATCH,
                errors::OFPBMC_BAD_PREREQ,
                None,
            )
            .await;
            sw.send_msg(msg_type::BARRIER_REPLY, barrier, &[]).await;
            // No commit: a discard instead.
            let (xid, c) = expect_bundle_ctrl(&mut sw, BundleCtrlType::DiscardRequest).await;
            assert_eq!(c.bundle_id, open.bundle_id);
            reply_ctrl(&mut sw, xid, c).await;
        }
    );
    match res.unwrap_err() {
        OfError::BundleFailed {
            index,
            stage,
            error,
            ..
        } => {
            assert_eq!((index, stage), (0, BundleStage::Add));
            assert_eq!(error.code_name(), Some("OFPBMC_BAD_PREREQ"));
        }
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn futures_are_send() {
    fn send<T: Send>(_: &T) {}
    fn check(c: &OfClient, fms: &[FlowMod], msgs: &[BundleMsg], g: &Group) {
        send(&c.barrier());
        send(&c.echo());
        send(&c.flow_mods(fms));
        send(&c.add_flows(&[]));
        send(&c.delete_by_cookie(1, 1));
        send(&c.group_mod(GroupModCommand::Add, g));
        send(&c.dump_flows(&DumpFilter::all()));
        send(&c.bundle(msgs));
        send(&OfClient::connect("x"));
    }
    let _ = check;
    fn sync<T: Send + Sync>() {}
    sync::<OfClient>();
}

#[test]
fn targets_parse_like_ovs() {
    assert_eq!(
        Target::parse("unix:/run/openvswitch/br0.mgmt").unwrap(),
        Target::Unix("/run/openvswitch/br0.mgmt".into())
    );
    assert_eq!(
        Target::parse("/tmp/br0.mgmt").unwrap(),
        Target::Unix("/tmp/br0.mgmt".into())
    );
    assert_eq!(
        Target::parse("tcp:127.0.0.1:6653").unwrap(),
        Target::Tcp {
            host: "127.0.0.1".into(),
            port: 6653
        }
    );
    let v6 = Target::parse("tcp:[::1]:6653").unwrap();
    assert_eq!(
        v6,
        Target::Tcp {
            host: "::1".into(),
            port: 6653
        }
    );
    assert_eq!(v6.to_string(), "tcp:[::1]:6653");
    for bad in [
        "ssl:1.2.3.4:6653",
        "tcp:1.2.3.4",
        "tcp:host:99999",
        "unix:",
        "",
        "ptcp:6653",
    ] {
        let err = Target::parse(bad).unwrap_err();
        assert!(matches!(err, OfError::BadTarget { .. }), "{bad}: {err}");
    }
}
