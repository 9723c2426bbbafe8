// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The atomics-and-futex facade the lock state machines are written against.
//!
//! Normally: `core` atomics and shared (non-`FUTEX_PRIVATE_FLAG`) futexes, so
//! a wait in one member matches a wake in another. Under `--cfg loom`: loom's
//! atomics and a futex model (one loom mutex + condvar: the value check and
//! the sleep are atomic with respect to wakes, as in the kernel), with
//! owner death simulated by [`loom_die`].
//!
//! Lock words store the owner's kernel thread id; [`alive`] tells whether that
//! task still runs (a zombie counts as dead).

#[cfg(not(loom))]
mod imp {
    pub(crate) use core::sync::atomic::{AtomicU32, Ordering};
    use core::time::Duration;

    /// Sleeps while `*w == expected`; false on time-out.
    #[inline]
    pub(crate) fn wait(w: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
        halfproc_sys::futex::wait(w, expected, timeout)
    }

    /// Wakes up to `n` waiters of `w`; returns how many woke.
    #[inline]
    pub(crate) fn wake(w: &AtomicU32, n: i32) -> i32 {
        halfproc_sys::futex::wake(w, n)
    }

    /// The caller's thread id (never 0).
    #[inline(always)]
    pub(crate) fn tid() -> u32 {
        crate::identity::current_tid() as u32
    }

    /// Whether task `tid` still runs.
    #[cold]
    pub(crate) fn alive(tid: u32) -> bool {
        halfproc_sys::task::task_alive(tid as i32)
    }

    /// Refuses shared-range locks in an outsider process.
    #[inline(always)]
    pub(crate) fn check_member(addr: usize) -> Result<(), ()> {
        crate::identity::check_member_for(addr).map_err(|_| ())
    }

    #[inline(always)]
    pub(crate) fn spin_hint() {
        core::hint::spin_loop()
    }
}

#[cfg(loom)]
mod imp {
    use core::time::Duration;
    pub(crate) use loom::sync::atomic::{AtomicU32, Ordering};
    use loom::sync::{Condvar, Mutex};

    loom::lazy_static! {
        static ref BUCKET: (Mutex<()>, Condvar) = (Mutex::new(()), Condvar::new());
        static ref NEXT_TID: loom::sync::atomic::AtomicU32 = loom::sync::atomic::AtomicU32::new(1);
        static ref DEAD: Mutex<Vec<u32>> = Mutex::new(Vec::new());
    }
    loom::thread_local! {
        static TID: u32 = NEXT_TID.fetch_add(1, Ordering::Relaxed);
    }

    fn anyone_dead() -> bool {
        !DEAD.lock().unwrap().is_empty()
    }

    /// A timed wait only matters once someone died: model it as returning
    /// at once then; otherwise as an untimed wait (spurious returns allowed).
    pub(crate) fn wait(w: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
        let g = BUCKET.0.lock().unwrap();
        if w.load(Ordering::SeqCst) != expected {
            return true;
        }
        if timeout.is_some() && anyone_dead() {
            drop(g);
            loom::thread::yield_now();
            return false;
        }
        drop(BUCKET.1.wait(g).unwrap());
        true
    }

    pub(crate) fn wake(_w: &AtomicU32, _n: i32) -> i32 {
        let _g = BUCKET.0.lock().unwrap();
        BUCKET.1.notify_all();
        1
    }

    pub(crate) fn tid() -> u32 {
        TID.with(|t| *t)
    }

    pub(crate) fn alive(tid: u32) -> bool {
        !DEAD.lock().unwrap().contains(&tid)
    }

    /// Marks the calling loom thread dead (it must return right after,
    /// holding whatever it holds) and wakes every waiter so they notice.
    pub(crate) fn die() {
        DEAD.lock().unwrap().push(tid());
        let _g = BUCKET.0.lock().unwrap();
        BUCKET.1.notify_all();
    }

    pub(crate) fn check_member(_addr: usize) -> Result<(), ()> {
        Ok(())
    }

    pub(crate) fn spin_hint() {
        loom::thread::yield_now()
    }
}

pub(crate) use imp::*;

/// Simulates the death of the calling thread in loom models.
#[cfg(loom)]
pub fn loom_die() {
    imp::die()
}

/// How long a contended waiter sleeps before checking whether the lock's
/// owner died.
pub(crate) const OWNER_CHECK: core::time::Duration = core::time::Duration::from_millis(100);
