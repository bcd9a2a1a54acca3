//! The state directory as tenant commands use it: one consistent read, the lock that serialises
//! sdnctl runs, the remembered position of the VNID walk, and the files sdnctl may edit.

use crate::types::{parse_objects, Format};
use crate::StandaloneSource;
use crate::{ClusterError, ClusterObject, ClusterState, Kind};
use std::fs;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::*;

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

pub(crate) fn state_dir_error(dir: &Path, e: ClusterError) -> TenantError {
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

pub(crate) fn lock_within(dir: &Path, timeout: Duration) -> Result<Lock, TenantError> {
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

pub(crate) fn write_last_vnid(dir: &Path, vnid: u32) -> Result<(), TenantError> {
    let path = dir.join(LAST_VNID_FILE);
    crate::files::write(
        &path,
        format!("{vnid}\n").as_bytes(),
        0o644,
        crate::files::Durability::PowerLoss,
    )
    .map_err(|source| TenantError::Io {
        path: path.clone(),
        op: "write",
        source,
    })
}

/// Checks that the NetNamespace `name` lives alone in sdnctl's own file, so rewriting or
/// deleting that file changes exactly this object.
pub(crate) fn check_own_file(
    dir: &Path,
    name: &str,
    problems: &[ClusterError],
) -> Result<(), TenantError> {
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
pub(crate) fn file_objects(path: &Path) -> Option<Vec<ClusterObject>> {
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
pub(crate) fn find_definition(dir: &Path, name: &str) -> Option<PathBuf> {
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

/// Takes the state directory's lock and reads it; a missing directory fails before a lock file
/// is created in it.
pub(crate) fn open_locked(dir: &Path) -> Result<(Lock, Snapshot), TenantError> {
    fs::read_dir(dir).map_err(|e| TenantError::StateDir {
        dir: dir.to_path_buf(),
        reason: e.to_string(),
    })?;
    let held = lock(dir)?;
    Ok((held, load(dir)?))
}
