//! Giving the allocator's free memory back to the kernel after the agent's large, short-lived
//! work.
//!
//! A full reconcile and a start-up list of the cluster build large transient data (the
//! switch's whole flow dump one reply part at a time, every object of a relist) and drop it.
//! glibc's allocator keeps what was freed in its arenas, resident, for the next allocation;
//! between reconciles nothing asks for it, so a node of a large cluster would carry several
//! megabytes of free but resident heap for good (a dual-stack node more, its dumps being
//! larger). `malloc_trim(0)` returns the free pages of every arena to the kernel (the top of
//! each arena and whole free pages inside it); it walks the free lists once, about a
//! millisecond for a heap of tens of MB, so it runs after each full reconcile (start-up, a
//! repair, the periodic one), never on a pod's path. Other C libraries (musl) have no such call
//! and nothing to trim in the same way: there it does nothing.

/// Large blocks (at least [`MMAP_THRESHOLD`]) are mapped on their own and unmapped when
/// freed. glibc's default raises this threshold each time a mapped block is freed (up to 32
/// MiB), after which the next large buffers (a list's body, a flow dump) come from the heap and
/// leave holes between the long-lived objects allocated beside them; a fixed threshold keeps
/// them out of it. Called once, at the start of `main` (the setting is process-wide).
pub fn keep_large_blocks_out_of_the_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets an allocator parameter under the allocator's own lock.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

/// See [`keep_large_blocks_out_of_the_heap`]: glibc's initial value, kept.
const MMAP_THRESHOLD: i32 = 128 * 1024;

/// Returns the allocator's free pages to the kernel; logs what that gave back.
pub fn release_free_memory(after: &str) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let before = resident_kib();
        let began = std::time::Instant::now();
        // SAFETY: malloc_trim only walks the allocator's own free lists; it takes the arenas'
        // locks as malloc does and is safe to call from any thread at any time.
        unsafe {
            libc::malloc_trim(0);
        }
        tracing::debug!(
            after,
            rss_kib_before = before.unwrap_or(0),
            rss_kib_after = resident_kib().unwrap_or(0),
            us = began.elapsed().as_micros() as u64,
            "free heap returned to the kernel"
        );
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = after;
}

/// The process's resident set in KiB (`/proc/self/statm`'s second field, in pages).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn resident_kib() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()? / 1024)
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// Set in the child process the tests below run their measurements in.
    const CHILD: &str = "SDN_HEAP_TEST_CHILD";

    /// Runs `test` (this module's test of that name) alone in a child process: the resident
    /// set is the whole process's, and the other tests of this binary allocate, free and trim
    /// (every full reconcile trims) while they run.
    fn in_child(test: &str, body: fn()) {
        if std::env::var_os(CHILD).is_some() {
            body();
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                &format!("host::heap::tests::{test}"),
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{test} in a child process: {text}");
        assert!(text.contains("1 passed"), "{test} did not run: {text}");
    }

    /// Freed heap that glibc kept resident goes back to the kernel: many small blocks (each
    /// below the mmap threshold, so they live in the arena) allocated, touched and freed, with
    /// one allocated after them pinning the top so that the arena cannot shrink by itself,
    /// then trimmed.
    #[test]
    fn free_heap_goes_back_to_the_kernel() {
        in_child("free_heap_goes_back_to_the_kernel", || {
            let blocks: Vec<Vec<u8>> = (0..2048)
                .map(|i| vec![(i % 251) as u8; 16 * 1024])
                .collect();
            let pin = vec![1u8; 1024];
            let touched = resident_kib().unwrap();
            drop(blocks);
            let kept = resident_kib().unwrap();
            release_free_memory("the test's allocations");
            let trimmed = resident_kib().unwrap();
            assert!(pin[0] == 1);
            // 32 MiB were freed: glibc keeps them until trimmed, and the trim gives back
            // most of them.
            assert!(
                kept + 8 * 1024 > touched,
                "the allocator gave freed memory back by itself ({touched} -> {kept} KiB): the \
                 test no longer shows a trim's effect"
            );
            assert!(
                trimmed + 24 * 1024 < kept,
                "trimming gave back too little: {kept} -> {trimmed} KiB"
            );
        });
    }

    /// With the threshold fixed, a large block freed goes back to the kernel at once, also
    /// after an earlier one was freed (glibc's default would have raised the threshold to its
    /// size and taken the second from the heap, where it stays resident once freed).
    #[test]
    fn large_blocks_stay_out_of_the_heap() {
        in_child("large_blocks_stay_out_of_the_heap", || {
            keep_large_blocks_out_of_the_heap();
            let large = || vec![7u8; 8 * 1024 * 1024];
            drop(large());
            let before = resident_kib().unwrap();
            let block = large();
            // Allocated after it: were the block in the heap, this would pin the top.
            let pin = vec![1u8; 1024];
            let held = resident_kib().unwrap();
            drop(block);
            let after = resident_kib().unwrap();
            assert!(pin[0] == 1);
            assert!(held > before + 6 * 1024, "{before} -> {held} KiB");
            assert!(
                after + 6 * 1024 < held,
                "a freed 8 MiB block stayed resident: {held} -> {after} KiB"
            );
        });
    }
}
