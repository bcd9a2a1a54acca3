//! A private Open vSwitch per test: ovsdb-server and ovs-vswitchd (userspace datapath) in their
//! own temp directory, ovs-vswitchd inside its own network namespace, everything torn down on drop.
//!
//! Why this shape (see `docs/testing.md`): there is no OVS kernel module on these
//! machines, so bridges use `datapath_type=netdev`; two userspace vswitchd in one network
//! namespace collide on their tap devices, so each instance gets a namespace; ovsdb-server
//! stays in the host namespace (it only needs its Unix socket, and TCP remotes on 127.0.0.1 are
//! then reachable from the test). Daemons are stopped by the pids in their own pid files, never
//! by name. A test that needs root or OVS panics with the reason: it never passes silently.

use std::fs;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Binaries every OVS test needs.
const OVS_BINARIES: &[&str] = &[
    "ovsdb-tool",
    "ovsdb-server",
    "ovs-vswitchd",
    "ovs-vsctl",
    "ovs-ofctl",
];
const SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

/// Panics with a clear message unless the test runs as root with OVS and iproute2 installed.
pub fn require_root_and_ovs() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert!(
        euid == 0,
        "this test needs root (network namespaces, ovs-vswitchd); run the README's test command as root"
    );
    let mut missing: Vec<&str> = OVS_BINARIES
        .iter()
        .copied()
        .filter(|b| which(b).is_none())
        .collect();
    if which("ip").is_none() {
        missing.push("ip (iproute2)");
    }
    assert!(
        missing.is_empty(),
        "this test needs Open vSwitch and iproute2; missing: {} (apt-get install openvswitch-switch iproute2, or run .ci/run)",
        missing.join(", ")
    );
    assert!(
        Path::new(SCHEMA).exists(),
        "OVS schema {SCHEMA} is missing (apt-get install openvswitch-common)"
    );
}

/// The full path of `bin` on PATH (plus the sbin directories OVS uses).
pub fn which(bin: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .map(|d| Path::new(d).join(bin))
        .find(|p| p.is_file());
    found
}

/// Removes from `cmd`'s environment every variable `sdn-agent` reads as a flag (`SDN_CONFIG`,
/// `SDN_MTU`, ...), so an operator's shell (`deploy/node-up.sh` suggests exporting
/// `SDN_CONFIG`) never configures the agents the tests start.
pub fn without_agent_env(cmd: &mut std::process::Command) -> &mut std::process::Command {
    for name in cluster::config::Config::env_names() {
        cmd.env_remove(name);
    }
    cmd
}

/// A process's resident memory, MB (`VmRSS`; NaN when it is gone).
pub fn process_rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// A process's CPU seconds so far (user + system).
pub fn process_cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces): state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

/// A binary of this workspace, next to the test executable (`<target>/<profile>/`), or the path
/// in `SDN_<NAME>_BIN` (e.g. `SDN_CNI_BIN` for `sdn-cni`). `scripts/test` builds them first.
pub fn workspace_bin(name: &str) -> PathBuf {
    let var = format!("{}_BIN", name.to_ascii_uppercase().replace('-', "_"));
    if let Some(p) = std::env::var_os(&var) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable lives in <target>/<profile>/deps");
    let p = profile_dir.join(name);
    assert!(
        p.is_file(),
        "{} is missing: build the workspace first (scripts/test does `cargo build --workspace \
         --all-targets`), or point {var} at the binary",
        p.display()
    );
    p
}

/// Runs a command, returning stdout on success and a message with stderr on failure.
pub fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(which(cmd).unwrap_or_else(|| PathBuf::from(cmd)))
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {cmd}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{cmd} {} failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        ))
    }
}

/// A unique short name for namespaces and directories of this test process.
pub fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Held by a test that simulates a cluster of thousands of nodes (a fake API server with
/// 5,000 HostSubnets, NetNamespaces and their watches), for as long as it runs: such tests take
/// both cores for minutes, and two at once starve each other's controllers and agents past
/// their bounds (they share the `large` test binary). One at a time.
pub fn one_large_cluster_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LARGE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LARGE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Polls `cond` every 10 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// A network namespace this process created; deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates a namespace with a unique name starting with `prefix`, loopback up, and IPv4
    /// forwarding **off**, whatever the machine's initial namespace has (a new namespace
    /// inherits that: a test that passed only because another test, or the host, had turned
    /// forwarding on would pass or fail by the order tests ran in). So every namespace of a
    /// test starts as on a fresh machine, and what needs forwarding (a node: the agent, or the
    /// openshift-sdn fixture as its own start does) turns it on itself.
    pub fn new(prefix: &str) -> Netns {
        let name = unique_name(prefix);
        run("ip", &["netns", "add", &name]).unwrap_or_else(|e| panic!("{e}"));
        let ns = Netns { name };
        ns.exec(&["ip", "link", "set", "lo", "up"])
            .unwrap_or_else(|e| panic!("{e}"));
        ns.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=0"])
            .unwrap_or_else(|e| panic!("{e}"));
        ns
    }

    /// The namespace name (under /var/run/netns).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace's file, as runtimes pass it in `CNI_NETNS`.
    pub fn path(&self) -> String {
        format!("/var/run/netns/{}", self.name)
    }

    /// Runs a command inside the namespace.
    pub fn exec(&self, cmd: &[&str]) -> Result<String, String> {
        let mut args = vec!["netns", "exec", &self.name];
        args.extend_from_slice(cmd);
        run("ip", &args)
    }

    /// Runs `f` on a new thread that has entered this namespace (sockets it opens live there).
    pub fn run_inside<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        in_netns(&self.path(), f)
    }
}

/// The file of network namespace `name`: `/var/run/netns/<name>`, or `name` itself when it is
/// already a path (starts with `/`).
pub fn netns_path(name: &str) -> String {
    if name.starts_with('/') {
        name.to_string()
    } else {
        format!("/var/run/netns/{name}")
    }
}

/// Spawns a thread that enters network namespace `name` (see [`netns_path`]) and runs `f` there:
/// sockets it opens live in that namespace, and keep living there after the thread ends. The
/// thread panics (seen at `join`) if the namespace cannot be entered.
pub fn spawn_in_netns<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let path = netns_path(name);
    thread::spawn(move || {
        let file = fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        // SAFETY: setns on a valid namespace fd affects only this thread.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(
            rc,
            0,
            "setns into {path}: {}",
            std::io::Error::last_os_error()
        );
        f()
    })
}

/// Runs `f` on a new thread inside network namespace `name` (see [`spawn_in_netns`]) and
/// returns its result; a panic in `f` is re-raised here.
pub fn in_netns<T: Send + 'static>(name: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    spawn_in_netns(name, f)
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run("ip", &["netns", "delete", &self.name]);
    }
}

/// A private OVS instance (see the module docs).
#[derive(Debug)]
pub struct Ovs {
    dir: PathBuf,
    // Declared after `dir` users but dropped explicitly in `Drop` after the daemons stop.
    netns: Option<Netns>,
}

impl Ovs {
    /// Starts ovsdb-server and ovs-vswitchd. Panics with the reason when that is impossible.
    pub fn start() -> Ovs {
        require_root_and_ovs();
        let name = unique_name("sdnt");
        let dir = std::env::temp_dir().join(&name);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let ovs = Ovs {
            dir,
            netns: Some(Netns::new("sdnt")),
        };
        let db = ovs.dir.join("conf.db");
        run("ovsdb-tool", &["create", &path_str(&db), SCHEMA]).unwrap_or_else(|e| panic!("{e}"));
        ovs.start_ovsdb();
        ovs.vsctl(&["--no-wait", "init"]);
        ovs.start_vswitchd();
        assert!(
            wait_until(Duration::from_secs(10), || ovs
                .try_vsctl(&["--timeout=1", "show"])
                .is_ok()),
            "ovs-vswitchd did not come up; see {}",
            ovs.dir.join("vswitchd.log").display()
        );
        ovs
    }

    /// Starts (or restarts after [`Ovs::kill_vswitchd`]) ovs-vswitchd in the instance's
    /// namespace, on the same database; returns once it runs (its pid file names a live
    /// process).
    pub fn start_vswitchd(&self) {
        let log = self.dir.join("vswitchd.log");
        let pid = self.dir.join("ovs-vswitchd.pid");
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.netns()])
            .arg(which("ovs-vswitchd").unwrap_or_else(|| "ovs-vswitchd".into()))
            .arg(format!("unix:{}", path_str(&self.db_sock())))
            .arg(format!("--pidfile={}", path_str(&pid)))
            .arg("--detach")
            .arg(format!("--log-file={}", path_str(&log)));
        self.envs(&mut cmd);
        check(cmd.output(), "ovs-vswitchd");
    }

    /// Kills ovs-vswitchd with SIGKILL (a crash) and waits until it is gone. Its datapath (the
    /// userspace one lives in the process) and its tap devices go with it.
    pub fn kill_vswitchd(&self) {
        let pid = self.vswitchd_pid().expect("ovs-vswitchd is running");
        // SAFETY: kill on the pid our own instance's pid file names.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        assert!(
            wait_until(Duration::from_secs(10), || {
                // SAFETY: signal 0 only checks that the process exists.
                unsafe { libc::kill(pid, 0) != 0 }
            }),
            "ovs-vswitchd {pid} did not die"
        );
    }

    fn envs(&self, cmd: &mut Command) {
        let d = path_str(&self.dir);
        cmd.env("OVS_RUNDIR", &d)
            .env("OVS_LOGDIR", &d)
            .env("OVS_DBDIR", &d);
    }

    /// The instance's directory (sockets, logs, pid files, database).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The network namespace ovs-vswitchd runs in.
    pub fn netns(&self) -> &str {
        self.netns.as_ref().map(|n| n.name()).unwrap_or_default()
    }

    /// The namespace handle, to run commands or threads inside it.
    pub fn ns(&self) -> &Netns {
        self.netns.as_ref().expect("namespace exists until drop")
    }

    /// ovsdb-server's Unix socket.
    pub fn db_sock(&self) -> PathBuf {
        self.dir.join("db.sock")
    }

    /// The OpenFlow management socket of `bridge`.
    pub fn mgmt_sock(&self, bridge: &str) -> PathBuf {
        self.dir.join(format!("{bridge}.mgmt"))
    }

    /// Starts (or restarts after [`Ovs::stop_ovsdb`]) ovsdb-server on the same database and socket.
    pub fn start_ovsdb(&self) {
        let mut cmd = Command::new(which("ovsdb-server").unwrap_or_else(|| "ovsdb-server".into()));
        cmd.arg(self.dir.join("conf.db"))
            .arg(format!("--remote=punix:{}", path_str(&self.db_sock())))
            .arg(format!(
                "--pidfile={}",
                path_str(&self.dir.join("ovsdb-server.pid"))
            ))
            .arg("--detach")
            .arg(format!(
                "--log-file={}",
                path_str(&self.dir.join("ovsdb.log"))
            ));
        self.envs(&mut cmd);
        check(cmd.output(), "ovsdb-server");
        assert!(
            wait_until(Duration::from_secs(10), || self.db_sock().exists()),
            "ovsdb-server did not create {}",
            self.db_sock().display()
        );
    }

    /// Stops ovsdb-server (by its pid file) and waits until it is gone.
    pub fn stop_ovsdb(&self) {
        stop_daemon(&self.dir.join("ovsdb-server.pid"));
        let _ = fs::remove_file(self.db_sock());
    }

    /// The pid of ovsdb-server (for `ovs-appctl -t <dir>/ovsdb-server.<pid>.ctl`).
    pub fn ovsdb_pid(&self) -> Option<i32> {
        read_pid(&self.dir.join("ovsdb-server.pid"))
    }

    /// The unixctl socket of ovsdb-server, for `ovs-appctl -t`.
    pub fn ovsdb_ctl(&self) -> PathBuf {
        let pid = self.ovsdb_pid().expect("ovsdb-server is running");
        self.dir.join(format!("ovsdb-server.{pid}.ctl"))
    }

    /// The pid of this instance's ovs-vswitchd.
    pub fn vswitchd_pid(&self) -> Option<i32> {
        read_pid(&self.dir.join("ovs-vswitchd.pid"))
    }

    /// The unixctl socket of ovs-vswitchd, for `ovs-appctl -t`.
    pub fn vswitchd_ctl(&self) -> PathBuf {
        let pid = read_pid(&self.dir.join("ovs-vswitchd.pid")).expect("ovs-vswitchd is running");
        self.dir.join(format!("ovs-vswitchd.{pid}.ctl"))
    }

    /// Runs `ovs-vsctl` against this instance; panics with stderr on failure.
    pub fn vsctl(&self, args: &[&str]) -> String {
        self.try_vsctl(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs `ovs-vsctl` against this instance.
    pub fn try_vsctl(&self, args: &[&str]) -> Result<String, String> {
        let db = format!("--db=unix:{}", path_str(&self.db_sock()));
        let mut all = vec![db.as_str(), "--timeout=10"];
        all.extend_from_slice(args);
        run("ovs-vsctl", &all)
    }

    /// Creates `bridge` (netdev datapath, fail_mode=secure, OpenFlow13) and waits for its
    /// management socket.
    pub fn add_bridge(&self, bridge: &str) {
        self.vsctl(&[
            "add-br",
            bridge,
            "--",
            "set",
            "bridge",
            bridge,
            "datapath_type=netdev",
            "fail_mode=secure",
            "protocols=OpenFlow13",
        ]);
        let mgmt = self.mgmt_sock(bridge);
        assert!(
            wait_until(Duration::from_secs(10), || mgmt.exists()),
            "bridge {bridge}: {} did not appear",
            mgmt.display()
        );
    }

    /// Runs `ovs-ofctl -O OpenFlow13` with `args`; the first argument after the command that
    /// names a bridge of this instance is rewritten to its management socket.
    pub fn ofctl(&self, args: &[&str]) -> String {
        self.try_ofctl(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`Ovs::ofctl`], returning the error instead of panicking.
    pub fn try_ofctl(&self, args: &[&str]) -> Result<String, String> {
        let rewritten: Vec<String> = args
            .iter()
            .map(|a| {
                let mgmt = self.mgmt_sock(a);
                if !a.contains('/') && !a.contains('=') && mgmt.exists() {
                    format!("unix:{}", path_str(&mgmt))
                } else {
                    a.to_string()
                }
            })
            .collect();
        let mut all = vec!["-O", "OpenFlow13"];
        all.extend(rewritten.iter().map(String::as_str));
        run("ovs-ofctl", &all)
    }

    /// Runs `f` on a thread inside the OVS network namespace (see [`Netns::run_inside`]).
    pub fn in_netns<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        self.ns().run_inside(f)
    }

    /// Runs a command inside the OVS network namespace.
    pub fn exec_in_netns(&self, cmd: &[&str]) -> Result<String, String> {
        self.ns().exec(cmd)
    }
}

impl Drop for Ovs {
    fn drop(&mut self) {
        stop_daemon(&self.dir.join("ovs-vswitchd.pid"));
        stop_daemon(&self.dir.join("ovsdb-server.pid"));
        self.netns.take();
        if !thread::panicking() || std::env::var_os("SDN_TEST_KEEP").is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// A "pod": a network namespace holding one end of a veth pair whose other end sits in the OVS
/// namespace, ready to be added to a bridge as a system port.
#[derive(Debug)]
pub struct Pod {
    ns: Netns,
    host_if: String,
}

impl Pod {
    /// Creates the namespace and veth pair; the pod end is `eth0`, up, with `ip` (CIDR) on it.
    pub fn new(ovs: &Ovs, ip_cidr: &str) -> Pod {
        let ns = Netns::new("sdnp");
        let host_if = format!("veth{}", COUNTER.fetch_add(1, Ordering::Relaxed) % 100_000);
        let host_if = format!("{host_if}-{}", std::process::id() % 1000);
        ns.exec(&[
            "ip", "link", "add", "eth0", "type", "veth", "peer", "name", &host_if,
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        ns.exec(&["ip", "link", "set", &host_if, "netns", ovs.netns()])
            .unwrap_or_else(|e| panic!("{e}"));
        ovs.exec_in_netns(&["ip", "link", "set", &host_if, "up"])
            .unwrap_or_else(|e| panic!("{e}"));
        ns.exec(&["ip", "addr", "add", ip_cidr, "dev", "eth0"])
            .unwrap_or_else(|e| panic!("{e}"));
        ns.exec(&["ip", "link", "set", "eth0", "up"])
            .unwrap_or_else(|e| panic!("{e}"));
        Pod { ns, host_if }
    }

    /// The pod's namespace.
    pub fn ns(&self) -> &Netns {
        &self.ns
    }

    /// The host end of the veth (in the OVS namespace).
    pub fn host_if(&self) -> &str {
        &self.host_if
    }
}

fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn check(out: std::io::Result<Output>, what: &str) {
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "{what} failed to start: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("cannot run {what}: {e}"),
    }
}

fn read_pid(pidfile: &Path) -> Option<i32> {
    fs::read_to_string(pidfile).ok()?.trim().parse().ok()
}

/// Sends SIGTERM to the pid in `pidfile`, then SIGKILL if it has not exited within 5 s.
fn stop_daemon(pidfile: &Path) {
    let Some(pid) = read_pid(pidfile) else { return };
    // SAFETY: kill with a pid we started (read from our own pid file).
    unsafe { libc::kill(pid, libc::SIGTERM) };
    // SAFETY: signal 0 only checks for existence.
    let alive = || unsafe { libc::kill(pid, 0) } == 0;
    if !wait_until(Duration::from_secs(5), || !alive()) {
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        wait_until(Duration::from_secs(2), || !alive());
    }
    let _ = fs::remove_file(pidfile);
}
