// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Remote swap picks the page to move by use: a full pool moves the owned
//! page at rest that its node used least recently, not the first one it
//! took (`swap.rs`, `start_swap_out`).

use dmi::node::CallReq;
use dmi::sim::Sim;
use dmi::{ReadMode, WriteMode};

const PAGE: i64 = 16;

fn mmap(sim: &mut Sim, pages: i64) -> i64 {
    let req = CallReq::Mmap {
        page_size: PAGE,
        page_num: pages,
    };
    i64::from_le_bytes(sim.run(0, req).unwrap().try_into().unwrap())
}

fn write(sim: &mut Sim, node: u32, addr: i64, v: u8) {
    let items = vec![(addr, vec![v; PAGE as usize])];
    let mode = WriteMode::Exclusive;
    sim.run(node, CallReq::Write { items, mode })
        .unwrap_or_else(|e| panic!("write at {addr:#x} on node {node}: {e}"));
}

fn read(sim: &mut Sim, node: u32, addr: i64) -> Vec<u8> {
    let items = vec![(addr, PAGE)];
    let mode = ReadMode::Get;
    sim.run(node, CallReq::Read { items, mode })
        .unwrap_or_else(|e| panic!("read at {addr:#x} on node {node}: {e}"))
}

/// Node 0 (pool of 3) takes pages 0, 1 and 2 with EXCLUSIVE writes, reads
/// 0 and 1 again, then writes page 3: page 2, the least recently used,
/// moves to node 1 (the least page id would have been page 0), and every
/// page keeps its contents.
#[test]
fn a_full_pool_moves_its_least_recently_used_page() {
    for seed in 0..20 {
        let mut sim = Sim::new(2, seed);
        sim.set_pool(3);
        let base = mmap(&mut sim, 4);
        let at = |p: i64| base + p * PAGE;
        for p in 0..3 {
            write(&mut sim, 0, at(p), p as u8 + 1);
        }
        for p in [0, 1] {
            assert_eq!(read(&mut sim, 0, at(p)), vec![p as u8 + 1; PAGE as usize]);
        }
        sim.settle();
        assert!((0..3).all(|p| sim.nodes[0].owns(at(p))), "seed {seed}");
        write(&mut sim, 0, at(3), 4);
        sim.settle();
        let owned: Vec<bool> = (0..4).map(|p| sim.nodes[0].owns(at(p))).collect();
        assert_eq!(owned, [true, true, false, true], "seed {seed}: node 0 owns");
        assert!(
            sim.nodes[1].owns(at(2)),
            "seed {seed}: page 2 moved to node 1"
        );
        assert_eq!(
            sim.nodes[0].swap_counts().0,
            1,
            "seed {seed}: one page moved"
        );
        for p in 0..4 {
            let want = vec![p as u8 + 1; PAGE as usize];
            assert_eq!(read(&mut sim, 1, at(p)), want, "seed {seed}: page {p}");
        }
    }
}

/// Node 1 (pool of 3, node 0's unlimited) holds INVALIDATE copies of pages 0, 1 and 2 that
/// node 0 owns, reads 0 and 1 again, then reads page 3: the copy of page
/// 2, the least recently used, is dropped (the least page id would have
/// been page 0's), and node 1 still reads every page right.
#[test]
fn a_full_pool_drops_its_least_recently_used_copy() {
    for seed in 0..20 {
        let mut sim = Sim::new(2, seed);
        // Node 0 takes every page; only node 1's pool is small.
        sim.nodes[1].set_pool_pages(Some(3));
        let base = mmap(&mut sim, 4);
        let at = |p: i64| base + p * PAGE;
        for p in 0..4 {
            write(&mut sim, 0, at(p), p as u8 + 1);
        }
        let copy = |sim: &mut Sim, p: i64| {
            let items = vec![(at(p), PAGE)];
            let mode = ReadMode::Invalidate;
            let out = sim.run(1, CallReq::Read { items, mode });
            assert_eq!(
                out.unwrap(),
                vec![p as u8 + 1; PAGE as usize],
                "seed {seed}"
            );
        };
        for p in [0, 1, 2, 0, 1] {
            copy(&mut sim, p);
        }
        sim.settle();
        assert!((0..3).all(|p| sim.nodes[1].has_copy(at(p))), "seed {seed}");
        copy(&mut sim, 3);
        sim.settle();
        let copies: Vec<bool> = (0..4).map(|p| sim.nodes[1].has_copy(at(p))).collect();
        assert_eq!(
            copies,
            [true, true, false, true],
            "seed {seed}: node 1's copies"
        );
        assert_eq!(
            sim.nodes[1].swap_counts().1,
            1,
            "seed {seed}: one copy dropped"
        );
        copy(&mut sim, 2);
    }
}
