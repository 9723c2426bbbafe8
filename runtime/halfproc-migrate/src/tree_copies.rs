//! The pieces of a tree's restore (`restore_tree`) around its copies: the
//! shared anonymous objects and open file descriptions the tool makes
//! before the fork, the forks themselves (in the forked children), and
//! telling the copies from other processes to kill them.

use crate::error::{Error, Result};
use crate::image::{self, Backing, Manifest};
use crate::restore::{fail_in_child, Prepared, FORK_STEP};
use crate::restore_plan::{Blob, Plan, TreeShm};
use crate::restore_tree::TreePages;
use crate::tree::{TreeManifest, TreeProc};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::time::Duration;

/// Opens the open file description `f` stands for, as the blob would (its
/// flags but those of creation, at its offset): a regular file, or one of
/// the device files a process may carry. Opened without blocking (a FIFO
/// put at the path does not hang the tool: it is refused).
pub(crate) fn open_shared(f: &image::FdEntry) -> Result<File> {
    let acc = f.flags & libc::O_ACCMODE;
    let flags = f.flags
        & !(libc::O_ACCMODE
            | libc::O_CREAT
            | libc::O_EXCL
            | libc::O_TRUNC
            | libc::O_NOCTTY
            | libc::O_CLOEXEC);
    let file = std::fs::OpenOptions::new()
        .read(acc != libc::O_WRONLY)
        .write(acc != libc::O_RDONLY)
        .custom_flags(flags | libc::O_NONBLOCK)
        .open(&f.path)
        .map_err(|e| Error::io(format!("open {} for fd {}", f.path, f.fd), e))?;
    let what = |why: &str| Error::Restore(format!("fd {} ({}): {why}", f.fd, f.path));
    let ft = file
        .metadata()
        .map_err(|e| Error::io(format!("stat {}", f.path), e))?
        .file_type();
    let device = ft.is_char_device() && crate::refuse::STATELESS_DEVICES.contains(&f.path.as_str());
    if !ft.is_file() && !device {
        return Err(what("not a regular file or a stateless device here"));
    }
    // SAFETY: fcntl on our own fd, integer arguments.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags) } != 0 {
        return Err(Error::last(format!("status flags of {}", f.path)));
    }
    if ft.is_file() {
        use std::io::Seek;
        (&file)
            .seek(std::io::SeekFrom::Start(f.pos as u64))
            .map_err(|e| Error::io(format!("seek {} to {}", f.path, f.pos), e))?;
    }
    Ok(file)
}

/// Makes the pipes that several processes of the tree hold (their ends
/// marked shared by the checkpoint, see `tree::mark_pipes`): each once,
/// as large as its unread bytes need, those bytes written in, each end
/// with its status flags. Adds each end under its id to `shared`.
pub(crate) fn open_shared_pipes(
    ms: &[image::Manifest],
    shared: &mut std::collections::BTreeMap<u32, File>,
) -> Result<()> {
    use std::collections::BTreeMap;
    // ino -> (read end id and flags, write end id and flags, unread bytes)
    type Ends<'a> = (Option<(u32, i32)>, Option<(u32, i32)>, &'a [u8]);
    let mut pipes: BTreeMap<u64, Ends> = BTreeMap::new();
    for f in ms
        .iter()
        .flat_map(|m| &m.fds)
        .filter(|f| f.dup_of.is_none())
    {
        let (Some(id), Some(p)) = (f.shared, &f.pipe) else {
            continue;
        };
        let e = pipes.entry(p.ino).or_insert((None, None, &[]));
        match p.write {
            true => e.1 = Some((id, f.flags)),
            false => e.0 = Some((id, f.flags)),
        }
        if !p.data.is_empty() {
            e.2 = &p.data;
        }
    }
    for (ino, (read, write, data)) in pipes {
        let (r, w) = halfproc_sys::fd::pipe(libc::O_CLOEXEC | libc::O_NONBLOCK)?;
        let (r, mut w) = (File::from(r), File::from(w));
        // SAFETY: fcntl on our own pipe, integer arguments.
        let room = unsafe { libc::fcntl(w.as_raw_fd(), libc::F_GETPIPE_SZ) };
        if data.len() > room.max(0) as usize {
            // SAFETY: fcntl on our own pipe, integer arguments.
            if unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, data.len() as libc::c_int) }
                < 0
            {
                return Err(Error::last(format!(
                    "F_SETPIPE_SZ of {} for pipe {ino}",
                    data.len()
                )));
            }
        }
        // Non-blocking: bytes the pipe cannot hold are an error, not a hang.
        std::io::Write::write_all(&mut w, data)
            .map_err(|e| Error::io(format!("refill pipe {ino} ({} bytes)", data.len()), e))?;
        for (end, file) in [(read, r), (write, w)] {
            let Some((id, flags)) = end else {
                continue;
            };
            // O_DIRECT: a packet-mode pipe stays one (the unread bytes'
            // packet boundaries are not carried).
            let status =
                flags & (libc::O_APPEND | libc::O_NONBLOCK | libc::O_ASYNC | libc::O_DIRECT);
            // SAFETY: fcntl on our own fd, integer arguments.
            if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, status) } != 0 {
                return Err(Error::last(format!("status flags of pipe {ino}")));
            }
            shared.insert(id, file);
        }
    }
    Ok(())
}

/// The tree's shared anonymous objects, made in our address space (the
/// forked copies inherit them); unmapped when dropped.
pub(crate) struct Objects {
    /// (address, size) of each mapping made.
    mapped: Vec<(u64, u64)>,
}

impl Objects {
    /// Maps every object of `t` at its place, then fills it from the
    /// images' page runs that lie in it (the same contents in every image
    /// that maps it: the tree was stopped as a whole).
    pub(crate) fn make(t: &TreeShm, ms: &[Manifest], pages: &TreePages) -> Result<Objects> {
        let mut made = Objects { mapped: Vec::new() };
        for (&id, &(at, size, noreserve)) in &t.objects {
            let nr = if noreserve { libc::MAP_NORESERVE } else { 0 };
            // SAFETY: a new shared anonymous mapping at a place chosen free
            // (MAP_FIXED_NOREPLACE refuses to replace anything).
            let got = unsafe {
                libc::mmap(
                    at as *mut _,
                    size as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE | nr,
                    -1,
                    0,
                )
            };
            if got as u64 != at {
                let e = std::io::Error::last_os_error();
                if got != libc::MAP_FAILED {
                    // Placed elsewhere by a kernel without the flag: ours too.
                    made.mapped.push((got as u64, size));
                }
                return Err(Error::io(format!("map shared object {id} at {at:#x}"), e));
            }
            made.mapped.push((at, size));
        }
        for (i, m) in ms.iter().enumerate() {
            for v in &m.vmas {
                let Backing::SharedAnon { object, offset, .. } = v.backing else {
                    continue;
                };
                let Some(&(at, size, _)) = t.objects.get(&object) else {
                    return Err(Error::Image(format!("shared object {object} not laid out")));
                };
                for r in &v.pages {
                    let inside = r.addr >= v.start
                        && r.addr.checked_add(r.len).is_some_and(|e| e <= v.end)
                        && offset + (r.addr - v.start) + r.len <= size;
                    if !inside {
                        return Err(Error::Image(format!(
                            "page run {:#x}+{:#x} outside its VMA {:#x}-{:#x} or object",
                            r.addr, r.len, v.start, v.end
                        )));
                    }
                    let to = at + offset + (r.addr - v.start);
                    // SAFETY: `to..to + len` lies in the object just mapped
                    // readable and writable by us (checked above); nothing
                    // else refers to it.
                    let buf =
                        unsafe { std::slice::from_raw_parts_mut(to as *mut u8, r.len as usize) };
                    pages.read(i, r.file_off, buf)?;
                }
            }
        }
        Ok(made)
    }
}

impl Drop for Objects {
    fn drop(&mut self) {
        for &(at, size) in &self.mapped {
            // SAFETY: unmapping only what `make` mapped.
            unsafe { libc::munmap(at as *mut _, size as usize) };
        }
    }
}

/// In a freshly forked copy of process `i`: forks its children's copies
/// (recursively, each with its pid), then runs its blob.
///
/// # Safety
///
/// Only in a freshly forked child of a tree's restore, whose data it
/// reads: it makes raw system calls and copies bytes, nothing that could
/// take a lock another thread of the tool held at the fork.
pub(crate) unsafe fn grow(
    i: usize,
    t: &TreeManifest,
    kids: &[Vec<usize>],
    preps: &[Prepared],
    plans: &[Plan],
    r: u64,
) -> ! {
    // The tree's own process group, led by its root, as the node daemon
    // starts a program (not the restoring tool's).
    let root = t.procs[0].pid;
    // SAFETY: setpgid of ourselves; the root's group exists (made by the
    // root before it forked us).
    unsafe { libc::setpgid(0, if i == 0 { 0 } else { root }) };
    for &c in &kids[i] {
        // SAFETY: per the contract (clone3 runs no atfork handlers).
        match unsafe { halfproc_sys::task::fork_with_pid_raw(t.procs[c].pid, preps[c].member) } {
            // SAFETY: the fresh child, per the contract.
            Ok(0) => unsafe { grow(c, t, kids, preps, plans, r) },
            Ok(_) => {}
            // Reported as the child's failure; we die, the tool kills the rest.
            // SAFETY: per the contract: we exit.
            Err(e) => unsafe { fail_in_child(preps[c].status_fd(), FORK_STEP, e as i64) },
        }
    }
    // SAFETY: per the contract; `r` is free in the tool, hence here.
    unsafe { preps[i].enter(&plans[i], r) }
}

/// The copies of one tree's restore: the root (our child) and the
/// processes that hold its gate (every copy does, from its fork until it
/// runs the program, and nothing else does).
pub(crate) struct Copies {
    pub(crate) procs: Vec<TreeProc>,
    pub(crate) root: i32,
    /// `pipe:[INODE]` of the gate, as `/proc/PID/fd` shows it.
    pub(crate) gate: String,
}

impl Copies {
    /// Whether `pid` is one of these copies.
    pub(crate) fn ours(&self, pid: i32) -> bool {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            return false;
        };
        fds.flatten().any(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == self.gate.as_str())
        })
    }

    /// Kills every copy still held (children first; the root, our child,
    /// in any case), reaps the root and waits (5 s at most) until the
    /// tree's pids are free again.
    pub(crate) fn kill(&self) {
        for p in self.procs.iter().skip(1).rev() {
            if self.ours(p.pid) {
                // SAFETY: kill has no memory arguments.
                unsafe { libc::kill(p.pid, libc::SIGKILL) };
            }
        }
        // SAFETY: signalling and reaping our own child.
        unsafe {
            libc::kill(self.root, libc::SIGKILL);
            let mut st = 0;
            libc::waitpid(self.root, &mut st, 0);
        }
        let pids: Vec<i32> = self.procs.iter().map(|p| p.pid).collect();
        crate::tree::reaped(&pids, Duration::from_secs(5));
    }
}

/// Why `pid` cannot be given to a copy here, if it cannot: a process, a
/// process group or a session has it (`clone3(set_tid)` fails then).
/// `sessions`: the session ids of all processes (`/proc/N/stat`).
pub(crate) fn pid_in_use(pid: i32, sessions: &[i32]) -> Option<&'static str> {
    let taken =
        |r: i32| r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
    // SAFETY: kill with signal 0 only checks for the process (group).
    if taken(unsafe { libc::kill(pid, 0) }) {
        return Some("a process");
    }
    // SAFETY: as above.
    if taken(unsafe { libc::kill(-pid, 0) }) {
        return Some("a process group");
    }
    sessions.contains(&pid).then_some("a session")
}

/// The session ids of the processes in our `/proc`.
pub(crate) fn sessions() -> Vec<i32> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|p| p.file_name().to_str()?.parse::<i32>().ok())
        // Field 6 of `/proc/N/stat` (`stat_fields` starts at field 3).
        .filter_map(|n| Some(*crate::procfs::stat_fields(n).ok()?.get(3)? as i32))
        .collect()
}

/// The last ops of a tree's copy before it runs the program (helper fds
/// from `base`, the gate the `gate_at`-th of them): it reports success
/// (its status pipe's end of file: every fd but the gate is closed, the
/// status pipes of the tree's other processes inherited from the tool
/// too), then waits until the restoring tool has heard from every process
/// of the tree and writes it a byte, so that none runs on while another's
/// restore can still fail. End of file there (the tool died) fails the
/// blob: the copy exits instead of running without the others.
pub(crate) fn gate_ops(
    base: u64,
    gate_at: u64,
    b: &mut Blob,
    op: &mut impl FnMut(libc::c_long, &[u64], u64, String),
) {
    use libc::{SYS_close_range, SYS_read};
    let gate = base + gate_at;
    let byte = b.push(&[0u8; 8], 8);
    let below = "close the helper fds below the gate".to_string();
    op(SYS_close_range, &[base, gate - 1, 0], 0, below);
    let above = "close the fds above the gate".to_string();
    op(SYS_close_range, &[gate + 1, u32::MAX as u64, 0], 0, above);
    op(
        SYS_read,
        &[gate, byte, 1],
        1,
        "wait at the tree's gate".into(),
    );
}
