// SPDX-License-Identifier: GPL-2.0

//! `dmread()`/`dmwrite()`: direct copies between the private memory of two
//! members of one set.
//!
//! The shape is that of `process_vm_readv()` (`mm/process_vm_access.c`): pin
//! a bounded batch of the remote pages, copy each page to or from the local
//! iterator, unpin, let others run, repeat.
//!
//! # Who may copy
//!
//! Membership is equal trust for the shared range only: a caller may copy
//! to or from `pid` when all of these hold, and gets `EPERM` otherwise.
//!
//! - Both are members of the same set (whatever the caller's privileges: a
//!   process outside the set never may).
//! - The caller may attach to `pid` as `ptrace` would
//!   (`PTRACE_MODE_ATTACH_REALCREDS`: the same real credentials or
//!   `CAP_SYS_PTRACE`, a dumpable target, the LSM hook), checked with the
//!   target's mm under its `exec_update_lock`, as `process_vm_readv()` does.
//!   A member that dropped privileges cannot reach a root member; an exec
//!   that changes credentials (set-uid) already leaves the set.
//! - The target's mm is dumpable by its own user: a member that made itself
//!   non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`, or an exec of an image it
//!   cannot read) refuses every member, `CAP_SYS_PTRACE` or not. It stays a
//!   member: the shared range is shared with it whatever it runs.
//!
//! # Return value
//!
//! The number of bytes copied. A copy that cannot reach a page (unmapped,
//! `PROT_NONE`, read-only for `dmwrite`, or unmapped by the target while the
//! copy runs) stops there: the call returns the bytes copied so far, or
//! `EFAULT` if there are none. A shared-range address copies the set's
//! memory, which caller and target both map: `pin_user_pages_remote()` on
//! the target's mm resolves it in the set mm (patch 0022).
//!
//! # Errors
//!
//! `ESRCH`: no task `pid`, or it has no mm (exited). `EPERM`: the caller or
//! `pid` is not a member, or they are members of different sets (the pid is
//! visible in `/proc` anyway, so `EPERM` reveals nothing). `EFAULT`: nothing
//! could be copied. `EINTR`: a fatal signal arrived before any byte moved.
//! `EINVAL` (overflowing sizes, unknown flags) and an empty copy returning 0
//! are handled before the module is called.

use crate::mm::{Mm, MmGuard, TaskRef};
use crate::set::Set;
use crate::stats::Counters;
use kernel::{bindings, page::PAGE_SIZE, prelude::*};

/// Pages pinned at a time: bounds the pinned memory of one call to 256 KiB
/// and the time between two `cond_resched()`.
const BATCH: usize = 64;

/// Copy between the local iterator and the remote ranges `rvec` of member
/// `pid`; see the module documentation.
///
/// # Safety
///
/// `iter` must be a valid user-backed iterator for the duration of the call.
pub(crate) unsafe fn copy(
    pid: i32,
    iter: *mut bindings::iov_iter,
    rvec: &[bindings::iovec],
    write: bool,
) -> Result<usize> {
    let me = Mm::current().ok_or(EPERM)?;
    let task = TaskRef::by_vpid(pid).ok_or(ESRCH)?;
    let target = MmGuard::access(&task)?.ok_or(ESRCH)?;
    let set = me.halfproc();
    // A set mm never runs a syscall, so `me` is a member here.
    if set.is_null() || target.halfproc() != set || !target.dumpable() {
        return Err(EPERM);
    }
    let counters = Set::of(me).ok_or(EPERM)?;
    // SAFETY: `iter` is valid (caller).
    let mut left = unsafe { iter_count(iter) };
    let mut total = 0usize;
    for v in rvec {
        if left == 0 {
            break;
        }
        let len = v.iov_len.min(left);
        if len == 0 {
            continue;
        }
        // SAFETY: `iter` is valid (caller).
        match unsafe {
            copy_range(
                &target,
                v.iov_base as usize,
                len,
                iter,
                write,
                &counters.stats,
            )
        } {
            Ok(n) => {
                total += n;
                left -= n;
                if n < len {
                    break;
                }
            }
            Err(e) if total == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(total)
}

/// Bytes left in `iter`.
///
/// # Safety
///
/// `iter` must be valid.
unsafe fn iter_count(iter: *const bindings::iov_iter) -> usize {
    // SAFETY: `iter` is valid (caller).
    unsafe { bindings::halfproc_iter_count(iter) }
}

/// Pinned remote pages, unpinned on drop (dirtied for a write).
struct Pinned {
    pages: [*mut bindings::page; BATCH],
    n: usize,
    dirty: bool,
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if self.n == 0 {
            return;
        }
        // SAFETY: the first `n` entries were pinned by `pin_user_pages_remote`
        // and are unpinned exactly once, here.
        unsafe {
            if self.dirty {
                bindings::unpin_user_pages_dirty_lock(self.pages.as_mut_ptr(), self.n as _, true);
            } else {
                bindings::unpin_user_pages(self.pages.as_mut_ptr(), self.n as _);
            }
        }
    }
}

/// Copy `[addr, addr + len)` of `mm`; `Ok(n)` with `n < len` when it stopped
/// at an unreachable page after copying `n` bytes.
///
/// # Safety
///
/// `iter` must be valid.
unsafe fn copy_range(
    mm: &Mm,
    addr: usize,
    len: usize,
    iter: *mut bindings::iov_iter,
    write: bool,
    stats: &Counters,
) -> Result<usize> {
    let gup_flags = if write { bindings::FOLL_WRITE } else { 0 };
    let mut done = 0usize;
    while done < len {
        let start = addr + done;
        let offset = start % PAGE_SIZE;
        let nr = (offset + (len - done)).div_ceil(PAGE_SIZE).min(BATCH);
        let mut pinned = Pinned {
            pages: [core::ptr::null_mut(); BATCH],
            n: 0,
            dirty: write,
        };
        let got = {
            let mut lock = match mm.mmap_read_lock_killable() {
                Ok(lock) => lock,
                Err(e) if done == 0 => return Err(e),
                Err(_) => return Ok(done),
            };
            lock.with_locked(|locked| {
                // SAFETY: `mm` is live (the caller holds `mm_users`), its
                // mmap lock is held for reading as `locked` says, and `pages`
                // has room for `nr <= BATCH` entries.
                unsafe {
                    bindings::pin_user_pages_remote(
                        mm.as_raw(),
                        (start - offset) as _,
                        nr as _,
                        gup_flags as _,
                        pinned.pages.as_mut_ptr(),
                        locked,
                    )
                }
            })
        };
        if got <= 0 {
            return match (done, got) {
                (0, 0) => Err(EFAULT),
                (0, e) => Err(Error::from_errno(e as i32)),
                _ => Ok(done),
            };
        }
        pinned.n = got as usize;
        stats.pinned(pinned.n);
        let mut off = offset;
        for &page in &pinned.pages[..pinned.n] {
            let n = (PAGE_SIZE - off).min(len - done);
            // SAFETY: `page` is pinned, `off + n <= PAGE_SIZE`, and `iter` is
            // valid (caller).
            let c = unsafe {
                if write {
                    bindings::copy_page_from_iter(page, off as _, n as _, iter)
                } else {
                    bindings::copy_page_to_iter(page, off as _, n as _, iter)
                }
            } as usize;
            done += c;
            if c < n {
                // The local buffer faulted.
                return if done == 0 { Err(EFAULT) } else { Ok(done) };
            }
            off = 0;
        }
        drop(pinned);
        // SAFETY: FFI call without preconditions; we hold no locks.
        unsafe { bindings::halfproc_cond_resched() };
    }
    Ok(done)
}
