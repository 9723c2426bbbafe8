// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `DMI_create`'s instances on other nodes (`docs/dmi-reconf.md`,
//! "Cross-node moves of DMI_create's instances"): `DMI_MOVE_AT=N:ID@NODE`
//! moves instance `ID` to node `NODE` at its `N`-th yield with the
//! protocol of `xmove.rs`. The instance stays its *origin*'s (the node
//! whose program created it and joins it): the node it runs on serves its
//! calls, but
//!
//! * its barrier arrivals go to the origin (`Arrive`, answered `Passed`
//!   when the origin's round completes), which counts it among its running
//!   instances as if it ran there;
//! * its end goes to the origin (`Ended`: the value its function returned
//!   or how its process ended), which records it for `DMI_join` as its own
//!   receiver would have;
//! * each node it arrives on tells the origin (`At`, with the yield of the
//!   move), so the origin knows where it is: if that node fails, the
//!   instance is lost and the origin reports it as failed.
//!
//! Every node of a run that is not movable starts this (`DMI_init`), so a
//! node that never created an instance can still host one.

use std::collections::{HashMap, HashSet};
use std::sync::{mpsc, Mutex, OnceLock};

use crate::addr::NodeId;
use crate::error::DmiError;
use crate::msg::InstMsg;
use crate::runtime::{Caller, Dmi};
use crate::serve::{self, locked as reg_locked, Ended, Served, Where};
use crate::transport::report;
use crate::xmove::{self, Arrival};

struct Guests {
    me: NodeId,
    caller: Caller,
    /// Barrier arrivals sent to origins, waiting for `Passed`: token ->
    /// (origin, channel).
    waiting: Mutex<HashMap<u64, (NodeId, Passed)>>,
    /// Nodes known to have failed (lock order: `waiting`, then `dead`): an
    /// arrival for one fails at once instead of waiting for an answer
    /// that cannot come.
    dead: Mutex<HashSet<NodeId>>,
    next: Mutex<u64>,
}

/// Where a barrier arrival hears its round's outcome (why it failed).
type Passed = mpsc::Sender<Option<String>>;

static GUESTS: OnceLock<Guests> = OnceLock::new();

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `DMI_init` outside a movable run: this node hosts `DMI_create`'s
/// instances that move here, and moves its own away. A second `DMI_init`
/// in one process (after `DMI_finalize`) keeps the first's.
pub(crate) fn start(d: &Dmi) -> Result<(), DmiError> {
    let g = Guests {
        me: d.rank(),
        caller: d.caller()?,
        waiting: Mutex::new(HashMap::new()),
        dead: Mutex::new(HashSet::new()),
        next: Mutex::new(0),
    };
    if GUESTS.set(g).is_err() {
        return Ok(());
    }
    xmove::start(d.rank(), d.size(), d.caller()?, Box::new(GuestHost))
}

/// Instance `id` of node `origin`, running here, arrived at a barrier:
/// waits for the origin's round to complete.
pub(crate) fn barrier(origin: NodeId, id: i64) -> Result<(), DmiError> {
    let g = GUESTS.get().ok_or(DmiError::NotInitialized)?;
    let token = {
        let mut n = locked(&g.next);
        *n += 1;
        *n
    };
    let (tx, rx) = mpsc::channel();
    {
        let mut w = locked(&g.waiting);
        if locked(&g.dead).contains(&origin) {
            return Err(DmiError::Instance(format!(
                "barrier of node {origin}'s instance {id}: node {origin} failed"
            )));
        }
        w.insert(token, (origin, tx));
    }
    let sent = xmove::send(origin, InstMsg::Arrive { id, token });
    // No time limit: a barrier waits as long as its slowest instance. A
    // failed origin answers through `peer_dead`.
    let heard = sent.map_err(|e| e.to_string()).and_then(|_| {
        rx.recv()
            .map_err(|_| format!("node {origin} did not answer"))
    });
    locked(&g.waiting).remove(&token);
    match heard {
        Ok(None) => Ok(()),
        Ok(Some(why)) | Err(why) => Err(DmiError::Instance(format!(
            "barrier of node {origin}'s instance {id}: {why}"
        ))),
    }
}

/// This node's report of an instance of node `origin` that ended here.
pub(crate) fn report_end(origin: NodeId, id: i64, ended: &Ended) {
    let (returned, how) = match ended {
        Ended::Returned(v) => (Some(*v), String::new()),
        Ended::Failed(how) => (None, how.clone()),
    };
    if let Err(e) = xmove::send(origin, InstMsg::Ended { id, returned, how }) {
        report(&format!(
            "dmi: cannot tell node {origin} that its instance {id} ended: {e}"
        ));
    }
}

struct GuestHost;

impl xmove::Host for GuestHost {
    fn accepts(&self, id: i64, origin: Option<NodeId>) -> Result<(), String> {
        let Some(o) = origin else {
            return Err(format!(
                "instance {id} is a movable run's rank, and this run is not movable"
            ));
        };
        accepts_guests().map_err(|e| format!("node {o}'s instance {id}: {e}"))
    }

    fn arrived(&self, a: Arrival) {
        let Some(g) = GUESTS.get() else { return };
        let origin = a.origin.unwrap_or(g.me);
        if origin != g.me {
            let at = InstMsg::At {
                id: a.id,
                node: g.me,
                yields: a.yields,
            };
            let _ = xmove::send(origin, at);
        }
        serve_arrived(g.caller.clone(), g.me, origin, a);
    }

    fn arm(&self, id: i64, mailbox: &'static crate::ring::Mailbox, yields: u64) {
        crate::serve::arm_arrival(id, yields, mailbox);
    }

    fn message(&self, from: NodeId, m: InstMsg) {
        let Some(g) = GUESTS.get() else { return };
        match m {
            InstMsg::At { id, node, yields } => away_at(id, node, yields),
            InstMsg::Arrive { id, token } => {
                let caller = g.caller.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("dmi-arrive-barrier-{id}"))
                    .spawn(move || {
                        let failed = serve::registry()
                            .and_then(|reg| serve::barrier(&reg, &caller))
                            .err()
                            .map(|e| e.to_string());
                        let _ = xmove::send(from, InstMsg::Passed { token, failed });
                    });
                if let Err(e) = spawned {
                    let failed = Some(format!("no thread at node {}: {e}", g.me));
                    let _ = xmove::send(from, InstMsg::Passed { token, failed });
                }
            }
            InstMsg::Passed { token, failed } => {
                if let Some((_, tx)) = locked(&g.waiting).remove(&token) {
                    let _ = tx.send(failed);
                }
            }
            InstMsg::Ended { id, returned, how } => {
                let ended = match returned {
                    Some(v) => Ended::Returned(v),
                    None => Ended::Failed(how),
                };
                ended_away(g.me, id, from, ended);
            }
            other => report(&format!(
                "dmi: node {}: unexpected {other:?} from node {from}",
                g.me
            )),
        }
    }

    fn peer_dead(&self, node: NodeId) {
        let Some(g) = GUESTS.get() else { return };
        // Barrier arrivals at it: an origin that failed answers nothing.
        let mut w = locked(&g.waiting);
        locked(&g.dead).insert(node);
        for (_, (o, tx)) in w.iter() {
            if *o == node {
                let _ = tx.send(Some(format!("node {node} failed")));
            }
        }
        w.retain(|_, (o, _)| *o != node);
        drop(w);
        lost_with(g.me, node);
    }
}

/// Whether this node can serve another node's instance.
fn accepts_guests() -> Result<(), String> {
    let reg = serve::registry().map_err(|e| e.to_string())?;
    if reg.receivers == crate::serve_single::Receivers::Single {
        return Err(
            "DMI_RECEIVERS=single: instances move between nodes with a receiver each \
                    (use DMI_RECEIVERS=per-instance)"
                .into(),
        );
    }
    Ok(())
}

/// Serves a copy that arrived here (in this thread, its parent): another
/// node's instance, or one of this node's coming back.
fn serve_arrived(caller: Caller, me: NodeId, origin: NodeId, a: Arrival) {
    let end = |why: String| {
        report(&format!(
            "dmi: node {me}: instance {} (pid {}) {why}",
            a.id,
            a.member.pid()
        ));
        let _ = a.member.kill(libc::SIGKILL);
        let _ = a.member.join();
    };
    let reg = match serve::registry() {
        Ok(r) => r,
        Err(e) => return end(format!("cannot be served: {e}")),
    };
    let mut fatal = false;
    if origin == me {
        let mut st = reg_locked(&reg);
        match st.entries.get_mut(&a.id) {
            Some(e) if e.ended.is_none() && e.at != Where::Here => {
                e.pid = a.member.pid();
                e.at = Where::Here;
                fatal = e.fatal;
            }
            _ => {
                drop(st);
                return end("came back, but this node has no such instance away".into());
            }
        }
    }
    let s = Served {
        id: a.id,
        member: a.member,
        mb: a.mailbox,
        caller,
        rank: me,
        fatal,
        movable: false,
        since: a.yields,
        guest: (origin != me).then_some(origin),
    };
    serve::serve(&reg, s);
}

/// Origin: its instance `id` arrived on node `node` at its yield `yields`
/// (a report older than what this node knows is dropped).
fn away_at(id: i64, node: NodeId, yields: u64) {
    let Ok(reg) = serve::registry() else { return };
    let mut st = reg_locked(&reg);
    if let Some(e) = st.entries.get_mut(&id) {
        let newer = match e.at {
            Where::Here => false,
            Where::Going(_) => true,
            Where::At(_, y) => y <= yields,
        };
        if newer && e.ended.is_none() {
            e.at = Where::At(node, yields);
        }
    }
}

/// Origin: its instance `id` ended on node `from` as `ended` says.
fn ended_away(me: NodeId, id: i64, from: NodeId, ended: Ended) {
    let Ok(reg) = serve::registry() else { return };
    let st = reg_locked(&reg);
    let Some(e) = st
        .entries
        .get(&id)
        .filter(|e| e.ended.is_none() && e.at != Where::Here)
    else {
        drop(st);
        report(&format!(
            "dmi: node {me}: node {from} says instance {id} ended, but it does not run there"
        ));
        return;
    };
    let (pid, fatal) = (e.pid, e.fatal);
    drop(st);
    if let Ended::Failed(how) = &ended {
        let how = format!("{how} (on node {from})");
        serve::record(&reg, id, pid, me, fatal, Ended::Failed(how));
    } else {
        serve::record(&reg, id, pid, me, fatal, ended);
    }
}

/// Origin: node `node` failed; this node's instances running there are lost.
fn lost_with(me: NodeId, node: NodeId) {
    let Ok(reg) = serve::registry() else { return };
    let lost: Vec<(i64, i32, bool)> = reg_locked(&reg)
        .entries
        .iter()
        .filter(|(_, e)| e.ended.is_none() && matches!(e.at, Where::At(n, _) if n == node))
        .map(|(&id, e)| (id, e.pid, e.fatal))
        .collect();
    for (id, pid, fatal) in lost {
        let how = format!("was lost with node {node}, where it ran");
        serve::record(&reg, id, pid, me, fatal, Ended::Failed(how));
    }
}
