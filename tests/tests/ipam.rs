//! `agent::host::ipam` against the real reference `host-local` plugin (Debian
//! containernetworking-plugins 1.1.1, `/usr/lib/cni/host-local`) sharing one lease directory:
//! each side reads and releases the other's leases, follows its `last_reserved_ip.0`, and
//! concurrent allocations from both never collide (both take the `lock` flock).
//!
//! host-local's ADD does not enter or even check `CNI_NETNS` (verified: a nonexistent path
//! works), so `/proc/self/ns/net` is passed only because the CNI environment requires one.
//! No root needed; the lease directories are private temp dirs removed on drop.

use std::collections::HashSet;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use agent::host::ipam::{IpamError, Range, Store};
use sdn_tests::harness::unique_name;

const HOST_LOCAL: &str = "/usr/lib/cni/host-local";
const NETWORK: &str = "sdn";

fn require_host_local() {
    assert!(
        Path::new(HOST_LOCAL).is_file(),
        "{HOST_LOCAL} is missing: apt-get install containernetworking-plugins"
    );
}

/// A private data dir, removed on drop.
struct DataDir(PathBuf);

impl DataDir {
    fn new() -> DataDir {
        require_host_local();
        let dir = std::env::temp_dir().join(unique_name("ipam-it-"));
        std::fs::create_dir_all(&dir).unwrap();
        DataDir(dir)
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

/// Runs host-local with `command` for `id`/`ifname`; Ok(allocated ip) for ADD (None for DEL),
/// Err(stdout+stderr) when it exits non-zero.
fn host_local(
    data: &Path,
    subnet: &str,
    gateway: &str,
    command: &str,
    id: &str,
    ifname: &str,
    args: &str,
) -> Result<Option<Ipv4Addr>, String> {
    let conf = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "type": "x",
        "ipam": {
            "type": "host-local",
            "dataDir": data,
            "ranges": [[{"subnet": subnet, "gateway": gateway}]],
        }
    });
    let mut child = Command::new(HOST_LOCAL)
        .env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", id)
        .env("CNI_NETNS", "/proc/self/ns/net")
        .env("CNI_IFNAME", ifname)
        .env("CNI_PATH", "/usr/lib/cni")
        .env("CNI_ARGS", args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(conf.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        return Err(format!(
            "host-local {command} {id}/{ifname} failed ({}): {stdout} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    if command != "ADD" {
        return Ok(None);
    }
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let addr = v["ips"][0]["address"].as_str().unwrap();
    let (addr, _) = addr.split_once('/').unwrap();
    Ok(Some(ip(addr)))
}

fn hl_add(data: &Path, subnet: &str, gw: &str, id: &str) -> Ipv4Addr {
    host_local(data, subnet, gw, "ADD", id, "eth0", "")
        .unwrap()
        .unwrap()
}

fn hl_del(data: &Path, subnet: &str, gw: &str, id: &str, ifname: &str) {
    host_local(data, subnet, gw, "DEL", id, ifname, "").unwrap();
}

fn range(subnet: &str, gw: &str) -> Range {
    Range::new(subnet.parse().unwrap(), ip(gw))
}

#[test]
fn host_local_releases_our_lease() {
    let d = DataDir::new();
    let (subnet, gw) = ("10.128.0.0/23", "10.128.0.1");
    let store = Store::new(&d.0, NETWORK).unwrap();
    let ours = store
        .allocate(&range(subnet, gw), "ours1", "eth0", None)
        .unwrap();
    assert_eq!(ours.ip, ip("10.128.0.2"));
    let file = store.dir().join("10.128.0.2");
    assert!(file.is_file());

    // Another interface of the same container must survive host-local's DEL of eth0.
    let other = store
        .allocate(&range(subnet, gw), "ours1", "eth1", None)
        .unwrap();

    hl_del(&d.0, subnet, gw, "ours1", "eth0");
    assert!(!file.exists(), "host-local DEL left our lease file");
    assert_eq!(store.leases().unwrap(), vec![other]);
    // host-local refuses what we hold, as it does its own.
    let e = host_local(&d.0, subnet, gw, "ADD", "ours1", "eth1", "").unwrap_err();
    assert!(e.contains("duplicate allocation"), "{e}");
}

/// A lease handed over in place to a shorter holder ends in spaces (`cluster::files`'
/// "In place"): the real host-local still finds it (it trims what it compares) and releases
/// it, and refuses to lease it twice. And the allocation cursor, rewritten in place, is one
/// host-local follows (it parses it untrimmed).
#[test]
fn host_local_reads_leases_handed_over_in_place() {
    let d = DataDir::new();
    let (subnet, gw) = ("10.128.0.0/23", "10.128.0.1");
    let store = Store::new(&d.0, NETWORK).unwrap();
    let r = range(subnet, gw);
    let warm = store
        .allocate(&r, "sdn-warm-sdnp0123456789", "vnid-5", None)
        .unwrap();
    store
        .transfer(
            warm.ip,
            ("sdn-warm-sdnp0123456789", "vnid-5"),
            ("c1", "eth0"),
        )
        .unwrap();
    let file = store.dir().join(warm.ip.to_string());
    let content = std::fs::read_to_string(&file).unwrap();
    assert!(
        content.starts_with("c1\r\neth0 ") && content.trim_end() == "c1\r\neth0",
        "expected a padded lease, got {content:?}"
    );
    let e = host_local(&d.0, subnet, gw, "ADD", "c1", "eth0", "").unwrap_err();
    assert!(e.contains("duplicate allocation"), "{e}");
    // The cursor: rewritten in place from 10.128.0.2 to 10.128.0.3 (as long), and host-local's
    // next address follows it.
    let next = store.allocate(&r, "c2", "eth0", None).unwrap();
    assert_eq!(next.ip, ip("10.128.0.3"));
    assert_eq!(hl_add(&d.0, subnet, gw, "theirs"), ip("10.128.0.4"));
    hl_del(&d.0, subnet, gw, "c1", "eth0");
    assert!(!file.exists(), "host-local DEL left the padded lease");
    assert_eq!(
        store
            .leases()
            .unwrap()
            .iter()
            .map(|l| l.ip)
            .collect::<Vec<_>>(),
        vec![ip("10.128.0.3"), ip("10.128.0.4")]
    );
}

#[test]
fn we_read_follow_and_release_host_local_leases() {
    let d = DataDir::new();
    let (subnet, gw) = ("10.128.0.0/23", "10.128.0.1");
    let r = range(subnet, gw);
    let store = Store::new(&d.0, NETWORK).unwrap();

    assert_eq!(hl_add(&d.0, subnet, gw, "hl1"), ip("10.128.0.2"));
    assert_eq!(hl_add(&d.0, subnet, gw, "hl2"), ip("10.128.0.3"));
    hl_del(&d.0, subnet, gw, "hl1", "eth0");

    let leases = store.leases().unwrap();
    assert_eq!(leases.len(), 1, "{leases:?}");
    assert_eq!(leases[0].ip, ip("10.128.0.3"));
    assert_eq!(leases[0].container_id, "hl2");
    assert_eq!(leases[0].ifname, "eth0");
    assert_eq!(
        store.lease_of("hl2", "eth0").unwrap(),
        Some(leases[0].clone())
    );

    // .2 is free but host-local's last_reserved_ip.0 says .3: round robin continues at .4.
    let ours = store.allocate(&r, "ours1", "eth0", None).unwrap();
    assert_eq!(ours.ip, ip("10.128.0.4"));
    // And host-local continues after ours.
    assert_eq!(hl_add(&d.0, subnet, gw, "hl3"), ip("10.128.0.5"));

    // Our release of a host-local lease.
    assert_eq!(
        store.release("hl2", "eth0").unwrap(),
        vec![ip("10.128.0.3")]
    );
    assert!(!store.dir().join("10.128.0.3").exists());
    assert_eq!(
        store.release("hl2", "eth0").unwrap(),
        Vec::<Ipv4Addr>::new()
    );
    // host-local can now take it by request; ours it cannot.
    let got = host_local(&d.0, subnet, gw, "ADD", "hl4", "eth0", "IP=10.128.0.3").unwrap();
    assert_eq!(got, Some(ip("10.128.0.3")));
    let e = host_local(&d.0, subnet, gw, "ADD", "hl5", "eth0", "IP=10.128.0.4").unwrap_err();
    assert!(e.contains("not available"), "{e}");
    // And we refuse its lease by request, naming the holder.
    let e = store
        .allocate(&r, "ours2", "eth0", Some(ip("10.128.0.5")))
        .unwrap_err();
    assert!(
        matches!(&e, IpamError::InUse { container_id, .. } if container_id == "hl3"),
        "{e}"
    );
}

#[test]
fn interleaved_and_concurrent_allocations_never_collide() {
    let d = DataDir::new();
    let (subnet, gw) = ("10.128.4.0/26", "10.128.4.1"); // 61 leasable
    let r = range(subnet, gw);
    let store = Store::new(&d.0, NETWORK).unwrap();

    // Strictly alternating first: each side continues where the other stopped.
    let mut seq = Vec::new();
    for i in 0..6 {
        seq.push(hl_add(&d.0, subnet, gw, &format!("hl-a{i}")));
        seq.push(
            store
                .allocate(&r, &format!("us-a{i}"), "eth0", None)
                .unwrap()
                .ip,
        );
    }
    let want: Vec<Ipv4Addr> = (2..14).map(|n| Ipv4Addr::new(10, 128, 4, n)).collect();
    assert_eq!(seq, want);

    // Then both at once until the range is full: 49 left, 40 attempts per side.
    let data = d.0.clone();
    let hl = std::thread::spawn(move || {
        let mut got = Vec::new();
        for i in 0..40 {
            match host_local(&data, subnet, gw, "ADD", &format!("hl-b{i}"), "eth0", "") {
                Ok(ip) => got.push(ip.unwrap()),
                Err(e) if e.contains("no IP addresses available") => {}
                Err(e) => panic!("{e}"),
            }
        }
        got
    });
    let mut ours = Vec::new();
    for i in 0..40 {
        match store.allocate(&r, &format!("us-b{i}"), "eth0", None) {
            Ok(l) => ours.push(l.ip),
            Err(IpamError::Exhausted { .. }) => {}
            Err(e) => panic!("{e}"),
        }
        // A host-local exec takes a few ms; pace ours so both run through the whole window.
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let theirs = hl.join().unwrap();
    assert!(
        !theirs.is_empty() && !ours.is_empty(),
        "both sides allocated"
    );
    let all: Vec<Ipv4Addr> = seq.iter().chain(&theirs).chain(&ours).copied().collect();
    let distinct: HashSet<Ipv4Addr> = all.iter().copied().collect();
    assert_eq!(all.len(), distinct.len(), "an address was handed out twice");
    assert_eq!(all.len(), 61, "the range fills exactly");

    // Every lease file names its allocator.
    let leases = store.leases().unwrap();
    assert_eq!(leases.len(), 61);
    for l in &leases {
        let who = if theirs.contains(&l.ip) {
            "hl-b"
        } else if ours.contains(&l.ip) {
            "us-b"
        } else if l.container_id.starts_with("hl-a") {
            "hl-a"
        } else {
            "us-a"
        };
        assert!(l.container_id.starts_with(who), "{l:?} should be {who}*");
        assert_eq!(l.ifname, "eth0");
    }
}

#[test]
fn exhaustion_is_a_clear_error_on_both_sides() {
    let d = DataDir::new();
    let (subnet, gw) = ("10.128.8.0/30", "10.128.8.1"); // one leasable address: .2
    let r = range(subnet, gw);
    let store = Store::new(&d.0, NETWORK).unwrap();

    assert_eq!(hl_add(&d.0, subnet, gw, "hl1"), ip("10.128.8.2"));
    let e = store.allocate(&r, "ours1", "eth0", None).unwrap_err();
    assert!(matches!(e, IpamError::Exhausted { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("range 10.128.8.1-10.128.8.2")
            && msg.contains("10.128.8.0/30")
            && msg.contains(&store.dir().display().to_string()),
        "{msg}"
    );

    hl_del(&d.0, subnet, gw, "hl1", "eth0");
    assert_eq!(
        store.allocate(&r, "ours1", "eth0", None).unwrap().ip,
        ip("10.128.8.2")
    );
    let e = host_local(&d.0, subnet, gw, "ADD", "hl2", "eth0", "").unwrap_err();
    assert!(e.contains("no IP addresses available"), "{e}");
}
