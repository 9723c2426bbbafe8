// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `dmi bench` end to end on 2 and 3 loopback nodes: the JSON has every
//! mode at every size with min <= median, the physical limits beside them,
//! and the numbers mean what they say where they differ by orders of
//! magnitude (a cached read is cheaper than the miss that fetched it; a hit
//! read from the node's frames is cheaper than one through the node).

use std::process::Command;

use serde_json::Value;

fn find<'a>(samples: &'a [Value], op: &str, mode: &str, size: u64) -> &'a Value {
    samples
        .iter()
        .find(|s| {
            s["op"].as_str().unwrap().starts_with(op) && s["mode"] == mode && s["size"] == size
        })
        .unwrap_or_else(|| panic!("no {op} {mode} {size} in {samples:?}"))
}

/// Runs `dmi bench ARGS --json FILE` as one process (no rank or receiver
/// model inherited from the test's environment); returns the JSON and what
/// the command printed on stderr.
fn bench_json(name: &str, args: &[&str]) -> (Value, String) {
    let json = std::env::temp_dir().join(format!("{name}-{}.json", std::process::id()));
    let o = Command::new(env!("CARGO_BIN_EXE_dmi"))
        .arg("bench")
        .args(args)
        .arg("--json")
        .arg(&json)
        .env_remove("DMI_RANK")
        .env_remove("SLURM_PROCID")
        .env_remove("DMI_RECEIVERS")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    (doc, err)
}

#[test]
fn bench_reports_every_mode_against_memcpy_and_tcp() {
    let (doc, err) = bench_json(
        "dmi-bench",
        &["--reps", "7", "--sizes", "8,4096", "--nodes", "2,3"],
    );
    let phys = doc["physical"].as_array().unwrap();
    for size in [8, 4096] {
        find(phys, "memcpy", "", size);
        find(phys, "tcp request-response", "", size);
    }
    let runs = doc["dmi"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for run in runs {
        let n = run["nodes"].as_u64().unwrap();
        let s = run["samples"].as_array().unwrap();
        for v in s {
            assert_eq!(v["reps"], 7, "{v}");
            assert!(v["min_us"].as_f64().unwrap() > 0.0, "{v}");
            assert!(v["min_us"].as_f64() <= v["median_us"].as_f64(), "{v}");
        }
        for size in [8, 4096] {
            for (op, mode) in [
                ("read (remote owner)", "GET"),
                ("write (remote owner", "PUT"),
                ("read miss", "INVALIDATE"),
                ("read miss", "UPDATE"),
                ("write miss", "EXCLUSIVE"),
                ("group read", "GET"),
                ("group write", "PUT"),
            ] {
                find(
                    s,
                    op,
                    mode,
                    if op.starts_with("group") {
                        size * 16
                    } else {
                        size
                    },
                );
            }
            let min = |op, mode| find(s, op, mode, size)["min_us"].as_f64().unwrap();
            for mode in ["INVALIDATE", "UPDATE"] {
                assert!(
                    min("read hit", mode) < min("read miss", mode),
                    "{n} nodes, {mode}: {err}"
                );
            }
            assert!(
                min("write hit", "EXCLUSIVE") < min("write miss", "EXCLUSIVE"),
                "{err}"
            );
            // A write that must update or invalidate a third node's copy
            // costs one more round trip than a plain one: a benchmark
            // claim (docs/dmi.md), not asserted here. Two network round
            // trips of the same order were compared by their minima, and
            // under load (another build on the 2 cores) the order flipped
            // (1 in 8 runs). That the copies are updated or invalidated is
            // checked by the coherence tests; here, that both rows exist.
            if n == 3 {
                for copy in ["UPDATE", "INVALIDATE"] {
                    let op = format!("write, a 3rd node has an {copy} copy");
                    let t = find(s, &op, "PUT", size)["min_us"].as_f64().unwrap();
                    assert!(t > 0.0, "{err}");
                }
            }
        }
    }
    // The intra-node part: hits from node 0's program and its instance,
    // through the node and from the frames, for every hit kind and size;
    // the frames beat the round trip through the node (engine, and for the
    // instance its mailbox and receiver) by far.
    let intra = doc["intra_node"]["samples"].as_array().unwrap();
    // sizes x callers x (3 read kinds + 2 write modes) x 2 paths
    assert_eq!(intra.len(), 2 * 2 * 5 * 2, "{intra:?}");
    for v in intra {
        assert_eq!(v["reps"], 7 * 5, "{v}");
    }
    for size in [8, 4096] {
        for who in ["node's program", "instance"] {
            for (what, mode) in [
                ("owned page", "GET"),
                ("cached copy", "INVALIDATE"),
                ("cached copy", "UPDATE"),
            ] {
                let op = |path: &str| format!("hit, {who}, {what}, {path}");
                let med = |path: &str| {
                    find(intra, &op(path), mode, size)["median_us"]
                        .as_f64()
                        .unwrap()
                };
                let (slow, fast) = (med("through the node"), med("from the frames"));
                assert!(
                    fast < slow,
                    "{who} {what} {mode} {size}: {fast} >= {slow} us"
                );
            }
            // Write hits of the owned page (nobody else holds it): straight
            // into the frame beats the engine's path (the bench itself
            // fails if a fast write was not taken).
            for mode in ["EXCLUSIVE", "PUT"] {
                let op = |path: &str| format!("write hit, {who}, owned page, {path}");
                let med = |path: &str| {
                    find(intra, &op(path), mode, size)["median_us"]
                        .as_f64()
                        .unwrap()
                };
                let (slow, fast) = (med("through the node"), med("into the frames"));
                assert!(
                    fast < slow,
                    "{who} write {mode} {size}: {fast} >= {slow} us"
                );
            }
        }
    }
}

/// `dmi bench --receivers`: both models at each K, every call of every
/// instance timed, and the node had K receiver threads per instance or one.
#[test]
fn bench_compares_one_receiver_with_one_per_instance() {
    let (doc, err) = bench_json(
        "dmi-bench-recv",
        &[
            "--receivers",
            "--calls",
            "40",
            "--runs",
            "2",
            "--instances",
            "1,3",
        ],
    );
    let r = &doc["receivers"];
    assert_eq!(r["loadavg"].as_array().unwrap().len(), 3, "{r}");
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), 2 * 2 * 2, "{r}");
    for run in 0..2 {
        for model in ["per-instance", "single"] {
            for k in [1u64, 3] {
                let v = results
                    .iter()
                    .find(|v| v["run"] == run && v["model"] == model && v["instances"] == k)
                    .unwrap_or_else(|| panic!("no run {run} {model} K={k}: {r}"));
                assert_eq!(v["calls"].as_u64(), Some(40 * k), "{v}");
                let threads = if model == "single" { 1 } else { k };
                assert_eq!(v["receiver_threads"].as_u64(), Some(threads), "{v}");
                assert!(v["calls_per_s"].as_f64().unwrap() > 0.0, "{v}");
                let (min, med) = (
                    v["min_us"].as_f64().unwrap(),
                    v["median_us"].as_f64().unwrap(),
                );
                assert!(0.0 < min && min <= med, "{v}");
            }
        }
    }
    assert_eq!(r["summary"].as_array().unwrap().len(), 4, "{r}");
    assert!(err.contains("single"), "{err}");
}
