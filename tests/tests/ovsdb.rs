//! The native OVSDB client against a real ovsdb-server and ovs-vswitchd: everything it writes is
//! read back with `ovs-vsctl`/`ovs-ofctl`, everything `ovs-vsctl` writes must show in its cache,
//! and it must survive ovsdb-server restarts and fail fast and clearly on bad input.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ovs::ovsdb::{
    row, BridgeSpec, Client, ClientOptions, Condition, ConnectionState, Datum, Error, FailMode,
    Mutation, Operation, PortSpec,
};
use sdn_tests::harness::Ovs;

fn target(ovs: &Ovs) -> String {
    format!("unix:{}", ovs.db_sock().display())
}

fn br0_spec() -> BridgeSpec {
    BridgeSpec {
        datapath_type: "netdev".into(),
        fail_mode: Some(FailMode::Secure),
        protocols: vec!["OpenFlow13".into()],
        other_config: BTreeMap::from([("hwaddr".into(), "aa:55:aa:55:00:01".into())]),
    }
}

fn get(ovs: &Ovs, table: &str, record: &str, column: &str) -> String {
    ovs.vsctl(&["get", table, record, column])
        .trim()
        .to_string()
}

fn next_cfg(ovs: &Ovs) -> String {
    get(ovs, "Open_vSwitch", ".", "next_cfg")
}

async fn connect(ovs: &Ovs) -> Client {
    Client::connect(&target(ovs)).await.expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensure_bridge_creates_reads_back_and_is_idempotent() {
    let ovs = Ovs::start();
    let client = connect(&ovs).await;
    let uuid = client.ensure_bridge("br0", &br0_spec()).await.unwrap();

    // Read back with ovs-vsctl, and vswitchd has applied it: the OpenFlow socket exists.
    assert!(ovs.vsctl(&["list-br"]).lines().any(|l| l == "br0"));
    assert_eq!(get(&ovs, "bridge", "br0", "_uuid"), uuid);
    assert_eq!(get(&ovs, "bridge", "br0", "datapath_type"), "netdev");
    assert_eq!(get(&ovs, "bridge", "br0", "fail_mode"), "secure");
    assert_eq!(get(&ovs, "bridge", "br0", "protocols"), "[OpenFlow13]");
    assert_eq!(
        get(&ovs, "bridge", "br0", "other_config"),
        r#"{hwaddr="aa:55:aa:55:00:01"}"#
    );
    assert_eq!(get(&ovs, "interface", "br0", "type"), "internal");
    assert!(ovs.vsctl(&["list-ports", "br0"]).trim().is_empty());
    assert!(
        ovs.mgmt_sock("br0").exists(),
        "br0.mgmt missing after ensure_bridge returned"
    );
    ovs.ofctl(&["dump-flows", "br0"]);

    // Again: same uuid, nothing sent (next_cfg unchanged).
    let cfg = next_cfg(&ovs);
    assert_eq!(
        client.ensure_bridge("br0", &br0_spec()).await.unwrap(),
        uuid
    );
    assert_eq!(
        next_cfg(&ovs),
        cfg,
        "idempotent ensure_bridge committed something"
    );

    // A changed spec updates in place; other_config keys not in the spec survive.
    ovs.vsctl(&["set", "bridge", "br0", "other_config:keep=me"]);
    let spec = BridgeSpec {
        fail_mode: Some(FailMode::Standalone),
        protocols: vec!["OpenFlow13".into(), "OpenFlow14".into()],
        other_config: BTreeMap::from([("hwaddr".into(), "aa:55:aa:55:00:02".into())]),
        ..br0_spec()
    };
    let updated = client.ensure_bridge("br0", &spec).await.unwrap();
    assert_eq!(updated, uuid);
    assert_eq!(get(&ovs, "bridge", "br0", "fail_mode"), "standalone");
    assert_eq!(
        get(&ovs, "bridge", "br0", "protocols"),
        "[OpenFlow13, OpenFlow14]"
    );
    assert_eq!(
        get(&ovs, "bridge", "br0", "other_config"),
        r#"{hwaddr="aa:55:aa:55:00:02", keep=me}"#
    );
    assert_eq!(ovs.vsctl(&["list-br"]).lines().count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_are_created_read_back_found_and_deleted() {
    let ovs = Ovs::start();
    let client = connect(&ovs).await;
    client.ensure_bridge("br0", &br0_spec()).await.unwrap();

    let vxlan = PortSpec {
        options: BTreeMap::from([
            ("remote_ip".into(), "flow".into()),
            ("key".into(), "flow".into()),
        ]),
        ofport_request: Some(1),
        external_ids: BTreeMap::from([("sdn-role".into(), "tunnel".into())]),
        ..PortSpec::new("vxlan0", "vxlan")
    };
    let ofport = client.add_port("br0", &vxlan).await.unwrap();
    assert_eq!(ofport, 1);
    assert_eq!(get(&ovs, "interface", "vxlan0", "ofport"), "1");
    assert_eq!(get(&ovs, "interface", "vxlan0", "type"), "vxlan");
    assert_eq!(
        get(&ovs, "interface", "vxlan0", "options"),
        "{key=flow, remote_ip=flow}"
    );
    assert_eq!(get(&ovs, "interface", "vxlan0", "ofport_request"), "1");
    assert_eq!(
        get(&ovs, "interface", "vxlan0", "external_ids"),
        "{sdn-role=tunnel}"
    );

    let tun = PortSpec {
        external_ids: BTreeMap::from([("sdn-role".into(), "gateway".into())]),
        mtu_request: Some(1450),
        ..PortSpec::new("tun0", "internal")
    };
    let tun_ofport = client.add_port("br0", &tun).await.unwrap();
    assert_eq!(
        get(&ovs, "interface", "tun0", "ofport"),
        tun_ofport.to_string(),
        "the ofport add_port waited for is the real one"
    );
    assert!(tun_ofport > 1);
    assert_eq!(get(&ovs, "interface", "tun0", "mtu_request"), "1450");
    let ports = ovs.vsctl(&["list-ports", "br0"]);
    assert_eq!(ports.lines().collect::<Vec<_>>(), vec!["tun0", "vxlan0"]);

    // Adding the same port again sends nothing and returns the same ofport.
    let cfg = next_cfg(&ovs);
    assert_eq!(client.add_port("br0", &tun).await.unwrap(), tun_ofport);
    assert_eq!(next_cfg(&ovs), cfg);

    // Find by external id, from the cache.
    let found = client.find_interfaces_by_external_id("sdn-role", "gateway");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].name, "tun0");
    assert_eq!(found[0].ofport, Some(i64::from(tun_ofport)));
    assert_eq!(found[0].external_ids["sdn-role"], "gateway");
    assert!(client
        .find_interfaces_by_external_id("sdn-role", "nothing")
        .is_empty());

    // Delete, and delete again.
    client.delete_port("br0", "tun0").await.unwrap();
    assert_eq!(ovs.vsctl(&["list-ports", "br0"]).trim(), "vxlan0");
    assert!(ovs
        .try_vsctl(&["get", "interface", "tun0", "ofport"])
        .is_err());
    client.delete_port("br0", "tun0").await.unwrap();
    assert!(client.with_cache(|c| c.interface("tun0").is_none()));
    assert!(client
        .find_interfaces_by_external_id("sdn-role", "gateway")
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_that_cannot_be_opened_reports_the_interface_error() {
    let ovs = Ovs::start();
    let client = connect(&ovs).await;
    client.ensure_bridge("br0", &br0_spec()).await.unwrap();
    let start = Instant::now();
    let e = client
        .add_port("br0", &PortSpec::new("nosuchdev0", ""))
        .await
        .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(matches!(e, Error::PortFailed { .. }), "{e:?}");
    let msg = e.to_string();
    eprintln!("{msg} (after {:?})", start.elapsed());
    assert!(msg.contains("port nosuchdev0 on bridge br0"), "{msg}");
    let iface_error = get(&ovs, "interface", "nosuchdev0", "error");
    assert!(
        iface_error.contains("could not open network device nosuchdev0 (No such device)"),
        "{iface_error}"
    );
    assert!(
        msg.contains("could not open network device nosuchdev0 (No such device)"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_bridges_and_misplaced_ports_are_named_in_errors() {
    let ovs = Ovs::start();
    let client = connect(&ovs).await;
    let e = client
        .add_port("br9", &PortSpec::new("p1", "internal"))
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "bridge br9 does not exist");
    let e = client.delete_port("br9", "p1").await.unwrap_err();
    assert_eq!(e.to_string(), "bridge br9 does not exist");
    let e = client.set_flow_table_name("br9", 3, "x").await.unwrap_err();
    assert_eq!(e.to_string(), "bridge br9 does not exist");

    client.ensure_bridge("br0", &br0_spec()).await.unwrap();
    client.ensure_bridge("br1", &br0_spec()).await.unwrap();
    client
        .add_port("br1", &PortSpec::new("p1", "internal"))
        .await
        .unwrap();
    let e = client
        .add_port("br0", &PortSpec::new("p1", "internal"))
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "port p1 is on bridge br1, not on bridge br0");
    let e = client.delete_port("br0", "p1").await.unwrap_err();
    assert_eq!(e.to_string(), "port p1 is on bridge br1, not on bridge br0");
    assert_eq!(ovs.vsctl(&["list-ports", "br1"]).trim(), "p1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_table_names_show_in_ovs_ofctl() {
    let ovs = Ovs::start();
    let client = connect(&ovs).await;
    client.ensure_bridge("br0", &br0_spec()).await.unwrap();
    client
        .set_flow_table_name("br0", 10, "classifier")
        .await
        .unwrap();
    let ft = get(&ovs, "bridge", "br0", "flow_tables");
    assert!(ft.starts_with("{10="), "{ft}");
    let cfg = next_cfg(&ovs);
    client
        .set_flow_table_name("br0", 10, "classifier")
        .await
        .unwrap();
    assert_eq!(
        next_cfg(&ovs),
        cfg,
        "idempotent set_flow_table_name committed"
    );

    ovs.ofctl(&["add-flow", "br0", "table=10,priority=100,actions=drop"]);
    let flows = ovs.ofctl(&["--names", "dump-flows", "br0"]);
    assert!(flows.contains("table=classifier"), "{flows}");

    // Renaming updates the same row.
    client
        .set_flow_table_name("br0", 10, "renamed")
        .await
        .unwrap();
    assert!(client.with_cache(|c| c
        .table("Flow_Table")
        .any(|r| r.string("name") == Some("renamed"))));
    assert_eq!(get(&ovs, "bridge", "br0", "flow_tables"), ft);
    let flows = ovs.ofctl(&["--names", "dump-flows", "br0"]);
    assert!(flows.contains("table=renamed"), "{flows}");

    // Many at once: one renamed, two new, in one call; repeating it sends nothing.
    let names = [(10, "classifier"), (20, "vnid"), (30, "output")];
    client.set_flow_table_names("br0", &names).await.unwrap();
    let cfg = next_cfg(&ovs);
    client.set_flow_table_names("br0", &names).await.unwrap();
    assert_eq!(next_cfg(&ovs), cfg);
    let ft = get(&ovs, "bridge", "br0", "flow_tables");
    assert_eq!(ft.matches('=').count(), 3, "{ft}");
    ovs.ofctl(&["add-flow", "br0", "table=30,priority=1,actions=drop"]);
    let flows = ovs.ofctl(&["--names", "dump-flows", "br0"]);
    assert!(flows.contains("table=classifier"), "{flows}");
    assert!(flows.contains("table=output"), "{flows}");
    let vnid = get(&ovs, "flow_table", &ft_uuid(&ft, 20), "name");
    assert_eq!(vnid, "vnid");
}

/// The uuid for `key` in an `ovs-vsctl get bridge X flow_tables` map.
fn ft_uuid(map: &str, key: u8) -> String {
    map.trim_matches(|c| c == '{' || c == '}')
        .split(", ")
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no table {key} in {map}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_transactions_carry_the_server_error() {
    let ovs = Ovs::start();
    let client = connect(&ovs).await;
    client.ensure_bridge("br0", &br0_spec()).await.unwrap();

    // Unknown table: the operation is named, with the server's error and details.
    let ops = [
        Operation::Comment("test".into()),
        Operation::insert("Nope", row([("name", "x")])),
    ];
    let e = client.transact("Open_vSwitch", &ops).await.unwrap_err();
    match &e {
        Error::Transaction {
            index, op, error, ..
        } => {
            assert_eq!(*index, Some(1));
            assert_eq!(op, "insert into Nope");
            assert_eq!(error, "syntax error");
        }
        other => panic!("{other:?}"),
    }
    let msg = e.to_string();
    eprintln!("{msg}");
    assert!(
        msg.contains("operation 1 (insert into Nope): syntax error"),
        "{msg}"
    );
    assert!(msg.contains("No table named Nope"), "{msg}");

    // A duplicate bridge name violates the Bridge name index: the commit fails.
    let root = client.with_cache(|c| c.open_vswitch().unwrap().uuid().to_string());
    let ops = [
        Operation::insert_named("Bridge", "dup", row([("name", "br0")])),
        Operation::mutate(
            "Open_vSwitch",
            vec![Condition::uuid(&root)],
            vec![Mutation::insert("bridges", Datum::named_uuid("dup"))],
        ),
    ];
    let e = client.transact("Open_vSwitch", &ops).await.unwrap_err();
    assert!(matches!(e, Error::Transaction { index: None, .. }), "{e:?}");
    let msg = e.to_string();
    eprintln!("{msg}");
    assert!(
        msg.contains("failed at commit: constraint violation"),
        "{msg}"
    );
    assert!(msg.contains("br0"), "{msg}");
    assert_eq!(ovs.vsctl(&["list-br"]).trim(), "br0");

    // A JSON-RPC level error: unknown database.
    let e = client
        .transact("Nodb", &[Operation::Comment("x".into())])
        .await
        .unwrap_err();
    eprintln!("{e}");
    assert!(e.to_string().contains("unknown database"), "{e}");

    // Select works and returns typed rows.
    let rows = client
        .transact(
            "Open_vSwitch",
            &[Operation::select(
                "Bridge",
                vec![Condition::eq("name", "br0")],
                Some(&["name", "fail_mode"]),
            )],
        )
        .await
        .unwrap();
    assert_eq!(rows[0].rows.len(), 1);
    assert_eq!(rows[0].rows[0]["fail_mode"], Datum::from("secure"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_sees_changes_made_by_ovs_vsctl() {
    let ovs = Ovs::start();
    let client = connect(&ovs).await;
    client.ensure_bridge("br0", &br0_spec()).await.unwrap();
    ovs.vsctl(&["set", "bridge", "br0", "other_config:x=y"]);
    let v = client
        .wait_for("other_config:x on br0", Duration::from_secs(5), |c| {
            c.bridge("br0")?
                .string_map("other_config")
                .get("x")
                .cloned()
        })
        .await
        .unwrap();
    assert_eq!(v, "y");
    ovs.vsctl(&[
        "add-port",
        "br0",
        "vp1",
        "--",
        "set",
        "interface",
        "vp1",
        "type=internal",
    ]);
    let ofport = client
        .wait_for("ofport of vp1", Duration::from_secs(10), |c| {
            c.interface("vp1")?.integer("ofport").filter(|o| *o > 0)
        })
        .await
        .unwrap();
    assert_eq!(get(&ovs, "interface", "vp1", "ofport"), ofport.to_string());

    // Every kind of column change, then the whole cache must equal a fresh select.
    let changes: &[&[&str]] = &[
        &["set", "bridge", "br0", "fail_mode=standalone"],
        &["set", "bridge", "br0", "protocols=OpenFlow13,OpenFlow15"],
        &["set", "bridge", "br0", "protocols=OpenFlow14"],
        &["remove", "bridge", "br0", "other_config", "x"],
        &[
            "set",
            "bridge",
            "br0",
            "other_config:a=1",
            "other_config:b=2",
        ],
        &["set", "bridge", "br0", "other_config:a=3"],
        &["clear", "bridge", "br0", "fail_mode"],
        &[
            "set",
            "interface",
            "vp1",
            "ofport_request=7",
            "external_ids:k=v",
        ],
        &["set", "interface", "vp1", "ofport_request=8"],
        &["clear", "interface", "vp1", "ofport_request"],
        &[
            "add-port",
            "br0",
            "vp2",
            "--",
            "set",
            "interface",
            "vp2",
            "type=internal",
        ],
        &["set", "port", "vp2", "tag=5"],
        &["set", "port", "vp2", "tag=6"],
        &["del-port", "br0", "vp1"],
    ];
    for change in changes {
        ovs.vsctl(change);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match cache_vs_server(&client).await {
            Ok(()) => break,
            Err(diff) if Instant::now() > deadline => panic!("cache differs from server: {diff}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    assert!(client.with_cache(|c| c.bridge("br0").unwrap().string("fail_mode").is_none()));
    assert_eq!(
        client.with_cache(|c| c.port("vp2").unwrap().integer("tag")),
        Some(6)
    );

    ovs.vsctl(&["del-br", "br0"]);
    client
        .wait_for("br0 gone", Duration::from_secs(5), |c| {
            c.bridge("br0").is_none().then_some(())
        })
        .await
        .unwrap();
    assert!(client.with_cache(|c| c.interface("vp1").is_none()));
    // A wait that cannot succeed is bounded.
    let e = client
        .wait_for("never", Duration::from_millis(200), |_| None::<()>)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "timed out after 200ms waiting for never");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_after_ovsdb_server_restart_and_rebuilds_the_cache() {
    let ovs = Ovs::start();
    let options = ClientOptions {
        request_timeout: Duration::from_secs(1),
        backoff_initial: Duration::from_millis(50),
        backoff_max: Duration::from_millis(400),
        ..ClientOptions::default()
    };
    let client = Client::connect_with(&target(&ovs), options).await.unwrap();
    client.ensure_bridge("br0", &br0_spec()).await.unwrap();
    assert_eq!(client.state(), ConnectionState::Connected);
    let loads = client.with_cache(|c| c.loads());

    ovs.stop_ovsdb();
    let mut state = client.watch_state();
    tokio::time::timeout(
        Duration::from_secs(5),
        state.wait_for(|s| matches!(s, ConnectionState::Reconnecting { .. })),
    )
    .await
    .expect("state becomes reconnecting")
    .unwrap();
    // A call during the outage fails clearly within the request timeout.
    let start = Instant::now();
    let e = client
        .transact("Open_vSwitch", &[Operation::Comment("x".into())])
        .await
        .unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    eprintln!("{e}");
    assert!(matches!(e, Error::NotConnected { .. }), "{e:?}");
    assert!(e.to_string().starts_with("not connected to unix:"), "{e}");
    // The stale cache stays readable.
    assert!(client.with_cache(|c| c.bridge("br0").is_some()));

    ovs.start_ovsdb();
    tokio::time::timeout(
        Duration::from_secs(10),
        state.wait_for(|s| *s == ConnectionState::Connected),
    )
    .await
    .expect("reconnected within 10 s")
    .unwrap();
    assert_eq!(client.with_cache(|c| c.loads()), loads + 1);
    assert!(client.with_cache(|c| c.bridge("br0").is_some()));

    // Transactions and monitoring work on the new connection.
    client
        .add_port("br0", &PortSpec::new("p1", "internal"))
        .await
        .unwrap();
    assert_eq!(ovs.vsctl(&["list-ports", "br0"]).trim(), "p1");
    ovs.vsctl(&["set", "bridge", "br0", "other_config:after=restart"]);
    client
        .wait_for("other_config:after", Duration::from_secs(5), |c| {
            c.bridge("br0")?
                .string_map("other_config")
                .get("after")
                .cloned()
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transact_over_tcp() {
    let ovs = Ovs::start();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let ctl = ovs.ovsdb_ctl();
    sdn_tests::harness::run(
        "ovs-appctl",
        &[
            "-t",
            &ctl.to_string_lossy(),
            "ovsdb-server/add-remote",
            &format!("ptcp:{port}:127.0.0.1"),
        ],
    )
    .unwrap();
    let target = format!("tcp:127.0.0.1:{port}");
    // ovsdb-server opens the remote on its next main-loop pass: retry for a bounded time.
    let deadline = Instant::now() + Duration::from_secs(5);
    let client = loop {
        match Client::connect(&target).await {
            Ok(c) => break c,
            Err(e) if Instant::now() < deadline => {
                eprintln!("retrying: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(client.target().to_string(), target);
    client.ensure_bridge("br0", &br0_spec()).await.unwrap();
    assert_eq!(get(&ovs, "bridge", "br0", "datapath_type"), "netdev");
    let r = client
        .transact(
            "Open_vSwitch",
            &[Operation::select("Bridge", vec![], Some(&["name"]))],
        )
        .await
        .unwrap();
    assert_eq!(r[0].rows, vec![row([("name", "br0")])]);
}

#[tokio::test]
async fn connecting_to_a_missing_socket_fails_fast() {
    let start = Instant::now();
    let e = Client::connect("unix:/nonexistent-dir/db.sock")
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot connect to unix:/nonexistent-dir/db.sock: No such file or directory"
    );
    assert!(start.elapsed() < Duration::from_secs(1));
    let e = Client::connect("db.sock").await.unwrap_err();
    assert!(e.to_string().starts_with("invalid ovsdb target"), "{e}");
}

#[tokio::test]
async fn a_server_that_hangs_up_mid_request_fails_promptly() {
    let dir = std::env::temp_dir().join(sdn_tests::harness::unique_name("ovsdb-fake"));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("db.sock");
    let listener = tokio::net::UnixListener::bind(&sock).unwrap();
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf).await;
        // Close without replying.
    });
    let start = Instant::now();
    let e = Client::connect(&format!("unix:{}", sock.display()))
        .await
        .unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    eprintln!("{e}");
    assert!(matches!(e, Error::Closed { .. }), "{e:?}");
    assert!(e.to_string().contains("closed: end of stream"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_converge_through_the_wait_guards() {
    let ovs = Ovs::start();
    let a = connect(&ovs).await;
    let b = connect(&ovs).await;
    let spec = br0_spec();
    for round in 0..5 {
        let bridge = format!("brc{round}");
        let (ua, ub) = tokio::join!(
            a.ensure_bridge(&bridge, &spec),
            b.ensure_bridge(&bridge, &spec)
        );
        assert_eq!(ua.unwrap(), ub.unwrap(), "both see the one bridge {bridge}");
        let port = PortSpec::new(format!("pc{round}"), "internal");
        let (pa, pb) = tokio::join!(a.add_port(&bridge, &port), b.add_port(&bridge, &port));
        assert_eq!(pa.unwrap(), pb.unwrap());
        assert_eq!(ovs.vsctl(&["list-ports", &bridge]).trim(), port.name);
        let (da, db) = tokio::join!(
            a.delete_port(&bridge, &port.name),
            b.delete_port(&bridge, &port.name)
        );
        da.unwrap();
        db.unwrap();
        assert!(ovs.vsctl(&["list-ports", &bridge]).trim().is_empty());
    }
    assert_eq!(ovs.vsctl(&["list-br"]).lines().count(), 5);
}

/// A datum as comparable text: set elements and map pairs sorted.
fn norm(d: &Datum) -> String {
    let mut parts: Vec<String> = match d {
        Datum::Set(items) => items.iter().map(ToString::to_string).collect(),
        Datum::Map(pairs) => pairs.iter().map(|(k, v)| format!("{k}={v}")).collect(),
    };
    parts.sort();
    parts.join(",")
}

/// Compares every cached row and column of the monitored tables with a fresh `select`.
async fn cache_vs_server(client: &Client) -> Result<(), String> {
    for table in ovs::ovsdb::cache::MONITORED {
        let rows = client
            .transact("Open_vSwitch", &[Operation::select(*table, vec![], None)])
            .await
            .map_err(|e| e.to_string())?
            .remove(0)
            .rows;
        let server: BTreeMap<String, BTreeMap<String, String>> = rows
            .iter()
            .map(|r| {
                let uuid = r["_uuid"].as_atom().unwrap().as_uuid().unwrap().to_string();
                // The cache leaves out what ovs-vswitchd keeps rewriting and nothing reads.
                let unmonitored = ovs::ovsdb::cache::UNMONITORED
                    .iter()
                    .find(|(t, _)| t == table)
                    .map_or(&[][..], |(_, c)| c);
                let cols = r
                    .iter()
                    .filter(|(k, _)| {
                        !matches!(k.as_str(), "_uuid" | "_version")
                            && !unmonitored.contains(&k.as_str())
                    })
                    .map(|(k, v)| (k.clone(), norm(v)))
                    .collect();
                (uuid, cols)
            })
            .collect();
        let cached: BTreeMap<String, BTreeMap<String, String>> = client.with_cache(|c| {
            c.table(table)
                .map(|r| {
                    let cols = r
                        .columns()
                        .iter()
                        .map(|(k, v)| (k.clone(), norm(v)))
                        .collect();
                    (r.uuid().to_string(), cols)
                })
                .collect()
        });
        if server != cached {
            return Err(format!("{table}: server {server:?}\ncache {cached:?}"));
        }
    }
    Ok(())
}
