//! The CNI project's own library as the client: `tests/libcni/main.go` drives the agent's
//! network list through libcni (what cnitool, podman's CNI backend and containerd's go-cni are
//! built on: config loading, plugin lookup in `CNI_PATH`, `CNI_ARGS`, result parsing and
//! conversion, CHECK with the cached result, DEL) on a dual-stack node.
//!
//! The driver is built here with Debian's Go and libcni sources (`golang-go`,
//! `golang-github-appc-cni-dev`, GOPATH mode: nothing is fetched); the test fails, naming the
//! packages, when they are missing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sdn_tests::harness::{wait_until, which, workspace_bin, Netns};
use sdn_tests::node::{AgentNode, NodeOptions};

/// Where Debian's golang-github-appc-cni-dev puts libcni.
const GOPATH: &str = "/usr/share/gocode";

/// Builds the libcni driver into `dir`; panics with what to install when it cannot.
fn build_driver(dir: &Path) -> PathBuf {
    let libcni = Path::new(GOPATH).join("src/github.com/containernetworking/cni/libcni");
    assert!(
        which("go").is_some() && libcni.is_dir(),
        "this test needs Go and libcni's sources: apt-get install golang-go \
         golang-github-appc-cni-dev (or run .ci/run)"
    );
    let out = dir.join("libcni-run");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("libcni/main.go");
    let built = Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .env("GO111MODULE", "off")
        .env("GOPATH", GOPATH)
        .env("GOCACHE", dir.join("go-cache"))
        .env("HOME", dir)
        .output()
        .expect("running go build");
    assert!(
        built.status.success(),
        "go build {}: {}",
        src.display(),
        String::from_utf8_lossy(&built.stderr)
    );
    out
}

/// A dual-stack pod added, checked and deleted through libcni: one result with an address of
/// each family and a gateway per family, both in the pod's namespace and usable, CHECK clean,
/// DEL leaving nothing.
#[test]
fn libcni_adds_checks_and_deletes_a_dual_stack_pod() {
    let node = AgentNode::start(NodeOptions::default().dual_stack());
    node.set_netnamespace("tenant-a", 11);
    let driver = build_driver(node.dir());
    let ns = Netns::new("lcni");
    let plugins = workspace_bin("sdn-cni").parent().unwrap().to_path_buf();
    let run = |cmd: &str| {
        let out = Command::new(&driver)
            .args([cmd, &node.conf_file().display().to_string(), &ns.path()])
            .env("CNI_PATH", &plugins)
            .env("CNI_CONTAINERID", "libcni-pod-1")
            .env(
                "CNI_ARGS",
                "IgnoreUnknown=1;K8S_POD_NAMESPACE=tenant-a;K8S_POD_NAME=lc1",
            )
            .output()
            .expect("running the libcni driver");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "libcni {cmd}: {}{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };

    let result: serde_json::Value = serde_json::from_str(run("add").trim()).unwrap();
    let ips = result["ips"].as_array().expect("ips in the result");
    assert_eq!(ips.len(), 2, "{result}");
    let field = |i: usize, k: &str| ips[i][k].as_str().unwrap_or_default().to_string();
    let (v4, v6) = (field(0, "address"), field(1, "address"));
    assert!(v4.starts_with("10.128.") && v4.ends_with("/23"), "{result}");
    assert!(v6.starts_with("fd01:") && v6.ends_with("/64"), "{result}");
    let (gw4, gw6) = (field(0, "gateway"), field(1, "gateway"));
    assert!(
        gw4.starts_with("10.128.") && gw6.starts_with("fd01:"),
        "{result}"
    );

    // Both addresses are the pod's, and both gateways answer.
    let shown = ns.exec(&["ip", "addr", "show", "dev", "eth0"]).unwrap();
    for a in [&v4, &v6] {
        assert!(shown.contains(a.as_str()), "{a} not on eth0: {shown}");
    }
    for gw in [&gw4, &gw6] {
        ns.exec(&["ping", "-c", "1", "-W", "3", gw])
            .unwrap_or_else(|e| panic!("pod -> gateway {gw}: {e}"));
    }
    assert_eq!(node.pod_ports().len(), 1);
    assert_eq!(node.pod_flows().len(), 14);

    // CHECK with the result libcni cached, then DEL: nothing left, both leases released.
    run("check");
    run("del");
    assert!(
        wait_until(Duration::from_secs(5), || node.pod_ports().is_empty()),
        "ports left: {:?}",
        node.pod_ports()
    );
    node.assert_no_pod_leftovers();
    let v6_addr = v6.split('/').next().unwrap_or_default().to_string();
    assert!(
        !node.leases6().contains(&v6_addr),
        "IPv6 lease {v6_addr} kept after DEL"
    );
}
