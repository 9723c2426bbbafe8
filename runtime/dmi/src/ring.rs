// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The mailbox between a compute instance and its node, in the shared range
//! (`docs/dmi.md`, "Nodes as half-processes").
//!
//! Each instance has one [`Mailbox`]: a request/response ring of depth one
//! (an instance is single-threaded and its calls are synchronous), guarded
//! by a futex mutex of the halfproc runtime with one condition variable per
//! direction, and a staging buffer in the shared range that carries the
//! encoded request and the reply. The instance owns the slot while the
//! state is `IDLE` or `REPLY`, the node while it is `REQUEST`.
//!
//! The bytes of a read go either into the staging buffer (the instance then
//! copies them into its private buffer) or, with [`ReplyPath::Dmwrite`],
//! straight into the instance's private buffer with `dmwrite` (the paper's
//! receiver). Neither side waits forever: the node looks whether the
//! instance still runs every [`POLL`], the instance whether the node does.
//!
//! Lock order: only one mailbox lock is ever held at a time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use halfproc::sync::{Condvar, LockError, Mutex, MutexGuard};
use serde::{Deserialize, Serialize};

use crate::error::DmiError;
use crate::msg::{ReadMode, WriteMode};
use crate::node::{CallReq, Outcome};

/// How often a waiting side checks that the other one still runs.
pub const POLL: Duration = Duration::from_millis(20);

/// How often a parked instance looks whether its move is done.
const PARK_POLL: Duration = Duration::from_millis(1);

/// Room every staging buffer has for an error message.
const ERR_ROOM: usize = 4096;

const IDLE: u32 = 0;
const REQUEST: u32 = 1;
const REPLY: u32 = 2;

/// Reply status: bytes in staging, an encoded error in staging, or the
/// bytes already written into the instance's buffer.
const OK_STAGED: u32 = 0;
const ERR: u32 = 1;
const OK_WRITTEN: u32 = 2;

/// Where the node puts the bytes of a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyPath {
    /// Into the staging buffer; the instance copies them (one `memcpy`).
    Staging,
    /// Into the instance's private buffer with `dmwrite` (kernel backend:
    /// the new system call; portable: `process_vm_writev`).
    Dmwrite,
}

impl ReplyPath {
    /// `DMI_REPLY=staging|dmwrite`; by default `dmwrite` on the kernel
    /// backend and `staging` on the portable one (no ptrace permission
    /// needed, and no system call per reply).
    pub fn from_env(kernel: bool) -> Result<ReplyPath, DmiError> {
        match std::env::var("DMI_REPLY").as_deref() {
            Ok("staging") => Ok(ReplyPath::Staging),
            Ok("dmwrite") => Ok(ReplyPath::Dmwrite),
            Ok(v) => Err(DmiError::Setup(format!(
                "DMI_REPLY={v:?} is not valid (use staging or dmwrite)"
            ))),
            Err(_) if kernel => Ok(ReplyPath::Dmwrite),
            Err(_) => Ok(ReplyPath::Staging),
        }
    }
}

/// A call as it travels through the staging buffer.
#[derive(Debug, Serialize, Deserialize)]
enum Req {
    Read {
        items: Vec<(i64, i64)>,
        mode: ReadMode,
    },
    Write {
        items: Vec<(i64, Vec<u8>)>,
        mode: WriteMode,
    },
    Rmw {
        addr: i64,
        size: i64,
        func: u32,
        arg: Vec<u8>,
    },
    Mmap {
        page_size: i64,
        page_num: i64,
    },
    Munmap {
        addr: i64,
    },
    Lock {
        addr: i64,
    },
    Unlock {
        addr: i64,
    },
    Barrier,
    /// `DMI_yield`: may the instance move? `home` is the address of its
    /// [`HOME`] (private memory, written by the node with `dmwrite`).
    Yield {
        home: usize,
        n: u64,
    },
    /// `DMI_finalize` of a movable instance (`host.rs`): the final barrier.
    Done,
}

/// A request that is not an engine call.
enum Special {
    Yield(usize, u64),
    Done,
}

impl TryFrom<CallReq> for Req {
    type Error = DmiError;

    /// Membership calls (itergroup barriers, rescale, members) belong to the
    /// node's program, never to a compute instance.
    fn try_from(c: CallReq) -> Result<Req, DmiError> {
        Ok(match c {
            CallReq::Read { items, mode } => Req::Read { items, mode },
            CallReq::Write { items, mode } => Req::Write { items, mode },
            CallReq::Rmw {
                addr,
                size,
                func,
                arg,
            } => Req::Rmw {
                addr,
                size,
                func,
                arg,
            },
            CallReq::Mmap {
                page_size,
                page_num,
            } => Req::Mmap {
                page_size,
                page_num,
            },
            CallReq::Munmap { addr } => Req::Munmap { addr },
            CallReq::Lock { addr } => Req::Lock { addr },
            CallReq::Unlock { addr } => Req::Unlock { addr },
            CallReq::Barrier => Req::Barrier,
            CallReq::BarrierOf(_)
            | CallReq::FinalBarrier
            | CallReq::Rescale { .. }
            | CallReq::Members => {
                return Err(DmiError::BadArgument(
                    "reconfiguration calls are not available in a compute instance".into(),
                ))
            }
        })
    }
}

impl TryFrom<Req> for CallReq {
    type Error = Special;

    /// A call for the engine, or (`Err`) a yield (its home address and its
    /// number) or the end of a movable instance.
    fn try_from(r: Req) -> Result<CallReq, Special> {
        Ok(match r {
            Req::Read { items, mode } => CallReq::Read { items, mode },
            Req::Write { items, mode } => CallReq::Write { items, mode },
            Req::Rmw {
                addr,
                size,
                func,
                arg,
            } => CallReq::Rmw {
                addr,
                size,
                func,
                arg,
            },
            Req::Mmap {
                page_size,
                page_num,
            } => CallReq::Mmap {
                page_size,
                page_num,
            },
            Req::Munmap { addr } => CallReq::Munmap { addr },
            Req::Lock { addr } => CallReq::Lock { addr },
            Req::Unlock { addr } => CallReq::Unlock { addr },
            Req::Barrier => CallReq::Barrier,
            Req::Yield { home, n } => return Err(Special::Yield(home, n)),
            Req::Done => return Err(Special::Done),
        })
    }
}

impl Req {
    /// The most bytes a successful reply can have.
    fn reply_bound(&self) -> usize {
        match self {
            Req::Read { items, .. } => items.iter().map(|&(_, s)| s.max(0) as usize).sum(),
            Req::Rmw { size, .. } => (*size).max(8) as usize,
            Req::Mmap { .. } => 8,
            _ => 0,
        }
    }
}

/// The slot's contents (behind the mailbox mutex).
struct Slot {
    state: u32,
    status: u32,
    /// Bytes used in the staging buffer (request, then reply).
    len: usize,
    /// The staging buffer, in the shared range (allocated by the instance).
    staging: usize,
    cap: usize,
    /// For a read with [`ReplyPath::Dmwrite`]: the instance's private buffer.
    dest: usize,
    /// The instance function's return value, once it returned.
    ret: Option<i64>,
}

/// One instance's mailbox; lives in the shared range.
pub struct Mailbox {
    /// The node's page index (`pool.rs`): the instance reads hits there.
    pool: AtomicU64,
    /// The number of the instance's yield at which it is to ask its node
    /// whether to move (0: none): a yield before that costs no round trip.
    move_at: AtomicU64,
    /// The node's [`crate::serve_single::Bell`] when one receiver serves
    /// every mailbox (`DMI_RECEIVERS=single`), 0 otherwise: rung after
    /// each request.
    bell: AtomicU64,
    slot: Mutex<Slot>,
    to_node: Condvar,
    to_instance: Condvar,
    /// The instance's fast writes (`pool_journal.rs`): what the node needs
    /// to finish or drop one the instance dies in.
    journal: crate::pool::Journal,
}

/// What [`Mailbox::take`] found.
pub enum Taken {
    /// A call, and the private buffer to `dmwrite` a read's bytes to (0: none).
    Call(CallReq, usize),
    /// Nothing within the time limit.
    Nothing,
    /// The request could not be decoded (answered with an error already).
    Bad,
    /// `DMI_yield` (answer with [`Mailbox::answer_yield`]): the address of
    /// the instance's [`Home`] and the yield's number (from 1).
    Yield(usize, u64),
    /// A movable instance's `DMI_finalize` (answer with [`Mailbox::answer`]).
    Done,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> Result<MutexGuard<'_, T>, DmiError> {
    match m.lock() {
        Ok(g) => Ok(g),
        // The other side died holding the lock; the state word tells the
        // rest (and the node finds the death by the member's status).
        Err(LockError::OwnerDied(g)) => Ok(g),
        Err(LockError::NotMember) => Err(DmiError::Setup(
            "the mailbox is not reachable: this process is not a member of the node's set".into(),
        )),
    }
}

/// The first `g.len` bytes of the staging buffer.
///
/// # Safety
/// `g.staging` must point to `g.cap >= g.len` bytes of the shared range
/// that the caller's side owns now (the state says whose turn it is).
unsafe fn staged(g: &Slot) -> &[u8] {
    // SAFETY: forwarded from the caller.
    unsafe { std::slice::from_raw_parts(g.staging as *const u8, g.len) }
}

/// Copies `bytes` to the start of the staging buffer and records the length.
///
/// # Safety
/// As for [`staged`], and `bytes.len() <= g.cap`.
unsafe fn stage(g: &mut Slot, bytes: &[u8]) {
    // SAFETY: the buffer is ours and large enough (caller); `bytes` is
    // private memory, so the ranges do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), g.staging as *mut u8, bytes.len()) };
    g.len = bytes.len();
}

impl Mailbox {
    /// A new, idle mailbox in the shared range.
    pub fn new() -> Result<&'static Mailbox, DmiError> {
        let b = halfproc::alloc::shared_box(Mailbox {
            pool: AtomicU64::new(crate::pool::node_index() as u64),
            move_at: AtomicU64::new(0),
            bell: AtomicU64::new(0),
            slot: Mutex::new(Slot {
                state: IDLE,
                status: OK_STAGED,
                len: 0,
                staging: 0,
                cap: 0,
                dest: 0,
                ret: None,
            }),
            to_node: Condvar::new(),
            to_instance: Condvar::new(),
            journal: crate::pool::Journal::default(),
        })
        .map_err(|e| DmiError::Setup(format!("mailbox: {e}")))?;
        Ok(halfproc::SharedBox::leak(b))
    }

    /// Node: frees the mailbox and its staging buffer.
    ///
    /// # Safety
    /// The instance has ended and nothing uses `self` afterwards.
    pub unsafe fn release(&'static self) {
        // SAFETY: the instance has ended (caller); its node's pool lives on.
        unsafe {
            self.journal.recover();
            self.journal.free();
        }
        if let Ok(g) = lock(&self.slot) {
            if g.staging != 0 {
                // SAFETY: the buffer came from halfproc's malloc (in the
                // instance; any member may free it) and nobody uses it.
                unsafe { halfproc::alloc::free(g.staging as *mut u8) };
            }
        }
        let p = self as *const Mailbox as *mut Mailbox;
        // SAFETY: `self` was leaked from a SharedBox in `new` and is not
        // used any more (caller).
        drop(unsafe { halfproc::SharedBox::from_raw_in(p, halfproc::SharedAlloc) });
    }

    /// Node, once the instance died: completes or drops the fast write it
    /// died in, letting go of the frames it held (`pool_journal.rs`).
    ///
    /// # Safety
    /// The instance is dead.
    pub unsafe fn recover_writes(&self) -> crate::pool::Recovered {
        // SAFETY: forwarded from the caller; the node's pool lives on.
        unsafe { self.journal.recover() }
    }

    /// Instance: records the instance function's return value.
    pub fn set_return(&self, v: i64) {
        if let Ok(mut g) = lock(&self.slot) {
            g.ret = Some(v);
        }
    }

    /// Node: the return value, if the instance function returned.
    pub fn returned(&self) -> Option<i64> {
        lock(&self.slot).ok().and_then(|g| g.ret)
    }

    /// Node: waits up to `timeout` for a request and takes it (a zero
    /// `timeout` does not wait).
    pub fn take(&self, timeout: Duration) -> Result<Taken, DmiError> {
        let mut g = lock(&self.slot)?;
        if g.state != REQUEST {
            if timeout.is_zero() {
                return Ok(Taken::Nothing);
            }
            g = match self.to_node.wait_timeout(g, timeout) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().map(|(g, _)| g).ok_or_else(|| {
                    DmiError::Setup("mailbox: not a member of the node's set".into())
                })?,
            };
            if g.state != REQUEST {
                return Ok(Taken::Nothing);
            }
        }
        // SAFETY: state REQUEST: the staging buffer is the node's until it
        // answers; the instance wrote `len` bytes of it.
        let bytes = unsafe { staged(&g) };
        match bincode::deserialize::<Req>(bytes) {
            Ok(r) => Ok(match CallReq::try_from(r) {
                Ok(c) => Taken::Call(c, g.dest),
                Err(Special::Yield(home, n)) => Taken::Yield(home, n),
                Err(Special::Done) => Taken::Done,
            }),
            Err(e) => {
                drop(g);
                self.answer(
                    &Err(DmiError::BadArgument(format!("undecodable request: {e}"))),
                    None,
                );
                Ok(Taken::Bad)
            }
        }
    }

    /// Node: answers the request taken last. `written` is true when the
    /// bytes of a read were already `dmwrite`n into the instance's buffer.
    pub fn answer(&self, out: &Outcome, written: Option<usize>) {
        let Ok(mut g) = lock(&self.slot) else { return };
        let (status, bytes) = match (out, written) {
            (Ok(_), Some(n)) => (OK_WRITTEN, n.to_le_bytes().to_vec()),
            (Ok(v), None) if v.len() <= g.cap => (OK_STAGED, v.clone()),
            (Ok(v), None) => {
                let e = DmiError::BadArgument(format!(
                    "reply of {} bytes does not fit the instance's staging buffer ({} bytes)",
                    v.len(),
                    g.cap
                ));
                (ERR, bincode::serialize(&e).unwrap_or_default())
            }
            (Err(e), _) => {
                let mut b = bincode::serialize(e).unwrap_or_default();
                if b.len() > g.cap {
                    b = bincode::serialize(&DmiError::Setup("error message too long".into()))
                        .unwrap_or_default();
                }
                (ERR, b)
            }
        };
        // SAFETY: state REQUEST: the staging buffer is the node's; it fits
        // every successful reply (checked above) and ERR_ROOM bytes of error.
        unsafe { stage(&mut g, &bytes) };
        g.status = status;
        g.state = REPLY;
        drop(g);
        self.to_instance.notify_one();
    }
}

impl Mailbox {
    /// Node, before the instance runs: every request rings `bell` too.
    pub(crate) fn set_bell(&self, bell: &'static crate::serve_single::Bell) {
        self.bell.store(bell as *const _ as u64, Ordering::SeqCst);
    }

    /// Node: the bell [`Mailbox::set_bell`] set, if any.
    pub(crate) fn bell(&self) -> Option<&'static crate::serve_single::Bell> {
        let a = self.bell.load(Ordering::SeqCst) as *const crate::serve_single::Bell;
        // SAFETY: set by `set_bell` to a leaked bell in the shared range
        // (it lives as long as the node).
        unsafe { a.as_ref() }
    }

    /// Node: answers a `DMI_yield`: `true` when the instance is to park
    /// and be moved.
    pub fn answer_yield(&self, go: bool) {
        self.answer(&Ok(vec![u8::from(go)]), None);
    }

    /// Node: the instance asks at its `n`-th yield, or at its first one
    /// after that (`Some(1)`: at the next one; `None`: never).
    pub fn set_move_at(&self, n: Option<u64>) {
        self.move_at.store(n.unwrap_or(0), Ordering::SeqCst);
    }
}

/// [`Home::state`]: the instance runs; it waits to be moved (its node may
/// checkpoint it now: it holds no lock and uses no shared memory); the
/// move is committed (in a copy: go on with `mailbox` and `node_pid`); the
/// move failed and it stays.
pub const HOME_RUNNING: u64 = 0;
pub const HOME_PARKED: u64 = 1;
pub const HOME_MOVED: u64 = 2;
pub const HOME_STAYED: u64 = 3;

/// Where an instance finds its mailbox and its node: private memory of the
/// instance (a static: one per process, and an instance has one mailbox),
/// so a copy restored by another node finds the values that node wrote
/// into it with `dmwrite` before letting it run (it is restored stopped:
/// `relocate::restore_adopted`).
#[repr(C)]
pub struct Home {
    /// Yields so far (private: a copy carries it).
    pub yields: AtomicU64,
    pub state: AtomicU64,
    pub mailbox: AtomicU64,
    /// The node: the instance's parent (it created or restored it).
    pub node_pid: AtomicU64,
    /// 0 in an instance that parks; in a copy restored from its image, the
    /// restoring node's number for the restore (from 1), written with
    /// `mailbox` and `node_pid` before the copy runs. Only a restore writes
    /// it, so a copy knows it is one from its first instruction, whatever
    /// its pid.
    pub restored: AtomicU64,
}

/// The instance's [`Home`] (unused in the node process).
pub static HOME: Home = Home {
    yields: AtomicU64::new(0),
    state: AtomicU64::new(HOME_RUNNING),
    mailbox: AtomicU64::new(0),
    node_pid: AtomicU64::new(0),
    restored: AtomicU64::new(0),
};

/// Instance: whether its node, `node`, is gone. The node is the
/// instance's parent (it forked or restored it); once it dies the instance
/// is someone else's child for good, and no other process can have the
/// dead node's pid while the instance still has it as its parent (unlike a
/// look at the pid, which a new process may have taken).
fn node_gone(node: i32) -> bool {
    // SAFETY: getppid takes no arguments.
    unsafe { libc::getppid() != node }
}

/// A restored copy that is not the instance (its move did not commit)
/// ends, without running anything of the program (its original may run
/// on), saying `why`.
fn copy_ends(why: &str) -> ! {
    let line = format!(
        "dmi: a parked copy (pid {}) of an instance ends: {why}\n",
        std::process::id()
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    // SAFETY: _exit ends the process at once (no atexit handlers of the
    // program, which is a copy: its buffers are its original's).
    unsafe { libc::_exit(crate::runtime::PEER_FAILED_EXIT) }
}

/// `DMI_TRACE_YIELDS=1`: each yield of an instance prints `dmi: trace yield
/// RANK N SECONDS` (its `DMI_RANK`, the yield's number, the wall clock) to
/// stderr, for a timeline of a movable run (`apps/timeline-yield.sh`). The
/// environment travels with a moved instance, so the rank stays the same.
fn trace_yield(n: u64) {
    if std::env::var_os("DMI_TRACE_YIELDS").is_none() {
        return;
    }
    let rank = std::env::var("DMI_RANK").unwrap_or_else(|_| "-".into());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    // One write: other ranks' processes share the stream.
    let line = format!("dmi: trace yield {rank} {n} {:.6}\n", now.as_secs_f64());
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
}

/// Instance: records the instance function's return value in its current
/// mailbox (the one of the node it runs on now).
pub fn set_return_home(v: i64) {
    let mb = HOME.mailbox.load(Ordering::SeqCst) as *const Mailbox;
    if !mb.is_null() {
        // SAFETY: as in `Link::mb`: a live mailbox of this instance's set.
        unsafe { &*mb }.set_return(v);
    }
}

/// The instance's end of its mailbox (which, with its node, is in [`HOME`]).
pub struct Link {
    path: ReplyPath,
}

impl Link {
    pub fn new(mb: &'static Mailbox, node_pid: i32, path: ReplyPath) -> Link {
        HOME.mailbox
            .store(mb as *const Mailbox as u64, Ordering::SeqCst);
        HOME.node_pid.store(node_pid as u64, Ordering::SeqCst);
        Link { path }
    }

    fn mb(&self) -> &'static Mailbox {
        // SAFETY: HOME.mailbox is set by `new` (at the start of the instance)
        // or by the node that restored this process, to a live mailbox of
        // its set, before the instance runs on.
        unsafe { &*(HOME.mailbox.load(Ordering::SeqCst) as *const Mailbox) }
    }

    /// The page index of the node this instance runs on now.
    pub fn index(&self) -> Option<&'static crate::pool::Index> {
        let a = self.mb().pool.load(Ordering::Relaxed) as usize;
        // SAFETY: the mailbox's node stored its shared-range index there;
        // it stays mapped while the node runs.
        unsafe { crate::pool::Index::at(a) }
    }

    /// This instance's write journal (in its current mailbox).
    pub fn journal(&self) -> &'static crate::pool::Journal {
        &self.mb().journal
    }

    fn node_pid(&self) -> i32 {
        HOME.node_pid.load(Ordering::SeqCst) as i32
    }

    /// `DMI_yield`: asks the node whether to move; if so, parks until the
    /// node has moved this process (the copy returns `true` here, talking
    /// to its new mailbox) or given up (`false`, here, nothing lost).
    pub fn yield_now(&self) -> Result<bool, DmiError> {
        let n = HOME.yields.fetch_add(1, Ordering::Relaxed) + 1;
        trace_yield(n);
        let at = self.mb().move_at.load(Ordering::Relaxed);
        if at == 0 || n < at {
            return Ok(false);
        }
        HOME.state.store(HOME_RUNNING, Ordering::SeqCst);
        let home = &HOME as *const Home as usize;
        let out = self.exchange(Req::Yield { home, n }, None)?;
        if out.first() != Some(&1) {
            return Ok(false);
        }
        // A copy restored from this process's image parks here too, as
        // another process, a child of the node that restored it. That node
        // wrote its pid, the copy's mailbox and `restored` into HOME before
        // the copy ran (before, a copy judged by its pid whether it was
        // one and watched the pid in HOME, which still named the node that
        // dumped it: on another machine that pid is nobody, or anybody).
        // Both parked and copy watch their node, their parent, with
        // getppid: a node dying at any time is seen at the next look. A
        // copy dies with its node (PR_SET_PDEATHSIG from its first look)
        // and waits at most `xmove_hooks::copy_park_limit`. All set before PARKED: the
        // node dumps this process only then.
        HOME.restored.store(0, Ordering::SeqCst);
        HOME.state.store(HOME_PARKED, Ordering::SeqCst);
        let mut copy_since: Option<std::time::Instant> = None;
        loop {
            match HOME.state.load(Ordering::SeqCst) {
                HOME_MOVED => {
                    halfproc::member::resumed_after_restore();
                    // Die with the node that restored this copy (its
                    // parent), like a created instance dies with its node.
                    // SAFETY: prctl with integer arguments.
                    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
                    if node_gone(self.node_pid()) {
                        return Err(DmiError::Setup(format!(
                            "the node (pid {}) that moved this instance is gone",
                            self.node_pid()
                        )));
                    }
                    HOME.restored.store(0, Ordering::SeqCst);
                    HOME.state.store(HOME_RUNNING, Ordering::SeqCst);
                    return Ok(true);
                }
                HOME_STAYED => {
                    HOME.state.store(HOME_RUNNING, Ordering::SeqCst);
                    return Ok(false);
                }
                _ => {
                    let node = self.node_pid();
                    if HOME.restored.load(Ordering::SeqCst) != 0 {
                        let since = *copy_since.get_or_insert_with(|| {
                            // The restore cleared the death signal when it
                            // let the copy run; a node gone before this is
                            // seen just below.
                            // SAFETY: prctl with integer arguments.
                            unsafe {
                                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong)
                            };
                            std::time::Instant::now()
                        });
                        if node_gone(node) {
                            copy_ends(&format!(
                                "the node (pid {node}) that restored it is gone before the move \
                                 committed"
                            ));
                        }
                        let limit = crate::xmove_hooks::copy_park_limit();
                        if since.elapsed() > limit {
                            copy_ends(&format!(
                                "its move did not commit within {limit:?} (node pid {node})"
                            ));
                        }
                    } else if node_gone(node) {
                        return Err(DmiError::Setup(format!(
                            "the node (pid {node}) is gone while moving this instance"
                        )));
                    }
                    std::thread::sleep(PARK_POLL);
                }
            }
        }
    }

    /// Sends `req`, waits for the reply; with `dest` set, a read's bytes go
    /// there (by `dmwrite` or from staging) and the returned vector is empty.
    fn exchange(&self, req: Req, dest: Option<&mut [u8]>) -> Outcome {
        let enc = bincode::serialize(&req)
            .map_err(|e| DmiError::BadArgument(format!("unencodable request: {e}")))?;
        let need = enc.len().max(req.reply_bound()).max(ERR_ROOM);
        let mut g = lock(&self.mb().slot)?;
        if g.cap < need {
            let cap = need.next_power_of_two();
            let p = halfproc::alloc::malloc(cap);
            if p.is_null() {
                return Err(DmiError::BadArgument(format!(
                    "no room for a {cap}-byte staging buffer in the shared range"
                )));
            }
            if g.staging != 0 {
                // SAFETY: the old buffer came from halfproc's malloc below
                // and the node does not hold it (state IDLE).
                unsafe { halfproc::alloc::free(g.staging as *mut u8) };
            }
            g.staging = p as usize;
            g.cap = cap;
        }
        // SAFETY: state IDLE: the staging buffer is ours, `need` >= its size.
        unsafe { stage(&mut g, &enc) };
        g.dest = match (&dest, self.path) {
            (Some(d), ReplyPath::Dmwrite) if !d.is_empty() => d.as_ptr() as usize,
            _ => 0,
        };
        g.state = REQUEST;
        drop(g);
        self.mb().to_node.notify_one();
        if let Some(b) = self.mb().bell() {
            b.ring();
        }
        let mut g = lock(&self.mb().slot)?;
        while g.state != REPLY {
            let (ng, timed_out) = match self.mb().to_instance.wait_timeout(g, POLL) {
                Ok((g, r)) => (g, r.timed_out()),
                Err(e) => e
                    .into_inner()
                    .map(|(g, r)| (g, r.timed_out()))
                    .ok_or(DmiError::NotInitialized)?,
            };
            g = ng;
            if timed_out && g.state != REPLY && node_gone(self.node_pid()) {
                return Err(DmiError::Setup(format!(
                    "the node (pid {}) is gone",
                    self.node_pid()
                )));
            }
        }
        g.state = IDLE;
        // SAFETY: state REPLY (now IDLE): the staging buffer is ours.
        let bytes = unsafe { staged(&g) };
        match g.status {
            OK_WRITTEN => Ok(Vec::new()),
            OK_STAGED => match dest {
                Some(d) if d.len() == bytes.len() => {
                    d.copy_from_slice(bytes);
                    Ok(Vec::new())
                }
                Some(d) => Err(DmiError::Setup(format!(
                    "read of {} bytes answered with {}",
                    d.len(),
                    bytes.len()
                ))),
                None => Ok(bytes.to_vec()),
            },
            _ => Err(bincode::deserialize::<DmiError>(bytes)
                .unwrap_or_else(|e| DmiError::Setup(format!("undecodable error reply: {e}")))),
        }
    }

    /// `DMI_finalize` of a movable instance: the final barrier of all
    /// instances (after it, the instance only exits).
    pub fn finish(&self) -> Result<(), DmiError> {
        self.exchange(Req::Done, None).map(drop)
    }

    /// Any call, bytes of the outcome copied out of staging.
    pub fn call(&self, req: CallReq) -> Outcome {
        self.exchange(req.try_into()?, None)
    }

    /// `DMI_read` into the instance's (private) `buf`.
    pub fn read(&self, addr: i64, buf: &mut [u8], mode: ReadMode) -> Result<(), DmiError> {
        let req = Req::Read {
            items: vec![(addr, buf.len() as i64)],
            mode,
        };
        self.exchange(req, Some(buf)).map(drop)
    }
}
