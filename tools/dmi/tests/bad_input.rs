// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Bad input to the C API over real node processes:
//! `runtime/dmi/examples/bad_input.c` (built through `pkg-config dmi`) on 1
//! and 3 nodes. Every bad call must return -1 with its errno and a message,
//! change nothing, and leave the nodes working; a crash of a node (a size
//! of INT64_MAX once aborted it in an allocation) fails the run.

use std::path::PathBuf;
use std::process::Command;

mod common;
use common::{build_example, libdmi, text, Link};

/// The program, built once for all tests of this file.
fn program() -> &'static (PathBuf, PathBuf) {
    static P: std::sync::OnceLock<(PathBuf, PathBuf)> = std::sync::OnceLock::new();
    P.get_or_init(|| build("bad_input"))
}

/// Builds libdmi, writes a `dmi.pc` for it and compiles the example with
/// `pkg-config --cflags --libs dmi`; returns the program and libdmi's dir.
fn build(name: &str) -> (PathBuf, PathBuf) {
    let lib = libdmi();
    let dir = std::env::temp_dir().join(format!("dmi-bad-{}-{name}", std::process::id()));
    (
        build_example(&lib, name, &dir, name, &[], Link::PkgConfig),
        lib,
    )
}

#[test]
fn bad_input_is_an_error_on_1_and_3_nodes() {
    let (prog, lib) = program();
    for n in [1, 3] {
        let o = Command::new(env!("CARGO_BIN_EXE_dmi"))
            .args(["run", "-n", &n.to_string(), "--"])
            .arg(prog)
            .env("LD_LIBRARY_PATH", lib)
            .output()
            .unwrap();
        assert!(o.status.success(), "{n} nodes: {}", text(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains(&format!("bad input ok: {n} nodes, ")),
            "{}",
            text(&o)
        );
    }
}

/// Runs `c` in a process group of its own, killed with all of it (its
/// nodes and their instances too) and the test failed if it is not done
/// within `limit`.
fn bounded(c: &mut Command, limit: std::time::Duration) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let child = c
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(o) => o.unwrap(),
        Err(_) => {
            // SAFETY: kill(2) of the process group of the `dmi run` this
            // test started (its leader: `process_group(0)`).
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            panic!("not done within {limit:?}");
        }
    }
}

#[test]
fn init_after_finalize_is_refused_in_a_movable_run_too() {
    // The program's instance of a movable run: DMI_init after
    // DMI_finalize is refused there as in other runs (it once started
    // hosting a movable run again).
    let (prog, lib) = program();
    let mut c = Command::new(env!("CARGO_BIN_EXE_dmi"));
    c.args(["run", "-n", "1", "--movable", "--"])
        .arg(prog)
        .env("LD_LIBRARY_PATH", lib);
    let o = bounded(&mut c, std::time::Duration::from_secs(60));
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("bad input ok: 1 nodes, "), "{}", text(&o));
}

#[test]
fn init_without_an_environment_is_an_error() {
    let (prog, lib) = program();
    let o = Command::new(prog)
        .env("LD_LIBRARY_PATH", lib)
        .env_remove("DMI_RANK")
        .env_remove("SLURM_PROCID")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad_input: DMI_init: start-up: DMI_RANK is not set"),
        "{}",
        text(&o)
    );
}
