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
//! * the source of each move tells the origin where it goes before it
//!   kills the original (`Moving`, which the origin answers `MovingSeen`,
//!   or refuses for a target it knows failed; the source commits only on
//!   that answer, and tells the origin `At` itself if it keeps the
//!   instance after all), and the node it arrives on confirms it (`At`,
//!   with the yield of the move), so the origin knows where it is: if that
//!   node fails (or stops talking to it), the instance is lost and the
//!   origin reports it as failed; a target whose source failed before its
//!   word came ends its copy and tells the origin (`Lost`). A move home is
//!   recorded at its `Commit` (`Going` to this node), before the source's
//!   failure could be handled.
//!
//! Every node of a run that is not movable starts this (`DMI_init`), so a
//! node that never created an instance can still host one.

use std::collections::HashMap;
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
    /// Nodes known to have failed or to have stopped talking to this node,
    /// and which (lock order: `waiting`, then `dead`): an arrival for one
    /// fails at once instead of waiting for an answer that cannot come.
    dead: Mutex<HashMap<NodeId, String>>,
    next: Mutex<u64>,
}

/// Where a barrier arrival hears its round's outcome (why it failed).
type Passed = mpsc::Sender<Option<String>>;

static GUESTS: OnceLock<Guests> = OnceLock::new();

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `DMI_init` outside a movable run: this node hosts `DMI_create`'s
/// instances that move here, and moves its own away. Once per process
/// (`DMI_init` after `DMI_finalize` is refused: `capi.rs`).
pub(crate) fn start(d: &Dmi) -> Result<(), DmiError> {
    let g = Guests {
        me: d.rank(),
        caller: d.caller()?,
        waiting: Mutex::new(HashMap::new()),
        dead: Mutex::new(HashMap::new()),
        next: Mutex::new(0),
    };
    if GUESTS.set(g).is_err() {
        return Err(DmiError::Setup(
            "the instance mover of this process started already (one DMI run per process)".into(),
        ));
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
        if let Some(why) = locked(&g.dead).get(&origin) {
            return Err(DmiError::Instance(format!(
                "barrier of node {origin}'s instance {id}: {why}"
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
            xmove::test_hold(
                "DMI_TEST_AT_DELAY",
                g.me,
                &format!("node {origin}'s instance {} arrived; At held back", a.id),
            );
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
            InstMsg::At { id, node, yields } => away_at(g, id, node, yields, Report::At),
            InstMsg::Moving {
                id,
                node,
                yields,
                token,
            } => moving(g, from, id, node, yields, token),
            InstMsg::Lost { id, yields, why } => lost_moving(g.me, id, yields, why),
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

    fn peer_dead(&self, node: NodeId, silent: Option<NodeId>) {
        let Some(g) = GUESTS.get() else { return };
        // Barrier arrivals at it: an origin that failed (or no longer
        // talks to this node) answers nothing.
        let why = match silent {
            Some(x) => format!("node {node} stopped talking after node {x} failed"),
            None => format!("node {node} failed"),
        };
        let mut w = locked(&g.waiting);
        // A failure says more than a silence (which may come first).
        let mut dead = locked(&g.dead);
        if silent.is_none() || !dead.contains_key(&node) {
            dead.insert(node, why.clone());
        }
        drop(dead);
        for (_, (o, tx)) in w.iter() {
            if *o == node {
                let _ = tx.send(Some(why.clone()));
            }
        }
        w.retain(|_, (o, _)| *o != node);
        drop(w);
        // After `dead` has it: a report of a move to it that comes later
        // (`away_at`) sees it there.
        lost_with(g.me, node, silent);
    }

    fn commit_heard(&self, id: i64, origin: Option<NodeId>, from: NodeId) {
        let Some(g) = GUESTS.get() else { return };
        if origin != Some(g.me) {
            return;
        }
        // Coming home: no longer on node `from` (its failure or silence,
        // handled next, must not record a loss), not served here yet.
        let Ok(reg) = serve::registry() else { return };
        let mut st = reg_locked(&reg);
        let Some(e) = st.entries.get_mut(&id) else {
            return;
        };
        if e.ended.is_some() || e.at.since().is_none() {
            return;
        }
        e.at = Where::Going(g.me);
        drop(st);
        report(&format!(
            "dmi: node {}: instance {id} comes back from node {from}",
            g.me
        ));
    }

    fn committed(&self, id: i64, origin: Option<NodeId>, to: NodeId, yields: u64) {
        let (Some(g), Some(o)) = (GUESTS.get(), origin) else {
            return;
        };
        // Another origin recorded the move before the commit (`Moving`,
        // answered `MovingSeen`), or is the target.
        if o == g.me {
            away_at(g, id, to, yields, Report::Committed);
        }
    }

    fn source_failed(
        &self,
        id: i64,
        origin: Option<NodeId>,
        from: NodeId,
        yields: u64,
        silent: Option<NodeId>,
    ) -> Option<(NodeId, InstMsg)> {
        let (g, o) = (GUESTS.get()?, origin?);
        let why = match silent {
            Some(x) => format!(
                "was lost: node {from}, which was moving it to node {}, stopped talking \
                 after node {x} failed",
                g.me
            ),
            None => format!(
                "was lost with node {from}, which was moving it to node {}",
                g.me
            ),
        };
        if o == g.me {
            // Coming home: this node records it (and says so).
            lost_moving(g.me, id, yields, why);
            return None;
        }
        report(&format!(
            "dmi: node {}: node {o}'s instance {id} {why} (its copy here is ended)",
            g.me
        ));
        // A failed origin hears nothing: it is gone with its instances.
        (o != from).then_some((o, InstMsg::Lost { id, yields, why }))
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

/// Who says where an instance of this node went.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Report {
    /// The node it arrived on (`At`).
    At,
    /// Its source, before the commit (`Moving`).
    Moving,
    /// This node, moving it away, at the commit.
    Committed,
}

/// Origin: node `from` moves instance `id` on to node `to` at its yield
/// `yields` and waits for this node's answer before it commits: refused
/// if `to` is known to have failed, else recorded (`away_at`).
fn moving(g: &Guests, from: NodeId, id: i64, to: NodeId, yields: u64, token: u64) {
    // On the engine's thread, as `peer_dead`: `dead` is current.
    let known = locked(&g.dead).get(&to).cloned();
    let refused = if known.is_some() {
        known
    } else {
        report(&format!(
            "dmi: node {}: instance {id} moves from node {from} to node {to} at yield {yields}",
            g.me
        ));
        away_at(g, id, to, yields, Report::Moving);
        None
    };
    let m = InstMsg::MovingSeen { token, refused };
    if xmove::hold_ms("DMI_TEST_MOVING_DELAY", g.me).is_none() {
        // On the engine's thread: queued behind what it handled before.
        let _ = xmove::send(from, m);
        return;
    }
    // Tests only: held back on a thread of its own (the engine goes on).
    let me = g.me;
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("dmi-test-hold".into())
        .spawn(move || {
            let what = format!("instance {id} moves to node {to}; MovingSeen held back");
            xmove::test_hold("DMI_TEST_MOVING_DELAY", me, &what);
            if let Ok(m) = rx.recv() {
                let _ = xmove::send(from, m);
            }
        });
    match spawned {
        Ok(_) => {
            let _ = tx.send(m);
        }
        Err(e) => {
            report(&format!("dmi: node {me}: MovingSeen not held back: {e}"));
            let _ = xmove::send(from, m);
        }
    }
}

/// Origin: its instance `id` moved to node `to` at its yield `yields`, as
/// `how` says. A report older than what this node knows is dropped (the
/// target's `At` of a move replaces the source's word, not the other way
/// round); while this node moves it away (`Going`), only its own commit
/// counts (a late report of an earlier move must not hide that the move
/// may fail and leave it here). A node already known to have failed loses it.
fn away_at(g: &Guests, id: i64, to: NodeId, yields: u64, how: Report) {
    let Ok(reg) = serve::registry() else { return };
    {
        let mut st = reg_locked(&reg);
        let Some(e) = st.entries.get_mut(&id) else {
            return;
        };
        if !replaces(e.at, how, yields) || e.ended.is_some() {
            return;
        }
        e.at = if how == Report::At {
            Where::At(to, yields)
        } else {
            Where::Moving(to, yields)
        };
    }
    // After the entry says where (`peer_dead` marks the node dead before it
    // looks at the entries): one of the two sees the other.
    if locked(&g.dead).contains_key(&to) {
        lost_with(g.me, to, None);
    }
}

/// Whether a report (`how`) of a move at yield `yields` replaces `at`.
fn replaces(at: Where, how: Report, yields: u64) -> bool {
    match at {
        Where::Here => false,
        Where::Going(_) => how == Report::Committed,
        Where::Moving(_, y) if how == Report::At => y <= yields,
        Where::Moving(_, y) | Where::At(_, y) => y < yields,
    }
}

/// Whether a loss of the move at yield `yields` (`Lost`) is about where
/// `at` says the instance is (not a later move; not while it is here or
/// being moved away by this node: `Going`).
fn lost_applies(at: Where, yields: u64) -> bool {
    at.since().is_some_and(|y| y <= yields)
}

/// Origin: its instance `id` ended on node `from` as `ended` says.
fn ended_away(me: NodeId, id: i64, from: NodeId, ended: Ended) {
    let Ok(reg) = serve::registry() else { return };
    let ended = match ended {
        Ended::Failed(how) => Ended::Failed(format!("{how} (on node {from})")),
        e => e,
    };
    if !serve::record_away(&reg, id, me, |_| true, |_| ended) {
        report(&format!(
            "dmi: node {me}: node {from} says instance {id} ended, but this node recorded it \
             ended or lost already, or it does not run there"
        ));
    }
}

/// Origin: node `node` failed (or, `silent`, stopped talking to this node
/// after it reported that node's failure); this node's instances running
/// there, or moving there, are lost.
fn lost_with(me: NodeId, node: NodeId, silent: Option<NodeId>) {
    let Ok(reg) = serve::registry() else { return };
    let there = move |w: Where| matches!(w, Where::At(n, _) | Where::Moving(n, _) if n == node);
    let lost: Vec<i64> = reg_locked(&reg)
        .entries
        .iter()
        .filter(|(_, e)| e.ended.is_none() && there(e.at))
        .map(|(&id, _)| id)
        .collect();
    for id in lost {
        serve::record_away(&reg, id, me, there, |w| {
            let r = match w {
                Where::Moving(..) => "to which it was moving",
                _ => "where it ran",
            };
            Ended::Failed(match silent {
                Some(x) => {
                    format!("was lost: node {node}, {r}, stopped talking after node {x} failed")
                }
                None => format!("was lost with node {node}, {r}"),
            })
        });
    }
}

/// Origin: its instance `id`, moved at its yield `yields`, is lost (`why`:
/// its source failed before the move committed at the target). Dropped if
/// this node knows of a later move (or its end).
fn lost_moving(me: NodeId, id: i64, yields: u64, why: String) {
    let Ok(reg) = serve::registry() else { return };
    let older = |w: Where| lost_applies(w, yields);
    serve::record_away(&reg, id, me, older, |_| Ended::Failed(why));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn while_this_node_moves_an_instance_only_its_commit_says_where() {
        // A late report of an earlier move (to node 1, at yield 2) must
        // not replace Going(2): if node 2 refuses, the instance is here.
        for how in [Report::At, Report::Moving] {
            assert!(!replaces(Where::Going(2), how, 2));
        }
        assert!(replaces(Where::Going(2), Report::Committed, 6));
        assert!(!replaces(Where::Here, Report::At, 6));
        // The target's At of the same move replaces the source's word.
        assert!(replaces(Where::Moving(2, 6), Report::At, 6));
        assert!(!replaces(Where::At(2, 6), Report::Moving, 6));
        assert!(!replaces(Where::At(2, 6), Report::At, 4));
    }

    #[test]
    fn a_loss_of_a_move_counts_only_for_that_move_or_an_earlier_one() {
        assert!(!lost_applies(Where::Going(2), 6));
        assert!(!lost_applies(Where::Here, 6));
        assert!(lost_applies(Where::Moving(2, 6), 6));
        assert!(lost_applies(Where::At(1, 4), 6));
        assert!(!lost_applies(Where::At(1, 8), 6));
    }
}
