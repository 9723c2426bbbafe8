// SPDX-License-Identifier: GPL-2.0

//! Half-processes: processes that share the address range [2^45, 2^46) with
//! the other members of their set, with the semantics of threads, while
//! everything else stays private.
//!
//! This module holds the policy and registers it with the hook points of the
//! patch series (`struct halfproc_ops`, `include/linux/halfproc.h`):
//!
//! - `set`: sets, membership, lifecycle and member TLB coherence;
//! - `dm`: `dmread()`/`dmwrite()`;
//! - `mm`: typed wrappers over the C structures it touches;
//! - this file: the hook entry points and argument validation.
//!
//! Every live set pins the module (`halfproc_set_mm_alloc()` takes a module
//! reference), so `rmmod` fails with `EBUSY`/`EWOULDBLOCK` while any set
//! exists and succeeds once the last member has exited. The core holds a
//! reference for the duration of every hook call, so unregistering in `drop`
//! cannot race with a running hook.

use core::sync::atomic::Ordering;
use kernel::{bindings, error::to_result, ffi::c_int, ffi::c_long, ffi::c_ulong, prelude::*};

mod dm;
mod mm;
mod set;

use mm::{current_signal, task_mm, task_signal, Mm};
use set::Set;

module! {
    type: HalfProc,
    name: "halfproc",
    author: "halfproc developers",
    description: "Half-process sets: a shared address range with thread semantics",
    license: "GPL",
}

/// The pointer to this module, for `halfproc_set::owner`.
pub(crate) fn this_module() -> *mut bindings::module {
    THIS_MODULE.as_ptr()
}

/// The registered operations; boxed so their address is stable.
struct Ops(KBox<bindings::halfproc_ops>);

// SAFETY: the table is written once before registration and only read after.
unsafe impl Send for Ops {}
// SAFETY: as above.
unsafe impl Sync for Ops {}

struct HalfProc {
    ops: Ops,
}

impl kernel::Module for HalfProc {
    fn init(module: &'static ThisModule) -> Result<Self> {
        let ops = KBox::new(
            bindings::halfproc_ops {
                owner: module.as_ptr(),
                fork: Some(hook_fork),
                exec: Some(hook_exec),
                mm_exit: Some(hook_mm_exit),
                enter: Some(hook_enter),
                mmap_enter: Some(hook_mmap_enter),
                dm_copy: Some(hook_dm_copy),
            },
            GFP_KERNEL,
        )?;
        // SAFETY: `ops` lives until `drop`, which unregisters it first.
        to_result(unsafe { bindings::halfproc_register(&*ops) })?;
        if set::SKIP_MEMBER_FLUSH {
            pr_warn!("TEST BUILD: member TLB flushes are disabled; stale translations will survive\n");
        }
        pr_info!("half-process support loaded\n");
        Ok(HalfProc { ops: Ops(ops) })
    }
}

impl Drop for HalfProc {
    fn drop(&mut self) {
        // SAFETY: registered in `init`; returns after an RCU grace period, so
        // no hook can start afterwards, and a running one pins the module.
        unsafe { bindings::halfproc_unregister(&*self.ops.0) };
        pr_info!(
            "half-process support unloaded ({} live sets)\n",
            set::LIVE_SETS.load(Ordering::Relaxed)
        );
    }
}

fn errno(e: Error) -> c_int {
    e.to_errno()
}

/// `clone3(CLONE_HALFPROC)`: make `child`'s fresh mm a member of current's
/// set, creating the set if current has none.
///
/// # Safety
///
/// Called by `copy_process()` after `copy_mm()` and `copy_signal()`, with
/// `child` under construction.
unsafe extern "C" fn hook_fork(child: *mut bindings::task_struct, _flags: u64) -> c_int {
    // SAFETY: the core calls this from copy_process() after copy_mm() and
    // copy_signal(): `child` is valid, its mm is new and not yet reachable by
    // anyone else, and it stays alive for the call.
    let (child_mm, group) = unsafe { (task_mm(child), task_signal(child)) };
    let Some(child_mm) = child_mm else {
        return errno(EINVAL);
    };
    match Set::of_current_or_create().and_then(|set| set.add(child_mm, group)) {
        Ok(()) => 0,
        Err(e) => errno(e),
    }
}

/// `execve()` in a member: the new mm joins the set unless the exec gains
/// privileges, or current is not the process that owns the membership (a
/// `vfork()` child borrowing a member's mm).
///
/// # Safety
///
/// Called by `begin_new_exec()` with the exec's new, not yet installed mm.
unsafe extern "C" fn hook_exec(new_mm: *mut bindings::mm_struct, secureexec: bool) -> c_int {
    let Some(old) = Mm::current() else {
        return 0;
    };
    let Some(set) = Set::of(old) else {
        return 0;
    };
    if secureexec || !set.owns(old, current_signal()) {
        return 0;
    }
    // SAFETY: `new_mm` is the exec's mm, not yet installed nor reachable by
    // anyone else; it lives at least until this returns.
    let new_mm = unsafe { Mm::from_raw(new_mm) };
    match set.add(new_mm, current_signal()) {
        Ok(()) => 0,
        Err(e) => errno(e),
    }
}

/// A member mm is torn down.
///
/// # Safety
///
/// Called once by `__mmput()` for a member mm whose last user is gone.
unsafe extern "C" fn hook_mm_exit(mm: *mut bindings::mm_struct) {
    // SAFETY: the core calls this once from __mmput() for a member mm, which
    // stays allocated until the call returns.
    unsafe { Set::leave(Mm::from_raw(mm)) };
}

/// A member starts a meta-operation that overlaps the shared range.
///
/// # Safety
///
/// Called by `halfproc_enter()` for a member, with its switch record.
unsafe extern "C" fn hook_enter(
    sw: *mut bindings::halfproc_switch,
    start: c_ulong,
    len: c_ulong,
) -> c_long {
    if !range_contains(start as u64, len as u64) {
        return errno(EINVAL) as c_long;
    }
    let Some(set) = Mm::current().and_then(Set::of) else {
        return errno(EINVAL) as c_long;
    };
    // SAFETY: `sw` is the caller's switch record; current is a member of
    // `set`, whose set mm lives as long as current's mm.
    unsafe { bindings::halfproc_switch_mm(sw, set.mm().as_raw()) };
    0
}

/// `mmap(MAP_HALFPROC)`: place the mapping in the shared range.
///
/// `MAP_FIXED`/`MAP_FIXED_NOREPLACE` outside the range, `MAP_GROWSDOWN` and
/// `MAP_32BIT` are `EINVAL`; a hint outside the range is ignored.
///
/// # Safety
///
/// Called by `ksys_mmap_pgoff()` with pointers to its own locals.
unsafe extern "C" fn hook_mmap_enter(
    sw: *mut bindings::halfproc_switch,
    addr: *mut c_ulong,
    len: c_ulong,
    flags: *mut c_ulong,
) -> c_long {
    // SAFETY: the core passes pointers to its own locals.
    let (addr, flags) = unsafe { (&mut *addr, &mut *flags) };
    let f = *flags & !(bindings::MAP_HALFPROC as c_ulong);
    let fixed = f & (bindings::MAP_FIXED | bindings::MAP_FIXED_NOREPLACE) as c_ulong != 0;
    if f & (bindings::MAP_GROWSDOWN | bindings::MAP_32BIT) as c_ulong != 0 {
        return errno(EINVAL) as c_long;
    }
    if !range_contains(*addr as u64, len as u64) {
        if fixed {
            return errno(EINVAL) as c_long;
        }
        *addr = 0;
    }
    let set = match Set::of_current_or_create() {
        Ok(set) => set,
        Err(e) => return errno(e) as c_long,
    };
    *flags = f;
    // SAFETY: as in `hook_enter`.
    unsafe { bindings::halfproc_switch_mm(sw, set.mm().as_raw()) };
    0
}

/// `dmread()`/`dmwrite()` and their vectored forms.
///
/// # Safety
///
/// Called by the syscalls with a valid iterator and `riovcnt` kernel iovecs.
unsafe extern "C" fn hook_dm_copy(
    pid: bindings::pid_t,
    iter: *mut bindings::iov_iter,
    rvec: *const bindings::iovec,
    riovcnt: c_ulong,
    write: bool,
) -> isize {
    // SAFETY: the core passes `riovcnt` kernel copies of the remote iovecs.
    let rvec = unsafe { core::slice::from_raw_parts(rvec, riovcnt) };
    // SAFETY: `iter` is the core's iterator over the caller's local buffers.
    match unsafe { dm::copy(pid, iter, rvec, write) } {
        Ok(n) => n as isize,
        Err(e) => errno(e) as isize,
    }
}

/// Whether `[start, start + len)` lies inside the shared range.
fn range_contains(start: u64, len: u64) -> bool {
    let (lo, hi) = (
        bindings::HALFPROC_RANGE_START,
        bindings::HALFPROC_RANGE_END,
    );
    start >= lo && len <= hi && start <= hi - len
}
