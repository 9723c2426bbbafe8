// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `halfproc checkpoint`: write a program's image to a directory.

use crate::NodeOpt;
use clap::Args;
use halfproc_node::proto::Msg;
use std::process::ExitCode;

/// Checkpoint program PID of the node daemon into DIR (on the daemon's
/// machine): `manifest.json` + `pages.img` (+ `files.img` with
/// --with-files). The daemon does it (it is the
/// program's parent and holds its stdio pipes, which are recorded as
/// relayed). A program with children (stress-ng and its workers) is
/// written as a process tree: DIR/tree.json and an image per process in
/// DIR/PID. The program keeps running unless --kill; `halfproc restore DIR`
/// starts the copy.
#[derive(Args)]
#[command(
    after_help = "Exit codes: 0 done; 1 refused or failed (the program keeps running); \
77 if this user may not checkpoint it (not its owner); 69 if the node daemon cannot be reached."
)]
pub struct CheckpointArgs {
    #[command(flatten)]
    node: NodeOpt,
    /// Pid of the program on its node (see `halfproc ps`).
    pid: i32,
    /// Image directory (created; relative to this command's directory).
    #[arg(short, long, value_name = "DIR")]
    output: std::path::PathBuf,
    /// Stop the program after the checkpoint (its `run` exits with 75).
    #[arg(long)]
    kill: bool,
    /// Also write the contents of its mapped files (program text,
    /// libraries) into DIR/files.img, so that `halfproc restore` works
    /// where one of them differs or is missing (another machine, a
    /// rebuilt binary). Without it such a restore is refused, naming the
    /// file.
    #[arg(long)]
    with_files: bool,
}

pub fn run(a: CheckpointArgs) -> ExitCode {
    let addr = a.node.addr();
    let dir = std::path::absolute(&a.output).unwrap_or(a.output.clone());
    let req = Msg::Checkpoint {
        pid: a.pid,
        dir: dir.to_string_lossy().into_owned(),
        kill: a.kill,
        with_files: a.with_files,
    };
    match halfproc_node::client::request(&addr, &a.node.ident(), req, |p| {
        eprintln!("halfproc checkpoint: {p}")
    }) {
        Ok(Msg::Done(s)) => {
            eprintln!("halfproc checkpoint: {s}");
            ExitCode::SUCCESS
        }
        Ok(Msg::Error(e)) => {
            eprintln!("halfproc checkpoint: {e}");
            ExitCode::FAILURE
        }
        Ok(Msg::Denied(e)) => {
            eprintln!("halfproc checkpoint: {e}");
            ExitCode::from(crate::EXIT_DENIED)
        }
        Ok(other) => {
            eprintln!("halfproc checkpoint: unexpected answer {other:?}");
            ExitCode::FAILURE
        }
        Err(e) => crate::no_node(&addr, &e),
    }
}
