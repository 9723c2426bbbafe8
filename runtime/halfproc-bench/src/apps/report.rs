// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The app comparison's results: per (app, nodes) the runs of each
//! implementation (MPI, DMI, and with `--yield yes` the one-line
//! half-process form), their minimum and median seconds per iteration, the
//! ratios over MPI; as a table and as JSON.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{AppsOpts, Printed};
use crate::error::{Error, Result};
use crate::report::Machine;

/// Which implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Impl {
    Dmi,
    Mpi,
    /// The one-line half-process form (`apps/dmi/APP_yield.c`: the normal
    /// DMI program plus `DMI_yield()`), in a movable run: each rank a
    /// compute instance (DMI+half-process).
    Yield,
}

impl Impl {
    /// `dmi`, `mpi` or `dmi-yield`.
    pub const fn name(self) -> &'static str {
        match self {
            Impl::Dmi => "dmi",
            Impl::Mpi => "mpi",
            Impl::Yield => "dmi-yield",
        }
    }
}

/// One run: what it printed, or why it has no result.
#[derive(Clone, Debug, PartialEq)]
pub enum Run {
    Ok(Printed),
    Failed(String),
}

/// The runs of one app on one node count.
#[derive(Clone, Debug)]
pub struct Cell {
    pub app: String,
    pub nodes: u32,
    pub mpi: Vec<Run>,
    pub dmi: Vec<Run>,
    /// The half-process form's runs (empty unless `--yield yes`).
    pub yld: Vec<Run>,
}

/// Minimum and median of the successful runs' seconds per iteration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub min: f64,
    pub median: f64,
    pub ok: usize,
}

/// Summary of `runs`, or `None` when none succeeded.
pub fn summarize(runs: &[Run]) -> Option<Summary> {
    let mut t: Vec<f64> = runs
        .iter()
        .filter_map(|r| match r {
            Run::Ok(p) => Some(p.time_per_iter),
            Run::Failed(_) => None,
        })
        .collect();
    if t.is_empty() {
        return None;
    }
    t.sort_by(f64::total_cmp);
    let n = t.len();
    let median = if n % 2 == 1 {
        t[n / 2]
    } else {
        (t[n / 2 - 1] + t[n / 2]) / 2.0
    };
    Some(Summary {
        min: t[0],
        median,
        ok: n,
    })
}

impl Cell {
    /// The runs of `imp`.
    pub fn runs(&self, imp: Impl) -> &[Run] {
        match imp {
            Impl::Dmi => &self.dmi,
            Impl::Mpi => &self.mpi,
            Impl::Yield => &self.yld,
        }
    }

    /// DMI over MPI of the minima and of the medians.
    pub fn ratios(&self) -> Option<(f64, f64)> {
        self.ratios_of(Impl::Dmi)
    }

    /// `imp` over MPI of the minima and of the medians.
    pub fn ratios_of(&self, imp: Impl) -> Option<(f64, f64)> {
        let (d, m) = (summarize(self.runs(imp))?, summarize(&self.mpi)?);
        Some((d.min / m.min, d.median / m.median))
    }

    /// The failures, as `impl run k: reason`.
    pub fn failures(&self) -> Vec<String> {
        let mut f = Vec::new();
        for imp in [Impl::Mpi, Impl::Dmi, Impl::Yield] {
            for (k, r) in self.runs(imp).iter().enumerate() {
                if let Run::Failed(e) = r {
                    f.push(format!(
                        "{} {} on {}, run {}: {e}",
                        self.app,
                        imp.name(),
                        self.nodes,
                        k + 1
                    ));
                }
            }
        }
        f
    }
}

/// The whole comparison.
#[derive(Clone, Debug)]
pub struct AppsReport {
    pub machine: Machine,
    pub size: String,
    pub runs: usize,
    pub cells: Vec<Cell>,
    /// The 1-minute load average before the first run and after the last.
    pub load: (Option<f64>, Option<f64>),
    /// How each implementation ran (`--dmi-note`, `--mpi-note`).
    pub dmi_note: String,
    pub mpi_note: String,
    /// Files written by [`AppsReport::write_files`].
    pub files: Vec<PathBuf>,
}

fn sci(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.3e}"))
}

fn ratio(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

impl AppsReport {
    pub fn new(o: &AppsOpts, cells: Vec<Cell>) -> AppsReport {
        AppsReport {
            machine: Machine::detect(&o.label),
            size: o.size.clone(),
            runs: o.runs,
            cells,
            load: (None, None),
            dmi_note: o.dmi_note.clone(),
            mpi_note: o.mpi_note.clone(),
            files: Vec::new(),
        }
    }

    /// Whether the half-process form ran (`--yield yes`).
    pub fn has_yield(&self) -> bool {
        self.cells.iter().any(|c| !c.yld.is_empty())
    }

    /// Every failed run.
    pub fn failures(&self) -> Vec<String> {
        self.cells.iter().flat_map(Cell::failures).collect()
    }

    /// The table: seconds per iteration, min and median, and the ratios.
    pub fn table(&self) -> String {
        let m = &self.machine;
        let mut s = format!(
            "halfproc bench apps{} — size {}, {} runs each; {} ({} CPUs), kernel {}\n\
             seconds per iteration (slowest node); load average {} before, {} after\n\
             DMI: {}\nMPI: {}\n",
            if m.label.is_empty() {
                String::new()
            } else {
                format!(" [{}]", m.label)
            },
            self.size,
            self.runs,
            m.cpu_model,
            m.cpus,
            m.kernel,
            self.load.0.map_or("?".into(), |l| l.to_string()),
            self.load.1.map_or("?".into(), |l| l.to_string()),
            self.dmi_note,
            self.mpi_note,
        );
        let hp = self.has_yield();
        if hp {
            s += "HP: the one-line half-process form (APP_yield, dmi run --movable); \
                  ratio: DMI/MPI, HP/MPI: HP over MPI\n";
        }
        s += &format!(
            "{:<9} {:>5} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9}",
            "app", "nodes", "MPI min", "MPI med", "DMI min", "DMI med", "ratio min", "ratio med"
        );
        if hp {
            s += &format!(
                " {:>10} {:>10} {:>10} {:>10}",
                "HP min", "HP med", "HP/MPI min", "HP/MPI med"
            );
        }
        s += "\n";
        for c in &self.cells {
            let (mpi, dmi) = (summarize(&c.mpi), summarize(&c.dmi));
            let r = c.ratios();
            s += &format!(
                "{:<9} {:>5} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9}",
                c.app,
                c.nodes,
                sci(mpi.map(|x| x.min)),
                sci(mpi.map(|x| x.median)),
                sci(dmi.map(|x| x.min)),
                sci(dmi.map(|x| x.median)),
                ratio(r.map(|x| x.0)),
                ratio(r.map(|x| x.1)),
            );
            if hp {
                let (y, ry) = (summarize(&c.yld), c.ratios_of(Impl::Yield));
                s += &format!(
                    " {:>10} {:>10} {:>10} {:>10}",
                    sci(y.map(|x| x.min)),
                    sci(y.map(|x| x.median)),
                    ratio(ry.map(|x| x.0)),
                    ratio(ry.map(|x| x.1)),
                );
            }
            s += "\n";
        }
        for f in self.failures() {
            s += &format!("FAILED: {f}\n");
        }
        s
    }

    /// The JSON document: options, machine, and per cell every run.
    pub fn json(&self) -> Value {
        let runs = |rs: &[Run]| -> Value {
            rs.iter()
                .map(|r| match r {
                    Run::Ok(p) => json!({
                        "time_per_iter": p.time_per_iter,
                        "iterations": p.iterations,
                        "checksum": p.checksum,
                    }),
                    Run::Failed(e) => json!({ "failed": e }),
                })
                .collect()
        };
        let summary = |s: Option<Summary>| {
            s.map_or(
                Value::Null,
                |s| json!({ "min": s.min, "median": s.median, "ok_runs": s.ok }),
            )
        };
        let cells: Vec<Value> = self
            .cells
            .iter()
            .map(|c| {
                let r = c.ratios();
                let mut v = json!({
                    "app": c.app,
                    "nodes": c.nodes,
                    "mpi": { "runs": runs(&c.mpi), "seconds_per_iter": summary(summarize(&c.mpi)) },
                    "dmi": { "runs": runs(&c.dmi), "seconds_per_iter": summary(summarize(&c.dmi)) },
                    "dmi_over_mpi": r.map_or(Value::Null, |(a, b)| json!({ "min": a, "median": b })),
                });
                if !c.yld.is_empty() {
                    let ry = c.ratios_of(Impl::Yield);
                    v["dmi_yield"] = json!({
                        "runs": runs(&c.yld),
                        "seconds_per_iter": summary(summarize(&c.yld)),
                    });
                    v["dmi_yield_over_mpi"] =
                        ry.map_or(Value::Null, |(a, b)| json!({ "min": a, "median": b }));
                }
                v
            })
            .collect();
        json!({
            "bench": "apps",
            "size": self.size,
            "runs": self.runs,
            "machine": self.machine.json(),
            "load_average": { "before": self.load.0, "after": self.load.1 },
            "dmi": self.dmi_note,
            "mpi": self.mpi_note,
            "cells": cells,
        })
    }

    /// Writes `apps.json`, `apps.svg` and `apps.png` into `dir`.
    pub fn write_files(&mut self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("mkdir {}", dir.display()), e))?;
        let scene = super::chart::layout(self);
        let json = serde_json::to_string_pretty(&self.json()).unwrap_or_default() + "\n";
        let files: [(&str, Vec<u8>); 3] = [
            ("apps.json", json.into_bytes()),
            ("apps.svg", crate::plot::svg::render(&scene).into_bytes()),
            ("apps.png", crate::plot::png::render(&scene)?),
        ];
        for (name, body) in files {
            let p = dir.join(name);
            std::fs::write(&p, body).map_err(|e| Error::io(format!("write {}", p.display()), e))?;
            self.files.push(p);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(t: f64) -> Run {
        Run::Ok(Printed {
            iterations: 10,
            time_per_iter: t,
            checksum: "1.0".into(),
        })
    }

    #[test]
    fn min_median_and_ratios_skip_failed_runs() {
        let c = Cell {
            app: "jacobi".into(),
            nodes: 2,
            mpi: vec![ok(4.0), ok(2.0), ok(3.0)],
            dmi: vec![ok(6.0), Run::Failed("x".into()), ok(4.0)],
            yld: vec![ok(8.0), ok(3.0)],
        };
        assert_eq!(
            summarize(&c.mpi),
            Some(Summary {
                min: 2.0,
                median: 3.0,
                ok: 3
            })
        );
        assert_eq!(summarize(&c.dmi).map(|s| s.median), Some(5.0));
        assert_eq!(c.ratios(), Some((2.0, 5.0 / 3.0)));
        assert_eq!(c.ratios_of(Impl::Yield), Some((1.5, 5.5 / 3.0)));
        assert_eq!(c.failures(), vec!["jacobi dmi on 2, run 2: x".to_string()]);
        assert_eq!(summarize(&[Run::Failed("y".into())]), None);
    }

    #[test]
    fn the_half_process_form_gets_its_columns_and_ratio_only_when_run() {
        let cell = |yld: Vec<Run>| Cell {
            app: "nbody".into(),
            nodes: 2,
            mpi: vec![ok(2.0)],
            dmi: vec![ok(3.0)],
            yld,
        };
        let r = AppsReport::new(&AppsOpts::default(), vec![cell(Vec::new())]);
        assert!(!r.has_yield());
        assert!(!r.table().contains("HP/MPI"), "{}", r.table());
        assert!(r.json()["cells"][0].get("dmi_yield").is_none());
        let r = AppsReport::new(&AppsOpts::default(), vec![cell(vec![ok(5.0)])]);
        let t = r.table();
        let row = t.lines().find(|l| l.starts_with("nbody")).unwrap();
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(&cols[8..], ["5.000e0", "5.000e0", "2.50", "2.50"], "{t}");
        assert_eq!(r.json()["cells"][0]["dmi_yield_over_mpi"]["median"], 2.5);
    }
}
