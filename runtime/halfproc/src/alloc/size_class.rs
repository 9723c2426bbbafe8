// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Size classes of the small-object allocator.
//!
//! Sixteen-byte steps up to 128 bytes, then four classes per power of two up
//! to [`MAX_SMALL`] (worst-case internal fragmentation 25 %, typically
//! 12.5 %). A 64 KiB page serves exactly one class.

/// Largest size served from size-class pages; larger requests take whole
/// pages from the arena.
pub const MAX_SMALL: usize = 8192;

/// Number of small size classes.
pub const NUM_CLASSES: usize = 32;

/// Block size of every class.
pub const CLASS_SIZES: [u32; NUM_CLASSES] = build_sizes();

const fn build_sizes() -> [u32; NUM_CLASSES] {
    let mut out = [0u32; NUM_CLASSES];
    let mut i = 0;
    while i < 8 {
        out[i] = 16 * (i as u32 + 1);
        i += 1;
    }
    let mut base = 128u32;
    while i < NUM_CLASSES {
        let step = base / 4;
        let mut k = 1;
        while k <= 4 && i < NUM_CLASSES {
            out[i] = base + step * k;
            i += 1;
            k += 1;
        }
        base *= 2;
    }
    out
}

/// `(size + 15) / 16` -> class, for every small size.
static LOOKUP: [u8; MAX_SMALL / 16 + 1] = build_lookup();

const fn build_lookup() -> [u8; MAX_SMALL / 16 + 1] {
    let sizes = build_sizes();
    let mut out = [0u8; MAX_SMALL / 16 + 1];
    let mut q = 0;
    let mut c = 0;
    while q <= MAX_SMALL / 16 {
        while (sizes[c] as usize) < q * 16 {
            c += 1;
        }
        out[q] = c as u8;
        q += 1;
    }
    out
}

/// The class serving `size` bytes, or `None` above [`MAX_SMALL`].
///
/// # Examples
///
/// ```
/// use halfproc::alloc::size_class::{class_of, CLASS_SIZES};
/// assert_eq!(CLASS_SIZES[class_of(1).unwrap()], 16);
/// assert_eq!(CLASS_SIZES[class_of(129).unwrap()], 160);
/// assert_eq!(class_of(8193), None);
/// ```
#[inline(always)]
pub fn class_of(size: usize) -> Option<usize> {
    if size <= MAX_SMALL {
        Some(LOOKUP[(size + 15) >> 4] as usize)
    } else {
        None
    }
}

/// The smallest class of at least `size` bytes whose block size is a
/// multiple of `align` (so every block of its pages is `align`-aligned).
///
/// # Examples
///
/// ```
/// use halfproc::alloc::size_class::{aligned_class_of, CLASS_SIZES};
/// let c = aligned_class_of(100, 64).unwrap();
/// assert_eq!(CLASS_SIZES[c] % 64, 0);
/// assert!(CLASS_SIZES[c] >= 100);
/// ```
pub fn aligned_class_of(size: usize, align: usize) -> Option<usize> {
    let mut c = class_of(size.max(align))?;
    while c < NUM_CLASSES {
        if CLASS_SIZES[c] as usize % align == 0 {
            return Some(c);
        }
        c += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_increasing_and_16_aligned() {
        for w in CLASS_SIZES.windows(2) {
            assert!(w[0] < w[1]);
        }
        assert!(CLASS_SIZES.iter().all(|s| s % 16 == 0));
        assert_eq!(CLASS_SIZES[NUM_CLASSES - 1] as usize, MAX_SMALL);
    }

    #[test]
    fn every_size_gets_the_smallest_fitting_class() {
        for size in 0..=MAX_SMALL {
            let c = class_of(size).unwrap();
            assert!(CLASS_SIZES[c] as usize >= size, "size {size}");
            if c > 0 {
                assert!((CLASS_SIZES[c - 1] as usize) < size.max(1), "size {size}");
            }
        }
    }

    #[test]
    fn fragmentation_is_bounded() {
        for size in 129..=MAX_SMALL {
            let c = class_of(size).unwrap();
            assert!(
                CLASS_SIZES[c] as f64 <= size as f64 * 1.25 + 16.0,
                "size {size}"
            );
        }
    }

    #[test]
    fn aligned_classes_are_multiples() {
        for align in [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192] {
            for size in [1, 17, 100, 1000, 5000] {
                if let Some(c) = aligned_class_of(size, align) {
                    assert_eq!(CLASS_SIZES[c] as usize % align, 0);
                    assert!(CLASS_SIZES[c] as usize >= size);
                }
            }
        }
        assert_eq!(aligned_class_of(1, 16384), None);
    }
}
