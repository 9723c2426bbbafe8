//! The C test program checkpointed mid-run and restored finishes with the
//! same stdout and exit status as an uninterrupted run; then 20 migrations
//! in a row on one run.

mod common;

use common::*;
use halfproc_migrate::{
    checkpoint, freeze_and_dump, image, restore, restore_from_memory, Leave, RestoreOptions,
};
use std::time::Instant;

#[test]
fn checkpoint_restore_once_matches_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let (want, want_st) = reference(prog(), &["15000"], None, tmp.path());
    assert!(want.len() > 1000, "reference output too short");

    let out = tmp.path().join("migrated.out");
    let pid = spawn(prog(), &["15000"], None, &out);
    sleep_ms(300);
    let img = tmp.path().join("img");
    let t = Instant::now();
    let stats = checkpoint(pid, &img, Leave::Kill).expect("checkpoint");
    let t_ck = t.elapsed();
    let t = Instant::now();
    let r = restore(&img).expect("restore");
    let t_rs = t.elapsed();
    let st = describe(wait(r.pid));
    eprintln!(
        "prog: checkpoint {:?} (frozen {:?}, {} KiB pages, {} VMAs), restore {:?}",
        t_ck,
        stats.frozen,
        stats.pages_bytes / 1024,
        stats.vmas,
        t_rs
    );
    assert_same_output(&std::fs::read(&out).unwrap(), &want);
    assert_eq!(st, want_st, "exit status");
}

#[test]
fn twenty_migrations_in_a_row() {
    let tmp = tempfile::tempdir().unwrap();
    let (want, want_st) = reference(prog(), &["40000"], None, tmp.path());
    let out = tmp.path().join("migrated.out");
    let mut pid = spawn(prog(), &["40000"], None, &out);
    let mut total_ck = std::time::Duration::ZERO;
    let mut total_rs = std::time::Duration::ZERO;
    for round in 0..20 {
        sleep_ms(60);
        let img = tmp.path().join(format!("img{round}"));
        let t = Instant::now();
        checkpoint(pid, &img, Leave::Kill)
            .unwrap_or_else(|e| panic!("round {round}: checkpoint: {e}"));
        total_ck += t.elapsed();
        let t = Instant::now();
        pid = restore(&img)
            .unwrap_or_else(|e| panic!("round {round}: restore: {e}"))
            .pid;
        total_rs += t.elapsed();
        std::fs::remove_dir_all(&img).unwrap();
    }
    let st = describe(wait(pid));
    eprintln!(
        "prog x20: mean checkpoint {:?}, mean restore {:?}",
        total_ck / 20,
        total_rs / 20
    );
    assert_same_output(&std::fs::read(&out).unwrap(), &want);
    assert_eq!(st, want_st, "exit status after 20 migrations");
}

#[test]
fn migrations_through_memory_match_reference() {
    // freeze_and_dump + restore_from_memory (no file in between), as the
    // local stop-and-copy path and `halfproc bench migrate` use them.
    let tmp = tempfile::tempdir().unwrap();
    let (want, want_st) = reference(prog(), &["40000"], None, tmp.path());
    let out = tmp.path().join("migrated.out");
    let mut pid = spawn(prog(), &["40000"], None, &out);
    for round in 0..8 {
        sleep_ms(40);
        let d = freeze_and_dump(pid, &[])
            .unwrap_or_else(|e| panic!("round {round}: freeze_and_dump: {e}"));
        image::verify_pages(&d.manifest, &d.pages)
            .unwrap_or_else(|e| panic!("round {round}: verify: {e}"));
        let r = restore_from_memory(&d.manifest, &d.pages, &RestoreOptions::default())
            .unwrap_or_else(|e| panic!("round {round}: restore: {e}"));
        d.kill();
        pid = r.pid;
    }
    let st = describe(wait(pid));
    assert_same_output(&std::fs::read(&out).unwrap(), &want);
    assert_eq!(st, want_st, "exit status after 8 migrations through memory");
}

#[test]
fn restore_from_memory_refuses_contents_of_another_length() {
    let tmp = tempfile::tempdir().unwrap();
    let pid = spawn(prog(), &["40000"], None, &tmp.path().join("out"));
    sleep_ms(50);
    let d = freeze_and_dump(pid, &[]).expect("freeze_and_dump");
    let short = &d.pages[..d.pages.len() - 4096];
    match restore_from_memory(&d.manifest, short, &RestoreOptions::default()) {
        Err(halfproc_migrate::Error::Image(m)) => assert!(m.contains("manifest"), "{m}"),
        other => panic!("expected a length error, got {other:?}"),
    }
    d.kill();
}

#[test]
fn restore_from_memory_refuses_shared_memory() {
    // The restorer moves the contents' pages: never those of a shared mapping.
    let tmp = tempfile::tempdir().unwrap();
    let pid = spawn(prog(), &["40000"], None, &tmp.path().join("out"));
    sleep_ms(50);
    let d = freeze_and_dump(pid, &[]).expect("freeze_and_dump");
    let len = d.pages.len();
    // SAFETY: a new shared anonymous mapping of `len` bytes, unmapped below.
    let m = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(m, libc::MAP_FAILED);
    // SAFETY: `m` is `len` writable bytes that nothing else refers to.
    let shared = unsafe { std::slice::from_raw_parts_mut(m.cast::<u8>(), len) };
    shared.copy_from_slice(&d.pages);
    let r = restore_from_memory(&d.manifest, shared, &RestoreOptions::default());
    // SAFETY: unmapping the mapping made above; `shared` is not used again.
    unsafe { libc::munmap(m, len) };
    match r {
        Err(halfproc_migrate::Error::Restore(m)) => assert!(m.contains("private memory"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    d.kill();
}

#[test]
fn checkpoints_right_after_exec() {
    // Early stops land in ld.so, libc start-up and the first mallocs.
    let tmp = tempfile::tempdir().unwrap();
    let (want, want_st) = reference(prog(), &["2000"], None, tmp.path());
    for delay in [0u64, 1, 2, 3, 5, 8, 13] {
        let out = tmp.path().join(format!("early{delay}.out"));
        let pid = spawn(prog(), &["2000"], None, &out);
        sleep_ms(delay);
        let img = tmp.path().join(format!("img{delay}"));
        checkpoint(pid, &img, Leave::Kill)
            .unwrap_or_else(|e| panic!("after {delay} ms: checkpoint: {e}"));
        let r = restore(&img).unwrap_or_else(|e| panic!("after {delay} ms: restore: {e}"));
        let st = describe(wait(r.pid));
        assert_eq!(st, want_st, "exit status, checkpoint after {delay} ms");
        assert_same_output(&std::fs::read(&out).unwrap(), &want);
    }
}

/// Waits for our child `pid` at most `secs` seconds; kills it and fails if
/// it is still there (a copy that never leaves its restorer spins forever).
fn wait_within(pid: i32, secs: u64) -> i32 {
    for _ in 0..secs * 50 {
        let mut st = 0;
        // SAFETY: polling our own child.
        if unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) } == pid {
            return st;
        }
        sleep_ms(20);
    }
    kill(pid);
    panic!("pid {pid} did not end within {secs} s");
}

#[test]
fn checkpoints_of_a_copy_still_in_its_restorer() {
    // `restore` returns when the blob closes its status pipe, just before
    // its `rt_sigreturn`: a checkpoint right after it may find the copy
    // still in the blob. Its registers there are the blob's; dumped, the
    // next copy would resume in its own blob and `rt_sigreturn` forever.
    let tmp = tempfile::tempdir().unwrap();
    let (want, want_st) = reference(prog(), &["40000"], None, tmp.path());
    let out = tmp.path().join("migrated.out");
    let pid = spawn(prog(), &["40000"], None, &out);
    sleep_ms(20);
    let img = tmp.path().join("img");
    checkpoint(pid, &img, Leave::Kill).expect("checkpoint");
    // Restored stopped: it stops itself inside the blob (kill(0, SIGSTOP)).
    let m = image::read(&img).unwrap();
    let pages = std::fs::File::open(img.join(image::PAGES)).unwrap();
    let opts = RestoreOptions {
        stopped: true,
        ..Default::default()
    };
    let mut pid = halfproc_migrate::restore_from(&m, pages, &opts)
        .expect("restore stopped")
        .pid;
    assert_eq!(state_and_tracer(pid), ('T', 0), "restored stopped");
    match checkpoint(pid, &tmp.path().join("in_blob"), Leave::Kill) {
        Err(halfproc_migrate::Error::Restore(e)) => assert!(e.contains("restorer"), "{e}"),
        other => panic!("a copy stopped in its restorer was checkpointed: {other:?}"),
    }
    // Detached, it re-enters its group stop (running for a moment).
    let mut state = state_and_tracer(pid);
    for _ in 0..100 {
        if state == ('T', 0) {
            break;
        }
        sleep_ms(10);
        state = state_and_tracer(pid);
    }
    assert_eq!(state, ('T', 0), "left stopped, untraced");
    // SAFETY: continuing our own stopped child.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    // Then checkpoints with no gap at all: each often lands in the blob's
    // last system calls, which it is run through first.
    for round in 0..30 {
        let img = tmp.path().join(format!("img{round}"));
        checkpoint(pid, &img, Leave::Kill)
            .unwrap_or_else(|e| panic!("round {round}: checkpoint: {e}"));
        pid = restore(&img)
            .unwrap_or_else(|e| panic!("round {round}: restore: {e}"))
            .pid;
        std::fs::remove_dir_all(&img).unwrap();
    }
    let st = describe(wait_within(pid, 60));
    assert_same_output(&std::fs::read(&out).unwrap(), &want);
    assert_eq!(st, want_st, "exit status after the moves");
}
