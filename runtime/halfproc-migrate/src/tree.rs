//! Process trees: a process and all its descendants checkpointed together
//! (each single-threaded, each as an image of its own) and restored
//! together with their pids and parents (see `restore_tree`). What they
//! share among themselves - shared anonymous memory (stress-ng's workers
//! and their parent), open file descriptions - is carried shared; what
//! they share with a process outside the tree is refused as for one
//! process.
//!
//! A tree image is a directory: one image per process in a subdirectory
//! named by its pid, and [`TREE`] (written last) naming them, parents
//! before children.

use crate::dump::{dump_frozen, flush_ignored_alarm, AfterFreeze, Leave};
use crate::dump_mem::{reserve_for, Sink};
use crate::error::{Error, Refusal, Result};
use crate::freeze::Frozen;
use crate::image::{self, Manifest};
use crate::image_dir::{self, ImageOut, TreeTop};
use crate::pagebuf::PageBuf;
use crate::refuse;
use crate::Creds;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// The tree's description in a tree image directory.
pub const TREE: &str = "tree.json";
/// Most processes in one tree.
pub const MAX_PROCESSES: usize = 64;

/// One process of a tree image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeProc {
    pub pid: i32,
    /// Its parent's pid; for the root, the pid of the parent it had.
    pub ppid: i32,
}

/// `tree.json`: the processes, the root first, each after its parent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TreeManifest {
    pub version: u32,
    pub procs: Vec<TreeProc>,
}

impl TreeManifest {
    /// A tree of `procs` in this version.
    pub fn new(procs: Vec<TreeProc>) -> TreeManifest {
        TreeManifest { version: 1, procs }
    }

    /// Checks it: version 1, 1 to [`MAX_PROCESSES`] processes, the root
    /// first, each after its parent, pids distinct and positive.
    pub fn check(&self) -> Result<()> {
        let bad = |why: String| Err(Error::Image(format!("process tree: {why}")));
        if self.version != 1 {
            return bad(format!(
                "version {} (this restores version 1)",
                self.version
            ));
        }
        if self.procs.is_empty() || self.procs.len() > MAX_PROCESSES {
            return bad(format!(
                "{} processes (1 to {MAX_PROCESSES})",
                self.procs.len()
            ));
        }
        for (i, p) in self.procs.iter().enumerate() {
            if p.pid <= 0 || self.procs[..i].iter().any(|q| q.pid == p.pid) {
                return bad(format!("pid {} repeated or not positive", p.pid));
            }
            if i > 0 && !self.procs[..i].iter().any(|q| q.pid == p.ppid) {
                return bad(format!(
                    "the parent {} of pid {} comes not before it",
                    p.ppid, p.pid
                ));
            }
        }
        Ok(())
    }
}

thread_local! {
    /// The pids of the tree being checkpointed by this thread (ptrace
    /// ties a checkpoint to one thread): the refusals treat them as part
    /// of the target, not as other processes.
    static MEMBERS: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
}

/// Whether `pid` belongs to the tree this thread is checkpointing.
pub(crate) fn member(pid: i32) -> bool {
    MEMBERS.with(|m| m.borrow().contains(&pid))
}

/// The pids of the tree this thread is checkpointing (none outside one).
pub(crate) fn members() -> Vec<i32> {
    MEMBERS.with(|m| m.borrow().clone())
}

/// Sets [`MEMBERS`] for its lifetime.
struct Scope;

impl Scope {
    fn enter(pids: &[i32]) -> Scope {
        MEMBERS.with(|m| *m.borrow_mut() = pids.to_vec());
        Scope
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        MEMBERS.with(|m| m.borrow_mut().clear());
    }
}

/// `root` and its descendants, each after its parent (breadth first).
pub fn processes(root: i32) -> Result<Vec<TreeProc>> {
    let ppid = crate::procfs::field(&crate::procfs::status(root)?, "PPid")?
        .parse()
        .unwrap_or(0);
    let mut out = vec![TreeProc { pid: root, ppid }];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i].pid;
        for pid in refuse::children(parent) {
            if out.len() == MAX_PROCESSES {
                return Err(Refusal::TreeTooLarge {
                    root,
                    max: MAX_PROCESSES,
                }
                .into());
            }
            out.push(TreeProc { pid, ppid: parent });
        }
        i += 1;
    }
    Ok(out)
}

/// Numbers from one checkpoint of a tree.
#[derive(Debug, Clone, Copy)]
pub struct TreeStats {
    pub processes: usize,
    pub pages_bytes: u64,
    /// Bytes of mapped files written (`files.img`, with `with_files`).
    pub files_bytes: u64,
    /// Time the tree was stopped (from the first process stopped).
    pub frozen: Duration,
}

/// Checkpoints `root` and all its descendants into the tree image `dir`
/// (created). Each is refused as [`crate::checkpoint`] would refuse it,
/// except for what it shares with the others: its children, shared
/// anonymous memory, open file descriptions. Refusals come before anything
/// is stopped; the tree must not change while it is stopped (a fork meanwhile
/// fails the checkpoint and lets it go on).
pub fn checkpoint_tree(root: i32, dir: &Path, leave: Leave) -> Result<TreeStats> {
    let procs = check_tree(root, &[])?;
    let out = tree_out(dir, &procs, false, None).map_err(|e| Error::io("image", e))?;
    checkpoint_tree_into(root, &procs, out, leave, &[], None)
}

/// A tree image directory being written (made by [`tree_out`]): each
/// process's image under temporary names, [`TREE`] last.
pub struct TreeOut {
    top: TreeTop,
    outs: Vec<ImageOut>,
}

/// Makes the tree image directory `dir` for `procs` (as [`check_tree`]
/// listed them): a directory per process with its image files under
/// temporary names (with `files.img` if `with_files`); an earlier image
/// there is left as it is until the new one is dumped. With `creds`, with their file access rights (as
/// [`crate::image_dir::ImageOut::with_creds`]), the commits too.
pub fn tree_out(
    dir: &Path,
    procs: &[TreeProc],
    with_files: bool,
    creds: Option<Creds>,
) -> std::io::Result<TreeOut> {
    let make = || {
        let top = image_dir::create_tree_top(dir, TREE)?;
        let outs = procs
            .iter()
            .map(|p| image_dir::create(&dir.join(p.pid.to_string()), with_files))
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok::<_, std::io::Error>((top, outs))
    };
    let (top, outs) = match &creds {
        Some(c) => c.with_fs(make).and_then(|r| r)?,
        None => make()?,
    };
    Ok(TreeOut {
        top: top.with_creds(creds.clone()),
        outs: outs
            .into_iter()
            .map(|o| o.with_creds(creds.clone()))
            .collect(),
    })
}

/// Checkpoints the tree of `root`, whose processes [`check_tree`] found
/// to be `procs` (pipes with an inode in `relayed` recorded as relayed
/// ends, a node daemon's), into `out`. `after_freeze` runs once all are
/// stopped, before anything of them is read (see [`crate::AfterFreeze`]);
/// its refusal, or any error, lets them go and leaves no tree image.
pub fn checkpoint_tree_into(
    root: i32,
    procs: &[TreeProc],
    out: TreeOut,
    leave: Leave,
    relayed: &[u64],
    after_freeze: Option<AfterFreeze>,
) -> Result<TreeStats> {
    let pids: Vec<i32> = procs.iter().map(|p| p.pid).collect();
    let _scope = Scope::enter(&pids);
    let t0 = Instant::now();
    let frozen = freeze(root, procs)?;
    if let Err(why) = after_freeze.map_or(Ok(()), |c| c()) {
        drop(frozen);
        return Err(Error::Changed(why));
    }
    let mut files_bytes = 0;
    let written = (|| {
        let mut manifests = Vec::new();
        for (f, o) in frozen.iter().zip(&out.outs) {
            let mut w = std::io::BufWriter::new(&o.pages);
            let mut m = dump_frozen(f, relayed, None, Sink::Writer(&mut w))?;
            w.flush().map_err(|e| Error::io("write pages.img", e))?;
            drop(w);
            if let Some(file) = &o.files {
                let (bytes, crc) = crate::files_img::write(file, f.pid(), &m)?;
                files_bytes += bytes;
                m.files_crc = Some(crc);
            }
            manifests.push(m);
        }
        mark_shared(&mut manifests.iter_mut().collect::<Vec<_>>())?;
        // Everything is dumped: from here on the directory is the new image.
        out.top.clear().map_err(|e| Error::io("tree image", e))?;
        for (m, o) in manifests.iter().zip(out.outs) {
            image::write_manifest_to(&o.manifest, m)?;
            o.commit().map_err(|e| Error::io("image", e))?;
        }
        let text = serde_json::to_vec_pretty(&TreeManifest::new(procs.to_vec()))
            .map_err(|e| Error::Image(e.to_string()))?;
        out.top
            .commit(&text)
            .map_err(|e| Error::io("tree image", e))?;
        Ok(manifests)
    })();
    let frozen_for = t0.elapsed();
    let manifests = match written {
        Ok(m) => m,
        Err(e) => {
            drop(frozen);
            return Err(e);
        }
    };
    match leave {
        Leave::Kill => kill_all(frozen, &pids),
        Leave::Continue => {
            for (f, m) in frozen.iter().zip(&manifests) {
                let _ = flush_ignored_alarm(f, m);
            }
        }
    }
    Ok(TreeStats {
        processes: pids.len(),
        pages_bytes: manifests.iter().map(|m| m.pages_len).sum(),
        files_bytes,
        frozen: frozen_for,
    })
}

/// Refuses (reading `/proc` only) the tree `procs` if one of its processes
/// has what the engine cannot carry, besides what they share among
/// themselves; pipes with an inode in `relayed` are accepted (a node
/// daemon's relays). Call within a [`Scope`] of the tree.
fn check(procs: &[TreeProc], relayed: &[u64]) -> Result<()> {
    for (i, p) in procs.iter().enumerate() {
        match refuse::check_relayed(p.pid, relayed) {
            Err(Error::Refused(why)) if i > 0 => {
                return Err(Refusal::InTree {
                    pid: p.pid,
                    why: Box::new(why),
                }
                .into())
            }
            r => r?,
        }
    }
    Ok(())
}

/// [`check`] of the tree of `root` as it is now: its processes.
pub fn check_tree(root: i32, relayed: &[u64]) -> Result<Vec<TreeProc>> {
    let procs = processes(root)?;
    check_procs(&procs, relayed)?;
    Ok(procs)
}

/// [`check`] of the processes `procs` of a tree (as [`processes`] listed
/// them, and the caller admitted), not listed again: a process that
/// joined since is not looked at (the freeze, which compares the tree
/// with `procs`, fails then).
pub fn check_procs(procs: &[TreeProc], relayed: &[u64]) -> Result<()> {
    let pids: Vec<i32> = procs.iter().map(|p| p.pid).collect();
    let _scope = Scope::enter(&pids);
    check(procs, relayed)
}

/// Seizes every process of `procs` (the tree of `root`, in its order) and
/// checks that the tree did not change meanwhile; on an error all are let go.
fn freeze(root: i32, procs: &[TreeProc]) -> Result<Vec<Frozen>> {
    let mut frozen = Vec::new();
    for p in procs {
        frozen.push(Frozen::seize(p.pid)?);
    }
    if processes(root)? != procs {
        return Err(Error::Changed(format!(
            "the process tree of pid {root} changed while it was being stopped"
        )));
    }
    Ok(frozen)
}

/// Kills the stopped tree, children first (a parent killed first would
/// see them go), and waits until their pids are free.
fn kill_all(frozen: Vec<Frozen>, pids: &[i32]) {
    frozen.into_iter().rev().for_each(Frozen::kill);
    reaped(pids, Duration::from_secs(5));
}

/// A tree stopped and dumped into memory, still stopped (as
/// [`crate::Dumped`] is one process): the caller sends the images
/// somewhere, then kills the originals or resumes them. Dropping it
/// resumes them. Bound to the thread that stopped it (ptrace).
pub struct DumpedTree {
    pub procs: Vec<TreeProc>,
    /// Each process's image, in the order of `procs`.
    pub images: Vec<(Manifest, PageBuf)>,
    frozen: Vec<Frozen>,
    since: Instant,
    _thread_bound: std::marker::PhantomData<*const ()>,
}

impl DumpedTree {
    /// SIGKILLs the originals (children first); returns the time they were
    /// stopped.
    pub fn kill(self) -> Duration {
        let d = self.since.elapsed();
        let pids: Vec<i32> = self.procs.iter().map(|p| p.pid).collect();
        kill_all(self.frozen, &pids);
        d
    }

    /// Takes the page contents out (the manifests stay, for the decision).
    pub fn take_pages(&mut self) -> Vec<PageBuf> {
        self.images
            .iter_mut()
            .map(|(_, p)| std::mem::take(p))
            .collect()
    }

    /// Lets the originals continue; returns the time they were stopped.
    pub fn resume(self) -> Duration {
        let d = self.since.elapsed();
        for (f, (m, _)) in self.frozen.iter().zip(&self.images) {
            let _ = flush_ignored_alarm(f, m);
        }
        d
    }
}

/// Refuses (before anything is stopped) or stops the tree of `root`, whose
/// processes must still be `procs` (as the caller listed and admitted
/// them: a process that joined since fails the freeze with
/// [`Error::Changed`]), and dumps each process into memory, leaving them
/// stopped; pipes with an inode in `relayed` are recorded as relayed ends
/// (a node daemon's). `after_freeze` runs once all are stopped, before
/// anything of them is read (see [`crate::AfterFreeze`]); its refusal lets
/// them go.
pub fn freeze_and_dump_tree(
    root: i32,
    procs: &[TreeProc],
    relayed: &[u64],
    after_freeze: Option<AfterFreeze>,
) -> Result<DumpedTree> {
    let procs = procs.to_vec();
    let pids: Vec<i32> = procs.iter().map(|p| p.pid).collect();
    let _scope = Scope::enter(&pids);
    check(&procs, relayed)?;
    let reserves: Vec<_> = pids.iter().map(|&p| reserve_for(p, None)).collect();
    let frozen = freeze(root, &procs)?;
    if let Err(why) = after_freeze.map_or(Ok(()), |c| c()) {
        drop(frozen);
        return Err(Error::Changed(why));
    }
    let since = Instant::now();
    let mut images = Vec::new();
    for (f, reserve) in frozen.iter().zip(reserves) {
        let mut pages = PageBuf::new();
        let m = dump_frozen(f, relayed, None, Sink::Memory(&mut pages, reserve))?;
        images.push((m, pages));
    }
    mark_shared(&mut images.iter_mut().map(|(m, _)| m).collect::<Vec<_>>())?;
    Ok(DumpedTree {
        procs,
        images,
        frozen,
        since,
        _thread_bound: std::marker::PhantomData,
    })
}

/// Waits (at most `most`) until no process holds one of `pids`: the
/// killed processes of a tree are reaped by their parents, or by init
/// once those are gone, and a restore wants their pids.
pub(crate) fn reaped(pids: &[i32], most: Duration) {
    let t = Instant::now();
    // SAFETY: kill with signal 0 only checks for the process.
    while pids.iter().any(|&p| unsafe { libc::kill(p, 0) } == 0) && t.elapsed() < most {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Numbers the open file descriptions that several processes of the tree
/// hold (`kcmp(KCMP_FILE)`; `dup_of` already links those of one process),
/// then the pipes several of them hold ([`mark_pipes`]; one held outside
/// the tree is refused, one held by a single process is its own).
fn mark_shared(ms: &mut [&mut Manifest]) -> Result<()> {
    // (pid, fd, shared id) of each description seen so far.
    let mut seen: Vec<(i32, i32, u32)> = Vec::new();
    let mut next = 0u32;
    for i in 0..ms.len() {
        let pid = ms[i].pid;
        for k in 0..ms[i].fds.len() {
            let f = &ms[i].fds[k];
            if f.dup_of.is_some() || f.pipe.is_some() || f.relayed.is_some() {
                continue;
            }
            let fd = f.fd;
            let mut same = None;
            for &(p, g, id) in seen.iter().filter(|s| s.0 != pid) {
                // SAFETY: kcmp only compares kernel objects of two pids.
                match unsafe {
                    libc::syscall(libc::SYS_kcmp, p, pid, 0 /* KCMP_FILE */, g, fd)
                } {
                    0 => {
                        same = Some((p, g, id));
                        break;
                    }
                    // Unknown (seccomp, no CONFIG_KCMP): copies with one
                    // offset each would overwrite each other's output.
                    r if r < 0 => {
                        return Err(Error::last(format!(
                            "kcmp(KCMP_FILE) of fd {g} of pid {p} and fd {fd} of pid {pid}"
                        )))
                    }
                    _ => {}
                }
            }
            let Some((p, g, id)) = same else {
                next += 1;
                seen.push((pid, fd, next));
                continue;
            };
            ms[i].fds[k].shared = Some(id);
            // The first holder is marked too.
            for m in ms.iter_mut().filter(|m| m.pid == p) {
                for e in m.fds.iter_mut().filter(|e| e.fd == g) {
                    e.shared = Some(id);
                }
            }
        }
    }
    mark_pipes(ms, next);
    Ok(())
}

/// Numbers the ends of the pipes that several processes of the tree hold
/// (a shell's pipeline; `check` let only pipes whose ends are all in the
/// tree through), after the ids up to `last`: one id per pipe and
/// direction, which the restore makes once. The unread bytes, read from
/// each process's first end of the pipe, are kept on the first such end
/// of the tree only. A pipe held by one process stays its own (made by its
/// blob).
fn mark_pipes(ms: &mut [&mut Manifest], last: u32) {
    use std::collections::BTreeMap;
    let mut holders: BTreeMap<u64, Vec<i32>> = BTreeMap::new();
    for m in ms.iter() {
        for p in m.fds.iter().filter_map(|f| f.pipe.as_ref()) {
            let h = holders.entry(p.ino).or_default();
            if !h.contains(&m.pid) {
                h.push(m.pid);
            }
        }
    }
    let mut ids: BTreeMap<(u64, bool), u32> = BTreeMap::new();
    let mut filled: Vec<u64> = Vec::new();
    let mut next = last;
    for m in ms.iter_mut() {
        for f in m.fds.iter_mut() {
            let Some(p) = f.pipe.as_mut() else {
                continue;
            };
            if holders[&p.ino].len() < 2 {
                continue;
            }
            f.shared = Some(*ids.entry((p.ino, p.write)).or_insert_with(|| {
                next += 1;
                next
            }));
            if filled.contains(&p.ino) {
                p.data.clear();
            } else if f.dup_of.is_none() {
                filled.push(p.ino);
            }
        }
    }
}
