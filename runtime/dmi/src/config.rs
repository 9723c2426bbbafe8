// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! A node's configuration: from `dmi run`'s environment (`DMI_RANK`,
//! `DMI_SIZE`, `DMI_PEERS`, `DMI_LISTEN_FD`, `DMI_ERRORS`, `DMI_POOL_PAGES`,
//! `DMI_SECRET_FILE`, `DMI_ACCEPT_JOINS`), from Slurm's (`slurm.rs`), or,
//! for a node joining a running program, `DMI_JOIN` (`join.rs`).

use std::net::SocketAddr;

use crate::addr::NodeId;
use crate::error::DmiError;

/// Where this node is and who its peers are.
#[derive(Debug, Default)]
pub struct Config {
    pub rank: NodeId,
    pub peers: Vec<SocketAddr>,
    /// An already bound listener for `peers[rank]`.
    pub listener: Option<std::net::TcpListener>,
    /// End the process when a peer dies (else calls return the error).
    pub fatal_errors: bool,
    /// Ranks below this are members at start, the others spares that join
    /// later (None: all are members). `reconf::run` sets it to 1.
    pub members: Option<u32>,
    /// The most pages this node's pool holds (None: unlimited).
    pub pool_pages: Option<usize>,
    /// The run's secret (`auth.rs`; empty: none).
    pub secret: Vec<u8>,
    /// Node 0 accepts nodes from outside while `DMI_rescale` runs.
    pub accept_joins: bool,
    /// This process joins a running program instead (`rank` and `peers`
    /// come from node 0's welcome).
    pub join: Option<crate::join::JoinCfg>,
}

/// `DMI_POOL_PAGES`: a number of pages greater than 0, or unset.
pub fn pool_pages_from_env() -> Result<Option<usize>, DmiError> {
    let Ok(v) = std::env::var("DMI_POOL_PAGES") else {
        return Ok(None);
    };
    match v.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(DmiError::Setup(format!(
            "DMI_POOL_PAGES={v:?} is not valid (the pool's size in pages, a number greater than 0)"
        ))),
    }
}

fn env(name: &str) -> Result<String, DmiError> {
    std::env::var(name).map_err(|_| {
        DmiError::Setup(format!(
            "{name} is not set (start the program with `dmi run -n N prog` or `srun -n N prog`)"
        ))
    })
}

impl Config {
    /// Reads `DMI_RANK`, `DMI_SIZE`, `DMI_PEERS`, `DMI_LISTEN_FD`, `DMI_ERRORS`;
    /// under `srun` without them, the `SLURM_*` variables (`slurm.rs`).
    pub fn from_env() -> Result<Config, DmiError> {
        if let Some(join) = crate::join::JoinCfg::from_env()? {
            return Ok(Config {
                rank: 0,
                peers: Vec::new(),
                listener: None,
                fatal_errors: std::env::var("DMI_ERRORS").map_or(true, |v| v != "return"),
                members: None,
                pool_pages: pool_pages_from_env()?,
                secret: crate::auth::secret_from_env()?,
                accept_joins: false,
                join: Some(join),
            });
        }
        if crate::slurm::detected() {
            return crate::slurm::config();
        }
        let bad = |what: &str, v: &str| DmiError::Setup(format!("{what}={v:?} is not valid"));
        let rank_s = env("DMI_RANK")?;
        let size_s = env("DMI_SIZE")?;
        let rank: NodeId = rank_s.parse().map_err(|_| bad("DMI_RANK", &rank_s))?;
        let size: usize = size_s.parse().map_err(|_| bad("DMI_SIZE", &size_s))?;
        let peers_s = env("DMI_PEERS")?;
        let peers = peers_s
            .split(',')
            .map(|p| p.trim().parse::<SocketAddr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| bad("DMI_PEERS", &peers_s))?;
        if peers.len() != size || rank as usize >= size {
            return Err(DmiError::Setup(format!(
                "DMI_RANK={rank}, DMI_SIZE={size} and {} DMI_PEERS do not agree",
                peers.len()
            )));
        }
        let listener = match std::env::var("DMI_LISTEN_FD") {
            Ok(fd) => {
                let fd: i32 = fd.parse().map_err(|_| bad("DMI_LISTEN_FD", &fd))?;
                // SAFETY: fstat only reads the descriptor's metadata into a
                // local, zero-initialised struct.
                let st = unsafe {
                    let mut st: libc::stat = std::mem::zeroed();
                    (libc::fstat(fd, &mut st) == 0).then_some(st)
                };
                if st.is_none_or(|s| s.st_mode & libc::S_IFMT != libc::S_IFSOCK) {
                    return Err(bad("DMI_LISTEN_FD", &fd.to_string()));
                }
                use std::os::fd::FromRawFd;
                // SAFETY: the launcher passed us this listening socket for
                // our own use (checked above to be a socket); nothing else
                // in this process owns it, and the variable is removed so
                // it is taken only once.
                let l = unsafe { std::net::TcpListener::from_raw_fd(fd) };
                // SAFETY: no other thread reads or writes the environment
                // during start-up of the node.
                unsafe { std::env::remove_var("DMI_LISTEN_FD") };
                Some(l)
            }
            Err(_) => None,
        };
        let secret = crate::auth::secret_from_env()?;
        let accept_joins = std::env::var("DMI_ACCEPT_JOINS").is_ok_and(|v| v == "1");
        if accept_joins && secret.is_empty() {
            return Err(DmiError::Setup(
                "DMI_ACCEPT_JOINS=1 needs the run's secret (DMI_SECRET_FILE; dmi run --secret-file F)"
                    .into(),
            ));
        }
        Ok(Config {
            members: None,
            pool_pages: pool_pages_from_env()?,
            secret,
            accept_joins,
            join: None,
            rank,
            peers,
            listener,
            fatal_errors: std::env::var("DMI_ERRORS").map_or(true, |v| v != "return"),
        })
    }
}
