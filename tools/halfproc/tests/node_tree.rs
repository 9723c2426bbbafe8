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

/// `halfproc checkpoint` of a program with a worker writes a tree image
/// (its mapped files too, with --with-files), and `halfproc restore`
/// continues the tree with its pids where the binary it ran is gone: the
/// files' contents are written into every copy before the tree runs.
/// Restoring it again while the first copy runs is refused, naming the
/// pid in use.
#[test]
fn stress_ng_checkpointed_with_its_files_is_restored_as_a_tree() {
    if !is_root() {
        eprintln!("SKIP: needs root (pids chosen at restore)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // A copy of the binary, replaced after the checkpoint.
    let bin = tmp.path().join("stress-ng");
    std::fs::copy("/usr/bin/stress-ng", &bin).unwrap();
    let a = Daemon::start();
    let (r, pid, worker) = run_stress_ng_at(&a, bin.to_str().unwrap(), tmp.path(), "stress-ng");
    sleep_ms(300);
    let img = tmp.path().join("img");
    let o = halfproc()
        .args(["checkpoint", "--node", &a.addr, &pid.to_string(), "--kill"])
        .args(["--with-files", "-o"])
        .arg(&img)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{said}");
    assert!(
        said.contains(&format!(
            "checkpointed pid {pid} and its 1 descendant(s), a process tree,"
        )) && said.contains("MiB of mapped files"),
        "{said}"
    );
    for p in [pid, worker] {
        assert!(
            img.join(p.to_string()).join("files.img").exists(),
            "pid {p}"
        );
    }
    let tree = std::fs::read_to_string(img.join("tree.json")).unwrap();
    assert!(tree.contains(&format!("\"pid\": {worker}")), "{tree}");
    let (_, code, before) = r.finish();
    assert_eq!(code, 75, "the checkpointed run: {before}");
    assert!(before.contains("dispatching hogs: 1 cpu"), "{before}");
    // The binary differs now: only the image's copy of it can be mapped.
    std::fs::remove_file(&bin).unwrap();
    std::fs::copy("/bin/true", &bin).unwrap();

    let restored = restore_attached(&a, &img, tmp.path(), "restored");
    assert_eq!(restored.pid(), pid, "the root keeps its pid");
    assert_eq!(
        first_child(pid),
        worker,
        "the worker is its child with its pid"
    );
    // A second copy cannot take the pids: refused, the first untouched.
    let (out, code, err) = restore_attached(&a, &img, tmp.path(), "again").finish();
    assert_eq!(code, 127, "{err}");
    assert!(out.is_empty());
    assert!(err.contains(&format!("pid {pid} is in use here")), "{err}");
    signal(worker, libc::SIGALRM);
    let (_, code, err) = restored.finish();
    assert_eq!(code, 0, "stress-ng restored: {err}");
    // Its output goes on where the checkpoint left it.
    assert!(!err.contains("dispatching hogs"), "{err}");
    for line in [
        format!("cpu: exited [{worker}] (instance 0)"),
        format!("process [{worker}] terminated"),
        "successful run completed".to_string(),
    ] {
        assert_eq!(err.matches(&line).count(), 1, "{line:?} in:\n{err}");
    }
}

/// A shell pipeline moves as a process tree: `sh -c 'gzip -9 -n |
/// sha256sum'` (the shell and its two children, joined by a pipe only
/// they hold, gzip reading the relayed stdin) started on node A and
/// migrated 20 times between A and B while its stdin is held open; its
/// output is that of a run that never moved.
#[test]
fn a_shell_pipeline_moves_twenty_times() {
    if !is_root() {
        eprintln!("SKIP: needs root (pids chosen at restore, a pid namespace for node B)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input");
    let text: String = (0..60000)
        .map(|i| format!("{i} {}\n", i * 7 % 1013))
        .collect();
    std::fs::write(&input, text).unwrap();
    let argv = ["/bin/sh", "-c", "gzip -9 -n | sha256sum"];
    let (want, want_code) = reference(&argv, Some(&input));
    assert_eq!(want_code, 0);
    let a = Daemon::start();
    let b = NodeInNamespace::start();
    let b = &b.0;
    let (r, held) = run_held(&a, &argv, Some(&input), tmp.path(), "pipeline");
    let pid = r.pid();
    let t = std::time::Instant::now();
    while children(pid).len() < 2 {
        assert!(t.elapsed().as_secs() < 20, "pid {pid}: {:?}", children(pid));
        sleep_ms(5);
    }
    let nodes = [&a, b];
    let mut here = 0;
    for i in 0..MIGRATIONS {
        let to = 1 - here;
        let m = migrate(&nodes[here].addr, pid, &nodes[to].addr)
            .unwrap_or_else(|e| panic!("migration {i} of pid {pid}: {e}"));
        assert_eq!(m.pid, pid, "migration {i}: the shell keeps its pid");
        assert!(
            m.said.contains("a process tree of 3 processes"),
            "{}",
            m.said
        );
        here = to;
    }
    held.close();
    let (out, code, err) = r.finish();
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, want, "{err}");
}
