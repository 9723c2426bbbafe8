// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Members: create, join, detach.
//!
//! # The spawner
//!
//! A raw `clone3` child of a multi-threaded parent bypasses glibc's `atfork`
//! handlers: it inherits every lock another thread held at that instant
//! (malloc's included) and can deadlock on the first `malloc`. So members are
//! never cloned from the caller. [`crate::Set::init`] starts one
//! single-threaded *spawner* process while the creator is (on the kernel
//! backend: must be) single-threaded; every member is a `clone3` child of the
//! spawner (`CLONE_HALFPROC` on the kernel backend), so its private memory is
//! a consistent copy of the creator as it was at `Set::init` time.
//!
//! The spawner runs only raw system calls: it never allocates or takes a
//! libc lock.
//!
//! # Protocol (all state in the shared range)
//!
//! A requester claims a [`MemberSlot`] (`FREE -> CLAIMED`), writes the entry
//! point and argument, publishes `REQUESTED` and sends `SIGUSR1` to the
//! spawner. The spawner clones the member, stores its pid and `RUNNING`, and
//! wakes the slot's futex. When the member exits the spawner reaps it (it is
//! its parent), stores the wait status and `EXITED`, and wakes the futex
//! again; a joiner then reads the status and frees the slot. Each slot has a
//! generation so stale handles are detected ([`Error::StaleHandle`]).
//!
//! # Lifetime
//!
//! Like threads when `main` returns: when the creator exits (or `exec`s), the
//! spawner kills the remaining members and exits. Members die with the
//! spawner (`PR_SET_PDEATHSIG`). A member exits with `_exit` after flushing
//! stdio; `atexit` handlers of the creator do not run in members.
//!
//! C header: `include/halfproc.h` (`halfproc_create`, `halfproc_join`,
//! `halfproc_detach`).

use core::cell::Cell;
use core::sync::atomic::{AtomicI32, AtomicU32, AtomicUsize, Ordering};
use std::fmt;
use std::io;
use std::time::Duration;

use halfproc_uapi::{CloneArgs, CLONE_HALFPROC};

use crate::backend::BackendKind;
use crate::error::{Error, Result};
use crate::set::Set;
use crate::sys;

/// Maximum number of members alive (or unjoined) at once.
pub const MAX_MEMBERS: usize = 1024;

const FREE: u32 = 0;
const CLAIMED: u32 = 1;
const REQUESTED: u32 = 2;
const RUNNING: u32 = 3;
const EXITED: u32 = 4;
const FAILED: u32 = 5;
const RELEASING: u32 = 6;

/// One member slot in the shared range.
#[repr(C)]
pub(crate) struct MemberSlot {
    state: AtomicU32,
    generation: AtomicU32,
    pid: AtomicI32,
    /// Raw wait status once `EXITED`; errno once `FAILED`.
    status: AtomicI32,
    detached: AtomicU32,
    _pad: u32,
    trampoline: AtomicUsize,
    entry: AtomicUsize,
    arg: AtomicUsize,
}

/// The member table in the set header.
#[repr(C)]
pub(crate) struct MemberTable {
    slots: [MemberSlot; MAX_MEMBERS],
    /// Next slot to try when claiming.
    hint: AtomicU32,
    /// Members currently `RUNNING`.
    running: AtomicU32,
}

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

/// Types that may be handed to a member by reference.
///
/// A member runs in its own process: a pointer into the requester's private
/// memory (its heap, its stack) means nothing there. Implement this only for
/// types whose every reachable byte is in the shared range or is plain data.
///
/// # Safety
///
/// Every pointer reachable from a value of the type must point into the
/// shared range (or to immutable data of the program image).
///
/// # Examples
///
/// ```
/// use core::sync::atomic::AtomicU64;
/// #[repr(C)]
/// struct Work { counter: AtomicU64, n: u64 }
/// // SAFETY: plain data, no pointers.
/// unsafe impl halfproc::SharedSafe for Work {}
/// ```
pub unsafe trait SharedSafe {}

macro_rules! shared_safe {
    ($($t:ty),*) => { $(
        // SAFETY: plain data without pointers.
        unsafe impl SharedSafe for $t {}
    )* };
}
shared_safe!(
    (),
    bool,
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    f32,
    f64,
    char,
    core::sync::atomic::AtomicBool,
    core::sync::atomic::AtomicU8,
    core::sync::atomic::AtomicU16,
    core::sync::atomic::AtomicU32,
    core::sync::atomic::AtomicU64,
    core::sync::atomic::AtomicUsize,
    core::sync::atomic::AtomicI8,
    core::sync::atomic::AtomicI16,
    core::sync::atomic::AtomicI32,
    core::sync::atomic::AtomicI64,
    core::sync::atomic::AtomicIsize
);
// SAFETY: an array holds only its elements.
unsafe impl<T: SharedSafe, const N: usize> SharedSafe for [T; N] {}
// SAFETY: a tuple holds only its fields.
unsafe impl<A: SharedSafe, B: SharedSafe> SharedSafe for (A, B) {}
// SAFETY: a tuple holds only its fields.
unsafe impl<A: SharedSafe, B: SharedSafe, C: SharedSafe> SharedSafe for (A, B, C) {}

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
/// fn work(x: &AtomicU32) -> i32 {
///     x.store(7, Ordering::SeqCst);
///     3
/// }
///
/// let set = Set::init_default().unwrap();
/// let cell = SharedBox::leak(halfproc::alloc::shared_box(AtomicU32::new(0)).unwrap());
/// let m = Member::spawn(set, work, cell).unwrap();
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

/// Runs a member's entry `f` on its argument `a` (both as `usize`).
///
/// # Safety
///
/// `(f, a)` must satisfy the contract of the trampoline they were paired
/// with ([`rust_trampoline`] or [`c_trampoline`]).
type Trampoline = unsafe fn(usize, usize) -> i32;

/// Calls a Rust `fn(&T) -> i32`.
///
/// # Safety
///
/// `f` must be a `fn(&'static T) -> i32` and `a` a valid `*const T` that
/// outlives the member.
unsafe fn rust_trampoline<T: 'static>(f: usize, a: usize) -> i32 {
    // SAFETY: per the contract `f` came from a `fn(&T) -> i32`; fn pointers
    // are usize-sized on Linux targets.
    let f = unsafe { core::mem::transmute::<usize, fn(&'static T) -> i32>(f) };
    // SAFETY: per the contract `a` points at a live `T` in the shared range.
    f(unsafe { &*(a as *const T) })
}

/// Calls a C `int (*)(void *)`.
///
/// # Safety
///
/// `f` must be an `extern "C" fn(*mut c_void) -> c_int`.
unsafe fn c_trampoline(f: usize, a: usize) -> i32 {
    // SAFETY: per the contract.
    let f: extern "C" fn(*mut libc::c_void) -> libc::c_int = unsafe { core::mem::transmute(f) };
    f(a as *mut libc::c_void)
}

impl Member {
    /// Creates a member running `entry(arg)`; `arg` must live in the shared
    /// range ([`Error::InvalidArgument`] otherwise). The member's exit code is
    /// `entry`'s return value (low 8 bits); a panic exits with 101.
    ///
    /// `arg` must stay alive until the member no longer uses it, which the
    /// `'static` bound on a shared-range value (e.g. [`crate::SharedBox::leak`])
    /// expresses.
    pub fn spawn<T: SharedSafe + Sync + 'static>(
        set: &Set,
        entry: fn(&'static T) -> i32,
        arg: &'static T,
    ) -> Result<Member> {
        let a = arg as *const T as usize;
        if core::mem::size_of::<T>() != 0 && !set.contains(a) {
            return Err(Error::InvalidArgument(
                "member argument must live in the shared range",
            ));
        }
        // SAFETY: the trampoline matches `entry`'s type and `a` is a `&'static T`
        // in the shared range, so valid in the member.
        unsafe { Self::spawn_raw(set, rust_trampoline::<T>, entry as usize, a) }
    }

    /// Creates a member running the C function `entry(arg)`.
    ///
    /// # Safety
    ///
    /// `entry` must be a function of the program image loaded at `Set::init`
    /// time (code `dlopen`ed later does not exist in the spawner); `arg` must
    /// be null or point to memory valid in the member (the shared range).
    pub unsafe fn spawn_c(
        set: &Set,
        entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
        arg: *mut libc::c_void,
    ) -> Result<Member> {
        // SAFETY: the trampoline matches `entry`; the caller vouches for `arg`.
        unsafe { Self::spawn_raw(set, c_trampoline, entry as usize, arg as usize) }
    }

    /// # Safety
    ///
    /// `trampoline(entry, arg)` must be sound to call in a member.
    unsafe fn spawn_raw(
        set: &Set,
        trampoline: Trampoline,
        entry: usize,
        arg: usize,
    ) -> Result<Member> {
        crate::set::check_member_for(set.base() as usize)?;
        let table = &set.header().members;
        let (index, slot) = table.claim()?;
        let generation = slot.generation.load(Ordering::Relaxed);
        slot.trampoline
            .store(trampoline as usize, Ordering::Relaxed);
        slot.entry.store(entry, Ordering::Relaxed);
        slot.arg.store(arg, Ordering::Relaxed);
        slot.detached.store(0, Ordering::Relaxed);
        slot.pid.store(0, Ordering::Relaxed);
        slot.status.store(0, Ordering::Relaxed);
        slot.state.store(REQUESTED, Ordering::Release);
        notify_spawner(set)?;
        loop {
            let s = slot.state.load(Ordering::Acquire);
            match s {
                REQUESTED => {
                    if !sys::futex_wait(&slot.state, REQUESTED, Some(Duration::from_millis(200)))
                        && !sys::task_alive(set.spawner_pid())
                    {
                        // Nobody will ever serve the request.
                        slot.state.store(FREE, Ordering::Release);
                        return Err(Error::SpawnerGone);
                    }
                }
                RUNNING | EXITED => {
                    let pid = slot.pid.load(Ordering::Acquire);
                    return Ok(Member {
                        index: index as u32,
                        generation,
                        pid,
                    });
                }
                FAILED => {
                    let errno = slot.status.load(Ordering::Acquire);
                    table.release(slot, generation);
                    return Err(Error::os(
                        "clone3 of a member",
                        io::Error::from_raw_os_error(errno),
                    ));
                }
                _ => unreachable!("member slot in state {s} while requested"),
            }
        }
    }

    /// The member's process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    fn slot(&self) -> Result<&'static MemberSlot> {
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
        Ok(slot)
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
        let set = Set::get()?;
        let slot = self.slot()?;
        if slot.detached.load(Ordering::Acquire) != 0 {
            return Err(Error::InvalidArgument("cannot join a detached member"));
        }
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            let s = slot.state.load(Ordering::Acquire);
            if slot.generation.load(Ordering::Acquire) != self.generation {
                return Err(Error::StaleHandle);
            }
            match s {
                EXITED => {
                    let raw = slot.status.load(Ordering::Acquire);
                    if !set.header().members.release(slot, self.generation) {
                        return Err(Error::StaleHandle);
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
                    if !sys::futex_wait(&slot.state, RUNNING, Some(wait))
                        && !sys::task_alive(set.spawner_pid())
                    {
                        return Err(Error::SpawnerGone);
                    }
                }
                _ => return Err(Error::StaleHandle),
            }
        }
    }

    /// Lets the member run on its own: its slot is freed when it exits. The
    /// handle is unusable afterwards.
    pub fn detach(self) -> Result<()> {
        let set = Set::get()?;
        let slot = self.slot()?;
        if slot.detached.swap(1, Ordering::AcqRel) != 0 {
            return Err(Error::InvalidArgument("member already detached"));
        }
        // If it already exited, nobody else will free the slot.
        if slot.state.load(Ordering::Acquire) == EXITED {
            set.header().members.release(slot, self.generation);
        }
        Ok(())
    }

    /// Sends `sig` to the member.
    pub fn kill(&self, sig: i32) -> Result<()> {
        let slot = self.slot()?;
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

impl MemberTable {
    fn claim(&self) -> Result<(usize, &MemberSlot)> {
        let start = self.hint.fetch_add(1, Ordering::Relaxed) as usize;
        for i in 0..MAX_MEMBERS {
            let idx = (start + i) % MAX_MEMBERS;
            let slot = &self.slots[idx];
            if slot
                .state
                .compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Ok((idx, slot));
            }
        }
        Err(Error::Exhausted(
            "all member slots are in use (join or detach members)",
        ))
    }

    /// Frees an `EXITED`/`FAILED` slot of generation `gen`; false if someone
    /// else did.
    fn release(&self, slot: &MemberSlot, gen: u32) -> bool {
        if slot.generation.load(Ordering::Acquire) != gen {
            return false;
        }
        let cur = slot.state.load(Ordering::Acquire);
        if cur != EXITED && cur != FAILED {
            return false;
        }
        if slot
            .state
            .compare_exchange(cur, RELEASING, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        slot.generation
            .store(gen.wrapping_add(1), Ordering::Release);
        slot.detached.store(0, Ordering::Relaxed);
        slot.pid.store(0, Ordering::Relaxed);
        slot.state.store(FREE, Ordering::Release);
        true
    }

    /// Whether `pid` is a running member, the creator or the spawner.
    pub(crate) fn is_member_pid(&self, set: &Set, pid: i32) -> bool {
        if pid <= 0 {
            return false;
        }
        if pid == set.creator_pid() || pid == set.spawner_pid() {
            return true;
        }
        self.slots.iter().any(|s| {
            s.pid.load(Ordering::Acquire) == pid && s.state.load(Ordering::Acquire) == RUNNING
        })
    }

    /// Members currently running.
    pub(crate) fn running_count(&self) -> u32 {
        self.running.load(Ordering::Relaxed)
    }
}

fn notify_spawner(set: &Set) -> Result<()> {
    let pid = set.spawner_pid();
    // SAFETY: plain kill(2).
    if pid <= 0 || unsafe { libc::kill(pid, libc::SIGUSR1) } != 0 {
        return Err(Error::SpawnerGone);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Per-thread state that a fork or clone must reset.

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

/// Called in a child after `fork`/`clone3` (its only thread).
pub(crate) fn reset_thread_state_after_fork() {
    let _ = TID.try_with(|t| t.set(0));
    crate::alloc::heap::forget_thread_heap();
}

// ---------------------------------------------------------------------------
// glibc/musl cache the thread id in their thread descriptor; a raw clone3
// child must refresh it (raise(), abort() and pthread mutexes use it). The
// offset is found by matching the value pthread_getcpuclockid() encodes.

static TID_OFFSET: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The thread id the C library has cached for the calling thread.
pub(crate) fn libc_cached_tid() -> Option<i32> {
    let mut clk: libc::clockid_t = 0;
    // SAFETY: pthread_self() is the calling thread; `clk` is a valid out-pointer.
    if unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clk) } != 0 {
        return None;
    }
    // MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) == (~tid << 3) | 6.
    Some(!(clk >> 3))
}

fn find_tid_offset() {
    let Some(tid) = libc_cached_tid() else { return };
    if tid != sys::gettid() {
        return;
    }
    let base = libc_thread_self();
    let mut found = usize::MAX;
    let mut off = 0;
    while off < 2048 {
        // SAFETY: the C library's thread descriptor is at least this large
        // (glibc: ~2.3 KiB; musl: the scan stops at the first match,
        // well inside its descriptor) and readable.
        let v = unsafe { core::ptr::read_volatile((base + off) as *const i32) };
        if v == tid {
            found = off;
            break;
        }
        off += 4;
    }
    TID_OFFSET.store(found, Ordering::Relaxed);
}

fn libc_thread_self() -> usize {
    // SAFETY: pthread_self() has no preconditions.
    (unsafe { libc::pthread_self() }) as usize
}

// ---------------------------------------------------------------------------
// Process creation.

/// Raw `clone3` with `flags`; returns 0 in the child, the pid in the parent.
///
/// The child resumes on a copy of the caller's stack (no `CLONE_VM`), like
/// `fork`. `CLONE_CHILD_SETTID` refreshes the C library's cached thread id.
fn clone3(flags: u64) -> io::Result<i32> {
    let off = TID_OFFSET.load(Ordering::Relaxed);
    let mut args = CloneArgs {
        flags,
        exit_signal: libc::SIGCHLD as u64,
        ..Default::default()
    };
    if off != usize::MAX {
        args.flags |= libc::CLONE_CHILD_SETTID as u64;
        args.child_tid = (libc_thread_self() + off) as u64;
    }
    // SAFETY: `args` is a valid clone_args of the advertised size; without
    // CLONE_VM the child gets a copy of our address space and stack, so
    // returning from this function in the child is sound (as after fork).
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            halfproc_uapi::CLONE_ARGS_SIZE,
        )
    };
    sys::cvt(r).map(|p| p as i32)
}

/// Starts the spawner of `set`; called once by `Set::init`.
pub(crate) fn start_spawner(set: &'static Set) -> Result<()> {
    find_tid_offset();
    let hdr = set.header();
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid out-array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::last_os("pipe2"));
    }
    let (rd, wr) = (fds[0], fds[1]);
    let kind = hdr.backend_kind();
    let single = sys::thread_count().map(|n| n == 1).unwrap_or(false);
    let pid = if kind == BackendKind::Kernel {
        clone3(CLONE_HALFPROC).map_err(|e| Error::os("clone3(CLONE_HALFPROC) of the spawner", e))?
    } else if single {
        clone3(0).map_err(|e| Error::os("clone3 of the spawner", e))?
    } else {
        // Multi-threaded creator on the portable backend: glibc's fork takes
        // malloc's locks around the fork, so the spawner's copy (and so every
        // member's) has a consistent heap.
        // SAFETY: the child only runs spawner_main (raw system calls).
        let p = unsafe { libc::fork() };
        if p < 0 {
            return Err(Error::last_os("fork of the spawner"));
        }
        p
    };
    if pid == 0 {
        // Child: the spawner. Never returns.
        reset_thread_state_after_fork();
        crate::set::mark_member();
        // SAFETY: closing the write end we inherited.
        unsafe { libc::close(wr) };
        spawner_main(set, rd);
    }
    // SAFETY: closing the read end in the creator.
    unsafe { libc::close(rd) };
    // The write end stays open (never closed) for the creator's lifetime.
    let _ = wr;
    hdr.spawner_pid.store(pid, Ordering::Release);
    allow_ptrace_from_members(pid);
    // Wait for the spawner to be ready (it stores its own pid as well).
    let mut waited = 0;
    while hdr.spawner_ready.load(Ordering::Acquire) == 0 {
        sys::futex_wait(&hdr.spawner_ready, 0, Some(Duration::from_millis(100)));
        waited += 1;
        if waited > 50 && !sys::task_alive(pid) {
            return Err(Error::SpawnerGone);
        }
    }
    Ok(())
}

/// Lets every descendant of the spawner (all members) use process_vm_* on
/// this process under Yama `ptrace_scope=1`.
fn allow_ptrace_from_members(spawner: i32) {
    // SAFETY: prctl with integer arguments; EINVAL without Yama is harmless.
    unsafe { libc::prctl(libc::PR_SET_PTRACER, spawner as libc::c_ulong, 0, 0, 0) };
}

extern "C" fn noop_handler(_: libc::c_int) {}

fn sigset(sigs: &[i32]) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { core::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t.
    unsafe { libc::sigemptyset(&mut set) };
    for &s in sigs {
        // SAFETY: `set` is a valid sigset_t, `s` a valid signal number.
        unsafe { libc::sigaddset(&mut set, s) };
    }
    set
}

fn set_handler(sig: i32, handler: libc::sighandler_t) {
    // SAFETY: sigaction is plain data; zeroed is a valid empty action.
    let mut sa: libc::sigaction = unsafe { core::mem::zeroed() };
    sa.sa_sigaction = handler;
    // SAFETY: valid signal and action.
    unsafe { libc::sigaction(sig, &sa, core::ptr::null_mut()) };
}

/// The spawner's loop. Raw system calls only.
fn spawner_main(set: &'static Set, creator_fd: i32) -> ! {
    let hdr = set.header();
    let me = sys::getpid();
    let blocked = sigset(&[libc::SIGCHLD, libc::SIGUSR1]);
    // SAFETY: valid sigset; single-threaded process.
    unsafe { libc::sigprocmask(libc::SIG_BLOCK, &blocked, core::ptr::null_mut()) };
    set_handler(
        libc::SIGCHLD,
        noop_handler as *const () as libc::sighandler_t,
    );
    set_handler(
        libc::SIGUSR1,
        noop_handler as *const () as libc::sighandler_t,
    );
    // Nothing the creator's terminal does should stop the spawner early.
    set_handler(libc::SIGINT, libc::SIG_IGN);
    set_handler(libc::SIGPIPE, libc::SIG_IGN);
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(
            libc::PR_SET_NAME,
            c"halfproc-spawn".as_ptr() as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    hdr.spawner_pid.store(me, Ordering::Release);
    hdr.spawner_ready.store(1, Ordering::Release);
    sys::futex_wake(&hdr.spawner_ready, i32::MAX);
    let empty = sigset(&[]);
    let mut creator_gone = false;
    loop {
        while let Some((pid, status)) = sys::reap_any() {
            record_exit(hdr, pid, status);
        }
        if creator_gone {
            // Like returning from main: the remaining members die with it.
            for s in hdr.members.slots.iter() {
                let pid = s.pid.load(Ordering::Acquire);
                if pid > 0 && s.state.load(Ordering::Acquire) == RUNNING {
                    // SAFETY: kill(2) of our own child.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            let mut status = 0;
            // SAFETY: blocking wait for our children.
            while unsafe { libc::waitpid(-1, &mut status, libc::__WALL) } > 0 {}
            // SAFETY: _exit never returns; no atexit handlers of the creator.
            unsafe { libc::_exit(0) };
        }
        for (i, s) in hdr.members.slots.iter().enumerate() {
            if s.state.load(Ordering::Acquire) == REQUESTED {
                spawn_one(set, i, s, creator_fd);
            }
        }
        let mut pfd = libc::pollfd {
            fd: creator_fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; `empty` unblocks SIGCHLD/SIGUSR1 only
        // while waiting, so no wake-up is lost between the scans and here.
        let r = unsafe { libc::ppoll(&mut pfd, 1, core::ptr::null(), &empty) };
        if r > 0 && pfd.revents != 0 {
            creator_gone = true;
        }
    }
}

fn record_exit(hdr: &crate::set::SetHeader, pid: i32, status: i32) {
    for s in hdr.members.slots.iter() {
        if s.pid.load(Ordering::Acquire) == pid && s.state.load(Ordering::Acquire) == RUNNING {
            s.status.store(status, Ordering::Release);
            s.state.store(EXITED, Ordering::Release);
            hdr.members.running.fetch_sub(1, Ordering::Relaxed);
            sys::futex_wake(&s.state, i32::MAX);
            if s.detached.load(Ordering::Acquire) != 0 {
                let gen = s.generation.load(Ordering::Acquire);
                hdr.members.release(s, gen);
            }
            return;
        }
    }
}

fn spawn_one(set: &'static Set, _index: usize, slot: &'static MemberSlot, creator_fd: i32) {
    let hdr = set.header();
    let flags = match hdr.backend_kind() {
        BackendKind::Kernel => CLONE_HALFPROC,
        BackendKind::Portable => 0,
    };
    let spawner = sys::getpid();
    match clone3(flags) {
        Ok(0) => member_main(slot, spawner, creator_fd),
        Ok(pid) => {
            slot.pid.store(pid, Ordering::Release);
            hdr.members.running.fetch_add(1, Ordering::Relaxed);
            slot.state.store(RUNNING, Ordering::Release);
            sys::futex_wake(&slot.state, i32::MAX);
        }
        Err(e) => {
            slot.status
                .store(e.raw_os_error().unwrap_or(libc::EIO), Ordering::Release);
            slot.state.store(FAILED, Ordering::Release);
            sys::futex_wake(&slot.state, i32::MAX);
        }
    }
}

/// First code a member runs. Never returns.
fn member_main(slot: &'static MemberSlot, spawner: i32, creator_fd: i32) -> ! {
    reset_thread_state_after_fork();
    crate::set::mark_member();
    // Default dispositions and mask, as a fresh process would have.
    set_handler(libc::SIGCHLD, libc::SIG_DFL);
    set_handler(libc::SIGUSR1, libc::SIG_DFL);
    set_handler(libc::SIGINT, libc::SIG_DFL);
    set_handler(libc::SIGPIPE, libc::SIG_DFL);
    let empty = sigset(&[]);
    // SAFETY: valid sigset; single-threaded.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, &empty, core::ptr::null_mut()) };
    // SAFETY: prctl/close with plain integer arguments.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        libc::close(creator_fd);
    }
    if libc_getppid() != spawner {
        // The spawner died before PDEATHSIG was armed.
        // SAFETY: _exit never returns.
        unsafe { libc::_exit(128 + libc::SIGKILL) };
    }
    allow_ptrace_from_members(spawner);
    // Wait until the spawner published RUNNING so the slot is consistent.
    while slot.state.load(Ordering::Acquire) == REQUESTED {
        sys::futex_wait(&slot.state, REQUESTED, Some(Duration::from_millis(10)));
    }
    let tramp = slot.trampoline.load(Ordering::Acquire);
    let entry = slot.entry.load(Ordering::Acquire);
    let arg = slot.arg.load(Ordering::Acquire);
    let code = std::panic::catch_unwind(|| {
        // SAFETY: the trampoline was stored by spawn_raw for this entry/arg
        // pair, whose caller vouched that it is sound to call in a member.
        let t: Trampoline = unsafe { core::mem::transmute::<usize, Trampoline>(tramp) };
        // SAFETY: as above.
        unsafe { t(entry, arg) }
    })
    .unwrap_or(101);
    exit_member(code)
}

/// Ends the calling member with `code` after flushing stdio.
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

fn libc_getppid() -> i32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::getppid() }
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
    }

    #[test]
    fn libc_tid_cache_is_readable() {
        assert_eq!(libc_cached_tid(), Some(sys::gettid()));
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
