// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Write hits without the engine: a `DMI_write` (EXCLUSIVE or PUT) whose
//! pages this node owns at rest with nobody else holding them is applied
//! straight to the frames by the caller, from the node's program or from a
//! compute instance (`docs/dmi.md`, "Fast writes").
//!
//! **The grant.** At the end of a step the engine marks a page
//! exclusive-writable ([`super::Frame::set_writable`], `Node::publish`)
//! only when it would apply a write there at once and answer it without
//! telling anybody: this node owns it, the copyset is empty, no write waits
//! for acknowledgements, nothing is queued or awaited, and no membership
//! change is under way. Before the engine reads or changes an owned page
//! (a remote GET or Fetch, a write, a transfer, a swap, a handover) it
//! takes the grant back ([`super::Frame::revoke`]): it takes the frame's
//! sequence word like any writer, clears the flag, and lets go.
//!
//! **A fast write.** For every page it touches: find the frame, take its
//! holder word by compare-and-swap (writers and the engine exclude each
//! other; the value names the writer), and check, holding it, that the
//! frame is still this page's and granted; if any page fails, let go of
//! all and take the engine's path with the whole call. Then make the
//! sequence words odd, copy the bytes, add one to the version per page part
//! (as the engine's `propagate` does), and let go (a new even value:
//! readers of the frames retry). A write whose grant check passed holding
//! the frame comes before the engine's revoke (which waits for the holder
//! word), so the engine sends on and reads the page with it; one that finds
//! the grant gone goes to the engine and queues behind whatever took it.
//! Either way the write takes effect at one instant in the engine's order
//! of the page's accesses, which keeps every page sequentially consistent.
//!
//! A compute instance writes with its journal (`pool_journal.rs`): it
//! records the frames it takes and, before changing any, the new bytes, so
//! that its node completes the write, or finds it never began, if the
//! instance dies holding them.

use std::sync::atomic::Ordering;

use super::journal::{stop, stop_armed, Journal, WriteStop};
use super::{FastPath, Head, Index, ATTEMPTS, FREE, HEAD, NODE, PROBES, SLOTS};

/// Writes applied to the frames, and writes that took the engine's path
/// (`DMI_FAST_WRITES=0`: off).
static WRITES: FastPath = FastPath::new("DMI_FAST_WRITES");

/// Whether writes in this process try the frames first.
pub fn fast_writes() -> bool {
    WRITES.on()
}

/// Turns fast writes on or off for this process (the benchmark compares
/// both; `DMI_FAST_WRITES=0` starts with off).
pub fn set_fast_writes(on: bool) {
    WRITES.set(on);
}

/// (writes applied to the frames, writes that took the engine's path) in
/// this process so far.
pub fn write_counts() -> (u64, u64) {
    WRITES.counts()
}

/// A frame this writer holds (its sequence word odd, value `n`).
struct Held<'a> {
    head: &'a Head,
    /// The frame's start (the data follows at [`HEAD`]).
    base: *mut u8,
    n: u64,
}

impl Index {
    /// Writes every `(addr, bytes)` item into the frames if this node may
    /// write all the pages they touch without the engine (see the module
    /// doc); false: nothing was written, take the engine's path. For
    /// threads of the node process (they die with the node).
    pub fn write(&self, items: &[(i64, &[u8])]) -> bool {
        WRITES.count(self.try_write(items, None))
    }

    /// [`Index::write`] from a compute instance, with its journal (in its
    /// mailbox): the node finishes or drops the write if the instance dies
    /// in it (`pool_journal.rs`).
    pub fn write_journaled(&self, items: &[(i64, &[u8])], journal: &Journal) -> bool {
        WRITES.count(self.try_write(items, Some(journal)))
    }

    fn try_write(&self, items: &[(i64, &[u8])], journal: Option<&Journal>) -> bool {
        if items.is_empty() || self.open.load(Ordering::Acquire) == 0 {
            return false;
        }
        if let Some(j) = journal {
            j.open();
        }
        let who = journal.map_or(NODE, Journal::id);
        let mut held: Vec<Held<'_>> = Vec::new();
        // (frame in `held`, offset in the page, bytes)
        let mut parts: Vec<(usize, usize, &[u8])> = Vec::new();
        let mut all = items.iter().all(|&(addr, buf)| {
            self.each_page(addr, buf.len(), |id, index, at, part| {
                let Some(k) = self.hold(id, index, who, journal, &mut held) else {
                    return false;
                };
                if held[k].head.len.load(Ordering::Relaxed) < at + part.len() as u64 {
                    return false;
                }
                parts.push((k, at as usize, &buf[part]));
                true
            })
        });
        if let (true, Some(j)) = (all, journal) {
            if stop_armed(WriteStop::Held) {
                stop();
            }
            all = j.commit(&parts);
        }
        if all {
            for (i, &(k, at, bytes)) in parts.iter().enumerate() {
                let (h, base) = (held[k].head, held[k].base);
                let mut from = 0;
                if i == 0 && journal.is_some() && stop_armed(WriteStop::Torn) {
                    from = bytes.len() / 2;
                    // SAFETY: as below, the first half.
                    unsafe {
                        std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(HEAD + at), from)
                    };
                    stop();
                }
                // SAFETY: the frame has at least `at + bytes.len()` bytes
                // after its head (checked against `len` holding it); this
                // writer holds it and the engine's grant, so nobody else
                // writes them; readers see the odd word.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        bytes.as_ptr().add(from),
                        base.add(HEAD + at + from),
                        bytes.len() - from,
                    )
                };
                let v = h.version.load(Ordering::Relaxed);
                h.version.store(v + 1, Ordering::Relaxed);
            }
        }
        for h in held {
            h.head.unlock(h.n);
        }
        if let Some(j) = journal {
            j.close();
        }
        all
    }

    /// Takes `(region, index)`'s frame if the engine granted fast writes on
    /// it (or finds it among those held already): holder word `who`, then
    /// an odd sequence word. Its place in `held`, or None (busy, not
    /// granted, not here, no room in the journal).
    fn hold<'a>(
        &'a self,
        region: u64,
        index: u64,
        who: u64,
        journal: Option<&Journal>,
        held: &mut Vec<Held<'a>>,
    ) -> Option<usize> {
        let mine = |h: &Head| {
            h.region.load(Ordering::Relaxed) == region && h.index.load(Ordering::Relaxed) == index
        };
        if let Some(k) = held.iter().position(|h| mine(h.head)) {
            return Some(k);
        }
        let h = super::hash(region, index);
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
                if head.seq.read_begin().is_none() {
                    raced = true;
                    continue;
                }
                if !mine(head) {
                    continue;
                }
                if head.wr.load(Ordering::Relaxed) == 0 {
                    return None;
                }
                if journal.is_some_and(|j| !j.record_frame(held.len(), head)) {
                    return None;
                }
                // AcqRel: the journal's record of the frame is before it
                // (release), the previous holder's changes after (acquire).
                if head
                    .holder
                    .compare_exchange(FREE, who, Ordering::AcqRel, Ordering::Relaxed)
                    .is_err()
                {
                    raced = true;
                    continue;
                }
                // Holding the frame: the page, the read flag and the grant
                // change only under it (a grant is set outside, after the
                // engine's last change: Acquire pairs with its Release).
                if mine(head)
                    && head.wr.load(Ordering::Acquire) != 0
                    && head.ok.load(Ordering::Relaxed) != 0
                {
                    // The holder word excludes every other writer.
                    let n = head.seq.write_begin();
                    if let Some(j) = journal {
                        j.record_version(held.len(), head.version.load(Ordering::Relaxed));
                    }
                    held.push(Held {
                        head,
                        base: p as *mut u8,
                        n,
                    });
                    return Some(held.len() - 1);
                }
                head.holder.store(FREE, Ordering::Release);
                return None;
            }
            if !raced {
                return None;
            }
            std::hint::spin_loop();
        }
        None
    }
}

#[cfg(test)]
#[path = "pool_write_test.rs"]
mod tests;
