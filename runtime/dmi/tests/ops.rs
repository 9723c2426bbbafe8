// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Atomics, mutex, barrier and regions on the simulator, with seeded
//! delivery orders: fetch-and-add from every node never loses or repeats
//! an increment (also while EXCLUSIVE writes move the page around), the
//! mutex is held by one node at a time, nobody leaves the barrier early,
//! and unmapped or out-of-range addresses are errors.

use dmi::node::{CallId, CallReq};
use dmi::rmw::FETCH_ADD_I64;
use dmi::sim::Sim;
use dmi::{DmiError, WriteMode};

fn mmap(sim: &mut Sim, node: u32, page_size: i64, page_num: i64) -> i64 {
    let out = sim
        .run(
            node,
            CallReq::Mmap {
                page_size,
                page_num,
            },
        )
        .unwrap();
    i64::from_le_bytes(out.try_into().unwrap())
}

#[test]
fn fetch_add_at_the_owner_is_atomic_while_ownership_moves() {
    for seed in 0..40 {
        let n = 4;
        let mut sim = Sim::new(n, seed);
        let base = mmap(&mut sim, 1, 16, 1);
        let mut olds = Vec::new();
        let mut pending: Vec<Option<CallId>> = vec![None; n as usize];
        let mut left = vec![20; n as usize];
        loop {
            for node in 0..n {
                let i = node as usize;
                if let Some(c) = pending[i] {
                    if let Some(out) = sim.take(node, c) {
                        let out = out.unwrap();
                        if out.len() == 8 {
                            olds.push(i64::from_le_bytes(out.try_into().unwrap()));
                        }
                        pending[i] = None;
                    }
                }
                if pending[i].is_none() && left[i] > 0 {
                    left[i] -= 1;
                    // Every fifth call of node 3 steals the page with an
                    // EXCLUSIVE write of the second word.
                    let req = if node == 3 && left[i] % 5 == 0 {
                        CallReq::Write {
                            items: vec![(base + 8, vec![1; 8])],
                            mode: WriteMode::Exclusive,
                        }
                    } else {
                        CallReq::Rmw {
                            addr: base,
                            size: 8,
                            func: FETCH_ADD_I64,
                            arg: 1i64.to_le_bytes().to_vec(),
                        }
                    };
                    pending[i] = Some(sim.start(node, req));
                }
            }
            if pending.iter().all(Option::is_none) && left.iter().all(|&l| l == 0) {
                break;
            }
            assert!(sim.step(), "seed {seed}: calls pending, network quiet");
        }
        olds.sort_unstable();
        let want: Vec<i64> = (0..olds.len() as i64).collect();
        assert_eq!(olds, want, "seed {seed}: increments lost or repeated");
        let total = sim
            .run(
                0,
                CallReq::Read {
                    items: vec![(base, 8)],
                    mode: dmi::ReadMode::Get,
                },
            )
            .unwrap();
        assert_eq!(
            i64::from_le_bytes(total.try_into().unwrap()),
            olds.len() as i64
        );
    }
}

#[test]
fn the_mutex_is_held_by_one_node_at_a_time_and_the_barrier_waits_for_all() {
    for seed in 0..40 {
        let n = 3;
        let mut sim = Sim::new(n, seed);
        let m = mmap(&mut sim, 0, 8, 1);
        let calls: Vec<CallId> = (0..n)
            .map(|i| sim.start(i, CallReq::Lock { addr: m }))
            .collect();
        let mut holders = Vec::new();
        while holders.len() < n as usize {
            let granted: Vec<u32> = (0..n)
                .filter(|&i| !holders.contains(&i))
                .filter(|&i| sim.take(i, calls[i as usize]).is_some())
                .collect();
            assert!(granted.len() <= 1, "seed {seed}: two holders at once");
            if let Some(&g) = granted.first() {
                holders.push(g);
                sim.settle();
                for i in (0..n).filter(|i| !holders.contains(i)) {
                    assert!(
                        sim.take(i, calls[i as usize]).is_none(),
                        "seed {seed}: granted while held"
                    );
                }
                sim.run(g, CallReq::Unlock { addr: m }).unwrap();
            } else {
                assert!(sim.step(), "seed {seed}: lock never granted");
            }
        }
        let e = sim.run(0, CallReq::Unlock { addr: m });
        assert!(
            matches!(e, Err(DmiError::BadArgument(_))),
            "unlock of a free mutex: {e:?}"
        );

        let b0 = sim.start(0, CallReq::Barrier);
        let b1 = sim.start(1, CallReq::Barrier);
        sim.settle();
        assert!(
            sim.take(0, b0).is_none() && sim.take(1, b1).is_none(),
            "left the barrier early"
        );
        sim.run(2, CallReq::Barrier).unwrap();
        sim.settle();
        assert!(sim.take(0, b0).is_some() && sim.take(1, b1).is_some());
    }
}

#[test]
fn unmapped_and_out_of_range_addresses_are_errors() {
    let mut sim = Sim::new(3, 1);
    let a = mmap(&mut sim, 2, 32, 2);
    let w = |addr| CallReq::Write {
        items: vec![(addr, vec![7; 8])],
        mode: WriteMode::Put,
    };
    sim.run(1, w(a + 56)).unwrap();
    assert!(matches!(
        sim.run(1, w(a + 60)),
        Err(DmiError::OutOfRange(_))
    ));
    assert!(matches!(sim.run(0, w(a - 1)), Err(DmiError::BadAddress(_))));
    assert!(matches!(
        sim.run(0, CallReq::Munmap { addr: a + 8 }),
        Err(DmiError::BadAddress(_))
    ));
    sim.run(0, CallReq::Munmap { addr: a }).unwrap();
    for node in 0..3 {
        assert!(matches!(sim.run(node, w(a)), Err(DmiError::BadAddress(_))));
    }
    assert!(matches!(
        sim.run(
            1,
            CallReq::Mmap {
                page_size: -1,
                page_num: 3
            }
        ),
        Err(DmiError::BadArgument(_))
    ));
}
