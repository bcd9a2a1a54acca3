//! podman as the container runtime in end-to-end tests: podman 4.3 (Debian, CNI backend) runs
//! containers on the networks the agent declares in its CNI conf dir, whose plugin is `sdn-cni`.
//!
//! podman is isolated per test: its own storage, run root and tmp dir, and a `CONTAINERS_CONF`
//! pointing `network_config_dir` at the agent's CNI conf dir (so the conflists podman uses are
//! the ones the agent wrote) and `cni_plugin_dirs` at the workspace binaries. The image is built
//! locally from busybox-static (no registry is reachable).

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::harness::{which, workspace_bin};
use crate::node::AgentNode;

/// An isolated podman using the agent's CNI conf dir; removes its containers and storage on drop.
#[derive(Debug)]
pub struct Podman {
    dir: PathBuf,
    containers: Vec<String>,
}

impl Podman {
    /// A podman for `node` (its storage under the node directory), with the test image
    /// `localhost/sdn-bb` (busybox) imported.
    pub fn new(node: &AgentNode) -> Podman {
        for bin in ["podman", "runc", "busybox"] {
            assert!(
                which(bin).is_some(),
                "this test needs {bin}: apt-get install podman runc catatonit busybox-static \
                 containernetworking-plugins (or run .ci/run)"
            );
        }
        let dir = node.dir().join("podman");
        fs::create_dir_all(dir.join("rootfs/bin")).unwrap();
        fs::create_dir_all(dir.join("rootfs/etc")).unwrap();
        let plugin_dir = workspace_bin("sdn-cni").parent().unwrap().to_path_buf();
        fs::write(
            dir.join("containers.conf"),
            format!(
                "[containers]\n\
                 default_ulimits = [\"nofile=20000:20000\", \"nproc=32768:32768\"]\n\
                 [network]\n\
                 network_backend = \"cni\"\n\
                 cni_plugin_dirs = [\"{}\", \"/usr/lib/cni\"]\n\
                 network_config_dir = \"{}\"\n\
                 [engine]\n\
                 runtime = \"runc\"\n\
                 cgroup_manager = \"cgroupfs\"\n\
                 events_logger = \"file\"\n",
                plugin_dir.display(),
                node.conf_file().parent().unwrap().display()
            ),
        )
        .unwrap();
        let p = Podman {
            dir,
            containers: Vec::new(),
        };
        p.build_image();
        p
    }

    /// A `podman` command with this instance's configuration and storage.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new("podman");
        c.env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .arg("--root")
            .arg(self.dir.join("storage"))
            .arg("--runroot")
            .arg(self.dir.join("runroot"))
            .arg("--tmpdir")
            .arg(self.dir.join("tmp"));
        c
    }

    /// This podman as a command line (`podman --root ... --runroot ... --tmpdir ...`) and the
    /// `CONTAINERS_CONF` it needs, for scripts that run podman themselves.
    pub fn command_line(&self) -> (String, PathBuf) {
        (
            format!(
                "podman --root {} --runroot {} --tmpdir {}",
                self.dir.join("storage").display(),
                self.dir.join("runroot").display(),
                self.dir.join("tmp").display()
            ),
            self.dir.join("containers.conf"),
        )
    }

    /// Notes a container to remove on drop.
    pub fn track(&mut self, name: &str) {
        self.containers.push(name.to_string());
    }

    /// Runs podman; its trimmed stdout, or an error with stderr.
    pub fn run(&self, args: &[&str]) -> Result<String, String> {
        let out = self
            .cmd()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("podman: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(format!(
                "podman {} failed: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            ))
        }
    }

    fn build_image(&self) {
        let rootfs = self.dir.join("rootfs");
        fs::copy(which("busybox").unwrap(), rootfs.join("bin/busybox")).unwrap();
        // A process forked by a parallel test may still hold the copy's write descriptor for a
        // moment (until it execs): running the file then fails with ETXTBSY. Retry briefly.
        let mut tries = 0;
        let list = loop {
            match Command::new(rootfs.join("bin/busybox"))
                .arg("--list")
                .output()
            {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => break other.unwrap(),
            }
        };
        for applet in String::from_utf8_lossy(&list.stdout).lines() {
            if applet != "busybox" {
                let _ = std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet));
            }
        }
        fs::write(rootfs.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
        fs::create_dir_all(rootfs.join("www")).unwrap();
        fs::write(rootfs.join("www/index.html"), "served by a pod on br0\n").unwrap();
        let mut tar = Command::new("tar")
            .arg("-C")
            .arg(&rootfs)
            .args(["-c", "."])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = self
            .cmd()
            .args([
                "import",
                "--change",
                "CMD [\"/bin/sh\"]",
                "-",
                "localhost/sdn-bb",
            ])
            .stdin(tar.stdout.take().unwrap())
            .output()
            .unwrap();
        assert!(
            tar.wait().unwrap().success(),
            "tar of the image rootfs failed"
        );
        assert!(
            out.status.success(),
            "podman import: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts a detached container on network `sdn` running `cmd`.
    pub fn start(&mut self, name: &str, cmd: &[&str]) -> String {
        self.start_on(name, "sdn", cmd)
    }

    /// Starts a detached container on `network` running `cmd`; returns its id.
    pub fn start_on(&mut self, name: &str, network: &str, cmd: &[&str]) -> String {
        let mut args = vec![
            "run",
            "-d",
            "--name",
            name,
            "--network",
            network,
            "localhost/sdn-bb",
        ];
        args.extend_from_slice(cmd);
        let id = self.run(&args).unwrap_or_else(|e| panic!("{e}"));
        self.containers.push(name.to_string());
        id
    }

    /// `podman exec`.
    pub fn exec(&self, name: &str, cmd: &[&str]) -> Result<String, String> {
        let mut args = vec!["exec", name];
        args.extend_from_slice(cmd);
        self.run(&args)
    }

    /// The container's address on network `sdn`.
    pub fn ip_of(&self, name: &str) -> String {
        self.ip_on(name, "sdn")
    }

    /// The container's address on `network`.
    pub fn ip_on(&self, name: &str, network: &str) -> String {
        self.network_field(name, network, "IPAddress")
    }

    /// The container's IPv6 address on network `sdn` (empty when it has none).
    pub fn ip6_of(&self, name: &str) -> String {
        self.network_field(name, "sdn", "GlobalIPv6Address")
    }

    /// `field` of the container's settings on `network`, as `podman inspect` shows it.
    fn network_field(&self, name: &str, network: &str, field: &str) -> String {
        self.run(&[
            "inspect",
            "-f",
            &format!("{{{{(index .NetworkSettings.Networks \"{network}\").{field}}}}}"),
            name,
        ])
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The name of the container's network namespace (under /var/run/netns).
    pub fn netns_of(&self, name: &str) -> String {
        let key = self
            .run(&["inspect", "-f", "{{.NetworkSettings.SandboxKey}}", name])
            .unwrap_or_else(|e| panic!("{e}"));
        key.rsplit('/').next().unwrap_or_default().to_string()
    }

    /// `podman rm -f`.
    pub fn rm(&mut self, name: &str) {
        self.run(&["rm", "-f", "-t", "0", name])
            .unwrap_or_else(|e| panic!("{e}"));
        self.containers.retain(|c| c != name);
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        for c in self.containers.clone() {
            let _ = self.run(&["rm", "-f", "-t", "0", &c]);
        }
        // Unmount podman's storage (overlay mounts) before the node dir is removed.
        let _ = self.run(&["system", "reset", "-f"]);
        let _ = Command::new("umount")
            .arg("-R")
            .arg(self.dir.join("storage"))
            .output();
    }
}
