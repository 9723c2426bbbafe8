// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The verdict of one guest run: from its console log and the contents of
//! its status port, every reason it failed.

use crate::breaches::{self, Tagged};
use crate::programs::{self, ProgramRun};
use crate::scan;
use crate::tap::{Status, Summary};
use std::time::Duration;

/// The marker the guest's init writes to the status port (`/dev/ttyS1`).
pub const EXIT_MARKER: &str = "HALFPROC_EXIT=";

/// The line where the guest's init says what it runs on
/// (`# halfproc: 5-level paging, pti on`).
pub const CONFIG_MARKER: &str = "# halfproc: ";

/// What happened.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// The exit status the guest reported, if it did.
    pub exit_status: Option<i32>,
    /// Whether the harness killed the guest at the timeout.
    pub timed_out: bool,
    /// Kernel reports found on the console; those a test announced are
    /// marked expected and do not fail the run.
    pub findings: Vec<scan::Finding>,
    /// The programs that ran (`init` first), as their markers delimit them.
    pub programs: Vec<ProgramRun>,
    /// TAP results found on the console, tagged with their program, and the
    /// results for programs that broke their plan or never ran.
    pub results: Vec<Tagged>,
    /// Why the run failed; empty when it passed.
    pub causes: Vec<String>,
    /// Wall time of the guest.
    pub elapsed: Duration,
    /// What the guest said it runs on (paging mode, PTI), if it said.
    pub configuration: Option<String>,
}

impl Verdict {
    /// Totals over all results.
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        self.results.iter().for_each(|t| s.add(t.result.status));
        s
    }

    /// Whether the run passed.
    pub fn passed(&self) -> bool {
        self.causes.is_empty()
    }

    /// The one-line summary, with the configuration when the guest said it.
    pub fn summary_line(&self) -> String {
        let s = self.summary();
        let expected = self.findings.iter().filter(|f| f.expected).count();
        let mut line = format!(
            "{} passed, {} failed, {} skipped; {} kernel reports{}; {} in {:.1}s",
            s.passed,
            s.failed,
            s.skipped,
            self.findings.len() - expected,
            match expected {
                0 => String::new(),
                n => format!(" ({n} expected, announced by tests)"),
            },
            if self.passed() { "PASS" } else { "FAIL" },
            self.elapsed.as_secs_f64()
        );
        if let Some(c) = &self.configuration {
            line.push_str(&format!(" ({c})"));
        }
        line
    }
}

/// Judge a finished run from its console log and status-port contents;
/// `expected` lists the programs that must have started.
pub fn judge(
    console: &str,
    status: &str,
    timed_out: bool,
    timeout: Duration,
    expected: &[String],
) -> Verdict {
    let scanned = scan::scan(console);
    let configuration = console
        .lines()
        .find_map(|l| l.trim_end().strip_prefix(CONFIG_MARKER))
        .filter(|c| c.contains("paging"))
        .map(str::to_owned);
    let programs = programs::split(console);
    let results = breaches::judge(&programs, expected);
    let exit_status = status
        .lines()
        .find_map(|l| l.trim().strip_prefix(EXIT_MARKER))
        .and_then(|v| v.trim().parse::<i32>().ok());
    let mut causes = Vec::new();
    if timed_out {
        causes.push(format!(
            "guest hung: killed after the {}s timeout",
            timeout.as_secs()
        ));
    }
    for f in scanned.unexpected() {
        causes.push(format!(
            "kernel reported {} at console line {}: {}",
            f.kind, f.line, f.text
        ));
    }
    for e in &scanned.unmet {
        causes.push(format!(
            "a test announced a {} in {} at console line {}, and none came",
            e.kind, e.function, e.line
        ));
    }
    let findings = scanned.findings;
    match exit_status {
        None if !timed_out => {
            if findings.iter().any(|f| f.kind == "panic") {
                causes.push("guest panicked before reporting an exit status".into());
            } else {
                causes.push("guest stopped without reporting an exit status".into());
            }
        }
        Some(rc) if rc != 0 => causes.push(format!("guest test suite exited with status {rc}")),
        _ => {}
    }
    let failed: Vec<_> = results
        .iter()
        .filter(|t| t.result.status == Status::Fail)
        .map(Tagged::label)
        .collect();
    if !failed.is_empty() {
        causes.push(format!(
            "{} tests failed: {}",
            failed.len(),
            failed.join(", ")
        ));
    }
    Verdict {
        exit_status,
        timed_out,
        findings,
        programs,
        results,
        causes,
        elapsed: Duration::ZERO,
        configuration,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(60);

    fn assert_cause(v: &Verdict, want: &str) {
        assert!(
            v.causes.iter().any(|c| c.contains(want)),
            "no cause names {want:?}: {:?}",
            v.causes
        );
    }

    #[test]
    fn clean_pass() {
        let v = judge("ok 1 a\nok 2 b\n", "HALFPROC_EXIT=0\n", false, T, &[]);
        assert!(v.passed(), "{:?}", v.causes);
        assert!(v.summary_line().starts_with("2 passed, 0 failed"));
    }

    #[test]
    fn oops_fails_even_if_tests_pass() {
        let console = "ok 1 a\n[    3.1] Oops: 0000 [#1] SMP\n";
        let v = judge(console, "HALFPROC_EXIT=0\n", false, T, &[]);
        assert!(!v.passed());
        assert!(v.causes[0].contains("oops"), "{:?}", v.causes);
    }

    #[test]
    fn panic_without_status() {
        let console = "[    1.0] Kernel panic - not syncing: Attempted to kill init!\n";
        assert_cause(&judge(console, "", false, T, &[]), "panicked");
    }

    #[test]
    fn hang_is_reported() {
        assert_cause(&judge("ok 1 a\n", "", true, T, &[]), "hung");
    }

    #[test]
    fn failing_test_and_status() {
        let v = judge("ok 1 a\nnot ok 2 b\n", "HALFPROC_EXIT=1\n", false, T, &[]);
        assert_eq!(v.causes.len(), 2, "{:?}", v.causes);
        assert!(v.causes[1].contains("b"));
    }

    #[test]
    fn configuration_is_recorded() {
        let console = "# halfproc: 4-level paging, pti off\nok 1 a\n";
        let v = judge(console, "HALFPROC_EXIT=0\n", false, T, &[]);
        assert_eq!(v.configuration.as_deref(), Some("4-level paging, pti off"));
        assert!(
            v.summary_line().ends_with(" (4-level paging, pti off)"),
            "{}",
            v.summary_line()
        );
        let v = judge("ok 1 a\n", "HALFPROC_EXIT=0\n", false, T, &[]);
        assert_eq!(v.configuration, None);
    }

    /// What scripts/selftest.sh greps for in mode `fail`.
    #[test]
    fn an_announced_report_passes_and_is_counted_apart() {
        let console = "ok 1 a\n# halfproc-expect-report: warning halfproc_install\n[    5.0] WARNING: CPU: 0 PID: 9 at mm/halfproc.c:365 halfproc_install+0x4b/0x1a0\nok 2 b\n";
        let v = judge(console, "HALFPROC_EXIT=0\n", false, T, &[]);
        assert!(v.passed(), "{:?}", v.causes);
        assert!(v
            .summary_line()
            .starts_with("2 passed, 0 failed, 0 skipped; 0 kernel reports (1 expected, announced by tests); PASS"));
    }

    #[test]
    fn an_announced_report_that_never_came_fails() {
        let console = "ok 1 a\n# halfproc-expect-report: warning halfproc_install\n";
        let v = judge(console, "HALFPROC_EXIT=0\n", false, T, &[]);
        assert_cause(
            &v,
            "announced a warning in halfproc_install at console line 2",
        );
    }

    #[test]
    fn self_test_failure_is_named() {
        let console = "not ok 1 harness.self_test_failure\n";
        let v = judge(console, "HALFPROC_EXIT=1\n", false, T, &[]);
        assert_cause(&v, "tests failed: harness.self_test_failure");
    }
}
