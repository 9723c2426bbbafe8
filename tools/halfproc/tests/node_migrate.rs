//! Programs started with `halfproc run` on node A and migrated between two
//! node daemons (A, B on loopback) 20 times while they run: their output,
//! relayed to the `run` client wherever they are, and their exit status
//! equal an unmigrated run's, byte for byte. Each program reads its stdin
//! to EOF, which the test gives only after the 20 migrations: none can
//! finish early, however slow the migrations or fast the program. The work
//! is sized (2-3 s of CPU each) so that most migrations hit it mid-compute.

mod common;

use common::*;
use std::path::Path;

const MIGRATIONS: usize = 20;

fn back_and_forth(name: &str, argv: &[&str], stdin: Option<&Path>, tmp: &Path) {
    let (want, want_code) = reference(argv, stdin);
    assert!(!want.is_empty(), "{name}: empty reference output");
    let nodes = [Daemon::start(), Daemon::start()];
    let (r, held) = run_held(&nodes[0], argv, stdin, tmp, name);
    let mut pid = r.pid();
    let mut here = 0;
    let mut frozen = Vec::new();
    for i in 0..MIGRATIONS {
        sleep_ms(10);
        let to = 1 - here;
        let m = migrate(&nodes[here].addr, pid, &nodes[to].addr)
            .unwrap_or_else(|e| panic!("{name}: migration {i} of pid {pid}: {e}"));
        pid = m.pid;
        frozen.push(m.frozen_ms);
        here = to;
        if i == 0 {
            // `ps` on the origin says where the program went; there, it is local.
            let origin = ps(&nodes[0]);
            let place = format!("{} pid {pid}", nodes[1].addr);
            assert!(origin.contains(&place), "{name}: origin's ps: {origin}");
            let there = ps(&nodes[1]);
            assert!(
                there
                    .lines()
                    .any(|l| l.trim_start().starts_with(&format!("{pid} ")) && l.ends_with("here")),
                "{name}: destination's ps: {there}"
            );
        }
    }
    held.close();
    let (out, code, err) = r.finish();
    frozen.sort_by(f64::total_cmp);
    eprintln!(
        "{name}: {MIGRATIONS} migrations, frozen median {:.1} ms, max {:.1} ms",
        frozen[frozen.len() / 2],
        frozen[frozen.len() - 1]
    );
    assert_same(name, &out, &want);
    assert_eq!(code, want_code, "{name}: exit status (run's stderr: {err})");
}

/// A temporary directory with `input.txt` of `len` bytes.
fn with_input(len: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input.txt");
    input_file(&input, len);
    (tmp, input)
}

#[test]
fn c_program_migrated_20_times() {
    let tmp = tempfile::tempdir().unwrap();
    back_and_forth("prog", &[prog(), "40000", "wait"], None, tmp.path());
}

#[test]
fn gzip_with_relayed_stdin_migrated_20_times() {
    let (tmp, input) = with_input(16 << 20);
    back_and_forth(
        "gzip",
        &[tool("gzip"), "-9", "-n", "-c"],
        Some(&input),
        tmp.path(),
    );
}

#[test]
fn xz_with_relayed_stdin_migrated_20_times() {
    let (tmp, input) = with_input(4 << 20);
    back_and_forth(
        "xz",
        &[tool("xz"), "-T1", "-6", "-c"],
        Some(&input),
        tmp.path(),
    );
}

#[test]
fn sha256sum_migrated_20_times() {
    let (tmp, input) = with_input(16 << 20);
    let p = input.to_str().unwrap();
    let mut argv = vec![tool("sha256sum")];
    argv.extend(std::iter::repeat_n(p, 100));
    argv.push("-"); // and stdin, which ends after the migrations
    back_and_forth("sha256sum", &argv, None, tmp.path());
}

#[test]
fn bzip2_with_relayed_stdin_migrated_20_times() {
    let (tmp, input) = with_input(4 << 20);
    back_and_forth(
        "bzip2",
        &[tool("bzip2"), "-9", "-c"],
        Some(&input),
        tmp.path(),
    );
}
