// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! TAP lines as the guest's programs print them: kselftest.h and
//! kselftest_harness.h (Linux 6.12), the runtime's `guest_tests`, and
//! `/init`'s own `ok N init.xxx` lines.
//!
//! Only top-level lines are results. A subtest is indented (`    ok 1 x`,
//! TAP 14) or hidden behind a comment (`# ok 1 x`, the kselftest runner's
//! nesting) and does not count; neither do diagnostics (`#`, tab-indented).
//!
//! Directives: `# SKIP` skips; `# TODO` and kselftest's `# XFAIL`/`# XPASS`
//! keep their status word (`not ok # TODO` is an expected failure, so it
//! passes). kselftest puts the directive before the description when a
//! test has no name (`ok 3 # SKIP no THP`, `ok 1 # XFAIL mremap - ...`,
//! `not ok 4 # error ...`), and a double space when a passing test carries a
//! message (`ok 2 name #  message`).

use serde::Serialize;

/// The outcome of one test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// `ok`, including `# XFAIL`/`# XPASS`, and `not ok ... # TODO`.
    Pass,
    /// `not ok`, including kselftest's `# error`.
    Fail,
    /// `# SKIP`, whether `ok` or `not ok`.
    Skip,
}

/// One test result line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TestResult {
    /// The test's description; `test N` when the line has none.
    pub name: String,
    /// Its status.
    pub status: Status,
    /// The directive or message after `#` (`SKIP no module`, `XFAIL`,
    /// `TODO later`, `12 ms`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub directive: Option<String>,
}

/// Totals over results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Passed tests.
    pub passed: usize,
    /// Failed tests.
    pub failed: usize,
    /// Skipped tests.
    pub skipped: usize,
}

impl Summary {
    /// Count one more result.
    pub fn add(&mut self, s: Status) {
        match s {
            Status::Pass => self.passed += 1,
            Status::Fail => self.failed += 1,
            Status::Skip => self.skipped += 1,
        }
    }
}

/// A plan line `1..N`, possibly `1..0 # SKIP reason`: the count and the
/// directive. `None` if the line is not a plan.
///
/// ```
/// use halfproc_harness::tap::parse_plan;
/// assert_eq!(parse_plan("1..27"), Some((27, None)));
/// assert_eq!(parse_plan("1..0 # SKIP no hugetlb"), Some((0, Some("SKIP no hugetlb".into()))));
/// assert_eq!(parse_plan("1..n"), None);
/// ```
pub fn parse_plan(line: &str) -> Option<(usize, Option<String>)> {
    let rest = line.trim_end_matches('\r').strip_prefix("1..")?;
    let (count, directive) = match rest.split_once('#') {
        Some((c, d)) => (c.trim(), Some(d.trim().to_string())),
        None => (rest.trim(), None),
    };
    if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((count.parse().ok()?, directive.filter(|d| !d.is_empty())))
}

/// `Bail out!` and its reason, if `line` is one.
pub fn parse_bail_out(line: &str) -> Option<&str> {
    line.trim_end_matches('\r')
        .strip_prefix("Bail out!")
        .map(str::trim)
}

/// Whether `directive` starts with the TAP keyword `word` (any case).
fn is_directive(directive: &str, word: &str) -> bool {
    directive.len() >= word.len()
        && directive[..word.len()].eq_ignore_ascii_case(word)
        && !directive[word.len()..].starts_with(|c: char| c.is_ascii_alphanumeric())
}

/// Parse one line; `None` if it is not a top-level TAP result line.
///
/// # Examples
///
/// ```
/// use halfproc_harness::tap::{parse_line, Status};
/// assert_eq!(parse_line("ok 3 global.map # SKIP no module").unwrap().status, Status::Skip);
/// assert_eq!(parse_line("ok 4 # SKIP MADV_POPULATE_READ is not available").unwrap().status, Status::Skip);
/// assert_eq!(parse_line("not ok 1 sets.fork").unwrap().status, Status::Fail);
/// assert!(parse_line("# ok 1 nested").is_none());
/// ```
pub fn parse_line(line: &str) -> Option<TestResult> {
    let line = line.trim_end_matches('\r');
    let (fail, rest) = if let Some(r) = line.strip_prefix("not ok") {
        (true, r)
    } else if let Some(r) = line.strip_prefix("ok") {
        (false, r)
    } else {
        return None;
    };
    if !rest.is_empty() && !rest.starts_with(' ') {
        return None;
    }
    let rest = rest.trim_start();
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let number = &rest[..digits];
    let rest = rest[digits..].trim_start();
    let rest = rest.strip_prefix("- ").unwrap_or(rest);
    // "name # directive", or "# directive name" when there is no name.
    let (name, directive) = if let Some(d) = rest.strip_prefix('#') {
        let d = d.trim();
        let desc = ["SKIP", "TODO", "XFAIL", "XPASS", "error"]
            .iter()
            .find(|w| is_directive(d, w))
            .map_or("", |w| d[w.len()..].trim());
        (desc, Some(d))
    } else {
        match rest.split_once(" #") {
            Some((n, d)) => (n, Some(d.trim())),
            None => (rest, None),
        }
    };
    let directive = directive.filter(|d| !d.is_empty());
    let has = |w| directive.is_some_and(|d| is_directive(d, w));
    let status = if has("SKIP") {
        Status::Skip
    } else if fail && !has("TODO") {
        Status::Fail
    } else {
        Status::Pass
    };
    let name = name.trim();
    Some(TestResult {
        name: if name.is_empty() {
            format!("test {number}")
        } else {
            name.to_string()
        },
        status,
        directive: directive.map(String::from),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(log: &str) -> Vec<TestResult> {
        log.lines().filter_map(parse_line).collect()
    }

    fn statuses(log: &str) -> Vec<(String, Status)> {
        parse(log).into_iter().map(|r| (r.name, r.status)).collect()
    }

    #[test]
    fn kselftest_harness_output() {
        let log = "TAP version 13\n1..3\n# Starting 3 tests from 1 test cases.\n\
                   #  RUN           global.a ...\n#            OK  global.a\nok 1 global.a\n\
                   #  RUN           global.b ...\n# b.c:12:Expected 1 (1) == 2 (2)\n\
                   #          FAIL  global.b\nnot ok 2 global.b\n\
                   ok 3 global.c # SKIP module not loaded\n# FAILED: 1 / 3 tests passed.\n";
        let r = parse(log);
        assert_eq!(r.len(), 3);
        let mut s = Summary::default();
        r.iter().for_each(|r| s.add(r.status));
        assert_eq!(
            s,
            Summary {
                passed: 1,
                failed: 1,
                skipped: 1
            }
        );
        assert_eq!(r[1].name, "global.b");
        assert_eq!(r[2].directive.as_deref(), Some("SKIP module not loaded"));
    }

    #[test]
    fn plain_tap_and_noise() {
        let log =
            "[    1.0] random printk ok 5\nok\nokay 7\nnot ok 9 - broken\nok 10 - fine # skip x\n";
        let r = parse(log);
        assert_eq!(r.len(), 3, "{r:?}");
        assert_eq!(r[0].status, Status::Pass);
        assert_eq!(r[1].name, "broken");
        assert_eq!(r[2].status, Status::Skip);
    }

    #[test]
    fn todo_is_not_a_failure() {
        let r = parse("not ok 1 known # TODO fix later\n");
        assert_eq!(r[0].status, Status::Pass);
        assert_eq!(r[0].directive.as_deref(), Some("TODO fix later"));
    }

    /// kselftest.h's `ksft_test_result_skip()` and `ksft_exit_skip()` print
    /// the directive first (`ok N # SKIP reason`): a skip, not a pass named
    /// "# SKIP ...".
    #[test]
    fn nameless_kselftest_directives() {
        let log = "ok 1 # SKIP MADV_POPULATE_READ is not available\n\
                   ok 2 # XFAIL mremap - Source and Destination Regions Overlapping\n\
                   \tExpected mremap failure\n\
                   not ok 3 # error cannot open /proc/self/pagemap\n\
                   ok 4 # skip lower case\n";
        assert_eq!(
            statuses(log),
            [
                ("MADV_POPULATE_READ is not available".into(), Status::Skip),
                (
                    "mremap - Source and Destination Regions Overlapping".into(),
                    Status::Pass
                ),
                ("cannot open /proc/self/pagemap".into(), Status::Fail),
                ("lower case".into(), Status::Skip),
            ]
        );
    }

    /// `ksft_test_result_code()`: `#  msg` after a pass, `# XPASS`, and a
    /// SKIP on a `not ok` line; the runtime's `# 12 ms` timings.
    #[test]
    fn messages_after_the_name() {
        let log = "ok 1 fixture.variant.a #  because\nok 2 b # XPASS unknown\n\
                   not ok 3 c # SKIP not here\nok 4 - sets::fork # 12 ms\n\
                   not ok 5 - sets::timeout # timed out after 240 s\nok 6 no#hash\n";
        assert_eq!(
            statuses(log),
            [
                ("fixture.variant.a".into(), Status::Pass),
                ("b".into(), Status::Pass),
                ("c".into(), Status::Skip),
                ("sets::fork".into(), Status::Pass),
                ("sets::timeout".into(), Status::Fail),
                ("no#hash".into(), Status::Pass),
            ]
        );
    }

    #[test]
    fn a_number_only_line_is_named_by_its_number() {
        let r = parse("ok 7\nnot ok 8\n");
        assert_eq!(r[0].name, "test 7");
        assert_eq!(r[1].status, Status::Fail);
    }

    /// Nested results (TAP 14 indentation, the kselftest runner's `# `
    /// prefix) and diagnostics are not top-level results.
    #[test]
    fn nested_subtests_are_not_results() {
        let log = "# TAP version 13\n# 1..2\n# ok 1 nested.a\n# not ok 2 nested.b\n\
                   \x20   ok 1 indented\n\tnot ok 2 tabbed\n#  RUN  global.a ...\nok 1 outer\n";
        assert_eq!(statuses(log), [("outer".into(), Status::Pass)]);
    }

    #[test]
    fn plans_and_bail_outs() {
        assert_eq!(parse_plan("1..16\r"), Some((16, None)));
        assert_eq!(
            parse_plan("1..0 # SKIP x"),
            Some((0, Some("SKIP x".into())))
        );
        assert_eq!(parse_plan("# 1..4"), None);
        assert_eq!(parse_plan("1.."), None);
        assert_eq!(parse_plan("1..2..3"), None);
        assert_eq!(parse_bail_out("Bail out! no set"), Some("no set"));
        assert_eq!(parse_bail_out("# Bail out! nested"), None);
    }
}
