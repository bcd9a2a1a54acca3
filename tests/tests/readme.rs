//! README.md matches what the node prints: the commands of its sample session that can run on a
//! test node are run, and what README shows is compared with what they print (the metrics
//! example's grep pattern and the series it shows, the `/readyz` checks, the bundle's files),
//! the pipeline version README shows is the one the flows builder gives for README's node, and
//! README's list of settings without an environment variable is what `sdn-agent run --help`
//! says.

use std::collections::BTreeSet;
use std::process::Command;

use sdn_tests::harness::workspace_bin;
use sdn_tests::node::{AgentNode, NodeOptions};

fn readme() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The lines README shows after the sample command that starts with `prefix`, up to the
/// blank line or the next command.
fn shown_after(text: &str, prefix: &str) -> (String, Vec<String>) {
    let mut lines = text.lines();
    let command = lines
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("README has no sample command starting with {prefix:?}"));
    let out = lines
        .take_while(|l| !l.trim().is_empty() && !l.starts_with("$ ") && !l.starts_with("```"))
        .map(str::to_string)
        .collect();
    (command.to_string(), out)
}

/// The series' names of metric lines (`name{...} v` or `name v`).
fn series_names<'a>(lines: impl Iterator<Item = &'a str>) -> BTreeSet<String> {
    lines
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn the_readme_sample_session_matches_the_node() {
    let text = readme();
    let node = AgentNode::start(NodeOptions::default());
    node.set_netnamespace("tenant-a", 10);
    let _web = node.pod("tenant-a", "web");
    let _db = node.pod("tenant-a", "db");

    // The metrics example: README's own pipeline, run on the node.
    let (command, shown) = shown_after(&text, "$ curl -s http://127.0.0.1:9101/metrics | grep -E");
    let pipeline = command.trim_start_matches("$ ");
    let out = node
        .ovs
        .exec_in_netns(&["sh", "-c", pipeline])
        .unwrap_or_else(|e| panic!("{pipeline}: {e}"));
    assert_eq!(
        series_names(out.lines()),
        series_names(shown.iter().map(String::as_str)),
        "README's metrics example shows other series than its command prints:\n{out}"
    );

    // /readyz: every check README shows, as the node says it.
    let (_, shown) = shown_after(&text, "$ curl -s 'http://127.0.0.1:9101/readyz?verbose'");
    let out = node
        .ovs
        .exec_in_netns(&["curl", "-s", "http://127.0.0.1:9101/readyz?verbose"])
        .unwrap();
    for line in &shown {
        let head = line.split(": ").next().unwrap_or(line);
        assert!(
            out.lines().any(|l| l.starts_with(head)),
            "README shows {line:?}; the node prints:\n{out}"
        );
    }

    // The bundle's files.
    let (_, shown) = shown_after(&text, "$ sdnctl bundle");
    let files = |s: &str| {
        s.split_once(" files: ")
            .map(|(_, f)| f.trim_end().trim_end_matches(')').to_string())
            .unwrap_or_default()
    };
    let dir = std::env::temp_dir().join(sdn_tests::harness::unique_name("readme-bundle-"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("b.tar.gz");
    let out = node.sdnctl_api(&["bundle", "-o", file.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{said}");
    assert_eq!(
        files(&said),
        files(&shown[0]),
        "README's bundle line: {}",
        shown[0]
    );

    // The pipeline version README shows, for README's node (node IP 192.0.2.2, the defaults).
    let cfg = flows::NodeConfig {
        datapath: flows::Datapath::Netdev,
        mode: flows::Mode::Multitenant,
        node_ip: "192.0.2.2".parse().unwrap(),
        ipv4: Some(flows::NodeIpv4 {
            local_subnet: "10.128.0.0/23".parse().unwrap(),
            cluster_networks: vec!["10.128.0.0/14".parse().unwrap()],
            service_cidr: "172.30.0.0/16".parse().unwrap(),
        }),
        vxlan_port: 4789,
        tun0_mac: None,
        ipv6: None,
    };
    let version = flows::base::version(flows::Mode::Multitenant, &flows::base_flows(&cfg));
    assert!(
        text.contains("node IP 192.0.2.2, netdev datapath"),
        "README's sample node changed: update this test"
    );
    for line in text.lines().filter(|l| l.contains("pipeline multitenant.")) {
        assert!(
            line.contains(&format!("pipeline {version}")),
            "README shows another pipeline version than the flows give ({version}): {line}"
        );
    }

    // Settings without an environment variable, as README lists them.
    let help = Command::new(workspace_bin("sdn-agent"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout).to_string();
    let line_of = |flag: &str| {
        help.lines()
            .find(|l| l.trim_start().starts_with(flag))
            .unwrap_or_else(|| panic!("no {flag} in sdn-agent run --help"))
            .to_string()
    };
    for flag in [
        "--cluster-network",
        "--global-namespace",
        "--egress-dns-server",
        "--kubeconfig",
    ] {
        assert!(text.contains(&format!("`{flag}`")), "README names {flag}");
        assert!(!line_of(flag).contains("[env:"), "{}", line_of(flag));
    }
    assert!(
        line_of("--mtu").contains("[env: SDN_MTU"),
        "{}",
        line_of("--mtu")
    );
}
