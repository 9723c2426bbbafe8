// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! A mutex for the shared range, valid across members.
//!
//! Modelled on Rust std's futex mutex: one 32-bit word, three states
//! (unlocked / locked / locked-with-waiters), an inlined fast path (one CAS
//! to lock, one swap to unlock) and a cold contended path that spins on loads
//! and sleeps on a *shared* futex (never `FUTEX_PRIVATE_FLAG`), so a wait in
//! one member is woken by an unlock in another.
//!
//! # Robustness (owner death)
//!
//! The locked word holds the owner's kernel thread id:
//!
//! ```text
//! 0                      unlocked
//! tid                    locked, no waiters
//! tid | CONTENDED        locked, maybe waiters (unlock must wake one)
//! ```
//!
//! A contended waiter sleeps at most [`OWNER_CHECK`](super::futex) at a time;
//! after a time-out it checks whether the owner still runs. If not, it takes
//! the lock over with one CAS (`dead | CONTENDED -> me | CONTENDED`), so only
//! one waiter recovers, and the caller learns it through
//! [`LockError::OwnerDied`]: the data may be half-updated. The lock is
//! consistent again once that guard drops.
//!
//! Why not the kernel's robust futex list: it has one head per thread and
//! glibc already owns it (for its robust pthread mutexes); chaining into
//! glibc's private list layout would be fragile. Owner-death detection needs
//! nothing from the C library and works the same on both backends. Its costs:
//! detection takes up to 100 ms, and a recycled thread id (pid_max is 4M by
//! default) could make a dead owner look alive until that id dies too.
//!
//! A mutex never relies on another member's globals or stack: everything it
//! needs is in its own word.
//!
//! C header: `include/halfproc.h` (`halfproc_mutex_*`).

use core::cell::UnsafeCell;
use core::fmt;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};

use super::futex::{self, AtomicU32, Ordering};
use super::{guard_result, LockError};

const UNLOCKED: u32 = 0;
const CONTENDED: u32 = 1 << 31;
const TID_MASK: u32 = !CONTENDED;

/// How an acquisition went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// The lock was free or released normally.
    Clean,
    /// The previous owner died holding it; the protected state may be
    /// inconsistent.
    OwnerDied,
}

/// The bare lock: one futex word. `Mutex<T>` wraps it with data.
///
/// # Examples
///
/// ```
/// use halfproc::sync::RawMutex;
/// let m = RawMutex::new();
/// assert!(m.try_lock().unwrap());
/// assert!(!m.try_lock().unwrap());
/// // SAFETY: we hold it.
/// unsafe { m.unlock() };
/// ```
#[repr(transparent)]
pub struct RawMutex {
    state: AtomicU32,
}

impl Default for RawMutex {
    fn default() -> Self {
        Self::new()
    }
}

impl RawMutex {
    /// An unlocked mutex (all-zero, so zeroed shared memory is one too).
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        RawMutex {
            state: AtomicU32::new(UNLOCKED),
        }
    }

    /// An unlocked mutex.
    #[cfg(loom)]
    pub fn new() -> Self {
        RawMutex {
            state: AtomicU32::new(UNLOCKED),
        }
    }

    #[inline(always)]
    fn addr(&self) -> usize {
        self as *const Self as usize
    }

    /// The fast path: one CAS from unlocked to held by `tid`.
    #[inline(always)]
    fn try_acquire(&self, tid: u32) -> bool {
        self.state
            .compare_exchange(UNLOCKED, tid, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Takes the lock if it is free. `Err(NotMember)` in an outsider.
    #[inline]
    pub fn try_lock(&self) -> Result<bool, LockError<()>> {
        futex::check_member(self.addr()).map_err(|_| LockError::NotMember)?;
        Ok(self.try_acquire(futex::tid()))
    }

    /// Takes the lock, sleeping while another thread or member holds it.
    #[inline]
    pub fn lock(&self) -> Result<Acquired, LockError<()>> {
        futex::check_member(self.addr()).map_err(|_| LockError::NotMember)?;
        let tid = futex::tid();
        if self.try_acquire(tid) {
            return Ok(Acquired::Clean);
        }
        Ok(self.lock_contended(tid, None).unwrap_or(Acquired::Clean))
    }

    /// Like [`lock`](Self::lock) but gives up at `deadline` (`Ok(None)`).
    pub fn lock_until(
        &self,
        deadline: std::time::Instant,
    ) -> Result<Option<Acquired>, LockError<()>> {
        futex::check_member(self.addr()).map_err(|_| LockError::NotMember)?;
        let tid = futex::tid();
        if self.try_acquire(tid) {
            return Ok(Some(Acquired::Clean));
        }
        Ok(self.lock_contended(tid, Some(deadline)))
    }

    /// Locks, ignoring owner death (internal bookkeeping locks whose data
    /// stays consistent at every step), and returns an unlocking guard.
    pub(crate) fn lock_recover(&self) -> RawGuard<'_> {
        let tid = futex::tid();
        if !self.try_acquire(tid) {
            self.lock_contended(tid, None);
        }
        RawGuard(self)
    }

    fn spin(&self) -> u32 {
        let mut spin = super::SPIN;
        loop {
            let state = self.state.load(Ordering::Relaxed);
            // Stop when unlocked, when others already sleep, or after 100 tries.
            if state == UNLOCKED || state & CONTENDED != 0 || spin == 0 {
                return state;
            }
            futex::spin_hint();
            spin -= 1;
        }
    }

    /// Takes the lock as `tid | CONTENDED` if the word still is `from`;
    /// else returns the word found.
    fn take_contended(&self, from: u32, tid: u32) -> Result<(), u32> {
        self.state
            .compare_exchange(from, tid | CONTENDED, Ordering::Acquire, Ordering::Relaxed)
            .map(drop)
    }

    /// The contended path. `None` only when `deadline` passed.
    #[cold]
    fn lock_contended(&self, tid: u32, deadline: Option<std::time::Instant>) -> Option<Acquired> {
        let mut state = self.spin();
        loop {
            if state == UNLOCKED {
                // Others may sleep: take it as contended so our unlock wakes one.
                match self.take_contended(UNLOCKED, tid) {
                    Ok(()) => return Some(Acquired::Clean),
                    Err(s) => {
                        state = s;
                        continue;
                    }
                }
            }
            if state & CONTENDED == 0 {
                match self.state.compare_exchange(
                    state,
                    state | CONTENDED,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => state |= CONTENDED,
                    Err(s) => {
                        state = s;
                        continue;
                    }
                }
            }
            let mut timeout = futex::OWNER_CHECK;
            if let Some(d) = deadline {
                let now = std::time::Instant::now();
                if now >= d {
                    return None;
                }
                timeout = timeout.min(d - now);
            }
            if !futex::wait(&self.state, state, Some(timeout)) {
                let owner = state & TID_MASK;
                if owner != 0 && !futex::alive(owner) {
                    // Exactly one waiter wins this CAS.
                    match self.take_contended(state, tid) {
                        Ok(()) => return Some(Acquired::OwnerDied),
                        Err(s) => {
                            state = s;
                            continue;
                        }
                    }
                }
            }
            state = self.spin();
        }
    }

    /// Releases the lock.
    ///
    /// # Safety
    ///
    /// The calling thread must hold the lock.
    #[inline]
    pub unsafe fn unlock(&self) {
        let prev = self.state.swap(UNLOCKED, Ordering::Release);
        debug_assert!(
            prev & TID_MASK == futex::tid(),
            "unlock of a mutex held by {}",
            prev & TID_MASK
        );
        if prev & CONTENDED != 0 {
            self.wake();
        }
    }

    #[cold]
    fn wake(&self) {
        futex::wake(&self.state, 1);
    }

    /// Whether some thread holds the lock (a snapshot).
    pub fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) != UNLOCKED
    }

    /// The thread id of the current holder, if any (a snapshot).
    pub fn owner(&self) -> Option<u32> {
        match self.state.load(Ordering::Relaxed) & TID_MASK {
            0 => None,
            t => Some(t),
        }
    }
}

/// Unlocks a [`RawMutex`] on drop.
pub(crate) struct RawGuard<'a>(&'a RawMutex);

impl Drop for RawGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: the guard exists only while its thread holds the lock.
        unsafe { self.0.unlock() }
    }
}

/// A mutual-exclusion lock protecting a `T`, usable across members when it
/// lives in the shared range.
///
/// # Examples
///
/// ```
/// use halfproc::sync::{LockError, Mutex};
/// let m = Mutex::new(5);
/// *m.lock().unwrap() += 1;
/// assert_eq!(*m.lock().unwrap(), 6);
/// let v = match m.lock() {
///     Ok(g) => *g,
///     Err(LockError::OwnerDied(g)) => *g, // recovered from a dead owner
///     Err(LockError::NotMember) => unreachable!(),
/// };
/// assert_eq!(v, 6);
/// ```
#[repr(C)]
pub struct Mutex<T: ?Sized> {
    raw: RawMutex,
    data: UnsafeCell<T>,
}

// SAFETY: the lock serialises all access to `data`.
unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}

impl<T> Mutex<T> {
    /// A new unlocked mutex.
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Self {
        Mutex {
            raw: RawMutex::new(),
            data: UnsafeCell::new(value),
        }
    }

    /// A new unlocked mutex.
    #[cfg(loom)]
    pub fn new(value: T) -> Self {
        Mutex {
            raw: RawMutex::new(),
            data: UnsafeCell::new(value),
        }
    }

    /// Consumes the mutex, returning the data.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Locks; `Err(OwnerDied(guard))` when the previous owner died holding it
    /// (the guard is valid: check the data), `Err(NotMember)` in an outsider.
    #[inline]
    pub fn lock(&self) -> Result<MutexGuard<'_, T>, LockError<MutexGuard<'_, T>>> {
        match self.raw.lock() {
            Ok(how) => self.guard(how),
            Err(_) => Err(LockError::NotMember),
        }
    }

    /// Locks if free: `Ok(None)` when held by someone else.
    #[inline]
    pub fn try_lock(&self) -> Result<Option<MutexGuard<'_, T>>, LockError<()>> {
        Ok(self.raw.try_lock()?.then_some(MutexGuard::new(self)))
    }

    /// Locks, giving up after `timeout` (`Ok(None)`).
    pub fn lock_timeout(
        &self,
        timeout: core::time::Duration,
    ) -> Result<Option<MutexGuard<'_, T>>, LockError<MutexGuard<'_, T>>> {
        match self.raw.lock_until(std::time::Instant::now() + timeout) {
            Ok(Some(how)) => self.guard(how).map(Some),
            Ok(None) => Ok(None),
            Err(_) => Err(LockError::NotMember),
        }
    }

    /// The guard of a lock this thread has just taken, `Err(OwnerDied)` as
    /// `how` says.
    fn guard(&self, how: Acquired) -> Result<MutexGuard<'_, T>, LockError<MutexGuard<'_, T>>> {
        guard_result(how == Acquired::OwnerDied, MutexGuard::new(self))
    }

    /// The underlying lock.
    pub fn raw(&self) -> &RawMutex {
        &self.raw
    }

    /// Mutable access without locking (we have `&mut`).
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mutex")
            .field("locked", &self.raw.is_locked())
            .finish_non_exhaustive()
    }
}

/// Holds a [`Mutex`] locked; unlocks on drop.
#[must_use = "the mutex unlocks when the guard drops"]
pub struct MutexGuard<'a, T: ?Sized> {
    m: &'a Mutex<T>,
    /// Not `Send`: the lock word names the locking thread.
    _not_send: PhantomData<*const ()>,
}

// SAFETY: sharing the guard only shares `&T`.
unsafe impl<T: ?Sized + Sync> Sync for MutexGuard<'_, T> {}

impl<'a, T: ?Sized> MutexGuard<'a, T> {
    fn new(m: &'a Mutex<T>) -> Self {
        MutexGuard {
            m,
            _not_send: PhantomData,
        }
    }

    pub(crate) fn mutex(&self) -> &'a Mutex<T> {
        self.m
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard proves the lock is held.
        unsafe { &*self.m.data.get() }
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard proves the lock is held, exclusively.
        unsafe { &mut *self.m.data.get() }
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard proves this thread holds the lock.
        unsafe { self.m.raw.unlock() }
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
