// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Per-thread heaps of the shared allocator, in the style of mimalloc.
//!
//! Every thread of every member that allocates owns one [`Heap`] (in the
//! shared range, found through a private thread-local pointer). A heap keeps,
//! per size class, a list of 64 KiB pages of that class. Each page has
//!
//! - `free`: the owner's free list (allocation pops, owner frees push),
//! - `bump`: blocks never handed out (the page is touched lazily),
//! - `thread_free`: an atomic stack where *other* threads and members push
//!   the blocks they free (one CAS, no lock).
//!
//! The owner collects `thread_free` when its free list runs dry. A page with
//! no free block moves to the heap's full list; a remote free into such a
//! page (seen through `in_full`) pushes the page on the heap's `delayed`
//! stack so the owner brings it back. A page whose blocks all came back goes
//! to a small per-heap cache, then to the arena, which returns it to the
//! system for every member.
//!
//! # Invariants
//!
//! - Only the owning thread touches a page's `UnsafeCell` fields and a heap's
//!   lists; other threads touch only `thread_free`, `in_full` and `delayed`.
//! - `used` = blocks handed out - blocks back on `free`; a page is retired
//!   only when `used == 0` after collecting `thread_free`.
//! - The `in_full` handshake: the owner stores 1 then re-reads
//!   `thread_free`; a remote freer pushes then swaps `in_full` (both SeqCst),
//!   so at least one side sees the other.
//!
//! Heaps of threads that exit cleanly (and of members that return) are
//! *abandoned* and adopted by the next new thread. A heap whose owner was
//! killed is left alone (its lists may be mid-update); its pages leak.

use core::cell::{Cell, UnsafeCell};
use core::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use super::arena::{ArenaHeader, PageMeta, KIND_CACHED, KIND_SMALL, NO_PAGE, PAGE_SIZE};
use super::size_class::{CLASS_SIZES, NUM_CLASSES};
use crate::set::Set;

/// Heaps in the table: at most this many allocating threads at once.
pub const MAX_HEAPS: usize = 1024;
const CACHE_PAGES: usize = 4;

const HEAP_FREE: u32 = 0;
const HEAP_OWNED: u32 = 1;
const HEAP_ABANDONED: u32 = 2;

/// Second word of a free block in debug builds (double-free detection).
pub(crate) const FREED_MAGIC: usize = 0xfee1_dead_f5ee_b10c;

/// One thread's heap (shared range).
#[repr(C)]
pub(crate) struct Heap {
    state: AtomicU32,
    owner: AtomicI32,
    /// Stack of page indices (linked through `PageMeta::delayed_next`).
    delayed: AtomicU32,
    pages: [UnsafeCell<u32>; NUM_CLASSES],
    full: [UnsafeCell<u32>; NUM_CLASSES],
    cache: UnsafeCell<[u32; CACHE_PAGES]>,
    ncache: UnsafeCell<u32>,
}

/// All heaps (shared range).
#[repr(C)]
pub(crate) struct HeapTable {
    heaps: [Heap; MAX_HEAPS],
    initialized: AtomicU32,
}

// SAFETY: the UnsafeCell fields are owner-only (see the module invariants).
unsafe impl Sync for Heap {}

thread_local! {
    static HEAP: Cell<usize> = const { Cell::new(0) };
    static GUARD: HeapGuard = const { HeapGuard };
}

struct HeapGuard;

impl Drop for HeapGuard {
    fn drop(&mut self) {
        abandon_thread_heap();
    }
}

/// Forgets the thread's heap without abandoning it (in a fork child: the heap
/// belongs to the parent's thread).
pub(crate) fn forget_thread_heap() {
    let _ = HEAP.try_with(|h| h.set(0));
}

/// Abandons the calling thread's heap so another thread can adopt it.
pub(crate) fn abandon_thread_heap() {
    let h = HEAP.try_with(|h| h.replace(0)).unwrap_or(0);
    if h != 0 {
        // SAFETY: a non-zero HEAP is a heap of the table this thread owns.
        let heap = unsafe { &*(h as *const Heap) };
        heap.owner.store(0, Ordering::Relaxed);
        heap.state.store(HEAP_ABANDONED, Ordering::Release);
    }
}

/// The calling thread's heap address, or 0 if it has none.
#[inline(always)]
pub(crate) fn current_heap() -> usize {
    HEAP.try_with(|h| h.get()).unwrap_or(0)
}

/// The calling thread's heap, acquiring one on first use.
#[inline(always)]
pub(crate) fn thread_heap(set: &Set) -> Option<&'static Heap> {
    let h = current_heap();
    if h != 0 {
        // SAFETY: a non-zero HEAP is a heap of the table, alive for the set.
        return Some(unsafe { &*(h as *const Heap) });
    }
    acquire_heap(set)
}

#[cold]
fn acquire_heap(set: &Set) -> Option<&'static Heap> {
    let table: &'static HeapTable = &set.header().heaps;
    table.init_once();
    let tid = crate::identity::current_tid();
    let claim = |from: u32| {
        table.heaps.iter().find(|h| {
            h.state.load(Ordering::Relaxed) == from
                && h.state
                    .compare_exchange(from, HEAP_OWNED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
        })
    };
    let heap = claim(HEAP_ABANDONED).or_else(|| claim(HEAP_FREE))?;
    heap.owner.store(tid, Ordering::Relaxed);
    HEAP.try_with(|h| h.set(heap as *const Heap as usize))
        .ok()?;
    // Register the thread-exit hook (ignored while TLS is being torn down).
    let _ = GUARD.try_with(|_| ());
    Some(heap)
}

impl HeapTable {
    fn init_once(&self) {
        if self.initialized.load(Ordering::Acquire) == 2 {
            return;
        }
        if self
            .initialized
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Acquire)
            .is_ok()
        {
            for h in self.heaps.iter() {
                for c in 0..NUM_CLASSES {
                    // SAFETY: heaps are FREE and unowned until initialized is 2.
                    unsafe {
                        *h.pages[c].get() = NO_PAGE;
                        *h.full[c].get() = NO_PAGE;
                    }
                }
                h.delayed.store(NO_PAGE, Ordering::Relaxed);
            }
            self.initialized.store(2, Ordering::Release);
            halfproc_sys::futex::wake(&self.initialized, i32::MAX);
        } else {
            while self.initialized.load(Ordering::Acquire) != 2 {
                halfproc_sys::futex::wait(
                    &self.initialized,
                    1,
                    Some(core::time::Duration::from_millis(10)),
                );
            }
        }
    }

    /// Heaps currently owned or abandoned (statistics).
    pub(crate) fn in_use(&self) -> usize {
        self.heaps
            .iter()
            .filter(|h| h.state.load(Ordering::Relaxed) != HEAP_FREE)
            .count()
    }
}

/// Owner-only accessors of a page's cells.
macro_rules! cell {
    ($m:expr, $f:ident) => {
        // SAFETY: the caller is the owner of the page (module invariant).
        unsafe { &mut *$m.$f.get() }
    };
}

impl Heap {
    #[inline(always)]
    fn addr(&self) -> usize {
        self as *const Heap as usize
    }

    /// Allocates one block of class `class`.
    #[inline(always)]
    pub(crate) fn malloc_small(&self, set: &Set, class: usize) -> *mut u8 {
        let arena = &set.header().arena;
        // SAFETY: owner-only field of our own heap.
        let idx = unsafe { *self.pages[class].get() };
        if idx != NO_PAGE {
            let m = arena.meta(idx);
            let free = cell!(m, free);
            if *free != 0 {
                let b = *free;
                // SAFETY: `b` is a free block of this page: its first word
                // is the next link.
                *free = unsafe { *(b as *const usize) };
                *cell!(m, used) += 1;
                if cfg!(debug_assertions) {
                    // SAFETY: blocks are at least 16 bytes.
                    unsafe { *((b + 8) as *mut usize) = 0 };
                }
                return b as *mut u8;
            }
        }
        self.malloc_generic(set, arena, class)
    }

    #[cold]
    fn malloc_generic(&self, set: &Set, arena: &ArenaHeader, class: usize) -> *mut u8 {
        let base = set.base() as usize;
        self.drain_delayed(arena);
        // SAFETY: owner-only field.
        let mut idx = unsafe { *self.pages[class].get() };
        while idx != NO_PAGE {
            let m = arena.meta(idx);
            let next = *cell!(m, next);
            collect(m);
            if *cell!(m, free) != 0 {
                self.move_to_front(arena, class, idx);
                return self.malloc_small(set, class);
            }
            let bump = cell!(m, bump);
            if *bump < m.capacity.load(Ordering::Relaxed) {
                let b = ArenaHeader::page_addr(base, idx)
                    + (*bump as usize) * CLASS_SIZES[class] as usize;
                *bump += 1;
                *cell!(m, used) += 1;
                self.move_to_front(arena, class, idx);
                return b as *mut u8;
            }
            // Full: park it on the full list unless a remote free raced in.
            m.in_full.store(1, Ordering::SeqCst);
            if m.thread_free.load(Ordering::SeqCst) != 0 {
                m.in_full.store(0, Ordering::Relaxed);
                continue; // collect again
            }
            self.unlink(arena, &self.pages[class], idx);
            *cell!(m, on_full) = true;
            self.push_front(arena, &self.full[class], idx);
            idx = next;
        }
        // No page with room: a fresh one.
        let Some(idx) = self.fresh_page(set, arena, class) else {
            return core::ptr::null_mut();
        };
        let m = arena.meta(idx);
        *cell!(m, bump) = 1;
        *cell!(m, used) = 1;
        self.push_front(arena, &self.pages[class], idx);
        ArenaHeader::page_addr(base, idx) as *mut u8
    }

    /// Brings back pages that remote frees took off the full lists.
    fn drain_delayed(&self, arena: &ArenaHeader) {
        if self.delayed.load(Ordering::Relaxed) == NO_PAGE {
            return;
        }
        let mut idx = self.delayed.swap(NO_PAGE, Ordering::Acquire);
        while idx != NO_PAGE {
            let m = arena.meta(idx);
            let next = m.delayed_next.load(Ordering::Relaxed);
            let on_full = cell!(m, on_full);
            if *on_full {
                let class = m.class.load(Ordering::Relaxed) as usize;
                self.unlink(arena, &self.full[class], idx);
                *on_full = false;
                self.push_front(arena, &self.pages[class], idx);
            }
            idx = next;
        }
    }

    fn fresh_page(&self, set: &Set, arena: &ArenaHeader, class: usize) -> Option<u32> {
        let cache = cell!(self, cache);
        let n = cell!(self, ncache);
        let idx = if *n > 0 {
            *n -= 1;
            cache[*n as usize]
        } else {
            arena.alloc_pages(1, 1)?
        };
        let _ = set;
        let m = arena.meta(idx);
        let bs = CLASS_SIZES[class];
        m.class.store(class as u32, Ordering::Relaxed);
        m.block_size.store(bs, Ordering::Relaxed);
        m.capacity.store(PAGE_SIZE as u32 / bs, Ordering::Relaxed);
        m.thread_free.store(0, Ordering::Relaxed);
        m.in_full.store(0, Ordering::Relaxed);
        m.heap.store(self.addr(), Ordering::Relaxed);
        *cell!(m, used) = 0;
        *cell!(m, bump) = 0;
        *cell!(m, free) = 0;
        *cell!(m, on_full) = false;
        m.kind.store(KIND_SMALL, Ordering::Release);
        Some(idx)
    }

    /// Frees a block of a page this heap owns.
    #[inline(always)]
    pub(crate) fn free_local(&self, set: &Set, idx: u32, m: &PageMeta, p: usize) {
        let free = cell!(m, free);
        // SAFETY: `p` is a block of this page being freed: we may reuse it.
        unsafe {
            *(p as *mut usize) = *free;
            if cfg!(debug_assertions) {
                *((p + 8) as *mut usize) = FREED_MAGIC;
            }
        }
        *free = p;
        let used = cell!(m, used);
        *used -= 1;
        if *cell!(m, on_full) || *used == 0 {
            self.free_local_slow(set, idx, m);
        }
    }

    #[cold]
    fn free_local_slow(&self, set: &Set, idx: u32, m: &PageMeta) {
        let arena = &set.header().arena;
        let class = m.class.load(Ordering::Relaxed) as usize;
        let on_full = cell!(m, on_full);
        if *on_full {
            m.in_full.store(0, Ordering::Relaxed);
            self.unlink(arena, &self.full[class], idx);
            *on_full = false;
            self.push_front(arena, &self.pages[class], idx);
        }
        // SAFETY: owner-only field.
        let head = unsafe { *self.pages[class].get() };
        if *cell!(m, used) == 0 && (head != idx || *cell!(m, next) != NO_PAGE) {
            collect(m);
            if *cell!(m, used) == 0 {
                self.unlink(arena, &self.pages[class], idx);
                self.retire(set, arena, idx);
            }
        }
    }

    /// An empty page leaves the heap: into the cache or back to the arena.
    fn retire(&self, set: &Set, arena: &ArenaHeader, idx: u32) {
        let m = arena.meta(idx);
        let cache = cell!(self, cache);
        let n = cell!(self, ncache);
        if (*n as usize) < CACHE_PAGES {
            m.kind.store(KIND_CACHED, Ordering::Relaxed);
            cache[*n as usize] = idx;
            *n += 1;
        } else {
            // SAFETY: the page is empty (used == 0, thread_free collected) and
            // unlinked from every list.
            unsafe { arena.free_pages(set, idx, 1) };
        }
    }

    fn move_to_front(&self, arena: &ArenaHeader, class: usize, idx: u32) {
        // SAFETY: owner-only field.
        if unsafe { *self.pages[class].get() } != idx {
            self.unlink(arena, &self.pages[class], idx);
            self.push_front(arena, &self.pages[class], idx);
        }
    }

    fn push_front(&self, arena: &ArenaHeader, head: &UnsafeCell<u32>, idx: u32) {
        // SAFETY: owner-only list head.
        let h = unsafe { &mut *head.get() };
        let m = arena.meta(idx);
        *cell!(m, prev) = NO_PAGE;
        *cell!(m, next) = *h;
        if *h != NO_PAGE {
            *cell!(arena.meta(*h), prev) = idx;
        }
        *h = idx;
    }

    fn unlink(&self, arena: &ArenaHeader, head: &UnsafeCell<u32>, idx: u32) {
        let m = arena.meta(idx);
        let (prev, next) = (*cell!(m, prev), *cell!(m, next));
        if prev != NO_PAGE {
            *cell!(arena.meta(prev), next) = next;
        } else {
            // SAFETY: owner-only list head.
            unsafe { *head.get() = next };
        }
        if next != NO_PAGE {
            *cell!(arena.meta(next), prev) = prev;
        }
        *cell!(m, prev) = NO_PAGE;
        *cell!(m, next) = NO_PAGE;
    }

    /// Walks every list once: collects remote frees and retires empty pages.
    pub(crate) fn collect_all(&self, set: &Set) {
        let arena = &set.header().arena;
        self.drain_delayed(arena);
        for class in 0..NUM_CLASSES {
            // SAFETY: owner-only field.
            let mut idx = unsafe { *self.pages[class].get() };
            while idx != NO_PAGE {
                let m = arena.meta(idx);
                let next = *cell!(m, next);
                collect(m);
                if *cell!(m, used) == 0 {
                    self.unlink(arena, &self.pages[class], idx);
                    self.retire(set, arena, idx);
                }
                idx = next;
            }
        }
        // Give the cache back too.
        let n = cell!(self, ncache);
        let cache = cell!(self, cache);
        while *n > 0 {
            *n -= 1;
            // SAFETY: cached pages are empty and on no list.
            unsafe { arena.free_pages(set, cache[*n as usize], 1) };
        }
    }
}

/// Moves the page's remote frees onto its free list (owner only).
#[inline]
fn collect(m: &PageMeta) {
    if m.thread_free.load(Ordering::Relaxed) == 0 {
        return;
    }
    let head = m.thread_free.swap(0, Ordering::Acquire);
    let mut n = 1u32;
    let mut tail = head;
    let free = cell!(m, free);
    // SAFETY: the stack holds freed blocks of this page; their first word is
    // the link, written before the SeqCst CAS that published them.
    unsafe {
        while *(tail as *const usize) != 0 {
            tail = *(tail as *const usize);
            n += 1;
        }
        *(tail as *mut usize) = *free;
    }
    *free = head;
    *cell!(m, used) -= n;
}

/// Frees a block of a page owned by another heap (any thread, any member).
pub(crate) fn free_remote(idx: u32, m: &PageMeta, p: usize) {
    if cfg!(debug_assertions) {
        // SAFETY: `p` is a live block being freed, at least 16 bytes.
        unsafe { *((p + 8) as *mut usize) = FREED_MAGIC };
    }
    let mut head = m.thread_free.load(Ordering::Relaxed);
    loop {
        // SAFETY: the block is ours until the CAS publishes it.
        unsafe { *(p as *mut usize) = head };
        match m
            .thread_free
            .compare_exchange_weak(head, p, Ordering::SeqCst, Ordering::Relaxed)
        {
            Ok(_) => break,
            Err(h) => head = h,
        }
    }
    if m.in_full.load(Ordering::SeqCst) != 0 && m.in_full.swap(0, Ordering::SeqCst) != 0 {
        let heap = m.heap.load(Ordering::Acquire);
        if heap != 0 {
            // SAFETY: heap addresses stored in pages are heaps of the table.
            let heap = unsafe { &*(heap as *const Heap) };
            let mut top = heap.delayed.load(Ordering::Relaxed);
            loop {
                m.delayed_next.store(top, Ordering::Relaxed);
                match heap.delayed.compare_exchange_weak(
                    top,
                    idx,
                    Ordering::Release,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(t) => top = t,
                }
            }
        }
    }
}

/// Whether the page's owning heap is the calling thread's.
#[inline(always)]
pub(crate) fn owned_here(m: &PageMeta) -> Option<&'static Heap> {
    let h = current_heap();
    if h != 0 && m.heap.load(Ordering::Relaxed) == h {
        // SAFETY: `h` is this thread's heap.
        Some(unsafe { &*(h as *const Heap) })
    } else {
        None
    }
}
