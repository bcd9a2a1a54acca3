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
//! The parts: [`plan`](plan_change) (pure: the command's change or refusal), the directory
//! (`dir`: one consistent read, the lock, the walk's memory, the files sdnctl may edit), the
//! listing (`listing`: what `sdnctl namespaces` prints), and here the execution that ties them
//! together and the errors every part reports. The VNID semantics themselves (allocation, held
//! VNIDs, the walk) are `multitenant::Tenancy`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::ports::PodTenancy;
use crate::StandaloneSource;
use crate::{ClusterError, ClusterObject, Kind};

mod plan;
pub use plan::{check_name, hides_net_namespaces, plan_change, Change, Plan};
mod dir;
pub(crate) use dir::{check_own_file, open_locked, write_last_vnid};
pub use dir::{last_vnid, load, lock, Lock, Snapshot};
mod listing;
pub use listing::{rows, table, NamespaceRow};
mod logging;
pub use logging::{set_audit_logging, AuditLoggingChange};

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
    /// `create --vnid` of a VNID a namespace holds, or not a tenant VNID.
    #[error("{}", vnid_taken(name, *vnid, holders))]
    VnidTaken {
        /// The namespace to create.
        name: String,
        /// The VNID asked for.
        vnid: u32,
        /// The namespaces holding it, comma-separated (empty: not a tenant VNID).
        holders: String,
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
    let mut nn = net_namespace_of(&snap, dir, name)?;
    let changed = nn.multicast_enabled() != on;
    let mut file = None;
    if changed {
        check_own_file(dir, name, &snap.problems)?;
        let value = on.then(|| "true".to_string());
        file = Some(write_annotation(
            dir,
            &mut nn,
            flows::MULTICAST_ANNOTATION,
            value,
        )?);
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

/// NAME's NetNamespace in the snapshot, or [`TenantError::Unknown`].
pub(crate) fn net_namespace_of(
    snap: &Snapshot,
    dir: &Path,
    name: &str,
) -> Result<crate::NetNamespace, TenantError> {
    snap.state
        .net_namespaces
        .get(name)
        .cloned()
        .ok_or_else(|| TenantError::Unknown {
            name: name.to_string(),
            dir: dir.to_path_buf(),
        })
}

/// Sets (`Some`) or removes annotation `key` of `nn` and writes its file; returns the file.
pub(crate) fn write_annotation(
    dir: &Path,
    nn: &mut crate::NetNamespace,
    key: &str,
    value: Option<String>,
) -> Result<PathBuf, TenantError> {
    let notes = nn.metadata.annotations.get_or_insert_with(Default::default);
    match value {
        Some(v) => {
            notes.insert(key.to_string(), v);
        }
        None => {
            notes.remove(key);
        }
    }
    if notes.is_empty() {
        nn.metadata.annotations = None;
    }
    StandaloneSource::write_object(dir, &ClusterObject::NetNamespace(nn.clone()))
        .map_err(TenantError::Write)
}

#[cfg(test)]
mod tests;

/// The message of [`TenantError::VnidTaken`].
fn vnid_taken(name: &str, vnid: u32, holders: &str) -> String {
    if holders.is_empty() {
        format!(
            "cannot create {name:?} with VNID {vnid}: a tenant's VNID is {} to {} (0 is global: \
             use --global)",
            multitenant::FIRST_TENANT_VNID,
            multitenant::Vnid::LAST_TENANT
        )
    } else {
        format!(
            "cannot create {name:?} with VNID {vnid}: namespace {holders} has it; to share it, \
             create {name:?} and then run: sdnctl join {name} {}",
            holders.split(", ").next().unwrap_or(holders)
        )
    }
}
