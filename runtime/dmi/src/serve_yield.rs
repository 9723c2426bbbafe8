// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! An instance's `DMI_yield` on its receiver's side (`docs/dmi-reconf.md`,
//! "DMI_yield"): whether it moves, and where: within this node
//! (`relocate.rs`) or to another (`xmove.rs`; a movable run's rank, or a
//! `DMI_create` instance, which stays its origin's: `guest.rs`).

use crate::addr::NodeId;
use crate::relocate::{relocate, Dest};
use crate::ring::Mailbox;
use crate::serve::{locked, Registry, Served, Step, Where};
use crate::serve_single::Receivers;
use crate::transport::report;

/// Where instance `s` goes at its `yields`-th yield, if anywhere; `None`
/// when it stays (a move to another node it cannot make, said why).
fn destination(reg: &Registry, s: &Served, yields: u64) -> Option<Dest> {
    let (id, rank) = (s.id, s.rank);
    let planned = if s.movable {
        crate::host::decide(id, yields)
    } else {
        None
    };
    match reg.moves.moves(yields, id).or(planned.map(Dest::Node)) {
        Some(Dest::Node(n)) if n == rank => Some(Dest::Here),
        Some(Dest::Node(n)) if reg.receivers == Receivers::Single => {
            report(&format!(
                "dmi: node {rank}: instance {id} stays: moving to node {n} needs a receiver \
                 per instance (DMI_RECEIVERS=single moves instances within their node only)"
            ));
            None
        }
        d => d,
    }
}

/// `DMI_yield` of instance `s` (its `yields`-th): answers whether it moves
/// and moves it (to another node: [`Step::Gone`]; within this one: `s` is
/// the new copy, its new mailbox armed and, with one receiver for all,
/// ringing the node's bell).
pub(crate) fn yielded(reg: &Registry, s: &mut Served, home: usize, yields: u64) -> Step {
    let (id, rank) = (s.id, s.rank);
    let dest = destination(reg, s, yields);
    let next = reg.moves.next_after(yields, id);
    crate::host::rearm(id, yields, s.mb, next);
    s.mb.answer_yield(dest.is_some());
    let from = s.member.pid();
    if let Some(Dest::Node(to)) = dest {
        return away(reg, s, home, yields, to);
    }
    if dest.is_none() {
        return Step::Served;
    }
    let bell = s.mb.bell();
    let arm = |new: &'static Mailbox| {
        if let Some(b) = bell {
            new.set_bell(b);
        }
        crate::host::rearm(id, yields, new, next)
    };
    let of = of(s);
    match relocate(reg.set, s.member, home, arm) {
        Ok(m) => {
            report(&format!(
                "dmi: node {rank}: instance {id}{of} moved at yield {yields}: pid {from} -> {} \
                 ({} bytes, checkpoint {} us, stopped {} us, move {} us)",
                m.member.pid(),
                m.bytes,
                m.dump.as_micros(),
                m.frozen.as_micros(),
                m.total.as_micros()
            ));
            // SAFETY: the original is dead (killed by the move); the old
            // mailbox is not used any more.
            unsafe { s.mb.release() };
            s.member = m.member;
            s.mb = m.mailbox;
            crate::host::hosting(id, s.mb);
            crate::host::rearm(id, yields, s.mb, next);
            if s.guest.is_none() {
                if let Some(e) = locked(reg).entries.get_mut(&id) {
                    e.pid = s.member.pid();
                }
            }
        }
        Err(e) => report(&format!(
            "dmi: node {rank}: instance {id}{of} (pid {from}) stays: {e}"
        )),
    }
    Step::Served
}

/// How a report names instance `s`: another node's says whose.
fn of(s: &Served) -> String {
    s.guest.map_or(String::new(), |o| format!(" (node {o}'s)"))
}

/// Moves instance `s`, parked at its `yields`-th yield, to node `to`. A
/// `DMI_create` instance that leaves its origin stays counted there (its
/// barrier arrivals and its end come back: `guest.rs`).
fn away(reg: &Registry, s: &mut Served, home: usize, yields: u64, to: NodeId) -> Step {
    let (id, rank, from) = (s.id, s.rank, s.member.pid());
    let origin = (!s.movable).then_some(s.guest.unwrap_or(rank));
    let mine = !s.movable && s.guest.is_none();
    if mine {
        // Before the target can run it (and report its end).
        if let Some(e) = locked(reg).entries.get_mut(&id) {
            e.at = Where::Going(to);
        }
    }
    let of = of(s);
    match crate::xmove::send_away(s.member, id, origin, yields, home, to) {
        Ok(m) => {
            report(&format!(
                "dmi: node {rank}: instance {id}{of} moved at yield {yields} to node {to}: \
                 pid {from} -> {} ({} bytes, checkpoint {} us, stopped {} us, move {} us)",
                m.pid,
                m.bytes,
                m.dump.as_micros(),
                m.frozen.as_micros(),
                m.total.as_micros()
            ));
            // SAFETY: the original is dead (killed by the move); its
            // mailbox is not used any more.
            unsafe { s.mb.release() };
            // This node's own instance is still running, as this node
            // counts it, only elsewhere: where, the move's commit recorded
            // (`GuestHost::committed`, `guest.rs`).
            if s.movable {
                let mut st = locked(reg);
                st.running -= 1;
                st.entries.remove(&id);
            }
            crate::host::gone(id, true);
            reg.changed.notify_all();
            Step::Gone
        }
        Err(e) => {
            if mine {
                // An error comes before the commit only: the original runs on.
                if let Some(e) = locked(reg).entries.get_mut(&id) {
                    if e.at == Where::Going(to) {
                        e.at = Where::Here;
                    }
                }
            }
            report(&format!(
                "dmi: node {rank}: instance {id}{of} (pid {from}) stays: {e}"
            ));
            crate::host::move_failed(id);
            crate::host::rearm(id, yields, s.mb, reg.moves.next_after(yields, id));
            Step::Served
        }
    }
}
