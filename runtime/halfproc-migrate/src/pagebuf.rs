//! [`PageBuf`]: page contents of an image held in memory, in a mapping of
//! their own that starts on a page boundary, so that a restore can move
//! whole pages of it into place with `mremap` instead of copying them
//! (see `restore_plan`). Its start is placed at a chosen offset in a 2 MiB
//! page, the one of the image's largest run (see [`PageBuf::for_image`]):
//! then that run's huge pages are huge pages of the buffer too, and move
//! whole.

use crate::image::{Manifest, PageRun};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::OnceLock;

const PAGE: usize = 4096;
/// Transparent huge page size on x86_64.
pub(crate) const HUGE: usize = 2 << 20;

/// Zero-filled, page-aligned memory of a given length, unmapped when
/// dropped; derefs to `[u8]`.
///
/// # Invariants
///
/// `len == 0` and `ptr` is dangling (nothing mapped), or `ptr` is the
/// start of a private anonymous mapping of `page_up(len)` bytes owned by
/// this value alone.
pub struct PageBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a PageBuf owns its mapping exclusively, like a Vec<u8> its heap
// buffer; nothing in it is tied to a thread.
unsafe impl Send for PageBuf {}
// SAFETY: shared references only read the bytes (no interior mutability).
unsafe impl Sync for PageBuf {}

impl PageBuf {
    /// An empty buffer (nothing mapped).
    pub fn new() -> PageBuf {
        PageBuf {
            ptr: NonNull::dangling(),
            len: 0,
        }
    }

    /// `len` zero bytes starting at an address congruent to `huge_offset`
    /// modulo 2 MiB (rounded down to a page). Asked for transparent huge
    /// pages when the system gives them only on request (`madvise` mode),
    /// so filling it faults once per 2 MiB instead of once per page.
    pub fn zeroed(len: usize, huge_offset: usize) -> std::io::Result<PageBuf> {
        if len == 0 {
            return Ok(PageBuf::new());
        }
        let data_len = len.next_multiple_of(PAGE);
        let off = (huge_offset % HUGE) & !(PAGE - 1);
        let map_len = data_len + 2 * HUGE;
        // Trimmed below to the part this buffer owns.
        let base = map_private_anon(map_len)?;
        let start = base.next_multiple_of(HUGE) + off;
        let end = start + data_len;
        // SAFETY: both ranges lie inside the mapping just made, outside
        // [start, end); unmapping them touches nothing else.
        unsafe {
            if start > base {
                libc::munmap(base as *mut _, start - base);
            }
            if base + map_len > end {
                libc::munmap(end as *mut _, base + map_len - end);
            }
        }
        if thp_on_request() && data_len >= HUGE {
            // SAFETY: advice on our own fresh mapping; it never changes
            // its contents.
            unsafe { libc::madvise(start as *mut _, data_len, libc::MADV_HUGEPAGE) };
        }
        // INVARIANT: [start, start + page_up(len)) is mapped and ours.
        Ok(PageBuf {
            // SAFETY: mmap never returns a mapping at address 0 here (it
            // returned `base` <= `start`, and MAP_FAILED was excluded).
            ptr: unsafe { NonNull::new_unchecked(start as *mut u8) },
            len,
        })
    }

    /// A zeroed buffer for the page contents of `m` (`m.pages_len` bytes),
    /// placed so that its largest run's offset in the buffer is congruent
    /// to the run's address modulo 2 MiB.
    pub fn for_image(m: &Manifest) -> std::io::Result<PageBuf> {
        PageBuf::zeroed(
            m.pages_len as usize,
            huge_offset(m.vmas.iter().flat_map(|v| v.pages.iter())),
        )
    }

    /// A buffer holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> std::io::Result<PageBuf> {
        let mut b = PageBuf::zeroed(data.len(), 0)?;
        b.copy_from_slice(data);
        Ok(b)
    }
}

/// Memory for an image, mapped and faulted in (zero-filled, in huge pages
/// where THP allows) before the size and placement of the image are known:
/// a dump makes it before it stops the target, from an estimate, so that
/// its reads during the stop copy into pages that exist instead of
/// faulting in (and zeroing) every page of the image while the target
/// waits. [`Reserve::place`] then cuts the [`PageBuf`] out of it.
///
/// # Invariants
///
/// `[base, base + map_len)` is a private anonymous mapping owned by this
/// value alone (`map_len == 0`: nothing), and `aligned` is its first
/// 2 MiB boundary.
pub(crate) struct Reserve {
    base: usize,
    map_len: usize,
    aligned: usize,
}

impl Reserve {
    /// Room for an image of up to `cap` bytes at any placement; the first
    /// `fill` bytes of every placement (`fill` + 2 MiB from the first
    /// 2 MiB boundary) are faulted in by `threads` threads, each
    /// `MADV_POPULATE_WRITE` of its part. Fails if the mapping or a
    /// populate fails (out of memory, a kernel before 5.14).
    pub(crate) fn new(cap: usize, fill: usize, threads: usize) -> std::io::Result<Reserve> {
        let cap = cap.max(fill).next_multiple_of(HUGE);
        let map_len = cap + 2 * HUGE;
        // Owned by the value made below (its Drop unmaps it, also on the
        // error paths).
        let base = map_private_anon(map_len)?;
        // INVARIANT: the mapping is ours; `aligned` is its first 2 MiB boundary.
        let r = Reserve {
            base,
            map_len,
            aligned: base.next_multiple_of(HUGE),
        };
        let fill_end = (r.aligned + fill.next_multiple_of(HUGE) + HUGE).min(base + map_len);
        if thp_on_request() {
            // SAFETY: advice on our own fresh mapping; it never changes
            // its contents.
            unsafe {
                libc::madvise(
                    r.aligned as *mut _,
                    fill_end - r.aligned,
                    libc::MADV_HUGEPAGE,
                )
            };
        }
        let huge_pages = (fill_end - r.aligned) / HUGE;
        let n = threads.clamp(1, huge_pages.max(1));
        let part = |k: usize| {
            let s = r.aligned + huge_pages * k / n * HUGE;
            let e = r.aligned + huge_pages * (k + 1) / n * HUGE;
            // SAFETY: populating part of our own mapping (it only faults in
            // zero pages; the contents stay as they are).
            let rc = unsafe { libc::madvise(s as *mut _, e - s, libc::MADV_POPULATE_WRITE) };
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        };
        if n == 1 {
            part(0)?;
        } else {
            std::thread::scope(|scope| {
                let hs: Vec<_> = (0..n).map(|k| scope.spawn(move || part(k))).collect();
                hs.into_iter()
                    .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                    .collect::<std::io::Result<Vec<()>>>()
            })?;
        }
        Ok(r)
    }

    /// The buffer for `len` bytes starting at `huge_offset` modulo 2 MiB
    /// (as [`PageBuf::zeroed`]), the rest of the reserve unmapped; `None`
    /// (everything unmapped) if `len` does not fit. Bytes past what was
    /// faulted in are faulted in when first written, as in a fresh buffer.
    pub(crate) fn place(mut self, len: usize, huge_offset: usize) -> Option<PageBuf> {
        let start = self.aligned + ((huge_offset % HUGE) & !(PAGE - 1));
        let end = start + len.next_multiple_of(PAGE);
        let map_end = self.base + self.map_len;
        if len == 0 || end > map_end {
            return None;
        }
        // SAFETY: both ranges lie inside our mapping, outside [start, end),
        // which the PageBuf below takes over.
        unsafe {
            if start > self.base {
                libc::munmap(self.base as *mut _, start - self.base);
            }
            if map_end > end {
                libc::munmap(end as *mut _, map_end - end);
            }
        }
        self.map_len = 0;
        // INVARIANT: [start, start + page_up(len)) is mapped, ours and
        // zero-filled (fresh anonymous memory, never written).
        Some(PageBuf {
            // SAFETY: `start` >= `base`, which mmap returned, so not null.
            ptr: unsafe { NonNull::new_unchecked(start as *mut u8) },
            len,
        })
    }
}

impl Drop for Reserve {
    fn drop(&mut self) {
        if self.map_len > 0 {
            // SAFETY: per the invariant the mapping is ours alone and
            // nothing points into it.
            unsafe { libc::munmap(self.base as *mut _, self.map_len) };
        }
    }
}

/// Where in a 2 MiB page an image's contents should start so that the
/// most bytes of its runs of at least 2 MiB lie at the same offset in
/// 2 MiB pages as in the process (runs at the same distance, modulo 2 MiB,
/// from their place in the contents are counted together).
pub(crate) fn huge_offset<'a>(runs: impl Iterator<Item = &'a PageRun>) -> usize {
    let mut by: std::collections::BTreeMap<u64, u64> = Default::default();
    for r in runs {
        let w = if r.len >= HUGE as u64 { r.len } else { 1 };
        *by.entry(r.addr.wrapping_sub(r.file_off) % HUGE as u64)
            .or_default() += w;
    }
    by.into_iter()
        .max_by_key(|&(off, bytes)| (bytes, std::cmp::Reverse(off)))
        .map(|(off, _)| off as usize)
        .unwrap_or(0)
}

/// Whether transparent huge pages are given only to memory advised with
/// `MADV_HUGEPAGE` (`/sys/kernel/mm/transparent_hugepage/enabled` is
/// `madvise`). Then a buffer is advised, and the VMAs moved from it into
/// a restored process carry that advice unless the restorer undoes it.
pub(crate) fn thp_on_request() -> bool {
    static MODE: OnceLock<bool> = OnceLock::new();
    *MODE.get_or_init(|| {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .map(|s| s.contains("[madvise]"))
            .unwrap_or(false)
    })
}

/// Whether memory of the tool may get transparent huge pages (THP
/// `always` or `madvise`: a [`PageBuf`] is advised in the latter).
pub(crate) fn thp_possible() -> bool {
    static MODE: OnceLock<bool> = OnceLock::new();
    *MODE.get_or_init(|| {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .map(|s| !s.contains("[never]"))
            .unwrap_or(false)
    })
}

impl Default for PageBuf {
    fn default() -> Self {
        PageBuf::new()
    }
}

impl Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: per the invariant, `len` bytes at `ptr` are mapped (or
        // len is 0 and the pointer dangling but aligned).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: per the invariant the mapping is ours alone; no
            // reference into it outlives `self`.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len.next_multiple_of(PAGE)) };
        }
    }
}

impl std::fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageBuf({:p}, {} bytes)", self.ptr, self.len)
    }
}

/// A new private anonymous read-write mapping of `len` bytes; its address.
/// The caller owns it (unmaps it, or the parts it does not keep).
fn map_private_anon(len: usize) -> std::io::Result<usize> {
    // SAFETY: a new mapping at an address the kernel picks; nothing else
    // refers to it yet.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(base as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_zeroed_and_placed() {
        let off = 0x3_5000;
        let mut b = PageBuf::zeroed(3 * HUGE + 100, off).unwrap();
        assert_eq!(b.as_ptr() as usize % HUGE, off);
        assert!(b.iter().all(|&x| x == 0));
        b[3 * HUGE + 99] = 7;
        let c = PageBuf::from_slice(&b).unwrap();
        assert_eq!(c.as_ptr() as usize % PAGE, 0);
        assert_eq!(&c[..], &b[..]);
        assert!(PageBuf::new().is_empty());
    }

    /// A reserve gives a placed, zero-filled buffer that is already
    /// resident (the pages were faulted in before `place`); one that does
    /// not fit gives none.
    #[test]
    fn a_reserve_is_placed_resident_and_zeroed() {
        let off = 0x7_3000;
        let len = 5 * HUGE + 3 * PAGE + 10;
        let r = Reserve::new(6 * HUGE, len, 2).unwrap();
        let mut b = r.place(len, off).unwrap();
        assert_eq!(b.as_ptr() as usize % HUGE, off);
        assert_eq!(b.len(), len);
        let pages = len.div_ceil(PAGE);
        let mut vec = vec![0u8; pages];
        // SAFETY: mincore of our own buffer's pages into a vector of one
        // byte per page.
        let rc = unsafe { libc::mincore(b.as_mut_ptr().cast(), pages * PAGE, vec.as_mut_ptr()) };
        assert_eq!(rc, 0);
        assert!(vec.iter().all(|&v| v & 1 == 1), "not all pages resident");
        assert!(b.iter().all(|&x| x == 0));
        b[len - 1] = 9;
        assert!(Reserve::new(2 * HUGE, 2 * HUGE, 1)
            .unwrap()
            .place(5 * HUGE, 0)
            .is_none());
        assert!(Reserve::new(2 * HUGE, HUGE, 1)
            .unwrap()
            .place(0, 0)
            .is_none());
    }

    #[test]
    fn placed_for_the_most_bytes_of_large_runs() {
        let r = |addr, len, file_off| PageRun {
            addr,
            len,
            file_off,
        };
        // Two 2 MiB+ runs at distance 0x1000 (mod 2 MiB) from their place
        // in the contents outweigh one of 8 MiB at 0x5000 and many small ones.
        let runs = [
            r(0x40_1000, 4 << 20, 0),
            r(0xa0_1000, 6 << 20, 4 << 20),
            r(0x1_0000_5000, 8 << 20, 10 << 20),
            r(0x2_0000_7000, 4096, 18 << 20),
        ];
        assert_eq!(huge_offset(runs.iter()), 0x1000);
        assert_eq!(huge_offset(runs[2..].iter()), 0x5000);
        assert_eq!(huge_offset([].iter()), 0);
    }
}
