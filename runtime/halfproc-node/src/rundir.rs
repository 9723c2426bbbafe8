//! Where a node's unix control socket lives by default, and how a local
//! client finds it.
//!
//! A daemon started without `--control` serves local clients on
//! `DIR/node-PORT.sock` (PORT: its TCP port), DIR being
//! `$HALFPROC_RUN_DIR`, else `/run/halfproc` for root, else
//! `$XDG_RUNTIME_DIR/halfproc`, else `/tmp/halfproc-UID`. The daemon
//! creates DIR (root: mode 0755, the socket 0666, the peer's credentials
//! decide; anyone else: 0700) and refuses one that another user owns or
//! could write to.
//!
//! A client given a loopback `HOST:PORT` (the default `127.0.0.1:7070`
//! included) and no shared secret talks to `DIR/node-PORT.sock` instead of
//! TCP when it exists, its own DIR first, then root's: over TCP a node
//! without a secret serves `ps` only. It trusts a directory only if the
//! client's user or root owns it and no one else may write to it (else a
//! stranger's socket could collect its environment and stdin).

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Environment variable overriding the directory of the control sockets.
pub const RUN_DIR_ENV: &str = "HALFPROC_RUN_DIR";
/// Root's directory of control sockets.
pub const ROOT_DIR: &str = "/run/halfproc";

/// This process's effective user id.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// The directory of `uid`'s control sockets (not created).
pub fn dir_for(uid: u32) -> PathBuf {
    let env = |k: &str| {
        std::env::var_os(k)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if let Some(d) = env(RUN_DIR_ENV) {
        return d;
    }
    if uid == 0 {
        return PathBuf::from(ROOT_DIR);
    }
    match env("XDG_RUNTIME_DIR") {
        Some(d) => d.join("halfproc"),
        None => PathBuf::from(format!("/tmp/halfproc-{uid}")),
    }
}

/// The socket of the node listening on TCP `port`, in `dir`.
pub fn socket_in(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!("node-{port}.sock"))
}

/// Daemon side: creates (if needed) and checks this user's directory and
/// returns the path of the control socket for TCP `port`.
pub fn daemon_socket(port: u16) -> io::Result<PathBuf> {
    let uid = euid();
    let dir = dir_for(uid);
    let ctx = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!(
                "control socket directory {}: {e} (choose another with --control PATH or ${RUN_DIR_ENV})",
                dir.display()
            ),
        )
    };
    let mode = if uid == 0 { 0o755 } else { 0o700 };
    match std::fs::DirBuilder::new().mode(mode).create(&dir) {
        Ok(()) => {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).map_err(ctx)?
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(mode)
                .create(&dir)
                .map_err(ctx)?;
        }
        Err(e) => return Err(ctx(e)),
    }
    let md = std::fs::symlink_metadata(&dir).map_err(ctx)?;
    let others = if uid == 0 { 0o022 } else { 0o077 };
    if !md.is_dir() || md.uid() != uid || md.mode() & others != 0 {
        return Err(ctx(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "must be a directory of uid {uid} with mode {mode:04o} (it is {} of uid {}, mode {:04o})",
                if md.is_dir() { "a directory" } else { "not a directory" },
                md.uid(),
                md.mode() & 0o7777
            ),
        )));
    }
    Ok(socket_in(&dir, port))
}

/// Whether a client of uid `uid` may trust the sockets in `dir`: a
/// directory owned by it or root that no one else may write to.
fn trusted(dir: &Path, uid: u32) -> bool {
    std::fs::symlink_metadata(dir)
        .is_ok_and(|md| md.is_dir() && (md.uid() == uid || md.uid() == 0) && md.mode() & 0o022 == 0)
}

/// Client side: the control socket of the node at loopback TCP `port`, if
/// one exists in a trusted directory (this user's, then root's).
pub fn client_socket(port: u16) -> Option<PathBuf> {
    let uid = euid();
    let mut dirs = vec![dir_for(uid)];
    if dirs[0] != Path::new(ROOT_DIR) {
        dirs.push(PathBuf::from(ROOT_DIR));
    }
    dirs.into_iter()
        .filter(|d| trusted(d, uid))
        .map(|d| socket_in(&d, port))
        .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket()))
}

/// The loopback port of a node address `HOST:PORT` (`localhost` or a
/// loopback IP), if it is one.
pub fn loopback_port(addr: &str) -> Option<u16> {
    if let Ok(sa) = addr.parse::<std::net::SocketAddr>() {
        return sa.ip().is_loopback().then_some(sa.port());
    }
    let (host, port) = addr.rsplit_once(':')?;
    (host == "localhost").then(|| port.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses_only() {
        assert_eq!(loopback_port("127.0.0.1:7070"), Some(7070));
        assert_eq!(loopback_port("[::1]:7071"), Some(7071));
        assert_eq!(loopback_port("localhost:9"), Some(9));
        assert_eq!(loopback_port("10.0.0.2:7070"), None);
        assert_eq!(loopback_port("0.0.0.0:7070"), None);
        assert_eq!(loopback_port("example.org:7070"), None);
        assert_eq!(loopback_port("unix:/x"), None);
    }

    #[test]
    fn a_directory_others_may_write_is_not_trusted() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("d");
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(trusted(&d, euid()));
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(!trusted(&d, euid()));
        assert!(!trusted(&t.path().join("missing"), euid()));
    }
}
