// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! What `bench copy` found: the data model, the terminal table, the
//! headline ratios next to the paper's, and the JSON for machines.

use crate::opts::Placement;
use crate::reference::Reference;
use crate::stats::{fmt_ns, fmt_size, Stats};
use crate::strategy::Strategy;
use halfproc::BackendKind;
use serde_json::{json, Value};
use std::fmt::Write as _;

/// How one strategy fared in one placement.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Timings per size (aligned with [`CopyReport::sizes`]).
    Measured(Vec<Stats>),
    /// Cannot run here; the reason says why (e.g. no kernel backend).
    Unavailable(String),
    /// Ran and broke (wrong checksum, failed call): a bug, not a result.
    Failed(String),
}

/// One strategy's line.
#[derive(Clone, Debug)]
pub struct Series {
    /// Which strategy.
    pub strategy: Strategy,
    /// Its result.
    pub outcome: Outcome,
}

/// All strategies in one placement.
#[derive(Clone, Debug)]
pub struct PlacementReport {
    /// Same or different cores.
    pub placement: Placement,
    /// Writer CPU, reader CPU.
    pub cpus: (usize, usize),
    /// Why the placement was not measured (e.g. one CPU only).
    pub skipped: Option<String>,
    /// Per strategy, in the requested order.
    pub series: Vec<Series>,
}

impl PlacementReport {
    /// The stats of `st` at size index `i`, if measured.
    pub fn stats(&self, st: Strategy, i: usize) -> Option<&Stats> {
        self.series
            .iter()
            .find(|s| s.strategy == st)
            .and_then(|s| match &s.outcome {
                Outcome::Measured(v) => v.get(i),
                _ => None,
            })
    }
}

/// The machine the run was on.
#[derive(Clone, Debug, Default)]
pub struct Machine {
    /// User's label (`host`, `guest`).
    pub label: String,
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// `uname -r`.
    pub kernel: String,
    /// CPUs the process may use.
    pub cpus: usize,
}

impl Machine {
    /// Read what the system tells about itself.
    pub fn detect(label: &str) -> Machine {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_default();
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let cpus = crate::os::allowed_cpus().map(|c| c.len()).unwrap_or(0);
        Machine {
            label: label.to_string(),
            cpu_model,
            kernel,
            cpus,
        }
    }

    /// The first line of a text report: `halfproc bench <bench> [label] —
    /// backend <b>, <cpu> (<n> CPUs), kernel <k>`.
    pub fn headline(&self, bench: &str, backend: BackendKind) -> String {
        format!(
            "halfproc bench {}{} — backend {}, {} ({} CPUs), kernel {}",
            bench,
            if self.label.is_empty() {
                String::new()
            } else {
                format!(" [{}]", self.label)
            },
            backend.name(),
            self.cpu_model,
            self.cpus,
            self.kernel
        )
    }

    /// The `"machine"` object of the JSON reports.
    pub fn json(&self) -> Value {
        json!({
            "label": self.label,
            "cpu_model": self.cpu_model,
            "kernel": self.kernel,
            "cpus": self.cpus,
        })
    }
}

/// The result of `bench copy`.
#[derive(Clone, Debug)]
pub struct CopyReport {
    /// Backend used.
    pub backend: BackendKind,
    /// Where it ran.
    pub machine: Machine,
    /// Sizes in bytes, ascending.
    pub sizes: Vec<usize>,
    /// Timed repetitions per cell.
    pub reps: usize,
    /// Warm-up repetitions per size and round.
    pub warmup: usize,
    /// Rounds the repetitions were spread over.
    pub rounds: usize,
    /// Chunk of the pipelined strategies.
    pub chunk: usize,
    /// Single-process, single-core reference of the same run.
    pub reference: Reference,
    /// Per placement.
    pub placements: Vec<PlacementReport>,
    /// Files written (JSON, table, plots).
    pub files: Vec<std::path::PathBuf>,
}

/// One comparison at the largest size: `faster` against `slower`.
#[derive(Clone, Debug)]
pub struct Ratio {
    /// What the line claims.
    pub label: &'static str,
    /// The strategy expected to be faster.
    pub a: Strategy,
    /// The one it is compared with.
    pub b: Strategy,
    /// `t(b) / t(a)` from the minima (> 1: `a` is faster).
    pub min: f64,
    /// `t(b) / t(a)` from the medians.
    pub median: f64,
    /// The paper's (or the issue's) number for the same comparison.
    pub reference: &'static str,
}

/// The comparisons the issue and the paper make, at the largest size.
pub const COMPARISONS: &[(&str, Strategy, Strategy, &str, &str)] = &[
    (
        "dmread vs doublecopy",
        Strategy::Dmread,
        Strategy::DoubleCopy,
        "paper: 1.22x (same CPU)",
        "paper: 1.26x (different CPUs)",
    ),
    (
        "half-process vs socket",
        Strategy::Shared,
        Strategy::Tcp,
        "paper: 1.17-1.96x",
        "paper: 1.17-1.96x",
    ),
    (
        "half-process vs pipe",
        Strategy::Shared,
        Strategy::Pipe,
        "paper: 1.17-1.96x",
        "paper: 1.17-1.96x",
    ),
    (
        "half-process vs inter-process",
        Strategy::Shared,
        Strategy::PosixShm,
        "paper: ~1.0x (equal)",
        "paper: ~1.0x (equal)",
    ),
    (
        "cma vs doublecopy",
        Strategy::Cma,
        Strategy::DoubleCopy,
        "",
        "issue: ~1.3x",
    ),
    (
        "pipelined doublecopy vs cma",
        Strategy::DoubleCopyPipelined,
        Strategy::Cma,
        "",
        "issue: ~1.4x",
    ),
    (
        "cma push-pipelined vs cma",
        Strategy::CmaPushPipelined,
        Strategy::Cma,
        "",
        "",
    ),
    (
        "cma push-pipelined vs pipelined doublecopy",
        Strategy::CmaPushPipelined,
        Strategy::DoubleCopyPipelined,
        "",
        "",
    ),
    (
        "cma pull-pipelined vs cma",
        Strategy::CmaPullPipelined,
        Strategy::Cma,
        "",
        "",
    ),
    (
        "dmwrite-pipelined vs dmread",
        Strategy::DmwritePipelined,
        Strategy::Dmread,
        "",
        "",
    ),
    (
        "dmwrite-pipelined vs pipelined doublecopy",
        Strategy::DmwritePipelined,
        Strategy::DoubleCopyPipelined,
        "",
        "",
    ),
    (
        "dmread-pipelined vs dmread",
        Strategy::DmreadPipelined,
        Strategy::Dmread,
        "",
        "",
    ),
    ("dmread vs cma", Strategy::Dmread, Strategy::Cma, "", ""),
    (
        "cma push-pull vs cma",
        Strategy::CmaPushPull,
        Strategy::Cma,
        "",
        "",
    ),
    (
        "cma push-pull vs pipelined doublecopy",
        Strategy::CmaPushPull,
        Strategy::DoubleCopyPipelined,
        "",
        "",
    ),
    (
        "dm push-pull vs dmread",
        Strategy::DmPushPull,
        Strategy::Dmread,
        "",
        "",
    ),
    (
        "dm push-pull vs pipelined doublecopy",
        Strategy::DmPushPull,
        Strategy::DoubleCopyPipelined,
        "",
        "",
    ),
];

impl CopyReport {
    /// The headline ratios of one placement at the largest size (only the
    /// comparisons whose two strategies were both measured).
    pub fn ratios(&self, p: &PlacementReport) -> Vec<Ratio> {
        let i = self.sizes.len() - 1;
        COMPARISONS
            .iter()
            .filter_map(|&(label, a, b, same, diff)| {
                let (sa, sb) = (p.stats(a, i)?, p.stats(b, i)?);
                Some(Ratio {
                    label,
                    a,
                    b,
                    min: sb.min() as f64 / sa.min() as f64,
                    median: sb.median() / sa.median(),
                    reference: if p.placement == Placement::Same {
                        same
                    } else {
                        diff
                    },
                })
            })
            .collect()
    }

    /// The report as text: header, one table per placement (median time,
    /// every size), unavailable strategies with reasons, headline ratios.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "{}", self.machine.headline("copy", self.backend));
        let _ = writeln!(
            t,
            "protocol: p writes d; timer; p' obtains d and checksums it; timer. {} timed reps (+{} warm-up per round, {} rounds), chunk {}; checksums verified",
            self.reps,
            self.warmup,
            self.rounds,
            fmt_size(self.chunk)
        );
        if let (Some(bw), Some(bw_med)) = (
            self.reference.memcpy_bytes_per_s(),
            self.reference.memcpy_bytes_per_s_median(),
        ) {
            let size = self.sizes[self.sizes.len() - 1];
            let _ = writeln!(
                t,
                "reference: single-core memcpy {:.2} GB/s (fastest rep), {:.2} GB/s (median) at {} (cpu {}, same run)",
                bw / 1e9,
                bw_med / 1e9,
                fmt_size(size),
                self.reference.cpu
            );
        }
        for p in &self.placements {
            let _ = writeln!(t);
            let _ = writeln!(
                t,
                "== {} (writer cpu {}, reader cpu {}) — median time [min] ==",
                p.placement.title(),
                p.cpus.0,
                p.cpus.1
            );
            if let Some(why) = &p.skipped {
                let _ = writeln!(t, "not measured: {why}");
                continue;
            }
            self.placement_table(&mut t, p);
        }
        t
    }

    fn placement_table(&self, t: &mut String, p: &PlacementReport) {
        let measured: Vec<&Series> = p
            .series
            .iter()
            .filter(|s| matches!(s.outcome, Outcome::Measured(_)))
            .collect();
        // Columns: size, then each measured strategy, then the references.
        let mut head = vec!["size".to_string()];
        head.extend(measured.iter().map(|s| s.strategy.name().to_string()));
        head.push("ref:sum".into());
        head.push("ref:cp+sum".into());
        let mut rows = Vec::new();
        for (i, &size) in self.sizes.iter().enumerate() {
            let mut row = vec![fmt_size(size)];
            for s in &measured {
                let st = p.stats(s.strategy, i).expect("measured");
                row.push(fmt_ns(st.median()));
            }
            let r = &self.reference.points[i];
            row.push(fmt_ns(r.checksum.median()));
            row.push(fmt_ns(r.memcpy_checksum.median()));
            rows.push(row);
        }
        // The largest size once more with minima.
        let last = self.sizes.len() - 1;
        let mut row = vec!["  [min]".to_string()];
        for s in &measured {
            row.push(fmt_ns(
                p.stats(s.strategy, last).expect("measured").min() as f64
            ));
        }
        row.push(fmt_ns(self.reference.points[last].checksum.min() as f64));
        row.push(fmt_ns(
            self.reference.points[last].memcpy_checksum.min() as f64
        ));
        rows.push(row);
        write_grid(t, &head, &rows);

        for s in &p.series {
            match &s.outcome {
                Outcome::Unavailable(why) => {
                    let _ = writeln!(t, "UNAVAILABLE {}: {why}", s.strategy);
                }
                Outcome::Failed(why) => {
                    let _ = writeln!(t, "FAILED {}: {why}", s.strategy);
                }
                Outcome::Measured(_) => {}
            }
        }
        let ratios = self.ratios(p);
        if !ratios.is_empty() {
            let size = fmt_size(self.sizes[last]);
            let _ = writeln!(t, "ratios at {size} (t(B)/t(A); > 1 means A is faster):");
            let w = ratios.iter().map(|r| r.label.len()).max().unwrap_or(0);
            for r in ratios {
                let _ = writeln!(
                    t,
                    "  {:w$}  min {:5.2}x  median {:5.2}x  {}",
                    r.label,
                    r.min,
                    r.median,
                    r.reference,
                    w = w
                );
            }
        }
    }

    /// The report as JSON (every sample included).
    pub fn to_json(&self) -> Value {
        let stats = |s: &Stats| json!({"min_ns": s.min(), "median_ns": s.median(), "max_ns": s.max(), "samples_ns": s.samples});
        let reference: Vec<Value> = self
            .reference
            .points
            .iter()
            .map(|r| {
                json!({
                    "size": r.size,
                    "checksum": stats(&r.checksum),
                    "memcpy_checksum": stats(&r.memcpy_checksum),
                    "memcpy": stats(&r.memcpy),
                })
            })
            .collect();
        let placements: Vec<Value> = self
            .placements
            .iter()
            .map(|p| {
                let series: Vec<Value> = p
                    .series
                    .iter()
                    .map(|s| {
                        let mut v = json!({
                            "strategy": s.strategy.name(),
                            "paper_label": s.strategy.paper_label(),
                            "copies": s.strategy.copies(),
                            "pipelined": s.strategy.pipelined(),
                            "description": s.strategy.describe(),
                        });
                        match &s.outcome {
                            Outcome::Measured(cells) => {
                                v["status"] = json!("measured");
                                v["results"] = cells
                                    .iter()
                                    .zip(&self.sizes)
                                    .map(|(c, &size)| {
                                        let mut j = stats(c);
                                        j["size"] = json!(size);
                                        j
                                    })
                                    .collect();
                            }
                            Outcome::Unavailable(why) => {
                                v["status"] = json!("unavailable");
                                v["reason"] = json!(why);
                            }
                            Outcome::Failed(why) => {
                                v["status"] = json!("failed");
                                v["reason"] = json!(why);
                            }
                        }
                        v
                    })
                    .collect();
                let ratios: Vec<Value> = self
                    .ratios(p)
                    .iter()
                    .map(|r| {
                        json!({"label": r.label, "a": r.a.name(), "b": r.b.name(),
                               "min_ratio": r.min, "median_ratio": r.median,
                               "reference": r.reference})
                    })
                    .collect();
                json!({
                    "placement": p.placement.name(),
                    "writer_cpu": p.cpus.0,
                    "reader_cpu": p.cpus.1,
                    "skipped": p.skipped,
                    "series": series,
                    "ratios_at_largest_size": ratios,
                })
            })
            .collect();
        json!({
            "benchmark": "copy",
            "schema": 1,
            "backend": self.backend.name(),
            "machine": self.machine.json(),
            "protocol": "p writes d (untimed); timer starts in p; p' obtains d and checksums it; timer stops in p'; checksum compared with the seed's",
            "sizes": self.sizes,
            "reps": self.reps,
            "warmup": self.warmup,
            "rounds": self.rounds,
            "chunk": self.chunk,
            "memcpy_bytes_per_s": self.reference.memcpy_bytes_per_s(),
            "memcpy_bytes_per_s_median": self.reference.memcpy_bytes_per_s_median(),
            "reference": {"cpu": self.reference.cpu, "points": reference},
            "placements": placements,
        })
    }
}

/// Write a left-aligned first column and right-aligned others.
pub(crate) fn write_grid(t: &mut String, head: &[String], rows: &[Vec<String>]) {
    let mut w: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |t: &mut String, cells: &[String]| {
        for (i, c) in cells.iter().enumerate() {
            if i == 0 {
                let _ = write!(t, "{:<w$}", c, w = w[0]);
            } else {
                let _ = write!(t, "  {:>w$}", c, w = w[i]);
            }
        }
        let _ = writeln!(t);
    };
    line(t, head);
    for r in rows {
        line(t, r);
    }
}
