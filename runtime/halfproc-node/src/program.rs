//! One incarnation of a program on this node: the process (spawned, or
//! restored from an image), its keeper thread, its relayed stdio pipes and
//! its link to the origin node's [`Session`].
//!
//! **Keeper thread.** Each process is created by a thread of its own that
//! stays its parent thread until it ends: a restored process waits stopped
//! with `PR_SET_PDEATHSIG` tied to that thread (see
//! `halfproc_migrate::RestoreOptions::stopped`). The keeper reaps with a
//! pidfd and `waitid(WNOHANG)` once the pidfd says the process exited: a
//! blocking `waitpid` by the parent would swallow the ptrace stops a
//! migration of the same process needs.

use crate::pipes::{image_pipes, spawn_pipes, Pipes};
use crate::proto::{self, End, Exit, Msg, Origin, Stream};
use crate::session::{Session, StdinChunk};
use halfproc_migrate::image::Manifest;
use halfproc_migrate::{Creds, RestoreOptions};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Where an incarnation sends output and gets stdin: the session itself
/// (the program runs on its origin) or a connection to the origin.
#[derive(Clone)]
pub enum Link {
    Local(Arc<Session>),
    Remote(Arc<RemoteLink>),
}

/// A connection to the origin node (`Attach`).
pub struct RemoteLink {
    tx: mpsc::UnboundedSender<Msg>,
    /// Stdin answers, tagged with the offset they answer.
    stdin: tokio::sync::Mutex<mpsc::UnboundedReceiver<(u64, Result<StdinChunk, String>)>>,
}

impl Link {
    /// Connects to the origin for incarnation `gen` running as `pid` here.
    pub async fn remote(
        origin: &Origin,
        gen: u64,
        me: &str,
        ident: &proto::Identity,
        pid: i32,
    ) -> Result<Link, String> {
        let mut c = proto::Conn::connect(&origin.addr, ident)
            .await
            .map_err(|e| format!("origin {}: {e}", origin.addr))?;
        c.send(&Msg::Attach {
            session: origin.session,
            gen,
            node: me.to_string(),
            pid,
        })
        .await
        .map_err(|e| format!("origin {}: {e}", origin.addr))?;
        let (mut r, w) = c.split();
        let tx = proto::writer_task(w);
        let (stx, srx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let m = match r.recv().await {
                    Ok(Some(m)) => m,
                    Ok(None) | Err(_) => {
                        tracing::debug!("origin connection closed");
                        let _ = stx.send((u64::MAX, Err("origin connection closed".into())));
                        return;
                    }
                };
                let Msg::StdinData {
                    offset,
                    data,
                    eof,
                    error,
                } = m
                else {
                    tracing::warn!("origin sent {m:?} on an attach connection; ignored");
                    continue;
                };
                let chunk = match (error, eof) {
                    (Some(e), _) => Err(e),
                    (None, true) => Ok(StdinChunk::Eof),
                    (None, false) => Ok(StdinChunk::Data(data)),
                };
                let _ = stx.send((offset, chunk));
            }
        });
        Ok(Link::Remote(Arc::new(RemoteLink {
            tx,
            stdin: tokio::sync::Mutex::new(srx),
        })))
    }

    fn output(&self, gen: u64, stream: Stream, data: Vec<u8>) {
        match self {
            Link::Local(s) => s.output(gen, stream, data),
            Link::Remote(r) => {
                let _ = r.tx.send(Msg::Output { stream, data });
            }
        }
    }

    fn end(&self, gen: u64, end: End) {
        match self {
            Link::Local(s) => s.end(gen, end),
            Link::Remote(r) => {
                let _ = r.tx.send(Msg::End(end));
            }
        }
    }

    async fn stdin(&self, offset: u64) -> Result<StdinChunk, String> {
        match self {
            Link::Local(s) => s.stdin(offset).await,
            Link::Remote(r) => {
                let mut rx = r.stdin.lock().await;
                r.tx.send(Msg::StdinReq { offset })
                    .map_err(|_| "origin connection closed".to_string())?;
                loop {
                    match rx.recv().await {
                        None => return Err("origin connection closed".into()),
                        Some((at, chunk)) if at == offset || at == u64::MAX => return chunk,
                        // The answer to a request abandoned before.
                        Some((at, _)) => {
                            tracing::debug!(at, offset, "stale stdin answer skipped");
                            continue;
                        }
                    }
                }
            }
        }
    }
}

/// What a program is doing, as migration and checkpoint see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PState {
    Running,
    /// A migration or checkpoint holds it.
    Busy(&'static str),
    /// It ended here for this reason (its process is being killed).
    Gone(End),
    /// Kept stopped: a migration to `to` (id `id`, node `node`) sent its
    /// commit and lost the answer; see `migrate::resolve`.
    InDoubt {
        to: String,
        id: u64,
        node: u64,
    },
}

/// The stdin relay: a task writing what the origin has into the pipe.
struct StdinRelay {
    pipe: Arc<tokio::sync::Mutex<Option<pipe::Sender>>>,
    /// Stream offset of the next byte to write into the pipe.
    written: Arc<AtomicU64>,
    task: Option<JoinHandle<()>>,
}

/// One incarnation on this node.
pub struct Program {
    pub pid: i32,
    pub program: String,
    pub origin: Origin,
    pub gen: u64,
    pub link: Link,
    /// Inodes of the relayed pipes (the engine carries them, not refuses).
    pub inos: Vec<u64>,
    state: Mutex<PState>,
    stdin: Mutex<StdinRelay>,
    outputs: Mutex<Vec<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Program {
    pub fn state(&self) -> PState {
        lock(&self.state).clone()
    }

    /// Takes the program for `what` if it is running; the error says why not.
    pub fn acquire(&self, what: &'static str) -> Result<(), String> {
        let mut s = lock(&self.state);
        match &*s {
            PState::Running => {
                *s = PState::Busy(what);
                Ok(())
            }
            PState::Busy(w) => Err(format!(
                "pid {} is already being {w}; one at a time",
                self.pid
            )),
            PState::Gone(_) => Err(format!("pid {} has left this node", self.pid)),
            PState::InDoubt { to, .. } => Err(format!(
                "pid {} is in doubt after a migration to {to}; settle it first with \
                 `halfproc migrate --resolve {}`",
                self.pid, self.pid
            )),
        }
    }

    /// Back to running (the migration or checkpoint did not take it away).
    pub fn release(&self) {
        let mut s = lock(&self.state);
        if matches!(*s, PState::Busy(_)) {
            *s = PState::Running;
        }
    }

    /// Running again after a failed checkpoint that would have ended it.
    pub fn set_running(&self) {
        *lock(&self.state) = PState::Running;
    }

    /// Kept stopped, the outcome of its migration unknown.
    pub fn set_in_doubt(&self, to: String, id: u64, node: u64) {
        *lock(&self.state) = PState::InDoubt { to, id, node };
    }

    /// It ends here with `end` (set before its process is killed).
    pub fn leave(&self, end: End) {
        *lock(&self.state) = PState::Gone(end);
    }

    /// Stops writing stdin into the pipe; returns the stream offset reached.
    pub async fn pause_stdin(&self) -> u64 {
        let task = lock(&self.stdin).task.take();
        if let Some(t) = task {
            t.abort();
            let _ = t.await;
        }
        lock(&self.stdin).written.load(Ordering::SeqCst)
    }

    /// The original runs on here (a move or checkpoint failed, or left it
    /// running): stdin flows again, and a program stopped at a yield for
    /// the move is let go.
    pub fn resume_here(&self) {
        self.resume_stdin();
        crate::yield_point::let_go(self.pid);
    }

    /// Starts (again) writing stdin into the pipe.
    pub fn resume_stdin(&self) {
        let mut s = lock(&self.stdin);
        if s.task.is_none() {
            s.task = Some(tokio::spawn(stdin_loop(
                self.link.clone(),
                s.pipe.clone(),
                s.written.clone(),
            )));
        }
    }
}

async fn stdin_loop(
    link: Link,
    pipe: Arc<tokio::sync::Mutex<Option<pipe::Sender>>>,
    written: Arc<AtomicU64>,
) {
    let mut guard = pipe.lock().await;
    loop {
        let Some(tx) = guard.as_mut() else { return };
        let off = written.load(Ordering::SeqCst);
        let chunk = link.stdin(off).await;
        tracing::debug!(
            off,
            got = ?chunk.as_ref().map(|c| match c {
                StdinChunk::Data(d) => d.len(),
                StdinChunk::Eof => 0,
            }),
            "stdin relay"
        );
        match chunk {
            Ok(StdinChunk::Data(d)) => {
                let mut at = 0;
                while at < d.len() {
                    match tx.write(&d[at..]).await {
                        Ok(n) => {
                            at += n;
                            written.fetch_add(n as u64, Ordering::SeqCst);
                        }
                        // The program closed its stdin: nothing more to relay.
                        Err(e) => {
                            tracing::warn!("stdin relay stopped at offset {off}: write: {e}");
                            return;
                        }
                    }
                }
            }
            Ok(StdinChunk::Eof) => {
                // Close our end: the program reads EOF.
                *guard = None;
                return;
            }
            Err(e) => {
                tracing::warn!("stdin relay stopped at offset {off}: {e}");
                return;
            }
        }
    }
}

async fn output_loop(link: Link, gen: u64, stream: Stream, mut rx: pipe::Receiver) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match rx.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => link.output(gen, stream, buf[..n].to_vec()),
        }
    }
}

/// How to make the process.
pub enum How {
    /// `argv` in `cwd` with `env`: a plain child on the portable backend, a
    /// member of the daemon's set on the kernel backend (`member`).
    Spawn {
        argv: Vec<String>,
        cwd: String,
        env: Vec<(String, String)>,
        /// Run as this user (the daemon is root); `None`: as the daemon.
        owner: Option<Creds>,
    },
    /// From an image whose pages are in `pages`; stopped first if `stopped`.
    Restore {
        manifest: Box<Manifest>,
        pages: Pages,
        stopped: bool,
        /// Restore as this user (the daemon is root); `None`: as the daemon.
        owner: Option<Creds>,
    },
    /// A process tree, held until the decision.
    RestoreTree(Box<TreeImages>),
}

/// The images of a process tree (see `halfproc_migrate::tree`):
/// restored held at the tree's gate until the decision, as a
/// [`How::Restore`] is `stopped`.
pub struct TreeImages {
    pub tree: halfproc_migrate::tree::TreeManifest,
    pub manifests: Vec<Manifest>,
    pub pages: TreeContents,
    /// Restore as this user (the daemon is root); `None`: as the daemon.
    pub owner: Option<Creds>,
}

/// Where the page contents of a tree's images are, in the tree's order.
pub enum TreeContents {
    /// The `pages.img` files of a tree image directory, checked with
    /// `halfproc_migrate::pages_file::verify_pages_file`.
    Files(Vec<File>),
    /// The daemon's memory: a tree that arrived over the network (see
    /// [`Pages::Memory`]).
    Memory(Vec<halfproc_migrate::PageBuf>),
}

/// Where a restore finds the image's page contents.
pub enum Pages {
    /// A file (`pages.img` of an image directory), checked with
    /// `halfproc_migrate::pages_file::verify_pages_file`: the restore
    /// checks the process holds those contents before it runs
    /// (`restore_file_checked`).
    File(File),
    /// The daemon's memory: an image that arrived over the network and was
    /// checked there. The restorer moves (or copies) its pages into place,
    /// with no file in between (`halfproc_migrate::restore_from_memory`);
    /// it is dropped as soon as the restore returns, before the stopped
    /// copy is continued, so the copy's pages are no longer shared with
    /// the daemon when it writes them.
    Memory(halfproc_migrate::PageBuf),
}

/// Result of the keeper's start: pid and, for a stopped restore, the
/// channel that continues (true) or kills (false) it.
pub struct Started {
    pub pid: i32,
    pub go: Option<std::sync::mpsc::Sender<bool>>,
    pub exit: oneshot::Receiver<Option<Exit>>,
    pipes_daemon: (Option<OwnedFd>, Vec<(Stream, OwnedFd)>),
    inos: Vec<u64>,
}

/// Creates the process on a keeper thread (see the module documentation).
pub async fn create(how: How) -> Result<Started, String> {
    let (pipes, ends) = match &how {
        How::Spawn { .. } => (spawn_pipes()?, BTreeMap::new()),
        How::Restore { manifest, .. } => image_pipes(&[manifest.as_ref()])?,
        How::RestoreTree(t) => image_pipes(&t.manifests)?,
    };
    let Pipes {
        stdin,
        outputs,
        child,
        inos,
    } = pipes;
    let (rtx, rrx) = oneshot::channel::<Result<i32, String>>();
    let (etx, erx) = oneshot::channel::<Option<Exit>>();
    let (gtx, grx) = std::sync::mpsc::channel::<bool>();
    let stopped = matches!(
        how,
        How::Restore { stopped: true, .. } | How::RestoreTree(_)
    );
    std::thread::Builder::new()
        .name("halfproc-keeper".into())
        .spawn(move || keeper(how, (child, ends), rtx, grx, etx))
        .map_err(|e| format!("keeper thread: {e}"))?;
    let pid = rrx.await.map_err(|_| "keeper thread died".to_string())??;
    Ok(Started {
        pid,
        go: stopped.then_some(gtx),
        exit: erx,
        pipes_daemon: (stdin, outputs),
        inos,
    })
}

fn keeper(
    how: How,
    (child, ends): (Vec<(i32, OwnedFd)>, BTreeMap<u64, RawFd>),
    reply: oneshot::Sender<Result<i32, String>>,
    go: std::sync::mpsc::Receiver<bool>,
    exit: oneshot::Sender<Option<Exit>>,
) {
    let mut stopped = false;
    let mut held = None;
    let pid = match how {
        How::Spawn {
            argv,
            cwd,
            env,
            owner,
        } if crate::member::active() => {
            // The kernel backend: a member of our set (clone3 + execve).
            let r = crate::member::spawn(&argv, &cwd, &env, owner.as_ref(), &child);
            drop(child);
            match r {
                Ok(pid) => pid,
                Err(e) => {
                    let _ = reply.send(Err(e));
                    return;
                }
            }
        }
        How::Spawn {
            argv,
            cwd,
            env,
            owner,
        } => {
            let mut c = std::process::Command::new(&argv[0]);
            c.args(&argv[1..]).env_clear().envs(env);
            c.process_group(0);
            match owner.filter(|o| !o.is_current()) {
                None => {
                    c.current_dir(&cwd);
                }
                Some(o) => {
                    let Ok(dir) = std::ffi::CString::new(cwd.clone()) else {
                        let _ = reply.send(Err(format!("cwd {cwd:?} holds a NUL byte")));
                        return;
                    };
                    // SAFETY: raw credential calls and chdir in the forked
                    // child (async-signal-safe, no allocation): the user's
                    // groups, gid and uid, then its working directory, looked
                    // up with its rights.
                    unsafe {
                        c.pre_exec(move || {
                            let (g, u) = (o.gid as libc::c_long, o.uid as libc::c_long);
                            let groups = o.groups.as_ptr();
                            if libc::syscall(libc::SYS_setgroups, o.groups.len(), groups) != 0
                                || libc::syscall(libc::SYS_setresgid, g, g, g) != 0
                                || libc::syscall(libc::SYS_setresuid, u, u, u) != 0
                                || libc::chdir(dir.as_ptr()) != 0
                            {
                                return Err(std::io::Error::last_os_error());
                            }
                            Ok(())
                        })
                    };
                }
            }
            // SAFETY: close_range is async-signal-safe. The program gets only
            // its three relayed fds, none the daemon inherited: fds from 3 on
            // are marked close-on-exec (CLOSE_RANGE_CLOEXEC), not closed, so
            // std's pipe that reports a failed exec still works.
            unsafe {
                c.pre_exec(|| {
                    libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 4u32);
                    Ok(())
                })
            };
            let mut fds = child.into_iter();
            for (slot, fd) in fds.by_ref() {
                let s = std::process::Stdio::from(fd);
                match slot {
                    0 => c.stdin(s),
                    1 => c.stdout(s),
                    _ => c.stderr(s),
                };
            }
            match c.spawn() {
                Ok(ch) => {
                    let pid = ch.id() as i32;
                    drop(c);
                    // Reaped below through a pidfd, not by `Child`.
                    std::mem::forget(ch);
                    pid
                }
                Err(e) => {
                    let _ = reply.send(Err(format!("cannot start {}: {e}", argv[0])));
                    return;
                }
            }
        }
        How::Restore {
            manifest,
            pages,
            stopped: st,
            owner,
        } => {
            stopped = st;
            // Every relayed fd, a second one on a pipe too, gets the new
            // pipe of its original.
            let inherit = manifest
                .fds
                .iter()
                .filter(|f| f.dup_of.is_none())
                .filter_map(|f| Some((f.fd, *ends.get(&f.relayed.as_ref()?.ino)?)))
                .collect();
            let opts = RestoreOptions {
                inherit,
                stopped: st,
                creds: owner,
            };
            let r = match pages {
                Pages::File(f) => {
                    halfproc_migrate::pages_file::restore_file_checked(&manifest, f, &opts)
                }
                Pages::Memory(m) => {
                    let r = halfproc_migrate::restore_from_memory(&manifest, &m, &opts);
                    // Before the copy is continued: see `Pages::Memory`.
                    drop(m);
                    r
                }
            };
            drop(child);
            match r {
                Ok(r) => r.pid,
                Err(e) => {
                    let _ = reply.send(Err(e.to_string()));
                    return;
                }
            }
        }
        How::RestoreTree(t) => {
            stopped = true;
            let TreeImages {
                tree,
                manifests,
                pages,
                owner,
            } = *t;
            // Each image's relayed fds get the new pipe of their original.
            let inherit: Vec<Vec<(i32, RawFd)>> = manifests
                .iter()
                .map(|m| {
                    m.fds
                        .iter()
                        .filter(|f| f.dup_of.is_none())
                        .filter_map(|f| Some((f.fd, *ends.get(&f.relayed.as_ref()?.ino)?)))
                        .collect()
                })
                .collect();
            let (files, memory) = match pages {
                TreeContents::Files(f) => (Some(f), Vec::new()),
                TreeContents::Memory(m) => (None, m),
            };
            let contents = match files {
                Some(f) => halfproc_migrate::TreePages::Files(f),
                None => {
                    halfproc_migrate::TreePages::Memory(memory.iter().map(|p| &p[..]).collect())
                }
            };
            let r = halfproc_migrate::restore_tree_held(
                &tree,
                &manifests,
                contents,
                &inherit,
                owner.as_ref(),
            );
            // Before the tree runs: see `Pages::Memory`.
            drop(memory);
            drop(child);
            match r {
                Ok(h) => {
                    let root = h.root();
                    held = Some(h);
                    root
                }
                Err(e) => {
                    let _ = reply.send(Err(e.to_string()));
                    return;
                }
            }
        }
    };
    let _ = reply.send(Ok(pid));
    if stopped {
        let cont = go.recv().unwrap_or(false);
        match held {
            // Dropped, a held tree is killed.
            Some(h) if cont => {
                if let Err(e) = h.release() {
                    tracing::warn!("tree of pid {pid}: {e}");
                }
            }
            Some(h) => drop(h),
            // SAFETY: signalling our own (stopped) child.
            None => unsafe {
                libc::kill(pid, if cont { libc::SIGCONT } else { libc::SIGKILL });
            },
        }
    }
    let _ = exit.send(reap(pid));
}

/// Waits for `pid` (our child) to exit; `None` if someone else reaped it.
///
/// Only an exit is ever consumed: `waitid` is called once the pidfd is
/// readable (the process exited), first with `WNOWAIT`. A ptrace stop of a
/// migration in progress (its tracer is another thread of this process, so
/// the kernel reports the stop to us too, whatever the options) is never
/// taken from the tracer.
fn reap(pid: i32) -> Option<Exit> {
    // SAFETY: pidfd_open on our own child; the fd is owned below.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    let _own = (fd >= 0).then(|| {
        // SAFETY: a fresh fd returned by pidfd_open.
        unsafe { OwnedFd::from_raw_fd(fd) }
    });
    let wait = |flags: i32| {
        // SAFETY: zeroed siginfo is a valid out buffer for waitid.
        let mut si: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on our own child with a valid siginfo pointer.
        let r = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut si, flags) };
        // SAFETY: waitid filled `si` for a child event (or left it zeroed).
        let (spid, status) = unsafe { (si.si_pid(), si.si_status()) };
        (r, spid, si.si_code, status)
    };
    loop {
        if fd >= 0 {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut p, 1, 1000) };
            if p.revents & libc::POLLIN == 0 {
                continue;
            }
        } else {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let (r, spid, code, status) = wait(libc::WEXITED | libc::WNOHANG | libc::WNOWAIT);
        if r != 0 {
            return None; // ECHILD: reaped by a migration's kill
        }
        let exited = matches!(code, libc::CLD_EXITED | libc::CLD_KILLED | libc::CLD_DUMPED);
        if spid == 0 || !exited {
            if fd >= 0 {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            continue;
        }
        let _ = wait(libc::WEXITED | libc::WNOHANG);
        return Some(if code == libc::CLD_EXITED {
            Exit::Code(status)
        } else {
            Exit::Signal(status)
        });
    }
}

/// Registers a created process as incarnation `gen` and starts its relays
/// and its end-of-life task; `on_end` runs when it is gone.
pub fn adopt(
    s: Started,
    program: String,
    origin: Origin,
    gen: u64,
    link: Link,
    stdin_offset: u64,
    on_end: impl FnOnce(i32) + Send + 'static,
) -> Result<Arc<Program>, String> {
    let (stdin, outputs) = s.pipes_daemon;
    let stdin = match stdin {
        Some(fd) => Some(pipe::Sender::from_owned_fd(fd).map_err(|e| format!("stdin pipe: {e}"))?),
        None => None,
    };
    let mut outs = Vec::new();
    for (stream, fd) in outputs {
        let rx = pipe::Receiver::from_owned_fd(fd).map_err(|e| format!("output pipe: {e}"))?;
        outs.push(tokio::spawn(output_loop(link.clone(), gen, stream, rx)));
    }
    let p = Arc::new(Program {
        pid: s.pid,
        program,
        origin,
        gen,
        link,
        inos: s.inos,
        state: Mutex::new(PState::Running),
        stdin: Mutex::new(StdinRelay {
            pipe: Arc::new(tokio::sync::Mutex::new(stdin)),
            written: Arc::new(AtomicU64::new(stdin_offset)),
            task: None,
        }),
        outputs: Mutex::new(outs),
    });
    p.resume_stdin();
    let prog = p.clone();
    let exit = s.exit;
    tokio::spawn(async move {
        let status = exit.await.ok().flatten();
        let outs = std::mem::take(&mut *lock(&prog.outputs));
        for o in outs {
            let _ = o.await;
        }
        prog.pause_stdin().await;
        let end = match prog.state() {
            PState::Gone(end) => end,
            _ => End::Exited(status.unwrap_or(Exit::Lost("reaped by someone else".into()))),
        };
        prog.leave(end.clone());
        prog.link.end(prog.gen, end);
        on_end(prog.pid);
    });
    Ok(p)
}
