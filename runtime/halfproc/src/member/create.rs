// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Creating a member: the C library's own `fork()` of the calling thread.
//!
//! `fork()` runs the program's `pthread_atfork` handlers and leaves malloc
//! and stdio consistent in the child even when other threads held their
//! locks, so a member can be created from any thread, at any time, and starts
//! as a copy of its creator as of the call. On the kernel backend
//! `prctl(PR_HALFPROC, PR_HALFPROC_FORK_MEMBER, 1)` makes exactly that fork
//! (the calling thread's next one) a member of the set; on the portable
//! backend the arena is a shared mapping the child inherits at the same
//! address.

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::{reaper, Member};
use crate::backend::BackendKind;
use crate::error::{Error, Result};
use crate::identity;
use crate::set::Set;
use crate::slots::MemberTable;
use halfproc_sys::copy;
use halfproc_sys::task::{self, halfproc_prctl, PR_HALFPROC_FORK_MEMBER};

/// Forks a member of `set` that runs `body` and exits with its result.
pub(super) fn fork_member(set: &'static Set, body: impl FnOnce() -> i32) -> Result<Member> {
    match fork_here(set)? {
        Some(m) => Ok(m),
        None => {
            let code = catch_unwind(AssertUnwindSafe(body)).unwrap_or(101);
            exit_member(code);
        }
    }
}

/// Forks a member of `set` that goes on from the call, like `fork()`: the
/// parent gets the member, the member `None`.
pub(super) fn fork_here(set: &'static Set) -> Result<Option<Member>> {
    identity::check_member_for(set.base() as usize)?;
    let table: &'static MemberTable = &set.header().members;
    let me = task::getpid();
    let (index, slot) = table.claim(me)?;
    let generation = slot.generation.load(core::sync::atomic::Ordering::Relaxed);
    let kernel = set.backend().kind() == BackendKind::Kernel;
    if kernel {
        if let Err(e) = halfproc_prctl(PR_HALFPROC_FORK_MEMBER, 1) {
            table.abandon(slot, generation);
            return Err(Error::sys("prctl(PR_HALFPROC_FORK_MEMBER)", e));
        }
    }
    let main_thread = identity::is_main_thread();
    // SAFETY: the C library's fork() of the calling thread; the child only
    // runs `body` (a member is documented to start as a copy of its
    // creator, as a fork child does) and exits.
    let pid = match unsafe { task::fork() } {
        Ok(pid) => pid,
        Err(e) => {
            if kernel {
                let _ = halfproc_prctl(PR_HALFPROC_FORK_MEMBER, 0);
            }
            table.abandon(slot, generation);
            return Err(Error::sys("fork of a member", e));
        }
    };
    if pid == 0 {
        start_in_child(set, me, main_thread);
        return Ok(None);
    }
    table.publish(slot, pid);
    if let Err(e) = reaper::watch(pid, table, slot, generation) {
        // Nobody would collect it: end it now rather than leak a zombie.
        // SAFETY: kill and waitpid of our own child.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, core::ptr::null_mut(), 0);
        }
        table.record_exit(slot, generation, None);
        table.release(slot, generation);
        return Err(e);
    }
    register_exit_handler();
    Ok(Some(Member {
        index: index as u32,
        generation,
        pid,
    }))
}

/// Makes `pid`, a child of the calling process that already shares the set
/// range (it was forked from a member, e.g. a restored checkpoint of a
/// member of a set at the same address), a member of `set`. On the kernel
/// backend the child must be a member of the caller's kernel set (made with
/// `clone3(CLONE_HALFPROC)`, as the migration engine's restorer does when
/// its caller is a member): `dmread` of the set's first byte, which only a
/// member of the caller's set answers, checks it.
pub(super) fn adopt_child(set: &'static Set, pid: i32) -> Result<Member> {
    identity::check_member_for(set.base() as usize)?;
    if set.backend().kind() == BackendKind::Kernel {
        let mut byte = 0u8;
        let local = [copy::iovec(&mut byte as *mut u8 as usize, 1)];
        let remote = [copy::iovec(set.base() as usize, 1)];
        // SAFETY: `local` is one writable byte of ours, not otherwise
        // accessed during the call; the kernel checks the remote side.
        unsafe { copy::dm(copy::Dir::Read, pid, &local, &remote) }.map_err(|e| {
            Error::sys(
                "adopting a process that is not a member of this kernel set",
                e,
            )
        })?;
    }
    let table: &'static MemberTable = &set.header().members;
    let (index, slot) = table.claim(task::getpid())?;
    let generation = slot.generation.load(core::sync::atomic::Ordering::Relaxed);
    table.publish(slot, pid);
    if let Err(e) = reaper::watch(pid, table, slot, generation) {
        table.record_exit(slot, generation, None);
        table.release(slot, generation);
        return Err(e);
    }
    register_exit_handler();
    Ok(Member {
        index: index as u32,
        generation,
        pid,
    })
}

/// In a process restored from a checkpoint of a member (a new process, with
/// the old one's private memory): forget the per-thread caches that belong
/// to the old process, as a fork child does, and let the set's creator
/// trace it again.
pub fn resumed_after_restore() {
    crate::set::reset_after_fork();
    if let Ok(set) = Set::get() {
        task::allow_ptrace_from(set.creator_pid());
    }
}

/// First steps of a new member, before its body runs.
fn start_in_child(set: &Set, parent: i32, main_thread: bool) {
    crate::set::reset_after_fork();
    identity::mark_member();
    task::allow_ptrace_from(set.creator_pid());
    if main_thread {
        // Like a thread, the member dies with a killed creator. Only for the
        // main thread: PR_SET_PDEATHSIG fires when the creating *thread*
        // exits, which for another thread is not the process ending.
        // SAFETY: prctl with integer arguments.
        unsafe {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            )
        };
        // SAFETY: getppid has no arguments.
        if unsafe { libc::getppid() } != parent {
            // The creator died before PDEATHSIG was armed.
            // SAFETY: _exit never returns.
            unsafe { libc::_exit(128 + libc::SIGKILL) };
        }
    }
}

/// Registers, once per process, the exit handler that ends the members this
/// process created when it exits normally, as threads end with `main`.
fn register_exit_handler() {
    // A forked member inherits the registration, and the handler acts for
    // whichever process runs it: once per lineage is enough.
    static DONE: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
    if !DONE.swap(true, core::sync::atomic::Ordering::AcqRel) {
        // SAFETY: registering a plain extern "C" function.
        unsafe { libc::atexit(kill_own_members) };
    }
}

extern "C" fn kill_own_members() {
    let Some(set) = Set::try_current() else {
        return;
    };
    for pid in set.header().members.running_of(task::getpid()) {
        // SAFETY: kill(2) of a child of this process.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Ends the calling member with `code` after flushing stdio; the creator's
/// `atexit` handlers do not run.
pub fn exit_member(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: fflush(NULL) flushes every C stdio stream; _exit never returns.
    unsafe {
        libc::fflush(core::ptr::null_mut());
        libc::_exit(code & 0xff)
    }
}
