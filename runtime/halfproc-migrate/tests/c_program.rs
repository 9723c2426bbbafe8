//! The C test program checkpointed mid-run and restored finishes with the
//! same stdout and exit status as an uninterrupted run; then 20 migrations
//! in a row on one run.

mod common;

use common::*;
use halfproc_migrate::{checkpoint, restore, Leave};
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
