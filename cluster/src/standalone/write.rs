//! Writing the directory: one object per file, atomically (a temporary file renamed into
//! place), and the uids of objects made here.

use std::path::Path;

use crate::ClusterError;

/// Writes `bytes` to `path` atomically and durably ([`crate::files::write`]).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ClusterError> {
    crate::files::write(path, bytes, 0o644, crate::files::Durability::PowerLoss)
        .map_err(|e| ClusterError::io(path, "write", e))
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
