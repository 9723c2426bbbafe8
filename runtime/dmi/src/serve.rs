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
use crate::relocate::{relocate, MoveSchedule};
use crate::ring::{Link, Mailbox, ReplyPath, Taken, POLL};
use crate::rmw::RmwTable;
use crate::runtime::{Caller, Dmi, PEER_FAILED_EXIT};

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

fn locked(r: &Registry) -> MutexGuard<'_, State> {
    r.state.lock().unwrap_or_else(|e| e.into_inner())
}

fn report(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
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
        .spawn(move || serve(&reg2, id, member, mb, caller, rank, fatal));
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

/// The instance's receiver: serves its calls until it ends, then records how.
fn serve(
    reg: &Registry,
    id: i64,
    mut member: Member,
    mut mb: &'static Mailbox,
    caller: Caller,
    rank: NodeId,
    fatal: bool,
) {
    mb.set_move_at(reg.moves.next_after(0, id));
    let status = loop {
        match mb.take(POLL) {
            Ok(Taken::Call(req, dest)) => {
                let (out, written) = run(reg, &caller, req, dest, member.pid());
                mb.answer(&out, written);
            }
            Ok(Taken::Yield(home, yields)) => {
                let go = reg.moves.moves(yields, id);
                let next = reg.moves.next_after(yields, id);
                mb.set_move_at(next);
                mb.answer_yield(go);
                if !go {
                    continue;
                }
                let from = member.pid();
                match relocate(reg.set, member, home) {
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
                        mb.set_move_at(next);
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
    let ended = match status {
        Ok(st) => match mb.returned() {
            Some(v) if st.success() => Ended::Returned(v),
            _ => Ended::Failed(describe(st)),
        },
        Err(e) => Ended::Failed(format!("its status is unknown ({e})")),
    };
    if status_known {
        // SAFETY: the instance has ended; only this thread used its
        // mailbox on the node's side.
        unsafe { mb.release() };
    }
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
