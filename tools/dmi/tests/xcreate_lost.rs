// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `DMI_create`'s instances moving between nodes (`xcreate.rs`) when a
//! node fails during a move, or a move takes too long: an instance whose
//! move committed is reported lost by its creator when its target dies
//! before its `At`, or its source before its `Commit` (`DMI_join` returns
//! instead of waiting); a source that cannot (or no longer may) commit
//! keeps the instance, and its origin knows where it is.

mod common;
#[path = "common/xrun.rs"]
mod xrun;
use xrun::{command_grace, nodes_of, spawn_lines, stop};

/// A run of `yield 1` on 3 nodes in which node `hold`'s test delay (`env`)
/// holds a move of node 0's instance 0 from node 1 to node 2 (the
/// schedule `2:0@1,4:0@2`: node 0's instance goes to node 1 at yield 2 and
/// on to node 2 at yield 4) and node `victim` is killed once the delay
/// line `held` of node 0's instance (and `also`, if any) is seen, and 1 s
/// more (for what the node sent before its line to be handled). `env`
/// comes last (it may set another `DMI_MOVE_AT` or `DMI_ERRORS`). Returns
/// all of stderr; panics if the run did not end within 90 s of the kill
/// (the nodes killed then).
fn kill_during_move(env: &[(&str, &str)], held: &str, also: &[&str], victim: u32) -> String {
    let mut all = vec![("DMI_MOVE_AT", "2:0@1,4:0@2"), ("DMI_ERRORS", "return")];
    all.extend_from_slice(env);
    // A long grace: node 0 must end by itself, not by `dmi run`'s kill.
    let (mut child, rx) = spawn_lines(command_grace(3, 60, &["1"], &all));
    let mut seen = String::new();
    let mut want: Vec<&str> = std::iter::once(held).chain(also.iter().copied()).collect();
    let t0 = std::time::Instant::now();
    while !want.is_empty() {
        match rx.recv_timeout(std::time::Duration::from_secs(120).saturating_sub(t0.elapsed())) {
            Ok(l) => {
                want.retain(|w| !l.contains(w));
                seen.push_str(&l);
                seen.push('\n');
            }
            Err(_) => {
                stop(&mut child);
                panic!("the delay lines {want:?} did not come within 120 s: {seen}");
            }
        }
    }
    std::thread::sleep(std::time::Duration::from_secs(1));
    let Some(&pid) = nodes_of(child.id()).get(&victim) else {
        stop(&mut child);
        panic!("node {victim} no longer ran: {seen}");
    };
    // SAFETY: kill(2) of a node process of the run this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    // Until `dmi run` ended (instances it left may keep stderr open).
    let t1 = std::time::Instant::now();
    let mut ended: Option<(std::process::ExitStatus, std::time::Instant)> = None;
    loop {
        match rx.recv_timeout(std::time::Duration::from_millis(200)) {
            Ok(l) => {
                seen.push_str(&l);
                seen.push('\n');
                continue;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) if ended.is_some() => break,
            Err(_) => {}
        }
        if ended.is_none() {
            ended = child
                .try_wait()
                .unwrap()
                .map(|st| (st, std::time::Instant::now()));
        }
        match ended {
            Some((_, at)) if at.elapsed() > std::time::Duration::from_secs(2) => break,
            None if t1.elapsed() > std::time::Duration::from_secs(90) => {
                stop(&mut child);
                panic!("the run did not end within 90 s of killing node {victim}: {seen}");
            }
            _ => {}
        }
    }
    let (st, _) = ended.unwrap();
    assert!(!st.success(), "{seen}");
    for l in seen.lines().filter(|l| l.contains(" lost with ")) {
        eprintln!("{l}");
    }
    seen
}

/// Node `n`'s report that its instance 0 `how`.
fn lost_line(seen: &str, n: u32, how: &str) -> bool {
    seen.lines().any(|l| {
        l.starts_with(&format!("dmi: node {n}: instance 0 (last pid "))
            && l.ends_with(&format!(") {how}"))
    })
}

/// Node 1's report that its instance 0 (`of`: " (node 0's)" for node 0's)
/// stays there, for a reason that says `why`.
fn stays(seen: &str, of: &str, why: &str) -> bool {
    seen.lines().any(|l| {
        l.starts_with(&format!("dmi: node 1: instance 0{of} (pid "))
            && l.contains(") stays: ")
            && l.contains(why)
    })
}

/// Node 0's line when it records that node 1 moves its instance 0 on.
const MOVING_SEEN: &str = "dmi: node 0: instance 0 moves from node 1 to node 2 at yield 4";

#[test]
fn an_instance_whose_target_dies_before_its_at_is_lost_at_its_origin() {
    // Node 2 holds back its At (to node 0) of node 0's instance 0, which
    // node 1 moved there at yield 4 (and of node 1's own instance 0, moved
    // there by node 1 at the same yield), and is killed then. Node 0 hears
    // of the move from node 1 (Moving) and records its instance lost when
    // node 2 fails; its DMI_join returns (errors returned, not fatal)
    // instead of waiting for ever.
    let seen = kill_during_move(
        &[("DMI_TEST_AT_DELAY", "2:50000")],
        "dmi: node 2: node 0's instance 0 arrived; At held back (test delay",
        &[
            "dmi: node 2: node 1's instance 0 arrived; At held back (test delay",
            MOVING_SEEN,
        ],
        2,
    );
    let how = "was lost with node 2, to which it was moving";
    assert!(lost_line(&seen, 0, how), "node 0 did not say so: {seen}");
    // Node 1 moved its own: the commit recorded where it went.
    assert!(lost_line(&seen, 1, how), "node 1 did not say so: {seen}");
    assert_eq!(
        seen.matches(&format!("DMI_join: instance 0 {how}")).count(),
        2,
        "{seen}"
    );
    assert!(
        !seen.contains("still running 60 s after a failure"),
        "{seen}"
    );
}

#[test]
fn an_instance_whose_source_dies_before_its_commit_is_lost_at_its_origin() {
    // Node 1 moves node 0's instance 0 on to node 2 at yield 4 and holds
    // back its Commit, after it told node 0 (Moving); killed then, node 2
    // ends its parked copy and tells node 0 (Lost), whose DMI_join fails.
    let seen = kill_during_move(
        &[("DMI_TEST_COMMIT_DELAY", "1:50000")],
        "dmi: node 1: instance 0 (node 0's) committed to node 2; Commit held back (test delay",
        &[MOVING_SEEN],
        1,
    );
    let how = "was lost with node 1, which was moving it to node 2";
    assert!(
        seen.contains(&format!(
            "dmi: node 2: node 0's instance 0 {how} (its copy here is ended)"
        )),
        "{seen}"
    );
    // Node 1's Moving reached node 0 before the commit (node 0 answered
    // it), so only node 2's Lost tells node 0.
    assert!(lost_line(&seen, 0, how), "node 0 did not say so: {seen}");
    assert!(
        seen.contains(&format!("DMI_join: instance 0 {how}")),
        "{seen}"
    );
    assert!(
        !seen.contains("still running 60 s after a failure"),
        "{seen}"
    );
}

#[test]
fn a_source_that_sees_its_target_fail_before_the_commit_keeps_the_instance() {
    // Node 2 answered Ready for both instances 0 (node 0's and node 1's
    // own) that node 1 moves there at yield 4; node 1 holds both back
    // before the commit and node 2 is killed then. Node 1 keeps both (it
    // knows node 2 failed before it asks node 0 or kills an original), so
    // neither is lost with node 2; but node 1 reports node 2's failure to
    // node 0 and the two stop talking, so node 0 records its instance (on
    // node 1) lost that way.
    let seen = kill_during_move(
        &[("DMI_TEST_READY_DELAY", "1:50000")],
        "dmi: node 1: instance 0 (node 0's) ready at node 2; commit held back (test delay",
        &["dmi: node 1: instance 0 ready at node 2; commit held back (test delay"],
        2,
    );
    let why = "node 2 failed before the commit";
    assert!(stays(&seen, "", why), "{seen}");
    assert!(stays(&seen, " (node 0's)", why), "{seen}");
    assert!(!seen.contains(" lost with node 2"), "{seen}");
    let how = "was lost: node 1, where it ran, stopped talking after node 2 failed";
    assert!(lost_line(&seen, 0, how), "{seen}");
}

#[test]
fn an_origin_that_fails_before_it_records_a_move_leaves_the_instance_at_its_source() {
    // Node 0 holds back its answer to node 1's Moving (node 0's instance 0
    // to node 2 at yield 4) and is killed then: node 1 did not commit,
    // its original runs on there and node 2 ends its copy.
    let seen = kill_during_move(
        &[("DMI_TEST_MOVING_DELAY", "0:50000")],
        "dmi: node 0: instance 0 moves to node 2; MovingSeen held back (test delay",
        &[],
        0,
    );
    assert!(
        stays(
            &seen,
            " (node 0's)",
            "node 0 (its origin) did not record the move: it failed (node 0)"
        ),
        "{seen}"
    );
    assert!(
        !seen.contains("dmi: node 1: instance 0 (node 0's) moved at yield 4 to node 2"),
        "{seen}"
    );
}

#[test]
fn an_instance_on_a_node_that_stops_talking_after_a_failure_is_lost_at_its_origin() {
    // Node 0's instance 0 moved to node 1 at yield 2; node 1 holds back
    // its At and node 2 is killed then. Node 1 reports node 2's failure to
    // node 0 (Abort) and the two stop talking: node 0 records its instance
    // lost instead of waiting in DMI_join for an end it can no longer hear.
    let seen = kill_during_move(
        &[("DMI_TEST_AT_DELAY", "1:50000")],
        "dmi: node 1: node 0's instance 0 arrived; At held back (test delay",
        &[],
        2,
    );
    let how = "was lost: node 1, to which it was moving, stopped talking after node 2 failed";
    assert!(lost_line(&seen, 0, how), "node 0 did not say so: {seen}");
    assert!(
        seen.contains(&format!("DMI_join: instance 0 {how}")),
        "{seen}"
    );
    assert!(
        !seen.contains("node 0 still running 60 s after a failure"),
        "{seen}"
    );
}

#[test]
fn a_move_home_whose_source_fails_after_the_commit_is_not_lost() {
    // Node 0's instance 0 goes to node 1 at yield 2 and comes back at
    // yield 4; node 0 holds the copy back after node 1's Commit, and node
    // 1 is killed then. The instance is node 0's again: node 1's failure
    // must not record it lost, nor must node 0 then end the live copy.
    // Without recording the move home at the Commit, node 0 said "was
    // lost with node 1, where it ran" and "came back, but this node has no
    // such instance away".
    let seen = kill_during_move(
        &[
            ("DMI_MOVE_AT", "2:0@1,4:0@0"),
            ("DMI_TEST_SERVE_DELAY", "0:10000"),
        ],
        "dmi: node 0: instance 0 from node 1 committed; its copy held back (test delay",
        &[],
        1,
    );
    // (The line comes after the engine handed the Commit over.)
    assert!(
        seen.contains("dmi: node 0: instance 0 comes back from node 1"),
        "{seen}"
    );
    assert!(
        !lost_line(&seen, 0, "was lost with node 1, where it ran"),
        "{seen}"
    );
    assert!(
        !seen.contains("came back, but this node has no such instance away"),
        "{seen}"
    );
    assert!(
        seen.contains("dmi: node 0: instance 0 (node 0's) arrived from node 1: pid "),
        "{seen}"
    );
}

#[test]
fn a_move_to_a_node_known_to_have_failed_stays_without_stopping_the_instance() {
    // Node 1 holds its moves at yield 4 (to node 2) before it looks at
    // the target; node 2 is killed then. Node 1 refuses the moves at once,
    // naming node 2, without a checkpoint (it used to stop and dump the
    // instance, send the image into the closed connection and wait 30 s
    // for an answer: "node 2 refused: no answer within 30s").
    let seen = kill_during_move(
        &[("DMI_TEST_AWAY_DELAY", "1:5000")],
        "dmi: node 1: instance 0 (node 0's) moves to node 2 at yield 4; held back (test delay",
        &[],
        2,
    );
    assert!(
        seen.lines()
            .any(|l| l.starts_with("dmi: node 1: instance 0 (")
                && l.ends_with(") stays: start-up: node 2 failed")),
        "{seen}"
    );
    assert!(!seen.contains("no answer within"), "{seen}");
}

#[test]
fn a_source_whose_origin_does_not_answer_in_time_tells_it_where_the_instance_is() {
    // Node 0 records node 1's Moving (its instance 0 to node 2 at yield
    // 4) but holds back its answer past node 1's wait (30 s): node 1 keeps
    // the instance and tells node 0 so (At, the same yield). Node 1 holds
    // the instance's next move (yield 5) before it tells node 0 anything
    // and is killed then: node 0 must record its instance lost with node
    // 1, where it runs. Without the At, node 0 still had it moving to node
    // 2 (which ended its copy): it missed the loss (it recorded it lost
    // with node 2 only when node 2 stopped talking to it).
    let seen = kill_during_move(
        &[
            ("DMI_MOVE_AT", "2:0@1,4:0@2,5:0@2"),
            ("DMI_TEST_MOVING_DELAY", "0:50000"),
            ("DMI_TEST_AWAY_DELAY", "1:10000"),
        ],
        "dmi: node 1: instance 0 (node 0's) moves to node 2 at yield 5; held back (test delay",
        &["did not record the move: no answer within 30s", MOVING_SEEN],
        1,
    );
    assert!(
        lost_line(&seen, 0, "was lost with node 1, where it ran"),
        "{seen}"
    );
    assert!(
        !seen
            .lines()
            .any(|l| l.starts_with("dmi: node 0: instance 0 (last pid ")
                && l.contains("to which it was moving")),
        "{seen}"
    );
}

#[test]
fn with_fatal_errors_a_node_says_which_node_failed_before_it_stops() {
    // As `an_instance_on_a_node_that_stops_talking...`, with
    // DMI_ERRORS=fatal: node 0 must stop on node 2's failure (which node
    // 1 reports), not first on the loss of its instance with node 1, which
    // stopped talking to it (a misleading first line: how the frames fell
    // decided it without the fix).
    let seen = kill_during_move(
        &[("DMI_TEST_AT_DELAY", "1:50000"), ("DMI_ERRORS", "fatal")],
        "dmi: node 1: node 0's instance 0 arrived; At held back (test delay",
        &[],
        2,
    );
    assert!(
        seen.lines()
            .any(|l| l.starts_with("dmi: node 0: node 2 (") && l.contains(") failed: ")),
        "{seen}"
    );
    assert!(
        !seen.contains("dmi: node 0: instance 0 (last pid "),
        "{seen}"
    );
}

#[test]
fn a_source_that_holds_past_its_commit_limit_after_ready_keeps_the_instance() {
    // Node 1 holds both moves at yield 4 (node 0's instance 0 and its
    // own, to node 2) 3.5 s after node 2's Ready, longer than node 2 waits
    // for its word (60 s scaled to 3 s). Node 1 must keep both (its commit
    // limit after Ready is 40 s, scaled to 2 s) and the run ends normally.
    // Without the limit node 1 killed the originals and sent Commits that
    // node 2, which had ended its copies, dropped: node 0's and node 1's
    // DMI_join waited for ever (the run did not end: this test fails
    // after 150 s).
    let env = [
        ("DMI_MOVE_AT", "2:0@1,4:0@2"),
        ("DMI_ERRORS", "return"),
        ("DMI_TEST_WORD_LIMIT_MS", "3000"),
        ("DMI_TEST_READY_DELAY", "1:3500"),
    ];
    let (mut child, rx) = spawn_lines(command_grace(3, 60, &["1"], &env));
    let t0 = std::time::Instant::now();
    let mut seen = String::new();
    let st = loop {
        match rx.recv_timeout(std::time::Duration::from_millis(200)) {
            Ok(l) => {
                seen.push_str(&l);
                seen.push('\n');
                continue;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {}
            Err(_) => {}
        }
        if let Some(st) = child.try_wait().unwrap() {
            while let Ok(l) = rx.recv_timeout(std::time::Duration::from_millis(500)) {
                seen.push_str(&l);
                seen.push('\n');
            }
            break st;
        }
        if t0.elapsed() > std::time::Duration::from_secs(150) {
            stop(&mut child);
            panic!("the run did not end within 150 s: {seen}");
        }
    };
    let why = "the commit came later than 2s after node 2's answer";
    assert!(stays(&seen, "", why), "{seen}");
    assert!(stays(&seen, " (node 0's)", why), "{seen}");
    assert!(st.success(), "{seen}");
}

#[test]
fn a_target_that_waits_past_its_limit_asks_the_source_before_ending_its_copy() {
    // Node 1 hears node 2's Ready for both moves at yield 4 (node 0's
    // instance 0 and its own) late (as behind a large image on the same
    // connection): 4 s, past node 2's wait for the word (scaled to 3 s;
    // node 1's commit limit to 2 s, counted from hearing Ready). Node 2
    // must ask node 1 (Query), which calls both moves off and keeps the
    // instances; the run ends normally. Without the Query node 2 ended its
    // copies alone, node 1 killed the originals and sent Commits nobody
    // read: node 0's and node 1's DMI_join waited for ever (the run did
    // not end within 60 s).
    let env = [
        ("DMI_MOVE_AT", "2:0@1,4:0@2"),
        ("DMI_ERRORS", "return"),
        ("DMI_TEST_WORD_LIMIT_MS", "3000"),
        ("DMI_TEST_READY_LATE", "1:4000"),
    ];
    let (mut child, rx) = spawn_lines(command_grace(3, 60, &["1"], &env));
    let t0 = std::time::Instant::now();
    let mut seen = String::new();
    let st = loop {
        if let Ok(l) = rx.recv_timeout(std::time::Duration::from_millis(200)) {
            seen.push_str(&l);
            seen.push('\n');
            continue;
        }
        if let Some(st) = child.try_wait().unwrap() {
            while let Ok(l) = rx.recv_timeout(std::time::Duration::from_millis(500)) {
                seen.push_str(&l);
                seen.push('\n');
            }
            break st;
        }
        if t0.elapsed() > std::time::Duration::from_secs(60) {
            stop(&mut child);
            panic!("the run did not end within 60 s: {seen}");
        }
    };
    let why = "node 2 asked after the move before the commit";
    assert!(stays(&seen, "", why), "{seen}");
    assert!(stays(&seen, " (node 0's)", why), "{seen}");
    assert!(st.success(), "{seen}");
}

/// A run of `yield 1` on 3 nodes with `env` that must end by itself
/// within `secs` s (else the nodes are killed and this panics): its exit
/// status and stderr.
fn run_to_end(env: &[(&str, &str)], secs: u64) -> (std::process::ExitStatus, String) {
    let (mut child, rx) = spawn_lines(command_grace(3, 60, &["1"], env));
    let t0 = std::time::Instant::now();
    let mut seen = String::new();
    loop {
        if let Ok(l) = rx.recv_timeout(std::time::Duration::from_millis(200)) {
            seen.push_str(&l);
            seen.push('\n');
            continue;
        }
        if let Some(st) = child.try_wait().unwrap() {
            while let Ok(l) = rx.recv_timeout(std::time::Duration::from_millis(500)) {
                seen.push_str(&l);
                seen.push('\n');
            }
            return (st, seen);
        }
        if t0.elapsed() > std::time::Duration::from_secs(secs) {
            stop(&mut child);
            panic!("the run did not end within {secs} s: {seen}");
        }
    }
}

#[test]
fn a_commit_handed_over_as_the_targets_wait_ends_is_not_dropped() {
    // Node 1 commits both moves at yield 4 to node 2 at once but holds its
    // Commits 9.5 s; node 2 asks it after 4 s (the word limit, scaled), gets
    // no answer (committed) and, 4 s later, holds 3 s before it ends the
    // copies: the Commits come in that window and take the copies' entries.
    // Node 2 must take the Commits handed over and serve the copies; the
    // run ends normally. Without the fix node 2 ended the copies after
    // node 1 had killed the originals: node 0's and node 1's DMI_join
    // waited for ever (the run did not end within 90 s).
    let env = [
        ("DMI_MOVE_AT", "2:0@1,4:0@2"),
        ("DMI_ERRORS", "return"),
        ("DMI_TEST_WORD_LIMIT_MS", "4000"),
        ("DMI_TEST_COMMIT_DELAY", "1:9500"),
        ("DMI_TEST_WORD_RACE", "2:3000"),
    ];
    let (st, seen) = run_to_end(&env, 90);
    let held = "dmi: node 2: no answer from node 1 about instance 0; its copy's end held back";
    assert!(seen.contains(held), "{seen}");
    assert!(
        seen.contains("dmi: node 2: instance 0 (node 0's) arrived from node 1"),
        "{seen}"
    );
    assert!(st.success(), "{seen}");
}
