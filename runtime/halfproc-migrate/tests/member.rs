//! Members of a half-process set: their set range is left out of the image
//! and the copy shares the restoring process's range at the same address
//! (how a DMI compute instance moves to another node's set at `DMI_yield`).

mod common;

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use common::*;
use halfproc_migrate::{freeze_and_dump_member, restore_from, Error, Refusal, RestoreOptions};

const LEN: u64 = 1 << 20;

/// Starts `targets member AT` and returns its pid and its private checksum.
fn start_member(at: u64, out: &std::path::Path) -> (i32, u64) {
    let pid = spawn(targets(), &["member", &format!("{at:x}")], None, out);
    for _ in 0..200 {
        let text = std::fs::read_to_string(out).unwrap_or_default();
        if let Some(sum) = text.strip_prefix("ready ") {
            return (pid, sum.trim().parse().unwrap());
        }
        sleep_ms(10);
    }
    panic!("target member did not get ready");
}

/// Maps a fresh shared memfd of `LEN` bytes at `at` in this process (the
/// restoring side's "set range"), as words.
fn own_set_range(at: u64) -> &'static [AtomicU64] {
    // SAFETY: plain memfd_create with a valid name.
    let fd = unsafe { libc::memfd_create(c"set".as_ptr(), 0) };
    assert!(fd >= 0);
    // SAFETY: `fd` is ours; the range at `at` is checked to be free
    // (MAP_FIXED_NOREPLACE) and never unmapped (leaked for the test).
    let p = unsafe {
        assert_eq!(libc::ftruncate(fd, LEN as i64), 0);
        let p = libc::mmap(
            at as *mut libc::c_void,
            LEN as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED_NOREPLACE,
            fd,
            0,
        );
        libc::close(fd);
        p
    };
    assert_eq!(p as u64, at, "map the set range");
    // SAFETY: `LEN` bytes of zeroed, page-aligned, shared memory that stay
    // mapped; AtomicU64 has the layout of u64.
    unsafe { std::slice::from_raw_parts(p as *const AtomicU64, 4) }
}

fn pages_file(pages: &[u8]) -> std::fs::File {
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(pages).unwrap();
    f
}

#[test]
fn a_member_moves_into_the_restoring_process_set_range() {
    let at = 0x3000_0000_0000u64;
    let tmp = tempfile::tempdir().unwrap();
    let (pid, sum) = start_member(at, &tmp.path().join("out"));
    let d = freeze_and_dump_member(pid, &[], Some((at, at + LEN))).expect("dump");
    assert_eq!(d.manifest.set_range, Some((at, at + LEN)));
    assert!(
        d.manifest
            .vmas
            .iter()
            .all(|v| v.end <= at || v.start >= at + LEN),
        "the set range was carried"
    );
    let (manifest, pages) = (d.manifest.clone(), pages_file(&d.pages));
    d.kill();

    let w = own_set_range(at);
    let r = restore_from(&manifest, pages, &RestoreOptions::default()).expect("restore");
    // The copy spins on word 1 of *our* range: give it its "mailbox".
    w[1].store(1000, Ordering::SeqCst);
    assert_eq!(describe(wait(r.pid)), "exit 9");
    // It saw our word 1, kept its private heap, and wrote into our range;
    // word 0 (the original's pid, in its own range) was not carried.
    assert_eq!(w[2].load(Ordering::SeqCst), sum.wrapping_add(1000));
    assert_eq!(w[3].load(Ordering::SeqCst), r.pid as u64);
    assert_eq!(w[0].load(Ordering::SeqCst), 0);
}

#[test]
fn without_the_set_range_a_member_is_refused_and_left_running() {
    let at = 0x3100_0000_0000u64;
    let tmp = tempfile::tempdir().unwrap();
    let (pid, _) = start_member(at, &tmp.path().join("out"));
    // Not told about the set range: the shared mapping is refused.
    match freeze_and_dump_member(pid, &[], None) {
        Err(Error::Refused(Refusal::SharedMapping { start, .. })) => assert_eq!(start, at),
        Err(e) => panic!("expected a shared-mapping refusal, got {e}"),
        Ok(_) => panic!("expected a shared-mapping refusal, got an image"),
    }
    // Told, but restored by a process without that range: refused, and
    // the original, resumed, is still there and untraced.
    let d = freeze_and_dump_member(pid, &[], Some((at, at + LEN))).expect("dump");
    let (manifest, pages) = (d.manifest.clone(), pages_file(&d.pages));
    match restore_from(&manifest, pages, &RestoreOptions::default()) {
        Err(Error::Restore(m)) => assert!(m.contains("half-process set"), "{m}"),
        other => panic!("expected a restore error, got {other:?}"),
    }
    d.resume();
    sleep_ms(50);
    let (state, tracer) = state_and_tracer(pid);
    assert!(
        state == 'R' || state == 'S',
        "original left in state {state}"
    );
    assert_eq!(tracer, 0, "original left traced");
    kill(pid);
}
