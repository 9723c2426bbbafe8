// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Integration cases shared by `tests/integration.rs` (cargo, portable or
//! kernel backend) and `examples/guest_tests.rs` (a static binary run in the
//! QEMU guest). Each case returns `Err(message)` on failure; the runner
//! prints TAP and bounds every case in time.

#![allow(dead_code)]

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use halfproc::alloc::{self, SharedVec};
use halfproc::backend::{Backend, BackendKind, Request};
use halfproc::sync::{Barrier, Condvar, LockError, Mutex, Once, RwLock};
use halfproc::{Error, ExitStatus, Member, Set, SetConfig, SharedAlloc, SharedBox};

type Case = (&'static str, fn(&'static Set) -> Result<(), String>);

macro_rules! ensure {
    ($c:expr, $($fmt:tt)+) => {
        if !$c {
            return Err(format!($($fmt)+));
        }
    };
}

mod allocator;
mod dm;
mod locks;
mod members;
mod stress;

use allocator::*;
use dm::*;
use locks::*;
use members::*;
use stress::*;

/// Every case, in order.
pub fn all() -> Vec<Case> {
    vec![
        ("backend is detected and reported", backend_reported),
        (
            "kernel backend request fails clearly when missing",
            kernel_request,
        ),
        ("set cannot be created twice", init_twice),
        ("member exit codes, panics and signals", member_exit_status),
        (
            "a C member's argument reaches it unchanged",
            member_arg_passed,
        ),
        (
            "shared range is shared, globals are private",
            member_sharing,
        ),
        (
            "a member starts as a copy of its creator at creation",
            member_copies_creator_now,
        ),
        ("join twice is stale, detach frees the slot", join_detach),
        ("64 members alive at once", many_members),
        ("members create members", nested_members),
        (
            "spawn from a multi-threaded parent (malloc busy)",
            multithreaded_parent,
        ),
        (
            "C library tid cache is refreshed in members",
            libc_tid_refreshed,
        ),
        ("mutex under contention across 3 members", mutex_contention),
        ("condvar ping-pong between two members", condvar_pingpong),
        ("barrier rounds across 3 members", barrier_rounds),
        ("rwlock readers and writers across members", rwlock_members),
        ("once runs exactly once across members", once_members),
        ("mutex owner death is recovered", mutex_owner_death),
        (
            "rwlock writer and reader death are recovered",
            rwlock_owner_death,
        ),
        ("once initializer death is retried", once_owner_death),
        (
            "locks and malloc refuse an outsider process",
            outsider_refused,
        ),
        ("malloc/calloc/realloc/aligned_alloc basics", alloc_basics),
        (
            "size overflow returns null with ENOMEM/EINVAL",
            alloc_bad_input,
        ),
        ("blocks freed by another member", alloc_cross_member_free),
        (
            "freed memory is returned to the system for all members",
            alloc_returns_memory,
        ),
        ("SharedVec grows inside a member", shared_vec_member),
        (
            "foreign and double free are detected",
            foreign_free_detected,
        ),
        ("K&R baseline allocator works across members", kr_baseline),
        ("dmread/dmwrite between members' private memory", dm_members),
        (
            "dmread refuses non-members and reports partial copies",
            dm_bad_input,
        ),
        (
            "allocator stress: cookies, transfers across members",
            alloc_stress,
        ),
    ]
}

/// Runs `cases`, printing TAP; returns the number of failures.
pub fn run_tap(set: &'static Set, cases: &[Case], filter: Option<&str>) -> usize {
    let selected: Vec<_> = cases
        .iter()
        .filter(|(n, _)| filter.is_none_or(|f| n.contains(f)))
        .collect();
    println!("TAP version 13");
    println!("1..{}", selected.len());
    println!(
        "# backend: {} ({})",
        set.backend().kind(),
        set.backend().reason()
    );
    let mut failed = 0;
    for (i, (name, f)) in selected.iter().enumerate() {
        let n = i + 1;
        let done = std::sync::Arc::new(AtomicU32::new(0));
        let d2 = done.clone();
        let name2 = name.to_string();
        // Watchdog: a hung case fails the whole run instead of hanging it.
        // HALFPROC_TEST_TIMEOUT (seconds) stretches it where the machine is
        // slow, e.g. a guest under software emulation on a loaded host.
        let limit = case_timeout().as_secs();
        std::thread::spawn(move || {
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(limit) {
                if d2.load(Ordering::Acquire) != 0 {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            println!("not ok {n} - {name2} # timed out after {limit} s");
            use std::io::Write;
            let _ = std::io::stdout().flush();
            // SAFETY: terminating the process.
            unsafe { libc::_exit(1) };
        });
        let t0 = Instant::now();
        let r = std::panic::catch_unwind(|| f(set)).unwrap_or_else(|_| Err("panicked".into()));
        done.store(1, Ordering::Release);
        let ms = t0.elapsed().as_millis();
        match r {
            Ok(()) => println!("ok {n} - {name} # {ms} ms"),
            Err(e) => {
                failed += 1;
                println!("not ok {n} - {name}");
                for line in e.lines() {
                    println!("#   {line}");
                }
            }
        }
    }
    println!("{} passed, {} failed", selected.len() - failed, failed);
    failed
}

/// Creates the set for the run (call first thing, single-threaded).
pub fn init() -> &'static Set {
    match Set::init(SetConfig::from_env().expect("HALFPROC_* environment")) {
        Ok(s) => s,
        Err(e) => {
            println!("Bail out! cannot create the half-process set: {e}");
            std::process::exit(1);
        }
    }
}

fn leak<T>(v: T) -> &'static T {
    SharedBox::leak(alloc::shared_box(v).expect("shared arena"))
}

fn spawn<T: Sync + 'static>(
    set: &'static Set,
    f: fn(&'static T) -> i32,
    a: &'static T,
) -> Result<Member, String> {
    Member::spawn(set, move || f(a)).map_err(|e| format!("spawn: {e}"))
}

fn join_ok(m: Member) -> Result<(), String> {
    match m.join_timeout(Some(case_timeout())) {
        Ok(Some(s)) if s.success() => Ok(()),
        Ok(Some(s)) => Err(format!("member {} {s}", m.pid())),
        Ok(None) => Err(format!("member {} did not finish in 20 s", m.pid())),
        Err(e) => Err(format!("join: {e}")),
    }
}

/// Spins (sleeping) until `f` is non-zero; a member's way to wait for its
/// creator's go-ahead. Gives up (exit code 1) only after a whole case's time:
/// with a fixed 10 s a loaded emulated guest took longer than that to fork
/// 64 members, the first ones gave up, and "64 members alive at once"
/// waited for a count that could no longer be reached.
fn wait_flag(f: &AtomicI32) -> i32 {
    let t0 = Instant::now();
    while f.load(Ordering::SeqCst) == 0 {
        if t0.elapsed() > case_timeout() {
            return 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    0
}

fn lock<T>(m: &Mutex<T>) -> halfproc::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(LockError::OwnerDied(g)) => g,
        Err(LockError::NotMember) => panic!("not a member"),
    }
}

/// How long one case may take: 30 s, or `HALFPROC_TEST_TIMEOUT` seconds
/// where the machine is slow (a guest under software emulation).
fn case_timeout() -> Duration {
    let secs = std::env::var("HALFPROC_TEST_TIMEOUT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    Duration::from_secs(secs)
}
