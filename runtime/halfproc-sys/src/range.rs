// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The shared range `[2^45, 2^46)` and the one Rust copy of its bounds check.
//!
//! The bounds come from `halfproc-uapi` (which checks them against the patch
//! series). This is the one Rust copy of the check in user space; C
//! programs in `tests/` use `in_range()` of `tests/lib/halfproc_test.h`
//! (`tests/c_range.rs` checks that the two agree), and the kernel keeps its
//! own (`include/linux/halfproc.h` of patch 0002, `kmod/halfproc.rs`). Both
//! predicates here compute `addr + len` with overflow checked, so a huge
//! `len` cannot wrap around into the range.
//!
//! C header: `include/uapi/linux/halfproc.h`.

pub use halfproc_uapi::{HALFPROC_RANGE_END, HALFPROC_RANGE_START};

/// Whether `[addr, addr + len)` lies entirely inside the shared range.
///
/// # Examples
///
/// ```
/// use halfproc_sys::range::{in_shared_range, HALFPROC_RANGE_START};
/// assert!(in_shared_range(HALFPROC_RANGE_START, 4096));
/// assert!(!in_shared_range(HALFPROC_RANGE_START - 4096, 8192));
/// assert!(!in_shared_range(u64::MAX, 2));
/// ```
pub const fn in_shared_range(addr: u64, len: u64) -> bool {
    match addr.checked_add(len) {
        Some(end) => addr >= HALFPROC_RANGE_START && end <= HALFPROC_RANGE_END,
        None => false,
    }
}

/// Whether `[addr, addr + len)` touches the shared range at all (an empty
/// range touches nothing).
///
/// # Examples
///
/// ```
/// use halfproc_sys::range::{overlaps_shared_range, HALFPROC_RANGE_END};
/// assert!(overlaps_shared_range(HALFPROC_RANGE_END - 1, 2));
/// assert!(!overlaps_shared_range(HALFPROC_RANGE_END, 4096));
/// ```
pub const fn overlaps_shared_range(addr: u64, len: u64) -> bool {
    let end = match addr.checked_add(len) {
        Some(end) => end,
        None => u64::MAX,
    };
    len != 0 && addr < HALFPROC_RANGE_END && end > HALFPROC_RANGE_START
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = HALFPROC_RANGE_START;
    const E: u64 = HALFPROC_RANGE_END;

    #[test]
    fn inside_at_the_edges() {
        assert!(in_shared_range(S, E - S));
        assert!(in_shared_range(S, 1));
        assert!(in_shared_range(E - 1, 1));
        assert!(in_shared_range(S, 0));
        // An empty range at the end is inside, as in the C helper.
        assert!(in_shared_range(E, 0));
        assert!(!in_shared_range(S, E - S + 1));
        assert!(!in_shared_range(S - 1, 1));
        assert!(!in_shared_range(S - 1, 2));
        assert!(!in_shared_range(E, 1));
        assert!(!in_shared_range(E - 1, 2));
        assert!(!in_shared_range(0, 0));
    }

    #[test]
    fn inside_does_not_wrap() {
        // addr + len overflows u64: must not wrap around into the range.
        assert!(!in_shared_range(S, u64::MAX));
        assert!(!in_shared_range(E - 1, u64::MAX - (E - 1) + 1));
        assert!(!in_shared_range(u64::MAX, 2));
        assert!(!in_shared_range(u64::MAX, S + 1));
        assert!(!in_shared_range(u64::MAX - S + 1, 2 * S));
    }

    #[test]
    fn overlaps_at_the_edges() {
        assert!(overlaps_shared_range(S - 1, 2));
        assert!(overlaps_shared_range(E - 1, 1));
        assert!(overlaps_shared_range(S, 1));
        assert!(!overlaps_shared_range(S - 1, 1));
        assert!(!overlaps_shared_range(E, 1));
        assert!(!overlaps_shared_range(S, 0));
        assert!(!overlaps_shared_range(S + 4096, 0));
        // A range that saturates instead of wrapping still overlaps.
        assert!(overlaps_shared_range(0, u64::MAX));
        assert!(overlaps_shared_range(S, u64::MAX));
        assert!(!overlaps_shared_range(E, u64::MAX));
    }
}
