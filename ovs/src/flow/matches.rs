//! The match half of a flow: the fields the pipeline matches on, each optional and canonical.
//!
//! Fields are plain public `Option`s so that decoding from the wire and parsing text can fill
//! them directly; [`Match::validate`] checks what Open vSwitch checks (prerequisites such as
//! `nw_src` needing `ip`) so a flow is refused here, with the field named, before the switch
//! would refuse it.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::types::{MacAddr, Masked};
use super::FlowError;

/// EtherType of IPv4.
pub const ETH_TYPE_IP: u16 = 0x0800;
/// EtherType of ARP.
pub const ETH_TYPE_ARP: u16 = 0x0806;
/// EtherType of IPv6.
pub const ETH_TYPE_IPV6: u16 = 0x86dd;
/// IP protocol number of ICMPv6.
pub const IPPROTO_ICMPV6: u8 = 58;
/// ICMPv6 type of a neighbour solicitation.
pub const ICMPV6_NEIGHBOR_SOLICIT: u8 = 135;
/// ICMPv6 type of a neighbour advertisement.
pub const ICMPV6_NEIGHBOR_ADVERT: u8 = 136;
/// IP protocol number of TCP.
pub const IPPROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// IP protocol number of SCTP.
pub const IPPROTO_SCTP: u8 = 132;
/// IP protocol number of ICMP.
pub const IPPROTO_ICMP: u8 = 1;

/// Connection-tracking state bits, in the order Open vSwitch prints them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u32)]
pub enum CtFlag {
    /// `new`
    New = 0x01,
    /// `est`
    Est = 0x02,
    /// `rel`
    Rel = 0x04,
    /// `rpl`
    Rpl = 0x08,
    /// `inv`
    Inv = 0x10,
    /// `trk`
    Trk = 0x20,
    /// `snat`
    Snat = 0x40,
    /// `dnat`
    Dnat = 0x80,
}

impl CtFlag {
    /// Every flag, lowest bit first.
    pub const ALL: [CtFlag; 8] = [
        CtFlag::New,
        CtFlag::Est,
        CtFlag::Rel,
        CtFlag::Rpl,
        CtFlag::Inv,
        CtFlag::Trk,
        CtFlag::Snat,
        CtFlag::Dnat,
    ];

    /// The name `ovs-ofctl` uses.
    pub fn name(self) -> &'static str {
        match self {
            CtFlag::New => "new",
            CtFlag::Est => "est",
            CtFlag::Rel => "rel",
            CtFlag::Rpl => "rpl",
            CtFlag::Inv => "inv",
            CtFlag::Trk => "trk",
            CtFlag::Snat => "snat",
            CtFlag::Dnat => "dnat",
        }
    }
}

/// A `ct_state` match: the flags that must be set (`+trk`) and must be clear (`-trk`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct CtState {
    /// Bits that must be set.
    pub set: u32,
    /// Bits that must be clear.
    pub clear: u32,
}

impl CtState {
    /// No constraint yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requires `flag` to be set (`+flag`).
    pub fn plus(mut self, flag: CtFlag) -> Self {
        self.set |= flag as u32;
        self.clear &= !(flag as u32);
        self
    }

    /// Requires `flag` to be clear (`-flag`).
    pub fn minus(mut self, flag: CtFlag) -> Self {
        self.clear |= flag as u32;
        self.set &= !(flag as u32);
        self
    }

    /// Value and mask as carried on the wire.
    pub fn value_mask(&self) -> (u32, u32) {
        (self.set, self.set | self.clear)
    }

    /// From the wire's value and mask.
    pub fn from_value_mask(value: u32, mask: u32) -> Self {
        let mask = mask & Self::ALL_FLAGS;
        CtState {
            set: value & mask,
            clear: !value & mask,
        }
    }

    /// Every defined flag bit.
    pub const ALL_FLAGS: u32 = 0xff;

    /// Whether every flag is constrained (OVS then prints `new|trk` instead of `+new-est...`).
    pub fn is_exact(&self) -> bool {
        (self.set | self.clear) & Self::ALL_FLAGS == Self::ALL_FLAGS
    }
}

/// The match of a flow. `None` means "any".
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct Match {
    /// Ingress OpenFlow port.
    pub in_port: Option<u32>,
    /// Ethernet source (`dl_src`).
    pub eth_src: Option<Masked<MacAddr>>,
    /// Ethernet destination (`dl_dst`).
    pub eth_dst: Option<Masked<MacAddr>>,
    /// EtherType; set by [`Match::ip`], [`Match::ipv6`], [`Match::arp`] and the L4 shorthands.
    pub eth_type: Option<u16>,
    /// IP protocol (`nw_proto`); needs `ip` or `ipv6`.
    pub ip_proto: Option<u8>,
    /// The DSCP (`ip_dscp`, 0..=63; `ovs-ofctl` prints it as `nw_tos`, the DSCP shifted left
    /// two bits); needs `ip` or `ipv6`.
    pub ip_dscp: Option<u8>,
    /// IPv4 source (`nw_src`); needs `ip`.
    pub ipv4_src: Option<Masked<Ipv4Addr>>,
    /// IPv4 destination (`nw_dst`); needs `ip`.
    pub ipv4_dst: Option<Masked<Ipv4Addr>>,
    /// IPv6 source (`ipv6_src`); needs `ipv6`.
    pub ipv6_src: Option<Masked<Ipv6Addr>>,
    /// IPv6 destination (`ipv6_dst`); needs `ipv6`.
    pub ipv6_dst: Option<Masked<Ipv6Addr>>,
    /// ICMP type (`icmp_type`): of ICMPv4 under `icmp`, of ICMPv6 under `icmp6`.
    pub icmp_type: Option<u8>,
    /// ICMP code (`icmp_code`), under `icmp` or `icmp6`.
    pub icmp_code: Option<u8>,
    /// Neighbour discovery target (`nd_target`); needs `icmp6` with `icmp_type` 135 or 136.
    pub nd_target: Option<Masked<Ipv6Addr>>,
    /// Source link-layer address option of a solicitation (`nd_sll`); needs `icmp_type=135`.
    pub nd_sll: Option<Masked<MacAddr>>,
    /// Target link-layer address option of an advertisement (`nd_tll`); needs `icmp_type=136`.
    pub nd_tll: Option<Masked<MacAddr>>,
    /// ARP opcode; needs `arp`.
    pub arp_op: Option<u16>,
    /// ARP sender protocol address; needs `arp`.
    pub arp_spa: Option<Masked<Ipv4Addr>>,
    /// ARP target protocol address; needs `arp`.
    pub arp_tpa: Option<Masked<Ipv4Addr>>,
    /// ARP sender hardware address; needs `arp`.
    pub arp_sha: Option<Masked<MacAddr>>,
    /// ARP target hardware address; needs `arp`.
    pub arp_tha: Option<Masked<MacAddr>>,
    /// TCP/UDP/SCTP source port (`tp_src`); needs `ip_proto` 6, 17 or 132.
    pub tp_src: Option<Masked<u16>>,
    /// TCP/UDP/SCTP destination port (`tp_dst`); needs `ip_proto` 6, 17 or 132.
    pub tp_dst: Option<Masked<u16>>,
    /// `reg0`..`reg7`.
    pub regs: [Option<Masked<u32>>; 8],
    /// Tunnel key (`tun_id`).
    pub tun_id: Option<Masked<u64>>,
    /// Outer IPv4 source of the tunnel.
    pub tun_src: Option<Masked<Ipv4Addr>>,
    /// Outer IPv4 destination of the tunnel.
    pub tun_dst: Option<Masked<Ipv4Addr>>,
    /// Outer IPv6 source of the tunnel.
    pub tun_ipv6_src: Option<Masked<Ipv6Addr>>,
    /// Outer IPv6 destination of the tunnel.
    pub tun_ipv6_dst: Option<Masked<Ipv6Addr>>,
    /// Connection-tracking state.
    pub ct_state: Option<CtState>,
    /// Connection-tracking mark.
    pub ct_mark: Option<Masked<u32>>,
    /// `conj_id=ID`: the packet matched every clause of conjunction ID (exact).
    pub conj_id: Option<u32>,
    /// Connection-tracking zone.
    pub ct_zone: Option<u16>,
    /// Packet mark.
    pub pkt_mark: Option<Masked<u32>>,
}

impl Match {
    /// Matches every packet.
    pub fn any() -> Self {
        Self::default()
    }

    /// Whether no field is constrained.
    pub fn is_any(&self) -> bool {
        *self == Self::default()
    }

    /// Checks the prerequisites Open vSwitch enforces (`OFPBMC_BAD_PREREQ`) and value ranges.
    pub fn validate(&self) -> Result<(), FlowError> {
        let need = |ok: bool, field: &str, what: &str| {
            if ok {
                Ok(())
            } else {
                Err(FlowError::Invalid(format!("match on {field} needs {what}")))
            }
        };
        let ip = self.eth_type == Some(ETH_TYPE_IP);
        let ip6 = self.eth_type == Some(ETH_TYPE_IPV6);
        let arp = self.eth_type == Some(ETH_TYPE_ARP);
        need(
            self.ip_proto.is_none() || ip || ip6,
            "nw_proto",
            "ip or ipv6",
        )?;
        need(self.ip_dscp.is_none() || ip || ip6, "ip_dscp", "ip or ipv6")?;
        if let Some(d) = self.ip_dscp.filter(|d| *d > 63) {
            return Err(FlowError::Invalid(format!(
                "ip_dscp={d}: a DSCP is 0..=63 (nw_tos is the DSCP times 4)"
            )));
        }
        need(self.ipv4_src.is_none() || ip, "nw_src", "ip")?;
        need(self.ipv4_dst.is_none() || ip, "nw_dst", "ip")?;
        need(self.ipv6_src.is_none() || ip6, "ipv6_src", "ipv6")?;
        need(self.ipv6_dst.is_none() || ip6, "ipv6_dst", "ipv6")?;
        let icmp = (ip && self.ip_proto == Some(IPPROTO_ICMP))
            || (ip6 && self.ip_proto == Some(IPPROTO_ICMPV6));
        need(
            self.icmp_type.is_none() || icmp,
            "icmp_type",
            "icmp or icmp6",
        )?;
        need(
            self.icmp_code.is_none() || icmp,
            "icmp_code",
            "icmp or icmp6",
        )?;
        let nd_type =
            |t: u8| ip6 && self.ip_proto == Some(IPPROTO_ICMPV6) && self.icmp_type == Some(t);
        let nd = nd_type(ICMPV6_NEIGHBOR_SOLICIT) || nd_type(ICMPV6_NEIGHBOR_ADVERT);
        let nd_what = "icmp6 with icmp_type=135 or 136";
        need(self.nd_target.is_none() || nd, "nd_target", nd_what)?;
        let ns_what = "icmp6 with icmp_type=135";
        need(
            self.nd_sll.is_none() || nd_type(ICMPV6_NEIGHBOR_SOLICIT),
            "nd_sll",
            ns_what,
        )?;
        let na_what = "icmp6 with icmp_type=136";
        need(
            self.nd_tll.is_none() || nd_type(ICMPV6_NEIGHBOR_ADVERT),
            "nd_tll",
            na_what,
        )?;
        if (self.nd_target.is_some() || self.nd_sll.is_some() || self.nd_tll.is_some())
            && self.icmp_code.is_some_and(|c| c != 0)
        {
            return Err(FlowError::Invalid(
                "match on nd_target, nd_sll or nd_tll needs icmp_code=0 (or no icmp_code)".into(),
            ));
        }
        need(self.arp_op.is_none() || arp, "arp_op", "arp")?;
        need(self.arp_spa.is_none() || arp, "arp_spa", "arp")?;
        need(self.arp_tpa.is_none() || arp, "arp_tpa", "arp")?;
        need(self.arp_sha.is_none() || arp, "arp_sha", "arp")?;
        need(self.arp_tha.is_none() || arp, "arp_tha", "arp")?;
        let l4 = (ip || ip6)
            && matches!(
                self.ip_proto,
                Some(IPPROTO_TCP | IPPROTO_UDP | IPPROTO_SCTP)
            );
        need(self.tp_src.is_none() || l4, "tp_src", "tcp, udp or sctp")?;
        need(self.tp_dst.is_none() || l4, "tp_dst", "tcp, udp or sctp")?;
        if let Some(st) = self.ct_state {
            if st.value_mask().1 == 0 {
                return Err(FlowError::Invalid(
                    "ct_state without any +flag or -flag: leave it out instead".into(),
                ));
            }
        }
        if let Some(op) = self.arp_op {
            if op > 0xff {
                return Err(FlowError::Invalid(format!(
                    "arp_op {op} does not fit 8 bits"
                )));
            }
        }
        Ok(())
    }

    // Builders, chainable: `Match::any().ip().nw_dst(...)`.

    /// `in_port=P`.
    pub fn in_port(mut self, port: u32) -> Self {
        self.in_port = Some(port);
        self
    }

    /// `ip` (EtherType 0x0800).
    pub fn ip(mut self) -> Self {
        self.eth_type = Some(ETH_TYPE_IP);
        self
    }

    /// `ipv6` (EtherType 0x86dd).
    pub fn ipv6(mut self) -> Self {
        self.eth_type = Some(ETH_TYPE_IPV6);
        self
    }

    /// `tcp6` (ipv6, nw_proto=6).
    pub fn tcp6(self) -> Self {
        self.ipv6().nw_proto(IPPROTO_TCP)
    }

    /// `udp6` (ipv6, nw_proto=17).
    pub fn udp6(self) -> Self {
        self.ipv6().nw_proto(IPPROTO_UDP)
    }

    /// `sctp6` (ipv6, nw_proto=132).
    pub fn sctp6(self) -> Self {
        self.ipv6().nw_proto(IPPROTO_SCTP)
    }

    /// `icmp6` (ipv6, nw_proto=58).
    pub fn icmp6(self) -> Self {
        self.ipv6().nw_proto(IPPROTO_ICMPV6)
    }

    /// `icmp` (ip, nw_proto=1).
    pub fn icmp(self) -> Self {
        self.ip().nw_proto(IPPROTO_ICMP)
    }

    /// `ipv6_src=A[/mask]`.
    pub fn ipv6_src(mut self, addr: impl Into<Masked<Ipv6Addr>>) -> Self {
        self.ipv6_src = Some(addr.into());
        self
    }

    /// `ipv6_dst=A[/mask]`.
    pub fn ipv6_dst(mut self, addr: impl Into<Masked<Ipv6Addr>>) -> Self {
        self.ipv6_dst = Some(addr.into());
        self
    }

    /// `icmp_type=T`.
    pub fn icmp_type(mut self, t: u8) -> Self {
        self.icmp_type = Some(t);
        self
    }

    /// `icmp_code=C`.
    pub fn icmp_code(mut self, c: u8) -> Self {
        self.icmp_code = Some(c);
        self
    }

    /// `nd_target=A[/mask]`.
    pub fn nd_target(mut self, addr: impl Into<Masked<Ipv6Addr>>) -> Self {
        self.nd_target = Some(addr.into());
        self
    }

    /// `nd_sll=M[/mask]`.
    pub fn nd_sll(mut self, mac: impl Into<Masked<MacAddr>>) -> Self {
        self.nd_sll = Some(mac.into());
        self
    }

    /// `nd_tll=M[/mask]`.
    pub fn nd_tll(mut self, mac: impl Into<Masked<MacAddr>>) -> Self {
        self.nd_tll = Some(mac.into());
        self
    }

    /// `tun_ipv6_src=A[/mask]`.
    pub fn tun_ipv6_src(mut self, addr: impl Into<Masked<Ipv6Addr>>) -> Self {
        self.tun_ipv6_src = Some(addr.into());
        self
    }

    /// `tun_ipv6_dst=A[/mask]`.
    pub fn tun_ipv6_dst(mut self, addr: impl Into<Masked<Ipv6Addr>>) -> Self {
        self.tun_ipv6_dst = Some(addr.into());
        self
    }

    /// `arp` (EtherType 0x0806).
    pub fn arp(mut self) -> Self {
        self.eth_type = Some(ETH_TYPE_ARP);
        self
    }

    /// `tcp` (ip, nw_proto=6).
    pub fn tcp(self) -> Self {
        self.ip().nw_proto(IPPROTO_TCP)
    }

    /// `udp` (ip, nw_proto=17).
    pub fn udp(self) -> Self {
        self.ip().nw_proto(IPPROTO_UDP)
    }

    /// `sctp` (ip, nw_proto=132).
    pub fn sctp(self) -> Self {
        self.ip().nw_proto(IPPROTO_SCTP)
    }

    /// `nw_proto=N`.
    pub fn nw_proto(mut self, proto: u8) -> Self {
        self.ip_proto = Some(proto);
        self
    }

    /// `dl_src=M[/mask]`.
    pub fn dl_src(mut self, mac: impl Into<Masked<MacAddr>>) -> Self {
        self.eth_src = Some(mac.into());
        self
    }

    /// `dl_dst=M[/mask]`.
    pub fn dl_dst(mut self, mac: impl Into<Masked<MacAddr>>) -> Self {
        self.eth_dst = Some(mac.into());
        self
    }

    /// `nw_src=A[/mask]`.
    pub fn nw_src(mut self, addr: impl Into<Masked<Ipv4Addr>>) -> Self {
        self.ipv4_src = Some(addr.into());
        self
    }

    /// `nw_dst=A[/mask]`.
    pub fn nw_dst(mut self, addr: impl Into<Masked<Ipv4Addr>>) -> Self {
        self.ipv4_dst = Some(addr.into());
        self
    }

    /// `arp_op=N`.
    pub fn arp_op(mut self, op: u16) -> Self {
        self.arp_op = Some(op);
        self
    }

    /// `arp_spa=A[/mask]`.
    pub fn arp_spa(mut self, addr: impl Into<Masked<Ipv4Addr>>) -> Self {
        self.arp_spa = Some(addr.into());
        self
    }

    /// `arp_tpa=A[/mask]`.
    pub fn arp_tpa(mut self, addr: impl Into<Masked<Ipv4Addr>>) -> Self {
        self.arp_tpa = Some(addr.into());
        self
    }

    /// `arp_sha=M[/mask]`.
    pub fn arp_sha(mut self, mac: impl Into<Masked<MacAddr>>) -> Self {
        self.arp_sha = Some(mac.into());
        self
    }

    /// `arp_tha=M[/mask]`.
    pub fn arp_tha(mut self, mac: impl Into<Masked<MacAddr>>) -> Self {
        self.arp_tha = Some(mac.into());
        self
    }

    /// `tp_src=N[/mask]`.
    pub fn tp_src(mut self, port: impl Into<Masked<u16>>) -> Self {
        self.tp_src = Some(port.into());
        self
    }

    /// `tp_dst=N[/mask]`.
    pub fn tp_dst(mut self, port: impl Into<Masked<u16>>) -> Self {
        self.tp_dst = Some(port.into());
        self
    }

    /// `regN=V[/mask]`. Panics if `n > 7`: register numbers are constants in the pipeline.
    pub fn reg(mut self, n: u8, value: impl Into<Masked<u32>>) -> Self {
        assert!(n < 8, "there is no reg{n}: registers are reg0..reg7");
        self.regs[n as usize] = Some(value.into());
        self
    }

    /// `tun_id=V[/mask]`.
    pub fn tun_id(mut self, id: impl Into<Masked<u64>>) -> Self {
        self.tun_id = Some(id.into());
        self
    }

    /// `tun_src=A[/mask]`.
    pub fn tun_src(mut self, addr: impl Into<Masked<Ipv4Addr>>) -> Self {
        self.tun_src = Some(addr.into());
        self
    }

    /// `tun_dst=A[/mask]`.
    pub fn tun_dst(mut self, addr: impl Into<Masked<Ipv4Addr>>) -> Self {
        self.tun_dst = Some(addr.into());
        self
    }

    /// `ct_state=...`.
    pub fn ct_state(mut self, state: CtState) -> Self {
        self.ct_state = Some(state);
        self
    }

    /// `conj_id=ID`.
    pub fn conj_id(mut self, id: u32) -> Self {
        self.conj_id = Some(id);
        self
    }

    /// `ct_mark=V[/mask]`.
    pub fn ct_mark(mut self, mark: impl Into<Masked<u32>>) -> Self {
        self.ct_mark = Some(mark.into());
        self
    }

    /// `ct_zone=Z`.
    pub fn ct_zone(mut self, zone: u16) -> Self {
        self.ct_zone = Some(zone);
        self
    }

    /// `pkt_mark=V[/mask]`.
    pub fn pkt_mark(mut self, mark: impl Into<Masked<u32>>) -> Self {
        self.pkt_mark = Some(mark.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prerequisites_are_checked() {
        let m = Match::any().nw_src(Ipv4Addr::new(10, 0, 0, 1));
        let err = m.validate().unwrap_err().to_string();
        assert!(err.contains("nw_src needs ip"), "{err}");
        assert!(Match::any()
            .ip()
            .nw_src(Ipv4Addr::new(10, 0, 0, 1))
            .validate()
            .is_ok());
        assert!(Match::any().ip().tp_dst(80).validate().is_err());
        assert!(Match::any().tcp().tp_dst(80).validate().is_ok());
        assert!(Match::any()
            .ip()
            .arp_tpa(Ipv4Addr::new(1, 2, 3, 4))
            .validate()
            .is_err());
    }

    #[test]
    fn ipv6_and_nd_prerequisites_are_checked() {
        let a: Ipv6Addr = "fd01::5".parse().unwrap();
        let mac: MacAddr = "0a:58:0a:80:00:05".parse().unwrap();
        let ok = |m: Match| m.validate().unwrap();
        let bad = |m: Match, want: &str| {
            let e = m.validate().unwrap_err().to_string();
            assert!(e.contains(want), "{e} should say {want}");
        };
        ok(Match::any().ipv6().ipv6_src(a));
        ok(Match::any().tcp6().ipv6_dst(a).tp_dst(80));
        ok(Match::any().icmp6().icmp_type(135).nd_target(a).nd_sll(mac));
        ok(Match::any().icmp6().icmp_type(136).nd_target(a).nd_tll(mac));
        ok(Match::any().icmp().icmp_type(8).icmp_code(0));
        bad(Match::any().ip().ipv6_src(a), "ipv6_src needs ipv6");
        bad(
            Match::any().ipv6().nw_src(Ipv4Addr::new(10, 0, 0, 1)),
            "nw_src needs ip",
        );
        bad(
            Match::any().ipv6().icmp_type(135),
            "icmp_type needs icmp or icmp6",
        );
        bad(Match::any().icmp6().nd_target(a), "nd_target needs icmp6");
        bad(
            Match::any().icmp6().icmp_type(136).nd_sll(mac),
            "nd_sll needs",
        );
        bad(
            Match::any().icmp6().icmp_type(135).nd_tll(mac),
            "nd_tll needs",
        );
        bad(
            Match::any()
                .icmp6()
                .icmp_type(135)
                .icmp_code(1)
                .nd_target(a),
            "icmp_code=0",
        );
    }

    #[test]
    fn ct_state_value_mask() {
        let s = CtState::new().plus(CtFlag::Trk).minus(CtFlag::New);
        assert_eq!(s.value_mask(), (0x20, 0x21));
        assert_eq!(CtState::from_value_mask(0x20, 0x21), s);
    }
}
