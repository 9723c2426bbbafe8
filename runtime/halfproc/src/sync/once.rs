// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! One-time initialization for the shared range.
//!
//! One word: `0` incomplete, `1` complete, otherwise the running
//! initializer's thread id with [`RUNNING`] (and [`WAITERS`] once someone
//! sleeps). Waiters sleep at most 100 ms at a time and check that the
//! initializer still runs; if it died (or panicked), the word goes back to
//! incomplete and one waiter runs the initializer again.
//!
//! C header: `include/halfproc.h` (`halfproc_once`).

use super::futex::{self, AtomicU32, Ordering};
use super::LockError;

const INCOMPLETE: u32 = 0;
const COMPLETE: u32 = 1;
const RUNNING: u32 = 1 << 31;
const WAITERS: u32 = 1 << 30;
const TID_MASK: u32 = !(RUNNING | WAITERS);

/// Runs an initializer exactly once across all members.
///
/// # Examples
///
/// ```
/// use halfproc::sync::Once;
/// let once = Once::new();
/// let mut n = 0;
/// once.call_once(|| n += 1).unwrap();
/// once.call_once(|| n += 1).unwrap();
/// assert_eq!(n, 1);
/// assert!(once.is_completed());
/// ```
#[repr(C)]
pub struct Once {
    state: AtomicU32,
}

impl Default for Once {
    fn default() -> Self {
        Self::new()
    }
}

struct ResetOnUnwind<'a>(&'a Once);

impl Drop for ResetOnUnwind<'_> {
    fn drop(&mut self) {
        // The initializer panicked: let someone else try again.
        if self.0.state.swap(INCOMPLETE, Ordering::Release) & WAITERS != 0 {
            futex::wake(&self.0.state, i32::MAX);
        }
    }
}

impl Once {
    /// A new, incomplete `Once` (all-zero).
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Once {
            state: AtomicU32::new(INCOMPLETE),
        }
    }

    /// A new, incomplete `Once`.
    #[cfg(loom)]
    pub fn new() -> Self {
        Once {
            state: AtomicU32::new(INCOMPLETE),
        }
    }

    /// Whether an initializer completed.
    #[inline]
    pub fn is_completed(&self) -> bool {
        self.state.load(Ordering::Acquire) == COMPLETE
    }

    /// Runs `f` if no initializer completed yet, else waits for the running
    /// one. Returns after some initializer completed.
    #[inline]
    pub fn call_once(&self, f: impl FnOnce()) -> Result<(), LockError<()>> {
        if self.is_completed() {
            return Ok(());
        }
        futex::check_member(self as *const Self as usize).map_err(|_| LockError::NotMember)?;
        self.call_once_slow(f);
        Ok(())
    }

    #[cold]
    fn call_once_slow(&self, f: impl FnOnce()) {
        let tid = futex::tid();
        let mut f = Some(f);
        let mut state = self.state.load(Ordering::Acquire);
        loop {
            match state {
                COMPLETE => return,
                INCOMPLETE => {
                    match self.state.compare_exchange(
                        INCOMPLETE,
                        tid | RUNNING,
                        Ordering::Acquire,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => {
                            let guard = ResetOnUnwind(self);
                            (f.take().expect("initializer runs at most once per call"))();
                            core::mem::forget(guard);
                            if self.state.swap(COMPLETE, Ordering::Release) & WAITERS != 0 {
                                futex::wake(&self.state, i32::MAX);
                            }
                            return;
                        }
                        Err(s) => state = s,
                    }
                }
                s => {
                    if s & WAITERS == 0 {
                        if let Err(cur) = self.state.compare_exchange(
                            s,
                            s | WAITERS,
                            Ordering::Relaxed,
                            Ordering::Acquire,
                        ) {
                            state = cur;
                            continue;
                        }
                    }
                    let s = s | WAITERS;
                    if !futex::wait(&self.state, s, Some(futex::OWNER_CHECK)) {
                        let owner = s & TID_MASK;
                        if !futex::alive(owner) {
                            // The initializer died: start over (one waiter wins).
                            let _ = self.state.compare_exchange(
                                s,
                                INCOMPLETE,
                                Ordering::Acquire,
                                Ordering::Relaxed,
                            );
                        }
                    }
                    state = self.state.load(Ordering::Acquire);
                }
            }
        }
    }
}
