//! Restore of a tree image (see [`crate::tree`]): every process again with
//! its pid, as a child of its parent's copy, sharing what it shared.
//!
//! The restoring tool prepares every image as [`crate::restore`] does one,
//! with one region `R` free for all of them, and above it makes the tree's
//! shared anonymous objects and fills them from the images. It then forks
//! the root's copy with the root's pid (`clone3(set_tid)`); each copy forks
//! its children's copies with their pids before it runs its own blob, so
//! that every process inherits the objects, the open file descriptions the
//! tree shares (opened once by the tool) and its parent. Each blob maps its
//! VMAs out of the objects, reports on its status pipe and waits at a gate
//! (a pipe whose write end only the tool holds): the tool lets the tree run
//! only once every process is rebuilt, and kills every copy otherwise.
//!
//! The pids must be free here and ours to choose (`CAP_CHECKPOINT_RESTORE`
//! or `CAP_SYS_ADMIN`): the processes of a tree wait for and signal each
//! other by pid, so a copy under another pid would wait for no one, or
//! signal a stranger. Not on the kernel backend (a member's copy is made
//! with `clone3(CLONE_HALFPROC)`, which takes a new pid).

use crate::error::{Error, Result};
use crate::image::{self, Backing, Manifest};
use crate::restore::{choose_region, fail_in_child, Prepared, RestoreOptions, Restored, FORK_STEP};
use crate::restore_plan::{Plan, TreeShm};
use crate::tree::{TreeManifest, MAX_PROCESSES, TREE};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// Reads and checks `tree.json`: the root first, each process after its
/// parent, pids distinct and positive.
fn read_tree(dir: &Path) -> Result<TreeManifest> {
    let path = dir.join(TREE);
    let text =
        std::fs::read(&path).map_err(|e| Error::io(format!("read {}", path.display()), e))?;
    let t: TreeManifest = serde_json::from_slice(&text)
        .map_err(|e| Error::Image(format!("{}: {e}", path.display())))?;
    let bad = |why: String| Err(Error::Image(format!("{}: {why}", path.display())));
    if t.version != 1 {
        return bad(format!("version {} (this restores version 1)", t.version));
    }
    if t.procs.is_empty() || t.procs.len() > MAX_PROCESSES {
        return bad(format!(
            "{} processes (1 to {MAX_PROCESSES})",
            t.procs.len()
        ));
    }
    for (i, p) in t.procs.iter().enumerate() {
        if p.pid <= 0 || t.procs[..i].iter().any(|q| q.pid == p.pid) {
            return bad(format!("pid {} repeated or not positive", p.pid));
        }
        if i > 0 && !t.procs[..i].iter().any(|q| q.pid == p.ppid) {
            return bad(format!(
                "the parent {} of pid {} comes not before it",
                p.ppid, p.pid
            ));
        }
    }
    Ok(t)
}

/// Opens the open file description `f` stands for, as the blob would
/// (its flags but those of creation, at its offset).
fn open_shared(f: &image::FdEntry) -> Result<File> {
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
        .custom_flags(flags)
        .open(&f.path)
        .map_err(|e| Error::io(format!("open {} for fd {}", f.path, f.fd), e))?;
    if !f.path.starts_with("/dev/") {
        use std::io::Seek;
        (&file)
            .seek(std::io::SeekFrom::Start(f.pos as u64))
            .map_err(|e| Error::io(format!("seek {} to {}", f.path, f.pos), e))?;
    }
    Ok(file)
}

/// The tree's shared anonymous objects, made in our address space (the
/// forked copies inherit them); unmapped when dropped.
struct Objects<'a>(&'a TreeShm);

impl<'a> Objects<'a> {
    /// Maps every object of `t` at its place, then fills it from the
    /// images' page runs that lie in it (the same contents in every image
    /// that maps it: the tree was stopped as a whole).
    fn make(t: &'a TreeShm, ms: &[Manifest], pages: &[File]) -> Result<Objects<'a>> {
        let made = Objects(t);
        let mut mapped = 0;
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
                made.unmap(mapped);
                return Err(Error::io(format!("map shared object {id} at {at:#x}"), e));
            }
            mapped = at + size - t.at;
        }
        for (m, f) in ms.iter().zip(pages) {
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
                    f.read_exact_at(buf, r.file_off)
                        .map_err(|e| Error::io(format!("read pages of pid {}", m.pid), e))?;
                }
            }
        }
        Ok(made)
    }

    fn unmap(&self, len: u64) {
        if len > 0 {
            // SAFETY: unmapping only what `make` mapped.
            unsafe { libc::munmap(self.0.at as *mut _, len as usize) };
        }
    }
}

impl Drop for Objects<'_> {
    fn drop(&mut self) {
        self.unmap(self.0.len);
    }
}

/// In a freshly forked copy of process `i`: forks its children's copies
/// (recursively, each with its pid), then runs its blob.
///
/// # Safety
///
/// Only in a freshly forked child of [`restore_tree`], whose data it reads;
/// raw system calls only.
unsafe fn grow(
    i: usize,
    t: &TreeManifest,
    kids: &[Vec<usize>],
    preps: &[Prepared],
    plans: &[Plan],
    r: u64,
) -> ! {
    for &c in &kids[i] {
        // SAFETY: per the contract (clone3 runs no atfork handlers).
        match unsafe { halfproc_sys::task::fork_with_pid(t.procs[c].pid) } {
            // SAFETY: the fresh child, per the contract.
            Ok(0) => unsafe { grow(c, t, kids, preps, plans, r) },
            Ok(_) => {}
            // Reported as the child's failure; we die, the tool kills the rest.
            // SAFETY: per the contract: we exit.
            Err(e) => unsafe { fail_in_child(preps[c].status_fd(), FORK_STEP, e.errno() as i64) },
        }
    }
    // SAFETY: per the contract; `r` is free in the tool, hence here.
    unsafe { preps[i].enter(&plans[i], r) }
}

/// Start time (clock ticks after boot, `/proc/N/stat` field 22) and
/// executable of process `pid`, to tell our copies from strangers.
fn identity(pid: i32) -> Option<(u64, std::path::PathBuf)> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let start = st
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()?;
    Some((start, std::fs::read_link(format!("/proc/{pid}/exe")).ok()?))
}

/// Now, in the clock ticks of `/proc/N/stat`'s start times.
fn boot_ticks() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out pointer; sysconf has no preconditions.
    let hz = unsafe {
        libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts);
        libc::sysconf(libc::_SC_CLK_TCK)
    }
    .max(1) as u64;
    ts.tv_sec as u64 * hz + ts.tv_nsec as u64 * hz / 1_000_000_000
}

/// Whether `pid` is one of our copies: it runs our executable (a copy
/// keeps it, see docs/migration.md) and started after `since`.
fn ours(pid: i32, since: u64) -> bool {
    let exe = std::fs::read_link("/proc/self/exe").ok();
    identity(pid).is_some_and(|(start, e)| start >= since && Some(e) == exe)
}

/// Kills the copies of a tree whose restore failed: the processes with
/// the tree's pids that run our executable and started after `since`
/// (copies whose parent died are found too: they wait at the gate).
fn kill_copies(t: &TreeManifest, root: i32, since: u64) {
    for p in t.procs.iter().rev() {
        if ours(p.pid, since) {
            // SAFETY: kill has no memory arguments.
            unsafe { libc::kill(p.pid, libc::SIGKILL) };
        }
    }
    let mut st = 0;
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(root, &mut st, 0) };
}

/// Restores the tree image in `dir` (written by [`crate::checkpoint_tree`]);
/// returns its root's copy, a child of the caller. Every process has its
/// pid again, its parent's copy as parent, and shares what it shared.
pub fn restore_tree(dir: &Path) -> Result<Restored> {
    let t = read_tree(dir)?;
    if crate::mem::caller_is_member() {
        return Err(Error::Restore(
            "process trees are restored on the portable backend only (a member's copy is \
             made with clone3(CLONE_HALFPROC), which takes a new pid)"
                .into(),
        ));
    }
    for p in &t.procs {
        // SAFETY: kill with signal 0 only checks for the process.
        let alive = unsafe { libc::kill(p.pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
        if alive {
            return Err(Error::Restore(format!(
                "pid {} is in use here: a process tree is restored with its pids (its \
                 processes wait for and signal each other by pid)",
                p.pid
            )));
        }
    }
    let mut ms = Vec::new();
    let mut pages = Vec::new();
    for p in &t.procs {
        let d = dir.join(p.pid.to_string());
        let m = image::read(&d)?;
        if m.pid != p.pid {
            return Err(Error::Image(format!(
                "{}: pid {} in its manifest",
                d.display(),
                m.pid
            )));
        }
        let path = d.join(image::PAGES);
        pages
            .push(File::open(&path).map_err(|e| Error::io(format!("open {}", path.display()), e))?);
        ms.push(m);
    }
    // The open file descriptions the tree shares, opened once.
    let mut shared: BTreeMap<u32, File> = BTreeMap::new();
    for f in ms.iter().flat_map(|m| &m.fds) {
        if let (Some(id), None) = (f.shared, f.dup_of) {
            if let std::collections::btree_map::Entry::Vacant(v) = shared.entry(id) {
                v.insert(open_shared(f)?);
            }
        }
    }
    let mut g = [0i32; 2];
    // SAFETY: `g` is a valid out array of two fds.
    if unsafe { libc::pipe2(g.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::last("pipe2"));
    }
    // SAFETY: both fds were just returned by pipe2 and are owned by nobody else.
    let (gate_r, gate_w) = unsafe { (OwnedFd::from_raw_fd(g[0]), OwnedFd::from_raw_fd(g[1])) };
    let mut preps = Vec::new();
    for (m, f) in ms.iter().zip(&pages) {
        let inherit = m
            .fds
            .iter()
            .filter(|e| e.dup_of.is_none())
            .filter_map(|e| Some((e.fd, shared.get(&e.shared?)?.as_raw_fd())))
            .collect();
        let opts = RestoreOptions {
            inherit,
            ..RestoreOptions::default()
        };
        let pages = f.try_clone().map_err(|e| Error::io("dup pages.img", e))?;
        preps.push(Prepared::new(
            m,
            Some(pages),
            None,
            &opts,
            Some(gate_r.as_raw_fd()),
        )?);
    }
    let mut shm = TreeShm::layout(ms.iter().map(|m| &m.vmas[..]))?;
    let r_len = preps.iter().map(|p| p.r_len).max().unwrap_or(0);
    let all: Vec<image::Vma> = ms.iter().flat_map(|m| m.vmas.iter().cloned()).collect();
    let own = crate::procfs::parse_maps(
        &std::fs::read_to_string("/proc/self/maps")
            .map_err(|e| Error::io("read /proc/self/maps", e))?,
    )?;
    let total = r_len
        .checked_add(shm.len)
        .ok_or_else(|| Error::Image("the tree's region would not fit in 64 bits".into()))?;
    let r = choose_region(&all, &own, total)?;
    shm.place(r + r_len);
    let objects = Objects::make(&shm, &ms, &pages)?;
    let plans = preps
        .iter()
        .map(|p| p.place(r, Some(&shm)))
        .collect::<Result<Vec<_>>>()?;
    let kids: Vec<Vec<usize>> = t
        .procs
        .iter()
        .map(|p| {
            (0..t.procs.len())
                .filter(|&c| c > 0 && t.procs[c].ppid == p.pid)
                .collect()
        })
        .collect();
    let since = boot_ticks();
    // SAFETY: the child only runs `grow` (raw system calls, byte copies).
    let root = match unsafe { halfproc_sys::task::fork_with_pid(t.procs[0].pid) } {
        // SAFETY: the freshly forked child of this restore.
        Ok(0) => unsafe { grow(0, &t, &kids, &preps, &plans, r) },
        Ok(pid) => pid,
        Err(e) => return Err(Error::Restore(format!("pid {}: {e}", t.procs[0].pid))),
    };
    drop(objects);
    let mut failed = None;
    for ((p, prep), plan) in t.procs.iter().zip(preps).zip(plans) {
        if let Err(e) = prep.started(plan).result() {
            failed.get_or_insert(format!("pid {}: {e}", p.pid));
        }
    }
    // A copy killed before it forked its children reports nothing for them.
    if failed.is_none() {
        if let Some(p) = t.procs.iter().find(|p| !ours(p.pid, since)) {
            failed = Some(format!(
                "pid {}: its copy is gone (killed while it was restored?)",
                p.pid
            ));
        }
    }
    if let Some(why) = failed {
        kill_copies(&t, root, since);
        return Err(Error::Restore(why));
    }
    // Every process is rebuilt and waits at the gate: let them all run.
    drop(gate_w);
    Ok(Restored { pid: root })
}
