//! The flow corpus: every flow of `docs/pipeline.md` with real values, plus flows that
//! cover every other match field and action the `ovs` crate supports (`tests/corpus/`).
//!
//! Each line is written exactly as `ovs-ofctl -O OpenFlow13 --no-names --no-stats dump-flows`
//! prints it, so the file is at once the input of the integration tests and their expected
//! output.

use ovs::flow::{parse_flow, Flow, Names};

/// The corpus text.
pub const PIPELINE: &str = include_str!("../corpus/pipeline.flows");

/// Port numbers and names of the corpus bridge.
pub const PORTS: [(u32, &str); 3] = [(1, "vxlan0"), (2, "tun0"), (3, "pod3")];

/// The corpus lines (comments and blank lines removed).
pub fn lines() -> Vec<&'static str> {
    PIPELINE
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// The corpus as flows.
pub fn flows() -> Vec<Flow> {
    lines()
        .into_iter()
        .map(|l| parse_flow(l, &Names::new()).unwrap_or_else(|e| panic!("corpus line {l}: {e}")))
        .collect()
}

/// The table names of the pipeline and the port names of the corpus bridge.
pub fn names() -> Names {
    let mut names = Names::new().tables(flows::Table::names());
    for (no, name) in PORTS {
        names = names.port(no, name);
    }
    names
}

/// Five per-pod flows shaped like openshift-sdn's (a codec corpus: our own rows are
/// `flows::pod_flows`, pipeline.md "Per-pod flows") for `n` pods (ofports from 3, addresses from
/// 10.128.0.2 upwards, VNIDs cycling over 10..=19), each pod's flows under its own cookie, built
/// with the `ovs` builders. `5 * n` flows.
pub fn pod_flows(n: u32) -> Vec<Flow> {
    use ovs::flow::{Action, MacAddr, Match};
    use std::net::Ipv4Addr;
    let mut out = Vec::with_capacity(5 * n as usize);
    for i in 0..n {
        let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 128, 0, 2)) + i);
        let mac = MacAddr::from_pod_ip(ip);
        let port = 3 + i;
        let vnid = 10 + i % 10;
        let cookie = 0x1000_0000_0000_0000 | u64::from(i + 1);
        out.push(
            Flow::new(20, 100)
                .cookie(cookie)
                .matching(Match::any().in_port(port).arp().arp_spa(ip).arp_sha(mac))
                .action(Action::load_reg(0, vnid))
                .goto(30),
        );
        out.push(
            Flow::new(20, 100)
                .cookie(cookie)
                .matching(Match::any().in_port(port).ip().dl_src(mac).nw_src(ip))
                .action(Action::load_reg(0, vnid))
                .goto(27),
        );
        out.push(
            Flow::new(25, 100)
                .cookie(cookie)
                .matching(Match::any().ip().nw_src(ip))
                .action(Action::load_reg(0, vnid))
                .goto(27),
        );
        out.push(
            Flow::new(40, 100)
                .cookie(cookie)
                .matching(Match::any().arp().arp_tpa(ip))
                .action(Action::Output(port)),
        );
        out.push(
            Flow::new(70, 100)
                .cookie(cookie)
                .matching(Match::any().ip().nw_dst(ip))
                .actions([Action::load_reg(1, vnid), Action::load_reg(2, port)])
                .goto(80),
        );
    }
    out
}

/// The node configuration the corpus was written for.
pub fn node_config() -> flows::NodeConfig {
    flows::NodeConfig {
        datapath: flows::Datapath::System,
        mode: flows::Mode::Multitenant,
        node_ip: std::net::Ipv4Addr::new(172, 17, 0, 2).into(),
        ipv4: Some(flows::NodeIpv4 {
            local_subnet: "10.128.0.0/23".parse().expect("valid"),
            cluster_networks: vec!["10.128.0.0/14".parse().expect("valid")],
            service_cidr: "172.30.0.0/16".parse().expect("valid"),
        }),
        vxlan_port: 4789,
        tun0_mac: None,
        ipv6: None,
    }
}
