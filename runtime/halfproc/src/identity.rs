// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Who is calling: the thread's id, and whether its process is a member.
//!
//! Lock owners are recorded by kernel thread id, so the id is cached per
//! thread; a child of `fork()` is a new process whose only thread has a new
//! id and must forget the cache ([`reset_tid_after_fork`]).
//!
//! The creator and every member are *members*. A plain `fork()` child of a
//! member is an *outsider* (the set's `pthread_atfork` child handler marks
//! it, unless the kernel made it a member, `PR_HALFPROC_INHERIT`): it may
//! still see the mapping on the portable backend, but every shared-range
//! operation of the runtime refuses it with [`Error::NotMember`].
//!
//! This module sits below `sync`, `alloc`, `member` and `set`, which use it,
//! and depends only on the system-call layer and the error type.

use core::cell::Cell;
use core::sync::atomic::{AtomicU8, Ordering};

use halfproc_sys::in_shared_range;

use crate::error::{Error, Result};
use halfproc_sys::task;

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
            let v = task::gettid();
            t.set(v);
            v
        }
    })
}

/// Called in a child after `fork` (its only thread).
pub(crate) fn reset_tid_after_fork() {
    let _ = TID.try_with(|t| t.set(0));
}

/// Whether the caller is its process's main thread.
pub(crate) fn is_main_thread() -> bool {
    current_tid() == task::getpid()
}

const NO_SET: u8 = 0;
const MEMBER: u8 = 1;
const OUTSIDER: u8 = 2;
static MEMBERSHIP: AtomicU8 = AtomicU8::new(NO_SET);

/// Whether this process has made or joined a set (member or outsider).
pub(crate) fn in_any_set() -> bool {
    MEMBERSHIP.load(Ordering::Relaxed) != NO_SET
}

/// Whether the calling process is an outsider: a fork of a member that did
/// not go through the runtime. Cheap enough for lock fast paths.
#[inline(always)]
pub(crate) fn is_outsider() -> bool {
    MEMBERSHIP.load(Ordering::Relaxed) == OUTSIDER
}

/// Whether the calling process is a member.
pub(crate) fn is_member() -> bool {
    MEMBERSHIP.load(Ordering::Relaxed) == MEMBER
}

/// Marks the calling process as a member (the creator, a new member).
pub(crate) fn mark_member() {
    MEMBERSHIP.store(MEMBER, Ordering::Relaxed);
}

/// Marks the calling process (a fork of a member) as an outsider.
pub(crate) fn mark_outsider() {
    MEMBERSHIP.store(OUTSIDER, Ordering::Relaxed);
}

/// Fails with [`Error::NotMember`] in an outsider when `addr` is in the range.
#[inline(always)]
pub(crate) fn check_member_for(addr: usize) -> Result<()> {
    if is_outsider() && in_shared_range(addr as u64, 1) {
        Err(Error::NotMember)
    } else {
        Ok(())
    }
}
