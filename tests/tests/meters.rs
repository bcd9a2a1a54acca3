//! OpenFlow 1.3 meters through `OfClient` against a real Open vSwitch (netdev datapath, a private
//! instance per test): a meter added with `meter_mod` shows in `ovs-ofctl dump-meters` and in our
//! own dump; a flow with `meter:N` dumps back as `actions=meter:N,...` (ours and `ovs-ofctl`'s,
//! and the text parses back to the same flow); modify changes the rate; delete removes the meter
//! and the switch removes the flows using it; adding a flow whose meter does not exist is
//! rejected.

use ovs::flow::{Action, Flow};
use ovs::openflow::{DumpFilter, Meter, MeterModCommand, OfClient};
use sdn_tests::harness::Ovs;

#[test]
fn meter_add_use_dump_delete() {
    let ovs = Ovs::start();
    ovs.add_bridge("br0");
    let target = format!("unix:{}", ovs.mgmt_sock("br0").display());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = OfClient::connect(&target).await.unwrap();
        let m = Meter::new(5, 20_000, 2_000).unwrap();
        c.meter_mod(MeterModCommand::Add, &m).await.unwrap();
        assert_eq!(c.dump_meters().await.unwrap(), vec![m]);
        let text = ovs.ofctl(&["dump-meters", "br0"]);
        assert!(
            text.contains("meter=5 kbps burst bands=\ntype=drop rate=20000 burst_size=2000"),
            "ovs-ofctl dump-meters: {text}"
        );

        let f: Flow = "table=20,priority=100,ip,in_port=3 actions=meter:5,load:0x1->NXM_NX_REG0[],goto_table:21"
            .parse()
            .unwrap();
        assert_eq!(f.actions[0], Action::Meter(5));
        c.add_flows(std::slice::from_ref(&f)).await.unwrap();
        let dumped = c.dump_flows(&DumpFilter::table(20)).await.unwrap();
        assert_eq!(dumped, vec![f.clone()]);
        let text = ovs.ofctl(&["dump-flows", "br0", "table=20"]);
        assert!(
            text.contains("actions=meter:5,load:0x1->NXM_NX_REG0[],goto_table:21"),
            "ovs-ofctl dump-flows: {text}"
        );
        let line = text
            .lines()
            .find(|l| l.contains("meter:5"))
            .expect("flow line");
        let reparsed: Flow = line.trim().parse().unwrap();
        assert_eq!(reparsed, f, "ovs-ofctl's text parses back to the flow");

        let m2 = Meter::new(5, 1_000, 100).unwrap();
        c.meter_mod(MeterModCommand::Modify, &m2).await.unwrap();
        assert_eq!(c.dump_meters().await.unwrap(), vec![m2]);

        // A flow using a meter that does not exist is refused by the switch.
        let bad: Flow = "table=20,priority=90,ip actions=meter:6,goto_table:21"
            .parse()
            .unwrap();
        let err = c.add_flows(&[bad]).await.unwrap_err();
        assert!(err.to_string().contains("meter"), "{err}");

        c.meter_mod(MeterModCommand::Delete, &m2).await.unwrap();
        assert!(c.dump_meters().await.unwrap().is_empty());
        let text = ovs.ofctl(&["dump-meters", "br0"]);
        assert!(!text.contains("meter=5"), "ovs-ofctl dump-meters: {text}");
        // Open vSwitch deletes the flows that use a deleted meter.
        assert!(c.dump_flows(&DumpFilter::table(20)).await.unwrap().is_empty());
        // Deleting a missing meter is not an error.
        c.meter_mod(MeterModCommand::Delete, &m2).await.unwrap();
    });
}

#[test]
fn meter_is_only_a_first_action() {
    let f: Result<Flow, _> = "table=20,priority=100,ip actions=load:0x1->NXM_NX_REG0[],meter:5"
        .parse::<Flow>()
        .and_then(|f| f.validate().map(|_| f));
    assert!(f.is_err(), "meter after another action must be refused");
    assert!(Action::meter(0).is_err());
}
