//! The OVSDB QoS helpers (`ovs::ovsdb::qos`) against a real ovsdb-server and ovs-vswitchd: rows
//! read back with `ovs-vsctl`, the tc configuration ovs-vswitchd derives from them read back
//! with `tc`, and nothing left behind by a delete.

use std::collections::BTreeMap;

use ovs::ovsdb::{BridgeSpec, Client, Error, FailMode, PortSpec, QosSpec};
use sdn_tests::harness::Ovs;

fn spec(sandbox: &str, rate: u64) -> QosSpec {
    QosSpec {
        qos_type: "linux-htb".into(),
        other_config: BTreeMap::from([("max-rate".into(), rate.to_string())]),
        queues: BTreeMap::from([(0, BTreeMap::from([("max-rate".into(), rate.to_string())]))]),
        external_ids: BTreeMap::from([("sandbox".into(), sandbox.into())]),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos_and_policing_round_trip() {
    let ovs = Ovs::start();
    let client = Client::connect(&format!("unix:{}", ovs.db_sock().display()))
        .await
        .expect("connect");
    client
        .ensure_bridge(
            "br0",
            &BridgeSpec {
                datapath_type: "netdev".into(),
                fail_mode: Some(FailMode::Secure),
                protocols: vec!["OpenFlow13".into()],
                other_config: BTreeMap::new(),
            },
        )
        .await
        .unwrap();
    ovs.exec_in_netns(&[
        "ip", "link", "add", "qa", "type", "veth", "peer", "name", "qb",
    ])
    .unwrap();
    ovs.exec_in_netns(&["ip", "link", "set", "qa", "up"])
        .unwrap();
    ovs.exec_in_netns(&["ip", "link", "set", "qb", "up"])
        .unwrap();
    client
        .add_port("br0", &PortSpec::new("qa", ""))
        .await
        .unwrap();

    // Policing.
    client
        .set_interface_policing("qa", 20_000, 500)
        .await
        .unwrap();
    let get = |t: &str, r: &str, c: &str| ovs.vsctl(&["get", t, r, c]).trim().to_string();
    assert_eq!(get("interface", "qa", "ingress_policing_rate"), "20000");
    assert_eq!(get("interface", "qa", "ingress_policing_burst"), "500");
    assert!(matches!(
        client.set_interface_policing("nope", 1, 1).await,
        Err(Error::InterfaceNotFound(_))
    ));

    // What a veth supports on the netdev datapath: the linux-* types, not egress-policer (DPDK
    // only), which is why the agent uses linux-htb for pod ports.
    let ctl = ovs.vswitchd_ctl();
    let types = sdn_tests::harness::run(
        "ovs-appctl",
        &["-t", &ctl.display().to_string(), "qos/show-types", "qa"],
    )
    .unwrap();
    eprintln!("qos/show-types qa:\n{types}");
    assert!(types.contains("QoS type: linux-htb"), "{types}");
    assert!(!types.contains("egress-policer"), "{types}");

    // QoS on the port, found by its tag; ovs-vswitchd configured htb on the veth.
    let uuid = client
        .set_port_qos("qa", &spec("s1", 10_000_000))
        .await
        .unwrap();
    assert_eq!(get("port", "qa", "qos"), uuid);
    let found = client.find_qos_by_external_id("sandbox", "s1");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].uuid, uuid);
    assert_eq!(found[0].qos_type, "linux-htb");
    assert_eq!(found[0].ports, vec!["qa".to_string()]);
    assert_eq!(found[0].queues.len(), 1);
    let classes = ovs
        .exec_in_netns(&["tc", "class", "show", "dev", "qa"])
        .unwrap();
    eprintln!("tc class show dev qa:\n{classes}");
    assert!(classes.contains("ceil 10Mbit"), "{classes}");

    // Replacing deletes the old rows in the same transaction.
    let uuid2 = client
        .set_port_qos("qa", &spec("s1", 5_000_000))
        .await
        .unwrap();
    assert_ne!(uuid, uuid2);
    assert_eq!(
        ovs.vsctl(&["--columns=_uuid", "list", "qos"])
            .lines()
            .filter(|l| !l.is_empty())
            .count(),
        1
    );
    assert_eq!(
        ovs.vsctl(&["--columns=_uuid", "list", "queue"])
            .lines()
            .filter(|l| !l.is_empty())
            .count(),
        1
    );

    // A missing port: error, nothing created.
    assert!(matches!(
        client.set_port_qos("nope", &spec("s2", 1_000_000)).await,
        Err(Error::PortNotFound(_))
    ));
    assert!(client.find_qos_by_external_id("sandbox", "s2").is_empty());

    // Delete: port reference cleared, QoS and queue rows gone; again is fine.
    client.delete_qos(&uuid2).await.unwrap();
    assert_eq!(get("port", "qa", "qos"), "[]");
    assert!(ovs.vsctl(&["list", "qos"]).trim().is_empty());
    assert!(ovs.vsctl(&["list", "queue"]).trim().is_empty());
    client.delete_qos(&uuid2).await.unwrap();

    // A QoS whose port is gone can still be found and deleted.
    let uuid3 = client
        .set_port_qos("qa", &spec("s3", 1_000_000))
        .await
        .unwrap();
    client.delete_port("br0", "qa").await.unwrap();
    let orphan = client.find_qos_by_external_id("sandbox", "s3");
    assert_eq!(orphan.len(), 1);
    assert!(orphan[0].ports.is_empty());
    client.delete_qos(&uuid3).await.unwrap();
    assert!(ovs.vsctl(&["list", "qos"]).trim().is_empty());
    assert!(ovs.vsctl(&["list", "queue"]).trim().is_empty());
}
