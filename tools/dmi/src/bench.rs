// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `dmi bench`: DMI_read/DMI_write latency and bandwidth per mode, against
//! memcpy and loopback TCP measured in the same run. Started by hand, it
//! measures the physical limits, then runs itself as the nodes of
//! `dmi run -n N` for each N of `--nodes` and collects node 0's results;
//! started as a node (by `dmi run` or `srun`), it runs `bench_dmi`.

use std::process::Command;
use std::sync::Arc;

use clap::Args;
use serde_json::{json, Value};

use crate::bench_dmi::{self, Opts};
use crate::bench_intra;
use crate::bench_phys::{self, Tcp};
use crate::bench_recv;
use crate::bench_stats::Sample;

/// Measure DMI reads and writes per mode against memcpy and loopback TCP.
///
/// Prints a table to stderr and the results as JSON to stdout (or to
/// --json FILE). Each operation is timed REPS times one by one; the table
/// gives the minimum and the median and the bandwidth of each. Build with
/// --release for meaningful numbers.
#[derive(Args)]
pub struct BenchArgs {
    /// Node counts to run (each at least 2).
    #[arg(long, value_delimiter = ',', default_value = "2,3")]
    nodes: Vec<u32>,
    /// Access sizes in bytes (one page each).
    #[arg(long, value_delimiter = ',', default_value = "8,4096,65536,1048576")]
    sizes: Vec<usize>,
    /// Repetitions of each operation.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(3..=100_000))]
    reps: u64,
    /// Accesses per group read/write.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1024))]
    group: u64,
    /// Write the JSON here instead of stdout.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Rounds of the intra-node part (each times REPS hits per path).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    rounds: u64,
    /// Skip the intra-node part (read hits from a node's program and an
    /// instance, through the node and from the frames).
    #[arg(long)]
    no_intra: bool,
    /// (As a node: run the intra-node part.)
    #[arg(long, hide = true)]
    intra: bool,
    /// Instead of the above: one receiver per node (DMI_RECEIVERS=single)
    /// against one per instance, K instances of one node making reads
    /// through the node, --runs times.
    #[arg(long)]
    receivers: bool,
    /// Instance counts K of --receivers.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    instances: Vec<usize>,
    /// Calls each instance times in --receivers.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    calls: u64,
    /// Runs of --receivers (each measures both models).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    runs: u64,
    /// (As a node: run the receivers part.)
    #[arg(long, hide = true)]
    recv_node: bool,
}

const LINE: &str = "dmi-bench-json ";

fn in_node() -> bool {
    std::env::var_os("DMI_RANK").is_some() || dmi::slurm::detected()
}

pub fn bench(a: BenchArgs) -> i32 {
    if a.sizes.iter().any(|&s| s == 0 || s > 1 << 30) {
        eprintln!("dmi bench: sizes must be 1 byte to 1 GiB");
        return 2;
    }
    if a.instances.iter().any(|&k| k == 0 || k > 64) {
        eprintln!("dmi bench: --instances must be 1 to 64 each");
        return 2;
    }
    if in_node() && a.recv_node {
        return recv_node(&a);
    }
    if in_node() {
        return node(&a);
    }
    let r = if a.receivers { receivers(&a) } else { lead(&a) };
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("dmi bench: {e}");
            1
        }
    }
}

/// One node of a run: node 0 prints its samples as one JSON line.
fn node(a: &BenchArgs) -> i32 {
    let d = match dmi::Dmi::from_env(Arc::new(dmi::rmw::RmwTable::default())) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("dmi bench: {e}");
            return 1;
        }
    };
    let r = if a.intra {
        let o = bench_intra::Opts {
            sizes: a.sizes.clone(),
            reps: a.reps as usize,
            rounds: a.rounds as usize,
        };
        bench_intra::run(&d, &o)
    } else {
        let o = Opts {
            sizes: a.sizes.clone(),
            reps: a.reps as usize,
            group: a.group as usize,
        };
        bench_dmi::run(&d, &o)
    };
    let rank = d.rank();
    let fin = d.finalize();
    match (r, fin) {
        (Ok(samples), Ok(())) => {
            if rank == 0 {
                let v: Vec<Value> = samples.iter().map(Sample::to_json).collect();
                println!("{LINE}{}", Value::Array(v));
            }
            0
        }
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("dmi bench: node {rank}: {e}");
            1
        }
    }
}

/// The node of `--receivers`.
fn recv_node(a: &BenchArgs) -> i32 {
    let r = dmi::Dmi::from_env(Arc::new(dmi::rmw::RmwTable::default())).and_then(|d| {
        bench_recv::node(&d, &a.instances, a.calls as usize)?;
        d.finalize()
    });
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("dmi bench: {e}");
            1
        }
    }
}

/// `--receivers`: only the receiver models, as JSON of their own.
fn receivers(a: &BenchArgs) -> Result<(), String> {
    let v = bench_recv::lead(&a.instances, a.calls as usize, a.runs as usize)?;
    let doc = json!({
        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
        "kernel": uname_r(),
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "receivers": v,
    });
    emit(a, &doc)
}

fn emit(a: &BenchArgs, doc: &Value) -> Result<(), String> {
    let text = serde_json::to_string_pretty(doc).map_err(|e| e.to_string())?;
    match &a.json {
        Some(p) => std::fs::write(p, text + "\n").map_err(|e| format!("{}: {e}", p.display())),
        None => {
            println!("{text}");
            Ok(())
        }
    }
}

fn physical(a: &BenchArgs) -> Result<Vec<Sample>, String> {
    let reps = a.reps as usize;
    let mut out: Vec<Sample> = a
        .sizes
        .iter()
        .map(|&s| bench_phys::memcpy(s, reps))
        .collect();
    let mut tcp = Tcp::start().map_err(|e| format!("loopback TCP: {e}"))?;
    for &s in &a.sizes {
        out.push(
            tcp.request(s, reps)
                .map_err(|e| format!("loopback TCP: {e}"))?,
        );
    }
    out.push(
        tcp.stream(64 << 20, reps.min(10))
            .map_err(|e| format!("loopback TCP: {e}"))?,
    );
    Ok(out)
}

/// The samples node 0 (and, with `intra`, its instance) printed.
fn dmi_nodes(a: &BenchArgs, n: u32, intra: bool) -> Result<Vec<Sample>, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let o = Command::new(&me)
        .args(["run", "-n", &n.to_string(), "--"])
        .arg(&me)
        .args([
            "bench",
            "--reps",
            &a.reps.to_string(),
            "--group",
            &a.group.to_string(),
            "--rounds",
            &a.rounds.to_string(),
        ])
        .args(intra.then_some("--intra"))
        .arg("--sizes")
        .arg(
            a.sizes
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(","),
        )
        .output()
        .map_err(|e| format!("starting dmi run: {e}"))?;
    let text = String::from_utf8_lossy(&o.stdout);
    if !o.status.success() {
        return Err(format!(
            "dmi run -n {n} failed ({}):\n{}{}",
            o.status,
            text,
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    let mut prefixes = vec![LINE];
    if intra {
        prefixes.push(bench_intra::LINE);
    }
    let mut out = Vec::new();
    for prefix in prefixes {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .ok_or_else(|| format!("{n} nodes: no results after {prefix:?}"))?;
        let v: Value = serde_json::from_str(line).map_err(|e| format!("{n} nodes: {e}"))?;
        for s in v.as_array().ok_or("results are not a list")? {
            out.push(
                Sample::from_json(s).ok_or_else(|| format!("{n} nodes: malformed sample {s}"))?,
            );
        }
    }
    Ok(out)
}

fn uname_r() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn lead(a: &BenchArgs) -> Result<(), String> {
    if a.nodes.iter().any(|&n| n < 2) {
        return Err("--nodes: each count must be at least 2".into());
    }
    let phys = physical(a)?;
    let tcp_at = |size: usize| {
        phys.iter()
            .find(|s| s.op == "tcp request-response" && s.size == size)
            .map(|s| s.median)
    };
    let mut runs = Vec::new();
    eprintln!("{}  x tcp", Sample::header());
    for s in &phys {
        eprintln!("{}", s.row());
    }
    for &n in &a.nodes {
        let samples = dmi_nodes(a, n, false)?;
        eprintln!("-- {n} nodes (loopback TCP)");
        for s in &samples {
            let ratio = tcp_at(s.size)
                .filter(|t| !t.is_zero())
                .map(|t| format!("{:>6.1}", s.median.as_secs_f64() / t.as_secs_f64()))
                .unwrap_or_default();
            eprintln!("{} {ratio}", s.row());
        }
        runs.push(json!({
            "nodes": n,
            "samples": samples.iter().map(Sample::to_json).collect::<Vec<_>>(),
        }));
    }
    let intra = if a.no_intra {
        Value::Null
    } else {
        let samples = dmi_nodes(a, 2, true)?;
        eprintln!(
            "-- intra-node: read and write hits on node 0 of 2, through the node and from the frames"
        );
        for s in &samples {
            eprintln!("{}", s.row());
        }
        json!({
            "rounds": a.rounds,
            "frames": "node 0's frames in its half-process set's shared range",
            "samples": samples.iter().map(Sample::to_json).collect::<Vec<_>>(),
        })
    };
    let doc = json!({
        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
        "kernel": uname_r(),
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "reps": a.reps,
        "group": a.group,
        "transport": "loopback TCP, one connection per node pair",
        "intra_node": intra,
        "physical": phys.iter().map(Sample::to_json).collect::<Vec<_>>(),
        "dmi": runs,
    });
    emit(a, &doc)
}
