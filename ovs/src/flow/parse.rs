//! Reads the `ovs-ofctl` flow syntax back into a [`Flow`].
//!
//! Accepts what [`super::display`] prints (so `parse(flow.to_string()) == flow`), the full
//! `dump-flows` line with its statistics (`duration=`, `n_packets=`... are ignored, as
//! `ovs-ofctl add-flow` ignores them), and the common `add-flow` spellings (`eth_src` for
//! `dl_src`, `ip_dst` for `nw_dst`, bare port numbers as outputs). Table and port names resolve
//! through [`Names`]. Anything else is an error that quotes the offending piece; nothing is
//! skipped silently.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use super::actions::{ports, Action, Ct, Nat, NatKind, Note, SetField};
use super::fields::{Field, Subfield};
use super::matches::{
    CtFlag, CtState, Match, ETH_TYPE_ARP, ETH_TYPE_IP, ETH_TYPE_IPV6, IPPROTO_ICMPV6,
};
use super::types::{MacAddr, Masked};
use super::{Flow, FlowError, Names, DEFAULT_PRIORITY};

fn err(msg: impl Into<String>) -> FlowError {
    FlowError::Parse(msg.into())
}

impl FromStr for Flow {
    type Err = FlowError;

    /// Parses without names (tables and ports must be numbers).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_flow(s, &Names::new())
    }
}

/// Parses one flow in `ovs-ofctl` syntax, resolving table and port names through `names`.
pub fn parse_flow(text: &str, names: &Names) -> Result<Flow, FlowError> {
    let text = text.trim();
    let (head, actions) = split_actions(text)?;
    let mut flow = Flow::new(0, DEFAULT_PRIORITY);
    let mut m = Match::any();
    for tok in split_top(head, &[',', ' ', '\t']) {
        let (key, value) = match tok.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (tok.trim(), None),
        };
        let need = || value.ok_or_else(|| err(format!("{key} needs a value")));
        match key {
            "cookie" => flow.cookie = parse_u64(need()?.split('/').next().unwrap_or(""))?,
            "table" => flow.table = parse_table(need()?, names)?,
            "priority" => flow.priority = parse_num(need()?, "priority")?,
            "idle_timeout" => flow.idle_timeout = parse_num(need()?, "idle_timeout")?,
            "hard_timeout" => flow.hard_timeout = parse_num(need()?, "hard_timeout")?,
            "duration" | "n_packets" | "n_bytes" | "idle_age" | "hard_age" => {}
            _ => parse_match_field(&mut m, key, value, names)?,
        }
    }
    flow.matches = m;
    let (acts, goto) = parse_actions(actions, names)?;
    flow.actions = acts;
    flow.goto_table = goto;
    Ok(flow)
}

/// Splits `... actions=...` at the `actions=` keyword.
fn split_actions(text: &str) -> Result<(&str, &str), FlowError> {
    let mut search = 0;
    while let Some(pos) = text[search..].find("actions=") {
        let at = search + pos;
        let boundary = at == 0 || matches!(text.as_bytes()[at - 1], b' ' | b',' | b'\t');
        if boundary {
            return Ok((&text[..at], &text[at + "actions=".len()..]));
        }
        search = at + 1;
    }
    Err(err(format!("no actions= in {text:?}")))
}

/// Splits on any of `seps` outside parentheses and quotes; drops empty pieces.
fn split_top<'a>(s: &'a str, seps: &[char]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut quoted = false;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth -= 1,
            c if depth == 0 && !quoted && seps.contains(&c) => {
                if i > start {
                    out.push(&s[start..i]);
                }
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out.into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

fn unquote(s: &str) -> Result<String, FlowError> {
    let Some(inner) = s.strip_prefix('"').and_then(|r| r.strip_suffix('"')) else {
        return Ok(s.to_string());
    };
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('"') => out.push('"'),
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let code =
                    u32::from_str_radix(&hex, 16).map_err(|_| err(format!("bad escape in {s}")))?;
                out.push(char::from_u32(code).ok_or_else(|| err(format!("bad escape in {s}")))?);
            }
            _ => return Err(err(format!("bad escape in {s}"))),
        }
    }
    Ok(out)
}

fn parse_u64(s: &str) -> Result<u64, FlowError> {
    let s = s.trim();
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| err(format!("invalid number {s:?}")))
}

fn parse_num<T: TryFrom<u64>>(s: &str, what: &str) -> Result<T, FlowError> {
    let v = parse_u64(s)?;
    T::try_from(v).map_err(|_| err(format!("{what} value {s} is out of range")))
}

fn parse_table(s: &str, names: &Names) -> Result<u8, FlowError> {
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        return parse_num(s, "table");
    }
    let name = unquote(s)?;
    names
        .table_id(&name)
        .ok_or_else(|| err(format!("unknown table name {s}")))
}

fn parse_port(s: &str, names: &Names) -> Result<u32, FlowError> {
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        return parse_num(s, "port");
    }
    let name = unquote(s)?;
    if let Some(p) = names.port_number(&name) {
        return Ok(p);
    }
    ports::from_reserved_name(&name).ok_or_else(|| err(format!("unknown port name {s}")))
}

fn masked_num<T>(s: &str, what: &str) -> Result<Masked<T>, FlowError>
where
    T: TryFrom<u64> + super::types::Maskable,
{
    match s.split_once('/') {
        None => Ok(Masked::exact(parse_num(s, what)?)),
        Some((v, m)) => Masked::new(parse_num(v, what)?, parse_num(m, what)?),
    }
}

fn parse_ct_state(s: &str) -> Result<CtState, FlowError> {
    let mut st = CtState::new();
    if s == "0" {
        return Ok(CtState::from_value_mask(0, CtState::ALL_FLAGS));
    }
    if !s.starts_with(['+', '-']) {
        // The exact form OVS prints when every flag is constrained: `new|trk`.
        let mut value = 0;
        for name in s.split('|') {
            let flag = CtFlag::ALL
                .into_iter()
                .find(|f| f.name() == name)
                .ok_or_else(|| err(format!("unknown ct_state flag {name:?} in {s:?}")))?;
            value |= flag as u32;
        }
        return Ok(CtState::from_value_mask(value, CtState::ALL_FLAGS));
    }
    let mut rest = s;
    while !rest.is_empty() {
        let plus = match rest.as_bytes()[0] {
            b'+' => true,
            b'-' => false,
            _ => {
                return Err(err(format!(
                    "ct_state {s:?}: use +flag/-flag, e.g. +trk-new"
                )))
            }
        };
        rest = &rest[1..];
        let end = rest.find(['+', '-']).unwrap_or(rest.len());
        let name = &rest[..end];
        let flag = CtFlag::ALL
            .into_iter()
            .find(|f| f.name() == name)
            .ok_or_else(|| err(format!("unknown ct_state flag {name:?} in {s:?}")))?;
        st = if plus { st.plus(flag) } else { st.minus(flag) };
        rest = &rest[end..];
    }
    Ok(st)
}

fn parse_match_field(
    m: &mut Match,
    key: &str,
    value: Option<&str>,
    names: &Names,
) -> Result<(), FlowError> {
    let Some(v) = value else {
        match key {
            "ip" => m.eth_type = Some(ETH_TYPE_IP),
            "arp" => m.eth_type = Some(ETH_TYPE_ARP),
            "ipv6" => m.eth_type = Some(ETH_TYPE_IPV6),
            "rarp" => m.eth_type = Some(0x8035),
            "mpls" => m.eth_type = Some(0x8847),
            "mplsm" => m.eth_type = Some(0x8848),
            "tcp" | "udp" | "sctp" | "icmp" | "igmp" => {
                m.eth_type = Some(ETH_TYPE_IP);
                m.ip_proto = Some(match key {
                    "tcp" => 6,
                    "udp" => 17,
                    "sctp" => 132,
                    "icmp" => 1,
                    _ => 2,
                });
            }
            "tcp6" | "udp6" | "sctp6" | "icmp6" => {
                m.eth_type = Some(ETH_TYPE_IPV6);
                m.ip_proto = Some(match key {
                    "tcp6" => 6,
                    "udp6" => 17,
                    "sctp6" => 132,
                    _ => IPPROTO_ICMPV6,
                });
            }
            other => return Err(err(format!("unknown match keyword {other:?}"))),
        }
        return Ok(());
    };
    let ip = |v: &str| v.parse::<Masked<Ipv4Addr>>();
    let mac = |v: &str| v.parse::<Masked<MacAddr>>();
    let ip6 = |v: &str| v.parse::<Masked<Ipv6Addr>>();
    match key {
        "in_port" => m.in_port = Some(parse_port(v, names)?),
        "dl_src" | "eth_src" => m.eth_src = Some(mac(v)?),
        "dl_dst" | "eth_dst" => m.eth_dst = Some(mac(v)?),
        "dl_type" | "eth_type" => m.eth_type = Some(parse_num(v, key)?),
        "nw_proto" | "ip_proto" => m.ip_proto = Some(parse_num(v, key)?),
        "ip_dscp" => m.ip_dscp = Some(parse_num(v, key)?),
        "nw_tos" => {
            let tos: u8 = parse_num(v, key)?;
            if tos & 3 != 0 {
                return Err(FlowError::Invalid(format!(
                    "nw_tos={tos}: the low two bits are ECN; give the DSCP times 4"
                )));
            }
            m.ip_dscp = Some(tos >> 2);
        }
        "nw_src" | "ip_src" => m.ipv4_src = Some(ip(v)?),
        "nw_dst" | "ip_dst" => m.ipv4_dst = Some(ip(v)?),
        "ipv6_src" => m.ipv6_src = Some(ip6(v)?),
        "ipv6_dst" => m.ipv6_dst = Some(ip6(v)?),
        "icmp_type" | "icmpv6_type" => m.icmp_type = Some(parse_num(v, key)?),
        "icmp_code" | "icmpv6_code" => m.icmp_code = Some(parse_num(v, key)?),
        "nd_target" => m.nd_target = Some(ip6(v)?),
        "nd_sll" => m.nd_sll = Some(mac(v)?),
        "nd_tll" => m.nd_tll = Some(mac(v)?),
        "tun_ipv6_src" => m.tun_ipv6_src = Some(ip6(v)?),
        "tun_ipv6_dst" => m.tun_ipv6_dst = Some(ip6(v)?),
        "arp_op" => m.arp_op = Some(parse_num(v, key)?),
        "arp_spa" => m.arp_spa = Some(ip(v)?),
        "arp_tpa" => m.arp_tpa = Some(ip(v)?),
        "arp_sha" => m.arp_sha = Some(mac(v)?),
        "arp_tha" => m.arp_tha = Some(mac(v)?),
        "tp_src" | "tcp_src" | "udp_src" | "sctp_src" => m.tp_src = Some(masked_num(v, key)?),
        "tp_dst" | "tcp_dst" | "udp_dst" | "sctp_dst" => m.tp_dst = Some(masked_num(v, key)?),
        "tun_id" | "tunnel_id" => m.tun_id = Some(masked_num(v, key)?),
        "tun_src" => m.tun_src = Some(ip(v)?),
        "tun_dst" => m.tun_dst = Some(ip(v)?),
        "ct_state" => m.ct_state = Some(parse_ct_state(v)?),
        "ct_zone" => m.ct_zone = Some(parse_num(v, key)?),
        "ct_mark" => m.ct_mark = Some(masked_num(v, key)?),
        "conj_id" => {
            m.conj_id = Some(
                v.parse()
                    .map_err(|_| err(format!("conj_id={v:?}: expected a decimal number")))?,
            )
        }
        "pkt_mark" => m.pkt_mark = Some(masked_num(v, key)?),
        k if k.starts_with("reg") => {
            let n: u8 = k[3..]
                .parse()
                .map_err(|_| err(format!("unknown match field {k:?}")))?;
            if n > 7 {
                return Err(err(format!("there is no {k}: registers are reg0..reg7")));
            }
            m.regs[n as usize] = Some(masked_num(v, k)?);
        }
        other => return Err(err(format!("unknown match field {other:?}"))),
    }
    Ok(())
}

/// Parses the text after `actions=` into (apply-actions, goto_table).
pub fn parse_actions(s: &str, names: &Names) -> Result<(Vec<Action>, Option<u8>), FlowError> {
    let mut actions = Vec::new();
    let mut goto = None;
    let parts = split_top(s, &[',']);
    if parts.is_empty() {
        return Err(err("empty actions: write actions=drop"));
    }
    for (i, part) in parts.iter().enumerate() {
        if let Some(t) = part.strip_prefix("goto_table:") {
            if i + 1 != parts.len() {
                return Err(err(format!("goto_table must be the last action, in {s:?}")));
            }
            goto = Some(parse_table(t, names)?);
        } else if *part == "drop" {
            if parts.len() != 1 {
                return Err(err(format!(
                    "drop cannot be combined with other actions: {s:?}"
                )));
            }
        } else {
            actions.push(parse_action(part, names)?);
        }
    }
    Ok((actions, goto))
}

fn parse_field_value(field: Field, v: &str) -> Result<u128, FlowError> {
    match field {
        Field::TunSrc | Field::TunDst | Field::IpSrc | Field::IpDst => {
            let a: Ipv4Addr = v
                .parse()
                .map_err(|_| err(format!("invalid IPv4 address {v:?}")))?;
            Ok(u128::from(u32::from(a)))
        }
        Field::Ipv6Src | Field::Ipv6Dst | Field::TunIpv6Src | Field::TunIpv6Dst => {
            let a: Ipv6Addr = v
                .parse()
                .map_err(|_| err(format!("invalid IPv6 address {v:?}")))?;
            Ok(u128::from(a))
        }
        Field::EthSrc | Field::EthDst => {
            let m: MacAddr = v.parse()?;
            let mut b = [0u8; 8];
            b[2..].copy_from_slice(&m.0);
            Ok(u128::from(u64::from_be_bytes(b)))
        }
        _ => parse_u64(v).map(u128::from),
    }
}

fn parse_action(a: &str, names: &Names) -> Result<Action, FlowError> {
    let inv = |e: FlowError| match e {
        FlowError::Invalid(m) => err(format!("{m} in action {a:?}")),
        other => other,
    };
    if let Some(rest) = a.strip_prefix("output:") {
        if rest.contains('[') || rest.starts_with("NXM_") || rest.starts_with("reg") {
            return Action::output_reg(rest.parse()?).map_err(inv);
        }
        return port_action(parse_port(rest, names)?).map_err(inv);
    }
    if let Some(rest) = a.strip_prefix("load:") {
        let (v, dst) = rest
            .split_once("->")
            .ok_or_else(|| err(format!("{a:?}: load:V->DST")))?;
        return Action::load(dst.parse()?, parse_u64(v)?).map_err(inv);
    }
    if let Some(rest) = a.strip_prefix("set_field:") {
        let (v, f) = rest
            .split_once("->")
            .ok_or_else(|| err(format!("{a:?}: set_field:V->F")))?;
        if v.contains('/') {
            return Err(err(format!(
                "{a:?}: masked set_field: use load:V->FIELD[range]"
            )));
        }
        let field = Field::from_name(f).ok_or_else(|| err(format!("unknown field {f:?}")))?;
        return SetField::new(field, parse_field_value(field, v)?)
            .map(Action::SetField)
            .map_err(inv);
    }
    if let Some(rest) = a.strip_prefix("move:") {
        let (src, dst) = rest
            .split_once("->")
            .ok_or_else(|| err(format!("{a:?}: move:SRC->DST")))?;
        return Action::move_bits(src.parse::<Subfield>()?, dst.parse()?).map_err(inv);
    }
    if let Some(rest) = a.strip_prefix("resubmit(") {
        let inner = rest
            .strip_suffix(')')
            .ok_or_else(|| err(format!("{a:?}: missing )")))?;
        let (port, table) = inner
            .split_once(',')
            .ok_or_else(|| err(format!("{a:?}: resubmit(,T)")))?;
        if !port.is_empty() {
            return Err(err(format!("{a:?}: resubmit with a port is not supported")));
        }
        return Action::resubmit(parse_table(table, names)?).map_err(inv);
    }
    if let Some(rest) = a.strip_prefix("note:") {
        let bytes = rest
            .split('.')
            .map(|b| {
                u8::from_str_radix(b, 16).map_err(|_| err(format!("{a:?}: note bytes are hex")))
            })
            .collect::<Result<Vec<u8>, _>>()?;
        return Ok(Action::Note(Note::new(&bytes)));
    }
    if let Some(rest) = a.strip_prefix("meter:") {
        return Action::meter(parse_num(rest, "meter")?).map_err(inv);
    }
    if let Some(rest) = a.strip_prefix("group:") {
        return Action::group(parse_num(rest, "group")?).map_err(inv);
    }
    if let Some(rest) = a.strip_prefix("conjunction(") {
        let bad = || err(format!("{a:?}: conjunction(ID,K/N)"));
        let inner = rest.strip_suffix(')').ok_or_else(bad)?;
        let (id, kn) = inner.split_once(',').ok_or_else(bad)?;
        let (k, n) = kn.split_once('/').ok_or_else(bad)?;
        let num = |s: &str| s.trim().parse::<u64>().map_err(|_| bad());
        let (id, k, n) = (num(id)?, num(k)?, num(n)?);
        let (Ok(id), Ok(k), Ok(n)) = (u32::try_from(id), u8::try_from(k), u8::try_from(n)) else {
            return Err(bad());
        };
        return Action::conjunction(id, k, n).map_err(inv);
    }
    if let Some(rest) = a.strip_prefix("ct(") {
        let inner = rest
            .strip_suffix(')')
            .ok_or_else(|| err(format!("{a:?}: missing )")))?;
        return parse_ct(inner, names).map(Action::Ct).map_err(inv);
    }
    if a == "ct" {
        return Ok(Action::Ct(Ct::new()));
    }
    if let Some(rest) = a.strip_prefix("controller(") {
        let inner = rest
            .strip_suffix(')')
            .ok_or_else(|| err(format!("{a:?}: missing )")))?;
        return parse_controller(inner);
    }
    let upper = a.to_ascii_uppercase();
    if let Some(rest) = upper.strip_prefix("CONTROLLER:") {
        return Ok(Action::Controller {
            max_len: parse_num(rest, "controller max_len")?,
        });
    }
    if upper == "CONTROLLER" {
        return Ok(Action::controller());
    }
    if a.starts_with(|c: char| c.is_ascii_digit()) || ports::from_reserved_name(a).is_some() {
        return port_action(parse_port(a, names)?).map_err(inv);
    }
    Err(err(format!("unknown action {a:?}")))
}

fn port_action(port: u32) -> Result<Action, FlowError> {
    if port == ports::CONTROLLER {
        return Ok(Action::controller());
    }
    Action::output(port)
}

/// The inside of `controller(...)`, as ovs-ofctl writes it: `max_len`, `userdata` (hex bytes,
/// `.` or `:` between them or none) and `meter_id`; without userdata and meter it is the plain
/// `CONTROLLER:max_len` Open vSwitch makes of it; `id` aims it at one controller connection.
/// The keys this codec does not carry (`reason`, `pause`) are refused by name.
fn parse_controller(inner: &str) -> Result<Action, FlowError> {
    let (mut max_len, mut userdata, mut meter_id) = (u16::MAX, None, None);
    let mut controller_id = 0u16;
    if !inner.is_empty() && inner.bytes().all(|b| b.is_ascii_digit()) {
        max_len = parse_num(inner, "controller max_len")?;
    } else {
        for part in split_top(inner, &[','])
            .into_iter()
            .filter(|p| !p.is_empty())
        {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            match key {
                "max_len" => max_len = parse_num(value, "controller max_len")?,
                "id" => controller_id = parse_num(value, "controller id")?,
                "meter_id" => meter_id = Some(parse_num(value, "controller meter_id")?),
                "userdata" => {
                    let hex: String = value.chars().filter(|c| !matches!(c, '.' | ':')).collect();
                    if hex.is_empty() || !hex.len().is_multiple_of(2) {
                        return Err(err(format!("controller userdata {value:?}: expected hex bytes such as 01.02")));
                    }
                    let bytes = (0..hex.len())
                        .step_by(2)
                        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
                        .collect::<Result<Vec<u8>, _>>()
                        .map_err(|_| err(format!("controller userdata {value:?}: bad hex digit")))?;
                    userdata = Some(bytes);
                }
                other => {
                    return Err(err(format!(
                        "controller key {other:?} is not supported (max_len, id, userdata and meter_id are)"
                    )))
                }
            }
        }
    }
    match (userdata, meter_id, controller_id) {
        (None, None, 0) => Ok(Action::Controller { max_len }),
        (userdata, meter_id, controller_id) => {
            let a = Action::ToController {
                max_len,
                userdata: userdata.unwrap_or_default(),
                meter_id,
                controller_id,
            };
            a.validate()
                .map_err(|e| err(format!("{e} in action \"controller({inner})\"")))?;
            Ok(a)
        }
    }
}

fn parse_ct(inner: &str, names: &Names) -> Result<Ct, FlowError> {
    let mut ct = Ct::new();
    let mut exec = Vec::new();
    for part in split_top(inner, &[',']) {
        if part == "commit" {
            ct = ct.commit();
        } else if part == "force" {
            ct = ct.force();
        } else if let Some(t) = part.strip_prefix("table=") {
            ct = ct.table(parse_table(t, names)?);
        } else if let Some(z) = part.strip_prefix("zone=") {
            ct = if z.starts_with(|c: char| c.is_ascii_digit()) {
                ct.zone(parse_num(z, "zone")?)
            } else {
                ct.zone_from(z.parse()?)?
            };
        } else if part == "nat" {
            ct = ct.nat(Nat::reverse());
        } else if let Some(n) = part.strip_prefix("nat(") {
            let n = n
                .strip_suffix(')')
                .ok_or_else(|| err(format!("{part:?}: missing )")))?;
            ct = ct.nat(parse_nat(n)?);
        } else if let Some(e) = part.strip_prefix("exec(") {
            let e = e
                .strip_suffix(')')
                .ok_or_else(|| err(format!("{part:?}: missing )")))?;
            for a in split_top(e, &[',']) {
                exec.push(parse_action(a, names)?);
            }
        } else {
            return Err(err(format!("unknown ct argument {part:?}")));
        }
    }
    for a in exec {
        ct = ct.exec(a)?;
    }
    Ok(ct)
}

fn parse_nat(s: &str) -> Result<Nat, FlowError> {
    let mut parts = split_top(s, &[',']).into_iter();
    let first = parts.next().ok_or_else(|| err("nat() needs src or dst"))?;
    let (kind, range) = match first.split_once('=') {
        Some((k, r)) => (k, Some(r)),
        None => (first, None),
    };
    let kind = match kind {
        "src" => NatKind::Src,
        "dst" => NatKind::Dst,
        other => return Err(err(format!("nat({other}): expected src or dst"))),
    };
    let Some(range) = range else {
        if parts.next().is_some() {
            return Err(err(format!("nat({s}): flags need an address range")));
        }
        return Ok(Nat::kind_only(kind));
    };
    let (addrs, port_range) = match range.split_once(':') {
        Some((a, p)) => (a, Some(p)),
        None => (range, None),
    };
    let ip = |v: &str| {
        v.parse::<Ipv4Addr>()
            .map_err(|_| err(format!("invalid nat address {v:?}")))
    };
    let (min, max) = match addrs.split_once('-') {
        Some((a, b)) => (ip(a)?, ip(b)?),
        None => (ip(addrs)?, ip(addrs)?),
    };
    let mut nat = Nat::new(kind, min, max)?;
    if let Some(p) = port_range {
        let (a, b) = p.split_once('-').unwrap_or((p, p));
        nat = nat.ports(parse_num(a, "nat port")?, parse_num(b, "nat port")?)?;
    }
    let (mut persistent, mut hash, mut random) = (false, false, false);
    for flag in parts {
        match flag {
            "persistent" => persistent = true,
            "hash" => hash = true,
            "random" => random = true,
            other => return Err(err(format!("unknown nat flag {other:?}"))),
        }
    }
    nat.flags(persistent, hash, random)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) {
        let f: Flow = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(f.to_string(), text, "display of parsed flow");
        let again: Flow = f.to_string().parse().unwrap();
        assert_eq!(again, f);
    }

    #[test]
    fn ovs_lines_round_trip() {
        for line in [
            "priority=1000,ct_state=-trk,ip actions=ct(table=0)",
            "priority=200,arp,in_port=1,arp_spa=10.128.0.0/14,arp_tpa=10.130.0.0/23 actions=move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[],goto_table:10",
            "table=10, priority=100,tun_id=0x5,tun_dst=172.17.0.3 actions=goto_table:30",
            "cookie=0x12, table=10, priority=100,tun_id=0x5/0xff actions=goto_table:30",
            "table=20, priority=301,tcp,tp_src=80,tp_dst=0x1000/0xf000 actions=drop",
            "table=20, priority=101,arp,in_port=3,arp_tpa=10.128.0.0/255.255.0.255,arp_op=1,arp_sha=0a:58:00:00:00:00/ff:ff:00:00:00:00 actions=drop",
            "table=20, priority=100,ip,in_port=3,dl_src=0a:58:0a:80:00:02,nw_src=10.128.0.2 actions=load:0->NXM_NX_REG0[],goto_table:27",
            "table=31, priority=252,ct_state=+trk,ip actions=ct(commit,table=40,zone=NXM_NX_REG0[0..15],nat(src=10.0.0.1-10.0.0.9:1000-2000,random))",
            "table=31, priority=253,ip actions=ct(commit,nat(dst=10.0.0.1),exec(set_field:0x3->ct_mark))",
            "table=31, priority=251,ct_state=-new+est+trk,ip actions=ct(commit,zone=5,exec(load:0x1->NXM_NX_CT_MARK[]))",
            "table=80, priority=100,pkt_mark=0x7,reg3=0x5/0xff actions=output:3,IN_PORT,CONTROLLER:65535,resubmit(,90)",
            "table=90, priority=99,ip,nw_dst=10.129.0.0/23 actions=set_field:0x5->tun_id,set_field:aa:bb:cc:dd:ee:ff->eth_dst,load:0x1->NXM_NX_REG3[0],load:0xa0a0a0a->NXM_NX_TUN_IPV4_DST[]",
            "table=100, priority=0,ip,nw_src=10.0.0.0/8,nw_dst=10.1.2.3 actions=note:61.62.63.00.00.00,goto_table:101",
            "table=110, idle_timeout=10, hard_timeout=20, priority=5 actions=drop",
            "table=80, priority=200,reg0=0 actions=output:NXM_NX_REG2[]",
            "table=60, priority=0 actions=group:7",
            "table=5, priority=12,ct_state=new|trk,ip actions=ct(commit,force,table=7,zone=65535,nat(src=1.1.1.1,persistent,hash))",
            "table=5, priority=13,ip actions=ct(commit,nat(src))",
            "table=5, priority=11,ip,reg0=0/0x1 actions=CONTROLLER:0",
            "table=5, priority=10,tun_id=0,tun_src=1.2.3.0/24 actions=set_field:0->tun_id",
            "table=5, priority=9,icmp,nw_src=10.0.0.0/255.0.255.0 actions=set_field:0->pkt_mark,LOCAL,FLOOD,ALL",
            "table=5, priority=8,ipv6,in_port=LOCAL actions=NORMAL",
            "table=5, priority=7,pkt_mark=0x1,ct_state=+trk,ct_zone=5,ct_mark=0x3/0xf,ip actions=LOCAL",
            "table=5, priority=14,dl_type=0x88cc actions=drop",
        ] {
            round_trip(line);
        }
    }

    #[test]
    fn dump_lines_with_stats_and_names_parse() {
        let names = Names::new()
            .table(70, "local_ip")
            .table(80, "ingress_isolation")
            .port(1, "vxlan0");
        let line = " cookie=0x3, duration=12.345s, table=\"local_ip\", n_packets=4, n_bytes=392, idle_age=3, priority=100,ip,nw_dst=10.128.0.2 actions=load:0x5->NXM_NX_REG1[],load:0x3->NXM_NX_REG2[],goto_table:\"ingress_isolation\"";
        let f = parse_flow(line, &names).unwrap();
        assert_eq!(f.table, 70);
        assert_eq!(f.goto_table, Some(80));
        assert_eq!(f.cookie, 3);
        assert_eq!(
            f.text(&names).to_string(),
            "cookie=0x3, table=\"local_ip\", priority=100,ip,nw_dst=10.128.0.2 actions=load:0x5->NXM_NX_REG1[],load:0x3->NXM_NX_REG2[],goto_table:\"ingress_isolation\""
        );
        let f = parse_flow("in_port=vxlan0 actions=output:vxlan0", &names).unwrap();
        assert_eq!(f.matches.in_port, Some(1));
    }

    #[test]
    fn bad_text_says_what_is_wrong() {
        for (text, want) in [
            ("priority=1 ip", "no actions="),
            (
                "priority=1,foo=3 actions=drop",
                "unknown match field \"foo\"",
            ),
            (
                "priority=1 actions=load:0x10->NXM_NX_REG0[0..3]",
                "does not fit",
            ),
            ("priority=1 actions=frobnicate", "unknown action"),
            ("priority=1,reg9=1 actions=drop", "reg0..reg7"),
            ("priority=1 actions=goto_table:3,output:1", "last action"),
            (
                "priority=1,ct_state=trk+new actions=drop",
                "unknown ct_state flag",
            ),
            (
                "priority=1,ct_state=+trk*new actions=drop",
                "unknown ct_state flag",
            ),
            ("priority=99999 actions=drop", "out of range"),
            ("table=nosuch, actions=drop", "unknown table name"),
        ] {
            let e = text.parse::<Flow>().unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
