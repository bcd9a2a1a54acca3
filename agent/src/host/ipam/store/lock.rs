//! The lease store's lock: an in-process lock that the agent's threads queue on (woken the
//! moment it is free), then the directory's flock, which a real host-local takes too and which
//! is polled with a back-off (flock(2) has no blocking wait with a timeout).

use std::fs::File;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{io_err, IpamError, Store};

/// The in-process half of the store's lock. flock(2) has no blocking wait with a timeout, so
/// a waiter polls, with a back-off (50 µs doubling to 5 ms) that kept an ADD waiting up to
/// twice as long as the pool's background lease batch it waited for; in-process waiters now
/// sleep on a condition variable and take over at once.
#[derive(Debug, Default)]
pub(crate) struct InProcess {
    busy: Mutex<bool>,
    freed: std::sync::Condvar,
}

/// Held while an operation runs; closing the descriptor releases the flock, then the
/// in-process lock is handed to the next waiter.
#[derive(Debug)]
pub(crate) struct LockGuard {
    file: Option<File>,
    local: std::sync::Arc<InProcess>,
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // The flock first, so the next in-process holder finds it free.
        drop(self.file.take());
        *self.local.busy.lock().unwrap_or_else(|e| e.into_inner()) = false;
        self.local.freed.notify_one();
    }
}

impl Store {
    /// Takes the directory's flock, polling with back-off up to the lock timeout.
    pub(crate) fn lock(&self) -> Result<LockGuard, IpamError> {
        let started = Instant::now();
        {
            let mut busy = self.local.busy.lock().unwrap_or_else(|e| e.into_inner());
            while *busy {
                let left = self.lock_timeout.saturating_sub(started.elapsed());
                if left.is_zero() {
                    return Err(IpamError::LockTimeout {
                        path: self.lock_path(),
                        waited: started.elapsed(),
                    });
                }
                busy = self
                    .local
                    .freed
                    .wait_timeout(busy, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            *busy = true;
        }
        // From here on a failure must hand the in-process lock back: the guard does.
        let release = InProcessRelease(&self.local);
        let file = self.open_lock_file()?;
        let mut pause = Duration::from_micros(50);
        loop {
            // std's file lock is flock(2) on Linux, the lock host-local takes too.
            match file.try_lock() {
                Ok(()) => {
                    std::mem::forget(release);
                    return Ok(LockGuard {
                        file: Some(file),
                        local: self.local.clone(),
                    });
                }
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(err)) => {
                    return Err(io_err("lock", &self.lock_path())(err))
                }
            }
            let waited = started.elapsed();
            if waited >= self.lock_timeout {
                return Err(IpamError::LockTimeout {
                    path: self.lock_path(),
                    waited,
                });
            }
            std::thread::sleep(pause.min(self.lock_timeout - waited));
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }
}

/// Hands the in-process lock back when `lock` fails after taking it.
struct InProcessRelease<'a>(&'a InProcess);

impl Drop for InProcessRelease<'_> {
    fn drop(&mut self) {
        *self.0.busy.lock().unwrap_or_else(|e| e.into_inner()) = false;
        self.0.freed.notify_one();
    }
}
