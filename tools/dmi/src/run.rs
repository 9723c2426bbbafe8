// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `dmi run`: the loopback launcher.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use clap::Args;

/// One line on stderr in one `write` (Rust's stderr is unbuffered, so
/// `eprintln!` may split a line into several writes, and the nodes write
/// to the same stderr: their lines cut ours).
macro_rules! say {
    ($($t:tt)*) => {{
        let line = format!("{}\n", format_args!($($t)*));
        let _ = std::io::stderr().write_all(line.as_bytes());
    }};
}

/// Start N nodes on this machine, each running PROG as a compute instance.
///
/// Every node is a process running PROG ARGS with DMI_RANK (0..N-1),
/// DMI_SIZE (N), DMI_PEERS (the loopback addresses of all nodes, by rank)
/// and DMI_LISTEN_FD (its already bound listening socket) in its
/// environment; DMI_init() reads them and connects the nodes pairwise.
/// `dmi run` exits 0 when every node did; otherwise it names each node that
/// failed, stops the others after --grace seconds, and exits 1.
#[derive(Args)]
pub struct RunArgs {
    /// Number of nodes.
    #[arg(short = 'n', long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    nodes: u32,
    /// Prefix every output line with the node's rank ("[2] ...").
    #[arg(long)]
    prefix: bool,
    /// Print each node's pid and address on start (to stderr).
    #[arg(long)]
    verbose: bool,
    /// Seconds the other nodes get to notice a failed node and stop on
    /// their own before they are killed.
    #[arg(long, default_value_t = 10)]
    grace: u64,
    /// Reconfigurable programs (DMI_main): K more nodes join once the
    /// program called DMI_check_rescale ITER times (spare node processes,
    /// started now, idle until then). Repeatable.
    #[arg(long, value_name = "ITER:K", value_parser = parse_change)]
    grow_at: Vec<(u64, u32)>,
    /// Reconfigurable programs: the K highest-ranked nodes (never node 0)
    /// leave once DMI_check_rescale was called ITER times. Repeatable.
    #[arg(long, value_name = "ITER:K", value_parser = parse_change)]
    shrink_at: Vec<(u64, u32)>,
    /// Reconfigurable programs: K spare node processes (idle until `dmi
    /// node join` brings one in).
    #[arg(long, default_value_t = 0)]
    spares: u32,
    /// Reconfigurable programs: node 0 listens on this Unix socket for
    /// `dmi node join` and `dmi node leave RANK`.
    #[arg(long, value_name = "PATH")]
    control: Option<std::path::PathBuf>,
    /// Run each node's program (from DMI_init on) as a compute instance of
    /// the node, so DMI_yield() can move it to another node (DMI_MOVE_AT=
    /// N:RANK@NODE); --grow-at/--shrink-at ITER:K then count yields, and
    /// the instances of leaving nodes move to the others.
    #[arg(long)]
    movable: bool,
    /// The address the nodes listen on (default 127.0.0.1); another
    /// machine's nodes reach them there.
    #[arg(long, value_name = "IP", default_value = "127.0.0.1")]
    bind: std::net::IpAddr,
    /// The run's secret: the nodes prove it to each other on every
    /// connection (a challenge answered with an HMAC; the file is never
    /// sent). Mode 600; its trailing newline is ignored.
    #[arg(long, value_name = "FILE")]
    secret_file: Option<std::path::PathBuf>,
    /// Reconfigurable programs: node 0 accepts nodes from outside while
    /// DMI_rescale runs (`dmi node join --run HOST:PORT --secret-file FILE
    /// PROG`, from any machine that reaches --bind). Needs --secret-file.
    #[arg(long, requires = "secret_file")]
    accept_joins: bool,
    /// Reconfigurable programs: K itergroup threads on every member node
    /// (the paper's one thread per core), ranks of one node consecutive;
    /// DMI_judge_rescale sees core_num K.
    #[arg(long, value_name = "K", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=16))]
    threads_per_node: u32,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    prog: Vec<String>,
}

fn parse_change(s: &str) -> Result<(u64, u32), String> {
    let (i, k) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: want ITER:K"))?;
    let i = i
        .parse()
        .map_err(|_| format!("{s:?}: ITER is not a number"))?;
    match k.parse() {
        Ok(k) if k >= 1 => Ok((i, k)),
        _ => Err(format!("{s:?}: K must be a number of at least 1")),
    }
}

fn describe(s: ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (_, Some(sig)) => format!("was killed by signal {sig}"),
        _ => "ended".into(),
    }
}

fn pipe_lines(
    rank: u32,
    r: impl std::io::Read + Send + 'static,
    err: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines().map_while(Result::ok) {
            if err {
                let _ = writeln!(std::io::stderr(), "[{rank}] {line}");
            } else {
                let _ = writeln!(std::io::stdout(), "[{rank}] {line}");
            }
        }
    })
}

pub fn run(a: RunArgs) -> i32 {
    let spares: u32 = a.grow_at.iter().map(|g| g.1).sum::<u32>() + a.spares;
    let total = a.nodes + spares;
    // Itergroup thread ids are not reused: every node that ever joins
    // takes K of them. (With K = 1 a run that is not reconfigurable may
    // have more nodes; a reconfigurable one finds out at the join.)
    if a.threads_per_node > 1 && total * a.threads_per_node > dmi::reconf::MAX_THREADS as u32 {
        say!(
            "dmi run: --threads-per-node {} on {total} node(s) (with spares) needs up to {} \
             itergroup threads; a run has at most {}",
            a.threads_per_node,
            total * a.threads_per_node,
            dmi::reconf::MAX_THREADS
        );
        return 2;
    }
    let schedule: Vec<String> = a
        .grow_at
        .iter()
        .map(|(i, k)| format!("grow:{i}:{k}"))
        .chain(a.shrink_at.iter().map(|(i, k)| format!("shrink:{i}:{k}")))
        .collect();
    if let Some(f) = &a.secret_file {
        if let Err(e) = dmi::auth::read_secret(f) {
            say!("dmi run: {e}");
            return 1;
        }
    }
    let mut listeners = Vec::new();
    for _ in 0..total {
        match TcpListener::bind((a.bind, 0)) {
            Ok(l) => listeners.push(l),
            Err(e) => {
                say!("dmi run: cannot listen on {}: {e}", a.bind);
                return 1;
            }
        }
    }
    let peers: Vec<String> = listeners
        .iter()
        .filter_map(|l| l.local_addr().ok().map(|a| a.to_string()))
        .collect();
    let peers = peers.join(",");
    let mut children: Vec<Option<Child>> = Vec::new();
    let mut pipes = Vec::new();
    for (rank, l) in listeners.iter().enumerate() {
        let fd = l.as_raw_fd();
        let mut cmd = Command::new(&a.prog[0]);
        cmd.args(&a.prog[1..])
            .env("DMI_RANK", rank.to_string())
            .env("DMI_SIZE", total.to_string())
            .env("DMI_INITIAL", a.nodes.to_string())
            .env("DMI_SCHEDULE", schedule.join(","))
            .env("DMI_PEERS", &peers)
            .env("DMI_LISTEN_FD", fd.to_string());
        if a.movable {
            cmd.env("DMI_MOVABLE", "1");
        }
        if let Some(c) = &a.control {
            cmd.env("DMI_CONTROL", c);
        }
        if let Some(f) = &a.secret_file {
            cmd.env("DMI_SECRET_FILE", f);
        }
        if a.accept_joins {
            cmd.env("DMI_ACCEPT_JOINS", "1");
        }
        // Always: a value in the caller's environment must not win.
        cmd.env("DMI_THREADS_PER_NODE", a.threads_per_node.to_string());
        if a.prefix {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        let movable = a.movable;
        // SAFETY: between fork and exec this only calls fcntl on a
        // descriptor the child inherited, which is async-signal-safe; it
        // keeps this node's listening socket open across exec. A movable
        // run also closes the other descriptors above stderr it inherited
        // (a caller's pipes would keep its instances from being moved);
        // close_range is async-signal-safe too.
        unsafe {
            cmd.pre_exec(move || {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if movable {
                    if fd > 3 {
                        libc::syscall(libc::SYS_close_range, 3u32, (fd - 1) as u32, 0u32);
                    }
                    libc::syscall(libc::SYS_close_range, (fd + 1) as u32, u32::MAX, 0u32);
                }
                Ok(())
            })
        };
        match cmd.spawn() {
            Ok(mut c) => {
                if a.verbose {
                    let at = l.local_addr().map_or(String::new(), |a| a.to_string());
                    say!("dmi run: node {rank} pid {} at {at}", c.id());
                }
                if let Some(o) = c.stdout.take() {
                    pipes.push(pipe_lines(rank as u32, o, false));
                }
                if let Some(e) = c.stderr.take() {
                    pipes.push(pipe_lines(rank as u32, e, true));
                }
                children.push(Some(c));
            }
            Err(e) => {
                say!("dmi run: cannot start {:?} for node {rank}: {e}", a.prog[0]);
                for c in children.iter_mut().flatten() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return 1;
            }
        }
    }
    if a.accept_joins {
        say!(
            "dmi run: node 0 accepts joins at {} (dmi node join --run {} --secret-file FILE PROG ARGS)",
            peers.split(',').next().unwrap_or(""),
            peers.split(',').next().unwrap_or("")
        );
    }
    drop(listeners);
    let mut failed = Vec::new();
    let mut first_failure: Option<Instant> = None;
    loop {
        let mut running = 0;
        for (rank, slot) in children.iter_mut().enumerate() {
            let Some(c) = slot else { continue };
            match c.try_wait() {
                Ok(Some(s)) => {
                    if !s.success() {
                        say!("dmi run: node {rank} (pid {}) {}", c.id(), describe(s));
                        failed.push(rank);
                        first_failure.get_or_insert_with(Instant::now);
                    }
                    *slot = None;
                }
                Ok(None) => running += 1,
                Err(e) => {
                    say!("dmi run: waiting for node {rank}: {e}");
                    failed.push(rank);
                    *slot = None;
                }
            }
        }
        if running == 0 {
            break;
        }
        if first_failure.is_some_and(|t| t.elapsed() > Duration::from_secs(a.grace)) {
            for (rank, slot) in children.iter_mut().enumerate() {
                if let Some(c) = slot {
                    say!(
                        "dmi run: node {rank} still running {} s after a failure: killing it",
                        a.grace
                    );
                    let _ = c.kill();
                    let _ = c.wait();
                    failed.push(rank);
                    *slot = None;
                }
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for p in pipes {
        let _ = p.join();
    }
    if failed.is_empty() {
        0
    } else {
        failed.sort_unstable();
        failed.dedup();
        say!(
            "dmi run: FAILED: node(s) {failed:?} of {} did not succeed",
            total
        );
        1
    }
}
