// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `halfproc ps`: the programs of a node daemon.

use crate::NodeOpt;
use clap::Args;
use halfproc_node::proto::Msg;
use std::process::ExitCode;

/// List the programs of the node daemon: those running here (pid, program,
/// state from /proc or `being migrated`, resident memory) and those started
/// here that now run on another node (where, and their pid there).
#[derive(Args)]
#[command(after_help = "Exit codes: 0, or 69 if the node daemon cannot be reached.")]
pub struct PsArgs {
    #[command(flatten)]
    node: NodeOpt,
}

pub fn run(a: PsArgs) -> ExitCode {
    let addr = a.node.addr();
    match halfproc_node::client::request(&addr, &a.node.ident(), Msg::Ps, |_| {}) {
        Ok(Msg::PsList(list)) => {
            println!(
                "{:>8}  {:<16} {:<16} {:>10}  WHERE",
                "PID", "PROGRAM", "STATE", "RSS"
            );
            for p in list {
                let pid = if p.pid > 0 {
                    p.pid.to_string()
                } else {
                    "-".into()
                };
                let rss = if p.rss_kib > 0 {
                    format!("{:.1} MiB", p.rss_kib as f64 / 1024.0)
                } else {
                    "-".into()
                };
                println!(
                    "{pid:>8}  {:<16} {:<16} {rss:>10}  {}",
                    p.program, p.state, p.place
                );
            }
            ExitCode::SUCCESS
        }
        Ok(Msg::Error(e)) => {
            eprintln!("halfproc ps: {e}");
            ExitCode::FAILURE
        }
        Ok(Msg::Denied(e)) => {
            eprintln!("halfproc ps: {e}");
            ExitCode::from(crate::EXIT_DENIED)
        }
        Ok(other) => {
            eprintln!("halfproc ps: unexpected answer {other:?}");
            ExitCode::FAILURE
        }
        Err(e) => crate::no_node(&addr, &e),
    }
}
