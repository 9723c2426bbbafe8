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
/// Where a split read cuts a page (not in the middle: the two halves of a
/// page hold the same value, so swapped halves would go unnoticed).
const CUT: usize = 5;

/// Per page of a pending call: `Some(value)` for a write, `None` for a read.
type Plan = Vec<(u64, Option<u64>)>;

struct Client {
    node: NodeId,
    id: u32,
    left: usize,
    seq: u64,
    /// The call, its plan, and whether a read asked for each page as two
    /// ranges cut at `CUT`, the upper one first (`split`).
    pending: Option<(CallId, Plan, bool)>,
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
    let (h, m, _) = run_with(seed, nodes, per_node, pages, ops, None);
    (h, m)
}

/// `run` with every node's pool limited to `pool` pages; also returns the
/// pages moved away and the copies dropped (over all nodes). Ends with a
/// GET of every page by every client (so the history checks that the final
/// contents are those of the last write), and checks that each page has
/// exactly one owner and no pool ever held more than `pool` pages.
pub fn run_with(
    seed: u64,
    nodes: u32,
    per_node: u32,
    pages: u64,
    ops: usize,
    pool: Option<usize>,
) -> (History, u64, (u64, u64)) {
    let mut sim = Sim::new(nodes, seed);
    if let Some(p) = pool {
        sim.set_pool(p);
    }
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
            let Some((call, pages_written, split)) = c.pending.take() else {
                continue;
            };
            match sim.take(c.node, call) {
                None => c.pending = Some((call, pages_written, split)),
                Some(out) => {
                    let out = out.unwrap_or_else(|e| {
                        let dump: String = sim.nodes.iter().map(|n| n.debug_state()).collect();
                        panic!("seed {seed}: call failed: {e}\n{dump}")
                    });
                    let mut at = 0;
                    for (p, w) in pages_written {
                        match w {
                            Some(v) => hist.record(c.id, p, Event::Write(v)),
                            None => {
                                let mut b = out[at..at + PAGE].to_vec();
                                if split {
                                    b.rotate_right(CUT);
                                }
                                hist.record(c.id, p, Event::Read(decode(&b)));
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
            let read = rng.below(2) == 0;
            if read {
                // A read first tries the node's frames, as `Dmi::read`
                // does: between two steps is where a real reader may look
                // (inside a step changed frames are odd or flagged). Hits
                // complete at once and are checked like every read.
                let ix = sim.nodes[c.node as usize].store().index();
                let mut bufs = Vec::new();
                let hit = ps.iter().all(|&p| {
                    let mut b = [0u8; PAGE];
                    let ok = ix.read(addr(p), &mut b);
                    bufs.push(b);
                    ok
                });
                if hit {
                    for (&p, b) in ps.iter().zip(&bufs) {
                        hist.record(c.id, p, Event::Read(decode(b)));
                    }
                    continue;
                }
            }
            // A third of the reads that go to the engine ask for each page
            // as two ranges of unequal length, the upper one first: the
            // ranges of one page travel as one access (`ReqKind::GetMany`
            // for GET) and must land in their places, read at one version
            // (not torn).
            let split = read && rng.below(3) == 0;
            let (req, plan) = if read {
                let (cut, rest) = (CUT as i64, (PAGE - CUT) as i64);
                let items = ps
                    .iter()
                    .flat_map(|&p| match split {
                        true => vec![(addr(p) + cut, rest), (addr(p), cut)],
                        false => vec![(addr(p), PAGE as i64)],
                    })
                    .collect();
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
                // A write first tries the frames too, as `Dmi::write` does
                // (pages owned here at rest, nobody else holding them; all
                // or none). Hits are complete at once.
                let ix = sim.nodes[c.node as usize].store().index();
                let refs: Vec<(i64, &[u8])> = items.iter().map(|(a, b)| (*a, &b[..])).collect();
                if ix.write(&refs) {
                    for (p, w) in plan {
                        hist.record(c.id, p, Event::Write(w.expect("a write")));
                    }
                    continue;
                }
                let req = CallReq::Write {
                    items,
                    mode: write_mode(&mut rng),
                };
                (req, plan)
            };
            let call = sim.start(c.node, req);
            c.pending = Some((call, plan, split));
        } else if idle.is_empty() && !sim.step() {
            let dump: String = sim.nodes.iter().map(|n| n.debug_state()).collect();
            panic!("seed {seed}: calls pending but the network is quiet\n{dump}");
        }
    }
    sim.settle();
    for n in &sim.nodes {
        assert_eq!(n.pending_calls(), 0, "seed {seed}");
    }
    for c in &clients {
        for p in 0..pages {
            let req = CallReq::Read {
                items: vec![(addr(p), PAGE as i64)],
                mode: ReadMode::Get,
            };
            let out = sim
                .run(c.node, req)
                .unwrap_or_else(|e| panic!("seed {seed}: final read of page {p}: {e}"));
            hist.record(c.id, p, Event::Read(decode(&out)));
        }
    }
    sim.settle();
    let mut owners = vec![0; pages as usize];
    for n in &sim.nodes {
        for (p, _, _) in n.owned_pages() {
            owners[p.index as usize] += 1;
        }
    }
    assert!(
        owners.iter().all(|&o| o == 1),
        "seed {seed}: owners per page {owners:?}"
    );
    if let Some(cap) = pool {
        assert!(
            sim.peak.iter().all(|&u| u <= cap),
            "seed {seed}: pool peaks {:?} over {cap}",
            sim.peak
        );
    }
    let moved = sim
        .nodes
        .iter()
        .map(|n| n.swap_counts())
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    (hist, sim.delivered, moved)
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
    let (hits, misses) = dmi::pool::read_counts();
    assert!(
        hits > 0,
        "no read was served from the frames ({misses} misses)"
    );
    let (w_hits, w_misses) = dmi::pool::write_counts();
    assert!(
        w_hits > 0,
        "no write was applied to the frames ({w_misses} misses)"
    );
    eprintln!(
        "checked {events} events, {msgs} messages; {hits} reads from frames, {misses} not; \
         {w_hits} writes to frames, {w_misses} not"
    );
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

/// Remote swap: pools of 3-4 pages on 3-4 nodes, more pages than one node
/// holds, the same random workloads in every mode. The pools together
/// leave room for every page plus some slots reserved for accesses in
/// flight (a tighter total, 3 pools of 3 for 5 pages, can find every pool
/// full for a moment and fail an access with `PoolFull`: `docs/dmi.md`),
/// so no access may fail here; pages must move and copies be dropped.
#[test]
fn small_pools_swap_pages_and_stay_sequentially_consistent() {
    let (mut moved, mut dropped, mut events) = (0, 0, 0);
    for seed in std::env::var("DMI_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(0..200u64, |s: u64| s..s + 1)
    {
        // (nodes, pool pages, pages)
        let (nodes, pool, pages) = [(3, 4, 6), (4, 3, 9), (3, 3, 5), (4, 3, 7)][seed as usize % 4];
        let (h, _, (m, d)) = run_with(seed, nodes, 1, pages, 25, Some(pool));
        if let Err(e) = h.check() {
            panic!("seed {seed} ({nodes} nodes, pool {pool}, {pages} pages): {e}\n{h:?}");
        }
        // Two clients per node: a Fetch in flight while the node drops
        // (or declines to cache) a copy of the same page.
        let (h2, _, (m2, d2)) = run_with(seed + 1_000_000, 3, 2, 6, 10, Some(5));
        if let Err(e) = h2.check() {
            panic!("seed {seed} (3 nodes, 2 clients each, pool 5, 6 pages): {e}\n{h2:?}");
        }
        moved += m + m2;
        dropped += d + d2;
        events += h.len() + h2.len();
    }
    eprintln!("checked {events} events; {moved} pages moved away, {dropped} copies dropped");
    assert!(moved > 0 && dropped > 0, "{moved} moved, {dropped} dropped");
}

fn mmap(sim: &mut Sim, pages: i64) -> i64 {
    let req = CallReq::Mmap {
        page_size: PAGE as i64,
        page_num: pages,
    };
    i64::from_le_bytes(sim.run(0, req).unwrap().try_into().unwrap())
}

/// One node writes 5 pages with a pool of 2 (3 nodes): owned pages move to
/// the others; then every node reads every page in every mode.
#[test]
fn a_writer_with_a_small_pool_loses_nothing() {
    for seed in 0..50 {
        let mut sim = Sim::new(3, seed);
        sim.set_pool(2);
        let base = mmap(&mut sim, 5);
        for p in 0..5u64 {
            let mode = [WriteMode::Exclusive, WriteMode::Put][(p % 2) as usize];
            let items = vec![(base + p as i64 * PAGE as i64, value_bytes(p + 1))];
            sim.run(0, CallReq::Write { items, mode })
                .unwrap_or_else(|e| panic!("seed {seed}: write {p}: {e}"));
        }
        for round in 0..2 {
            for node in 0..3 {
                for p in 0..5u64 {
                    let mode = [ReadMode::Invalidate, ReadMode::Update, ReadMode::Get]
                        [((p + node as u64 + round) % 3) as usize];
                    let items = vec![(base + p as i64 * PAGE as i64, PAGE as i64)];
                    let out = sim
                        .run(node, CallReq::Read { items, mode })
                        .unwrap_or_else(|e| panic!("seed {seed}: read {p} on {node}: {e}"));
                    assert_eq!(decode(&out), p + 1, "seed {seed}: page {p} on node {node}");
                }
            }
        }
        sim.settle();
        assert!(
            sim.peak.iter().all(|&u| u <= 2),
            "seed {seed}: {:?}",
            sim.peak
        );
        let moved: u64 = sim.nodes.iter().map(|n| n.swap_counts().0).sum();
        assert!(moved > 0, "seed {seed}: no page moved");
    }
}

/// One node, or two, with pools of 2 cannot hold 5 pages: a write fails
/// with an error naming the pool size (it must not wait forever), and what
/// was written before stays intact.
#[test]
fn every_pool_full_is_a_clear_error_and_loses_nothing() {
    for nodes in [1u32, 2] {
        let mut sim = Sim::new(nodes, 1);
        sim.set_pool(2);
        let base = mmap(&mut sim, 5);
        let mut written = 0u64;
        let err = loop {
            let at = base + written as i64 * PAGE as i64;
            let items = vec![(at, value_bytes(written + 1))];
            let mode = WriteMode::Exclusive;
            match sim.run(0, CallReq::Write { items, mode }) {
                Ok(_) => written += 1,
                Err(e) => break e,
            }
            assert!(written < 5, "5 pages fit into {nodes} pools of 2");
        };
        assert!(matches!(err, dmi::DmiError::PoolFull(_)), "{err:?}");
        assert!(err.to_string().contains("DMI_POOL_PAGES=2"), "{err}");
        // One pool holds 2; two hold at least 3 (one more than one node).
        assert!(
            written > u64::from(nodes),
            "{nodes} nodes: only {written} pages fit"
        );
        sim.settle();
        for node in 0..nodes {
            for p in 0..written {
                let items = vec![(base + p as i64 * PAGE as i64, PAGE as i64)];
                let mode = ReadMode::Get;
                let out = sim.run(node, CallReq::Read { items, mode }).unwrap();
                assert_eq!(decode(&out), p + 1, "page {p} on node {node}");
            }
        }
        assert!(sim.peak.iter().all(|&u| u <= 2), "{:?}", sim.peak);
    }
}

/// A full home receives first accesses to pages nobody touched yet: GETs
/// and INVALIDATE reads wait at the home for room, an EXCLUSIVE write gets
/// the page handed out fresh (the home needs no slot for it), and the
/// waiting reads then go to the new owner. Nothing fails, the reads see 0
/// or the write, and a final read sees the write.
#[test]
fn a_full_home_hands_untouched_pages_out() {
    for seed in 0..100 {
        let mut sim = Sim::new(3, seed);
        sim.nodes[0].set_pool_pages(Some(2));
        for n in &mut sim.nodes[1..] {
            n.set_pool_pages(Some(4));
        }
        let base = mmap(&mut sim, 9);
        // Region 2: page i's home is (2 + i) % 3, so node 0 is home of 1, 4, 7.
        let region = (base as u64 >> dmi::addr::REGION_SHIFT) as u32;
        let homed: Vec<u64> = (0..9)
            .filter(|i| (u64::from(region) + i) % 3 == 0)
            .collect();
        let at = |p: u64| base + p as i64 * PAGE as i64;
        for (k, &p) in homed[..2].iter().enumerate() {
            let items = vec![(at(p), value_bytes(k as u64 + 1))];
            let mode = WriteMode::Exclusive;
            sim.run(0, CallReq::Write { items, mode }).unwrap();
        }
        let c = homed[2];
        let read = |mode| CallReq::Read {
            items: vec![(at(c), PAGE as i64)],
            mode,
        };
        let write = CallReq::Write {
            items: vec![(at(c), value_bytes(99))],
            mode: WriteMode::Exclusive,
        };
        let calls = [
            (1, sim.start(1, read(ReadMode::Get)), true),
            (2, sim.start(2, read(ReadMode::Invalidate)), true),
            (1, sim.start(1, write), false),
            (0, sim.start(0, read(ReadMode::Update)), true),
        ];
        for (node, call, is_read) in calls {
            let out = sim
                .wait(node, call)
                .unwrap_or_else(|e| panic!("seed {seed}: node {node}: {e}"));
            if is_read {
                let v = decode(&out);
                assert!(v == 0 || v == 99, "seed {seed}: read {v}");
            }
        }
        sim.settle();
        for node in 0..3 {
            let out = sim.run(node, read(ReadMode::Get)).unwrap();
            assert_eq!(decode(&out), 99, "seed {seed}: node {node}");
        }
        for (k, &p) in homed[..2].iter().enumerate() {
            let items = vec![(at(p), PAGE as i64)];
            let out = sim
                .run(
                    2,
                    CallReq::Read {
                        items,
                        mode: ReadMode::Get,
                    },
                )
                .unwrap();
            assert_eq!(decode(&out), k as u64 + 1, "seed {seed}: page {p}");
        }
        assert!(sim.peak[0] <= 2, "seed {seed}: {:?}", sim.peak);
    }
}
