// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The protocol core of one node: calls, their page accesses, the replies.
//!
//! No I/O here. Every entry point takes an [`Effects`] and appends the
//! messages to send and the calls that completed; a driver (the tokio
//! transport, or the deterministic simulator in the tests) delivers them.
//! The driver must keep messages between one pair of nodes in order (FIFO
//! links); the protocol relies on that and on nothing else about timing.
//! The owner and home side of the protocol is in `owner.rs`; regions,
//! mutexes and the barrier are in `control.rs`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use crate::addr::{home, NodeId, PageId, Regions, Span};
use crate::error::DmiError;
use crate::msg::{CopyMode, Msg, OpId, ReadMode, Reply, ReqKind, Request, WriteMode};
use crate::pool::Store;
use crate::rmw::RmwFuncs;

use crate::page::gather;
pub(crate) use crate::page::{Copy, Op, Owner, Page, PageOpKind, Piece};

/// Identifies one call of a node (one `DMI_*` invocation).
pub type CallId = u64;

/// What a call asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum CallReq {
    /// Read several `(addr, size)` ranges; the result is their bytes, in order.
    Read {
        items: Vec<(i64, i64)>,
        mode: ReadMode,
    },
    /// Write several `(addr, bytes)` ranges.
    Write {
        items: Vec<(i64, Vec<u8>)>,
        mode: WriteMode,
    },
    /// Run registered function `func` at the owner on `[addr, addr+size)`
    /// (within one page); the result is what the function returns.
    Rmw {
        addr: i64,
        size: i64,
        func: u32,
        arg: Vec<u8>,
    },
    /// `DMI_mmap`; the result is the address as 8 little-endian bytes.
    Mmap {
        page_size: i64,
        page_num: i64,
    },
    Munmap {
        addr: i64,
    },
    Lock {
        addr: i64,
    },
    Unlock {
        addr: i64,
    },
    Barrier,
    /// `DMI_finalize`'s barrier ([`crate::msg::FINAL_BARRIER`]).
    FinalBarrier,
    /// A barrier of `count` participants (the threads of an itergroup).
    BarrierOf(u32),
    /// Change the membership (node 0 only): `join` become members, `leave`
    /// hand over everything they hold and stop being members. The result
    /// is [`crate::epoch::RescaleStats`] as bytes.
    Rescale {
        join: Vec<NodeId>,
        leave: Vec<NodeId>,
    },
    /// The members of the current epoch, as little-endian u32s (answered
    /// when no change is under way).
    Members,
}

/// What a call returns: bytes (reads, RMW results, an address) or an error.
pub type Outcome = Result<Vec<u8>, DmiError>;

/// Output of one protocol step.
#[derive(Debug, Default)]
pub struct Effects {
    pub sends: Vec<(NodeId, Msg)>,
    pub done: Vec<(CallId, Outcome)>,
}

#[derive(Debug, Default)]
pub(crate) struct Call {
    pub remaining: usize,
    pub out: Vec<u8>,
    err: Option<DmiError>,
}

/// One node's protocol state.
pub struct Node {
    pub(crate) me: NodeId,
    /// Members of the current epoch, sorted; homes are spread over them.
    pub(crate) members: Vec<NodeId>,
    pub(crate) epoch: crate::epoch::EpochState,
    pub(crate) regions: Regions,
    pub(crate) pages: HashMap<PageId, Page>,
    /// Owner table of the pages this node is home of (absent: the home).
    pub(crate) owners: HashMap<PageId, NodeId>,
    pub(crate) ops: HashMap<OpId, Op>,
    pub(crate) calls: HashMap<CallId, Call>,
    next_id: u64,
    pub(crate) rmw: Arc<dyn RmwFuncs>,
    pub(crate) locks: HashMap<i64, (bool, VecDeque<(NodeId, OpId)>)>,
    /// Barrier arrivals at node 0, by participant count (0: all members).
    pub(crate) barrier: BTreeMap<u32, Vec<(NodeId, OpId)>>,
    /// At node 0, once a node's instance failed (`Msg::BarrierPoison`):
    /// why every barrier fails from then on.
    pub(crate) barrier_poison: Option<String>,
    pub(crate) next_region: u32,
    failed: Option<DmiError>,
    /// The pool's capacity in pages (None: unlimited) and its state.
    pub(crate) pool: Option<usize>,
    pub(crate) swap: crate::swap::Swap,
    /// The page frames and the index readers use (`pool.rs`).
    pub(crate) store: Store,
}

impl Node {
    pub fn new(me: NodeId, n: u32, rmw: Arc<dyn RmwFuncs>) -> Node {
        assert!(n > 0 && me < n, "node {me} of {n}");
        Node::with_members(me, (0..n).collect(), rmw)
    }

    /// Node `me` of a run whose members at start are `0..members` (the
    /// others are spares).
    pub fn with_first(me: NodeId, members: u32, rmw: Arc<dyn RmwFuncs>) -> Node {
        Node::with_members(me, (0..members).collect(), rmw)
    }

    /// A node that is not a member yet: it holds nothing and serves nothing
    /// until node 0 makes it join (`CallReq::Rescale`).
    pub fn spare(me: NodeId, rmw: Arc<dyn RmwFuncs>) -> Node {
        let mut node = Node::with_members(me, Vec::new(), rmw);
        node.epoch.phase = crate::epoch::Phase::Outside;
        node
    }

    fn with_members(me: NodeId, members: Vec<NodeId>, rmw: Arc<dyn RmwFuncs>) -> Node {
        Node {
            me,
            members,
            epoch: crate::epoch::EpochState::default(),
            regions: Regions::with_root(),
            pages: HashMap::new(),
            owners: HashMap::new(),
            ops: HashMap::new(),
            calls: HashMap::new(),
            next_id: 1,
            rmw,
            locks: HashMap::new(),
            barrier: BTreeMap::new(),
            barrier_poison: None,
            next_region: crate::addr::ROOT.id + 1,
            failed: None,
            pool: None,
            swap: crate::swap::Swap::default(),
            store: Store::heap(),
        }
    }

    pub fn rank(&self) -> NodeId {
        self.me
    }

    /// Number of members in the current epoch.
    pub fn size(&self) -> u32 {
        self.members.len() as u32
    }

    /// Members of the current epoch (sorted ids).
    pub fn members(&self) -> &[NodeId] {
        &self.members
    }

    /// The home of `page` in the current epoch.
    pub(crate) fn home_of(&self, page: PageId) -> NodeId {
        home(page, &self.members)
    }

    /// Calls not yet complete.
    pub fn pending_calls(&self) -> usize {
        self.calls.len()
    }

    pub(crate) fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Starts a call. Its outcome appears in `fx.done` now or after later
    /// messages.
    pub fn start(&mut self, req: CallReq, fx: &mut Effects) -> CallId {
        let call = self.fresh_id();
        self.calls.insert(call, Call::default());
        if let Some(e) = &self.failed {
            let e = e.clone();
            self.fail_call(call, e, fx);
            return call;
        }
        if let Some(req) = self.defer_call(call, req, fx) {
            self.run_call(call, req, fx);
        }
        self.unstall(fx);
        self.publish();
        fx.merge_replies();
        call
    }

    /// Uses `store` for the page frames (at start, before any access).
    pub fn set_store(&mut self, store: Store) {
        self.store = store;
    }

    /// The page frames and their index.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// End of a step, before its messages leave and its calls complete:
    /// marks the pages changed in it readable from their frames where the
    /// engine would serve a read locally now (an owned page with no write
    /// waiting for acknowledgements, or a copy), and publishes the regions.
    /// Every change cleared the flag (or killed the frame) when it was
    /// made, so nothing else needs clearing here (`pool.rs`). An owned page
    /// nobody else holds, with nothing under way or waiting for it, is
    /// also granted fast writes (`pool_write.rs`); during a membership
    /// change none is.
    fn publish(&mut self) {
        self.store.publish_regions(&self.regions);
        let active = self.epoch.phase == crate::epoch::Phase::Active;
        if !active {
            for o in self.pages.values().filter_map(|p| p.owner.as_ref()) {
                o.data.revoke();
            }
        }
        for p in self.store.take_dirty() {
            let Some(page) = self.pages.get(&p) else {
                continue;
            };
            match (&page.owner, &page.copy) {
                (Some(o), _) if !o.busy() => {
                    o.data.set_readable();
                    let alone = o.copyset.is_empty()
                        && o.queue.is_empty()
                        && page.early.is_empty()
                        && page.awaiting.is_empty();
                    if active && alone {
                        o.data.set_writable();
                    }
                }
                (None, Some(c)) => c.data.set_readable(),
                (Some(o), _) => debug_assert!(!o.data.readable(), "busy page {p:?} readable"),
                (None, None) => {}
            }
        }
    }

    /// Starts call `call` now (the membership is settled).
    pub(crate) fn run_call(&mut self, call: CallId, req: CallReq, fx: &mut Effects) {
        let r = match req {
            CallReq::Read { items, mode } => self.start_read(call, items, mode, fx),
            CallReq::Write { items, mode } => self.start_write(call, items, mode, fx),
            CallReq::Rmw {
                addr,
                size,
                func,
                arg,
            } => self.start_rmw(call, addr, size, func, arg, fx),
            CallReq::Mmap {
                page_size,
                page_num,
            } => self.start_mmap(call, page_size, page_num, fx),
            CallReq::Munmap { addr } => self.start_munmap(call, addr, fx),
            CallReq::Lock { addr } => self.start_lock(call, addr, false, fx),
            CallReq::Unlock { addr } => self.start_lock(call, addr, true, fx),
            CallReq::Barrier => self.start_barrier(call, 0, fx),
            CallReq::FinalBarrier => self.start_barrier(call, crate::msg::FINAL_BARRIER, fx),
            CallReq::BarrierOf(count) => {
                let count = count.clamp(1, crate::msg::FINAL_BARRIER - 1);
                self.start_barrier(call, count, fx)
            }
            CallReq::Rescale { join, leave } => self.start_rescale(call, join, leave, fx),
            CallReq::Members => {
                if let Some(c) = self.calls.get_mut(&call) {
                    c.out = self.members.iter().flat_map(|m| m.to_le_bytes()).collect();
                }
                Ok(())
            }
        };
        if let Err(e) = r {
            self.fail_call(call, e, fx);
        } else {
            self.maybe_finish(call, fx);
        }
    }

    /// Registers `count` more pieces of work for `call`.
    pub(crate) fn add_work(&mut self, call: CallId, count: usize) {
        if let Some(c) = self.calls.get_mut(&call) {
            c.remaining += count;
        }
    }

    fn start_read(
        &mut self,
        call: CallId,
        items: Vec<(i64, i64)>,
        mode: ReadMode,
        fx: &mut Effects,
    ) -> Result<(), DmiError> {
        // One access per page: the ranges of a page (in the order of the
        // items) go in one request and come back in one answer.
        let mut all: Vec<(Span, Vec<Piece>)> = Vec::new();
        let mut at: HashMap<PageId, usize> = HashMap::new();
        let mut base = 0usize;
        for (addr, size) in items {
            for span in self.regions.spans(addr, size)? {
                let piece = Piece {
                    off: span.off,
                    len: span.len,
                    out: base + span.buf_off,
                };
                match at.get(&span.page) {
                    Some(&i) => all[i].1.push(piece),
                    None => {
                        at.insert(span.page, all.len());
                        all.push((span, vec![piece]));
                    }
                }
            }
            base += size as usize;
        }
        if let Some(c) = self.calls.get_mut(&call) {
            c.out = vec![0; base];
        }
        let all = all
            .into_iter()
            .map(|(span, pieces)| (span, PageOpKind::Read(mode, pieces)))
            .collect();
        self.issue(call, all, fx);
        Ok(())
    }

    fn start_write(
        &mut self,
        call: CallId,
        items: Vec<(i64, Vec<u8>)>,
        mode: WriteMode,
        fx: &mut Effects,
    ) -> Result<(), DmiError> {
        let mut all = Vec::new();
        for (addr, data) in items {
            let spans = self.regions.spans(addr, data.len() as i64)?;
            let whole = spans.len() == 1;
            let mut data = Some(data);
            for span in spans {
                // An item within one page (the usual case) moves its
                // buffer instead of copying it.
                let bytes = match data.take() {
                    Some(d) if whole => d,
                    Some(d) => {
                        let b = d[span.buf_off..span.buf_off + span.len].to_vec();
                        data = Some(d);
                        b
                    }
                    None => Vec::new(),
                };
                let kind = match mode {
                    WriteMode::Put => PageOpKind::Put(bytes),
                    WriteMode::Exclusive => PageOpKind::Exclusive(bytes),
                };
                all.push((span, kind));
            }
        }
        self.issue(call, all, fx);
        Ok(())
    }

    fn start_rmw(
        &mut self,
        call: CallId,
        addr: i64,
        size: i64,
        func: u32,
        arg: Vec<u8>,
        fx: &mut Effects,
    ) -> Result<(), DmiError> {
        if !self.rmw.exists(func) {
            return Err(DmiError::BadArgument(format!(
                "no read-modify-write function {func} is registered"
            )));
        }
        let spans = self.regions.spans(addr, size)?;
        if spans.len() != 1 {
            return Err(DmiError::BadArgument(format!(
                "an atomic access must lie within one page ({size} bytes at {addr:#x})"
            )));
        }
        self.issue(call, vec![(spans[0], PageOpKind::Rmw { func, arg })], fx);
        Ok(())
    }

    /// Starts page accesses: served here when possible, else sent to their
    /// homes, one message per home.
    fn issue(&mut self, call: CallId, parts: Vec<(Span, PageOpKind)>, fx: &mut Effects) {
        self.add_work(call, parts.len());
        let mut by_home: BTreeMap<NodeId, Vec<Request>> = BTreeMap::new();
        for (span, kind) in parts {
            let op = self.fresh_id();
            self.ops.insert(op, Op::Page { call, span, kind });
            if let Some(req) = self.dispatch(op, fx) {
                by_home.entry(self.home_of(req.page)).or_default().push(req);
            }
        }
        for (h, reqs) in by_home {
            self.send_home(h, reqs, fx);
        }
    }

    /// Serves page access `op` locally if this node can, or returns the
    /// request to send to the page's home.
    pub(crate) fn dispatch(&mut self, op: OpId, fx: &mut Effects) -> Option<Request> {
        let Some(Op::Page { span, .. }) = self.ops.get(&op) else {
            return None;
        };
        let (span, page_id) = (*span, span.page);
        if !self.slot_for(op, page_id, fx) {
            self.stall(crate::swap::Stalled::Own(op, page_id));
            return None;
        }
        // Borrowed, not cloned: an EXCLUSIVE op carries the written bytes,
        // which only the owner side copies (once, into the page).
        let Some(Op::Page { kind, .. }) = self.ops.get(&op) else {
            return None;
        };
        let now = self.swap.tick();
        let page = self.pages.entry(page_id).or_default();
        page.used = now;
        let (rk, exclusive) = match kind {
            PageOpKind::Read(mode, pieces) => {
                if page.owner.is_none() {
                    if let Some(c) = &page.copy {
                        let bytes = gather(c.data.bytes(), pieces.iter().map(|p| (p.off, p.len)));
                        self.finish_op(op, Reply::Data(bytes), fx);
                        return None;
                    }
                }
                let rk = match (mode, page.owner.is_some()) {
                    (ReadMode::Invalidate, false) => ReqKind::Fetch {
                        mode: CopyMode::Invalidate,
                    },
                    (ReadMode::Update, false) => ReqKind::Fetch {
                        mode: CopyMode::Update,
                    },
                    _ if pieces.len() == 1 => ReqKind::Get {
                        off: pieces[0].off,
                        len: pieces[0].len,
                    },
                    _ => ReqKind::GetMany {
                        ranges: pieces.iter().map(|p| (p.off, p.len)).collect(),
                    },
                };
                (rk, false)
            }
            PageOpKind::Put(data) => (
                ReqKind::Put {
                    off: span.off,
                    data: data.clone(),
                },
                false,
            ),
            PageOpKind::Exclusive(_) => (ReqKind::Exclusive, true),
            PageOpKind::Rmw { func, arg } => (
                ReqKind::Rmw {
                    off: span.off,
                    len: span.len,
                    func: *func,
                    arg: arg.clone(),
                },
                false,
            ),
        };
        let req = Request {
            origin: self.me,
            op,
            page: page_id,
            kind: rk,
        };
        if page.owner.is_some() {
            self.at_owner(req, fx);
            None
        } else {
            if exclusive && !page.awaiting.contains(&op) {
                page.awaiting.push(op);
            }
            Some(req)
        }
    }

    /// A home creates each of its pages (zero-filled) the first time it is
    /// touched; until then the owner table says the home owns it.
    pub(crate) fn ensure_created(&mut self, page_id: PageId) {
        if self.members.is_empty()
            || self.home_of(page_id) != self.me
            || self.owners.contains_key(&page_id)
        {
            return;
        }
        let Some(size) = self.regions.page_size(page_id) else {
            return;
        };
        let page = self.pages.entry(page_id).or_default();
        if !page.created {
            page.created = true;
            let data = self.store.zeroed(page_id, size);
            page.owner = Some(Owner::new(data, 0, BTreeMap::new()));
        }
    }

    /// Completes page access `op` of this node with `reply`.
    pub(crate) fn finish_op(&mut self, op: OpId, reply: Reply, fx: &mut Effects) {
        let Some(o) = self.ops.remove(&op) else {
            return;
        };
        let Some(call) = o.call() else {
            self.swap_op_done(op, o, reply);
            return;
        };
        match (o, reply) {
            (o, Reply::Err(e)) => {
                if let Op::Page { span, .. } = o {
                    if let Some(p) = self.pages.get_mut(&span.page) {
                        p.awaiting.retain(|&a| a != op);
                    }
                    // A reserved slot is free again (`swap.rs` waits on it).
                    self.swap.resolved += 1;
                }
                self.fail_call(call, e, fx);
                return;
            }
            (
                Op::Page {
                    span,
                    kind: PageOpKind::Read(mode, pieces),
                    ..
                },
                Reply::Copy { version, data },
            ) => {
                if let Some(c) = self.calls.get_mut(&call) {
                    for p in &pieces {
                        c.out[p.out..p.out + p.len].copy_from_slice(&data[p.off..p.off + p.len]);
                    }
                }
                self.cache_copy(op, span.page, version, data, mode, fx);
            }
            (
                Op::Page {
                    kind: PageOpKind::Read(_, pieces),
                    ..
                },
                Reply::Data(bytes),
            ) => {
                // The pieces' bytes, concatenated in order.
                let total: usize = pieces.iter().map(|p| p.len).sum();
                if bytes.len() != total {
                    let e = DmiError::Setup(format!(
                        "protocol: a read of {total} bytes was answered with {}",
                        bytes.len()
                    ));
                    self.fail_call(call, e, fx);
                    return;
                }
                if let Some(c) = self.calls.get_mut(&call) {
                    let mut at = 0;
                    for p in &pieces {
                        c.out[p.out..p.out + p.len].copy_from_slice(&bytes[at..at + p.len]);
                        at += p.len;
                    }
                }
            }
            (
                Op::Page {
                    kind: PageOpKind::Rmw { .. },
                    ..
                },
                Reply::Data(bytes),
            ) => {
                if let Some(c) = self.calls.get_mut(&call) {
                    c.out = bytes;
                }
            }
            (Op::RegionAcks { result, .. }, _) => {
                if let Some(c) = self.calls.get_mut(&call) {
                    c.out = result;
                }
            }
            _ => {}
        }
        if let Some(c) = self.calls.get_mut(&call) {
            c.remaining -= 1;
        }
        self.maybe_finish(call, fx);
    }

    fn cache_copy(
        &mut self,
        op: OpId,
        page_id: PageId,
        version: u64,
        data: Vec<u8>,
        mode: ReadMode,
        fx: &mut Effects,
    ) {
        let page = self.pages.entry(page_id).or_default();
        let newer = page.copy.as_ref().is_none_or(|c| c.version < version);
        if page.owner.is_some()
            || mode == ReadMode::Get
            || version < page.inval_seen
            || !newer
            || op < page.forget_op
        {
            return;
        }
        // A new copy needs a free slot; without one the owner forgets this
        // node again (it put it in the copyset).
        let counted = page.copy.is_some() || !page.awaiting.is_empty();
        if counted || self.make_room(page_id, false, fx) {
            let data = self.store.frame(page_id, &data);
            self.pages.entry(page_id).or_default().copy = Some(Copy { data, version });
        } else {
            self.send_forget(page_id, fx);
        }
    }

    pub(crate) fn maybe_finish(&mut self, call: CallId, fx: &mut Effects) {
        if self.calls.get(&call).is_some_and(|c| c.remaining == 0) {
            let c = self.calls.remove(&call).unwrap_or_default();
            fx.done.push((call, c.err.map_or(Ok(c.out), Err)));
        }
    }

    pub(crate) fn fail_call(&mut self, call: CallId, e: DmiError, fx: &mut Effects) {
        self.ops.retain(|_, o| o.call() != Some(call));
        if self.calls.remove(&call).is_some() {
            fx.done.push((call, Err(e)));
        }
    }

    /// A peer died: every pending and every later call fails with `e`.
    pub fn fail(&mut self, e: DmiError, fx: &mut Effects) {
        // Reads from the frames would succeed where calls fail now.
        self.store.close();
        if self.failed.is_none() {
            self.failed = Some(e.clone());
        }
        let calls: Vec<CallId> = self.calls.keys().copied().collect();
        for c in calls {
            self.fail_call(c, e.clone(), fx);
        }
    }

    /// Handles a message from node `from`.
    pub fn handle(&mut self, from: NodeId, msg: Msg, fx: &mut Effects) {
        if let Some(msg) = self.epoch_filter(from, msg, fx) {
            self.handle_now(from, msg, fx);
        }
        self.unstall(fx);
        self.check_drained(fx);
        self.publish();
        fx.merge_replies();
    }

    /// Handles a message the membership change let through.
    pub(crate) fn handle_now(&mut self, from: NodeId, msg: Msg, fx: &mut Effects) {
        match msg {
            Msg::ToHome(reqs) => self.at_home(reqs, fx),
            Msg::ToOwner(reqs) => {
                for r in reqs {
                    self.at_owner(r, fx);
                }
            }
            Msg::Reply { op, reply } => self.finish_op(op, reply, fx),
            Msg::Replies(answers) => {
                for (op, reply) in answers {
                    self.finish_op(op, reply, fx);
                }
            }
            Msg::Transfer {
                op,
                page,
                version,
                data,
                copyset,
            } => self.take_ownership(op, page, version, data, copyset, fx),
            Msg::Invalidate { page, version } => {
                let p = self.pages.entry(page).or_default();
                if p.copy.as_ref().is_some_and(|c| c.version < version) {
                    p.copy = None;
                }
                p.inval_seen = p.inval_seen.max(version);
                fx.sends.push((from, Msg::Ack { page }));
            }
            Msg::Update {
                page,
                version,
                data,
            } => {
                self.update_copy(page, version, data, fx);
                fx.sends.push((from, Msg::Ack { page }));
            }
            Msg::Ack { page } => self.ack(page, fx),
            Msg::SwapAsk { page } => self.swap_ask(from, page, fx),
            Msg::SwapNo { page, busy } => self.swap_refused(page, busy, fx),
            Msg::SwapRoom => self.swap.waiting = None,
            other => self.handle_control(from, other, fx),
        }
    }

    /// Sends requests to home `h` (handled here directly when `h` is this
    /// node).
    pub(crate) fn send_home(&mut self, h: NodeId, reqs: Vec<Request>, fx: &mut Effects) {
        if h == self.me {
            self.at_home(reqs, fx);
        } else {
            fx.sends.push((h, Msg::ToHome(reqs)));
        }
    }
}

impl Node {
    /// A readable dump of this node's pages and pending accesses (for test
    /// failures).
    pub fn debug_state(&self) -> String {
        let mut s = format!(
            "node {} members={:?} phase={:?} owners={:?}\n",
            self.me, self.members, self.epoch.phase, self.owners
        );
        let mut pages: Vec<_> = self.pages.iter().collect();
        pages.sort_by_key(|(k, _)| **k);
        for (k, p) in pages {
            let owner = p.owner.as_ref().map(|o| {
                (
                    o.data.version_now(),
                    o.data.writable(),
                    o.copyset.clone(),
                    o.acks,
                    o.pending.clone(),
                    o.queue.clone(),
                )
            });
            let copy = p.copy.as_ref().map(|c| c.version);
            s += &format!(
                "  {k:?}: owner={owner:?} copy={copy:?} inval_seen={} awaiting={:?} early={:?}\n",
                p.inval_seen, p.awaiting, p.early
            );
        }
        s += &format!("  ops={:?}\n", self.ops);
        if let Some(cap) = self.pool {
            let used = self.pool_used();
            s += &format!("  pool {used}/{cap}: {:?}\n", self.swap);
        }
        s
    }
}
