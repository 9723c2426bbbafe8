// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Loom models of the lock state machines (futexes modelled, see
//! `src/sync/futex.rs`). Run with:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p halfproc --test loom --release
//! ```
#![cfg(loom)]

use halfproc::sync::{loom_die, Condvar, LockError, Mutex, Once, RwLock, SeqCount};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

#[test]
fn mutex_excludes() {
    loom::model(|| {
        let m = Arc::new(Mutex::new(0usize));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let m = m.clone();
                thread::spawn(move || {
                    let mut g = m.lock().unwrap();
                    let v = *g;
                    thread::yield_now();
                    *g = v + 1;
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(*m.lock().unwrap(), 2);
    });
}

#[test]
fn mutex_contended_wakes_waiter() {
    loom::model(|| {
        let m = Arc::new(Mutex::new(0usize));
        let g = m.lock().unwrap();
        let m2 = m.clone();
        let h = thread::spawn(move || {
            *m2.lock().unwrap() += 1;
        });
        thread::yield_now();
        drop(g);
        h.join().unwrap();
        assert_eq!(*m.lock().unwrap(), 1);
    });
}

#[test]
fn mutex_owner_death_recovered_once() {
    loom::model(|| {
        let m = Arc::new(Mutex::new(0usize));
        let died = Arc::new(AtomicUsize::new(0));
        let (m1, d1) = (m.clone(), died.clone());
        let dier = thread::spawn(move || {
            let mut g = m1.lock().unwrap_or_else(|e| e.into_inner().unwrap());
            *g = 7;
            std::mem::forget(g);
            d1.store(1, Ordering::SeqCst);
            loom_die();
        });
        let m2 = m.clone();
        let other = thread::spawn(move || match m2.lock() {
            Ok(g) => *g,
            Err(LockError::OwnerDied(g)) => *g + 100,
            Err(LockError::NotMember) => unreachable!(),
        });
        dier.join().unwrap();
        let seen = other.join().unwrap();
        // Either the other thread ran first (0) or it recovered the dead
        // owner's lock and saw its write (107); never a clean 7.
        assert!(seen == 0 || seen == 107, "saw {seen}");
        if seen == 0 {
            // The dead owner took it after; recovering now must report it.
            assert!(matches!(m.lock(), Err(LockError::OwnerDied(_))));
        }
        assert!(m.lock().is_ok());
    });
}

#[test]
fn condvar_no_lost_wakeup() {
    loom::model(|| {
        let pair = Arc::new((Mutex::new(false), Condvar::new()));
        let p2 = pair.clone();
        let h = thread::spawn(move || {
            *p2.0.lock().unwrap() = true;
            p2.1.notify_one();
        });
        let mut g = pair.0.lock().unwrap();
        while !*g {
            g = pair.1.wait(g).unwrap();
        }
        drop(g);
        h.join().unwrap();
    });
}

#[test]
fn once_runs_once() {
    loom::model(|| {
        let o = Arc::new((Once::new(), AtomicUsize::new(0)));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let o = o.clone();
                thread::spawn(move || {
                    o.0.call_once(|| {
                        o.1.fetch_add(1, Ordering::SeqCst);
                    })
                    .unwrap();
                    assert_eq!(o.1.load(Ordering::SeqCst), 1);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    });
}

#[test]
fn rwlock_writer_excludes_reader() {
    loom::model(|| {
        let l = Arc::new(RwLock::new((0usize, 0usize)));
        let l2 = l.clone();
        let w = thread::spawn(move || {
            let mut g = l2.write().unwrap();
            g.0 += 1;
            thread::yield_now();
            g.1 += 1;
        });
        let g = l.read().unwrap();
        assert_eq!(g.0, g.1);
        drop(g);
        w.join().unwrap();
        assert_eq!(*l.read().unwrap(), (1, 1));
    });
}

/// A seqlock-guarded frame (page id and two data words, always written as
/// a pair) that its one writer changes, retires (leaves odd) and reuses for
/// another page, while a reader takes one snapshot: an accepted snapshot is
/// never torn, and never mixes one page's id with another's data.
#[test]
fn seqlock_snapshot_is_whole_and_of_its_page() {
    loom::model(|| {
        let f = Arc::new((
            SeqCount::new(),
            AtomicUsize::new(1),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
        ));
        let n = f.0.write_begin();
        f.0.write_end(n);
        let w = f.clone();
        let writer = thread::spawn(move || {
            let n = w.0.write_begin();
            w.2.store(1, Ordering::Relaxed);
            w.3.store(1, Ordering::Relaxed);
            w.0.write_end(n);
            // Retired (page 1 dropped), then reused for page 2.
            w.0.write_begin();
            let n = w.0.write_begin();
            w.1.store(2, Ordering::Relaxed);
            w.2.store(20, Ordering::Relaxed);
            w.3.store(20, Ordering::Relaxed);
            w.0.write_end(n);
        });
        if let Some(s) = f.0.read_begin() {
            let page = f.1.load(Ordering::Relaxed);
            let (a, b) = (f.2.load(Ordering::Relaxed), f.3.load(Ordering::Relaxed));
            if f.0.read_valid(s) {
                assert_eq!(a, b, "torn snapshot");
                match page {
                    1 => assert!(a <= 1, "page 1 with page 2's data {a}"),
                    2 => assert_eq!(a, 20, "page 2 with page 1's data"),
                    p => panic!("page {p}"),
                }
            }
        }
        writer.join().unwrap();
    });
}

/// A page frame as `dmi`'s pool keeps it for fast writes (`pool.rs`,
/// `pool_write.rs`): the holder word (who may change it: free, the node
/// process, or an instance), the sequence word, the engine's grant, two
/// data words always written as a pair, and the version.
struct WFrame {
    holder: AtomicUsize,
    seq: SeqCount,
    wr: AtomicUsize,
    data: [AtomicUsize; 2],
    version: AtomicUsize,
}

const FREE: usize = 0;
const NODE: usize = 1;
/// An instance's holder value (its journal's address in `dmi`).
const INST: usize = 2;

impl WFrame {
    /// Granted, at version 0, data (0, 0).
    fn granted() -> Arc<WFrame> {
        let f = Arc::new(WFrame {
            holder: AtomicUsize::new(FREE),
            seq: SeqCount::new(),
            wr: AtomicUsize::new(0),
            data: [AtomicUsize::new(0), AtomicUsize::new(0)],
            version: AtomicUsize::new(0),
        });
        let n = f.seq.write_begin();
        f.seq.write_end(n);
        f.wr.store(1, Ordering::Release);
        f
    }

    /// `Head::lock`: the engine takes the frame (waits for its holder).
    fn lock(&self) -> u64 {
        while self
            .holder
            .compare_exchange(FREE, NODE, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            thread::yield_now();
        }
        self.seq.write_begin()
    }

    /// `Head::unlock`.
    fn unlock(&self, n: u64) {
        self.seq.write_end(n);
        self.holder.store(FREE, Ordering::Release);
    }

    /// Takes the frame for a fast write as `who` if granted (`Index::hold`):
    /// the odd sequence value, or None (take the engine's path).
    fn hold(&self, who: usize) -> Option<u64> {
        self.seq.read_begin()?;
        if self.wr.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.holder
            .compare_exchange(FREE, who, Ordering::AcqRel, Ordering::Relaxed)
            .ok()?;
        if self.wr.load(Ordering::Acquire) == 0 {
            self.holder.store(FREE, Ordering::Release);
            return None;
        }
        Some(self.seq.write_begin())
    }

    /// `Index::write` on one page: true if written, false if it must take
    /// the engine's path (nothing written).
    fn fast_write(&self, v: usize) -> bool {
        let Some(n) = self.hold(NODE) else {
            return false;
        };
        self.data[0].store(v, Ordering::Relaxed);
        self.data[1].store(v, Ordering::Relaxed);
        let ver = self.version.load(Ordering::Relaxed);
        self.version.store(ver + 1, Ordering::Relaxed);
        self.unlock(n);
        true
    }

    /// `Frame::revoke`.
    fn revoke(&self) {
        if self.wr.load(Ordering::Relaxed) == 0 {
            return;
        }
        let n = self.lock();
        self.wr.store(0, Ordering::Relaxed);
        self.unlock(n);
    }

    /// A reader's snapshot (`Index::read`): the pair, if accepted.
    fn read(&self) -> Option<(usize, usize)> {
        let s = self.seq.read_begin()?;
        let a = self.data[0].load(Ordering::Relaxed);
        let b = self.data[1].load(Ordering::Relaxed);
        self.seq.read_valid(s).then_some((a, b))
    }
}

/// A fast write racing the engine, which takes the grant back (a remote
/// GET or Fetch arrived), copies the page for the remote node, and then
/// writes the page itself (`Frame::modify`, holding the word): the fast
/// write is in the engine's copy with its version, or it did not happen
/// (and took the engine's path); it never lands after the revoke, and the
/// engine's own write is never lost under it.
#[test]
fn fast_write_is_before_the_revoke_or_not_at_all() {
    loom::model(|| {
        let f = WFrame::granted();
        let w = f.clone();
        let writer = thread::spawn(move || w.fast_write(1));
        f.revoke();
        let copy = (
            f.data[0].load(Ordering::Relaxed),
            f.data[1].load(Ordering::Relaxed),
            f.version.load(Ordering::Relaxed),
        );
        let n = f.lock();
        f.data[0].store(2, Ordering::Relaxed);
        f.data[1].store(2, Ordering::Relaxed);
        f.unlock(n);
        let wrote = writer.join().unwrap();
        if wrote {
            assert_eq!(
                copy,
                (1, 1, 1),
                "a completed fast write missing after the revoke"
            );
        } else {
            assert_eq!(
                copy,
                (0, 0, 0),
                "a fast write that fell back changed the page"
            );
        }
        let end = (
            f.data[0].load(Ordering::Relaxed),
            f.data[1].load(Ordering::Relaxed),
        );
        assert_eq!(end, (2, 2), "a fast write landed after the revoke");
    });
}

/// Two fast writers (the node's program and an instance) on one granted
/// page while a reader takes a snapshot: the writers exclude each other
/// (the version counts every write that happened, the pair is never
/// mixed), and an accepted snapshot is whole.
#[test]
fn fast_writers_exclude_each_other_and_readers_see_whole_pages() {
    loom::model(|| {
        let f = WFrame::granted();
        let writers: Vec<_> = [1, 2]
            .into_iter()
            .map(|v| {
                let w = f.clone();
                thread::spawn(move || w.fast_write(v))
            })
            .collect();
        if let Some((a, b)) = f.read() {
            assert_eq!(a, b, "torn snapshot");
        }
        let wrote = writers
            .into_iter()
            .map(|w| usize::from(w.join().unwrap()))
            .sum::<usize>();
        let (a, b) = (
            f.data[0].load(Ordering::Relaxed),
            f.data[1].load(Ordering::Relaxed),
        );
        assert_eq!(a, b, "two fast writes mixed");
        assert_eq!(
            f.version.load(Ordering::Relaxed),
            wrote,
            "a version bump lost"
        );
        assert_eq!(wrote == 0, a == 0);
    });
}

/// A compute instance's write journal (`dmi`'s `pool_journal.rs`) for one
/// frame: open/committed, the frame recorded, the new value and the
/// version the frame had when the writer took it.
#[derive(Default)]
struct WJournal {
    state: AtomicUsize,
    recorded: AtomicUsize,
    value: AtomicUsize,
    version: AtomicUsize,
}

const OPEN: usize = 1;
const COMMITTED: usize = 2;

/// How the instance's write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// It died after `n` steps.
    Died(usize),
    /// No grant (or the frame busy): it would take the engine's path.
    FellBack,
    Wrote,
}

/// A journaled fast write of `v` (`Index::write_journaled`) by an instance
/// that dies (stops) after `die` steps.
fn journaled_write(f: &WFrame, j: &WJournal, v: usize, die: usize) -> Ended {
    let mut step = 0;
    let at = |s: &mut usize| {
        *s += 1;
        *s > die
    };
    if at(&mut step) {
        return Ended::Died(0);
    }
    j.state.store(OPEN, Ordering::Relaxed);
    if at(&mut step) {
        return Ended::Died(1);
    }
    j.recorded.store(1, Ordering::Relaxed);
    if at(&mut step) {
        return Ended::Died(2);
    }
    let Some(n) = f.hold(INST) else {
        j.state.store(0, Ordering::Release);
        return Ended::FellBack;
    };
    j.version
        .store(f.version.load(Ordering::Relaxed), Ordering::Relaxed);
    if at(&mut step) {
        return Ended::Died(3);
    }
    j.value.store(v, Ordering::Relaxed);
    j.state.store(COMMITTED, Ordering::Release);
    loom::sync::atomic::fence(Ordering::Release);
    if at(&mut step) {
        return Ended::Died(4);
    }
    f.data[0].store(v, Ordering::Relaxed);
    if at(&mut step) {
        return Ended::Died(5);
    }
    f.data[1].store(v, Ordering::Relaxed);
    let ver = f.version.load(Ordering::Relaxed);
    f.version.store(ver + 1, Ordering::Relaxed);
    if at(&mut step) {
        return Ended::Died(6);
    }
    f.seq.write_end(n);
    if at(&mut step) {
        return Ended::Died(7);
    }
    f.holder.store(FREE, Ordering::Release);
    if at(&mut step) {
        return Ended::Died(8);
    }
    j.state.store(0, Ordering::Release);
    Ended::Wrote
}

/// `Journal::recover`, by the node once the instance is dead.
fn recover(f: &WFrame, j: &WJournal) {
    let state = j.state.load(Ordering::Acquire);
    if state == 0 || j.recorded.load(Ordering::Relaxed) == 0 {
        return;
    }
    if f.holder.load(Ordering::Acquire) != INST {
        j.state.store(0, Ordering::Release);
        return;
    }
    let n = f.seq.write_begin();
    if state == COMMITTED {
        let v = j.value.load(Ordering::Relaxed);
        f.data[0].store(v, Ordering::Relaxed);
        f.data[1].store(v, Ordering::Relaxed);
        f.version
            .store(j.version.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }
    f.seq.write_end(n);
    f.holder.store(FREE, Ordering::Release);
    j.state.store(0, Ordering::Release);
}

/// An instance's fast write that dies after each of its steps in turn,
/// racing the engine (revoke, copy for a remote node, its own write) and a
/// reader; the node recovers the journal once the instance is dead (its
/// receiver saw the status): the engine never waits forever, the write is
/// in the engine's copy with its version if it committed and nowhere if
/// not, an accepted snapshot is never torn, and the engine's write is last.
#[test]
fn a_dead_fast_writer_is_completed_or_undone_by_its_node() {
    for die in 0..=9 {
        loom::model(move || {
            let f = WFrame::granted();
            let j = Arc::new(WJournal::default());
            let (w, wj) = (f.clone(), j.clone());
            let writer = thread::spawn(move || journaled_write(&w, &wj, 1, die));
            let e = f.clone();
            let engine = thread::spawn(move || {
                e.revoke();
                let copy = (
                    e.data[0].load(Ordering::Relaxed),
                    e.data[1].load(Ordering::Relaxed),
                    e.version.load(Ordering::Relaxed),
                );
                let n = e.lock();
                e.data[0].store(2, Ordering::Relaxed);
                e.data[1].store(2, Ordering::Relaxed);
                e.unlock(n);
                copy
            });
            // The receiver: the instance's status, then its journal.
            let ended = writer.join().unwrap();
            recover(&f, &j);
            let copy = engine.join().unwrap();
            let committed = match ended {
                Ended::Wrote => true,
                Ended::FellBack => false,
                Ended::Died(n) => n >= 4,
            };
            if committed {
                assert_eq!(copy, (1, 1, 1), "{ended:?}: a committed write is missing");
            } else {
                assert_eq!(copy, (0, 0, 0), "{ended:?}: an uncommitted write shows");
            }
            let end = (
                f.data[0].load(Ordering::Relaxed),
                f.data[1].load(Ordering::Relaxed),
            );
            assert_eq!(end, (2, 2), "{ended:?}: a write landed after the engine's");
            assert_eq!(f.holder.load(Ordering::Relaxed), FREE, "{ended:?}");
            assert!(f.read().is_some_and(|(a, b)| a == b), "{ended:?}: left odd");
        });
    }
}

/// A reader racing an instance that dies in a fast write, and the node's
/// recovery: an accepted snapshot is whole (the old pair or the new one).
#[test]
fn a_reader_never_accepts_a_dead_writers_torn_page() {
    for die in [5, 6, 7] {
        loom::model(move || {
            let f = WFrame::granted();
            let j = Arc::new(WJournal::default());
            let (w, wj) = (f.clone(), j.clone());
            let writer = thread::spawn(move || {
                journaled_write(&w, &wj, 1, die);
                recover(&w, &wj);
            });
            if let Some((a, b)) = f.read() {
                assert_eq!(a, b, "torn snapshot");
            }
            writer.join().unwrap();
            assert_eq!(f.read(), Some((1, 1)));
        });
    }
}
