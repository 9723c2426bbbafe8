// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The halfproc ABI, as seen from user space.
//!
//! This crate mirrors `include/uapi/linux/halfproc.h` from the patch series
//! (`patches/`) and is the only place user-space crates take these numbers
//! from (through `halfproc-sys`, which also holds the bounds check of the
//! range). A unit test parses the header out of the patch series and checks
//! that every constant here matches it, so the two cannot drift apart.
//!
//! C header: `include/uapi/linux/halfproc.h` (added by `patches/0001-*`).
#![no_std]

/// First address of the shared range: `2^45`.
pub const HALFPROC_RANGE_START: u64 = 1 << 45;
/// One past the last address of the shared range: `2^46`.
pub const HALFPROC_RANGE_END: u64 = 1 << 46;

/// `clone3()` flag: the child joins the caller's half-process set.
///
/// A clone3-only flag (bit 40); legacy `clone()` cannot express it. An
/// unpatched kernel rejects it with `EINVAL` (unknown flag); a patched kernel
/// without the module loaded rejects it with `EOPNOTSUPP`.
pub const CLONE_HALFPROC: u64 = 1 << 40;

/// `mmap()` flag: place the mapping in the shared range.
///
/// An unpatched kernel silently ignores unknown `mmap` flags on anonymous
/// mappings, so callers must check that the result lies in the shared range
/// (`halfproc_sys::range::in_shared_range`, which `halfproc_sys::Region`
/// applies to every such mapping).
pub const MAP_HALFPROC: i32 = 0x0020_0000;

/// x86_64 system call numbers added by the patch series.
pub mod nr {
    /// `ssize_t dmread(pid_t pid, const void *ptr, size_t size, void *buf)`
    pub const DMREAD: i64 = 470;
    /// `ssize_t dmwrite(pid_t pid, void *ptr, size_t size, const void *buf)`
    pub const DMWRITE: i64 = 471;
    /// `ssize_t dmreadv(pid_t pid, const struct iovec *local, unsigned long liovcnt,
    ///                  const struct iovec *remote, unsigned long riovcnt, unsigned long flags)`
    pub const DMREADV: i64 = 472;
    /// `ssize_t dmwritev(...)`, the same arguments as [`DMREADV`].
    pub const DMWRITEV: i64 = 473;
}

/// The largest number of `iovec`s one `dmreadv`/`dmwritev` call accepts
/// (the same limit as `process_vm_readv`: `UIO_MAXIOV`).
pub const DM_IOV_MAX: usize = 1024;

/// `struct clone_args` of `clone3()` (`include/uapi/linux/sched.h`), version 2
/// (`CLONE_ARGS_SIZE_VER2`, 88 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CloneArgs {
    /// `CLONE_*` flags, [`CLONE_HALFPROC`] included.
    pub flags: u64,
    /// Where to store the pidfd (`CLONE_PIDFD`).
    pub pidfd: u64,
    /// Where to store the child TID in the child (`CLONE_CHILD_SETTID`).
    pub child_tid: u64,
    /// Where to store the child TID in the parent (`CLONE_PARENT_SETTID`).
    pub parent_tid: u64,
    /// Signal sent to the parent when the child exits (e.g. `SIGCHLD`).
    pub exit_signal: u64,
    /// Lowest address of the child's stack, or 0.
    pub stack: u64,
    /// Size of the child's stack, or 0.
    pub stack_size: u64,
    /// TLS for the child (`CLONE_SETTLS`).
    pub tls: u64,
    /// Array of TIDs to use per PID namespace level (`set_tid`).
    pub set_tid: u64,
    /// Number of elements in `set_tid`.
    pub set_tid_size: u64,
    /// cgroup fd (`CLONE_INTO_CGROUP`).
    pub cgroup: u64,
}

/// Size of [`CloneArgs`] as passed to `clone3()`.
pub const CLONE_ARGS_SIZE: usize = core::mem::size_of::<CloneArgs>();

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::String;

    #[test]
    fn clone_args_layout_matches_ver2() {
        assert_eq!(CLONE_ARGS_SIZE, 88);
        assert_eq!(core::mem::align_of::<CloneArgs>(), 8);
    }

    #[test]
    fn range_is_p4d_aligned_and_inside_user_space() {
        // 512 GiB slots: entries 64..127 of the top-level table.
        let slot = 1u64 << 39;
        assert_eq!(HALFPROC_RANGE_START % slot, 0);
        assert_eq!(HALFPROC_RANGE_END % slot, 0);
        assert_eq!(HALFPROC_RANGE_START / slot, 64);
        assert_eq!(HALFPROC_RANGE_END / slot, 128);
        const { assert!(HALFPROC_RANGE_END <= 1 << 47) };
    }

    #[test]
    fn flags_avoid_existing_bits() {
        // clone3 bits in use in 6.12: the 32 legacy bits, CLONE_CLEAR_SIGHAND
        // (1 << 32), CLONE_INTO_CGROUP (1 << 33), proposed 1 << 34 / 1 << 35.
        const { assert!(CLONE_HALFPROC > 1 << 35) };
        // mmap: bits 26.. carry MAP_HUGE_*; MAP_FIXED_NOREPLACE is 0x100000.
        assert_eq!(MAP_HALFPROC & !0x03e0_0000, 0);
        assert_eq!(MAP_HALFPROC.count_ones(), 1);
    }

    /// Every constant above must equal the `#define` of the same name in the
    /// UAPI header the patch series adds.
    #[test]
    fn constants_match_the_patch_series() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../patches");
        let mut text = String::new();
        for entry in std::fs::read_dir(dir).expect("patches/ exists") {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "patch") {
                text.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
        let mut added = String::new();
        for l in text.lines().filter_map(|l| l.strip_prefix('+')) {
            added.push_str(l);
            added.push('\n');
        }
        let define = |name: &str| c_define(&added, name, "patches/");
        assert_eq!(define("CLONE_HALFPROC"), CLONE_HALFPROC);
        assert_eq!(define("MAP_HALFPROC"), MAP_HALFPROC as u64);
        assert_eq!(define("HALFPROC_RANGE_START"), HALFPROC_RANGE_START);
        assert_eq!(define("HALFPROC_RANGE_END"), HALFPROC_RANGE_END);
        assert_eq!(define("__NR_dmread"), nr::DMREAD as u64);
        assert_eq!(define("__NR_dmwrite"), nr::DMWRITE as u64);
        assert_eq!(define("__NR_dmreadv"), nr::DMREADV as u64);
        assert_eq!(define("__NR_dmwritev"), nr::DMWRITEV as u64);
    }

    /// The in-guest tests carry a fallback copy of the constants; it must
    /// agree with this crate too.
    #[test]
    fn test_header_matches() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/lib/halfproc_test.h");
        let text = std::fs::read_to_string(path).unwrap();
        let define = |name: &str| c_define(&text, name, path);
        assert_eq!(define("CLONE_HALFPROC"), CLONE_HALFPROC);
        assert_eq!(define("MAP_HALFPROC"), MAP_HALFPROC as u64);
        assert_eq!(define("HALFPROC_RANGE_START"), HALFPROC_RANGE_START);
        assert_eq!(define("HALFPROC_RANGE_END"), HALFPROC_RANGE_END);
        assert_eq!(define("__NR_dmread"), nr::DMREAD as u64);
        assert_eq!(define("__NR_dmwritev"), nr::DMWRITEV as u64);
    }

    /// The value of `#define name VALUE` in C source `text` (from `what`).
    fn c_define(text: &str, name: &str, what: &str) -> u64 {
        let line = text
            .lines()
            .find(|l| {
                let mut w = l.split_whitespace();
                w.next() == Some("#define") && w.next() == Some(name)
            })
            .unwrap_or_else(|| panic!("no #define {name} in {what}"));
        let value: std::vec::Vec<&str> = line.split_whitespace().skip(2).collect();
        parse_c_int(&value.join(" "))
    }

    /// Parse `0x200000`, `470`, `(1ULL << 40)` and `_BITULL(40)`.
    fn parse_c_int(s: &str) -> u64 {
        let s = s.trim();
        let s = s
            .strip_prefix('(')
            .and_then(|s| s.strip_suffix(')'))
            .unwrap_or(s);
        if let Some(bit) = s
            .strip_prefix("_BITULL")
            .or_else(|| s.strip_prefix("_BITUL"))
        {
            return 1
                << bit
                    .trim_matches(|c| c == '(' || c == ')')
                    .parse::<u32>()
                    .unwrap();
        }
        if let Some((base, shift)) = s.split_once("<<") {
            let base = base.trim().trim_end_matches(['U', 'L']);
            let shift: u32 = shift.trim().trim_matches(')').parse().unwrap();
            return base.parse::<u64>().unwrap() << shift;
        }
        let s = s.trim_end_matches(['U', 'L']);
        match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).unwrap(),
            None => s.parse().unwrap(),
        }
    }
}
