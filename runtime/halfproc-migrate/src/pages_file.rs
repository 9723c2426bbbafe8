//! Page contents in a file (`pages.img`), checked and restored with
//! bounded memory: [`verify_pages_file`] computes the CRC-32 in one
//! streaming pass of `pread`s into a buffer of [`CHUNK`] bytes (not the
//! whole file in memory), and [`restore_file_checked`] restores from the
//! same file and then checks that the process holds the contents that were
//! checked.
//!
//! The blob `pread`s the pages straight from the file into the new process
//! (see `restore_plan`), so a file changed after [`verify_pages_file`]
//! (by whoever may write it) would otherwise give a process with contents
//! nobody checked. The restore therefore leaves the process stopped just
//! before it resumes the program, and [`verify_restored`] reads its memory
//! back (`/proc/PID/mem`, in pieces of [`CHUNK`] bytes) and computes the
//! CRC-32 of the contents in the image's order again; the process runs
//! only if it is the manifest's, and is killed otherwise. No mapping of
//! the file is made, so a file truncated meanwhile is a short read (an
//! error), never a SIGBUS.

use crate::error::{Error, Result};
use crate::image::{self, Manifest, PageRun};
use crate::restore::{restore_from, RestoreOptions, Restored};
use std::fs::File;
use std::os::unix::fs::FileExt;

/// Bytes read (and held) at once by the checks.
pub const CHUNK: usize = 1 << 20;

fn mismatch() -> Error {
    Error::Image("pages size or checksum mismatch".into())
}

/// Reads `buf.len()` bytes at `off` of `f`: a short file is `mismatch`.
fn read_at(f: &File, buf: &mut [u8], off: u64, what: &str) -> Result<()> {
    f.read_exact_at(buf, off).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => mismatch(),
        _ => Error::io(format!("read {what}"), e),
    })
}

/// Adds `len` bytes of `f` at `off` to `h`, through `buf`.
fn hash_file(
    h: &mut crc32fast::Hasher,
    f: &File,
    buf: &mut [u8],
    off: u64,
    len: u64,
) -> Result<()> {
    let mut done = 0;
    while done < len {
        let n = (len - done).min(buf.len() as u64) as usize;
        read_at(f, &mut buf[..n], off + done, image::PAGES)?;
        h.update(&buf[..n]);
        done += n as u64;
    }
    Ok(())
}

/// [`image::verify_pages`] for contents in a file, read in pieces of
/// [`CHUNK`] bytes: every run inside its VMA, the runs covering the
/// contents exactly (from byte 0 to `pages_len`, without gaps or shared
/// bytes), the file's size `pages_len`, and then the CRC-32. Everything
/// but the CRC-32 is checked before a byte of the file is read: a manifest
/// that claims a larger (say sparse) file than its runs need is refused at
/// once, never read through. The same errors as [`image::verify_pages`].
pub fn verify_pages_file(m: &Manifest, f: &File) -> Result<()> {
    runs_in_file_order(m)?;
    let len = f
        .metadata()
        .map_err(|e| Error::io(format!("stat {}", image::PAGES), e))?
        .len();
    if len != m.pages_len {
        return Err(mismatch());
    }
    // Page contents become private memory of the copy: more than the
    // machine's memory and swap could never be restored here, and a sparse
    // file that large would only be read through for its CRC-32.
    if let Some(most) = memory_and_swap().filter(|&most| len > most) {
        return Err(Error::Image(format!(
            "{} claims {:.1} GiB of page contents, more than this machine's memory and swap \
             ({:.1} GiB): it could not be restored here (refused unread)",
            image::PAGES,
            len as f64 / GIB,
            most as f64 / GIB
        )));
    }
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; CHUNK.min(len.max(1) as usize)];
    hash_file(&mut h, f, &mut buf, 0, len)?;
    if h.finalize() != m.pages_crc {
        return Err(mismatch());
    }
    Ok(())
}

const GIB: f64 = (1u64 << 30) as f64;

/// Bytes of RAM and swap of this machine (`sysinfo`); `None` if unknown.
fn memory_and_swap() -> Option<u64> {
    // SAFETY: an all-zero sysinfo is a valid out buffer.
    let mut si: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: `si` is a valid out buffer.
    if unsafe { libc::sysinfo(&mut si) } != 0 {
        return None;
    }
    (si.totalram as u64)
        .checked_add(si.totalswap as u64)?
        .checked_mul(u64::from(si.mem_unit.max(1)))
}

/// The page runs of `m` in the order of their contents in the file,
/// checked ([`image::check_runs`]) and covering `[0, pages_len)` exactly:
/// an error if two share bytes, if bytes of the file lie between them or
/// after the last (no dump writes such bytes: they would only be read), or
/// if the offsets overflow.
fn runs_in_file_order(m: &Manifest) -> Result<Vec<&PageRun>> {
    image::check_runs(m)?;
    let mut runs: Vec<&PageRun> = m.vmas.iter().flat_map(|v| v.pages.iter()).collect();
    runs.sort_by_key(|r| r.file_off);
    let mut at = 0u64;
    for r in &runs {
        if r.file_off < at {
            return Err(Error::Image(format!(
                "page run {:#x} shares contents with the one before it in {}",
                r.addr,
                image::PAGES
            )));
        }
        if r.file_off > at {
            return Err(Error::Image(format!(
                "{} bytes {at}..{} belong to no page run",
                image::PAGES,
                r.file_off
            )));
        }
        at = r
            .file_off
            .checked_add(r.len)
            .ok_or_else(|| Error::Image(format!("page run {:#x}: offset overflows", r.addr)))?;
    }
    if at != m.pages_len {
        return Err(Error::Image(format!(
            "the page runs fill {at} bytes, the manifest says {} has {}: bytes that belong \
             to no page run",
            image::PAGES,
            m.pages_len
        )));
    }
    Ok(runs)
}

/// Memory of the restored process that it may hold other than as the
/// image has it: the rseq area (the kernel writes the CPU numbers there)
/// and the C library's thread id word (the restore writes the new id).
fn rewritten(m: &Manifest) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    if let Some(r) = m.rseq.filter(|r| r.ptr != 0) {
        v.push((r.ptr, r.ptr.saturating_add(rseq_written(r.len))));
    }
    if let Some(t) = m.tid_address.filter(|t| t.holds_tid) {
        v.push((t.addr, t.addr.saturating_add(4)));
    }
    v
}

/// Bytes at the start of a registered rseq area of `len` bytes that the
/// kernel writes: its features (`AT_RSEQ_FEATURE_SIZE`, at least the 32
/// bytes of the original `struct rseq`), not what an image claims (up to
/// 4 GiB, which would leave that much memory unchecked).
fn rseq_written(len: u32) -> u64 {
    const AT_RSEQ_FEATURE_SIZE: libc::c_ulong = 27;
    // SAFETY: getauxval reads the auxiliary vector; 0 when absent.
    let features = unsafe { libc::getauxval(AT_RSEQ_FEATURE_SIZE) };
    (len as u64).min(features.max(32).next_multiple_of(8))
}

/// Checks that the stopped process `pid`, just restored from `pages`,
/// holds the contents `m` describes: the CRC-32 of its memory at each run,
/// taken in the file's order (the bytes between runs, and the few the
/// kernel or the restore rewrote, from `pages`), is `m.pages_crc`.
/// Reads at most [`CHUNK`] bytes at once.
pub fn verify_restored(m: &Manifest, pid: i32, pages: &File) -> Result<()> {
    let path = format!("/proc/{pid}/mem");
    let mem = File::open(&path).map_err(|e| Error::io(format!("open {path}"), e))?;
    let runs = runs_in_file_order(m)?;
    let skip = rewritten(m);
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; CHUNK.min(m.pages_len.max(1) as usize)];
    let mut at = 0;
    for r in runs {
        hash_file(&mut h, pages, &mut buf, at, r.file_off - at)?;
        let mut done = 0;
        while done < r.len {
            let n = (r.len - done).min(buf.len() as u64) as usize;
            let addr = r.addr + done;
            mem.read_exact_at(&mut buf[..n], addr)
                .map_err(|e| Error::io(format!("read {path} at {addr:#x}"), e))?;
            for &(s, e) in &skip {
                let (s, e) = (s.max(addr), e.min(addr + n as u64));
                if s < e {
                    let i = (s - addr) as usize..(e - addr) as usize;
                    read_at(pages, &mut buf[i], r.file_off + (s - r.addr), image::PAGES)?;
                }
            }
            h.update(&buf[..n]);
            done += n as u64;
        }
        at = r.file_off + r.len;
    }
    hash_file(&mut h, pages, &mut buf, at, m.pages_len - at)?;
    if h.finalize() != m.pages_crc {
        return Err(Error::Image(format!(
            "{} changed after it was checked: the restored process does not hold the \
             contents the manifest describes",
            image::PAGES
        )));
    }
    Ok(())
}

/// [`restore_from`] for contents in a file checked with
/// [`verify_pages_file`], made safe against the file changing meanwhile:
/// the process is restored stopped, checked with [`verify_restored`], and
/// killed (and reaped) if that fails, before the program ran; otherwise
/// continued (`SIGCONT`, in the caller's process group), unless
/// `opts.stopped` asks to leave it stopped. Costs a second read of the
/// contents (from the process's memory, [`CHUNK`] bytes at a time).
///
/// Held stopped, the process dies with the calling thread
/// ([`RestoreOptions::stopped`]) until its restorer, continued, clears
/// that: the calling thread must outlive that moment (the node daemon's
/// keeper thread lives until the process ends).
pub fn restore_file_checked(m: &Manifest, pages: File, opts: &RestoreOptions) -> Result<Restored> {
    let check = pages
        .try_clone()
        .map_err(|e| Error::io(format!("dup {}", image::PAGES), e))?;
    let held = RestoreOptions {
        stopped: true,
        ..opts.clone()
    };
    let r = restore_from(m, pages, &held)?;
    if let Err(e) = verify_restored(m, r.pid, &check) {
        let mut st = 0;
        // SAFETY: killing and reaping our own child, stopped before it ran
        // the program.
        unsafe {
            libc::kill(r.pid, libc::SIGKILL);
            libc::waitpid(r.pid, &mut st, 0);
        }
        return Err(e);
    }
    if !opts.stopped {
        // Back in our process group, as a restore not held stopped leaves
        // it (held, the blob put it in its own), then continued.
        // SAFETY: setpgid and kill on our own stopped child, which never
        // called execve (so setpgid is allowed).
        unsafe {
            libc::setpgid(r.pid, libc::getpgrp());
            libc::kill(r.pid, libc::SIGCONT);
        }
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::{Backing, Vma};
    use std::time::{Duration, Instant};

    const PAGE: u64 = 4096;

    #[test]
    fn only_the_rseq_fields_the_kernel_writes_go_unchecked() {
        assert_eq!(rseq_written(32), 32);
        assert_eq!(rseq_written(20), 20);
        // An image claiming a 4 GiB area leaves no more than the kernel's
        // fields unchecked (this kernel's feature size, at least 32).
        let n = rseq_written(u32::MAX);
        assert!((32..=4096).contains(&n), "{n}");
    }

    /// A manifest of one anonymous VMA of 4 pages at `BASE` with `runs`
    /// (`(page, pages, file_off)`), `pages_len` and `pages_crc` as given.
    fn manifest(runs: &[(u64, u64, u64)], pages_len: u64, pages_crc: u32) -> Manifest {
        const BASE: u64 = 0x10_0000;
        let vma = Vma {
            start: BASE,
            end: BASE + 4 * PAGE,
            prot: libc::PROT_READ,
            backing: Backing::Anon,
            grows_down: false,
            pages: runs
                .iter()
                .map(|&(p, n, file_off)| PageRun {
                    addr: BASE + p * PAGE,
                    len: n * PAGE,
                    file_off,
                })
                .collect(),
        };
        let v = serde_json::json!({
            "version": 3, "pid": 1, "comm": "t", "regs": [], "xstate": [],
            "xstate_crc": 0, "sigmask": 0, "sigactions": [],
            "altstack": {"sp": 0, "flags": libc::SS_DISABLE, "size": 0},
            "rlimits": [], "cwd": "/", "umask": 0o22, "fds": [],
            "vmas": [vma], "mm": crate::image::MmFields::default(), "rseq": null,
            "pages_len": pages_len, "pages_crc": pages_crc,
        });
        serde_json::from_value(v).unwrap()
    }

    /// `verify_pages_file` on its own thread: `None` if it has not
    /// returned in 5 s (reading through the file).
    fn soon(m: Manifest, f: File) -> Option<Result<()>> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(verify_pages_file(&m, &f)));
        rx.recv_timeout(Duration::from_secs(5)).ok()
    }

    fn refused(r: Option<Result<()>>, want: &str) {
        match r.expect("the file was read through instead of refused at once") {
            Err(Error::Image(e)) => assert!(e.contains(want), "{e}"),
            other => panic!("{other:?}"),
        }
    }

    /// Review of 2026-11-28: a manifest claiming a sparse 1 TiB
    /// `pages.img` (its runs 2 pages) had all of it read for the CRC-32,
    /// hours of a daemon thread, before the runs were looked at. It is
    /// refused before anything is read; so are runs with a gap between
    /// them or sharing bytes, whatever the CRC-32.
    #[test]
    fn pages_beyond_or_between_the_runs_are_refused_before_a_read() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join(image::PAGES);
        let data: Vec<u8> = (0..2 * PAGE).map(|i| (i / PAGE + 1) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let open = || File::open(&path).unwrap();
        let crc = crc32fast::hash(&data);
        // The good one passes.
        let good = manifest(&[(0, 1, 0), (2, 1, PAGE)], 2 * PAGE, crc);
        soon(good, open()).unwrap().expect("a good image");

        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(1 << 40).unwrap();
        // (Its CRC-32 is not needed: nothing of it is read.)
        let huge = manifest(&[(0, 1, 0), (2, 1, PAGE)], 1 << 40, crc);
        let t0 = Instant::now();
        refused(soon(huge, open()), "belong to no page run");
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());

        // A gap between the runs (the file as long as the manifest says,
        // the CRC-32 right).
        f.set_len(3 * PAGE).unwrap();
        let mut gap = data.clone();
        gap.splice(PAGE as usize..PAGE as usize, vec![0u8; PAGE as usize]);
        std::fs::write(&path, &gap).unwrap();
        let m = manifest(
            &[(0, 1, 0), (2, 1, 2 * PAGE)],
            3 * PAGE,
            crc32fast::hash(&gap),
        );
        refused(soon(m, open()), "bytes 4096..8192 belong to no page run");

        // Two runs sharing bytes.
        std::fs::write(&path, &data).unwrap();
        let m = manifest(&[(0, 2, 0), (2, 1, PAGE)], 2 * PAGE, crc);
        refused(soon(m, open()), "shares contents");

        // Runs that cover a sparse 1 TiB file exactly (a 1 TiB VMA): more
        // than this machine's memory and swap, refused before a read.
        let mut m = manifest(&[(0, 1, 0)], 1 << 40, 0);
        m.vmas[0].end = m.vmas[0].start + (1 << 40);
        m.vmas[0].pages[0].len = 1 << 40;
        f.set_len(1 << 40).unwrap();
        let most = memory_and_swap().unwrap();
        assert!(
            most < 1 << 40,
            "this machine has {most} bytes of memory and swap"
        );
        let t0 = Instant::now();
        refused(soon(m, open()), "more than this machine's memory and swap");
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    }
}
