//! Which runs of an image held in the restoring tool's memory are moved
//! into place with `mremap` by the restorer (see [`Moves`]) rather than
//! copied.

use crate::image::{Backing, Manifest, PageRun, Vma};
use crate::restore_plan::Source;

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
pub(crate) struct Moves {
    min_len: u64,
    /// Runs of exactly `min_len` still allowed (ties at the cut).
    at_min: usize,
    pub(crate) any: bool,
}

impl Moves {
    /// Nothing moved (a file source, or contents a move cannot use).
    fn none() -> Moves {
        Moves {
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
        let mut lens: Vec<u64> = m
            .vmas
            .iter()
            .filter(|v| movable_vma(v))
            .flat_map(|v| v.pages.iter())
            .filter(|r| movable_run(r))
            .map(|r| r.len)
            .collect();
        if lens.is_empty() {
            return Moves::none();
        }
        lens.sort_unstable_by(|a, b| b.cmp(a));
        lens.truncate(MOVE_MAX);
        let min_len = lens[lens.len() - 1];
        let at_min = lens.iter().filter(|&&l| l == min_len).count();
        Moves {
            min_len,
            at_min,
            any: true,
        }
    }

    /// Whether run `r` of VMA `v` is moved (call once per run, in order).
    pub(crate) fn take(&mut self, v: &Vma, r: &PageRun) -> bool {
        if !movable_vma(v) || !movable_run(r) || r.len < self.min_len {
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

fn movable_vma(v: &Vma) -> bool {
    v.backing == Backing::Anon && !v.grows_down
}

fn movable_run(r: &PageRun) -> bool {
    r.len >= MOVE_MIN && (r.addr | r.len | r.file_off) % 4096 == 0
}
