// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The set-wide page arena: 64 KiB pages handed to heaps and large objects.
//!
//! The arena is the shared range mapping of the set. A bitmap (one bit per
//! page, under one cross-member [`RawMutex`]) records which pages are taken;
//! one [`PageMeta`] per page describes it. Both live right after the
//! [`crate::set::SetHeader`], so a pointer maps to its page's metadata by
//! arithmetic: `meta[(ptr - base) >> 16]`, in every member.
//!
//! A page goes back to the system *before* its bit is cleared
//! ([`crate::Set`]'s release: a hole punched in the memfd, or
//! `MADV_DONTNEED` on the set's mm), so free pages read as zeros and cost no
//! memory in any member.
//!
//! # Invariants
//!
//! - A page whose bit is clear has no live object and is zero-filled.
//! - `PageMeta::kind` is `KIND_FREE` exactly when the page's bit is clear,
//!   except transiently under the arena lock.
//!
//! Lock order: heap (owner thread only) -> arena lock.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::error::{Error, Result};
use crate::set::{Set, SetHeader};
use crate::sync::mutex::RawMutex;

/// Arena page size: 64 KiB.
pub const PAGE_SIZE: usize = 64 << 10;
/// `log2(PAGE_SIZE)`.
pub const PAGE_SHIFT: u32 = 16;

/// "No page" in page-index links.
pub(crate) const NO_PAGE: u32 = u32::MAX;

pub(crate) const KIND_FREE: u32 = 0;
pub(crate) const KIND_SMALL: u32 = 1;
pub(crate) const KIND_LARGE: u32 = 2;
pub(crate) const KIND_LARGE_TAIL: u32 = 3;
pub(crate) const KIND_RESERVED: u32 = 4;
pub(crate) const KIND_CACHED: u32 = 5;

/// Metadata of one arena page (shared range).
///
/// Atomic fields may be read by any member; `UnsafeCell` fields belong to the
/// owning heap's thread (small pages) or to whoever holds the allocation
/// (large runs).
#[repr(C, align(128))]
pub(crate) struct PageMeta {
    pub(crate) kind: AtomicU32,
    pub(crate) class: AtomicU32,
    pub(crate) block_size: AtomicU32,
    pub(crate) capacity: AtomicU32,
    /// Owning heap (address in the shared range), 0 for none.
    pub(crate) heap: AtomicUsize,
    /// Remote frees: a lock-free stack of blocks (address of the first).
    pub(crate) thread_free: AtomicUsize,
    /// 1 while the owner keeps the page on its full list.
    pub(crate) in_full: AtomicU32,
    /// Large runs: number of pages; tails: index of the head page.
    pub(crate) run: AtomicU32,
    /// Large runs: bytes requested.
    pub(crate) large_size: AtomicU64,
    /// Owner-only: blocks handed out and not yet given back to the owner.
    pub(crate) used: UnsafeCell<u32>,
    /// Owner-only: first never-used block index.
    pub(crate) bump: UnsafeCell<u32>,
    /// Owner-only: free list (address of the first block, 0 = empty).
    pub(crate) free: UnsafeCell<usize>,
    /// Owner-only: list links (page indices) in the heap's class or full list.
    pub(crate) next: UnsafeCell<u32>,
    pub(crate) prev: UnsafeCell<u32>,
    /// Owner-only: the page sits on the heap's full list.
    pub(crate) on_full: UnsafeCell<bool>,
    /// Link of the heap's delayed stack (pages a remote free took off "full").
    pub(crate) delayed_next: AtomicU32,
}

const _: () = assert!(core::mem::size_of::<PageMeta>() == 128);

/// Arena bookkeeping in the set header.
#[repr(C)]
pub(crate) struct ArenaHeader {
    lock: RawMutex,
    npages: AtomicU64,
    bitmap: AtomicUsize,
    meta: AtomicUsize,
    first_data_page: AtomicU32,
    hint: AtomicU32,
    /// Pages currently taken (statistics).
    pub(crate) pages_in_use: AtomicU64,
    /// Pages ever returned to the system (statistics).
    pub(crate) pages_released: AtomicU64,
}

/// Statistics of the arena.
///
/// # Examples
///
/// ```
/// let set = halfproc::Set::init_default().unwrap();
/// let s = halfproc::alloc::stats(set);
/// assert!(s.pages_total > 0);
/// assert!(s.pages_in_use <= s.pages_total);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaStats {
    /// Data pages in the arena.
    pub pages_total: u64,
    /// Pages held by heaps or large objects.
    pub pages_in_use: u64,
    /// Pages returned to the operating system so far.
    pub pages_released: u64,
}

impl ArenaHeader {
    /// Lays out bitmap and metadata after the header and reserves them.
    pub(crate) fn init(&self, base: usize, size: u64) -> Result<()> {
        let npages = (size / PAGE_SIZE as u64) as usize;
        let hdr_end = base + core::mem::size_of::<SetHeader>();
        let bitmap = round_up(hdr_end, 64);
        let words = npages.div_ceil(64);
        let meta = round_up(bitmap + words * 8, 64);
        let data = round_up(meta + npages * core::mem::size_of::<PageMeta>(), PAGE_SIZE);
        let first = (data - base) / PAGE_SIZE;
        if first + 16 > npages {
            return Err(Error::InvalidArgument(
                "arena too small for its own metadata",
            ));
        }
        self.npages.store(npages as u64, Ordering::Relaxed);
        self.bitmap.store(bitmap, Ordering::Relaxed);
        self.meta.store(meta, Ordering::Relaxed);
        self.first_data_page.store(first as u32, Ordering::Relaxed);
        self.hint.store(first as u32, Ordering::Relaxed);
        for p in 0..first {
            self.set_bit(p, true);
            self.meta(p as u32)
                .kind
                .store(KIND_RESERVED, Ordering::Relaxed);
        }
        Ok(())
    }

    pub(crate) fn stats(&self) -> ArenaStats {
        let first = self.first_data_page.load(Ordering::Relaxed) as u64;
        ArenaStats {
            pages_total: self.npages.load(Ordering::Relaxed) - first,
            pages_in_use: self.pages_in_use.load(Ordering::Relaxed),
            pages_released: self.pages_released.load(Ordering::Relaxed),
        }
    }

    #[inline(always)]
    fn words(&self) -> &[AtomicU64] {
        let n = (self.npages.load(Ordering::Relaxed) as usize).div_ceil(64);
        // SAFETY: init() placed `n` zero-initialised u64 words at `bitmap`,
        // inside the arena mapping, which lives as long as the set.
        unsafe {
            core::slice::from_raw_parts(self.bitmap.load(Ordering::Relaxed) as *const AtomicU64, n)
        }
    }

    fn set_bit(&self, p: usize, on: bool) {
        let w = &self.words()[p / 64];
        let m = 1u64 << (p % 64);
        if on {
            w.fetch_or(m, Ordering::Relaxed);
        } else {
            w.fetch_and(!m, Ordering::Relaxed);
        }
    }

    fn bit(&self, p: usize) -> bool {
        self.words()[p / 64].load(Ordering::Relaxed) & (1 << (p % 64)) != 0
    }

    /// The metadata of page `idx`.
    #[inline(always)]
    pub(crate) fn meta(&self, idx: u32) -> &PageMeta {
        // SAFETY: init() laid out `npages` zeroed PageMeta at `meta`; callers
        // pass indices below npages (page_of checks the range).
        unsafe { &*(self.meta.load(Ordering::Relaxed) as *const PageMeta).add(idx as usize) }
    }

    /// The page index of `addr` if it is a data page of the arena.
    #[inline(always)]
    pub(crate) fn page_of(&self, base: usize, addr: usize) -> Option<u32> {
        let idx = addr.wrapping_sub(base) >> PAGE_SHIFT;
        if idx < self.npages.load(Ordering::Relaxed) as usize
            && idx >= self.first_data_page.load(Ordering::Relaxed) as usize
        {
            Some(idx as u32)
        } else {
            None
        }
    }

    /// Takes `n` contiguous free pages whose first index is a multiple of
    /// `align_pages`; returns the first index.
    pub(crate) fn alloc_pages(&self, n: usize, align_pages: usize) -> Option<u32> {
        let npages = self.npages.load(Ordering::Relaxed) as usize;
        let first = self.first_data_page.load(Ordering::Relaxed) as usize;
        if n == 0 || n > npages - first {
            return None;
        }
        let _g = self.lock.lock_recover();
        let hint = (self.hint.load(Ordering::Relaxed) as usize).clamp(first, npages);
        let found = self
            .scan(hint, npages, n, align_pages)
            .or_else(|| self.scan(first, hint, n, align_pages))?;
        for p in found..found + n {
            self.set_bit(p, true);
        }
        self.hint.store((found + n) as u32, Ordering::Relaxed);
        self.pages_in_use.fetch_add(n as u64, Ordering::Relaxed);
        Some(found as u32)
    }

    /// First fit in `[from, to)` for `n` free pages aligned to `align`.
    fn scan(&self, from: usize, to: usize, n: usize, align: usize) -> Option<usize> {
        let words = self.words();
        let npages = self.npages.load(Ordering::Relaxed) as usize;
        let mut p = round_up(from, align.max(1));
        while p < to && p + n <= npages {
            // Skip full words quickly.
            if p % 64 == 0 && words[p / 64].load(Ordering::Relaxed) == u64::MAX {
                p += 64;
                p = round_up(p, align.max(1));
                continue;
            }
            match (p..p + n).find(|&q| self.bit(q)) {
                None => return Some(p),
                Some(taken) => p = round_up(taken + 1, align.max(1)),
            }
        }
        None
    }

    /// Returns `n` pages starting at `idx` to the arena, releasing their
    /// memory to the system first.
    ///
    /// # Safety
    ///
    /// The pages must have been taken with [`alloc_pages`](Self::alloc_pages)
    /// and hold no live object.
    pub(crate) unsafe fn free_pages(&self, set: &Set, idx: u32, n: usize) {
        let base = set.base() as usize;
        for p in idx..idx + n as u32 {
            let m = self.meta(p);
            m.kind.store(KIND_FREE, Ordering::Relaxed);
            m.heap.store(0, Ordering::Relaxed);
            m.thread_free.store(0, Ordering::Relaxed);
            m.in_full.store(0, Ordering::Relaxed);
            m.run.store(0, Ordering::Relaxed);
        }
        // SAFETY: per the contract the pages are ours and unused; releasing
        // before clearing the bits keeps "free pages are zero" true.
        unsafe { set.release(base + (idx as usize) * PAGE_SIZE, n * PAGE_SIZE) };
        self.pages_released.fetch_add(n as u64, Ordering::Relaxed);
        let _g = self.lock.lock_recover();
        for p in idx as usize..idx as usize + n {
            debug_assert!(self.bit(p), "double free of arena page {p}");
            self.set_bit(p, false);
        }
        if (idx as usize) < self.hint.load(Ordering::Relaxed) as usize {
            self.hint.store(idx, Ordering::Relaxed);
        }
        self.pages_in_use.fetch_sub(n as u64, Ordering::Relaxed);
    }

    /// Address of page `idx`.
    #[inline(always)]
    pub(crate) fn page_addr(base: usize, idx: u32) -> usize {
        base + ((idx as usize) << PAGE_SHIFT)
    }
}

// SAFETY: the UnsafeCell fields follow the ownership rule in the type docs;
// everything else is atomic.
unsafe impl Sync for PageMeta {}

#[inline(always)]
pub(crate) const fn round_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding() {
        assert_eq!(round_up(0, 64), 0);
        assert_eq!(round_up(1, 64), 64);
        assert_eq!(round_up(64, 64), 64);
        assert_eq!(round_up(65, 3), 66);
    }
}
