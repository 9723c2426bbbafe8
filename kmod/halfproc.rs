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
//! - `stats`: per-set counters in debugfs (switches, flushes, IPIs, pins);
//! - this file: the hook entry points and the `prctl()` operations.
//!
//! The line between the two sides: every rule about addresses (where shared
//! and private memory may lie, which calls reach the set mm) is applied by
//! the core before a hook runs; this module decides who (membership, set
//! lifecycle, `dmread()` permission, fork and exec policy) and never looks
//! at an address. `docs/design.md` has the table of rules and their places.
//!
//! Every live set pins the module (`halfproc_set_mm_alloc()` takes a module
//! reference), so `rmmod` fails with `EBUSY`/`EWOULDBLOCK` while any set
//! exists and succeeds once the last member has exited. A hook called for a
//! member relies on that pin (its set lives while the calling mm does); every
//! other hook call holds a reference of its own (`mm/halfproc.c`, "Module
//! lifetime"), so unregistering in `drop` cannot race with a running hook.

use core::sync::atomic::Ordering;
use kernel::{bindings, error::to_result, ffi::c_int, ffi::c_long, ffi::c_ulong, prelude::*};

mod dm;
mod mm;
mod set;
mod stats;

use mm::{current_signal, current_tid, task_mm, task_signal, Mm};
use set::{Join, Set};

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
                exec_joins: Some(hook_exec_joins),
                mm_exit: Some(hook_mm_exit),
                enter: Some(hook_enter),
                dm_copy: Some(hook_dm_copy),
                prctl: Some(hook_prctl),
            },
            GFP_KERNEL,
        )?;
        // SAFETY: `ops` lives until `drop`, which unregisters it first.
        to_result(unsafe { bindings::halfproc_register(&*ops) })?;
        stats::init();
        if set::SKIP_MEMBER_FLUSH {
            pr_warn!(
                "TEST BUILD: member TLB flushes are disabled; stale translations will survive\n"
            );
        }
        pr_info!("half-process support loaded\n");
        Ok(HalfProc { ops: Ops(ops) })
    }
}

impl Drop for HalfProc {
    fn drop(&mut self) {
        // SAFETY: registered in `init`; returns after an RCU grace period, so
        // no hook can start afterwards, and a running one pins the module
        // (itself, or through its member's set: no set lives during `drop`).
        unsafe { bindings::halfproc_unregister(&*self.ops.0) };
        stats::exit();
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
/// set, creating the set if current has none. A member's fork without it
/// makes a member only if the member asked (`PR_HALFPROC`).
///
/// # Safety
///
/// Called by `copy_process()` after `copy_mm()` and `copy_signal()`, with
/// `child` under construction and a fresh mm (never `CLONE_VM`).
unsafe extern "C" fn hook_fork(child: *mut bindings::task_struct, flags: u64) -> c_int {
    // SAFETY: the core calls this from copy_process() after copy_mm() and
    // copy_signal(): `child` is valid, its mm is new and not yet reachable by
    // anyone else, and it stays alive for the call.
    let (child_mm, group) = unsafe { (task_mm(child), task_signal(child)) };
    let Some(child_mm) = child_mm else {
        return errno(EINVAL);
    };
    let joined = if flags & bindings::CLONE_HALFPROC != 0 {
        Set::of_current_or_create().and_then(|set| set.add(child_mm, group))
    } else {
        // The core asks only for forks by members.
        let Some((set, mm)) = Mm::current().and_then(|mm| Some((Set::of(mm)?, mm))) else {
            return 0;
        };
        match set.fork_policy(mm, current_tid()) {
            Join::No => Ok(()),
            Join::Yes { inherit } => set.add_with(child_mm, group, inherit),
        }
    };
    match joined {
        Ok(()) => 0,
        Err(e) => errno(e),
    }
}

/// `execve()` in a member: the new mm joins the set unless the exec gains
/// privileges, or current is not the process that owns the membership (a
/// `vfork()` child borrowing a member's mm) and the member does not pass its
/// membership on to its children (`PR_HALFPROC_INHERIT`).
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
    if secureexec {
        return 0;
    }
    let Join::Yes { inherit } = set.exec_policy(old, current_signal()) else {
        return 0;
    };
    // SAFETY: `new_mm` is the exec's mm, not yet installed nor reachable by
    // anyone else; it lives at least until this returns.
    let new_mm = unsafe { Mm::from_raw(new_mm) };
    match set.add_with(new_mm, current_signal(), inherit) {
        Ok(()) => 0,
        Err(e) => errno(e),
    }
}

/// Whether an `execve()` by current, a member, carries the membership over
/// to its new mm (`hook_exec`'s policy without `secureexec`, which is not
/// known yet): asked before the exec's point of no return, so the core can
/// check the new image against the member's limits while `execve()` can
/// still fail (`halfproc_exec_room()`).
extern "C" fn hook_exec_joins() -> bool {
    let Some(old) = Mm::current() else {
        return false;
    };
    Set::of(old)
        .is_some_and(|set| matches!(set.exec_policy(old, current_signal()), Join::Yes { .. }))
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

/// Switch current to its set mm for a meta-operation on the shared range.
///
/// The core has applied every address rule first (`halfproc_check_op()`,
/// `halfproc_place()`); this decides only which set. With `create`
/// (`mmap(MAP_HALFPROC)`), a process in no set starts one as its first
/// member (`EBUSY` if it has private mappings in the range).
///
/// # Safety
///
/// Called by `halfproc_enter()` for a member, or by `halfproc_mmap_enter()`,
/// with the caller's switch record.
unsafe extern "C" fn hook_enter(sw: *mut bindings::halfproc_switch, create: bool) -> c_long {
    let Some(mm) = Mm::current() else {
        return errno(EINVAL) as c_long;
    };
    // A member (every call but a set's first `MAP_HALFPROC`) borrows its set.
    let created;
    let set = match Set::of(mm) {
        Some(set) => set,
        None if create => match Set::of_current_or_create() {
            Ok(set) => {
                created = set;
                created.as_arc_borrow()
            }
            Err(e) => return errno(e) as c_long,
        },
        None => return errno(EINVAL) as c_long,
    };
    // SAFETY: `sw` is the caller's switch record; current is a member of
    // `set`, whose set mm lives as long as current's mm.
    unsafe { bindings::halfproc_switch_mm(sw, set.mm().as_raw()) };
    set.stats.switched();
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

/// `prctl(PR_HALFPROC, op, arg3, arg4, arg5)`.
///
/// - `PR_HALFPROC_FORK_MEMBER`, `arg3` 1: the calling thread's next fork
///   without `CLONE_VM` makes a member; 0 cancels.
/// - `PR_HALFPROC_INHERIT`, `arg3` 1: every child of this process joins the
///   set, and passes it on; 0 stops it.
///
///   Both make the caller a member first if it is in no set (`EBUSY` if it
///   has private mappings in the range); turning either off outside a set is
///   a no-op.
/// - `PR_HALFPROC_GET`: the `PR_HALFPROC_IS_*` bits of the caller.
///
/// Any other `op`, `arg3` other than 0 or 1, or non-zero unused arguments:
/// `EINVAL`.
///
/// # Safety
///
/// Called by `prctl()` in the context of the calling task.
unsafe extern "C" fn hook_prctl(
    op: c_ulong,
    arg3: c_ulong,
    arg4: c_ulong,
    arg5: c_ulong,
) -> c_long {
    match prctl(op, arg3, arg4, arg5) {
        Ok(v) => v,
        Err(e) => errno(e) as c_long,
    }
}

fn prctl(op: c_ulong, arg3: c_ulong, arg4: c_ulong, arg5: c_ulong) -> Result<c_long> {
    if arg4 != 0 || arg5 != 0 {
        return Err(EINVAL);
    }
    let tid = current_tid();
    match op as u32 {
        bindings::PR_HALFPROC_GET => {
            if arg3 != 0 {
                return Err(EINVAL);
            }
            let Some((set, mm)) = Mm::current().and_then(|mm| Some((Set::of(mm)?, mm))) else {
                return Ok(0);
            };
            let (inherit, pending) = set.flags_of(mm, tid);
            let mut bits = bindings::PR_HALFPROC_IS_MEMBER;
            if inherit {
                bits |= bindings::PR_HALFPROC_IS_INHERITING;
            }
            if pending {
                bits |= bindings::PR_HALFPROC_IS_FORK_PENDING;
            }
            Ok(bits as c_long)
        }
        op @ (bindings::PR_HALFPROC_FORK_MEMBER | bindings::PR_HALFPROC_INHERIT) => {
            let on = match arg3 {
                0 => false,
                1 => true,
                _ => return Err(EINVAL),
            };
            let mm = Mm::current().ok_or(EINVAL)?;
            let set = match Set::of(mm) {
                Some(set) => set,
                None if !on => return Ok(0),
                None => {
                    // Current is now the first member of a set of its own.
                    Set::of_current_or_create()?;
                    Set::of(mm).ok_or(EINVAL)?
                }
            };
            if op == bindings::PR_HALFPROC_FORK_MEMBER {
                set.set_fork_tid(mm, tid, on)?;
            } else {
                set.set_inherit(mm, on)?;
            }
            Ok(0)
        }
        _ => Err(EINVAL),
    }
}
