//! Pre-copy rounds against a fake process and a fake tracker (any host),
//! and the soft-dirty tracker where the kernel has it (SKIP otherwise).

use super::*;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// A fake process: page contents, the pages written since the tracker's
/// last reset, and a workload that writes while a round reads.
struct Fake {
    mem: BTreeMap<u64, Vec<u8>>,
    written: HashSet<u64>,
    /// Pages the workload writes during round `r`: the first `ws[r]`.
    ws: Vec<usize>,
    round: usize,
    /// A tracker that loses this page's writes (to show the CRC catches it).
    blind: Option<u64>,
}

impl Fake {
    fn new(pages: usize, ws: Vec<usize>) -> Rc<RefCell<Fake>> {
        let mem = (0..pages as u64)
            .map(|i| (0x10000 + i * PAGE, vec![i as u8; PAGE as usize]))
            .collect();
        Rc::new(RefCell::new(Fake {
            mem,
            written: HashSet::new(),
            ws,
            round: 0,
            blind: None,
        }))
    }

    fn write(&mut self, addr: u64, v: u8) {
        self.mem.get_mut(&addr).unwrap()[7] = v;
        self.written.insert(addr);
    }

    fn full(&self) -> (Vec<u64>, Vec<u8>) {
        (
            self.mem.keys().copied().collect(),
            self.mem.values().flatten().copied().collect(),
        )
    }
}

struct FakeTarget(Rc<RefCell<Fake>>);
struct FakeTracker(Rc<RefCell<Fake>>);

impl Target for FakeTarget {
    fn present(&mut self) -> Result<Vec<u64>> {
        Ok(self.0.borrow().mem.keys().copied().collect())
    }

    fn read(&mut self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        let f = self.0.borrow();
        for (i, c) in buf.chunks_exact_mut(PAGE as usize).enumerate() {
            c.copy_from_slice(&f.mem[&(addr + i as u64 * PAGE)]);
        }
        Ok(())
    }
}

impl DirtyTracker for FakeTracker {
    fn reset(&mut self) -> io::Result<()> {
        let mut f = self.0.borrow_mut();
        f.written.clear();
        // The workload of this round writes while the round reads.
        let n = f.ws.get(f.round).copied().unwrap_or(0);
        f.round += 1;
        let addrs: Vec<u64> = f.mem.keys().take(n).copied().collect();
        for a in addrs {
            let r = f.round as u8;
            f.write(a, r);
        }
        Ok(())
    }
    fn written(&mut self, pages: &[u64]) -> io::Result<Vec<bool>> {
        let f = self.0.borrow();
        Ok(pages
            .iter()
            .map(|a| f.written.contains(a) && f.blind != Some(*a))
            .collect())
    }
}

/// Pre-copy, then freeze after `last_writes`: (pages per round, pages
/// included while frozen, of them missed by the tracker, assembled ==
/// frozen memory).
fn migrate(fake: &Rc<RefCell<Fake>>, last_writes: &[u64]) -> (Vec<usize>, usize, usize, bool) {
    let mut dest: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut tracker = FakeTracker(fake.clone());
    let pre = precopy(
        &mut FakeTarget(fake.clone()),
        &mut tracker,
        &Policy::default(),
        &mut || Ok(()),
        &mut |a, d| {
            store(&mut dest, a, d);
            Ok(())
        },
    )
    .unwrap();
    for &a in last_writes {
        fake.borrow_mut().write(a, 0xee);
    }
    // Frozen: the full dump, and what has to travel.
    let (pages, full) = fake.borrow().full();
    let inc = included(&pages, &pre, &mut tracker, &full).unwrap();
    let d = delta(&full, &inc.pages).unwrap();
    let mut got = vec![0u8; full.len()];
    assemble(&pages, &inc.pages, &d, &dest, &mut got).unwrap();
    (
        pre.rounds,
        inc.pages.iter().filter(|i| **i).count(),
        inc.missed,
        got == full,
    )
}

#[test]
fn rounds_shrink_and_the_frozen_delta_rebuilds_the_memory() {
    // 1000 pages; the workload writes 400, 100, 20, 3 pages in rounds 0..3.
    let fake = Fake::new(1000, vec![400, 100, 20, 3]);
    let (rounds, frozen, missed, same) = migrate(&fake, &[0x10000 + 999 * PAGE]);
    assert!(same, "assembled image differs from the frozen memory");
    assert_eq!(missed, 0);
    // Round 0 sends all; then what the previous round's workload wrote.
    assert_eq!(rounds, vec![1000, 400, 100, 20]);
    // While frozen: the 3 pages of the last workload + the last write.
    assert_eq!(frozen, 4);
}

#[test]
fn a_process_that_writes_everything_stops_the_rounds_early() {
    let fake = Fake::new(300, vec![300, 300, 300, 300, 300]);
    let (rounds, frozen, _, same) = migrate(&fake, &[]);
    assert!(same);
    assert_eq!(
        rounds,
        vec![300, 300],
        "not shrinking: stop after two rounds"
    );
    assert_eq!(frozen, 300);
}

/// A write the tracker does not report (soft-dirty's window between
/// reading the bits and clearing them) is found by content while frozen.
#[test]
fn a_write_the_tracker_missed_is_sent_while_frozen() {
    let fake = Fake::new(100, vec![10, 2]);
    let blind = 0x10000 + 50 * PAGE;
    fake.borrow_mut().blind = Some(blind);
    let (_, frozen, missed, same) = migrate(&fake, &[blind]);
    assert!(same, "the missed write must reach the copy");
    assert_eq!(missed, 1, "found by content, not by the tracker");
    assert!(frozen >= 1);
}

#[test]
fn policy() {
    let p = Policy {
        max_rounds: 4,
        stop_below: 10,
    };
    assert!(another_round(&[], &p));
    assert!(another_round(&[1000], &p));
    assert!(!another_round(&[1000, 5], &p), "below the threshold");
    assert!(another_round(&[1000, 400], &p));
    assert!(!another_round(&[1000, 600], &p), "not shrinking by half");
    assert!(!another_round(&[1000, 400, 100, 40], &p), "max rounds");
    assert!(!another_round(&[8], &p));
}

#[test]
fn soft_dirty_sees_exactly_the_written_pages() {
    if let Err(e) = probe_soft_dirty() {
        eprintln!("SKIP: soft-dirty unavailable: {e}");
        return;
    }
    let n = 64usize;
    let mut v = vec![1u8; n * PAGE as usize + PAGE as usize];
    let base = (v.as_mut_ptr() as u64 + PAGE - 1) & !(PAGE - 1);
    let off = (base - v.as_ptr() as u64) as usize;
    let pages: Vec<u64> = (0..n as u64).map(|i| base + i * PAGE).collect();
    // SAFETY: getpid has no preconditions.
    let mut t = SoftDirty::open(unsafe { libc::getpid() }).unwrap();
    t.reset().unwrap();
    v[off + 3 * PAGE as usize] = 9;
    v[off + 10 * PAGE as usize + 5] = 9;
    let w = t.written(&pages).unwrap();
    let hit: Vec<usize> = (0..n).filter(|&i| w[i]).collect();
    assert_eq!(hit, vec![3, 10]);
}

#[test]
fn probe_names_what_is_missing() {
    match probe_soft_dirty() {
        Ok(()) => eprintln!("soft-dirty works on this kernel"),
        Err(e) => {
            eprintln!("soft-dirty: {e}");
            assert!(
                e.contains("CONFIG_MEM_SOFT_DIRTY") || e.contains("clear_refs"),
                "{e}"
            );
        }
    }
}
