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

/// Strip a printk timestamp (`[    1.234567] `) if present.
fn message(line: &str) -> &str {
    let t = line.trim_start();
    if let Some(rest) = t.strip_prefix('[') {
        if let Some(end) = rest.find(']') {
            let stamp = &rest[..end];
            if stamp.trim().chars().all(|c| c.is_ascii_digit() || c == '.') {
                return rest[end + 1..].trim_start();
            }
        }
    }
    t
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
        let msg = message(raw);
        if msg.starts_with("---[ end trace") {
            in_report_until = 0;
            continue;
        }
        for (pat, kind) in PATTERNS {
            let hit = if pat.starts_with('=') {
                // A SLUB report opens with a line of '=' only.
                msg.trim_end() == *pat
            } else {
                // Messages start with the pattern; test output quoting one
                // does not.
                msg.starts_with(pat)
            };
            if hit {
                if i < in_report_until && *kind != "panic" {
                    break;
                }
                out.push(Finding {
                    kind,
                    line: i + 1,
                    text: msg.trim_end().to_string(),
                });
                in_report_until = i + REPORT_SPAN;
                break;
            }
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
}
