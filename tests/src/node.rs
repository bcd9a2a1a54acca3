//! A whole node for end-to-end tests: a private OVS ([`Ovs`]), the real `sdn-agent` binary
//! running inside the OVS network namespace (where a node's agent runs: the host ends of pod
//! veths and tun0 live there, and its iptables and sysctls are that namespace's), and pods made
//! as network namespaces through the real `sdn-cni` binary, exactly as a runtime calls it.
//!
//! The agent is a child process stopped by its pid on drop (SIGKILL: the agent is built to
//! survive that), its log is kept in the node directory and printed when a test fails. Pods
//! ([`CniPod`]) run DEL and delete their namespace on drop.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use serde_json::{json, Value};

use std::sync::Mutex;

pub use crate::harness::workspace_bin;
use crate::harness::{run, wait_until, without_agent_env, Netns, Ovs};

/// Settings of a test node.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// `subnet` or `multitenant`.
    pub mode: &'static str,
    /// `--cluster-network` value.
    pub cluster_network: String,
    /// Extra agent flags.
    pub extra: Vec<String>,
    /// `--node-name` (`node-a`).
    pub node_name: String,
    /// `--node-ip` (`192.168.111.10`).
    pub node_ip: String,
    /// A standalone state directory shared with other nodes (default: `<node dir>/state`).
    pub state_dir: Option<PathBuf>,
    /// Start the agent with `ip netns exec` (a private mount namespace of its own, where a
    /// pinned namespace would not outlive it) instead of `nsenter`.
    pub private_mounts: bool,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            mode: "multitenant",
            cluster_network: "10.128.0.0/14,9".into(),
            extra: Vec::new(),
            node_name: "node-a".into(),
            node_ip: "192.168.111.10".into(),
            state_dir: None,
            private_mounts: false,
        }
    }
}

/// The agent flags of a node of a dual-stack cluster: `fd01::/48` (a /64 per node) beside the
/// IPv4 cluster network, services `172.30.0.0/16` and `fd02::/112`.
pub const DUAL_STACK_FLAGS: [&str; 4] = [
    "--cluster-network",
    "fd01::/48,64",
    "--service-cidr",
    "172.30.0.0/16,fd02::/112",
];

impl NodeOptions {
    /// These options on a node of a dual-stack cluster ([`DUAL_STACK_FLAGS`] added).
    pub fn dual_stack(mut self) -> NodeOptions {
        self.extra
            .extend(DUAL_STACK_FLAGS.iter().map(|s| s.to_string()));
        self
    }
}

/// What a CNI plugin run printed and returned.
#[derive(Debug, Clone)]
pub struct CniOutcome {
    /// Exit code.
    pub code: i32,
    /// stdout (the result or the error object).
    pub stdout: String,
    /// stdout parsed as JSON (Null if empty or not JSON).
    pub json: Value,
}

impl CniOutcome {
    /// The first address of an ADD result, without its prefix length.
    pub fn ip(&self) -> Option<String> {
        self.json["ips"][0]["address"]
            .as_str()
            .and_then(|a| a.split('/').next())
            .map(str::to_string)
    }

    /// The IPv6 address of an ADD result (a dual-stack pod's), without its prefix length.
    pub fn ip6(&self) -> Option<String> {
        self.json["ips"]
            .as_array()?
            .iter()
            .filter_map(|i| i["address"].as_str())
            .find(|a| a.contains(':'))
            .and_then(|a| a.split('/').next())
            .map(str::to_string)
    }

    /// The CNI error code, if the plugin failed.
    pub fn error_code(&self) -> Option<u64> {
        (self.code != 0).then(|| self.json["code"].as_u64().unwrap_or(0))
    }
}

/// A node: OVS + agent.
#[derive(Debug)]
pub struct AgentNode {
    /// The node's OVS (and network namespace).
    pub ovs: Ovs,
    dir: PathBuf,
    opts: NodeOptions,
    agent: Mutex<Option<Child>>,
    /// Extra environment of the agents started from now on ([`AgentNode::set_agent_env`]).
    agent_env: Mutex<BTreeMap<String, String>>,
    /// Flags added to the agents started from now on ([`AgentNode::add_agent_args`]).
    more_args: Mutex<Vec<String>>,
}

impl AgentNode {
    /// Starts OVS and the agent, and waits until the agent is ready (its CNI config exists).
    pub fn start(opts: NodeOptions) -> AgentNode {
        let n = AgentNode::new(opts);
        n.start_agent();
        n
    }

    /// Starts OVS only; the agent starts with [`AgentNode::start_agent`] (for set-ups that need
    /// the node's namespace before the agent, such as an underlay or an API server).
    pub fn new(opts: NodeOptions) -> AgentNode {
        let ovs = Ovs::start();
        let dir = ovs.dir().join("node");
        fs::create_dir_all(&dir).expect("node dir");
        AgentNode {
            ovs,
            dir,
            opts,
            agent: Mutex::new(None),
            agent_env: Mutex::default(),
            more_args: Mutex::default(),
        }
    }

    /// The node's working directory (state, leases, CNI conf, socket, logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CNI socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("run/cni.sock")
    }

    /// The lease directory of the node's network (`<ipam dir>/sdn`).
    pub fn lease_dir(&self) -> PathBuf {
        self.dir.join("ipam/sdn")
    }

    /// The CNI conf file the agent writes when ready (and keeps when it stops).
    pub fn conf_file(&self) -> PathBuf {
        self.dir.join("net.d/10-sdn.conflist")
    }

    /// The cluster state directory.
    pub fn state_dir(&self) -> PathBuf {
        self.opts
            .state_dir
            .clone()
            .unwrap_or_else(|| self.dir.join("state"))
    }

    /// Writes (creates or changes) the NetNamespace of `namespace` with VNID `netid` in the
    /// standalone state directory, as `sdnctl` does; the agent applies it within a poll.
    pub fn set_netnamespace(&self, namespace: &str, netid: u32) {
        use cluster::{ClusterObject, NetNamespace, StandaloneSource};
        StandaloneSource::write_object(
            &self.state_dir(),
            &ClusterObject::NetNamespace(NetNamespace::new(namespace, netid)),
        )
        .unwrap_or_else(|e| panic!("writing NetNamespace {namespace}: {e}"));
    }

    /// Writes namespace `namespace`'s NetNamespace (VNID `netid`) with the audit logging
    /// annotation `k8s.ovn.org/acl-logging: value` (standalone mode keeps it there).
    pub fn set_audit_logging(&self, namespace: &str, netid: u32, value: &str) {
        use cluster::{ClusterObject, NetNamespace, StandaloneSource};
        let mut n = NetNamespace::new(namespace, netid);
        n.metadata.annotations = Some(
            [(
                cluster::audit::ACL_LOGGING_ANNOTATION.to_string(),
                value.to_string(),
            )]
            .into(),
        );
        StandaloneSource::write_object(&self.state_dir(), &ClusterObject::NetNamespace(n))
            .unwrap_or_else(|e| panic!("writing NetNamespace {namespace}: {e}"));
    }

    /// The pods' egress meters (`ovs-ofctl dump-meters br0`, each meter's config and band on
    /// one line; the kbit/s meters only: the audit log's packets/s meters are always there).
    pub fn egress_meters(&self) -> Vec<String> {
        let text = self.ovs.ofctl(&["-O", "OpenFlow13", "dump-meters", "br0"]);
        let mut out: Vec<String> = Vec::new();
        for l in text.lines().skip(1).filter(|l| !l.trim().is_empty()) {
            if l.starts_with("meter=") {
                out.push(l.trim().to_string());
            } else if let Some(last) = out.last_mut() {
                last.push(' ');
                last.push_str(l.trim());
            }
        }
        out.retain(|m| m.contains(" kbps "));
        out
    }

    /// The node's name (`--node-name`).
    pub fn node_name(&self) -> &str {
        &self.opts.node_name
    }

    /// Packets the logged IP rows (those resubmitting to table 130) of `filter`
    /// (`ovs-ofctl dump-flows` syntax, e.g. `table=80`) have met.
    pub fn logged_ip_packets(&self, filter: &str) -> u64 {
        self.ovs
            .ofctl(&["dump-flows", "br0", filter])
            .lines()
            .filter(|l| l.contains("resubmit(,130)") && l.contains(",ip,"))
            .filter_map(|l| {
                l.split("n_packets=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    }

    /// The agent's audit log file.
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit/audit.log")
    }

    /// The audit log's lines so far (JSON), the current file only.
    pub fn audit_lines(&self) -> Vec<serde_json::Value> {
        fs::read_to_string(self.audit_log())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("audit line {l:?}: {e}")))
            .collect()
    }

    /// Runs the real `sdnctl` against this node (its state directory and OVSDB) and returns its
    /// stdout; panics with stderr when it fails.
    pub fn sdnctl(&self, args: &[&str]) -> String {
        let out = Command::new(workspace_bin("sdnctl"))
            .arg("--state-dir")
            .arg(self.state_dir())
            .arg("--ovsdb")
            .arg(format!("unix:{}", self.ovs.db_sock().display()))
            .args(args)
            .env_remove("SDN_CONFIG")
            .output()
            .expect("run sdnctl");
        assert!(
            out.status.success(),
            "sdnctl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// One scrape of the agent's `/metrics` (its default address, 127.0.0.1:9101 in the node's
    /// namespace): every sample, `name{labels}` → value. Panics unless it answers 200.
    pub fn metrics(&self) -> std::collections::BTreeMap<String, f64> {
        let url = "http://127.0.0.1:9101/metrics";
        let out = self
            .ovs
            .exec_in_netns(&["curl", "-sS", "-m", "10", "-w", "\n%{http_code}", url])
            .unwrap_or_else(|e| panic!("curl {url}: {e}"));
        let (body, code) = out.trim_end().rsplit_once('\n').unwrap_or(("", out.trim()));
        assert_eq!(code, "200", "{url}: {body}");
        body.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect()
    }

    /// Runs the real `sdnctl` against this node's local API (`--api-socket`) and returns what
    /// it did (the caller checks the status: some tests expect a refusal).
    pub fn sdnctl_api(&self, args: &[&str]) -> std::process::Output {
        Command::new(workspace_bin("sdnctl"))
            .arg("--api-socket")
            .arg(self.api_socket())
            .args(args)
            .env_remove("SDN_CONFIG")
            .output()
            .expect("run sdnctl")
    }

    /// The agent's local API socket.
    pub fn api_socket(&self) -> PathBuf {
        self.dir.join("run/api.sock")
    }

    /// `sdnctl --json trace SRC DST PROTO [--vni N]` against this node's agent: the trace's JSON
    /// (panics with sdnctl's stderr when it fails).
    pub fn trace(&self, src: &str, dst: &str, proto: &str, vni: Option<u32>) -> Value {
        let mut cmd = Command::new(workspace_bin("sdnctl"));
        cmd.arg("--api-socket")
            .arg(self.api_socket())
            .args(["--json", "trace", src, dst, proto])
            .env_remove("SDN_CONFIG")
            .env_remove("SDN_API_SOCKET");
        if let Some(v) = vni {
            cmd.args(["--vni", &v.to_string()]);
        }
        let out = cmd.output().expect("run sdnctl trace");
        assert!(
            out.status.success(),
            "sdnctl trace {src} {dst} {proto} {vni:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("sdnctl --json prints JSON")
    }

    /// The VNID of every NetNamespace, as `sdnctl --json namespaces` lists them.
    pub fn vnids(&self) -> std::collections::BTreeMap<String, u32> {
        let v: Value = serde_json::from_str(&self.sdnctl(&["--json", "namespaces"]))
            .expect("sdnctl --json prints JSON");
        v["namespaces"]
            .as_array()
            .expect("namespaces")
            .iter()
            .filter_map(|n| Some((n["name"].as_str()?.to_string(), n["vnid"].as_u64()? as u32)))
            .collect()
    }

    /// The VNID this node's flows give the pod with address `ip` as a destination (`None`: no
    /// such flow): table 70 loads the pod's port into `reg2`, and table 75's row for that port
    /// loads the VNID into `reg1`. What tenant the node's flows currently give the pod.
    pub fn flowed_vnid(&self, ip: &str) -> Option<u32> {
        let loaded = |filter: &str, reg: &str| -> Option<u32> {
            let text = self.ovs.ofctl(&["--no-stats", "dump-flows", "br0", filter]);
            let line = text.lines().find(|l| l.contains("actions=load:"))?;
            let value = line
                .split("actions=load:")
                .nth(1)?
                .split(&format!("->NXM_NX_{reg}[]"))
                .next()?;
            match value.strip_prefix("0x") {
                Some(hex) => u32::from_str_radix(hex, 16).ok(),
                None => value.parse().ok(),
            }
        };
        let port = loaded(&format!("table=70,ip,nw_dst={ip}"), "REG2")?;
        loaded(&format!("table=75,reg2={port}"), "REG1")
    }

    /// Waits until ovs-vswitchd has revalidated its datapath flow cache against the current
    /// OpenFlow tables (`ovs-appctl revalidator/wait`): after a flow change, megaflows cached
    /// from the old tables may serve packets until then.
    pub fn datapath_settled(&self) {
        let ctl = self.ovs.vswitchd_ctl();
        run(
            "ovs-appctl",
            &["-t", &ctl.display().to_string(), "revalidator/wait"],
        )
        .unwrap_or_else(|e| panic!("revalidator/wait: {e}"));
    }

    /// Deletes the NetNamespace of `namespace` from the standalone state directory.
    pub fn delete_netnamespace(&self, namespace: &str) {
        use cluster::{Kind, StandaloneSource};
        StandaloneSource::delete_object(&self.state_dir(), Kind::NetNamespace, namespace)
            .unwrap_or_else(|e| panic!("deleting NetNamespace {namespace}: {e}"));
    }

    /// The agent's last "br0 reconciled" line (empty when there is none): what its last
    /// start-up reconcile changed.
    pub fn last_reconcile(&self) -> String {
        self.log()
            .lines()
            .rev()
            .find(|l| l.contains("br0 reconciled"))
            .unwrap_or_default()
            .to_string()
    }

    /// The agent's log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }

    /// The agent's flags.
    pub fn agent_args(&self) -> Vec<String> {
        let d = |p: &str| self.dir.join(p).display().to_string();
        let state = self.state_dir().display().to_string();
        let mut a: Vec<String> = [
            "run",
            "--node-name",
            &self.opts.node_name,
            "--node-ip",
            &self.opts.node_ip,
            "--mode",
            self.opts.mode,
            "--cluster-network",
            &self.opts.cluster_network,
            "--datapath-type",
            "netdev",
            "--ovsdb",
            &format!("unix:{}", self.ovs.db_sock().display()),
            "--bridge-mgmt",
            &self.ovs.mgmt_sock("br0").display().to_string(),
            "--cni-socket",
            &d("run/cni.sock"),
            "--ipam-dir",
            &d("ipam"),
            "--cni-conf-dir",
            &d("net.d"),
            "--audit-log-file",
            &d("audit/audit.log"),
            "--cluster-state",
            &format!("standalone:{state}"),
            "--request-timeout",
            "60",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(self.opts.extra.iter().cloned());
        a.extend(
            self.more_args
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned(),
        );
        a
    }

    /// Adds flags to the agents started from now on (a configuration changed between
    /// restarts, such as a cluster gaining an IPv6 network).
    pub fn add_agent_args(&self, args: &[&str]) {
        self.more_args
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(args.iter().map(|s| s.to_string()));
    }

    /// Replaces the flags [`AgentNode::add_agent_args`] added (a configuration going back).
    pub fn replace_agent_args(&self, args: &[&str]) {
        *self.more_args.lock().unwrap_or_else(|e| e.into_inner()) =
            args.iter().map(|s| s.to_string()).collect();
    }

    /// Runs `sdn-agent <command>` with this node's agent flags in the node's namespace (a
    /// command that reads the agent's configuration, such as `hand-back-to-openshift-sdn`) and
    /// returns its exit status and output (stdout, then stderr).
    pub fn agent_command(&self, command: &str) -> (std::process::ExitStatus, String) {
        let mut args = self.agent_args();
        args[0] = command.to_string();
        let out = without_agent_env(&mut Command::new("nsenter"))
            .arg(format!("--net=/run/netns/{}", self.ovs.netns()))
            .arg("--")
            .arg(workspace_bin("sdn-agent"))
            .args(&args)
            .output()
            .expect("run sdn-agent");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status, text)
    }

    /// Starts the agent (inside the OVS namespace) and waits until it is ready and has
    /// reconciled br0.
    pub fn start_agent(&self) {
        self.spawn_agent(true);
    }

    /// Starts the agent and waits only until it serves (socket and CNI config), not for its
    /// start-up reconcile of br0, which comes right after and needs ovs-vswitchd.
    pub fn start_agent_serving(&self) {
        self.spawn_agent(false);
    }

    /// Sets (`Some`) or removes (`None`) an environment variable of the agents started from now
    /// on (e.g. the `SDN_TEST_KILL_AT_WRITE` hook of `cluster::files`).
    pub fn set_agent_env(&self, key: &str, value: Option<&str>) {
        let mut env = self.agent_env.lock().unwrap_or_else(|e| e.into_inner());
        match value {
            Some(v) => env.insert(key.to_string(), v.to_string()),
            None => env.remove(key),
        };
    }

    /// Starts the agent and waits until it serves; `false` when it exited first (reaped: the
    /// node has no agent then). For agents expected to die (a kill hook).
    pub fn start_agent_may_die(&self) -> bool {
        self.spawn_agent_or_exit(false).is_ok()
    }

    fn spawn_agent(&self, wait_reconciled: bool) {
        if let Err(status) = self.spawn_agent_or_exit(wait_reconciled) {
            panic!(
                "sdn-agent exited with {status} before ready; log:\n{}",
                self.log()
            );
        }
    }

    fn spawn_agent_or_exit(&self, wait_reconciled: bool) -> Result<(), std::process::ExitStatus> {
        let mut agent = self.agent.lock().unwrap_or_else(|e| e.into_inner());
        assert!(agent.is_none(), "agent already running");
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("agent.log"))
            .expect("agent log");
        // Where this run's lines begin (the log is kept across restarts).
        let log_from = log.metadata().map_or(0, |m| m.len());
        // nsenter, not `ip netns exec`: the agent must share the test's mount namespace, where
        // it pins its port pool's namespace (`ip netns exec` gives it a private one, which
        // goes when it exits, and the agent then runs without a pool).
        let mut launcher = if self.opts.private_mounts {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", self.ovs.netns()]);
            c
        } else {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net=/run/netns/{}", self.ovs.netns()))
                .arg("--");
            c
        };
        // SDN_TEST_AGENT_WRAPPER: a program the agent runs under, for diagnosis (e.g.
        // `heaptrack -o /tmp/agent`), split on spaces.
        if let Ok(wrapper) = std::env::var("SDN_TEST_AGENT_WRAPPER") {
            launcher.args(wrapper.split_whitespace());
        }
        let child = without_agent_env(&mut launcher)
            .arg(workspace_bin("sdn-agent"))
            .args(self.agent_args())
            // SDN_TEST_AGENT_LOG: another tracing filter for diagnosis (e.g.
            // `info,agent::pod::pool=debug`).
            .env(
                "RUST_LOG",
                std::env::var("SDN_TEST_AGENT_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(
                self.agent_env
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone(),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log)
            .spawn()
            .expect("spawn sdn-agent");
        *agent = Some(child);
        // Ready: the socket accepts and the CNI config is there (the config of an earlier run
        // stays while the agent is down, and a SIGKILLed agent leaves its socket file, which
        // refuses connections until the new agent binds it); and, so tests see the whole
        // pipeline, this run has reconciled br0 (the agent serves just before it does).
        let conf = self.conf_file();
        let socket = self.socket();
        let reconciled = || {
            use std::io::{Read, Seek, SeekFrom};
            let mut run = String::new();
            fs::File::open(self.dir.join("agent.log"))
                .and_then(|mut f| {
                    f.seek(SeekFrom::Start(log_from))?;
                    f.read_to_string(&mut run)
                })
                .is_ok_and(|_| run.contains("br0 reconciled"))
        };
        let ready = || {
            conf.exists()
                && std::os::unix::net::UnixStream::connect(&socket).is_ok()
                && (!wait_reconciled || reconciled())
        };
        let start = Instant::now();
        while !ready() {
            if let Some(status) = agent.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                *agent = None;
                return Err(status);
            }
            // Generous: an agent of a large simulated cluster lists 150,000 pods (debug build).
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "sdn-agent not ready after 120 s; log:\n{}",
                self.log()
            );
            thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Restarts the agent (SIGTERM, start, reconciled) and asserts its start-up reconcile
    /// added and deleted no flow; returns that reconcile's log line.
    pub fn restart_unchanged(&self) -> String {
        self.stop_agent(libc::SIGTERM);
        self.start_agent();
        let line = self.last_reconcile();
        assert!(
            line.contains("added=0") && line.contains("deleted=0"),
            "{}: the restart changed flows: {line}",
            self.opts.node_name
        );
        line
    }

    /// Stops the agent with `signal` (e.g. `libc::SIGKILL`) and waits for it to exit.
    pub fn stop_agent(&self, signal: i32) {
        let taken = self.agent.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut c) = taken {
            // nsenter execs the agent: the child pid is the agent's, unless an
            // SDN_TEST_AGENT_WRAPPER (strace, heaptrack) runs it as its own child, which a
            // signal to the wrapper alone can leave running: those first.
            for pid in descendants(c.id() as i32) {
                // SAFETY: kill on a pid descending from a child we spawned and have not reaped.
                unsafe { libc::kill(pid, signal) };
            }
            // SAFETY: kill on a pid we spawned and have not reaped.
            unsafe { libc::kill(c.id() as i32, signal) };
            let _ = c.wait();
        }
    }

    /// Whether the agent process is running.
    pub fn agent_running(&self) -> bool {
        let mut agent = self.agent.lock().unwrap_or_else(|e| e.into_inner());
        matches!(agent.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// The agent's pid, while it runs.
    pub fn agent_pid(&self) -> Option<u32> {
        let agent = self.agent.lock().unwrap_or_else(|e| e.into_inner());
        agent.as_ref().map(Child::id)
    }

    /// The plugin config a runtime would pass for this node's network (the conflist's plugin).
    pub fn netconf(&self, version: &str) -> Value {
        json!({
            "cniVersion": version,
            "name": "sdn",
            "type": "sdn-cni",
            "socket": self.socket(),
        })
    }

    /// Runs `sdn-cni` with exactly these environment variables and `config` on stdin.
    pub fn cni(&self, env: &[(&str, &str)], config: &Value) -> CniOutcome {
        cni_exec(env, &config.to_string())
    }

    /// ADD for (`id`, `eth0`) in `netns` with `args`.
    pub fn add(&self, id: &str, netns: &str, args: &str) -> CniOutcome {
        self.cni(
            &[
                ("CNI_COMMAND", "ADD"),
                ("CNI_CONTAINERID", id),
                ("CNI_NETNS", netns),
                ("CNI_IFNAME", "eth0"),
                ("CNI_ARGS", args),
                ("CNI_PATH", "/opt/cni/bin"),
            ],
            &self.netconf("1.0.0"),
        )
    }

    /// DEL for (`id`, `eth0`).
    pub fn del(&self, id: &str, netns: &str) -> CniOutcome {
        self.cni(
            &[
                ("CNI_COMMAND", "DEL"),
                ("CNI_CONTAINERID", id),
                ("CNI_NETNS", netns),
                ("CNI_IFNAME", "eth0"),
            ],
            &self.netconf("1.0.0"),
        )
    }

    /// Creates a pod (namespace + ADD) in Kubernetes namespace `namespace`; panics on failure.
    pub fn pod(&self, namespace: &str, name: &str) -> CniPod<'_> {
        self.pod_with(namespace, name, None)
    }

    /// [`AgentNode::pod`] with a `runtimeConfig` (bandwidth, port mappings) in the network
    /// config, as a runtime passes its capabilities.
    pub fn pod_with(
        &self,
        namespace: &str,
        name: &str,
        runtime_config: Option<Value>,
    ) -> CniPod<'_> {
        let ns = Netns::new("sdnpod");
        let netns = ns.path();
        let id = format!("{}-{name}", ns.name());
        let args = format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name}");
        let mut conf = self.netconf("1.0.0");
        if let Some(rc) = runtime_config {
            conf["runtimeConfig"] = rc;
        }
        let out = self.cni(
            &[
                ("CNI_COMMAND", "ADD"),
                ("CNI_CONTAINERID", &id),
                ("CNI_NETNS", &netns),
                ("CNI_IFNAME", "eth0"),
                ("CNI_ARGS", &args),
                ("CNI_PATH", "/opt/cni/bin"),
            ],
            &conf,
        );
        assert_eq!(
            out.code,
            0,
            "ADD {namespace}/{name} failed: {}\nagent log:\n{}",
            out.stdout,
            self.log()
        );
        let ip = out
            .ip()
            .unwrap_or_else(|| panic!("no IP in result {}", out.stdout));
        let ip6 = out.ip6();
        CniPod {
            node: self,
            ns,
            id,
            ip,
            ip6,
            result: out.json,
            deleted: false,
        }
    }

    /// `ovs-ofctl dump-flows br0` without stats, sorted (to compare flow sets).
    pub fn flows(&self) -> Vec<String> {
        let text = self.ovs.ofctl(&["--no-stats", "dump-flows", "br0"]);
        let mut v: Vec<String> = text
            .lines()
            .filter(|l| !l.contains("OFPST_FLOW") && !l.trim().is_empty())
            .map(|l| l.trim().to_string())
            .collect();
        v.sort();
        v
    }

    /// Pod ports on br0 (interfaces with external_ids:sandbox).
    pub fn pod_ports(&self) -> Vec<String> {
        let out = self.ovs.vsctl(&[
            "--format=csv",
            "--no-headings",
            "--columns=name,external_ids",
            "find",
            "Interface",
            "external_ids:sandbox!=\"\"",
        ]);
        let mut v: Vec<String> = out
            .lines()
            .filter(|l| l.contains("sandbox"))
            .map(|l| l.split(',').next().unwrap_or("").to_string())
            .collect();
        v.sort();
        v
    }

    /// Pods' lease files (IP names) in the node's lease directory, once the agent has finished
    /// retiring deleted pods (it hands a deleted pod's address to its port, `sdn-retired-*`,
    /// until the port's flows are gone, within a second). The addresses of warm pool ports
    /// (`sdn-warm-*`, held with their flows before any pod takes them) are not pods' and are
    /// left out. IPv4 ones; [`AgentNode::leases6`] for IPv6.
    pub fn leases(&self) -> Vec<String> {
        self.pod_leases::<std::net::Ipv4Addr>()
    }

    /// [`AgentNode::leases`] of the IPv6 family.
    pub fn leases6(&self) -> Vec<String> {
        self.pod_leases::<std::net::Ipv6Addr>()
    }

    fn pod_leases<A: std::str::FromStr>(&self) -> Vec<String> {
        let read = || -> Vec<(String, String)> {
            fs::read_dir(self.lease_dir())
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| n.parse::<A>().is_ok())
                        .map(|n| {
                            let owner =
                                fs::read_to_string(self.lease_dir().join(&n)).unwrap_or_default();
                            (n, owner)
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        wait_until(Duration::from_secs(5), || {
            !read().iter().any(|(_, o)| o.starts_with("sdn-retired-"))
        });
        let mut v: Vec<String> = read()
            .into_iter()
            .filter(|(_, o)| !o.starts_with("sdn-warm-"))
            .map(|(n, _)| n)
            .collect();
        v.sort();
        v
    }

    /// Every veth link in the node namespace, pool pairs included.
    pub fn all_veths(&self) -> Vec<String> {
        let out = self
            .ovs
            .exec_in_netns(&["ip", "-o", "link", "show", "type", "veth"])
            .unwrap_or_default();
        out.lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|n| n.split('@').next().unwrap_or(n).to_string())
            .collect()
    }

    /// veth links in the node namespace that are not the agent's ready pool pairs (a pool
    /// port and its `sdnq*` peer, see `agent::pod::pool`; [`AgentNode::assert_pool_sane`]
    /// checks those). A pod wired from the pool keeps its `sdnp*` host end here.
    pub fn veths(&self) -> Vec<String> {
        let pods = self.pod_ports();
        self.all_veths()
            .into_iter()
            .filter(|n| !n.starts_with("sdnq") && (!n.starts_with("sdnp") || pods.contains(n)))
            .collect()
    }

    /// The OVS port (host veth) of attachment (`sandbox`, eth0), found by its record: a pod
    /// wired from the pool has the pool port's name, others the attachment's hash name.
    pub fn port_of(&self, sandbox: &str) -> String {
        self.interface_names(&format!("external_ids:sandbox=\"{sandbox}\""))
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no port records sandbox {sandbox}"))
    }

    /// Names of the Interface rows matching an `ovs-vsctl find` condition, sorted.
    fn interface_names(&self, condition: &str) -> Vec<String> {
        let out = self.ovs.vsctl(&[
            "--format=csv",
            "--no-headings",
            "--columns=name",
            "find",
            "Interface",
            condition,
        ]);
        let mut v: Vec<String> = out
            .lines()
            .map(|l| l.trim_matches('"').to_string())
            .filter(|l| !l.is_empty())
            .collect();
        v.sort();
        v
    }

    /// The pool ports the agent holds, idle and warm (its metrics).
    pub fn pool_held(&self) -> usize {
        let m = self.metrics();
        (m.get("sdn_port_pool_free").copied().unwrap_or(-1.0)
            + m.get("sdn_port_pool_warm").copied().unwrap_or(-1.0)) as usize
    }

    /// Ready pool ports on br0 (interfaces with `external_ids:sdn-pool`).
    pub fn pool_ports(&self) -> Vec<String> {
        self.interface_names("external_ids:sdn-pool!=\"\"")
    }

    /// The pool is what it says: no more than `size` idle pool ports plus `size` warm ones for
    /// each of two VNIDs, each with its host veth in the node namespace (the peers wait in the
    /// agent's pinned parking namespace, out of sight), and no `sdnp*` veth that is neither a
    /// pool port nor a pod's.
    pub fn assert_pool_sane(&self, size: usize) {
        // A refill in progress has veths that are not ports yet: give it time to settle, and
        // check one snapshot taken when it had (another refill may start at any time).
        let snapshot = || {
            // Ports first: a veth made after this listing is newer than any port in it.
            let (pool, pods) = (self.pool_ports(), self.pod_ports());
            (self.all_veths(), pool, pods)
        };
        // The agent trims a pool overfilled by cooled warm ports or ports given back during a
        // refill within a maintenance round: settled includes being within bounds.
        let settled = |(all, pool, pods): &(Vec<String>, Vec<String>, Vec<String>)| {
            pool.len() <= 3 * size
                && all
                    .iter()
                    .filter(|n| n.starts_with("sdnp"))
                    .all(|v| pool.contains(v) || pods.contains(v))
        };
        let mut last = snapshot();
        wait_until(Duration::from_secs(10), || {
            last = snapshot();
            settled(&last)
        });
        let (all, pool, pods) = last;
        // Plain ports, plus half the size warm for each of two VNIDs.
        assert!(
            pool.len() <= 3 * size,
            "{} pool ports, pool size {size}: {pool:?}",
            pool.len()
        );
        for p in &pool {
            assert!(all.contains(p), "pool port {p} has no veth");
        }
        for v in all.iter().filter(|n| n.starts_with("sdnp")) {
            assert!(
                pool.contains(v) || pods.contains(v),
                "veth {v} is neither a pool port nor a pod's"
            );
        }
    }

    /// Flows with a pod cookie (feature 1), once deleted pods are retired (see
    /// [`AgentNode::leases`]), without those of warm pool ports (no pod is behind them yet).
    pub fn pod_flows(&self) -> Vec<String> {
        self.leases();
        let warm: Vec<String> = self
            .pool_ports()
            .iter()
            .map(|p| format!("cookie={:#x},", flows::port_cookie(p)))
            .collect();
        self.flows()
            .into_iter()
            .filter(|l| l.starts_with("cookie=0x1") && !l.starts_with("cookie=0x1,"))
            .filter(|l| !warm.iter().any(|w| l.starts_with(w.as_str())))
            .collect()
    }

    /// Every Interface row as ovs-vsctl reads it now: name -> (ofport, external_ids).
    pub fn interfaces(&self) -> BTreeMap<String, (i64, BTreeMap<String, String>)> {
        let out = self.ovs.vsctl(&[
            "--format=json",
            "--columns=name,ofport,external_ids",
            "list",
            "Interface",
        ]);
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let mut m = BTreeMap::new();
        for row in v["data"].as_array().into_iter().flatten() {
            let name = row[0].as_str().unwrap_or_default().to_string();
            // An unset ofport is `["set", []]`.
            let ofport = row[1].as_i64().unwrap_or(-1);
            let ids = row[2][1]
                .as_array()
                .into_iter()
                .flatten()
                .map(|kv| {
                    (
                        kv[0].as_str().unwrap_or_default().to_string(),
                        kv[1].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect();
            m.insert(name, (ofport, ids));
        }
        m
    }

    /// The census of br0's port rows against the ports as OVS numbers them now: every pod port
    /// (that ovs-vswitchd can open) has its table-20 rows on its current ofport with its
    /// recorded address, every table-70 row delivers an address to the port that has it now,
    /// and every
    /// table-20 row of a port (`in_port` 3 and up) belongs to a port that has that ofport now,
    /// with the address of its pod or, for a warm pool port, of its `sdn-warm-<port>` lease.
    /// Returns the problems found (empty: the rows follow the ports).
    pub fn rows_off_their_ports(&self) -> Vec<String> {
        let ifaces = self.interfaces();
        let warm: BTreeMap<String, String> = fs::read_dir(self.lease_dir())
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter_map(|e| {
                        // Lease files only: a cut write's temporary file is no lease.
                        let ip = e.file_name().to_string_lossy().into_owned();
                        ip.parse::<std::net::Ipv4Addr>().ok()?;
                        let owner = fs::read_to_string(e.path()).ok()?;
                        let port = owner.split("\r\n").next()?.strip_prefix("sdn-warm-")?;
                        Some((port.to_string(), ip))
                    })
                    .collect()
            })
            .unwrap_or_default();
        // ofport -> (port, the address its rows must carry).
        let mut by_ofport: BTreeMap<i64, (String, Option<String>)> = BTreeMap::new();
        for (name, (ofport, ids)) in &ifaces {
            let ip = ids.get("ip").cloned().or_else(|| warm.get(name).cloned());
            if *ofport >= 3 {
                by_ofport.insert(*ofport, (name.clone(), ip));
            }
        }
        // The value of `key` in a dumped flow, up to the next `,` or space.
        fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
            line.split(key).nth(1)?.split([',', ' ']).next()
        }
        let flows = self.flows();
        let rows: Vec<(i64, String)> = flows
            .iter()
            .filter(|l| l.contains("table=20,") && l.contains(",ip,"))
            .filter_map(|l| {
                Some((
                    field(l, "in_port=")?.parse().ok()?,
                    field(l, "nw_src=")?.to_string(),
                ))
            })
            .collect();
        // Table 70 delivers a pod's address to its port (`load:<port>->reg2`): the same test.
        let delivery: Vec<(i64, String)> = flows
            .iter()
            .filter(|l| l.contains("table=70,") && l.contains("->NXM_NX_REG2[]"))
            .filter_map(|l| {
                let load = l.split("load:").nth(1)?.split("->").next()?;
                Some((
                    i64::from_str_radix(load.trim_start_matches("0x"), 16).ok()?,
                    field(l, "nw_dst=")?.to_string(),
                ))
            })
            .collect();
        let mut bad = Vec::new();
        for (ofport, ip) in &delivery {
            match by_ofport.get(ofport) {
                Some((_, want)) if want.as_deref() == Some(ip.as_str()) => {}
                other => bad.push(format!(
                    "table 70 delivers {ip} to port {ofport}, which is {other:?}"
                )),
            }
        }
        for (ofport, ip) in &rows {
            match by_ofport.get(ofport) {
                None => bad.push(format!(
                    "a table-20 row for in_port={ofport} ({ip}): no port has that ofport"
                )),
                Some((name, want)) if want.as_deref() != Some(ip.as_str()) => bad.push(format!(
                    "a table-20 row for in_port={ofport} carries {ip}, but that is port {name} \
                     of {want:?}"
                )),
                Some(_) => {}
            }
        }
        for (name, (ofport, ids)) in &ifaces {
            // A pod port ovs-vswitchd cannot open (its veth went with its netns) has no rows
            // until the runtime's DEL removes it.
            if let Some(ip) = ids
                .get("ip")
                .filter(|_| ids.contains_key("sandbox") && *ofport > 0)
            {
                if !rows.iter().any(|(p, i)| p == ofport && i == ip) {
                    bad.push(format!(
                        "pod port {name} (ofport {ofport}, {ip}) has no table-20 row on its ofport"
                    ));
                }
            }
        }
        bad
    }

    /// Asserts no pod port, veth, lease or pod flow exists.
    pub fn assert_no_pod_leftovers(&self) {
        assert_eq!(self.pod_ports(), Vec::<String>::new(), "pod ports left");
        assert_eq!(self.veths(), Vec::<String>::new(), "veths left");
        assert_eq!(self.leases(), Vec::<String>::new(), "leases left");
        assert_eq!(self.pod_flows(), Vec::<String>::new(), "pod flows left");
    }
}

/// The processes descending from `pid` (children first, from `/proc/*/stat`'s parent pids).
fn descendants(pid: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let p: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = fs::read_to_string(e.path().join("stat")).ok()?;
            // `pid (comm) state ppid ...`: comm may hold spaces, so after the last ')'.
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((p, ppid))
        })
        .collect();
    let mut found = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for &(p, pp) in &parents {
            if pp == parent && !found.contains(&p) {
                found.push(p);
                frontier.push(p);
            }
        }
    }
    found
}

impl Drop for AgentNode {
    fn drop(&mut self) {
        self.stop_agent(libc::SIGKILL);
        // The port pool's namespace, pinned in the agent's run directory.
        let pin = self.dir.join("run/pool-netns");
        if let Ok(c) = std::ffi::CString::new(pin.as_os_str().as_encoded_bytes()) {
            // SAFETY: a NUL-terminated path; unmounting changes no memory of ours.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
        if thread::panicking() {
            eprintln!(
                "--- sdn-agent log ({}) ---\n{}",
                self.dir.display(),
                self.log()
            );
        }
    }
}

/// A pod made through `sdn-cni`: DEL and namespace removal on drop.
#[derive(Debug)]
pub struct CniPod<'a> {
    node: &'a AgentNode,
    /// The pod's network namespace.
    pub ns: Netns,
    /// Container id.
    pub id: String,
    /// The pod's first address: IPv4, or its IPv6 one on an IPv6-only cluster.
    pub ip: String,
    /// The pod's IPv6 address (a dual-stack node's pods).
    pub ip6: Option<String>,
    /// The ADD result.
    pub result: Value,
    deleted: bool,
}

impl CniPod<'_> {
    /// The netns path.
    pub fn netns(&self) -> String {
        self.ns.path()
    }

    /// `ping -c 1 -W <secs> ip` from inside the pod.
    pub fn ping(&self, ip: &str, secs: u32) -> bool {
        self.ns
            .exec(&["ping", "-c", "1", "-W", &secs.to_string(), ip])
            .is_ok()
    }

    /// Deletes the pod's network namespace behind the runtime's back (the veth dies with it),
    /// as when a pod's sandbox vanishes.
    pub fn remove_netns(&self) {
        run("ip", &["netns", "delete", self.ns.name()]).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Forgets the pod without DEL (the test DELs it itself or expects the agent to clean up).
    pub fn forget(mut self) {
        self.deleted = true;
    }

    /// DEL now (asserting success).
    pub fn delete(mut self) {
        let out = self.node.del(&self.id, &self.netns());
        assert_eq!(out.code, 0, "DEL failed: {}", out.stdout);
        self.deleted = true;
    }
}

impl Drop for CniPod<'_> {
    fn drop(&mut self) {
        if !self.deleted {
            let _ = self.node.del(&self.id, &self.netns());
        }
    }
}

/// Runs `sdn-cni` with a cleared environment plus `env`, `stdin` on its standard input.
pub fn cni_exec(env: &[(&str, &str)], stdin: &str) -> CniOutcome {
    plugin_exec(&workspace_bin("sdn-cni"), env, stdin)
}

/// Runs CNI plugin `bin` as a runtime does: a cleared environment plus `env`, `stdin` on its
/// standard input.
pub fn plugin_exec(bin: &Path, env: &[(&str, &str)], stdin: &str) -> CniOutcome {
    use std::io::Write;
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("plugin output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    CniOutcome {
        code: out.status.code().unwrap_or(-1),
        json: serde_json::from_str(&stdout).unwrap_or(Value::Null),
        stdout,
    }
}

/// Runs a command, panicking with its output on failure.
pub fn must(cmd: &str, args: &[&str]) -> String {
    run(cmd, args).unwrap_or_else(|e| panic!("{e}"))
}
