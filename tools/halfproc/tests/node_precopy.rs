//! Live migration with pre-copy. This host's kernel may lack soft-dirty:
//! the default daemon then says "stop-and-copy (pre-copy unavailable:
//! WHY)" in the `migrate` output (and "pre-copy (soft-dirty)" where it
//! works); daemons told to compare page contents (`HALFPROC_PRECOPY=hash`)
//! run the whole pre-copy protocol anywhere: rounds while the program runs,
//! a frozen delta, the destination assembling the image and checking its
//! CRC. Output and exit status as unmigrated.

mod common;

use common::*;
use halfproc_node::precopy::{mode, Mode};

fn migrate_err(from: &str, pid: i32, to: &str) -> (i32, String) {
    let o = halfproc()
        .args(["migrate", "--node", from, &pid.to_string(), "--to", to])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "migrate failed: {err}");
    (
        String::from_utf8_lossy(&o.stdout).trim().parse().unwrap(),
        err,
    )
}

fn migrate_n(env: &[(&str, &str)], n: usize, expect: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (Daemon::start_env(&[], env), Daemon::start_env(&[], env));
    let argv = [prog(), "40000", "wait"];
    let (want, want_code) = reference(&argv, None);
    let (run, held) = run_held(&a, &argv, None, tmp.path(), "pre");
    let mut pid = run.pid();
    let nodes = [&a, &b];
    for i in 0..n {
        sleep_ms(30);
        let (from, to) = (nodes[i % 2], nodes[(i + 1) % 2]);
        let (p, err) = migrate_err(&from.addr, pid, &to.addr);
        assert!(err.contains(expect), "migration {i}: {err}");
        eprint!("{err}");
        pid = p;
    }
    held.close();
    let (got, code, err) = run.finish();
    assert_same("pre-copied program", &got, &want);
    assert_eq!(code, want_code, "{err}");
}

#[test]
fn content_hash_precopy_migrates_correctly() {
    migrate_n(
        &[("HALFPROC_PRECOPY", "hash")],
        6,
        "pre-copy (content hash): ",
    );
}

#[test]
fn default_mode_says_which_mechanism() {
    let expect = match mode() {
        Mode::SoftDirty => "pre-copy (soft-dirty): ".to_string(),
        Mode::Off(why) => {
            assert!(why.contains("pre-copy unavailable"), "{why}");
            format!("stop-and-copy ({why})")
        }
        Mode::Hash => unreachable!("HALFPROC_PRECOPY=hash in the test's environment"),
    };
    migrate_n(&[], 2, &expect);
}
