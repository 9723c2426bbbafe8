// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Connections between nodes: one TCP connection per pair (the higher rank
//! connects to the lower), length-delimited frames of bincode-encoded
//! [`Frame`]s, a heartbeat every [`HEARTBEAT`], and a peer declared dead
//! when nothing arrived for [`DEAD_AFTER`] or its connection closed without
//! a goodbye.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use crate::addr::NodeId;
use crate::error::DmiError;
use crate::msg::Msg;

/// How often an idle connection says it is alive.
pub const HEARTBEAT: Duration = Duration::from_millis(200);
/// Silence after which a peer counts as dead.
pub const DEAD_AFTER: Duration = Duration::from_secs(3);
/// How long start-up waits for every peer.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// What travels on a connection.
#[derive(Debug, Serialize, Deserialize)]
pub enum Frame {
    Hello {
        rank: NodeId,
    },
    Heartbeat,
    /// The sender finalised; the connection may close now.
    Bye,
    /// The sender stops because `node` failed (so every survivor names the
    /// node that failed, not the one that stopped first).
    Abort {
        node: NodeId,
        reason: String,
    },
    Msg(Msg),
}

/// What the connections report to the node's engine.
#[derive(Debug)]
pub enum NetEvent {
    Msg(NodeId, Msg),
    Bye(NodeId),
    Dead(NodeId, String),
}

type Conn = Framed<TcpStream, LengthDelimitedCodec>;

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(1 << 31)
        .new_codec()
}

fn encode(f: &Frame) -> Bytes {
    Bytes::from(bincode::serialize(f).unwrap_or_default())
}

/// Connects to every peer; returns a sender per peer (index = rank; none
/// for this node).
pub async fn connect_all(
    me: NodeId,
    peers: &[SocketAddr],
    listener: TcpListener,
    events: mpsc::UnboundedSender<NetEvent>,
) -> Result<Vec<Option<mpsc::UnboundedSender<Frame>>>, DmiError> {
    let n = peers.len();
    // Keep each Framed: its read buffer may already hold frames that came
    // right behind the hello.
    let mut conns: Vec<Option<Conn>> = (0..n).map(|_| None).collect();
    let deadline = tokio::time::Instant::now() + CONNECT_TIMEOUT;
    for (j, addr) in peers.iter().enumerate().take(me as usize) {
        let s = loop {
            match TcpStream::connect(addr).await {
                Ok(s) => break s,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(DmiError::Setup(format!(
                        "node {me}: connecting to node {j} at {addr}: {e}"
                    )));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        let mut f = Framed::new(s, codec());
        f.send(encode(&Frame::Hello { rank: me }))
            .await
            .map_err(|e| DmiError::Setup(format!("node {me}: hello to node {j}: {e}")))?;
        conns[j] = Some(f);
    }
    let mut missing = n - 1 - me as usize;
    while missing > 0 {
        let (s, _) = tokio::time::timeout_at(deadline, listener.accept())
            .await
            .map_err(|_| {
                DmiError::Setup(format!(
                    "node {me}: {missing} higher-ranked node(s) never connected"
                ))
            })?
            .map_err(|e| DmiError::Setup(format!("node {me}: accept: {e}")))?;
        let mut f = Framed::new(s, codec());
        let hello = tokio::time::timeout_at(deadline, f.next()).await;
        let rank = match hello {
            Ok(Some(Ok(b))) => match bincode::deserialize::<Frame>(&b) {
                Ok(Frame::Hello { rank }) if (rank as usize) < n && rank > me => rank,
                _ => continue,
            },
            _ => continue,
        };
        if conns[rank as usize].is_none() {
            conns[rank as usize] = Some(f);
            missing -= 1;
        }
    }
    let mut senders = Vec::new();
    for (j, c) in conns.into_iter().enumerate() {
        senders.push(c.map(|s| spawn_peer(j as NodeId, s, events.clone())));
    }
    Ok(senders)
}

/// Starts the writer and reader of one connection.
fn spawn_peer(
    peer: NodeId,
    f: Conn,
    events: mpsc::UnboundedSender<NetEvent>,
) -> mpsc::UnboundedSender<Frame> {
    let _ = f.get_ref().set_nodelay(true);
    let (mut sink, mut stream) = f.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Frame>();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(HEARTBEAT);
        loop {
            let frame = tokio::select! {
                f = rx.recv() => f,
                _ = tick.tick() => Some(Frame::Heartbeat),
            };
            let Some(mut frame) = frame else { break };
            // Queue every frame that is ready, then flush once: a group
            // access answered range by range becomes one write, not one
            // system call per range.
            let mut end = false;
            loop {
                let bye = matches!(frame, Frame::Bye | Frame::Abort { .. });
                if sink.feed(encode(&frame)).await.is_err() || bye {
                    end = true;
                    break;
                }
                match rx.try_recv() {
                    Ok(f) => frame = f,
                    Err(_) => break,
                }
            }
            if sink.flush().await.is_err() || end {
                break;
            }
        }
    });
    tokio::spawn(async move {
        loop {
            let ev = match tokio::time::timeout(DEAD_AFTER, stream.next()).await {
                Ok(Some(Ok(b))) => match bincode::deserialize::<Frame>(&b) {
                    Ok(Frame::Msg(m)) => NetEvent::Msg(peer, m),
                    Ok(Frame::Heartbeat | Frame::Hello { .. }) => continue,
                    Ok(Frame::Bye) => {
                        let _ = events.send(NetEvent::Bye(peer));
                        return;
                    }
                    Ok(Frame::Abort { node, reason }) => {
                        let _ = events.send(NetEvent::Bye(peer));
                        let _ = events.send(NetEvent::Dead(
                            node,
                            format!("{reason} (reported by node {peer})"),
                        ));
                        return;
                    }
                    Err(e) => NetEvent::Dead(peer, format!("undecodable frame: {e}")),
                },
                Ok(Some(Err(e))) => NetEvent::Dead(peer, format!("connection error: {e}")),
                Ok(None) => NetEvent::Dead(
                    peer,
                    "connection closed without a goodbye (process died?)".into(),
                ),
                Err(_) => NetEvent::Dead(
                    peer,
                    format!("no message or heartbeat for {} s", DEAD_AFTER.as_secs()),
                ),
            };
            let dead = matches!(ev, NetEvent::Dead(..));
            if events.send(ev).is_err() || dead {
                return;
            }
        }
    });
    tx
}
