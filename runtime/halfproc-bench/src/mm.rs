// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `bench mm`: the cost of memory-management operations on the shared range
//! against private memory (paper section 4.4.3: 10^7 `mmap`s +4.9%, 10^6
//! page faults +0.8%).
//!
//! Both measurements run in a spawned member of the benchmark's set, because
//! on the kernel backend that is where the overheads live: a member's
//! `mmap` in the shared range switches to the set's address space, and its
//! first touch of a shared page goes through page-table redirection.
//!
//! | | private side | shared side, kernel backend | shared side, portable backend |
//! |---|---|---|---|
//! | mmap | `mmap(4 KiB, MAP_PRIVATE\|MAP_ANONYMOUS)` + `munmap` | same + `MAP_HALFPROC` | `mmap(4 KiB, MAP_SHARED, memfd)` at a fixed address in `[2^45, 2^46)` + `munmap` |
//! | fault | first write to each page of a fresh anonymous mapping | same on a `MAP_HALFPROC` mapping | same on a fresh memfd mapping in the range (shmem fault) |
//!
//! Only the kernel backend measures the paper's quantity; the portable
//! numbers say what the emulation costs instead (a file-backed mapping and
//! a shmem fault against anonymous memory) and are labelled so. Faults are
//! taken in batches of [`FAULT_BATCH`] pages with transparent huge pages
//! disabled on both sides; only the touches are timed. Private and shared
//! alternate in every repetition.

use crate::error::{Error, Result};
use crate::mmcount::{self, CountRow};
use crate::opts::MmOpts;
use crate::os;
use crate::report::{write_grid, Machine};
use crate::stats::{fmt_ns, Stats};
use halfproc::BackendKind;
use halfproc_sys::mem::{self, MapFlags, MmapAdvise, Region};
use halfproc_sys::range::HALFPROC_RANGE_START;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Pages per fault batch (64 MiB with 4 KiB pages).
pub const FAULT_BATCH: usize = 16384;

/// Private against shared timings of one operation (total ns per repetition).
#[derive(Clone, Debug)]
pub struct Pair {
    /// Private memory.
    pub private: Stats,
    /// Shared range.
    pub shared: Stats,
}

impl Pair {
    /// `shared / private` from the minima and from the medians.
    pub fn ratios(&self) -> (f64, f64) {
        (
            self.shared.min() as f64 / self.private.min() as f64,
            self.shared.median() / self.private.median(),
        )
    }
}

/// The result of `bench mm`.
#[derive(Clone, Debug)]
pub struct MmReport {
    /// Backend used.
    pub backend: BackendKind,
    /// Where it ran.
    pub machine: Machine,
    /// `mmap`+`munmap` pairs per repetition.
    pub mmaps: usize,
    /// Page faults per repetition.
    pub faults: usize,
    /// `mmap`+`munmap`.
    pub mmap: Pair,
    /// First-touch faults.
    pub fault: Pair,
    /// Counts per operation (kernel backend with the module's debugfs
    /// counters; empty elsewhere), see [`crate::mmcount`].
    pub counts: Vec<CountRow>,
    /// Files written.
    pub files: Vec<PathBuf>,
}

/// What the shared side is on this backend, for tables and JSON.
fn shared_meaning(b: BackendKind) -> &'static str {
    match b {
        BackendKind::Kernel => "MAP_HALFPROC anonymous memory in a member (address-space switching, page-table redirection)",
        BackendKind::Portable => "memfd MAP_SHARED mapping at a fixed address in the range (the portable emulation; not the paper's quantity)",
    }
}

/// The shared-range side's resources in the member.
struct SharedSide {
    /// The portable backend's memfd; `None` on the kernel backend.
    fd: Option<OwnedFd>,
}

/// Where the portable backend maps its memfd: 1 TiB into the range.
const MEMFD_AT: usize = HALFPROC_RANGE_START as usize + (1 << 40);

impl SharedSide {
    fn new(backend: BackendKind) -> Result<SharedSide> {
        let fd = match backend {
            BackendKind::Portable => Some(mem::memfd(
                c"halfproc-bench-mm",
                FAULT_BATCH * mem::page_size(),
            )?),
            BackendKind::Kernel => None,
        };
        Ok(SharedSide { fd })
    }

    /// Map `len` bytes in the shared range (checked by `halfproc-sys`).
    fn map(&self, len: usize) -> Result<Region> {
        Ok(match &self.fd {
            Some(fd) => Region::shared_fd("memfd in range", fd.as_fd(), len, Some(MEMFD_AT))?,
            None => Region::halfproc(len, None, MapFlags::empty())?,
        })
    }

    /// Drop the pages the last batch allocated, so the next batch faults
    /// fresh pages again (memfd only; anonymous pages go with munmap).
    fn reset(&self, len: usize) -> Result<()> {
        if let Some(fd) = &self.fd {
            mem::truncate(fd.as_fd(), 0)?;
            mem::truncate(fd.as_fd(), len)?;
        }
        Ok(())
    }
}

fn mmap_loop(n: usize, side: Option<&SharedSide>) -> Result<u64> {
    let page = mem::page_size();
    // Each mapping is checked (a comparison or two next to the system
    // calls), so a wrong placement fails loudly.
    let map = || match side {
        Some(s) => s.map(page),
        None => Ok(Region::anon("private", page, MapFlags::MAP_PRIVATE)?),
    };
    drop(map()?);
    let t = os::now_ns();
    for _ in 0..n {
        // Dropping the region unmaps it.
        drop(map()?);
    }
    Ok(os::now_ns() - t)
}

fn fault_loop(n: usize, side: Option<&SharedSide>) -> Result<u64> {
    let page = mem::page_size();
    let mut left = n;
    let mut total = 0;
    while left > 0 {
        let pages = left.min(FAULT_BATCH);
        let len = pages * page;
        let mut r = match side {
            Some(s) => {
                s.reset(FAULT_BATCH * page)?;
                s.map(len)?
            }
            None => Region::anon("private", len, MapFlags::MAP_PRIVATE)?,
        };
        // Best effort: kernels without THP refuse it, and then there are
        // no huge pages to avoid anyway.
        let _ = r.advise(MmapAdvise::MADV_NOHUGEPAGE);
        let t = os::now_ns();
        r.prefault_write();
        total += os::now_ns() - t;
        left -= pages;
    }
    Ok(total)
}

/// Run `bench mm` with `opts`; writes `mm.json` and `mm.txt` if `opts.out`
/// is set. Same threading rule as [`crate::run_copy`].
pub fn run_mm(opts: &MmOpts) -> Result<MmReport> {
    let backend = crate::backend::choose(&opts.backend)?;
    let reps = opts.reps.max(1);
    // Results: 4 x reps u64 + status, written by the member.
    let results = Region::shared_anon((4 * reps + 2) * 8)?;
    let slots = results.addr() as *mut u64;
    if opts.progress {
        eprintln!(
            "bench mm: backend {}, {} mmaps and {} faults per rep, {} reps",
            backend.name(),
            opts.mmaps,
            opts.faults,
            reps
        );
    }
    let pid = crate::backend::spawn_member(backend)?;
    if pid == 0 {
        let code = std::panic::catch_unwind(|| {
            let run = || -> Result<()> {
                let side = SharedSide::new(backend)?;
                for rep in 0..reps {
                    // Alternate which side goes first.
                    let order: [bool; 2] = if rep % 2 == 0 {
                        [false, true]
                    } else {
                        [true, false]
                    };
                    for shared in order {
                        let s = shared.then_some(&side);
                        let m = mmap_loop(opts.mmaps, s)?;
                        let f = fault_loop(opts.faults, s)?;
                        let base = if shared { 2 * reps } else { 0 };
                        // SAFETY: indices < 4 * reps inside the results
                        // region, written only by this process.
                        unsafe {
                            slots.add(base + rep).write_volatile(m);
                            slots.add(base + reps + rep).write_volatile(f);
                        }
                    }
                }
                Ok(())
            };
            match run() {
                Ok(()) => 0,
                Err(e) => {
                    let errno = e.errno().unwrap_or(0);
                    eprintln!("halfproc-bench mm member: {e}");
                    // SAFETY: the status slot, inside the region.
                    unsafe { slots.add(4 * reps).write_volatile(errno as u64 + 1) };
                    1
                }
            }
        })
        .unwrap_or(101);
        // SAFETY: end the member without unwinding into the caller.
        unsafe { libc::_exit(code) };
    }
    let st = os::wait_child(pid)?;
    // SAFETY: the member has exited; the region is ours and initialised
    // (zero-filled, then written by the member).
    let read = |i: usize| unsafe { slots.add(i).read_volatile() };
    if st != 0 {
        let status = read(4 * reps);
        let what = "bench mm member".to_string();
        return Err(if status > 1 {
            Error::from_errno(what, (status - 1) as i32)
        } else {
            Error::Verify(format!("{what} exited with status {st}"))
        });
    }
    let col = |base: usize| Stats::new((0..reps).map(|i| read(base + i)).collect());
    let mut report = MmReport {
        backend,
        machine: Machine::detect(&opts.label),
        mmaps: opts.mmaps,
        faults: opts.faults,
        mmap: Pair {
            private: col(0),
            shared: col(2 * reps),
        },
        fault: Pair {
            private: col(reps),
            shared: col(3 * reps),
        },
        counts: Vec::new(),
        files: Vec::new(),
    };
    if backend == BackendKind::Kernel && mmcount::available() {
        report.counts = mmcount::sweep()?;
    }
    if let Some(dir) = &opts.out {
        report.files = report.write_files(dir)?;
    }
    Ok(report)
}

impl MmReport {
    /// The result as text, with the paper's numbers beside ours.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "{}", self.machine.headline("mm", self.backend));
        let _ = writeln!(t, "shared side: {}", shared_meaning(self.backend));
        let head: Vec<String> = [
            "operation",
            "count",
            "private/op",
            "shared/op",
            "ratio(min)",
            "ratio(median)",
            "paper",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let row = |name: &str, n: usize, p: &Pair, paper: &str| {
            let (rmin, rmed) = p.ratios();
            vec![
                name.to_string(),
                n.to_string(),
                fmt_ns(p.private.median() / n as f64),
                fmt_ns(p.shared.median() / n as f64),
                format!("{rmin:.3} ({:+.1}%)", (rmin - 1.0) * 100.0),
                format!("{rmed:.3} ({:+.1}%)", (rmed - 1.0) * 100.0),
                paper.to_string(),
            ]
        };
        let rows = vec![
            row("mmap+munmap", self.mmaps, &self.mmap, "1.049 (+4.9%)"),
            row("page fault", self.faults, &self.fault, "1.008 (+0.8%)"),
        ];
        write_grid(&mut t, &head, &rows);
        if !self.counts.is_empty() {
            t.push_str(&mmcount::table(&self.counts));
        }
        t
    }

    /// The result as JSON.
    pub fn to_json(&self) -> Value {
        let pair = |p: &Pair, n: usize, paper: f64| {
            let (rmin, rmed) = p.ratios();
            json!({
                "count": n,
                "private_ns": p.private.samples,
                "shared_ns": p.shared.samples,
                "private_ns_per_op_median": p.private.median() / n as f64,
                "shared_ns_per_op_median": p.shared.median() / n as f64,
                "ratio_min": rmin,
                "ratio_median": rmed,
                "paper_ratio": paper,
            })
        };
        json!({
            "benchmark": "mm",
            "schema": 1,
            "backend": self.backend.name(),
            "shared_side": shared_meaning(self.backend),
            "machine": self.machine.json(),
            "mmap": pair(&self.mmap, self.mmaps, 2.654 / 2.531),
            "fault": pair(&self.fault, self.faults, 1.327 / 1.316),
            "counts": mmcount::json(&self.counts),
        })
    }

    /// Write `mm.json` and `mm.txt` into `dir`.
    pub fn write_files(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("mkdir {}", dir.display()), e))?;
        let mut files = Vec::new();
        for (name, body) in [
            (
                "mm.json",
                serde_json::to_string_pretty(&self.to_json()).expect("plain JSON"),
            ),
            ("mm.txt", self.table()),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, body).map_err(|e| Error::io(format!("write {}", p.display()), e))?;
            files.push(p);
        }
        Ok(files)
    }
}
