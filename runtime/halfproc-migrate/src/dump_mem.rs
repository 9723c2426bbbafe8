//! The memory part of a dump: which VMAs are carried and which of their
//! pages (`pagescan`: the `PAGEMAP_SCAN` ioctl, or the pagemap file), then the page contents, read run by run (one
//! `process_vm_readv` or `dmread` per run of contiguous wanted pages, or
//! per 2 MiB of it) straight into their place in the image: the in-memory
//! image ([`PageBuf`]) is sized and placed first and each run lands at its
//! offset, by one or more threads (`dump_read`); a file image goes through
//! one reused buffer. The CRC-32 of the
//! whole contents is computed piece by piece right after each read, while
//! the piece is in the cache (`crc32fast`, carry-less multiply).

use crate::dump_read::{prefault_enabled, read_pieces, reader_threads, Piece};
use crate::error::{Error, Result};
use crate::image::{Backing, PageRun, Vma};
use crate::mem::MemoryReader;
use crate::pagebuf::{huge_offset, PageBuf, Reserve, HUGE};
use crate::pagescan;
use crate::phases::time;
use crate::procfs;
use crate::refuse;
use std::fs::File;
use std::io::Write;

/// Where page contents go.
pub(crate) enum Sink<'a> {
    /// Into this vector (replaced by the contents, as `pages.img` would
    /// hold them), placed in the reserve when it fits (see [`reserve_for`]).
    Memory(&'a mut PageBuf, Option<Reserve>),
    /// Written to this writer in order.
    Writer(&'a mut dyn Write),
}

/// Largest piece read at once into the buffer of a [`Sink::Writer`].
const CHUNK: u64 = 8 << 20;

pub(crate) fn is_special(path: &str) -> bool {
    refuse::SPECIAL_MAPPINGS.contains(&path)
}

/// Writes the contents of every carried VMA to `out` (as `pages.img`);
/// returns the VMAs, the contents' length and CRC-32.
pub(crate) fn dump_memory(
    pid: i32,
    reader: &dyn MemoryReader,
    maps: &[procfs::MapsEntry],
    set_range: Option<(u64, u64)>,
    out: Sink,
) -> Result<(Vec<Vma>, u64, u32)> {
    let (vmas, total) = plan(pid, reader, maps, set_range)?;
    let runs = || {
        vmas.iter()
            .flat_map(|v| v.pages.iter().map(move |r| (r, v)))
    };
    let read = |r: &PageRun, at: u64, buf: &mut [u8], path: &str| {
        time("read", || reader.read(at, buf)).map_err(|e| {
            Error::io(
                format!(
                    "read memory {at:#x}+{:#x} of run {:#x} ({path})",
                    buf.len(),
                    r.addr
                ),
                e,
            )
        })
    };
    let crc = match out {
        Sink::Memory(pages, reserve) => {
            let at = huge_offset(runs().map(|(r, _)| r));
            *pages = match reserve.and_then(|r| time("place", || r.place(total as usize, at))) {
                Some(b) => b,
                None => time("alloc", || PageBuf::zeroed(total as usize, at))
                    .map_err(|e| Error::io(format!("map {total} bytes for the image"), e))?,
            };
            // Pieces of at most a huge page: each is hashed right after
            // it is read, while it is still in the cache. Runs lie in file
            // order, end to end, and so do the pieces.
            let list: Vec<(&PageRun, &Vma)> = runs().collect();
            let mut pieces = Vec::new();
            for (i, (r, _)) in list.iter().enumerate() {
                let mut done = 0;
                while done < r.len {
                    let len = (r.len - done).min(HUGE as u64);
                    pieces.push(Piece {
                        addr: r.addr + done,
                        off: r.file_off + done,
                        len,
                        run: i,
                    });
                    done += len;
                }
            }
            let threads = reader_threads(total);
            let name = if threads > 1 {
                "read+crc (threads)"
            } else {
                "read+crc"
            };
            time(name, || read_pieces(reader, &pieces, pages, threads)).map_err(|e| {
                let (r, v) = list[e.piece.run];
                Error::io(
                    format!(
                        "read memory {:#x}+{:#x} of run {:#x} ({})",
                        e.piece.addr,
                        e.piece.len,
                        r.addr,
                        path(v)
                    ),
                    e.err,
                )
            })?
        }
        Sink::Writer(w) => {
            let mut buf = vec![0u8; total.min(CHUNK) as usize];
            let mut crc = crc32fast::Hasher::new();
            for (r, v) in runs() {
                let mut done = 0;
                while done < r.len {
                    let n = (r.len - done).min(CHUNK) as usize;
                    read(r, r.addr + done, &mut buf[..n], path(v))?;
                    time("crc", || crc.update(&buf[..n]));
                    time("store", || w.write_all(&buf[..n]))
                        .map_err(|e| Error::io("write pages.img", e))?;
                    done += n as u64;
                }
            }
            crc.finalize()
        }
    };
    Ok((vmas, total, crc))
}

/// No memory is faulted in ahead of a dump whose estimate is below this.
const PREFAULT_MIN: u64 = 4 << 20;

/// Memory for the in-memory image of `pid`, faulted in while it still
/// runs (see [`Reserve`]), or `None`: prefaulting is off
/// ([`crate::set_prefault`]), the estimate is under [`PREFAULT_MIN`], or
/// the memory could not be had (the dump then maps its buffer while the
/// target is stopped, as without a reserve). The estimate is the
/// process's anonymous pages and swap (`RssAnon` + `VmSwap`: what a dump
/// carries, as copied-on-write file pages are anonymous), at most the size
/// of the VMAs a dump looks at; the reserve has room for an eighth more
/// plus 8 MiB, since the process may grow before it is stopped (a larger
/// image does not fit and gets a buffer of its own).
pub(crate) fn reserve_for(pid: i32, set_range: Option<(u64, u64)>) -> Option<Reserve> {
    if !prefault_enabled() {
        return None;
    }
    let st = procfs::status(pid).ok()?;
    let kib = |key: &str| -> u64 {
        procfs::field(&st, key)
            .ok()
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let maps = procfs::maps(pid).ok()?;
    let carried = |m: &&procfs::MapsEntry| {
        !is_special(&m.path) && m.path != "[vsyscall]" && !refuse::in_range(m, set_range)
    };
    let private: u64 = maps
        .iter()
        .filter(carried)
        .filter(|m| !m.shared)
        .map(|m| m.end - m.start)
        .sum();
    let shared_anon: u64 = maps
        .iter()
        .filter(carried)
        .filter(|m| crate::shmem::is_shared_anon(m))
        .map(|m| m.end - m.start)
        .sum();
    let est = estimate(
        kib("RssAnon"),
        kib("VmSwap"),
        kib("RssShmem"),
        private,
        shared_anon,
    );
    if est < PREFAULT_MIN {
        return None;
    }
    let cap = est + est / 8 + (8 << 20);
    Reserve::new(cap as usize, est as usize, reader_threads(est)).ok()
}

/// The bytes a dump is expected to carry, from `status` fields (KiB):
/// anonymous resident and swapped pages, at most the `private` VMAs'
/// size, and the resident shared memory (`RssShmem`), at most the
/// `shared_anon` VMAs' size (0 without: then `RssShmem` is other shared
/// memory, tmpfs files, not carried).
fn estimate(rss_anon: u64, swap: u64, rss_shmem: u64, private: u64, shared_anon: u64) -> u64 {
    ((rss_anon + swap) << 10).min(private) + (rss_shmem << 10).min(shared_anon)
}

fn path(v: &Vma) -> &str {
    match &v.backing {
        Backing::File { path, .. } => path,
        Backing::Special { name } => name,
        Backing::Anon => "anonymous",
        Backing::SharedAnon { .. } => crate::shmem::SHARED_ANON,
    }
}

/// The carried VMAs with their page runs (offsets into the contents), and
/// the contents' length.
fn plan(
    pid: i32,
    reader: &dyn MemoryReader,
    maps: &[procfs::MapsEntry],
    set_range: Option<(u64, u64)>,
) -> Result<(Vec<Vma>, u64)> {
    let pm_path = format!("/proc/{pid}/pagemap");
    let pm = File::open(&pm_path).map_err(|e| Error::io(format!("open {pm_path}"), e))?;
    let mut vmas = Vec::new();
    // (index in vmas, start, end) of each VMA whose pages are scanned.
    let mut scan = Vec::new();
    let skip = restorer_regions(reader, maps);
    let carried: Vec<procfs::MapsEntry> = maps
        .iter()
        .filter(|m| !refuse::in_range(m, set_range))
        .cloned()
        .collect();
    crate::shmem::check_lone(pid, &carried)?;
    let shm_sizes = crate::shmem::sizes(pid, &carried);
    // Shared anonymous objects made with MAP_NORESERVE (`nr`): smaps is
    // read only when there is one such VMA at all.
    let noreserve = if carried.iter().any(crate::shmem::is_shared_anon) {
        let path = format!("/proc/{pid}/smaps");
        let t = std::fs::read_to_string(&path).map_err(|e| Error::io(format!("read {path}"), e))?;
        procfs::smaps_with_flag(&t, "nr")
    } else {
        Default::default()
    };
    for m in maps {
        if m.path == "[vsyscall]"
            || skip.iter().any(|&(s, e)| s <= m.start && m.end <= e)
            || refuse::in_range(m, set_range)
        {
            continue;
        }
        refuse::classify_mapping(m)?;
        let deleted = m.path.ends_with(" (deleted)") || procfs::replaced(m);
        let shared_anon = crate::shmem::is_shared_anon(m);
        let backing = if shared_anon {
            Backing::SharedAnon {
                object: m.inode,
                offset: m.offset,
                size: shm_sizes[&m.inode],
                noreserve: noreserve.contains(&m.start),
            }
        } else if is_special(&m.path) {
            Backing::Special {
                name: m.path.clone(),
            }
        } else if m.path.starts_with('/') && !deleted {
            Backing::File {
                path: m.path.clone(),
                offset: m.offset,
                id: time("file_id", || procfs::file_id(&m.path))?,
                shared: m.shared,
            }
        } else {
            Backing::Anon
        };
        let runs = match &backing {
            Backing::Special { .. } | Backing::File { shared: true, .. } => Vec::new(),
            // Shared anonymous memory: the pages its object holds.
            // pagemap shows only those mapped in this process's page
            // tables, not those dropped from them (MADV_DONTNEED keeps a
            // shared page's contents) or swapped out; the object is asked
            // instead, and without the rights to, every page is carried.
            _ if shared_anon => {
                crate::shmem::data_runs(pid, m).unwrap_or_else(|| vec![(m.start, m.end)])
            }
            // A deleted (or replaced) file cannot be mapped again: every
            // page is carried.
            _ if deleted => vec![(m.start, m.end)],
            _ => {
                scan.push((vmas.len(), m.start, m.end));
                Vec::new()
            }
        };
        vmas.push(Vma {
            grows_down: m.path == "[stack]",
            start: m.start,
            end: m.end,
            prot: m.prot,
            backing,
            pages: runs
                .into_iter()
                .map(|(s, e)| PageRun {
                    addr: s,
                    len: e - s,
                    file_off: 0,
                })
                .collect(),
        });
    }
    // The page tables of all the VMAs to scan are walked together, by as
    // many threads as will read the image (the present pages' bytes, by
    // the VMAs' sizes, are not known yet: the sizes stand in for them).
    let ranges: Vec<(u64, u64)> = scan.iter().map(|&(_, s, e)| (s, e)).collect();
    let threads = reader_threads(ranges.iter().map(|(s, e)| e - s).sum());
    let found = time("pagemap", || {
        pagescan::wanted_runs_of(&pm, &ranges, threads)
    })?;
    for (&(v, _, _), runs) in scan.iter().zip(found) {
        vmas[v].pages = runs
            .into_iter()
            .map(|(s, e)| PageRun {
                addr: s,
                len: e - s,
                file_off: 0,
            })
            .collect();
    }
    // Offsets in the contents, in VMA order.
    let mut off = 0u64;
    for r in vmas.iter_mut().flat_map(|v| v.pages.iter_mut()) {
        r.file_off = off;
        off += r.len;
    }
    Ok((vmas, off))
}

/// Regions left behind by an earlier restore (see `restorer::REGION_MAGIC`).
pub(crate) fn restorer_regions(
    reader: &dyn MemoryReader,
    maps: &[procfs::MapsEntry],
) -> Vec<(u64, u64)> {
    use crate::restorer::{CODE_SIZE, REGION_MAGIC};
    let mut out = Vec::new();
    for m in maps
        .iter()
        .filter(|m| m.path.is_empty() && m.prot == libc::PROT_READ | libc::PROT_WRITE)
    {
        let mut b = [0u8; 16];
        if m.start < CODE_SIZE || reader.read(m.start, &mut b).is_err() {
            continue;
        }
        let magic = u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
        let len = u64::from_le_bytes(b[8..].try_into().unwrap_or([0; 8]));
        if magic == REGION_MAGIC {
            out.push((m.start - CODE_SIZE, m.start - CODE_SIZE + len));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    /// Resident shared anonymous pages count, up to the size of the shared
    /// anonymous VMAs (before, they were left out, so a process of mostly
    /// shared anonymous memory got a reserve too small for its image).
    #[test]
    fn the_reserve_estimate_counts_shared_anonymous_memory() {
        const M: u64 = 1 << 20;
        // 10 MiB anonymous, 1 MiB swapped, 40 MiB shmem resident.
        let (anon, swap, shmem) = (10 << 10, 1 << 10, 40 << 10);
        assert_eq!(super::estimate(anon, swap, shmem, 100 * M, 0), 11 * M);
        assert_eq!(super::estimate(anon, swap, shmem, 100 * M, 64 * M), 51 * M);
        assert_eq!(super::estimate(anon, swap, shmem, 5 * M, 16 * M), 21 * M);
    }
}
