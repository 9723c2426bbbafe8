// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The guest console carries two streams on one serial line: the kernel's
//! printk records and the test programs' output. A record always ends its
//! own line, but the kernel knows nothing of a user line still being
//! written, so a record can split one in two:
//!
//! ```text
//! not [   12.345678] clocksource: Long readout interval
//! ok 2 - b
//! ```
//!
//! [`user_lines`] gives the programs' lines back whole (here `not ok 2 -
//! b`), so that a record never adds, drops or flips a TAP result; the
//! console scanner reads the records themselves ([`crate::scan`]).

/// Length of the printk timestamp (`[    1.234567]`) that starts `s`, if
/// one does: `[`, spaces, digits, `.`, digits, `]`.
pub(crate) fn stamp_len(s: &str) -> Option<usize> {
    let rest = s.strip_prefix('[')?;
    let end = rest.find(']')?;
    let stamp = rest[..end].trim_start();
    let (secs, frac) = stamp.split_once('.')?;
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    (digits(secs) && digits(frac)).then_some(end + 2)
}

/// Where the first printk record after the start of `line` begins.
fn record_inside(line: &str) -> Option<usize> {
    line.match_indices('[')
        .map(|(i, _)| i)
        .find(|&i| i > 0 && stamp_len(&line[i..]).is_some())
}

/// The user-space lines of a console log, with every printk record taken
/// out and the pieces of a user line that records split joined again.
///
/// A line that starts with a timestamp is a record and is left out. A
/// line with a timestamp further in holds the start of a user line that
/// was not finished when the record came: that start is kept and the rest
/// of the user line is on the next line that is not a record. User output
/// that itself quotes a timestamped kernel line in the middle of a line is
/// taken for a record too (its next line is then joined to it; a planned
/// program fails its plan rather than passing).
pub fn user_lines(log: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending: Option<String> = None;
    for line in log.lines().map(|l| l.trim_end_matches('\r')) {
        if stamp_len(line).is_some() {
            continue;
        }
        match record_inside(line) {
            Some(i) => pending.get_or_insert_with(String::new).push_str(&line[..i]),
            None => match pending.take() {
                Some(mut start) => {
                    start.push_str(line);
                    out.push(start);
                }
                None => out.push(line.to_string()),
            },
        }
    }
    out.extend(pending);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORD: &str = "[   12.345678] clocksource: Long readout interval";

    /// A small suite log as /init prints it.
    const CLEAN: &str = "\
# halfproc-harness: begin hp_x
TAP version 13
1..3
ok 1 - a # 1 ms
not ok 2 - b
ok 3 - c # SKIP no module
# halfproc-harness: end hp_x rc=1
test cma ... ok
ok 5 init.bench_strategies
";

    /// `CLEAN` with `records` spliced in at byte `at` of line `n`.
    fn splice(n: usize, at: usize, records: &[&str]) -> String {
        let mut out = String::new();
        for (i, line) in CLEAN.lines().enumerate() {
            if i == n {
                out.push_str(&line[..at]);
                for r in records {
                    out.push_str(r);
                    out.push('\n');
                }
                out.push_str(&line[at..]);
            } else {
                out.push_str(line);
            }
            out.push('\n');
        }
        out
    }

    #[test]
    fn a_clean_log_is_unchanged() {
        assert_eq!(user_lines(CLEAN), CLEAN.lines().collect::<Vec<_>>());
    }

    #[test]
    fn records_at_every_byte_of_every_line_change_nothing() {
        let want = user_lines(CLEAN);
        for (n, line) in CLEAN.lines().enumerate() {
            for at in 0..=line.len() {
                for records in [&[RECORD][..], &[RECORD, "[   12.345679] second"][..]] {
                    let log = splice(n, at, records);
                    assert_eq!(user_lines(&log), want, "line {n} byte {at}:\n{log}");
                    let crlf = log.replace('\n', "\r\n");
                    assert_eq!(user_lines(&crlf), want, "CRLF, line {n} byte {at}");
                }
            }
        }
    }

    #[test]
    fn a_fragment_before_a_panic_is_kept_at_the_end() {
        let log = "harness self-test: init exits, the kernel must p[    4.750136] Kernel panic - not syncing\n[    4.750959] Call Trace:\n";
        assert_eq!(
            user_lines(log),
            ["harness self-test: init exits, the kernel must p"]
        );
    }

    #[test]
    fn bracketed_numbers_in_user_text_are_not_records() {
        let log = "# took [3] tries, [1.5s] or [.5]\nok 1 - x [2]\n";
        assert_eq!(user_lines(log), log.lines().collect::<Vec<_>>());
    }
}
