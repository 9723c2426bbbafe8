//! What a node keeps per page and per page operation: a cached copy, the
//! owner's state (copyset, pending acknowledgements, queued requests), the
//! page's entry, and the operations in flight (`node.rs` drives them).

use std::collections::{BTreeMap, VecDeque};

use crate::addr::{NodeId, PageId, Span};
use crate::msg::{CopyMode, OpId, ReadMode, Reply, Request};
use crate::node::CallId;
use crate::pool::Frame;

/// A cached copy on a node that is not the owner.
#[derive(Debug)]
pub(crate) struct Copy {
    pub data: Frame,
    pub version: u64,
}

/// The owner's state of a page.
#[derive(Debug)]
pub(crate) struct Owner {
    /// The page, and its version (writes applied so far, fast writes
    /// included; travels with the page) in the frame's head.
    pub data: Frame,
    pub copyset: BTreeMap<NodeId, CopyMode>,
    /// Acks still missing for the write in progress.
    pub acks: usize,
    /// Sent when the last ack arrives: (origin, op, reply).
    pub pending: Option<(NodeId, OpId, Reply)>,
    /// Requests that arrived while a write waited for acks.
    pub queue: VecDeque<Request>,
}

impl Owner {
    pub fn new(mut data: Frame, version: u64, copyset: BTreeMap<NodeId, CopyMode>) -> Owner {
        data.set_version(version);
        Owner {
            data,
            copyset,
            acks: 0,
            pending: None,
            queue: VecDeque::new(),
        }
    }

    pub fn busy(&self) -> bool {
        self.pending.is_some()
    }

    /// Writes applied so far (takes a fast-write grant back first).
    pub fn version(&self) -> u64 {
        self.data.version()
    }

    /// One more write applied: the new version.
    pub fn bump_version(&mut self) -> u64 {
        let v = self.data.version() + 1;
        self.data.set_version(v);
        v
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
    /// `Forget` requests of this node not answered yet: no Update makes a
    /// copy meanwhile (`swap.rs`).
    pub forgets: u32,
    /// The newest `Forget` of this node: a Copy answering a Fetch sent
    /// before it (a smaller op id) is not cached.
    pub forget_op: OpId,
    /// When this node last made or served an access to the page, on the
    /// node's access clock (`Swap::tick`): remote swap moves the owned page
    /// at rest least recently used.
    pub used: u64,
}

/// One range a read takes from a page: `len` bytes at `off`, going to `out`
/// in the call's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    pub off: usize,
    pub len: usize,
    pub out: usize,
}

/// The bytes of `(off, len)` ranges of `page`, concatenated in order (the
/// answer to a read of several ranges).
pub(crate) fn gather<I>(page: &[u8], ranges: I) -> Vec<u8>
where
    I: IntoIterator<Item = (usize, usize)>,
    I::IntoIter: Clone,
{
    let ranges = ranges.into_iter();
    let mut out = Vec::with_capacity(ranges.clone().map(|r| r.1).sum());
    for (off, len) in ranges {
        out.extend_from_slice(&page[off..off + len]);
    }
    out
}

#[derive(Debug, Clone)]
pub(crate) enum PageOpKind {
    /// A read of one or more ranges of the page: the ranges of one page in
    /// one call travel as one access (one request, one answer).
    Read(ReadMode, Vec<Piece>),
    Put(Vec<u8>),
    Exclusive(Vec<u8>),
    Rmw {
        func: u32,
        arg: Vec<u8>,
    },
}

#[derive(Debug, Clone)]
pub(crate) enum Op {
    Page {
        call: CallId,
        span: Span,
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
    /// This node dropped its copy of `page` and tells the owner (`swap.rs`).
    Forget {
        page: PageId,
    },
    /// This node adopts `page` from a full owner (`swap.rs`).
    Adopt {
        page: PageId,
    },
}

impl Op {
    pub(crate) fn call(&self) -> Option<CallId> {
        match self {
            Op::Page { call, .. }
            | Op::NewRegion { call, .. }
            | Op::RegionAcks { call, .. }
            | Op::Sync { call } => Some(*call),
            Op::Forget { .. } | Op::Adopt { .. } => None,
        }
    }
}
