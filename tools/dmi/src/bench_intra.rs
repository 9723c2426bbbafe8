// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The intra-node part of `dmi bench` (2 nodes): read hits on node 0, from
//! its program and from one of its compute instances, served through the
//! node (the call goes to the engine; an instance's through its mailbox and
//! receiver) or straight from the node's frames in the shared range
//! (`dmi::pool`), side by side in one run. Hits of three kinds: a page node
//! 0 owns (GET), and copies of node 1's pages it caches (INVALIDATE,
//! UPDATE). The two paths alternate round by round, so load on the machine
//! affects both alike. Write hits the same way: EXCLUSIVE and PUT writes
//! of the page node 0 owns (nobody else holds it), through the node
//! (`DMI_FAST_WRITES=0`'s path) or straight into the frame.

use std::time::{Duration, Instant};

use dmi::addr::{home, PageId, REGION_SHIFT};
use dmi::{Dmi, DmiError, ReadMode, WriteMode};
use serde_json::Value;

use crate::bench_stats::Sample;

/// What node 0's instance prints its samples after.
pub const LINE: &str = "dmi-bench-intra-json ";

pub struct Opts {
    pub sizes: Vec<usize>,
    pub reps: usize,
    pub rounds: usize,
}

/// Per size: (page node 0 owns, page of node 1 for INVALIDATE, for UPDATE).
fn pages(d: &Dmi, size: usize) -> Result<(i64, i64, i64), DmiError> {
    if d.rank() == 0 {
        let base = d.mmap(size as i64, 8)?;
        d.write(d.root(), &base.to_le_bytes(), WriteMode::Put)?;
    }
    d.barrier()?;
    let mut b = [0u8; 8];
    d.read(d.root(), &mut b, ReadMode::Get)?;
    d.barrier()?;
    let base = i64::from_le_bytes(b);
    let region = (base >> REGION_SHIFT) as u32;
    let members = d.members()?;
    let at = |n: u32| -> Vec<i64> {
        (0..8u64)
            .filter(|&index| home(PageId { region, index }, &members) == n)
            .map(|i| base + (i * size as u64) as i64)
            .collect()
    };
    let (own, remote) = (at(0), at(1));
    match (own.first(), remote.get(..2)) {
        (Some(&own), Some(&[inv, upd])) => Ok((own, inv, upd)),
        _ => Err(DmiError::Setup(
            "no pages homed at node 0 and node 1 among 8".into(),
        )),
    }
}

/// Times the three hit kinds through the node and from the frames.
fn measure(
    d: &Dmi,
    o: &Opts,
    who: &str,
    all: &[(usize, (i64, i64, i64))],
) -> Result<Vec<Sample>, DmiError> {
    let kinds = [
        ("owned page", ReadMode::Get),
        ("cached copy", ReadMode::Invalidate),
        ("cached copy", ReadMode::Update),
    ];
    let mut out = Vec::new();
    for &(size, (own, inv, upd)) in all {
        let mut buf = vec![0u8; size];
        let addrs = [own, inv, upd];
        // Make the copies (and warm both paths).
        for (&a, (_, mode)) in addrs.iter().zip(kinds) {
            for fast in [false, true] {
                dmi::pool::set_fast_reads(fast);
                d.read(a, &mut buf, mode)?;
            }
        }
        let mut times: Vec<[Vec<Duration>; 2]> = kinds.iter().map(|_| Default::default()).collect();
        for _ in 0..o.rounds {
            for (k, (&a, (_, mode))) in addrs.iter().zip(kinds).enumerate() {
                for (p, fast) in [false, true].into_iter().enumerate() {
                    dmi::pool::set_fast_reads(fast);
                    for _ in 0..o.reps {
                        let t = Instant::now();
                        d.read(a, &mut buf, mode)?;
                        times[k][p].push(t.elapsed());
                    }
                }
            }
        }
        dmi::pool::set_fast_reads(true);
        out.extend(measure_writes(d, o, who, size, own)?);
        for ((what, mode), [slow, fast]) in kinds.iter().zip(times) {
            let name = |path: &str| format!("hit, {who}, {what}, {path}");
            out.push(Sample::new(
                &name("through the node"),
                mode_name(*mode),
                size,
                slow,
            ));
            out.push(Sample::new(
                &name("from the frames"),
                mode_name(*mode),
                size,
                fast,
            ));
        }
    }
    Ok(out)
}

/// Write hits of the page `own` (owned by node 0, no copies) through the
/// node and into the frames, EXCLUSIVE and PUT; fails if a write meant for
/// the frames took the node's path (the grant was not there).
fn measure_writes(
    d: &Dmi,
    o: &Opts,
    who: &str,
    size: usize,
    own: i64,
) -> Result<Vec<Sample>, DmiError> {
    let modes = [WriteMode::Exclusive, WriteMode::Put];
    let mut buf = vec![0u8; size];
    let mut times: Vec<[Vec<Duration>; 2]> = modes.iter().map(|_| Default::default()).collect();
    let mut v = 0u8;
    for &mode in &modes {
        for fast in [false, true] {
            dmi::pool::set_fast_writes(fast);
            d.write(own, &buf, mode)?;
        }
    }
    let (hits0, _) = dmi::pool::write_counts();
    for _ in 0..o.rounds {
        for (k, &mode) in modes.iter().enumerate() {
            for (p, fast) in [false, true].into_iter().enumerate() {
                dmi::pool::set_fast_writes(fast);
                for _ in 0..o.reps {
                    v = v.wrapping_add(1);
                    buf[0] = v;
                    let t = Instant::now();
                    d.write(own, &buf, mode)?;
                    times[k][p].push(t.elapsed());
                }
            }
        }
    }
    dmi::pool::set_fast_writes(true);
    let (hits, _) = dmi::pool::write_counts();
    let want = (o.rounds * o.reps * modes.len()) as u64;
    if hits - hits0 != want {
        return Err(DmiError::Setup(format!(
            "{who}: {} of {want} write hits went to the frames (expected all: the page is owned here, nobody else holds it)",
            hits - hits0
        )));
    }
    let mut out = Vec::new();
    for (mode, [slow, fast]) in modes.iter().zip(times) {
        let m = match mode {
            WriteMode::Exclusive => "EXCLUSIVE",
            WriteMode::Put => "PUT",
        };
        let name = |path: &str| format!("write hit, {who}, owned page, {path}");
        out.push(Sample::new(&name("through the node"), m, size, slow));
        out.push(Sample::new(&name("into the frames"), m, size, fast));
    }
    Ok(out)
}

fn mode_name(m: ReadMode) -> &'static str {
    match m {
        ReadMode::Get => "GET",
        ReadMode::Invalidate => "INVALIDATE",
        ReadMode::Update => "UPDATE",
    }
}

/// Both nodes run this; node 0 returns its program's samples, and its
/// instance prints its own after [`LINE`].
pub fn run(d: &Dmi, o: &Opts) -> Result<Vec<Sample>, DmiError> {
    if d.size() < 2 {
        return Err(DmiError::BadArgument(
            "the intra-node bench caches pages of node 1: run it on 2 nodes".into(),
        ));
    }
    let mut all = Vec::new();
    for &s in &o.sizes {
        all.push((s, pages(d, s)?));
    }
    let mut out = Vec::new();
    if d.rank() == 0 {
        out = measure(d, o, "node's program", &all)?;
        let node = dmi::serve::NodeRef::of(d)?;
        let body = |d: &Dmi, _: i64| match measure(d, o, "instance", &all) {
            Ok(s) => {
                let v: Vec<Value> = s.iter().map(Sample::to_json).collect();
                println!("{LINE}{}", Value::Array(v));
                0
            }
            Err(e) => {
                eprintln!("dmi bench: instance: {e}");
                1
            }
        };
        let id = dmi::serve::create(node, true, body, 0)?;
        match dmi::serve::join(id)? {
            dmi::serve::Ended::Returned(0) => {}
            how => {
                return Err(DmiError::Setup(format!(
                    "the bench's instance ended: {how:?}"
                )))
            }
        }
    }
    d.barrier()?;
    Ok(out)
}
