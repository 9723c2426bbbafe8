//! Who may ask what: the peer of a connection and the owner check.
//!
//! Local clients reach the daemon through its unix **control socket**
//! (by default `DIR/node-PORT.sock`, see [`crate::rundir`]; clients
//! `--node unix:PATH`, or a loopback `HOST:PORT` without a secret); the
//! kernel tells who they are (`SO_PEERCRED`, `SO_PEERGROUPS`). Such a client
//! may checkpoint or migrate a program only if it is root or the program's
//! owner (its real, effective and saved uids are all the client's, the rule
//! of ptrace); a program it runs gets its ids (the daemon must be root to
//! start programs for other users). The control socket serves client
//! requests only; node-to-node traffic is TCP.
//!
//! TCP peers are not identified by the kernel (on loopback, any local user
//! can connect). Over TCP the daemon serves only peers that proved they
//! hold the nodes' shared secret (nodes, administrators: they act as the
//! daemon's user); anyone else gets `ps` and nothing else, [`Msg::Denied`]
//! for every request that would run code, write files or move processes.
//! Without a secret a daemon listens on loopback only ([`check_listen`]).

use crate::proto::Msg;
use halfproc_migrate::Creds;
use std::os::fd::AsRawFd;

/// The other end of a connection.
#[derive(Debug, Clone)]
pub enum Peer {
    /// A client on the control socket.
    Local(Creds),
    /// A TCP peer; `authenticated` if it proved it holds the shared secret.
    Network { authenticated: bool },
}

/// The credentials of the process at the other end of a unix socket.
pub fn local_peer(s: &tokio::net::UnixStream) -> std::io::Result<Creds> {
    let c = s.peer_cred()?;
    let mut groups = vec![0u32; 256];
    let mut len = (groups.len() * 4) as libc::socklen_t;
    // SAFETY: getsockopt into a buffer of `len` bytes we own.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERGROUPS,
            groups.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    groups.truncate(len as usize / 4);
    Ok(Creds {
        uid: c.uid(),
        gid: c.gid(),
        groups,
    })
}

/// What a request runs as once admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admit {
    /// Go ahead with the daemon's own credentials.
    AsDaemon,
    /// Go ahead; a program it starts gets these credentials.
    As(Creds),
}

fn denied(s: String) -> String {
    s
}

/// Whether `peer` may make request `m` at all (the owner of a target
/// process is checked by [`may_act`]). `daemon_uid`: the daemon's
/// effective uid; `control`: its control socket, named in the refusal.
/// The error is the text of a [`Msg::Denied`].
pub fn admit(
    peer: &Peer,
    m: &Msg,
    daemon_uid: u32,
    control: Option<&std::path::Path>,
) -> Result<Admit, String> {
    let client = matches!(
        m,
        Msg::Run { .. }
            | Msg::RestoreDir { .. }
            | Msg::Ps
            | Msg::Migrate { .. }
            | Msg::Checkpoint { .. }
            | Msg::Resolve { .. }
    );
    match peer {
        Peer::Network {
            authenticated: false,
        } if !matches!(m, Msg::Ps) => {
            let local = match control {
                Some(p) => format!("--node unix:{}", p.display()),
                None => "--node unix:PATH".into(),
            };
            Err(denied(format!(
                "this node has no shared secret: over TCP it serves `ps` only, since any local \
                 user can reach a loopback port. Local clients use its control socket ({local}; \
                 a loopback --node finds it without a secret); nodes and remote clients need the \
                 same --secret-file (or ${}) on every node",
                crate::proto::SECRET_ENV
            )))
        }
        Peer::Network { .. } => Ok(Admit::AsDaemon),
        Peer::Local(c) => {
            if !client {
                return Err(denied(
                    "the control socket serves client requests only (nodes talk over TCP)".into(),
                ));
            }
            let starts = matches!(m, Msg::Run { .. } | Msg::RestoreDir { .. });
            if !starts || c.uid == daemon_uid {
                Ok(Admit::AsDaemon)
            } else if daemon_uid == 0 {
                Ok(Admit::As(c.clone()))
            } else {
                Err(denied(format!(
                    "the node daemon runs as uid {daemon_uid} and cannot start programs as \
                     uid {}",
                    c.uid
                )))
            }
        }
    }
}

/// Whether the daemon may listen on `addr`: without a shared secret only on
/// a loopback address (a network peer could otherwise run programs as the
/// daemon's user, and a node could not tell its peers from strangers).
/// The error names the flag.
pub fn check_listen(addr: &std::net::SocketAddr, secret: bool) -> Result<(), String> {
    if secret || addr.ip().is_loopback() {
        return Ok(());
    }
    Err(format!(
        "refusing to listen on {addr} without a shared secret: anyone who reaches it could run \
         programs as this daemon's user (uid {}). Give every node and client the same \
         --secret-file FILE (or ${}), or listen on a loopback address (127.0.0.1)",
        crate::rundir::euid(),
        crate::proto::SECRET_ENV
    ))
}

/// Whether `peer` may `what` (checkpoint, migrate, resolve) process `pid`,
/// whose /proc status is `status`: root, or its owner. TCP peers were
/// admitted by [`admit`]. A process that is not `dumpable` by its owner
/// ([`halfproc_migrate::creds::status_dumpable`]) may be checkpointed or
/// migrated only by root through a root daemon: the kernel lets only
/// `CAP_SYS_PTRACE` read its memory and mapped files, and the image (its
/// `files.img` too) or the copy, dumpable again at the destination, would
/// hand them to its owner (or the daemon could not read it at all).
/// The error is the text of a [`Msg::Denied`].
pub fn may_act(
    peer: &Peer,
    target: (i32, &str, bool),
    daemon_uid: u32,
    what: &str,
) -> Result<(), String> {
    let (pid, status, dumpable) = target;
    let root = match peer {
        Peer::Local(c) if c.uid != 0 => {
            match Creds::from_status(status) {
                Ok(owner) if owner.uid == c.uid => {}
                Ok(owner) => {
                    return Err(denied(format!(
                        "permission denied: pid {pid} belongs to uid {}, you are uid {}; only \
                         its owner or root may {what} it",
                        owner.uid, c.uid
                    )))
                }
                Err(e) => {
                    return Err(denied(format!(
                        "permission denied: pid {pid}: {e}; only root may {what} it"
                    )))
                }
            }
            false
        }
        _ => true,
    };
    if dumpable || what == "resolve" || (root && daemon_uid == 0) {
        return Ok(());
    }
    let who = if daemon_uid != 0 {
        format!("this node daemon runs as uid {daemon_uid}")
    } else {
        "you are not root".to_string()
    };
    Err(denied(format!(
        "permission denied: pid {pid} is not dumpable (it called prctl(PR_SET_DUMPABLE, 0), \
         runs a program its owner may not read, or changed its ids): only root may read its \
         memory and mapped files, so only root through a root daemon may {what} it, and {who}"
    )))
}

/// A request on program `pid` as [`admit_target`] admitted it: checked
/// again ([`Admitted::recheck`]) once the program is stopped, before
/// anything of it is read, since between the two it may have run a
/// set-user/group-ID program or one its owner may not read, or called
/// `prctl(PR_SET_DUMPABLE, 0)`.
#[derive(Debug, Clone)]
pub struct Admitted {
    peer: Peer,
    pid: i32,
    /// `Uid:` and `Gid:` of `/proc/PID/status` (real, effective, saved, fs).
    ids: Option<([u32; 4], [u32; 4])>,
    daemon_uid: u32,
    what: &'static str,
}

fn ids_of(status: &str) -> Option<([u32; 4], [u32; 4])> {
    use halfproc_migrate::creds::status_ids;
    Some((status_ids(status, "Uid:")?, status_ids(status, "Gid:")?))
}

/// [`may_act`] on live program `pid` as it is now. A `/proc/PID/status`
/// that cannot be read refuses (it is not taken as dumpable). The error
/// is the text of a [`Msg::Denied`].
pub fn admit_target(
    peer: &Peer,
    pid: i32,
    daemon_uid: u32,
    what: &'static str,
) -> Result<Admitted, String> {
    let (status, dumpable) = halfproc_migrate::creds::status_dumpable(pid).map_err(|e| {
        denied(format!(
            "pid {pid}: cannot read /proc/{pid}/status ({e}), so whether you may {what} it is \
             unknown; refused"
        ))
    })?;
    may_act(peer, (pid, &status, dumpable), daemon_uid, what)?;
    Ok(Admitted {
        peer: peer.clone(),
        pid,
        ids: ids_of(&status),
        daemon_uid,
        what,
    })
}

impl Admitted {
    /// The same request admitted for process `pid` as it is now (another
    /// process of the program's tree). The error is the text of a
    /// [`Msg::Denied`].
    pub fn for_pid(&self, pid: i32) -> Result<Admitted, String> {
        admit_target(&self.peer, pid, self.daemon_uid, self.what)
    }

    /// Whether the request may still act on the (now stopped) program:
    /// its ids are those it was admitted with and [`may_act`] still holds
    /// (it is still dumpable, unless root asks through a root daemon). The
    /// error is the text of a [`Msg::Denied`].
    pub fn recheck(&self) -> Result<(), String> {
        self.recheck_then("so it was let go as it was, nothing of it read")
    }

    /// [`recheck`](Self::recheck) of a running program after a pre-copy
    /// round's read, before that read is sent.
    pub fn recheck_precopy(&self) -> Result<(), String> {
        self.recheck_then(
            "seen after a pre-copy read, before that read was sent: nothing read since the \
             change was sent, the program was never stopped",
        )
    }

    fn recheck_then(&self, then: &str) -> Result<(), String> {
        let (pid, what) = (self.pid, self.what);
        let after = |why: String| {
            denied(format!(
                "{why}; it changed after the {what} request was admitted, {then}"
            ))
        };
        let (status, dumpable) = halfproc_migrate::creds::status_dumpable(pid)
            .map_err(|e| after(format!("pid {pid}: cannot read /proc/{pid}/status ({e})")))?;
        let now = ids_of(&status);
        if now != self.ids {
            let show = |i: Option<([u32; 4], [u32; 4])>| match i {
                Some((u, g)) => format!("uids {u:?}, gids {g:?}"),
                None => "none".to_string(),
            };
            return Err(after(format!(
                "permission denied: pid {pid} changed its ids ({} when admitted, {} now: it ran \
                 a set-user/group-ID program or changed them itself)",
                show(self.ids),
                show(now)
            )));
        }
        may_act(&self.peer, (pid, &status, dumpable), self.daemon_uid, what).map_err(after)
    }
}

/// An image directory a client names must be absolute (its client makes
/// it so): a relative one would be resolved from the daemon's working
/// directory. The error is the reply's text.
pub fn image_path(dir: &str) -> Result<&std::path::Path, String> {
    let p = std::path::Path::new(dir);
    match p.is_absolute() {
        true => Ok(p),
        false => Err(format!(
            "image directory {dir:?} is not an absolute path (the daemon does not resolve \
             paths from its own working directory)"
        )),
    }
}

/// How long a request on a program waits between its admission and the
/// freeze: 0 unless `HALFPROC_TEST_ADMIT_DELAY_MS` (read once, in a debug
/// build) says so, for
/// the tests of [`Admitted::recheck`], which change the program meanwhile.
pub fn test_admit_delay() {
    static D: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    test_delay(&D, "HALFPROC_TEST_ADMIT_DELAY_MS");
}

/// How long a migration's first pre-copy read is held before its check
/// ([`Admitted::recheck_precopy`]) and send: 0 unless `HALFPROC_TEST_PRECOPY_DELAY_MS`
/// (read once) says so, for the test that changes the program meanwhile.
pub fn test_precopy_delay() {
    static D: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    test_delay(&D, "HALFPROC_TEST_PRECOPY_DELAY_MS");
}

/// Debug builds only (the tests' `cargo test`): a release daemon never
/// reads these variables.
fn test_delay(d: &std::sync::OnceLock<u64>, var: &str) {
    if !cfg!(debug_assertions) {
        return;
    }
    let ms = *d.get_or_init(|| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    });
    if ms > 0 {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// Whose rights the daemon's file access for a request has (the image
/// directory `checkpoint` writes, the one `restore` reads): a local
/// client's, unless it is root or the daemon's own user (then the
/// daemon's: a root client of a daemon that is not root gets the daemon's
/// rights, less than its own). A TCP peer holds the shared secret and acts
/// as the daemon's user. A daemon that is not root cannot take another
/// user's rights: [`halfproc_migrate::Creds::with_fs`] fails for it, and
/// the request with it.
pub fn file_creds(peer: &Peer, daemon_uid: u32) -> Option<Creds> {
    match peer {
        Peer::Local(c) if c.uid != 0 && c.uid != daemon_uid => Some(c.clone()),
        _ => None,
    }
}

/// The reason to answer `Denied` (exit 77) for a failed file access `e`
/// made with `fs`'s rights: the client may not reach the path (`EACCES`,
/// `EPERM`), it goes through a `/proc` magic link or puts a symbolic link
/// in place of an image file (`ELOOP`, see
/// [`halfproc_migrate::image_dir`]), or the daemon could not take the
/// client's rights. `None`: another failure (`Error`).
pub fn file_denied(e: &std::io::Error, fs: Option<&Creds>) -> Option<String> {
    let who = match fs {
        Some(c) => format!("uid {} gid {}", c.uid, c.gid),
        None => format!("uid {}", crate::rundir::euid()),
    };
    let denied = e.kind() == std::io::ErrorKind::PermissionDenied;
    denied.then(|| format!("{e} (files are accessed with the rights of {who})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(uid: u32) -> Peer {
        Peer::Local(Creds {
            uid,
            gid: uid,
            groups: vec![],
        })
    }

    const OWNED_BY_1000: &str = "Uid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\n";

    #[test]
    fn only_owner_or_root_may_act() {
        let t = (5, OWNED_BY_1000, true);
        assert!(may_act(&user(1000), t, 0, "migrate").is_ok());
        assert!(may_act(&user(0), t, 0, "migrate").is_ok());
        let Err(e) = may_act(&user(1001), t, 0, "migrate") else {
            panic!("uid 1001 may migrate uid 1000's process");
        };
        assert!(e.contains("belongs to uid 1000, you are uid 1001"), "{e}");
        let suid = OWNED_BY_1000.replace("Uid:\t1000\t1000\t1000", "Uid:\t1000\t0\t0");
        assert!(may_act(&user(1000), (5, &suid, true), 0, "migrate").is_err());
    }

    /// A non-dumpable process: its owner may not checkpoint or migrate it
    /// (the image would hand them what the kernel keeps from them), nor
    /// may anyone through a daemon that is not root; root may.
    #[test]
    fn only_root_may_act_on_a_non_dumpable_process() {
        let t = (5, OWNED_BY_1000, false);
        for what in ["checkpoint", "migrate"] {
            let e = may_act(&user(1000), t, 0, what).unwrap_err();
            assert!(
                e.contains("pid 5 is not dumpable")
                    && e.contains(&format!("only root through a root daemon may {what} it"))
                    && e.contains("you are not root"),
                "{e}"
            );
            assert!(may_act(&user(0), t, 0, what).is_ok());
            let node = Peer::Network {
                authenticated: true,
            };
            assert!(may_act(&node, t, 0, what).is_ok());
            let e = may_act(&node, t, 1000, what).unwrap_err();
            assert!(e.contains("this node daemon runs as uid 1000"), "{e}");
            let e = may_act(&user(0), t, 1000, what).unwrap_err();
            assert!(e.contains("this node daemon runs as uid 1000"), "{e}");
        }
        // A stranger still hears that it is not theirs.
        let e = may_act(&user(1001), t, 0, "checkpoint").unwrap_err();
        assert!(e.contains("belongs to uid 1000"), "{e}");
        // Resolving a migration in doubt reads nothing.
        assert!(may_act(&user(1000), t, 0, "resolve").is_ok());
    }

    /// A target whose /proc status cannot be read (here: gone) is
    /// refused, even for a peer that may act on anything.
    #[test]
    fn an_unreadable_status_refuses() {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id() as i32;
        c.wait().unwrap();
        let node = Peer::Network {
            authenticated: true,
        };
        let e = admit_target(&node, pid, 0, "checkpoint").unwrap_err();
        assert!(
            e.contains(&format!("cannot read /proc/{pid}/status")),
            "{e}"
        );
        let me = std::process::id() as i32;
        let mut a = admit_target(&node, me, 0, "checkpoint").unwrap();
        assert!(a.recheck().is_ok());
        // Ids other than those admitted (as after an exec of a
        // set-user-ID program) are refused, for root too.
        a.ids = Some(([1; 4], [1; 4]));
        let e = a.recheck().unwrap_err();
        assert!(
            e.contains(&format!("pid {me} changed its ids"))
                && e.contains("uids [1, 1, 1, 1], gids [1, 1, 1, 1] when admitted")
                && e.contains("it changed after the checkpoint request was admitted"),
            "{e}"
        );
    }

    #[test]
    fn image_paths_must_be_absolute() {
        assert!(image_path("/tmp/img").is_ok());
        let e = image_path("img").unwrap_err();
        assert!(e.contains("not an absolute path"), "{e}");
    }

    #[test]
    fn programs_run_as_the_local_client() {
        let run = Msg::Run {
            argv: vec!["true".into()],
            cwd: "/".into(),
            env: vec![],
        };
        let Ok(Admit::As(c)) = admit(&user(1000), &run, 0, None) else {
            panic!("root daemon must run it as the client");
        };
        assert_eq!(c.uid, 1000);
        assert!(matches!(
            admit(&user(1000), &run, 1000, None),
            Ok(Admit::AsDaemon)
        ));
        assert!(admit(&user(1001), &run, 1000, None).is_err());
        let node_msg = Msg::Commit;
        assert!(admit(&user(0), &node_msg, 0, None).is_err());
    }

    /// Without the secret, a TCP peer (any local user on loopback) gets
    /// `ps` and nothing that runs code, writes files or moves processes.
    #[test]
    fn tcp_without_the_secret_gets_ps_only() {
        let anon = Peer::Network {
            authenticated: false,
        };
        let node = Peer::Network {
            authenticated: true,
        };
        let origin = crate::proto::Origin {
            addr: "x:1".into(),
            node: 1,
            session: 1,
        };
        let code_runners = [
            Msg::Run {
                argv: vec!["sh".into()],
                cwd: "/".into(),
                env: vec![],
            },
            Msg::RestoreDir { dir: "/x".into() },
            Msg::Checkpoint {
                pid: 1,
                dir: "/etc".into(),
                kill: false,
                with_files: false,
            },
            Msg::Migrate {
                pid: 1,
                to: "x:1".into(),
            },
            Msg::Resolve {
                pid: 1,
                force: Some(false),
            },
            Msg::PreCopy,
            Msg::Offer {
                program: "p".into(),
                owner: Box::new(Creds {
                    uid: 0,
                    gid: 0,
                    groups: vec![],
                }),
                origin: origin.clone(),
                image_bytes: 0,
                mapped: Default::default(),
                precopy: false,
                tree: vec![],
            },
            Msg::MigrateIn {
                id: 1,
                ticket: 1,
                origin,
                gen: 1,
                stdin_offset: 0,
                program: "p".into(),
                owner: Box::new(Creds {
                    uid: 0,
                    gid: 0,
                    groups: vec![],
                }),
                manifest: vec![],
                included: None,
            },
            Msg::Attach {
                session: 1,
                gen: 1,
                node: "x".into(),
                pid: 1,
            },
            Msg::Outcome { id: 1 },
        ];
        let sock = std::path::Path::new("/run/halfproc/node-7070.sock");
        for m in &code_runners {
            let e = admit(&anon, m, 1000, Some(sock)).expect_err(&format!("{m:?} admitted"));
            assert!(
                e.contains("no shared secret")
                    && e.contains("--node unix:/run/halfproc/node-7070.sock"),
                "{e}"
            );
            assert_eq!(admit(&node, m, 1000, None), Ok(Admit::AsDaemon));
        }
        assert_eq!(admit(&anon, &Msg::Ps, 1000, None), Ok(Admit::AsDaemon));
    }

    #[test]
    fn no_secret_means_loopback_only() {
        let any: std::net::SocketAddr = "0.0.0.0:7070".parse().unwrap();
        let e = check_listen(&any, false).unwrap_err();
        assert!(
            e.contains("--secret-file") && e.contains("0.0.0.0:7070"),
            "{e}"
        );
        assert!(check_listen(&"[::]:1".parse().unwrap(), false).is_err());
        assert!(check_listen(&"10.1.2.3:1".parse().unwrap(), false).is_err());
        assert!(check_listen(&any, true).is_ok());
        assert!(check_listen(&"127.0.0.1:0".parse().unwrap(), false).is_ok());
        assert!(check_listen(&"[::1]:0".parse().unwrap(), false).is_ok());
    }
}
