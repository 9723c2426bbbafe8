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
use crate::node::{CallReq, Outcome};
use crate::relocate::{relocate, Dest, MoveSchedule};
use crate::ring::{Link, Mailbox, ReplyPath, Taken, POLL};
use crate::rmw::RmwTable;
use crate::runtime::{Caller, Dmi, PEER_FAILED_EXIT};
use crate::transport::report;

/// How an instance ended, as [`join`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The instance function returned this value.
    Returned(i64),
    /// The process ended some other way (a signal, `exit`, lost status).
    Failed(String),
}

struct Entry {
    pid: i32,
    ended: Option<Ended>,
    detached: bool,
}

#[derive(Default)]
struct State {
    next: i64,
    entries: HashMap<i64, Entry>,
    /// Instances running now (they take part in barriers).
    running: usize,
    /// The node's program has stopped creating instances (it is in `join`
    /// or called `detach`): only then can a barrier of instances complete,
    /// or the first instance could pass it before the others exist.
    open: bool,
    /// Barrier: arrivals in this round, whether the node is in the barrier
    /// of all nodes for it (new arrivals wait for the next round), the
    /// round's number and outcome.
    arrived: usize,
    releasing: bool,
    round: u64,
    outcome: Option<Result<(), DmiError>>,
    /// The first instance failure; every barrier fails from then on.
    failed: Option<DmiError>,
}

struct Registry {
    state: Mutex<State>,
    changed: Condvar,
    set: &'static Set,
    path: ReplyPath,
    moves: MoveSchedule,
}

static REGISTRY: OnceLock<Arc<Registry>> = OnceLock::new();

fn registry() -> Result<Arc<Registry>, DmiError> {
    if let Some(r) = REGISTRY.get() {
        return Ok(r.clone());
    }
    let set = Set::get()
        .or_else(|_| Set::init_default())
        .map_err(|e| DmiError::Setup(format!("half-process set: {e}")))?;
    let kernel = set.backend().kind() == halfproc::BackendKind::Kernel;
    let path = ReplyPath::from_env(kernel)?;
    let moves = MoveSchedule::from_env()?;
    let r = Arc::new(Registry {
        state: Mutex::new(State::default()),
        changed: Condvar::new(),
        set,
        path,
        moves,
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
            },
        );
    }
    crate::host::hosting(id, mb);
    let caller = node.caller.clone();
    let (rank, fatal) = (node.rank, node.fatal);
    if here {
        serve(&reg, id, member, mb, caller, rank, fatal, Some(yields));
        return;
    }
    let spawned = std::thread::Builder::new()
        .name(format!("dmi-inst-{id}"))
        .spawn(move || serve(&reg, id, member, mb, caller, rank, fatal, Some(yields)));
    if let Err(e) = spawned {
        report(&format!("dmi: instance {id}: no server thread: {e}"));
        let _ = member.kill(libc::SIGKILL);
    }
}

fn locked(r: &Registry) -> MutexGuard<'_, State> {
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
        },
    );
    let reg2 = reg.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("dmi-inst-{id}"))
        .spawn(move || serve(&reg2, id, member, mb, caller, rank, fatal, None));
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

/// In a new instance: closes the descriptors of the node's runtime that the
/// fork copied (sockets, epoll/event/pid fds, memfds, all close-on-exec as
/// the runtime makes them): the instance uses none of them, and the
/// migration engine could not carry them at `DMI_yield`. Files, pipes and
/// terminals stay, and so do the program's own sockets unless it made
/// them close-on-exec.
fn close_node_fds() {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<(i32, String)> = dir
        .flatten()
        .filter_map(|e| {
            let fd = e.file_name().to_str()?.parse().ok()?;
            let l = std::fs::read_link(e.path()).ok()?;
            Some((fd, l.to_string_lossy().into_owned()))
        })
        .collect();
    for (fd, target) in fds {
        let runtime = target.starts_with("socket:")
            || target.starts_with("anon_inode:")
            || target.starts_with("/memfd:");
        // SAFETY: F_GETFD on a descriptor number; no memory is passed.
        let cloexec = unsafe { libc::fcntl(fd, libc::F_GETFD) } & libc::FD_CLOEXEC != 0;
        if fd > 2 && runtime && cloexec {
            // SAFETY: closing a descriptor of the node's runtime, which
            // nothing in this single-threaded instance uses.
            unsafe { libc::close(fd) };
        }
    }
}

/// In a movable run's instance: closes the sockets the fork copied (the
/// node's listening socket is not close-on-exec); the program opened none
/// before `DMI_init`.
fn close_sockets() {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = dir
        .flatten()
        .filter_map(|e| {
            let fd: i32 = e.file_name().to_str()?.parse().ok()?;
            let l = std::fs::read_link(e.path()).ok()?;
            (fd > 2 && l.to_string_lossy().starts_with("socket:")).then_some(fd)
        })
        .collect();
    for fd in fds {
        // SAFETY: a socket of the node's runtime, unused by the instance.
        unsafe { libc::close(fd) };
    }
}

/// Where instance `id` goes at its `yields`-th yield, if anywhere; `None`
/// when it stays (a move to another node outside a movable run, said why).
fn destination(reg: &Registry, id: i64, yields: u64, rank: NodeId, movable: bool) -> Option<Dest> {
    let planned = if movable {
        crate::host::decide(id, yields)
    } else {
        None
    };
    match reg.moves.moves(yields, id).or(planned.map(Dest::Node)) {
        Some(Dest::Node(n)) if n == rank => Some(Dest::Here),
        Some(Dest::Node(n)) if !movable => {
            report(&format!(
                "dmi: node {rank}: instance {id} stays: moving to node {n} needs a movable run \
                 (dmi run --movable: the program's instances, not DMI_create's, move between nodes)"
            ));
            None
        }
        d => d,
    }
}

/// The instance's receiver: serves its calls until it ends (or moves to
/// another node), then records how. `movable`: the yields a movable run's
/// instance made before (`host.rs`).
#[allow(clippy::too_many_arguments)]
fn serve(
    reg: &Registry,
    id: i64,
    mut member: Member,
    mut mb: &'static Mailbox,
    caller: Caller,
    rank: NodeId,
    fatal: bool,
    movable: Option<u64>,
) {
    crate::host::rearm(
        id,
        movable.unwrap_or(0),
        mb,
        reg.moves.next_after(movable.unwrap_or(0), id),
    );
    let status = loop {
        match mb.take(POLL) {
            Ok(Taken::Call(req, dest)) => {
                let (out, written) = run(reg, &caller, req, dest, member.pid());
                mb.answer(&out, written);
            }
            Ok(Taken::Done) => {
                let r = match crate::host::ranks() {
                    Some(n) => caller.call(CallReq::BarrierOf(n)),
                    None => Err(DmiError::BadArgument(
                        "DMI_finalize in a compute instance (the node's program finalizes)".into(),
                    )),
                };
                mb.answer(&r.as_ref().map(|_| Vec::new()).map_err(Clone::clone), None);
                if id == 0 && r.is_ok() {
                    crate::host::finished();
                }
            }
            Ok(Taken::Yield(home, yields)) => {
                let dest = destination(reg, id, yields, rank, movable.is_some());
                let next = reg.moves.next_after(yields, id);
                crate::host::rearm(id, yields, mb, next);
                mb.answer_yield(dest.is_some());
                let from = member.pid();
                if let Some(Dest::Node(to)) = dest {
                    match crate::xmove::send_away(member, id, yields, home, to) {
                        Ok(m) => {
                            report(&format!(
                                "dmi: node {rank}: instance {id} moved at yield {yields} to node {to}: \
                                 pid {from} -> {} ({} bytes, checkpoint {} us, stopped {} us, move {} us)",
                                m.pid,
                                m.bytes,
                                m.dump.as_micros(),
                                m.frozen.as_micros(),
                                m.total.as_micros()
                            ));
                            // SAFETY: the original is dead (killed by the
                            // move); its mailbox is not used any more.
                            unsafe { mb.release() };
                            let mut s = locked(reg);
                            s.running -= 1;
                            s.entries.remove(&id);
                            drop(s);
                            crate::host::gone(id, true);
                            reg.changed.notify_all();
                            return;
                        }
                        Err(e) => {
                            report(&format!(
                                "dmi: node {rank}: instance {id} (pid {from}) stays: {e}"
                            ));
                            crate::host::move_failed(id);
                            crate::host::rearm(id, yields, mb, next);
                            continue;
                        }
                    }
                }
                if dest.is_none() {
                    continue;
                }
                let arm = |new: &'static Mailbox| crate::host::rearm(id, yields, new, next);
                match relocate(reg.set, member, home, arm) {
                    Ok(m) => {
                        report(&format!(
                            "dmi: node {rank}: instance {id} moved at yield {yields}: pid {from} -> {} \
                             ({} bytes, checkpoint {} us, stopped {} us, move {} us)",
                            m.member.pid(),
                            m.bytes,
                            m.dump.as_micros(),
                            m.frozen.as_micros(),
                            m.total.as_micros()
                        ));
                        // SAFETY: the original is dead (killed by the move);
                        // the old mailbox is not used any more.
                        unsafe { mb.release() };
                        member = m.member;
                        mb = m.mailbox;
                        crate::host::hosting(id, mb);
                        crate::host::rearm(id, yields, mb, next);
                        if let Some(e) = locked(reg).entries.get_mut(&id) {
                            e.pid = member.pid();
                        }
                    }
                    Err(e) => report(&format!(
                        "dmi: node {rank}: instance {id} (pid {from}) stays: {e}"
                    )),
                }
            }
            Ok(Taken::Bad) => {}
            r @ (Ok(Taken::Nothing) | Err(_)) => match member.join_timeout(Some(Duration::ZERO)) {
                Ok(Some(st)) => break Ok(st),
                // An unusable mailbox must not make this loop spin.
                Ok(None) if r.is_err() => std::thread::sleep(POLL),
                Ok(None) => {}
                Err(e) => break Err(e.to_string()),
            },
        }
    };
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
            None if movable.is_some() && st.success() => Ended::Returned(0),
            _ if movable.is_some() => Ended::Failed(match st {
                ExitStatus::Exited(c) => format!("exited with status {c}"),
                st => describe(st),
            }),
            _ => Ended::Failed(describe(st)),
        },
        Err(e) => Ended::Failed(format!("its status is unknown ({e})")),
    };
    if status_known {
        // SAFETY: the instance has ended; only this thread used its
        // mailbox on the node's side.
        unsafe { mb.release() };
    }
    crate::host::gone(id, matches!(ended, Ended::Returned(_)));
    let mut s = locked(reg);
    s.running -= 1;
    let pid = s.entries.get(&id).map_or(member.pid(), |e| e.pid);
    if let Ended::Failed(how) = &ended {
        let msg = format!("instance {id} (pid {pid}) {how}");
        report(&format!("dmi: node {rank}: {msg}"));
        if fatal {
            report(&format!(
                "dmi: node {rank}: stopping (set DMI_ERRORS=return to handle it instead)"
            ));
            std::process::exit(PEER_FAILED_EXIT);
        }
        // Waiting arrivals see it and fail their round.
        s.failed.get_or_insert(DmiError::Instance(msg));
    }
    // Either way the barrier's waiters look again (one fewer to wait for).
    match s.entries.get_mut(&id) {
        Some(e) if e.detached => {
            s.entries.remove(&id);
        }
        Some(e) => e.ended = Some(ended),
        None => {}
    }
    drop(s);
    reg.changed.notify_all();
}

fn describe(st: ExitStatus) -> String {
    match st {
        ExitStatus::Signaled(sig) => format!("was killed by signal {sig}"),
        ExitStatus::Exited(c) => format!("exited with status {c} before its function returned"),
    }
}

fn finish_round(s: &mut State, r: Result<(), DmiError>) {
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

/// The node's part of an instance barrier: the last running instance to
/// arrive takes the node into the barrier of all nodes.
fn barrier(reg: &Registry, caller: &Caller) -> Result<(), DmiError> {
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
        if let Some(e) = &s.failed {
            let e = e.clone();
            finish_round(&mut s, Err(e.clone()));
            drop(s);
            reg.changed.notify_all();
            return Err(e);
        }
        if s.open && !s.releasing && s.arrived == s.running {
            s.releasing = true;
            drop(s);
            let r = caller.call(CallReq::Barrier).map(drop);
            let mut s = locked(reg);
            finish_round(&mut s, r.clone());
            drop(s);
            reg.changed.notify_all();
            return r;
        }
        s = reg.changed.wait(s).unwrap_or_else(|e| e.into_inner());
    }
}
