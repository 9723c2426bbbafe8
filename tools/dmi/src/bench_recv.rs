// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `dmi bench --receivers`: one receiver per node (the paper's model,
//! `DMI_RECEIVERS=single`) against a receiver per instance (the default),
//! side by side in one run (`docs/dmi.md`, "One receiver against one per
//! instance"). For each run and each model, `dmi run -n 1` starts a node
//! that, for each K of `--instances`, creates K instances; after a barrier
//! each makes CALLS reads of 8 bytes of its own page with the fast path
//! off, so every call goes through its mailbox, the receiver and the
//! engine, each timed; then it stores its times in a page of its own, which
//! the node reads after `DMI_join`. The node also counts its receiver
//! threads (the most seen in 20 ms) while the K instances wait at the
//! barrier: K, or 1. Throughput is all K x CALLS calls over
//! the span from the first instance's start to the last one's end.

use std::process::Command;

use dmi::{Dmi, DmiError, ReadMode, WriteMode};
use serde_json::{json, Value};

/// What the node prints a K's result after.
const LINE: &str = "dmi-bench-recv-json ";

/// The models, in the order each run measures them.
const MODELS: [&str; 2] = ["per-instance", "single"];

/// Untimed calls each instance makes first.
const WARM: usize = 20;

fn now_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Instance `i`: times `calls` reads through the node and stores
/// [start, end, time of each call] (ns) at `res`.
fn instance(d: &Dmi, data: i64, res: i64, calls: usize) -> Result<(), DmiError> {
    dmi::pool::set_fast_reads(false);
    let mut b = [0u8; 8];
    for _ in 0..WARM {
        d.read(data, &mut b, ReadMode::Get)?;
    }
    d.barrier()?;
    let mut out = vec![0u64; calls + 2];
    out[0] = now_ns();
    for t in &mut out[2..] {
        let t0 = now_ns();
        d.read(data, &mut b, ReadMode::Get)?;
        *t = now_ns() - t0;
    }
    out[1] = now_ns();
    let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
    d.write(res, &bytes, WriteMode::Put)
}

/// The node (of 1): measures every K of `ks`, prints one line per K.
pub fn node(d: &Dmi, ks: &[usize], calls: usize) -> Result<(), DmiError> {
    if d.size() != 1 {
        return Err(DmiError::BadArgument(
            "the receivers bench runs on 1 node".into(),
        ));
    }
    let model = std::env::var("DMI_RECEIVERS").unwrap_or_else(|_| "per-instance".into());
    let words = calls + 2;
    let page = (words * 8).next_power_of_two().max(4096);
    for &k in ks {
        let data = d.mmap(4096, k as i64)?;
        let res = d.mmap(page as i64, k as i64)?;
        let body = move |dmi: &Dmi, i: i64| match instance(
            dmi,
            data + i * 4096,
            res + i * page as i64,
            calls,
        ) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("dmi bench: instance {i}: {e}");
                1
            }
        };
        let ids = (0..k as i64)
            .map(|i| dmi::serve::create(dmi::serve::NodeRef::of(d)?, true, body, i))
            .collect::<Result<Vec<_>, _>>()?;
        // The K instances warm up and wait at the barrier (it opens at the
        // first join): the most receiver threads seen in 20 ms (a thread
        // names itself once it runs).
        let mut receivers = 0;
        for _ in 0..20 {
            receivers = receivers.max(receiver_threads());
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        for id in ids {
            match dmi::serve::join(id)? {
                dmi::serve::Ended::Returned(0) => {}
                how => return Err(DmiError::Setup(format!("instance {id}: {how:?}"))),
            }
        }
        let (mut first, mut last, mut times) = (u64::MAX, 0u64, Vec::new());
        for i in 0..k {
            let mut b = vec![0u8; words * 8];
            d.read(res + (i * page) as i64, &mut b, ReadMode::Get)?;
            let w: Vec<u64> = b
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            first = first.min(w[0]);
            last = last.max(w[1]);
            times.extend_from_slice(&w[2..]);
        }
        times.sort_unstable();
        let secs = (last - first) as f64 / 1e9;
        let v = json!({
            "model": model,
            "instances": k,
            "receiver_threads": receivers,
            "calls": times.len(),
            "seconds": secs,
            "calls_per_s": times.len() as f64 / secs,
            "min_us": times[0] as f64 / 1e3,
            "median_us": times[times.len() / 2] as f64 / 1e3,
            "p99_us": times[times.len() * 99 / 100] as f64 / 1e3,
            "max_us": times[times.len() - 1] as f64 / 1e3,
        });
        println!("{LINE}{v}");
    }
    Ok(())
}

/// This node's receiver threads (`dmi-inst-ID` per instance, or `dmi-recv`).
fn receiver_threads() -> usize {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    dir.flatten()
        .filter(|t| {
            let c = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            c.starts_with("dmi-inst-") || c.trim_end() == "dmi-recv"
        })
        .count()
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the comparison `runs` times (each run both models, one after the
/// other) and returns its JSON; the table goes to stderr.
pub fn lead(ks: &[usize], calls: usize, runs: usize) -> Result<Value, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let list = ks
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut load = vec![loadavg()];
    let mut all: Vec<Value> = Vec::new();
    for run in 0..runs {
        for model in MODELS {
            let o = Command::new(&me)
                .args(["run", "-n", "1", "--"])
                .arg(&me)
                .args(["bench", "--recv-node", "--instances", &list])
                .args(["--calls", &calls.to_string()])
                .env("DMI_RECEIVERS", model)
                .output()
                .map_err(|e| format!("starting dmi run: {e}"))?;
            let text = String::from_utf8_lossy(&o.stdout);
            if !o.status.success() {
                return Err(format!(
                    "{model}: dmi run -n 1 failed ({}):\n{text}{}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr)
                ));
            }
            let got: Vec<Value> = text
                .lines()
                .filter_map(|l| l.strip_prefix(LINE))
                .map(serde_json::from_str)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("{model}: {e}"))?;
            if got.len() != ks.len() || got.iter().any(|v| v["model"] != model) {
                return Err(format!("{model}: expected {} results: {text}", ks.len()));
            }
            for mut v in got {
                v["run"] = json!(run);
                all.push(v);
            }
        }
        load.push(loadavg());
    }
    eprintln!("-- receivers: {calls} reads of 8 B through the node per instance, {runs} runs");
    eprintln!(
        "{:<13} {:>3} {:>12} {:>23} {:>10} {:>8}",
        "model", "K", "calls/s", "(runs: min-max)", "median us", "min us"
    );
    let mut summary = Vec::new();
    for &k in ks {
        for model in MODELS {
            let of: Vec<&Value> = all
                .iter()
                .filter(|v| v["model"] == model && v["instances"] == k)
                .collect();
            let f = |key: &str| -> Vec<f64> { of.iter().filter_map(|v| v[key].as_f64()).collect() };
            let rate = f("calls_per_s");
            let (lo, hi) = rate
                .iter()
                .fold((f64::MAX, 0f64), |(l, h), &x| (l.min(x), h.max(x)));
            let med = median(f("median_us"));
            let min = f("min_us").into_iter().fold(f64::MAX, f64::min);
            let rate_med = median(rate);
            eprintln!(
                "{model:<13} {k:>3} {rate_med:>12.0} {:>23} {med:>10.1} {min:>8.1}",
                format!("({lo:.0}-{hi:.0})")
            );
            summary.push(json!({
                "model": model, "instances": k,
                "calls_per_s_median": rate_med, "calls_per_s_min": lo, "calls_per_s_max": hi,
                "median_us_median": med, "min_us": min,
            }));
        }
    }
    eprintln!("load average (1, 5, 15 min) before and after each run: {load:?}");
    Ok(json!({
        "calls_per_instance": calls,
        "runs": runs,
        "call": "DMI_read of 8 bytes, GET, own page, fast reads off (mailbox, receiver, engine)",
        "reply": std::env::var("DMI_REPLY").unwrap_or_else(|_| "default".into()),
        "loadavg": load,
        "summary": summary,
        "results": all,
    }))
}
