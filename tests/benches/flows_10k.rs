//! Benchmark: install 10,000 flows (the five per-pod flows of 2,000 pods) and dump them back,
//! through our native OpenFlow client and through `ovs-ofctl`, side by side on the same bridge of
//! one private OVS, in one run. Prints each time and the ratio. Not a timed test: these machines
//! are shared and noisy, so this reports figures and asserts only correctness (the counts).
//!
//! Run: `cargo bench -p sdn-tests --bench flows_10k` (as root, with OVS installed).

use std::time::{Duration, Instant};

use ovs::flow::Flow;
use ovs::openflow::{BundleMsg, DumpFilter, OfClient};
use sdn_tests::corpus;
use sdn_tests::harness::Ovs;

const PODS: u32 = 2_000;
const ROUNDS: usize = 3;

fn ofctl_count(ovs: &Ovs) -> usize {
    ovs.ofctl(&["--no-stats", "dump-flows", "br0"])
        .lines()
        .count()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing. Either way, run.
    let flows: Vec<Flow> = corpus::pod_flows(PODS);
    let n = flows.len();
    let ovs = Ovs::start();
    ovs.add_bridge("br0");
    let file = ovs.dir().join("flows.txt");
    std::fs::write(
        &file,
        flows
            .iter()
            .map(|f| f.to_string() + "\n")
            .collect::<String>(),
    )
    .unwrap();
    let file = file.to_string_lossy().into_owned();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let of = rt
        .block_on(OfClient::connect(&format!(
            "unix:{}",
            ovs.mgmt_sock("br0").display()
        )))
        .unwrap();

    let (mut ours_add, mut ours_bundle, mut ours_dump) = (vec![], vec![], vec![]);
    let (mut ofctl_add, mut ofctl_bundle, mut ofctl_dump) = (vec![], vec![], vec![]);
    for _ in 0..ROUNDS {
        // ovs-ofctl add-flows, then dump-flows.
        ovs.ofctl(&["del-flows", "br0"]);
        let t = Instant::now();
        ovs.ofctl(&["add-flows", "br0", &file]);
        ofctl_add.push(t.elapsed());
        let t = Instant::now();
        let count = ofctl_count(&ovs);
        ofctl_dump.push(t.elapsed());
        assert_eq!(count, n, "ovs-ofctl installed {count} of {n}");

        // ovs-ofctl --bundle add-flows (atomic).
        ovs.ofctl(&["del-flows", "br0"]);
        let t = Instant::now();
        ovs.ofctl(&["--bundle", "add-flows", "br0", &file]);
        ofctl_bundle.push(t.elapsed());
        assert_eq!(ofctl_count(&ovs), n);

        // Our client: pipelined flow_mods + one barrier, then a dump decoded into Flow values.
        ovs.ofctl(&["del-flows", "br0"]);
        let t = Instant::now();
        rt.block_on(of.add_flows(&flows)).unwrap();
        ours_add.push(t.elapsed());
        let t = Instant::now();
        let dumped = rt.block_on(of.dump_flows(&DumpFilter::all())).unwrap();
        ours_dump.push(t.elapsed());
        assert_eq!(
            dumped.len(),
            n,
            "our client installed/dumped {} of {n}",
            dumped.len()
        );

        // Our client, one atomic bundle.
        ovs.ofctl(&["del-flows", "br0"]);
        let msgs: Vec<BundleMsg> = flows.iter().cloned().map(BundleMsg::add).collect();
        let t = Instant::now();
        rt.block_on(of.bundle(&msgs)).unwrap();
        ours_bundle.push(t.elapsed());
        assert_eq!(ofctl_count(&ovs), n);
    }

    let row = |what: &str, ours: Duration, theirs: Duration| {
        let ratio = theirs.as_secs_f64() / ours.as_secs_f64();
        eprintln!(
            "{what:<28} ours {:>8.1} ms   ovs-ofctl {:>8.1} ms   ovs-ofctl/ours {:>5.2}x",
            ours.as_secs_f64() * 1e3,
            theirs.as_secs_f64() * 1e3,
            ratio
        );
    };
    eprintln!("flows_10k: {n} flows, median of {ROUNDS} rounds, private OVS 3.1 (netdev)");
    row("install (flow_mods)", median(ours_add), median(ofctl_add));
    row(
        "install (atomic bundle)",
        median(ours_bundle),
        median(ofctl_bundle),
    );
    row("dump all flows", median(ours_dump), median(ofctl_dump));
}
