//! The wire protocol: length-delimited frames (4-byte big-endian length,
//! at most [`MAX_FRAME`]) each holding one bincode-encoded [`Msg`]. Every
//! connection starts with both sides sending [`Msg::Hello`]; a peer that
//! speaks another [`VERSION`] is refused with an error naming both. Then
//! each side proves it holds the shared secret (see [`Identity`]); with a
//! secret, every later frame carries an HMAC ([`crate::seal`]). Byte
//! payloads are serialized as bytes (`serde_bytes`), not as sequences.

use crate::seal::{Opener, Sealer};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
/// A program's owner, as `Offer` and `MigrateIn` carry it.
pub use halfproc_migrate::Creds;
use serde::{Deserialize, Serialize};
use std::io;
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use tokio::net::{TcpStream, UnixStream};
use tokio_util::codec::{Framed, FramedParts, FramedWrite, LengthDelimitedCodec};

/// A byte stream a [`Conn`] runs on: TCP (nodes, remote clients) or the
/// node's unix control socket (local clients, identified by SO_PEERCRED).
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}
type BoxIo = Box<dyn Io>;

/// Prefix of a node address that names a unix control socket.
pub const UNIX_PREFIX: &str = "unix:";

/// The socket path of a node address `unix:PATH` (or an absolute path).
pub fn unix_path(addr: &str) -> Option<&str> {
    addr.strip_prefix(UNIX_PREFIX)
        .or_else(|| addr.starts_with('/').then_some(addr))
}

/// Protocol version; both ends of a connection must speak the same.
/// 7 and 8: `Checkpoint.with_files` and `Offer.mapped`, made on two
/// branches that each called itself 7 (8 is the both of them).
pub const VERSION: u32 = 9;
/// Largest frame accepted (page data is sent in [`CHUNK`]-byte frames).
pub const MAX_FRAME: usize = 8 << 20;
/// Size of the page-data frames of a migration.
pub const CHUNK: usize = 1 << 20;

/// Which relayed stream: 0 stdin, 1 stdout, 2 stderr.
pub type Stream = u8;

/// How a program ended, as `run` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Exit {
    /// Exited with this status.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
    /// Checkpointed into this directory and stopped (`checkpoint --kill`).
    Checkpointed(String),
    /// The node it ran on went away.
    Lost(String),
}

impl Exit {
    /// The exit code of `halfproc run`: the program's, 128 + signal like a
    /// shell, 75 (EX_TEMPFAIL) when checkpointed and stopped, 70 when lost.
    pub fn code(&self) -> u8 {
        match self {
            Exit::Code(c) => (*c & 0xff) as u8,
            Exit::Signal(s) => (128 + *s).clamp(0, 255) as u8,
            Exit::Checkpointed(_) => 75,
            Exit::Lost(_) => 70,
        }
    }
}

/// What ended one incarnation of a program on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum End {
    /// The program ended.
    Exited(Exit),
    /// It continues on another node as the next incarnation.
    Migrated,
}

/// What a destination did with a migration (it keeps the record for
/// [`OUTCOMES_KEPT`] migrations).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// No record: never received, or the node restarted.
    Unknown,
    /// Still receiving, restoring or deciding.
    Pending,
    /// Committed: the copy runs as this pid.
    Committed { pid: i32 },
    /// Not committed: the copy was killed, for this reason.
    Aborted(String),
}

/// Migration outcomes a destination remembers.
pub const OUTCOMES_KEPT: usize = 4096;

/// The origin of a program: the node whose `run` client gets its output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// Address of the origin node daemon.
    pub addr: String,
    /// Its node id (random, per daemon start).
    pub node: u64,
    /// The run session on it.
    pub session: u64,
}

/// One line of `halfproc ps`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcInfo {
    pub pid: i32,
    pub program: String,
    /// `R`/`S`/... from /proc, or `migrating`, or `remote`.
    pub state: String,
    /// Resident set in KiB (0 when remote).
    pub rss_kib: u64,
    /// `here`, or `NODE pid N` for programs started here running elsewhere.
    pub place: String,
}

/// Every message of the protocol.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Msg {
    /// First frame in both directions: protocol version, node id (0 for a
    /// client) and a fresh random challenge for the peer.
    Hello {
        version: u32,
        node: u64,
        nonce: [u8; 16],
    },
    /// Second frame in both directions: HMAC-SHA256 of the peer's nonce
    /// under the shared secret (empty without a secret).
    Auth {
        #[serde(with = "serde_bytes")]
        mac: Vec<u8>,
    },

    // Client requests.
    /// Start a program (argv, working directory, environment).
    Run {
        argv: Vec<String>,
        cwd: String,
        env: Vec<(String, String)>,
    },
    /// Restore a checkpoint directory as a new run session.
    RestoreDir {
        dir: String,
    },
    /// List programs.
    Ps,
    /// Migrate a local program to the node at `to`.
    Migrate {
        pid: i32,
        to: String,
    },
    /// Checkpoint a local program into `dir` (on the node's filesystem);
    /// with `with_files` its mapped files' contents too (`files.img`).
    Checkpoint {
        pid: i32,
        dir: String,
        kill: bool,
        with_files: bool,
    },

    /// Settle a program left in doubt by a migration whose commit
    /// answer was lost: ask the destination again, or, with `force`,
    /// resume it here (`Some(true)`) or kill it here (`Some(false)`).
    Resolve {
        pid: i32,
        force: Option<bool>,
    },

    // A run session.
    Started {
        pid: i32,
    },
    Stdin(#[serde(with = "serde_bytes")] Vec<u8>),
    StdinEof,
    Output {
        stream: Stream,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    Exited(Exit),

    // Replies.
    PsList(Vec<ProcInfo>),
    Progress(String),
    Migrated {
        pid: i32,
        node: String,
        /// Bytes of page contents sent while frozen.
        bytes: u64,
        frozen_us: u64,
        total_us: u64,
        /// `pre-copy (MECHANISM): ...` or `stop-and-copy (WHY)`.
        mode: String,
    },
    Done(String),
    Error(String),
    /// A migration's outcome is unknown (the commit was sent, the answer
    /// lost, the destination unreachable): the original is kept stopped.
    InDoubt(String),
    /// The request was refused: the client's user may not act on that
    /// process (owner check on the control socket).
    Denied(String),

    // Node to node: migration (source -> destination).
    /// Source, first on its connection, before anything is stopped: may
    /// this program come? The destination checks what it can know without
    /// the image (see `crate::admission`) and answers `Accept`, `Denied`
    /// or `Error`.
    Offer {
        program: String,
        /// The program's owner (as `MigrateIn.owner` will say).
        owner: Box<halfproc_migrate::Creds>,
        origin: Origin,
        /// Estimated bytes of page contents.
        image_bytes: u64,
        /// What the restorer would map for the program (read from /proc):
        /// with `image_bytes`, the address space the restore needs.
        mapped: halfproc_migrate::restore_need::Mapped,
        /// Pre-copy rounds will come (`PreCopy`) before `MigrateIn`.
        precopy: bool,
        /// A process tree's pids (root first), which its restore needs
        /// free there; empty for one process (then `MigrateIn` follows).
        tree: Vec<i32>,
    },
    /// Destination: come; what the offer needs is reserved under `ticket`
    /// for `hold_ms` (until `PreCopy` or `MigrateIn` come on this
    /// connection) and while the connection lasts.
    Accept {
        ticket: u64,
        hold_ms: u64,
    },
    MigrateIn {
        /// Random id of this migration (see `Outcome`).
        id: u64,
        /// The ticket of the accepted `Offer`.
        ticket: u64,
        origin: Origin,
        /// Incarnation number the program gets there.
        gen: u64,
        /// Offset in the stdin stream of the next byte to write into the pipe.
        stdin_offset: u64,
        program: String,
        /// The program's owner; a destination running as root restores it
        /// with these ids.
        owner: Box<halfproc_migrate::Creds>,
        /// The image's manifest (JSON, see halfproc_migrate::image).
        #[serde(with = "serde_bytes")]
        manifest: Vec<u8>,
        /// After a pre-copy: for each page of the image, whether its
        /// content follows in `Pages` (else the pre-copied one stands).
        included: Option<Vec<bool>>,
    },
    /// A process tree's `MigrateIn` (a program with the workers it forked;
    /// no pre-copy, see `halfproc_migrate::tree`): the images of its
    /// processes, root first, each after its parent; then, for each in
    /// that order, `Pages`* and `PagesEnd`.
    TreeIn {
        id: u64,
        ticket: u64,
        origin: Origin,
        gen: u64,
        stdin_offset: u64,
        program: String,
        owner: Box<halfproc_migrate::Creds>,
        procs: Vec<halfproc_migrate::tree::TreeProc>,
        manifests: Vec<serde_bytes::ByteBuf>,
    },
    /// Source: pre-copy follows (`PrePages`*, then `MigrateIn`).
    PreCopy,
    /// Pages sent while the program runs, from `addr` on.
    PrePages {
        addr: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// A chunk of page contents; `PagesEnd` follows the last.
    Pages(#[serde(with = "serde_bytes")] Vec<u8>),
    PagesEnd,
    /// Destination, after `PagesEnd`: these file mappings (`[start, end)`
    /// of the image's VMAs) map files that are not the same here; send
    /// their contents (`FilePages`*, then `FilePagesEnd`).
    NeedFiles {
        ranges: Vec<(u64, u64)>,
    },
    /// Source: contents of the original's memory at `addr`.
    FilePages {
        addr: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    FilePagesEnd,
    /// Destination: restored, stopped, waiting for `Commit`.
    Restored {
        pid: i32,
    },
    /// Source: the original is stopped for good; continue the copy.
    Commit,
    /// Destination: the copy runs.
    Resumed,
    /// Source, on a new connection after losing the one of migration
    /// `id` after `Commit`: what became of it?
    Outcome {
        id: u64,
    },
    /// Destination: the answer to `Outcome`.
    OutcomeIs(Outcome),

    // Node to node: an incarnation reports to its origin.
    Attach {
        session: u64,
        gen: u64,
        node: String,
        pid: i32,
    },
    End(End),
    StdinReq {
        offset: u64,
    },
    /// Answer to `StdinReq { offset }`: stdin from `offset` (empty and
    /// `eof` at the end). Tagged with the offset: an answer to a request
    /// abandoned by a failed migration is recognised and dropped.
    StdinData {
        offset: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
        eof: bool,
        /// Why stdin cannot be had (the request was bad), if so.
        error: Option<String>,
    },
}

/// Who this end of a connection is: its node id (0 for a client) and the
/// shared secret of the nodes, if one is configured.
///
/// With a secret, each side answers the other's random nonce with
/// HMAC-SHA256(secret, "halfproc-node" || nonce) and checks the answer it
/// gets: a peer without the secret is refused before any request (a stranger
/// can neither send an image nor ask for one), and a client with the secret
/// will not talk to a node without it. Without a secret nothing is checked
/// (a daemon without a secret listens on loopback only and serves `ps`
/// alone over TCP, see [`crate::access`]). After the handshake every frame
/// carries an HMAC under a per-connection key ([`crate::seal`]). Traffic is
/// not encrypted.
#[derive(Clone, Default)]
pub struct Identity {
    pub node: u64,
    pub secret: Option<Vec<u8>>,
}

/// Environment variable naming the shared-secret file.
pub const SECRET_ENV: &str = "HALFPROC_NODE_SECRET_FILE";

impl Identity {
    /// Reads the secret from `file` (or `$HALFPROC_NODE_SECRET_FILE`), if any.
    pub fn load(node: u64, file: Option<&std::path::Path>) -> io::Result<Identity> {
        let path = file.map(std::path::Path::to_path_buf).or_else(|| {
            std::env::var_os(SECRET_ENV)
                .filter(|v| !v.is_empty())
                .map(Into::into)
        });
        let secret = match path {
            None => None,
            Some(p) => {
                let s = std::fs::read(&p).map_err(|e| {
                    io::Error::new(e.kind(), format!("secret file {}: {e}", p.display()))
                })?;
                let s = s.trim_ascii().to_vec();
                if s.len() < 16 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("secret file {}: fewer than 16 bytes", p.display()),
                    ));
                }
                Some(s)
            }
        };
        Ok(Identity { node, secret })
    }

    fn mac(&self, nonce: &[u8; 16]) -> Vec<u8> {
        use hmac::Mac;
        match &self.secret {
            None => Vec::new(),
            Some(k) => {
                let Ok(mut m) = hmac::Hmac::<sha2::Sha256>::new_from_slice(k) else {
                    return Vec::new();
                };
                m.update(b"halfproc-node");
                m.update(nonce);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    fn verify(&self, nonce: &[u8; 16], mac: &[u8]) -> bool {
        use hmac::Mac;
        match &self.secret {
            None => true,
            Some(k) => hmac::Hmac::<sha2::Sha256>::new_from_slice(k).is_ok_and(|mut m| {
                m.update(b"halfproc-node");
                m.update(nonce);
                m.verify_slice(mac).is_ok()
            }),
        }
    }
}

fn nonce() -> [u8; 16] {
    let mut b = [0u8; 16];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_err()
    {
        // SAFETY: getrandom into a buffer we own.
        unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    }
    b
}

/// A framed connection.
pub struct Conn {
    inner: Framed<BoxIo, LengthDelimitedCodec>,
    /// The peer's node id from its `Hello` (0 for a client).
    pub peer: u64,
    /// With a secret, after the handshake: tags for the frames sent...
    seal: Option<Sealer>,
    /// ...and checks of the frames received.
    open: Option<Opener>,
}

fn seal(s: &mut Option<Sealer>, m: &Msg) -> io::Result<Bytes> {
    let b = encode(m)?;
    Ok(match s {
        Some(s) => s.seal(b),
        None => b,
    })
}

fn open(o: &mut Option<Opener>, frame: io::Result<bytes::BytesMut>) -> io::Result<Msg> {
    let frame = frame?;
    match o {
        Some(o) => decode(&o.open(frame)?),
        None => decode(&frame),
    }
}

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(MAX_FRAME)
        .new_codec()
}

fn encode(m: &Msg) -> io::Result<Bytes> {
    bincode::serialize(m)
        .map(Bytes::from)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// One frame's body as a message (tests read the stream with it).
pub fn decode(b: &[u8]) -> io::Result<Msg> {
    bincode::deserialize(b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// A message for an error text: its start (an unexpected `Pages` frame
/// is not printed whole).
pub fn name(m: &Msg) -> String {
    let s = format!("{m:?}");
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

/// Why [`Conn::connect_dest`] did not connect.
#[derive(Debug)]
pub enum Dest {
    /// Neither authenticated nor trusted: why (a `Denied`).
    Untrusted(String),
    Io(io::Error),
}

/// Connection closed by the peer.
pub fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "connection closed by the peer",
    )
}

impl Conn {
    /// Wraps a connected stream; exchanges `Hello` (version check) and
    /// `Auth` (see [`Identity`]). Returns the peer's node id (0 for a client).
    pub async fn handshake(stream: BoxIo, me: &Identity) -> io::Result<(Conn, u64)> {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
        let mut c = Conn {
            inner: Framed::new(stream, codec()),
            peer: 0,
            seal: None,
            open: None,
        };
        let mine = nonce();
        c.send(&Msg::Hello {
            version: VERSION,
            node: me.node,
            nonce: mine,
        })
        .await?;
        let (peer, theirs) = match c.recv().await? {
            Msg::Hello {
                version,
                node,
                nonce,
            } if version == VERSION => (node, nonce),
            Msg::Hello { version, .. } => {
                return Err(bad(format!(
                    "peer speaks protocol version {version}, this node {VERSION}"
                )))
            }
            other => return Err(bad(format!("expected Hello, got {other:?}"))),
        };
        c.send(&Msg::Auth {
            mac: me.mac(&theirs),
        })
        .await?;
        match c.recv().await? {
            Msg::Auth { mac } if me.verify(&mine, &mac) => {
                c.peer = peer;
                if let Some(k) = &me.secret {
                    let (s, o) = crate::seal::keys(k, &mine, &theirs);
                    (c.seal, c.open) = (Some(s), Some(o));
                }
                Ok((c, peer))
            }
            Msg::Auth { .. } => {
                let why =
                    "authentication failed: the peer does not hold this node's shared secret \
                           (--secret-file / $HALFPROC_NODE_SECRET_FILE)";
                let _ = c.send(&Msg::Error(why.into())).await;
                Err(io::Error::new(io::ErrorKind::PermissionDenied, why))
            }
            Msg::Error(e) => Err(io::Error::new(io::ErrorKind::PermissionDenied, e)),
            other => Err(bad(format!("expected Auth, got {other:?}"))),
        }
    }

    /// Connects to `addr` (`HOST:PORT`, or `unix:PATH` for a node's control
    /// socket, where the peer's credentials identify the client and no
    /// secret is exchanged) and shakes hands.
    pub async fn connect(addr: &str, me: &Identity) -> io::Result<Conn> {
        let ctx = |e: io::Error| io::Error::new(e.kind(), format!("connect to node {addr}: {e}"));
        let (s, me): (BoxIo, Identity) = match unix_path(addr) {
            Some(path) => {
                let s = UnixStream::connect(path).await.map_err(ctx)?;
                let plain = Identity {
                    node: me.node,
                    secret: None,
                };
                (Box::new(s), plain)
            }
            None => {
                let s = TcpStream::connect(addr).await.map_err(ctx)?;
                let _ = s.set_nodelay(true);
                (Box::new(s), me.clone())
            }
        };
        Conn::handshake(s, &me)
            .await
            .map(|c| c.0)
            .map_err(|e| io::Error::new(e.kind(), format!("node {addr}: {e}")))
    }

    /// Connects to `addr` as the destination of a migration, which is sent
    /// a program's memory: it must be authenticated (TCP, this node holding
    /// a shared secret) or a unix socket listened on by root or by this
    /// daemon's user (`SO_PEERCRED`: a unix handshake has no secret, and
    /// anyone may listen on a socket of their own). Refused before the
    /// handshake, the error naming `addr` and why.
    pub async fn connect_dest(addr: &str, me: &Identity) -> Result<Conn, Dest> {
        let io = |e: io::Error| Dest::Io(io::Error::new(e.kind(), format!("node {addr}: {e}")));
        let s: BoxIo = match unix_path(addr) {
            Some(path) => {
                let s = UnixStream::connect(path).await.map_err(io)?;
                let uid = s.peer_cred().map_err(io)?.uid();
                // SAFETY: geteuid has no preconditions.
                let mine = unsafe { libc::geteuid() };
                if uid != 0 && uid != mine {
                    return Err(Dest::Untrusted(format!(
                        "destination {addr} is a unix socket listened on by uid {uid}, neither \
                         root nor this daemon's user (uid {mine}); a unix socket's handshake \
                         has no secret, so it is not sent a program's memory"
                    )));
                }
                Box::new(s)
            }
            None if me.secret.is_none() => {
                return Err(Dest::Untrusted(format!(
                    "destination {addr} cannot be authenticated: this node has no shared \
                     secret (--secret-file / $HALFPROC_NODE_SECRET_FILE), and a program's \
                     memory goes only to an authenticated node or to a unix socket of root or \
                     of this daemon's user"
                )));
            }
            None => {
                let s = TcpStream::connect(addr).await.map_err(io)?;
                let _ = s.set_nodelay(true);
                Box::new(s)
            }
        };
        let me = match unix_path(addr) {
            Some(_) => Identity {
                node: me.node,
                secret: None,
            },
            None => me.clone(),
        };
        Conn::handshake(s, &me).await.map(|c| c.0).map_err(io)
    }

    pub async fn send(&mut self, m: &Msg) -> io::Result<()> {
        let b = seal(&mut self.seal, m)?;
        self.inner.send(b).await
    }

    /// The next message; an error on EOF or a bad frame (one that fails
    /// its integrity check or does not decode). A bad frame is also
    /// reported to the peer ([`Msg::Error`]) before the error is returned,
    /// so that its side of the story names the cause.
    pub async fn recv(&mut self) -> io::Result<Msg> {
        match self.inner.next().await {
            Some(b) => match open(&mut self.open, b) {
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    let _ = self.send(&Msg::Error(format!("bad frame: {e}"))).await;
                    self.drain(std::time::Duration::from_secs(2)).await;
                    Err(e)
                }
                r => r,
            },
            None => Err(closed()),
        }
    }

    /// Reads and drops what the peer still sends until it hangs up, for
    /// `most` at most: closing with unread data would reset the connection
    /// and could lose the last frame sent to it (an answer, an error).
    pub async fn drain(&mut self, most: std::time::Duration) {
        let drop_all = async { while let Some(Ok(_)) = self.inner.next().await {} };
        let _ = tokio::time::timeout(most, drop_all).await;
    }

    /// Splits into a reading and a writing half.
    ///
    /// Frames already read from the stream stay first in line: the reader
    /// is made with `Framed::from_parts`, which decodes a non-empty carried
    /// buffer before it reads again. (A `FramedRead::new` given the same
    /// buffer reads the stream first, and a frame that arrived with the one
    /// before waits there until the peer sends more: an `Attach` followed
    /// at once by a `StdinReq` left the request unanswered, and the
    /// program's stdin relay with it, whenever both came in one read.)
    pub fn split(self) -> (Reader, Writer) {
        let parts = self.inner.into_parts();
        let (r, w) = tokio::io::split(parts.io);
        let mut rp = FramedParts::new::<Bytes>(r, codec());
        rp.read_buf = parts.read_buf;
        let reader = Framed::from_parts(rp);
        (
            Reader {
                inner: reader,
                open: self.open,
            },
            Writer {
                inner: FramedWrite::new(w, codec()),
                seal: self.seal,
            },
        )
    }
}

/// Reading half of a [`Conn`].
pub struct Reader {
    inner: Framed<ReadHalf<BoxIo>, LengthDelimitedCodec>,
    open: Option<Opener>,
}

impl Reader {
    /// The next message, `None` at a clean EOF.
    pub async fn recv(&mut self) -> io::Result<Option<Msg>> {
        match self.inner.next().await {
            Some(b) => open(&mut self.open, b).map(Some),
            None => Ok(None),
        }
    }
}

/// Writing half of a [`Conn`].
pub struct Writer {
    inner: FramedWrite<WriteHalf<BoxIo>, LengthDelimitedCodec>,
    seal: Option<Sealer>,
}

impl Writer {
    pub async fn send(&mut self, m: &Msg) -> io::Result<()> {
        let b = seal(&mut self.seal, m)?;
        self.inner.send(b).await
    }
}

/// Spawns a task writing every message of the returned channel to `w`.
pub fn writer_task(mut w: Writer) -> tokio::sync::mpsc::UnboundedSender<Msg> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Msg>();
    tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if w.send(&m).await.is_err() {
                break;
            }
        }
    });
    tx
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Two frames that came in one read: the second comes out of the
    /// reader of `split()` without the peer sending anything more (the
    /// two-guest test's hang: `Attach` then `StdinReq`).
    #[tokio::test]
    async fn split_keeps_the_frames_already_read() {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let mut peer = Framed::new(theirs, codec());
        let mut c = Conn {
            inner: Framed::new(Box::new(ours) as BoxIo, codec()),
            peer: 0,
            seal: None,
            open: None,
        };
        peer.send(encode(&Msg::StdinEof).unwrap()).await.unwrap();
        peer.send(encode(&Msg::StdinReq { offset: 7 }).unwrap())
            .await
            .unwrap();
        assert!(matches!(c.recv().await.unwrap(), Msg::StdinEof));
        let (mut r, _w) = c.split();
        let second = tokio::time::timeout(Duration::from_secs(2), r.recv())
            .await
            .expect("the frame read with the first one stayed in the buffer")
            .unwrap();
        assert!(matches!(second, Some(Msg::StdinReq { offset: 7 })));
        drop(peer);
    }

    /// With a secret, the frames after the handshake carry an HMAC: they
    /// arrive intact in both directions, and an altered one is refused.
    #[tokio::test]
    async fn frames_after_a_secret_handshake_are_sealed() {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let me = Identity {
            node: 1,
            secret: Some(b"0123456789abcdef".to_vec()),
        };
        let peer_ident = Identity {
            node: 2,
            ..me.clone()
        };
        let peer = tokio::spawn(async move {
            let (mut c, _) = Conn::handshake(Box::new(theirs), &peer_ident)
                .await
                .unwrap();
            let got = c.recv().await.unwrap();
            c.send(&Msg::Done("back".into())).await.unwrap();
            // Raw from here: a frame with one bit flipped.
            let mut raw = c.inner;
            let mut f = seal(&mut c.seal, &Msg::Done("forged".into()))
                .unwrap()
                .to_vec();
            f[0] ^= 1;
            raw.send(Bytes::from(f)).await.unwrap();
            got
        });
        let (mut c, node) = Conn::handshake(Box::new(ours), &me).await.unwrap();
        assert_eq!(node, 2);
        assert!(c.seal.is_some() && c.open.is_some());
        c.send(&Msg::Done("there".into())).await.unwrap();
        assert!(matches!(c.recv().await.unwrap(), Msg::Done(s) if s == "back"));
        let e = c.recv().await.unwrap_err();
        assert!(e.to_string().contains("integrity check"), "{e}");
        assert!(matches!(peer.await.unwrap(), Msg::Done(s) if s == "there"));
    }
}
