// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Recording how a node's own instances ended (`serve.rs`'s registry):
//! here, or away on another node (`guest.rs`), once.

use std::sync::MutexGuard;

use super::{locked, Ended, Registry, State, Where};
use crate::addr::NodeId;
use crate::error::DmiError;
use crate::runtime::PEER_FAILED_EXIT;
use crate::transport::report;

/// Records how this node's instance `id` ended (here, or on another node:
/// `guest.rs`): one fewer running, a failure reported (and the node ended
/// if `fatal`), the end kept for `join`.
pub(crate) fn record(reg: &Registry, id: i64, pid: i32, rank: NodeId, fatal: bool, ended: Ended) {
    record_locked(reg, locked(reg), id, pid, rank, fatal, ended);
}

/// Records how this node's instance `id`, away on another node, ended, if
/// its entry still says it runs where `away` accepts (and has not ended):
/// the check and the record are one step, so an end reported twice (a
/// node's failure seen twice, a loss reported by two nodes) counts once.
/// Whether it recorded.
pub(crate) fn record_away(
    reg: &Registry,
    id: i64,
    rank: NodeId,
    away: impl FnOnce(Where) -> bool,
    ended: impl FnOnce(Where) -> Ended,
) -> bool {
    let s = locked(reg);
    let Some(e) = s.entries.get(&id) else {
        return false;
    };
    if e.ended.is_some() || matches!(e.at, Where::Here | Where::Going(_)) || !away(e.at) {
        return false;
    }
    let (pid, fatal, ended) = (e.pid, e.fatal, ended(e.at));
    record_locked(reg, s, id, pid, rank, fatal, ended);
    true
}

fn record_locked(
    reg: &Registry,
    mut s: MutexGuard<'_, State>,
    id: i64,
    pid: i32,
    rank: NodeId,
    fatal: bool,
    ended: Ended,
) {
    // Recorded already (lost while away, and then its end came): once.
    if s.entries.get(&id).is_some_and(|e| e.ended.is_some()) {
        return;
    }
    s.running -= 1;
    // One away has its pid of when it was here (or none: 0).
    let (pid, away) = s
        .entries
        .get(&id)
        .map_or((pid, false), |e| (e.pid, e.at != Where::Here));
    let mut poison = None;
    if let Ended::Failed(how) = &ended {
        let msg = match away {
            true => format!("instance {id} (last pid {pid} on this node) {how}"),
            false => format!("instance {id} (pid {pid}) {how}"),
        };
        report(&format!("dmi: node {rank}: {msg}"));
        if fatal {
            report(&format!(
                "dmi: node {rank}: stopping (set DMI_ERRORS=return to handle it instead)"
            ));
            std::process::exit(PEER_FAILED_EXIT);
        }
        // Waiting arrivals see it and fail their round; every other
        // node's barriers fail too (they would wait for this node).
        if s.failed.is_none() {
            poison = Some(msg.clone());
        }
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
    if let Some(why) = poison {
        // An event, not a call: `record` also runs on the engine's thread
        // (an instance that ended on another node, `guest.rs`), where a
        // call into the engine would wait for itself.
        crate::xmove::poison_barriers(&why);
    }
}
