// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Members: create, join, detach.
//!
//! **A member starts as a copy of its creator at the moment it is created,
//! like a `fork()` child, except that the shared range is the same memory in
//! both, as between threads.** [`Member::spawn`] forks the calling thread with
//! the C library's `fork()` (see [`create`]): globals, heap and stack as of
//! the call, the program's `pthread_atfork` handlers run, malloc and stdio are
//! consistent even when other threads held their locks. A closure that
//! captures by value is therefore the natural way to hand a member its work.
//!
//! Members are children of the creating process, whose reaper thread (see
//! [`reaper`]) collects their exit status into the member table in the shared
//! range (see [`crate::slots`]), so any member can join any member.
//!
//! # Lifetime
//!
//! Like threads when `main` returns: when the creating process exits
//! normally, the members it created are killed; members created by its main
//! thread also die if it is killed (`PR_SET_PDEATHSIG`). A member ends when
//! its body returns (stdio flushed, the creator's `atexit` handlers not run),
//! calls `exit`, `exec`s a program that ends, or is killed.
//!
//! C header: `include/halfproc.h` (`halfproc_create`, `halfproc_join`,
//! `halfproc_detach`).

use core::sync::atomic::Ordering;
use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::set::Set;
use halfproc_sys::task;

mod create;
mod reaper;

pub use crate::slots::MAX_MEMBERS;
use crate::slots::{MemberSlot, EXITED, LOST, RUNNING};
pub use create::{exit_member, resumed_after_restore};

/// How a member ended.
///
/// # Examples
///
/// ```
/// use halfproc::ExitStatus;
/// assert!(ExitStatus::Exited(0).success());
/// assert!(!ExitStatus::Signaled(9).success());
/// assert_eq!(ExitStatus::from_raw(0x0300), ExitStatus::Exited(3));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// The member returned (or called `exit`) with this code (0..=255).
    Exited(i32),
    /// The member was killed by this signal.
    Signaled(i32),
}

impl ExitStatus {
    /// Decodes a `waitpid` status.
    pub fn from_raw(raw: i32) -> Self {
        if libc::WIFSIGNALED(raw) {
            ExitStatus::Signaled(libc::WTERMSIG(raw))
        } else {
            ExitStatus::Exited(libc::WEXITSTATUS(raw))
        }
    }

    /// Exited with code 0.
    pub fn success(self) -> bool {
        self == ExitStatus::Exited(0)
    }

    /// The status as `waitpid(2)` reports it (`WIFEXITED`/`WEXITSTATUS`,
    /// `WIFSIGNALED`/`WTERMSIG`).
    pub fn wait_status(self) -> i32 {
        match self {
            ExitStatus::Exited(c) => (c & 0xff) << 8,
            ExitStatus::Signaled(s) => s & 0x7f,
        }
    }

    /// The code if the member exited normally.
    pub fn code(self) -> Option<i32> {
        match self {
            ExitStatus::Exited(c) => Some(c),
            ExitStatus::Signaled(_) => None,
        }
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Exited(c) => write!(f, "exited with {c}"),
            ExitStatus::Signaled(s) => write!(f, "killed by signal {s}"),
        }
    }
}

/// A handle on a created member; join or detach it.
///
/// Handles are plain values (slot index + generation) valid in every member,
/// so any member may join a member another one created.
///
/// # Examples
///
/// ```
/// use core::sync::atomic::{AtomicU32, Ordering};
/// use halfproc::{Member, Set, SharedBox};
///
/// let set = Set::init_default().unwrap();
/// let cell: &AtomicU32 = SharedBox::leak(halfproc::alloc::shared_box(AtomicU32::new(0)).unwrap());
/// let private = 3; // copied into the member, like a fork
/// let m = Member::spawn(set, move || {
///     cell.store(7, Ordering::SeqCst);
///     private
/// })
/// .unwrap();
/// assert_eq!(m.join().unwrap().code(), Some(3));
/// assert_eq!(cell.load(Ordering::SeqCst), 7);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct Member {
    index: u32,
    generation: u32,
    pid: i32,
}

impl Member {
    /// Creates a member, a copy of the calling thread's process as of now,
    /// that runs `body` and exits with its result (low 8 bits); a panic exits
    /// with 101. What `body` captures is the member's own copy.
    pub fn spawn(set: &'static Set, body: impl FnOnce() -> i32) -> Result<Member> {
        create::fork_member(set, body)
    }

    /// Creates a member that goes on from this call, like `fork()`: the
    /// caller gets `Some(member)`, the member itself `None` (it is a copy of
    /// the calling thread's process as of now and ends as a process does;
    /// [`exit_member`] skips the creator's `atexit` handlers). For a
    /// runtime whose program must run on as a member (`DMI_init` hosting
    /// the program as a movable compute instance).
    pub fn fork(set: &'static Set) -> Result<Option<Member>> {
        create::fork_here(set)
    }

    /// Creates a member running the C function `entry(arg)`.
    ///
    /// `arg` reaches `entry` unchanged, as with `pthread_create`: a pointer
    /// valid in the caller is valid in the member (which has a copy of the
    /// caller's memory, and shares the shared range), and an integer cast to
    /// a pointer stays that integer. Nothing about it can be wrong that was
    /// not already wrong in the caller, so it is not checked.
    ///
    /// # Safety
    ///
    /// `entry(arg)` must be sound to call in a copy of the calling process.
    pub unsafe fn spawn_c(
        set: &'static Set,
        entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
        arg: *mut libc::c_void,
    ) -> Result<Member> {
        let arg = arg as usize;
        create::fork_member(set, move || entry(arg as *mut libc::c_void))
    }

    /// Makes `pid` a member of `set`: a child of the calling process that
    /// already shares the set's range because it was forked from a member
    /// (a checkpoint of a member restored here by the migration engine,
    /// which leaves the set range to the restoring process). The reaper
    /// watches it like a created member. On the kernel backend the child
    /// must already be a member of the caller's kernel set (`EPERM`
    /// otherwise). The child calls [`resumed_after_restore`] before using
    /// the set.
    pub fn adopt(set: &'static Set, pid: i32) -> Result<Member> {
        create::adopt_child(set, pid)
    }

    /// The member's process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    fn slot(&self) -> Result<(&'static Set, &'static MemberSlot)> {
        let set = Set::get()?;
        let slot = set
            .header()
            .members
            .slots
            .get(self.index as usize)
            .ok_or(Error::InvalidArgument("member handle index out of range"))?;
        if slot.generation.load(Ordering::Acquire) != self.generation {
            return Err(Error::StaleHandle);
        }
        Ok((set, slot))
    }

    /// Waits for the member to end and returns how it ended. A handle can be
    /// joined once; joining a detached member is an error.
    pub fn join(self) -> Result<ExitStatus> {
        self.join_timeout(None)?
            .ok_or(Error::InvalidArgument("unreachable: no timeout"))
    }

    /// Like [`Member::join`], giving up after `timeout` with `Ok(None)` (the
    /// handle stays joinable).
    pub fn join_timeout(self, timeout: Option<Duration>) -> Result<Option<ExitStatus>> {
        let (set, slot) = self.slot()?;
        if slot.detached.load(Ordering::Acquire) != 0 {
            return Err(Error::InvalidArgument("cannot join a detached member"));
        }
        if slot.pid.load(Ordering::Acquire) == task::getpid() {
            return Err(Error::InvalidArgument("a member cannot join itself"));
        }
        let table = &set.header().members;
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            let s = slot.state.load(Ordering::Acquire);
            if slot.generation.load(Ordering::Acquire) != self.generation {
                return Err(Error::StaleHandle);
            }
            match s {
                EXITED | LOST => {
                    let raw = slot.status.load(Ordering::Acquire);
                    if !table.release(slot, self.generation) {
                        return Err(Error::StaleHandle);
                    }
                    if s == LOST {
                        return Err(Error::StatusLost);
                    }
                    return Ok(Some(ExitStatus::from_raw(raw)));
                }
                RUNNING => {
                    let mut wait = Duration::from_millis(200);
                    if let Some(d) = deadline {
                        let now = std::time::Instant::now();
                        if now >= d {
                            return Ok(None);
                        }
                        wait = wait.min(d - now);
                    }
                    if !halfproc_sys::futex::wait(&slot.state, RUNNING, Some(wait))
                        && !task::task_alive(slot.creator.load(Ordering::Acquire))
                        && !task::task_alive(slot.pid.load(Ordering::Acquire))
                    {
                        // Both gone and nobody recorded how it ended.
                        return Err(Error::CreatorGone);
                    }
                }
                _ => return Err(Error::StaleHandle),
            }
        }
    }

    /// Lets the member run on its own: its slot is freed when it exits. The
    /// handle is unusable afterwards.
    pub fn detach(self) -> Result<()> {
        let (set, slot) = self.slot()?;
        if slot.detached.swap(1, Ordering::AcqRel) != 0 {
            return Err(Error::InvalidArgument("member already detached"));
        }
        // If it already ended, nobody else will free the slot.
        if matches!(slot.state.load(Ordering::Acquire), EXITED | LOST) {
            set.header().members.release(slot, self.generation);
        }
        Ok(())
    }

    /// Sends `sig` to the member.
    pub fn kill(&self, sig: i32) -> Result<()> {
        let (_, slot) = self.slot()?;
        if slot.state.load(Ordering::Acquire) != RUNNING {
            return Ok(());
        }
        // SAFETY: plain kill(2) on the member's pid.
        if unsafe { libc::kill(self.pid, sig) } != 0 {
            return Err(Error::last_os("kill member"));
        }
        Ok(())
    }

    /// Raw representation for the C ABI: `(index << 32) | generation`.
    pub fn to_raw(self) -> u64 {
        ((self.index as u64) << 32) | self.generation as u64
    }

    /// Rebuilds a handle from [`Member::to_raw`]; validity is checked on use.
    pub fn from_raw(raw: u64) -> Result<Member> {
        let index = (raw >> 32) as u32;
        let generation = raw as u32;
        let set = Set::get()?;
        let slot = set
            .header()
            .members
            .slots
            .get(index as usize)
            .ok_or(Error::InvalidArgument("member handle index out of range"))?;
        Ok(Member {
            index,
            generation,
            pid: slot.pid.load(Ordering::Acquire),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_status_decoding() {
        assert_eq!(ExitStatus::from_raw(0), ExitStatus::Exited(0));
        assert_eq!(ExitStatus::from_raw(9), ExitStatus::Signaled(9));
        assert_eq!(ExitStatus::from_raw(42 << 8), ExitStatus::Exited(42));
        assert_eq!(ExitStatus::Signaled(6).code(), None);
        assert_eq!(ExitStatus::Exited(139).wait_status(), 139 << 8);
        assert_eq!(ExitStatus::Signaled(11).wait_status(), 11);
    }

    #[test]
    fn raw_handles_roundtrip_bits() {
        let m = Member {
            index: 5,
            generation: 9,
            pid: 1,
        };
        assert_eq!(m.to_raw(), (5 << 32) | 9);
    }
}
