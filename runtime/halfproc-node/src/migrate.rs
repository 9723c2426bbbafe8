//! Migration between node daemons, source side (the destination's is
//! [`crate::migrate_in`]), and checkpoint/restore of a program through its
//! daemon.
//!
//! Source: refuse (reads /proc only) -> connect to the destination -> offer
//! the program (`Offer` -> `Accept`; a refusal ends it here, nothing was
//! stopped) -> pause the stdin relay -> freeze and dump into memory on a thread of its own
//! (ptrace requests must come from the thread that attached) -> send
//! `MigrateIn` + `Pages`* + `PagesEnd` -> the destination restores the
//! process *stopped* and answers `Restored` -> `Commit` -> the destination
//! continues it and answers `Resumed` -> the original is killed. Any error
//! or timeout before `Resumed` resumes the original where it was, relays
//! included, and the error names what happened. A program with children
//! moves as a process tree: offered with its pids, frozen as a whole (no
//! yield point, no pre-copy), sent as `TreeIn` and each process's pages
//! (the destination's side: [`crate::migrate_tree_in`]).

use crate::access::Admitted;
use crate::daemon::Node;
use crate::migrate_dump::{Decision, Job, Outgoing};
use crate::migrate_tree::NotTaken;
use crate::program;
use crate::proto::{Conn, End, Msg, Outcome, CHUNK};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::time::timeout;

/// How long the source waits for each answer of the destination.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

type Progress = mpsc::UnboundedSender<Msg>;

fn say(p: &Progress, s: String) {
    let _ = p.send(Msg::Progress(s));
}

/// Local program `pid`, taken for `what` (one migration or checkpoint at a time).
pub(crate) fn take(
    node: &Node,
    pid: i32,
    what: &'static str,
) -> Result<Arc<program::Program>, String> {
    let prog = node
        .program(pid)
        .ok_or_else(|| format!("pid {pid} is not a program of this node (see halfproc ps)"))?;
    prog.acquire(what)?;
    Ok(prog)
}

/// Migrates local `pid` to the node at `to`; the reply for the client.
/// `admitted`: the request's admission, checked again once it is stopped.
pub async fn migrate_out(
    node: Arc<Node>,
    pid: i32,
    to: String,
    admitted: Option<Admitted>,
    progress: Progress,
) -> Msg {
    let prog = match take(&node, pid, "migrated") {
        Ok(p) => p,
        Err(e) => return Msg::Error(e),
    };
    let t0 = Instant::now();
    let r = migrate_acquired(&node, &prog, &to, admitted, &progress, t0).await;
    // Not migrated, not in doubt (those leave the state): it runs on here.
    if matches!(prog.state(), program::PState::Busy(_)) {
        prog.release();
        prog.resume_here();
    }
    r.unwrap_or_else(Msg::Error)
}

async fn migrate_acquired(
    node: &Arc<Node>,
    prog: &Arc<program::Program>,
    to: &str,
    admitted: Option<Admitted>,
    progress: &Progress,
    t0: Instant,
) -> Result<Msg, String> {
    let pid = prog.pid;
    let inos = prog.inos.clone();
    let inos2 = inos.clone();
    // A program with children moves with them, as a tree; the request's
    // admission holds for each of its processes.
    let listed = tokio::task::spawn_blocking(move || {
        crate::migrate_tree::admit_and_check(pid, &inos2, admitted)
    })
    .await
    .map_err(|e| e.to_string())?;
    let (listed, admitted) = match listed {
        Ok(l) => l,
        Err(NotTaken::Denied(why)) => {
            return Ok(Msg::Denied(format!(
                "{why}; pid {pid} was never stopped, it keeps running here"
            )))
        }
        Err(NotTaken::Refused(e)) => {
            return Err(format!(
                "pid {pid} cannot be migrated: {e}; it keeps running here"
            ))
        }
    };
    let procs: Vec<i32> = listed.iter().map(|p| p.pid).collect();
    let tree = procs.len() > 1;
    let procs2 = procs.clone();
    let (owner, image_bytes, mapped) =
        tokio::task::spawn_blocking(move || crate::migrate_tree::estimates(&procs2))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("pid {pid} cannot be migrated: {e}; it keeps running here"))?;
    // Before anything of it is read: may the destination be sent it?
    let conn = timeout(ANSWER_TIMEOUT, Conn::connect_dest(to, &node.ident))
        .await
        .map_err(|_| format!("connect to {to}: timed out; pid {pid} keeps running here"))?;
    let mut conn = match conn {
        Ok(c) => c,
        Err(crate::proto::Dest::Untrusted(why)) => {
            tracing::info!("migration of pid {pid} refused: {why}");
            return Ok(Msg::Denied(format!(
                "{why}; pid {pid} was never stopped, it keeps running here"
            )));
        }
        Err(crate::proto::Dest::Io(e)) => {
            return Err(format!(
                "destination {to}: {e}; pid {pid} keeps running here"
            ))
        }
    };
    let mode = match tree {
        false => crate::precopy::mode(),
        true => crate::precopy::Mode::Off("a process tree is moved frozen as a whole".into()),
    };
    // Before anything is stopped (a yield included): may it come?
    let size = (image_bytes, mapped);
    let tree_pids = if tree { procs } else { Vec::new() };
    let ticket = match offer(&mut conn, prog, &owner, size, (mode.on(), tree_pids)).await {
        Ok(t) => t,
        Err(refused) => {
            let never = |w: &str| {
                format!(
                    "destination {to} did not accept pid {pid}: {w}; pid {pid} was never \
                     stopped, it keeps running here"
                )
            };
            tracing::info!(
                "migration of pid {pid} to {to} refused by the offer: {}",
                refused.text()
            );
            return match refused {
                crate::admission::Refusal::Denied(w) => Ok(Msg::Denied(never(&w))),
                crate::admission::Refusal::Unable(w) => Err(never(&w)),
            };
        }
    };
    say(
        progress,
        format!("{to} accepted pid {pid} (ticket {ticket:016x}); stopping it"),
    );
    // A program that yields is moved from its next yield (or, if it does
    // not reach one in time, from where it is). A tree is frozen as a whole.
    let parking = match tree {
        true => crate::yield_point::Parking::NoPage,
        false => crate::yield_point::park(pid, crate::yield_point::wait_limit()).await,
    };
    match parking {
        crate::yield_point::Parking::NoPage => {}
        crate::yield_point::Parking::Parked(t) => say(
            progress,
            format!(
                "pid {pid} stopped at halfproc_yield() after {} ms",
                t.as_millis()
            ),
        ),
        crate::yield_point::Parking::NotReached(t) => say(
            progress,
            format!(
                "pid {pid} did not reach halfproc_yield() within {} ms: moving it from where it is",
                t.as_millis()
            ),
        ),
    }
    let stdin_offset = prog.pause_stdin().await;

    // Freeze and dump on a thread that stays the tracer until the decision.
    // Before it, pre-copy rounds while the program runs (if the kernel
    // tracks dirty pages), their pages streamed at once.
    let (pre_tx, mut pre_rx) = mpsc::channel::<Msg>(4);
    let pre_tx = if mode.on() {
        conn.send(&Msg::PreCopy)
            .await
            .map_err(|e| format!("destination {to}: {e}; pid {pid} keeps running here"))?;
        say(
            progress,
            format!("pre-copying pid {pid} to {to} while it runs"),
        );
        Some(pre_tx)
    } else {
        drop(pre_tx); // no rounds: `pre_rx` ends at once
        None
    };
    // Why the stopped program was let go (`Admitted::recheck`), if it was.
    let changed = Arc::new(std::sync::Mutex::new(None::<String>));
    let (changed2, changed3) = (changed.clone(), changed.clone());
    let admitted = Arc::new(admitted);
    let admitted2 = admitted.clone();
    let check = move || {
        let r = admitted.iter().try_for_each(Admitted::recheck);
        if let Err(why) = &r {
            *changed2.lock().unwrap() = Some(why.clone());
        }
        r
    };
    // The same after every pre-copy read, before it is sent (the program
    // runs: it may exec a set-user-ID program or turn non-dumpable).
    let pre_check = move || {
        let r = admitted2.iter().try_for_each(Admitted::recheck_precopy);
        if let Err(why) = &r {
            *changed3.lock().unwrap() = Some(why.clone());
        }
        r
    };
    let handles = crate::migrate_dump::spawn(Job {
        pid,
        inos,
        tree: tree.then_some(listed),
        mode,
        pre: pre_tx,
        pre_check: Box::new(pre_check),
        check: Box::new(check),
    })?;
    while let Some(m) = pre_rx.recv().await {
        conn.send(&m).await.map_err(|e| {
            format!("connection to {to} lost while pre-copying: {e}; pid {pid} keeps running here")
        })?;
    }
    let image = handles
        .image
        .await
        .map_err(|_| "dump thread died".to_string())?;
    if let Some(why) = changed.lock().unwrap().take() {
        return Ok(Msg::Denied(format!(
            "{why}; migration of pid {pid} to {to} refused, it keeps running here"
        )));
    }
    let image = image.map_err(|e| {
        if ended(pid) {
            format!("pid {pid}: {e}; it has ended here, nothing was moved")
        } else {
            format!("pid {pid}: {e}; it keeps running here")
        }
    })?;
    let bytes = image.bytes();
    let mode = image.mode();
    say(
        progress,
        format!(
            "frozen and dumped pid {pid} (read with {}): {mode}; streaming {:.1} MiB to {to}",
            image.read_with(pid),
            bytes as f64 / 1048576.0
        ),
    );
    let id = crate::daemon::random_id();
    let outcome = stream_and_commit(
        &mut conn,
        prog,
        (id, ticket),
        stdin_offset,
        owner,
        image,
        progress,
    )
    .await;
    let outcome = match outcome {
        Err(Failed::AfterCommit(why)) => {
            say(progress, format!("{why}; asking {to} whether it committed"));
            match learn_outcome(node, to, id, conn.peer, OUTCOME_WAIT).await {
                Learned::Committed(p) => Ok(p),
                Learned::Aborted(e) => Err(Failed::Before(format!(
                    "{why}; {to} says it did not commit: {e}"
                ))),
                Learned::Doubt(e) => Err(Failed::AfterCommit(format!("{why}; {e}"))),
            }
        }
        o => o,
    };
    let decision = match &outcome {
        Ok(_) => {
            // The lifecycle task of the program reports End::Migrated to the
            // origin once the pipes are drained.
            prog.leave(End::Migrated);
            Decision::Kill
        }
        Err(Failed::Before(_)) => Decision::Resume,
        Err(Failed::AfterCommit(_)) => {
            prog.set_in_doubt(to.to_string(), id, conn.peer);
            Decision::Hold
        }
    };
    let _ = handles.decide.send(decision);
    let frozen = handles.frozen.await.unwrap_or_default();
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
            mode,
        }),
        Err(Failed::Before(e)) => Err(format!(
            "migration of pid {pid} to {to} failed: {e}; pid {pid} was resumed here (stopped {} ms)",
            frozen.as_millis()
        )),
        Err(Failed::AfterCommit(e)) => Ok(Msg::InDoubt(format!(
            "migration of pid {pid} to {to} is in doubt: {e}. pid {pid} is kept stopped here \
             (not killed, not resumed), so it cannot run twice. Settle it with `halfproc migrate \
             --resolve {pid}` (asks {to} again), or decide: `--resolve {pid} --force resume` if \
             it does not run there, `--force kill` if it does"
        ))),
    }
}

/// Why a migration did not complete.
enum Failed {
    /// Before the commit, or the destination said it aborted: the copy is
    /// gone, the original may resume.
    Before(String),
    /// The commit was sent and the answer lost.
    AfterCommit(String),
}

/// How long a source keeps asking a destination for a lost outcome.
pub const OUTCOME_WAIT: Duration = Duration::from_secs(5);

enum Learned {
    Committed(i32),
    Aborted(String),
    Doubt(String),
}

/// Asks the node at `to` (node id `peer`) what became of migration `id`,
/// reconnecting until it answers or `wait` passes.
async fn learn_outcome(node: &Arc<Node>, to: &str, id: u64, peer: u64, wait: Duration) -> Learned {
    let deadline = Instant::now() + wait;
    let mut last = String::from("no answer");
    while Instant::now() < deadline {
        let ask = async {
            let mut c = Conn::connect(to, &node.ident)
                .await
                .map_err(|e| e.to_string())?;
            if c.peer != peer {
                return Ok(Learned::Doubt(format!(
                    "the node at {to} restarted (node {:016x}, was {peer:016x}) and cannot know",
                    c.peer
                )));
            }
            c.send(&Msg::Outcome { id })
                .await
                .map_err(|e| e.to_string())?;
            match c.recv().await.map_err(|e| e.to_string())? {
                Msg::OutcomeIs(Outcome::Committed { pid }) => Ok(Learned::Committed(pid)),
                Msg::OutcomeIs(Outcome::Aborted(e)) => Ok(Learned::Aborted(e)),
                Msg::OutcomeIs(Outcome::Unknown) => Ok(Learned::Doubt(format!(
                    "{to} has no record of migration {id:016x}"
                ))),
                Msg::OutcomeIs(Outcome::Pending) => Err("still deciding".to_string()),
                m => Err(format!("unexpected answer {m:?}")),
            }
        };
        match timeout(Duration::from_secs(2), ask).await {
            Ok(Ok(l)) => return l,
            Ok(Err(e)) => last = e,
            Err(_) => last = "no answer within 2 s".into(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Learned::Doubt(format!(
        "{to} could not tell within {} s whether it committed ({last})",
        wait.as_secs()
    ))
}

/// Settles program `pid` left in doubt (see [`Msg::Resolve`]).
pub async fn resolve(node: Arc<Node>, pid: i32, force: Option<bool>) -> Msg {
    let Some(prog) = node.program(pid) else {
        return Msg::Error(format!("pid {pid} is not a program of this node"));
    };
    let program::PState::InDoubt { to, id, node: peer } = prog.state() else {
        return Msg::Error(format!("pid {pid} is not in doubt; nothing to resolve"));
    };
    let learned = match force {
        Some(true) => Learned::Aborted("--force resume".into()),
        Some(false) => Learned::Committed(0),
        None => learn_outcome(&node, &to, id, peer, OUTCOME_WAIT).await,
    };
    // A tree was held whole (each of its processes stopped, none can fork):
    // it is settled whole, children first.
    let held: Vec<i32> = match halfproc_migrate::tree::processes(pid) {
        Ok(t) => t.iter().rev().map(|p| p.pid).collect(),
        Err(_) => vec![pid],
    };
    let signal_all = |sig| {
        for &p in &held {
            // SAFETY: signalling our own stopped child and its stopped tree.
            unsafe { libc::kill(p, sig) };
        }
    };
    match learned {
        Learned::Committed(new_pid) => {
            prog.leave(End::Migrated);
            if prog.origin.node == node.id && new_pid > 0 {
                if let Some(s) = node.session(prog.origin.session) {
                    s.set_place(prog.gen + 1, format!("{to} pid {new_pid}"));
                }
            }
            signal_all(libc::SIGKILL);
            Msg::Done(format!(
                "pid {pid}: the migration to {to} committed{}; the stopped original was killed",
                if new_pid > 0 {
                    format!(" (pid {new_pid} there)")
                } else {
                    " (forced)".into()
                }
            ))
        }
        Learned::Aborted(e) => {
            prog.set_running();
            prog.resume_here();
            signal_all(libc::SIGCONT);
            Msg::Done(format!(
                "pid {pid}: the migration to {to} did not commit ({e}); pid {pid} was resumed here"
            ))
        }
        Learned::Doubt(e) => Msg::InDoubt(format!(
            "pid {pid} is still in doubt: {e}; it stays stopped here"
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
        Ok(Ok(Msg::Denied(e))) => Err(format!("destination refused: {e}")),
        Ok(Ok(m)) => Ok(m),
    }
}

/// The program's offer to the destination, before anything is stopped:
/// the ticket of its `Accept`, or why it was refused (`Denied`: not
/// allowed there; else not possible now, or no answer).
async fn offer(
    conn: &mut Conn,
    prog: &program::Program,
    owner: &halfproc_migrate::Creds,
    (image_bytes, mapped): (u64, halfproc_migrate::restore_need::Mapped),
    (precopy, tree): (bool, Vec<i32>),
) -> Result<u64, crate::admission::Refusal> {
    use crate::admission::Refusal;
    conn.send(&Msg::Offer {
        program: prog.program.clone(),
        owner: Box::new(owner.clone()),
        origin: prog.origin.clone(),
        image_bytes,
        mapped,
        precopy,
        tree,
    })
    .await
    .map_err(|e| format!("sending the offer: {e}"))?;
    match timeout(ANSWER_TIMEOUT, conn.recv()).await {
        Ok(Ok(Msg::Accept { ticket, .. })) => Ok(ticket),
        Ok(Ok(Msg::Denied(w))) => Err(Refusal::Denied(w)),
        Ok(Ok(Msg::Error(e))) => Err(Refusal::Unable(e)),
        Ok(Ok(m)) => {
            Err(format!("unexpected answer to the offer: {}", crate::proto::name(&m)).into())
        }
        Ok(Err(e)) => Err(format!("connection lost while offering: {e}").into()),
        Err(_) => Err(format!("no answer to the offer for {}s", ANSWER_TIMEOUT.as_secs()).into()),
    }
}

async fn stream_and_commit(
    conn: &mut Conn,
    prog: &Arc<program::Program>,
    (id, ticket): (u64, u64),
    stdin_offset: u64,
    owner: halfproc_migrate::Creds,
    image: Outgoing,
    progress: &Progress,
) -> Result<i32, Failed> {
    let lost = |e: std::io::Error| {
        Failed::Before(format!(
            "connection to destination lost while streaming: {e}"
        ))
    };
    let (origin, gen, program) = (prog.origin.clone(), prog.gen + 1, prog.program.clone());
    let owner = Box::new(owner);
    let contents = match image {
        Outgoing::One(crate::precopy::Image {
            manifest,
            pages,
            included,
            ..
        }) => {
            conn.send(&Msg::MigrateIn {
                id,
                ticket,
                origin,
                gen,
                stdin_offset,
                program,
                owner,
                manifest,
                included,
            })
            .await
            .map_err(lost)?;
            vec![pages]
        }
        Outgoing::Tree {
            procs,
            manifests,
            pages,
            ..
        } => {
            conn.send(&Msg::TreeIn {
                id,
                ticket,
                origin,
                gen,
                stdin_offset,
                program,
                owner,
                procs,
                manifests: manifests
                    .into_iter()
                    .map(serde_bytes::ByteBuf::from)
                    .collect(),
            })
            .await
            .map_err(lost)?;
            pages
        }
    };
    for pages in contents {
        for c in pages.chunks(CHUNK) {
            conn.send(&Msg::Pages(c.to_vec())).await.map_err(lost)?;
        }
        conn.send(&Msg::PagesEnd).await.map_err(lost)?;
    }
    let new_pid = loop {
        match answer(conn, "restoring").await.map_err(Failed::Before)? {
            Msg::Restored { pid } => break pid,
            Msg::NeedFiles { ranges } => {
                let n = crate::files::serve(conn, prog.pid, &ranges)
                    .await
                    .map_err(Failed::Before)?;
                say(
                    progress,
                    format!(
                        "{} mapped file range(s) differ there: sent their contents ({:.1} MiB)",
                        ranges.len(),
                        n as f64 / 1048576.0
                    ),
                );
            }
            m => return Err(Failed::Before(format!("unexpected answer {m:?}"))),
        }
    };
    say(
        progress,
        format!("restored there as pid {new_pid} (stopped); committing"),
    );
    // From here on the destination may have continued the copy: a lost
    // answer is not a failure but a question (see `learn_outcome`).
    if let Err(e) = conn.send(&Msg::Commit).await {
        return Err(Failed::AfterCommit(format!(
            "connection lost while sending the commit: {e}"
        )));
    }
    match timeout(ANSWER_TIMEOUT, conn.recv()).await {
        Ok(Ok(Msg::Resumed)) => Ok(new_pid),
        // The destination decided and says so: it killed its copy.
        Ok(Ok(Msg::Error(e))) => Err(Failed::Before(format!("destination: {e}"))),
        Ok(Ok(m)) => Err(Failed::AfterCommit(format!("unexpected answer {m:?}"))),
        Ok(Err(e)) => Err(Failed::AfterCommit(format!(
            "connection to destination lost after the commit: {e}"
        ))),
        Err(_) => Err(Failed::AfterCommit(format!(
            "destination gave no answer to the commit for {}s",
            ANSWER_TIMEOUT.as_secs()
        ))),
    }
}

/// Whether `pid` has ended (a zombie not yet reaped counts): a failed
/// freeze then says so instead of "it keeps running".
pub(crate) fn ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(st) => st
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::ended;

    #[test]
    fn ended_sees_zombies_and_reaped_children() {
        assert!(!ended(std::process::id() as i32));
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        // Until it is reaped, the exited child is a zombie.
        while !ended(pid) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut child = child;
        child.wait().unwrap();
        assert!(ended(pid));
    }
}
