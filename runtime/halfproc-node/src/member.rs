//! The kernel backend of the node daemon: the daemon leads this machine's
//! half-process set, and `halfproc run` starts a program as a member of it
//! with `clone3(CLONE_HALFPROC)` + `execve` (exec keeps membership), so the
//! daemon reads its memory with `dmread` and restores copies as members
//! (`halfproc_migrate`, which decides by [`active`]).

use halfproc_migrate::Creds;
use halfproc_sys::task::{clone_member, halfproc_prctl, PR_HALFPROC_FORK_MEMBER};
use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};

/// Whether this daemon leads a set (the kernel backend is in use).
pub fn active() -> bool {
    halfproc_migrate::caller_is_member()
}

/// Makes the calling process the first member of a new set (arming the
/// one-shot fork membership creates the set; it is disarmed at once). Call
/// before any other thread exists. Errors name the call and the errno
/// (`EOPNOTSUPP`: no module; `EBUSY`: private mappings in the range).
pub fn lead_set() -> Result<(), String> {
    halfproc_prctl(PR_HALFPROC_FORK_MEMBER, 1).map_err(|e| format!("cannot start a set: {e}"))?;
    halfproc_prctl(PR_HALFPROC_FORK_MEMBER, 0).map_err(|e| format!("cannot start a set: {e}"))?;
    if !active() {
        return Err("prctl(PR_HALFPROC) armed a fork but made no set".into());
    }
    Ok(())
}

fn cstr(s: &str, what: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{what} {s:?} contains a NUL byte"))
}

/// Where `execve` looks for `name`: itself if it has a `/`, else every
/// directory of the program's `PATH` (default `/usr/local/bin:/usr/bin:/bin`).
fn candidates(name: &str, env: &[(String, String)]) -> Result<Vec<CString>, String> {
    if name.contains('/') {
        return Ok(vec![cstr(name, "program")?]);
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or("/usr/local/bin:/usr/bin:/bin");
    path.split(':')
        .map(|d| if d.is_empty() { "." } else { d })
        .map(|d| cstr(&format!("{d}/{name}"), "program"))
        .collect()
}

/// Starts `argv` in `cwd` with exactly `env` as a member of this daemon's
/// set, in a process group of its own, with `fds` (fd number, our end) as
/// its only descriptors; returns its pid. A failed `execve` (or `chdir`) is
/// reported with its errno, like `std::process::Command` does, and the
/// child is reaped. With `owner` other than the daemon's own credentials,
/// the child takes the owner's groups, gid and uid before it changes
/// directory (so `cwd` is looked up with the owner's rights) and execs.
pub fn spawn(
    argv: &[String],
    cwd: &str,
    env: &[(String, String)],
    owner: Option<&Creds>,
    fds: &[(i32, OwnedFd)],
) -> Result<i32, String> {
    let owner = owner.filter(|o| !o.is_current());
    let name = argv.first().ok_or("empty command")?;
    // Everything the child needs is built here: after clone3 it may only
    // make system calls (no allocation, no locks).
    let paths = candidates(name, env)?;
    let args: Vec<CString> = argv
        .iter()
        .map(|a| cstr(a, "argument"))
        .collect::<Result<_, _>>()?;
    let envs: Vec<CString> = env
        .iter()
        .map(|(k, v)| cstr(&format!("{k}={v}"), "environment entry"))
        .collect::<Result<_, _>>()?;
    let dir = cstr(cwd, "directory")?;
    let mut argp: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argp.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = envs.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    let moves: Vec<(i32, i32)> = fds.iter().map(|(n, fd)| (*n, fd.as_raw_fd())).collect();
    if let Some((n, fd)) = moves.iter().find(|(_, fd)| *fd < 3) {
        return Err(format!("fd {fd} for the program's fd {n} is below 3"));
    }
    let (err_r, err_w) = halfproc_sys::fd::pipe(libc::O_CLOEXEC).map_err(|e| e.to_string())?;
    // SAFETY: the child below runs only system calls through libc's thin
    // wrappers on memory prepared above, then execve or _exit.
    let pid = unsafe { clone_member() }.map_err(|e| e.to_string())?;
    if pid == 0 {
        // SAFETY: we are the child of clone3: only async-signal-safe system
        // calls on the buffers built before it, and we never return.
        unsafe { child(&moves, owner, &dir, &paths, &argp, &envp, err_w.as_raw_fd()) }
    }
    drop(err_w);
    let mut b = Vec::new();
    let _ = File::from(err_r).read_to_end(&mut b);
    if b.len() < 4 {
        return Ok(pid); // EOF: the exec closed the pipe
    }
    let errno = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let mut st = 0;
    // SAFETY: reaping our own child, which has exited or is exiting.
    unsafe { libc::waitpid(pid, &mut st, 0) };
    let what = match b.get(4) {
        Some(1) => format!("cannot change to directory {cwd}"),
        Some(2) => "cannot take the owner's credentials".to_string(),
        _ => format!("cannot start {name}"),
    };
    Err(format!(
        "{what}: {}",
        std::io::Error::from_raw_os_error(errno)
    ))
}

/// The child's side of [`spawn`].
///
/// # Safety
///
/// Only in the child of `clone3`, with pointers into memory built before it.
unsafe fn child(
    moves: &[(i32, i32)],
    owner: Option<&Creds>,
    dir: &CString,
    paths: &[CString],
    argp: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    err: i32,
) -> ! {
    let fail = |errno: i32, step: u8| -> ! {
        let e = errno.to_le_bytes();
        let msg = [e[0], e[1], e[2], e[3], step];
        // SAFETY: writing 5 bytes from the stack, then _exit.
        unsafe {
            libc::write(err, msg.as_ptr().cast(), msg.len());
            libc::_exit(127)
        }
    };
    let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    // SAFETY: system calls on our own process with valid arguments.
    unsafe {
        libc::setpgid(0, 0);
        // Signals as a fresh program expects them: none blocked, SIGPIPE
        // (ignored by the Rust runtime) back to its default.
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        for &(n, fd) in moves {
            if libc::dup2(fd, n) < 0 {
                fail(errno(), 0);
            }
        }
        // Nothing else the daemon holds reaches the program.
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 4u32);
        if let Some(o) = owner {
            let (g, u) = (o.gid as libc::c_long, o.uid as libc::c_long);
            if libc::syscall(libc::SYS_setgroups, o.groups.len(), o.groups.as_ptr()) != 0
                || libc::syscall(libc::SYS_setresgid, g, g, g) != 0
                || libc::syscall(libc::SYS_setresuid, u, u, u) != 0
            {
                fail(errno(), 2);
            }
        }
        if libc::chdir(dir.as_ptr()) != 0 {
            fail(errno(), 1);
        }
        let mut last = libc::ENOENT;
        for p in paths {
            libc::execve(p.as_ptr(), argp.as_ptr(), envp.as_ptr());
            let e = errno();
            // As execvp: a directory that lacks it or may not be searched
            // is skipped; anything else is the answer.
            if e != libc::ENOENT && e != libc::ENOTDIR && e != libc::EACCES {
                fail(e, 0);
            }
            if e == libc::EACCES || last == libc::ENOENT {
                last = e;
            }
        }
        fail(last, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_search_follows_the_programs_path() {
        let env = vec![("PATH".to_string(), "/a::/b".to_string())];
        let got: Vec<_> = candidates("xz", &env)
            .unwrap()
            .into_iter()
            .map(|c| c.into_string().unwrap())
            .collect();
        assert_eq!(got, ["/a/xz", "./xz", "/b/xz"]);
        assert_eq!(candidates("./p", &env).unwrap().len(), 1);
        assert!(candidates("x\0y", &env).is_err());
        assert_eq!(candidates("sh", &[]).unwrap().len(), 3);
    }
}
