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
use crate::image::{self, reg, Backing, Manifest};
use crate::procfs;
use crate::restore_check::{check_files, check_set_range, match_specials, overlaps, unmap_ranges};
use crate::restorer::{self, Op, ANY_OK, CODE_SIZE, IGNORE};
use crate::sigframe;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

/// Highest user address (47-bit address space).
const TASK_SIZE: u64 = 0x7fff_ffff_f000;
/// Preferred place of `R`: high, below the usual stack area, far from
/// mmap_base of a 47-bit process; searched downwards on collision.
const R_PREFERRED: u64 = 0x7ff0_0000_0000;
const R_STEP: u64 = 0x10_0000_0000;
pub(crate) const STACK_SIZE: u64 = 16 * 4096;
const RSEQ_SIG: u64 = 0x5305_3053;

extern "C" {
    static __rseq_offset: isize;
    static __rseq_size: u32;
}

/// Status-pipe step index of the credential switch in the child.
const CREDS_STEP: u64 = u64::MAX - 1;

/// A restored process, a child of the caller.
#[derive(Debug, Clone, Copy)]
pub struct Restored {
    pub pid: i32,
}

/// How [`restore_from`] builds the process.
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

struct Blob {
    base: u64,
    bytes: Vec<u8>,
}

impl Blob {
    fn push(&mut self, data: &[u8], align: usize) -> u64 {
        while self.bytes.len() % align != 0 {
            self.bytes.push(0);
        }
        let at = self.base + self.bytes.len() as u64;
        self.bytes.extend_from_slice(data);
        at
    }
    fn cstr(&mut self, s: &str) -> Result<u64> {
        let c = CString::new(s).map_err(|_| Error::Image(format!("NUL in path {s:?}")))?;
        Ok(self.push(c.as_bytes_with_nul(), 1))
    }
}

/// The blob's data and where its parts are (addresses inside `R`).
pub(crate) struct Plan {
    pub(crate) data: Vec<u8>,
    pub(crate) ops_addr: u64,
    pub(crate) nops: u64,
    pub(crate) uc_addr: u64,
    pub(crate) err_slot: u64,
    what: Vec<String>,
}

struct Helpers {
    pages: File,
    files: BTreeMap<String, File>,
    /// (image fd, caller's fd) for relayed fds.
    inherit: Vec<(i32, RawFd)>,
    status_w: OwnedFd,
    status_r: File,
    /// First fd number of the helpers in the restored process.
    base: i32,
}

fn page_up(x: u64) -> u64 {
    (x + 4095) & !4095
}

/// Restores the image in `dir` as a new child process and returns its pid
/// once the blob has rebuilt it (the process then runs on its own).
pub fn restore(dir: &Path) -> Result<Restored> {
    let m = image::read(dir)?;
    let pages_path = dir.join(image::PAGES);
    let pages = File::open(&pages_path)
        .map_err(|e| Error::io(format!("open {}", pages_path.display()), e))?;
    restore_from(&m, pages, &RestoreOptions::default())
}

/// Restores the image described by `m` whose page contents are in `pages`
/// (a file, memfd, ... read with `pread`; the caller has checked it, e.g.
/// with [`image::verify_pages`]). See [`RestoreOptions`].
pub fn restore_from(m: &Manifest, pages: File, opts: &RestoreOptions) -> Result<Restored> {
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
    check_set_range(m, &own)?;
    let helpers = open_helpers(pages, m, opts)?;
    let scratch_len: u64 = specials.iter().map(|s| s.2).sum();
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() } as u64;
    let stop = opts.stopped.then_some(me);
    let dry = plan(m, &helpers, &specials, 0, 0, stop)?;
    let r_len = CODE_SIZE + STACK_SIZE + page_up(dry.data.len() as u64) + scratch_len;
    let r = choose_region(m, &own, r_len)?;
    let data_base = r + CODE_SIZE + STACK_SIZE;
    let scratch = data_base + page_up(dry.data.len() as u64);
    let p = plan(m, &helpers, &specials, data_base, scratch, stop)?;
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
    let pid = unsafe { restorer::spawn() }?;
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
        let err = std::io::Error::from_raw_os_error((-ret) as i32);
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

fn open_helpers(pages: File, m: &Manifest, opts: &RestoreOptions) -> Result<Helpers> {
    let mut files = BTreeMap::new();
    for v in &m.vmas {
        if let Backing::File { path, .. } = &v.backing {
            if !files.contains_key(path) {
                files.insert(
                    path.clone(),
                    match &opts.creds {
                        Some(c) => c.open(path),
                        None => File::open(path),
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

/// Builds the blob's data (ops last) for a data region at `base`.
fn plan(
    m: &Manifest,
    h: &Helpers,
    specials: &[(u64, u64, u64)],
    base: u64,
    scratch: u64,
    stop_under: Option<u64>,
) -> Result<Plan> {
    let mut b = Blob {
        base,
        bytes: Vec::new(),
    };
    let mut ops: Vec<(Op, String)> = Vec::new();
    // On the kernel backend the restored process is a member of our set
    // (see `restorer::spawn`): its shared range is the set's, left alone.
    let keep_range = crate::mem::caller_is_member();
    let mut op = |nr: libc::c_long, args: &[u64], expect: u64, what: String| {
        ops.push((Op::new(nr, args, expect), what));
    };
    use libc::*;
    let err_slot = b.push(&[0u8; 16], 16);
    let rseq_area = b.push(&[0u8; 32], 32);
    let all = b.push(&u64::MAX.to_le_bytes(), 8);
    op(
        SYS_rt_sigprocmask,
        &[SIG_SETMASK as u64, all, 0, 8],
        0,
        "block all signals".into(),
    );

    // Helper fds at base.. (status pipe first, then pages, then mapped
    // files, then the caller's replacements of relayed fds).
    let mut helpers: Vec<(i32, String)> = vec![
        (h.status_w.as_raw_fd(), "status pipe".into()),
        (h.pages.as_raw_fd(), "pages.img".into()),
    ];
    helpers.extend(h.files.iter().map(|(p, f)| (f.as_raw_fd(), p.clone())));
    let n_files = h.files.len();
    helpers.extend(
        h.inherit
            .iter()
            .map(|(fd, cur)| (*cur, format!("relayed fd {fd}"))),
    );
    let mut file_fd = BTreeMap::new();
    let mut inherit_fd = BTreeMap::new();
    for (i, (cur, name)) in helpers.iter().enumerate() {
        let to = h.base as u64 + i as u64;
        op(
            SYS_dup2,
            &[*cur as u64, to],
            to,
            format!("dup2 helper fd for {name}"),
        );
        if i >= 2 + n_files {
            inherit_fd.insert(h.inherit[i - 2 - n_files].0, to);
        } else if i >= 2 {
            file_fd.insert(name.clone(), to);
        }
    }
    let pages_fd = h.base as u64 + 1;

    // Drop the tool's alternate signal stack: rt_sigreturn refuses to
    // install the image's while the stack pointer seems to be on the old one.
    let no_alt = b.push(
        &[
            0u64.to_le_bytes(),
            (SS_DISABLE as u64).to_le_bytes(),
            0u64.to_le_bytes(),
        ]
        .concat(),
        8,
    );
    op(
        SYS_sigaltstack,
        &[no_alt, 0],
        0,
        "sigaltstack(SS_DISABLE)".into(),
    );

    // Leave our rseq registration: it points into memory about to go away.
    // SAFETY: glibc exports both symbols as plain data; reading is safe.
    let (rs_off, rs_size) = unsafe { (__rseq_offset, __rseq_size) };
    if rs_size > 0 {
        let tp: u64;
        // SAFETY: on x86_64 glibc, fs:0 holds the thread pointer itself.
        unsafe { core::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly)) };
        let area = tp.wrapping_add(rs_off as u64);
        for len in [32u64, rs_size as u64] {
            op(
                SYS_rseq,
                &[area, len, 1, RSEQ_SIG],
                IGNORE,
                "rseq unregister (tool's area)".into(),
            );
        }
        op(
            SYS_rseq,
            &[rseq_area, 32, 0, RSEQ_SIG],
            0,
            "rseq: check the tool's registration is gone".into(),
        );
        op(
            SYS_rseq,
            &[rseq_area, 32, 1, RSEQ_SIG],
            0,
            "rseq unregister (probe)".into(),
        );
    }
    let mut at = scratch;
    for (mine, _, len) in specials {
        op(
            SYS_mremap,
            &[
                *mine,
                *len,
                *len,
                (MREMAP_MAYMOVE | MREMAP_FIXED) as u64,
                at,
            ],
            at,
            "move vdso/vvar aside".into(),
        );
        at += len;
    }
    op(
        SYS_close_range,
        &[0, h.base as u64 - 1, 0],
        0,
        "close the tool's fds".into(),
    );
    let r_start = base.saturating_sub(CODE_SIZE + STACK_SIZE);
    let r_end = scratch + specials.iter().map(|s| s.2).sum::<u64>();
    // Also pushed in the sizing pass (base 0): both passes must have the
    // same ops, the region is sized from the first.
    // A member's set range stays: the copy shares the restoring process's
    // (given by the image on the portable backend; on the kernel backend a
    // member may not unmap across the range (EINVAL) and must not unmap in
    // it, which would take the set's memory from every member).
    let keep = m.set_range.or(keep_range.then_some((
        halfproc_sys::range::HALFPROC_RANGE_START,
        halfproc_sys::range::HALFPROC_RANGE_END,
    )));
    for (a, len) in unmap_ranges(0, r_start, keep) {
        op(SYS_munmap, &[a, len], 0, "unmap below the restorer".into());
    }
    for (a, len) in unmap_ranges(r_end, TASK_SIZE, keep) {
        op(SYS_munmap, &[a, len], 0, "unmap above the restorer".into());
    }
    let mut at = scratch;
    for (_, old, len) in specials {
        op(
            SYS_mremap,
            &[at, *len, *len, (MREMAP_MAYMOVE | MREMAP_FIXED) as u64, *old],
            *old,
            format!("move vdso/vvar to {old:#x}"),
        );
        at += len;
    }

    for v in &m.vmas {
        let len = v.end - v.start;
        let grows = if v.grows_down { MAP_GROWSDOWN } else { 0 };
        let wprot = if v.pages.is_empty() {
            v.prot
        } else {
            v.prot | PROT_WRITE
        };
        let what = |s: &str| format!("{s} {:#x}-{:#x} ({:?})", v.start, v.end, v.backing);
        match &v.backing {
            Backing::Special { .. } => continue,
            Backing::Anon => op(
                SYS_mmap,
                &[
                    v.start,
                    len,
                    wprot as u64,
                    (MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | grows) as u64,
                    u64::MAX,
                    0,
                ],
                v.start,
                what("map anonymous"),
            ),
            Backing::File {
                path,
                offset,
                shared,
                ..
            } => {
                let kind = if *shared { MAP_SHARED } else { MAP_PRIVATE };
                op(
                    SYS_mmap,
                    &[
                        v.start,
                        len,
                        wprot as u64,
                        (kind | MAP_FIXED) as u64,
                        file_fd[path],
                        *offset,
                    ],
                    v.start,
                    what("map file"),
                )
            }
        }
        for r in &v.pages {
            // Fault the run in with one call (Linux 5.14; ignored where
            // missing) rather than page by page inside the pread.
            op(
                SYS_madvise,
                &[r.addr, r.len, MADV_POPULATE_WRITE as u64],
                IGNORE,
                what("populate pages of"),
            );
            op(
                SYS_pread64,
                &[pages_fd, r.addr, r.len, r.file_off],
                r.len,
                what("fill pages of"),
            );
        }
        if wprot != v.prot {
            op(
                SYS_mprotect,
                &[v.start, len, v.prot as u64],
                0,
                what("mprotect"),
            );
        }
    }

    let mm = &m.mm;
    let auxv: Vec<u8> = mm.auxv.iter().flat_map(|w| w.to_le_bytes()).collect();
    let auxv_addr = b.push(&auxv, 8);
    let mut map: Vec<u8> = [
        mm.start_code,
        mm.end_code,
        mm.start_data,
        mm.end_data,
        mm.start_brk,
        mm.brk,
        mm.start_stack,
        mm.arg_start,
        mm.arg_end,
        mm.env_start,
        mm.env_end,
        auxv_addr,
    ]
    .iter()
    .flat_map(|w| w.to_le_bytes())
    .collect();
    map.extend_from_slice(&(auxv.len() as u32).to_le_bytes());
    map.extend_from_slice(&u32::MAX.to_le_bytes());
    let map_addr = b.push(&map, 8);
    op(
        SYS_prctl,
        &[
            PR_SET_MM as u64,
            PR_SET_MM_MAP as u64,
            map_addr,
            map.len() as u64,
            0,
        ],
        0,
        "prctl(PR_SET_MM_MAP)".into(),
    );

    // Every open file description is first made at a temporary number
    // above the helpers (the low fds are all free, so open returns 0 and
    // pipe2 returns 0 and 1), then dup2-ed to its numbers.
    let mut tmp = h.base as u64 + 64 + helpers.len() as u64;
    let mut made: BTreeMap<(u64, bool), u64> = BTreeMap::new(); // pipe (ino, write end) -> tmp
    let mut by_fd: BTreeMap<i32, u64> = BTreeMap::new(); // fd -> tmp
    for f in &m.fds {
        if let Some(of) = f.dup_of {
            by_fd.insert(f.fd, by_fd[&of]);
            continue;
        }
        if f.relayed.is_some() {
            let to = inherit_fd
                .get(&f.fd)
                .copied()
                .ok_or_else(|| Error::Restore(format!("no replacement for relayed fd {}", f.fd)))?;
            by_fd.insert(f.fd, to);
            continue;
        }
        let status = (f.flags & (O_APPEND | O_NONBLOCK | O_DIRECT | O_NOATIME | O_ASYNC)) as u64;
        if let Some(p) = &f.pipe {
            if !made.contains_key(&(p.ino, p.write)) {
                let arr = b.push(&[0u8; 8], 8);
                op(SYS_pipe2, &[arr, 0], 0, format!("pipe2 for {}", f.path));
                for (end, write) in [(0u64, false), (1u64, true)] {
                    op(SYS_dup2, &[end, tmp], tmp, format!("dup2 pipe end {end}"));
                    op(SYS_close, &[end], 0, format!("close pipe end {end}"));
                    made.insert((p.ino, write), tmp);
                    tmp += 1;
                }
            }
            let t = made[&(p.ino, p.write)];
            if !p.data.is_empty() {
                let d = b.push(&p.data, 1);
                let w = made[&(p.ino, true)];
                op(
                    SYS_write,
                    &[w, d, p.data.len() as u64],
                    p.data.len() as u64,
                    format!("refill {}", f.path),
                );
            }
            op(
                SYS_fcntl,
                &[t, F_SETFL as u64, status],
                0,
                format!("status flags of {}", f.path),
            );
            by_fd.insert(f.fd, t);
        } else {
            let flags = f.flags & !(O_CREAT | O_EXCL | O_TRUNC | O_NOCTTY | O_CLOEXEC);
            let p = b.cstr(&f.path)?;
            op(
                SYS_openat,
                &[AT_FDCWD as u64, p, flags as u64, 0],
                0,
                format!("open {} for fd {}", f.path, f.fd),
            );
            op(
                SYS_dup2,
                &[0, tmp],
                tmp,
                format!("dup2 {} to a temporary fd", f.path),
            );
            op(SYS_close, &[0], 0, "close fd 0".into());
            let expect = if f.path.starts_with("/dev/") {
                IGNORE
            } else {
                f.pos as u64
            };
            op(
                SYS_lseek,
                &[tmp, f.pos as u64, SEEK_SET as u64],
                expect,
                format!("seek {} to {}", f.path, f.pos),
            );
            by_fd.insert(f.fd, tmp);
            tmp += 1;
        }
    }
    for f in &m.fds {
        let fd = f.fd as u64;
        op(
            SYS_dup2,
            &[by_fd[&f.fd], fd],
            fd,
            format!("dup2 to fd {fd} ({})", f.path),
        );
        if f.flags & O_CLOEXEC != 0 {
            op(
                SYS_fcntl,
                &[fd, F_SETFD as u64, FD_CLOEXEC as u64],
                0,
                format!("FD_CLOEXEC on fd {fd}"),
            );
        }
    }
    let cwd = b.cstr(&m.cwd)?;
    op(SYS_chdir, &[cwd], 0, format!("chdir {}", m.cwd));
    op(SYS_umask, &[m.umask as u64], ANY_OK, "umask".into());
    let comm = b.cstr(&m.comm)?;
    op(
        SYS_prctl,
        &[PR_SET_NAME as u64, comm],
        0,
        "prctl(PR_SET_NAME)".into(),
    );
    for s in &m.sigactions {
        let act: Vec<u8> = [s.handler, s.flags, s.restorer, s.mask]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let a = b.push(&act, 8);
        op(
            SYS_rt_sigaction,
            &[s.sig as u64, a, 0, 8],
            0,
            format!("rt_sigaction({})", s.sig),
        );
    }
    for l in &m.rlimits {
        let a = b.push(&[l.cur.to_le_bytes(), l.max.to_le_bytes()].concat(), 8);
        op(
            SYS_prlimit64,
            &[0, l.resource as u64, a, 0],
            0,
            format!("prlimit resource {}", l.resource),
        );
    }
    if let Some(r) = &m.rseq {
        op(
            SYS_rseq,
            &[r.ptr, r.len as u64, 0, r.sig as u64],
            0,
            format!("rseq register {:#x}", r.ptr),
        );
    }
    op(
        SYS_arch_prctl,
        &[0x1002 /* ARCH_SET_FS */, m.regs[reg::FS_BASE]],
        0,
        "arch_prctl(ARCH_SET_FS)".into(),
    );
    op(
        SYS_arch_prctl,
        &[0x1001 /* ARCH_SET_GS */, m.regs[reg::GS_BASE]],
        0,
        "arch_prctl(ARCH_SET_GS)".into(),
    );
    if let Some(parent) = stop_under {
        // Die with the restoring thread while stopped; checked against the
        // parent's pid so a parent gone before the prctl is noticed.
        op(
            SYS_prctl,
            &[PR_SET_PDEATHSIG as u64, SIGKILL as u64],
            0,
            "prctl(PR_SET_PDEATHSIG, SIGKILL)".into(),
        );
        op(SYS_getppid, &[], parent, "parent still there".into());
        op(SYS_setpgid, &[0, 0], 0, "setpgid(0, 0)".into());
    }
    op(
        SYS_close_range,
        &[h.base as u64, u32::MAX as u64, 0],
        0,
        "close helper fds".into(),
    );
    if stop_under.is_some() {
        // Status pipe closed (the caller sees success), then stop; SIGCONT
        // resumes here. Nothing can report a failure any more: a failing
        // call exits 127, which the caller sees with waitpid.
        op(SYS_kill, &[0, SIGSTOP as u64], 0, "kill(0, SIGSTOP)".into());
        op(
            SYS_prctl,
            &[PR_SET_PDEATHSIG as u64, 0],
            0,
            "prctl(PR_SET_PDEATHSIG, 0)".into(),
        );
    }

    let xsave = sigframe::xsave_image(&m.xstate);
    let fpstate = b.push(&xsave, 64);
    let frame_addr = b.push(
        &sigframe::frame(&m.regs, m.sigmask, &m.altstack, fpstate),
        16,
    );
    let mut table = Vec::new();
    for (o, _) in &ops {
        table.extend(
            std::iter::once(o.nr)
                .chain(o.args)
                .chain(std::iter::once(o.expect))
                .flat_map(|w| w.to_le_bytes()),
        );
    }
    let ops_addr = b.push(&table, 64);
    Ok(Plan {
        data: b.bytes,
        ops_addr,
        nops: ops.len() as u64,
        uc_addr: frame_addr + 8,
        err_slot,
        what: ops.into_iter().map(|(_, w)| w).collect(),
    })
}
