// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Shared futexes: wait and wake across the members of a set.
//!
//! Never `FUTEX_PRIVATE_FLAG`: a private futex is keyed by the caller's mm,
//! so a wait in one member would never match a wake in another. A shared
//! futex word in the shared range is keyed by the set (kernel backend) or by
//! the memfd's inode (portable backend). `nix` has no futex wrapper.
//!
//! No allocation, no locks: these run in lock slow paths and in freshly
//! forked children of multi-threaded parents.
//!
//! C header: `<linux/futex.h>`.

use core::sync::atomic::AtomicU32;
use core::time::Duration;
use std::io;

/// `futex(FUTEX_WAIT)`: sleeps while `*word == expected`, at most `timeout`.
///
/// Returns `false` on time-out only; `true` when woken, spuriously, by a
/// signal, or at once when `*word != expected` (`EAGAIN`).
///
/// # Examples
///
/// ```
/// use std::sync::atomic::AtomicU32;
/// use std::time::Duration;
/// let w = AtomicU32::new(1);
/// // Not 0: returns at once.
/// assert!(halfproc_sys::futex::wait(&w, 0, None));
/// // Still 1 and nobody wakes it: times out.
/// assert!(!halfproc_sys::futex::wait(&w, 1, Some(Duration::from_millis(1))));
/// ```
#[inline]
pub fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
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

/// `futex(FUTEX_WAKE)`: wakes up to `n` waiters; returns how many woke.
#[inline]
pub fn wake(word: &AtomicU32, n: i32) -> i32 {
    // SAFETY: `word` is a valid, aligned u32; wake does not touch memory.
    let r = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, n) };
    r.max(0) as i32
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    #[test]
    fn a_wake_ends_a_wait() {
        let w = Arc::new(AtomicU32::new(0));
        let w2 = w.clone();
        let t = std::thread::spawn(move || {
            while w2.load(Ordering::Acquire) == 0 {
                wait(&w2, 0, Some(Duration::from_secs(10)));
            }
        });
        std::thread::sleep(Duration::from_millis(20));
        w.store(1, Ordering::Release);
        wake(&w, i32::MAX);
        t.join().unwrap();
        assert_eq!(wake(&w, 1), 0, "nobody waits any more");
    }
}
