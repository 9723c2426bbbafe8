// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The data `d` a writer produces, and the checksum a reader computes over it.
//!
//! The paper's protocol (section 4.4.2) has the reader "calculate the check
//! sum of the data". Here the checksum is also the proof that the strategy
//! moved the right bytes: the writer fills `d` from a per-repetition seed, the
//! reader checksums what it obtained, and after the timed part it compares
//! against [`expected`], which regenerates the pattern from the seed alone
//! (without reading any buffer the strategy touched). Stale data from an
//! earlier repetition, a short transfer, a reordered chunk or a torn copy all
//! change the sum.
//!
//! The checksum is a four-lane Fletcher sum over little-endian `u64` words
//! (`a += w; b += a` per lane, lane = word index mod 4): order-sensitive, one
//! add pair per word, so it runs at memory bandwidth on large buffers and does
//! not hide the cost of the copy it follows. [`Checksum`] is streaming: feeding
//! the same bytes in any split gives the same result, which is what lets
//! socket readers and pipelined readers sum chunks as they arrive.

/// Bytes per checksum block: four lanes of one `u64` each.
const BLOCK: usize = 32;

/// `splitmix64`: the word at index `i` of the pattern for `seed`.
#[inline]
fn word(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fill `buf` with the pattern for `seed` (the writer's "p writes d").
///
/// # Examples
///
/// ```
/// use halfproc_bench::pattern::{fill, checksum, expected};
/// let mut d = vec![0u8; 4096];
/// fill(&mut d, 7);
/// assert_eq!(checksum(&d), expected(7, 4096));
/// assert_ne!(checksum(&d), expected(8, 4096));
/// ```
pub fn fill(buf: &mut [u8], seed: u64) {
    let mut chunks = buf.chunks_exact_mut(8);
    let mut i = 0u64;
    for c in &mut chunks {
        c.copy_from_slice(&word(seed, i).to_le_bytes());
        i += 1;
    }
    let rest = chunks.into_remainder();
    let n = rest.len();
    rest.copy_from_slice(&word(seed, i).to_le_bytes()[..n]);
}

/// The checksum of the pattern for `seed` of `len` bytes, computed from the
/// seed without touching memory.
pub fn expected(seed: u64, len: usize) -> u64 {
    let mut c = Checksum::new();
    let words = len / 8;
    let mut i = 0u64;
    let mut block = [0u8; BLOCK];
    // Whole blocks straight into the lanes, the rest through `update`.
    while (i as usize) + 4 <= words {
        for (k, lane) in block.chunks_exact_mut(8).enumerate() {
            lane.copy_from_slice(&word(seed, i + k as u64).to_le_bytes());
        }
        c.update(&block);
        i += 4;
    }
    while (i as usize) < words {
        c.update(&word(seed, i).to_le_bytes());
        i += 1;
    }
    let tail = len % 8;
    c.update(&word(seed, i).to_le_bytes()[..tail]);
    c.finish()
}

/// The checksum of `data` in one call.
pub fn checksum(data: &[u8]) -> u64 {
    let mut c = Checksum::new();
    c.update(data);
    c.finish()
}

/// A streaming checksum: [`Checksum::update`] any number of times, then
/// [`Checksum::finish`].
///
/// # Invariants
///
/// `pending[..npending]` holds the bytes of an incomplete block; `npending <
/// BLOCK`. `len` counts every byte passed to `update`.
#[derive(Clone, Debug)]
pub struct Checksum {
    a: [u64; 4],
    b: [u64; 4],
    pending: [u8; BLOCK],
    npending: usize,
    len: u64,
}

impl Default for Checksum {
    fn default() -> Self {
        Self::new()
    }
}

impl Checksum {
    /// An empty checksum.
    pub const fn new() -> Self {
        Self {
            a: [0; 4],
            b: [0; 4],
            pending: [0; BLOCK],
            npending: 0,
            len: 0,
        }
    }

    #[inline]
    fn blocks(&mut self, data: &[u8]) {
        debug_assert_eq!(data.len() % BLOCK, 0);
        let (mut a, mut b) = (self.a, self.b);
        for blk in data.chunks_exact(BLOCK) {
            for lane in 0..4 {
                let w = u64::from_le_bytes(blk[lane * 8..lane * 8 + 8].try_into().unwrap());
                a[lane] = a[lane].wrapping_add(w);
                b[lane] = b[lane].wrapping_add(a[lane]);
            }
        }
        self.a = a;
        self.b = b;
    }

    /// Add `data` to the sum.
    pub fn update(&mut self, mut data: &[u8]) {
        self.len += data.len() as u64;
        if self.npending > 0 {
            let take = (BLOCK - self.npending).min(data.len());
            self.pending[self.npending..self.npending + take].copy_from_slice(&data[..take]);
            self.npending += take;
            data = &data[take..];
            if self.npending < BLOCK {
                return;
            }
            let block = self.pending;
            self.blocks(&block);
            self.npending = 0;
        }
        let whole = data.len() / BLOCK * BLOCK;
        self.blocks(&data[..whole]);
        let rest = &data[whole..];
        self.pending[..rest.len()].copy_from_slice(rest);
        // INVARIANT: `rest.len() < BLOCK`.
        self.npending = rest.len();
    }

    /// The checksum of `self`'s bytes followed by `next`'s, where each was
    /// summed on its own (out of order, or by another thread). `self` must
    /// cover a whole number of 32-byte blocks (any chunk of a power-of-two
    /// size >= 32 does); `next` may end with a partial block.
    ///
    /// Per lane, a Fletcher pair concatenates as `a = a1 + a2`,
    /// `b = b1 + b2 + m2 * a1`, with `m2` the blocks of the second part.
    ///
    /// # Panics
    ///
    /// If `self` ends with a partial block.
    pub fn combine(mut self, next: &Checksum) -> Checksum {
        assert_eq!(
            self.npending, 0,
            "combine: the first part must be whole blocks"
        );
        let m2 = next.len / BLOCK as u64;
        for lane in 0..4 {
            self.b[lane] = self.b[lane]
                .wrapping_add(next.b[lane])
                .wrapping_add(m2.wrapping_mul(self.a[lane]));
            self.a[lane] = self.a[lane].wrapping_add(next.a[lane]);
        }
        self.len += next.len;
        self.pending = next.pending;
        self.npending = next.npending;
        self
    }

    /// The final value; the length takes part, so trailing zeros count.
    pub fn finish(mut self) -> u64 {
        if self.npending > 0 {
            self.pending[self.npending..].fill(0);
            let block = self.pending;
            self.blocks(&block);
        }
        let mut h = self.len.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for lane in 0..4 {
            h = (h ^ self.a[lane])
                .rotate_left(23)
                .wrapping_mul(0xbf58_476d_1ce4_e5b9);
            h = (h ^ self.b[lane])
                .rotate_left(31)
                .wrapping_mul(0x94d0_49bb_1331_11eb);
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_split_gives_the_same_sum() {
        let mut d = vec![0u8; 1000];
        fill(&mut d, 42);
        let whole = checksum(&d);
        assert_eq!(whole, expected(42, 1000));
        for split in [1, 7, 31, 32, 33, 64, 999] {
            let mut c = Checksum::new();
            for piece in d.chunks(split) {
                c.update(piece);
            }
            assert_eq!(c.finish(), whole, "split {split}");
        }
    }

    #[test]
    fn detects_swaps_flips_and_truncation() {
        let mut d = vec![0u8; 4096];
        fill(&mut d, 1);
        let good = checksum(&d);
        let mut swapped = d.clone();
        swapped[..64].copy_from_slice(&d[64..128]);
        swapped[64..128].copy_from_slice(&d[..64]);
        assert_ne!(checksum(&swapped), good);
        let mut flipped = d.clone();
        flipped[4095] ^= 1;
        assert_ne!(checksum(&flipped), good);
        assert_ne!(checksum(&d[..4088]), good);
        let mut zero_tail = d.clone();
        zero_tail.extend_from_slice(&[0; 8]);
        assert_ne!(checksum(&zero_tail), good);
    }

    #[test]
    fn combine_equals_streaming() {
        let mut d = vec![0u8; 4 * 4096 + 200];
        fill(&mut d, 9);
        let parts: Vec<Checksum> = d
            .chunks(4096)
            .map(|c| {
                let mut s = Checksum::new();
                s.update(c);
                s
            })
            .collect();
        let whole = parts
            .iter()
            .skip(1)
            .fold(parts[0].clone(), |acc, p| acc.combine(p));
        assert_eq!(whole.finish(), checksum(&d));
        // Order matters: swapping two parts changes the sum.
        let swapped = parts[1].clone().combine(&parts[0]).combine(&parts[2]);
        let straight = parts[0].clone().combine(&parts[1]).combine(&parts[2]);
        assert_ne!(swapped.finish(), straight.finish());
    }

    #[test]
    fn seeds_differ() {
        assert_ne!(expected(1, 64), expected(2, 64));
        assert_ne!(expected(1, 64), expected(1, 72));
    }
}
