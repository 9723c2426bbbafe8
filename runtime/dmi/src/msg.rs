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
    /// The origin dropped its copy to make room (`swap.rs`): the owner drops
    /// it from the copyset and answers `Done`.
    Forget,
    /// The origin takes the page over to make room at the owner
    /// (`swap.rs`): an EXCLUSIVE without a write.
    Adopt,
    /// GET read of several `(off, len)` ranges of the page (a group read's
    /// ranges of one page), served at one version; the answer is their
    /// bytes, concatenated in order, in one `Reply::Data`.
    GetMany { ranges: Vec<(usize, usize)> },
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

/// The participant count of `DMI_finalize`'s barrier: every member, a
/// round of its own (it pairs only with other nodes' `DMI_finalize`), and
/// never failed by a [`Msg::BarrierPoison`]: a node whose barrier failed
/// still waits there until the others are done with its pages.
pub const FINAL_BARRIER: u32 = u32::MAX;

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
    /// Several answers to the receiver, in order: the replies one protocol
    /// step made for one node with nothing else for it in between
    /// (`Effects::merge_replies`).
    Replies(Vec<(OpId, Reply)>),
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
    /// A full node asks the receiver to adopt `page`, which it owns
    /// (`swap.rs`); the receiver sends `ReqKind::Adopt` to the home, or
    /// answers `SwapNo` when its pool is full too.
    SwapAsk {
        page: PageId,
    },
    /// The receiver is full; `busy`: some of its slots are reserved for
    /// pages on their way to it, so a `SwapRoom` follows when one arrived.
    SwapNo {
        page: PageId,
        busy: bool,
    },
    /// A node that answered `SwapNo { busy: true }` received a page it had
    /// reserved a slot for (or has room): ask again.
    SwapRoom,
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
    /// Mutex at the home of the mutex's page (forwarded by a node that is
    /// no longer its home); the answer goes to `origin`.
    Lock {
        origin: NodeId,
        op: OpId,
        addr: i64,
    },
    Unlock {
        origin: NodeId,
        op: OpId,
        addr: i64,
    },
    /// Barrier arrival at node 0, and its release: when `count` arrived,
    /// or every member for 0 and for [`FINAL_BARRIER`].
    Barrier {
        op: OpId,
        count: u32,
    },
    /// To node 0: a compute instance of the sender failed and its node
    /// goes on (`DMI_ERRORS=return`): its barriers can no longer complete,
    /// so every waiting and every later barrier arrival fails with `why`.
    BarrierPoison {
        why: String,
    },
    /// A change of membership (`epoch.rs`).
    Epoch(EpochMsg),
    /// For the program's runtime, not the protocol core (`reconf.rs`): the
    /// engine hands these to the application side.
    App(AppMsg),
    /// Compute instances moving between nodes and the movable run's plan
    /// (`xmove.rs`, `host.rs`): also handed to the application side.
    Inst(InstMsg),
}

/// Messages about compute instances between the nodes' hosts (`docs/dmi.md`,
/// "DMI_yield": cross-node moves).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum InstMsg {
    /// Source to target: the checkpoint of instance `id` (parked at its
    /// yield number `yields`, its `Home` at `home`); `manifest` is the
    /// bincode of the engine's manifest.
    Image {
        token: u64,
        id: i64,
        /// The node whose `DMI_create` made the instance (it joins it and
        /// counts its barrier arrivals: `guest.rs`); `None` for a movable
        /// run's rank.
        origin: Option<NodeId>,
        yields: u64,
        home: u64,
        #[serde(with = "serde_bytes")]
        manifest: Vec<u8>,
        #[serde(with = "serde_bytes")]
        pages: Vec<u8>,
    },
    /// Target to source: the copy is restored, adopted and parked (pid).
    Ready { token: u64, pid: i32 },
    /// Target to source: the copy could not be made; nothing runs there.
    Refused { token: u64, why: String },
    /// Source to target: the original is gone, let the copy run.
    Commit { token: u64 },
    /// Source to target: the move is off, end the copy.
    Abort { token: u64 },
    /// Node 0 to every node: the members of the run and which of them are
    /// leaving (their instances move away at their next yield), and how
    /// many of the run's scheduled changes node 0 has applied.
    Plan {
        members: Vec<NodeId>,
        leaving: Vec<NodeId>,
        applied: u64,
    },
    /// To node 0: an instance made `yields` yields (scheduled changes due).
    Reached { yields: u64 },
    /// A leaving node to node 0: it hosts no instance any more.
    Empty,
    /// Every instance passed its final barrier: hosts end once theirs exited.
    Over,
    /// To a `DMI_create` instance's origin: its instance `id` now runs on
    /// node `node` (moved there at its yield number `yields`).
    At { id: i64, node: NodeId, yields: u64 },
    /// Source to the origin, before it kills the original: its instance
    /// `id` moves to node `node` (at its yield number `yields`); `node`'s
    /// own `At` may come later. Answered `MovingSeen` with the same token;
    /// the source commits only after that answer.
    Moving {
        id: i64,
        node: NodeId,
        yields: u64,
        token: u64,
    },
    /// Origin to source: the origin recorded `Moving(token)` (`refused`:
    /// it did not, the move is off: why).
    MovingSeen { token: u64, refused: Option<String> },
    /// Target to the origin: the copy of its instance `id` (moved at its
    /// yield number `yields`) was ended because its source failed before
    /// it committed: the instance is lost (`why`).
    Lost { id: i64, yields: u64, why: String },
    /// To the origin: its instance `id`, running here, arrived at a
    /// barrier; the answer is `Passed` with the same token.
    Arrive { id: i64, token: u64 },
    /// From the origin: the barrier round of `Arrive(token)` completed
    /// (`failed`: why it failed).
    Passed { token: u64, failed: Option<String> },
    /// To the origin: its instance `id`, running here, ended: its function
    /// returned `returned`, or its process ended as `how` says.
    Ended {
        id: i64,
        returned: Option<i64>,
        how: String,
    },
    /// Target to source: no word about the copy `token` came within the
    /// target's limit after its `Ready`. The source answers `Abort` unless
    /// it committed the move (its `Commit` follows then).
    Query { token: u64 },
}

/// Node 0's instructions to the other node processes of a reconfigurable
/// program (`DMI_main`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AppMsg {
    /// Run the itergroup wrapper as thread `thread` (Fig. 8's
    /// `thread_create`); `vars` is the rescale state in global memory.
    Spawn { thread: u32, args: i64, vars: i64 },
    /// The program is over: finalise and exit.
    Exit,
    /// To a node that joined from outside: recorded as a join request
    /// (`text` says when it is brought in).
    Admitted { text: String },
    /// To a node that joined from outside: not taken after all.
    Refused { reason: String },
}

/// An owned page moving to another node when its owner leaves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MovedPage {
    pub page: PageId,
    pub version: u64,
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
    pub copyset: Vec<(NodeId, CopyMode)>,
}

/// The state one node hands to one member of the next epoch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Handed {
    /// Owner entries of pages whose home is now the receiver.
    pub entries: Vec<(PageId, NodeId)>,
    /// Pages the sender owned and the receiver is now the home of (the
    /// sender leaves).
    pub pages: Vec<MovedPage>,
    /// Mutexes whose home is now the receiver.
    pub locks: Vec<MovedLock>,
}

/// A mutex moving to its new home: whether it is held, and its waiters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MovedLock {
    pub addr: i64,
    pub held: bool,
    pub waiters: Vec<(NodeId, OpId)>,
}

/// Messages of a membership change, coordinated by node 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum EpochMsg {
    /// Start no new access; answer `Frozen` once none of yours is in flight.
    Freeze {
        epoch: u64,
    },
    Frozen {
        epoch: u64,
    },
    /// Everyone is quiet: move to `new` (sorted ids). `regions` is for the
    /// joining nodes.
    Handover {
        epoch: u64,
        old: Vec<NodeId>,
        new: Vec<NodeId>,
        regions: Vec<Region>,
    },
    /// What an old member hands to a new member (one per pair, maybe empty).
    Handed {
        epoch: u64,
        state: Handed,
    },
    /// A new member has everything; it counts what it received.
    Ready {
        epoch: u64,
        pages: u64,
        bytes: u64,
        entries: u64,
    },
    /// From each new member to each leaving node: nothing more follows.
    Fin {
        epoch: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts the writes bincode makes into it: one per element of a
    /// sequence of `u8`, one for a whole byte string.
    struct Writes(usize);

    impl std::io::Write for Writes {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += 1;
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn moved(data: Vec<u8>) -> MovedPage {
        MovedPage {
            page: PageId {
                region: 1,
                index: 2,
            },
            version: 3,
            data,
            copyset: vec![(1, CopyMode::Update)],
        }
    }

    /// A leaving node's pages (`Handed`) are byte strings like every other
    /// page's bytes: as a sequence, bincode visited each byte on both ends
    /// (docs/apps.md, "Where a leave's time went": 4-73 ms to decode the
    /// 5.9 MB one node received at Jacobi's edge 160, 0.1-8 ms after).
    #[test]
    fn moved_pages_travel_as_byte_strings() {
        let m = Msg::Epoch(EpochMsg::Handed {
            epoch: 1,
            state: Handed {
                pages: vec![moved(vec![7; 1 << 16])],
                ..Handed::default()
            },
        });
        let mut w = Writes(0);
        bincode::serialize_into(&mut w, &m).expect("encodes");
        assert!(w.0 < 64, "{} writes for one page of 64 KiB", w.0);
    }

    /// ... with the same bytes on the wire as before (bincode writes a
    /// byte string as a sequence of `u8`: length, then the bytes).
    #[test]
    fn moved_page_encoding_is_unchanged() {
        #[derive(Serialize)]
        struct AsSequence {
            page: PageId,
            version: u64,
            data: Vec<u8>,
            copyset: Vec<(NodeId, CopyMode)>,
        }
        let m = moved((0..=255).collect());
        let old = AsSequence {
            page: m.page,
            version: m.version,
            data: m.data.clone(),
            copyset: m.copyset.clone(),
        };
        let bytes = bincode::serialize(&old).expect("encodes");
        assert_eq!(bincode::serialize(&m).expect("encodes"), bytes);
        assert_eq!(
            bincode::deserialize::<MovedPage>(&bytes).expect("decodes"),
            m
        );
    }
}
