// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Which program reported what, and whether each kept its word.
//!
//! The guest's `/init` prints a marker line around every test program it
//! runs:
//!
//! ```text
//! # halfproc-harness: begin hp_sets
//! ...the program's TAP...
//! # halfproc-harness: end hp_sets rc=0
//! ```
//!
//! TAP result lines between the markers belong to that program; those
//! outside belong to `init`. Only top-level lines count (a kselftest
//! subtest's `# ok 1 ...` is indented behind `# `). Each program is then
//! held to what it declared: its plan (`1..N`) must match the number of
//! results, it must end (a crash or a kill leaves no `end` marker), an exit
//! status other than 0 needs a failing result to explain it, and `Bail out!`
//! fails it. Each breach becomes a failed result of its own, as does a
//! program the caller expected that never started.

use crate::tap::{self, Status, TestResult};

/// Prefix of the marker lines.
pub const MARKER: &str = "# halfproc-harness: ";
/// The pseudo-program of results printed outside any marker.
pub const INIT: &str = "init";
/// kselftest's exit status for "skipped" (`KSFT_SKIP`): not a failure.
pub const KSFT_SKIP: i32 = 4;

/// One program's run as seen on the console.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramRun {
    /// Its name (`hp_sets`, `mm/mremap_test`, `init`).
    pub name: String,
    /// The plan it declared (`1..N`), if any.
    pub plan: Option<usize>,
    /// Its top-level results, in order.
    pub results: Vec<TestResult>,
    /// Its exit status, from the end marker.
    pub rc: Option<i32>,
    /// Whether the end marker was seen.
    pub ended: bool,
    /// The reason of a `Bail out!`.
    pub bailed: Option<String>,
}

/// A result together with the program that reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tagged {
    /// The program.
    pub program: String,
    /// The result.
    pub result: TestResult,
}

/// Splits a console log into program runs; `init` comes first.
pub fn split(log: &str) -> Vec<ProgramRun> {
    let mut runs = vec![ProgramRun {
        name: INIT.into(),
        ended: true,
        ..Default::default()
    }];
    let mut cur = 0;
    for line in log.lines().map(|l| l.trim_end_matches('\r')) {
        if let Some(m) = line.strip_prefix(MARKER) {
            let mut w = m.split_whitespace();
            match (w.next(), w.next()) {
                (Some("begin"), Some(name)) => {
                    runs.push(ProgramRun {
                        name: name.into(),
                        ..Default::default()
                    });
                    cur = runs.len() - 1;
                }
                (Some("end"), Some(name)) if runs[cur].name == name => {
                    runs[cur].ended = true;
                    runs[cur].rc = w
                        .next()
                        .and_then(|r| r.strip_prefix("rc="))
                        .and_then(|r| r.parse().ok());
                    cur = 0;
                }
                _ => {}
            }
            continue;
        }
        let run = &mut runs[cur];
        if let Some(n) = line.strip_prefix("1..") {
            if run.plan.is_none() && cur != 0 {
                run.plan = n.split_whitespace().next().and_then(|n| n.parse().ok());
            }
        } else if let Some(why) = line.strip_prefix("Bail out!") {
            run.bailed = Some(why.trim().to_string());
        } else if let Some(r) = tap::parse_line(line) {
            run.results.push(r);
        }
    }
    runs
}

fn synthetic(program: &str, what: &str) -> Tagged {
    Tagged {
        program: program.into(),
        result: TestResult {
            name: format!("{program}.{what}"),
            status: Status::Fail,
        },
    }
}

/// Every result, tagged with its program, plus a failed result for each
/// breach: a plan not kept, a program that did not end, a non-zero exit
/// status that no failing result explains, a `Bail out!`, and each program
/// of `expected` that never started.
pub fn judge(runs: &[ProgramRun], expected: &[String]) -> Vec<Tagged> {
    let mut out = Vec::new();
    for run in runs {
        out.extend(run.results.iter().map(|r| Tagged {
            program: run.name.clone(),
            result: r.clone(),
        }));
        let failing = run.results.iter().any(|r| r.status == Status::Fail);
        if let Some(plan) = run.plan {
            if plan != run.results.len() {
                out.push(synthetic(
                    &run.name,
                    &format!(
                        "plan_mismatch: planned {plan}, reported {}",
                        run.results.len()
                    ),
                ));
            }
        }
        if !run.ended {
            out.push(synthetic(
                &run.name,
                "did_not_finish: no end marker (crashed or killed)",
            ));
        } else if let Some(rc) = run.rc.filter(|&rc| rc != 0 && rc != KSFT_SKIP && !failing) {
            out.push(synthetic(
                &run.name,
                &format!("exit_status: exited {rc} with no failing result"),
            ));
        }
        if let Some(why) = &run.bailed {
            out.push(synthetic(&run.name, &format!("bail_out: {why}")));
        }
    }
    for e in expected {
        if !runs.iter().any(|r| &r.name == e) {
            out.push(synthetic(e, "missing: expected program never started"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names_failed(t: &[Tagged]) -> Vec<String> {
        t.iter()
            .filter(|t| t.result.status == Status::Fail)
            .map(|t| t.result.name.clone())
            .collect()
    }

    const GOOD: &str = "ok 1 init.module_loads\n\
        # halfproc-harness: begin hp_sets\nTAP version 13\n1..2\n\
        # Starting 2 tests from 1 test cases.\n#  RUN  global.a ...\nok 1 global.a\n\
        ok 2 global.b # SKIP no module\n# ok 1 nested subtest\n\
        # halfproc-harness: end hp_sets rc=0\nok 2 init.after\n";

    #[test]
    fn results_are_tagged_with_their_program() {
        let t = judge(&split(GOOD), &["hp_sets".into()]);
        assert!(names_failed(&t).is_empty(), "{t:?}");
        let progs: Vec<_> = t
            .iter()
            .map(|t| (t.program.as_str(), t.result.name.as_str()))
            .collect();
        assert_eq!(
            progs,
            [
                ("init", "init.module_loads"),
                ("init", "init.after"),
                ("hp_sets", "global.a"),
                ("hp_sets", "global.b"),
            ]
        );
    }

    #[test]
    fn a_truncated_program_fails() {
        let log = "# halfproc-harness: begin hp_dm\n1..27\nok 1 global.a\nok 2 global.b\n\
                   [   9.1] random printk\n";
        let f = names_failed(&judge(&split(log), &[]));
        assert_eq!(
            f,
            [
                "hp_dm.plan_mismatch: planned 27, reported 2",
                "hp_dm.did_not_finish: no end marker (crashed or killed)"
            ]
        );
    }

    #[test]
    fn plan_mismatch_after_a_clean_exit_fails() {
        let log = "# halfproc-harness: begin x\n1..3\nok 1 a\nok 2 b\n\
                   # halfproc-harness: end x rc=0\n";
        assert_eq!(
            names_failed(&judge(&split(log), &[])),
            ["x.plan_mismatch: planned 3, reported 2"]
        );
    }

    #[test]
    fn nonzero_exit_with_all_ok_fails() {
        let log = "# halfproc-harness: begin x\n1..1\nok 1 a\n# halfproc-harness: end x rc=139\n";
        assert_eq!(
            names_failed(&judge(&split(log), &[])),
            ["x.exit_status: exited 139 with no failing result"]
        );
        // Explained by a failing result: no extra failure.
        let log = "# halfproc-harness: begin x\n1..1\nnot ok 1 a\n# halfproc-harness: end x rc=1\n";
        assert_eq!(names_failed(&judge(&split(log), &[])), ["a"]);
    }

    #[test]
    fn missing_expected_program_fails() {
        let t = judge(&split(GOOD), &["hp_sets".into(), "mm/cow".into()]);
        assert_eq!(
            names_failed(&t),
            ["mm/cow.missing: expected program never started"]
        );
    }

    #[test]
    fn skip_plans_and_bail_out() {
        let log = "# halfproc-harness: begin a\n1..0 # SKIP no hugetlb\n\
                   # halfproc-harness: end a rc=0\n\
                   # halfproc-harness: begin b\n1..4\nBail out! cannot create the set\n\
                   # halfproc-harness: end b rc=1\n";
        assert_eq!(
            names_failed(&judge(&split(log), &[])),
            [
                "b.plan_mismatch: planned 4, reported 0",
                "b.exit_status: exited 1 with no failing result",
                "b.bail_out: cannot create the set"
            ]
        );
    }
}
