// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `halfproc`: the runtime's command-line tool.
//!
//! ```text
//! halfproc info [--backend auto|kernel|portable] [--probe]
//! halfproc bench copy|mm|apps ...
//! halfproc node --listen ADDR                 # the node daemon
//! halfproc run -- PROG ARGS...                # through the node daemon
//! halfproc ps | migrate PID --to ADDR | checkpoint PID -o DIR | restore DIR
//! ```
//!
//! The top of the crate graph: it depends on the runtime, the benchmarks
//! and the node daemon (which depends on the migration engine); nothing
//! depends on it. Adding a subcommand: a file with its `Args` struct and a
//! `run` function returning an exit code, and a variant of `Command`.

mod checkpoint;
mod info;
mod migrate;
mod node;
mod ps;
mod restore;
mod run;

use clap::{Args, Parser, Subcommand};
use std::process::ExitCode;

/// Exit code when the node daemon cannot be reached (EX_UNAVAILABLE).
pub const EXIT_NO_NODE: u8 = 69;
/// Exit code when the node daemon refuses the request to this user
/// (EX_NOPERM): not the owner of the process, or TCP without the secret
/// on a multi-user node.
pub const EXIT_DENIED: u8 = 77;

#[derive(Parser)]
#[command(
    name = "halfproc",
    version,
    about = "halfproc runtime tool: info, benchmarks, and the node daemon that runs, checkpoints and migrates programs",
    after_help = "Programs run through a node daemon (`halfproc node`); the other commands talk to it at \
--node, else $HALFPROC_NODE, else 127.0.0.1:7070 (TCP). Off loopback, give every node and client \
the same --secret-file (or $HALFPROC_NODE_SECRET_FILE): peers then authenticate with an HMAC \
challenge and every frame carries an HMAC; traffic is not encrypted. A node without a secret \
listens on loopback only, serves local clients on its control socket (owner-checked) and over \
TCP only `ps`; migrations between nodes need the secret.\n\nExample:\n  head -c 32 /dev/urandom | base64 >~/.halfproc-secret; chmod 600 ~/.halfproc-secret\n  export HALFPROC_NODE_SECRET_FILE=~/.halfproc-secret\n  halfproc node --listen 127.0.0.1:7070 &\n  halfproc node --listen 127.0.0.1:7071 &\n  halfproc run -- ./my_program args     # in another terminal\n  halfproc ps\n  halfproc migrate PID --to 127.0.0.1:7071"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where the node daemon is (shared by the client subcommands).
#[derive(Args, Clone)]
pub struct NodeOpt {
    /// Node daemon to talk to: HOST:PORT, or unix:PATH for its control
    /// socket (see `halfproc node --control`); default $HALFPROC_NODE, else
    /// 127.0.0.1:7070. Without a secret, a loopback HOST:PORT is reached
    /// through that node's control socket when it has one in the default
    /// place (owner-checked; over TCP such a node serves `ps` only).
    #[arg(long, value_name = "HOST:PORT|unix:PATH")]
    node: Option<String>,
    /// The nodes' shared-secret file, if they use one (default $HALFPROC_NODE_SECRET_FILE).
    #[arg(long, value_name = "FILE")]
    secret_file: Option<std::path::PathBuf>,
}

impl NodeOpt {
    /// The daemon's address: a loopback `HOST:PORT` is reached through its
    /// control socket when this client has no secret (see `halfproc_node::rundir`).
    pub fn addr(&self) -> String {
        halfproc_node::client::node_addr(self.node.as_deref(), &self.ident())
    }

    /// This client's identity (the secret, if any); exits 2 if unreadable.
    pub fn ident(&self) -> halfproc_node::proto::Identity {
        match halfproc_node::proto::Identity::load(0, self.secret_file.as_deref()) {
            Ok(i) => i,
            Err(e) => {
                eprintln!("halfproc: {e}");
                std::process::exit(2)
            }
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Print the detected backend and which half-process semantics hold.
    Info(info::InfoArgs),
    /// Benchmarks: `bench copy` (intra-node copy strategies, the paper's
    /// Figs. 7/8), `bench mm` (mmap/fault overhead of the shared range,
    /// section 4.4.3), `bench apps` (the apps on DMI against MPI, Figs.
    /// 15-22; apps/bench.sh builds them and runs it) and `bench migrate`
    /// (checkpoint+restore throughput vs memcpy). `halfproc bench copy
    /// --help` lists options.
    Bench {
        /// `copy|mm|apps|migrate` and its options.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    Node(node::NodeArgs),
    Run(run::RunArgs),
    Ps(ps::PsArgs),
    Migrate(migrate::MigrateArgs),
    Checkpoint(checkpoint::CheckpointArgs),
    Restore(restore::RestoreArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Info(a) => info::run(a),
        Command::Bench { args } => {
            ExitCode::from(halfproc_bench::main_with_args(&args).clamp(0, 255) as u8)
        }
        Command::Node(a) => node::run(a),
        Command::Run(a) => run::run(a),
        Command::Ps(a) => ps::run(a),
        Command::Migrate(a) => migrate::run(a),
        Command::Checkpoint(a) => checkpoint::run(a),
        Command::Restore(a) => restore::run(a),
    }
}

/// Reports a failure to reach the node daemon and returns [`EXIT_NO_NODE`].
pub fn no_node(addr: &str, e: &std::io::Error) -> ExitCode {
    eprintln!("halfproc: cannot reach the node daemon at {addr}: {e}");
    eprintln!(
        "halfproc: start one with `halfproc node --listen {addr}` or set --node / $HALFPROC_NODE"
    );
    ExitCode::from(EXIT_NO_NODE)
}
