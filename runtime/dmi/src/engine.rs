// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The node's event loop (the engine): a tokio task on the thread
//! [`crate::runtime::Dmi::start`] makes, owning the protocol core
//! ([`Node`]) and fed by the connections and the API's calls
//! ([`Event`]); it sends what the core produces and answers finished calls.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::addr::NodeId;
use crate::epoch::Phase;
use crate::error::DmiError;
use crate::flow::{Flow, SendQ, Wire};
use crate::join::Accepting;
use crate::msg::{InstMsg, Msg};
use crate::node::{CallId, Effects, Node, Outcome};
use crate::rmw::RmwTable;
use crate::runtime::{Addrs, AppEvent, Config, Event, Started, PEER_FAILED_EXIT};
use crate::transport::{accept_late, report, Frame, NetEvent};

/// The engine's channels.
pub(crate) struct Io {
    pub(crate) tx: mpsc::UnboundedSender<Event>,
    pub(crate) rx: mpsc::UnboundedReceiver<Event>,
    /// The node's start, and the address of its pool's index.
    pub(crate) ready: std::sync::mpsc::Sender<Result<(Started, usize), DmiError>>,
    pub(crate) app: std::sync::mpsc::Sender<AppEvent>,
    pub(crate) addrs: Addrs,
    pub(crate) joined: std::sync::mpsc::Sender<NodeId>,
    /// The node's back-pressure (`flow.rs`).
    pub(crate) flow: Arc<Flow>,
}

/// The node's event loop: owns the protocol core.
pub(crate) async fn engine(mut cfg: Config, rmw: Arc<RmwTable>, io: Io) {
    let Io {
        tx,
        mut rx,
        ready,
        app,
        addrs,
        joined,
        flow,
    } = io;
    let (ntx, mut nrx) = mpsc::unbounded_channel();
    let ntx = Wire::new(ntx, flow);
    let (st, listener, mut peers) = match crate::join::connect_node(&cfg, &addrs, &ntx).await {
        Ok(c) => c,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    drop(cfg.listener.take());
    let (me, size) = (st.rank, st.size);
    let zero = addrs.lock().unwrap_or_else(|e| e.into_inner())[0];
    let (ltx, mut lrx) = mpsc::unbounded_channel();
    accept_late(me, listener, cfg.secret.clone(), zero, ltx);
    let tx_late = tx.clone();
    tokio::spawn(async move {
        while let Some(l) = lrx.recv().await {
            if tx_late.send(Event::Late(l)).is_err() {
                return;
            }
        }
    });
    tokio::spawn(async move {
        while let Some((ev, credit)) = nrx.recv().await {
            if tx.send(Event::Net(ev, credit)).is_err() {
                return;
            }
        }
    });
    let store = crate::pool::Store::for_node();
    let _ = ready.send(Ok((st, store.index_addr())));
    let n = size;
    let mut node = match cfg.members {
        Some(m) if me >= m => Node::spare(me, rmw),
        Some(m) => Node::with_first(me, m, rmw),
        None => Node::new(me, n, rmw),
    };
    node.set_pool_pages(cfg.pool_pages);
    node.set_store(store);
    let mut left = false;
    let mut waiting: HashMap<CallId, oneshot::Sender<Outcome>> = HashMap::new();
    let mut byes: HashSet<NodeId> = HashSet::new();
    let mut finalize: Option<oneshot::Sender<()>> = None;
    let mut accepting = match cfg.accept_joins && me == 0 {
        true => Accepting::NotYet,
        false => Accepting::Never,
    };
    // Joiners welcomed but not yet connected to every node.
    let mut pending: HashSet<NodeId> = HashSet::new();
    let mut early: HashMap<NodeId, Vec<Msg>> = HashMap::new();
    // SIGUSR1 prints the protocol state (pages, owners, pending accesses).
    let mut usr1 =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1()).ok();
    loop {
        let ev = tokio::select! {
            ev = rx.recv() => ev,
            Some(()) = async { match usr1.as_mut() { Some(s) => s.recv().await, None => None } } => {
                report(&node.debug_state());
                continue;
            }
        };
        let Some(mut ev) = ev else { break };
        // A message's inbound credit goes back to the readers once it is
        // handled, at the end of this turn (`flow.rs`).
        let _credit = match &mut ev {
            Event::Net(_, c) => c.take(),
            _ => None,
        };
        // A call's reservation ends once what it sends is queued.
        let _reserved = match &mut ev {
            Event::Call(_, _, r) => r.take(),
            _ => None,
        };
        let mut fx = Effects::default();
        match ev {
            Event::Call(req, otx, _) => {
                let c = node.start(req, &mut fx);
                waiting.insert(c, otx);
            }
            Event::Net(NetEvent::Msg(_, Msg::App(m)), _) => {
                let _ = app.send(AppEvent::Msg(m));
            }
            Event::Net(NetEvent::Msg(from, Msg::Inst(m)), _) => crate::xmove::inbox(from, m),
            Event::Inst(to, m) if to == me => crate::xmove::inbox(me, m),
            Event::Inst(to, m) => match peers.get(to as usize).and_then(Option::as_ref) {
                Some(p) => {
                    if p.send(Frame::Msg(Msg::Inst(m))).is_err() {
                        // Its connection is closed: no answer comes.
                        crate::xmove::unreachable(to);
                    }
                }
                None => send_inst(&peers, crate::xmove::peer_dead(to)),
            },
            Event::Poison(why) => node.poison_barriers(why, &mut fx),
            Event::Net(NetEvent::Msg(from, m), _) => node.handle(from, m, &mut fx),
            Event::App(to, m) => {
                if let Some(p) = peers.get(to as usize).and_then(Option::as_ref) {
                    let _ = p.send(Frame::Msg(Msg::App(m)));
                }
            }
            Event::Leave(otx) => {
                for p in peers.iter().flatten() {
                    let _ = p.send(Frame::Bye);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                let _ = otx.send(());
                return;
            }
            Event::Net(NetEvent::Bye(from), _) => {
                byes.insert(from);
            }
            Event::Net(NetEvent::Silent(from, failed), _) => {
                // It closed its side: what it hosts, or moves here, can no
                // longer be heard of (`xmove::peer_silent`). With fatal
                // errors, the failure it reported (next: `Dead`) stops this
                // node first, and says why; unless that node is done with
                // already (said goodbye, or failed before): nothing stops
                // this node then.
                if !cfg.fatal_errors || byes.contains(&failed) {
                    send_inst(&peers, crate::xmove::peer_silent(from, failed));
                }
            }
            Event::Joins(open) if accepting != Accepting::Never => {
                accepting = if open {
                    Accepting::Open
                } else {
                    Accepting::Over
                };
            }
            Event::Joins(_) => {}
            Event::Late(late) => {
                let how = match finalize {
                    Some(_) => Accepting::Over,
                    None => accepting,
                };
                crate::join::late(
                    (me, size),
                    late,
                    how,
                    &mut peers,
                    &addrs,
                    &byes,
                    &ntx,
                    &mut pending,
                )
                .await;
                early.retain(
                    |&to, msgs| match peers.get(to as usize).and_then(Option::as_ref) {
                        Some(p) => {
                            for m in msgs.drain(..) {
                                let _ = p.send(Frame::Msg(m));
                            }
                            false
                        }
                        None => true,
                    },
                );
            }
            Event::Net(NetEvent::Connected(from), _) => {
                if pending.remove(&from) {
                    let _ = joined.send(from);
                }
            }
            Event::Net(NetEvent::Dead(from, reason), _)
                if !byes.contains(&from)
                    && (pending.remove(&from)
                        || (me != 0 && from >= size && !node.members.contains(&from))) =>
            {
                // A node from outside that went away before it joined:
                // nothing of the run's was on it.
                report(&format!(
                    "dmi: node {me}: node {from} went away before it joined: {reason}"
                ));
                byes.insert(from);
            }
            Event::Net(NetEvent::Dead(from, reason), _)
                if addrs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(from as usize)
                    .is_none() =>
            {
                // `from` may come from a peer's Abort frame: not trusted.
                report(&format!(
                    "dmi: node {me}: ignored the failure of node {from}, which is no node of \
                     the run: {reason}"
                ));
            }
            Event::Net(NetEvent::Dead(from, reason), _) => {
                let fresh = !byes.contains(&from);
                if fresh {
                    let peer = addrs.lock().unwrap_or_else(|e| e.into_inner())[from as usize]
                        .map_or("?".to_string(), |a| a.to_string());
                    report(&format!(
                        "dmi: node {me}: node {from} ({peer}) failed: {reason}"
                    ));
                    // Before moves to it are called off (`peer_dead`): an
                    // instance that resumes then sees the failure.
                    node.fail(
                        DmiError::NodeFailed {
                            node: from,
                            reason: reason.clone(),
                        },
                        &mut fx,
                    );
                }
                // Before the Abort below: a node stops reading this one
                // once it hears of the failure from it.
                send_inst(&peers, crate::xmove::peer_dead(from));
                if fresh {
                    for p in peers.iter().flatten() {
                        let _ = p.send(Frame::Abort {
                            node: from,
                            reason: reason.clone(),
                        });
                    }
                    if cfg.fatal_errors {
                        report(&format!(
                            "dmi: node {me}: stopping (set DMI_ERRORS=return to handle it instead)"
                        ));
                        // Let the writers flush the aborts.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        std::process::exit(PEER_FAILED_EXIT);
                    }
                    byes.insert(from);
                }
            }
            Event::Finalize(otx) => {
                for p in peers.iter().flatten() {
                    let _ = p.send(Frame::Bye);
                }
                finalize = Some(otx);
            }
        }
        deliver(&mut node, &peers, &mut early, fx, &mut waiting);
        if !left && node.phase() == Phase::Left {
            left = true;
            let _ = app.send(AppEvent::Left);
        }
        let all_byes = || {
            let said = |r: usize| byes.contains(&(r as NodeId));
            peers
                .iter()
                .enumerate()
                .all(|(r, p)| p.is_none() || said(r))
        };
        if finalize.is_some() && all_byes() {
            // Let the writers flush their goodbyes.
            tokio::time::sleep(Duration::from_millis(20)).await;
            if let Some(f) = finalize.take() {
                let _ = f.send(());
            }
            return;
        }
    }
}

/// Sends messages about instances at once (not through the event queue).
fn send_inst(peers: &[Option<SendQ>], msgs: Vec<(NodeId, InstMsg)>) {
    for (to, m) in msgs {
        if let Some(p) = peers.get(to as usize).and_then(Option::as_ref) {
            let _ = p.send(Frame::Msg(Msg::Inst(m)));
        }
    }
}

/// Sends what the core produced and answers finished calls.
fn deliver(
    node: &mut Node,
    peers: &[Option<SendQ>],
    early: &mut HashMap<NodeId, Vec<Msg>>,
    mut fx: Effects,
    waiting: &mut HashMap<CallId, oneshot::Sender<Outcome>>,
) {
    loop {
        let sends = std::mem::take(&mut fx.sends);
        if sends.is_empty() {
            break;
        }
        for (to, m) in sends {
            match peers.get(to as usize).and_then(Option::as_ref) {
                Some(p) => {
                    let _ = p.send(Frame::Msg(m));
                }
                None if to == node.rank() => node.handle(to, m, &mut fx),
                // A node that joined from outside, whose connection to this
                // node is not registered yet: sent once it is.
                None => early.entry(to).or_default().push(m),
            }
        }
    }
    for (c, out) in fx.done {
        if let Some(w) = waiting.remove(&c) {
            let _ = w.send(out);
        }
    }
}
