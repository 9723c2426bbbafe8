//! Each unsupported resource is refused, named, before the target is stopped.

mod common;

use common::*;
use halfproc_migrate::{checkpoint, Error, Leave, Refusal};

/// Starts `targets MODE ARGS`, checkpoints it, and returns the refusal.
fn refused(mode: &str, extra: &[&str]) -> Refusal {
    let tmp = tempfile::tempdir().unwrap();
    let mut args = vec![mode];
    args.extend_from_slice(extra);
    let pid = spawn(targets(), &args, None, &tmp.path().join("out"));
    sleep_ms(150);
    let r = checkpoint(pid, &tmp.path().join("img"), Leave::Kill);
    // Nothing was stopped or left attached.
    let (state, tracer) = state_and_tracer(pid);
    assert!(state == 'R' || state == 'S', "target left in state {state}");
    assert_eq!(tracer, 0, "target left traced");
    kill(pid);
    match r {
        Err(Error::Refused(r)) => {
            eprintln!("{mode}: {r}");
            r
        }
        other => panic!("{mode}: expected a refusal, got {other:?}"),
    }
}

#[test]
fn refuses_threads() {
    assert!(matches!(
        refused("thread", &[]),
        Refusal::MultiThreaded { threads: 2 }
    ));
}

/// A POSIX timer has a kernel id and clock the restore cannot give back;
/// interval timers are carried (`state.rs`).
#[test]
fn refuses_posix_timers() {
    let r = refused("posixtimer", &[]);
    assert!(matches!(r, Refusal::PosixTimers { count: 1 }), "{r}");
    assert!(r.to_string().contains("timer_create"), "{r}");
}

#[test]
fn refuses_sockets() {
    let r = refused("socket", &[]);
    assert!(
        matches!(&r, Refusal::Socket { fd: 3, target } if target.starts_with("socket:")),
        "{r:?}"
    );
}

#[test]
fn refuses_pipes_to_other_processes() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = std::process::Command::new(targets());
    c.arg("spin").stdin(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    let pid = child.id() as i32;
    sleep_ms(100);
    let r = checkpoint(pid, &tmp.path().join("img"), Leave::Kill);
    let (state, tracer) = state_and_tracer(pid);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(state == 'R' || state == 'S', "target left in state {state}");
    assert_eq!(tracer, 0);
    match r {
        Err(Error::Refused(Refusal::Pipe { fd: 0, target })) => {
            assert!(target.starts_with("pipe:"))
        }
        other => panic!("expected a pipe refusal for fd 0, got {other:?}"),
    }
}

#[test]
fn refuses_devices() {
    let r = refused("device", &[]);
    assert!(
        matches!(&r, Refusal::Device { fd: 3, target } if target.starts_with("/dev/")),
        "{r:?}"
    );
}

/// A file of procfs or sysfs is the kernel's view of this machine (its
/// own status, by the original's pid): not carried as a regular file.
#[test]
fn refuses_files_of_procfs_and_sysfs() {
    for path in ["/proc/self/status", "/sys/kernel/mm"] {
        let r = refused("kernelfile", &[path]);
        assert!(
            matches!(&r, Refusal::KernelFile { fd: 3, target }
                if target.starts_with("/proc/") || target == path),
            "{path}: {r:?}"
        );
        assert!(r.to_string().contains("procfs or sysfs"), "{r}");
    }
}

#[test]
fn refuses_shared_writable_mappings() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("shared.bin");
    let r = refused("shared", &[f.to_str().unwrap()]);
    match &r {
        Refusal::SharedMapping { path, .. } => assert_eq!(path, f.to_str().unwrap()),
        other => panic!("{other:?}"),
    }
}

/// Shared anonymous memory that a child maps too (stress-ng's case): the
/// refusal names the child (before issue 11: "shared writable mapping").
#[test]
fn refuses_shared_anonymous_memory_mapped_by_another_process() {
    if !can_read_all_maps("refuses_shared_anonymous_memory_mapped_by_another_process") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let pid = spawn(targets(), &["sharedanonchild"], None, &out);
    let child: i32 = wait_line(&out, "child ")
        .trim()
        .strip_prefix("child ")
        .unwrap()
        .parse()
        .unwrap();
    let r = checkpoint(pid, &tmp.path().join("img"), Leave::Kill);
    for p in [pid, child] {
        let (state, tracer) = state_and_tracer(p);
        assert!(state == 'R' || state == 'S', "{p} left in state {state}");
        assert_eq!(tracer, 0, "{p} left traced");
    }
    kill(pid);
    let text = r.as_ref().err().map(|e| e.to_string()).unwrap_or_default();
    match r {
        Err(Error::Refused(Refusal::SharedMemoryWith {
            pid: with, path, ..
        })) => {
            assert_eq!((with, path.as_str()), (child, "/dev/zero (deleted)"));
            assert!(text.contains(&format!("shared with pid {child}")), "{text}");
        }
        other => panic!("expected a refusal naming pid {child}, got {other:?}"),
    }
}

#[test]
fn refuses_sysv_shared_memory() {
    match refused("sysvshm", &[]) {
        Refusal::SysvShm { path, .. } => assert!(path.starts_with("/SYSV"), "{path}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn refuses_traced_processes() {
    let tmp = tempfile::tempdir().unwrap();
    let pid = spawn(targets(), &["spin"], None, &tmp.path().join("out"));
    // SAFETY: seizing our own child; no stop is requested.
    let r = unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0, 0) };
    assert_eq!(r, 0, "PTRACE_SEIZE");
    sleep_ms(50);
    let res = checkpoint(pid, &tmp.path().join("img"), Leave::Kill);
    kill(pid);
    match res {
        Err(Error::Refused(Refusal::Traced { tracer })) => {
            // SAFETY: gettid has no preconditions.
            assert_eq!(tracer, unsafe { libc::gettid() })
        }
        other => panic!("expected Traced, got {other:?}"),
    }
}
