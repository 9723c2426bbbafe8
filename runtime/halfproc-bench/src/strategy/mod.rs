// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The ways a process `p'` can obtain data `d` that process `p` wrote.
//!
//! Each [`Strategy`] is split into a [`Writer`] half (runs in `p`) and a
//! [`Reader`] half (runs in `p'`). [`prepare`] creates both halves and the
//! resources they share (sockets, pipes, shared mappings) *before* the reader
//! process exists, so that the reader inherits them; after the spawn each
//! process drops the other half and calls `init` on its own, which allocates
//! its private buffers there (so they are never shared copy-on-write).
//!
//! | name | paper (Figs. 7/8) | copies | how `p'` obtains `d` |
//! |---|---|---|---|
//! | `tcp` | socket | 2 | loopback TCP stream |
//! | `unix` | | 2 | `AF_UNIX` stream socket pair |
//! | `pipe` | pipe | 2 | anonymous pipe (1 MiB buffer) |
//! | `vmsplice` | | 1 | `vmsplice` of `d`'s pages into a pipe, `read` |
//! | `shared` | half-process | 0 | reads `d` in place in the shared range |
//! | `posix-shm` | inter-process | 0 | reads `d` in place in POSIX shm |
//! | `double-copy` | doublecopy | 2 | `p` copies to a shared bounce buffer, `p'` copies out |
//! | `double-copy-pipelined` | | 2 | same through a ring of chunks, both copies overlap |
//! | `cma` | | 1 | `process_vm_readv` of all of `d` |
//! | `cma-pull-pipelined` | | 1 | `process_vm_readv` chunk by chunk, checksum each |
//! | `cma-push-pipelined` | | 1 | `p` pushes chunks with `process_vm_writev`, `p'` sums them as they land |
//! | `dmread` | dmread | 1 | `dmread` of all of `d` |
//! | `dmread-pipelined` | | 1 | `dmread` chunk by chunk, checksum each |
//! | `dmwrite-pipelined` | | 1 | `p` pushes chunks with `dmwrite`, `p'` sums them as they land |
//! | `cma-push-pull` | | 1 | both copy: `p` pushes, `p'` pulls unclaimed chunks, `p'` sums all |
//! | `dm-push-pull` | | 1 | the same with `dmwrite`/`dmread` |
//!
//! In every case the timer starts after `d` is written and stops after the
//! reader's checksum is computed (see [`crate::control`]).

mod bounce;
mod shared;
mod single_copy;
mod stream;

use crate::control::{Control, WaitPolicy};
use crate::error::{Error, Result};
use halfproc::BackendKind;

/// One way of moving `d` from `p` to `p'`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Strategy {
    /// Loopback TCP.
    Tcp,
    /// `AF_UNIX` stream sockets.
    Unix,
    /// Anonymous pipe.
    Pipe,
    /// `vmsplice` into a pipe.
    Vmsplice,
    /// The half-process shared range.
    Shared,
    /// POSIX shared memory.
    PosixShm,
    /// Double copy through a shared bounce buffer of the full size.
    DoubleCopy,
    /// Double copy through a ring of chunks, copies overlapped.
    DoubleCopyPipelined,
    /// `process_vm_readv` (cross-memory attach), one shot.
    Cma,
    /// `process_vm_readv` chunk by chunk.
    CmaPullPipelined,
    /// `process_vm_writev` pushes, reader sums concurrently.
    CmaPushPipelined,
    /// `dmread`, one shot.
    Dmread,
    /// `dmread` chunk by chunk.
    DmreadPipelined,
    /// `dmwrite` pushes, reader sums concurrently.
    DmwritePipelined,
    /// Both processes copy (`process_vm_writev` / `process_vm_readv`),
    /// claiming chunks from a shared counter; the reader sums every chunk.
    CmaPushPull,
    /// As [`Strategy::CmaPushPull`] with `dmwrite`/`dmread`.
    DmPushPull,
}

impl Strategy {
    /// Every strategy, in the order of tables and legends.
    pub const ALL: [Strategy; 16] = [
        Strategy::Tcp,
        Strategy::Unix,
        Strategy::Pipe,
        Strategy::Vmsplice,
        Strategy::Shared,
        Strategy::PosixShm,
        Strategy::DoubleCopy,
        Strategy::DoubleCopyPipelined,
        Strategy::Cma,
        Strategy::CmaPullPipelined,
        Strategy::CmaPushPipelined,
        Strategy::Dmread,
        Strategy::DmreadPipelined,
        Strategy::DmwritePipelined,
        Strategy::CmaPushPull,
        Strategy::DmPushPull,
    ];

    /// The strategies of the paper's Figs. 7/8.
    pub const PAPER: [Strategy; 6] = [
        Strategy::Tcp,
        Strategy::Pipe,
        Strategy::Shared,
        Strategy::PosixShm,
        Strategy::Dmread,
        Strategy::DoubleCopy,
    ];

    /// The command-line name.
    pub const fn name(self) -> &'static str {
        match self {
            Strategy::Tcp => "tcp",
            Strategy::Unix => "unix",
            Strategy::Pipe => "pipe",
            Strategy::Vmsplice => "vmsplice",
            Strategy::Shared => "shared",
            Strategy::PosixShm => "posix-shm",
            Strategy::DoubleCopy => "double-copy",
            Strategy::DoubleCopyPipelined => "double-copy-pipelined",
            Strategy::Cma => "cma",
            Strategy::CmaPullPipelined => "cma-pull-pipelined",
            Strategy::CmaPushPipelined => "cma-push-pipelined",
            Strategy::Dmread => "dmread",
            Strategy::DmreadPipelined => "dmread-pipelined",
            Strategy::DmwritePipelined => "dmwrite-pipelined",
            Strategy::CmaPushPull => "cma-push-pull",
            Strategy::DmPushPull => "dm-push-pull",
        }
    }

    /// The paper's label for the same strategy, if it has one.
    pub const fn paper_label(self) -> Option<&'static str> {
        match self {
            Strategy::Tcp => Some("socket"),
            Strategy::Pipe => Some("pipe"),
            Strategy::Shared => Some("half-process"),
            Strategy::PosixShm => Some("inter-process"),
            Strategy::DoubleCopy => Some("doublecopy"),
            Strategy::Dmread => Some("dmread"),
            _ => None,
        }
    }

    /// Memory copies of `d` before the reader's checksum (0 = in place).
    pub const fn copies(self) -> u32 {
        match self {
            Strategy::Shared | Strategy::PosixShm => 0,
            Strategy::Vmsplice
            | Strategy::Cma
            | Strategy::CmaPullPipelined
            | Strategy::CmaPushPipelined
            | Strategy::Dmread
            | Strategy::DmreadPipelined
            | Strategy::DmwritePipelined
            | Strategy::CmaPushPull
            | Strategy::DmPushPull => 1,
            Strategy::Tcp
            | Strategy::Unix
            | Strategy::Pipe
            | Strategy::DoubleCopy
            | Strategy::DoubleCopyPipelined => 2,
        }
    }

    /// Whether the strategy moves `d` in chunks with both processes busy.
    pub const fn pipelined(self) -> bool {
        matches!(
            self,
            Strategy::DoubleCopyPipelined
                | Strategy::CmaPullPipelined
                | Strategy::CmaPushPipelined
                | Strategy::DmreadPipelined
                | Strategy::DmwritePipelined
                | Strategy::CmaPushPull
                | Strategy::DmPushPull
        )
    }

    /// One line on what is measured.
    pub const fn describe(self) -> &'static str {
        match self {
            Strategy::Tcp => "loopback TCP stream (TCP_NODELAY); reader sums each recv",
            Strategy::Unix => "AF_UNIX stream socket pair; reader sums each recv",
            Strategy::Pipe => "anonymous pipe with a 1 MiB buffer; reader sums each read",
            Strategy::Vmsplice => "writer vmsplices d's pages into a 1 MiB pipe, reader reads: one copy",
            Strategy::Shared => "d written in the half-process shared range; reader sums it in place",
            Strategy::PosixShm => "d written in POSIX shared memory (shm_open); reader sums it in place",
            Strategy::DoubleCopy => "writer copies d into a shared bounce buffer, reader copies it out, then sums",
            Strategy::DoubleCopyPipelined => {
                "double copy through a ring of 8 chunks: writer fills slot k+1 while the reader copies out and sums slot k"
            }
            Strategy::Cma => "reader process_vm_readv's all of d, then sums",
            Strategy::CmaPullPipelined => "reader process_vm_readv's d chunk by chunk, summing each while it is in cache",
            Strategy::CmaPushPipelined => {
                "writer process_vm_writev's chunks into the reader's buffer; the reader sums chunks as they land"
            }
            Strategy::Dmread => "reader dmread's all of d, then sums",
            Strategy::DmreadPipelined => "reader dmread's d chunk by chunk, summing each while it is in cache",
            Strategy::DmwritePipelined => {
                "writer dmwrite's chunks into the reader's buffer; the reader sums chunks as they land"
            }
            Strategy::CmaPushPull => {
                "both cores copy: the writer pushes chunks (process_vm_writev), the reader pulls unclaimed ones (process_vm_readv) and sums all"
            }
            Strategy::DmPushPull => {
                "both cores copy: the writer pushes chunks (dmwrite), the reader pulls unclaimed ones (dmread) and sums all"
            }
        }
    }

    /// Parse a name, a paper label (`socket`, `half-process`,
    /// `inter-process`, `doublecopy`) or `process_vm_readv`.
    pub fn parse(s: &str) -> Result<Strategy> {
        let s = s.trim();
        if let Some(st) = Strategy::ALL.iter().find(|st| st.name() == s) {
            return Ok(*st);
        }
        if let Some(st) = Strategy::ALL.iter().find(|st| st.paper_label() == Some(s)) {
            return Ok(*st);
        }
        match s {
            "process_vm_readv" => Ok(Strategy::Cma),
            _ => Err(Error::usage(format!(
                "unknown strategy `{s}`; known: {}, or the groups `all` and `paper`",
                Strategy::ALL.map(Strategy::name).join(", ")
            ))),
        }
    }

    /// Parse a comma-separated list (with the groups `all` and `paper`),
    /// without duplicates, in the order given.
    pub fn parse_list(s: &str) -> Result<Vec<Strategy>> {
        let mut out = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let group: Vec<Strategy> = match item {
                "all" => Strategy::ALL.to_vec(),
                "paper" => Strategy::PAPER.to_vec(),
                one => vec![Strategy::parse(one)?],
            };
            for st in group {
                if !out.contains(&st) {
                    out.push(st);
                }
            }
        }
        if out.is_empty() {
            return Err(Error::usage("--strategies: empty list"));
        }
        Ok(out)
    }

    /// Why this strategy cannot run on `backend`, if it cannot (checked
    /// before anything is spawned; failures found later are reported by the
    /// harness the same way).
    pub fn unavailable_on(self, backend: BackendKind) -> Option<String> {
        match self {
            Strategy::Dmread
            | Strategy::DmreadPipelined
            | Strategy::DmwritePipelined
            | Strategy::DmPushPull => crate::backend::dm_unavailable(backend),
            _ => None,
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a half needs to talk to its peer during a measurement.
pub struct Link<'a> {
    /// The shared control block.
    pub ctl: &'a Control,
    /// Spin-then-sleep policy for this placement.
    pub policy: WaitPolicy,
    /// Whether the peer is still alive (asked when a wait times out).
    pub alive: &'a dyn Fn() -> bool,
    /// Chunk size of pipelined strategies.
    pub chunk: usize,
}

impl Link<'_> {
    /// Wait until the head bell reaches `n`.
    pub fn wait_head(&self, n: u32) -> Result<()> {
        self.ctl
            .head
            .wait_until(self.policy, self.alive, |v| v >= n)
            .map(drop)
    }

    /// Wait until the tail bell reaches `n`.
    pub fn wait_tail(&self, n: u32) -> Result<()> {
        self.ctl
            .tail
            .wait_until(self.policy, self.alive, |v| v >= n)
            .map(drop)
    }

    /// The writer's pid.
    pub fn writer_pid(&self) -> i32 {
        self.ctl
            .writer_pid
            .load(std::sync::atomic::Ordering::Acquire) as i32
    }

    /// The reader's pid.
    pub fn reader_pid(&self) -> i32 {
        self.ctl
            .reader_pid
            .load(std::sync::atomic::Ordering::Acquire) as i32
    }
}

/// The writer's half (process `p`).
pub trait Writer {
    /// In `p`, after the spawn: allocate private buffers, publish addresses.
    fn init(&mut self, max: usize, link: &Link<'_>) -> Result<()>;
    /// Where `p` writes `d` (before the timer starts).
    fn source(&mut self, size: usize) -> &mut [u8];
    /// `p`'s timed part, after the timer started.
    fn send(&mut self, size: usize, link: &Link<'_>) -> Result<()>;
}

/// The reader's half (process `p'`).
pub trait Reader {
    /// In `p'`, after the spawn: allocate private buffers, publish addresses.
    fn init(&mut self, max: usize, link: &Link<'_>) -> Result<()>;
    /// Before the timer: overwrite whatever a previous repetition left in the
    /// receive buffer, so that only this repetition's bytes can match.
    fn prepare(&mut self, size: usize) -> Result<()>;
    /// `p'`'s timed part: obtain `d`, return its checksum.
    fn receive(&mut self, size: usize, link: &Link<'_>) -> Result<u64>;
}

/// Both halves of one strategy, with their shared resources created.
pub struct Halves {
    /// Runs in `p`.
    pub writer: Box<dyn Writer>,
    /// Runs in `p'`.
    pub reader: Box<dyn Reader>,
}

/// Create both halves of `strategy` for transfers of up to `max` bytes.
/// Call before spawning the reader.
pub fn prepare(
    strategy: Strategy,
    backend: BackendKind,
    max: usize,
    chunk: usize,
) -> Result<Halves> {
    use single_copy::Engine;
    if let Some(why) = strategy.unavailable_on(backend) {
        return Err(Error::from_errno(why, libc::EOPNOTSUPP));
    }
    Ok(match strategy {
        Strategy::Tcp => stream::tcp()?,
        Strategy::Unix => stream::unix()?,
        Strategy::Pipe => stream::pipe(false)?,
        Strategy::Vmsplice => stream::pipe(true)?,
        Strategy::Shared => shared::shared_range(backend, max)?,
        Strategy::PosixShm => shared::posix_shm(max)?,
        Strategy::DoubleCopy => bounce::one_shot(max)?,
        Strategy::DoubleCopyPipelined => bounce::pipelined(chunk)?,
        Strategy::Cma => single_copy::pull(Engine::Cma, false),
        Strategy::CmaPullPipelined => single_copy::pull(Engine::Cma, true),
        Strategy::CmaPushPipelined => single_copy::push(Engine::Cma),
        Strategy::Dmread => single_copy::pull(Engine::Dm, false),
        Strategy::DmreadPipelined => single_copy::pull(Engine::Dm, true),
        Strategy::DmwritePipelined => single_copy::push(Engine::Dm),
        Strategy::CmaPushPull => single_copy::push_pull(Engine::Cma, max, chunk)?,
        Strategy::DmPushPull => single_copy::push_pull(Engine::Dm, max, chunk)?,
    })
}

/// Private buffer helper shared by the halves: `max` bytes, pre-faulted.
pub(crate) fn private_buffer(max: usize) -> Result<halfproc_sys::Region> {
    let mut r = halfproc_sys::Region::private(max)?;
    r.prefault_write();
    Ok(r)
}

/// The value receive buffers are poisoned with before each repetition.
pub(crate) const POISON: u8 = 0xa5;
