//! A real container runtime as the client: podman 4.3 (Debian, CNI backend) runs containers on
//! the network the agent declares in its CNI conf dir, whose plugin is `sdn-cni`.
//!
//! podman is isolated per test: its own storage, run root and tmp dir, and a `CONTAINERS_CONF`
//! pointing `network_config_dir` at the agent's CNI conf dir (so the conflist podman uses is the
//! one the agent wrote when it became ready) and `cni_plugin_dirs` at the workspace binaries.
//! The image is built locally from busybox-static (no registry is reachable).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use sdn_tests::harness::{wait_until, which};
use sdn_tests::node::{workspace_bin, AgentNode, NodeOptions};

struct Podman {
    dir: PathBuf,
    containers: Vec<String>,
}

impl Podman {
    fn new(node: &AgentNode) -> Podman {
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

    fn cmd(&self) -> Command {
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

    fn run(&self, args: &[&str]) -> Result<String, String> {
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
        let list = Command::new(rootfs.join("bin/busybox"))
            .arg("--list")
            .output()
            .unwrap();
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
    fn start(&mut self, name: &str, cmd: &[&str]) -> String {
        let mut args = vec![
            "run",
            "-d",
            "--name",
            name,
            "--network",
            "sdn",
            "localhost/sdn-bb",
        ];
        args.extend_from_slice(cmd);
        let id = self.run(&args).unwrap_or_else(|e| panic!("{e}"));
        self.containers.push(name.to_string());
        id
    }

    fn exec(&self, name: &str, cmd: &[&str]) -> Result<String, String> {
        let mut args = vec!["exec", name];
        args.extend_from_slice(cmd);
        self.run(&args)
    }

    fn ip_of(&self, name: &str) -> String {
        self.run(&[
            "inspect",
            "-f",
            "{{(index .NetworkSettings.Networks \"sdn\").IPAddress}}",
            name,
        ])
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn rm(&mut self, name: &str) {
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

fn in_subnet(ip: &str) -> bool {
    let ip: std::net::Ipv4Addr = ip.parse().unwrap_or_else(|_| panic!("bad ip {ip:?}"));
    let o = ip.octets();
    o[0] == 10 && o[1] == 128 && o[2] <= 1
}

#[test]
fn podman_containers_on_the_sdn_network() {
    let node = AgentNode::start(NodeOptions::default());
    let mut podman = Podman::new(&node);

    podman.start("web", &["httpd", "-f", "-p", "8080", "-h", "/www"]);
    podman.start("client", &["sleep", "300"]);
    let (web, client) = (podman.ip_of("web"), podman.ip_of("client"));
    assert!(in_subnet(&web) && in_subnet(&client), "{web} {client}");
    assert_ne!(web, client);

    // They reach each other and the gateway; TCP works between them.
    podman
        .exec("client", &["ping", "-c", "1", "-W", "3", &web])
        .unwrap_or_else(|e| panic!("client -> web: {e}"));
    podman
        .exec("web", &["ping", "-c", "1", "-W", "3", &client])
        .unwrap_or_else(|e| panic!("web -> client: {e}"));
    podman
        .exec("client", &["ping", "-c", "1", "-W", "3", "10.128.0.1"])
        .unwrap_or_else(|e| panic!("client -> gateway: {e}"));
    // HTTP over TCP with nc (the wget of Debian's static busybox crashes).
    let request = format!("printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {web} 8080");
    let page = podman
        .exec("client", &["sh", "-c", &request])
        .unwrap_or_else(|e| panic!("HTTP client -> web: {e}"));
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.ends_with("served by a pod on br0"), "{page}");

    // The agent sees them as pods: ports with the container ids, leases, flows.
    assert_eq!(node.pod_ports().len(), 2);
    let mut leases = node.leases();
    leases.sort();
    let mut want = vec![web.clone(), client.clone()];
    want.sort();
    assert_eq!(leases, want);
    assert_eq!(node.pod_flows().len(), 10);

    // podman rm -f releases everything.
    podman.rm("web");
    podman.rm("client");
    assert!(
        wait_until(Duration::from_secs(5), || node.pod_ports().is_empty()),
        "ports left: {:?}",
        node.pod_ports()
    );
    node.assert_no_pod_leftovers();
}

#[allow(dead_code)]
fn _assert_paths(_: &Path) {}
