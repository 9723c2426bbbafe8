// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The home and owner side of the page protocol.
//!
//! * The **home** of a page (fixed, `addr::home`) keeps its owner entry and
//!   forwards every request to the owner on record, in arrival order. An
//!   EXCLUSIVE request moves the entry to the requester at once, so later
//!   requests are forwarded to the new owner, which holds them until the
//!   page arrives (`Page::early`).
//! * The **owner** serves one request at a time per page. A write (PUT,
//!   EXCLUSIVE at the owner, RMW) invalidates or updates every copy in the
//!   copyset and completes only when all of them acknowledged; requests
//!   arriving meanwhile wait in `Owner::queue`. That is what makes each
//!   page sequentially consistent: writes are totally ordered by the page's
//!   version, and no node can read a version older than a completed write.

use std::collections::{BTreeMap, HashMap};

use crate::addr::{NodeId, PageId};
use crate::error::DmiError;
use crate::msg::{CopyMode, Msg, OpId, Reply, ReqKind, Request};
use crate::node::{Effects, Node, Op, Owner, PageOpKind};
use crate::page::gather;
use crate::swap::Stalled;

impl Node {
    /// Home side: forward each request to the owner on record.
    pub(crate) fn at_home(&mut self, reqs: Vec<Request>, fx: &mut Effects) {
        let mut by_owner: BTreeMap<NodeId, Vec<Request>> = BTreeMap::new();
        let mut mine = Vec::new();
        for req in reqs {
            if self.regions.page_size(req.page).is_none() {
                self.reply(req.origin, req.op, unmapped(req.page), fx);
                continue;
            }
            if self.hand_fresh(&req, fx) {
                continue;
            }
            if self.must_stall(req.page, fx) {
                self.stall(Stalled::Home(req));
                continue;
            }
            let owner = self.owners.get(&req.page).copied().unwrap_or(self.me);
            if matches!(req.kind, ReqKind::Exclusive | ReqKind::Adopt) {
                self.ensure_created(req.page);
                if req.origin == self.me {
                    self.owners.remove(&req.page);
                } else {
                    self.owners.insert(req.page, req.origin);
                }
            }
            if owner == self.me {
                mine.push(req);
            } else {
                by_owner.entry(owner).or_default().push(req);
            }
        }
        // Send before serving this node's share: serving may make new
        // decisions here (nested), which must reach each owner after these.
        for (o, reqs) in by_owner {
            fx.sends.push((o, Msg::ToOwner(reqs)));
        }
        for req in mine {
            self.at_owner(req, fx);
        }
    }

    /// Owner side: serve `req`, or hold it while the page is busy or still
    /// on its way here.
    pub(crate) fn at_owner(&mut self, req: Request, fx: &mut Effects) {
        if self.regions.page_size(req.page).is_none() {
            self.reply(req.origin, req.op, unmapped(req.page), fx);
            return;
        }
        // Only a home creates pages: the request runs through the home
        // side again once there is room (the page may have been handed out
        // fresh meanwhile, `swap::hand_fresh`).
        if self.must_stall(req.page, fx) {
            self.stall(Stalled::Home(req));
            return;
        }
        self.ensure_created(req.page);
        let me = self.me;
        let now = self.swap.tick();
        let page = self.pages.entry(req.page).or_default();
        page.used = now;
        let Some(owner) = page.owner.as_mut() else {
            if !page.awaiting.is_empty() {
                page.early.push_back(req);
            } else {
                let e = DmiError::Setup(format!(
                    "protocol: a request for {:?} reached node {me}, which neither owns nor awaits it",
                    req.page
                ));
                self.reply(req.origin, req.op, Reply::Err(e), fx);
            }
            return;
        };
        if owner.busy() {
            owner.queue.push_back(req);
            return;
        }
        match req.kind {
            ReqKind::Get { off, len } => {
                let bytes = owner.data.bytes()[off..off + len].to_vec();
                self.reply(req.origin, req.op, Reply::Data(bytes), fx);
            }
            ReqKind::GetMany { ranges } => {
                let bytes = gather(owner.data.bytes(), ranges.iter().copied());
                self.reply(req.origin, req.op, Reply::Data(bytes), fx);
            }
            ReqKind::Fetch { mode } => {
                if req.origin != me {
                    owner.copyset.insert(req.origin, mode);
                }
                let reply = Reply::Copy {
                    version: owner.version(),
                    data: owner.data.to_vec(),
                };
                self.reply(req.origin, req.op, reply, fx);
            }
            ReqKind::Put { off, data } => {
                owner.data.write(off, &data);
                self.propagate(req.page, req.origin, req.op, Reply::Done, fx);
            }
            ReqKind::Rmw {
                off,
                len,
                func,
                arg,
            } => {
                let rmw = &self.rmw;
                let out = owner
                    .data
                    .modify(|d| rmw.call(func, &mut d[off..off + len], &arg));
                match out {
                    Ok(result) => {
                        self.propagate(req.page, req.origin, req.op, Reply::Data(result), fx)
                    }
                    Err(e) => self.reply(req.origin, req.op, Reply::Err(e), fx),
                }
            }
            ReqKind::Exclusive if req.origin == me => {
                page.awaiting.retain(|&o| o != req.op);
                self.write_exclusive(req.page, req.op, fx);
            }
            ReqKind::Forget => {
                owner.copyset.remove(&req.origin);
                // Maybe nobody else holds it now (fast writes).
                self.store.touch(req.page);
                self.reply(req.origin, req.op, Reply::Done, fx);
            }
            // This node adopted a page it owns by now: nothing moves.
            ReqKind::Adopt if req.origin == me => {
                page.awaiting.retain(|&o| o != req.op);
                self.finish_op(req.op, Reply::Done, fx);
            }
            ReqKind::Exclusive | ReqKind::Adopt => {
                if req.kind == ReqKind::Adopt {
                    self.swap.moved_out += 1;
                }
                let page = self.pages.entry(req.page).or_default();
                let Some(owner) = page.owner.take() else {
                    return;
                };
                page.copy = None;
                let version = owner.version();
                let copyset = owner
                    .copyset
                    .into_iter()
                    .filter(|&(n, _)| n != req.origin)
                    .collect();
                fx.sends.push((
                    req.origin,
                    Msg::Transfer {
                        op: req.op,
                        page: req.page,
                        version,
                        data: owner.data.to_vec(),
                        copyset,
                    },
                ));
                self.drain(req.page, owner.queue, fx);
            }
        }
    }

    /// Applies this node's EXCLUSIVE write `op` at the owner (this node).
    fn write_exclusive(&mut self, page_id: PageId, op: OpId, fx: &mut Effects) {
        let Some(Op::Page {
            span,
            kind: PageOpKind::Exclusive(data),
            ..
        }) = self.ops.get(&op)
        else {
            return;
        };
        if let Some(owner) = self.pages.get_mut(&page_id).and_then(|p| p.owner.as_mut()) {
            owner.data.write(span.off, data);
        }
        let me = self.me;
        self.propagate(page_id, me, op, Reply::Done, fx);
    }

    /// A write was applied to the owner's data: bump the version, invalidate
    /// or update every copy, and answer `origin` once all have acknowledged.
    fn propagate(
        &mut self,
        page_id: PageId,
        origin: NodeId,
        op: OpId,
        reply: Reply,
        fx: &mut Effects,
    ) {
        let Some(owner) = self.pages.get_mut(&page_id).and_then(|p| p.owner.as_mut()) else {
            return;
        };
        let version = owner.bump_version();
        let mut acks = 0;
        let mut keep = BTreeMap::new();
        for (&node, &mode) in &owner.copyset {
            acks += 1;
            match mode {
                CopyMode::Invalidate => fx.sends.push((
                    node,
                    Msg::Invalidate {
                        page: page_id,
                        version,
                    },
                )),
                CopyMode::Update => {
                    keep.insert(node, mode);
                    fx.sends.push((
                        node,
                        Msg::Update {
                            page: page_id,
                            version,
                            data: owner.data.to_vec(),
                        },
                    ));
                }
            }
        }
        owner.copyset = keep;
        if acks == 0 {
            self.reply(origin, op, reply, fx);
        } else {
            owner.acks = acks;
            owner.pending = Some((origin, op, reply));
        }
    }

    /// An Invalidate or Update was applied by a copy holder.
    pub(crate) fn ack(&mut self, page_id: PageId, fx: &mut Effects) {
        let Some(owner) = self.pages.get_mut(&page_id).and_then(|p| p.owner.as_mut()) else {
            return;
        };
        owner.acks = owner.acks.saturating_sub(1);
        if owner.acks > 0 {
            return;
        }
        if let Some((origin, op, reply)) = owner.pending.take() {
            // At rest again: readable from the frame (`Node::publish`).
            self.store.touch(page_id);
            let queue = std::mem::take(&mut owner.queue);
            self.reply(origin, op, reply, fx);
            self.drain(page_id, queue, fx);
        }
    }

    /// Serves held requests in order until one makes the page busy again.
    /// Once the page has moved away, requests wait for its return if this
    /// node awaits it again, and this node's own requests start over
    /// otherwise.
    fn drain(
        &mut self,
        page_id: PageId,
        mut queue: std::collections::VecDeque<Request>,
        fx: &mut Effects,
    ) {
        while let Some(req) = queue.pop_front() {
            let page = self.pages.entry(page_id).or_default();
            match page.owner.as_mut() {
                Some(owner) if owner.busy() => {
                    owner.queue.push_back(req);
                }
                Some(_) => self.at_owner(req, fx),
                // The home already sent this node's next EXCLUSIVE on its
                // way: what the home forwarded here after it belongs to that
                // next period of ownership.
                None if !page.awaiting.is_empty() => page.early.push_back(req),
                None if req.origin == self.me => {
                    page.awaiting.retain(|&o| o != req.op);
                    if let Some(r) = self.dispatch(req.op, fx) {
                        let h = self.home_of(page_id);
                        self.send_home(h, vec![r], fx);
                    }
                }
                None => {
                    // The home forwards a request for a page only to the
                    // owner it has on record, in order: a request of another
                    // node cannot be left behind when the page moves.
                    let e = DmiError::Setup(format!(
                        "protocol: node {} held a request of node {} for {page_id:?} after the page moved",
                        self.me, req.origin
                    ));
                    self.reply(req.origin, req.op, Reply::Err(e), fx);
                }
            }
        }
    }

    /// The page arrives for EXCLUSIVE write `op`: become its owner, write,
    /// and serve the requests that arrived early.
    pub(crate) fn take_ownership(
        &mut self,
        op: OpId,
        page_id: PageId,
        version: u64,
        data: Vec<u8>,
        copyset: Vec<(NodeId, CopyMode)>,
        fx: &mut Effects,
    ) {
        let page = self.pages.entry(page_id).or_default();
        page.awaiting.retain(|&o| o != op);
        page.copy = None;
        page.created = true;
        let data = self.store.frame(page_id, &data);
        page.owner = Some(Owner::new(data, version, copyset.into_iter().collect()));
        let early = std::mem::take(&mut page.early);
        self.swap.resolved += 1;
        if matches!(self.ops.get(&op), Some(Op::Adopt { .. })) {
            self.ops.remove(&op);
        }
        self.write_exclusive(page_id, op, fx);
        self.drain(page_id, early, fx);
    }

    /// Answers access `op` of `origin` (directly when it is this node).
    pub(crate) fn reply(&mut self, origin: NodeId, op: OpId, reply: Reply, fx: &mut Effects) {
        if origin == self.me {
            self.finish_op(op, reply, fx);
        } else {
            fx.sends.push((origin, Msg::Reply { op, reply }));
        }
    }
}

impl Effects {
    /// Merges the answers to one node into one `Msg::Replies` where no
    /// other message to that node comes between them: the order of what
    /// each node receives stays the same (the protocol relies on FIFO
    /// links), and the ranges a group access sent to one owner come back
    /// as one message.
    pub(crate) fn merge_replies(&mut self) {
        enum Slot {
            One(Msg),
            Answers(Vec<(OpId, Reply)>),
        }
        if self.sends.len() < 2 {
            return;
        }
        let mut out: Vec<(NodeId, Slot)> = Vec::with_capacity(self.sends.len());
        let mut last: HashMap<NodeId, usize> = HashMap::new();
        for (to, m) in std::mem::take(&mut self.sends) {
            match m {
                Msg::Reply { op, reply } => {
                    if let Some(&i) = last.get(&to) {
                        if let Slot::Answers(v) = &mut out[i].1 {
                            v.push((op, reply));
                            continue;
                        }
                    }
                    last.insert(to, out.len());
                    out.push((to, Slot::Answers(vec![(op, reply)])));
                }
                m => {
                    last.insert(to, out.len());
                    out.push((to, Slot::One(m)));
                }
            }
        }
        self.sends = out
            .into_iter()
            .map(|(to, s)| match s {
                Slot::One(m) => (to, m),
                Slot::Answers(mut v) if v.len() == 1 => {
                    let (op, reply) = v.remove(0);
                    (to, Msg::Reply { op, reply })
                }
                Slot::Answers(v) => (to, Msg::Replies(v)),
            })
            .collect();
    }
}

fn unmapped(page: PageId) -> Reply {
    Reply::Err(DmiError::BadAddress(format!(
        "region {} is not mapped (DMI_munmap raced this access?)",
        page.region
    )))
}
