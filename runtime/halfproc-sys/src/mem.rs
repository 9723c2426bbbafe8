// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Mappings: private and shared memory, `mmap(MAP_HALFPROC)`, and a memfd
//! mapped at a fixed address of the shared range (the portable backend).
//!
//! Every mapping is a [`Region`], unmapped on drop unless handed over with
//! [`Region::into_raw`]. Placement in the shared range is checked here, once:
//! an unpatched kernel ignores `MAP_HALFPROC`, and kernels before 4.17 treat
//! `MAP_FIXED_NOREPLACE` as a hint, so a mapping that lands elsewhere is
//! unmapped again and reported as [`Error::Misplaced`].
//!
//! C header: `<sys/mman.h>`, `<linux/memfd.h>`; `MAP_HALFPROC` from
//! `include/uapi/linux/halfproc.h`.

use std::ffi::CStr;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::sys::mman::{self, ProtFlags};
/// `nix`'s flag and advice types, so that callers need no `nix` of their own.
pub use nix::sys::mman::{MapFlags, MmapAdvise};

use crate::error::{Error, Result};
use crate::range::in_shared_range;

/// The size of a page.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// `len` rounded up to a whole number of pages (at least one).
///
/// # Examples
///
/// ```
/// use halfproc_sys::mem::{page_round, page_size};
/// assert_eq!(page_round(0), page_size());
/// assert_eq!(page_round(page_size() + 1), 2 * page_size());
/// ```
pub fn page_round(len: usize) -> usize {
    let p = page_size();
    len.max(1).div_ceil(p) * p
}

/// `MAP_HALFPROC` as a `nix` flag.
pub const MAP_HALFPROC: MapFlags = MapFlags::from_bits_retain(halfproc_uapi::MAP_HALFPROC);

/// An `mmap`ed region, unmapped on drop.
///
/// # Invariants
///
/// `ptr` is the start of a live mapping of `len` bytes (a whole number of
/// pages), readable and writable, owned by this value: no other value
/// unmaps it.
#[derive(Debug)]
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the region is plain memory owned by the value; moving the owner to
// another thread moves the ownership.
unsafe impl Send for Region {}

impl Region {
    /// `mmap(addr, len, PROT_READ|PROT_WRITE, flags, fd)`, `len` rounded up
    /// to pages, of `fd` or anonymous; `addr` is a hint unless `flags` say
    /// `MAP_FIXED_NOREPLACE`.
    fn raw(
        what: &'static str,
        addr: Option<usize>,
        len: usize,
        flags: MapFlags,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<Self> {
        debug_assert!(!flags.contains(MapFlags::MAP_FIXED));
        let len = page_round(len);
        let nz_len = NonZeroUsize::new(len).expect("page_round gives at least a page");
        let addr = addr.and_then(NonZeroUsize::new);
        let prot = ProtFlags::PROT_READ | ProtFlags::PROT_WRITE;
        // SAFETY: a new mapping without MAP_FIXED (checked above): the
        // kernel replaces no existing mapping, so no live object can be
        // unmapped under anybody's feet.
        let p = unsafe {
            match fd {
                Some(fd) => mman::mmap(addr, nz_len, prot, flags, fd, 0),
                None => mman::mmap_anonymous(addr, nz_len, prot, flags),
            }
        }
        .map_err(|e| Error::nix(format!("mmap({what}, {len} bytes)"), e))?;
        // INVARIANT: a live RW mapping of `len` bytes that we own.
        Ok(Region { ptr: p.cast(), len })
    }

    /// [`Region::raw`] at exactly `fixed` (`MAP_FIXED_NOREPLACE`), or
    /// anywhere.
    fn map(
        what: &'static str,
        fixed: Option<usize>,
        len: usize,
        mut flags: MapFlags,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<Self> {
        if fixed.is_some() {
            flags |= MapFlags::MAP_FIXED_NOREPLACE;
        }
        let r = Self::raw(what, fixed, len, flags, fd)?;
        match fixed {
            // Dropping `r` unmaps it.
            Some(want) if want != r.addr() => Err(Error::Misplaced {
                what,
                addr: r.addr() as u64,
                wanted: Some(want as u64),
            }),
            _ => Ok(r),
        }
    }

    /// Private anonymous memory, as `malloc` gives for large sizes, marked
    /// `MADV_DONTFORK` where the kernel has `madvise` (tiny guest kernels
    /// without `CONFIG_ADVISE_SYSCALLS` do not): a child then never shares
    /// it copy-on-write.
    pub fn private(len: usize) -> Result<Self> {
        let r = Self::anon("private", len, MapFlags::MAP_PRIVATE)?;
        match r.advise(MmapAdvise::MADV_DONTFORK) {
            Err(e) if e.errno() == libc::ENOSYS => {}
            other => other?,
        }
        Ok(r)
    }

    /// Shared anonymous memory (shmem), inherited by children: the classic
    /// inter-process shared memory of a fork-based program.
    pub fn shared_anon(len: usize) -> Result<Self> {
        Self::anon("shared anonymous", len, MapFlags::MAP_SHARED)
    }

    /// Anonymous memory with `flags` (`MAP_PRIVATE` or `MAP_SHARED`, and
    /// any extra flag but `MAP_FIXED`).
    pub fn anon(what: &'static str, len: usize, flags: MapFlags) -> Result<Self> {
        Self::map(what, None, len, flags, None)
    }

    /// A `MAP_SHARED` mapping of `fd` (a memfd or POSIX shm object), at
    /// exactly `fixed` if given.
    pub fn shared_fd(
        what: &'static str,
        fd: BorrowedFd<'_>,
        len: usize,
        fixed: Option<usize>,
    ) -> Result<Self> {
        Self::map(what, fixed, len, MapFlags::MAP_SHARED, Some(fd))
    }

    /// `mmap(hint, len, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS|
    /// MAP_HALFPROC|extra)`: memory of the caller's half-process set (the
    /// first such call makes the caller the leader of a new set). Fails with
    /// [`Error::Misplaced`] when the kernel put it outside the shared range.
    pub fn halfproc(len: usize, hint: Option<usize>, extra: MapFlags) -> Result<Self> {
        let flags = MapFlags::MAP_PRIVATE | MAP_HALFPROC | extra;
        let r = Self::raw("MAP_HALFPROC", hint, len, flags, None)?;
        if !in_shared_range(r.addr() as u64, r.len as u64) {
            // Dropping `r` unmaps it.
            return Err(Error::Misplaced {
                what: "mmap(MAP_HALFPROC)",
                addr: r.addr() as u64,
                wanted: None,
            });
        }
        Ok(r)
    }

    /// A fresh memfd of `len` bytes mapped `MAP_SHARED|extra` at exactly
    /// `addr` in the shared range: the portable backend's shared memory,
    /// which every `fork` child inherits at the same address. The memfd
    /// itself is closed; the mapping keeps it alive.
    pub fn memfd_at(name: &CStr, len: usize, addr: usize, extra: MapFlags) -> Result<Self> {
        if !in_shared_range(addr as u64, page_round(len) as u64) {
            return Err(Error::from_errno(
                "memfd outside the shared range",
                libc::EINVAL,
            ));
        }
        let fd = memfd(name, len)?;
        Self::map(
            "memfd in the shared range",
            Some(addr),
            len,
            MapFlags::MAP_SHARED | extra,
            Some(fd.as_fd()),
        )
    }

    /// Gives advice on the whole region.
    pub fn advise(&self, advice: MmapAdvise) -> Result<()> {
        // SAFETY: the region is ours (type invariant); the advice callers
        // can name here never unmaps it, and DONTNEED/REMOVE only zero what
        // the owner of `&self` decided to drop.
        unsafe { madvise(self.addr(), self.len, advice) }
    }

    /// Start address.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Length in bytes (a whole number of pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never: mappings have at least a page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The whole region as bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: by the type invariant the mapping is live, readable and
        // `len` bytes long; other processes may write a shared mapping, but
        // its users' protocol keeps them from doing so while this is read.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The whole region as mutable bytes.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, plus `&mut self` makes this the only Rust
        // reference into the region.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Writes one byte per page so that later accesses do not fault.
    pub fn prefault_write(&mut self) {
        let p = page_size();
        let b = self.bytes_mut();
        for i in (0..b.len()).step_by(p) {
            // SAFETY: `i < len`, inside the mapping; volatile so the store
            // is not elided.
            unsafe { std::ptr::write_volatile(b.as_mut_ptr().add(i), 0) };
        }
    }

    /// Reads one byte per page, mapping pages that already exist.
    pub fn prefault_read(&self) {
        let p = page_size();
        let b = self.bytes();
        let mut acc = 0u8;
        for i in (0..b.len()).step_by(p) {
            // SAFETY: `i < len`, inside the mapping.
            acc ^= unsafe { std::ptr::read_volatile(b.as_ptr().add(i)) };
        }
        std::hint::black_box(acc);
    }

    /// Hands the mapping over for good: it stays mapped for the life of the
    /// process. Returns its address and length.
    pub fn into_raw(self) -> (usize, usize) {
        let r = (self.addr(), self.len);
        std::mem::forget(self);
        r
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: by the type invariant we own this live mapping, and no
        // reference into it outlives `self`.
        let _ = unsafe { mman::munmap(self.ptr.cast(), self.len) };
    }
}

/// `madvise(addr, len, advice)`.
///
/// # Safety
///
/// `[addr, addr + len)` must be memory of the caller's that no live Rust
/// object depends on in a way the advice breaks (`MADV_DONTNEED` and
/// `MADV_REMOVE` zero the pages).
pub unsafe fn madvise(addr: usize, len: usize, advice: MmapAdvise) -> Result<()> {
    let Some(p) = NonNull::new(addr as *mut libc::c_void) else {
        return Err(Error::from_errno("madvise", libc::EINVAL));
    };
    // SAFETY: forwarded contract.
    unsafe { mman::madvise(p, len, advice) }.map_err(|e| Error::nix("madvise", e))
}

/// `memfd_create(name, MFD_CLOEXEC)`, sized to `len` bytes.
pub fn memfd(name: &CStr, len: usize) -> Result<OwnedFd> {
    let fd =
        memfd_create(name, MFdFlags::MFD_CLOEXEC).map_err(|e| Error::nix("memfd_create", e))?;
    truncate(fd.as_fd(), len)?;
    Ok(fd)
}

/// `ftruncate(fd, len)`.
pub fn truncate(fd: BorrowedFd<'_>, len: usize) -> Result<()> {
    let len =
        libc::off_t::try_from(len).map_err(|_| Error::from_errno("ftruncate", libc::EFBIG))?;
    nix::unistd::ftruncate(fd, len).map_err(|e| Error::nix("ftruncate", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use halfproc_uapi::HALFPROC_RANGE_START;

    #[test]
    fn private_memory_is_zeroed_and_writable() {
        let mut r = Region::private(10).unwrap();
        assert_eq!(r.len(), page_size());
        assert!(r.bytes().iter().all(|&b| b == 0));
        r.bytes_mut()[0] = 5;
        r.bytes_mut()[9] = 7;
        r.prefault_write();
        r.prefault_read();
        // A zero at each page start, nothing else touched.
        assert_eq!((r.bytes()[0], r.bytes()[9]), (0, 7));
    }

    #[test]
    fn memfd_at_lands_where_asked_and_is_shared() {
        // A slot far from the runtime's arena (which starts at 2^45).
        let addr = HALFPROC_RANGE_START as usize + (9 << 40);
        let mut r =
            Region::memfd_at(c"halfproc-sys-test", 3 * 4096, addr, MapFlags::empty()).unwrap();
        assert_eq!(r.addr(), addr);
        r.bytes_mut()[0] = 42;
        // A second mapping at the same place is refused, not stacked.
        let again = Region::memfd_at(c"halfproc-sys-test", 4096, addr, MapFlags::empty());
        assert_eq!(again.unwrap_err().errno(), libc::EEXIST);
        drop(r);
        // Unmapped on drop: the address is free again.
        let r = Region::memfd_at(c"halfproc-sys-test", 4096, addr, MapFlags::empty()).unwrap();
        assert_eq!(r.bytes()[0], 0);
    }

    #[test]
    fn memfd_outside_the_range_is_refused() {
        let below = HALFPROC_RANGE_START as usize - 4096;
        let e = Region::memfd_at(c"x", 8192, below, MapFlags::empty()).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
    }

    #[test]
    fn halfproc_mapping_is_in_range_or_refused() {
        // On a stock kernel MAP_HALFPROC is ignored and the mapping lands
        // elsewhere; with the module it must land in the range.
        match Region::halfproc(4096, None, MapFlags::empty()) {
            Ok(r) => assert!(in_shared_range(r.addr() as u64, r.len() as u64)),
            Err(Error::Misplaced { wanted: None, .. }) => {
                assert!(!crate::backend::kernel_available())
            }
            Err(e) => assert!(e.is_unsupported(), "{e}"),
        }
    }

    #[test]
    fn into_raw_keeps_the_mapping() {
        let r = Region::shared_anon(1).unwrap();
        let (addr, len) = r.into_raw();
        // SAFETY: still mapped (into_raw does not unmap); ours to unmap now.
        unsafe {
            (addr as *mut u8).write(1);
            assert_eq!(libc::munmap(addr as *mut libc::c_void, len), 0);
        }
    }
}
