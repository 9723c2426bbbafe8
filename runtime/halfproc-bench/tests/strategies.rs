// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Every strategy moves the right bytes (not timing).
//!
//! The harness compares each checksum the reader computes with the one
//! regenerated from the seed; `run` returns an error on any mismatch. The
//! last test proves that check bites: a transport that corrupts one byte,
//! or delivers the previous repetition's data, is rejected.

use halfproc::BackendKind;
use halfproc_bench::backend;
use halfproc_bench::harness::{self, Job};
use halfproc_bench::os;
use halfproc_bench::strategy::{self, Halves, Link, Reader, Strategy, Writer};

/// Sizes: tiny, not a multiple of the chunk or of 32, several chunks.
const SIZES: [usize; 4] = [64, 4096, 200_000 + 8, 1 << 20];
const CHUNK: usize = 64 << 10;

fn cpus() -> (usize, Option<usize>) {
    let c = os::allowed_cpus().unwrap();
    (c[0], c.get(1).copied())
}

fn job(strategy: Strategy, cpus: (usize, usize)) -> Job<'static> {
    Job {
        strategy,
        backend: backend::detect(),
        sizes: &SIZES,
        warmup: 1,
        reps: 2,
        cpus,
        chunk: CHUNK,
        salt: 7,
    }
}

fn check(strategy: Strategy) {
    let backend = backend::detect();
    if let Some(why) = strategy.unavailable_on(backend) {
        // The portable backend must say so, and prepare must refuse.
        assert_eq!(
            backend,
            BackendKind::Portable,
            "{strategy} unavailable on the kernel backend: {why}"
        );
        let err = strategy::prepare(strategy, backend, 4096, CHUNK)
            .err()
            .expect("prepare refuses");
        assert!(err.is_unsupported(), "{strategy}: {err}");
        eprintln!("{strategy}: unavailable here ({why})");
        return;
    }
    let (a, b) = cpus();
    let mut placements = vec![(a, a)];
    if let Some(b) = b {
        placements.push((a, b));
    }
    for p in placements {
        let samples = harness::run(&job(strategy, p))
            .unwrap_or_else(|e| panic!("{strategy} on cpus {p:?}: {e}"));
        assert_eq!(samples.len(), SIZES.len());
        for s in &samples {
            assert_eq!(s.len(), 2, "{strategy}: two timed reps per size");
            assert!(s.iter().all(|&ns| ns > 0));
        }
    }
}

macro_rules! strategy_tests {
    ($($name:ident => $st:expr,)*) => { $( #[test] fn $name() { check($st); } )* };
}

strategy_tests! {
    tcp => Strategy::Tcp,
    unix => Strategy::Unix,
    pipe => Strategy::Pipe,
    vmsplice => Strategy::Vmsplice,
    shared => Strategy::Shared,
    posix_shm => Strategy::PosixShm,
    double_copy => Strategy::DoubleCopy,
    double_copy_pipelined => Strategy::DoubleCopyPipelined,
    cma => Strategy::Cma,
    cma_pull_pipelined => Strategy::CmaPullPipelined,
    cma_push_pipelined => Strategy::CmaPushPipelined,
    dmread => Strategy::Dmread,
    dmread_pipelined => Strategy::DmreadPipelined,
    dmwrite_pipelined => Strategy::DmwritePipelined,
    cma_push_pull => Strategy::CmaPushPull,
    dm_push_pull => Strategy::DmPushPull,
}

#[test]
fn every_strategy_has_a_test() {
    // Keep the list above complete: one test per strategy.
    let src = include_str!("strategies.rs");
    for st in Strategy::ALL {
        let arm = format!("=> Strategy::{st:?},");
        assert!(src.contains(&arm), "no test for {st}");
    }
}

/// A pipe transport whose reader damages what it received: flips one byte
/// (`Flip`) or keeps the first repetition's data (`Stale`).
#[derive(Clone, Copy, PartialEq)]
enum Damage {
    Flip,
    Stale,
}

struct BadReader {
    inner: Box<dyn Reader>,
    damage: Damage,
    first: Option<u64>,
}

impl Reader for BadReader {
    fn init(&mut self, max: usize, link: &Link<'_>) -> halfproc_bench::Result<()> {
        self.inner.init(max, link)
    }
    fn prepare(&mut self, size: usize) -> halfproc_bench::Result<()> {
        self.inner.prepare(size)
    }
    fn receive(&mut self, size: usize, link: &Link<'_>) -> halfproc_bench::Result<u64> {
        let good = self.inner.receive(size, link)?;
        Ok(match self.damage {
            Damage::Flip => {
                // Recompute over a damaged copy of the pattern we were sent.
                let mut d = vec![0u8; size];
                halfproc_bench::pattern::fill(
                    &mut d,
                    link.ctl.seed.load(std::sync::atomic::Ordering::Relaxed),
                );
                assert_eq!(
                    halfproc_bench::pattern::checksum(&d),
                    good,
                    "the pipe itself works"
                );
                d[size / 2] ^= 0x10;
                halfproc_bench::pattern::checksum(&d)
            }
            Damage::Stale => *self.first.get_or_insert(good),
        })
    }
}

fn bad_run(damage: Damage) -> halfproc_bench::Error {
    let h = strategy::prepare(Strategy::Pipe, BackendKind::Portable, 4096, CHUNK).unwrap();
    let halves = Halves {
        writer: h.writer as Box<dyn Writer>,
        reader: Box::new(BadReader {
            inner: h.reader,
            damage,
            first: None,
        }),
    };
    let (a, _) = cpus();
    let mut j = job(Strategy::Pipe, (a, a));
    j.sizes = &[4096];
    j.backend = BackendKind::Portable;
    harness::run_with(&j, halves).expect_err("damaged data must not be measured")
}

#[test]
fn corrupted_and_stale_data_are_rejected() {
    for d in [Damage::Flip, Damage::Stale] {
        let e = bad_run(d);
        assert!(matches!(e, halfproc_bench::Error::Verify(_)), "{e}");
        assert!(e.to_string().contains("checksum"), "{e}");
    }
}
