//! Who a process belongs to, and becoming that owner for a restore.
//!
//! A node daemon running as root restores processes of other users: the
//! restored process must get its owner's credentials back, and whatever the
//! restore opens on its behalf (the files its text is mapped from) must be
//! opened with the owner's rights, not root's. [`Creds::of`] reads a live
//! process's credentials; [`Creds::with_fs`] runs file access with them
//! (on a thread of its own whose filesystem ids alone change, without
//! capabilities), [`Creds::open`] opens a file so; [`Creds::become_in_child`]
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

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAP_V3: u32 = 0x2008_0522;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
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

    /// Opens regular file `path` read-only with these credentials' rights
    /// (see [`Creds::with_fs`]; a `/proc` magic link is not followed, a
    /// FIFO does not block: see [`crate::image_dir::open_regular`]).
    pub fn open(&self, path: &str) -> io::Result<File> {
        let path = std::path::Path::new(path);
        self.with_fs(|| crate::image_dir::open_regular(None, path))?
    }

    /// Runs `f` with these credentials' rights on the file system: on a
    /// thread of its own that sets its supplementary groups, filesystem gid
    /// and filesystem uid with raw system calls (per thread in Linux; the C
    /// library's wrappers would change every thread of the process), checks
    /// each, and drops its capabilities, effective and permitted (`capset`,
    /// per thread too: a root daemon's `CAP_SYS_PTRACE` would still let it
    /// through `/proc/PID/cwd`, `/proc/PID/root` and `/proc/PID/fd/N` of
    /// other users' processes; permitted ones would come back with a
    /// `setfsuid(0)`, which a thread whose uids are root's may make).
    /// Every other thread keeps the daemon's
    /// credentials. Already these credentials (uid and gid): `f` runs here.
    /// An error if the switch fails (a daemon that is not root cannot take
    /// another user's ids); `f` does not run then.
    pub fn with_fs<T: Send>(&self, f: impl FnOnce() -> T + Send) -> io::Result<T> {
        if self.is_current() {
            return Ok(f());
        }
        std::thread::scope(|s| {
            s.spawn(move || {
                self.take_fs()?;
                Ok(f())
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("file access thread panicked")))
        })
    }

    /// The calling thread takes these credentials for file access and
    /// drops its capabilities, effective and permitted (see
    /// [`Creds::with_fs`]). Only on a
    /// thread that ends afterwards.
    fn take_fs(&self) -> io::Result<()> {
        let fail = |what: &str, e: io::Error| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot take the file access rights of uid {} gid {} ({what}): {e}",
                    self.uid, self.gid
                ),
            )
        };
        let mismatch = || io::Error::from_raw_os_error(libc::EPERM);
        // SAFETY: raw per-thread setgroups; the pointer is valid for `len` entries.
        let r =
            unsafe { libc::syscall(libc::SYS_setgroups, self.groups.len(), self.groups.as_ptr()) };
        if r != 0 {
            return Err(fail("setgroups", io::Error::last_os_error()));
        }
        // setfsgid/setfsuid return the previous id whether or not they
        // changed it: a second call with an invalid id (-1) reads the one
        // in force.
        // SAFETY: raw per-thread credential calls with integer arguments.
        let gid = unsafe {
            libc::syscall(libc::SYS_setfsgid, self.gid);
            libc::syscall(libc::SYS_setfsgid, u32::MAX) as u32
        };
        if gid != self.gid {
            return Err(fail("setfsgid", mismatch()));
        }
        // SAFETY: as above.
        let uid = unsafe {
            libc::syscall(libc::SYS_setfsuid, self.uid);
            libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32
        };
        if uid != self.uid {
            return Err(fail("setfsuid", mismatch()));
        }
        let mut head = CapHeader {
            version: CAP_V3,
            pid: 0,
        };
        let mut data = [CapData::default(); 2];
        // SAFETY: capget/capset of this thread (pid 0) with a version-3
        // header and the two data words that version takes.
        unsafe {
            if libc::syscall(libc::SYS_capget, &mut head, data.as_mut_ptr()) != 0 {
                return Err(fail("capget", io::Error::last_os_error()));
            }
            // Permitted too: with fs capabilities still permitted, a
            // setfsuid(0) (which a thread whose uids are root may make)
            // would make them effective again.
            for d in &mut data {
                d.effective = 0;
                d.permitted = 0;
                d.inheritable = 0;
            }
            if libc::syscall(libc::SYS_capset, &mut head, data.as_ptr()) != 0 {
                return Err(fail("capset", io::Error::last_os_error()));
            }
            data = [CapData::default(); 2];
            if libc::syscall(libc::SYS_capget, &mut head, data.as_mut_ptr()) != 0 {
                return Err(fail("capget", io::Error::last_os_error()));
            }
        }
        if data.iter().any(|d| d.effective != 0 || d.permitted != 0) {
            return Err(fail("capset", mismatch()));
        }
        Ok(())
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

    /// As root: the thread of `with_fs` has the user's filesystem ids and
    /// groups and no effective capabilities (a root-only file stays
    /// closed to it); the calling thread keeps root's.
    #[test]
    fn with_fs_takes_the_ids_on_one_thread_and_drops_capabilities() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIP: needs root");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let secret = t.path().join("secret");
        std::fs::write(&secret, "x").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let user = Creds {
            uid: 65534,
            gid: 65534,
            groups: vec![65534],
        };
        let (status, opened) = user
            .with_fs(|| {
                let st = std::fs::read_to_string("/proc/thread-self/status").unwrap();
                (st, File::open(&secret).map(drop))
            })
            .unwrap();
        let line = |k: &str| {
            status
                .lines()
                .find(|l| l.starts_with(k))
                .unwrap()
                .to_string()
        };
        assert_eq!(status_ids(&status, "Uid:"), Some([0, 0, 0, 65534]));
        assert_eq!(status_ids(&status, "Gid:"), Some([0, 0, 0, 65534]));
        assert_eq!(line("Groups:").split_whitespace().nth(1), Some("65534"));
        assert_eq!(line("CapEff:"), "CapEff:\t0000000000000000");
        assert_eq!(line("CapPrm:"), "CapPrm:\t0000000000000000");
        assert_eq!(opened.unwrap_err().kind(), io::ErrorKind::PermissionDenied);
        // Its uids are root's, so it may set its fs uid back to 0; that
        // must not give it root's file capabilities again (reading another
        // user's 0600 file takes CAP_DAC_OVERRIDE).
        let other = t.path().join("other");
        std::fs::write(&other, "y").unwrap();
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(&other, Some(65533), Some(65533)).unwrap();
        let (status, opened) = user
            .with_fs(|| {
                // SAFETY: a raw per-thread setfsuid on this thread of its own.
                unsafe { libc::syscall(libc::SYS_setfsuid, 0) };
                let st = std::fs::read_to_string("/proc/thread-self/status").unwrap();
                (st, File::open(&other).map(drop))
            })
            .unwrap();
        assert_eq!(status_ids(&status, "Uid:"), Some([0, 0, 0, 0]));
        let eff = status.lines().find(|l| l.starts_with("CapEff:")).unwrap();
        assert_eq!(eff, "CapEff:\t0000000000000000");
        assert_eq!(opened.unwrap_err().kind(), io::ErrorKind::PermissionDenied);
        assert!(
            File::open(&secret).is_ok(),
            "this thread lost root's rights"
        );
        assert!(Creds::current().groups.iter().all(|&g| g != 65534));
    }

    /// A mapped file's path that names a FIFO (swapped in after the
    /// restore compared the files) is refused, not waited on.
    #[test]
    fn open_refuses_a_fifo_at_once() {
        let t = tempfile::tempdir().unwrap();
        let fifo = t.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let p = fifo.to_str().unwrap().to_string();
        std::thread::spawn(move || tx.send(Creds::current().open(&p).map(drop)));
        let r = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("open blocked on a FIFO");
        assert!(r.unwrap_err().to_string().contains("a FIFO"));
    }

    #[test]
    fn own_process_is_current() {
        // SAFETY: getpid has no preconditions.
        let me = Creds::of(unsafe { libc::getpid() }).unwrap();
        assert!(me.is_current());
    }
}
