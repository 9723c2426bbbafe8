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
//! nodes (`swap.rs`). `DMI_SECRET_FILE` (the run's secret, `auth.rs`),
//! `DMI_ACCEPT_JOINS=1` (node 0 takes nodes from outside) and `DMI_JOIN`
//! (this process joins a running program, `join.rs`): `config.rs`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::addr::{NodeId, ROOT};
use crate::error::DmiError;
use crate::flow::{Flow, FlowStats, Reserve, DEFAULT_SEND_QUEUE};
use crate::msg::{AppMsg, InstMsg, ReadMode, WriteMode};
use crate::node::{CallReq, Outcome};
use crate::rmw::RmwTable;
use crate::transport::{ignore_sigpipe, Late, NetEvent};

/// Exit status of a node whose peer died (with the default error policy).
pub const PEER_FAILED_EXIT: i32 = 3;

pub use crate::config::{pool_pages_from_env, Config};

pub(crate) enum Event {
    /// What a connection reported; a message holds inbound credit until
    /// the engine handled it (`flow.rs`).
    Net(NetEvent, Option<crate::flow::Credit>),
    /// A call, and its bytes reserved in the flow control until the engine
    /// started it (`flow.rs`).
    Call(CallReq, oneshot::Sender<Outcome>, Option<Reserve>),
    Finalize(oneshot::Sender<()>),
    /// Goodbye to every peer without waiting for theirs (a node that left
    /// the run, or a spare that never joined).
    Leave(oneshot::Sender<()>),
    /// Send an application message to a node.
    App(NodeId, AppMsg),
    /// Send a message about instances to a node (itself too).
    Inst(NodeId, InstMsg),
    /// One of this node's instances failed and the node goes on
    /// (`DMI_ERRORS=return`): every node's barriers fail from now on,
    /// naming it (`Msg::BarrierPoison`).
    Poison(String),
    /// A connection accepted after start-up (a joining node).
    Late(Late),
    /// Node 0: open (true) or close joins from outside.
    Joins(bool),
}

/// What a call may send, for its reservation (`flow.rs`): its data, and a
/// header's worth per range.
fn call_bytes(req: &CallReq) -> usize {
    const HEADER: usize = 64;
    match req {
        CallReq::Write { items, .. } => items.iter().map(|(_, b)| b.len() + HEADER).sum(),
        CallReq::Read { items, .. } => items.len() * HEADER,
        CallReq::Rmw { arg, .. } => arg.len() + HEADER,
        _ => HEADER,
    }
}

/// Every node's address by rank (None: unknown or gone); grows as nodes
/// join.
pub(crate) type Addrs = Arc<std::sync::Mutex<Vec<Option<SocketAddr>>>>;

/// What the engine reports once it is connected.
pub(crate) struct Started {
    pub(crate) rank: NodeId,
    pub(crate) size: u32,
    /// A joiner's copy of node 0's run variables (`join::RUN_VARS`).
    pub(crate) run_vars: Option<Vec<(String, String)>>,
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
    addrs: Addrs,
    size: u32,
    run_vars: Option<Vec<(String, String)>>,
    /// Node 0: joiners connected to every node, for the control thread.
    joined: std::sync::Mutex<std::sync::mpsc::Receiver<NodeId>>,
    tx: mpsc::UnboundedSender<Event>,
    app: std::sync::Mutex<std::sync::mpsc::Receiver<AppEvent>>,
    thread: Option<std::thread::JoinHandle<()>>,
    rmw: Arc<RmwTable>,
    /// In a compute instance: its mailbox to the node (`ring.rs`).
    link: Option<crate::ring::Link>,
    /// The node's page index (`pool.rs`; 0: none), for reads of hits
    /// without a call.
    index: usize,
    /// Back-pressure: calls wait while the send queues are full.
    flow: Arc<Flow>,
}

/// Submits calls to a node's engine from another thread (`serve.rs`).
#[derive(Clone)]
pub struct Caller {
    tx: mpsc::UnboundedSender<Event>,
    flow: Arc<Flow>,
}

impl Caller {
    /// Runs `req` and waits for its outcome.
    pub fn call(&self, req: CallReq) -> Outcome {
        let r = self.flow.admit(call_bytes(&req));
        let (otx, rx) = oneshot::channel();
        if self.tx.send(Event::Call(req, otx, Some(r))).is_err() {
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

    /// Makes every node's barriers fail with `why` ([`Event::Poison`]).
    /// Does not wait for the engine: it may be called on its thread.
    pub fn poison_barriers(&self, why: String) -> Result<(), DmiError> {
        self.tx
            .send(Event::Poison(why))
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
        let flow = Flow::from_env()?;
        let flow2 = flow.clone();
        let name = match cfg.join {
            Some(_) => "dmi-node-joining".to_string(),
            None => format!("dmi-node-{}", cfg.rank),
        };
        let addrs: Addrs = Arc::default();
        let addrs2 = addrs.clone();
        let (joined_tx, joined_rx) = std::sync::mpsc::channel();
        let (tx, rx) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let tx2 = tx.clone();
        let rmw2 = rmw.clone();
        let (app_tx, app_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(name)
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
                let io = crate::engine::Io {
                    tx: tx2,
                    rx,
                    ready: ready_tx,
                    app: app_tx,
                    addrs: addrs2,
                    joined: joined_tx,
                    flow: flow2,
                };
                rt.block_on(crate::engine::engine(cfg, rmw2, io));
            })
            .map_err(|e| DmiError::Setup(format!("thread: {e}")))?;
        match ready_rx.recv() {
            Ok(Ok((st, index))) => Ok(Dmi {
                rank: st.rank,
                addrs,
                size: st.size,
                run_vars: st.run_vars,
                joined: std::sync::Mutex::new(joined_rx),
                tx,
                app: std::sync::Mutex::new(app_rx),
                thread: Some(thread),
                rmw,
                link: None,
                index,
                flow,
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

    /// What this node's back-pressure saw so far (`flow.rs`).
    pub fn flow_stats(&self) -> FlowStats {
        self.flow.stats()
    }

    pub fn rank(&self) -> NodeId {
        self.rank
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// The number of node ranks this node knows of: the run's size plus
    /// the nodes that joined from outside (`join.rs`).
    pub fn nodes(&self) -> u32 {
        self.addrs.lock().unwrap_or_else(|e| e.into_inner()).len() as u32
    }

    /// Where node `id` listens (None: unknown).
    pub fn peer_addr(&self, id: NodeId) -> Option<SocketAddr> {
        let a = self.addrs.lock().unwrap_or_else(|e| e.into_inner());
        a.get(id as usize).copied().flatten()
    }

    /// A variable of the run (`join::RUN_VARS`): a node that joined from
    /// outside has node 0's values, the others their environment's.
    pub fn run_var(&self, name: &str) -> Option<String> {
        match &self.run_vars {
            Some(v) => v.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()),
            None => std::env::var(name).ok(),
        }
    }

    /// Node 0: accept joins from outside (`open`), or stop accepting.
    pub fn open_joins(&self, open: bool) -> Result<(), DmiError> {
        self.tx
            .send(Event::Joins(open))
            .map_err(|_| DmiError::NotInitialized)
    }

    /// Node 0: the next node from outside that is connected to every node
    /// and waits to be brought in.
    pub fn next_joined(&self) -> Option<NodeId> {
        let rx = self.joined.lock().unwrap_or_else(|e| e.into_inner());
        rx.try_recv().ok()
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
        let (_, joined) = std::sync::mpsc::channel();
        let link = Some(link);
        Dmi {
            rank,
            addrs: Arc::default(),
            size,
            run_vars: None,
            joined: std::sync::Mutex::new(joined),
            tx,
            app: std::sync::Mutex::new(app),
            thread: None,
            rmw,
            link,
            index: 0,
            // An instance's calls go through its node, whose callers wait.
            flow: Flow::new(DEFAULT_SEND_QUEUE),
        }
    }

    /// The page index to read hits from, if reads may use it: the node's
    /// own, or in an instance the one of the node it runs on now.
    fn frames(&self) -> Option<&'static crate::pool::Index> {
        if !crate::pool::fast_reads() {
            return None;
        }
        self.node_frames()
    }

    /// The page index to write hits to, if writes may use it (as
    /// [`Dmi::frames`]; `pool_write.rs`).
    fn write_frames(&self) -> Option<&'static crate::pool::Index> {
        if !crate::pool::fast_writes() {
            return None;
        }
        self.node_frames()
    }

    /// A write into the frames: in a compute instance with its journal
    /// (its node completes or drops the write if the instance dies in it).
    fn write_hit(&self, ix: &crate::pool::Index, items: &[(i64, &[u8])]) -> bool {
        match &self.link {
            Some(l) => ix.write_journaled(items, l.journal()),
            None => ix.write(items),
        }
    }

    fn node_frames(&self) -> Option<&'static crate::pool::Index> {
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
            flow: self.flow.clone(),
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
        // A fast caller waits here while the send queues are full.
        let r = self.flow.admit(call_bytes(&req));
        let (otx, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError(Event::Call(_, otx, _))) =
            self.tx.send(Event::Call(req, otx, Some(r)))
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
        // A hit (pages owned here at rest, nobody else holding them) is
        // applied the same in both modes; anything else goes to the engine.
        if self
            .write_frames()
            .is_some_and(|ix| self.write_hit(ix, &[(addr, buf)]))
        {
            return Ok(());
        }
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
        // All pages are written from the frames, or none (then the engine
        // takes the whole call).
        if self
            .write_frames()
            .is_some_and(|ix| self.write_hit(ix, items))
        {
            return Ok(());
        }
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
        let r = self.call(CallReq::FinalBarrier).map(drop);
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
