//! Writing the directory: one object per file, atomically (a temporary file renamed into
//! place), and the uids of objects made here.

use std::fs;
use std::io::Write;

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::ClusterError;

pub(crate) static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ClusterError> {
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
