// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `dmi stress` (a node program: random reads and writes in every mode,
//! recording what each returned) and `dmi check` (the per-page
//! sequential-consistency check of the recorded histories).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use dmi::check::{Event, History};
use dmi::rmw::RmwTable;
use dmi::sim::Rng;
use dmi::{Dmi, DmiError, ReadMode, WriteMode};

/// Random coherence workload; run it under `dmi run`, then `dmi check DIR`.
///
/// Every node performs OPS random accesses (single or group reads in
/// INVALIDATE, UPDATE or GET mode, single or group writes in EXCLUSIVE or
/// PUT mode, each write a value no other write writes) on PAGES shared
/// pages, and writes what it wrote and read, in program order, to
/// DIR/node-RANK.json.
#[derive(Args)]
pub struct StressArgs {
    /// Where each node writes its history.
    #[arg(long)]
    dir: PathBuf,
    #[arg(long, default_value_t = 200)]
    ops: usize,
    #[arg(long, default_value_t = 3)]
    pages: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Pause between accesses, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pause_ms: u64,
}

/// Check the histories `dmi stress` wrote for per-page sequential consistency.
#[derive(Args)]
pub struct CheckArgs {
    dir: PathBuf,
}

const PAGE: usize = 16;

fn value_bytes(v: u64) -> Vec<u8> {
    [v.to_le_bytes(), v.to_le_bytes()].concat()
}

fn decode(b: &[u8]) -> Result<u64, String> {
    let lo = u64::from_le_bytes(b[..8].try_into().map_err(|_| "short read")?);
    let hi = u64::from_le_bytes(b[8..16].try_into().map_err(|_| "short read")?);
    if lo != hi {
        return Err(format!("torn read: {lo:#x} / {hi:#x}"));
    }
    Ok(lo)
}

fn workload(d: &Dmi, a: &StressArgs) -> Result<History, String> {
    let e = |e: DmiError| e.to_string();
    let me = d.rank();
    if me == 0 {
        let base = d.mmap(PAGE as i64, a.pages as i64).map_err(e)?;
        d.write(d.root(), &base.to_le_bytes(), WriteMode::Put)
            .map_err(e)?;
    }
    d.barrier().map_err(e)?;
    let mut b = [0u8; 8];
    d.read(d.root(), &mut b, ReadMode::Get).map_err(e)?;
    let base = i64::from_le_bytes(b);
    let addr = |p: u64| base + (p * PAGE as u64) as i64;
    let mut rng = Rng::new(a.seed.wrapping_mul(1000) + u64::from(me));
    let mut h = History::default();
    let mut seq = 0u64;
    for _ in 0..a.ops {
        let p1 = rng.below(a.pages);
        let mut ps = vec![p1];
        if a.pages > 1 && rng.below(4) == 0 {
            ps.push((p1 + 1 + rng.below(a.pages - 1)) % a.pages);
        }
        if rng.below(2) == 0 {
            let mode =
                [ReadMode::Invalidate, ReadMode::Update, ReadMode::Get][rng.below(3) as usize];
            let mut bufs = vec![[0u8; PAGE]; ps.len()];
            let mut items: Vec<(i64, &mut [u8])> = ps
                .iter()
                .zip(bufs.iter_mut())
                .map(|(&p, b)| (addr(p), &mut b[..]))
                .collect();
            d.group_read(&mut items, mode).map_err(e)?;
            for (&p, b) in ps.iter().zip(&bufs) {
                h.record(me, p, Event::Read(decode(b)?));
            }
        } else {
            let mode = [WriteMode::Exclusive, WriteMode::Put][rng.below(2) as usize];
            let mut data = Vec::new();
            for &p in &ps {
                seq += 1;
                let v = (u64::from(me) + 1) << 32 | seq;
                data.push((addr(p), value_bytes(v)));
                h.record(me, p, Event::Write(v));
            }
            let items: Vec<(i64, &[u8])> = data.iter().map(|(a, v)| (*a, &v[..])).collect();
            d.group_write(&items, mode).map_err(e)?;
        }
        if a.pause_ms > 0 {
            std::thread::sleep(Duration::from_millis(a.pause_ms));
        }
    }
    Ok(h)
}

pub fn stress(a: StressArgs) -> i32 {
    let d = match Dmi::from_env(Arc::new(RmwTable::default())) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("dmi stress: {e}");
            return 2;
        }
    };
    let me = d.rank();
    let h = match workload(&d, &a) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("dmi stress: node {me}: {e}");
            return 1;
        }
    };
    if let Err(e) = d.finalize() {
        eprintln!("dmi stress: node {me}: finalize: {e}");
        return 1;
    }
    let path = a.dir.join(format!("node-{me}.json"));
    let r = std::fs::create_dir_all(&a.dir)
        .and_then(|_| std::fs::write(&path, serde_json::to_vec(&h).unwrap_or_default()));
    if let Err(e) = r {
        eprintln!("dmi stress: node {me}: {}: {e}", path.display());
        return 1;
    }
    println!("node {me}: {} events recorded", h.len());
    0
}

pub fn check(a: CheckArgs) -> i32 {
    let mut all = History::default();
    let mut files = 0;
    let entries = match std::fs::read_dir(&a.dir) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("dmi check: {}: {e}", a.dir.display());
            return 2;
        }
    };
    for ent in entries.flatten() {
        let p = ent.path();
        if p.extension().is_some_and(|x| x == "json") {
            match std::fs::read(&p)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<History>(&b).map_err(|e| e.to_string()))
            {
                Ok(h) => {
                    all.merge(h);
                    files += 1;
                }
                Err(e) => {
                    eprintln!("dmi check: {}: {e}", p.display());
                    return 2;
                }
            }
        }
    }
    let pages: std::collections::BTreeSet<u64> = all
        .clients
        .values()
        .flat_map(|m| m.keys().copied())
        .collect();
    match all.check() {
        Ok(()) => {
            println!(
                "dmi check: {} events on {} pages from {files} nodes: sequentially consistent per page",
                all.len(),
                pages.len()
            );
            0
        }
        Err(e) => {
            println!("dmi check: NOT sequentially consistent: {e}");
            1
        }
    }
}
