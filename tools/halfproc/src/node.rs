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
/// Other nodes connect to the TCP port; they must hold the same shared
/// secret (--secret-file). Local clients (`run`, `ps`, `migrate`,
/// `checkpoint`, `restore`) use the unix control socket, where the kernel
/// tells the daemon who they are; a client with the secret may also use
/// TCP. Without a secret the daemon listens on loopback only and serves
/// `ps` alone over TCP. SIGINT/SIGTERM: stop accepting, finish
/// every migration in flight (commit or abort), then exit; programs keep
/// running, without their stdio relay.
///
/// A migration in is offered first, before its source stops the program:
/// the daemon answers with what it can tell without the image (the source
/// admitted, the owner's uid possible here, --max-programs, memory) and
/// holds what it accepts for $HALFPROC_OFFER_HOLD_MS (default 60000)
/// until the image comes.
///
/// Log on stderr: $HALFPROC_LOG filters it (RUST_LOG syntax, default
/// `info`); `HALFPROC_LOG=info,halfproc_node::program=debug` follows every
/// stdin request and answer of the relay.
#[derive(Args)]
#[command(
    after_help = "Prints `halfproc node: listening on ADDR (node ID)`, the detected runtime \
backend and the control socket once ready. \
Exit codes: 0 after a clean shutdown, 1 if the address or the control socket cannot be bound, \
2 for a bad secret file or a non-loopback address without a secret."
)]
pub struct NodeArgs {
    /// Address to listen on (TCP). Port 0 picks a free port (printed).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:7070")]
    listen: String,
    /// Address other nodes use to reach this one (default: the bound address).
    #[arg(long, value_name = "HOST:PORT")]
    advertise: Option<String>,
    /// Shared secret of the nodes (at least 16 bytes; default
    /// $HALFPROC_NODE_SECRET_FILE). With it, every TCP peer (node or client)
    /// must prove it holds the same secret (HMAC-SHA256 challenge) before
    /// any request, and every frame after that carries an HMAC. Without it
    /// the daemon listens on loopback only, and over TCP serves `ps` only:
    /// no migrations between nodes.
    #[arg(long, value_name = "FILE")]
    secret_file: Option<std::path::PathBuf>,
    /// Serve local clients on this unix socket (they connect with `--node
    /// unix:PATH`). Default DIR/node-PORT.sock, DIR being $HALFPROC_RUN_DIR,
    /// else /run/halfproc for root, else $XDG_RUNTIME_DIR/halfproc, else
    /// /tmp/halfproc-UID; there clients without a secret find it from the
    /// loopback HOST:PORT. The kernel tells the daemon who they are
    /// (SO_PEERCRED): a user may checkpoint or migrate only their own
    /// programs (root any), and a root daemon runs each user's programs as
    /// that user.
    #[arg(long, value_name = "PATH")]
    control: Option<std::path::PathBuf>,
    /// Take in no migration that would make more than N programs run here
    /// (accepted offers on their way count). A source asks before it stops
    /// its program, so a full node costs the program nothing.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_programs: Option<u64>,
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
    // Refused before anything is bound: no secret, not loopback.
    let secret = match halfproc_node::proto::Identity::load(0, a.secret_file.as_deref()) {
        Ok(i) => i.secret.is_some(),
        Err(e) => {
            eprintln!("halfproc node: {e}");
            return ExitCode::from(2);
        }
    };
    if let Ok(addrs) = std::net::ToSocketAddrs::to_socket_addrs(a.listen.as_str()) {
        for sa in addrs {
            if let Err(e) = halfproc_node::access::check_listen(&sa, secret) {
                eprintln!("halfproc node: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let r = halfproc_node::daemon::run_node(
        &a.listen,
        a.advertise.as_deref(),
        a.secret_file.as_deref(),
        a.control.as_deref(),
        halfproc_node::admission::Limits {
            max_programs: a.max_programs.map(|n| n as usize),
        },
        |addr, id, control| {
            // One write, errors ignored: whoever started us may read the first
            // line only and close the pipe.
            let msg = format!(
                "halfproc node: listening on {addr} (node {id:016x})\n\
             halfproc node: runtime backend {backend}; {how}\n\
             halfproc node: control socket {} (local clients: --node unix:{0})\n",
                control.display()
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
