// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Cases: the backend, the set, members (creation, exit status, arguments,
//! copies of the creator, join/detach, nesting, threads) and outsiders.

use super::*;

// ---------------------------------------------------------------------------

pub(super) fn backend_reported(set: &'static Set) -> Result<(), String> {
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
        set.base() as u64 == halfproc_sys::range::HALFPROC_RANGE_START,
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

pub(super) fn kernel_request(_set: &'static Set) -> Result<(), String> {
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

pub(super) fn init_twice(_set: &'static Set) -> Result<(), String> {
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

pub(super) fn member_exit_status(set: &'static Set) -> Result<(), String> {
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

pub(super) fn member_arg_passed(set: &'static Set) -> Result<(), String> {
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

pub(super) fn member_copies_creator_now(set: &'static Set) -> Result<(), String> {
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

pub(super) fn member_sharing(set: &'static Set) -> Result<(), String> {
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

pub(super) fn join_detach(set: &'static Set) -> Result<(), String> {
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

pub(super) fn many_members(set: &'static Set) -> Result<(), String> {
    let flag = leak(AtomicI32::new(0));
    let t0 = std::time::Instant::now();
    let ms: Vec<_> = (0..64)
        .map(|_| spawn(set, wait_flag, flag))
        .collect::<Result<_, _>>()?;
    println!("# 64 members created in {} ms", t0.elapsed().as_millis());
    let pids: std::collections::HashSet<_> = ms.iter().map(|m| m.pid()).collect();
    ensure!(pids.len() == 64, "pids not distinct");
    // Each member is RUNNING once spawn returns, and waits for the flag.
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

pub(super) fn nested_members(set: &'static Set) -> Result<(), String> {
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

pub(super) fn multithreaded_parent(set: &'static Set) -> Result<(), String> {
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

pub(super) fn libc_tid_refreshed(set: &'static Set) -> Result<(), String> {
    join_ok(spawn(set, tid_check, leak(AtomicI32::new(0)))?)
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

pub(super) fn outsider_refused(set: &'static Set) -> Result<(), String> {
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
