//! Who a process belongs to, and becoming that owner for a restore.
//!
//! A node daemon running as root restores processes of other users: the
//! restored process must get its owner's credentials back, and whatever the
//! restore opens on its behalf (the files its text is mapped from) must be
//! opened with the owner's rights, not root's. [`Creds::of`] reads a live
//! process's credentials; [`Creds::open`] opens a file with them (on a
//! thread of its own whose filesystem ids alone change); [`Creds::become_in_child`]
//! switches a freshly forked child for good.

use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io;

/// User, group and supplementary groups of a process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// The ids of one `Uid:`/`Gid:` line of /proc/PID/status: real, effective,
/// saved, filesystem.
pub fn status_ids(status: &str, key: &str) -> Option<[u32; 4]> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    let v: Vec<u32> = line[key.len()..]
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect();
    v.try_into().ok()
}

/// The text of `/proc/PID/status` of live process `pid`, and whether the
/// process is dumpable by its own user (the kernel's `SUID_DUMP_USER`):
/// only then may its owner read its memory (ptrace, `/proc/PID/mem`,
/// `/proc/PID/map_files`). One that called `prctl(PR_SET_DUMPABLE, 0)`,
/// runs a program its user may not read, or changed its ids is not: the
/// kernel lets only a holder of `CAP_SYS_PTRACE` read it, and makes its
/// `/proc/PID` files root's (of its user namespace) instead of its
/// effective uid's, which is what this compares. A process whose
/// effective uid is root reads as dumpable: only root acts on it anyway.
pub fn status_dumpable(pid: i32) -> io::Result<(String, bool)> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let path = format!("/proc/{pid}/status");
    let mut f = File::open(&path)?;
    let owner = f.metadata()?.uid();
    let mut st = String::new();
    f.read_to_string(&mut st)?;
    let euid = status_ids(&st, "Uid:")
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("{path}: no Uid:")))?[1];
    Ok((st, owner == euid))
}

impl Creds {
    /// The caller's own credentials.
    pub fn current() -> Creds {
        // SAFETY: these getters have no preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        // SAFETY: getgroups with a null buffer returns the count only.
        let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
        let mut groups = vec![0 as libc::gid_t; n.max(0) as usize];
        // SAFETY: `groups` has room for `n` entries.
        let got = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
        groups.truncate(got.max(0) as usize);
        Creds { uid, gid, groups }
    }

    /// The credentials of live process `pid` (its real ids, which must
    /// equal the effective and saved ones: a process whose ids differ, such
    /// as a set-user-ID program, has no single owner and is refused).
    pub fn of(pid: i32) -> io::Result<Creds> {
        let st = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        Creds::from_status(&st).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// [`Creds::of`] from the text of a /proc/PID/status file.
    pub fn from_status(st: &str) -> Result<Creds, String> {
        let (Some(u), Some(g)) = (status_ids(st, "Uid:"), status_ids(st, "Gid:")) else {
            return Err("no Uid:/Gid: lines in /proc status".into());
        };
        if u[..3].iter().any(|&x| x != u[0]) || g[..3].iter().any(|&x| x != g[0]) {
            return Err(format!(
                "real, effective and saved ids differ (uid {} {} {}, gid {} {} {}): \
                 a set-user/group-ID program has no single owner",
                u[0], u[1], u[2], g[0], g[1], g[2]
            ));
        }
        let groups = st
            .lines()
            .find(|l| l.starts_with("Groups:"))
            .map(|l| {
                l["Groups:".len()..]
                    .split_whitespace()
                    .filter_map(|s| s.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        Ok(Creds {
            uid: u[0],
            gid: g[0],
            groups,
        })
    }

    /// Whether the caller already has these credentials (nothing to switch).
    pub fn is_current(&self) -> bool {
        let me = Creds::current();
        me.uid == self.uid && me.gid == self.gid
    }

    /// Opens `path` read-only with these credentials' rights: on a thread
    /// of its own that sets its filesystem uid/gid and groups with raw
    /// system calls (per thread in Linux; the C library's wrappers would
    /// change every thread of the process).
    pub fn open(&self, path: &str) -> io::Result<File> {
        if self.is_current() {
            return File::open(path);
        }
        let me = self.clone();
        let path = path.to_string();
        std::thread::scope(|s| {
            s.spawn(move || {
                // SAFETY: per-thread credential changes of this short-lived
                // thread; the groups pointer is valid for its length.
                unsafe {
                    if libc::syscall(libc::SYS_setgroups, me.groups.len(), me.groups.as_ptr()) != 0
                    {
                        return Err(io::Error::last_os_error());
                    }
                    libc::syscall(libc::SYS_setfsgid, me.gid);
                    libc::syscall(libc::SYS_setfsuid, me.uid);
                    if libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32 != me.uid {
                        return Err(io::Error::from_raw_os_error(libc::EPERM));
                    }
                }
                File::open(&path)
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("opener thread panicked")))
        })
    }

    /// Switches the calling process for good: groups, then gid, then uid.
    /// Returns the negated errno of the first failing call.
    ///
    /// # Safety
    ///
    /// Only in a freshly forked, single-threaded child (raw system calls,
    /// no allocation).
    pub(crate) unsafe fn become_in_child(&self) -> Result<(), i64> {
        let g = self.gid as libc::c_long;
        let u = self.uid as libc::c_long;
        // SAFETY: raw credential system calls; `groups` outlives the call.
        unsafe {
            let r = libc::syscall(libc::SYS_setgroups, self.groups.len(), self.groups.as_ptr());
            if r != 0 {
                return Err(-(*libc::__errno_location() as i64));
            }
            if libc::syscall(libc::SYS_setresgid, g, g, g) != 0 {
                return Err(-(*libc::__errno_location() as i64));
            }
            if libc::syscall(libc::SYS_setresuid, u, u, u) != 0 {
                return Err(-(*libc::__errno_location() as i64));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str =
        "Name:\tcat\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t100\t100\nGroups:\t100 27 \n";

    #[test]
    fn parses_status() {
        let c = Creds::from_status(STATUS).unwrap();
        assert_eq!(
            c,
            Creds {
                uid: 1000,
                gid: 100,
                groups: vec![100, 27]
            }
        );
    }

    #[test]
    fn set_user_id_has_no_single_owner() {
        let s = STATUS.replace("Uid:\t1000\t1000\t1000", "Uid:\t1000\t0\t0");
        let e = Creds::from_status(&s).unwrap_err();
        assert!(e.contains("set-user/group-ID"), "{e}");
    }

    /// A child that made itself non-dumpable reads as such (as another
    /// user than root when run as root: root's processes read as dumpable).
    #[test]
    fn status_dumpable_sees_pr_set_dumpable() {
        // SAFETY: getpid has no preconditions.
        let (_, me) = status_dumpable(unsafe { libc::getpid() }).unwrap();
        assert!(me, "this test is not dumpable");
        for d in [1, 0] {
            let mut p = [0i32; 2];
            // SAFETY: a pipe into a two-int array.
            assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
            // SAFETY: the child makes raw system calls only and _exits.
            let child = unsafe { libc::fork() };
            if child == 0 {
                // SAFETY: in the forked child: credential and prctl calls,
                // a write to the pipe, then waits to be killed.
                unsafe {
                    if libc::geteuid() == 0 {
                        libc::syscall(libc::SYS_setresgid, 65534, 65534, 65534);
                        libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534);
                    }
                    libc::prctl(libc::PR_SET_DUMPABLE, d, 0, 0, 0);
                    libc::write(p[1], b"x".as_ptr().cast(), 1);
                    loop {
                        libc::pause();
                    }
                }
            }
            assert!(child > 0);
            let mut c = 0u8;
            // SAFETY: reads one byte into `c`; closes our pipe fds.
            unsafe {
                assert_eq!(libc::read(p[0], (&mut c as *mut u8).cast(), 1), 1);
                libc::close(p[0]);
                libc::close(p[1]);
            }
            let got = status_dumpable(child).map(|(_, d)| d);
            // SAFETY: our own child, killed and reaped.
            unsafe {
                libc::kill(child, libc::SIGKILL);
                libc::waitpid(child, std::ptr::null_mut(), 0);
            }
            assert_eq!(got.unwrap(), d == 1, "PR_SET_DUMPABLE {d}");
        }
    }

    #[test]
    fn own_process_is_current() {
        // SAFETY: getpid has no preconditions.
        let me = Creds::of(unsafe { libc::getpid() }).unwrap();
        assert!(me.is_current());
    }
}
