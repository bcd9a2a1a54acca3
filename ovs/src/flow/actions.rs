//! The actions a flow applies, as the pipeline needs them.
//!
//! Every action that carries a value or a bit range is a small struct with private fields and a
//! checked constructor (`Load::new`, `Move::new`, `SetField::new`, `Ct::exec`...), so a value that
//! does not fit its field, a move between ranges of different widths or a `ct(exec(...))` that
//! writes something other than `ct_mark` cannot be built: nothing here encodes silently to
//! something else or to nothing. "Drop" is the empty action list, as in OpenFlow.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::fields::{Field, Subfield};
use super::types::MacAddr;
use super::FlowError;

/// Reserved OpenFlow 1.3 port numbers.
pub mod ports {
    /// Highest number of a physical/logical port.
    pub const MAX: u32 = 0xffff_ff00;
    /// Send back out of the ingress port.
    pub const IN_PORT: u32 = 0xffff_fff8;
    /// Submit to the first table (packet-out only).
    pub const TABLE: u32 = 0xffff_fff9;
    /// The traditional non-OpenFlow pipeline.
    pub const NORMAL: u32 = 0xffff_fffa;
    /// Flood (all ports but ingress and blocked ones).
    pub const FLOOD: u32 = 0xffff_fffb;
    /// All ports but ingress.
    pub const ALL: u32 = 0xffff_fffc;
    /// The controller.
    pub const CONTROLLER: u32 = 0xffff_fffd;
    /// The bridge's local port.
    pub const LOCAL: u32 = 0xffff_fffe;
    /// Wildcard / no port.
    pub const ANY: u32 = 0xffff_ffff;

    /// The name `ovs-ofctl` prints for a reserved port.
    pub fn reserved_name(port: u32) -> Option<&'static str> {
        Some(match port {
            IN_PORT => "IN_PORT",
            TABLE => "TABLE",
            NORMAL => "NORMAL",
            FLOOD => "FLOOD",
            ALL => "ALL",
            CONTROLLER => "CONTROLLER",
            LOCAL => "LOCAL",
            ANY => "ANY",
            _ => return None,
        })
    }

    /// The reserved port named `name` (case-insensitive, as `ovs-ofctl` accepts it).
    pub fn from_reserved_name(name: &str) -> Option<u32> {
        [IN_PORT, TABLE, NORMAL, FLOOD, ALL, CONTROLLER, LOCAL, ANY]
            .into_iter()
            .find(|p| reserved_name(*p).is_some_and(|n| n.eq_ignore_ascii_case(name)))
            .or(match name {
                "NONE" | "none" => Some(ANY),
                _ => None,
            })
    }
}

/// `load:VALUE->DST`: writes an immediate value into a bit range (`NXAST_REG_LOAD`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Load {
    dst: Subfield,
    value: u64,
}

impl Load {
    /// Refuses a value wider than the destination range.
    pub fn new(dst: Subfield, value: u64) -> Result<Self, FlowError> {
        if dst.n_bits() > 64 {
            return Err(FlowError::Invalid(format!(
                "load writes at most 64 bits, not {} into {dst}: use set_field for the whole field",
                dst.n_bits()
            )));
        }
        if dst.n_bits() < 64 && value >> dst.n_bits() != 0 {
            return Err(FlowError::Invalid(format!(
                "load value {value:#x} does not fit {dst} ({} bits)",
                dst.n_bits()
            )));
        }
        Ok(Load { dst, value })
    }

    /// Destination range.
    pub fn dst(&self) -> Subfield {
        self.dst
    }

    /// Value, right-aligned.
    pub fn value(&self) -> u64 {
        self.value
    }
}

/// `set_field:VALUE->FIELD`: writes a whole field (`OFPAT_SET_FIELD`).
///
/// Partial writes are [`Load`]s: OpenFlow 1.3 has no masked set-field, and Open vSwitch turns one
/// into `load` anyway, so offering it here would not read back as written.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct SetField {
    field: Field,
    value: u128,
}

impl SetField {
    /// Refuses a value wider than the field.
    pub fn new(field: Field, value: u128) -> Result<Self, FlowError> {
        if field.bits() < 128 && value >> field.bits() != 0 {
            return Err(FlowError::Invalid(format!(
                "set_field value {value:#x} does not fit {} ({} bits)",
                field.name(),
                field.bits()
            )));
        }
        Ok(SetField { field, value })
    }

    /// The field written.
    pub fn field(&self) -> Field {
        self.field
    }

    /// The value, right-aligned (a MAC in the low 48 bits, an IPv4 address in the low 32).
    pub fn value(&self) -> u128 {
        self.value
    }
}

/// `move:SRC->DST`: copies a bit range (`NXAST_REG_MOVE`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Move {
    src: Subfield,
    dst: Subfield,
}

impl Move {
    /// Refuses ranges of different widths.
    pub fn new(src: Subfield, dst: Subfield) -> Result<Self, FlowError> {
        if src.n_bits() != dst.n_bits() {
            return Err(FlowError::Invalid(format!(
                "move from {src} ({} bits) to {dst} ({} bits): widths differ",
                src.n_bits(),
                dst.n_bits()
            )));
        }
        Ok(Move { src, dst })
    }

    /// Source range.
    pub fn src(&self) -> Subfield {
        self.src
    }

    /// Destination range.
    pub fn dst(&self) -> Subfield {
        self.dst
    }
}

/// `note:HEX`: an opaque annotation (`NXAST_NOTE`).
///
/// Stored padded with zeros exactly as the switch pads it on the wire, so a note read back from
/// a dump equals the note that was installed.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Note(Vec<u8>);

impl Note {
    /// A note carrying `bytes` (padded as on the wire).
    pub fn new(bytes: &[u8]) -> Self {
        // NXAST_NOTE: 10 bytes of header, then the note; the action is padded to 8 bytes.
        let total = (10 + bytes.len()).div_ceil(8) * 8;
        let mut data = bytes.to_vec();
        data.resize(total - 10, 0);
        Note(data)
    }

    /// The bytes, including padding.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// The bytes without trailing zero padding.
    pub fn trimmed(&self) -> &[u8] {
        let end = self.0.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
        &self.0[..end]
    }
}

/// The conntrack zone of a `ct` action.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum CtZone {
    /// Zone 0 (not printed).
    #[default]
    Default,
    /// `zone=N`.
    Immediate(u16),
    /// `zone=NXM_NX_REG0[0..15]`: taken from a 16-bit range.
    Field(Subfield),
}

/// Which addresses `nat` rewrites.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum NatKind {
    /// Source NAT: `nat(src=...)`.
    Src,
    /// Destination NAT: `nat(dst=...)`.
    Dst,
}

/// `nat` inside `ct(...)`. `Nat::default()` is plain `nat`: undo the NAT of an existing connection.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Nat {
    kind: Option<NatKind>,
    addrs: Option<(Ipv4Addr, Ipv4Addr)>,
    ports: Option<(u16, u16)>,
    persistent: bool,
    hash: bool,
    random: bool,
}

impl Nat {
    /// Plain `nat`.
    pub fn reverse() -> Self {
        Nat::default()
    }

    /// `nat(src=MIN[-MAX])` / `nat(dst=MIN[-MAX])`.
    pub fn new(kind: NatKind, min: Ipv4Addr, max: Ipv4Addr) -> Result<Self, FlowError> {
        if u32::from(max) < u32::from(min) {
            return Err(FlowError::Invalid(format!(
                "nat range {min}-{max} is empty"
            )));
        }
        Ok(Nat {
            kind: Some(kind),
            addrs: Some((min, max)),
            ..Nat::default()
        })
    }

    /// `nat(src)` / `nat(dst)` without a range.
    pub fn kind_only(kind: NatKind) -> Self {
        Nat {
            kind: Some(kind),
            ..Nat::default()
        }
    }

    /// Adds a port range `:MIN[-MAX]`; needs an address range.
    pub fn ports(mut self, min: u16, max: u16) -> Result<Self, FlowError> {
        if self.addrs.is_none() {
            return Err(FlowError::Invalid(
                "nat port range needs an address range".into(),
            ));
        }
        if min == 0 || max < min {
            return Err(FlowError::Invalid(format!(
                "nat port range {min}-{max} is invalid"
            )));
        }
        self.ports = Some((min, max));
        Ok(self)
    }

    /// Adds the `persistent`, `hash` and `random` flags (only with an address range).
    pub fn flags(mut self, persistent: bool, hash: bool, random: bool) -> Result<Self, FlowError> {
        if self.addrs.is_none() && (persistent || hash || random) {
            return Err(FlowError::Invalid("nat flags need an address range".into()));
        }
        if hash && random {
            return Err(FlowError::Invalid(
                "nat cannot be both hash and random".into(),
            ));
        }
        self.persistent = persistent;
        self.hash = hash;
        self.random = random;
        Ok(self)
    }

    /// Source or destination NAT; `None` for plain `nat`.
    pub fn kind(&self) -> Option<NatKind> {
        self.kind
    }

    /// Address range.
    pub fn addrs(&self) -> Option<(Ipv4Addr, Ipv4Addr)> {
        self.addrs
    }

    /// Port range.
    pub fn port_range(&self) -> Option<(u16, u16)> {
        self.ports
    }

    /// (persistent, hash, random).
    pub fn flag_bits(&self) -> (bool, bool, bool) {
        (self.persistent, self.hash, self.random)
    }
}

/// `ct(...)`: send the packet through the connection tracker (`NXAST_CT`).
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct Ct {
    commit: bool,
    force: bool,
    table: Option<u8>,
    zone: CtZone,
    nat: Option<Nat>,
    exec: Vec<Action>,
}

impl Ct {
    /// `ct()`: track without committing, continue in this pipeline.
    pub fn new() -> Self {
        Ct::default()
    }

    /// `commit`.
    pub fn commit(mut self) -> Self {
        self.commit = true;
        self
    }

    /// `force` (implies commit).
    pub fn force(mut self) -> Self {
        self.commit = true;
        self.force = true;
        self
    }

    /// `table=T`: recirculate to table T after conntrack.
    pub fn table(mut self, table: u8) -> Self {
        self.table = Some(table);
        self
    }

    /// `zone=N`.
    pub fn zone(mut self, zone: u16) -> Self {
        self.zone = if zone == 0 {
            CtZone::Default
        } else {
            CtZone::Immediate(zone)
        };
        self
    }

    /// `zone=SUBFIELD`; the range must be 16 bits wide.
    pub fn zone_from(mut self, src: Subfield) -> Result<Self, FlowError> {
        if src.n_bits() != 16 {
            return Err(FlowError::Invalid(format!(
                "ct zone from {src} must be 16 bits wide, not {}",
                src.n_bits()
            )));
        }
        self.zone = CtZone::Field(src);
        Ok(self)
    }

    /// `nat(...)`.
    pub fn nat(mut self, nat: Nat) -> Self {
        self.nat = Some(nat);
        self
    }

    /// `exec(...)`: only `load`/`set_field`/`move` into `ct_mark`, and only with `commit`, as
    /// Open vSwitch requires (a `move` may read any field, e.g. a register).
    pub fn exec(mut self, action: Action) -> Result<Self, FlowError> {
        let target = match &action {
            Action::Load(l) => l.dst().field(),
            Action::SetField(s) => s.field(),
            Action::Move(m) => m.dst().field(),
            other => {
                return Err(FlowError::Invalid(format!(
                    "ct(exec(...)) may only load, set or move into ct_mark, not {other:?}"
                )))
            }
        };
        if target != Field::CtMark {
            return Err(FlowError::Invalid(format!(
                "ct(exec(...)) may only write ct_mark, not {}",
                target.name()
            )));
        }
        if !self.commit {
            return Err(FlowError::Invalid("ct(exec(...)) needs commit".into()));
        }
        self.exec.push(action);
        Ok(self)
    }

    /// Whether the connection is committed.
    pub fn is_commit(&self) -> bool {
        self.commit
    }

    /// Whether `force` is set.
    pub fn is_force(&self) -> bool {
        self.force
    }

    /// Recirculation table.
    pub fn recirc_table(&self) -> Option<u8> {
        self.table
    }

    /// The zone.
    pub fn zone_spec(&self) -> CtZone {
        self.zone
    }

    /// The NAT, if any.
    pub fn nat_spec(&self) -> Option<Nat> {
        self.nat
    }

    /// The nested actions of `exec(...)`.
    pub fn exec_actions(&self) -> &[Action] {
        &self.exec
    }
}

/// The most bytes of userdata a [`Action::ToController`] row carries here (Open vSwitch allows
/// more; what a row tells the agent is a few ids).
pub const USERDATA_MAX: usize = 64;

/// One action of an apply-actions instruction.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Action {
    /// `output:P` (or `IN_PORT`, `LOCAL`, ...).
    Output(u32),
    /// `CONTROLLER:max_len`.
    Controller {
        /// Bytes of the packet to send (65535 = whole packet, unbuffered).
        max_len: u16,
    },
    /// `controller(max_len=N,userdata=XX.XX,meter_id=M)` (`NXAST_CONTROLLER2`): the packet to
    /// the controller as `NXT_PACKET_IN2` with the row's `userdata`, through meter `meter_id`
    /// when set. The row's other actions go on: only what reaches the controller is metered,
    /// never the traffic itself. Build with [`Action::to_controller`].
    ToController {
        /// Bytes of the packet to send (65535 = the whole packet).
        max_len: u16,
        /// What the row tells the controller: 1 to [`USERDATA_MAX`] bytes.
        userdata: Vec<u8>,
        /// The meter that limits the packets sent.
        meter_id: Option<u32>,
        /// The controller connection that gets the packet (`id=N`): only connections that
        /// set this id (`NXT_SET_CONTROLLER_ID`) receive it; 0, the default, is every
        /// connection that did not.
        controller_id: u16,
    },
    /// `output:NXM_NX_REG2[]`: output to the port number held in a field (`NXAST_OUTPUT_REG`).
    OutputReg(Subfield),
    /// `resubmit(,T)`.
    Resubmit {
        /// Table to resubmit to.
        table: u8,
    },
    /// `load:V->DST`.
    Load(Load),
    /// `set_field:V->FIELD`.
    SetField(SetField),
    /// `move:SRC->DST`.
    Move(Move),
    /// `ct(...)`.
    Ct(Ct),
    /// `note:...`.
    Note(Note),
    /// `group:G`.
    Group(u32),
    /// `meter:M`: police the packet with meter M (OpenFlow 1.3 encodes it as the `OFPIT_METER`
    /// instruction, so it is only valid as the first action of a flow).
    Meter(u32),
    /// Actions read from a switch that this model cannot hold (another agent's flows, e.g.
    /// openshift-sdn's `resubmit:10`, in_port form), with why: such a flow still has its
    /// table, priority and match, so a reconcile deletes or replaces it (no desired flow has
    /// this action). It cannot be encoded.
    Undecoded(String),
    /// `conjunction(ID,K/N)` (`NXAST_CONJUNCTION`): this flow is clause K of N of conjunctive
    /// match ID; a packet that matches a flow of every clause matches the flow with `conj_id=ID`.
    /// Built with [`Action::conjunction`].
    Conjunction {
        /// The conjunction id (what `conj_id` matches).
        id: u32,
        /// The clause, 1-based.
        clause: u8,
        /// The number of clauses (2..=64).
        n_clauses: u8,
    },
}

impl Action {
    /// `output:P`; refuses port 0 and `ANY`, which are not output ports.
    pub fn output(port: u32) -> Result<Action, FlowError> {
        if port == 0 || port == ports::ANY || port == ports::CONTROLLER {
            return Err(FlowError::Invalid(format!(
                "output to port {port:#x} is not an output port (use Action::controller for the controller)"
            )));
        }
        Ok(Action::Output(port))
    }

    /// `output:P` for a port number known to be valid (a constant of the pipeline).
    pub fn output_port(port: u16) -> Action {
        assert!(port != 0, "port 0 is not an output port");
        Action::Output(port as u32)
    }

    /// `IN_PORT`.
    pub fn in_port() -> Action {
        Action::Output(ports::IN_PORT)
    }

    /// `CONTROLLER:65535`.
    pub fn controller() -> Action {
        Action::Controller { max_len: 0xffff }
    }

    /// `controller(userdata=..,meter_id=..)` with the whole packet. `userdata` must hold 1 to
    /// [`USERDATA_MAX`] bytes (with none, Open vSwitch would show the row as `CONTROLLER:N`);
    /// a meter id must be a meter's (1 to 0xffff0000).
    pub fn to_controller(userdata: Vec<u8>, meter_id: Option<u32>) -> Result<Action, FlowError> {
        let a = Action::ToController {
            max_len: 0xffff,
            userdata,
            meter_id,
            controller_id: 0,
        };
        a.validate()?;
        Ok(a)
    }

    /// `output:SUBFIELD`; the range must be at least 16 bits (a port number).
    pub fn output_reg(src: Subfield) -> Result<Action, FlowError> {
        if src.n_bits() < 16 {
            return Err(FlowError::Invalid(format!(
                "output:{src} is too narrow for a port number (needs 16 bits)"
            )));
        }
        Ok(Action::OutputReg(src))
    }

    /// `resubmit(,T)`; table 255 is not a table.
    pub fn resubmit(table: u8) -> Result<Action, FlowError> {
        if table == 255 {
            return Err(FlowError::Invalid(
                "resubmit to table 255: there is no such table".into(),
            ));
        }
        Ok(Action::Resubmit { table })
    }

    /// `load:V->DST`.
    pub fn load(dst: Subfield, value: u64) -> Result<Action, FlowError> {
        Load::new(dst, value).map(Action::Load)
    }

    /// `load:V->FIELD[]` into a whole register, the pipeline's most common action.
    pub fn load_reg(reg: u8, value: u32) -> Action {
        assert!(reg < 8, "there is no reg{reg}");
        Action::Load(Load {
            dst: Subfield::whole(Field::Reg(reg)),
            value: value as u64,
        })
    }

    /// `set_field:V->FIELD`.
    pub fn set_field(field: Field, value: u64) -> Result<Action, FlowError> {
        SetField::new(field, u128::from(value)).map(Action::SetField)
    }

    /// `set_field:A->tun_dst`.
    pub fn set_tun_dst(addr: Ipv4Addr) -> Action {
        Action::SetField(SetField {
            field: Field::TunDst,
            value: u128::from(u32::from(addr)),
        })
    }

    /// `set_field:A->tun_ipv6_dst`: the outer IPv6 destination of a tunnel.
    pub fn set_tun_ipv6_dst(addr: Ipv6Addr) -> Action {
        Action::SetField(SetField {
            field: Field::TunIpv6Dst,
            value: u128::from(addr),
        })
    }

    /// The tunnel's outer destination of either family: `tun_dst` or `tun_ipv6_dst`.
    pub fn set_tunnel_dst(addr: IpAddr) -> Action {
        match addr {
            IpAddr::V4(a) => Action::set_tun_dst(a),
            IpAddr::V6(a) => Action::set_tun_ipv6_dst(a),
        }
    }

    /// `set_field:M->eth_dst`.
    pub fn set_eth_dst(mac: MacAddr) -> Action {
        let mut b = [0u8; 8];
        b[2..].copy_from_slice(&mac.0);
        Action::SetField(SetField {
            field: Field::EthDst,
            value: u128::from(u64::from_be_bytes(b)),
        })
    }

    /// `move:SRC->DST`.
    pub fn move_bits(src: Subfield, dst: Subfield) -> Result<Action, FlowError> {
        Move::new(src, dst).map(Action::Move)
    }

    /// `note:...`.
    pub fn note(bytes: &[u8]) -> Action {
        Action::Note(Note::new(bytes))
    }

    /// `group:G`; refuses the reserved ids `ALL` and `ANY`.
    pub fn group(id: u32) -> Result<Action, FlowError> {
        if id > 0xffff_ff00 {
            return Err(FlowError::Invalid(format!(
                "group {id:#x} is a reserved group id"
            )));
        }
        Ok(Action::Group(id))
    }

    /// `conjunction(ID,K/N)`; refuses N outside 2..=64 (Open vSwitch's bounds) and K outside
    /// 1..=N.
    pub fn conjunction(id: u32, clause: u8, n_clauses: u8) -> Result<Action, FlowError> {
        if !(2..=64).contains(&n_clauses) || clause == 0 || clause > n_clauses {
            return Err(FlowError::Invalid(format!(
                "conjunction({id},{clause}/{n_clauses}): the clause count must be 2..=64 and the clause 1..={n_clauses}"
            )));
        }
        Ok(Action::Conjunction {
            id,
            clause,
            n_clauses,
        })
    }

    /// `meter:M`; refuses 0 and the reserved ids above `OFPM_MAX` (0xffff0000).
    pub fn meter(id: u32) -> Result<Action, FlowError> {
        if id == 0 || id > 0xffff_0000 {
            return Err(FlowError::Invalid(format!(
                "meter id {id:#x} is not in 1..=0xffff0000"
            )));
        }
        Ok(Action::Meter(id))
    }

    /// Checks invariants that fields alone cannot express (used on decoded actions too).
    pub fn validate(&self) -> Result<(), FlowError> {
        match self {
            Action::Output(p) if *p == 0 || *p == ports::ANY => Err(FlowError::Invalid(format!(
                "output to port {p:#x} is not an output port"
            ))),
            Action::Resubmit { table: 255 } => {
                Err(FlowError::Invalid("resubmit to table 255".into()))
            }
            Action::Meter(id) => Action::meter(*id).map(|_| ()),
            Action::Undecoded(why) => Err(FlowError::Invalid(format!(
                "actions read from the switch that cannot be held: {why}"
            ))),
            Action::Conjunction {
                id,
                clause,
                n_clauses,
            } => Action::conjunction(*id, *clause, *n_clauses).map(|_| ()),
            Action::ToController {
                userdata, meter_id, ..
            } => {
                if userdata.is_empty() || userdata.len() > USERDATA_MAX {
                    return Err(FlowError::Invalid(format!(
                        "controller userdata of {} bytes: 1 to {USERDATA_MAX} are allowed",
                        userdata.len()
                    )));
                }
                match meter_id {
                    Some(m) => Action::meter(*m).map(|_| ()),
                    None => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_refuses_values_that_do_not_fit() {
        let dst = Subfield::range(Field::Reg(4), 0, 3).unwrap();
        assert!(Load::new(dst, 0xf).is_ok());
        let err = Load::new(dst, 0x10).unwrap_err().to_string();
        assert!(err.contains("does not fit NXM_NX_REG4[0..3]"), "{err}");
        assert!(Load::new(Subfield::whole(Field::TunId), u64::MAX).is_ok());
    }

    #[test]
    fn move_needs_equal_widths() {
        let src = Subfield::whole(Field::Reg(0));
        assert!(Move::new(src, Subfield::range(Field::TunId, 0, 31).unwrap()).is_ok());
        assert!(Move::new(src, Subfield::whole(Field::TunId)).is_err());
    }

    #[test]
    fn note_is_padded_like_the_wire() {
        assert_eq!(Note::new(b"abc").bytes(), b"abc\0\0\0");
        assert_eq!(Note::new(b"subnet.1").bytes().len(), 14);
        assert_eq!(Note::new(b"abcdef").bytes().len(), 6);
        assert_eq!(Note::new(b"abc").trimmed(), b"abc");
    }

    #[test]
    fn conjunctions_are_bounded_as_open_vswitch_bounds_them() {
        assert!(Action::conjunction(7, 1, 2).is_ok());
        assert!(Action::conjunction(7, 64, 64).is_ok());
        for (k, n) in [(1, 1), (0, 2), (3, 2), (1, 65)] {
            let e = Action::conjunction(7, k, n).unwrap_err().to_string();
            assert!(e.contains(&format!("conjunction(7,{k}/{n})")), "{e}");
        }
        let bad = Action::Conjunction {
            id: 1,
            clause: 3,
            n_clauses: 2,
        };
        assert!(bad.validate().is_err(), "built directly, still refused");
    }

    #[test]
    fn ct_exec_only_writes_ct_mark_with_commit() {
        let mark = Action::set_field(Field::CtMark, 1).unwrap();
        assert!(Ct::new().exec(mark.clone()).is_err());
        assert!(Ct::new().commit().exec(mark).is_ok());
        assert!(Ct::new().commit().exec(Action::load_reg(0, 1)).is_err());
        let reg_to_mark = Move::new(
            Subfield::range(Field::Reg(4), 0, 0).unwrap(),
            Subfield::range(Field::CtMark, 0, 0).unwrap(),
        )
        .unwrap();
        assert!(Ct::new().commit().exec(Action::Move(reg_to_mark)).is_ok());
        let mark_to_reg = Move::new(
            Subfield::range(Field::CtMark, 0, 0).unwrap(),
            Subfield::range(Field::Reg(4), 0, 0).unwrap(),
        )
        .unwrap();
        assert!(Ct::new().commit().exec(Action::Move(mark_to_reg)).is_err());
        assert!(Ct::new().zone_from(Subfield::whole(Field::Reg(0))).is_err());
    }

    #[test]
    fn outputs_that_encode_nothing_are_refused() {
        assert!(Action::output(0).is_err());
        assert!(Action::output(ports::ANY).is_err());
        assert!(Action::output_reg(Subfield::range(Field::Reg(2), 0, 7).unwrap()).is_err());
        assert!(Action::resubmit(255).is_err());
    }
}
