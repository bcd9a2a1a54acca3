//! The standalone cluster state source: a directory of YAML/JSON files holding the same objects
//! the Kubernetes API would (`ClusterNetwork`, `HostSubnet`, `NetNamespace`), watched for changes.
//!
//! Files: `*.yaml`, `*.yml` (one or more documents separated by `---`) and `*.json`; a document may
//! be a `kind: List` with `items`, as `oc get ... -o yaml` prints. Names starting with `.` are
//! ignored, which is where the atomic writer keeps its temporary files. The agent writes one object
//! per file, `<kind lowercase>-<name>.yaml`; people may group objects as they like.
//!
//! Watching is by polling (default every 500 ms): list the directory, compare each file's inode,
//! size, mtime and ctime with the last look, and re-read only files that changed. Why not inotify
//! (`notify`): the directory is small, a poll costs one `readdir` plus a `stat` per file, it needs no
//! extra crate or thread, it behaves the same on every file system (including bind mounts and
//! Kubernetes ConfigMap volumes, whose symlink swaps inotify reports awkwardly), and it cannot
//! miss events under overflow. The cost is up to one interval of latency.
//!
//! Errors never drop good state: a file that fails to read, parse or validate is reported (logged
//! once, and listed by [`StandaloneSource::errors`]) and the objects it last had while it was good
//! stay in effect until it is fixed or deleted. Deleting a file removes its objects. The same
//! object in two files is an error naming both; the file that sorts first wins. A HostSubnet that
//! does not fit the ClusterNetwork or overlaps another node's subnet is reported and left out.
//!
//! Limits: a file edited in place by a non-atomic writer may be read half-written; if that half
//! parses, its missing objects disappear until the next poll. Write with [`write_object`] (temp
//! file + rename) or an editor that renames.
//!
//! Why one file of this size: seeding, loading (with its duplicate and problem rules) and the
//! poller share the directory conventions; about a fifth of the file is its unit tests.
//!
//! [`write_object`]: StandaloneSource::write_object

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flows::Mode;
use futures::StreamExt;
use inotify::{EventMask, EventStream, Inotify, WatchMask};
use ipnet::Ipv4Net;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::types::{
    parse_objects, to_yaml, ClusterNetwork, ClusterNetworkEntry, ClusterObject, Format, HostSubnet,
    Kind, NetNamespace, DEFAULT_NAMESPACE,
};
use super::validate::{ValidationError, PLUGIN_MULTITENANT, PLUGIN_NETWORKPOLICY, PLUGIN_SUBNET};
use super::{ClusterError, ClusterSource, ClusterState};
use crate::config::{ClusterNetworkSetting as CidrEntry, Config};

/// How often the directory is scanned besides inotify's wake-ups (the safety net).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(2);

/// The node IP written into a new HostSubnet when none is configured (a one-machine node).
pub const FALLBACK_NODE_IP: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// What a file looked like at the last poll. Inode and ctime catch rename-replace and
/// same-size rewrites within one mtime tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(m: &fs::Metadata) -> Stamp {
        Stamp {
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// One watched file: its stamp, the objects it had when it was last good, its current problem.
#[derive(Debug)]
struct FileEntry {
    stamp: Stamp,
    objects: Vec<ClusterObject>,
    error: Option<ClusterError>,
}

/// The result of assembling all files.
#[derive(Debug, Default)]
struct Loaded {
    state: ClusterState,
    errors: Vec<ClusterError>,
    /// The file each object in `state` came from.
    origins: BTreeMap<(Kind, String), PathBuf>,
}

/// Reads the directory and remembers every file's last good objects (synchronous; the watcher
/// runs it on tokio's blocking pool).
#[derive(Debug)]
struct Loader {
    dir: PathBuf,
    files: BTreeMap<String, FileEntry>,
    dir_error: Option<ClusterError>,
}

impl Loader {
    fn new(dir: PathBuf) -> Loader {
        Loader {
            dir,
            files: BTreeMap::new(),
            dir_error: None,
        }
    }

    /// Looks at the directory; re-reads new and changed files, forgets deleted ones. Returns
    /// whether anything (a file or a problem) changed.
    fn scan(&mut self) -> bool {
        let entries = match fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) => {
                // Keep every file's objects: a vanished or unreadable directory is a problem to
                // report, not an instruction to delete the cluster.
                let changed = self.dir_error.is_none();
                self.dir_error = Some(ClusterError::io(&self.dir, "list", e));
                return changed;
            }
        };
        let mut changed = self.dir_error.take().is_some();
        let mut seen = BTreeSet::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !is_watched(&name) {
                continue;
            }
            let path = self.dir.join(&name);
            // Follows symlinks (ConfigMap volumes); a dangling link is skipped like a missing file.
            let Ok(meta) = fs::metadata(&path) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            seen.insert(name.clone());
            let stamp = Stamp::of(&meta);
            if self.files.get(&name).is_some_and(|f| f.stamp == stamp) {
                continue;
            }
            changed = true;
            let previous = self.files.remove(&name).map(|f| f.objects);
            let entry = match load_file(&path) {
                Ok(objects) => FileEntry {
                    stamp,
                    objects,
                    error: None,
                },
                Err(e) => FileEntry {
                    stamp,
                    objects: previous.unwrap_or_default(),
                    error: Some(e),
                },
            };
            self.files.insert(name, entry);
        }
        let before = self.files.len();
        self.files.retain(|name, _| seen.contains(name));
        changed || self.files.len() != before
    }

    /// Builds the state from every file's good objects, in file name order. An object defined
    /// by more than one file: when they all say the same, the first is used and the others are
    /// reported; when they differ, `previous` (the state in effect) decides: its object stays,
    /// or, when it had none, the object is left out. A stray copy can thus never change a VNID
    /// (or a subnet) that is in effect.
    fn assemble(&self, previous: &ClusterState) -> Loaded {
        let mut loaded = Loaded::default();
        loaded.errors.extend(self.dir_error.clone());
        let mut defined: BTreeMap<(Kind, String), Vec<(PathBuf, &ClusterObject)>> = BTreeMap::new();
        let mut order: Vec<(Kind, String)> = Vec::new();
        for (name, entry) in &self.files {
            let path = self.dir.join(name);
            loaded.errors.extend(entry.error.clone());
            for obj in &entry.objects {
                let key = (obj.kind(), obj.key());
                let defs = defined.entry(key.clone()).or_default();
                if defs.is_empty() {
                    order.push(key);
                }
                defs.push((path.clone(), obj));
            }
        }
        let mut picked: Vec<(PathBuf, ClusterObject)> = Vec::new();
        for key in order {
            let defs = &defined[&key];
            let (first, obj) = &defs[0];
            if defs.iter().all(|(_, o)| o.same_content(obj)) {
                for (second, _) in &defs[1..] {
                    loaded.errors.push(ClusterError::Duplicate {
                        kind: key.0,
                        name: key.1.clone(),
                        first: first.clone(),
                        second: second.clone(),
                    });
                }
                loaded.origins.insert(key, first.clone());
                picked.push((first.clone(), (*obj).clone()));
                continue;
            }
            let kept = previous.get(key.0, &key.1);
            loaded.errors.push(ClusterError::Conflict {
                kind: key.0,
                name: key.1.clone(),
                definitions: defs.iter().map(|(f, o)| (f.clone(), o.summary())).collect(),
                kept: kept.as_ref().map(ClusterObject::summary),
            });
            if let Some(kept) = kept {
                let file = defs
                    .iter()
                    .find(|(_, o)| o.same_content(&kept))
                    .map_or(first, |(f, _)| f)
                    .clone();
                loaded.origins.insert(key, file.clone());
                picked.push((file, kept));
            }
        }
        // The ClusterNetwork first: HostSubnets are checked against it.
        for kind in [
            Kind::ClusterNetwork,
            Kind::NetNamespace,
            Kind::HostSubnet,
            Kind::EgressNetworkPolicy,
        ] {
            for (file, obj) in picked.iter().filter(|(_, o)| o.kind() == kind) {
                if let ClusterObject::HostSubnet(hs) = obj {
                    if let Err(source) = loaded.state.check_host_subnet(hs) {
                        loaded.origins.remove(&(kind, hs.name().to_string()));
                        loaded.errors.push(ClusterError::Invalid {
                            file: file.clone(),
                            kind,
                            name: hs.name().to_string(),
                            source: Box::new(source),
                        });
                        continue;
                    }
                }
                loaded.state.insert(obj.clone());
            }
        }
        // Namespaces whose NetNamespace file is unusable: named as such in ADD errors.
        for e in &loaded.errors {
            if let Some((namespace, why)) = broken_net_namespace(e) {
                if !loaded.state.net_namespaces.contains_key(&namespace) {
                    loaded.state.broken_namespaces.insert(namespace, why);
                }
            }
        }
        // An EgressNetworkPolicy that cannot be used fails closed: its namespace's external
        // traffic is dropped until the file is fixed or removed (the egress firewall reads this).
        for e in &loaded.errors {
            if let ClusterError::Invalid {
                kind: Kind::EgressNetworkPolicy,
                name,
                source,
                ..
            } = e
            {
                if !loaded.state.egress_policies.contains_key(name) {
                    loaded
                        .state
                        .refused_egress_policies
                        .insert(name.clone(), format!("invalid: {source}"));
                }
            }
        }
        loaded
    }
}

/// Whether a directory entry is one of ours to read.
fn is_watched(name: &str) -> bool {
    !name.starts_with('.')
        && (name.ends_with(".yaml") || name.ends_with(".yml") || name.ends_with(".json"))
}

/// The largest state file read: far above any real object file (a NetNamespace is a few
/// hundred bytes, an EgressNetworkPolicy of 1000 rules about 100 KB), far below what would cost
/// the agent memory (a 10 MB stray file cost 26-29 MB of RSS when it was read).
pub const MAX_STATE_FILE_BYTES: u64 = 1024 * 1024;

/// The namespace a state directory problem makes unusable, with why: a NetNamespace that is
/// invalid, or a file named as the writer names a namespace's file
/// (`netnamespace-<name>.yaml`) that cannot be read, parsed or is too large. `None` for other
/// problems (conflicts are shown on their own).
pub fn broken_net_namespace(problem: &ClusterError) -> Option<(String, String)> {
    let file = match problem {
        ClusterError::Invalid {
            kind: Kind::NetNamespace,
            name,
            ..
        } => return Some((name.clone(), problem.to_string())),
        ClusterError::Io { path, .. } => path,
        ClusterError::Parse { file, .. } | ClusterError::TooLarge { file, .. } => file,
        _ => return None,
    };
    let name = file.file_name()?.to_str()?.to_ascii_lowercase();
    let stem = name
        .strip_suffix(".yaml")
        .or_else(|| name.strip_suffix(".yml"))
        .or_else(|| name.strip_suffix(".json"))?;
    let namespace = stem.strip_prefix("netnamespace-")?;
    (!namespace.is_empty()).then(|| (namespace.to_string(), problem.to_string()))
}

/// Reads, parses and validates one file; any problem fails the whole file. A file over
/// [`MAX_STATE_FILE_BYTES`] is refused unread.
fn load_file(path: &Path) -> Result<Vec<ClusterObject>, ClusterError> {
    let size = fs::metadata(path)
        .map_err(|e| ClusterError::io(path, "read", e))?
        .len();
    if size > MAX_STATE_FILE_BYTES {
        return Err(ClusterError::TooLarge {
            file: path.to_path_buf(),
            size,
            max: MAX_STATE_FILE_BYTES,
        });
    }
    let text = fs::read_to_string(path).map_err(|e| ClusterError::io(path, "read", e))?;
    let format = if path.extension().is_some_and(|e| e == "json") {
        Format::Json
    } else {
        Format::Yaml
    };
    let objects = parse_objects(&text, format).map_err(|source| ClusterError::Parse {
        file: path.to_path_buf(),
        source: Box::new(source),
    })?;
    let mut names = BTreeSet::new();
    for obj in &objects {
        let invalid = |source| ClusterError::Invalid {
            file: path.to_path_buf(),
            kind: obj.kind(),
            name: obj.key(),
            source: Box::new(source),
        };
        obj.validate().map_err(invalid)?;
        if !names.insert((obj.kind(), obj.key())) {
            return Err(invalid(ValidationError::new(
                "metadata.name",
                obj.key(),
                "the file defines this object twice",
            )));
        }
    }
    Ok(objects)
}

/// Reads a directory once.
fn load_dir(dir: &Path) -> Loaded {
    let mut loader = Loader::new(dir.to_path_buf());
    loader.scan();
    loader.assemble(&ClusterState::default())
}

/// Logs problems that are new since `before` and those that went away.
fn log_changes(before: &[ClusterError], after: &[ClusterError]) {
    let old: BTreeSet<String> = before.iter().map(ToString::to_string).collect();
    let new: BTreeSet<String> = after.iter().map(ToString::to_string).collect();
    for e in new.difference(&old) {
        tracing::error!("cluster state: {e}");
    }
    for e in old.difference(&new) {
        tracing::info!("cluster state: resolved: {e}");
    }
}

/// A watched directory of cluster objects (see the module docs). Dropping it stops the watcher.
#[derive(Debug)]
pub struct StandaloneSource {
    dir: PathBuf,
    state: watch::Receiver<Arc<ClusterState>>,
    errors: watch::Receiver<Arc<Vec<ClusterError>>>,
    task: JoinHandle<()>,
}

impl StandaloneSource {
    /// Reads `dir` (synchronously, so the first state is there on return) and starts polling it
    /// every `poll_interval` on the current tokio runtime. Fails when `dir` cannot be listed or
    /// there is no runtime; problems with single files are not failures (see [`Self::errors`]).
    pub fn start(
        dir: impl Into<PathBuf>,
        poll_interval: Duration,
    ) -> Result<StandaloneSource, ClusterError> {
        let dir = dir.into();
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| ClusterError::NoRuntime { dir: dir.clone() })?;
        fs::read_dir(&dir).map_err(|e| ClusterError::io(&dir, "list", e))?;
        // Watch before the first scan, so no write falls between the two. The stream needs the
        // runtime's reactor, hence inside it.
        let events = {
            let _entered = runtime.enter();
            match notifier(&dir) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, interval_ms = poll_interval.as_millis(), "cannot watch the cluster state directory with inotify; polling it");
                    None
                }
            }
        };
        let mut loader = Loader::new(dir.clone());
        loader.scan();
        let first = loader.assemble(&ClusterState::default());
        log_changes(&[], &first.errors);
        let (state_tx, state) = watch::channel(Arc::new(first.state));
        let (errors_tx, errors) = watch::channel(Arc::new(first.errors));
        let task = runtime.spawn(poll(loader, events, poll_interval, state_tx, errors_tx));
        Ok(StandaloneSource {
            dir,
            state,
            errors,
            task,
        })
    }

    /// The watched directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The problems as of the last poll (each was logged once when it appeared): files that do not
    /// parse or validate, duplicates, HostSubnets left out. Empty when everything is fine.
    pub fn errors(&self) -> Vec<ClusterError> {
        self.errors.borrow().as_ref().clone()
    }

    /// Reads a directory once, without watching (for `sdnctl`): the state and the problems.
    pub fn load(dir: &Path) -> Result<(ClusterState, Vec<ClusterError>), ClusterError> {
        fs::read_dir(dir).map_err(|e| ClusterError::io(dir, "list", e))?;
        let loaded = load_dir(dir);
        Ok((loaded.state, loaded.errors))
    }

    /// The file name the writer uses for an object: `<kind lowercase>-<name>.yaml`.
    pub fn file_name(kind: Kind, name: &str) -> String {
        format!("{}-{name}.yaml", kind.as_str().to_ascii_lowercase())
    }

    /// Validates `obj` and writes it to `<dir>/<kind lowercase>-<name>.yaml` atomically (a
    /// temporary file in `dir`, fsync, rename, fsync of the directory): a watcher sees the old
    /// file or the new one, never a mix. Replaces an existing file of that name. The caller must
    /// make sure no other file in `dir` defines the same object (that would be a duplicate).
    /// Returns the path written.
    pub fn write_object(dir: &Path, obj: &ClusterObject) -> Result<PathBuf, ClusterError> {
        let path = dir.join(Self::file_name(obj.kind(), &obj.key().replace('/', ".")));
        obj.validate().map_err(|source| ClusterError::Invalid {
            file: path.clone(),
            kind: obj.kind(),
            name: obj.key(),
            source: Box::new(source),
        })?;
        let text = to_yaml(obj).map_err(|e| ClusterError::Render {
            what: obj.describe(),
            message: e.to_string(),
        })?;
        write_atomic(&path, text.as_bytes())?;
        Ok(path)
    }

    /// Deletes `<dir>/<kind lowercase>-<name>.yaml`; `Ok(false)` when it did not exist.
    pub fn delete_object(dir: &Path, kind: Kind, name: &str) -> Result<bool, ClusterError> {
        // A namespaced object's key is `namespace/name`; its file says `namespace.name`.
        let path = dir.join(Self::file_name(kind, &name.replace('/', ".")));
        match fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(ClusterError::io(path, "delete", e)),
        }
    }
}

impl ClusterSource for StandaloneSource {
    fn subscribe(&self) -> watch::Receiver<Arc<ClusterState>> {
        self.state.clone()
    }

    fn problems(&self) -> Vec<String> {
        self.errors().iter().map(ToString::to_string).collect()
    }
}

impl Drop for StandaloneSource {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The directory changes inotify reports that can change what the loader reads; the watch on
/// the directory itself going away (`DELETE_SELF`, `MOVE_SELF`) is reported too, and the
/// watcher adds it again once the directory is back.
fn watch_mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::ATTRIB
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
}

/// An inotify stream on `dir`, or why there is none.
fn notifier(dir: &Path) -> std::io::Result<EventStream<Vec<u8>>> {
    let inotify = Inotify::init()?;
    inotify.watches().add(dir, watch_mask())?;
    inotify.into_event_stream(vec![0u8; 16 * 1024])
}

/// The watcher: scans (on the blocking pool) when inotify reports a change in the directory,
/// and every `interval` as the safety net for what inotify cannot see (events lost to queue
/// overflow, a directory replaced, file systems without inotify). Publishes the state only
/// when it differs, and the problem list when anything was re-read.
async fn poll(
    mut loader: Loader,
    mut events: Option<EventStream<Vec<u8>>>,
    interval: Duration,
    state_tx: watch::Sender<Arc<ClusterState>>,
    errors_tx: watch::Sender<Arc<Vec<ClusterError>>>,
) {
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(10)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        let mut rewatch = false;
        tokio::select! {
            _ = ticker.tick() => {
                // The directory may be back after it vanished: watch it again.
                rewatch = events.is_none();
            }
            event = async {
                match events.as_mut() {
                    Some(s) => s.next().await,
                    None => std::future::pending().await,
                }
            } => match event {
                Some(Ok(ev)) => {
                    if ev.mask.intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED) {
                        events = None;
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!(dir = %loader.dir.display(), error = %e, "inotify failed; polling the cluster state directory until it can watch again");
                    events = None;
                }
                None => events = None,
            },
        }
        if rewatch {
            events = notifier(&loader.dir).ok();
        }
        let previous = state_tx.borrow().clone();
        let scanned = tokio::task::spawn_blocking(move || {
            let loaded = loader.scan().then(|| loader.assemble(&previous));
            (loader, loaded)
        })
        .await;
        let loaded = match scanned {
            Ok((l, loaded)) => {
                loader = l;
                loaded
            }
            Err(e) => {
                tracing::error!("cluster state watcher stopped: the directory scan failed: {e}");
                return;
            }
        };
        let Some(loaded) = loaded else { continue };
        log_changes(&errors_tx.borrow(), &loaded.errors);
        errors_tx.send_replace(Arc::new(loaded.errors));
        let state = loaded.state;
        state_tx.send_if_modified(|current| {
            if **current == state {
                false
            } else {
                tracing::info!(
                    host_subnets = state.host_subnets.len(),
                    net_namespaces = state.net_namespaces.len(),
                    cluster_network = state.cluster_network.is_some(),
                    "cluster state changed"
                );
                *current = Arc::new(state);
                true
            }
        });
    }
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ClusterError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)
            .map_err(|e| ClusterError::io(&tmp, "create", e))?;
        f.write_all(bytes)
            .and_then(|()| f.sync_all())
            .map_err(|e| ClusterError::io(&tmp, "write", e))?;
        fs::rename(&tmp, path).map_err(|e| ClusterError::io(path, "rename into place", e))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| ClusterError::io(dir, "sync", e))
}

/// A random RFC 4122 version 4 UUID for objects the agent creates.
pub fn new_uid() -> String {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        // No entropy syscall (very old kernel): time and pid still make a unique enough id for
        // a local object, which nothing relies on beyond being distinct.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        b = (t ^ (u128::from(std::process::id()) << 64)).to_le_bytes();
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The cluster-wide settings from the agent's configuration that the `default` ClusterNetwork
/// must agree with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNetworkSpec {
    /// Cluster networks with their host subnet lengths.
    pub cluster_networks: Vec<CidrEntry>,
    /// The service network.
    pub service_network: Ipv4Net,
    /// VXLAN UDP port.
    pub vxlan_port: u16,
    /// Overlay MTU.
    pub mtu: u32,
    /// Isolation mode (`pluginName`).
    pub mode: Mode,
}

impl ClusterNetworkSpec {
    /// The spec of an agent configuration.
    pub fn from_config(cfg: &Config) -> ClusterNetworkSpec {
        ClusterNetworkSpec {
            cluster_networks: cfg.cluster_networks.clone(),
            service_network: cfg.service_network,
            vxlan_port: cfg.vxlan_port,
            mtu: cfg.mtu,
            mode: cfg.mode(),
        }
    }

    /// The `pluginName` of a mode.
    pub fn plugin_name(mode: Mode) -> &'static str {
        match mode {
            Mode::Subnet => PLUGIN_SUBNET,
            Mode::Multitenant => PLUGIN_MULTITENANT,
            Mode::NetworkPolicy => PLUGIN_NETWORKPOLICY,
        }
    }

    /// The `default` ClusterNetwork this spec describes.
    pub fn to_object(&self) -> ClusterNetwork {
        ClusterNetwork::new(
            self.cluster_networks
                .iter()
                .map(|e| ClusterNetworkEntry {
                    cidr: e.cidr.to_string(),
                    host_subnet_length: u32::from(e.host_subnet_length),
                })
                .collect(),
            &self.service_network.to_string(),
            Some(Self::plugin_name(self.mode)),
            Some(u32::from(self.vxlan_port)),
            Some(self.mtu),
        )
    }

    /// The first field on which `cn` disagrees with this spec: (field, value in the object,
    /// value in the spec). Unset optional fields (`pluginName`, `mtu`) agree with anything.
    pub fn difference(&self, cn: &ClusterNetwork) -> Option<(&'static str, String, String)> {
        let show = |entries: &[CidrEntry]| {
            entries
                .iter()
                .map(|e| format!("{} (hostSubnetLength {})", e.cidr, e.host_subnet_length))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let entries = match cn.entries() {
            Ok(e) => show(&e),
            Err(e) => format!("an invalid list ({e})"),
        };
        let wanted = show(&self.cluster_networks);
        if entries != wanted {
            return Some(("clusterNetworks", entries, wanted));
        }
        if cn.service_net().ok() != Some(self.service_network) {
            return Some((
                "serviceNetwork",
                cn.service_network.clone(),
                self.service_network.to_string(),
            ));
        }
        let port = cn.vxlan_port().ok();
        if port != Some(self.vxlan_port) {
            let shown = cn
                .vxlan_port
                .map(|p| p.to_string())
                .unwrap_or_else(|| "unset (4789)".into());
            return Some(("vxlanPort", shown, self.vxlan_port.to_string()));
        }
        if let Some(mtu) = cn.mtu.filter(|m| *m != self.mtu) {
            return Some(("mtu", mtu.to_string(), self.mtu.to_string()));
        }
        if let Ok(Some(mode)) = cn.mode() {
            if mode != self.mode {
                return Some((
                    "pluginName",
                    cn.plugin_name.clone().unwrap_or_default(),
                    Self::plugin_name(self.mode).to_string(),
                ));
            }
        }
        None
    }
}

/// Prepares the state directory for this node's start, idempotently, and returns the state:
///
/// - creates `dir` if needed; tolerates files with problems as the running agent does (their
///   objects are missing, conflicting definitions are left out), but refuses
///   ([`ClusterError::Broken`]) when the ClusterNetwork or this node's HostSubnet is missing
///   while any file has a problem, since it may be in that file and writing another would
///   duplicate it; for the same reason a missing `default` NetNamespace is then not written;
/// - no ClusterNetwork: writes one from `spec`; one that disagrees with `spec`:
///   [`ClusterError::ConfigMismatch`] naming the field and both values;
/// - no HostSubnet for `node_name`: allocates the first free node subnet and writes
///   `hostsubnet-<node>.yaml` (hostIP `node_ip`, or 127.0.0.1 when not configured) with a new
///   uid; an existing one whose hostIP differs from a configured `node_ip` is rewritten when it
///   lives in `hostsubnet-<node>.yaml`, else [`ClusterError::HostIpMismatch`];
/// - no NetNamespace `default`: writes it with netid 0.
///
/// A second call with the same arguments writes nothing.
pub fn seed(
    dir: &Path,
    node_name: &str,
    node_ip: Option<Ipv4Addr>,
    spec: &ClusterNetworkSpec,
) -> Result<ClusterState, ClusterError> {
    fs::create_dir_all(dir).map_err(|e| ClusterError::io(dir, "create", e))?;
    let loaded = load_dir(dir);
    // Bad files elsewhere are tolerated as the running agent tolerates them; only what seeding
    // would otherwise write a second copy of must be readable.
    if !loaded.errors.is_empty() {
        let missing = if loaded.state.cluster_network.is_none() {
            Some("the ClusterNetwork \"default\"".to_string())
        } else if loaded.state.host_subnet_of(node_name).is_none() {
            Some(format!("this node's HostSubnet {node_name:?}"))
        } else {
            None
        };
        if let Some(missing) = missing {
            return Err(ClusterError::Broken {
                dir: dir.to_path_buf(),
                missing,
                errors: loaded.errors,
            });
        }
    }
    let mut state = loaded.state;
    let mut wrote = false;
    let with_uid = |obj: ClusterObject| {
        let mut obj = obj;
        obj.metadata_mut().uid = Some(new_uid());
        obj
    };

    match &state.cluster_network {
        None => {
            let cn = spec.to_object();
            let path = StandaloneSource::write_object(dir, &with_uid(cn.clone().into()))?;
            tracing::info!(file = %path.display(), "wrote the ClusterNetwork from the configuration");
            state.cluster_network = Some(cn);
            wrote = true;
        }
        Some(cn) => {
            if let Some((field, in_file, in_config)) = spec.difference(cn) {
                let file = loaded
                    .origins
                    .get(&(Kind::ClusterNetwork, cn.name().to_string()))
                    .cloned()
                    .unwrap_or_else(|| dir.to_path_buf());
                return Err(ClusterError::ConfigMismatch {
                    file,
                    field,
                    in_file,
                    in_config,
                });
            }
        }
    }

    let own = dir.join(StandaloneSource::file_name(Kind::HostSubnet, node_name));
    match state.host_subnet_of(node_name) {
        Some(hs) => {
            if let Some(ip) = node_ip.filter(|ip| hs.host_ip_addr().ok() != Some(*ip)) {
                let file = loaded
                    .origins
                    .get(&(Kind::HostSubnet, node_name.to_string()))
                    .cloned()
                    .unwrap_or_else(|| own.clone());
                if file != own {
                    return Err(ClusterError::HostIpMismatch {
                        file,
                        node: node_name.into(),
                        in_file: hs.host_ip.clone(),
                        in_config: ip.to_string(),
                        own,
                    });
                }
                let mut updated = hs.clone();
                tracing::info!(node = node_name, from = %hs.host_ip, to = %ip, "updating this node's HostSubnet hostIP");
                updated.host_ip = ip.to_string();
                StandaloneSource::write_object(dir, &updated.into())?;
                wrote = true;
            }
        }
        None => {
            let subnet = state
                .allocate_subnet()
                .ok_or_else(|| ClusterError::SubnetsExhausted {
                    node: node_name.into(),
                    networks: state
                        .cluster_entries()
                        .iter()
                        .map(|e| format!("{} with /{} node subnets", e.cidr, e.node_prefix()))
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
            let ip = node_ip.unwrap_or(FALLBACK_NODE_IP);
            let hs = HostSubnet::new(node_name, &ip.to_string(), &subnet.to_string());
            let path = StandaloneSource::write_object(dir, &with_uid(hs.into()))?;
            tracing::info!(file = %path.display(), node = node_name, %subnet, "allocated this node's subnet");
            wrote = true;
        }
    }

    if !state.net_namespaces.contains_key(DEFAULT_NAMESPACE) && !loaded.errors.is_empty() {
        tracing::error!(
            "the NetNamespace \"default\" cannot be read while the state directory has problems; \
             not writing one (it may be in a file that does not parse): pods of namespace \
             default cannot be added until it is readable"
        );
    } else if !state.net_namespaces.contains_key(DEFAULT_NAMESPACE) {
        let nn = NetNamespace::new(DEFAULT_NAMESPACE, 0);
        StandaloneSource::write_object(dir, &with_uid(nn.into()))?;
        wrote = true;
    }

    if wrote {
        Ok(load_dir(dir).state)
    } else {
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempDir(PathBuf);
    impl TempDir {
        fn new(tag: &str) -> TempDir {
            static N: AtomicU64 = AtomicU64::new(0);
            let p = std::env::temp_dir().join(format!(
                "sdn-cluster-unit-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn spec() -> ClusterNetworkSpec {
        ClusterNetworkSpec::from_config(&Config::default())
    }

    #[test]
    fn uid_is_v4_shaped_and_distinct() {
        let (a, b) = (new_uid(), new_uid());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!("89ab".contains(&a[19..20]), "{a}");
    }

    #[test]
    fn seed_writes_defaults_once() {
        let d = TempDir::new("seed");
        let st = seed(
            &d.0,
            "node-1",
            Some(Ipv4Addr::new(192, 168, 1, 10)),
            &spec(),
        )
        .unwrap();
        assert_eq!(st.subnet_of("node-1").unwrap().to_string(), "10.128.0.0/23");
        assert_eq!(st.vnid_of("default"), Some(0));
        let cn = st.cluster_network.as_ref().unwrap();
        assert_eq!(cn.plugin_name.as_deref(), Some(PLUGIN_MULTITENANT));
        assert!(cn.metadata.uid.is_some());
        let mut names: Vec<String> = fs::read_dir(&d.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "clusternetwork-default.yaml",
                "hostsubnet-node-1.yaml",
                "netnamespace-default.yaml"
            ]
        );
        let stamps: Vec<_> = names
            .iter()
            .map(|n| Stamp::of(&fs::metadata(d.0.join(n)).unwrap()))
            .collect();
        let again = seed(
            &d.0,
            "node-1",
            Some(Ipv4Addr::new(192, 168, 1, 10)),
            &spec(),
        )
        .unwrap();
        assert_eq!(again, st);
        let after: Vec<_> = names
            .iter()
            .map(|n| Stamp::of(&fs::metadata(d.0.join(n)).unwrap()))
            .collect();
        assert_eq!(stamps, after, "second seed rewrote a file");
        // A second node gets the next subnet.
        let st2 = seed(&d.0, "node-2", None, &spec()).unwrap();
        assert_eq!(
            st2.subnet_of("node-2").unwrap().to_string(),
            "10.128.2.0/23"
        );
        assert_eq!(st2.host_ip_of("node-2"), Some(FALLBACK_NODE_IP));
    }

    #[test]
    fn seed_reports_config_mismatch_with_both_values() {
        let d = TempDir::new("mismatch");
        seed(&d.0, "n", None, &spec()).unwrap();
        let mut other = spec();
        other.vxlan_port = 4790;
        let e = seed(&d.0, "n", None, &other).unwrap_err().to_string();
        assert!(e.contains("clusternetwork-default.yaml"), "{e}");
        assert!(
            e.contains("has vxlanPort 4789 but the agent is configured with 4790"),
            "{e}"
        );
        let mut other = spec();
        other.cluster_networks[0].host_subnet_length = 8;
        let e = seed(&d.0, "n", None, &other).unwrap_err().to_string();
        assert!(
            e.contains("has clusterNetworks 10.128.0.0/14 (hostSubnetLength 9) but the agent is configured with 10.128.0.0/14 (hostSubnetLength 8)"),
            "{e}"
        );
        let mut other = spec();
        other.mode = Mode::Subnet;
        let e = seed(&d.0, "n", None, &other).unwrap_err().to_string();
        assert!(
            e.contains("pluginName redhat/openshift-ovs-multitenant"),
            "{e}"
        );
    }

    #[test]
    fn seed_updates_own_host_ip_and_refuses_broken_dirs() {
        let d = TempDir::new("hostip");
        seed(&d.0, "n", Some(Ipv4Addr::new(10, 0, 0, 1)), &spec()).unwrap();
        let st = seed(&d.0, "n", Some(Ipv4Addr::new(10, 0, 0, 2)), &spec()).unwrap();
        assert_eq!(st.host_ip_of("n"), Some(Ipv4Addr::new(10, 0, 0, 2)));
        assert_eq!(st.subnet_of("n").unwrap().to_string(), "10.128.0.0/23");
        // A bad file elsewhere is tolerated, as the running agent tolerates it...
        fs::write(d.0.join("bad.yaml"), "kind: [").unwrap();
        let st = seed(&d.0, "n", None, &spec()).unwrap();
        assert_eq!(st.subnet_of("n").unwrap().to_string(), "10.128.0.0/23");
        // ...but not while this node's HostSubnet (or the ClusterNetwork) could be in it.
        let e = seed(&d.0, "other", None, &spec()).unwrap_err().to_string();
        assert!(
            e.contains("cannot start: this node's HostSubnet \"other\" cannot be read while 1 file problem(s) remain"),
            "{e}"
        );
        assert!(e.contains("bad.yaml"), "{e}");
        fs::remove_file(d.0.join("clusternetwork-default.yaml")).unwrap();
        let e = seed(&d.0, "n", None, &spec()).unwrap_err().to_string();
        assert!(
            e.contains("the ClusterNetwork \"default\" cannot be read"),
            "{e}"
        );
        assert!(!d.0.join("clusternetwork-default.yaml").exists());
    }

    #[test]
    fn seed_reports_exhaustion() {
        let d = TempDir::new("full");
        let mut s = spec();
        s.cluster_networks = vec![CidrEntry {
            cidr: "10.128.0.0/22".parse().unwrap(),
            host_subnet_length: 9,
        }];
        seed(&d.0, "a", None, &s).unwrap();
        seed(&d.0, "b", None, &s).unwrap();
        let e = seed(&d.0, "c", None, &s).unwrap_err().to_string();
        assert!(
            e.contains("no free node subnet for node \"c\" in the cluster networks (10.128.0.0/22 with /23 node subnets)"),
            "{e}"
        );
    }

    #[test]
    fn loader_keeps_last_good_objects_and_reports_duplicates() {
        let d = TempDir::new("loader");
        seed(&d.0, "n", None, &spec()).unwrap();
        let mut loader = Loader::new(d.0.clone());
        assert!(loader.scan());
        assert!(!loader.scan(), "nothing changed");
        let good = loader.assemble(&ClusterState::default());
        assert!(good.errors.is_empty(), "{:?}", good.errors);
        // Break the NetNamespace file: the object stays, the error names file and field.
        let nn = d.0.join("netnamespace-default.yaml");
        let text = fs::read_to_string(&nn)
            .unwrap()
            .replace("netid: 0", "netid: 99999999");
        fs::write(&nn, text).unwrap();
        assert!(loader.scan());
        let l = loader.assemble(&ClusterState::default());
        assert_eq!(l.state, good.state);
        let e = l.errors[0].to_string();
        assert!(
            e.contains(
                "netnamespace-default.yaml: NetNamespace \"default\": field netid \"99999999\""
            ),
            "{e}"
        );
        // A second definition elsewhere that says something else never changes the VNID in
        // effect; a fresh start (nothing in effect) uses neither.
        fs::write(
            d.0.join("zz.json"),
            r#"{"apiVersion":"network.openshift.io/v1","kind":"NetNamespace","metadata":{"name":"t"},"netname":"t","netid":15}"#,
        )
        .unwrap();
        assert!(loader.scan());
        let in_effect = loader.assemble(&good.state).state;
        assert_eq!(in_effect.vnid_of("t"), Some(15));
        let aa = d.0.join("aa.yaml");
        fs::write(
            &aa,
            "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nmetadata: {name: t, uid: x}\nnetname: t\nnetid: 16\n",
        )
        .unwrap();
        assert!(loader.scan());
        let l = loader.assemble(&in_effect);
        assert_eq!(l.state.vnid_of("t"), Some(15), "the VNID in effect stays");
        let conflict = l
            .errors
            .iter()
            .map(ToString::to_string)
            .find(|e| e.contains("defined differently"))
            .unwrap();
        assert!(
            conflict.contains("aa.yaml (netid 16) and ")
                && conflict.contains("zz.json (netid 15): keeping the one in effect (netid 15)"),
            "{conflict}"
        );
        let fresh = loader.assemble(&ClusterState::default());
        assert_eq!(fresh.state.vnid_of("t"), None, "a fresh start uses neither");
        assert!(fresh
            .errors
            .iter()
            .any(|e| e.to_string().contains("none of them is used")));
        // The same content twice (metadata aside) is a duplicate: the first file is used.
        fs::write(
            &aa,
            "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nmetadata: {name: t, uid: x}\nnetname: t\nnetid: 15\n",
        )
        .unwrap();
        assert!(loader.scan());
        let l = loader.assemble(&ClusterState::default());
        assert_eq!(l.state.vnid_of("t"), Some(15));
        let dup = l
            .errors
            .iter()
            .map(ToString::to_string)
            .find(|e| e.contains("defined in both"))
            .unwrap();
        assert!(dup.contains("aa.yaml") && dup.contains("zz.json"), "{dup}");
        // A HostSubnet outside the cluster network is left out and reported.
        fs::write(
            d.0.join("hs.yaml"),
            "apiVersion: network.openshift.io/v1\nkind: HostSubnet\nmetadata: {name: m}\nhost: m\nhostIP: 10.0.0.9\nsubnet: 10.200.0.0/23\n",
        )
        .unwrap();
        assert!(loader.scan());
        let l = loader.assemble(&ClusterState::default());
        assert!(l.state.host_subnet_of("m").is_none());
        assert!(l.errors.iter().any(|e| e.to_string().contains("hs.yaml: HostSubnet \"m\": field subnet \"10.200.0.0/23\": not inside any cluster network")), "{:?}", l.errors);
    }
}
