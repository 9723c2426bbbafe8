// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! TAP aggregation over the guest's console: every `ok`/`not ok` line of
//! every test program counts, wherever it appears.

/// The outcome of one test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// `ok N name`
    Pass,
    /// `not ok N name`
    Fail,
    /// `ok N name # SKIP reason`
    Skip,
    /// `not ok N name # TODO` (expected failure)
    Todo,
}

/// One test result line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestResult {
    /// The test's description.
    pub name: String,
    /// Its status.
    pub status: Status,
}

/// Totals over all results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Passed tests.
    pub passed: usize,
    /// Failed tests.
    pub failed: usize,
    /// Skipped tests.
    pub skipped: usize,
}

/// Parse one line; `None` if it is not a TAP result line.
///
/// # Examples
///
/// ```
/// use halfproc_harness::tap::{parse_line, Status};
/// assert_eq!(parse_line("ok 3 global.map # SKIP no module").unwrap().status, Status::Skip);
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
    let rest = rest
        .trim_start_matches(|c: char| c.is_ascii_digit())
        .trim_start();
    let rest = rest.strip_prefix("- ").unwrap_or(rest);
    let (name, directive) = match rest.split_once(" # ") {
        Some((n, d)) => (n, Some(d.trim())),
        None => (rest, None),
    };
    let dir = directive.map(|d| d.to_ascii_uppercase());
    let status = match (fail, dir.as_deref()) {
        (_, Some(d)) if d.starts_with("SKIP") => Status::Skip,
        (true, Some(d)) if d.starts_with("TODO") => Status::Todo,
        (true, _) => Status::Fail,
        (false, _) => Status::Pass,
    };
    Some(TestResult {
        name: name.trim().to_string(),
        status,
    })
}

/// All results in a log, in order.
pub fn parse(log: &str) -> Vec<TestResult> {
    log.lines().filter_map(parse_line).collect()
}

/// Totals over `results`.
pub fn summarize(results: &[TestResult]) -> Summary {
    let mut s = Summary::default();
    for r in results {
        match r.status {
            Status::Pass | Status::Todo => s.passed += 1,
            Status::Fail => s.failed += 1,
            Status::Skip => s.skipped += 1,
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kselftest_harness_output() {
        let log = "TAP version 13\n1..3\n# Starting 3 tests from 1 test cases.\n\
                   #  RUN           global.a ...\n#            OK  global.a\nok 1 global.a\n\
                   #  RUN           global.b ...\n# b.c:12:Expected 1 (1) == 2 (2)\n\
                   #          FAIL  global.b\nnot ok 2 global.b\n\
                   ok 3 global.c # SKIP module not loaded\n# FAILED: 1 / 3 tests passed.\n";
        let r = parse(log);
        assert_eq!(r.len(), 3);
        assert_eq!(
            summarize(&r),
            Summary {
                passed: 1,
                failed: 1,
                skipped: 1
            }
        );
        assert_eq!(r[1].name, "global.b");
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
        assert_eq!(summarize(&r).failed, 0);
    }
}
