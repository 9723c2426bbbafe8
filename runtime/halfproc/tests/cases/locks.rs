// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Cases: cross-member locks (mutex, condvar, barrier, rwlock, once) and
//! recovery from an owner that died holding one.

use super::*;

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

pub(super) fn mutex_contention(set: &'static Set) -> Result<(), String> {
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

pub(super) fn condvar_pingpong(set: &'static Set) -> Result<(), String> {
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

pub(super) fn barrier_rounds(set: &'static Set) -> Result<(), String> {
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

pub(super) fn rwlock_members(set: &'static Set) -> Result<(), String> {
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

pub(super) fn once_members(set: &'static Set) -> Result<(), String> {
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

pub(super) fn mutex_owner_death(set: &'static Set) -> Result<(), String> {
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

pub(super) fn rwlock_owner_death(set: &'static Set) -> Result<(), String> {
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

pub(super) fn once_owner_death(set: &'static Set) -> Result<(), String> {
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
