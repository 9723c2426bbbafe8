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
//! (a pipe: each copy reads one byte, which the tool writes only once every
//! process is rebuilt; end of file, the tool gone, makes a copy exit). After
//! a failure the tool kills every copy (those that hold the gate).
//!
//! The pids must be free here and ours to choose (`CAP_CHECKPOINT_RESTORE`
//! or `CAP_SYS_ADMIN`): the processes of a tree wait for and signal each
//! other by pid, so a copy under another pid would wait for no one, or
//! signal a stranger. On the kernel backend a copy of a member of the
//! restoring caller's set is forked into it (`clone3(CLONE_HALFPROC)` with
//! `set_tid`), one of a process outside the set (a member's plain `fork`)
//! outside it, as each was.

use crate::creds::Creds;
use crate::error::{Error, Result};
use crate::image::{self, Manifest};
use crate::image_dir;
use crate::restore::{choose_region, Prepared, RestoreOptions, Restored};
use crate::restore_plan::TreeShm;
use crate::tree::{TreeManifest, TREE};
use crate::tree_copies::{
    grow, open_shared, open_shared_pipes, pid_in_use, sessions, Copies, Objects,
};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// `tree.json` of `dir`, checked ([`TreeManifest::check`]); `None` if
/// there is none (an image of one process). A regular file only, opened
/// without blocking and without following `/proc` magic links
/// ([`image_dir::open_regular`]: a FIFO put there does not hold the
/// reader), at most [`image_dir::MANIFEST_MAX`] bytes. Errors name the
/// path; a file access keeps its `io::ErrorKind`.
pub fn read_tree(dir: &Path) -> Result<Option<TreeManifest>> {
    use std::io::Read;
    let path = dir.join(TREE);
    let f = match image_dir::open_regular(None, &path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("open {}", path.display()), e)),
    };
    let mut text = Vec::new();
    f.take(image_dir::MANIFEST_MAX + 1)
        .read_to_end(&mut text)
        .map_err(|e| Error::io(format!("read {}", path.display()), e))?;
    let bad = |why: String| Error::Image(format!("{}: {why}", path.display()));
    if text.len() as u64 > image_dir::MANIFEST_MAX {
        return Err(bad(format!(
            "more than {} MiB: not a tree image",
            image_dir::MANIFEST_MAX >> 20
        )));
    }
    let t: TreeManifest = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
    t.check().map_err(|e| bad(e.to_string()))?;
    Ok(Some(t))
}

/// Where the page contents of a tree's images are, in the tree's order.
pub enum TreePages<'a> {
    /// Their `pages.img` files (checked).
    Files(Vec<File>),
    /// In memory (checked), as [`crate::restore_from_memory`] takes them.
    Memory(Vec<&'a [u8]>),
}

impl TreePages<'_> {
    /// Copies `buf.len()` bytes at `off` of image `i`'s contents into `buf`.
    pub(crate) fn read(&self, i: usize, off: u64, buf: &mut [u8]) -> Result<()> {
        match self {
            TreePages::Files(f) => f[i]
                .read_exact_at(buf, off)
                .map_err(|e| Error::io("read pages.img", e)),
            TreePages::Memory(m) => {
                let src = usize::try_from(off)
                    .ok()
                    .and_then(|o| m[i].get(o..o.checked_add(buf.len())?))
                    .ok_or_else(|| Error::Image("page run outside the page contents".into()))?;
                buf.copy_from_slice(src);
                Ok(())
            }
        }
    }
}

/// A tree restored and held before it runs: every copy rebuilt and waiting
/// at the gate. [`HeldTree::release`] lets it run; dropping it kills every
/// copy (a migration's destination holds it until the commit).
pub struct HeldTree {
    copies: Copies,
    gate: Option<OwnedFd>,
}

impl HeldTree {
    /// The root's copy, a child of the caller.
    pub fn root(&self) -> i32 {
        self.copies.root
    }

    /// Lets every process of the tree run: one byte each at the gate. If
    /// they cannot all have theirs, every copy is killed and the error says so.
    pub fn release(mut self) -> Result<()> {
        let Some(gate) = self.gate.take() else {
            return Ok(());
        };
        let bytes = vec![1u8; self.copies.procs.len()];
        // SAFETY: writing our buffer to our pipe (64 bytes at most, within
        // its capacity: it does not block).
        let n = unsafe { libc::write(gate.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
        if n != bytes.len() as isize {
            let e = std::io::Error::last_os_error();
            self.copies.kill();
            return Err(Error::Restore(format!(
                "letting the tree run (its gate): {e}; every copy was killed"
            )));
        }
        Ok(())
    }
}

impl Drop for HeldTree {
    fn drop(&mut self) {
        if self.gate.is_some() {
            // Killed while the gate holds them; a copy missed sees the
            // gate's end of file and exits.
            self.copies.kill();
        }
    }
}

/// Whether a tree of processes `pids` may be restored here (nothing to
/// check for none): with every pid free (not held by a process, a process
/// group or a session).
pub fn tree_restorable(pids: &[i32]) -> Result<()> {
    if pids.is_empty() {
        return Ok(());
    }
    let sessions = sessions();
    for &pid in pids {
        if let Some(who) = pid_in_use(pid, &sessions) {
            return Err(Error::Restore(format!(
                "pid {pid} is in use here (by {who}): a process tree is restored with its pids \
                 (its processes wait for and signal each other by pid)"
            )));
        }
    }
    Ok(())
}

/// Restores the tree image in `dir` (written by [`crate::checkpoint_tree`]);
/// returns its root's copy, a child of the caller. Every process has its
/// pid again, its parent's copy as parent, and shares what it shared.
pub fn restore_tree(dir: &Path) -> Result<Restored> {
    let t = read_tree(dir)?.ok_or_else(|| {
        let path = dir.join(TREE);
        Error::io(
            format!("read {}", path.display()),
            std::io::ErrorKind::NotFound.into(),
        )
    })?;
    let mut ms = Vec::new();
    let mut pages = Vec::new();
    for p in &t.procs {
        let d = dir.join(p.pid.to_string());
        let m = image::read(&d)?;
        let path = d.join(image::PAGES);
        pages
            .push(File::open(&path).map_err(|e| Error::io(format!("open {}", path.display()), e))?);
        ms.push(m);
    }
    let none = vec![Vec::new(); ms.len()];
    let held = restore_tree_held(&t, &ms, TreePages::Files(pages), &none, None)?;
    let root = held.root();
    held.release()?;
    Ok(Restored { pid: root })
}

/// Restores the tree `t` of images `ms` (in its order, their contents in
/// `pages`) and holds it at the gate. `inherit[i]`: replacements of image
/// `i`'s relayed fds (as [`RestoreOptions::inherit`]); `creds`: restore as
/// this owner (as [`RestoreOptions::creds`]).
pub fn restore_tree_held(
    t: &TreeManifest,
    ms: &[Manifest],
    pages: TreePages,
    inherit: &[Vec<(i32, RawFd)>],
    creds: Option<&Creds>,
) -> Result<HeldTree> {
    t.check()?;
    if ms.len() != t.procs.len() || inherit.len() != ms.len() {
        return Err(Error::Image(format!(
            "{} images for a tree of {} processes",
            ms.len(),
            t.procs.len()
        )));
    }
    if let Some((p, m)) = t.procs.iter().zip(ms).find(|(p, m)| p.pid != m.pid) {
        return Err(Error::Image(format!(
            "the image of pid {} says pid {}",
            p.pid, m.pid
        )));
    }
    // A process joins a set only as a member's child: a member under a
    // parent outside the set cannot be made.
    for (p, m) in t.procs.iter().zip(ms).skip(1) {
        let parent = t.procs.iter().position(|q| q.pid == p.ppid).map(|j| &ms[j]);
        if !m.outside_set && parent.is_some_and(|q| q.outside_set) {
            return Err(Error::Image(format!(
                "pid {} was a member of its set and its parent {} was not",
                p.pid, p.ppid
            )));
        }
    }
    let pids: Vec<i32> = t.procs.iter().map(|p| p.pid).collect();
    tree_restorable(&pids)?;
    // The open file descriptions the tree shares, opened once.
    let mut shared: BTreeMap<u32, File> = BTreeMap::new();
    open_shared_pipes(ms, &mut shared)?;
    for f in ms.iter().flat_map(|m| &m.fds).filter(|f| f.pipe.is_none()) {
        if let (Some(id), None) = (f.shared, f.dup_of) {
            if let std::collections::btree_map::Entry::Vacant(v) = shared.entry(id) {
                v.insert(open_shared(f)?);
            }
        }
    }
    let (gate_r, gate_w) = halfproc_sys::fd::pipe(libc::O_CLOEXEC)?;
    let mut preps = Vec::new();
    for (i, m) in ms.iter().enumerate() {
        let mut inherit = inherit[i].clone();
        inherit.extend(
            m.fds
                .iter()
                .filter(|e| e.dup_of.is_none())
                .filter_map(|e| Some((e.fd, shared.get(&e.shared?)?.as_raw_fd()))),
        );
        let opts = RestoreOptions {
            inherit,
            stopped: false,
            creds: creds.cloned(),
        };
        let (file, memory) = match &pages {
            TreePages::Files(f) => (
                Some(
                    f[i].try_clone()
                        .map_err(|e| Error::io("dup pages.img", e))?,
                ),
                None,
            ),
            TreePages::Memory(d) => (None, Some(d[i])),
        };
        preps.push(Prepared::new(
            m,
            file,
            memory,
            &opts,
            Some(gate_r.as_raw_fd()),
        )?);
    }
    let mut shm = TreeShm::layout(ms.iter().map(|m| &m.vmas[..]))?;
    // One size of `R` for all: nothing of the tool stays mapped between a
    // smaller `R` and the objects (the blobs keep that range).
    let r_len = preps.iter().map(|p| p.r_len).max().unwrap_or(0);
    for p in &mut preps {
        p.r_len = r_len;
    }
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
    let objects = Objects::make(&shm, ms, &pages)?;
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
    let gate = std::fs::read_link(format!("/proc/self/fd/{}", gate_r.as_raw_fd()))
        .map_err(|e| Error::io("readlink of the gate", e))?
        .to_string_lossy()
        .into_owned();
    // SAFETY: the child only runs `grow` (raw system calls, byte copies).
    let root =
        match unsafe { halfproc_sys::task::fork_with_pid_raw(t.procs[0].pid, preps[0].member) } {
            // SAFETY: the freshly forked child of this restore.
            Ok(0) => unsafe { grow(0, t, &kids, &preps, &plans, r) },
            Ok(pid) => pid,
            Err(e) => {
                return Err(Error::Restore(format!(
                    "pid {}: forking it: {}",
                    t.procs[0].pid,
                    std::io::Error::from_raw_os_error(e)
                )))
            }
        };
    drop(objects);
    drop(gate_r);
    let copies = Copies {
        procs: t.procs.clone(),
        root,
        gate,
    };
    let mut failed = None;
    for ((p, prep), plan) in t.procs.iter().zip(preps).zip(plans) {
        if let Err(e) = prep.started(plan).result() {
            failed.get_or_insert(format!("pid {}: {}", p.pid, e.text()));
        }
    }
    // A copy killed before it forked its children reports nothing for them.
    if failed.is_none() {
        if let Some(p) = t.procs.iter().find(|p| !copies.ours(p.pid)) {
            failed = Some(format!(
                "pid {}: its copy is gone (killed while it was restored?)",
                p.pid
            ));
        }
    }
    if let Some(why) = failed {
        copies.kill();
        return Err(Error::Restore(why));
    }
    // Every process is rebuilt and waits at the gate.
    Ok(HeldTree {
        copies,
        gate: Some(gate_w),
    })
}
