// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The K&R allocator (Kernighan & Ritchie, section 8.7) over the shared
//! arena, behind one cross-member lock: the allocator the half-process paper
//! used, and the measured bottleneck the runtime's allocator replaces.
//!
//! Kept only as a benchmark baseline. It never returns memory to the system.
//!
//! # Examples
//!
//! ```
//! let set = halfproc::Set::init_default().unwrap();
//! let kr = halfproc::alloc::kr::KrAllocator::new(set).unwrap();
//! let p = kr.malloc(100);
//! assert!(set.contains(p as usize));
//! // SAFETY: `p` came from this allocator.
//! unsafe { kr.free(p) };
//! ```

use core::cell::UnsafeCell;

use crate::error::{Error, Result};
use crate::set::Set;
use crate::sync::mutex::RawMutex;

#[repr(C)]
struct Header {
    next: *mut Header,
    /// Size of this block in units (one unit = one header, 16 bytes).
    size: usize,
}

const UNIT: usize = core::mem::size_of::<Header>();
/// Units asked from the arena at a time (64 KiB).
const NALLOC: usize = (64 << 10) / UNIT;

/// A K&R free-list allocator living in the shared range.
#[repr(C)]
pub struct KrAllocator {
    lock: RawMutex,
    state: UnsafeCell<KrState>,
}

#[repr(C)]
struct KrState {
    base: Header,
    freep: *mut Header,
}

// SAFETY: `state` is only touched under `lock`, a cross-member mutex.
unsafe impl Sync for KrAllocator {}

impl KrAllocator {
    /// Creates an allocator in the shared range of `set`.
    pub fn new(set: &Set) -> Result<&'static KrAllocator> {
        let _ = set;
        let p = crate::alloc::malloc(core::mem::size_of::<KrAllocator>()) as *mut KrAllocator;
        if p.is_null() {
            return Err(Error::Exhausted("shared arena out of memory"));
        }
        // SAFETY: `p` is a fresh, aligned block large enough for the struct.
        unsafe {
            p.write(KrAllocator {
                lock: RawMutex::new(),
                state: UnsafeCell::new(KrState {
                    base: Header {
                        next: core::ptr::null_mut(),
                        size: 0,
                    },
                    freep: core::ptr::null_mut(),
                }),
            });
            Ok(&*p)
        }
    }

    /// Allocates `nbytes` (16-byte aligned); null when out of memory.
    pub fn malloc(&self, nbytes: usize) -> *mut u8 {
        let Some(nunits) = nbytes.checked_add(UNIT - 1).map(|n| n / UNIT + 1) else {
            return core::ptr::null_mut();
        };
        let _g = self.lock.lock_recover();
        // SAFETY: we hold the lock, which guards the state.
        let st = unsafe { &mut *self.state.get() };
        // SAFETY: the free list holds headers in arena blocks we own; this is
        // the book's algorithm verbatim.
        unsafe {
            let base = &mut st.base as *mut Header;
            let mut prevp = st.freep;
            if prevp.is_null() {
                (*base).next = base;
                (*base).size = 0;
                st.freep = base;
                prevp = base;
            }
            let mut p = (*prevp).next;
            loop {
                if (*p).size >= nunits {
                    if (*p).size == nunits {
                        (*prevp).next = (*p).next;
                    } else {
                        (*p).size -= nunits;
                        p = p.add((*p).size);
                        (*p).size = nunits;
                    }
                    st.freep = prevp;
                    return p.add(1) as *mut u8;
                }
                if p == st.freep {
                    p = match self.morecore(st, nunits) {
                        Some(p) => p,
                        None => return core::ptr::null_mut(),
                    };
                }
                prevp = p;
                p = (*p).next;
            }
        }
    }

    /// Gets more memory from the arena (lock held).
    fn morecore(&self, st: &mut KrState, nu: usize) -> Option<*mut Header> {
        let nu = nu.max(NALLOC);
        let cp = crate::alloc::malloc(nu * UNIT) as *mut Header;
        if cp.is_null() {
            return None;
        }
        // SAFETY: `cp` is a fresh block of `nu` units.
        unsafe {
            (*cp).size = nu;
            self.insert(st, cp);
        }
        Some(st.freep)
    }

    /// Frees a block of this allocator.
    ///
    /// # Safety
    ///
    /// `ap` must come from [`KrAllocator::malloc`] and not be freed twice.
    pub unsafe fn free(&self, ap: *mut u8) {
        if ap.is_null() {
            return;
        }
        let _g = self.lock.lock_recover();
        // SAFETY: we hold the lock; `ap` is preceded by its header.
        unsafe { self.insert(&mut *self.state.get(), (ap as *mut Header).sub(1)) }
    }

    /// Inserts block `bp` into the address-ordered free list, coalescing.
    ///
    /// # Safety
    ///
    /// Lock held; `bp` is a block header not on the list.
    unsafe fn insert(&self, st: &mut KrState, bp: *mut Header) {
        // SAFETY: the book's free(); every pointer is a header on the list.
        unsafe {
            let mut p = st.freep;
            while !(bp > p && bp < (*p).next) {
                if p >= (*p).next && (bp > p || bp < (*p).next) {
                    break;
                }
                p = (*p).next;
            }
            if bp.add((*bp).size) == (*p).next {
                (*bp).size += (*(*p).next).size;
                (*bp).next = (*(*p).next).next;
            } else {
                (*bp).next = (*p).next;
            }
            if p.add((*p).size) == bp {
                (*p).size += (*bp).size;
                (*p).next = (*bp).next;
            } else {
                (*p).next = bp;
            }
            st.freep = p;
        }
    }
}
