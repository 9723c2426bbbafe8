//! Shared anonymous memory (`mmap(MAP_SHARED | MAP_ANONYMOUS)`, or a
//! shared mapping of `/dev/zero`): a shmem object the kernel names
//! `/dev/zero (deleted)` in `/proc/PID/maps`. One that no other process
//! maps (a *lone* object) is carried: its pages are dumped whole, like a
//! deleted file's, and the restorer makes a new shared anonymous object of
//! the same size and moves each of its VMAs to its address at its offset
//! (see `restore_shmem`). An object also mapped by another process is
//! refused naming that process (its writes would no longer be seen), and
//! so is one while some process's maps cannot be read (it may map it).

use crate::error::Refusal;
use crate::procfs::{self, MapsEntry};
use std::collections::BTreeMap;
use std::fs;
use std::sync::OnceLock;

/// How the kernel names a shared anonymous object in `/proc/PID/maps`.
pub const SHARED_ANON: &str = "/dev/zero (deleted)";

/// The device of the kernel's internal shmem mount, which holds every
/// shared anonymous object: read from a mapping of our own, once.
fn shmem_dev() -> Option<(u32, u32)> {
    static DEV: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    *DEV.get_or_init(|| {
        // SAFETY: a new one-page shared anonymous mapping, unmapped below;
        // nothing reads or writes it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let dev = fs::read_to_string("/proc/self/maps")
            .ok()
            .and_then(|t| procfs::parse_maps(&t).ok())
            .and_then(|all| all.into_iter().find(|m| m.start == p as u64))
            .map(|m| m.dev);
        // SAFETY: unmapping the page mapped above, which nothing refers to.
        unsafe { libc::munmap(p, 4096) };
        dev
    })
}

/// Whether `m` maps a shared anonymous object (on the internal shmem
/// mount, so not some deleted file that happened to be called `/dev/zero`).
pub fn is_shared_anon(m: &MapsEntry) -> bool {
    m.shared && m.path == SHARED_ANON && m.inode != 0 && shmem_dev() == Some(m.dev)
}

/// The object `m` maps, opened through `/proc/PID/map_files` (which needs
/// `CAP_SYS_ADMIN` or `CAP_CHECKPOINT_RESTORE`); `None` without.
fn open_object(pid: i32, m: &MapsEntry) -> Option<fs::File> {
    fs::File::open(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end)).ok()
}

/// The size each shared anonymous object of `pid` (its `maps`) is
/// restored with, by inode: its own size where it can be read (see
/// [`open_object`]), and at least the end of its furthest VMA (its offset
/// plus length). Without `map_files` the object's size (the length first
/// mapped) is taken to be that end: it differs only where the process
/// unmapped the object's end, and then only a later `mremap` growing a VMA
/// back over that end could tell.
pub(crate) fn sizes(pid: i32, maps: &[MapsEntry]) -> BTreeMap<u64, u64> {
    let mut out = BTreeMap::new();
    for m in maps.iter().filter(|m| is_shared_anon(m)) {
        let end = m.offset + (m.end - m.start);
        let e = out.entry(m.inode).or_insert_with(|| {
            open_object(pid, m)
                .and_then(|f| f.metadata().ok())
                .map_or(0, |md| md.len().next_multiple_of(4096))
        });
        *e = (*e).max(end);
    }
    out
}

/// The runs (`[start, end)` addresses) of VMA `m` where its object holds
/// pages (in memory or swapped out: `lseek(SEEK_DATA/SEEK_HOLE)` on the
/// object, opened with [`open_object`]); `None` where the object cannot be
/// opened or sought, and then the whole VMA is carried. The holes (pages
/// never written) need not be carried: the restored object starts zeroed.
pub(crate) fn data_runs(pid: i32, m: &MapsEntry) -> Option<Vec<(u64, u64)>> {
    use std::os::fd::AsRawFd;
    let f = open_object(pid, m)?;
    let (lo, hi) = (m.offset, m.offset + (m.end - m.start));
    let seek = |at: u64, whence: i32| -> Option<Option<u64>> {
        // SAFETY: lseek on an fd we own; no memory is passed.
        let r = unsafe { libc::lseek(f.as_raw_fd(), at as i64, whence) };
        if r >= 0 {
            Some(Some(r as u64))
        } else if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO) {
            Some(None)
        } else {
            None
        }
    };
    let mut out = Vec::new();
    let mut at = lo;
    while at < hi {
        let Some(data) = seek(at, libc::SEEK_DATA)? else {
            break;
        };
        let data = data & !4095;
        if data >= hi {
            break;
        }
        let hole = seek(data, libc::SEEK_HOLE)?.unwrap_or(hi);
        let end = hole.next_multiple_of(4096).min(hi).max(data + 4096);
        out.push((m.start + (data.max(at) - lo), m.start + (end - lo)));
        at = end;
    }
    Some(out)
}

/// Refuses the shared anonymous objects of `pid` (its `maps`, those left
/// for the set excluded by the caller) that another process maps too,
/// naming it, or while another process's maps cannot be read. Reads
/// `/proc` only, as [`crate::refuse::is_self_pipe`] does for pipes.
pub fn check_lone(pid: i32, maps: &[MapsEntry]) -> Result<(), Refusal> {
    // (dev, inode) -> the first VMA of the object, to name it.
    let mut objects: BTreeMap<((u32, u32), u64), &MapsEntry> = BTreeMap::new();
    for m in maps.iter().filter(|m| is_shared_anon(m)) {
        objects.entry((m.dev, m.inode)).or_insert(m);
    }
    if objects.is_empty() {
        return Ok(());
    }
    let Ok(procs) = fs::read_dir("/proc") else {
        let m = objects.values().next().expect("not empty");
        return Err(Refusal::SharedMemoryUnknown {
            start: m.start,
            end: m.end,
            path: m.path.clone(),
            pid: 0,
        });
    };
    let unrelated = unrelated_ancestors(pid);
    let mut others: Vec<i32> = procs
        .flatten()
        .filter_map(|p| p.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&n| n != pid)
        .collect();
    others.sort_unstable();
    for other in others {
        let text = match fs::read_to_string(format!("/proc/{other}/maps")) {
            Ok(t) => t,
            // Gone meanwhile.
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::ESRCH) =>
            {
                continue
            }
            Err(_) if unrelated.contains(&other) => continue,
            Err(_) => {
                let m = objects.values().next().expect("not empty");
                return Err(Refusal::SharedMemoryUnknown {
                    start: m.start,
                    end: m.end,
                    path: m.path.clone(),
                    pid: other,
                });
            }
        };
        let Ok(theirs) = procfs::parse_maps(&text) else {
            continue;
        };
        if let Some(m) = theirs
            .iter()
            .find_map(|t| objects.get(&(t.dev, t.inode)).filter(|_| t.inode != 0))
        {
            return Err(Refusal::SharedMemoryWith {
                start: m.start,
                end: m.end,
                path: m.path.clone(),
                pid: other,
            });
        }
    }
    Ok(())
}

/// The parent of process `n` (`/proc/N/stat`, readable for every process).
fn ppid(n: i32) -> Option<i32> {
    let st = fs::read_to_string(format!("/proc/{n}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may contain spaces and ')'.
    st.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The strict ancestors of `n`, nearest first.
fn ancestors(n: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut at = n;
    while let Some(p) = ppid(at).filter(|&p| p > 0 && !out.contains(&p)) {
        out.push(p);
        at = p;
    }
    out
}

/// Processes whose maps need not be read to know they do not map an
/// object of `pid`: when `pid` descends from the caller, the caller's
/// strict ancestors. An object of `pid` was made by a process whose memory
/// `pid`'s descends from by fork without exec; the caller, which has run
/// its own program since its start, forked `pid`'s line: so the object was
/// made at or below the caller, where none of its ancestors can have
/// inherited it. (Without this, an init the caller may not read, as in a
/// container, would make every such object refused.) Empty otherwise.
fn unrelated_ancestors(pid: i32) -> Vec<i32> {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    if ancestors(pid).contains(&me) {
        ancestors(me)
    } else {
        Vec::new()
    }
}
