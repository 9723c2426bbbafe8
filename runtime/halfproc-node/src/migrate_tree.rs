//! What the source needs to know of a migrating program that may be a
//! process tree (see `halfproc_migrate::tree`) before it offers it.

use crate::access::Admitted;
use halfproc_migrate::restore_need::Mapped;
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
