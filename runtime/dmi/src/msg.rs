// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Access modes and the protocol's messages (what travels between nodes).
//!
//! Page contents are encoded as byte strings (`serde_bytes`): bincode then
//! copies them in one piece instead of visiting every byte as a sequence
//! element, which cost more CPU than the rest of a 200 KB GET.

use serde::{Deserialize, Serialize};

use crate::addr::{NodeId, PageId, Region};
use crate::error::DmiError;

/// `DMI_read` modes (dmi-reconfiguration sec. 3.3, Fig. 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadMode {
    /// Cache the page; the cache is invalidated by the next write.
    Invalidate,
    /// Cache the page; the cache is updated by every write.
    Update,
    /// Fetch only the bytes asked for; cache nothing.
    Get,
}

/// `DMI_write` modes (Fig. 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WriteMode {
    /// Take ownership of the page, then write it here.
    Exclusive,
    /// Send the bytes to the owner, which writes them.
    Put,
}

/// How a cached copy is kept coherent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CopyMode {
    Invalidate,
    Update,
}

/// Call-local identifier of one page access.
pub type OpId = u64;

/// What a page access asks the owner to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ReqKind {
    /// GET read of `[off, off+len)`.
    Get { off: usize, len: usize },
    /// INVALIDATE/UPDATE read: the whole page, and a place in the copyset.
    Fetch { mode: CopyMode },
    /// PUT write.
    Put {
        off: usize,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// EXCLUSIVE write: the owner hands the page over; the writer writes.
    Exclusive,
    /// Read-modify-write run at the owner by registered function `func`.
    Rmw {
        off: usize,
        len: usize,
        func: u32,
        #[serde(with = "serde_bytes")]
        arg: Vec<u8>,
    },
}

/// One page access on its way to the owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub origin: NodeId,
    pub op: OpId,
    pub page: PageId,
    pub kind: ReqKind,
}

/// The answer to a request, from the owner to the origin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// Bytes for a GET or the result of a read-modify-write.
    Data(#[serde(with = "serde_bytes")] Vec<u8>),
    /// A copy of the whole page at `version` for a Fetch.
    Copy {
        version: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// A PUT is complete (every copy invalidated or updated).
    Done,
    Err(DmiError),
}

/// Messages between nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Msg {
    /// Accesses for pages whose home is the receiver (one message per home
    /// per call: a group access is aggregated here).
    ToHome(Vec<Request>),
    /// Accesses the home forwards to the owner it has on record (one message
    /// per owner).
    ToOwner(Vec<Request>),
    /// The answer to access `op` of the receiver.
    Reply {
        op: OpId,
        reply: Reply,
    },
    /// Ownership of `page` moves to the receiver, for its EXCLUSIVE write `op`.
    Transfer {
        op: OpId,
        page: PageId,
        version: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
        copyset: Vec<(NodeId, CopyMode)>,
    },
    /// Drop the copy of `page`: a write made `version`.
    Invalidate {
        page: PageId,
        version: u64,
    },
    /// Replace the copy of `page` with `data` at `version`.
    Update {
        page: PageId,
        version: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// An Invalidate or Update was applied.
    Ack {
        page: PageId,
    },
    /// Ask node 0 for a fresh region id.
    NewRegionId {
        op: OpId,
    },
    /// Node 0's answer.
    RegionId {
        op: OpId,
        id: u32,
    },
    /// Learn (map) or forget (unmap) a region; answered by `RegionAck`.
    MapRegion {
        op: OpId,
        region: Region,
    },
    UnmapRegion {
        op: OpId,
        region: u32,
    },
    RegionAck {
        op: OpId,
    },
    /// Mutex at the home of the mutex's page.
    Lock {
        op: OpId,
        addr: i64,
    },
    Unlock {
        op: OpId,
        addr: i64,
    },
    /// Barrier arrival at node 0, and its release.
    Barrier {
        op: OpId,
    },
}
