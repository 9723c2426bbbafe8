//! The restorer's op table: every system call the blob makes, in order,
//! with the data they point to, laid out for a region `R` (see
//! [`crate::restore`]). Built twice: once at base 0 to size `R`, once at
//! its address; both passes must make the same ops.

use crate::error::{Error, Result};
use crate::image::{reg, Backing, Manifest};
use crate::restore::{Helpers, STACK_SIZE};
use crate::restore_check::{kernel_set_range, unmap_ranges};
use crate::restore_moves::Moves;
pub(crate) use crate::restore_shmem::TreeShm;
use crate::restorer::{Op, ANY_OK, CODE_SIZE, COPY, IGNORE};
use crate::sigframe;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::AsRawFd;

/// Highest user address (47-bit address space).
pub(crate) const TASK_SIZE: u64 = 0x7fff_ffff_f000;
const RSEQ_SIG: u64 = 0x5305_3053;
/// Largest single fill: below the kernel's `MAX_RW_COUNT` (2 GiB - 4 KiB),
/// which would cut a larger `pread` short.
const FILL_MAX: u64 = 1 << 30;

extern "C" {
    static __rseq_offset: isize;
    static __rseq_size: u32;
}

/// Where the page contents come from.
pub(crate) enum Source<'a> {
    /// The pages file, a helper fd, read with `pread`.
    File,
    /// The restoring process's memory, which the forked child inherits:
    /// `data` (page-aligned `span` around it, made of the VMA `pieces`)
    /// is moved into `R` with `mremap` before the tool's memory is unmapped;
    /// then each run is moved into place with `mremap` (see
    /// [`crate::restore_moves`]) or copied there by the blob itself
    /// (`restorer::COPY`), and the rest is unmapped.
    Memory {
        data: &'a [u8],
        span: (u64, u64),
        pieces: &'a [(u64, u64)],
    },
}

/// Addresses inside `R` (all 0 in the sizing pass).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Layout {
    /// Start of the blob's data (after code and stack).
    pub(crate) base: u64,
    /// Where the vdso/vvar are parked while everything else is unmapped.
    pub(crate) scratch: u64,
    /// Where the first page of a [`Source::Memory`] span is moved.
    pub(crate) pages_at: u64,
    /// Where shared anonymous objects are made (see `restore_shmem`): the
    /// end of `R`, free once everything above `R` is unmapped.
    pub(crate) shm_at: u64,
    /// End of `R`.
    pub(crate) end: u64,
}

/// The blob's data being laid out from `base`.
pub(crate) struct Blob {
    base: u64,
    bytes: Vec<u8>,
}

impl Blob {
    /// Appends `data` aligned to `align`; returns its address.
    pub(crate) fn push(&mut self, data: &[u8], align: usize) -> u64 {
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
    /// 4 bytes the forked child fills with its thread id before it enters
    /// the blob (the plan is made before the fork).
    pub(crate) tid_slot: u64,
    pub(crate) what: Vec<String>,
    /// Addresses of op arguments that must hold the restored process's pid.
    pub(crate) pid_slots: Vec<u64>,
}

/// Builds the blob's data (ops last) for the region laid out as `lay`.
pub(crate) fn plan(
    m: &Manifest,
    h: &Helpers,
    specials: &[(u64, u64, u64)],
    lay: Layout,
    source: &Source,
    stop_under: Option<u64>,
    tree: Option<&TreeShm>,
) -> Result<Plan> {
    let (base, scratch) = (lay.base, lay.scratch);
    let mut b = Blob {
        base,
        bytes: Vec::new(),
    };
    let mut ops: Vec<(Op, String)> = Vec::new();
    // On the kernel backend the restored process is a member of our set
    // (see `restorer::spawn`): its shared range is the set's, left alone.
    let keep_range = crate::restore_check::restored_in_set(m);
    let mut op = |nr: libc::c_long, args: &[u64], expect: u64, what: String| {
        ops.push((Op::new(nr, args, expect), what));
    };
    use libc::*;
    let err_slot = b.push(&[0u8; 16], 16);
    let tid_slot = b.push(&[0u8; 8], 8);
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
    let mut helpers: Vec<(i32, String)> = vec![(h.status_w.as_raw_fd(), "status pipe".into())];
    helpers.extend(
        h.pages
            .iter()
            .map(|f| (f.as_raw_fd(), "pages.img".to_string())),
    );
    let first_file = helpers.len();
    helpers.extend(h.files.iter().map(|(p, f)| (f.as_raw_fd(), p.clone())));
    let n_files = h.files.len();
    helpers.extend(
        h.inherit
            .iter()
            .map(|(fd, cur)| (*cur, format!("relayed fd {fd}"))),
    );
    let gate_at = helpers.len();
    helpers.extend(h.gate.map(|g| (g, "the tree's gate".to_string())));
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
        if i >= gate_at {
            continue;
        } else if i >= first_file + n_files {
            inherit_fd.insert(h.inherit[i - first_file - n_files].0, to);
        } else if i >= first_file {
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
    if let Source::Memory { span, pieces, .. } = source {
        for &(s, len) in pieces.iter() {
            let to = lay.pages_at + (s - span.0);
            op(
                SYS_mremap,
                &[s, len, len, (MREMAP_MAYMOVE | MREMAP_FIXED) as u64, to],
                to,
                format!("move page contents {s:#x}+{len:#x} aside"),
            );
        }
    }
    op(
        SYS_close_range,
        &[0, h.base as u64 - 1, 0],
        0,
        "close the tool's fds".into(),
    );
    let r_start = base.saturating_sub(CODE_SIZE + STACK_SIZE);
    let r_end = lay.end;
    // Also pushed in the sizing pass (base 0): both passes must have the
    // same ops, the region is sized from the first.
    // A member's set range stays: the copy shares the restoring process's
    // (given by the image on the portable backend; on the kernel backend a
    // member may not unmap across the range (EINVAL) and must not unmap in
    // it, which would take the set's memory from every member).
    let keep = kernel_set_range(m.set_range, keep_range).or(m.set_range);
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

    crate::restore_shmem::map_objects(m, lay.shm_at, tree, &mut op)?;
    let mut moves = Moves::new(m, source);
    let nohuge = moves.any && crate::pagebuf::thp_on_request();
    for v in &m.vmas {
        let len = v.end - v.start;
        let mut moved = Vec::new();
        let grows = if v.grows_down { MAP_GROWSDOWN } else { 0 };
        let shared_anon = matches!(v.backing, Backing::SharedAnon { .. });
        let wprot = if shared_anon {
            PROT_READ | PROT_WRITE
        } else if v.pages.is_empty() {
            v.prot
        } else {
            v.prot | PROT_WRITE
        };
        let what = |s: &str| format!("{s} {:#x}-{:#x} ({:?})", v.start, v.end, v.backing);
        match &v.backing {
            Backing::Special { .. } => continue,
            // In place already (`restore_shmem::map_objects`).
            Backing::SharedAnon { .. } => {}
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
        // In a tree, the caller made and filled the objects before the fork.
        let filled = shared_anon && tree.is_some();
        for r in v.pages.iter().filter(|_| !filled) {
            if moves.take(v, r) {
                moved.push(r);
                continue;
            }
            // Fault the run in with one call (Linux 5.14; ignored where
            // missing) rather than page by page inside the copy.
            op(
                SYS_madvise,
                &[r.addr, r.len, MADV_POPULATE_WRITE as u64],
                IGNORE,
                what("populate pages of"),
            );
            let mut done = 0;
            while done < r.len {
                let n = (r.len - done).min(FILL_MAX);
                let (to, from) = (r.addr + done, r.file_off + done);
                match source {
                    Source::File => op(
                        SYS_pread64,
                        &[pages_fd, to, n, from],
                        n,
                        what("fill pages of"),
                    ),
                    Source::Memory { data, span, .. } => {
                        // A copy in the blob (see `restorer::COPY`): the
                        // run lies in this VMA, mapped writable above, and
                        // the contents were moved to `pages_at` by the
                        // mremaps checked earlier. About 4x faster than
                        // process_vm_writev, which pins each target page
                        // (process_vm_readv would also copy every source
                        // page, shared with the tool since the fork, to pin it).
                        if r.addr < v.start
                            || r.addr + r.len > v.end
                            || from + n > data.len() as u64
                        {
                            return Err(Error::Image(format!(
                                "page run {:#x}+{:#x} outside its VMA or the contents",
                                r.addr, r.len
                            )));
                        }
                        let at = lay.pages_at + (data.as_ptr() as u64 - span.0) + from;
                        op(COPY as c_long, &[to, at, n], n, what("copy pages into"));
                    }
                }
                done += n;
            }
        }
        for r in moved.iter() {
            let Source::Memory { data, span, .. } = source else {
                break;
            };
            if r.addr < v.start || r.addr + r.len > v.end || r.file_off + r.len > data.len() as u64
            {
                return Err(Error::Image(format!(
                    "page run {:#x}+{:#x} outside its VMA or the contents",
                    r.addr, r.len
                )));
            }
            // Replaces the part of the VMA just mapped: the pages become
            // this process's (shared with the restoring tool, copy on
            // write, until it drops its contents), huge pages included.
            let at = lay.pages_at + (data.as_ptr() as u64 - span.0) + r.file_off;
            op(
                SYS_mremap,
                &[
                    at,
                    r.len,
                    r.len,
                    (MREMAP_MAYMOVE | MREMAP_FIXED) as u64,
                    r.addr,
                ],
                r.addr,
                what("move pages into"),
            );
            if nohuge {
                // The contents were advised MADV_HUGEPAGE (see PageBuf) and
                // the moved VMA kept that; undo it: with THP on request,
                // "no huge pages" behaves as the original's no advice.
                op(
                    SYS_madvise,
                    &[r.addr, r.len, MADV_NOHUGEPAGE as u64],
                    0,
                    what("no huge page advice on"),
                );
            }
        }
        if wprot != v.prot || (!moved.is_empty() && v.prot != PROT_READ | PROT_WRITE) {
            op(
                SYS_mprotect,
                &[v.start, len, v.prot as u64],
                0,
                what("mprotect"),
            );
        }
    }

    if let Source::Memory { span, .. } = source {
        if span.1 > span.0 {
            op(
                SYS_munmap,
                &[lay.pages_at, span.1 - span.0],
                0,
                "unmap the moved page contents".into(),
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

    // A stopped ITIMER_REAL: with every signal blocked and fd 0 free.
    crate::restore_itimers::stop_real(m, &mut b, &mut op);

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
        if f.relayed.is_some() || f.shared.is_some() {
            let to = inherit_fd.get(&f.fd).copied().ok_or_else(|| {
                Error::Restore(format!("no replacement for relayed or shared fd {}", f.fd))
            })?;
            by_fd.insert(f.fd, to);
            continue;
        }
        let status = (f.flags & (O_APPEND | O_NONBLOCK | O_DIRECT | O_NOATIME | O_ASYNC)) as u64;
        if let Some(p) = &f.pipe {
            if !made.contains_key(&(p.ino, p.write)) {
                let arr = b.push(&[0u8; 8], 8);
                // Non-blocking until the ends get their own flags below:
                // unread bytes the pipe cannot hold fail the refill, named,
                // rather than block the copy for good.
                op(
                    SYS_pipe2,
                    &[arr, O_NONBLOCK as u64],
                    0,
                    format!("pipe2 for {}", f.path),
                );
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
                if p.data.len() > 65536 {
                    op(
                        SYS_fcntl,
                        &[w, F_SETPIPE_SZ as u64, p.data.len() as u64],
                        ANY_OK,
                        format!("size {} for its {} unread bytes", f.path, p.data.len()),
                    );
                }
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
    // The robust futex list and `clear_child_tid`: the target's, or none.
    // The fork left ours registered, pointing into memory now replaced,
    // where the kernel would walk a list or clear a word at exit.
    let (head, len) = m.robust_list.map_or((0, 24), |r| (r.head, r.len));
    op(
        SYS_set_robust_list,
        &[head, len],
        0,
        format!("set_robust_list({head:#x}, {len})"),
    );
    let tid_at = m.tid_address.map_or(0, |t| t.addr);
    op(
        SYS_set_tid_address,
        &[tid_at],
        ANY_OK,
        format!("set_tid_address({tid_at:#x})"),
    );
    if let Some(t) = m.tid_address.filter(|t| t.holds_tid) {
        // The C library's copy of the thread id gets the new one, as the
        // library itself stored it from set_tid_address() at start-up.
        op(
            COPY as c_long,
            &[t.addr, tid_slot, 4],
            4,
            format!("thread id into {:#x}", t.addr),
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
    // Pending signals, all blocked until rt_sigreturn sets the program's
    // mask. Job-control ones come after a stop and continue of our own,
    // which would drop them; here, where a failure is still reported.
    let (late, early): (Vec<_>, Vec<_>) = m
        .pending
        .iter()
        .partition(|s| stop_under.is_some() && crate::signals::job_control(s));
    for s in early {
        crate::signals::requeue(&mut b, &mut op, s);
    }
    if h.gate.is_some() {
        crate::tree_copies::gate_ops(h.base as u64, gate_at as u64, &mut b, &mut op);
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
        // The SIGCONT that resumed us is queued (every signal is blocked
        // here, so none is ignored): take it off, the program never saw
        // it. One per queue at most; -EAGAIN when there is none.
        let cont = b.push(&(1u64 << (SIGCONT - 1)).to_le_bytes(), 8);
        let zero = b.push(&[0u8; 16], 8);
        for _ in 0..2 {
            op(
                SYS_rt_sigtimedwait,
                &[cont, 0, zero, 8],
                IGNORE,
                "drop the SIGCONT that resumed the copy".into(),
            );
        }
        // Legacy signals: queueing them cannot fail (no RLIMIT_SIGPENDING
        // refusal, at worst the siginfo is lost).
        for s in late {
            crate::signals::requeue(&mut b, &mut op, s);
        }
    }

    crate::restore_itimers::arm(m, &mut b, &mut op);

    let xsave = sigframe::xsave_image(&m.xstate);
    let fpstate = b.push(&xsave, 64);
    let frame_addr = b.push(
        &sigframe::frame(&m.regs, m.sigmask, &m.altstack, fpstate),
        16,
    );
    let mut table = Vec::new();
    let mut pid_slots = Vec::new();
    for (i, (o, _)) in ops.iter().enumerate() {
        // The pid arguments of the re-queues: the restored process's pid,
        // known only after the fork (`restorer::child_enter` fills them in).
        let nr = o.nr as c_long;
        let pids = if nr == SYS_rt_sigqueueinfo {
            1
        } else if nr == SYS_rt_tgsigqueueinfo {
            2
        } else {
            0
        };
        pid_slots.extend((0..pids).map(|a| (i * 64 + 8 + a * 8) as u64));
        table.extend(
            std::iter::once(o.nr)
                .chain(o.args)
                .chain(std::iter::once(o.expect))
                .flat_map(|w| w.to_le_bytes()),
        );
    }
    let ops_addr = b.push(&table, 64);
    let pid_slots = pid_slots.into_iter().map(|o| ops_addr + o).collect();
    Ok(Plan {
        pid_slots,
        data: b.bytes,
        ops_addr,
        nops: ops.len() as u64,
        uc_addr: frame_addr + 8,
        err_slot,
        tid_slot,
        what: ops.into_iter().map(|(_, w)| w).collect(),
    })
}
