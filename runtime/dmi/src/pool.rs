// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The node's memory pool: page frames with a header each, and an index the
//! node's program and its compute instances read page hits from without
//! waking the engine (`docs/dmi.md`, "The pool in the shared range").
//!
//! Every page a node holds (owned, or a cached copy) lives in a [`Frame`]:
//! a 64-byte [`Head`] (a sequence word, the page's id, its length and a
//! "valid for read" flag) followed by the page's bytes. With a half-process
//! set the frames and the [`Index`] are in the set's shared range (kernel
//! backend: `MAP_HALFPROC`; portable: the runtime's shared mapping), so
//! every member sees them; without one (the simulator, or a node whose set
//! could not be made) they are in the node process's heap and only its own
//! threads read them.
//!
//! **Writers.** Only the engine (the protocol core, one thread) changes
//! heads and the index, and frames except for one case: the fast writes of
//! `pool_write.rs` change the bytes and the version of an owned page the
//! engine marked exclusive-writable ([`Frame::set_writable`]), and the
//! engine takes that back ([`Frame::revoke`]) before it reads or changes
//! the page again. Writers take the frame's holder word with a
//! compare-and-swap (naming themselves: the node, or an instance's write
//! journal, `pool_journal.rs`), so they exclude each other, and only then
//! the sequence word; the node finishes or undoes the write of an instance
//! that died holding a frame. The engine brackets every change of a frame (data,
//! page, validity, its death when the page goes) with the sequence word
//! (`halfproc::sync::SeqCount`): odd while changing, a new even value after; the values only
//! grow, also across reuse, because a frame's memory never leaves the pool
//! while the node runs (dropped frames wait on a free list for the next
//! page of their size class). Readers take a snapshot: sequence, page id,
//! flag, bytes, sequence again; any difference, an odd value, another page
//! or a clear flag is a miss, and a miss goes the slow way (the engine).
//!
//! **What "valid for read" means.** The flag is set only by
//! [`Store::publish`], which the core runs at the end of every step, before
//! the driver sends that step's messages or completes its calls, and only
//! for a page the engine itself would serve a read of locally right now: an
//! owned page with no write waiting for acknowledgements, or a cached copy.
//! Every change clears the flag inside its bracket (a write, a new copy, an
//! update), and dropping a copy (an Invalidate, a swap) kills its frame, so
//! a reader never sees a state the engine would not read from. See
//! `docs/dmi.md` for why this keeps every page sequentially consistent.

use std::collections::HashMap;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::addr::{PageId, Region, Regions, REGION_SHIFT};
use halfproc::sync::SeqCount;

/// Bytes before a frame's data.
const HEAD: usize = 64;
/// Slots of the page index (a power of two) and the slots a page may use.
const SLOTS: usize = 1 << 15;
const PROBES: usize = 8;
/// Slots of the region table (direct-mapped by region id).
const REGION_SLOTS: usize = 256;
/// Snapshot attempts of one page before a read gives up (a writer was busy).
const ATTEMPTS: usize = 4;

/// A frame's header, at the start of its memory (the data starts
/// [`HEAD`] bytes in).
#[repr(C)]
struct Head {
    seq: SeqCount,
    region: AtomicU64,
    index: AtomicU64,
    len: AtomicU64,
    /// 1: the engine would serve a read of this page locally now.
    ok: AtomicU64,
    /// 1: this node owns the page at rest and nobody else holds it, so a
    /// writer outside the engine may change it (holding the sequence word,
    /// `pool_write.rs`). Set by the core's `Node::publish`, taken back by
    /// [`Frame::revoke`] before the engine looks at the page again.
    wr: AtomicU64,
    /// The owner's version of the page (writes applied so far); fast
    /// writes add theirs here.
    version: AtomicU64,
    /// Who may change the frame now ([`FREE`], [`NODE`], or a compute
    /// instance's write journal, `pool_journal.rs`): taken by
    /// compare-and-swap before the sequence word goes odd, given back after
    /// it is even again ([`Head::lock`], [`Head::unlock`]). Naming the
    /// holder lets the node finish or undo the write of an instance that
    /// died holding it.
    holder: AtomicU64,
}

/// [`Head::holder`]: nobody holds the frame.
const FREE: u64 = 0;
/// [`Head::holder`]: a thread of the node process holds it (the engine,
/// or a fast write of the node's program: they die with the node). A
/// retired frame stays held by the node until it is reused.
const NODE: u64 = 1;

impl Head {
    /// Takes the frame for a change by the node process: waits (spinning,
    /// then yielding) while another writer holds it, then makes the
    /// sequence word odd. A compute instance that died holding it is
    /// released by its node (`Journal::recover`), so this wait ends.
    fn lock(&self) -> u64 {
        let mut spins = 0u32;
        while self
            .holder
            .compare_exchange_weak(FREE, NODE, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        // The holder word excludes every other writer.
        self.seq.write_begin()
    }

    /// Ends the change `lock` (or a fast writer's `write_begin`) returned
    /// `n` for and lets the frame go.
    fn unlock(&self, n: u64) {
        self.seq.write_end(n);
        // Release: the next holder sees the change and the even word.
        self.holder.store(FREE, Ordering::Release);
    }
}

#[repr(C)]
struct RegionSlot {
    seq: SeqCount,
    id: AtomicU64,
    page_size: AtomicU64,
    page_num: AtomicU64,
}

/// The index of a node's frames: which frame holds which page, and the
/// page size of every region. All zero is empty.
#[repr(C)]
pub struct Index {
    /// 0 once the node failed or stopped: every read takes the slow path.
    open: AtomicU64,
    regions: [RegionSlot; REGION_SLOTS],
    slots: [AtomicU64; SLOTS],
}

fn hash(region: u64, index: u64) -> usize {
    let h =
        (region.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ index).wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    (h >> 20) as usize
}

/// The index of the node this process runs (its instances get it through
/// their mailbox, `ring.rs`).
static NODE_INDEX: AtomicUsize = AtomicUsize::new(0);

/// The shared-range index of this process's node, if it has one.
pub(crate) fn node_index() -> usize {
    NODE_INDEX.load(Ordering::Acquire)
}

impl Index {
    /// The index at `addr` (0: none).
    ///
    /// # Safety
    /// `addr` is 0 or an index of a node's [`Store`] that stays mapped.
    pub(crate) unsafe fn at(addr: usize) -> Option<&'static Index> {
        // SAFETY: per the contract.
        (addr != 0).then(|| unsafe { &*(addr as *const Index) })
    }

    fn region(&self, id: u64) -> Option<(u64, u64)> {
        let r = &self.regions[id as usize % REGION_SLOTS];
        let s = r.seq.read_begin()?;
        let (rid, ps, pn) = (
            r.id.load(Ordering::Relaxed),
            r.page_size.load(Ordering::Relaxed),
            r.page_num.load(Ordering::Relaxed),
        );
        (r.seq.read_valid(s) && rid == id && ps > 0).then_some((ps, pn))
    }

    /// Fills `buf` from `[addr, addr + buf.len())` if every page it touches
    /// is readable here (owned at rest, or a valid copy); false: nothing
    /// is promised about `buf`, take the slow path.
    pub fn read(&self, addr: i64, buf: &mut [u8]) -> bool {
        READS.count(self.try_read(addr, buf))
    }

    fn try_read(&self, addr: i64, buf: &mut [u8]) -> bool {
        if self.open.load(Ordering::Acquire) == 0 {
            return false;
        }
        self.each_page(addr, buf.len(), |id, index, at, part| {
            self.read_page(id, index, at as usize, &mut buf[part])
        })
    }

    /// Splits the `len` bytes at DMI address `addr` by page: calls
    /// `f(region, page, offset in the page, range of the bytes)` for each
    /// page in order, and stops at the first `false`. False for an empty
    /// range, an address outside every region, a range past its region's
    /// last page, or when `f` says so.
    pub(crate) fn each_page(
        &self,
        addr: i64,
        len: usize,
        mut f: impl FnMut(u64, u64, u64, std::ops::Range<usize>) -> bool,
    ) -> bool {
        if addr <= 0 || len == 0 {
            return false;
        }
        let id = (addr >> REGION_SHIFT) as u64;
        let Some((ps, pn)) = self.region(id) else {
            return false;
        };
        let mut off = (addr as u64) & ((1 << REGION_SHIFT) - 1);
        let mut done = 0;
        while done < len {
            let (index, at) = (off / ps, off % ps);
            if index >= pn {
                return false;
            }
            let n = ((ps - at) as usize).min(len - done);
            if !f(id, index, at, done..done + n) {
                return false;
            }
            done += n;
            off += n as u64;
        }
        true
    }

    /// One page's part: a consistent snapshot of its frame, or false.
    fn read_page(&self, region: u64, index: u64, at: usize, out: &mut [u8]) -> bool {
        let h = hash(region, index);
        for _ in 0..ATTEMPTS {
            let mut raced = false;
            for i in 0..PROBES {
                let p = self.slots[(h + i) % SLOTS].load(Ordering::Acquire);
                if p == 0 {
                    continue;
                }
                // SAFETY: the index only holds frames of its store, whose
                // memory stays mapped (frames are reused, never returned to
                // the allocator, while the store lives).
                let head = unsafe { &*(p as *const Head) };
                let Some(s) = head.seq.read_begin() else {
                    raced = true;
                    continue;
                };
                let mine = head.region.load(Ordering::Relaxed) == region
                    && head.index.load(Ordering::Relaxed) == index;
                if !mine {
                    raced |= !head.seq.read_valid(s);
                    continue;
                }
                let fits = head.len.load(Ordering::Relaxed) >= (at + out.len()) as u64;
                if head.ok.load(Ordering::Relaxed) == 0 || !fits {
                    if head.seq.read_valid(s) {
                        return false;
                    }
                    raced = true;
                    continue;
                }
                // SAFETY: the frame has at least `at + out.len()` bytes
                // after its head (checked against `len`, which only changes
                // inside a bracket the final check sees); a concurrent write
                // is detected by that check and the bytes are not used.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        (p as *const u8).add(HEAD + at),
                        out.as_mut_ptr(),
                        out.len(),
                    )
                };
                if head.seq.read_valid(s) {
                    return true;
                }
                raced = true;
            }
            if !raced {
                return false;
            }
            std::hint::spin_loop();
        }
        false
    }
}

/// Where a store's memory comes from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mem {
    Heap,
    Shared,
}

const _: () = assert!(std::mem::size_of::<Head>() <= HEAD);

impl Mem {
    /// `size` zeroed bytes, 16-byte aligned (all-zero is a valid empty
    /// head and index).
    fn alloc(self, size: usize) -> Option<NonNull<u8>> {
        NonNull::new(match self {
            Mem::Shared => halfproc::alloc::calloc(1, size),
            // SAFETY: size > 0 (a head at least) and a valid alignment.
            Mem::Heap => unsafe {
                std::alloc::alloc_zeroed(std::alloc::Layout::from_size_align_unchecked(size, 16))
            },
        })
    }

    /// # Safety
    /// `p` came from `self.alloc(size)` and is not used afterwards.
    unsafe fn free(self, p: NonNull<u8>, size: usize) {
        match self {
            // SAFETY: per the contract.
            Mem::Shared => unsafe { halfproc::alloc::free(p.as_ptr()) },
            // SAFETY: per the contract, same layout as in `alloc`.
            Mem::Heap => unsafe {
                std::alloc::dealloc(
                    p.as_ptr(),
                    std::alloc::Layout::from_size_align_unchecked(size, 16),
                )
            },
        }
    }
}

/// Data capacity of a frame for `len` bytes (size classes: powers of two).
fn class(len: usize) -> usize {
    len.max(64).next_power_of_two()
}

struct Inner {
    mem: Mem,
    index: NonNull<Index>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Dropped frames by capacity: reused, never freed while the store lives.
    free: HashMap<usize, Vec<NonNull<Head>>>,
    /// Every frame ever made (freed with the store).
    all: Vec<(NonNull<Head>, usize)>,
    /// Pages whose frame changed since the last `publish`.
    dirty: Vec<PageId>,
    /// Region table generation last published.
    regions_gen: u64,
}

// SAFETY: the pointers are to memory owned by the store; the engine thread
// is the only one that changes it (under `state`), readers only read.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        self.index().open.store(0, Ordering::Release);
        if NODE_INDEX.load(Ordering::Acquire) == self.index.as_ptr() as usize {
            NODE_INDEX.store(0, Ordering::Release);
        }
        // A node's engine ends with its process; an instance may still look
        // at the index until then, so shared memory stays as it is.
        if self.mem == Mem::Shared {
            return;
        }
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        for (h, cap) in st.all.drain(..) {
            // SAFETY: made by `alloc(HEAD + cap)` in `Store::frame`; the
            // store (and with it every frame) is gone.
            unsafe { self.mem.free(h.cast(), HEAD + cap) };
        }
        // SAFETY: made by `alloc(size_of::<Index>())` in `Store::new`.
        unsafe {
            self.mem
                .free(self.index.cast(), std::mem::size_of::<Index>())
        };
    }
}

impl Inner {
    fn index(&self) -> &Index {
        // SAFETY: allocated in `Store::new`, freed only when `self` drops.
        unsafe { self.index.as_ref() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A node's frames (engine side).
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Store({:?})", self.inner.mem)
    }
}

impl Store {
    fn new(mem: Mem) -> Option<Store> {
        let index = mem.alloc(std::mem::size_of::<Index>())?.cast::<Index>();
        // SAFETY: a fresh, zeroed index.
        unsafe { index.as_ref() }.open.store(1, Ordering::Release);
        Some(Store {
            inner: Arc::new(Inner {
                mem,
                index,
                state: Mutex::new(State::default()),
            }),
        })
    }

    /// Frames in the process heap (the simulator; no instance reads them).
    pub fn heap() -> Store {
        Store::new(Mem::Heap).expect("memory for the page index")
    }

    /// Frames in the shared range of this process's half-process set (made
    /// now if there is none), so that the node's compute instances read
    /// hits from them; in the heap when no set can be made (then only the
    /// node's own threads read them). Registers the index for mailboxes.
    pub fn for_node() -> Store {
        let shared = halfproc::Set::get().or_else(|_| halfproc::Set::init_default());
        let s = match shared {
            Ok(_) => Store::new(Mem::Shared).unwrap_or_else(Store::heap),
            Err(_) => Store::heap(),
        };
        if s.shared() {
            NODE_INDEX.store(s.index_addr(), Ordering::Release);
        }
        s
    }

    /// Whether the frames are in the shared range.
    pub fn shared(&self) -> bool {
        self.inner.mem == Mem::Shared
    }

    /// The index's address (readers: [`Index::at`]).
    pub fn index_addr(&self) -> usize {
        self.inner.index.as_ptr() as usize
    }

    /// The reader's view of this store.
    pub fn index(&self) -> &'static Index {
        // SAFETY: the caller keeps reading only while the node runs (the
        // `Dmi` holding the view ends the engine, and with it the store,
        // only in `finalize`, which consumes it).
        unsafe { &*(self.index_addr() as *const Index) }
    }

    /// No more reads from the frames (a peer failed: calls must fail).
    pub fn close(&self) {
        self.inner.index().open.store(0, Ordering::Release);
    }

    /// A frame for `page` holding `bytes` (not yet valid for read).
    pub(crate) fn frame(&self, page: PageId, bytes: &[u8]) -> Frame {
        let f = self.blank(page, bytes.len(), |d| d.copy_from_slice(bytes));
        self.inner.lock().dirty.push(page);
        f
    }

    /// A zero-filled frame of `len` bytes for `page`.
    pub(crate) fn zeroed(&self, page: PageId, len: usize) -> Frame {
        let f = self.blank(page, len, |d| d.fill(0));
        self.inner.lock().dirty.push(page);
        f
    }

    fn blank(&self, page: PageId, len: usize, fill: impl FnOnce(&mut [u8])) -> Frame {
        let cap = class(len);
        let reused = self.inner.lock().free.get_mut(&cap).and_then(Vec::pop);
        let head = reused.unwrap_or_else(|| {
            let p = self
                .inner
                .mem
                .alloc(HEAD + cap)
                .expect("memory for a page frame")
                .cast::<Head>();
            self.inner.lock().all.push((p, cap));
            p
        });
        // SAFETY: the frame is ours (fresh or from the free list).
        let h = unsafe { head.as_ref() };
        // Fresh (never in the index) or retired (odd and held by the node:
        // no fast writer can take it), so this is the only writer.
        h.holder.store(NODE, Ordering::Relaxed);
        let n = h.seq.write_begin();
        h.ok.store(0, Ordering::Relaxed);
        h.wr.store(0, Ordering::Relaxed);
        h.version.store(0, Ordering::Relaxed);
        h.region.store(u64::from(page.region), Ordering::Relaxed);
        h.index.store(page.index, Ordering::Relaxed);
        h.len.store(len as u64, Ordering::Relaxed);
        // SAFETY: `cap >= len` bytes follow the head; only the engine writes.
        fill(unsafe { std::slice::from_raw_parts_mut(head.as_ptr().cast::<u8>().add(HEAD), len) });
        h.unlock(n);
        let slot = self.link(page, head);
        Frame {
            head,
            cap,
            len,
            page,
            slot,
            store: self.inner.clone(),
        }
    }

    /// Puts `head` into a free slot of `page`'s probe sequence (none free:
    /// the page is read the slow way).
    fn link(&self, page: PageId, head: NonNull<Head>) -> Option<usize> {
        let ix = self.inner.index();
        let h = hash(u64::from(page.region), page.index);
        (0..PROBES).map(|i| (h + i) % SLOTS).find(|&s| {
            let free = ix.slots[s].load(Ordering::Relaxed) == 0;
            if free {
                ix.slots[s].store(head.as_ptr() as u64, Ordering::Release);
            }
            free
        })
    }

    /// `page`'s state changed without a frame change (a write got its last
    /// acknowledgement): look at it in the next `publish`.
    pub(crate) fn touch(&self, page: PageId) {
        self.inner.lock().dirty.push(page);
    }

    /// Pages changed since the last call.
    pub(crate) fn take_dirty(&self) -> Vec<PageId> {
        std::mem::take(&mut self.inner.lock().dirty)
    }

    /// Rewrites the region table if `regions` changed since the last time.
    pub(crate) fn publish_regions(&self, regions: &Regions) {
        let mut st = self.inner.lock();
        if st.regions_gen == regions.generation() {
            return;
        }
        st.regions_gen = regions.generation();
        let all = regions.all();
        let ix = self.inner.index();
        let mut want: Vec<Option<&Region>> = vec![None; REGION_SLOTS];
        for r in &all {
            want[r.id as usize % REGION_SLOTS].get_or_insert(r);
        }
        for (slot, w) in ix.regions.iter().zip(want) {
            let (id, ps, pn) = w.map_or((0, 0, 0), |r| (u64::from(r.id), r.page_size, r.page_num));
            if slot.id.load(Ordering::Relaxed) == id && slot.page_size.load(Ordering::Relaxed) == ps
            {
                continue;
            }
            let n = slot.seq.write_begin();
            slot.id.store(id, Ordering::Relaxed);
            slot.page_size.store(ps, Ordering::Relaxed);
            slot.page_num.store(pn, Ordering::Relaxed);
            slot.seq.write_end(n);
        }
    }
}

/// The memory of one page on its node (owned or a copy).
pub(crate) struct Frame {
    head: NonNull<Head>,
    cap: usize,
    len: usize,
    page: PageId,
    slot: Option<usize>,
    store: Arc<Inner>,
}

// SAFETY: a frame is used by the engine thread that owns the node; its
// memory belongs to the store it keeps alive.
unsafe impl Send for Frame {}

impl fmt::Debug for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Frame({:?}, {} bytes)", self.page, self.len)
    }
}

impl Frame {
    fn head(&self) -> &Head {
        // SAFETY: the frame's memory lives as long as the store.
        unsafe { self.head.as_ref() }
    }

    fn data(&self) -> *mut u8 {
        // SAFETY: the data follows the head in the same allocation.
        unsafe { self.head.as_ptr().cast::<u8>().add(HEAD) }
    }

    /// The page's bytes (takes fast writes back first: the engine is then
    /// their only writer until the next grant).
    pub fn bytes(&self) -> &[u8] {
        self.revoke();
        // SAFETY: `len` bytes follow the head; nobody else writes them
        // (no grant for fast writes is out, see `revoke`).
        unsafe { std::slice::from_raw_parts(self.data(), self.len) }
    }

    pub fn to_vec(&self) -> Vec<u8> {
        self.bytes().to_vec()
    }

    /// Changes the bytes with `f`, inside a bracket that also clears the
    /// read flag (the next `publish` decides whether to set it again).
    pub fn modify<R>(&mut self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let h = self.head();
        // A fast writer may hold the frame (it finds no grant after this).
        let n = h.lock();
        h.ok.store(0, Ordering::Relaxed);
        h.wr.store(0, Ordering::Relaxed);
        // SAFETY: `len` bytes follow the head; `&mut self` is the only
        // writer; readers detect the change by the sequence word.
        let r = f(unsafe { std::slice::from_raw_parts_mut(self.data(), self.len) });
        self.head().unlock(n);
        self.store.lock().dirty.push(self.page);
        r
    }

    /// Writes `bytes` at `off`.
    pub fn write(&mut self, off: usize, bytes: &[u8]) {
        self.modify(|d| d[off..off + bytes.len()].copy_from_slice(bytes));
    }

    /// The engine would serve reads of this page locally now.
    pub fn set_readable(&self) {
        self.head().ok.store(1, Ordering::Release);
    }

    /// Whether the read flag is set (for the core's consistency check).
    pub fn readable(&self) -> bool {
        self.head().ok.load(Ordering::Relaxed) != 0
    }

    /// Grants fast writes: this node owns the page at rest, nobody else
    /// holds a copy and no access of it is under way or waiting, so a write
    /// here is the same as the engine's at the owner (`pool_write.rs`).
    /// Only after [`Frame::set_readable`].
    pub fn set_writable(&self) {
        let h = self.head();
        if h.wr.load(Ordering::Relaxed) == 0 {
            // Release: a fast writer that sees the grant sees the version
            // and every change before it.
            h.wr.store(1, Ordering::Release);
        }
    }

    /// Whether fast writes are granted (tests and the state dump).
    pub fn writable(&self) -> bool {
        self.head().wr.load(Ordering::Relaxed) != 0
    }

    /// Takes the grant for fast writes back, waiting for a fast write under
    /// way: afterwards the bytes and the version include every fast write
    /// that completed, and no other will happen until the next grant
    /// (fast writers check the grant while holding the sequence word).
    /// Marks the page for the next `publish`. True if a grant was out.
    pub fn revoke(&self) -> bool {
        let h = self.head();
        if h.wr.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let n = h.lock();
        h.wr.store(0, Ordering::Relaxed);
        h.unlock(n);
        self.store.lock().dirty.push(self.page);
        true
    }

    /// The owner's version of the page (fast writes included).
    pub fn version(&self) -> u64 {
        self.revoke();
        self.head().version.load(Ordering::Relaxed)
    }

    /// The version as it is now, leaving a grant out (for the state dump:
    /// a fast write may add to it any time).
    pub fn version_now(&self) -> u64 {
        self.head().version.load(Ordering::Relaxed)
    }

    pub fn set_version(&mut self, v: u64) {
        self.revoke();
        self.head().version.store(v, Ordering::Relaxed);
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        // Dead: an odd sequence no reader accepts, then out of the index;
        // the memory waits for the next page of its class.
        let h = self.head();
        // Live, so free unless a fast writer holds it: wait for that one.
        // The node keeps it (odd) until the frame is reused.
        h.lock();
        h.ok.store(0, Ordering::Relaxed);
        h.wr.store(0, Ordering::Relaxed);
        if let Some(s) = self.slot {
            self.store.index().slots[s].store(0, Ordering::Release);
        }
        self.store
            .lock()
            .free
            .entry(self.cap)
            .or_default()
            .push(self.head);
    }
}

#[path = "pool_fast.rs"]
mod fast;
pub(crate) use fast::FastPath;
use fast::READS;
pub use fast::{fast_reads, read_counts, set_fast_reads};

#[path = "pool_write.rs"]
mod write;
pub use write::{fast_writes, set_fast_writes, write_counts};

#[path = "pool_journal.rs"]
mod journal;
pub use journal::{stop_in_fast_write, Journal, Recovered, WriteStop};

#[cfg(test)]
#[path = "pool_test.rs"]
mod tests;
