//! Reference CNI plugins chained after `sdn-cni`, run as libcni runs a conflist (each plugin in
//! turn with the previous result as `prevResult` on ADD; CHECK in order and DEL in reverse with
//! the final result), against the agent's pooled path: `bandwidth`, `portmap`, `tuning`,
//! `firewall` and `sbr` (Debian's containernetworking-plugins), at every CNI version from 0.3.1
//! to 1.1.0 that each plugin says it supports (its own VERSION answer: firewall starts at
//! 0.4.0, none of these builds speaks 1.1.0, so at 1.1.0 sdn-cni runs alone; CHECK exists from
//! 0.4.0).
//!
//! A conflist that chains `bandwidth` (which needs the pod's interface to be a veth) gives the
//! pod a plain veth: ADD, CHECK and DEL succeed and the host side gets the plugin's qdisc. A
//! conflist of plugins that work on the pooled interface keeps the pool (the pod's interface is
//! the pool's macvlan). Nothing is left behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sdn_tests::harness::{workspace_bin, Netns};
use sdn_tests::node::{AgentNode, NodeOptions};
use serde_json::{json, Value};

const PLUGINS: &str = "/usr/lib/cni";
const VERSIONS: [&str; 4] = ["0.3.1", "0.4.0", "1.0.0", "1.1.0"];

fn plugin_bin(kind: &str) -> PathBuf {
    if kind == "sdn-cni" {
        workspace_bin("sdn-cni")
    } else {
        Path::new(PLUGINS).join(kind)
    }
}

/// The versions plugin `kind` supports (its VERSION answer).
fn supported(kind: &str) -> Vec<String> {
    let out = Command::new(plugin_bin(kind))
        .env_clear()
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("{kind} VERSION: {e} (is containernetworking-plugins installed?)")
        });
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{kind} VERSION is not JSON ({e})"));
    v["supportedVersions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(String::from))
        .collect()
}

/// Runs one plugin of the chain in the node's namespace (where the agent and the pods' host
/// ends are) as libcni would.
fn run(
    node: &AgentNode,
    command: &str,
    plugin: &Value,
    netns: &str,
    container: &str,
) -> Result<Value, String> {
    let kind = plugin["type"].as_str().unwrap_or_default();
    let mut child = Command::new("ip")
        .args(["netns", "exec", node.ovs.ns().name()])
        .arg(plugin_bin(kind))
        .env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", container)
        .env("CNI_NETNS", netns)
        .env("CNI_IFNAME", "eth0")
        .env(
            "CNI_ARGS",
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=chained",
        )
        .env("CNI_PATH", PLUGINS)
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{kind}: {e}"));
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(plugin.to_string().as_bytes())
            .expect("write config");
    }
    let out = child.wait_with_output().expect("plugin exits");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "{kind} {command}: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    if stdout.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(&stdout).map_err(|e| format!("{kind} {command}: not JSON ({e}): {stdout}"))
}

/// A plugin's config as libcni hands it over: the network's name and version, its own keys,
/// the capability arguments it declares, and the previous result.
fn config(net: &Value, plugin: &Value, prev: Option<&Value>) -> Value {
    let mut c = plugin.clone();
    c["name"] = net["name"].clone();
    c["cniVersion"] = net["cniVersion"].clone();
    if plugin["capabilities"]["portMappings"] == true {
        c["runtimeConfig"] = json!({"portMappings": [
            {"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]});
    }
    if let Some(p) = prev {
        c["prevResult"] = p.clone();
    }
    c
}

/// ADD, CHECK (0.4.0 and later) and DEL of the whole conflist `net`; returns the ADD's result.
fn run_chain(node: &AgentNode, net: &Value, pod: &Netns, container: &str, check: impl Fn(&Value)) {
    let plugins = net["plugins"].as_array().unwrap();
    let version = net["cniVersion"].as_str().unwrap();
    let mut result: Option<Value> = None;
    for p in plugins {
        let r = run(
            node,
            "ADD",
            &config(net, p, result.as_ref()),
            &pod.path(),
            container,
        )
        .unwrap_or_else(|e| panic!("ADD at {version}: {e}"));
        result = Some(r);
    }
    let result = result.expect("a result");
    check(&result);
    if version != "0.3.1" {
        for p in plugins {
            match run(
                node,
                "CHECK",
                &config(net, p, Some(&result)),
                &pod.path(),
                container,
            ) {
                Ok(_) => {}
                // portmap 1.1.1 (Debian 12) checks its IPv6 chain even for an IPv4-only pod
                // and fails on every IPv4 network (fixed upstream later): its own bug, not the
                // chain's. Anything else fails the test.
                Err(e) if p["type"] == "portmap" && e.contains("could not check ipv6 dnat") => {
                    eprintln!("CHECK at {version}: portmap's known IPv6 check failure: {e}");
                }
                Err(e) => panic!("CHECK at {version}: {e}"),
            }
        }
    }
    for p in plugins.iter().rev() {
        run(
            node,
            "DEL",
            &config(net, p, Some(&result)),
            &pod.path(),
            container,
        )
        .unwrap_or_else(|e| panic!("DEL at {version}: {e}"));
    }
}

fn link_kind(pod: &Netns) -> String {
    let out = pod
        .exec(&["ip", "-d", "link", "show", "eth0"])
        .unwrap_or_default();
    if out.contains("veth") {
        "veth".into()
    } else if out.contains("macvlan") {
        "macvlan".into()
    } else {
        out
    }
}

#[test]
fn reference_plugins_chain_after_sdn_cni_on_pooled_and_plain_ports() {
    let node = AgentNode::start(NodeOptions::default());
    let conf_dir = node.conf_file().parent().unwrap().to_path_buf();
    let ours = json!({"type": "sdn-cni", "socket": node.socket()});
    let bandwidth = json!({"type": "bandwidth", "ingressRate": 8_000_000, "ingressBurst": 800_000,
        "egressRate": 8_000_000, "egressBurst": 800_000});
    let others = [
        json!({"type": "portmap", "capabilities": {"portMappings": true}}),
        json!({"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.log_martians": "1"}}),
        json!({"type": "firewall"}),
        json!({"type": "sbr"}),
    ];
    let pod = Netns::new("sdnchain");
    let mut ran = Vec::new();
    for (i, version) in VERSIONS.iter().enumerate() {
        for with_bandwidth in [true, false] {
            let mut plugins = vec![ours.clone()];
            let mut left_out = Vec::new();
            for p in std::iter::once(&bandwidth)
                .filter(|_| with_bandwidth)
                .chain(others.iter())
            {
                let kind = p["type"].as_str().unwrap();
                if supported(kind).iter().any(|v| v == version) {
                    plugins.push(p.clone());
                } else {
                    left_out.push(kind);
                }
            }
            let name = format!("chain-{i}-{}", if with_bandwidth { "bw" } else { "plain" });
            let net = json!({"cniVersion": version, "name": name, "plugins": plugins});
            std::fs::write(
                conf_dir.join(format!("50-{name}.conflist")),
                net.to_string(),
            )
            .unwrap();
            let kinds: Vec<&str> = plugins
                .iter()
                .map(|p| p["type"].as_str().unwrap())
                .collect();
            let bw_chained = kinds.contains(&"bandwidth");
            run_chain(&node, &net, &pod, &format!("{name}-c"), |result| {
                let host = result["interfaces"]
                    .as_array()
                    .and_then(|a| a.iter().find(|i| i.get("sandbox").is_none()))
                    .and_then(|i| i["name"].as_str())
                    .unwrap_or_else(|| panic!("no host interface: {result:#}"))
                    .to_string();
                let kind = link_kind(&pod);
                if bw_chained {
                    assert_eq!(
                        kind, "veth",
                        "{version}: bandwidth needs a veth: {result:#}"
                    );
                    let qdisc = node
                        .ovs
                        .exec_in_netns(&["tc", "qdisc", "show", "dev", &host])
                        .unwrap_or_default();
                    assert!(
                        qdisc.contains("tbf"),
                        "{version}: the bandwidth plugin's qdisc on {host}: {qdisc}"
                    );
                } else {
                    assert_eq!(kind, "macvlan", "{version}: {kinds:?} keep the pool port");
                }
            });
            ran.push(format!(
                "{version}: {} (left out, unsupported by the plugin: {left_out:?})",
                kinds.join(" -> ")
            ));
        }
    }
    for r in &ran {
        eprintln!("{r}");
    }
    node.assert_no_pod_leftovers();
}

/// A chain configured outside the agent's `cniConfDir` (cnitool's `NETCONFPATH`, a runtime with
/// a directory of its own): the agent cannot see what follows `sdn-cni`, so every pod of such a
/// network gets a plain veth, and a chained `bandwidth` works. The agent's own network (whose
/// conflist it wrote) keeps the pool.
#[test]
fn a_chain_configured_outside_the_cni_conf_dir_gets_a_plain_veth() {
    let node = AgentNode::start(NodeOptions::default());
    let ours = json!({"type": "sdn-cni", "socket": node.socket()});
    let bandwidth = json!({"type": "bandwidth", "ingressRate": 8_000_000, "ingressBurst": 800_000,
        "egressRate": 8_000_000, "egressBurst": 800_000});
    let pod = Netns::new("sdnelse");
    for (name, plugins) in [
        ("elsewhere-bw", vec![ours.clone(), bandwidth.clone()]),
        ("elsewhere-alone", vec![ours.clone()]),
    ] {
        // Nothing of this network is in the agent's conf dir: only the runtime knows the chain.
        let net = json!({"cniVersion": "1.0.0", "name": name, "plugins": plugins});
        run_chain(&node, &net, &pod, &format!("{name}-c"), |result| {
            assert_eq!(
                link_kind(&pod),
                "veth",
                "{name}: a chain the agent cannot see gets a plain veth: {result:#}"
            );
        });
    }
    // The agent's own network: its conflist is in the conf dir and chains nothing.
    let net = json!({"cniVersion": "1.0.0", "name": "sdn", "plugins": [ours]});
    run_chain(&node, &net, &pod, "own-c", |result| {
        assert_eq!(
            link_kind(&pod),
            "macvlan",
            "the agent's own network keeps the pool: {result:#}"
        );
    });
    node.assert_no_pod_leftovers();
}
