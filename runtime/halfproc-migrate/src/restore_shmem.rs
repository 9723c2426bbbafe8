//! The restorer's ops for shared anonymous memory ([`Backing::SharedAnon`]):
//! each object is made again as one shared anonymous mapping of its size
//! at a scratch place right above `R`, chosen free with it (`mmap(MAP_SHARED
//! | MAP_ANONYMOUS | MAP_FIXED)`), and each of its VMAs is mapped from there
//! at its address with `mremap(old_size 0, MREMAP_FIXED)`, which duplicates
//! a shared mapping and keeps the VMA's offset in the object (so VMAs
//! mapping the same pages twice are made too):
//! the copy has one object, shared by all its VMAs (an object split by
//! `mprotect` or a partial `munmap` stays one), named `/dev/zero (deleted)`
//! as the original's was, shared with the children the copy forks, whose
//! pages `MADV_DONTNEED` does not drop. The scratch mapping is then
//! unmapped; the pages are then filled like any other VMA's (never moved:
//! see `restore_moves`).

use crate::error::{Error, Result};
use crate::image::{Backing, Manifest, Vma};
use crate::restore_plan::TASK_SIZE;
use std::collections::BTreeMap;

const PAGE: u64 = 4096;

/// One object: its size and its VMAs (start, length, offset), in image order.
struct Object {
    size: u64,
    /// Made with `MAP_NORESERVE` (any of its VMAs says so: the flag is the
    /// object's, given when it was made).
    noreserve: bool,
    vmas: Vec<(u64, u64, u64)>,
}

/// The image's shared anonymous objects, by object id, checked: the same
/// size in all its VMAs, page-aligned, each VMA inside it.
fn objects(vmas: &[Vma]) -> Result<BTreeMap<u64, Object>> {
    let mut out: BTreeMap<u64, Object> = BTreeMap::new();
    for v in vmas {
        let Backing::SharedAnon {
            object,
            offset,
            size,
            noreserve,
        } = v.backing
        else {
            continue;
        };
        let len = v.end.wrapping_sub(v.start);
        let bad = |why: &str| {
            Err(Error::Image(format!(
                "shared anonymous VMA {:#x}-{:#x} (object {object}, offset {offset:#x}, \
                 size {size:#x}): {why}",
                v.start, v.end
            )))
        };
        if v.end <= v.start || size == 0 || size > TASK_SIZE {
            return bad("empty, or larger than the user address space");
        }
        if offset % PAGE != 0
            || size % PAGE != 0
            || offset.checked_add(len).is_none_or(|e| e > size)
        {
            return bad("not page-aligned or outside the object");
        }
        let o = out.entry(object).or_insert(Object {
            size,
            noreserve: false,
            vmas: Vec::new(),
        });
        o.noreserve |= noreserve;
        if o.size != size {
            return bad("another VMA gives the object another size");
        }
        o.vmas.push((v.start, len, offset));
    }
    Ok(out)
}

/// Room the scratch mapping needs above `R`: the largest object.
pub(crate) fn scratch_len(m: &Manifest) -> Result<u64> {
    scratch_len_of(&m.vmas)
}

fn scratch_len_of(vmas: &[Vma]) -> Result<u64> {
    Ok(objects(vmas)?.values().map(|o| o.size).max().unwrap_or(0))
}

/// Makes the image's shared anonymous objects and moves their VMAs into
/// place, readable and writable (the fills follow; each VMA gets its
/// protections after them). `at` is the scratch place above `R`, of
/// [`scratch_len`] bytes; called once the address space outside `R` is
/// free. The address space grows, while an object is made, by the
/// object's size (the scratch mapping, unmapped once its VMAs are made).
///
/// In a process tree the objects were made (and filled) by the restoring
/// tool before it forked the tree, in `tree`: each VMA is mapped from
/// there instead, and the whole of `tree` is unmapped after.
pub(crate) fn map_objects(
    m: &Manifest,
    at: u64,
    tree: Option<&TreeShm>,
    op: &mut impl FnMut(libc::c_long, &[u64], u64, String),
) -> Result<()> {
    map_objects_of(&m.vmas, at, tree, op)
}

/// The shared anonymous objects of a process tree, made by the restoring
/// tool (`restore_tree`) before it forks the tree, so that its processes
/// share them: object id -> (address in `[at, at + len)`, size, made with
/// `MAP_NORESERVE`).
#[derive(Debug, Default)]
pub(crate) struct TreeShm {
    pub(crate) at: u64,
    pub(crate) len: u64,
    pub(crate) objects: BTreeMap<u64, (u64, u64, bool)>,
}

impl TreeShm {
    /// The objects of all `vmas` (of every image of the tree), checked as
    /// for one image and of one size everywhere, laid out from 0.
    pub(crate) fn layout<'a>(images: impl Iterator<Item = &'a [Vma]>) -> Result<TreeShm> {
        let mut t = TreeShm::default();
        for vmas in images {
            for (id, o) in objects(vmas)? {
                match t.objects.get_mut(&id) {
                    Some(&mut (_, size, _)) if size != o.size => {
                        return Err(Error::Image(format!(
                            "shared anonymous object {id} has size {size:#x} in one image of \
                             the tree and {:#x} in another",
                            o.size
                        )))
                    }
                    // The flag is the object's: any image that saw it.
                    Some((_, _, noreserve)) => *noreserve |= o.noreserve,
                    None => {
                        t.objects.insert(id, (t.len, o.size, o.noreserve));
                        t.len = t
                            .len
                            .checked_add(o.size)
                            .filter(|&l| l <= TASK_SIZE)
                            .ok_or_else(|| Error::Image("shared objects too large".into()))?;
                    }
                }
            }
        }
        Ok(t)
    }

    /// Moves the layout to start at `at`.
    pub(crate) fn place(&mut self, at: u64) {
        for (a, _, _) in self.objects.values_mut() {
            *a += at - self.at;
        }
        self.at = at;
    }
}

fn map_objects_of(
    vmas: &[Vma],
    at: u64,
    tree: Option<&TreeShm>,
    op: &mut impl FnMut(libc::c_long, &[u64], u64, String),
) -> Result<()> {
    use libc::*;
    for (id, o) in objects(vmas)? {
        if let Some(t) = tree {
            let &(obj, _, _) = t
                .objects
                .get(&id)
                .ok_or_else(|| Error::Image(format!("shared object {id} not made for the tree")))?;
            for (start, len, offset) in o.vmas {
                op(
                    SYS_mremap,
                    &[obj + offset, 0, len, (MREMAP_MAYMOVE | MREMAP_FIXED) as u64, start],
                    start,
                    format!("map shared anonymous {start:#x}+{len:#x} (tree object {id} at {offset:#x})"),
                );
            }
            continue;
        }
        let noreserve = if o.noreserve { MAP_NORESERVE } else { 0 };
        op(
            SYS_mmap,
            &[
                at,
                o.size,
                (PROT_READ | PROT_WRITE) as u64,
                (MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED | noreserve) as u64,
                u64::MAX,
                0,
            ],
            at,
            format!("map shared anonymous object {id} ({:#x} bytes)", o.size),
        );
        // `old_size` 0 makes a new mapping of the same object (at the
        // same offset) and leaves the scratch one in place: VMAs that map
        // the same pages twice (a "magic ring buffer", `mremap(p, 0, n,
        // MREMAP_MAYMOVE)`) are made as well as disjoint ones, in any order.
        for (start, len, offset) in o.vmas {
            op(
                SYS_mremap,
                &[
                    at + offset,
                    0,
                    len,
                    (MREMAP_MAYMOVE | MREMAP_FIXED) as u64,
                    start,
                ],
                start,
                format!("map shared anonymous {start:#x}+{len:#x} (object {id} at {offset:#x})"),
            );
        }
        op(
            SYS_munmap,
            &[at, o.size],
            0,
            format!("unmap the scratch mapping of shared anonymous object {id}"),
        );
    }
    if let Some(t) = tree {
        // Page 0 (never mapped) when there is none: the op count may not
        // depend on the tree (see `restore_plan`).
        let (at, len) = if t.len > 0 { (t.at, t.len) } else { (0, PAGE) };
        op(
            SYS_munmap,
            &[at, len],
            0,
            "unmap the tree's shared objects as made".into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vma(start: u64, end: u64, object: u64, offset: u64, size: u64) -> Vma {
        Vma {
            start,
            end,
            prot: libc::PROT_READ | libc::PROT_WRITE,
            backing: Backing::SharedAnon {
                object,
                offset,
                size,
                noreserve: object == 9,
            },
            grows_down: false,
            pages: Vec::new(),
        }
    }

    /// A ring buffer: one object of 2 pages mapped twice, back to back.
    /// Both VMAs are made from offset 0 of the scratch mapping, which is
    /// unmapped only after both (before, the first moved it away and the
    /// second failed).
    #[test]
    fn a_double_mapping_is_made_from_the_scratch_mapping() {
        let vmas = vec![
            vma(0x10000, 0x12000, 7, 0, 0x2000),
            vma(0x12000, 0x14000, 7, 0, 0x2000),
        ];
        let objs = objects(&vmas).unwrap();
        assert_eq!(objs.len(), 1);
        assert_eq!(objs[&7].vmas, [(0x10000, 0x2000, 0), (0x12000, 0x2000, 0)]);
        let mut got = Vec::new();
        let mut op = |nr: libc::c_long, a: &[u64], want: u64, _what: String| {
            got.push((nr, a.to_vec(), want));
        };
        map_objects_of(&vmas, 0x100000, None, &mut op).unwrap();
        let mremaps: Vec<_> = got.iter().filter(|o| o.0 == libc::SYS_mremap).collect();
        assert_eq!(mremaps.len(), 2);
        for (o, start) in mremaps.iter().zip([0x10000, 0x12000]) {
            // From the scratch mapping at the VMA's offset, old_size 0.
            assert_eq!(&o.1[..3], &[0x100000, 0, 0x2000]);
            assert_eq!(o.1[4], start);
            assert_eq!(o.2, start);
        }
        // Mapped first, unmapped last.
        assert_eq!((got[0].0, got.len()), (libc::SYS_mmap, 4));
        assert_eq!(got[3], (libc::SYS_munmap, vec![0x100000, 0x2000], 0));
    }

    /// Hostile images: an empty or inverted VMA, an object of size 0 or
    /// larger than the address space, an offset whose end wraps. Each is
    /// an image error (before, `v.end - v.start` and later sums could
    /// overflow: a panic in debug builds, a wrap in release ones).
    #[test]
    fn hostile_sizes_are_image_errors() {
        for v in [
            vma(0x2000, 0x1000, 1, 0, 0x1000),
            vma(0x1000, 0x1000, 1, 0, 0x1000),
            vma(0x1000, 0x2000, 1, 0, 0),
            vma(0x1000, 0x2000, 1, 0, TASK_SIZE + PAGE),
            vma(0x1000, 0x2000, 1, 0, !(PAGE - 1)),
            vma(0x1000, 0x2000, 1, !(PAGE - 1), 0x2000),
            vma(0x1000, 0x2000, 1, 0x1000, 0x1000),
        ] {
            let e = objects(std::slice::from_ref(&v)).err();
            assert!(matches!(e, Some(Error::Image(_))), "{v:?}: {e:?}");
            assert!(scratch_len_of(std::slice::from_ref(&v)).is_err());
        }
        let ok = vma(0x1000, 0x2000, 1, 0, TASK_SIZE);
        assert_eq!(scratch_len_of(&[ok]).unwrap(), TASK_SIZE);
    }

    /// An object made with `MAP_NORESERVE` is made again with it.
    #[test]
    fn noreserve_is_passed_to_mmap() {
        for (object, want) in [(9, libc::MAP_NORESERVE as u64), (1, 0)] {
            let mut flags = Vec::new();
            let mut op = |nr: libc::c_long, a: &[u64], _: u64, _: String| {
                if nr == libc::SYS_mmap {
                    flags.push(a[3]);
                }
            };
            map_objects_of(
                &[vma(0x1000, 0x2000, object, 0, 0x1000)],
                0x100000,
                None,
                &mut op,
            )
            .unwrap();
            assert_eq!(flags.len(), 1);
            assert_eq!(flags[0] & libc::MAP_NORESERVE as u64, want);
        }
    }

    /// Overlapping VMAs at other offsets, in any order, are accepted.
    #[test]
    fn overlapping_offsets_in_any_order_are_accepted() {
        let vmas = vec![
            vma(0x20000, 0x23000, 1, 0x1000, 0x4000),
            vma(0x10000, 0x12000, 1, 0, 0x4000),
            vma(0x30000, 0x34000, 1, 0, 0x4000),
        ];
        assert_eq!(objects(&vmas).unwrap()[&1].vmas.len(), 3);
    }
}
