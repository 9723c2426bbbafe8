// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! A compute instance's write journal: what its node needs to finish or
//! undo a fast write (`pool_write.rs`) when the instance dies in it
//! (`docs/dmi.md`, "Fast writes", "A writer that dies").
//!
//! A fast write holds every frame it changes (the frame's holder word names
//! the writer, then its sequence word is odd); readers and the engine wait
//! or take the slow path meanwhile. An instance SIGKILLed there would leave
//! its frames held and, if it had started copying, torn. So an instance
//! writes with a journal in its mailbox (shared range) and the node, once
//! the instance's receiver finds it dead, applies [`Journal::recover`]:
//!
//! 1. **Open.** Before it takes any frame the writer marks the journal
//!    open; before each compare-and-swap of a holder word it records that
//!    frame. Its holder value is the journal's address, so a recorded frame
//!    whose holder is that value is one the dead writer held (a frame it
//!    failed to take, or already let go, holds another value).
//! 2. **Commit.** Holding every frame (each checked: still this page's,
//!    readable, granted) and with each version recorded, the writer copies
//!    the new bytes into the journal, records every page part (frame,
//!    offset, length, place in the journal) and marks the journal
//!    committed. Only then does it change a frame.
//! 3. **Copy, let go, close.** Bytes into the frames, one version step per
//!    part, every frame let go (even word, holder free), journal closed.
//!
//! Recovery, for each recorded frame the dead writer still holds: if the
//! journal was committed, copy every part of that frame from the journal
//! again and set its version to the recorded one plus its parts (a redo:
//! idempotent, so a frame it had already written is unchanged by it);
//! otherwise the frame was not changed. Then end the bracket (a new even
//! word) and free the holder. So a write whose writer died is all or
//! nothing: it happened at its commit (no other access of those pages can
//! come between, they were held throughout) or it did not happen; a reader
//! never accepted any of its bytes before the frame was let go.
//!
//! The writer's stores before its death are in memory when the node
//! recovers: the kernel completed the process's exit before its status
//! reached the receiver. Program order is what matters: recording a frame
//! comes before its holder's compare-and-swap (release), committing after
//! the journal's contents (release) and before any frame byte (fence).
//!
//! A node process's own fast writes (its program's) need no journal: if
//! the process dies, its engine dies with it.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use super::{Head, FREE, HEAD};

/// Frames and page parts one journaled write may use; a write needing
/// more takes the engine's path.
const FRAMES: usize = 64;
const PARTS: usize = 256;

/// [`Journal::state`].
const IDLE: u64 = 0;
const OPEN: u64 = 1;
const COMMITTED: u64 = 2;

#[repr(C)]
#[derive(Default)]
struct Held {
    /// The frame's head.
    head: AtomicU64,
    /// Its version when the writer took it.
    version: AtomicU64,
}

#[repr(C)]
#[derive(Default)]
struct Part {
    /// Index into [`Journal::frames`].
    frame: AtomicU64,
    /// Offset in the page.
    at: AtomicU64,
    len: AtomicU64,
    /// Offset in the journal's buffer.
    off: AtomicU64,
}

/// One compute instance's write journal (in its mailbox, in the shared
/// range). Used by one writer at a time: the instance is single-threaded,
/// like its mailbox.
#[repr(C)]
pub struct Journal {
    state: AtomicU64,
    frames_used: AtomicU64,
    frames: [Held; FRAMES],
    parts_used: AtomicU64,
    parts: [Part; PARTS],
    /// The new bytes of a committed write: a buffer from the shared-arena
    /// allocator (allocated by the instance, freed by the node).
    buf: AtomicU64,
    cap: AtomicU64,
}

impl Default for Journal {
    fn default() -> Self {
        Journal {
            state: AtomicU64::new(IDLE),
            frames_used: AtomicU64::new(0),
            frames: std::array::from_fn(|_| Held::default()),
            parts_used: AtomicU64::new(0),
            parts: std::array::from_fn(|_| Part::default()),
            buf: AtomicU64::new(0),
            cap: AtomicU64::new(0),
        }
    }
}

/// What [`Journal::recover`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Recovered {
    /// Frames the dead writer held and the node let go.
    pub frames: usize,
    /// Whether its write had committed (then it was completed in those
    /// frames; otherwise they are as before it).
    pub committed: bool,
}

impl Journal {
    /// The writer's holder value in the frames it takes.
    pub(super) fn id(&self) -> u64 {
        self as *const Journal as u64
    }

    /// Step 1: a write begins (nothing recorded yet).
    pub(super) fn open(&self) {
        self.frames_used.store(0, Ordering::Relaxed);
        self.parts_used.store(0, Ordering::Relaxed);
        self.state.store(OPEN, Ordering::Relaxed);
    }

    /// Records frame `k` of this write before its holder is taken (the
    /// compare-and-swap that follows is a release); false: no room.
    pub(super) fn record_frame(&self, k: usize, head: *const Head) -> bool {
        let Some(f) = self.frames.get(k) else {
            return false;
        };
        f.head.store(head as u64, Ordering::Relaxed);
        self.frames_used.store(k as u64 + 1, Ordering::Relaxed);
        true
    }

    /// Frame `k`'s version, recorded holding it.
    pub(super) fn record_version(&self, k: usize, v: u64) {
        self.frames[k].version.store(v, Ordering::Relaxed);
    }

    /// Step 2: the parts `(frame, offset in the page, bytes)` of a write
    /// whose frames are all held and checked: copies the bytes into the
    /// journal and commits. False (nothing committed): too many parts, or no
    /// room for the buffer.
    pub(super) fn commit(&self, parts: &[(usize, usize, &[u8])]) -> bool {
        if parts.len() > PARTS {
            return false;
        }
        let total: usize = parts.iter().map(|p| p.2.len()).sum();
        let Some(buf) = self.room(total) else {
            return false;
        };
        let mut off = 0;
        for (r, &(k, at, bytes)) in self.parts.iter().zip(parts) {
            // SAFETY: `buf` has `total` bytes (`room`), only this writer
            // uses it while the journal is open; `bytes` is the caller's
            // memory, not the journal's.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.add(off), bytes.len());
            }
            r.frame.store(k as u64, Ordering::Relaxed);
            r.at.store(at as u64, Ordering::Relaxed);
            r.len.store(bytes.len() as u64, Ordering::Relaxed);
            r.off.store(off as u64, Ordering::Relaxed);
            off += bytes.len();
        }
        self.parts_used.store(parts.len() as u64, Ordering::Relaxed);
        // Everything above before the mark, the mark before any frame byte.
        self.state.store(COMMITTED, Ordering::Release);
        fence(Ordering::Release);
        true
    }

    /// Step 3: the write is over (every frame let go).
    pub(super) fn close(&self) {
        self.state.store(IDLE, Ordering::Release);
    }

    /// The journal's buffer with at least `n` bytes (grown if needed).
    fn room(&self, n: usize) -> Option<*mut u8> {
        let cap = self.cap.load(Ordering::Relaxed) as usize;
        if n > cap || self.buf.load(Ordering::Relaxed) == 0 {
            let want = n.max(4096).next_power_of_two();
            let p = halfproc::alloc::malloc(want);
            if p.is_null() {
                return None;
            }
            let old = self.buf.swap(p as u64, Ordering::Relaxed);
            self.cap.store(want as u64, Ordering::Relaxed);
            if old != 0 {
                // SAFETY: the old buffer came from halfproc's malloc here
                // and no committed write refers to it (the journal is open,
                // not committed).
                unsafe { halfproc::alloc::free(old as *mut u8) };
            }
        }
        Some(self.buf.load(Ordering::Relaxed) as *mut u8)
    }

    /// Node, once the journal's instance is dead: completes (committed) or
    /// abandons (not committed) the write it was in, and lets go of every
    /// frame it held (see the module doc). Nothing to do when it was not
    /// writing; doing it twice does nothing more.
    ///
    /// # Safety
    /// The instance that wrote with this journal is dead (no process can
    /// write with it any more), and the frames it records belong to a pool
    /// that is still mapped (frames are never unmapped while the node runs).
    pub unsafe fn recover(&self) -> Recovered {
        let mut r = Recovered::default();
        let state = self.state.load(Ordering::Acquire);
        if state == IDLE {
            return r;
        }
        r.committed = state == COMMITTED;
        let id = self.id();
        let used = (self.frames_used.load(Ordering::Relaxed) as usize).min(FRAMES);
        let parts = (self.parts_used.load(Ordering::Relaxed) as usize).min(PARTS);
        let buf = self.buf.load(Ordering::Relaxed) as *const u8;
        for (k, f) in self.frames[..used].iter().enumerate() {
            let p = f.head.load(Ordering::Relaxed) as *mut u8;
            if p.is_null() {
                continue;
            }
            // SAFETY: a frame of a live pool (caller).
            let head = unsafe { &*(p as *const Head) };
            if head.holder.load(Ordering::Acquire) != id {
                continue;
            }
            // The dead writer held it, so nobody else may change it now.
            // Its word is odd if the writer had begun its bracket (then
            // `write_begin` takes it on, like a retired counter's) or even.
            let n = head.seq.write_begin();
            if r.committed {
                let mut steps = 0;
                for q in &self.parts[..parts] {
                    if q.frame.load(Ordering::Relaxed) as usize != k {
                        continue;
                    }
                    let (at, len, off) = (
                        q.at.load(Ordering::Relaxed) as usize,
                        q.len.load(Ordering::Relaxed) as usize,
                        q.off.load(Ordering::Relaxed) as usize,
                    );
                    // SAFETY: the writer checked `at + len` against the
                    // frame's length holding it, and copied `len` bytes to
                    // `off` in the buffer before committing.
                    unsafe { std::ptr::copy_nonoverlapping(buf.add(off), p.add(HEAD + at), len) };
                    steps += 1;
                }
                let v = f.version.load(Ordering::Relaxed);
                head.version.store(v + steps, Ordering::Relaxed);
            }
            head.seq.write_end(n);
            head.holder.store(FREE, Ordering::Release);
            r.frames += 1;
        }
        self.state.store(IDLE, Ordering::Release);
        r
    }

    /// Node: frees the journal's buffer (its instance has ended and was
    /// recovered).
    ///
    /// # Safety
    /// Nothing writes with this journal any more.
    pub unsafe fn free(&self) {
        let p = self.buf.swap(0, Ordering::Relaxed);
        if p != 0 {
            // SAFETY: from halfproc's malloc (`room`), unused (caller).
            unsafe { halfproc::alloc::free(p as *mut u8) };
        }
        self.cap.store(0, Ordering::Relaxed);
    }
}

/// Test hook: where a compute instance stops itself (`SIGSTOP`) in its
/// next journaled fast write, so that a test can kill it there.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteStop {
    /// Holding every frame, checked, before committing.
    Held,
    /// Committed, half of the first part's bytes copied into its frame.
    Torn,
}

static STOP: AtomicU32 = AtomicU32::new(0);

/// Test hook: stop this process at `at` in its next journaled fast write
/// (`None`: never). Only tests use it; it costs a load per journaled write.
#[doc(hidden)]
pub fn stop_in_fast_write(at: Option<WriteStop>) {
    let v = match at {
        None => 0,
        Some(WriteStop::Held) => 1,
        Some(WriteStop::Torn) => 2,
    };
    STOP.store(v, Ordering::Relaxed);
}

/// Whether the hook wants this process stopped at `here`.
pub(super) fn stop_armed(here: WriteStop) -> bool {
    let want = match here {
        WriteStop::Held => 1,
        WriteStop::Torn => 2,
    };
    STOP.load(Ordering::Relaxed) == want
}

/// Stops this process (once: the hook is disarmed).
pub(super) fn stop() {
    STOP.store(0, Ordering::Relaxed);
    // SAFETY: raise with a valid signal number.
    unsafe { libc::raise(libc::SIGSTOP) };
}

#[cfg(test)]
#[path = "pool_journal_test.rs"]
mod tests;
