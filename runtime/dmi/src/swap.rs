// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Remote swap: a node's memory pool holds at most `Node::pool` pages
//! (owned pages, cached copies and pages it awaits for its own EXCLUSIVE
//! write or an adoption). When storing one more would exceed it:
//!
//! 1. **Clean copies go first.** The least recently used copy is dropped
//!    at once and a `Forget` request travels like any access (home, then
//!    the owner on record, in order), so the owner drops the node from the
//!    copyset. A Copy that
//!    answers a Fetch sent before the Forget is used once and not cached
//!    (the owner may have served the Fetch first and forgotten the node
//!    after), and until the owner answered the Forget no Update makes a new
//!    copy: neither can come back as a cache nobody keeps coherent. Fetches
//!    sent after the Forget reach the owner after it, so their copies are
//!    kept. Invalidates and Updates in flight are still acknowledged.
//! 2. **Then an owned page moves.** The node asks another member to take a
//!    page it owns and that is at rest, the least recently used one
//!    (`SwapAsk`). A target with room
//!    (after dropping its own clean copies) reserves a slot and sends an
//!    `Adopt` request to the page's home: exactly an EXCLUSIVE without a
//!    write, so the home records the target as owner and the owner on
//!    record hands the page over (data, version, copyset) with a Transfer;
//!    forwarding keeps working as for any change of owner. A full target
//!    answers `SwapNo` and the next member is asked; `busy` when pages are
//!    on their way to it (they free slots where they come from), and then
//!    it sends `SwapRoom` once one arrived.
//! 3. **Only when every member refused**, none of them busy, do the
//!    accesses waiting for room fail, with [`DmiError::PoolFull`] naming
//!    the pool size; after a busy refusal the node asks again on
//!    `SwapRoom`.
//!
//! Accesses that need a slot while there is none (a home creating a page,
//! an EXCLUSIVE write that will receive one) wait in `Swap::stalled`, in
//! order per page, and run again after every step. A full home hands a
//! page nobody touched yet straight to the EXCLUSIVE writer that reserved
//! a slot for it (`hand_fresh`), so a reservation never waits for room.

use std::collections::VecDeque;

use crate::addr::{NodeId, PageId};
use crate::error::DmiError;
use crate::msg::{Msg, OpId, Reply, ReqKind, Request};
use crate::node::{Copy, Effects, Node, Op, PageOpKind};

/// Something that waits for a free slot in this node's pool.
#[derive(Debug, Clone)]
pub(crate) enum Stalled {
    /// A request for a page this node is home of.
    Home(Request),
    /// An access of this node (`Node::dispatch`).
    Own(OpId, PageId),
}

impl Stalled {
    fn page(&self) -> PageId {
        match self {
            Stalled::Home(r) => r.page,
            Stalled::Own(_, p) => *p,
        }
    }
}

/// An owned page this node is trying to move away.
#[derive(Debug)]
pub(crate) struct SwapOut {
    page: PageId,
    /// Members not asked yet.
    left: VecDeque<NodeId>,
    /// Some member refused while slots were reserved somewhere.
    busy: bool,
}

/// The pool's state.
#[derive(Debug, Default)]
pub(crate) struct Swap {
    pub stalled: VecDeque<Stalled>,
    out: Option<SwapOut>,
    unstalling: bool,
    /// Reservations settled so far (pages that arrived for an EXCLUSIVE
    /// write or an adoption, or accesses that failed).
    pub resolved: u64,
    /// Every member refused, but reserved slots were pending: ask again
    /// after a `SwapRoom` or once `resolved` passes this.
    pub waiting: Option<u64>,
    /// Members refused while busy, and `resolved` then: they get a
    /// `SwapRoom` when it grows or a slot is free.
    asked_back: Vec<NodeId>,
    asked_back_at: u64,
    /// Nowhere to move a page: what waits for room fails in `unstall`
    /// (after the access that found it out has been queued as well).
    full: bool,
    /// Owned pages moved away and copies dropped (for tests and the dump).
    pub moved_out: u64,
    pub dropped: u64,
    /// The access clock: one tick per access this node makes or serves.
    clock: u64,
}

impl Swap {
    /// The next tick of the access clock ([`Page::used`](crate::page::Page)).
    pub(crate) fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }
}

impl Node {
    /// Pages on their way here (their slot is reserved, or held by a copy
    /// that the page will replace).
    fn reserved(&self) -> usize {
        self.pages
            .values()
            .filter(|p| p.owner.is_none() && !p.awaiting.is_empty())
            .count()
    }

    /// Pages this node holds or has reserved a slot for.
    pub fn pool_used(&self) -> usize {
        self.pages
            .values()
            .filter(|p| p.owner.is_some() || p.copy.is_some() || !p.awaiting.is_empty())
            .count()
    }

    /// The pool's capacity in pages (None: unlimited).
    pub fn pool_pages(&self) -> Option<usize> {
        self.pool
    }

    /// Sets the pool's capacity (at start, before any access).
    pub fn set_pool_pages(&mut self, pages: Option<usize>) {
        self.pool = pages;
    }

    /// What this node knows of the page at `addr`, if anything.
    fn page_at(&self, addr: i64) -> Option<&crate::page::Page> {
        self.pages.get(&self.regions.page_of(addr).ok()?)
    }

    /// Whether this node owns the page at `addr` (tests, dumps).
    pub fn owns(&self, addr: i64) -> bool {
        self.page_at(addr).is_some_and(|p| p.owner.is_some())
    }

    /// Whether this node holds a clean copy of the page at `addr` (tests).
    pub fn has_copy(&self, addr: i64) -> bool {
        self.page_at(addr).is_some_and(|p| p.copy.is_some())
    }

    /// (owned pages moved away, clean copies dropped) so far.
    pub fn swap_counts(&self) -> (u64, u64) {
        (self.swap.moved_out, self.swap.dropped)
    }

    /// Whether a slot is free, dropping clean copies (never of `keep`; the
    /// least recently used first) to free one; with `owned`, also starts
    /// moving an owned page away.
    pub(crate) fn make_room(&mut self, keep: PageId, owned: bool, fx: &mut Effects) -> bool {
        let Some(cap) = self.pool else {
            return true;
        };
        loop {
            if self.pool_used() < cap {
                return true;
            }
            let victim = self
                .pages
                .iter()
                .filter(|(&k, p)| {
                    k != keep && p.copy.is_some() && p.owner.is_none() && p.awaiting.is_empty()
                })
                .min_by_key(|(k, p)| (p.used, **k))
                .map(|(k, _)| *k);
            match victim {
                Some(p) => {
                    if let Some(page) = self.pages.get_mut(&p) {
                        page.copy = None;
                    }
                    self.swap.dropped += 1;
                    self.send_forget(p, fx);
                }
                None => {
                    if owned {
                        self.start_swap_out(fx);
                    }
                    return false;
                }
            }
        }
    }

    /// Tells the owner of `page` that this node keeps no copy of it.
    pub(crate) fn send_forget(&mut self, page: PageId, fx: &mut Effects) {
        let op = self.fresh_id();
        self.ops.insert(op, Op::Forget { page });
        let pg = self.pages.entry(page).or_default();
        pg.forgets += 1;
        pg.forget_op = op;
        let req = Request {
            origin: self.me,
            op,
            page,
            kind: ReqKind::Forget,
        };
        let h = self.home_of(page);
        self.send_home(h, vec![req], fx);
    }

    /// Whether `page` must be created here (this node is its home and it
    /// was never touched).
    fn needs_create(&self, page: PageId) -> bool {
        !self.members.is_empty()
            && self.home_of(page) == self.me
            && !self.owners.contains_key(&page)
            && self.regions.page_size(page).is_some()
            && !self.pages.get(&page).is_some_and(|p| p.created)
    }

    /// Whether an access to `page` has to wait for room: the page must be
    /// created here and there is none, or earlier accesses to it wait.
    pub(crate) fn must_stall(&mut self, page: PageId, fx: &mut Effects) -> bool {
        if self.pool.is_none() || !self.needs_create(page) {
            return false;
        }
        self.swap.stalled.iter().any(|s| s.page() == page) || !self.make_room(page, true, fx)
    }

    /// Creates `page` here if this node is its home and it is new, and
    /// reserves a slot for an EXCLUSIVE write `op` that will receive the
    /// page (it counts from then on); false: `op` has to wait for room.
    pub(crate) fn slot_for(&mut self, op: OpId, page: PageId, fx: &mut Effects) -> bool {
        if self.must_stall(page, fx) {
            return false;
        }
        self.ensure_created(page);
        let counted = self
            .pages
            .get(&page)
            .is_some_and(|p| p.owner.is_some() || p.copy.is_some() || !p.awaiting.is_empty());
        let exclusive = matches!(
            self.ops.get(&op),
            Some(Op::Page {
                kind: PageOpKind::Exclusive(_),
                ..
            })
        );
        counted || !exclusive || self.make_room(page, true, fx)
    }

    /// An Update of a write at `version`: replaces an older copy. Without a
    /// copy (the Update overtook the Copy, or the copy was dropped to make
    /// room) it makes one only if this node has not asked the owner to
    /// forget it and there is room; else no older Copy is cached later.
    pub(crate) fn update_copy(
        &mut self,
        page: PageId,
        version: u64,
        data: Vec<u8>,
        fx: &mut Effects,
    ) {
        let p = self.pages.entry(page).or_default();
        if p.owner.is_some() || p.copy.as_ref().is_some_and(|c| c.version >= version) {
            return;
        }
        let new = p.copy.is_none() && p.awaiting.is_empty();
        if p.forgets == 0 && (!new || self.make_room(page, false, fx)) {
            let data = self.store.frame(page, &data);
            self.pages.entry(page).or_default().copy = Some(Copy { data, version });
        } else {
            let p = self.pages.entry(page).or_default();
            p.inval_seen = p.inval_seen.max(version);
        }
    }

    /// A home with a pool limit hands a page nobody touched yet straight
    /// to the node that takes it over (EXCLUSIVE or adoption), zero-filled
    /// at version 0, instead of creating it here first: that needs no slot
    /// here, so a slot reserved for it is filled without waiting for room
    /// at the home (requests for the page waiting here then go to the new
    /// owner). True when done.
    pub(crate) fn hand_fresh(&mut self, req: &Request, fx: &mut Effects) -> bool {
        if self.pool.is_none()
            || !matches!(req.kind, ReqKind::Exclusive | ReqKind::Adopt)
            || req.origin == self.me
            || !self.needs_create(req.page)
        {
            return false;
        }
        let Some(size) = self.regions.page_size(req.page) else {
            return false;
        };
        self.pages.entry(req.page).or_default().created = true;
        self.owners.insert(req.page, req.origin);
        let m = Msg::Transfer {
            op: req.op,
            page: req.page,
            version: 0,
            data: vec![0; size],
            copyset: Vec::new(),
        };
        fx.sends.push((req.origin, m));
        true
    }

    pub(crate) fn stall(&mut self, s: Stalled) {
        self.swap.stalled.push_back(s);
    }

    /// Asks the next member to adopt an owned page at rest: the one this
    /// node used least recently through the engine (accesses it made or
    /// served; read and write hits in the shared range bypass the engine
    /// and do not count), the least page id among equals.
    fn start_swap_out(&mut self, fx: &mut Effects) {
        if self.swap.out.is_some() || self.swap.waiting.is_some() {
            return;
        }
        let victim = self
            .pages
            .iter()
            .filter(|(_, p)| {
                p.awaiting.is_empty()
                    && p.early.is_empty()
                    && p.owner
                        .as_ref()
                        .is_some_and(|o| !o.busy() && o.queue.is_empty())
            })
            .min_by_key(|(k, p)| (p.used, **k))
            .map(|(k, _)| *k);
        let Some(page) = victim else {
            // Every owned page is busy or on its way: a later message frees
            // one, and `unstall` tries again.
            return;
        };
        let me = self.me;
        let mut left: VecDeque<NodeId> = self
            .members
            .iter()
            .copied()
            .filter(|&m| m > me)
            .chain(self.members.iter().copied().filter(|&m| m < me))
            .collect();
        match left.pop_front() {
            Some(t) => {
                fx.sends.push((t, Msg::SwapAsk { page }));
                self.swap.out = Some(SwapOut {
                    page,
                    left,
                    busy: false,
                });
            }
            None => self.swap.full = true,
        }
    }

    /// `SwapAsk` from `from`: adopt `page` if there is room.
    pub(crate) fn swap_ask(&mut self, from: NodeId, page: PageId, fx: &mut Effects) {
        use crate::epoch::Phase;
        let p = self.pages.get(&page);
        let can = matches!(self.epoch.phase, Phase::Active | Phase::Draining)
            && self.members.contains(&self.me)
            && p.is_none_or(|p| p.owner.is_none() && p.awaiting.is_empty())
            && (p.is_some_and(|p| p.copy.is_some()) || self.make_room(page, false, fx));
        if !can {
            let busy = self.reserved() > 0;
            if busy && !self.swap.asked_back.contains(&from) {
                self.swap.asked_back.push(from);
                self.swap.asked_back_at = self.swap.resolved;
            }
            fx.sends.push((from, Msg::SwapNo { page, busy }));
            return;
        }
        let op = self.fresh_id();
        self.ops.insert(op, Op::Adopt { page });
        let pg = self.pages.entry(page).or_default();
        pg.awaiting.push(op);
        pg.created = true;
        let req = Request {
            origin: self.me,
            op,
            page,
            kind: ReqKind::Adopt,
        };
        let h = self.home_of(page);
        self.send_home(h, vec![req], fx);
    }

    /// `SwapNo` from a full member: ask the next one. When all refused and
    /// slots were reserved somewhere (here too), pages are on their way and
    /// free slots where they come from: ask again once one arrived.
    pub(crate) fn swap_refused(&mut self, page: PageId, busy: bool, fx: &mut Effects) {
        let Some(out) = self.swap.out.as_mut().filter(|o| o.page == page) else {
            return;
        };
        out.busy |= busy;
        let still_mine = self
            .pages
            .get(&page)
            .is_some_and(|p| p.owner.is_some() && p.awaiting.is_empty());
        if !still_mine {
            self.swap.out = None;
            return;
        }
        match out.left.pop_front() {
            Some(t) => fx.sends.push((t, Msg::SwapAsk { page })),
            None => {
                let busy = out.busy;
                self.swap.out = None;
                if busy || self.reserved() > 0 {
                    self.swap.waiting = Some(self.swap.resolved);
                } else {
                    self.swap.full = true;
                }
            }
        }
    }

    /// The answer to a `Forget` or `Adopt` of this node.
    pub(crate) fn swap_op_done(&mut self, id: OpId, op: Op, reply: Reply) {
        match (op, reply) {
            (Op::Forget { page }, _) => {
                let p = self.pages.entry(page).or_default();
                p.forgets = p.forgets.saturating_sub(1);
            }
            (Op::Adopt { page }, _) => {
                if let Some(p) = self.pages.get_mut(&page) {
                    p.awaiting.retain(|&o| o != id);
                }
                self.swap.resolved += 1;
            }
            _ => {}
        }
    }

    /// Every member is full: the accesses waiting for room fail.
    fn fail_stalled(&mut self, fx: &mut Effects) {
        let e = DmiError::PoolFull(format!(
            "every node's memory pool is full (DMI_POOL_PAGES={} pages on node {}; \
             no other member had room for one more page)",
            self.pool.unwrap_or(0),
            self.me
        ));
        for s in std::mem::take(&mut self.swap.stalled) {
            match s {
                Stalled::Home(r) => self.reply(r.origin, r.op, Reply::Err(e.clone()), fx),
                Stalled::Own(op, _) => self.finish_op(op, Reply::Err(e.clone()), fx),
            }
        }
    }

    /// Runs what waited for room once there is some (after every step).
    pub(crate) fn unstall(&mut self, fx: &mut Effects) {
        let s = &self.swap;
        if !s.asked_back.is_empty()
            && (s.resolved > s.asked_back_at || self.pool.is_some_and(|c| self.pool_used() < c))
        {
            for n in std::mem::take(&mut self.swap.asked_back) {
                fx.sends.push((n, Msg::SwapRoom));
            }
        }
        if self.swap.stalled.is_empty() || self.swap.waiting.is_some_and(|w| self.swap.resolved > w)
        {
            self.swap.waiting = None;
        }
        if let Some(out) = &self.swap.out {
            if self.pages.get(&out.page).is_none_or(|p| p.owner.is_none()) {
                self.swap.out = None;
            }
        }
        if self.swap.unstalling {
            return;
        }
        if std::mem::take(&mut self.swap.full) {
            self.fail_stalled(fx);
        }
        if self.swap.stalled.is_empty() {
            return;
        }
        // Everything runs again: what still lacks a slot waits again (and
        // keeps its order per page); what no longer needs one (its page was
        // handed out fresh meanwhile) goes on.
        self.swap.unstalling = true;
        for s in std::mem::take(&mut self.swap.stalled) {
            match s {
                Stalled::Home(r) => self.at_home(vec![r], fx),
                Stalled::Own(op, page) => {
                    if let Some(r) = self.dispatch(op, fx) {
                        let h = self.home_of(page);
                        self.send_home(h, vec![r], fx);
                    }
                }
            }
        }
        self.swap.unstalling = false;
        if std::mem::take(&mut self.swap.full) {
            self.fail_stalled(fx);
        }
    }
}
