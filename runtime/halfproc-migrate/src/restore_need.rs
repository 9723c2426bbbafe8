//! The address space a restore needs, so that a node can tell before the
//! freeze whether its `RLIMIT_AS` lets the restore through.
//!
//! The forked child that rebuilds the program (see [`crate::restore`])
//! inherits the restoring process's limits; the program's own rlimits are
//! set by the blob only after its memory is in place (`restore_plan`), so
//! the limit that counts is the restoring process's soft `RLIMIT_AS`. The
//! child's address space has two peaks:
//!
//! 1. right after the fork it holds every mapping of the restoring process
//!    (the page contents among them, when they come from memory) and maps
//!    the restorer region `R` beside them;
//! 2. once it has unmapped everything but `R`, it maps the image's VMAs
//!    one after the other while `R` still holds the contents not yet moved
//!    out of it (they leave run by run, the rest is unmapped at the end).
//!
//! `R` is the code page, the blob's stack, its data (the table of system
//! calls, the strings and structures they point to, the frame and xsave
//! area, self-pipe contents), room to park the vdso and vvar, and, for a
//! restore from memory, a span for the page contents with two huge pages
//! of alignment slack. So the peak is at most
//! `R + max(the restoring process's mappings, the image's VMAs)`
//! ([`peak`]): the kernel refuses a mapping that would take the address
//! space beyond `RLIMIT_AS`, and `VmPeak` of the copy shows what it reached
//! (`tests/restore_need.rs` compares the two).

use crate::dump_mem::{is_special, restorer_regions};
use crate::error::{Error, Result};
use crate::image::{Backing, Manifest};
use crate::restore::STACK_SIZE;
use crate::restorer::CODE_SIZE;
use crate::{mem, procfs, refuse};
use serde::{Deserialize, Serialize};

/// Size of one entry of the blob's table of system calls (`restorer::Op`).
const OP_SIZE: u64 = 64;
/// Table entries per VMA: map, and at most a protection change.
const OPS_PER_VMA: u64 = 2;
/// Table entries per run of pages: fault in and fill (or copy), or move
/// and drop the huge page advice.
const OPS_PER_RUN: u64 = 2;
/// The rest of the blob's data, whatever the image: about 200 fixed
/// system calls (signal handlers, rlimits, fds, mm fields), the frame and
/// xsave area, paths, self-pipe contents (up to 64 KiB each, the default
/// pipe size) and the parked vdso/vvar. An allowance, not a count: the
/// table of a typical program is well under it (see the test).
const DATA_ALLOWANCE: u64 = 1 << 20;
/// Alignment slack of the contents' span in `R` (see `restore`).
const SPAN_SLACK: u64 = 2 * (2 << 20);

/// What the restorer maps for a program: its VMAs but the vdso and vvar
/// (the restoring process's own are moved into place), `[vsyscall]`, a
/// region left by an earlier restore, and a set's shared range.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapped {
    /// Their total size in bytes.
    pub bytes: u64,
    /// How many there are.
    pub vmas: u64,
}

/// [`Mapped`] of a running process, read from `/proc` (nothing is
/// stopped): what a restore of its dump would map, as far as it does not
/// change before the dump.
pub fn mapped(pid: i32, set_range: Option<(u64, u64)>) -> Result<Mapped> {
    let maps = procfs::maps(pid)?;
    let reader = mem::reader(pid).map_err(|e| Error::io(format!("open /proc/{pid}/mem"), e))?;
    let skip = restorer_regions(&*reader, &maps);
    let mut m = Mapped::default();
    for e in &maps {
        if e.path == "[vsyscall]"
            || is_special(&e.path)
            || skip.iter().any(|&(s, x)| s <= e.start && e.end <= x)
            || refuse::in_range(e, set_range)
        {
            continue;
        }
        m.bytes += e.end - e.start;
        m.vmas += 1;
    }
    Ok(m)
}

/// [`Mapped`] of an image.
pub fn mapped_in(m: &Manifest) -> Mapped {
    m.vmas
        .iter()
        .filter(|v| !matches!(v.backing, Backing::Special { .. }))
        .fold(Mapped::default(), |a, v| Mapped {
            bytes: a.bytes + (v.end - v.start),
            vmas: a.vmas + 1,
        })
}

/// Runs of pages in an image (each is one or two system calls of the blob).
pub fn runs_in(m: &Manifest) -> u64 {
    m.vmas.iter().map(|v| v.pages.len() as u64).sum()
}

/// At most this many runs in `pages` bytes of contents (one per page), for
/// an estimate made before the dump.
pub fn runs_at_most(pages: u64) -> u64 {
    pages.div_ceil(4096)
}

/// `x` rounded up to whole pages, saturating (the numbers may come from a
/// peer: an absurd one must refuse, not wrap to a small one).
fn pages_of(x: u64) -> u64 {
    x.saturating_add(4095) & !4095
}

/// Size of the restorer region for a restore from memory of `pages` bytes
/// of contents in `runs` runs, for a program with `m`'s VMAs (saturating).
pub fn region(m: &Mapped, pages: u64, runs: u64) -> u64 {
    let ops = (OPS_PER_VMA.saturating_mul(m.vmas)).saturating_add(OPS_PER_RUN.saturating_mul(runs));
    let table = OP_SIZE.saturating_mul(ops);
    (CODE_SIZE + STACK_SIZE + DATA_ALLOWANCE + SPAN_SLACK)
        .saturating_add(pages_of(table))
        .saturating_add(pages_of(pages))
}

/// The restoring process's own address space at the fork, when it holds
/// the page contents of a restore from memory (a `PageBuf`, at most a
/// huge page of placement beyond them) besides `now` bytes (saturating).
pub fn caller_at_fork(now: u64, pages: u64) -> u64 {
    now.saturating_add(pages_of(pages)).saturating_add(2 << 20)
}

/// At most this much address space is in use at once while the restore
/// runs: the region and the larger of the two peaks' other parts (the
/// caller's mappings right after the fork, `caller`; the program's VMAs).
pub fn peak(m: &Mapped, region: u64, caller: u64) -> u64 {
    region.saturating_add(m.bytes.max(caller))
}

/// This process's address space now (`VmSize`), in bytes.
pub fn own_vm_size() -> Result<u64> {
    let st = procfs::status(std::process::id() as i32)?;
    let kib = procfs::field(&st, "VmSize")?
        .split_whitespace()
        .next()
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| Error::Restore("no VmSize in /proc/self/status".into()))?;
    Ok(kib * 1024)
}

/// This process's soft `RLIMIT_AS` (which a restorer it forks inherits),
/// or `None` when unlimited.
pub fn own_rlimit_as() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one struct rlimit, which `r` is.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) } != 0 || r.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(r.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_is_the_region_and_the_larger_part() {
        let m = Mapped {
            bytes: 600 << 20,
            vmas: 40,
        };
        let r = region(&m, 100 << 20, 1000);
        // Code, stack, allowance, 2 x 40 + 2 x 1000 ops rounded up to
        // pages, the slack and the contents.
        let table = (64 * 2080u64).next_multiple_of(4096);
        assert_eq!(
            r,
            4096 + (64 << 10) + (1 << 20) + table + (4 << 20) + (100 << 20)
        );
        assert_eq!(peak(&m, r, 200 << 20), r + (600 << 20));
        assert_eq!(peak(&m, r, 700 << 20), r + (700 << 20));
        assert_eq!(
            caller_at_fork(50 << 20, 4097),
            (50 << 20) + 8192 + (2 << 20)
        );
        assert_eq!(runs_at_most(4097), 2);
    }

    /// The numbers come from a peer's offer: absurd ones saturate (and so
    /// refuse) instead of wrapping to a small peak that a limit lets pass.
    #[test]
    fn absurd_numbers_saturate() {
        let m = Mapped {
            bytes: u64::MAX - 5,
            vmas: u64::MAX / 3,
        };
        let r = region(&m, u64::MAX - 100, u64::MAX);
        assert_eq!(r, u64::MAX);
        assert_eq!(peak(&m, r, caller_at_fork(u64::MAX, u64::MAX)), u64::MAX);
        assert_eq!(caller_at_fork(1 << 20, u64::MAX - 1), u64::MAX);
    }

    #[test]
    fn a_process_maps_what_its_status_says() {
        // A single-threaded child that does not change its mappings.
        let mut c = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let pid = c.id() as i32;
        let mut m = Mapped::default();
        for _ in 0..2000 {
            // Until it sleeps (clock_nanosleep, 230): past its exec and
            // start-up, which map and unmap.
            let call = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
            if call.starts_with("230 ") {
                m = mapped(pid, None).unwrap();
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let st = procfs::status(pid).unwrap();
        let vm: u64 = procfs::field(&st, "VmSize")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            * 1024;
        let _ = c.kill();
        let _ = c.wait();
        // VmSize counts the vdso and vvar too, which `mapped` leaves out.
        assert!(
            m.vmas > 3 && m.bytes < vm && vm - m.bytes < 1 << 20,
            "{m:?} of VmSize {vm}"
        );
        let e = mapped(-1, None).unwrap_err().to_string();
        assert!(e.contains("/proc/-1"), "{e}");
    }
}
