//! The source's dump thread: it freezes and dumps the migrating program
//! (one process, with pre-copy rounds first when the kernel tracks dirty
//! pages, or a process tree, frozen as a whole) and stays its tracer until
//! the decision (ptrace requests must come from the thread that attached).

use crate::precopy::{Image, Mode};
use crate::proto::Msg;
use halfproc_migrate::tree::TreeProc;
use halfproc_migrate::{Dumped, DumpedTree, PageBuf};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// What the source does with the frozen original.
pub(crate) enum Decision {
    Kill,
    Resume,
    /// Keep it stopped (in doubt), detached.
    Hold,
}

/// The images the dump thread hands over for streaming.
pub(crate) enum Outgoing {
    One(Image),
    /// A process tree: each process's manifest (JSON) and contents, in
    /// the tree's order.
    Tree {
        procs: Vec<TreeProc>,
        manifests: Vec<Vec<u8>>,
        pages: Vec<PageBuf>,
        /// Which call read which process (see [`Outgoing::read_with`]).
        read_with: String,
    },
}

impl Outgoing {
    /// Bytes of page contents to stream.
    pub(crate) fn bytes(&self) -> u64 {
        match self {
            Outgoing::One(i) => i.pages.len() as u64,
            Outgoing::Tree { pages, .. } => pages.iter().map(|p| p.len() as u64).sum(),
        }
    }

    /// The call that read the pages of `pid` (the stopped original of
    /// `One`), or for a tree which call read which of its processes: on
    /// the kernel backend `dmread` for members of the daemon's set,
    /// `process_vm_readv` for what they forked outside it.
    pub(crate) fn read_with(&self, pid: i32) -> String {
        match self {
            Outgoing::One(_) => halfproc_migrate::reader_kind(pid).to_string(),
            Outgoing::Tree { read_with, .. } => read_with.clone(),
        }
    }

    /// What happened, for the user.
    pub(crate) fn mode(&self) -> String {
        match self {
            Outgoing::One(i) => i.mode.clone(),
            Outgoing::Tree { procs, .. } => format!(
                "a process tree of {} processes, frozen as a whole (no pre-copy)",
                procs.len()
            ),
        }
    }
}

/// The stopped original(s).
enum Stopped {
    One(Box<Dumped>),
    Tree(DumpedTree),
}

impl Stopped {
    fn pids(&self) -> Vec<i32> {
        match self {
            Stopped::One(d) => vec![d.manifest.pid],
            Stopped::Tree(t) => t.procs.iter().map(|p| p.pid).collect(),
        }
    }

    fn kill(self) -> Duration {
        match self {
            Stopped::One(d) => d.kill(),
            Stopped::Tree(t) => t.kill(),
        }
    }

    fn resume(self) -> Duration {
        match self {
            Stopped::One(d) => d.resume(),
            Stopped::Tree(t) => t.resume(),
        }
    }

    /// Keeps every process stopped, detached: a SIGSTOP queued before the
    /// detach group-stops each at once, traced by no one; waits until each
    /// has stopped (a runnable task has not yet), so "kept stopped" is true
    /// when the answer says it.
    fn hold(self) -> Duration {
        let pids = self.pids();
        for &pid in &pids {
            // SAFETY: signalling the stopped original.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
        }
        let t = self.resume();
        for pid in pids {
            for _ in 0..2000 {
                let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let state = st.rsplit(')').next().unwrap_or("").trim_start();
                if state.is_empty() || state.starts_with('T') {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        t
    }
}

/// A dump to make: of `pid` (its tree, as listed and admitted, if
/// `tree`), its relayed pipes' inodes `inos`.
pub(crate) struct Job {
    pub(crate) pid: i32,
    pub(crate) inos: Vec<u64>,
    pub(crate) tree: Option<Vec<TreeProc>>,
    pub(crate) mode: Mode,
    /// Where pre-copy rounds send their pages (one process only).
    pub(crate) pre: Option<mpsc::Sender<Msg>>,
    /// Run after every pre-copy read, before its send.
    pub(crate) pre_check: Box<dyn FnMut() -> Result<(), String> + Send>,
    /// Run once everything is stopped, before anything is read.
    pub(crate) check: Box<dyn Fn() -> Result<(), String> + Send>,
}

/// The dump thread's channels: the images (or why not), the decision to
/// send it, and the time the original was stopped, once decided.
pub(crate) struct Handles {
    pub(crate) image: oneshot::Receiver<Result<Outgoing, String>>,
    pub(crate) decide: std::sync::mpsc::Sender<Decision>,
    pub(crate) frozen: oneshot::Receiver<Duration>,
}

/// Starts the dump thread of `job`.
pub(crate) fn spawn(job: Job) -> Result<Handles, String> {
    let (dump_tx, dump_rx) = oneshot::channel::<Result<Outgoing, String>>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<Decision>();
    let (fin_tx, fin_rx) = oneshot::channel::<Duration>();
    std::thread::Builder::new()
        .name("halfproc-migrate".into())
        .spawn(move || {
            crate::access::test_admit_delay();
            let Job {
                pid,
                inos,
                tree,
                mode,
                pre,
                mut pre_check,
                check,
            } = job;
            let dumped = if let Some(procs) = tree {
                dump_tree(pid, &procs, &inos, &*check)
            } else {
                crate::precopy::dump(pid, &inos, &mode, pre, &mut *pre_check, Some(&*check))
                    .map(|(d, image)| (Stopped::One(Box::new(d)), Outgoing::One(image)))
            };
            let stopped = match dumped {
                Err(e) => {
                    let _ = dump_tx.send(Err(e));
                    return;
                }
                Ok((stopped, image)) => {
                    let _ = dump_tx.send(Ok(image));
                    stopped
                }
            };
            let frozen = match go_rx.recv().unwrap_or(Decision::Resume) {
                Decision::Kill => stopped.kill(),
                Decision::Resume => stopped.resume(),
                Decision::Hold => stopped.hold(),
            };
            let _ = fin_tx.send(frozen);
        })
        .map_err(|e| format!("thread: {e}"))?;
    Ok(Handles {
        image: dump_rx,
        decide: go_tx,
        frozen: fin_rx,
    })
}

/// Freezes and dumps the tree of `pid`: its images handed over, its
/// processes kept stopped.
fn dump_tree(
    pid: i32,
    procs: &[TreeProc],
    inos: &[u64],
    check: &(dyn Fn() -> Result<(), String> + Send),
) -> Result<(Stopped, Outgoing), String> {
    let mut t = halfproc_migrate::freeze_and_dump_tree(pid, procs, inos, Some(check))
        .map_err(|e| e.to_string())?;
    let mut manifests = Vec::new();
    for (m, _) in &t.images {
        manifests.push(halfproc_migrate::image::manifest_bytes(m).map_err(|e| e.to_string())?);
    }
    let pages = t.take_pages();
    let member = halfproc_migrate::caller_is_member();
    let (inside, outside): (Vec<_>, Vec<_>) = t
        .images
        .iter()
        .map(|(m, _)| (m.pid, member && !m.outside_set))
        .partition(|&(_, dm)| dm);
    let list = |call: &str, ps: Vec<(i32, bool)>| {
        let ps: Vec<String> = ps.iter().map(|(p, _)| p.to_string()).collect();
        (!ps.is_empty()).then(|| format!("{call} for pid {}", ps.join(", ")))
    };
    let read_with = [list("dmread", inside), list("process_vm_readv", outside)]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("; ");
    let out = Outgoing::Tree {
        procs: t.procs.clone(),
        manifests,
        pages,
        read_with,
    };
    Ok((Stopped::Tree(t), out))
}
