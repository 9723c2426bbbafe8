// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `halfproc run`: start a program through the node daemon.

use crate::NodeOpt;
use clap::Args;
use halfproc_node::proto::Msg;
use std::process::ExitCode;

/// Start PROG with ARGS through the node daemon and stay attached: this
/// command's stdin goes to the program, the program's stdout and stderr come
/// here, wherever the program runs after `halfproc migrate`.
///
/// The daemon starts the program as its own child in the current directory
/// with this environment (portable backend: a plain process, not yet a
/// half-process set member). Its stdin, stdout and stderr are pipes held by
/// the daemon.
#[derive(Args)]
#[command(
    after_help = "Exit status: the program's; 128+N if it was killed by signal N (as a shell \
reports it); 75 if it was checkpointed and stopped (`checkpoint --kill`); 70 if the node it ran on \
went away; 127 if it could not be started; 69 if the node daemon cannot be reached."
)]
pub struct RunArgs {
    #[command(flatten)]
    node: NodeOpt,
    /// Write the program's pid (on the node) to this file once it started.
    #[arg(long, value_name = "FILE")]
    pid_file: Option<std::path::PathBuf>,
    /// The program and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROG ARGS"
    )]
    argv: Vec<String>,
}

pub fn run(a: RunArgs) -> ExitCode {
    let addr = a.node.addr();
    let cwd = std::env::current_dir()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "/".into());
    let first = Msg::Run {
        argv: a.argv.clone(),
        cwd,
        env: std::env::vars().collect(),
    };
    finish(&addr, &a.node.ident(), first, a.pid_file.as_deref())
}

/// Shared with `restore`: runs the session and exits with the program's status.
pub fn finish(
    addr: &str,
    me: &halfproc_node::proto::Identity,
    first: Msg,
    pid_file: Option<&std::path::Path>,
) -> ExitCode {
    let r = halfproc_node::client::run(addr, me, first, |pid| {
        if let Some(f) = pid_file {
            if let Err(e) = std::fs::write(f, format!("{pid}\n")) {
                eprintln!("halfproc run: {}: {e}", f.display());
            }
        }
    });
    let code = match r {
        Ok(exit) => {
            match &exit {
                halfproc_node::proto::Exit::Checkpointed(d) => {
                    eprintln!("halfproc run: the program was checkpointed into {d} and stopped")
                }
                halfproc_node::proto::Exit::Lost(why) => {
                    eprintln!("halfproc run: program lost: {why}")
                }
                _ => {}
            }
            exit.code()
        }
        Err(e)
            if e.kind() == std::io::ErrorKind::ConnectionRefused
                || e.to_string().starts_with("connect to node") =>
        {
            return crate::no_node(addr, &e);
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            eprintln!("halfproc run: {e}");
            crate::EXIT_DENIED
        }
        Err(e) => {
            eprintln!("halfproc run: {e}");
            127
        }
    };
    // Exit at once: the stdin reader thread may be blocked in read(2).
    std::process::exit(code as i32)
}
