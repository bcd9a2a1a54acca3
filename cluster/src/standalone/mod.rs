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
//! The parts: `load` (which files count, their objects, the duplicate and problem rules),
//! `write` (atomic one-object files, uids), `seed` (a node's first start), and here the source
//! itself: the watcher and poller that publish a new state after every change.
//!
//! [`write_object`]: StandaloneSource::write_object

use std::fs;

use std::net::Ipv4Addr;

use std::path::{Path, PathBuf};

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use inotify::{EventMask, EventStream, Inotify, WatchMask};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::types::{to_yaml, ClusterObject, Kind};

use super::{ClusterError, ClusterSource, ClusterState};

mod load;
pub use load::{broken_net_namespace, MAX_STATE_FILE_BYTES};
pub(crate) use load::{load_dir, log_changes, Loader};
mod write;
pub use write::new_uid;
pub(crate) use write::write_atomic;
mod seed;
pub use seed::{seed, ClusterNetworkSpec};

/// How often the directory is scanned besides inotify's wake-ups (the safety net).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(2);

/// The node IP written into a new HostSubnet when none is configured (a one-machine node).
pub const FALLBACK_NODE_IP: Ipv4Addr = Ipv4Addr::LOCALHOST;

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
        let stale = crate::files::remove_stale_temps(&dir);
        if stale > 0 {
            tracing::info!(dir = %dir.display(), files = stale, "removed the temporary files of writes cut off by a kill");
        }
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

#[cfg(test)]
mod tests;
