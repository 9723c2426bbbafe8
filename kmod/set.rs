// SPDX-License-Identifier: GPL-2.0

//! Half-process sets: membership, lifecycle and TLB coherence.
//!
//! A set owns one mm, the *set mm*, that holds every VMA and page table of
//! the shared range. Each member mm points its top-level entries for the
//! range at the set mm's PUD tables (`halfproc_install()`), so the CPU walks
//! the set's tables for every member.
//!
//! # Lifetime
//!
//! Every member mm owns one reference on its [`Set`] (an `Arc` leaked into
//! `mm_struct::halfproc`). The set mm lives exactly as long as the set has a
//! member: when the last member mm is torn down the set releases the set mm,
//! freeing all shared memory and page tables. A hook running for a member
//! borrows the set through that reference ([`Set::of`]) instead of taking one
//! of its own: the member's mm, which the caller uses, cannot be torn down
//! during the call. The set is created lazily, with
//! the caller as first member, by the first `clone3(CLONE_HALFPROC)` or
//! `mmap(MAP_HALFPROC)` of a process outside any set.
//!
//! # Memory cgroup
//!
//! The set's pages are charged to one memory cgroup, the creator's at set
//! creation: [`Set::create`] takes the reference, the set mm keeps it until
//! it is released, and a set mm has no owner task (patch 0014).
//!
//! # TLB coherence
//!
//! A CPU running member A caches shared-range translations under A's PCID; a
//! flush of the set mm does not reach it. An mmu notifier on the set mm
//! (`arch_invalidate_secondary_tlbs`, called by x86's `flush_tlb_mm_range()`
//! and by the reclaim batch flush *before* any page or page table is freed)
//! flushes the same range in every member mm, which reaches every CPU that
//! may hold it, lazily-loaded ones included (`freed_tables`).
//!
//! Reclaim and migration unmap a page with its flush deferred into a batch
//! (`TTU_BATCH_FLUSH`; the core always defers a set mm's, patch 0044). Then
//! the notifier's `arch_tlbbatch_add_pending` adds every member's TLB to
//! the batch instead of flushing it ([`Set::batch_members`]): the core
//! flushes the union of the members' CPUs once, with one IPI round, before
//! any page of the batch is freed or written back.
//!
//! # Lock order (outer to inner)
//!
//! 1. member mm `mmap_lock` (set creation),
//! 2. set mm `mmap_lock` (notifier registration, set mm release),
//! 3. page-table locks of the set mm (held by callers of the notifier),
//! 4. [`Set::members`] (a spinlock; TLB flush IPIs are sent under it, and
//!    members are added to deferred flushes under it).

use crate::mm::{current_signal, Mm, TlbBatch};
use crate::stats::{self, Counters, Dentry};
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use kernel::{
    bindings,
    error::{from_err_ptr, to_result},
    new_spinlock,
    prelude::*,
    sync::{
        lock::{spinlock::SpinLockBackend, Guard},
        Arc, ArcBorrow, SpinLock,
    },
    types::Opaque,
};

/// The member list: `kvmalloc`'d, so that a large set's list never needs
/// high-order contiguous memory to grow (it falls back to `vmalloc`).
type MemberList = KVVec<Member>;

/// The member list, locked.
type Members<'a> = Guard<'a, MemberList, SpinLockBackend>;

/// Test-only sabotage: skip the member TLB fan-out, so that members keep
/// stale translations of the shared range. Never set in a normal build: only
/// `scripts/kmod.sh` builds a second, separately named module with
/// `--cfg halfproc_skip_member_flush`, to prove that `hp_tlb` detects the
/// missing flushes.
pub(crate) const SKIP_MEMBER_FLUSH: bool = cfg!(halfproc_skip_member_flush);

/// Sets created since the module was loaded (for set ids).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// Sets alive now.
pub(crate) static LIVE_SETS: AtomicU64 = AtomicU64::new(0);

/// One member of a set.
///
/// # Invariants
///
/// `mm` is a member mm of the set holding this entry; the entry is removed
/// (under [`Set::members`]) before the mm is freed.
#[derive(Clone, Copy)]
struct Member {
    mm: *mut bindings::mm_struct,
    /// The thread group that owns the membership (its `signal_struct`), so a
    /// `vfork()` child sharing the mm does not carry it across `execve()`.
    group: usize,
    /// `PR_HALFPROC_INHERIT`: every child of this member joins the set.
    inherit: bool,
    /// `PR_HALFPROC_FORK_MEMBER`: threads (ids; 0: free entry) whose next
    /// fork joins the set. Several threads of one process may arm at once.
    fork_tids: ForkTids,
}

/// The threads of one member with a fork armed: plain data (the member list
/// is a `KVVec` of `Member`s forgotten without drop), bounded.
#[derive(Clone, Copy)]
struct ForkTids([i32; MAX_ARMED]);

/// Threads of one member that may have a fork armed at the same time.
const MAX_ARMED: usize = 32;

impl ForkTids {
    const NONE: ForkTids = ForkTids([0; MAX_ARMED]);

    fn contains(&self, tid: i32) -> bool {
        tid != 0 && self.0.contains(&tid)
    }

    /// Arms `tid`; `EAGAIN` when `MAX_ARMED` threads already are.
    fn arm(&mut self, tid: i32) -> Result {
        if self.contains(tid) {
            return Ok(());
        }
        let free = self.0.iter_mut().find(|t| **t == 0).ok_or(EAGAIN)?;
        *free = tid;
        Ok(())
    }

    /// Disarms `tid`; whether it was armed.
    fn take(&mut self, tid: i32) -> bool {
        match self.0.iter_mut().find(|t| tid != 0 && **t == tid) {
            Some(t) => {
                *t = 0;
                true
            }
            None => false,
        }
    }
}

/// What a member's fork or exec should do about the new mm.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Join {
    /// The new mm stays out of the set.
    No,
    /// The new mm joins, inheriting `PR_HALFPROC_INHERIT` if set.
    Yes { inherit: bool },
}

// SAFETY: `Member` is plain data; the pointer is only dereferenced under
// `Set::members`, which the mm teardown path also takes.
unsafe impl Send for Member {}

/// A half-process set.
///
/// # Invariants
///
/// - `core.mm` is the set mm while the set has at least one member, and the
///   notifier is registered on it for exactly that time.
/// - Every mm in `members` has `mm_struct::halfproc == core`.
#[pin_data]
pub(crate) struct Set {
    #[pin]
    core: Opaque<bindings::halfproc_set>,
    #[pin]
    notifier: Opaque<bindings::mmu_notifier>,
    #[pin]
    members: SpinLock<MemberList>,
    id: u64,
    /// What the set did (debugfs `halfproc/<id>/`, see `stats`).
    pub(crate) stats: Counters,
    /// Its debugfs directory, from `create` to `destroy`.
    dir: AtomicPtr<Dentry>,
}

// SAFETY: the opaque C parts are only touched under the locks described in
// the module documentation; the rest is `Send + Sync`.
unsafe impl Send for Set {}
// SAFETY: as above.
unsafe impl Sync for Set {}

static NOTIFIER_OPS: bindings::mmu_notifier_ops = bindings::mmu_notifier_ops {
    arch_invalidate_secondary_tlbs: Some(invalidate_secondary_tlbs),
    arch_tlbbatch_add_pending: Some(tlbbatch_add_pending),
    // SAFETY: all-zero is a valid `mmu_notifier_ops`: every other callback
    // is `None`.
    ..unsafe { core::mem::zeroed() }
};

impl Set {
    /// The set an mm belongs to, borrowed for as long as `mm` is; `None`
    /// outside any set. No reference is taken: this is every hook's path.
    pub(crate) fn of(mm: &Mm) -> Option<ArcBorrow<'_, Set>> {
        let core = mm.halfproc();
        if core.is_null() {
            return None;
        }
        // SAFETY: `core` points into a live `Set`, and stays so while `mm` is
        // borrowed: a member mm holds a reference on its set that only
        // `leave` gives back, once the mm's last user is gone, which cannot
        // happen while the caller uses the mm (its own, or one it holds a
        // user reference on); the set mm lives only while the set has a
        // member.
        Some(unsafe { Self::borrow_core(core) })
    }

    /// A new reference on this set.
    fn arc(&self) -> Arc<Set> {
        // SAFETY: every `Set` is made by `create`, inside an `Arc`, and
        // `&self` keeps that `Arc` alive for the call.
        let set = unsafe { ArcBorrow::from_raw(self) };
        set.into()
    }

    /// # Safety
    ///
    /// `core` must be the `core` field of a `Set` kept alive by a reference
    /// for `'a`.
    unsafe fn borrow_core<'a>(core: *mut bindings::halfproc_set) -> ArcBorrow<'a, Set> {
        // SAFETY: `core` is a field of a `Set` (caller), and `Opaque<T>` is
        // `repr(transparent)` over `T`.
        let set = unsafe {
            kernel::container_of!(core.cast::<Opaque<bindings::halfproc_set>>(), Set, core)
        };
        // SAFETY: the set is alive and managed by an `Arc` (caller).
        unsafe { ArcBorrow::from_raw(set) }
    }

    /// The set mm.
    pub(crate) fn mm(&self) -> &Mm {
        // SAFETY: by the type invariant `core.mm` is the live set mm while the
        // set has members, and only members (or the set's creator) call this.
        unsafe { Mm::from_raw((*self.core.get()).mm) }
    }

    /// The set of the current process, created (with current as its first
    /// member) if it has none.
    ///
    /// Errors: `EBUSY` if current already has private mappings in the
    /// shared range or an mmu notifier (a secondary MMU), `ENOMEM`.
    pub(crate) fn of_current_or_create() -> Result<Arc<Set>> {
        let mm = Mm::current().ok_or(EINVAL)?;
        if let Some(set) = Set::of(mm) {
            return Ok(set.into());
        }
        // Build the set before taking current's mmap lock: registering the
        // notifier takes the set mm's, and both are mmap locks.
        let new = Set::create()?;
        let guard = mm.mmap_write_lock();
        let ret = if let Some(set) = Set::of(mm) {
            // Another thread of this process won the race.
            Ok(set.into())
        } else if guard.range_has_vmas() {
            Err(EBUSY)
        } else if guard.has_notifiers() {
            // A secondary MMU mirrors this mm: it would never hear of the
            // set's invalidations (patch 0021 refuses new ones on members).
            Err(EBUSY)
        } else {
            new.add(mm, current_signal()).map(|()| new.clone())
        };
        drop(guard);
        if new.len() == 0 {
            new.destroy();
        }
        ret
    }

    /// A new set with a set mm and no member.
    fn create() -> Result<Arc<Set>> {
        let set = Arc::pin_init(
            pin_init!(Set {
                core: Opaque::uninit(),
                notifier: Opaque::uninit(),
                members <- new_spinlock!(KVVec::new(), "halfproc_set_members"),
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                stats: Counters::new(),
                dir: AtomicPtr::new(core::ptr::null_mut()),
            }),
            GFP_KERNEL,
        )?;
        let core = set.core.get();
        // SAFETY: `core` is ours alone until published below. The memcg
        // reference passes to the set mm in `halfproc_set_mm_alloc()`, which
        // drops it on failure or when the set mm is released.
        unsafe {
            (*core).mm = core::ptr::null_mut();
            (*core).owner = crate::this_module();
            // Who pays for the shared range: the memory cgroup of the
            // creator, now (docs/design-mm.md, "Memory cgroup").
            (*core).memcg = bindings::halfproc_current_memcg();
        }
        // SAFETY: `core` is valid; on success the set mm points back at it,
        // and the set outlives the set mm (released in `leave`).
        let mm = from_err_ptr(unsafe { bindings::halfproc_set_mm_alloc(core) })?;
        let notifier = set.notifier.get();
        // SAFETY: the notifier is ours alone until registered.
        unsafe { bindings::halfproc_notifier_init(notifier, &NOTIFIER_OPS) };
        // SAFETY: `mm` is a live mm with `mm_users` held by the set;
        // `notifier` stays valid until unregistered in `destroy`.
        let ret = unsafe { bindings::mmu_notifier_register(notifier, mm) };
        if ret != 0 {
            // SAFETY: `mm` came from `halfproc_set_mm_alloc()` and has no
            // member.
            unsafe { bindings::halfproc_set_mm_release(mm) };
            return Err(Error::from_errno(ret));
        }
        LIVE_SETS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the set is pinned in its `Arc`, and `destroy` removes the
        // directory before the set can be freed.
        let dir = unsafe { set.stats.publish_set(set.id) };
        set.dir.store(dir, Ordering::Release);
        pr_debug!("set {} created\n", set.id);
        Ok(set)
    }

    /// Make `mm` (not yet live, or with its mmap lock held for writing, and
    /// with no VMA in the range) a member owned by thread group `group`.
    pub(crate) fn add(&self, mm: &Mm, group: usize) -> Result {
        self.add_with(mm, group, false)
    }

    /// [`Set::add`], with the member's `PR_HALFPROC_INHERIT` flag.
    pub(crate) fn add_with(&self, mm: &Mm, group: usize, inherit: bool) -> Result {
        // SAFETY: both mms are live; `mm` has no VMA in the range.
        to_result(unsafe { bindings::halfproc_install(mm.as_raw(), self.mm().as_raw()) })?;
        let mut members = match self.members_with_room() {
            Ok(members) => members,
            Err(e) => {
                // SAFETY: installed above, not yet published.
                unsafe { bindings::halfproc_uninstall(mm.as_raw()) };
                return Err(e);
            }
        };
        let len = members.len();
        members.spare_capacity_mut()[0].write(Member {
            mm: mm.as_raw(),
            group,
            inherit,
            fork_tids: ForkTids::NONE,
        });
        // SAFETY: the entry at `len` was initialised just above.
        unsafe { members.set_len(len + 1) };
        drop(members);
        // The member's reference on the set, given back in `leave`.
        let _ = Arc::into_raw(self.arc());
        mm.set_halfproc(self.core.get());
        Ok(())
    }

    /// The member list, locked, with room for one more entry.
    ///
    /// The room is made outside the lock, with an allocation that may
    /// sleep: an exec in a member adds the new mm after exec's point of no
    /// return (`hook_exec`), where a failure kills the process, and an
    /// atomic allocation under the spinlock would fail far more easily.
    fn members_with_room(&self) -> Result<Members<'_>> {
        loop {
            let members = self.members.lock();
            let len = members.len();
            if len < members.capacity() {
                return Ok(members);
            }
            drop(members);
            // Twice the room, as `KVVec::push` would grow it; `vmalloc`'d
            // when a `kmalloc` of that size would need compaction.
            let mut bigger = MemberList::with_capacity((len + 1) * 2, GFP_KERNEL)?;
            let mut members = self.members.lock();
            if members.len() < bigger.capacity() && members.capacity() < bigger.capacity() {
                // Never allocates: `bigger` has room for every entry.
                bigger.extend_from_slice(&members, GFP_NOWAIT)?;
                core::mem::swap(&mut *members, &mut bigger);
            }
            drop(members);
            // The smaller storage, freed outside the lock; then look again
            // (another member may have taken the room meanwhile).
            drop(bigger);
        }
    }

    /// Whether a fork without `CLONE_HALFPROC` by thread `tid` of member
    /// `mm` makes a member: the thread asked for its next fork (consumed
    /// here), or the member asked for all its children.
    pub(crate) fn fork_policy(&self, mm: &Mm, tid: i32) -> Join {
        let mut members = self.members.lock();
        let Some(m) = members.iter_mut().find(|m| m.mm == mm.as_raw()) else {
            return Join::No;
        };
        let once = m.fork_tids.take(tid);
        if once || m.inherit {
            Join::Yes { inherit: m.inherit }
        } else {
            Join::No
        }
    }

    /// Whether the new mm of an `execve()` by thread group `group` on member
    /// `mm` stays in the set: always for the owning process; for a `vfork()`
    /// child borrowing the mm only if the member passes membership on.
    pub(crate) fn exec_policy(&self, mm: &Mm, group: usize) -> Join {
        let members = self.members.lock();
        match members.iter().find(|m| m.mm == mm.as_raw()) {
            Some(m) if m.group == group || m.inherit => Join::Yes { inherit: m.inherit },
            _ => Join::No,
        }
    }

    /// Arms or cancels the one-shot `PR_HALFPROC_FORK_MEMBER` of thread
    /// `tid` of member `mm`. `EINVAL` if `mm` is not a member, `EAGAIN` if
    /// too many of its threads have one armed already.
    pub(crate) fn set_fork_tid(&self, mm: &Mm, tid: i32, arm: bool) -> Result {
        let mut members = self.members.lock();
        let m = members
            .iter_mut()
            .find(|m| m.mm == mm.as_raw())
            .ok_or(EINVAL)?;
        if arm {
            m.fork_tids.arm(tid)
        } else {
            m.fork_tids.take(tid);
            Ok(())
        }
    }

    /// Sets member `mm`'s `PR_HALFPROC_INHERIT` flag.
    pub(crate) fn set_inherit(&self, mm: &Mm, on: bool) -> Result {
        let mut members = self.members.lock();
        let m = members
            .iter_mut()
            .find(|m| m.mm == mm.as_raw())
            .ok_or(EINVAL)?;
        m.inherit = on;
        Ok(())
    }

    /// `(inherit, fork pending for tid)` of member `mm`.
    pub(crate) fn flags_of(&self, mm: &Mm, tid: i32) -> (bool, bool) {
        let members = self.members.lock();
        members
            .iter()
            .find(|m| m.mm == mm.as_raw())
            .map_or((false, false), |m| (m.inherit, m.fork_tids.contains(tid)))
    }

    /// Number of members.
    pub(crate) fn len(&self) -> usize {
        self.members.lock().len()
    }

    /// `mm`, a member whose last user is gone, leaves its set. The last
    /// member to leave releases the set mm and with it all shared memory.
    ///
    /// # Safety
    ///
    /// `mm` must be a member mm in teardown (`mm_users == 0`), called once.
    pub(crate) unsafe fn leave(mm: &Mm) {
        let core = mm.halfproc();
        // SAFETY: the member's reference, leaked in `add`.
        let set: Arc<Set> = unsafe { Arc::from_raw(Self::borrow_core(core).deref_ptr()) };
        // Uninstall and flush while still listed: until the entries are
        // gone a CPU holding this mm lazily may cache the range, so every
        // flush of the set must still reach it.
        // SAFETY: `mm` is a member being torn down; no CPU may keep walking
        // the set's tables through it after this returns.
        unsafe { bindings::halfproc_uninstall(mm.as_raw()) };
        let last = {
            let mut members = set.members.lock();
            if let Some(i) = members.iter().position(|m| m.mm == mm.as_raw()) {
                let n = members.len();
                members.as_mut_slice().swap(i, n - 1);
                // SAFETY: `n - 1 < len`, and `Member` has no destructor, so
                // forgetting the last element leaks nothing.
                unsafe { members.set_len(n - 1) };
            }
            members.is_empty()
        };
        mm.set_halfproc(core::ptr::null_mut());
        if last {
            set.destroy();
        }
    }

    /// Release the set mm once no member is left.
    fn destroy(&self) {
        stats::remove_dir(self.dir.swap(core::ptr::null_mut(), Ordering::AcqRel));
        let mm = self.mm().as_raw();
        // SAFETY: registered in `create` on this mm; unregistering waits for
        // running callbacks.
        unsafe { bindings::mmu_notifier_unregister(self.notifier.get(), mm) };
        // SAFETY: no member is left, so nobody points at the set's tables.
        unsafe { bindings::halfproc_set_mm_release(mm) };
        LIVE_SETS.fetch_sub(1, Ordering::Relaxed);
        pr_debug!("set {} destroyed\n", self.id);
    }

    /// Flush `[start, end)` in every member mm (the core limits the flush
    /// to the shared range).
    fn flush_members(&self, start: usize, end: usize) {
        if SKIP_MEMBER_FLUSH {
            return;
        }
        self.stats.flushed();
        for m in self.members.lock().iter() {
            // SAFETY: `m.mm` stays allocated while listed (type invariant),
            // and the lock is held.
            unsafe {
                self.stats.member_flush(m.mm);
                bindings::halfproc_flush_tlb_range(m.mm, start as _, end as _)
            };
        }
    }

    /// Add every member's TLB to `batch`, a flush of the set mm that reclaim
    /// or migration deferred: no member is flushed now, no IPI is sent, and
    /// nothing sleeps (the set mm's page table lock is held).
    ///
    /// Members that come and go meanwhile: one unlisted before this walk
    /// holds none of the set's translations ([`Set::leave`] clears its
    /// entries and flushes it while it is still listed); one unlisted after
    /// is in the batch. One listed only after this walk never held the
    /// page: a mm joins while nothing runs on it (a `fork()` or `execve()`
    /// child's new mm), or as the creator of a set that has no page yet.
    /// Its first walk of the set's tables comes after its listing, which
    /// the member lock orders after this walk and so after the clearing of
    /// the page's entry (the core clears it before calling the notifier):
    /// it finds the entry clear.
    fn batch_members(&self, batch: &mut TlbBatch) {
        if SKIP_MEMBER_FLUSH {
            return;
        }
        self.stats.batched();
        for m in self.members.lock().iter() {
            // SAFETY: `m.mm` stays allocated while listed (type invariant),
            // and the lock is held.
            let mm = unsafe { Mm::from_raw(m.mm) };
            // SAFETY: `mm` is live.
            unsafe { self.stats.member_batched(m.mm) };
            batch.add(mm);
        }
    }
}

/// Extension to get the raw pointer back out of an [`ArcBorrow`].
trait DerefPtr<T> {
    fn deref_ptr(&self) -> *const T;
}

impl<T> DerefPtr<T> for ArcBorrow<'_, T> {
    fn deref_ptr(&self) -> *const T {
        &**self as *const T
    }
}

/// `mmu_notifier_ops::arch_invalidate_secondary_tlbs` of the set mm.
///
/// # Safety
///
/// Called by the mmu notifier core with a registered `subscription`.
unsafe extern "C" fn invalidate_secondary_tlbs(
    subscription: *mut bindings::mmu_notifier,
    _mm: *mut bindings::mm_struct,
    start: kernel::ffi::c_ulong,
    end: kernel::ffi::c_ulong,
) {
    // SAFETY: every registered notifier is the `notifier` field of a live
    // `Set` (unregistered in `destroy`, before the set can be freed).
    let set = unsafe {
        &*kernel::container_of!(
            subscription.cast::<Opaque<bindings::mmu_notifier>>(),
            Set,
            notifier
        )
    };
    set.flush_members(start, end);
}

/// `mmu_notifier_ops::arch_tlbbatch_add_pending` of the set mm.
///
/// # Safety
///
/// Called by the mmu notifier core with a registered `subscription` and the
/// batch being filled, under the set mm's page table lock.
unsafe extern "C" fn tlbbatch_add_pending(
    subscription: *mut bindings::mmu_notifier,
    _mm: *mut bindings::mm_struct,
    batch: *mut bindings::arch_tlbflush_unmap_batch,
) {
    // SAFETY: as in `invalidate_secondary_tlbs`.
    let set = unsafe {
        &*kernel::container_of!(
            subscription.cast::<Opaque<bindings::mmu_notifier>>(),
            Set,
            notifier
        )
    };
    // SAFETY: `batch` is being filled by the caller, for this call only.
    let mut batch = unsafe { TlbBatch::from_raw(batch) };
    set.batch_members(&mut batch);
}
