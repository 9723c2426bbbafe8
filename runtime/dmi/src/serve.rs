// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Compute instances on the node's side (`docs/dmi.md`, "Nodes as
//! half-processes"): the node process is the leader of this machine's
//! half-process set; [`create`] forks an instance as a member of it, and a
//! server thread per instance (its receiver) takes the instance's calls
//! from its [`Mailbox`], runs them through the node's engine and answers.
//! The server thread also reaps the instance: [`join`] waits for what it
//! recorded. Barriers of instances meet first on the node (every running
//! instance arrives), then the node takes part in the barrier of all nodes
//! once for all of them.
//!
//! Lock order: `Registry::state`, then a mailbox's lock (never the other
//! way round).

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use halfproc::{ExitStatus, Member, Set};

use crate::addr::NodeId;
use crate::error::DmiError;
use crate::instance_fds::{close_node_fds, close_sockets};
use crate::node::{CallReq, Outcome};
use crate::relocate::MoveSchedule;
use crate::ring::{Link, Mailbox, ReplyPath, Taken, POLL};
use crate::rmw::RmwTable;
use crate::runtime::{Caller, Dmi};
use crate::serve_single::Receivers;
use crate::transport::report;

#[path = "serve_record.rs"]
mod record;
pub(crate) use record::{record, record_away};

/// How an instance ended, as [`join`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The instance function returned this value.
    Returned(i64),
    /// The process ended some other way (a signal, `exit`, lost status).
    Failed(String),
}

pub(crate) struct Entry {
    pub(crate) pid: i32,
    pub(crate) ended: Option<Ended>,
    detached: bool,
    /// Whether its failure ends the node (`DMI_ERRORS`).
    pub(crate) fatal: bool,
    /// Where it runs (a `DMI_create` instance may run on another node).
    pub(crate) at: Where,
}

/// Where a node's instance runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Where {
    /// On this node, served by its receiver here.
    Here,
    /// Being moved to that node (its answer not in yet); to this node: a
    /// move home whose `Commit` came, its copy not served yet (`guest.rs`).
    Going(NodeId),
    /// On that node since its yield number `.1` (`guest.rs`).
    At(NodeId, u64),
    /// Moved to that node at its yield number `.1`: the source committed
    /// (its original is gone), the node's own `At` is not in yet.
    Moving(NodeId, u64),
}

impl Where {
    /// The yield at which it moved to where it is now (`None`: here, or
    /// not moved yet).
    pub(crate) fn since(self) -> Option<u64> {
        match self {
            Where::At(_, y) | Where::Moving(_, y) => Some(y),
            Where::Here | Where::Going(_) => None,
        }
    }
}

#[derive(Default)]
pub(crate) struct State {
    next: i64,
    pub(crate) entries: HashMap<i64, Entry>,
    /// Instances running now (they take part in barriers).
    pub(crate) running: usize,
    /// The node's program has stopped creating instances (it is in `join`
    /// or called `detach`): only then can a barrier of instances complete,
    /// or the first instance could pass it before the others exist.
    pub(crate) open: bool,
    /// Barrier: arrivals in this round, whether the node is in the barrier
    /// of all nodes for it (new arrivals wait for the next round), the
    /// round's number and outcome.
    pub(crate) arrived: usize,
    pub(crate) releasing: bool,
    pub(crate) round: u64,
    pub(crate) outcome: Option<Result<(), DmiError>>,
    /// The first instance failure; every barrier fails from then on.
    pub(crate) failed: Option<DmiError>,
}

pub(crate) struct Registry {
    state: Mutex<State>,
    pub(crate) changed: Condvar,
    pub(crate) set: &'static Set,
    path: ReplyPath,
    pub(crate) moves: MoveSchedule,
    pub(crate) receivers: Receivers,
}

static REGISTRY: OnceLock<Arc<Registry>> = OnceLock::new();

pub(crate) fn registry() -> Result<Arc<Registry>, DmiError> {
    if let Some(r) = REGISTRY.get() {
        return Ok(r.clone());
    }
    let set = Set::get()
        .or_else(|_| Set::init_default())
        .map_err(|e| DmiError::Setup(format!("half-process set: {e}")))?;
    let kernel = set.backend().kind() == halfproc::BackendKind::Kernel;
    let path = ReplyPath::from_env(kernel)?;
    let moves = MoveSchedule::from_env()?;
    let receivers = Receivers::from_env()?;
    let r = Arc::new(Registry {
        state: Mutex::new(State::default()),
        changed: Condvar::new(),
        set,
        path,
        moves,
        receivers,
    });
    Ok(REGISTRY.get_or_init(|| r).clone())
}

/// This node's half-process set (made on first use).
pub(crate) fn node_set() -> Result<&'static Set, DmiError> {
    Ok(registry()?.set)
}

/// What a movable run's instances need of their node (`host.rs`).
struct MovableNode {
    caller: Caller,
    rank: NodeId,
    fatal: bool,
}

static MOVABLE: OnceLock<MovableNode> = OnceLock::new();

/// A movable run: this node serves its instances through `caller`.
pub(crate) fn init_movable(caller: Caller, rank: NodeId) -> Result<(), DmiError> {
    if Receivers::from_env()? == Receivers::Single {
        return Err(DmiError::Setup(
            "DMI_RECEIVERS=single: a movable run's instances move between nodes with a \
             receiver each (use DMI_RECEIVERS=per-instance)"
                .into(),
        ));
    }
    let fatal = std::env::var("DMI_ERRORS").map_or(true, |v| v != "return");
    MOVABLE
        .set(MovableNode {
            caller,
            rank,
            fatal,
        })
        .map_err(|_| DmiError::Setup("movable run started twice".into()))
}

/// In the program's instance of a movable run, just forked by `DMI_init`:
/// drops the node's descriptors and talks to the node through `mb`.
pub(crate) fn become_program(
    mb: &'static Mailbox,
    node_pid: i32,
    rank: NodeId,
    ranks: u32,
    rmw: Arc<RmwTable>,
) {
    close_node_fds();
    close_sockets();
    let path = REGISTRY.get().map_or(ReplyPath::Staging, |r| r.path);
    let link = Link::new(mb, node_pid, path);
    crate::capi::become_instance(Dmi::instance(rank, ranks, rmw, link));
}

/// Serves instance `id` of a movable run, running here as `member` with
/// mailbox `mb` after `yields` yields: the program's own instance (on a
/// thread of its own) or one that arrived from another node (`here`: in
/// the calling thread, the copy's parent, until it ends or moves on).
/// Arms the mailbox of instance `id` after `yields` yields (a copy that
/// arrived, or the program's instance about to start) for its next move,
/// before it runs (see [`crate::relocate::relocate`]); `serve_movable`
/// arms it again.
pub(crate) fn arm_arrival(id: i64, yields: u64, mb: &'static Mailbox) {
    if let Ok(reg) = registry() {
        crate::host::rearm(id, yields, mb, reg.moves.next_after(yields, id));
    }
}

pub(crate) fn serve_movable(
    id: i64,
    member: Member,
    mb: &'static Mailbox,
    yields: u64,
    here: bool,
) {
    let (Ok(reg), Some(node)) = (registry(), MOVABLE.get()) else {
        report(&format!(
            "dmi: instance {id} (pid {}) cannot be served: not a movable run",
            member.pid()
        ));
        let _ = member.kill(libc::SIGKILL);
        return;
    };
    {
        let mut s = locked(&reg);
        s.running += 1;
        s.entries.insert(
            id,
            Entry {
                pid: member.pid(),
                ended: None,
                detached: true,
                fatal: node.fatal,
                at: Where::Here,
            },
        );
    }
    crate::host::hosting(id, mb);
    let s = Served {
        id,
        member,
        mb,
        caller: node.caller.clone(),
        rank: node.rank,
        fatal: node.fatal,
        movable: true,
        since: yields,
        guest: None,
    };
    if here {
        serve(&reg, s);
        return;
    }
    let spawned = std::thread::Builder::new()
        .name(format!("dmi-inst-{id}"))
        .spawn(move || serve(&reg, s));
    if let Err(e) = spawned {
        report(&format!("dmi: instance {id}: no server thread: {e}"));
        let _ = member.kill(libc::SIGKILL);
    }
}

pub(crate) fn locked(r: &Registry) -> MutexGuard<'_, State> {
    r.state.lock().unwrap_or_else(|e| e.into_inner())
}

/// What an instance needs of its node: taken from the [`Dmi`] before the
/// fork, so that no lock on it is held while forking.
pub struct NodeRef {
    caller: Caller,
    rank: NodeId,
    size: u32,
    rmw: Arc<RmwTable>,
}

impl NodeRef {
    pub fn of(dmi: &Dmi) -> Result<NodeRef, DmiError> {
        Ok(NodeRef {
            caller: dmi.caller()?,
            rank: dmi.rank(),
            size: dmi.size(),
            rmw: dmi.rmw_table(),
        })
    }
}

/// Forks a compute instance running `body(dmi, arg)` (in a copy of the
/// calling process; `dmi`, and the C API in the instance, reach this node
/// through the instance's mailbox) and returns its id. `fatal` ends the
/// node when an instance fails.
pub fn create(
    node: NodeRef,
    fatal: bool,
    body: impl FnOnce(&Dmi, i64) -> i64,
    arg: i64,
) -> Result<i64, DmiError> {
    let reg = registry()?;
    let mb = Mailbox::new()?;
    let NodeRef {
        caller,
        rank,
        size,
        rmw,
    } = node;
    let node_pid = std::process::id() as i32;
    let path = reg.path;
    let id = {
        let mut s = locked(&reg);
        if let Some(e) = &s.failed {
            return Err(e.clone());
        }
        s.next += 1;
        s.running += 1;
        s.open = false;
        s.next - 1
    };
    // Armed before the instance runs (`serve` arms it again): it may reach
    // its first scheduled yield without calling the node (hits from the
    // frames).
    crate::host::rearm(id, 0, mb, reg.moves.next_after(0, id));
    if reg.receivers == Receivers::Single {
        match crate::serve_single::bell(&reg) {
            Ok(b) => mb.set_bell(b),
            Err(e) => {
                locked(&reg).running -= 1;
                // SAFETY: no instance uses the new mailbox.
                unsafe { mb.release() };
                return Err(e);
            }
        }
    }
    let spawned = Member::spawn(reg.set, move || {
        close_node_fds();
        let link = || Link::new(mb, node_pid, path);
        crate::capi::become_instance(Dmi::instance(rank, size, rmw.clone(), link()));
        let v = body(&Dmi::instance(rank, size, rmw, link()), arg);
        crate::ring::set_return_home(v);
        0
    });
    let member = match spawned {
        Ok(m) => m,
        Err(e) => {
            locked(&reg).running -= 1;
            return Err(DmiError::Setup(format!("creating an instance: {e}")));
        }
    };
    locked(&reg).entries.insert(
        id,
        Entry {
            pid: member.pid(),
            ended: None,
            detached: false,
            fatal,
            at: Where::Here,
        },
    );
    let s = Served {
        id,
        member,
        mb,
        caller,
        rank,
        fatal,
        movable: false,
        since: 0,
        guest: None,
    };
    if reg.receivers == Receivers::Single {
        crate::serve_single::add(s);
        return Ok(id);
    }
    let reg2 = reg.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("dmi-inst-{id}"))
        .spawn(move || serve(&reg2, s));
    if let Err(e) = spawned {
        let _ = member.kill(libc::SIGKILL);
        return Err(DmiError::Setup(format!("instance server thread: {e}")));
    }
    Ok(id)
}

/// Waits for instance `id` and says how it ended.
pub fn join(id: i64) -> Result<Ended, DmiError> {
    let reg = registry()?;
    let mut s = locked(&reg);
    open(&reg, &mut s);
    loop {
        match s.entries.get(&id) {
            None => {
                return Err(DmiError::BadArgument(format!(
                    "no instance {id} to join (never created, joined or detached)"
                )))
            }
            Some(e) if e.detached => {
                return Err(DmiError::BadArgument(format!("instance {id} is detached")))
            }
            Some(Entry { ended: Some(_), .. }) => {
                return Ok(s.entries.remove(&id).and_then(|e| e.ended).unwrap());
            }
            Some(_) => s = reg.changed.wait(s).unwrap_or_else(|e| e.into_inner()),
        }
    }
}

/// The node's program is done creating for now: barriers may complete.
fn open(reg: &Registry, s: &mut State) {
    if !s.open {
        s.open = true;
        reg.changed.notify_all();
        // The single receiver waits on its bell, not on `changed`.
        crate::serve_single::ring();
    }
}

/// Lets instance `id` run on; nobody joins it (a failure is still reported).
pub fn detach(id: i64) -> Result<(), DmiError> {
    let reg = registry()?;
    let mut s = locked(&reg);
    open(&reg, &mut s);
    match s.entries.get_mut(&id) {
        Some(e) if !e.detached => {
            if e.ended.is_some() {
                s.entries.remove(&id);
            } else {
                e.detached = true;
            }
            Ok(())
        }
        _ => Err(DmiError::BadArgument(format!(
            "no instance {id} to detach (never created, joined or detached)"
        ))),
    }
}

/// One instance as its receiver sees it (its own thread's, or the node's
/// single receiver's: `serve_single.rs`).
pub(crate) struct Served {
    pub(crate) id: i64,
    pub(crate) member: Member,
    pub(crate) mb: &'static Mailbox,
    pub(crate) caller: Caller,
    /// The node serving it.
    pub(crate) rank: NodeId,
    pub(crate) fatal: bool,
    /// A movable run's instance (`host.rs`).
    pub(crate) movable: bool,
    /// The yields it made before it was served here.
    pub(crate) since: u64,
    /// Another node's `DMI_create` instance that moved here: that node
    /// (its origin), which counts its barriers and joins it (`guest.rs`).
    pub(crate) guest: Option<NodeId>,
}

/// What became of an instance after [`step`].
pub(crate) enum Step {
    /// Its call was answered (or it stays where it is).
    Served,
    /// It moved to another node: nothing more to do here.
    Gone,
}

/// The instance's receiver (one thread per instance): serves its calls
/// until it ends (or moves to another node), then records how.
pub(crate) fn serve(reg: &Registry, mut s: Served) {
    crate::host::rearm(s.id, s.since, s.mb, reg.moves.next_after(s.since, s.id));
    let status = loop {
        match s.mb.take(POLL) {
            r @ (Ok(Taken::Nothing) | Err(_)) => {
                if let Some(st) = ended(&s) {
                    break st;
                }
                // An unusable mailbox must not make this loop spin.
                if r.is_err() {
                    std::thread::sleep(POLL);
                }
            }
            Ok(t) => {
                if let Step::Gone = step(reg, &mut s, t) {
                    return;
                }
            }
        }
    };
    finish(reg, s, status);
}

/// Whether the instance ended (its status from the halfproc reaper).
pub(crate) fn ended(s: &Served) -> Option<Result<ExitStatus, String>> {
    match s.member.join_timeout(Some(Duration::ZERO)) {
        Ok(Some(st)) => Some(Ok(st)),
        Ok(None) => None,
        Err(e) => Some(Err(e.to_string())),
    }
}

/// Handles what a receiver took from the instance's mailbox (anything but
/// [`Taken::Nothing`]): runs a call and answers it, answers a yield and
/// moves the instance if it is to move.
pub(crate) fn step(reg: &Registry, s: &mut Served, taken: Taken) -> Step {
    match taken {
        Taken::Call(req, dest) => {
            let (out, written) = match s.guest {
                // Counted by its origin, wherever it runs.
                Some(o) if req == CallReq::Barrier => {
                    (crate::guest::barrier(o, s.id).map(|_| Vec::new()), None)
                }
                _ => run(reg, &s.caller, req, dest, s.member.pid()),
            };
            s.mb.answer(&out, written);
        }
        Taken::Done => {
            let r = match crate::host::ranks() {
                Some(n) => s.caller.call(CallReq::BarrierOf(n)),
                None => Err(DmiError::BadArgument(
                    "DMI_finalize in a compute instance (the node's program finalizes)".into(),
                )),
            };
            s.mb.answer(&r.as_ref().map(|_| Vec::new()).map_err(Clone::clone), None);
            if s.id == 0 && r.is_ok() {
                crate::host::finished();
            }
        }
        Taken::Yield(home, yields) => return crate::serve_yield::yielded(reg, s, home, yields),
        Taken::Bad | Taken::Nothing => {}
    }
    Step::Served
}

/// Records how instance `s` ended (`status`: its process's), reports a
/// failure (and ends the node if that is fatal) and frees its mailbox.
pub(crate) fn finish(reg: &Registry, s: Served, status: Result<ExitStatus, String>) {
    let Served {
        id,
        member,
        mb,
        rank,
        fatal,
        movable,
        guest,
        ..
    } = s;
    let status_known = status.is_ok();
    if status_known {
        // SAFETY: the instance has ended (its status is in).
        let r = unsafe { mb.recover_writes() };
        if r.frames > 0 {
            let how = if r.committed {
                "completed it"
            } else {
                "its pages are as before it"
            };
            report(&format!(
                "dmi: node {rank}: instance {id} (pid {}) died in a fast write of {} page(s); \
                 {how}",
                member.pid(),
                r.frames
            ));
        }
    }
    let ended = match status {
        Ok(st) => match mb.returned() {
            Some(v) if st.success() => Ended::Returned(v),
            // A movable run's program ends as a process does.
            None if movable && st.success() => Ended::Returned(0),
            _ if movable => Ended::Failed(match st {
                ExitStatus::Exited(c) => format!("exited with status {c}"),
                st => describe(st),
            }),
            _ => Ended::Failed(describe(st)),
        },
        Err(e) => Ended::Failed(format!("its status is unknown ({e})")),
    };
    if status_known {
        // SAFETY: the instance has ended; only its receiver used its
        // mailbox on the node's side.
        unsafe { mb.release() };
    }
    if let Some(origin) = guest {
        // Another node's: it records the end (and its failure's effects).
        if let Ended::Failed(how) = &ended {
            report(&format!(
                "dmi: node {rank}: node {origin}'s instance {id} (pid {}) {how}",
                member.pid()
            ));
        }
        crate::guest::report_end(origin, id, &ended);
        return;
    }
    crate::host::gone(id, matches!(ended, Ended::Returned(_)));
    record(reg, id, member.pid(), rank, fatal, ended);
}

fn describe(st: ExitStatus) -> String {
    match st {
        ExitStatus::Signaled(sig) => format!("was killed by signal {sig}"),
        ExitStatus::Exited(c) => format!("exited with status {c} before its function returned"),
    }
}

pub(crate) fn finish_round(s: &mut State, r: Result<(), DmiError>) {
    s.outcome = Some(r);
    s.arrived = 0;
    s.releasing = false;
    s.round += 1;
}

/// Runs one call of an instance; the bytes of a read go to `dest` with
/// `dmwrite` when it is set (then the second value says how many).
fn run(
    reg: &Registry,
    caller: &Caller,
    req: CallReq,
    dest: usize,
    pid: i32,
) -> (Outcome, Option<usize>) {
    if req == CallReq::Barrier {
        if let Some(n) = crate::host::ranks() {
            // A movable run: a barrier of all its instances, wherever they run.
            return (caller.call(CallReq::BarrierOf(n)).map(|_| Vec::new()), None);
        }
        return (barrier(reg, caller).map(|_| Vec::new()), None);
    }
    let out = caller.call(req);
    match out {
        Ok(v) if dest != 0 => match halfproc::dmwrite(pid, dest, v.len(), &v) {
            Ok(n) if n == v.len() => (Ok(Vec::new()), Some(n)),
            Ok(n) => (
                Err(DmiError::Setup(format!(
                    "dmwrite to instance pid {pid} copied {n} of {} bytes",
                    v.len()
                ))),
                None,
            ),
            Err(e) => (
                Err(DmiError::Setup(format!(
                    "dmwrite to instance pid {pid}: {e}"
                ))),
                None,
            ),
        },
        out => (out, None),
    }
}

/// Where a barrier round of the node's instances is.
pub(crate) enum Due {
    /// An instance failed: the round fails.
    Fail(DmiError),
    /// Every running instance arrived and the node's program is done
    /// creating: the node goes into the barrier of all nodes.
    Release,
    Wait,
}

pub(crate) fn due(s: &State) -> Due {
    if let Some(e) = &s.failed {
        return Due::Fail(e.clone());
    }
    if s.open && !s.releasing && s.arrived == s.running {
        Due::Release
    } else {
        Due::Wait
    }
}

/// The node's part of an instance barrier: the last running instance to
/// arrive takes the node into the barrier of all nodes.
pub(crate) fn barrier(reg: &Registry, caller: &Caller) -> Result<(), DmiError> {
    let mut s = locked(reg);
    while s.releasing {
        s = reg.changed.wait(s).unwrap_or_else(|e| e.into_inner());
    }
    s.arrived += 1;
    let round = s.round;
    loop {
        if s.round != round {
            return s.outcome.clone().unwrap_or(Ok(()));
        }
        match due(&s) {
            Due::Fail(e) => {
                finish_round(&mut s, Err(e.clone()));
                drop(s);
                reg.changed.notify_all();
                return Err(e);
            }
            Due::Wait => {}
            Due::Release => {
                s.releasing = true;
                drop(s);
                let r = caller.call(CallReq::Barrier).map(drop);
                let mut s = locked(reg);
                finish_round(&mut s, r.clone());
                drop(s);
                reg.changed.notify_all();
                return r;
            }
        }
        s = reg.changed.wait(s).unwrap_or_else(|e| e.into_inner());
    }
}
