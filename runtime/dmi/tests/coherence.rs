// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Property test of the protocol core: random programs of reads and writes
//! in every mode (single and group accesses) from 3-5 nodes, several clients
//! per node, on a network whose delivery order is chosen by a seeded
//! generator. Every page's history must be sequentially consistent
//! (`check::History::check`), no read may be torn, and every call must
//! finish. A failing seed is printed and reproduces exactly.

use dmi::addr::NodeId;
use dmi::check::{Event, History};
use dmi::node::{CallId, CallReq};
use dmi::sim::{Rng, Sim};
use dmi::{ReadMode, WriteMode};

const PAGE: usize = 16;

/// Per page of a pending call: `Some(value)` for a write, `None` for a read.
type Plan = Vec<(u64, Option<u64>)>;

struct Client {
    node: NodeId,
    id: u32,
    left: usize,
    seq: u64,
    pending: Option<(CallId, Plan)>,
}

fn value_bytes(v: u64) -> Vec<u8> {
    let mut b = v.to_le_bytes().to_vec();
    b.extend_from_slice(&v.to_le_bytes());
    b
}

fn decode(b: &[u8]) -> u64 {
    let lo = u64::from_le_bytes(b[..8].try_into().unwrap());
    let hi = u64::from_le_bytes(b[8..16].try_into().unwrap());
    assert_eq!(lo, hi, "torn read: {lo:#x} / {hi:#x}");
    lo
}

fn read_mode(r: &mut Rng) -> ReadMode {
    [ReadMode::Invalidate, ReadMode::Update, ReadMode::Get][r.below(3) as usize]
}

fn write_mode(r: &mut Rng) -> WriteMode {
    [WriteMode::Exclusive, WriteMode::Put][r.below(2) as usize]
}

/// Runs one random program; returns the history and the message count.
fn run(seed: u64, nodes: u32, per_node: u32, pages: u64, ops: usize) -> (History, u64) {
    let mut sim = Sim::new(nodes, seed);
    let mut rng = Rng::new(seed ^ 0xD31);
    let base = i64::from_le_bytes(
        sim.run(
            0,
            CallReq::Mmap {
                page_size: PAGE as i64,
                page_num: pages as i64,
            },
        )
        .unwrap()
        .try_into()
        .unwrap(),
    );
    let addr = |p: u64| base + (p as i64) * PAGE as i64;
    let mut clients: Vec<Client> = (0..nodes * per_node)
        .map(|i| Client {
            node: i % nodes,
            id: i,
            left: ops,
            seq: 0,
            pending: None,
        })
        .collect();
    let mut hist = History::default();
    loop {
        // Finish what completed.
        for c in clients.iter_mut() {
            let Some((call, pages_written)) = c.pending.take() else {
                continue;
            };
            match sim.take(c.node, call) {
                None => c.pending = Some((call, pages_written)),
                Some(out) => {
                    let out = out.unwrap_or_else(|e| panic!("seed {seed}: call failed: {e}"));
                    let mut at = 0;
                    for (p, w) in pages_written {
                        match w {
                            Some(v) => hist.record(c.id, p, Event::Write(v)),
                            None => {
                                hist.record(c.id, p, Event::Read(decode(&out[at..at + PAGE])));
                                at += PAGE;
                            }
                        }
                    }
                }
            }
        }
        let idle: Vec<usize> = (0..clients.len())
            .filter(|&i| clients[i].pending.is_none() && clients[i].left > 0)
            .collect();
        let all_done = idle.is_empty() && clients.iter().all(|c| c.pending.is_none());
        if all_done {
            break;
        }
        // Either start an operation on an idle client or deliver a message.
        if !idle.is_empty() && (rng.below(3) == 0 || !sim.step()) {
            let c = &mut clients[idle[rng.below(idle.len() as u64) as usize]];
            c.left -= 1;
            let group = rng.below(4) == 0 && pages > 1;
            let p1 = rng.below(pages);
            let ps: Vec<u64> = if group {
                vec![p1, (p1 + 1 + rng.below(pages - 1)) % pages]
            } else {
                vec![p1]
            };
            let (req, plan) = if rng.below(2) == 0 {
                let items = ps.iter().map(|&p| (addr(p), PAGE as i64)).collect();
                let req = CallReq::Read {
                    items,
                    mode: read_mode(&mut rng),
                };
                (req, ps.iter().map(|&p| (p, None)).collect::<Vec<_>>())
            } else {
                let mut items = Vec::new();
                let mut plan = Vec::new();
                for &p in &ps {
                    c.seq += 1;
                    let v = (u64::from(c.id) + 1) << 32 | c.seq;
                    items.push((addr(p), value_bytes(v)));
                    plan.push((p, Some(v)));
                }
                let req = CallReq::Write {
                    items,
                    mode: write_mode(&mut rng),
                };
                (req, plan)
            };
            let call = sim.start(c.node, req);
            c.pending = Some((call, plan));
        } else if idle.is_empty() && !sim.step() {
            let dump: String = sim.nodes.iter().map(|n| n.debug_state()).collect();
            panic!("seed {seed}: calls pending but the network is quiet\n{dump}");
        }
    }
    sim.settle();
    for n in &sim.nodes {
        assert_eq!(n.pending_calls(), 0, "seed {seed}");
    }
    (hist, sim.delivered)
}

#[test]
fn random_interleavings_are_sequentially_consistent_per_page() {
    let mut events = 0;
    let mut msgs = 0;
    for seed in std::env::var("DMI_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(0..300u64, |s: u64| s..s + 1)
    {
        // Up to 4 clients: the checker's search grows with the number of
        // clients writing one page.
        let nodes = 3 + (seed % 2) as u32;
        let per_node = 1;
        let pages = 1 + seed % 3;
        let (h, m) = run(seed, nodes, per_node, pages, 25);
        // Two clients per node: concurrent calls of one node on one page.
        let (h2, m2) = run(seed + 1_000_000, 3, 2, 3, 10);
        h2.check()
            .unwrap_or_else(|e| panic!("seed {seed} (3 nodes, 2 clients each): {e}\n{h2:?}"));
        events += h.len() + h2.len();
        msgs += m + m2;
        if let Err(e) = h.check() {
            panic!(
                "seed {seed} ({nodes} nodes, {per_node} clients each, {pages} pages): {e}\n{h:?}"
            );
        }
    }
    eprintln!("checked {events} events, {msgs} messages");
}

#[test]
fn the_checker_catches_a_stale_cache() {
    // Build a real history, then make one late read return an old value:
    // the checker must reject it (it is not vacuous on protocol output).
    let (mut h, _) = run(7, 3, 1, 1, 30);
    let c = h.clients.get_mut(&2).unwrap().get_mut(&0).unwrap();
    let mut found = None;
    for (i, e) in c.iter().enumerate().rev() {
        if let Event::Read(v) = e {
            if *v != 0 {
                found = Some((i, *v));
                break;
            }
        }
    }
    let (i, _) = found.expect("client 2 read something written");
    c.insert(i + 1, Event::Read(0));
    assert!(
        h.check().is_err(),
        "a read of the initial value after a newer read must be rejected"
    );
}
