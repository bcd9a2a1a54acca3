//! Every file a node's programs write (leases, the IPAM cursor, the CNI config, the standalone
//! state, sdnctl's VNID cursor), written so that a kill at any moment leaves the old content or
//! the new one, never a half: the bytes go to a temporary file in the same directory
//! (`.<name>.tmp-<pid>-<n>`, a name no reader takes for data), which is then renamed over the
//! file ([`write`]) or hard-linked to a name that must not exist yet ([`create_new`], the
//! exclusive create of a lease: the file appears whole or not at all).
//!
//! **In place.** Replacing a file by a rename costs the filesystem a new block for the new
//! file and the release of the old one; on ext4 (the usual filesystem of `/var/lib`) a rename
//! over a file with data also makes it allocate the new file's blocks at once
//! (`auto_da_alloc`): 0.3-0.45 ms a file on this project's test machines, against 5 µs for
//! rewriting the same bytes in place. Leases change owner on every pod ADD that takes a warm
//! port and on every DEL, and the allocation cursor on every allocation, so
//! [`overwrite`] rewrites a small file in place when that is as safe as the rename: the new
//! content at least as long as the old (nothing to cut, so one write does it all) and within
//! one page (a single `pwrite(2)` into one page of the page cache is never cut by a signal:
//! the kernel checks for a fatal signal before each page it copies, not within one). Readers
//! that run while a write is under way could see a mix, so it is only for files whose readers
//! take the writer's lock (the lease directory's flock, which host-local takes too). A shorter
//! content is padded with spaces to the old length ([`Tail::Spaces`]) where every reader trims
//! whitespace (a lease: host-local compares the trimmed content), else ([`Tail::Exact`]) it
//! goes the rename's way, as does anything else (a larger file, a file that is not there or not
//! a regular file, a durable write).
//!
//! [`Durability::PowerLoss`] also fsyncs the file before it is renamed and the directory after,
//! for what must survive a crash of the machine (the cluster state, the CNI config a runtime
//! reads at boot). [`Durability::Process`] does not: leases and the allocation cursor describe
//! pods, which do not survive the machine either, and an fsync per pod ADD would cost more
//! than it keeps.
//!
//! A killed writer leaves its temporary file behind, which readers skip (a dot file with no
//! data name); [`remove_stale_temps`] deletes those older than a minute whose writer is gone
//! (or older than an hour: a shared directory, a reused pid). The agent calls it on its lease
//! directory at start-up and every 30 s, on the state directory at start-up and on the CNI
//! config directory when it writes there.
//!
//! **Test hook.** With `SDN_TEST_KILL_AT_WRITE=N` in its environment, a process SIGKILLs itself
//! at the N-th step of its writes (counting from 1, two steps per file: half the bytes in the
//! temporary file, then all of them before the rename or link; in place: before the write and
//! after it), so a test can kill a program at every write it makes, deterministically
//! (`tests/tests/faults.rs`).

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Whether a write must survive a crash of the machine (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Atomic against a killed process; no fsync.
    Process,
    /// Atomic, and on disk when the call returns (file and directory fsynced).
    PowerLoss,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);
static STEPS: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path` (created with `mode`, or replaced whole).
pub fn write(path: &Path, bytes: &[u8], mode: u32, durability: Durability) -> io::Result<()> {
    let tmp = temp_write(path, bytes, mode, durability)?;
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(path, durability)
}

/// The most bytes [`overwrite`] writes in place: one page.
const IN_PLACE_MAX: usize = 4096;

/// What [`overwrite`] may leave after a content shorter than the file's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// Nothing: the file holds exactly the bytes (a shorter content is renamed into place).
    Exact,
    /// Spaces up to the old length, for files whose readers trim whitespace.
    Spaces,
}

/// [`write`], in place when that is as safe (see "In place" in the module docs): only for
/// files whose readers take the writer's lock.
pub fn overwrite(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    durability: Durability,
    tail: Tail,
) -> io::Result<()> {
    if durability == Durability::Process
        && bytes.len() <= IN_PLACE_MAX
        && in_place(path, bytes, tail)?
    {
        return Ok(());
    }
    write(path, bytes, mode, durability)
}

/// Writes `bytes` (padded to the old length with `tail`) over `path`'s content in one
/// `pwrite(2)` when `path` is a regular file that this one write makes whole: `Ok(false)`
/// (nothing written) when it is not.
fn in_place(path: &Path, bytes: &[u8], tail: Tail) -> io::Result<bool> {
    // Not through a symbolic link: the rename would replace the link, not its target.
    let Ok(f) = fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    else {
        return Ok(false);
    };
    let meta = f.metadata()?;
    let old = usize::try_from(meta.len()).unwrap_or(usize::MAX);
    if !meta.is_file() || old > IN_PLACE_MAX || (old > bytes.len() && tail == Tail::Exact) {
        return Ok(false);
    }
    let mut whole = bytes.to_vec();
    whole.resize(old.max(bytes.len()), b' ');
    test_kill_point();
    let n = f.write_at(&whole, 0)?;
    if n != whole.len() {
        // Not seen for a one-page write to a regular file; the rename's way makes it whole.
        return Ok(false);
    }
    test_kill_point();
    Ok(true)
}

/// Creates `path` with `bytes` only if it does not exist: `Ok(false)` (and nothing written) when
/// it does. Readers see the file whole or not at all.
pub fn create_new(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    durability: Durability,
) -> io::Result<bool> {
    let tmp = temp_write(path, bytes, mode, durability)?;
    let linked = fs::hard_link(&tmp, path);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => sync_dir(path, durability).map(|()| true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether `name` is a temporary file of [`write`] or [`create_new`].
pub fn is_temp(name: &str) -> bool {
    temp_pid(name).is_some()
}

/// A temporary file younger than this is a write in progress, whoever made it.
const TEMP_IN_FLIGHT: Duration = Duration::from_secs(60);
/// A temporary file older than this is stale even if a process of its writer's pid runs (the
/// pid was reused, or the writer lives in another pid namespace).
const TEMP_STALE: Duration = Duration::from_secs(3600);

/// Deletes the temporary files in `dir` of writes cut off by a kill: older than a minute, and
/// either of a pid that does not run here or older than an hour (a directory shared with other
/// pid namespaces, a reused pid); returns how many.
pub fn remove_stale_temps(dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(temp_pid) else {
            continue;
        };
        let age = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .unwrap_or_default();
        let stale = age > TEMP_STALE
            || (age > TEMP_IN_FLIGHT && !Path::new(&format!("/proc/{pid}")).exists());
        if stale && fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The writer's pid in a temporary file's name (`.<name>.tmp-<pid>-<n>`).
fn temp_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.')?;
    let (_, tail) = rest.rsplit_once(".tmp-")?;
    let (pid, n) = tail.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// The bytes in a new temporary file beside `path`; returns its path.
fn temp_write(path: &Path, bytes: &[u8], mode: u32, durability: Durability) -> io::Result<PathBuf> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        let half = bytes.len() / 2;
        f.write_all(&bytes[..half])?;
        test_kill_point();
        f.write_all(&bytes[half..])?;
        if durability == Durability::PowerLoss {
            f.sync_all()?;
        }
        test_kill_point();
        Ok(())
    })();
    match written {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn sync_dir(path: &Path, durability: Durability) -> io::Result<()> {
    if durability == Durability::PowerLoss {
        let dir = path.parent().unwrap_or(Path::new("."));
        fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// The test hook of the module docs.
fn test_kill_point() {
    static AT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let at = AT.get_or_init(|| {
        std::env::var("SDN_TEST_KILL_AT_WRITE")
            .ok()
            .and_then(|v| v.parse().ok())
    });
    if let Some(at) = at {
        if STEPS.fetch_add(1, Ordering::SeqCst) + 1 == *at {
            // SAFETY: kill on our own pid; nothing after it runs.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "sdn-files-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn write_replaces_whole_and_leaves_no_temp() {
        let d = dir();
        let p = d.join("conf");
        write(&p, b"one", 0o600, Durability::PowerLoss).unwrap();
        write(&p, b"two, longer", 0o600, Durability::Process).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two, longer");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            fs::read_dir(&d).unwrap().count(),
            1,
            "a temporary file is left"
        );
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn overwrite_rewrites_in_place_only_what_one_write_makes_whole() {
        use std::os::unix::fs::MetadataExt;
        let d = dir();
        let p = d.join("10.128.0.2");
        let ino = |p: &Path| fs::symlink_metadata(p).unwrap().ino();
        // Not there yet: created (by a rename).
        overwrite(
            &p,
            b"sdn-warm-p1\r\nvnid-5",
            0o644,
            Durability::Process,
            Tail::Exact,
        )
        .unwrap();
        let first = ino(&p);
        // Longer: in place, the same file.
        overwrite(
            &p,
            b"0123456789abcdef\r\neth0",
            0o644,
            Durability::Process,
            Tail::Exact,
        )
        .unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"0123456789abcdef\r\neth0");
        assert_eq!(ino(&p), first, "a longer content was not written in place");
        // As long: in place.
        overwrite(
            &p,
            b"fedcba9876543210\r\neth1",
            0o644,
            Durability::Process,
            Tail::Exact,
        )
        .unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"fedcba9876543210\r\neth1");
        assert_eq!(ino(&p), first);
        // Shorter: one write cannot cut the rest, so a new file replaces it.
        overwrite(
            &p,
            b"sdn-retired-p1\r\neth0",
            0o644,
            Durability::Process,
            Tail::Exact,
        )
        .unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"sdn-retired-p1\r\neth0");
        assert_ne!(ino(&p), first, "a shorter content was written in place");
        // Shorter, where readers trim: in place, padded with spaces to the old length.
        let before = ino(&p);
        overwrite(&p, b"c1\r\neth0", 0o644, Durability::Process, Tail::Spaces).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"c1\r\neth0            ");
        assert_eq!(ino(&p), before, "a padded content was not written in place");
        // Durable: always the rename (and its fsyncs).
        let before = ino(&p);
        overwrite(
            &p,
            b"sdn-retired-p1\r\neth9",
            0o644,
            Durability::PowerLoss,
            Tail::Exact,
        )
        .unwrap();
        assert_ne!(ino(&p), before);
        // More than a page: the rename.
        let before = ino(&p);
        let big = vec![b'x'; IN_PLACE_MAX + 1];
        overwrite(&p, &big, 0o644, Durability::Process, Tail::Exact).unwrap();
        assert_eq!(fs::read(&p).unwrap(), big);
        assert_ne!(ino(&p), before);
        // A symbolic link is replaced, its target untouched.
        let target = d.join("target");
        fs::write(&target, "keep").unwrap();
        let link = d.join("10.128.0.3");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        overwrite(
            &link,
            b"a longer content\r\neth0",
            0o644,
            Durability::Process,
            Tail::Exact,
        )
        .unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"keep");
        assert!(fs::symlink_metadata(&link).unwrap().is_file());
        assert_eq!(
            fs::read_dir(&d).unwrap().count(),
            3,
            "a temporary file is left"
        );
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn create_new_never_replaces() {
        let d = dir();
        let p = d.join("10.128.0.2");
        assert!(create_new(&p, b"a\r\neth0", 0o644, Durability::Process).unwrap());
        assert!(!create_new(&p, b"b\r\neth0", 0o644, Durability::Process).unwrap());
        assert_eq!(fs::read(&p).unwrap(), b"a\r\neth0");
        assert_eq!(fs::read_dir(&d).unwrap().count(), 1);
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn temps_of_gone_writers_are_removed_and_only_those() {
        let d = dir();
        // pid 0x7fffffff is never a running process; ours is.
        let ago = |secs| std::time::SystemTime::now() - Duration::from_secs(secs);
        let aged = |name: &str, secs| {
            let p = d.join(name);
            fs::write(&p, "half").unwrap();
            fs::File::options()
                .write(true)
                .open(&p)
                .unwrap()
                .set_modified(ago(secs))
                .unwrap();
            p
        };
        let gone_writer = aged(".10.128.0.9.tmp-2147483647-3", 120);
        let just_now = aged(".10.128.0.7.tmp-2147483647-5", 1);
        let live_writer = aged(&format!(".10.128.0.8.tmp-{}-4", std::process::id()), 120);
        let reused_pid = aged(&format!(".10.128.0.6.tmp-{}-6", std::process::id()), 7200);
        fs::write(d.join(".hidden"), "x").unwrap();
        assert!(is_temp(".10.128.0.9.tmp-2147483647-3"));
        assert!(!is_temp(".hidden") && !is_temp("10.128.0.9"));
        assert_eq!(remove_stale_temps(&d), 2);
        assert!(!gone_writer.exists() && !reused_pid.exists());
        assert!(just_now.exists() && live_writer.exists());
        fs::remove_dir_all(d).unwrap();
    }
}
