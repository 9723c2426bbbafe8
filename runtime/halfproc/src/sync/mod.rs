// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Synchronization primitives for the shared range, valid across members.
//!
//! All of them are plain futex words (shared futexes, never
//! `FUTEX_PRIVATE_FLAG`), with no pointer to any member's globals or stack,
//! so a primitive placed in the shared range works between members exactly
//! as between threads. Locks record their owner's thread id and recover when
//! the owner dies ([`LockError::OwnerDied`]); see [`mutex`] for the design.
//!
//! | type | futex words | robust |
//! |---|---|---|
//! | [`Mutex`] / [`RawMutex`] | 1 | owner death detected, next locker recovers |
//! | [`Condvar`] | 1 | waits re-lock through the mutex (recovers likewise) |
//! | [`RwLock`] | 2 + 16 reader slots | dead writer and dead (tracked) readers released |
//! | [`Once`] | 1 | a dead initializer's run is retried |
//! | [`Barrier`] | 2 | `wait_timeout` bounds a wait for a dead member |
//! | [`SeqCount`] | 0 (one writer, readers never wait) | nothing held |
//!
//! A primitive used from an outsider process (a plain `fork` of a member)
//! fails with [`LockError::NotMember`].

pub mod barrier;
pub mod condvar;
pub(crate) mod futex;
pub mod mutex;
pub mod once;
pub mod rwlock;
pub mod seqlock;

pub use barrier::{Barrier, BarrierWaitResult};
pub use condvar::{Condvar, WaitTimeoutResult};
pub use mutex::{Acquired, Mutex, MutexGuard, RawMutex};
pub use once::Once;
pub use rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use seqlock::SeqCount;

#[cfg(loom)]
pub use futex::loom_die;

/// Load-only spins before sleeping (one under loom, to keep models small).
const SPIN: u32 = if cfg!(loom) { 1 } else { 100 };

use core::fmt;

/// Why a lock call did not simply succeed.
///
/// # Examples
///
/// ```
/// use halfproc::sync::LockError;
/// let e: LockError<u32> = LockError::OwnerDied(7);
/// assert_eq!(e.into_inner(), Some(7));
/// assert_eq!(LockError::<u32>::NotMember.into_inner(), None);
/// ```
pub enum LockError<G> {
    /// The lock is held now, but its previous owner died holding it: the
    /// protected data may be inconsistent. The guard is valid.
    OwnerDied(G),
    /// The calling process is not a member of the set.
    NotMember,
}

/// `Ok(guard)`, or `Err(OwnerDied(guard))` when the lock was just taken over
/// from a dead owner.
pub(crate) fn guard_result<G>(owner_died: bool, guard: G) -> Result<G, LockError<G>> {
    if owner_died {
        Err(LockError::OwnerDied(guard))
    } else {
        Ok(guard)
    }
}

impl<G> LockError<G> {
    /// The guard, when the lock was taken despite the error.
    pub fn into_inner(self) -> Option<G> {
        match self {
            LockError::OwnerDied(g) => Some(g),
            LockError::NotMember => None,
        }
    }

    /// The errno value for the C boundary (`EOWNERDEAD` / `EPERM`).
    pub fn errno(&self) -> i32 {
        match self {
            LockError::OwnerDied(_) => libc::EOWNERDEAD,
            LockError::NotMember => libc::EPERM,
        }
    }

    pub(crate) fn map<H>(self, f: impl FnOnce(G) -> H) -> LockError<H> {
        match self {
            LockError::OwnerDied(g) => LockError::OwnerDied(f(g)),
            LockError::NotMember => LockError::NotMember,
        }
    }
}

impl<G> fmt::Debug for LockError<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::OwnerDied(_) => f.write_str("OwnerDied(..)"),
            LockError::NotMember => f.write_str("NotMember"),
        }
    }
}

impl<G> fmt::Display for LockError<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::OwnerDied(_) => f.write_str("the previous owner died holding the lock"),
            LockError::NotMember => {
                f.write_str("the calling process is not a member of the half-process set")
            }
        }
    }
}

impl<G> std::error::Error for LockError<G> {}
