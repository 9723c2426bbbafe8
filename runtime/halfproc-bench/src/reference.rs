// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The physical reference, measured in the same run: what one core can do
//! inside one process.
//!
//! * `checksum`: sum `d` in place: the floor of any strategy (it is all the
//!   zero-copy strategies do).
//! * `memcpy+checksum`: copy `d` into a second buffer, then sum the copy:
//!   what one single copy costs when one core does everything (`cma`,
//!   `dmread` do this, plus a system call).
//! * memcpy bandwidth: bytes per second of a single-core `memcpy` at the
//!   largest size, the number that caps any one-core copy.
//!
//! Both buffers are private and pre-faulted; `d` is rewritten before every
//! repetition, as the writer does in the two-process runs, so caches start in
//! the same state. The reference is measured again in every round of
//! `bench copy`, so it sees the same drifts of the machine as the
//! strategies.

use crate::error::Result;
use crate::os;
use crate::pattern;
use crate::stats::Stats;
use halfproc_sys::Region;

/// Reference timings for one size.
#[derive(Clone, Debug)]
pub struct RefPoint {
    /// Bytes.
    pub size: usize,
    /// Sum in place.
    pub checksum: Stats,
    /// Copy, then sum the copy.
    pub memcpy_checksum: Stats,
    /// Copy alone.
    pub memcpy: Stats,
}

/// The reference for one CPU.
#[derive(Clone, Debug)]
pub struct Reference {
    /// The CPU it ran on.
    pub cpu: usize,
    /// Per size.
    pub points: Vec<RefPoint>,
}

impl Reference {
    /// Single-core memcpy bandwidth at the largest size, bytes/s (from the
    /// fastest repetition).
    pub fn memcpy_bytes_per_s(&self) -> Option<f64> {
        let p = self.points.iter().max_by_key(|p| p.size)?;
        Some(p.size as f64 / (p.memcpy.min() as f64 / 1e9))
    }

    /// The same from the median repetition.
    pub fn memcpy_bytes_per_s_median(&self) -> Option<f64> {
        let p = self.points.iter().max_by_key(|p| p.size)?;
        Some(p.size as f64 / (p.memcpy.median() / 1e9))
    }
}

impl Reference {
    /// Add the samples of another measurement of the same sizes.
    pub fn merge(&mut self, other: Reference) {
        for (p, o) in self.points.iter_mut().zip(other.points) {
            assert_eq!(p.size, o.size, "merge of references of different sizes");
            p.checksum.samples.extend(o.checksum.samples);
            p.memcpy_checksum.samples.extend(o.memcpy_checksum.samples);
            p.memcpy.samples.extend(o.memcpy.samples);
        }
    }
}

/// Measure the reference on `cpu` for `sizes`, `reps` timed repetitions after
/// `warmup` untimed ones.
pub fn measure(cpu: usize, sizes: &[usize], warmup: usize, reps: usize) -> Result<Reference> {
    let max = sizes.iter().copied().max().unwrap_or(64);
    let mut src = Region::private(max)?;
    let mut dst = Region::private(max)?;
    src.prefault_write();
    dst.prefault_write();
    let prior = os::allowed_cpus()?;
    os::pin_to(cpu)?;
    let mut points = Vec::new();
    for &size in sizes {
        let (mut c, mut mc, mut m) = (Vec::new(), Vec::new(), Vec::new());
        for rep in 0..warmup + reps {
            let seed = rep as u64 ^ (size as u64) << 8;
            let want = pattern::expected(seed, size);

            pattern::fill(&mut src.bytes_mut()[..size], seed);
            let t = os::now_ns();
            let sum = pattern::checksum(&src.bytes()[..size]);
            let t_c = os::now_ns() - t;
            assert_eq!(sum, want, "reference checksum");

            pattern::fill(&mut src.bytes_mut()[..size], seed);
            let t = os::now_ns();
            dst.bytes_mut()[..size].copy_from_slice(&src.bytes()[..size]);
            let sum = pattern::checksum(&dst.bytes()[..size]);
            let t_mc = os::now_ns() - t;
            assert_eq!(sum, want, "reference memcpy+checksum");

            pattern::fill(&mut src.bytes_mut()[..size], seed);
            let t = os::now_ns();
            dst.bytes_mut()[..size].copy_from_slice(&src.bytes()[..size]);
            std::hint::black_box(dst.bytes()[size - 1]);
            let t_m = os::now_ns() - t;

            if rep >= warmup {
                c.push(t_c);
                mc.push(t_mc);
                m.push(t_m);
            }
        }
        points.push(RefPoint {
            size,
            checksum: Stats::new(c),
            memcpy_checksum: Stats::new(mc),
            memcpy: Stats::new(m),
        });
    }
    os::set_cpus(&prior)?;
    Ok(Reference { cpu, points })
}
