// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Mutex cost: uncontended, and contended between two members, for the
//! halfproc mutex, `pthread_mutex_t` with `PTHREAD_PROCESS_SHARED` (in the
//! shared range, also between members) and `std::sync::Mutex` (contended
//! between two threads: it cannot cross processes). All in one run so the
//! ratios come from the same machine state.
//!
//! `cargo bench -p halfproc --bench mutex -- --warm-up-time 1 --measurement-time 2`

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use halfproc::sync::{Barrier, RawMutex};
use halfproc::{Member, Set, SharedBox};

#[repr(C)]
struct Shared {
    hp: RawMutex,
    pt: libc::pthread_mutex_t,
    kind: AtomicU32,
    iters: AtomicU64,
    counter: AtomicU64,
    start: Barrier,
}
// SAFETY: every field is used only through its own synchronization.
unsafe impl Sync for Shared {}

const HALFPROC: u32 = 0;
const PTHREAD: u32 = 1;

fn run_loop(s: &Shared) {
    let n = s.iters.load(Ordering::Relaxed);
    match s.kind.load(Ordering::Relaxed) {
        HALFPROC => {
            for _ in 0..n {
                let _ = s.hp.lock();
                s.counter
                    .store(s.counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                // SAFETY: we hold it.
                unsafe { s.hp.unlock() };
            }
        }
        _ => {
            let m = &s.pt as *const _ as *mut libc::pthread_mutex_t;
            for _ in 0..n {
                // SAFETY: a process-shared mutex initialised in main.
                unsafe { libc::pthread_mutex_lock(m) };
                s.counter
                    .store(s.counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                // SAFETY: we hold it.
                unsafe { libc::pthread_mutex_unlock(m) };
            }
        }
    }
}

fn member(s: &'static Shared) -> i32 {
    s.start.wait();
    run_loop(s);
    0
}

fn shared() -> &'static Shared {
    let s: &'static mut Shared = SharedBox::leak(
        halfproc::alloc::shared_box(Shared {
            hp: RawMutex::new(),
            // SAFETY: zeroed pthread_mutex_t, initialised below.
            pt: unsafe { core::mem::zeroed() },
            kind: AtomicU32::new(0),
            iters: AtomicU64::new(0),
            counter: AtomicU64::new(0),
            start: Barrier::new(2).unwrap(),
        })
        .unwrap(),
    );
    // SAFETY: initialising a process-shared pthread mutex in place.
    unsafe {
        let mut a: libc::pthread_mutexattr_t = core::mem::zeroed();
        libc::pthread_mutexattr_init(&mut a);
        libc::pthread_mutexattr_setpshared(&mut a, libc::PTHREAD_PROCESS_SHARED);
        libc::pthread_mutex_init(&mut s.pt, &a);
    }
    s
}

fn uncontended(c: &mut Criterion) {
    let s = shared();
    let mut g = c.benchmark_group("mutex_uncontended");
    g.bench_function("halfproc", |b| {
        b.iter(|| {
            let _ = s.hp.lock();
            // SAFETY: we hold it.
            unsafe { s.hp.unlock() };
        })
    });
    let m = &s.pt as *const _ as *mut libc::pthread_mutex_t;
    g.bench_function("pthread_pshared", |b| {
        b.iter(|| {
            // SAFETY: initialised process-shared mutex.
            unsafe {
                libc::pthread_mutex_lock(m);
                libc::pthread_mutex_unlock(m);
            }
        })
    });
    let sm = std::sync::Mutex::new(());
    g.bench_function("std", |b| b.iter(|| drop(sm.lock().unwrap())));
    g.finish();
}

fn contended(c: &mut Criterion) {
    let set = Set::get().unwrap();
    let s = shared();
    let mut g = c.benchmark_group("mutex_contended_2");
    g.sample_size(10);
    for (name, kind) in [
        ("halfproc_2members", HALFPROC),
        ("pthread_pshared_2members", PTHREAD),
    ] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                s.kind.store(kind, Ordering::Relaxed);
                s.iters.store(iters, Ordering::Relaxed);
                let m = Member::spawn(set, move || member(s)).unwrap();
                s.start.wait();
                let t0 = Instant::now();
                run_loop(s);
                m.join().unwrap();
                t0.elapsed()
            })
        });
    }
    g.bench_function("std_2threads", |b| {
        b.iter_custom(|iters| {
            let m = std::sync::Arc::new(std::sync::Mutex::new(0u64));
            let bar = std::sync::Arc::new(std::sync::Barrier::new(2));
            let (m2, b2) = (m.clone(), bar.clone());
            let h = std::thread::spawn(move || {
                b2.wait();
                for _ in 0..iters {
                    *m2.lock().unwrap() += 1;
                }
            });
            bar.wait();
            let t0 = Instant::now();
            for _ in 0..iters {
                *m.lock().unwrap() += 1;
            }
            h.join().unwrap();
            t0.elapsed()
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(2));
    targets = uncontended, contended
}

fn main() {
    // The set first, while single-threaded.
    Set::init_default().expect("half-process set");
    benches();
    Criterion::default().configure_from_args().final_summary();
}
