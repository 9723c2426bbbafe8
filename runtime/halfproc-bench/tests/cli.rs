// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The binary's answers to bad arguments: exit code 2 and a message that
//! names the problem, before anything is measured.

use std::process::Command;

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_halfproc-bench"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn size_out_of_range() {
    let (code, _, err) = run(&["copy", "--sizes", "6..30", "--out", "-"]);
    assert_eq!(code, 2);
    assert!(err.contains("2^30 bytes is out of range"), "{err}");
    let (code, _, err) = run(&["copy", "--sizes", "3"]);
    assert_eq!(code, 2);
    assert!(err.contains("out of range"), "{err}");
}

#[test]
fn unknown_strategy() {
    let (code, _, err) = run(&["copy", "--strategies", "shared,telepathy"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown strategy `telepathy`"), "{err}");
    assert!(
        err.contains("double-copy-pipelined"),
        "lists the known names: {err}"
    );
}

#[test]
fn unknown_subcommand_and_option() {
    let (code, _, err) = run(&["frobnicate"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown subcommand `frobnicate`"), "{err}");
    let (code, _, err) = run(&["mm", "--mmaps", "-3"]);
    assert_eq!(code, 2);
    assert!(err.contains("--mmaps"), "{err}");
    let (code, out, _) = run(&["copy", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--strategies"));
}

#[test]
fn tiny_run_succeeds() {
    let (code, out, err) = run(&[
        "copy",
        "--sizes",
        "6,10",
        "--strategies",
        "shared,tcp",
        "--reps",
        "1",
        "--placement",
        "same",
        "--out",
        "-",
        "--quiet",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("median time"), "{out}");
}
