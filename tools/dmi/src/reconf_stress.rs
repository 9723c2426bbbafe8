// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `dmi reconf-stress`: the coherence workload of `dmi stress` as a
//! reconfigurable program (the Rust API of `dmi::reconf`), so that nodes
//! join and leave while it runs (`dmi run --grow-at/--shrink-at`). Each
//! itergroup thread is a client of its own; it writes its history to
//! DIR/client-NODE-K.json for `dmi check DIR`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use clap::Args;
use dmi::check::{Event, History};
use dmi::reconf::{self, Program};
use dmi::sim::Rng;
use dmi::{Dmi, DmiError, ReadMode, WriteMode};

/// Random reads and writes in every mode as a reconfigurable program.
///
/// DMI_main maps PAGES pages and calls DMI_rescale on one node; every
/// itergroup thread does OPS random accesses per iteration, ITERS
/// iterations in all (counted across itergroups), calling
/// DMI_check_rescale before each. Run it under `dmi run -n 1 --grow-at
/// ITER:K --shrink-at ITER:K`, then `dmi check DIR`.
#[derive(Args, Clone)]
pub struct ReconfStressArgs {
    /// Where each itergroup thread writes its history.
    #[arg(long)]
    dir: PathBuf,
    #[arg(long, default_value_t = 12)]
    iters: u64,
    #[arg(long, default_value_t = 2)]
    ops: usize,
    #[arg(long, default_value_t = 2)]
    pages: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Pause after each iteration, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pause_ms: u64,
}

const PAGE: usize = 16;

struct Stress {
    a: ReconfStressArgs,
    /// Itergroups this process ran (for unique client ids).
    groups: AtomicU32,
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("dmi reconf-stress: {what}: {e}");
    std::process::exit(1);
}

fn decode(b: &[u8]) -> u64 {
    let lo = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
    let hi = u64::from_le_bytes(b[8..16].try_into().unwrap_or_default());
    if lo != hi {
        fail("torn read", format!("{lo:#x} / {hi:#x}"));
    }
    lo
}

/// The shared state in global memory: iterations done, pages' base.
fn load(d: &Dmi, addr: i64) -> (u64, i64) {
    let mut b = [0u8; 16];
    d.read(addr, &mut b, ReadMode::Get)
        .unwrap_or_else(|e| fail("restore", e));
    let iter = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
    (
        iter,
        i64::from_le_bytes(b[8..].try_into().unwrap_or_default()),
    )
}

impl Stress {
    fn access(
        &self,
        d: &Dmi,
        rng: &mut Rng,
        base: i64,
        me: u32,
        seq: &mut u64,
        h: &mut History,
    ) -> Result<(), DmiError> {
        let pages = self.a.pages;
        let addr = |p: u64| base + (p * PAGE as u64) as i64;
        let p1 = rng.below(pages);
        let mut ps = vec![p1];
        if pages > 1 && rng.below(4) == 0 {
            ps.push((p1 + 1 + rng.below(pages - 1)) % pages);
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
            d.group_read(&mut items, mode)?;
            for (&p, b) in ps.iter().zip(&bufs) {
                h.record(me, p, Event::Read(decode(b)));
            }
        } else {
            let mode = [WriteMode::Exclusive, WriteMode::Put][rng.below(2) as usize];
            let mut data = Vec::new();
            for &p in &ps {
                *seq += 1;
                let v = (u64::from(me) + 1) << 32 | *seq;
                data.push((addr(p), [v.to_le_bytes(), v.to_le_bytes()].concat()));
                h.record(me, p, Event::Write(v));
            }
            let items: Vec<(i64, &[u8])> = data.iter().map(|(a, v)| (*a, &v[..])).collect();
            d.group_write(&items, mode)?;
        }
        Ok(())
    }
}

impl Program for Stress {
    fn main(&self, d: &Dmi, _args: &[String]) {
        let base = d
            .mmap(PAGE as i64, self.a.pages as i64)
            .unwrap_or_else(|e| fail("DMI_mmap", e));
        let addr = d.mmap(16, 1).unwrap_or_else(|e| fail("DMI_mmap", e));
        let mut b = [0u8; 16];
        b[8..].copy_from_slice(&base.to_le_bytes());
        d.write(addr, &b, WriteMode::Put)
            .unwrap_or_else(|e| fail("DMI_write", e));
        reconf::rescale(d, addr, 1).unwrap_or_else(|e| fail("DMI_rescale", e));
        let (iter, _) = load(d, addr);
        println!("reconf-stress: {iter} iterations");
    }

    fn itergroup(&self, d: &Dmi, rank: i32, _pnum: i32, addr: i64) -> i32 {
        let (mut iter, base) = load(d, addr);
        let k = self.groups.fetch_add(1, Ordering::Relaxed);
        let me = d.rank() << 8 | k;
        let mut rng = Rng::new(self.a.seed.wrapping_mul(1_000_003) + u64::from(me));
        let mut h = History::default();
        let mut seq = 0;
        while iter < self.a.iters {
            if reconf::check_rescale(d).unwrap_or_else(|e| fail("DMI_check_rescale", e)) {
                break;
            }
            for _ in 0..self.a.ops {
                self.access(d, &mut rng, base, me, &mut seq, &mut h)
                    .unwrap_or_else(|e| fail("access", e));
            }
            d.barrier_of(reconf::itergroup_size().unwrap_or(1))
                .unwrap_or_else(|e| fail("barrier", e));
            iter += 1;
            std::thread::sleep(std::time::Duration::from_millis(self.a.pause_ms));
        }
        if rank == 0 {
            let mut b = [0u8; 16];
            b[..8].copy_from_slice(&iter.to_le_bytes());
            b[8..].copy_from_slice(&base.to_le_bytes());
            d.write(addr, &b, WriteMode::Put)
                .unwrap_or_else(|e| fail("checkpoint", e));
        }
        let path = self.a.dir.join(format!("client-{}-{k}.json", d.rank()));
        let r = std::fs::create_dir_all(&self.a.dir)
            .and_then(|_| std::fs::write(&path, serde_json::to_vec(&h).unwrap_or_default()));
        if let Err(e) = r {
            fail(&path.display().to_string(), e);
        }
        i32::from(iter != self.a.iters)
    }
}

pub fn reconf_stress(a: ReconfStressArgs) -> i32 {
    reconf::main(Box::new(Stress {
        a,
        groups: AtomicU32::new(0),
    }))
}
