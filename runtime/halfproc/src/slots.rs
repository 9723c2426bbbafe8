// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The member table: one slot per member handle, in the shared range.
//!
//! # Protocol
//!
//! A creator claims a slot (`FREE -> CLAIMED`), forks the member, stores its
//! pid and publishes `RUNNING`. The creating process's reaper (see
//! `member::reaper`) waits for the member, stores its wait status and
//! `EXITED` (or `LOST` when somebody else's `wait()` reaped it) and wakes the
//! slot's futex; a joiner, in any member, reads the status and frees the slot
//! (`RELEASING -> FREE`, next generation). A detached member's slot is freed
//! by the reaper. A fork that fails leaves the slot `FAILED`, freed at once.
//! Each slot has a generation so stale handles are detected.

use core::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use crate::error::{Error, Result};

/// Maximum number of members alive (or unjoined) at once.
pub const MAX_MEMBERS: usize = 1024;

pub(crate) const FREE: u32 = 0;
pub(crate) const CLAIMED: u32 = 1;
pub(crate) const RUNNING: u32 = 3;
pub(crate) const EXITED: u32 = 4;
pub(crate) const FAILED: u32 = 5;
pub(crate) const RELEASING: u32 = 6;
pub(crate) const LOST: u32 = 7;

/// One member slot in the shared range.
#[repr(C)]
pub(crate) struct MemberSlot {
    pub(crate) state: AtomicU32,
    pub(crate) generation: AtomicU32,
    pub(crate) pid: AtomicI32,
    /// Raw wait status once `EXITED`.
    pub(crate) status: AtomicI32,
    pub(crate) detached: AtomicU32,
    /// The process that created the member (its parent, which reaps it).
    pub(crate) creator: AtomicI32,
}

/// The member table in the set header.
#[repr(C)]
pub(crate) struct MemberTable {
    pub(crate) slots: [MemberSlot; MAX_MEMBERS],
    /// Next slot to try when claiming.
    hint: AtomicU32,
    /// Members currently `RUNNING`.
    running: AtomicU32,
}

impl MemberTable {
    /// Claims a free slot for a member `creator` is about to fork.
    pub(crate) fn claim(&self, creator: i32) -> Result<(usize, &MemberSlot)> {
        let start = self.hint.fetch_add(1, Ordering::Relaxed) as usize;
        for i in 0..MAX_MEMBERS {
            let idx = (start + i) % MAX_MEMBERS;
            let slot = &self.slots[idx];
            if slot
                .state
                .compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                slot.detached.store(0, Ordering::Relaxed);
                slot.pid.store(0, Ordering::Relaxed);
                slot.status.store(0, Ordering::Relaxed);
                slot.creator.store(creator, Ordering::Relaxed);
                return Ok((idx, slot));
            }
        }
        Err(Error::Exhausted(
            "all member slots are in use (join or detach members)",
        ))
    }

    /// A claimed slot's member runs as `pid`.
    pub(crate) fn publish(&self, slot: &MemberSlot, pid: i32) {
        slot.pid.store(pid, Ordering::Release);
        self.running.fetch_add(1, Ordering::Relaxed);
        slot.state.store(RUNNING, Ordering::Release);
        halfproc_sys::futex::wake(&slot.state, i32::MAX);
    }

    /// The fork for a claimed slot failed: free it.
    pub(crate) fn abandon(&self, slot: &MemberSlot, gen: u32) {
        slot.state.store(FAILED, Ordering::Release);
        self.release(slot, gen);
    }

    /// The member of slot `slot`, generation `gen`, ended with wait status
    /// `raw`, or was reaped by somebody else (`None`).
    pub(crate) fn record_exit(&self, slot: &MemberSlot, gen: u32, raw: Option<i32>) {
        if slot.generation.load(Ordering::Acquire) != gen
            || slot.state.load(Ordering::Acquire) != RUNNING
        {
            return;
        }
        slot.status.store(raw.unwrap_or(0), Ordering::Release);
        self.running.fetch_sub(1, Ordering::Relaxed);
        let state = if raw.is_some() { EXITED } else { LOST };
        slot.state.store(state, Ordering::Release);
        halfproc_sys::futex::wake(&slot.state, i32::MAX);
        if slot.detached.load(Ordering::Acquire) != 0 {
            self.release(slot, gen);
        }
    }

    /// Frees an ended slot of generation `gen`; false if someone else did.
    pub(crate) fn release(&self, slot: &MemberSlot, gen: u32) -> bool {
        if slot.generation.load(Ordering::Acquire) != gen {
            return false;
        }
        let cur = slot.state.load(Ordering::Acquire);
        if !matches!(cur, EXITED | FAILED | LOST) {
            return false;
        }
        if slot
            .state
            .compare_exchange(cur, RELEASING, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        slot.generation
            .store(gen.wrapping_add(1), Ordering::Release);
        slot.detached.store(0, Ordering::Relaxed);
        slot.pid.store(0, Ordering::Relaxed);
        slot.state.store(FREE, Ordering::Release);
        true
    }

    /// Whether `pid` is a running member.
    pub(crate) fn is_running_pid(&self, pid: i32) -> bool {
        pid > 0
            && self.slots.iter().any(|s| {
                s.pid.load(Ordering::Acquire) == pid && s.state.load(Ordering::Acquire) == RUNNING
            })
    }

    /// Running members created by process `creator`.
    pub(crate) fn running_of(&self, creator: i32) -> impl Iterator<Item = i32> + '_ {
        self.slots
            .iter()
            .filter(move |s| {
                s.state.load(Ordering::Acquire) == RUNNING
                    && s.creator.load(Ordering::Acquire) == creator
            })
            .map(|s| s.pid.load(Ordering::Acquire))
    }

    /// Members currently running.
    pub(crate) fn running_count(&self) -> u32 {
        self.running.load(Ordering::Relaxed)
    }
}
