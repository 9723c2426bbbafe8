//! Readers of `/proc/<pid>/*`: maps, status, fdinfo, stat, pagemap, auxv.

use crate::error::{Error, Result};
use std::fs;
use std::os::unix::fs::MetadataExt;

/// One line of `/proc/pid/maps`.
#[derive(Debug, Clone)]
pub struct MapsEntry {
    pub start: u64,
    pub end: u64,
    pub prot: i32,
    pub shared: bool,
    pub offset: u64,
    /// Device (major, minor) of the mapped file; (0, 0) for anonymous memory.
    pub dev: (u32, u32),
    pub inode: u64,
    /// Path or `[heap]`-style name; empty for anonymous memory.
    pub path: String,
}

/// Whether file mapping `m`'s path no longer names the file it maps (the
/// file was replaced under that name, e.g. by a rebuild, or removed): its
/// inode differs from the path's, or the path is gone. Such a mapping is
/// carried like one of a deleted file, whole, since the only copy of what
/// the process maps is in its memory.
pub fn replaced(m: &MapsEntry) -> bool {
    use std::os::unix::fs::MetadataExt;
    m.path.starts_with('/')
        && !m.path.ends_with(" (deleted)")
        && fs::metadata(&m.path).map_or(true, |md| md.ino() != m.inode)
}

fn read(pid: i32, what: &str) -> Result<String> {
    let p = format!("/proc/{pid}/{what}");
    fs::read_to_string(&p).map_err(|e| Error::io(format!("read {p}"), e))
}

fn hex(s: &str, what: &str) -> Result<u64> {
    u64::from_str_radix(s, 16).map_err(|_| Error::Image(format!("cannot parse {what} {s:?}")))
}

/// Parses `/proc/pid/maps`.
///
/// On the kernel backend, for a member of the caller's set, the set's VMAs
/// in the shared range are left out: they belong to the set, not to the
/// process, and stay behind when it moves (issue 11). On the portable
/// backend, and for a process outside the set, the range is ordinary
/// memory and nothing is left out.
pub fn maps(pid: i32) -> Result<Vec<MapsEntry>> {
    let all = parse_maps(&read(pid, "maps")?)?;
    if !crate::mem::in_callers_set(pid) {
        return Ok(all);
    }
    Ok(all
        .into_iter()
        .filter(|m| !halfproc_sys::in_shared_range(m.start, m.end - m.start))
        .collect())
}

/// Parses maps text (also used for `/proc/self/maps`).
/// The starts of the VMAs of `smaps` (the text of `/proc/PID/smaps`)
/// whose `VmFlags` hold `flag` (such as `nr`, `MAP_NORESERVE`).
pub fn smaps_with_flag(smaps: &str, flag: &str) -> std::collections::BTreeSet<u64> {
    let mut out = std::collections::BTreeSet::new();
    let mut start = None;
    for line in smaps.lines() {
        if let Some(flags) = line.strip_prefix("VmFlags:") {
            if let Some(s) = start
                .take()
                .filter(|_| flags.split_whitespace().any(|f| f == flag))
            {
                out.insert(s);
            }
        } else if let Some((range, _)) = line.split_once(' ') {
            // A VMA's first line: "start-end perms ..." (field lines are
            // "Name:   value", with no '-' before the first space).
            if let Some((s, _)) = range.split_once('-') {
                if let Ok(s) = u64::from_str_radix(s, 16) {
                    start = Some(s);
                }
            }
        }
    }
    out
}

pub fn parse_maps(text: &str) -> Result<Vec<MapsEntry>> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut it = line.splitn(6, ' ');
        let range = it.next().unwrap_or("");
        let perms = it.next().unwrap_or("");
        let offset = it.next().unwrap_or("0");
        let dev = it.next().unwrap_or("0:0");
        let inode = it.next().unwrap_or("0");
        let path = it.next().unwrap_or("").trim_start().to_string();
        let (s, e) = range
            .split_once('-')
            .ok_or_else(|| Error::Image(format!("maps line {line:?}")))?;
        let b = perms.as_bytes();
        if b.len() < 4 {
            return Err(Error::Image(format!("maps line {line:?}")));
        }
        let mut prot = 0;
        if b[0] == b'r' {
            prot |= libc::PROT_READ;
        }
        if b[1] == b'w' {
            prot |= libc::PROT_WRITE;
        }
        if b[2] == b'x' {
            prot |= libc::PROT_EXEC;
        }
        out.push(MapsEntry {
            start: hex(s, "maps start")?,
            end: hex(e, "maps end")?,
            prot,
            shared: b[3] == b's',
            offset: hex(offset, "maps offset")?,
            dev: match dev.split_once(':') {
                Some((ma, mi)) => (
                    hex(ma, "maps device")? as u32,
                    hex(mi, "maps device")? as u32,
                ),
                None => return Err(Error::Image(format!("maps line {line:?}"))),
            },
            inode: inode.parse().unwrap_or(0),
            path,
        });
    }
    Ok(out)
}

/// `/proc/pid/status` as (key, value) pairs.
pub fn status(pid: i32) -> Result<Vec<(String, String)>> {
    Ok(read(pid, "status")?
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect())
}

/// The value of `key` in a parsed status.
pub fn field<'a>(status: &'a [(String, String)], key: &str) -> Result<&'a str> {
    status
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .ok_or_else(|| Error::Image(format!("/proc/pid/status has no {key}")))
}

/// A hexadecimal signal mask field of status (`SigBlk`, `SigPnd`, ...).
pub fn sigmask_field(status: &[(String, String)], key: &str) -> Result<u64> {
    hex(field(status, key)?, key)
}

/// `flags` (octal) and `pos` of `/proc/pid/fdinfo/fd`.
pub fn fdinfo(pid: i32, fd: i32) -> Result<(i32, i64)> {
    let text = read(pid, &format!("fdinfo/{fd}"))?;
    let mut flags = None;
    let mut pos = None;
    for l in text.lines() {
        if let Some(v) = l.strip_prefix("flags:") {
            flags = i32::from_str_radix(v.trim(), 8).ok();
        } else if let Some(v) = l.strip_prefix("pos:") {
            pos = v.trim().parse().ok();
        }
    }
    match (flags, pos) {
        (Some(f), Some(p)) => Ok((f, p)),
        _ => Err(Error::Image(format!(
            "/proc/{pid}/fdinfo/{fd}: no flags/pos"
        ))),
    }
}

/// Open fds of `pid` with their `readlink` targets, ascending.
pub fn fds(pid: i32) -> Result<Vec<(i32, String)>> {
    let dir = format!("/proc/{pid}/fd");
    let mut out = Vec::new();
    for e in fs::read_dir(&dir).map_err(|e| Error::io(format!("read {dir}"), e))? {
        let e = e.map_err(|e| Error::io(format!("read {dir}"), e))?;
        let Ok(fd) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let target = match fs::read_link(e.path()) {
            Ok(p) => p.to_string_lossy().into_owned(),
            // Closed since the directory was read (the process runs while
            // it is checked; the dump of the stopped process reads again).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => String::new(),
        };
        out.push((fd, target));
    }
    out.sort();
    Ok(out)
}

/// Whitespace fields of `/proc/pid/stat` after the `(comm)`; index 0 is field 3 (state).
pub fn stat_fields(pid: i32) -> Result<Vec<u64>> {
    let text = read(pid, "stat")?;
    let rest = text.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    Ok(rest
        .split_whitespace()
        .map(|f| f.parse::<i64>().map(|v| v as u64).unwrap_or(0))
        .collect())
}

/// `/proc/pid/auxv` as 64-bit words.
pub fn auxv(pid: i32) -> Result<Vec<u64>> {
    let p = format!("/proc/{pid}/auxv");
    let b = fs::read(&p).map_err(|e| Error::io(format!("read {p}"), e))?;
    Ok(b.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect())
}

/// Pagemap entries (one u64 per page) for `[start, end)`.
pub fn pagemap(file: &fs::File, start: u64, end: u64) -> Result<Vec<u64>> {
    use std::os::unix::fs::FileExt;
    let n = ((end - start) / page_size()) as usize;
    let mut buf = vec![0u8; n * 8];
    file.read_exact_at(&mut buf, start / page_size() * 8)
        .map_err(|e| Error::io(format!("read pagemap at {start:#x}"), e))?;
    Ok(buf
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect())
}

/// Pagemap bit: page present in RAM.
pub const PM_PRESENT: u64 = 1 << 63;
/// Pagemap bit: page swapped out.
pub const PM_SWAP: u64 = 1 << 62;
/// Pagemap bit: page is a file page or shared anonymous (not COW-ed).
pub const PM_FILE: u64 = 1 << 61;

/// The system page size.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as u64 }
}

/// Size, mtime and CRC-32 of a file, the identity check for file mappings.
///
/// The CRC is computed once per file version and remembered for this
/// process: the key is (device, inode, size, mtime, ctime), which every
/// write changes (`utimensat` can set mtime back, not ctime). A file
/// changed less than [`RACY`] ago is not remembered, since two writes
/// within one timestamp tick could leave both times equal (git's "racy
/// clean" rule); nor is one whose times changed while it was read.
///
/// `path` (a manifest's, at a restore: anyone's) is opened with the
/// caller's rights before anything else, the remembered CRC included, so
/// that only a caller who may read the file learns it (a node daemon calls
/// this with its client's rights: [`crate::Creds::with_fs`]): through
/// [`crate::image_dir::open_at`] (a `/proc` magic link is refused),
/// `O_NONBLOCK` (a FIFO does not block), and it must be a regular file (a
/// device such as `/dev/zero` would be read forever). Its size and times
/// are those of the file opened, and its CRC-32 is read through it.
pub fn file_id(path: &str) -> Result<crate::image::FileId> {
    let f = crate::image_dir::open_at(
        None,
        std::path::Path::new(path),
        libc::O_RDONLY | libc::O_NONBLOCK,
        0,
    )
    .map_err(|e| Error::io(format!("open {path}"), e))?;
    crate::image_dir::regular(&f).map_err(|e| Error::io(format!("open {path}"), e))?;
    let md = f
        .metadata()
        .map_err(|e| Error::io(format!("stat {path}"), e))?;
    let key = FileKey::of(&md);
    let cache = FILE_IDS.get_or_init(Default::default);
    if let Some(id) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
        return Ok(id);
    }
    let id = crate::image::FileId {
        size: md.size(),
        mtime_ns: key.mtime_ns,
        crc: file_crc(&f, path)?,
    };
    let after = f
        .metadata()
        .map_err(|e| Error::io(format!("stat {path}"), e))?;
    let changed = |t: i128| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|now| now.as_nanos() as i128 - t < RACY.as_nanos() as i128)
            .unwrap_or(true)
    };
    if FileKey::of(&after) == key && !changed(key.mtime_ns.max(key.ctime_ns)) {
        if let Ok(mut c) = cache.lock() {
            c.insert(key, id.clone());
        }
    }
    Ok(id)
}

/// A file changed more recently than this is hashed again at every use.
pub const RACY: std::time::Duration = std::time::Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FileKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl FileKey {
    fn of(md: &fs::Metadata) -> FileKey {
        FileKey {
            dev: md.dev(),
            ino: md.ino(),
            size: md.size(),
            mtime_ns: md.mtime() as i128 * 1_000_000_000 + md.mtime_nsec() as i128,
            ctime_ns: md.ctime() as i128 * 1_000_000_000 + md.ctime_nsec() as i128,
        }
    }
}

type FileIds = std::sync::Mutex<std::collections::HashMap<FileKey, crate::image::FileId>>;
static FILE_IDS: std::sync::OnceLock<FileIds> = std::sync::OnceLock::new();

/// CRC-32 of the contents of `f` (opened from `path`), read from its start
/// in 1 MiB pieces into one buffer.
fn file_crc(f: &fs::File, path: &str) -> Result<u32> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 1 << 20];
    let mut crc = crc32fast::Hasher::new();
    let mut at = 0u64;
    loop {
        match f.read_at(&mut buf, at) {
            Ok(0) => return Ok(crc.finalize()),
            Ok(n) => {
                crc.update(&buf[..n]);
                at += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(format!("read {path}"), e)),
        }
    }
}

#[cfg(test)]
mod file_id_tests {
    use std::io::Write;

    #[test]
    fn a_rewritten_file_is_hashed_again() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"one").unwrap();
        let path = p.to_str().unwrap();
        let a = super::file_id(path).unwrap();
        assert_eq!(a.crc, crc32fast::hash(b"one"));
        assert_eq!(super::file_id(path).unwrap(), a);
        // Same size, at once (within the racy window, maybe the same tick).
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .write_all(b"two")
            .unwrap();
        assert_eq!(super::file_id(path).unwrap().crc, crc32fast::hash(b"two"));
    }

    #[test]
    fn only_a_file_not_changed_recently_is_remembered() {
        let cached = |path: &str| {
            let key = super::FileKey::of(&std::fs::metadata(path).unwrap());
            super::FILE_IDS
                .get()
                .and_then(|c| c.lock().unwrap().get(&key).cloned())
        };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("g");
        std::fs::write(&p, b"new").unwrap();
        let path = p.to_str().unwrap();
        super::file_id(path).unwrap();
        assert!(cached(path).is_none(), "changed just now");
        // A system binary, installed long before this test.
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        let sh = sh.to_str().unwrap();
        let id = super::file_id(sh).unwrap();
        assert_eq!(id.crc, crc32fast::hash(&std::fs::read(sh).unwrap()));
        assert_eq!(cached(sh), Some(id));
    }

    /// `file_id` of `path` on a thread of its own: `None` if it has not
    /// answered in 5 s (it would read `/dev/zero` forever, or wait on a
    /// FIFO for a writer).
    fn id_soon(path: &str) -> Option<crate::error::Result<crate::image::FileId>> {
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.to_string();
        std::thread::spawn(move || tx.send(super::file_id(&p)));
        rx.recv_timeout(std::time::Duration::from_secs(5)).ok()
    }

    /// A manifest's path that is no regular file (a device that never
    /// ends, a FIFO) or a /proc magic link is refused at once.
    #[test]
    fn devices_fifos_and_magic_links_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for p in ["/dev/zero", fifo.to_str().unwrap()] {
            let e = id_soon(p)
                .expect("file_id blocked")
                .unwrap_err()
                .to_string();
            assert!(e.contains("not a regular file"), "{p}: {e}");
        }
        let f = std::fs::File::open("/bin/sh").unwrap();
        let magic = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&f));
        let e = id_soon(&magic).unwrap().unwrap_err().to_string();
        assert!(e.contains("symbolic links"), "{e}");
    }

    /// The remembered CRC of a file root read is not handed to a user who
    /// may not read it (the lookup comes after the open, with the
    /// caller's rights).
    #[test]
    fn the_remembered_crc_needs_read_access() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIP: needs root to act as another user");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let p = dir.path().join("secret");
        std::fs::write(&p, b"root's").unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        // Old enough to be remembered.
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(old)
            .unwrap();
        std::thread::sleep(super::RACY + std::time::Duration::from_millis(100));
        let path = p.to_str().unwrap().to_string();
        assert!(super::file_id(&path).is_ok());
        let nobody = crate::Creds {
            uid: 65534,
            gid: 65534,
            groups: vec![],
        };
        let r = nobody.with_fs(|| super::file_id(&path)).unwrap();
        let e = r
            .expect_err("nobody got the CRC of root's 0600 file")
            .to_string();
        assert!(e.contains("Permission denied"), "{e}");
    }
}

/// Soft and hard limit of resource `res` (RLIMIT_* number) from the text of
/// /proc/PID/limits, whose lines after the header are in that order; the
/// values are the last two numeric-or-"unlimited" columns before the units.
pub fn limit(text: &str, res: usize) -> Option<(u64, u64)> {
    let line = text.lines().nth(res + 1)?;
    let val = |s: &str| match s {
        "unlimited" => Some(u64::MAX),
        n => n.parse().ok(),
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| val(w).is_some())?;
    Some((val(words[at])?, val(words.get(at + 1)?)?))
}

#[cfg(test)]
mod limit_tests {
    #[test]
    fn parses_proc_limits() {
        let text = std::fs::read_to_string("/proc/self/limits").unwrap();
        for res in 0..16u32 {
            let mut want = libc::rlimit64 {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: valid out pointer, our own process.
            assert_eq!(unsafe { libc::getrlimit64(res as _, &mut want) }, 0);
            assert_eq!(
                super::limit(&text, res as usize),
                Some((want.rlim_cur, want.rlim_max)),
                "resource {res}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smaps_flags_are_read_per_vma() {
        let smaps = "\
7f0000000000-7f0000002000 rw-s 00000000 00:01 17                         /dev/zero (deleted)
Size:                  8 kB
Rss:                   4 kB
VmFlags: rd wr sh mr mw me ms nr sd
7f0000002000-7f0000003000 rw-s 00002000 00:01 17                         /dev/zero (deleted)
Size:                  4 kB
VmFlags: rd wr sh mr mw me ms sd
7f0000004000-7f0000005000 rw-p 00000000 00:00 0
THPeligible:    0
VmFlags: rd wr mr mw me nr ac sd
";
        let nr = smaps_with_flag(smaps, "nr");
        assert_eq!(
            nr.into_iter().collect::<Vec<_>>(),
            [0x7f0000000000, 0x7f0000004000]
        );
        assert!(smaps_with_flag(smaps, "xx").is_empty());
        assert!(smaps_with_flag("", "nr").is_empty());
    }
}
