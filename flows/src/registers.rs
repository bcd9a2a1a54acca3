//! The register registry: every register the pipeline uses, declared once with its bits, its
//! meaning and the tables that write and read it (docs/pipeline.md, "Registers"). Builders say
//! `Reg::SrcVnid.load(v)` and `Reg::OutPort.output()`, never `reg0` or `Field::Reg(2)`; a new
//! feature that needs a register adds it here, where a clash with an existing one is visible.
//!
//! Also here: the one place a VNID is copied between `reg0` and the VXLAN tunnel id (the VNI),
//! both ways.

use ovs::flow::{Action, Field, Match, Move, Subfield};

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
    /// `reg4`: 1 for a packet a pod sent to a Service that the node DNAT'd back into br0 through
    /// tun0 (table 0), on the userspace datapath: the commit that records the connection copies
    /// it into `ct_mark`, so the connection's replies go back through the node.
    ViaHost,
}

impl Reg {
    /// Every register, by number.
    pub const ALL: [Reg; 5] = [
        Reg::SrcVnid,
        Reg::DstVnid,
        Reg::OutPort,
        Reg::SrcPort,
        Reg::ViaHost,
    ];

    /// The NXM register number (`regN`).
    pub const fn number(self) -> u8 {
        match self {
            Reg::SrcVnid => 0,
            Reg::DstVnid => 1,
            Reg::OutPort => 2,
            Reg::SrcPort => 3,
            Reg::ViaHost => 4,
        }
    }

    /// The bits in use, inclusive (VNIDs are 24 bits but travel as the 32-bit VNI; ports are
    /// 32-bit ofports; the via-host flag is one bit).
    pub const fn bits(self) -> (u8, u8) {
        match self {
            Reg::ViaHost => (0, 0),
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
            Reg::ViaHost => "1: a pod's packet to a Service, back from the node's DNAT",
        }
    }

    /// The tables that write it.
    pub const fn written_by(self) -> &'static [Table] {
        match self {
            Reg::SrcVnid => &[Table::Classifier, Table::SourceVnid],
            Reg::DstVnid => &[Table::DestinationVnid],
            Reg::OutPort => &[Table::LocalArp, Table::LocalIp],
            Reg::SrcPort => &[Table::PodEgressSpoofguard, Table::ServiceReturn],
            Reg::ViaHost => &[Table::Classifier],
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

    #[test]
    fn registers_are_distinct_and_print_as_ovs_ofctl_does() {
        let mut numbers: Vec<u8> = Reg::ALL.iter().map(|r| r.number()).collect();
        numbers.dedup();
        assert_eq!(numbers, vec![0, 1, 2, 3, 4]);
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
        assert_eq!(Reg::ViaHost.bits(), (0, 0));
    }
}
