// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Byte counts as people write them: `4096`, `64K`, `512M`, `16G`.
//!
//! Used for `HALFPROC_ARENA_SIZE` (the runtime) and `--chunk` (the
//! benchmarks).

/// Parses a byte count with an optional `K`/`M`/`G` suffix (either case,
/// powers of 1024); `None` when malformed or when it overflows `u64`.
///
/// # Examples
///
/// ```
/// use halfproc_sys::parse_size;
/// assert_eq!(parse_size("64M"), Some(64 << 20));
/// assert_eq!(parse_size(" 4096 "), Some(4096));
/// assert_eq!(parse_size("x"), None);
/// ```
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, shift) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 10),
        b'M' | b'm' => (&s[..s.len() - 1], 20),
        b'G' | b'g' => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    num.parse::<u64>().ok()?.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("1k"), Some(1024));
        assert_eq!(parse_size("64K"), Some(64 << 10));
        assert_eq!(parse_size("3m"), Some(3 << 20));
        assert_eq!(parse_size("16G"), Some(16 << 30));
        assert_eq!(parse_size(&u64::MAX.to_string()), Some(u64::MAX));
    }

    #[test]
    fn malformed_or_too_big() {
        for bad in ["", " ", "K", "-1", "1.5M", "1T", "12KB", "K12", "1 K", "ü"] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
        assert_eq!(parse_size("99999999999999999999G"), None);
        // 2^34 G = 2^64 bytes: one too many.
        assert_eq!(parse_size("17179869184G"), None);
        assert_eq!(parse_size("17179869183G"), Some(17179869183 << 30));
    }
}
