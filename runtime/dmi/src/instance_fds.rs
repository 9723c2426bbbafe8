// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! What a new compute instance closes of its node's runtime (`serve.rs`):
//! the descriptors the fork copied that the instance must not use or carry.

/// In a new instance: closes the descriptors of the node's runtime that the
/// fork copied (sockets, epoll/event/pid fds, memfds, all close-on-exec as
/// the runtime makes them): the instance uses none of them, and the
/// migration engine could not carry them at `DMI_yield`. Files, pipes and
/// terminals stay, and so do the program's own sockets unless it made
/// them close-on-exec.
pub(crate) fn close_node_fds() {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<(i32, String)> = dir
        .flatten()
        .filter_map(|e| {
            let fd = e.file_name().to_str()?.parse().ok()?;
            let l = std::fs::read_link(e.path()).ok()?;
            Some((fd, l.to_string_lossy().into_owned()))
        })
        .collect();
    for (fd, target) in fds {
        let runtime = target.starts_with("socket:")
            || target.starts_with("anon_inode:")
            || target.starts_with("/memfd:");
        // SAFETY: F_GETFD on a descriptor number; no memory is passed.
        let cloexec = unsafe { libc::fcntl(fd, libc::F_GETFD) } & libc::FD_CLOEXEC != 0;
        if fd > 2 && runtime && cloexec {
            // SAFETY: closing a descriptor of the node's runtime, which
            // nothing in this single-threaded instance uses.
            unsafe { libc::close(fd) };
        }
    }
}

/// In a movable run's instance: closes the sockets the fork copied (the
/// node's listening socket is not close-on-exec); the program opened none
/// before `DMI_init`.
pub(crate) fn close_sockets() {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = dir
        .flatten()
        .filter_map(|e| {
            let fd: i32 = e.file_name().to_str()?.parse().ok()?;
            let l = std::fs::read_link(e.path()).ok()?;
            (fd > 2 && l.to_string_lossy().starts_with("socket:")).then_some(fd)
        })
        .collect();
    for fd in fds {
        // SAFETY: a socket of the node's runtime, unused by the instance.
        unsafe { libc::close(fd) };
    }
}
