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
use crate::rmw::RmwFuncs;

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
}

/// What a call returns: bytes (reads, RMW results, an address) or an error.
pub type Outcome = Result<Vec<u8>, DmiError>;

/// Output of one protocol step.
#[derive(Debug, Default)]
pub struct Effects {
    pub sends: Vec<(NodeId, Msg)>,
    pub done: Vec<(CallId, Outcome)>,
}

/// A cached copy on a node that is not the owner.
#[derive(Debug, Clone)]
pub(crate) struct Copy {
    pub data: Vec<u8>,
    pub version: u64,
}

/// The owner's state of a page.
#[derive(Debug, Default)]
pub(crate) struct Owner {
    pub data: Vec<u8>,
    /// Number of writes applied so far; travels with the page.
    pub version: u64,
    pub copyset: BTreeMap<NodeId, CopyMode>,
    /// Acks still missing for the write in progress.
    pub acks: usize,
    /// Sent when the last ack arrives: (origin, op, reply).
    pub pending: Option<(NodeId, OpId, Reply)>,
    /// Requests that arrived while a write waited for acks.
    pub queue: VecDeque<Request>,
}

impl Owner {
    pub fn busy(&self) -> bool {
        self.pending.is_some()
    }
}

/// Everything a node knows about one page.
#[derive(Debug, Default)]
pub(crate) struct Page {
    pub owner: Option<Owner>,
    pub copy: Option<Copy>,
    /// The newest version an Invalidate named: a copy older than this that
    /// arrives late (it raced the invalidation) is used once, not cached.
    pub inval_seen: u64,
    /// EXCLUSIVE writes of this node sent to the home, not yet applied: the
    /// home may forward requests here before the page arrives.
    pub awaiting: Vec<OpId>,
    /// Requests the home sent here before the Transfer arrived.
    pub early: VecDeque<Request>,
    /// This node has held the page at some time (a home creates each of its
    /// pages, zero-filled, once).
    pub created: bool,
}

#[derive(Debug, Clone)]
pub(crate) enum PageOpKind {
    Read(ReadMode),
    Put(Vec<u8>),
    Exclusive(Vec<u8>),
    Rmw { func: u32, arg: Vec<u8> },
}

#[derive(Debug, Clone)]
pub(crate) enum Op {
    Page {
        call: CallId,
        span: Span,
        /// Where the item's bytes start in the call's output.
        out_base: usize,
        kind: PageOpKind,
    },
    NewRegion {
        call: CallId,
        page_size: i64,
        page_num: i64,
    },
    RegionAcks {
        call: CallId,
        remaining: u32,
        result: Vec<u8>,
    },
    Sync {
        call: CallId,
    },
}

impl Op {
    fn call(&self) -> CallId {
        match self {
            Op::Page { call, .. }
            | Op::NewRegion { call, .. }
            | Op::RegionAcks { call, .. }
            | Op::Sync { call } => *call,
        }
    }
}

#[derive(Debug, Default)]
struct Call {
    remaining: usize,
    out: Vec<u8>,
    err: Option<DmiError>,
}

/// One node's protocol state.
pub struct Node {
    pub(crate) me: NodeId,
    pub(crate) n: u32,
    pub(crate) regions: Regions,
    pub(crate) pages: HashMap<PageId, Page>,
    /// Owner table of the pages this node is home of (absent: the home).
    pub(crate) owners: HashMap<PageId, NodeId>,
    pub(crate) ops: HashMap<OpId, Op>,
    calls: HashMap<CallId, Call>,
    next_id: u64,
    pub(crate) rmw: Arc<dyn RmwFuncs>,
    pub(crate) locks: HashMap<i64, (bool, VecDeque<(NodeId, OpId)>)>,
    pub(crate) barrier: Vec<(NodeId, OpId)>,
    pub(crate) next_region: u32,
    failed: Option<DmiError>,
}

impl Node {
    pub fn new(me: NodeId, n: u32, rmw: Arc<dyn RmwFuncs>) -> Node {
        assert!(n > 0 && me < n, "node {me} of {n}");
        Node {
            me,
            n,
            regions: Regions::with_root(),
            pages: HashMap::new(),
            owners: HashMap::new(),
            ops: HashMap::new(),
            calls: HashMap::new(),
            next_id: 1,
            rmw,
            locks: HashMap::new(),
            barrier: Vec::new(),
            next_region: crate::addr::ROOT.id + 1,
            failed: None,
        }
    }

    pub fn rank(&self) -> NodeId {
        self.me
    }

    pub fn size(&self) -> u32 {
        self.n
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
            CallReq::Barrier => self.start_barrier(call, fx),
        };
        if let Err(e) = r {
            self.fail_call(call, e, fx);
        } else {
            self.maybe_finish(call, fx);
        }
        call
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
        let mut all = Vec::new();
        let mut base = 0usize;
        for (addr, size) in items {
            for span in self.regions.spans(addr, size)? {
                all.push((span, base, PageOpKind::Read(mode)));
            }
            base += size as usize;
        }
        if let Some(c) = self.calls.get_mut(&call) {
            c.out = vec![0; base];
        }
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
                all.push((span, 0, kind));
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
        self.issue(call, vec![(spans[0], 0, PageOpKind::Rmw { func, arg })], fx);
        Ok(())
    }

    /// Starts page accesses: served here when possible, else sent to their
    /// homes, one message per home.
    fn issue(&mut self, call: CallId, parts: Vec<(Span, usize, PageOpKind)>, fx: &mut Effects) {
        self.add_work(call, parts.len());
        let mut by_home: BTreeMap<NodeId, Vec<Request>> = BTreeMap::new();
        for (span, out_base, kind) in parts {
            let op = self.fresh_id();
            self.ops.insert(
                op,
                Op::Page {
                    call,
                    span,
                    out_base,
                    kind,
                },
            );
            if let Some(req) = self.dispatch(op, fx) {
                by_home.entry(home(req.page, self.n)).or_default().push(req);
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
        self.ensure_created(page_id);
        // Borrowed, not cloned: an EXCLUSIVE op carries the written bytes,
        // which only the owner side copies (once, into the page).
        let Some(Op::Page { kind, .. }) = self.ops.get(&op) else {
            return None;
        };
        let page = self.pages.entry(page_id).or_default();
        let (rk, exclusive) = match kind {
            PageOpKind::Read(mode) => {
                if page.owner.is_none() {
                    if let Some(c) = &page.copy {
                        let bytes = c.data[span.off..span.off + span.len].to_vec();
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
                    _ => ReqKind::Get {
                        off: span.off,
                        len: span.len,
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
        if home(page_id, self.n) != self.me || self.owners.contains_key(&page_id) {
            return;
        }
        let Some(size) = self.regions.page_size(page_id) else {
            return;
        };
        let page = self.pages.entry(page_id).or_default();
        if !page.created {
            page.created = true;
            page.owner = Some(Owner {
                data: vec![0; size],
                ..Owner::default()
            });
        }
    }

    /// Completes page access `op` of this node with `reply`.
    pub(crate) fn finish_op(&mut self, op: OpId, reply: Reply, fx: &mut Effects) {
        let Some(o) = self.ops.remove(&op) else {
            return;
        };
        let call = o.call();
        match (o, reply) {
            (_, Reply::Err(e)) => {
                self.fail_call(call, e, fx);
                return;
            }
            (
                Op::Page {
                    span,
                    out_base,
                    kind: PageOpKind::Read(mode),
                    ..
                },
                Reply::Copy { version, data },
            ) => {
                let bytes = data[span.off..span.off + span.len].to_vec();
                self.cache_copy(span.page, version, data, mode);
                self.put_out(call, out_base + span.buf_off, &bytes);
            }
            (
                Op::Page {
                    span,
                    out_base,
                    kind: PageOpKind::Read(_),
                    ..
                },
                Reply::Data(bytes),
            ) => self.put_out(call, out_base + span.buf_off, &bytes),
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

    fn cache_copy(&mut self, page_id: PageId, version: u64, data: Vec<u8>, mode: ReadMode) {
        let page = self.pages.entry(page_id).or_default();
        let newer = page.copy.as_ref().is_none_or(|c| c.version < version);
        if page.owner.is_none() && mode != ReadMode::Get && version >= page.inval_seen && newer {
            page.copy = Some(Copy { data, version });
        }
    }

    fn put_out(&mut self, call: CallId, at: usize, bytes: &[u8]) {
        if let Some(c) = self.calls.get_mut(&call) {
            c.out[at..at + bytes.len()].copy_from_slice(bytes);
        }
    }

    pub(crate) fn maybe_finish(&mut self, call: CallId, fx: &mut Effects) {
        if self.calls.get(&call).is_some_and(|c| c.remaining == 0) {
            let c = self.calls.remove(&call).unwrap_or_default();
            fx.done.push((call, c.err.map_or(Ok(c.out), Err)));
        }
    }

    fn fail_call(&mut self, call: CallId, e: DmiError, fx: &mut Effects) {
        self.ops.retain(|_, o| o.call() != call);
        if self.calls.remove(&call).is_some() {
            fx.done.push((call, Err(e)));
        }
    }

    /// A peer died: every pending and every later call fails with `e`.
    pub fn fail(&mut self, e: DmiError, fx: &mut Effects) {
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
        match msg {
            Msg::ToHome(reqs) => self.at_home(reqs, fx),
            Msg::ToOwner(reqs) => {
                for r in reqs {
                    self.at_owner(r, fx);
                }
            }
            Msg::Reply { op, reply } => self.finish_op(op, reply, fx),
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
                let p = self.pages.entry(page).or_default();
                if p.owner.is_none() && p.copy.as_ref().is_none_or(|c| c.version < version) {
                    p.copy = Some(Copy { data, version });
                }
                fx.sends.push((from, Msg::Ack { page }));
            }
            Msg::Ack { page } => self.ack(page, fx),
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
        let mut s = format!("node {} owners={:?}\n", self.me, self.owners);
        let mut pages: Vec<_> = self.pages.iter().collect();
        pages.sort_by_key(|(k, _)| **k);
        for (k, p) in pages {
            let owner = p.owner.as_ref().map(|o| {
                (
                    o.version,
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
        s
    }
}
