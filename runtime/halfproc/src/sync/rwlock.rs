// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! A reader-writer lock for the shared range (after std's futex rwlock).
//!
//! `state` holds the reader count (or [`WRITE_LOCKED`]) in its low 30 bits
//! and two "waiting" bits; writers sleep on a separate `writer_notify`
//! sequence word. Writers are preferred: new readers queue behind a waiting
//! writer.
//!
//! # Robustness
//!
//! The write holder stores its thread id in `writer`; readers register their
//! id in one of 16 `readers` slots (a reader that finds none free is counted
//! but untracked). A waiter that times out (100 ms) checks those ids: a dead
//! writer's claim is taken back with a CAS on `writer` (so only one waiter
//! releases it), a dead reader's slot with a CAS on that slot. The next
//! acquirer learns it through [`LockError::OwnerDied`]. A reader that dies
//! while untracked (more than 16 concurrent readers) is not detected.
//!
//! C header: `include/halfproc.h` (`halfproc_rwlock_*`).

use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};

use super::futex::{self, AtomicU32, Ordering};
use super::{guard_result, LockError};

const READ_LOCKED: u32 = 1;
const MASK: u32 = (1 << 30) - 1;
const WRITE_LOCKED: u32 = MASK;
const MAX_READERS: u32 = MASK - 1;
const READERS_WAITING: u32 = 1 << 30;
const WRITERS_WAITING: u32 = 1 << 31;
const SLOTS: usize = 16;

fn is_unlocked(s: u32) -> bool {
    s & MASK == 0
}
fn is_write_locked(s: u32) -> bool {
    s & MASK == WRITE_LOCKED
}
fn has_readers_waiting(s: u32) -> bool {
    s & READERS_WAITING != 0
}
fn has_writers_waiting(s: u32) -> bool {
    s & WRITERS_WAITING != 0
}
fn is_read_lockable(s: u32) -> bool {
    s & MASK < MAX_READERS && !has_readers_waiting(s) && !has_writers_waiting(s)
}

/// The bare reader-writer lock.
#[repr(C)]
#[doc(hidden)]
pub struct RawRwLock {
    state: AtomicU32,
    writer_notify: AtomicU32,
    writer: AtomicU32,
    owner_died: AtomicU32,
    readers: [AtomicU32; SLOTS],
}

impl RawRwLock {
    #[cfg(not(loom))]
    const fn new() -> Self {
        #[allow(clippy::declare_interior_mutable_const)]
        const Z: AtomicU32 = AtomicU32::new(0);
        RawRwLock {
            state: AtomicU32::new(0),
            writer_notify: AtomicU32::new(0),
            writer: AtomicU32::new(0),
            owner_died: AtomicU32::new(0),
            readers: [Z; SLOTS],
        }
    }

    #[cfg(loom)]
    fn new() -> Self {
        RawRwLock {
            state: AtomicU32::new(0),
            writer_notify: AtomicU32::new(0),
            writer: AtomicU32::new(0),
            owner_died: AtomicU32::new(0),
            readers: core::array::from_fn(|_| AtomicU32::new(0)),
        }
    }

    fn took_over(&self) -> bool {
        self.owner_died.load(Ordering::Relaxed) != 0
            && self.owner_died.swap(0, Ordering::Acquire) != 0
    }

    /// Replace the first reader slot holding `from` by `to`, probing from
    /// slot `tid % SLOTS`. Does nothing when no slot holds `from`.
    fn swap_reader_slot(&self, tid: u32, from: u32, to: u32) {
        let start = tid as usize % SLOTS;
        for i in 0..SLOTS {
            let slot = &self.readers[(start + i) % SLOTS];
            if slot.load(Ordering::Relaxed) == from
                && slot
                    .compare_exchange(from, to, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
        }
    }

    fn register_reader(&self, tid: u32) {
        self.swap_reader_slot(tid, 0, tid);
    }

    fn unregister_reader(&self, tid: u32) {
        self.swap_reader_slot(tid, tid, 0);
    }

    /// Returns `true` when it took the lock after an owner died.
    #[inline]
    fn read(&self) -> bool {
        let tid = futex::tid();
        let s = self.state.load(Ordering::Relaxed);
        if !(is_read_lockable(s)
            && self
                .state
                .compare_exchange_weak(s, s + READ_LOCKED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok())
        {
            self.read_contended();
        }
        self.register_reader(tid);
        self.took_over()
    }

    #[cold]
    fn read_contended(&self) {
        let mut state = self.spin_read();
        loop {
            if is_read_lockable(state) {
                match self.state.compare_exchange_weak(
                    state,
                    state + READ_LOCKED,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return,
                    Err(s) => {
                        state = s;
                        continue;
                    }
                }
            }
            assert!(
                state & MASK != MAX_READERS,
                "too many active read locks on RwLock"
            );
            if let Err(s) = self.set_waiting(state, READERS_WAITING) {
                state = s;
                continue;
            }
            if !futex::wait(
                &self.state,
                state | READERS_WAITING,
                Some(futex::OWNER_CHECK),
            ) {
                self.reclaim_dead();
            }
            state = self.spin_read();
        }
    }

    #[inline]
    fn read_unlock(&self) {
        self.unregister_reader(futex::tid());
        self.release_read();
    }

    fn release_read(&self) {
        let state = self.state.fetch_sub(READ_LOCKED, Ordering::Release) - READ_LOCKED;
        if is_unlocked(state) && has_writers_waiting(state) {
            self.wake_writer_or_readers(state);
        }
    }

    /// Returns `true` when it took the lock after an owner died.
    #[inline]
    fn write(&self) -> bool {
        if self
            .state
            .compare_exchange_weak(0, WRITE_LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.write_contended();
        }
        self.writer.store(futex::tid(), Ordering::Relaxed);
        self.took_over()
    }

    #[cold]
    fn write_contended(&self) {
        let mut state = self.spin_write();
        let mut other_writers_waiting = 0;
        loop {
            if is_unlocked(state) {
                match self.state.compare_exchange_weak(
                    state,
                    state | WRITE_LOCKED | other_writers_waiting,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return,
                    Err(s) => {
                        state = s;
                        continue;
                    }
                }
            }
            if let Err(s) = self.set_waiting(state, WRITERS_WAITING) {
                state = s;
                continue;
            }
            other_writers_waiting = WRITERS_WAITING;
            let seq = self.writer_notify.load(Ordering::Acquire);
            state = self.state.load(Ordering::Relaxed);
            if is_unlocked(state) || !has_writers_waiting(state) {
                continue;
            }
            if !futex::wait(&self.writer_notify, seq, Some(futex::OWNER_CHECK)) {
                self.reclaim_dead();
            }
            state = self.spin_write();
        }
    }

    #[inline]
    fn write_unlock(&self) {
        self.writer.store(0, Ordering::Relaxed);
        self.release_write();
    }

    fn release_write(&self) {
        let state = self.state.fetch_sub(WRITE_LOCKED, Ordering::Release) - WRITE_LOCKED;
        debug_assert!(is_unlocked(state));
        if has_writers_waiting(state) || has_readers_waiting(state) {
            self.wake_writer_or_readers(state);
        }
    }

    /// After a time-out: release what dead owners hold.
    #[cold]
    fn reclaim_dead(&self) {
        let state = self.state.load(Ordering::Relaxed);
        if is_write_locked(state) {
            let w = self.writer.load(Ordering::Relaxed);
            if w != 0
                && !futex::alive(w)
                && self
                    .writer
                    .compare_exchange(w, 0, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                self.owner_died.store(1, Ordering::Relaxed);
                self.release_write();
            }
        } else if state & MASK != 0 {
            for slot in &self.readers {
                let r = slot.load(Ordering::Relaxed);
                if r != 0
                    && !futex::alive(r)
                    && slot
                        .compare_exchange(r, 0, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                {
                    self.owner_died.store(1, Ordering::Relaxed);
                    self.release_read();
                }
            }
        }
    }

    #[cold]
    fn wake_writer_or_readers(&self, mut state: u32) {
        if state == WRITERS_WAITING {
            match self
                .state
                .compare_exchange(state, 0, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    self.wake_writer();
                    return;
                }
                Err(s) => state = s,
            }
        }
        if state == READERS_WAITING + WRITERS_WAITING {
            if self
                .state
                .compare_exchange(state, READERS_WAITING, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
            {
                return;
            }
            if self.wake_writer() {
                return;
            }
            state = READERS_WAITING;
        }
        if state == READERS_WAITING
            && self
                .state
                .compare_exchange(state, 0, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            futex::wake(&self.state, i32::MAX);
        }
    }

    /// Sets the waiting `bit` (unless `state` has it already), so that the
    /// holder's release wakes us; `Err(current)` when the state changed.
    fn set_waiting(&self, state: u32, bit: u32) -> Result<(), u32> {
        if state & bit != 0 {
            return Ok(());
        }
        self.state
            .compare_exchange(state, state | bit, Ordering::Relaxed, Ordering::Relaxed)
            .map(drop)
    }

    fn wake_writer(&self) -> bool {
        self.writer_notify.fetch_add(1, Ordering::Release);
        futex::wake(&self.writer_notify, 1) > 0
    }

    fn spin_until(&self, f: impl Fn(u32) -> bool) -> u32 {
        let mut spin = super::SPIN;
        loop {
            let state = self.state.load(Ordering::Relaxed);
            if f(state) || spin == 0 {
                return state;
            }
            futex::spin_hint();
            spin -= 1;
        }
    }

    fn spin_write(&self) -> u32 {
        self.spin_until(|s| is_unlocked(s) || has_writers_waiting(s))
    }

    fn spin_read(&self) -> u32 {
        self.spin_until(|s| !is_write_locked(s) || has_readers_waiting(s) || has_writers_waiting(s))
    }
}

/// A reader-writer lock protecting a `T`, usable across members.
///
/// # Examples
///
/// ```
/// use halfproc::sync::RwLock;
/// let l = RwLock::new(1);
/// {
///     let a = l.read().unwrap();
///     let b = l.read().unwrap();
///     assert_eq!(*a + *b, 2);
/// }
/// *l.write().unwrap() = 5;
/// assert_eq!(*l.read().unwrap(), 5);
/// ```
#[repr(C)]
pub struct RwLock<T: ?Sized> {
    raw: RawRwLock,
    data: UnsafeCell<T>,
}

// SAFETY: the lock serialises writers and excludes them from readers.
unsafe impl<T: ?Sized + Send> Send for RwLock<T> {}
// SAFETY: readers share `&T` concurrently, so `T: Sync` as well.
unsafe impl<T: ?Sized + Send + Sync> Sync for RwLock<T> {}

impl<T> RwLock<T> {
    /// A new unlocked lock.
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Self {
        RwLock {
            raw: RawRwLock::new(),
            data: UnsafeCell::new(value),
        }
    }

    /// A new unlocked lock.
    #[cfg(loom)]
    pub fn new(value: T) -> Self {
        RwLock {
            raw: RawRwLock::new(),
            data: UnsafeCell::new(value),
        }
    }
}

impl<T: ?Sized> RwLock<T> {
    fn check(&self) -> Result<(), ()> {
        futex::check_member(self as *const Self as *const u8 as usize)
    }

    /// Shared access. `Err(OwnerDied(guard))` after taking over from a dead
    /// holder.
    pub fn read(&self) -> Result<RwLockReadGuard<'_, T>, LockError<RwLockReadGuard<'_, T>>> {
        self.check().map_err(|_| LockError::NotMember)?;
        let owner_died = self.raw.read();
        guard_result(
            owner_died,
            RwLockReadGuard {
                l: self,
                _not_send: PhantomData,
            },
        )
    }

    /// Exclusive access. `Err(OwnerDied(guard))` after taking over from a
    /// dead holder.
    pub fn write(&self) -> Result<RwLockWriteGuard<'_, T>, LockError<RwLockWriteGuard<'_, T>>> {
        self.check().map_err(|_| LockError::NotMember)?;
        let owner_died = self.raw.write();
        guard_result(owner_died, self.write_guard())
    }

    /// Exclusive access if free right now.
    pub fn try_write(&self) -> Result<Option<RwLockWriteGuard<'_, T>>, LockError<()>> {
        self.check().map_err(|_| LockError::NotMember)?;
        if self
            .raw
            .state
            .compare_exchange(0, WRITE_LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            self.raw.writer.store(futex::tid(), Ordering::Relaxed);
            Ok(Some(self.write_guard()))
        } else {
            Ok(None)
        }
    }

    /// The guard of a write lock this thread has just taken.
    fn write_guard(&self) -> RwLockWriteGuard<'_, T> {
        RwLockWriteGuard {
            l: self,
            _not_send: PhantomData,
        }
    }
}

/// Shared access to an [`RwLock`]'s data.
#[must_use = "the lock is released when the guard drops"]
pub struct RwLockReadGuard<'a, T: ?Sized> {
    l: &'a RwLock<T>,
    _not_send: PhantomData<*const ()>,
}

/// Exclusive access to an [`RwLock`]'s data.
#[must_use = "the lock is released when the guard drops"]
pub struct RwLockWriteGuard<'a, T: ?Sized> {
    l: &'a RwLock<T>,
    _not_send: PhantomData<*const ()>,
}

// SAFETY: sharing a guard only shares `&T`.
unsafe impl<T: ?Sized + Sync> Sync for RwLockReadGuard<'_, T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Sync> Sync for RwLockWriteGuard<'_, T> {}

impl<T: ?Sized> Deref for RwLockReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: a read lock is held: no writer exists.
        unsafe { &*self.l.data.get() }
    }
}

impl<T: ?Sized> Drop for RwLockReadGuard<'_, T> {
    fn drop(&mut self) {
        self.l.raw.read_unlock();
    }
}

impl<T: ?Sized> Deref for RwLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the write lock is held.
        unsafe { &*self.l.data.get() }
    }
}

impl<T: ?Sized> DerefMut for RwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the write lock is held exclusively.
        unsafe { &mut *self.l.data.get() }
    }
}

impl<T: ?Sized> Drop for RwLockWriteGuard<'_, T> {
    fn drop(&mut self) {
        self.l.raw.write_unlock();
    }
}

/// Raw entry points for the C ABI (`halfproc_rwlock_t` has this layout).
#[doc(hidden)]
pub mod raw {
    use super::*;

    /// The raw lock type.
    pub type Raw = RawRwLock;

    /// Read-lock; true when a dead holder was released on the way.
    pub fn read(l: &Raw) -> bool {
        l.read()
    }
    /// Write-lock; true when a dead holder was released on the way.
    pub fn write(l: &Raw) -> bool {
        l.write()
    }
    /// Unlock whichever mode the caller holds.
    pub fn unlock(l: &Raw) {
        if is_write_locked(l.state.load(Ordering::Relaxed))
            && l.writer.load(Ordering::Relaxed) == futex::tid()
        {
            l.write_unlock()
        } else {
            l.read_unlock()
        }
    }
    /// Size of the raw lock.
    pub const SIZE: usize = core::mem::size_of::<RawRwLock>();
}
