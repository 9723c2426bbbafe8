// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Membership changes as epochs (dmi-reconfiguration sec. 4): nodes join
//! and leave while a program runs, and nothing held by a leaving node is
//! lost.
//!
//! Node 0 coordinates (it runs `DMI_main` and never leaves). A change from
//! the members `old` to `new` goes through four steps:
//!
//! 1. **Freeze.** Node 0 sends `Freeze` to every old member. A frozen node
//!    starts no new call (calls made meanwhile wait in `deferred`) but keeps
//!    serving; once none of its own page or region accesses is in flight it
//!    answers `Frozen`. When all have, no page access is in flight anywhere
//!    (an access completes only after every message it caused arrived), so
//!    every page is at rest at its owner and every owner entry at its home.
//! 2. **Handover.** Node 0 sends `Handover(old, new)` to old and new
//!    members. Each old member sends one `Handed` to each new member: the
//!    owner entries whose home moves there (homes are spread over the
//!    members, `addr::home`), the mutexes whose home moves there, and, if it
//!    leaves, every page it owns (data, version, copyset) to the page's new
//!    home, which becomes its owner. Copysets drop the leaving nodes.
//! 3. **Collect.** A new member buffers every other message until it has
//!    the `Handed` of every old member, applies them, becomes active, runs
//!    the buffered messages and deferred calls, tells node 0 `Ready` (with
//!    what it received) and sends `Fin` to every leaving node.
//! 4. **Leave.** A leaving node forwards what still reaches it (mutex
//!    requests sent before the change) to the new homes and is gone once it
//!    has a `Fin` from every new member: links are FIFO, so nothing more can
//!    arrive. The coordinator's `Rescale` call completes when every new
//!    member is ready, with the number of pages, bytes and entries moved.
//!
//! Forwarding stays correct because a home forwards only requests that
//! arrive while it is home, and new-epoch requests reach a new home only
//! after it collected the entries of that epoch.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::addr::{home, NodeId};
use crate::error::DmiError;
use crate::msg::{EpochMsg, Handed, MovedLock, MovedPage, Msg};
use crate::node::{CallId, CallReq, Effects, Node, Op};

/// Where a node stands in the membership protocol.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// A member; calls run at once.
    #[default]
    Active,
    /// Got `Freeze`: new calls wait; own accesses still in flight.
    Draining,
    /// Sent `Frozen`; waits for `Handover`.
    Frozen,
    /// A member of the next epoch waiting for the `Handed` of old members.
    Collecting,
    /// Handed everything over; waits for a `Fin` from every new member.
    Leaving,
    /// Gone: holds nothing, serves nothing.
    Left,
    /// Not a member yet.
    Outside,
}

/// What a membership change moved (the `Rescale` call's result).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RescaleStats {
    /// Owned pages handed over by leaving nodes.
    pub pages: u64,
    /// Their data bytes.
    pub bytes: u64,
    /// Owner entries that moved to a new home.
    pub entries: u64,
}

impl RescaleStats {
    pub fn to_bytes(self) -> Vec<u8> {
        [self.pages, self.bytes, self.entries]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }

    pub fn from_bytes(b: &[u8]) -> Option<RescaleStats> {
        let v = |i: usize| {
            Some(u64::from_le_bytes(
                b.get(i * 8..i * 8 + 8)?.try_into().ok()?,
            ))
        };
        Some(RescaleStats {
            pages: v(0)?,
            bytes: v(1)?,
            entries: v(2)?,
        })
    }
}

/// Node 0's record of the change it coordinates.
#[derive(Debug)]
pub(crate) struct Coord {
    call: CallId,
    old: Vec<NodeId>,
    new: Vec<NodeId>,
    frozen: BTreeSet<NodeId>,
    ready: BTreeSet<NodeId>,
    stats: RescaleStats,
}

/// A node's membership state.
#[derive(Debug, Default)]
pub(crate) struct EpochState {
    pub phase: Phase,
    pub number: u64,
    /// Calls made while a change is under way, in order.
    deferred: VecDeque<(CallId, CallReq)>,
    /// Messages that arrived while collecting.
    buffered: VecDeque<(NodeId, Msg)>,
    /// Collecting: old members whose `Handed` is missing.
    missing: BTreeSet<NodeId>,
    /// `Handed` that came before this node's own `Handover` (they travel on
    /// other links than node 0's).
    early: Vec<(NodeId, Handed)>,
    /// Collecting: the leaving nodes (they get a `Fin`).
    leavers: Vec<NodeId>,
    received: RescaleStats,
    /// Leaving: new members whose `Fin` is missing.
    fins: BTreeSet<NodeId>,
    coord: Option<Coord>,
}

impl Node {
    /// Where this node stands.
    pub fn phase(&self) -> Phase {
        self.epoch.phase
    }

    /// The epoch number (0 at start, +1 per membership change).
    pub fn epoch_number(&self) -> u64 {
        self.epoch.number
    }

    /// Runs `req` now, or keeps it for after the change under way (None).
    pub(crate) fn defer_call(
        &mut self,
        call: CallId,
        req: CallReq,
        fx: &mut Effects,
    ) -> Option<CallReq> {
        let me = self.me;
        match self.epoch.phase {
            Phase::Active => Some(req),
            Phase::Draining | Phase::Frozen | Phase::Collecting => {
                self.epoch.deferred.push_back((call, req));
                None
            }
            Phase::Leaving | Phase::Left => {
                let e = DmiError::Setup(format!("node {me} has left the run"));
                self.fail_call(call, e, fx);
                None
            }
            Phase::Outside => {
                let e = DmiError::Setup(format!(
                    "node {me} is not a member of the run (it has not joined)"
                ));
                self.fail_call(call, e, fx);
                None
            }
        }
    }

    /// Takes membership messages, buffers what a collecting node cannot
    /// serve yet, and passes everything else through.
    pub(crate) fn epoch_filter(&mut self, from: NodeId, msg: Msg, fx: &mut Effects) -> Option<Msg> {
        match msg {
            Msg::Epoch(e) => {
                self.on_epoch(from, e, fx);
                None
            }
            m if matches!(self.epoch.phase, Phase::Collecting | Phase::Outside) => {
                self.epoch.buffered.push_back((from, m));
                None
            }
            m => Some(m),
        }
    }

    /// Called after every message: a draining node reports when quiet.
    pub(crate) fn check_drained(&mut self, fx: &mut Effects) {
        if self.epoch.phase != Phase::Draining {
            return;
        }
        let busy = self.ops.values().any(|o| !matches!(o, Op::Sync { .. }));
        if !busy {
            self.epoch.phase = Phase::Frozen;
            let epoch = self.epoch.number;
            self.send_epoch(0, EpochMsg::Frozen { epoch }, fx);
        }
    }

    fn send_epoch(&mut self, to: NodeId, m: EpochMsg, fx: &mut Effects) {
        if to == self.me {
            let me = self.me;
            self.on_epoch(me, m, fx);
        } else {
            fx.sends.push((to, Msg::Epoch(m)));
        }
    }

    /// `CallReq::Rescale` at node 0.
    pub(crate) fn start_rescale(
        &mut self,
        call: CallId,
        join: Vec<NodeId>,
        leave: Vec<NodeId>,
        fx: &mut Effects,
    ) -> Result<(), DmiError> {
        if self.me != 0 {
            return Err(DmiError::BadArgument(format!(
                "only node 0 changes the membership (this is node {})",
                self.me
            )));
        }
        let old = self.members.clone();
        let mut new: BTreeSet<NodeId> = old.iter().copied().collect();
        for &j in &join {
            if !new.insert(j) {
                return Err(DmiError::BadArgument(format!(
                    "node {j} cannot join: it is a member already"
                )));
            }
        }
        for &l in &leave {
            if l == 0 {
                return Err(DmiError::BadArgument(
                    "node 0 cannot leave: it coordinates the run".into(),
                ));
            }
            if !new.remove(&l) || join.contains(&l) {
                return Err(DmiError::BadArgument(format!(
                    "node {l} cannot leave: it is not a member"
                )));
            }
        }
        let new: Vec<NodeId> = new.into_iter().collect();
        self.add_work(call, 1);
        if new == old {
            self.complete_rescale(call, RescaleStats::default(), fx);
            return Ok(());
        }
        self.epoch.number += 1;
        let epoch = self.epoch.number;
        self.epoch.coord = Some(Coord {
            call,
            old: old.clone(),
            new,
            frozen: BTreeSet::new(),
            ready: BTreeSet::new(),
            stats: RescaleStats::default(),
        });
        for m in old {
            self.send_epoch(m, EpochMsg::Freeze { epoch }, fx);
        }
        Ok(())
    }

    fn complete_rescale(&mut self, call: CallId, stats: RescaleStats, fx: &mut Effects) {
        if let Some(c) = self.calls.get_mut(&call) {
            c.out = stats.to_bytes();
            c.remaining -= 1;
        }
        self.maybe_finish(call, fx);
    }

    fn on_epoch(&mut self, from: NodeId, m: EpochMsg, fx: &mut Effects) {
        match m {
            EpochMsg::Freeze { epoch } => {
                self.epoch.number = epoch;
                self.epoch.phase = Phase::Draining;
                self.check_drained(fx);
            }
            EpochMsg::Frozen { .. } => {
                let Some(c) = self.epoch.coord.as_mut() else {
                    return;
                };
                c.frozen.insert(from);
                if c.frozen.len() < c.old.len() {
                    return;
                }
                let (old, new) = (c.old.clone(), c.new.clone());
                let epoch = self.epoch.number;
                let regions = self.regions.all();
                // Barrier arrivals of leaving nodes will never be matched.
                let leaving: Vec<NodeId> =
                    old.iter().copied().filter(|n| !new.contains(n)).collect();
                let mut gone = Vec::new();
                for w in self.barrier.values_mut() {
                    gone.extend(w.iter().filter(|(n, _)| leaving.contains(n)).copied());
                    w.retain(|(n, _)| !leaving.contains(n));
                }
                for (n, op) in gone {
                    let e = DmiError::Setup(format!("node {n} left during a barrier"));
                    self.reply(n, op, crate::msg::Reply::Err(e), fx);
                }
                let targets: BTreeSet<NodeId> = old.iter().chain(&new).copied().collect();
                for t in targets {
                    let m = EpochMsg::Handover {
                        epoch,
                        old: old.clone(),
                        new: new.clone(),
                        regions: regions.clone(),
                    };
                    self.send_epoch(t, m, fx);
                }
            }
            EpochMsg::Handover {
                epoch,
                old,
                new,
                regions,
            } => self.handover(epoch, old, new, regions, fx),
            EpochMsg::Handed { state, .. } => {
                if self.epoch.phase != Phase::Collecting {
                    self.epoch.early.push((from, state));
                    return;
                }
                if !self.epoch.missing.remove(&from) {
                    return;
                }
                self.apply_handed(state);
                if self.epoch.missing.is_empty() {
                    self.finish_collect(fx);
                }
            }
            EpochMsg::Ready {
                pages,
                bytes,
                entries,
                ..
            } => {
                let Some(c) = self.epoch.coord.as_mut() else {
                    return;
                };
                c.ready.insert(from);
                c.stats.pages += pages;
                c.stats.bytes += bytes;
                c.stats.entries += entries;
                if c.ready.len() == c.new.len() {
                    let c = self.epoch.coord.take().expect("coordinating");
                    self.maybe_release_barrier(fx);
                    self.complete_rescale(c.call, c.stats, fx);
                }
            }
            EpochMsg::Fin { .. } => {
                if self.epoch.phase == Phase::Leaving {
                    self.epoch.fins.remove(&from);
                    if self.epoch.fins.is_empty() {
                        self.epoch.phase = Phase::Left;
                    }
                }
            }
        }
    }

    /// Hands this node's share to the members of the next epoch.
    fn handover(
        &mut self,
        epoch: u64,
        old: Vec<NodeId>,
        new: Vec<NodeId>,
        regions: Vec<crate::addr::Region>,
        fx: &mut Effects,
    ) {
        self.epoch.number = epoch;
        for r in regions {
            self.regions.insert(r);
        }
        let me = self.me;
        let leaving = |n: &NodeId| !new.contains(n);
        let was_member = old.contains(&me);
        let stays = new.contains(&me);
        let mut out: BTreeMap<NodeId, Handed> =
            new.iter().map(|&n| (n, Handed::default())).collect();
        if was_member {
            // Owner entries of the pages this node was home of.
            let mut homed: BTreeSet<_> = self.owners.keys().copied().collect();
            for (p, page) in &self.pages {
                if page.owner.is_some() && home(*p, &old) == me {
                    homed.insert(*p);
                }
            }
            for p in homed {
                let owner = self.owners.remove(&p).unwrap_or(me);
                let h = home(p, &new);
                // A leaving owner sends the page itself to the new home.
                if leaving(&owner) || owner == h {
                    continue;
                }
                if h == me {
                    if owner != me {
                        self.owners.insert(p, owner);
                    }
                } else if let Some(t) = out.get_mut(&h) {
                    t.entries.push((p, owner));
                }
            }
            // Owned pages: copies on leaving nodes are gone; a leaving
            // owner hands the page to its new home.
            let owned: Vec<_> = self
                .pages
                .iter()
                .filter(|(_, pg)| pg.owner.is_some())
                .map(|(p, _)| *p)
                .collect();
            for p in owned {
                let page = self.pages.get_mut(&p).expect("listed");
                let owner = page.owner.as_mut().expect("owned");
                owner.copyset.retain(|n, _| !leaving(n));
                if !stays {
                    let o = page.owner.take().expect("owned");
                    let moved = MovedPage {
                        page: p,
                        version: o.version(),
                        data: o.data.to_vec(),
                        copyset: o.copyset.into_iter().collect(),
                    };
                    if let Some(t) = out.get_mut(&home(p, &new)) {
                        t.pages.push(moved);
                    }
                }
            }
            // Mutexes whose home moves.
            let addrs: Vec<i64> = self.locks.keys().copied().collect();
            for a in addrs {
                let Ok(p) = self.regions.page_of(a) else {
                    continue;
                };
                let h = home(p, &new);
                if h == me {
                    continue;
                }
                let (held, waiters) = self.locks.remove(&a).expect("listed");
                let waiters = waiters.into_iter().filter(|(n, _)| !leaving(n)).collect();
                if let Some(t) = out.get_mut(&h) {
                    t.locks.push(MovedLock {
                        addr: a,
                        held,
                        waiters,
                    });
                }
            }
        }
        let mine = out.remove(&me);
        for (t, state) in out.into_iter().filter(|_| was_member) {
            let m = EpochMsg::Handed { epoch, state };
            fx.sends.push((t, Msg::Epoch(m)));
        }
        self.members = new.clone();
        if stays {
            self.epoch.phase = Phase::Collecting;
            self.epoch.missing = old.iter().copied().filter(|&n| n != me).collect();
            self.epoch.leavers = old.iter().copied().filter(|n| leaving(n)).collect();
            self.epoch.received = RescaleStats::default();
            if let Some(state) = mine {
                self.apply_handed(state);
            }
            for (from, state) in std::mem::take(&mut self.epoch.early) {
                if self.epoch.missing.remove(&from) {
                    self.apply_handed(state);
                }
            }
            if self.epoch.missing.is_empty() {
                self.finish_collect(fx);
            }
        } else {
            self.pages.clear();
            self.owners.clear();
            self.epoch.phase = Phase::Leaving;
            self.epoch.fins = new.iter().copied().collect();
            let e = DmiError::Setup(format!("node {me} has left the run"));
            for (call, _) in std::mem::take(&mut self.epoch.deferred) {
                self.fail_call(call, e.clone(), fx);
            }
        }
    }

    fn apply_handed(&mut self, state: Handed) {
        let me = self.me;
        let r = &mut self.epoch.received;
        r.entries += state.entries.len() as u64;
        for (p, owner) in state.entries {
            // The page exists: this home must never create it afresh, even
            // after its own EXCLUSIVE write removes the entry again.
            self.pages.entry(p).or_default().created = true;
            if owner == me {
                self.owners.remove(&p);
            } else {
                self.owners.insert(p, owner);
            }
        }
        for m in state.pages {
            r.pages += 1;
            r.bytes += m.data.len() as u64;
            self.owners.remove(&m.page);
            let page = self.pages.entry(m.page).or_default();
            page.copy = None;
            page.created = true;
            let data = self.store.frame(m.page, &m.data);
            let copyset = m.copyset.into_iter().filter(|&(n, _)| n != me).collect();
            page.owner = Some(crate::node::Owner::new(data, m.version, copyset));
        }
        for l in state.locks {
            self.locks.insert(l.addr, (l.held, l.waiters.into()));
        }
    }

    /// Everything arrived: serve the new epoch.
    fn finish_collect(&mut self, fx: &mut Effects) {
        self.epoch.phase = Phase::Active;
        let epoch = self.epoch.number;
        let r = self.epoch.received;
        for l in std::mem::take(&mut self.epoch.leavers) {
            fx.sends.push((l, Msg::Epoch(EpochMsg::Fin { epoch })));
        }
        let ready = EpochMsg::Ready {
            epoch,
            pages: r.pages,
            bytes: r.bytes,
            entries: r.entries,
        };
        self.send_epoch(0, ready, fx);
        while let Some((from, m)) = self.epoch.buffered.pop_front() {
            self.handle(from, m, fx);
        }
        while self.epoch.phase == Phase::Active {
            let Some((call, req)) = self.epoch.deferred.pop_front() else {
                break;
            };
            self.run_call(call, req, fx);
        }
    }
}

impl Node {
    /// The pages this node owns: (page, version, data). For tests and the
    /// state dump.
    pub fn owned_pages(&self) -> Vec<(crate::addr::PageId, u64, Vec<u8>)> {
        let mut v: Vec<_> = self
            .pages
            .iter()
            .filter_map(|(p, pg)| {
                pg.owner
                    .as_ref()
                    .map(|o| (*p, o.version(), o.data.to_vec()))
            })
            .collect();
        v.sort_by_key(|(p, _, _)| *p);
        v
    }

    /// This node's owner entry for `page` (None: none, so the home owns it
    /// or it was never touched).
    pub fn owner_entry(&self, page: crate::addr::PageId) -> Option<NodeId> {
        self.owners.get(&page).copied()
    }

    /// Whether this node holds any page, copy, owner entry or mutex.
    pub fn holds_anything(&self) -> bool {
        !self.pages.is_empty() || !self.owners.is_empty() || !self.locks.is_empty()
    }
}
