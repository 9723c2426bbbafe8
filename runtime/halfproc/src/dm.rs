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

/// A one-element iovec array: `len` bytes at `base`.
fn iov1(base: *mut libc::c_void, len: usize) -> [libc::iovec; 1] {
    [libc::iovec {
        iov_base: base,
        iov_len: len,
    }]
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
    let local = iov1(local_buf.as_mut_ptr().cast(), len);
    let remote = iov1(remote_ptr as *mut libc::c_void, len);
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
    let local = iov1(local_buf.as_ptr().cast_mut().cast(), len);
    let remote = iov1(remote_ptr as *mut libc::c_void, len);
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
    if local.len() > halfproc_uapi::DM_IOV_MAX || remote.len() > halfproc_uapi::DM_IOV_MAX {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    use halfproc_uapi::nr;
    let (nr_one, nr_vec) = if write {
        (nr::DMWRITE, nr::DMWRITEV)
    } else {
        (nr::DMREAD, nr::DMREADV)
    };
    let r = match set.backend().kind() {
        // SAFETY: dmread(pid, ptr, size, buf) / dmwrite(pid, ptr, size, buf);
        // the local buffer is valid per the contract.
        BackendKind::Kernel if local.len() == 1 && remote.len() == 1 => unsafe {
            libc::syscall(
                nr_one as libc::c_long,
                pid as libc::c_long,
                remote[0].iov_base,
                remote[0].iov_len,
                local[0].iov_base,
            )
        },
        // SAFETY: same arguments as process_vm_readv; iovecs are valid.
        BackendKind::Kernel => unsafe {
            libc::syscall(
                nr_vec as libc::c_long,
                pid as libc::c_long,
                local.as_ptr(),
                local.len(),
                remote.as_ptr(),
                remote.len(),
                0usize,
            )
        },
        BackendKind::Portable => {
            let vm_copy = if write {
                libc::process_vm_writev
            } else {
                libc::process_vm_readv
            };
            // SAFETY: iovecs are valid per the contract; flags must be 0.
            unsafe {
                vm_copy(
                    pid,
                    local.as_ptr(),
                    local.len() as _,
                    remote.as_ptr(),
                    remote.len() as _,
                    0,
                ) as libc::c_long
            }
        }
    };
    crate::sys::cvt(r).map(|n| n as usize)
}
