//! Shared by `receivers_single.rs` and `receivers_per_instance.rs` (the
//! receiver model is chosen once per process, from `DMI_RECEIVERS`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dmi::serve::{self, Ended, NodeRef};
use dmi::{Dmi, ReadMode, WriteMode};

/// Threads of this process named `dmi-inst-*` and `dmi-recv`.
fn receivers() -> (usize, usize) {
    let (mut per, mut single) = (0, 0);
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let comm = comm.trim_end();
        if comm.starts_with("dmi-inst-") {
            per += 1;
        } else if comm == "dmi-recv" {
            single += 1;
        }
    }
    (per, single)
}

const CALLS: i64 = 150;

/// `n` instances each write and read back CALLS values through the node
/// (fast reads and writes off: every call is a mailbox call, an engine
/// call), all at the same time (they start after a barrier); each returns
/// the sum of what it read. While they run, the node's receiver threads
/// are counted every millisecond: returns (the sums, the most `dmi-inst-*`
/// and `dmi-recv` threads seen, the samples taken).
pub fn calls_of(d: &Dmi, n: i64) -> (Vec<Ended>, usize, usize, usize) {
    let base = d.mmap(4096, n).unwrap();
    let body = move |dmi: &Dmi, i: i64| {
        dmi::pool::set_fast_reads(false);
        dmi::pool::set_fast_writes(false);
        if dmi.barrier().is_err() {
            return -1;
        }
        let at = base + i * 4096;
        let mut sum = 0i64;
        for j in 0..CALLS {
            let v = i * 1_000_000 + j;
            if dmi.write(at, &v.to_le_bytes(), WriteMode::Put).is_err() {
                return -2;
            }
            let mut b = [0u8; 8];
            if dmi.read(at, &mut b, ReadMode::Get).is_err() {
                return -3;
            }
            sum += i64::from_le_bytes(b);
        }
        sum
    };
    let ids: Vec<i64> = (0..n)
        .map(|i| serve::create(NodeRef::of(d).unwrap(), false, body, i).unwrap())
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let sampler = std::thread::spawn(move || {
        let (mut per, mut single, mut samples) = (0, 0, 0);
        while !s2.load(Ordering::SeqCst) {
            let (p, s) = receivers();
            per = per.max(p);
            single = single.max(s);
            samples += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
        (per, single, samples)
    });
    let ended: Vec<Ended> = ids.into_iter().map(|id| serve::join(id).unwrap()).collect();
    stop.store(true, Ordering::SeqCst);
    let (per, single, samples) = sampler.join().unwrap();
    (ended, per, single, samples)
}

/// What instance `i` of `calls_of` returns.
pub fn expected(i: i64) -> Ended {
    Ended::Returned((0..CALLS).map(|j| i * 1_000_000 + j).sum())
}
