//! Pending signals carried: `sigq.c` has blocked signals queued to its
//! thread's queue and to the process-wide one (from itself and from two
//! children; several real-time instances with sigqueue values; one pending
//! with no siginfo), is moved 20 times in a row while it runs, then
//! unblocks them. Its report (every delivery in order: signal, si_code,
//! value, sender) and exit status equal an unmigrated run's.

mod common;

use common::*;
use halfproc_migrate::{
    checkpoint, freeze_and_dump, image, restore, restore_from_memory, Error, Leave, RestoreOptions,
};
use std::path::{Path, PathBuf};

const MOVES: usize = 20;
const ITERS: &str = "20000";

/// The unmigrated run: (stdout, status).
fn reference_run(tmp: &Path) -> (Vec<u8>, String) {
    let go = tmp.join("go-reference");
    std::fs::write(&go, b"").unwrap();
    let r = reference(sigq(), &[ITERS, "file", go.to_str().unwrap()], None, tmp);
    let text = String::from_utf8_lossy(&r.0).into_owned();
    // The report itself, checked once against what the kernel does
    // unmigrated (thread queue first, lowest signal first, each signal's
    // instances in the order sent): the test compares against this.
    let report: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(' ') || l.starts_with('1'))
        .collect();
    let want = [
        " 0 USR1     SI_TKILL from=child1",
        " 1 USR2     SI_TKILL from=self",
        " 2 RTMIN+1  SI_QUEUE value=6 from=self",
        " 3 RTMIN+3  SI_QUEUE value=2 from=self",
        " 4 RTMIN+3  SI_QUEUE value=102 from=child1",
        " 5 RTMIN+3  SI_QUEUE value=5 from=self",
        " 6 RTMIN+3  SI_QUEUE value=202 from=child2",
        " 7 USR1     SI_USER  from=self",
        " 8 USR2     SI_USER  from=child1",
        " 9 RTMIN+1  SI_QUEUE value=3 from=self",
        "10 RTMIN+1  SI_QUEUE value=103 from=child1",
        "11 RTMIN+1  SI_QUEUE value=201 from=child2",
        "12 RTMIN+1  SI_QUEUE value=7 from=self",
        "13 RTMIN+3  SI_QUEUE value=1 from=self",
        "14 RTMIN+3  SI_QUEUE value=101 from=child1",
        "15 RTMIN+3  SI_QUEUE value=4 from=self",
        "16 RTMIN+3  SI_QUEUE value=203 from=child2",
        "17 RTMIN+3  SI_QUEUE value=8 from=self",
        "18 RTMIN+5  SI_USER  from=none",
    ];
    assert_eq!(report.len(), want.len(), "reference report:\n{text}");
    for (got, want) in report.iter().zip(want) {
        assert!(got.starts_with(want), "reference: {got:?}, want {want:?}");
    }
    assert!(text.contains("deliveries=19 sigcont=0"), "{text}");
    assert_eq!(r.1, "exit 29");
    r
}

/// Starts sigq with its output in `out`; returns (pid, its go file) once
/// its signals are queued (its children are gone by then).
fn start(tmp: &Path, out: &Path) -> (i32, PathBuf) {
    let go = tmp.join("go");
    let pid = spawn(sigq(), &[ITERS, "file", go.to_str().unwrap()], None, out);
    wait_line(out, "queued");
    (pid, go)
}

/// The pending signals in an image: (queue, signal, code) of each.
fn carried(m: &image::Manifest) -> Vec<(bool, i32, i32)> {
    m.pending
        .iter()
        .map(|s| (s.shared, s.signo, s.code))
        .collect()
}

#[test]
fn pending_signals_survive_20_checkpoints_and_restores() {
    let tmp = tempfile::tempdir().unwrap();
    let (want, want_st) = reference_run(tmp.path());
    let out = tmp.path().join("moved.out");
    let (mut pid, go) = start(tmp.path(), &out);
    for round in 0..MOVES {
        sleep_ms(25);
        let img = tmp.path().join(format!("img{round}"));
        checkpoint(pid, &img, Leave::Kill)
            .unwrap_or_else(|e| panic!("round {round}: checkpoint: {e}"));
        let m = image::read(&img).unwrap();
        assert_eq!(
            m.version, 3,
            "no stopped timer: the version older tools read"
        );
        // 7 in the thread's queue, 12 in the process's (RTMIN+5 without
        // siginfo carried as the zeroed SI_USER one delivery would give).
        let c = carried(&m);
        assert_eq!(c.len(), 19, "round {round}: {c:?}");
        assert_eq!(c.iter().filter(|s| s.0).count(), 12, "round {round}: {c:?}");
        pid = restore(&img)
            .unwrap_or_else(|e| panic!("round {round}: restore: {e}"))
            .pid;
        std::fs::remove_dir_all(&img).unwrap();
    }
    std::fs::write(&go, b"").unwrap();
    let st = describe(wait(pid));
    assert_same_output(&std::fs::read(&out).unwrap(), &want);
    assert_eq!(st, want_st, "exit status after {MOVES} checkpoints");
}

#[test]
fn pending_signals_survive_20_stopped_migrations_through_memory() {
    // As the node daemon migrates: dump into memory, restore stopped, kill
    // the original, continue the copy with SIGCONT. The program's SIGCONT
    // handler must not see those SIGCONTs ("sigcont=0" in its report).
    let tmp = tempfile::tempdir().unwrap();
    let (want, want_st) = reference_run(tmp.path());
    let out = tmp.path().join("moved.out");
    let (mut pid, go) = start(tmp.path(), &out);
    let opts = RestoreOptions {
        stopped: true,
        ..Default::default()
    };
    for round in 0..MOVES {
        sleep_ms(25);
        let mut d =
            freeze_and_dump(pid, &[]).unwrap_or_else(|e| panic!("round {round}: dump: {e}"));
        assert_eq!(carried(&d.manifest).len(), 19, "round {round}");
        let r = restore_from_memory(&d.manifest, &d.pages, &opts)
            .unwrap_or_else(|e| panic!("round {round}: restore: {e}"));
        drop(std::mem::take(&mut d.pages));
        d.kill();
        // SAFETY: continuing our own stopped child.
        unsafe { libc::kill(r.pid, libc::SIGCONT) };
        pid = r.pid;
    }
    std::fs::write(&go, b"").unwrap();
    let st = describe(wait(pid));
    assert_same_output(&std::fs::read(&out).unwrap(), &want);
    assert_eq!(st, want_st, "exit status after {MOVES} migrations");
}

#[test]
fn pending_signals_stay_with_an_original_that_continues() {
    // A checkpoint that leaves the process running takes nothing from its
    // queues: blocked ones stay for later, as if nothing had happened.
    let tmp = tempfile::tempdir().unwrap();
    let (want, want_st) = reference_run(tmp.path());
    let out = tmp.path().join("orig.out");
    let (pid, go) = start(tmp.path(), &out);
    for round in 0..3 {
        let img = tmp.path().join(format!("img{round}"));
        checkpoint(pid, &img, Leave::Continue).expect("checkpoint");
    }
    std::fs::write(&go, b"").unwrap();
    let st = describe(wait(pid));
    assert_same_output(&std::fs::read(&out).unwrap(), &want);
    assert_eq!(st, want_st);
}

#[test]
fn image_versions_and_bad_pending_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let (pid, _go) = start(tmp.path(), &out);
    let img = tmp.path().join("img");
    checkpoint(pid, &img, Leave::Kill).expect("checkpoint");
    let path = img.join(image::MANIFEST);
    let text = std::fs::read_to_string(&path).unwrap();
    let edit = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        f(&mut v);
        std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
        image::read(&img)
    };
    // A newer format is refused, naming the versions.
    let newer = image::VERSION + 1;
    match edit(&|v| v["version"] = newer.into()) {
        Err(Error::Image(m)) => assert!(m.contains(&format!("version {newer}")), "{m}"),
        other => panic!("version {newer} read: {:?}", other.map(|m| m.version)),
    }
    // A siginfo that does not match its entry is refused.
    match edit(&|v| v["pending"][0]["info"][0] = 9.into()) {
        Err(Error::Image(m)) => assert!(m.contains("pending signal"), "{m}"),
        other => panic!("mismatched siginfo read: {other:?}"),
    }
    match edit(&|v| v["pending"][0]["signo"] = 9.into()) {
        Err(Error::Image(m)) => assert!(m.contains("pending signal 9"), "{m}"),
        other => panic!("SIGKILL entry read: {other:?}"),
    }
    // Version 1 (no pending signals, whose writer refused them) is read.
    let m = edit(&|v| {
        v["version"] = 1.into();
        v.as_object_mut().unwrap().remove("pending");
    })
    .expect("version 1 image");
    assert!(m.pending.is_empty());
}
