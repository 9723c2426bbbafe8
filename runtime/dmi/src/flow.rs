// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Back-pressure between a node's callers, its engine and its connections.
//!
//! Each connection has a send queue ([`SendQ`]) of encoded frames that its
//! writer task empties into the socket; the bytes queued on all of a
//! node's connections together are bounded by `DMI_SEND_QUEUE` (bytes,
//! default [`DEFAULT_SEND_QUEUE`]). The bound is kept where it cannot
//! deadlock:
//!
//! - The engine never waits on a queue: whatever it produces (answers,
//!   forwards, the requests of a call it started) is queued at once, so it
//!   always goes on handling what arrives.
//! - A caller waits instead ([`Flow::admit`]): a new call (a program's
//!   `DMI_read`/`DMI_write`/..., synchronous or not) is submitted only
//!   while the queues, together with the calls submitted but not yet
//!   started by the engine (their bytes are reserved until then), hold
//!   less than the bound. A fast sender therefore waits for its queue to
//!   drain instead of growing memory.
//! - Every connection's reader takes the bytes of each message it hands the
//!   engine from a node-wide inbound budget of the same size, given back
//!   once the engine handled the message; a reader out of budget stops
//!   reading (TCP then holds the sender's writer back). As the engine never
//!   waits on anything a peer must do, the budget always comes back: two
//!   nodes that flood each other both drain.
//!
//! So a queue holds at most the bound, plus what calls already admitted
//! produce (one call's requests) and the engine's answers to messages
//! within the inbound budget. [`FlowStats`] records the most that was ever
//! queued, for the tests and `DMI_FLOW_STATS`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};

use crate::error::DmiError;
use crate::transport::{encode, Frame, NetEvent};

/// The default bound on a node's queued bytes (`DMI_SEND_QUEUE`).
pub const DEFAULT_SEND_QUEUE: usize = 8 << 20;
/// The smallest bound accepted (a few pages' worth of messages).
pub const MIN_SEND_QUEUE: usize = 4096;
/// The largest bound accepted (the inbound budget counts in `u32`).
pub const MAX_SEND_QUEUE: usize = 1 << 31;

/// The bytes of an inbound message the engine has not handled yet; dropping
/// it gives them back to the readers.
pub(crate) type Credit = OwnedSemaphorePermit;

/// A node's flow control (see the module docs).
pub struct Flow {
    limit: usize,
    /// Bytes in every send queue of the node, not yet written to a socket.
    queued: AtomicUsize,
    /// Bytes of calls admitted but not yet started by the engine.
    reserved: AtomicUsize,
    max_queued: AtomicUsize,
    max_peer: AtomicUsize,
    waits: AtomicU64,
    room: Mutex<()>,
    drained: Condvar,
    inbound: Arc<Semaphore>,
}

/// What a node's flow control saw (see [`crate::Dmi::flow_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowStats {
    /// The bound on queued bytes (`DMI_SEND_QUEUE`).
    pub limit: usize,
    /// The most bytes queued at once on all connections together.
    pub max_queued: usize,
    /// The most bytes queued at once on one connection.
    pub max_peer_queued: usize,
    /// How many calls waited for the queues to drain.
    pub waits: u64,
}

impl Flow {
    /// A flow control bounding the queues at `limit` bytes.
    pub fn new(limit: usize) -> Arc<Flow> {
        let limit = limit.clamp(MIN_SEND_QUEUE, MAX_SEND_QUEUE);
        Arc::new(Flow {
            limit,
            queued: AtomicUsize::new(0),
            reserved: AtomicUsize::new(0),
            max_queued: AtomicUsize::new(0),
            max_peer: AtomicUsize::new(0),
            waits: AtomicU64::new(0),
            room: Mutex::new(()),
            drained: Condvar::new(),
            inbound: Arc::new(Semaphore::new(limit)),
        })
    }

    /// From `DMI_SEND_QUEUE` (bytes; a `K`, `M` or `G` suffix multiplies
    /// by 1024, 1024², 1024³), or the default.
    pub fn from_env() -> Result<Arc<Flow>, DmiError> {
        match std::env::var("DMI_SEND_QUEUE") {
            Ok(v) => Ok(Flow::new(parse_size(&v)?)),
            Err(_) => Ok(Flow::new(DEFAULT_SEND_QUEUE)),
        }
    }

    /// Waits (blocking the calling thread, not the engine) until the
    /// node's send queues and the calls on their way to the engine hold less
    /// than the bound, then reserves `bytes` for the call until the engine
    /// started it (drops the [`Reserve`]).
    pub fn admit(self: &Arc<Flow>, bytes: usize) -> Reserve {
        if self.pending() >= self.limit {
            self.waits.fetch_add(1, Ordering::Relaxed);
            let mut g = self.room.lock().unwrap_or_else(|e| e.into_inner());
            while self.pending() >= self.limit {
                // The timeout only bounds a missed wake-up's cost.
                g = self
                    .drained
                    .wait_timeout(g, Duration::from_millis(50))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        self.reserved.fetch_add(bytes, Ordering::AcqRel);
        Reserve {
            flow: self.clone(),
            bytes,
        }
    }

    fn pending(&self) -> usize {
        self.queued.load(Ordering::Acquire) + self.reserved.load(Ordering::Acquire)
    }

    /// `n` bytes left the queues or the reservations.
    fn freed(&self, from: &AtomicUsize, n: usize) {
        if n == 0 {
            return;
        }
        let before = self.pending();
        from.fetch_sub(n, Ordering::AcqRel);
        if before >= self.limit && before - n < self.limit {
            let _g = self.room.lock().unwrap_or_else(|e| e.into_inner());
            self.drained.notify_all();
        }
    }

    pub fn stats(&self) -> FlowStats {
        FlowStats {
            limit: self.limit,
            max_queued: self.max_queued.load(Ordering::Relaxed),
            max_peer_queued: self.max_peer.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
        }
    }

    fn queue(&self, n: usize, peer_now: usize) {
        let now = self.queued.fetch_add(n, Ordering::AcqRel) + n;
        self.max_queued.fetch_max(now, Ordering::Relaxed);
        self.max_peer.fetch_max(peer_now, Ordering::Relaxed);
    }

    fn written(&self, n: usize) {
        self.freed(&self.queued, n);
    }

    /// Takes `n` bytes of the inbound budget (waits while the engine has
    /// that much unhandled); a message larger than the bound takes it all.
    pub(crate) async fn credit(&self, n: usize) -> Option<Credit> {
        let n = n.clamp(1, self.limit) as u32;
        self.inbound.clone().acquire_many_owned(n).await.ok()
    }
}

/// A call's bytes, reserved from its admission until the engine started it
/// (and queued what it sends).
pub struct Reserve {
    flow: Arc<Flow>,
    bytes: usize,
}

impl Drop for Reserve {
    fn drop(&mut self) {
        self.flow.freed(&self.flow.reserved, self.bytes);
    }
}

/// `DMI_SEND_QUEUE`'s value: bytes, with an optional K/M/G suffix.
pub fn parse_size(v: &str) -> Result<usize, DmiError> {
    let t = v.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1usize << 10),
        Some((i, 'M' | 'm')) => (&t[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    let bad = || {
        DmiError::Setup(format!(
            "DMI_SEND_QUEUE={v:?} is not valid (the bytes a node queues for its peers \
             before callers wait: a number from {MIN_SEND_QUEUE} to {MAX_SEND_QUEUE}, \
             optionally with K, M or G)"
        ))
    };
    let n = num
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(bad)?;
    if !(MIN_SEND_QUEUE..=MAX_SEND_QUEUE).contains(&n) {
        return Err(bad());
    }
    Ok(n)
}

/// What a connection's reader hands the engine: events, each message with
/// its inbound credit.
#[derive(Clone)]
pub(crate) struct Wire {
    events: mpsc::UnboundedSender<(NetEvent, Option<Credit>)>,
    pub(crate) flow: Arc<Flow>,
}

impl Wire {
    pub(crate) fn new(
        events: mpsc::UnboundedSender<(NetEvent, Option<Credit>)>,
        flow: Arc<Flow>,
    ) -> Wire {
        Wire { events, flow }
    }

    /// Hands the engine an event; Err when the engine is gone.
    pub(crate) fn send(&self, ev: NetEvent, credit: Option<Credit>) -> Result<(), ()> {
        self.events.send((ev, credit)).map_err(drop)
    }
}

struct Inner {
    /// Encoded frames, and whether each is the connection's last (a
    /// goodbye or an abort).
    frames: VecDeque<(Bytes, bool)>,
    bytes: usize,
    closed: bool,
}

/// One connection's send queue (see the module docs): the engine pushes
/// without waiting, the connection's writer task takes.
#[derive(Clone)]
pub(crate) struct SendQ {
    inner: Arc<Mutex<Inner>>,
    more: Arc<Notify>,
    flow: Arc<Flow>,
}

impl SendQ {
    pub(crate) fn new(flow: Arc<Flow>) -> SendQ {
        SendQ {
            inner: Arc::new(Mutex::new(Inner {
                frames: VecDeque::new(),
                bytes: 0,
                closed: false,
            })),
            more: Arc::new(Notify::new()),
            flow,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `f` for the writer; never waits. Err once the connection's
    /// writer ended (the frame is dropped).
    pub(crate) fn send(&self, f: Frame) -> Result<(), Frame> {
        let last = matches!(f, Frame::Bye | Frame::Abort { .. });
        let b = encode(&f);
        let n = b.len();
        {
            let mut q = self.lock();
            if q.closed {
                return Err(f);
            }
            q.frames.push_back((b, last));
            q.bytes += n;
            self.flow.queue(n, q.bytes);
        }
        self.more.notify_one();
        Ok(())
    }

    /// The writer: moves every queued frame into `out` (with the number of
    /// bytes and whether the last one ends the connection); waits for one
    /// when the queue is empty, or returns empty after `idle`.
    pub(crate) async fn take(&self, out: &mut Vec<(Bytes, bool)>, idle: Duration) -> usize {
        loop {
            {
                let mut q = self.lock();
                if !q.frames.is_empty() {
                    let n: usize = q.frames.iter().map(|(b, _)| b.len()).sum();
                    out.extend(q.frames.drain(..));
                    return n;
                }
            }
            if tokio::time::timeout(idle, self.more.notified())
                .await
                .is_err()
            {
                return 0;
            }
        }
    }

    /// The writer wrote `n` bytes it took into the socket. (Taken bytes
    /// stay counted until then.)
    pub(crate) fn written(&self, n: usize) {
        let mut q = self.lock();
        let n = n.min(q.bytes);
        q.bytes -= n;
        drop(q);
        self.flow.written(n);
    }

    /// The connection is over (its writer ended, or its peer is dead):
    /// drops what is still queued or taken but not written, and refuses
    /// what comes later.
    pub(crate) fn close(&self) {
        let mut q = self.lock();
        let n = q.bytes;
        q.closed = true;
        q.frames.clear();
        q.bytes = 0;
        drop(q);
        self.flow.written(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_queue_sizes_parse_and_bad_ones_are_named() {
        assert_eq!(parse_size("65536").unwrap(), 65536);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size(" 8M ").unwrap(), 8 << 20);
        for bad in ["", "x", "12Q", "-1", "100", "3G"] {
            let e = parse_size(bad).unwrap_err().to_string();
            assert!(
                e.contains("DMI_SEND_QUEUE") && e.contains(bad.trim()),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn queued_bytes_are_counted_until_written_and_freed_on_close() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let flow = Flow::new(MIN_SEND_QUEUE);
            let q = SendQ::new(flow.clone());
            for _ in 0..3 {
                q.send(Frame::Heartbeat).unwrap();
            }
            let one = encode(&Frame::Heartbeat).len();
            assert_eq!(flow.queued.load(Ordering::Relaxed), 3 * one);
            let mut out = Vec::new();
            let n = q.take(&mut out, Duration::from_secs(1)).await;
            assert_eq!((n, out.len()), (3 * one, 3));
            // Taken but not written: still counted.
            assert_eq!(flow.queued.load(Ordering::Relaxed), 3 * one);
            q.written(n);
            assert_eq!(flow.queued.load(Ordering::Relaxed), 0);
            q.send(Frame::Heartbeat).unwrap();
            q.close();
            assert_eq!(flow.queued.load(Ordering::Relaxed), 0);
            assert!(q.send(Frame::Heartbeat).is_err());
            assert_eq!(flow.stats().max_queued, 3 * one);
        });
    }
}
