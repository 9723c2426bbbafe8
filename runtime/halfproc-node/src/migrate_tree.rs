//! What the source needs to know of a program that may be a process tree
//! (see `halfproc_migrate::tree`) before it migrates or checkpoints it.

use crate::access::Admitted;
use halfproc_migrate::restore_need::Mapped;
use halfproc_migrate::tree::TreeProc;
use halfproc_migrate::Creds;

/// The request's admission (`admitted`, of the root) for each of `pids`:
/// the client may act on each (its owner, dumpable), checked now and
/// again once all are stopped. Empty without one. The error is the text
/// of a `Denied`.
pub(crate) fn admit_all(admitted: Option<Admitted>, pids: &[i32]) -> Result<Vec<Admitted>, String> {
    match admitted {
        None => Ok(Vec::new()),
        Some(a) if pids.len() == 1 => Ok(vec![a]),
        Some(a) => pids.iter().map(|&p| a.for_pid(p)).collect(),
    }
}

/// The owner of processes `pids` (all must have one), the estimated bytes
/// of their images together, and what the largest of their restores maps
/// (each process restores in its own address space).
pub(crate) fn estimates(pids: &[i32]) -> Result<(Creds, u64, Mapped), String> {
    let owner = Creds::of(pids[0]).map_err(|e| e.to_string())?;
    let mut bytes = 0u64;
    let mut mapped = Mapped::default();
    for &p in pids {
        let o = Creds::of(p).map_err(|e| e.to_string())?;
        if o != owner {
            return Err(format!(
                "process {p} of its tree runs as {o:?}, the program as {owner:?}: a tree moves \
                 with one owner"
            ));
        }
        bytes += crate::admission::image_estimate(p)?;
        let m = halfproc_migrate::restore_need::mapped(p, None).map_err(|e| e.to_string())?;
        mapped.bytes = mapped.bytes.max(m.bytes);
        mapped.vmas = mapped.vmas.max(m.vmas);
    }
    Ok((owner, bytes, mapped))
}

/// Why [`admit_and_check`] refused.
pub(crate) enum NotTaken {
    /// The client may not act on a process of the tree.
    Denied(String),
    /// A process holds what cannot be carried, or the tree changed.
    Refused(String),
}

/// The processes of program `pid` (it and its descendants, when it has
/// children), the request's admission for each (`admitted`, of the root:
/// [`admit_all`]), then the refusals of each (pipes with an inode in
/// `relayed` are the daemon's relays): in that order, so that a client
/// learns nothing (the refusals name what a process holds) of a process it
/// may not act on. Reads `/proc` only; nothing is stopped. The freeze
/// must then find the same processes (`checkpoint_tree_into`,
/// `freeze_and_dump_tree`).
pub(crate) fn admit_and_check(
    pid: i32,
    relayed: &[u64],
    admitted: Option<Admitted>,
) -> Result<(Vec<TreeProc>, Vec<Admitted>), NotTaken> {
    let refused = |e: halfproc_migrate::Error| NotTaken::Refused(e.to_string());
    let procs = match halfproc_migrate::refuse::children(pid).is_empty() {
        true => vec![TreeProc { pid, ppid: 0 }],
        false => halfproc_migrate::tree::processes(pid).map_err(refused)?,
    };
    let pids: Vec<i32> = procs.iter().map(|p| p.pid).collect();
    let admitted = admit_all(admitted, &pids).map_err(NotTaken::Denied)?;
    match procs.len() {
        1 => halfproc_migrate::refuse::check_relayed(pid, relayed).map_err(refused)?,
        // These processes, not the tree listed again: one that joined
        // meanwhile was not admitted (the freeze fails then).
        _ => halfproc_migrate::check_procs(&procs, relayed).map_err(refused)?,
    }
    Ok((procs, admitted))
}
