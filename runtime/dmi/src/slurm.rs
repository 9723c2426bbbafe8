// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Start-up under Slurm (`srun -n N prog`): the rank is `SLURM_PROCID`, the
//! node count `SLURM_NTASKS`, and the peers are found by a rendezvous at
//! rank 0, which runs on the step's first host (`SLURM_STEP_NODELIST`, or
//! `SLURM_JOB_NODELIST`).
//!
//! Rank 0 listens on a port derived from the job and step ids (so that
//! concurrent steps on one host do not meet), or on `DMI_SLURM_PORT`.
//! Every other rank binds its node socket on the address it reaches rank 0
//! from, connects, and sends one line `dmi-slurm JOB.STEP RANK HOST:PORT`;
//! when all have arrived rank 0 answers each with `peers ADDR0,ADDR1,...`
//! (its own address being the one that connection reached). A rank that
//! cannot reach rank 0, or a rank 0 that misses someone, fails after
//! `DMI_SLURM_TIMEOUT` seconds (default 30) naming what is missing.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::addr::NodeId;
use crate::error::DmiError;
use crate::hostlist;
use crate::runtime::Config;

/// The first port of the derived range (`BASE .. BASE + SPAN`).
const PORT_BASE: u64 = 20_000;
const PORT_SPAN: u64 = 12_000;

fn setup(s: String) -> DmiError {
    DmiError::Setup(format!("slurm: {s}"))
}

fn var(name: &str) -> Result<String, DmiError> {
    std::env::var(name).map_err(|_| setup(format!("{name} is not set (not inside `srun`?)")))
}

fn num<T: std::str::FromStr>(name: &str, v: &str) -> Result<T, DmiError> {
    v.trim()
        .parse()
        .map_err(|_| setup(format!("{name}={v:?} is not a number")))
}

fn first_var(names: &[&str]) -> Result<(String, String), DmiError> {
    names
        .iter()
        .find_map(|n| std::env::var(n).ok().map(|v| (n.to_string(), v)))
        .ok_or_else(|| setup(format!("none of {} is set", names.join(", "))))
}

/// Is this process a Slurm task that `dmi run` did not start?
pub fn detected() -> bool {
    std::env::var_os("DMI_RANK").is_none() && std::env::var_os("SLURM_PROCID").is_some()
}

/// What the environment of one Slurm task says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub rank: NodeId,
    pub size: usize,
    /// `JOB.STEP`, which every line of the rendezvous carries.
    pub step: String,
    /// The host rank 0 runs on, and the rendezvous port there.
    pub host0: String,
    pub port: u16,
    /// This task's host (`SLURMD_NODENAME`), if known.
    pub host: Option<String>,
    pub timeout: Duration,
}

/// The rendezvous port of a step: `DMI_SLURM_PORT`, or derived from ids.
pub fn port_of(job: u64, step: u64) -> u16 {
    (PORT_BASE + (job.wrapping_mul(16).wrapping_add(step)) % PORT_SPAN) as u16
}

impl Task {
    /// Reads the `SLURM_*` (and `DMI_SLURM_*`) variables.
    pub fn from_env() -> Result<Task, DmiError> {
        let rank: NodeId = num("SLURM_PROCID", &var("SLURM_PROCID")?)?;
        let (n_name, n) = first_var(&["SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"])?;
        let size: usize = num(&n_name, &n)?;
        if size == 0 || rank as usize >= size {
            return Err(setup(format!("SLURM_PROCID={rank} with {n_name}={size}")));
        }
        let job: u64 = num(
            "SLURM_JOB_ID",
            &first_var(&["SLURM_JOB_ID", "SLURM_JOBID"])?.1,
        )?;
        let (s_name, s) = first_var(&["SLURM_STEP_ID", "SLURM_STEPID"]).map_err(|_| {
            setup(
                "SLURM_PROCID is set but SLURM_STEP_ID is not: this is a job's batch script, \
                 not a job step (start the program with `srun`, or `dmi run`)"
                    .into(),
            )
        })?;
        let step: u64 = num(&s_name, &s)?;
        let (l_name, list) = first_var(&["SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"])?;
        let hosts = hostlist::expand(&list).map_err(|e| setup(format!("{l_name}: {e}")))?;
        let port = match std::env::var("DMI_SLURM_PORT") {
            Ok(p) => match num::<u16>("DMI_SLURM_PORT", &p)? {
                0 => return Err(setup("DMI_SLURM_PORT=0 is not a port".into())),
                p => p,
            },
            Err(_) => port_of(job, step),
        };
        let timeout = match std::env::var("DMI_SLURM_TIMEOUT") {
            Ok(t) => Duration::from_secs(num("DMI_SLURM_TIMEOUT", &t)?),
            Err(_) => Duration::from_secs(30),
        };
        Ok(Task {
            rank,
            size,
            step: format!("{job}.{step}"),
            host0: hosts[0].clone(),
            port,
            host: std::env::var("SLURMD_NODENAME").ok(),
            timeout,
        })
    }
}

/// The node configuration of this Slurm task (see the module docs).
pub fn config() -> Result<Config, DmiError> {
    let task = Task::from_env()?;
    let (peers, listener) = rendezvous(&task)?;
    Ok(Config {
        rank: task.rank,
        peers,
        listener: Some(listener),
        fatal_errors: std::env::var("DMI_ERRORS").map_or(true, |v| v != "return"),
        members: None,
        pool_pages: crate::runtime::pool_pages_from_env()?,
        secret: crate::auth::secret_from_env()?,
        accept_joins: false,
        join: None,
    })
}

/// Finds every rank's node address; returns them and this node's listener.
pub fn rendezvous(t: &Task) -> Result<(Vec<SocketAddr>, TcpListener), DmiError> {
    let deadline = Instant::now() + t.timeout;
    if t.size == 1 {
        let l = TcpListener::bind("127.0.0.1:0").map_err(|e| setup(format!("bind: {e}")))?;
        let a = l.local_addr().map_err(|e| setup(format!("bind: {e}")))?;
        return Ok((vec![a], l));
    }
    if t.rank == 0 {
        if let Some(h) = t.host.as_deref().filter(|h| *h != t.host0) {
            return Err(setup(format!(
                "rank 0 runs on {h}, not on the step's first host {} (use a block or cyclic distribution)",
                t.host0
            )));
        }
        serve(t, deadline)
    } else {
        join(t, deadline)
    }
}

fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// Rank 0: collects every other rank's address, then answers all.
fn serve(t: &Task, deadline: Instant) -> Result<(Vec<SocketAddr>, TcpListener), DmiError> {
    let rv = TcpListener::bind(("0.0.0.0", t.port)).map_err(|e| {
        setup(format!(
            "rank 0: binding the rendezvous port {}: {e} (set DMI_SLURM_PORT to another port)",
            t.port
        ))
    })?;
    let node = TcpListener::bind("0.0.0.0:0").map_err(|e| setup(format!("rank 0: bind: {e}")))?;
    let node_port = node
        .local_addr()
        .map_err(|e| setup(format!("rank 0: {e}")))?
        .port();
    rv.set_nonblocking(true)
        .map_err(|e| setup(format!("rank 0: {e}")))?;
    let mut peers: Vec<Option<SocketAddr>> = vec![None; t.size];
    let mut conns: Vec<(TcpStream, SocketAddr)> = Vec::new();
    while conns.len() + 1 < t.size {
        let s = match rv.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<String> = (1..t.size)
                        .filter(|&r| peers[r].is_none())
                        .map(|r| r.to_string())
                        .collect();
                    return Err(setup(format!(
                        "rank 0: rank(s) {} did not report within {} s",
                        missing.join(", "),
                        t.timeout.as_secs()
                    )));
                }
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(e) => return Err(setup(format!("rank 0: accept: {e}"))),
        };
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(remaining(deadline)));
        let mut line = String::new();
        if BufReader::new(&s).read_line(&mut line).is_err() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        // A connection from another step (or anything else) is not ours.
        if f.len() != 4 || f[0] != "dmi-slurm" || f[1] != t.step {
            continue;
        }
        let (Ok(r), Ok(a)) = (f[2].parse::<usize>(), f[3].parse::<SocketAddr>()) else {
            return Err(setup(format!("rank 0: malformed report {:?}", line.trim())));
        };
        if r == 0 || r >= t.size || peers[r].is_some() {
            return Err(setup(format!(
                "rank 0: report from rank {r}, which is out of range or already reported"
            )));
        }
        peers[r] = Some(a);
        let mine = s.local_addr().map_err(|e| setup(format!("rank 0: {e}")))?;
        conns.push((s, SocketAddr::new(mine.ip(), node_port)));
    }
    let rest: Vec<String> = peers[1..]
        .iter()
        .map(|p| p.map(|a| a.to_string()).unwrap_or_default())
        .collect();
    for (s, me) in &mut conns {
        let line = format!("peers {me},{}\n", rest.join(","));
        s.write_all(line.as_bytes())
            .map_err(|e| setup(format!("rank 0: answering: {e}")))?;
    }
    let me = conns[0].1;
    let mut all = vec![me];
    all.extend(peers[1..].iter().flatten());
    Ok((all, node))
}

/// Rank > 0: binds, reports to rank 0, waits for the list.
fn join(t: &Task, deadline: Instant) -> Result<(Vec<SocketAddr>, TcpListener), DmiError> {
    let who = format!("rank {}", t.rank);
    let targets: Vec<SocketAddr> = (t.host0.as_str(), t.port)
        .to_socket_addrs()
        .map_err(|e| setup(format!("{who}: resolving rank 0's host {}: {e}", t.host0)))?
        .collect();
    let s = loop {
        let mut err = None;
        let mut got = None;
        for a in &targets {
            match TcpStream::connect_timeout(a, Duration::from_secs(1)) {
                Ok(s) => {
                    got = Some(s);
                    break;
                }
                Err(e) => err = Some(e),
            }
        }
        if let Some(s) = got {
            break s;
        }
        if Instant::now() >= deadline {
            let e = err.map_or("no address".to_string(), |e| e.to_string());
            return Err(setup(format!(
                "{who}: rank 0 at {}:{} did not answer within {} s: {e}",
                t.host0,
                t.port,
                t.timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mine = s.local_addr().map_err(|e| setup(format!("{who}: {e}")))?;
    let node = TcpListener::bind((mine.ip(), 0)).map_err(|e| setup(format!("{who}: bind: {e}")))?;
    let addr = node
        .local_addr()
        .map_err(|e| setup(format!("{who}: {e}")))?;
    (&s).write_all(format!("dmi-slurm {} {} {addr}\n", t.step, t.rank).as_bytes())
        .map_err(|e| setup(format!("{who}: reporting to rank 0: {e}")))?;
    let _ = s.set_read_timeout(Some(remaining(deadline)));
    let mut line = String::new();
    BufReader::new(&s)
        .read_line(&mut line)
        .map_err(|e| setup(format!("{who}: waiting for rank 0's list of peers: {e}")))?;
    let list = line.trim().strip_prefix("peers ").ok_or_else(|| {
        setup(format!(
            "{who}: rank 0 closed the rendezvous without a list of peers (got {:?})",
            line.trim()
        ))
    })?;
    let peers = list
        .split(',')
        .map(str::parse)
        .collect::<Result<Vec<SocketAddr>, _>>()
        .map_err(|_| setup(format!("{who}: malformed list of peers {list:?}")))?;
    if peers.len() != t.size || peers[t.rank as usize] != addr {
        return Err(setup(format!(
            "{who}: list of peers {list:?} does not match {} tasks with this one at {addr}",
            t.size
        )));
    }
    Ok((peers, node))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(rank: NodeId, size: usize, port: u16) -> Task {
        Task {
            rank,
            size,
            step: "7.0".into(),
            host0: "localhost".into(),
            port,
            host: None,
            timeout: Duration::from_secs(10),
        }
    }

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[test]
    fn three_tasks_find_each_other() {
        let port = free_port();
        let hs: Vec<_> = (0..3)
            .map(|r| std::thread::spawn(move || rendezvous(&task(r, 3, port)).map(|(p, _)| p)))
            .collect();
        let lists: Vec<Vec<SocketAddr>> =
            hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
        assert_eq!(lists[0].len(), 3);
        assert_eq!(lists[0], lists[1]);
        assert_eq!(lists[1], lists[2]);
    }

    #[test]
    fn a_missing_rank_is_named() {
        let port = free_port();
        let mut t = task(0, 3, port);
        t.timeout = Duration::from_millis(500);
        let h = std::thread::spawn(move || {
            let mut t1 = task(1, 3, port);
            t1.timeout = Duration::from_secs(5);
            rendezvous(&t1).map(drop)
        });
        let e = rendezvous(&t).unwrap_err().to_string();
        assert!(e.contains("rank(s) 2 did not report"), "{e}");
        let e1 = h.join().unwrap().unwrap_err().to_string();
        assert!(e1.contains("rank 1"), "{e1}");
    }

    #[test]
    fn unreachable_rank0_is_an_error() {
        let mut t = task(1, 2, free_port());
        t.timeout = Duration::from_millis(300);
        let e = rendezvous(&t).unwrap_err().to_string();
        assert!(e.contains("rank 0 at localhost"), "{e}");
    }

    #[test]
    fn derived_ports_stay_in_range() {
        for (j, s) in [(0, 0), (1, 0), (u64::MAX, 3), (123_456, 9)] {
            let p = port_of(j, s) as u64;
            assert!((PORT_BASE..PORT_BASE + PORT_SPAN).contains(&p));
        }
        assert_ne!(port_of(5, 0), port_of(5, 1));
    }
}
