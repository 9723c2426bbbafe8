//! What cannot move is refused before anything is stopped, naming the
//! resource, and the program keeps running and finishes as if nothing had
//! happened: a socket, a pipe to another process, a child process that
//! has ended (a zombie: a program with children moves as a tree, see
//! `node_tree`, but a zombie cannot be carried), a second thread, a second
//! migration of a program while one is under way.

mod common;

use common::*;

const TICKS: &str = "1500";

fn tracer(pid: i32) -> i32 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn refused(mode: &str, expect: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let argv = [targets(), mode, TICKS, "wait"];
    let (want, want_code) = reference(&argv, None);
    let (a, b) = (Daemon::start(), Daemon::start());
    let (r, held) = run_held(&a, &argv, None, tmp.path(), mode);
    let pid = r.pid();
    sleep_ms(100);
    let e = match migrate(&a.addr, pid, &b.addr) {
        Ok(m) => panic!("{mode}: migrated (to pid {}) instead of refused", m.pid),
        Err(e) => e,
    };
    eprintln!("{mode}: {e}");
    assert!(e.contains("exit Some(1)"), "{mode}: exit code: {e}");
    assert!(
        e.contains(expect),
        "{mode}: refusal does not name {expect:?}: {e}"
    );
    assert!(e.contains("keeps running here"), "{mode}: {e}");
    let st = proc_state(pid).unwrap();
    assert!(st == 'R' || st == 'S', "{mode}: target left in state {st}");
    assert_eq!(tracer(pid), 0, "{mode}: target left traced");
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let st = std::fs::read_to_string(t.unwrap().path().join("status")).unwrap();
        assert!(
            st.contains("TracerPid:\t0\n")
                && !st.contains("State:\tt")
                && !st.contains("State:\tT"),
            "{mode}: a thread was stopped or traced: {st}"
        );
    }
    assert!(ps(&a).contains(&pid.to_string()), "{mode}: gone from ps");
    held.close();
    let (out, code, err) = r.finish();
    assert_same(mode, &out, &want);
    assert_eq!(code, want_code, "{mode}: exit status ({err})");
}

#[test]
fn socket_is_refused_and_target_keeps_running() {
    refused("socket", "is a socket");
}

#[test]
fn threads_are_refused_and_target_keeps_running() {
    refused(
        "thread",
        "2 threads; only single-threaded processes can be migrated",
    );
}

#[test]
fn pipe_to_another_process_is_refused_and_target_keeps_running() {
    refused("pipe", "is a pipe or FIFO");
}

#[test]
fn a_child_that_ended_is_refused_and_target_keeps_running() {
    refused("zombie", "its child process");
}

#[test]
fn second_concurrent_migration_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let argv = [targets(), "plain", TICKS, "wait"];
    let (want, want_code) = reference(&argv, None);
    let (a, b) = (Daemon::start(), Daemon::start());
    let (r, held) = run_held(&a, &argv, None, tmp.path(), "plain");
    let pid = r.pid();
    let first = held_migration(&a, pid);
    let e = migrate(&a.addr, pid, &b.addr).expect_err("second migration accepted");
    eprintln!("second: {e}");
    assert!(e.contains("already being migrated"), "{e}");
    let (code1, e1) = first.release();
    eprintln!("first: {e1}");
    assert_eq!(code1, Some(1), "migration 1 to a silent node: {e1}");
    assert!(e1.contains("keeps running here"), "{e1}");
    // Nothing is stuck: a real migration works now.
    let m = migrate(&a.addr, pid, &b.addr).expect("migration after the refusals");
    assert!(m.pid > 0);
    held.close();
    let (out, code, err) = r.finish();
    assert_same("plain", &out, &want);
    assert_eq!(code, want_code, "exit status ({err})");
}

/// Debian's stress-ng (0.15) runs every stressor in a forked worker process
/// and shares a writable anonymous region (`/dev/zero`, its statistics)
/// with the workers; it has no single-process mode: it moves as a process
/// tree, with its pids (see `node_tree`). A node in the same pid namespace
/// (the originals hold the pids until the copies exist) refuses its offer,
/// naming the pid in use, before anything is stopped; it finishes as
/// unmigrated (status 0, its report says the run completed;
/// its output holds pids and times, so it is not compared byte for byte).
#[test]
fn stress_ng_to_a_node_where_its_pids_are_in_use_runs_on() {
    let tmp = tempfile::tempdir().unwrap();
    let argv = [
        tool("stress-ng"),
        "--cpu",
        "1",
        "--cpu-method",
        "fft",
        "--cpu-ops",
        "3000",
    ];
    let (a, b) = (Daemon::start(), Daemon::start());
    let r = run(&a, &argv, None, tmp.path(), "stress-ng");
    let pid = r.pid();
    // It moves with its worker.
    let worker = first_child(pid);
    let e = migrate(&a.addr, pid, &b.addr).expect_err("stress-ng migrated");
    assert!(
        e.contains(&format!("pid {pid} is in use here"))
            && e.contains(&format!("pid {pid} was never stopped")),
        "{e}"
    );
    assert!(
        std::fs::metadata(format!("/proc/{worker}")).is_ok(),
        "worker {worker} gone"
    );
    assert_eq!(tracer(pid), 0);
    assert_eq!(tracer(worker), 0);
    let (out, code, err) = r.finish();
    assert_eq!(code, 0, "stress-ng exit status: {err}");
    let report = String::from_utf8_lossy(&out).into_owned() + &err;
    assert!(report.contains("successful run completed"), "{report}");
}
