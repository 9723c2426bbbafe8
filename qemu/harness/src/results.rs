// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The result files next to the console log: `<log>.results.json` (serde)
//! and `<log>.tap`, one TAP stream of every program's results.

use crate::breaches::Tagged;
use crate::programs::ProgramRun;
use crate::scan::Finding;
use crate::tap::Status;
use crate::verdict::Verdict;
use serde::Serialize;
use std::fmt::Write as _;
use std::io;
use std::path::Path;

/// The contents of `<log>.results.json`.
#[derive(Serialize)]
pub struct ResultsFile<'a> {
    /// `pass` or `fail`.
    pub verdict: &'static str,
    /// Passed results (synthetic ones included).
    pub passed: usize,
    /// Failed results (synthetic ones included).
    pub failed: usize,
    /// Skipped results (synthetic ones included).
    pub skipped: usize,
    /// The guest's exit status from the status port.
    pub exit_status: Option<i32>,
    /// Whether the guest was killed at the timeout.
    pub timed_out: bool,
    /// Wall time of the guest.
    pub elapsed_s: f64,
    /// What the guest runs on (`5-level paging, pti on`), if it said.
    pub configuration: Option<&'a str>,
    /// Why the run failed.
    pub causes: &'a [String],
    /// Kernel reports found on the console.
    pub kernel_reports: &'a [Finding],
    /// Each program: its plan, how many results it reported, its exit status.
    pub programs: &'a [ProgramRun],
    /// Every result: `program`, `name`, `status`, `plan`, and `directive`
    /// when the line had one.
    pub tests: &'a [Tagged],
}

impl<'a> ResultsFile<'a> {
    /// The file's contents for `v`.
    pub fn new(v: &'a Verdict) -> Self {
        let s = v.summary();
        ResultsFile {
            verdict: if v.passed() { "pass" } else { "fail" },
            passed: s.passed,
            failed: s.failed,
            skipped: s.skipped,
            exit_status: v.exit_status,
            timed_out: v.timed_out,
            elapsed_s: v.elapsed.as_secs_f64(),
            configuration: v.configuration.as_deref(),
            causes: &v.causes,
            kernel_reports: &v.findings,
            programs: &v.programs,
            tests: &v.results,
        }
    }
}

/// One TAP stream of all results, each named `program: name`.
pub fn tap(results: &[Tagged]) -> String {
    let mut t = format!("TAP version 13\n1..{}\n", results.len());
    for (i, r) in results.iter().enumerate() {
        let directive = r.result.directive.as_deref();
        let (ok, dir) = match r.result.status {
            Status::Pass => ("ok", directive.map(String::from)),
            Status::Fail => ("not ok", directive.map(String::from)),
            Status::Skip => (
                "ok",
                Some(match directive {
                    Some(d) if d.get(..4).is_some_and(|w| w.eq_ignore_ascii_case("SKIP")) => {
                        d.to_string()
                    }
                    _ => "SKIP".to_string(),
                }),
            ),
        };
        let _ = write!(t, "{ok} {} {}", i + 1, r.label());
        if let Some(d) = dir {
            let _ = write!(t, " # {d}");
        }
        t.push('\n');
    }
    t
}

/// Write `<log>.results.json` and `<log>.tap`.
pub fn write(log: &Path, v: &Verdict) -> io::Result<()> {
    let json = serde_json::to_string_pretty(&ResultsFile::new(v)).map_err(io::Error::other)?;
    std::fs::write(log.with_extension("results.json"), json + "\n")?;
    std::fs::write(log.with_extension("tap"), tap(&v.results))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::judge;
    use std::time::Duration;

    const LOG: &str = "ok 1 init.module_loads\n\
        # halfproc-harness: begin mm/madv_populate\nTAP version 13\n1..16\n\
        ok 1 # SKIP MADV_POPULATE_READ is not available\n\
        # halfproc-harness: end mm/madv_populate rc=4\n\
        # halfproc-harness: begin hp_dm\nTAP version 13\n1..2\nok 1 global.a\n\
        not ok 2 global.b\n# halfproc-harness: end hp_dm rc=1\n";

    fn verdict() -> Verdict {
        judge(LOG, "HALFPROC_EXIT=1\n", false, Duration::from_secs(9), &[])
    }

    #[test]
    fn json_carries_program_name_status_and_plan() {
        let v = verdict();
        let j = serde_json::to_value(ResultsFile::new(&v)).unwrap();
        assert_eq!(j["verdict"], "fail");
        assert_eq!(
            (&j["passed"], &j["failed"], &j["skipped"]),
            (&2.into(), &1.into(), &2.into())
        );
        assert_eq!(
            j["tests"][1],
            serde_json::json!({"program": "mm/madv_populate",
                "name": "MADV_POPULATE_READ is not available", "status": "skip",
                "directive": "SKIP MADV_POPULATE_READ is not available", "plan": 16})
        );
        assert_eq!(
            j["tests"][4],
            serde_json::json!({"program": "hp_dm", "name": "global.b", "status": "fail",
                "plan": 2})
        );
        assert_eq!(j["tests"][2]["synthetic"], true);
        assert_eq!(j["programs"][1]["reported"], 1);
        assert_eq!(j["programs"][2]["rc"], 1);
    }

    #[test]
    fn tap_file_names_each_program() {
        let t = tap(&verdict().results);
        let want = "TAP version 13\n1..5\nok 1 init.module_loads\n\
            ok 2 mm/madv_populate: MADV_POPULATE_READ is not available \
            # SKIP MADV_POPULATE_READ is not available\n\
            ok 3 mm/madv_populate.plan_mismatch: planned 16, reported 1; it skipped the rest \
            (exit 4, KSFT_SKIP) # SKIP\n\
            ok 4 hp_dm: global.a\nnot ok 5 hp_dm: global.b\n";
        assert_eq!(t, want);
    }
}
