//! Which pages of a VMA a dump carries: the runs of pages that are
//! swapped out or present and not a file page (anonymous, or a private
//! file page written since: copy on write). Asked with the `PAGEMAP_SCAN`
//! ioctl on `/proc/PID/pagemap` (Linux 6.7), which answers in runs rather
//! than 8 bytes per page; read from the pagemap file where the kernel has
//! no such ioctl. Both give the same runs (tested below).

use crate::error::{Error, Result};
use crate::procfs::{self, PM_FILE, PM_PRESENT, PM_SWAP};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `struct pm_scan_arg` (include/uapi/linux/fs.h).
#[repr(C)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

const PAGE_IS_FILE: u64 = 1 << 2;
const PAGE_IS_PRESENT: u64 = 1 << 3;
const PAGE_IS_SWAPPED: u64 = 1 << 4;
/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: libc::c_ulong = (3 << 30)
    | ((std::mem::size_of::<PmScanArg>() as libc::c_ulong) << 16)
    | ((b'f' as libc::c_ulong) << 8)
    | 16;
/// Regions asked for per call.
const REGIONS: usize = 256;

/// The carried runs of pages in `[start, end)`, as `(start, end)` address
/// pairs in order, adjacent runs joined. `pm` is the target's pagemap.
pub(crate) fn wanted_runs(pm: &File, start: u64, end: u64) -> Result<Vec<(u64, u64)>> {
    match scan(pm, start, end) {
        Ok(v) => Ok(v),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTTY | libc::EINVAL)) => {
            read_runs(pm, start, end)
        }
        Err(e) => Err(Error::io(
            format!("PAGEMAP_SCAN {start:#x}-{end:#x} of the pagemap"),
            e,
        )),
    }
}

/// [`wanted_runs`] of each of `ranges`, by `threads` threads: the ranges
/// are cut at multiples of a part size (at least 32 MiB, more for a large
/// total so that there are at most about 1024 parts) and the threads take
/// the parts in order from a shared queue; runs that meet at a cut are
/// joined again, so the answer is that of one scan per range. The walk of
/// the page tables, which is what costs (about 10 ms per GiB present),
/// is then shared.
pub(crate) fn wanted_runs_of(
    pm: &File,
    ranges: &[(u64, u64)],
    threads: usize,
) -> Result<Vec<Vec<(u64, u64)>>> {
    let total: u64 = ranges.iter().map(|(s, e)| e - s).sum();
    let part = (total / 1024).max(32 << 20).next_multiple_of(2 << 20);
    in_parts(pm, ranges, threads, part)
}

fn in_parts(
    pm: &File,
    ranges: &[(u64, u64)],
    threads: usize,
    part: u64,
) -> Result<Vec<Vec<(u64, u64)>>> {
    let mut parts = Vec::new();
    for (i, &(start, end)) in ranges.iter().enumerate() {
        let mut at = start;
        while at < end {
            let cut = if threads > 1 {
                ((at / part + 1) * part).min(end)
            } else {
                end
            };
            parts.push((i, at, cut));
            at = cut;
        }
    }
    let queue = std::sync::Mutex::new(parts.into_iter().enumerate());
    let failed = std::sync::atomic::AtomicBool::new(false);
    type Found = (usize, usize, Result<Vec<(u64, u64)>>);
    let work = || -> Vec<Found> {
        let mut done = Vec::new();
        while !failed.load(std::sync::atomic::Ordering::Relaxed) {
            let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
            let Some((k, (i, s, e))) = next else { break };
            let r = wanted_runs(pm, s, e);
            if r.is_err() {
                failed.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            done.push((k, i, r));
        }
        done
    };
    let mut found: Vec<Found> = if threads <= 1 {
        work()
    } else {
        std::thread::scope(|scope| {
            let hs: Vec<_> = (0..threads).map(|_| scope.spawn(work)).collect();
            hs.into_iter()
                .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        })
    };
    found.sort_unstable_by_key(|&(k, _, _)| k);
    let mut out = vec![Vec::new(); ranges.len()];
    for (_, i, r) in found {
        for (s, e) in r? {
            push_run(&mut out[i], s, e);
        }
    }
    Ok(out)
}

fn wanted(categories: u64) -> bool {
    categories & PAGE_IS_SWAPPED != 0
        || (categories & PAGE_IS_PRESENT != 0 && categories & PAGE_IS_FILE == 0)
}

fn push_run(out: &mut Vec<(u64, u64)>, s: u64, e: u64) {
    match out.last_mut() {
        Some(last) if last.1 == s => last.1 = e,
        _ => out.push((s, e)),
    }
}

fn scan(pm: &File, start: u64, end: u64) -> io::Result<Vec<(u64, u64)>> {
    let mut regions = vec![PageRegion::default(); REGIONS];
    let mut out = Vec::new();
    let mut at = start;
    while at < end {
        let mut arg = PmScanArg {
            size: std::mem::size_of::<PmScanArg>() as u64,
            flags: 0,
            start: at,
            end,
            walk_end: 0,
            vec: regions.as_mut_ptr() as u64,
            vec_len: regions.len() as u64,
            max_pages: 0,
            category_inverted: 0,
            category_mask: 0,
            category_anyof_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
            return_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED | PAGE_IS_FILE,
        };
        // SAFETY: `arg` is a valid pm_scan_arg whose `vec` points to
        // `regions`, `vec_len` entries we own and do not touch during the
        // call; the kernel writes at most that many and `walk_end`.
        let n = unsafe { libc::ioctl(pm.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        for r in &regions[..(n as usize).min(REGIONS)] {
            if wanted(r.categories) {
                push_run(&mut out, r.start, r.end);
            }
        }
        if arg.walk_end <= at || arg.walk_end > end {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("PAGEMAP_SCAN stopped at {:#x} (from {at:#x})", arg.walk_end),
            ));
        }
        at = arg.walk_end;
    }
    Ok(out)
}

/// The same runs from the pagemap file, 8 bytes per page.
fn read_runs(pm: &File, start: u64, end: u64) -> Result<Vec<(u64, u64)>> {
    let ps = procfs::page_size();
    let mut out = Vec::new();
    for (i, &e) in procfs::pagemap(pm, start, end)?.iter().enumerate() {
        let present_anon = e & PM_PRESENT != 0 && e & PM_FILE == 0;
        if present_anon || e & PM_SWAP != 0 {
            let s = start + i as u64 * ps;
            push_run(&mut out, s, s + ps);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const PS: u64 = 4096;

    #[test]
    fn scan_and_read_give_the_expected_runs() {
        let pm = File::open("/proc/self/pagemap").unwrap();
        // SAFETY: fresh private anonymous mapping of 64 pages, ours.
        let anon = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                64 * PS as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        } as u64;
        assert_ne!(anon, libc::MAP_FAILED as u64);
        // SAFETY: fresh private anonymous mapping; NOHUGEPAGE keeps the
        // untouched pages absent.
        unsafe { libc::madvise(anon as *mut _, 64 * PS as usize, libc::MADV_NOHUGEPAGE) };
        for pg in (0..10).chain([20]).chain(30..64) {
            // SAFETY: inside the mapping just made.
            unsafe { ((anon + pg * PS) as *mut u8).write_volatile(1) };
        }
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![7u8; 8 * PS as usize]).unwrap();
        // SAFETY: a private mapping of the 8-page file we just wrote.
        let file = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8 * PS as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE,
                f.as_raw_fd(),
                0,
            )
        } as u64;
        assert_ne!(file, libc::MAP_FAILED as u64);
        let mut sum = 0u64;
        for pg in 0..8 {
            // SAFETY: inside the file mapping; reads fault in file pages.
            sum += unsafe { ((file + pg * PS) as *const u8).read_volatile() } as u64;
        }
        assert_eq!(sum, 56);
        // SAFETY: page 2 of the private file mapping: copy on write.
        unsafe { ((file + 2 * PS) as *mut u8).write_volatile(9) };

        let a = |p: u64| anon + p * PS;
        let want_anon = vec![(a(0), a(10)), (a(20), a(21)), (a(30), a(64))];
        let want_file = vec![(file + 2 * PS, file + 3 * PS)];
        let got_read = (
            read_runs(&pm, anon, a(64)).unwrap(),
            read_runs(&pm, file, file + 8 * PS).unwrap(),
        );
        assert_eq!(got_read, (want_anon.clone(), want_file.clone()), "read");
        match scan(&pm, anon, a(64)) {
            Ok(v) => {
                assert_eq!(v, want_anon, "scan");
                assert_eq!(scan(&pm, file, file + 8 * PS).unwrap(), want_file);
            }
            // A kernel before 6.7: wanted_runs reads instead (above).
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOTTY), "{e}"),
        }
        assert_eq!(wanted_runs(&pm, anon, a(64)).unwrap(), want_anon);
        // Cut into parts of 3 pages, scanned by 1 and 3 threads: the
        // same runs (joined across the cuts), in the order of the ranges.
        let ranges = [(file, file + 8 * PS), (anon, a(64))];
        for threads in [1, 3] {
            assert_eq!(
                in_parts(&pm, &ranges, threads, 3 * PS).unwrap(),
                vec![want_file.clone(), want_anon.clone()],
                "{threads} threads"
            );
        }
        // SAFETY: unmapping the two mappings made above.
        unsafe {
            libc::munmap(anon as *mut _, 64 * PS as usize);
            libc::munmap(file as *mut _, 8 * PS as usize);
        }
    }

    #[test]
    fn a_scan_that_needs_many_calls_joins_its_runs() {
        // Every other page present: REGIONS + 5 runs, two calls' worth:
        // the second call must start where the first stopped.
        let pm = File::open("/proc/self/pagemap").unwrap();
        let n = 2 * REGIONS as u64 + 10;
        // SAFETY: fresh private anonymous mapping of n pages, ours.
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                (n * PS) as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        } as u64;
        assert_ne!(m, libc::MAP_FAILED as u64);
        // SAFETY: as above.
        unsafe { libc::madvise(m as *mut _, (n * PS) as usize, libc::MADV_NOHUGEPAGE) };
        for pg in (0..n).step_by(2) {
            // SAFETY: inside the mapping.
            unsafe { ((m + pg * PS) as *mut u8).write_volatile(1) };
        }
        let want: Vec<(u64, u64)> = (0..n)
            .step_by(2)
            .map(|pg| (m + pg * PS, m + (pg + 1) * PS))
            .collect();
        assert_eq!(wanted_runs(&pm, m, m + n * PS).unwrap(), want);
        assert_eq!(read_runs(&pm, m, m + n * PS).unwrap(), want);
        // SAFETY: unmapping the mapping made above.
        unsafe { libc::munmap(m as *mut _, (n * PS) as usize) };
    }
}
