//! The restorer's ops for shared anonymous memory ([`Backing::SharedAnon`]):
//! each object is made again as one shared anonymous mapping of its size
//! at a scratch place right above `R`, chosen free with it (`mmap(MAP_SHARED
//! | MAP_ANONYMOUS | MAP_FIXED)`), and each of its VMAs is moved from there to its address
//! with `mremap(MREMAP_FIXED)`, which keeps the VMA's offset in the object:
//! the copy has one object, shared by all its VMAs (an object split by
//! `mprotect` or a partial `munmap` stays one), named `/dev/zero (deleted)`
//! as the original's was, shared with the children the copy forks, whose
//! pages `MADV_DONTNEED` does not drop. The rest of the scratch mapping is
//! unmapped; the pages are then filled like any other VMA's (never moved:
//! see `restore_moves`).

use crate::error::{Error, Result};
use crate::image::{Backing, Manifest};
use std::collections::BTreeMap;

const PAGE: u64 = 4096;

/// One object: its size and its VMAs (start, length, offset), in image order.
struct Object {
    size: u64,
    vmas: Vec<(u64, u64, u64)>,
}

/// The image's shared anonymous objects, by object id, checked: the same
/// size in all its VMAs, page-aligned, each VMA inside it.
fn objects(m: &Manifest) -> Result<BTreeMap<u64, Object>> {
    let mut out: BTreeMap<u64, Object> = BTreeMap::new();
    for v in &m.vmas {
        let Backing::SharedAnon {
            object,
            offset,
            size,
        } = v.backing
        else {
            continue;
        };
        let len = v.end - v.start;
        let bad = |why: &str| {
            Err(Error::Image(format!(
                "shared anonymous VMA {:#x}-{:#x} (object {object}, offset {offset:#x}, \
                 size {size:#x}): {why}",
                v.start, v.end
            )))
        };
        if offset % PAGE != 0
            || size % PAGE != 0
            || offset.checked_add(len).is_none_or(|e| e > size)
        {
            return bad("not page-aligned or outside the object");
        }
        let o = out.entry(object).or_insert(Object {
            size,
            vmas: Vec::new(),
        });
        if o.size != size {
            return bad("another VMA gives the object another size");
        }
        o.vmas.push((v.start, len, offset));
    }
    Ok(out)
}

/// Room the scratch mapping needs above `R`: the largest object.
pub(crate) fn scratch_len(m: &Manifest) -> Result<u64> {
    Ok(objects(m)?.values().map(|o| o.size).max().unwrap_or(0))
}

/// Makes the image's shared anonymous objects and moves their VMAs into
/// place, readable and writable (the fills follow; each VMA gets its
/// protections after them). `at` is the scratch place above `R`, of
/// [`scratch_len`] bytes; called once the address space outside `R` is
/// free. The address space grows, while an object is made, by its parts
/// that no VMA maps (none, unless the process unmapped some).
pub(crate) fn map_objects(
    m: &Manifest,
    at: u64,
    op: &mut impl FnMut(libc::c_long, &[u64], u64, String),
) -> Result<()> {
    use libc::*;
    for (id, o) in objects(m)? {
        op(
            SYS_mmap,
            &[
                at,
                o.size,
                (PROT_READ | PROT_WRITE) as u64,
                (MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED) as u64,
                u64::MAX,
                0,
            ],
            at,
            format!("map shared anonymous object {id} ({:#x} bytes)", o.size),
        );
        for (start, len, offset) in o.vmas {
            op(
                SYS_mremap,
                &[
                    at + offset,
                    len,
                    len,
                    (MREMAP_MAYMOVE | MREMAP_FIXED) as u64,
                    start,
                ],
                start,
                format!("move shared anonymous {start:#x}+{len:#x} (object {id} at {offset:#x})"),
            );
        }
        op(
            SYS_munmap,
            &[at, o.size],
            0,
            format!("unmap the rest of shared anonymous object {id}"),
        );
    }
    Ok(())
}
