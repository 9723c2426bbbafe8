//! Test input shared by the engine's and the node daemon's tests (the
//! latter include this file by path).

use std::path::Path;

/// Deterministic pseudo-random text of `len` bytes (compressible, not trivially).
pub fn input_file(path: &Path, len: usize) {
    let words = [
        "half",
        "process",
        "migrate",
        "checkpoint",
        "restore",
        "page",
        "vma",
        "signal",
        "frame",
        "kernel",
    ];
    let mut s = String::with_capacity(len + 16);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while s.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(words[(x % 10) as usize]);
        s.push(if x % 7 == 0 { '\n' } else { ' ' });
        if x % 5 == 0 {
            s.push_str(&format!("{}", x % 100000));
        }
    }
    std::fs::write(path, &s.as_bytes()[..len]).unwrap();
}
