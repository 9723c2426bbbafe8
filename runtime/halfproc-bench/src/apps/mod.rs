// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `bench apps`: the applications of issue 13 (Jacobi, N-body, PageRank,
//! CG; `apps/`) on 1, 2 and 4 nodes of this machine, DMI (`dmi run -n N`,
//! loopback TCP) against MPI (`apps/mpirun.sh`, Open MPI with
//! `--oversubscribe`), like the half-process paper's Figs. 15-22.
//!
//! The programs are built beforehand (`apps/bench.sh` builds libdmi, `dmi`
//! and the apps in release mode, then runs this). Each program prints its
//! seconds per iteration (the iterations only, slowest node, measured from
//! a barrier) and a checksum; every run's checksum is compared with the
//! first MPI run's by the apps' own `cks-cmp` (the tolerances of
//! `apps/common/checksum.c`), so a time is only reported for a run that
//! computed the right answer. DMI and MPI runs alternate, so that a change
//! of load on the machine touches both alike.
//!
//! | file | concept |
//! |---|---|
//! | `mod.rs` | options, running the programs, parsing their report |
//! | `report.rs` | min/median, ratios, the table and the JSON |
//! | `chart.rs` | the figure: one panel per app, time per iteration against nodes |

pub mod chart;
pub mod report;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use report::{AppsReport, Cell, Impl, Run};

/// The four programs, in the order of the papers.
pub const APPS: [&str; 4] = ["jacobi", "nbody", "pagerank", "cg"];

/// `bench apps --help`.
pub const APPS_HELP: &str = "\
halfproc bench apps [options]: the apps (Jacobi, N-body, PageRank, CG) on DMI
against MPI, on 1, 2 and 4 nodes of this machine; min and median of several
runs, the DMI/MPI ratio; a table on stdout, JSON, SVG and PNG in --out.
Build first: apps/bench.sh does (release libdmi and dmi, apps with -O2).
  --size small|medium|bench  problem size (default bench; docs/apps.md, \"Inputs and sizes\")
  --runs N              runs per (app, implementation, nodes) (default 5)
  --nodes LIST          node/rank counts (default 1,2,4)
  --apps LIST           subset of jacobi,nbody,pagerank,cg (default all)
  --bin DIR             the built apps: DIR/{dmi,mpi}/APP, DIR/cks-cmp (default out/apps-release)
  --dmi PATH            the dmi launcher (default target/release/dmi)
  --mpirun PATH         the MPI launcher script (default apps/mpirun.sh)
  --out DIR             where apps.json, apps.svg, apps.png go (default out/bench-apps)
  --timeout SECS        limit per run (default 300)
  --label TEXT          machine label in the report
  --yield yes|no        also run the one-line half-process form (apps/dmi/APP_yield,
                        dmi run -n N --movable) and report HP/MPI (default no)
  --dmi-note TEXT       how the DMI runs are placed, for the report (default:
                        dmi run -n N, loopback TCP)
  --mpi-note TEXT       likewise for MPI (default: apps/mpirun.sh, Open MPI)
";

/// What `--dmi-note` and `--mpi-note` say by default: this machine's runs.
pub const DMI_NOTE: &str = "dmi run -n N: one process per node, loopback TCP";
pub const MPI_NOTE: &str =
    "apps/mpirun.sh: Open MPI, --oversubscribe --bind-to none, btl self,vader, mpi_yield_when_idle 1";

/// Options of `bench apps`.
#[derive(Clone, Debug)]
pub struct AppsOpts {
    pub size: String,
    pub runs: usize,
    pub nodes: Vec<u32>,
    pub apps: Vec<String>,
    pub bin: PathBuf,
    pub dmi: PathBuf,
    pub mpirun: PathBuf,
    pub out: PathBuf,
    pub timeout: Duration,
    pub label: String,
    /// How the runs are placed and connected (the report's words).
    pub dmi_note: String,
    pub mpi_note: String,
    /// Also the half-process form (`--yield yes`).
    pub yield_form: bool,
}

impl Default for AppsOpts {
    fn default() -> Self {
        AppsOpts {
            size: "bench".into(),
            runs: 5,
            nodes: vec![1, 2, 4],
            apps: APPS.iter().map(|s| s.to_string()).collect(),
            bin: "out/apps-release".into(),
            dmi: "target/release/dmi".into(),
            mpirun: "apps/mpirun.sh".into(),
            out: "out/bench-apps".into(),
            timeout: Duration::from_secs(300),
            label: String::new(),
            dmi_note: DMI_NOTE.into(),
            mpi_note: MPI_NOTE.into(),
            yield_form: false,
        }
    }
}

fn parse_list<T>(opt: &str, v: &str, f: impl Fn(&str) -> Option<T>) -> Result<Vec<T>> {
    let items: Option<Vec<T>> = v.split(',').map(|s| f(s.trim())).collect();
    match items {
        Some(i) if !i.is_empty() => Ok(i),
        _ => Err(Error::usage(format!("{opt} {v:?}: not a valid list"))),
    }
}

impl AppsOpts {
    /// Parses the options after `apps`; `--help` is returned as a usage
    /// error holding [`APPS_HELP`].
    pub fn parse(args: &[String]) -> Result<AppsOpts> {
        let mut o = AppsOpts::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if a == "--help" || a == "-h" {
                return Err(Error::usage(APPS_HELP));
            }
            let v = it
                .next()
                .ok_or_else(|| Error::usage(format!("{a} needs a value (see --help)")))?;
            match a.as_str() {
                "--size" if ["small", "medium", "bench"].contains(&v.as_str()) => {
                    o.size = v.clone()
                }
                "--size" => {
                    return Err(Error::usage(format!(
                        "--size {v:?}: small, medium or bench"
                    )))
                }
                "--runs" => {
                    o.runs = v
                        .parse()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| Error::usage(format!("--runs {v:?}: a count >= 1")))?
                }
                "--nodes" => {
                    o.nodes = parse_list(a, v, |s| s.parse().ok().filter(|&n| n > 0 && n <= 64))?
                }
                "--apps" => {
                    o.apps = parse_list(a, v, |s| APPS.contains(&s).then(|| s.to_string()))?
                }
                "--bin" => o.bin = v.into(),
                "--dmi" => o.dmi = v.into(),
                "--mpirun" => o.mpirun = v.into(),
                "--out" => o.out = v.into(),
                "--timeout" => {
                    o.timeout = v
                        .parse()
                        .ok()
                        .filter(|&s| s > 0)
                        .map(Duration::from_secs)
                        .ok_or_else(|| Error::usage(format!("--timeout {v:?}: seconds >= 1")))?
                }
                "--label" => o.label = v.clone(),
                "--dmi-note" => o.dmi_note = v.clone(),
                "--mpi-note" => o.mpi_note = v.clone(),
                "--yield" => {
                    o.yield_form = match v.as_str() {
                        "yes" => true,
                        "no" => false,
                        _ => return Err(Error::usage(format!("--yield {v:?}: yes or no"))),
                    }
                }
                _ => return Err(Error::usage(format!("unknown option {a} (see --help)"))),
            }
        }
        Ok(o)
    }

    fn program(&self, imp: Impl, app: &str) -> PathBuf {
        match imp {
            Impl::Yield => self.bin.join("dmi").join(format!("{app}_yield")),
            _ => self.bin.join(imp.name()).join(app),
        }
    }

    /// The implementations to run, MPI first (its first run is the
    /// reference checksum).
    fn impls(&self) -> Vec<Impl> {
        let mut v = vec![Impl::Mpi, Impl::Dmi];
        if self.yield_form {
            v.push(Impl::Yield);
        }
        v
    }

    /// Every file the runs need exists (else a message saying how to build).
    fn check(&self) -> Result<()> {
        let mut need = vec![
            self.dmi.clone(),
            self.mpirun.clone(),
            self.bin.join("cks-cmp"),
        ];
        for app in &self.apps {
            for imp in self.impls() {
                need.push(self.program(imp, app));
            }
        }
        match need.iter().find(|p| !p.is_file()) {
            Some(p) => Err(Error::usage(format!(
                "{} does not exist: build with apps/bench.sh (or pass --bin/--dmi/--mpirun)",
                p.display()
            ))),
            None => Ok(()),
        }
    }

    fn command(&self, imp: Impl, app: &str, n: u32) -> Command {
        let prog = self.program(imp, app);
        let mut c = match imp {
            Impl::Dmi => {
                let mut c = Command::new(&self.dmi);
                c.arg("run").arg("-n").arg(n.to_string()).arg(prog);
                c
            }
            Impl::Yield => {
                // Each rank a compute instance of its node; no moves are
                // scheduled (DMI_MOVE_AT unset), so this is the form's
                // steady-state cost.
                let mut c = Command::new(&self.dmi);
                c.arg("run")
                    .arg("-n")
                    .arg(n.to_string())
                    .arg("--movable")
                    .arg(prog)
                    .env_remove("DMI_MOVE_AT");
                c
            }
            Impl::Mpi => {
                let mut c = Command::new(&self.mpirun);
                c.arg(n.to_string()).arg(prog);
                c
            }
        };
        c.arg(&self.size);
        c
    }
}

/// What one program printed.
#[derive(Clone, Debug, PartialEq)]
pub struct Printed {
    pub iterations: u64,
    pub time_per_iter: f64,
    pub checksum: String,
}

/// Parses the `key value` lines every app prints (`apps/common/common.c`).
pub fn parse_output(out: &str) -> Option<Printed> {
    let field = |k: &str| {
        out.lines()
            .filter_map(|l| l.split_once(' '))
            .find(|(key, _)| *key == k)
            .map(|(_, v)| v.trim().to_string())
    };
    let time_per_iter = field("time_per_iter")?
        .parse()
        .ok()
        .filter(|t: &f64| *t > 0.0)?;
    Some(Printed {
        iterations: field("iterations")?.parse().ok()?,
        time_per_iter,
        checksum: field("checksum")?,
    })
}

/// Runs `cmd` with a time limit; its stdout, or why it failed.
fn run_limited(mut cmd: Command, limit: Duration) -> std::result::Result<String, String> {
    use std::io::Read;
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("cannot start: {e}"))?;
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let ereader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no result within {} s; killed", limit.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("wait: {e}")),
        }
    };
    let out = reader.join().unwrap_or_default();
    let err = ereader.join().unwrap_or_default();
    if status.success() {
        Ok(out)
    } else {
        let tail: Vec<&str> = err.lines().rev().take(3).collect();
        Err(format!(
            "{status}: {}",
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ))
    }
}

/// Whether the apps' `cks-cmp` finds `val` within `app`'s tolerance of `want`.
fn agrees(bin: &Path, app: &str, want: &str, val: &str) -> Result<bool> {
    let st = Command::new(bin.join("cks-cmp"))
        .args([app, want, val])
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| Error::io("run cks-cmp", e))?;
    Ok(st.success())
}

/// The 1-minute load average (other work on the machine; `None` if
/// unreadable).
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Runs everything; progress on stderr.
pub fn run_apps(o: &AppsOpts) -> Result<AppsReport> {
    o.check()?;
    let load_before = load_average();
    let mut cells = Vec::new();
    for app in &o.apps {
        let mut reference: Option<String> = None;
        for &n in &o.nodes {
            let mut runs: [Vec<Run>; 3] = [Vec::new(), Vec::new(), Vec::new()];
            for r in 0..o.runs {
                // MPI first, so the first MPI run on the first count is
                // the reference checksum.
                for (k, imp) in o.impls().into_iter().enumerate() {
                    let run = match run_limited(o.command(imp, app, n), o.timeout) {
                        Ok(out) => match parse_output(&out) {
                            Some(p) => {
                                let want = reference.get_or_insert_with(|| p.checksum.clone());
                                if agrees(&o.bin, app, want, &p.checksum)? {
                                    Run::Ok(p)
                                } else {
                                    Run::Failed(format!(
                                        "checksum {} disagrees with {want}",
                                        p.checksum
                                    ))
                                }
                            }
                            None => Run::Failed("no time_per_iter/checksum in its output".into()),
                        },
                        Err(e) => Run::Failed(e),
                    };
                    match &run {
                        Run::Ok(p) => eprintln!(
                            "{app} {} {n} run {}: {:.3e} s/iteration, {} iterations",
                            imp.name(),
                            r + 1,
                            p.time_per_iter,
                            p.iterations
                        ),
                        Run::Failed(e) => {
                            eprintln!("{app} {} {n} run {}: FAILED: {e}", imp.name(), r + 1)
                        }
                    }
                    runs[k].push(run);
                }
            }
            let [mpi, dmi, yld] = runs;
            cells.push(Cell {
                app: app.clone(),
                nodes: n,
                mpi,
                dmi,
                yld,
            });
        }
    }
    let mut r = AppsReport::new(o, cells);
    r.load = (load_before, load_average());
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_the_apps_print() {
        let out = "app cg impl mpi ranks 4 size small\niterations 83\ntime_per_iter 2.24e-03\nchecksum 56307.07\n";
        let p = parse_output(out).unwrap();
        assert_eq!(p.iterations, 83);
        assert_eq!(p.time_per_iter, 2.24e-3);
        assert_eq!(p.checksum, "56307.07");
        assert_eq!(parse_output("iterations 3\nchecksum 1\n"), None);
        assert_eq!(
            parse_output("iterations 3\ntime_per_iter 0\nchecksum 1\n"),
            None
        );
    }

    #[test]
    fn options_are_checked() {
        let o = AppsOpts::parse(&["--nodes".into(), "1,2".into(), "--runs".into(), "2".into()])
            .unwrap();
        assert_eq!((o.nodes, o.runs), (vec![1, 2], 2));
        assert_eq!(
            (o.dmi_note.as_str(), o.mpi_note.as_str()),
            (DMI_NOTE, MPI_NOTE)
        );
        let o = AppsOpts::parse(&["--dmi-note".into(), "two guests".into()]).unwrap();
        assert_eq!(o.dmi_note, "two guests");
        assert!(!o.yield_form);
        let o = AppsOpts::parse(&["--yield".into(), "yes".into()]).unwrap();
        assert!(o.yield_form);
        assert_eq!(o.impls(), [Impl::Mpi, Impl::Dmi, Impl::Yield]);
        assert!(o.program(Impl::Yield, "cg").ends_with("dmi/cg_yield"));
        for bad in [
            &["--nodes", "0"][..],
            &["--apps", "fft"],
            &["--size", "huge"],
            &["--runs"],
            &["--frob", "1"],
            &["--mpi-note"],
            &["--yield", "maybe"],
        ] {
            let args: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
            assert!(
                matches!(AppsOpts::parse(&args), Err(Error::Usage(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn missing_programs_name_the_build_command() {
        let o = AppsOpts {
            bin: "/nonexistent".into(),
            ..AppsOpts::default()
        };
        let e = run_apps(&o).unwrap_err().to_string();
        assert!(e.contains("apps/bench.sh"), "{e}");
    }
}
