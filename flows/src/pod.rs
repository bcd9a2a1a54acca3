//! The seven flows of one local pod (pipeline.md, "Per-pod flows"): spoof-guarded egress in
//! table 20 (ARP with the pod's MAC as Ethernet source and ARP sender and its IP as ARP sender,
//! IP with the pod's MAC *and* IP, both from the pod's port), the service hairpin in table 25
//! (the sending pod found again by its address), and delivery of ARP in table 40 and of IP in
//! table 70. Both delivery tables leave the decision to table 80, so ARP is isolated between
//! tenants exactly as IP is (a pod cannot even resolve another tenant's address).
//!
//! Only two of the seven carry the pod's VNID: table 26 turns the sending pod's port (`reg3`,
//! loaded by tables 20 and 25) into the source VNID, table 75 turns the receiving pod's port
//! (`reg2`, loaded by tables 40 and 70) into the destination VNID. A VNID change of a namespace
//! therefore rewrites two rows per pod, not five: ovs-vswitchd takes a bundle's messages 50 per
//! main-loop iteration, and an iteration costs a poll of every port (milliseconds at 1000 pods).
//!
//! Every flow carries the pod's cookie ([`port_cookie`]): a hash of the name of the pod's OVS port
//! (the host end of its veth) under the [`Feature::Pod`](crate::cookie::Feature::Pod) prefix.
//! Teardown and VNID changes select exactly that pod's flows by cookie, and the cookie survives an
//! agent restart because it is derived from the port's name, which the port's record maps to the
//! attachment. Why the port and not the attachment: the agent installs a warm pool port's flows
//! before it knows which pod will take the port (the port, its ofport and its address are known),
//! so the flows a pod starts with must already carry the cookie it keeps.

use std::net::{Ipv4Addr, Ipv6Addr};

use multitenant::Vnid;
use ovs::flow::{Action, Flow, MacAddr, Match};

use crate::attachment::fnv1a;
use crate::cookie::{cookie, Feature};
use crate::registers::Reg;
use crate::tables::Table;

/// What the flows of one pod depend on.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct PodFlows {
    /// OpenFlow port of the pod's host veth on br0 (>= 3).
    pub ofport: u32,
    /// The pod's IPv4 address (`None`: a pod of an IPv6-only cluster).
    pub ip: Option<Ipv4Addr>,
    /// The pod's IPv6 address in a dual-stack or IPv6-only cluster (its rows:
    /// [`crate::ipv6`]).
    pub ipv6: Option<Ipv6Addr>,
    /// The pod's VNID (0 in subnet mode and for global namespaces).
    pub vnid: Vnid,
    /// The pod's cookie, from [`port_cookie`].
    pub cookie: u64,
    /// OpenFlow meter policing what the pod sends (its egress bandwidth limit on the netdev
    /// datapath), applied by the pod's table-20 IP row before anything else. ARP is not metered:
    /// it is a trickle, and dropping ARP under load would break the pod's neighbours instead of
    /// slowing its transfers.
    pub egress_meter: Option<u32>,
}

/// The cookie of the flows of the pod on OVS port `port` (the port name's FNV-1a hash under the
/// pod feature).
pub fn port_cookie(port: &str) -> u64 {
    cookie(Feature::Pod, fnv1a(port.as_bytes()))
}

/// How many flows a pod has ([`pod_flows`]) with an IPv4 address only.
pub const POD_FLOWS: usize = 7;

/// How many flows a dual-stack pod has: its IPv4 rows and seven IPv6 rows.
pub const POD_FLOWS_DUAL_STACK: usize = 14;

/// How many flows a pod of an IPv6-only cluster has: its two VNID rows (tables 26 and 75) and
/// seven IPv6 rows.
pub const POD_FLOWS_IPV6_ONLY: usize = 9;

/// The OVS port a pod's flows (from [`pod_flows`]) belong to: the `reg3=P` of their table-26
/// row (`None` for flows without one). The flow store reads it to keep each multicast tenant's
/// table-120 port list in step with the pods it holds.
pub fn ofport_of(flows: &[Flow]) -> Option<u32> {
    flows
        .iter()
        .find(|f| f.table == Table::SourceVnid.id())
        .and_then(|f| f.matches.regs[usize::from(Reg::SrcPort.number())])
        .filter(|m| m.mask().is_none())
        .map(|m| m.value())
}

/// The pod's seven flows, in table order, then its seven IPv6 rows if it has an IPv6 address.
/// A pod without an IPv4 address (IPv6-only cluster) has only the two VNID rows of the seven
/// (tables 26 and 75), then its IPv6 rows; one without any address has none.
pub fn pod_flows(p: &PodFlows) -> Vec<Flow> {
    let Some(mac) = MacAddr::from_pod_addrs(p.ip, p.ipv6) else {
        return Vec::new();
    };
    let f = |table: Table| Flow::new(table.id(), 100).cookie(p.cookie);
    let source_vnid = f(Table::SourceVnid)
        .matching(Reg::SrcPort.matching(Match::any(), p.ofport))
        .action(Reg::SrcVnid.load_vnid(p.vnid))
        .goto(Table::PodEgressPolicy.id());
    let destination_vnid = f(Table::DestinationVnid)
        .matching(Reg::OutPort.matching(Match::any(), p.ofport))
        .action(Reg::DstVnid.load_vnid(p.vnid))
        .goto(Table::IngressIsolation.id());
    let ipv6_rows = p
        .ipv6
        .map(|ip6| crate::ipv6::pod_rows(p.ofport, mac, ip6, p.cookie, p.egress_meter))
        .unwrap_or_default();
    let Some(ip) = p.ip else {
        let mut rows = vec![source_vnid, destination_vnid];
        rows.extend(ipv6_rows);
        return rows;
    };
    let mut rows = vec![
        f(Table::PodEgressSpoofguard)
            .matching(
                Match::any()
                    .in_port(p.ofport)
                    .arp()
                    .dl_src(mac)
                    .arp_spa(ip)
                    .arp_sha(mac),
            )
            .action(Reg::SrcPort.load(p.ofport))
            .goto(Table::SourceVnid.id()),
        f(Table::PodEgressSpoofguard)
            .matching(Match::any().in_port(p.ofport).ip().dl_src(mac).nw_src(ip))
            .actions(p.egress_meter.map(Action::Meter))
            .action(Reg::SrcPort.load(p.ofport))
            .goto(Table::SourceVnid.id()),
        source_vnid,
        f(Table::ServiceReturn)
            .matching(Match::any().ip().nw_src(ip))
            .action(Reg::SrcPort.load(p.ofport))
            .goto(Table::SourceVnid.id()),
        f(Table::LocalArp)
            .matching(Match::any().arp().arp_tpa(ip))
            .action(Reg::OutPort.load(p.ofport))
            .goto(Table::DestinationVnid.id()),
        f(Table::LocalIp)
            .matching(Match::any().ip().nw_dst(ip))
            .action(Reg::OutPort.load(p.ofport))
            .goto(Table::DestinationVnid.id()),
        destination_vnid,
    ];
    rows.extend(ipv6_rows);
    rows
}

/// The cookie of VNID `vnid`'s table-80 row.
pub fn vnid_cookie(vnid: Vnid) -> u64 {
    cookie(Feature::Vnid, u64::from(vnid.id()))
}

/// The VNID given to pods whose tenant is unknown (2^24-1, [`Vnid::UNASSIGNED`]).
pub const UNASSIGNED_VNID: Vnid = Vnid::UNASSIGNED;

/// Multitenant mode: the table-80 row letting pods of VNID `vnid` reach each other
/// (`reg0=V,reg1=V`, to table 81, which commits what it allowed and delivers it). VNID 0 needs none (the base rows allow `reg0=0` and `reg1=0`), and the
/// unknown-tenant VNID gets none either: pods whose tenant is unknown reach only global pods and
/// the node, not even each other (they need not belong together).
pub fn vnid_flow(vnid: Vnid) -> Option<Flow> {
    (!vnid.is_global() && vnid != UNASSIGNED_VNID).then(|| {
        let m = Reg::DstVnid.matching(Reg::SrcVnid.matching(Match::any(), vnid.id()), vnid.id());
        Flow::new(Table::IngressIsolation.id(), 100)
            .cookie(vnid_cookie(vnid))
            .matching(m)
            .goto(Table::IngressBaseline.id())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_flows_print_as_pipeline_md_says() {
        let p = PodFlows {
            ofport: 3,
            ip: Some(Ipv4Addr::new(10, 128, 0, 2)),
            ipv6: None,
            vnid: Vnid::new(5).unwrap(),
            cookie: 0x1000_0000_0000_0003,
            egress_meter: None,
        };
        let text: Vec<String> = pod_flows(&p).iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "cookie=0x1000000000000003, table=20, priority=100,arp,in_port=3,dl_src=0a:58:0a:80:00:02,arp_spa=10.128.0.2,arp_sha=0a:58:0a:80:00:02 actions=load:0x3->NXM_NX_REG3[],goto_table:26",
                "cookie=0x1000000000000003, table=20, priority=100,ip,in_port=3,dl_src=0a:58:0a:80:00:02,nw_src=10.128.0.2 actions=load:0x3->NXM_NX_REG3[],goto_table:26",
                "cookie=0x1000000000000003, table=26, priority=100,reg3=0x3 actions=load:0x5->NXM_NX_REG0[],goto_table:27",
                "cookie=0x1000000000000003, table=25, priority=100,ip,nw_src=10.128.0.2 actions=load:0x3->NXM_NX_REG3[],goto_table:26",
                "cookie=0x1000000000000003, table=40, priority=100,arp,arp_tpa=10.128.0.2 actions=load:0x3->NXM_NX_REG2[],goto_table:75",
                "cookie=0x1000000000000003, table=70, priority=100,ip,nw_dst=10.128.0.2 actions=load:0x3->NXM_NX_REG2[],goto_table:75",
                "cookie=0x1000000000000003, table=75, priority=100,reg2=0x3 actions=load:0x5->NXM_NX_REG1[],goto_table:80",
            ]
        );
        assert_eq!(pod_flows(&p).len(), POD_FLOWS);
        assert_eq!(ofport_of(&pod_flows(&p)), Some(3));
        assert_eq!(ofport_of(&pod_flows(&p)[..2]), None);
        // A VNID change rewrites only the rows of tables 26 and 75.
        let moved = PodFlows {
            vnid: Vnid::new(6).unwrap(),
            ..p
        };
        let changed: Vec<u8> = pod_flows(&p)
            .iter()
            .zip(pod_flows(&moved))
            .filter(|(a, b)| **a != *b)
            .map(|(a, _)| a.table)
            .collect();
        assert_eq!(changed, [26, 75]);
        for f in pod_flows(&p) {
            f.validate().unwrap();
        }
        let metered = PodFlows {
            egress_meter: Some(7),
            ..p
        };
        let flows = pod_flows(&metered);
        assert_eq!(
            flows[1].to_string(),
            "cookie=0x1000000000000003, table=20, priority=100,ip,in_port=3,dl_src=0a:58:0a:80:00:02,nw_src=10.128.0.2 actions=meter:7,load:0x3->NXM_NX_REG3[],goto_table:26"
        );
        for (i, (a, b)) in flows.iter().zip(pod_flows(&p)).enumerate() {
            assert_eq!(*a == b, i != 1, "only the table-20 IP row changes");
            a.validate().unwrap();
        }
    }

    #[test]
    fn an_ipv6_only_pod_has_its_vnid_rows_and_its_ipv6_rows_with_a_mac_from_its_ipv6_address() {
        let p = PodFlows {
            ofport: 4,
            ip: None,
            ipv6: Some("fd01:0:0:5::a:7".parse().unwrap()),
            vnid: Vnid::new(5).unwrap(),
            cookie: 0x1000_0000_0000_0004,
            egress_meter: None,
        };
        let rows = pod_flows(&p);
        assert_eq!(rows.len(), POD_FLOWS_IPV6_ONLY);
        assert_eq!(ofport_of(&rows), Some(4));
        let text: Vec<String> = rows.iter().map(ToString::to_string).collect();
        assert!(
            text[0].contains("table=26, priority=100,reg3=0x4"),
            "{text:#?}"
        );
        assert!(
            text[1].contains("table=75, priority=100,reg2=0x4"),
            "{text:#?}"
        );
        for f in &rows {
            f.validate().unwrap_or_else(|e| panic!("{f}: {e}"));
            assert!(f.matches.eth_type != Some(0x0800) && f.matches.eth_type != Some(0x0806));
        }
        // The pod's MAC is 0a:58 and the last four bytes of its address.
        assert!(
            text.iter().any(|t| t.contains("dl_src=0a:58:00:0a:00:07")),
            "{text:#?}"
        );
        assert!(pod_flows(&PodFlows { ipv6: None, ..p }).is_empty());
    }

    #[test]
    fn vnid_rows() {
        assert!(vnid_flow(Vnid::GLOBAL).is_none());
        assert!(vnid_flow(UNASSIGNED_VNID).is_none());
        assert_eq!(
            vnid_flow(Vnid::new(10).unwrap()).unwrap().to_string(),
            "cookie=0x300000000000000a, table=80, priority=100,reg0=0xa,reg1=0xa actions=goto_table:81"
        );
    }

    #[test]
    fn cookies_name_the_port() {
        let a = port_cookie("veth1234abcd");
        assert_eq!(a >> 60, Feature::Pod as u64);
        assert_eq!(a, port_cookie("veth1234abcd"));
        assert_ne!(a, port_cookie("veth1234abce"));
        assert_ne!(a, port_cookie("sdnp0011223344"));
    }
}
