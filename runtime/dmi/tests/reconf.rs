// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Property test of membership changes (`epoch.rs`): random programs of
//! reads and writes in every mode, as in `coherence.rs`, while node 0 makes
//! spare nodes join and members leave at random moments. Clients are not
//! tied to a node: a client on a leaving node moves to a remaining member
//! (what a migrating compute instance does). Every page's history must be
//! sequentially consistent and nothing may be lost: at the end every
//! touched page has exactly one owner among the members, its home's entry
//! points there, its version equals the number of writes that completed,
//! and the nodes that left hold nothing. A failing seed is printed
//! (`DMI_SEED=N` reruns one).

use std::collections::BTreeMap;

use dmi::addr::{home, NodeId, PageId};
use dmi::check::{Event, History};
use dmi::epoch::{Phase, RescaleStats};
use dmi::node::{CallId, CallReq};
use dmi::sim::{Rng, Sim};
use dmi::{ReadMode, WriteMode};

const PAGE: usize = 16;

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

struct Outcome {
    hist: History,
    changes: u32,
    moved: RescaleStats,
}

/// One random program with membership changes. Starts with `start`
/// members and `spares` spare nodes.
fn run(seed: u64, start: u32, spares: u32, clients_n: u32, pages: u64, ops: usize) -> Outcome {
    let mut sim = Sim::with_spares(start, spares, seed);
    let mut rng = Rng::new(seed ^ 0x5EC0);
    let out = sim
        .run(
            0,
            CallReq::Mmap {
                page_size: PAGE as i64,
                page_num: pages as i64,
            },
        )
        .unwrap();
    let region = (i64::from_le_bytes(out.try_into().unwrap()) >> dmi::addr::REGION_SHIFT) as u32;
    let base = i64::from(region) << dmi::addr::REGION_SHIFT;
    let addr = |p: u64| base + (p as i64) * PAGE as i64;
    // The members calls may go to (joiners count once the change is done;
    // leavers stop counting when it starts).
    let mut usable: Vec<NodeId> = (0..start).collect();
    let mut outside: Vec<NodeId> = (start..start + spares).collect();
    let mut rescale: Option<(CallId, Vec<NodeId>)> = None;
    let mut changes = 0;
    let mut moved = RescaleStats::default();
    let mut writes: BTreeMap<u64, u64> = BTreeMap::new();
    let mut clients: Vec<Client> = (0..clients_n)
        .map(|i| Client {
            node: i % start,
            id: i,
            left: ops,
            seq: 0,
            pending: None,
        })
        .collect();
    let mut hist = History::default();
    loop {
        for c in clients.iter_mut() {
            let Some((call, plan)) = c.pending.take() else {
                continue;
            };
            match sim.take(c.node, call) {
                None => c.pending = Some((call, plan)),
                Some(Err(e)) => {
                    // Only a call deferred on a node that then left may
                    // fail; it never started, so it had no effect.
                    assert!(
                        e.to_string().contains("has left"),
                        "seed {seed}: call failed: {e}"
                    );
                    c.node = usable[rng.below(usable.len() as u64) as usize];
                }
                Some(Ok(out)) => {
                    let mut at = 0;
                    for (p, w) in plan {
                        match w {
                            Some(v) => {
                                hist.record(c.id, p, Event::Write(v));
                                *writes.entry(p).or_default() += 1;
                            }
                            None => {
                                hist.record(c.id, p, Event::Read(decode(&out[at..at + PAGE])));
                                at += PAGE;
                            }
                        }
                    }
                }
            }
        }
        // No completed write is ever lost: the page's owner (when it is not
        // in transit) has applied at least that many.
        for (&p, &w) in &writes {
            let page = PageId { region, index: p };
            for n in &sim.nodes {
                if let Some((_, v, _)) = n.owned_pages().into_iter().find(|(q, _, _)| *q == page) {
                    assert!(
                        v >= w || n.phase() != Phase::Active,
                        "seed {seed}: after message {}: node {} owns page {p} at version {v}, {w} writes completed\n{}",
                        sim.delivered,
                        n.rank(),
                        sim.nodes.iter().map(|n| n.debug_state()).collect::<String>()
                    );
                }
            }
        }
        if let Some((call, join)) = rescale.take() {
            match sim.take(0, call) {
                None => rescale = Some((call, join)),
                Some(out) => {
                    let s = RescaleStats::from_bytes(
                        &out.unwrap_or_else(|e| panic!("seed {seed}: rescale failed: {e}")),
                    )
                    .unwrap();
                    moved.pages += s.pages;
                    moved.bytes += s.bytes;
                    moved.entries += s.entries;
                    usable.extend(join);
                    usable.sort_unstable();
                    changes += 1;
                }
            }
        }
        let idle: Vec<usize> = (0..clients.len())
            .filter(|&i| clients[i].pending.is_none() && clients[i].left > 0)
            .collect();
        if idle.is_empty() && rescale.is_none() && clients.iter().all(|c| c.pending.is_none()) {
            break;
        }
        // Now and then, change the membership.
        if rescale.is_none() && rng.below(12) == 0 {
            let mut join = Vec::new();
            let mut leave = Vec::new();
            if !outside.is_empty() && rng.below(2) == 0 {
                join.push(outside.remove(rng.below(outside.len() as u64) as usize));
            }
            if usable.len() > 1 && (join.is_empty() || rng.below(2) == 0) {
                let l = usable[1 + rng.below(usable.len() as u64 - 1) as usize];
                usable.retain(|&n| n != l);
                leave.push(l);
            }
            if !join.is_empty() || !leave.is_empty() {
                for c in clients.iter_mut().filter(|c| leave.contains(&c.node)) {
                    if c.pending.is_none() {
                        c.node = usable[rng.below(usable.len() as u64) as usize];
                    }
                }
                let call = sim.start(
                    0,
                    CallReq::Rescale {
                        join: join.clone(),
                        leave,
                    },
                );
                rescale = Some((call, join));
                continue;
            }
        }
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
                let mode =
                    [ReadMode::Invalidate, ReadMode::Update, ReadMode::Get][rng.below(3) as usize];
                (
                    CallReq::Read { items, mode },
                    ps.iter().map(|&p| (p, None)).collect(),
                )
            } else {
                let mut items = Vec::new();
                let mut plan = Vec::new();
                for &p in &ps {
                    c.seq += 1;
                    let v = (u64::from(c.id) + 1) << 32 | c.seq;
                    items.push((addr(p), value_bytes(v)));
                    plan.push((p, Some(v)));
                }
                let mode = [WriteMode::Exclusive, WriteMode::Put][rng.below(2) as usize];
                (CallReq::Write { items, mode }, plan)
            };
            let call = sim.start(c.node, req);
            c.pending = Some((call, plan));
        } else if idle.is_empty() && !sim.step() {
            let dump: String = sim.nodes.iter().map(|n| n.debug_state()).collect();
            panic!("seed {seed}: calls pending but the network is quiet\n{dump}");
        }
    }
    sim.settle();
    // Nothing lost: one owner per touched page, found through its home.
    let members = sim.nodes[0].members().to_vec();
    for n in &sim.nodes {
        assert_eq!(n.pending_calls(), 0, "seed {seed}: node {}", n.rank());
        let member = members.contains(&n.rank());
        match n.phase() {
            Phase::Active => {
                assert!(member, "seed {seed}");
                assert_eq!(
                    n.members(),
                    &members[..],
                    "seed {seed}: node {} disagrees",
                    n.rank()
                );
            }
            Phase::Left => assert!(
                !n.holds_anything(),
                "seed {seed}: node {} left but holds\n{}",
                n.rank(),
                n.debug_state()
            ),
            Phase::Outside => assert!(!n.holds_anything(), "seed {seed}"),
            p => panic!("seed {seed}: node {} still in {p:?}", n.rank()),
        }
    }
    let dump = |sim: &Sim| {
        sim.nodes
            .iter()
            .map(|n| n.debug_state())
            .collect::<String>()
    };
    for p in 0..pages {
        let page = PageId { region, index: p };
        let owners: Vec<(NodeId, u64, Vec<u8>)> = sim
            .nodes
            .iter()
            .flat_map(|n| {
                n.owned_pages()
                    .into_iter()
                    .filter(|(q, _, _)| *q == page)
                    .map(|(_, v, d)| (n.rank(), v, d))
            })
            .collect();
        let w = writes.get(&p).copied().unwrap_or(0);
        if owners.is_empty() {
            assert_eq!(
                w,
                0,
                "seed {seed}: page {p} with {w} writes was lost\n{}",
                dump(&sim)
            );
            continue;
        }
        assert_eq!(
            owners.len(),
            1,
            "seed {seed}: page {p} has owners {owners:?}"
        );
        let (o, version, data) = &owners[0];
        assert!(
            members.contains(o),
            "seed {seed}: page {p} owned by non-member {o}"
        );
        assert_eq!(
            *version,
            w,
            "seed {seed}: page {p}: version {version}, {w} writes\n{}",
            dump(&sim)
        );
        let h = home(page, &members);
        let entry = sim.nodes[h as usize].owner_entry(page).unwrap_or(h);
        assert_eq!(
            entry,
            *o,
            "seed {seed}: home {h} of page {p} points to {entry}\n{}",
            dump(&sim)
        );
        // The final value, read from every member, joins the history.
        for (i, &m) in members.iter().enumerate() {
            let got = sim
                .run(
                    m,
                    CallReq::Read {
                        items: vec![(addr(p), PAGE as i64)],
                        mode: ReadMode::Get,
                    },
                )
                .unwrap();
            assert_eq!(&got, data, "seed {seed}");
            hist.record(10_000 + i as u32, p, Event::Read(decode(&got)));
        }
    }
    Outcome {
        hist,
        changes,
        moved,
    }
}

#[test]
fn random_joins_and_leaves_keep_every_page_consistent_and_lose_nothing() {
    let (mut changes, mut events) = (0, 0);
    let mut moved = RescaleStats::default();
    for seed in std::env::var("DMI_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(0..seeds(), |s: u64| s..s + 1)
    {
        let start = 2 + (seed % 2) as u32;
        let pages = 1 + seed % 4;
        let o = run(seed, start, 3, 3, pages, 30);
        if let Err(e) = o.hist.check() {
            panic!(
                "seed {seed} ({start} nodes + 3 spares, {pages} pages): {e}\n{:?}",
                o.hist
            );
        }
        changes += o.changes;
        events += o.hist.len();
        moved.pages += o.moved.pages;
        moved.entries += o.moved.entries;
    }
    eprintln!(
        "{changes} membership changes, {events} events; {} pages and {} owner entries handed over",
        moved.pages, moved.entries
    );
    // The test is not vacuous: changes happened and moved state.
    assert!(changes > 300 && moved.pages > 50 && moved.entries > 50);
}

/// `DMI_RECONF_SEEDS=N` runs N seeds instead of 300.
fn seeds() -> u64 {
    std::env::var("DMI_RECONF_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
}

fn mmap(sim: &mut Sim, page_size: i64, page_num: i64) -> i64 {
    let out = sim
        .run(
            0,
            CallReq::Mmap {
                page_size,
                page_num,
            },
        )
        .unwrap();
    i64::from_le_bytes(out.try_into().unwrap())
}

#[test]
fn a_mutex_keeps_its_holder_and_waiters_when_its_home_moves() {
    for seed in 0..40 {
        let mut sim = Sim::with_spares(2, 1, seed);
        let base = mmap(&mut sim, 64, 8);
        // A page whose home moves from node 0 or 1 to the joining node 2.
        let region = (base >> dmi::addr::REGION_SHIFT) as u32;
        let index = (0..8)
            .find(|&i| home(PageId { region, index: i }, &[0, 1, 2]) == 2)
            .unwrap();
        let m = base + index as i64 * 64;
        sim.run(1, CallReq::Lock { addr: m }).unwrap();
        let waiting = sim.start(0, CallReq::Lock { addr: m });
        sim.settle();
        assert!(
            sim.take(0, waiting).is_none(),
            "seed {seed}: granted while held"
        );
        // The change runs while node 0 waits for the mutex.
        let r = sim
            .run(
                0,
                CallReq::Rescale {
                    join: vec![2],
                    leave: vec![],
                },
            )
            .unwrap();
        let stats = RescaleStats::from_bytes(&r).unwrap();
        assert_eq!(stats.pages, 0, "seed {seed}: nobody left, no page moves");
        sim.settle();
        assert!(
            sim.take(0, waiting).is_none(),
            "seed {seed}: granted while held"
        );
        sim.run(1, CallReq::Unlock { addr: m }).unwrap();
        sim.wait(0, waiting).unwrap();
        // The new home now serves it: node 2 waits for node 0.
        let w2 = sim.start(2, CallReq::Lock { addr: m });
        sim.settle();
        assert!(sim.take(2, w2).is_none(), "seed {seed}");
        sim.run(0, CallReq::Unlock { addr: m }).unwrap();
        sim.wait(2, w2).unwrap();
    }
}

#[test]
fn bad_membership_changes_are_errors_and_change_nothing() {
    let mut sim = Sim::with_spares(2, 1, 1);
    let addr = mmap(&mut sim, 16, 4);
    sim.run(
        1,
        CallReq::Write {
            items: vec![(addr, vec![7; 16])],
            mode: WriteMode::Exclusive,
        },
    )
    .unwrap();
    let cases: Vec<(NodeId, Vec<NodeId>, Vec<NodeId>, &str)> = vec![
        (0, vec![1], vec![], "is a member already"),
        (0, vec![], vec![0], "node 0 cannot leave"),
        (0, vec![], vec![2], "is not a member"),
        (0, vec![2], vec![2], "is not a member"),
        (1, vec![2], vec![], "only node 0"),
    ];
    for (node, join, leave, want) in cases {
        let e = sim.run(node, CallReq::Rescale { join, leave }).unwrap_err();
        assert!(e.to_string().contains(want), "{e} (wanted {want})");
    }
    assert_eq!(sim.nodes[0].members(), &[0, 1]);
    // A spare is not a member: its calls fail with a message.
    let e = sim
        .run(
            2,
            CallReq::Read {
                items: vec![(addr, 16)],
                mode: ReadMode::Get,
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("not a member"), "{e}");
    // Node 1 leaves: its page moves, and its later calls fail.
    let r = sim
        .run(
            0,
            CallReq::Rescale {
                join: vec![2],
                leave: vec![1],
            },
        )
        .unwrap();
    let s = RescaleStats::from_bytes(&r).unwrap();
    assert_eq!((s.pages, s.bytes), (1, 16));
    sim.settle(); // the Fins reach node 1
    assert_eq!(sim.nodes[1].phase(), Phase::Left);
    let e = sim
        .run(
            1,
            CallReq::Read {
                items: vec![(addr, 16)],
                mode: ReadMode::Get,
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("has left"), "{e}");
    let got = sim
        .run(
            2,
            CallReq::Read {
                items: vec![(addr, 16)],
                mode: ReadMode::Get,
            },
        )
        .unwrap();
    assert_eq!(got, vec![7; 16]);
}
