// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Identity of the calling thread, and what a fork must reset.
//!
//! Lock owners are recorded by kernel thread id, so the id is cached per
//! thread; a child of `fork()` is a new process whose only thread has a new
//! id, and must forget the cache (and its per-thread heap), which
//! [`reset_after_fork`] does. It sits below `sync` and `alloc`, which use it,
//! and depends on nothing but the system-call layer.

use core::cell::Cell;

use crate::sys;

thread_local! {
    static TID: Cell<i32> = const { Cell::new(0) };
}

/// The caller's kernel thread id, cached per thread (reset in children).
#[inline]
pub(crate) fn current_tid() -> i32 {
    TID.with(|t| {
        let v = t.get();
        if v != 0 {
            v
        } else {
            let v = sys::gettid();
            t.set(v);
            v
        }
    })
}

/// Called in a child after `fork` (its only thread).
pub(crate) fn reset_after_fork() {
    let _ = TID.try_with(|t| t.set(0));
    crate::alloc::heap::forget_thread_heap();
}

/// Whether the caller is its process's main thread.
pub(crate) fn is_main_thread() -> bool {
    current_tid() == sys::getpid()
}
