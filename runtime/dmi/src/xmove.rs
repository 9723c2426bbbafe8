// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Moving a compute instance to another node at `DMI_yield` (`docs/dmi.md`,
//! "DMI_yield", cross-node moves).
//!
//! ```text
//!  source node S (instance's receiver)          target node T (inbox thread)
//!  parked? (dmread HOME) -> freeze and dump
//!  Image(token, id, origin, yields, home, manifest, pages) --> restore as own child,
//!                                                     Member::adopt, new mailbox,
//!                                                     dmwrite HOME.mailbox/node_pid
//!                                                     (the copy stays parked)
//!  T known failed? stay   <---------------------------- Ready(token, pid)
//!  (a DMI_create instance of a third node O:
//!   Moving(token) to O, wait for O's MovingSeen)
//!  T known failed (no O)? stay; else kill the original
//!  Commit(token) -------------------------------------> dmwrite HOME.state = MOVED,
//!                                                     serve the copy
//!  (Refused, a timeout, T failing before Ready, O refusing, failing or
//!   not answering: resume the original, HOME.state = STAYED, Abort(token)
//!   to T, which ends its copy; S failing before its word came: T ends the
//!   copy and tells the origin it is Lost)
//! ```
//!
//! The source kills its original only once the target confirmed (and the
//! origin recorded the move), so any failure before that leaves the
//! instance running where it was. The
//! instances are a movable run's ranks (`host.rs`) or, in other runs,
//! `DMI_create`'s (`guest.rs`): one kind per run, chosen by [`start`].

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use halfproc::Member;
use halfproc_migrate::{freeze_and_dump_member, image::Manifest};

use crate::addr::NodeId;
use crate::error::DmiError;
use crate::msg::InstMsg;
use crate::relocate::{restore_adopted, set_home, stdio_pipes, wait_parked};
use crate::ring::{Home, Mailbox, HOME_MOVED, HOME_STAYED};
use crate::runtime::Caller;
use crate::transport::report;

use crate::xmove_hooks::{answer_limit, commit_limit};
pub(crate) use crate::xmove_hooks::{hold_ms, test_hold};

#[path = "xmove_wait.rs"]
mod wait;
use wait::{origin_records, wait_word};

/// What a source hears back about its image.
enum Answer {
    Ready(i32),
    /// The origin recorded the move (`MovingSeen`).
    Seen,
    Refused(String),
}

/// A copy restored here and parked: its restoring thread waits for the
/// source's word (true: commit) and then serves it. The copy's parent is
/// that thread, which must live as long as the copy: a copy that sets
/// `PR_SET_PDEATHSIG` is killed when its parent *thread* exits.
struct Arrived {
    from: NodeId,
    word: mpsc::Sender<Word>,
    /// The instance, whose node made it, the yield it moved at.
    id: i64,
    origin: Option<NodeId>,
    yields: u64,
}

/// The source's word to a parked copy.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Word {
    Commit,
    Abort,
    /// The source failed before its word came: the original is gone (or
    /// failed with it), the copy is not the instance.
    SourceFailed,
}

/// What the node's host does with the rest (`host.rs`).
/// `origin` is the node whose `DMI_create` made the instance (`None`: a
/// movable run's rank).
pub(crate) trait Host: Send + Sync {
    /// Whether this node takes instance `id` now (else why not).
    fn accepts(&self, id: i64, origin: Option<NodeId>) -> Result<(), String>;
    /// A copy of instance `id` runs here now: serve it in this thread
    /// (its parent) until it ends or moves on.
    fn arrived(&self, a: Arrival);
    /// Prepares an arriving copy's mailbox (its next move) before it runs.
    fn arm(&self, id: i64, mailbox: &'static Mailbox, yields: u64);
    /// Plans, reports, barriers and ends of instances, the end of the run.
    fn message(&self, from: NodeId, m: InstMsg);
    /// Node `node` failed, or (`silent`: `Some(x)`) stopped talking to
    /// this node after it reported node `x`'s failure (after moves to it
    /// were called off).
    fn peer_dead(&self, _node: NodeId, _silent: Option<NodeId>) {}
    /// Target: the source's `Commit` of the copy of instance `id` (from
    /// node `from`) came; the copy is served next. On the engine's thread.
    fn commit_heard(&self, _id: i64, _origin: Option<NodeId>, _from: NodeId) {}
    /// Source: instance `id`'s original is gone, its copy on node `to`
    /// (moved at its yield number `yields`) is the instance now; `Commit`
    /// goes out next.
    fn committed(&self, _id: i64, _origin: Option<NodeId>, _to: NodeId, _yields: u64) {}
    /// Target: the copy of instance `id` (moved at `yields`) is ended
    /// because its source, node `from`, failed before its word came (or,
    /// `silent`, stopped talking as in [`Host::peer_dead`]); what to tell
    /// another node about it (its origin), if anything.
    fn source_failed(
        &self,
        _id: i64,
        _origin: Option<NodeId>,
        _from: NodeId,
        _yields: u64,
        _silent: Option<NodeId>,
    ) -> Option<(NodeId, InstMsg)> {
        None
    }
}

/// A copy that runs here now, after `yields` yields.
pub(crate) struct Arrival {
    pub id: i64,
    pub origin: Option<NodeId>,
    pub member: Member,
    pub mailbox: &'static Mailbox,
    pub yields: u64,
}

struct Mover {
    me: NodeId,
    /// Node processes of the run (members and spares): a move elsewhere
    /// is refused at the source.
    nodes: u32,
    caller: Caller,
    host: Box<dyn Host>,
    /// Sources waiting for an answer: token -> (the node that answers: the
    /// target, or the origin for `MovingSeen`; channel).
    waiting: Mutex<HashMap<u64, (NodeId, mpsc::Sender<Answer>)>>,
    /// Nodes known to have failed or to have stopped talking to this node,
    /// and which: a source checks it, under this lock, before it kills an
    /// original (`peer_dead` marks it under the lock).
    dead: Mutex<HashMap<NodeId, String>>,
    /// Copies waiting for Commit or Abort.
    arrived: Mutex<HashMap<u64, Arrived>>,
    /// Source: how each move away was decided, by token (true: commit;
    /// false: called off by the target's `Query`), under the `dead` lock
    /// (taken first), as the commit decision is.
    decided: Mutex<HashMap<u64, bool>>,
    next: Mutex<u64>,
}

static MOVER: OnceLock<Mover> = OnceLock::new();

/// Starts taking messages about instances (once per node process).
pub(crate) fn start(
    me: NodeId,
    nodes: u32,
    caller: Caller,
    host: Box<dyn Host>,
) -> Result<(), DmiError> {
    let m = Mover {
        me,
        nodes,
        caller,
        host,
        waiting: Mutex::new(HashMap::new()),
        dead: Mutex::new(HashMap::new()),
        arrived: Mutex::new(HashMap::new()),
        decided: Mutex::new(HashMap::new()),
        next: Mutex::new(0),
    };
    MOVER
        .set(m)
        .map_err(|_| DmiError::Setup("the instance mover started twice".into()))
}

fn mover() -> Option<&'static Mover> {
    MOVER.get()
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sends `m` to node `to` (this node too).
pub(crate) fn send(to: NodeId, m: InstMsg) -> Result<(), DmiError> {
    let mv = mover().ok_or(DmiError::NotInitialized)?;
    mv.caller.send_inst(to, m)
}

/// Makes every node's barriers fail with `why` (an instance of this node
/// failed and the node goes on); see [`crate::runtime::Caller::poison_barriers`].
pub(crate) fn poison_barriers(why: &str) {
    let Some(mv) = mover() else { return };
    if let Err(e) = mv.caller.poison_barriers(why.to_string()) {
        report(&format!("dmi: cannot tell node 0 that {why}: {e}"));
    }
}

/// From the engine: a message about instances from node `from`. It must
/// not block: restoring runs on a thread of its own.
pub(crate) fn inbox(from: NodeId, m: InstMsg) {
    let Some(mv) = mover() else {
        report(&format!(
            "dmi: a message about instances from node {from} reached a node that hosts none"
        ));
        return;
    };
    match m {
        InstMsg::Image {
            token,
            id,
            origin,
            yields,
            home,
            manifest,
            pages,
        } => {
            let spawned = std::thread::Builder::new()
                .name(format!("dmi-arrive-{id}"))
                .spawn(
                    move || match take_in(mv, id, origin, home, &manifest, &pages) {
                        Ok((member, mailbox)) => {
                            let (tx, rx) = mpsc::channel();
                            let arrived = Arrived {
                                from,
                                word: tx,
                                id,
                                origin,
                                yields,
                            };
                            locked(&mv.arrived).insert(token, arrived);
                            let pid = member.pid();
                            let _ = mv.caller.send_inst(from, InstMsg::Ready { token, pid });
                            let word = wait_word(mv, token, from, id, &rx);
                            locked(&mv.arrived).remove(&token);
                            if word == Word::Commit {
                                test_hold(
                                    "DMI_TEST_SERVE_DELAY",
                                    mv.me,
                                    &format!(
                                        "instance {id}{} from node {from} committed; its copy \
                                         held back",
                                        of(mv, origin)
                                    ),
                                );
                                let a = Arrival {
                                    id,
                                    origin,
                                    member,
                                    mailbox,
                                    yields,
                                };
                                run_copy(mv, from, home as usize, a);
                            } else {
                                end_copy(member, mailbox);
                            }
                        }
                        Err(e) => {
                            let why = match e {
                                DmiError::Setup(s) => s,
                                e => e.to_string(),
                            };
                            report(&format!(
                                "dmi: node {}: refusing instance {id} from node {from}: {why}",
                                mv.me
                            ));
                            let _ = mv.caller.send_inst(from, InstMsg::Refused { token, why });
                        }
                    },
                );
            if let Err(e) = spawned {
                let why = format!("no thread to restore with: {e}");
                let _ = mv.caller.send_inst(from, InstMsg::Refused { token, why });
            }
        }
        InstMsg::Ready { token, pid } => {
            if !answer(mv, from, token, Answer::Ready(pid)) {
                // The source gave up on it (and its Abort may have come
                // before the copy waited for it): the copy ends now.
                let _ = mv.caller.send_inst(from, InstMsg::Abort { token });
            }
        }
        InstMsg::Refused { token, why } => {
            answer(mv, from, token, Answer::Refused(why));
        }
        InstMsg::MovingSeen { token, refused } => {
            answer(
                mv,
                from,
                token,
                refused.map_or(Answer::Seen, Answer::Refused),
            );
        }
        InstMsg::Query { token } => {
            // Under the lock of the commit decision: a move not decided yet
            // is called off (the source resumes its original then).
            let dead = locked(&mv.dead);
            let commit = *locked(&mv.decided).entry(token).or_insert(false);
            drop(dead);
            if !commit {
                let _ = mv.caller.send_inst(from, InstMsg::Abort { token });
            }
            // Else `Commit` follows (or this node fails: `SourceFailed`).
        }
        InstMsg::Commit { token } => word(mv, token, Word::Commit),
        InstMsg::Abort { token } => word(mv, token, Word::Abort),
        other => mv.host.message(from, other),
    }
}

/// From the engine: node `node` failed; moves to it are off. Returns what
/// the engine sends before it reports the failure to the other nodes
/// (which stop reading this node then): the losses of copies from `node`.
#[must_use]
pub(crate) fn peer_dead(node: NodeId) -> Vec<(NodeId, InstMsg)> {
    gone(node, None)
}

/// From the engine: node `node` reported node `failed`'s failure and stops
/// talking to this node (it reads nothing more from it and this node
/// nothing more from it): as if it had failed, for moves and instances
/// between the two (`docs/dmi.md`, "Not done").
#[must_use]
pub(crate) fn peer_silent(node: NodeId, failed: NodeId) -> Vec<(NodeId, InstMsg)> {
    gone(node, Some(failed))
}

fn gone(node: NodeId, silent: Option<NodeId>) -> Vec<(NodeId, InstMsg)> {
    let Some(mv) = mover() else {
        return Vec::new();
    };
    let how = match silent {
        Some(x) => format!("it stopped talking after node {x} failed (node {node})"),
        None => format!("it failed (node {node})"),
    };
    // First: a source about to kill an original for a move to it sees it.
    let why = match silent {
        Some(x) => format!("node {node} stopped talking to this node after node {x} failed"),
        None => format!("node {node} failed"),
    };
    // A failure says more than a silence (which may come first).
    let mut dead = locked(&mv.dead);
    if silent.is_none() || !dead.contains_key(&node) {
        dead.insert(node, why);
    }
    drop(dead);
    let mut w = locked(&mv.waiting);
    for (_, (to, tx)) in w.iter() {
        if *to == node {
            let _ = tx.send(Answer::Refused(how.clone()));
        }
    }
    w.retain(|_, (to, _)| *to != node);
    drop(w);
    // Copies from it: the source can no longer commit.
    let mut tell = Vec::new();
    for a in locked(&mv.arrived).values() {
        if a.from == node && a.word.send(Word::SourceFailed).is_ok() {
            tell.extend(
                mv.host
                    .source_failed(a.id, a.origin, node, a.yields, silent),
            );
        }
    }
    locked(&mv.arrived).retain(|_, a| a.from != node);
    mv.host.peer_dead(node, silent);
    tell
}

fn word(mv: &Mover, token: u64, w: Word) {
    let a = locked(&mv.arrived).remove(&token);
    if let Some(a) = a {
        if w == Word::Commit {
            // Before the next event (the source's failure, say) is handled.
            mv.host.commit_heard(a.id, a.origin, a.from);
        }
        let _ = a.word.send(w);
    }
}

/// An answer from node `from` to the source waiting with `token`; false if
/// none waits for it from that node.
fn answer(mv: &Mover, from: NodeId, token: u64, a: Answer) -> bool {
    let mut w = locked(&mv.waiting);
    if w.get(&token).is_none_or(|(node, _)| *node != from) {
        return false;
    }
    if let Some((_, tx)) = w.remove(&token) {
        let _ = tx.send(a);
    }
    true
}

/// From the engine: node `node`'s connection is closed (a message to it
/// was not sent): sources waiting for its answer are refused now.
pub(crate) fn unreachable(node: NodeId) {
    let Some(mv) = mover() else { return };
    let how = format!("the connection to node {node} is closed");
    let mut w = locked(&mv.waiting);
    for (_, (to, tx)) in w.iter() {
        if *to == node {
            let _ = tx.send(Answer::Refused(how.clone()));
        }
    }
    w.retain(|_, (to, _)| *to != node);
}

fn end_copy(member: Member, mailbox: &'static Mailbox) {
    let _ = member.kill(libc::SIGKILL);
    let _ = member.join();
    // SAFETY: the copy is dead and nobody else has its new mailbox.
    unsafe { mailbox.release() };
}

/// Target: restores the image as a child of this node in its set, adopts
/// it and gives it a mailbox; the copy stays parked.
fn take_in(
    mv: &Mover,
    id: i64,
    origin: Option<NodeId>,
    home: u64,
    manifest: &[u8],
    pages: &[u8],
) -> Result<(Member, &'static Mailbox), DmiError> {
    static ARRIVE_DELAY: OnceLock<Option<u64>> = OnceLock::new();
    let delay = ARRIVE_DELAY.get_or_init(|| {
        let v = std::env::var("DMI_TEST_ARRIVE_DELAY_MS").ok()?;
        let ms = v.parse::<u64>().ok();
        if ms.is_none() {
            report(&format!(
                "dmi: node {}: DMI_TEST_ARRIVE_DELAY_MS={v:?} ignored (want MS)",
                mv.me
            ));
        }
        ms
    });
    if let Some(ms) = *delay {
        // Tests only: a window to kill this node in while it restores.
        report(&format!(
            "dmi: node {}: restoring instance {id} (test delay {ms} ms)",
            mv.me
        ));
        std::thread::sleep(Duration::from_millis(ms));
    }
    mv.host.accepts(id, origin).map_err(DmiError::Setup)?;
    let m: Manifest = bincode::deserialize(manifest)
        .map_err(|e| DmiError::Setup(format!("undecodable image of instance {id}: {e}")))?;
    // The image's relayed stdio pipes become this node's own stdio (which
    // `dmi run` relays too).
    let inherit = m
        .fds
        .iter()
        .filter(|f| f.relayed.is_some())
        .map(|f| (f.fd, f.fd))
        .collect();
    let set = crate::serve::node_set()?;
    let what = format!("instance {id}");
    let (member, mailbox) = restore_adopted(set, &m, pages, inherit, home as usize, &what)?;
    crate::relocate::test_kill_resumed(mv.me, id, member.pid());
    Ok((member, mailbox))
}

/// Target: the source killed its original; the copy runs on here, served
/// by this thread.
fn run_copy(mv: &Mover, from: NodeId, home: usize, a: Arrival) {
    let state = home + std::mem::offset_of!(Home, state);
    let id = a.id;
    // Before the copy runs on: it may reach its next yield without calling
    // this node (hits from the frames).
    mv.host.arm(id, a.mailbox, a.yields);
    if let Err(e) = set_home(a.member.pid(), state, &[HOME_MOVED]) {
        // The original is gone already: the instance is lost.
        report(&format!(
            "dmi: node {}: instance {id} from node {from} is lost: {e}",
            mv.me
        ));
        end_copy(a.member, a.mailbox);
        std::process::exit(crate::runtime::PEER_FAILED_EXIT);
    }
    let of = a.origin.map_or(String::new(), |o| format!(" (node {o}'s)"));
    report(&format!(
        "dmi: node {}: instance {id}{of} arrived from node {from}: pid {}",
        mv.me,
        a.member.pid()
    ));
    mv.host.arrived(a);
}

/// A done move away from this node.
pub struct Sent {
    pub pid: i32,
    pub bytes: u64,
    pub dump: Duration,
    pub frozen: Duration,
    pub total: Duration,
}

/// Source: moves the instance `old` (`id`, told to move at its yield
/// number `yields`, parking with its [`Home`] at `home`) to node `to`. On
/// error the original runs on here (told so through its home) and nothing
/// of it stays at the target.
pub(crate) fn send_away(
    old: Member,
    id: i64,
    origin: Option<NodeId>,
    yields: u64,
    home: usize,
    to: NodeId,
) -> Result<Sent, DmiError> {
    let t0 = Instant::now();
    let pid = old.pid();
    let state = home + std::mem::offset_of!(Home, state);
    // Whatever fails, the instance (told to move, so parking) is told to
    // run on here: one that parks later sees STAYED and goes on.
    let stay = |e: DmiError| {
        let _ = set_home(pid, state, &[HOME_STAYED]);
        e
    };
    wait_parked(pid, home).map_err(stay)?;
    let mv = mover().ok_or_else(|| {
        stay(DmiError::Setup(
            "this node moves no instances between nodes (only a program started with \
             DMI_init, or a movable run, does)"
                .into(),
        ))
    })?;
    if to >= mv.nodes {
        return Err(stay(DmiError::BadArgument(format!(
            "there is no node {to} (the run has {})",
            mv.nodes
        ))));
    }
    if to == mv.me {
        return Err(stay(DmiError::BadArgument(format!(
            "node {to} is this node (a move within it takes no @NODE)"
        ))));
    }
    test_hold(
        "DMI_TEST_AWAY_DELAY",
        mv.me,
        &format!(
            "instance {id}{} moves to node {to} at yield {yields}; held back",
            of(mv, origin)
        ),
    );
    // Before the instance is stopped: a node known to have failed gets
    // nothing (its connection is closed).
    let known = locked(&mv.dead).get(&to).cloned();
    if let Some(why) = known {
        return Err(stay(DmiError::Setup(why)));
    }
    let set = crate::serve::node_set().map_err(stay)?;
    let range = (set.base() as u64, set.base() as u64 + set.size());
    let inos: Vec<u64> = stdio_pipes(pid).iter().map(|&(_, i)| i).collect();
    let dumped = freeze_and_dump_member(pid, &inos, Some(range)).map_err(|e| {
        stay(DmiError::Setup(format!(
            "checkpoint of instance pid {pid}: {e}"
        )))
    })?;
    let dump = dumped.frozen_for();
    let manifest = match bincode::serialize(&dumped.manifest) {
        Ok(m) => m,
        Err(e) => {
            dumped.resume();
            return Err(stay(DmiError::Setup(format!("encoding the image: {e}"))));
        }
    };
    let bytes = dumped.manifest.pages_len;
    let token = {
        let mut n = locked(&mv.next);
        *n += 1;
        (u64::from(mv.me) << 40) | *n
    };
    let (tx, rx) = mpsc::channel();
    locked(&mv.waiting).insert(token, (to, tx));
    let image = InstMsg::Image {
        token,
        id,
        origin,
        yields,
        home: home as u64,
        manifest,
        pages: dumped.pages.to_vec(),
    };
    let heard = match mv.caller.send_inst(to, image) {
        Ok(()) => rx
            .recv_timeout(answer_limit())
            .unwrap_or_else(|_| Answer::Refused(format!("no answer within {:?}", answer_limit()))),
        Err(e) => Answer::Refused(e.to_string()),
    };
    locked(&mv.waiting).remove(&token);
    match heard {
        Answer::Ready(new) => {
            test_hold(
                "DMI_TEST_READY_LATE",
                mv.me,
                &format!(
                    "instance {id}{} ready at node {to}; Ready heard late",
                    of(mv, origin)
                ),
            );
            let deadline = Instant::now() + commit_limit();
            test_hold(
                "DMI_TEST_READY_DELAY",
                mv.me,
                &format!(
                    "instance {id}{} ready at node {to}; commit held back",
                    of(mv, origin)
                ),
            );
            // The origin, a third node, records where the instance goes
            // before the original is killed; its answer decides the move
            // (it refuses a move to a node it knows failed).
            let third = origin.filter(|&o| o != mv.me && o != to);
            let known = locked(&mv.dead).get(&to).cloned();
            if let Some(why) = known {
                dumped.resume();
                return Err(stay(DmiError::Setup(format!("{why} before the commit"))));
            }
            // After `Moving`, the origin may have recorded the move: an
            // error tells it the instance is here (`At`, same yield: it
            // replaces `Moving`), behind `Moving` on the same connection.
            let back = |dumped: halfproc_migrate::Dumped, why: String| {
                dumped.resume();
                let _ = mv.caller.send_inst(to, InstMsg::Abort { token });
                if let Some(o) = third {
                    let node = mv.me;
                    let _ = mv.caller.send_inst(o, InstMsg::At { id, node, yields });
                }
                Err(stay(DmiError::Setup(why)))
            };
            let late = || {
                format!(
                    "the commit came later than {:?} after node {to}'s answer",
                    commit_limit()
                )
            };
            if let Some(o) = third {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return back(dumped, late());
                }
                if let Err(why) = origin_records(mv, token, o, id, to, yields, left) {
                    let why = format!("node {o} (its origin) did not record the move: {why}");
                    return back(dumped, why);
                }
            }
            {
                let dead = locked(&mv.dead);
                if Instant::now() >= deadline {
                    drop(dead);
                    return back(dumped, late());
                }
                // Without a third node's word, this node decides: a target
                // known to have failed gets nothing. (With it, the origin
                // decided: it records the loss when it sees the target fail.)
                if let Some(why) = dead.get(&to).filter(|_| third.is_none()) {
                    let why = format!("{why} before the commit");
                    drop(dead);
                    dumped.resume();
                    return Err(stay(DmiError::Setup(why)));
                }
                // Node `to` asked after the move (it waited past its word
                // limit) and was told it is off: no commit now.
                let mut decided = locked(&mv.decided);
                if decided.remove(&token) == Some(false) {
                    drop(decided);
                    drop(dead);
                    let why = format!("node {to} asked after the move before the commit");
                    return back(dumped, why);
                }
                decided.insert(token, true);
                drop(decided);
                // Under the lock: a failure of `to` marked after this finds
                // the instance recorded as moving there (`peer_dead`). The
                // kill, which waits for the original's end, comes after (the
                // engine marks failures under this lock).
                mv.host.committed(id, origin, to, yields);
            }
            let frozen = dumped.kill();
            // The original's slot: its exit (SIGKILL) is recorded by the reaper.
            let _ = old.join();
            test_hold(
                "DMI_TEST_COMMIT_DELAY",
                mv.me,
                &format!(
                    "instance {id}{} committed to node {to}; Commit held back",
                    of(mv, origin)
                ),
            );
            if let Err(e) = mv.caller.send_inst(to, InstMsg::Commit { token }) {
                // Not an error of the move: the original is gone and there
                // is no going back. This node's engine has stopped (this
                // node is failing): node `to` ends its copy when it sees
                // this node fail (`Word::SourceFailed`) and tells the origin.
                report(&format!(
                    "dmi: node {}: instance {id}: no Commit to node {to}: this node's engine \
                     has stopped ({e})",
                    mv.me
                ));
            }
            // A `Query` after this is answered `Abort`, behind the `Commit`
            // (which ends the target's wait).
            locked(&mv.decided).remove(&token);
            Ok(Sent {
                pid: new,
                bytes,
                dump,
                frozen,
                total: t0.elapsed(),
            })
        }
        Answer::Seen => {
            dumped.resume();
            let _ = mv.caller.send_inst(to, InstMsg::Abort { token });
            Err(stay(DmiError::Setup(format!(
                "node {to} sent a wrong answer"
            ))))
        }
        Answer::Refused(why) => {
            dumped.resume();
            let _ = mv.caller.send_inst(to, InstMsg::Abort { token });
            Err(stay(DmiError::Setup(format!("node {to} refused: {why}"))))
        }
    }
}

/// How a report names an instance of another node (" (node O's)").
fn of(mv: &Mover, origin: Option<NodeId>) -> String {
    origin
        .filter(|&o| o != mv.me)
        .map_or(String::new(), |o| format!(" (node {o}'s)"))
}
