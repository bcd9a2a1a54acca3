//! Fake iptables: the nat table fed by `iptables-restore --noflush` input (see [`super`]).

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::bridge::seams::NatRules;
use crate::host::iptables::IptablesError;

use super::{lock, Faults};

const BUILTIN_NAT: [&str; 4] = ["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"];

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Table {
    /// Chain → rules (the text after `-A CHAIN `), built-ins included.
    chains: BTreeMap<String, Vec<String>>,
}

impl Table {
    fn nat() -> Table {
        Table {
            chains: BUILTIN_NAT
                .iter()
                .map(|c| (c.to_string(), Vec::new()))
                .collect(),
        }
    }

    fn referenced(&self, chain: &str) -> bool {
        self.chains.values().flatten().any(|r| {
            let t: Vec<&str> = r.split_whitespace().collect();
            t.windows(2)
                .any(|w| (w[0] == "-j" || w[0] == "-g") && w[1] == chain)
        })
    }
}

/// Fake iptables with a nat table (see the module docs).
#[derive(Debug)]
pub(crate) struct FakeNat {
    nat: Mutex<Table>,
    /// Restores applied so far.
    restores: Mutex<usize>,
    /// Failure injection.
    pub faults: Faults,
}

impl Default for FakeNat {
    fn default() -> Self {
        FakeNat {
            nat: Mutex::new(Table::nat()),
            restores: Mutex::new(0),
            faults: Faults::default(),
        }
    }
}

impl FakeNat {
    /// A nat table with the built-in chains only.
    pub(crate) fn new() -> FakeNat {
        FakeNat::default()
    }

    /// The rules of `chain` (`None`: no such chain).
    pub(crate) fn rules(&self, chain: &str) -> Option<Vec<String>> {
        lock(&self.nat).chains.get(chain).cloned()
    }

    /// The user-defined chains.
    pub(crate) fn user_chains(&self) -> Vec<String> {
        lock(&self.nat)
            .chains
            .keys()
            .filter(|c| !BUILTIN_NAT.contains(&c.as_str()))
            .cloned()
            .collect()
    }

    /// Flushes a chain behind the agent's back (drift).
    pub(crate) fn flush(&self, chain: &str) {
        if let Some(r) = lock(&self.nat).chains.get_mut(chain) {
            r.clear();
        }
    }

    fn parse(table: &mut Table, input: &str) -> Result<(), (usize, String, String)> {
        let mut current: Option<&str> = None;
        for (i, raw) in input.lines().enumerate() {
            let n = i + 1;
            let line = raw.trim();
            let fail = |why: &str| (n, raw.to_string(), why.to_string());
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(t) = line.strip_prefix('*') {
                if t != "nat" {
                    return Err(fail("the fake models the nat table only"));
                }
                current = Some("nat");
                continue;
            }
            if current.is_none() {
                return Err(fail("no table specified"));
            }
            if line == "COMMIT" {
                current = None;
                continue;
            }
            if let Some(decl) = line.strip_prefix(':') {
                let chain = decl.split_whitespace().next().unwrap_or("");
                if chain.is_empty() || chain.len() > 28 {
                    return Err(fail("bad chain name"));
                }
                // With --noflush a declaration flushes the chain (creating it if missing).
                table.chains.insert(chain.to_string(), Vec::new());
                continue;
            }
            let mut words = line.splitn(3, ' ');
            let (op, chain, rest) = (
                words.next().unwrap_or(""),
                words.next().unwrap_or(""),
                words.next().unwrap_or(""),
            );
            let exists = table.chains.contains_key(chain);
            match op {
                "-A" | "-I" | "-D" | "-F" | "-X" if !exists => {
                    return Err(fail(&format!("chain {chain} does not exist")))
                }
                "-A" => table
                    .chains
                    .get_mut(chain)
                    .into_iter()
                    .for_each(|r| r.push(rest.to_string())),
                "-I" => {
                    let (pos, rule) = match rest.split_once(' ') {
                        Some((p, r)) if p.parse::<usize>().is_ok() => {
                            (p.parse::<usize>().unwrap_or(1), r.to_string())
                        }
                        _ => (1, rest.to_string()),
                    };
                    if let Some(r) = table.chains.get_mut(chain) {
                        if pos == 0 || pos > r.len() + 1 {
                            return Err(fail("index of insertion too big"));
                        }
                        r.insert(pos - 1, rule);
                    }
                }
                "-D" => {
                    let r = table.chains.get_mut(chain).expect("checked above");
                    match r.iter().position(|x| x == rest) {
                        Some(p) => {
                            r.remove(p);
                        }
                        None => {
                            return Err(fail(
                                "Bad rule (does a matching rule exist in that chain?)",
                            ))
                        }
                    }
                }
                "-F" => table.chains.get_mut(chain).into_iter().for_each(Vec::clear),
                "-X" => {
                    if BUILTIN_NAT.contains(&chain) {
                        return Err(fail("cannot delete a built-in chain"));
                    }
                    if !table.chains[chain].is_empty() {
                        return Err(fail("Directory not empty"));
                    }
                    if table.referenced(chain) {
                        return Err(fail("Too many links"));
                    }
                    table.chains.remove(chain);
                }
                _ => return Err(fail("unknown command")),
            }
            // A jump to a chain that does not exist is refused too.
            if op == "-A" || op == "-I" {
                let t: Vec<&str> = rest.split_whitespace().collect();
                if let Some(w) = t.windows(2).find(|w| w[0] == "-j") {
                    let target = w[1];
                    let is_target = [
                        "DNAT",
                        "SNAT",
                        "MASQUERADE",
                        "ACCEPT",
                        "DROP",
                        "RETURN",
                        "MARK",
                    ]
                    .contains(&target);
                    if !is_target && !table.chains.contains_key(target) {
                        return Err(fail(&format!("Couldn't load target `{target}'")));
                    }
                }
            }
        }
        if current.is_some() {
            return Err((
                input.lines().count(),
                String::new(),
                "COMMIT expected".into(),
            ));
        }
        Ok(())
    }
}

impl NatRules for FakeNat {
    async fn list(&self, table: &str) -> Result<Vec<String>, IptablesError> {
        if table != "nat" {
            return Ok(Vec::new());
        }
        let t = lock(&self.nat);
        let mut out = Vec::new();
        for c in BUILTIN_NAT {
            out.push(format!("-P {c} ACCEPT"));
        }
        for c in t
            .chains
            .keys()
            .filter(|c| !BUILTIN_NAT.contains(&c.as_str()))
        {
            out.push(format!("-N {c}"));
        }
        for (c, rules) in &t.chains {
            out.extend(rules.iter().map(|r| format!("-A {c} {r}")));
        }
        Ok(out)
    }

    /// A table of its own, empty: the fake's IPv6 rules are not seen through this one.
    fn six(&self) -> FakeNat {
        FakeNat::default()
    }

    async fn restore(&self, input: &str) -> Result<(), IptablesError> {
        if self.faults.hit("restore") {
            return Err(IptablesError::Restore {
                netns: None,
                test: true,
                line: None,
                text: None,
                stderr: "injected failure".into(),
            });
        }
        let mut t = lock(&self.nat);
        let mut next = t.clone();
        FakeNat::parse(&mut next, input).map_err(|(line, text, why)| IptablesError::Restore {
            netns: None,
            test: true,
            line: Some(line),
            text: Some(text),
            stderr: why,
        })?;
        *t = next;
        *lock(&self.restores) += 1;
        Ok(())
    }
}
