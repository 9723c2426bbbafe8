// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Movable runs (`DMI_MOVABLE=1`, set by `dmi run --movable`; `docs/dmi-reconf.md`,
//! "DMI_yield"): `DMI_init` makes the node process the host of its
//! half-process set and runs the rest of the program (after `DMI_init`) as
//! a compute instance, a member forked from it: so an unchanged DMI
//! program, plus `DMI_yield()` in its loop, can move between nodes.
//! Instance ids are the program's ranks (`0..DMI_INITIAL`).
//!
//! * Barriers of instances are barriers of all instances (`BarrierOf`
//!   the number of ranks), wherever they run.
//! * The plan: node 0 knows the members and which of them leave. Changes
//!   come from the schedule of `dmi run --grow-at/--shrink-at ITER:K`, due
//!   once any instance made ITER yields (its node reports `Reached`): a
//!   grow joins spares at once (an epoch change), a shrink marks the
//!   highest-ranked members as leaving. Node 0 sends the plan to every
//!   node; an instance on a leaving node moves at its next yield to
//!   `staying[rank % len]`, one that belongs on a node that just joined
//!   moves there. A leaving node that hosts nothing says `Empty`; node 0
//!   then takes it out of the run (an epoch change handing over its pages)
//!   and the node exits.
//! * The end: rank 0's `DMI_finalize` is the last barrier of all
//!   instances; its node sends `Over`, and every host finalizes once the
//!   instances it runs have exited.

use std::collections::HashMap;
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::Duration;

use halfproc::Member;

use crate::addr::NodeId;
use crate::error::DmiError;
use crate::msg::InstMsg;
use crate::node::CallReq;
use crate::ring::Mailbox;
use crate::runtime::{AppEvent, Caller, Config, Dmi};
use crate::schedule::{self, Request};
use crate::transport::report;

/// Whether this run hosts its program as movable instances.
pub fn requested() -> bool {
    std::env::var("DMI_MOVABLE").is_ok_and(|v| v == "1")
}

struct State {
    members: Vec<NodeId>,
    leaving: Vec<NodeId>,
    /// Instances running here, by id, with their mailboxes.
    hosted: HashMap<i64, &'static Mailbox>,
    /// Where the plan sends an instance at its next yield.
    targets: HashMap<i64, NodeId>,
    /// The most yields this node reported to node 0.
    reported: u64,
    /// Scheduled changes node 0 has applied, as its last plan said.
    applied: u64,
    empty_sent: bool,
    over: bool,
    failed: bool,
}

struct Host {
    me: NodeId,
    size: u32,
    nranks: u32,
    /// The yield counts at which scheduled changes fall due.
    iters: Vec<u64>,
    /// The same, one per scheduled change (several may share a count).
    due: Vec<u64>,
    state: Mutex<State>,
    /// Signalled when a plan arrives.
    planned: std::sync::Condvar,
    planner: Option<Mutex<mpsc::Sender<PlanEv>>>,
}

static HOST: OnceLock<Host> = OnceLock::new();

enum PlanEv {
    Reached(u64),
    Empty(NodeId),
}

fn host() -> Option<&'static Host> {
    HOST.get()
}

fn locked(h: &Host) -> std::sync::MutexGuard<'_, State> {
    h.state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where instance `id` belongs among the `staying` nodes.
pub fn place(id: i64, staying: &[NodeId]) -> Option<NodeId> {
    (!staying.is_empty()).then(|| staying[id.rem_euclid(staying.len() as i64) as usize])
}

fn staying(s: &State) -> Vec<NodeId> {
    let mut v: Vec<NodeId> = s
        .members
        .iter()
        .copied()
        .filter(|m| !s.leaving.contains(m))
        .collect();
    v.sort_unstable();
    v
}

/// In a movable run: the number of ranks (every instance barrier waits for
/// that many instances).
pub(crate) fn ranks() -> Option<u32> {
    host().map(|h| h.nranks)
}

/// Instance `id` runs here now with mailbox `mb`.
pub(crate) fn hosting(id: i64, mb: &'static Mailbox) {
    if let Some(h) = host() {
        locked(h).hosted.insert(id, mb);
    }
}

/// Sets when instance `id`, which made `n` yields, asks its node next:
/// at `explicit` (the next scheduled move), at the next yield when the plan
/// has a target for it, or when a scheduled change falls due.
pub(crate) fn rearm(id: i64, n: u64, mb: &Mailbox, explicit: Option<u64>) {
    let Some(h) = host() else {
        mb.set_move_at(explicit);
        return;
    };
    let s = locked(h);
    let planned = s.targets.contains_key(&id).then_some(n + 1);
    let due = h
        .iters
        .iter()
        .copied()
        .filter(|&i| i > s.reported)
        .min()
        .map(|i| i.max(n + 1));
    let at = [explicit, planned, due].into_iter().flatten().min();
    mb.set_move_at(at);
}

/// How long an instance that reported a due change waits for node 0's
/// plan before it goes on without it (and says so).
const PLAN_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Instance `id` asks at its `n`-th yield: where the plan sends it (if
/// anywhere). When a scheduled change is due, reports the yield to node 0
/// and waits for the plan that applies it, so a change due at yield `n`
/// takes effect there, however fast the program runs (the other instances
/// wait for this one in their next barrier); without the wait a program
/// could end before the plan arrived and nothing would move.
pub(crate) fn decide(id: i64, n: u64) -> Option<NodeId> {
    let h = host()?;
    let mut s = locked(h);
    if h.iters.iter().any(|&i| i > s.reported && i <= n) {
        s.reported = n;
        let _ = crate::xmove::send(0, InstMsg::Reached { yields: n });
        let want = h.due.iter().filter(|&&i| i <= n).count() as u64;
        let (g, t) = h
            .planned
            .wait_timeout_while(s, PLAN_WAIT, |s| s.applied < want && !s.over)
            .unwrap_or_else(|e| e.into_inner());
        s = g;
        if t.timed_out() {
            report(&format!(
                "dmi: node {}: no plan for the changes due at yield {n} after {} s; going on",
                h.me,
                PLAN_WAIT.as_secs()
            ));
        }
    }
    s.targets.remove(&id)
}

/// A move of instance `id` failed; a leaving node tries again at its next
/// yield (to the same place: a refusal there is temporary).
pub(crate) fn move_failed(id: i64) {
    let Some(h) = host() else { return };
    let mut s = locked(h);
    if s.leaving.contains(&h.me) {
        if let Some(t) = place(id, &staying(&s)) {
            s.targets.insert(id, t);
        }
    }
}

/// Instance `id` no longer runs here (moved away, or ended; `ok` false if
/// it failed).
pub(crate) fn gone(id: i64, ok: bool) {
    let Some(h) = host() else { return };
    let mut s = locked(h);
    s.hosted.remove(&id);
    s.targets.remove(&id);
    s.failed |= !ok;
    empty_if_leaving(h, &mut s);
}

fn empty_if_leaving(h: &Host, s: &mut State) {
    if s.leaving.contains(&h.me) && s.hosted.is_empty() && !s.empty_sent {
        s.empty_sent = true;
        let _ = crate::xmove::send(0, InstMsg::Empty);
    }
}

/// Rank 0 passed its final barrier: every instance did. Tell every node.
pub(crate) fn finished() {
    let Some(h) = host() else { return };
    for n in 0..h.size {
        let _ = crate::xmove::send(n, InstMsg::Over);
    }
}

struct HostRef;

impl crate::xmove::Host for HostRef {
    fn accepts(&self, id: i64, origin: Option<NodeId>) -> Result<(), String> {
        let h = host().ok_or("this node hosts no movable run")?;
        if let Some(o) = origin {
            return Err(format!(
                "instance {id} of node {o} is DMI_create's, and this is a movable run"
            ));
        }
        let s = locked(h);
        if !s.members.contains(&h.me) {
            return Err(format!("node {} is not a member of the run", h.me));
        }
        if s.leaving.contains(&h.me) {
            return Err(format!("node {} is leaving the run", h.me));
        }
        if s.over {
            return Err("the run is over".into());
        }
        if id < 0 || id >= i64::from(h.nranks) {
            return Err(format!("instance {id} is not a rank of this run"));
        }
        Ok(())
    }

    fn arrived(&self, a: crate::xmove::Arrival) {
        crate::serve::serve_movable(a.id, a.member, a.mailbox, a.yields, true);
    }

    fn arm(&self, id: i64, mailbox: &'static Mailbox, yields: u64) {
        crate::serve::arm_arrival(id, yields, mailbox);
    }

    fn message(&self, from: NodeId, m: InstMsg) {
        let Some(h) = host() else { return };
        match m {
            InstMsg::Plan {
                members,
                leaving,
                applied,
            } => apply_plan(h, members, leaving, applied),
            InstMsg::Reached { yields } => plan_event(h, PlanEv::Reached(yields)),
            InstMsg::Empty => plan_event(h, PlanEv::Empty(from)),
            InstMsg::Over => {
                locked(h).over = true;
                h.planned.notify_all();
            }
            other => report(&format!(
                "dmi: node {}: unexpected {other:?} from node {from}",
                h.me
            )),
        }
    }
}

fn plan_event(h: &Host, ev: PlanEv) {
    if let Some(p) = &h.planner {
        let _ = p.lock().unwrap_or_else(|e| e.into_inner()).send(ev);
    }
}

/// Every node: the members and the leaving nodes changed.
fn apply_plan(h: &Host, members: Vec<NodeId>, leaving: Vec<NodeId>, applied: u64) {
    let mut s = locked(h);
    let before = std::mem::replace(&mut s.members, members);
    s.leaving = leaving;
    s.applied = s.applied.max(applied);
    h.planned.notify_all();
    let staying = staying(&s);
    let me_leaving = s.leaving.contains(&h.me);
    let hosted: Vec<(i64, &'static Mailbox)> = s.hosted.iter().map(|(&i, &m)| (i, m)).collect();
    for (id, mb) in hosted {
        let Some(want) = place(id, &staying) else {
            continue;
        };
        if want != h.me && (me_leaving || !before.contains(&want)) {
            s.targets.insert(id, want);
            mb.set_move_at(Some(1));
        }
    }
    empty_if_leaving(h, &mut s);
}

/// Node 0: applies the scheduled changes as they fall due and takes
/// emptied nodes out of the run; sends every change to every node.
fn planner(caller: Caller, size: u32, nranks: u32, reqs: Vec<Request>, rx: mpsc::Receiver<PlanEv>) {
    let mut members: Vec<NodeId> = (0..nranks).collect();
    let mut leaving: Vec<NodeId> = Vec::new();
    let mut applied = 0;
    let rescale = |join: Vec<NodeId>, leave: Vec<NodeId>| {
        let what = format!("join {join:?}, leave {leave:?}");
        caller
            .call(CallReq::Rescale { join, leave })
            .map_err(|e| report(&format!("dmi: node 0: rescale ({what}) failed: {e}")))
            .is_ok()
    };
    while let Ok(ev) = rx.recv() {
        match ev {
            PlanEv::Reached(n) => {
                while applied < reqs.len() && reqs[applied].iter <= n {
                    let cur: Vec<NodeId> = members
                        .iter()
                        .copied()
                        .filter(|m| !leaving.contains(m))
                        .collect();
                    let (join, leave) = schedule::apply(&reqs[applied..=applied], &cur);
                    applied += 1;
                    if !join.is_empty() && rescale(join.clone(), Vec::new()) {
                        report(&format!("dmi: node 0: nodes {join:?} joined at yield {n}"));
                        members.extend(join);
                        members.sort_unstable();
                    }
                    if !leave.is_empty() {
                        report(&format!("dmi: node 0: nodes {leave:?} leave at yield {n}"));
                        leaving.extend(leave);
                    }
                }
            }
            PlanEv::Empty(r) if leaving.contains(&r) => {
                if rescale(Vec::new(), vec![r]) {
                    report(&format!("dmi: node 0: node {r} left the run"));
                    members.retain(|&m| m != r);
                    leaving.retain(|&m| m != r);
                }
            }
            PlanEv::Empty(_) => continue,
        }
        for n in 0..size {
            let plan = InstMsg::Plan {
                members: members.clone(),
                leaving: leaving.clone(),
                applied: applied as u64,
            };
            let _ = crate::xmove::send(n, plan);
        }
    }
}

/// `DMI_init` of a movable run: starts the node, forks the program's
/// instance (which returns from here) and, in the node process, hosts
/// instances until the run is over; then the process exits.
pub(crate) fn run_program(rmw: std::sync::Arc<crate::rmw::RmwTable>) -> Result<(), DmiError> {
    let mut cfg = Config::from_env()?;
    let size = cfg.peers.len() as u32;
    let nranks = match std::env::var("DMI_INITIAL") {
        Ok(v) => v
            .parse::<u32>()
            .ok()
            .filter(|&n| n >= 1 && n <= size)
            .ok_or_else(|| DmiError::Setup(format!("DMI_INITIAL={v:?} is not valid")))?,
        Err(_) => size,
    };
    if nranks < size {
        cfg.members = Some(nranks);
    }
    let changes = schedule::parse(&std::env::var("DMI_SCHEDULE").unwrap_or_default())?;
    let reqs = schedule::resolve(&changes, nranks, size, nranks)?;
    let me = cfg.rank;
    let d = Dmi::start(cfg, rmw.clone())?;
    let set = crate::serve::node_set()?;
    let (ptx, prx) = mpsc::channel();
    let due: Vec<u64> = reqs.iter().map(|r| r.iter).collect();
    let mut iters = due.clone();
    iters.dedup();
    let h = Host {
        me,
        size,
        nranks,
        iters,
        due,
        planned: std::sync::Condvar::new(),
        state: Mutex::new(State {
            members: (0..nranks).collect(),
            leaving: Vec::new(),
            hosted: HashMap::new(),
            targets: HashMap::new(),
            reported: 0,
            applied: 0,
            empty_sent: false,
            over: false,
            failed: false,
        }),
        planner: (me == 0).then(|| Mutex::new(ptx)),
    };
    if HOST.set(h).is_err() {
        return Err(DmiError::Setup("DMI_init of a movable run twice".into()));
    }
    crate::serve::init_movable(d.caller()?, me)?;
    crate::xmove::start(me, size, d.caller()?, Box::new(HostRef))?;
    if me == 0 {
        let caller = d.caller()?;
        std::thread::Builder::new()
            .name("dmi-planner".into())
            .spawn(move || planner(caller, size, nranks, reqs, prx))
            .map_err(|e| DmiError::Setup(format!("planner thread: {e}")))?;
    }
    if me < nranks {
        let mb = Mailbox::new()?;
        let node_pid = std::process::id() as i32;
        // Armed before the program runs (it may reach a yield that must ask
        // without calling the node: hits from the frames).
        crate::serve::arm_arrival(i64::from(me), 0, mb);
        match Member::fork(set).map_err(|e| DmiError::Setup(format!("forking the program: {e}")))? {
            None => {
                // The program's instance: the node's runtime stays behind.
                crate::serve::become_program(mb, node_pid, me, nranks, rmw);
                std::mem::forget(d);
                return Ok(());
            }
            Some(member) => crate::serve::serve_movable(i64::from(me), member, mb, 0, false),
        }
    }
    host_loop(d, me)
}

/// The node process of a movable run: waits until the run is over (or this
/// node has left it), then finalizes and exits.
fn host_loop(d: Dmi, me: NodeId) -> ! {
    let h = host().expect("host state is set before the loop");
    loop {
        {
            let s = locked(h);
            if s.over && s.hosted.is_empty() {
                let member = s.members.contains(&me);
                let failed = s.failed;
                drop(s);
                let r = if member {
                    d.finalize()
                } else {
                    d.leave();
                    Ok(())
                };
                if let Err(e) = &r {
                    report(&format!("dmi: node {me}: finalize: {e}"));
                }
                std::process::exit(i32::from(failed || r.is_err()));
            }
        }
        if let Ok(AppEvent::Left) = d.app_event_timeout(Duration::from_millis(50)) {
            report(&format!(
                "dmi: node {me}: left the run (its instances moved away)"
            ));
            d.leave();
            std::process::exit(0);
        }
    }
}
