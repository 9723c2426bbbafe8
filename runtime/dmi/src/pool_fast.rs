// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The switches and counters of the pool's fast paths: reads served from
//! the frames (here) and writes into them (`pool_write.rs`), each on
//! unless its environment variable is `0`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// A fast path of this process (reads or writes through the frames): on
/// unless its environment variable is `0`, switchable at run time (the
/// benchmarks compare both), and its hits and fallbacks counted.
pub(crate) struct FastPath {
    env: &'static str,
    /// 0: not decided yet (read `env`), 1: on, 2: off.
    state: AtomicUsize,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl FastPath {
    pub(crate) const fn new(env: &'static str) -> FastPath {
        FastPath {
            env,
            state: AtomicUsize::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub(crate) fn on(&self) -> bool {
        match self.state.load(Ordering::Relaxed) {
            0 => {
                let on = std::env::var(self.env).map_or(true, |v| v != "0");
                self.set(on);
                on
            }
            v => v == 1,
        }
    }

    pub(crate) fn set(&self, on: bool) {
        self.state.store(if on { 1 } else { 2 }, Ordering::Relaxed);
    }

    /// Counts one try; returns `hit`.
    pub(crate) fn count(&self, hit: bool) -> bool {
        let n = if hit { &self.hits } else { &self.misses };
        n.fetch_add(1, Ordering::Relaxed);
        hit
    }

    /// (hits, fallbacks) so far.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }
}

/// Reads served from frames, and reads that fell back (`DMI_FAST_READS=0`:
/// off).
pub(super) static READS: FastPath = FastPath::new("DMI_FAST_READS");
/// Whether reads in this process try the frames first.
pub fn fast_reads() -> bool {
    READS.on()
}

/// Turns reads from the frames on or off for this process (the benchmark
/// compares both; `DMI_FAST_READS=0` starts with off).
pub fn set_fast_reads(on: bool) {
    READS.set(on);
}

/// (reads served from frames, reads that took the slow path) in this
/// process so far.
pub fn read_counts() -> (u64, u64) {
    READS.counts()
}
