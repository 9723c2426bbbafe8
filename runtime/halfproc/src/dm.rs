// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `dmread`/`dmwrite`: copies between members' *private* memory.
//!
//! Kernel backend: the `dmread`/`dmwrite`/`dmreadv`/`dmwritev` system calls
//! (numbers in `halfproc-uapi`), which the kernel restricts to the set.
//! Portable backend: the same signature over `process_vm_readv`/`writev`,
//! after the runtime checked that `pid` is a member (else `EPERM`). Members
//! allow each other with `PR_SET_PTRACER` (Yama `ptrace_scope=1`); stricter
//! Yama settings or seccomp filters refuse it (`EPERM`).
//!
//! Both return the number of bytes copied; like `process_vm_readv`, a copy
//! may stop early at an unmapped remote page (partial copy).
//!
//! C header: `include/halfproc.h` (`halfproc_dmread`, ...).

use std::io;

use halfproc_sys::copy::{self, iovec, Dir};

use crate::backend::BackendKind;
use crate::set::Set;

fn set_for_dm(pid: i32) -> io::Result<&'static Set> {
    let set = Set::get().map_err(io::Error::from)?;
    if set.backend().kind() == BackendKind::Portable
        && pid != set.creator_pid()
        && !set.header().members.is_running_pid(pid)
    {
        return Err(io::Error::from_raw_os_error(if pid <= 0 {
            libc::ESRCH
        } else {
            libc::EPERM
        }));
    }
    Ok(set)
}

fn check_len(len: usize, buf_len: usize) -> io::Result<()> {
    if len > buf_len || len > isize::MAX as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "len exceeds the local buffer",
        ));
    }
    Ok(())
}

/// Copies `len` bytes at `remote_ptr` in member `pid` into `local_buf`.
///
/// # Examples
///
/// ```
/// let set = halfproc::Set::init_default().unwrap();
/// let secret = *b"private bytes";
/// let mut buf = [0u8; 13];
/// // The creator is a member, so it may read itself.
/// let n = halfproc::dmread(set.creator_pid(), secret.as_ptr() as usize, 13, &mut buf).unwrap();
/// assert_eq!((n, &buf), (13, &secret));
/// ```
pub fn dmread(pid: i32, remote_ptr: usize, len: usize, local_buf: &mut [u8]) -> io::Result<usize> {
    check_len(len, local_buf.len())?;
    let set = set_for_dm(pid)?;
    let local = [iovec(local_buf.as_mut_ptr() as usize, len)];
    let remote = [iovec(remote_ptr, len)];
    // SAFETY: `local` describes memory we own for `len` bytes (checked);
    // the kernel validates the remote side.
    unsafe { copy(set, pid, &local, &remote, false) }
}

/// Copies `len` bytes of `local_buf` to `remote_ptr` in member `pid`.
///
/// # Examples
///
/// ```
/// let set = halfproc::Set::init_default().unwrap();
/// let mut target = [0u8; 4];
/// let n = halfproc::dmwrite(set.creator_pid(), target.as_mut_ptr() as usize, 4, b"abcd").unwrap();
/// assert_eq!(n, 4);
/// assert_eq!(std::hint::black_box(&target), b"abcd");
/// ```
pub fn dmwrite(pid: i32, remote_ptr: usize, len: usize, local_buf: &[u8]) -> io::Result<usize> {
    check_len(len, local_buf.len())?;
    let set = set_for_dm(pid)?;
    let local = [iovec(local_buf.as_ptr() as usize, len)];
    let remote = [iovec(remote_ptr, len)];
    // SAFETY: the kernel only reads `local` (our buffer, `len` bytes).
    unsafe { copy(set, pid, &local, &remote, true) }
}

/// Vectored [`dmread`].
///
/// # Safety
///
/// Every `local` iovec must describe writable memory of the caller.
pub unsafe fn dmreadv(
    pid: i32,
    local: &[libc::iovec],
    remote: &[libc::iovec],
) -> io::Result<usize> {
    let set = set_for_dm(pid)?;
    // SAFETY: per the contract.
    unsafe { copy(set, pid, local, remote, false) }
}

/// Vectored [`dmwrite`].
///
/// # Safety
///
/// Every `local` iovec must describe readable memory of the caller.
pub unsafe fn dmwritev(
    pid: i32,
    local: &[libc::iovec],
    remote: &[libc::iovec],
) -> io::Result<usize> {
    let set = set_for_dm(pid)?;
    // SAFETY: per the contract.
    unsafe { copy(set, pid, local, remote, true) }
}

/// # Safety
///
/// `local` iovecs must be valid for the direction of the copy.
unsafe fn copy(
    set: &Set,
    pid: i32,
    local: &[libc::iovec],
    remote: &[libc::iovec],
    write: bool,
) -> io::Result<usize> {
    let dir = if write { Dir::Write } else { Dir::Read };
    // SAFETY: forwarded contract.
    let r = unsafe {
        match set.backend().kind() {
            BackendKind::Kernel => copy::dm(dir, pid, local, remote),
            BackendKind::Portable => copy::cma(dir, pid, local, remote),
        }
    };
    r.map_err(io::Error::from)
}
