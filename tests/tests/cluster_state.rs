//! The standalone cluster state source against a real directory: seeding a fresh node, then edits,
//! breakage, duplicates and deletions made to the files reach (or, for breakage, do not corrupt)
//! the watch channel within a bounded time, and problems are logged naming the file.
//!
//! No root needed: everything lives in a temp directory per test. Each test runs on a
//! current-thread runtime, so the watcher task logs on the test thread and a thread-local
//! tracing subscriber captures what it says.

use std::fs;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster::config::Config;
use cluster::{
    seed, ClusterNetworkSpec, ClusterObject, ClusterSource, ClusterState, Kind, NetNamespace,
    StandaloneSource,
};
use sdn_tests::harness::unique_name;
use tokio::sync::watch;

const POLL: Duration = Duration::from_millis(50);
/// Generous bound for one change to show up (many polls).
const BOUND: Duration = Duration::from_secs(5);

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let p = std::env::temp_dir().join(unique_name("sdn-cluster-"));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Captures the log lines written on this thread while the guard lives.
///
/// Through one global subscriber (installed once) whose writer appends to the capture of the
/// writing thread, not a scoped `set_default` per test: with scoped dispatchers, a callsite first
/// hit by a parallel test while no dispatcher lives can have its interest cached as "never", and
/// this test then lost its INFO lines (seen once under load). The watcher's task runs on the test's
/// thread (a current-thread runtime), so its lines land here.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

thread_local! {
    static CAPTURE: std::cell::RefCell<Option<Logs>> = const { std::cell::RefCell::new(None) };
}

/// Writes to the capture of the current thread, if any.
struct ThreadCapture;

impl Write for ThreadCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|c| {
            if let Some(logs) = &*c.borrow() {
                logs.0.lock().unwrap().extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Stops the capture on this thread when dropped.
struct CaptureGuard;

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        CAPTURE.with(|c| *c.borrow_mut() = None);
    }
}

impl Logs {
    fn install(&self) -> CaptureGuard {
        static GLOBAL: std::sync::Once = std::sync::Once::new();
        GLOBAL.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .with_ansi(false)
                .with_max_level(tracing::Level::INFO)
                .with_writer(|| ThreadCapture)
                .finish();
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber in this test binary");
        });
        CAPTURE.with(|c| *c.borrow_mut() = Some(self.clone()));
        CaptureGuard
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

fn spec() -> ClusterNetworkSpec {
    ClusterNetworkSpec::from_config(&Config::default()).unwrap()
}

/// Waits (bounded) until the state satisfies `pred`; returns it or panics with `what`.
async fn wait_state(
    rx: &mut watch::Receiver<Arc<ClusterState>>,
    what: &str,
    pred: impl Fn(&ClusterState) -> bool,
) -> Arc<ClusterState> {
    let deadline = Instant::now() + BOUND;
    loop {
        let current = rx.borrow_and_update().clone();
        if pred(&current) {
            return current;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => panic!("watch channel closed while waiting for: {what}"),
            Err(_) => panic!("no state with {what} within {BOUND:?}; last state: {current:?}"),
        }
    }
}

/// Waits (bounded) until `cond` holds, sleeping between checks so the watcher can run.
async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !cond() {
        assert!(Instant::now() < deadline, "not within {BOUND:?}: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn write(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

#[tokio::test]
async fn seeded_directory_then_edits_reach_the_watch_channel() {
    let dir = TempDir::new();
    let seeded = seed(
        &dir.0,
        "node-1",
        Some(Ipv4Addr::new(192, 168, 50, 10).into()),
        &spec(),
    )
    .unwrap();
    assert_eq!(
        seeded.subnet_of("node-1").unwrap().to_string(),
        "10.128.0.0/23"
    );

    let source = StandaloneSource::start(&dir.0, POLL).unwrap();
    let as_trait: &dyn ClusterSource = &source;
    let mut rx = as_trait.subscribe();
    assert_eq!(
        **rx.borrow_and_update(),
        seeded,
        "first state is the seeded one"
    );
    assert!(source.errors().is_empty(), "{:?}", source.errors());

    // The agent's writer: a new tenant.
    let written =
        StandaloneSource::write_object(&dir.0, &NetNamespace::new("tenant-a", 10).into()).unwrap();
    assert_eq!(written, dir.path("netnamespace-tenant-a.yaml"));
    let st = wait_state(&mut rx, "tenant-a with VNID 10", |s| {
        s.vnid_of("tenant-a") == Some(10)
    })
    .await;
    assert_eq!(st.vnid_of("default"), Some(0));

    // A person's edit in place (not atomic), to a multi-document file of their own.
    write(
        &dir.path("tenants.yml"),
        "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nmetadata:\n  name: tenant-b\n\
         netname: tenant-b\nnetid: 11\n---\napiVersion: network.openshift.io/v1\nkind: NetNamespace\n\
         metadata:\n  name: tenant-c\nnetname: tenant-c\nnetid: 11\n",
    );
    wait_state(&mut rx, "tenant-b and tenant-c joined on 11", |s| {
        s.vnid_of("tenant-b") == Some(11) && s.vnid_of("tenant-c") == Some(11)
    })
    .await;

    // A remote node arrives as JSON from `oc get hostsubnet -o json`, in a List.
    write(
        &dir.path("remote.json"),
        r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"network.openshift.io/v1",
            "kind":"HostSubnet","metadata":{"name":"node-2","uid":"x"},"host":"node-2",
            "hostIP":"192.168.50.11","subnet":"10.128.2.0/23"}]}"#,
    );
    let st = wait_state(&mut rx, "node-2's HostSubnet", |s| {
        s.host_subnet_of("node-2").is_some()
    })
    .await;
    assert_eq!(
        st.host_ip_of("node-2"),
        Some(Ipv4Addr::new(192, 168, 50, 11).into())
    );

    // Changing a value.
    let edited = fs::read_to_string(dir.path("netnamespace-tenant-a.yaml"))
        .unwrap()
        .replace("netid: 10", "netid: 12");
    write(&dir.path("netnamespace-tenant-a.yaml"), &edited);
    wait_state(&mut rx, "tenant-a moved to VNID 12", |s| {
        s.vnid_of("tenant-a") == Some(12)
    })
    .await;

    // Deleting files removes their objects, and only theirs.
    assert!(StandaloneSource::delete_object(&dir.0, Kind::NetNamespace, "tenant-a").unwrap());
    assert!(!StandaloneSource::delete_object(&dir.0, Kind::NetNamespace, "tenant-a").unwrap());
    fs::remove_file(dir.path("tenants.yml")).unwrap();
    let st = wait_state(&mut rx, "tenants a, b, c gone", |s| {
        s.vnid_of("tenant-a").is_none()
            && s.vnid_of("tenant-b").is_none()
            && s.vnid_of("tenant-c").is_none()
    })
    .await;
    assert!(st.host_subnet_of("node-2").is_some());
    assert_eq!(st.subnet_of("node-1"), seeded.subnet_of("node-1"));
    assert!(source.errors().is_empty(), "{:?}", source.errors());

    // Dropping the source stops its watcher: the channel closes.
    drop(source);
    let closed = tokio::time::timeout(BOUND, rx.changed()).await;
    assert!(
        matches!(closed, Ok(Err(_))),
        "channel still open after drop: {closed:?}"
    );
}

#[tokio::test]
async fn broken_file_keeps_the_last_good_objects_and_is_logged() {
    let dir = TempDir::new();
    let seeded = seed(&dir.0, "node-1", None, &spec()).unwrap();
    let logs = Logs::default();
    let _guard = logs.install();
    let source = StandaloneSource::start(&dir.0, POLL).unwrap();
    let mut rx = source.subscribe();
    rx.borrow_and_update();

    // A YAML syntax error in this node's HostSubnet file.
    let hs_file = dir.path("hostsubnet-node-1.yaml");
    let good = fs::read_to_string(&hs_file).unwrap();
    write(
        &hs_file,
        &good.replace("subnet: 10.128.0.0/23", "subnet: [10.128.0.0/23"),
    );
    wait_for("an error naming hostsubnet-node-1.yaml", || {
        source
            .errors()
            .iter()
            .any(|e| e.to_string().contains("hostsubnet-node-1.yaml"))
    })
    .await;
    // A value error in another file, reported with the field.
    let nn_file = dir.path("netnamespace-default.yaml");
    write(
        &nn_file,
        &fs::read_to_string(&nn_file)
            .unwrap()
            .replace("netid: 0", "netid: 16777216"),
    );
    wait_for("an error naming the netid field", || {
        source.errors().iter().any(|e| {
            e.to_string().contains(
                "netnamespace-default.yaml: NetNamespace \"default\": field netid \"16777216\"",
            )
        })
    })
    .await;
    assert_eq!(source.errors().len(), 2, "{:?}", source.errors());
    // Both broken files still contribute their last good objects: nothing was published.
    assert_eq!(*source.current(), seeded);
    assert!(
        !rx.has_changed().unwrap(),
        "a broken file must not publish a state"
    );
    // Each problem was logged once, naming the file.
    let text = logs.text();
    assert_eq!(
        text.matches("hostsubnet-node-1.yaml").count(),
        1,
        "logs:\n{text}"
    );
    assert!(text.contains("ERROR"), "logs:\n{text}");
    assert!(
        text.contains("netnamespace-default.yaml: NetNamespace \"default\": field netid"),
        "logs:\n{text}"
    );

    // Fixing a file with a new value applies it and clears its error (logged as resolved).
    write(&hs_file, &good.replace("10.128.0.0/23", "10.128.6.0/23"));
    let st = wait_state(&mut rx, "node-1 on 10.128.6.0/23", |s| {
        s.subnet_of("node-1").map(|n| n.to_string()).as_deref() == Some("10.128.6.0/23")
    })
    .await;
    assert_eq!(
        st.vnid_of("default"),
        Some(0),
        "still the last good default"
    );
    wait_for("one error left", || source.errors().len() == 1).await;
    assert!(logs.text().contains("resolved"), "logs:\n{}", logs.text());

    // A HostSubnet that parses but does not fit the cluster network is left out and reported.
    write(
        &dir.path("hostsubnet-node-9.yaml"),
        "apiVersion: network.openshift.io/v1\nkind: HostSubnet\nmetadata: {name: node-9}\n\
         host: node-9\nhostIP: 192.168.50.19\nsubnet: 10.128.6.0/24\n",
    );
    wait_for("node-9 reported", || {
        source.errors().iter().any(|e| {
            let e = e.to_string();
            e.contains(
                "hostsubnet-node-9.yaml: HostSubnet \"node-9\": field subnet \"10.128.6.0/24\"",
            ) && e.contains("node subnets are /23")
        })
    })
    .await;
    assert!(source.current().host_subnet_of("node-9").is_none());
}

#[tokio::test]
async fn duplicates_name_both_files_and_unchanged_rewrites_do_not_notify() {
    let dir = TempDir::new();
    seed(&dir.0, "node-1", None, &spec()).unwrap();
    let source = StandaloneSource::start(&dir.0, POLL).unwrap();
    let mut rx = source.subscribe();
    rx.borrow_and_update();

    // Rewriting a file with identical content (new inode, new mtime) re-reads it but the state
    // is equal, so subscribers are not woken.
    let nn: ClusterObject = source.current().get(Kind::NetNamespace, "default").unwrap();
    StandaloneSource::write_object(&dir.0, &nn).unwrap();
    tokio::time::sleep(POLL * 6).await;
    assert!(
        !rx.has_changed().unwrap(),
        "an identical rewrite woke subscribers"
    );

    // The same NetNamespace in a second file with another netid: the netid in effect stays,
    // and the error names both files with what each says.
    write(
        &dir.path("zz-default.yaml"),
        "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nmetadata: {name: default}\n\
         netname: default\nnetid: 17\n",
    );
    wait_for("a conflict error", || {
        source.errors().iter().any(|e| {
            let e = e.to_string();
            e.contains("NetNamespace \"default\" is defined differently in")
                && e.contains("netnamespace-default.yaml (netid 0)")
                && e.contains("zz-default.yaml (netid 17)")
                && e.contains("keeping the one in effect (netid 0)")
        })
    })
    .await;
    assert_eq!(source.current().vnid_of("default"), Some(0));
    // The same content in a second file: a duplicate, the first file (by name) is used.
    write(
        &dir.path("zz-default.yaml"),
        "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nmetadata: {name: default}\n\
         netname: default\nnetid: 0\n",
    );
    wait_for("a duplicate error", || {
        source.errors().iter().any(|e| {
            let e = e.to_string();
            e.contains("NetNamespace \"default\" is defined in both")
                && e.contains("netnamespace-default.yaml")
                && e.contains("zz-default.yaml")
        })
    })
    .await;
    assert_eq!(source.current().vnid_of("default"), Some(0));
    fs::remove_file(dir.path("zz-default.yaml")).unwrap();
    wait_for("the duplicate error cleared", || source.errors().is_empty()).await;

    // Files that are not ours are ignored: hidden temp files, other extensions.
    write(&dir.path(".hidden.yaml"), "not: [yaml");
    write(&dir.path("notes.txt"), "anything");
    tokio::time::sleep(POLL * 6).await;
    assert!(source.errors().is_empty(), "{:?}", source.errors());
}

#[tokio::test]
async fn inotify_delivers_changes_without_waiting_for_the_poll() {
    let dir = TempDir::new();
    seed(&dir.0, "node-1", None, &spec()).unwrap();
    // A poll an hour apart: only inotify can deliver these changes within the bound.
    let source = StandaloneSource::start(&dir.0, Duration::from_secs(3600)).unwrap();
    StandaloneSource::write_object(&dir.0, &NetNamespace::new("t1", 21).into()).unwrap();
    wait_for("t1 by inotify", || {
        source.current().vnid_of("t1") == Some(21)
    })
    .await;
    StandaloneSource::write_object(&dir.0, &NetNamespace::new("t1", 22).into()).unwrap();
    wait_for("t1's new netid by inotify", || {
        source.current().vnid_of("t1") == Some(22)
    })
    .await;
    StandaloneSource::delete_object(&dir.0, Kind::NetNamespace, "t1").unwrap();
    wait_for("t1 gone by inotify", || {
        source.current().vnid_of("t1").is_none()
    })
    .await;
}

#[tokio::test]
async fn start_fails_clearly_on_a_missing_directory() {
    let dir = TempDir::new();
    let missing = dir.path("nope");
    let e = StandaloneSource::start(&missing, POLL)
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope") && e.contains("cannot list"), "{e}");
}
