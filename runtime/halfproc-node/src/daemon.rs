//! The node daemon: a TCP listener, one task per connection (as in tokio's
//! mini-redis), the table of local programs and of the run sessions that
//! started here. SIGINT/SIGTERM stop accepting connections, then wait for
//! every migration in flight (out or in) to commit or abort before exiting:
//! a program being migrated is never left behind half-moved.

use crate::migrate;
use crate::program::{self, How, Link, PState, Program};
use crate::proto::{self, Conn, Msg, Origin, ProcInfo};
use crate::session::{Session, StdinChunk};
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::task::TaskTracker;

/// This machine's daemon state.
pub struct Node {
    /// Random id of this daemon run (tells origins apart).
    pub id: u64,
    /// The id and the shared secret, for handshakes.
    pub ident: crate::proto::Identity,
    /// Address other nodes reach this one at.
    pub addr: String,
    programs: Mutex<HashMap<i32, Arc<Program>>>,
    sessions: Mutex<HashMap<u64, Arc<Session>>>,
    next_session: AtomicU64,
    /// Migrations in flight, waited for at shutdown.
    migrations: TaskTracker,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn random_id() -> u64 {
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_err()
    {
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as u64;
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        return t ^ (pid << 32);
    }
    u64::from_le_bytes(b)
}

impl Node {
    pub fn new(addr: String, secret: Option<Vec<u8>>) -> Arc<Node> {
        let id = random_id();
        Arc::new(Node {
            id,
            ident: crate::proto::Identity { node: id, secret },
            addr,
            programs: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            next_session: AtomicU64::new(1),
            migrations: TaskTracker::new(),
        })
    }

    pub fn program(&self, pid: i32) -> Option<Arc<Program>> {
        lock(&self.programs).get(&pid).cloned()
    }

    pub fn insert(&self, p: Arc<Program>) {
        lock(&self.programs).insert(p.pid, p);
    }

    pub fn forget(&self, pid: i32) {
        lock(&self.programs).remove(&pid);
    }

    pub fn session(&self, id: u64) -> Option<Arc<Session>> {
        lock(&self.sessions).get(&id).cloned()
    }

    /// `halfproc ps`: local programs, then programs started here that run
    /// elsewhere now.
    pub fn ps(&self) -> Vec<ProcInfo> {
        let mut out: Vec<ProcInfo> = lock(&self.programs)
            .values()
            .map(|p| {
                let status =
                    std::fs::read_to_string(format!("/proc/{}/status", p.pid)).unwrap_or_default();
                let field = |k: &str| {
                    status
                        .lines()
                        .find(|l| l.starts_with(k))
                        .and_then(|l| l.split_whitespace().nth(1))
                        .unwrap_or("?")
                        .to_string()
                };
                let state = match p.state() {
                    PState::Running => field("State:"),
                    PState::Busy(w) => format!("being {w}"),
                    PState::Gone(_) => "leaving".into(),
                };
                ProcInfo {
                    pid: p.pid,
                    program: p.program.clone(),
                    state,
                    rss_kib: field("VmRSS:").parse().unwrap_or(0),
                    place: "here".into(),
                }
            })
            .collect();
        out.sort_by_key(|p| p.pid);
        for s in lock(&self.sessions).values() {
            let (place, done) = s.place();
            if !done && place != "here" {
                out.push(ProcInfo {
                    pid: 0,
                    program: s.program.clone(),
                    state: "remote".into(),
                    rss_kib: 0,
                    place,
                });
            }
        }
        out
    }
}

/// Serves on `listener` until `shutdown` resolves, then waits for the
/// migrations in flight.
pub async fn serve(
    listener: TcpListener,
    node: Arc<Node>,
    shutdown: impl std::future::Future<Output = ()>,
) -> io::Result<()> {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            r = listener.accept() => {
                let (s, _) = r?;
                let n = node.clone();
                tokio::spawn(async move {
                    if let Err(e) = handle(n, s).await {
                        if e.kind() != io::ErrorKind::UnexpectedEof {
                            eprintln!("halfproc node: connection: {e}");
                        }
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    node.migrations.close();
    if !node.migrations.is_empty() {
        eprintln!(
            "halfproc node: shutting down after {} migration(s) in flight",
            node.migrations.len()
        );
    }
    node.migrations.wait().await;
    let left = lock(&node.programs).len();
    if left > 0 {
        eprintln!("halfproc node: {left} program(s) keep running without their stdio relay");
    }
    Ok(())
}

/// Binds `listen` and runs the daemon until SIGINT or SIGTERM. `ready` is
/// called with the bound address (port 0 picks a free one). `secret_file`
/// (else `$HALFPROC_NODE_SECRET_FILE`) holds the nodes' shared secret.
pub fn run_node(
    listen: &str,
    advertise: Option<&str>,
    secret_file: Option<&std::path::Path>,
    ready: impl FnOnce(&str, u64),
) -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let secret = crate::proto::Identity::load(0, secret_file)?.secret;
    rt.block_on(async {
        let listener = TcpListener::bind(listen).await?;
        let bound = listener.local_addr()?.to_string();
        let node = Node::new(
            advertise
                .map(str::to_string)
                .unwrap_or_else(|| bound.clone()),
            secret,
        );
        ready(&bound, node.id);
        let shutdown = async {
            use tokio::signal::unix::{signal, SignalKind};
            let (mut int, mut term) = match (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) {
                (Ok(i), Ok(t)) => (i, t),
                _ => return std::future::pending().await,
            };
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        };
        serve(listener, node, shutdown).await
    })
}

async fn handle(node: Arc<Node>, stream: TcpStream) -> io::Result<()> {
    let (mut conn, _) = Conn::handshake(stream, &node.ident).await?;
    let first = conn.recv().await?;
    match first {
        Msg::Run { .. } | Msg::RestoreDir { .. } => run_session(node, conn, first).await,
        Msg::Ps => conn.send(&Msg::PsList(node.ps())).await,
        Msg::Migrate { pid, to } => {
            // Tracked until the answer is written: shutdown waits for it.
            let n = node.clone();
            let answer = async move {
                let (ptx, mut prx) = tokio::sync::mpsc::unbounded_channel();
                let fut = migrate::migrate_out(n, pid, to, ptx);
                tokio::pin!(fut);
                let reply = loop {
                    tokio::select! {
                        r = &mut fut => break r,
                        Some(m) = prx.recv() => { let _ = conn.send(&m).await; }
                    }
                };
                while let Ok(m) = prx.try_recv() {
                    let _ = conn.send(&m).await;
                }
                conn.send(&reply).await
            };
            node.migrations.track_future(answer).await
        }
        Msg::Checkpoint { pid, dir, kill } => {
            let reply = migrate::checkpoint(node.clone(), pid, dir, kill).await;
            conn.send(&reply).await
        }
        Msg::MigrateIn { .. } => {
            let fut = migrate::migrate_in(node.clone(), conn, first);
            node.migrations.track_future(fut).await;
            Ok(())
        }
        Msg::Attach { .. } => attach(node, conn, first).await,
        other => {
            conn.send(&Msg::Error(format!("unexpected request {other:?}")))
                .await
        }
    }
}

/// A `run` (or `restore`) client: starts the program, relays its stdin,
/// gets its output and exit through the session.
async fn run_session(node: Arc<Node>, conn: Conn, first: Msg) -> io::Result<()> {
    let (mut r, w) = conn.split();
    let tx = proto::writer_task(w);
    let (how, name) = match first {
        Msg::Run { argv, cwd, env } if !argv.is_empty() => {
            let name = argv[0].clone();
            (How::Spawn { argv, cwd, env }, name)
        }
        Msg::RestoreDir { dir } => {
            let dir = std::path::Path::new(&dir);
            let m = halfproc_migrate::image::read(dir);
            let pages = std::fs::File::open(dir.join(halfproc_migrate::image::PAGES));
            match (m, pages) {
                (Ok(m), Ok(pages)) => {
                    let name = m.comm.clone();
                    (
                        How::Restore {
                            manifest: Box::new(m),
                            pages,
                            stopped: false,
                        },
                        name,
                    )
                }
                (Err(e), _) => {
                    let _ = tx.send(Msg::Error(format!("{}: {e}", dir.display())));
                    return Ok(());
                }
                (_, Err(e)) => {
                    let _ = tx.send(Msg::Error(format!("{}: {e}", dir.display())));
                    return Ok(());
                }
            }
        }
        _ => {
            let _ = tx.send(Msg::Error("run: no program given".into()));
            return Ok(());
        }
    };
    let id = node.next_session.fetch_add(1, Ordering::Relaxed);
    let session = Arc::new(Session::new(id, name.clone(), tx.clone()));
    lock(&node.sessions).insert(id, session.clone());
    let origin = Origin {
        addr: node.addr.clone(),
        node: node.id,
        session: id,
    };
    let started = match program::create(how).await {
        Ok(s) => s,
        Err(e) => {
            lock(&node.sessions).remove(&id);
            let _ = tx.send(Msg::Error(e));
            return Ok(());
        }
    };
    let pid = started.pid;
    // Before the relays start: the client must see Started before any Output.
    let _ = tx.send(Msg::Started { pid });
    let n2 = node.clone();
    match program::adopt(
        started,
        name,
        origin,
        0,
        Link::Local(session.clone()),
        0,
        move |pid| n2.forget(pid),
    ) {
        Ok(p) => node.insert(p),
        Err(e) => {
            let _ = tx.send(Msg::Error(e));
        }
    }
    loop {
        session.stdin_room().await;
        match r.recv().await {
            Ok(Some(Msg::Stdin(d))) => session.push_stdin(&d),
            Ok(Some(Msg::StdinEof)) => session.stdin_eof(),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    // The client left (after the exit, or early: then the program keeps
    // running and its output is dropped).
    session.stdin_eof();
    if session.place().1 {
        lock(&node.sessions).remove(&id);
    }
    Ok(())
}

/// An incarnation running on another node reports to this, its origin.
async fn attach(node: Arc<Node>, conn: Conn, first: Msg) -> io::Result<()> {
    let Msg::Attach {
        session,
        gen,
        node: place,
        pid,
    } = first
    else {
        return Ok(());
    };
    let Some(s) = node.session(session) else {
        let mut conn = conn;
        return conn
            .send(&Msg::Error(format!("no session {session} on this node")))
            .await;
    };
    s.set_place(gen, format!("{place} pid {pid}"));
    let (mut r, w) = conn.split();
    let tx = proto::writer_task(w);
    let mut ended = false;
    let mut stdin_task: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        match r.recv().await {
            Ok(Some(Msg::Output { stream, data })) => s.output(gen, stream, data),
            Ok(Some(Msg::End(e))) => {
                s.end(gen, e);
                ended = true;
            }
            Ok(Some(Msg::StdinReq { offset })) => {
                if let Some(t) = stdin_task.take() {
                    t.abort();
                }
                let (s2, tx2) = (s.clone(), tx.clone());
                stdin_task = Some(tokio::spawn(async move {
                    let (data, eof, error) = match s2.stdin(offset).await {
                        Ok(StdinChunk::Data(d)) => (d, false, None),
                        Ok(StdinChunk::Eof) => (Vec::new(), true, None),
                        Err(e) => (Vec::new(), false, Some(e)),
                    };
                    let m = Msg::StdinData {
                        offset,
                        data,
                        eof,
                        error,
                    };
                    let _ = tx2.send(m);
                }));
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    if let Some(t) = stdin_task {
        t.abort();
    }
    if !ended {
        s.lost(gen, format!("connection to node {place} (pid {pid}) lost"));
    }
    Ok(())
}
