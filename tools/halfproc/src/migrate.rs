// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `halfproc migrate`: move a running program to another node.

use crate::NodeOpt;
use clap::Args;
use halfproc_node::proto::Msg;
use std::process::ExitCode;

/// Move program PID of the node daemon (--node) to the node daemon at --to:
/// refuse what cannot move (naming the resource) before stopping anything,
/// then freeze it, stream its image over TCP, restore it there and resume
/// it. Its stdio stays connected to its `halfproc run`.
///
/// Before stopping it, the destination is asked whether it takes the
/// program (its peer, the owner's uid, its limits); a refusal leaves the
/// program untouched ("was never stopped"). If anything fails after the
/// freeze (destination unreachable or killed, connection dropped, restore
/// error), the program is resumed where it was and the error says what
/// happened.
#[derive(Args)]
#[command(
    after_help = "Prints progress on stderr and the program's new pid (on the destination) \
alone on stdout. Exit codes: 0 migrated; 1 refused or failed (the program keeps running where it \
was); 75 if the outcome is in doubt (the commit was sent and its answer lost; the program is kept \
stopped here until `--resolve`); 77 if this user may not migrate it (not its owner; see `halfproc node --control`) \
or the destination does not allow it (this node not admitted there, the owner's uid not possible there; the program was \
never stopped); 69 if the node daemon cannot be reached."
)]
pub struct MigrateArgs {
    #[command(flatten)]
    node: NodeOpt,
    /// Pid of the program on its node (see `halfproc ps`).
    pid: i32,
    /// Destination node daemon.
    #[arg(long, value_name = "HOST:PORT", required_unless_present = "resolve")]
    to: Option<String>,
    /// Settle a program left in doubt by an earlier migration: ask its
    /// destination again (kills the original if the copy runs there,
    /// resumes it if not).
    #[arg(long, conflicts_with = "to")]
    resolve: bool,
    /// With --resolve: decide without asking (`resume` it here, or `kill`
    /// it here because it runs on at the destination).
    #[arg(long, requires = "resolve", value_parser = ["resume", "kill"])]
    force: Option<String>,
}

/// Exit code when the outcome of a migration is in doubt (EX_TEMPFAIL).
pub const EXIT_IN_DOUBT: u8 = 75;

pub fn run(a: MigrateArgs) -> ExitCode {
    let addr = a.node.addr();
    let req = match &a.to {
        Some(to) if !a.resolve => Msg::Migrate {
            pid: a.pid,
            to: to.clone(),
        },
        _ => Msg::Resolve {
            pid: a.pid,
            force: a.force.as_deref().map(|f| f == "resume"),
        },
    };
    match halfproc_node::client::request(&addr, &a.node.ident(), req, |p| {
        eprintln!("halfproc migrate: {p}")
    }) {
        Ok(Msg::Migrated {
            pid,
            node,
            bytes,
            frozen_us,
            total_us,
            mode,
        }) => {
            eprintln!("halfproc migrate: {mode}");
            eprintln!(
                "halfproc migrate: pid {} -> {node} pid {pid}: {:.1} MiB frozen, frozen {:.1} ms, total {:.1} ms",
                a.pid,
                bytes as f64 / 1048576.0,
                frozen_us as f64 / 1000.0,
                total_us as f64 / 1000.0
            );
            println!("{pid}");
            ExitCode::SUCCESS
        }
        Ok(Msg::Error(e)) => {
            eprintln!("halfproc migrate: {e}");
            ExitCode::FAILURE
        }
        Ok(Msg::Done(s)) => {
            eprintln!("halfproc migrate: {s}");
            ExitCode::SUCCESS
        }
        Ok(Msg::InDoubt(e)) => {
            eprintln!("halfproc migrate: {e}");
            ExitCode::from(EXIT_IN_DOUBT)
        }
        Ok(Msg::Denied(e)) => {
            eprintln!("halfproc migrate: {e}");
            ExitCode::from(crate::EXIT_DENIED)
        }
        Ok(other) => {
            eprintln!("halfproc migrate: unexpected answer {other:?}");
            ExitCode::FAILURE
        }
        Err(e) => crate::no_node(&addr, &e),
    }
}
