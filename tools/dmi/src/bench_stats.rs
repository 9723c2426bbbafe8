// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! One measured operation of `dmi bench`: its per-repetition times reduced
//! to the minimum and the median, and the bandwidths those give.

use std::time::Duration;

use serde_json::{json, Value};

#[derive(Debug, Clone)]
pub struct Sample {
    pub op: String,
    pub mode: String,
    /// Bytes moved by one operation.
    pub size: usize,
    pub reps: usize,
    pub min: Duration,
    pub median: Duration,
}

impl Sample {
    pub fn new(op: &str, mode: &str, size: usize, mut times: Vec<Duration>) -> Sample {
        times.sort();
        let reps = times.len();
        let (min, median) = match reps {
            0 => (Duration::ZERO, Duration::ZERO),
            _ => (times[0], times[reps / 2]),
        };
        Sample {
            op: op.into(),
            mode: mode.into(),
            size,
            reps,
            min,
            median,
        }
    }

    /// MB/s (10^6 bytes per second) at time `t`.
    fn mbps(&self, t: Duration) -> f64 {
        if t.is_zero() {
            return 0.0;
        }
        self.size as f64 / t.as_secs_f64() / 1e6
    }

    pub fn to_json(&self) -> Value {
        json!({
            "op": self.op,
            "mode": self.mode,
            "size": self.size,
            "reps": self.reps,
            "min_us": self.min.as_secs_f64() * 1e6,
            "median_us": self.median.as_secs_f64() * 1e6,
            "max_mb_s": self.mbps(self.min),
            "median_mb_s": self.mbps(self.median),
        })
    }

    pub fn from_json(v: &Value) -> Option<Sample> {
        let us = |k: &str| v[k].as_f64().map(|x| Duration::from_secs_f64(x / 1e6));
        Some(Sample {
            op: v["op"].as_str()?.into(),
            mode: v["mode"].as_str()?.into(),
            size: v["size"].as_u64()? as usize,
            reps: v["reps"].as_u64()? as usize,
            min: us("min_us")?,
            median: us("median_us")?,
        })
    }

    /// One line of the human-readable table.
    pub fn row(&self) -> String {
        format!(
            "{:<42} {:<11} {:>8} {:>11.3} {:>11.3} {:>10.1} {:>10.1}",
            self.op,
            self.mode,
            self.size,
            self.min.as_secs_f64() * 1e6,
            self.median.as_secs_f64() * 1e6,
            self.mbps(self.min),
            self.mbps(self.median)
        )
    }

    pub fn header() -> String {
        format!(
            "{:<42} {:<11} {:>8} {:>11} {:>11} {:>10} {:>10}",
            "operation", "mode", "bytes", "min us", "median us", "max MB/s", "med MB/s"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_median_and_bandwidth() {
        let t = |us| Duration::from_micros(us);
        let s = Sample::new("x", "GET", 1_000_000, vec![t(300), t(100), t(200)]);
        assert_eq!((s.min, s.median, s.reps), (t(100), t(200), 3));
        let j = s.to_json();
        assert_eq!(j["max_mb_s"].as_f64().unwrap().round(), 10_000.0);
        assert_eq!(j["median_mb_s"].as_f64().unwrap().round(), 5_000.0);
        let back = Sample::from_json(&j).unwrap();
        assert_eq!((back.size, back.reps, back.median), (s.size, 3, s.median));
    }
}
