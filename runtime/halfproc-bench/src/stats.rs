// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Summaries of repeated timings: minimum and median, as the issue asks.
//!
//! The minimum is the least disturbed run (other jobs on a 2-core machine
//! only ever add time); the median shows what a typical run costs. Both
//! are reported; ratios are given for both.

/// Timings of one (strategy, size) cell, in nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// Every timed repetition, in the order measured.
    pub samples: Vec<u64>,
}

impl Stats {
    /// From raw samples (at least one).
    pub fn new(samples: Vec<u64>) -> Stats {
        assert!(!samples.is_empty(), "Stats of no samples");
        Stats { samples }
    }

    /// The smallest sample.
    pub fn min(&self) -> u64 {
        *self.samples.iter().min().expect("non-empty")
    }

    /// The median (mean of the middle two for an even count).
    pub fn median(&self) -> f64 {
        let mut s = self.samples.clone();
        s.sort_unstable();
        let n = s.len();
        if n % 2 == 1 {
            s[n / 2] as f64
        } else {
            (s[n / 2 - 1] as f64 + s[n / 2] as f64) / 2.0
        }
    }

    /// The largest sample.
    pub fn max(&self) -> u64 {
        *self.samples.iter().max().expect("non-empty")
    }
}

/// A duration in ns as short text with a unit (`812ns`, `12.3us`, `1.05s`).
pub fn fmt_ns(ns: f64) -> String {
    let (v, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "us")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    if v >= 100.0 {
        format!("{v:.0}{unit}")
    } else if v >= 10.0 {
        format!("{v:.1}{unit}")
    } else {
        format!("{v:.2}{unit}")
    }
}

/// A size `2^e` in bytes as text (`64B`, `16KiB`, `256MiB`).
pub fn fmt_size(bytes: usize) -> String {
    if bytes >= 1 << 30 && bytes % (1 << 30) == 0 {
        format!("{}GiB", bytes >> 30)
    } else if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{}MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes % (1 << 10) == 0 {
        format!("{}KiB", bytes >> 10)
    } else {
        format!("{bytes}B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_median() {
        let s = Stats::new(vec![5, 1, 9, 3]);
        assert_eq!(s.min(), 1);
        assert_eq!(s.max(), 9);
        assert_eq!(s.median(), 4.0);
        assert_eq!(Stats::new(vec![7, 2, 3]).median(), 3.0);
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_ns(812.0), "812ns");
        assert_eq!(fmt_ns(12_340.0), "12.3us");
        assert_eq!(fmt_ns(1_050_000_000.0), "1.05s");
        assert_eq!(fmt_size(64), "64B");
        assert_eq!(fmt_size(1 << 28), "256MiB");
    }
}
