//! Which runs of an image held in the restoring tool's memory are moved
//! into place with `mremap` by the restorer (see [`Moves`]) rather than
//! copied.

use crate::image::{Backing, Manifest, PageRun, Vma};
use crate::restore_plan::Source;

/// Transparent huge page size on x86_64.
const HUGE: u64 = 2 << 20;

/// Smallest run moved into place rather than copied: below it a copy costs
/// about what the `mremap` does, and every moved run is a VMA of its own.
const MOVE_MIN: u64 = 64 << 10;
/// Most runs moved in one restore (each adds up to two VMAs; the default
/// `vm.max_map_count` is 65530); the largest are moved, the rest copied.
const MOVE_MAX: usize = 8192;

/// Which runs of a [`Source::Memory`] image are moved into place with
/// `mremap(MREMAP_FIXED)` (no fault-in, no copy: the pages the child
/// inherited from the restoring tool become the process's pages) instead
/// of being copied.
///
/// A run is moved when the contents start on a page boundary (a
/// [`crate::PageBuf`]; a `Vec` does not), the run is page-aligned, at
/// least [`MOVE_MIN`] long (the [`MOVE_MAX`] largest of those), in a
/// private anonymous VMA that is not the grows-down stack (a moved VMA
/// keeps the flags of the memory it came from: a file mapping would lose
/// its file, the stack its `VM_GROWSDOWN`), and no two runs of the image
/// overlap in the contents (a crafted manifest could otherwise make a
/// copy read from pages already moved away: a fault the blob cannot report).
///
/// Where the contents may be backed by transparent huge pages (THP not
/// `never`), a run is moved only if it lies at the same offset in 2 MiB
/// pages in the contents as at its address ([`crate::PageBuf::for_image`]
/// places the contents so that the largest runs do): its huge pages then
/// move whole, as page-table entries of 2 MiB. A run at another offset
/// would have its huge pages split into 4 KiB entries that still point
/// into 2 MiB pages, and the process's first write to each of them later
/// costs about a copy of the page (measured: docs/migration.md), so such a
/// run is copied.
pub(crate) struct Moves {
    /// Address of the contents (their offsets in 2 MiB pages are kept
    /// when they are moved into `R`).
    base: u64,
    huge: bool,
    min_len: u64,
    /// Runs of exactly `min_len` still allowed (ties at the cut).
    at_min: usize,
    pub(crate) any: bool,
}

impl Moves {
    /// Nothing moved (a file source, or contents a move cannot use).
    fn none() -> Moves {
        Moves {
            base: 0,
            huge: false,
            min_len: u64::MAX,
            at_min: 0,
            any: false,
        }
    }

    pub(crate) fn new(m: &Manifest, source: &Source) -> Moves {
        let Source::Memory { data, .. } = source else {
            return Moves::none();
        };
        if data.as_ptr() as u64 % 4096 != 0 {
            return Moves::none();
        }
        let mut all: Vec<(u64, u64)> = m
            .vmas
            .iter()
            .flat_map(|v| v.pages.iter())
            .map(|r| (r.file_off, r.len))
            .collect();
        all.sort_unstable();
        if all.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0) {
            return Moves::none();
        }
        let mut me = Moves {
            base: data.as_ptr() as u64,
            huge: crate::pagebuf::thp_possible(),
            ..Moves::none()
        };
        let mut lens: Vec<u64> = m
            .vmas
            .iter()
            .flat_map(|v| v.pages.iter().map(move |r| (v, r)))
            .filter(|(v, r)| me.eligible(v, r))
            .map(|(_, r)| r.len)
            .collect();
        if lens.is_empty() {
            return Moves::none();
        }
        lens.sort_unstable_by(|a, b| b.cmp(a));
        lens.truncate(MOVE_MAX);
        me.min_len = lens[lens.len() - 1];
        me.at_min = lens.iter().filter(|&&l| l == me.min_len).count();
        me.any = true;
        me
    }

    fn eligible(&self, v: &Vma, r: &PageRun) -> bool {
        let congruent = (self.base + r.file_off) % HUGE == r.addr % HUGE;
        v.backing == Backing::Anon
            && !v.grows_down
            && r.len >= MOVE_MIN
            && (r.addr | r.len | r.file_off) % 4096 == 0
            && (congruent || !self.huge)
    }

    /// Whether run `r` of VMA `v` is moved (call once per run, in order).
    pub(crate) fn take(&mut self, v: &Vma, r: &PageRun) -> bool {
        if !self.any || !self.eligible(v, r) || r.len < self.min_len {
            return false;
        }
        if r.len == self.min_len {
            if self.at_min == 0 {
                return false;
            }
            self.at_min -= 1;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vma(backing: Backing, grows_down: bool) -> Vma {
        Vma {
            start: 0x4000_0000,
            end: 0x4100_0000,
            prot: libc::PROT_READ | libc::PROT_WRITE,
            backing,
            grows_down,
            pages: Vec::new(),
        }
    }

    #[test]
    fn which_runs_move() {
        let anon = vma(Backing::Anon, false);
        let at = |addr, len, file_off| PageRun {
            addr,
            len,
            file_off,
        };
        let huge = Moves {
            base: 0x7f00_0020_0000,
            huge: true,
            ..Moves::none()
        };
        // Same offset in 2 MiB pages in the contents as at its address.
        assert!(huge.eligible(&anon, &at(0x4020_0000, 4 << 20, 0)));
        assert!(huge.eligible(&anon, &at(0x4030_1000, 4 << 20, 0x10_1000)));
        // Another offset: its huge pages would be split, so copied...
        assert!(!huge.eligible(&anon, &at(0x4020_1000, 4 << 20, 0)));
        // ... unless the contents cannot have huge pages (THP never).
        let small = Moves {
            huge: false,
            ..huge
        };
        assert!(small.eligible(&anon, &at(0x4020_1000, 4 << 20, 0)));
        // Too short, not page-aligned, the stack, a file mapping: copied.
        assert!(!small.eligible(&anon, &at(0x4020_0000, 60 << 10, 0)));
        assert!(!small.eligible(&anon, &at(0x4020_0000, 4 << 20, 0x800)));
        assert!(!small.eligible(&vma(Backing::Anon, true), &at(0x4020_0000, 4 << 20, 0)));
        let file = Backing::Special {
            name: "[vdso]".into(),
        };
        assert!(!small.eligible(&vma(file, false), &at(0x4020_0000, 4 << 20, 0)));
    }
}
