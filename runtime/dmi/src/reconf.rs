// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Reconfigurable programs (dmi-reconfiguration sec. 4, Figs. 6-9):
//! `DMI_main`, `DMI_rescale(addr, init_node_num)`, `DMI_itergroup(rank,
//! pnum, addr)`, `DMI_check_rescale()` with the program's
//! `DMI_judge_rescale(...)`.
//!
//! Node 0 runs the program's `main`; every other node process waits for
//! node 0's instructions. `rescale` is Figs. 8-9's `DMI_rescale`: it keeps
//! `$thread_num`, `$exit_flag`, `$ranks[]` and `$flags[]` in global memory
//! (a region of 8-byte pages, `Var`), creates the itergroup threads (node
//! 0's are threads of this process, the others are started with
//! `AppMsg::Spawn`), and synchronises with them through barriers A, B and
//! C of `pnum + 1` participants, which are themselves built on global
//! memory (a fetch-and-add counter and a generation word). Nodes join
//! (an epoch change, `epoch.rs`) before barrier A and leave after it, so a
//! leaving node hands its pages over while the next itergroup computes.
//! Each member node runs `DMI_THREADS_PER_NODE` itergroup threads (`dmi
//! run --threads-per-node K`, default 1: the paper's one thread per core,
//! `core_num` K), with consecutive ranks.

use std::cell::RefCell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::addr::NodeId;
use crate::error::DmiError;
use crate::msg::{AppMsg, ReadMode, WriteMode};
use crate::runtime::{AppEvent, Dmi};
use crate::schedule::{self, Change, Request};

/// Most itergroup threads (nodes) a run can have.
pub const MAX_THREADS: usize = 64;

/// A node as `DMI_judge_rescale` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub id: NodeId,
    pub core_num: u32,
    pub addr: std::net::SocketAddr,
}

/// A reconfigurable program: the paper's three functions.
pub trait Program: Send + Sync {
    /// `DMI_main(argc, argv)`: runs on node 0; calls [`rescale`].
    fn main(&self, dmi: &Dmi, args: &[String]);
    /// `DMI_itergroup(rank, pnum, addr)`: one itergroup of one thread; 0
    /// (from rank 0) ends the computation.
    fn itergroup(&self, dmi: &Dmi, rank: i32, pnum: i32, addr: i64) -> i32;
    /// `DMI_judge_rescale(in, out, cur)`: whether `check_rescale` ends the
    /// itergroup now (default: when any node joins or leaves, Fig. 7).
    fn judge_rescale(
        &self,
        in_nodes: &[NodeInfo],
        out_nodes: &[NodeInfo],
        _cur: &[NodeInfo],
    ) -> bool {
        !in_nodes.is_empty() || !out_nodes.is_empty()
    }
}

/// The global variables of Figs. 8-9 (one 8-byte page each) and the
/// barrier's two words.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Var {
    ThreadNum,
    ExitFlag,
    /// `DMI_check_rescale` calls so far, at the end of the last itergroup.
    Checks,
    /// Requests already applied.
    Consumed,
    InitNodeNum,
    BarrierCount,
    BarrierGen,
    /// Live requests (`dmi node join/leave`, `reconf_ctl.rs`): joins and
    /// leaves asked for so far, and how many of each the controller applied.
    LiveJoins,
    LiveLeaves,
    LiveJoinsDone,
    LiveLeavesDone,
    /// Rank 0's reading of the live requests at a check, by check parity.
    Decide(usize),
    /// Nodes of the itergroup, by rank.
    Nodes(usize),
    Ranks(usize),
    Flags(usize),
    /// Rank of the i-th live leave request.
    LiveLeave(usize),
    /// Rank of the i-th live join request (a spare, or a node that joined
    /// from outside).
    LiveJoin(usize),
    /// Spares `dmi node join` took so far.
    SparesTaken,
}

// Every variable is its own page, homed block-cyclically by its slot
// (`addr::home`), so the slots decide which node creates a page first read
// during a rescale. `tools/dmi/tests/reconf.rs` counts the state pages a
// leaving node hands over: add new variables after the existing ones.
// (Inserting `SparesTaken` at 13 moved node 2's page from `$flags` of
// thread 1, first read after the grow, to that of thread 0, first read
// while the grow runs: 4 of 6 runs then handed over 0 state pages.)
const FIXED: usize = 13;
const SLOTS: usize = FIXED + 5 * MAX_THREADS + 1;

impl Var {
    fn addr(self, vars: i64) -> i64 {
        let slot = match self {
            Var::ThreadNum => 0,
            Var::ExitFlag => 1,
            Var::Checks => 2,
            Var::Consumed => 3,
            Var::InitNodeNum => 4,
            Var::BarrierCount => 5,
            Var::BarrierGen => 6,
            Var::LiveJoins => 7,
            Var::LiveLeaves => 8,
            Var::LiveJoinsDone => 9,
            Var::LiveLeavesDone => 10,
            Var::Decide(par) => 11 + (par & 1),
            Var::Nodes(i) => FIXED + i,
            Var::Ranks(t) => FIXED + MAX_THREADS + t,
            Var::Flags(t) => FIXED + 2 * MAX_THREADS + t,
            Var::LiveLeave(i) => FIXED + 3 * MAX_THREADS + i,
            Var::LiveJoin(i) => FIXED + 4 * MAX_THREADS + i,
            Var::SparesTaken => FIXED + 5 * MAX_THREADS,
        };
        vars + 8 * slot as i64
    }
}

pub(crate) fn get(dmi: &Dmi, vars: i64, v: Var) -> Result<i64, DmiError> {
    let mut b = [0u8; 8];
    dmi.read(v.addr(vars), &mut b, ReadMode::Get)?;
    Ok(i64::from_le_bytes(b))
}

pub(crate) fn put(dmi: &Dmi, vars: i64, v: Var, x: i64) -> Result<(), DmiError> {
    dmi.write(v.addr(vars), &x.to_le_bytes(), WriteMode::Put)
}

fn fetch_add(dmi: &Dmi, vars: i64, v: Var, d: i64) -> Result<i64, DmiError> {
    let b = dmi.atomic(v.addr(vars), 8, crate::rmw::FETCH_ADD_I64, &d.to_le_bytes())?;
    let a: [u8; 8] = b
        .try_into()
        .map_err(|_| DmiError::Setup("malformed fetch-and-add answer".into()))?;
    Ok(i64::from_le_bytes(a))
}

/// `barrier(k)` of Figs. 8-9: `k` participants, possibly on several
/// nodes and several threads of one node. The last to arrive resets the
/// count and then bumps the generation the others poll.
fn barrier(dmi: &Dmi, vars: i64, k: i64) -> Result<(), DmiError> {
    let gen = get(dmi, vars, Var::BarrierGen)?;
    let before = fetch_add(dmi, vars, Var::BarrierCount, 1)?;
    if before + 1 > k {
        return Err(DmiError::Setup(format!(
            "rescale barrier: {} arrivals for {k} participants",
            before + 1
        )));
    }
    if before + 1 == k {
        put(dmi, vars, Var::BarrierCount, 0)?;
        fetch_add(dmi, vars, Var::BarrierGen, 1)?;
        return Ok(());
    }
    let mut pause = Duration::from_micros(50);
    while get(dmi, vars, Var::BarrierGen)? == gen {
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(2));
    }
    Ok(())
}

/// `$flags[tid]` of a thread that left its wrapper.
const RETIRED: i64 = 2;

/// Fig. 9's `thread_join`: waits until thread `tid` left its wrapper. A
/// leaving node must not hand over while its thread may still be polling
/// barrier C (its next access would find the node gone).
fn thread_join(dmi: &Dmi, vars: i64, tid: usize) -> Result<(), DmiError> {
    let mut pause = Duration::from_micros(50);
    while get(dmi, vars, Var::Flags(tid))? != RETIRED {
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(2));
    }
    Ok(())
}

/// Test-only (`DMI_TEST_LEAVE_LATE=1`): the leaving nodes freeze only
/// after the next itergroup ended. The leave overlaps that itergroup, so
/// its EXCLUSIVE writes may take pages from a leaving node before the node
/// freezes; this makes it take every page it writes (`tools/dmi/tests/
/// reconf.rs`).
fn leave_late() -> bool {
    std::env::var_os("DMI_TEST_LEAVE_LATE").is_some_and(|v| v == "1")
}

/// Waits until the `pnum` threads of the running itergroup arrived at
/// barrier B: the last to arrive at barrier A reset the counter before
/// releasing it, and barrier B waits for the controller too.
fn itergroup_done(dmi: &Dmi, vars: i64, pnum: i64) -> Result<(), DmiError> {
    let mut pause = Duration::from_micros(50);
    while get(dmi, vars, Var::BarrierCount)? < pnum {
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(2));
    }
    Ok(())
}

/// What the process knows about the run (set once by [`run`]).
struct Shared {
    program: Box<dyn Program>,
    changes: Vec<(u64, Change)>,
    initial: u32,
    /// The control socket of `dmi node join/leave` (`DMI_CONTROL`).
    control: Option<std::path::PathBuf>,
    /// Live requests: a control socket, or joins from outside
    /// (`DMI_ACCEPT_JOINS`, `join.rs`).
    live: bool,
    /// Itergroup threads per member node (`DMI_THREADS_PER_NODE`).
    per_node: u32,
}

impl Shared {
    /// The first spare rank for live joins (after the schedule's grows).
    fn live_spares_from(&self) -> u32 {
        self.initial
            + self
                .changes
                .iter()
                .map(|(_, c)| match c {
                    Change::Grow(k) => *k,
                    Change::Shrink(_) => 0,
                })
                .sum::<u32>()
    }
}

static SHARED: OnceLock<Shared> = OnceLock::new();

fn shared() -> Result<&'static Shared, DmiError> {
    SHARED.get().ok_or_else(|| {
        DmiError::BadArgument(
            "not a reconfigurable run: start the program through DMI_main (dmi_main.h / dmi::reconf::run)"
                .into(),
        )
    })
}

/// Per itergroup thread: what `check_rescale` needs.
struct Ctx {
    rank: i64,
    vars: i64,
    pnum: u32,
    base: u64,
    count: u64,
    requests: Vec<Request>,
    nodes: Vec<NodeId>,
}

thread_local! {
    static CTX: RefCell<Option<Ctx>> = const { RefCell::new(None) };
}

/// The distinct nodes of `ranks` (the node of each rank), in rank order.
fn distinct(ranks: impl IntoIterator<Item = NodeId>) -> Vec<NodeId> {
    let mut out: Vec<NodeId> = Vec::new();
    for n in ranks {
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

fn infos(dmi: &Dmi, ids: &[NodeId]) -> Vec<NodeInfo> {
    let core_num = shared().map_or(1, |sh| sh.per_node);
    ids.iter()
        .map(|&id| NodeInfo {
            id,
            core_num,
            addr: dmi
                .peer_addr(id)
                .unwrap_or_else(|| std::net::SocketAddr::from(([0, 0, 0, 0], 0))),
        })
        .collect()
}

/// `DMI_check_rescale()`: asks the program's `judge_rescale` whether to end
/// the itergroup for the joining and leaving requests published so far.
/// Every thread of the itergroup gets the same answer at the same call:
/// scheduled requests are derived the same way everywhere; with a control
/// socket (live requests) the call is collective, rank 0 reads the live
/// requests and the others take its reading after an itergroup barrier.
pub fn check_rescale(dmi: &Dmi) -> Result<bool, DmiError> {
    let sh = shared()?;
    let (now, rank, vars, pnum, mut due, cur) = CTX.with(|c| {
        let mut c = c.borrow_mut();
        let Some(ctx) = c.as_mut() else {
            return Err(DmiError::BadArgument(
                "DMI_check_rescale is called from DMI_itergroup only".into(),
            ));
        };
        ctx.count += 1;
        let now = ctx.base + ctx.count;
        let due: Vec<Request> = ctx
            .requests
            .iter()
            .filter(|r| r.iter <= now)
            .cloned()
            .collect();
        Ok((now, ctx.rank, ctx.vars, ctx.pnum, due, ctx.nodes.clone()))
    })?;
    if sh.live {
        let slot = Var::Decide(now as usize & 1);
        if rank == 0 {
            let j = get(dmi, vars, Var::LiveJoins)?;
            let l = get(dmi, vars, Var::LiveLeaves)?;
            put(dmi, vars, slot, j << 32 | l)?;
        }
        dmi.barrier_of(pnum)?;
        let v = get(dmi, vars, slot)?;
        due.push(live_request(dmi, vars, v >> 32, v & 0xffff_ffff)?);
    }
    let (join, leave) = schedule::apply(&due, &cur);
    Ok(sh
        .program
        .judge_rescale(&infos(dmi, &join), &infos(dmi, &leave), &infos(dmi, &cur)))
}

/// The live requests not applied yet, given the counts asked for so far.
fn live_request(dmi: &Dmi, vars: i64, joins: i64, leaves: i64) -> Result<Request, DmiError> {
    let jd = get(dmi, vars, Var::LiveJoinsDone)?;
    let ld = get(dmi, vars, Var::LiveLeavesDone)?;
    let join = (jd..joins)
        .map(|i| get(dmi, vars, Var::LiveJoin(i as usize)).map(|r| r as NodeId))
        .collect::<Result<Vec<_>, _>>()?;
    let leave_ranks = (ld..leaves)
        .map(|i| get(dmi, vars, Var::LiveLeave(i as usize)).map(|r| r as NodeId))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Request {
        iter: 0,
        join,
        leave: 0,
        leave_ranks,
    })
}

/// The number of threads of the itergroup the calling thread runs, if it
/// runs one (`DMI_barrier` then synchronises the itergroup).
pub fn itergroup_size() -> Option<u32> {
    CTX.with(|c| c.borrow().as_ref().map(|c| c.pnum))
}

/// The requests not applied yet, as every node computes them.
fn open_requests(dmi: &Dmi, vars: i64) -> Result<Vec<Request>, DmiError> {
    let sh = shared()?;
    let init = get(dmi, vars, Var::InitNodeNum)? as u32;
    let consumed = get(dmi, vars, Var::Consumed)? as usize;
    let all = schedule::resolve(&sh.changes, sh.initial, dmi.size(), init)?;
    Ok(all.into_iter().skip(consumed).collect())
}

/// Fig. 8's `itergroup_wrapper(thread_id, args_addr)`.
fn itergroup_wrapper(dmi: &Dmi, tid: usize, args: i64, vars: i64) -> Result<(), DmiError> {
    let sh = shared()?;
    loop {
        let pnum = get(dmi, vars, Var::ThreadNum)?;
        barrier(dmi, vars, pnum + 1)?; // A
        let rank = get(dmi, vars, Var::Ranks(tid))?;
        let base = get(dmi, vars, Var::Checks)? as u64;
        let nodes = distinct(
            (0..pnum as usize)
                .map(|i| get(dmi, vars, Var::Nodes(i)).map(|n| n as NodeId))
                .collect::<Result<Vec<_>, _>>()?,
        );
        let requests = open_requests(dmi, vars)?;
        CTX.with(|c| {
            *c.borrow_mut() = Some(Ctx {
                rank,
                vars,
                pnum: pnum as u32,
                base,
                count: 0,
                requests,
                nodes,
            })
        });
        let ret = sh.program.itergroup(dmi, rank as i32, pnum as i32, args);
        let count = CTX.with(|c| c.borrow_mut().take().map_or(0, |c| c.count));
        if rank == 0 {
            if ret == 0 {
                put(dmi, vars, Var::ExitFlag, 1)?;
            }
            put(dmi, vars, Var::Checks, (base + count) as i64)?;
        }
        barrier(dmi, vars, pnum + 1)?; // B
        barrier(dmi, vars, pnum + 1)?; // C
        if get(dmi, vars, Var::Flags(tid))? == 1 {
            // Retired: tell the controller this thread makes no more DMI
            // call (its thread_join), so its node may hand over and leave.
            put(dmi, vars, Var::Flags(tid), RETIRED)?;
            return Ok(());
        }
    }
}

/// Runs the wrapper; an error ends the process with a message (a barrier
/// partner that vanished would otherwise hang the others).
fn wrapper_or_exit(dmi: &Dmi, tid: usize, args: i64, vars: i64) {
    if let Err(e) = itergroup_wrapper(dmi, tid, args, vars) {
        eprintln!("dmi: node {}: itergroup thread {tid}: {e}", dmi.rank());
        std::process::exit(1);
    }
}

fn log(line: &str) {
    if std::env::var_os("DMI_QUIET").is_none() {
        eprintln!("{line}");
    }
}

/// `DMI_rescale(addr, init_node_num)`: Figs. 8-9's controller, on node 0
/// from `main`. Returns when an itergroup's rank 0 returned 0.
pub fn rescale(dmi: &Dmi, addr: i64, init_node_num: i32) -> Result<(), DmiError> {
    let sh = shared()?;
    if dmi.rank() != 0 {
        return Err(DmiError::BadArgument(format!(
            "DMI_rescale runs in DMI_main on node 0 (this is node {})",
            dmi.rank()
        )));
    }
    if init_node_num < 1 || init_node_num as u32 > sh.initial {
        return Err(DmiError::BadArgument(format!(
            "DMI_rescale: init_node_num={init_node_num}, but {} node(s) are available (dmi run -n)",
            sh.initial
        )));
    }
    // The argument must be a global address (a bad one is an error here,
    // not in every thread).
    dmi.read(addr, &mut [0u8; 1], ReadMode::Get)?;
    let vars = dmi.mmap(8, SLOTS as i64)?;
    put(dmi, vars, Var::InitNodeNum, i64::from(init_node_num))?;
    let mut c = Controller {
        addr,
        vars,
        requests: schedule::resolve(&sh.changes, sh.initial, dmi.size(), init_node_num as u32)?,
        consumed: 0,
        running: Vec::new(),
        next_tid: 0,
        join: (0..init_node_num as u32).collect(),
        leave: Vec::new(),
        group: 0,
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| -> Result<(), DmiError> {
        if sh.live {
            // Joins open before the control socket exists: a test that
            // waits for the socket may join at once.
            dmi.open_joins(true)?;
            let listener = sh
                .control
                .as_deref()
                .map(crate::reconf_ctl::bind)
                .transpose()?;
            let (stop, from) = (&stop, sh.live_spares_from());
            s.spawn(move || crate::reconf_ctl::serve(dmi, vars, listener, from, stop));
        }
        let r = c.rounds(dmi, s);
        let _ = dmi.open_joins(false);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        r
    })
    // `vars` stays mapped: threads released by the last barrier may still
    // be reading their flag (one small region per DMI_rescale call).
}

/// The state of Figs. 8-9's `DMI_rescale` that stays on node 0.
struct Controller {
    addr: i64,
    vars: i64,
    requests: Vec<Request>,
    /// Scheduled requests applied so far.
    consumed: usize,
    /// (thread id, node) of the running threads, in rank order.
    running: Vec<(usize, NodeId)>,
    next_tid: usize,
    /// The nodes to join and leave before the next itergroup.
    join: Vec<NodeId>,
    leave: Vec<NodeId>,
    group: u32,
}

impl Controller {
    /// One round per itergroup, until rank 0's itergroup returns 0.
    fn rounds<'s>(
        &mut self,
        dmi: &'s Dmi,
        s: &'s std::thread::Scope<'s, '_>,
    ) -> Result<(), DmiError> {
        let (addr, vars) = (self.addr, self.vars);
        loop {
            self.group += 1;
            let t0 = Instant::now();
            let old_pnum = self.running.len();
            let before = distinct(self.running.iter().map(|r| r.1));
            let mut created = Vec::new();
            for &node in &self.join {
                for _ in 0..shared()?.per_node {
                    if self.next_tid >= MAX_THREADS {
                        return Err(DmiError::BadArgument(format!(
                            "more than {MAX_THREADS} itergroup threads"
                        )));
                    }
                    created.push((self.next_tid, node));
                    self.next_tid += 1;
                }
            }
            // A node's threads keep consecutive ranks: the new ones go
            // after the last of their node's, or at the end.
            for &(tid, node) in &created {
                let at = match self.running.iter().rposition(|r| r.1 == node) {
                    Some(i) => i + 1,
                    None => self.running.len(),
                };
                self.running.insert(at, (tid, node));
            }
            let mut deleted = Vec::new();
            for &node in &self.leave {
                while let Some(i) = self.running.iter().position(|r| r.1 == node) {
                    let (tid, _) = self.running.remove(i);
                    put(dmi, vars, Var::Flags(tid), 1)?;
                    deleted.push(tid);
                }
            }
            let pnum = self.running.len() as i64;
            put(dmi, vars, Var::ThreadNum, pnum)?;
            if old_pnum > 0 {
                barrier(dmi, vars, old_pnum as i64 + 1)?; // C
            }
            let t_c = Instant::now();
            for (rank, &(tid, node)) in self.running.iter().enumerate() {
                put(dmi, vars, Var::Ranks(tid), rank as i64)?;
                put(dmi, vars, Var::Nodes(rank), i64::from(node))?;
            }
            let joining: Vec<NodeId> = self.join.iter().copied().filter(|&n| n != 0).collect();
            let js = dmi.rescale_nodes(joining.clone(), Vec::new())?;
            let t_join = t_c.elapsed();
            for &(tid, node) in &created {
                if node == 0 {
                    s.spawn(move || wrapper_or_exit(dmi, tid, addr, vars));
                } else {
                    let thread = tid as u32;
                    dmi.send_app(
                        node,
                        AppMsg::Spawn {
                            thread,
                            args: addr,
                            vars,
                        },
                    )?;
                }
            }
            barrier(dmi, vars, pnum + 1)?; // A
            let pause = t_c.elapsed();
            for &tid in &deleted {
                thread_join(dmi, vars, tid)?;
                put(dmi, vars, Var::Flags(tid), 0)?;
            }
            if !self.leave.is_empty() && leave_late() {
                itergroup_done(dmi, vars, pnum)?;
            }
            let t_leave = Instant::now();
            let ls = dmi.rescale_nodes(Vec::new(), self.leave.clone())?;
            let t_leave = t_leave.elapsed();
            if !joining.is_empty() || !self.leave.is_empty() {
                let after = distinct(self.running.iter().map(|r| r.1));
                log(&format!(
                    "dmi: rescale before itergroup {}: nodes {before:?} -> {after:?}: \
                     join {:.1} ms ({} entries moved), leave {:.1} ms ({} pages, {} bytes, {} entries moved), \
                     threads paused {:.1} ms (barrier C to A), controller {:.1} ms",
                    self.group,
                    t_join.as_secs_f64() * 1e3,
                    js.entries,
                    t_leave.as_secs_f64() * 1e3,
                    ls.pages,
                    ls.bytes,
                    ls.entries,
                    pause.as_secs_f64() * 1e3,
                    t0.elapsed().as_secs_f64() * 1e3,
                ));
            }
            barrier(dmi, vars, pnum + 1)?; // B
            if get(dmi, vars, Var::ExitFlag)? == 1 {
                // Retire every thread (barrier C of a last round).
                for &(tid, _) in &self.running {
                    put(dmi, vars, Var::Flags(tid), 1)?;
                }
                return barrier(dmi, vars, pnum + 1);
            }
            self.next_changes(dmi)?;
        }
    }

    /// The requests due when the itergroup ended: the scheduled ones up to
    /// the checks made, and every live one.
    fn next_changes(&mut self, dmi: &Dmi) -> Result<(), DmiError> {
        let vars = self.vars;
        let checks = get(dmi, vars, Var::Checks)? as u64;
        let mut due: Vec<Request> = self.requests[self.consumed..]
            .iter()
            .take_while(|r| r.iter <= checks)
            .cloned()
            .collect();
        self.consumed += due.len();
        put(dmi, vars, Var::Consumed, self.consumed as i64)?;
        if shared()?.live {
            let j = get(dmi, vars, Var::LiveJoins)?;
            let l = get(dmi, vars, Var::LiveLeaves)?;
            due.push(live_request(dmi, vars, j, l)?);
            put(dmi, vars, Var::LiveJoinsDone, j)?;
            put(dmi, vars, Var::LiveLeavesDone, l)?;
        }
        let cur = distinct(self.running.iter().map(|r| r.1));
        (self.join, self.leave) = schedule::apply(&due, &cur);
        Ok(())
    }
}

/// How a node process ends after [`run`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// A member at the end: `Dmi::finalize` (barrier, goodbyes).
    Finalize,
    /// Left the run or never joined: `Dmi::leave`.
    Leave,
}

/// The node's part of a reconfigurable run: node 0 runs `program.main`,
/// the others serve node 0's instructions. `dmi` must come from
/// [`start_node`]. Returns how the process must end.
pub fn run(dmi: &Dmi, program: Box<dyn Program>, args: &[String]) -> Result<Ending, DmiError> {
    let changes = schedule::parse(&dmi.run_var("DMI_SCHEDULE").unwrap_or_default())?;
    let initial = match dmi.run_var("DMI_INITIAL") {
        Some(v) => v
            .parse::<u32>()
            .ok()
            .filter(|&n| n >= 1 && n <= dmi.size())
            .ok_or_else(|| DmiError::Setup(format!("DMI_INITIAL={v:?} is not valid")))?,
        None => dmi.size(),
    };
    let control = dmi.run_var("DMI_CONTROL").map(std::path::PathBuf::from);
    let per_node = match dmi.run_var("DMI_THREADS_PER_NODE") {
        Some(v) => v
            .parse::<u32>()
            .ok()
            .filter(|k| (1..=16).contains(k))
            .ok_or_else(|| {
                DmiError::Setup(format!(
                    "DMI_THREADS_PER_NODE={v:?} is not valid (1 to 16 threads per node)"
                ))
            })?,
        None => 1,
    };
    let live = control.is_some() || dmi.run_var("DMI_ACCEPT_JOINS").is_some_and(|v| v == "1");
    let sh = Shared {
        program,
        changes,
        initial,
        control,
        live,
        per_node,
    };
    if SHARED.set(sh).is_err() {
        return Err(DmiError::BadArgument(
            "DMI_main runs once per process".into(),
        ));
    }
    let sh = shared()?;
    if dmi.rank() == 0 {
        sh.program.main(dmi, args);
        for r in 1..dmi.nodes() {
            dmi.send_app(r, AppMsg::Exit)?;
        }
        return Ok(Ending::Finalize);
    }
    // Each Spawn is a thread of its own (a node runs `per_node` of them);
    // the scope joins the retired ones when the node leaves or ends.
    std::thread::scope(|s| serve_spawns(dmi, s))
}

/// A node other than 0: runs node 0's instructions until the run ends for
/// it.
fn serve_spawns<'s>(dmi: &'s Dmi, s: &'s std::thread::Scope<'s, '_>) -> Result<Ending, DmiError> {
    let mut was_member = false;
    loop {
        match dmi.next_app_event()? {
            AppEvent::Msg(AppMsg::Spawn { thread, args, vars }) => {
                was_member = true;
                s.spawn(move || wrapper_or_exit(dmi, thread as usize, args, vars));
            }
            AppEvent::Msg(AppMsg::Admitted { text }) => {
                eprintln!("dmi: node {}: {text}", dmi.rank());
            }
            AppEvent::Msg(AppMsg::Refused { reason }) => {
                return Err(DmiError::Setup(format!(
                    "joining the run: refused: {reason}"
                )));
            }
            AppEvent::Msg(AppMsg::Exit) => {
                let member = dmi.members().is_ok_and(|m| m.contains(&dmi.rank()));
                if dmi.rank() >= dmi.size() && !member && !was_member {
                    eprintln!(
                        "dmi: node {}: the program ended before this node was brought in",
                        dmi.rank()
                    );
                }
                return Ok(if member {
                    Ending::Finalize
                } else {
                    Ending::Leave
                });
            }
            AppEvent::Left => return Ok(Ending::Leave),
        }
    }
}

/// Starts this process's node for a reconfigurable run: node 0 is the only
/// member at first; the others join when `DMI_rescale` says so.
pub fn start_node(rmw: std::sync::Arc<crate::rmw::RmwTable>) -> Result<Dmi, DmiError> {
    let mut cfg = crate::runtime::Config::from_env()?;
    cfg.members = Some(1);
    Dmi::start(cfg, rmw)
}

/// The whole run for a Rust program: start, run, end. Returns the exit
/// status (0, or 1 after printing the error).
pub fn main(program: Box<dyn Program>) -> i32 {
    let args: Vec<String> = std::env::args().collect();
    let rmw = std::sync::Arc::new(crate::rmw::RmwTable::default());
    let r = start_node(rmw).and_then(|dmi| match run(&dmi, program, &args)? {
        Ending::Finalize => dmi.finalize(),
        Ending::Leave => {
            dmi.leave();
            Ok(())
        }
    });
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("dmi: {e}");
            1
        }
    }
}
