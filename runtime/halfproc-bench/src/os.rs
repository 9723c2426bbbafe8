// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The benchmarks' own system calls: the clock, CPU affinity, pipes and
//! `vmsplice`, waiting for children. Half-process calls (mappings in the
//! shared range, members, `dmread`/`dmwrite`, futexes) come from
//! `halfproc-sys`.
//!
//! C headers: `time.h`, `sched.h`, `unistd.h`, `fcntl.h` (`vmsplice`),
//! `sys/wait.h`.

use crate::error::{Error, Result};

/// `CLOCK_MONOTONIC` in nanoseconds. The clock is system-wide, so a time
/// taken in one process can be subtracted from one taken in another.
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; zero is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } != 0 {
        return Err(Error::last_os("sched_getaffinity"));
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| {
            // SAFETY: `c < CPU_SETSIZE`; reads a bit of our own set.
            unsafe { libc::CPU_ISSET(c, &set) }
        })
        .collect())
}

/// Pin the calling process to `cpu`.
pub fn pin_to(cpu: usize) -> Result<()> {
    set_cpus(&[cpu])
}

/// Let the calling process run on `cpus` (each `< CPU_SETSIZE`).
pub fn set_cpus(cpus: &[usize]) -> Result<()> {
    // SAFETY: cpu_set_t is plain data; zero is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(Error::from_errno(format!("cpu {cpu}"), libc::EINVAL));
        }
        // SAFETY: `cpu < CPU_SETSIZE`, checked above.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) } != 0 {
        return Err(Error::last_os(format!("sched_setaffinity({cpus:?})")));
    }
    Ok(())
}

/// Write all of `buf` to `fd`.
pub fn write_all(fd: i32, buf: &[u8], what: &str) -> Result<()> {
    let mut off = 0;
    while off < buf.len() {
        // SAFETY: the pointer/length describe the rest of `buf`.
        let n = unsafe { libc::write(fd, buf[off..].as_ptr().cast(), buf.len() - off) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(Error::last_os(format!("write({what})")));
        }
        off += n as usize;
    }
    Ok(())
}

/// Read at most `buf.len()` bytes from `fd`; 0 means end of stream.
pub fn read_some(fd: i32, buf: &mut [u8], what: &str) -> Result<usize> {
    loop {
        // SAFETY: the pointer/length describe `buf`, writable.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Err(Error::last_os(format!("read({what})")));
        }
    }
}

/// `vmsplice` all of `buf` into the pipe `fd` (no `SPLICE_F_GIFT`: the
/// pipe references the pages; the caller must leave them alone until the
/// reader has consumed them).
pub fn vmsplice_all(fd: i32, buf: &[u8]) -> Result<()> {
    let mut off = 0;
    while off < buf.len() {
        let iov = libc::iovec {
            iov_base: buf[off..].as_ptr() as *mut libc::c_void,
            iov_len: buf.len() - off,
        };
        // SAFETY: one iovec over the rest of `buf`; the kernel only reads it.
        let n = unsafe { libc::vmsplice(fd, &iov, 1, 0) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(Error::last_os("vmsplice"));
        }
        off += n as usize;
    }
    Ok(())
}

/// Kill `pid` and reap it, ignoring errors (cleanup on an error path).
pub fn kill_and_reap(pid: i32) {
    // SAFETY: signalling and reaping our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        let mut st = 0;
        libc::waitpid(pid, &mut st, 0);
    }
}

/// Whether child `pid` has exited (reaping it if so).
pub fn child_exited(pid: i32) -> bool {
    let mut st = 0;
    // SAFETY: non-blocking reap of our own child.
    let r = unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
    r == pid || r < 0
}

/// Wait for child `pid` and return its exit status (or -signal).
pub fn wait_child(pid: i32) -> Result<i32> {
    let mut st = 0;
    loop {
        // SAFETY: reaping our own child.
        let r = unsafe { libc::waitpid(pid, &mut st, 0) };
        if r == pid {
            break;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Err(Error::last_os("waitpid"));
        }
    }
    if libc::WIFEXITED(st) {
        Ok(libc::WEXITSTATUS(st))
    } else {
        Ok(-libc::WTERMSIG(st))
    }
}
