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
/// let f = scan(log);
/// assert_eq!(f.len(), 1);
/// assert_eq!(f[0].kind, "bug");
/// assert_eq!(f[0].line, 2);
/// ```
pub fn scan(log: &str) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    // A report spans many lines, several of which look like headers of their
    // own ("BUG: unable to handle ..." then "Oops: ..."). Lines up to the
    // report's "---[ end trace" (or REPORT_SPAN lines) belong to it; a panic
    // is always reported.
    let mut in_report_until = 0usize;
    for (i, raw) in log.lines().enumerate() {
        for msg in messages(raw) {
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
            out.push(Finding {
                kind,
                line: i + 1,
                text: msg.trim_end().to_string(),
            });
            in_report_until = i + REPORT_SPAN;
        }
    }
    out
}

/// Lines after a report header that still belong to the same report when no
/// "---[ end trace" closes it.
const REPORT_SPAN: usize = 60;

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(format!(
            "{}/tests/fixtures/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }

    #[test]
    fn clean_boot_has_no_findings() {
        assert_eq!(scan(&fixture("clean-boot.log")), []);
    }

    #[test]
    fn oops_is_found() {
        let f = scan(&fixture("oops.log"));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].kind, "bug");
        assert!(f[0].text.contains("unable to handle page fault"));
    }

    #[test]
    fn lockdep_is_found() {
        let f = scan(&fixture("lockdep.log"));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].kind, "lockdep");
    }

    #[test]
    fn warn_is_found() {
        let f = scan(&fixture("warn.log"));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].kind, "warning");
    }

    #[test]
    fn kasan_is_found() {
        let f = scan(&fixture("kasan.log"));
        assert_eq!(f[0].kind, "kasan");
    }

    #[test]
    fn panic_is_found() {
        let f = scan(&fixture("panic.log"));
        assert!(f.iter().any(|f| f.kind == "panic"), "{f:?}");
    }

    #[test]
    fn test_output_quoting_a_pattern_is_not_a_finding() {
        let log = "# expecting no line starting with BUG: here\nok 1 - scanner quoted\n";
        assert_eq!(scan(log), []);
    }

    #[test]
    fn panic_in_the_middle_of_a_user_line_is_found() {
        // Seen in a real run: init's echo had no newline yet when the
        // kernel panicked.
        let log = "[    4.70] init: start\nharness self-test: init exits, the kernel must p[    4.750136] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100\n[    4.750959] Call Trace:\n";
        let f = scan(log);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].kind, f[0].line), ("panic", 2));
        assert!(f[0].text.starts_with("Kernel panic"), "{f:?}");
    }

    #[test]
    fn a_bracketed_number_in_user_text_is_not_a_timestamp() {
        let log = "# result [3] BUG: quoted by a test\n# took [12] WARNING: also quoted\n";
        assert_eq!(scan(log), []);
    }
}
