// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The node side of `dmi bench`: every node runs this; node 0 times its
//! accesses to pages whose home and owner is node 1 (so each remote access
//! is one request and one answer, no forwarding), the others serve and
//! meet it at barriers. A miss is timed on a page this node never touched
//! before (one fresh page per repetition); a hit on a page it holds. Each
//! size starts with a few untimed accesses (warm-up).

use std::time::{Duration, Instant};

use dmi::addr::{home, PageId, REGION_SHIFT};
use dmi::{Dmi, DmiError, ReadMode, WriteMode};

use crate::bench_stats::Sample;

pub struct Opts {
    pub sizes: Vec<usize>,
    pub reps: usize,
    /// Accesses in one group read or write.
    pub group: usize,
}

/// Times `reps` calls of `f(i)` one by one.
fn time(
    reps: usize,
    mut f: impl FnMut(usize) -> Result<(), DmiError>,
) -> Result<Vec<Duration>, DmiError> {
    let mut out = Vec::with_capacity(reps);
    for i in 0..reps {
        let t = Instant::now();
        f(i)?;
        out.push(t.elapsed());
    }
    Ok(out)
}

/// Pages of one size: a fresh region, and its pages homed at node 1.
struct Pages {
    base: i64,
    at1: Vec<i64>,
    next: usize,
}

impl Pages {
    fn map(d: &Dmi, size: usize, want: usize) -> Result<Pages, DmiError> {
        let n = d.size();
        let num = want * n as usize + n as usize;
        if d.rank() == 0 {
            let base = d.mmap(size as i64, num as i64)?;
            d.write(d.root(), &base.to_le_bytes(), WriteMode::Put)?;
        }
        d.barrier()?;
        let mut b = [0u8; 8];
        d.read(d.root(), &mut b, ReadMode::Get)?;
        d.barrier()?;
        let base = i64::from_le_bytes(b);
        let region = (base >> REGION_SHIFT) as u32;
        let members = d.members()?;
        let at1 = (0..num as u64)
            .filter(|&index| home(PageId { region, index }, &members) == 1)
            .map(|i| base + (i * size as u64) as i64)
            .collect();
        Ok(Pages { base, at1, next: 0 })
    }

    /// `k` pages no node touched yet (every node takes the same ones).
    fn fresh(&mut self, k: usize) -> Vec<i64> {
        let v = self.at1[self.next..self.next + k].to_vec();
        self.next += k;
        v
    }
}

/// Every node runs the same sequence; node 0 returns the samples.
pub fn run(d: &Dmi, o: &Opts) -> Result<Vec<Sample>, DmiError> {
    if d.size() < 2 {
        return Err(DmiError::BadArgument(
            "dmi bench measures between nodes: run it on 2 or more".into(),
        ));
    }
    let mut all = Vec::new();
    for &s in &o.sizes {
        all.extend(one_size(d, o, s)?);
    }
    Ok(all)
}

fn one_size(d: &Dmi, o: &Opts, s: usize) -> Result<Vec<Sample>, DmiError> {
    let (me, r) = (d.rank(), o.reps);
    let mut p = Pages::map(d, s, 3 * r + o.group + 4)?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; s];
    let data = vec![0xa5u8; s];
    let one = p.fresh(1)[0];
    let inv = p.fresh(r);
    let upd = p.fresh(r);
    let exc = p.fresh(r);
    let grp = p.fresh(o.group);
    let (t_upd, t_inv) = (p.fresh(1)[0], p.fresh(1)[0]);
    if me == 0 {
        // Warm-up (untimed): connections, socket buffers and the allocator
        // at this size, so the first timed operation is not a cold one.
        for _ in 0..3 {
            d.read(one, &mut buf, ReadMode::Get)?;
            d.write(one, &data, WriteMode::Put)?;
        }
        let mut m = |op: &str, mode: &str, size: usize, t: Vec<Duration>| {
            out.push(Sample::new(op, mode, size, t));
        };
        m(
            "read (remote owner)",
            "GET",
            s,
            time(r, |_| d.read(one, &mut buf, ReadMode::Get))?,
        );
        m(
            "write (remote owner, no copies)",
            "PUT",
            s,
            time(r, |_| d.write(one, &data, WriteMode::Put))?,
        );
        let t = time(r, |i| d.read(inv[i], &mut buf, ReadMode::Invalidate))?;
        m("read miss (fetch page, cache it)", "INVALIDATE", s, t);
        m(
            "read hit (cached copy)",
            "INVALIDATE",
            s,
            time(r, |_| d.read(inv[0], &mut buf, ReadMode::Invalidate))?,
        );
        let t = time(r, |i| d.read(upd[i], &mut buf, ReadMode::Update))?;
        m("read miss (fetch page, cache it)", "UPDATE", s, t);
        m(
            "read hit (cached copy)",
            "UPDATE",
            s,
            time(r, |_| d.read(upd[0], &mut buf, ReadMode::Update))?,
        );
        let t = time(r, |i| d.write(exc[i], &data, WriteMode::Exclusive))?;
        m("write miss (take ownership)", "EXCLUSIVE", s, t);
        m(
            "write hit (owner)",
            "EXCLUSIVE",
            s,
            time(r, |_| d.write(exc[0], &data, WriteMode::Exclusive))?,
        );
        let mut bufs: Vec<Vec<u8>> = grp.iter().map(|_| vec![0u8; s]).collect();
        let gs = s * o.group;
        let t = time(r, |_| {
            let mut items: Vec<(i64, &mut [u8])> = grp
                .iter()
                .zip(bufs.iter_mut())
                .map(|(a, b)| (*a, b.as_mut_slice()))
                .collect();
            d.group_read(&mut items, ReadMode::Get)
        })?;
        m(&format!("group read of {} pages", o.group), "GET", gs, t);
        let items: Vec<(i64, &[u8])> = grp.iter().map(|a| (*a, data.as_slice())).collect();
        let t = time(r, |_| d.group_write(&items, WriteMode::Put))?;
        m(&format!("group write of {} pages", o.group), "PUT", gs, t);
        let t = time(r, |i| d.read(grp[i % o.group], &mut buf, ReadMode::Get))?;
        m("read, one of the group's pages", "GET", s, t);
    }
    d.barrier()?;
    // A write while a third node caches the page: the owner updates or
    // invalidates that copy and waits for its answer before replying.
    if d.size() >= 3 {
        if me == 2 {
            d.read(t_upd, &mut buf, ReadMode::Update)?;
        }
        d.barrier()?;
        if me == 0 {
            let t = time(r, |_| d.write(t_upd, &data, WriteMode::Put))?;
            out.push(Sample::new(
                "write, a 3rd node has an UPDATE copy",
                "PUT",
                s,
                t,
            ));
        }
        d.barrier()?;
        let mut t = Vec::with_capacity(r);
        for _ in 0..r {
            if me == 2 {
                d.read(t_inv, &mut buf, ReadMode::Invalidate)?;
            }
            d.barrier()?;
            if me == 0 {
                let t0 = Instant::now();
                d.write(t_inv, &data, WriteMode::Put)?;
                t.push(t0.elapsed());
            }
            d.barrier()?;
        }
        if me == 0 {
            out.push(Sample::new(
                "write, a 3rd node has an INVALIDATE copy",
                "PUT",
                s,
                t,
            ));
        }
    }
    // Each barrier round trip, as the collective the others wait in.
    let t = time(r, |_| d.barrier())?;
    if me == 0 {
        out.push(Sample::new("barrier (all nodes)", "", 0, t));
        d.munmap(p.base)?;
    }
    d.barrier()?;
    Ok(out)
}
