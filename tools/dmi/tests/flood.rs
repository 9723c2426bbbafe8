// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Back-pressure (`runtime/dmi/src/flow.rs`): two nodes flood each other
//! with asynchronous PUT writes of 64 KiB, far more than their send queues
//! may hold (`DMI_SEND_QUEUE=256K`). Both must finish, every write must
//! land, and neither node may ever have queued more than the bound plus
//! what one admitted call adds. The nodes are this test binary, started by
//! `dmi run -n 2` and told by `DMI_FLOOD_NODE` to play a node
//! (`flood_node`, ignored in a normal run).

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dmi::msg::WriteMode;
use dmi::node::CallReq;
use dmi::rmw::RmwTable;
use dmi::{Dmi, ReadMode};

mod common;
use common::text;

/// Bytes of one write (one page).
const W: usize = 64 << 10;
const PAGES: i64 = 64;
const ROUNDS: usize = 600;
const LIMIT: usize = 256 << 10;

/// The bytes node `rank` writes to page `p` in round `i`.
fn pattern(rank: u32, i: usize, p: i64) -> Vec<u8> {
    let seed = (rank as u64) << 40 ^ (i as u64) << 16 ^ p as u64;
    (0..W as u64)
        .map(|k| {
            (seed
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .wrapping_add(k * 31)
                >> 24) as u8
        })
        .collect()
}

/// Node `rank` writes the pages whose index modulo 4 is 2*rank or
/// 2*rank+1: half of them have the other node as their home, whatever the
/// region's number.
fn mine(rank: u32, p: i64) -> bool {
    (p % 4) / 2 == i64::from(rank)
}

/// One node of the flood (run by `dmi run`; a no-op in a normal test run).
#[test]
#[ignore = "a node of flood_of_two_nodes_stays_bounded_and_finishes"]
fn flood_node() {
    if std::env::var_os("DMI_FLOOD_NODE").is_none() {
        return;
    }
    let d = Dmi::from_env(Arc::new(RmwTable::default())).expect("DMI node starts");
    let me = d.rank();
    if me == 0 {
        let a = d.mmap(W as i64, PAGES).unwrap();
        d.write(d.root(), &a.to_le_bytes(), WriteMode::Put).unwrap();
    }
    d.barrier().unwrap();
    let mut a = [0u8; 8];
    d.read(d.root(), &mut a, ReadMode::Get).unwrap();
    let region = i64::from_le_bytes(a);
    let pages: Vec<i64> = (0..PAGES).filter(|&p| mine(me, p)).collect();
    let mut handles = Vec::new();
    let mut sent = 0usize;
    for i in 0..ROUNDS {
        let p = pages[i % pages.len()];
        let req = CallReq::Write {
            items: vec![(region + p * W as i64, pattern(me, i, p))],
            mode: WriteMode::Put,
        };
        handles.push(d.start_call(req));
        sent += W;
    }
    for h in handles {
        h.wait().expect("an asynchronous PUT");
    }
    d.barrier().unwrap();
    // Every page of the other node holds its last round's bytes.
    let other = 1 - me;
    let theirs: Vec<i64> = (0..PAGES).filter(|&p| mine(other, p)).collect();
    let mut buf = vec![0u8; W];
    for (k, &p) in theirs.iter().enumerate() {
        let last = (0..ROUNDS).rev().find(|i| i % theirs.len() == k).unwrap();
        d.read(region + p * W as i64, &mut buf, ReadMode::Get)
            .unwrap();
        assert!(
            buf == pattern(other, last, p),
            "node {me}: page {p} does not hold node {other}'s round {last}"
        );
    }
    d.barrier().unwrap();
    let s = d.flow_stats();
    println!(
        "flood: node {me} sent {sent} limit {} max_queued {} max_peer_queued {} waits {}",
        s.limit, s.max_queued, s.max_peer_queued, s.waits
    );
    d.finalize().unwrap();
}

/// `name value` pairs of a `flood:` line.
fn field(line: &str, name: &str) -> usize {
    let mut w = line.split_whitespace();
    while let Some(x) = w.next() {
        if x == name {
            return w.next().and_then(|v| v.parse().ok()).unwrap();
        }
    }
    panic!("no {name} in {line:?}");
}

#[test]
fn flood_of_two_nodes_stays_bounded_and_finishes() {
    let exe = std::env::current_exe().unwrap();
    let t = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_dmi"))
        .args(["run", "-n", "2", "--grace", "2", "--"])
        .arg(&exe)
        .args(["flood_node", "--exact", "--ignored", "--nocapture"])
        .env("DMI_FLOOD_NODE", "1")
        .env("DMI_SEND_QUEUE", "256K")
        .env_remove("DMI_ERRORS")
        .output()
        .unwrap();
    let took = t.elapsed();
    assert!(o.status.success(), "{}", text(&o));
    assert!(took < Duration::from_secs(120), "took {took:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("flood: ")).collect();
    assert_eq!(lines.len(), 2, "{}", text(&o));
    for l in lines {
        assert_eq!(field(l, "limit"), LIMIT, "{l}");
        assert_eq!(field(l, "sent"), ROUNDS * W, "{l}");
        let max = field(l, "max_queued");
        // Queued at most the bound, plus the one call admitted below it
        // (its request: a page and a header), plus answers (small).
        assert!(
            max <= LIMIT + 2 * W,
            "{l}: queued {max} > {LIMIT} + 2 x {W}"
        );
        // The counter counts: the remote half of the writes went through it.
        assert!(max >= W, "{l}");
        assert!(field(l, "max_peer_queued") <= max, "{l}");
    }
    eprintln!("{out}(took {took:?})");
}
