// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `halfproc bench`: the half-process paper's copy experiment and its
//! memory-management overhead measurement, reproduced and extended.
//!
//! * [`run_copy`]: section 4.4.2 (Figs. 7/8). Process `p` writes data `d`;
//!   the timer starts; process `p'` obtains `d` and checksums it; the timer
//!   stops. Sizes 2^6..2^28 bytes; strategies from loopback TCP to `dmread`,
//!   plus pipelined single- and double-copy transports the paper did not
//!   have; both processes on one core or on two. Every checksum is compared
//!   with the value regenerated from the data's seed, so a number is only
//!   reported for bytes that arrived intact.
//! * [`run_mm`]: section 4.4.3. `mmap`+`munmap` and first-touch faults on the
//!   shared range against private memory, as ratios.
//! * [`run_apps`]: section 5.3 (Figs. 15-22). The apps of `apps/` on DMI
//!   against MPI on 1, 2 and 4 nodes of this machine (programs it runs;
//!   no dependency on the DMI crate).
//!
//! Both run on the kernel backend (patched kernel, `halfproc` module) and on
//! the portable backend (any Linux); a strategy the backend lacks is
//! reported as unavailable with the reason.
//!
//! # Layout
//!
//! | file | concept |
//! |---|---|
//! | `opts.rs` | options and argument parsing (usage errors) |
//! | `pattern.rs` | the data `d` and the checksum |
//! | `backend.rs` | kernel vs portable: members, shared range |
//! | `control.rs` | the writer/reader control block and doorbells |
//! | `strategy/` | one file per family of strategies |
//! | `harness.rs` | one strategy between two processes, timed |
//! | `reference.rs` | single-core memcpy/checksum of the same run |
//! | `stats.rs` | min/median and formatting |
//! | `copy.rs` | `bench copy`: the whole run and its files |
//! | `report.rs` | the copy report: table, ratios, JSON |
//! | `plot/` | log-log charts to SVG and PNG |
//! | `mm.rs` | `bench mm` |
//! | `mmcount.rs` | `bench mm`'s counts (switches, flushes, IPIs) |
//! | `apps/` | `bench apps`: runs, report, figure |
//! | `migrate_bench.rs` | `bench migrate`: checkpoint+restore throughput against memcpy |
//! | `os.rs` | the benchmarks' own system calls (clock, affinity, pipes, children); the rest is `halfproc-sys` |
//!
//! # Examples
//!
//! ```no_run
//! use halfproc_bench::{opts::CopyOpts, run_copy};
//! let opts = CopyOpts::parse(&["--quick".into(), "--strategies".into(), "paper".into()])?;
//! let report = run_copy(&opts)?;
//! print!("{}", report.table());
//! # Ok::<(), halfproc_bench::Error>(())
//! ```

pub mod apps;
pub mod backend;
pub mod control;
pub mod copy;
pub mod error;
pub mod harness;
pub mod migrate_bench;
pub mod mm;
pub mod mmcount;
pub mod opts;
pub mod os;
pub mod pattern;
pub mod plot;
pub mod reference;
pub mod report;
pub mod stats;
pub mod strategy;

pub use apps::{run_apps, AppsOpts};
pub use copy::run_copy;
pub use error::{Error, Result};
pub use mm::{run_mm, MmReport};
pub use opts::{CopyOpts, MmOpts, Placement};
pub use report::CopyReport;
pub use strategy::Strategy;

/// Entry point shared by the `halfproc-bench` binary and the `halfproc`
/// CLI's `bench` subcommand: `args` starts with `copy`, `mm`, `apps` or `migrate`. Prints the
/// table to stdout and the written files to stderr; returns the process exit
/// code (0 ok, 1 a strategy failed or a run broke, 2 bad arguments).
pub fn main_with_args(args: &[String]) -> i32 {
    let usage =
        "usage: halfproc-bench copy|mm|apps|migrate [options]   (--help after the subcommand for options)";
    let (cmd, rest) = match args.split_first() {
        Some((c, r)) => (c.as_str(), r),
        None => {
            eprintln!("{usage}");
            return 2;
        }
    };
    let result = match cmd {
        "migrate" => return migrate_bench::main(rest),
        "copy" => CopyOpts::parse(rest).and_then(|o| {
            let r = run_copy(&o)?;
            print!("{}", r.table());
            for f in &r.files {
                eprintln!("wrote {}", f.display());
            }
            let failed = r
                .placements
                .iter()
                .flat_map(|p| &p.series)
                .any(|s| matches!(s.outcome, report::Outcome::Failed(_)));
            Ok(if failed { 1 } else { 0 })
        }),
        "mm" => MmOpts::parse(rest).and_then(|o| {
            let r = run_mm(&o)?;
            print!("{}", r.table());
            for f in &r.files {
                eprintln!("wrote {}", f.display());
            }
            Ok(0)
        }),
        "apps" => AppsOpts::parse(rest).and_then(|o| {
            let mut r = run_apps(&o)?;
            r.write_files(&o.out)?;
            print!("{}", r.table());
            for f in &r.files {
                eprintln!("wrote {}", f.display());
            }
            Ok(if r.failures().is_empty() { 0 } else { 1 })
        }),
        "help" | "--help" | "-h" => {
            println!(
                "{usage}\n\n{}\n{}\n{}",
                opts::COPY_HELP,
                opts::MM_HELP,
                apps::APPS_HELP
            );
            return 0;
        }
        other => Err(Error::usage(format!(
            "unknown subcommand `{other}`; {usage}"
        ))),
    };
    match result {
        Ok(code) => code,
        Err(Error::Usage(msg))
            if msg == opts::COPY_HELP || msg == opts::MM_HELP || msg == apps::APPS_HELP =>
        {
            print!("{msg}");
            0
        }
        Err(e @ Error::Usage(_)) => {
            eprintln!("halfproc-bench: {e}");
            2
        }
        Err(e) => {
            eprintln!("halfproc-bench: {e}");
            1
        }
    }
}
