//! Iterative pre-copy for live migration: page contents are sent while the
//! process runs, round after round (each round only the pages written since
//! the previous one), so that once it is frozen only the last round's
//! written pages travel.
//!
//! Which pages were written is told by a [`DirtyTracker`]:
//! - [`SoftDirty`]: the kernel's soft-dirty bits (`echo 4 >
//!   /proc/PID/clear_refs` clears them, bit 55 of `/proc/PID/pagemap` says
//!   written since). Needs `CONFIG_MEM_SOFT_DIRTY`; [`probe_soft_dirty`]
//!   checks at run time that it works (a kernel without it accepts the
//!   `clear_refs` write and never sets the bit);
//! - [`ContentHash`]: no kernel help: a page was "written" if its content
//!   differs from what was sent (it reads every page again each round, so it
//!   saves transfer, not reading); the node uses it only when asked to
//!   (`HALFPROC_PRECOPY=hash`), to exercise pre-copy where soft-dirty is
//!   missing.
//!
//! The final image is complete: the frozen dump reads every page as
//! before and computes the CRC of all of them; only the transfer skips the
//! pages the destination already holds unchanged ([`included`]); the
//! destination puts the image together ([`assemble`]) and checks that CRC.
//!
//! Soft-dirty is a hint, not the judge: reading the bits and clearing them
//! are two steps (`pagemap`, then `clear_refs`), and a page first written
//! between them loses its bit while the round does not send it. So every
//! page sent is remembered with the CRC-32 of what was sent, and while
//! frozen a page travels again if its bit is set *or* its content differs
//! from that ([`included`] counts the second kind: writes the tracker
//! missed). Under QEMU TCG, bzip2 hit that window once in about 80 moves
//! and the whole-image CRC then failed the migration.

use crate::error::{Error, Result};
use crate::image::Manifest;
use crate::mem::MemoryReader;
use crate::pagebuf::PageBuf;
use crate::procfs::{self, PM_FILE, PM_PRESENT, PM_SWAP};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Pagemap bit: soft-dirty (written since the last `clear_refs` 4).
pub const PM_SOFT_DIRTY: u64 = 1 << 55;
const PAGE: u64 = 4096;

/// Tells which pages of a process were written.
pub trait DirtyTracker {
    /// Starts a new interval: writes from now on count.
    fn reset(&mut self) -> io::Result<()>;
    /// For each page address in `pages`, whether it was written since the
    /// last [`reset`](Self::reset) (or differs from what was sent).
    fn written(&mut self, pages: &[u64]) -> io::Result<Vec<bool>>;
    /// `data` of page `addr` was sent (for trackers that compare content).
    fn sent(&mut self, _addr: u64, _data: &[u8]) {}
}

/// Soft-dirty bits of process `pid`.
pub struct SoftDirty {
    clear_refs: File,
    pagemap: File,
}

impl SoftDirty {
    pub fn open(pid: i32) -> io::Result<SoftDirty> {
        Ok(SoftDirty {
            clear_refs: std::fs::OpenOptions::new()
                .write(true)
                .open(format!("/proc/{pid}/clear_refs"))?,
            pagemap: File::open(format!("/proc/{pid}/pagemap"))?,
        })
    }
}

impl DirtyTracker for SoftDirty {
    fn reset(&mut self) -> io::Result<()> {
        self.clear_refs.write_at(b"4", 0).map(|_| ())
    }

    fn written(&mut self, pages: &[u64]) -> io::Result<Vec<bool>> {
        let mut out = Vec::with_capacity(pages.len());
        for run in runs(pages) {
            let mut buf = vec![0u8; run.len() * 8];
            self.pagemap.read_exact_at(&mut buf, run[0] / PAGE * 8)?;
            out.extend(
                buf.chunks_exact(8).map(|e| {
                    u64::from_le_bytes(e.try_into().unwrap_or([0; 8])) & PM_SOFT_DIRTY != 0
                }),
            );
        }
        Ok(out)
    }
}

/// Whether soft-dirty tracking works here: on a page of our own, after
/// `clear_refs` 4 the bit must be clear and after a write set. The error
/// names the step that failed.
pub fn probe_soft_dirty() -> std::result::Result<(), String> {
    // SAFETY: a fresh private anonymous page, unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            PAGE as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(format!("mmap: {}", io::Error::last_os_error()));
    }
    let page = p as *mut u8;
    let r = (|| {
        // SAFETY: `page` is our mapped, writable page.
        unsafe { page.write_volatile(1) };
        // SAFETY: getpid has no preconditions.
        let mut t = SoftDirty::open(unsafe { libc::getpid() })
            .map_err(|e| format!("open /proc/self/clear_refs or pagemap: {e}"))?;
        t.reset()
            .map_err(|e| format!("write 4 to /proc/self/clear_refs: {e}"))?;
        let addr = page as u64;
        let after_clear = t.written(&[addr]).map_err(|e| format!("pagemap: {e}"))?[0];
        if after_clear {
            return Err("pagemap bit 55 stays set after clear_refs 4".to_string());
        }
        // SAFETY: as above.
        unsafe { page.write_volatile(2) };
        if !t.written(&[addr]).map_err(|e| format!("pagemap: {e}"))?[0] {
            return Err(
                "pagemap bit 55 (soft-dirty) is not set by a write after clear_refs 4: \
                 the kernel lacks CONFIG_MEM_SOFT_DIRTY"
                    .to_string(),
            );
        }
        Ok(())
    })();
    // SAFETY: unmapping the page mapped above.
    unsafe { libc::munmap(p, PAGE as usize) };
    r
}

/// Content comparison (see the module documentation): reads through `reader`.
pub struct ContentHash<R: MemoryReader> {
    reader: R,
    hashes: HashMap<u64, u32>,
}

impl<R: MemoryReader> ContentHash<R> {
    pub fn new(reader: R) -> Self {
        ContentHash {
            reader,
            hashes: HashMap::new(),
        }
    }
}

impl<R: MemoryReader> DirtyTracker for ContentHash<R> {
    fn reset(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn written(&mut self, pages: &[u64]) -> io::Result<Vec<bool>> {
        let mut buf = vec![0u8; PAGE as usize];
        Ok(pages
            .iter()
            .map(|&a| match self.hashes.get(&a) {
                None => true,
                Some(h) => self.reader.read(a, &mut buf).is_err() || crc32fast::hash(&buf) != *h,
            })
            .collect())
    }

    fn sent(&mut self, addr: u64, data: &[u8]) {
        self.hashes.insert(addr, crc32fast::hash(data));
    }
}

/// The process whose pages are pre-copied.
pub trait Target {
    /// Addresses of the pages the image will carry (present private pages).
    fn present(&mut self) -> Result<Vec<u64>>;
    /// Reads one run of pages.
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> io::Result<()>;
}

/// A live process read with a [`MemoryReader`].
pub struct Live<'a> {
    pub pid: i32,
    pub reader: &'a dyn MemoryReader,
}

impl Target for Live<'_> {
    fn present(&mut self) -> Result<Vec<u64>> {
        let pm_path = format!("/proc/{}/pagemap", self.pid);
        let pm = File::open(&pm_path).map_err(|e| Error::io(format!("open {pm_path}"), e))?;
        let mut out = Vec::new();
        for m in procfs::maps(self.pid)? {
            if m.shared
                || m.path == "[vsyscall]"
                || crate::refuse::SPECIAL_MAPPINGS.contains(&m.path.as_str())
            {
                continue;
            }
            for (i, e) in procfs::pagemap(&pm, m.start, m.end)?.iter().enumerate() {
                if (e & PM_PRESENT != 0 && e & PM_FILE == 0) || e & PM_SWAP != 0 {
                    out.push(m.start + i as u64 * PAGE);
                }
            }
        }
        Ok(out)
    }

    fn read(&mut self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        self.reader.read(addr, buf)
    }
}

/// When to stop the rounds (then the process is frozen).
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// At most this many rounds.
    pub max_rounds: usize,
    /// Stop once a round sent at most this many pages.
    pub stop_below: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_rounds: 5,
            stop_below: 64,
        }
    }
}

/// Whether another round is worth it after rounds that sent `history` pages.
pub fn another_round(history: &[usize], p: &Policy) -> bool {
    match history {
        [] => true,
        [.., last] if history.len() >= p.max_rounds || *last <= p.stop_below => false,
        // Not shrinking by half: the process writes as fast as we copy.
        [.., prev, last] => last * 2 <= *prev,
        [_] => true,
    }
}

/// What the rounds sent.
#[derive(Debug, Default)]
pub struct Precopied {
    /// Pages the destination holds (as of when each was last sent).
    pub sent: HashSet<u64>,
    /// CRC-32 of each page's content when it was last sent.
    pub crcs: HashMap<u64, u32>,
    /// Pages sent in each round.
    pub rounds: Vec<usize>,
    pub bytes: u64,
}

/// Contiguous runs of sorted page addresses.
fn runs(pages: &[u64]) -> Vec<&[u64]> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < pages.len() {
        let s = i;
        while i + 1 < pages.len() && pages[i + 1] == pages[i] + PAGE && i + 1 - s < 256 {
            i += 1;
        }
        i += 1;
        out.push(&pages[s..i]);
    }
    out
}

/// Runs the pre-copy rounds on a running `target`; `send(addr, data)` gets
/// each run of pages (contiguous, at most 1 MiB).
///
/// `check` runs after every run's read and before its send (the caller's
/// check that it may still read the process: its ids, its dumpability); an
/// error ends the rounds as [`Error::Changed`], that run unsent. Read, then
/// check: a process that changed before or during the read is caught by the
/// check after it; one that changes after the check had its pre-change
/// memory read. Any reader (`process_vm_readv` or `dmread`) is covered: the
/// check is here, between the reading and the sending.
pub fn precopy(
    target: &mut dyn Target,
    tracker: &mut dyn DirtyTracker,
    policy: &Policy,
    check: &mut dyn FnMut() -> std::result::Result<(), String>,
    send: &mut dyn FnMut(u64, &[u8]) -> io::Result<()>,
) -> Result<Precopied> {
    let mut done = Precopied::default();
    while another_round(&done.rounds, policy) {
        let present = target.present()?;
        let todo: Vec<u64> = if done.rounds.is_empty() {
            present
        } else {
            let w = tracker
                .written(&present)
                .map_err(|e| Error::io("dirty pages", e))?;
            present
                .iter()
                .zip(w)
                .filter(|(a, w)| *w || !done.sent.contains(a))
                .map(|(a, _)| *a)
                .collect()
        };
        // Cleared before reading: a write during the read shows next round.
        tracker
            .reset()
            .map_err(|e| Error::io("clear dirty bits", e))?;
        let mut n = 0;
        for run in runs(&todo) {
            let mut buf = vec![0u8; run.len() * PAGE as usize];
            if target.read(run[0], &mut buf).is_err() {
                // Unmapped meanwhile: the frozen dump decides.
                for a in run {
                    done.sent.remove(a);
                }
                continue;
            }
            check().map_err(Error::Changed)?;
            send(run[0], &buf).map_err(|e| Error::io("send pre-copied pages", e))?;
            for (a, d) in run.iter().zip(buf.chunks_exact(PAGE as usize)) {
                tracker.sent(*a, d);
                done.sent.insert(*a);
                done.crcs.insert(*a, crc32fast::hash(d));
            }
            n += run.len();
            done.bytes += buf.len() as u64;
        }
        done.rounds.push(n);
    }
    Ok(done)
}

/// Page addresses of an image's page runs, in `pages.img` order.
pub fn image_pages(m: &Manifest) -> Vec<u64> {
    m.vmas
        .iter()
        .flat_map(|v| v.pages.iter())
        .flat_map(|r| (0..r.len / PAGE).map(move |i| r.addr + i * PAGE))
        .collect()
}

/// Which pages of a frozen image travel (see [`included`]).
#[derive(Debug)]
pub struct Included {
    /// Per page of the image: whether its content is sent.
    pub pages: Vec<bool>,
    /// Pages sent because their content changed while the tracker said
    /// they were not written.
    pub missed: usize,
}

/// For each page of the frozen image: whether its content must be sent
/// (not held by the destination, written since it was sent, or different
/// from what was sent). `pages`: [`image_pages`] of the image; `full`: its
/// frozen page blob.
pub fn included(
    pages: &[u64],
    pre: &Precopied,
    tracker: &mut dyn DirtyTracker,
    full: &[u8],
) -> Result<Included> {
    if full.len() != pages.len() * PAGE as usize {
        return Err(Error::Image(format!(
            "pre-copy: {} bytes of pages for {} pages",
            full.len(),
            pages.len()
        )));
    }
    let w = tracker
        .written(pages)
        .map_err(|e| Error::io("dirty pages while frozen", e))?;
    let mut missed = 0;
    let inc = pages
        .iter()
        .zip(w)
        .zip(full.chunks_exact(PAGE as usize))
        .map(|((a, w), content)| match pre.crcs.get(a) {
            None => true,
            Some(_) if w => true,
            Some(&crc) => {
                let changed = crc32fast::hash(content) != crc;
                missed += usize::from(changed);
                changed
            }
        })
        .collect();
    Ok(Included { pages: inc, missed })
}

/// The included pages' contents from the full page blob of the image.
pub fn delta(full: &[u8], included: &[bool]) -> Result<PageBuf> {
    let n = included.iter().filter(|i| **i).count();
    let mut out = PageBuf::zeroed(n * PAGE as usize, 0)
        .map_err(|e| Error::io("map the pre-copy delta", e))?;
    let chosen = full
        .chunks_exact(PAGE as usize)
        .zip(included)
        .filter(|(_, i)| **i);
    for (to, (from, _)) in out.chunks_exact_mut(PAGE as usize).zip(chosen) {
        to.copy_from_slice(from);
    }
    Ok(out)
}

/// Destination: fills `out` (the full page blob of an image whose pages
/// are `pages` ([`image_pages`]), e.g. a [`PageBuf::for_image`]) from the
/// `delta` (the included pages, in order) and the pre-copied pages `pre`.
/// The caller checks it with [`crate::image::verify_pages`].
pub fn assemble(
    pages: &[u64],
    included: &[bool],
    delta: &[u8],
    pre: &HashMap<u64, Vec<u8>>,
    out: &mut [u8],
) -> Result<()> {
    if pages.len() != included.len() || out.len() != pages.len() * PAGE as usize {
        return Err(Error::Image(format!(
            "pre-copy: {} pages in the image, {} in the delta map, {} bytes to fill",
            pages.len(),
            included.len(),
            out.len()
        )));
    }
    let mut d = delta.chunks_exact(PAGE as usize);
    for ((a, inc), to) in pages
        .iter()
        .zip(included)
        .zip(out.chunks_exact_mut(PAGE as usize))
    {
        let page = if *inc {
            d.next()
        } else {
            pre.get(a).map(Vec::as_slice)
        };
        match page {
            Some(p) if p.len() == PAGE as usize => to.copy_from_slice(p),
            _ => {
                return Err(Error::Image(format!(
                    "pre-copy: no content for page {a:#x}"
                )))
            }
        }
    }
    Ok(())
}

/// Destination: keeps pre-copied runs by page.
pub fn store(pre: &mut HashMap<u64, Vec<u8>>, addr: u64, data: &[u8]) {
    for (i, c) in data.chunks_exact(PAGE as usize).enumerate() {
        pre.insert(addr + i as u64 * PAGE, c.to_vec());
    }
}

#[cfg(test)]
#[path = "precopy_tests.rs"]
mod tests;
