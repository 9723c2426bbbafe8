// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Allocator throughput for 16..1024-byte objects: the halfproc allocator
//! against glibc malloc (private, not shared: the reference) and the paper's
//! K&R allocator (shared, one lock), with one member and with two members
//! allocating at once. One element = one malloc + one free.
//!
//! `cargo bench -p halfproc --bench alloc -- --warm-up-time 1 --measurement-time 2`

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion, Throughput};
use halfproc::alloc::kr::KrAllocator;
use halfproc::sync::Barrier;
use halfproc::{Member, Set, SharedBox};

const BATCH: usize = 256;

#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
enum Kind {
    Halfproc = 0,
    Glibc = 1,
    Kr = 2,
}

#[repr(C)]
struct Shared {
    kind: AtomicU32,
    rounds: AtomicU64,
    kr: AtomicUsize,
    start: Barrier,
}

/// Sizes 16..=1024 in a fixed pseudo-random order.
fn size(i: usize) -> usize {
    16 + (i.wrapping_mul(2_654_435_761) >> 7) % 1009
}

fn rounds(s: &Shared, kind: Kind, rounds: u64) {
    let mut ptrs = [core::ptr::null_mut::<u8>(); BATCH];
    // SAFETY: `kr` was set to a live &'static KrAllocator before use.
    let kr = unsafe { (s.kr.load(Ordering::Relaxed) as *const KrAllocator).as_ref() };
    for _ in 0..rounds {
        for (i, p) in ptrs.iter_mut().enumerate() {
            *p = match kind {
                Kind::Halfproc => halfproc::alloc::malloc(size(i)),
                // SAFETY: plain malloc.
                Kind::Glibc => unsafe { libc::malloc(size(i)) as *mut u8 },
                Kind::Kr => kr.unwrap().malloc(size(i)),
            };
            // SAFETY: a fresh block of at least one byte.
            unsafe { p.write(i as u8) };
        }
        for p in ptrs.iter().rev() {
            // SAFETY: blocks from the matching allocator.
            unsafe {
                match kind {
                    Kind::Halfproc => halfproc::alloc::free(*p),
                    Kind::Glibc => libc::free(p.cast()),
                    Kind::Kr => kr.unwrap().free(*p),
                }
            }
        }
    }
}

fn member(s: &'static Shared) -> i32 {
    let kind = match s.kind.load(Ordering::Relaxed) {
        0 => Kind::Halfproc,
        1 => Kind::Glibc,
        _ => Kind::Kr,
    };
    s.start.wait();
    rounds(s, kind, s.rounds.load(Ordering::Relaxed));
    0
}

fn bench(c: &mut Criterion) {
    let set = Set::get().unwrap();
    let kr = KrAllocator::new(set).unwrap();
    let s: &'static Shared = SharedBox::leak(
        halfproc::alloc::shared_box(Shared {
            kind: AtomicU32::new(0),
            rounds: AtomicU64::new(0),
            kr: AtomicUsize::new(kr as *const KrAllocator as usize),
            start: Barrier::new(2).unwrap(),
        })
        .unwrap(),
    );
    let kinds = [
        ("halfproc", Kind::Halfproc),
        ("glibc", Kind::Glibc),
        ("kr", Kind::Kr),
    ];
    let mut g = c.benchmark_group("alloc_16_1024_1member");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (name, kind) in kinds {
        g.bench_function(name, |b| b.iter(|| rounds(s, kind, 1)));
    }
    g.finish();

    let mut g = c.benchmark_group("alloc_16_1024_2members");
    g.sample_size(10);
    // Two members at once: each does `iters` batches; elements = 2 * BATCH.
    g.throughput(Throughput::Elements(2 * BATCH as u64));
    for (name, kind) in kinds {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                s.kind.store(kind as u32, Ordering::Relaxed);
                s.rounds.store(iters, Ordering::Relaxed);
                let m = Member::spawn(set, move || member(s)).unwrap();
                s.start.wait();
                let t0 = Instant::now();
                rounds(s, kind, iters);
                m.join().unwrap();
                t0.elapsed()
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(2));
    targets = bench
}

fn main() {
    Set::init_default().expect("half-process set");
    benches();
    Criterion::default().configure_from_args().final_summary();
}
