// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Holding each program to its word: every result tagged with its program,
//! and a synthetic result for each breach (see [`crate::programs`] for the
//! list). A program that broke its plan, did not finish or never started is
//! a failure, never a smaller total.

use crate::programs::{ProgramRun, INIT, KSFT_SKIP};
use crate::tap::{Status, TestResult};
use serde::Serialize;

/// A result together with the program that reported it and that
/// program's plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Tagged {
    /// The program.
    pub program: String,
    /// The result.
    #[serde(flatten)]
    pub result: TestResult,
    /// The program's plan (`1..N`), if it declared one.
    pub plan: Option<usize>,
    /// Made by the harness for a breach, not printed by the program.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub synthetic: bool,
}

impl Tagged {
    /// `program: name`, or the bare name for `init`'s own results and for
    /// synthetic results (whose name already starts with the program).
    pub fn label(&self) -> String {
        if self.program == INIT || self.synthetic {
            self.result.name.clone()
        } else {
            format!("{}: {}", self.program, self.result.name)
        }
    }
}

fn synthetic(run: &ProgramRun, status: Status, what: String) -> Tagged {
    Tagged {
        program: run.name.clone(),
        result: TestResult {
            name: format!("{}.{what}", run.name),
            status,
            directive: None,
        },
        plan: run.plan,
        synthetic: true,
    }
}

/// The breaches of one program's run, as synthetic results.
fn breaches(run: &ProgramRun) -> Vec<Tagged> {
    let mut out = Vec::new();
    if run.name == INIT {
        // /init's own lines: no plan, no markers; its exit status comes
        // over the status port.
        return out;
    }
    let reported = run.results.len();
    let failing = run.results.iter().any(|r| r.status == Status::Fail);
    let ksft_skip_exit = run.rc == Some(KSFT_SKIP);
    match run.plan {
        Some(0) if reported == 0 => {
            let why = run.plan_directive.as_deref().unwrap_or("planned no test");
            out.push(synthetic(run, Status::Skip, format!("skipped: {why}")));
        }
        Some(plan) if plan != reported => {
            // ksft_exit_skip() after the plan: "ok N # SKIP why", exit 4.
            let skipped_rest = ksft_skip_exit
                && reported < plan
                && run.results.last().is_some_and(|r| r.status == Status::Skip);
            let (status, rest) = if skipped_rest {
                (Status::Skip, "; it skipped the rest (exit 4, KSFT_SKIP)")
            } else {
                (Status::Fail, "")
            };
            out.push(synthetic(
                run,
                status,
                format!("plan_mismatch: planned {plan}, reported {reported}{rest}"),
            ));
        }
        Some(_) => {}
        None if reported > 0 => out.push(synthetic(
            run,
            Status::Fail,
            format!("no_plan: {reported} results without a 1..N plan"),
        )),
        None if run.bailed.is_none() => out.push(synthetic(
            run,
            Status::Fail,
            "no_tap: no plan and no result".into(),
        )),
        None => {}
    }
    if !run.ended {
        out.push(synthetic(
            run,
            Status::Fail,
            "did_not_finish: no end marker (crashed or killed)".into(),
        ));
    } else {
        match run.rc {
            None => out.push(synthetic(
                run,
                Status::Fail,
                "exit_status: the end marker has no rc=N".into(),
            )),
            Some(rc) if rc != 0 && !ksft_skip_exit && !failing && run.bailed.is_none() => {
                out.push(synthetic(
                    run,
                    Status::Fail,
                    format!("exit_status: exited {rc} with no failing result"),
                ))
            }
            Some(_) => {}
        }
    }
    if let Some(why) = &run.bailed {
        out.push(synthetic(run, Status::Fail, format!("bail_out: {why}")));
    }
    out
}

/// Every result, tagged with its program, then each program's breaches,
/// then a failed `<program>.missing` result for each program of `expected`
/// that never started.
pub fn judge(runs: &[ProgramRun], expected: &[String]) -> Vec<Tagged> {
    let mut out = Vec::new();
    for run in runs {
        out.extend(run.results.iter().map(|r| Tagged {
            program: run.name.clone(),
            result: r.clone(),
            plan: run.plan,
            synthetic: false,
        }));
        out.extend(breaches(run));
    }
    let mut missing: Vec<&String> = expected
        .iter()
        .filter(|e| !runs.iter().any(|r| &r.name == *e))
        .collect();
    missing.sort();
    missing.dedup();
    for e in missing {
        let never = ProgramRun {
            name: e.clone(),
            ..Default::default()
        };
        out.push(synthetic(
            &never,
            Status::Fail,
            "missing: expected program never started".into(),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::programs::split;

    /// (status, name) of each synthetic result of `log`.
    fn breached(log: &str, expected: &[&str]) -> Vec<(Status, String)> {
        let runs = split(log);
        let expected: Vec<String> = expected.iter().map(|e| e.to_string()).collect();
        judge(&runs, &expected)
            .iter()
            .filter(|t| t.synthetic)
            .map(|t| (t.result.status, t.result.name.clone()))
            .collect()
    }

    fn failed(names: &[&str]) -> Vec<(Status, String)> {
        names
            .iter()
            .map(|n| (Status::Fail, n.to_string()))
            .collect()
    }

    fn prog(name: &str, body: &str, rc: Option<i32>) -> String {
        let end = rc.map_or(String::new(), |rc| {
            format!("\n# halfproc-harness: end {name} rc={rc}\n")
        });
        format!("# halfproc-harness: begin {name}\n{body}{end}")
    }

    #[test]
    fn a_kept_plan_has_no_breach() {
        let log = prog(
            "x",
            "TAP version 13\n1..2\nok 1 a\nok 2 b # SKIP no\n",
            Some(0),
        );
        assert_eq!(breached(&log, &["x"]), []);
    }

    #[test]
    fn results_carry_program_and_plan() {
        let log = format!("ok 1 init.a\n{}", prog("x", "1..1\nok 1 a\n", Some(0)));
        let t = judge(&split(&log), &[]);
        let got: Vec<_> = t
            .iter()
            .map(|t| (t.program.as_str(), t.result.name.as_str(), t.plan))
            .collect();
        assert_eq!(got, [("init", "init.a", None), ("x", "a", Some(1))]);
        assert_eq!(t[1].label(), "x: a");
        assert_eq!(t[0].label(), "init.a");
    }

    #[test]
    fn fewer_or_more_results_than_planned_fail() {
        let log = prog("x", "1..3\nok 1 a\nok 2 b\n", Some(0))
            + &prog("y", "1..1\nok 1 a\nok 2 b\n", Some(0));
        assert_eq!(
            breached(&log, &[]),
            failed(&[
                "x.plan_mismatch: planned 3, reported 2",
                "y.plan_mismatch: planned 1, reported 2"
            ])
        );
    }

    #[test]
    fn a_truncated_program_fails_twice_over() {
        let log = prog(
            "hp_dm",
            "1..27\nok 1 a\nok 2 b\n[    9.1] random printk\n",
            None,
        );
        assert_eq!(
            breached(&log, &[]),
            failed(&[
                "hp_dm.plan_mismatch: planned 27, reported 2",
                "hp_dm.did_not_finish: no end marker (crashed or killed)"
            ])
        );
    }

    #[test]
    fn a_nonzero_exit_needs_a_failing_result() {
        let log = prog("x", "1..1\nok 1 a\n", Some(139));
        assert_eq!(
            breached(&log, &[]),
            failed(&["x.exit_status: exited 139 with no failing result"])
        );
        let log = prog("x", "1..1\nnot ok 1 a\n", Some(1));
        assert_eq!(breached(&log, &[]), []);
        let log = prog("x", "1..1\nok 1 a\n", None) + "\n# halfproc-harness: end x\n";
        assert_eq!(
            breached(&log, &[]),
            failed(&["x.exit_status: the end marker has no rc=N"])
        );
    }

    #[test]
    fn kselftest_skips_are_skips() {
        // ksft_exit_skip() before the plan, and after it.
        let log = prog("a", "1..0 # SKIP no hugetlb\n", Some(4))
            + &prog(
                "b",
                "TAP version 13\n1..16\nok 1 # SKIP MADV_POPULATE_READ is not available\n",
                Some(4),
            );
        assert_eq!(
            breached(&log, &[]),
            [
                (Status::Skip, "a.skipped: SKIP no hugetlb".into()),
                (
                    Status::Skip,
                    "b.plan_mismatch: planned 16, reported 1; it skipped the rest (exit 4, KSFT_SKIP)"
                        .into()
                ),
            ]
        );
    }

    /// Exit status 4 does not excuse a truncation that did not end in a
    /// skip, and a skip without exit status 4 is no ksft_exit_skip().
    #[test]
    fn exit_4_excuses_only_a_skip() {
        let log =
            prog("a", "1..5\nok 1 x\n", Some(4)) + &prog("b", "1..5\nok 1 # SKIP y\n", Some(0));
        assert_eq!(
            breached(&log, &[]),
            failed(&[
                "a.plan_mismatch: planned 5, reported 1",
                "b.plan_mismatch: planned 5, reported 1"
            ])
        );
    }

    #[test]
    fn no_plan_or_no_tap_fails() {
        let log = prog("a", "ok 1 x\n", Some(0)) + &prog("b", "hello\n", Some(0));
        assert_eq!(
            breached(&log, &[]),
            failed(&[
                "a.no_plan: 1 results without a 1..N plan",
                "b.no_tap: no plan and no result"
            ])
        );
    }

    #[test]
    fn a_bail_out_fails_and_explains_the_exit_status() {
        let log = prog(
            "b",
            "TAP version 13\n1..4\nBail out! cannot create the set\n",
            Some(1),
        ) + &prog("c", "Bail out! early\n", Some(1));
        assert_eq!(
            breached(&log, &[]),
            failed(&[
                "b.plan_mismatch: planned 4, reported 0",
                "b.bail_out: cannot create the set",
                "c.bail_out: early"
            ])
        );
    }

    #[test]
    fn a_missing_expected_program_fails_once() {
        let log = prog("hp_sets", "1..1\nok 1 a\n", Some(0));
        assert_eq!(
            breached(&log, &["hp_sets", "mm/cow", "mm/cow"]),
            failed(&["mm/cow.missing: expected program never started"])
        );
    }
}
