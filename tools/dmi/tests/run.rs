// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `dmi run` end to end: real node processes on loopback. Coherence of a
//! random workload over 3 processes, the C API, group reads over several
//! owners and the Jacobi example (built through `pkg-config dmi`) on 1-3
//! nodes, and failures: a killed node, a stopped (silent) node, a node
//! exiting non-zero.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use dmi::check::{Event, History};

mod common;
use common::{build_example, libdmi, text, Link};

fn dmi() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dmi"))
}

/// `dmi run -n N [launcher options] -- PROG ARGS`.
fn dmi_run(n: u32, opts: &[&str], prog: &[&str]) -> Command {
    let mut c = dmi();
    c.args(["run", "-n", &n.to_string()])
        .args(opts)
        .arg("--")
        .args(prog);
    c
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dmi-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Builds libdmi (cdylib) with cargo, writes `dmi.pc` for it, and compiles
/// `examples/<name>.c` with `pkg-config --cflags --libs dmi`. Returns the
/// program and the directory holding libdmi.so.
fn build_c(name: &str) -> (PathBuf, PathBuf) {
    let lib = libdmi();
    let dir = tmp(&format!("c-{name}"));
    (
        build_example(&lib, name, &dir, name, &[], Link::PkgConfig),
        lib,
    )
}

fn checksum(o: &Output) -> String {
    let s = String::from_utf8_lossy(&o.stdout);
    s.lines()
        .find_map(|l| l.strip_prefix("checksum "))
        .unwrap_or_else(|| panic!("no checksum: {}", text(o)))
        .to_string()
}

#[test]
fn jacobi_on_1_2_3_nodes_matches_the_serial_run() {
    let (prog, lib) = build_c("jacobi");
    let serial = Command::new(&prog)
        .args(["40", "30", "60", "serial"])
        .output()
        .unwrap();
    assert!(serial.status.success(), "{}", text(&serial));
    let want = checksum(&serial);
    for n in [1, 2, 3] {
        let o = dmi_run(n, &[], &[prog.to_str().unwrap(), "40", "30", "60"])
            .env("LD_LIBRARY_PATH", &lib)
            .output()
            .unwrap();
        assert!(o.status.success(), "{n} nodes: {}", text(&o));
        assert_eq!(checksum(&o), want, "{n} nodes");
    }
}

/// Example `name` (C, against the installed library) run on 1 and on 3
/// nodes: (nodes, output) of each run, which succeeded.
fn c_example_on_1_and_3_nodes(name: &str) -> Vec<(u32, std::process::Output)> {
    let (prog, lib) = build_c(name);
    [1, 3]
        .into_iter()
        .map(|n| {
            let o = dmi_run(n, &[], &[prog.to_str().unwrap()])
                .env("LD_LIBRARY_PATH", &lib)
                .output()
                .unwrap();
            assert!(o.status.success(), "{name} on {n} nodes: {}", text(&o));
            (n, o)
        })
        .collect()
}

#[test]
fn c_api_on_1_and_3_nodes() {
    for (n, o) in c_example_on_1_and_3_nodes("api_test") {
        let want = format!(
            "api ok: {n} nodes, mutex counter {c}, fetch-add counter {c}",
            c = 20 * n
        );
        assert!(
            String::from_utf8_lossy(&o.stdout).contains(&want),
            "{}",
            text(&o)
        );
    }
}

/// Group reads of many ranges (crossing pages, several per page, to pages
/// owned by every node) equal single reads and the contents written, in
/// every mode, before and after the pages change owners: the ranges of one
/// page travel as one access (`examples/gather.c`).
#[test]
fn group_reads_over_several_owners_equal_single_reads() {
    for (n, o) in c_example_on_1_and_3_nodes("gather") {
        let out = String::from_utf8_lossy(&o.stdout);
        for r in 0..n {
            let want = format!("gather ok: node {r} of {n}, 1200 ranges");
            assert!(out.contains(&want), "{n} nodes, no {want:?}: {}", text(&o));
        }
    }
}

#[test]
fn three_processes_are_sequentially_consistent_per_page() {
    for seed in ["1", "2"] {
        let dir = tmp(&format!("stress-{seed}"));
        let stress = [env!("CARGO_BIN_EXE_dmi"), "stress", "--ops", "300"];
        let o = dmi_run(3, &[], &stress)
            .args(["--seed", seed, "--dir"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        let c = dmi().arg("check").arg(&dir).output().unwrap();
        assert!(c.status.success(), "{}", text(&c));
        assert!(
            String::from_utf8_lossy(&c.stdout).contains("from 3 nodes: sequentially consistent")
        );

        // The same check rejects the real history with one read gone stale.
        let f = dir.join("node-2.json");
        let mut h: History = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        let ev = h
            .clients
            .values_mut()
            .next()
            .unwrap()
            .values_mut()
            .find(|e| e.iter().any(|x| matches!(x, Event::Read(v) if *v != 0)));
        let ev = ev.expect("node 2 read a written value");
        let i = ev
            .iter()
            .rposition(|x| matches!(x, Event::Read(v) if *v != 0))
            .unwrap();
        ev.insert(i + 1, Event::Read(0));
        std::fs::write(&f, serde_json::to_vec(&h).unwrap()).unwrap();
        let c = dmi().arg("check").arg(&dir).output().unwrap();
        assert!(!c.status.success(), "a stale read passed: {}", text(&c));
    }
}

/// The random workload over three processes whose pools (5 pages) hold
/// less than the 8 pages in use (7 and the root page): pages move between
/// the processes and every history stays sequentially consistent.
#[test]
fn three_processes_with_small_pools_are_sequentially_consistent() {
    for seed in ["1", "2"] {
        let dir = tmp(&format!("stress-pool-{seed}"));
        let stress = [env!("CARGO_BIN_EXE_dmi"), "stress", "--ops", "300"];
        let o = dmi_run(3, &[], &stress)
            .args(["--pages", "7", "--seed", seed, "--dir"])
            .arg(&dir)
            .env("DMI_POOL_PAGES", "5")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        let c = dmi().arg("check").arg(&dir).output().unwrap();
        assert!(c.status.success(), "{}", text(&c));
        assert!(
            String::from_utf8_lossy(&c.stdout).contains("on 7 pages from 3 nodes"),
            "{}",
            text(&c)
        );
    }
}

/// Compute instances run the workload beside their nodes' programs,
/// reading hits from their node's frames in the shared range while the
/// other nodes write: every history stays sequentially consistent, no read
/// is torn (`dmi stress` checks each), and the instances did read from the
/// frames. One instance per node on 4 pages (much contention), two per
/// node on 16 pages, and with pools of 5 for the 8 pages in use (frames
/// dropped and reused under the readers). (The checker's search grows
/// fast with the clients per page: 9 clients on 3 pages of 300 accesses
/// took minutes.)
#[test]
fn instances_reading_frames_while_others_write_stay_consistent() {
    let runs = [
        ("1", "1", "4", None),
        ("2", "1", "4", None),
        ("3", "2", "16", None),
        ("4", "1", "7", Some("5")),
    ];
    for (seed, per_node, pages, pool) in runs {
        let dir = tmp(&format!("stress-inst-{seed}"));
        let stress = [env!("CARGO_BIN_EXE_dmi"), "stress", "--ops", "100"];
        let mut c = dmi_run(3, &[], &stress);
        c.args([
            "--instances",
            per_node,
            "--pages",
            pages,
            "--seed",
            seed,
            "--dir",
        ])
        .arg(&dir);
        if let Some(p) = pool {
            c.env("DMI_POOL_PAGES", p);
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        let hits: u64 = out
            .lines()
            .filter(|l| l.contains(" instance "))
            .map(|l| {
                let (_, rest) = l.split_once("recorded, ").expect("a count line");
                rest.split(' ').next().unwrap().parse::<u64>().unwrap()
            })
            .sum();
        let clients = 3 * per_node.parse::<usize>().unwrap();
        assert_eq!(out.matches(" instance ").count(), clients, "{}", text(&o));
        assert!(hits > 0, "no instance read from the frames: {}", text(&o));
        let c = dmi().arg("check").arg(&dir).output().unwrap();
        assert!(c.status.success(), "{}", text(&c));
        assert!(
            String::from_utf8_lossy(&c.stdout).contains(&format!(
                "on {pages} pages from {} nodes: sequentially consistent",
                3 + clients
            )),
            "{}",
            text(&c)
        );
    }
}

/// Starts 3 stress nodes that run long, returns the launcher and node pids.
fn start_long_run(extra: &[&str]) -> (Child, Vec<u32>, std::sync::mpsc::Receiver<String>) {
    let dir = tmp(&format!("long-{}", extra.join("")));
    let opts: Vec<&str> = ["--verbose"].iter().chain(extra).copied().collect();
    let stress = [
        env!("CARGO_BIN_EXE_dmi"),
        "stress",
        "--ops",
        "10000000",
        "--pause-ms",
        "1",
    ];
    let mut child = dmi_run(3, &opts, &stress)
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut pids = vec![0; 3];
    for _ in 0..3 {
        let l = rx.recv_timeout(Duration::from_secs(10)).expect("pid lines");
        let w: Vec<&str> = l.split_whitespace().collect();
        // "dmi run: node R pid P"
        pids[w[3].parse::<usize>().unwrap()] = w[5].parse().unwrap();
    }
    // Let it run for a while.
    std::thread::sleep(Duration::from_millis(800));
    (child, pids, rx)
}

fn wait_for(mut child: Child, limit: Duration) -> (std::process::ExitStatus, Duration) {
    let t = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return (s, t.elapsed());
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            panic!("dmi run still running {limit:?} after the failure: a hang");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every line the launcher wrote: read until its stderr closes, not just
/// what the reader thread forwarded by the time the launcher exited (under
/// load, its last lines were still in the pipe then).
fn drain(rx: &std::sync::mpsc::Receiver<String>) -> Vec<String> {
    let mut lines = Vec::new();
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(5)) {
        lines.push(l);
    }
    lines
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: sends a signal to a node process this test started.
    let r = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(r, 0);
}

#[test]
fn a_killed_node_is_reported_by_the_others_within_seconds() {
    let (child, pids, rx) = start_long_run(&[]);
    signal(pids[1], libc::SIGKILL);
    let (st, took) = wait_for(child, Duration::from_secs(15));
    let lines: Vec<String> = drain(&rx);
    let all = lines.join("\n");
    assert!(!st.success(), "{all}");
    assert!(took < Duration::from_secs(5), "took {took:?}\n{all}");
    for survivor in [0, 2] {
        assert!(
            all.contains(&format!("dmi: node {survivor}: node 1 (127.0.0.1:"))
                && all.contains("failed"),
            "node {survivor} did not name node 1:\n{all}"
        );
        assert!(
            all.contains(&format!(
                "node {survivor} (pid {}) exited with status 3",
                pids[survivor]
            )),
            "{all}"
        );
    }
    assert!(
        all.contains("node 1 (pid") && all.contains("killed by signal 9"),
        "{all}"
    );
}

#[test]
fn a_silent_node_is_found_by_heartbeats() {
    let (child, pids, rx) = start_long_run(&["--grace", "2"]);
    signal(pids[2], libc::SIGSTOP);
    let (st, took) = wait_for(child, Duration::from_secs(20));
    let all: String = drain(&rx).join("\n");
    assert!(!st.success(), "{all}");
    assert!(
        all.contains("node 2 (127.0.0.1:") && all.contains("no message or heartbeat for 3 s"),
        "{all}"
    );
    assert!(
        all.contains("node 2 still running 2 s after a failure: killing it"),
        "{all}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}\n{all}");
}

#[test]
fn the_launcher_names_failing_nodes_and_prefixes_output() {
    let o = dmi_run(3, &[], &["sh", "-c", "exit $((DMI_RANK == 1 ? 4 : 0))"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("node 1 (pid") && e.contains("exited with status 4"),
        "{e}"
    );
    assert!(e.contains("FAILED: node(s) [1] of 3"), "{e}");

    let o = dmi_run(
        2,
        &["--prefix"],
        &["sh", "-c", "echo rank $DMI_RANK of $DMI_SIZE"],
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(
        s.contains("[0] rank 0 of 2") && s.contains("[1] rank 1 of 2"),
        "{s}"
    );

    let o = dmi_run(2, &[], &["/nonexistent/prog"]).output().unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cannot start"),
        "{}",
        text(&o)
    );
}

/// Remote swap across processes: node 0 writes more pages than its pool
/// holds; every node reads them all back. With one node there is nowhere
/// to move them: a clear error naming the pool size. A bad pool size is a
/// start-up error.
#[test]
fn pages_past_a_full_pool_move_to_other_nodes() {
    let (prog, lib) = build_c("swap");
    let prog = prog.to_str().unwrap();
    let o = dmi_run(3, &[], &[prog, "20"])
        .env("LD_LIBRARY_PATH", &lib)
        .env("DMI_POOL_PAGES", "10")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("swap ok: 20 pages on 3 nodes"),
        "{}",
        text(&o)
    );

    let o = dmi_run(1, &[], &[prog, "20"])
        .env("LD_LIBRARY_PATH", &lib)
        .env("DMI_POOL_PAGES", "10")
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("write of page") && err.contains("DMI_POOL_PAGES=10"),
        "{}",
        text(&o)
    );

    // 3 pools of 6 cannot hold 21 pages (the root page counts too).
    let o = dmi_run(3, &[], &[prog, "20"])
        .env("LD_LIBRARY_PATH", &lib)
        .env("DMI_POOL_PAGES", "6")
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("every node's memory pool is full"),
        "{}",
        text(&o)
    );

    for bad in ["0", "many", "-3"] {
        let o = dmi_run(2, &[], &[prog, "4"])
            .env("LD_LIBRARY_PATH", &lib)
            .env("DMI_POOL_PAGES", bad)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr)
                .contains(&format!("DMI_POOL_PAGES=\"{bad}\" is not valid")),
            "{}",
            text(&o)
        );
    }
}
