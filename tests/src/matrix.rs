//! The isolation matrix: every ordered pair of pods probed with ICMP, a TCP connection and ARP
//! resolution, plus the node (tun0, the gateway) to every pod, compared with the tenancy rule
//! (allowed iff same VNID or either side global) and printed as observed.
//!
//! Why this shape: the probes of [`probe`](crate::probe) run inside the pods' network namespaces
//! on threads, all at once ([`probe::parallel`]), so a 12-pod matrix (132 pairs x 3 probes) costs
//! about one probe timeout. A blocked probe is only "blocked" after its whole timeout, so the
//! timeout is the price of each matrix; an allowed probe answers in milliseconds.
//!
//! ARP is probed on the wire (an ARP request sent by the probe itself, the reply awaited), so the
//! kernel's neighbour cache never decides an outcome. TCP needs the kernel to resolve the peer,
//! so a pair that cannot ARP cannot connect either; ICMP likewise.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use crate::probe::{self, EchoServer};

/// The TCP port every member echoes on during a matrix.
pub const ECHO_PORT: u16 = 7777;

/// One pod in the matrix.
#[derive(Debug, Clone)]
pub struct Member {
    /// Short label printed in the matrix, e.g. `a1`.
    pub label: String,
    /// The pod's network namespace (name under /var/run/netns).
    pub netns: String,
    /// The pod's interface.
    pub ifname: String,
    /// The pod's address.
    pub ip: Ipv4Addr,
    /// The pod's namespace (tenant).
    pub namespace: String,
    /// The VNID the pod's namespace has now.
    pub vnid: u32,
}

/// Where the node's side of the matrix is probed from: the namespace holding tun0.
#[derive(Debug, Clone)]
pub struct NodeSide {
    /// The node's network namespace.
    pub netns: String,
    /// The gateway interface (`tun0`).
    pub ifname: String,
}

/// What one probe set found for one ordered pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reach {
    /// An ICMP echo got its reply.
    pub icmp: bool,
    /// A TCP connection echoed a token.
    pub tcp: bool,
    /// An ARP request got its reply.
    pub arp: bool,
}

impl Reach {
    fn cell(self) -> String {
        format!(
            "{}{}{}",
            if self.icmp { 'I' } else { '.' },
            if self.tcp { 'T' } else { '.' },
            if self.arp { 'A' } else { '.' }
        )
    }

    fn all(self) -> bool {
        self.icmp && self.tcp && self.arp
    }

    fn none(self) -> bool {
        !self.icmp && !self.tcp && !self.arp
    }
}

/// The tenancy rule: pods reach each other iff same VNID or either is global (VNID 0).
pub fn allowed(from: u32, to: u32) -> bool {
    from == to || from == 0 || to == 0
}

/// An observed matrix.
#[derive(Debug, Clone)]
pub struct Matrix {
    /// What it was taken after (printed as its title).
    pub title: String,
    /// The members, in row/column order.
    pub members: Vec<Member>,
    /// `pairs[i][j]`: from member i to member j (`None` on the diagonal).
    pub pairs: Vec<Vec<Option<Reach>>>,
    /// From the node (tun0) to member j.
    pub node: Vec<Reach>,
}

/// The members of a matrix of pods made through the CNI plugin: `layout` (name, namespace, node
/// number) in the order of `pods`, labelled `name@node`, each with `vnid` of its namespace.
pub fn members_of(
    layout: &[(&str, &str, usize)],
    pods: &[crate::node::CniPod<'_>],
    vnid: impl Fn(&str) -> u32,
) -> Vec<Member> {
    layout
        .iter()
        .zip(pods)
        .map(|((name, ns, i), p)| Member {
            label: format!("{name}@{i}"),
            netns: p.ns.name().to_string(),
            ifname: "eth0".into(),
            ip: p.ip.parse().expect("a pod address"),
            namespace: ns.to_string(),
            vnid: vnid(ns),
        })
        .collect()
}

impl Reach {
    /// All three probes answered (`true`) or none (`false`).
    pub fn uniform(answered: bool) -> Reach {
        Reach {
            icmp: answered,
            tcp: answered,
            arp: answered,
        }
    }
}

impl Matrix {
    /// Every disagreement with the tenancy rule (a pair expected allowed where a probe failed,
    /// or expected blocked where any probe got through; the node must reach everyone).
    pub fn mismatches(&self) -> Vec<String> {
        self.mismatches_with(|a, b| Reach::uniform(allowed(a.vnid, b.vnid)))
    }

    /// Every pair whose probes differ from what `expect` says of it (another network's rule,
    /// such as openshift-sdn's ARP within its node), and every probe of the node that failed.
    pub fn mismatches_with(&self, expect: impl Fn(&Member, &Member) -> Reach) -> Vec<String> {
        let mut out = Vec::new();
        for (i, row) in self.pairs.iter().enumerate() {
            for (j, r) in row.iter().enumerate() {
                let Some(r) = r else { continue };
                let (a, b) = (&self.members[i], &self.members[j]);
                let want = expect(a, b);
                if *r != want {
                    out.push(format!(
                        "{} ({}/{}) -> {} ({}/{}): saw {}, expected {}",
                        a.label,
                        a.namespace,
                        a.vnid,
                        b.label,
                        b.namespace,
                        b.vnid,
                        r.cell(),
                        want.cell()
                    ));
                }
            }
        }
        for (j, r) in self.node.iter().enumerate() {
            if !r.all() {
                out.push(format!(
                    "node -> {}: saw {}, expected ITA",
                    self.members[j].label,
                    r.cell()
                ));
            }
        }
        out
    }

    /// The matrix as a table: rows are senders, columns receivers; a cell is `ITA` with `.` for
    /// each probe that got nothing (ICMP, TCP, ARP); `!` marks a disagreement with the rule.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "isolation matrix: {} (I=ICMP T=TCP A=ARP answered, . = nothing; ! = not what the \
             tenancy rule says)",
            self.title
        );
        let head = |m: &Member| format!("{}/{}", m.label, m.vnid);
        let w = self
            .members
            .iter()
            .map(|m| head(m).len())
            .max()
            .unwrap_or(4)
            .max(5);
        let _ = write!(s, "{:>w$} ", "from\\to");
        for m in &self.members {
            let _ = write!(s, " {:>w$}", head(m));
        }
        s.push('\n');
        for (i, row) in self.pairs.iter().enumerate() {
            let a = &self.members[i];
            let _ = write!(s, "{:>w$} ", head(a));
            for (j, r) in row.iter().enumerate() {
                let cell = match r {
                    None => "-".to_string(),
                    Some(r) => {
                        let want = allowed(a.vnid, self.members[j].vnid);
                        let ok = if want { r.all() } else { r.none() };
                        format!("{}{}", r.cell(), if ok { "" } else { "!" })
                    }
                };
                let _ = write!(s, " {cell:>w$}");
            }
            s.push('\n');
        }
        let _ = write!(s, "{:>w$} ", "node");
        for r in &self.node {
            let cell = format!("{}{}", r.cell(), if r.all() { "" } else { "!" });
            let _ = write!(s, " {cell:>w$}");
        }
        s.push('\n');
        s
    }
}

/// Echo servers on every member (kept while matrices are taken).
pub struct Servers(#[allow(dead_code)] Vec<EchoServer>);

impl std::fmt::Debug for Servers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Servers({})", self.0.len())
    }
}

/// Starts an echo server on [`ECHO_PORT`] in every member.
pub fn serve(members: &[Member]) -> Servers {
    Servers(
        members
            .iter()
            .map(|m| probe::tcp_echo_server(&m.netns, ECHO_PORT))
            .collect(),
    )
}

/// Forgets what the kernels of the members and the node have cached about their neighbours
/// (`ip neigh flush`), so a matrix measures the network and not the leftovers of the previous
/// one: an entry that failed while a pair was isolated would otherwise make the kernel wait
/// before it asks again, and a TCP probe (one retransmission within its timeout) could lose
/// the race where ICMP and ARP (re-sent every 250 ms) win it.
fn flush_neighbours(members: &[Member], node: &NodeSide) {
    let sides = members
        .iter()
        .map(|m| (m.netns.as_str(), m.ifname.as_str()))
        .chain([(node.netns.as_str(), node.ifname.as_str())]);
    for (netns, ifname) in sides {
        crate::harness::run("ip", &["-n", netns, "neigh", "flush", "dev", ifname])
            .unwrap_or_else(|e| panic!("flushing the neighbours of {netns}/{ifname}: {e}"));
    }
}

/// Probes every ordered pair and the node to every member, all at once; a probe that gets no
/// answer gives up after `timeout`. Echo servers must be running ([`serve`]).
pub fn observe(title: &str, members: &[Member], node: &NodeSide, timeout: Duration) -> Matrix {
    flush_neighbours(members, node);
    type Job<'a> = Box<dyn FnOnce() -> bool + Send + 'a>;
    let mut jobs: Vec<Job<'_>> = Vec::new();
    let mut index = Vec::new();
    for (i, a) in members.iter().enumerate() {
        for (j, b) in members.iter().enumerate() {
            if i != j {
                index.push((Some(i), j));
                push_probes(&mut jobs, &a.netns, &a.ifname, b.ip, timeout);
            }
        }
    }
    for (j, b) in members.iter().enumerate() {
        index.push((None, j));
        push_probes(&mut jobs, &node.netns, &node.ifname, b.ip, timeout);
    }
    let results = probe::parallel(jobs);
    let n = members.len();
    let mut pairs = vec![vec![None; n]; n];
    let mut node_row = vec![
        Reach {
            icmp: false,
            tcp: false,
            arp: false
        };
        n
    ];
    for (k, (from, to)) in index.into_iter().enumerate() {
        let r = Reach {
            icmp: results[3 * k],
            tcp: results[3 * k + 1],
            arp: results[3 * k + 2],
        };
        match from {
            Some(i) => pairs[i][to] = Some(r),
            None => node_row[to] = r,
        }
    }
    Matrix {
        title: title.to_string(),
        members: members.to_vec(),
        pairs,
        node: node_row,
    }
}

fn push_probes<'a>(
    jobs: &mut Vec<Box<dyn FnOnce() -> bool + Send + 'a>>,
    netns: &str,
    ifname: &str,
    dst: Ipv4Addr,
    timeout: Duration,
) {
    let (n1, n2, n3) = (netns.to_string(), netns.to_string(), netns.to_string());
    let ifname = ifname.to_string();
    jobs.push(Box::new(move || probe::icmp_probe(&n1, dst, timeout)));
    jobs.push(Box::new(move || {
        probe::tcp_probe(&n2, SocketAddrV4::new(dst, ECHO_PORT), timeout)
    }));
    jobs.push(Box::new(move || {
        probe::arp_probe(&n3, &ifname, dst, timeout).is_some()
    }));
}

/// Observes the matrix, prints it, and panics with every mismatch if it disagrees with the
/// tenancy rule.
pub fn assert_isolation(
    title: &str,
    members: &[Member],
    node: &NodeSide,
    timeout: Duration,
) -> Matrix {
    let m = observe(title, members, node, timeout);
    eprintln!("{}", m.render());
    let bad = m.mismatches();
    assert!(
        bad.is_empty(),
        "{}\n{} mismatches:\n{}",
        m.render(),
        bad.len(),
        bad.join("\n")
    );
    m
}

/// One pod of a cross-node IPv6 matrix: its label (`name@node`), namespace and IPv6 address.
pub type Member6<'a> = (&'a str, &'a str, std::net::Ipv6Addr);

/// Every ordered pair of `pods` (and each protocol of `protos`) on which `sdnctl trace`, on the
/// sender's node and the receiver's ([`traced`]), disagrees with the VNID matrix ([`allowed`]):
/// one line per disagreement. `vnid` gives a namespace's VNID, `node_of` a label's node.
pub fn trace_disagreements6<'n>(
    pods: &[Member6<'_>],
    protos: &[&str],
    vnid: impl Fn(&str) -> u32,
    node_of: impl Fn(&str) -> &'n crate::node::AgentNode,
) -> Vec<String> {
    let mut out = Vec::new();
    for (fl, fns, from) in pods {
        for (tl, tns, to) in pods {
            if fl == tl {
                continue;
            }
            let want = allowed(vnid(fns), vnid(tns));
            let (src, dst) = (from.to_string(), to.to_string());
            for proto in protos {
                let (said, words) = traced(node_of(fl), node_of(tl), &src, &dst, proto);
                if said != want {
                    out.push(format!(
                        "{fl} -> {tl} {proto}: expected {want}, trace: {words}"
                    ));
                }
            }
        }
    }
    out
}

/// The probes of a matrix, as `sdnctl trace` names them.
pub const TRACE_PROTOS: [&str; 3] = ["icmp", "tcp/7777", "arp"];

/// Whether `sdnctl trace` says a packet from `src` to `dst` reaches `dst`: traced on the
/// sender's node `from`, and for a packet that leaves over VXLAN, traced again on the receiver's
/// node `to` with the VNI the first trace names (each node's tables judge their part). Returns
/// (delivered, the verdicts in words).
pub fn traced(
    from: &crate::node::AgentNode,
    to: &crate::node::AgentNode,
    src: &str,
    dst: &str,
    proto: &str,
) -> (bool, String) {
    let t = from.trace(src, dst, proto, None);
    let words = t["verdict"].as_str().unwrap_or("").to_string();
    match t["outcome"].as_str() {
        Some("delivered") => (true, words),
        Some("to-remote-node") => {
            let vni = t["vxlan"]["vni"]
                .as_u64()
                .expect("a VXLAN hop names its VNI") as u32;
            let src_ip = t["packet"]
                .as_str()
                .and_then(|p| {
                    p.split(',').find_map(|kv| {
                        ["nw_src=", "arp_spa=", "ipv6_src="]
                            .iter()
                            .find_map(|k| kv.strip_prefix(k))
                    })
                })
                .unwrap_or(src)
                .to_string();
            let there = to.trace(&src_ip, dst, proto, Some(vni));
            let w2 = there["verdict"].as_str().unwrap_or("");
            (
                there["outcome"] == "delivered",
                format!("{words} / there: {w2}"),
            )
        }
        _ => (false, words),
    }
}

/// Every pair and probe of `m` where `sdnctl trace` disagrees with what was observed: member
/// `i` lives on `nodes[node_of[i]]`, and the matrix's node row was probed from
/// `nodes[node_row]`'s tun0. Also checks that every blocked pod pair is blocked by
/// `ingress_isolation`, naming both VNIDs.
pub fn trace_mismatches(
    m: &Matrix,
    nodes: &[&crate::node::AgentNode],
    node_of: &[usize],
    node_row: usize,
) -> Vec<String> {
    let node_of: Vec<Option<usize>> = node_of.iter().copied().map(Some).collect();
    trace_mismatches_of(m, nodes, &node_of, Some(node_row))
}

/// [`trace_mismatches`] in a cluster where some members live on another network's node
/// (`node_of[i]` is `None`: an openshift-sdn node, which has no `sdnctl trace`). A pair from
/// one of our nodes to such a node must leave over VXLAN with the source's VNID as VNI (what
/// the other node's tables read); a pair from such a node is traced on our receiving node with
/// the VNI that node sends (the source VNID). The node row is checked when `node_row` names one
/// of `nodes`.
pub fn trace_mismatches_of(
    m: &Matrix,
    nodes: &[&crate::node::AgentNode],
    node_of: &[Option<usize>],
    node_row: Option<usize>,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut checked = 0;
    for (i, row) in m.pairs.iter().enumerate() {
        for (j, r) in row.iter().enumerate() {
            let Some(r) = r else { continue };
            let (a, b) = (&m.members[i], &m.members[j]);
            for (k, proto) in TRACE_PROTOS.iter().enumerate() {
                let seen = [r.icmp, r.tcp, r.arp][k];
                let (src, dst) = (a.ip.to_string(), b.ip.to_string());
                let (said, words) = match (node_of[i], node_of[j]) {
                    (Some(x), Some(y)) => {
                        let (d, w) = traced(nodes[x], nodes[y], &src, &dst, proto);
                        (Some(d), w)
                    }
                    (Some(x), None) => {
                        let t = nodes[x].trace(&src, &dst, proto, None);
                        let vni = t["vxlan"]["vni"].as_u64();
                        if vni != Some(u64::from(a.vnid)) {
                            out.push(format!(
                                "{} -> {} {proto}: leaves with VNI {vni:?}, not its VNID {}: {}",
                                a.label, b.label, a.vnid, t["verdict"]
                            ));
                        }
                        (None, String::new())
                    }
                    (None, Some(y)) => {
                        let t = nodes[y].trace(&src, &dst, proto, Some(a.vnid));
                        (
                            Some(t["outcome"] == "delivered"),
                            t["verdict"].as_str().unwrap_or("").to_string(),
                        )
                    }
                    (None, None) => (None, String::new()),
                };
                checked += 1;
                let Some(said) = said else { continue };
                if said != seen {
                    out.push(format!(
                        "{} -> {} {proto}: observed {}, trace says {}: {words}",
                        a.label,
                        b.label,
                        if seen { "reached" } else { "blocked" },
                        if said { "delivered" } else { "not delivered" }
                    ));
                } else if !said && node_of[i].is_some() {
                    let want = format!("ingress_isolation: source VNID {}", a.vnid);
                    if !words.contains(&want)
                        || !words.contains(&format!("destination VNID {}", b.vnid))
                    {
                        out.push(format!(
                            "{} -> {} {proto}: blocked, but the verdict does not name the isolation of VNIDs {} and {}: {words}",
                            a.label, b.label, a.vnid, b.vnid
                        ));
                    }
                }
            }
        }
    }
    if let Some(node_row) = node_row {
        for (j, r) in m.node.iter().enumerate() {
            let Some(to) = node_of[j] else { continue };
            let b = &m.members[j];
            for (k, proto) in TRACE_PROTOS.iter().enumerate() {
                let seen = [r.icmp, r.tcp, r.arp][k];
                let (said, words) =
                    traced(nodes[node_row], nodes[to], "node", &b.ip.to_string(), proto);
                checked += 1;
                if said != seen {
                    out.push(format!(
                        "node -> {} {proto}: observed {}, trace says {}: {words}",
                        b.label,
                        if seen { "reached" } else { "blocked" },
                        if said { "delivered" } else { "not delivered" }
                    ));
                }
            }
        }
    }
    eprintln!(
        "sdnctl trace agreed with {} of {checked} observed probes",
        checked - out.len()
    );
    out
}

/// Asserts [`trace_mismatches`] finds nothing.
pub fn assert_traces_agree(
    m: &Matrix,
    nodes: &[&crate::node::AgentNode],
    node_of: &[usize],
    node_row: usize,
) {
    let bad = trace_mismatches(m, nodes, node_of, node_row);
    assert!(
        bad.is_empty(),
        "{}\nsdnctl trace disagrees with the observed matrix in {} probes:\n{}",
        m.render(),
        bad.len(),
        bad.join("\n")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(label: &str, vnid: u32) -> Member {
        Member {
            label: label.into(),
            netns: String::new(),
            ifname: "eth0".into(),
            ip: Ipv4Addr::UNSPECIFIED,
            namespace: format!("ns{vnid}"),
            vnid,
        }
    }

    const ALL: Reach = Reach {
        icmp: true,
        tcp: true,
        arp: true,
    };
    const NONE: Reach = Reach {
        icmp: false,
        tcp: false,
        arp: false,
    };

    #[test]
    fn the_rule_and_its_mismatches() {
        assert!(allowed(5, 5) && allowed(0, 5) && allowed(5, 0) && !allowed(5, 6));
        let members = vec![member("a", 11), member("b", 12), member("g", 0)];
        let good = Matrix {
            title: "t".into(),
            members: members.clone(),
            pairs: vec![
                vec![None, Some(NONE), Some(ALL)],
                vec![Some(NONE), None, Some(ALL)],
                vec![Some(ALL), Some(ALL), None],
            ],
            node: vec![ALL; 3],
        };
        assert!(good.mismatches().is_empty(), "{:?}", good.mismatches());
        // One leaked ARP across tenants, one blocked TCP to global, the node missing a pod.
        let mut bad = good.clone();
        bad.pairs[0][1] = Some(Reach { arp: true, ..NONE });
        bad.pairs[1][2] = Some(Reach { tcp: false, ..ALL });
        bad.node[1] = NONE;
        let m = bad.mismatches();
        assert_eq!(m.len(), 3, "{m:?}");
        assert!(
            m[0].starts_with("a (ns11/11) -> b (ns12/12): saw ..A"),
            "{m:?}"
        );
        assert!(bad.render().contains("..A!"), "{}", bad.render());
    }
}
