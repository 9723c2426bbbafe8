//! The node daemon: a TCP listener, one task per connection (as in tokio's
//! mini-redis), the table of local programs and of the run sessions that
//! started here. SIGINT/SIGTERM stop accepting connections, then wait for
//! every migration in flight (out or in) to commit or abort before exiting:
//! a program being migrated is never left behind half-moved.

use crate::access::{self, Admit, Peer};
use crate::migrate;
use crate::program::{self, How, Link, PState, Program};
use crate::proto::{self, Conn, Msg, Origin, Outcome, ProcInfo};
use crate::restore_dir::{from_dir, FromDir, ImageErr};
use crate::session::{Session, StdinChunk};
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, UnixListener};
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
    /// The unix control socket serving local clients (owner-checked).
    pub control: Option<std::path::PathBuf>,
    /// The daemon's effective uid.
    pub uid: u32,
    /// Outcomes of the migrations received (newest last), for sources that
    /// lost the connection after `Commit`.
    outcomes: Mutex<(HashMap<u64, Outcome>, std::collections::VecDeque<u64>)>,
    /// Limits, and the tickets of accepted offers.
    pub admission: Arc<crate::admission::Admission>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn random_id() -> u64 {
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
    pub fn new(
        addr: String,
        secret: Option<Vec<u8>>,
        control: Option<std::path::PathBuf>,
        limits: crate::admission::Limits,
    ) -> Arc<Node> {
        let id = random_id();
        Arc::new(Node {
            id,
            ident: crate::proto::Identity { node: id, secret },
            addr,
            programs: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            next_session: AtomicU64::new(1),
            migrations: TaskTracker::new(),
            control,
            uid: crate::rundir::euid(),
            outcomes: Mutex::new(Default::default()),
            admission: crate::admission::Admission::new(limits),
        })
    }

    /// Programs running here.
    pub fn program_count(&self) -> usize {
        lock(&self.programs).len()
    }

    /// Whether shutdown has begun (no new migrations are taken).
    pub fn shutting_down(&self) -> bool {
        self.migrations.is_closed()
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

    /// Records what became of incoming migration `id`.
    pub fn set_outcome(&self, id: u64, o: Outcome) {
        let mut g = lock(&self.outcomes);
        let (map, order) = &mut *g;
        if map.insert(id, o).is_none() {
            order.push_back(id);
            while order.len() > proto::OUTCOMES_KEPT {
                if let Some(old) = order.pop_front() {
                    map.remove(&old);
                }
            }
        }
    }

    /// What became of incoming migration `id`.
    pub fn outcome(&self, id: u64) -> Outcome {
        lock(&self.outcomes)
            .0
            .get(&id)
            .cloned()
            .unwrap_or(Outcome::Unknown)
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
                    PState::InDoubt { to, .. } => format!("in doubt (to {to})"),
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

fn spawn_handler(node: Arc<Node>, s: Box<dyn proto::Io>, peer: Peer) {
    tokio::spawn(async move {
        if let Err(e) = handle(node, s, peer).await {
            if e.kind() != io::ErrorKind::UnexpectedEof {
                tracing::warn!("connection: {e}");
            }
        }
    });
}

/// Serves on `listener` (and the unix `control` socket, if any) until
/// `shutdown` resolves, then waits for the migrations in flight.
pub async fn serve(
    listener: TcpListener,
    control: Option<UnixListener>,
    node: Arc<Node>,
    shutdown: impl std::future::Future<Output = ()>,
) -> io::Result<()> {
    tokio::pin!(shutdown);
    let authenticated = node.ident.secret.is_some();
    loop {
        tokio::select! {
            r = listener.accept() => {
                let (s, _) = r?;
                let _ = s.set_nodelay(true);
                spawn_handler(node.clone(), Box::new(s), Peer::Network { authenticated });
            }
            r = async { control.as_ref().unwrap().accept().await }, if control.is_some() => {
                let (s, _) = r?;
                match access::local_peer(&s) {
                    Ok(c) => spawn_handler(node.clone(), Box::new(s), Peer::Local(c)),
                    Err(e) => tracing::warn!("control socket peer: {e}"),
                }
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    drop(control);
    node.migrations.close();
    if !node.migrations.is_empty() {
        tracing::info!(
            "shutting down after {} migration(s) in flight",
            node.migrations.len()
        );
    }
    node.migrations.wait().await;
    let left = lock(&node.programs).len();
    if left > 0 {
        tracing::warn!("{left} program(s) keep running without their stdio relay");
    }
    Ok(())
}

/// Binds `listen` and runs the daemon until SIGINT or SIGTERM. `ready` is
/// called with the bound address (port 0 picks a free one), the node id
/// and the control socket. `secret_file` (else `$HALFPROC_NODE_SECRET_FILE`)
/// holds the nodes' shared secret; without one only a loopback address is
/// accepted ([`access::check_listen`], error kind `PermissionDenied`).
/// `control` (else [`crate::rundir::daemon_socket`]) is the unix socket of
/// local clients; `limits` bound what migrations it takes in
/// ([`crate::admission`]).
pub fn run_node(
    listen: &str,
    advertise: Option<&str>,
    secret_file: Option<&std::path::Path>,
    control: Option<&std::path::Path>,
    limits: crate::admission::Limits,
    ready: impl FnOnce(&str, u64, &std::path::Path),
) -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let secret = crate::proto::Identity::load(0, secret_file)?.secret;
    rt.block_on(async {
        let listener = TcpListener::bind(listen).await?;
        let bound_at = listener.local_addr()?;
        access::check_listen(&bound_at, secret.is_some())
            .map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, e))?;
        let bound = bound_at.to_string();
        let control = match control {
            Some(p) => p.to_path_buf(),
            None => crate::rundir::daemon_socket(bound_at.port())?,
        };
        let control_listener = bind_control(&control)?;
        let node = Node::new(
            advertise
                .map(str::to_string)
                .unwrap_or_else(|| bound.clone()),
            secret,
            Some(control.clone()),
            limits,
        );
        ready(&bound, node.id, &control);
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
        let r = serve(listener, Some(control_listener), node, shutdown).await;
        let _ = std::fs::remove_file(&control);
        r
    })
}

/// Binds the control socket at `path` (a stale socket left by a dead
/// daemon is replaced; a live one is an error). Root's socket is open to
/// every user (the peer's credentials decide), anyone else's to its owner.
fn bind_control(path: &std::path::Path) -> io::Result<UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let ctx =
        |e: io::Error| io::Error::new(e.kind(), format!("control socket {}: {e}", path.display()));
    if let Ok(md) = std::fs::symlink_metadata(path) {
        if !md.file_type().is_socket() {
            return Err(ctx(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "exists and is not a socket",
            )));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(ctx(io::Error::new(
                io::ErrorKind::AddrInUse,
                "another daemon listens on it",
            )));
        }
        std::fs::remove_file(path).map_err(ctx)?;
    }
    let l = UnixListener::bind(path).map_err(ctx)?;
    let mode = if crate::rundir::euid() == 0 {
        0o666
    } else {
        0o600
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(ctx)?;
    Ok(l)
}

async fn handle(node: Arc<Node>, stream: Box<dyn proto::Io>, peer: Peer) -> io::Result<()> {
    // The control socket's peers are identified by the kernel, not by the secret.
    let ident = match peer {
        Peer::Local(_) => proto::Identity {
            node: node.id,
            secret: None,
        },
        Peer::Network { .. } => node.ident.clone(),
    };
    let (mut conn, _) = Conn::handshake(stream, &ident).await?;
    let first = conn.recv().await?;
    let admit = match access::admit(&peer, &first, node.uid, node.control.as_deref()) {
        Ok(a) => a,
        Err(why) => return refuse(conn, why).await,
    };
    let target = match &first {
        Msg::Migrate { pid, .. } => Some((*pid, "migrate")),
        Msg::Checkpoint { pid, .. } => Some((*pid, "checkpoint")),
        Msg::Resolve { pid, .. } => Some((*pid, "resolve")),
        _ => None,
    };
    // Checked again once the program is stopped (`Admitted::recheck`).
    let mut admitted = None;
    if let Some((pid, what)) = target {
        if node.program(pid).is_some() {
            match access::admit_target(&peer, pid, node.uid, what) {
                Ok(a) => admitted = Some(a),
                Err(why) => return conn.send(&Msg::Denied(why)).await,
            }
        }
    }
    let owner = match admit {
        Admit::AsDaemon => None,
        Admit::As(c) => Some(c),
    };
    // Image directories are written and read with the client's rights.
    let fs = access::file_creds(&peer, node.uid);
    match first {
        Msg::Run { .. } | Msg::RestoreDir { .. } => run_session(node, conn, first, owner, fs).await,
        Msg::Ps => conn.send(&Msg::PsList(node.ps())).await,
        Msg::Migrate { pid, to } => {
            // Tracked until the answer is written: shutdown waits for it.
            let n = node.clone();
            let answer = async move {
                let (ptx, mut prx) = tokio::sync::mpsc::unbounded_channel();
                let fut = migrate::migrate_out(n, pid, to, admitted, ptx);
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
        Msg::Checkpoint {
            pid,
            dir,
            kill,
            with_files,
        } => {
            let reply = crate::checkpoint::checkpoint(
                node.clone(),
                (pid, admitted),
                dir,
                kill,
                with_files,
                fs,
            )
            .await;
            conn.send(&reply).await
        }
        Msg::Resolve { pid, force } => {
            let reply = migrate::resolve(node.clone(), pid, force).await;
            conn.send(&reply).await
        }
        Msg::Outcome { id } => conn.send(&Msg::OutcomeIs(node.outcome(id))).await,
        Msg::Offer { .. } => {
            let fut = crate::migrate_in::offer(node.clone(), conn, first);
            node.migrations.track_future(fut).await;
            Ok(())
        }
        Msg::MigrateIn { .. } | Msg::TreeIn { .. } | Msg::PreCopy => {
            conn.send(&Msg::Error(format!(
                "a migration starts with Offer (protocol version {})",
                proto::VERSION
            )))
            .await
        }
        Msg::Attach { .. } => attach(node, conn, first).await,
        other => {
            conn.send(&Msg::Error(format!("unexpected request {other:?}")))
                .await
        }
    }
}

/// Answers the first request with [`Msg::Denied`], then reads and drops
/// what the peer still sends (a source streams pages before it reads an
/// answer) until it hangs up, for 2 s at most: closing with unread data
/// would reset the connection and lose the answer.
async fn refuse(mut conn: Conn, why: String) -> io::Result<()> {
    tracing::info!("refused: {why}");
    conn.send(&Msg::Denied(why)).await?;
    conn.drain(std::time::Duration::from_secs(2)).await;
    Ok(())
}

/// A `run` (or `restore`) client: starts the program, relays its stdin,
/// gets its output and exit through the session. `owner`: who the program
/// runs as; `fs`: whose rights read an image ([`access::file_creds`]).
async fn run_session(
    node: Arc<Node>,
    conn: Conn,
    first: Msg,
    owner: Option<halfproc_migrate::Creds>,
    fs: Option<halfproc_migrate::Creds>,
) -> io::Result<()> {
    let (mut r, w) = conn.split();
    let tx = proto::writer_task(w);
    let mut fills = Vec::new();
    let fs_shown = fs.clone();
    let (how, name) = match first {
        Msg::Run { argv, cwd, env } if !argv.is_empty() => {
            let name = argv[0].clone();
            (
                How::Spawn {
                    argv,
                    cwd,
                    env,
                    owner,
                },
                name,
            )
        }
        Msg::RestoreDir { dir } => {
            let path = match access::image_path(&dir) {
                Ok(p) => p.to_path_buf(),
                Err(e) => {
                    let _ = tx.send(Msg::Error(e));
                    return Ok(());
                }
            };
            let read = tokio::task::spawn_blocking(move || match &fs {
                Some(c) => c
                    .with_fs(|| from_dir(&path, owner))
                    .unwrap_or_else(|e| Err(ImageErr::Io(e))),
                None => from_dir(&path, owner),
            })
            .await
            .unwrap_or_else(|e| Err(ImageErr::Other(e.to_string())));
            match read {
                Ok(FromDir {
                    how,
                    name,
                    fills: f,
                }) => {
                    fills = f;
                    (how, name)
                }
                Err(ImageErr::Io(e)) => {
                    let _ = tx.send(match access::file_denied(&e, fs_shown.as_ref()) {
                        Some(why) => Msg::Denied(format!(
                            "permission denied: restore {dir}: {why}; nothing was restored"
                        )),
                        None => Msg::Error(format!("{dir}: {e}")),
                    });
                    return Ok(());
                }
                Err(ImageErr::Other(e)) => {
                    let _ = tx.send(Msg::Error(format!("{dir}: {e}")));
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
    if let Some(go) = &started.go {
        // Each copy (all of a tree's, held at its gate) gets its mapped
        // files' contents before it runs (file and /proc I/O: off the
        // runtime's threads).
        let what = if fills.len() > 1 {
            "tree of pid"
        } else {
            "pid"
        };
        let filled = tokio::task::spawn_blocking(move || {
            fills.iter().try_for_each(|(p, carried)| {
                let p = p.unwrap_or(pid);
                crate::files::fill_from_image(p, carried).map_err(|e| format!("pid {p}: {e}"))
            })
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
        let _ = go.send(filled.is_ok());
        if let Err(e) = filled {
            lock(&node.sessions).remove(&id);
            let _ = tx.send(Msg::Error(format!("copy {what} {pid} killed: {e}")));
            return Ok(());
        }
    }
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
                tracing::debug!(session, gen, offset, "stdin request from {place}");
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
                    tracing::debug!(offset, len = data.len(), eof, ?error, "stdin answer");
                    let m = Msg::StdinData {
                        offset,
                        data,
                        eof,
                        error,
                    };
                    if tx2.send(m).is_err() {
                        tracing::warn!(offset, "stdin answer: the connection's writer is gone");
                    }
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
