//! The base rows as pipeline.md writes them, per mode and datapath.

use super::*;

#[test]
fn every_flow_is_valid_and_every_table_has_a_row_but_111() {
    let flows = base_flows(&test_config(Mode::Multitenant));
    for f in &flows {
        f.validate().unwrap_or_else(|e| panic!("{f}: {e}"));
        assert_eq!(f.cookie, cookie::BASE);
    }
    for t in Table::ALL {
        let has = flows.iter().any(|f| f.table == t.id());
        assert_eq!(has, t != Table::MulticastRemote, "table {}", t.name());
    }
}

#[test]
fn version_follows_the_base_set() {
    let mt = base_flows(&test_config(Mode::Multitenant));
    let st = base_flows(&test_config(Mode::Subnet));
    let note = |fs: &[Flow]| fs.last().unwrap().actions_text(None);
    assert_ne!(note(&mt), note(&st));
    assert!(version(Mode::Multitenant, &mt).starts_with("multitenant."));
    let mut other = test_config(Mode::Multitenant);
    other.vxlan_port = 4790;
    assert_ne!(
        version(Mode::Multitenant, &base_flows(&other)),
        version(Mode::Multitenant, &mt)
    );
    assert_eq!(
        base_flows(&test_config(Mode::Multitenant)),
        mt,
        "deterministic"
    );
}

fn texts(fs: &[Flow], table: u8) -> Vec<String> {
    fs.iter()
        .filter(|f| f.table == table)
        .map(|f| f.to_string().trim_start_matches("cookie=0x1, ").to_string())
        .collect()
}

#[test]
fn networkpolicy_mode_has_its_rows_in_27_30_and_80_on_both_datapaths() {
    let np = base_flows(&test_config(Mode::NetworkPolicy));
    for f in &np {
        f.validate().unwrap_or_else(|e| panic!("{f}: {e}"));
    }
    assert!(version(Mode::NetworkPolicy, &np).starts_with("networkpolicy."));
    let t27 = texts(&np, 27);
    assert!(
        t27.contains(
            &"table=27, priority=5500,ip,nw_dst=172.30.0.0/16 actions=goto_table:30".to_string()
        ),
        "{t27:#?}"
    );
    assert!(
        t27.contains(
            &"table=27, priority=5400,ct_state=+rpl+trk,ip actions=goto_table:30".to_string()
        ),
        "{t27:#?}"
    );
    // What no NetworkPolicy decided meets the Baseline tier (28, 81), which lets it through.
    assert!(t27.contains(&"table=27, priority=0 actions=goto_table:28".to_string()));
    assert_eq!(
        texts(&np, 28),
        vec!["table=28, priority=0 actions=goto_table:30"]
    );
    let t30 = texts(&np, 30);
    assert!(
        t30.contains(
            &"table=30, priority=150,ip,nw_dst=10.128.0.0/23 actions=goto_table:31".to_string()
        ),
        "{t30:#?}"
    );
    // On netdev every commit copies the via-host flag into ct_mark.
    let commit = "ct(commit,exec(move:NXM_NX_REG4[0]->NXM_NX_CT_MARK[0]))";
    assert!(t30.contains(&format!("table=30, priority=160,ct_state=-rpl+trk,ip,nw_dst=10.128.0.1 actions={commit},goto_table:31")), "{t30:#?}");
    assert!(
        t30.contains(&format!(
            "table=30, priority=100,ct_state=-rpl+trk,ip actions={commit},goto_table:31"
        )),
        "netdev commits everything: {t30:#?}"
    );
    let t80 = texts(&np, 80);
    for want in [
        format!(
            "table=80, priority=5500,ip,nw_src=10.128.0.1 actions={commit},output:NXM_NX_REG2[]"
        ),
        "table=80, priority=5500,arp actions=output:NXM_NX_REG2[]".to_string(),
        "table=80, priority=5400,ct_state=+rpl+trk,ip actions=output:NXM_NX_REG2[]".to_string(),
        "table=80, priority=50,ip actions=goto_table:81".to_string(),
        "table=80, priority=0 actions=drop".to_string(),
    ] {
        assert!(t80.contains(&want), "{want}: {t80:#?}");
    }
    assert_eq!(t80.len(), 5, "{t80:#?}");
    assert_eq!(
        texts(&np, 81),
        vec![
            format!("table=81, priority=1,ip actions={commit},output:NXM_NX_REG2[]"),
            "table=81, priority=0 actions=drop".to_string()
        ]
    );
    // The kernel datapath commits cluster-internal connections only.
    let mut sys = test_config(Mode::NetworkPolicy);
    sys.datapath = Datapath::System;
    let sys_flows = base_flows(&sys);
    let t30 = texts(&sys_flows, 30);
    assert!(t30.contains(&"table=30, priority=100,ct_state=-rpl+trk,ip,nw_src=10.128.0.0/14,nw_dst=10.128.0.0/14 actions=ct(commit),goto_table:31".to_string()), "{t30:#?}");
    assert!(
        !sys_flows.iter().any(|f| f.to_string().contains("CT_MARK")),
        "the kernel datapath writes no ct_mark"
    );
    assert!(!t30
        .iter()
        .any(|t| t.contains("priority=100,ct_state=-rpl+trk,ip actions")));
    // Subnet mode passes 27 and 30 straight through.
    let st = base_flows(&test_config(Mode::Subnet));
    assert_eq!(
        texts(&st, 27),
        vec!["table=27, priority=0 actions=goto_table:30"]
    );
    assert_eq!(
        texts(&st, 30),
        vec![
            "table=30, priority=300,ip,reg4=0x1/0x1 actions=ct(commit,exec(load:0x1->NXM_NX_CT_MARK[0],\
             move:NXM_NX_REG0[0..23]->NXM_NX_CT_MARK[8..31])),goto_table:31",
            "table=30, priority=0 actions=goto_table:31"
        ],
        "netdev records a via-host connection with the client's VNID"
    );
}

#[test]
fn multitenant_mode_has_the_admin_tier_around_tenancy() {
    // docs/pipeline.md, "ClusterNetworkPolicy": the node and replies first, the Admin
    // tier's room, tenancy, and table 81 committing what tenancy allowed.
    let mt = base_flows(&test_config(Mode::Multitenant));
    for f in &mt {
        f.validate().unwrap_or_else(|e| panic!("{f}: {e}"));
    }
    assert_eq!(
        texts(&mt, 27),
        vec![
            "table=27, priority=5450,ct_state=+rpl+trk,ct_mark=0x2/0x2,ip \
             actions=move:NXM_NX_CT_MARK[8..31]->NXM_NX_REG0[0..23],goto_table:30",
            "table=27, priority=5500,ip,nw_dst=172.30.0.0/16 actions=goto_table:30",
            "table=27, priority=5400,ct_state=+rpl+trk,ip actions=goto_table:30",
            "table=27, priority=0 actions=goto_table:28",
        ]
    );
    assert_eq!(
        texts(&mt, 28),
        vec![
            "table=28, priority=5500,ip,nw_dst=10.128.0.0/14 actions=goto_table:30",
            "table=28, priority=0 actions=goto_table:30",
        ],
        "the Baseline tier decides only what leaves the cluster networks"
    );
    let t30 = texts(&mt, 30);
    assert!(t30.contains(&"table=30, priority=300,ip,reg4=0x1/0x1 actions=ct(commit,exec(load:0x1->NXM_NX_CT_MARK[0],move:NXM_NX_REG0[0..23]->NXM_NX_CT_MARK[8..31])),goto_table:31".to_string()), "{t30:#?}");
    assert!(
        t30.contains(
            &"table=30, priority=100,ct_state=-rpl+trk,ip actions=ct(commit),goto_table:31"
                .to_string()
        ),
        "{t30:#?}"
    );
    assert!(t30.contains(
        &"table=30, priority=150,ip,nw_dst=10.128.0.0/23 actions=goto_table:31".to_string()
    ));
    assert_eq!(
        texts(&mt, 80),
        vec![
            "table=80, priority=5500,ip,nw_src=10.128.0.1 actions=ct(commit),output:NXM_NX_REG2[]",
            "table=80, priority=5500,arp,arp_spa=10.128.0.1 actions=output:NXM_NX_REG2[]",
            "table=80, priority=5400,ct_state=+rpl+trk,ip,reg4=0/0x4 \
             actions=load:0x1->NXM_NX_REG4[2],resubmit(,80)",
            "table=80, priority=200,reg0=0 actions=goto_table:81",
            "table=80, priority=200,reg1=0 actions=goto_table:81",
            "table=80, priority=0 actions=drop",
        ]
    );
    assert_eq!(
        texts(&mt, 81),
        vec![
            "table=81, priority=1,ip actions=ct(commit),output:NXM_NX_REG2[]",
            "table=81, priority=0 actions=output:NXM_NX_REG2[]",
        ]
    );
    assert!(
        mt.iter()
            .all(|f| f.priority <= crate::live_trace::COPYABLE_MAX),
        "a live trace copies every row"
    );
}

#[test]
fn service_replies_are_decided_by_table_80_with_the_clients_vnid() {
    // Netdev: table 0 flags the packet back from the node's DNAT (no commit there), table
    // 31 hands a marked reply to table 80 with tun0 as its port and the client's VNID.
    let mt = base_flows(&test_config(Mode::Multitenant));
    assert!(texts(&mt, 0).contains(
        &"priority=300,ip,in_port=2,nw_src=10.128.0.0/23,nw_dst=10.128.0.0/14 \
          actions=load:0x1->NXM_NX_REG4[],goto_table:25"
            .to_string()
    ));
    assert!(texts(&mt, 31).contains(
        &"table=31, priority=260,ct_state=+rpl+trk,ct_mark=0x1/0x1,ip \
          actions=set_field:0a:58:0a:80:00:01->eth_dst,load:0x2->NXM_NX_REG2[],\
          move:NXM_NX_CT_MARK[8..31]->NXM_NX_REG1[0..23],goto_table:80"
            .to_string()
    ));
    assert!(
        !mt.iter()
            .filter(|f| f.table != Table::ConntrackCommit.id())
            .any(|f| f.to_string().contains("ct_mark->")),
        "only table 30 marks a via-host connection"
    );
    // System: no flag, no mark; the reply is un-DNAT'd in OVS and meets table 80 anyway.
    let mut sys = test_config(Mode::Multitenant);
    sys.datapath = Datapath::System;
    let sys = base_flows(&sys);
    assert!(
        !sys.iter()
            .any(|f| f.table != Table::IngressIsolation.id() && f.to_string().contains("REG4")),
        "no via-host flag (table 80's replies pass the Admin tier with bit 2)"
    );
    assert!(!texts(&sys, 30).iter().any(|t| t.contains("ct_mark")));
}
