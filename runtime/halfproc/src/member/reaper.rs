// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The reaper: a thread in each process that creates members.
//!
//! Members are `fork()` children of the process that created them, so only
//! that process can collect their exit status. Its reaper thread (started at
//! its first `halfproc_create`, all signals blocked) holds a pidfd per member,
//! waits for them with `poll`, collects each status with
//! `waitid(P_PIDFD, WEXITED)` and publishes it in the member's slot, so any
//! member may join any other, and detached members leave no zombie.
//!
//! After a `fork()` the child has no reaper thread but a copy of the
//! parent's pointer (and of its lock, possibly held): a reaper belongs to the
//! process id that made it, and a child makes its own without touching the
//! copy.

use core::sync::atomic::{AtomicPtr, Ordering};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::slots::{MemberSlot, MemberTable};
use halfproc_sys::task;

/// `waitid` id type for a pidfd (Linux 5.4).
const P_PIDFD: libc::idtype_t = 3;

struct Watch {
    pidfd: OwnedFd,
    table: &'static MemberTable,
    slot: &'static MemberSlot,
    generation: u32,
}

pub(super) struct Reaper {
    /// The process this reaper belongs to.
    owner: i32,
    /// Wakes the thread when a member is added.
    wake: OwnedFd,
    watched: Mutex<Vec<Watch>>,
}

static REAPER: AtomicPtr<Reaper> = AtomicPtr::new(core::ptr::null_mut());

/// Has the calling process's reaper watch member `pid` of `slot`.
///
/// On error the member is not watched: the caller must kill and wait for it.
pub(super) fn watch(
    pid: i32,
    table: &'static MemberTable,
    slot: &'static MemberSlot,
    generation: u32,
) -> Result<()> {
    let pidfd = task::pidfd_open(pid).map_err(|e| Error::sys("pidfd_open of a new member", e))?;
    let r = reaper()?;
    r.watched
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Watch {
            pidfd,
            table,
            slot,
            generation,
        });
    r.kick();
    Ok(())
}

/// The calling process's reaper, started on first use.
fn reaper() -> Result<&'static Reaper> {
    let me = task::getpid();
    loop {
        let cur = REAPER.load(Ordering::Acquire);
        // SAFETY: a non-null REAPER points to a leaked, never freed Reaper
        // (possibly the parent's copy after a fork: only `owner` is read).
        if !cur.is_null() && unsafe { (*cur).owner } == me {
            // SAFETY: as above; this process's reaper lives forever.
            return Ok(unsafe { &*cur });
        }
        let new = Box::into_raw(Box::new(Reaper::new(me)?));
        match REAPER.compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                // SAFETY: just published, never freed.
                let r: &'static Reaper = unsafe { &*new };
                start_thread(r)?;
                return Ok(r);
            }
            Err(_) => {
                // Another thread of this process won: drop ours, use theirs.
                // SAFETY: `new` came from Box::into_raw and was never shared.
                drop(unsafe { Box::from_raw(new) });
            }
        }
    }
}

/// Starts the reaper thread with every signal blocked, so that it never
/// takes a signal meant for the program.
fn start_thread(r: &'static Reaper) -> Result<()> {
    // SAFETY: sigset_t is plain data; sigfillset initialises it.
    let mut all: libc::sigset_t = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { core::mem::zeroed() };
    // SAFETY: valid sigsets; the new thread inherits the blocked mask.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    let spawned = std::thread::Builder::new()
        .name("halfproc-reaper".into())
        .spawn(move || r.run());
    // SAFETY: restores the caller's own mask.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut()) };
    spawned
        .map(drop)
        .map_err(|e| Error::os("start the member reaper thread", e))
}

impl Reaper {
    fn new(owner: i32) -> Result<Reaper> {
        // SAFETY: eventfd with plain flags.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(Error::last_os("eventfd for the member reaper"));
        }
        Ok(Reaper {
            owner,
            // SAFETY: a fresh descriptor that nothing else owns.
            wake: unsafe { OwnedFd::from_raw_fd(fd) },
            watched: Mutex::new(Vec::new()),
        })
    }

    fn kick(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn run(&self) {
        let mut fds: Vec<libc::pollfd> = Vec::new();
        loop {
            fds.clear();
            fds.push(pollin(self.wake.as_raw_fd()));
            {
                let w = self.watched.lock().unwrap_or_else(|e| e.into_inner());
                fds.extend(w.iter().map(|w| pollin(w.pidfd.as_raw_fd())));
            }
            // SAFETY: `fds` is a valid array of `fds.len()` pollfds.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
            if n < 0 {
                continue; // EINTR (no signal is unblocked here, but be safe)
            }
            if fds[0].revents != 0 {
                let mut buf = 0u64;
                // SAFETY: reads at most 8 bytes into a valid u64.
                unsafe { libc::read(self.wake.as_raw_fd(), (&mut buf as *mut u64).cast(), 8) };
            }
            for p in fds[1..].iter().filter(|p| p.revents != 0) {
                let done = {
                    let mut w = self.watched.lock().unwrap_or_else(|e| e.into_inner());
                    w.iter()
                        .position(|w| w.pidfd.as_raw_fd() == p.fd)
                        .map(|i| w.swap_remove(i))
                };
                if let Some(w) = done {
                    let raw = wait_pidfd(w.pidfd.as_raw_fd());
                    w.table.record_exit(w.slot, w.generation, raw);
                }
            }
        }
    }
}

fn pollin(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// Reaps the child behind `pidfd`: its raw wait status as `waitpid` would
/// report it, or `None` if it was already reaped by somebody else.
fn wait_pidfd(pidfd: RawFd) -> Option<i32> {
    loop {
        // SAFETY: siginfo_t is plain data; waitid fills it.
        let mut info: libc::siginfo_t = unsafe { core::mem::zeroed() };
        // SAFETY: `info` is a valid out-pointer; `pidfd` is ours.
        let r = unsafe { libc::waitid(P_PIDFD, pidfd as libc::id_t, &mut info, libc::WEXITED) };
        if r == 0 {
            // SAFETY: waitid succeeded for WEXITED, so si_status is valid.
            let st = unsafe { info.si_status() };
            return Some(match info.si_code {
                libc::CLD_EXITED => (st & 0xff) << 8,
                libc::CLD_DUMPED => (st & 0x7f) | 0x80,
                _ => st & 0x7f,
            });
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
}
