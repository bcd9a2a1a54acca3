//! OVS faults on a running node, with traffic flowing: what an operator's slip or a crashed
//! daemon does, and that the agent puts back everything it owns by itself.
//!
//! - `ovs-vsctl del-port` of a pod port, `ovs-vsctl clear port ... qos`, `ovs-ofctl del-flows`
//!   (all, one table, one pod row) and `ovs-ofctl del-meter`: each is repaired from the agent's
//!   desired state (OVSDB monitor, OpenFlow flow monitor), logged at WARN with what drifted.
//! - ovs-vswitchd killed with SIGKILL and started again: tun0 and the whole pipeline come back,
//!   and `flow-restore-wait` is set again for the next restart.
//! - ovsdb-server restarted: the agent reconnects and keeps repairing.
//! - the agent SIGKILLed at random moments of ADDs that wire every piece, then restarted and
//!   the runtime's DEL: a leak census after each round.
//! - faults that come together: the agent and ovs-vswitchd both killed within a second, in
//!   either order, during ADD bursts; then the isolation matrix and a census of rows (on the
//!   ports as OVS numbers them now), leases and the pool.
//!
//! Every case waits for recovery with a generous bound (these machines are shared) and prints
//! how long it took (`--nocapture`); no timing is asserted.

use std::time::{Duration, Instant};

use sdn_tests::harness::wait_until;
use sdn_tests::node::{AgentNode, CniPod, NodeOptions};
use serde_json::json;

/// The bound on any repair (the agent's own target is well under a second).
const BOUND: Duration = Duration::from_secs(10);

fn veth(node: &AgentNode, p: &CniPod<'_>) -> String {
    node.port_of(&p.id)
}

/// Waits until `a` pings `b` again; returns how long that took (panics after [`BOUND`]).
fn recovered(node: &AgentNode, what: &str, a: &CniPod<'_>, b: &CniPod<'_>) -> Duration {
    let t = Instant::now();
    // 100 ms probes: the time printed is within 0.1 s of the real recovery.
    let probe = || a.ns.exec(&["ping", "-c", "1", "-W", "0.1", &b.ip]).is_ok();
    assert!(
        wait_until(BOUND, probe),
        "{what}: {} does not reach {} within {BOUND:?}; other_config {}; ports {}; flows:\n{}\nlog:\n{}",
        a.ip,
        b.ip,
        node.ovs.vsctl(&["get", "Open_vSwitch", ".", "other_config"]).trim(),
        node.ovs.vsctl(&["--columns=name,ofport", "list", "Interface"]).split_whitespace().collect::<Vec<_>>().join(" "),
        node.flows().join("\n"),
        node.log()
    );
    let took = t.elapsed();
    eprintln!("{what}: traffic back after {took:?}");
    took
}

/// Waits until the flow table is exactly `want` again.
fn flows_back(node: &AgentNode, what: &str, want: &[String]) {
    assert!(
        wait_until(BOUND, || node.flows() == want),
        "{what}: flows not restored within {BOUND:?}\nmissing: {:?}\nextra: {:?}",
        want.iter()
            .filter(|f| !node.flows().contains(f))
            .collect::<Vec<_>>(),
        node.flows()
            .iter()
            .filter(|f| !want.contains(f))
            .collect::<Vec<_>>()
    );
}

#[test]
fn ports_qos_flows_and_meters_removed_by_hand_are_put_back() {
    let node = AgentNode::start(NodeOptions::default());
    // a: limited both ways (an egress meter on netdev, an ingress QoS row).
    let a = node.pod_with(
        "default",
        "a",
        Some(json!({"bandwidth": {"ingressRate": 50_000_000, "egressRate": 50_000_000}})),
    );
    let b = node.pod("default", "b");
    assert!(a.ping(&b.ip, 2), "a reaches b before any fault");
    let flows = node.flows();
    let ofport_b = node
        .ovs
        .vsctl(&["get", "Interface", &veth(&node, &b), "ofport"])
        .trim()
        .to_string();

    // del-port of b's port: back with its ofport and record, traffic flows again.
    node.ovs.vsctl(&["del-port", "br0", &veth(&node, &b)]);
    recovered(&node, "del-port", &a, &b);
    assert_eq!(
        node.ovs
            .vsctl(&["get", "Interface", &veth(&node, &b), "ofport"])
            .trim(),
        ofport_b
    );
    assert!(node.pod_ports().contains(&veth(&node, &b)));
    assert!(
        node.log().contains("re-added"),
        "no WARN for the port:\n{}",
        node.log()
    );
    flows_back(&node, "del-port", &flows);

    // a's ingress QoS cleared from its port: re-created and attached.
    node.ovs.vsctl(&["clear", "Port", &veth(&node, &a), "qos"]);
    assert!(
        wait_until(BOUND, || {
            node.ovs
                .vsctl(&["get", "Port", &veth(&node, &a), "qos"])
                .trim()
                != "[]"
        }),
        "QoS not re-attached:\n{}",
        node.log()
    );
    // The log line follows the repair it reports.
    assert!(wait_until(BOUND, || node
        .log()
        .contains("ingress QoS was removed or changed; re-created")));

    // Every flow deleted.
    node.ovs.ofctl(&["del-flows", "br0"]);
    recovered(&node, "del-flows", &a, &b);
    flows_back(&node, "del-flows", &flows);
    assert!(
        node.log()
            .contains("flow change(s) behind the agent's back"),
        "{}",
        node.log()
    );

    // One pod's table-70 row.
    node.ovs
        .ofctl(&["del-flows", "br0", &format!("table=70,ip,nw_dst={}", b.ip)]);
    recovered(&node, "del-flows of one row", &a, &b);
    flows_back(&node, "del-flows of one row", &flows);

    // A row changed in place (mod-flows): put back as it was.
    node.ovs.ofctl(&[
        "mod-flows",
        "br0",
        &format!("table=70,ip,nw_dst={},actions=drop", b.ip),
    ]);
    recovered(&node, "mod-flows", &a, &b);
    flows_back(&node, "mod-flows", &flows);

    // a's egress meter deleted (OVS deletes the flows using it along with it).
    let meters = node.egress_meters().join("\n");
    let id = meters
        .split("meter=")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .unwrap_or_else(|| panic!("no meter for a: {meters}"))
        .to_string();
    node.ovs.ofctl(&[
        "-O",
        "OpenFlow13",
        "del-meter",
        "br0",
        &format!("meter={id}"),
    ]);
    recovered(&node, "del-meter", &a, &b);
    flows_back(&node, "del-meter", &flows);
    assert!(node
        .egress_meters()
        .iter()
        .any(|m| m.starts_with(&format!("meter={id} "))));
}

#[test]
fn a_crashed_vswitchd_and_a_restarted_ovsdb_are_survived() {
    let node = AgentNode::start(NodeOptions::default());
    let a = node.pod("default", "a");
    let b = node.pod("default", "b");
    assert!(a.ping(&b.ip, 2));
    let flows = node.flows();
    let wait = |v: &str| {
        wait_until(BOUND, || {
            node.ovs
                .try_vsctl(&["get", "Open_vSwitch", ".", "other_config:flow-restore-wait"])
                .is_ok_and(|o| o.trim().trim_matches('"') == v)
        })
    };
    assert!(wait("true"), "flow-restore-wait not set while running");

    // SIGKILL, then a new ovs-vswitchd: it waits (flow-restore-wait) until the agent has put
    // tun0 and the pipeline back, then forwards.
    node.ovs.kill_vswitchd();
    node.ovs.start_vswitchd();
    let t = Instant::now();
    recovered(&node, "ovs-vswitchd restart", &a, &b);
    eprintln!(
        "ovs-vswitchd restart: pods talk {:?} after it was started",
        t.elapsed()
    );
    flows_back(&node, "ovs-vswitchd restart", &flows);
    let tun0 = node
        .ovs
        .exec_in_netns(&["ip", "-4", "-o", "addr", "show", "dev", "tun0"])
        .unwrap_or_default();
    assert!(
        tun0.contains("10.128.0.1/"),
        "tun0 has no gateway address: {tun0}"
    );
    assert!(a.ping("10.128.0.1", 2), "the gateway answers again");
    assert!(
        wait("true"),
        "flow-restore-wait not set again for the next restart"
    );

    // ovsdb-server restarted: the agent reconnects, and still repairs what is removed. While it
    // is down an ADD answers "try again later" (11) at once, naming OVSDB, instead of waiting.
    node.ovs.stop_ovsdb();
    let readyz = || {
        node.ovs
            .exec_in_netns(&[
                "curl",
                "-sS",
                "-m",
                "10",
                "http://127.0.0.1:9101/readyz?verbose",
            ])
            .unwrap_or_else(|e| e.to_string())
    };
    // (ovs-vswitchd may not answer OpenFlow for a few seconds right after its database went:
    // /readyz, which asks it, can take that long once.)
    assert!(
        wait_until(Duration::from_secs(20), || readyz().contains("[-]ovsdb")),
        "the agent never noticed ovsdb-server was gone: {}",
        readyz()
    );
    let outage = sdn_tests::harness::Netns::new("sdndbdown");
    let began = Instant::now();
    let add = node.add("db-down", &outage.path(), "");
    let took = began.elapsed();
    eprintln!("an ADD with ovsdb-server down: {:.3} s", took.as_secs_f64());
    assert_eq!(add.error_code(), Some(11), "{}", add.stdout);
    assert!(
        add.stdout
            .contains("the Open vSwitch database is unreachable"),
        "{}",
        add.stdout
    );
    assert!(
        took < Duration::from_secs(5),
        "an ADD took {took:?} with ovsdb-server down: it waited for OVSDB"
    );
    node.ovs.start_ovsdb();
    assert!(a.ping(&b.ip, 2), "the datapath does not need ovsdb-server");
    std::thread::sleep(Duration::from_millis(500));
    node.ovs.vsctl(&["del-port", "br0", &veth(&node, &b)]);
    recovered(&node, "del-port after an ovsdb-server restart", &a, &b);
    assert!(node.agent_running());
}

/// The agent SIGKILLed at a random moment of an ADD that wires every piece (lease, veth, port,
/// QoS, meter, flows, host port rules), again and again; after each restart the runtime's DEL
/// (what a runtime does after a failed or interrupted ADD) must leave nothing: no pod port,
/// veth, lease, pod flow, QoS row, meter or host port chain, and the port pool intact.
#[test]
fn sigkill_in_the_middle_of_adds_leaks_nothing() {
    let node = AgentNode::start(NodeOptions::default());
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        | 1;
    eprintln!("SIGKILL loop seed {seed}");
    let mut x = seed;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut completed, mut cut) = (0, 0);
    for round in 0..12u16 {
        let ns = sdn_tests::harness::Netns::new("sdnkill");
        let id = format!("{}-k{round}", ns.name());
        let mut conf = node.netconf("1.0.0");
        conf["runtimeConfig"] = json!({
            "portMappings": [{"hostPort": 21000 + round, "containerPort": 80}],
            "bandwidth": {"ingressRate": 10_000_000, "egressRate": 10_000_000}
        });
        let args = format!("K8S_POD_NAMESPACE=default;K8S_POD_NAME=k{round}");
        let delay = Duration::from_millis(next() % 80);
        let out = std::thread::scope(|s| {
            let add = s.spawn(|| {
                node.cni(
                    &[
                        ("CNI_COMMAND", "ADD"),
                        ("CNI_CONTAINERID", &id),
                        ("CNI_NETNS", &ns.path()),
                        ("CNI_IFNAME", "eth0"),
                        ("CNI_ARGS", &args),
                        ("CNI_PATH", "/opt/cni/bin"),
                    ],
                    &conf,
                )
            });
            std::thread::sleep(delay);
            node.stop_agent(libc::SIGKILL);
            add.join().expect("the ADD thread")
        });
        if out.code == 0 {
            completed += 1;
        } else {
            cut += 1;
        }
        node.start_agent();
        let del = node.del(&id, &ns.path());
        assert_eq!(
            del.code, 0,
            "round {round}: DEL after the restart: {}",
            del.stdout
        );
        drop(ns);
        node.assert_no_pod_leftovers();
        let qos = node.ovs.vsctl(&["--columns=external_ids", "list", "QoS"]);
        assert!(
            !qos.contains(&id),
            "round {round}: a QoS row of {id} left:\n{qos}"
        );
        let meters = node.egress_meters();
        assert!(
            meters.is_empty(),
            "round {round}: an egress meter left:\n{meters:#?}"
        );
        let nat = node
            .ovs
            .exec_in_netns(&["iptables-save", "-t", "nat"])
            .unwrap_or_default();
        assert!(
            !nat.contains(&id),
            "round {round}: host port rules of {id} left:\n{nat}"
        );
        node.assert_pool_sane(64); // the agent's default pool size
    }
    eprintln!(
        "SIGKILL loop: {completed} ADDs completed before the kill, {cut} cut off; nothing leaked"
    );
}

/// Which daemon goes first in [`faults_that_come_together`].
#[derive(Debug, Clone, Copy)]
enum Order {
    /// The agent is SIGKILLed in the middle of an ADD burst and started again; within a second
    /// ovs-vswitchd is SIGKILLed (in the middle of the new agent's start-up and pool refill)
    /// and started again.
    AgentThenSwitch,
    /// ovs-vswitchd is SIGKILLed in the middle of an ADD burst and started again; within a
    /// second the agent is SIGKILLed in the middle of its repair, and started again.
    SwitchThenAgent,
    /// Open vSwitch as a whole restarts (ovsdb-server stopped, ovs-vswitchd SIGKILLed, both
    /// started again: a package upgrade) in the middle of an ADD burst; within a second the
    /// agent is SIGKILLed and started again.
    OvsThenAgent,
}

/// A pod of the combined-fault cycles (made through the real `sdn-cni`, deleted by the test).
struct FaultPod {
    ns: sdn_tests::harness::Netns,
    id: String,
    namespace: &'static str,
    ip: Option<String>,
}

/// ADD of `p` as a runtime calls it; records the address on success.
fn add_fault_pod(node: &AgentNode, p: &mut FaultPod) -> sdn_tests::node::CniOutcome {
    let args = format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={}",
        p.namespace, p.id
    );
    let out = node.add(&p.id, &p.ns.path(), &args);
    if out.code == 0 {
        p.ip = out.ip();
    }
    out
}

/// While ovs-vswitchd is down: an operator's port `name` asking for ofport `number`, which a
/// pod's port has; the restarted switch gives it that number and the pod's port another.
fn take_number(node: &AgentNode, name: &str, number: i64) {
    node.ovs.vsctl(&[
        "--no-wait",
        "add-port",
        "br0",
        name,
        "--",
        "set",
        "Interface",
        name,
        "type=internal",
        &format!("ofport_request={number}"),
    ]);
}

/// ADDs of `pods`, all at once, each on a thread of scope `s`; joined, they give the exit codes.
fn spawn_adds<'scope, 'env>(
    s: &'scope std::thread::Scope<'scope, 'env>,
    node: &'env AgentNode,
    pods: &'env mut [FaultPod],
) -> Vec<std::thread::ScopedJoinHandle<'scope, i32>> {
    pods.iter_mut()
        .map(|p| s.spawn(move || add_fault_pod(node, p).code))
        .collect()
}

/// The combined faults of an operator's worst night, a few deterministic cycles of one
/// `order`: an ADD burst over two tenants, the two kills within a second of each other, the
/// runtime retrying what failed (DEL + ADD, as kubelet does), DELs (one after its netns went,
/// one repeated);
/// then, once both daemons are up: every pod reaches what its tenancy allows (the isolation
/// matrix) within a few seconds, br0's port rows follow the ports as OVS numbers them now (none
/// on a stale ofport, none owned by nobody), every pod holds its lease and no other lease is
/// left, and the pool is whole.
fn faults_that_come_together(order: Order) {
    use sdn_tests::matrix::{self, Member, NodeSide};
    // A small pool: a burst empties it, so ports are being added (refills, ADDs that make
    // their own) when the daemons die, and a restarted ovs-vswitchd numbers ports anew.
    const POOL: usize = 4;
    let node = AgentNode::start(NodeOptions {
        extra: vec!["--port-pool-size".into(), POOL.to_string()],
        ..NodeOptions::default()
    });
    node.set_netnamespace("red", 11);
    node.set_netnamespace("blue", 12);
    let tenants: [(&'static str, u32); 2] = [("red", 11), ("blue", 12)];
    let mut serial = 0;
    let mut new_pod = |namespace: &'static str| {
        serial += 1;
        let ns = sdn_tests::harness::Netns::new("sdncf");
        FaultPod {
            id: format!("{}-cf{serial}", ns.name()),
            ns,
            namespace,
            ip: None,
        }
    };
    let mut pods: Vec<FaultPod> = Vec::new();
    for i in 0..4 {
        let mut p = new_pod(tenants[i % 2].0);
        let out = add_fault_pod(&node, &mut p);
        assert_eq!(out.code, 0, "ADD before the faults: {}", out.stdout);
        pods.push(p);
    }
    let node_side = NodeSide {
        netns: node.ovs.netns().to_string(),
        ifname: "tun0".into(),
    };
    for cycle in 0..3u64 {
        // Two bursts of 5 ADDs over both tenants (the pool holds 4: the others add ports of
        // their own): the first kill 10-50 ms into the first burst (the agent answers an ADD
        // from its pool in about 15 ms); the second burst starts as soon as that daemon is
        // back (or, for ovs-vswitchd, while it is down), and the second kill comes 0.05-0.65 s
        // after it is back.
        let mut burst: Vec<FaultPod> = (0..10).map(|i| new_pod(tenants[i % 2].0)).collect();
        let taker = format!("cftaker{cycle}");
        // The newest pod from before the burst: its port is numbered anew, and it is kept.
        let victim = pods.last().expect("pods").id.clone();
        let taken = node.interfaces()[&node.port_of(&victim)].0;
        let gap = Duration::from_millis(50 + 300 * cycle);
        let outcomes: Vec<i32> = std::thread::scope(|s| {
            let (first, second) = burst.split_at_mut(5);
            let mut adds = spawn_adds(s, &node, first);
            std::thread::sleep(Duration::from_millis(10 + 20 * cycle));
            // ovs-vswitchd is down for 0.2 s (a restart takes that long on a node): ADDs
            // meanwhile add port rows it has not numbered when it comes back, and so does an
            // operator's port asking for the number a pod's port has (numbers asked for are
            // given first): whatever the timing, the restarted switch numbers a pod anew.
            let restart_switch = || {
                node.ovs.kill_vswitchd();
                take_number(&node, &taker, taken);
                std::thread::sleep(Duration::from_millis(200));
                node.ovs.start_vswitchd();
            };
            match order {
                Order::AgentThenSwitch => {
                    node.stop_agent(libc::SIGKILL);
                    node.start_agent_serving();
                    adds.extend(spawn_adds(s, &node, second));
                    std::thread::sleep(gap);
                    restart_switch();
                }
                Order::OvsThenAgent => {
                    node.ovs.stop_ovsdb();
                    node.ovs.kill_vswitchd();
                    adds.extend(spawn_adds(s, &node, second));
                    std::thread::sleep(Duration::from_millis(200));
                    node.ovs.start_ovsdb();
                    take_number(&node, &taker, taken);
                    node.ovs.start_vswitchd();
                    std::thread::sleep(gap);
                    node.stop_agent(libc::SIGKILL);
                    node.start_agent_serving();
                }
                Order::SwitchThenAgent => {
                    node.ovs.kill_vswitchd();
                    take_number(&node, &taker, taken);
                    adds.extend(spawn_adds(s, &node, second));
                    std::thread::sleep(Duration::from_millis(200));
                    node.ovs.start_vswitchd();
                    std::thread::sleep(gap);
                    node.stop_agent(libc::SIGKILL);
                    node.start_agent_serving();
                }
            }
            adds.into_iter()
                .map(|a| a.join().expect("an ADD thread"))
                .collect()
        });
        let failed = outcomes.iter().filter(|c| **c != 0).count();
        let renumbered_pod = node.interfaces()[&node.port_of(&victim)].0;
        assert_ne!(
            renumbered_pod, taken,
            "the pod's port kept its number {taken}"
        );
        // The runtime retries what failed: DEL, then ADD again.
        for (p, code) in burst.iter_mut().zip(&outcomes) {
            if *code != 0 {
                let del = node.del(&p.id, &p.ns.path());
                assert_eq!(
                    del.code, 0,
                    "cycle {cycle}: DEL of a cut ADD: {}",
                    del.stdout
                );
                let out = add_fault_pod(&node, p);
                assert_eq!(out.code, 0, "cycle {cycle}: ADD again: {}", out.stdout);
            }
        }
        pods.extend(burst);
        node.ovs.vsctl(&["del-port", "br0", &taker]);
        // DELs of the 8 oldest (but the renumbered one): the first after its netns went, the second twice (a runtime
        // repeats a DEL it is unsure of).
        for k in 0..8 {
            let oldest = pods
                .iter()
                .position(|p| p.id != victim)
                .expect("a pod to delete");
            let p = pods.remove(oldest);
            if k == 0 {
                sdn_tests::harness::run("ip", &["netns", "delete", p.ns.name()])
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            for _ in 0..if k == 1 { 2 } else { 1 } {
                let del = node.del(&p.id, &p.ns.path());
                assert_eq!(del.code, 0, "cycle {cycle}: DEL: {}", del.stdout);
            }
        }
        // Every pod reaches what its tenancy allows, within a few seconds.
        let members: Vec<Member> = pods
            .iter()
            .enumerate()
            .map(|(i, p)| Member {
                label: format!("{}{i}", &p.namespace[..1]),
                netns: p.ns.name().to_string(),
                ifname: "eth0".into(),
                ip: p.ip.as_deref().expect("an address").parse().expect("IPv4"),
                namespace: p.namespace.to_string(),
                vnid: tenants
                    .iter()
                    .find(|t| t.0 == p.namespace)
                    .expect("tenant")
                    .1,
            })
            .collect();
        let began = Instant::now();
        let _servers = matrix::serve(&members);
        let mut last = None;
        let settled = wait_until(BOUND, || {
            let m = matrix::observe(
                &format!("{order:?}, cycle {cycle}"),
                &members,
                &node_side,
                Duration::from_millis(1000),
            );
            let ok = m.mismatches().is_empty();
            last = Some(m);
            ok
        });
        let m = last.expect("one matrix");
        assert!(
            settled,
            "{order:?}, cycle {cycle}: isolation matrix still wrong {BOUND:?} after both \
             daemons are up:\n{}\n{}\nports: {:?}\nlog:\n{}",
            m.render(),
            m.mismatches().join("\n"),
            node.interfaces(),
            node.log()
        );
        let renumbered = node
            .log()
            .lines()
            .filter(|l| l.contains("numbered") && l.contains("anew"))
            .count();
        eprintln!(
            "{order:?}, cycle {cycle}: {failed} of 10 ADDs cut off; {renumbered} renumbered \
             port(s) followed so far; matrix of {} pods right {:.1} s after both were up\n{}",
            members.len(),
            began.elapsed().as_secs_f64(),
            m.render()
        );
        // The census: rows on the ports OVS has now, one lease per pod, the pool whole.
        let mut off = Vec::new();
        assert!(
            wait_until(BOUND, || {
                off = node.rows_off_their_ports();
                off.is_empty()
            }),
            "{order:?}, cycle {cycle}: br0's rows do not follow the ports:\n{}\nflows:\n{}",
            off.join("\n"),
            node.flows().join("\n")
        );
        let mut want: Vec<String> = pods.iter().filter_map(|p| p.ip.clone()).collect();
        want.sort();
        assert_eq!(node.leases(), want, "{order:?}, cycle {cycle}: leases");
        let mut ports: Vec<String> = node.pod_ports();
        ports.sort();
        assert_eq!(
            ports.len(),
            pods.len(),
            "{order:?}, cycle {cycle}: pod ports {ports:?}"
        );
        node.assert_pool_sane(POOL);
        // The pool is whole: every pool row on br0 is one the agent holds (idle or warm), and
        // the agent holds no port br0 lost; at least half the pool's size (it is refilled when
        // it falls to half).
        assert!(
            wait_until(BOUND, || {
                let rows = node.pool_ports().len();
                rows >= POOL / 2 && rows == node.pool_held()
            }),
            "{order:?}, cycle {cycle}: the pool is not whole: {} pool rows on br0, the agent \
             holds {}",
            node.pool_ports().len(),
            node.pool_held()
        );
    }
    for p in pods {
        let del = node.del(&p.id, &p.ns.path());
        assert_eq!(del.code, 0, "DEL at the end: {}", del.stdout);
    }
    node.assert_no_pod_leftovers();
}

#[test]
fn agent_kill_then_vswitchd_restart_within_a_second() {
    faults_that_come_together(Order::AgentThenSwitch);
}

#[test]
fn vswitchd_restart_then_agent_kill_within_a_second() {
    faults_that_come_together(Order::SwitchThenAgent);
}

#[test]
fn ovs_restart_then_agent_kill_within_a_second() {
    faults_that_come_together(Order::OvsThenAgent);
}

/// Every file in the node's lease directory and its CNI config is whole: each lease holds
/// `<id>\r\n<ifname>` with both parts, the cursor an address, the conflist JSON with a plugin,
/// no temporary file of a living writer; returns what is not.
fn files_not_whole(node: &AgentNode) -> Vec<String> {
    let mut bad = Vec::new();
    for e in std::fs::read_dir(node.lease_dir())
        .expect("lease dir")
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        if name.parse::<std::net::Ipv4Addr>().is_ok() {
            let whole = text
                .split_once("\r\n")
                .is_some_and(|(id, ifname)| !id.is_empty() && !ifname.is_empty());
            if !whole {
                bad.push(format!("lease {name} holds {text:?}"));
            }
        } else if name.starts_with("last_reserved_ip") {
            if text.trim().parse::<std::net::Ipv4Addr>().is_err() {
                bad.push(format!("{name} holds {text:?}"));
            }
        } else if name != "lock" {
            bad.push(format!("{name} in the lease directory"));
        }
    }
    match std::fs::read_to_string(node.conf_file()) {
        Ok(conf) => {
            let parsed: serde_json::Value = serde_json::from_str(&conf).unwrap_or_default();
            if parsed["plugins"][0]["type"] != "sdn-cni" {
                bad.push(format!("the CNI config holds {conf:?}"));
            }
        }
        Err(e) => bad.push(format!("no CNI config: {e}")),
    }
    bad
}

/// The agent SIGKILLs itself at every step of every file write it makes (the
/// `SDN_TEST_KILL_AT_WRITE` hook of `cluster::files`: half a file, then a whole file not yet in
/// place; a lease or cursor rewritten in place: before and after its one write) while it writes its CNI config at start-up and leases and cursors for an ADD and a
/// DEL; after each kill the next agent starts, every file is whole (none empty, none half, no
/// "unparsable last reserved ip"), the runtime's DEL + ADD succeeds, and nothing leaks.
#[test]
fn a_kill_at_every_write_leaves_every_file_whole() {
    let node = AgentNode::start(NodeOptions::default());
    node.set_netnamespace("red", 11);
    for step in 1..=40u32 {
        node.stop_agent(libc::SIGTERM);
        // The config is written again at start-up (the runtime keeps it across restarts).
        std::fs::remove_file(node.conf_file()).expect("removing the CNI config");
        node.set_agent_env("SDN_TEST_KILL_AT_WRITE", Some(&step.to_string()));
        let ns = sdn_tests::harness::Netns::new("sdnwr");
        let id = format!("{}-w{step}", ns.name());
        let args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=red;K8S_POD_NAME=w";
        let served = node.start_agent_may_die();
        if served {
            let _ = node.add(&id, &ns.path(), args);
            let _ = node.del(&id, &ns.path());
            // The retirement of the deleted pod's address (a lease handed over, then removed)
            // runs in the background.
            std::thread::sleep(Duration::from_millis(600));
        }
        let survived = node.agent_running();
        node.stop_agent(libc::SIGKILL);
        node.set_agent_env("SDN_TEST_KILL_AT_WRITE", None);
        if survived {
            let kills = step - 1;
            eprintln!("kill at every write: {kills} kills, the agent survived step {step}: every write was cut");
            assert!(kills >= 8, "only {kills} write steps were reached");
            node.start_agent();
            node.assert_no_pod_leftovers();
            return;
        }
        let bad = files_not_whole(&node);
        // A write cut before its rename leaves the old file and its temporary one (removed by
        // the next start); only the conflist may be missing (removed above, and the kill came
        // before the new one was in place).
        let bad: Vec<String> = bad
            .into_iter()
            .filter(|b| !b.starts_with("no CNI config"))
            .filter(|b| {
                !b.strip_suffix(" in the lease directory")
                    .is_some_and(cluster::files::is_temp)
            })
            .collect();
        assert!(
            bad.is_empty(),
            "step {step}: files not whole after the kill:\n{}",
            bad.join("\n")
        );
        // The cut write's temporary file, aged past the minute a write may take: the next
        // start deletes it.
        for e in std::fs::read_dir(node.lease_dir())
            .expect("lease dir")
            .flatten()
        {
            if cluster::files::is_temp(&e.file_name().to_string_lossy()) {
                std::fs::File::options()
                    .write(true)
                    .open(e.path())
                    .and_then(|f| {
                        f.set_modified(std::time::SystemTime::now() - Duration::from_secs(120))
                    })
                    .expect("aging a temporary file");
            }
        }
        node.start_agent();
        assert!(
            files_not_whole(&node).is_empty(),
            "step {step}: after the restart: {:?}",
            files_not_whole(&node)
        );
        assert!(
            !node.log().contains("ignoring unparsable last reserved ip"),
            "step {step}: the cursor was read half-written"
        );
        // The runtime: DEL of whatever was cut, then the ADD again.
        assert_eq!(node.del(&id, &ns.path()).code, 0, "step {step}: DEL");
        let again = node.add(&id, &ns.path(), args);
        assert_eq!(again.code, 0, "step {step}: ADD again: {}", again.stdout);
        assert_eq!(node.del(&id, &ns.path()).code, 0, "step {step}: DEL");
        node.assert_no_pod_leftovers();
    }
    panic!("the agent was still killed at step 40: more writes than the test expects");
}

/// Open vSwitch and the agent down, the agent back first: it waits for ovsdb-server and
/// ovs-vswitchd (rather than exiting and leaving the pods cut off while its supervisor backs
/// off), then restores the pipeline.
#[test]
fn an_agent_started_before_ovs_vswitchd_waits_for_it() {
    let node = AgentNode::start(NodeOptions::default());
    let a = node.pod("default", "a");
    let b = node.pod("default", "b");
    assert!(a.ping(&b.ip, 2));
    node.stop_agent(libc::SIGKILL);
    node.ovs.kill_vswitchd();
    node.ovs.stop_ovsdb();
    let t = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_secs(2));
            node.ovs.start_ovsdb();
            std::thread::sleep(Duration::from_secs(1));
            node.ovs.start_vswitchd();
        });
        node.start_agent();
    });
    eprintln!(
        "the agent started 2 s before ovsdb-server, 3 s before ovs-vswitchd: ready after {:?}",
        t.elapsed()
    );
    for what in ["waiting for ovsdb-server", "waiting for ovs-vswitchd"] {
        assert!(
            node.log().contains(what),
            "not said: {what}: {}",
            node.log()
        );
    }
    recovered(&node, "agent before ovs-vswitchd", &a, &b);
    eprintln!("pods talk {:?} after the agent started", t.elapsed());
}

/// ovs-vswitchd stopped (SIGSTOP, as while it reconfigures a huge bridge) with no pool port to
/// take: an ADD needs a new OVS port, which the switch never numbers. It answers "try again
/// later" (11) within about a second, naming br0, leaves nothing behind, and the same ADD goes
/// through once the switch answers again.
#[test]
fn an_add_while_ovs_vswitchd_hangs_is_try_again_later_at_once() {
    let node = AgentNode::start(NodeOptions {
        extra: vec!["--port-pool-size".into(), "0".into()],
        ..NodeOptions::default()
    });
    let a = node.pod("default", "a");
    struct Resume(i32);
    impl Drop for Resume {
        fn drop(&mut self) {
            // SAFETY: kill on the pid of the ovs-vswitchd this test's harness started.
            unsafe { libc::kill(self.0, libc::SIGCONT) };
        }
    }
    let pid = node.ovs.vswitchd_pid().expect("ovs-vswitchd runs");
    let ns = sdn_tests::harness::Netns::new("sdnhung");
    // Twice: at once (before the health round has seen the switch stop) and after /readyz
    // says OpenFlow does not answer.
    for (round, settle) in [(0, Duration::ZERO), (1, Duration::from_secs(3))] {
        // SAFETY: as above.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        let resume = Resume(pid);
        std::thread::sleep(settle);
        let began = Instant::now();
        let add = node.add("hung-pod", &ns.path(), "");
        let took = began.elapsed();
        eprintln!(
            "round {round}: an ADD with ovs-vswitchd stopped answered in {:.3} s: {}",
            took.as_secs_f64(),
            add.stdout.trim()
        );
        assert_eq!(add.error_code(), Some(11), "round {round}: {}", add.stdout);
        assert!(add.stdout.contains("br0"), "round {round}: {}", add.stdout);
        assert!(
            took < Duration::from_secs(4),
            "round {round}: the ADD took {took:?}: it waited for the OVSDB timeout"
        );
        drop(resume);
        assert!(
            wait_until(Duration::from_secs(10), || node
                .ovs
                .ofctl(&["dump-flows", "br0", "table=253"])
                .contains("actions")),
            "ovs-vswitchd answers again"
        );
        // Nothing of the failed ADD is left: no port, no veth, no lease.
        assert!(
            wait_until(Duration::from_secs(5), || node.pod_ports().len() == 1
                && node.veths().len() == 1
                && node.leases().len() == 1),
            "round {round}: ports {:?}, veths {:?}, leases {:?}",
            node.pod_ports(),
            node.veths(),
            node.leases()
        );
        let add = node.add("hung-pod", &ns.path(), "");
        assert_eq!(add.code, 0, "round {round}: {}", add.stdout);
        let ip = add.ip().expect("an address");
        assert!(a.ping(&ip, 3), "round {round}: a -> the new pod {ip}");
        let del = node.del("hung-pod", &ns.path());
        assert_eq!(del.code, 0, "round {round}: {}", del.stdout);
    }
    drop(a);
    node.assert_no_pod_leftovers();
}
