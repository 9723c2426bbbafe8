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
use crate::restore_check::{
    check_files, check_set_range, match_specials, overlaps, restored_in_set,
};
use crate::restore_plan::{plan, Layout, Plan, Source, TreeShm, TASK_SIZE};
use crate::restorer::{self, CODE_SIZE};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
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
/// Status-pipe step index of the fork of a process of a tree by its
/// parent's copy (see `restore_tree`).
pub(crate) const FORK_STEP: u64 = u64::MAX - 2;

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
    /// In a tree's restore, the read end of the gate (see `restore_tree`).
    pub(crate) gate: Option<RawFd>,
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
    if let Some(f) = m.fds.iter().find(|f| f.shared.is_some()) {
        return Err(Error::Restore(format!(
            "fd {} ({}) is shared with another process of a process tree: restore the \
             tree's image directory",
            f.fd, f.path
        )));
    }
    let prep = Prepared::new(m, file, memory, opts, None)?;
    let r = choose_region(&m.vmas, &prep.own, prep.r_len + prep.shm_len)?;
    let t = std::time::Instant::now();
    let p = prep.place(r, None)?;
    crate::phases::add("plan", prep.planned + t.elapsed());
    let t = std::time::Instant::now();
    // SAFETY: the child only runs `Prepared::enter`, which makes raw system
    // calls and copies bytes (async-signal-safe), then never returns.
    let pid = unsafe { restorer::spawn(m.pid, prep.member) }?;
    if pid == 0 {
        // SAFETY: we are the freshly forked child; `r` was checked free in
        // the parent's (= our) address space.
        unsafe { prep.enter(&p, r) }
    }
    crate::phases::add("fork", t.elapsed());
    let t = std::time::Instant::now();
    let started = prep.started(p);
    let status = started.result();
    crate::phases::add("blob", t.elapsed());
    if let Err(e) = status {
        let mut st = 0;
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        return Err(e);
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

/// One image's restore, prepared up to the placement of its region `R`:
/// its files checked and opened, its blob sized.
pub(crate) struct Prepared<'a> {
    m: &'a Manifest,
    memory: Option<&'a [u8]>,
    pieces: Pieces,
    /// The caller's own mappings, which `R` must avoid.
    pub(crate) own: Vec<procfs::MapsEntry>,
    specials: Vec<(u64, u64, u64)>,
    helpers: Helpers,
    stop: Option<u64>,
    switch: Option<Creds>,
    dry_len: usize,
    scratch_len: u64,
    /// Bytes of `R`: code, stack, data, the parked vdso/vvar and room
    /// for moved page contents.
    pub(crate) r_len: u64,
    /// Room for shared anonymous objects above `R` (see `restore_shmem`).
    pub(crate) shm_len: u64,
    /// Time spent so far (the `plan` phase).
    planned: std::time::Duration,
    /// The copy joins the caller's set ([`restored_in_set`]).
    pub(crate) member: bool,
}

impl<'a> Prepared<'a> {
    /// Checks the image's files and relayed fds, opens the helpers and
    /// sizes the blob.
    pub(crate) fn new(
        m: &'a Manifest,
        file: Option<File>,
        memory: Option<&'a [u8]>,
        opts: &RestoreOptions,
        gate: Option<RawFd>,
    ) -> Result<Prepared<'a>> {
        crate::phases::time("check_files", || check_files(m))?;
        let t = std::time::Instant::now();
        for f in &m.fds {
            if (f.relayed.is_some() || f.shared.is_some())
                && f.dup_of.is_none()
                && !opts.inherit.iter().any(|(fd, _)| *fd == f.fd)
            {
                return Err(Error::Restore(format!(
                    "fd {} ({}) was relayed by the node daemon or is shared in a process \
                     tree; restoring it needs a replacement",
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
        let helpers = open_helpers(file, m, opts, gate)?;
        let pieces = memory_pieces(memory.unwrap_or_default())?;
        let scratch_len: u64 = specials.iter().map(|s| s.2).sum();
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() } as u64;
        let stop = opts.stopped.then_some(me);
        let mut prep = Prepared {
            m,
            memory,
            pieces,
            own,
            specials,
            helpers,
            stop,
            switch: opts.creds.clone().filter(|c| !c.is_current()),
            dry_len: 0,
            scratch_len,
            r_len: 0,
            shm_len: 0,
            planned: std::time::Duration::ZERO,
            member: restored_in_set(m),
        };
        // A tree's plan (`gate`) maps its objects from the tree's: the same
        // ops at other addresses.
        let tree = match gate {
            Some(_) => Some(TreeShm::layout(std::iter::once(&m.vmas[..]))?),
            None => None,
        };
        let dry = plan(
            m,
            &prep.helpers,
            &prep.specials,
            Layout::default(),
            &prep.source(),
            stop,
            tree.as_ref(),
        )?;
        prep.dry_len = dry.data.len();
        let fixed = CODE_SIZE + STACK_SIZE + page_up(dry.data.len() as u64) + scratch_len;
        // Page contents moved in go at the same offset in a 2 MiB page as now,
        // so mremap moves huge page mappings whole; `R` itself is 2 MiB aligned.
        let span = prep.pieces.0;
        prep.r_len = match span.1 - span.0 {
            0 => Some(fixed),
            n => fixed.checked_add(2 * HUGE).and_then(|f| f.checked_add(n)),
        }
        .ok_or_else(|| Error::Image("the restorer region would not fit in 64 bits".into()))?;
        // Shared anonymous objects are made right above `R` (see
        // `restore_shmem`), once everything above it is unmapped: that room is
        // chosen free with `R` but not mapped with it (the address space at
        // the fork, see `restore_need`, does not grow) and not left behind.
        prep.shm_len = page_up(crate::restore_shmem::scratch_len(m)?);
        if prep.r_len.checked_add(prep.shm_len).is_none() {
            return Err(Error::Image(
                "the restorer region would not fit in 64 bits".into(),
            ));
        }
        prep.planned = t.elapsed();
        Ok(prep)
    }

    fn source(&self) -> Source<'_> {
        match self.memory {
            Some(data) => Source::Memory {
                data,
                span: self.pieces.0,
                pieces: &self.pieces.1,
            },
            None => Source::File,
        }
    }

    /// The blob's data for `R` at `r`; in a tree, with its shared
    /// anonymous objects made by the caller in `tree` (see `restore_tree`).
    pub(crate) fn place(&self, r: u64, tree: Option<&TreeShm>) -> Result<Plan> {
        let data_base = r + CODE_SIZE + STACK_SIZE;
        let scratch = data_base + page_up(self.dry_len as u64);
        let span = self.pieces.0;
        let lay = Layout {
            base: data_base,
            scratch,
            pages_at: (scratch + self.scratch_len).next_multiple_of(HUGE) + span.0 % HUGE,
            shm_at: r + self.r_len,
            end: tree.map_or(r + self.r_len, |t| t.at + t.len),
        };
        let p = plan(
            self.m,
            &self.helpers,
            &self.specials,
            lay,
            &self.source(),
            self.stop,
            tree,
        )?;
        if p.data.len() != self.dry_len {
            return Err(Error::Restore(format!(
                "restorer data is {} bytes, sized for {} (internal error)",
                p.data.len(),
                self.dry_len
            )));
        }
        Ok(p)
    }

    /// In the freshly forked child: takes the owner's ids if asked, maps
    /// `R` at `r` and runs the blob of `p` (made by [`Prepared::place`]).
    ///
    /// # Safety
    ///
    /// Only in a freshly forked child (raw system calls only from here on);
    /// `r..r + r_len` free in it.
    pub(crate) unsafe fn enter(&self, p: &Plan, r: u64) -> ! {
        let status_w = self.helpers.status_w.as_raw_fd();
        if let Some(c) = &self.switch {
            // SAFETY: the freshly forked, single-threaded child.
            if let Err(e) = unsafe { c.become_in_child() } {
                // SAFETY: per the contract.
                unsafe { fail_in_child(status_w, CREDS_STEP, e) }
            }
            // Changing the effective uid made the process non-dumpable; the
            // original was dumpable (its owner may inspect and trace it).
            // SAFETY: prctl with integer arguments.
            unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
        }
        let data_base = r + CODE_SIZE + STACK_SIZE;
        let status_fd = self.helpers.base as u64;
        // SAFETY: per the contract; `child_enter` never returns.
        unsafe {
            restorer::child_enter(
                r,
                self.r_len,
                restorer::code(),
                p,
                data_base,
                status_fd,
                status_w,
            )
        }
    }

    /// The raw status pipe the child reports a failure on.
    pub(crate) fn status_fd(&self) -> RawFd {
        self.helpers.status_w.as_raw_fd()
    }

    /// After the fork: closes our end of the status pipe, so that its end
    /// of file means the blob got through (or the child died).
    pub(crate) fn started(self, p: Plan) -> Started {
        Started {
            status_r: self.helpers.status_r,
            what: p.what,
        }
    }
}

/// A restore whose child runs; [`Started::result`] waits for its blob.
pub(crate) struct Started {
    status_r: File,
    what: Vec<String>,
}

impl Started {
    /// Waits until the blob is through (the status pipe's end of file):
    /// `Ok`, or the failing step it reported, named.
    pub(crate) fn result(mut self) -> Result<()> {
        let mut buf = Vec::new();
        let _ = self.status_r.read_to_end(&mut buf);
        if buf.len() < 16 {
            return Ok(());
        }
        let idx = u64::from_le_bytes(buf[0..8].try_into().unwrap_or([0; 8]));
        let ret = i64::from_le_bytes(buf[8..16].try_into().unwrap_or([0; 8]));
        let step = match self.what.get(idx as usize) {
            Some(w) => format!("restorer step {idx} ({w})"),
            None if idx == CREDS_STEP => "taking the owner's uid/gid/groups".into(),
            None if idx == FORK_STEP => "forking it with its pid in its parent's copy".into(),
            None => "mapping the restorer region".into(),
        };
        // A negative errno, or a count other than the one expected (a
        // `pread` cut short by a file truncated meanwhile).
        let err = match ret {
            ..0 => std::io::Error::from_raw_os_error((-ret) as i32).to_string(),
            n => format!("it returned {n} (short)"),
        };
        Err(Error::Restore(format!("{step} failed: {err}")))
    }
}

/// Reports step `step` failed with `err` (an errno, or a negative one) on
/// `status_w` and exits 127.
///
/// # Safety
///
/// Only in a forked child that is to die: it exits.
pub(crate) unsafe fn fail_in_child(status_w: RawFd, step: u64, err: i64) -> ! {
    let err = if err > 0 { -err } else { err };
    // On the stack: allocating here could wait forever on a lock another
    // thread of the tool held at the fork.
    let mut msg = [0u8; 16];
    msg[..8].copy_from_slice(&step.to_le_bytes());
    msg[8..].copy_from_slice(&err.to_le_bytes());
    // SAFETY: writing a local buffer to our pipe, then exiting.
    unsafe {
        libc::write(status_w, msg.as_ptr().cast(), msg.len());
        libc::_exit(127)
    }
}

fn open_helpers(
    pages: Option<File>,
    m: &Manifest,
    opts: &RestoreOptions,
    gate: Option<RawFd>,
) -> Result<Helpers> {
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
    let (status_r, status_w) = halfproc_sys::fd::pipe(libc::O_CLOEXEC)?;
    let status_r = File::from(status_r);
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
        gate,
        status_w,
        status_r,
        base: own_max.max(image_max) + 1,
    })
}

/// A free place for `R` (`len` bytes): clear of the image's VMAs `vmas`
/// and of our own mappings `own`.
pub(crate) fn choose_region(
    vmas: &[image::Vma],
    own: &[procfs::MapsEntry],
    len: u64,
) -> Result<u64> {
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
        let clash = vmas.iter().any(|v| overlaps(at, len, v.start, v.end))
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
