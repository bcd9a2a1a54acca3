//! Reading `ovs-appctl ofproto/trace` output: the last pass's steps (table, match, priority,
//! cookie, actions), the outputs, the tunnel destination and the registers.

use flows::Table;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// The parsed `ofproto/trace` answer: the steps of the last pipeline pass (after the last
/// conntrack recirculation), the final flow's registers and the outputs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Parsed {
    /// (table, match, priority, cookie, actions) of each step.
    pub steps: Vec<(u8, String, u16, u64, Vec<String>)>,
    /// OpenFlow ports the packet was output to.
    pub outputs: Vec<u32>,
    /// `tun_dst` set before an output (VXLAN).
    pub tun_dst: Option<Ipv4Addr>,
    /// Registers of the final flow (`reg0` → value).
    pub regs: BTreeMap<String, u64>,
}

/// Parses `ofproto/trace` output (see [`Parsed`]).
pub(crate) fn parse(text: &str) -> Parsed {
    // The last pass: after the last recirculation header, or the whole text.
    let last = text
        .rfind("\n=====")
        .and_then(|i| text[i..].find("\nFlow: ").map(|j| &text[i + j..]))
        .unwrap_or(text);
    let mut p = Parsed::default();
    for line in last.lines() {
        let trimmed = line.trim_start();
        if let Some((num, rest)) = step_line(line) {
            // Table 130 (the audit copy) returns to the row that resubmitted to it: not a step
            // of the packet's path (Open vSwitch prints it at the top level when the resubmit
            // is a row's last action, as in a logged drop).
            if num == Table::Audit.id() {
                continue;
            }
            let (matched, priority, cookie) = split_step(rest);
            p.steps.push((num, matched, priority, cookie, Vec::new()));
            continue;
        }
        if let Some(port) = trimmed.strip_prefix("-> output port is ") {
            if let Ok(n) = port.trim().parse() {
                p.outputs.push(n);
            }
            continue;
        }
        if trimmed.starts_with("Final flow:") {
            for kv in trimmed.trim_start_matches("Final flow:").split(',') {
                if let Some((k, v)) = kv.trim().split_once('=') {
                    if k.starts_with("reg") {
                        if let Ok(n) = u64::from_str_radix(v.trim_start_matches("0x"), 16) {
                            p.regs.insert(k.to_string(), n);
                        }
                    }
                }
            }
            continue;
        }
        if line.starts_with("    ") && !trimmed.is_empty() && !trimmed.starts_with("->") {
            if let Some(step) = p.steps.last_mut() {
                step.4.push(trimmed.to_string());
                if let Some(port) = trimmed.strip_prefix("output:") {
                    if let Ok(n) = port.parse() {
                        p.outputs.push(n);
                    }
                }
                if let Some(v) = trimmed
                    .strip_prefix("set_field:")
                    .and_then(|r| r.strip_suffix("->tun_dst"))
                {
                    p.tun_dst = v.parse().ok();
                }
            }
        }
    }
    p
}

/// `20. ip,in_port=3, priority 100, cookie 0x1` → (20, rest).
pub(crate) fn step_line(line: &str) -> Option<(u8, &str)> {
    let t = line.trim_start();
    let (num, rest) = t.split_once(". ")?;
    let n: u8 = num.parse().ok()?;
    // Steps are indented at most one space (`0.` under `20.`); actions four.
    (line.len() - t.len() <= 2).then_some((n, rest))
}

pub(crate) fn split_step(rest: &str) -> (String, u16, u64) {
    let mut matched = rest.to_string();
    let mut priority = 0;
    let mut cookie = 0;
    if let Some(i) = rest.find(", cookie 0x") {
        cookie = u64::from_str_radix(rest[i + 11..].trim(), 16).unwrap_or(0);
        matched.truncate(i);
    }
    if let Some(i) = matched.rfind("priority ") {
        priority = matched[i + 9..].trim().parse().unwrap_or(0);
        matched.truncate(i);
    }
    let matched = matched.trim().trim_end_matches(',').trim().to_string();
    (matched, priority, cookie)
}

pub(crate) fn table_name(id: u8) -> &'static str {
    Table::from_id(id).map_or("unknown", Table::name)
}
