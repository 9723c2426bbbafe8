// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! A condition variable for the shared range (std's futex condvar).
//!
//! One 32-bit sequence word: a waiter reads it, unlocks the mutex and sleeps
//! while it is unchanged; a notifier increments it and wakes one or all.
//! Every waiter re-locks its mutex afterwards, which recovers from a dead
//! mutex owner as [`Mutex::lock`] does.
//!
//! C header: `include/halfproc.h` (`halfproc_cond_*`).

use core::time::Duration;

use super::futex::{self, AtomicU32, Ordering};
use super::{LockError, MutexGuard};

/// Whether a timed wait timed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitTimeoutResult(bool);

impl WaitTimeoutResult {
    /// True when the wait ended by time-out.
    pub fn timed_out(&self) -> bool {
        self.0
    }
}

/// A condition variable usable across members.
///
/// # Examples
///
/// ```
/// use halfproc::sync::{Condvar, Mutex};
/// use std::time::Duration;
/// let m = Mutex::new(false);
/// let c = Condvar::new();
/// let g = m.lock().unwrap();
/// let (g, r) = c.wait_timeout(g, Duration::from_millis(1)).unwrap();
/// assert!(r.timed_out());
/// assert!(!*g);
/// ```
#[repr(C)]
pub struct Condvar {
    seq: AtomicU32,
}

impl Default for Condvar {
    fn default() -> Self {
        Self::new()
    }
}

impl Condvar {
    /// A new condition variable (all-zero).
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Condvar {
            seq: AtomicU32::new(0),
        }
    }

    /// A new condition variable.
    #[cfg(loom)]
    pub fn new() -> Self {
        Condvar {
            seq: AtomicU32::new(0),
        }
    }

    /// Unlocks, sleeps until notified (or spuriously), re-locks.
    pub fn wait<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
    ) -> Result<MutexGuard<'a, T>, LockError<MutexGuard<'a, T>>> {
        self.wait_inner(guard, None)
            .map(|(g, _)| g)
            .map_err(|e| e.map(|(g, _)| g))
    }

    /// Waits while `cond` holds.
    pub fn wait_while<'a, T: ?Sized>(
        &self,
        mut guard: MutexGuard<'a, T>,
        mut cond: impl FnMut(&mut T) -> bool,
    ) -> Result<MutexGuard<'a, T>, LockError<MutexGuard<'a, T>>> {
        while cond(&mut *guard) {
            guard = self.wait(guard)?;
        }
        Ok(guard)
    }

    /// Like [`wait`](Self::wait), for at most `timeout`.
    #[allow(clippy::type_complexity)]
    pub fn wait_timeout<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> Result<
        (MutexGuard<'a, T>, WaitTimeoutResult),
        LockError<(MutexGuard<'a, T>, WaitTimeoutResult)>,
    > {
        self.wait_inner(guard, Some(timeout))
    }

    #[allow(clippy::type_complexity)]
    fn wait_inner<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Option<Duration>,
    ) -> Result<
        (MutexGuard<'a, T>, WaitTimeoutResult),
        LockError<(MutexGuard<'a, T>, WaitTimeoutResult)>,
    > {
        let m = guard.mutex();
        let seq = self.seq.load(Ordering::Relaxed);
        drop(guard);
        let woken = futex::wait(&self.seq, seq, timeout);
        let r = WaitTimeoutResult(!woken);
        match m.lock() {
            Ok(g) => Ok((g, r)),
            Err(e) => Err(e.map(|g| (g, r))),
        }
    }

    /// Waits with a bare [`RawMutex`] (the C ABI's view): unlocks `m`,
    /// sleeps, re-locks. Returns how the re-lock went and whether the wait
    /// timed out.
    ///
    /// # Safety
    ///
    /// The calling thread must hold `m`.
    #[doc(hidden)]
    pub unsafe fn wait_raw(
        &self,
        m: &super::RawMutex,
        timeout: Option<Duration>,
    ) -> (Result<super::Acquired, LockError<()>>, bool) {
        let seq = self.seq.load(Ordering::Relaxed);
        // SAFETY: per the contract we hold `m`.
        unsafe { m.unlock() };
        let woken = futex::wait(&self.seq, seq, timeout);
        (m.lock(), !woken)
    }

    /// Wakes one waiter.
    pub fn notify_one(&self) {
        self.seq.fetch_add(1, Ordering::Relaxed);
        futex::wake(&self.seq, 1);
    }

    /// Wakes every waiter.
    pub fn notify_all(&self) {
        self.seq.fetch_add(1, Ordering::Relaxed);
        futex::wake(&self.seq, i32::MAX);
    }
}
