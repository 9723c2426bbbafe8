// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The verdict over a realistic console log of the in-guest suite
//! (`fixtures/guest-suite.log`: kselftest_harness.h, kselftest.h and the
//! runtime's `guest_tests` output between `/init`'s markers), and over that
//! log broken the ways a real run breaks.

use halfproc_harness::tap::Status;
use halfproc_harness::verdict::{judge, Verdict};
use std::time::Duration;

const SUITE: &str = include_str!("fixtures/guest-suite.log");
const EXIT_0: &str = "HALFPROC_EXIT=0\n";
const EXIT_1: &str = "HALFPROC_EXIT=1\n";
const TIMEOUT: Duration = Duration::from_secs(1500);

/// What scripts/guest.sh writes to `out/<flavour>/expect` for this initramfs.
const EXPECTED: &[&str] = &[
    "hp_dm",
    "hp_sets",
    "mm/madv_populate",
    "mm/mdwe_test",
    "mm/mremap_test",
    "rt/guest_tests",
];

fn run(console: &str, status: &str) -> Verdict {
    let expected: Vec<String> = EXPECTED.iter().map(|e| e.to_string()).collect();
    judge(console, status, false, TIMEOUT, &expected)
}

/// `log` with the lines between `prog`'s markers replaced by `body`.
fn with_body(log: &str, prog: &str, body: &str) -> String {
    let begin = format!("# halfproc-harness: begin {prog}\n");
    let start = log.find(&begin).expect("begin marker") + begin.len();
    let end = start
        + log[start..]
            .find(&format!("\n# halfproc-harness: end {prog} "))
            .expect("end marker");
    format!("{}{body}{}", &log[..start], &log[end..])
}

/// `log` with `prog`'s end marker given exit status `rc`.
fn with_rc(log: &str, prog: &str, rc: i32) -> String {
    log.replace(
        &format!("# halfproc-harness: end {prog} rc=0\n"),
        &format!("# halfproc-harness: end {prog} rc={rc}\n"),
    )
}

/// The run failed, and one of its causes names `want`.
fn assert_cause(v: &Verdict, want: &str) {
    assert!(
        v.causes.iter().any(|c| c.contains(want)),
        "no cause names {want:?}: {:#?}",
        v.causes
    );
}

fn summary(v: &Verdict) -> String {
    let line = v.summary_line();
    line[..line.rfind(" in ").unwrap()].to_string()
}

/// The run passed with these counts.
fn assert_passes(v: &Verdict, counts: &str) {
    assert!(v.passed(), "{:#?}", v.causes);
    assert_eq!(summary(v), format!("{counts}; 0 kernel reports; PASS"));
}

/// (program, name, plan) of each skipped result.
fn skips(v: &Verdict) -> Vec<(&str, &str, Option<usize>)> {
    v.results
        .iter()
        .filter(|t| t.result.status == Status::Skip)
        .map(|t| (t.program.as_str(), t.result.name.as_str(), t.plan))
        .collect()
}

#[test]
fn the_clean_suite_passes_with_exact_counts() {
    let v = run(SUITE, EXIT_0);
    assert_passes(&v, "26 passed, 0 failed, 2 skipped");
    assert_eq!(
        skips(&v),
        [
            ("hp_sets", "global.mbind_on_shared_range", Some(4)),
            ("mm/mdwe_test", "mdwe.stock.arm64_BTI", Some(3)),
        ]
    );
}

/// The guest hung inside hp_dm: the harness names the program it was in,
/// the results it never printed and the programs that never ran.
#[test]
fn a_program_cut_off_by_a_hang_is_named() {
    let cut = SUITE.find("ok 2 global.quarter_gigabyte").unwrap();
    let v = judge(
        &SUITE[..cut],
        "",
        true,
        TIMEOUT,
        &EXPECTED.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
    );
    assert_cause(&v, "guest hung");
    assert_cause(&v, "hp_dm.plan_mismatch: planned 3, reported 1");
    assert_cause(
        &v,
        "hp_dm.did_not_finish: no end marker (crashed or killed)",
    );
    for p in [
        "rt/guest_tests",
        "mm/madv_populate",
        "mm/mdwe_test",
        "mm/mremap_test",
    ] {
        assert_cause(&v, &format!("{p}.missing: expected program never started"));
    }
    assert_eq!(v.summary().failed, 6);
}

/// A forked child that returned into the kselftest harness instead of
/// exiting ran the remaining tests a second time: more results than
/// planned, although every one passed and the program exited 0.
#[test]
fn more_results_than_planned_fail_a_clean_exit() {
    let last = "ok 4 global.no_leak_after_many_sets\n";
    let again = "ok 3 global.mbind_on_shared_range # SKIP CONFIG_NUMA is off\n";
    let log = SUITE.replace(last, &format!("{last}{again}{last}"));
    let v = run(&log, EXIT_0);
    assert_cause(
        &v,
        "1 tests failed: hp_sets.plan_mismatch: planned 4, reported 6",
    );
}

/// A program that stopped early (an `exit(0)` in a helper) and said
/// nothing: fewer results than planned is a failure, not a smaller total.
#[test]
fn fewer_results_than_planned_fail_a_clean_exit() {
    let log = with_body(
        SUITE,
        "mm/madv_populate",
        "TAP version 13\n1..4\n# [RUN] test_prot_read\nok 1 MADV_POPULATE_READ with PROT_READ\n",
    );
    let v = run(&log, EXIT_0);
    assert_cause(&v, "mm/madv_populate.plan_mismatch: planned 4, reported 1");
    assert_eq!(
        summary(&v),
        "23 passed, 1 failed, 2 skipped; 0 kernel reports; FAIL"
    );
}

/// An mm selftest missing from the initramfs is a failure, even though
/// everything that did run passed and /init exited 0.
#[test]
fn a_missing_expected_program_fails() {
    let start = SUITE
        .find("# halfproc-harness: begin mm/mdwe_test")
        .unwrap();
    let end = SUITE
        .find("# halfproc-harness: begin mm/mremap_test")
        .unwrap();
    let log = format!("{}{}", &SUITE[..start], &SUITE[end..]);
    let v = run(&log, EXIT_0);
    assert_cause(
        &v,
        "1 tests failed: mm/mdwe_test.missing: expected program never started",
    );
}

/// guest_tests panicked after its last case (exit 101): every result is
/// ok, so the exit status itself is the failure, named by program.
#[test]
fn a_nonzero_exit_with_all_ok_results_is_named() {
    let v = run(&with_rc(SUITE, "rt/guest_tests", 101), EXIT_1);
    assert_cause(
        &v,
        "rt/guest_tests.exit_status: exited 101 with no failing result",
    );
    assert_eq!(v.summary().failed, 1);
}

/// kselftest.h's ksft_exit_skip() after the plan (`ok 1 # SKIP ...`, exit
/// 4) and before it (`1..0 # SKIP ...`): skips, counted as such.
#[test]
fn kselftest_skips_count_as_skipped() {
    let log = with_body(
        SUITE,
        "mm/madv_populate",
        "TAP version 13\n1..4\nok 1 # SKIP MADV_POPULATE_READ is not available\n",
    );
    let log = with_rc(&log, "mm/madv_populate", 4);
    let log = with_body(
        &log,
        "mm/mdwe_test",
        "TAP version 13\n1..0 # SKIP PR_SET_MDWE not supported\n",
    );
    let log = with_rc(&log, "mm/mdwe_test", 4);
    let v = run(&log, EXIT_0);
    assert_passes(&v, "20 passed, 0 failed, 4 skipped");
    assert_eq!(
        skips(&v)[1..],
        [
            (
                "mm/madv_populate",
                "MADV_POPULATE_READ is not available",
                Some(4)
            ),
            (
                "mm/madv_populate",
                "mm/madv_populate.plan_mismatch: planned 4, reported 1; \
                 it skipped the rest (exit 4, KSFT_SKIP)",
                Some(4)
            ),
            (
                "mm/mdwe_test",
                "mm/mdwe_test.skipped: SKIP PR_SET_MDWE not supported",
                Some(0)
            ),
        ]
    );
}

/// Output of a nested TAP producer (the kselftest runner's `# ` prefix, TAP
/// 14's indentation) neither counts as results nor replaces the plan.
#[test]
fn nested_subtests_are_not_results() {
    let body = "# selftests: mm: mremap_test\n# TAP version 13\n# 1..2\n\
                # ok 1 mremap expand merge\n# not ok 2 mremap move within range\n\
                \x20   TAP version 13\n    1..2\n    ok 1 sub a\n    not ok 2 sub b\n\
                TAP version 13\n1..1\nok 1 selftests: mm: mremap_test\n";
    let v = run(&with_body(SUITE, "mm/mremap_test", body), EXIT_0);
    assert_passes(&v, "24 passed, 0 failed, 2 skipped");
    let run = v
        .programs
        .iter()
        .find(|p| p.name == "mm/mremap_test")
        .unwrap();
    assert_eq!((run.plan, run.results.len()), (Some(1), 1));
}

/// `Bail out!` from guest_tests (kselftest's ksft_exit_fail_msg() prints
/// the same): a failure of that program, whatever it planned.
#[test]
fn a_bail_out_is_a_failure_of_its_program() {
    let log = with_body(
        SUITE,
        "rt/guest_tests",
        "Bail out! cannot create the half-process set: No such device (os error 19)\n",
    );
    let v = run(&with_rc(&log, "rt/guest_tests", 1), EXIT_1);
    assert_cause(
        &v,
        "rt/guest_tests.bail_out: cannot create the half-process set: No such device",
    );
    assert_eq!(v.summary().failed, 1, "{:#?}", v.results);
}

/// A failing kselftest_harness test is named with its program.
#[test]
fn a_failing_test_is_named_with_its_program() {
    let log = SUITE.replace(
        "#            OK  global.vectored\nok 3 global.vectored\n",
        "# hp_dm.c:201:vectored:Expected got (4096) == want (8192)\n\
         #            FAIL  global.vectored\nnot ok 3 global.vectored\n",
    );
    let v = run(&with_rc(&log, "hp_dm", 1), EXIT_1);
    assert_cause(&v, "1 tests failed: hp_dm: global.vectored");
}
