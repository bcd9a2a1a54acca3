//! What the agent's Kubernetes source holds in a cluster of 5,000 nodes and 150,000 pods, in
//! a minute instead of the benchmark's quarter hour: the fake API server is filled in process
//! (no REST), and a child process runs only `cluster::kube::KubeSource` in networkpolicy mode,
//! as the agent does, and reports its heap (glibc's count) and RSS once every pod is listed.
//!
//! `cargo run --release -p sdn-tests --example source_memory [nodes] [pods]`. The child runs
//! under whatever the environment gives it (e.g. `GLIBC_TUNABLES=glibc.malloc.arena_max=2`,
//! or `LD_PRELOAD` of another allocator), to compare allocators on the same objects.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use serde_json::json;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("child") {
        child(&args[2]);
        return;
    }
    let nodes: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5000);
    let pods: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(150_000);
    let fake = sdn_tests::fakeapi::FakeApi::start("127.0.0.1:0");
    let began = Instant::now();
    fake.put(
        json!({"apiVersion": "network.openshift.io/v1", "kind": "ClusterNetwork",
        "metadata": {"name": "default"}, "serviceNetwork": "172.30.0.0/16",
        "clusterNetworks": [{"CIDR": "10.0.0.0/8", "hostSubnetLength": 8}],
        "pluginName": "redhat/openshift-ovs-networkpolicy"}),
    )
    .unwrap();
    let subnet = |i: usize| Ipv4Addr::from(0x0a00_0000u32 + ((i as u32) << 8));
    for i in 0..nodes {
        fake.put(
            json!({"apiVersion": "network.openshift.io/v1", "kind": "HostSubnet",
            "metadata": {"name": format!("node-{i}")}, "host": format!("node-{i}"),
            "hostIP": Ipv4Addr::from(0x6440_0000u32 + i as u32).to_string(),
            "subnet": format!("{}/24", subnet(i))}),
        )
        .unwrap();
    }
    let namespaces = pods / 30;
    for n in 0..namespaces {
        let ns = format!("ns-{n:05}");
        fake.put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns,
            "labels": {"team": format!("t{}", n % 4), "env": if n % 2 == 0 { "prod" } else { "dev" }}}}))
        .unwrap();
        fake.put(
            json!({"apiVersion": "network.openshift.io/v1", "kind": "NetNamespace",
            "metadata": {"name": ns}, "netname": ns, "netid": 100 + n}),
        )
        .unwrap();
        for p in sdn_tests::simulated::policy_objects(&ns) {
            fake.put(p).unwrap();
        }
        for j in 0..30 {
            let k = n * 30 + j;
            let node = k % nodes;
            let ip = Ipv4Addr::from(u32::from(subnet(node)) + 2 + (k / nodes) as u32);
            let name = format!("pod-{k:06}");
            let pod = sdn_tests::simulated::pod_object(&ns, &name, j, &format!("node-{node}"), ip);
            fake.put(pod).unwrap();
        }
    }
    eprintln!(
        "{nodes} nodes, {pods} pods, {namespaces} namespaces in the fake API server in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let dir = std::env::temp_dir().join(format!("source-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    fake.kubeconfig(&kubeconfig).unwrap();
    // SOURCE_WRAPPER: a program the child runs under (e.g. `heaptrack`).
    let mut cmd = match std::env::var("SOURCE_WRAPPER") {
        Ok(w) => {
            let mut w = w.split_whitespace();
            let mut c = std::process::Command::new(w.next().unwrap());
            c.args(w).arg(std::env::current_exe().unwrap());
            c
        }
        Err(_) => std::process::Command::new(std::env::current_exe().unwrap()),
    };
    let status = cmd.arg("child").arg(&kubeconfig).status().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "child: {status}");
}

fn child(kubeconfig: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // SOURCE_MODE=multitenant: without NetworkPolicies and other nodes' pods.
        let policies = std::env::var("SOURCE_MODE").as_deref() != Ok("multitenant");
        let began = Instant::now();
        let client = cluster::kube::client(Some(std::path::Path::new(kubeconfig)))
            .await
            .unwrap();
        let src = cluster::kube::KubeSource::start(client, "node-1", policies, Duration::from_secs(120))
            .await
            .unwrap();
        let serving = began.elapsed();
        tokio::time::sleep(Duration::from_millis(300)).await;
        // SAFETY: no preconditions.
        let heap_serving = unsafe { libc::mallinfo2() }.uordblks;
        let mut rx = cluster::ClusterSource::subscribe(&src);
        while policies && !rx.borrow_and_update().peer_pods_listed {
            rx.changed().await.unwrap();
        }
        let listed = began.elapsed();
        let peers = rx.borrow().peer_pods.pod_count();
        tokio::time::sleep(Duration::from_secs(3)).await;
        // SAFETY: no preconditions.
        unsafe { libc::malloc_trim(0) };
        // SAFETY: no preconditions.
        let heap = unsafe { libc::mallinfo2() }.uordblks;
        let rss = std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:").map(|v| v.trim().to_string()))
            .unwrap();
        eprintln!(
            "source: served after {:.2} s, every pod ({peers}) listed after {:.2} s; glibc heap in use {:.1} MB ({:.1} MB when serving), RSS {rss}",
            serving.as_secs_f64(),
            listed.as_secs_f64(),
            heap as f64 / 1e6,
            heap_serving as f64 / 1e6
        );
        // Exit without freeing: a heap profiler sees what the source holds as not freed.
        std::process::exit(if peers > 0 || !policies { 0 } else { 1 });
    });
}
