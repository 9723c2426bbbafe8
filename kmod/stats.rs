// SPDX-License-Identifier: GPL-2.0

//! Counters that survive emulation: what a set costs in events, not time.
//!
//! Under QEMU TCG absolute times say nothing about hardware, but counts do.
//! Each set counts, from its creation, in debugfs
//! (`/sys/kernel/debug/halfproc/<set id>/`), and the module sums every set in
//! `/sys/kernel/debug/halfproc/total/` (a user-space benchmark that runs
//! alone reads deltas there):
//!
//! - `switches`: address-space switches to the set mm (one per
//!   meta-operation on the range: mmap, munmap, mprotect, madvise, ...);
//! - `flushes`: notifier calls that flushed the members (every unmap or
//!   downgrade in the set mm: munmap, mprotect, reclaim, migration, ...);
//! - `member_flushes`: member mms flushed by them;
//! - `flush_cpus`: CPUs those member flushes reached (each member mm's
//!   `mm_cpumask()` when flushed: CPUs that loaded it and may still hold it);
//! - `ipis`: of those, the CPUs other than the flushing one: the IPIs x86's
//!   `flush_tlb_mm_range()` sends (page tables may be freed, so lazy CPUs
//!   are included);
//! - `batched`: notifier calls that added the members to a flush that
//!   reclaim or migration deferred (`TTU_BATCH_FLUSH`), instead of flushing
//!   them: one per unmapped page;
//! - `batched_members`: member mms added to such deferred flushes (a new
//!   TLB generation and their CPUs joined to the batch; no flush, no IPI);
//! - `batched_cpus`: CPUs in those mms' `mm_cpumask()` when added: the
//!   batch's one flush reaches them (at most once per batch each);
//! - `pinned`: pages pinned by `dmread()`/`dmwrite()` of members.
//!
//! The counts are statistics: relaxed atomics, a CPU mask read while it may
//! change.

use core::ptr::null_mut;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use kernel::{bindings, c_str, ffi::c_char, ffi::c_void, fmt, prelude::*, str::CString};

/// A `struct dentry`, only passed back to debugfs (the bindings have no
/// usable type for it).
pub(crate) type Dentry = c_void;

// Exported by fs/debugfs; the Rust bindings of this kernel do not include
// <linux/debugfs.h>.  Each accepts an error pointer as parent and does
// nothing with one, so a kernel without debugfs just has no files.
extern "C" {
    fn debugfs_create_dir(name: *const c_char, parent: *mut Dentry) -> *mut Dentry;
    fn debugfs_create_u64(
        name: *const c_char,
        mode: bindings::umode_t,
        parent: *mut Dentry,
        value: *mut u64,
    );
    fn debugfs_remove(dentry: *mut Dentry);
}

/// One set's counters (or the module's totals).
pub(crate) struct Counters {
    switches: AtomicU64,
    flushes: AtomicU64,
    member_flushes: AtomicU64,
    flush_cpus: AtomicU64,
    ipis: AtomicU64,
    batched: AtomicU64,
    batched_members: AtomicU64,
    batched_cpus: AtomicU64,
    pinned: AtomicU64,
}

/// Every set's counts, summed.
static TOTAL: Counters = Counters::new();

/// `/sys/kernel/debug/halfproc`, while the module is loaded.
static ROOT: AtomicPtr<Dentry> = AtomicPtr::new(null_mut());

fn bump(own: &AtomicU64, total: &AtomicU64, n: u64) {
    own.fetch_add(n, Ordering::Relaxed);
    total.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    pub(crate) const fn new() -> Self {
        Counters {
            switches: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            member_flushes: AtomicU64::new(0),
            flush_cpus: AtomicU64::new(0),
            ipis: AtomicU64::new(0),
            batched: AtomicU64::new(0),
            batched_members: AtomicU64::new(0),
            batched_cpus: AtomicU64::new(0),
            pinned: AtomicU64::new(0),
        }
    }

    /// A switch to the set mm.
    pub(crate) fn switched(&self) {
        bump(&self.switches, &TOTAL.switches, 1);
    }

    /// One notifier call that flushes the members.
    pub(crate) fn flushed(&self) {
        bump(&self.flushes, &TOTAL.flushes, 1);
    }

    /// A flush of member `mm`, counted before it is sent.
    ///
    /// # Safety
    ///
    /// `mm` must be a live mm.
    pub(crate) unsafe fn member_flush(&self, mm: *mut bindings::mm_struct) {
        let mut remote = 0u32;
        // SAFETY: `mm` is live (caller); the helper only reads its CPU mask.
        let cpus = unsafe { bindings::halfproc_mm_cpus(mm, &mut remote) };
        bump(&self.member_flushes, &TOTAL.member_flushes, 1);
        bump(&self.flush_cpus, &TOTAL.flush_cpus, cpus.into());
        bump(&self.ipis, &TOTAL.ipis, remote.into());
    }

    /// One notifier call that added the members to a deferred flush.
    pub(crate) fn batched(&self) {
        bump(&self.batched, &TOTAL.batched, 1);
    }

    /// Member `mm` added to a deferred flush, counted before it is added.
    ///
    /// # Safety
    ///
    /// `mm` must be a live mm.
    pub(crate) unsafe fn member_batched(&self, mm: *mut bindings::mm_struct) {
        let mut remote = 0u32;
        // SAFETY: `mm` is live (caller); the helper only reads its CPU mask.
        let cpus = unsafe { bindings::halfproc_mm_cpus(mm, &mut remote) };
        bump(&self.batched_members, &TOTAL.batched_members, 1);
        bump(&self.batched_cpus, &TOTAL.batched_cpus, cpus.into());
    }

    /// Pages pinned by one `dmread()`/`dmwrite()` batch.
    pub(crate) fn pinned(&self, pages: usize) {
        bump(&self.pinned, &TOTAL.pinned, pages as u64);
    }

    /// The counters' files in a new directory `name` under the module's.
    ///
    /// # Safety
    ///
    /// `self` must stay at its address until the directory is removed with
    /// [`remove_dir`].
    unsafe fn publish(&self, name: &CStr) -> *mut Dentry {
        let root = ROOT.load(Ordering::Acquire);
        if root.is_null() {
            return null_mut();
        }
        // SAFETY: `name` is a C string; `root` lives while the module does.
        let dir = unsafe { debugfs_create_dir(name.as_char_ptr(), root) };
        for (file, v) in [
            (c_str!("switches"), &self.switches),
            (c_str!("flushes"), &self.flushes),
            (c_str!("member_flushes"), &self.member_flushes),
            (c_str!("flush_cpus"), &self.flush_cpus),
            (c_str!("ipis"), &self.ipis),
            (c_str!("batched"), &self.batched),
            (c_str!("batched_members"), &self.batched_members),
            (c_str!("batched_cpus"), &self.batched_cpus),
            (c_str!("pinned"), &self.pinned),
        ] {
            // SAFETY: `v` stays valid until the directory is removed (the
            // caller), and debugfs reads it as a u64, which it is.
            unsafe { debugfs_create_u64(file.as_char_ptr(), 0o444, dir, v.as_ptr()) };
        }
        dir
    }

    /// The directory of set `id`; removed with [`remove_dir`].
    ///
    /// # Safety
    ///
    /// As [`Counters::publish`].
    pub(crate) unsafe fn publish_set(&self, id: u64) -> *mut Dentry {
        let Ok(name) = CString::try_from_fmt(fmt!("{id}")) else {
            return null_mut();
        };
        // SAFETY: guaranteed by the caller.
        unsafe { self.publish(&name) }
    }
}

/// Remove a directory made by [`Counters::publish_set`] (null is fine).
pub(crate) fn remove_dir(dir: *mut Dentry) {
    // SAFETY: `debugfs_remove()` takes null or error pointers too, and
    // waits for readers of the files to finish.
    unsafe { debugfs_remove(dir) };
}

/// Make `/sys/kernel/debug/halfproc/` and its `total/` at module load.
pub(crate) fn init() {
    // SAFETY: a constant C string, no parent (the debugfs root).
    let root = unsafe { debugfs_create_dir(c_str!("halfproc").as_char_ptr(), null_mut()) };
    ROOT.store(root, Ordering::Release);
    // SAFETY: `TOTAL` is a static; the directory goes with the root.
    unsafe { TOTAL.publish(c_str!("total")) };
}

/// Remove the module's debugfs tree (every set is gone: each pins the
/// module).
pub(crate) fn exit() {
    remove_dir(ROOT.swap(null_mut(), Ordering::AcqRel));
}
