// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Runs of `examples/yield.c` on several nodes for the `xcreate` tests
//! (included by path: `xcreate.rs`, `xcreate_lost.rs`).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;

use super::common::{build_example, libdmi, Link};

pub fn program() -> PathBuf {
    static PROG: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PROG.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("dmi-xcreate-test-{}", std::process::id()));
        build_example(&libdmi(), "yield", &dir, "yield", &[], Link::Direct)
    })
    .clone()
}

/// `dmi run -n N yield ARGS` with `env` set (and no inherited DMI_MOVE_AT).
pub fn command(n: u32, args: &[&str], env: &[(&str, &str)]) -> Command {
    command_grace(n, 2, args, env)
}

/// [`command`] with `dmi run --grace GRACE` (how long the other nodes may
/// go on after one failed).
pub fn command_grace(n: u32, grace: u32, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dmi"));
    c.args([
        "run",
        "-n",
        &n.to_string(),
        "--grace",
        &grace.to_string(),
        "--",
    ])
    .arg(program())
    .args(args)
    .env_remove("DMI_ERRORS")
    .env_remove("DMI_MOVE_AT")
    .env_remove("DMI_TEST_ARRIVE_DELAY_MS")
    .env_remove("DMI_TEST_AT_DELAY")
    .env_remove("DMI_TEST_COMMIT_DELAY")
    .env_remove("DMI_TEST_READY_DELAY")
    .env_remove("DMI_TEST_READY_LATE")
    .env_remove("DMI_TEST_WORD_RACE")
    .env_remove("DMI_TEST_WORD_LIMIT_MS")
    .env_remove("DMI_TEST_MOVING_DELAY")
    .env_remove("DMI_TEST_SERVE_DELAY")
    .env_remove("DMI_TEST_AWAY_DELAY")
    .env_remove("DMI_TEST_RESUMED_KILL");
    for (k, v) in env {
        c.env(k, v);
    }
    // SAFETY: close_range is async-signal-safe; it drops the test harness's
    // descriptors (cargo's jobserver pipe), which would keep an instance
    // from being moved.
    unsafe {
        c.pre_exec(|| {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            Ok(())
        })
    };
    c
}

/// The node processes `dmi run` (pid `run`) started: rank -> pid.
pub fn nodes_of(run: u32) -> BTreeMap<u32, i32> {
    let mut m = BTreeMap::new();
    for t in std::fs::read_dir(format!("/proc/{run}/task"))
        .unwrap()
        .flatten()
    {
        let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        for pid in kids
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let rank = env
                .split(|&b| b == 0)
                .filter_map(|v| std::str::from_utf8(v).ok())
                .find_map(|v| v.strip_prefix("DMI_RANK="))
                .and_then(|r| r.parse().ok());
            if let Some(r) = rank {
                m.insert(r, pid);
            }
        }
    }
    m
}

/// `cmd` (a `dmi run`) started with its stdout discarded: the run and its
/// stderr's lines, sent by a thread of their own.
pub fn spawn_lines(mut cmd: Command) -> (Child, Receiver<String>) {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in err.lines() {
            if tx.send(l.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// Kills the node processes of the run `child` and the run itself, and
/// waits for it.
pub fn stop(child: &mut Child) {
    for (_, node) in nodes_of(child.id()) {
        // SAFETY: kill(2) of a node of the run this test started.
        unsafe { libc::kill(node, libc::SIGKILL) };
    }
    let _ = child.kill();
    let _ = child.wait();
}
