//! What an image asks of the process that restores it, checked before
//! anything is forked: the same mapped files, the same special mappings
//! (vdso/vvar), and for an image taken from a set member, the set's range
//! mapped here; plus the address arithmetic the restore plan shares.

use crate::error::{Error, Result};
use crate::image::{Backing, Manifest};
use crate::procfs;
use std::collections::BTreeMap;

/// The range a restoring process that is a member of a kernel set
/// (`kernel_member`) shares with its set, and the copy with it: all of
/// [2^45, 2^46), whatever part of it the image's set (a runtime's region)
/// used. `None` for a process in no kernel set, or an image whose set range
/// lies outside (not a kernel set's).
pub(crate) fn kernel_set_range(
    set_range: Option<(u64, u64)>,
    kernel_member: bool,
) -> Option<(u64, u64)> {
    let whole = (
        halfproc_sys::range::HALFPROC_RANGE_START,
        halfproc_sys::range::HALFPROC_RANGE_END,
    );
    match set_range {
        _ if !kernel_member => None,
        Some((s, e)) if s < whole.0 || e > whole.1 => None,
        _ => Some(whole),
    }
}

/// An image that leaves a set range out is restored only by a process with
/// that whole range mapped shared (its own set's range, which the copy then
/// inherits), and no VMA of the image may reach into it. A member of a
/// kernel half-process set (`kernel_member`) shares all of [2^45, 2^46)
/// with its set whatever is mapped there (the restorer forks the copy into
/// the set with `clone3(CLONE_HALFPROC)`), so a set range inside it needs
/// no mapping.
pub(crate) fn check_set_range(
    m: &Manifest,
    own: &[procfs::MapsEntry],
    kernel_member: bool,
) -> Result<()> {
    let Some((start, end)) = m.set_range else {
        return Ok(());
    };
    if let Some(v) = m
        .vmas
        .iter()
        .find(|v| overlaps(start, end - start, v.start, v.end))
    {
        return Err(Error::Image(format!(
            "VMA {:#x}-{:#x} lies in the set range {start:#x}-{end:#x}",
            v.start, v.end
        )));
    }
    if kernel_set_range(Some((start, end)), kernel_member).is_some() {
        return Ok(());
    }
    let mut at = start;
    for o in own.iter().filter(|o| o.end > start && o.start < end) {
        if o.start > at || !o.shared {
            break;
        }
        at = o.end;
    }
    if at < end {
        return Err(Error::Restore(format!(
            "the image leaves {start:#x}-{end:#x} to its half-process set, but this process \
             has no shared mapping covering it (restore it from a member of a set)"
        )));
    }
    Ok(())
}

/// `[lo, hi)` without `[s, e)`, as exactly two `munmap` ranges (the blob's
/// op count must not depend on addresses); an empty one becomes page 0,
/// which is never mapped, so unmapping it succeeds and changes nothing.
pub(crate) fn unmap_ranges(lo: u64, hi: u64, keep: Option<(u64, u64)>) -> [(u64, u64); 2] {
    let empty = (0, 4096);
    let range = |a: u64, b: u64| if b > a { (a, b - a) } else { empty };
    match keep {
        None => [range(lo, hi), empty],
        Some((s, e)) => [range(lo, hi.min(s)), range(lo.max(e), hi)],
    }
}

/// Mapped files must be the same files (size, mtime, CRC) as at checkpoint.
pub(crate) fn check_files(m: &Manifest) -> Result<()> {
    match differing_files(m)?.first() {
        Some(&i) => Err(changed(m, i)),
        None => Ok(()),
    }
}

fn changed(m: &Manifest, i: usize) -> Error {
    let path = match &m.vmas[i].backing {
        Backing::File { path, .. } => path.as_str(),
        _ => "?",
    };
    Error::Restore(format!(
        "mapped file {path} changed since the checkpoint (or is missing here)"
    ))
}

/// Indexes of the image's file mappings whose file is not the same here
/// (changed, replaced or missing: size, mtime and CRC-32 are compared),
/// which the restore cannot map again. A caller that can get their
/// contents as the original saw them (a node daemon, from the frozen
/// original) makes them copies with [`copy_instead`]. A *shared* mapping
/// of such a file is an error: a copy would not be shared.
pub fn differing_files(m: &Manifest) -> Result<Vec<usize>> {
    let mut seen = BTreeMap::new();
    let mut out = Vec::new();
    for (i, v) in m.vmas.iter().enumerate() {
        if let Backing::File {
            path, id, shared, ..
        } = &v.backing
        {
            let same = *seen
                .entry(path.clone())
                .or_insert_with(|| procfs::file_id(path).is_ok_and(|here| &here == id));
            if !same {
                if *shared {
                    return Err(changed(m, i));
                }
                out.push(i);
            }
        }
    }
    Ok(out)
}

/// Makes the file mappings `idx` (from [`differing_files`]) anonymous: the
/// restore maps them as private memory with their protections and lays
/// their dumped pages over as before; the caller then writes the file's
/// contents, as the original saw them, into the restored (stopped) copy.
pub fn copy_instead(m: &mut Manifest, idx: &[usize]) {
    for &i in idx {
        if let Some(v) = m.vmas.get_mut(i) {
            v.backing = Backing::Anon;
        }
    }
}

/// vdso/vvar: each special mapping of the image must exist here with the
/// same size; the blob moves ours to the old addresses with `mremap`.
/// Returns (our start, old start, len).
pub(crate) fn match_specials(
    m: &Manifest,
    own: &[procfs::MapsEntry],
) -> Result<Vec<(u64, u64, u64)>> {
    let mut out = Vec::new();
    for v in &m.vmas {
        if let Backing::Special { name } = &v.backing {
            let mine = own.iter().find(|o| &o.path == name).ok_or_else(|| {
                Error::Restore(format!(
                    "image has {name} but this process has none (vdso disabled?)"
                ))
            })?;
            if mine.end - mine.start != v.end - v.start {
                return Err(Error::Restore(format!(
                    "{name} is {:#x} bytes here, {:#x} in the image (other kernel)",
                    mine.end - mine.start,
                    v.end - v.start
                )));
            }
            out.push((mine.start, v.start, v.end - v.start));
        }
    }
    Ok(out)
}

pub(crate) fn overlaps(a: u64, alen: u64, b: u64, bend: u64) -> bool {
    // Saturating: a hostile image's length must not wrap to a small end.
    a < bend && b < a.saturating_add(alen)
}

/// Whether the copy of `m` is made a member of the caller's set: on the
/// kernel backend (the caller is a member), unless the original was not
/// one ([`Manifest::outside_set`]: a plain `fork` of a member).
pub(crate) fn restored_in_set(m: &Manifest) -> bool {
    !m.outside_set && crate::mem::caller_is_member()
}
