// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Copies between two processes' private memory: `dmread`/`dmwrite`
//! (and `dmreadv`/`dmwritev`) of the patched kernel, and cross-memory attach
//! (`process_vm_readv`/`process_vm_writev`) of any kernel.
//!
//! [`dm`] and [`cma`] take raw `iovec` arrays, as the system calls do (the
//! runtime's C ABI and vectored calls pass them through); one local and one
//! remote iovec make `dm` use the one-range `dmread`/`dmwrite`. [`vm_read`]
//! is the safe one-buffer read, through `nix`. Every call returns the bytes
//! copied, which may be fewer than asked at an unmapped remote page.
//!
//! C header: `include/uapi/linux/halfproc.h` (numbers in
//! [`halfproc_uapi::nr`]), `<sys/uio.h>`.

use std::io::IoSliceMut;

use halfproc_uapi::{nr, DM_IOV_MAX};
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;

use crate::error::{Error, Result};

/// Which way the data goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Remote to local (`dmread`, `process_vm_readv`).
    Read,
    /// Local to remote (`dmwrite`, `process_vm_writev`).
    Write,
}

/// One `iovec`: `len` bytes at `base`.
pub fn iovec(base: usize, len: usize) -> libc::iovec {
    libc::iovec {
        iov_base: base as *mut libc::c_void,
        iov_len: len,
    }
}

fn check_counts(what: &'static str, local: &[libc::iovec], remote: &[libc::iovec]) -> Result<()> {
    if local.len() > DM_IOV_MAX || remote.len() > DM_IOV_MAX {
        return Err(Error::from_errno(what, libc::EINVAL));
    }
    Ok(())
}

/// `dmread`/`dmwrite` (one local and one remote iovec) or
/// `dmreadv`/`dmwritev` between the caller and member `pid` of its set.
///
/// # Safety
///
/// Every `local` iovec must describe memory of the caller that is writable
/// ([`Dir::Read`]) or readable ([`Dir::Write`]) for its length, and not
/// otherwise accessed during the call. The kernel checks the remote side.
pub unsafe fn dm(
    dir: Dir,
    pid: i32,
    local: &[libc::iovec],
    remote: &[libc::iovec],
) -> Result<usize> {
    let (one, vec, what) = match dir {
        Dir::Read => (nr::DMREAD, nr::DMREADV, "dmread"),
        Dir::Write => (nr::DMWRITE, nr::DMWRITEV, "dmwrite"),
    };
    check_counts(what, local, remote)?;
    let r = if let ([l], [r]) = (local, remote) {
        // SAFETY: dmread(pid, remote ptr, size, local buf), and dmwrite
        // alike; the contract makes `l` valid for `l.iov_len` bytes, and
        // the size passed is at most that.
        unsafe {
            libc::syscall(
                one as libc::c_long,
                pid as libc::c_long,
                r.iov_base,
                r.iov_len.min(l.iov_len),
                l.iov_base,
            )
        }
    } else {
        // SAFETY: the same arguments as process_vm_readv; the iovec arrays
        // are live slices and their local buffers valid per the contract.
        unsafe {
            libc::syscall(
                vec as libc::c_long,
                pid as libc::c_long,
                local.as_ptr(),
                local.len(),
                remote.as_ptr(),
                remote.len(),
                0usize,
            )
        }
    };
    if r < 0 {
        return Err(Error::last_os(what));
    }
    Ok(r as usize)
}

/// `process_vm_readv`/`process_vm_writev` between the caller and `pid`.
///
/// The raw call rather than `nix`'s: `nix` wants `IoSliceMut`s, that is
/// Rust references, which callers holding raw iovecs (from C, or into
/// memory other processes write) cannot honestly make.
///
/// # Safety
///
/// As for [`dm`].
pub unsafe fn cma(
    dir: Dir,
    pid: i32,
    local: &[libc::iovec],
    remote: &[libc::iovec],
) -> Result<usize> {
    let what = match dir {
        Dir::Read => "process_vm_readv",
        Dir::Write => "process_vm_writev",
    };
    check_counts(what, local, remote)?;
    let (l, ln, r, rn) = (
        local.as_ptr(),
        local.len() as libc::c_ulong,
        remote.as_ptr(),
        remote.len() as libc::c_ulong,
    );
    // SAFETY: the iovec arrays are live slices of the lengths passed, their
    // local buffers are valid per the contract; flags must be 0.
    let r = unsafe {
        match dir {
            Dir::Read => libc::process_vm_readv(pid, l, ln, r, rn, 0),
            Dir::Write => libc::process_vm_writev(pid, l, ln, r, rn, 0),
        }
    };
    if r < 0 {
        return Err(Error::last_os(what));
    }
    Ok(r as usize)
}

/// Reads `buf.len()` bytes at `remote` in `pid` into `buf` with
/// `process_vm_readv`; returns the bytes read (fewer at an unmapped page).
///
/// # Examples
///
/// ```
/// let secret = *b"mine";
/// let mut buf = [0u8; 4];
/// let pid = halfproc_sys::task::getpid();
/// let n = halfproc_sys::copy::vm_read(pid, secret.as_ptr() as usize, &mut buf).unwrap();
/// assert_eq!((n, buf), (4, secret));
/// ```
pub fn vm_read(pid: i32, remote: usize, buf: &mut [u8]) -> Result<usize> {
    let len = buf.len();
    process_vm_readv(
        Pid::from_raw(pid),
        &mut [IoSliceMut::new(buf)],
        &[RemoteIoVec { base: remote, len }],
    )
    .map_err(|e| Error::nix("process_vm_readv", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::getpid;

    #[test]
    fn cma_both_ways_in_one_process() {
        let src = *b"0123456789";
        let mut dst = [0u8; 10];
        let me = getpid();
        // SAFETY: `dst` is ours and writable for 10 bytes.
        let n = unsafe {
            cma(
                Dir::Read,
                me,
                &[
                    iovec(dst.as_mut_ptr() as usize, 4),
                    iovec(dst.as_mut_ptr() as usize + 4, 6),
                ],
                &[iovec(src.as_ptr() as usize, 10)],
            )
        }
        .unwrap();
        assert_eq!((n, &dst), (10, &src));
        let mut back = [0u8; 3];
        // SAFETY: `src` is readable for 3 bytes; `back` is ours.
        let n = unsafe {
            cma(
                Dir::Write,
                me,
                &[iovec(src.as_ptr() as usize + 7, 3)],
                &[iovec(back.as_mut_ptr() as usize, 3)],
            )
        }
        .unwrap();
        assert_eq!((n, std::hint::black_box(&back)), (3, b"789"));
    }

    #[test]
    fn too_many_iovecs_are_refused_before_the_call() {
        let many = vec![iovec(0, 0); DM_IOV_MAX + 1];
        // SAFETY: refused before any memory is touched.
        let e = unsafe { dm(Dir::Read, getpid(), &many, &[]) }.unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        // SAFETY: as above.
        let e = unsafe { cma(Dir::Write, getpid(), &[], &many) }.unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
    }

    #[test]
    fn vm_read_of_an_unmapped_address_fails() {
        let mut buf = [0u8; 8];
        let e = vm_read(getpid(), 8, &mut buf).unwrap_err();
        assert_eq!(e.errno(), libc::EFAULT);
    }
}
