//! `sdnctl`, the tenant CLI, run as the real binary: against temporary state directories
//! (allocation, which files each command changes, every error with its message, the lock under 8
//! concurrent processes, `--json`, config files) and end to end against a real node (a private
//! OVS and the real agent): a namespace created by sdnctl gets its pods' flows with the allocated
//! VNID, the listing counts the pod, and delete refuses while the pod exists.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use cluster::{ClusterObject, NetNamespace, StandaloneSource};
use sdn_tests::harness::{unique_name, wait_until, workspace_bin};
use sdn_tests::node::{AgentNode, NodeOptions};
use serde_json::Value;

/// What one sdnctl run printed.
#[derive(Debug)]
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout))
    }
}

/// Runs sdnctl with `args`, `SDN_CONFIG` cleared unless `env` sets it.
fn sdnctl_env(args: &[&str], env: &[(&str, &str)]) -> Out {
    let out = Command::new(workspace_bin("sdnctl"))
        .args(args)
        .env_remove("SDN_CONFIG")
        .envs(env.iter().copied())
        .output()
        .expect("run sdnctl");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A temporary state directory with NetNamespace `default` (as the agent seeds it); removed on
/// drop.
struct StateDir(PathBuf);

impl StateDir {
    fn new() -> StateDir {
        let d = std::env::temp_dir().join(unique_name("sdnctl-test-"));
        fs::create_dir_all(&d).unwrap();
        let s = StateDir(d);
        s.put("default", 0);
        s
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn arg(&self) -> String {
        self.0.display().to_string()
    }

    /// Writes NetNamespace `name` with `netid` the way the agent and sdnctl do.
    fn put(&self, name: &str, netid: u32) {
        StandaloneSource::write_object(
            &self.0,
            &ClusterObject::NetNamespace(NetNamespace::new(name, netid)),
        )
        .unwrap();
    }

    /// Runs `sdnctl --state-dir <dir> args...`.
    fn run(&self, args: &[&str]) -> Out {
        let dir = self.arg();
        let mut a = vec!["--state-dir", dir.as_str()];
        a.extend_from_slice(args);
        sdnctl_env(&a, &[])
    }

    /// Runs sdnctl and asserts success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert_eq!(
            o.code, 0,
            "sdnctl {args:?} failed: {}{}",
            o.stderr, o.stdout
        );
        o.stdout
    }

    /// Runs sdnctl, asserts it fails with exit status `code` and that stderr contains `want`.
    fn fails(&self, args: &[&str], code: i32, want: &str) {
        let before = self.files();
        let o = self.run(args);
        assert_eq!(
            o.code, code,
            "sdnctl {args:?}: exit {} (want {code}): {}{}",
            o.code, o.stderr, o.stdout
        );
        assert!(
            o.stderr.contains(want),
            "sdnctl {args:?}: stderr lacks {want:?}:\n{}",
            o.stderr
        );
        assert_eq!(
            self.files(),
            before,
            "sdnctl {args:?} failed but changed files"
        );
    }

    /// Every file the agent reads (not dot files): name -> content.
    fn files(&self) -> BTreeMap<String, String> {
        fs::read_dir(&self.0)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .map(|n| {
                let text = fs::read_to_string(self.0.join(&n)).unwrap();
                (n, text)
            })
            .collect()
    }

    /// The NetNamespaces as the agent would read them: name -> netid; asserts no problems.
    fn vnids(&self) -> BTreeMap<String, u32> {
        let (state, problems) = StandaloneSource::load(&self.0).unwrap();
        assert!(problems.is_empty(), "state problems: {problems:?}");
        state
            .net_namespaces
            .iter()
            .map(|(n, nn)| (n.clone(), nn.net_id))
            .collect()
    }
}

impl Drop for StateDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn map(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
    pairs.iter().map(|(n, v)| (n.to_string(), *v)).collect()
}

/// The files that differ between two snapshots (changed, added or removed).
fn changed(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    let mut names: Vec<String> = before.keys().chain(after.keys()).cloned().collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|n| before.get(n) != after.get(n))
        .collect()
}

#[test]
fn create_allocates_fresh_vnids_and_never_one_in_use() {
    let s = StateDir::new();
    assert_eq!(
        s.ok(&["create", "a"]),
        "a: created with VNID 10 (a tenant of its own)\n"
    );
    assert_eq!(
        s.ok(&["create", "b"]),
        "b: created with VNID 11 (a tenant of its own)\n"
    );
    // A NetNamespace written by hand: its VNID is in use, the walk goes past it.
    s.put("x", 13);
    assert_eq!(
        s.ok(&["create", "g", "--global"]),
        "g: created with VNID 0 (global)\n"
    );
    s.ok(&["create", "c"]);
    assert_eq!(
        s.vnids(),
        map(&[
            ("default", 0),
            ("x", 13),
            ("a", 10),
            ("b", 11),
            ("g", 0),
            ("c", 14)
        ])
    );
    // A VNID just released is not handed out again at once: the walk resumes after 14.
    s.ok(&["delete", "c", "--force"]);
    s.ok(&["create", "d"]);
    assert_eq!(s.vnids()["d"], 15);
    // The new object is what the agent reads, with a uid.
    let text = &s.files()["netnamespace-d.yaml"];
    assert!(
        text.contains("netid: 15") && text.contains("uid: "),
        "{text}"
    );
    // At the top of the range the walk wraps to 10 and steps over every VNID in use
    // (10, 11, 13, 15), never reusing one.
    fs::write(s.path().join(".sdnctl.last-vnid"), "16777214\n").unwrap();
    s.ok(&["create", "e"]);
    assert_eq!(s.vnids()["e"], 12);
    // (After a wrap, `Tenancy::load` resumes the walk after the largest VNID in use.)
    s.ok(&["create", "f"]);
    assert_eq!(s.vnids()["f"], 16);
}

#[test]
fn create_with_a_vnid_gives_openshift_sdn_s_vnids_and_refuses_a_taken_one() {
    let s = StateDir::new();
    // openshift-sdn's allocator hands VNIDs out at random: a standalone node is given them.
    assert_eq!(
        s.ok(&["create", "tenant-a", "--vnid", "369601"]),
        "tenant-a: created with VNID 369601 (the VNID asked for)\n"
    );
    s.ok(&["create", "tenant-b", "--vnid", "12050132"]);
    assert_eq!(s.vnids()["tenant-b"], 12_050_132);
    let text = &s.files()["netnamespace-tenant-a.yaml"];
    assert!(
        text.contains("netid: 369601") && text.contains("uid: "),
        "{text}"
    );
    // Taken: refused, naming the holder, and nothing written.
    let before = s.files();
    s.fails(
        &["create", "tenant-c", "--vnid", "369601"],
        1,
        "cannot create \"tenant-c\" with VNID 369601: namespace tenant-a has it; to share it, create \"tenant-c\" and then run: sdnctl join tenant-c tenant-a",
    );
    s.fails(
        &["create", "tenant-c", "--vnid", "3"],
        1,
        "a tenant's VNID is 10 to 16777214",
    );
    s.fails(&["create", "tenant-c", "--vnid", "16777216"], 2, "16777216");
    s.fails(
        &["create", "tenant-c", "--vnid", "20", "--global"],
        2,
        "cannot be used with",
    );
    assert_eq!(s.files(), before, "a refused create writes nothing");
    // A fresh VNID comes from the walk, which resumes after the largest in use.
    assert_eq!(
        s.ok(&["create", "tenant-c"]),
        "tenant-c: created with VNID 12050133 (a tenant of its own)\n"
    );
}

#[test]
fn operations_change_exactly_the_one_file_they_should() {
    let s = StateDir::new();
    for (n, v) in [("a", 10), ("b", 11), ("c", 10)] {
        s.put(n, v);
    }
    // Hand-made metadata and egress IPs survive a change.
    fs::write(
        s.path().join("netnamespace-b.yaml"),
        "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nmetadata:\n  name: b\n  uid: u-b\n  labels:\n    team: blue\nnetname: b\nnetid: 11\negressIPs:\n- 192.168.1.5\n",
    )
    .unwrap();
    let step = |args: &[&str], printed: &str, file: &str, vnids: &[(&str, u32)]| {
        let before = s.files();
        assert_eq!(s.ok(args), format!("{printed}\n"), "{args:?}");
        let after = s.files();
        let want: Vec<String> = if file.is_empty() {
            Vec::new()
        } else {
            vec![file.to_string()]
        };
        assert_eq!(changed(&before, &after), want, "{args:?}");
        assert_eq!(s.vnids(), map(vnids), "{args:?}");
    };
    step(
        &["join", "b", "a"],
        "b: VNID 11 -> 10 (joined a)",
        "netnamespace-b.yaml",
        &[("default", 0), ("a", 10), ("b", 10), ("c", 10)],
    );
    let b = &s.files()["netnamespace-b.yaml"];
    for kept in ["uid: u-b", "team: blue", "192.168.1.5"] {
        assert!(b.contains(kept), "{kept} lost:\n{b}");
    }
    step(
        &["isolate", "c"],
        "c: VNID 10 -> 12 (isolated)",
        "netnamespace-c.yaml",
        &[("default", 0), ("a", 10), ("b", 10), ("c", 12)],
    );
    step(
        &["isolate", "c"],
        "c: VNID 12, unchanged (already isolated)",
        "",
        &[("default", 0), ("a", 10), ("b", 10), ("c", 12)],
    );
    step(
        &["make-global", "a"],
        "a: VNID 10 -> 0 (made global)",
        "netnamespace-a.yaml",
        &[("default", 0), ("a", 0), ("b", 10), ("c", 12)],
    );
    step(
        &["join", "c", "b"],
        "c: VNID 12 -> 10 (joined b)",
        "netnamespace-c.yaml",
        &[("default", 0), ("a", 0), ("b", 10), ("c", 10)],
    );
    step(
        &["isolate", "b"],
        "b: VNID 10 -> 13 (isolated)",
        "netnamespace-b.yaml",
        &[("default", 0), ("a", 0), ("b", 13), ("c", 10)],
    );
    step(
        &["delete", "c", "--force"],
        "c: deleted, was VNID 10 (forced: any local pods keep VNID 10 until deleted)",
        "netnamespace-c.yaml",
        &[("default", 0), ("a", 0), ("b", 13)],
    );
    step(
        &["create", "e"],
        "e: created with VNID 14 (a tenant of its own)",
        "netnamespace-e.yaml",
        &[("default", 0), ("a", 0), ("b", 13), ("e", 14)],
    );
    // Multicast: the annotation on b's own file, everything else kept; again is a no-op.
    let vnids = [("default", 0), ("a", 0), ("b", 13), ("e", 14)];
    step(
        &["multicast", "b", "on"],
        "namespace b: multicast on",
        "netnamespace-b.yaml",
        &vnids,
    );
    let b = &s.files()["netnamespace-b.yaml"];
    for kept in [
        "uid: u-b",
        "team: blue",
        "192.168.1.5",
        "netnamespace.network.openshift.io/multicast-enabled: \"true\"",
    ] {
        assert!(b.contains(kept), "{kept} missing:\n{b}");
    }
    step(
        &["multicast", "b", "on"],
        "namespace b: multicast on (unchanged)",
        "",
        &vnids,
    );
    step(
        &["multicast", "b", "off"],
        "namespace b: multicast off",
        "netnamespace-b.yaml",
        &vnids,
    );
    assert!(!s.files()["netnamespace-b.yaml"].contains("multicast"));
}

#[test]
fn errors_say_why() {
    let s = StateDir::new();
    s.put("a", 10);
    s.fails(
        &["isolate", "nope"],
        1,
        "unknown namespace \"nope\": it has no NetNamespace in",
    );
    s.fails(
        &["join", "a", "nope"],
        1,
        "create it with `sdnctl create nope`",
    );
    s.fails(&["join", "a", "a"], 1, "namespace \"a\" cannot join itself");
    s.fails(
        &["create", "a"],
        1,
        "namespace \"a\" already exists with VNID 10",
    );
    s.fails(
        &["isolate", "default"],
        1,
        "namespace \"default\" is global and cannot be isolated",
    );
    s.fails(
        &["delete", "default", "--force"],
        1,
        "namespace \"default\" cannot be deleted",
    );
    s.fails(
        &["delete", "a"],
        1,
        "refusing to delete namespace \"a\" without knowing whether local pods use it (no OVSDB target",
    );
    s.fails(
        &["--ovsdb", "unix:/nonexistent/db.sock", "delete", "a"],
        1,
        "cannot connect to unix:/nonexistent/db.sock",
    );
    s.fails(
        &["create", "Tenant_A"],
        1,
        "bad namespace name \"Tenant_A\": expected a DNS-1123 label",
    );
    s.fails(&["create"], 2, "usage: sdnctl create NAME [--global]");
    s.fails(
        &["multicast", "a"],
        2,
        "usage: sdnctl multicast NAME on|off",
    );
    s.fails(
        &["multicast", "a", "yes"],
        2,
        "bad value \"yes\" for state: expected on or off",
    );
    s.fails(
        &["multicast", "nope", "on"],
        1,
        "unknown namespace \"nope\": it has no NetNamespace in",
    );
    s.fails(&["frobnicate"], 2, "unknown command \"frobnicate\"");
    s.fails(
        &["stauts"],
        2,
        "unknown command \"stauts\"; did you mean \"status\"?",
    );
    s.fails(
        &["isolate", "a", "--global"],
        2,
        "--global does not apply to isolate",
    );

    // Where is the state?
    let o = sdnctl_env(&["namespaces"], &[]);
    assert_eq!(o.code, 2, "{o:?}");
    assert!(o.stderr.contains("pass --config FILE"), "{}", o.stderr);
    let missing = s.path().join("missing");
    let m = missing.display().to_string();
    let o = sdnctl_env(&["--state-dir", &m, "create", "b"], &[]);
    assert_eq!(o.code, 1, "{o:?}");
    assert!(
        o.stderr.contains(&format!(
            "state directory {m}: cannot read it (No such file"
        )),
        "{}",
        o.stderr
    );
    assert!(!missing.exists(), "no lock file in a missing directory");

    // Kubernetes mode: the controller owns NetNamespaces, so changes say how to make them
    // there, and the listing comes from the agent (here: none runs at the config's socket).
    let cfg = s.path().join(".agent-k8s.yaml");
    fs::write(
        &cfg,
        format!(
            "clusterState: kubernetes\ncniSocket: {}\n",
            s.path().join("run/cni.sock").display()
        ),
    )
    .unwrap();
    let o = sdnctl_env(
        &["--config", &cfg.display().to_string(), "join", "a", "b"],
        &[],
    );
    assert_eq!(o.code, 1, "{o:?}");
    assert!(
        o.stderr.contains("clusterState is kubernetes") && o.stderr.contains("controller"),
        "{}",
        o.stderr
    );
    let o = sdnctl_env(&["--config", &cfg.display().to_string(), "namespaces"], &[]);
    assert_eq!(o.code, 1, "{o:?}");
    let socket = s.path().join("run/api.sock");
    assert!(
        o.stderr
            .contains(&format!("cannot reach the agent at {}", socket.display()))
            && o.stderr.contains("is sdn-agent running on this node"),
        "{}",
        o.stderr
    );
}

#[test]
fn problems_in_state_files_are_reported_and_block_only_when_netnamespaces_are_unreadable() {
    let s = StateDir::new();
    s.put("a", 10);
    // A broken file of HostSubnets: reported, tenants still managed.
    fs::write(
        s.path().join("hostsubnet-n9.yaml"),
        "apiVersion: network.openshift.io/v1\nkind: HostSubnet\nhost: [\n",
    )
    .unwrap();
    let o = s.run(&["create", "b"]);
    assert_eq!(o.code, 0, "{o:?}");
    assert_eq!(o.stdout, "b: created with VNID 11 (a tenant of its own)\n");
    assert!(
        o.stderr.contains("warning: state: ") && o.stderr.contains("hostsubnet-n9.yaml"),
        "{}",
        o.stderr
    );
    let o = s.run(&["namespaces"]);
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stderr.contains("hostsubnet-n9.yaml"), "{}", o.stderr);
    fs::remove_file(s.path().join("hostsubnet-n9.yaml")).unwrap();

    // A broken file that may hold NetNamespaces: its VNIDs are unknown, so no change.
    let broken = s.path().join("tenants.yaml");
    fs::write(
        &broken,
        "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nnetid: twelve\n",
    )
    .unwrap();
    s.fails(
        &["create", "c"],
        1,
        "refusing to change NetNamespaces while a state file that may hold some is broken",
    );
    assert!(s.run(&["create", "c"]).stderr.contains("tenants.yaml"));
    // Listing still works and says what is wrong.
    let o = s.run(&["list"]);
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stderr.contains("tenants.yaml"), "{}", o.stderr);

    // A NetNamespace in a hand-written file: listed, but sdnctl does not edit other files.
    fs::write(
        &broken,
        "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nmetadata:\n  name: h\nnetname: h\nnetid: 20\n",
    )
    .unwrap();
    assert!(s.ok(&["list"]).contains("\nh        20"));
    s.fails(
        &["join", "h", "a"],
        1,
        &format!("NetNamespace \"h\" is defined in {}", broken.display()),
    );
    s.fails(
        &["delete", "h", "--force"],
        1,
        "sdnctl edits only its own files",
    );
    // Its VNID is in use all the same.
    s.ok(&["create", "d"]);
    assert_eq!(s.vnids()["d"], 21, "after h's 20");
}

#[test]
fn concurrent_creates_get_distinct_vnids() {
    let s = StateDir::new();
    let dir = s.arg();
    let children: Vec<_> = (0..8)
        .map(|i| {
            Command::new(workspace_bin("sdnctl"))
                .args(["--state-dir", &dir, "create", &format!("t{i}")])
                .env_remove("SDN_CONFIG")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn sdnctl")
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let vnids = s.vnids();
    let mut tenant: Vec<u32> = vnids
        .iter()
        .filter(|(n, _)| n.starts_with('t'))
        .map(|(_, v)| *v)
        .collect();
    tenant.sort_unstable();
    assert_eq!(tenant, (10..18).collect::<Vec<u32>>(), "{vnids:?}");
}

#[test]
fn json_output() {
    let s = StateDir::new();
    s.put("a", 10);
    s.put("b", 10);
    let o = s.run(&["--json", "namespaces"]);
    assert_eq!(o.code, 0, "{o:?}");
    let j = o.json();
    assert_eq!(j["podsKnown"], false);
    assert_eq!(j["stateDir"], s.arg());
    let rows = j["namespaces"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["name"], "a");
    assert_eq!(rows[0]["vnid"], 10);
    assert_eq!(rows[0]["sharesWith"], serde_json::json!(["b"]));
    assert_eq!(rows[0]["pods"], Value::Null);
    assert_eq!(rows[2]["name"], "default");
    assert_eq!(rows[2]["global"], true);
    assert!(j["warnings"][0]
        .as_str()
        .unwrap()
        .contains("local pod counts unknown"));

    let o = s.run(&["create", "c", "--json"]);
    assert_eq!(o.code, 0, "{o:?}");
    let j = o.json();
    assert_eq!(
        j["change"],
        serde_json::json!({"namespace": "c", "from": null, "to": 11, "reason": "a tenant of its own", "changed": true})
    );
    assert_eq!(
        j["file"],
        s.path().join("netnamespace-c.yaml").display().to_string()
    );
    let o = s.run(&["join", "c", "a", "--json"]);
    assert_eq!(o.json()["change"]["to"], 10);
}

#[test]
fn config_file_from_flag_or_environment() {
    let s = StateDir::new();
    let cfg = s.path().join(".agent.yaml");
    fs::write(
        &cfg,
        format!(
            "nodeName: n1\nmode: subnet\novsdb: unix:{}/no.sock\nclusterState: standalone:{}\n",
            s.arg(),
            s.arg()
        ),
    )
    .unwrap();
    let c = cfg.display().to_string();
    let o = sdnctl_env(&["create", "a"], &[("SDN_CONFIG", &c)]);
    assert_eq!(o.code, 0, "{o:?}");
    assert!(
        o.stderr.contains("note: the agent runs in subnet mode")
            && o.stderr.contains("VNIDs have no effect"),
        "{}",
        o.stderr
    );
    // The config's OVSDB is used (and its failure explained); the command still succeeds.
    assert!(o.stderr.contains("/no.sock"), "{}", o.stderr);
    let o = sdnctl_env(&["--config", &c, "list"], &[]);
    assert_eq!(o.code, 0, "{o:?}");
    assert!(
        o.stdout.contains("\na        10    -            ?     -\n"),
        "{}",
        o.stdout
    );
    assert_eq!(
        o.stderr
            .lines()
            .filter(|l| l.contains("pod counts unknown"))
            .count(),
        1,
        "{}",
        o.stderr
    );
}

#[test]
fn sdnctl_drives_a_real_node() {
    let node = AgentNode::start(NodeOptions::default());
    let cfg = node.dir().join("sdnctl-agent.yaml");
    // The agent's own settings as a config file (what deploy/node-up.sh writes).
    fs::write(
        &cfg,
        format!(
            "nodeName: node-a\nmode: multitenant\ndatapathType: netdev\novsdb: unix:{}\nclusterState: standalone:{}\n",
            node.ovs.db_sock().display(),
            node.state_dir().display()
        ),
    )
    .unwrap();
    let c = cfg.display().to_string();
    let ctl = |args: &[&str]| {
        let mut a = vec!["--config", c.as_str()];
        a.extend_from_slice(args);
        sdnctl_env(&a, &[])
    };

    let o = ctl(&["create", "tenant-x"]);
    assert_eq!(o.code, 0, "{o:?}");
    assert_eq!(
        o.stdout,
        "tenant-x: created with VNID 10 (a tenant of its own)\n"
    );
    assert_eq!(o.stderr, "", "no warnings with a reachable OVSDB");

    let pod = node.pod("tenant-x", "p1");
    assert!(
        wait_until(Duration::from_secs(5), || node.flowed_vnid(&pod.ip)
            == Some(10)),
        "the flows do not give {} VNID 10 (tables 70 and 75):\n{}",
        pod.ip,
        node.flows().join("\n")
    );

    let o = ctl(&["namespaces"]);
    assert_eq!(o.code, 0, "{o:?}");
    assert_eq!(
        o.stdout,
        "NAME      VNID  SHARES-WITH  PODS  MULTICAST\ndefault   0     global       0     -\ntenant-x  10    -            1     -\n"
    );
    let j = ctl(&["namespaces", "--json"]).json();
    assert_eq!(j["podsKnown"], true);
    assert_eq!(j["namespaces"][1]["pods"], 1);

    let o = ctl(&["delete", "tenant-x"]);
    assert_eq!(o.code, 1, "{o:?}");
    assert!(
        o.stderr.contains("refusing to delete namespace \"tenant-x\": 1 local pod(s) still use it (they would keep VNID 10)"),
        "{}",
        o.stderr
    );
    assert!(node.state_dir().join("netnamespace-tenant-x.yaml").exists());

    // A second tenant never gets the pod's VNID; once the pod is gone, delete works.
    assert_eq!(
        ctl(&["create", "tenant-y"]).stdout,
        "tenant-y: created with VNID 11 (a tenant of its own)\n"
    );
    pod.delete();
    let o = ctl(&["delete", "tenant-x"]);
    assert_eq!(o.code, 0, "{o:?}");
    assert_eq!(o.stdout, "tenant-x: deleted, was VNID 10 (no local pods)\n");
}
