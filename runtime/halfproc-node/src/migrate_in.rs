//! Destination side of a migration: the source's `Offer` is checked and
//! answered before anything is stopped there ([`crate::admission`]); then
//! the image is received, restored stopped, and continued on `Commit`.

use crate::admission::{Proposal, Refusal, Ticket};
use crate::daemon::Node;
use crate::program::{self, How, Link, Pages};
use crate::proto::{Conn, Msg, Origin, Outcome};
use halfproc_migrate::{image, PageBuf};
use std::sync::Arc;
use std::time::Duration;

/// Destination side, from the source's `Offer`: checks it by the rules of
/// [`crate::admission`] and reserves what it needs, answers `Accept` (or
/// `Denied`/`Error`: the source has stopped nothing), then waits for the
/// migration (`PreCopy` or `MigrateIn`) for the ticket's hold.
pub async fn offer(node: Arc<Node>, mut conn: Conn, first: Msg) {
    let Msg::Offer {
        program,
        owner,
        origin,
        image_bytes,
        mapped,
        precopy,
        tree,
    } = first
    else {
        return;
    };
    let from = format!(
        "{program} (uid {}, about {:.1} MiB) from node {:016x}",
        owner.uid,
        image_bytes as f64 / 1048576.0,
        conn.peer
    );
    let p = Proposal {
        owner: &owner,
        origin: &origin,
        image_bytes,
        mapped,
        runs: None,
    };
    // A tree is restored with its pids: refused now if they are taken
    // here, rather than after it was stopped.
    let ticket = match halfproc_migrate::tree_restorable(&tree)
        .map_err(|e| Refusal::Unable(e.text()))
        .and_then(|()| node.admission.reserve(&node, &p))
    {
        Ok(t) => t,
        Err(r) => {
            tracing::info!(
                "offer of {from} refused before it was stopped: {}",
                r.text()
            );
            let m = match r {
                Refusal::Denied(w) => Msg::Denied(w),
                Refusal::Unable(w) => Msg::Error(w),
            };
            let _ = conn.send(&m).await;
            conn.drain(Duration::from_secs(2)).await;
            return;
        }
    };
    let hold = crate::admission::Admission::hold();
    tracing::info!("offer of {from} accepted: ticket {:016x}", ticket.id);
    let accept = Msg::Accept {
        ticket: ticket.id,
        hold_ms: hold.as_millis() as u64,
    };
    if conn.send(&accept).await.is_err() {
        return;
    }
    let next = match tokio::time::timeout(hold, conn.recv()).await {
        Ok(Ok(m @ Msg::MigrateIn { .. })) => m,
        Ok(Ok(m @ Msg::TreeIn { .. })) if !precopy && !tree.is_empty() => {
            crate::migrate_tree_in::tree_in(node, conn, m, ticket).await;
            return;
        }
        Ok(Ok(Msg::PreCopy)) if precopy => Msg::PreCopy,
        Ok(Ok(other)) => {
            let e = format!(
                "expected {}MigrateIn after Accept, got {}",
                if precopy { "PreCopy or " } else { "" },
                crate::proto::name(&other)
            );
            let _ = conn.send(&Msg::Error(e)).await;
            return;
        }
        // The source gave up before stopping the program: the ticket is returned.
        Ok(Err(_)) => return,
        Err(_) => {
            let e = format!(
                "ticket {:016x} expired: no migration came within {} ms of the Accept",
                ticket.id,
                hold.as_millis()
            );
            tracing::info!("{e}");
            // Returned before the answer: whoever reads it finds the slot free.
            drop(ticket);
            let _ = conn.send(&Msg::Error(e)).await;
            return;
        }
    };
    migrate_in(node, conn, next, ticket).await
}

/// Receives the image, restores it stopped, waits for `Commit`. A dropped
/// connection or any error kills the copy.
async fn migrate_in(node: Arc<Node>, mut conn: Conn, mut first: Msg, mut ticket: Ticket) {
    // Pre-copied pages, kept by address until the frozen image comes.
    let mut pre = std::collections::HashMap::new();
    if matches!(first, Msg::PreCopy) {
        loop {
            match conn.recv().await {
                Ok(Msg::PrePages { addr, data }) => {
                    halfproc_migrate::precopy::store(&mut pre, addr, &data)
                }
                Ok(m @ Msg::MigrateIn { .. }) => {
                    first = m;
                    break;
                }
                Ok(other) => {
                    let e = format!("expected pre-copied pages, got {other:?}");
                    let _ = conn.send(&Msg::Error(e)).await;
                    return;
                }
                Err(_) => return, // the source gave up before freezing
            }
        }
    }
    let Msg::MigrateIn {
        id,
        ticket: theirs,
        origin,
        gen,
        stdin_offset,
        program,
        owner,
        manifest,
        included,
    } = first
    else {
        return;
    };
    if !begin(&node, &mut conn, "MigrateIn", (theirs, &ticket), id).await {
        return;
    }
    let r = receive_and_restore(
        &node,
        &mut conn,
        &mut ticket,
        Incoming {
            origin,
            gen,
            stdin_offset,
            program,
            owner,
            included,
            pre,
        },
        manifest,
        id,
    )
    .await;
    report(&node, &mut conn, id, r).await;
}

/// Starts migration `id` if its message (`what`) names this connection's
/// ticket (`theirs`): its outcome is pending from now on. Else answers
/// with the error and returns false.
pub(crate) async fn begin(
    node: &Node,
    conn: &mut Conn,
    what: &str,
    (theirs, ticket): (u64, &Ticket),
    id: u64,
) -> bool {
    if theirs != ticket.id {
        let e = format!(
            "{what} names ticket {theirs:016x}, this connection's offer got {:016x}",
            ticket.id
        );
        let _ = conn.send(&Msg::Error(e)).await;
        return false;
    }
    node.set_outcome(id, Outcome::Pending);
    true
}

/// Records and answers a migration's failure (`Denied` for a refusal by
/// the offer's rules, else `Error`).
pub(crate) async fn report(node: &Node, conn: &mut Conn, id: u64, r: Result<(), Refusal>) {
    if let Err(e) = r {
        node.set_outcome(id, Outcome::Aborted(e.text().to_string()));
        let m = match e {
            Refusal::Denied(w) => Msg::Denied(w),
            Refusal::Unable(w) => Msg::Error(w),
        };
        let _ = conn.send(&m).await;
    }
}

/// What a `MigrateIn` says about the program besides its image.
struct Incoming {
    origin: Origin,
    gen: u64,
    stdin_offset: u64,
    program: String,
    owner: Box<halfproc_migrate::Creds>,
    /// After a pre-copy: which pages of the image follow.
    included: Option<Vec<bool>>,
    /// Pre-copied pages by address.
    pre: std::collections::HashMap<u64, Vec<u8>>,
}

/// Receives, checks by the rules of the offer, restores and commits. A
/// refusal by those rules is answered as such (`Denied` or `Error`), any
/// other failure as `Error` (a `String` becomes [`Refusal::Unable`]).
async fn receive_and_restore(
    node: &Arc<Node>,
    conn: &mut Conn,
    ticket: &mut Ticket,
    inc: Incoming,
    manifest: Vec<u8>,
    id: u64,
) -> Result<(), Refusal> {
    let Incoming {
        origin,
        gen,
        stdin_offset,
        program,
        owner,
        included,
        pre,
    } = inc;
    let m = image::parse_manifest(&manifest).map_err(|e| e.to_string())?;
    // The offer's rules again, with what arrived (its ticket holds what it
    // promised: only more bytes than estimated are counted anew).
    let p = Proposal {
        owner: &owner,
        origin: &origin,
        image_bytes: m.pages_len,
        mapped: halfproc_migrate::restore_need::mapped_in(&m),
        runs: Some(halfproc_migrate::restore_need::runs_in(&m)),
    };
    node.admission.confirm(node, ticket, &p)?;
    // Page-aligned and placed for the image (PageBuf::for_image), so the
    // restore moves its pages into place rather than copying them.
    let mut full = PageBuf::for_image(&m).map_err(|e| format!("memory for the pages: {e}"))?;
    let mut delta = Vec::new();
    let mut got = 0usize;
    loop {
        match conn
            .recv()
            .await
            .map_err(|e| format!("receiving pages: {e}"))?
        {
            Msg::Pages(c) if included.is_some() => delta.extend_from_slice(&c),
            Msg::Pages(c) => {
                let Some(to) = full.get_mut(got..got + c.len()) else {
                    return Err(format!(
                        "more page contents than the manifest's {} bytes",
                        m.pages_len
                    )
                    .into());
                };
                to.copy_from_slice(&c);
                got += c.len();
            }
            Msg::PagesEnd => break,
            other => return Err(format!("expected pages, got {other:?}").into()),
        }
    }
    if let Some(inc) = &included {
        let all = halfproc_migrate::precopy::image_pages(&m);
        halfproc_migrate::precopy::assemble(&all, inc, &delta, &pre, &mut full)
            .map_err(|e| e.to_string())?;
        drop(pre);
    } else if got != full.len() {
        return Err(format!(
            "{got} bytes of page contents, the manifest says {}",
            m.pages_len
        )
        .into());
    }
    let pages = full;
    // After a pre-copy this also checks that no write was missed.
    image::verify_pages(&m, &pages).map_err(|e| e.to_string())?;
    // Mapped files that are not the same here are copied from the original.
    let mut m = m;
    let ranges = crate::files::plan_copies(&mut m)?;
    let copies = match ranges.is_empty() {
        true => Vec::new(),
        false => crate::files::fetch(conn, ranges).await?,
    };
    let started = program::create(How::Restore {
        manifest: Box::new(m),
        pages: Pages::Memory(pages),
        stopped: true,
        owner: Some(*owner),
    })
    .await?;
    let copy = Copy {
        origin,
        gen,
        program,
        stdin_offset,
        id,
    };
    let fill = move |pid| {
        let r = crate::files::fill(pid, &copies);
        drop(copies);
        r
    };
    commit_and_run(node, conn, started, copy, (fill, || Ok(()))).await
}

/// A restored copy's program, as its `MigrateIn` described it.
pub(crate) struct Copy {
    pub(crate) origin: Origin,
    pub(crate) gen: u64,
    pub(crate) program: String,
    pub(crate) stdin_offset: u64,
    /// The migration's id (see `Outcome`).
    pub(crate) id: u64,
}

/// The end of a migration's restore, for one process or a tree: `fill`
/// completes the held copy, `Restored` is answered, then `Commit` awaited
/// and `whole` checked (the copy is still all there);
/// the copy is linked to its origin, adopted and let go, and `Resumed`
/// answered. Any failure before the copy is let go kills it.
pub(crate) async fn commit_and_run(
    node: &Arc<Node>,
    conn: &mut Conn,
    started: program::Started,
    c: Copy,
    (fill, whole): (
        impl FnOnce(i32) -> Result<(), String>,
        impl Fn() -> Result<(), String>,
    ),
) -> Result<(), Refusal> {
    let Copy {
        origin,
        gen,
        program,
        stdin_offset,
        id,
    } = c;
    let pid = started.pid;
    let go = started.go.clone();
    let decide = |yes: bool| {
        if let Some(g) = &go {
            let _ = g.send(yes);
        }
    };
    fill(pid).inspect_err(|_| decide(false))?;
    conn.send(&Msg::Restored { pid }).await.map_err(|e| {
        decide(false);
        e.to_string()
    })?;
    match conn.recv().await {
        // Still whole (a tree's copies all held), or no commit.
        Ok(Msg::Commit) => whole().inspect_err(|_| decide(false))?,
        other => {
            decide(false);
            return Err(format!("no commit ({other:?}); copy pid {pid} killed").into());
        }
    }
    let link = if origin.node == node.id {
        match node.session(origin.session) {
            Some(s) => Link::Local(s),
            None => {
                decide(false);
                return Err(format!("session {} is gone from this node", origin.session).into());
            }
        }
    } else {
        match Link::remote(&origin, gen, &node.addr, &node.ident, pid).await {
            Ok(l) => l,
            Err(e) => {
                decide(false);
                return Err(e.into());
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
    // Recorded before the copy runs: a source asking from now on learns
    // it committed, whatever happens to this connection.
    node.set_outcome(id, Outcome::Committed { pid });
    decide(true);
    wait_continued(pid).await;
    let _ = conn.send(&Msg::Resumed).await;
    Ok(())
}

/// Waits (at most 2 s) until the copy runs its program: no longer stopped,
/// and past the restorer's `rt_sigreturn` (a migration right after would
/// otherwise freeze the restorer). The restorer runs with every signal
/// blocked, `rt_sigreturn` sets the program's mask: a program that blocks
/// every signal itself is told apart by the timeout only.
async fn wait_continued(pid: i32) {
    const RESTORER_MASK: u64 = !((1 << (libc::SIGKILL - 1)) | (1 << (libc::SIGSTOP - 1)));
    for _ in 0..2000 {
        let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |k: &str| {
            st.lines()
                .find(|l| l.starts_with(k))
                .and_then(|l| l.split_whitespace().nth(1))
                .unwrap_or("")
                .to_string()
        };
        let stopped = field("State:").starts_with('T');
        let blocked = u64::from_str_radix(&field("SigBlk:"), 16).unwrap_or(RESTORER_MASK);
        if st.is_empty() || (!stopped && blocked != RESTORER_MASK) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
