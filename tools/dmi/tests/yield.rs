// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `DMI_yield` moves compute instances (`examples/yield.c`): with moves
//! scheduled by `DMI_MOVE_AT` on 2 nodes, every scheduled instance runs on
//! as another process (its pid changed, its node reported the move) and
//! every checksum over its globals, heap and stack equals the run without
//! moves; without a schedule nothing moves; an instance that cannot be
//! moved (it holds a socket) stays where it was and finishes correctly; a
//! moved instance dies with its node.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{build_example, libdmi, text, Link};

/// Builds libdmi and compiles `yield.c` against it (once for all tests).
fn program() -> PathBuf {
    static PROG: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PROG.get_or_init(build).clone()
}

fn build() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dmi-yield-test-{}", std::process::id()));
    build_example(&libdmi(), "yield", &dir, "yield", &[], Link::Direct)
}

/// `dmi run -n N yield ARGS` with `DMI_MOVE_AT=moves` (if any).
fn run(n: u32, args: &[&str], moves: Option<&str>) -> Output {
    command(n, args, moves).output().unwrap()
}

fn command(n: u32, args: &[&str], moves: Option<&str>) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dmi"));
    c.args(["run", "-n", &n.to_string(), "--grace", "2", "--"])
        .arg(program())
        .args(args)
        .env_remove("DMI_ERRORS")
        .env_remove("DMI_MOVE_AT");
    if let Some(m) = moves {
        c.env("DMI_MOVE_AT", m);
    }
    // SAFETY: close_range is async-signal-safe; it drops descriptors of the
    // test harness (cargo's jobserver pipe) that an instance would inherit
    // and that would keep it from being moved.
    unsafe {
        c.pre_exec(|| {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            Ok(())
        })
    };
    c
}

#[derive(Debug, PartialEq)]
struct Line {
    sum: String,
    moves: u32,
    first: i32,
    last: i32,
}

/// The instances' lines: global index -> what it printed.
fn instances(o: &Output) -> BTreeMap<u32, Line> {
    let out = String::from_utf8_lossy(&o.stdout);
    let mut m = BTreeMap::new();
    for l in out.lines() {
        let Some(rest) = l.split_once("instance ").map(|(_, r)| r) else {
            continue;
        };
        let w: Vec<&str> = rest.split_whitespace().collect();
        // "G: sum HEX moves M pid P0 -> P1"
        assert_eq!(w.len(), 9, "bad line {l:?}");
        let g: u32 = w[0].trim_end_matches(':').parse().unwrap();
        m.insert(
            g,
            Line {
                sum: w[2].to_string(),
                moves: w[4].parse().unwrap(),
                first: w[6].parse().unwrap(),
                last: w[8].parse().unwrap(),
            },
        );
    }
    m
}

fn reference() -> BTreeMap<u32, Line> {
    let o = run(2, &["2"], None);
    assert!(o.status.success(), "{}", text(&o));
    let r = instances(&o);
    assert_eq!(r.len(), 4, "{}", text(&o));
    for l in r.values() {
        assert_eq!((l.moves, l.first), (0, l.last), "moved without a schedule");
    }
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("moved"),
        "{}",
        text(&o)
    );
    r
}

#[test]
fn scheduled_instances_move_and_compute_the_same() {
    let want = reference();
    // On each node: instance 0 moves at yields 3 and 7, instance 1 at 5.
    let o = run(2, &["2"], Some("3:0,5:1,7:0"));
    assert!(o.status.success(), "{}", text(&o));
    let got = instances(&o);
    assert_eq!(got.len(), 4, "{}", text(&o));
    for (g, l) in &got {
        let moves = if g % 2 == 0 { 2 } else { 1 };
        assert_eq!(l.sum, want[g].sum, "instance {g}: {}", text(&o));
        assert_eq!(l.moves, moves, "instance {g}: {}", text(&o));
        assert_ne!(l.first, l.last, "instance {g} kept its pid");
    }
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.matches(" moved at yield ").count(), 6, "{}", text(&o));
}

#[test]
fn an_instance_that_cannot_move_stays_and_finishes() {
    let want = reference();
    // Instance 0 of each node holds a socket: the engine refuses it, the
    // move is abandoned, and it goes on where it was.
    let o = run(2, &["2", "socket"], Some("3:0,3:1"));
    assert!(o.status.success(), "{}", text(&o));
    let got = instances(&o);
    assert_eq!(got.len(), 4, "{}", text(&o));
    for (g, l) in &got {
        assert_eq!(l.sum, want[g].sum, "instance {g}: {}", text(&o));
        let moved = g % 2 == 1;
        assert_eq!(l.moves, u32::from(moved), "instance {g}: {}", text(&o));
        assert_eq!(l.first != l.last, moved, "instance {g}: {}", text(&o));
    }
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.matches(" stays: ").count(), 2, "{}", text(&o));
    assert!(err.contains("socket"), "{}", text(&o));
}

#[test]
fn a_bad_schedule_is_refused_with_its_reason() {
    let o = run(1, &["1"], Some("3-0"));
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("DMI_MOVE_AT=\"3-0\""),
        "{}",
        text(&o)
    );
}

/// The third field after the command of /proc/PID/stat: (state, ppid).
fn state_ppid(pid: i32) -> Option<(char, i32)> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &st[st.rfind(')')? + 2..];
    let mut f = rest.split(' ');
    let state = f.next()?.chars().next()?;
    Some((state, f.next()?.parse().ok()?))
}

#[test]
fn a_moved_instance_dies_with_its_node() {
    // The instance sleeps 5 s after its move before it calls the node
    // again: only its death signal can end it sooner.
    let mut child = command(1, &["1", "linger"], Some("2:0"))
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains(" moved at yield 2: pid "))
        .expect("the instance moved");
    let pid: i32 = line
        .split(" -> ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no new pid in {line:?}"));
    let (_, node) = state_ppid(pid).expect("the moved instance runs");
    // SAFETY: kill(2) of the node process this test started (via dmi run).
    assert_eq!(unsafe { libc::kill(node, libc::SIGKILL) }, 0);
    let t = Instant::now();
    while state_ppid(pid).is_some_and(|(s, _)| s != 'Z') {
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "moved instance {pid} outlived its node {node} by 2 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(lines);
    let st = child.wait().unwrap();
    assert!(!st.success(), "dmi run succeeded without its node");
}
