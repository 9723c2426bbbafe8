// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Connections between nodes: one TCP connection per pair (the higher rank
//! connects to the lower), length-delimited frames of bincode-encoded
//! [`Frame`]s, a heartbeat every [`HEARTBEAT`], and a peer declared dead
//! when nothing arrived for [`DEAD_AFTER`] or its connection closed without
//! a goodbye. The accepting side of every connection challenges the other
//! (`auth.rs`); after start-up each node keeps accepting, for nodes that
//! join the running program (`join.rs`).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use crate::addr::NodeId;
use crate::auth::{self, Nonce};
use crate::error::DmiError;
use crate::flow::{SendQ, Wire};
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
    /// The accepting side's challenge, the first frame on a connection.
    Challenge {
        nonce: Nonce,
        /// The accepting node's [`PROTOCOL`].
        proto: u32,
    },
    /// A node of the run: its rank and address, and the challenge's answer.
    Hello {
        rank: NodeId,
        addr: SocketAddr,
        mac: Vec<u8>,
        proto: u32,
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
    /// A node from outside asks to join (`join.rs`); `addr` is where it
    /// listens.
    Join {
        addr: SocketAddr,
        mac: Vec<u8>,
        proto: u32,
    },
    /// Node 0 to a joiner: its rank and the run.
    Welcome(crate::join::Welcome),
    /// A join or hello refused, and why.
    Refused {
        reason: String,
    },
    /// A node other than node 0 was asked for a join: ask node 0 there.
    Redirect {
        to: SocketAddr,
    },
    /// A joiner to node 0: connected to every node of the run.
    Connected,
}

/// The version of the messages nodes exchange ([`Frame`], `msg.rs`): both
/// ends of a connection check it at the handshake, and refuse a peer of
/// another version with a message naming both. Changed with any message.
/// 2: `ReqKind::GetMany` (a read's ranges of one page in one request) and
/// `Msg::Replies` (the answers of one step to one node in one message).
/// 3: `InstMsg::Image.origin`, `At`, `Arrive`, `Passed`, `Ended` (instances
/// made by `DMI_create` moving between nodes), `Msg::BarrierPoison` and
/// `DMI_finalize`'s barrier round `FINAL_BARRIER`. (`MovedPage::data` as
/// a byte string changed no byte on the wire: `msg.rs` tests it.)
/// 4: `InstMsg::Moving` and `InstMsg::Lost` (the origin knows where a
/// moved instance is from the commit on, and that it is lost if its source
/// failed before the commit reached the target).
/// 5: `InstMsg::Moving.token` and `InstMsg::MovingSeen` (the source commits
/// only once the origin recorded the move).
/// 6: `InstMsg::Query` (a target that waited past its limit for the
/// source's word asks the source instead of ending its copy alone).
pub const PROTOCOL: u32 = 6;

/// Why a peer speaking protocol `theirs` is refused.
pub(crate) fn wrong_protocol(theirs: u32) -> String {
    format!(
        "DMI protocol version {theirs} where this node speaks {PROTOCOL} \
         (every node must run the same DMI build)"
    )
}

/// What the connections report to the node's engine.
#[derive(Debug)]
pub enum NetEvent {
    Msg(NodeId, Msg),
    Bye(NodeId),
    /// The peer (`.0`) reported node `.1`'s failure (`Frame::Abort`) and
    /// stops talking to this node: comes before its `Bye`.
    Silent(NodeId, NodeId),
    Dead(NodeId, String),
    /// A joiner is connected to every node (`Frame::Connected`).
    Connected(NodeId),
}

/// A connection accepted after start-up (`accept_late`).
pub enum Late {
    /// A node that joined the run connects to this one.
    Peer {
        rank: NodeId,
        addr: SocketAddr,
        conn: Conn,
    },
    /// A node from outside asks node 0 to join.
    Join { addr: SocketAddr, conn: Conn },
}

pub(crate) type Conn = Framed<TcpStream, LengthDelimitedCodec>;

pub(crate) fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(1 << 31)
        .new_codec()
}

pub(crate) fn encode(f: &Frame) -> Bytes {
    Bytes::from(bincode::serialize(f).unwrap_or_default())
}

/// The request a hello answers the challenge for.
pub(crate) fn hello_what(rank: NodeId, addr: SocketAddr) -> Vec<u8> {
    format!("hello {rank} {addr}").into_bytes()
}

/// The next frame of `f` before `deadline` (None: closed, timed out or
/// undecodable).
pub(crate) async fn next_frame(f: &mut Conn, deadline: tokio::time::Instant) -> Option<Frame> {
    match tokio::time::timeout_at(deadline, f.next()).await {
        Ok(Some(Ok(b))) => bincode::deserialize::<Frame>(&b).ok(),
        _ => None,
    }
}

/// Connects to node `j` at `addr` as node `me` (listening at `my_addr`):
/// answers its challenge with a hello. A refusal is an error naming why.
pub(crate) async fn dial(
    me: NodeId,
    my_addr: SocketAddr,
    j: NodeId,
    addr: SocketAddr,
    secret: &[u8],
    s: TcpStream,
    deadline: tokio::time::Instant,
) -> Result<Conn, DmiError> {
    let mut f = Framed::new(s, codec());
    let nonce = match next_frame(&mut f, deadline).await {
        Some(Frame::Challenge { nonce, proto }) if proto == PROTOCOL => nonce,
        Some(Frame::Challenge { proto, .. }) => {
            return Err(DmiError::Setup(format!(
                "node {me}: node {j} at {addr} speaks {}",
                wrong_protocol(proto)
            )))
        }
        _ => {
            return Err(DmiError::Setup(format!(
                "node {me}: node {j} at {addr} sent no challenge"
            )))
        }
    };
    let mac = auth::answer(secret, &nonce, &hello_what(me, my_addr));
    f.send(encode(&Frame::Hello {
        rank: me,
        addr: my_addr,
        mac,
        proto: PROTOCOL,
    }))
    .await
    .map_err(|e| DmiError::Setup(format!("node {me}: hello to node {j}: {e}")))?;
    Ok(f)
}

/// Accepts one connection's start: sends the challenge and returns it with
/// the first frame.
async fn challenged(s: TcpStream, deadline: tokio::time::Instant) -> Option<(Conn, Nonce, Frame)> {
    let mut f = Framed::new(s, codec());
    let nonce = auth::nonce();
    f.send(encode(&Frame::Challenge {
        nonce,
        proto: PROTOCOL,
    }))
    .await
    .ok()?;
    let first = next_frame(&mut f, deadline).await?;
    Some((f, nonce, first))
}

/// Refuses a connection with a reason (best effort, off the caller's path).
pub(crate) fn refuse(mut f: Conn, reason: String) {
    tokio::spawn(async move {
        let _ = f.send(encode(&Frame::Refused { reason })).await;
    });
}

/// What a node answers a hello or join with a wrong answer.
pub const WRONG_SECRET: &str =
    "wrong secret (the answer to the challenge does not match the run's secret file)";

/// Connects to every peer; returns a sender per peer (index = rank; none
/// for this node).
pub(crate) async fn connect_all(
    me: NodeId,
    peers: &[SocketAddr],
    listener: &TcpListener,
    secret: &[u8],
    wire: Wire,
) -> Result<Vec<Option<SendQ>>, DmiError> {
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
        let f = dial(
            me,
            peers[me as usize],
            j as NodeId,
            *addr,
            secret,
            s,
            deadline,
        )
        .await?;
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
        let Some((f, nonce, first)) = challenged(s, deadline).await else {
            continue;
        };
        let rank = match first {
            Frame::Hello {
                rank, addr, mac, ..
            } if !auth::check(secret, &nonce, &hello_what(rank, addr), &mac) => {
                report(&format!(
                    "dmi: node {me}: refused a node claiming rank {rank} from {addr}: {WRONG_SECRET}"
                ));
                refuse(f, WRONG_SECRET.into());
                continue;
            }
            Frame::Hello {
                rank, addr, proto, ..
            } if proto != PROTOCOL => {
                let why = wrong_protocol(proto);
                report(&format!(
                    "dmi: node {me}: refused node {rank} from {addr}: {why}"
                ));
                refuse(f, why);
                continue;
            }
            Frame::Hello { rank, .. } if (rank as usize) < n && rank > me => rank,
            Frame::Join { .. } => {
                refuse(f, "the run is still starting; try again".into());
                continue;
            }
            _ => continue,
        };
        if conns[rank as usize].is_none() {
            conns[rank as usize] = Some(f);
            missing -= 1;
        }
    }
    let mut senders = Vec::new();
    for (j, c) in conns.into_iter().enumerate() {
        senders.push(c.map(|s| spawn_peer(j as NodeId, s, wire.clone())));
    }
    Ok(senders)
}

/// After start-up: accepts connections of nodes that join the run, and
/// hands each authenticated one to `out`. A node other than node 0
/// redirects a joiner to node 0 (`zero`).
pub fn accept_late(
    me: NodeId,
    listener: TcpListener,
    secret: Vec<u8>,
    zero: Option<SocketAddr>,
    out: mpsc::UnboundedSender<Late>,
) {
    let secret = std::sync::Arc::new(secret);
    tokio::spawn(async move {
        while let Ok((s, from)) = listener.accept().await {
            let (secret, out) = (secret.clone(), out.clone());
            tokio::spawn(async move {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                let Some((f, nonce, first)) = challenged(s, deadline).await else {
                    return;
                };
                let late = match first {
                    Frame::Hello { proto, .. } | Frame::Join { proto, .. } if proto != PROTOCOL => {
                        let why = wrong_protocol(proto);
                        report(&format!(
                            "dmi: node {me}: refused a connection from {from}: {why}"
                        ));
                        refuse(f, why);
                        return;
                    }
                    Frame::Hello {
                        rank, addr, mac, ..
                    } if auth::check(&secret, &nonce, &hello_what(rank, addr), &mac) => {
                        Late::Peer {
                            rank,
                            addr,
                            conn: f,
                        }
                    }
                    Frame::Join { addr, mac, .. }
                        if auth::check(&secret, &nonce, &crate::join::join_what(addr), &mac) =>
                    {
                        match zero {
                            Some(to) if me != 0 => {
                                let mut f = f;
                                let _ = f.send(encode(&Frame::Redirect { to })).await;
                                return;
                            }
                            _ => Late::Join { addr, conn: f },
                        }
                    }
                    Frame::Hello { .. } | Frame::Join { .. } => {
                        report(&format!(
                            "dmi: node {me}: refused a connection from {from}: {WRONG_SECRET}"
                        ));
                        refuse(f, WRONG_SECRET.into());
                        return;
                    }
                    _ => return,
                };
                let _ = out.send(late);
            });
        }
    });
}

/// A peer that said goodbye may close its end while a heartbeat is on its
/// way: the write must fail with EPIPE, not kill the process (a C program
/// keeps SIGPIPE's default action). Only a default disposition is changed.
pub(crate) fn ignore_sigpipe() {
    // SAFETY: sigaction only reads and writes the two local structs; the
    // handler is replaced only when it was the default one.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_DFL
        {
            let mut ign: libc::sigaction = std::mem::zeroed();
            ign.sa_sigaction = libc::SIG_IGN;
            libc::sigaction(libc::SIGPIPE, &ign, std::ptr::null_mut());
        }
    }
}

/// Writes one line to stderr with a single write, so that lines of several
/// nodes sharing a terminal or pipe do not interleave.
pub(crate) fn report(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// Starts the writer and reader of one connection; returns its send queue
/// (`flow.rs`: the engine queues without waiting, the reader takes inbound
/// credit and never waits on the engine).
pub(crate) fn spawn_peer(peer: NodeId, f: Conn, wire: Wire) -> SendQ {
    let _ = f.get_ref().set_nodelay(true);
    let (mut sink, mut stream) = f.split();
    let q = SendQ::new(wire.flow.clone());
    let wq = q.clone();
    tokio::spawn(async move {
        let mut batch = Vec::new();
        loop {
            // Every frame that is ready goes out in one flush: a group
            // access answered range by range becomes one write, not one
            // system call per range. An idle connection says it is alive.
            let n = wq.take(&mut batch, HEARTBEAT).await;
            if batch.is_empty() {
                batch.push((encode(&Frame::Heartbeat), false));
            }
            let mut end = false;
            for (b, last) in batch.drain(..) {
                if sink.feed(b).await.is_err() || last {
                    end = true;
                    break;
                }
            }
            if sink.flush().await.is_err() || end {
                break;
            }
            wq.written(n);
        }
        wq.close();
    });
    let rq = q.clone();
    tokio::spawn(async move {
        loop {
            let (ev, credit) = match tokio::time::timeout(DEAD_AFTER, stream.next()).await {
                Ok(Some(Ok(b))) => match bincode::deserialize::<Frame>(&b) {
                    // Waits while the engine has the budget's worth of
                    // messages unhandled (it always handles them).
                    Ok(Frame::Msg(m)) => (NetEvent::Msg(peer, m), wire.flow.credit(b.len()).await),
                    Ok(Frame::Connected) => (NetEvent::Connected(peer), None),
                    Ok(Frame::Refused { reason }) => (
                        NetEvent::Dead(peer, format!("it refused this node: {reason}")),
                        None,
                    ),
                    Ok(Frame::Bye) => {
                        let _ = wire.send(NetEvent::Bye(peer), None);
                        return;
                    }
                    Ok(Frame::Abort { node, reason }) => {
                        let _ = wire.send(NetEvent::Silent(peer, node), None);
                        let _ = wire.send(NetEvent::Bye(peer), None);
                        let _ = wire.send(
                            NetEvent::Dead(node, format!("{reason} (reported by node {peer})")),
                            None,
                        );
                        return;
                    }
                    Ok(_) => continue,
                    Err(e) => (
                        NetEvent::Dead(peer, format!("undecodable frame: {e}")),
                        None,
                    ),
                },
                Ok(Some(Err(e))) => (NetEvent::Dead(peer, format!("connection error: {e}")), None),
                Ok(None) => (
                    NetEvent::Dead(
                        peer,
                        "connection closed without a goodbye (process died?)".into(),
                    ),
                    None,
                ),
                Err(_) => (
                    NetEvent::Dead(
                        peer,
                        format!("no message or heartbeat for {} s", DEAD_AFTER.as_secs()),
                    ),
                    None,
                ),
            };
            let dead = matches!(ev, NetEvent::Dead(..));
            if dead {
                // Nothing more will be written to a dead peer: its queue no
                // longer counts against the bound.
                rq.close();
            }
            if wire.send(ev, credit).is_err() || dead {
                return;
            }
        }
    });
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer of another protocol version is refused at the handshake with
    /// a message naming both versions, on the dialing and the accepting
    /// side.
    #[test]
    fn a_peer_of_another_protocol_version_is_refused() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            let want = format!("version 1 where this node speaks {PROTOCOL}");
            // Dialing a node of version 1.
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let at = l.local_addr().unwrap();
            let old = tokio::spawn(async move {
                let (s, _) = l.accept().await.unwrap();
                let mut f = Framed::new(s, codec());
                let nonce = auth::nonce();
                let _ = f.send(encode(&Frame::Challenge { nonce, proto: 1 })).await;
                f
            });
            let s = TcpStream::connect(at).await.unwrap();
            let e = dial(1, at, 0, at, b"", s, deadline).await.err();
            let e = e
                .expect("a challenge of version 1 was accepted")
                .to_string();
            assert!(e.contains(&want), "{e}");
            drop(old.await);
            // Accepting a hello of version 1.
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let at = l.local_addr().unwrap();
            let (tx, _rx) = mpsc::unbounded_channel();
            accept_late(0, l, Vec::new(), None, tx);
            let mut f = Framed::new(TcpStream::connect(at).await.unwrap(), codec());
            let Some(Frame::Challenge { nonce, proto }) = next_frame(&mut f, deadline).await else {
                panic!("no challenge");
            };
            assert_eq!(proto, PROTOCOL);
            let mac = auth::answer(b"", &nonce, &hello_what(1, at));
            let hello = Frame::Hello {
                rank: 1,
                addr: at,
                mac,
                proto: 1,
            };
            f.send(encode(&hello)).await.unwrap();
            match next_frame(&mut f, deadline).await {
                Some(Frame::Refused { reason }) => assert!(reason.contains(&want), "{reason}"),
                other => panic!("a hello of version 1 was not refused: {other:?}"),
            }
        });
    }
}
