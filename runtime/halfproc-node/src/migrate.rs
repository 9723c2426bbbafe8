//! Migration between node daemons, source and destination side, and
//! checkpoint/restore of a program through its daemon.
//!
//! Source: refuse (reads /proc only) -> connect to the destination -> pause
//! the stdin relay -> freeze and dump into memory on a thread of its own
//! (ptrace requests must come from the thread that attached) -> send
//! `MigrateIn` + `Pages`* + `PagesEnd` -> the destination restores the
//! process *stopped* and answers `Restored` -> `Commit` -> the destination
//! continues it and answers `Resumed` -> the original is killed. Any error
//! or timeout before `Resumed` resumes the original where it was, relays
//! included, and the error names what happened.

use crate::daemon::Node;
use crate::program::{self, How, Link};
use crate::proto::{Conn, End, Exit, Msg, Origin, CHUNK};
use halfproc_migrate::image;
use std::os::fd::FromRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tokio::time::timeout;

/// How long the source waits for each answer of the destination.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

type Progress = mpsc::UnboundedSender<Msg>;

fn say(p: &Progress, s: String) {
    let _ = p.send(Msg::Progress(s));
}

/// Local program `pid`, taken for `what` (one migration or checkpoint at a time).
fn take(node: &Node, pid: i32, what: &'static str) -> Result<Arc<program::Program>, Msg> {
    let prog = node.program(pid).ok_or_else(|| {
        Msg::Error(format!(
            "pid {pid} is not a program of this node (see halfproc ps)"
        ))
    })?;
    prog.acquire(what).map_err(Msg::Error)?;
    Ok(prog)
}

/// Migrates local `pid` to the node at `to`; the reply for the client.
pub async fn migrate_out(node: Arc<Node>, pid: i32, to: String, progress: Progress) -> Msg {
    let prog = match take(&node, pid, "migrated") {
        Ok(p) => p,
        Err(m) => return m,
    };
    let t0 = Instant::now();
    let r = migrate_acquired(&node, &prog, &to, &progress, t0).await;
    if r.is_err() {
        prog.release();
        prog.resume_stdin();
    }
    r.unwrap_or_else(Msg::Error)
}

async fn migrate_acquired(
    node: &Arc<Node>,
    prog: &Arc<program::Program>,
    to: &str,
    progress: &Progress,
    t0: Instant,
) -> Result<Msg, String> {
    let pid = prog.pid;
    let inos = prog.inos.clone();
    let inos2 = inos.clone();
    tokio::task::spawn_blocking(move || halfproc_migrate::refuse::check_relayed(pid, &inos2))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("pid {pid} cannot be migrated: {e}; it keeps running here"))?;
    let mut conn = timeout(ANSWER_TIMEOUT, Conn::connect(to, &node.ident))
        .await
        .map_err(|_| format!("connect to {to}: timed out; pid {pid} keeps running here"))?
        .map_err(|e| format!("destination {to}: {e}; pid {pid} keeps running here"))?;
    let stdin_offset = prog.pause_stdin().await;

    // Freeze and dump on a thread that stays the tracer until the decision.
    let (dump_tx, dump_rx) = oneshot::channel::<Result<(Vec<u8>, Vec<u8>), String>>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<bool>();
    let (fin_tx, fin_rx) = oneshot::channel::<Duration>();
    std::thread::Builder::new()
        .name("halfproc-migrate".into())
        .spawn(
            move || match halfproc_migrate::freeze_and_dump(pid, &inos) {
                Err(e) => {
                    let _ = dump_tx.send(Err(e.to_string()));
                }
                Ok(mut d) => {
                    let pages = std::mem::take(&mut d.pages);
                    let m = image::manifest_bytes(&d.manifest).map_err(|e| e.to_string());
                    let _ = dump_tx.send(m.map(|m| (m, pages)));
                    let kill = go_rx.recv().unwrap_or(false);
                    let frozen = if kill { d.kill() } else { d.resume() };
                    let _ = fin_tx.send(frozen);
                }
            },
        )
        .map_err(|e| format!("thread: {e}"))?;
    let (manifest, pages) = dump_rx
        .await
        .map_err(|_| "dump thread died".to_string())?
        .map_err(|e| format!("pid {pid}: {e}; it keeps running here"))?;
    let bytes = pages.len() as u64;
    say(
        progress,
        format!(
            "frozen and dumped pid {pid} (read with {}): {:.1} MiB of pages; streaming to {to}",
            halfproc_migrate::reader_kind(),
            bytes as f64 / 1048576.0
        ),
    );
    let outcome = stream_and_commit(&mut conn, prog, stdin_offset, manifest, pages, progress).await;
    let killed = outcome.is_ok();
    if killed {
        // The lifecycle task of the program reports End::Migrated to the
        // origin once the pipes are drained.
        prog.leave(End::Migrated);
    }
    let _ = go_tx.send(killed);
    let frozen = fin_rx.await.unwrap_or_default();
    if let (Ok(new_pid), true) = (&outcome, prog.origin.node == node.id) {
        // The origin is here: `ps` shows the new place at once (the
        // destination's Attach says it too, on another connection).
        if let Some(s) = node.session(prog.origin.session) {
            s.set_place(prog.gen + 1, format!("{to} pid {new_pid}"));
        }
    }
    match outcome {
        Ok(new_pid) => Ok(Msg::Migrated {
            pid: new_pid,
            node: to.to_string(),
            bytes,
            frozen_us: frozen.as_micros() as u64,
            total_us: t0.elapsed().as_micros() as u64,
        }),
        Err(e) => Err(format!(
            "migration of pid {pid} to {to} failed: {e}; pid {pid} was resumed here (stopped {} ms)",
            frozen.as_millis()
        )),
    }
}

async fn answer(conn: &mut Conn, what: &str) -> Result<Msg, String> {
    match timeout(ANSWER_TIMEOUT, conn.recv()).await {
        Err(_) => Err(format!(
            "destination gave no answer for {}s while {what}",
            ANSWER_TIMEOUT.as_secs()
        )),
        Ok(Err(e)) => Err(format!("connection to destination lost while {what}: {e}")),
        Ok(Ok(Msg::Error(e))) => Err(format!("destination: {e}")),
        Ok(Ok(m)) => Ok(m),
    }
}

async fn stream_and_commit(
    conn: &mut Conn,
    prog: &Arc<program::Program>,
    stdin_offset: u64,
    manifest: Vec<u8>,
    pages: Vec<u8>,
    progress: &Progress,
) -> Result<i32, String> {
    let lost = |e: std::io::Error| format!("connection to destination lost while streaming: {e}");
    conn.send(&Msg::MigrateIn {
        origin: prog.origin.clone(),
        gen: prog.gen + 1,
        stdin_offset,
        program: prog.program.clone(),
        manifest,
    })
    .await
    .map_err(lost)?;
    for c in pages.chunks(CHUNK) {
        conn.send(&Msg::Pages(c.to_vec())).await.map_err(lost)?;
    }
    conn.send(&Msg::PagesEnd).await.map_err(lost)?;
    let new_pid = match answer(conn, "restoring").await? {
        Msg::Restored { pid } => pid,
        m => return Err(format!("unexpected answer {m:?}")),
    };
    say(
        progress,
        format!("restored there as pid {new_pid} (stopped); committing"),
    );
    conn.send(&Msg::Commit)
        .await
        .map_err(|e| format!("connection lost before commit: {e}"))?;
    match answer(conn, "committing").await? {
        Msg::Resumed => Ok(new_pid),
        m => Err(format!("unexpected answer {m:?}")),
    }
}

/// Destination side: receives the image, restores it stopped, waits for
/// `Commit`. A dropped connection or any error kills the copy.
pub async fn migrate_in(node: Arc<Node>, mut conn: Conn, first: Msg) {
    let Msg::MigrateIn {
        origin,
        gen,
        stdin_offset,
        program,
        manifest,
    } = first
    else {
        return;
    };
    let r = receive_and_restore(
        &node,
        &mut conn,
        origin,
        gen,
        stdin_offset,
        program,
        manifest,
    )
    .await;
    if let Err(e) = r {
        let _ = conn.send(&Msg::Error(e)).await;
    }
}

async fn receive_and_restore(
    node: &Arc<Node>,
    conn: &mut Conn,
    origin: Origin,
    gen: u64,
    stdin_offset: u64,
    program: String,
    manifest: Vec<u8>,
) -> Result<(), String> {
    let m = image::parse_manifest(&manifest).map_err(|e| e.to_string())?;
    let mut pages = Vec::with_capacity(m.pages_len as usize);
    loop {
        match conn
            .recv()
            .await
            .map_err(|e| format!("receiving pages: {e}"))?
        {
            Msg::Pages(c) => pages.extend_from_slice(&c),
            Msg::PagesEnd => break,
            other => return Err(format!("expected pages, got {other:?}")),
        }
    }
    image::verify_pages(&m, &pages).map_err(|e| e.to_string())?;
    let file = memfd(&pages)?;
    drop(pages);
    let started = program::create(How::Restore {
        manifest: Box::new(m),
        pages: file,
        stopped: true,
    })
    .await?;
    let pid = started.pid;
    let go = started.go.clone();
    let decide = |yes: bool| {
        if let Some(g) = &go {
            let _ = g.send(yes);
        }
    };
    conn.send(&Msg::Restored { pid }).await.map_err(|e| {
        decide(false);
        e.to_string()
    })?;
    match conn.recv().await {
        Ok(Msg::Commit) => {}
        other => {
            decide(false);
            return Err(format!("no commit ({other:?}); copy pid {pid} killed"));
        }
    }
    let link = if origin.node == node.id {
        match node.session(origin.session) {
            Some(s) => Link::Local(s),
            None => {
                decide(false);
                return Err(format!("session {} is gone from this node", origin.session));
            }
        }
    } else {
        match Link::remote(&origin, gen, &node.addr, &node.ident, pid).await {
            Ok(l) => l,
            Err(e) => {
                decide(false);
                return Err(e);
            }
        }
    };
    if let Link::Local(s) = &link {
        s.set_place(gen, "here".into());
    }
    let n2 = node.clone();
    let p = program::adopt(
        started,
        program,
        origin,
        gen,
        link,
        stdin_offset,
        move |pid| n2.forget(pid),
    )
    .inspect_err(|_| decide(false))?;
    node.insert(p);
    decide(true);
    wait_continued(pid).await;
    let _ = conn.send(&Msg::Resumed).await;
    Ok(())
}

/// Waits (at most 2 s) until the copy runs: no longer stopped, and the
/// SIGCONT that woke it delivered (a migration right after would otherwise
/// see it pending).
async fn wait_continued(pid: i32) {
    const SIGCONT_BIT: u64 = 1 << (libc::SIGCONT - 1);
    for _ in 0..2000 {
        let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |k: &str| {
            st.lines()
                .find(|l| l.starts_with(k))
                .and_then(|l| l.split_whitespace().nth(1))
                .unwrap_or("")
                .to_string()
        };
        let mask = |k: &str| u64::from_str_radix(&field(k), 16).unwrap_or(0);
        let stopped = field("State:").starts_with('T');
        if st.is_empty() || (!stopped && (mask("SigPnd:") | mask("ShdPnd:")) & SIGCONT_BIT == 0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn memfd(data: &[u8]) -> Result<std::fs::File, String> {
    // SAFETY: memfd_create with a static NUL-terminated name.
    let fd = unsafe { libc::memfd_create(c"halfproc-pages".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh fd we own.
    let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
    std::io::Write::write_all(&mut f, data).map_err(|e| format!("write memfd: {e}"))?;
    Ok(f)
}

/// Checkpoints local `pid` into `dir`; with `kill` the program ends there.
pub async fn checkpoint(node: Arc<Node>, pid: i32, dir: String, kill: bool) -> Msg {
    let prog = match take(&node, pid, "checkpointed") {
        Ok(p) => p,
        Err(m) => return m,
    };
    let _ = prog.pause_stdin().await;
    if kill {
        prog.leave(End::Exited(Exit::Checkpointed(dir.clone())));
    }
    let inos = prog.inos.clone();
    let d = dir.clone();
    let leave = if kill {
        halfproc_migrate::Leave::Kill
    } else {
        halfproc_migrate::Leave::Continue
    };
    let r = tokio::task::spawn_blocking(move || {
        halfproc_migrate::checkpoint_relayed(pid, std::path::Path::new(&d), leave, &inos)
    })
    .await;
    let r = match r {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match r {
        Ok(st) => {
            if !kill {
                prog.release();
                prog.resume_stdin();
            }
            Msg::Done(format!(
                "checkpointed pid {pid} into {dir}: {:.1} MiB of pages, {} VMAs, stopped {} ms{}",
                st.pages_bytes as f64 / 1048576.0,
                st.vmas,
                st.frozen.as_millis(),
                if kill {
                    "; the program was stopped"
                } else {
                    "; it keeps running"
                }
            ))
        }
        Err(e) => {
            prog.set_running();
            prog.resume_stdin();
            Msg::Error(format!(
                "checkpoint of pid {pid} failed: {e}; it keeps running"
            ))
        }
    }
}
