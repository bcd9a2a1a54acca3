//! The lease store's lock: an in-process lock that the agent's threads queue on (woken the
//! moment it is free), then the directory's flock, which a real host-local takes too and which
//! is polled with a back-off (flock(2) has no blocking wait with a timeout).

use std::fs::File;
use std::sync::{Arc, Mutex};
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

impl InProcess {
    /// Waits (until `timeout` after `started`) for the in-process lock and takes it; `None`
    /// when the wait ran out.
    fn take(self: &Arc<Self>, started: Instant, timeout: Duration) -> Option<InProcessGuard> {
        let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        while *busy {
            let left = timeout.saturating_sub(started.elapsed());
            if left.is_zero() {
                return None;
            }
            busy = self
                .freed
                .wait_timeout(busy, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *busy = true;
        Some(InProcessGuard(self.clone()))
    }
}

/// The in-process lock, held: handed to the next waiter when dropped.
#[derive(Debug)]
struct InProcessGuard(Arc<InProcess>);

impl Drop for InProcessGuard {
    fn drop(&mut self) {
        *self.0.busy.lock().unwrap_or_else(|e| e.into_inner()) = false;
        self.0.freed.notify_one();
    }
}

/// Held while an operation runs. Fields drop in order: closing the descriptor releases the
/// flock, then the in-process lock is handed to the next waiter, who finds the flock free.
#[derive(Debug)]
pub(crate) struct LockGuard {
    _file: File,
    _local: InProcessGuard,
}

impl Store {
    /// Takes the in-process lock, then the directory's flock (polling with back-off), both
    /// within the lock timeout.
    pub(crate) fn lock(&self) -> Result<LockGuard, IpamError> {
        let started = Instant::now();
        let timed_out = || IpamError::LockTimeout {
            path: self.lock_path(),
            waited: started.elapsed(),
        };
        let local = self
            .local
            .take(started, self.lock_timeout)
            .ok_or_else(timed_out)?;
        let file = self.open_lock_file()?;
        let mut pause = Duration::from_micros(50);
        loop {
            // std's file lock is flock(2) on Linux, the lock host-local takes too.
            match file.try_lock() {
                Ok(()) => {
                    return Ok(LockGuard {
                        _file: file,
                        _local: local,
                    })
                }
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(err)) => {
                    return Err(io_err("lock", &self.lock_path())(err))
                }
            }
            let waited = started.elapsed();
            if waited >= self.lock_timeout {
                return Err(timed_out());
            }
            std::thread::sleep(pause.min(self.lock_timeout - waited));
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }
}
