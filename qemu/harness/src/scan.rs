// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The console scanner: every kernel report that means "something is wrong"
//! fails the run, whatever the tests said.

/// One report found on the console.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// What kind of report (e.g. "oops", "lockdep").
    pub kind: &'static str,
    /// 1-based line number in the console log.
    pub line: usize,
    /// The line itself, without the printk timestamp.
    pub text: String,
    /// Whether a test announced it ([`EXPECT_MARKER`]): it then does not
    /// fail the run.
    pub expected: bool,
}

/// What a guest test writes to `/dev/kmsg` just before it makes the kernel
/// report on purpose, followed by the report's kind and the function it
/// names: `# halfproc-expect-report: warning halfproc_install`.  Through
/// the kernel's log, not the test's stdout: the console orders log records,
/// while a program's output reaches it through pipes, after the report it
/// announced as often as not.  The next report
/// of that kind whose first line names that function (`... at
/// mm/halfproc.c:365 halfproc_install+0x4b/0x1a0`) is expected; one
/// announcement covers one report, and one that no report meets fails the
/// run ([`Scan::unmet`]).
pub const EXPECT_MARKER: &str = "# halfproc-expect-report: ";

/// A report a test announced.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Expectation {
    /// The kind of report (a kind of [`PATTERNS`]).
    pub kind: String,
    /// The function its first line must name.
    pub function: String,
    /// 1-based console line of the announcement.
    pub line: usize,
}

impl Expectation {
    /// The announcement on console line `line`, if `text` holds one.  The
    /// kernel's own report may start on the same console line before the
    /// test's newline got there (`...halfproc_install[    9.06] ---[ cut
    /// here ]`), so each word ends at the first character no kind or C
    /// identifier has.
    fn parse(line: usize, text: &str) -> Option<Self> {
        let rest = text.trim_start().strip_prefix(EXPECT_MARKER)?;
        let word = |w: &str, extra: char| -> String {
            w.chars()
                .take_while(|&c| c.is_ascii_alphanumeric() || c == '_' || c == extra)
                .collect()
        };
        let mut words = rest.split_whitespace();
        let kind = word(words.next()?, '-');
        let function = word(words.next()?, '_');
        (!kind.is_empty() && !function.is_empty()).then_some(Expectation {
            kind,
            function,
            line,
        })
    }

    fn meets(&self, kind: &str, text: &str) -> bool {
        self.kind == kind
            && text
                .split_whitespace()
                .any(|w| w.split('+').next() == Some(self.function.as_str()) && w.contains('+'))
    }
}

/// What the scanner found on one console log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// Every report, in console order; announced ones are marked expected.
    pub findings: Vec<Finding>,
    /// Announcements no report met.
    pub unmet: Vec<Expectation>,
}

impl Scan {
    /// The reports no test announced: each fails the run.
    pub fn unexpected(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| !f.expected)
    }
}

/// Patterns and the kind of report each one starts. Matched against the
/// message part of a console line (after the `[    1.234567] ` timestamp).
const PATTERNS: &[(&str, &str)] = &[
    ("Kernel panic - not syncing", "panic"),
    ("BUG: KASAN:", "kasan"),
    ("BUG: KFENCE:", "kfence"),
    ("UBSAN:", "ubsan"),
    ("WARNING: possible circular locking dependency", "lockdep"),
    ("WARNING: possible recursive locking", "lockdep"),
    ("WARNING: inconsistent lock state", "lockdep"),
    ("WARNING: suspicious RCU usage", "lockdep"),
    ("WARNING: bad unlock balance", "lockdep"),
    ("WARNING: held lock freed", "lockdep"),
    ("INFO: possible irq lock inversion", "lockdep"),
    (
        "BUG: sleeping function called from invalid context",
        "atomic-sleep",
    ),
    ("BUG: scheduling while atomic", "atomic-sleep"),
    ("BUG: soft lockup", "lockup"),
    ("INFO: task ", "hung-task"),
    ("rcu: INFO: rcu_", "rcu-stall"),
    ("kernel BUG at", "bug"),
    ("BUG: Bad page", "bad-page"),
    ("BUG: Bad rss-counter", "bad-rss"),
    ("BUG: non-zero pgtables_bytes", "pgtable-leak"),
    ("BUG:", "bug"),
    ("Oops:", "oops"),
    ("general protection fault", "oops"),
    ("WARNING:", "warning"),
    ("list_add corruption", "list-corruption"),
    ("list_del corruption", "list-corruption"),
    (
        "=============================================================================",
        "slub",
    ),
];

use crate::console::stamp_len;

/// The kernel messages of one console line: the line itself (without its
/// timestamp), and every message that starts at a timestamp later in the
/// line. The console interleaves printk records with user-space output
/// that has no newline yet (`...must p[    4.75] Kernel panic - ...`), so
/// a report can start in the middle of a line; text without a timestamp
/// in front of it (test output quoting a report) is never a message.
fn messages(line: &str) -> impl Iterator<Item = &str> {
    let t = line.trim_start();
    let first = match stamp_len(t) {
        Some(n) => t[n..].trim_start(),
        None => t,
    };
    let later = t
        .match_indices('[')
        .filter(|&(i, _)| i > 0)
        .filter_map(move |(i, _)| stamp_len(&t[i..]).map(|n| t[i + n..].trim_start()));
    std::iter::once(first).chain(later)
}

/// The kind of report `msg` (a message without its timestamp) starts.
fn report_kind(msg: &str) -> Option<&'static str> {
    PATTERNS.iter().find_map(|&(pat, kind)| {
        let hit = if pat.starts_with('=') {
            // A SLUB report opens with a line of '=' only.
            msg.trim_end() == pat
        } else {
            // Messages start with the pattern; test output quoting one
            // does not.
            msg.starts_with(pat)
        };
        hit.then_some(kind)
    })
}

/// Scan a console log; one finding per report (the first matching line).
///
/// # Examples
///
/// ```
/// use halfproc_harness::scan::scan;
/// let log = "[    0.1] ok\n[    2.5] BUG: unable to handle page fault for address: 0\n";
/// let f = scan(log).findings;
/// assert_eq!(f.len(), 1);
/// assert_eq!(f[0].kind, "bug");
/// assert_eq!(f[0].line, 2);
/// ```
pub fn scan(log: &str) -> Scan {
    let mut out: Vec<Finding> = Vec::new();
    let mut pending: Vec<Expectation> = Vec::new();
    // A report spans many lines, several of which look like headers of their
    // own ("BUG: unable to handle ..." then "Oops: ..."). Lines up to the
    // report's "---[ end trace" (or REPORT_SPAN lines) belong to it; a panic
    // is always reported.
    let mut in_report_until = 0usize;
    for (i, raw) in log.lines().enumerate() {
        for msg in messages(raw) {
            if let Some(e) = Expectation::parse(i + 1, msg) {
                pending.push(e);
                continue;
            }
            if msg.starts_with("---[ end trace") {
                in_report_until = 0;
                continue;
            }
            let Some(kind) = report_kind(msg) else {
                continue;
            };
            if i < in_report_until && kind != "panic" {
                continue;
            }
            let text = msg.trim_end().to_string();
            let met = pending.iter().position(|e| e.meets(kind, &text));
            out.push(Finding {
                kind,
                line: i + 1,
                expected: met.map(|k| pending.remove(k)).is_some(),
                text,
            });
            in_report_until = i + REPORT_SPAN;
        }
    }
    Scan {
        findings: out,
        unmet: pending,
    }
}

/// Lines after a report header that still belong to the same report when no
/// "---[ end trace" closes it.
const REPORT_SPAN: usize = 60;

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_f(log: &str) -> Vec<Finding> {
        scan(log).findings
    }

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(format!(
            "{}/tests/fixtures/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }

    #[test]
    fn clean_boot_has_no_findings() {
        assert_eq!(scan_f(&fixture("clean-boot.log")), []);
    }

    #[test]
    fn oops_is_found() {
        let f = scan_f(&fixture("oops.log"));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].kind, "bug");
        assert!(f[0].text.contains("unable to handle page fault"));
    }

    #[test]
    fn lockdep_is_found() {
        let f = scan_f(&fixture("lockdep.log"));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].kind, "lockdep");
    }

    #[test]
    fn warn_is_found() {
        let f = scan_f(&fixture("warn.log"));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].kind, "warning");
    }

    #[test]
    fn kasan_is_found() {
        let f = scan_f(&fixture("kasan.log"));
        assert_eq!(f[0].kind, "kasan");
    }

    #[test]
    fn panic_is_found() {
        let f = scan_f(&fixture("panic.log"));
        assert!(f.iter().any(|f| f.kind == "panic"), "{f:?}");
    }

    #[test]
    fn test_output_quoting_a_pattern_is_not_a_finding() {
        let log = "# expecting no line starting with BUG: here\nok 1 - scanner quoted\n";
        assert_eq!(scan_f(log), []);
    }

    #[test]
    fn panic_in_the_middle_of_a_user_line_is_found() {
        // Seen in a real run: init's echo had no newline yet when the
        // kernel panicked.
        let log = "[    4.70] init: start\nharness self-test: init exits, the kernel must p[    4.750136] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100\n[    4.750959] Call Trace:\n";
        let f = scan_f(log);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].kind, f[0].line), ("panic", 2));
        assert!(f[0].text.starts_with("Kernel panic"), "{f:?}");
    }

    #[test]
    fn a_bracketed_number_in_user_text_is_not_a_timestamp() {
        let log = "# result [3] BUG: quoted by a test\n# took [12] WARNING: also quoted\n";
        assert_eq!(scan_f(log), []);
    }

    const WARN_AT: &str = "[   52.1] WARNING: CPU: 1 PID: 97 at mm/halfproc.c:365 halfproc_install+0x4b/0x1a0\n[   52.2] Call Trace:\n[   52.3] ---[ end trace 0000000000000000 ]---\n";

    #[test]
    fn an_announced_report_is_expected_and_met() {
        let log = format!("# halfproc-expect-report: warning halfproc_install\n{WARN_AT}");
        let s = scan(&log);
        assert_eq!(s.findings.len(), 1, "{s:?}");
        assert!(s.findings[0].expected);
        assert_eq!(s.unexpected().count(), 0);
        assert_eq!(s.unmet, []);
    }

    #[test]
    fn an_unannounced_report_is_unexpected() {
        let s = scan(WARN_AT);
        assert_eq!(s.unexpected().count(), 1, "{s:?}");
    }

    #[test]
    fn an_announcement_covers_one_report_of_its_kind_and_function() {
        // Another function, another kind, and a second report: unexpected.
        let other = WARN_AT.replace("halfproc_install", "halfproc_uninstall");
        let bug = "[   53.0] BUG: unable to handle page fault in halfproc_install+0x1/0x2\n[   53.1] ---[ end trace 0000000000000000 ]---\n";
        let log = format!(
            "# halfproc-expect-report: warning halfproc_install\n{other}{bug}{WARN_AT}{WARN_AT}"
        );
        let s = scan(&log);
        let expected: Vec<bool> = s.findings.iter().map(|f| f.expected).collect();
        assert_eq!(expected, [false, false, true, false], "{s:?}");
        assert_eq!(s.unmet, []);
    }

    #[test]
    fn a_prefix_of_the_function_is_not_it() {
        let log = format!("# halfproc-expect-report: warning halfproc_inst\n{WARN_AT}");
        let s = scan(&log);
        assert_eq!(s.unexpected().count(), 1, "{s:?}");
        assert_eq!(s.unmet.len(), 1);
    }

    #[test]
    fn an_announcement_through_the_kernel_log_is_met() {
        // Seen in the guest: a program's stdout mid-line, then the record.
        let log = "t-report: warnin[    8.89] # halfproc-expect-report: warning halfproc_install\n[    8.90] ------------[ cut here ]------------\n[    8.91] WARNING: CPU: 1 PID: 79 at mm/halfproc.c:365 halfproc_install+0x64/0x168\n";
        let s = scan(log);
        assert_eq!(s.unexpected().count(), 0, "{s:?}");
        assert_eq!(s.unmet, []);
    }

    #[test]
    fn a_report_on_the_announcements_line_is_met() {
        // Seen in the guest: the printk came before the test's newline.
        let log = "# halfproc-expect-report: warning halfproc_install[    9.067744] ------------[ cut here ]------------\n[    9.068112] WARNING: CPU: 1 PID: 79 at mm/halfproc.c:365 halfproc_install+0x64/0x168\n";
        let s = scan(log);
        assert_eq!(s.unexpected().count(), 0, "{s:?}");
        assert_eq!(s.unmet, []);
    }

    #[test]
    fn an_announcement_no_report_meets_is_unmet() {
        let s = scan("ok 1 a\n# halfproc-expect-report: warning halfproc_install\nok 2 b\n");
        assert_eq!(s.findings, []);
        assert_eq!(s.unmet.len(), 1);
        assert_eq!(
            (s.unmet[0].line, s.unmet[0].function.as_str()),
            (2, "halfproc_install")
        );
    }

    #[test]
    fn a_report_before_its_announcement_is_unexpected() {
        let log = format!("{WARN_AT}# halfproc-expect-report: warning halfproc_install\n");
        let s = scan(&log);
        assert_eq!(s.unexpected().count(), 1, "{s:?}");
        assert_eq!(s.unmet.len(), 1);
    }
}
