// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The Rust API: [`Dmi`], one per node process. A background thread runs a
//! tokio runtime with the connections and the node's engine (the protocol
//! core fed with messages and calls); the calls here block until their
//! outcome arrives, or return a [`Handle`] to wait on later.
//!
//! Environment (set by `dmi run`, or by hand): `DMI_RANK`, `DMI_SIZE`,
//! `DMI_PEERS` (comma-separated `host:port`, index = rank), optionally
//! `DMI_LISTEN_FD` (an inherited listening socket for this rank's address)
//! and `DMI_ERRORS=return` (a dead peer makes calls fail instead of ending
//! the process; the default ends it with status 3, like MPI's
//! `MPI_ERRORS_ARE_FATAL`). `DMI_POOL_PAGES=N` limits the pages this
//! node's pool holds (default: unlimited); past it pages move to other
//! nodes (`swap.rs`).

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::addr::{NodeId, ROOT};
use crate::epoch::Phase;
use crate::error::DmiError;
use crate::msg::{AppMsg, InstMsg, Msg, ReadMode, WriteMode};
use crate::node::{CallId, CallReq, Effects, Node, Outcome};
use crate::rmw::RmwTable;
use crate::transport::{connect_all, Frame, NetEvent};

/// Exit status of a node whose peer died (with the default error policy).
pub const PEER_FAILED_EXIT: i32 = 3;

/// Where this node is and who its peers are.
#[derive(Debug)]
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
        Ok(Config {
            members: None,
            pool_pages: pool_pages_from_env()?,
            rank,
            peers,
            listener,
            fatal_errors: std::env::var("DMI_ERRORS").map_or(true, |v| v != "return"),
        })
    }
}

enum Event {
    Net(NetEvent),
    Call(CallReq, oneshot::Sender<Outcome>),
    Finalize(oneshot::Sender<()>),
    /// Goodbye to every peer without waiting for theirs (a node that left
    /// the run, or a spare that never joined).
    Leave(oneshot::Sender<()>),
    /// Send an application message to a node.
    App(NodeId, AppMsg),
    /// Send a message about instances to a node (itself too).
    Inst(NodeId, InstMsg),
}

/// What the engine tells the application side of a node.
#[derive(Debug, Clone, PartialEq)]
pub enum AppEvent {
    /// An instruction of node 0.
    Msg(AppMsg),
    /// This node handed everything over and is no longer a member.
    Left,
}

/// A pending asynchronous call.
pub struct Handle {
    rx: oneshot::Receiver<Outcome>,
}

impl Handle {
    /// Waits for the outcome.
    pub fn wait(self) -> Outcome {
        self.rx
            .blocking_recv()
            .unwrap_or(Err(DmiError::NotInitialized))
    }
}

/// One node of a DMI run.
pub struct Dmi {
    rank: NodeId,
    peers: Vec<SocketAddr>,
    size: u32,
    tx: mpsc::UnboundedSender<Event>,
    app: std::sync::Mutex<std::sync::mpsc::Receiver<AppEvent>>,
    thread: Option<std::thread::JoinHandle<()>>,
    rmw: Arc<RmwTable>,
    /// In a compute instance: its mailbox to the node (`ring.rs`).
    link: Option<crate::ring::Link>,
    /// The node's page index (`pool.rs`; 0: none), for reads of hits
    /// without a call.
    index: usize,
}

/// Submits calls to a node's engine from another thread (`serve.rs`).
#[derive(Clone)]
pub struct Caller {
    tx: mpsc::UnboundedSender<Event>,
}

impl Caller {
    /// Runs `req` and waits for its outcome.
    pub fn call(&self, req: CallReq) -> Outcome {
        let (otx, rx) = oneshot::channel();
        if self.tx.send(Event::Call(req, otx)).is_err() {
            return Err(DmiError::NotInitialized);
        }
        rx.blocking_recv().unwrap_or(Err(DmiError::NotInitialized))
    }

    /// Sends `m` to node `to`'s host (`xmove::inbox`); to this node too.
    pub fn send_inst(&self, to: NodeId, m: InstMsg) -> Result<(), DmiError> {
        self.tx
            .send(Event::Inst(to, m))
            .map_err(|_| DmiError::NotInitialized)
    }
}

impl Dmi {
    /// Starts this node from the environment (see the module docs).
    pub fn from_env(rmw: Arc<RmwTable>) -> Result<Dmi, DmiError> {
        Dmi::start(Config::from_env()?, rmw)
    }

    /// Starts this node: connects to every peer, then serves.
    pub fn start(cfg: Config, rmw: Arc<RmwTable>) -> Result<Dmi, DmiError> {
        ignore_sigpipe();
        let rank = cfg.rank;
        let size = cfg.peers.len() as u32;
        let peers = cfg.peers.clone();
        let (tx, rx) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let tx2 = tx.clone();
        let rmw2 = rmw.clone();
        let (app_tx, app_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("dmi-node-{rank}"))
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(DmiError::Setup(format!("tokio: {e}"))));
                        return;
                    }
                };
                rt.block_on(engine(cfg, rmw2, tx2, rx, ready_tx, app_tx));
            })
            .map_err(|e| DmiError::Setup(format!("thread: {e}")))?;
        match ready_rx.recv() {
            Ok(Ok(index)) => Ok(Dmi {
                rank,
                peers,
                size,
                tx,
                app: std::sync::Mutex::new(app_rx),
                thread: Some(thread),
                rmw,
                link: None,
                index,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(DmiError::Setup(
                "the node thread ended during start-up".into(),
            )),
        }
    }

    pub fn rank(&self) -> NodeId {
        self.rank
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// The address of every node process, by rank.
    pub fn peers(&self) -> &[SocketAddr] {
        &self.peers
    }

    /// The root page's address (4096 bytes, zero at start, known to all).
    pub fn root(&self) -> i64 {
        ROOT.base()
    }

    /// The functions [`Dmi::atomic`] can run.
    pub fn rmw(&self) -> &RmwTable {
        &self.rmw
    }

    /// A compute instance's view of its node (calls go through `link`).
    pub(crate) fn instance(
        rank: NodeId,
        size: u32,
        rmw: Arc<RmwTable>,
        link: crate::ring::Link,
    ) -> Dmi {
        let (tx, _) = mpsc::unbounded_channel();
        let (_, app) = std::sync::mpsc::channel();
        let link = Some(link);
        Dmi {
            rank,
            peers: Vec::new(),
            size,
            tx,
            app: std::sync::Mutex::new(app),
            thread: None,
            rmw,
            link,
            index: 0,
        }
    }

    /// The page index to read hits from, if reads may use it: the node's
    /// own, or in an instance the one of the node it runs on now.
    fn frames(&self) -> Option<&'static crate::pool::Index> {
        if !crate::pool::fast_reads() {
            return None;
        }
        match &self.link {
            Some(l) => l.index(),
            // SAFETY: the node's store lives until `finalize` consumes self.
            None => unsafe { crate::pool::Index::at(self.index) },
        }
    }

    pub(crate) fn rmw_table(&self) -> Arc<RmwTable> {
        self.rmw.clone()
    }

    /// `DMI_yield`: in a compute instance, the point where its node may move
    /// it (`true` when it was moved); the node's own program never moves.
    pub fn yield_now(&self) -> Result<bool, DmiError> {
        match &self.link {
            Some(l) => l.yield_now(),
            None => Ok(false),
        }
    }

    /// A submitter for other threads of the node process.
    pub fn caller(&self) -> Result<Caller, DmiError> {
        if self.link.is_some() {
            return Err(DmiError::BadArgument(
                "a compute instance cannot create instances (only the node's program can)".into(),
            ));
        }
        Ok(Caller {
            tx: self.tx.clone(),
        })
    }

    /// Starts any call; wait on the handle for its outcome. (In a compute
    /// instance the call completes before this returns.)
    pub fn start_call(&self, req: CallReq) -> Handle {
        if let Some(l) = &self.link {
            let (otx, rx) = oneshot::channel();
            let _ = otx.send(l.call(req));
            return Handle { rx };
        }
        let (otx, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError(Event::Call(_, otx))) =
            self.tx.send(Event::Call(req, otx))
        {
            let _ = otx.send(Err(DmiError::NotInitialized));
        }
        Handle { rx }
    }

    fn call(&self, req: CallReq) -> Outcome {
        self.start_call(req).wait()
    }

    /// `DMI_mmap`: `page_num` pages of `page_size` bytes; returns the address.
    pub fn mmap(&self, page_size: i64, page_num: i64) -> Result<i64, DmiError> {
        let b = self.call(CallReq::Mmap {
            page_size,
            page_num,
        })?;
        let a: [u8; 8] = b
            .try_into()
            .map_err(|_| DmiError::Setup("malformed mmap answer".into()))?;
        Ok(i64::from_le_bytes(a))
    }

    pub fn munmap(&self, addr: i64) -> Result<(), DmiError> {
        self.call(CallReq::Munmap { addr }).map(drop)
    }

    /// `DMI_read`: fills `buf` from `[addr, addr + buf.len())`.
    pub fn read(&self, addr: i64, buf: &mut [u8], mode: ReadMode) -> Result<(), DmiError> {
        // A hit (an owned page at rest, or a valid copy) is served the same
        // in every mode; anything else goes to the engine.
        if self.frames().is_some_and(|ix| ix.read(addr, buf)) {
            return Ok(());
        }
        if let Some(l) = &self.link {
            return l.read(addr, buf, mode);
        }
        let out = self.call(CallReq::Read {
            items: vec![(addr, buf.len() as i64)],
            mode,
        })?;
        buf.copy_from_slice(&out);
        Ok(())
    }

    /// `DMI_write`: writes `buf` at `addr`.
    pub fn write(&self, addr: i64, buf: &[u8], mode: WriteMode) -> Result<(), DmiError> {
        self.call(CallReq::Write {
            items: vec![(addr, buf.to_vec())],
            mode,
        })
        .map(drop)
    }

    /// `DMI_group_read`: one request per home for all the ranges.
    pub fn group_read(
        &self,
        items: &mut [(i64, &mut [u8])],
        mode: ReadMode,
    ) -> Result<(), DmiError> {
        if let Some(ix) = self.frames() {
            // Each page is an independent access: hits may be served from
            // the frames one by one; any miss sends the whole call.
            if items.iter_mut().all(|(a, b)| ix.read(*a, b)) {
                return Ok(());
            }
        }
        let req = items.iter().map(|(a, b)| (*a, b.len() as i64)).collect();
        let out = self.call(CallReq::Read { items: req, mode })?;
        let mut at = 0;
        for (_, b) in items.iter_mut() {
            b.copy_from_slice(&out[at..at + b.len()]);
            at += b.len();
        }
        Ok(())
    }

    /// `DMI_group_write`.
    pub fn group_write(&self, items: &[(i64, &[u8])], mode: WriteMode) -> Result<(), DmiError> {
        let items = items.iter().map(|(a, b)| (*a, b.to_vec())).collect();
        self.call(CallReq::Write { items, mode }).map(drop)
    }

    /// Runs registered function `func` at the owner of `[addr, addr+size)`.
    pub fn atomic(&self, addr: i64, size: i64, func: u32, arg: &[u8]) -> Result<Vec<u8>, DmiError> {
        self.call(CallReq::Rmw {
            addr,
            size,
            func,
            arg: arg.to_vec(),
        })
    }

    pub fn lock(&self, addr: i64) -> Result<(), DmiError> {
        self.call(CallReq::Lock { addr }).map(drop)
    }

    pub fn unlock(&self, addr: i64) -> Result<(), DmiError> {
        self.call(CallReq::Unlock { addr }).map(drop)
    }

    /// Waits until every node reached the barrier.
    pub fn barrier(&self) -> Result<(), DmiError> {
        self.call(CallReq::Barrier).map(drop)
    }

    /// Waits for the next instruction of node 0, or for this node's leave
    /// to complete (`reconf.rs`).
    pub fn next_app_event(&self) -> Result<AppEvent, DmiError> {
        let rx = self.app.lock().unwrap_or_else(|e| e.into_inner());
        rx.recv().map_err(|_| DmiError::NotInitialized)
    }

    /// Like [`Dmi::next_app_event`], giving up after `timeout` (`Err`).
    pub fn app_event_timeout(&self, timeout: Duration) -> Result<AppEvent, DmiError> {
        let rx = self.app.lock().unwrap_or_else(|e| e.into_inner());
        rx.recv_timeout(timeout)
            .map_err(|_| DmiError::NotInitialized)
    }

    /// Sends an instruction to node `to` (from node 0).
    pub fn send_app(&self, to: NodeId, m: AppMsg) -> Result<(), DmiError> {
        self.tx
            .send(Event::App(to, m))
            .map_err(|_| DmiError::NotInitialized)
    }

    /// The members of the current epoch (sorted ranks).
    pub fn members(&self) -> Result<Vec<NodeId>, DmiError> {
        let b = self.call(CallReq::Members)?;
        Ok(b.chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect())
    }

    /// Node 0: change the membership; returns what moved.
    pub fn rescale_nodes(
        &self,
        join: Vec<NodeId>,
        leave: Vec<NodeId>,
    ) -> Result<crate::epoch::RescaleStats, DmiError> {
        let b = self.call(CallReq::Rescale { join, leave })?;
        crate::epoch::RescaleStats::from_bytes(&b)
            .ok_or_else(|| DmiError::Setup("malformed rescale answer".into()))
    }

    /// Goodbye to every peer without a barrier, and shutdown: for a node
    /// that left the run or never joined it.
    pub fn leave(mut self) {
        let (otx, orx) = oneshot::channel();
        if self.tx.send(Event::Leave(otx)).is_ok() {
            let _ = orx.blocking_recv();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Waits until `count` callers (on any nodes) reached this barrier.
    pub fn barrier_of(&self, count: u32) -> Result<(), DmiError> {
        self.call(CallReq::BarrierOf(count)).map(drop)
    }

    /// Barrier, goodbye to every peer, and shutdown.
    pub fn finalize(mut self) -> Result<(), DmiError> {
        if let (Some(l), Some(_)) = (&self.link, crate::host::ranks()) {
            // A movable run's program: the final barrier of all instances.
            return l.finish();
        }
        if self.link.is_some() {
            return Err(DmiError::BadArgument(
                "DMI_finalize in a compute instance (the node's program finalizes)".into(),
            ));
        }
        let r = self.barrier();
        let (otx, orx) = oneshot::channel();
        if self.tx.send(Event::Finalize(otx)).is_ok() {
            let _ = orx.blocking_recv();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        r
    }
}

/// The node's event loop: owns the protocol core.
async fn engine(
    cfg: Config,
    rmw: Arc<RmwTable>,
    tx: mpsc::UnboundedSender<Event>,
    mut rx: mpsc::UnboundedReceiver<Event>,
    ready: std::sync::mpsc::Sender<Result<usize, DmiError>>,
    app: std::sync::mpsc::Sender<AppEvent>,
) {
    let me = cfg.rank;
    let n = cfg.peers.len() as u32;
    let listener = match cfg.listener {
        Some(l) => l,
        None => match std::net::TcpListener::bind(cfg.peers[me as usize]) {
            Ok(l) => l,
            Err(e) => {
                let _ = ready.send(Err(DmiError::Setup(format!(
                    "bind {}: {e}",
                    cfg.peers[me as usize]
                ))));
                return;
            }
        },
    };
    let listener = match listener
        .set_nonblocking(true)
        .and_then(|_| tokio::net::TcpListener::from_std(listener))
    {
        Ok(l) => l,
        Err(e) => {
            let _ = ready.send(Err(DmiError::Setup(format!("listener: {e}"))));
            return;
        }
    };
    let (ntx, mut nrx) = mpsc::unbounded_channel();
    let peers = match connect_all(me, &cfg.peers, listener, ntx).await {
        Ok(p) => p,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    tokio::spawn(async move {
        while let Some(ev) = nrx.recv().await {
            if tx.send(Event::Net(ev)).is_err() {
                return;
            }
        }
    });
    let store = crate::pool::Store::for_node();
    let _ = ready.send(Ok(store.index_addr()));
    let mut node = match cfg.members {
        Some(m) if me >= m => Node::spare(me, rmw),
        Some(m) => Node::with_first(me, m, rmw),
        None => Node::new(me, n, rmw),
    };
    node.set_pool_pages(cfg.pool_pages);
    node.set_store(store);
    let mut left = false;
    let mut waiting: HashMap<CallId, oneshot::Sender<Outcome>> = HashMap::new();
    let mut byes: HashSet<NodeId> = HashSet::new();
    let mut finalize: Option<oneshot::Sender<()>> = None;
    // SIGUSR1 prints the protocol state (pages, owners, pending accesses).
    let mut usr1 =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1()).ok();
    loop {
        let ev = tokio::select! {
            ev = rx.recv() => ev,
            Some(()) = async { match usr1.as_mut() { Some(s) => s.recv().await, None => None } } => {
                report(&node.debug_state());
                continue;
            }
        };
        let Some(ev) = ev else { break };
        let mut fx = Effects::default();
        match ev {
            Event::Call(req, otx) => {
                let c = node.start(req, &mut fx);
                waiting.insert(c, otx);
            }
            Event::Net(NetEvent::Msg(_, Msg::App(m))) => {
                let _ = app.send(AppEvent::Msg(m));
            }
            Event::Net(NetEvent::Msg(from, Msg::Inst(m))) => crate::xmove::inbox(from, m),
            Event::Inst(to, m) if to == me => crate::xmove::inbox(me, m),
            Event::Inst(to, m) => match peers.get(to as usize).and_then(Option::as_ref) {
                Some(p) => {
                    let _ = p.send(Frame::Msg(Msg::Inst(m)));
                }
                None => crate::xmove::peer_dead(to),
            },
            Event::Net(NetEvent::Msg(from, m)) => node.handle(from, m, &mut fx),
            Event::App(to, m) => {
                if let Some(p) = peers.get(to as usize).and_then(Option::as_ref) {
                    let _ = p.send(Frame::Msg(Msg::App(m)));
                }
            }
            Event::Leave(otx) => {
                for p in peers.iter().flatten() {
                    let _ = p.send(Frame::Bye);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                let _ = otx.send(());
                return;
            }
            Event::Net(NetEvent::Bye(from)) => {
                byes.insert(from);
            }
            Event::Net(NetEvent::Dead(from, reason)) => {
                crate::xmove::peer_dead(from);
                if !byes.contains(&from) {
                    let peer = cfg.peers[from as usize];
                    report(&format!(
                        "dmi: node {me}: node {from} ({peer}) failed: {reason}"
                    ));
                    node.fail(
                        DmiError::NodeFailed {
                            node: from,
                            reason: reason.clone(),
                        },
                        &mut fx,
                    );
                    for p in peers.iter().flatten() {
                        let _ = p.send(Frame::Abort {
                            node: from,
                            reason: reason.clone(),
                        });
                    }
                    if cfg.fatal_errors {
                        report(&format!(
                            "dmi: node {me}: stopping (set DMI_ERRORS=return to handle it instead)"
                        ));
                        // Let the writers flush the aborts.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        std::process::exit(PEER_FAILED_EXIT);
                    }
                    byes.insert(from);
                }
            }
            Event::Finalize(otx) => {
                for p in peers.iter().flatten() {
                    let _ = p.send(Frame::Bye);
                }
                finalize = Some(otx);
            }
        }
        deliver(&mut node, &peers, fx, &mut waiting);
        if !left && node.phase() == Phase::Left {
            left = true;
            let _ = app.send(AppEvent::Left);
        }
        if finalize.is_some() && byes.len() + 1 >= n as usize {
            // Let the writers flush their goodbyes.
            tokio::time::sleep(Duration::from_millis(20)).await;
            if let Some(f) = finalize.take() {
                let _ = f.send(());
            }
            return;
        }
    }
}

/// A peer that said goodbye may close its end while a heartbeat is on its
/// way: the write must fail with EPIPE, not kill the process (a C program
/// keeps SIGPIPE's default action). Only a default disposition is changed.
fn ignore_sigpipe() {
    // SAFETY: sigaction only reads and writes the two local structs; the
    // handler is replaced only when it was the default one.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_DFL
        {
            let mut ign: libc::sigaction = std::mem::zeroed();
            ign.sa_sigaction = libc::SIG_IGN;
            libc::sigaction(libc::SIGPIPE, &ign, std::ptr::null_mut());
        }
    }
}

/// Writes one line to stderr with a single write, so that lines of several
/// nodes sharing a terminal or pipe do not interleave.
fn report(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// Sends what the core produced and answers finished calls.
fn deliver(
    node: &mut Node,
    peers: &[Option<mpsc::UnboundedSender<Frame>>],
    mut fx: Effects,
    waiting: &mut HashMap<CallId, oneshot::Sender<Outcome>>,
) {
    loop {
        let sends = std::mem::take(&mut fx.sends);
        if sends.is_empty() {
            break;
        }
        for (to, m) in sends {
            match peers.get(to as usize).and_then(Option::as_ref) {
                Some(p) => {
                    let _ = p.send(Frame::Msg(m));
                }
                None => {
                    let me = node.rank();
                    node.handle(me, m, &mut fx);
                }
            }
        }
    }
    for (c, out) in fx.done {
        if let Some(w) = waiting.remove(&c) {
            let _ = w.send(out);
        }
    }
}
