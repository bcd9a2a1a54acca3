//! The pure crates stay pure: `flows`, `multitenant` and `cni-proto` (and `ovs` without its
//! `client` feature) build without tokio, socket, netlink or Kubernetes crates. Checked on the
//! real dependency graph with `cargo tree` (offline, from Cargo.lock), so a dependency added
//! later that pulls an async runtime into a pure crate fails here, naming the path.

use std::process::Command;

/// Crates a pure crate must not link.
const IMPURE: [&str; 9] = [
    "tokio",
    "mio",
    "socket2",
    "hyper",
    "rtnetlink",
    "netlink-sys",
    "kube",
    "libc",
    "futures",
];

fn normal_deps(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "--offline", "-e", "normal", "--prefix", "depth"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn assert_pure(args: &[&str]) {
    let tree = normal_deps(args);
    assert!(tree.lines().count() > 1, "{args:?}: empty tree?\n{tree}");
    for line in tree.lines() {
        let name = line
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .split_whitespace()
            .next()
            .unwrap_or("");
        assert!(
            !IMPURE.contains(&name),
            "{args:?} links {name}, which a pure crate must not:\n{tree}"
        );
    }
}

#[test]
fn flows_multitenant_and_cni_proto_link_no_runtime_socket_or_kubernetes_crate() {
    assert_pure(&["-p", "flows"]);
    assert_pure(&["-p", "multitenant"]);
    assert_pure(&["-p", "cni-proto"]);
    assert_pure(&["-p", "ovs", "--no-default-features"]);
}

#[test]
fn the_check_sees_an_impure_crate() {
    // Control: the same check on the OVS clients finds tokio.
    let tree = normal_deps(&["-p", "ovs"]);
    assert!(tree.lines().any(|l| l.contains("tokio v")), "{tree}");
}
