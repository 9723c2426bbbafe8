// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `bench copy`: every requested strategy, size and placement, the
//! single-core reference, and the files (JSON, table, SVG/PNG plots).
//!
//! Order of work: `rounds` passes; each pass measures the single-core
//! reference and then runs every placement and every strategy once, each
//! with `reps / rounds` timed repetitions per size (after `warmup` untimed
//! ones). Spreading repetitions
//! over passes makes slow drifts of a shared machine (a kernel build on the
//! other core) land on all strategies alike, so side-by-side ratios are
//! fair even when absolute times wander.

use crate::error::{Error, Result};
use crate::harness::{self, Job};
use crate::opts::{CopyOpts, Placement};
use crate::os;
use crate::plot::{self, Chart, Line, Rgb, PALETTE, SHAPES};
use crate::reference;
use crate::report::{CopyReport, Machine, Outcome, PlacementReport, Series};
use crate::stats::{fmt_size, Stats};
use crate::strategy::Strategy;
use std::path::{Path, PathBuf};

/// Run `bench copy` with `opts`: measure, then write the files if
/// `opts.out` is set. The calling process must be single-threaded on the
/// kernel backend (members are created with a raw `clone3`).
///
/// A strategy that breaks does not abort the run: it is reported as
/// [`Outcome::Failed`] (and the binary exits non-zero), whatever the error,
/// `EPERM`/`EACCES`/`ENOSYS` included. [`Outcome::Unavailable`] is only for
/// what the backend lacks, decided before the run starts.
pub fn run_copy(opts: &CopyOpts) -> Result<CopyReport> {
    opts.validate()?;
    let backend = crate::backend::choose(&opts.backend)?;
    let cpus = os::allowed_cpus()?;
    let a = *cpus.first().ok_or_else(|| Error::usage("no CPU allowed"))?;
    let b = cpus.get(1).copied();
    let sizes: Vec<usize> = opts.sizes.iter().map(|&e| 1usize << e).collect();
    let say = |msg: String| {
        if opts.progress {
            eprintln!("{msg}");
        }
    };
    say(format!(
        "bench copy: backend {}, {} strategies, sizes {}..{}, {} reps in {} rounds, cpus {:?}",
        backend.name(),
        opts.strategies.len(),
        fmt_size(sizes[0]),
        fmt_size(sizes[sizes.len() - 1]),
        opts.reps,
        opts.rounds,
        cpus
    ));

    let per_round = opts.reps / opts.rounds;
    let mut reference = reference::measure(a, &sizes, opts.warmup, per_round)?;
    if let Some(bw) = reference.memcpy_bytes_per_s() {
        say(format!(
            "reference: single-core memcpy {:.2} GB/s",
            bw / 1e9
        ));
    }

    let mut placements: Vec<PlacementReport> = opts
        .placements
        .iter()
        .map(|&p| {
            let (cpus, skipped) = match (p, b) {
                (Placement::Same, _) => ((a, a), None),
                (Placement::Different, Some(b)) => ((a, b), None),
                (Placement::Different, None) => (
                    (a, a),
                    Some("only one CPU is available to this process".to_string()),
                ),
            };
            let series = opts
                .strategies
                .iter()
                .map(|&st| Series {
                    strategy: st,
                    outcome: match st.unavailable_on(backend) {
                        Some(why) => Outcome::Unavailable(why),
                        None => Outcome::Measured(Vec::new()),
                    },
                })
                .collect();
            PlacementReport {
                placement: p,
                cpus,
                skipped,
                series,
            }
        })
        .collect();
    for p in &placements {
        for s in &p.series {
            if let Outcome::Unavailable(why) = &s.outcome {
                say(format!(
                    "UNAVAILABLE {} ({}): {why}",
                    s.strategy,
                    p.placement.name()
                ));
            }
        }
    }

    // Raw samples: [placement][strategy][size] -> ns.
    let mut raw: Vec<Vec<Vec<Vec<u64>>>> = placements
        .iter()
        .map(|p| {
            p.series
                .iter()
                .map(|_| vec![Vec::new(); sizes.len()])
                .collect()
        })
        .collect();
    for round in 0..opts.rounds {
        if round > 0 {
            reference.merge(reference::measure(a, &sizes, opts.warmup, per_round)?);
        }
        for (pi, p) in placements.iter_mut().enumerate() {
            if p.skipped.is_some() {
                continue;
            }
            for (si, s) in p.series.iter_mut().enumerate() {
                if !matches!(s.outcome, Outcome::Measured(_)) {
                    continue;
                }
                let job = Job {
                    strategy: s.strategy,
                    backend,
                    sizes: &sizes,
                    warmup: opts.warmup,
                    reps: per_round,
                    cpus: p.cpus,
                    chunk: opts.chunk,
                    salt: round as u64,
                };
                let t = os::now_ns();
                match harness::run(&job) {
                    Ok(samples) => {
                        for (cell, new) in raw[pi][si].iter_mut().zip(samples) {
                            cell.extend(new);
                        }
                        say(format!(
                            "[round {}/{}] {:9} {:22} ok ({:.1} s)",
                            round + 1,
                            opts.rounds,
                            p.placement.name(),
                            s.strategy.name(),
                            (os::now_ns() - t) as f64 / 1e9
                        ));
                    }
                    // Whatever the errno: what the backend lacks was
                    // settled before the run (`unavailable_on`); a refusal
                    // now (EPERM from Yama or seccomp, ...) breaks the run.
                    Err(e) => {
                        say(format!(
                            "FAILED {} ({}): {e}",
                            s.strategy,
                            p.placement.name()
                        ));
                        s.outcome = Outcome::Failed(e.to_string());
                    }
                }
            }
        }
    }
    os::set_cpus(&cpus)?;
    for (pi, p) in placements.iter_mut().enumerate() {
        for (si, s) in p.series.iter_mut().enumerate() {
            if let Outcome::Measured(cells) = &mut s.outcome {
                if raw[pi][si].iter().any(Vec::is_empty) {
                    // Only possible for a skipped placement.
                    s.outcome = Outcome::Unavailable(
                        p.skipped.clone().unwrap_or_else(|| "not measured".into()),
                    );
                    continue;
                }
                *cells = std::mem::take(&mut raw[pi][si])
                    .into_iter()
                    .map(Stats::new)
                    .collect();
            }
        }
    }

    let mut report = CopyReport {
        backend,
        machine: Machine::detect(&opts.label),
        sizes,
        reps: opts.reps,
        warmup: opts.warmup,
        rounds: opts.rounds,
        chunk: opts.chunk,
        reference,
        placements,
        files: Vec::new(),
    };
    if let Some(dir) = &opts.out {
        report.files = write_files(&report, dir)?;
    }
    Ok(report)
}

/// The chart of one placement: median time of every measured strategy, and
/// the two single-core references dashed in grey.
pub fn chart(report: &CopyReport, p: &PlacementReport) -> Option<Chart> {
    let mut lines = Vec::new();
    for (k, s) in p.series.iter().enumerate() {
        let Outcome::Measured(cells) = &s.outcome else {
            continue;
        };
        let st = s.strategy;
        let ci = Strategy::ALL.iter().position(|&x| x == st).unwrap_or(k);
        let name = match st.paper_label() {
            Some(l) if l != st.name() => format!("{} ({l})", st.name()),
            _ => st.name().to_string(),
        };
        lines.push(Line {
            name,
            points: report
                .sizes
                .iter()
                .zip(cells)
                .map(|(&sz, c)| (sz as f64, c.median() / 1e9))
                .collect(),
            color: PALETTE[ci % PALETTE.len()],
            dashed: st.pipelined(),
            marker: Some(SHAPES[ci % SHAPES.len()]),
        });
    }
    if lines.is_empty() {
        return None;
    }
    let grey = |name: &str, f: &dyn Fn(&reference::RefPoint) -> f64, shade: u8| Line {
        name: name.to_string(),
        points: report
            .reference
            .points
            .iter()
            .map(|r| (r.size as f64, f(r) / 1e9))
            .collect(),
        color: Rgb(shade, shade, shade),
        dashed: true,
        marker: None,
    };
    lines.push(grey(
        "ref: checksum, 1 process",
        &|r| r.checksum.median(),
        0x60,
    ));
    lines.push(grey(
        "ref: memcpy+checksum, 1 process",
        &|r| r.memcpy_checksum.median(),
        0xa0,
    ));
    let label = if report.machine.label.is_empty() {
        String::new()
    } else {
        format!(" [{}]", report.machine.label)
    };
    Some(Chart {
        title: format!("Inter-process copy: {}{label}", p.placement.title()),
        subtitle: format!(
            "backend {}, {}, kernel {}; median of {} reps; pipelined chunk {}",
            report.backend.name(),
            report.machine.cpu_model,
            report.machine.kernel,
            report.reps,
            fmt_size(report.chunk)
        ),
        x_label: "size of d [bytes]".into(),
        y_label: "time: p' obtains d and checksums it [s]".into(),
        lines,
    })
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| Error::io(format!("write {}", path.display()), e))
}

/// Write `copy.json`, `copy.txt` and `copy-<placement>.svg`/`.png` into
/// `dir` (created if needed); returns the paths.
pub fn write_files(report: &CopyReport, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("mkdir {}", dir.display()), e))?;
    let mut files = Vec::new();
    let json = serde_json::to_string_pretty(&report.to_json()).expect("JSON of plain values");
    let p = dir.join("copy.json");
    write(&p, json.as_bytes())?;
    files.push(p);
    let p = dir.join("copy.txt");
    write(&p, report.table().as_bytes())?;
    files.push(p);
    for pl in &report.placements {
        let Some(chart) = chart(report, pl) else {
            continue;
        };
        let scene = chart.layout();
        let p = dir.join(format!("copy-{}.svg", pl.placement.name()));
        write(&p, plot::svg::render(&scene).as_bytes())?;
        files.push(p);
        let p = dir.join(format!("copy-{}.png", pl.placement.name()));
        write(&p, &plot::png::render(&scene)?)?;
        files.push(p);
    }
    Ok(files)
}
