// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `dmi node join` / `dmi node leave RANK|HOST[:PORT]` / `dmi node list`:
//! requests to a running
//! reconfigurable program through its control socket (`dmi run --control
//! PATH --spares K`), and `dmi node join --run HOST:PORT PROG`: a new node
//! process, started here, that joins a running program from outside.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use clap::{Args, Subcommand};

/// Make a node join or leave a running reconfigurable program.
///
/// The program (DMI_main) runs under `dmi run`. A join brings a node in, a
/// leave hands over everything node RANK holds and ends it; both take
/// effect at the next DMI_check_rescale of the running itergroup (or when
/// it ends), where the rescale barriers hand the data over.
///
/// Two kinds of join:
///
///   dmi node --control PATH join       the next spare started with the run
///                                      (dmi run --spares K --control PATH)
///
///   dmi node join --run HOST:PORT --secret-file FILE -- PROG ARGS
///                                      a new node, started here (on any
///                                      machine that reaches the run): it runs
///                                      PROG ARGS (the run's program), proves
///                                      the run's secret to node 0, becomes a
///                                      spare and is brought in; it runs until
///                                      the program ends or it leaves. The run
///                                      was started with `dmi run
///                                      --accept-joins --secret-file FILE`,
///                                      which prints HOST:PORT.
///
/// Examples:
///   dmi run -n 1 --accept-joins --secret-file s --control /tmp/c ./prog &
///   dmi node join --run 127.0.0.1:40123 --secret-file s -- ./prog
///   dmi node --control /tmp/c list               members and their addresses
///   dmi node --control /tmp/c leave 1
///   dmi node --control /tmp/c leave 10.0.2.2:40125
#[derive(Args)]
#[command(verbatim_doc_comment)]
pub struct NodeArgs {
    /// The run's control socket (for a spare's join, and for leave).
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// Bring a node into the run: the next spare (--control before `join`),
    /// or a new node started here (--run HOST:PORT PROG ARGS).
    Join(JoinArgs),
    /// Make a node leave the run (not node 0): by RANK, or by the address
    /// it listens at, HOST:PORT (or the IP alone when only one member
    /// listens there; `dmi node list` shows them).
    Leave {
        #[arg(value_name = "RANK|HOST[:PORT]")]
        node: String,
    },
    /// List the run's member nodes: RANK=ADDRESS each.
    List,
}

#[derive(Args)]
struct JoinArgs {
    /// Start a new node here that joins the run whose node 0 (or any node:
    /// it answers with node 0's address) listens at HOST:PORT.
    #[arg(long, value_name = "HOST:PORT", requires = "prog")]
    run: Option<String>,
    /// The run's secret (the file given to dmi run --secret-file; default
    /// $DMI_SECRET_FILE).
    #[arg(long, value_name = "FILE", requires = "run")]
    secret_file: Option<PathBuf>,
    /// The address the new node listens on for the run's nodes (default:
    /// the one its connection to the run leaves from).
    #[arg(long, value_name = "IP", requires = "run")]
    listen: Option<std::net::IpAddr>,
    /// The run's program and its arguments, as its nodes run it.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    prog: Vec<String>,
}

pub fn node(a: NodeArgs) -> i32 {
    let line = match (a.what, &a.control) {
        (What::Join(j), _) if j.run.is_some() => return join_from_outside(j),
        (What::Join(j), _) if !j.prog.is_empty() => {
            eprintln!("dmi node join: a program to start needs --run HOST:PORT");
            return 2;
        }
        (_, None) => {
            eprintln!(
                "dmi node: give the run's control socket (dmi node --control PATH join|leave|list), \
                 or start a new node with dmi node join --run HOST:PORT PROG"
            );
            return 2;
        }
        (What::Join(_), Some(_)) => "join\n".to_string(),
        (What::Leave { node }, Some(_)) if node.split_whitespace().count() != 1 => {
            eprintln!("dmi node leave: {node:?} is not one rank or address");
            return 2;
        }
        (What::Leave { node }, Some(_)) => format!("leave {node}\n"),
        (What::List, Some(_)) => "list\n".to_string(),
    };
    let control = a.control.unwrap_or_default();
    let r = UnixStream::connect(&control).and_then(|mut s| {
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.write_all(line.as_bytes())?;
        let mut reply = String::new();
        BufReader::new(&s).read_line(&mut reply)?;
        Ok(reply)
    });
    match r {
        Ok(reply) if reply.starts_with("ok") => {
            print!("{reply}");
            0
        }
        Ok(reply) => {
            eprint!(
                "dmi node: {}",
                if reply.is_empty() {
                    "no answer\n"
                } else {
                    &reply
                }
            );
            1
        }
        Err(e) => {
            eprintln!("dmi node: {}: {e}", control.display());
            1
        }
    }
}

/// Starts PROG as a node that joins the run at `--run` (`DMI_JOIN`; the
/// runtime does the handshake, `dmi::join`) and waits for it.
fn join_from_outside(j: JoinArgs) -> i32 {
    let run = j.run.unwrap_or_default();
    let secret = j
        .secret_file
        .or_else(|| std::env::var_os("DMI_SECRET_FILE").map(PathBuf::from));
    let Some(secret) = secret else {
        eprintln!(
            "dmi node join: the run's secret is needed: --secret-file FILE (or DMI_SECRET_FILE)"
        );
        return 2;
    };
    if let Err(e) = dmi::auth::read_secret(&secret) {
        eprintln!("dmi node join: {e}");
        return 2;
    }
    let mut cmd = Command::new(&j.prog[0]);
    cmd.args(&j.prog[1..])
        .env("DMI_JOIN", &run)
        .env("DMI_SECRET_FILE", &secret);
    // The run's own variables come from node 0's welcome.
    for v in [
        "DMI_RANK",
        "DMI_SIZE",
        "DMI_PEERS",
        "DMI_LISTEN_FD",
        "DMI_JOIN_LISTEN",
        "DMI_MOVABLE",
    ]
    .into_iter()
    .chain(dmi::join::RUN_VARS)
    {
        cmd.env_remove(v);
    }
    if let Some(ip) = j.listen {
        cmd.env("DMI_JOIN_LISTEN", ip.to_string());
    }
    let st = match cmd.status() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("dmi node join: cannot start {:?}: {e}", j.prog[0]);
            return 1;
        }
    };
    match (st.code(), st.signal()) {
        (Some(0), _) => 0,
        (Some(c), _) => {
            eprintln!("dmi node join: the node joining {run} exited with status {c}");
            c
        }
        (_, sig) => {
            eprintln!(
                "dmi node join: the node joining {run} was killed by signal {}",
                sig.unwrap_or(0)
            );
            1
        }
    }
}
