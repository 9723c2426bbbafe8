// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The shared-arena allocator: `malloc`/`free` for memory every member sees.
//!
//! # Layout
//!
//! - [`size_class`]: 32 classes from 16 B to 8 KiB.
//! - [`arena`]: the set-wide 64 KiB page allocator (bitmap + per-page
//!   metadata), which returns freed pages to the system for every member.
//! - `heap`: per-thread heaps with per-class page lists, local free lists
//!   and atomic remote-free stacks (mimalloc's design).
//! - [`kr`]: the paper's K&R allocator, kept only as a benchmark baseline.
//!
//! Objects up to 8 KiB come from the caller's heap; larger ones take whole
//! pages from the arena. Any member may free (or `realloc`) any block, no
//! matter which member allocated it.
//!
//! # Bad input
//!
//! Sizes that overflow (`calloc(n, m)` with `n * m` too big, anything beyond
//! the arena) return null and set `ENOMEM`; a bad alignment gives `EINVAL`.
//! Freeing a pointer outside the arena always aborts with a message; in debug
//! builds freeing a pointer that is not the start of a live block (an
//! interior pointer, a free page, a double free) aborts too.
//!
//! # Examples
//!
//! ```
//! let set = halfproc::Set::init_default().unwrap();
//! let p = halfproc::alloc::malloc(100);
//! assert!(set.contains(p as usize));
//! // SAFETY: `p` came from malloc(100).
//! unsafe { p.write_bytes(0xab, 100); halfproc::alloc::free(p) };
//! ```
//!
//! C header: `include/halfproc.h` (`halfproc_malloc`, ...).

pub mod arena;
pub(crate) mod heap;
pub mod kr;
pub mod size_class;

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::NonNull;
use core::sync::atomic::Ordering;

use arena::{ArenaHeader, ArenaStats, KIND_LARGE, KIND_LARGE_TAIL, KIND_SMALL, PAGE_SIZE};
use size_class::{aligned_class_of, class_of, CLASS_SIZES, MAX_SMALL};

use crate::set::Set;

/// Smallest alignment every block has.
pub const MIN_ALIGN: usize = 16;

fn set_errno(e: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// The set, or null + errno for callers outside one.
#[inline(always)]
fn set_for_alloc() -> Option<&'static Set> {
    match Set::get() {
        Ok(s) => Some(s),
        Err(e) => {
            set_errno(e.errno());
            None
        }
    }
}

/// Allocates `size` bytes (16-byte aligned) in the shared range; null with
/// `errno = ENOMEM` when out of memory, `EPERM` outside the set.
///
/// `malloc(0)` returns a unique minimum-size block.
#[inline]
pub fn malloc(size: usize) -> *mut u8 {
    let Some(set) = set_for_alloc() else {
        return core::ptr::null_mut();
    };
    match class_of(size) {
        Some(c) => small(set, c),
        None => large(set, size, 1),
    }
}

#[inline(always)]
fn small(set: &Set, class: usize) -> *mut u8 {
    let p = match heap::thread_heap(set) {
        Some(h) => h.malloc_small(set, class),
        None => core::ptr::null_mut(),
    };
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p
}

#[cold]
fn large(set: &Set, size: usize, align_pages: usize) -> *mut u8 {
    let arena = &set.header().arena;
    let Some(n) = size.checked_add(PAGE_SIZE - 1).map(|s| s / PAGE_SIZE) else {
        set_errno(libc::ENOMEM);
        return core::ptr::null_mut();
    };
    let Some(idx) = arena.alloc_pages(n, align_pages) else {
        set_errno(libc::ENOMEM);
        return core::ptr::null_mut();
    };
    let head = arena.meta(idx);
    head.run.store(n as u32, Ordering::Relaxed);
    head.large_size.store(size as u64, Ordering::Relaxed);
    for t in 1..n as u32 {
        let m = arena.meta(idx + t);
        m.run.store(idx, Ordering::Relaxed);
        m.kind.store(KIND_LARGE_TAIL, Ordering::Release);
    }
    head.kind.store(KIND_LARGE, Ordering::Release);
    ArenaHeader::page_addr(set.base() as usize, idx) as *mut u8
}

/// Allocates `n * size` zeroed bytes; null with `ENOMEM` on overflow.
pub fn calloc(n: usize, size: usize) -> *mut u8 {
    let Some(total) = n.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return core::ptr::null_mut();
    };
    let p = malloc(total);
    if !p.is_null() && total <= MAX_SMALL {
        // Large runs come straight from the arena: already zero.
        // SAFETY: `p` is a fresh block of at least `total` bytes.
        unsafe { p.write_bytes(0, total) };
    }
    p
}

/// Allocates `size` bytes aligned to `align` (a power of two); null with
/// `EINVAL` for a bad alignment, `ENOMEM` when out of memory.
pub fn aligned_alloc(align: usize, size: usize) -> *mut u8 {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    if align <= MIN_ALIGN {
        return malloc(size);
    }
    let Some(set) = set_for_alloc() else {
        return core::ptr::null_mut();
    };
    match aligned_class_of(size, align) {
        Some(c) => small(set, c),
        None => large(set, size.max(1), (align / PAGE_SIZE).max(1)),
    }
}

/// Frees a block from any member. Null is ignored.
///
/// # Safety
///
/// `p` must be null or a live block of this allocator not freed before.
#[inline]
pub unsafe fn free(p: *mut u8) {
    if p.is_null() {
        return;
    }
    let Some(set) = Set::try_current() else {
        fatal_free(p, "no half-process set in this process");
    };
    if crate::identity::is_outsider() {
        fatal_free(p, "this process is not a member of the set");
    }
    let arena = &set.header().arena;
    let addr = p as usize;
    let Some(idx) = arena.page_of(set.base() as usize, addr) else {
        fatal_free(
            p,
            "pointer was not allocated by halfproc (outside the arena)",
        );
    };
    let m = arena.meta(idx);
    match m.kind.load(Ordering::Acquire) {
        KIND_SMALL => {
            if cfg!(debug_assertions) {
                check_small(set, idx, m, addr);
            }
            match heap::owned_here(m) {
                Some(h) => h.free_local(set, idx, m, addr),
                None => heap::free_remote(idx, m, addr),
            }
        }
        KIND_LARGE if addr % PAGE_SIZE == 0 => {
            let n = m.run.load(Ordering::Relaxed) as usize;
            // SAFETY: the caller hands us the whole large object.
            unsafe { arena.free_pages(set, idx, n) };
        }
        _ => fatal_free(p, "pointer is not the start of a live halfproc block"),
    }
}

#[cold]
fn check_small(set: &Set, idx: u32, m: &arena::PageMeta, addr: usize) {
    let start = ArenaHeader::page_addr(set.base() as usize, idx);
    let bs = m.block_size.load(Ordering::Relaxed) as usize;
    if bs == 0
        || (addr - start) % bs != 0
        || (addr - start) / bs >= m.capacity.load(Ordering::Relaxed) as usize
    {
        fatal_free(
            addr as *mut u8,
            "pointer is not the start of a halfproc block",
        );
    }
    // SAFETY: blocks are at least 16 bytes and the page is mapped.
    if unsafe { *((addr + 8) as *const usize) } == heap::FREED_MAGIC {
        fatal_free(addr as *mut u8, "double free (block already freed)");
    }
}

#[cold]
fn fatal_free(p: *mut u8, why: &str) -> ! {
    let msg = format!("halfproc_free({p:p}): {why}\n");
    // SAFETY: writing a buffer we own to stderr, then aborting.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::abort()
    }
}

/// Usable bytes of a live block (at least what was asked for).
///
/// # Safety
///
/// `p` must be a live block of this allocator.
pub unsafe fn usable_size(p: *const u8) -> usize {
    let Some(set) = Set::try_current() else {
        return 0;
    };
    let arena = &set.header().arena;
    let Some(idx) = arena.page_of(set.base() as usize, p as usize) else {
        return 0;
    };
    let m = arena.meta(idx);
    match m.kind.load(Ordering::Acquire) {
        KIND_SMALL => m.block_size.load(Ordering::Relaxed) as usize,
        KIND_LARGE => m.run.load(Ordering::Relaxed) as usize * PAGE_SIZE,
        _ => 0,
    }
}

/// Resizes a block (any member may resize any block). `realloc(null, n)` is
/// `malloc(n)`; `realloc(p, 0)` frees `p` and returns null (glibc's rule). On
/// failure `p` is untouched and null is returned with `ENOMEM`.
///
/// # Safety
///
/// `p` must be null or a live block of this allocator.
pub unsafe fn realloc(p: *mut u8, size: usize) -> *mut u8 {
    if p.is_null() {
        return malloc(size);
    }
    if size == 0 {
        // SAFETY: per the contract.
        unsafe { free(p) };
        return core::ptr::null_mut();
    }
    // SAFETY: per the contract.
    let old = unsafe { usable_size(p) };
    if old == 0 {
        fatal_free(p, "realloc of a pointer not allocated by halfproc");
    }
    let keep = match class_of(size) {
        Some(c) => old <= MAX_SMALL && CLASS_SIZES[c] as usize == old,
        None => old > MAX_SMALL && size.div_ceil(PAGE_SIZE) * PAGE_SIZE == old,
    };
    if keep {
        return p;
    }
    let q = malloc(size);
    if q.is_null() {
        return q;
    }
    // SAFETY: both blocks are live and distinct; copy what both hold.
    unsafe {
        core::ptr::copy_nonoverlapping(p, q, old.min(size));
        free(p);
    }
    q
}

/// Collects the calling thread's remote frees and returns its empty pages
/// (and its page cache) to the system.
pub fn collect() {
    if let Ok(set) = Set::get() {
        if heap::current_heap() != 0 {
            if let Some(h) = heap::thread_heap(set) {
                h.collect_all(set);
            }
        }
    }
}

/// Arena statistics of `set`.
pub fn stats(set: &Set) -> ArenaStats {
    set.header().arena.stats()
}

/// Heaps in use or abandoned (one per allocating thread).
pub fn heaps_in_use(set: &Set) -> usize {
    set.header().heaps.in_use()
}

/// A handle on the shared allocator for Rust collections.
///
/// Implements [`GlobalAlloc`] and `allocator_api2`'s `Allocator`, so
/// [`SharedBox`] and [`SharedVec`] keep their contents in the shared range.
///
/// # Examples
///
/// ```
/// use halfproc::{Set, SharedAlloc, SharedVec};
/// let set = Set::init_default().unwrap();
/// let mut v: SharedVec<u64> = SharedVec::new_in(SharedAlloc);
/// v.extend(0..1000);
/// assert!(set.contains(v.as_ptr() as usize));
/// assert_eq!(v.iter().sum::<u64>(), 499_500);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharedAlloc;

// SAFETY: blocks are valid until freed, at least `size` bytes and aligned
// as asked (aligned_alloc); free accepts exactly what alloc returned.
unsafe impl GlobalAlloc for SharedAlloc {
    /// # Safety
    ///
    /// As for [`GlobalAlloc::alloc`]: `layout` has a non-zero size.
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        aligned_alloc(layout.align(), layout.size())
    }

    /// # Safety
    ///
    /// As for [`GlobalAlloc::alloc_zeroed`]: `layout` has a non-zero size.
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = aligned_alloc(layout.align(), layout.size());
        if !p.is_null() {
            // SAFETY: fresh block of at least `size` bytes.
            unsafe { p.write_bytes(0, layout.size()) };
        }
        p
    }

    /// # Safety
    ///
    /// As for [`GlobalAlloc::dealloc`]: `ptr` came from this allocator and
    /// is not used afterwards.
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: per GlobalAlloc's contract `ptr` came from alloc.
        unsafe { free(ptr) }
    }

    /// # Safety
    ///
    /// As for [`GlobalAlloc::realloc`]: `ptr` came from this allocator with
    /// `layout`, and `new_size` is non-zero and does not overflow `isize`
    /// when rounded up to the alignment.
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= MIN_ALIGN {
            // SAFETY: per GlobalAlloc's contract.
            return unsafe { realloc(ptr, new_size) };
        }
        let q = aligned_alloc(layout.align(), new_size);
        if !q.is_null() {
            // SAFETY: both live; copy the smaller size; then free the old.
            unsafe {
                core::ptr::copy_nonoverlapping(ptr, q, layout.size().min(new_size));
                free(ptr);
            }
        }
        q
    }
}

// SAFETY: as for GlobalAlloc; the handle is a ZST so clones are the same
// allocator, and blocks stay valid until deallocated.
unsafe impl allocator_api2::alloc::Allocator for SharedAlloc {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, allocator_api2::alloc::AllocError> {
        let p = if layout.size() == 0 {
            // Zero-size requests get a dangling, aligned pointer.
            layout.align() as *mut u8
        } else {
            aligned_alloc(layout.align(), layout.size())
        };
        NonNull::new(p)
            .map(|p| NonNull::slice_from_raw_parts(p, layout.size()))
            .ok_or(allocator_api2::alloc::AllocError)
    }

    /// # Safety
    ///
    /// As for [`Allocator::deallocate`](allocator_api2::alloc::Allocator::deallocate):
    /// `ptr` was allocated by this allocator with `layout` and is not used
    /// afterwards.
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if layout.size() != 0 {
            // SAFETY: per Allocator's contract `ptr` came from allocate.
            unsafe { free(ptr.as_ptr()) }
        }
    }
}

/// A `Box` whose contents live in the shared range.
pub type SharedBox<T> = allocator_api2::boxed::Box<T, SharedAlloc>;
/// A `Vec` whose buffer lives in the shared range.
pub type SharedVec<T> = allocator_api2::vec::Vec<T, SharedAlloc>;

/// Boxes `value` in the shared range.
///
/// # Examples
///
/// ```
/// let set = halfproc::Set::init_default().unwrap();
/// let b = halfproc::alloc::shared_box(42u32).unwrap();
/// assert!(set.contains(&*b as *const u32 as usize));
/// ```
pub fn shared_box<T>(value: T) -> crate::Result<SharedBox<T>> {
    SharedBox::try_new_in(value, SharedAlloc)
        .map_err(|_| crate::Error::Exhausted("shared arena out of memory"))
}
