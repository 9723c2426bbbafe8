//! The checks run before anything is stopped: a process this engine cannot
//! carry faithfully is refused with the resource named.

use crate::error::{Error, Refusal, Result};
use crate::procfs;
use std::fs;
use std::os::unix::fs::FileTypeExt;

/// Character devices that carry no state and may be reopened by path.
pub const STATELESS_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// Special mappings restored by moving the restorer's own (vdso/vvar).
pub const SPECIAL_MAPPINGS: &[&str] = &["[vdso]", "[vvar]", "[vvar_vclock]"];

/// What kind of fd this is, as restore will treat it.
/// `relayed` lists the inodes of pipes whose other end the caller holds and
/// relays (the node daemon's stdio pipes): those are carried, not refused.
pub fn classify_fd(
    pid: i32,
    fd: i32,
    target: &str,
    relayed: &[u64],
) -> std::result::Result<(), Refusal> {
    let t = target.to_string();
    if target.starts_with("socket:") {
        return Err(Refusal::Socket { fd, target: t });
    }
    if pipe_ino(target).is_some_and(|ino| relayed.contains(&ino)) {
        return Ok(());
    }
    if target.starts_with("pipe:") {
        return if is_self_pipe(pid, target) {
            Ok(())
        } else {
            Err(Refusal::Pipe { fd, target: t })
        };
    }
    if !target.starts_with('/') || target.ends_with(" (deleted)") || target.starts_with("/memfd:") {
        return Err(Refusal::UnsupportedFd { fd, target: t });
    }
    let md = match fs::metadata(format!("/proc/{pid}/fd/{fd}")) {
        Ok(md) => md,
        // Closed meanwhile (a running process is checked; the dump of the
        // stopped process classifies every fd again).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(_) => return Err(Refusal::UnsupportedFd { fd, target: t }),
    };
    let ft = md.file_type();
    if ft.is_fifo() {
        return Err(Refusal::Pipe { fd, target: t });
    }
    if ft.is_socket() {
        return Err(Refusal::Socket { fd, target: t });
    }
    if ft.is_char_device() || ft.is_block_device() {
        if STATELESS_DEVICES.contains(&target) {
            return Ok(());
        }
        return Err(Refusal::Device { fd, target: t });
    }
    if ft.is_file() || ft.is_dir() {
        if on_kernel_fs(&format!("/proc/{pid}/fd/{fd}")) {
            return Err(Refusal::KernelFile { fd, target: t });
        }
        return Ok(());
    }
    Err(Refusal::UnsupportedFd { fd, target: t })
}

/// Whether `path` (followed) lies on procfs or sysfs: files that are the
/// kernel's view of this machine and its processes (`/proc/PID/status` of
/// the original's pid, which may be another process's, or none, where the
/// copy runs), with no contents of their own to carry or compare.
fn on_kernel_fs(path: &str) -> bool {
    const PROC_SUPER_MAGIC: i64 = 0x9fa0;
    const SYSFS_MAGIC: i64 = 0x6265_6572;
    let Ok(c) = std::ffi::CString::new(path) else {
        return false;
    };
    // SAFETY: an all-zero statfs is a valid out buffer.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path, `st` a valid out buffer.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return false;
    }
    matches!(st.f_type as i64, PROC_SUPER_MAGIC | SYSFS_MAGIC)
}

/// The inode of a `pipe:[ino]` fd target.
pub fn pipe_ino(target: &str) -> Option<u64> {
    target
        .strip_prefix("pipe:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// A pipe whose read and write ends are both open in `pid` and in no other
/// process we can see (a self-pipe, as xz uses for signals); while a
/// process tree is checkpointed ([`crate::tree`]), one whose ends are all
/// held by processes of the tree (a shell's pipeline). Processes whose
/// `/proc/N/fd` we cannot read are not seen; an unprivileged user's own
/// processes are all visible.
pub fn is_self_pipe(pid: i32, target: &str) -> bool {
    let mut group = crate::tree::members();
    if group.is_empty() {
        group.push(pid);
    }
    let mut dirs = Vec::new();
    for &p in &group {
        let Ok(fds) = crate::procfs::fds(p) else {
            return false;
        };
        dirs.extend(
            fds.iter()
                .filter(|(_, t)| t == target)
                .filter_map(|&(fd, _)| crate::procfs::fdinfo(p, fd).ok())
                .map(|(flags, _)| flags & libc::O_ACCMODE == libc::O_WRONLY),
        );
    }
    if !(dirs.contains(&true) && dirs.contains(&false)) {
        return false;
    }
    let Ok(procs) = fs::read_dir("/proc") else {
        return false;
    };
    for p in procs.flatten() {
        let Ok(other) = p.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if group.contains(&other) {
            continue;
        }
        let Ok(list) = fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        if list.flatten().any(|e| {
            fs::read_link(e.path())
                .map(|l| l.to_string_lossy() == target)
                .unwrap_or(false)
        }) {
            return false;
        }
    }
    true
}

/// Whether the mapping lies inside `range` (`[start, end)`).
pub(crate) fn in_range(m: &procfs::MapsEntry, range: Option<(u64, u64)>) -> bool {
    range.is_some_and(|(s, e)| s <= m.start && m.end <= e)
}

/// Whether this mapping can be carried.
pub fn classify_mapping(m: &procfs::MapsEntry) -> std::result::Result<(), Refusal> {
    let bad = |shared: bool| {
        let (start, end, path) = (
            m.start,
            m.end,
            if m.path.is_empty() {
                "anonymous".into()
            } else {
                m.path.clone()
            },
        );
        if shared {
            Refusal::SharedMapping { start, end, path }
        } else {
            Refusal::UnsupportedMapping { start, end, path }
        }
    };
    let anon_like = m.path.is_empty() || m.path.starts_with("[anon:");
    if m.shared && m.path.starts_with("/SYSV") {
        return Err(Refusal::SysvShm {
            start: m.start,
            end: m.end,
            path: m.path.clone(),
        });
    }
    // Shared anonymous memory is carried if no other process maps it
    // (checked with all the maps: `crate::shmem::check_lone`).
    if crate::shmem::is_shared_anon(m) {
        return Ok(());
    }
    if m.shared {
        // Shared read-only file mappings are reopened; anything else shared
        // (writable, anonymous, SysV, memfd) would lose its other users.
        if m.prot & libc::PROT_WRITE != 0 || anon_like || !m.path.starts_with('/') {
            return Err(bad(true));
        }
        if m.path.ends_with(" (deleted)")
            || procfs::replaced(m)
            || m.path.starts_with("/memfd:")
            || m.path.starts_with("/SYSV")
        {
            return Err(bad(true));
        }
    }
    if m.path.starts_with("/dev/") || m.path.starts_with("/memfd:") || m.path == "[uprobes]" {
        return Err(bad(false));
    }
    Ok(())
}

/// Processes whose parent is `pid` (from `/proc/N/stat`; zombies included:
/// their status would be lost too).
pub fn children(pid: i32) -> Vec<i32> {
    let Ok(procs) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<i32> = procs
        .flatten()
        .filter_map(|p| p.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&n| {
            fs::read_to_string(format!("/proc/{n}/stat")).is_ok_and(|st| {
                // "pid (comm) state ppid ...": comm may contain spaces and ')'.
                st.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                    .and_then(|ppid| ppid.parse::<i32>().ok())
                    == Some(pid)
            })
        })
        .collect();
    out.sort_unstable();
    out
}

/// Refuses `pid` if it has anything this engine cannot carry. Reads only
/// `/proc`; the process keeps running.
pub fn check(pid: i32) -> Result<()> {
    check_relayed(pid, &[])
}

/// [`check`], accepting pipes whose inode is in `relayed` (see [`classify_fd`]).
pub fn check_relayed(pid: i32, relayed: &[u64]) -> Result<()> {
    check_member(pid, relayed, None)
}

/// [`check_relayed`] of a member of a half-process set: mappings inside
/// `set_range` (the set's shared range, `[start, end)`) belong to the set,
/// not to the process; they are left out instead of refused.
pub fn check_member(pid: i32, relayed: &[u64], set_range: Option<(u64, u64)>) -> Result<()> {
    let st = procfs::status(pid)?;
    let state = procfs::field(&st, "State")?.to_string();
    if state.starts_with('Z') || state.starts_with('X') {
        return Err(Refusal::NotRunning { state }.into());
    }
    let threads: u32 = procfs::field(&st, "Threads")?.parse().unwrap_or(0);
    if threads != 1 {
        return Err(Refusal::MultiThreaded { threads }.into());
    }
    // `/proc/pid/timers` exists with CONFIG_CHECKPOINT_RESTORE (Debian's
    // and the guest's kernels); without it a POSIX timer cannot be seen.
    match std::fs::read_to_string(format!("/proc/{pid}/timers")) {
        Ok(t) => {
            let count = t.lines().filter(|l| l.starts_with("ID:")).count();
            if count > 0 {
                return Err(Refusal::PosixTimers { count }.into());
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(format!("read /proc/{pid}/timers"), e)),
    }
    let tracer: i32 = procfs::field(&st, "TracerPid")?.parse().unwrap_or(0);
    if tracer != 0 {
        return Err(Refusal::Traced { tracer }.into());
    }
    // Other pending signals are carried (read from the frozen process, see
    // `signals`); these two mean it is being killed or stopped.
    let pending = procfs::sigmask_field(&st, "SigPnd")? | procfs::sigmask_field(&st, "ShdPnd")?;
    if pending & crate::signals::NOT_CARRIED != 0 {
        return Err(Refusal::PendingSignals {
            mask: pending & crate::signals::NOT_CARRIED,
        }
        .into());
    }
    for (fd, target) in procfs::fds(pid)? {
        classify_fd(pid, fd, &target, relayed)?;
    }
    let maps: Vec<procfs::MapsEntry> = procfs::maps(pid)?
        .into_iter()
        .filter(|m| !in_range(m, set_range))
        .collect();
    for m in &maps {
        classify_mapping(m)?;
    }
    crate::shmem::check_lone(pid, &maps)?;
    // Last, so a pipe to a child is named as the pipe it is.
    let mut kids = children(pid);
    // A process tree's checkpoint carries them (`crate::tree`).
    kids.retain(|&k| !crate::tree::member(k));
    if !kids.is_empty() {
        return Err(Refusal::Children { pids: kids }.into());
    }
    Ok(())
}
