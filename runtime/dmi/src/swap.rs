// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Remote swap: a node's memory pool holds at most `Node::pool` pages
//! (owned pages, cached copies and pages it awaits for its own EXCLUSIVE
//! write or an adoption). When storing one more would exceed it:
//!
//! 1. **Clean copies go first.** The copy is dropped at once and a `Forget`
//!    request travels like any access (home, then the owner on record, in
//!    order), so the owner drops the node from the copyset. A Copy that
//!    answers a Fetch sent before the Forget is used once and not cached
//!    (the owner may have served the Fetch first and forgotten the node
//!    after), and until the owner answered the Forget no Update makes a new
//!    copy: neither can come back as a cache nobody keeps coherent. Fetches
//!    sent after the Forget reach the owner after it, so their copies are
//!    kept. Invalidates and Updates in flight are still acknowledged.
//! 2. **Then an owned page moves.** The node asks another member to take a
//!    page it owns and that is at rest (`SwapAsk`). A target with room
//!    (after dropping its own clean copies) reserves a slot and sends an
//!    `Adopt` request to the page's home: exactly an EXCLUSIVE without a
//!    write, so the home records the target as owner and the owner on
//!    record hands the page over (data, version, copyset) with a Transfer;
//!    forwarding keeps working as for any change of owner. A full target
//!    answers `SwapNo` and the next member is asked.
//! 3. **Only when every member refused** do the accesses waiting for room
//!    fail, with [`DmiError::PoolFull`] naming the pool size.
//!
//! Accesses that need a slot while there is none (a home creating a page,
//! an EXCLUSIVE write that will receive one) wait in `Swap::stalled`, in
//! order per page, and run again whenever the node has room.

use std::collections::VecDeque;

use crate::addr::{NodeId, PageId};
use crate::error::DmiError;
use crate::msg::{Msg, OpId, Reply, ReqKind, Request};
use crate::node::{Effects, Node, Op};

/// Something that waits for a free slot in this node's pool.
#[derive(Debug, Clone)]
pub(crate) enum Stalled {
    /// A request that reached this node as home.
    Home(Request),
    /// A request for this node as owner.
    Owner(Request),
    /// An access of this node (`Node::dispatch`).
    Own(OpId, PageId),
}

impl Stalled {
    fn page(&self) -> PageId {
        match self {
            Stalled::Home(r) | Stalled::Owner(r) => r.page,
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
}

/// The pool's state.
#[derive(Debug, Default)]
pub(crate) struct Swap {
    pub stalled: VecDeque<Stalled>,
    out: Option<SwapOut>,
    unstalling: bool,
    /// Owned pages moved away and copies dropped (for tests and the dump).
    pub moved_out: u64,
    pub dropped: u64,
}

impl Node {
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

    /// (owned pages moved away, clean copies dropped) so far.
    pub fn swap_counts(&self) -> (u64, u64) {
        (self.swap.moved_out, self.swap.dropped)
    }

    /// Whether a slot is free, dropping clean copies (never of `keep`) to
    /// free one; with `owned`, also starts moving an owned page away.
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
                .map(|(k, _)| *k)
                .min();
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

    pub(crate) fn stall(&mut self, s: Stalled) {
        self.swap.stalled.push_back(s);
    }

    /// Asks the next member to adopt an owned page at rest.
    fn start_swap_out(&mut self, fx: &mut Effects) {
        if self.swap.out.is_some() {
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
            .map(|(k, _)| *k)
            .min();
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
                self.swap.out = Some(SwapOut { page, left });
            }
            None => self.fail_stalled(fx),
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
            fx.sends.push((from, Msg::SwapNo { page }));
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

    /// `SwapNo` from a full member: ask the next one.
    pub(crate) fn swap_refused(&mut self, page: PageId, fx: &mut Effects) {
        let Some(out) = self.swap.out.as_mut().filter(|o| o.page == page) else {
            return;
        };
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
                self.swap.out = None;
                self.fail_stalled(fx);
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
                Stalled::Home(r) | Stalled::Owner(r) => {
                    self.reply(r.origin, r.op, Reply::Err(e.clone()), fx)
                }
                Stalled::Own(op, _) => self.finish_op(op, Reply::Err(e.clone()), fx),
            }
        }
    }

    /// Runs what waited for room once there is some (after every step).
    pub(crate) fn unstall(&mut self, fx: &mut Effects) {
        if let Some(out) = &self.swap.out {
            if self.pages.get(&out.page).is_none_or(|p| p.owner.is_none()) {
                self.swap.out = None;
            }
        }
        if self.swap.stalled.is_empty() || self.swap.unstalling {
            return;
        }
        let first = self.swap.stalled[0].page();
        if !self.make_room(first, true, fx) {
            return;
        }
        self.swap.unstalling = true;
        for s in std::mem::take(&mut self.swap.stalled) {
            match s {
                Stalled::Home(r) => self.at_home(vec![r], fx),
                Stalled::Owner(r) => self.at_owner(r, fx),
                Stalled::Own(op, page) => {
                    if let Some(r) = self.dispatch(op, fx) {
                        let h = self.home_of(page);
                        self.send_home(h, vec![r], fx);
                    }
                }
            }
        }
        self.swap.unstalling = false;
    }
}
