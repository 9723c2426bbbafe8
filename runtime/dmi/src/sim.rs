// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! A deterministic in-process network for the protocol core: N nodes, one
//! FIFO link per ordered pair, and a seeded generator that picks which link
//! delivers next. Any interleaving the real transport can produce (FIFO per
//! pair, any order across pairs) can be produced here, reproducibly.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::addr::NodeId;
use crate::msg::Msg;
use crate::node::{CallId, CallReq, Effects, Node, Outcome};
use crate::rmw::RmwTable;

/// A small xorshift generator (seeded, no dependencies).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// The simulated cluster.
pub struct Sim {
    pub nodes: Vec<Node>,
    links: HashMap<(NodeId, NodeId), VecDeque<Msg>>,
    done: HashMap<(NodeId, CallId), Outcome>,
    pub rng: Rng,
    /// Messages delivered so far.
    pub delivered: u64,
    /// The most pages each node's pool held after any step.
    pub peak: Vec<usize>,
}

impl Sim {
    pub fn new(n: u32, seed: u64) -> Sim {
        let rmw = Arc::new(RmwTable::default());
        Sim {
            nodes: (0..n).map(|i| Node::new(i, n, rmw.clone())).collect(),
            links: HashMap::new(),
            done: HashMap::new(),
            rng: Rng::new(seed),
            delivered: 0,
            peak: vec![0; n as usize],
        }
    }

    /// Gives every node a pool of `pages` pages.
    pub fn set_pool(&mut self, pages: usize) {
        for n in &mut self.nodes {
            n.set_pool_pages(Some(pages));
        }
    }

    /// `members` nodes (0..members) plus `spares` more that are not
    /// members until node 0 makes them join.
    pub fn with_spares(members: u32, spares: u32, seed: u64) -> Sim {
        let mut sim = Sim::new(members, seed);
        let rmw = Arc::new(RmwTable::default());
        for i in members..members + spares {
            sim.nodes.push(Node::spare(i, rmw.clone()));
            sim.peak.push(0);
        }
        sim
    }

    fn absorb(&mut self, from: NodeId, fx: Effects) {
        let used = self.nodes[from as usize].pool_used();
        let peak = &mut self.peak[from as usize];
        *peak = (*peak).max(used);
        for (to, m) in fx.sends {
            self.links.entry((from, to)).or_default().push_back(m);
        }
        for (c, o) in fx.done {
            self.done.insert((from, c), o);
        }
    }

    /// Starts a call on `node`.
    pub fn start(&mut self, node: NodeId, req: CallReq) -> CallId {
        let mut fx = Effects::default();
        let c = self.nodes[node as usize].start(req, &mut fx);
        self.absorb(node, fx);
        c
    }

    /// The outcome of a finished call (taken once).
    pub fn take(&mut self, node: NodeId, call: CallId) -> Option<Outcome> {
        self.done.remove(&(node, call))
    }

    /// Delivers one message from a randomly chosen non-empty link; false
    /// when nothing is in flight.
    pub fn step(&mut self) -> bool {
        let mut busy: Vec<(NodeId, NodeId)> = self
            .links
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(k, _)| *k)
            .collect();
        if busy.is_empty() {
            return false;
        }
        busy.sort_unstable();
        let (from, to) = busy[self.rng.below(busy.len() as u64) as usize];
        let Some(m) = self.links.get_mut(&(from, to)).and_then(|q| q.pop_front()) else {
            return false;
        };
        self.delivered += 1;
        if std::env::var_os("DMI_SIM_TRACE").is_some() {
            eprintln!("{from}->{to}: {m:?}");
        }
        let mut fx = Effects::default();
        self.nodes[to as usize].handle(from, m, &mut fx);
        self.absorb(to, fx);
        true
    }

    /// Runs until `call` of `node` finishes; panics if the network goes
    /// quiet first (a lost request: a protocol bug).
    pub fn wait(&mut self, node: NodeId, call: CallId) -> Outcome {
        loop {
            if let Some(o) = self.take(node, call) {
                return o;
            }
            assert!(
                self.step(),
                "node {node} call {call} can never finish: network is quiet"
            );
        }
    }

    /// Runs one call to completion.
    pub fn run(&mut self, node: NodeId, req: CallReq) -> Outcome {
        let c = self.start(node, req);
        self.wait(node, c)
    }

    /// Delivers everything in flight.
    pub fn settle(&mut self) {
        while self.step() {}
    }
}
