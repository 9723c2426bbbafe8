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
    // Without map_files every page of an object's VMAs is read at the
    // dump, which allocates the pages never written: refused for large ones.
    let mut read_whole: BTreeMap<((u32, u32), u64), u64> = BTreeMap::new();
    for m in maps.iter().filter(|m| is_shared_anon(m)) {
        if open_object(pid, m).is_none() {
            *read_whole.entry((m.dev, m.inode)).or_default() += m.end - m.start;
        }
    }
    for (key, bytes) in read_whole {
        if let Some(why) = whole_read_refusal(bytes) {
            return Err(unchecked(objects[&key], why));
        }
    }
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    if hides_processes(&mountinfo) && !has_cap_sys_ptrace() {
        let m = objects.values().next().expect("not empty");
        return Err(unchecked(
            m,
            "/proc is mounted with hidepid (processes this one may not ptrace are not listed, \
             so one of them may map it too) and this process lacks CAP_SYS_PTRACE"
                .into(),
        ));
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
        // The other processes of a tree checkpointed with it share it in
        // their copies too (`crate::tree`).
        .filter(|&n| n != pid && !crate::tree::member(n))
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
        // Only a line naming a shared anonymous object can map one: the
        // rest need not be parsed (most processes have none).
        if !text.contains(SHARED_ANON) {
            continue;
        }
        let Ok(theirs) = procfs::parse_maps(&text) else {
            let m = objects.values().next().expect("not empty");
            return Err(unchecked(
                m,
                format!("the maps of pid {other} cannot be parsed: it may map it too"),
            ));
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

fn unchecked(m: &MapsEntry, why: String) -> Refusal {
    Refusal::SharedMemoryUnchecked {
        start: m.start,
        end: m.end,
        path: m.path.clone(),
        why,
    }
}

/// The most bytes of an object's VMAs read whole at the dump when the
/// object cannot be opened through `map_files` (see [`data_runs`]).
pub(crate) const WHOLE_READ_MAX: u64 = 64 << 20;

/// Why an object whose VMAs, `bytes` in all, must be read whole (its holes
/// not known) is refused: reading a page never written allocates it in the
/// original (a shmem read fault), so a large sparse object would grow to
/// its full size. `None` up to [`WHOLE_READ_MAX`].
pub(crate) fn whole_read_refusal(bytes: u64) -> Option<String> {
    (bytes > WHOLE_READ_MAX).then(|| {
        format!(
            "its object cannot be opened through /proc/PID/map_files (that needs \
             CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE) to find its unwritten pages, so all \
             {bytes:#x} bytes mapped would be read, allocating every page never written \
             (more than {WHOLE_READ_MAX:#x})"
        )
    })
}

/// Whether the `/proc` mount (the last one at `/proc` in `mountinfo`)
/// hides processes: `hidepid=invisible` (2) or `ptraceable` (4) leaves out
/// those the caller may not ptrace (`noaccess`, 1, lists them, unreadable:
/// those are refused as unknown; `subset=pid` hides no process).
pub(crate) fn hides_processes(mountinfo: &str) -> bool {
    let proc_line = mountinfo
        .lines()
        .rfind(|l| l.split(' ').nth(4) == Some("/proc"));
    let Some(line) = proc_line else {
        return false;
    };
    // "... - proc proc rw,hidepid=invisible": the super options are last.
    let Some((_, tail)) = line.split_once(" - ") else {
        return false;
    };
    let mut f = tail.split(' ');
    if f.next() != Some("proc") {
        return false;
    }
    f.nth(1).unwrap_or("").split(',').any(|o| {
        matches!(
            o.strip_prefix("hidepid="),
            Some("2" | "invisible" | "4" | "ptraceable")
        )
    })
}

/// Whether the calling thread has `CAP_SYS_PTRACE` in its effective set
/// (`CapEff` of `/proc/thread-self/status`: a node daemon's thread that
/// acts with a client's rights has dropped the capabilities its process
/// keeps, and `/proc` hides processes by the reading thread's).
pub(crate) fn has_cap_sys_ptrace() -> bool {
    cap_eff_has(
        &fs::read_to_string("/proc/thread-self/status").unwrap_or_default(),
        19,
    )
}

fn cap_eff_has(status: &str, cap: u32) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|c| c & (1 << cap) != 0)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_objects_read_whole_are_refused() {
        assert_eq!(whole_read_refusal(0), None);
        assert_eq!(whole_read_refusal(WHOLE_READ_MAX), None);
        let why = whole_read_refusal(WHOLE_READ_MAX + 4096).unwrap();
        assert!(
            why.contains("map_files") && why.contains("allocating"),
            "{why}"
        );
    }

    const PROC: &str = "22 28 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc ";

    #[test]
    fn hidepid_that_hides_processes_is_seen() {
        for (opts, hides) in [
            ("rw", false),
            ("rw,hidepid=noaccess", false),
            ("rw,hidepid=1", false),
            ("rw,subset=pid", false),
            ("rw,hidepid=invisible", true),
            ("rw,hidepid=2,gid=5", true),
            ("rw,hidepid=ptraceable,subset=pid", true),
            ("rw,hidepid=4", true),
        ] {
            let mi = format!(
                "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n{PROC}{opts}\n\
                 40 22 0:40 / /proc/sys/fs/binfmt_misc rw - binfmt_misc x rw,hidepid=2\n"
            );
            assert_eq!(hides_processes(&mi), hides, "{opts}");
        }
        // The last mount at /proc is the one seen.
        let mi = format!("{PROC}rw,hidepid=invisible\n{PROC}rw\n");
        assert!(!hides_processes(&mi));
        let mi = format!("{PROC}rw\n{PROC}rw,hidepid=invisible\n");
        assert!(hides_processes(&mi));
        assert!(!hides_processes(""));
    }

    #[test]
    fn cap_sys_ptrace_is_the_calling_threads() {
        if !has_cap_sys_ptrace() {
            eprintln!("SKIP: needs CAP_SYS_PTRACE");
            return;
        }
        let dropped = std::thread::spawn(|| {
            #[repr(C)]
            struct Header {
                version: u32,
                pid: i32,
            }
            #[repr(C)]
            #[derive(Clone, Copy, Default)]
            struct Data {
                effective: u32,
                permitted: u32,
                inheritable: u32,
            }
            let mut h = Header {
                version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
                pid: 0,
            };
            let mut d = [Data::default(); 2];
            // SAFETY: capget/capset of this thread with a v3 header and
            // the two data structs v3 takes.
            unsafe {
                assert_eq!(libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()), 0);
                d[0].effective &= !(1 << 19);
                assert_eq!(libc::syscall(libc::SYS_capset, &mut h, d.as_ptr()), 0);
            }
            has_cap_sys_ptrace()
        })
        .join()
        .unwrap();
        assert!(
            !dropped,
            "a thread without CAP_SYS_PTRACE was taken for one with it"
        );
        assert!(has_cap_sys_ptrace());
    }

    #[test]
    fn cap_sys_ptrace_is_read_from_cap_eff() {
        assert!(cap_eff_has("Name:\tx\nCapEff:\t000001ffffffffff\n", 19));
        assert!(!cap_eff_has("CapEff:\t0000000000000000\n", 19));
        assert!(cap_eff_has("CapEff:\t0000000000080000\n", 19));
        assert!(!cap_eff_has("CapPrm:\t0000000000080000\n", 19));
    }
}
