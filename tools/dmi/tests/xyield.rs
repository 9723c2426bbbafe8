// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Cross-node `DMI_yield` (`examples/roam.c` in movable runs, `dmi run
//! --movable`): each rank's checksum over its globals, heap and stack (and
//! its neighbours' values, passed through the global address space every
//! iteration) must be the same with moves between nodes as without; a
//! moved rank runs as a new process on the other node; a node whose
//! instance moved away can leave the run and a joining node gets one; a
//! move the target refuses leaves the instance running where it was.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output};

mod common;
use common::{build_example, libdmi, text, Link};

fn program() -> PathBuf {
    static PROG: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PROG.get_or_init(build).clone()
}

fn build() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dmi-xyield-test-{}", std::process::id()));
    build_example(&libdmi(), "roam", &dir, "roam", &[], Link::Direct)
}

/// `dmi run -n N [--movable] OPTS roam 12` with `DMI_MOVE_AT=moves`.
fn run(n: u32, movable: bool, opts: &[&str], moves: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dmi"));
    c.args(["run", "-n", &n.to_string(), "--grace", "2"]);
    if movable {
        c.arg("--movable");
    }
    c.args(opts)
        .arg("--")
        .arg(program())
        .arg("12")
        .env_remove("DMI_ERRORS")
        .env_remove("DMI_MOVE_AT")
        .stdin(std::process::Stdio::null());
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
    c.output().unwrap()
}

#[derive(Debug)]
struct Line {
    sum: String,
    moves: u32,
    first: i32,
    last: i32,
}

/// "rank R: sum HEX moves M pid P0 -> P1" by rank.
fn ranks(o: &Output) -> BTreeMap<u32, Line> {
    let out = String::from_utf8_lossy(&o.stdout);
    let mut m = BTreeMap::new();
    for l in out.lines().filter(|l| l.starts_with("rank ")) {
        let w: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(w.len(), 10, "bad line {l:?}");
        let line = Line {
            sum: w[3].to_string(),
            moves: w[5].parse().unwrap(),
            first: w[7].parse().unwrap(),
            last: w[9].parse().unwrap(),
        };
        m.insert(w[1].trim_end_matches(':').parse().unwrap(), line);
    }
    m
}

/// The checksums of 3 ranks without moves (the plain, not movable, run).
fn reference() -> BTreeMap<u32, String> {
    let o = run(3, false, &[], None);
    assert!(o.status.success(), "{}", text(&o));
    let r = ranks(&o);
    assert_eq!(r.len(), 3, "{}", text(&o));
    r.into_iter().map(|(k, l)| (k, l.sum)).collect()
}

fn sums(r: &BTreeMap<u32, Line>) -> BTreeMap<u32, String> {
    r.iter().map(|(&k, l)| (k, l.sum.clone())).collect()
}

fn moved_lines(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.contains(" moved at yield ") && l.contains(" to node "))
        .map(str::to_string)
        .collect()
}

#[test]
fn ranks_move_between_nodes_and_keep_their_checksums() {
    let want = reference();
    let still = run(3, true, &[], None);
    assert!(still.status.success(), "{}", text(&still));
    let r = ranks(&still);
    assert_eq!(
        sums(&r),
        want,
        "movable run without moves: {}",
        text(&still)
    );
    assert!(r.values().all(|l| l.moves == 0 && l.first == l.last));
    assert!(moved_lines(&still).is_empty());

    // rank 0: node 0 -> 1 -> 2 -> 0; rank 1: node 1 -> 0
    let o = run(3, true, &[], Some("3:0@1,6:0@2,9:0@0,5:1@0"));
    assert!(o.status.success(), "{}", text(&o));
    let r = ranks(&o);
    assert_eq!(sums(&r), want, "{}", text(&o));
    assert_eq!(r[&0].moves, 3, "{}", text(&o));
    assert_eq!(r[&1].moves, 1, "{}", text(&o));
    assert_eq!(r[&2].moves, 0, "{}", text(&o));
    assert!(r[&0].first != r[&0].last && r[&1].first != r[&1].last);
    let moved = moved_lines(&o);
    assert_eq!(moved.len(), 4, "{}", text(&o));
    for (node, yield_, to) in [(0, 3, 1), (1, 6, 2), (2, 9, 0), (1, 5, 0)] {
        let want = format!("dmi: node {node}: instance ");
        let at = format!(" moved at yield {yield_} to node {to}: ");
        assert!(
            moved
                .iter()
                .any(|l| l.starts_with(&want) && l.contains(&at)),
            "no move of node {node} at yield {yield_} to {to}: {}",
            text(&o)
        );
    }
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err.matches(" arrived from node ").count(),
        4,
        "{}",
        text(&o)
    );
}

#[test]
fn a_node_leaves_after_its_instance_moved_and_a_joining_node_gets_one() {
    let want = reference();
    let o = run(3, true, &["--shrink-at", "4:1", "--grow-at", "8:1"], None);
    assert!(o.status.success(), "{}", text(&o));
    let r = ranks(&o);
    assert_eq!(sums(&r), want, "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    for l in [
        "dmi: node 0: nodes [2] leave at yield 4",
        "dmi: node 0: node 2 left the run",
        "dmi: node 2: left the run (its instances moved away)",
        "dmi: node 0: nodes [3] joined at yield 8",
        "dmi: node 3: instance 2 arrived from node 0",
    ] {
        assert!(err.contains(l), "missing {l:?}: {}", text(&o));
    }
    // rank 2: node 2 -> 0 (its node leaves) -> 3 (joined)
    assert_eq!(r[&2].moves, 2, "{}", text(&o));
    assert!(r[&0].moves == 0 && r[&1].moves == 0, "{}", text(&o));
    let moved = moved_lines(&o);
    assert!(moved
        .iter()
        .any(|l| l.starts_with("dmi: node 2: instance 2 moved") && l.contains(" to node 0: ")));
    assert!(moved
        .iter()
        .any(|l| l.starts_with("dmi: node 0: instance 2 moved") && l.contains(" to node 3: ")));
}

#[test]
fn refused_moves_leave_the_instance_where_it_was() {
    let want = reference();
    // node 3 is a spare (not a member), node 7 does not exist
    let o = run(3, true, &["--spares", "1"], Some("3:1@3,5:0@7,7:2@1"));
    assert!(o.status.success(), "{}", text(&o));
    let r = ranks(&o);
    assert_eq!(sums(&r), want, "{}", text(&o));
    assert!(
        r[&1].moves == 0 && r[&1].first == r[&1].last,
        "{}",
        text(&o)
    );
    assert!(
        r[&0].moves == 0 && r[&0].first == r[&0].last,
        "{}",
        text(&o)
    );
    assert_eq!(r[&2].moves, 1, "the good move still happens: {}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    for l in [
        "dmi: node 3: refusing instance 1 from node 1: node 3 is not a member of the run",
        "stays: start-up: node 3 refused: node 3 is not a member of the run",
        "stays: bad argument: there is no node 7 (the run has 4)",
    ] {
        assert!(err.contains(l), "missing {l:?}: {}", text(&o));
    }
}
