//! `restore`: turn an image into a running process.
//!
//! The restoring tool prepares everything in its own memory: a region `R`
//! (code of [`crate::restorer`], a table of system calls, the strings and
//! structures they point to, the `rt_sigreturn` frame and the xsave area) at
//! an address that collides with neither the image's VMAs nor the tool's own
//! mappings. It then forks; the child maps `R`, copies it in and jumps to it.
//! From there on only the blob runs: it unmaps everything but `R`, rebuilds
//! the image's address space, and ends in `rt_sigreturn`.

use crate::creds::Creds;
use crate::error::{Error, Result};
use crate::image::{self, Backing, Manifest};
use crate::procfs;
use crate::restore_check::{check_files, check_set_range, match_specials, overlaps};
use crate::restore_plan::{plan, Layout, Source, TASK_SIZE};
use crate::restorer::{self, CODE_SIZE};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

/// Preferred place of `R`: high, below the usual stack area, far from
/// mmap_base of a 47-bit process; searched downwards on collision.
const R_PREFERRED: u64 = 0x7ff0_0000_0000;
const R_STEP: u64 = 0x10_0000_0000;
pub(crate) const STACK_SIZE: u64 = 16 * 4096;
/// Transparent huge page size on x86_64.
const HUGE: u64 = 2 << 20;

/// Status-pipe step index of the credential switch in the child.
const CREDS_STEP: u64 = u64::MAX - 1;

/// A restored process, a child of the caller.
#[derive(Debug, Clone, Copy)]
pub struct Restored {
    pub pid: i32,
}

/// How [`restore_from`] and [`restore_from_memory`] build the process.
#[derive(Debug, Default, Clone)]
pub struct RestoreOptions {
    /// Replacements for the image's relayed fds: (fd number in the image,
    /// an fd of the caller). Every relayed fd of the image needs one; the
    /// caller keeps its own fd (it is duplicated into the process).
    pub inherit: Vec<(i32, RawFd)>,
    /// Leave the restored process stopped (SIGSTOP) just before it resumes
    /// the program, in its own process group, with `PR_SET_PDEATHSIG`
    /// SIGKILL so it dies with the restoring thread until it is continued;
    /// the caller continues it with SIGCONT (which then clears the death
    /// signal) or kills it. Used by migration: the original stays stopped
    /// until the copy is known to exist.
    pub stopped: bool,
    /// Restore as this owner (a root caller restoring another user's
    /// process): the files the restore opens are opened with the owner's
    /// rights and the process gets the owner's ids before it is rebuilt.
    /// `None`: the caller's own.
    pub creds: Option<Creds>,
}

/// Fds the blob uses, duplicated to `base..` in the child.
pub(crate) struct Helpers {
    /// The pages file (absent when the contents come from memory).
    pub(crate) pages: Option<File>,
    pub(crate) files: BTreeMap<String, File>,
    /// (image fd, caller's fd) for relayed fds.
    pub(crate) inherit: Vec<(i32, RawFd)>,
    pub(crate) status_w: OwnedFd,
    status_r: File,
    /// First fd number of the helpers in the restored process.
    pub(crate) base: i32,
}

fn page_up(x: u64) -> u64 {
    (x + 4095) & !4095
}

/// Restores the image in `dir` as a new child process and returns its pid
/// once the blob has rebuilt it (the process then runs on its own). The
/// pages are checked with bounded memory ([`image::read`]); a file
/// changed after that check is not noticed here (the node daemon's
/// restore notices it: [`crate::pages_file::restore_file_checked`], which
/// needs the calling thread to outlive the continued process's restorer).
pub fn restore(dir: &Path) -> Result<Restored> {
    let m = image::read(dir)?;
    let pages_path = dir.join(image::PAGES);
    let pages = File::open(&pages_path)
        .map_err(|e| Error::io(format!("open {}", pages_path.display()), e))?;
    restore_from(&m, pages, &RestoreOptions::default())
}

/// Restores the image described by `m` whose page contents are in `pages`
/// (a file, memfd, ... read with `pread`; the caller has checked it, e.g.
/// with [`crate::pages_file::verify_pages_file`], and knows it unchanged
/// since, or uses [`crate::pages_file::restore_file_checked`]). See
/// [`RestoreOptions`].
pub fn restore_from(m: &Manifest, pages: File, opts: &RestoreOptions) -> Result<Restored> {
    restore_with(m, Some(pages), None, opts)
}

/// [`restore_from`] with the page contents in the caller's memory (as
/// [`crate::Dumped::pages`] holds them; checked by the caller). Nothing is
/// written to a file: the forked child inherits `pages` and, when they start
/// on a page boundary (a [`crate::PageBuf`]), moves each large run of an
/// anonymous VMA into place with `mremap` (no fault-in, no copy; see
/// `restore_moves`) and copies the rest. Another thread of the caller must
/// not unmap or split the memory of `pages` meanwhile (it is borrowed, so it
/// cannot be freed).
///
/// The moved pages stay shared, copy on write, between the restored process
/// and the caller's `pages` until the caller drops them: each page the
/// process writes before that is copied. Drop `pages` as soon as the call
/// returns (before continuing a process restored with
/// [`RestoreOptions::stopped`]); after that, the process's first write to
/// a moved page is a fault that reuses the page (one per 4 KiB page, or per
/// 2 MiB for a huge page), not a copy.
pub fn restore_from_memory(m: &Manifest, pages: &[u8], opts: &RestoreOptions) -> Result<Restored> {
    if pages.len() as u64 != m.pages_len {
        return Err(Error::Image(format!(
            "{} bytes of page contents, the manifest says {}",
            pages.len(),
            m.pages_len
        )));
    }
    restore_with(m, None, Some(pages), opts)
}

/// A page-aligned range `[start, end)` and the (start, len) pieces of it
/// that lie in distinct VMAs.
type Pieces = ((u64, u64), Vec<(u64, u64)>);

/// The VMA pieces of our own memory that cover the pages around `data`.
fn memory_pieces(data: &[u8]) -> Result<Pieces> {
    if data.is_empty() {
        return Ok(((0, 0), Vec::new()));
    }
    let start = data.as_ptr() as u64 & !4095;
    let end = page_up(data.as_ptr() as u64 + data.len() as u64);
    let own = procfs::parse_maps(
        &std::fs::read_to_string("/proc/self/maps")
            .map_err(|e| Error::io("read /proc/self/maps", e))?,
    )?;
    let mut pieces = Vec::new();
    let mut at = start;
    for o in own.iter().filter(|o| o.end > start && o.start < end) {
        if o.start > at {
            break;
        }
        // The child moves these pages: a shared mapping (a half-process
        // set's range above all) would move for its other users too.
        let in_set = crate::mem::caller_is_member()
            && halfproc_sys::overlaps_shared_range(o.start, o.end - o.start);
        if o.shared || in_set {
            return Err(Error::Restore(format!(
                "page contents at {start:#x}-{end:#x} must be private memory, not in {:#x}-{:#x} ({})",
                o.start, o.end, if o.shared { "shared" } else { "the set's range" }
            )));
        }
        let to = o.end.min(end);
        pieces.push((at, to - at));
        at = to;
    }
    if at < end {
        return Err(Error::Restore(format!(
            "page contents at {start:#x}-{end:#x} are not all mapped here (hole at {at:#x})"
        )));
    }
    Ok(((start, end), pieces))
}

fn restore_with(
    m: &Manifest,
    file: Option<File>,
    memory: Option<&[u8]>,
    opts: &RestoreOptions,
) -> Result<Restored> {
    crate::phases::time("check_files", || check_files(m))?;
    let t = std::time::Instant::now();
    for f in &m.fds {
        if f.relayed.is_some()
            && f.dup_of.is_none()
            && !opts.inherit.iter().any(|(fd, _)| *fd == f.fd)
        {
            return Err(Error::Restore(format!(
                "fd {} ({}) was relayed by the node daemon; restoring it needs a replacement",
                f.fd, f.path
            )));
        }
    }
    let own = procfs::parse_maps(
        &std::fs::read_to_string("/proc/self/maps")
            .map_err(|e| Error::io("read /proc/self/maps", e))?,
    )?;
    let specials = match_specials(m, &own)?;
    check_set_range(m, &own, crate::mem::caller_is_member())?;
    let helpers = open_helpers(file, m, opts)?;
    let (span, pieces) = memory_pieces(memory.unwrap_or_default())?;
    let source = match memory {
        Some(data) => Source::Memory {
            data,
            span,
            pieces: &pieces,
        },
        None => Source::File,
    };
    let scratch_len: u64 = specials.iter().map(|s| s.2).sum();
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() } as u64;
    let stop = opts.stopped.then_some(me);
    let dry = plan(m, &helpers, &specials, Layout::default(), &source, stop)?;
    let fixed = CODE_SIZE + STACK_SIZE + page_up(dry.data.len() as u64) + scratch_len;
    // Page contents moved in go at the same offset in a 2 MiB page as now,
    // so mremap moves huge page mappings whole; `R` itself is 2 MiB aligned.
    let span_len = span.1 - span.0;
    let r_len = match span_len {
        0 => Some(fixed),
        n => fixed.checked_add(2 * HUGE).and_then(|f| f.checked_add(n)),
    };
    // Shared anonymous objects are made right above `R` (see
    // `restore_shmem`), once everything above it is unmapped: that room is
    // chosen free with `R` but not mapped with it (the address space at
    // the fork, see `restore_need`, does not grow) and not left behind.
    let shm_len = page_up(crate::restore_shmem::scratch_len(m)?);
    let (r_len, r_all) = r_len
        .and_then(|r| Some((r, r.checked_add(shm_len)?)))
        .ok_or_else(|| Error::Image("the restorer region would not fit in 64 bits".into()))?;
    let r = choose_region(m, &own, r_all)?;
    let data_base = r + CODE_SIZE + STACK_SIZE;
    let scratch = data_base + page_up(dry.data.len() as u64);
    let lay = Layout {
        base: data_base,
        scratch,
        pages_at: (scratch + scratch_len).next_multiple_of(HUGE) + span.0 % HUGE,
        shm_at: r + r_len,
        end: r + r_len,
    };
    let p = plan(m, &helpers, &specials, lay, &source, stop)?;
    if p.data.len() != dry.data.len() {
        return Err(Error::Restore(format!(
            "restorer data is {} bytes, sized for {} (internal error)",
            p.data.len(),
            dry.data.len()
        )));
    }
    let code = restorer::code();
    let status_fd = helpers.base as u64;
    let status_w = helpers.status_w.as_raw_fd();

    let switch = opts.creds.as_ref().filter(|c| !c.is_current());
    crate::phases::add("plan", t.elapsed());
    let t = std::time::Instant::now();
    // SAFETY: the child only runs `child_enter`, which makes raw system
    // calls and copies bytes (async-signal-safe), then never returns.
    let pid = unsafe { restorer::spawn(m.pid) }?;
    if pid == 0 {
        if let Some(c) = switch {
            // SAFETY: the freshly forked, single-threaded child.
            if let Err(e) = unsafe { c.become_in_child() } {
                let msg = [CREDS_STEP.to_le_bytes(), e.to_le_bytes()].concat();
                // SAFETY: writing a local buffer to our pipe, then exiting.
                unsafe {
                    libc::write(status_w, msg.as_ptr().cast(), msg.len());
                    libc::_exit(127)
                }
            }
            // Changing the effective uid made the process non-dumpable; the
            // original was dumpable (its owner may inspect and trace it).
            // SAFETY: prctl with integer arguments.
            unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
        }
        // SAFETY: we are the freshly forked child; `r` was checked free in the
        // parent's (= our) address space; `child_enter` never returns.
        unsafe { restorer::child_enter(r, r_len, code, &p, data_base, status_fd, status_w) }
    }
    crate::phases::add("fork", t.elapsed());
    let t = std::time::Instant::now();
    drop(helpers.status_w);
    let mut status_r = helpers.status_r;
    let mut buf = Vec::new();
    let _ = status_r.read_to_end(&mut buf);
    crate::phases::add("blob", t.elapsed());
    if buf.len() >= 16 {
        let idx = u64::from_le_bytes(buf[0..8].try_into().unwrap_or([0; 8]));
        let ret = i64::from_le_bytes(buf[8..16].try_into().unwrap_or([0; 8]));
        let mut st = 0;
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        let what = match p.what.get(idx as usize) {
            Some(w) => w.clone(),
            None if idx == CREDS_STEP => "taking the owner's uid/gid/groups".into(),
            None => "mapping the restorer region".into(),
        };
        // A negative errno, or a count other than the one expected (a
        // `pread` cut short by a file truncated meanwhile).
        let err = match ret {
            ..0 => std::io::Error::from_raw_os_error((-ret) as i32).to_string(),
            n => format!("it returned {n} (short)"),
        };
        return Err(Error::Restore(format!(
            "restorer step {idx} ({what}) failed: {err}"
        )));
    }
    if opts.stopped {
        let mut st = 0;
        // SAFETY: waiting for our own child to stop (or die).
        let r = unsafe { libc::waitpid(pid, &mut st, libc::WUNTRACED) };
        if r != pid || !libc::WIFSTOPPED(st) {
            return Err(Error::Restore(format!(
                "restored process {pid} did not stop before resuming (wait status {st:#x})"
            )));
        }
    }
    Ok(Restored { pid })
}

fn open_helpers(pages: Option<File>, m: &Manifest, opts: &RestoreOptions) -> Result<Helpers> {
    let mut files = BTreeMap::new();
    for v in &m.vmas {
        if let Backing::File { path, .. } = &v.backing {
            if !files.contains_key(path) {
                files.insert(
                    path.clone(),
                    match &opts.creds {
                        Some(c) => c.open(path),
                        None => crate::image_dir::open_regular(None, path.as_ref()),
                    }
                    .map_err(|e| Error::io(format!("open {path}"), e))?,
                );
            }
        }
    }
    let mut p = [0i32; 2];
    // SAFETY: `p` is a valid out array of two fds.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::last("pipe2"));
    }
    // SAFETY: both fds were just returned by pipe2 and are owned by nobody else.
    let (status_r, status_w) = unsafe { (File::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
    let own_max = std::fs::read_dir("/proc/self/fd")
        .map_err(|e| Error::io("read /proc/self/fd", e))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .max()
        .unwrap_or(2);
    let image_max = m.fds.iter().map(|f| f.fd).max().unwrap_or(2);
    Ok(Helpers {
        pages,
        files,
        inherit: opts.inherit.clone(),
        status_w,
        status_r,
        base: own_max.max(image_max) + 1,
    })
}

fn choose_region(m: &Manifest, own: &[procfs::MapsEntry], len: u64) -> Result<u64> {
    let mut at = R_PREFERRED;
    while at > R_STEP {
        // Never in or below the shared range: a member could not map R there.
        if at < halfproc_sys::range::HALFPROC_RANGE_END {
            break;
        }
        // Not beyond the user address space (a hostile image's sizes).
        if at.checked_add(len).is_none_or(|e| e > TASK_SIZE) {
            at -= R_STEP;
            continue;
        }
        let clash = m.vmas.iter().any(|v| overlaps(at, len, v.start, v.end))
            || own
                .iter()
                .any(|o| o.end <= TASK_SIZE && overlaps(at, len, o.start, o.end));
        if !clash {
            return Ok(at);
        }
        at -= R_STEP;
    }
    Err(Error::Restore("no free region for the restorer".into()))
}
