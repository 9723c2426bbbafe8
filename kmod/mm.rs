// SPDX-License-Identifier: GPL-2.0

//! Typed wrappers over `struct mm_struct` and `struct task_struct`.
//!
//! Fields of these structures are read and written only through the helpers
//! of [`rust/helpers/halfproc.c`](srctree/rust/helpers/halfproc.c)
//! (`bindings::halfproc_*`), compiled by the kernel's own compiler: bindgen can
//! disagree with GCC on the layout of `struct task_struct`.
//!
//! C headers: [`include/linux/mm_types.h`](srctree/include/linux/mm_types.h),
//! [`include/linux/halfproc.h`](srctree/include/linux/halfproc.h).

use kernel::{bindings, error::from_err_ptr, prelude::*, types::Opaque};

/// A `struct mm_struct`.
///
/// # Invariants
///
/// A `&Mm` is only made from a pointer to an `mm_struct` that stays allocated
/// (`mm_count` > 0) for the lifetime of the reference.
#[repr(transparent)]
pub(crate) struct Mm(Opaque<bindings::mm_struct>);

impl Mm {
    /// Borrow an `mm_struct` from a raw pointer.
    ///
    /// # Safety
    ///
    /// `ptr` must point to an `mm_struct` that stays allocated for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::mm_struct) -> &'a Mm {
        // SAFETY: `Mm` is a transparent wrapper of `mm_struct`, and the caller
        // guarantees that the pointee outlives `'a`.
        // INVARIANT: the caller guarantees the lifetime.
        unsafe { &*ptr.cast::<Mm>() }
    }

    /// The mm of the current task, if it has one (kernel threads do not).
    pub(crate) fn current<'a>() -> Option<&'a Mm> {
        // SAFETY: `get_current()` is the running task; a task's `mm` only
        // changes under the task itself (exec, exit, or a half-process
        // switch), none of which runs while this task runs the caller.
        let mm = unsafe { bindings::halfproc_task_mm(bindings::get_current()) };
        if mm.is_null() {
            None
        } else {
            // SAFETY: current holds a reference on its own mm.
            Some(unsafe { Mm::from_raw(mm) })
        }
    }

    /// The raw pointer.
    pub(crate) fn as_raw(&self) -> *mut bindings::mm_struct {
        self.0.get()
    }

    /// The set this mm belongs to (as member or as set mm), or null.
    ///
    /// Read through a C helper, as every field (see the module docs).
    pub(crate) fn halfproc(&self) -> *mut bindings::halfproc_set {
        // SAFETY: `self` is a live mm; the accessor does an acquire load.
        unsafe { bindings::halfproc_mm_set(self.as_raw()) }
    }

    /// Publish (or clear) this mm's set; pairs with `mm_halfproc()` in C.
    pub(crate) fn set_halfproc(&self, set: *mut bindings::halfproc_set) {
        // SAFETY: `self` is a live mm; the accessor does a release store.
        unsafe { bindings::halfproc_mm_publish(self.as_raw(), set) }
    }

    /// Whether the mm is dumpable by its own user (`SUID_DUMP_USER`): not
    /// after `prctl(PR_SET_DUMPABLE, 0)`, nor after an exec of an unreadable
    /// or privilege-changing image.
    pub(crate) fn dumpable(&self) -> bool {
        // SAFETY: `self` is a live mm; the accessor reads its flags.
        unsafe { bindings::halfproc_mm_dumpable(self.as_raw()) }
    }

    /// Take the mmap lock for writing.
    pub(crate) fn mmap_write_lock(&self) -> MmapWriteGuard<'_> {
        // SAFETY: `self` is a live mm.
        unsafe { bindings::halfproc_mmap_write_lock(self.as_raw()) };
        MmapWriteGuard(self)
    }

    /// Take the mmap lock for reading; `EINTR` on a fatal signal.
    pub(crate) fn mmap_read_lock_killable(&self) -> Result<MmapReadGuard<'_>> {
        // SAFETY: `self` is a live mm.
        if unsafe { bindings::halfproc_mmap_read_lock_killable(self.as_raw()) } != 0 {
            return Err(EINTR);
        }
        Ok(MmapReadGuard {
            mm: self,
            locked: true,
        })
    }
}

/// A TLB flush that a reclaim or migration unmap deferred
/// (`struct arch_tlbflush_unmap_batch`, `TTU_BATCH_FLUSH`): the core flushes
/// every CPU it names, with one IPI round, before any page unmapped into it
/// is freed or written back (`arch_tlbbatch_flush()`).
///
/// # Invariants
///
/// `self.0` is the batch of an `arch_tlbbatch_add_pending()` call that is
/// still running, with the page table lock of the unmapped entry held.
pub(crate) struct TlbBatch(*mut bindings::arch_tlbflush_unmap_batch);

impl TlbBatch {
    /// # Safety
    ///
    /// `ptr` must be the batch passed to a running
    /// `mmu_notifier_ops::arch_tlbbatch_add_pending()`, and the result must
    /// not outlive that call.
    pub(crate) unsafe fn from_raw(ptr: *mut bindings::arch_tlbflush_unmap_batch) -> Self {
        // INVARIANT: guaranteed by the caller.
        TlbBatch(ptr)
    }

    /// Add `mm`'s TLB: the batch's flush reaches the CPUs that run `mm` now,
    /// and a CPU that switches to it later flushes on its new TLB generation.
    /// Never sleeps, sends no IPI.
    pub(crate) fn add(&mut self, mm: &Mm) {
        // SAFETY: the batch is being filled (type invariant) and `mm` is live.
        unsafe { bindings::halfproc_tlbbatch_add_mm(self.0, mm.as_raw()) };
    }
}

/// The mmap lock of an [`Mm`], held for writing.
pub(crate) struct MmapWriteGuard<'a>(&'a Mm);

impl MmapWriteGuard<'_> {
    /// Whether the mm has any VMA in the shared range.
    pub(crate) fn range_has_vmas(&self) -> bool {
        // SAFETY: the mmap lock is held, as `halfproc_range_has_vmas` asserts.
        unsafe { bindings::halfproc_range_has_vmas(self.0.as_raw()) }
    }

    /// Whether a secondary MMU ever subscribed to the mm's invalidations
    /// (`mm_has_notifiers()`: the subscription list, once allocated, stays
    /// until the mm is freed).
    pub(crate) fn has_notifiers(&self) -> bool {
        // SAFETY: the mm is live, and `notifier_subscriptions` is set only
        // under the mmap write lock, which is held; the pointer is compared,
        // never dereferenced.
        unsafe {
            !(*self.0.as_raw())
                .__bindgen_anon_1
                .notifier_subscriptions
                .is_null()
        }
    }
}

impl Drop for MmapWriteGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: the guard exists only while the write lock is held.
        unsafe { bindings::halfproc_mmap_write_unlock(self.0.as_raw()) };
    }
}

/// The mmap lock of an [`Mm`], held for reading.
///
/// # Invariants
///
/// `locked` says whether the read lock is held; GUP may drop it.
pub(crate) struct MmapReadGuard<'a> {
    mm: &'a Mm,
    locked: bool,
}

impl MmapReadGuard<'_> {
    /// The `int *locked` argument of `pin_user_pages_remote()`.
    pub(crate) fn with_locked<R>(&mut self, f: impl FnOnce(*mut i32) -> R) -> R {
        let mut locked: i32 = self.locked.into();
        let r = f(&mut locked);
        // INVARIANT: GUP clears `locked` exactly when it dropped the lock.
        self.locked = locked != 0;
        r
    }
}

impl Drop for MmapReadGuard<'_> {
    fn drop(&mut self) {
        if self.locked {
            // SAFETY: the read lock is held by the type's invariant.
            unsafe { bindings::halfproc_mmap_read_unlock(self.mm.as_raw()) };
        }
    }
}

/// A reference on a user address space (`mm_users`), as `mm_access()`
/// gives one.
///
/// # Invariants
///
/// `self.0` holds one `mm_users` reference, dropped with `mmput()`.
pub(crate) struct MmGuard(*mut bindings::mm_struct);

impl MmGuard {
    /// The mm of `task` if the current task may attach to it as ptrace
    /// would (`PTRACE_MODE_ATTACH_REALCREDS`: same real credentials or
    /// `CAP_SYS_PTRACE`, a dumpable target, the LSM hook), checked under the
    /// target's `exec_update_lock` so that the mm is the one the check saw;
    /// `Ok(None)` for a task without an mm.
    ///
    /// Errors: `EPERM` if the check fails, `EINTR` on a fatal signal.
    pub(crate) fn access(task: &TaskRef) -> Result<Option<MmGuard>> {
        // SAFETY: `task` holds a task reference.
        let mm = unsafe { bindings::halfproc_mm_access(task.0) };
        if mm.is_null() {
            return Ok(None);
        }
        // `mm_access()` says `EACCES` where the ptrace family says `EPERM`.
        let mm = from_err_ptr(mm).map_err(|e| if e == EACCES { EPERM } else { e })?;
        // INVARIANT: `mm_access()` took a reference.
        Ok(Some(MmGuard(mm)))
    }
}

impl core::ops::Deref for MmGuard {
    type Target = Mm;
    fn deref(&self) -> &Mm {
        // SAFETY: the reference keeps the mm alive.
        unsafe { Mm::from_raw(self.0) }
    }
}

impl Drop for MmGuard {
    fn drop(&mut self) {
        // SAFETY: we own one `mm_users` reference by the type's invariant.
        unsafe { bindings::mmput(self.0) };
    }
}

/// A counted reference on a `struct task_struct`.
///
/// # Invariants
///
/// `self.0` holds one task reference, dropped with `put_task_struct()`.
pub(crate) struct TaskRef(*mut bindings::task_struct);

impl TaskRef {
    /// The task with `pid` in the caller's pid namespace.
    pub(crate) fn by_vpid(pid: i32) -> Option<TaskRef> {
        // SAFETY: FFI call without preconditions.
        let t = unsafe { bindings::halfproc_get_task(pid) };
        if t.is_null() {
            return None;
        }
        // INVARIANT: `find_get_task_by_vpid()` took a reference.
        Some(TaskRef(t))
    }
}

impl Drop for TaskRef {
    fn drop(&mut self) {
        // SAFETY: we own one reference by the type's invariant.
        unsafe { bindings::put_task_struct(self.0) };
    }
}

/// The `struct signal_struct` of the current task, used only as an identity
/// of its thread group (never dereferenced).
pub(crate) fn current_signal() -> usize {
    // SAFETY: `get_current()` is the running task; `signal` is set for its
    // whole life.
    unsafe { bindings::halfproc_task_group(bindings::get_current()) }
}

/// The id of the current thread (its pid in the caller's pid namespace).
pub(crate) fn current_tid() -> i32 {
    // SAFETY: `get_current()` is the running task; a null namespace means
    // the caller's own.
    unsafe {
        bindings::__task_pid_nr_ns(
            bindings::get_current(),
            bindings::pid_type_PIDTYPE_PID,
            core::ptr::null_mut(),
        )
    }
}

/// The `signal_struct` identity of `task`, see [`current_signal`].
///
/// # Safety
///
/// `task` must be a valid task whose `signal` has been set up.
pub(crate) unsafe fn task_signal(task: *mut bindings::task_struct) -> usize {
    // SAFETY: guaranteed by the caller.
    unsafe { bindings::halfproc_task_group(task) }
}

/// The mm of `task`, without a reference.
///
/// # Safety
///
/// `task` must be valid, and its `mm` must stay alive while the result is
/// used (e.g. a child under construction in `copy_process()`).
pub(crate) unsafe fn task_mm<'a>(task: *mut bindings::task_struct) -> Option<&'a Mm> {
    // SAFETY: guaranteed by the caller.
    let mm = unsafe { bindings::halfproc_task_mm(task) };
    // SAFETY: guaranteed by the caller.
    (!mm.is_null()).then(|| unsafe { Mm::from_raw(mm) })
}
