// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! A sequence counter (seqlock) for one writer and lock-free readers in any
//! member: the writer changes the data it guards between
//! [`SeqCount::write_begin`] and [`SeqCount::write_end`]; a reader copies
//! the data without any lock and keeps the copy only if
//! [`SeqCount::read_valid`] says no change overlapped it.
//!
//! Even: stable; odd: being changed (or retired: a writer may leave a
//! counter odd, and a later `write_begin` takes it on). The value only ever
//! grows, so a reader that saw `s` before and after its copy knows that
//! nothing was written in between, even if the guarded memory was reused
//! for something else under the same counter meanwhile.
//!
//! Ordering (the standard seqlock; H.-J. Boehm, "Can seqlocks get along
//! with programming language memory models?", 2012): the odd store is
//! followed by a release fence, so no store of the change becomes visible
//! before it; the even store is a release, so every store of the change
//! is visible before it. The reader's first load is an acquire; its
//! acquire fence before the second load orders the data loads before it.
//! If both loads return the same even value, none of the data loads saw a
//! store of a change. Readers that copy the data with plain `memcpy` (as
//! Linux's seqlocks and crossbeam's `AtomicCell` do) throw a raced copy
//! away; the loom model (`tests/loom.rs`) uses atomic data words.
//!
//! Several writers (e.g. `dmi`'s engine and the fast writers of its page
//! frames) take the counter with [`SeqCount::write_lock`] or
//! [`SeqCount::try_write_begin`]: a compare-and-swap from an even value to
//! the next odd one, so exactly one wins; the acquire on it pairs with the
//! previous writer's `write_end`. [`SeqCount::write_begin`] stays for a
//! sole writer (or one taking over a counter nobody else can take: a
//! retired one, left odd).
//!
//! There is no futex: readers never wait for the writer, they retry or
//! give up (the caller decides); `write_lock` spins (then yields) while
//! another writer holds the counter.
//!
//! # Examples
//!
//! ```
//! use halfproc::sync::SeqCount;
//! let c = SeqCount::new();
//! assert_eq!(c.read_begin(), None, "never written");
//! let n = c.write_begin();
//! assert_eq!(c.read_begin(), None, "being written");
//! c.write_end(n);
//! let s = c.read_begin().unwrap();
//! assert!(c.read_valid(s));
//! c.write_end(c.write_begin());
//! assert!(!c.read_valid(s));
//! ```

#[cfg(not(loom))]
use core::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicU64, Ordering};

/// A sequence counter; all-zero ("never written") is its initial state.
#[repr(transparent)]
pub struct SeqCount {
    seq: AtomicU64,
}

impl Default for SeqCount {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for SeqCount {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SeqCount({})", self.seq.load(Ordering::Relaxed))
    }
}

impl SeqCount {
    /// A counter that was never written (readers get nothing yet).
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        SeqCount {
            seq: AtomicU64::new(0),
        }
    }

    /// A counter that was never written.
    #[cfg(loom)]
    pub fn new() -> Self {
        SeqCount {
            seq: AtomicU64::new(0),
        }
    }

    /// Starts a change; returns the odd value for [`SeqCount::write_end`].
    /// Only one writer may use a counter (the caller ensures it), or, with
    /// several, only the one that holds it already (a retired counter: no
    /// [`SeqCount::try_write_begin`] can take an odd value).
    #[inline]
    pub fn write_begin(&self) -> u64 {
        let n = (self.seq.load(Ordering::Relaxed) + 1) | 1;
        self.seq.store(n, Ordering::Relaxed);
        fence(Ordering::Release);
        n
    }

    /// Starts a change if the counter still reads `s` (an even value from
    /// [`SeqCount::read_begin`]): the odd value for
    /// [`SeqCount::write_end`], or `None` when anything changed since or a
    /// change is under way. Several writers may race with this: exactly one
    /// wins each even value, so writers that all use it (or
    /// [`SeqCount::write_lock`]) exclude each other.
    #[inline]
    pub fn try_write_begin(&self, s: u64) -> Option<u64> {
        if s & 1 != 0 {
            return None;
        }
        self.seq
            .compare_exchange(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        fence(Ordering::Release);
        Some(s + 1)
    }

    /// Starts a change among several writers: waits (spinning) while
    /// another writer's change is under way, then takes the counter like
    /// [`SeqCount::try_write_begin`]. The counter must not be retired (left
    /// odd for good): that waits forever.
    #[inline]
    pub fn write_lock(&self) -> u64 {
        let mut spins = 0u32;
        loop {
            let s = self.seq.load(Ordering::Relaxed);
            if let Some(n) = self.try_write_begin(s) {
                return n;
            }
            spins += 1;
            if spins < 64 {
                core::hint::spin_loop();
            } else {
                #[cfg(not(loom))]
                std::thread::yield_now();
                #[cfg(loom)]
                loom::thread::yield_now();
            }
        }
    }

    /// Ends the change `write_begin` returned `n` for.
    #[inline]
    pub fn write_end(&self, n: u64) {
        self.seq.store(n + 1, Ordering::Release);
    }

    /// Starts a read: the value to validate against, or `None` while a
    /// change is under way (or before the first one ended).
    #[inline]
    pub fn read_begin(&self) -> Option<u64> {
        let s = self.seq.load(Ordering::Acquire);
        (s & 1 == 0 && s != 0).then_some(s)
    }

    /// Whether nothing changed since `read_begin` returned `s`.
    #[inline]
    pub fn read_valid(&self, s: u64) -> bool {
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) == s
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn values_grow_and_a_retired_counter_is_taken_on() {
        let c = SeqCount::new();
        let n = c.write_begin();
        assert_eq!(n, 1);
        c.write_end(n);
        let v = c.read_begin().unwrap();
        let d = c.write_begin();
        assert!(!c.read_valid(v));
        let n = c.write_begin();
        assert!(n > d && n % 2 == 1);
        c.write_end(n);
        assert!(c.read_begin().unwrap() > v);
    }

    /// Writers that take the counter with `write_lock` and
    /// `try_write_begin` exclude each other: plain increments under it are
    /// never lost, and a failed `try_write_begin` changes nothing.
    #[test]
    fn locking_writers_exclude_each_other() {
        struct Cell {
            seq: SeqCount,
            n: core::cell::UnsafeCell<u64>,
        }
        // SAFETY: `n` is only touched by the writer holding `seq`.
        unsafe impl Sync for Cell {}
        let c = Arc::new(Cell {
            seq: SeqCount::new(),
            n: core::cell::UnsafeCell::new(0),
        });
        c.seq.write_end(c.seq.write_begin());
        let ts: Vec<_> = (0..3)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    let mut done = 0u64;
                    for _ in 0..20_000 {
                        let n = if t == 0 {
                            Some(c.seq.write_lock())
                        } else {
                            c.seq.read_begin().and_then(|s| c.seq.try_write_begin(s))
                        };
                        if let Some(n) = n {
                            // SAFETY: this writer holds the counter.
                            unsafe { *c.n.get() += 1 };
                            done += 1;
                            c.seq.write_end(n);
                        }
                    }
                    done
                })
            })
            .collect();
        let done: u64 = ts.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(done >= 20_000);
        // SAFETY: every writer is gone.
        assert_eq!(unsafe { *c.n.get() }, done, "an increment was lost");
        assert!(c.seq.read_begin().is_some(), "left held");
    }

    /// One writer keeps rewriting 64 words with one value while readers
    /// copy them with plain (volatile) loads: every accepted copy is whole.
    /// The writer starts once both readers run and goes on until each has
    /// accepted a copy taken while it wrote (and at least 200,000 writes):
    /// a fixed count of writes could end before a reader was scheduled at
    /// all on a loaded machine (seen in CI: "no reader ever got a copy").
    #[test]
    fn readers_never_accept_a_torn_copy() {
        use std::sync::atomic::AtomicU64;
        use std::sync::Barrier;
        use std::time::{Duration, Instant};
        struct Cell {
            seq: SeqCount,
            data: core::cell::UnsafeCell<[u64; 64]>,
        }
        // SAFETY: one writer and the readers follow the seqlock protocol;
        // torn copies are detected and thrown away.
        unsafe impl Sync for Cell {}
        let c = Arc::new(Cell {
            seq: SeqCount::new(),
            data: core::cell::UnsafeCell::new([0; 64]),
        });
        c.seq.write_end(c.seq.write_begin());
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(Barrier::new(3));
        let accepted: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let readers: Vec<_> = (0..2)
            .map(|k| {
                let (c, stop) = (c.clone(), stop.clone());
                let (started, accepted) = (started.clone(), accepted.clone());
                std::thread::spawn(move || {
                    started.wait();
                    while !stop.load(Ordering::Relaxed) {
                        let Some(s) = c.seq.read_begin() else {
                            continue;
                        };
                        // SAFETY: a racy copy, validated below.
                        let v: [u64; 64] = unsafe { core::ptr::read_volatile(c.data.get()) };
                        if c.seq.read_valid(s) {
                            assert!(v.iter().all(|&x| x == v[0]), "torn copy {v:?}");
                            accepted[k].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        started.wait();
        let (t0, limit) = (Instant::now(), Duration::from_secs(60));
        let mut writes = 0u64;
        loop {
            writes += 1;
            let n = c.seq.write_begin();
            // SAFETY: the one writer, inside its bracket.
            unsafe { core::ptr::write_volatile(c.data.get(), [writes; 64]) };
            c.seq.write_end(n);
            let each = accepted.iter().all(|a| a.load(Ordering::Relaxed) > 0);
            if (writes >= 200_000 && each) || t0.elapsed() > limit {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        readers.into_iter().for_each(|r| r.join().unwrap());
        let got: Vec<u64> = accepted.iter().map(|a| a.load(Ordering::Relaxed)).collect();
        assert!(
            got.iter().all(|&n| n > 0),
            "readers accepted {got:?} copies during {writes} writes in {:?}",
            t0.elapsed()
        );
    }
}
