//! A process tree's migration, destination side (the source's is in
//! [`crate::migrate`]): after the offer, `TreeIn` brings the images of the
//! tree's processes and `Pages`* + `PagesEnd` their contents, one process
//! after the other. The tree is restored held at its gate (see
//! `halfproc_migrate::restore_tree_held`), as one process is restored
//! stopped, `Restored` names its root, and `Commit` lets it run
//! ([`crate::migrate_in::commit_and_run`]); anything else kills every copy.

use crate::admission::{Proposal, Refusal, Ticket};
use crate::daemon::Node;
use crate::migrate_in::{begin, commit_and_run, report, Copy};
use crate::program::{self, How, TreeContents, TreeImages};
use crate::proto::{Conn, Msg};
use halfproc_migrate::image::{self, Manifest};
use halfproc_migrate::restore_need::{mapped_in, runs_in, Mapped};
use halfproc_migrate::tree::TreeManifest;
use halfproc_migrate::PageBuf;
use std::sync::Arc;

/// Handles the `TreeIn` that followed an accepted offer on `conn`.
pub(crate) async fn tree_in(node: Arc<Node>, mut conn: Conn, first: Msg, mut ticket: Ticket) {
    let Msg::TreeIn {
        id,
        ticket: theirs,
        origin,
        gen,
        stdin_offset,
        program,
        owner,
        procs,
        manifests,
    } = first
    else {
        return;
    };
    if !begin(&node, &mut conn, "TreeIn", (theirs, &ticket), id).await {
        return;
    }
    let pids: Vec<i32> = procs.iter().map(|p| p.pid).collect();
    let tree = TreeManifest::new(procs);
    let r = async {
        let (manifests, pages) = receive(
            &node,
            &mut conn,
            &mut ticket,
            &owner,
            &origin,
            &tree,
            manifests,
        )
        .await?;
        let started = program::create(How::RestoreTree(Box::new(TreeImages {
            tree,
            manifests,
            pages: TreeContents::Memory(pages),
            owner: Some(*owner),
        })))
        .await?;
        let copy = Copy {
            origin,
            gen,
            program,
            stdin_offset,
            id,
        };
        // Every copy still there: one killed while held (the OOM killer, an
        // administrator) would leave the tree partial.
        let gone = || match pids.iter().find(|&&p| crate::migrate::ended(p)) {
            Some(p) => Err(format!(
                "copy pid {p} of the tree is gone; every copy was killed"
            )),
            None => Ok(()),
        };
        commit_and_run(&node, &mut conn, started, copy, (|_| gone(), gone)).await
    }
    .await;
    report(&node, &mut conn, id, r).await;
}

/// Receives and checks the images of `tree` by the rules of the offer.
async fn receive(
    node: &Arc<Node>,
    conn: &mut Conn,
    ticket: &mut Ticket,
    owner: &halfproc_migrate::Creds,
    origin: &crate::proto::Origin,
    tree: &TreeManifest,
    manifests: Vec<serde_bytes::ByteBuf>,
) -> Result<(Vec<Manifest>, Vec<PageBuf>), Refusal> {
    tree.check().map_err(|e| e.to_string())?;
    if manifests.len() != tree.procs.len() {
        return Err(format!(
            "{} images for a tree of {} processes",
            manifests.len(),
            tree.procs.len()
        )
        .into());
    }
    let ms = manifests
        .iter()
        .map(|b| image::parse_manifest(b).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    // The offer's rules again with what arrived: the contents of all, the
    // largest address space and blob (each process restores its own).
    let mapped = ms
        .iter()
        .map(mapped_in)
        .fold(Mapped::default(), |a, b| Mapped {
            bytes: a.bytes.max(b.bytes),
            vmas: a.vmas.max(b.vmas),
        });
    let p = Proposal {
        owner,
        origin,
        image_bytes: ms.iter().map(|m| m.pages_len).sum(),
        mapped,
        runs: ms.iter().map(runs_in).max(),
    };
    node.admission.confirm(node, ticket, &p)?;
    let mut pages = Vec::new();
    for m in &ms {
        pages.push(receive_pages(conn, m).await?);
    }
    for m in &ms {
        let differ = halfproc_migrate::differing_files(m).map_err(|e| e.to_string())?;
        if let Some(&i) = differ.first() {
            let v = &m.vmas[i];
            return Err(format!(
                "pid {}: the file mapped at {:#x}-{:#x} is not the same here; a process tree \
                 moves only where its mapped files are the same",
                m.pid, v.start, v.end
            )
            .into());
        }
    }
    Ok((ms, pages))
}

/// The page contents of `m`: `Pages`* then `PagesEnd`, checked.
async fn receive_pages(conn: &mut Conn, m: &Manifest) -> Result<PageBuf, Refusal> {
    let mut full = PageBuf::for_image(m).map_err(|e| format!("memory for the pages: {e}"))?;
    let mut got = 0usize;
    loop {
        match conn
            .recv()
            .await
            .map_err(|e| format!("receiving pages: {e}"))?
        {
            Msg::Pages(c) => {
                let Some(to) = full.get_mut(got..got + c.len()) else {
                    return Err(format!(
                        "pid {}: more page contents than the manifest's {} bytes",
                        m.pid, m.pages_len
                    )
                    .into());
                };
                to.copy_from_slice(&c);
                got += c.len();
            }
            Msg::PagesEnd if got == full.len() => break,
            Msg::PagesEnd => {
                return Err(format!(
                    "pid {}: {got} bytes of page contents, the manifest says {}",
                    m.pid, m.pages_len
                )
                .into())
            }
            other => {
                return Err(format!("expected pages, got {}", crate::proto::name(&other)).into())
            }
        }
    }
    image::verify_pages(m, &full).map_err(|e| e.to_string())?;
    Ok(full)
}
