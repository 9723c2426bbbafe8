// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Tasks: ids, liveness, making members (`clone3(CLONE_HALFPROC)`, `fork`,
//! `prctl(PR_HALFPROC)`), pidfds.
//!
//! The id and liveness calls are direct system calls with no allocation, so
//! they are safe in lock slow paths and in a freshly forked child of a
//! multi-threaded parent. `nix` has no `clone3`, `pidfd_open` or
//! `PR_HALFPROC`.
//!
//! C header: `<linux/sched.h>` (`struct clone_args`), `<linux/prctl.h>`
//! (patch 0013), `<sys/pidfd.h>`.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use halfproc_uapi::{CloneArgs, CLONE_ARGS_SIZE, CLONE_HALFPROC};

use crate::error::{Error, Result};

/// The kernel thread id of the caller.
#[inline]
pub fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// The process id of the caller (always a system call: glibc no longer
/// caches it, and a cached value would be wrong in a `clone3` child).
#[inline]
pub fn getpid() -> i32 {
    // SAFETY: getpid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_getpid) as i32 }
}

/// Whether the task `tid` (a thread or process id) still runs.
///
/// A task that exists but may not be signalled (`EPERM`) counts as alive. A
/// zombie counts as dead: it holds no locks any more.
///
/// # Examples
///
/// ```
/// use halfproc_sys::task::{getpid, task_alive};
/// assert!(task_alive(getpid()));
/// assert!(!task_alive(0));
/// ```
pub fn task_alive(tid: i32) -> bool {
    if tid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks existence and permission.
    let r = unsafe { libc::syscall(libc::SYS_kill, tid as libc::c_long, 0 as libc::c_long) };
    if r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM) {
        !is_zombie(tid)
    } else {
        false
    }
}

/// Reads `/proc/<tid>/stat` and reports whether the task is a zombie (`Z`/`X`).
fn is_zombie(tid: i32) -> bool {
    // Built on the stack: this runs from lock slow paths.
    let mut path = [0u8; 32];
    let prefix = b"/proc/";
    path[..prefix.len()].copy_from_slice(prefix);
    let mut n = prefix.len();
    let mut digits = [0u8; 12];
    let mut d = 0;
    let mut v = tid as u32;
    loop {
        digits[d] = b'0' + (v % 10) as u8;
        d += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    while d > 0 {
        d -= 1;
        path[n] = digits[d];
        n += 1;
    }
    let suffix = b"/stat\0";
    path[n..n + suffix.len()].copy_from_slice(suffix);
    // SAFETY: `path` is NUL-terminated.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        // Gone between kill() and open(): dead.
        return true;
    }
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its length; `fd` is ours.
    let len = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: `fd` is ours and closed once.
    unsafe { libc::close(fd) };
    if len <= 0 {
        return true;
    }
    let text = &buf[..len as usize];
    // The state follows the last ')' (the command name may hold parentheses).
    match text.iter().rposition(|&c| c == b')') {
        Some(i) if i + 2 < text.len() => matches!(text[i + 2], b'Z' | b'X' | b'x'),
        _ => false,
    }
}

/// `fork()` through the C library, so that `pthread_atfork` handlers run and
/// malloc and stdio stay consistent in the child. `Ok(0)` in the child, the
/// child's pid in the parent.
///
/// # Safety
///
/// If the caller has other threads, the child must only do what is safe
/// after a `fork` of a multi-threaded process (the C library's own locks
/// are reset; the program's are not).
pub unsafe fn fork() -> Result<i32> {
    // SAFETY: per the contract.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(Error::last_os("fork"));
    }
    Ok(pid)
}

/// `clone3()` with `CLONE_HALFPROC` and `SIGCHLD`: a new member of the
/// caller's set (the caller leads a new set if it had none). Returns like
/// `fork`: `Ok(0)` in the child, the child's pid in the parent.
///
/// Unpatched kernels refuse the flag with `EINVAL`, patched ones without the
/// module with `EOPNOTSUPP`.
///
/// # Safety
///
/// As for [`fork`], and more: this is the raw system call, so the C
/// library's `pthread_atfork` handlers do not run and its cached state (its
/// locks, the thread's tid) is not reset in the child. The caller must be
/// single-threaded, and the child should only make system calls and
/// `_exit`, or run code that tolerates that state.
pub unsafe fn clone_member() -> Result<i32> {
    let args = CloneArgs {
        flags: CLONE_HALFPROC,
        exit_signal: libc::SIGCHLD as u64,
        ..CloneArgs::default()
    };
    // SAFETY: clone3 without CLONE_VM and without a new stack is fork with
    // extra flags: the child runs on a copy of our stack. `args` is a valid
    // clone_args of the size passed. The rest is the caller's contract.
    let pid =
        unsafe { libc::syscall(libc::SYS_clone3, &args as *const CloneArgs, CLONE_ARGS_SIZE) };
    if pid < 0 {
        return Err(Error::last_os("clone3(CLONE_HALFPROC)"));
    }
    Ok(pid as i32)
}

/// `clone3()` with `set_tid = [pid]` and `SIGCHLD`: `fork`, with the child
/// given the process id `pid` (in the caller's pid namespace); with
/// `member`, `CLONE_HALFPROC` too (the child joins the caller's set, as
/// [`clone_member`] makes it). Returns like `fork`. Fails with `EEXIST`
/// when `pid` is in use, `EPERM` without `CAP_CHECKPOINT_RESTORE` (or
/// `CAP_SYS_ADMIN`) over that namespace.
///
/// # Safety
///
/// As for [`clone_member`] (the raw system call: the child should only
/// make system calls and `_exit`).
pub unsafe fn fork_with_pid(pid: i32, member: bool) -> Result<i32> {
    // SAFETY: per the contract.
    unsafe { fork_with_pid_raw(pid, member) }.map_err(|e| {
        let what = if member { "CLONE_HALFPROC, " } else { "" };
        Error::from_errno(format!("clone3({what}set_tid = {pid})"), e)
    })
}

/// [`fork_with_pid`] that fails with the bare errno: callable from a child
/// forked by a multi-threaded process, where allocating (an error message)
/// could wait forever on a lock another thread held at the fork.
///
/// # Safety
///
/// As for [`fork_with_pid`].
pub unsafe fn fork_with_pid_raw(pid: i32, member: bool) -> std::result::Result<i32, i32> {
    let tid = [pid];
    let args = CloneArgs {
        flags: if member { CLONE_HALFPROC } else { 0 },
        exit_signal: libc::SIGCHLD as u64,
        set_tid: tid.as_ptr() as u64,
        set_tid_size: 1,
        ..CloneArgs::default()
    };
    // SAFETY: clone3 without CLONE_VM and without a new stack is fork: the
    // child runs on a copy of our stack. `args` is a valid clone_args of
    // the size passed, `tid` a live array of `set_tid_size` ids. The rest
    // is the caller's contract.
    let r = unsafe { libc::syscall(libc::SYS_clone3, &args as *const CloneArgs, CLONE_ARGS_SIZE) };
    if r < 0 {
        // SAFETY: errno of this thread, set by the failed call.
        return Err(unsafe { *libc::__errno_location() });
    }
    Ok(r as i32)
}

/// `pidfd_open(pid, 0)`: a descriptor that becomes readable when `pid` exits.
pub fn pidfd_open(pid: i32) -> Result<OwnedFd> {
    // SAFETY: pidfd_open(pid, 0) has no memory arguments.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(Error::last_os("pidfd_open"));
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `prctl` option of the patched kernel for half-process sets
/// (`<linux/prctl.h>`, patch 0013).
pub const PR_HALFPROC: libc::c_int = 0x4850_4353;
/// Operation: make the calling thread's next `fork` a member (arg 1) or not (0).
pub const PR_HALFPROC_FORK_MEMBER: libc::c_ulong = 1;
/// Operation: make every child a member, across `exec` (arg 1), or stop (0).
pub const PR_HALFPROC_INHERIT: libc::c_ulong = 2;
/// Operation: the caller's `PR_HALFPROC_IS_*` bits.
pub const PR_HALFPROC_GET: libc::c_ulong = 3;
/// Bit of [`PR_HALFPROC_GET`]: the caller is a member of a set.
pub const PR_HALFPROC_IS_MEMBER: libc::c_int = 1;
/// Bit of [`PR_HALFPROC_GET`]: the caller's children become members.
pub const PR_HALFPROC_IS_INHERITING: libc::c_int = 2;

/// `prctl(PR_HALFPROC, op, arg, 0, 0)`; `EOPNOTSUPP`/`EINVAL` without the
/// patched kernel and module.
pub fn halfproc_prctl(op: libc::c_ulong, arg: libc::c_ulong) -> Result<libc::c_int> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(PR_HALFPROC, op, arg, 0 as libc::c_ulong, 0 as libc::c_ulong) };
    if r < 0 {
        Err(Error::last_os("prctl(PR_HALFPROC)"))
    } else {
        Ok(r)
    }
}

/// Lets `pid` and its descendants read this process with
/// `process_vm_readv` under Yama `ptrace_scope=1`; harmless without Yama.
pub fn allow_ptrace_from(pid: i32) {
    // SAFETY: prctl with integer arguments; EINVAL without Yama is harmless.
    unsafe { libc::prctl(libc::PR_SET_PTRACER, pid as libc::c_ulong, 0, 0, 0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reap(pid: i32) -> i32 {
        let mut st = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut st, 0) }, pid);
        st
    }

    #[test]
    fn ids_and_liveness() {
        assert_eq!(getpid(), std::process::id() as i32);
        let main = gettid();
        let other = std::thread::spawn(gettid).join().unwrap();
        assert_ne!(main, other);
        assert!(task_alive(main));
        assert!(!task_alive(-1));
    }

    #[test]
    fn a_zombie_is_dead_and_a_pidfd_sees_it_exit() {
        // SAFETY: the child only calls _exit.
        let pid = unsafe { fork() }.unwrap();
        if pid == 0 {
            // SAFETY: _exit never returns.
            unsafe { libc::_exit(3) };
        }
        let fd = pidfd_open(pid).unwrap();
        let mut p = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&fd),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(&mut p, 1, 10_000) }, 1);
        // Exited, not reaped yet: a zombie, which counts as dead.
        assert!(!task_alive(pid));
        assert_eq!(libc::WEXITSTATUS(reap(pid)), 3);
    }

    #[test]
    fn fork_with_pid_refuses_a_pid_in_use() {
        let me = std::process::id() as i32;
        // SAFETY: our own pid is in use, so there is no child; should
        // there be one, it only calls _exit.
        match unsafe { fork_with_pid(me, false) } {
            // SAFETY: _exit never returns.
            Ok(0) => unsafe { libc::_exit(0) },
            Ok(pid) => panic!("clone3(set_tid = {me}) made {pid}"),
            // EPERM: not allowed to choose pids here.
            Err(e) => assert!(matches!(e.errno(), libc::EEXIST | libc::EPERM), "{e}"),
        }
    }

    #[test]
    fn clone_member_needs_the_kernel_backend() {
        if crate::backend::kernel_available() {
            return; // the guest suite covers it (tests/guest/hp_sets.c)
        }
        // SAFETY: on a stock kernel the call fails and there is no child;
        // should it succeed, the child only calls _exit.
        match unsafe { clone_member() } {
            // SAFETY: _exit never returns.
            Ok(0) => unsafe { libc::_exit(0) },
            Ok(pid) => panic!("clone3(CLONE_HALFPROC) made {pid} without the module"),
            Err(e) => assert!(matches!(e.errno(), libc::EINVAL | libc::EOPNOTSUPP), "{e}"),
        }
    }

    #[test]
    fn prctl_halfproc_needs_the_kernel_backend() {
        match halfproc_prctl(PR_HALFPROC_GET, 0) {
            Ok(bits) => assert!(crate::backend::kernel_available(), "{bits}"),
            Err(e) => assert!(matches!(e.errno(), libc::EINVAL | libc::EOPNOTSUPP), "{e}"),
        }
    }
}
