// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! A node from outside joins a running program (`dmi node join --run
//! HOST:PORT`, `DMI_JOIN`): the joiner's side of the handshake, and what
//! node 0 answers.
//!
//! ```text
//!  joiner J                      node 0 (or any node: Redirect to node 0)     node k
//!  connect ------------------->  Challenge(nonce)
//!  Join(addr, mac) ----------->  check the mac; accepting? (DMI_rescale runs
//!                                in a run started with --accept-joins)
//!                <-------------  Welcome(rank R, size, addresses, run vars)
//!                                or Refused(why)
//!  connect to every live node k -------------------------------------------> Challenge
//!  Hello(R, addr, mac) ----------------------------------------------------> check; a peer
//!  Connected ----------------->  the control thread records a live join
//!                <-------------  AppMsg::Admitted: J is a spare now; the
//!                                controller brings it in at the next
//!                                DMI_check_rescale (epoch change, Spawn)
//! ```

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use futures_util::SinkExt;
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};

use crate::addr::NodeId;
use crate::auth;
use crate::config::Config;
use crate::error::DmiError;
use crate::flow::{SendQ, Wire};
use crate::runtime::{Addrs, Started};
use crate::transport::{
    connect_all, dial, encode, next_frame, spawn_peer, wrong_protocol, Conn, Frame, PROTOCOL,
};

/// How long a joiner waits for each step.
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(10);

/// The variables of node 0's environment a joiner takes over: they decide
/// how every node derives the rescale requests (`reconf.rs`).
pub const RUN_VARS: [&str; 5] = [
    "DMI_INITIAL",
    "DMI_SCHEDULE",
    "DMI_CONTROL",
    "DMI_ACCEPT_JOINS",
    "DMI_THREADS_PER_NODE",
];

/// Node 0's answer to a join it accepts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Welcome {
    /// The joiner's rank.
    pub rank: NodeId,
    /// The number of nodes the run was started with (`DMI_SIZE`).
    pub size: u32,
    /// Every node's address by rank (None: gone); the joiner's own too.
    pub peers: Vec<Option<SocketAddr>>,
    /// Node 0's values of [`RUN_VARS`].
    pub vars: Vec<(String, String)>,
}

/// Whether node 0 accepts joins now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepting {
    /// The run was not started with `--accept-joins`.
    Never,
    /// `DMI_rescale` has not started yet.
    NotYet,
    Open,
    /// `DMI_rescale` returned: the program is ending.
    Over,
}

impl Accepting {
    /// Why a join is refused now (None: it is accepted).
    pub fn refusal(self) -> Option<String> {
        match self {
            Accepting::Open => None,
            Accepting::Never => Some(
                "the run does not accept joins (start it with dmi run --accept-joins --secret-file F)"
                    .into(),
            ),
            Accepting::NotYet => {
                Some("the run does not accept joins yet (DMI_rescale has not started); try again".into())
            }
            Accepting::Over => Some("the run is ending (DMI_rescale returned)".into()),
        }
    }
}

/// The request a join answers the challenge for.
pub fn join_what(addr: SocketAddr) -> Vec<u8> {
    format!("join {addr}").into_bytes()
}

/// Where to join, from `DMI_JOIN` (`HOST:PORT` of any node of the run) and
/// `DMI_JOIN_LISTEN` (the address to listen on; default: the one the
/// connection to the run leaves from).
#[derive(Debug, Clone)]
pub struct JoinCfg {
    pub run: String,
    pub listen: Option<IpAddr>,
}

impl JoinCfg {
    pub fn from_env() -> Result<Option<JoinCfg>, DmiError> {
        let Ok(run) = std::env::var("DMI_JOIN") else {
            return Ok(None);
        };
        let listen = match std::env::var("DMI_JOIN_LISTEN") {
            Ok(v) => Some(v.parse::<IpAddr>().map_err(|_| {
                DmiError::Setup(format!("DMI_JOIN_LISTEN={v:?} is not an IP address"))
            })?),
            Err(_) => None,
        };
        Ok(Some(JoinCfg { run, listen }))
    }
}

/// A joiner that has its rank and a connection to every node.
pub struct Joined {
    pub welcome: Welcome,
    pub listener: TcpListener,
    /// (rank, connection) for node 0 and every other live node.
    pub conns: Vec<(NodeId, Conn)>,
}

fn fail(run: &str, what: String) -> DmiError {
    DmiError::Setup(format!("joining the run at {run}: {what}"))
}

async fn connect(addr: &str) -> Result<TcpStream, String> {
    match tokio::time::timeout(JOIN_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(format!("cannot connect: {e}")),
        Err(_) => Err(format!(
            "cannot connect: no answer within {} s",
            JOIN_TIMEOUT.as_secs()
        )),
    }
}

/// The joiner's side: asks the run at `cfg.run` to join (following one
/// redirect to node 0), then connects to every live node.
pub async fn join(cfg: &JoinCfg, secret: &[u8]) -> Result<Joined, DmiError> {
    let run = cfg.run.as_str();
    let mut target = run.to_string();
    let mut hops = 0;
    let (welcome, listener, my_addr, conn0) = loop {
        let s = connect(&target).await.map_err(|e| fail(run, e))?;
        let ip = match cfg.listen {
            Some(ip) => ip,
            None => s.local_addr().map_err(|e| fail(run, e.to_string()))?.ip(),
        };
        let listener = TcpListener::bind((ip, 0))
            .await
            .map_err(|e| fail(run, format!("cannot listen on {ip}: {e}")))?;
        let my_addr = listener
            .local_addr()
            .map_err(|e| fail(run, e.to_string()))?;
        let deadline = tokio::time::Instant::now() + JOIN_TIMEOUT;
        let mut f = tokio_util::codec::Framed::new(s, crate::transport::codec());
        let nonce = match next_frame(&mut f, deadline).await {
            Some(Frame::Challenge { nonce, proto }) if proto == PROTOCOL => nonce,
            Some(Frame::Challenge { proto, .. }) => {
                return Err(fail(
                    run,
                    format!("{target} speaks {}", wrong_protocol(proto)),
                ))
            }
            _ => {
                return Err(fail(
                    run,
                    format!("{target} is not a DMI node (no challenge)"),
                ))
            }
        };
        let mac = auth::answer(secret, &nonce, &join_what(my_addr));
        f.send(encode(&Frame::Join {
            addr: my_addr,
            mac,
            proto: PROTOCOL,
        }))
        .await
        .map_err(|e| fail(run, e.to_string()))?;
        match next_frame(&mut f, deadline).await {
            Some(Frame::Welcome(w)) => break (w, listener, my_addr, f),
            Some(Frame::Refused { reason }) => return Err(fail(run, format!("refused: {reason}"))),
            Some(Frame::Redirect { to }) if hops == 0 => {
                hops += 1;
                target = to.to_string();
            }
            _ => {
                return Err(fail(
                    run,
                    format!("{target} closed the connection without an answer"),
                ))
            }
        }
    };
    let me = welcome.rank;
    let mut conns = vec![(0, conn0)];
    for (k, addr) in welcome.peers.iter().enumerate() {
        let k = k as NodeId;
        let Some(addr) = *addr else { continue };
        if k == 0 || k == me {
            continue;
        }
        let deadline = tokio::time::Instant::now() + JOIN_TIMEOUT;
        let s = connect(&addr.to_string())
            .await
            .map_err(|e| fail(run, format!("node {k} at {addr}: {e}")))?;
        conns.push((k, dial(me, my_addr, k, addr, secret, s, deadline).await?));
    }
    Ok(Joined {
        welcome,
        listener,
        conns,
    })
}

/// Node 0's values of [`RUN_VARS`].
pub fn run_vars() -> Vec<(String, String)> {
    RUN_VARS
        .iter()
        .filter_map(|&k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect()
}

/// A connection accepted after start-up, at the engine: a joined node's
/// hello becomes its peer connection; a join at node 0 is welcomed (a new
/// rank, its address recorded, `pending` until it is connected to every
/// node) or refused with why (`how`).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn late(
    (me, size): (NodeId, u32),
    late: crate::transport::Late,
    how: Accepting,
    peers: &mut Peers,
    addrs: &std::sync::Mutex<Vec<Option<SocketAddr>>>,
    byes: &std::collections::HashSet<NodeId>,
    events: &Wire,
    pending: &mut std::collections::HashSet<NodeId>,
) {
    use crate::transport::{refuse, Late};
    let lock = || addrs.lock().unwrap_or_else(|e| e.into_inner());
    match late {
        Late::Peer { rank, addr, conn } => {
            let mut addrs = lock();
            let r = rank as usize;
            if r >= peers.len() {
                peers.resize_with(r + 1, || None);
                addrs.resize(r + 1, None);
            }
            if rank == me || peers[r].is_some() || byes.contains(&rank) {
                refuse(conn, format!("node {me} already knows a node {rank}"));
                return;
            }
            peers[r] = Some(spawn_peer(rank, conn, events.clone()));
            addrs[r] = Some(addr);
        }
        Late::Join { addr, mut conn } => {
            if let Some(why) = how.refusal() {
                crate::transport::report(&format!(
                    "dmi: node {me}: refused a join from {addr}: {why}"
                ));
                refuse(conn, why);
                return;
            }
            let rank = peers.len().max(lock().len()) as NodeId;
            let mut known: Vec<Option<SocketAddr>> = lock()
                .iter()
                .enumerate()
                .map(|(k, a)| a.filter(|_| !byes.contains(&(k as NodeId))))
                .collect();
            known.resize(rank as usize, None);
            known.push(Some(addr));
            let w = Welcome {
                rank,
                size,
                peers: known,
                vars: run_vars(),
            };
            if conn.send(encode(&Frame::Welcome(w))).await.is_err() {
                return;
            }
            peers.resize_with(rank as usize, || None);
            peers.push(Some(spawn_peer(rank, conn, events.clone())));
            let mut addrs = lock();
            addrs.resize(rank as usize, None);
            addrs.push(Some(addr));
            pending.insert(rank);
            crate::transport::report(&format!("dmi: node {me}: node {rank} at {addr} is joining"));
        }
    }
}

pub(crate) type Peers = Vec<Option<SendQ>>;

/// Connects this node: to every peer of the run (start-up), or, for a
/// joiner, through node 0's welcome. Returns the rank, the run's size, a
/// joiner's run variables, the listener and the connections.
pub(crate) async fn connect_node(
    cfg: &Config,
    addrs: &Addrs,
    ntx: &Wire,
) -> Result<(Started, tokio::net::TcpListener, Peers), DmiError> {
    if let Some(j) = &cfg.join {
        if cfg.members.is_none() {
            return Err(DmiError::Setup(
                "a node joins only a reconfigurable program (DMI_main, dmi::reconf)".into(),
            ));
        }
        let jd = join(j, &cfg.secret).await?;
        let w = jd.welcome;
        let mut peers: Peers = (0..w.peers.len()).map(|_| None).collect();
        for (k, c) in jd.conns {
            peers[k as usize] = Some(spawn_peer(k, c, ntx.clone()));
        }
        if let Some(p) = &peers[0] {
            let _ = p.send(Frame::Connected);
        }
        *addrs.lock().unwrap_or_else(|e| e.into_inner()) = w.peers;
        let st = Started {
            rank: w.rank,
            size: w.size,
            run_vars: Some(w.vars),
        };
        return Ok((st, jd.listener, peers));
    }
    let me = cfg.rank;
    let listener = match &cfg.listener {
        Some(l) => l.try_clone(),
        None => std::net::TcpListener::bind(cfg.peers[me as usize]),
    }
    .map_err(|e| DmiError::Setup(format!("bind {}: {e}", cfg.peers[me as usize])))?;
    let listener = listener
        .set_nonblocking(true)
        .and_then(|_| tokio::net::TcpListener::from_std(listener))
        .map_err(|e| DmiError::Setup(format!("listener: {e}")))?;
    let peers = connect_all(me, &cfg.peers, &listener, &cfg.secret, ntx.clone()).await?;
    *addrs.lock().unwrap_or_else(|e| e.into_inner()) = cfg.peers.iter().map(|&a| Some(a)).collect();
    let st = Started {
        rank: me,
        size: cfg.peers.len() as u32,
        run_vars: None,
    };
    Ok((st, listener, peers))
}
