//! `checkpoint`: refuse, freeze, collect every carried resource, write the image.

use crate::dump_mem::{dump_memory, reserve_for, Sink};
use crate::error::{Error, Refusal, Result};
use crate::freeze::{restart_fixup, Frozen};
use crate::image::{
    self, reg, AltStack, FdEntry, Manifest, MmFields, PipeEnd, RelayedEnd, Rlimit, SigAction,
    TidAddress,
};
use crate::itimers;
use crate::mem::{self, MemoryReader};
use crate::pagebuf::PageBuf;
use crate::phases::time;
use crate::procfs;
use crate::refuse;
use crate::signals;
use std::fs::{self, File};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

/// What happens to the target after a successful dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leave {
    /// SIGKILL it (migration: the restored copy takes over).
    Kill,
    /// Detach and let it continue.
    Continue,
}

/// Numbers from one checkpoint.
#[derive(Debug, Clone, Copy)]
pub struct CheckpointStats {
    /// Bytes of page contents written.
    pub pages_bytes: u64,
    /// Number of VMAs carried.
    pub vmas: usize,
    /// Time the target was stopped.
    pub frozen: Duration,
    /// Bytes of mapped files' contents written (`files.img`), 0 without.
    pub files_bytes: u64,
}

/// Resources 0..RLIM_NLIMITS.
const RLIMITS: u32 = 16;

/// Checkpoints `pid` (a single-threaded process we may ptrace) into `dir`,
/// which is created. Refusals happen before the target is stopped.
pub fn checkpoint(pid: i32, dir: &Path, leave: Leave) -> Result<CheckpointStats> {
    checkpoint_relayed(pid, dir, leave, &[], false)
}

/// [`checkpoint`] of a process whose stdio pipes with inodes in `relayed`
/// are held and relayed by the caller: they are recorded as relayed ends
/// (see [`crate::image::RelayedEnd`]) instead of being refused. With
/// `with_files` the contents of its private file mappings are written too
/// (`files.img`, read while it is stopped), so that the image can be
/// restored where a mapped file differs. `dir` and its files are made with
/// the caller's rights ([`crate::image_dir::create`]).
pub fn checkpoint_relayed(
    pid: i32,
    dir: &Path,
    leave: Leave,
    relayed: &[u64],
    with_files: bool,
) -> Result<CheckpointStats> {
    refuse::check_relayed(pid, relayed)?;
    let out = crate::image_dir::create(dir, with_files).map_err(|e| Error::io("image", e))?;
    checkpoint_into(pid, out, leave, relayed)
}

/// A check of the frozen process before anything of it is read (a node
/// daemon's: are its ids and dumpability still those it admitted the
/// request with?). Its error refuses the dump ([`Error::Changed`]): the
/// process is detached as it was.
pub type AfterFreeze<'a> = &'a dyn Fn() -> std::result::Result<(), String>;

/// Runs `check` on `frozen`; on refusal lets the process go.
fn after_freeze(frozen: Frozen, check: Option<AfterFreeze>) -> Result<Frozen> {
    match check.map_or(Ok(()), |c| c()) {
        Ok(()) => Ok(frozen),
        Err(why) => {
            drop(frozen);
            Err(Error::Changed(why))
        }
    }
}

/// [`checkpoint_relayed`] into image files already opened (by a node
/// daemon, with its client's rights: see [`crate::image_dir`]); `files.img`
/// is written when `out.files` is there.
pub fn checkpoint_into(
    pid: i32,
    out: crate::image_dir::ImageOut,
    leave: Leave,
    relayed: &[u64],
) -> Result<CheckpointStats> {
    checkpoint_into_checked(pid, out, leave, relayed, None)
}

/// [`checkpoint_into`] that runs `check` once the process is stopped,
/// before anything of it is read or written (see [`AfterFreeze`]).
pub fn checkpoint_into_checked(
    pid: i32,
    out: crate::image_dir::ImageOut,
    leave: Leave,
    relayed: &[u64],
    check: Option<AfterFreeze>,
) -> Result<CheckpointStats> {
    refuse::check_relayed(pid, relayed)?;
    // Written under temporary names, put in place only once all is
    // written (`out.commit()`); a refusal or an error removes them, and
    // an earlier image in the directory is left as it was.
    let mut pages = std::io::BufWriter::new(&out.pages);
    let frozen = after_freeze(Frozen::seize(pid)?, check)?;
    let t0 = Instant::now();
    let mut files_bytes = 0;
    let result = dump_frozen(&frozen, relayed, None, Sink::Writer(&mut pages)).and_then(|mut m| {
        pages.flush().map_err(|e| Error::io("write pages.img", e))?;
        drop(pages);
        if let Some(f) = &out.files {
            let (bytes, crc) = crate::files_img::write(f, pid, &m)?;
            files_bytes = bytes;
            m.files_crc = Some(crc);
        }
        image::write_manifest_to(&out.manifest, &m)?;
        Ok(m)
    });
    let result = result.and_then(|m| match out.commit() {
        Ok(()) => Ok(m),
        Err(e) => Err(Error::io("image", e)),
    });
    let frozen_for = t0.elapsed();
    match (&result, leave) {
        (Ok(_), Leave::Kill) => frozen.kill(),
        (Ok(m), Leave::Continue) => {
            let flushed = flush_ignored_alarm(&frozen, m);
            drop(frozen);
            flushed?;
        }
        _ => drop(frozen),
    }
    let m = result?;
    Ok(CheckpointStats {
        pages_bytes: m.pages_len,
        vmas: m.vmas.len(),
        frozen: frozen_for,
        files_bytes,
    })
}

/// A process stopped and dumped into memory, still stopped: the caller
/// streams the image somewhere and then either [`Dumped::kill`]s the
/// original (the copy took over) or [`Dumped::resume`]s it (the copy
/// failed). Dropping it resumes the process.
///
/// ptrace requests must come from the thread that stopped the process, so
/// a `Dumped` cannot be sent to another thread.
pub struct Dumped {
    frozen: Frozen,
    /// The image description (page runs index into `pages`).
    pub manifest: image::Manifest,
    /// Page contents, as `pages.img` would hold them, page-aligned (a
    /// [`crate::restore_from_memory`] moves its pages rather than copying).
    pub pages: PageBuf,
    since: Instant,
    _thread_bound: std::marker::PhantomData<*const ()>,
}

impl Dumped {
    /// How long the process has been stopped so far.
    pub fn frozen_for(&self) -> Duration {
        self.since.elapsed()
    }

    /// SIGKILLs and reaps the original; returns the time it was stopped.
    pub fn kill(self) -> Duration {
        let d = self.since.elapsed();
        self.frozen.kill();
        d
    }

    /// Detaches and lets the original continue; returns the time it was
    /// stopped. A SIGALRM it would discard is flushed first
    /// ([`flush_ignored_alarm`]; best effort: it continues either way).
    pub fn resume(self) -> Duration {
        let d = self.since.elapsed();
        let _ = flush_ignored_alarm(&self.frozen, &self.manifest);
        drop(self.frozen);
        d
    }
}

/// Before the dumped original `f` (`m` its image) is let go: a SIGALRM in
/// its process-wide queue that it ignores, unblocked, is flushed by setting
/// its disposition again (`rt_sigaction` with `SIG_IGN` flushes without a
/// dequeue). Queued only because we trace it (untraced, the kernel
/// discards it when sent), dequeuing it after the detach would re-arm a
/// periodic `ITIMER_REAL` that expired while frozen, which the image (and
/// an untraced run) has stopped.
pub(crate) fn flush_ignored_alarm(f: &Frozen, m: &Manifest) -> Result<()> {
    let alrm = 1u64 << (libc::SIGALRM - 1);
    let ignored = m
        .sigactions
        .iter()
        .find(|a| a.sig == libc::SIGALRM && a.handler == libc::SIG_IGN as u64);
    let Some(a) = ignored.filter(|_| m.sigmask & alrm == 0) else {
        return Ok(());
    };
    let pid = f.pid();
    if procfs::sigmask_field(&procfs::status(pid)?, "ShdPnd")? & alrm == 0 {
        return Ok(());
    }
    let reader = mem::reader(pid).map_err(|e| Error::io(format!("open /proc/{pid}/mem"), e))?;
    let maps = procfs::maps(pid)?;
    let regs = f.regs()?;
    let blocked = f.sigmask()?;
    injecting(f, &*reader, &maps, &regs, blocked, |insn, scratch| {
        let act: Vec<u8> = [a.handler, a.flags, a.restorer, a.mask]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        fs::OpenOptions::new()
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .and_then(|mem| mem.write_all_at(&act, scratch))
            .map_err(|e| Error::io("write the SIGALRM disposition", e))?;
        let nr = libc::SYS_rt_sigaction as u64;
        match f.inject(&regs, insn, nr, &[libc::SIGALRM as u64, scratch, 0, 8])? {
            0 => Ok(()),
            r => Err(Error::Restore(format!(
                "rt_sigaction(SIGALRM, SIG_IGN) in target returned {r}"
            ))),
        }
    })
}

/// Refuses (without stopping anything) or stops `pid` and dumps it into
/// memory, leaving it stopped. `relayed` as in [`checkpoint_relayed`].
pub fn freeze_and_dump(pid: i32, relayed: &[u64]) -> Result<Dumped> {
    freeze_and_dump_member(pid, relayed, None)
}

/// [`freeze_and_dump`] that runs `check` once the process is stopped,
/// before anything of it is read (see [`AfterFreeze`]).
pub fn freeze_and_dump_checked(
    pid: i32,
    relayed: &[u64],
    check: Option<AfterFreeze>,
) -> Result<Dumped> {
    freeze_dump(pid, relayed, None, check)
}

/// [`freeze_and_dump`] of a member of a half-process set whose shared range
/// is `set_range` (`[start, end)`): that range is not carried (the manifest
/// records it; [`crate::restore_from`] leaves it to the restoring process,
/// whose own set range the copy then shares).
pub fn freeze_and_dump_member(
    pid: i32,
    relayed: &[u64],
    set_range: Option<(u64, u64)>,
) -> Result<Dumped> {
    freeze_dump(pid, relayed, set_range, None)
}

fn freeze_dump(
    pid: i32,
    relayed: &[u64],
    set_range: Option<(u64, u64)>,
    check: Option<AfterFreeze>,
) -> Result<Dumped> {
    time("refuse", || refuse::check_member(pid, relayed, set_range))?;
    // The image's memory is faulted in before the target is stopped.
    let reserve = time("prefault", || reserve_for(pid, set_range));
    let frozen = time("seize", || Frozen::seize(pid))?;
    let frozen = after_freeze(frozen, check)?;
    let since = Instant::now();
    let mut pages = PageBuf::new();
    let sink = Sink::Memory(&mut pages, reserve);
    let manifest = dump_frozen(&frozen, relayed, set_range, sink)?;
    Ok(Dumped {
        frozen,
        manifest,
        pages,
        since,
        _thread_bound: std::marker::PhantomData,
    })
}

pub(crate) fn dump_frozen(
    f: &Frozen,
    relayed: &[u64],
    set_range: Option<(u64, u64)>,
    out: Sink,
) -> Result<image::Manifest> {
    let pid = f.pid();
    let t = std::time::Instant::now();
    let st = procfs::status(pid)?;
    let threads: u32 = procfs::field(&st, "Threads")?.parse().unwrap_or(0);
    if threads != 1 {
        return Err(Refusal::MultiThreaded { threads }.into());
    }
    let member = mem::in_callers_set(pid);
    let reader =
        mem::reader_for(pid, member).map_err(|e| Error::io(format!("open /proc/{pid}/mem"), e))?;
    let reader = &*reader;
    let maps = procfs::maps(pid)?;
    let saved = f.regs()?;
    let xstate = f.xstate()?;
    let rseq = f.rseq()?;
    let robust_list = f.robust_list()?;
    crate::phases::add("procfs+regs", t.elapsed());
    // The mask the program runs with (inside `sigsuspend` and the like, the
    // one the call restores on return: its restart applies the temporary
    // one again). Put back after the queries (see `injecting`).
    let blocked = f.sigmask()?;
    let Queried {
        sigactions,
        altstack,
        tid_address: tid_addr,
        itimers: first_timers,
    } = time("signals", || {
        injecting(f, reader, &maps, &saved, blocked, |insn, scratch| {
            query_signal_state(f, reader, &saved, insn, scratch)
        })
    })?;
    let tid_address = tid_addr.map(|addr| tid_address(pid, reader, &maps, addr));
    let mut regs = saved.clone();
    restart_fixup(&mut regs);

    let (vmas, pages_len, pages_crc) = dump_memory(pid, reader, &maps, set_range, out)?;
    let t = std::time::Instant::now();
    let s = procfs::stat_fields(pid)?;
    let at = |field: usize| s.get(field - 3).copied().unwrap_or(0);
    let start_brk = at(47);
    // The end of the last `[heap]` VMA: the heap may be more than one VMA
    // (a restored heap whose first part was moved into place is two).
    let brk = maps
        .iter()
        .filter(|m| m.path == "[heap]")
        .map(|m| m.end)
        .max()
        .unwrap_or(start_brk);
    let mm = MmFields {
        start_code: at(26),
        end_code: at(27),
        start_stack: at(28),
        start_data: at(45),
        end_data: at(46),
        start_brk,
        brk,
        arg_start: at(48),
        arg_end: at(49),
        env_start: at(50),
        env_end: at(51),
        auxv: procfs::auxv(pid)?,
    };
    let cwd = fs::read_link(format!("/proc/{pid}/cwd"))
        .map_err(|e| Error::io(format!("readlink /proc/{pid}/cwd"), e))?
        .to_string_lossy()
        .into_owned();
    let umask = u32::from_str_radix(procfs::field(&st, "Umask")?, 8).unwrap_or(0o022);
    // Last: the queues as late as possible (a signal sent after this is
    // the original's, lost if it is killed); then the timers again, and
    // the queues once more if a timer expired meanwhile (see
    // `itimers::expired_between`).
    let mut pending = signals::read_pending(f, blocked, &sigactions)?;
    let last_timers = time("itimers", || {
        injecting(f, reader, &maps, &saved, blocked, |insn, scratch| {
            itimers::read(f, reader, &saved, insn, scratch)
        })
    })?;
    let expired = itimers::expired_between(&first_timers, &last_timers);
    if expired != 0 {
        pending = time(crate::phases::ITIMER_EXPIRED, || {
            itimers::wait_for_queued(pid, expired)?;
            signals::read_pending(f, blocked, &sigactions)
        })?;
    }
    let itimers = itimers::carried(&last_timers, &pending);
    let manifest = Manifest {
        version: image::version_for(&itimers, &vmas),
        pid,
        comm: fs::read_to_string(format!("/proc/{pid}/comm"))
            .unwrap_or_default()
            .trim_end()
            .to_string(),
        regs,
        xstate_crc: crc32fast::hash(&xstate),
        xstate,
        sigmask: blocked,
        sigactions,
        altstack,
        rlimits: rlimits(pid)?,
        cwd,
        umask,
        fds: fds(pid, relayed)?,
        vmas,
        mm,
        rseq,
        robust_list,
        tid_address,
        pages_len,
        pages_crc,
        set_range,
        pending,
        itimers,
        files_crc: None,
        outside_set: mem::caller_is_member() && !member,
    };
    crate::phases::add("fds+mm", t.elapsed());
    Ok(manifest)
}

fn rlimits(pid: i32) -> Result<Vec<Rlimit>> {
    (0..RLIMITS)
        .map(|res| {
            let mut old = libc::rlimit64 {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: `old` is a valid out pointer; no new limit is set.
            let r = unsafe { libc::prlimit64(pid, res as _, std::ptr::null(), &mut old) };
            if r != 0 {
                let e = Error::last(format!("prlimit(pid {pid}, resource {res})"));
                if std::io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
                    return Err(e);
                }
                // Another user's process without CAP_SYS_RESOURCE (a root
                // daemon in a container): /proc/PID/limits says the same.
                let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).map_err(|_| e)?;
                let (cur, max) = procfs::limit(&text, res as usize).ok_or_else(|| {
                    Error::Image(format!("/proc/{pid}/limits: no line for resource {res}"))
                })?;
                return Ok(Rlimit {
                    resource: res,
                    cur,
                    max,
                });
            }
            Ok(Rlimit {
                resource: res,
                cur: old.rlim_cur,
                max: old.rlim_max,
            })
        })
        .collect()
}

fn fds(pid: i32, relayed: &[u64]) -> Result<Vec<FdEntry>> {
    let list = procfs::fds(pid)?;
    let mut out: Vec<FdEntry> = Vec::new();
    for (fd, path) in list {
        refuse::classify_fd(pid, fd, &path, relayed)?;
        let (flags, pos) = procfs::fdinfo(pid, fd)?;
        let write = flags & libc::O_ACCMODE == libc::O_WRONLY;
        let dup_of = out.iter().map(|e| e.fd).find(|&other| {
            // SAFETY: kcmp only compares kernel objects of two pids.
            unsafe {
                libc::syscall(libc::SYS_kcmp, pid, pid, 0 /* KCMP_FILE */, other, fd) == 0
            }
        });
        let ino = refuse::pipe_ino(&path);
        let relayed_end = match ino.filter(|i| relayed.contains(i)) {
            Some(ino) => Some(RelayedEnd {
                ino,
                write,
                unread: if write || dup_of.is_some() {
                    Vec::new()
                } else {
                    pipe_contents(pid, fd)?
                },
            }),
            None => None,
        };
        let pipe = match ino.filter(|_| relayed_end.is_none()) {
            Some(ino) => {
                let first = !out
                    .iter()
                    .any(|e| e.pipe.as_ref().is_some_and(|p| p.ino == ino));
                let data = if first {
                    pipe_contents(pid, fd)?
                } else {
                    Vec::new()
                };
                Some(PipeEnd { ino, write, data })
            }
            None => None,
        };
        out.push(FdEntry {
            fd,
            path,
            flags,
            pos,
            dup_of,
            pipe,
            relayed: relayed_end,
            shared: None,
        });
    }
    Ok(out)
}

/// The unread bytes of the pipe on `fd` of `pid`, copied with `tee` (the
/// target's pipe keeps them).
fn pipe_contents(pid: i32, fd: i32) -> Result<Vec<u8>> {
    let path = format!("/proc/{pid}/fd/{fd}");
    let src = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| Error::io(format!("open {path}"), e))?;
    let (r, w) = halfproc_sys::fd::pipe(libc::O_CLOEXEC | libc::O_NONBLOCK)?;
    let (mut r, w) = (File::from(r), File::from(w));
    // SAFETY: fcntl on our own pipe; enlarging it so tee can copy a full pipe.
    unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20) };
    // SAFETY: tee between two pipe fds we hold; no memory is passed.
    let n = unsafe {
        libc::tee(
            src.as_raw_fd(),
            w.as_raw_fd(),
            1 << 20,
            libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EAGAIN) {
            return Ok(Vec::new());
        }
        return Err(Error::io(format!("tee {path}"), e));
    }
    drop(w);
    let mut data = Vec::new();
    std::io::Read::read_to_end(&mut r, &mut data).map_err(|e| Error::io("read pipe copy", e))?;
    // A copy pipe smaller than the target's (its resize refused, or the
    // target's beyond 1 MiB) would leave bytes behind unseen.
    let mut held: libc::c_int = 0;
    // SAFETY: FIONREAD on a pipe fd we hold into a valid int.
    if unsafe { libc::ioctl(src.as_raw_fd(), libc::FIONREAD, &mut held) } != 0 {
        return Err(Error::last(format!("FIONREAD of {path}")));
    }
    if data.len() < held as usize {
        return Err(Error::io(
            format!("copy the pipe on fd {fd} of pid {pid}"),
            std::io::Error::other(format!(
                "it holds {held} unread bytes, of which only {} could be copied",
                data.len()
            )),
        ));
    }
    Ok(data)
}

/// Finds the address of a `syscall` instruction (`0f 05`) in an executable mapping.
fn find_syscall_insn(reader: &dyn MemoryReader, maps: &[procfs::MapsEntry]) -> Result<u64> {
    let mut order: Vec<&procfs::MapsEntry> = maps
        .iter()
        .filter(|m| m.prot & libc::PROT_EXEC != 0)
        .collect();
    order.sort_by_key(|m| (m.path != "[vdso]", m.end - m.start));
    for m in order {
        if m.path == "[vsyscall]" {
            continue;
        }
        let mut buf = vec![0u8; (m.end - m.start) as usize];
        if reader.read(m.start, &mut buf).is_err() {
            continue;
        }
        if let Some(i) = buf.windows(2).position(|w| w == [0x0f, 0x05]) {
            return Ok(m.start + i as u64);
        }
    }
    Err(Error::Restore(
        "no syscall instruction in any executable mapping".into(),
    ))
}

/// Whether the word at `addr` (the target's `clear_child_tid`) is the C
/// library's copy of the thread id: it holds the target's id (single
/// threaded: its pid), in a private writable mapping the restore rebuilds.
fn tid_address(
    pid: i32,
    reader: &dyn MemoryReader,
    maps: &[procfs::MapsEntry],
    addr: u64,
) -> TidAddress {
    let writable = maps.iter().any(|m| {
        m.start <= addr && addr + 4 <= m.end && m.prot & libc::PROT_WRITE != 0 && !m.shared
    });
    let mut word = [0u8; 4];
    let holds_tid =
        writable && reader.read(addr, &mut word).is_ok() && i32::from_le_bytes(word) == pid;
    TidAddress { addr, holds_tid }
}

/// What [`query_signal_state`] asks the target.
struct Queried {
    sigactions: Vec<SigAction>,
    altstack: AltStack,
    /// `None` without `CONFIG_CHECKPOINT_RESTORE`.
    tid_address: Option<u64>,
    itimers: Vec<itimers::Reading>,
}

/// 32 bytes (16-aligned) for [`injecting`]'s calls, 64 bytes below the red
/// zone (128 bytes) under the stack pointer `rsp`.
fn scratch_below(rsp: u64) -> Result<u64> {
    rsp.checked_sub(128 + 64).map(|a| a & !15).ok_or_else(|| {
        Error::Restore(format!(
            "stack pointer {rsp:#x}: no room below it for the injected calls"
        ))
    })
}

/// Runs `body(insn, scratch)` with the frozen target ready for system
/// calls executed in it ([`Frozen::inject`]): `insn` a `syscall`
/// instruction, `scratch` 32 bytes of its own stack below the red zone.
/// All signals are blocked meanwhile: an unblocked pending one would end a
/// single-step in a signal-delivery stop, taken off its queue. Afterwards
/// (also when `body` failed) its registers `regs`, the scratch bytes and
/// its mask `blocked` are put back.
fn injecting<T>(
    f: &Frozen,
    reader: &dyn MemoryReader,
    maps: &[procfs::MapsEntry],
    regs: &[u64],
    blocked: u64,
    body: impl FnOnce(u64, u64) -> Result<T>,
) -> Result<T> {
    let pid = f.pid();
    let insn = find_syscall_insn(reader, maps)?;
    let scratch = scratch_below(regs[reg::RSP])?;
    let ok = maps
        .iter()
        .any(|m| m.start <= scratch && scratch + 32 <= m.end && m.prot & libc::PROT_WRITE != 0);
    if !ok {
        return Err(Error::Restore(format!(
            "stack pointer {:#x} is not in a writable mapping",
            regs[reg::RSP]
        )));
    }
    let mut original = [0u8; 32];
    reader
        .read(scratch, &mut original)
        .map_err(|e| Error::io("read scratch slot", e))?;
    let out = f.set_sigmask(u64::MAX).and_then(|()| body(insn, scratch));
    let mem = fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/mem"));
    let put_back = mem.and_then(|m| m.write_all_at(&original, scratch));
    let regs_back = f.set_regs(regs);
    let unblocked = f.set_sigmask(blocked);
    let out = out?;
    regs_back?;
    put_back.map_err(|e| Error::io("restore scratch slot", e))?;
    unblocked?;
    Ok(out)
}

/// Signal dispositions, the alternate stack, the `set_tid_address`
/// registration (`PR_GET_TID_ADDRESS`) and the interval timers, each
/// asked by a system call executed in the target (see [`injecting`]).
fn query_signal_state(
    f: &Frozen,
    reader: &dyn MemoryReader,
    regs: &[u64],
    insn: u64,
    scratch: u64,
) -> Result<Queried> {
    let mut out = Vec::new();
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        let w: [u64; 4] = f.inject_and_read(
            reader,
            regs,
            insn,
            libc::SYS_rt_sigaction,
            &[sig as u64, 0, scratch, 8],
            scratch,
            (&format!("rt_sigaction({sig})"), "sigaction"),
        )?;
        out.push(SigAction {
            sig,
            handler: w[0],
            flags: w[1],
            restorer: w[2],
            mask: w[3],
        });
    }
    // stack_t: ss_sp, ss_flags (an int, padded), ss_size.
    let w: [u64; 3] = f.inject_and_read(
        reader,
        regs,
        insn,
        libc::SYS_sigaltstack,
        &[0, scratch],
        scratch,
        ("sigaltstack", "stack_t"),
    )?;
    // SS_ONSTACK is a report, not a setting.
    let flags = (w[1] as u32 as i32) & !libc::SS_ONSTACK;
    let altstack = AltStack {
        sp: w[0],
        flags,
        size: w[2],
    };
    const PR_GET_TID_ADDRESS: u64 = 40;
    let tid_address = match f.inject(
        regs,
        insn,
        libc::SYS_prctl as u64,
        &[PR_GET_TID_ADDRESS, scratch],
    )? {
        0 => {
            let mut b = [0u8; 8];
            reader
                .read(scratch, &mut b)
                .map_err(|e| Error::io("read the tid address", e))?;
            Some(u64::from_le_bytes(b))
        }
        // No CONFIG_CHECKPOINT_RESTORE: nothing to ask the kernel.
        e if e == -(libc::EINVAL as i64) => None,
        e => {
            return Err(Error::Restore(format!(
                "prctl(PR_GET_TID_ADDRESS) in target returned {e}"
            )))
        }
    };
    Ok(Queried {
        sigactions: out,
        altstack,
        tid_address: tid_address.filter(|&a| a != 0),
        itimers: itimers::read(f, reader, regs, insn, scratch)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review of cf09db0: `rsp - 192` overflowed (a panic in debug builds,
    /// a wrapped address in release) for a stack pointer near 0.
    #[test]
    fn scratch_is_below_the_red_zone_or_an_error() {
        assert_eq!(scratch_below(0x7ffd_0000_1008).unwrap(), 0x7ffd_0000_0f40);
        assert_eq!(scratch_below(192).unwrap(), 0);
        for rsp in [0, 100, 191] {
            match scratch_below(rsp) {
                Err(Error::Restore(m)) => assert!(m.contains("no room below it"), "{m}"),
                other => panic!("{rsp}: {other:?}"),
            }
        }
    }
}
