//! Tenant administration in standalone mode: what `sdnctl` does to the cluster state directory.
//!
//! A tenant is a namespace with a NetNamespace (its VNID). In standalone mode the NetNamespaces
//! are files in the agent's state directory, which the agent watches; this module edits those files
//! and nothing else (the agent applies the change as soon as inotify reports the write). One run:
//!
//! 1. takes an exclusive lock on `<dir>/.sdnctl.lock` (bounded wait), so concurrent runs are
//!    serialised and never hand out the same VNID (dot files are ignored by the agent's watcher);
//! 2. reads the directory once ([`StandaloneSource::load`]); problems in files are reported, and
//!    refused only when a file that may hold NetNamespaces cannot be read (then the VNIDs in use
//!    are unknown and a fresh one could collide);
//! 3. builds a [`Tenancy`] from the NetNamespaces and applies the command ([`plan`], pure);
//! 4. writes back only the NetNamespace that changed (atomically, [`StandaloneSource::write_object`])
//!    or deletes its file.
//!
//! Allocation: fresh VNIDs come from [`Tenancy`] (from 10 up, never one in use). Two additions
//! make "in use" mean what an administrator expects: VNIDs still recorded on local pod ports
//! (pods of a namespace deleted with `--force` keep their VNID) count as in use, and the walk's
//! position (the last VNID handed out, or the largest seen in use) is remembered in
//! `<dir>/.sdnctl.last-vnid`, so it resumes there and a VNID just released (by delete, join,
//! isolate or make-global) is not handed to the next tenant at once.
//!
//! Local pods come from OVSDB ([`local_pods`]): Interface rows whose `external_ids` carry the
//! pod's sandbox and namespace (read with [`PodTenancy`]).
//!
//! Limits: sdnctl only edits NetNamespaces that live in its own files (`netnamespace-<name>.yaml`,
//! the agent's and sdnctl's naming); one defined in a hand-written file elsewhere is refused with
//! a message naming the file. Pod VNIDs are those of this node only.
//!
//! Why one file of this size: the command's plan and its execution against the directory share
//! every error case (the messages sdnctl prints); a quarter of the file is its unit tests. The
//! VNID semantics themselves (allocation, held VNIDs, the walk) are `multitenant::Tenancy`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use multitenant::admin::{self, PodsOfNamespace, Refusal};
use multitenant::{Tenancy, Vnid};
use serde::Serialize;

use crate::ports::PodTenancy;
use crate::standalone::new_uid;
use crate::types::{parse_objects, Format};
use crate::validate::dns1123_label;
use crate::StandaloneSource;
use crate::{ClusterError, ClusterObject, ClusterState, Kind, NetNamespace};

/// The lock file that serialises sdnctl runs on one state directory.
pub const LOCK_FILE: &str = ".sdnctl.lock";

/// Where the last VNID handed out is remembered.
pub const LAST_VNID_FILE: &str = ".sdnctl.last-vnid";

/// How long a run waits for another run's lock.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(15);

/// A tenant command (decided by `multitenant::admin`).
pub use multitenant::admin::Command as TenantCommand;

/// The pods of this node, from OVSDB.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LocalPods {
    /// Pods per namespace (distinct sandboxes).
    pub per_namespace: BTreeMap<String, usize>,
    /// The VNIDs recorded on pod ports (`external_ids:vnid`).
    pub vnids: BTreeSet<u32>,
}

impl LocalPods {
    /// Counts pods from the `external_ids` of Interface rows; rows without both a sandbox and a
    /// namespace are not pods.
    pub fn from_external_ids<'a, I>(rows: I) -> LocalPods
    where
        I: IntoIterator<Item = &'a BTreeMap<String, String>>,
    {
        let mut sandboxes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut vnids = BTreeSet::new();
        for record in rows.into_iter().filter_map(PodTenancy::from_external_ids) {
            if record.namespace.is_empty() {
                continue;
            }
            sandboxes
                .entry(record.namespace)
                .or_default()
                .insert(record.sandbox);
            if let Some(v) = record.vnid {
                vnids.insert(v.id());
            }
        }
        LocalPods {
            per_namespace: sandboxes.into_iter().map(|(n, s)| (n, s.len())).collect(),
            vnids,
        }
    }

    /// Local pods of `namespace`.
    pub fn count(&self, namespace: &str) -> usize {
        self.per_namespace.get(namespace).copied().unwrap_or(0)
    }
}

/// What is known about local pods: counted, or unknown and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodCounts {
    /// Read from OVSDB.
    Known(LocalPods),
    /// Not read; the reason (no OVSDB target, OVSDB unreachable...).
    Unknown(String),
}

impl PodCounts {
    /// The pods, when known.
    pub fn known(&self) -> Option<&LocalPods> {
        match self {
            PodCounts::Known(p) => Some(p),
            PodCounts::Unknown(_) => None,
        }
    }
}

/// Why a tenant command was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    /// The state directory cannot be listed.
    #[error("state directory {}: cannot read it ({reason}); pass the agent's state directory (--state-dir DIR, or --config FILE whose clusterState is standalone:DIR)", dir.display())]
    StateDir {
        /// The directory.
        dir: PathBuf,
        /// What failed.
        reason: String,
    },
    /// The state holds a NetNamespace the tenancy rules reject.
    #[error("the state directory holds an invalid NetNamespace: {0}")]
    InvalidState(String),
    /// A name is not a namespace name.
    #[error("bad namespace name {name:?}: {reason}")]
    BadName {
        /// The name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The namespace has no NetNamespace.
    #[error("unknown namespace {name:?}: it has no NetNamespace in {}; create it with `sdnctl create {name}` (or list them with `sdnctl namespaces`)", dir.display())]
    Unknown {
        /// The namespace.
        name: String,
        /// The state directory.
        dir: PathBuf,
    },
    /// `create` of a namespace that exists.
    #[error("namespace {name:?} already exists with VNID {vnid}; change its VNID with join, isolate or make-global")]
    Exists {
        /// The namespace.
        name: String,
        /// Its VNID.
        vnid: u32,
    },
    /// `isolate` of `default`.
    #[error("namespace \"default\" is global and cannot be isolated (every namespace must keep reaching it)")]
    CannotIsolateDefault,
    /// `delete` of `default`.
    #[error("namespace \"default\" cannot be deleted: it is the cluster's global namespace")]
    CannotDeleteDefault,
    /// `join` of a namespace with itself.
    #[error("namespace {name:?} cannot join itself; name another namespace")]
    JoinSelf {
        /// The namespace.
        name: String,
    },
    /// Every tenant VNID is in use.
    #[error("no free VNID: {0}; delete unused namespaces first")]
    Exhausted(String),
    /// `delete` while local pods use the namespace.
    #[error("refusing to delete namespace {name:?}: {pods} local pod(s) still use it (they would keep VNID {vnid}); delete the pods first, or pass --force")]
    HasPods {
        /// The namespace.
        name: String,
        /// How many pods.
        pods: usize,
        /// Its VNID.
        vnid: u32,
    },
    /// `delete` when the local pods cannot be counted.
    #[error("refusing to delete namespace {name:?} without knowing whether local pods use it ({reason}); pass --force to delete it anyway")]
    PodsUnknown {
        /// The namespace.
        name: String,
        /// Why they are unknown.
        reason: String,
    },
    /// A file that may hold NetNamespaces cannot be read, so the VNIDs in use are unknown.
    #[error("refusing to change NetNamespaces while a state file that may hold some is broken (the VNIDs in use are unknown): {problem}; fix or remove that file and retry")]
    Unreadable {
        /// The problem.
        problem: ClusterError,
    },
    /// The NetNamespace is not in sdnctl's own file.
    #[error("NetNamespace {name:?} is defined in {}, not alone in {}: sdnctl edits only its own files; move it to {} (alone) or edit it by hand", found.display(), own.display(), own.display())]
    ForeignFile {
        /// The namespace.
        name: String,
        /// Where it is defined (or what holds the own file name).
        found: PathBuf,
        /// The file sdnctl edits.
        own: PathBuf,
    },
    /// `create` when sdnctl's file name for the namespace holds something else.
    #[error("cannot create namespace {name:?}: {} exists but does not define NetNamespace {name:?}; remove or rename that file, then retry", own.display())]
    OwnFileTaken {
        /// The namespace.
        name: String,
        /// The file.
        own: PathBuf,
    },
    /// Taking the lock failed.
    #[error("{}: cannot lock: {source}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Another run holds the lock too long.
    #[error("{}: another sdnctl has held the lock for more than {} s; retry, or check for a hung sdnctl", path.display(), LOCK_TIMEOUT.as_secs())]
    LockTimeout {
        /// The lock file.
        path: PathBuf,
    },
    /// Reading or writing a state file failed.
    #[error("{0}")]
    Write(#[source] ClusterError),
    /// Reading or writing sdnctl's own bookkeeping file failed.
    #[error("{}: cannot {op}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was attempted.
        op: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// OVSDB could not be read.
    #[error("ovsdb {target}: {reason}")]
    Ovsdb {
        /// The target.
        target: String,
        /// What failed.
        reason: String,
    },
}

/// One namespace's change, as printed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// The namespace.
    pub namespace: String,
    /// The VNID before (`None`: created).
    pub from: Option<u32>,
    /// The VNID after (`None`: deleted).
    pub to: Option<u32>,
    /// What happened, e.g. `joined tenant-a`, `isolated`, `already global`.
    pub reason: String,
    /// Whether the state directory was changed.
    pub changed: bool,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = &self.namespace;
        match (self.from, self.to) {
            (None, Some(to)) => write!(f, "{ns}: created with VNID {to} ({})", self.reason),
            (Some(from), None) => write!(f, "{ns}: deleted, was VNID {from} ({})", self.reason),
            (Some(from), Some(to)) if !self.changed => {
                debug_assert_eq!(from, to);
                write!(f, "{ns}: VNID {to}, unchanged ({})", self.reason)
            }
            (Some(from), Some(to)) => write!(f, "{ns}: VNID {from} -> {to} ({})", self.reason),
            (None, None) => write!(f, "{ns}: {}", self.reason),
        }
    }
}

/// What a command will do to the state directory ([`plan`]'s result).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The change, as reported.
    pub change: Change,
    /// The NetNamespace to write, if any.
    pub write: Option<NetNamespace>,
    /// The NetNamespace to delete, if any.
    pub delete: Option<String>,
    /// A VNID freshly allocated.
    pub allocated: Option<u32>,
    /// Where the allocation walk stands after this command, when it moved: the VNID allocated,
    /// else the largest tenant VNID in use before the command (so one released by this very
    /// command, e.g. the old VNID of a namespace that joined another, is not handed out next).
    pub remember: Option<u32>,
}

/// Checks that `name` is a namespace name (a DNS-1123 label).
pub fn check_name(name: &str) -> Result<(), TenantError> {
    dns1123_label(name).map_err(|reason| TenantError::BadName {
        name: name.to_string(),
        reason,
    })
}

/// Decides what `cmd` does to `state` (pure). `pods` are the local pods; `last` the last VNID
/// handed out (the allocation walk resumes after it). `dir` only names the directory in errors.
pub fn plan_change(
    state: &ClusterState,
    cmd: &TenantCommand,
    pods: &PodCounts,
    last: Option<u32>,
    dir: &Path,
) -> Result<Plan, TenantError> {
    let name = cmd.name();
    check_name(name)?;
    if let TenantCommand::Join { other, .. } = cmd {
        check_name(other)?;
    }
    let unknown = |n: &str| TenantError::Unknown {
        name: n.to_string(),
        dir: dir.to_path_buf(),
    };
    let globals: Vec<&str> = match cmd {
        TenantCommand::Create { global: true, .. } => vec![name],
        _ => Vec::new(),
    };
    let mut tenancy = Tenancy::new(globals);
    let assignments: Vec<(String, u32)> = state
        .net_namespaces
        .values()
        .map(|n| (n.name().to_string(), n.net_id))
        .collect();
    // Validated NetNamespaces have 24-bit netids, so this only fails on a hand-built state.
    let load = |t: &mut Tenancy, a: Vec<(String, u32)>| {
        t.load(a)
            .map_err(|e| TenantError::InvalidState(e.to_string()))
    };
    // Only tenant VNIDs matter to the walk (loading 2^24-1, the VNID of pods of an unknown
    // tenant, would restart it from 10).
    let tenant_range = multitenant::FIRST_TENANT_VNID..=Vnid::LAST_TENANT;
    load(&mut tenancy, assignments)?;
    // Resume the walk after the last VNID handed out.
    if let Some(last) = last.filter(|v| tenant_range.contains(v)) {
        tenancy.resume_after(last);
    }
    // VNIDs on local pod ports stay in use. Only the allocating commands read pods; holding also
    // moves the walk past the largest, which is harmless.
    if let PodCounts::Known(p) = pods {
        if cmd.needs_pods() {
            tenancy.hold(
                p.vnids
                    .iter()
                    .filter(|v| tenant_range.contains(*v))
                    .filter_map(|v| Vnid::new(*v)),
            );
        }
    }
    let local = match pods {
        PodCounts::Known(p) => PodsOfNamespace::Known(p.count(name)),
        PodCounts::Unknown(reason) => PodsOfNamespace::Unknown(reason),
    };
    let d = admin::decide(&mut tenancy, cmd, local).map_err(|r| match r {
        Refusal::Exists(v) => TenantError::Exists {
            name: name.to_string(),
            vnid: v.id(),
        },
        Refusal::Unknown(n) => unknown(&n),
        Refusal::CannotIsolateDefault => TenantError::CannotIsolateDefault,
        Refusal::CannotDeleteDefault => TenantError::CannotDeleteDefault,
        Refusal::JoinSelf => TenantError::JoinSelf {
            name: name.to_string(),
        },
        Refusal::HasPods { pods, vnid } => TenantError::HasPods {
            name: name.to_string(),
            pods,
            vnid: vnid.id(),
        },
        Refusal::PodsUnknown(reason) => TenantError::PodsUnknown {
            name: name.to_string(),
            reason,
        },
        Refusal::Exhausted(e) => TenantError::Exhausted(e),
    })?;
    let change = Change {
        namespace: name.to_string(),
        from: d.from.map(Vnid::id),
        to: d.to.map(Vnid::id),
        reason: d.reason,
        changed: d.changed,
    };
    let allocated = d.allocated.map(Vnid::id);
    let to = d.to.map(Vnid::id);
    let mut planned = match (cmd, to) {
        (TenantCommand::Create { .. }, Some(v)) => {
            let mut nn = NetNamespace::new(name, v);
            nn.metadata.uid = Some(new_uid());
            Plan {
                change,
                write: Some(nn),
                delete: None,
                allocated,
                remember: None,
            }
        }
        (TenantCommand::Delete { .. }, _) | (_, None) => Plan {
            change,
            write: None,
            delete: Some(name.to_string()),
            allocated: None,
            remember: None,
        },
        (_, Some(v)) => {
            // The existing object (uid, labels, egress IPs kept) with a new netid.
            let write = change.changed.then(|| {
                let mut nn = state
                    .net_namespaces
                    .get(name)
                    .cloned()
                    .unwrap_or_else(|| NetNamespace::new(name, v));
                nn.net_id = v;
                nn
            });
            Plan {
                change,
                write,
                delete: None,
                allocated,
                remember: None,
            }
        }
    };
    let high = state
        .net_namespaces
        .values()
        .map(|n| n.net_id)
        .filter(|v| tenant_range.contains(v))
        .max();
    planned.remember = planned
        .allocated
        .or_else(|| high.max(last))
        .filter(|v| Some(*v) != last);
    Ok(planned)
}

/// Whether a problem of the state directory could hide NetNamespaces (so the VNIDs in use are
/// not all known): a file that cannot be read, or a broken file that mentions NetNamespace.
/// Problems that only concern other kinds (a HostSubnet outside the cluster network, a file of
/// HostSubnets that does not parse) do not block tenant commands.
pub fn hides_net_namespaces(problem: &ClusterError) -> bool {
    let file = match problem {
        ClusterError::Io { path, .. } => return path.is_file() || !path.exists(),
        ClusterError::Parse { file, .. } => file,
        ClusterError::Conflict { kind, .. } => return *kind == Kind::NetNamespace,
        ClusterError::Invalid { kind, file, .. } => {
            if *kind == Kind::NetNamespace {
                return true;
            }
            file
        }
        _ => return false,
    };
    match fs::read_to_string(file) {
        Ok(text) => text.to_ascii_lowercase().contains("netnamespace"),
        Err(_) => true,
    }
}

/// The state directory read once: its state and the problems found.
#[derive(Debug)]
pub struct Snapshot {
    /// The objects.
    pub state: ClusterState,
    /// Problems with files (reported, not fatal).
    pub problems: Vec<ClusterError>,
}

/// Reads the state directory once.
pub fn load(dir: &Path) -> Result<Snapshot, TenantError> {
    let (state, problems) = StandaloneSource::load(dir).map_err(|e| state_dir_error(dir, e))?;
    Ok(Snapshot { state, problems })
}

fn state_dir_error(dir: &Path, e: ClusterError) -> TenantError {
    let reason = match e {
        ClusterError::Io { source, .. } => source.to_string(),
        other => other.to_string(),
    };
    TenantError::StateDir {
        dir: dir.to_path_buf(),
        reason,
    }
}

/// An exclusive lock on `<dir>/.sdnctl.lock`, released on drop.
#[derive(Debug)]
pub struct Lock {
    _file: fs::File,
}

/// Takes the exclusive lock of the state directory, waiting at most [`LOCK_TIMEOUT`].
pub fn lock(dir: &Path) -> Result<Lock, TenantError> {
    lock_within(dir, LOCK_TIMEOUT)
}

fn lock_within(dir: &Path, timeout: Duration) -> Result<Lock, TenantError> {
    let path = dir.join(LOCK_FILE);
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(&path)
        .map_err(|source| TenantError::Lock {
            path: path.clone(),
            source,
        })?;
    let deadline = Instant::now() + timeout;
    loop {
        // std's file lock is flock(2) on Linux.
        match file.try_lock() {
            Ok(()) => return Ok(Lock { _file: file }),
            Err(fs::TryLockError::WouldBlock) => {}
            Err(fs::TryLockError::Error(source)) => return Err(TenantError::Lock { path, source }),
        }
        if Instant::now() >= deadline {
            return Err(TenantError::LockTimeout { path });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The last VNID handed out in `dir`, if recorded (a missing or garbled file counts as none:
/// the walk then resumes after the largest VNID in use).
pub fn last_vnid(dir: &Path) -> Option<u32> {
    fs::read_to_string(dir.join(LAST_VNID_FILE))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

fn write_last_vnid(dir: &Path, vnid: u32) -> Result<(), TenantError> {
    let path = dir.join(LAST_VNID_FILE);
    let tmp = dir.join(format!("{LAST_VNID_FILE}.tmp-{}", std::process::id()));
    let io = |op, source| TenantError::Io {
        path: path.clone(),
        op,
        source,
    };
    let mut f = fs::File::create(&tmp).map_err(|e| io("create", e))?;
    f.write_all(format!("{vnid}\n").as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| io("write", e))?;
    fs::rename(&tmp, &path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io("rename into place", e)
    })
}

/// Checks that the NetNamespace `name` lives alone in sdnctl's own file, so rewriting or
/// deleting that file changes exactly this object.
fn check_own_file(dir: &Path, name: &str, problems: &[ClusterError]) -> Result<(), TenantError> {
    let own = dir.join(StandaloneSource::file_name(Kind::NetNamespace, name));
    for p in problems {
        if let ClusterError::Duplicate {
            kind: Kind::NetNamespace,
            name: n,
            first,
            second,
        } = p
        {
            if n == name {
                let found = if *first == own { second } else { first };
                return Err(TenantError::ForeignFile {
                    name: name.to_string(),
                    found: found.clone(),
                    own,
                });
            }
        }
    }
    let foreign = |found: PathBuf| TenantError::ForeignFile {
        name: name.to_string(),
        found,
        own: own.clone(),
    };
    match file_objects(&own) {
        Some(objects)
            if objects.len() == 1
                && objects[0].kind() == Kind::NetNamespace
                && objects[0].name() == name =>
        {
            Ok(())
        }
        _ => Err(foreign(
            find_definition(dir, name).unwrap_or_else(|| dir.to_path_buf()),
        )),
    }
}

/// The objects of one state file, if it reads and parses.
fn file_objects(path: &Path) -> Option<Vec<ClusterObject>> {
    let text = fs::read_to_string(path).ok()?;
    let format = if path.extension().is_some_and(|e| e == "json") {
        Format::Json
    } else {
        Format::Yaml
    };
    parse_objects(&text, format).ok()
}

/// The state file that defines NetNamespace `name` (the first in name order, as the agent
/// picks it).
fn find_definition(dir: &Path, name: &str) -> Option<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default();
            !n.starts_with('.')
                && (n.ends_with(".yaml") || n.ends_with(".yml") || n.ends_with(".json"))
        })
        .collect();
    files.sort();
    files.into_iter().find(|f| {
        file_objects(f).is_some_and(|objs| {
            objs.iter()
                .any(|o| o.kind() == Kind::NetNamespace && o.name() == name)
        })
    })
}

/// The result of a command.
#[derive(Debug)]
pub struct Outcome {
    /// What changed.
    pub change: Change,
    /// The file written or deleted (None when nothing changed).
    pub file: Option<PathBuf>,
    /// Problems of the state directory that did not stop the command.
    pub problems: Vec<ClusterError>,
}

/// Takes the state directory's lock and reads it; a missing directory fails before a lock file
/// is created in it.
fn open_locked(dir: &Path) -> Result<(Lock, Snapshot), TenantError> {
    fs::read_dir(dir).map_err(|e| TenantError::StateDir {
        dir: dir.to_path_buf(),
        reason: e.to_string(),
    })?;
    let held = lock(dir)?;
    Ok((held, load(dir)?))
}

/// Runs `cmd` on the state directory `dir` under its lock: reads, plans, writes.
pub fn execute(dir: &Path, cmd: &TenantCommand, pods: &PodCounts) -> Result<Outcome, TenantError> {
    let (_lock, snap) = open_locked(dir)?;
    if let Some(p) = snap.problems.iter().find(|p| hides_net_namespaces(p)) {
        return Err(TenantError::Unreadable { problem: p.clone() });
    }
    let plan = plan_change(&snap.state, cmd, pods, last_vnid(dir), dir)?;
    let name = cmd.name();
    // Check before writing anything that the one file to change holds exactly this object.
    if plan.write.is_some() || plan.delete.is_some() {
        let own = dir.join(StandaloneSource::file_name(Kind::NetNamespace, name));
        if snap.state.net_namespaces.contains_key(name) {
            check_own_file(dir, name, &snap.problems)?;
        } else if own.exists() {
            return Err(TenantError::OwnFileTaken {
                name: name.to_string(),
                own,
            });
        }
    }
    if let Some(v) = plan.remember.filter(|_| plan.change.changed) {
        write_last_vnid(dir, v)?;
    }
    let mut file = None;
    if let Some(nn) = &plan.write {
        let path = StandaloneSource::write_object(dir, &ClusterObject::NetNamespace(nn.clone()))
            .map_err(TenantError::Write)?;
        file = Some(path);
    }
    if let Some(n) = &plan.delete {
        StandaloneSource::delete_object(dir, Kind::NetNamespace, n).map_err(TenantError::Write)?;
        file = Some(dir.join(StandaloneSource::file_name(Kind::NetNamespace, n)));
    }
    Ok(Outcome {
        change: plan.change,
        file,
        problems: snap.problems,
    })
}

/// What `sdnctl multicast NAME on|off` did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MulticastChange {
    /// The namespace.
    pub namespace: String,
    /// Its VNID.
    pub vnid: u32,
    /// The annotation's value now.
    pub annotated: bool,
    /// Whether the file changed.
    pub changed: bool,
    /// Whether multicast is in effect for the VNID (every namespace on it annotated).
    pub in_effect: bool,
    /// The namespaces sharing the VNID that lack the annotation (why it is not in effect).
    pub blocked_by: Vec<String>,
    /// The file written.
    pub file: Option<PathBuf>,
    /// Problems of the state directory that did not stop the command.
    #[serde(skip)]
    pub problems: Vec<ClusterError>,
}

impl fmt::Display for MulticastChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "namespace {}: multicast {}{}",
            self.namespace,
            if self.annotated { "on" } else { "off" },
            if self.changed { "" } else { " (unchanged)" }
        )?;
        if self.annotated && !self.in_effect {
            write!(
                f,
                "; not in effect: VNID {} is shared with {}, which {} not annotated (multicast \
                 needs every namespace of the VNID)",
                self.vnid,
                self.blocked_by.join(", "),
                if self.blocked_by.len() == 1 {
                    "is"
                } else {
                    "are"
                }
            )?;
        }
        Ok(())
    }
}

/// `sdnctl multicast NAME on|off`: sets or removes NAME's
/// `netnamespace.network.openshift.io/multicast-enabled: "true"` annotation in its file, under
/// the directory's lock (the NetNamespace's VNID and everything else are kept).
pub fn set_multicast(dir: &Path, name: &str, on: bool) -> Result<MulticastChange, TenantError> {
    check_name(name)?;
    let (_lock, snap) = open_locked(dir)?;
    let mut nn = snap
        .state
        .net_namespaces
        .get(name)
        .cloned()
        .ok_or_else(|| TenantError::Unknown {
            name: name.to_string(),
            dir: dir.to_path_buf(),
        })?;
    let changed = nn.multicast_enabled() != on;
    let mut file = None;
    if changed {
        check_own_file(dir, name, &snap.problems)?;
        let notes = nn.metadata.annotations.get_or_insert_with(Default::default);
        if on {
            notes.insert(flows::MULTICAST_ANNOTATION.to_string(), "true".to_string());
        } else {
            notes.remove(flows::MULTICAST_ANNOTATION);
        }
        if notes.is_empty() {
            nn.metadata.annotations = None;
        }
        file = Some(
            StandaloneSource::write_object(dir, &ClusterObject::NetNamespace(nn.clone()))
                .map_err(TenantError::Write)?,
        );
    }
    let blocked_by: Vec<String> = snap
        .state
        .net_namespaces
        .values()
        .filter(|o| o.net_id == nn.net_id && o.net_name != name && !o.multicast_enabled())
        .map(|o| o.net_name.clone())
        .collect();
    Ok(MulticastChange {
        namespace: name.to_string(),
        vnid: nn.net_id,
        annotated: on,
        changed,
        in_effect: on && blocked_by.is_empty(),
        blocked_by,
        file,
        problems: snap.problems,
    })
}

/// One row of `sdnctl namespaces`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceRow {
    /// The namespace.
    pub name: String,
    /// Its VNID (`None`: local pods but no NetNamespace).
    pub vnid: Option<u32>,
    /// Whether it is global (VNID 0).
    pub global: bool,
    /// Other namespaces with the same VNID.
    pub shares_with: Vec<String>,
    /// Local pods (`None`: unknown).
    pub pods: Option<usize>,
    /// Whether multicast is in effect for its VNID (every namespace on it annotated).
    pub multicast: bool,
    /// Files that define the NetNamespace differently (`netid 11 in a.yaml`); empty when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conflict: Vec<String>,
    /// Why its NetNamespace file is unusable, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unusable: Option<String>,
}

/// The rows of `sdnctl namespaces`: every NetNamespace by name, then namespaces that have local
/// pods but no NetNamespace (pods of a namespace deleted with `--force`), then NetNamespaces that
/// files define differently (`problems`' conflicts; the agent keeps the VNID it had for them).
pub fn rows(
    state: &ClusterState,
    pods: &PodCounts,
    problems: &[ClusterError],
) -> Vec<NamespaceRow> {
    let mut by_vnid: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    for (name, nn) in &state.net_namespaces {
        by_vnid.entry(nn.net_id).or_default().push(name);
    }
    let count = |n: &str| pods.known().map(|p| p.count(n));
    let multicast = state.multicast_vnids();
    let mut out: Vec<NamespaceRow> = state
        .net_namespaces
        .iter()
        .map(|(name, nn)| NamespaceRow {
            name: name.clone(),
            vnid: Some(nn.net_id),
            global: nn.net_id == 0,
            shares_with: by_vnid
                .get(&nn.net_id)
                .into_iter()
                .flatten()
                .filter(|n| *n != name)
                .map(|n| n.to_string())
                .collect(),
            pods: count(name),
            conflict: Vec::new(),
            multicast: Vnid::new(nn.net_id).is_some_and(|v| multicast.contains(&v)),
            unusable: None,
        })
        .collect();
    if let Some(p) = pods.known() {
        for (name, n) in &p.per_namespace {
            if !state.net_namespaces.contains_key(name) {
                out.push(NamespaceRow {
                    name: name.clone(),
                    vnid: None,
                    global: false,
                    shares_with: Vec::new(),
                    pods: Some(*n),
                    conflict: Vec::new(),
                    multicast: false,
                    unusable: None,
                });
            }
        }
    }
    for p in problems {
        let ClusterError::Conflict {
            kind: Kind::NetNamespace,
            name,
            definitions,
            ..
        } = p
        else {
            continue;
        };
        let conflict: Vec<String> = definitions
            .iter()
            .map(|(file, what)| {
                let file = file.file_name().map_or_else(
                    || file.display().to_string(),
                    |f| f.to_string_lossy().into_owned(),
                );
                format!("{what} in {file}")
            })
            .collect();
        match out.iter_mut().find(|r| r.name == *name) {
            Some(row) => row.conflict = conflict,
            None => out.push(NamespaceRow {
                name: name.clone(),
                vnid: None,
                global: false,
                shares_with: Vec::new(),
                pods: count(name),
                conflict,
                multicast: false,
                unusable: None,
            }),
        }
    }
    // NetNamespaces whose file is broken: named, so an ADD's "no NetNamespace" has a reason.
    for p in problems {
        let Some((name, why)) = crate::broken_net_namespace(p) else {
            continue;
        };
        match out.iter_mut().find(|r| r.name == name) {
            Some(row) if row.vnid.is_none() => row.unusable = Some(why),
            Some(_) => {}
            None => out.push(NamespaceRow {
                name: name.clone(),
                vnid: None,
                global: false,
                shares_with: Vec::new(),
                pods: count(&name),
                conflict: Vec::new(),
                multicast: false,
                unusable: Some(why),
            }),
        }
    }
    out
}

/// The table of `sdnctl namespaces`: NAME, VNID, SHARES-WITH (`global` for VNID 0, `-` for
/// none), PODS (`?` when unknown), MULTICAST (`on` when in effect for the VNID).
pub fn table(rows: &[NamespaceRow]) -> String {
    let mut cells: Vec<[String; 5]> = vec![[
        "NAME".into(),
        "VNID".into(),
        "SHARES-WITH".into(),
        "PODS".into(),
        "MULTICAST".into(),
    ]];
    for r in rows {
        let shares = match r.vnid {
            _ if !r.conflict.is_empty() => format!("(conflict: {})", r.conflict.join(", ")),
            None if r.unusable.is_some() => format!(
                "(NetNamespace file unusable: {})",
                r.unusable.as_deref().unwrap_or_default()
            ),
            None => "(no NetNamespace)".to_string(),
            Some(0) => "global".to_string(),
            Some(_) if r.shares_with.is_empty() => "-".to_string(),
            Some(_) => r.shares_with.join(","),
        };
        cells.push([
            r.name.clone(),
            r.vnid.map_or("-".to_string(), |v| v.to_string()),
            shares,
            r.pods.map_or("?".to_string(), |n| n.to_string()),
            if r.multicast { "on" } else { "-" }.to_string(),
        ]);
    }
    let widths: Vec<usize> = (0..4)
        .map(|i| cells.iter().map(|c| c[i].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for c in &cells {
        let line = format!(
            "{:w0$}  {:w1$}  {:w2$}  {:w3$}  {}",
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3]
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(nss: &[(&str, u32)]) -> ClusterState {
        let mut s = ClusterState::default();
        for (n, v) in nss {
            s.insert(NetNamespace::new(n, *v).into());
        }
        s
    }

    #[allow(clippy::needless_pass_by_value)] // call sites read better with values
    fn run(s: &ClusterState, cmd: TenantCommand, pods: &PodCounts, last: Option<u32>) -> Plan {
        plan_change(s, &cmd, pods, last, Path::new("/state")).unwrap()
    }

    #[allow(clippy::needless_pass_by_value)]
    fn err(s: &ClusterState, cmd: TenantCommand, pods: &PodCounts) -> String {
        plan_change(s, &cmd, pods, None, Path::new("/state"))
            .unwrap_err()
            .to_string()
    }

    fn none() -> PodCounts {
        PodCounts::Known(LocalPods::default())
    }

    fn create(n: &str) -> TenantCommand {
        TenantCommand::Create {
            name: n.into(),
            global: false,
        }
    }

    #[test]
    fn create_allocates_after_the_last_and_never_one_in_use() {
        let s = state(&[("default", 0)]);
        let p = run(&s, create("a"), &none(), None);
        assert_eq!(p.write.as_ref().map(|n| n.net_id), Some(10));
        assert_eq!(p.allocated, Some(10));
        assert!(p.write.unwrap().metadata.uid.is_some());
        assert_eq!(
            p.change.to_string(),
            "a: created with VNID 10 (a tenant of its own)"
        );

        let s = state(&[("default", 0), ("a", 10), ("b", 11)]);
        assert_eq!(run(&s, create("c"), &none(), None).allocated, Some(12));
        // 12 was handed out before (its namespace is gone): not again at once.
        assert_eq!(run(&s, create("c"), &none(), Some(12)).allocated, Some(13));
        // Pods still carry 12 and 13: skipped.
        let pods = PodCounts::Known(LocalPods {
            per_namespace: BTreeMap::new(),
            vnids: [12, 13].into(),
        });
        assert_eq!(run(&s, create("c"), &pods, None).allocated, Some(14));
        // A pod of an unknown tenant (VNID 2^24-1) does not restart the walk from 10.
        let pods = PodCounts::Known(LocalPods {
            per_namespace: BTreeMap::new(),
            vnids: [Vnid::UNASSIGNED.id()].into(),
        });
        assert_eq!(run(&s, create("c"), &pods, Some(12)).allocated, Some(13));
        let g = TenantCommand::Create {
            name: "g".into(),
            global: true,
        };
        let p = run(&s, g, &none(), Some(20));
        assert_eq!((p.allocated, p.change.to), (None, Some(0)));
        assert_eq!(p.change.to_string(), "g: created with VNID 0 (global)");
    }

    #[test]
    fn operations_change_only_the_named_namespace() {
        let s = state(&[("default", 0), ("a", 10), ("b", 11), ("c", 10)]);
        let join = TenantCommand::Join {
            name: "b".into(),
            other: "a".into(),
        };
        let p = run(&s, join, &none(), None);
        assert_eq!(
            p.write.as_ref().map(|n| (n.name(), n.net_id)),
            Some(("b", 10))
        );
        assert_eq!(p.change.to_string(), "b: VNID 11 -> 10 (joined a)");
        assert_eq!((p.allocated, p.remember), (None, Some(11)), "11 was in use");
        // Afterwards 11 is free but remembered, so isolate does not hand it out at once.
        let after = state(&[("default", 0), ("a", 10), ("b", 10), ("c", 10)]);
        let p = run(
            &after,
            TenantCommand::Isolate { name: "c".into() },
            &none(),
            Some(11),
        );
        assert_eq!((p.allocated, p.remember), (Some(12), Some(12)));
        let p = run(
            &after,
            TenantCommand::MakeGlobal { name: "c".into() },
            &none(),
            Some(11),
        );
        assert_eq!(p.remember, None, "the walk did not move");

        let p = run(
            &s,
            TenantCommand::Isolate { name: "c".into() },
            &none(),
            None,
        );
        assert_eq!(p.change.to_string(), "c: VNID 10 -> 12 (isolated)");
        assert_eq!(p.allocated, Some(12));
        let p = run(
            &s,
            TenantCommand::Isolate { name: "b".into() },
            &none(),
            None,
        );
        assert_eq!(
            p.change.to_string(),
            "b: VNID 11, unchanged (already isolated)"
        );
        assert_eq!((p.write, p.allocated), (None, None));

        let p = run(
            &s,
            TenantCommand::MakeGlobal { name: "a".into() },
            &none(),
            None,
        );
        assert_eq!(p.change.to_string(), "a: VNID 10 -> 0 (made global)");
        let p = run(
            &s,
            TenantCommand::MakeGlobal {
                name: "default".into(),
            },
            &none(),
            None,
        );
        assert_eq!(
            p.change.to_string(),
            "default: VNID 0, unchanged (already global)"
        );
        let join = TenantCommand::Join {
            name: "a".into(),
            other: "default".into(),
        };
        let p = run(&s, join, &none(), None);
        assert_eq!(
            p.change.to_string(),
            "a: VNID 10 -> 0 (joined default, which is global)"
        );
    }

    #[test]
    fn an_existing_object_keeps_its_metadata() {
        let mut s = state(&[("a", 10), ("b", 11)]);
        let mut nn = NetNamespace::new("b", 11);
        nn.metadata.uid = Some("u-1".into());
        nn.egress_ips = vec!["192.168.1.5".into()];
        s.insert(nn.into());
        let join = TenantCommand::Join {
            name: "b".into(),
            other: "a".into(),
        };
        let w = run(&s, join, &none(), None).write.unwrap();
        assert_eq!(w.metadata.uid.as_deref(), Some("u-1"));
        assert_eq!(w.egress_ips, vec!["192.168.1.5".to_string()]);
        assert_eq!(w.net_id, 10);
    }

    #[test]
    fn delete_refuses_with_pods_unless_forced() {
        let s = state(&[("default", 0), ("a", 10)]);
        let pods = PodCounts::Known(LocalPods {
            per_namespace: [("a".to_string(), 2)].into(),
            vnids: [10].into(),
        });
        let del = |force| TenantCommand::Delete {
            name: "a".into(),
            force,
        };
        assert_eq!(
            err(&s, del(false), &pods),
            "refusing to delete namespace \"a\": 2 local pod(s) still use it (they would keep VNID 10); delete the pods first, or pass --force"
        );
        let p = run(&s, del(true), &pods, None);
        assert_eq!(p.delete.as_deref(), Some("a"));
        assert_eq!(
            p.change.to_string(),
            "a: deleted, was VNID 10 (forced: its 2 local pod(s) keep VNID 10 until deleted)"
        );
        let unknown = PodCounts::Unknown("no OVSDB target".into());
        assert!(err(&s, del(false), &unknown).starts_with(
            "refusing to delete namespace \"a\" without knowing whether local pods use it (no OVSDB target)"
        ));
        assert!(run(&s, del(true), &unknown, None).delete.is_some());
        assert_eq!(
            run(&s, del(false), &none(), None).change.to_string(),
            "a: deleted, was VNID 10 (no local pods)"
        );
    }

    #[test]
    fn errors_say_why() {
        let s = state(&[("default", 0), ("a", 10)]);
        let e = err(
            &s,
            TenantCommand::Isolate {
                name: "nope".into(),
            },
            &none(),
        );
        assert_eq!(e, "unknown namespace \"nope\": it has no NetNamespace in /state; create it with `sdnctl create nope` (or list them with `sdnctl namespaces`)");
        let join = |n: &str, o: &str| TenantCommand::Join {
            name: n.into(),
            other: o.into(),
        };
        assert!(err(&s, join("a", "nope"), &none()).starts_with("unknown namespace \"nope\""));
        assert!(err(&s, join("a", "a"), &none()).starts_with("namespace \"a\" cannot join itself"));
        assert!(err(&s, create("a"), &none())
            .starts_with("namespace \"a\" already exists with VNID 10"));
        assert!(err(
            &s,
            TenantCommand::Isolate {
                name: "default".into()
            },
            &none()
        )
        .starts_with("namespace \"default\" is global and cannot be isolated"));
        let del = TenantCommand::Delete {
            name: "default".into(),
            force: true,
        };
        assert!(err(&s, del, &none()).starts_with("namespace \"default\" cannot be deleted"));
        for bad in ["Tenant", "a_b", "-a", "a.b", ""] {
            assert!(
                err(&s, create(bad), &none()).starts_with(&format!(
                    "bad namespace name {bad:?}: expected a DNS-1123 label"
                )),
                "{bad}"
            );
        }
        assert!(err(&s, join("a", "B"), &none()).starts_with("bad namespace name \"B\""));
    }

    #[test]
    fn pods_are_counted_by_sandbox() {
        let m = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let rows = [
            m(&[("sandbox", "s1"), ("namespace", "a"), ("vnid", "10")]),
            m(&[("sandbox", "s1"), ("namespace", "a"), ("ifname", "net1")]),
            m(&[("sandbox", "s2"), ("namespace", "a"), ("vnid", "10")]),
            m(&[("sandbox", "s3"), ("namespace", "b"), ("vnid", "x")]),
            m(&[("namespace", "c")]),
            m(&[("iface-id", "tun0")]),
        ];
        let p = LocalPods::from_external_ids(&rows);
        assert_eq!(
            p.per_namespace,
            [("a".to_string(), 2), ("b".to_string(), 1)].into()
        );
        assert_eq!(p.vnids, [10].into());
        assert_eq!(p.count("c"), 0);
    }

    #[test]
    fn listing() {
        let mut s = state(&[("default", 0), ("g", 0), ("a", 10), ("b", 10), ("c", 11)]);
        // Multicast is in effect for VNID 10 only when both a and b carry the annotation.
        let annotate = |s: &mut ClusterState, n: &str| {
            s.net_namespaces
                .get_mut(n)
                .unwrap()
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(flows::MULTICAST_ANNOTATION.into(), "true".into());
        };
        annotate(&mut s, "a");
        annotate(&mut s, "c");
        let pods = PodCounts::Known(LocalPods {
            per_namespace: [("a".to_string(), 2), ("gone".to_string(), 1)].into(),
            vnids: [10, 12].into(),
        });
        let r = rows(&s, &pods, &[]);
        assert_eq!(
            table(&r),
            "NAME     VNID  SHARES-WITH        PODS  MULTICAST\n\
             a        10    b                  2     -\n\
             b        10    a                  0     -\n\
             c        11    -                  0     on\n\
             default  0     global             0     -\n\
             g        0     global             0     -\n\
             gone     -     (no NetNamespace)  1     -\n"
        );
        annotate(&mut s, "b");
        assert!(rows(&s, &pods, &[])[..2].iter().all(|r| r.multicast));
        assert_eq!(r[3].shares_with, vec!["g".to_string()]);
        let r = rows(&s, &PodCounts::Unknown("x".into()), &[]);
        assert_eq!(r.len(), 5);
        assert!(table(&r).lines().nth(1).unwrap().ends_with("?     on"));
        // A NetNamespace two files define differently is shown with both definitions.
        let conflict = |name: &str| ClusterError::Conflict {
            kind: Kind::NetNamespace,
            name: name.into(),
            definitions: vec![
                (PathBuf::from("/s/copy.yaml"), "netid 12".into()),
                (PathBuf::from("/s/netnamespace-x.yaml"), "netid 11".into()),
            ],
            kept: None,
        };
        let r = rows(&s, &pods, &[conflict("x"), conflict("c")]);
        let t = table(&r);
        assert!(
            t.ends_with("x        -     (conflict: netid 12 in copy.yaml, netid 11 in netnamespace-x.yaml)  0     -\n"),
            "{t}"
        );
        assert!(
            t.contains("c        11    (conflict: netid 12 in copy.yaml"),
            "{t}"
        );
    }

    #[test]
    fn the_lock_is_exclusive_and_bounded() {
        let dir = std::env::temp_dir().join(format!("sdn-tenants-lock-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let held = lock(&dir).unwrap();
        let t = Instant::now();
        let e = lock_within(&dir, Duration::from_millis(100)).unwrap_err();
        assert!(t.elapsed() >= Duration::from_millis(100));
        assert!(
            e.to_string().contains("another sdnctl has held the lock"),
            "{e}"
        );
        drop(held);
        lock_within(&dir, Duration::from_millis(100)).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn problems_that_hide_net_namespaces() {
        let dir = std::env::temp_dir().join(format!("sdn-tenants-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let hs = dir.join("hostsubnet-x.yaml");
        fs::write(&hs, "kind: HostSubnet\nbroken: [").unwrap();
        let nn = dir.join("mine.yaml");
        fs::write(&nn, "kind: NetNamespace\nbroken: [").unwrap();
        let parse = |file: &Path| ClusterError::Parse {
            file: file.to_path_buf(),
            source: Box::new(crate::ParseError::Syntax {
                document: 1,
                message: "x".into(),
            }),
        };
        assert!(!hides_net_namespaces(&parse(&hs)));
        assert!(hides_net_namespaces(&parse(&nn)));
        assert!(hides_net_namespaces(&parse(&dir.join("vanished.yaml"))));
        let dup = ClusterError::Duplicate {
            kind: Kind::NetNamespace,
            name: "a".into(),
            first: hs.clone(),
            second: nn.clone(),
        };
        assert!(!hides_net_namespaces(&dup));
        fs::remove_dir_all(&dir).unwrap();
    }
}
