//! Unit tests of the lease store: ranges, allocation, the walk, the lock, the on-disk format, junk and races.

use super::*;
use std::collections::HashSet;
use std::fs;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A temporary data dir removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ipam-unit-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn range(subnet: &str, gw: &str) -> Range {
    Range::new(subnet.parse().unwrap(), ip(gw))
}

fn store(t: &TempDir) -> Store {
    Store::new(&t.0, "sdn").unwrap()
}

fn alloc(s: &Store, r: &Range, id: &str) -> Result<Ipv4Addr, IpamError> {
    s.allocate(r, id, "eth0", None).map(|l| l.ip)
}

fn files(s: &Store) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(s.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn new_creates_dir_and_lock_and_validates_name() {
    let t = TempDir::new();
    let s = Store::new(&t.0, "net1").unwrap();
    assert_eq!(s.dir(), t.0.join("net1"));
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(s.dir()).unwrap().permissions().mode() & 0o7777;
    // 0755 minus the umask: never group- or world-writable, always usable by the owner.
    assert_eq!(mode & !0o755, 0, "dir mode {mode:o}");
    assert_eq!(mode & 0o700, 0o700, "dir mode {mode:o}");
    assert!(s.dir().join("lock").is_file());
    for bad in ["", ".", "..", "a/b", "a\0b"] {
        let e = Store::new(&t.0, bad).unwrap_err();
        assert!(
            matches!(e, IpamError::InvalidNetworkName { .. }),
            "{bad:?}: {e}"
        );
    }
}

#[test]
fn allocates_in_order_skipping_network_gateway_broadcast_then_exhausts_a_29() {
    let t = TempDir::new();
    let s = store(&t);
    let r = range("10.0.0.0/29", "10.0.0.1");
    let got: Vec<Ipv4Addr> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|id| alloc(&s, &r, id).unwrap())
        .collect();
    assert_eq!(
        got,
        ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"].map(ip)
    );
    let e = alloc(&s, &r, "f").unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, IpamError::Exhausted { leasable: 5, .. }), "{e}");
    assert!(msg.contains("10.0.0.1-10.0.0.6"), "{msg}");
    assert!(msg.contains("10.0.0.0/29"), "{msg}");
    assert!(msg.contains(&s.dir().display().to_string()), "{msg}");
    // Exact host-local bytes.
    assert_eq!(fs::read(s.dir().join("10.0.0.2")).unwrap(), b"a\r\neth0");
    assert_eq!(
        fs::read(s.dir().join("last_reserved_ip.0")).unwrap(),
        b"10.0.0.6"
    );
    assert!(!s.dir().join("10.0.0.7").exists());
}

#[test]
fn a_30_has_one_address() {
    let t = TempDir::new();
    let s = store(&t);
    let r = range("10.0.0.4/30", "10.0.0.5");
    assert_eq!(alloc(&s, &r, "a").unwrap(), ip("10.0.0.6"));
    let e = alloc(&s, &r, "b").unwrap_err();
    assert!(matches!(e, IpamError::Exhausted { leasable: 1, .. }), "{e}");
    assert!(e.to_string().contains("10.0.0.5-10.0.0.6"), "{e}");
    // Releasing makes it available again (wrapping round past last_reserved_ip).
    assert_eq!(s.release("a", "eth0").unwrap(), vec![ip("10.0.0.6")]);
    assert_eq!(alloc(&s, &r, "b").unwrap(), ip("10.0.0.6"));
}

#[test]
fn round_robin_does_not_reuse_a_released_address_first() {
    let t = TempDir::new();
    let s = store(&t);
    let r = range("10.0.0.0/24", "10.0.0.1");
    assert_eq!(alloc(&s, &r, "a").unwrap(), ip("10.0.0.2"));
    s.release("a", "eth0").unwrap();
    assert_eq!(alloc(&s, &r, "b").unwrap(), ip("10.0.0.3"));
}

#[test]
fn wraps_around_after_the_range_end() {
    let t = TempDir::new();
    let s = store(&t);
    let r = range("10.0.0.0/29", "10.0.0.1");
    for id in ["a", "b", "c", "d", "e"] {
        alloc(&s, &r, id).unwrap();
    }
    s.release("b", "eth0").unwrap(); // .3
    s.release("d", "eth0").unwrap(); // .5
                                     // last reserved is .6 (the end): wrap to the start, .2 is taken, .3 is free.
    assert_eq!(alloc(&s, &r, "f").unwrap(), ip("10.0.0.3"));
    assert_eq!(alloc(&s, &r, "g").unwrap(), ip("10.0.0.5"));
    // From the middle: last reserved .5, .6 taken, wrap, .2 .3 .4 taken, .5 taken: full.
    assert!(matches!(
        alloc(&s, &r, "h"),
        Err(IpamError::Exhausted { .. })
    ));
    s.release("a", "eth0").unwrap(); // .2, before last reserved .5
    assert_eq!(alloc(&s, &r, "h").unwrap(), ip("10.0.0.2"));
}

#[test]
fn follows_last_reserved_ip_written_by_someone_else_and_ignores_a_bad_one() {
    let t = TempDir::new();
    let s = store(&t);
    let r = range("10.0.0.0/24", "10.0.0.1");
    fs::write(s.dir().join("last_reserved_ip.0"), "10.0.0.100").unwrap();
    assert_eq!(alloc(&s, &r, "a").unwrap(), ip("10.0.0.101"));
    fs::write(s.dir().join("last_reserved_ip.0"), "garbage").unwrap();
    assert_eq!(alloc(&s, &r, "b").unwrap(), ip("10.0.0.2"));
    fs::write(s.dir().join("last_reserved_ip.0"), "192.168.0.9").unwrap();
    assert_eq!(alloc(&s, &r, "c").unwrap(), ip("10.0.0.3"));
    fs::write(s.dir().join("last_reserved_ip.0"), "10.0.0.254\n").unwrap();
    assert_eq!(alloc(&s, &r, "d").unwrap(), ip("10.0.0.4"));
}

#[test]
fn skips_addresses_leased_by_others_and_a_gateway_in_the_middle() {
    let t = TempDir::new();
    let s = store(&t);
    let r = range("10.0.0.0/29", "10.0.0.4");
    fs::write(s.dir().join("10.0.0.3"), "other\r\neth0").unwrap();
    let got: Vec<Ipv4Addr> = ["a", "b", "c"]
        .iter()
        .map(|id| alloc(&s, &r, id).unwrap())
        .collect();
    // .1 is leasable here (the gateway is .4); .3 is someone else's.
    assert_eq!(got, ["10.0.0.1", "10.0.0.2", "10.0.0.5"].map(ip));
    assert_eq!(alloc(&s, &r, "d").unwrap(), ip("10.0.0.6"));
    assert!(matches!(
        alloc(&s, &r, "e"),
        Err(IpamError::Exhausted { leasable: 5, .. })
    ));
}

#[test]
fn explicit_bounds_are_honoured_and_never_yield_network_or_broadcast() {
    let t = TempDir::new();
    let s = store(&t);
    let mut r = range("10.0.0.0/29", "10.0.0.1");
    r.start = Some(ip("10.0.0.5"));
    r.end = Some(ip("10.0.0.7"));
    assert_eq!(alloc(&s, &r, "a").unwrap(), ip("10.0.0.5"));
    assert_eq!(alloc(&s, &r, "b").unwrap(), ip("10.0.0.6"));
    assert!(matches!(
        alloc(&s, &r, "c"),
        Err(IpamError::Exhausted { leasable: 2, .. })
    ));
    let t2 = TempDir::new();
    let s2 = store(&t2);
    let mut r2 = range("10.0.0.0/29", "10.0.0.6");
    r2.start = Some(ip("10.0.0.0"));
    assert_eq!(alloc(&s2, &r2, "a").unwrap(), ip("10.0.0.1"));
}

#[test]
fn allocate_many_leases_distinct_addresses_and_stops_at_the_end_of_the_range() {
    let t = TempDir::new();
    let s = store(&t);
    let r = range("10.0.0.0/29", "10.0.0.1");
    alloc(&s, &r, "a").unwrap();
    let ids: Vec<String> = (0..3).map(|i| format!("sdn-warm-p{i}")).collect();
    let got = s.allocate_many(&r, &ids, "eth0").unwrap();
    let ips: std::collections::BTreeSet<Ipv4Addr> = got.iter().map(|l| l.ip).collect();
    assert_eq!(ips.len(), 3, "{got:?}");
    assert!(!ips.contains(&ip("10.0.0.1")) && !ips.contains(&ip("10.0.0.2")));
    // 10.0.0.2-6 leasable, four taken: one left for five more ids.
    let more: Vec<String> = (4..9).map(|i| format!("sdn-warm-p{i}")).collect();
    assert_eq!(s.allocate_many(&r, &more, "eth0").unwrap().len(), 1);
    assert!(matches!(
        s.allocate_many(&r, &more, "eth0"),
        Err(IpamError::Exhausted { .. })
    ));
    assert_eq!(s.leases().unwrap().len(), 5);
}

#[test]
fn transfer_hands_a_lease_over_in_place_and_only_from_its_holder() {
    let t = TempDir::new();
    let s = store(&t);
    let r = range("10.0.0.0/29", "10.0.0.1");
    let l = s.allocate(&r, "sdn-warm-sdnp01", "eth0", None).unwrap();
    let moved = s
        .transfer(l.ip, ("sdn-warm-sdnp01", "eth0"), ("pod-a", "net1"))
        .unwrap();
    assert_eq!(
        (moved.container_id.as_str(), moved.ifname.as_str()),
        ("pod-a", "net1")
    );
    assert_eq!(
        s.lease_of("pod-a", "net1").unwrap().map(|x| x.ip),
        Some(l.ip)
    );
    assert!(s.lease_of("sdn-warm-sdnp01", "eth0").unwrap().is_none());
    assert_eq!(
        s.leases().unwrap().len(),
        1,
        "no temporary file left as a lease"
    );
    // Not the holder: refused, naming the holder, lease untouched.
    let e = s
        .transfer(l.ip, ("sdn-warm-sdnp01", "eth0"), ("pod-b", "eth0"))
        .unwrap_err();
    assert!(
        matches!(&e, IpamError::InUse { container_id, .. } if container_id == "pod-a"),
        "{e}"
    );
    assert!(
        s.transfer(ip("10.0.0.5"), ("x", "eth0"), ("y", "eth0"))
            .is_err(),
        "not leased"
    );
    assert_eq!(
        s.lease_of("pod-a", "net1").unwrap().map(|x| x.ip),
        Some(l.ip)
    );
    // A bad new holder is refused before anything is read.
    assert!(matches!(
        s.transfer(l.ip, ("pod-a", "net1"), ("", "eth0")),
        Err(IpamError::InvalidContainerId { .. })
    ));
    // Handed over in place, the same file (no new block for the filesystem to allocate, no
    // old one to free): to a longer holder, and to a shorter one (padded with spaces, which
    // host-local trims before it compares, as the store does).
    use std::os::unix::fs::MetadataExt;
    let path = t.0.join("sdn").join("10.0.0.2");
    let ino = std::fs::metadata(&path).unwrap().ino();
    let long = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    s.transfer(l.ip, ("pod-a", "net1"), (long, "eth0")).unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        format!("{long}\r\neth0")
    );
    s.transfer(l.ip, (long, "eth0"), ("c1", "eth0")).unwrap();
    let content = std::fs::read_to_string(&path).unwrap();
    assert_eq!(content.trim(), "c1\r\neth0", "what host-local compares");
    assert_eq!(content.len(), long.len() + 6, "padded to the old length");
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), ino, "not in place");
    assert_eq!(s.lease_of("c1", "eth0").unwrap().map(|x| x.ip), Some(l.ip));
    assert_eq!(s.release("c1", "eth0").unwrap(), vec![IpAddr::V4(l.ip)]);
}

#[test]
fn invalid_ranges_are_refused() {
    let t = TempDir::new();
    let s = store(&t);
    let cases = [
        (range("10.0.0.0/31", "10.0.0.0"), "/31"),
        (range("10.0.0.0/32", "10.0.0.0"), "/32"),
        (range("10.0.0.0/24", "10.0.1.1"), "gateway 10.0.1.1"),
        (
            Range {
                start: Some(ip("10.0.0.9")),
                end: Some(ip("10.0.0.5")),
                ..range("10.0.0.0/24", "10.0.0.1")
            },
            "after range end",
        ),
        (
            Range {
                end: Some(ip("10.0.1.5")),
                ..range("10.0.0.0/24", "10.0.0.1")
            },
            "end 10.0.1.5",
        ),
    ];
    for (r, needle) in cases {
        let e = s.allocate(&r, "a", "eth0", None).unwrap_err();
        assert!(matches!(e, IpamError::InvalidRange { .. }), "{e}");
        assert!(e.to_string().contains(needle), "{e} lacks {needle}");
    }
    assert_eq!(files(&s), ["lock"]);
}

#[test]
fn requested_ip_is_honoured_when_free_and_valid() {
    let t = TempDir::new();
    let s = store(&t);
    let r = range("10.0.0.0/24", "10.0.0.1");
    let l = s.allocate(&r, "a", "eth0", Some(ip("10.0.0.50"))).unwrap();
    assert_eq!(l.ip, ip("10.0.0.50"));
    assert_eq!(
        fs::read(s.dir().join("last_reserved_ip.0")).unwrap(),
        b"10.0.0.50"
    );
    // Dynamic allocation continues after it, as host-local does.
    assert_eq!(alloc(&s, &r, "b").unwrap(), ip("10.0.0.51"));
}

#[test]
fn requested_ip_errors_are_precise() {
    let t = TempDir::new();
    let s = store(&t);
    let mut r = range("10.0.0.0/24", "10.0.0.1");
    r.end = Some(ip("10.0.0.100"));
    s.allocate(&r, "holder", "net1", Some(ip("10.0.0.7")))
        .unwrap();
    let req = |ipx: &str| s.allocate(&r, "a", "eth0", Some(ip(ipx))).unwrap_err();

    let e = req("10.0.0.7");
    assert!(matches!(e, IpamError::InUse { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("in use by container \"holder\"") && msg.contains("net1"),
        "{msg}"
    );
    let e = req("10.0.1.7");
    assert_eq!(
        e.to_string(),
        "requested ip 10.0.1.7 is not in subnet 10.0.0.0/24"
    );
    let e = req("10.0.0.1");
    assert!(e.to_string().contains("is the gateway of subnet"), "{e}");
    let e = req("10.0.0.0");
    assert!(e.to_string().contains("network address"), "{e}");
    let e = req("10.0.0.255");
    assert!(e.to_string().contains("broadcast address"), "{e}");
    let e = req("10.0.0.200");
    assert!(matches!(e, IpamError::OutsideRange { .. }), "{e}");
    assert!(e.to_string().contains("10.0.0.1-10.0.0.100"), "{e}");
    // Nothing was written by the failures.
    assert_eq!(files(&s), ["10.0.0.7", "last_reserved_ip.0", "lock"]);
}

#[test]
fn allocation_is_idempotent_per_attachment() {
    let t = TempDir::new();
    let s = store(&t);
    let r = range("10.0.0.0/24", "10.0.0.1");
    let a = s.allocate(&r, "a", "eth0", None).unwrap();
    assert_eq!(s.allocate(&r, "a", "eth0", None).unwrap(), a);
    // Retried with the address it got: same lease.
    assert_eq!(s.allocate(&r, "a", "eth0", Some(a.ip)).unwrap(), a);
    // Another address requested while holding one: refused.
    let e = s
        .allocate(&r, "a", "eth0", Some(ip("10.0.0.9")))
        .unwrap_err();
    assert!(matches!(e, IpamError::AlreadyAllocated { .. }), "{e}");
    assert!(e.to_string().contains("already holds 10.0.0.2"), "{e}");
    // Another interface of the same container is another attachment.
    let b = s.allocate(&r, "a", "eth1", None).unwrap();
    assert_ne!(a.ip, b.ip);
    assert_eq!(s.leases().unwrap(), vec![a, b]);
}

#[test]
fn a_lease_outside_the_range_does_not_count_as_held() {
    let t = TempDir::new();
    let s = store(&t);
    let r = range("10.0.0.0/24", "10.0.0.1");
    fs::write(s.dir().join("10.9.9.9"), "a\r\neth0").unwrap();
    assert_eq!(alloc(&s, &r, "a").unwrap(), ip("10.0.0.2"));
    // Release frees both, as host-local's does.
    let mut got = s.release("a", "eth0").unwrap();
    got.sort();
    assert_eq!(got, [ip("10.0.0.2"), ip("10.9.9.9")]);
}

#[test]
fn release_is_idempotent_and_matches_like_host_local() {
    let t = TempDir::new();
    let s = store(&t);
    let r = range("10.0.0.0/24", "10.0.0.1");
    let a = s.allocate(&r, "a", "eth0", None).unwrap();
    let a1 = s.allocate(&r, "a", "eth1", None).unwrap();
    assert_eq!(s.release("a", "eth0").unwrap(), vec![a.ip]);
    assert!(!s.dir().join(a.ip.to_string()).exists());
    assert_eq!(s.release("a", "eth0").unwrap(), Vec::<Ipv4Addr>::new());
    assert_eq!(s.release("nobody", "eth0").unwrap(), Vec::<Ipv4Addr>::new());
    assert_eq!(s.leases().unwrap(), vec![a1.clone()]);

    // Legacy id-only files: released only when no exact match exists.
    fs::write(s.dir().join("10.0.0.20"), "old\n").unwrap();
    fs::write(s.dir().join("10.0.0.21"), "old\r\neth3").unwrap();
    assert_eq!(s.release("old", "eth3").unwrap(), vec![ip("10.0.0.21")]);
    assert_eq!(s.release("old", "eth3").unwrap(), vec![ip("10.0.0.20")]);
    assert_eq!(s.leases().unwrap(), vec![a1]);
}

#[test]
fn release_ip_and_retain() {
    let t = TempDir::new();
    let s = store(&t);
    let r = range("10.0.0.0/24", "10.0.0.1");
    for id in ["a", "b", "c"] {
        alloc(&s, &r, id).unwrap();
    }
    assert!(s.release_ip(ip("10.0.0.3")).unwrap());
    assert!(!s.release_ip(ip("10.0.0.3")).unwrap());
    let gone = s.retain(|l| l.container_id == "a").unwrap();
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].container_id, "c");
    let left = s.leases().unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].container_id, "a");
}

#[test]
fn leases_parse_files_and_skip_lock_last_reserved_ipv6_and_junk() {
    let t = TempDir::new();
    let s = store(&t);
    let d = s.dir();
    fs::write(d.join("10.0.0.9"), "x\r\neth0").unwrap();
    fs::write(d.join("10.0.0.3"), "  legacy \n").unwrap();
    fs::write(d.join("10.0.0.4"), "").unwrap();
    fs::write(d.join("fd00::3"), "v6\r\neth0").unwrap();
    fs::write(d.join("last_reserved_ip.0"), "10.0.0.9").unwrap();
    fs::write(d.join("last_reserved_ip.1"), "fd00::3").unwrap();
    fs::write(d.join("junk"), "x\r\neth0").unwrap();
    fs::create_dir(d.join("10.0.0.77")).unwrap();
    let leases = s.leases().unwrap();
    let want = vec![
        Lease {
            ip: ip("10.0.0.3"),
            container_id: "legacy".into(),
            ifname: String::new(),
        },
        Lease {
            ip: ip("10.0.0.4"),
            container_id: String::new(),
            ifname: String::new(),
        },
        Lease {
            ip: ip("10.0.0.9"),
            container_id: "x".into(),
            ifname: "eth0".into(),
        },
    ];
    assert_eq!(leases, want);
    assert_eq!(s.lease_of("x", "eth0").unwrap(), Some(want[2].clone()));
    assert_eq!(s.lease_of("x", "eth1").unwrap(), None);
    assert_eq!(s.lease_of("legacy", "eth7").unwrap(), Some(want[0].clone()));
    // The empty (damaged) lease blocks its address.
    let r = range("10.0.0.0/24", "10.0.0.1");
    let got: Vec<Ipv4Addr> = ["p", "q", "r"]
        .iter()
        .map(|id| alloc(&s, &r, id).unwrap())
        .collect();
    assert_eq!(got, ["10.0.0.10", "10.0.0.11", "10.0.0.12"].map(ip));
}

#[test]
fn a_legacy_lease_counts_as_held() {
    let t = TempDir::new();
    let s = store(&t);
    let r = range("10.0.0.0/24", "10.0.0.1");
    fs::write(s.dir().join("10.0.0.30"), "old").unwrap();
    let l = s.allocate(&r, "old", "eth0", None).unwrap();
    assert_eq!(l.ip, ip("10.0.0.30"));
    assert_eq!(l.ifname, "");
}

#[test]
fn bad_ids_and_ifnames_are_refused_before_any_write() {
    let t = TempDir::new();
    let s = store(&t);
    let r = range("10.0.0.0/24", "10.0.0.1");
    for id in ["", "a b", "a\r\nb", " a"] {
        let e = s.allocate(&r, id, "eth0", None).unwrap_err();
        assert!(matches!(e, IpamError::InvalidContainerId { .. }), "{e}");
        assert!(s.release(id, "eth0").is_err());
    }
    for ifname in ["", "eth 0", "eth0\n"] {
        let e = s.allocate(&r, "a", ifname, None).unwrap_err();
        assert!(matches!(e, IpamError::InvalidIfname { .. }), "{e}");
    }
    assert_eq!(files(&s), ["lock"]);
}

#[test]
fn lock_wait_is_bounded() {
    let t = TempDir::new();
    let s = store(&t).with_lock_timeout(Duration::from_millis(200));
    let holder = File::open(s.dir().join("lock")).unwrap();
    holder.lock().unwrap();
    let started = Instant::now();
    let e = s.leases().unwrap_err();
    assert!(matches!(e, IpamError::LockTimeout { .. }), "{e}");
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(holder);
    assert_eq!(s.leases().unwrap(), Vec::<Lease>::new());
}

/// Threads of one process queue on the in-process lock: a waiter is bounded by the lock
/// timeout like a waiter on another process's flock, takes the lock when the holder lets go,
/// and a failed wait leaves nothing held.
#[test]
fn in_process_waiters_are_bounded_and_served_in_turn() {
    let t = TempDir::new();
    let s = store(&t).with_lock_timeout(Duration::from_millis(200));
    let held = s.lock().unwrap();
    let other = s.clone();
    let started = Instant::now();
    let e = std::thread::spawn(move || other.leases().unwrap_err())
        .join()
        .unwrap();
    assert!(matches!(e, IpamError::LockTimeout { .. }), "{e}");
    assert!(started.elapsed() >= Duration::from_millis(200));
    let waiter = {
        let s = s.clone().with_lock_timeout(Duration::from_secs(30));
        std::thread::spawn(move || s.leases())
    };
    std::thread::sleep(Duration::from_millis(50));
    drop(held);
    assert_eq!(waiter.join().unwrap().unwrap(), Vec::<Lease>::new());
    assert_eq!(s.leases().unwrap(), Vec::<Lease>::new());
}

#[test]
fn lock_file_is_recreated_if_deleted() {
    let t = TempDir::new();
    let s = store(&t);
    fs::remove_file(s.dir().join("lock")).unwrap();
    let r = range("10.0.0.0/24", "10.0.0.1");
    alloc(&s, &r, "a").unwrap();
    assert!(s.dir().join("lock").is_file());
}

#[test]
fn concurrent_allocations_get_distinct_addresses_until_exhausted() {
    let t = TempDir::new();
    let s = Arc::new(store(&t));
    let r = range("10.0.0.0/25", "10.0.0.1"); // 125 leasable
    let threads: Vec<_> = (0..8)
        .map(|n| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                // Separate Store values too: the flock must be what serialises them.
                let mine = Store::new(s.dir().parent().unwrap(), "sdn").unwrap();
                let mut got = Vec::new();
                for i in 0..20 {
                    match mine.allocate(&r, &format!("c{n}-{i}"), "eth0", None) {
                        Ok(l) => got.push(l.ip),
                        Err(IpamError::Exhausted { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                got
            })
        })
        .collect();
    let all: Vec<Ipv4Addr> = threads
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let distinct: HashSet<Ipv4Addr> = all.iter().copied().collect();
    assert_eq!(all.len(), 125, "160 attempts for 125 addresses");
    assert_eq!(distinct.len(), 125);
    assert!(!distinct.contains(&ip("10.0.0.1")));
    assert!(!distinct.contains(&ip("10.0.0.127")));
    let leases = s.leases().unwrap();
    assert_eq!(leases.len(), 125);
    for l in leases {
        assert!(
            l.container_id.starts_with('c') && l.ifname == "eth0",
            "{l:?}"
        );
    }
}

fn range6(subnet: &str, gw: &str) -> Range<std::net::Ipv6Addr> {
    Range::new(subnet.parse().unwrap(), gw.parse().unwrap())
}

#[test]
fn dual_stack_leases_one_address_per_family_as_host_local_range_sets_0_and_1() {
    let t = TempDir::new();
    let s = store(&t);
    let r4 = range("10.128.0.0/23", "10.128.0.1");
    let r6 = range6("fd01:0:0:5::/64", "fd01:0:0:5::1");
    let a4 = s.allocate(&r4, "c1", "eth0", None).unwrap();
    let a6 = s.allocate(&r6, "c1", "eth0", None).unwrap();
    assert_eq!(a4.ip, ip("10.128.0.2"));
    // The network (subnet-router anycast) and gateway addresses are skipped in IPv6 too.
    assert_eq!(a6.ip.to_string(), "fd01:0:0:5::2");
    // Idempotent per family.
    assert_eq!(s.allocate(&r6, "c1", "eth0", None).unwrap(), a6);
    let b6 = s.allocate(&r6, "c2", "eth0", None).unwrap();
    assert_eq!(b6.ip.to_string(), "fd01:0:0:5::3");
    // host-local's files: one per address, each family's cursor in its own range set.
    assert_eq!(
        files(&s),
        [
            "10.128.0.2",
            "fd01:0:0:5::2",
            "fd01:0:0:5::3",
            "last_reserved_ip.0",
            "last_reserved_ip.1",
            "lock"
        ]
    );
    assert_eq!(
        fs::read_to_string(s.dir().join("last_reserved_ip.1")).unwrap(),
        "fd01:0:0:5::3"
    );
    assert_eq!(
        fs::read_to_string(s.dir().join("fd01:0:0:5::2")).unwrap(),
        "c1\r\neth0"
    );
    // IPv4 views see IPv4 only.
    assert_eq!(s.leases().unwrap(), vec![a4]);
    assert_eq!(s.leases_of_family::<std::net::IpAddr>().unwrap().len(), 3);
    // Releasing the attachment releases both families, as host-local does.
    let mut gone = s.release("c1", "eth0").unwrap();
    gone.sort();
    assert_eq!(
        gone,
        vec![
            std::net::IpAddr::from(ip("10.128.0.2")),
            "fd01:0:0:5::2".parse().unwrap()
        ]
    );
    // Round robin continues after the cursor.
    assert_eq!(
        s.allocate(&r6, "c3", "eth0", None).unwrap().ip.to_string(),
        "fd01:0:0:5::4"
    );
    // Garbage collection sees both families.
    let removed = s.retain(|l| l.container_id == "c3").unwrap();
    assert_eq!(removed.len(), 1);
    assert_eq!(removed[0].container_id, "c2");
}

#[test]
fn ipv6_requested_addresses_and_ranges_are_checked_like_ipv4() {
    let t = TempDir::new();
    let s = store(&t);
    let r6 = range6("fd01:0:0:5::/64", "fd01:0:0:5::1");
    let req = |a: &str| s.allocate(&r6, "c1", "eth0", Some(a.parse().unwrap()));
    assert_eq!(
        req("fd01:0:0:6::5").unwrap_err().to_string(),
        "requested ip fd01:0:0:6::5 is not in subnet fd01:0:0:5::/64"
    );
    assert_eq!(
        req("fd01:0:0:5::").unwrap_err().to_string(),
        "requested ip fd01:0:0:5:: is the network address of subnet fd01:0:0:5::/64 and cannot be leased"
    );
    assert_eq!(
        req("fd01:0:0:5::1").unwrap_err().to_string(),
        "requested ip fd01:0:0:5::1 is the gateway of subnet fd01:0:0:5::/64 and cannot be leased"
    );
    // The last address of an IPv6 subnet is an address like any other (no broadcast).
    assert_eq!(
        req("fd01:0:0:5:ffff:ffff:ffff:ffff")
            .unwrap()
            .ip
            .to_string(),
        "fd01::5:ffff:ffff:ffff:ffff"
    );
    let tiny = range6("fd01::/127", "fd01::1");
    assert_eq!(
        tiny.validate().unwrap_err().to_string(),
        "invalid address range for subnet fd01::/127: a /127 has no address to lease (use at most a /126)"
    );
    assert_eq!(r6.leasable(), u32::MAX);
}

#[test]
fn a_dual_stack_attachment_takes_both_leases_in_one_pass() {
    let t = TempDir::new();
    let s = store(&t);
    let r4 = range("10.128.0.0/23", "10.128.0.1");
    let r6 = range6("fd01:0:0:5::/64", "fd01:0:0:5::1");
    let (a4, a6) = s
        .allocate_dual((&r4, &r6), "c1", "eth0", (None, None))
        .unwrap();
    assert_eq!(
        (a4.ip.to_string(), a6.ip.to_string()),
        ("10.128.0.2".into(), "fd01:0:0:5::2".into())
    );
    // Idempotent, and the same leases as one family at a time would give.
    assert_eq!(
        s.allocate_dual((&r4, &r6), "c1", "eth0", (None, None))
            .unwrap(),
        (a4.clone(), a6.clone())
    );
    assert_eq!(s.allocate(&r6, "c1", "eth0", None).unwrap(), a6);
    // Requested addresses of both families, checked like single ones.
    let (b4, b6) = s
        .allocate_dual(
            (&r4, &r6),
            "c2",
            "eth0",
            (
                Some(ip("10.128.0.9")),
                Some("fd01:0:0:5::9".parse().unwrap()),
            ),
        )
        .unwrap();
    assert_eq!(
        (b4.ip.to_string(), b6.ip.to_string()),
        ("10.128.0.9".into(), "fd01:0:0:5::9".into())
    );
    let taken = s.allocate_dual(
        (&r4, &r6),
        "c3",
        "eth0",
        (None, Some("fd01:0:0:5::9".parse().unwrap())),
    );
    assert!(matches!(taken, Err(IpamError::InUse { .. })), "{taken:?}");
    assert_eq!(
        s.release("c3", "eth0").unwrap().len(),
        1,
        "the IPv4 lease of the refused pair"
    );
}

#[test]
fn allocate_many_dual_pairs_the_families_and_releases_an_ipv4_lease_left_alone() {
    let t = TempDir::new();
    let s = store(&t);
    let r4 = range("10.0.0.0/28", "10.0.0.1");
    // fd01::2 and fd01::3 leasable (::0 the network, ::1 the gateway).
    let r6 = range6("fd01::/126", "fd01::1");
    let ids: Vec<String> = (0..3).map(|i| format!("sdn-warm-p{i}")).collect();
    let got = s.allocate_many_dual((&r4, &r6), &ids, "vnid-5").unwrap();
    assert_eq!(got.len(), 2, "as far as the IPv6 range goes: {got:?}");
    for (l4, l6) in &got {
        assert_eq!(l4.container_id, l6.container_id);
        assert_eq!(
            (l4.ifname.as_str(), l6.ifname.as_str()),
            ("vnid-5", "vnid-5")
        );
    }
    // The third id's IPv4 lease went again: every IPv4 lease has its IPv6 partner.
    assert_eq!(s.leases().unwrap().len(), 2);
    assert_eq!(s.leases_of_family::<std::net::Ipv6Addr>().unwrap().len(), 2);
    // Nothing left in IPv6: exhausted, and no IPv4 lease taken.
    assert!(matches!(
        s.allocate_many_dual((&r4, &r6), &ids[2..], "vnid-5"),
        Err(IpamError::Exhausted { .. })
    ));
    assert_eq!(s.leases().unwrap().len(), 2);
}

#[test]
fn ipv6_only_leases_never_share_their_last_32_bits() {
    let t = TempDir::new();
    let s = store(&t);
    let r6 = range6("fd01:0:0:5::/64", "fd01:0:0:5::1");
    let low32 = |ip: std::net::Ipv6Addr| u128::from(ip) as u32;
    let a = s.allocate_ipv6_only(&r6, "a", "eth0", None).unwrap();
    assert_eq!(a.ip.to_string(), "fd01:0:0:5::2");
    // Asking for another address with a's last 32 bits: refused, naming a.
    let e = s
        .allocate_ipv6_only(&r6, "b", "eth0", Some("fd01:0:0:5:7::2".parse().unwrap()))
        .unwrap_err();
    assert!(
        matches!(&e, IpamError::SameMac { container_id, .. } if container_id == "a"),
        "{e}"
    );
    assert!(e.to_string().contains("fd01:0:0:5::2"), "{e}");
    // An address asked for whose last 32 bits are free is leased; the walk then skips every
    // address whose last 32 bits a lease has (fd01:0:0:5::3 here, taken by c's).
    let c = s
        .allocate_ipv6_only(&r6, "c", "eth0", Some("fd01:0:0:5:1::3".parse().unwrap()))
        .unwrap();
    std::fs::write(s.dir().join("last_reserved_ip.1"), "fd01:0:0:5::2").unwrap();
    let d = s.allocate_ipv6_only(&r6, "d", "eth0", None).unwrap();
    assert_eq!(d.ip.to_string(), "fd01:0:0:5::4");
    let lows: std::collections::BTreeSet<u32> = [a.ip, c.ip, d.ip].into_iter().map(low32).collect();
    assert_eq!(lows.len(), 3);
    assert_eq!(s.leases_of_family::<std::net::Ipv6Addr>().unwrap().len(), 3);
    // The attachment asking again gets what it holds.
    let again = s.allocate_ipv6_only(&r6, "c", "eth0", Some(c.ip)).unwrap();
    assert_eq!(again.ip, c.ip);
}

#[test]
fn warm_batches_of_an_ipv6_only_node_keep_the_last_32_bits_unique() {
    let t = TempDir::new();
    let s = store(&t);
    let r6 = range6("fd01:0:0:5::/64", "fd01:0:0:5::1");
    // A pod asked for an address ending in ...::3: the batch skips ::3.
    s.allocate_ipv6_only(&r6, "pod", "eth0", Some("fd01:0:0:5:9::3".parse().unwrap()))
        .unwrap();
    std::fs::write(s.dir().join("last_reserved_ip.1"), "fd01:0:0:5::1").unwrap();
    let ids: Vec<String> = (0..3).map(|i| format!("sdn-warm-p{i}")).collect();
    let got = s.allocate_many_ipv6_only(&r6, &ids, "vnid-5").unwrap();
    let ips: Vec<String> = got.iter().map(|l| l.ip.to_string()).collect();
    assert_eq!(ips, ["fd01:0:0:5::2", "fd01:0:0:5::4", "fd01:0:0:5::5"]);
}
