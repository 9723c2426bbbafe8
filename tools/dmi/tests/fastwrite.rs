// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Fast writes (`runtime/dmi/src/pool_write.rs`) over real processes: the
//! node's program and a compute instance per node write pages their node
//! owns straight into the frames while the other nodes read those pages
//! in every mode (a remote GET or Fetch takes the grant back while a fast
//! write may be under way), and every history must stay sequentially
//! consistent (`dmi check`). The write counters must show that fast writes
//! were taken, from the programs and from the instances; with
//! `DMI_FAST_WRITES=0` none is.

use std::path::PathBuf;
use std::process::{Command, Output};

mod common;
use common::text;

fn dmi() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dmi"))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dmi-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `dmi stress --skew` on 3 nodes with one instance each; checks the
/// histories and returns (fast writes of the programs, of the instances).
fn skewed_run(seed: &str, pages: &str, env: &[(&str, &str)]) -> (u64, u64) {
    let dir = tmp(&format!("fastwrite-{seed}-{pages}"));
    let mut c = dmi();
    c.args(["run", "-n", "3", "--"])
        .arg(env!("CARGO_BIN_EXE_dmi"))
        .args(["stress", "--ops", "80", "--skew", "--instances", "1"])
        .args(["--pages", pages, "--seed", seed, "--dir"])
        .arg(&dir)
        .envs(env.iter().copied());
    let o: Output = c.output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let fast = |inst: bool| -> u64 {
        out.lines()
            .filter(|l| l.contains(" events recorded") && l.contains(" instance ") == inst)
            .map(|l| {
                // "node R[ instance K]: N events recorded, H reads from the
                // frames, M through the ..., W writes to the frames, ..."
                let w = l.split(", ").nth(3).expect("write counts");
                assert!(w.ends_with("writes to the frames"), "{l}");
                w.split(' ').next().unwrap().parse::<u64>().unwrap()
            })
            .sum()
    };
    assert_eq!(
        out.lines()
            .filter(|l| l.contains(" events recorded"))
            .count(),
        6,
        "{}",
        text(&o)
    );
    let counts = (fast(false), fast(true));
    let c = dmi().arg("check").arg(&dir).output().unwrap();
    assert!(
        c.status.success(),
        "seed {seed}: {}\n{}",
        text(&c),
        text(&o)
    );
    assert!(
        String::from_utf8_lossy(&c.stdout).contains(&format!(
            "on {pages} pages from 6 nodes: sequentially consistent"
        )),
        "{}",
        text(&c)
    );
    let _ = std::fs::remove_dir_all(&dir);
    counts
}

#[test]
fn fast_writes_racing_remote_reads_stay_sequentially_consistent() {
    let (mut prog, mut inst) = (0, 0);
    for (seed, pages) in [("1", "3"), ("2", "3"), ("3", "4")] {
        let (p, i) = skewed_run(seed, pages, &[]);
        prog += p;
        inst += i;
    }
    eprintln!("fast writes: {prog} from the nodes' programs, {inst} from instances");
    assert!(prog > 0, "no fast write from a node's program");
    assert!(inst > 0, "no fast write from an instance");
}

#[test]
fn no_fast_writes_when_switched_off() {
    let (p, i) = skewed_run("5", "3", &[("DMI_FAST_WRITES", "0")]);
    assert_eq!(
        (p, i),
        (0, 0),
        "DMI_FAST_WRITES=0 still wrote to the frames"
    );
}
