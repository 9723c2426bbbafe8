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

fn lock<T>(m: &Mutex<T>) -> halfproc::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(LockError::OwnerDied(g)) => g,
        Err(LockError::NotMember) => panic!("not a member"),
    }
}

// ---------------------------------------------------------------------------

fn backend_reported(set: &'static Set) -> Result<(), String> {
    let expect = match std::env::var("HALFPROC_BACKEND").as_deref() {
        Ok("kernel") => BackendKind::Kernel,
        Ok("portable") => BackendKind::Portable,
        _ => Backend::detect().kind(),
    };
    ensure!(
        set.backend().kind() == expect,
        "set uses {} but {} expected",
        set.backend().kind(),
        expect
    );
    ensure!(
        set.base() as u64 == halfproc_uapi::HALFPROC_RANGE_START,
        "arena at {:p}",
        set.base()
    );
    let mut out = String::new();
    for s in set.backend().semantics() {
        out.push_str(s.name);
    }
    ensure!(
        out.contains("mprotect/munmap"),
        "semantics table incomplete"
    );
    Ok(())
}

fn kernel_request(_set: &'static Set) -> Result<(), String> {
    let r = Backend::select(Request::Exactly(BackendKind::Kernel));
    if Backend::kernel_available() {
        ensure!(
            r.is_ok(),
            "module present but kernel backend refused: {:?}",
            r.err()
        );
    } else {
        let e = r.err().ok_or("kernel backend granted without the module")?;
        ensure!(
            e.to_string().contains("/sys/module/halfproc"),
            "unclear error: {e}"
        );
    }
    Ok(())
}

fn init_twice(_set: &'static Set) -> Result<(), String> {
    match Set::init(SetConfig::default()) {
        Err(Error::AlreadyInitialized) => Ok(()),
        other => Err(format!("second init gave {:?}", other.map(|_| ()))),
    }
}

fn ret_code(x: &AtomicI32) -> i32 {
    x.load(Ordering::SeqCst)
}
fn do_panic(_: &AtomicI32) -> i32 {
    panic!("member panics on purpose")
}
fn kill_self(_: &AtomicI32) -> i32 {
    // SAFETY: plain kill(2) of ourselves.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    0
}

fn member_exit_status(set: &'static Set) -> Result<(), String> {
    let v = leak(AtomicI32::new(7));
    let s = spawn(set, ret_code, v)?.join().map_err(|e| e.to_string())?;
    ensure!(s == ExitStatus::Exited(7), "got {s}");
    let s = spawn(set, do_panic, v)?.join().map_err(|e| e.to_string())?;
    ensure!(s == ExitStatus::Exited(101), "panic gave {s}");
    let s = spawn(set, kill_self, v)?
        .join()
        .map_err(|e| e.to_string())?;
    ensure!(s == ExitStatus::Signaled(libc::SIGKILL), "kill gave {s}");
    Ok(())
}

extern "C" fn c_deref(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: the test passes a pointer to its (copied) private i32.
    unsafe { *(arg as *const i32) }
}

extern "C" fn c_int_arg(arg: *mut libc::c_void) -> libc::c_int {
    arg as usize as libc::c_int
}

fn member_arg_passed(set: &'static Set) -> Result<(), String> {
    // A private (stack) argument: the member has a copy of it.
    let mut private = 9i32;
    // SAFETY: `c_deref` reads the i32, alive (copied) in the member.
    let m = unsafe { Member::spawn_c(set, c_deref, (&mut private as *mut i32).cast()) }
        .map_err(|e| format!("private argument refused: {e}"))?;
    let s = m.join().map_err(|e| e.to_string())?;
    ensure!(s == ExitStatus::Exited(9), "private argument gave {s}");
    // An integer cast to a pointer, as C programs pass to pthread_create.
    for v in [0usize, 1, 200] {
        // SAFETY: `c_int_arg` never dereferences its argument.
        let m = unsafe { Member::spawn_c(set, c_int_arg, v as *mut libc::c_void) }
            .map_err(|e| format!("integer argument {v} refused: {e}"))?;
        let s = m.join().map_err(|e| e.to_string())?;
        ensure!(
            s == ExitStatus::Exited(v as i32),
            "integer argument {v} gave {s}"
        );
    }
    Ok(())
}

static LATE: AtomicU64 = AtomicU64::new(0);

fn member_copies_creator_now(set: &'static Set) -> Result<(), String> {
    // Set after Set::init, on the heap and the stack: all visible in the
    // member as of spawn, none of the member's writes visible here.
    LATE.store(1234, Ordering::SeqCst);
    let heap = Box::new(77u64);
    let stack = [3u8; 64];
    let out = leak(AtomicU64::new(0));
    let m = Member::spawn(set, move || {
        out.store(
            LATE.load(Ordering::SeqCst) + *heap + stack[63] as u64,
            Ordering::SeqCst,
        );
        LATE.store(1, Ordering::SeqCst);
        0
    })
    .map_err(|e| format!("spawn: {e}"))?;
    join_ok(m)?;
    ensure!(
        out.load(Ordering::SeqCst) == 1234 + 77 + 3,
        "member saw {} (want 1314)",
        out.load(Ordering::SeqCst)
    );
    ensure!(
        LATE.load(Ordering::SeqCst) == 1234,
        "member's write to a global leaked into the creator"
    );
    Ok(())
}

static GLOBAL: AtomicU64 = AtomicU64::new(1);

#[repr(C)]
struct Sharing {
    shared: AtomicU64,
    seen_global: AtomicU64,
}

fn sharing_member(s: &Sharing) -> i32 {
    s.seen_global
        .store(GLOBAL.load(Ordering::SeqCst), Ordering::SeqCst);
    GLOBAL.store(999, Ordering::SeqCst);
    s.shared.store(42, Ordering::SeqCst);
    0
}

fn member_sharing(set: &'static Set) -> Result<(), String> {
    let s = leak(Sharing {
        shared: AtomicU64::new(0),
        seen_global: AtomicU64::new(0),
    });
    join_ok(spawn(set, sharing_member, s)?)?;
    ensure!(
        s.shared.load(Ordering::SeqCst) == 42,
        "shared write not seen"
    );
    ensure!(
        GLOBAL.load(Ordering::SeqCst) == 1,
        "member's write to a global leaked into the creator"
    );
    ensure!(
        s.seen_global.load(Ordering::SeqCst) == GLOBAL.load(Ordering::SeqCst),
        "member saw global {}",
        s.seen_global.load(Ordering::SeqCst)
    );
    Ok(())
}

fn sleep_ms(ms: &AtomicI32) -> i32 {
    std::thread::sleep(Duration::from_millis(ms.load(Ordering::SeqCst) as u64));
    0
}

fn join_detach(set: &'static Set) -> Result<(), String> {
    let z = leak(AtomicI32::new(0));
    let m = spawn(set, ret_code, z)?;
    ensure!(m.join().is_ok(), "first join failed");
    match m.join() {
        Err(Error::StaleHandle) => {}
        other => return Err(format!("second join gave {other:?}")),
    }
    let ms = leak(AtomicI32::new(50));
    let before = set.running_members();
    let d = spawn(set, sleep_ms, ms)?;
    d.detach().map_err(|e| e.to_string())?;
    ensure!(d.join().is_err(), "joined a detached member");
    ensure!(d.detach().is_err(), "detached twice");
    let t0 = Instant::now();
    while set.running_members() > before {
        ensure!(
            t0.elapsed() < Duration::from_secs(5),
            "detached member never reaped"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

fn wait_flag(f: &AtomicI32) -> i32 {
    let t0 = Instant::now();
    while f.load(Ordering::SeqCst) == 0 {
        if t0.elapsed() > Duration::from_secs(10) {
            return 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    0
}

fn many_members(set: &'static Set) -> Result<(), String> {
    let flag = leak(AtomicI32::new(0));
    let ms: Vec<_> = (0..64)
        .map(|_| spawn(set, wait_flag, flag))
        .collect::<Result<_, _>>()?;
    let pids: std::collections::HashSet<_> = ms.iter().map(|m| m.pid()).collect();
    ensure!(pids.len() == 64, "pids not distinct");
    // Members start asynchronously; on a loaded (or emulated) machine the
    // last ones may take a while to be scheduled.
    let t0 = std::time::Instant::now();
    while set.running_members() < 64 && t0.elapsed() < case_timeout() {
        std::thread::sleep(Duration::from_millis(10));
    }
    ensure!(
        set.running_members() >= 64,
        "running {}",
        set.running_members()
    );
    flag.store(1, Ordering::SeqCst);
    for m in ms {
        join_ok(m)?;
    }
    Ok(())
}

fn nested_child(x: &AtomicI32) -> i32 {
    x.fetch_add(1, Ordering::SeqCst);
    0
}
fn nested_parent(x: &'static AtomicI32) -> i32 {
    let set = Set::get().unwrap();
    let m = Member::spawn(set, move || nested_child(x)).unwrap();
    if m.join().unwrap().success() {
        0
    } else {
        1
    }
}

fn nested_members(set: &'static Set) -> Result<(), String> {
    let x = leak(AtomicI32::new(0));
    join_ok(spawn(set, nested_parent, x)?)?;
    ensure!(x.load(Ordering::SeqCst) == 1, "grandchild did not run");
    Ok(())
}

fn malloc_member(x: &AtomicI32) -> i32 {
    // Private malloc in the member: must not deadlock on a lock another
    // thread of the requester held.
    let v: Vec<Box<[u8; 100]>> = (0..1000).map(|_| Box::new([1u8; 100])).collect();
    x.fetch_add(v.len() as i32 / 1000, Ordering::SeqCst);
    println!("# member {} allocated privately", std::process::id());
    0
}

fn multithreaded_parent(set: &'static Set) -> Result<(), String> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hammers: Vec<_> = (0..3)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let m = std::sync::Mutex::new(0u64);
                while !stop.load(Ordering::Relaxed) {
                    let v: Vec<u8> = vec![0; 4096];
                    *m.lock().unwrap() += v.len() as u64;
                    drop(format!("{}", v.len()));
                }
            })
        })
        .collect();
    let x = leak(AtomicI32::new(0));
    let spawners: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || -> Result<(), String> {
                for _ in 0..10 {
                    join_ok(
                        Member::spawn(Set::get().unwrap(), move || malloc_member(x))
                            .map_err(|e| e.to_string())?,
                    )?;
                }
                Ok(())
            })
        })
        .collect();
    let mut res = Ok(());
    for s in spawners {
        let r = s
            .join()
            .map_err(|_| "spawner thread panicked".to_string())
            .and_then(|r| r);
        if res.is_ok() {
            res = r;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for h in hammers {
        let _ = h.join();
    }
    res?;
    ensure!(
        x.load(Ordering::SeqCst) == 20,
        "only {} members finished",
        x.load(Ordering::SeqCst)
    );
    let _ = set;
    Ok(())
}

fn tid_check(_: &AtomicI32) -> i32 {
    let mut clk: libc::clockid_t = 0;
    // SAFETY: valid out-pointer, our own thread.
    if unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clk) } != 0 {
        return 2;
    }
    // SAFETY: gettid cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
    if !(clk >> 3) == tid {
        0
    } else {
        1
    }
}

fn libc_tid_refreshed(set: &'static Set) -> Result<(), String> {
    join_ok(spawn(set, tid_check, leak(AtomicI32::new(0)))?)
}

#[repr(C)]
struct Counter {
    m: Mutex<u64>,
    n: u64,
}

fn count_member(c: &Counter) -> i32 {
    for _ in 0..c.n {
        *lock(&c.m) += 1;
    }
    0
}

fn mutex_contention(set: &'static Set) -> Result<(), String> {
    let c = leak(Counter {
        m: Mutex::new(0),
        n: 20_000,
    });
    let ms: Vec<_> = (0..3)
        .map(|_| spawn(set, count_member, c))
        .collect::<Result<_, _>>()?;
    count_member(c);
    for m in ms {
        join_ok(m)?;
    }
    let v = *lock(&c.m);
    ensure!(v == 80_000, "counter {v} != 80000");
    Ok(())
}

#[repr(C)]
struct PingPong {
    m: Mutex<u32>,
    c: Condvar,
    rounds: u32,
}

fn pinger(p: &PingPong) -> i32 {
    play(p, 0)
}
fn ponger(p: &PingPong) -> i32 {
    play(p, 1)
}
fn play(p: &PingPong, me: u32) -> i32 {
    let mut g = lock(&p.m);
    loop {
        if *g >= p.rounds * 2 {
            return 0;
        }
        if *g % 2 == me {
            *g += 1;
            p.c.notify_all();
        } else {
            g = match p.c.wait_timeout(g, Duration::from_secs(5)) {
                Ok((g, r)) if !r.timed_out() => g,
                Ok(_) => return 3,
                Err(_) => return 4,
            };
        }
    }
}

fn condvar_pingpong(set: &'static Set) -> Result<(), String> {
    let p = leak(PingPong {
        m: Mutex::new(0),
        c: Condvar::new(),
        rounds: 1000,
    });
    let a = spawn(set, pinger, p)?;
    let b = spawn(set, ponger, p)?;
    join_ok(a)?;
    join_ok(b)?;
    ensure!(*lock(&p.m) == 2000, "rounds {}", *lock(&p.m));
    Ok(())
}

#[repr(C)]
struct Rounds {
    b: Barrier,
    leaders: AtomicU32,
    phase: AtomicU32,
    bad: AtomicU32,
}

fn barrier_member(r: &Rounds) -> i32 {
    for round in 0..100 {
        if r.phase.load(Ordering::SeqCst) != round {
            r.bad.fetch_add(1, Ordering::SeqCst);
        }
        if r.b.wait().is_leader() {
            r.leaders.fetch_add(1, Ordering::SeqCst);
            r.phase.fetch_add(1, Ordering::SeqCst);
        }
        r.b.wait();
    }
    0
}

fn barrier_rounds(set: &'static Set) -> Result<(), String> {
    let r = leak(Rounds {
        b: Barrier::new(3).unwrap(),
        leaders: AtomicU32::new(0),
        phase: AtomicU32::new(0),
        bad: AtomicU32::new(0),
    });
    let ms: Vec<_> = (0..3)
        .map(|_| spawn(set, barrier_member, r))
        .collect::<Result<_, _>>()?;
    for m in ms {
        join_ok(m)?;
    }
    ensure!(
        r.leaders.load(Ordering::SeqCst) == 100,
        "leaders {}",
        r.leaders.load(Ordering::SeqCst)
    );
    ensure!(
        r.bad.load(Ordering::SeqCst) == 0,
        "a member ran ahead of the barrier"
    );
    ensure!(
        Barrier::new(0).is_err(),
        "zero-participant barrier accepted"
    );
    Ok(())
}

#[repr(C)]
struct Pair {
    l: RwLock<(u64, u64)>,
    bad: AtomicU32,
}

fn rw_member(p: &Pair) -> i32 {
    for i in 0..3000u64 {
        if i % 10 == 0 {
            let mut g = p.l.write().unwrap_or_else(|e| e.into_inner().unwrap());
            g.0 += 1;
            std::hint::black_box(&mut *g);
            g.1 += 1;
        } else {
            let g = p.l.read().unwrap_or_else(|e| e.into_inner().unwrap());
            if g.0 != g.1 {
                p.bad.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
    0
}

fn rwlock_members(set: &'static Set) -> Result<(), String> {
    let p = leak(Pair {
        l: RwLock::new((0, 0)),
        bad: AtomicU32::new(0),
    });
    let ms: Vec<_> = (0..3)
        .map(|_| spawn(set, rw_member, p))
        .collect::<Result<_, _>>()?;
    for m in ms {
        join_ok(m)?;
    }
    let g = p.l.read().map_err(|e| e.to_string())?;
    ensure!(*g == (900, 900), "final {:?}", *g);
    ensure!(p.bad.load(Ordering::SeqCst) == 0, "torn reads");
    Ok(())
}

#[repr(C)]
struct OnceCell {
    once: Once,
    runs: AtomicU32,
    flag: AtomicI32,
}

fn once_member(o: &OnceCell) -> i32 {
    wait_flag(&o.flag);
    o.once
        .call_once(|| {
            o.runs.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(20));
        })
        .unwrap();
    if o.once.is_completed() {
        0
    } else {
        1
    }
}

fn once_members(set: &'static Set) -> Result<(), String> {
    let o = leak(OnceCell {
        once: Once::new(),
        runs: AtomicU32::new(0),
        flag: AtomicI32::new(0),
    });
    let ms: Vec<_> = (0..4)
        .map(|_| spawn(set, once_member, o))
        .collect::<Result<_, _>>()?;
    o.flag.store(1, Ordering::SeqCst);
    for m in ms {
        join_ok(m)?;
    }
    ensure!(
        o.runs.load(Ordering::SeqCst) == 1,
        "ran {} times",
        o.runs.load(Ordering::SeqCst)
    );
    Ok(())
}

#[repr(C)]
struct Doomed {
    m: Mutex<u64>,
    l: RwLock<u64>,
    once: Once,
    locked: AtomicI32,
}

fn die_holding_mutex(d: &Doomed) -> i32 {
    let mut g = lock(&d.m);
    *g = 77;
    d.locked.store(1, Ordering::SeqCst);
    // SAFETY: dying on purpose while holding the lock.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    0
}

fn mutex_owner_death(set: &'static Set) -> Result<(), String> {
    let d = leak(Doomed {
        m: Mutex::new(0),
        l: RwLock::new(0),
        once: Once::new(),
        locked: AtomicI32::new(0),
    });
    let m = spawn(set, die_holding_mutex, d)?;
    let s = m.join().map_err(|e| e.to_string())?;
    ensure!(s == ExitStatus::Signaled(libc::SIGKILL), "member {s}");
    ensure!(d.locked.load(Ordering::SeqCst) == 1, "member never locked");
    let t0 = Instant::now();
    match d.m.lock() {
        Err(LockError::OwnerDied(g)) => ensure!(*g == 77, "data {}", *g),
        Ok(_) => return Err("lock held by a dead member was taken without OwnerDied".into()),
        Err(LockError::NotMember) => return Err("NotMember in the creator".into()),
    }
    ensure!(
        t0.elapsed() < Duration::from_secs(2),
        "recovery took {:?}",
        t0.elapsed()
    );
    ensure!(d.m.lock().is_ok(), "lock not clean after recovery");
    Ok(())
}

fn die_holding_write(d: &Doomed) -> i32 {
    let mut g = d.l.write().unwrap_or_else(|e| e.into_inner().unwrap());
    *g = 5;
    // SAFETY: dying on purpose.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    0
}
fn die_holding_read(d: &Doomed) -> i32 {
    let _g = d.l.read().unwrap_or_else(|e| e.into_inner().unwrap());
    // SAFETY: dying on purpose.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    0
}

fn rwlock_owner_death(set: &'static Set) -> Result<(), String> {
    let d = leak(Doomed {
        m: Mutex::new(0),
        l: RwLock::new(0),
        once: Once::new(),
        locked: AtomicI32::new(0),
    });
    spawn(set, die_holding_write, d)?
        .join()
        .map_err(|e| e.to_string())?;
    match d.l.read() {
        Err(LockError::OwnerDied(g)) => ensure!(*g == 5, "value {}", *g),
        Ok(_) => return Err("dead writer not reported".into()),
        Err(e) => return Err(e.to_string()),
    }
    spawn(set, die_holding_read, d)?
        .join()
        .map_err(|e| e.to_string())?;
    match d.l.write() {
        Err(LockError::OwnerDied(mut g)) => *g = 6,
        Ok(_) => return Err("dead reader not reported".into()),
        Err(e) => return Err(e.to_string()),
    }
    ensure!(*d.l.read().map_err(|e| e.to_string())? == 6, "write lost");
    Ok(())
}

fn die_in_once(d: &Doomed) -> i32 {
    let _ = d.once.call_once(|| {
        d.locked.store(2, Ordering::SeqCst);
        // SAFETY: dying on purpose inside the initializer.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    });
    0
}

fn once_owner_death(set: &'static Set) -> Result<(), String> {
    let d = leak(Doomed {
        m: Mutex::new(0),
        l: RwLock::new(0),
        once: Once::new(),
        locked: AtomicI32::new(0),
    });
    spawn(set, die_in_once, d)?
        .join()
        .map_err(|e| e.to_string())?;
    ensure!(
        d.locked.load(Ordering::SeqCst) == 2,
        "initializer never ran"
    );
    let mut ran = false;
    d.once.call_once(|| ran = true).map_err(|e| e.to_string())?;
    ensure!(ran && d.once.is_completed(), "initializer not retried");
    Ok(())
}

#[repr(C)]
struct Outsider {
    m: Mutex<u32>,
}

fn forking_member(o: &Outsider) -> i32 {
    // SAFETY: the child only runs the code below and _exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut code = 0;
        if !matches!(o.m.lock(), Err(LockError::NotMember)) {
            code |= 1;
        }
        if !alloc::malloc(16).is_null() {
            code |= 2;
        }
        if !matches!(Set::get(), Err(Error::NotMember)) {
            code |= 4;
        }
        // SAFETY: leave without running the parent's atexit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status) + 10
    } else {
        99
    }
}

fn outsider_refused(set: &'static Set) -> Result<(), String> {
    let o = leak(Outsider { m: Mutex::new(0) });
    let s = spawn(set, forking_member, o)?
        .join()
        .map_err(|e| e.to_string())?;
    ensure!(
        s == ExitStatus::Exited(10),
        "outsider checks failed: {s} (bits 1=lock 2=malloc 4=set, +10)"
    );
    Ok(())
}

fn alloc_basics(set: &'static Set) -> Result<(), String> {
    for size in [
        0usize,
        1,
        15,
        16,
        17,
        100,
        1000,
        8192,
        8193,
        100_000,
        3 << 20,
    ] {
        let p = alloc::malloc(size);
        ensure!(
            !p.is_null() && set.contains(p as usize),
            "malloc({size}) = {p:p}"
        );
        ensure!(p as usize % 16 == 0, "malloc({size}) misaligned");
        // SAFETY: p is a live block of at least `size` bytes.
        unsafe {
            ensure!(
                alloc::usable_size(p) >= size,
                "usable_size too small for {size}"
            );
            p.write_bytes(0x5a, size);
            alloc::free(p);
        }
    }
    let c = alloc::calloc(100, 40);
    ensure!(!c.is_null(), "calloc(100, 40) failed");
    // SAFETY: 4000 bytes were allocated.
    let zeroed = unsafe { core::slice::from_raw_parts(c, 4000) };
    ensure!(zeroed.iter().all(|&b| b == 0), "calloc not zeroed");
    // SAFETY: c is live.
    unsafe { alloc::free(c) };
    let mut p = alloc::malloc(10);
    // SAFETY: p is live; realloc preserves the prefix.
    unsafe {
        for i in 0..10 {
            *p.add(i) = i as u8;
        }
        for size in [20, 200, 5000, 70_000, 300_000, 50] {
            p = alloc::realloc(p, size);
            ensure!(!p.is_null(), "realloc to {size} failed");
            for i in 0..10 {
                ensure!(*p.add(i) == i as u8, "realloc to {size} lost byte {i}");
            }
        }
        ensure!(alloc::realloc(p, 0).is_null(), "realloc(p, 0) should free");
    }
    for align in [32usize, 64, 256, 4096, 65536, 1 << 20] {
        for size in [1usize, 100, 10_000] {
            let p = alloc::aligned_alloc(align, size);
            ensure!(
                !p.is_null() && p as usize % align == 0,
                "aligned_alloc({align}, {size}) = {p:p}"
            );
            // SAFETY: live block.
            unsafe { alloc::free(p) };
        }
    }
    Ok(())
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn alloc_bad_input(set: &'static Set) -> Result<(), String> {
    ensure!(
        alloc::calloc(usize::MAX, 2).is_null() && errno() == libc::ENOMEM,
        "calloc overflow"
    );
    ensure!(
        alloc::malloc(usize::MAX).is_null() && errno() == libc::ENOMEM,
        "malloc(SIZE_MAX)"
    );
    ensure!(
        alloc::malloc(set.size() as usize + 1).is_null() && errno() == libc::ENOMEM,
        "malloc > arena"
    );
    ensure!(
        alloc::aligned_alloc(3, 16).is_null() && errno() == libc::EINVAL,
        "aligned_alloc(3)"
    );
    let p = alloc::malloc(8);
    // SAFETY: p is live; an impossible size must fail and leave p alone.
    unsafe {
        ensure!(
            alloc::realloc(p, usize::MAX).is_null() && errno() == libc::ENOMEM,
            "realloc overflow"
        );
        *p = 1;
        alloc::free(p);
    }
    Ok(())
}

#[repr(C)]
struct Handoff {
    slots: [AtomicUsize; 256],
    sizes: [AtomicUsize; 256],
    mode: AtomicU32,
}

fn handoff_member(h: &Handoff) -> i32 {
    if h.mode.load(Ordering::SeqCst) == 0 {
        // Allocate for the creator to free.
        for (i, s) in h.slots.iter().enumerate() {
            let size = 8 + (i * 37) % 3000;
            let p = alloc::malloc(size);
            if p.is_null() {
                return 1;
            }
            // SAFETY: live block of `size` bytes.
            unsafe { p.write_bytes(i as u8, size) };
            h.sizes[i].store(size, Ordering::SeqCst);
            s.store(p as usize, Ordering::SeqCst);
        }
    } else {
        // Free what the creator allocated, after checking it.
        for (i, s) in h.slots.iter().enumerate() {
            let p = s.swap(0, Ordering::SeqCst) as *mut u8;
            let size = h.sizes[i].load(Ordering::SeqCst);
            // SAFETY: the creator handed us a live block of `size` bytes.
            unsafe {
                if core::slice::from_raw_parts(p, size)
                    .iter()
                    .any(|&b| b != !(i as u8))
                {
                    return 2;
                }
                alloc::free(p);
            }
        }
    }
    0
}

fn alloc_cross_member_free(set: &'static Set) -> Result<(), String> {
    let h: &Handoff = leak(Handoff {
        slots: core::array::from_fn(|_| AtomicUsize::new(0)),
        sizes: core::array::from_fn(|_| AtomicUsize::new(0)),
        mode: AtomicU32::new(0),
    });
    for _round in 0..3 {
        h.mode.store(0, Ordering::SeqCst);
        join_ok(spawn(set, handoff_member, h)?)?;
        for (i, s) in h.slots.iter().enumerate() {
            let p = s.swap(0, Ordering::SeqCst) as *mut u8;
            let size = h.sizes[i].load(Ordering::SeqCst);
            // SAFETY: the member handed us a live block of `size` bytes.
            unsafe {
                ensure!(
                    core::slice::from_raw_parts(p, size)
                        .iter()
                        .all(|&b| b == i as u8),
                    "block {i} corrupted"
                );
                alloc::free(p);
            }
        }
        h.mode.store(1, Ordering::SeqCst);
        for (i, s) in h.slots.iter().enumerate() {
            let size = 8 + (i * 53) % 5000;
            let p = alloc::malloc(size);
            // SAFETY: live block.
            unsafe { p.write_bytes(!(i as u8), size) };
            h.sizes[i].store(size, Ordering::SeqCst);
            s.store(p as usize, Ordering::SeqCst);
        }
        join_ok(spawn(set, handoff_member, h)?)?;
    }
    // Our own heap collects the remote frees and can reuse the blocks.
    alloc::collect();
    Ok(())
}

fn resident_pages(p: *const u8, len: usize) -> usize {
    let mut v = vec![0u8; len.div_ceil(4096)];
    // SAFETY: `p` is page-aligned and mapped for `len` bytes; `v` has one
    // byte per page.
    let r = unsafe { libc::mincore(p as *mut libc::c_void, len, v.as_mut_ptr()) };
    assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
    v.iter().filter(|&&b| b & 1 != 0).count()
}

#[repr(C)]
struct Big {
    addr: AtomicUsize,
}

fn big_free_member(b: &Big) -> i32 {
    let p = b.addr.load(Ordering::SeqCst) as *mut u8;
    // SAFETY: the creator handed us this live block.
    unsafe { alloc::free(p) };
    0
}

fn alloc_returns_memory(set: &'static Set) -> Result<(), String> {
    const LEN: usize = 8 << 20;
    let p = alloc::malloc(LEN);
    ensure!(!p.is_null(), "malloc(8 MiB) failed");
    // SAFETY: live block of LEN bytes.
    unsafe { p.write_bytes(1, LEN) };
    let r = resident_pages(p, LEN);
    ensure!(r == LEN / 4096, "only {r} pages resident after touching");
    let before = alloc::stats(set).pages_released;
    // Freed by another member: released for everyone.
    let b = leak(Big {
        addr: AtomicUsize::new(p as usize),
    });
    join_ok(spawn(set, big_free_member, b)?)?;
    let r = resident_pages(p, LEN);
    ensure!(
        r == 0,
        "{r} pages still resident in the creator after a member freed them"
    );
    ensure!(
        alloc::stats(set).pages_released >= before + (LEN / alloc::arena::PAGE_SIZE) as u64,
        "stats"
    );
    // Small blocks: once all are freed and collected, their pages go back.
    let ptrs: Vec<_> = (0..20_000).map(|_| alloc::malloc(64) as usize).collect();
    let in_use = alloc::stats(set).pages_in_use;
    for &q in &ptrs {
        // SAFETY: live blocks.
        unsafe { alloc::free(q as *mut u8) };
    }
    alloc::collect();
    let after = alloc::stats(set).pages_in_use;
    ensure!(
        after + 15 <= in_use,
        "small pages not returned: {in_use} -> {after}"
    );
    Ok(())
}

fn vec_member(out: &AtomicUsize) -> i32 {
    let mut v: SharedVec<u64> = SharedVec::new_in(SharedAlloc);
    v.extend(0..10_000u64);
    let sum = v.iter().sum::<u64>();
    // Hand the vector's buffer to the creator.
    out.store(SharedVec::leak(v).as_ptr() as usize, Ordering::SeqCst);
    if sum == 49_995_000 {
        0
    } else {
        1
    }
}

fn shared_vec_member(set: &'static Set) -> Result<(), String> {
    let out = leak(AtomicUsize::new(0));
    join_ok(spawn(set, vec_member, out)?)?;
    let p = out.load(Ordering::SeqCst) as *mut u64;
    ensure!(set.contains(p as usize), "vector buffer outside the range");
    // SAFETY: the member leaked a 10_000-element buffer to us.
    let s = unsafe { core::slice::from_raw_parts(p, 10_000) };
    ensure!(s[9_999] == 9_999, "contents");
    // SAFETY: leaked block of the shared allocator.
    unsafe { alloc::free(p as *mut u8) };
    Ok(())
}

fn free_stack_ptr(_: &AtomicI32) -> i32 {
    let mut x = 0u64;
    // SAFETY: deliberately wrong: must abort, not corrupt.
    unsafe { alloc::free(&mut x as *mut u64 as *mut u8) };
    0
}
fn double_free(_: &AtomicI32) -> i32 {
    let p = alloc::malloc(32);
    // SAFETY: deliberately wrong: must abort in debug builds.
    unsafe {
        alloc::free(p);
        alloc::free(p);
    }
    0
}
fn interior_free(_: &AtomicI32) -> i32 {
    let p = alloc::malloc(64);
    // SAFETY: deliberately wrong: must abort in debug builds.
    unsafe { alloc::free(p.add(8)) };
    0
}

fn foreign_free_detected(set: &'static Set) -> Result<(), String> {
    let z = leak(AtomicI32::new(0));
    // stderr of these members carries the expected abort messages.
    let s = spawn(set, free_stack_ptr, z)?
        .join()
        .map_err(|e| e.to_string())?;
    ensure!(
        s == ExitStatus::Signaled(libc::SIGABRT),
        "free(stack pointer): {s}"
    );
    if cfg!(debug_assertions) {
        let s = spawn(set, double_free, z)?
            .join()
            .map_err(|e| e.to_string())?;
        ensure!(s == ExitStatus::Signaled(libc::SIGABRT), "double free: {s}");
        let s = spawn(set, interior_free, z)?
            .join()
            .map_err(|e| e.to_string())?;
        ensure!(
            s == ExitStatus::Signaled(libc::SIGABRT),
            "interior free: {s}"
        );
    }
    Ok(())
}

#[repr(C)]
struct KrShared {
    kr: AtomicUsize,
}

fn kr_member(k: &KrShared) -> i32 {
    // SAFETY: the creator stored a live &'static KrAllocator.
    let kr = unsafe { &*(k.kr.load(Ordering::SeqCst) as *const halfproc::alloc::kr::KrAllocator) };
    let mut v = Vec::new();
    for i in 0..2000usize {
        let p = kr.malloc(16 + i % 1000);
        if p.is_null() {
            return 1;
        }
        // SAFETY: live block.
        unsafe { p.write_bytes(7, 16 + i % 1000) };
        v.push(p);
    }
    for p in v {
        // SAFETY: blocks of this allocator.
        unsafe { kr.free(p) };
    }
    0
}

fn kr_baseline(set: &'static Set) -> Result<(), String> {
    let kr = halfproc::alloc::kr::KrAllocator::new(set).map_err(|e| e.to_string())?;
    let k = leak(KrShared {
        kr: AtomicUsize::new(kr as *const _ as usize),
    });
    let ms: Vec<_> = (0..2)
        .map(|_| spawn(set, kr_member, k))
        .collect::<Result<_, _>>()?;
    kr_member(k);
    for m in ms {
        join_ok(m)?;
    }
    Ok(())
}

#[repr(C)]
struct DmMailbox {
    pid: AtomicI32,
    addr: AtomicUsize,
    step: AtomicU32,
}

fn dm_member(mb: &DmMailbox) -> i32 {
    // Private memory of this member: its own stack.
    let mut private = *b"member-private-data!";
    mb.addr
        .store(private.as_mut_ptr() as usize, Ordering::SeqCst);
    mb.pid.store(std::process::id() as i32, Ordering::SeqCst);
    mb.step.store(1, Ordering::SeqCst);
    let t0 = Instant::now();
    while mb.step.load(Ordering::SeqCst) != 2 {
        if t0.elapsed() > Duration::from_secs(10) {
            return 5;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // The creator overwrote it with dmwrite.
    if std::hint::black_box(&private) != b"written-by-creator!!" {
        return 6;
    }
    // And the member reads the creator's private memory.
    let mut buf = [0u8; 8];
    let creator = Set::get().unwrap().creator_pid();
    match halfproc::dmread(creator, &DM_CREATOR as *const u64 as usize, 8, &mut buf) {
        Ok(8) if u64::from_ne_bytes(buf) == 0xc0ffee => 0,
        _ => 7,
    }
}

static DM_CREATOR: u64 = 0xc0ffee;

fn dm_members(set: &'static Set) -> Result<(), String> {
    let mb = leak(DmMailbox {
        pid: AtomicI32::new(0),
        addr: AtomicUsize::new(0),
        step: AtomicU32::new(0),
    });
    let m = spawn(set, dm_member, mb)?;
    let t0 = Instant::now();
    while mb.step.load(Ordering::SeqCst) != 1 {
        ensure!(
            t0.elapsed() < Duration::from_secs(10),
            "member never published"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let (pid, addr) = (
        mb.pid.load(Ordering::SeqCst),
        mb.addr.load(Ordering::SeqCst),
    );
    let mut buf = [0u8; 20];
    let n = halfproc::dmread(pid, addr, 20, &mut buf).map_err(|e| format!("dmread: {e}"))?;
    ensure!(
        n == 20 && &buf == b"member-private-data!",
        "dmread got {n} {:?}",
        String::from_utf8_lossy(&buf)
    );
    let n = halfproc::dmwrite(pid, addr, 20, b"written-by-creator!!")
        .map_err(|e| format!("dmwrite: {e}"))?;
    ensure!(n == 20, "dmwrite copied {n}");
    mb.step.store(2, Ordering::SeqCst);
    join_ok(m)
}

fn dm_bad_input(set: &'static Set) -> Result<(), String> {
    let mut buf = [0u8; 16];
    // PID 1 is never a member.
    let e = halfproc::dmread(1, 0x1000, 16, &mut buf)
        .err()
        .ok_or("dmread(pid 1) succeeded")?;
    ensure!(e.raw_os_error() == Some(libc::EPERM), "dmread(pid 1): {e}");
    let e = halfproc::dmread(set.creator_pid(), 0x1000, 32, &mut buf)
        .err()
        .ok_or("len > buffer accepted")?;
    ensure!(
        e.kind() == std::io::ErrorKind::InvalidInput,
        "len > buffer: {e}"
    );
    // A remote range running into an unmapped page: partial copy.
    // SAFETY: a fresh private mapping of two pages; the second is unmapped.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    } as *mut u8;
    ensure!(p as isize != -1, "mmap");
    // SAFETY: unmapping the second page of our own mapping.
    unsafe { libc::munmap(p.add(4096) as *mut libc::c_void, 4096) };
    let mut big = vec![0u8; 8192];
    let r = halfproc::dmread(set.creator_pid(), p as usize + 4000, 200, &mut big);
    // SAFETY: unmapping the first page.
    unsafe { libc::munmap(p as *mut libc::c_void, 4096) };
    ensure!(matches!(r, Ok(96)), "partial copy gave {r:?}");
    let e = halfproc::dmread(set.creator_pid(), 16, 16, &mut buf)
        .err()
        .ok_or("read of address 16 succeeded")?;
    ensure!(e.raw_os_error() == Some(libc::EFAULT), "bad address: {e}");
    Ok(())
}

// ---------------------------------------------------------------------------
// Stress in the style of mimalloc's test-stress: blocks stamped with cookies,
// handed between members through a shared transfer array, checked on free.

const TRANSFERS: usize = 1000;
const COOKIE: u64 = 0xbf58_476d_1ce4_e5b9;

#[repr(C)]
struct Stress {
    transfer: [AtomicUsize; TRANSFERS],
    deadline_ms: u64,
    errors: AtomicU64,
    ops: AtomicU64,
    seed: AtomicU64,
}

fn pick(r: &mut u64) -> u64 {
    // splitmix64: deterministic per member.
    *r = r.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *r;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A block of `words` u64: word 0 = count, the rest = cookie ^ address ^ i.
fn stress_alloc(r: &mut u64) -> *mut u64 {
    let roll = pick(r) % 100;
    let words = if roll == 0 {
        1 + (pick(r) % 40_000) as usize // rare large (up to 320 KiB)
    } else if roll < 10 {
        1 + (pick(r) % 1000) as usize
    } else {
        1 + (pick(r) % 16) as usize
    };
    let p = alloc::malloc(words * 8) as *mut u64;
    if p.is_null() {
        return p;
    }
    // SAFETY: fresh block of `words` u64.
    unsafe {
        *p = words as u64;
        for i in 1..words {
            *p.add(i) = COOKIE ^ (p as u64) ^ i as u64;
        }
    }
    p
}

/// Checks the stamps, then frees; returns false on corruption.
fn stress_free(p: *mut u64) -> bool {
    if p.is_null() {
        return true;
    }
    // SAFETY: `p` is a live stress block stamped by stress_alloc.
    unsafe {
        let words = *p as usize;
        let mut ok =
            words > 0 && words <= 40_001 && alloc::usable_size(p as *const u8) >= words * 8;
        if ok {
            for i in 1..words {
                if *p.add(i) != COOKIE ^ (p as u64) ^ i as u64 {
                    ok = false;
                    break;
                }
            }
        }
        alloc::free(p as *mut u8);
        ok
    }
}

fn stress_member(s: &Stress) -> i32 {
    let mut r = s
        .seed
        .fetch_add(1, Ordering::SeqCst)
        .wrapping_mul(0x2545_f491_4f6c_dd1d);
    let deadline = Instant::now() + Duration::from_millis(s.deadline_ms);
    let mut local: Vec<*mut u64> = Vec::with_capacity(512);
    let mut ops = 0u64;
    while Instant::now() < deadline {
        for _ in 0..256 {
            ops += 1;
            match pick(&mut r) % 4 {
                0 | 1 => {
                    if local.len() < 500 {
                        local.push(stress_alloc(&mut r));
                    }
                }
                2 => {
                    if !local.is_empty() {
                        let i = (pick(&mut r) as usize) % local.len();
                        if !stress_free(local.swap_remove(i)) {
                            s.errors.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
                _ => {
                    // Hand a block to whoever picks this slot next (any member).
                    let slot = &s.transfer[(pick(&mut r) as usize) % TRANSFERS];
                    let mine = local.pop().unwrap_or_else(|| stress_alloc(&mut r));
                    let theirs = slot.swap(mine as usize, Ordering::AcqRel) as *mut u64;
                    if !stress_free(theirs) {
                        s.errors.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        }
    }
    for p in local {
        if !stress_free(p) {
            s.errors.fetch_add(1, Ordering::SeqCst);
        }
    }
    s.ops.fetch_add(ops, Ordering::SeqCst);
    0
}

fn alloc_stress(set: &'static Set) -> Result<(), String> {
    let s = leak(Stress {
        transfer: core::array::from_fn(|_| AtomicUsize::new(0)),
        deadline_ms: 1500,
        errors: AtomicU64::new(0),
        ops: AtomicU64::new(0),
        seed: AtomicU64::new(1),
    });
    let before = alloc::stats(set).pages_in_use;
    let ms: Vec<_> = (0..3)
        .map(|_| spawn(set, stress_member, s))
        .collect::<Result<_, _>>()?;
    for m in ms {
        join_ok(m)?;
    }
    for slot in s.transfer.iter() {
        if !stress_free(slot.swap(0, Ordering::AcqRel) as *mut u64) {
            s.errors.fetch_add(1, Ordering::SeqCst);
        }
    }
    alloc::collect();
    let errors = s.errors.load(Ordering::SeqCst);
    println!(
        "# stress: {} operations, {} heaps, pages in use {} -> {}",
        s.ops.load(Ordering::SeqCst),
        alloc::heaps_in_use(set),
        before,
        alloc::stats(set).pages_in_use
    );
    ensure!(errors == 0, "{errors} corrupted blocks");
    ensure!(
        s.ops.load(Ordering::SeqCst) > 10_000,
        "stress made too little progress"
    );
    Ok(())
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
