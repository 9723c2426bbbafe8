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
    /// Compute instances per node running the workload too (each its own
    /// client, writing DIR/node-RANK-inst-K.json), beside the node's
    /// program: their hits are read from the node's frames in the shared
    /// range while other nodes write.
    #[arg(long, default_value_t = 0)]
    instances: u32,
    /// Half the accesses of each client go to "its" page (node R's program:
    /// page R mod PAGES; its instance K: page R+1+K mod PAGES): a page its
    /// node often owns, so its writes are often fast writes into the frames
    /// while other nodes read it.
    #[arg(long)]
    skew: bool,
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

fn e(e: DmiError) -> String {
    e.to_string()
}

/// Node 0 maps the pages; every node learns where they are.
fn setup(d: &Dmi, a: &StressArgs) -> Result<i64, String> {
    if d.rank() == 0 {
        let base = d.mmap(PAGE as i64, a.pages as i64).map_err(e)?;
        d.write(d.root(), &base.to_le_bytes(), WriteMode::Put)
            .map_err(e)?;
    }
    d.barrier().map_err(e)?;
    let mut b = [0u8; 8];
    d.read(d.root(), &mut b, ReadMode::Get).map_err(e)?;
    Ok(i64::from_le_bytes(b))
}

/// Client `me` (a node's program, or an instance) runs its accesses.
fn workload(d: &Dmi, a: &StressArgs, me: u32, own: u64, base: i64) -> Result<History, String> {
    let addr = |p: u64| base + (p * PAGE as u64) as i64;
    let mut rng = Rng::new(a.seed.wrapping_mul(1000) + u64::from(me));
    let mut h = History::default();
    let mut seq = 0u64;
    for _ in 0..a.ops {
        let p1 = if a.skew && rng.below(2) == 0 {
            own % a.pages
        } else {
            rng.below(a.pages)
        };
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

fn save(a: &StressArgs, name: &str, h: &History) -> Result<(), String> {
    let path = a.dir.join(format!("{name}.json"));
    std::fs::create_dir_all(&a.dir)
        .and_then(|_| std::fs::write(&path, serde_json::to_vec(h).unwrap_or_default()))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Instance `k` of node `rank`: its own client id and history file.
fn instance(d: &Dmi, a: &StressArgs, rank: u32, k: u32, base: i64) -> Result<String, String> {
    let client = 1000 + rank * 100 + k;
    let h = workload(d, a, client, u64::from(rank + 1 + k), base)?;
    save(a, &format!("node-{rank}-inst-{k}"), &h)?;
    let (hits, misses) = dmi::pool::read_counts();
    let (w_hits, w_misses) = dmi::pool::write_counts();
    Ok(format!(
        "node {rank} instance {k}: {} events recorded, {hits} reads from the frames, {misses} through the node, \
         {w_hits} writes to the frames, {w_misses} through the node",
        h.len()
    ))
}

fn node_run(d: &Dmi, a: &StressArgs) -> Result<History, String> {
    let me = d.rank();
    let base = setup(d, a)?;
    let mut ids = Vec::new();
    for k in 0..a.instances {
        let node = dmi::serve::NodeRef::of(d).map_err(e)?;
        let body = |d: &Dmi, _: i64| match instance(d, a, me, k, base) {
            Ok(line) => {
                println!("{line}");
                0
            }
            Err(err) => {
                eprintln!("dmi stress: node {me} instance {k}: {err}");
                1
            }
        };
        ids.push(dmi::serve::create(node, true, body, 0).map_err(e)?);
    }
    let mut h = workload(d, a, me, u64::from(me), base)?;
    for (k, id) in ids.into_iter().enumerate() {
        match dmi::serve::join(id).map_err(e)? {
            dmi::serve::Ended::Returned(0) => {}
            how => return Err(format!("instance {k} ended: {how:?}")),
        }
    }
    end_phase(d, a, me, base, &mut h)?;
    Ok(h)
}

/// After the workload: page p's writer (node p mod N) writes it (taking it
/// over), every other node caches it (INVALIDATE), and the writer writes it
/// again: a write the owner may no longer apply alone (copies exist), so
/// whatever path it takes, the copies must see it. Then, every write of
/// every client complete, each node reads what every page holds (from its
/// frames where it may), and `dmi check` wants all to agree on the last
/// write.
fn end_phase(d: &Dmi, a: &StressArgs, me: u32, base: i64, h: &mut History) -> Result<(), String> {
    let addr = |p: u64| base + (p * PAGE as u64) as i64;
    let n = u64::from(d.size());
    let mut seq = 1 << 31;
    for round in 0..2 {
        d.barrier().map_err(e)?;
        for p in (0..a.pages).filter(|p| p % n == u64::from(me)) {
            seq += 1;
            let v = (u64::from(me) + 1) << 32 | seq;
            d.write(addr(p), &value_bytes(v), WriteMode::Exclusive)
                .map_err(e)?;
            h.record(me, p, Event::Write(v));
        }
        d.barrier().map_err(e)?;
        if round == 0 {
            for p in (0..a.pages).filter(|p| p % n != u64::from(me)) {
                let mut b = [0u8; PAGE];
                d.read(addr(p), &mut b, ReadMode::Invalidate).map_err(e)?;
                h.record(me, p, Event::Read(decode(&b)?));
            }
        }
    }
    for p in 0..a.pages {
        let mut b = [0u8; PAGE];
        d.read(base + (p * PAGE as u64) as i64, &mut b, ReadMode::Get)
            .map_err(e)?;
        h.last.entry(me).or_default().insert(p, decode(&b)?);
    }
    Ok(())
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
    let h = match node_run(&d, &a) {
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
    if let Err(e) = save(&a, &format!("node-{me}"), &h) {
        eprintln!("dmi stress: node {me}: {e}");
        return 1;
    }
    let (hits, misses) = dmi::pool::read_counts();
    let (w_hits, w_misses) = dmi::pool::write_counts();
    println!(
        "node {me}: {} events recorded, {hits} reads from the frames, {misses} through the engine, \
         {w_hits} writes to the frames, {w_misses} through the engine",
        h.len()
    );
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
