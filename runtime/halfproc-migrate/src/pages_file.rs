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
/// [`CHUNK`] bytes: size, CRC-32, every run inside its VMA and inside the
/// contents, and (as the check after a restore needs) no two runs sharing
/// bytes of the file. The same errors as [`image::verify_pages`].
pub fn verify_pages_file(m: &Manifest, f: &File) -> Result<()> {
    let len = f
        .metadata()
        .map_err(|e| Error::io(format!("stat {}", image::PAGES), e))?
        .len();
    if len != m.pages_len {
        return Err(mismatch());
    }
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; CHUNK.min(len.max(1) as usize)];
    hash_file(&mut h, f, &mut buf, 0, len)?;
    if h.finalize() != m.pages_crc {
        return Err(mismatch());
    }
    image::check_runs(m)?;
    runs_in_file_order(m).map(drop)
}

/// The page runs of `m` in the order of their contents in the file;
/// an error if two share bytes.
fn runs_in_file_order(m: &Manifest) -> Result<Vec<&PageRun>> {
    let mut runs: Vec<&PageRun> = m.vmas.iter().flat_map(|v| v.pages.iter()).collect();
    runs.sort_by_key(|r| r.file_off);
    for w in runs.windows(2) {
        if w[0].file_off + w[0].len > w[1].file_off {
            return Err(Error::Image(format!(
                "page runs {:#x} and {:#x} share contents",
                w[0].addr, w[1].addr
            )));
        }
    }
    Ok(runs)
}

/// Memory of the restored process that it may hold other than as the
/// image has it: the rseq area (the kernel writes the CPU numbers there)
/// and the C library's thread id word (the restore writes the new id).
fn rewritten(m: &Manifest) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    if let Some(r) = m.rseq.filter(|r| r.ptr != 0) {
        v.push((r.ptr, r.ptr.saturating_add(r.len as u64)));
    }
    if let Some(t) = m.tid_address.filter(|t| t.holds_tid) {
        v.push((t.addr, t.addr.saturating_add(4)));
    }
    v
}

/// Checks that the stopped process `pid`, just restored from `pages`,
/// holds the contents `m` describes: the CRC-32 of its memory at each run,
/// taken in the file's order (the bytes between runs, and the few the
/// kernel or the restore rewrote, from `pages`), is `m.pages_crc`.
/// Reads at most [`CHUNK`] bytes at once.
pub fn verify_restored(m: &Manifest, pid: i32, pages: &File) -> Result<()> {
    let path = format!("/proc/{pid}/mem");
    let mem = File::open(&path).map_err(|e| Error::io(format!("open {path}"), e))?;
    image::check_runs(m)?;
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
