//! A program with the workers it forked moves between nodes as a process
//! tree, with its pids: Debian's stress-ng (a parent and its `cpu` worker,
//! sharing `/dev/zero` memory and their stderr) started with `halfproc run`
//! on node A and migrated 20 times between A and B while it runs. B runs in
//! a pid namespace of its own, as another machine would have its own pids
//! (on one host the originals hold theirs until the copies exist). Root
//! only: a tree's restore chooses its pids, and B needs `unshare`.

mod common;

use common::*;

const MIGRATIONS: usize = 20;

#[test]
fn stress_ng_moves_twenty_times_with_its_worker() {
    if !is_root() {
        eprintln!("SKIP: needs root (pids chosen at restore, a pid namespace for node B)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let a = Daemon::start();
    let b = NodeInNamespace::start();
    let b = &b.0;
    // Ended by the test once the migrations are done: SIGALRM to the
    // worker is its timeout, the run then completes as usual.
    let (r, pid, worker) = run_stress_ng(&a, tmp.path(), "stress-ng");
    let nodes = [&a, b];
    let mut here = 0;
    for i in 0..MIGRATIONS {
        sleep_ms(50);
        let to = 1 - here;
        let m = migrate(&nodes[here].addr, pid, &nodes[to].addr).unwrap_or_else(|e| {
            let out = std::fs::read_to_string(tmp.path().join("stress-ng.err"));
            panic!("migration {i} of pid {pid}: {e}\nits stderr: {out:?}")
        });
        assert_eq!(m.pid, pid, "migration {i}: the root keeps its pid");
        assert!(
            m.said.contains("a process tree of 2 processes"),
            "{}",
            m.said
        );
        here = to;
        if here == 0 {
            // Back on A: the worker is the root's child with its pid.
            assert_eq!(children(pid), vec![worker], "after migration {i}");
        }
    }
    signal(worker, libc::SIGALRM);
    let (_, code, err) = r.finish();
    assert_eq!(code, 0, "stress-ng exit status: {err}");
    // Once each, in order: every line reached the client, none twice, and
    // the worker's last lines were not overwritten (they share stderr).
    let mut at = 0;
    for line in [
        "dispatching hogs: 1 cpu".to_string(),
        format!("cpu: exited [{worker}] (instance 0)"),
        format!("process [{worker}] terminated"),
        "successful run completed".to_string(),
    ] {
        assert_eq!(err.matches(&line).count(), 1, "{line:?} in:\n{err}");
        let i = err.find(&line).unwrap();
        assert!(i >= at, "{line:?} out of order in:\n{err}");
        at = i;
    }
    // The worker's count reached its parent through the shared memory.
    let cpu = err
        .lines()
        .find(|l| l.contains("] cpu "))
        .unwrap_or_else(|| panic!("no metrics line in:\n{err}"));
    let ops: u64 = cpu.split_whitespace().nth(4).unwrap().parse().unwrap();
    assert!(ops > 0, "{cpu}");
}
