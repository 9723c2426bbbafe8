// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! A reusable barrier for the shared range.
//!
//! Two words: `arrived` counts this round's arrivals; `generation` is the
//! futex the others sleep on. The last arrival resets `arrived`, then bumps
//! `generation` and wakes everyone (in that order, so no thread of the next
//! round can arrive before the reset).
//!
//! A member that dies before arriving leaves the others waiting: use
//! [`Barrier::wait_timeout`] where that matters.
//!
//! C header: `include/halfproc.h` (`halfproc_barrier_*`).

use core::time::Duration;

use super::futex::{self, AtomicU32, Ordering};

/// The result of [`Barrier::wait`]: exactly one waiter per round is leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarrierWaitResult(bool);

impl BarrierWaitResult {
    /// True for the waiter that completed the round.
    pub fn is_leader(&self) -> bool {
        self.0
    }
}

/// A barrier for `n` participants across members.
///
/// # Examples
///
/// ```
/// use halfproc::sync::Barrier;
/// let b = Barrier::new(1).unwrap();
/// assert!(b.wait().is_leader());
/// assert!(Barrier::new(0).is_err());
/// ```
#[repr(C)]
pub struct Barrier {
    arrived: AtomicU32,
    generation: AtomicU32,
    n: u32,
}

impl Barrier {
    /// A barrier for `n >= 1` participants.
    pub fn new(n: u32) -> crate::Result<Self> {
        if n == 0 {
            return Err(crate::Error::InvalidArgument(
                "a barrier needs at least one participant",
            ));
        }
        Ok(Barrier {
            arrived: AtomicU32::new(0),
            generation: AtomicU32::new(0),
            n,
        })
    }

    /// Waits until `n` participants have called `wait`.
    pub fn wait(&self) -> BarrierWaitResult {
        match self.wait_inner(None) {
            Some(r) => r,
            None => unreachable!("untimed barrier wait timed out"),
        }
    }

    /// Like [`wait`](Self::wait), giving up after `timeout` (`None`). A
    /// participant that gave up still counts as arrived for this round.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<BarrierWaitResult> {
        self.wait_inner(Some(std::time::Instant::now() + timeout))
    }

    fn wait_inner(&self, deadline: Option<std::time::Instant>) -> Option<BarrierWaitResult> {
        let gen = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            futex::wake(&self.generation, i32::MAX);
            return Some(BarrierWaitResult(true));
        }
        while self.generation.load(Ordering::Acquire) == gen {
            let timeout = match deadline {
                None => None,
                Some(d) => {
                    let now = std::time::Instant::now();
                    if now >= d {
                        return None;
                    }
                    Some(d - now)
                }
            };
            futex::wait(&self.generation, gen, timeout);
        }
        Some(BarrierWaitResult(false))
    }

    /// Number of participants.
    pub fn participants(&self) -> u32 {
        self.n
    }
}
