// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `halfproc node`: the node daemon.

use clap::Args;
use std::process::ExitCode;

/// Run the node daemon: the parent of the programs started with `halfproc
/// run` on this machine, which relays their stdio, checkpoints, restores and
/// migrates them to and from other node daemons.
///
/// Backend ($HALFPROC_BACKEND, else detection): on the kernel backend the
/// daemon leads a half-process set, starts programs as its members with
/// clone3(CLONE_HALFPROC) + execve and reads their memory with dmread; on
/// the portable backend a program is a plain child, read with
/// process_vm_readv.
/// Programs must be single-threaded; sockets, pipes to other processes,
/// devices and shared writable mappings are refused by `migrate`.
///
/// Clients (`run`, `ps`, `migrate`, `checkpoint`, `restore`) and other nodes
/// connect to the same TCP port. SIGINT/SIGTERM: stop accepting, finish
/// every migration in flight (commit or abort), then exit; programs keep
/// running, without their stdio relay.
///
/// Log on stderr: $HALFPROC_LOG filters it (RUST_LOG syntax, default
/// `info`); `HALFPROC_LOG=info,halfproc_node::program=debug` follows every
/// stdin request and answer of the relay.
#[derive(Args)]
#[command(
    after_help = "Prints `halfproc node: listening on ADDR (node ID)` and the detected runtime \
backend once ready. \
Exit codes: 0 after a clean shutdown, 1 if the address cannot be bound."
)]
pub struct NodeArgs {
    /// Address to listen on (TCP). Port 0 picks a free port (printed).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:7070")]
    listen: String,
    /// Address other nodes use to reach this one (default: the bound address).
    #[arg(long, value_name = "HOST:PORT")]
    advertise: Option<String>,
    /// Shared secret of the nodes (at least 16 bytes; default
    /// $HALFPROC_NODE_SECRET_FILE). With it, every peer (node or client) must
    /// prove it holds the same secret (HMAC-SHA256 challenge) before any
    /// request; without it, anyone who reaches the port is served.
    #[arg(long, value_name = "FILE")]
    secret_file: Option<std::path::PathBuf>,
    /// Also serve local clients on this unix socket (they connect with
    /// `--node unix:PATH`). The kernel tells the daemon who they are
    /// (SO_PEERCRED): a user may checkpoint or migrate only their own
    /// programs (root any), and a root daemon runs each user's programs as
    /// that user. With it, TCP serves only peers holding the shared secret.
    #[arg(long, value_name = "PATH")]
    control: Option<std::path::PathBuf>,
}

pub fn run(a: NodeArgs) -> ExitCode {
    init_log();
    let backend = match halfproc::backend::Backend::from_env() {
        Ok(b) => b.kind(),
        Err(e) => {
            eprintln!("halfproc node: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Kernel backend: lead this machine's set before any thread exists.
    let how = if backend == halfproc::backend::BackendKind::Kernel {
        if let Err(e) = halfproc_node::member::lead_set() {
            eprintln!("halfproc node: kernel backend: {e}");
            return ExitCode::FAILURE;
        }
        "programs are members of this node's set (clone3(CLONE_HALFPROC) + execve; \
         memory read with dmread)"
    } else {
        "programs are started as plain children (portable migration)"
    };
    let r = halfproc_node::daemon::run_node(
        &a.listen,
        a.advertise.as_deref(),
        a.secret_file.as_deref(),
        a.control.as_deref(),
        |addr, id| {
            // One write, errors ignored: whoever started us may read the first
            // line only and close the pipe.
            let msg = format!(
                "halfproc node: listening on {addr} (node {id:016x})\n\
             halfproc node: runtime backend {backend}; {how}\n"
            );
            let mut out = std::io::stdout().lock();
            let _ = std::io::Write::write_all(&mut out, msg.as_bytes());
            let _ = std::io::Write::flush(&mut out);
        },
    );
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("halfproc node: {}: {e}", a.listen);
            ExitCode::FAILURE
        }
    }
}

/// The daemon's log on stderr: `HALFPROC_LOG` is a filter in `RUST_LOG`
/// syntax (default `info`; `halfproc_node::program=debug` follows every
/// stdin request and answer of the relay).
fn init_log() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("HALFPROC_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}
