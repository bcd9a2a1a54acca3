//! Unit tests of the trace: parsing `ofproto/trace` output, outputs and tunnels, protocols.

use super::packet::{ipv6_packet, mac_of};
use super::*;
use std::net::Ipv6Addr;

const CROSS_TENANT: &str = r#"Flow: icmp,in_port=3,vlan_tci=0x0000,dl_src=0a:58:0a:80:00:02,dl_dst=0a:58:0a:80:00:03,nw_src=10.128.0.2,nw_dst=10.128.0.3

bridge("br0")
-------------
 0. ct_state=-trk,ip, priority 1000, cookie 0x1
    ct(table=0)
    drop
     -> A clone of the packet is forked to recirculate. The forked pipeline will be resumed at table 0.

Final flow: unchanged
Datapath actions: ct,recirc(0x1)

===============================================================================
recirc(0x1) - resume conntrack with default ct_state=trk|new (use --ct-next to customize)
===============================================================================

Flow: recirc_id=0x1,ct_state=new|trk,eth,icmp,in_port=3

bridge("br0")
-------------
    thaw
        Resuming from table 0
 0. ip, priority 100, cookie 0x1
    goto_table:20
20. ip,in_port=3,dl_src=0a:58:0a:80:00:02,nw_src=10.128.0.2, priority 100, cookie 0x1466df81e88c5fc2
    load:0x3->NXM_NX_REG3[]
    goto_table:26
26. reg3=0x3, priority 100, cookie 0x1466df81e88c5fc2
    load:0xa->NXM_NX_REG0[]
    goto_table:27
70. ip,nw_dst=10.128.0.3, priority 100, cookie 0x1c12068452c8ee9e
    load:0x24->NXM_NX_REG2[]
    goto_table:75
75. reg2=0x24, priority 100, cookie 0x1c12068452c8ee9e
    load:0xb->NXM_NX_REG1[]
    goto_table:80
80. priority 0, cookie 0x1
    drop

Final flow: recirc_id=0x1,ct_state=new|trk,eth,icmp,reg0=0xa,reg1=0xb,reg2=0x24,reg3=0x3,in_port=3
Megaflow: recirc_id=0x1
Datapath actions: drop
"#;

#[test]
fn a_logged_drops_audit_copy_is_not_a_step() {
    let logged = CROSS_TENANT.replace(
        "80. priority 0, cookie 0x1\n    drop\n",
        "80. ip,reg1=0xb, priority 50, cookie 0x900000000000000b\n    load:0x2->NXM_NX_REG5[]\n    load:0->NXM_NX_REG6[]\n    resubmit(,130)\n130. reg0=0xa/0x3f,reg5=0/0x1, priority 100, cookie 0x1\n    controller(userdata=41.31,meter_id=1048586)\n",
    );
    let p = parse(&logged);
    let last = p.steps.last().unwrap();
    assert_eq!((last.0, last.2), (80, 50), "{:?}", p.steps);
    assert!(last.4.iter().any(|a| a == "resubmit(,130)"));
}

#[test]
fn parses_the_last_pass_with_registers() {
    let p = parse(CROSS_TENANT);
    let tables: Vec<u8> = p.steps.iter().map(|s| s.0).collect();
    assert_eq!(tables, [0, 20, 26, 70, 75, 80]);
    assert_eq!(
        p.steps[1].1,
        "ip,in_port=3,dl_src=0a:58:0a:80:00:02,nw_src=10.128.0.2"
    );
    assert_eq!((p.steps[1].2, p.steps[1].3), (100, 0x1466df81e88c5fc2));
    assert_eq!(p.steps[5].1, "");
    assert_eq!(p.steps[5].4, ["drop"]);
    assert_eq!(p.regs["reg0"], 10);
    assert_eq!(p.regs["reg1"], 11);
    assert!(p.outputs.is_empty());
}

#[test]
fn outputs_and_tunnels() {
    let text = "Flow: ip\n\nbridge(\"br0\")\n-------------\n80. reg0=0xa,reg1=0xa, priority 100, cookie 0x300000000000000a\n    output:NXM_NX_REG2[]\n     -> output port is 18\n\nFinal flow: reg0=0xa\nDatapath actions: 19\n";
    let p = parse(text);
    assert_eq!(p.outputs, [18]);
    let text = "Flow: ip\n\nbridge(\"br0\")\n-------------\n90. ip,nw_dst=10.129.0.0/23, priority 100, cookie 0x2000000000000003\n    move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31]\n    set_field:172.17.0.3->tun_dst\n    output:1\n\nFinal flow: reg0=0xa\n";
    let p = parse(text);
    assert_eq!(p.outputs, [1]);
    assert_eq!(p.tun_dst, Some("172.17.0.3".parse().unwrap()));
}

#[test]
fn protocols() {
    assert_eq!(parse_proto("").unwrap(), (Proto::Icmp, false));
    assert_eq!(parse_proto("TCP/80").unwrap(), (Proto::Tcp(80), false));
    assert_eq!(parse_proto("udp/53").unwrap(), (Proto::Udp(53), false));
    assert_eq!(parse_proto("arp").unwrap(), (Proto::Arp, false));
    assert_eq!(parse_proto("icmp6").unwrap(), (Proto::Icmp, true));
    assert_eq!(parse_proto("ND").unwrap(), (Proto::Nd, true));
    for bad in ["tcp", "tcp/0", "udp/70000", "sctp/1", "icmp4"] {
        let e = parse_proto(bad).unwrap_err().to_string();
        assert!(
            e.contains("expected icmp, arp, tcp/PORT or udp/PORT") && e.contains("icmp6 or nd"),
            "{bad}: {e}"
        );
    }
}

fn request(src: &str, dst: &str, proto: &str) -> TraceRequest {
    TraceRequest {
        src: src.into(),
        dst: dst.into(),
        proto: proto.into(),
        vni: None,
        spoof_ip: None,
        spoof_mac: None,
        live: false,
    }
}

#[test]
fn the_family_follows_the_addresses_and_the_protocol() {
    let v6 = |src: &str, dst: &str, proto: &str| {
        let (_, only6) = parse_proto(proto).unwrap();
        family_is_v6(&request(src, dst, proto), only6)
    };
    assert!(!v6("a/p", "b/q", "tcp/80").unwrap());
    assert!(!v6("a/p", "10.128.0.5", "").unwrap());
    assert!(v6("a/p", "fd01::5", "tcp/80").unwrap());
    assert!(v6("a/p", "b/q", "icmp6").unwrap());
    assert!(v6("node", "b/q", "nd").unwrap());
    let e = v6("10.128.0.5", "fd01::5", "").unwrap_err().to_string();
    assert!(
        e.contains("source 10.128.0.5 is IPv4 in an IPv6 trace"),
        "{e}"
    );
    let e = v6("a/p", "10.128.0.5", "nd").unwrap_err().to_string();
    assert!(e.contains("IPv4 in an IPv6 trace (nd)"), "{e}");
}

#[test]
fn ipv6_packets_in_ofproto_trace_syntax() {
    let src: Ipv6Addr = "fd01:0:0:5::5".parse().unwrap();
    let dst: Ipv6Addr = "fd01:0:0:5::a0b".parse().unwrap();
    let macs = ("0a:58:0a:80:00:05", "0a:58:0a:80:00:06");
    assert_eq!(
        ipv6_packet(Proto::Nd, "", 3, macs, (src, dst)),
        "icmp6,in_port=3,dl_src=0a:58:0a:80:00:05,dl_dst=33:33:ff:00:0a:0b,ipv6_src=fd01:0:0:5::5,\
         ipv6_dst=ff02::1:ff00:a0b,nw_ttl=255,icmpv6_type=135,icmpv6_code=0,nd_target=fd01:0:0:5::a0b,\
         nd_sll=0a:58:0a:80:00:05"
    );
    assert_eq!(
        ipv6_packet(Proto::Tcp(80), "", 3, macs, (src, dst)),
        "tcp6,in_port=3,dl_src=0a:58:0a:80:00:05,dl_dst=0a:58:0a:80:00:06,ipv6_src=fd01:0:0:5::5,\
         ipv6_dst=fd01:0:0:5::a0b,nw_ttl=64,tp_src=40000,tp_dst=80,tcp_flags=0x002"
    );
    assert!(ipv6_packet(Proto::Icmp, "", 3, macs, (src, dst)).starts_with("icmp6,"));
    // A remote pod's MAC from its IPv6 address's low 32 bits.
    assert_eq!(mac_of("fd01::a80:5".parse().unwrap()), "0a:58:0a:80:00:05");
}
