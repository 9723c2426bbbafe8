// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The control block the writer and the reader share, and its doorbells.
//!
//! The block lives in a `MAP_SHARED` anonymous page created before the
//! reader is spawned (shmem: its futex keys are inode-based, so a wait in one
//! process and a wake in the other match on every backend, unlike plain
//! anonymous memory of the shared range; see the kernel field notes). It is
//! deliberately *not* in the shared range: the control path must not depend
//! on the mechanism being measured.
//!
//! A [`Bell`] is a monotonically advancing `u32` with a waiter flag: the
//! waiter spins for a while (only when the peer runs on another core), then
//! sleeps on a futex; the ringer wakes only when the waiter flag is set, so
//! the uncontended path is two atomic operations. Lost wake-ups are
//! excluded by the SeqCst store/load pairs: the ringer stores the value and
//! then loads the flag; the waiter stores the flag and then loads the
//! value, so at least one of them sees the other's store, and `FUTEX_WAIT`
//! re-checks the value atomically in the kernel.
//!
//! Protocol of one measurement (W = writer, R = reader):
//! ```text
//! W: fill d (untimed); publish size, seed; ring `cmd`
//! R: wait `cmd`; prepare (poison its buffer, reset head/tail); ring `ready`
//! W: wait `ready`; t0 = now; publish t0; ring `go`; send part (timed)
//! R: wait `go`; receive part + checksum (timed); t1 = now;
//!    publish t1 - t0; compare the checksum with the seed's; ring `done`
//! W: wait `done`; read the result
//! ```

use crate::error::{Error, Result};
use crate::os;
use halfproc_sys::{futex, Region};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};

/// How long a waiter spins before it sleeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Spin iterations before `FUTEX_WAIT`; 0 when both processes share a
    /// core (spinning would only steal the peer's time slice).
    pub spins: u32,
    /// Give up after this long (ns) with no progress from the peer.
    pub timeout_ns: u64,
}

impl WaitPolicy {
    /// The policy for a placement: spin only across cores.
    pub fn for_same_core(same_core: bool) -> WaitPolicy {
        WaitPolicy {
            spins: if same_core { 0 } else { 200_000 },
            timeout_ns: 600 * 1_000_000_000,
        }
    }
}

/// A doorbell: see the module documentation.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct Bell {
    value: AtomicU32,
    waiters: AtomicU32,
}

impl Bell {
    /// The current value.
    #[inline]
    pub fn get(&self) -> u32 {
        self.value.load(Acquire)
    }

    /// Set the value and wake a sleeping waiter.
    #[inline]
    pub fn set(&self, v: u32) {
        self.value.store(v, SeqCst);
        if self.waiters.load(SeqCst) != 0 {
            self.wake();
        }
    }

    /// Advance the value by one.
    #[inline]
    pub fn ring(&self) {
        self.set(self.value.load(Relaxed).wrapping_add(1));
    }

    #[cold]
    fn wake(&self) {
        futex::wake(&self.value, 1);
    }

    /// Wait until `ok(value)` holds; `alive` is asked whenever a sleep
    /// times out, so that a dead peer ends the wait with an error.
    #[inline]
    pub fn wait_until(
        &self,
        policy: WaitPolicy,
        alive: &dyn Fn() -> bool,
        ok: impl Fn(u32) -> bool,
    ) -> Result<u32> {
        let v = self.value.load(Acquire);
        if ok(v) {
            return Ok(v);
        }
        self.wait_slow(policy, alive, &ok)
    }

    #[cold]
    fn wait_slow(
        &self,
        policy: WaitPolicy,
        alive: &dyn Fn() -> bool,
        ok: &dyn Fn(u32) -> bool,
    ) -> Result<u32> {
        for _ in 0..policy.spins {
            std::hint::spin_loop();
            let v = self.value.load(Acquire);
            if ok(v) {
                return Ok(v);
            }
        }
        let start = os::now_ns();
        loop {
            self.waiters.store(1, SeqCst);
            let v = self.value.load(SeqCst);
            if ok(v) {
                self.waiters.store(0, Relaxed);
                return Ok(v);
            }
            futex::wait(&self.value, v, Some(std::time::Duration::from_millis(100)));
            self.waiters.store(0, Relaxed);
            let v = self.value.load(Acquire);
            if ok(v) {
                return Ok(v);
            }
            if self.value.load(Relaxed) == v && !alive() {
                return Err(Error::Verify("the peer process died".into()));
            }
            if os::now_ns() - start > policy.timeout_ns {
                return Err(Error::Verify(format!(
                    "the peer did not answer within {} s",
                    policy.timeout_ns / 1_000_000_000
                )));
            }
        }
    }
}

/// A shared counter from which both processes claim work items.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct Counter(AtomicU32);

impl Counter {
    /// Claim the next item: returns its index.
    #[inline]
    pub fn take(&self) -> u32 {
        self.0.fetch_add(1, AcqRel)
    }

    /// Start again from item 0.
    pub fn reset(&self) {
        self.0.store(0, Release);
    }
}

/// Commands from the writer.
pub const CMD_MEASURE: u64 = 1;
/// Tell the reader to exit.
pub const CMD_QUIT: u64 = 2;

/// The shared control block.
#[repr(C)]
#[derive(Debug, Default)]
pub struct Control {
    /// W -> R: a new command is published.
    pub cmd: Bell,
    /// R -> W: prepared, waiting for `go`.
    pub ready: Bell,
    /// W -> R: the timer started.
    pub go: Bell,
    /// R -> W: the result is published.
    pub done: Bell,
    /// W -> R: chunks (or whole transfers) made available, per measurement.
    pub head: Bell,
    /// R -> W: chunks consumed (bounce slots free again), per measurement.
    pub tail: Bell,
    /// Both: next unclaimed chunk (push-pull strategies), per measurement.
    pub claim: Counter,
    /// Command: [`CMD_MEASURE`] or [`CMD_QUIT`].
    pub op: AtomicU64,
    /// Bytes to move.
    pub size: AtomicU64,
    /// Pattern seed of this measurement.
    pub seed: AtomicU64,
    /// Timer start, `CLOCK_MONOTONIC` ns, taken by the writer.
    pub t0: AtomicU64,
    /// Result: `t1 - t0` in ns.
    pub elapsed: AtomicU64,
    /// Result: 1 if the reader's checksum matched the seed's.
    pub verified: AtomicU64,
    /// Result: the reader's checksum (for the error message).
    pub checksum: AtomicU64,
    /// Result: 0, or the errno of a failed system call on the reader's side.
    pub reader_errno: AtomicU64,
    /// Writer pid.
    pub writer_pid: AtomicU64,
    /// Reader pid.
    pub reader_pid: AtomicU64,
    /// Address of the writer's `d` (for pulls: `dmread`, `cma`).
    pub src_addr: AtomicU64,
    /// Address of the reader's receive buffer (for pushes: `dmwrite`).
    pub dst_addr: AtomicU64,
}

/// A [`Control`] in its own shared page.
///
/// # Invariants
///
/// `region` is a shared, zero-initialised mapping of at least
/// `size_of::<Control>()` bytes, page-aligned (so aligned for `Control`).
#[derive(Debug)]
pub struct SharedControl {
    region: Region,
}

impl SharedControl {
    /// A fresh block, inherited by members spawned after this call.
    pub fn new() -> Result<SharedControl> {
        let region = Region::shared_anon(std::mem::size_of::<Control>())?;
        // INVARIANT: shared anonymous memory is zero-filled and page-aligned.
        Ok(SharedControl { region })
    }

    /// The block.
    pub fn get(&self) -> &Control {
        // SAFETY: by the type invariant the memory is large and aligned
        // enough; all-zero bytes are a valid `Control` (atomics only), and
        // every field is an atomic, so concurrent access from the other
        // process is fine.
        unsafe { &*(self.region.addr() as *const Control) }
    }
}
