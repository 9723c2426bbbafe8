// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Which program reported what, and whether each kept its word.
//!
//! The guest's `/init` prints a marker line around every test program it
//! runs (`tests/guest/init.sh`, `prog`):
//!
//! ```text
//! # halfproc-harness: begin hp_sets
//! ...the program's TAP...
//! # halfproc-harness: end hp_sets rc=0
//! ```
//!
//! TAP result lines between the markers belong to that program; those
//! outside belong to `init`. Only top-level lines count (see [`crate::tap`]).
//! Each program is then held to what it declared, and each breach becomes a
//! synthetic result named `<program>.<breach>: <detail>`:
//!
//! - `plan_mismatch`: it declared `1..N` and reported another number of
//!   results (a skip, not a failure, when it ended with kselftest's
//!   `ksft_exit_skip()`: a `# SKIP` result, then exit status 4);
//! - `no_plan`: it reported results but never declared a plan, so a
//!   truncation could not be seen;
//! - `no_tap`: it reported no plan and no result at all;
//! - `skipped` (a skip): it declared `1..0`, e.g. `1..0 # SKIP no hugetlb`;
//! - `did_not_finish`: no end marker (it crashed the guest, hung, or was
//!   killed);
//! - `exit_status`: it exited non-zero (other than kselftest's 4, "skip")
//!   with no failing result or bail-out to explain it;
//! - `bail_out`: it printed `Bail out!`;
//! - `missing`: a program the caller expected never started.

use crate::tap::{self, TestResult};
use serde::{Serialize, Serializer};

/// Prefix of the marker lines.
pub const MARKER: &str = "# halfproc-harness: ";
/// The pseudo-program of results printed outside any marker.
pub const INIT: &str = "init";
/// kselftest's exit status for "skipped" (`KSFT_SKIP`): not a failure.
pub const KSFT_SKIP: i32 = 4;

/// One program's run as seen on the console.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProgramRun {
    /// Its name (`hp_sets`, `mm/mremap_test`, `init`).
    pub name: String,
    /// The plan it declared (`1..N`), if any.
    pub plan: Option<usize>,
    /// The directive of the plan line (`SKIP no hugetlb` of `1..0 # SKIP
    /// no hugetlb`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_directive: Option<String>,
    /// Its top-level results, in order (serialized as their count).
    #[serde(rename = "reported", serialize_with = "count")]
    pub results: Vec<TestResult>,
    /// Its exit status, from the end marker.
    pub rc: Option<i32>,
    /// Whether the end marker was seen.
    pub ended: bool,
    /// The reason of a `Bail out!`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bailed: Option<String>,
}

fn count<S: Serializer>(results: &[TestResult], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(results.len() as u64)
}

/// Parses a marker line: `begin NAME` or `end NAME rc=N`.
enum Marker<'a> {
    Begin(&'a str),
    End(&'a str, Option<i32>),
}

fn parse_marker(line: &str) -> Option<Marker<'_>> {
    let mut w = line.strip_prefix(MARKER)?.split_whitespace();
    match (w.next()?, w.next()?) {
        ("begin", name) => Some(Marker::Begin(name)),
        ("end", name) => Some(Marker::End(
            name,
            w.next()
                .and_then(|r| r.strip_prefix("rc="))
                .and_then(|r| r.parse().ok()),
        )),
        _ => None,
    }
}

/// Splits a console log into program runs; `init` comes first. Only the
/// programs' own lines count, whole again where printk records split them
/// ([`crate::console::user_lines`]).
///
/// A `begin` while another program is still open leaves that one unended
/// (its end marker never came); an `end` for another name than the open
/// program is ignored.
pub fn split(log: &str) -> Vec<ProgramRun> {
    let mut runs = vec![ProgramRun {
        name: INIT.into(),
        ended: true,
        ..Default::default()
    }];
    let mut cur = 0;
    for line in crate::console::user_lines(log) {
        let line = line.as_str();
        match parse_marker(line) {
            Some(Marker::Begin(name)) => {
                runs.push(ProgramRun {
                    name: name.into(),
                    ..Default::default()
                });
                cur = runs.len() - 1;
                continue;
            }
            Some(Marker::End(name, rc)) => {
                if cur != 0 && runs[cur].name == name {
                    runs[cur].ended = true;
                    runs[cur].rc = rc;
                    cur = 0;
                }
                continue;
            }
            None => {}
        }
        let run = &mut runs[cur];
        if let Some((n, directive)) = tap::parse_plan(line) {
            // init prints no plan of its own; the first plan of a program
            // is its plan.
            if cur != 0 && run.plan.is_none() {
                run.plan = Some(n);
                run.plan_directive = directive;
            }
        } else if let Some(why) = tap::parse_bail_out(line) {
            run.bailed.get_or_insert_with(|| why.to_string());
        } else if let Some(r) = tap::parse_line(line) {
            run.results.push(r);
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "TAP version 13\nok 1 init.module_loads\n\
        # halfproc-harness: begin hp_sets\nTAP version 13\n1..2\n\
        # Starting 2 tests from 1 test cases.\n#  RUN  global.a ...\nok 1 global.a\n\
        ok 2 global.b # SKIP no module\n# ok 1 nested subtest\n\
        # halfproc-harness: end hp_sets rc=0\nok 2 init.after\n\
        # halfproc-harness: begin mm/madv_populate\n1..0 # SKIP no MADV_POPULATE\n\
        \n# halfproc-harness: end mm/madv_populate rc=4\n\
        # halfproc-harness: begin hp_dm\n1..27\nok 1 a\nBail out! no set\nBail out! again\n\
        # halfproc-harness: begin rt/guest_tests\n1..1\n\
        # halfproc-harness: end hp_dm rc=0\nok 1 - x # 3 ms\n";

    #[test]
    fn runs_are_split_at_the_markers() {
        let runs = split(LOG);
        let names: Vec<_> = runs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "init",
                "hp_sets",
                "mm/madv_populate",
                "hp_dm",
                "rt/guest_tests"
            ]
        );
        let [init, sets, madv, dm, rt] = &runs[..] else {
            unreachable!()
        };
        assert_eq!((init.plan, init.results.len(), init.ended), (None, 2, true));
        assert_eq!(
            (sets.plan, sets.results.len(), sets.rc),
            (Some(2), 2, Some(0))
        );
        assert_eq!(madv.plan, Some(0));
        assert_eq!(
            madv.plan_directive.as_deref(),
            Some("SKIP no MADV_POPULATE")
        );
        assert_eq!(madv.rc, Some(KSFT_SKIP));
        // hp_dm never ended: rt/guest_tests began first; the stray end
        // marker for hp_dm does not close rt/guest_tests.
        assert_eq!((dm.ended, dm.bailed.as_deref()), (false, Some("no set")));
        assert_eq!((rt.ended, rt.results.len()), (false, 1));
    }

    #[test]
    fn a_run_serializes_its_count_not_its_results() {
        let j = serde_json::to_value(&split(LOG)[1]).unwrap();
        assert_eq!(
            j,
            serde_json::json!({"name": "hp_sets", "plan": 2, "reported": 2,
                               "rc": 0, "ended": true})
        );
    }

    #[test]
    fn a_printk_record_splitting_a_line_changes_no_run() {
        // A record at every byte of every line: the runs, their plans,
        // results, exit statuses and bail-outs stay those of the clean log
        // (before, `not [ts] msg` + `ok 2 - b` was a pass, `o[ts]` + `k 1`
        // dropped a result, and `test x ... [ts]` + `ok` added one).
        let log = format!("{LOG}test tcp ... ok\nok 5 init.bench_strategies\n");
        let want = split(&log);
        for (n, line) in log.lines().enumerate() {
            for at in 0..=line.len() {
                let spliced: String = log
                    .lines()
                    .enumerate()
                    .map(|(i, l)| match i == n {
                        true => format!("{}[   12.345678] rcu: msg\n{}\n", &l[..at], &l[at..]),
                        false => format!("{l}\n"),
                    })
                    .collect();
                assert_eq!(split(&spliced), want, "line {n} byte {at}:\n{spliced}");
            }
        }
    }
}
