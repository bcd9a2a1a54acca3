//! The image is real: `deploy/build-image.sh` bootstraps a Debian 12 base from Debian's own
//! packages (mmdebstrap, then `podman import`; cached in `target/image-base/`), builds
//! `deploy/image/Containerfile` with the binaries built in this tree, and the agent runs from that
//! image against a test OVS until it is ready, as the DaemonSet runs it: the node's network
//! namespace as its host network, privileged, the node's directories and `/run/netns` mounted at
//! their own paths, started through `sdn-entrypoint`. A pod added through the host's `sdn-cni`
//! gets its flows, and `sdnctl` inside the container sees it. Twice: once on a node whose
//! namespace holds iptables-legacy rules and once with nft rules, and each time the agent's
//! chains land in that backend (the entrypoint's choice, as kube-proxy's images make it).

use std::process::Command;
use std::time::Duration;

use sdn_tests::harness::{wait_until, which, workspace_bin};
use sdn_tests::node::{AgentNode, NodeOptions};
use sdn_tests::podman::Podman;

const TAG: &str = "localhost/sdn-image-test:latest";

/// Builds the image into `podman`'s storage with the debug binaries of this workspace.
fn build(podman: &Podman) {
    let (cmd, conf) = podman.command_line();
    let target = workspace_bin("sdn-agent")
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .to_path_buf();
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new(format!("{root}/../deploy/build-image.sh"))
        .arg(TAG)
        .env("PODMAN", cmd)
        .env("CONTAINERS_CONF", conf)
        .env("SDN_PROFILE", "debug")
        .env("SDN_SKIP_BUILD", "1")
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("run deploy/build-image.sh");
    assert!(
        out.status.success(),
        "deploy/build-image.sh failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the agent from the image on `node` (not started by the harness) and checks it serves;
/// returns the container's log.
fn run_agent_from_image(node: &AgentNode, podman: &mut Podman, backend: &str) -> String {
    let netns = node.ovs.netns().to_string();
    // The node's namespace already holds a rule of `backend`, as a host with kube-proxy would.
    let seed = format!("iptables-{backend}");
    node.ovs
        .exec_in_netns(&[
            &seed, "-t", "filter", "-A", "INPUT", "-p", "tcp", "--dport", "9", "-j", "ACCEPT",
        ])
        .unwrap_or_else(|e| panic!("seeding an {backend} rule: {e}"));
    let name = format!("sdn-agent-{backend}");
    let ovs_dir = node.ovs.dir().display().to_string();
    let node_dir = node.dir().display().to_string();
    let mut args: Vec<String> = [
        "run",
        "-d",
        "--name",
        &name,
        "--privileged",
        "--network",
        &format!("ns:/run/netns/{netns}"),
        "-v",
        &format!("{ovs_dir}:{ovs_dir}"),
        "-v",
        &format!("{node_dir}:{node_dir}"),
        "-v",
        "/run/netns:/run/netns:rslave",
        "--entrypoint",
        "/usr/local/bin/sdn-entrypoint",
        TAG,
        "/usr/local/bin/sdn-agent",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(node.agent_args());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    podman.run(&refs).unwrap_or_else(|e| panic!("{e}"));
    podman.track(&name);
    // The container's stdout and stderr (podman logs replays each on its own stream).
    let logs = |p: &Podman| {
        let out = p.cmd().args(["logs", &name]).output().expect("podman logs");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let ready = wait_until(Duration::from_secs(60), || {
        node.conf_file().exists()
            && node
                .ovs
                .exec_in_netns(&[
                    "curl",
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "http://127.0.0.1:9101/readyz",
                ])
                .is_ok_and(|c| c.trim() == "200")
    });
    assert!(
        ready,
        "the agent in the image did not get ready:\n{}",
        logs(podman)
    );

    // A pod through the host's sdn-cni, and sdnctl inside the container.
    let pod = node.pod("default", &format!("p-{backend}"));
    assert!(
        node.flows()
            .iter()
            .any(|f| f.contains(&format!("nw_dst={}", pod.ip))),
        "no flow for the pod {}",
        pod.ip
    );
    let api = node.api_socket().display().to_string();
    let status = podman
        .run(&["exec", &name, "sdnctl", "--api-socket", &api, "status"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        status.contains("READY") && status.contains("pods 1"),
        "{status}"
    );
    drop(pod);

    // The agent's chains are in the backend the namespace used, and only there.
    let save = |b: &str| {
        node.ovs
            .exec_in_netns(&[&format!("iptables-{b}-save")])
            .unwrap_or_default()
    };
    let other = if backend == "nft" { "legacy" } else { "nft" };
    assert!(
        save(backend).contains(":SDN-"),
        "no SDN chains in {backend}:\n{}",
        save(backend)
    );
    assert!(
        !save(other).contains(":SDN-"),
        "SDN chains in {other}:\n{}",
        save(other)
    );
    podman
        .run(&["stop", "-t", "10", &name])
        .unwrap_or_else(|e| panic!("{e}"));
    let log = logs(podman);
    podman.rm(&name);
    log
}

#[test]
fn the_image_builds_from_debian_packages_and_runs_the_agent_on_either_iptables_backend() {
    for bin in ["mmdebstrap", "podman", "curl"] {
        assert!(
            which(bin).is_some(),
            "this test needs {bin}: apt-get install mmdebstrap podman curl (or run .ci/run)"
        );
    }
    let legacy = AgentNode::new(NodeOptions::default());
    let mut podman = Podman::new(&legacy);
    build(&podman);
    let log = run_agent_from_image(&legacy, &mut podman, "legacy");
    assert!(
        log.contains("sdn-entrypoint: iptables backend legacy (rules seen: legacy 1, nft 0)"),
        "{log}"
    );
    assert!(
        log.contains("\"ready\"") || log.contains(" ready "),
        "{log}"
    );
    drop(podman);

    let nft = AgentNode::new(NodeOptions::default());
    let mut podman = Podman::new(&nft);
    build(&podman);
    let log = run_agent_from_image(&nft, &mut podman, "nft");
    assert!(
        log.contains("sdn-entrypoint: iptables backend nft (rules seen: legacy 0, nft 1)"),
        "{log}"
    );
}
