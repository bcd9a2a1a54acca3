//! Packets to and from a real Open vSwitch through `OfClient` (netdev datapath, a private
//! instance per test): a packet-out goes through the tables, a row's
//! `controller(userdata=..,meter_id=..)` sends a copy up as `NXT_PACKET_IN2` with the row's
//! table, cookie, the registers the pipeline loaded and the userdata; a packets/s meter on
//! the copy holds a flood to its rate and its counters say how many it dropped; a full queue
//! drops and counts, and the connection stays usable.

use std::time::Duration;

use ovs::flow::{ports, Action, Flow};
use ovs::openflow::{Meter, MeterModCommand, MeterUnit, OfClient};
use sdn_tests::harness::Ovs;

/// An Ethernet + IPv4 + UDP frame from 10.0.0.1:5000 to 10.0.0.2:`dport`.
fn udp_frame(dport: u16) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&[0x0a, 0x58, 10, 0, 0, 2, 0x0a, 0x58, 10, 0, 0, 1, 0x08, 0x00]);
    let payload = b"audit";
    let ip_len = 20 + 8 + payload.len() as u16;
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    let sum = checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&5000u16.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

fn checksum(b: &[u8]) -> u16 {
    let mut s: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

const METER: u32 = 0x10_0001;

#[test]
fn a_metered_controller_copy_arrives_as_packet_in2_with_registers_and_userdata() {
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
        let quiet = OfClient::connect(&target).await.unwrap();
        let mut quiet_pins = quiet.receive_packet_ins(16).await.unwrap();
        // Two connections ask (the agent's audit reader and a live trace may): both get copies.
        let meter = Meter::packets(METER, 10, 10).unwrap();
        c.meter_mod(MeterModCommand::Add, &meter).await.unwrap();
        let dumped = c.dump_meters().await.unwrap();
        assert_eq!(dumped, vec![meter]);
        assert_eq!(dumped[0].unit, MeterUnit::Pktps);
        let text = ovs.ofctl(&["dump-meters", "br0"]);
        assert!(
            text.contains("meter=1048577 pktps burst bands=\ntype=drop rate=10 burst_size=10"),
            "ovs-ofctl dump-meters: {text}"
        );

        let row: Flow = "cookie=0x8000000000000005,table=0,priority=100,udp,tp_dst=9999 \
             actions=load:0x2a->NXM_NX_REG5[],load:0x7->NXM_NX_REG0[],\
             controller(userdata=61.75.64.69.74,meter_id=1048577)"
            .parse()
            .unwrap();
        c.add_flows(&[row]).await.unwrap();

        let mut pins = c.receive_packet_ins(64).await.unwrap();
        let frame = udp_frame(9999);
        c.packet_out(ports::CONTROLLER, &[Action::Output(ports::TABLE)], &frame)
            .await
            .unwrap();
        let pin = tokio::time::timeout(Duration::from_secs(5), pins.recv())
            .await
            .expect("no packet-in within 5 s")
            .expect("the connection closed");
        assert_eq!(pin.table_id, 0);
        assert_eq!(pin.cookie, Some(0x8000_0000_0000_0005));
        assert_eq!(pin.userdata, b"audit");
        assert_eq!(pin.metadata.reg(5), 0x2a);
        assert_eq!(pin.metadata.reg(0), 7);
        assert_eq!(pin.metadata.in_port, Some(ports::CONTROLLER));
        assert_eq!(pin.packet, frame, "the packet as sent");
        let q = tokio::time::timeout(Duration::from_secs(5), quiet_pins.recv())
            .await
            .expect("the other asking connection got nothing")
            .unwrap();
        assert_eq!(q.userdata, b"audit");

        // A row without the copy sends nothing up.
        c.packet_out(
            ports::CONTROLLER,
            &[Action::Output(ports::TABLE)],
            &udp_frame(9998),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(pins.try_recv().is_none(), "a packet-in without a row");

        // A flood of 300 copies within well under a second: the meter lets about its burst
        // through, drops the rest and counts them.
        for _ in 0..300 {
            c.packet_out(ports::CONTROLLER, &[Action::Output(ports::TABLE)], &frame)
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut got = 0;
        while pins.try_recv().is_some() {
            got += 1;
        }
        assert!(
            (1..=60).contains(&got),
            "the meter (10/s, burst 10) let {got} of 300 copies through"
        );
        let stats = c.dump_meter_stats().await.unwrap();
        let s = stats.iter().find(|s| s.id == METER).expect("meter stats");
        assert!(
            s.packets_dropped >= 240,
            "meter counters: {s:?} (got {got} copies)"
        );
        assert_eq!(pins.lost(), (0, 0));
    });
}

#[test]
fn a_full_packet_in_queue_drops_and_counts_without_stalling_the_connection() {
    let ovs = Ovs::start();
    ovs.add_bridge("br0");
    let target = format!("unix:{}", ovs.mgmt_sock("br0").display());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = OfClient::connect(&target).await.unwrap();
        let asking = OfClient::connect(&target).await.unwrap();
        // Asking keeps the bridge's fragment handling (set_config is bridge-wide).
        ovs.ofctl(&["set-frags", "br0", "nx-match"]);
        let mut pins = asking.receive_packet_ins(4).await.unwrap();
        assert_eq!(ovs.ofctl(&["get-frags", "br0"]).trim(), "nx-match");
        let row: Flow = "table=0,priority=100,udp actions=controller(userdata=01)"
            .parse()
            .unwrap();
        c.add_flows(&[row]).await.unwrap();
        c.packet_out(
            ports::CONTROLLER,
            &[Action::Output(ports::TABLE)],
            &udp_frame(1),
        )
        .await
        .unwrap();
        let pin = tokio::time::timeout(Duration::from_secs(5), pins.recv())
            .await
            .expect("no packet-in")
            .unwrap();
        assert_eq!(pin.userdata, [1]);
        // A queue of 4 under 20 copies: the rest are counted, the connection stays usable.
        for _ in 0..20 {
            c.packet_out(
                ports::CONTROLLER,
                &[Action::Output(ports::TABLE)],
                &udp_frame(1),
            )
            .await
            .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (dropped, undecodable) = pins.lost();
        assert_eq!(undecodable, 0);
        assert!(dropped >= 16, "dropped {dropped} of 20 with a queue of 4");
        asking.echo().await.unwrap();
    });
}
