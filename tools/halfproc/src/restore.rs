// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `halfproc restore`: continue a checkpointed program under the node daemon.

use crate::NodeOpt;
use clap::Args;
use halfproc_node::proto::Msg;
use std::process::ExitCode;

/// Restore the image in DIR (written by `halfproc checkpoint`) under the
/// node daemon and stay attached like `halfproc run`: the program continues
/// where it was checkpointed, with this command's stdin (after the bytes
/// that were unread in its stdin pipe) and its output here. The mapped
/// files (executable, libraries) must be unchanged since the checkpoint,
/// or carried in the image (`checkpoint --with-files`). A process tree
/// is restored with its pids, which must be free here.
#[derive(Args)]
#[command(
    after_help = "Exit status as for `halfproc run`: the program's, 128+N for signal N, \
127 if the image cannot be restored (the error names the step), 69 if the node daemon cannot be \
reached."
)]
pub struct RestoreArgs {
    #[command(flatten)]
    node: NodeOpt,
    /// Write the restored program's pid to this file.
    #[arg(long, value_name = "FILE")]
    pid_file: Option<std::path::PathBuf>,
    /// Image directory.
    dir: std::path::PathBuf,
}

pub fn run(a: RestoreArgs) -> ExitCode {
    let addr = a.node.addr();
    let dir = std::path::absolute(&a.dir).unwrap_or(a.dir.clone());
    let first = Msg::RestoreDir {
        dir: dir.to_string_lossy().into_owned(),
    };
    crate::run::finish(&addr, &a.node.ident(), first, a.pid_file.as_deref())
}
