// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Compute instances (`DMI_create`/`DMI_join`, `examples/instances.c`)
//! over real node processes: every instance writes its slice, meets the
//! others at a barrier and reads everything back; the checksum must be the
//! expected one on 1 node x 3 instances, 2 x 2 and 3 x 3, with
//! either reply path; instances are single-threaded processes; a killed
//! instance is reported by its node and ends the run (no hang). Every test
//! runs under both receiver models (`DMI_RECEIVERS=per-instance|single`).

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;
use common::{build_example, libdmi, text, Link};

const SLICE: u64 = 512;

/// Builds libdmi, writes `dmi.pc` for it and compiles `instances.c` with
/// `pkg-config --cflags --libs dmi` (once for all tests).
fn program() -> PathBuf {
    static PROG: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PROG.get_or_init(build).clone()
}

fn build() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dmi-inst-test-{}", std::process::id()));
    build_example(
        &libdmi(),
        "instances",
        &dir,
        "instances",
        &[],
        Link::PkgConfig,
    )
}

/// `dmi run -n N instances ARGS` with `env`, bounded by 60 s.
fn run(n: u32, args: &[&str], env: &[(&str, &str)]) -> (Output, Duration) {
    let prog = program();
    let mut c = Command::new(env!("CARGO_BIN_EXE_dmi"));
    c.args(["run", "-n", &n.to_string(), "--grace", "2", "--"])
        .arg(&prog)
        .args(args)
        .env_remove("DMI_ERRORS")
        .env_remove("DMI_REPLY")
        .env_remove("DMI_RECEIVERS");
    for (k, v) in env {
        c.env(k, v);
    }
    let t = Instant::now();
    let o = c.output().unwrap();
    (o, t.elapsed())
}

/// The checksum `instances.c` prints for `total` instances.
fn expected(total: u64) -> u64 {
    let mut sum = 0u64;
    for k in 0..total * SLICE {
        let v = (k / SLICE) * 1000003 + (k % SLICE) * 7 + 1;
        sum = sum.wrapping_mul(31).wrapping_add(v);
    }
    sum
}

fn checksum(o: &Output) -> u64 {
    let s = String::from_utf8_lossy(&o.stdout);
    s.lines()
        .find_map(|l| l.strip_prefix("checksum "))
        .unwrap_or_else(|| panic!("no checksum: {}", text(o)))
        .parse()
        .unwrap()
}

/// The receiver models (`DMI_RECEIVERS`) every test runs under.
const MODELS: [&str; 2] = ["per-instance", "single"];

/// `computes_with` once per receiver model.
fn computes_in_both(nodes: u32, per_node: u32, extra: &[&str], env: &[(&str, &str)]) {
    for m in MODELS {
        let env: Vec<(&str, &str)> = env.iter().copied().chain([("DMI_RECEIVERS", m)]).collect();
        computes_with(nodes, per_node, extra, &env);
    }
}

fn computes_with(nodes: u32, per_node: u32, extra: &[&str], env: &[(&str, &str)]) {
    let n = per_node.to_string();
    let args: Vec<&str> = [n.as_str()]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    let (o, _) = run(nodes, &args, env);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        checksum(&o),
        expected((nodes * per_node) as u64),
        "{}",
        text(&o)
    );
    // The node has its engine thread; the instances checked they have none
    // (they return 2 otherwise, which fails DMI_join and the run).
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("node threads 2"),
        "{}",
        text(&o)
    );
}

#[test]
fn one_node_three_instances_compute_the_checksum() {
    computes_in_both(1, 3, &[], &[]);
}

#[test]
fn two_nodes_two_instances_each_compute_the_checksum() {
    computes_in_both(2, 2, &[], &[]);
}

/// The first instances reach the first barrier before the others exist:
/// the barrier must still wait for them (it completes only once the node's
/// program stopped creating, here in `DMI_join`).
#[test]
fn instances_created_50_ms_apart_still_meet_at_the_barrier() {
    computes_in_both(2, 3, &["slow"], &[]);
}

#[test]
fn three_nodes_three_instances_each_compute_the_checksum() {
    computes_in_both(3, 3, &[], &[]);
}

#[test]
fn replies_by_dmwrite_give_the_same_checksum() {
    computes_in_both(2, 2, &[], &[("DMI_REPLY", "dmwrite")]);
    let (o, _) = run(1, &["1"], &[("DMI_REPLY", "bogus")]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("DMI_REPLY=\"bogus\" is not valid"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_bad_receiver_model_is_named() {
    let (o, _) = run(1, &["1"], &[("DMI_RECEIVERS", "two")]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("DMI_RECEIVERS=\"two\" is not valid (use per-instance or single)"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_killed_instance_ends_the_run_with_its_name() {
    for (nodes, model) in [1, 2].into_iter().flat_map(|n| MODELS.map(|m| (n, m))) {
        // Global instance 1 is on node 0 with 1 node, node 0 too with 2.
        let (o, took) = run(nodes, &["3", "crash", "1"], &[("DMI_RECEIVERS", model)]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{}", text(&o));
        assert!(
            err.contains("dmi: node 0: instance 1 (pid ") && err.contains("was killed by signal 9"),
            "{}",
            text(&o)
        );
        assert!(err.contains("node 0 (pid "), "{}", text(&o));
        assert!(took < Duration::from_secs(10), "took {took:?}");
        if nodes == 2 {
            assert!(err.contains("dmi: node 1: node 0 "), "{}", text(&o));
        }
    }
}

#[test]
fn a_killed_instance_fails_the_barrier_and_join_when_errors_return() {
    for model in MODELS {
        killed_with_errors_returned(model);
    }
}

/// With `DMI_ERRORS=return` the node of a killed instance goes on, so
/// its barriers cannot complete; every other node's barrier then fails at
/// once, naming the instance (`Msg::BarrierPoison`), instead of waiting
/// for that node: here node 1 lingers 30 s after its `DMI_join` failed,
/// and node 0's instances used to wait in their barrier until it exited.
#[test]
fn a_killed_instance_fails_the_other_nodes_barriers_when_errors_return() {
    let env = [("DMI_ERRORS", "return")];
    let (o, took) = run(2, &["3", "crash", "4", "linger"], &env);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{}", text(&o));
    for want in [
        "dmi: node 1: instance 1 (pid ",
        "instance 0: barrier: node 1: instance 1 (pid ",
        "instance 2: barrier: node 1: instance 1 (pid ",
        "node 0: DMI_join: instance 0 returned 4",
    ] {
        assert!(err.contains(want), "missing {want:?}: {}", text(&o));
    }
    assert!(
        took < Duration::from_secs(15),
        "took {took:?}: {}",
        text(&o)
    );
}

fn killed_with_errors_returned(model: &str) {
    let env = [("DMI_ERRORS", "return"), ("DMI_RECEIVERS", model)];
    let (o, took) = run(1, &["3", "crash", "1"], &env);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{}", text(&o));
    for want in [
        "instance 0: barrier: instance 1 (pid ",
        "instance 2: barrier: instance 1 (pid ",
        "DMI_join: instance 1 was killed by signal 9",
        "DMI_join: instance 0 returned 4",
    ] {
        assert!(err.contains(want), "missing {want:?}: {}", text(&o));
    }
    assert!(took < Duration::from_secs(10), "took {took:?}");
}
