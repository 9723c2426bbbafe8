// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The half-process set of this process: the shared range and its header.
//!
//! One process creates the set with [`Set::init`]; that maps the arena at the
//! start of the shared range `[2^45, 2^46)` and writes the [`SetHeader`] at its
//! first byte. Every member is a fork of a member (see [`crate::member`]) and
//! so finds the same `&'static Set` through [`Set::get`].
//!
//! # Layout of the arena
//!
//! ```text
//! 2^45: SetHeader | page bitmap | page metadata | (pad to 64 KiB) | data pages ...
//! ```
//!
//! All of it starts zeroed, and zero is the initial state of every field.
//!
//! Who is a member and who an outsider is [`crate::identity`]'s business;
//! this module registers the `pthread_atfork` handler that tells them apart.
//!
//! C header: `include/halfproc.h` (`halfproc_init`).

use core::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

use halfproc_sys::mem::{madvise, MapFlags, MmapAdvise, Region};
use halfproc_sys::range::{HALFPROC_RANGE_END, HALFPROC_RANGE_START};

use crate::alloc::arena::{ArenaHeader, PAGE_SIZE};
use crate::alloc::heap::HeapTable;
use crate::backend::{Backend, BackendKind, Request};
use crate::error::{Error, Result};
use crate::identity;
use crate::slots::MemberTable;
use halfproc_sys::task;

/// Magic number at the start of the arena (`"HALFPROC"`).
pub const SET_MAGIC: u64 = u64::from_le_bytes(*b"HALFPROC");
/// Layout version of [`SetHeader`].
pub const SET_VERSION: u32 = 2;
/// Default arena size: 16 GiB of address space (only touched pages cost memory).
pub const DEFAULT_ARENA_SIZE: u64 = 16 << 30;
/// Smallest accepted arena size.
pub const MIN_ARENA_SIZE: u64 = 64 << 20;
/// Environment variable overriding the arena size (bytes; `K`/`M`/`G` suffixes).
pub const ARENA_SIZE_ENV: &str = "HALFPROC_ARENA_SIZE";

/// The fixed header at the start of the arena.
///
/// # Invariants
///
/// Lives at [`HALFPROC_RANGE_START`], in memory shared by every member, and is
/// never moved or unmapped while any member runs.
#[repr(C)]
pub(crate) struct SetHeader {
    pub(crate) magic: u64,
    pub(crate) version: u32,
    pub(crate) backend: u32,
    pub(crate) size: u64,
    pub(crate) creator_pid: AtomicI32,
    _pad: u32,
    pub(crate) members: MemberTable,
    pub(crate) heaps: HeapTable,
    pub(crate) arena: ArenaHeader,
}

/// How to create the set.
///
/// # Examples
///
/// ```
/// use halfproc::{SetConfig, backend::Request};
/// let c = SetConfig::default().arena_size(1 << 30);
/// assert_eq!(c.backend, Request::Auto);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetConfig {
    /// Which backend to use.
    pub backend: Request,
    /// Bytes of address space for the arena, a multiple of 64 KiB.
    pub arena_size: u64,
}

impl Default for SetConfig {
    fn default() -> Self {
        SetConfig {
            backend: Request::Auto,
            arena_size: DEFAULT_ARENA_SIZE,
        }
    }
}

impl SetConfig {
    /// The configuration from `HALFPROC_BACKEND` and `HALFPROC_ARENA_SIZE`.
    pub fn from_env() -> Result<Self> {
        let mut c = SetConfig::default();
        if let Ok(v) = std::env::var(crate::backend::BACKEND_ENV) {
            c.backend = v.parse()?;
        }
        if let Ok(v) = std::env::var(ARENA_SIZE_ENV) {
            c.arena_size = parse_size(&v).ok_or(Error::InvalidArgument(
                "HALFPROC_ARENA_SIZE must be a byte count with an optional K/M/G suffix",
            ))?;
        }
        Ok(c)
    }

    /// Sets the arena size.
    pub fn arena_size(mut self, bytes: u64) -> Self {
        self.arena_size = bytes;
        self
    }

    /// Sets the backend request.
    pub fn backend(mut self, req: Request) -> Self {
        self.backend = req;
        self
    }
}

/// Parses `123`, `64K`, `512M`, `16G` (`HALFPROC_ARENA_SIZE`).
pub use halfproc_sys::parse_size;

/// The process's handle on its half-process set.
///
/// # Examples
///
/// ```
/// let set = halfproc::Set::init_default().unwrap();
/// assert!(set.contains(set.base() as usize + 4096));
/// assert!(!set.contains(&set as *const _ as usize));
/// ```
pub struct Set {
    header: &'static SetHeader,
    backend: Backend,
}

// SAFETY: `Set` only holds a shared reference to the header, whose mutable
// fields are atomics; the backend description is immutable.
unsafe impl Sync for Set {}
// SAFETY: as above.
unsafe impl Send for Set {}

impl std::panic::RefUnwindSafe for Set {}
impl std::panic::UnwindSafe for Set {}

static SET: OnceLock<Set> = OnceLock::new();

extern "C" fn atfork_child() {
    if identity::is_member() {
        let member = SET
            .get()
            .is_some_and(|s| s.backend.kind() == BackendKind::Kernel)
            && task::halfproc_prctl(task::PR_HALFPROC_GET, 0)
                .is_ok_and(|bits| bits & task::PR_HALFPROC_IS_MEMBER != 0);
        if !member {
            identity::mark_outsider();
        }
    }
    reset_after_fork();
}

/// What a `fork()` child of a member must forget: its thread id and its
/// thread's heap (both belong to the parent's thread).
pub(crate) fn reset_after_fork() {
    identity::reset_tid_after_fork();
    crate::alloc::heap::forget_thread_heap();
}

impl Set {
    /// Creates the set from the environment (`HALFPROC_BACKEND`,
    /// `HALFPROC_ARENA_SIZE`), or returns the existing one.
    ///
    /// It may be called from any thread, at any time.
    pub fn init_default() -> Result<&'static Set> {
        if let Some(s) = SET.get() {
            return Ok(s);
        }
        match Self::init(SetConfig::from_env()?) {
            Err(Error::AlreadyInitialized) => Self::get(),
            other => other,
        }
    }

    /// Creates the set with an explicit configuration.
    ///
    /// Fails with [`Error::AlreadyInitialized`] when a set exists already,
    /// [`Error::KernelBackendUnavailable`] when the kernel backend is asked
    /// for but missing, [`Error::NotMember`] in an outsider.
    pub fn init(config: SetConfig) -> Result<&'static Set> {
        if identity::in_any_set() {
            return Err(if identity::is_outsider() {
                Error::NotMember
            } else {
                Error::AlreadyInitialized
            });
        }
        if SET.get().is_some() {
            return Err(Error::AlreadyInitialized);
        }
        let backend = Backend::select(config.backend)?;
        let size = config.arena_size;
        if size < MIN_ARENA_SIZE
            || size % PAGE_SIZE as u64 != 0
            || size > HALFPROC_RANGE_END - HALFPROC_RANGE_START
        {
            return Err(Error::InvalidArgument(
                "arena size must be a multiple of 64 KiB between 64 MiB and 32 TiB",
            ));
        }
        static INIT_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _g = INIT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        if SET.get().is_some() {
            return Err(Error::AlreadyInitialized);
        }
        let base = map_arena(backend.kind(), size)?;
        // SAFETY: `base` is the start of a fresh, zeroed, writable mapping of
        // `size` bytes, large enough for the header (checked by layout()).
        let header = unsafe { &*(base as *const SetHeader) };
        // SAFETY: nothing else references the header yet; these plain fields
        // are written once before the header is published.
        unsafe {
            let h = base as *mut SetHeader;
            (*h).magic = SET_MAGIC;
            (*h).version = SET_VERSION;
            (*h).backend = backend.kind() as u32;
            (*h).size = size;
        }
        header.creator_pid.store(task::getpid(), Ordering::Relaxed);
        header.arena.init(base, size)?;
        // SAFETY: registering a plain extern "C" handler is always allowed.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(atfork_child)) };
        if rc != 0 {
            return Err(Error::os(
                "pthread_atfork",
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        identity::mark_member();
        let set = SET.get_or_init(|| Set {
            header,
            backend: backend.clone(),
        });
        task::allow_ptrace_from(set.creator_pid());
        Ok(set)
    }

    /// The set of this process, or [`Error::NoSet`] / [`Error::NotMember`].
    pub fn get() -> Result<&'static Set> {
        if identity::is_outsider() {
            return Err(Error::NotMember);
        }
        SET.get().ok_or(Error::NoSet)
    }

    /// The set if one exists (members and creator), without membership check.
    pub(crate) fn try_current() -> Option<&'static Set> {
        SET.get()
    }

    pub(crate) fn header(&self) -> &'static SetHeader {
        self.header
    }

    /// The backend in use.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// First byte of the arena (the shared-range start).
    pub fn base(&self) -> *mut u8 {
        self.header as *const SetHeader as *mut u8
    }

    /// Bytes of address space the arena spans.
    pub fn size(&self) -> u64 {
        self.header.size
    }

    /// Whether `addr` lies inside this set's arena.
    pub fn contains(&self, addr: usize) -> bool {
        (addr as u64).wrapping_sub(self.base() as u64) < self.size()
    }

    /// Members currently running (not counting the creator).
    pub fn running_members(&self) -> u32 {
        self.header.members.running_count()
    }

    /// Process id of the set's creator.
    pub fn creator_pid(&self) -> i32 {
        self.header.creator_pid.load(Ordering::Relaxed)
    }

    /// Makes every child of this process (`fork`, and `vfork`/`posix_spawn`
    /// followed by `exec`) a member of the set, and their children in turn,
    /// across `exec` (`on`), or stops it: unmodified programs that fork
    /// workers (`make -j`, `xargs -P`) keep them in the set.
    ///
    /// Kernel backend only (`PR_HALFPROC_INHERIT`): on the portable backend
    /// an `exec`ed program loses the shared mapping, so it is
    /// [`Error::Unsupported`].
    pub fn inherit_children(&self, on: bool) -> Result<()> {
        if self.backend.kind() != BackendKind::Kernel {
            return Err(Error::Unsupported(
                "inherited membership needs the kernel backend (exec drops a shared mapping)",
            ));
        }
        identity::check_member_for(self.base() as usize)?;
        task::halfproc_prctl(task::PR_HALFPROC_INHERIT, on as libc::c_ulong)
            .map(drop)
            .map_err(|e| Error::sys("prctl(PR_HALFPROC_INHERIT)", e))
    }

    /// Whether children of this process become members
    /// ([`Set::inherit_children`]).
    pub fn inherits_children(&self) -> bool {
        self.backend.kind() == BackendKind::Kernel
            && task::halfproc_prctl(task::PR_HALFPROC_GET, 0)
                .is_ok_and(|bits| bits & task::PR_HALFPROC_IS_INHERITING != 0)
    }

    /// Returns `[addr, addr + len)` of the arena to the operating system, for
    /// every member: the pages read back as zeros afterwards.
    ///
    /// # Safety
    ///
    /// The range must be page-aligned, inside the arena's data area, and hold
    /// no live object.
    pub(crate) unsafe fn release(&self, addr: usize, len: usize) {
        debug_assert!(addr % 4096 == 0 && len % 4096 == 0 && self.contains(addr));
        let advice = match self.backend.kind() {
            // Punches a hole in the memfd: freed for every process mapping it.
            BackendKind::Portable => MmapAdvise::MADV_REMOVE,
            // Private anonymous memory of the set's mm: the kernel applies the
            // advice to the set, not to the calling member alone.
            BackendKind::Kernel => MmapAdvise::MADV_DONTNEED,
        };
        // SAFETY: per the contract the range is ours and unused; madvise does
        // not unmap anything.
        let r = unsafe { madvise(addr, len, advice) };
        debug_assert!(r.is_ok(), "madvise: {r:?}");
    }
}

/// Maps the arena at the start of the shared range, for good.
fn map_arena(kind: BackendKind, size: u64) -> Result<usize> {
    let (len, start) = (size as usize, HALFPROC_RANGE_START as usize);
    let (arena, what) = match kind {
        BackendKind::Portable => (
            Region::memfd_at(c"halfproc-set", len, start, MapFlags::MAP_NORESERVE),
            "memfd arena at 2^45",
        ),
        BackendKind::Kernel => (
            Region::halfproc(len, Some(start), MapFlags::MAP_NORESERVE),
            "mmap(MAP_HALFPROC)",
        ),
    };
    match arena {
        // The arena lives as long as the process.
        Ok(r) => Ok(r.into_raw().0),
        Err(halfproc_sys::Error::Misplaced {
            wanted: Some(_), ..
        }) => Err(Error::InvalidArgument(
            "could not map the arena at 2^45 (address in use)",
        )),
        Err(e) => Err(Error::sys(what, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_fits_before_first_data_page() {
        // The header is followed by the bitmap and metadata; it alone must be
        // far below one page of the arena.
        assert!(core::mem::size_of::<SetHeader>() < 4 << 20);
    }
}
