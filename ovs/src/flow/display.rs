//! Flows as `ovs-ofctl -O OpenFlow13 --no-stats dump-flows` prints them.
//!
//! The text is the product's debugging interface: logs, tests, `sdnctl` and operators all read
//! it, and the integration tests require it to equal what Open vSwitch 3.1 prints for the same
//! flow, byte for byte. So this module follows OVS's `match_format()` and `ofpacts_format()`
//! exactly: field order, hex versus decimal, CIDR versus dotted masks, `ct(...)` argument order,
//! when `cookie=`/`table=` appear, and how names are quoted. With [`Names`] it prints what
//! `ovs-ofctl --names` prints (table and port names); without, what `--no-names` prints.

use std::collections::BTreeMap;
use std::fmt::{self, Write};
use std::net::{Ipv4Addr, Ipv6Addr};

use super::actions::{ports, Action, Ct, CtZone, NatKind};
use super::fields::Field;
use super::matches::{
    CtFlag, CtState, Match, ETH_TYPE_ARP, ETH_TYPE_IP, ETH_TYPE_IPV6, IPPROTO_ICMPV6,
};
use super::types::{MacAddr, Masked};
use super::{Flow, DEFAULT_PRIORITY};

/// Table and port names, as `ovs-ofctl --names` learns them from the switch.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Names {
    tables: BTreeMap<u8, String>,
    ports: BTreeMap<u32, String>,
}

impl Names {
    /// No names.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a table name.
    pub fn table(mut self, id: u8, name: impl Into<String>) -> Self {
        self.tables.insert(id, name.into());
        self
    }

    /// Adds a port name.
    pub fn port(mut self, number: u32, name: impl Into<String>) -> Self {
        self.ports.insert(number, name.into());
        self
    }

    /// Adds many table names.
    pub fn tables<S: Into<String>>(mut self, names: impl IntoIterator<Item = (u8, S)>) -> Self {
        self.tables
            .extend(names.into_iter().map(|(id, n)| (id, n.into())));
        self
    }

    /// The name of table `id`.
    pub fn table_name(&self, id: u8) -> Option<&str> {
        self.tables.get(&id).map(String::as_str)
    }

    /// The name of port `number`.
    pub fn port_name(&self, number: u32) -> Option<&str> {
        self.ports.get(&number).map(String::as_str)
    }

    /// The table called `name`.
    pub fn table_id(&self, name: &str) -> Option<u8> {
        self.tables
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(id, _)| *id)
    }

    /// The port called `name`.
    pub fn port_number(&self, name: &str) -> Option<u32> {
        self.ports
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(no, _)| *no)
    }
}

/// A flow rendered with names: `flow.text(&names).to_string()`.
#[derive(Debug, Clone, Copy)]
pub struct FlowText<'a> {
    flow: &'a Flow,
    names: Option<&'a Names>,
}

impl Flow {
    /// The flow as `ovs-ofctl --names --no-stats dump-flows` prints it.
    pub fn text<'a>(&'a self, names: &'a Names) -> FlowText<'a> {
        FlowText {
            flow: self,
            names: Some(names),
        }
    }

    /// The match alone, as `ovs-ofctl` prints it (with the priority first, if not default).
    pub fn match_text(&self, names: Option<&Names>) -> String {
        let mut s = String::new();
        write_match(&mut s, &self.matches, self.priority, names);
        s
    }

    /// The actions alone, as after `actions=` (including `goto_table`, or `drop`).
    pub fn actions_text(&self, names: Option<&Names>) -> String {
        let mut s = String::new();
        write_actions(&mut s, &self.actions, self.goto_table, names);
        s
    }
}

impl fmt::Display for Flow {
    /// The flow as `ovs-ofctl --no-names --no-stats dump-flows` prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        FlowText {
            flow: self,
            names: None,
        }
        .fmt(f)
    }
}

impl fmt::Display for FlowText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        write_flow(&mut s, self.flow, self.names);
        f.write_str(&s)
    }
}

impl fmt::Display for Match {
    /// The match fields alone (no priority).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        write_match(&mut s, self, DEFAULT_PRIORITY, None);
        f.write_str(&s)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        write_action(&mut s, self, None);
        f.write_str(&s)
    }
}

fn write_flow(s: &mut String, flow: &Flow, names: Option<&Names>) {
    if flow.cookie != 0 {
        let _ = write!(s, "cookie={:#x}, ", flow.cookie);
    }
    if flow.table != 0 || names.and_then(|n| n.table_name(flow.table)).is_some() {
        s.push_str("table=");
        put_table(s, flow.table, names);
        s.push_str(", ");
    }
    if flow.idle_timeout != 0 {
        let _ = write!(s, "idle_timeout={}, ", flow.idle_timeout);
    }
    if flow.hard_timeout != 0 {
        let _ = write!(s, "hard_timeout={}, ", flow.hard_timeout);
    }
    let before = s.len();
    write_match(s, &flow.matches, flow.priority, names);
    if s.len() != before {
        s.push(' ');
    }
    s.push_str("actions=");
    write_actions(s, &flow.actions, flow.goto_table, names);
}

/// OVS quotes a table or port name unless it is alphanumeric and starts with a letter.
fn put_name(s: &mut String, name: &str) {
    let plain = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric());
    if plain {
        s.push_str(name);
        return;
    }
    s.push('"');
    for c in name.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '\t' => s.push_str("\\t"),
            '\r' => s.push_str("\\r"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
}

fn put_table(s: &mut String, table: u8, names: Option<&Names>) {
    match names.and_then(|n| n.table_name(table)) {
        Some(name) => put_name(s, name),
        None => {
            let _ = write!(s, "{table}");
        }
    }
}

fn put_port(s: &mut String, port: u32, names: Option<&Names>) {
    if let Some(name) = names.and_then(|n| n.port_name(port)) {
        put_name(s, name);
    } else if let Some(name) = ports::reserved_name(port) {
        s.push_str(name);
    } else {
        let _ = write!(s, "{port}");
    }
}

fn put_hex<T: Into<u64>>(s: &mut String, v: T) {
    let v: u64 = v.into();
    if v == 0 {
        s.push('0');
    } else {
        let _ = write!(s, "{v:#x}");
    }
}

/// `name=0xV[/0xM],` as OVS prints registers, marks and tunnel ids (zero prints as `0`).
fn masked_hex<T: Into<u64> + super::types::Maskable>(
    s: &mut String,
    name: &str,
    m: &Option<Masked<T>>,
) {
    if let Some(m) = m {
        let _ = write!(s, "{name}=");
        put_hex(s, m.value());
        if let Some(mask) = m.mask() {
            s.push('/');
            put_hex(s, mask);
        }
        s.push(',');
    }
}

fn masked_u16(s: &mut String, name: &str, m: &Option<Masked<u16>>) {
    if let Some(m) = m {
        match m.mask() {
            None => {
                let _ = write!(s, "{name}={},", m.value());
            }
            Some(mask) => {
                let _ = write!(s, "{name}={:#x}/{:#x},", m.value(), mask);
            }
        }
    }
}

fn masked_ip(s: &mut String, name: &str, m: &Option<Masked<Ipv4Addr>>) {
    if let Some(m) = m {
        let _ = write!(s, "{name}={}", m.value());
        match (m.mask(), m.prefix_len()) {
            (None, _) => {}
            (Some(_), Some(len)) => {
                let _ = write!(s, "/{len}");
            }
            (Some(mask), None) => {
                let _ = write!(s, "/{mask}");
            }
        }
        s.push(',');
    }
}

fn masked_ip6(s: &mut String, name: &str, m: &Option<Masked<Ipv6Addr>>) {
    if let Some(m) = m {
        let _ = write!(s, "{name}={}", m.value());
        match (m.mask(), m.prefix_len()) {
            (None, _) => {}
            (Some(_), Some(len)) => {
                let _ = write!(s, "/{len}");
            }
            (Some(mask), None) => {
                let _ = write!(s, "/{mask}");
            }
        }
        s.push(',');
    }
}

fn masked_mac(s: &mut String, name: &str, m: &Option<Masked<MacAddr>>) {
    if let Some(m) = m {
        let _ = write!(s, "{name}={}", m.value());
        if let Some(mask) = m.mask() {
            let _ = write!(s, "/{mask}");
        }
        s.push(',');
    }
}

fn ct_state(s: &mut String, st: &CtState) {
    let (value, mask) = st.value_mask();
    s.push_str("ct_state=");
    if st.is_exact() {
        // OVS widens a mask over every flag to an exact match and prints `a|b` (or `0`).
        let set: Vec<&str> = CtFlag::ALL
            .into_iter()
            .filter(|f| value & *f as u32 != 0)
            .map(CtFlag::name)
            .collect();
        s.push_str(if set.is_empty() { "0" } else { "" });
        s.push_str(&set.join("|"));
        s.push(',');
        return;
    }
    for flag in CtFlag::ALL {
        let bit = flag as u32;
        if mask & bit != 0 {
            s.push(if value & bit != 0 { '+' } else { '-' });
            s.push_str(flag.name());
        }
    }
    s.push(',');
}

/// Ethertypes OVS prints by name (besides `ip` and its L4 shorthands).
pub(crate) fn eth_type_name(t: u16) -> Option<&'static str> {
    Some(match t {
        ETH_TYPE_ARP => "arp",
        ETH_TYPE_IPV6 => "ipv6",
        0x8035 => "rarp",
        0x8847 => "mpls",
        0x8848 => "mplsm",
        _ => return None,
    })
}

fn write_match(s: &mut String, m: &Match, priority: u16, names: Option<&Names>) {
    let start = s.len();
    if priority != DEFAULT_PRIORITY {
        let _ = write!(s, "priority={priority},");
    }
    if let Some(c) = m.conj_id {
        let _ = write!(s, "conj_id={c},");
    }
    masked_hex(s, "pkt_mark", &m.pkt_mark);
    if let Some(st) = &m.ct_state {
        ct_state(s, st);
    }
    if let Some(z) = m.ct_zone {
        let _ = write!(s, "ct_zone={z},");
    }
    masked_hex(s, "ct_mark", &m.ct_mark);

    let mut skip_type = false;
    let mut skip_proto = false;
    match m.eth_type {
        Some(ETH_TYPE_IP) => {
            skip_type = true;
            let name = match m.ip_proto {
                Some(1) => Some("icmp"),
                Some(2) => Some("igmp"),
                Some(6) => Some("tcp"),
                Some(17) => Some("udp"),
                Some(132) => Some("sctp"),
                _ => None,
            };
            skip_proto = name.is_some();
            s.push_str(name.unwrap_or("ip"));
            s.push(',');
        }
        Some(ETH_TYPE_IPV6) => {
            skip_type = true;
            let name = match m.ip_proto {
                Some(IPPROTO_ICMPV6) => Some("icmp6"),
                Some(6) => Some("tcp6"),
                Some(17) => Some("udp6"),
                Some(132) => Some("sctp6"),
                _ => None,
            };
            skip_proto = name.is_some();
            s.push_str(name.unwrap_or("ipv6"));
            s.push(',');
        }
        Some(t) => {
            if let Some(name) = eth_type_name(t) {
                skip_type = true;
                s.push_str(name);
                s.push(',');
            }
        }
        None => {}
    }
    for (i, r) in m.regs.iter().enumerate() {
        masked_hex(s, &format!("reg{i}"), r);
    }
    masked_hex(s, "tun_id", &m.tun_id);
    masked_ip(s, "tun_src", &m.tun_src);
    masked_ip(s, "tun_dst", &m.tun_dst);
    masked_ip6(s, "tun_ipv6_src", &m.tun_ipv6_src);
    masked_ip6(s, "tun_ipv6_dst", &m.tun_ipv6_dst);
    if let Some(p) = m.in_port {
        s.push_str("in_port=");
        put_port(s, p, names);
        s.push(',');
    }
    masked_mac(s, "dl_src", &m.eth_src);
    masked_mac(s, "dl_dst", &m.eth_dst);
    if !skip_type {
        if let Some(t) = m.eth_type {
            let _ = write!(s, "dl_type={t:#06x},");
        }
    }
    if m.eth_type == Some(ETH_TYPE_IPV6) {
        masked_ip6(s, "ipv6_src", &m.ipv6_src);
        masked_ip6(s, "ipv6_dst", &m.ipv6_dst);
        if !skip_proto {
            if let Some(p) = m.ip_proto {
                let _ = write!(s, "nw_proto={p},");
            }
        }
    } else if m.eth_type == Some(ETH_TYPE_ARP) {
        masked_ip(s, "arp_spa", &m.arp_spa);
        masked_ip(s, "arp_tpa", &m.arp_tpa);
        if let Some(op) = m.arp_op {
            let _ = write!(s, "arp_op={op},");
        }
        masked_mac(s, "arp_sha", &m.arp_sha);
        masked_mac(s, "arp_tha", &m.arp_tha);
    } else {
        masked_ip(s, "nw_src", &m.ipv4_src);
        masked_ip(s, "nw_dst", &m.ipv4_dst);
        if !skip_proto {
            if let Some(p) = m.ip_proto {
                let _ = write!(s, "nw_proto={p},");
            }
        }
    }
    if let Some(d) = m.ip_dscp {
        let _ = write!(s, "nw_tos={},", u16::from(d) << 2);
    }
    // OVS prints ICMP type and code, and the ND fields after them, where the ports would be.
    if let Some(t) = m.icmp_type {
        let _ = write!(s, "icmp_type={t},");
    }
    if let Some(c) = m.icmp_code {
        let _ = write!(s, "icmp_code={c},");
    }
    masked_ip6(s, "nd_target", &m.nd_target);
    masked_mac(s, "nd_sll", &m.nd_sll);
    masked_mac(s, "nd_tll", &m.nd_tll);
    masked_u16(s, "tp_src", &m.tp_src);
    masked_u16(s, "tp_dst", &m.tp_dst);
    if s.len() > start && s.ends_with(',') {
        s.pop();
    }
}

fn write_actions(s: &mut String, actions: &[Action], goto: Option<u8>, names: Option<&Names>) {
    if actions.is_empty() && goto.is_none() {
        s.push_str("drop");
        return;
    }
    for (i, a) in actions.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        write_action(s, a, names);
    }
    if let Some(t) = goto {
        if !actions.is_empty() {
            s.push(',');
        }
        s.push_str("goto_table:");
        put_table(s, t, names);
    }
}

/// A `set_field` value as OVS prints it for that field.
fn field_value(s: &mut String, field: Field, value: u128) {
    match field {
        Field::TunSrc | Field::TunDst | Field::IpSrc | Field::IpDst => {
            let _ = write!(s, "{}", Ipv4Addr::from(value as u32));
        }
        Field::Ipv6Src | Field::Ipv6Dst | Field::TunIpv6Src | Field::TunIpv6Dst => {
            let _ = write!(s, "{}", Ipv6Addr::from(value));
        }
        Field::EthSrc | Field::EthDst => {
            let b = (value as u64).to_be_bytes();
            let _ = write!(s, "{}", MacAddr([b[2], b[3], b[4], b[5], b[6], b[7]]));
        }
        _ => put_hex(s, value as u64),
    }
}

fn write_action(s: &mut String, a: &Action, names: Option<&Names>) {
    match a {
        Action::Output(p) => {
            if *p < ports::MAX {
                s.push_str("output:");
            }
            put_port(s, *p, names);
        }
        Action::Controller { max_len } => {
            let _ = write!(s, "CONTROLLER:{max_len}");
        }
        // As ovs-ofctl prints it (format_CONTROLLER): max_len only when not the whole packet,
        // userdata as dot-separated hex.
        Action::ToController {
            max_len,
            userdata,
            meter_id,
            controller_id,
        } => {
            s.push_str("controller(");
            if *max_len != u16::MAX {
                let _ = write!(s, "max_len={max_len},");
            }
            if *controller_id != 0 {
                let _ = write!(s, "id={controller_id},");
            }
            s.push_str("userdata=");
            for (i, b) in userdata.iter().enumerate() {
                if i > 0 {
                    s.push('.');
                }
                let _ = write!(s, "{b:02x}");
            }
            if let Some(m) = meter_id {
                let _ = write!(s, ",meter_id={m}");
            }
            s.push(')');
        }
        Action::OutputReg(sf) => {
            let _ = write!(s, "output:{sf}");
        }
        Action::Resubmit { table } => {
            s.push_str("resubmit(,");
            put_table(s, *table, names);
            s.push(')');
        }
        Action::Load(l) => {
            s.push_str("load:");
            put_hex(s, l.value());
            let _ = write!(s, "->{}", l.dst());
        }
        Action::SetField(sf) => {
            s.push_str("set_field:");
            field_value(s, sf.field(), sf.value());
            let _ = write!(s, "->{}", sf.field().name());
        }
        Action::Move(m) => {
            let _ = write!(s, "move:{}->{}", m.src(), m.dst());
        }
        Action::Ct(ct) => write_ct(s, ct, names),
        Action::Undecoded(why) => {
            let _ = write!(s, "undecoded({why})");
        }
        Action::Note(n) => {
            s.push_str("note:");
            for (i, b) in n.bytes().iter().enumerate() {
                if i > 0 {
                    s.push('.');
                }
                let _ = write!(s, "{b:02x}");
            }
        }
        Action::Group(g) => {
            let _ = write!(s, "group:{g}");
        }
        Action::Meter(m) => {
            let _ = write!(s, "meter:{m}");
        }
        Action::Conjunction {
            id,
            clause,
            n_clauses,
        } => {
            let _ = write!(s, "conjunction({id},{clause}/{n_clauses})");
        }
    }
}

fn write_ct(s: &mut String, ct: &Ct, names: Option<&Names>) {
    s.push_str("ct(");
    if ct.is_commit() {
        s.push_str("commit,");
    }
    if ct.is_force() {
        s.push_str("force,");
    }
    if let Some(t) = ct.recirc_table() {
        s.push_str("table=");
        put_table(s, t, names);
        s.push(',');
    }
    match ct.zone_spec() {
        CtZone::Default => {}
        CtZone::Immediate(z) => {
            let _ = write!(s, "zone={z},");
        }
        CtZone::Field(sf) => {
            let _ = write!(s, "zone={sf},");
        }
    }
    if let Some(nat) = ct.nat_spec() {
        s.push_str("nat");
        if let Some(kind) = nat.kind() {
            s.push('(');
            s.push_str(match kind {
                NatKind::Src => "src",
                NatKind::Dst => "dst",
            });
            if let Some((min, max)) = nat.addrs() {
                let _ = write!(s, "={min}");
                if max != min {
                    let _ = write!(s, "-{max}");
                }
                if let Some((pmin, pmax)) = nat.port_range() {
                    let _ = write!(s, ":{pmin}");
                    if pmax != pmin {
                        let _ = write!(s, "-{pmax}");
                    }
                }
                s.push(',');
                let (persistent, hash, random) = nat.flag_bits();
                if persistent {
                    s.push_str("persistent,");
                }
                if hash {
                    s.push_str("hash,");
                }
                if random {
                    s.push_str("random,");
                }
            }
            if s.ends_with(',') {
                s.pop();
            }
            s.push(')');
        }
        s.push(',');
    }
    if !ct.exec_actions().is_empty() {
        s.push_str("exec(");
        for (i, a) in ct.exec_actions().iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            write_action(s, a, names);
        }
        s.push_str("),");
    }
    if s.ends_with(',') {
        s.pop();
    }
    s.push(')');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{Action, Field, Flow, Match, Subfield};

    fn pod_mac() -> MacAddr {
        MacAddr::from_pod_ip(Ipv4Addr::new(10, 128, 0, 2))
    }

    #[test]
    fn pod_spoofguard_flow_prints_like_ovs() {
        let f = Flow::new(20, 100)
            .matching(
                Match::any()
                    .in_port(3)
                    .arp()
                    .arp_spa(Ipv4Addr::new(10, 128, 0, 2))
                    .arp_sha(pod_mac()),
            )
            .action(Action::load_reg(0, 5))
            .goto(30);
        assert_eq!(
            f.to_string(),
            "table=20, priority=100,arp,in_port=3,arp_spa=10.128.0.2,arp_sha=0a:58:0a:80:00:02 \
             actions=load:0x5->NXM_NX_REG0[],goto_table:30"
        );
    }

    #[test]
    fn names_are_used_and_quoted_like_ovs() {
        let names = Names::new()
            .table(0, "classifier")
            .table(70, "local_ip")
            .port(1, "vxlan0");
        let f = Flow::new(0, 200)
            .matching(Match::any().arp().in_port(1))
            .action(Action::output(1).unwrap())
            .goto(70);
        assert_eq!(
            f.text(&names).to_string(),
            "table=classifier, priority=200,arp,in_port=vxlan0 actions=output:vxlan0,goto_table:\"local_ip\""
        );
    }

    #[test]
    fn ct_and_states_print_in_ovs_order() {
        let m = Match::any()
            .ip()
            .ct_state(CtState::new().plus(CtFlag::Trk).plus(CtFlag::Rpl))
            .nw_dst("10.128.0.0/23".parse::<Masked<Ipv4Addr>>().unwrap());
        let f = Flow::new(31, 250).matching(m).action(Action::Ct(
            Ct::new().table(70).nat(crate::flow::Nat::reverse()),
        ));
        assert_eq!(
            f.to_string(),
            "table=31, priority=250,ct_state=+rpl+trk,ip,nw_dst=10.128.0.0/23 actions=ct(table=70,nat)"
        );
    }

    #[test]
    fn drop_cookie_and_defaults() {
        let f = Flow::new(0, DEFAULT_PRIORITY).cookie(0x12);
        assert_eq!(f.to_string(), "cookie=0x12, actions=drop");
        let f = Flow::new(0, 0);
        assert_eq!(f.to_string(), "priority=0 actions=drop");
    }

    #[test]
    fn set_field_values_print_per_field() {
        let f = Flow::new(90, 100).actions([
            Action::move_bits(
                Subfield::whole(Field::Reg(0)),
                Subfield::range(Field::TunId, 0, 31).unwrap(),
            )
            .unwrap(),
            Action::set_tun_dst(Ipv4Addr::new(172, 17, 0, 4)),
            Action::set_eth_dst("aa:bb:cc:dd:ee:ff".parse().unwrap()),
            Action::set_field(Field::Reg(3), 0).unwrap(),
            Action::output_port(1),
        ]);
        assert_eq!(
            f.actions_text(None),
            "move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:172.17.0.4->tun_dst,\
             set_field:aa:bb:cc:dd:ee:ff->eth_dst,set_field:0->reg3,output:1"
        );
    }
}
