// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The `dmi` command: `dmi run` starts N DMI nodes on loopback; `dmi stress`
//! and `dmi check` are a coherence test over real processes;
//! `dmi reconf-stress` is that test while nodes join and leave.

mod bench;
mod bench_dmi;
mod bench_intra;
mod bench_phys;
mod bench_recv;
mod bench_stats;
mod node;
mod reconf_stress;
mod run;
mod stress;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "dmi",
    version,
    about = "Run DMI programs on N nodes of this machine (loopback), and check their coherence",
    long_about = "Run DMI programs on N nodes of this machine (loopback), and check their coherence.\n\n\
A DMI program (C: include/dmi.h, link with `pkg-config --libs dmi`; Rust: dmi::Dmi) calls \
DMI_init(), works on the global address space with DMI_read/DMI_write in the paper's modes \
(INVALIDATE, UPDATE, GET; EXCLUSIVE, PUT), and ends with DMI_finalize(). `dmi run -n 3 ./prog` \
starts three node processes, each running ./prog, connected over 127.0.0.1.\n\n\
Example:\n  dmi run -n 3 --prefix -- ./jacobi 64 48 100\n  \
dmi run -n 3 -- dmi stress --dir /tmp/h && dmi check /tmp/h"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    Run(run::RunArgs),
    Stress(stress::StressArgs),
    Check(stress::CheckArgs),
    Bench(bench::BenchArgs),
    ReconfStress(reconf_stress::ReconfStressArgs),
    Node(node::NodeArgs),
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.cmd {
        Cmd::Run(a) => run::run(a),
        Cmd::Stress(a) => stress::stress(a),
        Cmd::Check(a) => stress::check(a),
        Cmd::Bench(a) => bench::bench(a),
        Cmd::ReconfStress(a) => reconf_stress::reconf_stress(a),
        Cmd::Node(a) => node::node(a),
    };
    std::process::exit(code);
}
