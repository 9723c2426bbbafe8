// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The global address space: regions made by `DMI_mmap`, their pages, and
//! which node is the *home* of a page (the node that keeps its owner entry).
//!
//! A global address is `region << REGION_SHIFT | offset`. Region 0 does not
//! exist (so no valid address is 0 or negative); region 1 is the root page
//! every node knows from the start ([`ROOT`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::DmiError;

/// A node's rank.
pub type NodeId = u32;

/// Bits of a global address that are the offset inside its region.
pub const REGION_SHIFT: u32 = 40;
/// The largest region, in bytes.
pub const REGION_MAX: u64 = 1 << REGION_SHIFT;
/// The root region: one page every node knows at start-up; a program passes
/// addresses from one node to the others through it.
pub const ROOT: Region = Region {
    id: 1,
    page_size: 4096,
    page_num: 1,
};
/// Size of the root page.
pub const ROOT_SIZE: u64 = 4096;

/// One `DMI_mmap` allocation: `page_num` pages of `page_size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    pub id: u32,
    pub page_size: u64,
    pub page_num: u64,
}

/// A page: the unit of coherence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PageId {
    pub region: u32,
    pub index: u64,
}

/// The part of one page an access touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub page: PageId,
    /// Offset inside the page.
    pub off: usize,
    pub len: usize,
    /// Offset of this part inside the caller's buffer.
    pub buf_off: usize,
}

impl Region {
    /// First global address of the region.
    pub fn base(&self) -> i64 {
        i64::from(self.id) << REGION_SHIFT
    }

    /// Bytes in the region.
    pub fn len(&self) -> u64 {
        self.page_size * self.page_num
    }

    /// Whether the region has no bytes (never true for a mapped region).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks `DMI_mmap`'s arguments.
    pub fn new(id: u32, page_size: i64, page_num: i64) -> Result<Region, DmiError> {
        if page_size <= 0 || page_num <= 0 {
            return Err(DmiError::BadArgument(format!(
                "DMI_mmap(page_size={page_size}, page_num={page_num}): both must be positive"
            )));
        }
        let (ps, pn) = (page_size as u64, page_num as u64);
        match ps.checked_mul(pn) {
            Some(total) if total <= REGION_MAX => Ok(Region {
                id,
                page_size: ps,
                page_num: pn,
            }),
            _ => Err(DmiError::BadArgument(format!(
                "DMI_mmap(page_size={page_size}, page_num={page_num}): more than 2^{REGION_SHIFT} bytes"
            ))),
        }
    }
}

/// The home of a page among the members of an epoch (sorted ids): fixed
/// while the membership stays the same, spreads consecutive pages over the
/// nodes (block-cyclic with block 1). The owner entry lives here; a change
/// of membership moves the entries whose home changes (`epoch.rs`).
pub fn home(page: PageId, members: &[NodeId]) -> NodeId {
    let n = members.len().max(1) as u64;
    members[((u64::from(page.region) + page.index) % n) as usize]
}

/// The regions a node knows.
#[derive(Debug, Clone, Default)]
pub struct Regions {
    map: BTreeMap<u32, Region>,
    /// Changes so far (the page index republishes the table on a new one).
    gen: u64,
}

impl Regions {
    /// A table holding the root region only.
    pub fn with_root() -> Regions {
        let mut r = Regions::default();
        r.insert(ROOT);
        r
    }

    pub fn insert(&mut self, region: Region) {
        self.gen += 1;
        self.map.insert(region.id, region);
    }

    /// How many times the table changed (1 after `with_root`).
    pub fn generation(&self) -> u64 {
        self.gen
    }

    /// Every region, by id.
    pub fn all(&self) -> Vec<Region> {
        self.map.values().copied().collect()
    }

    pub fn remove(&mut self, id: u32) -> Option<Region> {
        self.gen += 1;
        self.map.remove(&id)
    }

    pub fn get(&self, id: u32) -> Option<&Region> {
        self.map.get(&id)
    }

    /// The region `addr` starts, for `DMI_munmap`.
    pub fn region_at(&self, addr: i64) -> Result<Region, DmiError> {
        let r = self.lookup(addr)?;
        if addr != r.base() {
            return Err(DmiError::BadAddress(format!(
                "{addr:#x} is not the start of a DMI_mmap region"
            )));
        }
        Ok(r)
    }

    fn lookup(&self, addr: i64) -> Result<Region, DmiError> {
        if addr <= 0 {
            return Err(DmiError::BadAddress(format!(
                "{addr:#x} is not a global address"
            )));
        }
        let id = (addr >> REGION_SHIFT) as u64;
        u32::try_from(id)
            .ok()
            .and_then(|id| self.map.get(&id).copied())
            .ok_or_else(|| {
                DmiError::BadAddress(format!("{addr:#x} is outside every DMI_mmap region"))
            })
    }

    /// Splits `[addr, addr + size)` into per-page spans, checking bounds.
    pub fn spans(&self, addr: i64, size: i64) -> Result<Vec<Span>, DmiError> {
        let r = self.lookup(addr)?;
        if size < 0 {
            return Err(DmiError::BadArgument(format!("negative size {size}")));
        }
        let start = (addr - r.base()) as u64;
        if start >= r.len() {
            return Err(DmiError::BadAddress(format!(
                "{addr:#x} is outside every DMI_mmap region"
            )));
        }
        let end = start.checked_add(size as u64).filter(|&e| e <= r.len());
        let Some(end) = end else {
            return Err(DmiError::OutOfRange(format!(
                "[{addr:#x}, +{size}) runs past the end of its region ({} pages of {} bytes)",
                r.page_num, r.page_size
            )));
        };
        let mut out = Vec::new();
        let mut pos = start;
        while pos < end {
            let index = pos / r.page_size;
            let off = pos % r.page_size;
            let len = (r.page_size - off).min(end - pos);
            out.push(Span {
                page: PageId {
                    region: r.id,
                    index,
                },
                off: off as usize,
                len: len as usize,
                buf_off: (pos - start) as usize,
            });
            pos += len;
        }
        Ok(out)
    }

    /// The page holding `addr` (for a mutex address).
    pub fn page_of(&self, addr: i64) -> Result<PageId, DmiError> {
        Ok(self.spans(addr, 1)?[0].page)
    }

    /// Size of a page.
    pub fn page_size(&self, page: PageId) -> Option<usize> {
        self.map.get(&page.region).map(|r| r.page_size as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_split_at_page_boundaries_and_check_bounds() {
        let mut rs = Regions::with_root();
        let r = Region::new(2, 10, 3).unwrap();
        rs.insert(r);
        let s = rs.spans(r.base() + 5, 12).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].page.index, s[0].off, s[0].len, s[0].buf_off),
            (0, 5, 5, 0)
        );
        assert_eq!(
            (s[1].page.index, s[1].off, s[1].len, s[1].buf_off),
            (1, 0, 7, 5)
        );
        assert!(matches!(
            rs.spans(r.base() + 25, 6),
            Err(DmiError::OutOfRange(_))
        ));
        assert!(matches!(rs.spans(0, 1), Err(DmiError::BadAddress(_))));
        assert!(matches!(
            rs.spans(r.base() + 30, 1),
            Err(DmiError::BadAddress(_))
        ));
        assert!(matches!(
            rs.spans(3 << REGION_SHIFT, 1),
            Err(DmiError::BadAddress(_))
        ));
        assert!(Region::new(3, 0, 1).is_err());
        assert!(Region::new(3, 1 << 30, 1 << 30).is_err());
        assert!(rs.region_at(r.base() + 1).is_err());
    }
}
