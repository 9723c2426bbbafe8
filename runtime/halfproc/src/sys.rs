// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Thin, raw system-call wrappers used by the rest of the runtime.
//!
//! Everything here is a direct system call (no libc locks, no allocation), so
//! it is safe to call from lock slow paths and from a freshly forked child of
//! a multi-threaded parent. Errors are returned as [`std::io::Error`] built
//! from the raw errno, never through `errno` globals of another process.
//!
//! C header: `<linux/futex.h>`, `<linux/sched.h>`, `<sys/mman.h>`.

use std::io;
use std::time::Duration;

/// `-1`-style return converted to an error.
#[inline]
pub(crate) fn cvt(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// The kernel thread id of the caller.
#[inline]
pub(crate) fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// The process id of the caller (always a system call: glibc no longer caches it).
#[inline]
pub(crate) fn getpid() -> i32 {
    // SAFETY: getpid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_getpid) as i32 }
}

/// Whether the task `tid` (a thread or process id) still runs.
///
/// A task that exists but may not be signalled (`EPERM`) counts as alive. A
/// zombie counts as dead: it holds no locks any more.
pub(crate) fn task_alive(tid: i32) -> bool {
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

/// `futex(FUTEX_WAIT)` on a shared (not `FUTEX_PRIVATE_FLAG`) futex word.
///
/// Returns `Ok(true)` when woken (or spuriously / by a signal), `Ok(false)` on
/// time-out, and `Ok(true)` immediately when `*word != expected` (`EAGAIN`).
#[inline]
pub(crate) fn futex_wait(
    word: &core::sync::atomic::AtomicU32,
    expected: u32,
    timeout: Option<Duration>,
) -> bool {
    let ts;
    let tsp = match timeout {
        Some(d) => {
            ts = libc::timespec {
                tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            };
            &ts as *const libc::timespec
        }
        None => core::ptr::null(),
    };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call;
    // `tsp` is null or points at a live timespec.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            tsp,
            core::ptr::null::<u32>(),
            0u32,
        )
    };
    !(r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT))
}

/// `futex(FUTEX_WAKE)` on a shared futex word; returns how many were woken.
#[inline]
pub(crate) fn futex_wake(word: &core::sync::atomic::AtomicU32, n: i32) -> i32 {
    // SAFETY: `word` is a valid, aligned u32.
    let r = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, n) };
    r.max(0) as i32
}

/// `prctl` option of the patched kernel for half-process sets
/// (`<linux/prctl.h>`, patch 0009) and its operations and result bits.
pub(crate) const PR_HALFPROC: libc::c_int = 0x4850_4353;
pub(crate) const PR_HALFPROC_FORK_MEMBER: libc::c_ulong = 1;
pub(crate) const PR_HALFPROC_INHERIT: libc::c_ulong = 2;
pub(crate) const PR_HALFPROC_GET: libc::c_ulong = 3;
pub(crate) const PR_HALFPROC_IS_MEMBER: libc::c_int = 1;
pub(crate) const PR_HALFPROC_IS_INHERITING: libc::c_int = 2;

/// `prctl(PR_HALFPROC, op, arg, 0, 0)`.
pub(crate) fn halfproc_prctl(op: libc::c_ulong, arg: libc::c_ulong) -> io::Result<libc::c_int> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(PR_HALFPROC, op, arg, 0 as libc::c_ulong, 0 as libc::c_ulong) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The caller's `PR_HALFPROC_IS_*` bits (`EOPNOTSUPP`/`EINVAL` without the
/// patched kernel and module).
pub(crate) fn halfproc_prctl_get() -> io::Result<libc::c_int> {
    halfproc_prctl(PR_HALFPROC_GET, 0)
}

/// Lets `pid` and its descendants read this process with
/// `process_vm_readv` under Yama `ptrace_scope=1`; harmless without Yama.
pub(crate) fn allow_ptrace_from(pid: i32) {
    // SAFETY: prctl with integer arguments; EINVAL without Yama is harmless.
    unsafe { libc::prctl(libc::PR_SET_PTRACER, pid as libc::c_ulong, 0, 0, 0) };
}
