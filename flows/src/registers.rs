//! The register registry: every register the pipeline uses, declared once with its bits, its
//! meaning and the tables that write and read it (docs/pipeline.md, "Registers"). Builders say
//! `Reg::SrcVnid.load(v)` and `Reg::OutPort.output()`, never `reg0` or `Field::Reg(2)`; a new
//! feature that needs a register adds it here, where a clash with an existing one is visible.
//!
//! Also here: the one place a VNID is copied between `reg0` and the VXLAN tunnel id (the VNI),
//! both ways.

use ovs::flow::{Action, Field, Masked, Match, Move, Subfield};

use crate::tables::Table;
use multitenant::Vnid;

/// A register of the pipeline.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum Reg {
    /// `reg0`: the source VNID: the sending pod's namespace, the VNI of VXLAN traffic, 0 for the
    /// node (tun0).
    SrcVnid,
    /// `reg1`: the destination VNID, of the local pod a packet is delivered to.
    DstVnid,
    /// `reg2`: the ofport of the local pod a packet is delivered to.
    OutPort,
    /// `reg3`: the ofport of the local pod that sent a packet (tables 20 and 25 find it, table
    /// 26 turns it into the source VNID).
    SrcPort,
    /// `reg4`: flags. Bit 0: a packet a pod sent to a Service that the node DNAT'd back into
    /// br0 through tun0 (table 0), on the userspace datapath: the commit that records the
    /// connection copies it into `ct_mark`, so the connection's replies go back through the
    /// node. Bits 1 and 2: a ClusterNetworkPolicy Pass of the Admin tier was taken, egress and
    /// ingress (tables 27 and 80): the packet meets no Admin-tier row of that direction again.
    ViaHost,
    /// `reg5`: what decided a packet that is logged (an audit code: the decision and its
    /// verdict, and a detail such as the egress firewall rule), read by table 130.
    AuditCode,
    /// `reg6`: the conjunction id of the NetworkPolicy rule that allowed a logged packet.
    AuditRule,
    /// `reg7`: a live trace's packet: one bit per table it has been seen entering (only a
    /// trace's own rows, [`crate::live_trace`], write or match it).
    TraceSeen,
}

impl Reg {
    /// Every register, by number.
    pub const ALL: [Reg; 8] = [
        Reg::SrcVnid,
        Reg::DstVnid,
        Reg::OutPort,
        Reg::SrcPort,
        Reg::ViaHost,
        Reg::AuditCode,
        Reg::AuditRule,
        Reg::TraceSeen,
    ];

    /// The NXM register number (`regN`).
    pub const fn number(self) -> u8 {
        match self {
            Reg::SrcVnid => 0,
            Reg::DstVnid => 1,
            Reg::OutPort => 2,
            Reg::SrcPort => 3,
            Reg::ViaHost => 4,
            Reg::AuditCode => 5,
            Reg::AuditRule => 6,
            Reg::TraceSeen => 7,
        }
    }

    /// The bits in use, inclusive (VNIDs are 24 bits but travel as the 32-bit VNI; ports are
    /// 32-bit ofports; the via-host flag is one bit).
    pub const fn bits(self) -> (u8, u8) {
        match self {
            Reg::ViaHost => (0, 2),
            _ => (0, 31),
        }
    }

    /// What the register holds.
    pub const fn meaning(self) -> &'static str {
        match self {
            Reg::SrcVnid => "source VNID",
            Reg::DstVnid => "destination VNID",
            Reg::OutPort => "output ofport of a local pod",
            Reg::SrcPort => "ofport of the local pod that sent the packet",
            Reg::ViaHost => {
                "bit 0: a pod's packet to a Service, back from the node's DNAT; bits 1, 2: the Admin tier passed (egress, ingress)"
            }
            Reg::AuditCode => "what decided a logged packet (audit code)",
            Reg::AuditRule => {
                "the rule (conjunction id) that decided a logged packet: a NetworkPolicy allow, any ClusterNetworkPolicy rule"
            }
            Reg::TraceSeen => {
                "a live trace's packet: the tables it has entered, one bit each; the trace's nonce"
            }
        }
    }

    /// The tables that write it.
    pub const fn written_by(self) -> &'static [Table] {
        match self {
            // Table 27: a reply of a connection an Admin-tier Accept admitted (multitenant)
            // takes its client's VNID from the connection's mark.
            Reg::SrcVnid => &[Table::Classifier, Table::SourceVnid, Table::PodEgressPolicy],
            // Table 31: a reply of a Service connection on the userspace datapath, sent back
            // through tun0 with its client's VNID from the connection's mark.
            Reg::DstVnid => &[Table::Routing, Table::DestinationVnid],
            Reg::OutPort => &[Table::Routing, Table::LocalArp, Table::LocalIp],
            Reg::SrcPort => &[Table::PodEgressSpoofguard, Table::ServiceReturn],
            Reg::ViaHost => &[
                Table::Classifier,
                Table::PodEgressPolicy,
                Table::IngressIsolation,
            ],
            Reg::AuditCode => &[
                Table::PodEgressSpoofguard,
                Table::PodEgressPolicy,
                Table::PodEgressBaseline,
                Table::IngressIsolation,
                Table::IngressBaseline,
                Table::EgressFirewall,
            ],
            Reg::AuditRule => &[
                Table::PodEgressPolicy,
                Table::PodEgressBaseline,
                Table::IngressIsolation,
                Table::IngressBaseline,
                Table::EgressFirewall,
            ],
            // Only a live trace's temporary rows, in every table it observes.
            Reg::TraceSeen => &crate::live_trace::OBSERVED,
        }
    }

    /// The tables that read it (a match, or a source of `move:` or `output:`).
    pub const fn read_by(self) -> &'static [Table] {
        match self {
            Reg::SrcVnid => &[
                Table::ConntrackCommit,
                Table::RemoteArp,
                Table::IngressIsolation,
                // A Baseline ingress rule's namespace peer, by VNID.
                Table::IngressBaseline,
                Table::RemoteIp,
                Table::EgressFirewall,
                Table::EgressRouting,
                Table::MulticastOut,
                Table::MulticastRemote,
                Table::MulticastLocal,
                Table::Audit,
            ],
            Reg::DstVnid => &[Table::IngressIsolation],
            Reg::OutPort => &[
                Table::DestinationVnid,
                Table::IngressIsolation,
                Table::IngressBaseline,
            ],
            Reg::SrcPort => &[
                Table::SourceVnid,
                Table::PodEgressPolicy,
                Table::PodEgressBaseline,
            ],
            Reg::ViaHost => &[
                Table::PodEgressPolicy,
                Table::ConntrackCommit,
                Table::IngressIsolation,
                Table::IngressBaseline,
            ],
            Reg::AuditCode => &[Table::Audit],
            Reg::AuditRule => &[],
            Reg::TraceSeen => &crate::live_trace::OBSERVED,
        }
    }

    /// The OpenFlow field.
    pub const fn field(self) -> Field {
        Field::Reg(self.number())
    }

    /// The whole register as a subfield (`NXM_NX_REGn[]`).
    pub fn subfield(self) -> Subfield {
        Subfield::whole(self.field())
    }

    /// `load:V->NXM_NX_REGn[]`.
    pub fn load(self, value: u32) -> Action {
        Action::load_reg(self.number(), value)
    }

    /// Loads a VNID (`Reg::SrcVnid`/`Reg::DstVnid`).
    pub fn load_vnid(self, vnid: Vnid) -> Action {
        self.load(vnid.id())
    }

    /// `m` also matching `regN=value`.
    pub fn matching(self, m: Match, value: u32) -> Match {
        m.reg(self.number(), value)
    }

    /// `m` also matching `regN=value/mask`: only the bits of `mask` (a flag of `reg4`, whose
    /// other bits are other flags).
    pub fn matching_bits(self, m: Match, value: u32, mask: u32) -> Match {
        m.reg(
            self.number(),
            Masked::new(value & mask, mask).unwrap_or(Masked::exact(value)),
        )
    }

    /// `load:V->NXM_NX_REGn[bit]`: one bit of a flags register, the others left as they are.
    pub fn load_bit(self, bit: u8, value: bool) -> Action {
        Subfield::range(self.field(), bit, bit)
            .and_then(|f| Action::load(f, u64::from(value)))
            .expect("a register has 32 bits")
    }

    /// `output:NXM_NX_REGn[]`.
    pub fn output(self) -> Action {
        Action::OutputReg(self.subfield())
    }
}

/// `tun_id[0..31]`: where the VNID rides in VXLAN (the VNI).
fn vni() -> Subfield {
    // A constant of the pipeline: tun_id has 64 bits.
    Subfield::range(Field::TunId, 0, 31).expect("tun_id has 64 bits")
}

/// `move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[]`: a VXLAN packet's VNI becomes its source VNID.
pub fn vni_to_src_vnid() -> Action {
    Action::Move(Move::new(vni(), Reg::SrcVnid.subfield()).expect("32 bits on both sides"))
}

/// `move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31]`: the source VNID becomes the VNI.
pub fn src_vnid_to_vni() -> Action {
    Action::Move(Move::new(Reg::SrcVnid.subfield(), vni()).expect("32 bits on both sides"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    #[test]
    fn registers_are_distinct_and_print_as_ovs_ofctl_does() {
        let mut numbers: Vec<u8> = Reg::ALL.iter().map(|r| r.number()).collect();
        numbers.dedup();
        assert_eq!(numbers, vec![0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(Reg::SrcVnid.load(5).to_string(), "load:0x5->NXM_NX_REG0[]");
        assert_eq!(Reg::OutPort.output().to_string(), "output:NXM_NX_REG2[]");
        assert_eq!(
            vni_to_src_vnid().to_string(),
            "move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[]"
        );
        assert_eq!(
            src_vnid_to_vni().to_string(),
            "move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31]"
        );
        for r in Reg::ALL {
            assert!(!r.written_by().is_empty() && !r.meaning().is_empty());
        }
        assert_eq!(Reg::SrcVnid.bits(), (0, 31));
        assert_eq!(Reg::ViaHost.bits(), (0, 2));
    }

    /// Every row the builders make, of every kind, in every mode and datapath.
    fn every_row() -> Vec<ovs::flow::Flow> {
        use crate::base::{base_flows, Datapath, Mode, NodeConfig};
        use std::collections::BTreeSet;
        use std::net::Ipv4Addr;
        let mut rows = Vec::new();
        let ipv6 = Some(crate::ipv6::NodeIpv6 {
            local_subnet: "fd01:0:0:5::/64".parse().unwrap(),
            cluster_network: "fd01::/48".parse().unwrap(),
            service_cidr: Some("fd02::/112".parse().unwrap()),
        });
        for mode in [Mode::Subnet, Mode::Multitenant, Mode::NetworkPolicy] {
            for datapath in [Datapath::System, Datapath::Netdev] {
                rows.extend(base_flows(&NodeConfig {
                    datapath,
                    ipv6,
                    ..crate::base::test_config(mode)
                }));
            }
        }
        for meter in [None, Some(7)] {
            rows.extend(crate::pod::pod_flows(&crate::pod::PodFlows {
                ofport: 3,
                ip: Some(Ipv4Addr::new(10, 128, 0, 3)),
                ipv6: Some("fd01:0:0:5::3".parse().unwrap()),
                vnid: Vnid::new(10).unwrap(),
                cookie: crate::pod::port_cookie("veth3"),
                egress_meter: meter,
            }));
        }
        rows.extend(crate::pod::vnid_flow(Vnid::new(10).unwrap()));
        rows.extend(crate::remote::remote_node_flows(
            &crate::remote::RemoteNodeFlows {
                host_ip: Ipv4Addr::new(172, 17, 0, 3).into(),
                subnet: Some("10.128.2.0/23".parse().unwrap()),
                subnet6: Some("fd01:0:0:2::/64".parse().unwrap()),
                cookie: crate::remote::node_cookie("uid"),
            },
        ));
        let vteps = BTreeSet::from([std::net::IpAddr::from(Ipv4Addr::new(172, 17, 0, 3))]);
        rows.push(crate::remote::multicast_remote(&vteps).0);
        rows.extend(crate::multicast::multicast_tenant_flows(
            Vnid::new(10).unwrap(),
            &BTreeSet::from([3, 4]),
        ));
        for fw in [
            crate::egress::EgressFirewall::DropAll,
            crate::egress::EgressFirewall::Rules(vec![crate::egress::EgressRule {
                allow: true,
                dns: false,
                to: vec!["192.0.2.0/24".parse().unwrap()],
            }]),
        ] {
            rows.extend(crate::egress::egress_firewall_flows_logged(
                Vnid::new(10).unwrap(),
                &fw,
                true,
                crate::audit::Logged {
                    deny: true,
                    allow: true,
                },
            ));
        }
        for route in [
            crate::egress_ip::EgressRoute::Dropped,
            crate::egress_ip::EgressRoute::Local,
            crate::egress_ip::EgressRoute::Remote(vec![Ipv4Addr::new(172, 17, 0, 3).into()]),
        ] {
            let mac = ovs::flow::MacAddr::from_pod_ip(Ipv4Addr::new(10, 128, 0, 1));
            rows.extend(
                crate::egress_ip::egress_ip_flows(
                    Vnid::new(10).unwrap(),
                    Some(&route),
                    Some(&route),
                    mac,
                )
                .0,
            );
        }
        rows.extend(crate::policy::tests::sample_rows());
        rows.extend(crate::policy::cluster::tests::sample_rows());
        rows.extend(crate::audit::audit_table());
        rows.extend(crate::audit::spoof_rows(true, true));
        rows.extend(crate::audit::tenancy_rows(
            Vnid::new(10).unwrap(),
            crate::audit::Logged {
                deny: true,
                allow: true,
            },
            true,
            true,
        ));
        rows.extend(
            crate::live_trace::Probe {
                id: 1,
                tag: 3,
                src: Ipv4Addr::new(10, 128, 0, 3).into(),
                transport: crate::live_trace::Transport::Icmp,
                relay: false,
            }
            .observation_rows(),
        );
        rows
    }

    /// The tables that write and read each register, as the rows say: `regN=` in a match and
    /// `NXM_NX_REGn` as a source (`move:`, `output:`) read it; `->NXM_NX_REGn` writes it.
    fn derived() -> BTreeMap<u8, (BTreeSet<u8>, BTreeSet<u8>)> {
        let mut out: BTreeMap<u8, (BTreeSet<u8>, BTreeSet<u8>)> = BTreeMap::new();
        for f in every_row() {
            let text = f.to_string();
            let (matches, actions) = text.split_once(" actions=").unwrap_or((&text, ""));
            for (i, _) in matches.match_indices("reg") {
                let rest = &matches[i + 3..];
                if let Some(n) = rest.strip_suffix("").and_then(|r| {
                    let d = r.chars().next()?.to_digit(10)?;
                    r[1..].starts_with('=').then_some(d as u8)
                }) {
                    out.entry(n).or_default().1.insert(f.table);
                }
            }
            for (i, _) in actions.match_indices("NXM_NX_REG") {
                let n = actions[i + 10..]
                    .chars()
                    .next()
                    .and_then(|c| c.to_digit(10));
                let Some(n) = n else { continue };
                let written = actions[..i].ends_with("->");
                let e = out.entry(n as u8).or_default();
                if written {
                    e.0.insert(f.table);
                } else {
                    e.1.insert(f.table);
                }
            }
        }
        out
    }

    /// The numbers in a cell of pipeline.md's register table, leaving out what is in backticks.
    fn numbers(cell: &str) -> BTreeSet<u8> {
        let plain: String = cell
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, s)| s)
            .collect();
        plain
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect()
    }

    #[test]
    fn the_registry_and_pipeline_md_say_what_the_rows_do_with_each_register() {
        let derived = derived();
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/pipeline.md"),
        )
        .unwrap();
        let ids = |ts: &[Table]| ts.iter().map(|t| t.id()).collect::<BTreeSet<u8>>();
        let mut problems = Vec::new();
        for r in Reg::ALL {
            let (writes, reads) = derived.get(&r.number()).cloned().unwrap_or_default();
            let name = format!("reg{}", r.number());
            if ids(r.written_by()) != writes {
                problems.push(format!(
                    "{name}: registry says written by {:?}, the rows by {writes:?}",
                    ids(r.written_by())
                ));
            }
            if ids(r.read_by()) != reads {
                problems.push(format!(
                    "{name}: registry says read by {:?}, the rows by {reads:?}",
                    ids(r.read_by())
                ));
            }
            let row = doc
                .lines()
                .find(|l| l.starts_with(&format!("| `{name}` |")))
                .unwrap_or_else(|| panic!("pipeline.md has no row for {name}"));
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            // | register | bits | meaning | written by | read by |
            if numbers(cells[4]) != writes {
                problems.push(format!(
                    "{name}: pipeline.md says written by {:?}, the rows by {writes:?}",
                    numbers(cells[4])
                ));
            }
            if numbers(cells[5]) != reads {
                problems.push(format!(
                    "{name}: pipeline.md says read by {:?}, the rows by {reads:?}",
                    numbers(cells[5])
                ));
            }
        }
        let unknown: Vec<u8> = derived
            .keys()
            .filter(|n| !Reg::ALL.iter().any(|r| r.number() == **n))
            .copied()
            .collect();
        assert!(
            unknown.is_empty(),
            "registers no entry declares: {unknown:?}"
        );
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}
